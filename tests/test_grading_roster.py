"""The grader's roster and clean-up against a hostile submissions folder: a student folder too large
to walk, a student's own subfolder names in a shell glob, folders a student made unwritable, names
that are terminal escape codes or spreadsheet formulas, and edits to the course during a batch.

Most tests build folders and call the roster, files, report and tamper functions directly; the two
`course grade` runs use notebooks that never start a kernel (the exercise as handed out, invalid
JSON), so they take seconds.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import nbformat
import pytest
from grading_submissions import ENV, EXERCISE, SOLUTION, notebook_of, write
from helpers import ROOT, require_or_skip

from course_tools import cli, exercise, processes
from course_tools.grade import command
from course_tools.grade.core import files, plan, report, roster, tamper
from course_tools.grade.core.report import CheckResult, Grade
from course_tools.grade.jail import memory_folders, sandbox
from course_tools.grade.routes import batch, slurm_array, supervised
from course_tools.runner import Limits

#: The name a hostile cell gave a file: clears the screen, sets the title, forges a line.
TRAP_NAME = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b[32mall graded\x1b[0m\nalice 12 ∕ 12 graded"
#: A uid no one uses: a throwaway ordinary user.
NOBODY = 54321


def _crowd(folder: Path, count: int) -> None:
    """`count` empty files in a subfolder of `folder` (a student's junk)."""
    junk = folder / "junk"
    junk.mkdir(parents=True)
    for i in range(count):
        (junk / f"{i:06d}").touch()


def _students(subs: Path) -> None:
    """alice (the exercise as handed out), bob and zed (invalid notebooks): none starts a kernel."""
    for name in ("alice", "bob", "zed"):
        (subs / name).mkdir(parents=True)
    shutil.copy(EXERCISE, subs / "alice" / "homework.ipynb")
    (subs / "bob" / "mine.ipynb").write_text('{"cells": [')
    (subs / "zed" / "mine.ipynb").write_text('{"cells": [')


def _grade(paths: list[Path], out: Path, jobs: int = 1) -> int:
    argv = ["grade", *map(str, paths), f"--out={out}", f"--jobs={jobs}"]
    argv += [f"--profile={ENV['COURSE_PROFILE']}", f"--data={ENV['COURSE_DATA']}"]
    return cli.main(argv)


def _gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


@pytest.fixture
def sandboxed():
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")


def test_a_student_folder_past_the_walk_cap_is_its_own_row_and_hides_no_one(tmp_path):
    """Students are walked one folder at a time, each with its own cap: a folder of more files
    than the cap (before alice in sorted order) is that student's row, saying why; its notebook is
    still found when it lies at the folder's top; every other student is found."""
    subs = tmp_path / "subs"
    _students(subs)
    _crowd(subs / "aaron", files.MAX_ENTRIES + 50)  # no notebook at its top
    write(notebook_of("1"), subs / "aaron" / "junk" / "000000.ipynb")
    deep = subs / "abel" / Path(*["d"] * (files.MAX_DEPTH + 5))  # past the depth cap
    deep.mkdir(parents=True)
    write(notebook_of("1"), deep / "other.ipynb")
    write(notebook_of("1"), subs / "abel" / "hw.ipynb")
    found = {s.student: s.path for s in roster.collect_submissions([subs])}
    assert found == {
        "aaron": subs / "aaron",
        "abel": subs / "abel" / "hw.ipynb",
        "alice": subs / "alice" / "homework.ipynb",
        "bob": subs / "bob" / "mine.ipynb",
        "zed": subs / "zed" / "mine.ipynb",
    }
    reason = roster.too_many_files(subs / "aaron")
    assert reason.startswith("too many files: the folder holds more than 100,000 files"), reason
    assert reason.endswith("hand in the notebook alone")
    assert "folders deeper than 64 levels" in roster.too_many_files(subs / "abel")
    assert roster.too_many_files(subs / "alice") == ""
    assert roster.several_notebooks(subs / "aaron") == []


def test_course_grade_gives_a_too_large_folder_its_row_and_grades_the_rest(
    tmp_path, sandboxed, capsys
):
    """The whole batch, at the real caps (`course grade` grades in a child process, which a
    lowered cap would not reach): aaron's folder, deeper than `files.MAX_DEPTH` (cheap to build;
    a folder of more files than `files.MAX_ENTRIES` stops the same walk, above), gets the status
    "too many files", 0 points and the reason; every other student has a row; the exit status is
    0 (every submission got a grade)."""
    subs = tmp_path / "subs"
    _students(subs)
    deep = subs / "aaron"
    for _ in range(files.MAX_DEPTH + 2):
        deep /= "d"
    deep.mkdir(parents=True)
    out = tmp_path / "grades"
    assert _grade([subs], out) == 0, capsys.readouterr()
    rows = _gradebook(out)
    assert sorted(rows) == ["aaron", "alice", "bob", "zed"]
    assert rows["aaron"]["status"] == "too many files" and rows["aaron"]["score"] == "0"
    cap = f"folders deeper than {files.MAX_DEPTH} levels; hand in the notebook alone"
    assert cap in rows["aaron"]["notes"], rows["aaron"]
    assert rows["alice"]["status"] == "unchanged exercise"
    assert rows["bob"]["status"] == rows["zed"]["status"] == "invalid notebook"
    assert "too many files" in (out / "aaron" / "report.md").read_text()


def test_a_folder_in_a_shell_glob_is_one_student_whatever_lies_inside(tmp_path):
    """`course grade subs/*`: each folder given is one student, named by it. mallory's own
    subfolders named alice and dave are never students (no clash with the real alice, no dave);
    several notebooks in one such folder are that student's "several notebooks"."""
    subs = tmp_path / "subs"
    _students(subs)
    (subs / "mallory" / "alice").mkdir(parents=True)
    write(notebook_of("1"), subs / "mallory" / "alice" / "x.ipynb")
    given = sorted(subs.iterdir())
    found = {s.student: s.path for s in roster.collect_submissions(given)}
    assert found["mallory"] == subs / "mallory" / "alice" / "x.ipynb"
    assert found["alice"] == subs / "alice" / "homework.ipynb"
    assert sorted(found) == ["alice", "bob", "mallory", "zed"]
    (subs / "mallory" / "dave").mkdir()
    write(notebook_of("1"), subs / "mallory" / "dave" / "hw.ipynb")
    found = {s.student: s.path for s in roster.collect_submissions(given)}
    assert sorted(found) == ["alice", "bob", "mallory", "zed"]
    assert found["mallory"] == subs / "mallory"
    assert len(roster.several_notebooks(subs / "mallory")) == 2
    # the same folders given as a folder of students: unchanged (alice, bob, mallory, zed)
    assert sorted(s.student for s in roster.collect_submissions([subs])) == sorted(found)


@pytest.mark.parametrize("twin", ["\uff41\uff4c\uff49\uff43\uff45", "ALICE", "Alice"])
def test_names_equal_after_nfkc_and_casefold_are_a_name_clash(tmp_path, twin):
    """The full-width "ａｌｉｃｅ" or "ALICE" beside alice is a clash the instructor resolves
    (the full-width name got a row of its own, which looks like alice's, before); a look-alike
    that NFKC keeps apart (Cyrillic "а") stays a name of its own."""
    subs = tmp_path / "subs"
    subs.mkdir()
    write(notebook_of("1"), subs / "alice.ipynb")
    write(notebook_of("2"), subs / f"{twin}.ipynb")
    with pytest.raises(ValueError, match="are both the submission of") as clash:
        roster.collect_submissions([subs])
    assert "rename one" in str(clash.value)
    (subs / f"{twin}.ipynb").unlink()
    write(notebook_of("2"), subs / "\u0430lice.ipynb")
    assert sorted(s.student for s in roster.collect_submissions([subs])) == [
        "alice",
        "\u0430lice",
    ]


def _rows(out: Path, name: str = "gradebook.csv") -> list[list[str]]:
    """The rows of a gradebook file, its header (canvas.csv: and points possible) left out."""
    with open(out / name, newline="") as handle:
        return list(csv.reader(handle))[2 if name == "canvas.csv" else 1 :]


def test_a_name_spelt_otherwise_than_a_row_of_the_grades_stops_the_batch(tmp_path):
    """A grades folder holding alice's row: a submission `Alice` or full-width `ａｌｉｃｅ` (one
    name, `roster.same_name_key`) stops every route's batch (`plan.check_out`) with both
    spellings; alice again, or bob, does not. The row's folder is found as the gradebooks find
    it (`report.saved_rows`): a folder named otherwise than its grade's student is no row."""
    out = tmp_path / "grades"
    report.save(Grade("alice", tmp_path / "alice.ipynb", "invalid notebook"), out / "alice")
    for twin in ("Alice", "\uff41\uff4c\uff49\uff43\uff45", "ALICE"):
        with pytest.raises(ValueError, match="one name spelt otherwise") as clash:
            plan.check_out(out, [roster.Submission(twin, tmp_path / f"{twin}.ipynb")])
        assert f"graded as {twin!r}" in str(clash.value)
        assert "rename the submission 'alice'" in str(clash.value)
    for name in ("alice", "bob", "\u0430lice"):
        plan.check_out(out, [roster.Submission(name, tmp_path / f"{name}.ipynb")])
    shutil.move(out / "alice", out / "carol")
    plan.check_out(out, [roster.Submission("Alice", tmp_path / "Alice.ipynb")])


def test_one_student_graded_in_three_batches_spelt_three_ways_keeps_one_row(
    tmp_path, sandboxed, capsys
):
    """Three batches into one --out, an invalid notebook each (no kernel): a/alice.ipynb, then
    b/Alice.ipynb, then the full-width c/ａｌｉｃｅ.ipynb. Each used to exit 0, leaving three
    rows for one student in gradebook.csv and canvas.csv (SIS Login IDs `alice` and `Alice`):
    which score an import keeps was up to the platform. Now the later two exit 2 before anything
    is written, naming both spellings; alice's notebook graded again replaces her row."""
    out = tmp_path / "grades"
    twins = {"b": "Alice", "c": "\uff41\uff4c\uff49\uff43\uff45"}
    for folder, name in [("a", "alice"), *twins.items()]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{name}.ipynb").write_text("{}")
    assert _grade([tmp_path / "a" / "alice.ipynb"], out) == 0, capsys.readouterr()
    capsys.readouterr()

    def written() -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    before = written()
    for folder, name in twins.items():
        assert _grade([tmp_path / folder / f"{name}.ipynb"], out) == 2
        err = capsys.readouterr().err
        assert f"graded as {name!r}" in err and "a row for 'alice'" in err, err
        assert "rename the submission 'alice'" in err and "another --out" in err, err
        assert written() == before
    assert [row[0] for row in _rows(out)] == ["alice"]
    assert [row[3] for row in _rows(out, "canvas.csv")] == ["alice"]
    # the same spelling graded again (the notebook changed): its row replaced, still one
    (tmp_path / "a" / "alice.ipynb").write_text('{"cells": [')
    assert _grade([tmp_path / "a" / "alice.ipynb"], out) == 0, capsys.readouterr()
    assert (out / "alice" / "result.json").read_bytes() != before[out / "alice" / "result.json"]
    assert [row[0] for row in _rows(out)] == ["alice"]
    assert [(row[3], row[5]) for row in _rows(out, "canvas.csv")] == [("alice", "0")]
    assert _gradebook(out)["alice"]["status"] == "invalid notebook"


def test_course_grade_of_a_shell_glob_is_not_stopped_by_a_students_subfolder(
    tmp_path, sandboxed, capsys
):
    """The batch of `course grade subs/*` with mallory/alice/x.ipynb beside alice/: rows alice and
    mallory, exit 0; then mallory/dave/hw.ipynb: a row mallory, none named dave."""
    subs = tmp_path / "subs"
    _students(subs)
    (subs / "mallory" / "alice").mkdir(parents=True)
    (subs / "mallory" / "alice" / "x.ipynb").write_text('{"cells": [')
    out = tmp_path / "grades"
    assert _grade(sorted(subs.iterdir()), out) == 0, capsys.readouterr()
    rows = _gradebook(out)
    assert sorted(rows) == ["alice", "bob", "mallory", "zed"]
    assert rows["alice"]["status"] == "unchanged exercise"
    shutil.rmtree(subs / "mallory" / "alice")
    (subs / "mallory" / "dave").mkdir()
    (subs / "mallory" / "dave" / "hw.ipynb").write_text('{"cells": [')
    out = tmp_path / "grades-dave"
    assert _grade(sorted(subs.iterdir()), out) == 0, capsys.readouterr()
    assert sorted(_gradebook(out)) == ["alice", "bob", "mallory", "zed"]


def _unwritable_tree(owner: int) -> Path:
    """A tree as a submission leaves it: read-only (0500) and unreadable (0000) folders holding
    files, owned by `owner`, in a fresh folder under /tmp that `owner` may enter."""
    top = Path(tempfile.mkdtemp(prefix="course-grade-test-"))
    trap = top / "work" / "trap"
    (trap / "closed").mkdir(parents=True)
    (trap / TRAP_NAME).write_bytes(b"x" * 4096)
    (trap / "closed" / "inside").write_bytes(b"y")
    for path in [top, *top.rglob("*")]:
        os.chown(path, owner, owner)
    os.chmod(trap / "closed", 0o000)
    os.chmod(trap, 0o500)
    return top


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a throwaway user's files: needs root")
def test_remove_tree_removes_folders_a_submission_made_unwritable_as_an_ordinary_user():
    """As the owner (an ordinary user, not root), a read-only folder holding a file and an
    unreadable folder inside it are removed entirely, nothing left."""
    top = _unwritable_tree(NOBODY)
    try:
        code = f"from course_tools.grade.core import files; print(files.remove_tree({str(top)!r}))"
        done = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            + [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == "[]", done
        assert not top.exists()
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False, capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a throwaway user's files: needs root")
def test_the_slurm_scripts_clean_up_removes_an_unwritable_work_folder_as_an_ordinary_user(
    tmp_path,
):
    """The batch script's own clean-up (`remove "$work"`) as an ordinary user: the tree goes."""
    b = plan.Batch(tmp_path, SOLUTION, SOLUTION.read_bytes(), plan.GradingSettings(), Limits())
    script = slurm_array.batch_script(b, tmp_path / "plan.json", 1, slurm_array.SlurmOptions())
    functions = [line for line in script.splitlines() if line.startswith(("release()", "remove()"))]
    assert len(functions) == 2, script
    top = _unwritable_tree(NOBODY)
    try:
        work = top / "work"
        done = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "bash", "-c"]
            + ["\n".join([*functions, f"remove {str(work)!r}"])],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert not work.exists(), done
        assert "could not remove" not in done.stderr, done
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False, capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


def test_a_work_folder_left_behind_is_said_on_the_console_escaped(monkeypatch, capsys, tmp_path):
    """What the clean-up could not remove is printed, never silently left, and a name that is a
    terminal escape sequence is printed escaped: no raw ESC, BEL or newline of the submission's."""
    left = [f"{tmp_path}/trap/{TRAP_NAME}: Permission denied"]
    stopped = types.SimpleNamespace(close=lambda: None, stop=lambda: None)
    monkeypatch.setattr(batch, "start_checks", lambda b, base: stopped)
    monkeypatch.setattr(batch, "TamperWatch", lambda b, suspects: None)
    monkeypatch.setattr(files, "remove_tree", lambda top: left)
    batch.grade_here(None, [], 1, progress=False)
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "could not remove" in line]
    assert "\\x1b[2J" in line and "Permission denied" in line
    assert not {"\x1b", "\x07"} & set(err) and "alice 12 ∕ 12 graded" in line
    assert report.console(TRAP_NAME).count("\\x1b") == 5


