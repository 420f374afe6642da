"""The website builder (course_tools/site.py) on a small course of its own.

A repository with a README, one lesson, a solution and an exercise, and executed copies as
`course run` writes them (one with a plot), is built into a site with Sphinx; the test reads the
pages as a visitor would and checks that `site.check` finds nothing wrong, then breaks an image
and a link and checks that it says so. `make site` (CI: .ci/run) builds and checks the real
course the same way.
"""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path

import nbformat
import pytest
from helpers import require_or_skip

from course_tools import browser, site

REPOSITORY = "https://github.com/example-org/example-course"


@pytest.fixture
def chromium() -> None:
    """Skipped without Chromium, failed instead in CI (.ci/run sets COURSE_REQUIRE=browser,...)."""
    require_or_skip("browser", browser.missing())


needs_chromium = pytest.mark.usefixtures("chromium")
#: What `course run` records in an executed copy's metadata.
RECORD = {
    "profile": "quick",
    "devices": 3,
    "device_kind": "CPU",
    "data": "synthetic",
    "tensorflow": "2.21.0",
    "keras": "3.15.1",
    "python": "3.11.7",
    "date": "2026-11-24",
    "seconds": 12.5,
}


def png() -> str:
    """A small real PNG (a matplotlib figure), base64 as in a notebook output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(2, 1))
    axes.plot([0, 1], [1, 0])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def notebook(title: str, outputs: list | None = None):
    cell = nbformat.v4.new_code_cell("print('hello')", execution_count=1 if outputs else None)
    cell.outputs = outputs or []
    return nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell(f"# {title}\n\nWhat it teaches."), cell],
        metadata={  # as the course's notebooks carry it
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    (root / "pyproject.toml").write_text(f'[project.urls]\nRepository = "{REPOSITORY}"\n')
    (root / "course_utils").mkdir()
    (root / "README.md").write_text(
        "# A course\n\n"
        "Start with [the first lesson](notebooks/01_lesson.ipynb), then "
        "[the exercise](exercises/02_task.ipynb).\n"
        "The [support package](course_utils/) and [its settings](pyproject.toml).\n"
        "[Grading](course_tools/README.md#the-graders-modules), a section of another page.\n"
        "See [TensorFlow](https://www.tensorflow.org/).\n"
    )
    build = root / "build"
    build.mkdir()
    plot = nbformat.v4.new_output("display_data", data={"image/png": png(), "text/plain": "fig"})
    text = nbformat.v4.new_output("stream", name="stdout", text="hello\n")
    for folder, name, outputs in (
        ("notebooks", "01_lesson.ipynb", [text, plot]),
        ("solutions", "02_task_solution.ipynb", [text]),
        ("exercises", "02_task.ipynb", None),
    ):
        (root / folder).mkdir()
        nbformat.write(notebook(name, None), root / folder / name)
        if outputs:
            executed = notebook(name, outputs)
            executed.metadata["course_run"] = RECORD
            nbformat.write(executed, build / name)
    return root


@pytest.fixture(scope="module")
def html(course) -> Path:
    return site.build(course, course / "build")


@needs_chromium
def test_every_page_is_built_and_the_check_finds_nothing_wrong(course, html):
    pages = site.page_paths(course)
    assert pages == [
        "notebooks/01_lesson.ipynb",
        "exercises/02_task.ipynb",
        "solutions/02_task_solution.ipynb",
    ]
    assert site.check(html, pages) == []


def test_a_page_says_what_produced_it_and_links_to_colab_and_source(html):
    page = (html / "notebooks" / "01_lesson.html").read_text()
    for words in ("profile", "quick", "3 simulated CPU devices", "synthetic stand-in", "2.21.0"):
        assert words in page
    path = "blob/main/notebooks/01_lesson.ipynb"
    assert f"https://colab.research.google.com/github/example-org/example-course/{path}" in page
    assert f"{REPOSITORY}/{path}" in page
    assert "hello" in page  # the outputs, as executed
    handout = (html / "exercises" / "02_task.html").read_text()
    assert "without outputs" in handout


def test_the_readme_is_the_home_page_with_links_that_resolve(html):
    home = (html / "index.html").read_text()
    assert 'href="notebooks/01_lesson.html"' in home
    assert f'href="{REPOSITORY}/tree/main/course_utils"' in home
    assert f'href="{REPOSITORY}/blob/main/pyproject.toml"' in home
    # a link to a section of a repository file keeps its anchor (GitHub's page has the heading's)
    assert f'href="{REPOSITORY}/blob/main/course_tools/README.md#the-graders-modules"' in home


@needs_chromium
def test_the_check_reports_a_missing_image_and_a_broken_link(course, html, tmp_path):
    broken = tmp_path / "html"
    shutil.copytree(html, broken)
    shutil.copytree(html.parent / "source", tmp_path / "source")  # check reads the notebooks
    for image in (broken / "_images").iterdir():
        image.unlink()
    page = broken / "solutions" / "02_task_solution.html"
    page.write_text(
        page.read_text().replace("</article>", '<a href="../nowhere.html">x</a></article>')
    )
    problems = "\n".join(site.check(broken, site.page_paths(course)))
    assert "notebooks/01_lesson.html: image _images/" in problems
    assert "shows 0 of its 1 output images" in problems
    assert "solutions/02_task_solution.html: a ../nowhere.html (no such file)" in problems


def test_without_chromium_the_site_is_built_and_says_its_images_were_not_checked(course, html):
    problems = site.check(html, site.page_paths(course), chromium="/nonexistent/chromium")
    assert problems == [
        "images not checked: Chromium not found at /nonexistent/chromium (Debian: apt-get "
        "install chromium)"
    ]
    assert not site.failed(problems, browser_required=False)  # said, not failed: pages are there
    assert site.failed(problems, browser_required=True)  # CI: COURSE_REQUIRE=browser,...
    assert site.failed(["page missing: 01_lesson.html"], browser_required=False)


def test_without_executed_copies_the_build_says_to_run_the_course(course, tmp_path):
    with pytest.raises(site.SiteError, match="run `course run`"):
        site.prepare(course, tmp_path / "empty", tmp_path / "source")
    stale = tmp_path / "stale"
    shutil.copytree(course / "build", stale, ignore=shutil.ignore_patterns("site"))
    executed = nbformat.read(stale / "01_lesson.ipynb", as_version=4)
    del executed.metadata["course_run"]
    nbformat.write(executed, stale / "01_lesson.ipynb")
    with pytest.raises(site.SiteError, match="does not say what produced it"):
        site.prepare(course, stale, tmp_path / "source2")


def test_the_pages_workflow_publishes_a_real_data_build_of_this_site():
    """GitHub Pages: the workflow runs `make site` with real data and uploads what it built."""
    import yaml
    from helpers import ROOT

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    build = workflow["jobs"]["build"]
    assert build["env"]["COURSE_DATA"] == "tfds"  # real data, or the run fails
    assert build["env"]["COURSE_REQUIRE"] == "browser"  # every image checked, or the run fails
    commands = [step.get("run", "") for step in build["steps"]]
    assert any(command.startswith("make site") for command in commands)
    uploads = [s for s in build["steps"] if "upload-pages-artifact" in s.get("uses", "")]
    assert [u["with"]["path"] for u in uploads] == ["build/site/html"]  # where site.build writes
    assert workflow["jobs"]["deploy"]["needs"] == "build"
