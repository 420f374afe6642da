"""Training speed measured the same way in every notebook, and what the numbers support.

The protocol, wherever a notebook compares speeds (notebook 3's `measure` is it, as code):
- warm-up first (tracing, graph building, filling the input pipeline), never timed;
- interleaved rounds: each round times every run back to back, so outside load hits them alike;
- the median over rounds (`RunResult`), with the spread (lowest to highest round) beside it;
- ONE noise rule (`compare`): two runs differ only when their rounds do not overlap. Two runs of
  the same speed also fail to overlap by chance (`false_alarm_rate`: 1 time in 10 at 3 rounds
  each), so a verdict that decides on fewer than 5 rounds each says how often.

Example (`train_steps` and `fit` stand for a notebook's own):

    from course_utils import timing

    with timing.Timer() as timer:  # one round of a run
        train_steps(40)
    loop = timing.RunResult("loop", 3.1, 7680, rounds=[2480, 2510, 2440], batch_size=64)
    print(timing.results_table([fit, loop]))  # fit: another run's RunResult
    print(timing.compare(loop, fit).sentence)  # "loop is 4% faster than fit: ..."
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_utils.tables import format_table


class Timer:
    """Wall-clock seconds of a `with` block: `with Timer() as t: ...`, then `t.seconds`; and
    this process's own CPU seconds in it, all its threads (`time.process_time`), `t.cpu_seconds`.
    Their ratio, `t.cores`, is the cores' worth the block got (2.0: two cores all the time).

    >>> with Timer() as t:
    ...     time.sleep(0.05)  # waiting uses no CPU
    >>> t.seconds >= 0.05 and t.cores < 0.5
    True
    """

    seconds = cpu_seconds = 0.0

    def __enter__(self) -> Timer:
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu_start

    @property
    def cores(self) -> float:
        """This process's CPU seconds over the wall's: the cores' worth of work it got."""
        return self.cpu_seconds / self.seconds if self.seconds else 0.0


#: Other programs using more than this share of the cores during a measurement: the machine was
#: busy, so a limit or a price measured then may be low, and notebooks 3b and 3c draw no verdict. A
#: threshold set by hand: how often a quiet machine crosses it, or a busy one stays under, is not
#: measured (no false-alarm rate, unlike `compare`'s).
BUSY = 0.2
#: s: under 10 ticks of the CPU counters (0.01 s), a `Load` share is too coarse to read. Above
#: it a share still carries about a tick's error, 0.01 / (n x t) of a set lasting t s on n CPUs
#: (5% at 0.1 s on 2, 1% at 0.5 s), and a few ticks' quantisation can add up to that several times.
SHORT = 0.1


def load_reading(others: float, seconds: float) -> tuple[float, str]:
    """A `Load` share (`others`) over `seconds` of timed rounds, as the busy rule reads it, and
    in words. One 0.01 s tick of the CPU counters over n CPUs is 0.01 / (n x t) of a set lasting
    t s: on 2 CPUs 20% of 25 ms (at `BUSY`, and over it below 25 ms, on a quiet machine), 5% of
    0.1 s. Under `SHORT` the share is unmeasured, not busy, so the rule reads 0 (notebooks 3b
    and 3c both read their sets' loads through it); the seconds print rounded down to 3
    decimals, so a set under `SHORT` never prints 0.100.

    >>> load_reading(0.2015, 0.0244)  # one tick over a 24 ms set on 2 CPUs
    (0.0, 'unmeasured (coarse, 0.024 s)')
    >>> load_reading(0.2015, 0.0996)
    (0.0, 'unmeasured (coarse, 0.099 s)')
    >>> load_reading(0.2015, 0.5)
    (0.2015, '20%')
    """
    if seconds < SHORT:
        return 0.0, f"unmeasured (coarse, {int(seconds * 1000) / 1000:.3f} s)"  # rounded down
    return others, f"{others:.0%}"


def _cpu_seconds() -> tuple[float, float]:
    # The busy CPU seconds so far of the CPUs this process may run on (its affinity, where the
    # system has one; else all), so that they match `usable_cpus`, and this process's own.
    import psutil  # here, not at import: only the notebooks that measure load need it

    per_cpu, mine = psutil.cpu_times(percpu=True), psutil.Process().cpu_times()
    if hasattr(os, "sched_getaffinity"):  # psutil lists the CPUs by number (all online)
        per_cpu = [per_cpu[i] for i in sorted(os.sched_getaffinity(0)) if i < len(per_cpu)]
    busy = 0.0
    for cpu in per_cpu:
        idle = cpu.idle + getattr(cpu, "iowait", 0.0)  # iowait: Linux only
        guests = getattr(cpu, "guest", 0.0) + getattr(cpu, "guest_nice", 0.0)  # in user too
        busy += sum(cpu) - idle - guests
    return busy, mine.user + mine.system


