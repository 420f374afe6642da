"""One submission, graded: read, run in the sandbox with the probe (`submission.run`), its artifacts
copied out (capped), scored by the hidden tests in the check process, and its grade and report
saved; never an exception for anything the submission does (`grade_one`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_tools import colab, exercise
from course_tools.grade.core import files, notebooks, probe, reading, report, staging, submission
from course_tools.grade.core.checker import START_FILE_MB, CheckProcess, CheckVerdict
from course_tools.grade.core.checks import ARTIFACTS_NAME
from course_tools.grade.core.plan import (
    CHECK_TIMEOUT_S,
    GRADES_MARK,
    NOTEBOOK_MB,
    Batch,
    check_out,
)
from course_tools.grade.core.report import CheckResult, Grade
from course_tools.grade.core.roster import (
    Submission,
    no_notebook,
    several_notebooks,
    too_many_files,
)
from course_tools.grade.core.tamper import TamperWatch
from course_tools.grade.jail import workdir as jail_workdir
from course_tools.runner import KERNEL_LOG_KB, RunOutcome

#: What is copied of a submission's artifacts, in MB (the course's files take a few tens of MB in
#: the full profile); the rest is left out, with a note in the report.
ARTIFACTS_MB = 64
#: The most artifact files copied (the course's are a few dozen), and of notes on skipped ones.
ARTIFACT_FILES = 1000
MAX_NOTES = 20


def _same_code(a, b) -> bool:
    """The same code cells, the Colab install cell aside (the solution's also installs the
    tools for its hidden tests; the exercise's installs only the student package)."""

    def code(nb) -> list[str]:
        return [
            c.source.strip()
            for c in nb.cells
            if c.cell_type == "code"
            and c.source.strip()
            and not c.source.startswith(colab.INSTALL_MARK)
        ]

    return code(a) == code(b)


def copy_artifacts(
    source: Path,
    target: Path,
    within: Path,
    limit_mb: int = ARTIFACTS_MB,
    limit_files: int = ARTIFACT_FILES,
) -> list[str]:
    """Copy the regular files under `source` (a folder the submission wrote, inside `within`) to
    `target`, up to `limit_mb` and `limit_files`; notes on what was skipped. A file larger than
    what is left of `limit_mb` (a sparse file's apparent size included) is skipped with a note and
    the others still copied; the bytes counted are those copied. Symbolic links are never
    followed: not in the path from `within` to `source`, not inside it (they could point at the
    grader's files); FIFOs, sockets and devices are never opened; a file whose path holds a
    control character (an escape sequence for the instructor's terminal) is not copied; the walk
    has no recursion and stops at `files.MAX_DEPTH` levels."""
    notes: list[str] = []
    for folder in [source, *source.parents]:
        if folder == within:
            break
        if folder.is_symlink():
            note = f"artifact folder {folder.relative_to(within)} is a symbolic link: ignored"
            return [note]
    if not source.is_dir():
        return notes
    budget = limit_mb * 2**20
    total = copied = skipped = too_large = failed = 0
    for entry in files.walk(source, max_entries=limit_files * 10):
        if entry.kind == "a folder":
            continue
        if entry.kind != "a regular file":
            skipped += 1
            if skipped <= MAX_NOTES:
                notes.append(f"artifact {entry.relative} is {entry.kind}: ignored")
            continue
        if copied >= limit_files:
            notes.append(f"more than {limit_files} files of artifacts: the rest was ignored")
            break
        if not str(entry.relative).isprintable():  # a name that would drive a terminal
            skipped += 1
            if skipped <= MAX_NOTES:
                notes.append(
                    f"artifact {str(entry.relative)!r} has a control character in its name: ignored"
                )
            continue
        if total + entry.size > budget:
            too_large += 1
            if too_large <= MAX_NOTES:
                notes.append(
                    f"artifact {entry.relative} ({entry.size / 2**20:,.1f} MB) not copied: the "
                    f"artifacts copied may take {limit_mb} MB in all"
                )
            continue
        try:
            # a path the grades' file system refuses (too long there, a name it forbids)
            (target / entry.relative).parent.mkdir(parents=True, exist_ok=True)
            # its times too: kept for the instructor
            total += files.copy_regular(entry.path, target / entry.relative, budget - total)
            copied += 1
        except OSError as exc:  # or changed since the walk (a kernel's orphan cannot: all killed)
            failed += 1
            if failed <= MAX_NOTES:  # the reason without the paths (the grades' are the host's)
                why = exc.strerror or type(exc).__name__
                notes.append(f"artifact {_shown(entry.relative)} not copied: {why}")
    if skipped > MAX_NOTES:
        notes.append(f"... and {skipped - MAX_NOTES} more artifacts that are not regular files")
    if too_large > MAX_NOTES:
        notes.append(f"... and {too_large - MAX_NOTES} more artifacts too large to copy")
    if failed > MAX_NOTES:
        notes.append(f"... and {failed - MAX_NOTES} more artifacts not copied")
    return notes


def take_starts(source: Path, target: Path) -> list[str]:
    """Copy the grader's copies of each start (`probe.START_FILE`, which the probe writes in the
    kernel's `COURSE_ARTIFACTS` folder, `source`) into the artifacts the check process reads
    (`target`), in place of any file of that name among the submission's own; notes on why not.
    The check process reads it only when its SHA-256 is the one in the probe's facts
    (`checker.measured`): missing or changed, each model's start counts as unmeasured."""
    name = probe.START_FILE
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / name).unlink(missing_ok=True)
        if source.is_symlink() or (source / name).is_symlink() or not (source / name).is_file():
            return []  # a link is never followed (`copy_artifacts`)
        files.copy_regular(source / name, target / name, START_FILE_MB * 2**20)
    except (OSError, files.UnsafeFile) as exc:
        why = getattr(exc, "strerror", None) or str(exc)[:200]
        return [f"the grader's copies of the starts ({name}) not copied: {why}"]
    return []


