"""One submission, graded: read, run in the sandbox with the probe (`submission.run`), its artifacts
copied out (capped), scored by the hidden tests in the check process, and its grade and report
saved; never an exception for anything the submission does (`grade_one`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_tools import colab, exercise
from course_tools.grade.core import report, submission
from course_tools.grade.core.checker import CheckProcess, CheckVerdict
from course_tools.grade.core.checks import ARTIFACTS_NAME
from course_tools.grade.core.plan import CHECK_TIMEOUT_S, Batch
from course_tools.grade.core.report import CheckResult, Grade
from course_tools.grade.core.roster import Submission, several_notebooks
from course_tools.grade.core.tamper import TamperWatch
from course_tools.grade.jail import workdir as jail_workdir
from course_tools.runner import KERNEL_LOG_KB, RunOutcome

#: What is copied of a submission's artifacts, in MB (the course's files take a few tens of MB in
#: the full profile); the rest is left out, with a note in the report.
ARTIFACTS_MB = 64
#: The installed course package, watched for changes while submissions run unsandboxed.


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
    source: Path, target: Path, within: Path, limit_mb: int = ARTIFACTS_MB
) -> list[str]:
    """Copy the regular files under `source` (a folder the submission wrote, inside `within`) to
    `target`, up to limit_mb; notes on what was skipped. Symbolic links are never followed: not in
    the path from `within` to `source`, not inside it (they could point at the grader's files)."""
    notes, total = [], 0
    for folder in [source, *source.parents]:
        if folder == within:
            break
        if folder.is_symlink():
            note = f"artifact folder {folder.relative_to(within)} is a symbolic link: ignored"
            return [note]
    if not source.is_dir():
        return notes
    for root, folders, files in os.walk(source):  # os.walk does not enter linked folders
        for name in sorted(folders + files):
            path = Path(root) / name
            relative = path.relative_to(source)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                notes.append(f"artifact {relative} is a symbolic link: ignored")
            elif stat.S_ISREG(mode):
                total += path.lstat().st_size
                if total > limit_mb * 2**20:
                    notes.append(f"artifacts larger than {limit_mb} MB: the rest was ignored")
                    return notes
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / relative, follow_symlinks=False)
                # its times too: the checks compare the checkpoints' times with the timings
                shutil.copystat(path, target / relative, follow_symlinks=False)
        folders.sort()
    return notes


def zero_results(parts: exercise.SolutionParts, message: str = "") -> list[CheckResult]:
    """Every test and written answer of the solution at 0 points, with `message`."""
    results = [CheckResult(t.question, t.title, t.points, 0.0, message) for t in parts.tests]
    results += [
        CheckResult(a.question, a.title, a.points, 0.0, message, manual=True) for a in parts.answers
    ]
    return results


def _read_notebook(g: Grade, parts: exercise.SolutionParts) -> nbformat.NotebookNode | None:
    """The submission as a notebook, or None (and `g` says why) when it is not one."""
    try:
        notebook = nbformat.read(g.path, as_version=4)
        if not isinstance(notebook.get("cells"), list):
            raise ValueError("it has no list of cells")
        return notebook
    except Exception as exc:
        g.status = "invalid notebook"
        g.reason = (
            f"{g.path.name} cannot be read as a notebook: {type(exc).__name__}: {str(exc)[:300]}"
        )
        g.results = zero_results(parts, "not graded: the file is not a valid notebook")
        return None


def _run(
    batch: Batch, g: Grade, notebook, base: Path, cancel: threading.Event | None
) -> tuple[RunOutcome, dict]:
    """Run the notebook and the probe in a work folder under `base`; note how it went in `g`."""
    folder = batch.out / g.student
    workdir = base / g.student
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
        )
        outcome, facts, probe_error = submission.run(notebook, workdir, env, setup, cancel=cancel)
        artifacts = workdir / "artifacts" / ARTIFACTS_NAME
        g.notes += copy_artifacts(artifacts, folder / "artifacts", within=workdir)
    finally:
        jail_workdir.release(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    # its outputs may hold lone surrogates: written escaped
    text = nbformat.writes(outcome.notebook)
    (folder / "executed.ipynb").write_text(text, encoding="utf-8", errors="backslashreplace")
    g.cell_errors = outcome.cell_errors
    if outcome.status != "ran":
        g.status, g.reason = outcome.status, outcome.reason
    if outcome.timed_out_cells:
        g.notes.append(
            f"cell(s) {', '.join(map(str, outcome.timed_out_cells))} ran longer than "
            f"{batch.limits.cell_timeout} s and were interrupted"
        )
    g.notes += [f"outputs cut in {note}" for note in outcome.output_notes]
    if outcome.log_dropped:
        g.notes.append(
            f"kernel.log cut: the kernel process wrote {outcome.log_dropped:,} bytes more than "
            f"the {KERNEL_LOG_KB} KB kept (a cell writing to its file descriptors 1 or 2)"
        )
    if probe_error and outcome.status == "ran":
        g.notes.append(f"the probe could not read the notebook's memory: {probe_error}")
    g.run_seconds, g.peak_mb = outcome.seconds, outcome.peak_mb
    return outcome, facts


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
    _, facts = _run(batch, g, notebook, base, cancel)
    if cancel is not None and cancel.is_set():
        raise Cancelled("grading stopped while this submission ran")
    started = time.monotonic()
    artifacts = batch.out / g.student / "artifacts"
    verdicts = checks.run(artifacts, facts, parts.tests, CHECK_TIMEOUT_S)
    g.check_seconds = time.monotonic() - started
    _score(g, parts, verdicts)
    return g


def grade_one(batch: Batch, submission: Submission, where: Workspace) -> Grade:
    """Grade one submission and save its grade and report into <out>/<student>/ (emptied first).
    Never raises for anything a submission does: a failure becomes a "grader error" grade for
    this one only, saved all the same (the batch goes on). Once `where.cancel` is set, its kernel
    is killed and `Cancelled` raised (no grade: the caller stops)."""
    if where.cancel is not None and where.cancel.is_set():
        raise Cancelled("grading stopped before this submission ran")
    started = time.monotonic()
    folder = batch.out / submission.student
    try:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
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
    g.key = batch.key(submission.path)
