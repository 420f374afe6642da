"""`course grade --slurm` on a real single-node Slurm (tests/slurm.py) against the local grader.

One batch (a correct, a wrong, a crashing, a hostile, a slow submission, and one whose file
names and strings cannot be encoded and carry Markdown and HTML; quick profile,
synthetic data, 2 devices) is graded as a Slurm job array (2 tasks at a time), where the slow
submission's task is killed mid-run: its row says why, and the re-run grades only it. All but the
correct one are graded here too (`batch.grade`, 2 at a time; tests/test_grading.py grades the
solution locally): both gradebooks must be the same but for the seconds, the correct one must
have full marks, and
nothing may be left in squeue or the process table. The Slurm runs are made as a hardened host's
root makes them, under umask 077 into a grades folder made 0700 beforehand: the correct one still
scores full marks, the folder stays 0700 and the solution's copy for the tasks is gone after it.
A second, one-submission batch checks that Ctrl-C cancels the array. The Canvas and Moodle exports
are checked on the first batch.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import slurm
from grading_submissions import (
    ENV,
    INJECT,
    SOLUTION,
    SURROGATE,
    SURVIVOR,
    SURVIVOR_LOOP,
    TAMPER,
    TOKEN,
    completed_exercise,
    fill,
    notebook_of,
    survivors,
    write,
)
from helpers import require_or_skip
from test_grading_roster import SLEEPER, abort_graders_running

from course_tools.grade.core import one_submission, report, roster
from course_tools.grade.core import plan as grading_plan
from course_tools.grade.jail import identity, sandbox
from course_tools.grade.routes import batch, slurm_array
from course_tools.processes import process_tree
from course_tools.runner import Limits

NO_SLURM = slurm.missing_programs()
LIMITS = Limits(cell_timeout=90, timeout=600)
#: The slow submission's first cell writes WAITING-<TOKEN> into its work folder, then waits
#: until RELEASE appears there: its Slurm task is killed while it waits (no time window), and
#: `releasing` lets it go on in the other runs.
SLOW = (
    "import os, time\nopen('WAITING-TOKEN', 'w').close()\n"
    "while not os.path.exists('RELEASE'):\n    time.sleep(0.1)"
).replace("TOKEN", TOKEN)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_or_skip("slurm", NO_SLURM)
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    with slurm.single_node_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def course_grade(cluster, *args: str) -> list[str]:
    """The `course grade --slurm` command line for this test's settings."""
    return [
        str(Path(sys.executable).with_name("course")),
        "grade",
        *args,
        "--slurm",
        "--cpus-per-task=1",
        f"--profile={ENV['COURSE_PROFILE']}",
        f"--devices={ENV['COURSE_DEVICES']}",
        f"--data={ENV['COURSE_DATA']}",
        f"--cell-timeout={LIMITS.cell_timeout}",
        f"--timeout={LIMITS.timeout}",
    ]


def task_process(plan: Path) -> psutil.Process | None:
    """The grading process of the slow submission's task (once it has started a process)."""
    students = [name for name, _ in json.loads(plan.read_text())["submissions"]]
    tail = [str(plan), str(students.index("slow"))]
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (proc.info["cmdline"] or [])[-2:] == tail and process_tree(proc.pid)[1:]:
                return proc
    return None


#: The slow submission's work folder: named by the grader from the student, never the name itself.
SLOW_FOLDER = one_submission.work_folder_name("slow")


def waiting() -> list[Path]:
    """The work folders (local, or a Slurm task's on this node) where the slow cell waits: only
    at the two depths where a work folder lies (no recursive glob, which any deep tree another
    run left under /tmp would break)."""
    patterns = [
        f"{tempfile.gettempdir()}/course-grade-*/{SLOW_FOLDER}/WAITING-{TOKEN}",
        f"{tempfile.gettempdir()}/course-grade-*/course-grade-*/{SLOW_FOLDER}/WAITING-{TOKEN}",
    ]
    return [Path(p).parent for pattern in patterns for p in glob.glob(pattern)]


@contextlib.contextmanager
def releasing():
    """While in the block, a thread lets every waiting slow cell go on."""
    stop = threading.Event()

    def release():
        while not stop.wait(0.2):
            for folder in waiting():
                with contextlib.suppress(OSError):
                    (folder / "RELEASE").touch()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def leftovers(cluster) -> list[str]:
    """Processes of the cluster other than its daemons: job steps, tasks, kernels, sandboxes."""
    daemons = {proc.pid for proc in cluster.daemons.values()}
    found = [p for p in slurm.leftover_processes(cluster.folder) if p.pid not in daemons]
    described = []
    for p in [*found, *survivors()]:
        with contextlib.suppress(psutil.Error):  # ended meanwhile: not left
            described.append(f"{p.pid} (parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())}")
    return described


