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
from dataclasses import dataclass
from functools import cache

from course_tools.grade.jail import cgroups, identity, sandbox, workdir


@dataclass(frozen=True)
class Limit:
    """One of the jail's limits: whether the kernel enforces it here, and how (or why not)."""

    name: str
    held: bool
    how: str


@cache
def _cgroup_missing() -> str:
    return cgroups.why_not()


def enforced() -> list[Limit]:
    """The jail's limits on this host, each with how it is enforced or why it is not."""
    root = identity.privileged()
    missing_programs = identity.missing() if root else ""
    rows = []
    if root and not missing_programs:
        rows.append(
            Limit("user", held=True, how="a uid of its own per sandbox, no capabilities (setpriv)")
        )
    elif root:
        rows.append(
            Limit("user", held=False, how=f"as root, but {missing_programs} missing: cannot drop")
        )
    else:
        rows.append(
            Limit(
                "user",
                held=True,
                how="your own uid in a user namespace (not root: cannot change the host)",
            )
        )
    rows.append(Limit("host knobs", held=True, how="/proc/sys and /sys read-only (bubblewrap)"))
    rows.append(
        Limit("core dumps", held=True, how="off: RLIMIT_CORE 0 (prlimit), /proc/sys read-only")
    )
    why = _cgroup_missing()
    rows.append(
        Limit(
            "memory",
            held=not why,
            how="cgroup: memfd, tmpfs, shm and page cache counted" if not why else why,
        )
    )
    if not why:
        rows.append(Limit("processes", held=True, how=f"cgroup pids.max {sandbox.NPROC}"))
    elif root and not missing_programs:
        rows.append(
            Limit("processes", held=True, how=f"RLIMIT_NPROC {sandbox.NPROC} of the sandbox's uid")
        )
    else:
        rows.append(Limit("processes", held=False, how=why))
    if workdir.can_cap():
        how = f"a tmpfs: the disk limit in bytes, {workdir.INODES:,} inodes, unlinked files counted"
        rows.append(Limit("work folder", held=True, how=how))
    else:
        rows.append(
            Limit("work folder", held=False, how="sampled every 0.5 s (mounting needs root)")
        )
    return rows


def missing() -> list[str]:
    """One line per limit the kernel does not enforce here (`course grade` prints them)."""
    return [
        f"{row.name}: not enforced by the kernel here ({row.how})"
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
