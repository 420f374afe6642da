"""The notebook list, written once (course_tools/paths.py): found in the folders, in course order,
and the same list for every tool."""

from __future__ import annotations

from pathlib import Path

from helpers import ROOT

from course_tools import course_run, site
from course_tools.paths import course_notebooks, executed_notebooks

NAMES = [
    "notebooks/appendix_b_tpu.ipynb",
    "notebooks/04_multi_worker.ipynb",
    "notebooks/03b_profiling.ipynb",
    "notebooks/appendix_a_kubernetes.ipynb",
    "notebooks/01_fit.ipynb",
    "notebooks/03_single.ipynb",
    "solutions/05_svhn_solution.ipynb",
    "exercises/05_svhn_exercise.ipynb",
]


def course(root: Path) -> Path:
    for name in NAMES:
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text("{}")
    return root


def names(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_new_notebooks_join_in_course_order(tmp_path):
    """Lessons by number (03b after 03), the appendices after the last lesson, then the
    solution, then the exercise."""
    root = course(tmp_path)
    assert names(course_notebooks(root), root) == [
        "notebooks/01_fit.ipynb",
        "notebooks/03_single.ipynb",
        "notebooks/03b_profiling.ipynb",
        "notebooks/04_multi_worker.ipynb",
        "notebooks/appendix_a_kubernetes.ipynb",
        "notebooks/appendix_b_tpu.ipynb",
        "solutions/05_svhn_solution.ipynb",
        "exercises/05_svhn_exercise.ipynb",
    ]


def test_every_tool_takes_the_one_list(tmp_path):
    root = course(tmp_path)
    every = names(course_notebooks(root), root)
    assert names(executed_notebooks(root), root) == every[:-1]  # the handout stops at its stubs
    assert names(course_run.notebooks_to_run(root), root) == every[:-1]
    assert names(course_run.notebooks_to_run(root, ["appendix"]), root) == every[4:6]
    # The website: the exercise as handed out, then its solution.
    assert site.page_paths(root) == [*every[:-2], every[-1], every[-2]]


def test_the_course_itself():
    found = names(course_notebooks(), ROOT)
    assert found[0] == "notebooks/01_keras_fit_mnist.ipynb"
    assert [name.split("/")[0] for name in found[-2:]] == ["solutions", "exercises"]
    assert len(found) == len({Path(name).stem for name in found})  # one page per name
