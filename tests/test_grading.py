"""`course grade` on submissions made here from the solution by small edits, like real
mistakes, and on hostile ones, all in one batch graded once per test session (module fixture),
two at a time (jobs=2), in the sandbox, 2 simulated devices, quick profile, synthetic data:

- hostile: a process that detaches from its kernel (double fork, new session) and deletes every
  saved model it can find for 15 minutes; a kernel that looks for the other kernels' connection
  files and sends them code; tampering with the installed package, the solution and the grader's
  checks (plus made-up results and "PASSED"); network access and writes outside the work folder;
  a print flood; an archive bomb and symbolic links as artifacts; a cell that ignores interrupts;
- the completed solution (twice: early, while the hostile ones run, and last), four mistakes
  (reduce_mean loss, no strategy scope, global batch = per-replica batch, advanced part missing),
  the untouched exercise and a file that is not JSON.

Each copy of the solution must score full marks; after the batch no process a submission started
is alive and nothing outside the grades changed. Memory and cell limits, crashes and the artifact
limits of `checks` are tested on tiny notebooks and files directly.

Run: pytest tests/test_grading.py  (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import secrets
import shutil
import socket
import time
import zipfile
from pathlib import Path

import nbformat
import psutil
import pytest

from conftest import ROOT
from course_utils.tools import checks, exercise, grading, sandbox

SOLUTION = ROOT / "solutions" / "05_svhn_solution.ipynb"
EXERCISE = ROOT / "exercises" / "05_svhn_exercise.ipynb"
ENV = {"COURSE_PROFILE": "quick", "COURSE_DEVICES": "2", "COURSE_DATA": "synthetic"}

pytestmark = pytest.mark.slow


def completed_exercise() -> nbformat.NotebookNode:
    """What a perfect student hands in: the exercise with every stub and the answer filled in."""
    solution = nbformat.read(SOLUTION, as_version=4)
    by_id = {cell.id: cell for cell in solution.cells}
    notebook = exercise.make_exercise(solution)
    for cell in notebook.cells:
        original = by_id[cell.id].source
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in original:
            cell.source = "\n".join(
                line
                for line in original.splitlines()
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
            )
        elif exercise.ANSWER_PLACEHOLDER in cell.source:
            answer = re.search(r"-->\n(.*)\n<!--", original, re.DOTALL)[1]
            cell.source = cell.source.replace(exercise.ANSWER_PLACEHOLDER, answer)
    return notebook


def edit(notebook, old: str, new: str) -> nbformat.NotebookNode:
    """A copy with `old` replaced by `new` in the one code cell that contains it."""
    notebook = copy.deepcopy(notebook)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and old in cell.source]
    assert len(cells) == 1, f"{old!r} is in {len(cells)} code cells, expected 1: update the fixture"
    cells[0].source = cells[0].source.replace(old, new)
    return notebook


def restub(notebook, marker: str) -> nbformat.NotebookNode:
    """A copy where the cell containing `marker` is back to the exercise's stub (part not done)."""
    notebook = copy.deepcopy(notebook)
    stubs = {cell.id: cell.source for cell in nbformat.read(EXERCISE, as_version=4).cells}
    cells = [cell for cell in notebook.cells if marker in cell.source]
    assert len(cells) == 1
    cells[0].source = stubs[cells[0].id]
    return notebook


def write(notebook, path: Path) -> Path:
    nbformat.write(notebook, path)
    return path


#: Marks everything the hostile submissions of this session create (files, process command lines).
TOKEN = f"hostile-{secrets.token_hex(6)}"


