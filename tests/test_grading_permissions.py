"""The grader and the host's file permissions and paths, as root the way CI, a container or a
Slurm node runs it, piece by piece (the whole batch: red team 4's `course grade` in
tests/test_grading.py, run under umask 077 into a private, long `--out` holding the checkout and
the data folder; the Slurm job array under umask 077 in tests/test_slurm_grading.py):

- the copy of the solution (its hidden tests) that the tasks read is 0600 whatever the umask;
- an artifact path too long for the grades folder (but fine under the work folder) is a note,
  and the note holds no host path (`copy_artifacts`);
- staged artifacts are readable to any uid whatever the umask, and the sandbox never changes the
  mode of a folder it binds;
- the grader's walks never list a folder that a submission swapped for a link between the
  lstat and the listing (`files.walk`, `FileClock`), and `FileClock.stop` does not wait for a
  look that hangs;
- a view at a folder that holds the checkout and the datasets hides neither from the check
  process; a checkout or data folder the sandbox's uid cannot read stops `course grade` before
  anything is written (`readable`), and a check process that cannot start is a grader error.

Run: pytest tests/test_grading_permissions.py (a few seconds a test).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grading_submissions import (
    ENV,
    SOLUTION,
    completed_exercise,
    copy_of_the_course,
    notebook_of,
    write,
)
from helpers import require_or_skip

from course_tools import runner
from course_tools.exercise import HiddenTest
from course_tools.grade.core import checker, files, one_submission, plan, staging
from course_tools.grade.core.plan import GradingSettings
from course_tools.grade.jail import identity, sandbox


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- the pieces, directly -------------------------------------------------------------------


def test_the_solutions_copy_is_private_whatever_the_umask(tmp_path):
    """Under a umask of 022 too, the copy of the solution (its hidden tests) that the tasks read
    is 0600; `forget_solution` removes it."""
    solution = tmp_path / "solution.ipynb"
    solution.write_bytes(SOLUTION.read_bytes())
    b = plan.Batch(
        out=tmp_path / "grades",
        solution_path=solution,
        solution_bytes=solution.read_bytes(),
        settings=GradingSettings(),
        limits=runner.Limits(),
    )
    old = os.umask(0o022)
    try:
        saved = b.save_plan([])
    finally:
        os.umask(old)
    copy = saved.parent / plan.SOLUTION_COPY
    assert _mode(copy) == 0o600, oct(_mode(copy))
    assert plan.load_plan(saved)[0].solution_bytes == solution.read_bytes()
    b.forget_solution()
    assert not copy.exists() and saved.is_file()


def test_copy_artifacts_notes_a_path_the_grades_refuse_and_copies_the_rest(tmp_path):
    work = tmp_path / "w"
    source = work / "artifacts" / "05_svhn"
    deep = source
    while len(str(deep)) + 201 < 3800:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    (source / "short.txt").write_text("kept")
    target = tmp_path / ("t" * 250) / ("u" * 250) / "artifacts"  # 500 characters longer
    notes = one_submission.copy_artifacts(source, target, within=work)
    assert (target / "short.txt").read_text() == "kept"
    assert len(notes) == 1, notes
    assert notes[0].endswith("not copied: File name too long"), notes
    assert str(tmp_path) not in notes[0]


def test_staged_artifacts_are_readable_to_any_uid_whatever_the_umask(tmp_path):
    source = tmp_path / "grades" / "alice" / "artifacts"
    (source / "fit_ckpt").mkdir(parents=True)
    (source / "fit_ckpt" / "ckpt_1.weights.h5").write_bytes(b"w" * 10)
    os.utime(source / "fit_ckpt" / "ckpt_1.weights.h5", ns=(1, 1_000_000_000))
    (source / "results.json").write_text("{}")
    os.symlink("/etc/passwd", source / "link")
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    old = os.umask(0o077)
    try:
        stage = staging.folder(base)
        staging.put(source, stage / "alice" / "artifacts")
    finally:
        os.umask(old)
    staged = stage / "alice" / "artifacts"
    assert _mode(stage) == _mode(stage / "alice") == _mode(staged) == 0o755
    assert _mode(staged / "fit_ckpt") == 0o755
    assert _mode(staged / "results.json") == _mode(staged / "fit_ckpt" / "ckpt_1.weights.h5")
    assert _mode(staged / "results.json") == 0o644
    assert os.stat(staged / "fit_ckpt" / "ckpt_1.weights.h5").st_mtime_ns == 1_000_000_000
    assert not (staged / "link").exists() and not (staged / "link").is_symlink()
    assert _mode(base) == 0o700, "the work folder stays closed to other accounts"
    staging.clear(stage / "alice")
    assert not (stage / "alice").exists()


def test_the_sandbox_never_changes_the_mode_of_a_folder_it_binds(tmp_path):
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    grades = tmp_path / "grades"
    grades.mkdir(mode=0o700)
    grades.chmod(0o700)
    stage = tmp_path / "stage"
    stage.mkdir()
    sandbox.wrap(["true"], read_only=[grades])
    assert _mode(grades) == 0o700, "a private folder was opened to other accounts"
    argv = sandbox.wrap(["true"], views={tmp_path / "seen": stage})
    at = argv.index(str(stage))
    assert argv[at - 1 : at + 2] == ["--ro-bind", str(stage), str((tmp_path / "seen").resolve())]


def test_a_view_at_a_folder_holding_the_checkout_or_the_data_hides_neither(tmp_path, monkeypatch):
    """An --out that holds the course checkout (`--out` at its parent) or the datasets
    (TFDS_DATA_DIR inside it): the check process, shown the staged artifacts there, still
    imports the course's packages and lists the data folder (it could not start before)."""
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    data = tmp_path / "course" / "tfds"
    (data / "svhn_cropped").mkdir(parents=True)
    (data / "svhn_cropped").chmod(0o755)
    for folder in (tmp_path / "course", data):
        folder.chmod(0o755)
    monkeypatch.setenv("TFDS_DATA_DIR", str(data))
    stage = tmp_path / "stage"
    (stage / "alice" / "artifacts").mkdir(parents=True)
    (stage / "alice" / "artifacts" / "results.json").write_text("{}")
    for folder in (tmp_path, stage, stage / "alice", stage / "alice" / "artifacts"):
        folder.chmod(0o755)
    (stage / "alice" / "artifacts" / "results.json").chmod(0o644)
    code = (
        "import os, sys, course_utils, course_tools.grade.core.checker\n"
        "print(os.listdir(os.environ['TFDS_DATA_DIR']), os.listdir(sys.argv[1]))"
    )
    checkout_parent = sandbox.PACKAGE_ROOT.parent
    # /tmp itself is every sandbox's private /tmp: a checkout cloned straight into /tmp is covered
    # by the tmp_path case (an --out of /tmp itself is not supported: see course_tools/README)
    outs = [tmp_path / "course"] + [checkout_parent] * (checkout_parent != Path("/tmp"))
    for out in outs:
        argv = sandbox.wrap(
            [sys.executable, "-c", code, str(out / "alice" / "artifacts")], views={out: stage}
        )
        env = sandbox.kernel_env(dict(os.environ), home=Path("/tmp"))
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, (out, done.stderr[-2000:])
        assert done.stdout.split() == ["['svhn_cropped']", "['results.json']"], done.stdout


