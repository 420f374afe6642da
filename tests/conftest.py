"""pytest configuration: COURSE_REQUIRE checked at the start, the `python_subprocess` fixture,
the notebook runs the browser test makes instead, and the order and grouping of tests on the
pytest-xdist workers. Code the tests share lives in tests/helpers.py.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

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


#: The work units (see `work_unit`), longest first (measured with `make test ARGS=--durations=25`),
#: so that the pytest-xdist workers finish together: a file's name, a unit of a split file
#: ("file::unit"), or a notebook of tests/test_notebooks.py. A scheduling hint only: any order
#: gives the same results.
LONGEST_FIRST = (
    "test_browser.py::second half",  # notebooks in JupyterLab, one after the other
    "test_browser.py",
    "test_slurm_grading.py",  # a batch graded locally, then on Slurm with a kill and a re-run
    "test_grading.py",  # the batch of mistakes and hostile submissions, the limits
    "test_slurm.py",  # notebook 4 under nbval, with a Slurm cluster up
    "test_grading.py::attacks",
    "test_grading.py::red4",
    "03_single_vs_distributed",
    "test_parity.py",
    "05_svhn_solution",
    "01_keras_fit_mnist",
    "02_custom_loop_fashion_mnist",
    "test_bench.py",
    "test_cluster.py",
)

#: tests/test_browser.py's notebooks in two work units, each with a JupyterLab and a Chromium of its
#: own on the worker that takes it: one after the other (9 runs of 50-72 s) they were the suite's
#: longest chain. These notebooks make the unit "test_browser.py::second half"; the others, and
#: the module's other tests, "test_browser.py".
BROWSER_SECOND_HALF = (
    "02_custom_loop_fashion_mnist",
    "03b_where_time_goes",
    "appendix_b_bugs_under_a_strategy",
    "05_svhn_solution",
)
#: Files whose tests that use one of these module fixtures make a work unit of their own per
#: fixture ("file::fixture"), so that independent graded batches run on different workers; each
#: fixture is still built once, where its tests run.
FIXTURE_UNITS = {"test_grading.py": ("attacks", "red4")}
HERE = Path(__file__).resolve().parent


@functools.cache
def _fixture_of_test(file: str) -> dict[str, str]:
    """{test function: the first of FIXTURE_UNITS[file] among its arguments} for `file`."""
    tree = ast.parse((HERE / file).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            names = [arg.arg for arg in node.args.args]
            fixture = next((f for f in FIXTURE_UNITS[file] if f in names), None)
            if fixture:
                found[node.name] = fixture
    return found


def work_unit(nodeid: str) -> str:
    """The work unit a test belongs to, which one worker runs: its file (so that a module fixture
    is built once), but each notebook run of tests/test_notebooks.py alone, tests/test_browser.py
    in two halves, and the files of FIXTURE_UNITS in a unit per fixture and one for the rest."""
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    if file == "test_notebooks.py":
        return nodeid
    if file == "test_browser.py" and any(f"[{n}]" in rest for n in BROWSER_SECOND_HALF):
        return f"{path}::second half"
    if file in FIXTURE_UNITS:
        fixture = _fixture_of_test(file).get(rest.split("[", 1)[0])
        if fixture:
            return f"{path}::{fixture}"
    return path


def _rank(item: pytest.Item) -> int:
    unit = work_unit(item.nodeid).rsplit("/", 1)[-1]  # "file" or "file::unit"
    notebook_run = item.path.name == "test_notebooks.py"
    for rank, name in enumerate(LONGEST_FIRST):
        if name == unit or (notebook_run and name in item.name):
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
    """How `make test` shares the tests between its pytest-xdist workers: each work unit
    (`work_unit`: a test file, or a part of one whose module fixtures no other part uses) stays on
    one worker, so that its module fixtures (a graded batch, a Slurm cluster, a benchmark run)
    are built once; the notebook runs are independent and spread over the workers. Work units go
    out in collection order (`--no-loadscope-reorder` in the Makefile).

    (xdist's own `--dist loadgroup` cannot do this with pytest 9.2: its group suffix is written to
    a node attribute that pytest no longer reads, a known pytest-xdist bug:
    https://github.com/pytest-dev/pytest-xdist/issues/1386. Overriding `_split_scope` is how
    xdist's own LoadFileScheduling subclasses LoadScopeScheduling; drop this hook for
    `--dist loadgroup` once that bug is fixed.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class FilesWithNotebooksSpread(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FilesWithNotebooksSpread(config, log)