def test_gradebook_cells_a_spreadsheet_reads_as_formulas_are_quoted(tmp_path):
    """A student folder named -A1 or =HYPERLINK(...): the student and report cells of
    gradebook.csv start with "'", as in the Canvas and Moodle files."""
    grades = []
    for name in ["-A1", "=1+1", "alice"]:
        g = Grade(name, Path(f"{name}.ipynb"), "graded")
        g.results = [CheckResult("q1", "t", 1.0, 1.0)]
        grades.append(g)
    report.write_gradebook(grades, tmp_path / "gradebook.csv", ["q1"])
    report.write_canvas(grades, tmp_path / "canvas.csv", "svhn")
    report.write_moodle(grades, tmp_path / "moodle.csv", "svhn")
    for name in ["gradebook.csv", "canvas.csv", "moodle.csv"]:
        with open(tmp_path / name, newline="") as handle:
            cells = [cell for row in csv.reader(handle) for cell in row]
        formulas = [c for c in cells if c.startswith(report.FORMULA_START)]
        assert formulas == [], (name, formulas)
    rows = _gradebook(tmp_path)
    assert sorted(rows) == ["'-A1", "'=1+1", "alice"]
    assert (
        rows["'-A1"]["report"] == "'-A1/report.md" and rows["alice"]["report"] == "alice/report.md"
    )


