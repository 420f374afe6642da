"""Notebook 3b's verdict on where a step's time goes, by rule, from the run's record.

The record is the dict 3b saves as results.json: the sweep's points (global batch, rounds in
examples/s), the step's FLOPs and intensity, each limit's sets of rounds (rates) and the load
during each set. One rule, used by the notebook, `course bench` and the artifact check:

- a limit is the fastest round of all its sets (load only slows a round, so it is a lower bound);
  its low end, the other sets' fastest (`limit_range`), is a flag; it is searched up (`headroom`);
- no verdict (`withheld`) when other programs used more than `busy` of the cores during a set
  that decides it, the sweep's line misses a point by more than `line_tolerance` or has a
  negative fixed part, a set had fewer than `min_rounds` rounds, or a training run beat every
  round of the peak;
- else the step splits into the fixed part, the roof's part and the rest, the largest named over
  `majority` of the step (`split`) in every case `outcomes` searches; "undecided" names what
  flips it (`regime`);
- a set whose fastest round got less than `STARVED` of the usable CPUs' time ran starved
  (`starved_sets`); no side of the ridge rests on a limit whose sets all did (`all_starved`), and
  a verdict any of whose outcomes names a side is withheld then (the side rests on its ridge), as
  it is across a gap between a limit's sets (`gaps`);
- what an undecided run rules out: the outcomes no case produced (`ruled_out`);
- the step's side of the ridge at every ridge the limits' ranges give, or none from busy or
  starved sets, and not decided across a gap between a limit's sets (`ridge_sides`, `ridge`);
- notebook 3c's call between the all-reduce's alpha and its bytes (`all_reduce_call`),
  whether its share of a step can be given (`step_share_withheld`), and whether a byte's cost
  rises over rounds (`trend`).

Example:
    >>> from course_utils import verdict
    >>> verdict.limit_range({"section 1": [120e9, 124e9], "section 3": [205e9]})
    (205000000000.0, 124000000000.0)
    >>> verdict.side(intensity=40.0, peak=200e9, bandwidth=10e9)  # ridge 20, margin 2
    'compute-bound'
"""

from __future__ import annotations

import itertools

import numpy as np

from course_utils import timing
from course_utils.tables import count

#: The counted intensity may be off by this factor either way: within it, a point is near the ridge.
COUNT_MARGIN = 2.0
#: A part names the verdict only when it explains more than this share of the step.
MAJORITY = 0.5
#: The noise rule's rounds per set: fewer (the quick profile) is a smoke test.
MIN_ROUNDS = 5
#: A point of the sweep may lie this far from its line. Set by hand, like `timing.BUSY`: how often
#: a sound line misses by more, or a wrong one stays within, is not measured.
LINE_TOLERANCE = 0.15
#: A size of notebook 3c's all-reduce may lie this far from its range's line, set by hand too:
#: wider than the sweep's, as a small size is the difference of two fastest rounds (the size's
#: less the loop alone's), carrying the noise of both, where nothing is subtracted from a step.
ALL_REDUCE_TOLERANCE = 0.25
UNITS = {"peak": "FLOP/s", "bandwidth": "B/s"}
#: Two sets whose fastest rounds differ by more than this ran under different conditions.
GAP = 1.5
#: A set whose fastest round got less than this share of the usable CPUs' time (this process's
#: CPU seconds over the wall's, `timing.Timer.cores`) ran starved: a round's serial moments
#: (starting a call, waiting for its last result) cost a few percent, one lost core of two half.
#: Set on 2 cores (3b's product grows with the CPUs, `matrix_size`, to fill many); from a limit
#: whose sets all ran starved no side of the ridge is given (`regime`, `ridge`).
STARVED = 0.75
#: 3c's trend needs this many rounds whose lines hold, and most: 4 vs 4 overlap but 1 time in 35.
TREND_ROUNDS = 4
#: Every outcome `split` can give (`ruled_out` lists those no case of `regime` gave).
OUTCOMES = (
    "overhead-bound",
    "compute-bound",
    "memory-bandwidth-bound",
    "near the ridge",
    "below both roofs",
    "no single part dominates",
)
SIDES = {"compute-bound", "memory-bandwidth-bound", "near the ridge"}
SWEEP_SET = "section 3"  # the set measured beside the sweep: it decides every verdict
#: Why a point can lie above its roof: the peak is floored at the fastest training run, so only
#: the slanted roof (bandwidth x counted intensity) can be beaten.
ABOVE_ROOF = (
    "a limit was measured low or the counted bytes overstate the step's (the count may be off "
    "by 2x: fewer bytes, a higher intensity)"
)


def limit_range(sets: dict[str, list[float]], floor: float = 0.0) -> tuple[float, float]:
    """(limit, low): the fastest round of all sets, and the fastest round of the other sets,
    each at least `floor` (the fastest training run, for the peak). When two sets' fastest
    rounds are more than `GAP` apart (`set_gap`), the low end is the slowest set's fastest
    round. The low end only flags: the verdict searches upward from the limit (`headroom`).

    >>> limit_range({"a": [100.0], "b": [62.0, 60.0]}, floor=80.0)
    (100.0, 80.0)
    >>> limit_range({"a": [228.0], "b": [224.0], "c": [94.0]})  # a 2.4x gap: c is the low end
    (228.0, 94.0)
    """
    tops = [max(sets[label]) for label in deciding(sets)]  # the low end is the slowest of these
    return max(max(tops), floor), max(min(tops), floor)


def deciding(sets: dict[str, list[float]]) -> list[str]:
    """The sets that give a limit and its low end: the two with the fastest rounds, and the
    slowest set too when a gap over `GAP` makes it the low end (`limit_range`)."""
    order = sorted(sets, key=lambda label: max(sets[label]))
    return [*order[:1], *order[-2:]] if set_gap(sets) > GAP and len(order) > 2 else order[-2:]


def searched(sets: dict[str, list[float]]) -> list[str]:
    """The sets whose load can bear on a verdict: the two with the fastest rounds (the limit and
    its runner-up), the runner-up even when a gap (`GAP`) lies between them: a busy runner-up
    withholds. A third, slower set only flags (the search starts at the limit): load during it,
    which can only slow its rounds, cannot change a verdict."""
    return sorted(sets, key=lambda label: max(sets[label]))[-2:]


