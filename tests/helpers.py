"""Code the tests share: the course root, a fresh Python, a notebook run under nbval, the
conclusion checkers of course_tools.artifact_check as assertions, and the one way a test skips
for want of a program (`require_or_skip`, which COURSE_REQUIRE makes fail).

Simulated devices are fixed once TensorFlow starts in a process, so anything that depends on
the device count runs in a fresh Python subprocess (`run_python`, `run_notebook_under_nbval`).
Test modules import from here, never from each other or from conftest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course_tools import artifact_check, require

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


def assert_conclusions_consistent(path: Path) -> list[dict]:
    """Every recorded verdict at `path` agrees with its own samples (course_tools.artifact_check);
    returns the records."""
    found = artifact_check.conclusion_problems(path)
    assert not found, "\n".join(found)
    return json.loads(Path(path).read_text())


def assert_regime_consistent(path: Path) -> None:
    """The regime notebook 3 or 3b printed follows from the sweep it recorded at `path`."""
    found = artifact_check.regime_problems(path)
    assert not found, "\n".join(found)


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
    found = artifact_check.problems(copy)  # the files it promises, its printed conclusions
    assert not found, f"{notebook.name} with {devices} devices:\n" + "\n".join(found)
