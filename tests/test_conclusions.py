"""Conclusions a notebook prints about speed must follow from the samples it recorded.

Notebooks compare runs with `course_utils.timing.compare` and append each verdict, with its
samples, to artifacts/<notebook>/conclusions.json (`timing.record`).
`assert_conclusions_consistent` re-derives every word and percentage from those samples with code
of its own (all pairs of samples, numpy medians), so a sentence such as "slower" over rounds that
overlap fails the test whoever wrote it.
`assert_regime_consistent` checks notebooks 3 and 3b's verdict on where a step's time goes from
the batch sweep in their results.json: notebook 3's (overhead- or per-example-bound) with a line
fit of its own; 3b's by re-running the notebook's own rule, `verdict.regime`, on the recorded
numbers (its fastest rounds and measured roofline), which confirms the record but cannot find an
error in the rule. The rule itself (overhead-, memory-bandwidth- or compute-bound, below both
roofs, near the ridge, a part named only above half the step, undecided when a point lies above
its roof or the limits' range could flip it, withheld on a busy machine or from a sweep line that
misses its points) is checked by the unit tests below, against hand-written expected verdicts.
3b's limits must be the fastest round of all (and the other sets' fastest), each pair of its
section 4 models must lean as its split gives (scipy's binomial test, none at chance level), and
notebook 3c's all-reduce line must be the one its rounds give, flag any measured size beyond the
notebook's tolerance, and call "alpha dominates" only outside its own worst error.
Both checkers live in course_tools/artifact_check.py; the nbval and browser runs and CI's device
sweep apply them right after each run, and the tests below check the checkers.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from helpers import assert_conclusions_consistent, assert_regime_consistent

from course_tools import bench
from course_tools.artifact_check import (
    ALL_REDUCE_THRESHOLDS,
    THRESHOLDS,
    all_reduce_problems,
    conclusion_problems,
    expected_regime,
    lean_problems,
    regime_problems,
    speed_problems,
)
from course_utils import timing, verdict
from course_utils.verdict import limit_range

SLOPED = [(64, 10.0), (96, 14.8), (128, 19.5), (192, 29.1)]  # about 4% fixed at 64
FLAT = [(64, 10.0), (96, 10.2), (128, 10.5), (192, 10.9)]  # about 90% fixed
#: `regime` across a gap between a limit's sets, when an outcome names a side (as `ridge`, no side)
GAP_WITHHELD = (
    "withheld: an outcome names a side of the ridge, and a limit's sets disagree beyond 1.5x "
)
MEMORY_SIDE = (
    "undecided: below both roofs or memory-bandwidth-bound, with the count's factor 2 (an "
    "intensity of 2.5 to 10.0 FLOP/B)"
)
ABOVE_THE_ROOF = (  # both causes: the peak is floored at the fastest run, so only the slanted
    # roof can be beaten, and the notebook says its byte count may be off by 2x either way
    "undecided: the step ran above its roof at both ends of each limit's range, so a limit was "
    "measured low or the counted bytes overstate the step's (the count may be off by 2x: fewer "
    "bytes, a higher intensity), and no roof can be named"
)


@pytest.mark.parametrize(
    "sweep, roofline, regime",
    [
        (FLAT, {}, "overhead-bound"),
        (SLOPED, {}, "per-example-bound"),
        # notebook 3b: peak 150 GFLOP/s, 10 GB/s (ridge 15 FLOP/B, the count's margin 2 either
        # way); a 10 ms step at 64 whose FLOPs the roof would do in 8 ms (80% of it), 3 ms (30%,
        # the rest explained by neither)
        # on the memory side the roof's part moves with the count's factor 2 either way (80%
        # of the roof: 40% with half the bytes), so no memory side passes the majority at both
        (SLOPED, {"intensity": 5.0, "flops_per_step": 0.4e9}, MEMORY_SIDE),
        (SLOPED, {"intensity": 40.0, "flops_per_step": 1.2e9}, "compute-bound"),
        (SLOPED, {"intensity": 40.0, "flops_per_step": 0.45e9}, "below both roofs"),
        (FLAT, {"intensity": 40.0, "flops_per_step": 0.1e9}, "overhead-bound"),
        # a point above its roof (150% of it): a limit was measured low or the bytes counted
        # too many, no roof is named, and the line says so (a bare "undecided" left the reader
        # to guess; naming the limit alone hid the count's own caveat)
        (SLOPED, {"intensity": 40.0, "flops_per_step": 2.25e9}, ABOVE_THE_ROOF),
    ],
)
def test_the_regime_follows_from_the_sweep(tmp_path, sweep, roofline, regime):
    key = "fastest_ms" if roofline else "step_ms"  # 3b records its fastest rounds, 3 its medians
    points = [{"global_batch": b, key: ms} for b, ms in sweep]
    if not roofline:  # notebook 3 records each point's rounds (examples/s), its median the step
        points = [p | {"rounds": [1000 * p["global_batch"] / p[key]] * 3} for p in points]
    results = {"batch": 64, "sweep": points, "flops_per_example": 15e6}
    if roofline:
        results |= {"peak_flops": 150e9, "memory_bandwidth": 10e9, **roofline, **THRESHOLDS}
    else:  # notebook 3 records what is wrong with its line too ("": both lines hold)
        results |= {"line_problem": "", "line_tolerance": verdict.LINE_TOLERANCE}
    assert expected_regime(results) == regime
    path = tmp_path / "results.json"
    wrong = "overhead-bound" if regime != "overhead-bound" else "compute-bound"
    path.write_text(json.dumps({**results, "regime": wrong}))
    with pytest.raises(AssertionError):
        assert_regime_consistent(path)
    path.write_text(json.dumps({**results, "regime": regime}))
    assert_regime_consistent(path)


def _limits_record(**changes) -> dict:
    """Notebook 3b's record: a 10 ms step at 64 (about 4% fixed), intensity 60 FLOP/B, the peak's
    fastest round 205 GFLOP/s with 150 the other sets' fastest, the bandwidth 12 GB/s (11.9); no
    cores recorded, so each limit is searched up to 1 / STARVED (1.33x) above its value."""
    return (
        {
            "batch": 64,
            "sweep": [{"global_batch": b, "fastest_ms": ms} for b, ms in SLOPED],
            "intensity": 60.0,
            "flops_per_step": 1.5e9,  # 150 GFLOP/s: 55-73% of the roof from 205 up to 273 (1.33x)
            "physical_devices": 1,
            "peak_flops": 205e9,
            "memory_bandwidth": 12e9,
            "limits": {"peak": [205e9, 150e9], "bandwidth": [12e9, 11.9e9]},
            "peak_rounds": {"section 1": [140e9, 144e9], "section 3": [200e9, 205e9], "c": [150e9]},
            "bandwidth_rounds": {"section 1": [11.5e9, 12e9], "section 3": [11.2e9, 11.9e9]},
            "sweep_best_flops": 120e9,
            "regime": "compute-bound",
        }
        | THRESHOLDS
        | changes
    )


def test_a_limit_is_the_fastest_round_not_a_slower_set_that_agrees(tmp_path):
    """Load only slows a round: 387.9 GFLOP/s in one set is the peak (at least), though two
    slower sets agree with each other at about 200; a record that took 202.4 fails. The 1.92x
    gap puts the slowest set's fastest, 198, at the low end; a record giving 190 fails."""
    peak = {"section 1": [387.9e9], "section 3": [202.4e9, 190e9], "after the sweep": [198e9]}
    record = _limits_record(
        peak_rounds=peak, peak_flops=387.9e9, limits={"peak": [387.9e9, 198e9]} | {}
    )
    record["limits"]["bandwidth"] = [12e9, 11.9e9]
    record["regime"] = expected_regime(record)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert regime_problems(path) == []
    path.write_text(json.dumps(record | {"peak_flops": 202.4e9}))
    assert regime_problems(path) == [
        "results.json: peak_flops 2.024e+11, its sets of rounds give 3.879e+11"
    ]
    low = {"peak": [387.9e9, 190e9], "bandwidth": [12e9, 11.9e9]}
    path.write_text(json.dumps(record | {"limits": low}))
    assert regime_problems(path) == [
        "results.json: the peak's low end 1.9e+11, its sets give 1.98e+11"
    ]


def test_a_verdict_a_higher_limit_could_flip_is_undecided(tmp_path):
    """A limit is at least its fastest round, so the verdict is searched from it upward. 120
    GFLOP/s is 59% of a 205 GFLOP/s roof (compute-bound) but 44% of 273, 205 x 1.33 (the
    `headroom` with no cores recorded): undecided, naming the peak's range above its value. 80
    GFLOP/s was compute-bound only at the other sets' 150, a peak the run beat: no longer an
    outcome (a review's replay decided compute-bound from such a low end)."""
    record = _limits_record(flops_per_step=1.2e9)
    undecided = (
        "undecided: below both roofs or compute-bound or no single part dominates, with the "
        "peak between 205.0 and 273.3 GFLOP/s (1.33x, `headroom`)"
    )
    assert expected_regime(record) == undecided
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"regime": "compute-bound"}))
    assert f"its sweep says {undecided!r}" in regime_problems(path)[0]
    assert expected_regime(_limits_record(flops_per_step=1.4e9)) == "compute-bound"  # 51% at 273
    assert expected_regime(_limits_record(flops_per_step=0.8e9)) == "below both roofs"
    assert "compute-bound" in verdict.ruled_out(_limits_record(flops_per_step=0.8e9))


def test_a_review_s_quiet_replay_no_longer_decides_from_a_peak_the_run_beat():
    """A review replayed a 5-device run as quiet (others 5%, 5 rounds, 1.9 of 2 cores' worth):
    the peak's fastest round 224.8 GFLOP/s, the other sets' 197.4 and 146.7. Searched between
    146.7 and 224.8 it gave "compute-bound" as an outcome, from a peak the run itself beat. A limit
    is at least its fastest round: searched from 224.8 to 299.7 (1.33x) the step is below both
    roofs or no part dominates, and compute-bound is ruled out."""
    sweep = [(80, 18.43, [4207, 3400, 4341]), (160, 29.15, [5488, 5482, 4947])]
    sweep += [(320, 45.65, [6706, 7010, 6823]), (640, 92.34, [6931, 6898, 6895])]
    peak = {"section 1": [135.2e9, 76.7e9, 146.7e9], "section 3": [115.4e9, 96.7e9, 197.4e9]}
    bandwidth = {"section 1": [50.2e9, 55.1e9, 56.9e9], "section 3": [15.6e9, 40.3e9, 57.7e9]}
    peak["after the sweep"], bandwidth["after the sweep"] = [224.8e9, 179.6e9], [48.1e9, 29.5e9]
    sets = {"peak": peak, "bandwidth": bandwidth}
    record = THRESHOLDS | {
        "batch": 320,
        "intensity": 9.37,
        "flops_per_step": 4.729e9,
        "sweep": [{"global_batch": b, "fastest_ms": ms, "rounds": r} for b, ms, r in sweep],
        "physical_devices": 1,
        "peak_rounds": peak,
        "bandwidth_rounds": bandwidth,
        "sweep_best_flops": 103.6e9,
        "single_flops": 93.6e9,
        "rounds": 5,
        "loads": {k: dict.fromkeys(v, 0.05) for k, v in sets.items()},
        "cores": {k: {label: [1.9] * len(r) for label, r in v.items()} for k, v in sets.items()},
        "usable_cpus": 2.0,
    }
    assert verdict.regime(record) == (
        "undecided: below both roofs or no single part dominates, with the peak between 224.8 "
        "and 299.7 GFLOP/s (1.33x, `headroom`)"
    )
    assert "compute-bound" in verdict.ruled_out(record)
    assert "compute-bound" not in set(verdict.outcomes(record).values())


def test_a_set_below_a_gap_flags_the_limit_and_is_not_searched():
    """A quiet run whose peak's sets top at 228, 224 and 94 GFLOP/s (a 2.38x gap, flagged, the
    low end 94): an 80 GFLOP/s step is 35% of a 228 roof and less above it (below both roofs);
    at the flagged set's 94 it would be 85%, but the run beat 94, so that is no outcome."""
    sets = {"section 1": [61.8e9, 94.2e9], "section 3": [223.7e9], "after the sweep": [228.2e9]}
    record = _limits_record(flops_per_step=0.8e9, peak_rounds=sets, sweep_best_flops=80e9)
    assert verdict.set_gap(sets) > verdict.GAP
    assert limit_range(sets) == (228.2e9, 94.2e9)
    assert expected_regime(record) == "below both roofs"
    close = sets | {"section 1": [61.8e9, 155e9]}  # a 1.47x span: the two fastest decide
    assert expected_regime(record | {"peak_rounds": close}) == "below both roofs"
    # the flagged set only flags: load during it (which only slowed its rounds) withholds
    # nothing; load during one of the two fastest sets does
    loads = {"peak": dict.fromkeys(sets, 0.05) | {"section 1": 0.84}}
    assert expected_regime(record | {"loads": loads, "busy": 0.5}) == "below both roofs"
    loads = {"peak": dict.fromkeys(sets, 0.05) | {"after the sweep": 0.84}}
    assert expected_regime(record | {"loads": loads, "busy": 0.5}).startswith(
        "withheld: the machine was busy (other programs used 84% of its cores while the peak"
    )