def _feedback(out: Path) -> dict[str, str]:
    """Moodle's Feedback of each row of `out`'s moodle.csv, which Moodle shows the student."""
    with open(out / "moodle.csv", newline="") as handle:
        return {row["Username"]: row["Feedback"] for row in csv.DictReader(handle)}


def test_notes_for_the_instructor_reach_the_gradebook_and_nothing_a_student_sees(tmp_path):
    """A row's notes for the instructor only (whom it ran beside when the grader died) are in
    gradebook.csv's notes, and neither in the student's report.md nor in Moodle's feedback nor
    in the Canvas file; its other notes are in all three."""
    g = Grade("alice", Path("alice.ipynb"), "graded", max_score=1.0)
    g.results = [CheckResult("q1", "t", 1.0, 1.0)]
    g.notes = ["graded again, alone"]
    g.instructor_notes = ["ran beside mallory when the grader's process died (SIGABRT)"]
    report.save(g, tmp_path / "alice")
    report.write_gradebook([g], tmp_path / "gradebook.csv", ["q1"])
    report.write_canvas([g], tmp_path / "canvas.csv", "svhn")
    report.write_moodle([g], tmp_path / "moodle.csv", "svhn")
    notes = _gradebook(tmp_path)["alice"]["notes"]
    assert "graded again, alone" in notes and "ran beside mallory" in notes, notes
    feedback, text = _feedback(tmp_path)["alice"], (tmp_path / "alice" / "report.md").read_text()
    assert "graded again, alone" in feedback and "graded again, alone" in text
    for student_facing in (feedback, text, (tmp_path / "canvas.csv").read_text()):
        assert "mallory" not in student_facing, student_facing
    assert report.load(tmp_path / "alice").instructor_notes == g.instructor_notes


