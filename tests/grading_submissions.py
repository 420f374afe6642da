"""Submissions for the grader's tests, made from the solution by small edits (like real mistakes),
and hostile ones (a survivor process, tampering, escapes, floods, bombs), shared by
tests/test_grading.py (the local grader) and tests/test_slurm_grading.py (the Slurm job array).
"""

from __future__ import annotations

import copy
import re
import secrets
from pathlib import Path

import nbformat
import psutil
from helpers import ROOT

from course_tools import exercise

SOLUTION = ROOT / "solutions" / "05_svhn_solution.ipynb"
EXERCISE = ROOT / "exercises" / "05_svhn_exercise.ipynb"
ENV = {"COURSE_PROFILE": "quick", "COURSE_DEVICES": "2", "COURSE_DATA": "synthetic"}


def completed_exercise() -> nbformat.NotebookNode:
    """What a perfect student hands in: the exercise with every stub and the answer filled in."""
    solution = nbformat.read(SOLUTION, as_version=4)
    by_id = {cell.id: cell for cell in solution.cells}
    notebook = exercise.make_exercise(solution)
    for cell in notebook.cells:
        original = by_id[cell.id].source
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in original:
            cell.source = "\n".join(
                line
                for line in original.splitlines()
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
            )
        elif exercise.ANSWER_PLACEHOLDER in cell.source:
            answer = re.search(r"-->\n(.*)\n<!--", original, re.DOTALL)[1]
            cell.source = cell.source.replace(exercise.ANSWER_PLACEHOLDER, answer)
    return notebook


def edit(notebook, old: str, new: str) -> nbformat.NotebookNode:
    """A copy with `old` replaced by `new` in the one code cell that contains it."""
    notebook = copy.deepcopy(notebook)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code" and old in cell.source]
    assert len(cells) == 1, f"{old!r} is in {len(cells)} code cells, expected 1: update the fixture"
    cells[0].source = cells[0].source.replace(old, new)
    return notebook


def restub(notebook, marker: str) -> nbformat.NotebookNode:
    """A copy where the cell containing `marker` is back to the exercise's stub (part not done)."""
    notebook = copy.deepcopy(notebook)
    stubs = {cell.id: cell.source for cell in nbformat.read(EXERCISE, as_version=4).cells}
    cells = [cell for cell in notebook.cells if marker in cell.source]
    assert len(cells) == 1
    cells[0].source = stubs[cells[0].id]
    return notebook


def write(notebook, path: Path) -> Path:
    nbformat.write(notebook, path)
    return path


#: Marks everything the hostile submissions of this session create (files, process command lines).
TOKEN = f"hostile-{secrets.token_hex(6)}"


