"""The grader's sandbox: the bubblewrap (`bwrap`) command line around every process that touches
a submission. It builds commands and knows nothing of notebooks (`grade.core.submission` runs a
notebook and its probe inside one).

A sandboxed process sees only what it needs, read-only: the system's programs and libraries
(`SYSTEM_FOLDERS`, and from /etc only `SYSTEM_ETC`: no keys, no other services' configuration),
the Python installation, the course's two packages and the prepared datasets. Nothing else of the
host exists in it: not the submissions, not the grades (the check process reads a copy of the
artifacts, shown at their path: `wrap`'s views), not the home folders, /srv, /mnt, /var or the
course checkout's solutions/ and history. It writes only to its own work folder and a private
/tmp (in memory, capped like /dev/shm in bytes, `TMP_MB`, `SHM_MB`, and in files,
`memory_folders`; /dev is read-only), has no network
(`--unshare-net`: not even the loopback of the host), lives in its own PID namespace
(everything it starts dies with it, and it cannot see or signal the grader or other
submissions), keeps no capabilities (so root inside cannot remount anything
writable), and is killed when the grader dies (`--die-with-parent`). The host's knobs are
read-only in it (/proc/sys, /proc/sysrq-trigger, /sys), and the host's control groups and network
devices are not in it at all (`MASKED`). It cannot use the kernel's keyrings, which
belong to no namespace (`seccomp`). Run as root, its code runs as a uid of its
own (`identity`), in the control group it is given (`cgroups`), with at most `NPROC` tasks and no
core dumps; which of these hold on a host, `limits` says.

Example:

    from course_tools.grade.jail import sandbox
    ok, detail = sandbox.status()  # (True, '/usr/bin/bwrap (bubblewrap 0.8.0)') here
    argv = sandbox.wrap(["python", "-c", "print(1)"], writable=[Path("/tmp/grade-alice")])
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from course_tools.grade.jail import identity, memory_folders, seccomp
from course_tools.grade.jail.cgroups import Cgroup
from course_tools.paths import PACKAGE_ROOT
from course_utils.settings import tfds_data_dir

#: The flag that grades without a sandbox, named after what it risks.
NO_SANDBOX_FLAG = "--no-sandbox-i-trust-these-notebooks"
#: The environment variables passed into a sandbox, by exact name (no prefixes: a variable the
#: grader's own environment happens to hold, such as a test's or a cluster's, stays out): the
#: course's settings, and what Python, TensorFlow and the locale need; never the grader's secrets.
KEPT_ENV = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "LC_NUMERIC",
        "TZ",
        "COURSE_PROFILE",
        "COURSE_DEVICES",
        "COURSE_DATA",
        "COURSE_ARTIFACTS",
        "TF_CPP_MIN_LOG_LEVEL",
        "TF_USE_LEGACY_KERAS",
        "TF_ENABLE_ONEDNN_OPTS",
        "TFDS_DATA_DIR",
        "KERAS_BACKEND",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "LD_LIBRARY_PATH",
        "XLA_FLAGS",
        "OMP_NUM_THREADS",
        "MPLBACKEND",
    }
)
#: Sizes of the sandbox's in-memory (tmpfs) folders, in MB: the private /tmp and /dev/shm, and the
#: empty folders covering the home folder and the hidden ones. The memory limit counts processes'
#: resident memory only, not files in a tmpfs: these caps bound what a submission can store there
#: (and `memory_folders.INODES` its number of files in /tmp and /dev/shm).
TMP_MB = 512
SHM_MB = 64
COVER_MB = 1


def _host_open_files() -> int:
    """The host's table of open files (`fs.file-max`), or a million where it cannot be read."""
    try:
        return int(Path("/proc/sys/fs/file-max").read_text())
    except (OSError, ValueError):
        return 2**20