def test_alpha_above_a_size_s_time_withholds_the_call_only_beyond_the_line_s_worst_miss(tmp_path):
    """alpha is a fitted intercept: with the 4 KiB size 15% faster than its line, the relative
    fit puts alpha (91.5 us) above that size's whole measured time (82.8 us), but by less than
    the line's worst miss (11.7%): within the fit's own error, so the call stands. A line
    falling with size (beta -40 ps/B) puts alpha (100 us) above 1 MiB's 58.1 us with no miss at
    all: the run contradicts it, the call and the share of a step are withheld, and a record
    that prints a call from it fails the check."""
    record = _all_reduce_results(scale={4096: 0.85}, alpha=100e-6, beta=110e-6 / 487_720)
    assert record["worst_error"] < 0.25 and record["alpha"] > min(record["samples"]["4096"]) - 20e-6
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert all_reduce_problems(path) == []  # "the bytes dominate", and its share, stand
    falling = _all_reduce_results(alpha=100e-6, beta=-40e-12) | {"dominates": "alpha dominates"}
    withheld = (
        "withheld: alpha, a fitted intercept (100.0 us), exceeds the whole measured time of "
        "1,024 KiB (58.1 us) by more than the line's worst miss (0.0%)"
    )
    path.write_text(json.dumps(falling))
    share = f"results.json: a share of a step given from a line whose {withheld[10:]}"
    assert all_reduce_problems(path) == [
        share,
        f"results.json: 'alpha dominates' printed, its line says {withheld!r}",
    ]
    path.write_text(json.dumps(falling | {"dominates": withheld, "step_share": None}))
    assert all_reduce_problems(path) == []
    # 99 us against alpha's 100 us with a 2% worst miss: noise, the call stands; 80 us against
    # a 10% worst miss: beyond it, withheld (any size, not only the smallest: here 16 KiB)
    fit = {"alpha": 100e-6, "beta_small": 1e-10, "errors": {4096: 0.02, 16384: 0.02}}
    fit["seconds"] = {4096: 101e-6, 16384: 99e-6}
    assert verdict.all_reduce_call(fit, 487_720, [0.0], busy=0.5) == "alpha dominates"
    fit |= {"seconds": {4096: 101e-6, 16384: 80e-6}, "errors": {4096: 0.02, 16384: 0.1}}
    assert verdict.all_reduce_call(fit, 487_720, [0.0], busy=0.5) == (
        "withheld: alpha, a fitted intercept (100.0 us), exceeds the whole measured time of 16 "
        "KiB (80.0 us) by more than the line's worst miss (10.0%)"
    )


def test_the_step_s_side_of_the_ridge_is_read_at_both_ends_or_not_from_busy_sets():
    """Intensity 30 against ridges of 12.5 to 22.2 FLOP/B (any pair of limits): the
    compute side at the low ridges (30 at least twice 12.5 and 13.9), near the ridge at the high
    ones, so both are named and the run decides nothing; 5: the memory side at every end; a
    limit's fastest sets at 60% with busy 50%: no side at all."""
    limits = {"peak": (200e9, 125e9), "bandwidth": (10e9, 9e9)}
    assert verdict.ridge_sides(30.0, limits, 0.1, busy=0.5) == (
        "The step's 30.0 FLOP/B against a ridge of 12.5 to 22.2 (any pair of limits in their "
        "ranges): compute side or near the ridge, not decided by this run."
    )
    assert verdict.ridge_sides(5.0, limits, 0.1, busy=0.5).endswith(": memory-bandwidth side.")
    assert verdict.ridge_sides(5.0, limits, 0.6, busy=0.5).startswith(
        "No side of the ridge from this run: a limit's fastest sets ran busy (others 60%)"
    )


def test_near_the_ridge_is_found_inside_the_limits_ranges_not_only_at_their_ends():
    """The side label is not monotone in the limits: intensity 10 against ridges of 1 to 20
    FLOP/B gives the compute side at the low ridge and the memory side at the high one, but near
    the ridge at a peak of 400 and a bandwidth of 40 GB/s, inside both ranges (a review's case):
    the sides and the outcomes must name it, and what a run rules out must not. (Between "below
    both roofs" and a side, with a fixed part above zero, the roof's part passes through shares
    where no part has half the step: "no single part dominates", tested above.)"""
    limits = {"peak": (400e9, 100e9), "bandwidth": (100e9, 20e9)}
    assert verdict.side(10.0, 400e9, 40e9) == "near the ridge"
    assert "near the ridge" in verdict.ridge_sides(10.0, limits, 0.0, busy=0.2)
    # a 10 ms step whose FLOPs the roof at (400 GFLOP/s, 40 GB/s: roof 400) does in 8 ms
    record = _limits_record(
        intensity=10.0,
        flops_per_step=0.8 * 400e9 * 0.010,
        peak_rounds={"section 1": [400e9], "section 3": [100e9]},
        bandwidth_rounds={"section 1": [100e9], "section 3": [20e9]},
        sweep_best_flops=1e9,
    )
    found = set(verdict.outcomes(record).values())
    assert "near the ridge" in found
    assert "near the ridge" not in verdict.ruled_out(record)


def test_the_all_reduce_s_share_of_a_step_is_withheld_for_the_first_reason_that_holds():
    """3c's rule (`verdict.step_share_withheld`): one replica first, then the step's rounds
    busy, then the line's, then a line that misses a size; "" (a share given) when none holds."""
    rule = verdict.step_share_withheld
    assert rule(2, 0.1, [0.1], flagged=False, busy=0.5) == ""
    assert rule(1, 0.9, [0.9], flagged=True, busy=0.5).startswith("one replica")
    assert "during the step's rounds (90%)" in rule(2, 0.9, [0.9], flagged=True, busy=0.5)
    assert "while the line was measured (70%" in rule(2, 0.1, [0.1, 0.7], flagged=True, busy=0.5)
    assert rule(2, 0.1, [0.1], flagged=True, busy=0.5).startswith("the line misses")
    # alpha above a size's whole time: section 2's call is withheld, and so is the share
    fit = {"alpha": 100e-6, "beta_small": 1e-10, "errors": {4096: 0.01}, "seconds": {4096: 90e-6}}
    contradicted = verdict.alpha_above(fit)
    assert verdict.all_reduce_call(fit, 487_720, [0.0], busy=0.5) == f"withheld: {contradicted}"
    assert rule(2, 0.1, [0.1], flagged=False, busy=0.5, contradicted=contradicted) == (
        "alpha, a fitted intercept (100.0 us), exceeds the whole measured time of 4 KiB (90.0 us) "
        "by more than the line's worst miss (1.0%) (section 2)"
    )
    fit["seconds"] = {4096: 110e-6}
    assert verdict.alpha_above(fit) == ""


def test_a_point_within_the_count_s_margin_of_the_ridge_is_near_the_ridge():
    """Intensity 20 against a ridge of 12.8-22.8 FLOP/B (205-273 GFLOP/s over 12-16 GB/s):
    within the count's factor of 2 of every ridge, so "near the ridge"; with no margin, the
    ridge's range straddles 20: either side. Intensity 30 is on the compute side of every
    ridge with no margin."""
    record = _limits_record(intensity=20.0)
    assert expected_regime(record) == "near the ridge"
    assert expected_regime(record | {"count_margin": 1}) == (
        "undecided: compute-bound or memory-bandwidth-bound, with the peak between 205.0 and "
        "273.3 GFLOP/s (1.33x, `headroom`)"
    )
    assert expected_regime(record | {"count_margin": 1, "intensity": 30.0}) == "compute-bound"


def test_on_4_gpus_the_run_without_a_strategy_floors_one_device_s_peak(tmp_path):
    """On 4 physical GPUs the sweep's runs use all 4 and the run without a strategy one: a
    device's peak is at least the sweep's best over 4 and that run's rate. Every peak round is at
    most 205 GFLOP/s a device (820 for 4); the sweep's best, 400 on 4 devices, is 100 a device,
    but the run without a strategy reached 250 on one: the peak was measured low (the sweep's
    best over 4 alone missed it) and the limit is 4 x 250; the record must say so. At 150 the
    rounds stand, 150 raising only the low end (4 x 150)."""
    record = _limits_record(physical_devices=4, sweep_best_flops=400e9, single_flops=250e9)
    assert verdict.limits_of(record)["peak"] == (1000e9, 1000e9)
    low = "the peak was measured low: a training run went faster (250.0 GFLOP/s a device, the "
    assert verdict.peak_measured_low(record) == low + "peak's sets at most 205.0)"
    assert expected_regime(record) == f"withheld: {low}peak's sets at most 205.0)"
    record |= {"peak_flops": 1000e9, "limits": {"peak": [1000e9] * 2, "bandwidth": [48e9, 47.6e9]}}
    record |= {"memory_bandwidth": 48e9, "regime": expected_regime(record)}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert regime_problems(path) == []
    path.write_text(json.dumps(record | {"peak_flops": 820e9}))  # the rounds alone: fails
    assert regime_problems(path)[0].startswith("results.json: peak_flops 8.2e+11")
    slower = record | {"single_flops": 150e9}
    assert verdict.limits_of(slower)["peak"] == (820e9, 600e9)
    assert verdict.peak_measured_low(slower) == ""


def test_the_split_3b_shows_is_the_verdict_module_s():
    """3b writes out `split`, the rule at one case, and `verdict.regime` applies the package's
    copy at every case: on random cases reaching every outcome, the two give the same words."""
    import random

    shown = bench.notebook_code(bench.LIMITS_NOTEBOOK, names=("split",))["split"]
    rng = random.Random(5)
    said = set()
    for _ in range(3000):
        record = {
            "intensity": 10 ** rng.uniform(-0.5, 2),
            "flops_per_step": 10 ** rng.uniform(8, 10),
        }
        record |= {"count_margin": rng.choice([1.0, 2.0]), "majority": 0.5}
        step, fixed = rng.uniform(1, 50), rng.uniform(-5, 40)
        limits = (10 ** rng.uniform(10.5, 12), 10 ** rng.uniform(9.5, 11), rng.choice([0.5, 1, 2]))
        assert shown(record, step, fixed, *limits) == verdict.split(record, step, fixed, *limits)
        said.add(verdict.split(record, step, fixed, *limits))
    assert said == {*verdict.OUTCOMES, "above its roof"}


def test_a_run_faster_than_the_peak_makes_the_peak_at_least_that_fast(tmp_path):
    """Every set's fastest round is at most 205 GFLOP/s, but a training run reached 260: the peak
    is at least 260 at both ends of its range."""
    record = _limits_record(sweep_best_flops=260e9, peak_flops=260e9)
    record["limits"] = {"peak": [260e9, 260e9], "bandwidth": [12e9, 11.9e9]}
    record["regime"] = expected_regime(record)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert regime_problems(path) == []
    path.write_text(json.dumps(record | {"peak_flops": 205e9}))
    assert regime_problems(path) == [
        "results.json: peak_flops 2.05e+11, its sets of rounds give 2.6e+11"
    ]


def test_a_peak_a_training_run_beat_withholds_the_verdict(tmp_path):
    """Every set of the peak tops out at 205 GFLOP/s, but the 64/replica run reached 260: the
    floor puts that run at 100% of its roof and the range's low end at 260, so no range can
    flip it; the peak was measured low, so no verdict (a record naming one fails)."""
    record = _limits_record(sweep_best_flops=260e9, peak_flops=260e9, flops_per_step=2.6e9)
    record["limits"] = {"peak": [260e9, 260e9], "bandwidth": [12e9, 11.9e9]}
    withheld = (
        "withheld: the peak was measured low: a training run went faster "
        "(260.0 GFLOP/s, the peak's sets at most 205.0)"
    )
    assert expected_regime(record) == withheld
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"regime": "near the ridge"}))
    assert f"its sweep says {withheld!r}" in regime_problems(path)[0]
    path.write_text(json.dumps(record | {"regime": withheld}))
    assert regime_problems(path) == []
    # the peak's sets reach the run's rate: no longer "measured low", but the side it would name
    # lies across the sets' 1.81x gap, so it is withheld for that (as `ridge` does)
    reached = record["peak_rounds"] | {"after the sweep": [260e9]}
    assert expected_regime(record | {"peak_rounds": reached}) == (
        f"{GAP_WITHHELD}(peak 1.81x), so that side would rest on the fastest sets alone"
    )


