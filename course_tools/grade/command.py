"""`course grade`: grade submissions here (`batch`, in a child process that `supervised` restarts
when a submission kills it) or as a Slurm job array (`slurm_array`).

    course grade submissions/ --out grades/                 # here, --jobs chosen from the machine
    course grade submissions/ --slurm --partition cpu --time 01:00:00 --mem 8G
    course grade submissions/ --benchmark                   # seconds per submission, each route

Both routes run every submission in the bubblewrap sandbox with the same limits and write the
same files: <out>/<student>/report.md, <out>/gradebook.csv, and the gradebook as Canvas
(canvas.csv) and Moodle (moodle.csv) grade-import files. A second run grades only submissions
without a grade yet (--regrade: all).

Example:

    from course_tools.grade import command
    jobs, why = command.default_jobs(devices=2, memory_mb=4096)
    # (1, '2 cores / 2 devices per submission = 1; 20,480 MB free / 4,096 MB per notebook = 5')
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from course_tools import exercise
from course_tools.grade.core import checker, plan, report, roster
from course_tools.grade.core.plan import DEFAULT_SOLUTION, GradingSettings
from course_tools.grade.core.report import Grade, console
from course_tools.grade.jail import limits as jail_limits
from course_tools.grade.jail import sandbox
from course_tools.grade.routes import slurm_array, supervised
from course_tools.paths import course_root
from course_tools.runner import Limits
from course_utils.tables import format_table

#: Under --out: the benchmark's grades folders (the compute nodes of --slurm must see them).
BENCHMARK_FOLDER = ".benchmark"


def default_jobs(devices: int, memory_mb: int) -> tuple[int, str]:
    """Submissions to grade at the same time on this machine, and why: each one simulates
    `devices` CPU devices (a core each) and may use `memory_mb`."""
    # the cores this process may use; macOS has no sched_getaffinity: all of them
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    free_mb = psutil.virtual_memory().available / 2**20
    by_cores = cores // max(1, devices)
    by_memory = int(free_mb // memory_mb)
    why = (
        f"{cores} cores / {devices} devices per submission = {by_cores}; "
        f"{free_mb:,.0f} MB free / {memory_mb:,} MB per notebook = {by_memory}"
    )
    if min(by_cores, by_memory) < 1:  # fewer cores or less memory than one submission asks for
        why += "; one at a time all the same, slower than a submission asks for"
    return max(1, min(by_cores, by_memory)), why


#: `course grade`'s exit status, in its --help.
EXIT_STATUS = (
    "Exit status: 0 when every submission got a grade (whatever its score); 1 when the grader "
    "failed on some (status grader error, could not start, task failed/timed out/cancelled: the "
    "gradebook is written all the same, and a second run grades them again); 2 on bad input."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `course grade`."""
    parser.epilog = EXIT_STATUS
    _add_batch_arguments(parser)
    _add_limit_arguments(parser)
    _add_run_arguments(parser)
    _add_slurm_arguments(parser)


def _add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", nargs="+", help="submitted notebooks, or folders of them")
    parser.add_argument(
        "--out",
        default="grades",
        help="folder for the reports and gradebook.csv (default: grades/)",
    )
    parser.add_argument(
        "--solution", help=f"solution notebook with the hidden tests (default: {DEFAULT_SOLUTION})"
    )
    parser.add_argument(
        "--profile",
        choices=("quick", "cpu", "full"),
        default="quick",
        help="COURSE_PROFILE (default: quick, 2 timed rounds per run, a smoke test; cpu gives the "
        "5 rounds per run the exercise's timing verdicts need)",
    )
    parser.add_argument(
        "--devices", type=int, default=2, help="simulated devices, COURSE_DEVICES (default: 2)"
    )
    parser.add_argument(
        "--data",
        choices=("auto", "tfds", "synthetic"),
        help="COURSE_DATA (default: the environment's, or auto)",
    )


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_argument_group("limits per submission")
    for flag, name, what in [
        ("--cell-timeout", "cell_timeout", "seconds per cell"),
        ("--timeout", "timeout", "seconds per notebook"),
        ("--memory-mb", "memory_mb", "memory per notebook in MB"),
    ]:
        default = getattr(Limits, name)
        limits.add_argument(flag, type=int, default=default, help=f"{what} (default: {default})")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=int,
        help="submissions graded at the same time here (default: from the cores, the free memory "
        "and --devices; printed)",
    )
    parser.add_argument(
        "--regrade",
        action="store_true",
        help="grade again submissions already graded in --out (default: only those without a "
        "grade for their current notebook and settings, or on which the grader failed)",
    )
    parser.add_argument(
        sandbox.NO_SANDBOX_FLAG,
        dest="no_sandbox",
        action="store_true",
        help="run the submissions WITHOUT the bubblewrap sandbox, with your rights: their code "
        "can read and change your files, use the network and change other grades; only for "
        "notebooks you trust, on machines without bubblewrap",
    )
    parser.add_argument(
        "--benchmark",
        action="store_true",
        help="instead of grading once, grade the batch by each route (here one and --jobs at a "
        "time, with the sandbox and, without --slurm, without it; with --slurm also as a job "
        f"array) into --out/{BENCHMARK_FOLDER}/ (removed after), and print each gradebook and the "
        "seconds per submission",
    )


