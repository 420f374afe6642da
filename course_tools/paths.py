"""Where the course's files are: the checkout, and its notebooks in the one order the course has.

The notebooks are found, never listed: a notebook added to one of the folders joins every tool
(`course run`, `course colab`, the website, the tests) in its place.

Example:
    >>> from course_tools.paths import course_notebooks, course_root
    >>> (course_root() / "notebooks").is_dir()
    True
    >>> [p.parent.name for p in course_notebooks()][-2:]
    ['solutions', 'exercises']
"""

from __future__ import annotations

from pathlib import Path

#: The checkout this package was imported from (the folder above course_tools/).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: The notebook folders, in course order: the lessons, the exercise's solution (run with its
#: outputs), the exercise as handed out (its stubs raise until a student fills them in).
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")
#: The folder whose notebooks are handed out unsolved: run, they stop at their first stub.
HANDOUT_FOLDER = "exercises"
#: Where a notebook writes, under artifacts/ next to it (default: its own stem). The solution and
#: the exercise share one folder: runs of both in one folder go one after the other.
ARTIFACT_DIRS = {"05_svhn_solution": "05_svhn", "05_svhn_exercise": "05_svhn"}


def course_root(start: Path | None = None) -> Path:
    """The course checkout: `start` (default: the current folder) or a parent of it that holds
    notebooks/ and course_utils/, else the folder this package was imported from."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        if (folder / "notebooks").is_dir() and (folder / "course_utils").is_dir():
            return folder
    return PACKAGE_ROOT


def _lesson_order(path: Path) -> tuple[bool, str]:
    """Numbered notebooks (01_..., 03b_...) by name, then the others (appendix_...) by name."""
    return (not path.name[:1].isdigit(), path.name)


def course_notebooks(root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every notebook of the course, in course order: the lessons of notebooks/ (numbered ones by
    name, then the appendices), then solutions/, then exercises/."""
    return [
        path
        for folder in NOTEBOOK_FOLDERS
        for path in sorted((root / folder).glob("*.ipynb"), key=_lesson_order)
    ]


def executed_notebooks(root: Path = PACKAGE_ROOT) -> list[Path]:
    """The notebooks that run clean from top to bottom, in course order: all but the handouts."""
    return [path for path in course_notebooks(root) if path.parent.name != HANDOUT_FOLDER]


def artifacts_folder(notebook: Path) -> Path:
    """The folder `notebook` writes into when it runs in its own folder.

    Example:
        >>> artifacts_folder(Path("build/dev2/05_svhn_exercise.ipynb")).as_posix()
        'build/dev2/artifacts/05_svhn'
    """
    return notebook.parent / "artifacts" / ARTIFACT_DIRS.get(notebook.stem, notebook.stem)
