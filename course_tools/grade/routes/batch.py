"""Grade a batch of exercise submissions: each one run in the sandbox, then scored from its files.

For each submission (a notebook; in a folder, every *.ipynb):
1. Read it. Not a notebook (invalid JSON, ...): score 0. Unchanged exercise: score 0, not run.
2. Run a copy in a fresh kernel inside the sandbox (`submission.run`: bubblewrap; only the
   system, Python and the course read-only, the submission's work folder writable, private /tmp,
   no network, its own PID namespace), with COURSE_ARTIFACTS in that folder and limits per cell
   (the cell is interrupted, later cells still run), per notebook, on memory and on the work
   folder's disk use (the kernel is killed), and on outputs kept. The solution's HIDDEN PROBE
   then runs in that kernel and only collects facts about the objects in memory.
3. Copy the artifacts out (regular files only, never through a link, capped in bytes and in
   files), delete the work folder (at any depth: no recursion, and never an error that stops
   the batch).
4. Score it: the solution's HIDDEN TESTS run in the check process (`checker`), sandboxed as well,
   which never runs student code: it loads the saved files with limits and compares them with
   the numbers the notebook recorded and with the probe's facts.
5. Save <out>/<student>/report.md and result.json (`report`), the executed notebook and the
   artifacts next to them; <out>/gradebook.csv (plus canvas.csv and moodle.csv) for the batch.

A submission already graded in `out` from the same notebook, solution and settings is not graded
again (pass `regrade=True` to grade everything), unless the grader failed on it ("grader error").
The same `grade_one` grades one submission of a Slurm job array (`slurm_array`). `course grade`
runs `grade_here` in a child process that `supervised` restarts when a submission kills it.

What a submission cannot change: the hidden tests (read from the solution before the batch starts,
never given to the kernel), how they run (another process, which never runs student code), the
course, the solution, other submissions and the grades (read-only or hidden in the sandbox). What it
does control is its own evidence: the files it saves, which the checks measure themselves (a saved
model is evaluated by the grader; recorded numbers must match those measurements; the grader times
the files by its own clock and reads the code as code), and the probe's facts, which come from its
own kernel and only corroborate (`grade.core.submission` says what they can and cannot prove).
Read the executed notebook when a score looks too good. A change of the solution file or the
course package during the batch is said on the console (sandboxed, no submission can have made it);
without the sandbox, student code runs with your rights, so it is noted in the row of the
submission that ran meanwhile (`tamper`). The solution as it was at the start is kept.

Example:

    from course_tools.grade.routes import batch
    grades = batch.grade(["submissions/"], out="grades", limits=Limits(cell_timeout=300))
    print([(g.student, g.score, g.max_score) for g in grades])  # [('alice', 12.0, 12.0), ...]
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from tqdm.auto import tqdm

from course_tools.grade.core import files, report
from course_tools.grade.core.one_submission import Workspace, grade_one, zero_results
from course_tools.grade.core.plan import (
    DEFAULT_SOLUTION,
    Batch,
    GradingSettings,
    check_out,
    prepare,
    saved_grades,
    start_checks,
    to_grade,
    write_gradebooks,
)
from course_tools.grade.core.report import Grade, console
from course_tools.grade.core.roster import Submission, collect_submissions
from course_tools.grade.core.tamper import TamperWatch
from course_tools.grade.jail import workdir
from course_tools.paths import course_root
from course_tools.runner import Limits

if TYPE_CHECKING:
    from course_tools.grade.routes.supervised import RunningMarks

#: The grader's folder of work folders: this prefix, its pid, "-" (`remove_dead_graders_folders`).
BASE_PREFIX = f"{workdir.SOURCE}-"
#: The file in a grader's folder of work folders that it holds an flock on for its whole life:
#: a grader in another pid namespace sharing this temporary folder holds it too.
ALIVE_LOCK = ".grader-alive.lock"


def hold_alive_lock(base: Path) -> int:
    """Lock `base`'s `ALIVE_LOCK` (exclusive) and return its descriptor: keep it open while
    `base` is in use (the lock goes with the process, however it ends)."""
    fd = os.open(base / ALIVE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _dead_lock(folder: Path, pid: str) -> int | None:
    """The descriptor of `folder`'s `ALIVE_LOCK`, locked here, when its grader is gone (-1 when
    the folder has no lock, from a grader before it or killed before taking it, and its pid is
    not running here); None while a grader, in any pid namespace, still holds it."""
    try:
        fd = os.open(folder / ALIVE_LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return -1 if pid.isdigit() and not psutil.pid_exists(int(pid)) else None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_dead_graders_folders(where: Path | None = None) -> list[Path]:
    """Remove the folders of work folders (`BASE_PREFIX`<pid>-...) that graders of this user
    that are gone left in `where` (the temporary folder): killed before their clean-up
    (SIGKILL, an out-of-memory kill, a `timeout` while one thread held the interpreter), with
    any work folder still mounted in them unmounted first. A folder whose `ALIVE_LOCK` is
    held (by a grader here or in another pid namespace) is left alone. Returns those removed."""
    removed = []
    for folder in Path(where or tempfile.gettempdir()).glob(f"{BASE_PREFIX}*-*"):
        pid = folder.name.removeprefix(BASE_PREFIX).split("-")[0]
        try:
            mine = folder.lstat().st_uid == os.getuid() and folder.is_dir()
        except OSError:
            continue
        lock = _dead_lock(folder, pid) if mine and not folder.is_symlink() else None
        if lock is None:
            continue
        try:
            workdir.release_under(folder)
            if not files.remove_tree(folder):
                removed.append(folder)
        finally:
            if lock >= 0:
                os.close(lock)
    return removed


def remove_tfds_leftovers(where: Path | None = None) -> list[Path]:
    """Remove the empty `tmp*tfds` folders tensorflow-datasets 4.9 leaves in the temporary folder
    (`where`) each time a process builds the builder of a dataset not prepared yet
    (DatasetInfo.initialize_from_bucket makes one before it finds its bucket disabled: deciding
    the batch's data source, `plan.batch_data`, does): those of this user made since this
    process started (never one another process of the user may still fill). Returns them."""
    since = psutil.Process().create_time() - 1
    removed = []
    for folder in Path(where or tempfile.gettempdir()).glob("tmp*tfds"):
        with contextlib.suppress(OSError):  # not empty, gone, or not ours: left
            info = folder.lstat()
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mtime >= since:
                folder.rmdir()
                removed.append(folder)
    return removed


def recorded(batch: Batch, s: Submission, where: Workspace, marks: RunningMarks | None) -> Grade:
    """`grade_one`, recorded in `marks` before it runs and once its grade is saved."""
    try:
        if marks is not None:
            marks.started(s.student)
    except OSError as exc:  # a full disk: this row's grader error, the batch goes on
        return _unrecorded(batch, s, exc, ran=False)
    g = grade_one(batch, s, where)
    try:
        if marks is not None:
            marks.done(s.student)
    except OSError as exc:
        return _unrecorded(batch, s, exc, ran=True)
    return g


def _unrecorded(batch: Batch, s: Submission, exc: OSError, *, ran: bool) -> Grade:
    """The grader error of a submission whose mark (`RunningMarks`) could not be written: saved
    without a key (graded again on the next run), where it can be."""
    when = "after it was graded" if ran else "so it was not run"
    reason = f"the grader could not record it {when}: {type(exc).__name__}: {exc}"
    g = Grade(s.student, Path(s.path), "grader error", reason, max_score=batch.parts.max_points)
    g.results = zero_results(batch.parts, "not graded: grader error")
    with contextlib.suppress(OSError):
        report.save(g, batch.out / s.student)
    print(f"course grade: {console(s.student)}: {reason}", file=sys.stderr, flush=True)
    return g


def grade_here(
    batch: Batch,
    submissions: list[Submission],
    jobs: int,
    *,
    progress: bool,
    marks: RunningMarks | None = None,
) -> None:
    """Grade `submissions` on this machine, `jobs` at a time; save each grade as it comes (and
    record it in `marks`: `supervised`). On Ctrl-C or an error, the submissions not started are
    dropped and the running kernels killed before it raises (grades saved so far stay). A dead
    grader's folders are removed first."""
    for folder in remove_dead_graders_folders():
        print(f"course grade: removed {folder}, left by a grader that was killed", file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-")).resolve()
    alive = hold_alive_lock(base)  # held until the folder is gone
    checks = start_checks(batch, base)
    suspects = "this submission" + (" or one running at the same time" if jobs > 1 else "")
    watch = TamperWatch(batch, suspects)
    bar = tqdm(total=len(submissions), desc="grading", unit="notebook", disable=not progress)
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = [
            pool.submit(recorded, batch, s, Workspace(checks, base, cancel, watch), marks)
            for s in submissions
        ]
        for future in as_completed(futures):
            g = future.result()
            bar.set_postfix_str(f"{console(g.student)}: {g.score:g}/{g.max_score:g}")
            bar.update()
    finally:
        # normally nothing is left; else the queued ones never start, the running ones stop
        cancel.set()
        checks.close()
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        # one may have started between close() and the last job's end
        checks.stop()
        # never raises (a tree deeper than the recursion limit included): the gradebook follows
        left = files.remove_tree(base)
        if left:  # a process of a submission may still be dying: once more
            time.sleep(0.5)
            left = files.remove_tree(base)
        if left:
            left_out = console("; ".join(left))
            print(f"course grade: could not remove {base} entirely: {left_out}", file=sys.stderr)
        os.close(alive)


# PLR0913: one keyword-only option per `course grade` flag, each with its default (limits and
# settings are already one value each); a further options object would only rename the flags.
def grade(  # noqa: PLR0913
    paths: list[str | os.PathLike],
    out: str | os.PathLike = "grades",
    *,
    solution: str | os.PathLike | None = None,
    limits: Limits | None = None,
    settings: GradingSettings | None = None,
    jobs: int = 1,
    progress: bool = True,
    sandboxed: bool = True,
    regrade: bool = False,
) -> list[Grade]:
    """Grade every submission in `paths` (notebooks or folders) on this machine; write reports,
    gradebook.csv and its exports into `out`. Returns the grades in the order of `paths`.

    settings: COURSE_* of the runs; data "auto" is decided once for the batch (real or synthetic).
    jobs: submissions run at the same time, each in its own kernel (tests run one at a time).
    sandboxed: run every kernel and the hidden tests in the sandbox (`sandbox.SandboxUnavailable`
    when bubblewrap cannot run here). False runs student code with your rights.
    regrade: grade again submissions already graded in `out` with the same notebook and settings.
    Grades in this process; `course grade` grades in a child process it supervises
    (`supervised.grade`: a submission that kills the grading process costs only its own row).
    """
    # bad paths, or a student's folder of the grades that is not the grader's: a clear error
    # before anything is written
    solution = Path(solution or course_root() / DEFAULT_SOLUTION)
    check_out(out, collect_submissions(paths), solution)
    settings = settings or GradingSettings(data=os.environ.get("COURSE_DATA") or "auto")
    b = prepare(out, solution, settings, limits or Limits(), sandboxed=sandboxed)
    return grade_batch(b, paths, jobs, progress=progress, regrade=regrade)


def grade_batch(
    b: Batch, paths: list[str | os.PathLike], jobs: int, *, progress: bool, regrade: bool
) -> list[Grade]:
    """`grade` for a prepared batch."""
    submissions = collect_submissions(paths)
    check_out(b.out, submissions, b.solution_path)
    try:
        grade_here(b, to_grade(b, submissions, regrade=regrade), jobs, progress=progress)
    finally:
        remove_tfds_leftovers()
    found = saved_grades(b, submissions)
    grades = [found[s.student] for s in submissions if s.student in found]
    write_gradebooks(b, grades)
    return grades
