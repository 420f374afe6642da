"""The grader's own Python processes and file names, whatever the instructor's folder and the
students' names.

- Every Python process the grader starts (the local grading child, the Slurm task, its child and
  its script's clean-up) imports nothing from the folder `course grade` is run from, even with an
  empty PYTHONPATH entry: run from a submission's folder, its `nbformat/__init__.py` never runs.
- A notebook's name of 249 characters (a legal file name) and a student named `check-process`
  are graded like any other, beside the rest.
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import subprocess
import sys
from pathlib import Path

from grading_submissions import SOLUTION, notebook_of, write

from course_tools.grade.core import checker, plan
from course_tools.grade.routes import slurm_array, supervised
from course_tools.runner import Limits

COURSE = Path(sys.executable).parent / "course"  # the console script: never `-m` here either
LONG = "l" * 249  # with ".ipynb": 255 bytes, the longest file name


def _shadow(folder: Path, marker: Path, module: str = "nbformat") -> None:
    """A module `module` in `folder` that leaves `marker` when imported."""
    (folder / module).mkdir(parents=True)
    code = f"open({str(marker)!r}, 'a').write(__name__ + ' ' + str(__import__('os').getpid()))\n"
    (folder / module / "__init__.py").write_text(code)


def _gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def test_graded_from_a_submissions_folder_its_modules_never_run_and_every_name_is_graded(tmp_path):
    """`course grade alice.ipynb <others>` run from alice's folder, which holds
    `nbformat/__init__.py` (before: it ran in the grading child, as the grader's user, outside
    the sandbox, and could rewrite grades); beside her a 249-character notebook name (before: the
    grading child died on its mark file, no row for it or those after it) and a student named
    check-process (before: "grader error", FileExistsError on the check process's folder)."""
    alice, others, out = tmp_path / "alice", tmp_path / "others", tmp_path / "grades"
    alice.mkdir()
    others.mkdir()
    marker = tmp_path / "IMPORTED"
    _shadow(alice, marker)
    write(notebook_of("x = 1"), alice / "alice.ipynb")
    write(notebook_of("x = 2"), others / f"{LONG}.ipynb")
    write(notebook_of("x = 3"), others / "check-process.ipynb")
    command = [str(COURSE), "grade", "alice.ipynb", str(others), f"--out={out}"]
    command += [f"--solution={SOLUTION}", "--data=synthetic", "--jobs=1"]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=alice, timeout=900, check=False
    )
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, said
    rows = _gradebook(out)
    assert sorted(rows) == sorted(["alice", LONG, "check-process"]), rows
    assert {row["status"] for row in rows.values()} == {"graded"}, rows
    assert "FileExistsError" not in said and "Traceback" not in said, said


def test_the_local_grading_child_ignores_its_working_folder_and_empty_pythonpath(
    tmp_path, monkeypatch
):
    """The child as `supervised` starts it (its argv, its environment), here from a folder that
    holds `nbformat/__init__.py`, with the common `PYTHONPATH=$PYTHONPATH:/x` (an empty entry,
    read as the working folder) and a relative one: the child imports its plan module, which
    imports nbformat, and nbformat is never the folder's."""
    marker = tmp_path / "IMPORTED"
    folder = tmp_path / "student"
    _shadow(folder, marker)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", ".", "student", str(tmp_path / "x")]))
    argv = supervised._child_argv(tmp_path / "plan.json", 1, ["alice"], progress=False)
    assert "-m" not in argv[:2], argv
    env = checker.child_env()
    assert env["PYTHONPATH"] == str(tmp_path / "x"), env["PYTHONPATH"]
    # --help: the module and its imports load, then it exits
    code, _ = supervised.run_child([*argv[:3], "--help"])
    assert code == 0
    assert not marker.exists(), marker.read_text()
    # the same without the grader's launcher: the folder's nbformat runs (what the test guards)
    bare = subprocess.run(
        [sys.executable, "-m", "course_tools.grade.routes.supervised", "--help"],
        capture_output=True,
        check=False,
    )
    assert marker.exists(), bare