def rows(out: Path) -> list[dict]:
    """The gradebook without its seconds column (the only one that may differ)."""
    with open(out / "gradebook.csv") as handle:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(handle)]


def report_lines(folder: Path) -> list[str]:
    """A student's report but for its timing line."""
    report = (folder / "report.md").read_text().splitlines()
    return [line for line in report if not line.startswith("- graded in")]


def _umask_077() -> None:
    os.umask(0o077)


@pytest.fixture(scope="module")
def graded(cluster, tmp_path_factory):
    """(local grades folder, Slurm grades folder, the Slurm run's gradebook before the re-run,
    the re-run's output, seconds for each)."""
    folder = tmp_path_factory.mktemp("slurm_submissions")
    local, remote = tmp_path_factory.mktemp("local_grades"), tmp_path_factory.mktemp("slurm grades")
    remote.chmod(0o700)  # private, as the instructor made it
    wrong = 'import json, os, pathlib\nartifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"])'
    wrong += ' / "05_svhn"\nartifacts.mkdir(parents=True)\n'
    wrong += '(artifacts / "results.json").write_text(json.dumps({"fit": {"test_accuracy": 0.97}}))'
    survivor = SURVIVOR.replace("CODE", repr(fill(SURVIVOR_LOOP, remote)))
    submissions = {
        "correct": completed_exercise(),
        "wrong": notebook_of(wrong),
        "crashing": notebook_of("import os\nos._exit(3)", "print('never')"),
        "hostile": notebook_of(survivor, fill(TAMPER, remote)),
        "slow": notebook_of(SLOW, "print('woke up')"),
        # saved by the Slurm task itself (report.save inside grade_one's protection)
        "unencodable": notebook_of(SURROGATE, INJECT),
    }
    for name, notebook in submissions.items():
        write(notebook, folder / f"{name}.ipynb")
    # what the grader must never read through: a link to another student's notebook, a FIFO
    (folder / "linked.ipynb").symlink_to(folder / "correct.ipynb")
    os.mkfifo(folder / "fifo.ipynb")
    settings = grading_plan.GradingSettings(
        ENV["COURSE_PROFILE"], int(ENV["COURSE_DEVICES"]), ENV["COURSE_DATA"]
    )
    started = time.monotonic()
    # the correct one is graded locally by tests/test_grading.py (full marks): not again here
    others = [folder / f"{name}.ipynb" for name in [*submissions, "linked", "fifo"]]
    others.remove(folder / "correct.ipynb")
    with releasing():
        batch.grade(others, local, settings=settings, limits=LIMITS, jobs=2, progress=False)
    local_s = time.monotonic() - started

    started = time.monotonic()
    command = course_grade(cluster, str(folder), f"--out={remote}")
    # as a hardened host's root: sbatch passes the submitter's umask on to the tasks
    first = subprocess.Popen(
        command, env=cluster.env, stdout=subprocess.PIPE, text=True, preexec_fn=_umask_077
    )
    plan = remote / grading_plan.PLAN_FOLDER / "plan.json"
    found: list[psutil.Process] = []

    def slow_cell_waiting() -> bool:
        found[:] = [p for p in [waiting() and plan.exists() and task_process(plan)] if p]
        return bool(found)

    slurm.wait_until(slow_cell_waiting, 300, "the slow submission's cell to wait")
    found[0].kill()
    output = first.communicate(timeout=600)[0]
    assert first.returncode == 1, output  # a grader-side failure: the killed task
    before = rows(remote)
    with releasing():
        rerun = subprocess.run(
            command,
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=_umask_077,
        )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    remote_s = time.monotonic() - started
    print(f"\nlocal: {local_s:.0f} s, Slurm with the kill and re-run: {remote_s:.0f} s\n{output}")
    return local, remote, before, rerun.stdout


def test_a_killed_task_gets_a_row_with_its_reason_and_only_it_is_graded_again(graded):
    local, remote, before, rerun = graded
    slow = next(row for row in before if row["student"] == "slow")
    assert slow["status"] == "task failed" and slow["score"] == "0", slow
    assert "killed by signal 9" in slow["notes"] and "run again" in slow["notes"], slow
    assert len(before) == 8 and all(r["status"] != "task failed" for r in before if r is not slow)
    assert "Submitted Slurm job" in rerun and "1 of 8 submissions" in rerun, rerun


