"""The grader's sandbox: bubblewrap (`bwrap`) around every process that touches a submission.

A sandboxed process sees the machine read-only (the course package, the solution and the Python
installation included), writes only to its own work folder and a private /tmp (in memory, capped
like /dev/shm: `TMP_MB`, `SHM_MB`; /dev is read-only), has no network
(`--unshare-net`: not even the loopback of the host), lives in its own PID namespace (everything it
starts dies with it, and it cannot see or signal the grader or other submissions), keeps no
capabilities (so root inside cannot remount anything writable), and is killed when the grader dies
(`--die-with-parent`). Folders it must not read are covered with empty ones: the other submissions'
work folders, the grades, the course's solutions/, build/ and git history (`course_private`), and
the home folder (the Python installation and the course are bound back read-only when they live
there).

`run_submission` runs a submitted notebook in such a sandbox with the course's notebook runner,
then the solution's hidden probe in the same kernel.

Example:
    >>> from course_tools import sandbox
    >>> sandbox.status()
    (True, '/usr/bin/bwrap (bubblewrap 0.8.0)')
    >>> argv = sandbox.wrap(["python", "-c", "print(1)"], writable=[Path("/tmp/grade-alice")],
    ...                     hidden=[Path("/tmp/grades")])
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from course_tools import checks
from course_tools.paths import PACKAGE_ROOT
from course_tools.runner import Limits, RunOutcome, run_notebook
from course_utils.settings import tfds_data_dir

#: The flag that grades without a sandbox, named after what it risks.
NO_SANDBOX_FLAG = "--no-sandbox-i-trust-these-notebooks"
#: Environment variables passed into a sandbox (exact names, or prefixes ending in "_"): the
#: course's settings and what Python and TensorFlow need, never the grader's secrets.
KEPT_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_",
    "TZ",
    "COURSE_",
    "TF_",
    "TFDS_DATA_DIR",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "CUDA_",
    "NVIDIA_",
    "LD_LIBRARY_PATH",
    "XLA_FLAGS",
    "OMP_NUM_THREADS",
    "MPLBACKEND",
)
#: Sizes of the sandbox's in-memory (tmpfs) folders, in MB: the private /tmp and /dev/shm, and the
#: empty folders covering the home folder and the hidden ones. The memory limit counts processes'
#: resident memory only, not files in a tmpfs: these caps bound what a submission can store there.
TMP_MB = 512
SHM_MB = 64
COVER_MB = 1


#: Run before the probe: `course_tools.checks` loaded again from its (read-only) file, so
#: that functions the notebook replaced in its copy of the module are not the ones the probe calls.
#: Only that: the probe still runs in the submission's own Python, after its code (see `batch`).
FRESH_CHECKS = """
import importlib.util as _util, sys as _sys
_spec = _util.spec_from_file_location("course_tools.checks", {path!r})
_checks = _util.module_from_spec(_spec)
_spec.loader.exec_module(_checks)
_sys.modules["course_tools.checks"] = _checks
import course_tools as _tools
_tools.checks = _checks
"""


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


def _read_only_keep() -> list[Path]:
    """Folders a sandboxed Python must read even when they sit under a hidden folder."""
    keep = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parents[1]}
    keep.add(PACKAGE_ROOT)
    data_dir = str(tfds_data_dir())
    if Path(data_dir).is_dir():
        keep.add(Path(data_dir))
    return sorted(p.resolve() for p in keep)


def course_private() -> list[Path]:
    """What a submission must not read in the course checkout it is graded from: the solutions,
    build/ (executed copies, benchmark results, grades kept there) and the git history (every
    version of the solution), also when .git is a file pointing elsewhere (a worktree)."""
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


def wrap(
    argv: Sequence[str],
    *,
    writable: Sequence[Path] = (),
    read_only: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
    hidden_files: Sequence[Path] = (),
    cwd: Path | None = None,
) -> list[str]:
    """`argv` prefixed with the bwrap command line of the sandbox described in this module.

    writable: folders bound read-write (the submission's work folder), at the same path.
    read_only: folders bound read-only (the grades, for the check process), even under /tmp.
    hidden: folders replaced by an empty tmpfs (other submissions, grades); the home folder and
    `course_private()` are always hidden, with the Python installation, the course and the
    datasets bound back read-only.
    hidden_files: files that read as empty (the solution with its hidden tests).
    """
    bwrap = require()
    args = [bwrap, *_namespace_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # --dev's tmpfs (and /dev/shm, a folder of it) has no size limit: read-only, /dev/shm capped
    args += ["--remount-ro", "/dev", *_tmpfs("/dev/shm", SHM_MB), *_tmpfs("/tmp", TMP_MB)]
    private = [Path.home().resolve(), Path("/tmp")]
    home = private[0]
    if home != Path("/") and home.is_dir() and home != Path("/tmp"):
        # covered first, then what Python and the course need is bound back
        args += _tmpfs(home, COVER_MB)
    for folder in _read_only_keep():
        if any(folder.is_relative_to(p) for p in private):
            args += ["--ro-bind", str(folder), str(folder)]
    # after the binds above: a grades folder inside the course stays hidden
    for folder in [*hidden, *course_private()]:
        if Path(folder).is_dir():
            args += _tmpfs(Path(folder).resolve(), COVER_MB)
        elif Path(folder).is_file():
            args += ["--ro-bind", "/dev/null", str(Path(folder).resolve())]
    for folder in read_only:
        folder = Path(folder).resolve()
        args += ["--ro-bind", str(folder), str(folder)]
    for path in hidden_files:
        if Path(path).is_file():
            args += ["--ro-bind", "/dev/null", str(Path(path).resolve())]
    for folder in writable:
        folder = Path(folder).resolve()
        args += ["--bind", str(folder), str(folder)]
    if cwd is not None:
        args += ["--chdir", str(Path(cwd).resolve())]
    return [*args, *argv]


def kernel_env(env: dict[str, str], home: Path) -> dict[str, str]:
    """The environment of a sandboxed process: only `KEPT_ENV` from `env`, HOME set to `home`."""
    kept = {
        key: value
        for key, value in env.items()
        if any(key == name or (name.endswith("_") and key.startswith(name)) for name in KEPT_ENV)
    }
    data_dir = str(tfds_data_dir(env))
    if Path(data_dir).is_dir():
        kept["TFDS_DATA_DIR"] = data_dir  # HOME moves: keep reading the instructor's datasets
    return {**kept, "HOME": str(home), "TMPDIR": "/tmp", "PYTHONNOUSERSITE": "1"}


def _read_facts(outcome: RunOutcome, marker: str) -> tuple[dict, str]:
    if outcome.extra_error:
        return {}, outcome.extra_error
    for line in outcome.extra_output.splitlines():
        if line.startswith(marker):
            try:
                return json.loads(line[len(marker) :]), ""
            except ValueError as exc:
                return {}, f"unreadable facts: {exc}"
    return {}, "the probe printed no facts"


def run_submission(
    notebook,
    workdir: Path,
    env: dict[str, str],
    limits: Limits,
    *,
    probe_source: str = "",
    log_path: Path | None = None,
    sandboxed: bool = True,
    hidden: Sequence[Path] = (),
    hidden_files: Sequence[Path] = (),
    cancel: threading.Event | None = None,
) -> tuple[RunOutcome, dict, str]:
    """Execute `notebook` in a fresh kernel in `workdir` (errors allowed), then the probe there.

    Returns the run's outcome, the facts the probe found and why it found none ("" if it did).
    sandboxed: the kernel runs in the sandbox, where only `workdir` is writable and `hidden`
    folders and `hidden_files` look empty; its connection file and sockets go in `workdir/.kernel`.
    cancel: once set, the kernel is killed (`run_notebook`).
    """
    workdir = Path(workdir).resolve()
    connection = workdir / ".kernel"
    connection.mkdir(parents=True, exist_ok=True)
    kernel_wrap = None
    if sandboxed:
        env = kernel_env(env, home=workdir)

        def kernel_wrap(argv: list[str]) -> list[str]:
            return wrap(
                argv, writable=[workdir], hidden=hidden, hidden_files=hidden_files, cwd=workdir
            )

    marker = f"@@facts-{secrets.token_hex(8)}@@"
    probe = ""
    if probe_source:
        fresh = FRESH_CHECKS.format(path=str(Path(checks.__file__).resolve()))
        probe = (
            f"{fresh}\n{probe_source}\nimport json as _json\nprint({marker!r} + _json.dumps(FACTS))"
        )
    outcome = run_notebook(
        notebook,
        workdir,
        env,
        limits=limits,
        connection_dir=connection,
        wrap=kernel_wrap,
        extra_cell=probe,
        log_path=log_path,
        cancel=cancel,
    )
    facts, probe_error = _read_facts(outcome, marker) if probe_source else ({}, "")
    return outcome, facts, probe_error
