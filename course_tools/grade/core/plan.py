"""The grader's core plan, shared by both routes (here: `batch`; Slurm: `slurm_array`): what a batch
is fixed to (solution, hidden tests, settings, limits, grades folder), how it is prepared and saved
for Slurm tasks, its check process, which submissions still need a grade, and the gradebooks.

One submission is graded by `one_submission.grade_one`, whichever route calls it.

Example:

    from course_tools.grade.core import plan
    b = plan.prepare("grades", solution, plan.GradingSettings(devices=2), Limits())
    todo = plan.to_grade(b, roster.collect_submissions(["submissions/"]), regrade=False)
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import nbformat

from course_tools import exercise
from course_tools.grade.core import files, notebooks, report, staging
from course_tools.grade.core.checker import CheckProcess
from course_tools.grade.core.checks import DATASET
from course_tools.grade.core.report import Grade
from course_tools.grade.core.roster import Submission, check_spellings, several_notebooks
from course_tools.grade.jail import limits as jail_limits
from course_tools.grade.jail import readable, sandbox
from course_tools.paths import PACKAGE_ROOT
from course_tools.runner import Limits

#: The SVHN exercise's solution notebook (under the course root), where the hidden tests come from.
DEFAULT_SOLUTION = "solutions/05_svhn_solution.ipynb"
#: Extra seconds the hidden tests of one submission may take (loading models, evaluating them).
CHECK_TIMEOUT_S = 300
#: Where a batch keeps its plan (for Slurm tasks) under the grades folder.
PLAN_FOLDER = ".batch"
#: The solution's copy in it, which the tasks read (only while the batch runs).
SOLUTION_COPY = "solution.ipynb"
#: The largest notebook read, in MB (the exercise's executed solution takes about 0.12 MB; a
#: submission with long outputs a few MB). Parsing one costs more (`notebooks.MAX_VALUES`).
NOTEBOOK_MB = 16

#: The file `one_submission.grade_one` writes first into each student's folder of the grades: a
#: folder of the grades folder that holds it (or an earlier grade, `report.RESULT_NAME`) is the
#: grader's to empty; any other folder there is never touched (`check_out`).
GRADES_MARK = ".course-grade"
#: The unsandboxed check process's working folder in a batch's work folder, empty: never the
#: grades folder, which holds the students' folders (`start_checks`). Its leading dot: no
#: student's work folder there has one (`roster` strips it from names).
CHECKS_CWD = ".check-process"

#: The installed course package, watched for changes while submissions run unsandboxed.
PACKAGE = PACKAGE_ROOT / "course_utils"


@dataclass(frozen=True)
class GradingSettings:
    """The COURSE_* settings every submission of a batch runs with (and the checks use)."""

    profile: str = "quick"
    devices: int = 2
    # "auto" is decided once per batch (`batch_data`): "tfds" or "synthetic"
    data: str = "auto"

    def env(self) -> dict[str, str]:
        # only the instructor's absolute entries: an empty or relative one is read from the
        # working folder, a submission's own at times (`checker.child_env`)
        given = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        pythonpath = os.pathsep.join([str(PACKAGE.parent), *filter(os.path.isabs, given)])
        return {
            "COURSE_PROFILE": self.profile,
            "COURSE_DEVICES": str(self.devices),
            "COURSE_DATA": self.data,
            "PYTHONPATH": pythonpath,
        }


@dataclass
class Batch:
    """Everything fixed for a whole batch: where grades go, the hidden tests, settings, limits."""

    out: Path
    solution_path: Path
    solution_bytes: bytes
    settings: GradingSettings
    limits: Limits
    sandboxed: bool = True
    assignment: str = "05_svhn"

    @cached_property
    def solution(self) -> nbformat.NotebookNode:
        return notebooks.parse(self.solution_bytes.decode("utf-8"))

    @cached_property
    def parts(self) -> exercise.SolutionParts:
        return exercise.parse_solution(self.solution)

    @cached_property
    def handed_out(self) -> nbformat.NotebookNode:
        """The exercise as handed out (to recognise an unchanged submission)."""
        return exercise.make_exercise(self.solution)

    @property
    def questions(self) -> list[str]:
        parts = self.parts
        return sorted({t.question for t in parts.tests} | {a.question for a in parts.answers})

    def key(self, path: Path) -> str:
        """What a grade depends on: the submission, the solution, the settings and the limits."""
        digest = hashlib.sha256()
        for file in several_notebooks(path) or [Path(path)]:
            try:  # never through a link, never waiting on a FIFO
                digest.update(files.read_regular(file, NOTEBOOK_MB * 2**20))
            except OSError as exc:
                digest.update(str(exc).encode())
        digest.update(self.solution_bytes)
        settings = [dataclasses.asdict(self.settings), dataclasses.asdict(self.limits)]
        digest.update(json.dumps([*settings, self.sandboxed], sort_keys=True).encode())
        return digest.hexdigest()

    def save_plan(self, submissions: list[Submission]) -> Path:
        """Write the batch (with a copy of the solution) where a Slurm task reads it back."""
        folder = self.out / PLAN_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        # the hidden tests: 0600 whatever the umask (the tasks run as this user), removed when
        # the batch ends (`forget_solution`)
        solution = folder / SOLUTION_COPY
        solution.unlink(missing_ok=True)
        handle = os.open(solution, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(handle, "wb") as copy:
            os.fchmod(handle, 0o600)
            copy.write(self.solution_bytes)
        plan = {
            "out": str(self.out),
            "solution_path": str(self.solution_path),
            "settings": dataclasses.asdict(self.settings),
            "limits": dataclasses.asdict(self.limits),
            "sandboxed": self.sandboxed,
            "assignment": self.assignment,
            "submissions": [[s.student, str(s.path)] for s in submissions],
        }
        (folder / "plan.json").write_text(json.dumps(plan, indent=1))
        return folder / "plan.json"

    def forget_solution(self) -> None:
        """Remove the solution's copy `save_plan` wrote (the batch has ended)."""
        (self.out / PLAN_FOLDER / SOLUTION_COPY).unlink(missing_ok=True)


