"""Who each submission is from: one submission per student, named from where the instructor put
it (the student's folder, or the notebook placed in the given folder), never from a file name the
student chose; a name taken twice is an error for the instructor, in one batch and across the
batches graded into one grades folder (`check_spellings`).

Example:

    from course_tools.grade.core import roster
    for s in roster.collect_submissions(["submissions/"]):
        print(s.student, s.path)  # alice submissions/alice/mine.ipynb
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from course_tools.grade.core import files, report

#: Files and folders of the grades folder itself, never a student's name (compared ignoring case).
#: (Names with a leading dot, such as the grader's own folders .batch and .benchmark, never are:
#: `_folder_name`.) A name that is a folder already in the grades folder and not an earlier
#: grade of the grader's is refused too (`plan.check_out`).
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


def same_name_key(name: str) -> str:
    """What two students' names are compared by: equal after Unicode NFKC normalisation and
    case folding ("Alice", "ALICE" and the full-width "ａｌｉｃｅ" are one name), so that no two
    rows look alike in the terminal, the reports and the CSV files by width or case alone."""
    return unicodedata.normalize("NFKC", name).casefold()


def _is_notebook(entry: files.Entry) -> bool:
    return (
        entry.relative.name.endswith(".ipynb")
        and entry.kind != "a folder"
        and ".ipynb_checkpoints" not in entry.relative.parts
    )


def _walk_student(folder: Path) -> tuple[list[Path], str]:
    """The notebooks in one student's `folder` and its subfolders, whatever kind of file each one
    is (a link or a FIFO named *.ipynb is reported in its student's row, never read), and "" or
    why the walk stopped: a folder past the walk's caps (`files.MAX_ENTRIES`, `files.MAX_DEPTH`)
    gives only the notebooks at its top. Links to folders are not entered, .ipynb_checkpoints is
    left out, and the walk has no recursion (any depth is safe). Each student's folder is walked
    on its own, so a cap one folder hits never hides another student."""
    try:
        return sorted(e.path for e in files.walk(folder, strict=True) if _is_notebook(e)), ""
    except files.TreeTooLarge as exc:
        top = files.walk(folder, max_depth=1, max_entries=2**62)
        return sorted(e.path for e in top if _is_notebook(e)), str(exc)


def _students_in(folder: Path) -> list[tuple[Path, list[Path], str]]:
    """(where, notebooks, why the walk stopped) for each student of a folder of students: each
    notebook directly in it (where: the notebook) and each subfolder (where: the subfolder, walked
    on its own: `_walk_student`), one holding no notebook the walk sees included (its row says
    so: `no_notebook`). Hidden folders (a leading dot: .ipynb_checkpoints, .git) and macOS's
    __MACOSX are no students."""
    out = []
    for entry in files.walk(folder, max_depth=1, max_entries=2**62):
        if entry.kind == "a folder":
            if not entry.relative.name.startswith(".") and entry.relative.name != "__MACOSX":
                out.append((entry.path, *_walk_student(entry.path)))
        elif _is_notebook(entry):
            out.append((entry.path, [entry.path], ""))
    return out


def _same_file_key(path: Path) -> Path:
    """What tells two given paths of one file apart from two files: the folder resolved (the
    instructor's links), the file's own name not (a student's link to another student's notebook
    is a submission of its own)."""
    return Path(os.path.realpath(path.parent)) / path.name


def _a_shell_glob(paths: list[str | os.PathLike]) -> bool:
    """Whether `paths` are several entries of one folder (`course grade submissions/*`): then each
    folder given is one student's. Decided from the paths alone, never from what is inside them."""
    parents = {os.path.dirname(os.path.abspath(p)) for p in paths}
    return len(paths) > 1 and len(parents) == 1


def _given_folder(given: Path, *, one_student: bool) -> list[tuple[Path, list[Path], str]]:
    """(where, notebooks, why the walk stopped) for each student in a folder given. In a shell
    glob of student folders (`one_student`) it is one student's folder, named after it, whatever
    lies inside (several notebooks in it: `several_notebooks`). Given alone, it is one student's
    folder too, named after it, when it holds one notebook directly and no other subfolder
    holding one, or no notebook directly and one subfolder only (`course grade subs/alice` with
    alice/bob/hw.ipynb is alice, never bob, a name alice chose); otherwise it is a folder of
    students: each notebook directly in it, and each of its subfolders, is one student."""
    if one_student:
        return [(given, *_walk_student(given))]
    students = _students_in(given)
    direct = [s for s in students if s[1] == [s[0]]]
    folders = [s for s in students if s not in direct]
    holding = [s for s in folders if s[1] or s[2]]
    if (len(direct) == 1 and not holding) or (not direct and len(folders) == 1):
        return [(given, *_walk_student(given))]
    return students


def _submission_path(where: Path, notebooks: list[Path]) -> Path:
    """What is graded: the notebook when there is exactly one, else the student's folder (several
    notebooks, or none found in a folder too large to walk: its row says why)."""
    return notebooks[0] if len(notebooks) == 1 else where


def collect_submissions(paths: list[str | os.PathLike]) -> list[Submission]:
    """One submission per student in the notebooks or folders given, named by where the
    instructor put it: a notebook given, or lying directly in a folder of students, by its file
    name; a student's folder by its own name (`_given_folder` says which folders are one
    student's). A student folder holding several notebooks is one submission (graded only when
    exactly one notebook is in it: `several_notebooks`); one too large to walk whole is its own
    row too (`too_many_files`), and so is one holding no notebook the walk sees (`no_notebook`).
    ValueError when two submissions come out with the same name
    (compared by `same_name_key`: Unicode look-alikes of width or case are one name), or
    one named like a file of the grades (`RESERVED_NAMES`): the instructor renames one.
    """
    found: dict[str, tuple[Path, str, Path]] = {}
    any_notebook = False
    glob = _a_shell_glob(paths)
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            given = Path(os.path.abspath(given))
            students = _given_folder(given, one_student=glob)
        elif os.path.lexists(given):
            # absolute: the grading processes run in a folder of the grader's, not this one
            given = Path(os.path.abspath(given))
            students = [(given, [given], "")]
        else:
            raise FileNotFoundError(
                f"{given} does not exist: give notebooks or folders of notebooks"
            )
        for where, notebooks, stopped in students:
            # the same file given twice (or in a folder given too) is graded once
            fresh = [p for p in notebooks if _same_file_key(p) not in seen]
            if notebooks and not fresh and not stopped:
                continue
            seen.update(map(_same_file_key, fresh))
            any_notebook = any_notebook or bool(fresh or stopped)
            name = _folder_name(where.stem if where in notebooks else where.name)
            key_name = same_name_key(name)
            if key_name in RESERVED_NAMES:
                raise ValueError(
                    f"{where} would be graded as {name!r}, a file of the grades folder: rename it"
                )
            if key_name in found and found[key_name][0] != where:
                raise ValueError(
                    f"{found[key_name][0]} and {where} are both the submission of {name!r}: "
                    "rename one (a student's name is the name of the notebook or of its folder)"
                )
            found[key_name] = (where, name, _submission_path(where, fresh))
    if not any_notebook:
        raise FileNotFoundError(f"no .ipynb file in {', '.join(map(str, paths))}: nothing to grade")
    return [Submission(name, path) for where, name, path in found.values()]


def check_spellings(out: str | os.PathLike, submissions: list[Submission]) -> None:
    """ValueError (`course grade`: exit code 2) when a submission's name is one name
    (`same_name_key`) with a row already in the gradebooks of `out` (`report.saved_rows`) spelt
    otherwise (`Alice`, `ａｌｉｃｅ` into grades holding `alice`): graded, it would be a second
    row for one student in gradebook.csv and the import files, which keep the rows of earlier
    batches (`report.kept_grades`). Run before anything is written or removed (`plan.check_out`);
    the same spelling graded again replaces its row. Only the folders so named are read (it runs
    for each submission too: `one_submission.grade_one`)."""
    spelt = {same_name_key(s.student): s for s in submissions}

    def spelt_otherwise(name: str) -> bool:
        s = spelt.get(same_name_key(name))
        return s is not None and s.student != name

    for row in report.saved_rows(out, spelt_otherwise):
        s, folder = spelt[same_name_key(row.student)], Path(out) / row.student
        raise ValueError(
            f"{s.path} would be graded as {s.student!r}, but the grades in {out} hold a row "
            f"for {row.student!r} ({folder}), one name spelt otherwise: the gradebooks would "
            f"give that student two rows. Nothing was written or removed: rename the "
            f"submission {row.student!r} to grade that row again, or remove {folder} (its row), "
            f"or give another --out"
        )


def several_notebooks(path: Path) -> list[Path]:
    """The notebooks of a submission that is a student's folder with more than one ([] else)."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return []
    notebooks = _walk_student(path)[0]
    return notebooks if len(notebooks) > 1 else []


def too_many_files(path: Path) -> str:
    """Why a submission that is a student's folder cannot be graded because the folder is too
    large to walk whole ("" when it is not: `files.MAX_ENTRIES`, `files.MAX_DEPTH`), for its row.
    (A folder that large with one notebook at its top is graded from that notebook instead.)"""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return ""
    stopped = _walk_student(path)[1]
    if not stopped:
        return ""
    return f"too many files: the folder holds {stopped}; hand in the notebook alone"


def no_notebook(path: Path) -> str:
    """Why a submission that is a student's folder holds no notebook to grade, for its row ("" when
    it holds one, or is no folder): what the walk saw that looks like one (a name ending in .IPYNB,
    a Jupyter checkpoint only, a folder it could not read)."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return ""
    notebooks, stopped = _walk_student(path)
    if notebooks or stopped:
        return ""
    seen = []
    for folder in [path, *(e.path for e in files.walk(path) if e.kind == "a folder")]:
        try:
            os.listdir(folder)
        except OSError as exc:
            where = "the folder" if folder == path else f"{folder.relative_to(path)}/"
            seen.append(f"{where} cannot be read ({exc.strerror or type(exc).__name__})")
    for entry in files.walk(path):
        if entry.kind != "a folder" and entry.relative.name.lower().endswith(".ipynb"):
            if ".ipynb_checkpoints" in entry.relative.parts:
                seen.append(f"{entry.relative} is a Jupyter checkpoint, not the notebook")
            else:
                seen.append(f"{entry.relative}: a notebook's name ends in .ipynb (lower case)")
    more = f" and {len(seen) - 5} more" if len(seen) > 5 else ""
    hints = f" ({'; '.join(seen[:5])}{more})" if seen else ""
    return f"no notebook found: the folder holds no file named *.ipynb{hints}; hand in the notebook"