def busiest(loads: dict[str, dict[str, float]], sets: dict[str, dict]) -> tuple[float, str, str]:
    """(share, limit, set): the most other programs used of the cores during a set that decides
    a verdict, each limit's two fastest sets and the sweep's; (0, "", "") with no load recorded.
    The sweep's load is stored under both limits: its set is named before a limit's.

    >>> busiest({"peak": {"a": 0.1, "b": 0.3}}, {"peak": {"a": [2.0], "b": [1.0], "c": [0.5]}})
    (0.3, 'peak', 'b')
    """
    found = [
        (loads[name][label], label == SWEEP_SET, name, label)
        for name in loads
        for label in {*searched(sets[name]), SWEEP_SET}
        if label in loads[name]
    ]
    share, _, name, label = max(found, default=(0.0, False, "", ""))
    return share, name, label


def while_busy(name: str, label: str) -> str:
    """When the machine was busy, in words: the sweep, or the limit's set."""
    return (
        f"the sweep of {label} ran" if label == SWEEP_SET else f"the {name} was measured, {label}"
    )


def busy_words(share: float, name: str, label: str) -> str:
    """3b's flag for a busy machine (`busiest`'s share, limit and set), in words.

    >>> busy_words(0.84, "peak", "after the sweep")  # doctest: +ELLIPSIS
    'the machine was busy: other programs used 84% of its cores while the peak was measured, ...'
    """
    return (
        f"the machine was busy: other programs used {100 * share:.0f}% of its cores while "
        f"{while_busy(name, label)}: no verdict from this run (run again on a quiet machine)"
    )


def line_cores(
    batches: list[float], step_ms: list[float], worths: list[float], tolerance: float
) -> str:
    """Whether the cores' worth each sweep point got explains why its line misses a point: the
    same line fitted to CPU time (ms x cores' worth, section 1's model: a step's work is its time
    times the cores it got) misses every point by at most half of `tolerance` (it can explain
    the miss), more than `tolerance` (it does not), or in between (too close to tell: two lines
    near one hand-set edge).

    >>> print(line_cores([64, 128, 192], [10.0, 10.0, 30.0], [1.0, 2.0, 1.0], 0.15))
    ... # doctest: +NORMALIZE_WHITESPACE
    counted in CPU time (ms x cores' worth, 1.0-2.0), the line misses at most 0.0% (in wall
    time 66.7%): the unequal cores' worth can explain the miss
    >>> line_cores([64, 128, 192], [10.0, 10.0, 30.0], [1.0, 1.0, 1.0], 0.15).endswith("alone")
    True
    """
    _, _, worst = sweep_line(batches, [t * w for t, w in zip(step_ms, worths)])
    _, _, wall = sweep_line(batches, step_ms)
    low, high = min(worths), max(worths)
    spread = f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}"
    said = f"counted in CPU time (ms x cores' worth, {spread}), the line"
    both = f"{100 * abs(worst):.1f}% (in wall time {100 * abs(wall):.1f}%)"
    if abs(worst) <= tolerance / 2:
        return f"{said} misses at most {both}: the unequal cores' worth can explain the miss"
    if abs(worst) <= tolerance:
        return (
            f"{said} misses at most {both}, within the tolerance but not half of it: too close "
            "to tell whether the cores' worth explains the miss"
        )
    return (
        f"{said} still misses a point by {100 * worst:+.1f}% (tolerance "
        f"{100 * tolerance:.0f}%): something moved the points that is not the cores' worth alone"
    )


def sweep_line(batches: list[float], step_ms: list[float]) -> tuple[float, float, float]:
    """(ms per example, fixed ms, the worst relative miss of a point, signed) of the least-squares
    line through (global batch, ms per step).

    >>> [round(v, 3) for v in sweep_line([64, 128, 192], [10.0, 21.0, 30.0])]
    [0.156, 0.333, 0.033]
    """
    per_example_ms, fixed_ms = (float(v) for v in np.polyfit(batches, step_ms, 1))
    misses = [(fixed_ms + per_example_ms * b) / t - 1 for b, t in zip(batches, step_ms)]
    return per_example_ms, fixed_ms, max(misses, key=abs)


def line_problem(batches: list[float], step_ms: list[float], tolerance: float) -> str:
    """What is wrong with the sweep's line through (global batch, ms per step), "" if nothing:
    a point it misses by more than `tolerance`, or a negative fixed part.

    >>> line_problem([64, 128, 192], [10.0, 20.0, 30.0], 0.15)
    ''
    """
    _, fixed_ms, worst = sweep_line(batches, step_ms)
    if abs(worst) > tolerance:
        return (
            f"the sweep's line misses a point by {100 * worst:+.1f}% "
            f"(tolerance {100 * tolerance:.0f}%)"
        )
    if fixed_ms < 0:
        return f"the sweep's line has a negative fixed part ({fixed_ms:.2f} ms)"
    return ""


def side(intensity: float, peak: float, bandwidth: float, margin: float = COUNT_MARGIN) -> str:
    """The roof's side of the ridge (peak / bandwidth), or "near the ridge" within `margin`."""
    ridge = peak / bandwidth
    if intensity >= margin * ridge:
        return "compute-bound"
    return "memory-bandwidth-bound" if intensity <= ridge / margin else "near the ridge"


def split(  # noqa: PLR0913 - the record, the step, its fixed part, two limits, the count's factor
    record: dict,
    step_ms: float,
    fixed_ms: float,
    peak: float,
    bandwidth: float,
    factor: float = 1.0,
) -> str:
    """The verdict at these limits and this step time: the largest of the fixed part, the roof's
    part and the rest when over the majority, else "no single part dominates"; "above its roof"
    when the step ran faster than the roof allows (`ABOVE_ROOF` says why it can). The roof's
    part is read at the counted intensity x `factor` (the count may be off: `COUNT_MARGIN`);
    its side, at the counted intensity within the margin. Notebook 3b shows this code; a test
    keeps the two equal."""
    intensity = record["intensity"]
    slanted = bandwidth * intensity * factor
    roof = record["flops_per_step"] / (step_ms / 1000) / min(peak, slanted)
    if roof > 1:
        return "above its roof"
    fixed = min(max(fixed_ms / step_ms, 0.0), 1.0)
    shares = [  # the first of equal shares wins
        (fixed, "overhead-bound"),
        (roof, side(intensity, peak, bandwidth, record.get("count_margin", 1.0))),
        (max(1 - fixed - roof, 0.0), "below both roofs"),
    ]
    share, name = max(shares, key=lambda item: item[0])
    return name if share > record.get("majority", 0.0) else "no single part dominates"


