"""Formatting and lint are habits: ruff (configured in pyproject.toml) over the whole repository,
notebooks included. Fix with `ruff format . && ruff check --fix .`."""

import doctest
import importlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ruff", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    proc = ruff("check", "--output-format", "concise", ".")
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout[-4000:]}"


def test_ruff_format_is_clean():
    proc = ruff("format", "--check", ".")
    assert proc.returncode == 0, f"ruff format would change these files:\n{proc.stdout[-4000:]}"


def _modules_with_examples() -> list[str]:
    """Every module of both packages whose source holds a `>>>` example."""
    names = []
    for package in ("course_utils", "course_tools"):
        for path in sorted((ROOT / package).glob("*.py")):
            if ">>>" in path.read_text():
                names.append(package if path.stem == "__init__" else f"{package}.{path.stem}")
    return names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_every_docstring_example_runs_and_prints_what_it_shows(name):
    """A `>>>` example is a doctest, run here: what it shows is what it prints. Code that cannot
    run on its own (a notebook's variables, a cluster, a download) is written without prompts."""
    module = importlib.import_module(name)
    source = Path(module.__file__).read_text()
    assert "doctest: +SKIP" not in source, f"{name}: write a skipped example as plain code"
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    prompts = sum(line.lstrip().startswith(">>>") for line in source.splitlines())
    found = sum(len(t.examples) for t in tests)
    assert found == prompts, f"{name}: {prompts - found} `>>>` outside any docstring doctest finds"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in tests:
        report = io.StringIO()
        result = runner.run(test, out=report.write)
        assert not result.failed, f"{test.name}:\n{report.getvalue()}"