def test_no_side_of_the_ridge_from_a_peak_a_training_run_beat(tmp_path):
    """A review's constructed record: quiet sets (others 0%), every round on both cores, and a
    training run at 260 GFLOP/s above every round of the peak (205). `regime` withholds; the
    side of the ridge must too, since a higher true peak raises the ridge (a recorded side
    fails the check), and names a side again once a set reaches the run's rate."""
    record = _limits_record(sweep_best_flops=260e9, peak_flops=260e9, flops_per_step=2.6e9)
    record["limits"] = {"peak": [260e9, 260e9], "bandwidth": [12e9, 11.9e9]}
    sets = {"peak": record["peak_rounds"], "bandwidth": record["bandwidth_rounds"]}
    record["loads"] = {k: dict.fromkeys(v, 0.0) for k, v in sets.items()}
    record["cores"] = {
        k: {label: [2.0] * len(r) for label, r in v.items()} for k, v in sets.items()
    }
    record |= {"usable_cpus": 2.0, "regime": expected_regime(record)}
    assert record["regime"].startswith("withheld: the peak was measured low")
    assert verdict.ridge(record).startswith(
        "No side of the ridge from this run: the peak was measured low: a training run went "
        "faster (260.0 GFLOP/s, the peak's sets at most 205.0)"
    )
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"ridge": "The step's 60.0 FLOP/B: compute side."}))
    assert "side of the ridge" in regime_problems(path)[0]
    reached = {"peak_rounds": record["peak_rounds"] | {"section 3": [200e9, 260e9]}}
    assert verdict.ridge(record | reached).startswith("The step's 60.0 FLOP/B against a ridge")


def test_one_rule_takes_a_limit_for_the_notebook_bench_and_the_check():
    """A limit is the fastest round of all sets, its low end the other sets' fastest (the
    slowest set's across a gap over 1.5x), both at least the floor; 3b's cells and `course
    bench` call this rule (no copy of it is left)."""
    cases = [
        ({"a": [140.0, 144.0], "b": [200.0, 205.0], "c": [150.0]}, 0.0, (205.0, 150.0)),
        ({"a": [104.6], "b": [64.3], "c": [61.9], "d": [50.8]}, 0.0, (104.6, 50.8)),
        ({"a": [104.6], "b": [74.3], "c": [61.9]}, 0.0, (104.6, 61.9)),  # steps 1.4x, span 1.7x
        ({"a": [104.6], "b": [74.3], "c": [71.9]}, 0.0, (104.6, 74.3)),  # a 1.45x span
        ({"a": [200.0, 204.0], "b": [205.0]}, 260.0, (260.0, 260.0)),
        ({"a": [200.0], "b": [205.0]}, 202.0, (205.0, 202.0)),
        ({"a": [100.0]}, 0.0, (100.0, 100.0)),
    ]
    for sets, floor, expected in cases:
        assert limit_range(sets, floor) == expected
    cells = bench.notebook_code(bench.LIMITS_NOTEBOOK, names=bench.LIMITS_CODE)
    assert "limit_range" not in cells and cells["verdict"].limit_range is limit_range
    notebook = bench.LIMITS_NOTEBOOK.read_text()
    assert "verdict.limit_range(" in notebook and "verdict.regime(record)" in notebook
    assert "def limit_range(" not in notebook and "def verdict_at(" not in notebook


def test_undecided_names_every_limit_an_outcome_needs():
    """At the ridge (intensity 205 / 12 = 17.1) a 130 GFLOP/s step is 63% of its roof (near the
    ridge); raising one limit leaves the roof at the other's, so only BOTH raised (273 and 16
    GB/s) give 48%, no single part dominates: the sentence names both limits (a review found one
    left out), and the count's factor, which lets the peak alone move the roof as few ways. The
    bandwidth's slower 5 GB/s set is a flag only: without it, the same verdict (with it, a side
    named across its gap withholds the verdict, as `ridge` withholds the side)."""
    record = _limits_record(
        intensity=205 / 12,
        flops_per_step=1.3e9,
        bandwidth_rounds={"section 1": [11.5e9, 12e9], "section 3": [5e9]},
    )
    one = record | {"bandwidth_rounds": {"section 1": [12e9], "section 3": [11.9e9]}}
    assert expected_regime(one) == (
        "undecided: near the ridge or no single part dominates, with the peak between 205.0 and "
        "273.3 GFLOP/s (1.33x, `headroom`) and the bandwidth between 12.0 and 16.0 GB/s (1.33x, "
        "`headroom`) and the count's factor 2 (an intensity of 8.5 to 34.2 FLOP/B)"
    )
    assert expected_regime(record) == (
        f"{GAP_WITHHELD}(bandwidth 2.40x), so that side would rest on the fastest sets alone"
    )


def _two_replica_record(
    rates: dict, peak: dict, bandwidth: dict, loads: dict, best_flops: float
) -> dict:
    """3b's results.json at 2 replicas, batch 128 (the step's counted FLOPs and intensity), from
    the sweep's rates per global batch and the limits' sets and loads."""
    return {
        "replicas": 2,
        "batch": 128,
        "intensity": 10.122912,
        "flops_per_step": 1891663872.0,
        "sweep": [{"global_batch": b, "rounds": r} for b, r in rates.items()],
        "physical_devices": 1,
        "peak_rounds": peak,
        "bandwidth_rounds": bandwidth,
        "loads": loads,
        "rounds": 5,
        "sweep_best_flops": best_flops,
    } | THRESHOLDS


def _replayed_record(sweep_ms: list[float] | None = None) -> dict:
    """A review's 2-device record replayed quiet (every load 5%), the slow set of the peak
    tripled (limits 229.0/226.4 GFLOP/s, 25.0/22.7 GB/s), intensity 10.12 FLOP/B at 128; with
    `sweep_ms`, the sweep's fastest rounds (a second round 1% slower) at batches 32 to 256."""
    g = 1e9
    peak = {"section 1": [229.03 * g, 200.1 * g], "section 3": [226.43 * g, 194.8 * g]}
    bandwidth = {"section 1": [22.73 * g, 20.9 * g], "section 3": [24.96 * g, 19.3 * g]}
    peak["after the sweep"] = [3 * 72.47 * g, 3 * 68.8 * g]
    bandwidth["after the sweep"] = [21.9 * g, 19.6 * g]
    rates = {
        32: [4044.7, 3915.6],
        64: [5006.6, 4941.5],
        128: [7126.2, 6851.5],
        256: [7953.3, 6942.1],
    }
    if sweep_ms:
        rates = {b: [1000 * b / ms, 1000 * b / ms / 1.01] for b, ms in zip(rates, sweep_ms)}
    loads = {
        name: dict.fromkeys(["section 1", "section 3", "after the sweep"], 0.05)
        for name in ("peak", "bandwidth")
    }
    return _two_replica_record(rates, peak, bandwidth, loads, best_flops=120.6e9)


def test_a_verdict_the_count_s_factor_could_flip_is_undecided():
    """The count may be off by 2x either way (`COUNT_MARGIN`): the replayed record gives "no
    single part dominates" at the counted 10.12 FLOP/B and "near the ridge" at 5.06, so the
    verdict is undecided and names the count; with no margin the counted intensity decides."""
    record = _replayed_record()
    assert verdict.regime(record) == (
        "undecided: near the ridge or no single part dominates, with the count's factor 2 (an "
        "intensity of 5.1 to 20.2 FLOP/B)"
    )
    assert verdict.regime(record | {"count_margin": 1.0}) == "no single part dominates"


def test_a_fixed_part_within_the_line_s_worst_miss_of_the_majority_is_undecided():
    """A review's two sweeps (ms at 32/64/128/256): 11.5, 13.6, 18.0, 26.6 fit a line within
    0.3% whose 9.32 ms fixed part is 52% of the 18.0 ms step, outside its band (+-0.06 ms):
    overhead-bound. The first point at 10.5 (the line still within 15%) misses by 4.5%: the
    fixed part 8.71 ms +- 0.80 spans half the step, so the verdict is undecided and says why."""
    quiet = {"count_margin": 1.0}  # the count's factor aside
    assert verdict.regime(_replayed_record([11.5, 13.6, 18.0, 26.6]) | quiet) == "overhead-bound"
    assert verdict.regime(_replayed_record([10.5, 13.6, 18.0, 26.6]) | quiet) == (
        "undecided: no single part dominates or overhead-bound, with the fixed part between "
        "7.91 and 9.52 ms (the line's worst miss of a point, 4%)"
    )


def test_a_part_names_the_verdict_only_when_it_is_more_than_half_the_step(tmp_path):
    """A roof's part of 43% beside 17% fixed and 41% neither (the shares a review found printed
    as "compute-bound"): no single part dominates; at 53% of the highest roof searched (273,
    the peak's 205 x 1.33), compute-bound."""
    sloped = [(64, 10.0), (96, 14.1), (128, 18.2), (192, 26.4)]  # 1.8 ms fixed at 64: 18%
    record = _limits_record(
        sweep=[{"global_batch": b, "fastest_ms": ms} for b, ms in sloped],
        flops_per_step=0.882e9,  # 88.2 GFLOP/s of a 205 GFLOP/s roof: 43%
        peak_rounds={"a": [205e9], "b": [204e9]},
    )
    assert expected_regime(record) == "no single part dominates"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"regime": "compute-bound"}))
    assert "its sweep says 'no single part dominates'" in regime_problems(path)[0]
    assert expected_regime(record | {"flops_per_step": 1.45e9}) == "compute-bound"
    assert expected_regime(record | {"flops_per_step": 1.09e9}) != "compute-bound"  # 40% at 273


def _sweep_with_rounds(fastest_ms: list[float], batches=(64, 96, 128, 192)) -> list[dict]:
    """A sweep as 3b records it: each point's rounds (examples/s), its fastest one taking
    `fastest_ms`, the others 1.02x (too close to flip a verdict), 1.5x and 2x slower; fastest_ms is
    the fastest round."""
    points = []
    for batch, ms in zip(batches, fastest_ms):
        fastest = 1000 * batch / ms
        points.append(
            {
                "global_batch": batch,
                "fastest_ms": ms,
                "rounds": [fastest / 2, fastest, fastest / 1.02, fastest / 1.5],
            }
        )
    return points


def test_a_verdict_inside_the_steps_own_spread_is_undecided():
    """A review's 4-device run: at the highest peak searched the roof's part is 51.6% of the step
    on its fastest round, 48.5% on its next-fastest (6% slower), either side of the majority
    (50%): no verdict can rest on one round, so it is undecided and names the step's range (and
    the peak's, where it flips). The same step with rounds 1% apart stays compute-bound."""
    flops = 0.516 * 205e9 * 4 / 3 * 0.010  # 51.6% of the highest roof searched, 205 x 1.33
    record = _limits_record(flops_per_step=flops)
    step = record["sweep"][[p["global_batch"] for p in record["sweep"]].index(64)]
    step["rounds"] = [6400.0, 6400.0 * 48.5 / 51.6, 6400.0 / 1.2]  # examples/s: 10 ms fastest
    assert expected_regime(record) == (
        "undecided: compute-bound or no single part dominates, with the peak between 205.0 and "
        "273.3 GFLOP/s (1.33x, `headroom`) and the step between 10.0 and 10.6 ms (its two "
        "fastest rounds)"
    )
    step["rounds"] = [6400.0, 6400.0 / 1.01, 6400.0 / 1.2]
    assert expected_regime(record) == "compute-bound"


def test_a_busy_machine_gives_no_verdict(tmp_path):
    """Other programs used 55% of the cores while set "c" ran, one of the peak's two fastest sets
    (its low end): more than the recorded 20%, so the verdict is withheld and says why. Busy
    during the slowest set, which decides nothing, or under 20% everywhere: decided."""
    loads = {
        "peak": {"section 1": 0.1, "section 3": 0.1, "c": 0.55},
        "bandwidth": {"section 1": 0.02, "section 3": 0.1},
    }
    record = _limits_record(loads=loads, busy=0.2)
    busy = (
        "withheld: the machine was busy (other programs used 55% of its cores while the peak "
        "was measured, c)"
    )
    assert expected_regime(record) == busy
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))  # it printed "compute-bound"
    assert regime_problems(path) == [
        f"results.json: regime 'compute-bound', its sweep says {busy!r}"
    ]
    loads["peak"] |= {"section 1": 0.55, "c": 0.1}  # the slowest set (120-124 GFLOP/s)
    assert expected_regime(record) == "compute-bound"
    loads["bandwidth"]["section 3"] = 0.3  # the sweep's set, whatever the limits
    assert "while the sweep of section 3 ran" in expected_regime(record)
    loads["peak"]["section 3"] = 0.3  # as 3b stores it: the sweep's load under both limits
    assert expected_regime(record) == (
        "withheld: the machine was busy (other programs used 30% of its cores while the sweep "
        "of section 3 ran)"
    )


