"""A submission's work folder as a file system of its own, capped by the kernel.

Run as root, the grader mounts a tmpfs at the work folder with a size (`disk_mb`) and a number of
inodes (`INODES`: files, folders, links) the kernel enforces, unlinked-but-open files included:
a write past either fails with "No space left on device", in the submission's own cell. The
grader reads the folder after the run (the artifacts) and unmounts it, which frees everything at
once however many files the submission made. Its pages are memory, charged to the sandbox's
control group like any other (`cgroups`). As an ordinary user the folder is a plain folder and
the runner's sampled disk watch is all that caps it.

Example:

    from course_tools.grade.jail import workdir
    folder.mkdir()
    workdir.cap(folder, disk_mb=1024)  # True as root
    ...  # run the notebook in `folder`, copy its artifacts out
    workdir.release(folder)  # unmounted: empty again
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil

from course_tools.grade.jail import identity

#: The files, folders and links a work folder may hold (the course writes a few hundred).
INODES = 20_000
#: The mounts' source name, followed by the grader's pid (`stale` finds a dead grader's).
SOURCE = "course-grade"


def can_cap() -> bool:
    """Whether work folders get a capped file system here (root, with `mount`)."""
    return identity.privileged() and shutil.which("mount") is not None


def is_capped(folder: Path) -> bool:
    """Whether `folder` is a capped work folder (a mount point)."""
    return os.path.ismount(folder)


def _mounted() -> list[tuple[str, Path]]:
    """(source, mount point) of every mount this process sees."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
        found.append((fields[fields.index("-") + 2], Path(point)))
    return found


def stale() -> list[Path]:
    """Work folders still mounted by a grader that is gone (killed before its clean-up: a
    cancelled Slurm task); their memory stays taken until they are unmounted."""
    found = []
    for source, point in _mounted():
        prefix, _, pid = source.rpartition("-")
        if prefix == SOURCE and pid.isdigit() and not psutil.pid_exists(int(pid)):
            found.append(point)
    return found


def release_under(folder: Path) -> None:
    """Unmount every capped work folder under `folder`, so that it can be removed: a Slurm
    task's node-local folder, after its grader was killed before its own clean-up."""
    folder = Path(folder).resolve()
    for source, point in _mounted():
        if source.startswith(f"{SOURCE}-") and point.is_relative_to(folder):
            release(point)


def cap(folder: Path, disk_mb: int, inodes: int = INODES) -> bool:
    """Mount a tmpfs of `disk_mb` and `inodes` on the empty folder `folder` where the host allows
    it (`can_cap`); whether it did. `release` undoes it; the `stale` ones of dead graders are
    unmounted first."""
    if not can_cap():
        return False
    for left in stale():
        release(left)
    options = f"size={disk_mb}m,nr_inodes={inodes},mode=0700,nosuid,nodev"
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, f"{SOURCE}-{os.getpid()}", str(folder)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return True


def release(folder: Path) -> None:
    """Unmount a folder `cap` mounted (everything in it goes at once); nothing for another."""
    if is_capped(folder):
        # lazily: a process of the submission still dying must not keep it mounted
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, timeout=60)


@contextlib.contextmanager
def capped(folder: Path, disk_mb: int, inodes: int = INODES) -> Iterator[Path]:
    """Make `folder` (it must not exist) and `cap` it; on exit, `release` and remove it."""
    folder = Path(folder)
    folder.mkdir()
    try:
        cap(folder, disk_mb, inodes)
        yield folder
    finally:
        release(folder)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    # python -m course_tools.grade.jail.workdir FOLDER: `release_under` (a Slurm task's script)
    import sys

    release_under(Path(sys.argv[1]))
