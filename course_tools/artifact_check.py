"""Check what a notebook run left in its artifacts folder (.ci/device-sweep, and the tests'
nbval and browser runs): the files the notebook promises, and that every conclusion it printed
follows from the numbers it recorded beside it.

- `conclusions.json` (notebooks whose cells call `course_utils.timing.record`): each verdict's
  word and percentage are derived again here from its samples, with code of its own (all pairs of
  samples, numpy medians), so a sentence such as "slower" over rounds that overlap fails whoever
  wrote it.
- `results.json` of notebooks 3 and 3b: the regime they printed (overhead-, per-example-,
  memory-bandwidth- or compute-bound) is derived again from the batch sweep (and 3b's measured
  roofline) they recorded.

Example:
    $ .venv/bin/python -m course_tools.artifact_check notebooks/03_single_vs_distributed.ipynb
    notebooks/03_single_vs_distributed.ipynb: artifacts as promised
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from course_tools import output_check

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
#: Notebooks whose results.json holds a batch sweep and the regime printed from it.
REGIME_NOTEBOOKS = ("03_single_vs_distributed", "03b_where_time_goes")


def artifacts_folder(notebook: Path) -> Path:
    """The folder `notebook` writes into when it runs in its own folder."""
    return notebook.parent / "artifacts" / ARTIFACT_DIRS.get(notebook.stem, notebook.stem)


def expected_word(record: dict) -> str:
    """The word a verdict must use: "faster" when every sample of a is above every sample of b,
    "slower" when below, else "within noise" (as `course_utils.timing.compare` promises)."""
    a, b = record["a_samples"], record["b_samples"]
    if all(x > y for x, y in itertools.product(a, b)):
        return "faster"
    if all(y > x for x, y in itertools.product(a, b)):
        return "slower"
    return "within noise"


def conclusion_problems(path: Path) -> list[str]:
    """One line per recorded verdict at `path` that its own samples contradict."""
    records = json.loads(Path(path).read_text())
    if not records:
        return [f"{path.name} holds no conclusions"]
    found = []
    for record in records:
        where = f"{path.name}: {record['sentence']!r}"
        ratio = float(np.median(record["a_samples"]) / np.median(record["b_samples"]))
        word, sentence = expected_word(record), record["sentence"]
        claimed = re.findall(r"(\d+)% (faster|slower)", sentence)
        if not math.isclose(record["speed_ratio"], ratio, rel_tol=1e-9):
            found.append(f"{where}: speed ratio {record['speed_ratio']}, the samples give {ratio}")
        elif record["word"] != word:
            found.append(f"{where}: the samples say {word!r}")
        elif record["a"] not in sentence or record["b"] not in sentence:
            found.append(f"{where}: does not name {record['a']!r} and {record['b']!r}")
        elif word == "within noise" and ("within noise" not in sentence or claimed):
            found.append(f"{where}: the samples say 'within noise'")
        elif word != "within noise" and claimed != [(f"{100 * abs(ratio - 1):.0f}", word)]:
            found.append(f"{where}: the samples say {100 * abs(ratio - 1):.0f}% {word}")
    return found


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


def regime_problems(path: Path) -> list[str]:
    """The regime recorded at `path` if its own sweep says another one."""
    results = json.loads(Path(path).read_text())
    regime = expected_regime(results)
    if results["regime"] != regime:
        return [f"{path.name}: regime {results['regime']!r}, its sweep says {regime!r}"]
    return []


def problems(notebook: Path, since: float = 0.0) -> list[str]:
    """What is wrong with what a run of `notebook` (in its own folder) left in its artifacts
    folder: a promised file missing, or older than `since` (seconds since the epoch, when the
    run started: a file an earlier run left does not count), and conclusions or a regime that
    their own numbers contradict."""
    folder = artifacts_folder(notebook)
    found = []
    for pattern in EXPECTED_ARTIFACTS.get(notebook.stem, []):
        if not [p for p in folder.glob(pattern) if p.stat().st_mtime >= since]:
            found.append(f"{pattern} not written under {folder}")
    if (folder / "conclusions.json").exists():
        found += conclusion_problems(folder / "conclusions.json")
    if notebook.stem in REGIME_NOTEBOOKS and (folder / "results.json").exists():
        found += regime_problems(folder / "results.json")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="the notebooks that ran")
    parser.add_argument("--since", type=float, default=0.0, help="when the run started (epoch)")
    args = parser.parse_args(argv)
    found = {str(notebook): problems(notebook, since=args.since) for notebook in args.notebooks}
    return output_check.report(found, clean="artifacts as promised")


if __name__ == "__main__":
    sys.exit(main())
