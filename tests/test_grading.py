"""`course grade` on submissions made here from the solution by small edits, like real
mistakes, and on hostile ones, all in one batch graded once per test session (module fixture),
two at a time (jobs=2), in the sandbox, 2 simulated devices, quick profile, synthetic data:

- hostile: a process that detaches from its kernel (double fork, new session) and deletes every
  saved model it can find for 15 minutes; a kernel that looks for the other kernels' connection
  files and sends them code; tampering with the installed package, the solution and the grader's
  checks (plus made-up results and "PASSED"); network access and writes outside the work folder;
  a print flood (into the notebook, and into the kernel's own stdout/stderr); an archive bomb and
  symbolic links as artifacts;
- four mistakes in one notebook whose points do not overlap (a reduce_mean loss, global batch =
  per-replica batch, no strategy scope, the advanced part missing), graded beside the hostile
  ones so that the kernel-to-kernel attack has a kernel to find; the untouched
  exercise, a file that is not JSON, and last the completed solution (after every attack above).

The solution must score full marks; after the batch no process a submission started
is alive and nothing outside the grades changed. Memory and cell limits (a cell that ignores
interrupts too), crashes and the artifact limits of `checks` are tested on tiny notebooks and files
directly.

Then the attacks of a security review, one submission each in a second batch (see the comment
above them), and the batch-level promise. Last, red team 4's submissions through `course grade`,
run as a hardened host's root runs it (umask 077, from a copy of the checkout, into a long --out
made 0700 that holds that copy and the data folder): the permission cases ride on that batch
(its pieces are tested directly in tests/test_grading_permissions.py).

Run: pytest tests/test_grading.py  (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import psutil
import pytest
from grading_submissions import (
    BIG_ARTIFACT,
    BOMB,
    CAPTURE,
    CROSS_KERNEL,
    DEAF,
    DEEP,
    DISK_FILL,
    DISPLAY_FLOOD,
    ENV,
    ESCAPE,
    EXERCISE,
    FD_FLOOD,
    FLOOD,
    FORGER,
    H5_EXTERNAL,
    INJECT,
    JSON_BOMB,
    LONG_ARTIFACT,
    RENAMER,
    ROOT,
    SOLUTION,
    SURROGATE,
    SURVIVOR,
    SURVIVOR_LOOP,
    TAMPER,
    TOKEN,
    TREES,
    WALKER,
    WIDGET_FLOOD,
    cheater,
    completed_exercise,
    copy_of_the_course,
    edit,
    fill,
    nested,
    notebook_of,
    restub,
    survivors,
    write,
)
from helpers import require_or_skip

from course_tools import cli, exercise
from course_tools.grade import command as grading
from course_tools.grade.core import (
    checker,
    checks,
    files,
    one_submission,
    plan,
    probe,
    reading,
    report,
    roster,
    submission,
)
from course_tools.grade.core.report import Grade, escape
from course_tools.grade.jail import identity, sandbox
from course_tools.grade.routes import batch as grading_batch
from course_tools.runner import Limits, RunOptions, run_notebook

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandboxed():
    """Grading needs bubblewrap (as `course grade` does by default); skip with the reason."""
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")


@pytest.fixture(scope="module")
def batch(tmp_path_factory, sandboxed):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    done = completed_exercise()
    # A server on the host's loopback: reachable from the host, not from a sandboxed kernel.
    listener = socket.create_server(("127.0.0.1", 0))
    host_port = listener.getsockname()[1]
    survivor = SURVIVOR.replace("CODE", repr(fill(SURVIVOR_LOOP, out)))
    first = {
        "survivor": notebook_of(survivor),
        # four mistakes in one run of the notebook, whose points do not overlap: each costs its
        # own points (a kernel that trains, beside the hostile ones: cross_kernel needs one to find)
        "four_mistakes": restub(
            restub(
                edit(
                    edit(
                        edit(
                            done,
                            "return tf.nn.compute_average_loss("
                            "per_example_loss, global_batch_size=examples)",
                            "return tf.reduce_mean(per_example_loss)",
                        ),
                        "GLOBAL_BATCH = PER_REPLICA_BATCH * strategy.num_replicas_in_sync",
                        "GLOBAL_BATCH = PER_REPLICA_BATCH",
                    ),
                    "with strategy.scope():\n    fit_model = make_model()",
                    "if True:  # forgot `with strategy.scope():`\n    fit_model = make_model()",
                ),
                "latest_fit = max(",
            ),
            "latest_custom = manager.latest_checkpoint",
        ),
        "cross_kernel": notebook_of(CROSS_KERNEL),
        "tampering": notebook_of(fill(TAMPER, out)),
        "escape": notebook_of(fill(ESCAPE, out).replace("HOST_PORT", str(host_port))),
        "flood": notebook_of(FLOOD, FD_FLOOD, "print('after the flood')"),
        "bomb": notebook_of(BOMB),
    }
    paths = [write(notebook, folder / f"{name}.ipynb") for name, notebook in first.items()]
    paths += [
        folder / "untouched.ipynb",
        folder / "invalid_json.ipynb",
        # last: after every attack above, beside the other long run
        write(done, folder / "solution.ipynb"),
    ]
    shutil.copy(EXERCISE, folder / "untouched.ipynb")
    (folder / "invalid_json.ipynb").write_text('{"cells": [')
    solution_before = SOLUTION.read_bytes()
    started = time.monotonic()
    with listener:  # the escape notebook tries to reach it from inside the sandbox
        socket.create_connection(("127.0.0.1", host_port), timeout=3).close()  # it answers here
        grades = grading_batch.grade(
            paths,
            out,
            limits=Limits(cell_timeout=90, timeout=900),
            jobs=2,
            progress=False,
            **_settings(),
        )
    print(
        f"\nGraded {len(paths)} submissions in {time.monotonic() - started:.0f} s (2 at a time); "
        f"solution: {next(g.seconds for g in grades if g.student == 'solution'):.0f} s\n"
        + (out / "gradebook.csv").read_text()
    )
    after = {
        "survivors": survivors(),
        "solution_changed": SOLUTION.read_bytes() != solution_before,
    }
    return {g.student: g for g in grades}, out, after


def _settings() -> dict:
    settings = plan.GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    return {"settings": settings}


def failed(g: Grade) -> dict[str, str]:
    return {r.title: r.message for r in g.results if r.earned < r.points}


def test_the_solution_scores_full_marks(batch):
    grades, out, _ = batch
    student = "solution"
    g = grades[student]
    assert g.status == "graded" and not g.cell_errors, g.cell_errors
    assert failed(g) == {}, failed(g)
    assert g.score == g.max_score == 12
    # Others may edit course_utils.
    assert not [note for note in g.notes if "course_utils/" not in note], g.notes
    report = (out / student / "report.md").read_text()
    assert report.startswith(f"# {escape(student)}: 12 / 12") and "to read" in report, (
        "the written answer is flagged for reading"
    )
    for name in (
        "fit_model.keras",
        "custom_model.keras",
        "single_model.keras",
        "results.json",
        "fit_ckpt/ckpt_3.weights.h5",
        "custom_ckpt/ckpt-3.index",
    ):
        assert (out / student / "artifacts" / name).exists(), (
            f"{name} was not kept for the instructor"
        )


def test_the_untouched_exercise_scores_zero(batch):
    grades, out, _ = batch
    g = grades["untouched"]
    assert (g.status, g.score) == ("unchanged exercise", 0)
    assert "no code and no answer" in (out / "untouched" / "report.md").read_text()


FOUR_MISTAKES = {  # title of each check the four mistakes fail: words its message must hold
    "the custom loop's loss is averaged over the step's examples on every replica": (
        "compute_loss must divide"
    ),
    "train_ds gives every training example once an epoch, shuffled, in global batches": (
        "batch it with GLOBAL_BATCH"
    ),
    "test_ds gives every test example once, in order, in global batches": (
        "batch it with GLOBAL_BATCH"
    ),
    "fit_model was trained under MirroredStrategy": "inside `with strategy.scope():`",
    "the restored fit checkpoint is the last one and its test accuracy is right": (
        "no 'advanced_fit'"
    ),
    "the restored custom-loop checkpoint is the newest and its test accuracy is right": (
        "no 'advanced_custom'"
    ),
}


def test_mistakes_lose_the_points_they_deserve(batch):
    """Four mistakes in one notebook (a per-replica mean loss, the global batch left at the
    per-replica batch, fit_model made outside the strategy's scope, the advanced part missing):
    each costs the points of its own checks, one point each, and no other point."""
    grades, out, _ = batch
    g = grades["four_mistakes"]
    failing = FOUR_MISTAKES
    assert g.status == "graded"
    assert set(failed(g)) == set(failing), failed(g)
    for title, words in failing.items():
        assert words in failed(g)[title], failed(g)[title]
    assert g.score == 12 - len(failing)
    report = (out / "four_mistakes" / "report.md").read_text()
    assert all(escape(title) in report and "FAILED" in report for title in failing)


def test_a_file_that_is_not_a_notebook_gets_a_report_and_zero(batch):
    grades, out, _ = batch
    g = grades["invalid_json"]
    assert (g.status, g.score) == ("invalid notebook", 0)
    assert "cannot be read as a notebook" in (out / "invalid_json" / "report.md").read_text()


def test_the_gradebook_has_one_row_per_submission(batch):
    grades, out, _ = batch
    with open(out / "gradebook.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(grades)
    for student, g in grades.items():
        row = rows[student]
        assert (
            float(row["score"]) == g.score
            and row["max_score"] == "12"
            and row["status"] == g.status
        )
        assert sum(float(row[q]) for q in ("q1", "q2", "q3", "q4", "q5", "q6")) == g.score
        assert (out / row["report"]).exists()
        assert row["to_read"] == ("q5" if float(row["q5"]) else ""), row  # q5 is a written answer
    assert rows["four_mistakes"]["to_read"] == "q5"


# --- hostile submissions --------------------------------------------------------------------------


def _printed(out: Path, student: str, prefix: str) -> dict:
    """The JSON a hostile notebook printed after `prefix` in its executed copy."""
    notebook = nbformat.read(out / student / "executed.ipynb", as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for line in output.get("text", "").splitlines():
                if line.startswith(prefix + " "):
                    return json.loads(line[len(prefix) + 1 :])
    raise AssertionError(f"{student} printed no {prefix} line")


def test_no_process_a_submission_started_outlives_the_batch(batch):
    grades, out, after = batch
    assert "survivor started" in (out / "survivor" / "executed.ipynb").read_text()
    assert after["survivors"] == [], "the detached process died with its kernel"
    assert survivors() == []


def test_kernels_cannot_reach_each_other(batch):
    grades, out, _ = batch
    seen = _printed(out, "cross_kernel", "CROSS")
    assert seen == {"found": [], "attacked": []}, seen


def test_the_course_and_the_solution_cannot_be_changed(batch):
    grades, out, after = batch
    attempts = _printed(out, "tampering", "TAMPER")
    assert "written" not in attempts.values() and len(attempts) == 4, attempts
    assert not after["solution_changed"]
    for path in [*ROOT.glob("course_utils/**/*.py"), *ROOT.glob("solutions/*.ipynb")]:
        assert TOKEN not in path.read_text(), f"{path} was changed by a submission"
    g = grades["tampering"]
    assert g.score == 0, {r.title: r.message for r in g.results if r.earned}
    assert not [note for note in g.notes if "changed while" in note], g.notes


def test_no_network_and_no_writes_outside_the_work_folder(batch):
    grades, out, _ = batch
    report = _printed(out, "escape", "ESCAPE")
    assert (report["dns"], report["ip"], report["host"]) == ("blocked",) * 3, report
    for folder in (Path.home(), out, ROOT, Path("/tmp"), Path("/var/tmp")):
        assert not (folder / TOKEN).exists(), f"a submission wrote into {folder}"
    # read-only, or not in the sandbox at all. A checkout under /tmp is the exception: the
    # sandbox's /tmp is its own (in memory, gone with it), so the path is a folder of that, and
    # the host's checkout stays out of reach (checked on the host just above).
    if not ROOT.is_relative_to("/tmp"):
        assert report[str(ROOT)] != "written", report
    assert report["/var/tmp"] != "written", report


def test_a_print_flood_costs_only_its_cell(batch):
    grades, out, _ = batch
    g = grades["flood"]
    assert g.status == "graded", g.reason
    assert any("outputs cut in cell [1]" in note for note in g.notes), g.notes
    executed = (out / "flood" / "executed.ipynb").read_text()
    assert "after the flood" in executed, "the next cell still ran"
    # cut by the output caps, or refused whole at the transport (a flush past `message_kb`)
    assert "bytes of output dropped" in executed or "accepted was refused" in executed
    assert len(executed) < 2 * 2**20
    assert any(note.startswith("kernel.log cut: ") for note in g.notes), g.notes
    assert (out / "flood" / "kernel.log").stat().st_size < 2 * 2**20


def test_an_archive_bomb_and_links_fail_their_own_checks(batch):
    grades, out, _ = batch
    g = grades["bomb"]
    assert g.score == 0
    messages = " ".join(failed(g).values())
    assert "fit_model.keras unpacks to 2 files and 300 MB" in messages, messages
    assert "artifact custom_model.keras is a symbolic link: ignored" in g.notes, g.notes
    assert "artifact everything is a symbolic link: ignored" in g.notes, g.notes


def test_a_cell_that_ignores_interrupts_gets_the_kernel_killed(tmp_path, sandboxed):
    # Its own batch with a short cell limit: in the main batch it would hold a job slot for the
    # whole 90 s limit the solution's cells need.
    deaf = write(notebook_of(DEAF, "print('never')"), tmp_path / "deaf.ipynb")
    (g,) = grading_batch.grade(
        [deaf],
        tmp_path / "grades",
        limits=Limits(cell_timeout=3, timeout=120),
        progress=False,
        **_settings(),
    )
    assert g.status == "killed", (g.status, g.reason)
    assert "cell [1] ignored the interrupt" in g.reason
    assert "ignored the interrupt" in (tmp_path / "grades" / "deaf" / "report.md").read_text()
    assert g.run_seconds < 60, "it did not wait for the notebook limit"


# --- limits on tiny notebooks, and the checks' artifact limits ---------------------------------


def _outputs(outcome) -> str:
    return "".join(o.get("text", "") for c in outcome.notebook.cells for o in c.get("outputs", []))


def test_memory_limit_kills_the_kernel_and_its_children(tmp_path, sandboxed):
    notebook = notebook_of(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {TOKEN}'])",
        "hog = []\nwhile True:\n    hog.append(bytearray(20 * 2**20))",
        "print('never')",
    )
    outcome, _, _ = submission.run(
        notebook,
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120, memory_mb=400)),
    )
    assert outcome.status == "killed" and "memory limit" in outcome.reason
    assert survivors() == [], "the process the kernel started is gone"


def test_an_interrupted_cell_lets_the_next_cells_run_and_a_crash_is_reported(tmp_path, sandboxed):
    loop = notebook_of("while True:\n    pass", "print('next cell ran')")
    outcome, _, _ = submission.run(
        loop, tmp_path / "loop", {**os.environ, **ENV}, submission.RunSetup(Limits(3, 60))
    )
    assert outcome.status == "ran" and outcome.timed_out_cells == [0]
    assert "next cell ran" in _outputs(outcome)
    assert any("KeyboardInterrupt" in error for error in outcome.cell_errors)
    crash = notebook_of("import os\nos.kill(os.getpid(), 9)", "print('never')")
    outcome, _, _ = submission.run(
        crash, tmp_path / "crash", {**os.environ, **ENV}, submission.RunSetup(Limits(30, 60))
    )
    assert outcome.status == "kernel died" and "kernel died" in outcome.reason


def test_checks_refuse_links_bombs_and_big_files(tmp_path):
    real = tmp_path / "model.keras"
    with zipfile.ZipFile(real, "w") as archive:
        archive.writestr("config.json", "{}")
    assert checks.safe_file(real) == real
    (tmp_path / "link.keras").symlink_to(real)
    (tmp_path / "linked").symlink_to(tmp_path)
    for path in (tmp_path / "link.keras", tmp_path / "linked" / "model.keras"):
        with pytest.raises(checks.CheckError, match="symbolic link"):
            checks.safe_file(path)
    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("weights", "w", force_zip64=True) as member:
            for _ in range(checks.MAX_UNZIPPED_MB + 1):
                member.write(bytes(2**20))
    assert bomb.stat().st_size < 2**20
    with pytest.raises(checks.CheckError, match=r"unpacks to 1 files and \d+ MB, more than"):
        checks.safe_file(bomb)
    big = tmp_path / "results.json"
    big.write_text(" " * (checks.MAX_RESULTS_KB + 1) * 1024)
    with pytest.raises(checks.CheckError, match="more than the"):
        checks.load_results(tmp_path)


def test_without_the_sandbox_a_changed_solution_is_reported_and_both_versions_kept(tmp_path):
    """Unsandboxed, the grader cannot tell a submission's write from the instructor's own edit
    during the batch: it must overwrite neither, say so, and keep the version it graded with."""
    solution = shutil.copy(SOLUTION, tmp_path / "solution.ipynb")
    start = Path(solution).read_bytes()
    writer = notebook_of(f"open({str(solution)!r}, 'a').write('{TOKEN}')")
    grades = grading_batch.grade(
        [write(writer, tmp_path / "writer.ipynb")],
        tmp_path / "grades",
        solution=solution,
        limits=Limits(cell_timeout=60, timeout=300),
        progress=False,
        sandboxed=False,
        **_settings(),
    )
    assert Path(solution).read_bytes() == start + TOKEN.encode(), "the change was not undone"
    kept = tmp_path / "grades" / "solution.at-batch-start.ipynb"
    assert kept.read_bytes() == start
    (note,) = [note for note in grades[0].notes if "changed while" in note]
    assert "solution.ipynb changed while this submission ran" in note and str(kept) in note
    assert grades[0].score == 0 and grades[0].max_score > 0


def test_real_data_is_prepared_once_before_the_batch(monkeypatch):
    """Online but not yet on disk: the sandboxed kernels have no network, so the grader itself
    prepares the dataset first; offline, "auto" means the stand-in for the whole batch."""
    from course_utils import data

    prepared = []

    class Builder:
        data_dir = "/nowhere"

        def download_and_prepare(self):
            prepared.append(True)

    monkeypatch.setattr(data, "real_data_status", lambda name: (True, "reachable"))
    monkeypatch.setattr(data, "is_prepared", lambda name: bool(prepared))
    monkeypatch.setattr(data, "tfds_builder", lambda name: Builder())
    assert plan.batch_data("auto") == "tfds" and prepared == [True]
    assert plan.batch_data("tfds") == "tfds" and prepared == [True]  # once
    monkeypatch.setattr(data, "real_data_status", lambda name: (False, "offline"))
    assert plan.batch_data("auto") == "synthetic"
    assert plan.batch_data("synthetic") == "synthetic"
    prepared.clear()
    with pytest.raises(data.DataUnavailableError, match="COURSE_DATA=tfds needs the real"):
        plan.batch_data("tfds")


def test_the_default_jobs_fit_the_cores_the_devices_and_the_memory(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    free = type("Memory", (), {"available": 10 * 2**30})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: free)
    assert grading.default_jobs(devices=2, memory_mb=4096)[0] == 2  # memory: 10 GiB / 4 GiB
    assert grading.default_jobs(devices=3, memory_mb=1024)[0] == 2  # cores: 8 / 3
    jobs, why = grading.default_jobs(devices=16, memory_mb=1024)
    assert jobs == 1 and why.endswith(
        "= 10; one at a time all the same, slower than a submission asks for"
    )
    missing = str(tmp_path / "missing.ipynb")
    grades = tmp_path / "grades"
    assert cli.main(["grade", missing, f"--out={grades}", "--devices=2", "--memory-mb=1024"]) == 2
    assert not grades.exists(), "nothing is written for bad input"
    out, err = capsys.readouterr()
    assert "--jobs 4 (8 cores / 2 devices per submission = 4; 10,240 MB free" in out
    assert "missing.ipynb does not exist" in err
    # macOS has no sched_getaffinity: every core counts
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert grading.default_jobs(devices=2, memory_mb=1024) == (
        3,
        "6 cores / 2 devices per submission = 3; 10,240 MB free / 1,024 MB per notebook = 10",
    )


def test_student_names_come_from_where_the_instructor_put_the_submissions(tmp_path):
    """A notebook given by itself or lying in the given folder is named by its file; anything
    deeper by its folder under the given one, whatever the student called the file. A folder with
    several notebooks is one submission (graded as "several notebooks"); a name taken twice, or
    one of the grades' own files, is an error for the instructor, never a silent "-2"."""
    for name in ["..ipynb", "x.ipynb.ipynb", "carol.ipynb", "alice/bob.ipynb"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    for name in ["bob/05_svhn_exercise.ipynb", "dan/a.ipynb", "dan/deep/b.ipynb"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    given = [tmp_path, tmp_path / "carol.ipynb", tmp_path / "alice" / ".." / "carol.ipynb"]
    found = roster.collect_submissions(given)
    by_name = {s.student: s.path.relative_to(tmp_path).as_posix() for s in found}
    assert by_name == {
        "submission": "..ipynb",
        "x": "x.ipynb.ipynb",
        "carol": "carol.ipynb",
        "alice": "alice/bob.ipynb",
        "bob": "bob/05_svhn_exercise.ipynb",
        "dan": "dan",
    }
    assert roster.several_notebooks(tmp_path / "dan") == [
        tmp_path / "dan" / "a.ipynb",
        tmp_path / "dan" / "deep" / "b.ipynb",
    ]
    (tmp_path / "carol").mkdir()
    (tmp_path / "carol" / "mine.ipynb").write_text("{}")
    with pytest.raises(ValueError, match="are both the submission of 'carol'"):
        roster.collect_submissions([tmp_path])
    (tmp_path / "carol" / "mine.ipynb").unlink()
    (tmp_path / "carol").rmdir()
    (tmp_path / "gradebook.csv").mkdir()
    (tmp_path / "gradebook.csv" / "x.ipynb").write_text("{}")
    with pytest.raises(ValueError, match="a file of the grades folder"):
        roster.collect_submissions([tmp_path])


def test_course_grade_refuses_one_device_and_a_name_clash_with_exit_2(tmp_path, capsys):
    """One replica cannot tell a per-replica mean loss from the right one: `course grade` says so
    (exit 2) instead of giving that mistake its point; a name clash is bad input too."""
    notebook = write(notebook_of("1"), tmp_path / "a.ipynb")
    out = tmp_path / "grades"
    assert cli.main(["grade", str(notebook), f"--out={out}", "--devices=1", "--jobs=1"]) == 2
    assert "graded on at least 2 simulated devices" in capsys.readouterr().err
    (tmp_path / "a").mkdir()
    write(notebook_of("1"), tmp_path / "a" / "mine.ipynb")
    assert cli.main(["grade", str(tmp_path), f"--out={out}", "--jobs=1"]) == 2
    assert "are both the submission of 'a'" in capsys.readouterr().err


def _batch_without_checks(tmp_path, monkeypatch) -> plan.Batch:
    """A batch writing into tmp_path/out whose check process is a stand-in that does nothing."""
    b = plan.Batch(
        tmp_path / "out", SOLUTION, SOLUTION.read_bytes(), _settings()["settings"], Limits()
    )
    b.out.mkdir()
    monkeypatch.setattr(
        grading_batch,
        "start_checks",
        lambda b, base: type("C", (), {"close": lambda self: None, "stop": lambda self: None})(),
    )
    return b


def test_one_submission_failing_to_save_is_its_own_grader_error(tmp_path, monkeypatch):
    """The batch-level promise: whatever happens while one submission is graded, saved or
    reported (here its report cannot be written), every other submission is graded and the
    gradebook and its exports are written."""
    real = report.write_report

    def failing(g, path):
        if g.student == "b" and g.status != "grader error":
            raise OSError("cannot write here")
        real(g, path)

    monkeypatch.setattr(report, "write_report", failing)
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in "abc":
        (folder / f"{name}.ipynb").write_text('{"cells": [')
    b = _batch_without_checks(tmp_path, monkeypatch)
    grades = grading_batch.grade_batch(b, [folder], 2, progress=False, regrade=True)
    statuses = {g.student: g.status for g in grades}
    assert statuses == {"a": "invalid notebook", "b": "grader error", "c": "invalid notebook"}
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert all(s in (b.out / name).read_text() for s in "abc"), name


def test_artifacts_whose_names_drive_a_terminal_are_not_copied(tmp_path):
    """Red team 10b's names (a newline and a fake grade, an escape that clears the screen and sets
    the title) reach no folder the instructor lists; an ordinary name beside them is copied."""
    source = tmp_path / "work" / "artifacts"
    (source / "ok").mkdir(parents=True)
    (source / "ok" / "model.keras").write_text("weights")
    (source / "evil\n| 12 | 12 |\x1b[2J\x1b]0;pwn\x07").write_text("x")
    (source / "dir\x1b[2J").mkdir()
    (source / "dir\x1b[2J" / "inner.txt").write_text("x")
    target = tmp_path / "copied"
    notes = one_submission.copy_artifacts(source, target, within=tmp_path / "work")
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        "ok",
        "ok/model.keras",
    ]
    assert len(notes) == 2 and all("control character in its name: ignored" in n for n in notes)
    assert all("\x1b" not in n for n in notes), notes  # the note shows the name escaped


def test_artifacts_are_copied_without_following_symbolic_links(tmp_path):
    """A submission's artifacts are copied out on the host: a link (the artifacts folder itself,
    or inside it) must never bring the grader's own files along."""
    host = tmp_path / "host"
    (host / "secrets").mkdir(parents=True)
    (host / "secret.txt").write_text("the grader's")
    (host / "secrets" / "key").write_text("the grader's")
    work = tmp_path / "work"
    (work / "artifacts").mkdir(parents=True)
    (work / "artifacts" / "05_svhn").symlink_to(host)
    target = tmp_path / "copied"
    source = work / "artifacts" / "05_svhn"
    notes = one_submission.copy_artifacts(source, target, within=work)
    assert notes == ["artifact folder artifacts/05_svhn is a symbolic link: ignored"]
    assert not target.exists()
    source.unlink()
    (work / "artifacts").rename(work / "real")
    (work / "artifacts").symlink_to(work / "real")  # a linked folder higher up
    assert (
        "artifact folder artifacts is a symbolic link"
        in one_submission.copy_artifacts(source, target, within=work)[0]
    )
    (work / "artifacts").unlink()
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "model.keras").write_text("weights")
    (source / "sub" / "file").symlink_to(host / "secret.txt")
    (source / "folder").symlink_to(host / "secrets")
    notes = one_submission.copy_artifacts(source, target, within=work)
    assert sorted(notes) == [
        "artifact folder is a symbolic link: ignored",
        "artifact sub/file is a symbolic link: ignored",
    ]
    copied = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    assert copied == ["sub", "sub/model.keras"]


def test_the_sandbox_in_memory_folders_are_capped(tmp_path, sandboxed, monkeypatch):
    """/tmp, /dev/shm, /dev and the folders covering hidden ones live in memory, which the memory
    limit (resident memory) does not count: each one takes only what its cap allows."""
    monkeypatch.setattr(sandbox, "TMP_MB", 4)
    monkeypatch.setattr(sandbox, "SHM_MB", 2)
    hidden = tmp_path / "grades"
    hidden.mkdir()
    script = (
        "for f in /tmp/x /dev/shm/x /dev/x HIDDEN/x; do "
        'head -c 8388608 /dev/zero > "$f" 2>/dev/null; echo "$f $(stat -c %s "$f" 2>/dev/null)"; '
        "done"
    ).replace("HIDDEN", str(hidden))
    argv = sandbox.wrap(["sh", "-c", script], hidden=[hidden])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    sizes = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    caps = {"/tmp/x": 4, "/dev/shm/x": sandbox.SHM_MB}
    for path, cap in caps.items():
        written = int(sizes[path] or 0)
        assert 0 < written <= cap * 2**20, (path, written)
    assert sizes["/dev/x"] == "", "/dev is read-only"
    assert sizes[str(hidden / "x")] == "", "the hidden folder is not in the sandbox at all"
    assert not (hidden / "x").exists()


def test_the_kernel_log_is_capped_and_the_report_says_so(tmp_path, monkeypatch):
    """A cell writing to file descriptors 1 and 2 bypasses the output caps: only the first
    KERNEL_LOG_KB of the kernel's own output reach kernel.log, with a line saying what was cut."""
    from course_tools import runner

    flood = notebook_of(
        FD_FLOOD,
        "print('next cell ran')",
    )
    log = tmp_path / "kernel.log"
    options = runner.RunOptions(log_path=log)
    outcome = runner.run_notebook(flood, tmp_path, {**os.environ, **ENV}, options)
    assert outcome.status == "ran" and "next cell ran" in _outputs(outcome)
    cap = runner.KERNEL_LOG_KB * 1024
    assert outcome.log_dropped >= 20_000_000 - cap
    text = log.read_text()
    assert len(text) < cap + 200 and f"{outcome.log_dropped:,} more bytes left out" in text


def test_the_course_solutions_build_and_git_history_are_hidden(sandboxed):
    """The course checkout is readable in the sandbox (it holds the package), but not the parts
    that hold the solution and grades: solutions/, build/ and the git history."""
    build = ROOT / "build"
    made = not build.exists()
    build.mkdir(exist_ok=True)
    planted = build / f"{TOKEN}.txt"
    planted.write_text("another student's grade")
    try:
        private = sandbox.course_private()
        assert {ROOT / "solutions", build, ROOT / ".git"} <= set(private)
        script = "; ".join(
            f'echo "{p}: $(ls -A {p} 2>&1 | wc -l) $(cat {p} 2>/dev/null | wc -c)"' for p in private
        )
        script += f"; git -C {ROOT} log -1 >/dev/null 2>&1; echo git: $?"
        proc = subprocess.run(sandbox.wrap(["sh", "-c", script]), capture_output=True, text=True)
        seen = dict(line.rsplit(": ", 1) for line in proc.stdout.splitlines())
        for path in private:
            # a folder lists nothing, a file (a worktree's .git) reads empty
            assert seen[str(path)] in ("0 0", "1 0"), (path, seen[str(path)])
        assert seen["git"] != "0", "git cannot read the history"
        assert planted.exists() and len(list(build.iterdir())) >= 1
    finally:
        planted.unlink()
        if made:
            build.rmdir()


def test_the_probe_ignores_a_probe_the_notebook_replaced(tmp_path, sandboxed):
    """The probe reloads itself from the read-only course: a notebook that replaces
    `probe.collect` in its kernel does not choose the facts (taking over IPython, TensorFlow or
    Python itself still could: course_tools/README.md says so)."""
    tamper = TAMPER[TAMPER.index("import course_tools.grade.core.checks") :].split("artifacts =")[0]
    tamper += "import course_tools.grade.core.probe as p\np.collect = checks.probe\n"
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    outcome, facts, error = submission.run(
        notebook_of(
            tamper, "import course_tools.grade.core.probe as c\nprint(c.collect(1)['models'])"
        ),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120), probe_source=probe),
    )
    assert "'replicas': 2, 'fingerprint': 'forged'" in _outputs(outcome), "the patch was made"
    assert error == "" and facts["models"]["fit_model"] is None, facts


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_ctrl_c_or_an_error_stops_the_batch_and_its_running_kernels(tmp_path, monkeypatch, error):
    """Grading stops at Ctrl-C or an error of the grader's own (`grade_one` turns anything a
    submission does into that submission's grade): queued submissions never start, the running
    ones are told to stop (their kernels are killed through `cancel`), and it raises."""
    from course_tools import processes

    started, cancelled = [], []

    class Checks:
        def close(self):
            pass

        def stop(self):
            pass

    def fake_grade_one(b, submission, where):
        started.append(submission.student)
        if submission.student == "a":
            raise error("disk full")  # Ctrl-C, or a bug of the grader's own outside a submission
        cancelled.append(where.cancel.wait(30))
        raise one_submission.Cancelled("stopped")

    monkeypatch.setattr(grading_batch, "start_checks", lambda b, base: Checks())
    monkeypatch.setattr(grading_batch, "grade_one", fake_grade_one)
    b = plan.Batch(tmp_path, SOLUTION, SOLUTION.read_bytes(), _settings()["settings"], Limits())
    submissions = [roster.Submission(n, tmp_path / f"{n}.ipynb") for n in "abcdef"]
    began = time.monotonic()
    with pytest.raises(error, match="disk full"):
        grading_batch.grade_here(b, submissions, jobs=2, progress=False)
    assert time.monotonic() - began < 20
    # a's worker may take c before the error: nothing later starts, every one running is stopped
    assert {"a", "b"} <= set(started) <= {"a", "b", "c"}, started
    assert cancelled == [True] * (len(started) - 1), cancelled
    # what `cancel` does to a running kernel: its watchdog kills the process tree
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stop = threading.Event()
    with processes.Watchdog(child.pid, 10**6, 60, cancel=stop) as dog:
        stop.set()
        assert child.wait(timeout=10) == -9
    assert dog.reason.startswith("cancelled")


