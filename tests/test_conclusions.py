"""Conclusions a notebook prints about speed must follow from the samples it recorded.

Notebooks compare runs with `course_utils.timing.compare` and append each verdict, with its
samples, to artifacts/<notebook>/conclusions.json (`timing.record`).
`assert_conclusions_consistent` re-derives every word and percentage from those samples with code
of its own (all pairs of samples, numpy medians), so a sentence such as "slower" over rounds that
overlap fails the test whoever wrote it.
`assert_regime_consistent` does the same for notebooks 3 and 3b's verdict on where a step's time
goes (overhead- or per-example-bound; 3b: overhead-, memory-bandwidth- or compute-bound, below
both roofs, or undecided when a point lies above its roof or a limit that did not settle could
flip it), from the batch sweep (and 3b's measured roofline) in their results.json; 3b's limits
must be the fastest set of rounds another set confirms, flagged exactly when none does or a run
beat the peak, and notebook 3c's all-reduce line must be the one its rounds
give and predict every measured size within the notebook's tolerance.
Both checkers live in course_tools/artifact_check.py; the nbval and browser runs and CI's device
sweep apply them right after each run, and the tests below check the checkers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import assert_conclusions_consistent, assert_regime_consistent

from course_tools import bench
from course_tools.artifact_check import (
    all_reduce_problems,
    expected_regime,
    regime_problems,
    settled_limit,
)
from course_utils import timing

SLOPED = [(64, 10.0), (96, 14.8), (128, 19.5), (192, 29.1)]  # about 4% fixed at 64
FLAT = [(64, 10.0), (96, 10.2), (128, 10.5), (192, 10.9)]  # about 90% fixed


@pytest.mark.parametrize(
    "sweep, roofline, regime",
    [
        (FLAT, {}, "overhead-bound"),
        (SLOPED, {}, "per-example-bound"),
        # notebook 3b: peak 150 GFLOP/s, 10 GB/s (ridge 15 FLOP/B); a 10 ms step at 64 whose
        # FLOPs the roof would do in 8 ms (80% of it), 3 ms (30%, the rest explained by neither)
        (SLOPED, {"intensity": 8.0, "flops_per_step": 0.64e9}, "memory-bandwidth-bound"),
        (SLOPED, {"intensity": 20.0, "flops_per_step": 1.2e9}, "compute-bound"),
        (SLOPED, {"intensity": 20.0, "flops_per_step": 0.45e9}, "below both roofs"),
        (FLAT, {"intensity": 20.0, "flops_per_step": 0.1e9}, "overhead-bound"),
        # a point above its roof (150% of it): a limit was measured low, no roof is named
        (SLOPED, {"intensity": 20.0, "flops_per_step": 2.25e9}, "undecided"),
    ],
)
def test_the_regime_follows_from_the_sweep(tmp_path, sweep, roofline, regime):
    points = [{"global_batch": b, "step_ms": ms} for b, ms in sweep]
    results = {"batch": 64, "sweep": points, "flops_per_example": 15e6}
    if roofline:
        results |= {"peak_flops": 150e9, "memory_bandwidth": 10e9, **roofline}
    assert expected_regime(results) == regime
    path = tmp_path / "results.json"
    wrong = "overhead-bound" if regime != "overhead-bound" else "compute-bound"
    path.write_text(json.dumps({**results, "regime": wrong}))
    with pytest.raises(AssertionError):
        assert_regime_consistent(path)
    path.write_text(json.dumps({**results, "regime": regime}))
    assert_regime_consistent(path)


def _limits_record(**changes) -> dict:
    """Notebook 3b's record: a 10 ms step at 64 (about 4% fixed), intensity 20 FLOP/B, the peak's
    sets of rounds 40% apart with a third confirming neither (so it is known only between 124
    and 205 GFLOP/s), the bandwidth settled at 12 GB/s by two agreeing sets."""
    return {
        "batch": 64,
        "sweep": [{"global_batch": b, "step_ms": ms} for b, ms in SLOPED],
        "intensity": 20.0,
        "flops_per_step": 1.2e9,  # 120 GFLOP/s: compute side at either end, 59-97% of the roof
        "physical_devices": 1,
        "peak_flops": 205e9,
        "memory_bandwidth": 12e9,
        "peak_rounds": {"section 1": [120e9, 124e9], "section 3": [200e9, 205e9], "third": [150e9]},
        "bandwidth_rounds": {"section 1": [11.5e9, 12e9], "section 3": [11.2e9, 11.9e9]},
        "agreement": 0.15,
        "sweep_best_flops": 120e9,
        "uncertain": {"peak": "no two sets within 15% of each other"},
        "regime": "compute-bound",
    } | changes


def test_a_limit_that_did_not_settle_must_be_flagged(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_limits_record()))
    assert regime_problems(path) == []
    path.write_text(json.dumps(_limits_record(uncertain={})))
    assert regime_problems(path) == [
        "results.json: the peak did not settle, but it is not flagged uncertain"
    ]
    path.write_text(json.dumps(_limits_record(peak_flops=124e9)))
    assert regime_problems(path) == [
        "results.json: peak_flops 1.24e+11, its sets of rounds settle on 2.05e+11"
    ]
    # a settled bandwidth flagged anyway is as wrong as an unsettled one not flagged
    flagged = {"peak": "no two sets", "bandwidth": "no two sets"}
    path.write_text(json.dumps(_limits_record(uncertain=flagged)))
    assert regime_problems(path) == [
        "results.json: the bandwidth settled, but it is flagged uncertain"
    ]


def test_a_limit_is_the_fastest_set_another_set_confirms_not_the_fastest_of_all(tmp_path):
    """One set far above the others (104.6 GB/s against 50.8-64.3) does not set the bandwidth:
    64.3, confirmed by 61.9, does, and the limit counts as settled."""
    sets = {"section 1": [104.6e9], "section 3": [64.3e9], "third": [61.9e9], "fourth": [50.8e9]}
    peak = {"section 1": [200e9, 204e9], "section 3": [205e9]}  # settled
    record = _limits_record(
        bandwidth_rounds=sets,
        memory_bandwidth=64.3e9,
        peak_rounds=peak,
        uncertain={},
        intensity=2.0,
        flops_per_step=0.5e9,
    )
    assert expected_regime(record) == "below both roofs"  # 50 of 124-129 GFLOP/s: 39-40%
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"regime": "below both roofs"}))
    assert regime_problems(path) == []
    path.write_text(
        json.dumps(record | {"memory_bandwidth": 104.6e9, "regime": "below both roofs"})
    )
    assert regime_problems(path)[0].startswith("results.json: memory_bandwidth 1.046e+11, its sets")


def test_a_verdict_that_an_unsettled_limit_could_flip_is_withheld(tmp_path):
    """65 GFLOP/s: 52% of a 124 GFLOP/s roof (compute-bound) but 32% of a 205 one (below both
    roofs): the peak did not settle between them, so no verdict; with the peak settled, one."""
    record = _limits_record(flops_per_step=0.65e9)
    assert expected_regime(record) == "undecided: the peak did not settle"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"regime": "below both roofs"}))
    assert "its sweep says 'undecided: the peak did not settle'" in regime_problems(path)[0]
    settled = {"section 1": [200e9, 204e9], "section 3": [205e9]}
    record = _limits_record(flops_per_step=0.65e9, peak_rounds=settled, uncertain={})
    assert expected_regime(record) == "below both roofs"


def test_a_verdict_the_agreeing_sets_could_flip_is_too_close_to_call():
    """A settled peak is known between its two agreeing sets (180 and 200 GFLOP/s): 92 GFLOP/s
    is 46% of a 200 roof (below both roofs, 49% neither) but 51% of a 180 one (compute-bound)."""
    settled = {"section 1": [180e9], "section 3": [200e9]}
    record = _limits_record(flops_per_step=0.92e9, peak_rounds=settled, uncertain={})
    assert (
        expected_regime(record) == "undecided: too close to call within the limits' agreeing sets"
    )
    record = _limits_record(flops_per_step=0.7e9, peak_rounds=settled, uncertain={})
    assert expected_regime(record) == "below both roofs"  # 35-39% of the roof either way


def test_a_run_faster_than_the_peak_makes_the_peak_at_least_that_fast(tmp_path):
    """The sets agree at 205 GFLOP/s, but a training run reached 260: the peak is at least 260,
    with no upper bound measured, so it must be flagged and recorded as 260."""
    settled = {"section 1": [200e9, 204e9], "section 3": [205e9]}
    record = _limits_record(peak_rounds=settled, sweep_best_flops=260e9, peak_flops=260e9)
    # a peak of 260 or more puts the ridge above 21.7: the step (20 FLOP/B) on the memory side
    record["regime"] = "memory-bandwidth-bound"
    assert expected_regime(record) == "memory-bandwidth-bound"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(record | {"uncertain": {}}))
    assert regime_problems(path)[-1] == (
        "results.json: the peak did not settle, but it is not flagged uncertain"
    )
    path.write_text(json.dumps(record | {"peak_flops": 205e9}))
    assert regime_problems(path) == [
        "results.json: peak_flops 2.05e+11, its sets of rounds settle on 2.6e+11"
    ]


def test_the_notebook_and_the_check_settle_a_limit_alike():
    """3b's own `settle` (its tagged cell) and artifact_check's rule, written apart, agree."""
    code = bench.notebook_code(bench.LIMITS_NOTEBOOK, names=("settle", "AGREEMENT"))
    cases = [
        ({"a": [120.0, 124.0], "b": [200.0, 205.0], "c": [150.0]}, 0.0),
        ({"a": [104.6], "b": [64.3], "c": [61.9], "d": [50.8]}, 0.0),
        ({"a": [200.0, 204.0], "b": [205.0]}, 260.0),
        ({"a": [200.0], "b": [205.0]}, 190.0),
        ({"a": [100.0], "b": [300.0]}, 200.0),
    ]
    for sets, floor in cases:
        value, low, high, reasons = code["settle"](sets, floor)
        assert (value, low, high, not reasons) == settled_limit(sets, code["AGREEMENT"], floor)


SMALL, LARGE = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20], [4 << 20, 8 << 20, 16 << 20]


def _all_reduce_results(scale: dict[int, float] | None = None) -> dict:
    """Notebook 3c's record at 2 replicas: alpha 80 us, 250 ps/byte up to 1 MiB and 400 beyond,
    a 20 us loop, each size's rounds scaled by `scale` (load), fitted with the notebook's code."""
    scale = scale or {}
    samples = {"loop alone": [20e-6, 21e-6]}
    for size in [*SMALL, 487_720, *LARGE]:
        beta = 250e-12 if size <= SMALL[-1] else 400e-12
        samples[size] = [(20e-6 + 80e-6 + size * beta) * scale.get(size, 1) * f for f in (1, 1.1)]
    code = bench.notebook_code(bench.ALL_REDUCE_NOTEBOOK, names=bench.ALL_REDUCE_CODE)
    fit = code["fit_all_reduce"](samples, SMALL, LARGE)
    return {
        "replicas": 2,
        "gradient_bytes": 487_720,
        "small": SMALL,
        "large": LARGE,
        "tolerance": 0.25,
        "samples": {str(k): v for k, v in samples.items()},
        "alpha": fit["alpha"],
        "beta_small": fit["beta_small"],
        "beta_large": fit["beta_large"],
        "worst_error": max(abs(e) for e in fit["errors"].values()),
        "alpha_dominates": fit["alpha"] > 487_720 * fit["beta_small"],
    }


def test_the_all_reduce_line_must_predict_every_size(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_all_reduce_results()))
    assert all_reduce_problems(path) == []
    path.write_text(json.dumps(_all_reduce_results(scale={64 << 10: 1.6})))  # one size slowed
    assert ["at 64 KiB the line misses" in problem for problem in all_reduce_problems(path)] == [
        True
    ]
    wrong = _all_reduce_results() | {"alpha_dominates": True}  # 80 us against 122 us of bytes
    path.write_text(json.dumps(wrong))
    assert all_reduce_problems(path) == [
        "results.json: 'alpha dominates' is True, its line says not"
    ]
    wrong = _all_reduce_results() | {"alpha": 40e-6}
    path.write_text(json.dumps(wrong))
    assert "alpha 4e-05, its rounds give" in all_reduce_problems(path)[0]
    path.write_text(json.dumps({"replicas": 1, "alpha": 1e-6}))
    assert all_reduce_problems(path) == ["results.json: a line fitted with one replica"]


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
    results = {"batch": 64, "sweep": [{"global_batch": b, "step_ms": 10.0} for b in (64, 128)]}
    (folder / "results.json").write_text(json.dumps({**results, "regime": "overhead-bound"}))
    path = folder / "conclusions.json"
    timing.record(timing.compare(_run("a", [10, 11, 12]), _run("b", [5, 6, 7])), path)

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