def test_a_written_answers_point_given_for_now_is_marked_in_the_gradebook_and_feedback(tmp_path):
    """A point given to a written answer before anyone read it: gradebook.csv's to_read names its
    question, Moodle's feedback tells the student it is given for now; a row whose answer got no
    point (too short), or a check that is not a written answer, is not marked."""
    answered = Grade("alice", Path("alice.ipynb"), "graded", max_score=2.0)
    answered.results = [
        CheckResult("q1", "t", 1.0, 1.0),
        CheckResult("q5", "a", 1.0, 1.0, manual=True),
    ]
    empty = Grade("bob", Path("bob.ipynb"), "graded", max_score=2.0)
    empty.results = [
        CheckResult("q1", "t", 1.0, 1.0),
        CheckResult("q5", "a", 1.0, 0.0, manual=True),
    ]
    report.write_gradebook([answered, empty], tmp_path / "gradebook.csv", ["q1", "q5"])
    report.write_moodle([answered, empty], tmp_path / "moodle.csv", "svhn")
    rows = _gradebook(tmp_path)
    assert (rows["alice"]["to_read"], rows["bob"]["to_read"]) == ("q5", "")
    feedback = _feedback(tmp_path)
    assert "q5: given for now" in feedback["alice"] and "given for now" not in feedback["bob"]


def _watched(tmp_path: Path, monkeypatch, *, sandboxed: bool) -> tuple[tamper.TamperWatch, Path]:
    package = tmp_path / "course_utils"
    package.mkdir(parents=True)
    (package / "setup.py").write_text("x = 1\n")
    monkeypatch.setattr(plan, "PACKAGE", package)
    solution = tmp_path / "solution.ipynb"
    solution.write_text("start")
    (tmp_path / "out").mkdir()
    b = types.SimpleNamespace(
        solution_path=solution, solution_bytes=b"start", out=tmp_path / "out", sandboxed=sandboxed
    )
    return tamper.TamperWatch(b, "this submission"), solution


def test_an_edit_of_the_course_during_a_sandboxed_batch_blames_no_student(
    tmp_path, monkeypatch, capsys
):
    """Sandboxed, a submission cannot write the course or the solution (read-only in its
    sandbox): an edit made meanwhile (the instructor's) is said once on the console, not in a row,
    and the solution as it was at the start is kept."""
    watch, solution = _watched(tmp_path, monkeypatch, sandboxed=True)
    solution.write_text("edited")
    (plan.PACKAGE / "setup.py").write_text("x = 2\n")
    assert watch.notes() == []
    err = capsys.readouterr().err
    assert "solution.ipynb changed during the batch, not by a submission" in err, err
    assert "course_utils/setup.py changed during the batch, not by a submission" in err, err
    assert (tmp_path / "out" / "solution.at-batch-start.ipynb").read_text() == "start"
    assert watch.notes() == [] and capsys.readouterr().err == ""  # said once


def test_an_edit_during_an_unsandboxed_batch_is_noted_in_the_row(tmp_path, monkeypatch, capsys):
    """Without the sandbox the submission could have made the change: its row says so, and that
    it cannot tell from an edit of the instructor's."""
    watch, solution = _watched(tmp_path, monkeypatch, sandboxed=False)
    (plan.PACKAGE / "setup.py").write_text("x = 2\n")
    (note,) = watch.notes()
    assert note.startswith("course_utils/setup.py changed while this submission ran"), note
    assert "or an edit of yours" in note


def answers_only() -> nbformat.NotebookNode:
    """The exercise with its written answers and no code: it runs in seconds and earns the
    answers' points."""
    solution = {cell.id: cell.source for cell in nbformat.read(SOLUTION, as_version=4).cells}
    notebook = nbformat.read(EXERCISE, as_version=4)
    for cell in notebook.cells:
        if exercise.ANSWER_PLACEHOLDER in cell.source:
            answer = re.search(r"-->\n(.*)\n<!--", solution[cell.id], re.DOTALL)[1]
            cell.source = cell.source.replace(exercise.ANSWER_PLACEHOLDER, answer)
    return notebook


#: A submission whose cell runs long enough for the grader's process to be killed meanwhile.
SLEEPER = "import time\nprint('running', flush=True)\ntime.sleep(120)"


def _grade_watched(watch, student: str, paths: list[Path], out: Path, jobs: int, **how) -> tuple:
    """`_grade` while `watch` (`abort_graders_running`, `kill_kernel_once`) acts on `student`'s
    grading in a thread, stopped at the end: (the exit code, what the watch did)."""
    stop = threading.Event()
    done = watch(out / plan.PLAN_FOLDER / "running", student, stop, **how)
    try:
        return _grade(paths, out, jobs=jobs), done
    finally:
        stop.set()


