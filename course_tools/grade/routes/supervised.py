"""`course grade`'s batch here, crash-only: a child process grades, this one supervises it.

Some kernel quotas are charged to a host user, not to a namespace: epoll watches, POSIX message
queue bytes, pending signals, pipe pages, inotify instances and watches. Run by an ordinary user,
the sandbox has that user's host uid, so a submission can use up the quota of the instructor's
whole account, and libzmq (the grader's link to each kernel) then calls abort() instead of raising.
The grader cannot prevent that without a host uid of the sandbox's own; it survives it instead:

1. A child process grades (`batch.grade_here`); this one starts no kernel and uses no ZeroMQ.
2. Before a submission runs, the child records in `<out>/.batch/running/` that it runs, and
   whether alone (no other submission running or left to start in that child); once its grade
   is saved, that it is done (`RunningMarks`).
3. When the child dies by a signal, the grades saved are kept, and, whoever ran, the next
   child starts once no per-user quota is used up (`quotas_left_full`: the dead child's
   sandboxes, torn down, free what they held), or after `SETTLE_S`. The submissions that ran
   beside others run again, alone, one child each, and each one's row says so and how its run
   alone ended (`beside_note`, naming no one: it reaches the student; whom it ran beside is
   said on the console and in the gradebook only, `beside_whom`); one that ran ALONE is scored
   0 with `died_note` in its report and on the console (its name is the finding), unless a
   per-user quota was still used up then: the cause is elsewhere (another batch or program of
   the account) and the row is a grader error that the next run grades again
   (`elsewhere_note`); the others go on in a new child.
   Every death either scores a submission or moves those that ran to the one-at-a-time queue, so
   the restarts are bounded; `MAX_IDLE_DEATHS` deaths with no submission running end the batch,
   the submissions left being grader failures that the next run grades again.

The Slurm route does the same in each task (`slurm_array.run_task`), except that a task never
runs alone on its node: a death there never scores 0.

Example:

    from course_tools.grade.routes import supervised
    grades = supervised.grade(batch, ["submissions/"], jobs=2, progress=True, regrade=False)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from course_tools.grade.core import checker, one_submission, report
from course_tools.grade.core.plan import (
    Batch,
    check_out,
    load_plan,
    saved_grades,
    to_grade,
    write_gradebooks,
)
from course_tools.grade.core.report import Grade
from course_tools.grade.core.roster import Submission, collect_submissions
from course_tools.grade.jail import quotas
from course_tools.grade.routes import batch

#: Status of a submission scored 0 because the grader's process died while it ran alone.
DIED = "killed the grader"
#: Deaths of the child with no submission running (at start-up or clean-up) before giving up.
MAX_IDLE_DEATHS = 2
#: Seconds a child has to clean up after Ctrl-C or SIGTERM before it is killed.
STOP_WAIT_S = 120
#: Seconds a per-user quota may stay used up after a grading process died before the cause is
#: taken to be elsewhere: its sandboxes die with it (--die-with-parent), and a sandbox holding
#: the whole epoll quota took about 2 s to be gone, which frees it.
SETTLE_S = 15.0


class ChildFailed(RuntimeError):
    """The grading process ended with an error of its own (printed above), not by a signal."""


def died_note(signal_name: str, where: str = "alone") -> str:
    """Why a submission is scored 0 when the grader died while it ran `where`."""
    return (
        f"the grader's process died ({signal_name}) while this submission ran {where}: it "
        "probably exhausted a limit the kernel charges to your account (epoll watches, message "
        "queue bytes, pending signals, pipe pages, inotify watches) or the grader's memory; "
        "`--regrade` tries again"
    )


def beside_note(signal_name: str, others: list[str]) -> str:
    """What a submission's row says when the grader died while it ran beside `others` (the
    submissions running in the same process then) and it was graded again, alone: one of them,
    or a program elsewhere, was the cause. It names none of them: the row's notes reach the
    student (its report, Moodle's feedback); `beside_whom` is the instructor's.

    >>> beside_note("SIGABRT", ["bob"]).split(": ")[0]
    "the grader's process died (SIGABRT) while this submission ran beside another"
    """
    where = "beside another" if others else "while others were still to start"
    return (
        f"the grader's process died ({signal_name}) while this submission ran {where}: "
        "graded again, alone"
    )


def beside_whom(signal_name: str, others: list[str]) -> str:
    """The note for the instructor only (`Grade.instructor_notes`: the gradebook, never the
    student's report or an export) naming the submissions `others` a row ran beside when the
    grader's process died."""
    return f"ran beside {', '.join(others)} when the grader's process died ({signal_name})"


#: Added to `beside_note` when the run alone saved its grade with no death.
NO_DEATH_ALONE = "; that run ended without a death (this grade)"


def elsewhere_note(signal_name: str, full: list[str], where: str = "alone") -> str:
    """Why a submission is a grader error when the grader died while it ran `where` but the
    per-user quotas `full` stayed used up once its sandboxes were gone."""
    return (
        f"the grader's process died ({signal_name}) while this submission ran {where}, but "
        f"your account's {' and '.join(full)} stayed used up once its sandboxes were gone: the "
        "cause is elsewhere (another batch or program of your account); the next run grades it "
        "again"
    )


def exhausted_quotas() -> list[str]:
    """The per-user quotas of this process's user that are used up now, by trying each once
    (`jail.quotas`: epoll watches, inotify instances and watches, message-queue bytes, pending
    signals, pipe pages). Tests replace this function to simulate a quota held by another program.

    >>> exhausted_quotas()
    []
    """
    return quotas.used_up()


def quotas_left_full(wait_s: float | None = None) -> list[str]:
    """The per-user quotas still used up `wait_s` seconds (default `SETTLE_S`) after a grading
    process died, asked every 0.2 s: [] as soon as none is (its sandboxes, gone, held them, or
    nothing did)."""
    deadline = time.monotonic() + (SETTLE_S if wait_s is None else wait_s)
    while (full := exhausted_quotas()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return full


@dataclass
class Mark:
    """What `RunningMarks` recorded of one submission."""

    student: str
    state: str  # "running" or "done"
    alone: bool
    pid: int


class RunningMarks:
    """The records of one child: `started` before a submission runs (alone when nothing else
    runs or is left to start in this child), `done` once its grade is saved."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder, self.left, self.running = folder, count, 0
        self.lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True)

    def _write(self, student: str, state: str, *, alone: bool) -> None:
        text = json.dumps({"student": student, "state": state, "alone": alone, "pid": os.getpid()})
        # named by a hash: `.<name>.json.tmp` would be over a file name's 255 bytes for a
        # notebook's name of 245 or more (the name is read from the file, `read_marks`)
        path = self.folder / f"{hashlib.sha256(student.encode()).hexdigest()[:32]}.json"
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)  # whole or not at all

    def started(self, student: str) -> None:
        with self.lock:
            self.left -= 1
            self.running += 1
            alone = self.running == 1 and self.left == 0
            self._write(student, "running", alone=alone)

    def done(self, student: str) -> None:
        with self.lock:
            self.running -= 1
            self._write(student, "done", alone=False)


def read_marks(folder: Path) -> dict[str, Mark]:
    """The marks in `folder`, by student."""
    marks = {}
    for path in folder.glob("*.json"):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(path.read_text())
            marks[data["student"]] = Mark(
                data["student"], data["state"], data["alone"], data["pid"]
            )
    return marks


def clear_marks(folder: Path) -> None:
    for path in folder.glob("*.json"):
        path.unlink(missing_ok=True)


def score_died(
    b: Batch,
    s: Submission,
    note: str,
    notes: list[str] | None = None,
    whom: list[str] | None = None,
) -> Grade:
    """Save a 0 for `s` with `note` (a final grade: only --regrade tries it again), `notes` (an
    earlier death it ran beside others in) and `whom` (the instructor's notes of that death)."""
    g = Grade(s.student, Path(s.path), DIED, note, max_score=b.parts.max_points)
    g.notes, g.instructor_notes = list(notes or []), list(whom or [])
    g.results = one_submission.zero_results(b.parts, "not graded: the grader's process died")
    with contextlib.suppress(Exception):  # no key: graded again next time, the row is written
        g.key = b.key(s.path)
    with contextlib.suppress(OSError):  # a full disk: the gradebook's row says so (`unsaved`)
        report.save(g, b.out / s.student)
    print(f"course grade: {report.console(s.student)}: {note}", file=sys.stderr, flush=True)
    return g


def grader_failed(
    b: Batch,
    s: Submission,
    reason: str,
    notes: list[str] | None = None,
    whom: list[str] | None = None,
) -> Grade:
    """Save a grader failure for `s` (the next run grades it again), with `notes` and the
    instructor's notes `whom`."""
    g = Grade(s.student, Path(s.path), "grader error", reason, max_score=b.parts.max_points)
    g.notes, g.instructor_notes = list(notes or []), list(whom or [])
    g.results = one_submission.zero_results(b.parts, "not graded: grader error")
    with contextlib.suppress(Exception):  # graded again all the same (a grader failure)
        g.key = b.key(s.path)
    with contextlib.suppress(OSError):  # a full disk: graded again all the same
        report.save(g, b.out / s.student)
    return g


def die_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when its parent dies (Linux; else nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def remove_leftovers(pid: int) -> None:
    """Remove what a grading process `pid`, killed, left in the temporary folder: its folder of
    work folders (`batch.remove_dead_graders_folders`, said on the console), its empty file, its
    seccomp filter's folder and its kernels' folders, which hold their sandbox's command line
    (`jail.sandbox`, `jail.seccomp`, `runner.run_notebook`: removed at exit otherwise)."""
    for folder in batch.remove_dead_graders_folders():
        print(f"course grade: removed {folder}, left by a grader that was killed", file=sys.stderr)
    where = Path(tempfile.gettempdir())
    for path in where.glob(f"course-grade-empty-{pid}-*"):
        path.unlink(missing_ok=True)
    for prefix in ("course-grade-seccomp", "course-kernel"):
        for path in where.glob(f"{prefix}-{pid}-*"):
            shutil.rmtree(path, ignore_errors=True)


def run_child(argv: list[str], cwd: Path | None = None) -> tuple[int, int]:
    """Run `argv` in `cwd` and wait; (its return code, negative for the signal that ended it; its
    pid). Ctrl-C, SIGTERM or SIGHUP here let the child clean up (SIGTERM forwarded), then raise.
    Its PYTHONPATH keeps only absolute entries (`checker.child_env`)."""
    child = subprocess.Popen(argv, cwd=cwd, env=checker.child_env())

    def forward(signum, frame):
        with contextlib.suppress(OSError):
            child.send_signal(signal.SIGTERM)
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {}
    if main:
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return child.wait(), child.pid
    except BaseException:
        # Ctrl-C reached the child too (same process group); SIGTERM was forwarded
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _child_argv(plan: Path, jobs: int, students: list[str], *, progress: bool) -> list[str]:
    # never `-m`, which puts the working folder first on sys.path (`checker.launch`)
    argv = checker.child_argv("course_tools.grade.routes.supervised", str(plan), str(jobs))
    # "--": a student's name may start with "-"
    return [*argv, *["--progress"] * progress, "--", *students]


@dataclass
class _Queue:
    """What is left to grade: first those to run alone (one child each), then the rest."""

    alone: list[Submission]
    rest: list[Submission]
    #: `beside_note` of each submission to run alone because it ran beside others in a death
    beside: dict[str, str] = field(default_factory=dict)
    #: `beside_whom` of each of those that ran beside another (the instructor's note)
    whom: dict[str, str] = field(default_factory=dict)
    #: the submissions to run alone because their kernel died beside others (`kernel_deaths`),
    #: each with its first run's score
    kernel_died: dict[str, str] = field(default_factory=dict)


def _after_death(b: Batch, queue: _Queue, ran: list[Submission], code: int, folder: Path) -> bool:
    """Sort the submissions `ran` by what the dead child recorded: scored 0 (ran alone), to run
    alone (ran beside others), back where they were (not started), once no per-user quota is
    used up (or `SETTLE_S` is over: after any death, so that the next child never starts its
    kernels while the dead one's sandboxes still hold a quota). True when one was running."""
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    full = quotas_left_full()
    marks = read_marks(folder)
    running = {m.student: m for m in marks.values() if m.state == "running"}
    done = {m.student for m in marks.values() if m.state == "done"}
    left = [s for s in ran if s.student not in running and s.student not in done]
    if len(ran) == 1:
        queue.alone[:0] = left
    else:
        queue.rest[:0] = left
    for s in ran:
        mark = running.get(s.student)
        earlier = [queue.beside[s.student]] if s.student in queue.beside else []
        whom = [queue.whom[s.student]] if s.student in queue.whom else []
        if mark is not None and mark.alone:
            if full:
                note = elsewhere_note(name, full)
                grader_failed(b, s, note, earlier, whom)
                print(f"course grade: {report.console(s.student)}: {note}", file=sys.stderr)
            else:
                score_died(b, s, died_note(name), earlier, whom)
        elif mark is not None:
            queue.alone.append(s)
            others = sorted(other for other in running if other != s.student)
            queue.beside[s.student] = beside_note(name, others)
            where = "others still to start"
            if others:
                queue.whom[s.student] = beside_whom(name, others)
                where = ", ".join(report.console(other) for other in others)
            print(
                f"course grade: the grader's process died ({name}) while "
                f"{report.console(s.student)} ran beside {where}: grading it again, alone",
                file=sys.stderr,
                flush=True,
            )
    return bool(running)


def _note_beside(b: Batch, queue: _Queue, ran: list[Submission], folder: Path) -> None:
    """Add its `beside_note` to the row of each submission of `ran` that was graded again alone
    after a death and saved its grade in this child, and say so on the console."""
    marks = read_marks(folder)
    for s in ran:
        note = queue.beside.get(s.student)
        mark = marks.get(s.student)
        if note is None or mark is None or mark.state != "done":
            continue
        g = report.load(b.out / s.student)
        if g is None:
            continue
        g.notes.append(note + NO_DEATH_ALONE)
        if s.student in queue.whom:
            g.instructor_notes.append(queue.whom.pop(s.student))
        with contextlib.suppress(OSError):  # a full disk: its row keeps the grade, not the note
            report.save(g, b.out / s.student)
        del queue.beside[s.student]
        print(
            f"course grade: {report.console(s.student)}: graded again, alone, without a death "
            "(said in its row)",
            file=sys.stderr,
            flush=True,
        )


#: What a row says when its kernel died while other submissions ran beside it: the system's
#: out-of-memory killer takes the largest kernel, whichever used the memory (a neighbour can hold
#: memory no watch counts as an ordinary user: red team 34b), so a death there names no one.
KERNEL_DIED_BESIDE = (
    "the kernel died while the grader ran several submissions at a time (a crash, or the "
    "system's out-of-memory killer, which takes the largest kernel whichever used the memory): "
    "graded again, alone"
)


def kernel_deaths(b: Batch, queue: _Queue, ran: list[Submission]) -> None:
    """Queue to run alone each submission of `ran` (graded side by side by a child that ended
    well) whose kernel died, with no limit of the grader's named (status "kernel died"): nobody
    can tell its own death from one another kernel caused. Each runs alone once."""
    for s in ran:
        g = report.load(b.out / s.student)
        if g is None or g.status != "kernel died" or s.student in queue.kernel_died:
            continue
        queue.kernel_died[s.student] = f"{g.score:g}/{g.max_score:g}"
        queue.alone.append(s)
        print(
            f"course grade: {report.console(s.student)}: its kernel died beside others: grading "
            "it again, alone",
            file=sys.stderr,
            flush=True,
        )


def note_kernel_death(b: Batch, s: Submission, first: str) -> None:
    """Add `KERNEL_DIED_BESIDE`, the first run's score (`first`: a notebook that kills its own
    kernel when its results disappoint gets no unseen second try) and how the run alone ended to
    `s`'s row, just graded alone."""
    g = report.load(b.out / s.student)
    if g is None:
        return
    alone = f"alone: {g.status}, {g.score:g}/{g.max_score:g}"
    g.notes.append(f"{KERNEL_DIED_BESIDE}; first run: kernel died, {first}; {alone}")
    with contextlib.suppress(OSError):  # a full disk: its row keeps the grade, not the note
        report.save(g, b.out / s.student)


def grade(
    b: Batch, paths: list[str | os.PathLike], jobs: int, *, progress: bool, regrade: bool
) -> list[Grade]:
    """`batch.grade_batch`, the grading done by child processes (see the module's docstring);
    the gradebook and its exports are written however it ends."""
    submissions = collect_submissions(paths)
    check_out(b.out, submissions, b.solution_path)  # before the plan is written
    try:
        plan = b.save_plan(submissions)
    except OSError as exc:  # nothing graded yet: nothing to write
        full(b.out, exc, "the batch's plan could not be written")
    folder = plan.parent / "running"
    queue = _Queue([], to_grade(b, submissions, regrade=regrade))
    idle_deaths = 0
    finished: list[Submission] = []  # graded by a child that ended well: each has a row
    try:
        while queue.alone or queue.rest:
            if queue.alone:
                ran, n = [queue.alone.pop(0)], 1
            else:
                ran, n, queue.rest = queue.rest, jobs, []
            clear_marks(folder)
            argv = _child_argv(plan, n, [s.student for s in ran], progress=progress)
            # in the grader's own folder, never the instructor's (a submission's at times)
            code, pid = run_child(argv, cwd=plan.parent)
            _note_beside(b, queue, ran, folder)
            if code == 0:
                finished += ran
                if n > 1 and len(ran) > 1:
                    kernel_deaths(b, queue, ran)
                elif ran[0].student in queue.kernel_died:
                    note_kernel_death(b, ran[0], queue.kernel_died[ran[0].student])
            if code < 0:
                remove_leftovers(pid)
            if code > 0:
                raise ChildFailed(
                    f"the grading process ended with exit code {code} (its error is above)"
                )
            if code < 0 and not _after_death(b, queue, ran, code, folder):
                idle_deaths += 1
                if idle_deaths >= MAX_IDLE_DEATHS:
                    reason = (
                        f"the grader's process died {idle_deaths} times with no submission "
                        "running (see the messages above): run the same command again"
                    )
                    for s in queue.alone + queue.rest:
                        grader_failed(b, s, reason)
                    break
    finally:
        clear_marks(folder)
        b.forget_solution()
        batch.remove_tfds_leftovers()  # deciding the batch's data source made one
        found = saved_grades(b, submissions)
        for s in finished:  # its grade could not be saved (a full disk): its row all the same
            if s.student not in found:
                found[s.student] = unsaved(b, s)
        grades = [found[s.student] for s in submissions if s.student in found]
        write_or_exit(b, grades)
    return grades


def unsaved(b: Batch, s: Submission) -> Grade:
    """The gradebook's row (a grader error, graded again next run) of a submission graded by a
    child that ended well but whose grade is not in `b.out`: the grader could not save it."""
    reason = (
        f"the grader could not save its grade in {b.out / s.student} (is that file system "
        "full?): it is graded again on the next run"
    )
    g = Grade(s.student, Path(s.path), "grader error", reason, max_score=b.parts.max_points)
    g.results = one_submission.zero_results(b.parts, "not graded: grader error")
    print(f"course grade: {report.console(s.student)}: {reason}", file=sys.stderr, flush=True)
    return g


def write_or_exit(b: Batch, grades: list[Grade]) -> None:
    """`write_gradebooks`; when even they cannot be written (a full file system), a message
    that names that file system, and exit 1."""
    try:
        write_gradebooks(b, grades)
    except OSError as exc:
        full(b.out, exc, "the gradebook could not be written")


def full(out: Path, exc: OSError, what: str) -> NoReturn:
    """Say that `what` failed in `out` with `exc`, naming its file system and its free space,
    and exit 1."""
    where = str(out)
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(out).free / 2**20
        where = f"{where} ({free:,.0f} MB free there)"
    print(
        f"course grade: {what} in {where}: {exc}; the file system holding it is full (or not "
        "writable): free space there and run the same command again (graded submissions are "
        "not graded again)",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(1) from exc


def main(argv: list[str] | None = None) -> int:
    """The child: grade the named submissions of the plan, `jobs` at a time, recording each."""
    parser = argparse.ArgumentParser(prog="python -m course_tools.grade.routes.supervised")
    parser.add_argument("plan", type=Path)
    parser.add_argument("jobs", type=int)
    parser.add_argument("students", nargs="+")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    die_with_parent()
    # SIGTERM (forwarded by the supervisor, or its death) stops the batch with its clean-up
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    b, submissions = load_plan(args.plan)
    by_name = {s.student: s for s in submissions}
    chosen = [by_name[name] for name in args.students]
    marks = RunningMarks(args.plan.parent / "running", len(chosen))
    try:
        batch.grade_here(b, chosen, args.jobs, progress=args.progress, marks=marks)
    except KeyboardInterrupt:  # Ctrl-C: the supervisor has it too, and says so
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