def test_the_slurm_tasks_processes_start_in_the_plans_folder_without_the_submit_folder(
    tmp_path, monkeypatch
):
    """The sbatch script runs in sbatch's folder (the instructor's, here one with
    `course_tools/__init__.py`): it moves to the plan's folder, keeps only PYTHONPATH's absolute
    entries, and starts the task and its `release` clean-up never as `-m`; that clean-up, run as
    the script runs it from that folder with an empty PYTHONPATH entry, imports nothing of it."""
    marker = tmp_path / "IMPORTED"
    submit = tmp_path / "submit"
    _shadow(submit, marker, "course_tools")
    b = plan.Batch(tmp_path, SOLUTION, SOLUTION.read_bytes(), plan.GradingSettings(), Limits())
    plan_file = tmp_path / ".batch" / "plan.json"
    plan_file.parent.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", str(tmp_path / "x")]))
    script = slurm_array.batch_script(b, plan_file, 2, slurm_array.SlurmOptions())
    lines = script.splitlines()
    first_python = next(i for i, line in enumerate(lines) if sys.executable in line)
    assert f"cd {shlex.quote(str(plan_file.parent))} || exit 1" in lines[:first_python], script
    assert f"export PYTHONPATH={shlex.quote(str(tmp_path / 'x'))}" in lines[:first_python]
    assert " -m " not in script, script
    kept = [
        line
        for line in lines
        if line.startswith(("cd ", "export PYTHONPATH", "unset PYTHONPATH", "release()"))
    ]
    assert len(kept) == 3, script
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-c", "\n".join([*kept, f"release {shlex.quote(str(work))}"])],
        cwd=submit,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(["", str(Path.cwd())])},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), marker.read_text()


def test_the_slurm_tasks_child_starts_in_the_plans_folder_with_absolute_pythonpath(
    tmp_path, monkeypatch
):
    """`run_task` starts its grading child as `supervised` does: never `-m`, in the plan's
    folder, PYTHONPATH's empty and relative entries dropped."""
    started = []

    class Child:
        pid = 0

        def __init__(self, argv, **options):
            started.append((argv, options))

        def wait(self):
            return 0

    b = plan.Batch(tmp_path, SOLUTION, SOLUTION.read_bytes(), plan.GradingSettings(), Limits())
    plan_file = b.save_plan([])
    monkeypatch.setattr(slurm_array.subprocess, "Popen", Child)
    monkeypatch.setattr(slurm_array, "load_task", lambda p: (b, [plan.Submission("a", tmp_path)]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", "rel", str(tmp_path / "x")]))
    assert slurm_array.run_task(plan_file, 0) == 0
    [(argv, options)] = started
    assert argv[:3] == checker.child_argv(slurm_array.TASK_MODULE)
    assert argv[3:] == [str(plan_file), "0", "--child"]
    assert options["cwd"] == plan_file.parent
    assert options["env"]["PYTHONPATH"] == str(tmp_path / "x")


def test_a_long_students_mark_files_fit_a_file_name(tmp_path):
    """The grading child's marks for a student whose name is 249 characters are written and read
    back (before: `.<name>.json.tmp`, 260 bytes, OSError ENAMETOOLONG, the batch stopped)."""
    marks = supervised.RunningMarks(tmp_path / "running", 2)
    marks.started(LONG)
    marks.started("bob")
    assert {s: m.state for s, m in supervised.read_marks(tmp_path / "running").items()} == {
        LONG: "running",
        "bob": "running",
    }
    marks.done(LONG)
    assert supervised.read_marks(tmp_path / "running")[LONG].state == "done"
    assert all(len(p.name) <= 64 for p in (tmp_path / "running").iterdir())


def test_programs_run_by_name_are_never_found_in_the_working_folder(monkeypatch, tmp_path):
    """The grader runs bwrap, mount, chown, sbatch... by name: `course grade` first drops PATH's
    empty and relative entries (a `.` would find them in the folder it is run from, a
    submission's own at times), and its Python children get the same PATH."""
    from course_tools.grade import command
    from course_tools.grade.core import checker

    monkeypatch.setenv("PATH", f".{os.pathsep}{os.pathsep}bin{os.pathsep}/usr/bin")
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args([str(tmp_path / "missing.ipynb"), "--out", str(tmp_path / "out")])
    assert command.run(args) == 2  # bad input: nothing graded, PATH cleaned first
    assert os.environ["PATH"] == "/usr/bin"
    assert checker.child_env({"PATH": f"rel{os.pathsep}/bin"})["PATH"] == "/bin"
    assert "PATH" not in checker.child_env({"PATH": f".{os.pathsep}"})


def test_a_kernel_log_shows_control_bytes_instead_of_acting_on_them(tmp_path):
    """`kernel.log` is a kernel's own stderr: an escape sequence a submission writes there (a
    window title, a cleared screen, a fake 'all graded' line in colour) is written as \\xNN, so
    `cat kernel.log` shows it; newlines and tabs stay."""
    from course_tools import runner

    read, write = os.pipe()
    os.write(write, b"\x1b]0;OWNED\x07\x1b[2J\x1b[32mall 12 / 12 graded\x1b[0m\tok\n")
    os.close(write)
    log = runner.CappedLog(os.fdopen(read, "rb"), tmp_path / "kernel.log", limit=2**20)
    log.start()
    log.join(10)
    kept = (tmp_path / "kernel.log").read_bytes()
    assert b"\x1b" not in kept and b"\x07" not in kept
    assert kept == rb"\x1b]0;OWNED\x07\x1b[2J\x1b[32mall 12 / 12 graded\x1b[0m" + b"\tok\n"
