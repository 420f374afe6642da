"""The jail around student code (`course_tools.grade.jail`), attacked from inside as root would
run it (CI, containers and Slurm nodes do): every host-wide write a process could try, a core-dump
helper, and the resources the kernel must cap (memory it could hide in a memfd, threads, a work
folder's bytes and inodes, unlinked files included). A test fails if any attack works.

The attacks run in `sandbox.wrap(...)` exactly as a kernel does (its own cgroup, a capped work
folder, the grades read-only beside it) and report what they managed as JSON; the host side then
looks at what it can see itself: the uid the process had (`/proc/<pid>/status`), what changed on
the host, what the kernel counted. Run as an ordinary user, the root-only tests skip.

Run: pytest tests/test_jail.py  (about a minute).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from helpers import ROOT, require_or_skip

from course_tools.grade.jail import (
    cgroups,
    identity,
    limits,
    memory_folders,
    sandbox,
    seccomp,
    workdir,
)
from course_tools.processes import process_tree

#: Host-wide knobs a process as root (without capabilities) could once rewrite from inside.
HOST_KNOBS = (
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/pid_max",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/kernel/panic",
    "/proc/sysrq-trigger",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/fs/cgroup/memory/release_agent",
    "/sys/fs/cgroup/pids/pids.max",
)

#: Runs inside the jail: every write below must fail. Prints {"done": [...], "seen": {...}}.
ATTACKS = r"""
import ctypes, json, os, resource, signal, subprocess, sys
work, grades, secret, marker = sys.argv[1:5]
knobs = json.loads(sys.argv[5])
done, seen = [], {}

def attempt(what, action):
    try:
        action()
        done.append(what)
    except (OSError, ValueError, subprocess.CalledProcessError):
        pass

def write(path, text):
    with open(path, "w") as f:
        f.write(text)

# a core-dump helper in the work folder, run by the host kernel as root if core_pattern took it
helper = os.path.join(work, "helper.sh")
write(helper, f"#!/bin/sh\necho pwned > {marker}\n")
os.chmod(helper, 0o755)
attempt("core_pattern -> helper", lambda: write("/proc/sys/kernel/core_pattern", "|" + helper))
for knob in knobs:
    if os.path.exists(knob):
        same = "h" if knob.endswith("sysrq-trigger") else open(knob).read()  # "h": help only
        attempt(f"write {knob}", lambda knob=knob, same=same: write(knob, same))
