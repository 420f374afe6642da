"""`course grade` on submissions made here from the solution by small edits, like real mistakes.

Two batches, each graded once per test session (module fixtures):
- `batch`: the completed solution, the untouched exercise, four mistakes (reduce_mean loss, no
strategy
  scope, global batch = per-replica batch, advanced part missing) and a file that is not JSON;
  two at a
  time (jobs=2), 2 simulated devices, quick profile, synthetic data.
- `limits_batch`: tight time limits: an infinite loop, a kernel that dies, and a tampering
submission
  that steals the solution's graded files, fakes results.json, patches the grader in its kernel,
  prints "PASSED" and rewrites the hidden tests in the solution file.
Memory and notebook time limits are tested on tiny notebooks with `run_submission` directly.

Run: pytest tests/test_grading.py  (about 2-3 minutes on 2 cores).
"""

from __future__ import annotations

import copy
import csv
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from conftest import ROOT
from course_utils.tools import exercise, grading

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


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    done = completed_exercise()
    paths = [
        write(done, folder / "solution.ipynb"),
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
    ]
    shutil.copy(EXERCISE, paths[-2])
    paths[-1].write_text('{"cells": [')
    out = tmp_path_factory.mktemp("grades")
    started = time.monotonic()
    grades = grading.grade(
        paths,
        out,
        limits=grading.Limits(cell_timeout=240, timeout=900),
        jobs=2,
        progress=False,
        **_settings(),
    )
    print(
        f"\nGraded {len(paths)} submissions in {time.monotonic() - started:.0f} s (2 at a time); "
        f"solution alone: {grades[0].seconds:.0f} s\n" + (out / "gradebook.csv").read_text()
    )
    return {g.student: g for g in grades}, out


def _settings() -> dict:
    return {
        "profile": ENV["COURSE_PROFILE"],
        "devices": int(ENV["COURSE_DEVICES"]),
        "data": ENV["COURSE_DATA"],
    }


def failed(g: grading.Grade) -> dict[str, str]:
    return {r.title: r.message for r in g.results if r.earned < r.points}