def _saved(b, student: str, status: str, path: Path) -> None:
    g = Grade(student, path, status, max_score=12)
    g.key = b.key(path)
    report.save(g, b.out / student)


def test_grader_failures_are_graded_again_and_make_the_exit_status_1(tmp_path, monkeypatch, capsys):
    """A grader-side failure is no final grade: a re-run tries it again, and `course grade` says
    so with exit status 1 (after writing the gradebook); a low score is not a failure."""
    b = plan.Batch(
        tmp_path / "out", SOLUTION, SOLUTION.read_bytes(), plan.GradingSettings(), Limits()
    )
    submissions = []
    for name, status in [
        ("ok", "graded"),
        ("crashed", "kernel died"),
        ("bug", "grader error"),
        ("slurm", "task failed"),
    ]:
        path = write(notebook_of(name), tmp_path / f"{name}.ipynb")
        submissions.append(roster.Submission(name, path))
        _saved(b, name, status, path)
    todo = plan.to_grade(b, submissions, regrade=False)
    assert [s.student for s in todo] == ["bug", "slurm"]

    bug = {"status": ""}

    def fake_grade(args, b, jobs, slurm):
        statuses = {"ok": "graded", "bug": bug["status"]}
        return [Grade(name, Path(name), status, max_score=12) for name, status in statuses.items()]

    monkeypatch.setattr(grading, "_prepare", lambda args, out, sandboxed: None)
    monkeypatch.setattr(grading, "_grade", fake_grade)
    argv = ["grade", str(tmp_path / "ok.ipynb"), "--jobs=1"]
    for status, code in [("grader error", 1), ("could not start", 1), ("kernel died", 0)]:
        bug["status"] = status
        assert cli.main(argv) == code, status
        captured = capsys.readouterr()
        err = captured.err
        assert ("grader failed on 1 submission(s) (bug)" in err) == (code == 1), err
        assert "course grade: grading here, sandboxed (bubblewrap)" in captured.out
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    assert "Exit status: 0 when every submission got a grade" in capsys.readouterr().out


