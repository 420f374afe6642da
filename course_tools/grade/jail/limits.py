"""Which of the jail's limits the kernel enforces on this host, and what a run met of them.

`enforced()` lists each limit with how this host enforces it, or why it cannot (then the runner's
sampled watch is the only line: `course_tools.processes.Watchdog` for memory, the runner's disk
watch for the work folder); `course doctor` prints the list, `course grade` prints what is missing
before it starts. `cgroup` makes a run's control group where the host allows one, `explain` turns
what the kernel did to a run (an out-of-memory kill, refused threads) into the grade's reason.

Example:

    from course_tools.grade.jail import limits
    for row in limits.enforced():
        print(row.name, row.how if row.held else f"NOT ENFORCED: {row.how}")
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from course_tools import processes
from course_tools.grade.jail import cgroups, identity, memory_folders, sandbox, workdir


@dataclass(frozen=True)
class Limit:
    """One of the jail's limits: whether the kernel enforces it here, and how (or why not)."""

    name: str
    held: bool
    how: str


@cache
def _cgroup_missing() -> str:
    return cgroups.why_not()


@cache
def memory_folders_capped() -> bool:
    """Whether a sandbox's /tmp is capped in files here (`memory_folders`): one sandbox run that
    counts its inodes."""
    probe = [sys.executable, "-c", "import os; print(os.statvfs('/tmp').f_files)"]
    try:
        home = Path(tempfile.gettempdir())
        done = subprocess.run(
            sandbox.wrap(probe),
            env=sandbox.kernel_env(dict(os.environ), home=home),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError, sandbox.SandboxUnavailable):
        return False
    return done.stdout.strip() == str(memory_folders.INODES)


def enforced() -> list[Limit]:
    """The jail's limits on this host, each with how it is enforced or why it is not."""
    root = identity.privileged()
    absent = identity.missing() if root else ""
    own_uid = root and not absent
    if own_uid:
        user = Limit("user", held=True, how="a uid of its own per sandbox, no capabilities")
    elif root:
        user = Limit("user", held=False, how=f"root, but {absent} missing: the code runs as root")
    else:
        how = "your own uid (user namespace): reads what you may read in the folders bound in"
        user = Limit("user", held=False, how=how)
    has_prlimit = shutil.which("prlimit") is not None
    cores = "off: RLIMIT_CORE 0, core_pattern read-only" if has_prlimit else "prlimit missing"
    cgroup_missing = _cgroup_missing()
    if not cgroup_missing:
        memory = Limit("memory", held=True, how="cgroup: memfd, tmpfs, shm, page cache counted")
        tasks = Limit("processes", held=True, how=f"cgroup pids.max {sandbox.NPROC}")
    else:
        how = (
            "resident memory and the memfds the kernel's processes hold, summed every 0.2 s "
            "(tmpfs files, a memfd mapped then closed, socket buffers, the kernel's memory for "
            "mappings unseen; a kernel that dies beside others is graded again alone; the kernel "
            f"stopped past {processes.MAX_DESCRIPTORS:,} descriptors, which each look reads): "
            f"{cgroup_missing}"
        )
        memory = Limit("memory", held=False, how=how)
        if root and not absent:
            how = f"RLIMIT_NPROC {sandbox.NPROC} of the sandbox's own uid"
            tasks = Limit("processes", held=has_prlimit, how=how if has_prlimit else "no prlimit")
        elif not root and memory_folders_capped():
            # the step's user namespace (`memory_folders`) counts the sandbox's tasks from zero
            how = (
                f"RLIMIT_NPROC {sandbox.NPROC} per sandbox, counted in a user namespace of its "
                f"own: --jobs N sandboxes may hold N x {sandbox.NPROC} tasks of your account "
                "together, a sum only your own RLIMIT_NPROC (ulimit -u) caps"
            )
            tasks = Limit("processes", held=True, how=how)
        else:
            how = f"RLIMIT_NPROC: your tasks now + {sandbox.NPROC} (it counts all of yours)"
            tasks = Limit("processes", held=has_prlimit, how=how if has_prlimit else "no prlimit")
    if workdir.can_cap():
        how = f"a tmpfs: the disk limit, {workdir.INODES:,} inodes, unlinked files counted"
        folder = Limit("work folder", held=True, how=how)
    else:
        how = (
            "its files and those the kernel's processes deleted while open, summed every 0.5 s "
            "(a capped file system needs root)"
        )
        folder = Limit("work folder", held=False, how=how)
    if own_uid:
        how = "those of the sandbox's own uid (epoll watches, message queues, pipe pages, ...)"
        quotas = Limit("per-user quotas", held=True, how=how)
    else:
        how = (
            "your account's (epoll watches, message-queue bytes, pending signals, pipe pages, "
            "inotify): a submission can use one up while it runs; if that kills the grader, the "
            "batch goes on and the submission running alone is scored 0 (unless the quota stays "
            "used up: a grader error; on Slurm always a grader error)"
        )
        quotas = Limit("per-user quotas", held=False, how=how)
    if memory_folders_capped():
        how = (
            f"a tmpfs each of {memory_folders.INODES:,} inodes and its size, unlinked files counted"
        )
        in_memory = Limit("/tmp and /dev/shm", held=True, how=how)
    else:
        how = (
            f"bytes only ({sandbox.TMP_MB} and {sandbox.SHM_MB} MB): this kernel refused the "
            "mount that caps their files (as an ordinary user, in a user namespace of the "
            "sandbox's own); the kernel's memory for each file is not counted"
        )
        in_memory = Limit("/tmp and /dev/shm", held=False, how=how)
    return [
        user,
        quotas,
        Limit("host knobs", held=True, how="/proc/sys and /sys read-only (bubblewrap)"),
        Limit("core dumps", held=has_prlimit, how=cores),
        memory,
        tasks,
        folder,
        in_memory,
    ]


def missing() -> list[str]:
    """One line per limit the kernel does not enforce here (`course grade` prints them)."""
    return [
        f"jail {row.name}: NOT ENFORCED by the kernel here: {row.how}"
        for row in enforced()
        if not row.held
    ]


def cgroup(memory_mb: int) -> cgroups.Cgroup | None:
    """A control group for one sandbox (memory and `sandbox.NPROC` tasks), or None here."""
    if _cgroup_missing():
        return None
    with contextlib.suppress(OSError):
        return cgroups.Cgroup.create(memory_mb=memory_mb, pids=sandbox.NPROC)
    return None


def explain(group: cgroups.Cgroup, memory_mb: int, outcome) -> None:
    """Note in the runner's `outcome` what the kernel did to the run in `group`: the peak memory
    it counted, and the memory limit as the reason when it killed the kernel."""
    outcome.peak_mb = max(outcome.peak_mb, group.peak_mb())
    refused = group.pids_refused()
    if group.oom_kills() and outcome.status in ("ran", "kernel died", "run failed"):
        outcome.status = "killed"
        outcome.reason = (
            f"memory limit: the notebook used more than {memory_mb:g} MB (its processes, and the "
            "files it kept in memory) and the kernel's out-of-memory killer stopped it"
        )
    if refused and outcome.status != "ran":
        outcome.reason += (
            f" (it also tried to run more than {sandbox.NPROC} processes and threads at once)"
        )
