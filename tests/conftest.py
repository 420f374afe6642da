"""Shared test helpers.

Simulated devices are fixed once TensorFlow starts in a process, so anything that depends on
the device count runs in a fresh Python subprocess (`run_python`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.fixture
def python_subprocess():
    """`python_subprocess(code, env)` -> CompletedProcess; a failure fails the test, with stderr."""

    def run(
        code: str, env: dict[str, str] | None = None, timeout: float = 300, expect_ok: bool = True
    ):
        proc = run_python(code, env, timeout)
        if expect_ok:
            assert proc.returncode == 0, (
                f"subprocess failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    return run
