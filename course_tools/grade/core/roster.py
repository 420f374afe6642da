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

from course_tools.grade.core import files

#: Files and folders of the grades folder itself, never a student's name (compared ignoring case).
RESERVED_NAMES = frozenset({"gradebook.csv", "canvas.csv", "moodle.csv", "checks.log"})


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
    """The notebooks in `folder` and its subfolders, whatever kind of file each one is (a link or
    a FIFO named *.ipynb is reported in its student's row, never read): links to folders are not
    entered, .ipynb_checkpoints is left out, and the walk has no recursion (any depth is safe)."""
    return sorted(
        entry.path
        for entry in files.walk(folder)
        if entry.relative.name.endswith(".ipynb")
        and entry.kind != "a folder"
        and ".ipynb_checkpoints" not in entry.relative.parts
    )


def student_name(path: Path, given: Path | None = None) -> str:
    """The student a submission is from, from where the instructor put it, never from a name the
    student chose: a notebook given by itself, or lying directly in a given folder, is named by
    its file (submissions/alice.ipynb -> alice); anything deeper by its folder directly under the
    given one (submissions/alice/**/*.ipynb -> alice), whatever the file is called inside."""
    if given is None or path.parent == given:
        return _folder_name(path.stem)
    return _folder_name(path.relative_to(given).parts[0])


def _one_students_folder(folder: Path, found: list[Path], *, beside_others: bool) -> bool:
    """Whether a given `folder` is one student's (named after it) rather than a folder of
    students: all its notebooks lie directly in it, and it holds only one, or it was given beside
    other paths (`course grade submissions/*`, a shell glob of student folders)."""
    return (
        bool(found)
        and all(p.parent == folder for p in found)
        and (len(found) == 1 or beside_others)
    )


def _same_file_key(path: Path) -> Path:
    """What tells two given paths of one file apart from two files: the folder resolved (the
    instructor's links), the file's own name not (a student's link to another student's notebook
    is a submission of its own)."""
    return Path(os.path.realpath(path.parent)) / path.name


def collect_submissions(paths: list[str | os.PathLike]) -> list[Submission]:
    """One submission per student (`student_name`) in the notebooks or folders given. A student
    folder holding several notebooks is one submission (graded only when exactly one notebook is
    in it: `several_notebooks`). A folder given is a folder of students, unless it is one
    student's (`_one_students_folder`: then everything in it is that student's). ValueError when
    two submissions come out with the same name, or one named like a file of the grades
    (`RESERVED_NAMES`): the instructor renames one.
    """
    found: dict[str, list[Path]] = {}
    origin: dict[str, Path] = {}
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            inside = _notebooks(given)
            if _one_students_folder(given, inside, beside_others=len(paths) > 1):
                # named as if its parent had been given
                given = Path(os.path.abspath(given))
                entries = [(given / p.name, _folder_name(given.name)) for p in inside]
                parent = given.parent
            else:
                entries = [(p, student_name(p, given)) for p in inside]
                parent = given
        elif os.path.lexists(given):
            entries, parent = [(given, student_name(given))], None
        else:
            raise FileNotFoundError(
                f"{given} does not exist: give notebooks or folders of notebooks"
            )
        for path, name in entries:
            key = _same_file_key(path)
            if key in seen:  # the same file given twice (or in a folder given too)
                continue
            seen.add(key)
            # the file, or the student's folder
            inside_folder = parent is not None and path.parent != parent
            where = parent / path.relative_to(parent).parts[0] if inside_folder else path
            key_name = name.lower()
            if key_name in RESERVED_NAMES:
                raise ValueError(
                    f"{where} would be graded as {name!r}, a file of the grades folder: rename it"
                )
            if key_name in origin and origin[key_name] != where:
                raise ValueError(
                    f"{origin[key_name]} and {where} are both the submission of {name!r}: rename "
                    "one (a student's name is the name of the notebook or of its folder)"
                )
            origin[key_name] = where
            found.setdefault(key_name, []).append(path)
    if not found:
        raise FileNotFoundError(f"no .ipynb file in {', '.join(map(str, paths))}: nothing to grade")
    out = []
    for key_name, notebooks in found.items():
        where = origin[key_name]
        name = student_name(notebooks[0], where.parent)
        out.append(Submission(name, notebooks[0] if len(notebooks) == 1 else where))
    return out


def several_notebooks(path: Path) -> list[Path]:
    """The notebooks of a submission that is a student's folder with more than one ([] else)."""
    path = Path(path)
    return _notebooks(path) if path.is_dir() and not path.is_symlink() else []
