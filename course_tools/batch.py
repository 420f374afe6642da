"""Grade a batch of exercise submissions: each one run in the sandbox, then scored from its files.

For each submission (a notebook; in a folder, every *.ipynb):
1. Read it. Not a notebook (invalid JSON, ...): score 0. Unchanged exercise: score 0, not run.
2. Run a copy in a fresh kernel inside the sandbox (`submission.run`: bubblewrap; only the
   system, Python and the course read-only, the submission's work folder writable, private /tmp,
   no network, its own PID namespace), with COURSE_ARTIFACTS in that folder and limits per cell
   (the cell is interrupted, later cells still run), per notebook, on memory and on the work
   folder's disk use (the kernel is killed), and on outputs kept. The solution's HIDDEN PROBE
   then runs in that kernel and only collects facts about the objects in memory.
3. Copy the artifacts out (regular files only, size-capped), delete the work folder.
4. Score it: the solution's HIDDEN TESTS run in the check process (`checker`), sandboxed as well,
   which never runs student code: it loads the saved files with limits and compares them with
   the numbers the notebook recorded and with the probe's facts.
5. Save <out>/<student>/report.md and result.json (`report`), the executed notebook and the
   artifacts next to them; <out>/gradebook.csv (plus canvas.csv and moodle.csv) for the batch.

A submission already graded in `out` from the same notebook, solution and settings is not graded
again (pass `regrade=True` to grade everything), unless the grader failed on it ("grader error").
The same `grade_one` grades one submission of a Slurm job array (`slurm_array`).

What a submission cannot change: the hidden tests (read from the solution before the batch starts,
never given to the kernel), how they run (another process, which never runs student code), the
course, the solution, other submissions and the grades (read-only or hidden in the sandbox). What it
does control is its own evidence: the files it saves, which the checks measure themselves (a saved
model is evaluated by the grader; recorded numbers must match those measurements), and the probe's
facts, which come from its own kernel (`course_tools.submission` says what they can and cannot
prove). Read the executed notebook when a score looks too good. Without the
sandbox, student code runs with your rights: a changed solution file or course file is then noted
in the report (and the solution as it was at the start is kept).

Example:

    from course_tools import batch
    grades = batch.grade(["submissions/"], out="grades", limits=Limits(cell_timeout=300))
    print([(g.student, g.score, g.max_score) for g in grades])  # [('alice', 12.0, 12.0), ...]
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from course_tools import exercise, report, sandbox, submission
from course_tools.checker import CheckProcess, CheckVerdict
from course_tools.checks import ARTIFACTS_NAME, DATASET
from course_tools.paths import PACKAGE_ROOT, course_root
from course_tools.report import CheckResult, Grade
from course_tools.runner import KERNEL_LOG_KB, Limits, RunOutcome
from course_utils import data as course_data

#: The SVHN exercise's solution notebook (under the course root), where the hidden tests come from.
DEFAULT_SOLUTION = "solutions/05_svhn_solution.ipynb"
#: Extra seconds the hidden tests of one submission may take (loading models, evaluating them).
CHECK_TIMEOUT_S = 300
#: Where a batch keeps its plan (for Slurm tasks) under the grades folder.
PLAN_FOLDER = ".batch"
#: Files and folders of the grades folder itself, never a student's name (compared ignoring case).
RESERVED_NAMES = frozenset({"gradebook.csv", "canvas.csv", "moodle.csv", "checks.log"})
#: What is copied of a submission's artifacts, in MB (the course's files take a few tens of MB in
#: the full profile); the rest is left out, with a note in the report.
ARTIFACTS_MB = 64
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
        pythonpath = os.pathsep.join(
            filter(None, [str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])
        )
        return {
            "COURSE_PROFILE": self.profile,
            "COURSE_DEVICES": str(self.devices),
            "COURSE_DATA": self.data,
            "PYTHONPATH": pythonpath,
        }


@dataclass(frozen=True)
class Submission:
    student: str
    path: Path


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
        return nbformat.reads(self.solution_bytes.decode("utf-8"), as_version=4)

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
            digest.update(file.read_bytes() if file.is_file() else b"")
        digest.update(self.solution_bytes)
        settings = [dataclasses.asdict(self.settings), dataclasses.asdict(self.limits)]
        digest.update(json.dumps([*settings, self.sandboxed], sort_keys=True).encode())
        return digest.hexdigest()

    def save_plan(self, submissions: list[Submission]) -> Path:
        """Write the batch (with a copy of the solution) where a Slurm task reads it back."""
        folder = self.out / PLAN_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "solution.ipynb").write_bytes(self.solution_bytes)
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


def load_plan(path: Path) -> tuple[Batch, list[Submission]]:
    """The batch and submissions `Batch.save_plan` wrote."""
    plan = json.loads(Path(path).read_text())
    batch = Batch(
        out=Path(plan["out"]),
        solution_path=Path(plan["solution_path"]),
        solution_bytes=(Path(path).parent / "solution.ipynb").read_bytes(),
        settings=GradingSettings(**plan["settings"]),
        limits=Limits(**plan["limits"]),
        sandboxed=plan["sandboxed"],
        assignment=plan["assignment"],
    )
    return batch, [Submission(name, Path(p)) for name, p in plan["submissions"]]


def _folder_name(name: str) -> str:
    """A name as a folder of the grades: characters other than letters, digits, ".", "-" and "_"
    become "_"; leading dots go (never ".", ".." or hidden), and so does a trailing .ipynb (a name
    ending in .ipynb could be the solution kept by `TamperWatch`)."""
    name = re.sub(r"[^\w.-]+", "_", name)
    while name.lower().endswith(".ipynb"):
        name = name[: -len(".ipynb")]
    return name.lstrip(".") or "submission"


def _notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def student_name(path: Path, given: Path | None = None) -> str:
    """The student a submission is from, from where the instructor put it, never from a name the
    student chose: a notebook given by itself, or lying directly in a given folder, is named by
    its file (submissions/alice.ipynb -> alice); anything deeper by its folder directly under the
    given one (submissions/alice/**/*.ipynb -> alice), whatever the file is called inside."""
    if given is None or path.parent == given:
        return _folder_name(path.stem)
    return _folder_name(path.relative_to(given).parts[0])


def collect_submissions(paths: list[str | os.PathLike]) -> list[Submission]:
    """One submission per student (`student_name`) in the notebooks or folders given. A student
    folder holding several notebooks is one submission (graded only when exactly one notebook is
    in it: `several_notebooks`). ValueError when two submissions come out with the same name, or
    one named like a file of the grades (`RESERVED_NAMES`): the instructor renames one.
    """
    found: dict[str, list[Path]] = {}
    origin: dict[str, Path] = {}
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            entries = [(p, student_name(p, given)) for p in _notebooks(given)]
        elif given.exists():
            entries = [(given, student_name(given))]
        else:
            raise FileNotFoundError(
                f"{given} does not exist: give notebooks or folders of notebooks"
            )
        for path, name in entries:
            if path.resolve() in seen:  # the same file given twice (or in a folder given too)
                continue
            seen.add(path.resolve())
            # the file, or the student's folder
            inside = given.is_dir() and path.parent != given
            where = given / path.relative_to(given).parts[0] if inside else path
            key = name.lower()
            if key in RESERVED_NAMES:
                raise ValueError(
                    f"{where} would be graded as {name!r}, a file of the grades folder: rename it"
                )
            if key in origin and origin[key] != where:
                raise ValueError(
                    f"{origin[key]} and {where} are both the submission of {name!r}: rename one "
                    "(a student's name is the name of the notebook or of its folder)"
                )
            origin[key] = where
            found.setdefault(key, []).append(path)
    if not found:
        raise FileNotFoundError(f"no .ipynb file in {', '.join(map(str, paths))}: nothing to grade")
    out = []
    for key, files in found.items():
        where = origin[key]
        name = student_name(files[0], where.parent)
        out.append(Submission(name, files[0] if len(files) == 1 else where))
    return out


def several_notebooks(path: Path) -> list[Path]:
    """The notebooks of a submission that is a student's folder with more than one ([] else)."""
    return _notebooks(path) if Path(path).is_dir() else []


