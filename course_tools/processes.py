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
import stat
import threading
import time
from dataclasses import dataclass

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


#: The oom_score_adj of a kernel and its children (`first_to_go`): the out-of-memory killer takes
#: them before any process of the grader (any user may raise its own processes' value).
KERNEL_OOM_SCORE_ADJ = 1000


def first_to_go() -> None:
    """Make this process (and the children it makes) the out-of-memory killer's first choice: a
    `preexec_fn`, run in the kernel's process before it execs (os calls only)."""
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, str(KERNEL_OOM_SCORE_ADJ).encode())
        finally:
            os.close(fd)


def keep_first_to_go(processes: list[psutil.Process]) -> None:
    """Raise back to `KERNEL_OOM_SCORE_ADJ` the oom_score_adj of those of `processes` that lowered
    it (an ordinary user's process may lower its own down to the value it started with)."""
    for process in processes:
        path = f"/proc/{process.pid}/oom_score_adj"
        with contextlib.suppress(OSError, ValueError):
            with open(path) as now:
                if int(now.read()) >= KERNEL_OOM_SCORE_ADJ:
                    continue
            with open(path, "w") as out:
                out.write(str(KERNEL_OOM_SCORE_ADJ))


#: The open descriptors a watched tree may hold in all (`Watchdog`, counted by `descriptor_count`
#: before each look's scan): every look stats each one and reads its link (`held_files`: 8 to 16
#: us a descriptor measured on this course's 2-core host, more while grading loads it), so a
#: tree of hundreds of thousands (the sandbox's tasks times its RLIMIT_NOFILE) made each look
#: seconds long and its memory verdict late. The solution's kernel at 2 devices under `course
#: grade` (quick profile, synthetic data, as root) held at most 83 in all, in 3 processes (74 in
#: its Python, 57 threads): a margin of over 200 times, and a scan of 20,000 took 0.2-0.35 s.
MAX_DESCRIPTORS = 20_000


def descriptor_count(processes: list[psutil.Process]) -> int:
    """How many descriptors `processes` hold open, without looking at any of them: the size
    Linux (6.2 on) gives /proc/<pid>/fd (its count of open descriptors), else its listing's
    length; a process gone or unreadable counts 0 (`held_files` says which are unreadable).

    Example:
        >>> import os
        >>> descriptor_count(process_tree(os.getpid())) >= 3
        True
    """
    total = 0
    for process in processes:
        shown = proc_folder(process.pid)
        if shown is not None:  # else gone or exiting: nothing left to hold
            with contextlib.suppress(OSError):
                total += os.stat(f"{shown}/fd").st_size or len(os.listdir(f"{shown}/fd"))
    return total


@dataclass
class HeldFiles:
    """What a process tree holds open (`held_files`), each file once by (st_dev, st_ino)."""

    #: bytes of the memory files (memfd_create) they hold: memory no process's RSS shows
    memfd_bytes: int = 0
    #: bytes of the regular files they hold that no folder lists any more (deleted while open)
    deleted_bytes: int = 0
    #: processes whose descriptors could not be read
    unreadable: int = 0
    #: the descriptors they hold in all (`descriptor_count`)
    descriptors: int = 0
    #: False when they held more than the scan's bound: none was looked at (bytes unknown)
    scanned: bool = True


#: The task flag Linux sets when a task starts to exit (`PF_EXITING`, include/linux/sched.h),
#: before it releases its memory and files: from then on /proc/<pid>/fd is unreadable to its own
#: user, as an undumpable process's is, while its state still reads running (red team 34b: about 2%
#: of ending `multiprocessing` pools were taken for a hiding kernel).
PF_EXITING = 0x4


