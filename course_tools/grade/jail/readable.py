"""Whether the sandbox's own uid can read what every sandboxed process needs, checked once before
a batch grades anything.

Run as root, kernels and the check process run as a uid of their own (`identity`), and
`sandbox.wrap` binds the course's packages, the Python installation and the datasets with the
host's modes, which it never changes. A checkout, a venv or a data folder made under a root
umask of 027 or 077 is closed to that uid: the check process could not start and every
submission would look like it failed. So `check` runs one sandboxed Python, wrapped as the
kernels are, that imports `course_utils` and the check process's module, finds Keras and
TensorFlow, lists the data folder and walks, always, the course's packages and the venv's
site-packages for a file or folder its uid cannot open (`os.access`: a stat, nothing read; a
second or two for the course's venv, some 54,000 entries): a single module left 0600 by a `git
pull` under umask 077, imported only later by a kernel or the hidden tests, would score every
submission near zero.
When something fails, `Unreadable` names the first path it could not read and the fix. An
ordinary user's sandboxes run as that user, who reads what the grader reads: nothing to check.

Example:

    from course_tools.grade.jail import readable
    readable.check(env)  # None, or Unreadable("... cannot read /srv/course/course_tools ...")
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from course_tools.grade.jail import identity, sandbox
from course_tools.paths import PACKAGE_ROOT

#: Seconds the check may take (importing the grader's modules takes a few).
TIMEOUT_S = 120
#: The most entries looked at in one folder's walk for the unreadable one.
WALK_LIMIT = 200_000

#: Run in the sandbox: argv[1] is the JSON list of folders always walked, argv[2] of those walked
#: too when something fails. Prints "ok", or one JSON line {"found": {folder: its first
#: unreadable path}, "error": what failed}.
PROBE = r"""
import importlib.util, json, os, sys

def first_unreadable(root, limit):
    if not os.access(root, os.R_OK | os.X_OK):
        return root
    seen = 0
    for top, folders, files in os.walk(root, onerror=lambda exc: None):
        folders[:] = [f for f in folders if f != "__pycache__"]  # a cache: never needed
        for name in folders + files:
            path = os.path.join(top, name)
            folder = name in folders
            if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
                return path
            seen += 1
            if seen >= limit:
                return None
    return None

try:
    import course_utils
    import course_tools.grade.core.checker
    for name in ("keras", "tensorflow"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"no module named {name}")
        open(spec.origin, "rb").close()
    data = os.environ.get("TFDS_DATA_DIR")
    if data:
        os.listdir(data)
    for root in json.loads(sys.argv[1]) + [data] * bool(data):
        found = first_unreadable(root, %(limit)d)
        if found:
            raise PermissionError(f"cannot read {found}")
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"[:300]
    found = {}
    for root in json.loads(sys.argv[1]) + json.loads(sys.argv[2]):
        path = first_unreadable(root, %(limit)d)
        if path:
            found[root] = path
    print(json.dumps({"found": found, "error": error}))
    sys.exit(1)
print("ok")
"""


class Unreadable(sandbox.SandboxUnavailable):
    """The sandbox's own uid cannot read the course, Python or the data; says what to do."""


def _always(env: Mapping[str, str]) -> list[str]:
    """What is walked on every check: the course's packages and the venv's site-packages (what
    kernels and the hidden tests import after the check's own imports). The datasets are walked
    by the probe itself, from the sandbox's TFDS_DATA_DIR."""
    folders = [PACKAGE_ROOT / name for name in sandbox.COURSE_PACKAGES]
    folders += [Path(sysconfig.get_path(name)) for name in ("purelib", "platlib")]
    return list(dict.fromkeys(str(folder.resolve()) for folder in folders))


def _folders(env: Mapping[str, str]) -> list[str]:
    """Where else to look, once something failed: the datasets, the Python installation (the
    venv first)."""
    folders = []
    data = env.get("TFDS_DATA_DIR")
    if data:
        folders.append(Path(data))
    folders += [Path(sys.prefix), Path(sys.base_prefix)]
    return list(dict.fromkeys(str(folder.resolve()) for folder in folders))


def check(env: Mapping[str, str]) -> None:
    """Raise `Unreadable` when a sandboxed process, run as root's fresh uid with `env` (the
    batch's settings), cannot import the course and the grader, list the data folder, or open
    every file and folder of the course's packages, the venv's site-packages and the data."""
    if not identity.privileged():
        return
    env = sandbox.kernel_env(dict(env), home=Path("/tmp"))
    code = PROBE % {"limit": WALK_LIMIT}
    walked = [json.dumps(_always(env)), json.dumps(_folders(env))]
    argv = sandbox.wrap([sys.executable, "-c", code, *walked], cwd=Path("/tmp"))
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise Unreadable(
            f"cannot grade: the sandbox's check that it reads the course took over {TIMEOUT_S} s"
        ) from None
    if done.returncode == 0 and done.stdout.strip() == "ok":
        return
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        found, error = dict(answer["found"]), str(answer["error"])
    except (IndexError, ValueError, KeyError, TypeError):
        found, error = {}, (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    where = ", ".join(found.values()) or "the course checkout, its venv or the data folder"
    roots = " ".join(found) or "<that folder>"
    raise Unreadable(
        f"cannot grade: the sandbox runs each notebook and the hidden tests as a uid of its own, "
        f"which cannot read {where} ({error}); every submission would fail. Make them readable "
        f"to every account: chmod -R o+rX {roots} (or clone the course and make its venv under "
        "umask 022), then run the same command again"
    )
