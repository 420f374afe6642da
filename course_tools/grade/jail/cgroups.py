"""A control group per sandbox: memory and tasks counted and capped by the kernel.

A process cannot hide memory from its cgroup: anonymous memory, `memfd` and `/dev/shm` files,
the pages of the tmpfs folders it writes (its `/tmp`, its work folder) and the page cache it
fills are all charged to it; past `memory_mb` the kernel reclaims what it can and then kills a
process of the group (the out-of-memory killer, counted in `oom_kills`). `pids.max` caps its
processes and threads together. Both cgroup versions are handled: v1 (one hierarchy per
controller, `/sys/fs/cgroup/memory`, `/sys/fs/cgroup/pids`) and v2 (one unified hierarchy where
both controllers are enabled). The group is made below the grader's own in v1, beside it in v2
(where a group with processes cannot have children with controllers), so that a Slurm task's
limits still hold above it; only root, or a user to whom a v2 subtree is delegated, can make
one. `Cgroup.create` returns None where neither version allows it, `why_not()` says why.

Example:

    from course_tools.grade.jail import cgroups
    with cgroups.Cgroup.create(memory_mb=4096, pids=1024) as group:  # or None
        argv = group.join_command() + ["bwrap", ...]  # the sandbox starts inside it
        ...
        group.peak_mb(), group.oom_kills()
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

#: Where the cgroup file systems are mounted.
ROOT = Path("/sys/fs/cgroup")
#: A sandbox's group is named PREFIX<grader's pid>-<random>.
PREFIX = "course-grade-"
#: The controllers a sandbox's group uses.
CONTROLLERS = ("memory", "pids")
#: Run on the host: write the shell's own pid into each cgroup.procs given before "--", then exec
#: the rest (the sandbox), which every process it starts inherits.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def _own_path(controller: str, proc_cgroup: str) -> str | None:
    """This process's cgroup path for `controller` (v1), or for the unified hierarchy ("")."""
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path
    return None


def own_oom_kills(root: Path = ROOT, proc_cgroup: str | None = None) -> int:
    """The processes the out-of-memory killer took at the memory limit of this process's own
    memory cgroup or of one above it up to a Slurm job's (`job_<id>`; v1 or v2; the sum over
    them, 0 where unreadable; never a group above the job's, which other jobs share): a Slurm
    task's, where its kernel has no group of its own, tells that a kernel died at `--mem`."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return 0
    v1 = _own_path("memory", proc_cgroup)
    if v1 is not None and (root / "memory").is_dir():
        top, path, name = root / "memory", v1, "memory.oom_control"
    else:
        unified = root if (root / "cgroup.controllers").exists() else root / "unified"
        top, path, name = unified, _own_path("", proc_cgroup), "memory.events"
    if path is None:
        return 0
    folder, kills = top / path.lstrip("/"), 0
    chain = [folder, *folder.parents]
    jobs = [i for i, f in enumerate(chain) if f.name.startswith("job_")]
    for folder in chain[: jobs[0] + 1] if jobs else chain[:1]:
        with contextlib.suppress(OSError, ValueError):
            for line in (folder / name).read_text().splitlines():
                field, _, value = line.partition(" ")
                if field == "oom_kill":
                    kills += int(value)
    return kills


def _v1_folders(root: Path, proc_cgroup: str) -> dict[str, Path] | None:
    folders = {}
    for controller in CONTROLLERS:
        path = _own_path(controller, proc_cgroup)
        mount = root / controller
        if path is None or not (mount / "cgroup.procs").exists():
            return None
        folders[controller] = mount / path.lstrip("/")
    return folders


def _v2_parent(root: Path, proc_cgroup: str) -> Path | None:
    """The v2 group a sandbox's group goes in, or None: the parent of this process's own (a v2
    group that holds processes cannot enable controllers for children, so the sandbox's group
    is a sibling, still under every limit above), or the root when this process is in it."""
    path = _own_path("", proc_cgroup)
    unified = root if (root / "cgroup.controllers").exists() else root / "unified"
    if path is None or not (unified / "cgroup.controllers").exists():
        return None
    own = unified / path.lstrip("/")
    available = (own / "cgroup.controllers").read_text().split()
    if not all(c in available for c in CONTROLLERS):
        return None
    return own.parent if own != unified else unified


def _remove_stale(parent: Path) -> None:
    """Remove the empty groups left in `parent` by graders that are gone (killed before their
    clean-up, as a cancelled Slurm task is): they would keep Slurm from removing its own."""
    for folder in parent.glob(f"{PREFIX}*"):
        if _stale(folder):
            with contextlib.suppress(OSError):  # not empty yet: its processes are still dying
                folder.rmdir()


#: The most levels below a node's Slurm tree (`_slurm_tree`) a sandbox's group lies at (v1:
#: uid_<u>/job_<j>/step_<s>/task_<t>/<group>; v2: job_<j>/step_<s>/user/task_<t>/<group>).
SLURM_DEPTH = 6


def _stale(folder: Path) -> bool:
    """Whether `folder` (PREFIX<pid>-...) is a group of a grader that is gone."""
    pid = folder.name.removeprefix(PREFIX).split("-")[0]
    return pid.isdigit() and not psutil.pid_exists(int(pid))


def _slurm_tree(folder: Path, mount: Path) -> Path | None:
    """The node's Slurm tree `folder` lies in (its ancestor below `mount` named slurm*: v1's
    slurm_<node> or slurm, v2's slurmstepd.scope), or None outside Slurm."""
    for parent in folder.parents:
        if parent == mount or not parent.is_relative_to(mount):
            return None
        if parent.name.startswith("slurm"):
            return parent
    return None