def exiting(folder: str) -> bool:
    """The task of /proc `folder` (`/proc/<pid>` or `/proc/<pid>/task/<tid>`) is gone, a zombie,
    or exiting (`PF_EXITING` in its stat's flags, field 9; the name in field 2 may hold spaces
    and parentheses, so fields are counted after the last ")").

    >>> exiting(f"/proc/{os.getpid()}")
    False
    """
    try:
        with open(f"{folder}/stat", "rb") as stat_file:
            fields = stat_file.read().rpartition(b")")[2].split()
    except OSError:
        return True  # gone
    state, flags = fields[0], int(fields[6])  # fields 3 and 9 of the whole line
    return state in (b"Z", b"X", b"x") or bool(flags & PF_EXITING)


def proc_folder(pid: int) -> str | None:
    """The /proc folder that shows process `pid`'s memory and descriptors: its own, or, once its
    first thread has ended while others run (a zombie leader, whose own folder reads no memory
    and no descriptor), a running thread's (`/proc/<pid>/task/<tid>`: threads share both); None
    when every thread is gone or exiting.

    >>> proc_folder(os.getpid()) == f"/proc/{os.getpid()}"
    True
    """
    folder = f"/proc/{pid}"
    if not exiting(folder):
        return folder
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"{folder}/task"):
            if not exiting(task := f"{folder}/task/{tid}"):
                return task
    return None


def held_files(processes: list[psutil.Process], max_descriptors: int | None = None) -> HeldFiles:
    """The files `processes` hold open through /proc/<pid>/fd: a memfd's pages, and the blocks of
    a regular file deleted while open (os.stat follows the fd link to the file itself), each
    (st_dev, st_ino) counted once however many descriptors or processes hold it. With
    `max_descriptors`, they are counted first (`descriptor_count`, cheap) and none is looked at
    when they are more (`scanned` False).

    Example:
        >>> import os
        >>> fd = os.memfd_create("x"); os.write(fd, b"x" * 2**20)
        1048576
        >>> held_files(process_tree(os.getpid())).memfd_bytes >= 2**20
        True
        >>> held_files(process_tree(os.getpid()), max_descriptors=1).scanned
        False
        >>> os.close(fd)
    """
    held, seen = HeldFiles(), set()
    if max_descriptors is not None:
        held.descriptors = descriptor_count(processes)
        if held.descriptors > max_descriptors:
            held.scanned = False
            return held
    for process in processes:
        shown = proc_folder(process.pid)
        if shown is None:
            continue  # gone or exiting: it holds nothing any more
        folder = f"{shown}/fd"
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue  # gone
        except OSError:
            # a live process of the same user is unreadable once it made itself undumpable
            # (prctl); so is, to its own user too, one that started to exit since
            if not exiting(shown):
                held.unreadable += 1
            continue
        for name in names:
            link = f"{folder}/{name}"
            try:
                info = os.stat(link)
            except OSError:
                continue  # closed while we look
            try:
                target = os.readlink(link)
            except OSError:  # ENAMETOOLONG: a path past PATH_MAX (a memfd's name is short)
                target = ""
            if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            size = info.st_blocks * 512
            if target.startswith("/memfd:"):
                held.memfd_bytes += size
            elif info.st_nlink == 0:
                held.deleted_bytes += size
    return held


