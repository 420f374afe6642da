"""Open in Colab: badges and install cells from the one repository address, silent elsewhere."""

import sys
import types

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from course_tools import colab
from course_tools.paths import course_notebooks


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: p.name)
def test_badge_and_install_cell_follow_the_repository_address(path):
    assert colab.problems(path) == []


def test_the_address_is_written_once():
    assert colab.repository_url().startswith("https://github.com/")
    readme = (colab.ROOT / "README.md").read_text()
    assert colab.badge("notebooks/01_keras_fit_mnist.ipynb") in readme


def run_install_cell(
    monkeypatch, *, in_colab: bool, notebook: str = "notebooks/01_keras_fit_mnist.ipynb"
) -> list[tuple[str, str]]:
    """Execute the install cell of `notebook` as IPython would, recording the magics it runs."""
    python = TransformerManager().transform_cell(colab.install_cell_source(notebook))
    calls = []
    shell = types.SimpleNamespace(run_line_magic=lambda name, line: calls.append((name, line)))
    if in_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    exec(python, {"get_ipython": lambda: shell})
    return calls


def test_install_cell_does_nothing_outside_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert run_install_cell(monkeypatch, in_colab=False) == []


def test_install_cell_pip_installs_only_the_student_package_in_colab(monkeypatch):
    for notebook in ("notebooks/01_keras_fit_mnist.ipynb", "exercises/05_svhn_exercise.ipynb"):
        ((name, line),) = run_install_cell(monkeypatch, in_colab=True, notebook=notebook)
        assert name == "pip"
        assert line == f'install --quiet "course-utils @ git+{colab.repository_url()}"'


def test_the_solutions_install_cell_adds_the_tools_for_its_hidden_tests(monkeypatch):
    notebook = "solutions/05_svhn_solution.ipynb"
    ((name, line),) = run_install_cell(monkeypatch, in_colab=True, notebook=notebook)
    url = colab.repository_url()
    assert (name, line) == (
        "pip",
        f'install --quiet "course-utils @ git+{url}" '
        f'"course-tools @ git+{url}#subdirectory=course_tools"',
    )


def test_a_fork_changes_the_address_in_one_place(tmp_path):
    text = (colab.ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        text.replace(colab.repository_url(), "https://github.com/me/fork")
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title")])
    colab.apply(notebook, "notebooks/x.ipynb", tmp_path)
    assert "github/me/fork/blob/main/notebooks/x.ipynb" in notebook.cells[1].source
    assert "git+https://github.com/me/fork" in notebook.cells[2].source


def test_links_into_the_repository_use_its_address():
    """Links to files students open on GitHub (e.g. the parity test) follow the one address."""
    import re

    link = r"(https://github\.com/[\w.-]+/[\w.-]+)/blob/[\w.-]+/([\w./-]+)"
    for path in [*course_notebooks(), colab.ROOT / "README.md"]:
        for repo, file in re.findall(link, path.read_text()):
            if (colab.ROOT / file).exists():  # a file of this course, not of another project
                assert repo == colab.repository_url(), f"{path.name}: {repo}/.../{file}"


def test_without_a_repository_address_it_says_where_to_write_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "course-utils"\n')
    with pytest.raises(ValueError, match=r"\[project.urls\] Repository"):
        colab.repository_url(tmp_path)
