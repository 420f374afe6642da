"""Open in Colab: every notebook gets a badge and a Colab-only install cell, from one address.

The repository's address is written once, as `[project.urls] Repository` in pyproject.toml. An
instructor who forks the course changes it there and runs `course colab`; the badge at the top of
each notebook and the install cell below it are derived from it. `course colab --check` (and the
test suite) fail when a notebook disagrees.

The install cell does nothing outside Colab. Inside Colab it installs the student package,
course-utils, from the repository with pip: its dependency ranges admit Colab's TensorFlow, Keras
and tf_keras, and the Jupyter packages are extras, so pip keeps Colab's own. The solution's cell
adds this package, course-tools (from the repository's course_tools/ folder): its hidden tests
are the grader's checks.

Example:
    >>> from course_tools import colab
    >>> badge = colab.badge("notebooks/01_keras_fit_mnist.ipynb")
    >>> badge.startswith("[![Open In Colab](https://colab.research.google.com/assets/")
    True
    >>> badge.split("](")[-1]  # doctest: +ELLIPSIS
    'https://colab.research.google.com/github/.../blob/main/notebooks/01_keras_fit_mnist.ipynb)'
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from course_tools.paths import PACKAGE_ROOT, course_notebooks, course_root

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

ROOT = PACKAGE_ROOT
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BRANCH = "main"
INSTALL_MARK = "# Colab only:"


def repository_url(root: Path = ROOT) -> str:
    """The repository's address, from pyproject.toml ([project.urls] Repository)."""
    with open(root / "pyproject.toml", "rb") as file:
        project = tomllib.load(file).get("project", {})
    url = project.get("urls", {}).get("Repository", "")
    if not url.startswith("https://github.com/") or url.count("/") < 4:
        raise ValueError(
            "pyproject.toml has no [project.urls] Repository = "
            '"https://github.com/OWNER/NAME": the Colab badges and install cells need it'
        )
    return url.rstrip("/").removesuffix(".git")


def badge(relative_path: str, root: Path = ROOT) -> str:
    """The markdown of the Open in Colab badge of the notebook at `relative_path`."""
    github = repository_url(root).removeprefix("https://github.com/")
    link = f"https://colab.research.google.com/github/{github}/blob/{BRANCH}/{relative_path}"
    return f"[![Open In Colab]({BADGE_IMAGE})]({link})"


def requirements(relative_path: str, root: Path = ROOT) -> list[str]:
    """What the install cell of the notebook at `relative_path` gives pip: the student package;
    for a solution, the tools too (its hidden tests import the grader's checks)."""
    url = repository_url(root)
    student = f"course-utils @ git+{url}"
    if relative_path.split("/")[0] == "solutions":
        return [student, f"course-tools @ git+{url}#subdirectory=course_tools"]
    return [student]


def install_cell_source(relative_path: str, root: Path = ROOT) -> str:
    """The code of the install cell of the notebook at `relative_path`: pip in Colab, nothing
    anywhere else."""
    packages = " ".join(f'"{requirement}"' for requirement in requirements(relative_path, root))
    return (
        f"{INSTALL_MARK} install the course package (TensorFlow, Keras and Jupyter stay "
        f"Colab's).\nimport sys\n\n"
        'if "google.colab" in sys.modules:\n'
        f"    %pip install --quiet {packages}"
    )


def apply(notebook: nbformat.NotebookNode, relative_path: str, root: Path = ROOT) -> None:
    """Put the badge cell and the install cell at the top of `notebook` (replacing older ones)."""
    cells = [
        c
        for c in notebook.cells
        if not (c.cell_type == "markdown" and c.source.startswith("[![Open In Colab]"))
        and not (c.cell_type == "code" and c.source.startswith(INSTALL_MARK))
    ]
    top = nbformat.v4.new_markdown_cell(badge(relative_path, root))
    install = nbformat.v4.new_code_cell(install_cell_source(relative_path, root))
    for cell, name in ((top, "colab-badge"), (install, "colab-install")):
        cell.id = name
    # Keep the notebook's title first, then the badge; the install cell goes before the first code.
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, install)
    cells.insert(1 if cells and cells[0].cell_type == "markdown" else 0, top)
    notebook.cells = cells


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the badge and install cell of `path` (empty: they agree)."""
    notebook = nbformat.read(path, as_version=4)
    relative = path.resolve().relative_to(root).as_posix()
    sources = [c.source for c in notebook.cells]
    found = []
    if badge(relative, root) not in sources:
        found.append(f"{relative}: no badge for {repository_url(root)} (or it points elsewhere)")
    if install_cell_source(relative, root) not in sources:
        found.append(f"{relative}: no Colab install cell for {repository_url(root)}")
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `course colab`."""
    parser.add_argument(
        "--check", action="store_true", help="do not write: exit 1 if a notebook disagrees"
    )


def run(args: argparse.Namespace) -> int:
    """`course colab [--check]`: write (or check) every notebook's badge and install cell."""
    root = course_root()
    wrong = [problem for path in course_notebooks(root) for problem in problems(path, root)]
    if args.check:
        for problem in wrong:
            print(problem, file=sys.stderr)
        return 1 if wrong else 0
    # exercises/ too: `course exercise` applies the same cells to what it generates, so writing
    # them here gives the file it would write.
    for path in course_notebooks(root):
        notebook = nbformat.read(path, as_version=4)
        apply(notebook, path.relative_to(root).as_posix(), root)
        nbformat.write(notebook, path)
    return 0