def page_tables_kb(pid: int) -> int:
    """The kB of page tables the kernel keeps for process `pid` (`VmPTE` in its status, read
    through `proc_folder`): its memory, in no RSS, and without bound: a read-only mapping of
    terabytes read once every 2 MB costs one page of tables each time (3 GB of them behind 54 MB
    of RSS). 0 when it is gone.

    >>> page_tables_kb(os.getpid()) > 0
    True
    """
    shown = proc_folder(pid)
    with contextlib.suppress(OSError):
        if shown is None:
            return 0
        with open(f"{shown}/status") as status:
            for line in status:
                if line.startswith("VmPTE:"):
                    return int(line.split()[1])
    return 0


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_mb(processes: list[psutil.Process]) -> float:
    """The resident memory of `processes` in all (statm's second field, read through
    `proc_folder`: a process whose first thread ended reads 0 in its own folder), with the page
    tables the kernel keeps for them (`page_tables_kb`), in MB (those gone while we look count 0).

    >>> resident_mb(process_tree(os.getpid())) > 1
    True
    """
    total = 0.0
    for process in processes:
        shown = proc_folder(process.pid)
        if shown is None:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):  # it may end while we look
            with open(f"{shown}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE_BYTES / 2**20
            total += page_tables_kb(process.pid) / 1024
    return total


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
    `INTERVAL` seconds (resident memory, and the memfds the tree holds: `held_files`). `reason`
    says why it killed ("" if it did not), `peak_mb` is the most memory seen. Each look scans
    the tree's descriptors once: `held` is that scan, which the runner's disk watch reads too
    (its deleted files), and the memory verdict takes the larger of the resident memory read
    before and after it (a long scan judges no stale reading). A tree holding more than
    `max_descriptors` descriptors in all is killed, its scan not made (`MAX_DESCRIPTORS`: the
    grader could not watch it in time). With `first_to_go` (a kernel's tree) it raises back the
    oom_score_adj a process of the tree lowered (`keep_first_to_go`), and kills the tree once a
    process of it hides its descriptors. It also kills the tree once `cancel` is set (the caller
    gives up on it, e.g. on Ctrl-C). (Not `setrlimit(RLIMIT_AS)`: TensorFlow reserves far more
    address space than it uses.)"""

    #: Seconds between two looks at the tree's memory.
    INTERVAL = 0.2

    def __init__(  # noqa: PLR0913 - the tree, its limits, and how to name, stop, rank it
        self,
        pid: int,
        memory_mb: float,
        seconds: float,
        *,
        what: str = "it",
        cancel: threading.Event | None = None,
        first_to_go: bool = False,
        max_descriptors: int = MAX_DESCRIPTORS,
    ) -> None:
        self.pid, self.memory_mb, self.what = pid, memory_mb, what
        self.first_to_go, self.max_descriptors = first_to_go, max_descriptors
        #: the last look's scan of the tree's descriptors (`held_files`), and how many looks
        self.held, self.looks = HeldFiles(), 0
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

    def look(self) -> float:
        """One look at the tree: its descriptors scanned once (`held`, shared), and its memory in
        MB (resident, the larger of before and after the scan, plus the memfds it holds)."""
        tree = process_tree(self.pid)
        before = resident_mb(tree)
        self.held = held_files(tree, self.max_descriptors)
        self.looks += 1
        # read again after the scan (a process started during it is in the next look's reading);
        # a memfd's pages are in no process's RSS until mapped: counted once each
        mb = max(before, resident_mb(tree)) + self.held.memfd_bytes / 2**20
        if self.first_to_go:
            keep_first_to_go(tree)
        self.peak_mb = max(self.peak_mb, mb)
        return mb

    def _watch(self) -> None:
        while not self._stop.wait(self.INTERVAL) and psutil.pid_exists(self.pid):
            mb = self.look()
            held = self.held
            if self.cancel is not None and self.cancel.is_set():
                why = f"cancelled: {self.what} was stopped because grading stopped"
                self.kill(why)
                return
            if mb > self.memory_mb:
                why = f"memory limit: {self.what} used more than {self.memory_mb:g} MB"
            elif not held.scanned:
                why = (
                    f"too many open descriptors: {held.descriptors:,} (limit "
                    f"{self.max_descriptors:,}), the grader cannot watch them (the memory and disk "
                    f"{self.what} held through them could not be counted in time),"
                )
            elif held.unreadable and self.first_to_go:
                why = (
                    f"memory limit: a process of {self.what} hid the files it holds open (it "
                    "made itself undumpable), so its memory and disk use could not be counted,"
                )
            elif self.deadline.passed():
                why = f"time limit: {self.what} ran longer than {self.deadline.seconds:.0f} s"
            else:
                continue
            self.kill(f"{why} and was stopped")
            return