def abort_graders_running(
    folder: Path, student: str, stop: threading.Event, *, beside_only: bool = False
) -> list[supervised.Mark]:
    """In a thread: SIGABRT (what libzmq sends itself when a quota of the user is used up) each
    grading process that records `student` running in `folder` (only beside others, with
    `beside_only`), 2 s after it does (its kernel started). Returns the list that gets the mark
    of each process killed."""
    killed: list[supervised.Mark] = []

    def watch() -> None:
        pids = set()
        while not stop.is_set():
            marks = supervised.read_marks(folder)
            mark = marks.get(student)
            if (
                mark is not None
                and mark.state == "running"
                and mark.pid not in pids
                and not (beside_only and mark.alone)
            ):
                pids.add(mark.pid)
                time.sleep(2)
                os.kill(mark.pid, signal.SIGABRT)
                killed.append(mark)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def test_a_submission_that_kills_the_grader_is_named_and_the_batch_ends_with_its_gradebooks(
    tmp_path, sandboxed, capfd
):
    """Crash-only: the grader's process dies by a signal while the culprit runs beside another
    submission (2 at a time), then again while it runs alone. `course grade` ends with exit 0 in
    one command: the other submission graded (alone, again), the culprit scored 0 with a note
    naming the cause in its row, its report and on the console, the three gradebook files
    written; a second run keeps that grade (only --regrade tries again)."""
    subs, out = tmp_path / "subs", tmp_path / "grades"
    subs.mkdir()
    write(answers_only(), subs / "honest.ipynb")
    write(notebook_of(SLEEPER), subs / "culprit.ipynb")
    code, killed = _grade_watched(abort_graders_running, "culprit", [subs], out, jobs=2)
    err = capfd.readouterr().err
    assert code == 0, err
    assert [mark.alone for mark in killed] == [False, True], killed
    rows = _gradebook(out)
    assert rows["honest"]["status"] == "graded" and float(rows["honest"]["score"]) > 0, rows
    culprit = rows["culprit"]
    assert (culprit["status"], culprit["score"]) == (supervised.DIED, "0"), culprit
    said = "the grader's process died (SIGABRT) while this submission ran alone"
    assert said in culprit["notes"] and "--regrade" in culprit["notes"], culprit
    beside = "the grader's process died (SIGABRT) while this submission ran beside another"
    assert f"{beside}: graded again, alone" in culprit["notes"], culprit
    assert "ran beside honest when the grader's process died (SIGABRT)" in culprit["notes"]
    honest = rows["honest"]["notes"]
    assert f"{beside}: graded again, alone; that run ended without a death" in honest, honest
    assert "ran beside culprit when the grader's process died (SIGABRT)" in honest, honest
    # whom each ran beside is the instructor's: not in what the student sees
    feedback = _feedback(out)
    assert f"{beside}: graded again, alone" in feedback["culprit"], feedback
    for name, other in (("culprit", "honest"), ("honest", "culprit")):
        assert other not in feedback[name], feedback
        assert other not in (out / name / "report.md").read_text()
    assert report.escape(said) in (out / "culprit" / "report.md").read_text()
    assert f"culprit: {said}" in err
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert all(s in (out / name).read_text() for s in ("honest", "culprit")), name
    for mark in killed:  # what the killed processes left: work, empty file, filter, kernels
        for kind in ("grade-", "grade-empty-", "grade-seccomp-", "kernel-"):
            left = glob.glob(f"{tempfile.gettempdir()}/course-{kind}{mark.pid}-*")
            assert not left, left
    # kept: a second run grades nothing again
    assert _grade([subs], out, jobs=2) == 0
    assert len(killed) == 2 and _gradebook(out) == rows


def test_rows_graded_again_alone_after_a_death_say_so_and_how_it_ended(
    tmp_path, sandboxed, capfd, monkeypatch
):
    """The grader's process dies once, while the culprit runs beside a bystander (2 at a time),
    and never again: both run again alone and are graded. Each row, in the gradebook, the report
    and Moodle's feedback, says that it ran beside another when the grader died and that its run
    alone ended without a death, so an instructor reading the files sees which rows to look at;
    whom it ran beside is said in the gradebook and on the console only, never in the report
    or the feedback, which reach the student. The next child starts only after the quota check
    (the dead child's sandboxes may still hold a quota while they are torn down)."""
    subs, out = tmp_path / "subs", tmp_path / "grades"
    subs.mkdir()
    for name in ("culprit", "bystander"):
        write(notebook_of("import time\ntime.sleep(8)"), subs / f"{name}.ipynb")
    events: list[str] = []
    run_child, exhausted_quotas = supervised.run_child, supervised.exhausted_quotas
    monkeypatch.setattr(
        supervised, "run_child", lambda argv, **kw: events.append("child") or run_child(argv, **kw)
    )
    monkeypatch.setattr(
        supervised, "exhausted_quotas", lambda: events.append("quotas") or exhausted_quotas()
    )
    stop = threading.Event()
    running = out / plan.PLAN_FOLDER / "running"
    killed = abort_graders_running(running, "culprit", stop, beside_only=True)
    try:
        code = _grade([subs], out, jobs=2)
    finally:
        stop.set()
    err = capfd.readouterr().err
    assert code == 0, err
    assert [mark.alone for mark in killed] == [False], killed
    assert events == ["child", "quotas", "child", "child"], events
    rows, feedback = _gradebook(out), _feedback(out)
    for name, other in (("culprit", "bystander"), ("bystander", "culprit")):
        said = (
            "the grader's process died (SIGABRT) while this submission ran beside another: "
            "graded again, alone; that run ended without a death (this grade)"
        )
        assert rows[name]["status"] != supervised.DIED, rows[name]
        assert said in rows[name]["notes"], rows[name]
        whom = f"ran beside {other} when the grader's process died (SIGABRT)"
        assert whom in rows[name]["notes"], rows[name]
        text = (out / name / "report.md").read_text()
        assert report.escape(said) in text and other not in text, text
        assert report.escape(said, markdown=False) in feedback[name], feedback
        assert other not in feedback[name], feedback
        assert f"while {name} ran beside {other}: grading it again, alone" in err
        assert f"{name}: graded again, alone, without a death" in err