def load_plan(path: Path) -> tuple[Batch, list[Submission]]:
    """The batch and submissions `Batch.save_plan` wrote."""
    plan = json.loads(Path(path).read_text())
    batch = Batch(
        out=Path(plan["out"]),
        solution_path=Path(plan["solution_path"]),
        solution_bytes=(Path(path).parent / SOLUTION_COPY).read_bytes(),
        settings=GradingSettings(**plan["settings"]),
        limits=Limits(**plan["limits"]),
        sandboxed=plan["sandboxed"],
        assignment=plan["assignment"],
    )
    return batch, [Submission(name, Path(p)) for name, p in plan["submissions"]]


def batch_data(data: str) -> str:
    """The COURSE_DATA of every kernel and check of a batch ("tfds" or "synthetic"), decided once.

    Real data is prepared here, before the batch starts: sandboxed kernels have no network, and
    kernels running side by side must not each download it into the same folder. Raises
    `DataUnavailableError` (saying what to do) when "tfds" is asked for and cannot be had.
    """
    if data == "synthetic":
        return data
    # Imported here: it imports TensorFlow, which a batch on synthetic data, and every Slurm
    # task (the plan's data is decided already), need not load.
    from course_utils import data as course_data

    if data == "auto":
        data = "tfds" if course_data.real_data_status(DATASET)[0] else "synthetic"
    if data == "tfds" and not course_data.is_prepared(DATASET):
        # the clear error when it cannot be had
        course_data.use_real_data(DATASET, "tfds")
        builder = course_data.tfds_builder(DATASET)
        print(f"Preparing {DATASET} once for the whole batch, into {builder.data_dir} ...")
        builder.download_and_prepare()
    return data


#: Fewer simulated devices than this cannot tell a loss averaged over each replica's own examples
#: from one scaled by the global batch (with one replica they are the same number).
MIN_DEVICES = 2


def prepare(
    out: str | os.PathLike,
    solution: Path,
    settings: GradingSettings,
    limits: Limits,
    *,
    sandboxed: bool = True,
) -> Batch:
    """Read the solution's hidden tests and make `out`; ValueError when it has none, or when
    `settings` simulate fewer than `MIN_DEVICES` devices."""
    if settings.devices < MIN_DEVICES:
        raise ValueError(
            f"--devices {settings.devices}: the exercise is graded on at least {MIN_DEVICES} "
            "simulated devices (with one replica a loss averaged per replica, the classic "
            "mistake, gives the right number and would earn its point): use "
            f"--devices {MIN_DEVICES} or more"
        )
    if sandboxed:
        sandbox.require()
        # before anything is written: run as root, can the sandbox's own uid read the course?
        readable.check({**os.environ, **settings.env()})
    solution_path = Path(solution).resolve()
    batch = Batch(
        out=Path(out).resolve(),
        solution_path=solution_path,
        solution_bytes=solution_path.read_bytes(),
        settings=dataclasses.replace(settings, data=batch_data(settings.data)),
        limits=limits,
        sandboxed=sandboxed,
        assignment=solution_path.stem.removesuffix("_solution"),
    )
    if not batch.parts.tests:
        raise ValueError(f"{solution_path} has no HIDDEN TESTS cells: nothing to grade with")
    batch.out.mkdir(parents=True, exist_ok=True)
    return batch