def _shown(relative: Path, limit: int = 200) -> str:
    """An artifact's path under the artifacts folder, for a note: its end when it is long."""
    text = str(relative)
    return text if len(text) <= limit else f"...{text[-limit:]}"


def zero_results(parts: exercise.SolutionParts, message: str = "") -> list[CheckResult]:
    """Every test and written answer of the solution at 0 points, with `message`."""
    results = [CheckResult(t.question, t.title, t.points, 0.0, message) for t in parts.tests]
    results += [
        CheckResult(a.question, a.title, a.points, 0.0, message, manual=True) for a in parts.answers
    ]
    return results


def _read_notebook(g: Grade, parts: exercise.SolutionParts) -> nbformat.NotebookNode | None:
    """The submission as a notebook, or None (and `g` says why) when it is not one: its bytes
    capped, and its JSON values counted before they are parsed (`notebooks`)."""
    try:
        text = files.read_regular(g.path, NOTEBOOK_MB * 2**20).decode("utf-8")
        notebook = notebooks.parse(text)
        if not isinstance(notebook.get("cells"), list):
            raise ValueError("it has no list of cells")
        return notebook
    except files.UnsafeFile as exc:
        g.status = "invalid notebook"
        g.reason = f"{exc} (hand in the notebook file itself)"
    except Exception as exc:
        g.status = "invalid notebook"
        g.reason = (
            f"{g.path.name} cannot be read as a notebook: {type(exc).__name__}: {str(exc)[:300]}"
        )
    g.results = zero_results(parts, "not graded: the file is not a valid notebook")
    return None


def work_folder_name(student: str) -> str:
    """The name of `student`'s work folder in the batch's work folder: short and fixed, never
    the student's name. The kernel's sockets are files in it, whose paths fit 107 bytes (a name
    of 60 characters stopped the kernel from starting), and no name is the grader's own there."""
    return "w-" + hashlib.sha256(student.encode()).hexdigest()[:16]