def test_slurm_gives_the_local_gradebook_and_reports(graded):
    local, remote, _, _ = graded
    remote_rows = {row["student"]: row for row in rows(remote)}
    correct = remote_rows.pop("correct")
    assert remote_rows == {row["student"]: row for row in rows(local)}
    assert correct["status"] == "graded" and correct["score"] == correct["max_score"] == "12"
    report = (remote / "correct" / "report.md").read_text()
    assert report.startswith("# correct: 12 / 12") and "FAILED" not in report, report
    by_student = {row["student"]: row for row in rows(local)}
    assert by_student["crashing"]["status"] == "kernel died"
    assert by_student["wrong"]["score"] == "0" and by_student["hostile"]["score"] == "0"
    for student in by_student:
        assert report_lines(remote / student) == report_lines(local / student), student
    for student, what in [("linked", "a symbolic link"), ("fifo", "a FIFO (named pipe)")]:
        row = by_student[student]
        assert (row["status"], row["score"]) == ("invalid notebook", "0"), row
        assert f"is {what}: only regular files are read" in row["notes"], row
    assert by_student["unencodable"]["status"] == "graded"
    report = (remote / "unencodable" / "report.md").read_text()
    assert "\\udcff" in report and "<script" not in report and "<!--" not in report


def test_under_umask_077_full_marks_and_a_private_grades_folder_kept(graded):
    """As root, the tasks' check processes (a uid of their own) read the copy staged in their own
    node-local folder: the correct submission scores full marks under umask 077; the grades folder
    stays 0700 and the copy of the solution the tasks read is gone after the batch."""
    if not identity.privileged():
        pytest.skip("the check process gets a uid of its own only as root")
    _, remote, _, _ = graded
    correct = next(row for row in rows(remote) if row["student"] == "correct")
    assert (correct["status"], correct["score"]) == ("graded", "12"), correct
    mode = stat.S_IMODE(remote.stat().st_mode)
    assert mode == 0o700, oct(mode)
    copy = remote / grading_plan.PLAN_FOLDER / grading_plan.SOLUTION_COPY
    assert (remote / grading_plan.PLAN_FOLDER / "plan.json").is_file()
    assert not copy.exists(), "the hidden tests stayed"


def test_nothing_is_left_in_squeue_or_the_process_table(cluster, graded):
    assert cluster.jobs() == []
    assert leftovers(cluster) == []


def test_canvas_and_moodle_exports(graded):
    local, _, _, _ = graded
    with open(local / "canvas.csv") as handle:
        canvas = list(csv.reader(handle))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "05_svhn"]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][-1] == "12"
    scores = {row["student"]: row["score"] for row in rows(local)}
    assert {row[3]: row[5] for row in canvas[2:]} == scores
    with open(local / "moodle.csv") as handle:
        moodle = list(csv.DictReader(handle))
    assert {row["Username"]: row["05_svhn"] for row in moodle} == scores
    crashing = next(row for row in moodle if row["Username"] == "crashing")
    assert crashing["Feedback"].startswith("0/12, kernel died")


