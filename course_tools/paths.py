"""Where the course's files are: the one way the tools find the course checkout.

Example:
    >>> from course_tools.paths import course_root
    >>> (course_root() / "notebooks").is_dir()
    True
"""

from __future__ import annotations

from pathlib import Path

#: The checkout this package was imported from (an installed package: its site-packages parent).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def course_root(start: Path | None = None) -> Path:
    """The course checkout: `start` (default: the current folder) or a parent of it that holds
    notebooks/ and course_utils/, else the folder this package was imported from."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        if (folder / "notebooks").is_dir() and (folder / "course_utils").is_dir():
            return folder
    return PACKAGE_ROOT
