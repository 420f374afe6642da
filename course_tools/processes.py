"""Stop what the tools start: one way to kill a process tree, one deadline, one watchdog.

The runner's kernels, the grader's check processes and their children are stopped the same way:
`kill_tree` SIGKILLs a process, its process group and every descendant. `Deadline` is the one
clock behind every time limit here, and `Watchdog` kills a tree past a memory or time limit.

Example:
    >>> import subprocess
    >>> from course_tools.processes import Deadline, Watchdog, kill_tree
    >>> child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    >>> with Watchdog(child.pid, memory_mb=500, seconds=1, what="the child") as dog:
    ...     child.wait()
    -9
    >>> dog.reason
    'time limit: the child ran longer than 1 s and was stopped'
    >>> Deadline(30).left() <= 30
    True
    >>> kill_tree(child.pid)  # a tree already gone: nothing to do
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import psutil


class Deadline:
    """A moment `seconds` from now, on the monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds until the deadline (0 once it passed)."""
        return max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants ([] when it is gone), found by their parent links alone.

    psutil's `Process.children()` also drops a child whose wall-clock start time looks earlier
    than its parent's, and on Linux that time moves when the clock is set (at boot, by NTP): a
    child started within a second of its parent can then go missing (psutil 7.2, a known bug:
    https://github.com/giampaolo/psutil/issues/2910). The links are read in one pass instead.

    Example:
        >>> import os
        >>> process_tree(os.getpid())[0].pid == os.getpid()
        True
    """
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        children: dict[int, list[psutil.Process]] = {}
        for process in psutil.process_iter(["ppid"]):
            children.setdefault(process.info["ppid"], []).append(process)
        tree, seen = [root], {pid}
        for process in tree:  # grows while it is read: breadth first
            for child in children.get(process.pid, []):
                if child.pid not in seen:
                    seen.add(child.pid)
                    tree.append(child)
        return tree
    return []


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group (when it leads one) and every descendant, those that
    left the group with setsid too. Nothing happens for a process that is gone."""
    tree = process_tree(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        # Only its own group (start_new_session=True), never the caller's.
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    for process in tree:
        with contextlib.suppress(psutil.Error):
            process.kill()


class Watchdog:
    """In a `with` block, kills a process tree (`kill_tree`) once it uses more than `memory_mb`
    of resident memory, or `seconds` after the watchdog was made; a thread looks every
    `INTERVAL` seconds. `reason` says why it killed ("" if it did not), `peak_mb` is the most
    memory seen. It also kills the tree once `cancel` is set (the caller gives up on it, e.g. on
    Ctrl-C). (Not `setrlimit(RLIMIT_AS)`: TensorFlow reserves far more address space than it
    uses.)"""

    #: Seconds between two looks at the tree's memory.
    INTERVAL = 0.2

    def __init__(
        self,
        pid: int,
        memory_mb: float,
        seconds: float,
        *,
        what: str = "it",
        cancel: threading.Event | None = None,
    ) -> None:
        self.pid, self.memory_mb, self.what = pid, memory_mb, what
        self.cancel = cancel
        self.deadline = Deadline(seconds)
        self.reason, self.peak_mb = "", 0.0
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
        while not self._stop.wait(self.INTERVAL) and psutil.pid_exists(self.pid):
            rss = 0.0
            for process in process_tree(self.pid):
                # It may end while we look.
                with contextlib.suppress(psutil.Error):
                    rss += process.memory_info().rss / 2**20
            self.peak_mb = max(self.peak_mb, rss)
            if self.cancel is not None and self.cancel.is_set():
                why = f"cancelled: {self.what} was stopped because grading stopped"
                self.kill(why)
                return
            if rss > self.memory_mb:
                why = f"memory limit: {self.what} used more than {self.memory_mb:g} MB"
            elif self.deadline.passed():
                why = f"time limit: {self.what} ran longer than {self.deadline.seconds:.0f} s"
            else:
                continue
            self.kill(f"{why} and was stopped")
            return