def _notebook(*sources: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return notebook


# A process that outlives its kernel (double fork, new session) and deletes every saved model and
# results file it can see, for 15 minutes. Its command line carries TOKEN.
SURVIVOR_LOOP = """# TOKEN
import glob, os, sys, time
end = time.time() + 900
while time.time() < end:
    for pattern in ("/tmp/**/*.keras", "/tmp/**/results.json", "OUT/**/*.keras"):
        for path in glob.glob(pattern, recursive=True):
            try:
                os.remove(path)
            except OSError:
                pass
    time.sleep(0.2)
"""
SURVIVOR = """
import os, sys
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", CODE])
    os._exit(0)
os.waitpid(child, 0)
print("survivor started")
"""

# Looks for the other kernels' connection files for 25 s and sends each one code that deletes its
# artifacts.
CROSS_KERNEL = """
import glob, json, os, time
from jupyter_client import BlockingKernelClient
mine = os.path.realpath(".kernel/kernel.json")
patterns = ["/tmp/course-grade-*/*/.kernel/kernel.json", "/tmp/*/kernel*.json",
            "/tmp/*/*/kernel*.json", os.path.expanduser("~/.local/share/jupyter/runtime/*.json"),
            "/run/user/*/jupyter/runtime/*.json"]
seen, attacked = set(), []
end = time.time() + 25
while time.time() < end:
    for path in {p for pattern in patterns for p in glob.glob(pattern)} - seen - {mine}:
        seen.add(path)
        try:
            client = BlockingKernelClient(connection_file=path)
            client.load_connection_file()
            client.start_channels()
            client.execute("import os, shutil; "
                           "shutil.rmtree(os.environ['COURSE_ARTIFACTS'], ignore_errors=True)")
            attacked.append(path)
        except Exception:
            pass
    time.sleep(0.5)
print("CROSS", json.dumps({"found": sorted(seen), "attacked": attacked}))
"""

# Changes the installed package and the solution, patches the grader's checks in its own kernel,
# fakes results and prints "PASSED".
TAMPER = """
import json, os, pathlib
import course_utils
package = pathlib.Path(course_utils.__file__).parent
attempts = {}
for target in [package / "tools" / "checks.py", package / "__init__.py",
               package.parent / "solutions" / "05_svhn_solution.ipynb",
               package / "TOKEN.py"]:
    try:
        with open(target, "a") as handle:
            handle.write("# TOKEN")
        attempts[target.name] = "written"
    except OSError as exc:
        attempts[target.name] = type(exc).__name__
print("TAMPER", json.dumps(attempts))
import course_utils.tools.checks as checks
checks.CheckError = Warning
checks.own_model = lambda *args, **kwargs: None
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
artifacts.mkdir(parents=True, exist_ok=True)
(artifacts / "results.json").write_text(json.dumps({"fit": {"test_accuracy": 1.0}}))
print("PASSED: 12/12 hidden tests passed")
"""

# Network, and writes outside the work folder.
ESCAPE = """
import json, os, pathlib, socket
report = {}
for name, address in [("dns", ("pypi.org", 443)), ("ip", ("1.1.1.1", 53)),
                      ("host", ("127.0.0.1", HOST_PORT))]:
    try:
        socket.create_connection(address, timeout=3).close()
        report[name] = "reachable"
    except OSError:
        report[name] = "blocked"
for folder in [pathlib.Path.home(), pathlib.Path("OUT"), pathlib.Path("ROOT"),
               pathlib.Path("/tmp"), pathlib.Path("/var/tmp")]:
    try:
        (folder / "TOKEN").write_text("escaped")
        report[str(folder)] = "written"
    except OSError as exc:
        report[str(folder)] = type(exc).__name__
print("ESCAPE", json.dumps(report))
"""

FLOOD = "for _ in range(300):\n    print('x' * 1_000_000)  # 300 MB"

# A zip bomb saved as the fit model (300 MB of zeros in about 300 KB), and symbolic links.
BOMB = """
import json, os, pathlib, zipfile
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
artifacts.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(artifacts / "fit_model.keras", "w", zipfile.ZIP_DEFLATED) as archive:
    with archive.open("model.weights.h5", "w", force_zip64=True) as member:
        for _ in range(300):
            member.write(bytes(2**20))
    archive.writestr("config.json", "{}")
(artifacts / "results.json").write_text(json.dumps({"fit": {"test_accuracy": 0.9}}))
os.symlink("/etc/passwd", artifacts / "custom_model.keras")
os.symlink("/", artifacts / "everything")
"""

DEAF = (
    "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "while True:\n    time.sleep(0.05)"
)


def _fill(source: str, out: Path) -> str:
    return source.replace("TOKEN", TOKEN).replace("OUT", str(out)).replace("ROOT", str(ROOT))


def _survivors() -> list[psutil.Process]:
    """Live processes whose command line carries TOKEN."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if TOKEN in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except psutil.Error:
            pass
    return found


@pytest.fixture(scope="module")
def sandboxed():
    """Grading needs bubblewrap (as `course grade` does by default); skip with the reason."""
    available, detail = sandbox.status()
    if not available:
        pytest.skip(f"no grading sandbox: {detail}")


@pytest.fixture(scope="module")
def batch(tmp_path_factory, sandboxed):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    done = completed_exercise()
    # A server on the host's loopback: reachable from the host, not from a sandboxed kernel.
    listener = socket.create_server(("127.0.0.1", 0))
    host_port = listener.getsockname()[1]
    survivor = SURVIVOR.replace("CODE", repr(_fill(SURVIVOR_LOOP, out)))
    first = {
        "survivor": _notebook(survivor),
        "solution": done,
        "cross_kernel": _notebook(CROSS_KERNEL),
        "tampering": _notebook(_fill(TAMPER, out)),
        "escape": _notebook(_fill(ESCAPE, out).replace("HOST_PORT", str(host_port))),
        "flood": _notebook(FLOOD, "print('after the flood')"),
        "bomb": _notebook(BOMB),
        "deaf": _notebook(DEAF, "print('never')"),
    }
    paths = [write(notebook, folder / f"{name}.ipynb") for name, notebook in first.items()]
    paths += [
        write(
            edit(
                done,
                "return tf.nn.compute_average_loss(per_example_loss, "
                "global_batch_size=GLOBAL_BATCH)",
                "return tf.reduce_mean(per_example_loss)",
            ),
            folder / "reduce_mean.ipynb",
        ),
        write(
            edit(
                done,
                "with strategy.scope():\n    fit_model = make_model()",
                "if True:  # forgot `with strategy.scope():`\n    fit_model = make_model()",
            ),
            folder / "no_scope.ipynb",
        ),
        write(
            edit(
                done,
                "GLOBAL_BATCH = PER_REPLICA_BATCH * strategy.num_replicas_in_sync",
                "GLOBAL_BATCH = PER_REPLICA_BATCH",
            ),
            folder / "wrong_global_batch.ipynb",
        ),
        write(
            restub(restub(done, "latest_fit = max("), "latest_custom = manager.latest_checkpoint"),
            folder / "missing_advanced.ipynb",
        ),
        folder / "untouched.ipynb",
        folder / "invalid_json.ipynb",
        write(done, folder / "solution_last.ipynb"),
    ]
    shutil.copy(EXERCISE, folder / "untouched.ipynb")
    (folder / "invalid_json.ipynb").write_text('{"cells": [')
    solution_before = SOLUTION.read_bytes()
    started = time.monotonic()
    with listener:  # the escape notebook tries to reach it from inside the sandbox
        socket.create_connection(("127.0.0.1", host_port), timeout=3).close()  # it answers here
        grades = grading.grade(
            paths,
            out,
            limits=grading.Limits(cell_timeout=90, timeout=900),
            jobs=2,
            progress=False,
            **_settings(),
        )
    print(
        f"\nGraded {len(paths)} submissions in {time.monotonic() - started:.0f} s (2 at a time); "
        f"solution alone: {grades[1].seconds:.0f} s\n" + (out / "gradebook.csv").read_text()
    )
    after = {
        "survivors": _survivors(),
        "solution_changed": SOLUTION.read_bytes() != solution_before,
    }
    return {g.student: g for g in grades}, out, after


def _settings() -> dict:
    return {
        "profile": ENV["COURSE_PROFILE"],
        "devices": int(ENV["COURSE_DEVICES"]),
        "data": ENV["COURSE_DATA"],
    }


def failed(g: grading.Grade) -> dict[str, str]:
    return {r.title: r.message for r in g.results if r.earned < r.points}


@pytest.mark.parametrize("student", ["solution", "solution_last"])
def test_the_solution_scores_full_marks(batch, student):
    grades, out, _ = batch
    g = grades[student]
    assert g.status == "graded" and not g.cell_errors, g.cell_errors
    assert failed(g) == {}, failed(g)
    assert g.score == g.max_score == 12
    assert not [note for note in g.notes if "course_utils/" not in note], (
        g.notes
    )  # others may edit course_utils
    report = (out / student / "report.md").read_text()
    assert report.startswith(f"# {student}: 12 / 12") and "to read" in report, (
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


@pytest.mark.parametrize(
    "student, score, failing",
    [
        (
            "reduce_mean",
            11,
            {
                "the custom loop's loss is scaled by the global batch size": "compute_loss must "
                "divide"
            },
        ),
        (
            "no_scope",
            11,
            {"fit_model was trained under MirroredStrategy": "inside `with strategy.scope():`"},
        ),
        (
            "wrong_global_batch",
            10,
            {
                "fit took one optimizer step per global batch": "batch train_ds with GLOBAL_BATCH",
                "the custom loop took one optimizer step per global batch": "it should have",
            },
        ),
        (
            "missing_advanced",
            10,
            {
                "the restored fit checkpoint is the last one and its test accuracy is right": (
                    "no 'advanced_fit'"
                ),
                (
                    "the restored custom-loop checkpoint is the newest "
                    "and its test accuracy is right"
                ): "no 'advanced_custom'",
            },
        ),
    ],
)
def test_mistakes_lose_the_points_they_deserve(batch, student, score, failing):
    grades, out, _ = batch
    g = grades[student]
    assert g.status == "graded"
    assert set(failed(g)) == set(failing), failed(g)
    for title, words in failing.items():
        assert words in failed(g)[title], failed(g)[title]
    assert g.score == score
    report = (out / student / "report.md").read_text()
    assert all(title in report and "FAILED" in report for title in failing)


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
    assert _survivors() == []


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
    assert report[str(ROOT)] == "OSError" and report["/var/tmp"] == "OSError", report


def test_a_print_flood_costs_only_its_cell(batch):
    grades, out, _ = batch
    g = grades["flood"]
    assert g.status == "graded", g.reason
    assert any("outputs cut in cell 0" in note for note in g.notes), g.notes
    executed = (out / "flood" / "executed.ipynb").read_text()
    assert "after the flood" in executed, "the next cell still ran"
    assert "bytes of output dropped" in executed
    assert len(executed) < 2 * 2**20


def test_an_archive_bomb_and_links_fail_their_own_checks(batch):
    grades, out, _ = batch
    g = grades["bomb"]
    assert g.score == 0
    messages = " ".join(failed(g).values())
    assert "fit_model.keras unpacks to 2 files and 300 MB" in messages, messages
    assert "artifact custom_model.keras is a symbolic link: ignored" in g.notes, g.notes
    assert "artifact everything is a symbolic link: ignored" in g.notes, g.notes


def test_a_cell_that_ignores_interrupts_gets_the_kernel_killed(batch):
    grades, out, _ = batch
    g = grades["deaf"]
    assert g.status == "killed", (g.status, g.reason)
    assert "cell 0 ignored the interrupt" in g.reason
    assert "ignored the interrupt" in (out / "deaf" / "report.md").read_text()
    assert g.run_seconds < 90 + 60, "it did not wait for the notebook limit"


# --- limits on tiny notebooks, and the checks' artifact limits ---------------------------------


def _outputs(outcome) -> str:
    return "".join(o.get("text", "") for c in outcome.notebook.cells for o in c.get("outputs", []))


def test_memory_limit_kills_the_kernel_and_its_children(tmp_path, sandboxed):
    notebook = _notebook(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {TOKEN}'])",
        "hog = []\nwhile True:\n    hog.append(bytearray(20 * 2**20))",
        "print('never')",
    )
    outcome, _, _ = grading.run_submission(
        notebook, tmp_path, {**os.environ, **ENV}, grading.Limits(60, 120, memory_mb=400)
    )
    assert outcome.status == "killed" and "memory limit" in outcome.reason
    assert _survivors() == [], "the process the kernel started is gone"


def test_an_interrupted_cell_lets_the_next_cells_run_and_a_crash_is_reported(tmp_path, sandboxed):
    loop = _notebook("while True:\n    pass", "print('next cell ran')")
    outcome, _, _ = grading.run_submission(
        loop, tmp_path / "loop", {**os.environ, **ENV}, grading.Limits(3, 60)
    )
    assert outcome.status == "ran" and outcome.timed_out_cells == [0]
    assert "next cell ran" in _outputs(outcome)
    assert any("KeyboardInterrupt" in error for error in outcome.cell_errors)
    crash = _notebook("import os\nos.kill(os.getpid(), 9)", "print('never')")
    outcome, _, _ = grading.run_submission(
        crash, tmp_path / "crash", {**os.environ, **ENV}, grading.Limits(30, 60)
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
    writer = _notebook(f"open({str(solution)!r}, 'a').write('{TOKEN}')")
    grades = grading.grade(
        [write(writer, tmp_path / "writer.ipynb")],
        tmp_path / "grades",
        solution=solution,
        limits=grading.Limits(cell_timeout=60, timeout=300),
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
    assert grading.batch_data("auto") == "tfds" and prepared == [True]
    assert grading.batch_data("tfds") == "tfds" and prepared == [True]  # once
    monkeypatch.setattr(data, "real_data_status", lambda name: (False, "offline"))
    assert grading.batch_data("auto") == "synthetic"
    assert grading.batch_data("synthetic") == "synthetic"
    prepared.clear()
    with pytest.raises(data.DataUnavailableError, match="COURSE_DATA=tfds needs the real"):
        grading.batch_data("tfds")
