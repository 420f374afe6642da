"""The `course` command: doctor, and run with its build/ summary and stop-at-first-failure."""

import json
import os
import re
import subprocess
import sys

import nbformat
from helpers import ROOT
from nbformat.v4 import new_code_cell, new_notebook

COURSE = [sys.executable, "-m", "course_tools.cli"]


def test_doctor_reports_four_devices_and_exits_0():
    env = {**os.environ, "COURSE_DEVICES": "4", "COURSE_DATA": "auto"}
    proc = subprocess.run(
        [*COURSE, "doctor"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^logical devices +4 ", proc.stdout, flags=re.M)
    for label in (
        "tensorflow",
        "keras",
        "tf_keras",
        "tensorflow-datasets",
        "keras flavour",
        "network",
        "data mnist",
        "cluster workers",
        "grading sandbox",
    ):
        assert re.search(rf"^{label} +\S", proc.stdout, flags=re.M), label


def _notebook(path, *sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def test_run_executes_in_order_stops_at_first_failure_and_writes_a_summary(tmp_path):
    (tmp_path / "course_utils").mkdir()
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    _notebook(
        notebooks / "01_ok.ipynb", "import os\nprint('profile', os.environ['COURSE_PROFILE'])"
    )
    _notebook(notebooks / "02_fails.ipynb", "x = 1", "raise ValueError('broken on purpose')")
    _notebook(notebooks / "03_never.ipynb", "print('should not run')")
    proc = subprocess.run(
        [*COURSE, "run"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert "broken on purpose" in proc.stderr
    summary = json.loads((tmp_path / "build" / "summary.json").read_text())
    assert [row["ok"] for row in summary["notebooks"]] == [True, False, None]
    assert "ValueError: broken on purpose" in summary["notebooks"][1]["error"]
    executed = nbformat.read(tmp_path / "build" / "01_ok.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"].strip() == "profile quick"
    assert (tmp_path / "build" / "summary.md").read_text().count("|") > 10
    assert not (tmp_path / "build" / "03_never.ipynb").exists()
    assert _processes_in(notebooks) == [], "a kernel outlived `course run`"


def _processes_in(folder):
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cwd", "cmdline"]):
        if process.info["cwd"] and process.info["cwd"].startswith(str(folder)):
            found.append((process.info["pid"], process.info["cmdline"]))
    return found


def test_commands_that_need_no_tensorflow_do_not_import_it():
    code = (
        "import sys; from course_tools.cli import main; main(['exercise', '--check']); "
        "print('TF', 'tensorflow' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "TF False" in proc.stdout


def test_grade_refuses_without_bubblewrap_unless_told_the_risk(tmp_path):
    submission = tmp_path / "alice.ipynb"
    _notebook(submission, "print('hello')")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no bwrap on this PATH
    proc = subprocess.run(
        [*COURSE, "grade", str(submission), "--out", str(tmp_path / "grades")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert "bubblewrap (bwrap) is not installed" in proc.stderr
    assert "--no-sandbox-i-trust-these-notebooks" in proc.stderr
    assert not (tmp_path / "grades").exists(), "nothing was graded"