def batch_data(data: str) -> str:
    """The COURSE_DATA of every kernel and check of a batch ("tfds" or "synthetic"), decided once.

    Real data is prepared here, before the batch starts: sandboxed kernels have no network, and
    kernels running side by side must not each download it into the same folder. Raises
    `DataUnavailableError` (saying what to do) when "tfds" is asked for and cannot be had.
    """
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


def start_checks(batch: Batch, base: Path, log_name: str = "checks.log") -> CheckProcess:
    """The batch's check process, sandboxed: it reads the grades, never the work folders. Its
    log is `log_name` in the grades folder (a path under it: one per Slurm task)."""
    env = {**os.environ, **batch.settings.env()}
    wrap = None
    if batch.sandboxed:
        env = sandbox.kernel_env(env, home=Path("/tmp"))

        def wrap(argv: list[str]) -> list[str]:
            return sandbox.wrap(
                argv,
                read_only=[batch.out],
                hidden=[base],
                hidden_files=[batch.solution_path],
                cwd=batch.out,
            )

    log = batch.out / log_name
    checks = CheckProcess(env, batch.out, log, batch.limits.memory_mb, wrap)
    checks.start()
    return checks


# --- one submission -------------------------------------------------------------------------------


def _same_code(a, b) -> bool:
    def code(nb) -> list[str]:
        return [c.source.strip() for c in nb.cells if c.cell_type == "code" and c.source.strip()]

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
        env = {
            **os.environ,
            **batch.settings.env(),
            "COURSE_ARTIFACTS": str(workdir / "artifacts"),
            "MPLBACKEND": "Agg",
        }
        outcome, facts, probe_error = submission.run(
            notebook,
            workdir,
            env,
            batch.limits,
            probe_source=batch.parts.probe,
            log_path=folder / "kernel.log",
            sandboxed=batch.sandboxed,
            hidden=(base, batch.out),
            hidden_files=(batch.solution_path,),
            cancel=cancel,
        )
        artifacts = workdir / "artifacts" / ARTIFACTS_NAME
        g.notes += copy_artifacts(artifacts, folder / "artifacts", within=workdir)
    finally:
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