def test_the_benchmark_grades_under_the_out_folder(tmp_path, monkeypatch, capsys):
    """Compute nodes share the grades folder, not the login node's /tmp: each route's grades go
    under --out/.benchmark/, removed afterwards."""
    outs = []

    def fake_grade(args, b, jobs, slurm):
        outs.append(b.out)
        (b.out / "gradebook.csv").write_text("student,score\n")
        return [Grade("a", Path("a.ipynb"), "graded", max_score=12)]

    monkeypatch.setattr(
        grading,
        "_prepare",
        lambda args, out, sandboxed: plan.Batch(
            Path(out), SOLUTION, b"", plan.GradingSettings(), Limits()
        ),
    )
    monkeypatch.setattr(grading, "_grade", fake_grade)
    monkeypatch.setattr(grading.slurm_array, "missing", lambda: None)
    notebook = write(notebook_of("1"), tmp_path / "a.ipynb")
    out = tmp_path / "grades"
    argv = ["grade", str(notebook), f"--out={out}", "--benchmark", "--slurm", "--jobs=2"]
    assert cli.main(argv) == 0
    assert len(outs) == 3 and all(o.parent == out / grading.BENCHMARK_FOLDER for o in outs), outs
    assert not (out / grading.BENCHMARK_FOLDER).exists()


# --- the attacks of a security review, graded in one batch --------------------------------------

# The attacks of a security review of `course grade` (local route), one submission each, graded
# in one batch from a folder per student placed where submissions often live (/srv), 2 at a time:
#
# 1. a non-UTF-8 symbolic link and a lone surrogate in results.json (must not abort the batch);
# 2. `alice/bob.ipynb` beside `bob/05_svhn_exercise.ipynb` (a student's file name must not take
#    another student's row);
# 3. full marks without the work (fewer epochs, a custom loop that trains nothing, one model saved
#    three times);
# 4. the probe rewritten by an IPython input transformer (made-up facts);
# 5. update_display past the output caps, a large artifact;
# 6. Markdown and HTML injected into the report and the Moodle feedback;
# 7. an unreadable probe answer (100,000 brackets: RecursionError);
# 8. a walk of the file system for the other submissions;
# 9. a homework.ipynb that is a link to another student's notebook, to the solution, to
#    /etc/shadow or to /dev/zero, or a FIFO (each reported in its own row, nobody else's changed);
# 10. a notebook that answers the probe itself (its own `exec` and `compile`);
# 11. a saved model whose optimizer step count is an HDF5 external dataset (the grader's files);
# 12. 480 MB of widget state (comm messages), which the notebook client would keep;
# 13. trees 1,100 folders deep (in the submission folder, the work folder and the artifacts),
#     1,500 artifact files, a FIFO and a link to /dev/zero among them;
# 14. one 12 MB display message of 3 million dicts (~30 times its size once parsed);
# 15. a tree of 1,900 long paths among the artifacts renamed every 50 ms (new paths to time).
#
# And the batch-level promise: whatever one submission does, every other one is graded, the
# gradebook and its exports are written, and the grader's memory stays bounded.


def _where() -> Path:
    """Where the submissions live: /srv when it can be written (as on a course server)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f"{TOKEN}-", dir="/srv"))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"{TOKEN}-"))


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    where = _where()
    folder = where / "submissions"
    out = tmp_path_factory.mktemp("grades")
    notebooks = {
        "alice/bob.ipynb": notebook_of("print('alice')"),
        "bob/05_svhn_exercise.ipynb": notebook_of("print('bob')"),
        "surrogate/mine.ipynb": notebook_of(SURROGATE, "print('after')"),
        "inject/mine.ipynb": notebook_of(INJECT),
        "display/mine.ipynb": notebook_of(DISPLAY_FLOOD, BIG_ARTIFACT),
        "forger/mine.ipynb": notebook_of(FORGER),
        "deep/mine.ipynb": notebook_of(DEEP),
        "walker/mine.ipynb": notebook_of(fill(WALKER, out)),
        "cheater/05_svhn_exercise.ipynb": cheater(completed_exercise()),
        "capture/mine.ipynb": notebook_of(CAPTURE),
        "h5ext/mine.ipynb": notebook_of(H5_EXTERNAL),
        "widgets/mine.ipynb": notebook_of(WIDGET_FLOOD),
        "trees/mine.ipynb": notebook_of(fill(TREES, out)),
        "jsonbomb/mine.ipynb": notebook_of(JSON_BOMB, "print('after the bomb')"),
        "renamer/mine.ipynb": notebook_of(RENAMER),
        "formatter/mine.ipynb": notebook_of(FORMATTER_FORGER),
    }
    for name, notebook in notebooks.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write(notebook, folder / name)
    (folder / "nbbomb").mkdir()
    (folder / "nbbomb" / "mine.ipynb").write_text(value_bomb(4_000_000))
    nested(folder / "trees" / "deep")
    for name, target in LINKS.items():
        (folder / name).mkdir()
        (folder / name / "homework.ipynb").symlink_to(target)
    (folder / "fifo").mkdir()
    os.mkfifo(folder / "fifo" / "homework.ipynb")
    (where / f"{TOKEN}.txt").write_text("another course's secret")
    settings = plan.GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    memory = MemoryPeak()
    try:
        with memory:
            grades = grading_batch.grade(
                [folder],
                out,
                limits=Limits(cell_timeout=90, timeout=600),
                jobs=2,
                progress=False,
                settings=settings,
            )
        error = None
    except Exception as exc:  # what the batch did before: recorded, every test fails with it
        grades, error = [], f"{type(exc).__name__}: {exc}"
    print(f"\nthe grader's memory grew by {memory.growth_mb:.0f} MB at most during the batch")
    yield {g.student: g for g in grades}, out, error, memory
    files.remove_tree(where)


#: Each a student whose homework.ipynb is a symbolic link to that.
LINKS = {
    "linker": "../bob/05_svhn_exercise.ipynb",
    "copier": str(SOLUTION),
    "shadow": "/etc/shadow",
    "zero": "/dev/zero",
}


class MemoryPeak:
    """In a `with` block, the most this process's resident memory grew above what it was at the
    start (`growth_mb`), sampled every 0.1 s."""

    def __init__(self) -> None:
        self.process, self.growth_mb = psutil.Process(), 0.0
        self.stop = threading.Event()

    def __enter__(self) -> MemoryPeak:
        self.start = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            grown = (self.process.memory_info().rss - self.start) / 2**20
            self.growth_mb = max(self.growth_mb, grown)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _grades(attacks):
    grades, out, error, _ = attacks
    assert error is None, f"the batch stopped: {error}"
    return grades, out


def test_every_submission_is_graded_and_the_exports_are_written(attacks):
    grades, out = _grades(attacks)
    expected = {"alice", "bob", "surrogate", "inject", "display", "forger", "deep", "walker"}
    expected |= {"cheater", "capture", "h5ext", "widgets", "trees", "fifo", *LINKS}
    expected |= {"jsonbomb", "renamer", "nbbomb", "formatter"}
    assert expected == set(grades)
    assert not [g.student for g in grades.values() if g.grader_failed], {
        g.student: g.reason for g in grades.values()
    }
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        text = (out / name).read_text()
        assert all(student in text for student in grades), name
    assert not list(out.rglob("*.tmp")), "no half-written file is left"


def test_a_non_utf8_link_and_a_lone_surrogate_are_reported(attacks):
    grades, out = _grades(attacks)
    g = grades["surrogate"]
    assert g.status == "graded", (g.status, g.reason)
    assert any("symbolic link" in note for note in g.notes), g.notes
    report = (out / "surrogate" / "report.md").read_text(encoding="utf-8")
    assert "\\xff" in report or "\\udcff" in report, "the link's name, escaped"


def test_a_student_name_comes_from_the_folder_not_the_file_name(attacks):
    grades, out = _grades(attacks)
    assert grades["alice"].path.parent.name == "alice"
    assert grades["bob"].path.parent.name == "bob"
    assert "bob-2" not in grades


def test_full_marks_need_the_work(attacks):
    """One epoch of fit and checkpoints of later "epochs" made by nudging the weights, assigning
    the optimizer's step count and setting the files' times; a custom loop that trains nothing
    and a baseline made of fit_model's weights: the points that need that work are lost, each for
    what the grader measures itself (each checkpoint evaluated, optimizer steps), whatever
    results.json and the files' times say."""
    grades, out = _grades(attacks)
    g = grades["cheater"]
    assert g.status == "graded", g.reason
    lost = {r.title: r.message for r in g.results if r.earned < r.points}
    work = {  # each point lost for the work, by either the file it measures or the code it reads
        "one ModelCheckpoint per epoch, the last one holding the final weights": (
            "no lower than",  # the checkpoints, each evaluated
            "writes the optimizer step count",  # the assignment, read in the code
        ),
        "the custom loop ran under MirroredStrategy with a checkpoint per epoch": ("made 0 steps",),
        "a one-device baseline, and verdicts that follow from the runs' own epochs": (
            "0 steps",  # the baseline's optimizer
            "finds no `single_model.fit(train_ds",  # no baseline trained, read in the code
        ),
    }
    for title, reasons in work.items():
        assert any(words in lost.get(title, "") for words in reasons), (title, lost.get(title))
    assert g.score <= 12 - len(work), g.score


