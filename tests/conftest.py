"""pytest configuration: the `python_subprocess` fixture and the order and grouping of tests on
the pytest-xdist workers. Code the tests share lives in tests/helpers.py.
"""

from __future__ import annotations

import pytest
from helpers import run_python


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


#: The longest work first (measured with `make test ARGS=--durations=25`), so that the two
#: pytest-xdist workers finish together. A scheduling hint only: any order gives the same results.
LONGEST_FIRST = (
    "test_browser.py",  # every notebook in JupyterLab, one after the other
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Hand the longest work out first (see LONGEST_FIRST)."""
    items.sort(key=_rank)


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