def _run(
    batch: Batch, g: Grade, notebook, base: Path, cancel: threading.Event | None
) -> tuple[RunOutcome, dict]:
    """Run the notebook and the probe in a work folder under `base`; note how it went in `g`."""
    folder = batch.out / g.student
    workdir = base / work_folder_name(g.student)
    workdir.mkdir()
    try:
        if batch.sandboxed:  # as root, a file system capped in bytes and inodes (`jail.workdir`)
            jail_workdir.cap(workdir, batch.limits.disk_mb)
        env = {
            **os.environ,
            **batch.settings.env(),
            "COURSE_ARTIFACTS": str(workdir / "artifacts"),
            "MPLBACKEND": "Agg",
        }
        setup = submission.RunSetup(
            batch.limits,
            probe_source=batch.parts.probe,
            log_path=folder / "kernel.log",
            sandboxed=batch.sandboxed,
            hidden=(base, batch.out, batch.solution_path),
            clock_folder=workdir / "artifacts" / ARTIFACTS_NAME,
        )
        outcome, facts, probe_error = submission.run(notebook, workdir, env, setup, cancel=cancel)
        artifacts = workdir / "artifacts" / ARTIFACTS_NAME
        g.notes += copy_artifacts(artifacts, folder / "artifacts", within=workdir)
        g.notes += take_starts(workdir / "artifacts", folder / "artifacts")
    finally:
        jail_workdir.release(workdir)
        # a process of the submission may still be dying (killed a moment ago): once more after
        left = files.remove_tree(workdir)
        if left:
            time.sleep(0.5)
            left = files.remove_tree(workdir)
        if left:  # the grader's matter, not the student's row
            left_out = report.console("; ".join(left))
            print(f"course grade: could not remove {workdir}: {left_out}", file=sys.stderr)
    if outcome.log_error:  # the grader's own file (a full disk): graded again next run
        raise OSError(f"the grader could not write the kernel's log {outcome.log_error}")
    # its outputs may hold lone surrogates: written escaped
    text = nbformat.writes(outcome.notebook)
    (folder / "executed.ipynb").write_text(text, encoding="utf-8", errors="backslashreplace")
    g.cell_errors = [_numbered(error, outcome.notebook) for error in outcome.cell_errors]
    if outcome.status != "ran":
        g.status, g.reason = outcome.status, _numbered(outcome.reason, outcome.notebook)
    if outcome.timed_out_cells:
        timed_out = [_numbered(f"cell {i}", outcome.notebook) for i in outcome.timed_out_cells]
        g.notes.append(
            f"{', '.join(timed_out)} ran longer than {batch.limits.cell_timeout} s and "
            "were interrupted"
        )
    g.notes += [
        f"outputs cut in {_numbered(note, outcome.notebook)}" for note in outcome.output_notes
    ]
    if outcome.clock_note:
        g.notes.append(f"the grader's clock of the files: {outcome.clock_note}")
    if outcome.log_dropped:
        g.notes.append(
            f"kernel.log cut: the kernel process wrote {outcome.log_dropped:,} bytes more than "
            f"the {KERNEL_LOG_KB} KB kept (a cell writing to its file descriptors 1 or 2)"
        )
    if probe_error and outcome.status == "ran":
        g.notes.append(f"the probe could not read the notebook's memory: {probe_error}")
    g.run_seconds, g.peak_mb = outcome.seconds, outcome.peak_mb
    return outcome, facts


def _numbered(text: str, notebook) -> str:
    """`text` with the runner's "cell I" (the cell's index in the file) said as the hidden
    tests say a cell, "cell [N]": N its execution count, the `In [N]` beside it in
    `executed.ipynb` (`reading.Code.cells`). A cell that did not run keeps its index."""
    cells = getattr(notebook, "cells", None) or []

    def count(match: re.Match) -> str:
        index = int(match[1])
        number = cells[index].get("execution_count") if index < len(cells) else None
        return f"cell [{number}]" if isinstance(number, int) else match[0]

    return re.sub(r"\bcell (\d+)\b", count, text or "", count=1)


def observations(outcome: RunOutcome) -> dict:
    """What the grader saw itself while the notebook ran, for the hidden tests (`OBSERVED`): each
    code cell's source (as handed in: the check process reads it as code, never runs it) and its
    start and end by the grader's clock, and when each artifact last changed by that clock
    (`RunOutcome.file_times`). Nothing in it comes from the kernel."""
    times = {int(index): (start, end) for index, start, end in outcome.cell_times}
    cells, chars = [], 0
    for index, cell in enumerate(outcome.notebook.cells):
        if cell.get("cell_type") != "code":
            continue
        start, end = times.get(index, (None, None))
        source = cell.get("source")
        source = source if isinstance(source, str) else ""
        chars += len(source)
        cut = chars > reading.MAX_CHARS and bool(source.strip())  # the check process's cap:
        if chars > reading.MAX_CHARS:  # marked, code the kernel ran unread is unreadable
            source = ""
        cells.append({"index": index, "source": source, "start": start, "end": end})
        if cut:
            cells[-1]["cut"] = True
    return {"cells": cells, "files": outcome.file_times}


def _answer_result(answer: exercise.Answer, text: str | None) -> CheckResult:
    if text is None:
        message, earned = "the answer cell is missing", 0.0
    elif len(text.split()) < 5:
        message, earned = "no answer written", 0.0
    else:
        message = "answered: points given for now, the instructor reads it"
        earned = answer.points
    return CheckResult(answer.question, answer.title, answer.points, earned, message, manual=True)


def _score(g: Grade, parts: exercise.SolutionParts, verdicts: list[CheckVerdict]) -> None:
    for test, (passed, message) in zip(parts.tests, verdicts):
        earned = test.points if passed else 0.0
        g.results.append(CheckResult(test.question, test.title, test.points, earned, message))
    g.results += [_answer_result(a, g.answers.get(a.question)) for a in parts.answers]


class Cancelled(Exception):
    """Grading stopped (Ctrl-C, an error elsewhere in the batch) before this submission's grade."""