def limits_of(record: dict) -> dict[str, tuple[float, float]]:
    """The two limits (value, low) for all physical devices, from the sets of rounds recorded
    (a device's peak at least the sweep's best rate over its devices and the one-device run's,
    `single_flops`); a record without rounds gives them as exact."""
    if "peak_rounds" not in record:
        return {"peak": (record["peak_flops"],) * 2, "bandwidth": (record["memory_bandwidth"],) * 2}
    physical = record["physical_devices"]
    floor = max(record["sweep_best_flops"] / physical, record.get("single_flops", 0.0))
    peak = limit_range(record["peak_rounds"], floor)
    bandwidth = limit_range(record["bandwidth_rounds"])
    return {
        k: tuple(physical * v for v in r) for k, r in (("peak", peak), ("bandwidth", bandwidth))
    }


def sweep_ms(record: dict) -> list[float]:
    """Each sweep point's ms per step: its fastest round (load only slows one) when its rounds
    (examples/s) are recorded, else the `fastest_ms` recorded (3b's name: notebook 3's and
    `timing.RunResult`'s `step_ms` is the median round's)."""
    return [
        1000 * p["global_batch"] / max(p["rounds"]) if p.get("rounds") else p["fastest_ms"]
        for p in record["sweep"]
    ]


def peak_measured_low(record: dict) -> str:
    """Why the peak was measured low ("" if not): a training run beat its every round."""
    if "peak_rounds" not in record:
        return ""
    physical = record["physical_devices"]
    best = limits_of(record)["peak"][0] / physical  # a device's floor, when above every round
    fastest = max(max(rounds) for rounds in record["peak_rounds"].values())
    if best <= fastest:
        return ""
    each = " a device" if physical > 1 else ""  # the run without a strategy uses one
    return (
        f"the peak was measured low: a training run went faster ({best / 1e9:,.1f} GFLOP/s{each}, "
        f"the peak's sets at most {fastest / 1e9:,.1f})"
    )


def withheld(record: dict) -> str:
    """Why no verdict is drawn ("withheld: ..."), or "" when one is: a busy machine, a sweep line
    that does not hold, fewer rounds than the noise rule's, a peak measured low."""
    sets = {"peak": record.get("peak_rounds", {}), "bandwidth": record.get("bandwidth_rounds", {})}
    share, name, label = busiest(record.get("loads", {}), sets)
    if share > record.get("busy", 1.0):
        return (
            f"withheld: the machine was busy (other programs used {100 * share:.0f}% of its "
            f"cores while {while_busy(name, label)})"
        )
    if "line_tolerance" in record:
        batches = [p["global_batch"] for p in record["sweep"]]
        problem = line_problem(batches, sweep_ms(record), record["line_tolerance"])
        if problem:
            return f"withheld: {problem}"
    rounds, needed = record.get("rounds"), record.get("min_rounds", 0)
    if rounds is not None and rounds < needed:
        return f"withheld: {rounds} rounds per set, a smoke test; a verdict needs {needed}"
    low = peak_measured_low(record)
    return f"withheld: {low}" if low else ""


def _ranges(record: dict) -> tuple[dict, dict, dict, dict, float]:
    # What `regime` works each case out at: limits, steps, count factors, fixed parts, worst miss.
    batches = [p["global_batch"] for p in record["sweep"]]
    times = sweep_ms(record)
    _, fixed_ms, worst = sweep_line(batches, times)
    worst = abs(worst)
    point = record["sweep"][batches.index(record["batch"])]
    step = times[batches.index(record["batch"])]
    rounds = sorted(point.get("rounds") or [])
    steps = {"step": step, "next": 1000 * record["batch"] / rounds[-2] if rounds[1:] else step}
    margin = record.get("count_margin", 1.0)
    factors = {"counted": 1.0, "fewer bytes": margin, "more bytes": 1 / margin}
    band = worst * step  # the line's worst miss, at this step's time
    fixes = {"line": fixed_ms, "low": fixed_ms - band, "high": fixed_ms + band}
    cores, usable = record.get("cores", {}), record.get("usable_cpus", 0.0)
    physical = record.get("physical_devices", 1)
    values = limits_of(record)  # the peak's value can be a training run's floor: searched from it
    up = {
        k: headroom(
            record.get(f"{k}_rounds", {}), cores.get(k, {}), usable, values[k][0] / physical
        )
        for k in UNITS
    }
    limits = {k: (v, v * up[k]) for k, (v, _) in values.items()}  # value, searched to
    return limits, steps, factors, fixes, worst


def headroom(
    sets: dict[str, list[float]], cores: dict[str, list[float]], usable: float, floor: float = 0.0
) -> float:
    """How far above its value (the fastest round, or `floor` where a training run beat it: a
    lower bound) a limit is searched: the best rate per core of any set (its fastest round over
    that round's cores' worth) times `usable` CPUs, over the value; at least 1 / `STARVED`, as
    load slows a round without taking cores too (a GPU records none); 1 with no `sets` (exact
    limits). The low end is never searched.
    >>> round(headroom({"a": [2.0, 3.0], "b": [2.4]}, {"a": [1.2, 1.5], "b": [0.8]}, 2.0), 2)
    2.0
    >>> round(headroom({"a": [2.0, 3.0], "b": [2.4]}, {"a": [1.2, 1.5], "b": [0.8]}, 2.0, 4.0), 2)
    1.5"""
    rates = [max(r) / c[r.index(max(r))] for k, r in sets.items() if (c := cores.get(k))]
    value = max(max((max(r) for r in sets.values()), default=0.0), floor)
    return max(1 / STARVED, usable * max(rates) / value if rates else 0.0) if sets else 1.0


def _changes(case: tuple) -> int:
    low, which, estimate, fix = case
    return len(low) + (which == "next") + (estimate != "counted") + (fix != "line")


#: Points per limit in `outcomes`' search inside the limits' ranges (a geometric grid).
GRID = 17


def _inside(limits: dict, intensity: float, margin: float) -> list[tuple[float, float]]:
    # (peak, bandwidth) pairs in both ranges: a geometric grid, and pairs whose ridge is in the
    # near band (intensity / margin to x margin) at its lowest and highest limits (not monotone).
    (p_lo, p_hi), (b_lo, b_hi) = limits["peak"], limits["bandwidth"]
    pairs = [(p, b) for p in np.geomspace(p_lo, p_hi, GRID) for b in np.geomspace(b_lo, b_hi, GRID)]
    low, high = max(p_lo / b_hi, intensity / margin), min(p_hi / b_lo, intensity * margin)
    if low < high:
        inner = np.geomspace(low, high, 5)[1:-1]  # strictly inside the band
        for ridge_at in [*inner, min(max(p_lo / b_lo, inner[0]), inner[-1])]:
            for p in (max(p_lo, ridge_at * b_lo), min(p_hi, ridge_at * b_hi)):
                pairs.append((p, p / ridge_at))
    return pairs