def test_a_sweep_line_that_misses_its_points_or_crosses_zero_gives_no_verdict(tmp_path):
    """The line must predict every point within the recorded tolerance and have a fixed part of
    at least zero (a review found -2.77 ms printed as a fact); else no verdict from it."""
    missing = _sweep_with_rounds([10.0, 20.0, 15.0, 29.0])  # not a line: misses by up to 25%
    record = _limits_record(sweep=missing, line_tolerance=0.15)
    assert expected_regime(record).startswith("withheld: the sweep's line misses a point by")
    negative = _sweep_with_rounds([9.0, 14.8, 20.6, 32.2])  # 0.18 ms per example, -2.6 ms fixed
    record = _limits_record(sweep=negative, line_tolerance=0.15)
    assert expected_regime(record) == (
        "withheld: the sweep's line has a negative fixed part (-2.60 ms)"
    )
    record = _limits_record(sweep=_sweep_with_rounds([10.0, 14.8, 19.5, 29.1]), line_tolerance=0.15)
    assert expected_regime(record) == "compute-bound"


def test_a_verdict_needs_the_noise_rule_s_rounds_the_quick_profile_gives_none():
    """A quiet machine and a line that holds still give no verdict from 3 rounds per set (the
    quick profile, a smoke test): 3b needs 5 (`min_rounds`, the noise rule's count)."""
    record = _limits_record(rounds=3, min_rounds=5)
    assert expected_regime(record) == (
        "withheld: 3 rounds per set, a smoke test; a verdict needs 5"
    )
    assert expected_regime(_limits_record(rounds=5, min_rounds=5)) == "compute-bound"


def test_a_step_is_its_fastest_round_like_a_limit(tmp_path):
    """Load only slows a round, so 3b's step is its fastest round, as a limit is: a record whose
    fastest_ms is the median round fails, and the verdict is worked out from the fastest."""
    sweep = _sweep_with_rounds([10.0, 14.8, 19.5, 29.1])
    record = _limits_record(sweep=sweep, line_tolerance=0.15)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert regime_problems(path) == []
    sweep[0]["fastest_ms"] = 15.0  # the median round's time
    path.write_text(json.dumps(record))
    assert regime_problems(path) == [
        "results.json: 15.00 ms per step at a batch of 64, its fastest round gives 10.00"
    ]


SMALL, LARGE = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20], [4 << 20, 8 << 20, 16 << 20]


#: 3c's step with one replica: its rounds, and no addition (nothing is sent).
ONE_REPLICA_STEP = {"step_rounds": [9.0], "fastest_ms": 9.0, "add_samples": {}, "add_line": None}
ONE_REPLICA_STEP |= {"add_load": 0.05, "reduce_line": None}


def _all_reduce_results(
    scale: dict[int, float] | None = None,
    alpha: float = 80e-6,
    beta: float = 250e-12,
    load: float = 0.05,
) -> dict:
    """Notebook 3c's record at 2 replicas: `alpha`, `beta` per byte up to 1 MiB and 400 ps
    beyond, a 20 us loop, each size's rounds scaled by `scale` (load), fitted with its code; its
    all-reduce line as printed under `load` (its first ratio labelled when busy)."""
    scale = scale or {}
    samples = {"loop alone": [20e-6, 21e-6]}
    for size in [*SMALL, 487_720, *LARGE]:
        slope = beta if size <= SMALL[-1] else 400e-12
        samples[size] = [(20e-6 + alpha + size * slope) * scale.get(size, 1) * f for f in (1, 1.1)]
    code = bench.notebook_code(bench.ALL_REDUCE_NOTEBOOK, names=bench.ALL_REDUCE_CODE)
    fit = code["fit_all_reduce"](samples, SMALL, LARGE)
    noise = random.Random(3)  # 4 rounds of each size, within 4%; a byte 1.6x beyond 1 MiB
    cost = {s: 30e-6 + 6 * s / 20e9 * (1.6 if s in LARGE else 1) for s in [*SMALL, *LARGE]}
    adds = {s: [t * noise.uniform(1, 1.04) for _ in range(4)] for s, t in cost.items()}
    ranges = (SMALL, LARGE, code["fit_line"], 0.25)
    reduce = {s: samples[s] for s in [*SMALL, *LARGE]}
    return {
        "step_rounds": [25.0, 26.0],
        "fastest_ms": 25.0,
        "add_samples": {str(k): v for k, v in adds.items()},
        "add_line": verdict.jump_line("addition over the same bytes", adds, ranges, load=0.05),
        "reduce_line": verdict.jump_line("all-reduce", reduce, ranges, load=load, less=20e-6),
        "add_load": 0.05,
        "replicas": 2,
        "gradient_bytes": 487_720,
        "small": SMALL,
        "large": LARGE,
        "tolerance": 0.25,
        "samples": {str(k): v for k, v in samples.items()},
        "alpha": fit["alpha"],
        "beta_small": fit["beta_small"],
        "alpha_large": fit["alpha_large"],
        "beta_large": fit["beta_large"],
        "worst_error": max(abs(e) for e in fit["errors"].values()),
        "dominates": "the bytes dominate",
        "loads": [0.05],
        "flagged": False,
        "step_load": 0.05,
        "step_share": 1000 * fit["line"](487_720) / 25.0,  # the line's time over the step's
    } | ALL_REDUCE_THRESHOLDS


def test_the_all_reduce_line_must_predict_every_size(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_all_reduce_results()))
    assert all_reduce_problems(path) == []
    slowed = _all_reduce_results(scale={64 << 10: 1.6})  # one size slowed: the line misses it
    slowed["step_share"] = None  # withheld, as the call: the line misses a size
    withheld = "withheld: the line misses a measured size by 38.1% (tolerance 25%)"
    path.write_text(json.dumps(slowed | {"dominates": withheld}))
    assert ["at 64 KiB the line misses" in problem for problem in all_reduce_problems(path)] == [
        True
    ]
    assert all_reduce_problems(path)[0].endswith("not flagged")
    path.write_text(json.dumps(slowed | {"dominates": withheld, "flagged": True}))
    assert all_reduce_problems(path) == []  # the notebook flagged it and drew no call, as 3b
    path.write_text(json.dumps(slowed | {"dominates": "too close to call", "flagged": True}))
    assert all_reduce_problems(path) == [  # a call from a flagged line: what 3b never does
        f"results.json: 'too close to call' printed, its line says {withheld!r}"
    ]
    wrong = _all_reduce_results() | {"dominates": "alpha dominates"}  # 80 us against 122 us
    path.write_text(json.dumps(wrong))
    assert all_reduce_problems(path) == [
        "results.json: 'alpha dominates' printed, its line says 'the bytes dominate'"
    ]
    wrong = _all_reduce_results() | {"alpha": 40e-6}
    path.write_text(json.dumps(wrong))
    assert "alpha 4e-05, its rounds give" in all_reduce_problems(path)[0]
    wrong = _all_reduce_results() | {"alpha_large": 0.0}  # not the one its rounds give
    path.write_text(json.dumps(wrong))
    assert "alpha_large 0, its rounds give 8e-05" in all_reduce_problems(path)[0]
    path.write_text(json.dumps({k: v for k, v in wrong.items() if k != "alpha_large"}))
    assert all_reduce_problems(path) == ["results.json: alpha_large not recorded"]
    path.write_text(json.dumps({"replicas": 1, "alpha": 1e-6}))
    assert all_reduce_problems(path) == ["results.json: a line fitted with one replica"]


def test_with_one_replica_every_size_takes_the_loop_s_time_or_is_flagged(tmp_path):
    """Nothing is sent with one replica: a size 40% above the loop alone (say, run fewer times
    per call, so that the call's own cost weighs more) fails unless the run flagged it."""
    samples = {"loop alone": [6e-6, 6.5e-6], str(4 << 10): [6.1e-6], str(16 << 20): [8.4e-6]}
    record = {"replicas": 1, "samples": samples, "flagged": False, "loads": [0.0]}
    record |= {"step_load": 0.0, "step_share": None} | ALL_REDUCE_THRESHOLDS | ONE_REPLICA_STEP
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    assert all_reduce_problems(path) == [
        "results.json: with one replica a size differs from the loop alone by 40% (tolerance "
        "25%), not flagged"
    ]
    path.write_text(json.dumps(record | {"flagged": True}))
    assert all_reduce_problems(path) == []
    samples[str(16 << 20)] = [6.3e-6]
    path.write_text(json.dumps(record))
    assert all_reduce_problems(path) == []


def test_the_all_reduce_s_share_of_a_step_is_withheld_on_a_busy_machine(tmp_path):
    """3c's section 4 measures the load beside the step's rounds: a share of the step given
    while others used 45% of the cores (above `timing.BUSY`, 20%) fails, withheld (null) passes,
    and so does a share measured quietly; with one replica no share may be given."""
    path = tmp_path / "results.json"
    busy = _all_reduce_results() | {"step_load": 0.45}  # its share: its line over its step
    path.write_text(json.dumps(busy))
    assert all_reduce_problems(path) == [
        "results.json: a share of a step given while other programs used 45% of the cores "
        "during the step's rounds"
    ]
    path.write_text(json.dumps(busy | {"step_share": None}))
    assert all_reduce_problems(path) == []
    path.write_text(json.dumps(busy | {"step_load": 0.05}))
    assert all_reduce_problems(path) == []
    samples = {"loop alone": [6e-6], str(4 << 10): [6.1e-6]}
    one = {"replicas": 1, "samples": samples, "step_load": 0.0, "loads": [0.0], "flagged": False}
    one |= ONE_REPLICA_STEP
    path.write_text(json.dumps(one | ALL_REDUCE_THRESHOLDS | {"step_share": 0.1}))
    assert all_reduce_problems(path) == ["results.json: a share of a step given with one replica"]


def test_no_share_of_a_step_from_a_line_measured_busy_or_flagged(tmp_path):
    """A review's 2-device copy: a quiet step (3%) but a line measured while others used 30% of
    the cores, its alpha-or-bytes call withheld, and still "2% of a step" printed from that
    line. The share follows the call: withheld for a busy line and for a flagged one."""
    path = tmp_path / "results.json"
    withheld = (
        "withheld: the machine was busy (other programs used 30% of its cores during the "
        "all-reduce's rounds)"
    )
    busy_line = _all_reduce_results(load=0.3) | {"loads": [0.30], "step_load": 0.03}
    busy_line["dominates"] = withheld
    path.write_text(json.dumps(busy_line))
    assert all_reduce_problems(path) == [
        "results.json: a share of a step given from a line measured while other programs used "
        "30% of the cores"
    ]
    path.write_text(json.dumps(busy_line | {"step_share": None}))
    assert all_reduce_problems(path) == []
    slowed = _all_reduce_results(scale={64 << 10: 1.6}) | {"flagged": True}
    slowed["dominates"] = "withheld: the line misses a measured size by 38.1% (tolerance 25%)"
    path.write_text(json.dumps(slowed))
    assert all_reduce_problems(path) == [  # alpha above 4 KiB's time: within that 38% miss
        "results.json: a share of a step given from a line that misses a measured size (flagged)",
    ]
    path.write_text(json.dumps(slowed | {"step_share": None}))
    assert all_reduce_problems(path) == []


def test_the_checks_take_their_thresholds_from_the_code_not_the_record(tmp_path):
    """A record that stops saving a threshold, or saves a looser one, cannot turn a gate off:
    3b's record without `busy`, `min_rounds` and `line_tolerance`, busy at 55% during a deciding
    set and printing "compute-bound", fails for the keys and for the verdict (still withheld at
    the code's 20%); so does 3c's with `busy` removed or raised and "the bytes dominate" printed
    over a 35% load."""
    loads = {"peak": {"section 1": 0.1, "section 3": 0.1, "c": 0.55}, "bandwidth": {}}
    record = _limits_record(loads=loads)
    for key in ("busy", "min_rounds", "line_tolerance"):
        del record[key]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record))
    found = regime_problems(path)
    assert found[:3] == [
        "results.json: busy not recorded (the code says 0.2)",
        "results.json: line_tolerance not recorded (the code says 0.15)",
        "results.json: min_rounds not recorded (the code says 5)",
    ]
    assert found[3].startswith(
        "results.json: regime 'compute-bound', its sweep says 'withheld: the"
    )
    path.write_text(json.dumps(record | THRESHOLDS | {"busy": 0.6}))
    assert regime_problems(path)[0] == "results.json: busy 0.6 recorded, the code says 0.2"
    busy = _all_reduce_results(load=0.35) | {"loads": [0.05, 0.35]}
    del busy["busy"]
    path.write_text(json.dumps(busy))
    assert all_reduce_problems(path) == [
        "results.json: busy not recorded (the code says 0.2)",
        "results.json: a share of a step given from a line measured while other programs used "
        "35% of the cores",
        "results.json: 'the bytes dominate' printed, its line says \"withheld: the machine was "
        "busy (other programs used 35% of its cores during the all-reduce's rounds)\"",
    ]
    path.write_text(json.dumps(_all_reduce_results() | {"tolerance": 0.5}))
    assert all_reduce_problems(path) == ["results.json: tolerance 0.5 recorded, the code says 0.25"]
    for key in ("loads", "flagged"):
        path.write_text(json.dumps({k: v for k, v in _all_reduce_results().items() if k != key}))
        assert all_reduce_problems(path) == [f"results.json: {key} not recorded"]