def _add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Slurm (one job array, a task per submission)")
    group.add_argument("--slurm", action="store_true", help="grade as a Slurm job array")
    group.add_argument("--partition", help="sbatch --partition (default: the cluster's)")
    group.add_argument(
        "--time", help="sbatch --time per task (default: the notebook and check limits + 3 min)"
    )
    group.add_argument("--mem", help="sbatch --mem per task, e.g. 8G (default: the cluster's)")
    group.add_argument(
        "--cpus-per-task", type=int, help="sbatch --cpus-per-task (default: --devices)"
    )
    group.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="another sbatch option, e.g. --sbatch-arg=--account=cs101 (repeatable)",
    )


def _slurm_options(args: argparse.Namespace) -> slurm_array.SlurmOptions:
    return slurm_array.SlurmOptions(
        partition=args.partition,
        time=args.time,
        mem=args.mem,
        cpus_per_task=args.cpus_per_task or args.devices,
        extra=list(args.sbatch_arg),
    )


def _prepare(args: argparse.Namespace, out: str, *, sandboxed: bool) -> plan.Batch:
    limits = Limits(cell_timeout=args.cell_timeout, timeout=args.timeout, memory_mb=args.memory_mb)
    data = args.data or os.environ.get("COURSE_DATA") or "auto"
    settings = GradingSettings(profile=args.profile, devices=args.devices, data=data)
    solution = Path(args.solution or course_root() / DEFAULT_SOLUTION)
    return plan.prepare(out, solution, settings, limits, sandboxed=sandboxed)


def _grade(args: argparse.Namespace, b: plan.Batch, jobs: int, *, slurm: bool) -> list[Grade]:
    if slurm:
        return slurm_array.grade(
            b,
            args.submissions,
            _slurm_options(args),
            progress=not args.benchmark,
            regrade=args.regrade or args.benchmark,
        )
    # in child processes, supervised: a submission that kills the grader costs its own row only
    return supervised.grade(
        b,
        args.submissions,
        jobs,
        progress=not args.benchmark,
        regrade=args.regrade or args.benchmark,
    )


def benchmark(args: argparse.Namespace, jobs: int) -> int:
    """`course grade SUBMISSION... --benchmark`: grade the same batch by each route (sandbox on and
    off here, 1 and `jobs` at a time; Slurm with --slurm); print seconds per submission."""
    count = len(roster.collect_submissions(args.submissions))
    routes = [(True, n, False) for n in sorted({1, jobs})]
    if args.slurm:
        routes.append((True, 0, True))
    elif not sandbox.status()[0]:
        print(f"course grade: no sandbox here ({sandbox.status()[1]}): measuring without it only")
        routes = []
    routes += [(False, n, False) for n in sorted({1, jobs})] * (not args.slurm)
    rows = []
    # under --out, not /tmp: a Slurm route's compute nodes write there
    bench = Path(args.out).resolve() / BENCHMARK_FOLDER
    bench.mkdir(parents=True, exist_ok=True)
    for sandboxed, n, slurm in routes:
        with tempfile.TemporaryDirectory(prefix="route-", dir=bench) as out:
            b = _prepare(args, out, sandboxed=sandboxed)
            started = time.monotonic()
            grades = _grade(args, b, n, slurm=slurm)
            per = (time.monotonic() - started) / count
            gradebook = (Path(out) / "gradebook.csv").read_text()
        where = "slurm" if slurm else f"here, {n} at a time"
        scores = " ".join(f"{g.score:g}" for g in grades)
        rows.append([where, "on" if sandboxed else "off", f"{per:.1f}", scores])
        shown = "\n".join(map(console, gradebook.splitlines()))  # notes a submission wrote
        print(f"\n{where}, gradebook:\n{shown}", flush=True)
    print(format_table(["route", "sandbox", "s/submission", "scores"], rows))
    print(f"(wall time of the whole batch of {count}, check process start-up included, / {count})")
    with contextlib.suppress(OSError):
        bench.rmdir()
    return 0


