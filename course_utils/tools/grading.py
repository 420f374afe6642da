"""Grade exercise submissions: run each one headless in a sandbox under limits, then score it from
the files it wrote.

    course grade submissions/ --out grades/          # or: course grade alice.ipynb bob.ipynb ...

For each submission (a notebook; in a folder, every *.ipynb):
1. Read it. Not a notebook (invalid JSON, ...): score 0. Unchanged exercise: score 0, not run.
2. Run a copy in a fresh kernel (`course_utils.tools.runner`) inside the sandbox
   (`course_utils.tools.sandbox`: bubblewrap; the machine read-only, only the submission's work
   folder writable, private /tmp, no network, its own PID namespace), with COURSE_ARTIFACTS in
   that folder and limits: per cell (the cell is interrupted, later cells still run, so later
   questions can still earn points; a cell that ignores the interrupt gets the kernel killed), per
   notebook and memory (the kernel is killed), and on outputs kept.
3. Run the solution's HIDDEN PROBE in that same kernel, after the last cell: it only collects facts
   about the objects in memory (mirrored variables, which weights each model holds).
4. Copy the artifacts out (regular files only, size-capped), stop the kernel (its PID namespace
   dies with it), delete the work folder.
5. Score it: the solution's HIDDEN TESTS run in a separate check process, sandboxed as well, that
   never runs student code. They load the saved models and checkpoints with limits
   (`checks.safe_file`), evaluate them on the test set themselves and compare with the numbers the
   notebook recorded and with the probe's facts.
6. Write <out>/<student>/report.md (what passed, what failed and why), the executed notebook and the
   artifacts next to it, and <out>/gradebook.csv for the whole batch.

What a submission cannot change: the hidden tests (read from the solution before the batch starts,
never given to the kernel), how the tests run (another process), its score (computed from files by
that process; printed "PASSED" lines, redefined functions and hand-written numbers count for
nothing), the course, the solution, other submissions and the grades (read-only or hidden in the
sandbox). Without the sandbox (`--no-sandbox-i-trust-these-notebooks`), student code runs with your
rights: a changed solution file or course file is then noted in the report (and the solution as it
was at the start of the batch is kept beside the gradebook).

The hidden tests call the helpers of `course_utils.tools.checks` (`load_results`, `own_model`,
`evaluate`, ...), which raise `CheckError` with a message written for the student.

Example:
    >>> from course_utils.tools import grading
    >>> limits = grading.Limits(cell_timeout=300)
    >>> grades = grading.grade(["submissions/"], out="grades", limits=limits)
    >>> [(g.student, g.score, g.max_score) for g in grades]
    [('alice', 12.0, 12.0), ('bob', 9.0, 12.0)]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_utils.tools import exercise, sandbox
from course_utils.tools.checks import ARTIFACTS_NAME, DATASET, clear_cache
from course_utils.tools.processes import Watchdog, kill_tree
from course_utils.tools.runner import Limits, RunOutcome, run_notebook

__all__ = ["Limits", "RunOutcome", "grade", "run_submission"]

#: The SVHN exercise's solution notebook, where the hidden tests come from.
DEFAULT_SOLUTION = "solutions/05_svhn_solution.ipynb"
#: Extra seconds the hidden tests of one submission may take (loading models, evaluating them).
CHECK_TIMEOUT_S = 300


# ----------------------------------------------------------------------------------------------
# Running one submission: the course's notebook runner, in the sandbox.
# ----------------------------------------------------------------------------------------------


def _read_facts(outcome: RunOutcome, marker: str) -> tuple[dict, str]:
    if outcome.extra_error:
        return {}, outcome.extra_error
    for line in outcome.extra_output.splitlines():
        if line.startswith(marker):
            try:
                return json.loads(line[len(marker) :]), ""
            except ValueError as exc:
                return {}, f"unreadable facts: {exc}"
    return {}, "the probe printed no facts"


def run_submission(
    notebook,
    workdir: Path,
    env: dict[str, str],
    limits: Limits,
    probe_source: str = "",
    log_path: Path | None = None,
    *,
    sandboxed: bool = True,
    hidden: tuple[Path, ...] = (),
    hidden_files: tuple[Path, ...] = (),
) -> tuple[RunOutcome, dict, str]:
    """Execute `notebook` in a fresh kernel in `workdir` (errors allowed), then the probe there.

    Returns the run's outcome, the facts the probe found and why it found none ("" if it did).
    sandboxed: the kernel runs in the sandbox, where only `workdir` is writable and `hidden`
    folders and `hidden_files` look empty; its connection file and sockets go in `workdir/.kernel`.
    """
    workdir = Path(workdir).resolve()
    connection = workdir / ".kernel"
    connection.mkdir(parents=True, exist_ok=True)
    wrap = None
    if sandboxed:
        env = sandbox.kernel_env(env, home=workdir)

        def wrap(argv: list[str]) -> list[str]:
            return sandbox.wrap(
                argv, writable=[workdir], hidden=hidden, hidden_files=hidden_files, cwd=workdir
            )

    marker = f"@@facts-{secrets.token_hex(8)}@@"
    probe = ""
    if probe_source:
        probe = f"{probe_source}\nimport json as _json\nprint({marker!r} + _json.dumps(FACTS))"
    outcome = run_notebook(
        notebook,
        workdir,
        env,
        limits=limits,
        connection_dir=connection,
        wrap=wrap,
        extra_cell=probe,
        log_path=log_path,
    )
    facts, probe_error = _read_facts(outcome, marker) if probe_source else ({}, "")
    return outcome, facts, probe_error


# ----------------------------------------------------------------------------------------------
# The check process: runs the hidden tests on a submission's files, never its code.
# ----------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """One hidden test (or written answer) and how it went."""

    question: str
    title: str
    points: float
    earned: float
    message: str = ""  # why it failed, or a note
    manual: bool = False  # a written answer for the instructor to read


def _check_worker() -> None:
    """The check process: one JSON job per stdin line, one JSON result per stdout line."""
    results_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(
        2, 1
    )  # anything else printed here (TensorFlow, the tests) goes to stderr, not to the results
    import course_utils

    settings = course_utils.setup(verbose=False)
    for line in sys.stdin:
        job = json.loads(line)
        clear_cache()
        namespace = {
            "__name__": "__hidden_tests__",
            "settings": settings,
            "ARTIFACTS": Path(job["artifacts"]),
            "FACTS": job["facts"],
        }
        results = []
        for index, test in enumerate(job["tests"]):
            try:
                exec(
                    compile(test["source"], f"<hidden test {index}: {test['title']}>", "exec"),
                    namespace,
                )
                results.append({"passed": True, "message": ""})
            except AssertionError as exc:
                results.append({"passed": False, "message": str(exc) or "an assertion failed"})
            except Exception as exc:
                results.append(
                    {"passed": False, "message": f"{type(exc).__name__}: {str(exc)[:500]}"}
                )
        import keras

        keras.backend.clear_session()
        results_out.write(json.dumps(results) + "\n")


class CheckProcess:
    """A long-lived `python` process running hidden tests for one submission at a time.

    Started once per batch (TensorFlow loads once), through `wrap` (the sandbox) when given;
    killed and restarted when it crashes, takes too long or uses more than `memory_mb`.
    """

    def __init__(
        self,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        memory_mb: float = 4096,
        wrap=None,
    ) -> None:
        self.env, self.cwd, self.log_path = env, cwd, log_path
        self.memory_mb, self.wrap = memory_mb, wrap
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.lock = threading.Lock()

    def _start(self) -> None:
        log = open(self.log_path, "a")
        argv = [
            sys.executable,
            "-c",
            "from course_utils.tools.grading import _check_worker; _check_worker()",
        ]
        self.process = subprocess.Popen(
            self.wrap(argv) if self.wrap else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        log.close()
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.process, self.lines), daemon=True).start()

    @staticmethod
    def _read(process: subprocess.Popen, lines: queue.Queue) -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)  # end of output: the process exited

    def start(self) -> None:
        """Start the process now (so TensorFlow loads while the first submission runs)."""
        with self.lock:
            if self.process is None:
                self._start()

    def run(
        self, artifacts: Path, facts: dict, tests: list[exercise.HiddenTest], timeout: float
    ) -> list[tuple[bool, str]]:
        """(passed, message) for each test; all failed with the reason when the process fails."""
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            job = {
                "artifacts": str(artifacts),
                "facts": facts,
                "tests": [{"title": t.title, "source": t.source} for t in tests],
            }
            dog = Watchdog(self.process.pid, self.memory_mb, timeout, what="the check process")
            try:
                with dog:
                    self.process.stdin.write(json.dumps(job) + "\n")
                    self.process.stdin.flush()
                    line = self.lines.get(timeout=timeout + 5)
            except queue.Empty:
                line, why = (
                    None,
                    f"the grader's tests took longer than {timeout:.0f} s on these files",
                )
            except (BrokenPipeError, OSError):
                line, why = None, "the grader's check process stopped"
            else:
                why = "the grader's check process crashed while reading these files"
            if line is None:
                self.stop()
                if dog.reason:
                    why = f"{dog.reason} while reading these files"
                return [(False, f"{why} (details: {self.log_path.name})")] * len(tests)
            return [(r["passed"], r["message"]) for r in json.loads(line)]

    def stop(self) -> None:
        if self.process is not None:
            kill_tree(self.process.pid)
            self.process.wait()
            self.process = None


# ----------------------------------------------------------------------------------------------
# Grading a batch.
# ----------------------------------------------------------------------------------------------


@dataclass
class Grade:
    """The grade of one submission."""

    student: str
    path: Path
    # "graded", "invalid notebook", "unchanged exercise", "grader error", or how the run failed
    # (RunOutcome.status)
    status: str
    reason: str = ""
    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cell_errors: list[str] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    run_seconds: float = 0.0  # executing the notebook
    peak_mb: float = 0.0  # the kernel's highest memory use
    check_seconds: float = 0.0  # the hidden tests
    max_score: float = 0.0

    @property
    def score(self) -> float:
        return sum(r.earned for r in self.results)

    def question_scores(self) -> dict[str, float]:
        scores: dict[str, float] = {}
        for r in self.results:
            scores[r.question] = scores.get(r.question, 0.0) + r.earned
        return scores


def collect_submissions(paths: list[str | os.PathLike]) -> list[tuple[str, Path]]:
    """(student, path) for each notebook given, or found in a given folder, with unique names.

    The student is the file name without .ipynb, or its folder's name when the file is still called
    like the exercise (submissions/alice/05_svhn_exercise.ipynb -> alice).
    """
    found: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            found += sorted(
                p for p in given.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
            )
        elif given.exists():
            found.append(given)
        else:
            raise FileNotFoundError(
                f"{given} does not exist: give notebooks or folders of notebooks"
            )
    if not found:
        raise FileNotFoundError(f"no .ipynb file in {', '.join(map(str, paths))}: nothing to grade")
    names: dict[str, int] = {}
    out = []
    for path in found:
        name = (
            path.parent.name if path.stem.endswith("_exercise") and path.parent.name else path.stem
        )
        name = re.sub(r"[^\w.-]+", "_", name) or "submission"
        names[name] = names.get(name, 0) + 1
        out.append((name if names[name] == 1 else f"{name}-{names[name]}", path))
    return out


def _natural(question: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", question))


def _same_code(a, b) -> bool:
    def code(nb):
        return [c.source.strip() for c in nb.cells if c.cell_type == "code" and c.source.strip()]

    return code(a) == code(b)


def _hash_files(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.exists()}


def _copy_artifacts(source: Path, target: Path, limit_mb: int = 2048) -> list[str]:
    """Copy regular files only (no symbolic links), up to limit_mb; return notes on what was
    skipped."""
    notes, total = [], 0
    if not source.is_dir():
        return notes
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_symlink():
            notes.append(f"artifact {relative} is a symbolic link: ignored")
        elif path.is_file():
            total += path.stat().st_size
            if total > limit_mb * 2**20:
                notes.append(f"artifacts larger than {limit_mb} MB: the rest was ignored")
                break
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / relative)
    return notes


def batch_data(data: str) -> str:
    """The COURSE_DATA of every kernel and check of a batch ("tfds" or "synthetic"), decided once.

    Real data is prepared here, before the batch starts: sandboxed kernels have no network, and
    kernels running side by side must not each download it into the same folder. Raises
    `DataUnavailableError` (saying what to do) when "tfds" is asked for and cannot be had.
    """
    from course_utils import data as course_data

    if data == "auto":
        data = "tfds" if course_data.real_data_status(DATASET)[0] else "synthetic"
    if data == "tfds" and not course_data.is_prepared(DATASET):
        course_data.use_real_data(DATASET, "tfds")  # the clear error when it cannot be had
        builder = course_data.tfds_builder(DATASET)
        print(f"Preparing {DATASET} once for the whole batch, into {builder.data_dir} ...")
        builder.download_and_prepare()
    return data


def grade(
    paths: list[str | os.PathLike],
    out: str | os.PathLike = "grades",
    *,
    solution: str | os.PathLike | None = None,
    limits: Limits | None = None,
    profile: str = "quick",
    devices: int = 2,
    data: str | None = None,
    jobs: int = 1,
    progress: bool = True,
    sandboxed: bool = True,
) -> list[Grade]:
    """Grade every submission in `paths` (notebooks or folders); write reports and gradebook.csv
    into `out`.

    profile/devices/data: the COURSE_* settings each submission runs with (and the checks use).
    data None: COURSE_DATA, or "auto" decided once for the whole batch (real data or synthetic).
    jobs: submissions run at the same time, each in its own kernel (the hidden tests run one at a
    time).
    sandboxed: run every kernel and the hidden tests in the sandbox (`sandbox.SandboxUnavailable`
    when bubblewrap cannot run here). False runs student code with your rights.
    """
    from tqdm.auto import tqdm

    from course_utils.tools.paths import course_root

    if sandboxed:
        sandbox.require()
    limits = limits or Limits()
    root = course_root()
    solution_path = Path(solution or root / DEFAULT_SOLUTION).resolve()
    solution_bytes = solution_path.read_bytes()
    solution_nb = nbformat.reads(solution_bytes.decode("utf-8"), as_version=4)
    parts = exercise.parse_solution(solution_nb)
    if not parts.tests:
        raise ValueError(f"{solution_path} has no HIDDEN TESTS cells: nothing to grade with")
    exercise_nb = exercise.make_exercise(solution_nb)
    package = Path(__file__).resolve().parents[1]
    watched = sorted(package.rglob("*.py"))
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    submissions = collect_submissions(paths)

    data = batch_data(data or os.environ.get("COURSE_DATA") or "auto")
    pythonpath = os.pathsep.join(
        filter(None, [str(package.parent), os.environ.get("PYTHONPATH", "")])
    )
    course_env = {
        "COURSE_PROFILE": profile,
        "COURSE_DEVICES": str(devices),
        "COURSE_DATA": data,
        "PYTHONPATH": pythonpath,
    }
    base = Path(tempfile.mkdtemp(prefix="course-grade-")).resolve()  # the work folders
    hidden, hidden_files = (base, out), (solution_path,)
    check_env = {**os.environ, **course_env}
    check_wrap = None
    if sandboxed:
        check_env = sandbox.kernel_env(check_env, home=Path("/tmp"))

        def check_wrap(argv: list[str]) -> list[str]:
            return sandbox.wrap(
                argv, read_only=[out], hidden=[base], hidden_files=hidden_files, cwd=out
            )

    checks = CheckProcess(check_env, out, out / "checks.log", limits.memory_mb, check_wrap)
    checks.start()
    isolation = dict(sandboxed=sandboxed, hidden=hidden, hidden_files=hidden_files, base=base)

    def work(student: str, path: Path) -> Grade:
        started = time.monotonic()
        folder = out / student
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            g = _grade_one(
                student, path, folder, parts, exercise_nb, checks, limits, course_env, isolation
            )
        except (
            Exception
        ) as exc:  # a bug or an unexpected failure: this submission only, the batch goes on
            g = Grade(
                student, Path(path), status="grader error", reason=f"{type(exc).__name__}: {exc}"
            )
            g.results = [
                CheckResult(t.question, t.title, t.points, 0.0, "not graded: grader error")
                for t in parts.tests
            ]
        g.seconds = time.monotonic() - started
        g.max_score = parts.max_points
        return g

    grades: list[Grade | None] = [None] * len(submissions)
    hashes = _hash_files(watched)
    bar = tqdm(total=len(submissions), desc="grading", unit="notebook", disable=not progress)
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {
                pool.submit(work, student, path): index
                for index, (student, path) in enumerate(submissions)
            }
            for future in as_completed(futures):
                g = future.result()
                suspects = "this submission" + (
                    " or one running at the same time" if jobs > 1 else ""
                )
                if solution_path.read_bytes() != solution_bytes:
                    # Only possible without the sandbox. It may be the submission, or your own
                    # edit during a long batch: keep both versions, overwrite neither.
                    kept = out / f"{solution_path.stem}.at-batch-start.ipynb"
                    kept.write_bytes(solution_bytes)
                    solution_bytes = solution_path.read_bytes()  # report each change once
                    g.notes.append(
                        f"{solution_path.name} changed while {suspects} ran (tampering, or an "
                        "edit of yours?). Grades are unaffected: the hidden tests were read "
                        f"before the batch. The file was left as it is; {kept} is the version "
                        "the batch started with."
                    )
                after = _hash_files(watched)
                g.notes += [
                    f"{p.relative_to(package.parent)} changed while {suspects} ran (tampering?)"
                    for p in after
                    if hashes.get(p) != after[p]
                ]
                hashes = after
                write_report(g, out / g.student / "report.md")
                grades[futures[future]] = g
                write_gradebook([g for g in grades if g], out / "gradebook.csv", parts)
                bar.set_postfix_str(f"{g.student}: {g.score:g}/{g.max_score:g}")
                bar.update()
    finally:
        bar.close()
        checks.stop()
        shutil.rmtree(base, ignore_errors=True)
    return [g for g in grades if g]


def _grade_one(
    student, path, folder, parts, exercise_nb, checks, limits, course_env, isolation
) -> Grade:
    g = Grade(student, Path(path), status="graded")
    zero = [CheckResult(t.question, t.title, t.points, 0.0) for t in parts.tests]
    zero += [CheckResult(a.question, a.title, a.points, 0.0, manual=True) for a in parts.answers]
    try:
        notebook = nbformat.read(path, as_version=4)
        if not isinstance(notebook.get("cells"), list):
            raise ValueError("it has no list of cells")
    except Exception as exc:
        g.status, g.reason = (
            "invalid notebook",
            f"{Path(path).name} cannot be read as a notebook: {type(exc).__name__}: "
            f"{str(exc)[:300]}",
        )
        g.results = [_failed(r, "not graded: the file is not a valid notebook") for r in zero]
        return g
    g.answers = {a.question: exercise.find_answer(notebook, a) for a in parts.answers}
    if _same_code(notebook, exercise_nb) and not any(g.answers.values()):
        g.status, g.reason = (
            "unchanged exercise",
            "the submission is the exercise as handed out: no code and no answer to grade",
        )
        g.results = [_failed(r, "not graded: nothing was changed in the exercise") for r in zero]
        return g

    workdir = isolation["base"] / student
    workdir.mkdir()
    try:
        env = {
            **os.environ,
            **course_env,
            "COURSE_ARTIFACTS": str(workdir / "artifacts"),
            "MPLBACKEND": "Agg",
        }
        outcome, facts, probe_error = run_submission(
            notebook,
            workdir,
            env,
            limits,
            parts.probe,
            folder / "kernel.log",
            sandboxed=isolation["sandboxed"],
            hidden=isolation["hidden"],
            hidden_files=isolation["hidden_files"],
        )
        g.notes += _copy_artifacts(workdir / "artifacts" / ARTIFACTS_NAME, folder / "artifacts")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    nbformat.write(outcome.notebook, folder / "executed.ipynb")
    g.cell_errors = outcome.cell_errors
    if outcome.status != "ran":
        g.status, g.reason = outcome.status, outcome.reason
    if outcome.timed_out_cells:
        g.notes.append(
            f"cell(s) {', '.join(map(str, outcome.timed_out_cells))} ran longer than "
            f"{limits.cell_timeout} s and were interrupted"
        )
    g.notes += [f"outputs cut in {note}" for note in outcome.output_notes]
    if probe_error and outcome.status == "ran":
        g.notes.append(f"the probe could not read the notebook's memory: {probe_error}")

    g.run_seconds, g.peak_mb = outcome.seconds, outcome.peak_mb
    started = time.monotonic()
    verdicts = checks.run(folder / "artifacts", facts, parts.tests, CHECK_TIMEOUT_S)
    g.check_seconds = time.monotonic() - started
    for test, (passed, message) in zip(parts.tests, verdicts):
        g.results.append(
            CheckResult(
                test.question, test.title, test.points, test.points if passed else 0.0, message
            )
        )
    for answer in parts.answers:
        text = g.answers.get(answer.question)
        if text is None:
            g.results.append(
                CheckResult(
                    answer.question,
                    answer.title,
                    answer.points,
                    0.0,
                    "the answer cell is missing",
                    True,
                )
            )
        elif len(text.split()) < 5:
            g.results.append(
                CheckResult(
                    answer.question, answer.title, answer.points, 0.0, "no answer written", True
                )
            )
        else:
            g.results.append(
                CheckResult(
                    answer.question,
                    answer.title,
                    answer.points,
                    answer.points,
                    "answered: points given for now, the instructor reads it",
                    True,
                )
            )
    return g


def _failed(result: CheckResult, message: str) -> CheckResult:
    result.message = message
    return result


def write_report(g: Grade, path: Path) -> None:
    """The student's report: score, each check and why it failed, errors, written answers."""
    lines = [
        f"# {g.student}: {g.score:g} / {g.max_score:g}",
        "",
        f"- submission: `{g.path.name}`",
        f"- status: {g.status}" + (f" ({g.reason})" if g.reason else ""),
    ]
    if g.run_seconds:
        lines.append(
            f"- graded in {g.seconds:.0f} s (notebook {g.run_seconds:.0f} s, checks "
            f"{g.check_seconds:.0f} s), peak memory {g.peak_mb:.0f} MB; the executed notebook is "
            f"`executed.ipynb`, its files `artifacts/`"
        )
    lines.append("")
    if g.notes:
        lines += ["## Notes", "", *[f"- {note}" for note in g.notes], ""]
    lines += ["## Checks", "", "| question | check | points | result |", "|---|---|---|---|"]
    for r in sorted(g.results, key=lambda r: _natural(r.question)):
        verdict = "FAILED" if r.earned < r.points else ("to read" if r.manual else "passed")
        detail = f": {r.message}" if r.message and verdict != "passed" else ""
        lines.append(
            f"| {r.question} | {r.title} | {r.earned:g}/{r.points:g} "
            f"| {verdict}{detail.replace('|', '/')} |"
        )
    if g.cell_errors:
        lines += [
            "",
            "## Errors while running the notebook",
            "",
            "Later cells still ran; a failing cell usually makes the cells that use its "
            "results fail too.",
            "",
        ]
        lines += [f"- {error.replace(chr(10), ' ')}" for error in g.cell_errors[:30]]
    for question, text in g.answers.items():
        lines += ["", f"## Written answer ({question})", ""]
        lines += [f"> {line}" for line in (text or "(no answer)").splitlines()]
    path.write_text("\n".join(lines) + "\n")


