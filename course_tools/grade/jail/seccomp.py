"""The system calls a sandbox may not make, which no namespace of the sandbox covers:
- the kernel's key management (`add_key`, `request_key`, `keyctl`: EPERM, as under Docker's
  default profile). Keyrings belong to no namespace: a sandbox started from a login session
  (`runuser`, `su -l`, ssh, a desktop) would hold the grader's session keyring and, through it,
  its user's, and could read the instructor's keys, leave keys behind, hand data to a later
  submission or use up the user's key quota;
- a new user namespace (`unshare` or `clone` with CLONE_NEWUSER: EPERM; `clone3`, whose flags
  a filter cannot read, fails with ENOSYS, and C libraries fall back to `clone`, as under
  Docker). In one, a submission is root again: it mounts a tmpfs past the sandbox's size caps and
  reaches kernel code written for root;
- the kernel's asynchronous I/O (`io_setup`, `io_uring_setup`: ENOSYS, and libraries fall back to
  threads): its contexts come from one table for the whole host (`fs.aio-max-nr`), which one
  sandbox could fill, denying every database and emulator on the machine;
- System V shared memory (`shmget`, and i386's `ipc` multiplexer: ENOSYS): its segments, in the
  sandbox's own IPC namespace, are in no process's resident memory and behind no descriptor, so
  the watched route (an ordinary user, no memory cgroup) cannot count them; nothing the course runs
  uses them (Python's and TensorFlow's shared memory is POSIX, files in /dev/shm);
- sockets of a family other than `FAMILIES` (`socket`, `socketpair`: EAFNOSUPPORT, as if the
  kernel had not built it in). AF_VSOCK is the one that matters: it has no network namespace, so
  a sandbox could take ports of the host's vsock space and reach the hypervisor. i386's
  `socketcall`, whose arguments a filter cannot read, fails with ENOSYS;
- netlink sockets of a protocol other than `NETLINK_PROTOCOLS` (EPROTONOSUPPORT). Run as root,
  the sandbox's network namespace belongs to the host's user namespace, and the kernel sends
  the host's device events (NETLINK_KOBJECT_UEVENT: disks, USB, other jobs' network devices,
  module loads) to every such namespace.
Nothing the course runs uses them.

bubblewrap loads a compiled classic BPF program from a file descriptor (`--seccomp FD`) when the
grader runs as root; run by an ordinary user, the sandbox's first step (`memory_folders`) loads it,
after the user namespace that step needs. The
program is written here by hand, about sixty instructions, rather than with libseccomp, whose
Python binding is a distribution package, not one pip installs. It checks the architecture each
call is made for: a 64-bit process can also make 32-bit calls (`int 0x80` on x86), numbered
differently; x86's x32 calls are refused whole; a call for an architecture not listed is refused.

Example:

    from course_tools.grade.jail import seccomp
    argv = seccomp.with_filter(["bwrap", "--ro-bind", "/", "/", "true"])
    # ['sh', '-c', 'exec "$0" --seccomp 9 "$@" 9<...', 'bwrap', '--ro-bind', ...]
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import struct
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import NamedTuple


class Calls(NamedTuple):
    """The numbers of one architecture's calls the filter looks at."""

    #: the audit architecture (linux/audit.h)
    arch: int
    #: add_key, request_key, keyctl: EPERM
    keys: tuple[int, ...]
    #: unshare, clone: EPERM when argument 0 asks for a new user namespace
    namespaces: tuple[int, ...]
    #: clone3, io_setup, io_uring_setup, shmget (and i386's socketcall and ipc): ENOSYS
    nosys: tuple[int, ...]
    #: socket, socketpair: EAFNOSUPPORT for a family not in `FAMILIES`, EPROTONOSUPPORT for a
    #: netlink protocol not in `NETLINK_PROTOCOLS`
    sockets: tuple[int, ...]