def test_models_and_timings_that_are_not_the_runs_own_fail(tmp_path):
    """The checks behind full marks, on files: three models with the same weights, per-epoch
    checkpoints that did not change, timings the checkpoints' times contradict."""
    import json
    import time

    import keras

    def model():
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])

    a = model()
    b = keras.models.clone_model(a)
    b.set_weights(a.get_weights())
    with pytest.raises(checks.CheckError, match="hold the same weights"):
        checks.assert_models_differ({"fit_model": a, "custom_model": b, "single_model": model()})
    for epoch in (1, 2):
        a.save_weights(tmp_path / f"ckpt_{epoch}.weights.h5")
    files = checks.fit_checkpoints(tmp_path)
    with pytest.raises(checks.CheckError, match="made None steps"):
        checks.assert_epochs_trained(files, 2, 5, a, "fit_model")
    runs = [{"run": name, "rounds": [100.0, 110.0 + i]} for i, name in enumerate("abc")]
    (tmp_path / "fit_ckpt").mkdir()
    for epoch in (1, 2, 3):
        (tmp_path / "fit_ckpt" / f"ckpt_{epoch}.weights.h5").write_text("x")
        time.sleep(0.6)
    results = json.loads(json.dumps({"comparison": runs}))
    with pytest.raises(checks.CheckError, match="checkpoints were written"):
        checks.assert_timings_consistent(results, tmp_path, 3, epoch_examples=1000)
    runs[2]["rounds"] = runs[1]["rounds"]
    with pytest.raises(checks.CheckError, match="very same epochs' timings"):
        checks.assert_timings_consistent(results | {"comparison": runs}, tmp_path, 3, 1000)


def test_an_input_transformer_does_not_forge_the_probe(attacks):
    grades, out = _grades(attacks)
    g = grades["forger"]
    earned = {r.title: r.earned for r in g.results if r.earned}
    assert g.score == 0, earned
    assert not [note for note in g.notes if "probe" in note], "the probe ran and found nothing"


def test_update_display_and_artifacts_are_capped(attacks):
    grades, out = _grades(attacks)
    g = grades["display"]
    executed = out / "display" / "executed.ipynb"
    assert executed.stat().st_size < 10 * 2**20, executed.stat().st_size
    assert any("display" in note for note in g.notes), g.notes
    assert not (out / "display" / "artifacts" / "big.bin").exists()
    assert any("big.bin (100.0 MB) not copied" in note for note in g.notes), g.notes


def test_what_a_submission_writes_is_escaped_in_the_report_and_exports(attacks):
    grades, out = _grades(attacks)
    report = (out / "inject" / "report.md").read_text()
    for raw in ("<script", "<img", "<!--", "\n# Full", "\n## Grade"):
        assert raw not in report, raw
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert all(not line.startswith("# ") for line in headings[1:]), headings
    with open(out / "moodle.csv") as handle:
        feedback = {row["Username"]: row["Feedback"] for row in csv.DictReader(handle)}
    assert "<script" not in feedback["inject"] and "<img" not in feedback["inject"]


def test_an_unreadable_probe_answer_is_the_submissions_error(attacks):
    grades, out = _grades(attacks)
    g = grades["deep"]
    assert g.status != "grader error", g.reason
    assert any("probe" in note for note in g.notes), g.notes


def test_other_submissions_and_the_host_are_out_of_sight(attacks):
    grades, out = _grades(attacks)
    executed = nbformat.read(out / "walker" / "executed.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    line = next(line for line in text.splitlines() if line.startswith("WALK "))
    seen = json.loads(line[len("WALK ") :])
    assert not [p for p in seen["found"] if TOKEN in p or "05_svhn" in p], seen["found"]
    assert "srv" not in seen["root"] and "home" not in seen["root"], seen["root"]


def test_the_work_folder_disk_use_is_capped(tmp_path):
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", detail)
    outcome, _, _ = submission.run(
        notebook_of(DISK_FILL, "print('next')"),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120, disk_mb=64)),
    )
    assert outcome.status == "killed" and "disk" in outcome.reason, (outcome.status, outcome.reason)


def test_links_fifos_and_devices_are_reported_in_their_own_row(attacks):
    """A homework.ipynb that is a link (to another student's notebook, the solution, /etc/shadow,
    /dev/zero) or a FIFO: that student's row says so, at 0 points, nothing is read through it,
    and the other student's row is there, graded from their own file."""
    grades, out = _grades(attacks)
    links = [(name, "a symbolic link") for name in LINKS]
    for student, what in [*links, ("fifo", "a FIFO (named pipe)")]:
        g = grades[student]
        assert (g.status, g.score) == ("invalid notebook", 0), (student, g.status, g.reason)
        assert f"homework.ipynb is {what}: only regular files are read" in g.reason, g.reason
        assert escape(f"is {what}") in (out / student / "report.md").read_text()
    assert grades["bob"].status == "graded" and grades["bob"].path.parent.name == "bob"
    exported = "".join((out / name).read_text() for name in ("gradebook.csv", "moodle.csv"))
    exported += "".join((out / s / "report.md").read_text() for s in [*LINKS, "fifo"])
    assert "# YOUR CODE HERE" not in exported and "BEGIN HIDDEN" not in exported
    try:
        shadow = Path("/etc/shadow").read_text().splitlines()[0][:12]
    except (OSError, IndexError):
        shadow = None
    assert not shadow or shadow not in exported, "/etc/shadow was read into the grades"


def test_a_probe_answered_by_the_notebook_earns_nothing(attacks):
    """Its own `exec` and `compile` answer the probe with made-up facts (models "mirrored" that do
    not exist): the points rest on what the grader reads itself, which refuses code that binds or
    runs `exec` (the reading cannot follow it), and the code that binds the probe's names marks the
    kernel's facts untrusted."""
    grades, out = _grades(attacks)
    g = grades["capture"]
    assert g.score == 0, {r.title: r.earned for r in g.results if r.earned}
    mirrored = failed(g)["fit_model was trained under MirroredStrategy"]
    assert "cannot read code run through exec" in mirrored and "cell [1]" in mirrored, mirrored


def test_hdf5_external_storage_in_a_model_is_refused(attacks):
    """A .keras model whose optimizer step count is stored in another file (the grader's check
    log): refused before any of it is read, with a message, instead of those bytes becoming the
    student's step count."""
    grades, out = _grades(attacks)
    g = grades["h5ext"]
    messages = " ".join(failed(g).values())
    assert "keeps its data in other files (external or virtual dataset)" in messages, messages
    assert g.score == 0


def test_widget_state_is_capped_and_the_graders_memory_stays_bounded(attacks):
    """480 MB of widget state (comm messages): counted against the output caps and dropped past
    them, so that neither the executed notebook nor the grader's memory holds it."""
    grades, out = _grades(attacks)
    memory = attacks[3]
    g = grades["widgets"]
    assert g.status == "graded", (g.status, g.reason)
    assert any("widget messages" in note for note in g.notes), g.notes
    assert (out / "widgets" / "executed.ipynb").stat().st_size < 10 * 2**20
    assert memory.growth_mb < 250, f"the grader's memory grew by {memory.growth_mb:.0f} MB"


def test_deep_trees_and_many_files_end_with_the_gradebook(attacks):
    """Folders 1,100 deep in the submission, the work folder and the artifacts, 1,500 artifact
    files, a FIFO and a link to /dev/zero: graded, at most ARTIFACT_FILES files copied, the FIFO
    and the link named in the report and never opened, and the work folder removed."""
    grades, out = _grades(attacks)
    g = grades["trees"]
    assert g.status == "graded", (g.status, g.reason)
    notes = " ".join(g.notes)
    assert f"more than {one_submission.ARTIFACT_FILES} files" in notes, notes
    assert "artifact a-fifo is a FIFO (named pipe): ignored" in notes, notes
    assert "artifact a-zero is a symbolic link: ignored" in notes, notes
    copied = [e for e in files.walk(out / "trees" / "artifacts") if e.kind == "a regular file"]
    assert 0 < len(copied) <= one_submission.ARTIFACT_FILES
    assert not [p for p in Path(tempfile.gettempdir()).glob(f"course-grade-*/trees/{TOKEN}-work")]


def test_a_tree_deeper_than_the_recursion_limit_is_walked_measured_and_removed(tmp_path):
    """The grader's walks and clean-up have no recursion: a 1,100-deep tree (deeper than Python's
    recursion limit) is walked to the depth cap, measured whole and removed, without an error."""
    top = tmp_path / "work"
    nested(top)
    assert len(list(files.walk(top))) == files.MAX_DEPTH
    assert files.disk_bytes(top) >= 1100 * 4096 * 0.5
    os.mkfifo(top / "fifo")
    with pytest.raises(files.UnsafeFile, match="is a FIFO"):
        files.read_regular(top / "fifo", 100)  # at once: it never waits for a writer
    assert files.remove_tree(top) == [] and not top.exists()


def test_a_shell_glob_of_student_folders_grades_each_as_its_student(tmp_path):
    """`course grade submissions/*`: each student folder given by itself is that student, whatever
    the notebook inside is called; a link to another student's notebook is a submission of its
    own (never the other student's)."""
    for student in ("alice", "bob"):
        (tmp_path / student).mkdir()
        write(notebook_of(student), tmp_path / student / "homework.ipynb")
    (tmp_path / "carol").mkdir()
    (tmp_path / "carol" / "homework.ipynb").symlink_to("../bob/homework.ipynb")
    given = sorted(str(p) for p in tmp_path.iterdir())
    found = {s.student: s.path for s in roster.collect_submissions(given)}
    assert found == {name: tmp_path / name / "homework.ipynb" for name in ("alice", "bob", "carol")}
    (alone,) = roster.collect_submissions([tmp_path / "alice"])
    assert alone.student == "alice"
    assert {s.student for s in roster.collect_submissions([tmp_path])} == {"alice", "bob", "carol"}


def test_timings_are_checked_against_the_graders_clock_not_the_files_times(tmp_path):
    """Checkpoints written within a second, their times then set (os.utime) as if each epoch had
    taken 2 s: the files' times agree with the recorded timings, the grader's own clock does not."""
    runs = [{"run": name, "rounds": [500.0 + i, 510.0 + i]} for i, name in enumerate("abc")]
    results = {"comparison": runs}
    seen = {}
    now = time.time()
    for folder, pattern in (("fit_ckpt", "ckpt_{}.weights.h5"), ("custom_ckpt", "ckpt-{}.index")):
        (tmp_path / folder).mkdir()
        for epoch in (1, 2, 3):
            path = tmp_path / folder / pattern.format(epoch)
            path.write_text("x")
            os.utime(path, (now - (3 - epoch) * 2.0,) * 2)
            relative = f"{folder}/{pattern.format(epoch)}"
            seen[relative] = {"seen": 10.0 + epoch * 0.1, "changed": 10.0 + epoch * 0.1, "cell": 5}
    checks.assert_timings_consistent(results, tmp_path, 3, epoch_examples=1000)  # fooled
    with pytest.raises(checks.CheckError, match="checkpoints were written 0.2 s apart"):
        checks.assert_timings_consistent(results, tmp_path, 3, 1000, {"files": seen})


