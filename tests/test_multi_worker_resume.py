"""Notebook 4's resumed worker continues with the data an uninterrupted run would have seen next.

`distribute_datasets_from_function` calls the dataset function once per worker and each step takes
one per-replica batch for every replica of that worker (one per GPU on a GPU worker), so a restart
at step s must skip s x local replicas batches, not s. The notebook's `worker_dataset` (its
%%writefile cells of mnist_setup.py, read from the notebook itself) is checked two ways:

- under a real MirroredStrategy with 2 logical CPUs and `distribute_datasets_from_function` (one
  worker with 2 local replicas; MultiWorkerMirroredStrategy gives a CPU worker only one), comparing
  the examples every replica trains on in an uninterrupted and in a resumed run;
- by the arithmetic alone for 2 workers of 2 replicas each (InputContext), the steps' batches taken
  in order as the distributed iterator takes them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT

NOTEBOOK = ROOT / "notebooks" / "04_multi_worker.ipynb"


def write_mnist_setup(folder: Path) -> Path:
    """mnist_setup.py as the notebook's %%writefile (and %%writefile -a) cells write it."""
    text = ""
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and re.match(r"%%writefile( -a)? \S*/mnist_setup\.py$", first):
            text = (text + body + "\n") if " -a " in first else body + "\n"
    assert "def worker_dataset" in text, "notebook 4 no longer writes worker_dataset"
    path = folder / "mnist_setup.py"
    path.write_text(text)
    return path


#: Run in a fresh interpreter (logical devices are fixed at TensorFlow's start): 2 logical CPUs,
#: examples whose label is their index, 5 steps straight, then 2 + 3 steps with a restart between.
MIRRORED = """
import json, sys
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
import mnist_setup

strategy = tf.distribute.MirroredStrategy()
count, global_batch = 64, 8
images = np.zeros((count, 28, 28, 1), np.float32)
labels = np.arange(count, dtype=np.int64)


def run(steps_done, steps, old_skip=0):
    def dataset_fn(context):
        ds = mnist_setup.worker_dataset(images, labels, context, global_batch, steps_done)
        return ds.skip(old_skip)  # old_skip: the earlier code's skip(step), one batch a step

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    seen = []
    for _ in range(steps):
        batch = next(iterator)
        per_replica = strategy.experimental_local_results(batch[1])
        seen.append([sorted(map(int, ids.numpy())) for ids in per_replica])
    return seen


print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "straight": run(0, 5),
    "resumed": run(2, 3),
    "old": run(0, 3, old_skip=2),
}))
"""


@pytest.mark.slow
def test_resumed_replicas_train_on_what_an_uninterrupted_run_would(tmp_path, python_subprocess):
    write_mnist_setup(tmp_path)
    code = f"import sys; sys.argv[1:] = [{str(tmp_path)!r}]\n{MIRRORED}"
    done = python_subprocess(code, env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2
    straight, resumed = result["straight"], result["resumed"]
    # Every step gives each replica its own examples, and no example comes twice within a pass.
    flat = [i for step in straight for replica in step for i in replica]
    assert all(len(replica) == 4 for step in straight for replica in step)
    assert len(flat) == len(set(flat)) == 5 * 8
    # After 2 steps, the restart trains on exactly what steps 3 to 5 of the straight run did...
    assert resumed == straight[2:]
    # ...where skipping 2 batches (one per step) replays step 2's examples.
    assert result["old"][0] == straight[1]


def test_two_workers_of_two_replicas_skip_their_own_batches(tmp_path):
    """The arithmetic for a cluster the CPU tests cannot start: 2 GPU workers of 2 GPUs each."""
    import importlib.util

    import numpy as np
    import tensorflow as tf

    spec = importlib.util.spec_from_file_location("mnist_setup", write_mnist_setup(tmp_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    images = np.zeros((96, 28, 28, 1), np.float32)
    labels = np.arange(96, dtype=np.int64)
    workers, local_replicas, global_batch, steps, restart = 2, 2, 16, 5, 3

    def batches(worker: int, steps_done: int, wanted: int) -> list[list[int]]:
        """What the worker's replicas take in `wanted` steps: `local_replicas` batches a step."""
        context = tf.distribute.InputContext(workers, worker, workers * local_replicas)
        ds = module.worker_dataset(images, labels, context, global_batch, steps_done)
        taken = [sorted(b[1].numpy().tolist()) for b in ds.take(wanted * local_replicas)]
        return [
            sum(taken[i : i + local_replicas], []) for i in range(0, len(taken), local_replicas)
        ]

    for worker in range(workers):
        straight = batches(worker, 0, steps)
        assert all(len(step) == global_batch // workers for step in straight)
        assert batches(worker, restart, steps - restart) == straight[restart:]
        # Skipping `restart` batches instead (one per step) repeats examples already trained on.
        context = tf.distribute.InputContext(workers, worker, workers * local_replicas)
        old = module.worker_dataset(images, labels, context, global_batch, 0).skip(restart)
        first_after_old_skip = sorted(next(iter(old))[1].numpy().tolist())
        trained = {i for step in straight[:restart] for i in step}
        assert set(first_after_old_skip) <= trained
