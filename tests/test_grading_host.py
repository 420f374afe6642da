"""The grader and the instructor's host: what `course grade` must never touch or trust there.

- A student's folder of the grades is emptied before it is graded, so a student named like a
  folder already in --out that the grader did not write (the checkout, the datasets) stops the
  batch with exit code 2 before anything is written or removed, on every route.
- The check process never runs from a folder that holds students' folders: a student named like
  an optional module (jax, brotli) cannot shadow it and stop the check process from starting.
- Run as root, the pre-flight check walks the course's packages and the venv whatever imports
  succeed: one module the sandbox's uid cannot read stops the batch before any row.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
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

from course_tools.exercise import HiddenTest
from course_tools.grade.core import checker, one_submission, plan, report, roster, staging
from course_tools.grade.core.plan import GradingSettings
from course_tools.grade.jail import identity, sandbox
from course_tools.runner import Limits

ROOT = Path(__file__).resolve().parents[1]


def _grade(subs: Path, out: Path, *options: str, cwd: Path = ROOT, env=None, timeout=120):
    command = [sys.executable, "-m", "course_tools.cli", "grade", str(subs), f"--out={out}"]
    command += [f"--solution={SOLUTION}", "--data=synthetic", "--jobs=1", *options]
    env = {**os.environ, **(env or {})}
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- 1. a student named like a folder of --out ------------------------------------------------


@pytest.mark.parametrize("route", [[], ["--slurm"], ["--no-sandbox"]])
def test_a_student_named_like_a_folder_of_out_stops_the_batch_before_anything(tmp_path, route):
    """--out holds the datasets (data/) beside an earlier batch's grades: a notebook data.ipynb
    is refused with exit code 2, naming the student, the folder and what to do; the dataset,
    the earlier grades and --out are as they were (the dataset was deleted and replaced by the
    student's grades, rc 0, before)."""
    out = tmp_path / "out"
    dataset = out / "data" / "svhn_cropped" / "3.1.0"
    dataset.mkdir(parents=True)
    (dataset / "dataset_info.json").write_text("{}")
    subs = tmp_path / "subs"
    subs.mkdir()
    write(notebook_of("x = 1"), subs / "alice.ipynb")
    write(notebook_of("x = 2"), subs / "data.ipynb")
    report.save(report.Grade("alice", subs / "alice.ipynb", "graded"), out / "alice")
    before = _tree(out)
    done = _grade(subs, out, *route)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    said = done.stderr
    assert "'data'" in said and f"{out / 'data'}" in said, said
    assert "another --out" in said and "rename" in said and "Nothing was written" in said, said
    assert _tree(out) == before, "nothing written or removed in --out"


def test_only_a_folder_the_grader_wrote_is_a_grades_folder(tmp_path):
    """An earlier grade (its result.json) or the grader's mark is the grader's; an empty folder,
    a link to a grades folder, a file, or a marked folder holding a submission or the course's
    checkout is not: `check_out` refuses each, and `grade_one` too, before anything is touched."""
    out = tmp_path / "out"
    subs = tmp_path / "subs"
    subs.mkdir()
    names = ["old", "marked", "empty", "link", "file"]
    submissions = [
        roster.Submission(n, write(notebook_of("x = 1"), subs / f"{n}.ipynb")) for n in names
    ]
    report.save(report.Grade("old", subs / "old.ipynb", "graded"), out / "old")
    (out / "marked").mkdir()
    (out / "marked" / plan.GRADES_MARK).write_text("")
    (out / "empty").mkdir()
    (out / "link").symlink_to(out / "old")
    (out / "file").write_text("the instructor's notes")
    (out / "holder").mkdir()
    (out / "holder" / plan.GRADES_MARK).write_text("")
    inside = roster.Submission("holder", write(notebook_of("x = 1"), out / "holder" / "h.ipynb"))
    plan.check_out(out, submissions[:2])  # an earlier grade, a marked folder: the grader's
    for s in [*submissions[2:], inside]:
        with pytest.raises(ValueError, match=f"graded as '{s.student}' into {out / s.student},"):
            plan.check_out(out, [s])
    # a folder of --out that holds the checkout the grader runs from, marked or not
    checkout = roster.Submission(plan.PACKAGE_ROOT.name, subs / "old.ipynb")
    with pytest.raises(ValueError, match=f"which holds {plan.PACKAGE_ROOT}"):
        plan.check_out(plan.PACKAGE_ROOT.parent, [checkout])
    batch = plan.Batch(
        out=out,
        solution_path=SOLUTION,
        solution_bytes=SOLUTION.read_bytes(),
        settings=GradingSettings(),
        limits=Limits(),
        sandboxed=False,
    )
    where = one_submission.Workspace(checks=None, base=tmp_path)
    with pytest.raises(ValueError, match="is not a grades folder"):
        one_submission.grade_one(batch, submissions[names.index("file")], where)
    assert (out / "file").read_text() == "the instructor's notes"
    assert (out / "empty").is_dir() and (out / "holder" / "h.ipynb").is_file()


# --- 2. a student named like an optional module -----------------------------------------------

SHADOWS = ("jax", "brotli", "pandas", "simplejson")


def _batch(out: Path, *, sandboxed: bool) -> plan.Batch:
    settings = GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    out.mkdir(parents=True, exist_ok=True)
    return plan.Batch(
        out=out,
        solution_path=SOLUTION,
        solution_bytes=SOLUTION.read_bytes(),
        settings=settings,
        limits=Limits(memory_mb=4096),
        sandboxed=sandboxed,
    )


@pytest.mark.parametrize("route", ["unsandboxed", "sandboxed", "in their folder"])
def test_students_named_like_modules_never_stop_the_check_process(tmp_path, route):
    """Students named jax, brotli, pandas and simplejson already graded in --out (unsandboxed) or
    left staged for the check process (sandboxed): a check process started after them is ready
    and passes a test that imports what those names would shadow (before: "grader error", the
    check process could not start: "module 'brotli' has no attribute 'error'"); even one whose
    working folder holds them (as with an --out of /tmp/jax: its private /tmp holds the view)."""
    sandboxed = route == "sandboxed"
    if sandboxed and not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    batch = _batch(tmp_path / "grades", sandboxed=sandboxed)
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    where = staging.folder(base) if sandboxed else batch.out
    for name in SHADOWS:
        (where / name / "artifacts").mkdir(parents=True)
        (where / name / "artifacts").chmod(0o755)
        (where / name).chmod(0o755)
    source = "import urllib3, requests, tensorflow as tf\nassert hasattr(tf, '__version__')"
    tests = [HiddenTest(question="1", title="imports", points=1, source=source, cell_index=0)]
    if route == "in their folder":
        env = {**os.environ, **batch.settings.env()}
        checks = checker.CheckProcess(env, batch.out, batch.out / "checks.log", run_in=batch.out)
    else:
        checks = plan.start_checks(batch, base)
    try:
        verdicts = checks.run(batch.out / "honest" / "artifacts", {}, tests, timeout=240)
    finally:
        checks.close()
        checks.stop()
    assert verdicts == [(True, "")], verdicts


def test_a_students_staged_folder_is_removed_after_its_check(tmp_path, monkeypatch):
    """After a sandboxed check, the staging folder holds nothing of the student: no empty folder
    named after it that a later check process could import."""
    batch = _batch(tmp_path / "grades", sandboxed=True)
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    seen = []

    class Checks:
        def run(self, artifacts, facts, tests, timeout, observed=None):
            seen.append(sorted(p.name for p in staging.folder(base).iterdir()))
            return [(True, "")] * len(tests)

    def ran(batch, g, notebook, base, cancel):
        (batch.out / g.student / "artifacts").mkdir(parents=True, exist_ok=True)
        (batch.out / g.student / "artifacts" / "results.json").write_text("{}")
        return None, {}

    monkeypatch.setattr(one_submission, "_run", ran)
    monkeypatch.setattr(one_submission, "observations", lambda outcome: {})
    notebook = write(completed_exercise(), tmp_path / "jax.ipynb")
    where = one_submission.Workspace(Checks(), base, threading.Event())
    g = one_submission.grade_one(batch, roster.Submission("jax", notebook), where)
    assert g.status == "graded", (g.status, g.reason)
    assert seen == [["jax"]], "the check saw the student's staged copy"
    assert list(staging.folder(base).iterdir()) == []
    assert (batch.out / "jax" / plan.GRADES_MARK).is_file()


# --- 3. the root pre-flight walks the packages ------------------------------------------------


def test_one_course_module_the_sandboxs_uid_cannot_read_stops_the_batch(tmp_path):
    """Run as root from a checkout whose course_utils/data.py alone is 0600 (a `git pull` under
    umask 077): exit code 2 naming that file before any row (the completed exercise scored 2/12
    "graded", exit code 0, before: the file is imported only by the kernels and the tests)."""
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    if not identity.privileged():
        pytest.skip("the sandbox gets a uid of its own only as root")
    ck = copy_of_the_course(tmp_path / "ck", closed=False)
    (ck / "course_utils" / "data.py").chmod(0o600)
    subs = tmp_path / "subs"
    subs.mkdir()
    write(completed_exercise(), subs / "honest.ipynb")
    out = tmp_path / "grades"
    done = _grade(subs, out, cwd=ck, env={"PYTHONPATH": str(ck)}, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert f"cannot read {ck}/course_utils/data.py" in done.stderr, done.stderr
    assert f"chmod -R o+rX {ck}/course_utils" in done.stderr, done.stderr
    assert not out.exists(), "nothing is written before the check"
