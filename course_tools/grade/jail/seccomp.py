"""The system calls a sandbox may not make, which no namespace of the sandbox covers:
- the kernel's key management (`add_key`, `request_key`, `keyctl`: EPERM, as under Docker's
  default profile). Keyrings belong to no namespace: a sandbox started from a login session
  (`runuser`, `su -l`, ssh, a desktop) would hold the grader's session keyring and, through it,
  its user's, and could read the instructor's keys, leave keys behind, hand data to a later
  submission or use up the user's key quota;
- a new user namespace (`unshare` or `clone` with CLONE_NEWUSER: EPERM; `clone3`, whose flags
  a filter cannot read, fails with ENOSYS, and C libraries fall back to `clone`, as under
  Docker). In one, a submission is root again: it mounts a tmpfs past the sandbox's size caps and
  reaches kernel code written for root.
Nothing the course runs uses them.

bubblewrap loads a compiled classic BPF program from a file descriptor (`--seccomp FD`). The
program is written here by hand, about thirty instructions, rather than with libseccomp, whose
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
import platform
import shutil
import struct
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

#: Per machine: for its native and its 32-bit calls, (the audit architecture, the key calls'
#: numbers, unshare's and clone's, clone3's) (linux/audit.h; the syscall tables of
#: arch/x86/entry/syscalls, arch/arm/tools and include/uapi/asm-generic).
ARCHITECTURES = {
    "x86_64": (
        (0xC000003E, (248, 249, 250), (272, 56), 435),
        (0x40000003, (286, 287, 288), (310, 120), 435),
    ),
    "aarch64": (
        (0xC00000B7, (217, 218, 219), (97, 220), 435),
        (0x40000028, (309, 310, 311), (337, 120), 435),
    ),
}
#: x86-64's x32 calls carry this bit in their number.
X32_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
EPERM, ENOSYS = 1, 38
_LOAD, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low 32 bits)


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (`platform.machine()`), as the `struct sock_filter` array the
    kernel loads; ValueError for a machine not in `ARCHITECTURES`.

    >>> len(program("x86_64")) // 8  # instructions
    31
    """
    machine = machine or platform.machine()
    if machine not in ARCHITECTURES:
        raise ValueError(f"no system call filter for {machine}: only {sorted(ARCHITECTURES)}")
    # (op, jump if true, jump if false, k), a jump being 0 (the next instruction) or a label:
    # "deny" and "nosys" (the two refusals at the end), "next" (the next architecture's block),
    # "allow" (this block's last instruction)
    code: list[tuple[int, int | str, int | str, int]] = []
    allows: list[int] = []  # each block's "allow"
    for arch, keys, namespaces, clone3 in ARCHITECTURES[machine]:
        code += [(_LOAD, 0, 0, _ARCH), (_JEQ, 0, "next", arch), (_LOAD, 0, 0, _NR)]
        code += [(_JSET, "deny", 0, X32_BIT)] if arch == 0xC000003E else []
        code += [(_JEQ, "deny", 0, number) for number in keys]
        code.append((_JEQ, "nosys", 0, clone3))
        for number in namespaces:  # its flags (argument 0) asking for a new user namespace
            code += [(_JEQ, 0, 2, number), (_LOAD, 0, 0, _ARG0)]
            code.append((_JSET, "deny", "allow", CLONE_NEWUSER))
        allows.append(len(code))
        code.append((_RET, 0, 0, _ALLOW))
    deny = len(code)  # another architecture falls through to it too
    code += [(_RET, 0, 0, _ERRNO | EPERM), (_RET, 0, 0, _ERRNO | ENOSYS)]

    def target(i: int, jump: int | str) -> int:
        block = sum(1 for a in allows if a < i)  # the block instruction i is in
        where = {"deny": deny, "nosys": deny + 1, "allow": allows[min(block, len(allows) - 1)]}
        where["next"] = allows[block] + 1 if block < len(allows) else deny
        return where[jump] - i - 1 if isinstance(jump, str) else jump

    return b"".join(
        struct.pack("<HBBI", op, target(i, yes), target(i, no), k)
        for i, (op, yes, no, k) in enumerate(code)
    )


@cache
def filter_path() -> Path:
    """A file holding `program()`, in a folder of this process's own (0700, removed at exit),
    which no submission can write to."""
    folder = Path(tempfile.mkdtemp(prefix="course-grade-seccomp-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "filter.bpf"
    path.write_bytes(program())
    return path


def with_filter(bwrap_argv: Sequence[str]) -> list[str]:
    """`bwrap_argv` (bwrap and its arguments) run with `--seccomp` reading `filter_path()` on a
    descriptor the shell opens for it (a command line cannot carry one)."""
    bwrap, *rest = bwrap_argv
    return ["sh", "-c", 'exec "$0" --seccomp 9 "$@" 9<' + f"'{filter_path()}'", bwrap, *rest]
