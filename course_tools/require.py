"""COURSE_REQUIRE: the programs a run must have, so that nothing is skipped for want of them.

Without a program, the parts that need it are skipped with a one-line reason: the browser
(Chromium and Playwright: the JupyterLab test, the website's image check), the sandbox
(bubblewrap: the grader) and Slurm (the cluster and Slurm-grading tests). CI (.ci/run) installs
them all and sets `COURSE_REQUIRE=browser,sandbox,slurm`: there each of those skips becomes a
failure that says what is missing, so a run cannot pass with a part untested.

Example:
    >>> from course_tools.require import required
    >>> sorted(required({"COURSE_REQUIRE": "slurm, browser"}))
    ['browser', 'slurm']
    >>> required({})
    frozenset()
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VARIABLE = "COURSE_REQUIRE"
#: What COURSE_REQUIRE can name, and what each covers.
TOOLS = {
    "browser": "Chromium and Playwright (the JupyterLab test, the website's image check)",
    "sandbox": "bubblewrap (the grader's sandbox)",
    "slurm": "Slurm and munge (the cluster and Slurm-grading tests)",
}


class RequireError(ValueError):
    """COURSE_REQUIRE names something it does not know."""


def required(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The tools COURSE_REQUIRE (a comma list) names in `environ` (default: this process's)."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "")
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(names - set(TOOLS))
    if unknown:
        raise RequireError(
            f"{VARIABLE}={value!r}: unknown {', '.join(unknown)}; it takes a comma list of "
            f"{', '.join(TOOLS)} (e.g. {VARIABLE}={','.join(TOOLS)})"
        )
    return names


def is_required(tool: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether COURSE_REQUIRE names `tool` (one of TOOLS)."""
    if tool not in TOOLS:
        raise RequireError(f"{tool!r} is not one of {', '.join(TOOLS)}")
    return tool in required(environ)


def failure(tool: str, missing: str) -> str:
    """The message of a run that requires `tool` but found it missing (`missing` says why)."""
    return f"{VARIABLE} requires {tool}, which this machine lacks: {missing}"