def _remove_emptied(folder: Path, top: Path) -> None:
    """After a stale group in `folder` was removed: `folder` and its parents up to the Slurm job's
    own (job_<id>), each while it is empty and holds no process (rmdir refuses otherwise): the
    job's groups, which Slurm could not remove at the job's end while the stale group was in
    them. Never above the job's, never outside `top`."""
    chain = [f for f in [folder, *folder.parents] if f.is_relative_to(top) and f != top]
    jobs = [i for i, f in enumerate(chain) if f.name.startswith("job_")]
    for f in chain[: jobs[0] + 1] if jobs else []:
        try:
            f.rmdir()
        except OSError:
            return


def _remove_stale_slurm(folder: Path, mount: Path) -> None:
    """On a Slurm node: remove the groups of graders that are gone anywhere in the node's Slurm
    tree (`_slurm_tree`, `SLURM_DEPTH` levels), with the job's groups they kept Slurm from
    removing (`_remove_emptied`). A cancelled or timed-out task's grader can be killed before its
    clean-up, and the next task's group is made under another job's: `_remove_stale` alone, in
    the new group's parent, never sees them. Groups of others it may not remove are left."""
    top = _slurm_tree(folder, mount)
    if top is None:
        return
    stack = [(top, 0)]
    while stack:
        where, depth = stack.pop()
        try:
            with os.scandir(where) as listing:
                children = [Path(e.path) for e in listing if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for child in children:
            if child.name.startswith(PREFIX):
                if _stale(child):
                    try:
                        child.rmdir()
                    except OSError:  # not empty yet, or not this user's
                        continue
                    _remove_emptied(where, top)
            elif depth + 1 < SLURM_DEPTH:
                stack.append((child, depth + 1))


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _remove_made(folders: list[Path]) -> None:
    """Remove the folders of a group whose making failed half-way (no process joined them yet;
    the kernel's control files never keep a folder from going)."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def remove_own(root: Path = ROOT, proc: Path = Path("/proc/self"), seconds: float = 3) -> None:
    """Kill the processes of every group this process made (PREFIX<its pid>-...) and remove the
    groups, never raising: what a Slurm task's grader does first on SIGTERM (scancel, `--time`),
    before the SIGKILL that follows within KillWait seconds; after it, Slurm could not remove the
    job's own groups while these were in them."""
    with contextlib.suppress(OSError):
        proc_cgroup = (proc / "cgroup").read_text()
        v1 = _v1_folders(root, proc_cgroup)
        parent = None if v1 is not None else _v2_parent(root, proc_cgroup)
        parents = v1 or ({c: parent for c in CONTROLLERS} if parent is not None else {})
        names = {f.name for p in parents.values() for f in p.glob(f"{PREFIX}{os.getpid()}-*")}
        for name in names:
            group = Cgroup({c: p / name for c, p in parents.items()}, 1 if v1 else 2)
            with contextlib.suppress(OSError):
                group.remove(seconds)


def why_not(root: Path = ROOT) -> str:
    """Why a sandbox cannot get a cgroup here ("" when it can)."""
    try:
        probe = Cgroup.create(memory_mb=64, pids=16, root=root)
    except OSError as exc:
        return (
            f"cannot make a control group ({exc.strerror}): run as root, or in a cgroup v2 "
            "subtree delegated to you"
        )
    if probe is None:
        return (
            "no cgroup v1 memory and pids controllers, nor a cgroup v2 group with both "
            f"enabled, under {root}"
        )
    probe.remove()
    return ""


@dataclass
class Cgroup:
    """One sandbox's control group: a folder per v1 controller, or one v2 folder."""

    folders: dict[str, Path]
    version: int

    @classmethod
    def create(
        cls, *, memory_mb: int, pids: int, root: Path = ROOT, proc: Path = Path("/proc/self")
    ) -> Cgroup | None:
        """A new group below this process's own, limited to `memory_mb` (swap included) and
        `pids` tasks; None where the host has no usable cgroup. OSError: not allowed here, and
        whatever was made of the group is removed first. The groups that graders that are gone
        left in the new group's parent, and anywhere in a Slurm node's tree, are removed
        (`_remove_stale`, `_remove_stale_slurm`)."""
        proc_cgroup = (proc / "cgroup").read_text()
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        limit = str(memory_mb * 2**20)
        if (v1 := _v1_folders(root, proc_cgroup)) is not None:
            group = cls({c: folder / name for c, folder in v1.items()}, 1)
            made = []
            try:
                for controller, folder in group.folders.items():
                    _remove_stale(folder.parent)
                    _remove_stale_slurm(folder, root / controller)
                    folder.mkdir()
                    made.append(folder)
                memory = group.folders["memory"]
                _write(memory / "memory.limit_in_bytes", limit)
                with contextlib.suppress(OSError):  # without swap accounting: no swap to count
                    _write(memory / "memory.memsw.limit_in_bytes", limit)
                _write(group.folders["pids"] / "pids.max", str(pids))
            except BaseException:
                _remove_made(made)
                raise
            return group
        if (parent := _v2_parent(root, proc_cgroup)) is not None:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if not all(c in enabled for c in CONTROLLERS):
                _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
            group = cls({c: parent / name for c in CONTROLLERS}, 2)
            folder = group.folders["memory"]
            _remove_stale(parent)
            _remove_stale_slurm(
                folder, root if (root / "cgroup.controllers").exists() else root / "unified"
            )
            folder.mkdir()
            try:
                _write(folder / "memory.max", limit)
                with contextlib.suppress(OSError):
                    _write(folder / "memory.swap.max", "0")
                _write(folder / "pids.max", str(pids))
            except BaseException:
                _remove_made([folder])
                raise
            return group
        return None

    def __enter__(self) -> Cgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def join_command(self) -> list[str]:
        """A command prefix that moves itself into this group, then runs the rest."""
        procs = sorted({str(folder / "cgroup.procs") for folder in self.folders.values()})
        return ["sh", "-c", _JOIN, "sh", *procs, "--"]

    def _read(self, controller: str, name: str) -> str:
        with contextlib.suppress(OSError):
            return (self.folders[controller] / name).read_text()
        return ""

    def _count(self, controller: str, name: str, key: str) -> int:
        for line in self._read(controller, name).splitlines():
            field, _, value = line.partition(" ")
            if field == key:
                return int(value)
        return 0

    def peak_mb(self) -> float:
        """The most memory the group held at once (0 when the kernel does not say)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        text = self._read("memory", name).strip()
        return int(text) / 2**20 if text.isdigit() else 0.0

    def oom_kills(self) -> int:
        """Processes of the group the kernel killed at its memory limit."""
        if self.version == 1:
            return self._count("memory", "memory.oom_control", "oom_kill")
        return self._count("memory", "memory.events", "oom_kill")

    def pids_refused(self) -> int:
        """Processes or threads the group could not start at its task limit."""
        return self._count("pids", "pids.events", "max")

    def pids(self) -> list[int]:
        """The processes in the group, as the host numbers them."""
        found = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return sorted(found)

    def remove(self, seconds: float = 10) -> None:
        """Kill what is left in the group, then remove it (each folder once it is empty)."""
        deadline = time.monotonic() + seconds
        for folder in dict.fromkeys(self.folders.values()):
            while folder.exists():
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
