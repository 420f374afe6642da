"""Keep child processes on a leash: process groups, a parent-death signal, an orphan guard, and a
memory and time watchdog.

One module for every place the course starts processes it must be able to stop: the workers of a
local cluster (`course_utils.cluster`) and the notebook kernels of the grader
(`course_utils.tools.grading`). The rules:

- start each child in its own session (`start_new_session=True`): it and everything it starts share
  one process group, which `kill_group` stops in one call, and the notebook's Ctrl-C does not reach;
- on Linux, `die_with_parent` asks the kernel to SIGKILL the child when its parent dies;
- `start_orphan_guard` starts a small process that kills the children's groups once their parent is
  gone (every POSIX system, and it also reaches grandchildren that stayed in the group);
- `Watchdog` kills a process tree that uses too much memory or runs past a deadline;
- `kill_tree` kills a process, its group and every descendant, whatever session they moved to.

Example:
    >>> import os, subprocess, sys
    >>> from course_utils import processes
    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
    ...                          start_new_session=True,
    ...                          preexec_fn=processes.die_with_parent(os.getpid()))
    >>> with processes.Watchdog(child.pid, memory_mb=500, seconds=5, what="the child") as dog:
    ...     child.wait()
    >>> dog.reason
    'time limit: the child ran longer than 5 s and was stopped'
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import psutil

#: The orphan guard's program: it polls its parent, and kills the groups once the parent is gone.
_ORPHAN_GUARD = """
import os, signal, sys, time
parent, groups = int(sys.argv[1]), [int(g) for g in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(0.2)
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of the group `pgid` (nothing happens when it is gone)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and all its descendants (even those that left the
    group with setsid: they are still its descendants until their parent dies)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    try:
        kill_group(os.getpgid(pid))
    except ProcessLookupError:
        pass
    for process in [*children, pid]:
        try:
            (process if isinstance(process, psutil.Process) else psutil.Process(process)).kill()
        except psutil.Error:
            pass


def die_with_parent(parent_pid: int):
    """A Popen `preexec_fn` that asks Linux to SIGKILL the child when its parent dies (prctl
    PR_SET_PDEATHSIG); on other systems it does nothing (use `start_orphan_guard` there)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded in the parent, before the fork

    def preexec() -> None:
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start_orphan_guard(groups: Sequence[int], python: str = sys.executable) -> subprocess.Popen:
    """Start a process that SIGKILLs the process groups `groups` as soon as this process dies.

    Kill the returned process (`guard.kill(); guard.wait()`) once the groups were stopped normally.
    """
    return subprocess.Popen(
        [python, "-c", _ORPHAN_GUARD, str(os.getpid()), *map(str, groups)],
        start_new_session=True,
    )


def tree_rss_mb(pid: int) -> float:
    """Resident memory (MB) of a process and all its descendants; 0 when it is gone."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for process in tree:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


class Watchdog:
    """Kills a process tree (`kill_tree`) when it uses more than `memory_mb` of resident memory, or
    is still running `seconds` after the watchdog started. Use it as a context manager.

    A thread polls psutil every `interval` seconds. Why resident memory and not
    `resource.setrlimit(RLIMIT_AS)`: TensorFlow reserves far more address space than it uses
    (about 2.5 GB for 0.7 GB resident on the course's models) and aborts in C++ at start-up under a
    tight RLIMIT_AS instead of raising MemoryError. Resident memory is what exhausts a machine.

    `reason` says why the tree was killed ("" if it was not), `peak_mb` the highest memory seen.
    """

    def __init__(
        self, pid: int, memory_mb: float, seconds: float, interval: float = 0.2, what: str = "it"
    ) -> None:
        self.pid, self.memory_mb, self.seconds, self.interval = pid, memory_mb, seconds, interval
        self.what = what
        self.deadline = time.monotonic() + seconds
        self.reason = ""
        self.peak_mb = 0.0
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
        while not self._stop.wait(self.interval):
            if not psutil.pid_exists(self.pid):
                return
            rss = tree_rss_mb(self.pid)
            self.peak_mb = max(self.peak_mb, rss)
            if rss > self.memory_mb:
                self.kill(
                    f"memory limit: {self.what} used more than {self.memory_mb:g} MB and was "
                    "stopped"
                )
                return
            if time.monotonic() > self.deadline:
                self.kill(
                    f"time limit: {self.what} ran longer than {self.seconds:.0f} s and was stopped"
                )
                return