@dataclass(frozen=True)
class Workspace:
    """What grading one submission uses besides the batch: the check process, the folder its work
    folder goes in, the event that cancels it (its kernel is killed, `Cancelled` raised) and the
    watch on the course and the solution (unsandboxed batches)."""

    checks: CheckProcess
    base: Path
    cancel: threading.Event | None = None
    watch: TamperWatch | None = None


def _grade_notebook(batch: Batch, submission: Submission, where: Workspace) -> Grade:
    checks, base, cancel = where.checks, where.base, where.cancel
    parts = batch.parts
    g = Grade(submission.student, Path(submission.path), status="graded")
    crowded = too_many_files(submission.path)
    if crowded:
        g.status, g.reason = "too many files", crowded
        g.results = zero_results(parts, "not graded: no notebook found at the folder's top")
        return g
    missing = no_notebook(submission.path)
    if missing:
        g.status, g.reason = "no notebook", missing
        g.results = zero_results(parts, "not graded: no notebook found")
        return g
    several = several_notebooks(submission.path)
    if several:
        g.status = "several notebooks"
        names = ", ".join(str(p.relative_to(submission.path)) for p in several)
        g.reason = f"the folder holds {len(several)} notebooks ({names}): keep the one to grade"
        g.results = zero_results(parts, "not graded: which notebook is the submission?")
        return g
    notebook = _read_notebook(g, parts)
    if notebook is None:
        return g
    g.answers = {a.question: exercise.find_answer(notebook, a) for a in parts.answers}
    if _same_code(notebook, batch.handed_out) and not any(g.answers.values()):
        g.status = "unchanged exercise"
        g.reason = "the submission is the exercise as handed out: no code and no answer to grade"
        g.results = zero_results(parts, "not graded: nothing was changed in the exercise")
        return g
    outcome, facts = _run(batch, g, notebook, base, cancel)
    if cancel is not None and cancel.is_set():
        raise Cancelled("grading stopped while this submission ran")
    started = time.monotonic()
    artifacts = batch.out / g.student / "artifacts"
    if batch.sandboxed:  # the check process sees this copy at `artifacts` (`plan.start_checks`)
        staged = staging.folder(where.base) / g.student
        staging.put(artifacts, staged / "artifacts")
    try:
        verdicts = checks.run(artifacts, facts, parts.tests, CHECK_TIMEOUT_S, observations(outcome))
    finally:
        if batch.sandboxed:
            # all of <student>, no empty folder left named after it: never a mount point of the
            # check process's (`sandbox._in_order`: the checkout or the data in --out), as
            # `plan.check_out` refuses a student whose folder of the grades is or holds them
            staging.clear(staged)
        # the grader's working file of the starts, read by the check process: not the student's
        (artifacts / probe.START_FILE).unlink(missing_ok=True)
    g.check_seconds = time.monotonic() - started
    _score(g, parts, verdicts)
    return g


def grade_one(batch: Batch, submission: Submission, where: Workspace) -> Grade:
    """Grade one submission and save its grade and report into <out>/<student>/ (emptied first,
    and marked `plan.GRADES_MARK`; ValueError, before anything is touched, when that folder is
    not the grader's: `plan.check_out`).
    Never raises for anything a submission does: a failure becomes a "grader error" grade for
    this one only, saved all the same (the batch goes on). Once `where.cancel` is set, its kernel
    is killed and `Cancelled` raised (no grade: the caller stops)."""
    if where.cancel is not None and where.cancel.is_set():
        raise Cancelled("grading stopped before this submission ran")
    started = time.monotonic()
    folder = batch.out / submission.student
    # never another folder of --out (the checkout, the data): the routes refuse the batch first
    check_out(batch.out, [submission], batch.solution_path)
    try:
        files.remove_tree(folder)
        folder.mkdir(parents=True)
        (folder / GRADES_MARK).write_text("graded by course grade: emptied when graded again\n")
        g = _grade_notebook(batch, submission, where)
        if where.watch is not None:
            g.notes += where.watch.notes()
        _finish(batch, submission, g, started)
        report.save(g, folder)
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, this submission's only
        reason = f"{type(exc).__name__}: {str(exc)[:500]}"
        g = Grade(submission.student, Path(submission.path), "grader error", reason)
        g.results = zero_results(batch.parts, "not graded: grader error")
        _finish(batch, submission, g, started)
        with contextlib.suppress(OSError):  # a full disk: the gradebook still gets its row
            report.save(g, folder)
    return g


def _finish(batch: Batch, submission: Submission, g: Grade, started: float) -> None:
    g.seconds = time.monotonic() - started
    g.max_score = batch.parts.max_points
    try:
        g.key = batch.key(submission.path)
    except Exception:  # noqa: BLE001 - no key: graded again next time, the row is still written
        g.key = ""
