"""The exercise's visible compute_loss check passes the recipes notebook 2 teaches and fails the
classic mistakes, compute_average_loss without a batch size among them, at 1 and at 3 simulated
devices (one subprocess per device count, tiny inputs). It tries a full global batch and a short
one whose replicas' losses differ: dividing by a fixed GLOBAL_BATCH underweights the short last
batch of a data set, and dividing each replica's sum by its own examples weights an unevenly split
one wrongly, so only a count of the step's examples passes both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "05_svhn_solution.ipynb"

RECIPES = {
    "notebook 2 (all-reduced count)": (
        "tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size="
        "tf.distribute.get_replica_context().all_reduce('sum', tf.shape(labels)[0]))"
    ),
    "all-reduced count + scale_regularization_loss(sum(losses))": (
        "tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size="
        "tf.distribute.get_replica_context().all_reduce('sum', tf.shape(labels)[0]))"
        " + tf.nn.scale_regularization_loss(sum(custom_model.losses, 0.0))"
    ),
}
MISTAKES = {
    # each replica's sum over its own examples x replicas: wrong on an unevenly split short batch
    "compute_average_loss default": "tf.nn.compute_average_loss(loss_object(labels, logits))",
    "fixed GLOBAL_BATCH (the short batch underweighted)": (
        "tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)"
    ),
    "reduce_mean": "tf.reduce_mean(loss_object(labels, logits))",
    "divide by PER_REPLICA_BATCH": (
        "tf.reduce_sum(loss_object(labels, logits)) / PER_REPLICA_BATCH"
    ),
    "no division": "tf.reduce_sum(loss_object(labels, logits))",
}

CHILD = r"""
import json, math, sys
import course_utils
settings = course_utils.setup()
import keras
import tensorflow as tf
cases, check = json.loads(sys.stdin.read())
strategy = tf.distribute.MirroredStrategy()
PER_REPLICA_BATCH = 64
GLOBAL_BATCH = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
with strategy.scope():
    custom_model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(10)])
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
outcome = {}
for name, expression in cases.items():
    namespace = dict(globals())
    exec(f"def compute_loss(labels, logits):\n    return {expression}\n", namespace)
    try:
        exec(check, namespace)
        outcome[name] = "pass"
    except AssertionError as error:
        outcome[name] = "fail: " + str(error)
print("RESULT " + json.dumps(outcome))
"""


def _check_cell() -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    return next(c.source for c in notebook.cells if "compute_loss looks right" in c.source)


def _run(devices: int) -> dict[str, str]:
    env = {**os.environ, "COURSE_DEVICES": str(devices), "COURSE_PROFILE": "quick"}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps([{**RECIPES, **MISTAKES}, _check_cell()]),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, process.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.parametrize("devices", [1, 3])
def test_compute_loss_check_passes_recipes_and_fails_mistakes(devices):
    outcome = _run(devices)
    for name in RECIPES:
        assert outcome[name] == "pass", (name, outcome[name])
    # At one replica the per-replica mean IS the step's mean: reduce_mean and compute_average_loss
    # without a batch size then give the correct number, so only several replicas can expose them
    # (the grader grades on 2 or more).
    wrong_here = dict(MISTAKES)
    if devices == 1:
        del wrong_here["reduce_mean"], wrong_here["compute_average_loss default"]
    for name in wrong_here:
        assert outcome[name].startswith("fail: "), (name, outcome[name])
        assert "divide by the examples of the step counted over all replicas" in outcome[name]