def check_replaced(out: str | os.PathLike, submissions: list[roster.Submission]) -> None:
    """ValueError (exit code 2) when a student's folder of the grades holds the grade of a
    notebook at another path that is still there, outside this submission's folder (another
    submission's: a student's folder given alone and read as a folder of students names its
    subfolders): grading would empty another student's grades. Run before anything is written."""
    for s in submissions:
        saved = report.load(Path(out) / s.student)
        if saved is None or not os.path.lexists(saved.path):
            continue
        old, new = Path(os.path.realpath(saved.path)), Path(os.path.realpath(s.path))
        if old == new or old.parent == new.parent or old.is_relative_to(new):
            continue
        if new.is_relative_to(old):
            continue
        raise ValueError(
            f"{s.path} would be graded as {s.student!r} into {Path(out) / s.student}, which holds "
            f"the grade of another submission still there, {saved.path}. Nothing was written or "
            f"removed: give the folder of students (or the student folders, `subs/*`), another "
            f"--out, or remove {Path(out) / s.student} to grade it there anew"
        )


def route(*, slurm: bool, sandboxed: bool) -> str:
    """Which route `course grade` takes, in words."""
    if slurm:
        return "grading as a Slurm job array (each task sandboxed)"
    if sandboxed:
        return "grading here, sandboxed (bubblewrap)"
    return "grading here, UNSANDBOXED (student code runs with your rights)"


def run(args: argparse.Namespace) -> int:
    """`course grade SUBMISSION... [--out DIR]`: prints the gradebook; `EXIT_STATUS`."""
    checker.absolute_path()  # programs run by name are never found in the working folder
    jobs = args.jobs
    if jobs is None and not args.slurm:
        jobs, why = default_jobs(args.devices, args.memory_mb)
        print(f"course grade: --jobs {jobs} ({why})")
    try:
        # bad input, on every route, before anything is written or removed: a student whose
        # folder of the grades is a folder of --out that is not the grader's (the checkout, data)
        solution = Path(args.solution or course_root() / DEFAULT_SOLUTION)
        submissions = roster.collect_submissions(args.submissions)
        plan.check_out(args.out, submissions, solution)
        check_replaced(args.out, submissions)
    except (FileNotFoundError, ValueError) as exc:
        print(f"course grade: {console(exc)}", file=sys.stderr)
        return 2
    if args.slurm and slurm_array.missing():
        print(f"course grade: {slurm_array.missing()}", file=sys.stderr)
        return 2
    try:
        # bad paths: a clear error before anything is written
        roster.collect_submissions(args.submissions)
        if args.benchmark:
            with plan.out_locked(args.out):
                return benchmark(args, jobs or 1)
        b = _prepare(args, args.out, sandboxed=not args.no_sandbox)  # its checks write nothing
        with plan.out_locked(args.out):  # to the end: no second run writes into --out meanwhile
            print(f"course grade: {route(slurm=args.slurm, sandboxed=not args.no_sandbox)}")
            if args.profile == "quick":  # the default: the course's own tests grade in it
                print(
                    "course grade: profile quick, a smoke test: its few short epochs may miss the "
                    "accuracy the checks ask for on real data; for grades, --profile cpu"
                )
            if not args.no_sandbox and not args.slurm:
                for line in jail_limits.missing():
                    print(f"course grade: {line}")
            sys.stdout.flush()  # before the batch: a log or a pipe shows them first, as a terminal
            grades = _grade(args, b, jobs or 1, slurm=args.slurm)
    except (
        FileNotFoundError,
        ValueError,
        exercise.MarkerError,
        sandbox.SandboxUnavailable,
        slurm_array.SlurmError,
    ) as exc:
        print(f"course grade: {console(exc)}", file=sys.stderr)
        return 2
    except supervised.ChildFailed as exc:
        print(f"course grade: {exc}; the gradebook holds what was graded", file=sys.stderr)
        return 1
    out = Path(args.out)
    for g in grades:
        print(f"{console(g.student):<24} {g.score:>5g} / {g.max_score:g}  {g.status}")
    print(
        f"Reports: {out}/<student>/report.md   Gradebook: {out / 'gradebook.csv'} "
        f"(for import: {out / 'canvas.csv'}, {out / 'moodle.csv'})"
    )
    to_read = sum(bool(g.to_read) for g in grades)
    if to_read:
        print(
            f"{to_read} submission(s) hold points given for now for written answers (column "
            "to_read of gradebook.csv): read them, and correct the scores, before importing"
        )
    failed = [console(g.student) for g in grades if g.grader_failed]
    if failed:
        print(
            f"course grade: the grader failed on {len(failed)} submission(s) "
            f"({', '.join(failed)}): see their reports; run the same command again to grade them",
            file=sys.stderr,
        )
        return 1
    return 0
