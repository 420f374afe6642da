"""Grade a batch on Slurm: one job array, one task per submission, the same sandbox and limits.

`course grade --slurm` writes the batch's plan (settings, limits, a copy of the solution, the
submissions) under <out>/.batch/, submits ONE `sbatch --array` job whose task i grades
submission i with `one_submission.grade_one`, as the local route does (its own check process, the
bubblewrap sandbox, the same limits), and saves <out>/<student>/report.md and result.json,
exactly as a local run does. The grades folder, the submissions and the course's Python (the
same path) must be on a file system the compute nodes share with the submitting machine.

While the tasks run, the progress (done, running, pending, failed) comes from Slurm: `squeue`
lists pending and running tasks and, for a few minutes after they end (`MinJobAge`), their final
state; `sacct` is asked only for tasks squeue no longer lists, when the cluster keeps accounting.
When neither knows a task any more (a cluster with
`AccountingStorageType=accounting_storage/none`, after `MinJobAge`), the task's own files decide:
its result.json (done) or the exit code its batch script wrote (failed).

A task that dies, times out or is cancelled still gets a gradebook row, with the reason and its
Slurm log. A re-run grades only the submissions without a result (everything with --regrade).
Ctrl-C, SIGTERM, SIGHUP or an error while waiting cancels the array (`scancel`) and waits until
Slurm has ended every task. So does a task that will not start by itself (`never_starts`: held
after a failed launch or by `scontrol hold`, or never startable as submitted), which would
otherwise keep the wait going forever: the error names the task, Slurm's reason and what to do,
and the task's row says why it has no grade.

Example:

    b = plan.prepare("grades", solution, plan.GradingSettings(devices=2), Limits())
    options = SlurmOptions(partition="gpu", time="01:00:00", mem="8G")
    grades = grade(b, ["submissions/"], options)
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from course_tools.grade.core import checker, files, one_submission, report, roster, tamper
from course_tools.grade.core.plan import (
    CHECK_TIMEOUT_S,
    GRADES_MARK,
    PLAN_FOLDER,
    SOLUTION_COPY,
    Batch,
    check_out,
    load_plan,
    saved_grades,
    start_checks,
    to_grade,
    write_gradebooks,
)
from course_tools.grade.core.report import Grade
from course_tools.grade.core.roster import Submission
from course_tools.grade.jail import cgroups
from course_tools.grade.jail import limits as jail_limits
from course_tools.grade.jail import workdir as jail_workdir
from course_tools.grade.routes import batch, supervised
from course_utils import tables

#: What a task runs (`python -m`): `run_task`, and its child `grade_task`.
TASK_MODULE = "course_tools.grade.routes.slurm_array"
#: Slurm states of a task that has not ended yet.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
#: Why a task without a result ended, by its Slurm state: (gradebook status, reason).
ENDINGS = {
    "TIMEOUT": ("task timed out", "the Slurm task reached its time limit (--time)"),
    "CANCELLED": ("task cancelled", "the Slurm task was cancelled"),
    "OUT_OF_MEMORY": ("task failed", "the Slurm task ran out of memory (--mem)"),
    "NODE_FAIL": ("task failed", "the node running the Slurm task failed"),
    "PREEMPTED": ("task failed", "the Slurm task was preempted"),
}
#: Why Slurm will never start a pending task as it was submitted (squeue's reason codes, Slurm's
#: `job_state_reason.c`): its dependency failed, its constraints, account or QOS are invalid, or
#: it asks for more than a per-job limit of its partition, QOS or association allows (those
#: also in `PER_JOB`). Never a cap on running jobs or on what they use together (AssocMaxJobsLimit,
#: *PerUser*, *PerAccount*, *Grp*): it frees as earlier tasks end, and meters an array so.
NEVER_STARTS = {
    "DependencyNeverSatisfied",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSNotAllowed",
    "PartitionTimeLimit",
    "MaxMemPerLimit",
}
#: The per-job size limits of a QOS or association (QOSMaxCpuPerJobLimit,
#: AssocMaxWallDurationPerJobLimit, QOSMaxMemoryPerNode, QOSMinGRES, ...): the whole reason.
PER_JOB = re.compile(r"(QOS|Assoc)Max\w*Per(Job|Node)\w*|QOSMin\w+")
#: Slurm's words for a held task, the whole reason (a node's name in "ReqNodeNotAvail,
#: UnavailableNodes:..." may hold "held"): its codes, then its descriptions of a requeue.
HELD = re.compile(r"JobHeld(Admin|User)|[a-z ]*(requeued held|in held state|special exit state)")
#: Its descriptions of a failed launch, the whole reason ("launch failed requeued held").
LAUNCH_FAILED = re.compile(r"[a-z ]*(launch|env retrieval) failed[a-z ]*")
#: Seconds between two looks at the queue.
POLL_S = 2.0
#: Seconds a task may take beyond the notebook and check limits (start-up, copying files).
TASK_MARGIN_S = 180


class SlurmError(RuntimeError):
    """Slurm refused or failed a command; the message has its error."""


class TaskStuck(SlurmError):
    """Tasks of the array are held, or Slurm will never start them: `stuck` is {index: (Slurm's
    reason, what to do)}; the message says which task, the reason and what to do."""

    def __init__(self, message: str, stuck: dict[int, tuple[str, str]]):
        super().__init__(message)
        self.stuck = stuck


@dataclass(frozen=True)
class SlurmOptions:
    """What `sbatch` is asked for, per task. None: the cluster's default (time: from the limits)."""

    partition: str | None = None
    time: str | None = None
    mem: str | None = None
    cpus_per_task: int = 1
    extra: list[str] = field(default_factory=list)


