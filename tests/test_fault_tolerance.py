"""Kill-and-resume with notebook 4's own worker scripts: a real MWMS custom loop, 2 workers.

The scripts are taken from the notebook's `%%writefile` cells, so this tests what students run.
One uninterrupted run; one run whose worker 1 is killed (SIGKILL) after the chief's first
checkpoint; the restart of that run. The restart must resume from the saved step and end at the
uninterrupted run's final step, and no non-chief checkpoint folder may remain.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import nbformat
import numpy as np
import pytest

from course_utils import cluster

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_multi_worker.ipynb"
EXAMPLES, PER_WORKER_BATCH, EPOCHS, SAVE_EVERY = 2048, 16, 3, 20
TOTAL_STEPS = EPOCHS * (EXAMPLES // (2 * PER_WORKER_BATCH))
ENV = {"CUDA_VISIBLE_DEVICES": "-1"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def write_notebook_scripts(folder: Path) -> None:
    """Write every `%%writefile [-a] path` cell of notebook 4 into `folder` (by file name)."""
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile"):
            *flags, path = first.split()[1:]
            with open(folder / Path(path).name, "a" if "-a" in flags else "w") as f:
                f.write(body + "\n")


def losses_by_step(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r" step (\d+) loss ([\d.]+)", log)}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("multi_worker")
    write_notebook_scripts(folder)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, EXAMPLES)
    images = (rng.random((EXAMPLES, 28, 28, 1)) * 0.5 + labels[:, None, None, None] / 20).astype(
        np.float32
    )
    np.savez(folder / "mnist_data.npz", images=images, labels=labels)
    return folder


def loop(work: Path, checkpoint_dir: str, **kwargs) -> cluster.LocalCluster:
    args = [
        "--epochs",
        EPOCHS,
        "--per-worker-batch",
        PER_WORKER_BATCH,
        "--save-every",
        SAVE_EVERY,
        "--checkpoint-dir",
        checkpoint_dir,
    ]
    return cluster.LocalCluster(
        work / "loop_worker.py",
        workers=2,
        env=ENV,
        timeout=300,
        args=args,
        log_dir=work / "logs" / checkpoint_dir,
        **kwargs,
    )


@pytest.fixture(scope="module")
def runs(work) -> dict:
    """The three runs: uninterrupted; killed after the first checkpoint; restarted."""
    with loop(work, "uninterrupted") as full:
        full.wait()
    with loop(work, "killed", ready=r"replicas in sync: 2") as first:
        saved = int(first.wait_for(r"saved checkpoint ckpt-\d+ at step (\d+)", task=0).group(1))
        first.wait_for(rf" step {saved + 5} loss", task=0)  # work that the restart must redo
        first.kill(1)
        codes = first.wait(check=False)
    with loop(work, "killed") as second:
        second.wait()
    return {"full": full, "first": first, "saved": saved, "codes": codes, "second": second}


def test_killed_run_resumes_and_ends_at_the_same_step(runs):
    baseline = losses_by_step(runs["full"].log(0))
    assert max(baseline) == TOTAL_STEPS and len(baseline) == TOTAL_STEPS

    first, saved, codes = runs["first"], runs["saved"], runs["codes"]
    step_at_kill = max(losses_by_step(first.log(0)))
    assert codes[cluster.Task("worker", 1)] == -signal.SIGKILL
    assert codes[cluster.Task("worker", 0)] not in (0, None)  # the survivor stops with an error...
    assert re.search(r"UnavailableError|aborted|unhealthy", first.log(0))  # ... about its lost peer
    assert saved == SAVE_EVERY and saved + 5 <= step_at_kill < TOTAL_STEPS, (
        "the kill must land mid-training"
    )
    assert "finished" not in first.log(0)

    log = runs["second"].log(0)
    resumed_from = int(
        re.search(r"restored ckpt-\d+: epoch \d+, step_in_epoch \d+, global step (\d+)", log).group(
            1
        )
    )
    resumed = losses_by_step(log)
    print(
        f"step at kill {step_at_kill}, resumed from {resumed_from}, final step {max(resumed)} "
        f"(uninterrupted: {max(baseline)})"
    )
    assert resumed_from == saved
    assert min(resumed) == resumed_from + 1
    assert max(resumed) == max(baseline) == TOTAL_STEPS
    assert all(f"finished at step {TOTAL_STEPS}" in runs["second"].log(w) for w in range(2))
    # Same model, optimizer state and data position: the first resumed step repeats the baseline's.
    assert resumed[resumed_from + 1] == pytest.approx(baseline[resumed_from + 1], abs=1e-4)


def test_only_the_chief_keeps_checkpoints(runs, work):
    for name in ["uninterrupted", "killed"]:
        folder = work / name
        assert not list(folder.glob("workertemp_*")), f"non-chief checkpoints left in {folder}"
        assert (folder / "checkpoint").is_file() and (
            folder / f"ckpt-{TOTAL_STEPS}.index"
        ).is_file()
    assert_no_task_left = [p for r in ("full", "first", "second") for p in runs[r].pids.values()]
    assert not [p for p in cluster.leftover_workers() if p.pid in assert_no_task_left]