def write_gradebook(grades: list[Grade], path: Path, parts: exercise.SolutionParts) -> None:
    """One row per submission: score, points per question, status and notes."""
    questions = sorted(
        {t.question for t in parts.tests} | {a.question for a in parts.answers}, key=_natural
    )
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["student", "score", "max_score", *questions, "status", "notes", "seconds", "report"]
        )
        for g in grades:
            scores = g.question_scores()
            notes = "; ".join(g.notes + ([g.reason] if g.reason else []))
            writer.writerow(
                [
                    g.student,
                    f"{g.score:g}",
                    f"{g.max_score:g}",
                    *[f"{scores.get(q, 0):g}" for q in questions],
                    g.status,
                    notes,
                    f"{g.seconds:.0f}",
                    f"{g.student}/report.md",
                ]
            )


# ----------------------------------------------------------------------------------------------
# `course grade`
# ----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `course grade`."""
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
        choices=("quick", "full"),
        default="quick",
        help="COURSE_PROFILE for the runs (default: quick)",
    )
    parser.add_argument(
        "--devices", type=int, default=2, help="simulated devices, COURSE_DEVICES (default: 2)"
    )
    parser.add_argument(
        "--data",
        choices=("auto", "tfds", "synthetic"),
        help="COURSE_DATA (default: the environment's, or auto)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=int,
        default=Limits.cell_timeout,
        help="seconds per cell (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=Limits.timeout,
        help="seconds per notebook (default: %(default)s)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=Limits.memory_mb,
        help="memory per notebook in MB (default: %(default)s)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="submissions graded at the same time (default: 1)"
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
        help="instead of grading once, grade the submissions with the sandbox on and off, one and "
        "two at a time, and print seconds per submission and the projected time for 100",
    )