# the grades folder (read-only), another user's file (root's, 0600)
attempt("write the grades", lambda: write(os.path.join(grades, "gradebook.csv"), "alice,12\n"))
attempt("read root's 0600 file", lambda: open(secret).read())
attempt("chmod root's file", lambda: os.chmod(secret, 0o666))
# mounts, its limits, root again
mount = ["mount", "-t", "tmpfs", "x", "/tmp"]
attempt("mount a tmpfs", lambda: subprocess.run(mount, check=True, capture_output=True))
attempt("raise RLIMIT_CORE", lambda: resource.setrlimit(resource.RLIMIT_CORE, (2**20, 2**20)))
attempt("setuid(0)", lambda: os.setuid(0))
# crash a child in the work folder: no core file, no helper
child = subprocess.run([sys.executable, "-c", "import os; os.abort()"], cwd=work)
seen["child_signal"] = -child.returncode
seen["core_limit"] = resource.getrlimit(resource.RLIMIT_CORE)
seen["uid"] = os.getuid()
status = open("/proc/self/status").read()
seen["caps"] = {l.split(":")[0]: l.split()[1] for l in status.splitlines() if l.startswith("Cap")}
seen["no_new_privs"] = [l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")][0]
seen["work_files"] = sorted(os.listdir(work))
seen["grades_read"] = open(os.path.join(grades, "gradebook.csv")).read()  # what it is given
print(json.dumps({"done": done, "seen": seen}), flush=True)
"""


@pytest.fixture(scope="module")
def jail_as_root():
    """The jail as root builds it: skip as an ordinary user (it then keeps the user's own uid)."""
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    if not identity.privileged():
        pytest.skip("the jail's own uid, cgroups and capped work folder need root")
    assert not identity.missing(), (
        f"programs the jail needs as root are missing: {identity.missing()}"
    )


@pytest.fixture(scope="module")
def cgroups_here(jail_as_root):
    """Control groups for the jail (root has them unless a container withholds them)."""
    require_or_skip("sandbox", cgroups.why_not())


def _run_jailed(code: str, *args: str, work: Path, read_only=(), cgroup=None, timeout=120):
    argv = sandbox.wrap(
        [sys.executable, "-c", code, *args],
        writable=[work],
        read_only=list(read_only),
        cwd=work,
        cgroup=cgroup,
    )
    env = sandbox.kernel_env(dict(os.environ), home=work)
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_no_host_wide_write_and_no_core_dump_route_from_inside(jail_as_root, tmp_path):
    grades = tmp_path / "grades"
    grades.mkdir()
    grades.chmod(0o755)  # the jail's uid reads what every account may (a private folder: never)
    (grades / "gradebook.csv").write_text("alice,0\n")
    secret = grades / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    marker = tmp_path / "helper-ran"
    knobs_before = {k: Path(k).read_text() for k in HOST_KNOBS if os.access(k, os.R_OK)}
    # with a cgroup where the host has them (then its own limits are among the knobs)
    group = None if cgroups.why_not() else cgroups.Cgroup.create(memory_mb=1024, pids=64)
    own_limits = [
        str(folder / name)
        for folder in (group.folders.values() if group else [])
        for name in ("memory.limit_in_bytes", "memory.max", "pids.max")
        if (folder / name).exists()
    ]
    knobs_before |= {k: Path(k).read_text() for k in own_limits}
    with contextlib.ExitStack() as stack:
        if group is not None:
            stack.enter_context(group)
        work = stack.enter_context(workdir.capped(tmp_path / "work", disk_mb=64))
        process = _run_jailed(
            ATTACKS,
            str(work),
            str(grades),
            str(secret),
            str(marker),
            # and its own cgroup's limits
            json.dumps([*HOST_KNOBS, *own_limits]),
            work=work,
            read_only=[grades],
            cgroup=group,
        )
        # the uids the host sees the attacker's code run as, read while it runs (bubblewrap's
        # own processes stay root: they run none of the submission's code)
        host_uids = set()
        while process.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in process_tree(process.pid)[1:]:
                    with contextlib.suppress(psutil.Error):
                        # read once: a process bubblewrap starts execs the jail's own step (root,
                        # before the drop to its uid, running none of the submission's code), so
                        # two reads could see bwrap, then the step, as a Python process that is
                        # not the step (a loaded suite once read uid 0 so)
                        line = child.cmdline()
                        step = line[:3] == [sys.executable, "-I", memory_folders.STEP]
                        if line[:1] == [sys.executable] and not step:
                            host_uids |= set(child.uids())
            time.sleep(0.02)
        out, err = process.communicate()
        knobs_after = {k: Path(k).read_text() for k in knobs_before}
        assert process.returncode == 0, err[-2000:]
        report = json.loads(out.strip().splitlines()[-1])
        work_files = sorted(os.listdir(work))
    assert report["done"] == [], f"host writes that worked from inside the jail: {report['done']}"
    assert host_uids, "no process of the jail was seen from the host"
    assert 0 not in host_uids and os.getuid() not in host_uids, host_uids
    assert all(uid in identity.UID_RANGE for uid in host_uids), host_uids
    seen = report["seen"]
    assert seen["uid"] in identity.UID_RANGE
    assert set(seen["caps"].values()) == {"0000000000000000"}, seen["caps"]
    assert seen["no_new_privs"] == "1"
    assert seen["core_limit"] == [0, 0]
    assert seen["grades_read"] == "alice,0\n"
    assert seen["child_signal"] == 6  # it crashed...
    assert not marker.exists(), "a core-dump helper ran on the host"
    assert not [f for f in work_files if f.startswith("core")], work_files  # ...and dumped nothing
    assert knobs_after == knobs_before
    assert (grades / "gradebook.csv").read_text() == "alice,0\n"
    assert secret.stat().st_mode & 0o777 == 0o600


MEMFD = r"""
import os
fd = os.memfd_create("hidden")
chunk = b"x" * 2**20
for _ in range(int(os.environ.get("MB", "512"))):
    os.write(fd, chunk)
print("kept it all")
"""


def test_memory_hidden_in_a_memfd_is_counted_and_capped(cgroups_here, tmp_path):
    group = cgroups.Cgroup.create(memory_mb=256, pids=sandbox.NPROC)
    assert group is not None, cgroups.why_not()
    with group, workdir.capped(tmp_path / "work", disk_mb=64) as work:
        process = _run_jailed(MEMFD, work=work, cgroup=group)
        out, _ = process.communicate(timeout=120)
        assert "kept it all" not in out
        assert group.oom_kills() >= 1
        assert 200 < group.peak_mb() <= 256 + 1


THREADS = r"""
import threading, time
started = 0
try:
    for _ in range(3000):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started, flush=True)
"""


def test_threads_are_capped_by_the_kernel(cgroups_here, tmp_path):
    group = cgroups.Cgroup.create(memory_mb=2048, pids=200)
    assert group is not None, cgroups.why_not()
    with group, workdir.capped(tmp_path / "work", disk_mb=64) as work:
        process = _run_jailed(THREADS, work=work, cgroup=group)
        out, err = process.communicate(timeout=120)
        started = int(out.split()[-1])
        assert started < 200, err[-1000:]
        assert group.pids_refused() >= 1


DISK = r"""
import os
report = {}
big = open("unlinked", "wb")
os.unlink("unlinked")
written = 0
try:
    while written < 512 * 2**20:
        big.write(b"x" * 2**20)
        big.flush()
        written += 2**20
except OSError as exc:
    report["unlinked_error"] = exc.strerror
report["unlinked_mb"] = written // 2**20
big.close()
folders = 0
try:
    for i in range(100_000):
        os.mkdir(f"d{i}")
        folders += 1
except OSError as exc:
    report["folders_error"] = exc.strerror
report["folders"] = folders
print(report)
"""


def test_the_work_folder_caps_bytes_unlinked_files_and_inodes(jail_as_root, tmp_path):
    with workdir.capped(tmp_path / "work", disk_mb=64, inodes=5000) as work:
        assert workdir.is_capped(work)
        process = _run_jailed(DISK, work=work)
        out, err = process.communicate(timeout=120)
        report = eval(out.strip().splitlines()[-1])  # noqa: S307 - our own script's dict
    assert report["unlinked_mb"] <= 64 and report["unlinked_error"] == "No space left on device"
    assert report["folders"] < 5000 and report["folders_error"] == "No space left on device"
    assert not (tmp_path / "work").exists()  # unmounted and removed, however many files


def _fake_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_cgroups_v1_and_v2_are_made_where_each_version_allows(tmp_path):
    """On fake cgroup trees: v1 groups go below the process's own group of each controller; v2
    groups beside it (a v2 group holding processes cannot have children with controllers),
    with the controllers enabled at the root when the process sits there."""
    v1 = tmp_path / "v1"
    _fake_tree(
        v1,
        {
            "memory/cgroup.procs": "",
            "pids/cgroup.procs": "",
            "memory/job_7/cgroup.procs": "",
            "proc/cgroup": "8:pids:/\n4:memory:/job_7\n0::/\n",
        },
    )
    group = cgroups.Cgroup.create(memory_mb=100, pids=50, root=v1, proc=v1 / "proc")
    assert group.version == 1
    assert group.folders["memory"].parent == v1 / "memory" / "job_7"
    assert (group.folders["memory"] / "memory.limit_in_bytes").read_text() == str(100 * 2**20)
    assert (group.folders["pids"] / "pids.max").read_text() == "50"
    assert group.join_command()[-1] == "--"
    v2 = tmp_path / "v2"
    _fake_tree(
        v2,
        {
            "cgroup.controllers": "cpu memory pids",
            "cgroup.subtree_control": "memory pids",
            "user.slice/cgroup.controllers": "memory pids",
            "user.slice/cgroup.subtree_control": "memory pids",
            "user.slice/grader/cgroup.controllers": "memory pids",
            "proc/cgroup": "0::/user.slice/grader\n",
        },
    )
    group = cgroups.Cgroup.create(memory_mb=100, pids=50, root=v2, proc=v2 / "proc")
    assert group.version == 2
    assert group.folders["memory"].parent == v2 / "user.slice"
    assert (group.folders["memory"] / "memory.max").read_text() == str(100 * 2**20)
    assert (group.folders["pids"] / "pids.max").read_text() == "50"
    (v2 / "proc" / "cgroup").write_text("0::/\n")
    (v2 / "cgroup.subtree_control").write_text("")
    group = cgroups.Cgroup.create(memory_mb=100, pids=50, root=v2, proc=v2 / "proc")
    assert group.folders["memory"].parent == v2
    assert (v2 / "cgroup.subtree_control").read_text() == "+memory +pids"
    (v2 / "proc" / "cgroup").write_text("0::/user.slice/grader\n")
    (v2 / "user.slice" / "grader" / "cgroup.controllers").write_text("cpu")
    assert cgroups.Cgroup.create(memory_mb=100, pids=50, root=v2, proc=v2 / "proc") is None


def test_the_kernel_gets_only_the_variables_it_needs(tmp_path):
    env = {
        "COURSE_PROFILE": "quick",
        "COURSE_DEVICES": "2",
        "COURSE_SLURM_TEST": "1",
        "COURSE_SECRET_TOKEN": "x",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_CONFIG": '{"cluster": {}}',
        "LC_ALL": "C.UTF-8",
        "LC_EVIL": "x",
        "SLURM_JOB_ID": "5",
        "AWS_SECRET_ACCESS_KEY": "x",
        "PATH": "/usr/bin",
    }
    kept = sandbox.kernel_env(env, home=tmp_path)
    assert {"COURSE_PROFILE", "COURSE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "LC_ALL", "PATH"} <= set(
        kept
    )
    for name in (
        "COURSE_SLURM_TEST",
        "COURSE_SECRET_TOKEN",
        "TF_CONFIG",
        "LC_EVIL",
        "SLURM_JOB_ID",
    ):
        assert name not in kept
    assert "AWS_SECRET_ACCESS_KEY" not in kept
    assert kept["HOME"] == str(tmp_path)


def test_doctor_and_grade_say_what_the_jail_enforces_here(jail_as_root):
    rows = {row.name: row for row in limits.enforced()}
    assert rows["user"].held and "uid of its own" in rows["user"].how
    assert rows["per-user quotas"].held  # those of the sandbox's own uid
    assert rows["host knobs"].held and rows["core dumps"].held
    assert rows["work folder"].held  # root mounts the capped work folder
    why = cgroups.why_not()
    assert rows["memory"].held == (not why)
    assert rows["processes"].held  # pids cgroup, or RLIMIT_NPROC of the jail's own uid
    assert limits.missing() == [
        f"jail {r.name}: NOT ENFORCED by the kernel here: {r.how}"
        for r in rows.values()
        if not r.held
    ]
    doctor = subprocess.run(
        [Path(sys.executable).with_name("course"), "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    for row in rows.values():
        assert f"jail {row.name}" in doctor.stdout, doctor.stdout
    (reads,) = [line for line in doctor.stdout.splitlines() if "jail reads the course" in line]
    assert "yes" in reads, reads


def test_an_ordinary_user_is_told_the_per_user_quotas_are_shared(monkeypatch):
    """Run by an ordinary user the sandbox keeps the user's host uid: `course grade` says before
    it starts that the kernel's per-user quotas are the instructor's, and what happens then."""
    monkeypatch.setattr(identity, "privileged", lambda: False)
    (line,) = [line for line in limits.missing() if "per-user quotas" in line]
    assert "NOT ENFORCED" in line and "epoll watches" in line and "scored 0" in line, line
    assert "on Slurm always a grader error" in line, line


#: Run as a Slurm task: the jail inside it, with its own cgroup below the task's.
IN_A_TASK = r"""
import json, os, subprocess, sys
from pathlib import Path
from course_tools.grade.jail import limits, sandbox
work = Path(sys.argv[1])
group = limits.cgroup(512)
argv = sandbox.wrap(["sh", "-c", "id -u; cat /proc/self/cgroup"], writable=[work], cgroup=group)
env = sandbox.kernel_env(dict(os.environ), work)
inside = subprocess.run(argv, capture_output=True, text=True, env=env)
group.remove()
task = Path("/proc/self/cgroup").read_text()
print(json.dumps({"task": task, "inside": inside.stdout, "group": str(group.folders["memory"])}))
"""


def test_slurm_constrains_its_tasks_and_the_jail_still_holds_inside_one(
    jail_as_root, tmp_path, tmp_path_factory
):
    import slurm

    require_or_skip("slurm", slurm.missing_programs())
    why = slurm.cgroups_missing()
    if why:
        pytest.skip(f"Slurm's cgroup plugins cannot run here: {why}")
    # the cluster in a short folder: slurmd's socket paths must stay under 108 bytes
    with slurm.single_node_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        hog = subprocess.run(
            ["srun", "--mem=200M", sys.executable, "-c", MEMFD],
            env={**cluster.env, "MB": "400"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "kept it all" not in hog.stdout, "Slurm did not enforce --mem on a memfd"
        assert hog.returncode != 0
        work = tmp_path / "work"
        work.mkdir()
        task = subprocess.run(
            ["srun", "--mem=2G", sys.executable, "-c", IN_A_TASK, str(work)],
            env={**cluster.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert task.returncode == 0, task.stderr[-2000:]
        seen = json.loads(task.stdout.strip().splitlines()[-1])
    memory = next(line for line in seen["task"].splitlines() if ":memory:" in line)
    assert "/job_" in memory, f"the task is not in Slurm's memory cgroup: {memory}"
    assert int(seen["inside"].split()[0]) in identity.UID_RANGE
    # the jail's group sits below the task's (v1) or beside it (v2): Slurm's step limit holds
    assert str(Path(memory.split(":", 2)[2]).parent) in seen["group"]


def test_what_a_killed_grader_left_is_cleaned_up_by_the_next(cgroups_here, tmp_path):
    """A grader killed before its clean-up (a cancelled Slurm task) leaves its work folder's
    tmpfs mounted and its cgroups in place: the next grader on the machine removes them."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / "left"
    left.mkdir()
    source = f"{workdir.SOURCE}-{dead.pid}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", source, str(left)], check=True)
    assert workdir.is_capped(left) and left in workdir.stale()
    with workdir.capped(tmp_path / "next", disk_mb=1):
        assert not workdir.is_capped(left)
    group = cgroups.Cgroup.create(memory_mb=64, pids=16)
    assert group is not None, cgroups.why_not()
    stale = [folder.parent / f"{cgroups.PREFIX}{dead.pid}-0" for folder in group.folders.values()]
    for folder in stale:
        folder.mkdir(exist_ok=True)
    group.remove()
    cgroups.Cgroup.create(memory_mb=64, pids=16).remove()
    assert not any(folder.exists() for folder in stale)


def test_a_killed_graders_folder_is_removed_by_the_next_course_grade(jail_as_root, tmp_path):
    """A grader killed while blocked (SIGTERM from `timeout`, SIGKILL) leaves its folder of work
    folders, a work folder still mounted in it: the next `course grade` unmounts and removes it;
    a living grader's folder, and one of a name it did not make, are left alone."""
    from course_tools.grade.routes import batch

    dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    left = tmp_path / f"{batch.BASE_PREFIX}{dead.pid}-x1y2"
    (left / "bob").mkdir(parents=True)
    assert workdir.cap(left / "bob", disk_mb=1)
    (left / "bob" / "artifact").write_text("x")
    dead.kill()
    dead.wait()
    living = tmp_path / f"{batch.BASE_PREFIX}{os.getpid()}-a1b2"
    other = tmp_path / f"{batch.BASE_PREFIX}v9i6zjjq"  # not made by a grader of this version
    living.mkdir()
    other.mkdir()
    assert batch.remove_dead_graders_folders(tmp_path) == [left]
    assert not left.exists() and not workdir.is_capped(left / "bob")
    assert living.exists() and other.exists()


def test_a_graders_folder_whose_lock_is_held_elsewhere_is_left_alone(tmp_path):
    """A grader in another pid namespace sharing this temporary folder: its pid means nothing
    here, but it holds its folder's lock, so the folder stays; once it is gone, the folder
    goes."""
    from course_tools.grade.routes import batch

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no process here has
    folder = tmp_path / f"{batch.BASE_PREFIX}{gone.pid}-k3m4"
    (folder / "carol").mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path\n"
            "from course_tools.grade.routes import batch\n"
            "batch.hold_alive_lock(Path(sys.argv[1])); print('held', flush=True)\n"
            "sys.stdin.read()",
            str(folder),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert batch.remove_dead_graders_folders(tmp_path) == []
        assert (folder / "carol").is_dir()
    finally:
        holder.communicate("")
    assert batch.remove_dead_graders_folders(tmp_path) == [folder]
    assert not folder.exists()


def test_a_slurm_tasks_folder_is_unmounted_before_it_is_removed(jail_as_root, tmp_path):
    """A task's grader killed before its own clean-up leaves its work folder mounted inside the
    task's node-local folder; the task's script unmounts it (`python -m ...jail.workdir`) so
    that `rm -rf` removes the folder."""
    folder = tmp_path / "course-grade-task" / "course-grade-base" / "alice"
    folder.mkdir(parents=True)
    assert workdir.cap(folder, disk_mb=1)
    (folder / "artifact").write_text("x")
    release = [sys.executable, "-m", "course_tools.grade.jail.workdir"]
    subprocess.run([*release, str(tmp_path / "course-grade-task")], check=True, timeout=60)
    assert not workdir.is_capped(folder)
    subprocess.run(["rm", "-rf", str(tmp_path / "course-grade-task")], check=True)
    assert not (tmp_path / "course-grade-task").exists()


def test_the_check_process_runs_in_a_control_group_of_its_own(cgroups_here, tmp_path):
    """Like the kernels, the check process starts in a cgroup of its own (memory and tasks capped
    by the kernel), removed when grading ends."""
    from types import SimpleNamespace

    from course_tools.grade.core import plan
    from course_tools.runner import Limits

    out = tmp_path / "grades"
    out.mkdir()
    batch = SimpleNamespace(
        settings=plan.GradingSettings(devices=2),
        sandboxed=True,
        out=out,
        solution_path=tmp_path / "solution.ipynb",
        limits=Limits(memory_mb=1024),
    )
    (tmp_path / "base").mkdir(mode=0o700)  # the batch's work folder (`tempfile.mkdtemp`)
    checks = plan.start_checks(batch, tmp_path / "base")
    try:
        assert checks.cgroup is not None
        deadline, own = time.monotonic() + 10, ""
        while cgroups.PREFIX not in own and time.monotonic() < deadline:  # it moves itself in
            own = Path(f"/proc/{checks.process.pid}/cgroup").read_text()
            time.sleep(0.05)
        assert cgroups.PREFIX in own, own
        folders = list(checks.cgroup.folders.values())
        if checks.cgroup.version == 2:
            assert (folders[0] / "memory.max").read_text().strip() == str(1024 * 2**20)
    finally:
        checks.close()
    assert not any(folder.exists() for folder in folders)


def test_the_sandboxs_own_uid_reads_the_etc_files_it_is_given_and_no_other(jail_as_root, tmp_path):
    """/etc inside is 0755 (bubblewrap would make it 0700 root): the sandbox's uid reads the
    files of `SYSTEM_ETC` (users, the loader's cache, time zone, certificates), and /etc holds
    nothing else (no shadow, no service keys)."""
    code = (
        "import json, os, pwd\n"
        "seen = {'mode': oct(os.stat('/etc').st_mode & 0o7777), 'uid': os.getuid(),\n"
        "        'listed': sorted(os.listdir('/etc')),\n"
        "        'passwd': open('/etc/passwd').read().split(':')[0],\n"
        "        'root': pwd.getpwuid(0).pw_name,\n"
        "        'cache': len(open('/etc/ld.so.cache', 'rb').read())}\n"
        "print(json.dumps(seen))"
    )
    work = tmp_path / "work"
    work.mkdir()
    jailed = _run_jailed(code, work=work)
    out, err = jailed.communicate(timeout=120)
    assert jailed.returncode == 0, err[-2000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["uid"] != 0 and seen["mode"] == "0o755", seen
    assert seen["passwd"] == "root" and seen["root"] == "root" and seen["cache"] > 0, seen
    assert set(seen["listed"]) <= set(sandbox.SYSTEM_ETC), seen["listed"]
    assert "shadow" not in seen["listed"] and "munge" not in seen["listed"], seen["listed"]


#: Runs inside the jail: the kernel's key management, reached as a submission would (ctypes), for
#: the session keyring, the user's (the grader's, on the user route), and x86's x32 numbering.
KEYRINGS = r"""
import ctypes, json, os, platform
from course_tools.grade.jail import seccomp
libc = ctypes.CDLL(None, use_errno=True)
add_key, request_key, keyctl = seccomp.ARCHITECTURES[platform.machine()][0].keys
calls = {
    "keyctl session": (keyctl, 0, -3, 0),
    "add_key user": (add_key, b"user", b"red", b"secret", 6, -4),
    "request_key": (request_key, b"user", b"red", None, -3),
}
if platform.machine() == "x86_64":
    calls["keyctl x32"] = (keyctl | seccomp.X32_BIT, 0, -3, 0)
said = {}
for name, (number, *args) in calls.items():
    ctypes.set_errno(0)
    result = libc.syscall(number, *args)
    said[name] = os.strerror(ctypes.get_errno()) if result == -1 else "allowed"
said["keys listed"] = open("/proc/keys").read()
said["user namespace"] = "allowed" if libc.unshare(seccomp.CLONE_NEWUSER) == 0 else os.strerror(
    ctypes.get_errno()
)
try:
    os.openpty()
    said["pseudo-terminal"] = "allowed"
except OSError as error:
    said["pseudo-terminal"] = error.strerror
import resource, threading
said["open files"] = resource.getrlimit(resource.RLIMIT_NOFILE)
pid = os.fork()  # a process and a thread still start (clone without CLONE_NEWUSER, clone3)
if pid == 0:
    os._exit(7)
said["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
print(json.dumps(said))
"""


def test_a_submission_cannot_reach_kernel_objects_outside_its_namespaces(jail_as_root, tmp_path):
    """Red team 10b read the instructor's keys and left its own in root's keyring from inside;
    red team 11b listed their names in /proc/keys, made a user namespace (root again, a tmpfs past
    the caps), took every pseudo-terminal and filled the host's table of open files. In the jail
    every key call and a new user namespace fail with EPERM (the seccomp filter), /proc/keys is
    empty, no pseudo-terminal opens, a process holds at most `NOFILE` files; a process and a
    thread still start; the same key calls outside reach the keyring."""
    jailed = _run_jailed(KEYRINGS, work=tmp_path)
    out, err = jailed.communicate(timeout=120)
    assert jailed.returncode == 0, err
    said = json.loads(out)
    refused = {
        k: v
        for k, v in said.items()
        if k in ("keyctl session", "add_key user", "request_key", "keyctl x32", "user namespace")
    }
    assert set(refused.values()) == {"Operation not permitted"}, said
    assert said["keys listed"] == "", said  # the names of the grader's keys: not listed
    assert said["pseudo-terminal"] != "allowed", said
    assert said["open files"] == [sandbox.NOFILE] * 2, said
    assert said["fork"] == 7, said
    outside = subprocess.run([sys.executable, "-c", KEYRINGS], capture_output=True, text=True)
    assert json.loads(outside.stdout)["keyctl session"] == "allowed", outside
    assert len(seccomp.program("aarch64")) == 70 * 8  # as x86_64 but for the x32 check, i386's
    # socketcall and ipc


#: Runs inside the jail (and outside): sockets of each family, and the kernel's asynchronous I/O,
#: reached as a submission would (the socket module, ctypes).
SOCKETS_AND_AIO = r"""
import ctypes, json, os, platform, socket
from course_tools.grade.jail import seccomp
libc = ctypes.CDLL(None, use_errno=True)
said = {}
def attempt(name, make):
    try:
        for made in make():
            made.close()
        said[name] = "allowed"
    except OSError as error:
        said[name] = error.strerror
attempt("vsock", lambda: [socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)])
attempt("vsock pair", lambda: socket.socketpair(socket.AF_VSOCK))
attempt("unix", lambda: [socket.socket(socket.AF_UNIX)])
attempt("unix pair", lambda: socket.socketpair())
attempt("inet", lambda: [socket.socket(socket.AF_INET)])
attempt("inet6", lambda: [socket.socket(socket.AF_INET6)])
attempt("netlink", lambda: [socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)])
uevent = socket.NETLINK_KOBJECT_UEVENT if hasattr(socket, "NETLINK_KOBJECT_UEVENT") else 15
attempt("uevent", lambda: [socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, uevent)])
said["interfaces"] = [name for _, name in socket.if_nameindex()]  # through netlink
_, io_setup, io_uring_setup, shmget = seccomp.ARCHITECTURES[platform.machine()][0].nosys[:4]
ctypes.set_errno(0)
result = libc.syscall(shmget, 0, 2**20, 0o1600)  # IPC_PRIVATE, 1 MiB, IPC_CREAT | 0600
said["shmget"] = "allowed" if result >= 0 else os.strerror(ctypes.get_errno())
if result >= 0:
    shmctl = {"x86_64": 31, "aarch64": 195}[platform.machine()]
    libc.syscall(shmctl, result, 0, 0)  # IPC_RMID
context = ctypes.c_ulong(0)
ctypes.set_errno(0)
result = libc.syscall(io_setup, 1, ctypes.byref(context))
said["io_setup"] = "allowed" if result == 0 else os.strerror(ctypes.get_errno())
if result == 0:
    libc.syscall(io_setup + 1, context)  # io_destroy follows io_setup on every table here
params = (ctypes.c_char * 120)()
ctypes.set_errno(0)
result = libc.syscall(io_uring_setup, 1, params)
said["io_uring_setup"] = "allowed" if result >= 0 else os.strerror(ctypes.get_errno())
if result >= 0:
    os.close(result)
print(json.dumps(said))
"""


def test_a_submission_gets_no_vsock_and_no_asynchronous_io(tmp_path):
    """Red team 14b bound a port of the host's vsock space from inside (vsock has no network
    namespace) and took the host's whole AIO budget (`fs.aio-max-nr`) with io_setup. In the jail
    a socket of a family TensorFlow does not need fails as if the kernel lacked it
    (EAFNOSUPPORT), io_setup and io_uring_setup as if it lacked them (ENOSYS); the families it
    does need still open (Unix, IPv4, IPv6, and netlink, which lists the interfaces). Red team
    15b read the host's device events from a netlink uevent socket (as root): netlink opens only
    for its routing protocol (EPROTONOSUPPORT otherwise). Outside, io_setup and the uevent
    socket work."""
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    jailed = _run_jailed(SOCKETS_AND_AIO, work=tmp_path)
    out, err = jailed.communicate(timeout=120)
    assert jailed.returncode == 0, err
    said = json.loads(out)
    no_family = os.strerror(errno.EAFNOSUPPORT)
    assert said["vsock"] == said["vsock pair"] == no_family, said
    assert said["io_setup"] == said["io_uring_setup"] == os.strerror(errno.ENOSYS), said
    assert said["shmget"] == os.strerror(errno.ENOSYS), said  # red team 28a: 6 GB unseen
    for family in ("unix", "unix pair", "inet", "inet6", "netlink"):
        assert said[family] == "allowed", (family, said)
    assert said["uevent"] == os.strerror(errno.EPROTONOSUPPORT), said
    assert "lo" in said["interfaces"], said
    outside = subprocess.run(
        [sys.executable, "-c", SOCKETS_AND_AIO], capture_output=True, text=True
    )
    assert json.loads(outside.stdout)["io_setup"] == "allowed", outside
    assert json.loads(outside.stdout)["shmget"] == "allowed", outside
    assert json.loads(outside.stdout)["uevent"] == "allowed", outside


def _filtered(program: bytes, arch: int, number: int, arg0: int = 0, arg2: int = 0) -> int:
    """What the classic BPF `program` returns for a call (`struct seccomp_data`: nr, arch,
    instruction pointer, six arguments): the kernel's interpreter, for the four instructions the
    filter uses."""
    data = struct.pack("<iIQ6Q", number, arch, 0, arg0, 0, arg2, 0, 0, 0)
    code = [struct.unpack_from("<HBBI", program, at) for at in range(0, len(program), 8)]
    pc = accumulator = 0
    while True:
        op, yes, no, k = code[pc]
        if op == 0x06:  # return
            return k
        if op == 0x20:  # load a word of the data
            accumulator = struct.unpack_from("<I", data, k)[0]
            pc += 1
        else:  # jump if equal (0x15) or if any bit is set (0x45)
            taken = accumulator == k if op == 0x15 else bool(accumulator & k)
            pc += 1 + (yes if taken else no)


def test_the_filter_refuses_the_same_calls_for_every_architecture_it_lists():
    """Run on the filter itself, for each machine and each of its call tables (the 32-bit ones
    too, which the sandbox test above cannot reach): vsock refused, the four families allowed,
    netlink only with NETLINK_ROUTE (uevents EPROTONOSUPPORT), AIO and clone3 ENOSYS, keys
    EPERM, a new user namespace EPERM but a plain unshare allowed, i386's socketcall ENOSYS,
    x32 and an unknown architecture EPERM, any other call allowed."""
    allow, refuse = 0x7FFF0000, 0x00050000
    for machine, tables in seccomp.ARCHITECTURES.items():
        program = seccomp.program(machine)
        for calls in tables:

            def verdict(number, arg0=0, arg2=0, calls=calls, program=program):
                return _filtered(program, calls.arch, number, arg0, arg2)

            for number in calls.sockets:
                assert verdict(number, socket.AF_VSOCK) == refuse | errno.EAFNOSUPPORT
                assert verdict(number, 17) == refuse | errno.EAFNOSUPPORT  # AF_PACKET
                for family in seccomp.FAMILIES:
                    assert verdict(number, family) == allow, (machine, number, family)
                    assert verdict(number, family | 1 << 32) == allow  # high bits: ignored
                for protocol in (15, 1, 16, 0x10000):  # uevent, unused, generic, high bit
                    netlink = verdict(number, socket.AF_NETLINK, protocol)
                    assert netlink == refuse | errno.EPROTONOSUPPORT, (machine, protocol)
                for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
                    assert verdict(number, family, 15) == allow  # their protocols: any
            assert {verdict(n) for n in calls.nosys} == {refuse | errno.ENOSYS}, machine
            assert {verdict(n) for n in calls.keys} == {refuse | errno.EPERM}, machine
            for number in calls.namespaces:
                assert verdict(number, seccomp.CLONE_NEWUSER) == refuse | errno.EPERM
                assert verdict(number, 0x00020000) == allow  # a new mount namespace
            used = {*calls.sockets, *calls.nosys, *calls.keys, *calls.namespaces}
            assert verdict(max(used) + 1) == allow and verdict(1) == allow, machine
        assert _filtered(program, 0x12345678, 1) == refuse | errno.EPERM, machine
    x86 = seccomp.program("x86_64")
    assert _filtered(x86, 0x40000003, 102) == refuse | errno.ENOSYS  # i386's socketcall
    assert _filtered(x86, 0xC000003E, 1 | seccomp.X32_BIT) == refuse | errno.EPERM


#: Runs inside the jail: up to 200,000 empty files in /tmp, then in /dev/shm (each one about a
#: kilobyte of the kernel's memory that no byte cap counts), then a file in its work folder.
#: Prints {folder: [files made, error, inodes of its file system]}, and what the work folder holds.
MANY_FILES = r"""
import json, os, sys
seen = {}
for folder in ("/tmp", "/dev/shm"):
    made, error = 0, ""
    try:
        while made < 200_000:
            open(f"{folder}/f{made}", "w").close()
            made += 1
    except OSError as exc:
        error = exc.strerror
    seen[folder] = [made, error, os.statvfs(folder).f_files]
with open("after.txt", "w") as handle:
    handle.write("written after")
seen["work"] = sorted(os.listdir("."))
print(json.dumps(seen), flush=True)
"""


def _assert_stopped_at_the_inode_cap(seen: dict, work: Path) -> None:
    for folder in ("/tmp", "/dev/shm"):
        made, error, inodes = seen[folder]
        assert inodes == memory_folders.INODES, seen
        assert made < memory_folders.INODES and error == "No space left on device", seen
    assert "after.txt" in seen["work"] and (work / "after.txt").read_text() == "written after"


def test_the_in_memory_folders_are_capped_in_files_too(jail_as_root, tmp_path):
    """200,000 empty files in /tmp and in /dev/shm: each folder stops at
    `memory_folders.INODES` with "No space left on device" in the code that makes them, which
    goes on and writes its work folder (bound below the host's /tmp, so bound again over the new
    /tmp); and the sandbox's process still has no capability left."""
    work = tmp_path / "work"
    work.mkdir()
    process = _run_jailed(MANY_FILES, work=work)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-2000:]
    _assert_stopped_at_the_inode_cap(json.loads(out.strip().splitlines()[-1]), work)
    assert limits.memory_folders_capped()


#: Runs as a throwaway ordinary user: the jail as such a user builds it (a user namespace, no uid
#: of its own), around each program given (a JSON list), with the folder `hid` of its work folder
#: hidden (covered), and `hid/inner` too (inside a cover: left to it); prints each one's [return
#: code, output, error], then what `limits.enforced()` says of each limit for this user.
AS_A_USER = r"""
import json, os, subprocess, sys
from pathlib import Path
from course_tools.grade.jail import limits, sandbox
work, programs = Path(sys.argv[1]), json.loads(sys.argv[2])
sys.executable = sys.argv[3]  # a Python this user may run (the grader's may sit in /root)
env = {**sandbox.kernel_env(dict(os.environ), work), "PYTHONPATH": sys.argv[4]}
(work / "hid" / "inner").mkdir(parents=True)
hidden = [work / "hid", work / "hid" / "inner"]
outs = []
for program in programs:
    argv = sandbox.wrap([sys.executable, "-c", program], writable=[work], hidden=hidden, cwd=work)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    outs.append([done.returncode, done.stdout, done.stderr[-2000:]])
print(json.dumps(outs))
print(json.dumps({row.name: [row.held, row.how] for row in limits.enforced()}))
"""


@contextlib.contextmanager
def _throwaway_user(uid: int, argv, timeout: int):
    """Run `python -c <argv(work, system_python)>` as the throwaway `uid`, in a folder of its own
    with a work folder it owns; yields (the work folder, removed on exit; the run's output). Skips
    unless root with a system python3 and a working sandbox."""
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if not identity.privileged() or system_python is None:
        pytest.skip("needs root (a throwaway uid) and the system's python3")
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    top = Path(tempfile.mkdtemp(prefix="course-test-user-"))
    try:
        work = top / "work"
        work.mkdir()
        os.chown(work, uid, uid)
        top.chmod(0o755)
        done = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            + [sys.executable, "-c", *argv(work, system_python)],
            cwd=ROOT,
            env={**{k: v for k, v in os.environ.items() if k != "TFDS_DATA_DIR"}, "HOME": str(top)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        yield work, done.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


@contextlib.contextmanager
def _as_a_user(*programs: str):
    """Run each of `programs` in the jail an ordinary user gets (`AS_A_USER`), as a throwaway
    uid, the system's Python inside; yields (the work folder, removed on exit; each one's [return
    code, output, error]; {limit: [held, how]} of `limits.enforced()` as that user)."""

    def argv(work: Path, system_python: str) -> list[str]:
        return [AS_A_USER, str(work), json.dumps(programs), system_python, str(ROOT)]

    with _throwaway_user(54321, argv, timeout=600) as (work, out):
        outs, rows = out.strip().splitlines()[-2:]
        yield work, json.loads(outs), json.loads(rows)


def test_as_an_ordinary_user_the_in_memory_folders_are_capped_in_files_too():
    """The same 200,000 files as an ordinary user, whose sandbox has no uid of its own and no
    control group to count the kernel's memory for them: each folder stops at the cap as well,
    and the sandbox cannot make a user namespace of its own (the filter, loaded after the one
    the cap needs) nor has any capability in its bounding set. As root, through a throwaway
    uid; the system's Python runs inside."""
    userns = "import ctypes; c = ctypes.CDLL(None, use_errno=True)"
    userns += "; print(c.unshare(0x10000000), ctypes.get_errno())"
    userns += "; print([l.split()[1] for l in open('/proc/self/status') if l[:6] == 'CapBnd'][0])"
    with _as_a_user(MANY_FILES, userns) as (work, ((code, out, err), (_, userns, _)), _):
        assert code == 0, err
        _assert_stopped_at_the_inode_cap(json.loads(out.strip().splitlines()[-1]), work)
    # and no capability to come back to (an empty bounding set, as bubblewrap leaves it)
    assert userns.split() == ["-1", str(errno.EPERM), "0" * 16], userns


#: Runs inside the jail: tries to make a file at the top of every mounted folder (and at
#: /dev/pts/x); prints {folder: its file system's inodes} for those where it could.
WRITABLE_MOUNTS = r"""
import json, os
points = {line.split()[4] for line in open("/proc/self/mountinfo")}
writable = {}
for point in sorted(points | {"/dev/pts"}):
    probe = os.path.join(point, "x")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        continue
    writable[point] = os.statvfs(point).f_files
    os.unlink(probe)
print(json.dumps(writable))
"""


def test_as_an_ordinary_user_only_the_work_folder_and_the_capped_folders_are_writable():
    """As an ordinary user the sandbox's empty folders are the sandbox's uid's own (bubblewrap
    mounts them in its user namespace): /dev/pts (no pseudo-terminals) and a hidden folder's
    cover inside the work folder must be read-only, or each is a tmpfs of millions of files the
    kernel keeps in memory no limit counts. The only folders the submission can write are its
    work folder and /tmp and /dev/shm, each capped at `memory_folders.INODES` files."""
    with _as_a_user(WRITABLE_MOUNTS) as (work, ((code, out, err),), _):
        assert code == 0, err
        writable = json.loads(out.strip().splitlines()[-1])
        assert sorted(writable) == sorted(["/dev/shm", "/tmp", str(work.resolve())]), writable
    assert writable["/tmp"] == writable["/dev/shm"] == memory_folders.INODES, writable


#: Runs inside the jail: its RLIMIT_NPROC, and how many threads it can start past its own.
THREADS_STARTED = r"""
import json, resource, threading
threading.stack_size(64 * 1024)
stop, started = threading.Event(), 0
try:
    while started < 5_000:
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
stop.set()
print(json.dumps([resource.getrlimit(resource.RLIMIT_NPROC), started]))
"""


def test_as_an_ordinary_user_the_process_limit_is_per_sandbox_and_said_so():
    """As an ordinary user without a control group, `limits.enforced()` says what holds: each
    sandbox may have `sandbox.NPROC` tasks of its own (RLIMIT_NPROC, counted in the user
    namespace the first step makes), so --jobs N sandboxes may hold N times that of the account
    together; and a sandbox has that limit and starts threads up to it, not past it."""
    with _as_a_user(THREADS_STARTED) as (_, ((code, out, err),), rows):
        assert code == 0, err
        (soft, hard), started = json.loads(out.strip().splitlines()[-1])
    if rows["memory"][0]:
        pytest.skip("a control group counts this user's tasks here (pids.max)")
    held, how = rows["processes"]
    assert held and f"RLIMIT_NPROC {sandbox.NPROC} per sandbox" in how, how
    assert f"N x {sandbox.NPROC}" in how and "ulimit -u" in how, how
    assert soft == hard == sandbox.NPROC
    assert sandbox.NPROC - 16 < started < sandbox.NPROC, started


def test_a_private_folder_inside_a_bound_one_is_covered_whatever_encloses_it(tmp_path):
    """A private path (grades) inside a folder the sandbox binds (the data), where a wider private
    folder (the checkout's build/) encloses that bound one and so gets no cover of its own, as with
    `TFDS_DATA_DIR=build --out build/grades`: the inner path is still covered (a red team read a
    classmate's report when it was skipped as "inside another cover" that was never made)."""
    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    build, work = tmp_path / "build", tmp_path / "work"
    data, grades = build / "data", build / "data" / "grades"
    grades.mkdir(parents=True)
    work.mkdir()
    (data / "train.txt").write_text("examples")
    (grades / "report.md").write_text("12 / 12")
    for folder in (tmp_path, build, data, grades, work):
        folder.chmod(0o777)
    code = (
        "import os, sys; d = sys.argv[1]\n"
        "print(open(os.path.join(d, 'train.txt')).read(), os.listdir(os.path.join(d, 'grades')))"
    )
    argv = sandbox.wrap(
        [sys.executable, "-c", code, str(data)],
        writable=[work],
        read_only=[data],
        hidden=[build, grades],
        cwd=work,
    )
    env = sandbox.kernel_env(dict(os.environ), home=work)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["examples", "[]"], done.stdout  # the data, and no report


#: Runs as a throwaway ordinary user: a program in the jail such a user gets holds 8 MB in a
#: memfd and 8 MB in a file of its work folder it deleted (and, given "hide", makes itself
#: undumpable); prints what `processes.held_files` sees of the sandbox's tree, as that user.
HELD_AS_A_USER = r"""
import json, os, subprocess, sys
from pathlib import Path
from course_tools.grade.jail import sandbox
from course_tools.processes import held_files, kill_tree, process_tree
work, python, hold = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.executable = python
env = {**sandbox.kernel_env(dict(os.environ), work), "PYTHONPATH": sys.argv[4]}
seen = []
for mode in ("show", "hide"):
    argv = sandbox.wrap([python, "-c", hold, mode], writable=[work], cwd=work)
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "ready"
    held = held_files(process_tree(child.pid))
    seen.append([held.memfd_bytes, held.deleted_bytes, held.unreadable])
    kill_tree(child.pid)
    child.wait()
print(json.dumps(seen))
"""

HOLD = r"""
import ctypes, os, sys, time
memfd = os.memfd_create("hold")
os.write(memfd, b"m" * 8 * 2**20)
deleted = os.open("hold.bin", os.O_WRONLY | os.O_CREAT, 0o600)
os.unlink("hold.bin")
os.write(deleted, b"d" * 8 * 2**20)
if sys.argv[1] == "hide":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
print("ready", flush=True)
time.sleep(60)
"""


def test_as_an_ordinary_user_the_grader_sees_what_the_sandbox_holds_open():
    """As an ordinary user (no control group, a plain work folder) the grader reads the
    descriptors of the sandbox's processes: a memfd's 8 MB and a deleted file's 8 MB are seen
    through the real jail, and a process that made itself undumpable is seen as hiding them
    (the kernel's watchdog then stops it). As root, through a throwaway uid."""

    def argv(work: Path, system_python: str) -> list[str]:
        return [HELD_AS_A_USER, str(work), system_python, HOLD, str(ROOT)]

    with _throwaway_user(54322, argv, timeout=300) as (_, out):
        shown, hidden = json.loads(out.strip().splitlines()[-1])
    mb = 2**20
    assert 8 * mb <= shown[0] < 9 * mb and 8 * mb <= shown[1] < 9 * mb and shown[2] == 0, shown
    assert hidden[2] >= 1, hidden
