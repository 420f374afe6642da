"""Measure training speed the same way in every notebook, and compare runs in a table or chart.

Example:
    >>> from course_utils import timing
    >>> speed = timing.ThroughputCallback(batch_size=GLOBAL_BATCH)
    >>> model.fit(train, epochs=3, callbacks=[speed])
    >>> results = [timing.RunResult.from_callback("MirroredStrategy fit", speed)]
    >>> with timing.Timer() as t:
    ...     run_custom_loop()
    >>> results.append(timing.RunResult("custom loop", t.seconds, examples=3 * 60000, epochs=3))
    >>> print(timing.results_table(results))
    >>> timing.plot_comparison(results)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import keras


class Timer:
    """Wall-clock time of a `with` block, in seconds (`time.perf_counter`)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


class ThroughputCallback(keras.callbacks.Callback):
    """Records wall time per epoch, steps per epoch and time per step during `fit`.

    The first epoch includes tracing and graph building, so `examples_per_sec` leaves it out
    whenever there is more than one epoch (`warmup_epochs`). Steps are counted from the
    optimizer's step counter at each epoch's start and end: a per-batch hook would make Keras
    copy every step's logs back to Python and slow down the very thing being measured.
    """

    def __init__(self, batch_size: int, warmup_epochs: int = 1) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.warmup_epochs = warmup_epochs
        self.epoch_seconds: list[float] = []
        self.epoch_steps: list[int] = []
        self._epoch_start = 0.0
        self._first_step = 0

    def _optimizer_steps(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._first_step = self._optimizer_steps()
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch_seconds.append(time.perf_counter() - self._epoch_start)
        self.epoch_steps.append(self._optimizer_steps() - self._first_step)

    def _measured(self) -> tuple[list[float], list[int]]:
        skip = self.warmup_epochs if len(self.epoch_seconds) > self.warmup_epochs else 0
        return self.epoch_seconds[skip:], self.epoch_steps[skip:]

    @property
    def step_seconds(self) -> float:
        """Mean wall time of one training step, warm-up epochs excluded."""
        seconds, steps = self._measured()
        return sum(seconds) / max(sum(steps), 1)

    @property
    def examples_per_sec(self) -> float:
        """Training throughput, warm-up epochs excluded (the last batch may be smaller: a slight
        overestimate)."""
        return self.batch_size / self.step_seconds if self.step_seconds else 0.0


@dataclass
class RunResult:
    """One timed run: `examples` processed in `seconds` over `epochs` epochs."""

    name: str
    seconds: float
    examples: int
    epochs: int = 1

    @property
    def examples_per_sec(self) -> float:
        return self.examples / self.seconds if self.seconds else 0.0

    @classmethod
    def from_callback(cls, name: str, callback: ThroughputCallback) -> RunResult:
        """Summarise a ThroughputCallback (warm-up epochs excluded)."""
        seconds, steps = callback._measured()
        return cls(name, sum(seconds), sum(steps) * callback.batch_size, len(seconds))


def results_table(results: list[RunResult], baseline: str | None = None) -> str:
    """A text table of the runs; `baseline` (a run name, default the first) gives the 'speed'
    column."""
    if not results:
        return "(no runs)"
    base = next((r for r in results if r.name == baseline), results[0])
    rows = [("run", "epochs", "seconds", "examples/s", f"vs {base.name}")]
    for r in results:
        ratio = r.examples_per_sec / base.examples_per_sec if base.examples_per_sec else 0.0
        rows.append(
            (
                r.name,
                str(r.epochs),
                f"{r.seconds:.2f}",
                f"{r.examples_per_sec:,.0f}",
                f"{ratio:.2f}x",
            )
        )
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.rjust(w) if c else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def plot_comparison(
    results: list[RunResult], metric: str = "examples_per_sec", ax=None, title: str | None = None
):
    """Horizontal bar chart of one metric ("examples_per_sec" or "seconds") per run; returns the
    axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.5 + 0.5 * len(results)))
    values = [getattr(r, metric) for r in results]
    bars = ax.barh([r.name for r in results], values, color="tab:blue")
    ax.bar_label(
        bars,
        labels=[f"{v:,.0f}" if metric == "examples_per_sec" else f"{v:.2f}" for v in values],
        padding=3,
    )
    ax.invert_yaxis()
    ax.set_xlabel(
        {
            "examples_per_sec": "training examples per second (higher is faster)",
            "seconds": "seconds (lower is faster)",
        }.get(metric, metric)
    )
    ax.set_title(title or "Training speed")
    ax.margins(x=0.15)
    return ax