#: cgroup v2's CPU quota for this process's group: "max 100000" (none) or "200000 100000" (2 CPUs).
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
#: cgroup v1's (many Docker hosts): the quota "-1" (none) or "200000", its period beside it in
#: cpu.cfs_period_us ("100000"): 2 CPUs.
CFS_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")


def _quota() -> float | None:
    # The CPUs a cgroup quota allows (v2's `CPU_MAX`, else v1's `CFS_QUOTA`), None when neither
    # sets one or can be read.
    for read in (
        lambda: CPU_MAX.read_text().split()[:2],
        lambda: [CFS_QUOTA.read_text(), CFS_QUOTA.with_name("cpu.cfs_period_us").read_text()],
    ):
        try:
            quota, period = read()
            if quota.strip() not in ("max", "-1"):
                return int(quota) / int(period)
        except (OSError, ValueError):  # not mounted here, or not readable
            continue
    return None


def usable_cpus() -> float:
    """The CPUs this process may use: those its affinity allows (`os.sched_getaffinity`, where
    the system has it; else every visible CPU), fewer when a cgroup quota (v2's `CPU_MAX` or
    v1's `CFS_QUOTA`) is set and can be read."""
    count = float(
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    quota = _quota()
    return count if quota is None else min(count, quota)


def cache_sizes(cpus: Path = Path("/sys/devices/system/cpu")) -> dict[str, int]:
    """Each level of cache in bytes over every CPU, as Linux lists them in /sys ({} elsewhere),
    a cache CPUs share (one `shared_cpu_list`) counted once: the largest is at least the whole
    last level, several L3 domains too. Notebooks 3b and 3c size tensors at several times it.

    >>> all(size > 0 for size in cache_sizes().values())
    True"""
    found = {}  # (level and type, the CPUs that share it): bytes, so each cache counts once
    for index in cpus.glob("cpu[0-9]*/cache/index[0-9]*"):
        level, kind, size, sharing = (
            (index / f).read_text().strip() for f in ("level", "type", "size", "shared_cpu_list")
        )
        shift = {"K": 10, "M": 20}.get(size[-1], 0)  # "48K", "32768K"
        found[f"L{level} {kind.lower()}", sharing] = int(size.rstrip("KM")) << shift
    return {name: sum(v for (n, _), v in found.items() if n == name) for name, _ in sorted(found)}


class Load:
    """The share of the cores this process may use (`usable_cpus`: its affinity, and a cgroup
    quota, v2 or v1, when one is set and readable; else the visible CPUs) that everything but this
    process used during a `with` block, `others` (0.5: half of them), from the busy times of
    the CPUs in its affinity less this process's own (capped at 1): work on CPUs this process
    cannot use (another job's `taskset` or Slurm cpuset) is not counted.

    "Everything but this process" is broad: other programs, but also a hypervisor's steal time
    on a virtual machine (Colab's, a cloud's) and, in a container, the whole host's other work
    (psutil reads the host's counters): load a student cannot always close. A quota's
    throttling is time nobody used, so it is not counted: under a quota the share is of the
    quota's CPUs.

    >>> with Load() as load:
    ...     total = sum(range(10**6))  # the measurement
    >>> 0.0 <= load.others <= 1.0
    True
    """

    others = 0.0

    def __enter__(self) -> Load:
        self.start, self.clock = _cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        (machine, mine), (machine_before, mine_before) = _cpu_seconds(), self.start
        # Under a cgroup quota below the affinity's CPU count, the busy time of every CPU in the
        # affinity is divided by the quota's CPUs: this assumes others' work there competes with
        # this process for its quota. Where the host's other tenants keep those CPUs busy, the
        # share overstates what slowed this process (towards 1: flagged busy, not measured low).
        # Not checked on a machine with such a quota (none here has one below it).
        cores_seconds = (time.perf_counter() - self.clock) * usable_cpus()
        others = machine - machine_before - (mine - mine_before)
        self.others = min(max(others, 0.0) / cores_seconds, 1.0) if cores_seconds else 0.0


@dataclass
class RunResult:
    """One timed run: `examples` trained in `seconds`, and the examples/s of each round (the
    speed is their median). batch_size: the global batch, for ms/step; step_examples: the
    examples of an average step when short last batches make it smaller (`from_epochs`);
    cores: the cores' worth each round got (`Timer.cores`), where the caller records it."""

    name: str
    seconds: float
    examples: int
    epochs: int = 1
    rounds: list[float] = field(default_factory=list)
    batch_size: int = 0
    warmup_seconds: float = 0.0
    step_examples: float = 0.0
    cores: list[float] = field(default_factory=list)

    @property
    def examples_per_sec(self) -> float:
        if self.rounds:
            return statistics.median(self.rounds)
        return self.examples / self.seconds if self.seconds else 0.0

    @property
    def fastest_cores(self) -> float:
        """The cores' worth its fastest round got (0 when none was recorded).

        >>> RunResult("a", 1.0, 10, rounds=[5.0, 9.0], cores=[1.2, 1.8]).fastest_cores
        1.8
        """
        return self.cores[self.rounds.index(max(self.rounds))] if self.cores else 0.0

    @property
    def step_ms(self) -> float:
        """Milliseconds per step at the median speed (0 when the batch is unknown)."""
        speed, per_step = self.examples_per_sec, self.step_examples or self.batch_size
        return 1000 * per_step / speed if per_step and speed else 0.0

    @classmethod
    def from_epochs(
        cls,
        name: str,
        seconds: list[float],
        steps: list[int],
        batch_size: int,
        examples: int | None = None,
    ) -> RunResult:
        """Timed epochs, each one round; the first is left out when there are more (it traces).

        examples: the examples in one epoch; give it when the last batch can be short, else each
        epoch counts steps x batch_size (more than it trained on).

        >>> RunResult.from_epochs("fit", [9.0, 2.0], [3, 3], batch_size=128, examples=300).rounds
        [150.0]
        """
        skip = 1 if len(seconds) > 1 else 0
        seconds, steps = seconds[skip:], steps[skip:]
        counts = [n * batch_size if examples is None else examples for n in steps]
        rounds = [c / s for s, c in zip(seconds, counts) if s > 0]
        per_step = sum(counts) / sum(steps) if examples is not None and sum(steps) else 0.0
        return cls(name, sum(seconds), sum(counts), len(seconds), rounds, batch_size, 0.0, per_step)


NOISE_RULE = (
    "Two runs differ only when their rounds do not overlap (every round of one beat every round "
    "of the other); otherwise the difference is within noise."
)


#: A verdict that decides on rounds whose false-alarm rate is at least this says the rate.
FEW_ROUNDS_RATE = 0.01


def false_alarm_rate(a_rounds: int, b_rounds: int) -> float:
    """How often NOISE_RULE calls two runs of the SAME speed different, from their round counts.

    Noise model: every round of either run is an independent draw from one continuous
    distribution (the runs are identical; no ties). All `a + b` rounds are then in a random
    order, and the rule fires when one run's rounds are all above the other's: 2 of the
    C(a + b, a) equally likely ways to split the order between the runs. Exact for any such
    distribution. Load shared by both runs of an interleaved round only lowers it; load that
    hits one run's rounds and not the other's (rounds not interleaved) is a real difference to
    the rule, which no round count removes.

    >>> round(1 / false_alarm_rate(2, 2)), round(1 / false_alarm_rate(3, 3))
    (3, 10)
    """
    if a_rounds < 1 or b_rounds < 1:
        raise ValueError(f"round counts must be positive, not {a_rounds} and {b_rounds}")
    return min(1.0, 2 / math.comb(a_rounds + b_rounds, a_rounds))


def _one_time_in(rate: float) -> str:
    n = 1 / rate
    return f"1 time in {n:.0f}" if abs(n - round(n)) < 0.05 else f"about 1 time in {n:.0f}"


@dataclass
class Verdict:
    """What the rounds of two runs support under NOISE_RULE (see `compare`)."""

    a: str
    b: str
    a_samples: list[float]
    b_samples: list[float]
    speed_ratio: float  # speed of a / speed of b, from the medians (> 1: a is faster)
    word: str  # "faster", "slower" or "within noise" (a compared with b)
    sentence: str
    false_alarm: float = 0.0  # false_alarm_rate of the two round counts


def _number(value: float, like: float | None = None) -> str:
    """`value` formatted for its size, or for the size of `like` (both ends of a range alike:
    "99-446", not "99.23-446")."""
    size = value if like is None else like
    return f"{value:,.0f}" if size >= 100 else f"{value:.2f}" if size >= 1 else f"{value:.3g}"


def compare(a: RunResult, b: RunResult) -> Verdict:
    """Compare run `a` with run `b` under NOISE_RULE, from the examples/s of their rounds (at
    least 2 each: one round shows no spread). The percentage comes from the medians. A verdict
    of "faster" or "slower" on so few rounds that runs of equal speed would get it at least
    FEW_ROUNDS_RATE of the time (fewer than 5 rounds each) says how often (`false_alarm_rate`).

    >>> fit = RunResult("fit", 3.0, 3600, rounds=[1200, 1250, 1230])
    >>> loop = RunResult("loop", 3.0, 3000, rounds=[1000, 1010, 990])
    >>> print(compare(fit, loop).sentence)  # doctest: +NORMALIZE_WHITESPACE
    fit is 23% faster than loop: median 1,230 vs 1,000 examples/s (1.23x); every round agrees
    (1,200-1,250 vs 990-1,010), but with 3 rounds each, runs of equal speed fail to overlap 1
    time in 10.
    """
    for run in (a, b):
        if len(run.rounds) < 2 or min(run.rounds) <= 0:
            raise ValueError(
                f"{run.name!r} has rounds {run.rounds}: compare needs at least 2 positive rounds "
                "per run (measure with rounds >= 2)."
            )
    a_values, b_values = [float(v) for v in a.rounds], [float(v) for v in b.rounds]
    ratio = statistics.median(a_values) / statistics.median(b_values)
    rate = false_alarm_rate(len(a_values), len(b_values))
    word = "within noise"
    if min(a_values) > max(b_values) or min(b_values) > max(a_values):
        word = "faster" if ratio > 1 else "slower"
    medians = f"median {_number(statistics.median(a_values))} vs "
    medians += f"{_number(statistics.median(b_values))} examples/s ({ratio:.2f}x)"
    ranges = " vs ".join(
        f"{_number(min(v), max(v))}-{_number(max(v))}" for v in (a_values, b_values)
    )
    if word == "within noise":
        sentence = f"{a.name} and {b.name} are within noise of each other: {medians}, but their "
        sentence += f"rounds overlap ({ranges})."
    else:
        sentence = f"{a.name} is {100 * abs(ratio - 1):.0f}% {word} than {b.name}: {medians}; "
        sentence += f"every round agrees ({ranges})"
        if rate >= FEW_ROUNDS_RATE:
            n, m = len(a_values), len(b_values)
            counts = f"{n} rounds each" if n == m else f"{n} and {m} rounds"
            sentence += f", but with {counts}, runs of equal speed fail to overlap "
            sentence += _one_time_in(rate)
        sentence += "."
    return Verdict(a.name, b.name, a_values, b_values, ratio, word, sentence, rate)


def record(verdict: Verdict, path: str | Path) -> Verdict:
    """Append the verdict, samples included, to the JSON list at `path` (for the tests, which
    re-derive each word from its samples); return it."""
    path = Path(path)
    saved = json.loads(path.read_text()) if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([*saved, asdict(verdict)], indent=2))
    return verdict


