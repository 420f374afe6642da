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
import threading
import time
from collections.abc import Callable, Sequence

import psutil

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


def _tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants ([] when it is gone)."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant (those that left the group with
    setsid too: they stay its descendants until their parent dies)."""
    tree = _tree(pid)
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:  # its own group (start_new_session), never the caller's
            kill_group(pid)
    for process in tree:
        with contextlib.suppress(psutil.Error):
            process.kill()


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


class Watchdog:
    """In a `with` block, kills a process tree (`kill_tree`) once it uses more than `memory_mb`
    of resident memory, or `seconds` after the watchdog was made; a thread looks every `interval`
    seconds. `reason` says why it killed ("" if it did not), `peak_mb` is the most memory seen.
    (Not `setrlimit(RLIMIT_AS)`: TensorFlow reserves far more address space than it uses.)"""

    def __init__(
        self, pid: int, memory_mb: float, seconds: float, interval: float = 0.2, what: str = "it"
    ) -> None:
        self.pid, self.memory_mb, self.seconds, self.interval = pid, memory_mb, seconds, interval
        self.what, self.reason, self.peak_mb = what, "", 0.0
        self.deadline = time.monotonic() + seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def kill(self, reason: str) -> None:
        """Kill the tree now, recording why (the first reason given is kept)."""
        self.reason = self.reason or reason
        kill_tree(self.pid)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval) and psutil.pid_exists(self.pid):
            rss = 0.0
            for process in _tree(self.pid):
                with contextlib.suppress(psutil.Error):  # it may end while we look
                    rss += process.memory_info().rss / 2**20
            self.peak_mb = max(self.peak_mb, rss)
            if rss > self.memory_mb:
                why = f"memory limit: {self.what} used more than {self.memory_mb:g} MB"
            elif time.monotonic() > self.deadline:
                why = f"time limit: {self.what} ran longer than {self.seconds:.0f} s"
            else:
                continue
            self.kill(f"{why} and was stopped")
            return
