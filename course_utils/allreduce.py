"""The price of an all-reduce: time = alpha + bytes x beta, measured under a strategy.

`time_all_reduce` sums a float32 tensor of each given size over the strategy's replicas (the
cross-replica sum that `apply_gradients` does on the gradients), `fit_alpha_beta` fits the
latency alpha (seconds) and the inverse bandwidth beta (seconds per byte) by least squares.

Example (in a notebook, with its strategy and model):

        from course_utils import allreduce
        sizes, seconds = allreduce.time_all_reduce(strategy, [4_096, 65_536, 1 << 20, 1 << 23])
        fit = allreduce.fit_alpha_beta(sizes, seconds)
        print(f"{fit.alpha * 1e6:.0f} us + {1 / fit.beta / 1e9:.1f} GB/s")
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from course_utils.quiet import import_tensorflow
from course_utils.timing import Timer

tf = import_tensorflow()

#: Published one-direction bandwidths of GPU links (bytes/s), as their makers state them.
PUBLISHED_LINKS = {
    "PCIe 4.0 x16 (PCI-SIG: 16 GT/s per lane)": 32e9,
    "PCIe 5.0 x16 (PCI-SIG: 32 GT/s per lane)": 64e9,
    "NVLink 3, A100 (NVIDIA: 600 GB/s both ways)": 300e9,
    "NVLink 4, H100 (NVIDIA: 900 GB/s both ways)": 450e9,
}


@dataclass
class AlphaBeta:
    """A least-squares line time = alpha + bytes x beta."""

    alpha: float  # seconds per all-reduce, whatever its size
    beta: float  # seconds per byte
    points: int

    def seconds(self, size_bytes: float) -> float:
        return self.alpha + size_bytes * self.beta

    @property
    def bandwidth(self) -> float:
        """1 / beta in bytes/s (infinite when beta is not positive)."""
        return 1 / self.beta if self.beta > 0 else float("inf")


def fit_alpha_beta(sizes_bytes: Sequence[float], seconds: Sequence[float]) -> AlphaBeta:
    """Least squares through (bytes, seconds); needs at least 3 distinct sizes (2 fit exactly
    and show no scatter)."""
    if len(sizes_bytes) != len(seconds) or len(set(sizes_bytes)) < 3:
        raise ValueError(
            f"fit_alpha_beta needs at least 3 distinct sizes with one time each "
            f"(got sizes {list(sizes_bytes)} and {len(seconds)} times)."
        )
    mean_x, mean_y = statistics.fmean(sizes_bytes), statistics.fmean(seconds)
    sxx = sum((x - mean_x) ** 2 for x in sizes_bytes)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes_bytes, seconds))
    beta = sxy / sxx
    return AlphaBeta(alpha=mean_y - beta * mean_x, beta=beta, points=len(seconds))


def time_all_reduce(
    strategy: tf.distribute.Strategy,
    sizes_bytes: Sequence[int],
    repeats: int = 20,
    rounds: int = 3,
) -> tuple[list[int], list[float]]:
    """Seconds per cross-replica sum of a float32 tensor of each size, on every replica.

    One tf.function call runs `repeats` sums in a loop (Python is outside the timing); one call
    per size is warm-up, then `rounds` interleaved rounds over the sizes; a size's time is the
    median round. Returns (sizes in bytes, seconds per all-reduce)."""
    if rounds < 1 or repeats < 1:
        raise ValueError(f"repeats and rounds must be at least 1 (got {repeats}, {rounds}).")
    calls = {}
    for size in sizes_bytes:
        elements = max(1, size // 4)
        values = strategy.experimental_distribute_values_from_function(
            lambda context, n=elements: tf.ones([n])
        )
        calls[size] = (_summing(strategy), values)
    count = tf.constant(repeats)
    for run, values in calls.values():
        float(run(values, count))  # warm-up: tracing and the collective's set-up
    samples = {size: [] for size in calls}
    for _ in range(rounds):
        for size, (run, values) in calls.items():
            with Timer() as timer:
                float(run(values, count))
            samples[size].append(timer.seconds / repeats)
    return list(calls), [statistics.median(samples[size]) for size in calls]


def _summing(strategy: tf.distribute.Strategy):
    def replica_sum(value):
        # identity: placed on this replica's device (with one replica the value is a plain
        # tensor without a device, which all_reduce refuses); it forwards, not copies, the data
        summed = tf.distribute.get_replica_context().all_reduce("SUM", tf.identity(value))
        return summed[0]  # one element back: the sum itself stays on the replicas

    @tf.function
    def run(values, count):
        total = tf.constant(0.0)
        for _ in tf.range(count):
            first = strategy.run(replica_sum, args=(values,))
            total += strategy.experimental_local_results(first)[0]  # no second reduce
        return total

    return run


def ring_bytes(gradient_bytes: float, replicas: int) -> float:
    """Bytes each device sends in a ring all-reduce of `gradient_bytes`: 2 (n - 1) / n of them
    (a reduce-scatter, then an all-gather)."""
    return 2 * (replicas - 1) / replicas * gradient_bytes if replicas > 1 else 0.0
