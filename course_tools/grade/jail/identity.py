"""Who a submission's code runs as: never the host's root, never the grader's own user.

Run as root (CI, containers, Slurm nodes), the grader gives every sandbox an unprivileged user id
of its own, one no account has (`fresh_uid`, in `UID_RANGE`), the way nsjail's `--user 99999`
does: a uid, not a user namespace mapped to root, because the kernel's checks on `/proc/sys` and
other host-wide knobs look at the host uid. Inside the sandbox, before the submission's code,
`enter` hands the writable folders to that uid (`chown`), sets the resource limits that hold per
process (`prlimit`: no core dumps, `RLIMIT_NPROC`) and drops to the uid with no capabilities, no
supplementary groups and no way back (`setpriv`, util-linux). Run as an ordinary user, the code
keeps that user's id inside a user namespace (bubblewrap's own), which cannot change the host
either, but which reads what that user may read in the folders bound into the sandbox.

Example:

    from course_tools.grade.jail import identity
    identity.enter(1900012345, writable=[Path("/tmp/w")], nproc=1024)
    # ['sh', '-c', '...chown...', 'sh', ..., 'setpriv', '--reuid', '1900012345', ...]
"""

from __future__ import annotations

import grp
import os
import pwd
import resource
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

#: The user ids a sandbox may be given: above the ranges distributions and systemd hand out
#: (accounts, dynamic users, containers' subordinate ids), below 2**31.
UID_RANGE = range(1_900_000_000, 1_900_000_000 + 2**24)
#: The programs `enter` needs (util-linux and coreutils, on every Linux distribution).
PROGRAMS = ("setpriv", "prlimit", "chown")

#: Run inside the sandbox as root: hand the writable folders (after "uid:gid", up to "--") to
#: that uid and gid, then exec the rest.
_CHOWN = (
    'ug=$1; shift; while [ "$1" != -- ]; do chown -R -h "$ug" "$1" || exit 125; shift; done; '
    'shift; exec "$@"'
)


def privileged() -> bool:
    """Whether the grader runs as root (then each sandbox gets its own unprivileged uid)."""
    return os.geteuid() == 0


def missing() -> str:
    """Which of `PROGRAMS` this host lacks ("" when none), as root (a user needs none)."""
    absent = [name for name in PROGRAMS if shutil.which(name) is None]
    return ", ".join(absent)


def user_tasks() -> int:
    """The processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid = os.getuid()
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += sum(1 for _ in (entry / "task").iterdir())
            except OSError:
                continue
    return count


def fresh_uid() -> int:
    """A user id from `UID_RANGE` that no account or group of this host has."""
    while True:
        uid = UID_RANGE.start + secrets.randbelow(len(UID_RANGE))
        try:
            pwd.getpwuid(uid)
        except KeyError:
            try:
                grp.getgrgid(uid)
            except KeyError:
                return uid


def enter(
    uid: int | None,
    *,
    writable: Sequence[Path] = (),
    nproc: int | None = None,
    nofile: int | None = None,
) -> list[str]:
    """The command prefix run inside the sandbox before the submission's code.

    uid: the user id (and group id) to drop to, as root; None (an ordinary user): no change of
    user. writable: folders given to `uid` first. nproc: RLIMIT_NPROC, the tasks (processes and
    threads) the uid may have, the sandbox's own with a uid of its own, else all of the user's
    (`user_tasks` plus the sandbox's). nofile: RLIMIT_NOFILE, the files each process may hold
    open (as an ordinary user, at most the hard limit it has). Core dumps are always off.
    """
    if uid is None and shutil.which("prlimit") is None:
        return []  # no util-linux: `limits.enforced` says core dumps and tasks are not capped
    limits = ["prlimit", "--core=0:0"]
    if nproc is not None:
        limits.append(f"--nproc={nproc}:{nproc}")
    if nofile is not None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if uid is None and hard != resource.RLIM_INFINITY:
            nofile = min(nofile, hard)  # a user cannot raise its hard limit
        limits.append(f"--nofile={nofile}:{nofile}")
    if uid is None:
        return [*limits, "--"]
    chown = ["sh", "-c", _CHOWN, "sh", f"{uid}:{uid}", *map(str, writable), "--"]
    drop = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    return [*chown, *limits, "--", *drop, "--"]


#: The capabilities `enter` needs inside the sandbox, and drops with the uid.
ENTER_CAPS = ("CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
