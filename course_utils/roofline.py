"""The roofline model: a machine's two limits, measured, and where a model's training step sits.

A step can go no faster than its arithmetic allows (peak FLOP/s) nor than its memory traffic
allows (bytes / bandwidth). With arithmetic intensity I = FLOPs / bytes, the best a step can do is
min(peak, bandwidth x I): the *roofline* (Williams, Waterman and Patterson, 2009). The two limits
are measured here with the course's timing protocol (warm-up, then rounds), never read from a
data sheet. Outside load can only slow a round, so a limit is its fastest round; the slowest
round shows the spread.

Example (in a notebook, with its strategy and model):

        from course_utils import roofline
        peak = roofline.peak_flops(size=512, repeats=5, rounds=3)   # a matrix product
        bandwidth = roofline.memory_bandwidth(megabytes=64, repeats=5, rounds=3)
        cost = roofline.training_step_cost(model, batch=64)         # FLOPs and bytes, counted
        print(cost.intensity, roofline.attainable(cost.intensity, peak.value, bandwidth.value))
        roofline.plot_roofline(peak.value, bandwidth.value, {"64/replica": (8.1, 2.3e9)})
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from course_utils.quiet import import_tensorflow
from course_utils.timing import Timer

tf = import_tensorflow()

FLOAT32_BYTES = 4


@dataclass
class Limit:
    """A measured rate (FLOP/s or bytes/s): one value per timed round; the fastest is the limit."""

    name: str
    unit: str
    rounds: list[float] = field(default_factory=list)

    @property
    def value(self) -> float:
        return max(self.rounds)

    def __str__(self) -> str:
        scale = 1e9
        low, high = min(self.rounds) / scale, max(self.rounds) / scale
        return (
            f"{self.name}: {high:,.1f} G{self.unit} (fastest of {len(self.rounds)} rounds; "
            f"slowest {low:,.1f}; median {statistics.median(self.rounds) / scale:,.1f})"
        )


def measure_rate(
    limit: Limit, work: Callable[[int], None], amount: float, repeats: int, rounds: int
) -> Limit:
    """Run work(repeats) once untimed (tracing, allocation), then `rounds` timed times; each
    round's rate, amount x repeats / seconds, joins `limit.rounds`. `work` must wait for its
    last result."""
    if rounds < 1 or repeats < 1:
        raise ValueError(f"repeats and rounds must be at least 1 (got {repeats}, {rounds}).")
    work(repeats)  # warm-up: never timed
    for _ in range(rounds):
        with Timer() as timer:
            work(repeats)
        limit.rounds.append(amount * repeats / timer.seconds)
    return limit


def matrix_products(size: int = 1024) -> tuple[Callable[[int], None], float]:
    """work(count) computes `count` `size` x `size` float32 matrix products on the default
    device and waits for the last; returns (work, FLOPs of one product = 2 size^3)."""
    a, b = tf.random.normal((size, size)), tf.random.normal((size, size))

    @tf.function
    def products(count):
        total = tf.constant(0.0)
        for _ in tf.range(count):
            total += tf.linalg.matmul(a, b)[0, 0]  # one element: the product is not optimised out
        return total

    def work(count: int) -> None:
        float(products(tf.constant(count)))  # waits for the last product

    return work, 2 * size**3


def additions(megabytes: float = 256) -> tuple[Callable[[int], None], float]:
    """work(count) runs `count` x `total.assign_add(addend)` on two float32 tensors of
    `megabytes` each and waits for the last; returns (work, bytes moved by one: each element is
    read twice and written once)."""
    elements = int(megabytes * 1e6 / FLOAT32_BYTES)
    if elements < 1:
        raise ValueError(f"megabytes must be positive (got {megabytes}).")
    total = tf.Variable(tf.zeros([elements]))
    addend = tf.ones([elements])

    @tf.function
    def add(count):
        for _ in tf.range(count):
            total.assign_add(addend)
        return total[0]

    def work(count: int) -> None:
        float(add(tf.constant(count)))  # waits for the last addition

    return work, 3 * elements * FLOAT32_BYTES


def peak_flops(size: int = 1024, repeats: int = 10, rounds: int = 5) -> Limit:
    """FLOP/s of float32 matrix products (`matrix_products`) on the default device: close to
    the arithmetic peak, as a large product does little else."""
    work, flops = matrix_products(size)
    return measure_rate(Limit("peak (matrix product)", "FLOP/s"), work, flops, repeats, rounds)


def memory_bandwidth(megabytes: float = 256, repeats: int = 10, rounds: int = 5) -> Limit:
    """Bytes/s of large additions (`additions`): about one FLOP per 12 bytes, so memory sets
    their speed, when the tensors are far larger than the caches (choose more than 4x the
    processor's last-level cache)."""
    work, moved = additions(megabytes)
    return measure_rate(Limit("memory bandwidth (a + b)", "B/s"), work, moved, repeats, rounds)


@dataclass
class StepCost:
    """FLOPs and bytes of memory traffic of one training step, counted from the layers."""

    batch: int
    flops: float
    activation_bytes: float  # activations and their gradients, for the whole batch
    weight_bytes: float  # weights, gradients and optimizer state
    rows: list[tuple[str, float, float]]  # (layer, FLOPs per example, bytes per example)

    @property
    def bytes(self) -> float:
        return self.activation_bytes + self.weight_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes


def _size(shape) -> int:
    count = 1
    for dim in shape[1:]:  # without the batch dimension
        count *= dim
    return count


def training_step_cost(model, batch: int, optimizer_slots: int = 2) -> StepCost:
    """Count one training step's FLOPs and memory traffic (float32) from a built Keras model.

    FLOPs: 2 per multiply-add of Conv2D and Dense layers, x 3 for training (the forward pass,
    then the gradients for the activations and for the weights).
    Bytes, assuming each layer's kernels read their inputs from memory and write their outputs
    back (nothing stays in a cache between layers: an upper estimate without fusion):
    - activations, per example and layer: forward reads the input and writes the output; backward
      reads the output's gradient and the saved input and writes the input's gradient;
    - weights: forward reads them, backward reads them and writes their gradients, and the
      optimizer reads weights, gradients and its `optimizer_slots` state tensors per weight
      (Adam: 2) and writes weights and state back.
    Reshapes (Flatten) move nothing.
    """
    import keras

    rows, flops, activations = [], 0.0, 0.0
    for layer in model.layers:
        inputs, outputs = _size(layer.input.shape), _size(layer.output.shape)
        macs = 0
        if isinstance(layer, keras.layers.Conv2D):
            _, height, width, filters = layer.output.shape
            k_h, k_w, channels, _ = layer.kernel.shape
            macs = height * width * filters * k_h * k_w * channels
        elif isinstance(layer, keras.layers.Dense):
            macs = layer.kernel.shape[0] * layer.kernel.shape[1]
        reshape = isinstance(layer, keras.layers.Flatten | keras.layers.Reshape)
        moved = 0.0 if reshape else 3 * inputs + 2 * outputs
        rows.append((layer.name, 3 * 2 * macs, moved * FLOAT32_BYTES))
        flops += 3 * 2 * macs
        activations += moved * FLOAT32_BYTES
    parameters = sum(_size((None, *w.shape)) for w in model.trainable_weights)
    weight_traffic = (1 + 2) + (2 + optimizer_slots) + (1 + optimizer_slots)
    return StepCost(
        batch=batch,
        flops=batch * flops,
        activation_bytes=batch * activations,
        weight_bytes=weight_traffic * parameters * FLOAT32_BYTES,
        rows=rows,
    )


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """The roofline: the most FLOP/s a computation of this intensity (FLOP/byte) can reach."""
    return min(peak, bandwidth * intensity)


def ridge(peak: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the two roofs meet: below it memory limits, above it
    arithmetic does."""
    return peak / bandwidth


def bound_by(intensity: float, peak: float, bandwidth: float) -> str:
    """Which roof lies above a point of this intensity."""
    return "memory-bandwidth-bound" if intensity < ridge(peak, bandwidth) else "compute-bound"


def plot_roofline(
    peak: float,
    bandwidth: float,
    points: Mapping[str, tuple[float, float]],
    title: str = "Roofline",
    ax=None,
):
    """Log-log roofline from the two limits, with each measured point (intensity, FLOP/s)
    labelled. Returns the axes."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    knee = ridge(peak, bandwidth)
    xs = [x for x, _ in points.values()] or [knee]
    low, high = min([*xs, knee]) / 8, max([*xs, knee]) * 8
    grid = np.geomspace(low, high, 200)
    ax.loglog(grid, [attainable(x, peak, bandwidth) for x in grid], color="black", label="roof")
    ax.axvline(knee, color="grey", linestyle=":", linewidth=1)
    ax.annotate(
        f"ridge {knee:.1f} FLOP/B", (knee, peak), textcoords="offset points", xytext=(4, -14)
    )
    for name, (x, y) in points.items():
        ax.loglog([x], [y], "o", label=name)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="lower right")
    return ax