def test_alpha_or_the_bytes_dominate_only_outside_the_line_s_error(tmp_path):
    """alpha 100 us against 110 us of bytes: exact rounds call it ("the bytes dominate"); with one
    large size 40% slow the line misses some size by more than those 10 us in 210: too close."""
    exact = _all_reduce_results(alpha=100e-6, beta=110e-6 / 487_720)
    loaded = _all_reduce_results(scale={8 << 20: 1.4}, alpha=100e-6, beta=110e-6 / 487_720)
    assert exact["worst_error"] < 0.01 and 0.05 < loaded["worst_error"] <= 0.25
    path = tmp_path / "results.json"
    path.write_text(json.dumps(exact))
    assert all_reduce_problems(path) == []
    path.write_text(json.dumps(loaded))
    assert all_reduce_problems(path) == [
        "results.json: 'the bytes dominate' printed, its line says 'too close to call'"
    ]
    path.write_text(json.dumps(loaded | {"dominates": "too close to call"}))
    assert all_reduce_problems(path) == []


def test_a_busy_machine_gives_no_all_reduce_verdict(tmp_path):
    """As in 3b: when other programs used more than the recorded `busy` share of the cores during
    a set of 3c's rounds (the second here, 35%), "the bytes dominate" must be withheld; at 15%
    in every set, the call stands."""
    path = tmp_path / "results.json"
    busy = _all_reduce_results(load=0.35) | {"loads": [0.05, 0.35], "step_share": None}
    path.write_text(json.dumps(busy))
    assert all_reduce_problems(path) == [
        "results.json: 'the bytes dominate' printed, its line says \"withheld: the machine was "
        "busy (other programs used 35% of its cores during the all-reduce's rounds)\""
    ]
    withheld = "withheld: the machine was busy (other programs used 35% of its cores during "
    path.write_text(json.dumps(busy | {"dominates": withheld + "the all-reduce's rounds)"}))
    assert all_reduce_problems(path) == []
    quiet = _all_reduce_results() | {"loads": [0.15, 0.15], "step_share": None}
    path.write_text(json.dumps(quiet))
    assert all_reduce_problems(path) == []


def _run(name: str, rounds: list[float]) -> timing.RunResult:
    return timing.RunResult(name, seconds=1.0, examples=1, rounds=rounds)


def test_a_consistent_record_passes(tmp_path):
    path = tmp_path / "conclusions.json"
    timing.record(timing.compare(_run("a", [10, 11, 12]), _run("b", [5, 6, 7])), path)
    timing.record(timing.compare(_run("a", [10, 11, 12]), _run("b", [11.5, 13, 14])), path)
    timing.record(timing.compare(_run("a", [2.0, 2.1]), _run("b", [3.0, 3.3])), path)
    words = [r["word"] for r in assert_conclusions_consistent(path)]
    assert words == ["faster", "within noise", "slower"]


def test_a_direction_claimed_inside_the_spread_fails(tmp_path):
    path = tmp_path / "conclusions.json"
    verdict = timing.compare(_run("a", [10, 11, 12]), _run("b", [11.5, 13, 14]))
    verdict.word = "slower"
    verdict.sentence = "a is 15% slower than b"
    timing.record(verdict, path)
    with pytest.raises(AssertionError, match="the samples say 'within noise'"):
        assert_conclusions_consistent(path)


def test_a_wrong_percentage_fails(tmp_path):
    path = tmp_path / "conclusions.json"
    verdict = timing.compare(_run("a", [10, 11, 12]), _run("b", [5, 6, 7]))
    verdict.sentence = verdict.sentence.replace("83% faster", "50% faster")
    timing.record(verdict, path)
    with pytest.raises(AssertionError, match="50% faster"):
        assert_conclusions_consistent(path)


def test_the_command_fails_on_a_missing_or_earlier_file_and_names_it(tmp_path):
    """`python -m course_tools.artifact_check NOTEBOOK --since T`, as CI's device sweep calls it."""
    notebook = tmp_path / "03b_where_time_goes.ipynb"
    folder = tmp_path / "artifacts" / "03b_where_time_goes"
    folder.mkdir(parents=True)
    sweep = [{"global_batch": b, "step_ms": 10.0, "rounds": [100.0 * b] * 3} for b in (64, 128)]
    results = {"batch": 64, "sweep": sweep}
    results |= {"line_problem": "", "line_tolerance": verdict.LINE_TOLERANCE}
    path = folder / "conclusions.json"
    speed = timing.record(timing.compare(_run("a", [10, 11, 12]), _run("b", [5, 6, 7])), path)
    results |= {"speed_load": 0.05, "speed": speed.sentence}  # section 4's, on a quiet machine
    accuracy = {"mixed_bfloat16": 0.9, "float32": 0.9}
    lean = {"only": [30, 4], "accuracy": accuracy, "lean": "leans to mixed_bfloat16"}
    results |= {"test_images": 10_000, "leans": {"fit": lean}}
    (folder / "results.json").write_text(json.dumps({**results, "regime": "overhead-bound"}))

    def check(since: float) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "course_tools.artifact_check", str(notebook)]
        return subprocess.run([*command, f"--since={since}"], capture_output=True, text=True)

    ok = check(since=0)
    assert ok.returncode == 0 and "artifacts as promised" in ok.stdout, ok.stdout + ok.stderr
    later = check(since=time.time() + 60)  # both files are older than this "run"
    assert later.returncode == 1 and "results.json not written" in later.stdout, later.stdout
    (folder / "results.json").write_text(json.dumps({**results, "regime": "compute-bound"}))
    wrong = check(since=0)
    assert wrong.returncode == 1 and "its sweep says 'overhead-bound'" in wrong.stdout, wrong.stdout


def test_mixed_precision_s_speed_is_withheld_on_a_busy_machine(tmp_path):
    """3b's section 4 measures the load beside its rounds, as every set: with others at 77% a
    "faster" printed is a problem, "withheld" is right; quiet, a withheld line is a problem too,
    and a record without the load fails."""
    path = tmp_path / "results.json"
    faster = "mixed_bfloat16 is 39% faster than float32: median ..."
    withheld = "withheld: the machine was busy (others 77%)"
    path.write_text(json.dumps({"speed_load": 0.77, "speed": faster}))
    assert speed_problems(path) == [
        f"results.json: mixed precision's speed {faster!r} printed with others at 77%"
    ]
    path.write_text(json.dumps({"speed_load": 0.77, "speed": withheld}))
    assert speed_problems(path) == []
    path.write_text(json.dumps({"speed_load": 0.05, "speed": faster}))
    assert speed_problems(path) == [
        f"conclusions.json not written, though results.json printed a speed ({faster!r})"
    ]
    record_speed = timing.compare(_run("mixed_bfloat16", [10, 11]), _run("float32", [7, 8]))
    timing.record(record_speed, tmp_path / "conclusions.json")
    assert speed_problems(path) == []
    path.write_text(json.dumps({"speed_load": 0.05, "speed": withheld}))
    assert len(speed_problems(path)) == 1
    path.write_text(json.dumps({"speed": faster}))
    assert speed_problems(path) == [
        "results.json: the mixed-precision speed's load or line not recorded"
    ]


def test_a_withheld_speed_is_not_recorded_in_conclusions_json(tmp_path):
    """A loaded run at 6 devices: section 4 printed "withheld" (others 81%), yet the file beside
    the record held that verdict, "faster" over rounds that agree (9,261-9,930 vs 6,602-6,944
    examples/s). Its word matches its samples, so only the load rule catches it."""
    folder = tmp_path / "artifacts" / "03b_where_time_goes"
    folder.mkdir(parents=True)
    withheld = "withheld: the machine was busy (others 81%)"
    (folder / "results.json").write_text(json.dumps({"speed_load": 0.81, "speed": withheld}))
    mixed = _run("mixed_bfloat16", [9261, 9930])
    timing.record(timing.compare(mixed, _run("float32", [6602, 6944])), folder / "conclusions.json")
    assert conclusion_problems(folder / "conclusions.json") == []  # its word is right
    assert speed_problems(folder / "results.json") == [
        f"conclusions.json: a speed recorded, though results.json withheld it ({withheld!r})"
    ]
    (folder / "conclusions.json").unlink()  # what 3b now leaves when it withholds the speed
    assert speed_problems(folder / "results.json") == []


def test_a_pair_with_a_model_at_chance_level_leans_nowhere(tmp_path):
    """A review's 1-device run: fit's float32 model at 0.125 on 10,000 images (chance 0.1 + 3 x
    0.003 = 0.109, so above) beside a mixed model at 0.105 (not above), and a split of 2 to 12
    images (probability 0.013): the notebook printed "leans to float32" for a pair it had called
    meaningless. The record must say no comparison; a quiet split of 7 to 9 gives no lean, and
    30 to 4 between two trained models a lean to the side with more."""
    path = tmp_path / "results.json"

    def check(only: list[int], accuracy: dict, lean: str) -> list[str]:
        leans = {"fit": {"only": only, "accuracy": accuracy, "lean": lean}}
        path.write_text(json.dumps({"test_images": 10_000, "leans": leans}))
        return lean_problems(path)

    at_chance = {"mixed_bfloat16": 0.105, "float32": 0.125}
    assert check([2, 12], at_chance, "leans to float32") == [
        "results.json: the fit pair 'leans to float32', its split gives "
        "'no comparison (a model at chance level)'"
    ]
    assert check([2, 12], at_chance, "no comparison (a model at chance level)") == []
    trained = {"mixed_bfloat16": 0.85, "float32": 0.86}
    assert check([2, 12], trained, "leans to float32") == []
    assert check([7, 9], trained, "no lean beyond the noise") == []
    assert len(check([7, 9], trained, "leans to float32")) == 1
    assert check([30, 4], trained, "leans to mixed_bfloat16") == []
    assert len(check([30, 4], trained, "leans to float32")) == 1


def test_sets_that_disagree_are_flagged_whatever_one_slow_round_bridges():
    """The bandwidth at 5 devices on an idle machine: the first set 81-108 GB/s, the other two
    at most 67.3 and 69.5. Rounds in order of rate leave no gap over 1.5x (81 bridges them); the
    sets' fastest rounds differ by 1.61x: flagged, and the slowest set's fastest round is the low
    end. Sets that agree: not flagged, the low end the second set's fastest."""
    sets = {
        "section 1": [108.1e9, 95e9, 81.1e9],
        "section 3": [67.3e9, 60.8e9],
        "after the sweep": [69.5e9, 66e9],
    }
    assert verdict.set_gap(sets) == pytest.approx(108.1 / 67.3)
    assert limit_range(sets) == (108.1e9, 67.3e9)
    sets["section 1"] = [68.0e9, 65.1e9]
    assert verdict.set_gap(sets) < verdict.GAP
    assert limit_range(sets) == (69.5e9, 68.0e9)


def test_sets_spanning_more_than_the_gap_are_flagged_however_evenly_they_step():
    """The peak at 3 devices under load: sets at 159.1, 234.4 and 341.3 GFLOP/s, neighbours 1.47x
    and 1.46x apart but 2.15x from slowest to fastest. Sets that far apart ran under different
    conditions: flagged, and the slowest set's 159.1 is the low end."""
    sets = {"section 1": [234.4e9, 200e9], "section 3": [341.3e9], "after the sweep": [159.1e9]}
    assert verdict.set_gap(sets) == pytest.approx(341.3 / 159.1)
    assert verdict.set_gap(sets) > verdict.GAP
    assert limit_range(sets) == (341.3e9, 159.1e9)


def _quiet_record(bandwidth: dict[str, list[float]], cores: dict[str, list[float]]) -> dict:
    """A quiet 2-device run shaped like the lead's (others 0-3% in every set), in GFLOP/s and
    GB/s: the peak 378-443 at about 2 cores' worth a round, the step 10.12 FLOP/B at 128; the
    bandwidth's sets and each round's cores' worth (`cores`) as given. A review found the rate
    follows this process's CPU time (about 57 GB/s per core here): a ~60 GB/s set got one of
    the two cores' worth, a ~100 GB/s set nearly both."""
    g = 1e9
    peak = {
        "section 1": [383.6 * g, 390.6 * g, 385.9 * g, 383.5 * g, 378.2 * g],
        "section 3": [422.2 * g, 383.1 * g, 443.1 * g, 411.8 * g, 434.5 * g],
        "after the sweep": [427.3 * g, 436.3 * g, 417.3 * g, 437.7 * g, 393.5 * g],
    }
    rates = {
        32: [4571.6, 3947.8, 4627.6, 4846.1, 4657.3],
        64: [5234.6, 5492.5, 6269.2, 6283.1, 6375.0],
        128: [6713.8, 7587.5, 7697.4, 7944.9, 9523.7],
        256: [8135.1, 10146.4, 10700.8, 10368.9, 11067.5],
    }
    loads = {
        "peak": {"section 1": 0.0, "section 3": 0.001, "after the sweep": 0.033},
        "bandwidth": {"section 1": 0.0, "section 3": 0.001, "after the sweep": 0.0},
    }
    bandwidth = {label: [g * v for v in r] for label, r in bandwidth.items()}
    return _two_replica_record(rates, peak, bandwidth, loads, best_flops=163.6e9) | {
        "usable_cpus": 2.0,
        "cores": {"peak": {label: [1.9, 2.0, 1.9, 1.9, 1.9] for label in peak}, "bandwidth": cores},
    }