def is_grades_folder(folder: Path) -> bool:
    """Whether `folder` (a student's folder of the grades, existing) is one the grader wrote: a
    real folder holding `GRADES_MARK`, or an earlier grade (`report.load`); never by name."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    mark = folder / GRADES_MARK
    return (mark.is_file() and not mark.is_symlink()) or report.load(folder) is not None


def _kept_paths(solution: Path | None, submissions: list[Submission]) -> list[Path]:
    """What a student's folder of the grades must never hold: the course checkout, Python's
    installation, the datasets, the solution and the submissions."""
    kept = [PACKAGE_ROOT, Path(sys.prefix), Path(sys.base_prefix)]
    if os.environ.get("TFDS_DATA_DIR"):
        kept.append(Path(os.environ["TFDS_DATA_DIR"]))
    kept += [Path(solution)] if solution else []
    kept += [Path(s.path) for s in submissions]
    return [Path(os.path.realpath(p)) for p in kept]


def check_out(
    out: str | os.PathLike, submissions: list[Submission], solution: Path | None = None
) -> None:
    """ValueError (`course grade`: exit code 2) when a student's folder of the grades,
    <out>/<student>, which the grader empties before grading it, exists and is not the grader's
    (`is_grades_folder`: a checkout, a dataset, any folder or file of the instructor's there), or
    holds the checkout, Python, the datasets, the solution or a submission (`_kept_paths`), or
    when a student's name is that of a row of the gradebooks spelt otherwise
    (`roster.check_spellings`). Run before anything is written or removed, on every route."""
    check_spellings(out, submissions)
    out = Path(os.path.realpath(out))
    kept = _kept_paths(solution, submissions)
    for s in submissions:
        folder = out / s.student
        if not os.path.lexists(folder):
            continue
        real = Path(os.path.realpath(folder))
        held = [p for p in kept if p == real or p.is_relative_to(real)]
        if held or not is_grades_folder(folder):
            what = f"holds {held[0]}" if held else "is not a grades folder of course grade"
            raise ValueError(
                f"{s.path} would be graded as {s.student!r} into {folder}, which {what}: the "
                f"grader would delete it first. Nothing was written or removed: give another "
                f"--out (an empty or new folder), or rename the submission"
            )


#: The file in --out whose lock a grading run holds from the end of its checks (which write
#: nothing: `prepare`) to its end, on every route (the Slurm route waits for its array): two runs
#: into one --out would each empty and rewrite the other's student folders, and both print wrong
#: grades as graded (red team 33b).
OUT_LOCK = ".course-grade.lock"


@contextlib.contextmanager
def out_locked(out: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on `out` (made if missing) while the block runs: ValueError when
    another `course grade` holds it, before anything is written into it."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / OUT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"another course grade is writing into {folder} now: wait for it to end, or give "
                "another --out. Nothing was written or removed"
            ) from None
        yield
    finally:
        os.close(fd)  # the lock goes with it


def start_checks(batch: Batch, base: Path, log_name: str = "checks.log") -> CheckProcess:
    """The batch's check process, sandboxed: it reads the artifacts staged for it in `base`
    (`staging`) at the grades' path, never the grades themselves or the work folders. It runs in
    a folder that holds no student's (its private /tmp; unsandboxed `CHECKS_CWD` in `base`), and
    never with its working folder on sys.path (`checker.LAUNCH`). Its log is
    `log_name` in the grades folder (a path under it: one per Slurm task)."""
    env = {**os.environ, **batch.settings.env()}
    wrap = group = None
    if batch.sandboxed:
        env = sandbox.kernel_env(env, home=Path("/tmp"))
        # in a control group of its own, like the kernels (removed by `CheckProcess.close`)
        group = jail_limits.cgroup(batch.limits.memory_mb)

        def wrap(argv: list[str]) -> list[str]:
            return sandbox.wrap(
                argv,
                # the grades' path shows the staged artifacts: readable to its own uid
                # whatever the grades' modes, which stay the instructor's (`staging`)
                views={batch.out: staging.folder(base)},
                hidden=[base, batch.solution_path],
                # never the view of the grades, whose students' folders are named like modules
                # at times (jax, brotli); `checker.LAUNCH` keeps the working folder off sys.path
                cwd=Path("/tmp"),
                cgroup=group,
            )

    log = batch.out / log_name
    # unsandboxed too, an empty folder of its own: never the grades' student folders
    run_in = Path(base) / CHECKS_CWD
    run_in.mkdir(mode=0o700, exist_ok=True)
    checks = CheckProcess(
        env, batch.out, log, batch.limits.memory_mb, wrap, cgroup=group, run_in=run_in
    )
    checks.start()
    return checks


def to_grade(batch: Batch, submissions: list[Submission], *, regrade: bool) -> list[Submission]:
    """The submissions without a saved grade for their current notebook and settings, or whose
    saved grade is a grader failure (`Grade.grader_failed`: tried again)."""
    if regrade:
        return list(submissions)
    return [
        s
        for s in submissions
        if (saved := report.load(batch.out / s.student)) is None
        or saved.key != batch.key(s.path)
        or saved.grader_failed
    ]


def write_gradebooks(batch: Batch, grades: list[Grade]) -> None:
    """gradebook.csv, and its Canvas and Moodle import files, in `batch.out`."""
    report.write_gradebook(grades, batch.out / "gradebook.csv", batch.questions)
    report.write_canvas(grades, batch.out / "canvas.csv", batch.assignment)
    report.write_moodle(grades, batch.out / "moodle.csv", batch.assignment)


def saved_grades(batch: Batch, submissions: list[Submission]) -> dict[str, Grade]:
    """The grades saved in `batch.out` for these submissions, by student."""
    found = {s.student: report.load(batch.out / s.student) for s in submissions}
    return {student: g for student, g in found.items() if g is not None}
