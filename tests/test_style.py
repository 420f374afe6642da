"""Formatting and lint are habits: ruff (configured in pyproject.toml) over the whole repository,
notebooks included. Fix with `ruff format . && ruff check --fix .`."""

import subprocess
import sys

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


def test_docstring_examples_that_show_an_output_print_it():
    """The examples a student can paste as they are (no notebook variables) give what they show."""
    import doctest

    from course_utils import settings, tables, timing

    for target in (settings, tables, timing.compare):
        finder = doctest.DocTestFinder(recurse=False)
        for test in finder.find(target, globs=vars(timing) if target is timing.compare else None):
            result = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE).run(test)
            assert result.attempted and not result.failed, test.name
