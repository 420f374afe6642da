"""COURSE_REQUIRE turns the skips for want of a program into failures, and the notebook runs the
browser test replaces are skipped only when the browser test runs in the same session.

Each case runs pytest in a subprocess, as a developer or CI would: on a PATH without bubblewrap
or Slurm, with and without the switch.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, require_or_skip

from course_tools import browser, require

#: Three tests, each needing one program, skipped the way the suite skips them.
NEEDS = """
import slurm
from helpers import require_or_skip

from course_tools import browser
from course_tools.grade.jail import sandbox


def test_needs_the_sandbox():
    available, detail = sandbox.status()
    require_or_skip("sandbox", "" if available else f"no grading sandbox: {detail}")


def test_needs_slurm():
    require_or_skip("slurm", slurm.missing_programs())


def test_needs_a_browser():
    require_or_skip("browser", browser.missing("/nonexistent/chromium"))
"""


def pytest_run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in a fresh process with `env` (COURSE_REQUIRE unset unless given)."""
    base = {k: v for k, v in os.environ.items() if k != require.VARIABLE}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args]
    return subprocess.run(
        command, env={**base, **env}, cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def without_the_programs(tmp_path) -> dict[str, str]:
    """The environment of a machine without bubblewrap or Slurm: an empty PATH, the tests'
    helpers importable; and the three tests above in tmp_path."""
    (tmp_path / "test_needs.py").write_text(textwrap.dedent(NEEDS))
    (tmp_path / "bin").mkdir()
    return {"PATH": str(tmp_path / "bin"), "PYTHONPATH": str(ROOT / "tests")}


def test_without_the_switch_a_missing_program_skips_with_the_reason(tmp_path, without_the_programs):
    proc = pytest_run(["-rs", "test_needs.py"], without_the_programs, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "3 skipped" in proc.stdout
    assert "bubblewrap (bwrap) is not installed" in proc.stdout
    assert "Slurm is not installed" in proc.stdout


def test_the_switch_fails_the_run_naming_what_is_missing(tmp_path, without_the_programs):
    env = {**without_the_programs, "COURSE_REQUIRE": "browser,sandbox,slurm"}
    proc = pytest_run(["test_needs.py"], env, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "3 failed" in proc.stdout
    for tool, why in (
        ("sandbox", "no grading sandbox: bubblewrap (bwrap) is not installed"),
        ("slurm", "Slurm is not installed (no "),
        ("browser", "Chromium not found at /nonexistent/chromium"),
    ):
        assert f"COURSE_REQUIRE requires {tool}, which this machine lacks: {why}" in proc.stdout


def test_the_switch_fails_only_what_it_names(tmp_path, without_the_programs):
    env = {**without_the_programs, "COURSE_REQUIRE": "slurm"}
    proc = pytest_run(["test_needs.py"], env, tmp_path)
    assert proc.returncode == 1 and "1 failed, 2 skipped" in proc.stdout, proc.stdout[-3000:]


def test_an_unknown_name_stops_the_suite_before_any_test():
    proc = pytest_run(
        ["--collect-only", "-q", "tests/test_require.py"], {"COURSE_REQUIRE": "gpu"}, ROOT
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (
        "COURSE_REQUIRE='gpu': unknown gpu; it takes a comma list of browser, sandbox, slurm"
        in (proc.stderr)
    )


def test_the_switch_reads_a_comma_list():
    assert require.required({"COURSE_REQUIRE": " browser, slurm ,"}) == {"browser", "slurm"}
    assert require.required({"COURSE_REQUIRE": ""}) == frozenset()
    assert require.is_required("sandbox", {"COURSE_REQUIRE": "browser,sandbox,slurm"})
    with pytest.raises(require.RequireError, match="'gpus' is not one of browser, sandbox, slurm"):
        require.is_required("gpus", {})


def skipped_runs(*test_files: str) -> dict[str, int]:
    """What a session of `test_files` would skip, {reason: how many} (pytest --setup-plan:
    nothing runs)."""
    proc = pytest_run(["--setup-plan", "-q", "-rs", *test_files], {}, ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    skipped: dict[str, int] = {}
    for count, reason in re.findall(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", proc.stdout, re.M):
        skipped[reason] = skipped.get(reason, 0) + int(count)
    return skipped


def test_pytest_of_the_notebook_harness_alone_runs_every_notebook():
    assert skipped_runs("tests/test_notebooks.py") == {}


def test_with_the_browser_test_in_the_session_its_runs_are_not_made_twice():
    from test_notebooks import BROWSER_RUNS_INSTEAD

    require_or_skip("browser", browser.missing())  # without a browser no run is replaced
    skipped = skipped_runs("tests/test_notebooks.py", "tests/test_browser.py")
    reason = "run in JupyterLab by tests/test_browser.py in this session"
    assert skipped == {reason: len(BROWSER_RUNS_INSTEAD)}


def test_ci_requires_every_tool_the_switch_knows():
    """.ci/run installs the programs, so nothing may be skipped there for want of one."""
    exported = re.findall(
        r"^export COURSE_REQUIRE=(\S+)$", (ROOT / ".ci" / "run").read_text(), re.M
    )
    assert exported and set(exported[0].split(",")) == set(require.TOOLS)
    assert "COURSE_REQUIRE_BROWSER" not in (ROOT / ".ci" / "run").read_text()