def missing() -> str | None:
    """Why Slurm cannot be used from here (one line), or None."""
    absent = [p for p in ("sbatch", "squeue", "scancel") if shutil.which(p) is None]
    if absent:
        return f"Slurm's {', '.join(absent)} not found: run this on a Slurm login node"
    return None


def _slurm(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(command)} failed: {proc.stderr.strip() or proc.stdout}")
    return proc


def task_minutes(b: Batch) -> int:
    """A task's time limit when --time is not given: the notebook's, the checks' and a margin."""
    return math.ceil((b.limits.timeout + CHECK_TIMEOUT_S + TASK_MARGIN_S) / 60)


def log_option(logs: Path) -> str:
    """sbatch's --output for the tasks' logs in `logs`, given on the command line (an #SBATCH line
    cannot hold a folder with spaces); a "%" of the folder's name doubled (Slurm reads %A, %a)."""
    return f"--output={str(logs).replace('%', '%%')}/slurm-%A_%a.out"


def batch_script(b: Batch, plan: Path, count: int, options: SlurmOptions) -> str:
    """The sbatch script of the array: task i grades submission i of `plan` (submitted with
    `log_option`)."""
    logs = plan.parent
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=course-grade",
        f"#SBATCH --array=0-{count - 1}",
        f"#SBATCH --cpus-per-task={options.cpus_per_task}",
        f"#SBATCH --time={options.time or task_minutes(b)}",
    ]
    lines += [f"#SBATCH --partition={options.partition}"] * bool(options.partition)
    lines += [f"#SBATCH --mem={options.mem}"] * bool(options.mem)
    lines += [f"#SBATCH {shlex.quote(arg)}" for arg in options.extra]
    # The task's work folders live in a node-local folder removed however the task ends: the
    # grading process removes it first thing on SIGTERM (scancel, the time limit: SIGKILL follows
    # KillWait seconds later, to this script too), and this script once that process has ended,
    # killed or not. Without the trap, SIGTERM would end the script at once.
    # Its Python processes start in the plan's folder, not sbatch's (the instructor's, a
    # submission's at times), never with their working folder on sys.path (`checker.launch`),
    # and with PYTHONPATH's absolute entries only (`checker.child_env`)
    pythonpath = checker.child_env().get("PYTHONPATH")
    task = shlex.join(checker.child_argv(TASK_MODULE, str(plan)))
    release = shlex.join(checker.child_argv("course_tools.grade.jail.workdir"))
    lines += [
        f"cd {shlex.quote(str(logs))} || exit 1",
        f"export PYTHONPATH={shlex.quote(pythonpath)}" if pythonpath else "unset PYTHONPATH",
        'work=$(mktemp -d "${TMPDIR:-/tmp}/course-grade-XXXXXX")',
        f'TMPDIR=$work {task} "$SLURM_ARRAY_TASK_ID" &',
        "task=$!",
        # a work folder the killed process left mounted (`jail.workdir`) is unmounted first
        f'release() {{ {release} "$1"; }}',
        # folders a submission made read-only or unreadable are opened up first (chmod does not
        # follow links met inside); what is left is said in the task's log
        'remove() { release "$1"; chmod -R u+rwx "$1" 2>/dev/null; rm -rf "$1"; '
        '[ ! -e "$1" ] || echo "course grade: could not remove $1" >&2; }',
        # at once: SIGKILL follows in KillWait seconds, and the grading process may be blocked in
        # a system call that its handler waits for; again once that process has ended
        # the grading processes are told too (Slurm may signal this script alone): they remove
        # their control groups first (`_stopped`)
        """trap 'kill -TERM "$task" 2>/dev/null; remove "$work"; wait "$task"; remove "$work"; """
        """exit 143' TERM""",
        'wait "$task"',
        "code=$?",
        'remove "$work"',
        f'echo "$code" > {shlex.quote(str(logs))}/exit-"$SLURM_ARRAY_TASK_ID"',
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


def submit(b: Batch, submissions: list[Submission], options: SlurmOptions) -> tuple[str, Path]:
    """Submit the array for `submissions`; (the job id, the plan's folder)."""
    plan = b.save_plan(submissions)
    for old in plan.parent.glob("exit-*"):
        old.unlink()
    script = plan.parent / "grade.sbatch"
    script.write_text(batch_script(b, plan, len(submissions), options))
    submitted = _slurm("sbatch", "--parsable", log_option(plan.parent), str(script))
    job = submitted.stdout.strip().split(";")[0]
    return job, plan.parent


def _from_squeue(job: str) -> dict[int, str]:
    # -r: one line per array task; -t all: also tasks that ended less than MinJobAge ago
    proc = _slurm("squeue", "-h", "-r", "-t", "all", "-j", job, "-o", "%K %T", check=False)
    if proc.returncode != 0:
        # squeue forgets a job MinJobAge after its end; any other failure is not an answer
        if "invalid job id" in proc.stderr.lower():
            return {}
        raise SlurmError(f"squeue failed: {proc.stderr.strip()}")
    states = {}
    for line in proc.stdout.splitlines():
        index, _, state = line.partition(" ")
        if index.isdigit():
            states[int(index)] = state.strip()
    return states


def pending_reasons(job: str) -> dict[int, str]:
    """Why each pending task of `job` waits, as squeue says it: Slurm's reason code (Resources,
    JobHeldUser, ...) or, where slurmctld set one, its description ("launch failed requeued
    held" after a failed launch)."""
    proc = _slurm("squeue", "-h", "-r", "-t", "PENDING", "-j", job, "-o", "%K|%r", check=False)
    reasons = {}
    for line in proc.stdout.splitlines():
        index, _, reason = line.partition("|")
        if index.isdigit():
            reasons[int(index)] = reason.strip()
    return reasons


def never_starts(reason: str) -> str | None:
    """What to do about a pending task that waits for `reason` (`pending_reasons`), when it will
    not start by itself: held (its priority is 0 until someone runs `scontrol release`: after a
    failed launch Slurm holds it so, and `scontrol hold` or `sbatch --hold` do), or never
    startable as submitted (`NEVER_STARTS`, a per-job limit); None while it may start."""
    if LAUNCH_FAILED.fullmatch(reason):
        return (
            "Slurm could not launch it on its node (a failing Prolog, a spool path too long for "
            "slurmstepd's socket, a file system the node cannot reach) and holds it until "
            "`scontrol release`: read that node's slurmd log (SlurmdLogFile in `scontrol show "
            "config`) and slurmctld's, fix the cause (a node the failure drained comes back with "
            "`scontrol update NodeName=<node> State=RESUME`)"
        )
    if HELD.fullmatch(reason):
        return (
            "it was held (`scontrol hold`, `sbatch --hold`, or requeued held) and would wait "
            "until `scontrol release`: do not hold a grading array"
        )
    if reason in NEVER_STARTS or PER_JOB.fullmatch(reason):
        return (
            "Slurm will not start it as submitted (see the JOB REASON CODES of `man squeue`): "
            "change --time, --partition, --mem or --sbatch-arg (account, QOS), or ask the "
            "cluster's admins"
        )
    return None


def stuck_tasks(job: str, states: dict[int, str]) -> dict[int, tuple[str, str]]:
    """The pending tasks of `job` that will not start by themselves: {index: (Slurm's reason,
    what to do)} (squeue is asked only when a task is pending)."""
    if "PENDING" not in states.values():
        return {}
    stuck = {}
    for index, reason in pending_reasons(job).items():
        advice = never_starts(reason)
        if advice is not None and states.get(index) == "PENDING":
            stuck[index] = (reason, advice)
    return stuck


def stuck_message(job: str, todo: list[Submission], stuck: dict[int, tuple[str, str]]) -> str:
    """The error of a batch with stuck tasks: which, Slurm's reason, what to do."""
    index, (reason, advice) = min(stuck.items())
    others = f" (and {tables.count(len(stuck) - 1, 'more task')})" if len(stuck) > 1 else ""
    student = report.console(todo[index].student)
    return (
        f"Slurm job {job}: task {index} ({student}){others} cannot start, squeue says "
        f"'{reason}'; {advice}. The array is cancelled and the gradebook holds what finished: "
        "run the same command again to grade the rest"
    )


def _from_sacct(job: str) -> dict[int, str]:
    if shutil.which("sacct") is None:
        return {}
    # fails with "accounting storage is disabled" on clusters without accounting: nothing then
    proc = _slurm("sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State", check=False)
    states = {}
    for line in proc.stdout.splitlines():
        job_id, _, state = line.partition("|")
        index = job_id.rpartition("_")[2]
        if index.isdigit():
            # "CANCELLED by 0" -> "CANCELLED"
            states[int(index)] = state.split()[0] if state else ""
    return states


def task_states(job: str, logs: Path, count: int) -> dict[int, str]:
    """The state of each task 0..count-1: Slurm's (squeue, then sacct), else from the task's
    files: "COMPLETED" with exit code 0, "FAILED" with another, "UNKNOWN" without any."""
    states = _from_squeue(job)
    if len(states) < count:
        # ended more than MinJobAge ago: accounting may remember (asked only then: sacct is slow)
        states = {**_from_sacct(job), **states}
    for index in range(count):
        if index not in states:
            exit_file = logs / f"exit-{index}"
            code = exit_file.read_text().strip() if exit_file.exists() else None
            states[index] = (
                "UNKNOWN" if code is None else ("COMPLETED" if code == "0" else "FAILED")
            )
    return states


def _ended_reason(
    state: str, logs: Path, job: str, index: int, held: str | None = None
) -> tuple[str, str]:
    log = f"{PLAN_FOLDER}/slurm-{job}_{index}.out"
    status, reason = ENDINGS.get(state, ("task failed", f"the Slurm task ended {state}"))
    if held is not None:  # cancelled by the grader: Slurm would not start it
        reason = f"Slurm would not start the task (squeue: '{held}'), so the array was cancelled"
    exit_file = logs / f"exit-{index}"
    if exit_file.exists() and state not in ENDINGS:
        code = int(exit_file.read_text().strip() or 1)
        signal_note = f" (killed by signal {code - 128})" if code > 128 else ""
        reason = f"the grading process exited with code {code}{signal_note}"
    return status, f"{reason} before it saved a grade (its log: {log}); run again to grade it"


def collect(
    b: Batch,
    submissions: list[Submission],
    states: dict[int, str],
    job: str,
    held: dict[int, str] | None = None,
) -> list:
    """A grade for every submission: its saved result, or a row saying why its task gave none
    (a grader failure saved before this array's plan is an earlier run's, not this task's;
    `held`: Slurm's reason for each task that was cancelled because it would not start)."""
    logs = b.out / PLAN_FOLDER
    found = saved_grades(b, submissions)
    submitted = (logs / "plan.json").stat().st_mtime if (logs / "plan.json").exists() else 0
    grades = []
    for index, s in enumerate(submissions):
        g = found.get(s.student)
        result = b.out / s.student / report.RESULT_NAME
        earlier = g is not None and g.grader_failed and result.stat().st_mtime < submitted
        if g is None or g.key != b.key(s.path) or earlier:
            state = states.get(index, "UNKNOWN")
            status, reason = _ended_reason(state, logs, job, index, (held or {}).get(index))
            g = Grade(s.student, s.path, status, reason, max_score=b.parts.max_points)
            g.results = one_submission.zero_results(b.parts, f"not graded: {status}")
            # marked as `grade_one` marks it (`check_out` passed it at submission): without the
            # mark, a folder holding only a report is not the grader's, and the next run would
            # refuse to grade it there
            (b.out / s.student).mkdir(parents=True, exist_ok=True)
            (b.out / s.student / GRADES_MARK).write_text(
                "graded by course grade: emptied when graded again\n"
            )
            report.write_report(g, b.out / s.student / "report.md")
        grades.append(g)
    return grades


def _counts(b: Batch, submissions: list[Submission], states: dict[int, str]) -> dict[str, int]:
    counts = {"done": 0, "running": 0, "pending": 0, "failed": 0}
    for index, s in enumerate(submissions):
        state = states.get(index, "UNKNOWN")
        if state == "PENDING":
            counts["pending"] += 1
        elif state in ACTIVE:
            counts["running"] += 1
        elif (saved := report.load(b.out / s.student)) and saved.key == b.key(s.path):
            counts["done"] += 1
        else:
            counts["failed"] += 1
    return counts


def wait(b: Batch, submissions: list[Submission], job: str, *, progress: bool) -> dict[int, str]:
    """Poll Slurm until no task is pending or running; print the counts when they change.
    TaskStuck when a task is held or will never start (`never_starts`)."""
    logs, shown, failures = b.out / PLAN_FOLDER, None, 0
    while True:
        try:
            states = task_states(job, logs, len(submissions))
            failures = 0
        except SlurmError:
            # a busy or restarting slurmctld: ask again, for a minute
            failures += 1
            if failures * POLL_S > 60:
                raise
            time.sleep(POLL_S)
            continue
        counts = _counts(b, submissions, states)
        line = ", ".join(f"{n} {what}" for what, n in counts.items())
        if progress and line != shown:
            print(f"Slurm job {job}: {line}", flush=True)
            shown = line
        if not any(state in ACTIVE for state in states.values()):
            return states
        stuck = stuck_tasks(job, states)
        if stuck:  # a held task would keep this loop, and the array, waiting forever
            raise TaskStuck(stuck_message(job, submissions, stuck), stuck)
        time.sleep(POLL_S)


def cancel(job: str, logs: Path, count: int, timeout: float = 120) -> dict[int, str]:
    """scancel the array and wait until Slurm has ended all its tasks; their final states."""
    _slurm("scancel", job, check=False)
    deadline = time.monotonic() + timeout
    while True:
        states = task_states(job, logs, count)
        if not any(state in ACTIVE for state in states.values()):
            return states
        if time.monotonic() > deadline:
            raise SlurmError(f"Slurm job {job} still has tasks {timeout:.0f} s after scancel")
        time.sleep(0.5)


def grade(
    b: Batch,
    paths: list[str | os.PathLike],
    options: SlurmOptions,
    *,
    progress: bool = True,
    regrade: bool = False,
) -> list[Grade]:
    """Grade the submissions in `paths` as one Slurm job array; write the reports, gradebook.csv
    and its exports like `batch.grade` (the local route). Ctrl-C, SIGTERM, SIGHUP or any error
    while waiting cancels the array, writes the gradebook of what finished and raises
    (KeyboardInterrupt, SystemExit with 128 + the signal, or the error). A task that will not
    start (`never_starts`) cancels it too, with the error printed: the tasks without a grade get
    rows that say why (grader failures, graded again by the next run), as a killed task's."""
    why = missing()
    if why:
        raise SlurmError(why)
    if b.sandboxed:  # the lines of a local run (those of this host: each task logs its node's)
        for line in jail_limits.missing():
            print(f"course grade: {line}", flush=True)
    submissions = roster.collect_submissions(paths)
    check_out(b.out, submissions, b.solution_path)  # before the plan is written
    todo = to_grade(b, submissions, regrade=regrade)
    states: dict[int, str] = {}
    held: dict[int, str] = {}
    job = ""
    if todo:
        with _signals_raise():
            job, logs = submit(b, todo, options)
            try:
                if progress:
                    print(
                        f"Submitted Slurm job {job}: {len(todo)} of {len(submissions)} submissions"
                    )
                try:
                    states = wait(b, todo, job, progress=progress)
                except TaskStuck as stuck:
                    print(f"course grade: {report.console(stuck)}", file=sys.stderr, flush=True)
                    print(f"Cancelling Slurm job {job} ...", file=sys.stderr, flush=True)
                    states = cancel(job, logs, len(todo))
                    held = {index: reason for index, (reason, _) in stuck.stuck.items()}
            except BaseException as exc:
                # Ctrl-C, SIGTERM/SIGHUP (a closed session), Slurm or any other error: no task of
                # this array may run on unwatched
                _cancel_after(exc, b, submissions=submissions, todo=todo, job=job)
                raise
            finally:
                b.forget_solution()  # every task has ended (or was cancelled)
    batch.remove_tfds_leftovers()  # deciding the batch's data source made one
    grades = _all_grades(b, submissions, collect(b, todo, states, job, held))
    write_gradebooks(b, grades)
    return grades


@contextlib.contextmanager
def _signals_raise(first: Callable[[], object] | None = None) -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit(128 + signal) in the block, so that cleanup runs (by
    default they end Python without running any): `grade` cancels the array, a task stops its
    kernel and check process. `first` runs before: what must be done before a SIGKILL that may
    follow within seconds. Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not stop `first`
        if first is not None:
            first()
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _cancel_after(
    exc: BaseException,
    b: Batch,
    *,
    submissions: list[Submission],
    todo: list[Submission],
    job: str,
) -> None:
    """scancel the array after `exc` stopped `grade`, and write the gradebook of what finished."""
    logs = b.out / PLAN_FOLDER
    if isinstance(exc, KeyboardInterrupt):
        why = "Ctrl-C"
    elif isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:
        why = signal.Signals(exc.code - 128).name
    else:
        why = f"{type(exc).__name__}: {report.console(exc)}"
    print(f"Cancelling Slurm job {job} ({why}) ...", file=sys.stderr, flush=True)
    try:
        states = cancel(job, logs, len(todo))
        write_gradebooks(b, _all_grades(b, submissions, collect(b, todo, states, job)))
    except Exception as error:
        print(
            f"Could not confirm that Slurm job {job} ended ({report.console(error)}): check with "
            f"squeue, end it with scancel {job}",
            file=sys.stderr,
            flush=True,
        )


def _all_grades(b: Batch, submissions: list[Submission], ran: list[Grade]) -> list[Grade]:
    """The grade of every submission: `ran` (`collect`'s, for those this array graded), else the
    one saved before."""
    graded = {g.student: g for g in ran}
    saved = saved_grades(b, submissions)
    return [graded.get(s.student) or saved[s.student] for s in submissions]


def remove_work(folder: Path) -> list[str]:
    """Remove a task's node-local folder: the capped work folders mounted in it unmounted first
    (`jail.workdir`), then everything, at any depth; what could not be removed. Never raises."""
    try:
        jail_workdir.release_under(folder)
    except Exception as exc:  # noqa: BLE001 - the removal below says what is left
        print(f"could not unmount under {folder}: {report.console(exc)}", file=sys.stderr)
    return files.remove_tree(folder)


#: Times a task's grading process may die by a signal while its submission runs before that
#: submission is a grader error (`died_on_node`).
TASK_ATTEMPTS = 2
#: Seconds a task waits after a death before it grades again: the dead process's sandboxes die
#: with it, in about 2 s (then up to `supervised.SETTLE_S` more while a per-user quota stays used
#: up).
RETRY_WAIT_S = 3.0


def died_on_node(signal_name: str, attempts: int, full: list[str]) -> str:
    """Why a Slurm task's submission is a grader error after `attempts` deaths of its grading
    process; `full`: the per-user quotas still used up after the last."""
    still = f"; your account's {' and '.join(full)} stayed used up after it" if full else ""
    return (
        f"the grader's process died ({signal_name}) {attempts} times while this submission ran"
        f"{still}: other jobs of your account on the node share the quotas the kernel charges to "
        "it (epoll watches, message queue bytes, pending signals, pipe pages, inotify watches), "
        "so one of them may have used one up, or this submission did; the next run grades it "
        "again"
    )


def load_task(plan: Path) -> tuple[Batch, list[Submission]]:
    """`load_plan` inside a task; SystemExit(1) with a clear line when the solution's copy is gone:
    the batch ended before the task started (an array cancelled, or Slurm could not confirm that
    every task ended): no grade is saved, so the next run grades the submission."""
    try:
        return load_plan(plan)
    except FileNotFoundError as exc:
        if Path(exc.filename or "").name != SOLUTION_COPY:
            raise
        print(
            f"course grade: the batch of {plan} has ended (its solution copy {exc.filename} is "
            "removed when the array ends or is cancelled): this task grades nothing; run the same "
            "command again to grade its submission",
            file=sys.stderr,
        )
        raise SystemExit(1) from None


def run_task(plan: Path, index: int) -> int:
    """Inside a Slurm task: grade submission `index` of the plan in a child process
    (`grade_task`), supervised as `supervised` supervises a local batch: when the child dies by
    a signal while the submission runs, it runs again after `RETRY_WAIT_S` (and until no
    per-user quota is used up, for at most `supervised.SETTLE_S`); the `TASK_ATTEMPTS`th time,
    it is a grader error with `died_on_node`, never a 0: a task is never alone on its node, and
    other jobs of yours there share the same quotas. The child's exit code otherwise (SIGTERM
    from scancel or the time limit reaches the child too: it cleans up and exits 143)."""
    b, submissions = load_task(plan)
    submission = submissions[index]
    folder = plan.parent / f"running-{index}"
    stopped: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    previous = {}

    def stop(signum, frame):
        stopped.append(signum)
        with contextlib.suppress(NameError, OSError):  # passed on: the child cleans up
            child.send_signal(signum)

    if main:  # Slurm signals every process of the task: the child stops, this one waits for it
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        attempt = 0
        while True:
            attempt += 1
            supervised.clear_marks(folder)
            argv = checker.child_argv(TASK_MODULE, str(plan), str(index), "--child")
            child = subprocess.Popen(argv, cwd=plan.parent, env=checker.child_env())
            code = child.wait()
            if code < 0:  # what it left (its batch script removes them too, with TMPDIR)
                supervised.remove_leftovers(child.pid)
            mark = supervised.read_marks(folder).get(submission.student)
            if code >= 0 or stopped or mark is None or mark.state != "running":
                return code if code >= 0 else 128 - code
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            time.sleep(RETRY_WAIT_S)
            full = supervised.quotas_left_full()
            if stopped:  # scancel or the time limit meanwhile
                return 128 + stopped[0]
            if attempt == TASK_ATTEMPTS:
                note = died_on_node(name, attempt, full)
                g = supervised.grader_failed(b, submission, note)
                print(f"course grade: {report.console(g.student)}: {note}", file=sys.stderr)
                print(f"{report.console(g.student)}: {g.score:g}/{g.max_score:g} {g.status}")
                return 0
            print(f"the grading process died ({name}): grading again", file=sys.stderr)
    finally:
        supervised.clear_marks(folder)
        with contextlib.suppress(OSError):
            folder.rmdir()
        for sig, old in previous.items():
            signal.signal(sig, old)


def memory_killed(g: Grade, oom_kills: int, folder: Path) -> bool:
    """Make `g` (saved in `folder`) "killed" for the memory limit when its kernel died while the
    out-of-memory killer took a process in the task's cgroup (`oom_kills` of them before): Slurm's
    `--mem` held, where the kernel has no group of its own (an ordinary user's task). Whether it
    did."""
    if g.status != "kernel died" or cgroups.own_oom_kills() <= oom_kills:
        return False
    g.status = "killed"
    g.reason = (
        "memory limit: the notebook used more than the Slurm task's memory (--mem: its "
        "processes, and the files it kept in memory) and the kernel's out-of-memory killer "
        "stopped it"
    )
    with contextlib.suppress(OSError):  # a full disk: the row read back says "kernel died"
        report.save(g, folder)
    return True


def node_limits() -> list[str]:
    """One line per limit of the jail, enforced or not by this node's kernel (`limits.enforced`):
    what a task's log says first."""
    node = os.uname().nodename
    return [
        f"jail {row.name} on {node}: "
        f"{'enforced' if row.held else 'NOT ENFORCED by the kernel'}: {row.how}"
        for row in jail_limits.enforced()
    ]


def _stopped(work: Path) -> None:
    """What a task's grader does first on SIGTERM: its control groups (their processes killed),
    then its work folder; said in the task's log."""
    print(
        "course grade: stopped (SIGTERM): removing its control groups", file=sys.stderr, flush=True
    )
    cgroups.remove_own()
    print("course grade: stopped (SIGTERM): removing its work folder", file=sys.stderr, flush=True)
    remove_work(work)


def grade_task(plan: Path, index: int) -> int:
    """The child of `run_task`: grade submission `index` of the plan and save its grade."""
    supervised.die_with_parent()
    b, submissions = load_task(plan)
    submission = submissions[index]
    if b.sandboxed:  # in the task's log: what this node's kernel enforced
        for line in node_limits():
            print(line, flush=True)
    marks = supervised.RunningMarks(plan.parent / f"running-{index}", 1)
    checks = None
    # named with its pid and locked while it lives: `run_task` removes it if this process dies
    base = Path(tempfile.mkdtemp(prefix=f"{batch.BASE_PREFIX}{os.getpid()}-")).resolve()
    batch.hold_alive_lock(base)  # held until the process ends, however it ends
    # the node-local folder its batch script made (TMPDIR, holding `base`), else `base`
    given = Path(os.environ.get("TMPDIR") or base)
    work = given if given.name.startswith("course-grade-") and given.is_dir() else base
    # scancel and the time limit send SIGTERM, and SIGKILL KillWait seconds later (30 s by
    # default, 2 on some clusters): the work folder goes first, then SystemExit stops the kernel
    # and the check process even where Slurm tracks only the task's process group
    # (proctrack/pgid: both run in sessions of their own).
    # Its control groups first (their processes killed, the groups removed: Slurm cannot remove
    # the job's while they are in it, and the unwinding may not finish before the SIGKILL).
    with _signals_raise(first=lambda: _stopped(work)):
        try:
            # its own log: tasks on several nodes would write one file over each other
            checks = start_checks(b, base, f"{PLAN_FOLDER}/checks-{index}.log")
            watch = tamper.TamperWatch(b, "this submission or one graded at the same time")
            where = one_submission.Workspace(checks, base, watch=watch)
            # a mark that cannot be written (a full disk): that row's grader error
            oom_kills = cgroups.own_oom_kills()
            g = batch.recorded(b, submission, where, marks)
            if memory_killed(g, oom_kills, b.out / submission.student):
                print("the kernel was killed at the task's memory limit", file=sys.stderr)
        finally:
            if threading.current_thread() is threading.main_thread():
                # a second SIGTERM must not stop the clean-up half-way
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if checks is not None:
                checks.close()  # and its control group
            left = remove_work(base)  # never raises, at any depth (the script removes `work`)
            if left:
                left_out = report.console("; ".join(left))
                print(f"could not remove {base} entirely: {left_out}", file=sys.stderr)
    print(f"{report.console(g.student)}: {g.score:g}/{g.max_score:g} {g.status}")
    return 0


if __name__ == "__main__":
    task = grade_task if sys.argv[3:] == ["--child"] else run_task
    sys.exit(task(Path(sys.argv[1]), int(sys.argv[2])))