def outcomes(record: dict) -> dict[tuple, str]:
    """`regime`'s cases, fewest changes first, each with its outcome (`split`): each limit at its
    value or x `headroom`, the step at its fastest or next round, the count's factor either way,
    the fixed part within the line's worst miss. A case that puts the step above its roof at a
    count's factor is left out: the run rules that intensity out. Outcomes found only inside the
    limits' ranges (`_inside`: a grid, and the ridges in the near band) are added as cases naming
    the limits raised ("peak", "inside: <outcome>") say."""
    limits, steps, factors, fixes, _ = _ranges(record)

    def at(high: tuple[str, ...], which: str, estimate: str, fix: str) -> str:
        peak, bandwidth = (limits[k][k in high] for k in ("peak", "bandwidth"))
        return split(record, steps[which], fixes[fix], peak, bandwidth, factors[estimate])

    cases = sorted(  # fewest changes first: what an outcome needs is its smallest cases
        [
            (low, which, estimate, fix)
            for size in range(3)
            for low in itertools.combinations(limits, size)
            for which in ("step", "next")
            for estimate in factors
            for fix in fixes
        ],
        key=_changes,
    )
    found = {case: at(*case) for case in cases}
    pairs = _inside(limits, record["intensity"], record.get("count_margin", 1.0))
    for which, estimate, fix in itertools.product(("step", "next"), factors, fixes):
        seen = {found[low, which, estimate, fix] for low, *_ in cases}
        inside: dict[str, tuple[str, ...]] = {}  # outcome: the fewest limits moved to give it
        for peak, bandwidth in pairs:
            outcome = split(record, steps[which], fixes[fix], peak, bandwidth, factors[estimate])
            moved = tuple(
                k for k, v in (("peak", peak), ("bandwidth", bandwidth)) if v > limits[k][0]
            )
            if outcome not in seen and len(moved) < len(inside.get(outcome, "xxx")):
                inside[outcome] = moved
        for outcome, moved in inside.items():
            found[(*moved, f"inside: {outcome}"), which, estimate, fix] = outcome
    return {
        case: outcome
        for case, outcome in found.items()
        if case[2] == "counted" or outcome != "above its roof"
    }


def ruled_out(record: dict) -> list[str]:
    """The outcomes (`OUTCOMES`) no case of `regime` produced: what a run rules out even when it
    decides nothing; [] when no verdict is drawn (`withheld`, or `regime` withholds it: a side
    from a limit whose sets all ran starved)."""
    if withheld(record) or regime(record).startswith("withheld"):
        return []
    found = set(outcomes(record).values())
    return [outcome for outcome in OUTCOMES if outcome not in found]


def regime(record: dict) -> str:
    """3b's verdict: `withheld` first; else `split` at each of `outcomes`' cases. When these
    differ: "undecided: A or B, with ...", naming every limit (and the step, the count, the fixed
    part) that any listed outcome needs. From a limit whose sets all ran starved (`all_starved`:
    the limit may be low), an outcome naming a side of the ridge withholds the verdict: the side
    rests on that limit's ridge. A higher limit's smaller roof's part is searched (`headroom`).
    Across a gap between a limit's sets (`gaps`) an outcome naming a side withholds it too: the
    side would rest on the fastest sets alone, which `ridge` does not decide either."""
    reason = withheld(record)
    if reason:
        return reason
    limits, steps, _, fixes, worst = _ranges(record)
    margin = record.get("count_margin", 1.0)
    found_cases = outcomes(record)
    first = found_cases[((), "step", "counted", "line")]
    found = sorted(set(found_cases.values()))
    if (starved := all_starved(record)) and SIDES & set(found):
        return f"withheld: an outcome names a side of the ridge, and {starved}"
    if found == ["above its roof"]:
        return (
            "undecided: the step ran above its roof at both ends of each limit's range, so "
            f"{ABOVE_ROOF}, and no roof can be named"
        )
    if (gap := gaps(record)) and SIDES & set(found):  # as `ridge`: no side across a gap
        return (
            f"withheld: an outcome names a side of the ridge, and {gap}, so that side would rest "
            "on the fastest sets alone"
        )
    if len(found) == 1:
        return first
    needs: dict[str, None] = {}
    for outcome in set(found) - {first}:
        making = [case for case in found_cases if found_cases[case] == outcome]
        for low, which, estimate, fix in (
            case for case in making if _changes(case) == _changes(making[0])
        ):
            needs |= dict.fromkeys([*low, *(["step"] if which == "next" else [])])
            needs |= dict.fromkeys(["count"] if estimate != "counted" else [])
            needs |= dict.fromkeys(["fixed"] if fix != "line" else [])
    ranges = [
        f"the {k} between {limits[k][0] / 1e9:,.1f} and {limits[k][1] / 1e9:,.1f} G{UNITS[k]} "
        f"({limits[k][1] / limits[k][0]:.2f}x, `headroom`)"
        for k in limits
        if k in needs
    ]
    if "step" in needs:
        ranges.append(
            f"the step between {steps['step']:.1f} and {steps['next']:.1f} ms "
            "(its two fastest rounds)"
        )
    if "count" in needs:
        ranges.append(
            f"the count's factor {margin:g} (an intensity of {record['intensity'] / margin:.1f} "
            f"to {record['intensity'] * margin:.1f} FLOP/B)"
        )
    if "fixed" in needs:
        ranges.append(
            f"the fixed part between {max(fixes['low'], 0.0):.2f} and {fixes['high']:.2f} ms "
            f"(the line's worst miss of a point, {100 * worst:.0f}%"
            f"{'; none below 0' * (fixes['low'] < 0)})"
        )
    return f"undecided: {' or '.join(found)}, with {' and '.join(ranges)}"


def gaps(record: dict) -> str:
    """The limits whose sets disagree beyond `GAP` (`set_gap`), in words; "" when none: a side of
    the ridge from such a limit would rest on its fastest set alone (`regime` says so, `ridge`
    does not decide it)."""
    sets = {k: record.get(f"{k}_rounds") or {} for k in UNITS}
    apart = ", ".join(f"{k} {set_gap(v):.2f}x" for k, v in sets.items() if v and set_gap(v) > GAP)
    return f"a limit's sets disagree beyond {GAP:g}x ({apart})" if apart else ""


def set_gap(sets: dict[str, list[float]]) -> float:
    """The span of the sets' fastest rounds, fastest set over slowest (1.0 with one set): over
    `GAP`, the sets ran under different conditions, however close the sets between them lie.

    >>> round(set_gap({"a": [108.0, 81.0], "b": [67.0], "c": [69.5, 60.8]}), 2)
    1.61
    """
    tops = [max(rounds) for rounds in sets.values()] or [1.0]
    return max(tops) / min(tops)


