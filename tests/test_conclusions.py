"""Conclusions a notebook prints about speed must follow from the samples it recorded.

Notebooks compare runs with `course_utils.timing.compare` and append each verdict, with its
samples, to artifacts/<notebook>/conclusions.json (`timing.record`).
`assert_conclusions_consistent` re-derives every word and percentage from those samples with code
of its own (all pairs of samples, numpy medians), so a sentence such as "slower" over rounds that
overlap fails the test whoever wrote it.
tests/test_notebooks.py calls it right after each nbval run; the tests below check the checker.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from course_utils import timing


def _expected_word(record: dict) -> str:
    a, b = record["a_samples"], record["b_samples"]
    if all(x > y for x, y in itertools.product(a, b)):
        return "faster"
    if all(y > x for x, y in itertools.product(a, b)):
        return "slower"
    return "within noise"


def assert_conclusions_consistent(path: Path) -> list[dict]:
    """Every recorded verdict at `path` agrees with its own samples; returns the records."""
    records = json.loads(Path(path).read_text())
    assert records, f"{path} holds no conclusions"
    for record in records:
        where = f"{path.name}: {record['sentence']!r}"
        a, b = np.median(record["a_samples"]), np.median(record["b_samples"])
        ratio = a / b
        assert record["speed_ratio"] == pytest.approx(ratio, rel=1e-9), where
        word = _expected_word(record)
        assert record["word"] == word, f"{where}: the samples say {word!r}"
        sentence = record["sentence"]
        assert record["a"] in sentence and record["b"] in sentence, where
        claimed = re.findall(r"(\d+)% (faster|slower)", sentence)
        if word == "within noise":
            assert "within noise" in sentence and not claimed, where
        else:
            assert claimed == [(f"{100 * abs(ratio - 1):.0f}", word)], where
    return records


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