def kill_kernel_once(folder: Path, student: str, stop: threading.Event) -> list[int]:
    """In a thread: SIGKILL, once, the kernel of `student` while it runs beside another (as the
    system's out-of-memory killer does to the largest kernel), once its grading process records
    it running in `folder`: the kernel is the tree's `ipykernel` whose working folder holds the
    file `student` (the notebook writes it). Returns the list that gets the pid killed."""
    killed: list[int] = []

    def watch() -> None:
        while not stop.is_set() and not killed:
            mark = supervised.read_marks(folder).get(student)
            if mark is not None and mark.state == "running" and not mark.alone:
                for process in processes.process_tree(mark.pid):
                    with contextlib.suppress(processes.psutil.Error):
                        line = " ".join(process.cmdline())
                        if "ipykernel" in line and os.path.exists(f"{process.cwd()}/{student}"):
                            os.kill(process.pid, signal.SIGKILL)
                            killed.append(process.pid)
                            return
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def test_a_kernel_killed_beside_another_is_graded_again_alone_and_says_so(
    tmp_path, sandboxed, capfd
):
    """Red team 34b: as an ordinary user, a submission can hold memory no watch counts, and when
    the machine runs out the system's out-of-memory killer takes the largest kernel: an honest
    neighbour, whose row said "kernel died" and kept its 1/12. A kernel that dies beside others,
    with no limit of the grader named, is graded again alone: here the victim's kernel is killed
    once from outside while the bystander runs; both end graded, the victim's row (report and
    Moodle too) says why it ran twice and how the run alone ended, naming no one."""
    subs, out = tmp_path / "subs", tmp_path / "grades"
    subs.mkdir()
    for name in ("victim", "bystander"):
        code = f"import pathlib, time\npathlib.Path({name!r}).touch()\ntime.sleep(8)"
        write(notebook_of(code), subs / f"{name}.ipynb")
    code, killed = _grade_watched(kill_kernel_once, "victim", [subs], out, jobs=2)
    err = capfd.readouterr().err
    assert code == 0, err
    assert len(killed) == 1, "the victim's kernel was never found to kill"
    rows, feedback = _gradebook(out), _feedback(out)
    victim, bystander = rows["victim"], rows["bystander"]
    assert victim["status"] == bystander["status"] != "kernel died", (victim, bystander)
    said = f"{supervised.KERNEL_DIED_BESIDE}; first run: kernel died, 0/12; alone: "
    said += f"{victim['status']}, {victim['score']}/"
    assert said in victim["notes"], victim
    assert supervised.KERNEL_DIED_BESIDE not in bystander["notes"], bystander
    assert report.escape(said, markdown=False) in feedback["victim"], feedback
    assert "bystander" not in feedback["victim"], feedback
    assert "victim: its kernel died beside others: grading it again, alone" in err


def test_a_death_while_a_quota_stays_used_up_elsewhere_is_a_grader_error_not_a_0(
    tmp_path, sandboxed, capfd, monkeypatch
):
    """The grader's process dies while the culprit runs alone, but a per-user quota stays used
    up once its sandboxes are gone (simulated through `supervised.exhausted_quotas`, the check's
    hook: another batch of the account holding it): the row is a grader error naming the cause,
    not 0, `course grade` exits 1 (a grader failure) with every gradebook file, and the next run
    grades it again."""
    monkeypatch.setattr(supervised, "exhausted_quotas", lambda: ["epoll watches"])
    monkeypatch.setattr(supervised, "SETTLE_S", 1.0)
    out = tmp_path / "grades"
    culprit_path = write(notebook_of(SLEEPER), tmp_path / "culprit.ipynb")
    code, killed = _grade_watched(abort_graders_running, "culprit", [culprit_path], out, jobs=1)
    err = capfd.readouterr().err
    assert code == 1, err
    assert [mark.alone for mark in killed] == [True], killed
    culprit = _gradebook(out)["culprit"]
    assert (culprit["status"], culprit["score"]) == ("grader error", "0"), culprit
    said = "your account's epoll watches stayed used up once its sandboxes were gone"
    assert said in culprit["notes"] and "the next run grades it again" in culprit["notes"]
    assert "culprit: the grader's process died (SIGABRT)" in err and said in err
    assert report.load(out / "culprit").grader_failed
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert "culprit" in (out / name).read_text(), name


def test_the_quota_check_sees_a_per_user_quota_held_by_another_process():
    """`supervised.exhausted_quotas` answers from the kernel: a process of a throwaway uid holds
    every inotify instance that uid may have; the check, run as that uid, names the quota, and
    says nothing once the holder is gone (as root: it needs another uid)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to use a throwaway uid")
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    if limit > 4096:
        pytest.skip(f"max_user_instances {limit}: too many to hold in a test")
    code = (
        "import ctypes, os, sys, time\n"
        "from course_tools.grade.routes import supervised\n"
        f"os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "held = []\n"
        "while (fd := libc.inotify_init1(0)) >= 0: held.append(fd)\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
        "for fd in held: os.close(fd)\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "['inotify instances']", "[]"], done.stdout


#: Fillers of the per-user quotas the kernel counts for a host user across its namespaces, as a
#: submission would write them: each holds all its uid may have, then prints how many it holds.
QUOTA_FILLERS = {
    "message-queue bytes": (
        "for maxmsg, size in ((10, 8192), (1, 8192), (1, 1024), (1, 128), (1, 16), (1, 1)):\n"
        "    attr = quotas._MqAttr(0, maxmsg, size, 0)\n"
        "    while (fd := libc.mq_open(f'/fill-{len(held)}'.encode(), os.O_RDONLY | os.O_CREAT,"
        " ctypes.c_uint(0o600), ctypes.byref(attr))) >= 0:\n"
        "        libc.mq_unlink(f'/fill-{len(held)}'.encode()); held.append(fd)\n"
    ),
    "pending signals": (
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})\n"
        "libc.pthread_self.restype = ctypes.c_ulong\n"
        "me = ctypes.c_ulong(libc.pthread_self())\n"
        "while libc.pthread_sigqueue(me, signal.SIGRTMIN, ctypes.c_void_p(0)) == 0:\n"
        "    held.append(1)\n"
    ),
    "pipe pages": (
        "while True:\n"
        "    r, w = os.pipe(); held.append(r)\n"
        "    if fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) < 16 * 4096: break\n"
        "    try: fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 2 ** 20)\n"
        "    except PermissionError: pass\n"
    ),
}


@pytest.mark.parametrize("quota", sorted(QUOTA_FILLERS))
def test_the_quota_check_sees_message_queues_signals_and_pipes_held_by_another_process(quota):
    """`supervised.exhausted_quotas` (`jail.quotas`) answers from the kernel for the quotas a
    sandbox shares with an ordinary user's grader beside epoll and inotify: a process of a
    throwaway uid holds all the message-queue bytes, pending signals or pipe pages that uid may
    have; the check, run as that uid in another process, names that quota, and nothing once the
    holder is gone (as root: it needs another uid)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to use a throwaway uid")
    if quota == "pipe pages" and not int(Path("/proc/sys/fs/pipe-user-pages-soft").read_text()):
        pytest.skip("fs.pipe-user-pages-soft is 0 here: no per-user pipe quota")
    if quota == "pending signals" and resource.getrlimit(resource.RLIMIT_SIGPENDING)[0] > 10**6:
        pytest.skip("RLIMIT_SIGPENDING over a million: too many to hold in a test")
    code = (
        "import ctypes, fcntl, os, signal\n"
        "from course_tools.grade.jail import quotas\n"
        "from course_tools.grade.routes import supervised\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "ready_r, ready_w = os.pipe(); stop_r, stop_w = os.pipe()\n"
        f"os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
        "if (child := os.fork()) == 0:\n"
        "    held = []\n"
        + "".join(f"    {line}\n" for line in QUOTA_FILLERS[quota].splitlines())
        + "    os.write(ready_w, str(len(held)).encode()); os.read(stop_r, 1); os._exit(0)\n"
        "print(int(os.read(ready_r, 20)) > 0, flush=True)\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
        "os.write(stop_w, b'x'); os.waitpid(child, 0)\n"
        "print(supervised.exhausted_quotas(), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True", f"['{quota}']", "[]"], done.stdout


