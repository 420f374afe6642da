"""`course grade --slurm` on a real single-node Slurm (tests/slurm.py) whose tasks cannot start.

Slurm holds a task whose launch failed (here: a Prolog that fails, as slurmd's would on a node
it cannot prepare) with squeue's reason "launch failed requeued held", and a task submitted with
`--hold` with "JobHeldUser": such a task stays pending until someone runs `scontrol release`.
The grader must not wait for it forever: it cancels the array and fails with a message that
names the task, Slurm's reason and what to do; the rows of the tasks that finished stay, squeue
holds nothing afterwards, and a re-run grades the held one (its solution copy written again).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import slurm
from grading_submissions import ENV, SOLUTION, notebook_of, write
from helpers import require_or_skip

from course_tools.grade.core import plan as grading_plan
from course_tools.grade.core import report, roster
from course_tools.grade.jail import sandbox
from course_tools.grade.routes import slurm_array
from course_tools.runner import Limits

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: slurmd runs it before each batch launch: the first launch passes, every later one fails while
#: the cluster folder holds FAIL (the node is drained and the task requeued held, as after any
#: failed launch); never fails once FAIL is gone.
PROLOG = """#!/bin/sh
folder=$(dirname "$0")
launched=$(ls "$folder"/launched-* 2>/dev/null | wc -l)
touch "$folder/launched-$SLURM_JOB_ID"
[ "$launched" -eq 0 ] || [ ! -e "$folder/FAIL" ]
"""
#: Seconds the grader may take to see a held task and cancel the array (it used to wait forever).
NOTICE_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_or_skip("slurm", slurm.missing_programs())
    if not sandbox.status()[0]:
        require_or_skip("sandbox", f"no grading sandbox: {sandbox.status()[1]}")
    folder = tmp_path_factory.mktemp("slurm")
    (folder / "prolog").write_text(PROLOG)
    (folder / "prolog").chmod(0o755)
    (folder / "FAIL").touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slurm, "SLURM_CONF", slurm.SLURM_CONF + "Prolog={folder}/prolog\n")
        with slurm.single_node_slurm(folder) as cluster:
            yield cluster


def course_grade(*args: str) -> list[str]:
    """`course grade --slurm` with this test's settings (2 CPUs a task: one task at a time)."""
    return [
        str(Path(sys.executable).with_name("course")),
        "grade",
        *args,
        "--slurm",
        "--cpus-per-task=2",
        f"--profile={ENV['COURSE_PROFILE']}",
        f"--devices={ENV['COURSE_DEVICES']}",
        f"--data={ENV['COURSE_DATA']}",
        "--cell-timeout=90",
        "--timeout=600",
    ]


def grade(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        course_grade(*args), env=cluster.env, capture_output=True, text=True, timeout=NOTICE_S
    )


def notes(out: Path) -> dict[str, str]:
    """{student: notes} of the gradebook."""
    with open(out / "gradebook.csv") as handle:
        return {row["student"]: row["notes"] for row in csv.DictReader(handle)}


def gradebook(out: Path) -> dict[str, tuple[str, str]]:
    """{student: (status, score)} of the gradebook."""
    with open(out / "gradebook.csv") as handle:
        return {row["student"]: (row["status"], row["score"]) for row in csv.DictReader(handle)}