#: Per machine: its native and its 32-bit calls (the syscall tables of arch/x86/entry/syscalls,
#: arch/arm/tools and include/uapi/asm-generic).
ARCHITECTURES = {
    "x86_64": (
        Calls(0xC000003E, (248, 249, 250), (272, 56), (435, 206, 425, 29), (41, 53)),
        Calls(0x40000003, (286, 287, 288), (310, 120), (435, 245, 425, 395, 102, 117), (359, 360)),
    ),
    "aarch64": (
        Calls(0xC00000B7, (217, 218, 219), (97, 220), (435, 0, 425, 194), (198, 199)),
        Calls(0x40000028, (309, 310, 311), (337, 120), (435, 243, 425, 307), (281, 288)),
    ),
}
#: The socket families a sandbox may open: AF_UNIX, AF_INET, AF_INET6 (TensorFlow's gRPC,
#: Python's socket module, the kernel's own ZeroMQ: none of which reaches beyond the sandbox's
#: empty network namespace) and AF_NETLINK (getifaddrs, and getaddrinfo with AI_ADDRCONFIG),
#: of `NETLINK_PROTOCOLS` only. The others either have no network namespace (AF_VSOCK: the
#: host's, a hypervisor's ports) or nothing the course needs; Docker's default profile refuses
#: AF_VSOCK too.
FAMILIES = (1, 2, 10, 16)
AF_NETLINK = 16
#: The netlink protocols a sandbox may use: NETLINK_ROUTE (0), all getifaddrs needs.
NETLINK_PROTOCOLS = (0,)
#: x86-64's x32 calls carry this bit in their number.
X32_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
EPERM, ENOSYS, EPROTONOSUPPORT, EAFNOSUPPORT = 1, 38, 93, 97
_LOAD, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_NR, _ARCH, _ARG0, _ARG2 = 0, 4, 16, 32  # offsets in struct seccomp_data (low 32 bits)


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (`platform.machine()`), as the `struct sock_filter` array the
    kernel loads; ValueError for a machine not in `ARCHITECTURES`.

    >>> len(program("x86_64")) // 8  # instructions
    73
    """
    machine = machine or platform.machine()
    if machine not in ARCHITECTURES:
        raise ValueError(f"no system call filter for {machine}: only {sorted(ARCHITECTURES)}")
    # (op, jump if true, jump if false, k), a jump being 0 (the next instruction), a number of
    # instructions to skip or a label: "deny", "nosys", "noproto" and "noaf" (the refusals at
    # the end),
    # "next" (the next architecture's block), "allow" (this block's last instruction)
    code: list[tuple[int, int | str, int | str, int]] = []
    allows: list[int] = []  # each block's "allow"
    for calls in ARCHITECTURES[machine]:
        code += [(_LOAD, 0, 0, _ARCH), (_JEQ, 0, "next", calls.arch), (_LOAD, 0, 0, _NR)]
        code += [(_JSET, "deny", 0, X32_BIT)] if calls.arch == 0xC000003E else []
        code += [(_JEQ, "deny", 0, number) for number in calls.keys]
        code += [(_JEQ, "nosys", 0, number) for number in calls.nosys]
        for number in calls.namespaces:  # its flags (argument 0) asking for a new user namespace
            code += [(_JEQ, 0, 2, number), (_LOAD, 0, 0, _ARG0)]
            code.append((_JSET, "deny", "allow", CLONE_NEWUSER))
        others = [family for family in FAMILIES if family != AF_NETLINK]
        for number in calls.sockets:  # its family (argument 0) among those allowed; netlink's
            # protocol (argument 2) too
            size = len(others) + 3 + len(NETLINK_PROTOCOLS)
            code += [(_JEQ, 0, size, number), (_LOAD, 0, 0, _ARG0)]
            code += [(_JEQ, "allow", 0, family) for family in others]
            code += [(_JEQ, 0, "noaf", AF_NETLINK), (_LOAD, 0, 0, _ARG2)]
            code += [(_JEQ, "allow", 0, protocol) for protocol in NETLINK_PROTOCOLS[:-1]]
            code.append((_JEQ, "allow", "noproto", NETLINK_PROTOCOLS[-1]))
        allows.append(len(code))
        code.append((_RET, 0, 0, _ALLOW))
    deny = len(code)  # another architecture falls through to it too
    refusals = (EPERM, ENOSYS, EPROTONOSUPPORT, EAFNOSUPPORT)
    code += [(_RET, 0, 0, _ERRNO | errno) for errno in refusals]

    def target(i: int, jump: int | str) -> int:
        block = sum(1 for a in allows if a < i)  # the block instruction i is in
        where = {"deny": deny, "nosys": deny + 1, "noproto": deny + 2, "noaf": deny + 3}
        where["allow"] = allows[min(block, len(allows) - 1)]
        where["next"] = allows[block] + 1 if block < len(allows) else deny
        return where[jump] - i - 1 if isinstance(jump, str) else jump

    return b"".join(
        struct.pack("<HBBI", op, target(i, yes), target(i, no), k)
        for i, (op, yes, no, k) in enumerate(code)
    )


@cache
def filter_path() -> Path:
    """A file holding `program()`, in a folder of this process's own (0700, removed at exit;
    named with its pid, for a grader killed before its exit: `supervised`), which no submission
    can write to."""
    folder = Path(tempfile.mkdtemp(prefix=f"course-grade-seccomp-{os.getpid()}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "filter.bpf"
    path.write_bytes(program())
    return path


def with_filter(bwrap_argv: Sequence[str]) -> list[str]:
    """`bwrap_argv` (bwrap and its arguments) run with `--seccomp` reading `filter_path()` on a
    descriptor the shell opens for it (a command line cannot carry one)."""
    bwrap, *rest = bwrap_argv
    return ["sh", "-c", 'exec "$0" --seccomp 9 "$@" 9<' + f"'{filter_path()}'", bwrap, *rest]