def test_a_patched_builtins_module_makes_the_facts_untrusted_a_variable_named_exec_does_not():
    """The probe looks up no name in the notebook's namespace: a variable or function named
    `exec` or `compile` (or the namespace updated with one) is the notebook's own business,
    while changing the builtins module itself, which the probe's code calls, marks the kernel's
    facts untrusted and every check resting on them fails."""
    for code in (
        "import builtins\nbuiltins.compile = f",
        "__builtins__.exec = f",
        "import builtins as b\nsetattr(b, 'compile', f)",
        "import _frozen_importlib\n_frozen_importlib.__builtins__ = {}",
    ):
        job = {"facts": {"models": {}}, "observed": {"cells": [{"source": code}]}}
        facts = checker._facts(job)
        assert facts["tampered"], code
        with pytest.raises(checks.CheckError, match="changed how its kernel runs code"):
            checks.assert_kernel_trusted(facts)
    for code in (
        "def exec(code, namespace=None):\n    pass",
        "compile = 3",
        "globals().update(compile=f)",
        "model.compile()",
    ):
        assert _untrusted(code) == "", code


#: A notebook that binds every name a probe run in its namespace would look up, in the ways a
#: reading of its code cannot list (red team 6), each to a forger that would add a made-up model
#: to the probe's facts; it also leaves a file behind if any of them is ever called.
REBINDER = """
import builtins, pathlib
real_compile = builtins.compile
FORGED = "\\nFACTS['models']['fit_model'] = {'replicas': 2, 'fingerprint': 'forged'}"

def forger(source, *args, **kwargs):
    pathlib.Path("forger-called").write_text("yes")
    if isinstance(source, str) and "FACTS" in source:
        source = source + FORGED
    return real_compile(source, *args, **kwargs)

def fake_globals():
    pathlib.Path("forger-called").write_text("yes")
    return {"fit_model": "forged"}

globals().update(compile=forger)
globals().setdefault("isinstance", lambda *a: True)
match forger:
    case exec:
        pass
fake_builtins = dict(vars(builtins), compile=forger, exec=lambda *a: None)
globals()["__builtins__"] = fake_builtins
import __main__
__main__.globals = fake_globals
print("bound")
"""


def test_names_the_notebook_binds_do_not_reach_the_probe(tmp_path, sandboxed):
    """`compile`, `exec`, `globals`, `isinstance` and `__builtins__` bound in the notebook's
    namespace (by update, setdefault, a match capture, `__main__`): the probe calls none of them
    (the forger never runs) and answers with what the kernel holds (no `fit_model`)."""
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    outcome, facts, error = submission.run(
        notebook_of(REBINDER),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120), probe_source=probe),
    )
    assert "bound" in _outputs(outcome), _outputs(outcome)
    assert error == "", error
    assert facts["models"]["fit_model"] is None, facts["models"]
    assert not facts.get("tampered"), facts.get("tampered")
    assert not (tmp_path / "forger-called").exists(), "the notebook's forger was called"


def test_a_huge_kernel_message_is_refused_before_it_is_read(attacks):
    """12 MB of JSON that would take ~30 times that once parsed: refused at the transport, said in
    the row; the next cell's output still arrives; the grader's memory stays bounded."""
    grades, out = _grades(attacks)
    memory = attacks[3]
    g = grades["jsonbomb"]
    assert g.status == "graded", (g.status, g.reason)
    assert any("kernel message larger than" in note for note in g.notes), g.notes
    executed = nbformat.read(out / "jsonbomb" / "executed.ipynb", as_version=4)
    assert "after the bomb" in json.dumps(executed.cells[1].outputs)
    assert memory.growth_mb < 400, f"the grader's memory grew by {memory.growth_mb:.0f} MB"


def test_renaming_files_does_not_grow_the_graders_clock(attacks):
    """A tree of long paths renamed every 50 ms: the clock forgets what is gone and does not time
    paths past its length cap, and the row says what it did not time."""
    grades, out = _grades(attacks)
    g = grades["renamer"]
    assert g.status == "graded", (g.status, g.reason)
    assert any("clock of the files" in note and "not timed" in note for note in g.notes), g.notes
    assert attacks[3].growth_mb < 400, attacks[3].growth_mb


def test_an_oversized_reply_stops_the_kernel_and_an_oversized_output_only_its_cell(tmp_path):
    """A user expression's value (the probe's channel) over the accepted message size: the kernel
    is stopped at once, not after the expression's time limit; an output over it loses only the
    rest of its cell."""
    limits = Limits(cell_timeout=60, message_kb=1024)
    notebook = notebook_of("print('ok')")
    options = RunOptions(limits=limits, extra_expressions=("'y' * 3_000_000",))
    started = time.monotonic()
    outcome = run_notebook(notebook, tmp_path, dict(os.environ), options)
    assert time.monotonic() - started < 40
    assert outcome.status == "killed", (outcome.status, outcome.reason)
    assert "reply larger than the 1,024 KB accepted" in outcome.reason

    notebook = notebook_of("print('x' * 3_000_000)", "print('next')")
    outcome = run_notebook(notebook, tmp_path, dict(os.environ), RunOptions(limits=limits))
    assert outcome.status == "ran", (outcome.status, outcome.reason)
    assert any(note.startswith("cell 0: a kernel message") for note in outcome.output_notes)
    assert notebook.cells[1].outputs[0]["text"] == "next\n"
    assert "accepted was refused" in notebook.cells[0].outputs[-1]["text"]


DEEP_MESSAGE = """
kernel = get_ipython().kernel
deep = "[" * 200_000 + "]" * 200_000
content = '{"data": {"text/plain": "x"}, "metadata": ' + deep + ', "transient": {}}'
parent = kernel.get_parent()
kernel.session.send(kernel.iopub_socket, "display_data", content.encode(), parent=parent)
"""


def test_a_message_nested_too_deep_to_read_is_named_as_the_notebooks_doing(tmp_path):
    """Red team 10b's display message nested 200,000 levels deep (400 KB): its run ends, and the
    reason says what the notebook sent instead of a bare RecursionError, which read like the
    grader's own failure."""
    notebook = notebook_of(DEEP_MESSAGE, "print('next')")
    outcome = run_notebook(notebook, tmp_path, dict(os.environ), RunOptions(limits=Limits(60, 120)))
    assert outcome.status == "run failed", (outcome.status, outcome.reason)
    assert "a message nested deeper than Python's JSON reader goes" in outcome.reason


# Red team 3's findings: a notebook of millions of empty JSON values, the probe's answer forged
# through IPython's display formatter, a probe answer that is a huge literal, a sparse artifact.


def value_bomb(count: int) -> str:
    """A valid notebook of one cell whose metadata holds `count` empty dicts (11 MB for 4
    million: parsed, they took the grader past 2 GB)."""
    notebook = notebook_of("print(1)")
    notebook.cells[0].metadata["x"] = "BOMB"
    return nbformat.writes(notebook).replace('"BOMB"', "[" + ",".join(["{}"] * count) + "]")


#: Reads right and does nothing (a null-context "strategy", `shuffle(1)`), then makes IPython show
#: every str that looks like the probe's answer as made-up facts: models mirrored, pipelines
#: shuffled (the red team's run earned 3 points this way).
FORMATTER_FORGER = r"""
import contextlib, json
class FakeStrategy:
    def scope(self):
        return contextlib.nullcontext()
strategy = FakeStrategy()
if False:
    train_ds = train_examples.shuffle(1).batch(GLOBAL_BATCH)
with strategy.scope():
    fit_model = object()
model = {"variables": 2, "distributed_variables": 2, "replicas": 2, "fingerprint": "x"}
FAKE = {"models": {"fit_model": model}, "datasets": {}, "tampered": []}
def _printer(obj, p, cycle):
    p.text(repr(json.dumps(FAKE)) if obj.startswith("{") else repr(obj))
get_ipython().display_formatter.formatters["text/plain"].for_type(str, _printer)
"""


def test_a_notebook_of_millions_of_json_values_gets_its_row_and_the_batch_its_gradebook(attacks):
    """The red team's 11 MB notebook of 4 million `{}`: refused before it is parsed (its row
    says why), the others graded, all three exports written, the grader's memory bounded."""
    grades, out = _grades(attacks)
    g = grades["nbbomb"]
    assert (g.status, g.score) == ("invalid notebook", 0), (g.status, g.reason)
    assert "JSON values, more than the 200,000 the grader reads" in g.reason, g.reason
    assert "JSON values" in (out / "nbbomb" / "report.md").read_text()
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert "nbbomb" in (out / name).read_text(), name
    assert attacks[3].growth_mb < 250, f"the grader's memory grew by {attacks[3].growth_mb:.0f} MB"


def test_json_values_are_counted_before_parsing_with_a_margin_over_real_notebooks(tmp_path):
    """The count is an upper bound however the JSON is laid out (strings with brackets, commas
    and escaped quotes inside count as one value), the course's notebooks are far below the cap,
    and refusing the bomb costs the grader next to nothing."""
    import tracemalloc

    from course_tools.grade.core import notebooks

    tricky = json.dumps({"a": ['x",[{', "\\", 1, None, {"b": []}], "c": "]},"})
    assert notebooks.count_values(tricky) >= 9
    for path in (SOLUTION, EXERCISE):
        found = notebooks.count_values(path.read_text())
        assert 0 < found * 100 < notebooks.MAX_VALUES, (path.name, found)
    bomb = tmp_path / "bomb.ipynb"
    bomb.write_text(value_bomb(4_000_000))
    g = Grade("bomb", bomb, status="graded")
    parts = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4))
    tracemalloc.start()
    assert one_submission._read_notebook(g, parts) is None
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert g.status == "invalid notebook" and "JSON values" in g.reason, g.reason
    assert peak < 100, f"refusing an 11 MB notebook took {peak:.0f} MB (parsing it: over 2 GB)"
    small = tmp_path / "small.ipynb"
    small.write_text(value_bomb(1000))
    assert one_submission._read_notebook(Grade("s", small, status="graded"), parts) is not None


@pytest.mark.parametrize(
    ("cell", "field", "value"), [(1, "source", 5), (0, "source", {"x": 1}), (0, "outputs", {})]
)
def test_a_notebook_breaking_the_schema_is_an_invalid_notebook_not_a_grader_error(
    tmp_path, cell, field, value
):
    """A markdown cell whose source is a number, a code cell whose source or outputs are a
    dictionary: nbformat only logs these, and the grader then failed on them ("grader
    error" on every run, exit 1). They are the submission's final "invalid notebook", saying
    where; keys the format does not name (an editor's own) are no error."""
    from course_tools.grade.core import notebooks

    notebook = notebook_of("x = 1")
    notebook.cells.insert(1, nbformat.v4.new_markdown_cell("# notes"))
    notebook.cells[0]["colab"] = {"base_uri": "https://localhost/"}  # an editor's own key
    path = write(notebook, tmp_path / "fine.ipynb")
    assert notebooks.parse(path.read_text()).cells[1].source == "# notes"
    data = json.loads(path.read_text())
    data["cells"][cell][field] = value
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps(data))
    parts = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4))
    g = Grade("bad", path, status="graded")
    assert one_submission._read_notebook(g, parts) is None
    assert g.status == "invalid notebook" and not g.grader_failed, g.status
    assert f"breaks the notebook format (nbformat 4) at cells/{cell}" in g.reason, g.reason
    for good in (SOLUTION, EXERCISE):
        notebooks.parse(good.read_text())


def test_an_error_while_a_submission_is_read_or_keyed_still_ends_with_the_gradebook(
    tmp_path, monkeypatch
):
    """The batch-level promise when reading one submission raises anything (a MemoryError while
    it is parsed, an error while its grade's key is computed, even in the grader-error path):
    its own row says so, the others are graded, and all three exports are written."""
    from course_tools.grade.core import notebooks

    real_parse, real_key = notebooks.parse, plan.Batch.key

    def parse(text, *args, **kwargs):
        if "student a" in text:
            raise MemoryError("parsing it")
        return real_parse(text, *args, **kwargs)

    def key(self, path):
        if Path(path).stem == "b":
            raise RuntimeError("cannot hash it")
        return real_key(self, path)

    monkeypatch.setattr(notebooks, "parse", parse)
    monkeypatch.setattr(plan.Batch, "key", key)
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in "abc":
        write(notebook_of(f"# student {name}"), folder / f"{name}.ipynb")
    b = _batch_without_checks(tmp_path, monkeypatch)
    monkeypatch.setattr(one_submission, "_same_code", lambda a, b: True)  # no kernel: unchanged
    grades = grading_batch.grade_batch(b, [folder], 2, progress=False, regrade=True)
    statuses = {g.student: g.status for g in grades}
    unchanged = "unchanged exercise"
    assert statuses == {"a": "invalid notebook", "b": unchanged, "c": unchanged}, statuses
    assert "MemoryError" in grades[0].reason
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert all(s in (b.out / name).read_text() for s in "abc"), name


def _answered(text: str):
    """A run whose probe answered `text`."""
    return type("Outcome", (), {"extra_error": "", "extra_output": text})()


def test_a_probe_answer_that_is_not_one_string_literal_is_refused_before_it_is_parsed():
    """The probe's answer is a str's repr; any other text (a 1 MB list of 333,000 dicts, which
    `ast.literal_eval` turned into 500 MB) is refused by its shape, at no cost."""
    import tracemalloc

    value = {"models": {}, "note": 'it\'s \\ "quoted"'}
    assert submission.read_facts(_answered(repr(json.dumps(value)))) == (value, "")
    triple = "'" * 3 + "{}" + "'" * 3
    for text in ("[" + "{}," * 333_000 + "]", "'{}' '{}'", "b'{}'", triple, "{'a': 1}"):
        tracemalloc.start()
        facts, why = submission.read_facts(_answered(text))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert facts == {} and why.startswith("unreadable facts: not a string"), (text[:20], why)
        assert peak < 2**20, f"{peak / 2**20:.0f} MB to refuse {text[:20]!r}"