def _grade_notebook(
    batch: Batch,
    submission: Submission,
    checks: CheckProcess,
    base: Path,
    cancel: threading.Event | None,
) -> Grade:
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


def grade_one(
    batch: Batch,
    submission: Submission,
    checks: CheckProcess,
    base: Path,
    cancel: threading.Event | None = None,
    *,
    watch: TamperWatch | None = None,
) -> Grade:
    """Grade one submission and save its grade and report into <out>/<student>/ (emptied first).
    Never raises for anything a submission does: a failure becomes a "grader error" grade for
    this one only, saved all the same (the batch goes on).
    cancel: once set, its kernel is killed and `Cancelled` raised (no grade: the caller stops).
    watch: notes on the course and the solution changing while it ran (unsandboxed batches)."""
    if cancel is not None and cancel.is_set():
        raise Cancelled("grading stopped before this submission ran")
    started = time.monotonic()
    folder = batch.out / submission.student
    try:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        g = _grade_notebook(batch, submission, checks, base, cancel)
        if watch is not None:
            g.notes += watch.notes()
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


# --- what unsandboxed code changed ----------------------------------------------------------------


class TamperWatch:
    """Notes on the course package and the solution changing while submissions run (possible only
    without the sandbox); the solution as it was at the start is kept beside the gradebook."""

    def __init__(self, batch: Batch, suspects: str = "this submission") -> None:
        self.batch, self.suspects = batch, suspects
        self.solution_bytes = batch.solution_bytes
        self.hashes = self._hash()
        self.lock = threading.Lock()

    @staticmethod
    def _hash() -> dict[Path, str]:
        paths = sorted(PACKAGE.rglob("*.py"))
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.exists()}

    def notes(self) -> list[str]:
        with self.lock:
            return self._notes(self.suspects)

    def _notes(self, suspects: str) -> list[str]:
        notes = []
        solution = self.batch.solution_path
        if solution.read_bytes() != self.solution_bytes:
            # It may be the submission, or your own edit during a long batch: keep both versions.
            kept = self.batch.out / f"{solution.stem}.at-batch-start.ipynb"
            kept.write_bytes(self.solution_bytes)
            # report each change once
            self.solution_bytes = solution.read_bytes()
            notes.append(
                f"{solution.name} changed while {suspects} ran (tampering, or an edit of yours?). "
                "Grades are unaffected: the hidden tests were read before the batch. The file was "
                f"left as it is; {kept} is the version the batch started with."
            )
        after = self._hash()
        notes += [
            f"{p.relative_to(PACKAGE.parent)} changed while {suspects} ran (tampering?)"
            for p in after
            if self.hashes.get(p) != after[p]
        ]
        self.hashes = after
        return notes


# --- a batch, here --------------------------------------------------------------------------------


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


def grade_here(batch: Batch, submissions: list[Submission], jobs: int, *, progress: bool) -> None:
    """Grade `submissions` on this machine, `jobs` at a time; save each grade as it comes. On
    Ctrl-C or an error, the submissions not started are dropped and the running kernels killed
    before it raises (grades saved so far stay)."""
    base = Path(tempfile.mkdtemp(prefix="course-grade-")).resolve()
    checks = start_checks(batch, base)
    suspects = "this submission" + (" or one running at the same time" if jobs > 1 else "")
    watch = TamperWatch(batch, suspects)
    bar = tqdm(total=len(submissions), desc="grading", unit="notebook", disable=not progress)
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = [
            pool.submit(grade_one, batch, s, checks, base, cancel, watch=watch) for s in submissions
        ]
        for future in as_completed(futures):
            g = future.result()
            bar.set_postfix_str(f"{g.student}: {g.score:g}/{g.max_score:g}")
            bar.update()
    finally:
        # normally nothing is left; else the queued ones never start, the running ones stop
        cancel.set()
        checks.close()
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        # one may have started between close() and the last job's end
        checks.stop()
        shutil.rmtree(base, ignore_errors=True)


def grade(
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
    """
    # bad paths: a clear error before anything is written
    collect_submissions(paths)
    solution = Path(solution or course_root() / DEFAULT_SOLUTION)
    settings = settings or GradingSettings(data=os.environ.get("COURSE_DATA") or "auto")
    b = prepare(out, solution, settings, limits or Limits(), sandboxed=sandboxed)
    return grade_batch(b, paths, jobs, progress=progress, regrade=regrade)


def grade_batch(
    b: Batch, paths: list[str | os.PathLike], jobs: int, *, progress: bool, regrade: bool
) -> list[Grade]:
    """`grade` for a prepared batch."""
    submissions = collect_submissions(paths)
    grade_here(b, to_grade(b, submissions, regrade=regrade), jobs, progress=progress)
    found = saved_grades(b, submissions)
    grades = [found[s.student] for s in submissions if s.student in found]
    write_gradebooks(b, grades)
    return grades
