"""The sandbox's in-memory folders, `/tmp` and `/dev/shm`, capped in files as well as in bytes.

bubblewrap mounts them with a size (`--size`) but has no option for a tmpfs's number of inodes,
whose default grows with the host's memory (millions). An empty file costs the kernel about a
kilobyte that no byte cap counts, and, run by an ordinary user without a control group, no memory
limit either: 200,000 empty files hold some 200 MB of the host's memory. So the first step inside
the sandbox, before the submission's code, mounts a tmpfs over each of the two folders again, with
its size and `INODES` (`mount(2)`'s `nr_inodes`); a file past either fails with "No space left
on device" in the cell that makes it.

- Run as root, that step has CAP_SYS_ADMIN (`ENTER_CAPS`) in the sandbox's own mount namespace,
  which the drop to the sandbox's uid then takes away (`identity.enter`).
- Run as an ordinary user (`nest=True`), it enters a user namespace of its own with a mount
  namespace inside the sandbox's: the mounts bubblewrap made stay locked there (none can be
  unmounted or made writable), and only the new tmpfs mounts are its own. It maps the user to
  itself, sets RLIMIT_NPROC to the sandbox's own tasks (the new namespace counts them from
  zero), empties its bounding set of capabilities, loads the seccomp filter, which refuses any
  further user namespace (so `seccomp` is loaded here, not by bubblewrap), and executes the
  command, which keeps no capability (an ordinary uid loses them at `execve`). Where the kernel
  refuses that namespace (a host that restricts unprivileged user namespaces beyond bubblewrap's
  own), the folders keep their byte caps only and the rest happens the same (`limits` says
  which holds).

Example:

    from course_tools.grade.jail import memory_folders, seccomp
    memory_folders.command({"/tmp": 512}, nest=True, nproc=1088, program=seccomp.program())
    # ['/usr/bin/python3', '-I', '.../jail/memory_folders.py', '--nest', '--filter=2000...', ...]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import sys
from pathlib import Path

#: The files, folders and links each in-memory folder may hold (the work folder's cap too).
INODES = 20_000
#: This file, which the sandbox runs as a script (`command`).
STEP = str(Path(__file__).resolve())
#: What the step needs inside the sandbox, run as root: mount (and the drop takes it away).
ENTER_CAPS = ("CAP_SYS_ADMIN",)
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MNT_DETACH = 0x2, 0x4, 0x1000, 0x4000, 0x2
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_CAPBSET_DROP, CAP_LAST = 24, 63  # prctl's numbers; every capability a kernel may have


class _SockFprog(ctypes.Structure):
    """The kernel's `struct sock_fprog`: a classic BPF program's length and instructions."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def command(
    sizes_mb: dict[str, int], *, nest: bool, nproc: int | None = None, program: bytes = b""
) -> list[str]:
    """The step's command line, to put before the submission's command: a tmpfs of `sizes_mb`
    (MB by folder) and `INODES` over each folder; `nest` as an ordinary user, with its
    RLIMIT_NPROC `nproc` and the seccomp filter `program` (`seccomp.program()`). Python in
    isolated mode runs this file: nothing of the work folder or the environment is imported,
    and it imports nothing but the standard library."""
    argv = [sys.executable, "-I", STEP]
    if nest:
        argv += ["--nest", f"--filter={program.hex()}"]
        argv += [f"--nproc={nproc}"] if nproc is not None else []
    return [*argv, *[f"{folder}={mb}" for folder, mb in sizes_mb.items()], "--"]


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _own_namespace(libc: ctypes.CDLL) -> bool:
    """Enter a user namespace and a mount namespace of this process's own, the user mapped to
    itself; False (nothing changed) where the kernel refuses."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return False
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return True


def _mounts_below(folder: str) -> list[str]:
    """The mount points strictly below `folder` that no other of them contains (the folders
    bound into the sandbox there, with what is mounted inside them)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
        if point.startswith(folder.rstrip("/") + "/"):
            points.append(point)
    return sorted(p for p in set(points) if not any(p.startswith(q + "/") for q in points))


def _mount(libc: ctypes.CDLL, folder: str, size_mb: int) -> bool:
    """Mount a tmpfs of `size_mb` and `INODES` over `folder`, with what was mounted below it
    (the work folder, when the host's temporary folder holds it) bound again at the same place;
    False, and nothing changed, where the kernel refuses."""
    below = _mounts_below(folder)
    old = os.open(folder, os.O_PATH | os.O_DIRECTORY)
    try:
        options = f"mode=1777,size={size_mb * 2**20},nr_inodes={INODES}".encode()
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options):
            return False
        mask = os.umask(0o022)
        try:
            for point in below:
                os.makedirs(point, mode=0o755, exist_ok=True)
                source = f"/proc/self/fd/{old}/{os.path.relpath(point, folder)}".encode()
                if libc.mount(source, point.encode(), None, MS_BIND | MS_REC, None):
                    raise OSError(ctypes.get_errno(), f"cannot bind {point} again")
        except OSError:
            libc.umount2(folder.encode(), MNT_DETACH)  # as it was
            return False
        finally:
            os.umask(mask)
        return True
    finally:
        os.close(old)


def _load_filter(libc: ctypes.CDLL, code: bytes) -> None:
    """Load the seccomp filter `code` on this process (SystemExit if the kernel refuses: the
    submission never runs without it)."""
    program = _SockFprog(len(code) // 8, code)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(
        PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0
    ):
        error = os.strerror(ctypes.get_errno())
        raise SystemExit(f"course grade: cannot load the system call filter ({error})")


def main(argv: list[str] | None = None) -> None:
    """The step itself, inside the sandbox (`command`'s arguments): mount, then execute the
    rest of the command line."""
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--")
    options, rest = argv[:split], argv[split + 1 :]
    nest = "--nest" in options
    nproc = [int(o.removeprefix("--nproc=")) for o in options if o.startswith("--nproc=")]
    program = [bytes.fromhex(o.removeprefix("--filter=")) for o in options if o.startswith("--f")]
    libc = ctypes.CDLL(None, use_errno=True)
    cwd = os.getcwd()
    if not nest or _own_namespace(libc):
        for spec in options:
            if not spec.startswith("--"):
                folder, size_mb = spec.rsplit("=", 1)
                _mount(libc, folder, int(size_mb))  # else its byte cap only (`limits`)
        if nest and nproc:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc[0], nproc[0]))
        if nest:  # the new namespace's bounding set is whole: empty, as bubblewrap leaves it
            for cap in range(CAP_LAST + 1):
                libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    with contextlib.suppress(OSError):
        os.chdir(cwd)  # the folder bound again, if it was below one
    if nest:
        _load_filter(libc, program[0])
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main()