#: A cell that makes 200,000 empty files in the sandbox's /tmp (each one a kilobyte of the
#: kernel's memory that the byte cap does not count), then a cell that must still run.
INODE_FLOOD = "for i in range(200_000):\n    open(f'/tmp/f{i}', 'w').close()"
AFTER_FLOOD = "import os\nprint('next cell ran with', len(os.listdir('/tmp')), 'files in /tmp')"


def test_a_submission_making_200000_files_in_tmp_is_stopped_in_its_cell_and_graded(
    tmp_path, sandboxed
):
    """`course grade` of a notebook making 200,000 empty files in /tmp: the cell stops at the
    in-memory folder's cap of files with "No space left on device" (in its report's errors),
    the next cell runs, and the batch ends with the row and its gradebooks."""
    out = tmp_path / "grades"
    path = write(notebook_of(INODE_FLOOD, AFTER_FLOOD), tmp_path / "flood.ipynb")
    assert _grade([path], out) in (0, 1)
    row = _gradebook(out)["flood"]
    assert row["status"] != "grader error", row
    saved = report.load(out / "flood")
    assert any("No space left on device" in error for error in saved.cell_errors), saved
    text = (out / "flood" / "report.md").read_text()
    assert report.escape("No space left on device") in text
    executed = nbformat.read(out / "flood" / "executed.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in executed.cells[1].outputs)
    files_left = int(printed.split("with ")[1].split()[0])
    assert 0 < files_left < memory_folders.INODES, printed
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert "flood" in (out / name).read_text(), name


def _alice_holds_bob(subs: Path) -> None:
    """bob/ and carol/ with their notebooks; alice's own folder holds a folder she named bob."""
    for where in ("bob/hw.ipynb", "carol/hw.ipynb", "alice/bob/hw.ipynb"):
        (subs / where).parent.mkdir(parents=True, exist_ok=True)
        write(notebook_of(f"print({where!r})"), subs / where)


def test_a_student_folder_given_alone_is_named_by_itself_never_by_a_folder_inside(tmp_path):
    """`course grade subs/al*` (one folder, alice's, holding only a folder she named bob): alice,
    never bob; the folder of students given: alice, bob and carol, alice's notebook hers. A folder
    given alone with two student folders (and no notebook directly) is a folder of students."""
    subs = tmp_path / "subs"
    _alice_holds_bob(subs)
    (alone,) = roster.collect_submissions([subs / "alice"])
    assert (alone.student, alone.path) == ("alice", subs / "alice" / "bob" / "hw.ipynb")
    found = {s.student: s.path for s in roster.collect_submissions([subs])}
    assert found == {
        "alice": subs / "alice" / "bob" / "hw.ipynb",
        "bob": subs / "bob" / "hw.ipynb",
        "carol": subs / "carol" / "hw.ipynb",
    }
    # a notebook deeper in a student's folder is that student's, named by the top folder
    (subs / "carol" / "hw.ipynb").rename(subs / "carol" / "inner.ipynb")
    (subs / "carol" / "deep").mkdir()
    (subs / "carol" / "inner.ipynb").rename(subs / "carol" / "deep" / "hw.ipynb")
    found = {s.student: s.path for s in roster.collect_submissions([subs])}
    assert found["carol"] == subs / "carol" / "deep" / "hw.ipynb"


def test_a_grade_of_another_submission_still_there_is_never_replaced(tmp_path):
    """A grades folder holding the grade of a notebook still at another path (not inside this
    submission's folder) is refused before anything is written: grading would empty another
    student's grades. The same notebook, or another one in the same folder, is graded again."""
    subs, out = tmp_path / "subs", tmp_path / "grades"
    _alice_holds_bob(subs)
    report.save(Grade("bob", subs / "bob" / "hw.ipynb", "graded"), out / "bob")
    intruder = roster.Submission("bob", subs / "alice" / "bob" / "hw.ipynb")
    with pytest.raises(ValueError, match="holds the grade of another submission still there"):
        command.check_replaced(out, [intruder])
    command.check_replaced(out, [roster.Submission("bob", subs / "bob" / "hw.ipynb")])
    command.check_replaced(out, [roster.Submission("bob", subs / "bob")])
    (subs / "bob" / "hw.ipynb").unlink()  # gone: a re-submission under another name
    command.check_replaced(out, [intruder])


def test_the_gradebooks_keep_the_rows_of_students_graded_earlier_into_the_same_folder(tmp_path):
    """A batch of one student (a late submission, a folder given alone) into --out: gradebook.csv,
    canvas.csv and moodle.csv still hold every other student's saved grade, never only its row."""
    out = tmp_path / "grades"
    for name, earned in [("bob", 12.0), ("carol", 3.0), ("alice", 1.0)]:
        g = Grade(name, Path(f"/subs/{name}/hw.ipynb"), "graded", max_score=12.0)
        g.results = [CheckResult("q1", "t", 12.0, earned)]
        report.save(g, out / name)
    (out / ".batch").mkdir()
    late = Grade("alice", Path("/subs/alice/hw.ipynb"), "graded", max_score=12.0)
    late.results = [CheckResult("q1", "t", 12.0, 7.0)]
    report.save(late, out / "alice")
    report.write_gradebook([late], out / "gradebook.csv", ["q1"])
    report.write_canvas([late], out / "canvas.csv", "svhn")
    report.write_moodle([late], out / "moodle.csv", "svhn")
    rows = _gradebook(out)
    assert {name: row["score"] for name, row in rows.items()} == {
        "alice": "7",
        "bob": "12",
        "carol": "3",
    }
    with open(out / "canvas.csv", newline="") as handle:
        canvas = {row[3]: row[5] for row in list(csv.reader(handle))[2:]}
    assert canvas == {"alice": "7", "bob": "12", "carol": "3"}
    moodle = _feedback(out)
    assert sorted(moodle) == ["alice", "bob", "carol"] and moodle["bob"].startswith("12/12")


#: Every C0 control but tab, newline and carriage return (csv's own), DEL and every C1 control.
CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def test_no_control_character_a_submission_chose_reaches_the_gradebooks(tmp_path):
    """Names of artifacts, of notebooks in a reason, a grader error's message: escaped in
    gradebook.csv, canvas.csv and moodle.csv as in report.md (C0 and C1 controls, ESC and CSI
    included), so `cat gradebook.csv` cannot retitle the terminal, clear it or forge a line."""
    g = Grade("art", Path("art.ipynb"), "several notebooks", max_score=12.0)
    g.results = [CheckResult("q1", "t", 12.0, 0.0, TRAP_NAME)]
    g.notes = [f"artifact {TRAP_NAME} is a FIFO (named pipe): ignored", "c1 \x9b2J\x9d0;T\x9c"]
    g.instructor_notes = [f"ran beside {TRAP_NAME}"]
    g.reason = f"the folder holds 2 notebooks ({TRAP_NAME}.ipynb, a.ipynb): keep the one to grade"
    report.save(g, tmp_path / "art")
    report.write_gradebook([g], tmp_path / "gradebook.csv", ["q1"])
    report.write_canvas([g], tmp_path / "canvas.csv", "svhn")
    report.write_moodle([g], tmp_path / "moodle.csv", "svhn")
    for name in ["gradebook.csv", "canvas.csv", "moodle.csv", "art/report.md"]:
        text = (tmp_path / name).read_text()
        assert CONTROLS.findall(text) == [], (name, text)
    notes = _gradebook(tmp_path)["art"]["notes"]
    assert "\\x1b[2J" in notes and "\\x9b2J" in notes and "keep the one to grade" in notes


def test_a_student_folder_whose_notebook_the_walk_does_not_see_gets_a_row_saying_why(tmp_path):
    """A shell glob (or a folder of students) with alice's notebook only as a Jupyter checkpoint
    and dave's named HW.IPYNB: rows alice and dave, whose reason says what was found, beside bob;
    a folder of students with an empty student folder gives it a row too."""
    subs = tmp_path / "subs"
    for where in ("bob/hw.ipynb", "alice/.ipynb_checkpoints/hw-checkpoint.ipynb", "dave/HW.IPYNB"):
        (subs / where).parent.mkdir(parents=True, exist_ok=True)
        write(notebook_of("1"), subs / where)
    for given in (sorted(subs.iterdir()), [subs]):
        found = {s.student: s.path for s in roster.collect_submissions(given)}
        assert found == {
            "alice": subs / "alice",
            "bob": subs / "bob" / "hw.ipynb",
            "dave": subs / "dave",
        }
    alice, dave = roster.no_notebook(subs / "alice"), roster.no_notebook(subs / "dave")
    assert alice.startswith("no notebook found") and "is a Jupyter checkpoint" in alice, alice
    assert "HW.IPYNB: a notebook's name ends in .ipynb (lower case)" in dave, dave
    assert roster.no_notebook(subs / "bob") == roster.no_notebook(subs / "bob" / "hw.ipynb") == ""
    (subs / "erin").mkdir()
    assert "erin" in {s.student for s in roster.collect_submissions([subs])}
    with pytest.raises(FileNotFoundError, match="nothing to grade"):
        roster.collect_submissions([subs / "erin"])


def test_course_grade_of_one_student_folder_keeps_every_row_and_says_why_a_folder_has_none(
    tmp_path, sandboxed, capsys
):
    """`course grade subs` then `course grade subs/alice` (alice's notebook in a folder she named
    bob) into the same --out: a row alice, bob's grade and row untouched, carol's row kept; a
    student folder holding only a checkpoint gets "no notebook" with the reason, exit 0."""
    subs, out = tmp_path / "subs", tmp_path / "grades"
    for where in ("bob/hw.ipynb", "carol/hw.ipynb", "alice/bob/hw.ipynb"):
        (subs / where).parent.mkdir(parents=True, exist_ok=True)
        (subs / where).write_text('{"cells": [')
    (subs / "erin" / ".ipynb_checkpoints").mkdir(parents=True)
    shutil.copy(EXERCISE, subs / "erin" / ".ipynb_checkpoints" / "hw-checkpoint.ipynb")
    assert _grade([subs], out) == 0, capsys.readouterr()
    rows = _gradebook(out)
    assert sorted(rows) == ["alice", "bob", "carol", "erin"]
    assert rows["erin"]["status"] == "no notebook", rows["erin"]
    assert "hw-checkpoint.ipynb is a Jupyter checkpoint" in rows["erin"]["notes"]
    bob = (out / "bob" / "result.json").read_text()
    assert _grade([subs / "alice"], out) == 0, capsys.readouterr()
    assert (out / "bob" / "result.json").read_text() == bob
    assert sorted(_gradebook(out)) == ["alice", "bob", "carol", "erin"]
    assert report.load(out / "alice").path == subs / "alice" / "bob" / "hw.ipynb"


def test_a_second_run_into_the_same_out_stops_before_writing(tmp_path, capsys):
    """Red team 33b: two `course grade` runs into one --out at once each emptied and rewrote the
    other's student folders, and both printed wrong grades as "graded". A run holds --out's lock
    (`plan.out_locked`) from the end of its checks to its end: a second one exits 2 and writes
    nothing; the lock is free again once the first ends."""
    from course_tools.grade.core import plan

    subs, out = tmp_path / "subs", tmp_path / "grades"
    subs.mkdir()
    (subs / "alice.ipynb").write_text('{"cells": [')
    with plan.out_locked(out):
        assert _grade([subs / "alice.ipynb"], out) == 2
        assert "another course grade is writing into" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [plan.OUT_LOCK]  # nothing written
        with pytest.raises(ValueError, match="wait for it to end, or give another --out"):
            with plan.out_locked(out):
                pass
    with plan.out_locked(out):  # free once the first run ended
        pass