def test_a_task_held_after_a_failed_launch_cancels_the_array_and_a_rerun_grades_it(
    cluster, tmp_path
):
    """One task at a time: the first launch passes and is graded, the second fails in the Prolog
    and Slurm holds it. The grader cancels the array and says which task, why and what to do
    (exit 1, as for a killed task); the finished row stays, the held one's says why. Once the
    cause is gone (the Prolog passes, the drained node resumed) the same command grades the held
    one, with a solution copy of its own (the cancelled batch removed its copy)."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in ("ann", "bob"):
        write(notebook_of("print(1)"), folder / f"{name}.ipynb")
    out = tmp_path / "grades"
    done = grade(cluster, str(folder), f"--out={out}")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    rows = gradebook(out)
    (held,) = [student for student, (status, _) in rows.items() if status == "task cancelled"]
    (graded,) = [student for student, (status, _) in rows.items() if status == "graded"]
    index = sorted(rows).index(held)
    assert f"task {index} ({held}) cannot start, squeue says 'launch failed requeued held'" in said
    assert "slurmd log" in said and "scontrol release" in said and "run the same command" in said
    assert f"the grader failed on 1 submission(s) ({held})" in said, said
    assert "squeue: 'launch failed requeued held'" in notes(out)[held], notes(out)[held]
    assert cluster.jobs() == [], "the held task is still in squeue"
    assert not (out / grading_plan.PLAN_FOLDER / grading_plan.SOLUTION_COPY).exists()
    assert report.load(out / graded) is not None and report.load(out / held) is None

    (cluster.folder / "FAIL").unlink()
    cluster.run("scontrol", "update", "NodeName=localhost", "State=RESUME")
    rerun = grade(cluster, str(folder), f"--out={out}")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "1 of 2 submissions" in rerun.stdout, rerun.stdout
    assert {status for status, _ in gradebook(out).values()} == {"graded"}
    again = report.load(out / held)
    assert again is not None and not again.grader_failed, again
    assert cluster.jobs() == []


def test_a_task_submitted_held_cancels_the_array(cluster, tmp_path):
    """A task held from its submission on (sbatch --hold: JobHeldUser) never starts by itself."""
    submission = write(notebook_of("print(1)"), tmp_path / "cat.ipynb")
    out = tmp_path / "grades"
    done = grade(cluster, str(submission), f"--out={out}", "--sbatch-arg=--hold")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "task 0 (cat) cannot start, squeue says 'JobHeldUser'" in said, said
    assert "scontrol release" in said and "Cancelling Slurm job" in said, said
    assert gradebook(out) == {"cat": ("task cancelled", "0")}
    assert "squeue: 'JobHeldUser'" in notes(out)["cat"], notes(out)
    assert cluster.jobs() == []


@pytest.mark.parametrize(
    "reason",
    [
        "launch failed requeued held",
        "user env retrieval failed requeued held",
        "job requeued in held state",
        "JobHeldAdmin",
        "JobHeldUser",
        "DependencyNeverSatisfied",
        "BadConstraints",
        "InvalidAccount",
        "PartitionTimeLimit",
        "QOSMaxWallDurationPerJobLimit",
        "AssocMaxCpuPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "QOSMaxCpuPerJobLimit",
        "QOSMaxCpuMinutesPerJobLimit",
        "QOSMaxMemoryPerNode",
        "QOSMinGRES",
        "QOSMinCpuNotSatisfied",
        "QOSNotAllowed",
        "MaxMemPerLimit",
    ],
)
def test_held_and_never_startable_reasons_end_the_wait(reason):
    assert slurm_array.never_starts(reason)


@pytest.mark.parametrize(
    "reason",
    [
        "None",
        "Priority",
        "Resources",
        "Dependency",
        "BeginTime",
        "Cleaning",
        "PartitionDown",
        "ReqNodeNotAvail, UnavailableNodes:localhost",
        "QOSMaxCpuPerUserLimit",
        "AssocGrpCpuLimit",
        # caps on running jobs, or on what they use together: they free as earlier tasks end
        "AssocMaxJobsLimit",
        "AssocMaxSubmitJobLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSMaxJobsPerAccount",
        "QOSMaxCpuPerAccount",
        "QOSMaxNodePerAccount",
        "QOSMaxMemoryPerAccount",
        "QOSMaxGRESPerAccount",
        "QOSGrpJobsLimit",
        "JobArrayTaskLimit",
        # "held" in a node's name is not a held task
        "ReqNodeNotAvail, UnavailableNodes:shelduck1",
        "ReqNodeNotAvail, UnavailableNodes:launchfailed2",
    ],
)
def test_a_task_that_may_still_start_is_waited_for(reason):
    assert slurm_array.never_starts(reason) is None


def test_a_task_started_after_its_batch_ended_grades_nothing_and_says_so(tmp_path):
    """A late task (its array cancelled, or Slurm could not confirm that every task ended) finds
    the solution's copy removed: it saves no grade, never a 0, and says why; a re-run grades it
    (no Slurm needed: the task's command itself, as its script runs it)."""
    settings = grading_plan.GradingSettings(
        ENV["COURSE_PROFILE"], int(ENV["COURSE_DEVICES"]), ENV["COURSE_DATA"]
    )
    b = grading_plan.prepare(tmp_path / "grades", SOLUTION, settings, Limits())
    submissions = [roster.Submission("dan", write(notebook_of("print(1)"), tmp_path / "dan.ipynb"))]
    plan = b.save_plan(submissions)
    b.forget_solution()  # as at the end of the cancelled batch
    task = [sys.executable, "-m", slurm_array.TASK_MODULE, str(plan), "0"]
    done = subprocess.run(task, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "has ended" in done.stderr and "run the same command again" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert report.load(b.out / "dan") is None
    assert grading_plan.to_grade(b, submissions, regrade=False) == submissions


def test_a_slurm_array_run_from_the_submissions_folder_never_imports_from_it(cluster, tmp_path):
    """`course grade . --slurm` run from a folder whose only folder is `course_tools/` with an
    `__init__.py` (read as one student's folder, named after itself): the task, its grading child
    and its script's clean-up (which ran as `python -m` in sbatch's folder, this one) never import
    it; it is graded."""
    (cluster.folder / "FAIL").unlink(missing_ok=True)  # every launch passes
    subs, out, marker = tmp_path / "submissions", tmp_path / "grades", tmp_path / "IMPORTED"
    (subs / "course_tools").mkdir(parents=True)
    write(notebook_of("print(1)"), subs / "course_tools" / "course_tools.ipynb")
    (subs / "course_tools" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write(__name__ + ' ' + str(__import__('os').getpid()))\n"
    )
    done = subprocess.run(
        course_grade(".", f"--out={out}"),
        env=cluster.env,
        cwd=subs,
        capture_output=True,
        text=True,
        timeout=NOTICE_S,
        check=False,
    )
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    # a folder given alone that holds one folder only is one student's, named after itself
    assert gradebook(out) == {"submissions": ("graded", "0")}
    assert cluster.jobs() == []