def starved_sets(
    sets: dict[str, list[float]], cores: dict[str, list[float]], usable: float
) -> list[str]:
    """The sets whose fastest round got less than `STARVED` of `usable` CPUs' worth of this
    process's CPU time (`cores`: each round's, as `timing.Timer.cores`); a set with no cores
    recorded (on a GPU the work waits for the device) is not one.

    >>> starved_sets({"a": [60.0, 58.0], "b": [100.0]}, {"a": [1.0, 1.1], "b": [1.9]}, 2.0)
    ['a']
    """
    return [
        label
        for label, rates in sets.items()
        if cores.get(label) and cores[label][rates.index(max(rates))] < STARVED * usable
    ]


def cores_shown(value: float, usable: float) -> str:
    """A cores' worth as printed: one decimal, more when rounding would put it on the other side
    of the starved line (`STARVED` of the usable CPUs), so a starved 1.495 of 2 never reads 1.5.

    >>> cores_shown(1.43, 2.0), cores_shown(1.495, 2.0), cores_shown(1.4999, 2.0)
    ('1.4', '1.495', '1.500')
    """
    line = STARVED * usable
    for digits in (1, 2, 3):
        shown = f"{value:.{digits}f}"
        if (float(shown) < line) == (value < line):
            break
    return shown


def worth(got: list[float], usable: float) -> str:
    """Cores' worth in words, one figure when the lowest and highest print the same (`cores_shown`).

    >>> worth([0.21, 0.24], 2.0), worth([1.0, 1.14], 2.0)
    ("0.2 of 2 cores' worth", "1.0-1.1 of 2 cores' worth")
    """
    low, high = cores_shown(min(got), usable), cores_shown(max(got), usable)
    return f"{low if low == high else f'{low}-{high}'} of {usable:g} cores' worth"


def _fastest_cores(sets: dict, cores: dict, labels: list[str], usable: float) -> str:
    # "1.0-1.1 of 2 cores' worth": what the labelled sets' fastest rounds got.
    return worth([cores[label][sets[label].index(max(sets[label]))] for label in labels], usable)


def spread(rates: list[float], unit: str, cores: list[float], usable: float) -> str:
    """A set of rounds in words (3b): the fastest, median and slowest rate in G`unit`, and the
    cores' worth its rounds got, the fastest round's too when they differ (none given on a GPU:
    pass no `cores`).

    >>> print(spread([2e9, 1e9, 1.5e9], "B/s", [1.0, 1.9, 1.2], 2.0))
    ... # doctest: +NORMALIZE_WHITESPACE
    2.0 GB/s (fastest of 3 rounds; median 1.5, slowest 1.0; 1.0-1.9 of 2 cores' worth, the
    fastest round 1.0)
    >>> spread([1e9, 2e9], "B/s", [1.0, 1.46], 2.0).split("; ")[-1]  # starved: never 1.5
    "1.0-1.46 of 2 cores' worth, the fastest round 1.46)"
    >>> spread([2e9, 1e9], "B/s", [0.21, 0.24], 2.0)
    "2.0 GB/s (fastest of 2 rounds; median 1.5, slowest 1.0; 0.2 of 2 cores' worth)"
    """
    got = f"; {worth(cores, usable)}" if cores else ""
    if "-" in got:  # a range: the fastest round's own, the one a limit rests on
        got += f", the fastest round {cores_shown(cores[rates.index(max(rates))], usable)}"
    return (
        f"{max(rates) / 1e9:,.1f} G{unit} (fastest of {len(rates)} rounds; median "
        f"{float(np.median(rates)) / 1e9:,.1f}, slowest {min(rates) / 1e9:,.1f}{got})"
    )


def starved_note(  # noqa: PLR0913 - a limit's name, its sets, their cores and loads, two limits
    name: str,
    sets: dict[str, list[float]],
    cores: dict[str, list[float]],
    loads: dict[str, float],
    usable: float,
    busy: float,
    floor: float = 0.0,
) -> str:
    """What a limit's starved sets (`starved_sets`) say, "" when none ran starved: how many, what
    their fastest rounds got, where the rest went (others, when their load was over `busy`; else
    the share of the cores that sat idle at least: the work did not spread over them), and
    whether the low end (`limit_range` with `floor`: a training run above every set's low end
    is not a set) or every set is one. A set missing from `loads` had rounds too short to
    measure the others' share (`timing.load_reading`): when no starved set's was measured, the
    note says so and guesses neither; when some were, it says in how many the share was measured.

    >>> print(starved_note("bandwidth", {"a": [60.0]}, {"a": [1.0]}, {"a": 0.18}, 2.0, 0.2))
    ... # doctest: +NORMALIZE_WHITESPACE
    bandwidth in 1 of 1 set (1.0 of 2 cores' worth; others 18%): others under 20%, at least 32%
    of the cores idle (the work did not spread over them); every set, so no side of the ridge
    rests on it
    """
    hungry = starved_sets(sets, cores, usable)
    if not hungry:
        return ""
    shares = [loads[label] for label in hungry if label in loads]  # missing: unmeasured
    others = max(shares, default=0.0)
    most = max(cores[label][sets[label].index(max(sets[label]))] for label in hungry)
    told = f"{100 * others:.0f}%" if shares else "unmeasured"
    if len(shares) > 1:  # the most of several: not every set's
        told = f"up to {told}"
    if 0 < len(shares) < len(hungry):  # the rest too short to measure: one share is not theirs
        told += f" ({len(shares)} of them measured, {len(hungry) - len(shares)} unmeasured)"
    note = f"{name} in {len(hungry)} of {count(len(sets), 'set')} "
    note += f"({_fastest_cores(sets, cores, hungry, usable)}; others {told}): "
    if others > busy:  # measured: the others' share; thread waits are not (the notebook says)
        note += "others took cores" + (" in the measured ones" if len(shares) < len(hungry) else "")
    elif not shares:
        note += "its rounds too short to tell others' load from idle cores"
    else:
        idle = max(0.0, 1 - most / usable - others)  # wall time nobody's CPU seconds filled
        note += (
            f"others under {100 * busy:.0f}%, at least {100 * idle:.0f}% of the cores idle (the "
            "work did not spread over them)"
        )
    low = min(deciding(sets), key=lambda label: max(sets[label]))  # the low end's set
    if len(hungry) == len(sets):
        return f"{note}; every set, so no side of the ridge rests on it"
    if limit_range(sets, floor)[1] > max(sets[low]):  # the low end is the training run's
        return note
    return f"{note}; the low end is one of them" if low in hungry else note


