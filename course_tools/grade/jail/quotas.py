"""Which of the kernel's per-user quotas are used up for this process's user, found by trying
each once, cheaply: the quotas a sandbox shares with the grader when both run as the same host
user (an ordinary user's route: `sandbox`), which a submission can use up for the whole account.

- epoll watches (`fs.epoll.max_user_watches`): one watch on a pipe (ENOSPC);
- inotify instances and watches (`fs.inotify.max_user_instances`, `max_user_watches`): one of
  each (EMFILE, ENOSPC);
- message-queue bytes (RLIMIT_MSGQUEUE): one POSIX queue of one 1-byte message, removed at once
  (EMFILE while a descriptor is still free);
- pending signals (RLIMIT_SIGPENDING): one queued real-time signal sent to this thread, blocked
  there and taken back at once (EAGAIN), so that nothing is ever delivered;
- pipe pages (`fs.pipe-user-pages-soft`, `-hard`): one pipe, which the kernel makes smaller than
  its usual 16 pages past the soft limit (not for root, whom neither limit binds), and refuses
  past the hard one (ENFILE while the host's open files are not all used).

Each limit is compared with this process's own (the rlimits a sandbox inherits), on the counts
the kernel keeps for the host user, which include every user namespace of that user. A quota the
kernel does not have here (no POSIX message queues, an old kernel) reads as not used up.

Example:

    from course_tools.grade.jail import quotas
    quotas.used_up()  # [] normally; ['epoll watches'] while a process of this user holds them all
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import select
import signal
import tempfile
from pathlib import Path

#: The real-time signal `pending_signals_full` queues to its own thread.
PROBE_SIGNAL = signal.SIGRTMAX
#: A pipe's usual size in pages (the kernel's PIPE_DEF_BUFFERS).
PIPE_PAGES = 16
#: The largest pipe an unprivileged user may ask for, and the hard limit on a user's pipe pages.
PIPE_MAX_SIZE = Path("/proc/sys/fs/pipe-max-size")
PIPE_PAGES_HARD = Path("/proc/sys/fs/pipe-user-pages-hard")
#: An inotify watch for file accesses (IN_ACCESS): any event will do, none is read.
IN_ACCESS = 0x1


class _MqAttr(ctypes.Structure):
    """glibc's `struct mq_attr`."""

    _fields_ = [
        ("mq_flags", ctypes.c_long),
        ("mq_maxmsg", ctypes.c_long),
        ("mq_msgsize", ctypes.c_long),
        ("mq_curmsgs", ctypes.c_long),
        ("pad", ctypes.c_long * 4),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _descriptor_free() -> bool:
    """Whether this process can still open a file (EMFILE then means a quota, not its own
    RLIMIT_NOFILE; ENFILE not the host's table)."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return False
    return True


def epoll_and_pipe_full() -> list[str]:
    """The quotas of epoll watches and pipe pages, those used up, from one pipe and one watch."""
    full = []
    try:
        read, write = os.pipe()
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            hard = int(PIPE_PAGES_HARD.read_text())
            if exc.errno == errno.ENFILE and hard and _descriptor_free():
                full.append("pipe pages")
        return full
    try:
        with contextlib.suppress(OSError, ValueError):  # pipe-max-size unreadable: not asked
            default = min(PIPE_PAGES * mmap.PAGESIZE, int(PIPE_MAX_SIZE.read_text()))
            if fcntl.fcntl(read, fcntl.F_GETPIPE_SZ) < default:
                full.append("pipe pages")
        with select.epoll() as poll:
            poll.register(read, select.EPOLLIN)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            full.append("epoll watches")
    finally:
        os.close(read)
        os.close(write)
    return full


def inotify_full() -> list[str]:
    """ "inotify instances" or "inotify watches" when used up."""
    with contextlib.suppress(OSError, AttributeError):
        libc = _libc()
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            used_up = ctypes.get_errno() == errno.EMFILE and _descriptor_free()
            return ["inotify instances"] if used_up else []
        try:
            path = os.fsencode(tempfile.gettempdir())
            if (
                libc.inotify_add_watch(fd, path, IN_ACCESS) < 0
                and ctypes.get_errno() == errno.ENOSPC
            ):
                return ["inotify watches"]
        finally:
            os.close(fd)
    return []


def message_queues_full() -> list[str]:
    """ "message-queue bytes" when a queue of one 1-byte message cannot be made (RLIMIT_MSGQUEUE);
    nothing when the host's namespace has too many queues (ENOSPC: not per user) or no queues."""
    with contextlib.suppress(OSError, AttributeError):
        libc = _libc()
        libc.mq_open.restype = ctypes.c_int
        name = f"/course-grade-quota-{os.getpid()}-{os.urandom(6).hex()}".encode()
        attr = _MqAttr(0, 1, 1, 0)
        flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = libc.mq_open(name, flags, ctypes.c_uint(0o600), ctypes.byref(attr))
        if fd < 0:
            used_up = ctypes.get_errno() == errno.EMFILE and _descriptor_free()
            return ["message-queue bytes"] if used_up else []
        libc.mq_unlink(name)
        os.close(fd)  # a queue descriptor is a file descriptor on Linux
    return []


def pending_signals_full() -> list[str]:
    """ "pending signals" when one more real-time signal cannot be queued (RLIMIT_SIGPENDING):
    `PROBE_SIGNAL`, blocked in this thread, sent to it and taken back, never delivered."""
    with contextlib.suppress(OSError, AttributeError):
        libc = _libc()
        libc.pthread_self.restype = ctypes.c_ulong
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {PROBE_SIGNAL})
        try:
            code = libc.pthread_sigqueue(
                ctypes.c_ulong(libc.pthread_self()), PROBE_SIGNAL, ctypes.c_void_p(0)
            )
            if code == errno.EAGAIN:
                return ["pending signals"]
            while signal.sigtimedwait({PROBE_SIGNAL}, 0) is not None:
                pass
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return []


def used_up() -> list[str]:
    """The per-user quotas of this process's user that are used up now (see the module's
    docstring), each named once."""
    return [
        *epoll_and_pipe_full(),
        *inotify_full(),
        *message_queues_full(),
        *pending_signals_full(),
    ]