def test_a_checkout_the_sandboxs_uid_cannot_read_stops_the_batch_before_a_row(tmp_path):
    """Run as root from a checkout made under umask 027, `course grade` stops with exit code 2
    and a message naming the unreadable folder and the fix, before writing anything (every
    submission scored 1/12 "graded" before); once opened with that fix, the check passes."""
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    if not identity.privileged():
        pytest.skip("the sandbox gets a uid of its own only as root")
    ck = copy_of_the_course(tmp_path / "ck", closed=True)
    subs = tmp_path / "subs"
    subs.mkdir()
    write(completed_exercise(), subs / "honest.ipynb")
    out = tmp_path / "grades"
    env = {**os.environ, "PYTHONPATH": str(ck)}
    command = [sys.executable, "-m", "course_tools.cli", "grade", str(subs), f"--out={out}"]
    command += [f"--solution={SOLUTION}", "--data=synthetic", "--jobs=1"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ck, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert f"cannot read {ck}/course_" in done.stderr, done.stderr
    assert f"chmod -R o+rX {ck}/course_" in done.stderr, done.stderr
    assert not out.exists(), "nothing is written before the check"
    doctor = [sys.executable, "-m", "course_tools.cli", "doctor"]
    told = subprocess.run(doctor, capture_output=True, text=True, env=env, cwd=ck, timeout=300)
    (reads,) = [line for line in told.stdout.splitlines() if "jail reads the course" in line]
    assert "NO: " in reads and f"chmod -R o+rX {ck}/course_" in reads, reads
    subprocess.run(["chmod", "-R", "o+rX", str(ck)], check=True)
    code = "import os\nfrom course_tools.grade.jail import readable\nreadable.check(os.environ)"
    opened = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ck, timeout=300
    )
    assert opened.returncode == 0, opened.stderr[-2000:]