def test_ctrl_c_cancels_the_array_and_leaves_nothing(cluster, tmp_path):
    """Ctrl-C cancels the array: its task ends, with a row saying so, and leaves neither a process
    nor its node-local work folder (/tmp/course-grade-*)."""
    marker = f"CANCELLED-{TOKEN}"
    slow = write(
        notebook_of(f"import time\nopen({marker!r}, 'w').close()\ntime.sleep(300)"),
        tmp_path / "slow.ipynb",
    )
    out = tmp_path / "grades"
    command = course_grade(cluster, str(slow), f"--out={out}")
    # As from a terminal: SIGINT at its default. A suite started in the background by a
    # non-interactive shell inherits SIGINT ignored (POSIX), and so would `course grade`.
    proc = subprocess.Popen(
        command,
        env=cluster.env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    plan = out / grading_plan.PLAN_FOLDER / "plan.json"
    pattern = f"{tempfile.gettempdir()}/course-grade-*/course-grade-*/{SLOW_FOLDER}/{marker}"
    slurm.wait_until(lambda: plan.exists() and glob.glob(pattern), 180, "the task's cell to run")
    # the task's node-local folder, made by its batch script
    (work,) = {Path(p).parents[2] for p in glob.glob(pattern)}
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    (row,) = rows(out)
    assert row["status"] == "task cancelled" and "run again" in row["notes"], row
    assert cluster.jobs() == []
    slurm.wait_until(lambda: not leftovers(cluster), 30, "the cancelled task's processes to end")
    assert not work.exists(), f"the cancelled task left {work}"


# --- without Slurm: the array's script, the rows of tasks that left no grade ---------------


def _batch(out: Path) -> grading_plan.Batch:
    solution = SOLUTION
    return grading_plan.Batch(
        out, solution, solution.read_bytes(), grading_plan.GradingSettings(), LIMITS
    )


def test_the_sbatch_script_passes_the_options_and_records_each_exit_code(tmp_path):
    b = _batch(tmp_path)
    options = slurm_array.SlurmOptions("cpu", "00:30:00", "8G", 2, ["--account=cs101"])
    script = slurm_array.batch_script(b, tmp_path / ".batch" / "plan.json", 7, options)
    for line in ["--array=0-6", "--partition=cpu", "--time=00:30:00", "--mem=8G"]:
        assert f"#SBATCH {line}\n" in script
    assert "#SBATCH --cpus-per-task=2\n" in script and "#SBATCH --account=cs101\n" in script
    assert 'exit-"$SLURM_ARRAY_TASK_ID"' in script and script.endswith('exit "$code"\n')
    default = slurm_array.batch_script(b, tmp_path / "plan.json", 1, slurm_array.SlurmOptions())
    assert f"#SBATCH --time={slurm_array.task_minutes(b)}\n" in default
    assert "--partition" not in default and "--mem" not in default


def test_a_task_whose_grading_process_dies_twice_is_a_grader_error_never_a_0(tmp_path):
    """Per task, crash-only: the task's grading process (the child of `run_task`) dies by
    SIGABRT while the submission runs; it runs again after a wait; at the second death the
    submission is a grader error (another job of the instructor on the node may have used up a
    quota the account shares: a task is never alone on its node), with the cause in its note,
    never 0 (no Slurm needed: the task's command itself, as its script runs it). The array's
    gradebook keeps that row, and a re-run grades it again."""
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    settings = grading_plan.GradingSettings(
        ENV["COURSE_PROFILE"], int(ENV["COURSE_DEVICES"]), ENV["COURSE_DATA"]
    )
    b = grading_plan.prepare(tmp_path / "grades", SOLUTION, settings, LIMITS)
    culprit = write(notebook_of(SLEEPER), tmp_path / "culprit.ipynb")
    submissions = [roster.Submission("culprit", culprit)]
    plan = b.save_plan(submissions)
    stop = threading.Event()
    killed = abort_graders_running(plan.parent / "running-0", "culprit", stop)
    try:
        task = [sys.executable, "-m", "course_tools.grade.routes.slurm_array", str(plan), "0"]
        done = subprocess.run(task, capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [mark.alone for mark in killed] == [True, True], killed
    assert killed[1].pid != killed[0].pid
    g = report.load(b.out / "culprit")
    assert (g.status, g.score) == ("grader error", 0) and g.grader_failed, g
    said = "the grader's process died (SIGABRT) 2 times while this submission ran"
    assert said in g.reason and "other jobs of your account on the node" in g.reason, g.reason
    assert "the next run grades it again" in g.reason, g.reason
    assert "culprit: 0/12 grader error" in done.stdout, done.stdout
    assert "grading again" in done.stderr, done.stderr
    for mark in killed:  # what the killed processes left: work, empty file, filter, kernels
        for kind in ("grade-", "grade-empty-", "grade-seccomp-", "kernel-"):
            left = glob.glob(f"{tempfile.gettempdir()}/course-{kind}{mark.pid}-*")
            assert not left, left
    # the array keeps the task's row (its key is this notebook's), and a re-run grades it
    (kept,) = slurm_array.collect(b, submissions, {0: "COMPLETED"}, "1")
    assert (kept.status, kept.reason) == ("grader error", g.reason), kept
    assert grading_plan.to_grade(b, submissions, regrade=False) == submissions


def test_a_task_without_a_grade_gets_a_row_saying_why(tmp_path):
    b = _batch(tmp_path)
    submissions = [roster.Submission(n, tmp_path / f"{n}.ipynb") for n in "abcd"]
    (tmp_path / grading_plan.PLAN_FOLDER).mkdir()
    (tmp_path / grading_plan.PLAN_FOLDER / "exit-2").write_text("137\n")
    states = {0: "TIMEOUT", 1: "CANCELLED", 2: "FAILED", 3: "UNKNOWN"}
    grades = slurm_array.collect(b, submissions, states, "42")
    assert [g.status for g in grades] == ["task timed out", "task cancelled"] + ["task failed"] * 2
    assert "time limit" in grades[0].reason and "killed by signal 9" in grades[2].reason
    assert all("slurm-42_" in g.reason and g.score == 0 and g.max_score == 12 for g in grades)
    assert (tmp_path / "a" / "report.md").exists() and not (tmp_path / "a" / "result.json").exists()


def _fake_array(monkeypatch, tmp_path, wait) -> tuple[grading_plan.Batch, list, list]:
    """A batch of two notebooks whose array `submit`, `wait` (the given function) and `cancel`
    are fakes; (the batch, the submissions folder, the jobs cancelled)."""
    b = _batch(tmp_path / "grades")
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in ("a", "b"):
        write(notebook_of("print(1)"), folder / f"{name}.ipynb")
    cancelled = []
    logs = b.out / grading_plan.PLAN_FOLDER

    def fake_cancel(job, logs, count, timeout=120):
        cancelled.append(job)
        return dict.fromkeys(range(count), "CANCELLED")

    monkeypatch.setattr(slurm_array, "missing", lambda: None)
    monkeypatch.setattr(slurm_array, "submit", lambda b, todo, options: ("42", logs))
    monkeypatch.setattr(slurm_array, "wait", wait)
    monkeypatch.setattr(slurm_array, "cancel", fake_cancel)
    return b, [folder], cancelled


def _sigterm_myself(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


def _slurm_fails(*args, **kwargs):
    raise slurm_array.SlurmError("squeue failed: slurmctld is down")


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "wait, raised",
    [
        (_sigterm_myself, SystemExit),
        (_slurm_fails, slurm_array.SlurmError),
        (_ctrl_c, KeyboardInterrupt),
    ],
)
def test_every_abnormal_exit_cancels_the_array(tmp_path, monkeypatch, capsys, wait, raised):
    """Not only Ctrl-C: SIGTERM (a closed session, a killed login shell) and any error while the
    array runs cancel it and write the gradebook of what finished."""
    b, paths, cancelled = _fake_array(monkeypatch, tmp_path, wait)
    handler = signal.getsignal(signal.SIGTERM)
    began = time.monotonic()
    with pytest.raises(raised) as info:
        slurm_array.grade(b, paths, slurm_array.SlurmOptions(), progress=False)
    said = {SystemExit: "(SIGTERM)", KeyboardInterrupt: "(Ctrl-C)"}.get(raised, "slurmctld is down")
    err = capsys.readouterr().err
    assert "Cancelling Slurm job 42 (" in err and said in err, err
    assert time.monotonic() - began < 20
    assert cancelled == ["42"]
    if raised is SystemExit:
        assert info.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == handler, "the grader's handler is put back"
    assert [row["status"] for row in rows(b.out)] == ["task cancelled"] * 2


def test_sacct_is_asked_only_for_tasks_squeue_no_longer_lists(tmp_path, monkeypatch):
    asked = []
    squeue = {0: "RUNNING", 1: "PENDING"}
    monkeypatch.setattr(slurm_array, "_from_squeue", lambda job: dict(squeue))
    monkeypatch.setattr(slurm_array, "_from_sacct", lambda job: asked.append(job) or {2: "FAILED"})
    assert slurm_array.task_states("42", tmp_path, 2) == squeue and asked == []
    assert slurm_array.task_states("42", tmp_path, 3) == {**squeue, 2: "FAILED"} and asked == ["42"]


def test_the_logs_folder_may_hold_spaces_and_percent_signs(tmp_path, monkeypatch):
    b = _batch(tmp_path / "grades 100%")
    commands = []
    done = subprocess.CompletedProcess([], 0, "42\n", "")
    monkeypatch.setattr(slurm_array, "_slurm", lambda *command: commands.append(command) or done)
    submissions = [roster.Submission("a", tmp_path / "a.ipynb")]
    assert slurm_array.submit(b, submissions, slurm_array.SlurmOptions())[0] == "42"
    ((sbatch, parsable, output, script),) = commands
    logs = tmp_path / "grades 100%" / grading_plan.PLAN_FOLDER
    assert output == f"--output={tmp_path}/grades 100%%/{grading_plan.PLAN_FOLDER}/slurm-%A_%a.out"
    assert script == str(logs / "grade.sbatch") and "--output" not in Path(script).read_text()