def test_code_that_reaches_ipythons_shell_makes_the_facts_untrusted():
    """The notebook's code, read as code: the display formatter and its printers, the
    displayhook, the shell's expressions, IPython's own modules, also in code the kernel runs
    from a string (a `%%writefile` file, exec's string, a `%config` value), and `%run`, mark
    the facts untrusted; the transformer's calls for `%pip` and `!ls`, and IPython.display, do
    not."""
    for code in (
        'get_ipython().display_formatter.formatters["text/plain"].for_type(str, f)',
        "ip = get_ipython()",
        "shell = globals()['get_ipython']()",
        "from IPython.core import formatters\nformatters.PlainTextFormatter.__call__ = f",
        "from IPython.lib import pretty\npretty._type_pprinters[str] = f",
        "import sys\nsys.displayhook = f",
        "%config PlainTextFormatter.pprint = False",
        "%%writefile evil.py\nget_ipython().events.register('post_execute', f)",
        "exec('import IPython.core.formatters as f')",
        "%run -i evil.py",
    ):
        job = {"facts": {"models": {}}, "observed": {"cells": [{"source": code}]}}
        facts = checker._facts(job)
        assert any(
            "reaches IPython's shell" in t or "`%run` runs a file" in t
            for t in facts.get("tampered", [])
        ), code
        with pytest.raises(checks.CheckError, match="changed how its kernel runs code"):
            checks.assert_kernel_trusted(facts)
    honest = [
        "%pip install --quiet course-utils",
        "!ls -la\nfiles = !ls",
        "from IPython.display import display, Image\ndisplay(Image('a.png'))",
        "%%time\nmodel.fit(train_ds)",
        "%matplotlib inline",
        *HONEST_SHELL_LINES,
    ]
    solution = nbformat.read(SOLUTION, as_version=4)
    honest += [c.source for c in solution.cells if c.cell_type == "code"]
    job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in honest]}}
    assert "tampered" not in checker._facts(job), checker._facts(job)


#: Each rewrites how IPython shows a str after the probe's reset, or where a fresh formatter
#: still looks (no name the code reading would catch is needed: these test the kernel side).
SHOWN_FORGERIES = {
    "again": (
        "import threading, time\nip = globals()['get_' + 'ipython']()\n"
        "def again():\n    while True:\n"
        "        ip.display_formatter.formatters['text/plain'].for_type(str, f)\n"
        "        time.sleep(0.001)\n"
        "f = lambda o, p, c: p.text(repr('{\"models\": {}}'))\n"
        "threading.Thread(target=again, daemon=True).start()"
    ),
    "table": (
        "from IPython.lib import pretty\n"
        "pretty._type_pprinters[str] = lambda o, p, c: p.text(repr('{\"models\": {}}'))"
    ),
    "class": (
        "from IPython.core import formatters as fm\nold = fm.PlainTextFormatter.__call__\n"
        "fm.PlainTextFormatter.__call__ = lambda self, o: (\n"
        "    repr('{\"models\": {}}') if isinstance(o, str) and o.startswith('{')\n"
        "    else old(self, o))"
    ),
}


def test_a_display_formatter_that_rewrites_the_probes_answer_is_refused(tmp_path, sandboxed):
    """The probe's answer is shown as text by IPython's display formatter: a printer registered
    before the probe is wiped by its reset (the probe's real facts come back), and one still in
    the way (registered again by a thread, IPython's printer table or a formatter class changed)
    makes the probe refuse to answer, as an error no formatter writes: the facts are untrusted."""
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    setup = submission.RunSetup(Limits(60, 120), probe_source=probe)
    env = {**os.environ, **ENV}
    (tmp_path / "wiped").mkdir()
    outcome, facts, error = submission.run(
        notebook_of(FORMATTER_FORGER), tmp_path / "wiped", env, setup
    )
    # the kernel's real answer: `fit_model` is no model (the forged one said "mirrored")
    assert error == "" and facts["models"]["fit_model"] is None, (facts, outcome.extra_error)
    assert facts["tampered"] == [], facts
    for name, code in SHOWN_FORGERIES.items():
        (tmp_path / name).mkdir()
        outcome, facts, error = submission.run(notebook_of(code), tmp_path / name, env, setup)
        assert error == "", (name, error)
        tampered = " ".join(facts.get("tampered", []))
        assert "changed how its kernel shows values" in tampered, (name, facts)
        with pytest.raises(checks.CheckError, match="changed how its kernel runs code"):
            checks.assert_kernel_trusted(facts)


def test_a_forged_formatter_a_fake_strategy_and_shuffle_1_earn_nothing(attacks):
    """The red team's forger, through `course grade`: no point for the pipeline, the mirrored
    model or the model's own file; the report says why."""
    grades, out = _grades(attacks)
    g = grades["formatter"]
    assert g.score == 0, {r.title: r.earned for r in g.results if r.earned}
    mirrored = failed(g)["fit_model was trained under MirroredStrategy"]
    assert "tf.distribute.MirroredStrategy" in mirrored, mirrored


def test_a_sparse_artifact_is_skipped_alone_and_the_rest_copied(tmp_path):
    """A 900 MB sparse file (no real bytes) beside small ones: that one file is left out with a
    note, the others are copied, and the bytes counted are those copied."""
    work = tmp_path / "work"
    source = work / "artifacts" / "05_svhn"
    source.mkdir(parents=True)
    with open(source / "sparse.bin", "wb") as handle:
        handle.truncate(900 * 2**20)
    for index in range(3):
        (source / f"small{index}.json").write_text("{}" * 1000)
    (source / "half.bin").write_bytes(b"x" * 40 * 2**20)
    (source / "other_half.bin").write_bytes(b"y" * 40 * 2**20)
    target = tmp_path / "copied"
    notes = one_submission.copy_artifacts(source, target, within=work)
    copied = {p.name for p in target.iterdir()}
    assert "sparse.bin" not in copied and {"small0.json", "small1.json", "small2.json"} <= copied
    assert len({"half.bin", "other_half.bin"} & copied) == 1, copied  # 64 MB in all
    assert any(n.startswith("artifact sparse.bin (900.0 MB) not copied") for n in notes), notes
    assert sum(p.stat().st_size for p in target.iterdir()) <= one_submission.ARTIFACTS_MB * 2**20


#: Lines an honest notebook writes that look like the shell but cannot reach the probe's path:
#: the course teaches `%load_ext tensorboard` (notebook 1); `%config` of the inline backend; a
#: string or a docstring naming the shell.
HONEST_SHELL_LINES = (
    "%config InlineBackend.figure_format = 'retina'",
    "%load_ext tensorboard",
    "%load_ext autoreload\n%autoreload 2",
    "%reload_ext tensorboard",
    "print('kernel: ipykernel on Colab')",
    'def helper():\n    """Unlike get_ipython().run_cell, this runs nothing."""\n    return 1',
    "# the display_formatter is IPython's",
)


def test_honest_magics_strings_and_docstrings_keep_the_facts_trusted():
    """The completed exercise with each honest line keeps its facts trusted (all 12 points'
    worth); the lines that reach the probe's path still mark them untrusted, `%run` with why
    and what to do."""
    done = [c.source for c in completed_exercise().cells if c.cell_type == "code"]
    for line in HONEST_SHELL_LINES:
        job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in done]}}
        job["observed"]["cells"].insert(3, {"source": line})
        facts = checker._facts(job)
        assert "tampered" not in facts, (line, facts)
        checks.assert_kernel_trusted(facts)
    for line, said in (
        ("ip = get_ipython()\nip.display_formatter.formatters.clear()", "display_formatter"),
        ("from ipykernel import zmqshell", "ipykernel"),
        ("%config PlainTextFormatter.type_printers = {str: f}", "PlainTextFormatter"),
        ("%config InlineBackend.x = __import__('json').__setattr__('dumps', f)", "__setattr__"),
        ("%run helpers.py", "put that code in the notebook's cells"),
    ):
        job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in done]}}
        job["observed"]["cells"].append({"source": line})
        tampered = " ".join(checker._facts(job).get("tampered", []))
        assert said in tampered, (line, tampered)


def test_assigning_an_attribute_of_an_imported_module_makes_the_facts_untrusted():
    """`json.dumps = f` (the red team's forger), a strategy class replaced, setattr, an alias of
    a module, a module's `__dict__`: each marks the facts untrusted, naming the cell and line;
    an environment variable or a matplotlib setting (an item, not an attribute) does not."""
    for code in (
        "import json\n_dumps = json.dumps\njson.dumps = _tidy",
        "import tensorflow as tf\ntf.distribute.MirroredStrategy = FakeStrategy",
        "import json\nsetattr(json, 'dumps', f)",
        "import numpy as np\nnp.random.shuffle = f",
        "import json as j\nm = j\nm.dumps = f",
        "from json import encoder\nencoder.__dict__['c_make_encoder'] = None",
        "%%time\nimport json\njson.dumps = f",
    ):
        job = {
            "facts": {"models": {}},
            "observed": {"cells": [{"source": "x = 1"}, {"source": code}]},
        }
        tampered = " ".join(checker._facts(job).get("tampered", []))
        said = "changes a library the grader relies on (cell [2], line"
        assert said in tampered, (code, tampered)
    for code in (
        "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'",
        "import matplotlib.pyplot as plt\nplt.rcParams['figure.figsize'] = (8, 4)",
        "import tensorflow as tf\nmodel = tf.keras.Sequential()\nmodel.trainable = False",
    ):
        job = {"facts": {"models": {}}, "observed": {"cells": [{"source": code}]}}
        assert "tampered" not in checker._facts(job), code


def test_the_probe_answers_with_builtin_reprs_that_no_notebook_replaces(tmp_path, sandboxed):
    """The probe's facts are written by the builtin types' own repr after an exact-type check,
    not by the kernel's `json.dumps`: a notebook that replaces json.dumps (through a function's
    parameter, which the code reading does not follow) changes nothing, and the facts read back
    whole (nan and inf included); a value of another type is refused."""
    facts = {
        "models": {"m": None},
        "ratios": [1.0, float("inf")],
        "note": 'it\'s \\ "q"',
        "ok": True,
    }
    answer = probe.answer(facts)
    assert submission.read_facts(_answered(repr(answer))) == (facts, "")
    with pytest.raises(TypeError, match="not a builtin value"):
        probe.answer({"models": {"m": type("Text", (str,), {})("x")}})
    forge = (
        "import json\n_real = json.dumps\n"
        "FAKE = {'models': {'fit_model': {'variables': 2, 'distributed_variables': 2, "
        "'replicas': 2, 'fingerprint': 'x'}}, 'datasets': {}, 'tampered': []}\n"
        "def _forge(obj, *args, **kwargs):\n"
        "    forged = FAKE if isinstance(obj, dict) and 'models' in obj else obj\n"
        "    return _real(forged, *args, **kwargs)\n"
        "def _patch(module, name, value):\n"
        "    setattr(module, name, value)\n"
        "_patch(json, 'dumps', _forge)"  # through a parameter: unseen by the reading (tools README)
    )
    code = reading.Code.of({"cells": [{"source": forge}]})
    assert code.module_patches() == [], "the forger is meant to be invisible to the reading"
    setup = submission.RunSetup(
        Limits(60, 120),
        probe_source=exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe,
    )
    outcome, found, error = submission.run(
        notebook_of(forge), tmp_path, {**os.environ, **ENV}, setup
    )
    assert error == "" and found["models"]["fit_model"] is None, (found, outcome.extra_error)


def _unterminated(size: int) -> str:
    """The red team's file: one string that never ends, `size` bytes of escaped quotes."""
    return '{"' + 'a\\"' * ((size - 2) // 3)


def test_an_unterminated_string_is_refused_in_time_linear_in_the_files_size(tmp_path):
    """A notebook-sized file whose string never ends (the regular expression used before
    restarted from every later quote: days at the cap) is refused as not JSON, at the cap's
    size too, and 8 times the size costs about 8 times the time (a ratio, not a time: the suite
    runs on loaded machines; `course bench`-style figures belong in benchmarks). Timed in this
    process's CPU seconds, the two sizes in alternate rounds: wall time on a loaded machine counts
    other programs' turns (a ratio of 37 was seen that way with a linear parser)."""
    from course_tools.grade.core import notebooks

    small, large = _unterminated(2**20), _unterminated(8 * 2**20)
    best = {len(small): float("inf"), len(large): float("inf")}
    for _ in range(3):
        for text in (small, large):
            started = time.process_time()
            with pytest.raises(notebooks.NotJSON, match="never ends"):
                notebooks.parse(text)
            best[len(text)] = min(best[len(text)], time.process_time() - started)
    ratio = best[len(large)] / best[len(small)]
    assert ratio < 20, f"8 times the size took {ratio:.0f} times as long (quadratic: 64)"
    path = tmp_path / "hw.ipynb"
    path.write_text(_unterminated(plan.NOTEBOOK_MB * 2**20))
    g = Grade("redos", path, status="graded")
    parts = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4))
    assert one_submission._read_notebook(g, parts) is None
    assert g.status == "invalid notebook" and "never ends" in g.reason, g.reason


# --- red team 4's submissions, through `course grade` -------------------------------------------

#: The red team's forger: every fact goes through json.dumps, which it rewrites so that the
#: unshuffled train_ds looks reshuffled on its second pass.
JSON_DUMPS_FORGER = """import json

_dumps = json.dumps


def _tidy(obj, *args, **kwargs):
    train = obj.get("datasets", {}).get("train_ds") if isinstance(obj, dict) else None
    if train and len(train.get("passes", [])) > 1:
        for k in ("in_order", "batches"):
            train["passes"][1][k] = "reshuffled-" + str(train["passes"][1][k])
    return _dumps(obj, *args, **kwargs)


json.dumps = _tidy"""