#: Every bandwidth set in the slow mode, about one core's worth a round (the lead's quiet d2).
ALL_SLOW = {
    "section 1": [55.0, 60.4, 57.1, 55.9, 56.8],
    "section 3": [58.6, 59.7, 59.6, 61.6, 59.0],
    "after the sweep": [59.3, 58.7, 58.9, 58.6, 58.7],
}
ALL_SLOW_CORES = {label: [v / 57 for v in rates] for label, rates in ALL_SLOW.items()}
#: The first set slow, the second switching mode within the set, the third fast (quiet d8).
BOTH = {
    "section 1": [61.2, 62.9, 62.5, 62.9, 62.8],
    "section 3": [58.6, 60.0, 97.5, 99.4, 101.4],
    "after the sweep": [100.0, 105.6, 106.3, 104.2, 97.3],
}
BOTH_CORES = {label: [v / 57 for v in rates] for label, rates in BOTH.items()}


def test_no_side_of_the_ridge_is_decided_across_a_gap_between_a_limits_sets():
    """A review's 8-device run: the bandwidth's sets read 31.7, 60.5 (one round of five) and
    35.1 GB/s, a 1.91x gap flagged, yet the side was read from the fastest set alone ("compute
    side") where the other device counts' limits gave "not decided". Here, on full cores and a
    quiet machine, a 1.67x gap: the side at the fastest sets is named, but not decided, and
    says why; the same sets within 1.5x decide it. A verdict naming a side across the gap is
    withheld (a later review: `regime` decided "compute-bound" one line above "not decided")."""
    gapped = {
        "section 1": [88.0, 90.0, 89.0, 87.0, 86.0],
        "section 3": [140.0, 150.0, 120.0, 118.0, 119.0],
        "after the sweep": [95.0, 94.0, 93.0, 92.0, 91.0],
    }
    full = {label: [1.9] * 5 for label in gapped}
    record = _quiet_record(gapped, full)
    assert verdict.set_gap(record["bandwidth_rounds"]) > verdict.GAP
    assert verdict.ridge(record) == (
        "The step's 10.1 FLOP/B against a ridge of 2.2 to 3.9 (any pair of limits in their "
        "ranges): compute side at the fastest sets, not decided by this run: a limit's sets "
        "disagree beyond 1.5x (bandwidth 1.67x), so that side would rest on its fastest set alone."
    )
    close = gapped | {"section 1": [130.0] * 5, "after the sweep": [140.0, 138.0, 137.0]}
    assert verdict.ridge(_quiet_record(close, full)).endswith("): compute side.")
    # a verdict naming a side across a gap is withheld, as the side is
    apart = {"section 1": [11.5e9, 12e9], "section 3": [11.2e9, 11.9e9], "after the sweep": [7e9]}
    assert expected_regime(_limits_record()) == "compute-bound"
    assert expected_regime(_limits_record(bandwidth_rounds=apart)) == (
        f"{GAP_WITHHELD}(bandwidth 1.71x), so that side would rest on the fastest sets alone"
    )


def test_no_side_of_the_ridge_rests_on_bandwidth_sets_that_all_ran_starved():
    """Every bandwidth set at ~60 GB/s on about one core's worth of two, with nobody else busy:
    each set ran starved (under 75% of the usable cores' worth in its fastest round) while about
    half the cores sat idle: the work did not spread over them, not load, and the note says so
    (nothing "took" them: a descheduled core would show as steal, in others); no side of the
    ridge is read (at 60 GB/s the rule said "near the ridge"; ~100 GB/s would put the step on
    the compute side). The regime names no side here, so it stands. Sets as slow at the full
    cores' worth (cores the host slowed) are not starved: only a faster set can show that."""
    record = _quiet_record(ALL_SLOW, ALL_SLOW_CORES)
    bandwidth, cores = record["bandwidth_rounds"], record["cores"]["bandwidth"]
    assert verdict.starved_sets(bandwidth, cores, 2.0) == list(ALL_SLOW)
    note = verdict.starved_note("bandwidth", bandwidth, cores, record["loads"]["bandwidth"], 2, 0.2)
    assert note == (
        "bandwidth in 3 of 3 sets (1.0-1.1 of 2 cores' worth; others up to 0%): others under 20%, "
        "at least 46% of the cores idle (the work did not spread over them); every set, so no side "
        "of the ridge rests on it"
    )
    # others at 18%, under the busy threshold: the note does not say nothing else ran
    some = dict.fromkeys(ALL_SLOW, 0.18)
    note = verdict.starved_note("bandwidth", bandwidth, cores, some, 2, 0.2)
    assert "others up to 18%): others under 20%, at least 28% of the cores idle" in note
    assert "nothing else ran" not in note
    # a set too short to measure the load (3b's quick addition, `timing.load_reading`): left out
    # of the loads the note gets, it says the share is unmeasured, not 0%, and claims no idle cores
    note = verdict.starved_note("bandwidth", {"a": [60.0]}, {"a": [1.0]}, {}, 2, 0.2)
    assert note.startswith("bandwidth in 1 of 1 set (1.0 of 2 cores' worth; others unmeasured): ")
    assert "too short to tell others' load from idle cores" in note and "idle (the" not in note
    # one share measured of three starved sets (review s11-revA6 X3): the note says it is one's
    one = verdict.starved_note("bandwidth", bandwidth, cores, {"section 3": 0.29}, 2, 0.2)
    assert (
        "; others 29% (1 of them measured, 2 unmeasured)): others took cores in the measured" in one
    )
    assert verdict.ridge(record) == (
        "No side of the ridge from this run: every bandwidth set ran starved (1.0-1.1 of 2 "
        "cores' worth in its fastest round), so the limit may be low, and a limit measured "
        "higher can move the ridge either way (a higher peak raises it, a higher bandwidth "
        "lowers it)."
    )
    unrecorded = record | {"cores": {}}  # a record without the cores' worth: the old answer
    assert verdict.ridge(unrecorded).endswith("near the ridge.")
    slowed = record | {"cores": {"bandwidth": dict.fromkeys(ALL_SLOW, [1.9] * 5)}}
    assert verdict.ridge(slowed).endswith("near the ridge.")
    regime = (  # the peak, on full cores, searched up to 4 / 3 above its value
        "undecided: below both roofs or no single part dominates, with the peak between 443.1 "
        "and 590.8 GFLOP/s (1.33x, `headroom`) and the step between 13.4 and 16.1 ms (its two "
        "fastest rounds) and the fixed part between 3.70 and 5.71 ms (the line's worst miss of a "
        "point, 7%)"
    )
    assert verdict.regime(record) == verdict.regime(unrecorded) == regime
    busy = record["loads"] | {"bandwidth": dict.fromkeys(ALL_SLOW, 0.5)}
    assert verdict.starved_note("bandwidth", bandwidth, cores, busy["bandwidth"], 2, 0.2) == (
        "bandwidth in 3 of 3 sets (1.0-1.1 of 2 cores' worth; others up to 50%): others took "
        "cores; every set, so no side of the ridge rests on it"
    )


def test_a_starved_low_end_is_labelled_and_a_starved_side_withholds_the_verdict():
    """The first bandwidth set slow on one core's worth, the later ones fast (as the lead's
    quiet d8): only the first ran starved; it is the low end (a 1.69x gap), and the note says
    so; a fast set got the cores, so the sides are read at both ends, and the regime is the one
    without the cores' worth. A verdict that names a side ("near the ridge", from the count's
    factor) with every bandwidth set starved would rest that side on them: withheld."""
    record = _quiet_record(BOTH, BOTH_CORES)
    bandwidth, cores = record["bandwidth_rounds"], record["cores"]["bandwidth"]
    assert verdict.starved_sets(bandwidth, cores, 2.0) == ["section 1"]
    note = verdict.starved_note("bandwidth", bandwidth, cores, record["loads"]["bandwidth"], 2, 0.2)
    assert note.startswith("bandwidth in 1 of 3 sets (1.1 of 2 cores' worth")
    assert note.endswith("; the low end is one of them")
    # a training run above that set's fastest round is the low end (the peak's floor): not a set
    floor = max(bandwidth["section 1"]) * 1.1
    floored = verdict.starved_note(
        "bandwidth", bandwidth, cores, record["loads"]["bandwidth"], 2, 0.2, floor
    )
    assert floored == note.removesuffix("; the low end is one of them")
    assert verdict.ridge(record).endswith(
        "compute side or near the ridge, not decided by this run."
    )
    assert verdict.regime(record) == verdict.regime(record | {"cores": {}})
    replayed = _replayed_record()  # "undecided: near the ridge or no single part dominates"
    starved = {"bandwidth": dict.fromkeys(replayed["bandwidth_rounds"], [1.0, 1.0])}
    assert verdict.regime(replayed | {"cores": starved, "usable_cpus": 2.0}) == (
        "withheld: an outcome names a side of the ridge, and every bandwidth set ran starved "
        "(1.0 of 2 cores' worth in its fastest round), so the limit may be low"
    )
    assert verdict.ruled_out(replayed | {"cores": starved, "usable_cpus": 2.0}) == []
    assert verdict.regime(replayed).startswith("undecided: near the ridge or no single part")


def test_an_undecided_run_says_what_it_rules_out(tmp_path):
    """The quiet records split a step about a third each: undecided, yet no case gave
    overhead-bound or compute-bound, so the run rules them out (and the outcomes no case gave
    besides); a withheld run rules out nothing. The check re-derives what a record says it
    rules out, and its side of the ridge."""
    both = _quiet_record(BOTH, BOTH_CORES)
    assert verdict.ruled_out(both) == [
        "overhead-bound",
        "compute-bound",
        "memory-bandwidth-bound",
        "near the ridge",
    ]
    assert verdict.ruled_out(_replayed_record()) == [
        "overhead-bound",
        "compute-bound",
        "memory-bandwidth-bound",
        "below both roofs",
    ]
    assert verdict.ruled_out(both | {"busy": 0.0001}) == []  # withheld: the machine was busy
    path = tmp_path / "results.json"
    said = {"regime": verdict.regime(both), "ruled_out": verdict.ruled_out(both)}
    said |= {"ridge": verdict.ridge(both), "limits": verdict.limits_of(both)}
    said |= {"peak_flops": said["limits"]["peak"][0]}
    said |= {"memory_bandwidth": said["limits"]["bandwidth"][0]}
    sweep = [p | {"fastest_ms": ms} for p, ms in zip(both["sweep"], verdict.sweep_ms(both))]
    path.write_text(json.dumps(both | said | {"sweep": sweep}))
    assert regime_problems(path) == []
    path.write_text(json.dumps(both | said | {"sweep": sweep, "ruled_out": ["overhead-bound"]}))
    assert regime_problems(path) == [
        "results.json: ruled out ['overhead-bound'], its record says ['overhead-bound', "
        "'compute-bound', 'memory-bandwidth-bound', 'near the ridge']"
    ]
    wrong = verdict.ridge(_quiet_record(ALL_SLOW, ALL_SLOW_CORES))  # "No side of the ridge ..."
    path.write_text(json.dumps(both | said | {"sweep": sweep, "ridge": wrong}))
    assert regime_problems(path) == [
        f"results.json: side of the ridge {wrong!r}, its record says {verdict.ridge(both)!r}"
    ]


def test_the_rule_never_decides_memory_bandwidth_bound():
    """On the memory side (intensity 5 against a ridge of 15 to 17: at most half of it) the
    count's factor 2 halves the roof's part, so the part passes half the step only for a point
    above its roof, a case never dropped: whatever the step's FLOPs, the rule never decides
    "memory-bandwidth-bound". The factor 1/2 doubles the roof's part, so it can be one of an
    undecided verdict's outcomes (notebook 3b's reading guide says both)."""
    verdicts = {
        verdict.regime(_limits_record(intensity=5.0, flops_per_step=share * 12e9 * 5.0 * 0.010))
        for share in (0.3, 0.5, 0.6, 0.8, 0.95, 1.0, 1.2, 1.6, 2.1)
    }
    assert "memory-bandwidth-bound" not in verdicts
    assert any("memory-bandwidth-bound" in v for v in verdicts)  # an outcome, never the verdict


