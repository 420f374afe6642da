"""Keep child processes on a leash: process groups, parent-death signal, orphan guard, watchdog.

One supervisor for a local cluster's workers (`course_utils.cluster`) and the grader's kernels
(`course_utils.tools`). Start each child in its own session (`start_new_session=True`): it and its
children form one process group, which `kill_group` stops at once and Ctrl-C does not reach.

Example:
    >>> import os, subprocess
    >>> from course_utils import processes
    >>> child = subprocess.Popen(["sleep", "60"], start_new_session=True,
    ...                          preexec_fn=processes.die_with_parent(os.getpid()))
    >>> with processes.Watchdog(child.pid, memory_mb=500, seconds=5, what="the child") as dog:
    ...     child.wait()
    -9
    >>> dog.reason
    'time limit: the child ran longer than 5 s and was stopped'
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

# The orphan guard's program: it waits until its parent is gone, then kills the groups.
_ORPHAN_GUARD = """
import contextlib, os, signal, sys, time
while os.getppid() == int(sys.argv[1]):
    time.sleep(0.2)
for group in sys.argv[2:]:
    with contextlib.suppress(OSError):
        os.killpg(int(group), signal.SIGKILL)
"""


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of the group `pgid` (nothing happens when it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A Popen `preexec_fn` that has Linux SIGKILL the child when its parent dies (prctl
    PR_SET_PDEATHSIG); None on other systems (`start_orphan_guard` works there)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded in the parent, before the fork

    def preexec() -> None:
        libc.prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start_orphan_guard(groups: Sequence[int]) -> subprocess.Popen:
    """Start a process that SIGKILLs the process groups `groups` as soon as this process dies.
    Kill it (`guard.kill(); guard.wait()`) once the groups were stopped normally."""
    command = [sys.executable, "-c", _ORPHAN_GUARD, str(os.getpid()), *map(str, groups)]
    return subprocess.Popen(command, start_new_session=True)