def limit_words(  # noqa: PLR0913 - a limit's name, its sets, floor, devices, unit
    name: str, sets: dict[str, list[float]], floor: float, physical: int, unit: str
) -> str:
    """A limit in words (3b): its value and low end for all `physical` devices (`limit_range`,
    at least `floor`, the fastest training run, for the peak) and where the low end comes from.

    >>> limit_words("bandwidth", {"a": [60e9], "b": [50e9]}, 0.0, 1, "B/s")
    "bandwidth: at least 60.0 GB/s; the low end 50.0 (83% of it: the other sets' fastest)"
    """
    value, low = limit_range(sets, floor)
    fastest = max(max(rounds) for rounds in sets.values())  # every set's rounds
    raised = f" (a training run's rate: the {name} was measured low)" if floor > fastest else ""
    runner_up = limit_range(sets)[1]  # the low end before the floor
    source = "the other sets' fastest"
    if set_gap(sets) > GAP:
        source = "the slowest set's fastest, across the gap"
    if low > runner_up:  # the floor: the fastest training run beat that low end
        source = f"the fastest training run; {source} {physical * runner_up / 1e9:,.1f}"
    return (
        f"{name}: at least {physical * value / 1e9:,.1f} G{unit}{raised}; the low end "
        f"{physical * low / 1e9:,.1f} ({100 * low / value:.0f}% of it: {source})"
    )


def part_flags(  # noqa: PLR0913 - the parts, the sweep's load, the per-example rate, peak, cores
    fixed: float,
    roof: float,
    sweep_load: float,
    busy: float,
    per_example_rate: float,
    peak: float,
    worths: tuple[float, float] = (0.0, 0.0),
    *,
    roof_from_peak: bool = True,
) -> list[str]:
    """3b's flags on the split of a step: the fixed part and the roof's part (shares of the step)
    overlapping, the sweep run on a busy machine (`sweep_load` over `busy`), the per-example
    part's rate (`per_example_rate`, FLOP/s; 0 when the line gives none) above the peak, or
    compared with a peak whose round got another cores' worth than the run, fewer or more
    (`worths`: the peak's fastest round's, `top_cores`, and the run's; 0 for the peak's when not
    read: a GPU, or a peak a training run raised); the roof's part is said to share that peak
    only when its roof is the peak (`roof_from_peak`: the step right of the ridge).

    >>> part_flags(0.3, 0.4, 0.05, 0.2, 90e9, 100e9)
    []
    >>> part_flags(0.3, 0.4, 0.05, 0.2, 90e9, 100e9, (1.0, 1.8))  # doctest: +ELLIPSIS
    ["the per-example part's rate is compared with a peak whose round got 1.0 cores' worth, ..."]
    """
    flags = []
    if fixed + roof > 1:
        flags.append(
            f"the fixed part and the roof's part sum to {100 * (fixed + roof):.0f}%: they "
            "overlap, so this step does not split into three parts; each is still compared "
            "with half the step"
        )
    if sweep_load > busy:
        flags.append(
            f"the sweep ran on a busy machine (others {100 * sweep_load:.0f}%): its line and "
            "these parts come from its slowed step times"
        )
    if per_example_rate > peak:
        flags.append(
            "the per-example part's rate runs above the peak: the peak was measured low, or the "
            "rate (from the time one more example adds) is not a computation's"
        )
    peak_got, run_got = worths
    if per_example_rate and peak_got and round(peak_got, 1) != round(run_got, 1):
        fewer = peak_got < run_got
        flags.append(
            f"the per-example part's rate is compared with a peak whose round got {peak_got:.1f} "
            f"cores' worth, the run {run_got:.1f}: "
            + (
                "a peak on as many cores may be higher, and the share read too high"
                if fewer
                else "on as many cores the run may be faster, and the share read too low"
            )
            + (
                " (the roof's part too: its time comes from the same peak)"
                if roof_from_peak
                else ""
            )
        )
    return flags


def top_cores(sets: dict[str, list[float]], cores: dict[str, list[float]]) -> float:
    """The cores' worth the fastest round of all `sets` got (0 when not recorded).
    >>> top_cores({"a": [2.0, 3.0], "b": [1.0]}, {"a": [1.2, 1.8], "b": [1.9]})
    1.8"""
    top = max(sets, key=lambda label: max(sets[label]))
    rounds = cores.get(top) or []
    return rounds[sets[top].index(max(sets[top]))] if rounds else 0.0


def all_starved(record: dict) -> str:
    """Which limits' sets all ran starved (`starved_sets`), in words; "" when none (or no
    cores were recorded): no side of the ridge rests on such a limit."""
    usable, said = record.get("usable_cpus", 0.0), []
    for name, key in (("peak", "peak_rounds"), ("bandwidth", "bandwidth_rounds")):
        sets, cores = record.get(key, {}), record.get("cores", {}).get(name, {})
        if sets and len(starved_sets(sets, cores, usable)) == len(sets):
            said.append(
                f"every {name} set ran starved ({_fastest_cores(sets, cores, list(sets), usable)}"
                " in its fastest round), so the limit may be low"
            )
    return " and ".join(said)


def all_reduce_call(fit: dict, gradient_bytes: int, loads: list[float], busy: float) -> str:
    """Notebook 3c's call at the gradients' size between alpha and bytes x beta (`fit`: 3c's
    "alpha", "beta_small", "seconds" and "errors" by size): "too close to call" within the
    line's worst error of the line's time there (3c's `alpha_or_bytes`, shown in its cells and
    tested to agree); withheld when the machine was busy during a
    set of rounds (a share of `loads` over `busy`), the line misses a size beyond
    `ALL_REDUCE_TOLERANCE`, or alpha, a fitted intercept, exceeds a measured size's whole time
    beyond the line's worst miss (`alpha_above`: the run contradicts it).

    >>> fit = {"alpha": 1e-4, "beta_small": 1e-9, "seconds": {4096: 1.1e-4}, "errors": {4096: 0}}
    >>> all_reduce_call(fit, 50_000, loads=[0.05], busy=0.3)
    'alpha dominates'
    """
    alpha, bytes_part = fit["alpha"], gradient_bytes * fit["beta_small"]
    worst = max(abs(error) for error in fit["errors"].values())
    if max(loads, default=0.0) > busy:
        return (
            f"withheld: the machine was busy (other programs used {100 * max(loads):.0f}% of "
            "its cores during the all-reduce's rounds)"
        )
    if worst > ALL_REDUCE_TOLERANCE:
        return (
            f"withheld: the line misses a measured size by {100 * worst:.1f}% "
            f"(tolerance {100 * ALL_REDUCE_TOLERANCE:.0f}%)"
        )
    if alpha_above(fit):
        return f"withheld: {alpha_above(fit)}"
    if abs(alpha - bytes_part) <= worst * (alpha + bytes_part):  # inside the line's error band
        return "too close to call"
    return "alpha dominates" if alpha > bytes_part else "the bytes dominate"


