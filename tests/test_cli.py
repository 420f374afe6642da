"""The `course` command: doctor, and run with its build/ summary, stop-at-first-failure, two
notebooks at a time but the self-timing ones alone, and Ctrl-C."""

import json
import os
import re
import signal
import subprocess
import sys
import time

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
        notebooks / "01_ok.ipynb",
        "import os\nprint('profile', os.environ['COURSE_PROFILE'])",
        "os.makedirs('artifacts/01_ok'); open('artifacts/01_ok/mark', 'w').close()",
    )
    _notebook(notebooks / "02_fails.ipynb", "x = 1", "raise ValueError('broken on purpose')")
    _notebook(notebooks / "03_never.ipynb", "print('should not run')")
    proc = subprocess.run(
        [*COURSE, "run", "--jobs", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=300
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
    # The kernel worked in build/: its files are there, and the checkout's notebooks/ is untouched.
    assert (tmp_path / "build" / "artifacts" / "01_ok" / "mark").is_file()
    assert sorted(p.name for p in notebooks.iterdir()) == [
        "01_ok.ipynb",
        "02_fails.ipynb",
        "03_never.ipynb",
    ]
    assert _processes_in(tmp_path) == [], "a kernel outlived `course run`"


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


#: A cell that sleeps, then writes when it ran (monotonic start, end) into ../ran-<name>.json
#: (the kernel works in build/).
STAMP = (
    "import json, time\n"
    "start = time.monotonic(); time.sleep(SECONDS)\n"
    "open('../ran-NAME.json', 'w').write(json.dumps([start, time.monotonic()]))"
)


def _course_with(tmp_path, names_and_seconds, timed=()):
    (tmp_path / "course_utils").mkdir()
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name, seconds in names_and_seconds:
        sources = [STAMP.replace("NAME", name).replace("SECONDS", str(seconds))]
        if name in timed:  # what makes a notebook time itself: it times with timing.Timer
            sources.append("# with timing.Timer() as timer: ...")
        _notebook(notebooks / f"{name}.ipynb", *sources)
    return notebooks


def test_run_shares_the_machine_two_at_a_time_but_a_self_timing_notebook_runs_alone(tmp_path):
    _course_with(
        tmp_path, [("01_a", 3), ("02_timed", 1), ("03_b", 3), ("04_c", 1)], timed={"02_timed"}
    )
    proc = subprocess.run(
        [*COURSE, "run", "--jobs", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {n: json.loads((tmp_path / f"ran-{n}.json").read_text()) for n in
           ("01_a", "02_timed", "03_b", "04_c")}  # fmt: skip
    overlaps = lambda a, b: ran[a][0] < ran[b][1] and ran[b][0] < ran[a][1]  # noqa: E731
    assert overlaps("01_a", "03_b"), ran  # the two first untimed ones side by side
    assert not any(overlaps("02_timed", other) for other in ("01_a", "03_b", "04_c")), ran
    assert ran["02_timed"][0] > max(ran[n][1] for n in ("01_a", "03_b", "04_c")), ran
    summary = json.loads((tmp_path / "build" / "summary.json").read_text())
    assert [row["notebook"] for row in summary["notebooks"]] == [
        f"notebooks/{n}.ipynb" for n in ("01_a", "02_timed", "03_b", "04_c")
    ]
    assert all(row["ok"] for row in summary["notebooks"])
    assert summary["wall_seconds"] < sum(row["seconds"] for row in summary["notebooks"])
    assert _processes_in(tmp_path) == []


def test_ctrl_c_stops_both_running_notebooks_and_leaves_no_kernel(tmp_path):
    _course_with(tmp_path, [("01_a", 120), ("02_b", 120), ("03_c", 1)])
    # As from a terminal: SIGINT at its default. A suite started in the background by a
    # non-interactive shell inherits SIGINT ignored (POSIX), and so would `course run`.
    proc = subprocess.Popen(
        [*COURSE, "run", "--jobs", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while len(_processes_in(tmp_path)) < 2:  # both kernels up
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:  # a failed test leaves nothing running either
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and time.monotonic() - started < 30, stdout + stderr
    assert not (tmp_path / "ran-01_a.json").exists() and not (tmp_path / "ran-03_c.json").exists()
    assert _processes_in(tmp_path) == [], "a kernel outlived Ctrl-C"


def test_grade_accepts_the_cpu_profile_and_passes_it_to_the_notebooks():
    import argparse

    from course_tools.grade import command
    from course_tools.grade.core.plan import GradingSettings

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["alice.ipynb", "--profile", "cpu"])
    settings = GradingSettings(profile=args.profile, devices=args.devices)
    assert settings.env()["COURSE_PROFILE"] == "cpu"
    assert parser.parse_args(["alice.ipynb"]).profile == "quick"
    proc = subprocess.run(
        [*COURSE, "grade", "alice.ipynb", "--profile", "gpu"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "invalid choice: 'gpu'" in proc.stderr