#: The processes and threads a sandbox may have at once: its control group's `pids.max`, and,
#: run as root, its own uid's RLIMIT_NPROC. TensorFlow's thread pools grow with the cores (and
#: with each simulated device), so the cap does too; a fork or thread bomb stops there.
NPROC = 1024 + 32 * (os.cpu_count() or 1)
#: The files a process of the sandbox may hold open (RLIMIT_NOFILE): with `NPROC` processes, a
#: sandbox holds at most a quarter of the host's table of open files (`fs.file-max`), which every
#: process shares (one that fills it stops every other's `open`); at most Linux's usual 1,024,
#: at least 256 (a kernel uses about a hundred). Through descriptors only: a file mapped into
#: memory stays open once its descriptor is closed, and no rlimit counts those (processes times
#: `vm.max_map_count` bound them, and the control group's memory limit where there is one).
NOFILE = max(256, min(1024, _host_open_files() // (4 * NPROC)))
#: Written to, the kernel's magic SysRq trigger reboots or crashes the host.
SYSRQ = "/proc/sysrq-trigger"
#: The kernel's lists of keys and of their users, which name the keys of every keyring the
#: process can view: read as empty in a sandbox.
KEY_LISTINGS = ("/proc/keys", "/proc/key-users")
#: Folders of /sys a sandbox sees empty (an empty read-only tmpfs over each): every control
#: group's memory use and host pids (other graders' sandboxes and jobs among them), and the
#: host's network devices. Nothing the course runs needs them (`timing.usable_cpus` then counts
#: the CPUs the affinity allows).
MASKED = ("/sys/fs/cgroup", "/sys/class/net", "/sys/devices/virtual/net")


#: The host's folders a sandbox sees (read-only; a symbolic link such as /bin -> usr/bin is made
#: again inside), and the files and folders of /etc that programs read (the loader's cache, users,
#: time zone, fonts, certificates), not the rest (service keys such as munge's, passwords).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
SYSTEM_ETC = (
    "alternatives",
    "fonts",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "ssl",
    "timezone",
)
#: The course's packages under PACKAGE_ROOT that a sandbox reads.
COURSE_PACKAGES = ("course_utils", "course_tools")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or does not work here; the message says what to do."""


@cache
def status() -> tuple[bool, str]:
    """(True, "path (version)") when bubblewrap works on this machine, else (False, why not)."""
    path = shutil.which("bwrap")
    if path is None:
        return False, (
            "bubblewrap (bwrap) is not installed: install it (Debian/Ubuntu: apt-get install "
            "bubblewrap; Fedora: dnf install bubblewrap); it needs Linux"
        )
    try:
        probe = subprocess.run(
            [path, *_namespace_flags(), "--ro-bind", "/", "/", *_tmpfs("/tmp", 1), "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        version = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{path} cannot run: {exc}"
    if "--size" in probe.stderr:
        return False, (
            f"{path} ({version}) is too old: the grader needs bubblewrap 0.5.0 or newer "
            "(--size, to cap the sandbox's /tmp); install a newer one"
        )
    if probe.returncode != 0:
        return False, (
            f"{path} is installed but cannot create a sandbox here ({probe.stderr.strip()[:200]}): "
            "unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone"
            "=1, or run as root), or this is a container that forbids them"
        )
    return True, f"{path} ({version or 'bubblewrap'})"


def require() -> str:
    """The path of a working bwrap, or SandboxUnavailable with what to do."""
    ok, detail = status()
    if not ok:
        raise SandboxUnavailable(
            f"cannot grade safely: {detail}. Submissions are untrusted code; without the sandbox "
            f"they run with your rights and can read your files, use the network and change other "
            f"students' grades. To grade anyway (only notebooks you trust), pass {NO_SANDBOX_FLAG}."
        )
    return shutil.which("bwrap") or "bwrap"


@cache
def _empty_file() -> Path:
    """An empty file of this process's own (removed at exit; named with its pid, for a grader
    killed before its exit: `supervised`), to read in place of another."""
    handle, name = tempfile.mkstemp(prefix=f"course-grade-empty-{os.getpid()}-")
    os.fchmod(handle, 0o444)  # the sandbox's own uid reads it
    os.close(handle)
    atexit.register(os.unlink, name)
    return Path(name)


def _namespace_flags() -> list[str]:
    return [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        # the host's pid of the grader means nothing in the sandbox's PID namespace: ipykernel
        # would take it for a dead parent (--die-with-parent does that job)
        "--unsetenv",
        "JPY_PARENT_PID",
    ]


def _tmpfs(folder: str | Path, size_mb: int) -> list[str]:
    """bwrap options mounting an empty tmpfs of at most `size_mb` at `folder`."""
    return ["--size", str(size_mb * 2**20), "--tmpfs", str(folder)]


def _cover(folder: str | Path) -> list[str]:
    """bwrap options covering `folder` with an empty read-only tmpfs. Read-only also as an
    ordinary user, to whose uid bubblewrap's tmpfs belongs (in its user namespace): writable, it
    would hold millions of files (a tmpfs's inodes grow with the host's memory), each about a
    kilobyte of kernel memory that no limit counts (`memory_folders` caps only /tmp and
    /dev/shm); `--remount-ro /dev` or `/` does not reach a mount on top of it."""
    return [*_tmpfs(folder, COVER_MB), "--remount-ro", str(folder)]


def _read_only_keep() -> list[Path]:
    """What a sandboxed Python reads besides the system: its installation, the course's packages
    and the prepared datasets."""
    keep = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parents[1]}
    keep |= {PACKAGE_ROOT / name for name in COURSE_PACKAGES}
    data_dir = str(tfds_data_dir())
    if Path(data_dir).is_dir():
        keep.add(Path(data_dir))
    return sorted(p.resolve() for p in keep if p.exists())


def course_private() -> list[Path]:
    """What a submission must not read in the course checkout it is graded from: the solutions,
    build/ (executed copies, benchmark results, grades kept there) and the git history, also when
    .git is a file pointing elsewhere (a worktree). None of it is bound into a sandbox; `wrap`
    covers what of it lies inside a folder that is."""
    root = PACKAGE_ROOT
    private = [root / "solutions", root / "build", root / ".git"]
    git = root / ".git"
    if git.is_file():
        # "gitdir: <path>"; that folder's "commondir" names the repository's own .git
        text = git.read_text().strip()
        if text.startswith("gitdir:"):
            gitdir = (root / text.removeprefix("gitdir:").strip()).resolve()
            private.append(gitdir)
            common = gitdir / "commondir"
            if common.is_file():
                private.append((gitdir / common.read_text().strip()).resolve())
    return [path for path in private if path.exists()]


def _system() -> list[str]:
    """bwrap options binding `SYSTEM_FOLDERS` and `SYSTEM_ETC` read-only (links made again), in
    an /etc of 0755 (bubblewrap would make it 0700, which the sandbox's own uid cannot enter)."""
    args = ["--perms", "0755", "--dir", "/etc"]
    system = list(SYSTEM_FOLDERS) + [f"/etc/{name}" for name in SYSTEM_ETC]
    for path in system:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _parents(folders: Sequence[Path]) -> list[str]:
    """bwrap options making every folder above `folders` traversable (0755): bubblewrap makes
    the missing ones 0700, which the sandbox's own uid could not enter."""
    parents = {parent for folder in folders for parent in folder.parents if parent != Path("/")}
    args = []
    for parent in sorted(parents, key=lambda p: len(p.parts)):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _in_order(
    binds: list[tuple[str, Path, Path]], views: Mapping[Path, Path]
) -> list[tuple[str, Path, Path]]:
    """`binds` (option, host folder, where) in mount order: a folder before the folders inside
    it, so a view (say the grades' path, when `--out` holds the course checkout or the datasets)
    never covers what is bound inside it. A bind inside a view needs its mount point in the
    view's host folder (read-only in the sandbox): made here, 0755, when missing."""
    for _, _, target in binds:
        for where, host in views.items():
            if target != where and target.is_relative_to(where):
                point = host / target.relative_to(where)
                missing = [point, *point.parents]
                missing = missing[: missing.index(host)] if host in missing else []
                for folder in reversed(missing):
                    if not folder.is_dir():
                        folder.mkdir()
                        os.chmod(folder, 0o755)  # whatever the umask: bubblewrap enters it
    return sorted(binds, key=lambda bind: len(bind[2].parts))


def wrap(  # noqa: PLR0913
    argv: Sequence[str],
    *,
    writable: Sequence[Path] = (),
    read_only: Sequence[Path] = (),
    views: Mapping[Path, Path] | None = None,
    hidden: Sequence[Path] = (),
    cwd: Path | None = None,
    cgroup: Cgroup | None = None,
    nproc: int | None = NPROC,
) -> list[str]:
    """`argv` prefixed with the bwrap command line of the sandbox described in this module.

    writable: folders bound read-write (the submission's work folder), at the same path.
    read_only: folders bound read-only, at the same path; their modes are the host's (the
    sandbox's own uid reads only what every account may), and never changed.
    views: folders bound read-only at another path, {path in the sandbox: host folder} (the
    check process sees the staged copy of the artifacts at the grades' path: `staging`); what
    else is bound inside one stays visible there (`_in_order`).
    hidden: folders that must look empty, and files that must read as empty, should they lie
    inside a bound folder (other submissions' work folders, the grades, the solution with its
    hidden tests). `course_private()` is always among them.
    cgroup: the control group the sandbox starts in (`cgroups.Cgroup`), or None.
    nproc: the tasks its uid may have (RLIMIT_NPROC), run as root.
    """
    bwrap = require()
    uid = identity.fresh_uid() if identity.privileged() else None
    args = [bwrap, *_namespace_flags(), *_system(), "--dev", "/dev", "--proc", "/proc"]
    # host-wide knobs: read-only even to a root that has capabilities (/proc/irq and /proc/bus
    # bubblewrap covers itself)
    args += ["--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", *[SYSRQ] * 2]
    # the names of the keys the grader's user holds (their contents the seccomp filter keeps)
    for listing in KEY_LISTINGS:
        args += ["--ro-bind-try", str(_empty_file()), listing]  # /proc allows no device node
    for folder in MASKED:
        if os.path.isdir(folder):
            args += _cover(folder)
    # --dev's tmpfs (and /dev/shm, a folder of it) has no size limit: read-only, /dev/shm capped;
    # both in-memory folders writable by whoever the sandbox runs as, like a host's
    # no pseudo-terminals: the host's count of them is shared (a kernel needs none); read-only,
    # as every cover (`_cover`)
    args += _cover("/dev/pts")
    args += ["--remount-ro", "/dev", "--perms", "01777", *_tmpfs("/dev/shm", SHM_MB)]
    args += ["--perms", "01777", *_tmpfs("/tmp", TMP_MB)]
    bound = _read_only_keep() + [Path(p).resolve() for p in read_only]
    writable = [Path(p).resolve() for p in writable]
    shown_as = {
        Path(where).resolve(): Path(host).resolve() for where, host in (views or {}).items()
    }
    args += _parents(bound + writable + list(shown_as))
    binds = [("--ro-bind", folder, folder) for folder in bound]
    binds += [("--bind", folder, folder) for folder in writable]
    binds += [("--ro-bind", host, where) for where, host in shown_as.items()]
    for option, host, target in _in_order(binds, shown_as):
        args += [option, str(host), str(target)]
    # (host folder, where the sandbox sees it) of every bind
    seen = [(p, p) for p in [*bound, *writable, *map(Path, SYSTEM_FOLDERS)]]
    seen += [(host, where) for where, host in shown_as.items()]
    private = [Path(path).resolve() for path in [*hidden, *course_private()]]
    shown = list(  # where the binds above bring private paths into the sandbox: each a cover
        dict.fromkeys(
            (path, where / path.relative_to(host))
            for path in private
            for host, where in seen
            if path.is_relative_to(host) and path != host
        )
    )
    # only folders that really get a cover
    covered = [inside for path, inside in shown if path.is_dir()]
    for path, inside in shown:
        if any(inside.is_relative_to(folder) and inside != folder for folder in covered):
            continue  # inside another cover: empty, and read-only (no mount point made there)
        if path.is_dir():
            args += _cover(inside)
        elif path.is_file():
            args += ["--ro-bind", "/dev/null", str(inside)]
    # the sandbox's own root (a tmpfs holding the mount points) read-only: not a place to store
    # data out of the memory limit's sight
    args += ["--remount-ro", "/"]
    if cwd is not None:
        args += ["--chdir", str(Path(cwd).resolve())]
    if uid is not None:
        # what `identity.enter` needs to hand over the work folder and drop to `uid`, and
        # `memory_folders` to mount; bwrap keeps them for its child only, and the drop ends them
        for cap in (*identity.ENTER_CAPS, *memory_folders.ENTER_CAPS):
            args += ["--cap-add", cap]
    join = cgroup.join_command() if cgroup is not None else []
    sizes = {"/tmp": TMP_MB, "/dev/shm": SHM_MB}
    if uid is not None:
        enter = identity.enter(uid, writable=writable, nproc=nproc, nofile=NOFILE)
        step = memory_folders.command(sizes, nest=False)
        return [*join, *seccomp.with_filter([*args, *step, *enter, *argv])]
    # an ordinary user: the step loads the filter itself, after the namespace it makes
    tasks = None if nproc is None else nproc + identity.user_tasks()  # all of the user's count
    enter = identity.enter(None, nproc=tasks, nofile=NOFILE)
    step = memory_folders.command(sizes, nest=True, nproc=nproc, program=seccomp.program())
    return [*join, *args, *enter, *step, *argv]


def kernel_env(env: dict[str, str], home: Path) -> dict[str, str]:
    """The environment of a sandboxed process: only `KEPT_ENV` from `env`, HOME set to `home`."""
    kept = {key: value for key, value in env.items() if key in KEPT_ENV}
    data_dir = str(tfds_data_dir(env))
    if Path(data_dir).is_dir():
        kept["TFDS_DATA_DIR"] = data_dir  # HOME moves: keep reading the instructor's datasets
    return {**kept, "HOME": str(home), "TMPDIR": "/tmp", "PYTHONNOUSERSITE": "1"}
