"""pytest configuration: COURSE_REQUIRE checked at the start, the `python_subprocess` fixture,
the notebook runs the browser test makes instead, and the order and grouping of tests on the
pytest-xdist workers. Code the tests share lives in tests/helpers.py.
"""

from __future__ import annotations

import pytest
from helpers import run_python

from course_tools import browser, require


def pytest_configure(config: pytest.Config) -> None:
    """A COURSE_REQUIRE that names an unknown tool stops the run before any test."""
    try:
        require.required()
    except require.RequireError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture
def python_subprocess():
    """`python_subprocess(code, env)` -> CompletedProcess; a failure fails the test, with stderr."""

    def run(
        code: str,
        env: dict[str, str] | None = None,
        timeout: float = 300,
        *,
        expect_ok: bool = True,
    ):
        proc = run_python(code, env, timeout)
        if expect_ok:
            assert proc.returncode == 0, (
                f"subprocess failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    return run


#: The longest work first (measured with `make test ARGS=--durations=25`), so that the two
#: pytest-xdist workers finish together. A scheduling hint only: any order gives the same results.
LONGEST_FIRST = (
    "test_browser.py",  # the notebooks in JupyterLab, one after the other
    "test_slurm.py",  # notebook 4 under nbval, with a Slurm cluster up
    "test_grading.py",
    "test_slurm_grading.py",
    "03_single_vs_distributed",
    "test_parity.py",
    "05_svhn_solution",
    "01_keras_fit_mnist",
    "02_custom_loop_fashion_mnist",
    "test_bench.py",
    "test_cluster.py",
)


def _rank(item: pytest.Item) -> int:
    for rank, name in enumerate(LONGEST_FIRST):
        if name == item.path.name or name in item.name:
            return rank
    return len(LONGEST_FIRST)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Hand the longest work out first (see LONGEST_FIRST); skip the notebook runs the browser
    test makes instead, when it runs (`browser_runs_instead`)."""
    items.sort(key=_rank)
    browser_runs_instead(items)


def browser_runs_instead(items: list[pytest.Item]) -> None:
    """Skip the notebook runs marked `browser_runs_instead` (tests/test_notebooks.py) when this
    session also runs tests/test_browser.py, which makes them in JupyterLab, and a browser is
    there to run it. Otherwise (`pytest tests/test_notebooks.py`, or no Chromium) they run."""
    if browser.missing() or not any(item.path.name == "test_browser.py" for item in items):
        return
    skip = pytest.mark.skip(reason="run in JupyterLab by tests/test_browser.py in this session")
    for item in items:
        if item.get_closest_marker("browser_runs_instead"):
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown when xdist is off
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """How `make test` shares the tests between its pytest-xdist workers: each test file stays on
    one worker, so that its module fixtures (a graded batch, a Slurm cluster, a benchmark run)
    are built once, except the notebook runs, which are independent and spread over the workers.
    Work units go out in collection order (`--no-loadscope-reorder` in the Makefile).

    (xdist's own `--dist loadgroup` cannot do this with pytest 9.2: its group suffix is written to
    a node attribute that pytest no longer reads, a known pytest-xdist bug:
    https://github.com/pytest-dev/pytest-xdist/issues/1386. Overriding `_split_scope` is how
    xdist's own LoadFileScheduling subclasses LoadScopeScheduling; drop this hook for
    `--dist loadgroup` once that bug is fixed.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class FilesWithNotebooksSpread(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path.endswith("test_notebooks.py") else path

    return FilesWithNotebooksSpread(config, log)
