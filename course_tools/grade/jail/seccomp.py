"""The system calls a sandbox may not make: the kernel's key management (`add_key`,
`request_key`, `keyctl`), which no namespace of the sandbox covers. Without this, every sandbox
started from a login session (`runuser`, `su -l`, ssh, a desktop) holds the grader's session
keyring and, through it, its user's: a submission could read the instructor's keys, leave keys
behind, hand data to a later submission or use up the user's key quota. They fail with EPERM, as
under Docker's default profile; nothing the course runs uses them.

bubblewrap loads a compiled classic BPF program from a file descriptor (`--seccomp FD`). The
program is written here by hand, twenty instructions, rather than with libseccomp, whose Python
binding is a distribution package, not one pip installs. It checks the architecture each call is
made for: a 64-bit process can also make 32-bit calls (`int 0x80` on x86), numbered differently;
x86's x32 calls are refused whole; a call for an architecture not listed is refused.

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

#: Per machine: (its audit architecture, the calls' numbers) for its native and its 32-bit calls
#: (linux/audit.h; the syscall tables of arch/x86/entry/syscalls and include/uapi/asm-generic).
ARCHITECTURES = {
    "x86_64": ((0xC000003E, (248, 249, 250)), (0x40000003, (286, 287, 288))),
    "aarch64": ((0xC00000B7, (217, 218, 219)), (0x40000028, (309, 310, 311))),
}
#: x86-64's x32 calls carry this bit in their number.
X32_BIT = 0x40000000
EPERM = 1
_LOAD, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (`platform.machine()`), as the `struct sock_filter` array the
    kernel loads; ValueError for a machine not in `ARCHITECTURES`.

    >>> len(program("x86_64")) // 8  # instructions
    16
    """
    machine = machine or platform.machine()
    if machine not in ARCHITECTURES:
        raise ValueError(f"no system call filter for {machine}: only {sorted(ARCHITECTURES)}")
    code: list[tuple[int, int, int, int | str]] = []  # (op, jump if true, if false, k): "deny"
    for arch, numbers in ARCHITECTURES[machine]:
        checks = [(_JSET, X32_BIT)] if arch == 0xC000003E else []
        checks += [(_JEQ, n) for n in numbers]
        # load the arch; if not this one, skip this block (the number's load, the checks, allow)
        code += [(_LOAD, 0, 0, _ARCH), (_JEQ, 0, len(checks) + 2, arch), (_LOAD, 0, 0, _NR)]
        code += [(op, "deny", 0, k) for op, k in checks]
        code.append((_RET, 0, 0, _ALLOW))
    code.append((_RET, 0, 0, _ERRNO | EPERM))  # another architecture, and the "deny" jumps
    last = len(code) - 1
    return b"".join(
        struct.pack("<HBBI", op, last - i - 1 if yes == "deny" else yes, no, k)
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