def alpha_above(fit: dict) -> str:
    """Why a line's alpha is contradicted by its own run, "" when it is not: alpha, a fitted
    intercept, exceeds a measured size's whole time (a size costs alpha and more) by more than
    the line's worst miss of a size (`fit["errors"]`). Within it, alpha is that miss: the small
    sizes cost about alpha plus noise, and a relative fit's intercept sits near their average.
    With a slope of zero or more, a miss that large fails the line's tolerance first, so this
    fires on a line falling with size. One reason for notebook 3c's call (`all_reduce_call`),
    its share of a step and `course bench`.

    >>> alpha_above({"alpha": 1e-4, "seconds": {4096: 9.9e-5}, "errors": {4096: 0.02}})
    ''
    >>> print(alpha_above({"alpha": 1e-4, "seconds": {4096: 8e-5}, "errors": {4096: 0.1}}))
    ... # doctest: +NORMALIZE_WHITESPACE
    alpha, a fitted intercept (100.0 us), exceeds the whole measured time of 4 KiB (80.0 us) by
    more than the line's worst miss (10.0%)
    """
    worst = max((abs(error) for error in fit["errors"].values()), default=0.0)
    fastest = min(fit["seconds"], key=fit["seconds"].get)  # the size measured fastest
    if fit["alpha"] <= fit["seconds"][fastest] * (1 + worst):
        return ""
    return (
        f"alpha, a fitted intercept ({1e6 * fit['alpha']:.1f} us), exceeds the whole measured "
        f"time of {fastest / 1024:,.0f} KiB ({1e6 * fit['seconds'][fastest]:.1f} us) by more "
        f"than the line's worst miss ({100 * worst:.1f}%)"
    )