@pytest.fixture(scope="module")
def red4(tmp_path_factory, sandboxed):
    """`course grade --jobs 2` of: a notebook-sized file whose string never ends; the untouched
    exercise; the completed exercise with the honest magics and its strategy made by a helper, an
    annotation and an alias (one run for both: either one read as untrusted costs it its full
    marks); with `json.dumps` replaced and an unshuffled pipeline; a notebook whose deepest
    artifact fits its work folder but not the grades.

    Run as a hardened host's root runs it (the permission cases ride on this batch): under umask
    077, from a copy of the course's packages and with a data folder (TFDS_DATA_DIR), both inside
    a long `--out` made 0700 beforehand that also holds a file of the instructor's (0640)."""
    folder = tmp_path_factory.mktemp("red4")
    out = tmp_path_factory.mktemp("grades") / ("grades-of-the-distributed-training-course-" * 3)
    out.mkdir(mode=0o700)
    out.chmod(0o700)
    ck = copy_of_the_course(out / "ck", closed=False)
    (out / "tfds" / "svhn_cropped").mkdir(parents=True)
    for data in (out / "tfds", out / "tfds" / "svhn_cropped"):
        data.chmod(0o755)
    mine = out / "instructor-notes.txt"
    mine.write_text("private\n")
    mine.chmod(0o640)
    done = completed_exercise()
    strategy = "strategy = tf.distribute.MirroredStrategy()\n"
    honest = edit(  # the honest magics, and the strategy made by a helper
        done,
        strategy,
        "%config InlineBackend.figure_format = 'retina'\n"
        "def make_strategy():\n    return tf.distribute.MirroredStrategy()\n\n\n"
        "mirrored: tf.distribute.Strategy = make_strategy()\nstrategy = mirrored\n",
    )
    honest.cells.append(nbformat.v4.new_code_cell("%load_ext tensorboard\n%load_ext autoreload"))
    forge = edit(
        done,
        "train_ds = train_cached.shuffle(10_000)",
        "SHUFFLE_BUFFER = 1  # tuned\ntrain_ds = train_cached.shuffle(SHUFFLE_BUFFER)",
    )
    forge.cells.append(nbformat.v4.new_code_cell(JSON_DUMPS_FORGER))
    notebooks = {
        "honest": honest,
        "forge": forge,
        "deep": notebook_of(LONG_ARTIFACT),
    }
    for name, notebook in notebooks.items():
        (folder / name).mkdir()
        write(notebook, folder / name / "hw.ipynb")
    (folder / "redos").mkdir()
    (folder / "redos" / "hw.ipynb").write_text(_unterminated(plan.NOTEBOOK_MB * 2**20))
    (folder / "bob").mkdir()
    shutil.copy(EXERCISE, folder / "bob" / "hw.ipynb")
    env = {**os.environ, **ENV, "PYTHONPATH": str(ck), "TFDS_DATA_DIR": str(out / "tfds")}
    command = [sys.executable, "-m", "course_tools.cli", "grade", str(folder), f"--out={out}"]
    command += [f"--solution={SOLUTION}", "--jobs=2"]
    started = time.monotonic()
    ran = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=ck,
        timeout=1500,
        preexec_fn=lambda: os.umask(0o077),  # the grader's umask, as a hardened host's root
        check=False,
    )
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    print(f"\nred team 4's batch: {time.monotonic() - started:.0f} s, exit {ran.returncode}")
    return rows, out, ran


def test_an_unterminated_string_file_gets_its_row_and_the_batch_its_gradebooks(red4):
    rows, out, _ = red4
    assert rows["redos"]["status"] == "invalid notebook", rows["redos"]
    assert "never ends" in (out / "redos" / "report.md").read_text()
    assert rows["bob"]["status"] == "unchanged exercise", rows["bob"]
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        text = (out / name).read_text()
        assert "redos" in text and "bob" in text, name


def test_honest_magics_keep_full_marks_through_course_grade(red4):
    rows, out, _ = red4
    assert (rows["honest"]["score"], rows["honest"]["status"]) == ("12", "graded"), (
        out / "honest" / "report.md"
    ).read_text()


def test_a_replaced_json_dumps_and_a_buffer_of_one_earn_no_pipeline_point(red4):
    rows, out, _ = red4
    report = (out / "forge" / "report.md").read_text().replace("\\", "")  # unescaped
    assert "changes a library the grader relies on" in report and "json.dumps" in report, report
    # the reading refuses the module's attribute set (json.dumps = _tidy) before it would read
    # the buffer of 1: no pipeline point either way
    assert "cannot read what a module's names stand for once your code sets one" in report, report
    assert rows["forge"]["q1"] == "0", rows["forge"]


def test_a_strategy_made_by_a_helper_keeps_full_marks_through_course_grade(red4):
    rows, out, _ = red4  # the honest submission's strategy is made by a helper
    assert rows["honest"]["score"] == "12", (out / "honest" / "report.md").read_text()


# --- the host's file permissions and paths, on red team 4's batch -------------------------------
# (the pieces, directly, and the Slurm route: tests/test_grading_permissions.py)


def _as_root() -> None:
    if not identity.privileged():
        pytest.skip("the check process gets a uid of its own only as root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_under_umask_077_the_completed_exercise_scores_full_marks(red4):
    """As root, the check process (a uid of its own) reads what it must through a staged copy:
    the grades folder, made under that umask, is closed to it."""
    _as_root()
    rows, _, ran = red4
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    row = rows["honest"]
    assert (row["status"], row["score"], row["max_score"]) == ("graded", "12", "12"), row


def test_a_private_grades_folder_keeps_its_mode_and_its_files_theirs(red4):
    _as_root()
    _, out, _ = red4
    mine = out / "instructor-notes.txt"
    assert _mode(out) == 0o700, oct(_mode(out))
    assert _mode(mine) == 0o640, oct(_mode(mine))
    # what the grader wrote is as the umask made it: nothing opened to other accounts (the
    # course's copy and the data folder are the instructor's, open on purpose)
    theirs = (out / "ck", out / "tfds")
    wider = [
        f"{path.relative_to(out)} {oct(_mode(path))}"
        for path in [out, *out.rglob("*")]
        if path != mine
        and not path.is_relative_to(theirs[0])
        and not path.is_relative_to(theirs[1])
        and _mode(path) & 0o077
    ]
    assert not wider, wider


def test_the_solutions_copy_for_the_tasks_is_gone_after_the_batch(red4):
    _, out, _ = red4
    assert (out / plan.PLAN_FOLDER / "plan.json").is_file()
    assert not (out / plan.PLAN_FOLDER / plan.SOLUTION_COPY).exists(), "the hidden tests stayed"


def test_an_artifact_path_too_long_for_the_grades_is_a_note_of_a_graded_row(red4):
    """The artifact fits under the work folder, not under the longer `--out`: a note in the row,
    not a grader error, and the note holds no host path."""
    rows, out, _ = red4
    deep = rows["deep"]
    assert deep["status"] == "graded", deep
    assert "not copied: File name too long" in deep["notes"], deep["notes"]
    assert (out / "deep" / "artifacts" / "short.txt").read_text() == "kept"
    moodle = (out / "moodle.csv").read_text()
    assert "File name too long" in moodle
    assert str(out) not in moodle, "the grades' host path reached the student's feedback"


def test_an_out_holding_the_checkout_and_the_data_folder_scores_full_marks(red4):
    """`course grade --out <folder>` run from a checkout in that folder, its TFDS_DATA_DIR there
    too: the completed exercise scores 12/12 (1/12 "graded" when the grades' view covered
    them)."""
    rows, out, ran = red4
    assert (out / "ck" / "course_tools").is_dir() and (out / "tfds" / "svhn_cropped").is_dir()
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert (rows["honest"]["status"], rows["honest"]["score"]) == ("graded", "12"), rows["honest"]


def _untrusted(*cells: str) -> str:
    """What the check process says marks the facts of a notebook of `cells` untrusted."""
    job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in cells]}}
    return " ".join(checker._facts(job).get("tampered", []))


def test_honest_attributes_of_objects_and_other_modules_leave_the_facts_trusted():
    """Only modules imported (or their aliases) the grader relies on count: a callback's
    `self.best = np.inf` (the red team's 1/12) leaves the exercise's own `self.x = ...` trusted,
    and so do the usual loss, tf.data and pandas settings, a class from `from X import Y`, and a
    function's parameter that reuses a module's name; replacing a function of json, numpy or
    TensorFlow still counts, through an alias too."""
    callback = (
        "import numpy as np\nimport tensorflow as tf\n"
        "class BestLoss(tf.keras.callbacks.Callback):\n"
        "    def on_train_begin(self, logs=None):\n        self.best = np.inf\n"
    )
    given = "class EpochTimer:\n    def on_train_begin(self, logs=None):\n        self.seconds = []"
    assert _untrusted(given, callback) == ""
    for code in (
        "import pandas as pd\npd.options.display.max_rows = 50",
        "import sys\nsys.argv = ['train.py']",
        "import tensorflow as tf\nloss_fn = tf.keras.losses.SparseCategoricalCrossentropy()\n"
        "loss_fn.reduction = tf.keras.losses.Reduction.NONE",
        "import tensorflow as tf\nopts = tf.data.Options()\n"
        "opts.experimental_distribute.auto_shard_policy = "
        "tf.data.experimental.AutoShardPolicy.DATA",
        "import tensorflow as tf\noptions = tf.data.Options()\n"
        "options.threading.private_threadpool_size = tf.data.AUTOTUNE",
        "import time\nclass T:\n    def start(self):\n        self.clock = time.perf_counter",
        "import tensorflow as tf\nclass T:\n    def start(self):\n"
        "        self.compute = tf.float32",
        "import numpy as np\nclass S:\n    def stop(self):\n"
        "        self.model.stop_training = np.True_",
        "from tensorflow.keras.callbacks import Callback\nCallback.verbose = 0",
        "import numpy as np\ndef settle(np):\n    np.x = 1",
        "import json\ndef f():\n    json = Settings()\n    json.dumps = 1",
        # red team 7a: a name rebound at the top level is no longer the module
        "import tensorflow as tf, keras\nfor m in (tf, keras):\n    print(m.__version__)\n"
        "m = keras.models.load_model('x.keras')\nm.trainable = False",
        "import keras\nv = {lib.__name__: 1 for lib in [keras]}\nlib = Clock()\nlib.start = 0",
        "from course_utils import data\ndata = pd.DataFrame()\ndata.columns = ['epoch']",
    ):
        assert _untrusted(code) == "", code
    for code in (
        "import json\njson.dumps = f",
        "import tensorflow as tf\ntf.distribute.MirroredStrategy = Fake",
        "import numpy as np\nnp.asarray = f",
        "import json\nm = json\nm.dumps = f",
    ):
        assert "changes a library the grader relies on (cell [1], line" in _untrusted(code), code


#: Red team 7a's ways to hand the probe other builtins: swap the namespace its path goes through
#: for a copy with a forged `compile`; rename a class that comes before `BuiltinImporter` and
#: give it a `find_spec` whose globals hold the copy; replace `compile` in the builtins module
#: itself, from a string built at run time (which no reading of the code sees). Red team 9a's
#: one level down, through an object, as the probe loads its own code: a method of a loader's
#: class replaced, one added over the method it inherits, a closure's cell set (the wrapper
#: around `get_filename` holds the real one); red team 10a's, a module the machinery calls: `_io`'s
#: `open_code` (which read the probe's file), `sys.pycache_prefix`; red team 11a's, a module
#: replaced in `sys.modules` through an alias of it; red team 12a's, the hash every checksum calls
#: replaced through a function's parameter.
LOADER = "import collections\nLoader = type(collections.__spec__.loader)\n"
BUILTINS_SWAPS = {
    "namespace": """
from importlib.machinery import BuiltinImporter
namespace = BuiltinImporter.find_spec.__func__.__globals__
namespace["__builtins__"] = dict(namespace["__builtins__"], compile=forger)
""",
    "renamed": """
import types
from importlib._bootstrap import _ModuleLock
fake = dict(vars(builtins), compile=forger)
globals_ = {"__builtins__": fake}
_ModuleLock.find_spec = classmethod(types.FunctionType((lambda cls: 0).__code__, globals_))
_ModuleLock.__name__ = "BuiltinImporter"
""",
    "module": """
setattr(builtins, "comp" + "ile", forger)
""",
    "class-method": LOADER
    + "real = Loader.path_stats\nLoader.path_stats = lambda self, path: real(self, path)\n",
    "added-method": LOADER
    + "Loader.get_data = lambda self, path: Loader.__base__.get_data(self, path)\n",
    "closure-cell": LOADER
    + "cell = Loader.get_filename.__closure__[0]\nreal = cell.cell_contents\n"
    + "cell.cell_contents = lambda self, name=None: real(self, name)\n",
    "open-code": "import _io\nreal = _io.open_code\n_io.open_code = lambda path: real(path)\n",
    "pycache": "import sys\nsys.pycache_prefix = 'elsewhere'\n",
    "modules-alias": "import sys\nloaded = sys.modules\nloaded['hashlib'] = type(sys)('hashlib')\n",
    "hash-parameter": "import hashlib\ndef use(m, f):\n    m.sha256 = f\n"
    + "use(hashlib, hashlib.md5)\n",
}
#: What the refusal names for each of `BUILTINS_SWAPS`.
SWAP_NAMED = {
    "namespace": "(B",
    "renamed": "(B",
    "module": "B.compile",
    "class-method": "E.SourceFileLoader.path_stats",
    "added-method": "E.SourceFileLoader.get_data",
    "closure-cell": "E.FileLoader.get_filename cell",
    "open-code": "E._io:open_code",
    "pycache": "sys:pycache_prefix",
    "modules-alias": "M.hashlib",
    "hash-parameter": "M.hashlib:sha256",
}
SWAP_FORGER = """
import builtins, pathlib
real_compile = builtins.compile

def forger(source, *args, **kwargs):
    if isinstance(source, str) and "FACTS" in source:  # the probe's code
        pathlib.Path("forger-called").write_text("yes")
    return real_compile(source, *args, **kwargs)
"""


@pytest.mark.parametrize("swap", sorted(BUILTINS_SWAPS))
def test_builtins_changed_after_the_kernel_started_are_refused(tmp_path, sandboxed, swap):
    """The probe compares the builtins and import machinery it finds with what they were before
    the first cell (the same dicts, each value the same object, each class's methods and each
    function's code and closure the same): any of red teams 7a's and 9a's swaps makes it refuse,
    naming what changed, and the forger never sees the probe's code."""
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    outcome, facts, error = submission.run(
        notebook_of(SWAP_FORGER, BUILTINS_SWAPS[swap] + "print('swapped')"),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120), probe_source=probe),
    )
    assert "swapped" in _outputs(outcome), _outputs(outcome)
    assert error == "", error
    assert "models" not in facts, facts
    said = " ".join(facts["tampered"])
    assert "the notebook changed Python's builtins or imports (" in said, said
    assert SWAP_NAMED[swap] in said, said
    assert not (tmp_path / "forger-called").exists(), "the forger compiled the probe's code"


