"""Who each submission is from: one submission per student, named from where the instructor put
it (the student's folder, or the notebook placed in the given folder), never from a file name the
student chose; a name taken twice is an error for the instructor.

Example:

    from course_tools.grade.core import roster
    for s in roster.collect_submissions(["submissions/"]):
        print(s.student, s.path)  # alice submissions/alice/mine.ipynb
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: Files and folders of the grades folder itself, never a student's name (compared ignoring case).
RESERVED_NAMES = frozenset({"gradebook.csv", "canvas.csv", "moodle.csv", "checks.log"})
#: What is copied of a submission's artifacts, in MB (the course's files take a few tens of MB in
#: the full profile); the rest is left out, with a note in the report.


@dataclass(frozen=True)
class Submission:
    student: str
    path: Path


def _folder_name(name: str) -> str:
    """A name as a folder of the grades: characters other than letters, digits, ".", "-" and "_"
    become "_"; leading dots go (never ".", ".." or hidden), and so does a trailing .ipynb (a name
    ending in .ipynb could be the solution kept by `TamperWatch`)."""
    name = re.sub(r"[^\w.-]+", "_", name)
    while name.lower().endswith(".ipynb"):
        name = name[: -len(".ipynb")]
    return name.lstrip(".") or "submission"


def _notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def student_name(path: Path, given: Path | None = None) -> str:
    """The student a submission is from, from where the instructor put it, never from a name the
    student chose: a notebook given by itself, or lying directly in a given folder, is named by
    its file (submissions/alice.ipynb -> alice); anything deeper by its folder directly under the
    given one (submissions/alice/**/*.ipynb -> alice), whatever the file is called inside."""
    if given is None or path.parent == given:
        return _folder_name(path.stem)
    return _folder_name(path.relative_to(given).parts[0])


def collect_submissions(paths: list[str | os.PathLike]) -> list[Submission]:
    """One submission per student (`student_name`) in the notebooks or folders given. A student
    folder holding several notebooks is one submission (graded only when exactly one notebook is
    in it: `several_notebooks`). ValueError when two submissions come out with the same name, or
    one named like a file of the grades (`RESERVED_NAMES`): the instructor renames one.
    """
    found: dict[str, list[Path]] = {}
    origin: dict[str, Path] = {}
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            entries = [(p, student_name(p, given)) for p in _notebooks(given)]
        elif given.exists():
            entries = [(given, student_name(given))]
        else:
            raise FileNotFoundError(
                f"{given} does not exist: give notebooks or folders of notebooks"
            )
        for path, name in entries:
            if path.resolve() in seen:  # the same file given twice (or in a folder given too)
                continue
            seen.add(path.resolve())
            # the file, or the student's folder
            inside = given.is_dir() and path.parent != given
            where = given / path.relative_to(given).parts[0] if inside else path
            key = name.lower()
            if key in RESERVED_NAMES:
                raise ValueError(
                    f"{where} would be graded as {name!r}, a file of the grades folder: rename it"
                )
            if key in origin and origin[key] != where:
                raise ValueError(
                    f"{origin[key]} and {where} are both the submission of {name!r}: rename one "
                    "(a student's name is the name of the notebook or of its folder)"
                )
            origin[key] = where
            found.setdefault(key, []).append(path)
    if not found:
        raise FileNotFoundError(f"no .ipynb file in {', '.join(map(str, paths))}: nothing to grade")
    out = []
    for key, files in found.items():
        where = origin[key]
        name = student_name(files[0], where.parent)
        out.append(Submission(name, files[0] if len(files) == 1 else where))
    return out


def several_notebooks(path: Path) -> list[Path]:
    """The notebooks of a submission that is a student's folder with more than one ([] else)."""
    return _notebooks(path) if Path(path).is_dir() else []
