"""Conclusions a notebook prints about speed must follow from the samples it recorded.

Notebooks compare runs with `course_utils.timing.compare` and append each verdict, with its
samples, to artifacts/<notebook>/conclusions.json (`timing.record`).
`assert_conclusions_consistent` re-derives every word and percentage from those samples with code
of its own (all pairs of samples, numpy medians), so a sentence such as "slower" over rounds that
overlap fails the test whoever wrote it.
`assert_regime_consistent` does the same for notebooks 3 and 3b's verdict on where a step's time
goes (overhead- or per-example-bound; 3b: overhead-, memory-bandwidth- or compute-bound), from
the batch sweep (and 3b's measured roofline) in their results.json.
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

from course_tools.artifact_check import expected_regime
from course_utils import timing


@pytest.mark.parametrize(
    "sweep, roofline, regime",
    [
        ([(64, 10.0), (96, 10.2), (128, 10.5), (192, 10.9)], {}, "overhead-bound"),
        ([(64, 10.0), (96, 14.8), (128, 19.5), (192, 29.1)], {}, "per-example-bound"),
        # notebook 3b: the same sweep, and the roof above the point (ridge 150/10 = 15 FLOP/B)
        (
            [(64, 10.0), (96, 14.8), (128, 19.5), (192, 29.1)],
            {"intensity": 8.0},
            "memory-bandwidth-bound",
        ),
        ([(64, 10.0), (96, 14.8), (128, 19.5), (192, 29.1)], {"intensity": 20.0}, "compute-bound"),
        ([(64, 10.0), (96, 10.2), (128, 10.5), (192, 10.9)], {"intensity": 20.0}, "overhead-bound"),
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