def results_table(results: list[RunResult]) -> str:
    """A text table of the runs (the first is the baseline of the 'vs' column); the rounds and
    ms/step columns only when some run has them. With rounds, the headers say that `seconds` is
    the timed rounds' sum and `examples/s` the median round's, so the two need not divide."""
    if not results:
        return "(no runs)"
    base = results[0]
    speed = "examples/s"
    if any(r.rounds for r in results):
        speed += ", median round" if all(r.rounds for r in results) else ", median round or total"
    seconds = "seconds, timed rounds" if any(r.rounds for r in results) else "seconds"
    header = ["run", seconds, speed, "rounds (low-high)", "ms/step", f"vs {base.name}"]
    rows = [
        [
            r.name,
            f"{r.seconds:.2f}",
            f"{r.examples_per_sec:,.0f}",
            f"{min(r.rounds):,.0f}-{max(r.rounds):,.0f}" if r.rounds else "",
            f"{r.step_ms:.1f}" if r.batch_size else "",
            f"{r.examples_per_sec / base.examples_per_sec:.2f}x" if base.examples_per_sec else "",
        ]
        for r in results
    ]
    shown = [i for i in range(len(header)) if any(row[i] for row in rows)]
    return format_table([header[i] for i in shown], [[row[i] for i in shown] for row in rows])