def test_a_data_folder_the_sandboxs_uid_cannot_read_is_named_with_the_fix(tmp_path, monkeypatch):
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    if not identity.privileged():
        pytest.skip("the sandbox gets a uid of its own only as root")
    from course_tools.grade.jail import readable

    data = tmp_path / "tfds"
    (data / "svhn_cropped").mkdir(parents=True)
    data.chmod(0o755)
    (data / "svhn_cropped").chmod(0o750)  # made by root under umask 027
    monkeypatch.setenv("TFDS_DATA_DIR", str(data))  # what the sandbox binds, and lists
    with pytest.raises(readable.Unreadable, match="chmod -R o\\+rX") as refused:
        readable.check(os.environ)
    assert f"cannot read {data / 'svhn_cropped'} " in str(refused.value)
    assert f"o+rX {data} " in str(refused.value)
    (data / "svhn_cropped").chmod(0o755)
    readable.check(os.environ)


#: A check process that cannot start: it fails to import what it runs (as when its uid cannot
#: read the course), before it reads any job.
NOT_STARTING = "import no_such_module_of_the_grader"
#: One that starts, then dies on the first job it reads (a file that crashes TensorFlow).
DIES_ON_A_JOB = (
    f"import sys\nprint({checker.READY!r}, flush=True)\nsys.stdin.readline()\nsys.exit(3)"
)


def _checks(tmp_path: Path, code: str) -> checker.CheckProcess:
    return checker.CheckProcess(
        dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "checks.log",
        wrap=lambda argv: [sys.executable, "-c", code],
    )


def test_a_check_process_that_cannot_start_is_the_graders_failure(tmp_path):
    """A check process that ends before it is ready raises (a grader error: `grade_one`), with
    its log's last line; one that dies on a job it read fails that job's tests (the files')."""
    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)] * 2
    process = _checks(tmp_path, NOT_STARTING)
    try:
        with pytest.raises(checker.CheckStartError, match="could not start") as failed:
            process.run(tmp_path / "alice", {}, tests, timeout=60)
    finally:
        process.close()
    assert "No module named 'no_such_module_of_the_grader'" in str(failed.value)
    process = _checks(tmp_path, DIES_ON_A_JOB)
    try:
        verdicts = process.run(tmp_path / "bob", {}, tests, timeout=60)
    finally:
        process.close()
    assert [passed for passed, _ in verdicts] == [False, False]
    assert "crashed while reading these files" in verdicts[0][1]


def test_a_batch_whose_check_process_cannot_start_gives_grader_errors(tmp_path, monkeypatch):
    """Every row a "grader error" (exit code 1 in `course grade`), never "graded" zeros that
    blame the submission (1/12 "graded", exit code 0, before)."""
    from course_tools.grade.routes import batch as grading_batch

    def start_checks(b, base, log_name="checks.log"):
        process = _checks(b.out, NOT_STARTING)
        process.start()
        return process

    monkeypatch.setattr(grading_batch, "start_checks", start_checks)
    notebook = write(notebook_of("x = 1"), tmp_path / "alice.ipynb")
    settings = GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    (grade,) = grading_batch.grade(
        [notebook],
        tmp_path / "grades",
        solution=SOLUTION,
        settings=settings,
        limits=runner.Limits(cell_timeout=60, timeout=300),
        progress=False,
        sandboxed=False,
    )
    assert grade.status == "grader error" and grade.grader_failed, grade
    assert "could not start" in grade.reason and "no_such_module_of_the_grader" in grade.reason