def notebook_of(*sources: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return notebook


# A process that outlives its kernel (double fork, new session) and deletes every saved model and
# results file it can see, for 15 minutes. Its command line carries TOKEN.
SURVIVOR_LOOP = """# TOKEN
import glob, os, sys, time
end = time.time() + 900
while time.time() < end:
    for pattern in ("/tmp/**/*.keras", "/tmp/**/results.json", "OUT/**/*.keras"):
        for path in glob.glob(pattern, recursive=True):
            try:
                os.remove(path)
            except OSError:
                pass
    time.sleep(0.2)
"""
SURVIVOR = """
import os, sys
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", CODE])
    os._exit(0)
os.waitpid(child, 0)
print("survivor started")
"""

# Looks for the other kernels' connection files for 25 s and sends each one code that deletes its
# artifacts.
CROSS_KERNEL = """
import glob, json, os, time
from jupyter_client import BlockingKernelClient
mine = os.path.realpath(".kernel/kernel.json")
patterns = ["/tmp/course-grade-*/*/.kernel/kernel.json", "/tmp/*/kernel*.json",
            "/tmp/*/*/kernel*.json", os.path.expanduser("~/.local/share/jupyter/runtime/*.json"),
            "/run/user/*/jupyter/runtime/*.json"]
seen, attacked = set(), []
end = time.time() + 25
while time.time() < end:
    for path in {p for pattern in patterns for p in glob.glob(pattern)} - seen - {mine}:
        seen.add(path)
        try:
            client = BlockingKernelClient(connection_file=path)
            client.load_connection_file()
            client.start_channels()
            client.execute("import os, shutil; "
                           "shutil.rmtree(os.environ['COURSE_ARTIFACTS'], ignore_errors=True)")
            attacked.append(path)
        except Exception:
            pass
    time.sleep(0.5)
print("CROSS", json.dumps({"found": sorted(seen), "attacked": attacked}))
"""

# Changes the installed package and the solution, patches the grader's checks in its own kernel
# (their probe too, to report made-up facts), fakes results and prints "PASSED".
TAMPER = """
import json, os, pathlib
import course_utils
package = pathlib.Path(course_utils.__file__).parent
attempts = {}
for target in [package.parent / "course_tools" / "checks.py", package / "__init__.py",
               package.parent / "solutions" / "05_svhn_solution.ipynb",
               package / "TOKEN.py"]:
    try:
        with open(target, "a") as handle:
            handle.write("# TOKEN")
        attempts[target.name] = "written"
    except OSError as exc:
        attempts[target.name] = type(exc).__name__
print("TAMPER", json.dumps(attempts))
import course_tools.checks as checks
checks.CheckError = Warning
checks.own_model = lambda *args, **kwargs: None
# made-up facts for the grader's probe: fit_model "mirrored" over 2 devices (there is no fit_model)
forged = {"variables": 8, "distributed_variables": 8, "replicas": 2, "fingerprint": "forged"}
checks.probe = lambda *args, **kwargs: {"models": {"fit_model": forged}, "datasets": {}}
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
artifacts.mkdir(parents=True, exist_ok=True)
(artifacts / "results.json").write_text(json.dumps({"fit": {"test_accuracy": 1.0}}))
print("PASSED: 12/12 hidden tests passed")
"""

# Network, and writes outside the work folder.
ESCAPE = """
import json, os, pathlib, socket
report = {}
for name, address in [("dns", ("pypi.org", 443)), ("ip", ("1.1.1.1", 53)),
                      ("host", ("127.0.0.1", HOST_PORT))]:
    try:
        socket.create_connection(address, timeout=3).close()
        report[name] = "reachable"
    except OSError:
        report[name] = "blocked"
for folder in [pathlib.Path.home(), pathlib.Path("OUT"), pathlib.Path("ROOT"),
               pathlib.Path("/tmp"), pathlib.Path("/var/tmp")]:
    try:
        (folder / "TOKEN").write_text("escaped")
        report[str(folder)] = "written"
    except OSError as exc:
        report[str(folder)] = type(exc).__name__
print("ESCAPE", json.dumps(report))
"""

FLOOD = "for _ in range(300):\n    print('x' * 1_000_000)  # 300 MB"
# Past the notebook's output caps: straight to the kernel process's stdout and stderr (20 MB).
FD_FLOOD = (
    "import os\nfor _ in range(10_000):\n    os.write(1, b'x' * 1000)\n    os.write(2, b'y' * 1000)"
)

# A zip bomb saved as the fit model (300 MB of zeros in about 300 KB), and symbolic links.
BOMB = """
import json, os, pathlib, zipfile
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
artifacts.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(artifacts / "fit_model.keras", "w", zipfile.ZIP_DEFLATED) as archive:
    with archive.open("model.weights.h5", "w", force_zip64=True) as member:
        for _ in range(300):
            member.write(bytes(2**20))
    archive.writestr("config.json", "{}")
(artifacts / "results.json").write_text(json.dumps({"fit": {"test_accuracy": 0.9}}))
os.symlink("/etc/passwd", artifacts / "custom_model.keras")
os.symlink("/", artifacts / "everything")
"""

DEAF = (
    "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "while True:\n    time.sleep(0.05)"
)


def fill(source: str, out: Path) -> str:
    return source.replace("TOKEN", TOKEN).replace("OUT", str(out)).replace("ROOT", str(ROOT))


def survivors() -> list[psutil.Process]:
    """Live processes whose command line carries TOKEN."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if TOKEN in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except psutil.Error:
            pass
    return found
