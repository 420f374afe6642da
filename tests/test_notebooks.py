"""The notebook harness: every course notebook re-executed by nbval on simulated devices.

Each case copies one notebook into its own temporary folder (so that two cases can run side by side
under pytest-xdist without sharing artifacts), runs `pytest --nbval-lax` on the copy in a
subprocess with COURSE_PROFILE=quick and COURSE_DEVICES=N (devices are fixed per kernel, and the
kernel inherits the environment), then checks the files the notebook promises to write under
artifacts/. The course package comes from the installed (editable) checkout.

When the same session runs tests/test_browser.py (and Chromium is there for it), that test runs
the notebooks in JupyterLab instead of some of these runs (BROWSER_RUNS_INSTEAD); they are skipped
here with that reason (tests/conftest.py). `pytest tests/test_notebooks.py` alone runs them all.

Run one notebook:  pytest tests/test_notebooks.py -k 01_keras
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_notebook_under_nbval

from course_tools.paths import course_notebooks

#: Which device counts each notebook runs with here, and why. Every extra count costs a full run,
#: so a count is here only when it takes the notebook down a path the others do not. CI's device
#: sweep (.ci/device-sweep) then runs every notebook at every count from 1 to 8 with the same
#: checks (course_tools.artifact_check, course_tools.output_check): one device (a student with one
#: GPU: global batch = per-replica batch, every printed comparison still reading right) is
#: checked there, at no cost to `make test`; `.ci/device-sweep 1` runs it alone.
DEVICE_COUNTS: dict[str, tuple[int, ...]] = {
    # 4: more replicas than cores, so the batch split and the checkpoint steps are not a 2-only
    #    case. 2 (the default on a laptop) takes no path that 4 does not; `make course` and CI's
    #    Colab-stack run execute every notebook with 2.
    "01_keras_fit_mnist": (4,),
    # Loss scaling: the reduce_mean mistake is N times too large and the optimizer-not-built
    # failure needs 2+ replicas; both show with 4 (with 1, in the sweep, neither does).
    "02_custom_loop_fashion_mnist": (4,),
    # Timings: one run. Its code path does not change with the count (run by hand with 1, 2, 3,
    # 5 and 8); `course bench` covers several replica counts, each in a fresh process.
    "03_single_vs_distributed": (2,),
    # 3: more replicas than cores, sharing the processor whose limits the roofline draws.
    "03b_where_time_goes": (3,),
    # 3: the all-reduce a real ring over more replicas than cores (with 1, in the sweep, nothing
    #    is sent and the notebook says so).
    "03c_allreduce_and_profile": (3,),
    # Each worker process has one device whatever COURSE_DEVICES says: one run, made by
    # tests/test_slurm.py with its test Slurm cluster up (when the machine has Slurm), so that the
    # notebook's Slurm cell submits a real job instead of skipping.
    "04_multi_worker": (),
    # Every task of its clusters is a process with one CPU device of its own (LocalCluster drops
    # COURSE_DEVICES); the kernel only reads logs: one run, with the cheapest kernel.
    "appendix_a_parameter_server_and_backup": (1,),
    # Its trials measure the bugs at the kernel's count, and its controls must never fail: 3,
    #    more replicas than cores, as for the lessons it comes from (1 and 2 in the sweep).
    "appendix_b_bugs_under_a_strategy": (3,),
    # Notebooks 1 and 2's second pass: the all-reduce read from the log needs 2+ replicas, and the
    #    loss table's uneven slices and the loops' timing change with the count: 3, more replicas
    #    than cores, as for the lessons it comes from (1, with no all-reduce, in the sweep).
    "appendix_c_more_on_fit_and_custom_loops": (3,),
    # The grader's checks depend on the replica count through GLOBAL_BATCH only, and
    # tests/test_grading.py grades the solution once more through the grader.
    "05_svhn_solution": (2,),
    # Its stubs raise before any device-dependent code.
    "05_svhn_exercise": (2,),
}
#: Runs that tests/test_browser.py makes instead when the session runs it and it can (Chromium
#: and Playwright present): it runs every notebook but those in its NOT_IN_THE_BROWSER in
#: JupyterLab with 3 devices (more replicas than cores, as 4 does) and checks the same (no error
#: outside `raises-exception` cells, the artifacts, the conclusions) and more. Otherwise they run
#: here, so that no notebook goes unchecked.
BROWSER_RUNS_INSTEAD = {
    ("01_keras_fit_mnist", 4),
    ("02_custom_loop_fashion_mnist", 4),
    ("03_single_vs_distributed", 2),
    ("03b_where_time_goes", 3),
    ("03c_allreduce_and_profile", 3),
    ("appendix_b_bugs_under_a_strategy", 3),
    ("appendix_c_more_on_fit_and_custom_loops", 3),
    ("05_svhn_solution", 2),
    ("05_svhn_exercise", 2),
}


def _cases():
    for path in course_notebooks():
        for devices in DEVICE_COUNTS.get(path.stem, (2,)):
            instead = (path.stem, devices) in BROWSER_RUNS_INSTEAD
            marks = [pytest.mark.browser_runs_instead] if instead else []
            yield pytest.param(path, devices, id=f"{path.stem}-{devices}dev", marks=marks)


def test_every_notebook_has_a_device_plan():
    notebooks = {path.stem for path in course_notebooks()}
    assert notebooks == set(DEVICE_COUNTS), "add new notebooks to DEVICE_COUNTS, with the reason"


@pytest.mark.slow
@pytest.mark.parametrize("notebook, devices", list(_cases()))
def test_notebook_runs_under_nbval(notebook: Path, devices: int, tmp_path: Path):
    run_notebook_under_nbval(notebook, devices, tmp_path)
