"""`course doctor`: what the course will run on, and what to do about what blocks it.

It prints one line per check: versions (and whether the course is tested with them), whether this
Python's scripts folder is on PATH (`course` and `tensorboard` in a shell), devices, settings, data,
network, leftover cluster workers and the grading sandbox. Exit 0 when the course can run.

Example:
    $ course doctor
    python               3.11.2 (/home/me/course/.venv/bin/python)
    tensorflow           2.21.0
    ...
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor

import psutil

from course_tools import gpu
from course_utils import cluster

#: The versions the course is tested with: constraints.txt locally, Colab's runtime in CI.
TESTED = {"Python": ("3.10", "3.13"), "TensorFlow": ("2.20", "2.21"), "Keras": ("3.12", "3.15")}
PACKAGES = ("tensorflow", "keras", "tf_keras", "tensorflow-datasets", "tensorboard", "nbval")


def untested_versions(versions: dict[str, str]) -> list[str]:
    """The "name version" of each entry outside TESTED (compared on major.minor).

    >>> untested_versions({"Python": "3.13.1", "TensorFlow": "2.22.0", "Keras": "3.15.1"})
    ['TensorFlow 2.22.0']
    """

    def major_minor(version: str) -> tuple[int, int]:
        major, minor = version.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)

    return [
        f"{name} {version}"
        for name, version in versions.items()
        if not major_minor(TESTED[name][0]) <= major_minor(version) <= major_minor(TESTED[name][1])
    ]


def row(label: str, value: str) -> None:
    """One line of the report: a label column, then the value."""
    print(f"{label:<21} {value}" if len(label) >= 21 else f"{label:<21}{value}")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def check_versions() -> None:
    """Python and the packages, whether the course is tested with them, and PATH."""
    row("python", f"{platform.python_version()} ({sys.executable})")
    for package in PACKAGES:
        row(package, _version(package))
    versions = {
        "Python": platform.python_version(),
        "TensorFlow": _version("tensorflow"),
        "Keras": _version("keras"),
    }
    untested = untested_versions(versions)
    tested = ", ".join(f"{name} {low}-{high}" for name, (low, high) in TESTED.items())
    row("tested versions", f"NOT TESTED: {', '.join(untested)} ({tested})" if untested else "yes")
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")
    row("keras flavour", "tf_keras (TF_USE_LEGACY_KERAS=1)" if legacy else "Keras 3 (import keras)")
    scripts = os.path.dirname(sys.executable)
    if scripts in os.environ.get("PATH", "").split(os.pathsep):
        row("PATH", f"has {scripts}")
    else:
        # The course's Jupyter kernel adds it itself (its kernelspec, written by `make setup`).
        row("PATH", f"lacks {scripts}: activate the environment to use `course` in a shell")


def check_devices(settings) -> None:
    """Physical GPUs, the logical devices `setup()` made, and the COURSE_* settings."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    row("physical GPUs", f"{len(gpus)}" + (f" ({', '.join(g.name for g in gpus)})" if gpus else ""))
    gpu.report(row)  # TensorFlow's CUDA/cuDNN build, CUDA libraries, driver, what to do
    logical = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    row("logical devices", f"{len(logical)} ({', '.join(d.name for d in logical)})")
    row(
        "settings",
        f"COURSE_PROFILE={settings.profile} COURSE_DEVICES={settings.devices} "
        f"COURSE_DATA={settings.data}",
    )


def check_data(settings) -> list[str]:
    """Where each dataset would come from; returns those COURSE_DATA=tfds cannot have."""
    from course_utils import data

    addresses = [spec.download_address for spec in data.SPECS.values()]
    # Each check may wait NETWORK_TIMEOUT_S: in parallel.
    with ThreadPoolExecutor(len(addresses)) as pool:
        reachable = dict(zip(data.SPECS, pool.map(lambda a: data.can_reach(*a), addresses)))
    missing = []
    for name in data.SPECS:
        prepared = data.is_prepared(name)
        if settings.data == "synthetic":
            use = "synthetic (COURSE_DATA=synthetic)"
        elif prepared or reachable[name]:
            use = "real data"
        else:
            missing.append(name)
            tfds_only = "MISSING: COURSE_DATA=tfds will fail"
            use = "synthetic stand-in" if settings.data == "auto" else tfds_only
        disk = "prepared on disk" if prepared else "not on disk"
        server = "reachable" if reachable[name] else "unreachable"
        row(f"data {name}", f"{use} ({disk}, server {server})")
    row("network", "online" if any(reachable.values()) else "offline: no download server answered")
    return missing


def leftover_workers() -> list[psutil.Process]:
    """Cluster workers still running although the process that started them is gone (a crashed
    kernel, whose guard was killed too): found by cluster.MARKER in their environment, which
    LocalCluster sets, and notebook 4 on the workers it starts by hand."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ValueError):
            parent = proc.environ().get(cluster.MARKER)
            if parent and proc.status() != psutil.STATUS_ZOMBIE:
                if not psutil.pid_exists(int(parent)):
                    found.append(proc)
    return found


def check_processes() -> None:
    """Cluster workers left running, whether the grader's sandbox works here, and what its jail
    enforces."""
    from course_tools.grade.jail import sandbox

    leftovers = leftover_workers()
    pids = f": pids {[p.pid for p in leftovers]}" if leftovers else ""
    row("cluster workers", f"{len(leftovers)} left running{pids}")
    available, detail = sandbox.status()
    row("grading sandbox", detail if available else f"UNAVAILABLE: {detail}")
    if available:
        check_jail()


def check_jail() -> None:
    """What the grader's jail enforces on this machine, a row per limit."""
    from course_tools.grade.jail import limits

    for limit in limits.enforced():
        row(f"jail {limit.name}", limit.how if limit.held else f"NOT ENFORCED: {limit.how}")
    from course_tools.grade.core.plan import GradingSettings
    from course_tools.grade.jail import readable

    try:  # what `course grade` checks first, as root
        readable.check({**os.environ, **GradingSettings().env()})
        row("jail reads the course", "yes: the packages, Python and the datasets")
    except readable.Unreadable as exc:
        row("jail reads the course", f"NO: {exc}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`course doctor` has no options."""


def run(args: argparse.Namespace) -> int:
    """Print every check; exit 0 when the course can run, 1 when something blocks it."""
    from course_utils import setup

    settings = setup(verbose=False)
    check_versions()
    check_devices(settings)
    missing = check_data(settings)
    check_processes()
    return 1 if settings.data == "tfds" and missing else 0