def test_a_trend_over_rounds_needs_four_rounds_whose_lines_hold_and_most_rounds():
    """A review's copies stated "more" from one round of five (5 devices) and two of seven (3
    devices), another "more" from three of five (4 devices, quick), which 3 against 3 give by
    chance 1 time in 10, over the course's 5%; 3c's rule (`verdict.trend`) says too few, and
    needs 4 kept rounds (1 time in 35) and most of them (4 of 7); the kept rounds' slopes then
    decide by the noise rule (`timing.compare`)."""
    nan = float("nan")
    one = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert verdict.trend(one[:5], [5.95, nan, nan, nan, nan]) == (
        "too few rounds' lines hold to say (1 of 5; a trend needs 4 and most rounds)"
    )
    assert verdict.trend(one, [1.83, nan, 9.09, nan, nan, nan, nan]).startswith("too few")
    assert verdict.trend(one, [1.2, 1.3, 1.4, nan, nan, nan, nan]).startswith(
        "too few rounds' lines hold to say (3 of 7;"
    )
    small = [1.0, 0.95, 1.05, 1.0, 0.9]
    assert verdict.trend(small[:4] + [nan] * 3, [1.2, 1.3, 1.4, 1.1, nan, nan, nan]).startswith(
        "more (independent rounds of equal slopes fail to overlap 1 time in 35)"
    )
    assert verdict.trend(small, [1.2, 1.3, 1.4, 1.1, 1.25]) == "more"  # 5 rounds: under 1%
    assert verdict.trend(small, [1.6, nan, nan, 1.7, 1.5]) == (
        "too few rounds' lines hold to say (3 of 5; a trend needs 4 and most rounds)"
    )
    assert verdict.trend(small[:4], [0.8, 0.85, 0.7, 0.75]).startswith("less")
    assert verdict.trend(small, [0.8, 1.3, nan, 1.1, 1.2]).startswith("within noise")


def _review_rounds(rounds_us: dict[int, list[float]]) -> tuple[dict, tuple]:
    # A review's all-reduce rounds (us per run, the loop's cost taken off) and 3c's ranges.
    code = bench.notebook_code(bench.ALL_REDUCE_NOTEBOOK, names=bench.ALL_REDUCE_CODE)
    samples = {
        size: [1e-6 * t for t in ts] for size, ts in zip([*SMALL, *LARGE], rounds_us.values())
    }
    return samples, (SMALL, LARGE, code["fit_line"], verdict.ALL_REDUCE_TOLERANCE)


def test_a_quiet_replay_of_three_kept_rounds_of_five_draws_no_trend():
    """A review's 4-device quick run, replayed quiet: 3 of its 5 rounds' lines hold, and "more
    (... 1 time in 10)" was printed, a hint by the course's 5%; 3 against 3 is now too few."""
    samples, ranges = _review_rounds(
        {
            4: [371.0, 452.3, 823.4, 322.8, 319.5],
            16: [475.1, 306.9, 297.8, 396.8, 319.3],
            64: [404.6, 345.8, 461.5, 482.4, 314.2],
            256: [487.6, 386.9, 645.3, 379.6, 351.6],
            1024: [1064.8, 884.7, 865.7, 956.1, 703.7],
            4096: [4401.9, 4223.7, 4243.1, 3527.6, 4200.3],
            8192: [7402.2, 11265.9, 7741.1, 8466.1, 7767.1],
            16384: [19672.9, 22898.9, 25893.1, 16260.4, 16608.4],
        }
    )
    said = verdict.jump_line("all-reduce", samples, ranges, load=0.05)
    assert "1 time in 10" not in said
    assert "over the rounds: too few rounds' lines hold to say (3 of 5; a trend needs 4" in said


def test_the_note_on_a_first_ratio_outside_the_rounds_is_printed_busy_or_quiet():
    """A review's 7-device run printed 1.32x beside rounds of 1.42 to 1.87x with no note: the
    note sat behind the busy withhold. It is a fact about the figures, so it stays when busy."""
    samples, ranges = _review_rounds(
        {
            4: [823.5, 745.3, 728.5, 601.2, 630.1],
            16: [719.8, 662.4, 642.3, 793.0, 739.1],
            64: [695.4, 674.6, 640.3, 674.9, 831.0],
            256: [799.8, 806.1, 767.5, 817.8, 1506.8],
            1024: [1783.7, 1719.0, 1676.8, 1843.4, 2017.7],
            4096: [7153.3, 6958.5, 6453.7, 6997.8, 7401.1],
            8192: [14086.5, 13504.8, 12601.9, 13377.8, 12065.2],
            16384: [28187.2, 24960.5, 22457.3, 25667.0, 22123.9],
        }
    )
    note = "; the first ratio lies outside the rounds'"
    for load in (0.05, 0.5):
        said = verdict.jump_line("all-reduce", samples, ranges, load=load)
        assert "costs 1.32x" in said and "each round alone 1.42 to 1.87x" in said and note in said
    assert "over the rounds: withheld: the machine was busy (others 50%)" in said


def test_the_headroom_is_the_best_rate_per_core_of_any_set_times_the_usable_cores():
    """A review's 1-device run: the peak's sets reached 289.2, 282.8 and 215.7 GFLOP/s on 1.78,
    1.32 and 1.01 of 2 cores' worth, 162, 214 and 214 per core. The fastest round alone gave
    2 / 1.78, floored to 1.33x; 3b's per-core model puts 2 cores at 2 x 214 = 1.48x the value.
    Rounds on every core leave the floor (load that takes no cores)."""
    sets = {"section 1": [289.2, 250.0], "section 3": [282.8], "after the sweep": [215.7]}
    cores = {"section 1": [1.78, 1.9], "section 3": [1.32], "after the sweep": [1.01]}
    assert round(verdict.headroom(sets, cores, 2.0), 2) == 1.48
    assert verdict.headroom(sets, {k: [2.0] * len(v) for k, v in sets.items()}, 2.0) == 4 / 3


def test_a_peak_a_training_run_beat_is_searched_from_that_floor():
    """A review's 2-device run: a training run's 65.6 GFLOP/s beat every peak round (fastest 39.4),
    so the peak's value is that floor; the best rate per core, 101.2 on 2 cores, bounds the search
    at 2 x 101.2 / 65.6 = 3.09x the floor. Dividing by the fastest round printed 5.13x and searched
    the peak up to 336 GFLOP/s, past what the cores can do."""
    sets = {"section 1": [39.4], "section 3": [30.0]}
    cores = {"section 1": [0.3893], "section 3": [1.0]}  # 39.4 / 0.3893 = 101.2 per core
    assert round(verdict.headroom(sets, cores, 2.0), 2) == 5.14
    assert round(verdict.headroom(sets, cores, 2.0, floor=65.6), 2) == 3.09


def test_a_fixed_part_band_below_zero_is_printed_from_zero():
    """A review's quiet 7-device replay printed "the fixed part between -4.20 and 20.47 ms": the
    worst relative miss at the step's time reaches below 0, where a line measures none."""
    said = verdict.regime(_replayed_record([3.6, 6.0, 12.8, 24.0]) | {"count_margin": 1.0})
    assert "the fixed part between 0.00 and 1.47 ms" in said and "none below 0" in said
    assert "between -" not in said


def test_a_trend_needs_the_rounds_slopes_apart_not_every_ratio_above_one():
    """A review's 5-device run: per-round ratios 1.01, 2.89, 7.38, 1.35 and 2.30, every one above
    1, were called "more"; the rounds' own slopes overlap (a round whose large slope is below
    another round's small one), so the noise rule says within noise, leaning to more."""
    small = [3.0, 1.0, 0.5, 2.0, 1.2]
    large = [r * s for r, s in zip([1.01, 2.89, 7.38, 1.35, 2.30], small)]
    assert min(b / a for a, b in zip(small, large)) > 1
    assert verdict.trend(small, large) == (
        "within noise: the rounds lean to more, but their slopes overlap"
    )


def test_the_product_grows_with_the_cpus_so_that_a_quiet_16_cpu_machine_that_fills_them_decides():
    """The starved threshold is set on 2 cores, where 3b's product is 1024 x 1024 (this
    machine's size and timing budget, kept). A fixed size gave a quiet 16-CPU machine about 9
    cores' worth (a fork-join with too little work per core): every set starved, and any verdict
    naming a side withheld. 3b's `matrix_size` (section 1, which `course bench` calls too) keeps
    each CPU's multiply-adds those of 2 CPUs at 1024, within the rounding to 256, so a round's
    seconds stay about the same; the record of a quiet 16-CPU machine whose sets fill 15 of its
    16 cores' worth then decides (compute-bound, its side given), where 9 withholds."""
    size = bench.notebook_code(bench.LIMITS_NOTEBOOK, names=("matrix_size",))["matrix_size"]
    assert size(1) == size(2) == 1024 and size(16) == 2048
    for cpus in (3, 4, 8, 12, 16, 32, 64, 128):
        assert 0.7 < size(cpus) ** 3 / cpus / (1024**3 / 2) < 1.4, (cpus, size(cpus))
    record = _limits_record(usable_cpus=16.0)
    sets = {name: record[f"{name}_rounds"] for name in ("peak", "bandwidth")}
    record["loads"] = {name: dict.fromkeys(rounds, 0.02) for name, rounds in sets.items()}

    def worth(cores: float) -> dict:  # every round of every set got `cores` cores' worth
        return {
            name: {k: [cores] * len(r) for k, r in rounds.items()} for name, rounds in sets.items()
        }

    assert verdict.regime(record | {"cores": worth(15.0)}) == "compute-bound"
    assert verdict.ridge(record | {"cores": worth(15.0)}).endswith("compute side.")
    assert verdict.regime(record | {"cores": worth(9.0)}).startswith(
        "withheld: an outcome names a side of the ridge, and every peak set ran starved (9.0 of 16"
    )
    assert verdict.ridge(record | {"cores": worth(9.0)}).startswith("No side of the ridge")


def test_a_many_core_machine_whose_peak_sets_all_read_starved_gets_no_side_of_the_ridge():
    """The starved threshold is set on 2 cores. On a quiet 16-CPU machine whose product fills
    only 9 cores' worth (a fork-join that cannot keep them all busy), every peak set reads
    starved: the note says others were under the busy threshold and does not
    blame anyone, and no side of the ridge is given (a verdict naming one would be withheld, as
    tested above; this one names none and stands, though "no single part dominates" in it can
    still rest on the low limits: a starved limit raises the roof's part)."""
    record = _quiet_record(BOTH, BOTH_CORES) | {"usable_cpus": 16.0}
    nine = {label: [9.0] * 5 for label in record["peak_rounds"]}
    record["cores"] = {"peak": nine, "bandwidth": {k: [15.0] * 5 for k in BOTH}}
    note = verdict.starved_note(
        "peak", record["peak_rounds"], nine, record["loads"]["peak"], 16.0, 0.2
    )
    assert "in 3 of 3 sets (9.0 of 16 cores' worth; others up to 3%): others under 20%" in note
    assert note.endswith("every set, so no side of the ridge rests on it")
    assert verdict.ridge(record).startswith(
        "No side of the ridge from this run: every peak set ran starved (9.0 of 16 cores' worth"
    )
    # this regime names no side ("below both roofs or no single part dominates"): it stands
    for cores in (record["cores"], {}):  # the peak searched up to 16 / 9 or, unrecorded, 4 / 3
        assert verdict.regime(record | {"cores": cores}).startswith(
            "undecided: below both roofs or no single part"
        )


def test_a_starved_limit_is_searched_up_to_what_its_cores_allow():
    """A starved limit may be low, so the roof's part may be too high: at a higher limit the rest
    can pass half the step. The review's case: "no single part dominates" at a peak of 300
    GFLOP/s is "below both roofs" at 450. A peak whose fastest round got 0.8 of 2 cores' worth
    is searched up to 2.5x (it could have gone that much faster on both), so the verdict names
    both outcomes; the same record on 1.9 cores' worth (searched up to 1.33x) decides."""
    case = {"intensity": 40, "flops_per_step": 1.2e9, "count_margin": 2, "majority": 0.5}
    assert verdict.split(case, 10.0, 2.0, 300e9, 30e9) == "no single part dominates"
    assert verdict.split(case, 10.0, 2.0, 450e9, 30e9) == "below both roofs"
    record = _replayed_record() | {"count_margin": 1.0, "usable_cpus": 2.0}
    full = {
        name: {k: [1.9] * 2 for k in record[f"{name}_rounds"]} for name in ("peak", "bandwidth")
    }
    assert verdict.regime(record | {"cores": full}) == "no single part dominates"
    starved = full | {"peak": {k: [0.8] * 2 for k in record["peak_rounds"]}}
    assert verdict.regime(record | {"cores": starved}).startswith(
        "undecided: below both roofs or no single part dominates, with the peak between 229.0 "
        "and 572.6 GFLOP/s (2.50x, `headroom`)"
    )
    assert "below both roofs" not in verdict.ruled_out(record | {"cores": starved})