# --- walks over a folder swapped for a link --------------------------------------------------


def _host_folder(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    (host / "inner").mkdir(parents=True)
    (host / "host-secret").write_text("host")
    (host / "inner" / "host-secret-2").write_text("host")
    return host


@pytest.mark.parametrize("swapped", ["the folder", "its parent"])
def test_a_walk_never_lists_a_folder_swapped_for_a_link(tmp_path, swapped):
    """The swap happens between the walk's lstat of a folder (it is yielded) and its listing,
    deterministically: the old walk listed the host folder through the link."""
    host = _host_folder(tmp_path)
    top = tmp_path / "top"
    (top / "a" / "inner").mkdir(parents=True)
    (top / "a" / "inner" / "own").write_text("own")
    names = []
    for entry in files.walk(top):
        names.append(entry.relative.as_posix())
        if swapped == "the folder" and entry.relative == Path("a"):
            # "a" was seen as a folder: it becomes a link to the host's
            (top / "a").rename(top / "a-moved")
            (top / "a").symlink_to(host)
        if swapped == "its parent" and entry.relative == Path("a/inner"):
            (top / "a").rename(top / "a-moved")
            (top / "a").symlink_to(host)  # host/inner exists: a real folder at that path
    assert not [n for n in names if "host-secret" in n], names
    assert names[0] == "a", names


def test_a_walk_follows_a_link_given_as_its_top_and_no_other(tmp_path):
    """The instructor's link to the submissions is theirs: followed; links inside are not."""
    host = _host_folder(tmp_path)
    (tmp_path / "given").symlink_to(host)
    (host / "inner" / "back").symlink_to(host)
    names = {entry.relative.as_posix(): entry.kind for entry in files.walk(tmp_path / "given")}
    assert names == {
        "host-secret": "a regular file",
        "inner": "a folder",
        "inner/back": "a symbolic link",
        "inner/host-secret-2": "a regular file",
    }


def test_the_file_clock_never_times_a_host_folder_behind_a_link(tmp_path):
    """A kernel replaces its artifacts folder with a link to a host folder holding a folder of
    the clock's name (another submission's work folder, say): the clock sees nothing there."""
    host = tmp_path / "other"
    (host / "05_svhn").mkdir(parents=True)
    (host / "05_svhn" / "their-model.keras").write_text("theirs")
    work = tmp_path / "work"
    (work / "artifacts" / "05_svhn").mkdir(parents=True)
    (work / "artifacts" / "05_svhn" / "mine.json").write_text("{}")
    clock = runner.FileClock(work / "artifacts" / "05_svhn", time.monotonic(), within=work)
    clock.look()
    assert set(clock.times) == {"mine.json"}
    (work / "artifacts").rename(work / "moved")
    (work / "artifacts").symlink_to(host)
    clock.look()
    assert clock.times == {}, clock.times


def test_the_file_clock_stops_without_waiting_for_a_hung_look(tmp_path, monkeypatch):
    release = threading.Event()

    def hung_walk(*args, **kwargs):
        release.wait(60)  # a folder of a hung network file system
        return iter(())

    (tmp_path / "a.txt").write_text("a")
    clock = runner.FileClock(tmp_path, time.monotonic(), interval=0.01)
    clock.look()
    monkeypatch.setattr(runner.FileClock, "STOP_WAIT_S", 0.5)
    monkeypatch.setattr(runner.files, "walk", hung_walk)
    clock.start()
    time.sleep(0.2)  # a look is under way, and hangs
    started = time.monotonic()
    clock.stop()
    waited, times, note = time.monotonic() - started, clock.times, clock.untracked()
    release.set()
    assert waited < 5, waited
    assert set(times) == {"a.txt"}, "the times seen before the hung look are kept"
    assert "did not end within 0.5 s" in note