def trend(small: list[float], large: list[float]) -> str:
    """Notebook 3c's trend of a byte's cost between rounds, by the course's one noise rule
    (`timing.compare`, `timing.NOISE_RULE`) on the rounds' own slopes (`small`: each round's
    slope up to 1 MiB, `large`: from 4 to 16 MiB; nan: a round whose lines do not hold, left
    out): "more" when every kept round's large slope is above every kept round's small one,
    "less" when below, else within noise (the rounds overlap, whatever the ratios lean to); with
    fewer than `TREND_ROUNDS` kept, or not most rounds, too few to say. A round's own ratio above
    1 is no margin: 1.01x beside a 7x spread is noise.

    >>> nan = float("nan")
    >>> trend([1.0, nan, nan, nan, nan], [5.95, nan, nan, nan, nan])
    "too few rounds' lines hold to say (1 of 5; a trend needs 4 and most rounds)"
    >>> trend([1.0, 1.1, 0.9, 1.0], [1.6, 1.5, 1.7, 1.4])
    'more (independent rounds of equal slopes fail to overlap 1 time in 35)'
    >>> trend([1.0, 1.1, 0.9, 1.0], [1.01, 2.9, 7.4, 1.4])
    'within noise: the rounds lean to more, but their slopes overlap'
    """
    kept = [i for i, pair in enumerate(zip(small, large)) if not np.isnan(pair).any()]
    if len(kept) < max(TREND_ROUNDS, len(small) // 2 + 1):
        return (
            f"too few rounds' lines hold to say ({len(kept)} of {len(small)}; a trend needs "
            f"{TREND_ROUNDS} and most rounds)"
        )
    rounds = [
        timing.RunResult(n, 0.0, 0, rounds=[r[i] for i in kept])
        for n, r in (("large", large), ("small", small))
    ]
    said = timing.compare(*rounds)
    if said.word != "within noise":
        word = "more" if said.word == "faster" else "less"  # a higher slope: more per byte
        if said.false_alarm >= timing.FEW_ROUNDS_RATE:
            word += " (independent rounds of equal slopes fail to overlap 1 time in "
            word += f"{1 / said.false_alarm:.0f})"
        return word
    lean = "more" if said.speed_ratio > 1 else "less"
    return f"within noise: the rounds lean to {lean}, but their slopes overlap"


def _slopes(times: dict, small: list, large: list, fit_line, tolerance: float) -> tuple:
    # (small slope, large slope) of 3c's two lines (`fit_line`) through `times`; (nan, nan) with
    # a slope not above zero, or when `tolerance` is given and a line misses a point by more.
    lines = [(sizes, fit_line(sizes, [times[s] for s in sizes])) for sizes in (small, large)]
    misses = [abs((a + b * s) / times[s] - 1) for sizes, (a, b) in lines for s in sizes]
    slopes = tuple(b for _, (_, b) in lines)
    if min(slopes) <= 0 or (tolerance and max(misses) > tolerance):
        return float("nan"), float("nan")
    return slopes


def slopes_ratio(times: dict, small: list, large: list, fit_line, tolerance: float = 0.0) -> float:
    """Notebook 3c's ratio of its two ranges' slopes (`large`'s over `small`'s), each fitted by
    3c's `fit_line` through `times` (size: seconds); nan with a slope not above zero, or when
    `tolerance` is given and a line misses one of its points by more (section 2's check)."""
    small_slope, large_slope = _slopes(times, small, large, fit_line, tolerance)
    return large_slope / small_slope


def jump_line(  # noqa: PLR0913 - what, its rounds, section 2's lines, the load, the loop's, quick
    what: str, samples: dict, ranges: tuple, *, load: float, less: float = 0.0, quick: bool = False
) -> str:
    """Notebook 3c's cost of a byte from its large range against its small one (`slopes_ratio`;
    `ranges`: small sizes, large sizes, 3c's `fit_line`, its tolerance) on the sizes' fastest
    rounds (less `less`, the loop's cost) and each round alone, kept when its lines pass the
    tolerance; the trend over the kept rounds' slopes (`trend`), withheld as 3b's comparison when
    others used over `timing.BUSY` of the cores during the rounds (`load`), labelled a smoke test
    when stated in the quick profile (`quick`); the rounds left out. The ratio from the fastest
    rounds carries the same labels: a review read it as a finding with neither."""
    small, large, fit_line, tolerance = ranges
    fastest = {k: min(s) - less for k, s in samples.items()}
    best = slopes_ratio(fastest, small, large, fit_line, tolerance)  # checked, as each round is
    slopes = [
        _slopes({k: s[r] - less for k, s in samples.items()}, small, large, fit_line, tolerance)
        for r in range(len(next(iter(samples.values()))))
    ]
    each = [b / a for a, b in slopes]
    out = [str(r + 1) for r, ratio in enumerate(each) if np.isnan(ratio)]
    if np.isnan(best):  # section 2's check failed on the fastest rounds: no figure from them
        said = (
            f"{what}: no ratio from each size's fastest round (a line through them misses a point "
            f"by more than {tolerance:.0%} or has no slope"
        )
    else:
        said = (  # labelled as the trend is: under load a lower bound, in quick a smoke test
            f"{what}: a byte from 4 to 16 MiB costs {best:.2f}x one up to 1 MiB (each size's "
            f"fastest round{'; measured under load' * (load > timing.BUSY)}"
            f"{'; quick: a smoke test' * quick}"
        )
    kept = trend(*zip(*slopes))
    if not kept.startswith("too few"):
        low, high = np.nanmin(each), np.nanmax(each)
        said += f"; each round alone {low:.2f} to {high:.2f}x"
        if load > timing.BUSY:  # a load on some rounds only can make a trend: none from them
            kept = f"withheld: the machine was busy (others {100 * load:.0f}%)"
        elif quick:
            kept += " (quick: a smoke test)"
        if not np.isnan(best) and not round(low, 2) <= round(best, 2) <= round(high, 2):
            kept += (  # the sizes' fastest rounds are unlike any one round
                "; the first ratio lies outside the rounds': the sizes' fastest rounds are "
                "different rounds, so it is no round's (the trend reads the rounds)"
            )
    if out:
        kept += f"; rounds {', '.join(out)} left out: a line misses a point or has no slope"
    return f"{said}); over the rounds: {kept}"


def step_share_withheld(  # noqa: PLR0913 - each a reason section 2 withholds for
    replicas: int,
    step_load: float,
    loads: list[float],
    *,
    flagged: bool,
    busy: float,
    contradicted: str = "",
) -> str:
    """Why notebook 3c gives no all-reduce's share of a step, "" when it does: one replica (no
    line), the step's rounds (`step_load`) or a set of the line's (`loads`) run while other
    programs used more than `busy` of the cores, a line that misses a size (`flagged`), or an
    alpha the run contradicts (`contradicted`, `alpha_above`'s reason): as section 2's call.

    >>> print(step_share_withheld(2, step_load=0.6, loads=[0.1], flagged=False, busy=0.5))
    the machine was busy during the step's rounds (60%): the step ran slow
    """
    reasons = [
        ("one replica: nothing is sent, no all-reduce and no line (section 2)", replicas == 1),
        (
            f"the machine was busy during the step's rounds ({100 * step_load:.0f}%): the step "
            "ran slow",
            step_load > busy,
        ),
        (
            f"the machine was busy while the line was measured ({100 * max(loads):.0f}%, "
            "sections 1-2): the line ran slow",
            max(loads, default=0.0) > busy,
        ),
        ("the line misses a measured size beyond its tolerance (section 2)", flagged),
        (f"{contradicted} (section 2)", bool(contradicted)),
    ]
    return next((reason for reason, holds in reasons if holds), "")


def ridge_sides(  # noqa: PLR0913 - the step's intensity, the limits, load, busy, two reasons
    intensity: float, limits: dict, load: float, busy: float, low: str = "", gap: str = ""
) -> str:
    """The step's side of the ridge at every ridge the limits' ranges give (`limits`: name to
    its two ends), in words; none when `load`, the most other programs used of the cores during
    a limit's two fastest sets (`searched`), is over `busy`, or when `low` says why a limit may be
    measured low (a limit's sets all starved, `all_starved`; a training run beat the peak,
    `peak_measured_low`). When `gap` names limits whose sets disagree beyond `GAP` (`set_gap`),
    one side is not decided: it would rest on that limit's fastest set alone (`gaps` words it).

    >>> print(ridge_sides(50.0, {"peak": (200e9, 150e9), "bandwidth": (10e9, 9e9)}, 0.1, 0.5))
    ... # doctest: +NORMALIZE_WHITESPACE
    The step's 50.0 FLOP/B against a ridge of 15.0 to 22.2 (any pair of limits in their ranges):
    compute side.
    """
    if load > busy:
        return (
            f"No side of the ridge from this run: a limit's fastest sets ran busy (others "
            f"{100 * load:.0f}%), so it may be measured low, and a quiet run's limits can move the "
            "ridge either way (a higher peak raises it, a higher bandwidth lowers it)."
        )
    if low:
        return (
            f"No side of the ridge from this run: {low}, and a limit measured higher can move "
            "the ridge either way (a higher peak raises it, a higher bandwidth lowers it)."
        )
    ridges = sorted(p / b for p in limits["peak"] for b in limits["bandwidth"])
    low, high = ridges[0], ridges[-1]  # every ridge between them is some pair of limits'
    sides = [  # `side` at each ridge of the range, not only its ends
        name
        for name, holds in (
            ("compute side", intensity >= COUNT_MARGIN * low),
            ("memory-bandwidth side", intensity <= high / COUNT_MARGIN),
            ("near the ridge", low < intensity * COUNT_MARGIN and high > intensity / COUNT_MARGIN),
        )
        if holds
    ]
    said = (
        f"The step's {intensity:.1f} FLOP/B against a ridge of {low:.1f} to {high:.1f} (any "
        f"pair of limits in their ranges): {' or '.join(sides)}"
    )
    if gap and len(sides) == 1:  # a side from one set, across a gap: not decided
        return (
            f"{said} at the fastest sets, not decided by this run: {gap}, so that side would "
            "rest on its fastest set alone."
        )
    return said + (", not decided by this run." if len(sides) > 1 else ".")


def ridge(record: dict) -> str:
    """`ridge_sides` from 3b's record: its limits, the most others used during a limit's fastest
    set, why a limit may be low (`all_starved`, `peak_measured_low`), as `regime` withholds, and
    the limits whose sets disagree beyond `GAP` (no side from one set); a side from fewer rounds
    than `min_rounds` (the quick profile) is labelled a smoke test."""
    sets = {"peak": record["peak_rounds"], "bandwidth": record["bandwidth_rounds"]}
    load = max(record["loads"][k][label] for k in sets for label in searched(sets[k]))
    low = all_starved(record) or peak_measured_low(record)  # each limit up to its `headroom`:
    said = ridge_sides(
        record["intensity"], _ranges(record)[0], load, record["busy"], low, gaps(record)
    )
    rounds, needed = record.get("rounds"), record.get("min_rounds", 0)
    if said.startswith("The step's") and rounds is not None and rounds < needed:  # as `withheld`
        said += f" ({rounds} rounds per set, a smoke test; a verdict needs {needed})"
    return said
