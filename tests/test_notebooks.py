"""The notebook harness: every course notebook re-executed by nbval on simulated devices.

Each case runs `pytest --nbval-lax` on one notebook in a subprocess with COURSE_PROFILE=quick and
COURSE_DEVICES=N (devices are fixed per kernel, and the kernel inherits the environment), then
checks the files the notebook promises to write under artifacts/<notebook>/.

Run one notebook:  pytest tests/test_notebooks.py -k 01_keras
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

FOLDERS = ("notebooks", "solutions", "exercises")
DEVICE_COUNTS = (2, 4)
#: Notebooks whose behaviour does not depend on COURSE_DEVICES run once (multi-worker: 1 device per worker).
#: The exercise's stubs raise before any device-dependent code, so one count is enough there too.
RUN_ONCE = {"04_multi_worker": 2, "05_svhn_exercise": 2}
CELL_TIMEOUT_S = 300

#: Where a notebook writes, under <folder>/artifacts/ (default: its own stem).
ARTIFACT_DIRS = {"05_svhn_solution": "05_svhn", "05_svhn_exercise": "05_svhn"}
#: Files each notebook must leave in its artifacts folder (glob patterns).
EXPECTED_ARTIFACTS: dict[str, list[str]] = {
    "01_keras_fit_mnist": [
        "checkpoints/ckpt_1.weights.h5",
        "mnist_model.keras",
        "logs/train/events.out.tfevents.*",
        "fault_tolerance/ckpt_*.keras",
        "learning_curves.png",
    ],
    "02_custom_loop_fashion_mnist": [
        "checkpoints/checkpoint",
        "checkpoints/ckpt-*.index",
        "checkpoints/ckpt-*.data-*",
        "learning_curves.png",
    ],
    "03_single_vs_distributed": ["core_comparison.png", "replica_sweep.png", "results.json"],
    "05_svhn_solution": [
        "fit_model.keras",
        "custom_model.keras",
        "single_model.keras",
        "results.json",
        "fit_ckpt/ckpt_*.weights.h5",
        "custom_ckpt/ckpt-*.index",
    ],
}


def _cases():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            counts = [RUN_ONCE[path.stem]] if path.stem in RUN_ONCE else DEVICE_COUNTS
            for devices in counts:
                yield pytest.param(path, devices, id=f"{path.stem}-{devices}dev")


@pytest.mark.slow
@pytest.mark.parametrize("notebook, devices", list(_cases()))
def test_notebook_runs_under_nbval(notebook: Path, devices: int):
    artifacts = notebook.parent / "artifacts" / ARTIFACT_DIRS.get(notebook.stem, notebook.stem)
    shutil.rmtree(artifacts, ignore_errors=True)
    env = {**os.environ, "COURSE_PROFILE": "quick", "COURSE_DEVICES": str(devices)}
    env.setdefault("COURSE_DATA", "auto")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
        str(notebook),
    ]
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (
        f"nbval failed for {notebook.name} with {devices} devices:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    missing = [p for p in EXPECTED_ARTIFACTS.get(notebook.stem, []) if not list(artifacts.glob(p))]
    assert not missing, f"{notebook.name} did not write {missing} under {artifacts}"