def test_a_set_s_cores_worth_is_one_figure_when_its_ends_round_alike():
    """3b prints each set with the cores' worth its rounds got: a range whose two ends round to
    the same figure ("0.2-0.2") is printed as one, and a real range names its fastest round's
    share too (the one a limit rests on); on a GPU (no cores given) none is printed."""
    assert verdict.spread([88.4e9, 74.6e9], "FLOP/s", [0.21, 0.24], 2.0) == (
        "88.4 GFLOP/s (fastest of 2 rounds; median 81.5, slowest 74.6; 0.2 of 2 cores' worth)"
    )
    ranged = verdict.spread([245e9, 228e9, 186e9], "FLOP/s", [0.82, 0.96, 1.04], 2.0)
    assert ranged.endswith("; 0.8-1.0 of 2 cores' worth, the fastest round 0.8)")
    assert verdict.spread([61e9, 59e9], "B/s", [], 2.0) == (
        "61.0 GB/s (fastest of 2 rounds; median 60.0, slowest 59.0)"
    )
    peak = {"section 1": [88e9], "section 3": [90e9]}
    note = verdict.starved_note(
        "peak",
        peak,
        {"section 1": [0.31], "section 3": [0.34]},
        {"section 1": 0.8, "section 3": 0.8},
        2.0,
        0.2,
    )
    assert note.startswith("peak in 2 of 2 sets (0.3 of 2 cores' worth; others up to 80%)")


def test_a_limit_in_words_says_where_its_low_end_comes_from():
    """3b's line per limit (`verdict.limit_words`): the value and low end for all physical
    devices, the low end from the other sets, from the slowest set across a gap, or raised to
    the fastest training run (then the runner-up is named); a floor above every round says the
    limit was measured low."""
    two = {"a": [60e9], "b": [50e9]}
    assert verdict.limit_words("bandwidth", two, 0.0, 1, "B/s") == (
        "bandwidth: at least 60.0 GB/s; the low end 50.0 (83% of it: the other sets' fastest)"
    )
    gap = {"a": [265e9], "b": [240e9], "c": [88.4e9]}
    assert verdict.limit_words("peak", gap, 117.4e9, 1, "FLOP/s") == (
        "peak: at least 265.0 GFLOP/s; the low end 117.4 (44% of it: the fastest training run; "
        "the slowest set's fastest, across the gap 88.4)"
    )
    assert verdict.limit_words("peak", two, 70e9, 2, "FLOP/s").startswith(
        "peak: at least 140.0 GFLOP/s (a training run's rate: the peak was measured low)"
    )


def test_the_split_s_flags_fire_only_on_their_own_cause():
    """3b's flags on a step's split (`verdict.part_flags`): parts that sum past the step, a
    sweep on a busy machine, a per-example rate above the peak; none on a clean run."""
    assert verdict.part_flags(0.3, 0.4, 0.05, 0.2, 90e9, 100e9) == []
    overlap, busy, above = (
        verdict.part_flags(0.6, 0.5, 0.0, 0.2, 0.0, 1.0),
        verdict.part_flags(0.1, 0.1, 0.56, 0.2, 0.0, 1.0),
        verdict.part_flags(0.1, 0.1, 0.0, 0.2, 120e9, 100e9),
    )
    assert overlap == [verdict.part_flags(0.6, 0.5, 0.0, 0.2, 0.0, 1.0)[0]] and "110%" in overlap[0]
    assert len(busy) == 1 and busy[0].startswith("the sweep ran on a busy machine (others 56%)")
    assert len(above) == 1 and above[0].startswith("the per-example part's rate runs above")
    assert verdict.busy_words(0.84, "peak", "after the sweep").startswith(
        "the machine was busy: other programs used 84% of its cores while the peak was measured, "
        "after the sweep"
    )


def test_a_per_example_rate_against_a_peak_on_other_cores_is_flagged():
    """A review's 5-device run printed "225.0 GFLOP/s, 98% of peak" against a peak whose round
    got 1.0 of 2 cores' worth while the sweep's run got 1.8: flagged, with both figures; and a
    later review's 2-device run printed "41% of peak" against a peak on 1.7 cores' worth, the
    run on 1.1 (about 62% on as many cores): flagged the other way. Not when the peak's round
    got as many (rounded alike), with no slope, or with no cores read (0: a GPU, or a peak a
    training run raised); the fastest round of all sets gives it."""
    flags = verdict.part_flags(0.1, 0.3, 0.0, 0.2, 225e9, 230e9, (1.0, 1.8))
    assert flags == [
        "the per-example part's rate is compared with a peak whose round got 1.0 cores' worth, "
        "the run 1.8: a peak on as many cores may be higher, and the share read too high (the "
        "roof's part too: its time comes from the same peak)"
    ]
    flags = verdict.part_flags(0.1, 0.36, 0.0, 0.2, 71.2e9, 174.5e9, (1.7, 1.1))
    assert len(flags) == 1 and "got 1.7 cores' worth, the run 1.1: on as many cores" in flags[0]
    assert "the share read too low" in flags[0], flags
    left_of_the_ridge = verdict.part_flags(
        0.1, 0.3, 0.0, 0.2, 225e9, 230e9, (1.0, 1.8), roof_from_peak=False
    )
    assert len(left_of_the_ridge) == 1 and "roof's part" not in left_of_the_ridge[0]
    assert verdict.part_flags(0.1, 0.3, 0.0, 0.2, 225e9, 230e9, (1.81, 1.79)) == []
    assert verdict.part_flags(0.1, 0.3, 0.0, 0.2, 0.0, 230e9, (1.0, 1.8)) == []
    assert verdict.part_flags(0.1, 0.3, 0.0, 0.2, 225e9, 230e9, (0.0, 1.8)) == []
    sets = {"section 1": [200e9, 230e9], "section 3": [210e9]}
    assert verdict.top_cores(sets, {"section 1": [1.9, 1.0], "section 3": [1.8]}) == 1.0
    assert verdict.top_cores(sets, {}) == 0.0


def test_a_run_s_cores_worth_is_its_fastest_round_s():
    """The sweep's table gives each run's fastest round's cores' worth (`RunResult`)."""
    run = timing.RunResult("64/replica", 1.0, 10, rounds=[5.0, 9.0, 7.0], cores=[1.2, 1.3, 1.8])
    assert run.fastest_cores == 1.3
    assert timing.RunResult("gpu", 1.0, 10, rounds=[5.0]).fastest_cores == 0.0


def test_notebook_3_s_points_are_their_median_rounds(tmp_path):
    """Notebook 3 records each sweep point's rounds (examples per second) beside its ms per step:
    the check works the median round out again, so a point whose step_ms is not its median's, or
    that recorded no rounds, fails (before, step_ms was compared with itself)."""
    rounds = {64: [6400.0, 6000.0, 6600.0], 128: [6300.0, 6800.0, 6500.0]}
    sweep = [
        {"global_batch": b, "step_ms": 1000 * b / sorted(r)[1], "rounds": r}
        for b, r in rounds.items()
    ]
    results = {"batch": 64, "sweep": sweep, "flops_per_example": 15e6}
    results |= {"line_problem": "", "line_tolerance": verdict.LINE_TOLERANCE}
    results |= {"regime": expected_regime(results)}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert regime_problems(path) == []
    sweep[0]["step_ms"] = 1000 * 64 / 6600.0  # the fastest round's, 3b's rule, not 3's
    path.write_text(json.dumps(results))
    assert regime_problems(path) == [
        "results.json: 9.70 ms per step at a batch of 64, its median round gives 10.00"
    ]
    del sweep[0]["rounds"]
    sweep[0]["step_ms"] = 10.0
    path.write_text(json.dumps(results))
    assert regime_problems(path) == ["results.json: no rounds recorded at a batch of 64"]


def test_3c_s_step_its_share_and_the_addition_are_read_again_from_their_rounds(tmp_path):
    """3c records the step's rounds and the addition's: a step time that is not its rounds'
    fastest, a share of it that is not the line's time over that, and an addition's cost of a
    large byte its rounds do not give each fail with a line of their own; so does a record
    without them."""
    path = tmp_path / "results.json"
    record = _all_reduce_results()
    assert " costs 1.62x" in record["add_line"] and "over the rounds: more (" in record["add_line"]
    path.write_text(json.dumps(record))
    assert all_reduce_problems(path) == []
    share = record["step_share"]
    told = record["add_line"].replace("rounds: more", "rounds: less")
    path.write_text(json.dumps(record | {"fastest_ms": 26.0, "step_share": 2 * share}))
    assert all_reduce_problems(path) == [
        "results.json: step 26.000 ms, its rounds' fastest 25.000",
        f"results.json: step share {2 * share:.4f}, its rounds give {share:.4f}",
    ]
    path.write_text(json.dumps(record | {"add_line": told}))
    assert all_reduce_problems(path) == [
        f"results.json: addition {told!r} printed, its rounds give {record['add_line']!r}"
    ]
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "add_samples"}))
    assert all_reduce_problems(path) == ["results.json: add_samples not recorded"]


def test_3c_s_trends_over_the_rounds_are_withheld_on_a_busy_machine(tmp_path):
    """3c draws no verdict above `timing.BUSY` of the cores (section 1's rule, as 3b): its trend
    over the rounds (the noise rule) is withheld then, its ratios kept; a record stating a trend
    from busy rounds fails, the all-reduce's as the addition's (a review found "more" printed
    at 65%, with a flag only), and so does a record without the all-reduce's line."""
    path = tmp_path / "results.json"
    record = _all_reduce_results()
    quiet = record["add_line"]
    withheld = quiet.split("); over")[0] + "); over the rounds: withheld: the machine was busy"
    withheld = withheld.replace("fastest round;", "fastest round; measured under load;")
    path.write_text(json.dumps(record | {"add_load": 0.65}))
    assert all_reduce_problems(path) == [
        f"results.json: addition {quiet!r} printed, its rounds give {withheld + ' (others 65%)'!r}"
    ]
    path.write_text(json.dumps(record | {"add_load": 0.65, "add_line": withheld + " (others 65%)"}))
    assert all_reduce_problems(path) == []
    told = record["reduce_line"] + "; more"  # a trend the record's rounds do not give
    path.write_text(json.dumps(record | {"reduce_line": told}))
    assert all_reduce_problems(path) == [
        f"results.json: all-reduce {told!r} printed, its rounds give {record['reduce_line']!r}"
    ]
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "reduce_line"}))
    assert all_reduce_problems(path) == ["results.json: reduce_line not recorded"]


def test_a_side_of_the_ridge_from_quick_s_rounds_is_labelled_a_smoke_test():
    """`verdict.regime` withholds on fewer rounds than `min_rounds` (the quick profile's 3); a
    review found `verdict.ridge`, printed beside it, naming a side from the same sets with no
    word of it. It now carries the rule's words: a smoke test (a side withheld on load or
    starved sets needs none)."""
    record = _limits_record()
    sets = {name: record[f"{name}_rounds"] for name in ("peak", "bandwidth")}
    record["loads"] = {name: dict.fromkeys(rounds, 0.02) for name, rounds in sets.items()}
    full = verdict.ridge(record)
    assert full.startswith("The step's 60.0 FLOP/B against a ridge") and full.endswith(".")
    quick = verdict.ridge(record | {"rounds": 3})
    assert quick == full + " (3 rounds per set, a smoke test; a verdict needs 5)"
    assert verdict.regime(record | {"rounds": 3}) == (
        "withheld: 3 rounds per set, a smoke test; a verdict needs 5"
    )
    assert verdict.ridge(record | {"rounds": 5}) == full
    busy = record | {"rounds": 3, "loads": {k: dict.fromkeys(s, 0.5) for k, s in sets.items()}}
    assert verdict.ridge(busy).startswith("No side of the ridge")
    assert "smoke" not in verdict.ridge(busy)


def test_a_3c_trend_stated_in_quick_must_be_labelled_a_smoke_test(tmp_path):
    """3c records its profile (`quick`); the artifact check rebuilds each cost-of-a-byte line
    with it, so a trend stated in quick without its smoke-test label fails the check."""
    results = _all_reduce_results()
    assert results["add_line"].endswith("1 time in 35)")  # a trend stated, 4 rounds
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results | {"quick": True}))
    reduce_problem, problem = all_reduce_problems(path)  # the first ratios are labelled too
    assert problem.startswith("results.json: addition ") and problem.endswith('smoke test)"')
    assert reduce_problem.startswith("results.json: all-reduce ")
    label = "fastest round; quick: a smoke test"
    labelled = results["add_line"].replace("fastest round", label) + " (quick: a smoke test)"
    reduce_line = results["reduce_line"].replace("fastest round", label)
    quick = {"quick": True, "add_line": labelled, "reduce_line": reduce_line}
    path.write_text(json.dumps(results | quick))
    assert all_reduce_problems(path) == []
    path.write_text(json.dumps(results | {"add_line": labelled}))  # full: no label
    assert len(all_reduce_problems(path)) == 1