def test_the_solution_scores_full_marks(batch):
    grades, out = batch
    g = grades["solution"]
    assert g.status == "graded" and not g.cell_errors, g.cell_errors
    assert failed(g) == {}, failed(g)
    assert g.score == g.max_score == 12
    assert not [note for note in g.notes if "course_utils/" not in note], (
        g.notes
    )  # others may edit course_utils
    report = (out / "solution" / "report.md").read_text()
    assert report.startswith("# solution: 12 / 12") and "to read" in report, (
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
        assert (out / "solution" / "artifacts" / name).exists(), (
            f"{name} was not kept for the instructor"
        )


def test_the_untouched_exercise_scores_zero(batch):
    grades, out = batch
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
    grades, out = batch
    g = grades[student]
    assert g.status == "graded"
    assert set(failed(g)) == set(failing), failed(g)
    for title, words in failing.items():
        assert words in failed(g)[title], failed(g)[title]
    assert g.score == score
    report = (out / student / "report.md").read_text()
    assert all(title in report and "FAILED" in report for title in failing)


def test_a_file_that_is_not_a_notebook_gets_a_report_and_zero(batch):
    grades, out = batch
    g = grades["invalid_json"]
    assert (g.status, g.score) == ("invalid notebook", 0)
    assert "cannot be read as a notebook" in (out / "invalid_json" / "report.md").read_text()


def test_the_gradebook_has_one_row_per_submission(batch):
    grades, out = batch
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


# --- time limits, crashes, tampering -----------------------------------------------------------


def _tamper_source(stolen: Path, solution_copy: Path) -> str:
    return f'''
import json, os, pathlib, shutil, sys
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
# another submission's models and checkpoints
shutil.copytree(r"{stolen}", artifacts, dirs_exist_ok=True)
results = json.loads((artifacts / "results.json").read_text())
results["fit"]["test_accuracy"] = 1.0                            # and made-up numbers
(artifacts / "results.json").write_text(json.dumps(results))
solution = pathlib.Path(r"{solution_copy}")
hidden = solution.read_text()                                    # read the hidden tests...
solution.write_text(hidden.replace("assert ", "pass  # "))       # ...and try to defuse them
# patch the grader's checks in this kernel
import course_utils.tools.checks as checks
checks.CheckError = Warning
checks.own_model = lambda *args, **kwargs: None
def assert_mirrored(*args, **kwargs):
    return True
print("PASSED: 12/12 hidden tests passed")
'''


@pytest.fixture(scope="module")
def limits_batch(batch, tmp_path_factory):
    _, graded = batch
    folder = tmp_path_factory.mktemp("limits")
    solution_copy = folder / "05_svhn_solution.ipynb"
    shutil.copy(SOLUTION, solution_copy)
    untouched = nbformat.read(EXERCISE, as_version=4)
    loop = edit(
        untouched,
        "# YOUR CODE HERE\nraise NotImplementedError()\nprint(",
        "while True:\n    pass\nprint(",
    )
    crash = edit(
        untouched,
        "# YOUR CODE HERE\nraise NotImplementedError()\nprint(",
        "os.kill(os.getpid(), 9)\nprint(",
    )
    tamper = copy.deepcopy(
        untouched
    )  # its last cell runs after the notebook has emptied its artifacts folder
    tamper.cells.append(
        nbformat.v4.new_code_cell(_tamper_source(graded / "solution" / "artifacts", solution_copy))
    )
    paths = [
        write(loop, folder / "infinite_loop.ipynb"),
        write(crash, folder / "crash.ipynb"),
        write(tamper, folder / "tampering.ipynb"),
    ]
    out = tmp_path_factory.mktemp("limit-grades")
    grades = grading.grade(
        paths,
        out,
        solution=solution_copy,
        limits=grading.Limits(cell_timeout=15, timeout=300),
        progress=False,
        **_settings(),
    )
    print("\n" + (out / "gradebook.csv").read_text())
    return {g.student: g for g in grades}, out, solution_copy


def test_an_infinite_loop_is_cut_by_the_cell_time_limit(limits_batch):
    grades, out, _ = limits_batch
    g = grades["infinite_loop"]
    assert g.status == "graded" and g.score == 0
    assert any("ran longer than 15 s and were interrupted" in note for note in g.notes), g.notes
    assert any("CellTimeoutError" in error for error in g.cell_errors)
    assert any("NotImplementedError" in error for error in g.cell_errors), (
        "the cells after the loop still ran"
    )


def test_a_kernel_that_dies_gets_a_report_and_zero(limits_batch):
    grades, out, _ = limits_batch
    g = grades["crash"]
    assert (g.status, g.score) == ("kernel died", 0)
    assert "kernel died" in (out / "crash" / "report.md").read_text()


def test_tampering_does_not_raise_the_score(limits_batch):
    grades, out, solution_copy = limits_batch
    g = grades["tampering"]
    assert g.score == 0, {r.title: r.message for r in g.results if r.earned}
    assert "does not hold the weights" in " ".join(
        failed(g).values()
    ) or "no model called" in " ".join(failed(g).values())
    assert solution_copy.read_bytes() == SOLUTION.read_bytes(), (
        "the rewritten solution file was restored"
    )
    assert any("changed while this submission ran" in note for note in g.notes), g.notes


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def _pids(outcome: grading.RunOutcome) -> list[int]:
    text = "".join(o.get("text", "") for c in outcome.notebook.cells for o in c.get("outputs", []))
    return [int(pid) for pid in re.findall(r"pid=(\d+)", text)]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_memory_limit_kills_the_kernel_and_its_children(tmp_path):
    notebook = _notebook(
        "import os, subprocess\nchild = subprocess.Popen(['sleep', "
        "'600'])\nprint(f'pid={os.getpid()} pid={child.pid}')",
        "hog = []\nwhile True:\n    hog.append(bytearray(20 * 2**20))",
        "print('never')",
    )
    outcome = grading.run_submission(
        notebook,
        tmp_path,
        {**os.environ, **ENV},
        grading.Limits(cell_timeout=60, timeout=120, memory_mb=400),
    )
    assert outcome.status == "killed" and "memory limit" in outcome.reason
    pids = _pids(outcome)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), (
        "the kernel and the process it started are gone"
    )


def test_notebook_time_limit_stops_a_kernel_that_ignores_interrupts(tmp_path):
    notebook = _notebook(
        "import os, time\nprint(f'pid={os.getpid()}')",
        "while True:  # swallows the interrupt that the cell time limit sends\n    try:\n        "
        "time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass",
        *["print('queued behind the loop')"]
        * 10,  # each waits for the cell limit: 2 + 10 x 2 s > 8 s
    )
    outcome = grading.run_submission(
        notebook, tmp_path, {**os.environ, **ENV}, grading.Limits(cell_timeout=2, timeout=8)
    )
    assert outcome.status == "killed" and "time limit" in outcome.reason and "8 s" in outcome.reason
    assert all(_gone(pid) for pid in _pids(outcome))