def benchmark(args: argparse.Namespace, limits: Limits) -> int:
    """`course grade SUBMISSION... --benchmark`: grade the same batch with the sandbox on and off,
    one and two at a time; print the wall time per submission and the projection for 100."""
    count = len(collect_submissions(args.submissions))
    configurations = [(True, 1), (True, 2), (False, 1), (False, 2)]
    if not sandbox.status()[0]:
        print(f"course grade: no sandbox here ({sandbox.status()[1]}): measuring without it only")
        configurations = [(False, 1), (False, 2)]
    print(f"{'sandbox':<8} {'jobs':>4} {'s/submission':>13} {'100 students':>13}  scores")
    for sandboxed, jobs in configurations:
        with tempfile.TemporaryDirectory(prefix="course-grade-bench-") as out:
            started = time.monotonic()
            grades = grade(
                args.submissions,
                out,
                solution=args.solution,
                limits=limits,
                profile=args.profile,
                devices=args.devices,
                data=args.data,
                jobs=jobs,
                progress=False,
                sandboxed=sandboxed,
            )
            per = (time.monotonic() - started) / count
        scores = " ".join(f"{g.score:g}" for g in grades)
        print(
            f"{'on' if sandboxed else 'off':<8} {jobs:>4} {per:>13.1f} "
            f"{100 * per / 60:>10.0f} min  {scores}",
            flush=True,
        )
    print(f"(wall time of a whole batch of {count}, check process start-up included, / {count})")
    return 0


def run(args: argparse.Namespace) -> int:
    """`course grade SUBMISSION... [--out DIR]`: prints the gradebook; exit 0 when every file was
    graded."""
    limits = Limits(cell_timeout=args.cell_timeout, timeout=args.timeout, memory_mb=args.memory_mb)
    if args.benchmark:
        return benchmark(args, limits)
    try:
        grades = grade(
            args.submissions,
            args.out,
            solution=args.solution,
            limits=limits,
            profile=args.profile,
            devices=args.devices,
            data=args.data,
            jobs=args.jobs,
            sandboxed=not args.no_sandbox,
        )
    except (FileNotFoundError, ValueError, exercise.MarkerError, sandbox.SandboxUnavailable) as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    for g in grades:
        print(f"{g.student:<24} {g.score:>5g} / {g.max_score:g}  {g.status}")
    print(f"Reports: {out}/<student>/report.md   Gradebook: {out / 'gradebook.csv'}")
    return 0
