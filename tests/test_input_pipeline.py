"""Where `cache()` goes in a pipeline that a strategy distributes.

Under a tf.distribute strategy, Keras's `fit` and `evaluate` first read one batch from a throw-away
iterator over the distributed dataset (to build the model's metrics), then start the real pass. When
the dataset caches *after* batching, the abandoned iterator can finish the in-memory cache with only
the batches it had read: the real pass, and every later pass over the same dataset, then sees part
of the data. Whether it happens depends on thread timing (a few runs in ten on 2 cores), which is
why it showed up as an occasional accuracy mismatch between a distributed `evaluate` and a
one-device `predict` of the same weights. Caching the examples *before* batching (map -> cache ->
shuffle -> batch -> prefetch, the order the course teaches) never lost an example here.

Both tests run in one fresh process with 2 simulated devices and report JSON. The loss is a matter
of timing, and on Python 3.10 it did not show at all (see the skip below): the lesson says "can".
"""

from __future__ import annotations

import json
import sys

import pytest
from helpers import run_python

#: Trials per order. batch().cache() lost batches in roughly a third of the trials on 2 cores,
#: idle or loaded; the first loss ends its loop. cache().batch() must keep every example in all.
TRIALS = 20

CODE = """
import json
import course_utils
course_utils.setup(devices=2, profile="quick", data="synthetic", verbose=False)
import keras
import numpy as np
import tensorflow as tf
from course_utils import data

images, labels = data.synthetic_arrays("mnist", "test", 512)
strategy = tf.distribute.MirroredStrategy()


class ExamplesSeen(keras.metrics.Metric):
    # Counts the examples evaluate() actually ran on.
    def __init__(self, name="examples_seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", aggregation="sum")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(tf.cast(tf.shape(y_true)[0], "float32"))

    def result(self):
        return self.count


with strategy.scope():
    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(10)])
    model.compile(loss="sparse_categorical_crossentropy", metrics=[ExamplesSeen()])


def pipeline(order):
    examples = tf.data.Dataset.from_tensor_slices((images, labels)).map(
        lambda image, label: (tf.cast(image, tf.float32) / 255.0, label)
    )
    if order == "batch_then_cache":
        return examples.batch(128).cache().prefetch(tf.data.AUTOTUNE)
    return examples.cache().batch(128).prefetch(tf.data.AUTOTUNE)


report = {}
for order in ("batch_then_cache", "cache_then_batch"):
    seen = []
    for trial in range({trials} if order == "cache_then_batch" else 3 * {trials}):
        dataset = pipeline(order)
        evaluated = int(model.evaluate(dataset, verbose=0, return_dict=True)["examples_seen"])
        later = sum(int(label.shape[0]) for _, label in dataset)  # a plain pass reads the cache
        seen.append([evaluated, later])
        if order == "batch_then_cache" and evaluated < 512:
            break  # shown once: enough
    report[order] = seen
print("REPORT", json.dumps(report))
"""


@pytest.fixture(scope="module")
def report() -> dict:
    proc = run_python(CODE.replace("{trials}", str(TRIALS)), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


@pytest.mark.slow
@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="not reproducible on Python 3.10: no batch lost in 60 trials (TensorFlow 2.21, Keras "
    "3.12.4), while the same Keras on Python 3.11 lost batches within 4 trials",
)
def test_cache_after_batch_loses_batches_to_kerass_first_look(report):
    """TensorFlow/Keras behaviour the course teaches around: if this fails, update the lesson."""
    truncated = [pair for pair in report["batch_then_cache"] if pair[0] < 512]
    assert truncated, (
        f"evaluate saw all 512 examples in {len(report['batch_then_cache'])} trials with "
        "batch().cache(): the truncation no longer happens on this TensorFlow/Keras"
    )
    evaluated, later = truncated[0]
    assert evaluated % 128 == 0, "whole batches are lost, never part of one"
    assert later == evaluated, "the truncated cache is what every later pass reads"


@pytest.mark.slow
def test_cache_before_batch_keeps_every_example(report):
    seen = report["cache_then_batch"]
    assert len(seen) == TRIALS
    assert all(pair == [512, 512] for pair in seen), seen