FAKE_PROBE = """
import sys, types
fake = types.ModuleType("course_tools.grade.core")
fake.probe = types.SimpleNamespace(collect=lambda *args, **kwargs: {"forged": True})
loaded = sys.modules
loaded["course_tools.grade.core"] = fake
print("replaced")
"""


def test_the_probe_cell_gets_the_graders_probe_not_the_one_sys_modules_holds(tmp_path, sandboxed):
    """Red team 11a put a module of its own under `course_tools.grade.core` through an alias of
    `sys.modules`: the probe cell's import found its `collect`, which wrote any fact (12/12). The
    cell's import is now the module the grader compiled: the facts are the probe's."""
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    outcome, facts, error = submission.run(
        notebook_of(FAKE_PROBE),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120), probe_source=probe),
    )
    assert "replaced" in _outputs(outcome), _outputs(outcome)
    assert error == "", error
    assert "forged" not in facts and "models" in facts, facts


def test_code_the_reading_cannot_read_makes_the_facts_untrusted():
    """Red team 7a installed its forger with `exec(SRC)`: code given to exec, eval or compile as
    anything but a literal, a module imported by a computed name, runpy, or a Python file written
    by `open` rather than `%%writefile` is code the grader never reads, and says so; a literal
    (str, bytes, an f-string without values) is read like a cell, and honest writes and
    `model.compile()` are fine."""
    for code in (
        'SRC = "import builtins"\nexec(SRC)',
        'exec(f"x = {y}")',
        "import importlib\nimportlib.import_module(name)",
        "import runpy\nrunpy.run_path('m.py')",
        "open('m.py', 'w').write(text)\nimport m",
        "from pathlib import Path\nPath('helpers.py').write_text(text)",
    ):
        said = _untrusted(code)
        assert "runs code the grader cannot read as code (cell [1], line" in said, (code, said)
    for code in (
        'exec(b"import builtins\\nbuiltins.compile = f")',
        'exec(f"import builtins\\nbuiltins.compile = f")',
        'import builtins\nbuiltins.exec("import builtins\\nbuiltins.compile = f")',
    ):
        assert "changes a library the grader relies on" in _untrusted(code), code
    for code in (
        'x = eval("1 + 1")',
        "open('results.json', 'w').write(text)",
        "with open(ARTIFACTS / 'log.txt', 'w') as f:\n    f.write(text)",
        "model.compile(optimizer='adam')",
    ):
        assert _untrusted(code) == "", code


def test_hooks_internals_and_unknown_modules_make_the_facts_untrusted():
    """Red team 8a's routes written plainly: an interpreter hook (profile, trace, audit), an
    object's class or a function's globals replaced, a Python file written by a path held in a
    name or joined from parts; a `%%writefile` module is read as code, and an object's own
    `__dict__` is its business."""
    for code, said in (
        ("import sys\nsys.setprofile(hook)", "`setprofile` sets a hook on the interpreter"),
        ("import sys\nsys.addaudithook(hook)", "`addaudithook` sets a hook"),
        ("import threading\nthreading.settrace(hook)", "`settrace` sets a hook"),
        ("setattr(train_ds, '__class__', Mine)", "`setattr(train_ds, '__class__', Mine)`"),
        ("train_ds.__class__ = Mine", "`train_ds.__class__ = Mine`"),
        ("type(m.__spec__).__init__.__globals__['_handle_fromlist'] = f", "__globals__"),
        (
            "path = 'tidy_helpers.py'\nopen(path, 'w').write(text)\nimport tidy_helpers",
            "runs code the grader cannot read as code (cell [1], line 2: `open(path, 'w')`)",
        ),
        ("import os\nopen(os.path.join(d, 'm.py'), 'w')", "runs code the grader cannot read"),
        ("from pathlib import Path\nPath(d, 'm.py').write_text(t)", "cannot read as code"),
    ):
        assert said in _untrusted(code), (code, _untrusted(code))
    assert _untrusted("%%writefile helpers.py\nx = 1", "import helpers") == ""
    assert _untrusted("import pandas as pd") == ""  # not installed here: its cell fails, no more
    assert _untrusted("self.__dict__.update(settings)") == ""


def test_red_team_9a_routes_are_marked_and_its_honest_lines_are_not():
    """A garbage collector callback and a frame walk (which edited the probe's facts as it ran),
    a `.txt` renamed to `.py` or run by a file loader: marked. The word `monitoring` or
    `callbacks` of the notebook's own (1/12 before) is not; only `sys.monitoring` and
    `gc.callbacks` are."""
    for code, said in (
        ("import gc\ngc.callbacks.append(edit)", "`callbacks` sets a hook on the interpreter"),
        ("import inspect\nframe = inspect.currentframe()", "`currentframe` sets a hook"),
        ("import sys\nsys.monitoring.use_tool_id(1, 'x')", "`monitoring` sets a hook"),
        ("import os\nos.replace('helpers.txt', 'helpers.py')", "cannot read as code"),
        (
            "from importlib.machinery import SourceFileLoader\n"
            "SourceFileLoader('m', 'm.txt').exec_module(module)",
            "cannot read as code",
        ),
    ):
        assert said in _untrusted(code), (code, _untrusted(code))
    for code in (
        'monitoring = {"metric": "loss", "every": 1}',
        "callbacks = [checkpoint]\nmodel.fit(train_ds, callbacks=callbacks)",
        "import shutil\nshutil.copy('results.json', 'backup.json')",
        "import shutil\nshutil.copy(best, target)",
    ):
        assert _untrusted(code) == "", code


def test_code_that_writes_the_interpreters_memory_makes_the_facts_untrusted():
    """ctypes (imported, or reached through NumPy), an array over any address, the referents of
    a builtin type's dict: each writes what no check in the kernel can see."""
    for code in (
        "import ctypes\nctypes.memmove(a, b, 8)",
        "from ctypes import pythonapi",
        "import numpy as np\nnp.ctypeslib.ctypes.memmove(a, b, 8)",
        "import numpy as np\nx = np.asarray(Raw())\nRaw.__array_interface__ = {}",
        "import gc\ngc.get_referents(int.__dict__)[0]['x'] = 1",
        "from numpy.lib.stride_tricks import as_strided",
    ):
        assert "writes the interpreter's memory directly" in _untrusted(code), code
    assert _untrusted("import numpy as np\nx = np.asarray(images)") == ""


def test_the_probe_reads_no_dataset_or_model_whose_class_answers_for_it():
    """A pipeline whose class is the notebook's (its own `__iter__`), or TensorFlow's with a
    method the notebook assigned, and a model whose class replaces Keras's `weights`: the probe
    reads none of them (an error in their facts); a subclass of keras.Model that keeps `weights`
    is read."""
    import keras
    import tensorflow as tf

    from course_tools.grade.core import probe

    dataset = tf.data.Dataset.from_tensor_slices(([[0.0]] * 4, [0, 1, 2, 3])).batch(2)

    class Mine(type(dataset)):
        def __iter__(self):
            return iter([])

    dataset.__class__ = Mine
    with pytest.raises(TypeError, match="not a pipeline of TensorFlow's own classes"):
        probe.pipeline_facts(dataset)

    class Caller:
        def __call__(self, *args):
            return iter([])

    dataset.__class__ = Mine.__base__
    assert len(probe.pipeline_facts(dataset)["passes"]) == 2  # TensorFlow's own: read
    real = Mine.__base__.__iter__  # red team 10a: a method replaced through the object's class
    Mine.__base__.__iter__ = lambda self: real(self)
    try:
        with pytest.raises(TypeError, match=r"method of a TensorFlow pipeline class replaced \("):
            probe.pipeline_facts(dataset)
        # red teams 11a and 12a: a partialmethod, a partial, an object with __call__ have no code
        # of their own to check
        for kind in (functools.partialmethod(real), functools.partial(real), Caller()):
            Mine.__base__.__iter__ = kind
            with pytest.raises(TypeError, match=r"method of a TensorFlow pipeline class replaced"):
                probe.pipeline_facts(dataset)
    finally:
        del Mine.__base__.__iter__  # back to the inherited one

    class Honest(keras.Model):
        pass

    class Liar(keras.Sequential):
        @property
        def weights(self):
            return []

    models = {"honest": Honest(), "liar": Liar([keras.layers.Dense(1)])}
    facts = probe.collect(models, models=["honest", "liar"])
    assert facts["models"]["liar"] == {"error": "its class replaces Keras's `weights`"}
    assert "fingerprint" in facts["models"]["honest"], facts["models"]["honest"]


RUN_TIME_HOOKS = {
    "a profile or trace hook": "import sys\ngetattr(sys, 'set' + 'profile')(lambda *a: None)",
    "a garbage collector callback": "import gc\ngetattr(gc, 'call' + 'backs').append(print)",
}


@pytest.mark.parametrize("hook", sorted(RUN_TIME_HOOKS))
def test_a_hook_set_at_run_time_is_refused(tmp_path, sandboxed, hook):
    """A profile hook or a garbage collector callback set through a name built at run time (no
    reading sees it) would run during the probe and could edit what it collects (red teams 8a
    and 9a): the probe marks the facts untrusted."""
    probe = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4)).probe
    outcome, facts, error = submission.run(
        notebook_of(RUN_TIME_HOOKS[hook] + "\nprint('hooked')"),
        tmp_path,
        {**os.environ, **ENV},
        submission.RunSetup(Limits(60, 120), probe_source=probe),
    )
    assert "hooked" in _outputs(outcome), _outputs(outcome)
    assert error == "", error
    assert hook in " ".join(facts["tampered"]), facts["tampered"]


def test_showing_every_value_and_a_no_op_assignment_leave_the_facts_trusted():
    """Two honest lines the red team saw cost 11 of 12 points: IPython's "show every value"
    setting (it changes only what `run_cell` shows, which the probe never goes through), in its
    three usual spellings, and a library's attribute assigned to itself. Reaching the shell's
    class for anything else still counts."""
    for code in (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.ast_node_interactivity = 'all'",
        "%config InteractiveShell.ast_node_interactivity = 'all'",
        "get_ipython().ast_node_interactivity = 'last_expr_or_assign'",
        "import json\njson.dumps = json.dumps",
    ):
        assert _untrusted(code) == "", code
    said = _untrusted(
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.ast_node_interactivity = 'all'\nInteractiveShell.run_cell = f"
    )
    assert "reaches IPython's shell: `InteractiveShell`" in said, said


def test_a_module_reached_by_other_plain_routes_still_counts():
    """The red team's bypasses written plainly in the code: a module's namespace updated,
    `object.__setattr__`, `importlib.import_module(...)`, and an alias made by a loop, a
    `with`, a walrus or a tuple."""
    for code in (
        "import json\nvars(json).update(dumps=f)",
        "import json\njson.__dict__.update(dumps=f)",
        "import numpy\nobject.__setattr__(numpy, 'asarray', f)",
        "import numpy\ntype.__setattr__(numpy, 'asarray', f)",
        "import importlib\nimportlib.import_module('json').dumps = f",
        "import hashlib\nfor m in [hashlib]:\n    m.sha256 = f",
        "import json\nfrom contextlib import nullcontext\nwith nullcontext(json) as m:\n"
        "    m.dumps = f",
        "import json\n(m := json)\nm.dumps = f",
        "import json\nm, n = json, 1\nm.dumps = f",
        "import os\nos.sys.modules['builtins'].type = f",
        # red team 6: scopes Python gives a name of its own, and more plain aliases
        "import json\ndef f():\n    [0 for json in ()]\n    json.dumps = print",
        "import json\ndef f():\n    def g():\n        json = 1\n    json.dumps = print",
        "import json\ndef f():\n    global json\n    if False:\n        json = None\n"
        "    json.dumps = print",
        "import tensorflow as tf\ndef f():\n    [1 for tf in ()]\n"
        "    tf.distribute.MirroredStrategy = object",
        "import json\nmatch json:\n    case m:\n        m.dumps = f",
        "import json\nm = json or None\nm.dumps = f",
        "import json\nm = json if x else None\nm.dumps = f",
        "import sys\nsys.modules.get('json').dumps = f",
        "import sys\nm = sys.modules.get('json')\nm.dumps = f",
        "import tensorflow as tf\ngetattr(tf, 'distribute').MirroredStrategy = object",
        "import json, types\ntypes.ModuleType.__setattr__(json, 'dumps', f)",
        # red team 7a: Python's scopes exactly, the modules every import gives, rebindings
        "import builtins\nclass C:\n    builtins = None\n    def go(self):\n"
        "        builtins.compile = f",
        "import builtins\ndef o():\n    builtins = None\n    def i():\n"
        "        global builtins\n        builtins.compile = f",
        "import builtins\ndef g(builtins=None, _=setattr(builtins, 'compile', f)):\n    pass",
        "import builtins\n@deco(setattr(builtins, 'compile', f))\ndef h(builtins):\n    pass",
        "import builtins\n[0 for builtins in [setattr(builtins, 'compile', f)]]",
        "import builtins\n(lambda builtins=None, _=setattr(builtins, 'compile', f): 0)",
        "import sys\nsys.modules['hashlib'] = fake",
        "import sys\nsys.modules.update(hashlib=fake)",
        "import sys\ndel sys.modules['hashlib']",
        "import os\nos.sys.modules['hashlib'] = fake",
        "from sys import modules\nmodules['math'] = fake",
        "from importlib.machinery import BuiltinImporter\nBuiltinImporter.find_spec = f",
        "import json\nm = 3\nglobals()['m'] = json\nm.dumps = g",
        "import json\nm = json\nif x:\n    m = 3\nm.dumps = g",
        "import json\nm = 3\ndef f():\n    global m\n    m = json\nf()\nm.dumps = g",
    ):
        assert "changes a library the grader relies on (cell [1], line" in _untrusted(code), code
