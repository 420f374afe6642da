"""Notebook 3b's instruments on tiny cases: the machine's limits, the step's count, the
all-reduce's timing and fit, and the profiler trace read back (course_utils.roofline,
allreduce, trace). Speeds are checked only against wide physical ranges: the machine is shared."""

from __future__ import annotations

import random

import keras
import pytest
import tensorflow as tf

from course_utils import allreduce, roofline, trace


def _model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def test_peak_flops_of_a_small_product_is_in_a_physical_range():
    peak = roofline.peak_flops(size=256, repeats=3, rounds=2)
    assert len(peak.rounds) == 2 and peak.value == max(peak.rounds)
    assert 1e8 < peak.value < 1e15  # from a slow laptop core to a large GPU
    assert "GFLOP/s" in str(peak)


def test_memory_bandwidth_of_a_small_copy_is_in_a_physical_range():
    bandwidth = roofline.memory_bandwidth(megabytes=8, repeats=2, rounds=2)
    assert 1e8 < bandwidth.value < 1e13  # bytes/s
    with pytest.raises(ValueError, match="at least 1"):
        roofline.memory_bandwidth(megabytes=8, repeats=0)


def test_the_step_count_matches_a_hand_count():
    model = _model()
    cost = roofline.training_step_cost(model, batch=10)
    # Multiply-adds: 26x26x32x9 + 11x11x64x9x32 + 1600x64 + 64x10, x 2 FLOPs x 3 (training).
    macs = 26 * 26 * 32 * 9 + 11 * 11 * 64 * 9 * 32 + 1600 * 64 + 64 * 10
    assert cost.flops == 10 * 6 * macs
    # First convolution: reads 784 inputs x3, writes 26x26x32 outputs x2, float32.
    # (Layer names depend on what else the process built: the rows are read by position.)
    assert cost.rows[0][1:] == (6 * 26 * 26 * 32 * 9, 4 * (3 * 784 + 2 * 26 * 26 * 32))
    assert cost.rows[4][0].startswith("flatten") and cost.rows[4][2] == 0  # a reshape: no bytes
    assert cost.weight_bytes == 10 * 4 * model.count_params()  # Adam: 10 passes
    bigger = roofline.training_step_cost(model, batch=1000)
    assert bigger.intensity > cost.intensity  # the weights' traffic is shared by more examples


def test_the_roofline_and_its_ridge():
    assert roofline.ridge(100e9, 10e9) == 10
    assert roofline.attainable(2, 100e9, 10e9) == 20e9  # under the slanted roof
    assert roofline.attainable(50, 100e9, 10e9) == 100e9  # under the flat one
    assert roofline.bound_by(2, 100e9, 10e9) == "memory-bandwidth-bound"
    assert roofline.bound_by(50, 100e9, 10e9) == "compute-bound"


def test_the_fit_recovers_a_known_alpha_and_beta_from_noisy_timings():
    alpha, beta = 50e-6, 1 / 20e9  # 50 us and 20 GB/s
    noise = random.Random(0)
    sizes = [4_096, 65_536, 1 << 20, 4 << 20, 16 << 20]
    seconds = [(alpha + s * beta) * (1 + noise.uniform(-0.01, 0.01)) for s in sizes]
    fit = allreduce.fit_alpha_beta(sizes, seconds)
    assert fit.beta == pytest.approx(beta, rel=0.03)
    assert fit.alpha == pytest.approx(alpha, abs=20e-6)
    assert fit.bandwidth == pytest.approx(20e9, rel=0.03)
    with pytest.raises(ValueError, match="at least 3 distinct sizes"):
        allreduce.fit_alpha_beta([1, 2], [1.0, 2.0])


def test_ring_bytes():
    assert allreduce.ring_bytes(1000, 1) == 0
    assert allreduce.ring_bytes(1000, 2) == 1000
    assert allreduce.ring_bytes(1000, 4) == 1500


def test_time_all_reduce_gives_one_positive_time_per_size(python_subprocess):
    # Two simulated devices need a fresh process (they must exist before TensorFlow starts).
    proc = python_subprocess(
        "import course_utils; course_utils.setup(devices=2, verbose=False)\n"
        "import tensorflow as tf\n"
        "from course_utils import allreduce\n"
        "strategy = tf.distribute.MirroredStrategy()\n"
        "sizes, seconds = allreduce.time_all_reduce(strategy, [4096, 65536, 1 << 20], 2, 2)\n"
        "assert strategy.num_replicas_in_sync == 2 and sizes == [4096, 65536, 1 << 20]\n"
        "assert all(0 < s < 1 for s in seconds), seconds\n"
        "print('ok')\n",
        env={"COURSE_DATA": "synthetic"},
    )
    assert proc.stdout.strip().endswith("ok")


def test_a_profiled_stretch_is_read_back(tmp_path):
    a = tf.random.normal((256, 256))
    product = tf.function(lambda: tf.linalg.matmul(a, a))
    product()
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(3):
        product()
    tf.profiler.experimental.stop()
    shares = trace.time_shares(tmp_path)
    assert set(shares) == {*trace.CATEGORIES, "window"}
    assert shares["compute"] > 0 and shares["window"] >= shares["compute"]
    assert any("MatMul" in op for op, _ in trace.top_ops(tmp_path))  # oneDNN: _MklMatMul
    assert "compute" in trace.shares_table(shares)
    with pytest.raises(FileNotFoundError, match="tf.profiler.experimental.start"):
        trace.time_shares(tmp_path / "empty")


def test_operation_types_are_sorted_into_categories():
    assert trace.category("CollectiveReduceV2") == "all-reduce"
    assert trace.category("NcclAllReduce") == "all-reduce"
    assert trace.category("IteratorGetNext") == "input pipeline"
    assert trace.category("Conv2DBackpropFilter") == "compute"
