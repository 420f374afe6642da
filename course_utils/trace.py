"""Read a TensorFlow profiler trace into where the time went: compute, all-reduce, input, idle.

`tf.profiler.experimental.start(logdir)` ... `stop()` writes
`plugins/profile/<run>/<host>.xplane.pb` under logdir (TensorBoard's Profile tab shows the same
files). `time_shares` reads the newest one
with TensorFlow's own protocol buffer (`xplane_pb2`), keeps the events of TensorFlow operations
(named "<op name>:<op type>"), sorts each into a category by its type, and measures each category
as the union of its intervals over all threads (so parallel threads are not counted twice); idle
is the rest of the traced window.

Example (in a notebook, with its strategy and model):

        tf.profiler.experimental.start("logs/profile")
        train(5)
        tf.profiler.experimental.stop()
        from course_utils import trace
        print(trace.shares_table(trace.time_shares("logs/profile")))
"""

from __future__ import annotations

import re
from pathlib import Path

from course_utils.tables import format_table

CATEGORIES = ("compute", "all-reduce", "input pipeline", "idle")
_OP = re.compile(r"^[^:]+:([A-Za-z_][A-Za-z0-9_]*)$")  # "while/body/conv2d/Conv2D:Conv2D"


def category(op_type: str) -> str:
    """The category of a TensorFlow operation type."""
    if any(word in op_type for word in ("Collective", "AllReduce", "Nccl")):
        return "all-reduce"
    if "Iterator" in op_type or op_type.startswith(("Dataset", "Prefetch")):
        return "input pipeline"
    return "compute"


def latest_trace(logdir: str | Path) -> Path:
    """The newest .xplane.pb file under logdir (a clear error when there is none)."""
    files = sorted(
        Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime
    )
    if not files:
        raise FileNotFoundError(
            f"No profiler trace under {logdir}: run the steps between "
            f"tf.profiler.experimental.start({str(logdir)!r}) and tf.profiler.experimental.stop()."
        )
    return files[-1]


def op_intervals(path: str | Path) -> list[tuple[str, float, float]]:
    """(op type, start, end) in seconds of every TensorFlow operation event in the trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    intervals = []
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            base_ps = line.timestamp_ns * 1000
            for event in line.events:
                match = _OP.match(names.get(event.metadata_id, ""))
                if match:
                    start = (base_ps + event.offset_ps) / 1e12
                    intervals.append((match.group(1), start, start + event.duration_ps / 1e12))
    return intervals


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def time_shares(logdir: str | Path) -> dict[str, float]:
    """Seconds of each category in the newest trace under logdir (CATEGORIES, idle included),
    and the traced "window" (first operation's start to last one's end).
    An interval busy with two categories at once counts for each, so the busy parts can add up
    to more than the window."""
    ops = op_intervals(latest_trace(logdir))
    if not ops:
        raise ValueError(f"The trace under {logdir} has no TensorFlow operation events.")
    window = max(end for _, _, end in ops) - min(start for _, start, _ in ops)
    shares = {
        name: _union([(s, e) for op, s, e in ops if category(op) == name])
        for name in CATEGORIES[:-1]
    }
    shares["idle"] = max(window - _union([(s, e) for _, s, e in ops]), 0.0)
    shares["window"] = window
    return shares


def top_ops(logdir: str | Path, count: int = 5) -> list[tuple[str, float]]:
    """The operation types with the most busy time (summed over threads), longest first."""
    totals: dict[str, float] = {}
    for op, start, end in op_intervals(latest_trace(logdir)):
        totals[op] = totals.get(op, 0.0) + end - start
    return sorted(totals.items(), key=lambda item: -item[1])[:count]


def shares_table(shares: dict[str, float]) -> str:
    """The categories as a table: milliseconds and share of the traced window."""
    window = shares["window"]
    rows = [
        [name, f"{1000 * shares[name]:.1f}", f"{100 * shares[name] / window:.0f}%"]
        for name in CATEGORIES
    ]
    return format_table(["category", "ms", "share"], rows)
