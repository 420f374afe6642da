"""Code the tests share: the course root, a fresh Python, a notebook run under nbval, the
checkers that re-derive the conclusions a notebook printed from the numbers it recorded, and the
one way a test skips for want of a program (`require_or_skip`, which COURSE_REQUIRE makes fail).

Simulated devices are fixed once TensorFlow starts in a process, so anything that depends on
the device count runs in a fresh Python subprocess (`run_python`, `run_notebook_under_nbval`).
Test modules import from here, never from each other or from conftest.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from course_tools import require

ROOT = Path(__file__).resolve().parent.parent


def require_or_skip(tool: str, missing: str | None) -> None:
    """Skip the calling test or fixture because `missing` says a program is missing ("" or None:
    nothing is, go on), unless COURSE_REQUIRE names `tool` (one of browser, sandbox, slurm):
    then fail it with that message, so a run that must test `tool` cannot pass without it."""
    if not missing:
        return
    if require.is_required(tool):
        pytest.fail(require.failure(tool, missing), pytrace=False)
    pytest.skip(missing)


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with the course environment; return the process."""
    full_env = {**os.environ, "COURSE_PROFILE": "quick", **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


def expected_regime(results: dict) -> str:
    """The verdict notebooks 3 and 3b give for a sweep: a line fitted through (batch, ms/step)
    decides overhead-bound (fixed part over half a step); otherwise notebook 3 says
    per-example-bound, and notebook 3b (which records the step's intensity and the machine's
    measured peak and bandwidth) names the roof above the point."""
    batches = [point["global_batch"] for point in results["sweep"]]
    step_ms = [point["step_ms"] for point in results["sweep"]]
    per_example_ms, fixed_ms = np.polyfit(batches, step_ms, 1)
    fixed_share = min(max(fixed_ms / step_ms[batches.index(results["batch"])], 0.0), 1.0)
    if fixed_share > 0.5 or per_example_ms <= 0:
        return "overhead-bound"
    if "intensity" not in results:
        return "per-example-bound"
    ridge = results["peak_flops"] / results["memory_bandwidth"]
    return "memory-bandwidth-bound" if results["intensity"] < ridge else "compute-bound"


def assert_regime_consistent(path: Path) -> None:
    """The regime notebook 3 printed follows from the sweep it recorded at `path`."""
    results = json.loads(Path(path).read_text())
    assert results["regime"] == expected_regime(results), results


#: Where a notebook writes, under artifacts/ next to it (default: its own stem).
ARTIFACT_DIRS = {"05_svhn_solution": "05_svhn", "05_svhn_exercise": "05_svhn"}
#: Files each notebook must leave in its artifacts folder (glob patterns).
EXPECTED_ARTIFACTS: dict[str, list[str]] = {
    "01_keras_fit_mnist": [
        "checkpoints/ckpt_1.weights.h5",
        "mnist_model.keras",
        "logs/train/events.out.tfevents.*",
        "fault_tolerance/*/ckpt_*.keras",
        "learning_curves.png",
    ],
    "02_custom_loop_fashion_mnist": [
        "checkpoints/checkpoint",
        "checkpoints/ckpt-*.index",
        "checkpoints/ckpt-*.data-*",
        "learning_curves.png",
        "conclusions.json",
    ],
    "03_single_vs_distributed": ["results.json", "conclusions.json"],
    "03b_where_time_goes": ["results.json", "conclusions.json"],
    "05_svhn_solution": [
        "fit_model.keras",
        "custom_model.keras",
        "single_model.keras",
        "results.json",
        "fit_ckpt/ckpt_*.weights.h5",
        "custom_ckpt/ckpt-*.index",
    ],
}
#: nbval's limit for one cell of a notebook run.
NBVAL_CELL_TIMEOUT_S = 300


def run_notebook_under_nbval(notebook: Path, devices: int, tmp_path: Path) -> None:
    """Copy `notebook` into `tmp_path`, run it under nbval with COURSE_PROFILE=quick and
    COURSE_DEVICES=`devices` in a subprocess, then check the artifacts and printed conclusions."""
    copy = tmp_path / notebook.parent.name / notebook.name
    copy.parent.mkdir()
    shutil.copy(notebook, copy)
    env = {**os.environ, "COURSE_PROFILE": "quick", "COURSE_DEVICES": str(devices)}
    env.setdefault("COURSE_DATA", "auto")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={NBVAL_CELL_TIMEOUT_S}",
        str(copy),
    ]
    proc = subprocess.run(
        command, env=env, cwd=copy.parent, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, (
        f"nbval failed for {notebook.name} with {devices} devices:\n"
        f"{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    artifacts = copy.parent / "artifacts" / ARTIFACT_DIRS.get(notebook.stem, notebook.stem)
    expected = EXPECTED_ARTIFACTS.get(notebook.stem, [])
    missing = [p for p in expected if not list(artifacts.glob(p))]
    assert not missing, f"{notebook.name} did not write {missing} under {artifacts}"
    if (artifacts / "conclusions.json").exists():  # printed conclusions vs their own samples
        assert_conclusions_consistent(artifacts / "conclusions.json")
    if notebook.stem in ("03_single_vs_distributed", "03b_where_time_goes"):  # regime vs sweep
        assert_regime_consistent(artifacts / "results.json")
