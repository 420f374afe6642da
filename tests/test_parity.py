"""Parity: N simulated replicas train to the same weights as one device, when the loss is scaled
right.

tests/parity_train.py trains a tiny model (L2 on both kernels, 6 SGD steps with momentum, a last
batch of 7 that splits 4+3 on 2 replicas and 2+2+2+1 on 4) in several ways and saves the
weights. It runs once per device count, in a fresh process each (simulated devices are fixed
when TensorFlow starts); the three processes run side by side. Each test compares one way of
training on N replicas with the SAME code on one device.

Run: .venv/bin/pytest tests/test_parity.py -v -s   (-s prints the differences; 15-30 s on 2 cores)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow  # starts three Python processes

TOLERANCE = 1e-5
REPLICAS = (2, 4)


def final_weights(results: np.lib.npyio.NpzFile, run: str) -> list[np.ndarray]:
    """The weights `run` ended with, in layer order."""
    count = sum(1 for k in results.files if k.startswith(f"{run}."))
    assert count, f"no weights for run {run!r} in {results.files}"
    return [results[f"{run}.{i}"] for i in range(count)]


def max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest absolute difference between two lists of weights."""
    assert [w.shape for w in a] == [w.shape for w in b]
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def replicas_vs_one_device(weights, run: str, replicas: int) -> float:
    """Max weight difference of `run` on `replicas` replicas vs one device (shown with -s)."""
    difference = max_difference(
        final_weights(weights[1], run), final_weights(weights[replicas], run)
    )
    print(f"\n{run:>15} on {replicas} replicas vs 1 device: max |dw| = {difference:.2e}")
    return difference


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> dict[int, np.lib.npyio.NpzFile]:
    """{devices: the saved weights of every run}, for 1, 2 and 4 simulated devices."""
    folder = tmp_path_factory.mktemp("parity")
    procs = {}
    for devices in (1, *REPLICAS):
        env = {**os.environ, "COURSE_DEVICES": str(devices), "COURSE_PROFILE": "quick"}
        out = folder / f"weights_{devices}.npz"
        procs[devices] = (
            out,
            subprocess.Popen(
                [sys.executable, str(HERE / "parity_train.py"), str(out)],
                env=env,
                cwd=HERE.parent,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    results = {}
    try:
        for devices, (out, proc) in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, (
                f"parity_train.py with {devices} devices failed:\n{stdout[-3000:]}\n"
                f"{stderr[-3000:]}"
            )
            results[devices] = np.load(out)
    finally:  # a timeout or a failure must not leave the other runs behind
        for _, proc in procs.values():
            proc.kill()
            proc.wait()
    for devices in procs:
        assert int(results[devices]["replicas"]) == devices, (
            "the strategy did not use the simulated devices"
        )
    return results


def test_one_device_reference_is_plain_keras(weights):
    """On one device, fit with Keras's own loss, fit with the global-batch loss and the custom loop
    agree."""
    # What plain model.fit does on one device.
    reference = final_weights(weights[1], "builtin_uneven")
    other_data = max_difference(reference, final_weights(weights[1], "builtin_even"))
    assert other_data > 100 * TOLERANCE, "sanity: training on other data must give other weights"
    for run in ("fit", "loop", "wrong_mean"):  # on one replica, reduce_mean IS the global mean
        difference = max_difference(reference, final_weights(weights[1], run))
        assert difference < TOLERANCE, (
            f"one device: {run} differs from plain fit by {difference:.2e}"
        )


@pytest.mark.parametrize("replicas", REPLICAS)
@pytest.mark.parametrize("run", ["fit", "loop", "loop_adam"])
def test_replicas_match_one_device(weights, run, replicas):
    """fit and the custom loop, loss / GLOBAL batch, scaled L2: same weights as one device."""
    difference = replicas_vs_one_device(weights, run, replicas)
    assert difference < TOLERANCE, (
        f"{run} on {replicas} replicas differs from one device by {difference:.2e}"
    )


@pytest.mark.parametrize("replicas", REPLICAS)
def test_reduce_mean_per_replica_breaks_parity(weights, replicas):
    """The classic mistake (reduce_mean on each replica, L2 unscaled) moves the weights far away."""
    difference = replicas_vs_one_device(weights, "wrong_mean", replicas)
    assert difference > 1000 * TOLERANCE, (
        f"wrong reduction differs by only {difference:.2e}: the test cannot tell"
    )


@pytest.mark.parametrize("replicas", REPLICAS)
def test_keras_builtin_loss_is_exact_only_when_the_batch_splits_evenly(weights, replicas):
    """Keras fit averages per replica and divides by the replica count: exact for even splits only.

    This is why the fit parity case uses a global-batch loss; if Keras changes its reduction,
    this test says so (and notebook 1's note on the last batch must change with it).
    """
    even = replicas_vs_one_device(weights, "builtin_even", replicas)
    uneven = replicas_vs_one_device(weights, "builtin_uneven", replicas)
    assert even < TOLERANCE, f"built-in loss, evenly split batches: {even:.2e}"
    assert uneven > 100 * TOLERANCE, f"built-in loss, uneven last batch: only {uneven:.2e}"
