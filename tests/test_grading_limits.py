"""The grader's limits on what a hostile submission makes: the check process's messages and answer
line are capped whatever a model file holds, a tree past PATH_MAX is measured whole and removed,
and the user route's disk watch counts files, not only bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from course_tools.grade.core import checker, checks, files
from course_tools.runner import DiskWatch

#: Folders of 250-character names, 20 deep: a path of about 5,000 characters, past PATH_MAX.
LONG_NAME, LONG_DEPTH = "x" * 250, 20


def long_tree(top: Path, data: int = 0) -> None:
    """`LONG_DEPTH` folders named `LONG_NAME` under `top`, and at the bottom a file `big` of
    `data` bytes; made relative to each folder's descriptor (its full path cannot be opened)."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(LONG_DEPTH):
            os.mkdir(LONG_NAME, dir_fd=fd)
            inner = os.open(LONG_NAME, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("big", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        try:
            for _ in range(data // 2**20):
                os.write(out, b"\1" * 2**20)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def test_a_tree_past_path_max_is_measured_whole_and_removed(tmp_path):
    """A file at the bottom of a 5,000-character path counts in the disk use, and the clean-up
    removes it all (a full path that long cannot be opened: ENAMETOOLONG)."""
    top = tmp_path / "work"
    long_tree(top, data=8 * 2**20)
    assert len(str(top)) + LONG_DEPTH * (len(LONG_NAME) + 1) > 4096
    used = files.usage(top)
    assert used.bytes >= 8 * 2**20 and used.entries == LONG_DEPTH + 1 and used.unlisted == 0
    assert files.disk_bytes(top) == used.bytes
    assert files.remove_tree(top) == [] and not top.exists()


def test_the_disk_watch_stops_a_kernel_past_its_caps(tmp_path):
    """The user route's watch stops the kernel for bytes hidden past PATH_MAX and for a folder of
    many empty files (no bytes at all), and says which in the row's reason."""

    class Dog:
        reason = ""

        def kill(self, reason: str) -> None:
            self.reason = reason

    deep = tmp_path / "deep"
    long_tree(deep, data=4 * 2**20)
    dog = Dog()
    watch = DiskWatch(deep, limit_mb=2, dog=dog, interval=0.01)
    watch.start()
    watch.join(timeout=30)
    assert "took 4 MB, more than the 2 MB allowed" in dog.reason

    many = tmp_path / "many"
    many.mkdir()
    for index in range(300):
        (many / f"{index:04d}").touch()
    dog = Dog()
    watch = DiskWatch(many, limit_mb=1024, dog=dog, interval=0.01, max_entries=200)
    watch.start()
    watch.join(timeout=30)
    assert "more than 200 files and folders" in dog.reason

    dog = Dog()
    assert DiskWatch(many, limit_mb=1024, dog=dog, max_entries=1000).over() == ""


def test_a_walk_reads_no_more_of_a_folder_than_its_cap(tmp_path, monkeypatch):
    """`walk` stops reading a folder at its entry cap instead of listing (and sorting) it whole."""
    for index in range(2000):
        (tmp_path / f"{index:04d}").touch()
    read = []
    scandir = os.scandir

    class Counting:
        def __init__(self, path):
            self.inner = scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self.inner.close()

        def __iter__(self):
            for entry in self.inner:
                read.append(entry.name)
                yield entry

    monkeypatch.setattr(files.os, "scandir", Counting)
    assert len(list(files.walk(tmp_path, max_entries=10))) == 10
    assert len(read) <= 11
    with pytest.raises(files.TreeTooLarge, match="more than 10 files"):
        list(files.walk(tmp_path, max_entries=10, strict=True))


def test_a_failed_checks_message_is_cut(tmp_path):
    """An assertion's message (a CheckError is one) and any other error are cut in the check
    process, with how much was cut."""
    job = {
        "artifacts": str(tmp_path),
        "tests": [
            {"title": "assert", "source": "assert False, 'a' * 10**6"},
            {"title": "error", "source": "raise ValueError('b' * 10**6)"},
            {"title": "short", "source": "assert False, 'kept whole'"},
        ],
    }
    cut, error, short = checker._run_tests(job, settings=None)
    assert cut["message"] == "a" * checks.MESSAGE_CHARS + (
        f"... ({10**6 - checks.MESSAGE_CHARS:,} characters cut)"
    )
    assert error["message"].startswith("ValueError: bbb") and len(error["message"]) < 600
    assert short == {"passed": False, "message": "kept whole"}


def test_a_model_file_that_cannot_be_loaded_is_tried_once_and_its_error_cut(tmp_path, monkeypatch):
    """Keras's error on a .keras file whose layer class name is 100,000 characters repeats that
    name: the check's message keeps 1,000 of them, and the file is loaded once per submission,
    however many tests ask for it."""
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    path = tmp_path / "fit_model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["config"]["layers"][-1]["class_name"] = "Nope" + "_" * 100_000
    members["config.json"] = json.dumps(config).encode()
    path.unlink()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)

    loads = []
    load = keras.models.load_model

    def counting(*args, **kwargs):
        loads.append(kwargs.get("compile"))
        return load(*args, **kwargs)

    monkeypatch.setattr(keras.models, "load_model", counting)
    checks.clear_cache()
    try:
        messages = []
        for _ in range(3):
            with pytest.raises(checks.CheckError) as err:
                checks.load_model(path)
            messages.append(str(err.value))
    finally:
        checks.clear_cache()
    assert loads == [True, False]
    assert messages[0] == messages[1] == messages[2]
    assert messages[0].startswith("fit_model.keras cannot be loaded: ")
    assert "characters cut)" in messages[0] and len(messages[0]) < checks.MESSAGE_CHARS


# A check process whose answer is one line of 5 MB for a job on a folder named "huge".
HUGE_ANSWER = """
import json, sys
for line in sys.stdin:
    job = json.loads(line)
    message = "x" * 5_000_000 if job["artifacts"].endswith("huge") else "fine"
    print(json.dumps([{"passed": False, "message": message}] * len(job["tests"])), flush=True)
"""


def test_the_grader_reads_a_capped_answer_line_and_restarts_the_check_process(tmp_path):
    """An answer line longer than `ANSWER_CHARS` is that submission's error (never kept whole),
    and the next submission gets a fresh check process."""
    from course_tools.exercise import HiddenTest

    process = checker.CheckProcess(
        dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "checks.log",
        wrap=lambda argv: [sys.executable, "-c", HUGE_ANSWER],
    )
    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)] * 2
    try:
        first = process.run(tmp_path / "huge", {}, tests, timeout=60)
        stopped = process.process is None
        second = process.run(tmp_path / "fine", {}, tests, timeout=60)
    finally:
        process.close()
    assert len(first) == 2
    for passed, message in first:
        assert not passed and len(message) < 1000
        assert f"answered more than {checker.ANSWER_CHARS:,} characters" in message
    assert stopped and second == [(False, "fine")] * 2


def test_the_sandbox_sees_no_control_group_and_no_network_device(tmp_path):
    """Inside the sandbox /sys/fs/cgroup and the network devices' folders are empty and
    read-only: no other sandbox's memory use or host pids, no host interface names."""
    from helpers import require_or_skip

    from course_tools.grade.jail import sandbox

    available, detail = sandbox.status()
    if not available:
        require_or_skip("sandbox", f"no grading sandbox: {detail}")
    masked = [folder for folder in sandbox.MASKED if os.listdir(folder)]
    assert masked, "nothing to hide on this host"
    code = (
        "import json, os, sys\n"
        "seen = {f: os.listdir(f) for f in sys.argv[1:] if os.path.isdir(f)}\n"
        "try:\n"
        "    open(os.path.join(sys.argv[1], 'x'), 'w')\n"
        "    seen['written'] = True\n"
        "except OSError:\n"
        "    pass\n"
        "print(json.dumps(seen))\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    argv = sandbox.wrap([sys.executable, "-c", code, *masked], writable=[work], cwd=work)
    env = sandbox.kernel_env(dict(os.environ), home=work)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == dict.fromkeys(masked, [])


def _pinned_client(path: Path):
    """A stand-in kernel's ROUTER bound at `path`, and the grader's context with a DEALER that
    reached it (one message through): (kernel context, router, grader context, dealer)."""
    import zmq

    from course_tools.runner import _capped_context

    kernel = zmq.Context()
    router = kernel.socket(zmq.ROUTER)
    router.bind(f"ipc://{path}")
    context = _capped_context(message_kb=1024)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RECONNECT_IVL, 50)
    dealer.connect(f"ipc://{path}")
    dealer.send(b"hello")
    assert router.poll(5000) and router.recv_multipart()[1] == b"hello"
    return kernel, router, context, dealer


def _lure(path: Path):
    """A host socket listening at `path`, whose `accept` gives up after 2 s."""
    import socket

    lure = socket.socket(socket.AF_UNIX)
    lure.bind(str(path))
    lure.listen()
    lure.settimeout(2)
    return lure


def test_a_kernel_socket_path_replaced_by_a_link_is_never_connected_to(tmp_path):
    """The grader's sockets reach the kernel's socket files as they were bound: after the kernel
    replaces one with a link to another socket of the host and drops the connection, neither
    zmq's reconnection nor a new socket (the heartbeat's, after a missed beat) reaches it."""
    import zmq

    path, lure_path = tmp_path / "kernel-1", tmp_path / "lure"
    kernel, router, context, dealer = _pinned_client(path)
    lure = _lure(lure_path)
    path.unlink()
    path.symlink_to(lure_path)
    router.close(linger=0)  # the connection drops: zmq reconnects every 50 ms
    again = context.socket(zmq.REQ)  # a new socket reuses the one pinned, never the link
    again.connect(f"ipc://{path}")
    # gone (the kernel's files removed): a new socket connects nowhere, without waiting
    path.unlink()
    started = time.monotonic()
    late = context.socket(zmq.REQ)
    late.connect(f"ipc://{path}")
    assert time.monotonic() - started < 1
    path.symlink_to(lure_path)  # and a link put there afterwards is not followed either
    try:
        with pytest.raises(TimeoutError):
            lure.accept()
    finally:
        lure.close()
        dealer.close(linger=0)
        again.close(linger=0)
        late.close(linger=0)
        context.destroy(linger=0)
        kernel.destroy(linger=0)


def test_a_kernel_socket_folder_replaced_by_a_link_is_never_followed(tmp_path):
    """Red team 8b: the kernel renames its sockets' folder and puts a link to another folder of
    the host in its place, then misses a heartbeat: the heartbeat's new socket reuses the socket
    pinned when the kernel started, never the path, so the lure there gets no connection."""
    import zmq

    folder, moved, lures = tmp_path / "kernel", tmp_path / "moved", tmp_path / "lures"
    folder.mkdir()
    lures.mkdir()
    kernel, router, context, first = _pinned_client(folder / "kernel-5")
    lure = _lure(lures / "kernel-5")
    folder.rename(moved)
    folder.symlink_to(lures)  # the same path now leads to the lure
    second = context.socket(zmq.DEALER)  # as the heartbeat makes after a missed beat
    second.connect(f"ipc://{folder / 'kernel-5'}")
    second.send(b"again")
    try:
        assert router.poll(5000) and router.recv_multipart()[1] == b"again"
        with pytest.raises(TimeoutError):
            lure.accept()
    finally:
        lure.close()
        first.close(linger=0)
        second.close(linger=0)
        context.destroy(linger=0)
        kernel.destroy(linger=0)


#: A stand-in check process that writes 20 MB to its stderr (as Keras's warning repeating a
#: model file's 30 MB name did for red team 8b) before it answers.
LOUD_CHECKS = """
import json, sys
for line in sys.stdin:
    job = json.loads(line)
    sys.stderr.write("w" * 20_000_000)
    sys.stderr.flush()
    print(json.dumps([{"passed": True, "message": ""}] * len(job["tests"])), flush=True)
"""


def test_the_check_log_keeps_at_most_its_cap_of_a_check_process_output(tmp_path):
    """What a check process prints besides its answers goes to the batch's check log, at most
    `checker.LOG_BYTES` of it and a line saying how much was left out; its answers still arrive."""
    from course_tools.exercise import HiddenTest

    log = tmp_path / "checks.log"
    process = checker.CheckProcess(
        dict(os.environ),
        cwd=tmp_path,
        log_path=log,
        wrap=lambda argv: [sys.executable, "-c", LOUD_CHECKS],
    )
    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)]
    try:
        answers = process.run(tmp_path / "loud", {}, tests, timeout=60)
    finally:
        process.close()
    assert answers == [(True, "")]
    assert checker.LOG_BYTES <= log.stat().st_size < checker.LOG_BYTES + 1000
    assert "left out" in log.read_text()[-200:], log.read_text()[-200:]


#: A child that holds `MB` MB in a file it deleted (in its folder) or in a memfd, then sleeps.
HOLDER = """
import os, sys, time
kind, mb = sys.argv[1], int(sys.argv[2])
if kind in ("deleted", "deep"):
    for _ in range(18 if kind == "deep" else 0):  # a path past PATH_MAX (4,096): no readlink
        os.mkdir("d" * 250)
        os.chdir("d" * 250)
    fd = os.open("hold.bin", os.O_WRONLY | os.O_CREAT, 0o600)
    os.unlink("hold.bin")
else:
    fd = os.memfd_create("hold")
for _ in range(mb):
    os.write(fd, b"\\xab" * 2**20)
print("held", flush=True)
time.sleep(60)
"""


def _holder(folder: Path, kind: str, mb: int) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, str(mb)],
        cwd=folder,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_deleted_file_whose_path_is_past_path_max_is_counted(tmp_path):
    """Red team 28a: a file deleted while open under 18 folders of 250-character names (a path
    readlink cannot return) was skipped by the fd scan, and 3 GB passed the 1 GB cap; the scan
    stats the descriptor itself, so the path's length does not matter."""
    from course_tools.processes import held_files, process_tree

    child = _holder(tmp_path, "deep", 8)
    try:
        held = held_files(process_tree(child.pid))
        assert 8 * 2**20 <= held.deleted_bytes < 9 * 2**20 and held.memfd_bytes == 0
    finally:
        child.kill()
        child.wait()


def test_the_disk_watch_counts_a_file_the_kernel_deleted_while_open(tmp_path):
    """The user route's watch sees the blocks of a file deleted while a process of the kernel's
    tree holds it (no folder lists it), each file once, and stops the kernel past the cap; it
    reads them from the watchdog's last look (`Watchdog.held`)."""
    from course_tools.processes import Watchdog, held_files, process_tree

    child = _holder(tmp_path, "deleted", 8)
    try:
        assert list(tmp_path.iterdir()) == []  # nothing for a walk of the folder to find
        held = held_files(process_tree(child.pid))
        assert 8 * 2**20 <= held.deleted_bytes < 9 * 2**20 and held.memfd_bytes == 0

        class Dog:
            reason = ""

            def __init__(self, held) -> None:
                self.held = held

            def kill(self, reason: str) -> None:
                self.reason = reason

        over = DiskWatch(tmp_path, limit_mb=4, dog=Dog(held)).over()
        assert over.startswith("disk limit: the notebook's folder took 8 MB (8 MB of it in files")
        assert DiskWatch(tmp_path, limit_mb=16, dog=Dog(held)).over() == ""
        with Watchdog(child.pid, memory_mb=10**6, seconds=30, what="the notebook") as dog:
            watch = DiskWatch(tmp_path, limit_mb=4, dog=dog, interval=0.01)
            watch.start()
            watch.join(timeout=30)
        assert "took 8 MB (8 MB of it in files deleted while open), more than the 4 MB" in (
            dog.reason
        )
    finally:
        child.kill()
        child.wait()


def test_one_scan_of_the_descriptors_per_look_serves_both_watches(tmp_path, monkeypatch):
    """Red team 28a: the watchdog and the disk watch each scanned every descriptor of the tree
    (two full scans every 0.5 s, seconds long for a tree of hundreds of thousands); now the
    watchdog's look scans once and the disk watch reads that scan (`Watchdog.held`)."""
    from course_tools.processes import Watchdog

    child = _holder(tmp_path, "deleted", 1)
    first = f"/proc/{child.pid}/fd/{min(os.listdir(f'/proc/{child.pid}/fd'), key=int)}"
    scans, disk_looks = [], []
    readlink = os.readlink

    def counting(path, *args, **kwargs):
        if str(path) == first:  # each scan reads each descriptor's link once
            scans.append(threading.current_thread())
        return readlink(path, *args, **kwargs)

    class Counted(DiskWatch):
        def over(self) -> str:
            disk_looks.append(1)
            return super().over()

    monkeypatch.setattr(os, "readlink", counting)
    monkeypatch.setattr(Watchdog, "INTERVAL", 0.05)
    try:
        with Watchdog(child.pid, memory_mb=10**6, seconds=30, what="the notebook") as dog:
            watch = Counted(tmp_path, limit_mb=1024, dog=dog, interval=0.01)
            watch.start()
            time.sleep(1.5)
            watch.stopped.set()
            watch.join(timeout=30)
        assert dog.reason == "" and len(disk_looks) >= 10
        assert [thread for thread in scans if thread is watch] == []  # none by the disk watch
        assert 5 <= dog.looks == len(scans), (dog.looks, len(scans))  # one a look
        assert dog.held.deleted_bytes >= 2**20  # what the disk watch reads
    finally:
        child.kill()
        child.wait()


#: A child that, at each line read, allocates `MB` MB, says so, holds it 0.5 s, then frees it.
SPIKER = """
import sys, time
mb = int(sys.argv[1])
for line in sys.stdin:
    block = b"\x01" * (mb * 2**20)
    print("ok", flush=True)
    time.sleep(0.5)
    del block
"""


def _stopped_for_memory(child: subprocess.Popen, memory_mb: int, within: float) -> None:
    """A watchdog over `child` stops it for memory within `within` seconds, having seen more than
    300 MB (the child is killed in any case)."""
    from course_tools.processes import Watchdog

    try:
        with Watchdog(child.pid, memory_mb=memory_mb, seconds=60, what="the notebook") as dog:
            child.wait(timeout=within)
        reason = f"memory limit: the notebook used more than {memory_mb} MB and was stopped"
        assert dog.reason == reason
        assert dog.peak_mb > 300
    finally:
        child.kill()
        child.wait()


def test_the_memory_verdict_reads_the_memory_after_the_scan(monkeypatch):
    """Red team 28a: resident memory was read before the descriptor scan and judged after it, so
    a long scan judged a stale reading (a kernel passed a 4,096 MB cap by 2 GB); the verdict now
    takes the larger of the readings before and after the scan. Here memory grows DURING each
    scan (made long on purpose) and is freed before the next look: only a reading taken after the
    scan sees it."""
    from course_tools import processes
    from course_tools.processes import Watchdog

    child = subprocess.Popen(
        [sys.executable, "-c", SPIKER, "300"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    scan = processes.held_files

    def slow_scan(tree, *args, **kwargs):
        child.stdin.write("a\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ok"  # 300 MB held while the scan runs
        return scan(tree, *args, **kwargs)

    monkeypatch.setattr(processes, "held_files", slow_scan)
    monkeypatch.setattr(Watchdog, "INTERVAL", 1.0)  # each spike is over well before the next look
    _stopped_for_memory(child, memory_mb=200, within=10)


#: A parent that dups `N` descriptors of /dev/null (inheritable), starts 5 `sleep`s holding them
#: too, and waits: about 6 x N descriptors in its tree.
DUPER = """
import os, subprocess, sys
null = os.open(os.devnull, os.O_RDONLY)
for _ in range(int(sys.argv[1])):
    os.set_inheritable(os.dup(null), True)
kids = [subprocess.Popen(["sleep", "60"], close_fds=False) for _ in range(5)]
print("held", flush=True)
kids[0].wait()
"""


def _alive(process) -> bool:
    """Whether `process` still runs (a zombie, killed and not yet reaped, does not)."""
    with contextlib.suppress(Exception):
        return process.is_running() and process.status() != "zombie"
    return False


def test_a_tree_holding_too_many_descriptors_is_stopped(monkeypatch):
    """Red team 28a: 900 processes holding 391,500 descriptors made each scan seconds long. Past
    `max_descriptors` in the tree (counted without looking at any) the watchdog stops it with the
    reason, and reads none of their links; under it, nothing is said."""
    from course_tools import processes
    from course_tools.processes import Watchdog, held_files, process_tree

    child = subprocess.Popen(
        [sys.executable, "-c", DUPER, "100"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        tree = process_tree(child.pid)
        assert len(tree) == 6
        count = processes.descriptor_count(tree)
        assert 600 <= count < 700
        assert held_files(tree, max_descriptors=300) == processes.HeldFiles(
            descriptors=count, scanned=False
        )
        with Watchdog(child.pid, memory_mb=10**6, seconds=30, max_descriptors=10_000) as dog:
            time.sleep(0.6)
        assert dog.reason == "" and dog.held.scanned and dog.looks >= 1

        pids = {f"/proc/{process.pid}/fd/" for process in tree}
        looked = []
        readlink = os.readlink

        def counting(path, *args, **kwargs):
            if any(str(path).startswith(folder) for folder in pids):
                looked.append(path)
            return readlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "readlink", counting)
        with Watchdog(
            child.pid, memory_mb=10**6, seconds=30, what="the notebook", max_descriptors=300
        ) as dog:
            child.wait(timeout=10)
        # the count the watchdog's own look made (a starting `sleep` can hold a file of its own
        # for a moment, so a count taken earlier can be one more)
        seen = dog.held.descriptors
        assert not dog.held.scanned and 600 <= seen < 700, dog.held
        assert dog.reason.startswith(
            f"too many open descriptors: {seen:,} (limit 300), the grader cannot watch them"
        ), dog.reason
        assert dog.reason.endswith("and was stopped")
        assert looked == []
        deadline = time.monotonic() + 10
        while any(_alive(process) for process in tree[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(process) for process in tree[1:])  # the sleeps were killed too
    finally:
        processes.kill_tree(child.pid)
        child.wait()


def test_the_watchdog_counts_the_memory_a_memfd_holds(tmp_path):
    """A memfd's pages are in no process's resident memory: the watchdog adds them (once per
    file), and kills the tree past its memory limit."""
    from course_tools.processes import Watchdog

    child = _holder(tmp_path, "memfd", 96)
    try:
        with Watchdog(child.pid, memory_mb=80, seconds=30, what="the notebook") as dog:
            child.wait(timeout=20)
        assert dog.reason.startswith("memory limit: the notebook used more than 80 MB")
        assert dog.peak_mb > 96
    finally:
        child.kill()
        child.wait()


def test_a_kernel_tree_is_the_out_of_memory_killers_first_choice(tmp_path):
    """A kernel starts with oom_score_adj 1000 (set before it execs, inherited by its children);
    one that lowers it has it raised back by its watchdog."""
    import nbformat

    from course_tools.processes import Watchdog, first_to_go
    from course_tools.runner import Limits, RunOptions, run_notebook

    notebook = nbformat.v4.new_notebook()
    code = (
        "import subprocess\n"
        "print(open('/proc/self/oom_score_adj').read().strip(),\n"
        "      subprocess.run(['cat', '/proc/self/oom_score_adj'], capture_output=True,\n"
        "                     text=True).stdout.strip())"
    )
    notebook.cells = [nbformat.v4.new_code_cell(code)]
    outcome = run_notebook(notebook, tmp_path, dict(os.environ), RunOptions(limits=Limits(60, 120)))
    assert outcome.status == "ran", outcome.reason
    assert notebook.cells[0].outputs[0]["text"].split() == ["1000", "1000"]

    child = subprocess.Popen(["sleep", "30"], preexec_fn=first_to_go, start_new_session=True)
    adj = Path(f"/proc/{child.pid}/oom_score_adj")
    try:
        assert adj.read_text().strip() == "1000"
        adj.write_text("0")  # root may lower it; an ordinary user's process down to its start
        with Watchdog(child.pid, memory_mb=10**6, seconds=30, first_to_go=True):
            deadline = time.monotonic() + 10
            while adj.read_text().strip() != "1000" and time.monotonic() < deadline:
                time.sleep(0.05)
        assert adj.read_text().strip() == "1000"
    finally:
        child.kill()
        child.wait()


def test_a_kernel_killed_for_a_deleted_file_says_disk_limit(tmp_path):
    """End to end in the runner: a cell writing into a file it deleted is stopped at the work
    folder's cap, and the row's reason says why."""
    import nbformat

    from course_tools.runner import Limits, RunOptions, run_notebook

    notebook = nbformat.v4.new_notebook()
    code = (
        "import os, time\n"
        "f = open('hold.bin', 'wb'); os.unlink('hold.bin')\n"
        "for _ in range(12): f.write(b'x' * 2**20); f.flush()\n"
        "time.sleep(30)"
    )
    notebook.cells = [nbformat.v4.new_code_cell(code)]
    options = RunOptions(limits=Limits(60, 120, disk_mb=4), watch_folder=tmp_path)
    outcome = run_notebook(notebook, tmp_path, dict(os.environ), options)
    assert outcome.status == "killed"
    assert "deleted while open" in outcome.reason and "4 MB allowed" in outcome.reason


def test_the_kernel_log_on_a_full_disk_is_drained_and_its_error_kept(tmp_path):
    """A kernel log that cannot be written (no space left: /dev/full; or not opened at all)
    never stops its pipe being read (a kernel printing never blocks) and keeps the error."""
    from course_tools.runner import CappedLog

    for path in (Path("/dev/full"), tmp_path / "absent" / "kernel.log"):
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdout.write('x' * 2**22)"],
            stdout=subprocess.PIPE,
        )
        log = CappedLog(writer.stdout, path, limit=2**20)
        log.start()
        assert writer.wait(timeout=30) == 0
        log.join(timeout=30)
        assert not log.is_alive() and isinstance(log.error, OSError)


def _full(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_mark_that_cannot_be_written_is_that_rows_grader_error(tmp_path, monkeypatch):
    """The grader's own record of a submission (`RunningMarks`) failing on a full disk makes
    that row a grader error (graded again next run) and the batch goes on, never an exception
    that ends the batch with an empty gradebook."""
    from types import SimpleNamespace

    from course_tools.grade.core import report
    from course_tools.grade.core.roster import Submission
    from course_tools.grade.routes import batch
    from course_tools.grade.routes.supervised import RunningMarks

    parts = SimpleNamespace(max_points=12, tests=[], answers=[])
    b = SimpleNamespace(out=tmp_path / "grades", parts=parts)
    graded = []

    def grade_one(b, s, where):
        graded.append(s.student)
        g = report.Grade(s.student, s.path, "graded", max_score=12)
        report.save(g, b.out / s.student)
        return g

    monkeypatch.setattr(batch, "grade_one", grade_one)
    marks = RunningMarks(tmp_path / "running", 2)
    monkeypatch.setattr(marks, "_write", _full)
    g = batch.recorded(b, Submission("alice", tmp_path / "a.ipynb"), None, marks)
    assert graded == [] and g.status == "grader error" and g.key == ""
    assert "No space left on device" in g.reason and "not run" in g.reason
    assert report.load(b.out / "alice").status == "grader error"

    marks = RunningMarks(tmp_path / "running", 2)
    monkeypatch.setattr(
        marks, "_write", lambda student, state, alone: _full() if state == "done" else None
    )
    g = batch.recorded(b, Submission("bob", tmp_path / "b.ipynb"), None, marks)
    assert graded == ["bob"] and g.status == "grader error" and "after it was graded" in g.reason
    assert report.load(b.out / "bob").status == "grader error"


def test_a_grade_that_could_not_be_saved_still_has_its_row_and_a_full_gradebook_exits_1(
    tmp_path, monkeypatch, capsys
):
    """A submission whose grade could not be saved (a full disk) gets a grader error row in the
    gradebook; when even the gradebook cannot be written, a message names its file system and
    the command exits 1."""
    from types import SimpleNamespace

    from course_tools.grade.core.roster import Submission
    from course_tools.grade.routes import supervised

    parts = SimpleNamespace(max_points=12, tests=[], answers=[])
    b = SimpleNamespace(out=tmp_path / "grades", parts=parts)
    g = supervised.unsaved(b, Submission("alice", tmp_path / "a.ipynb"))
    assert g.status == "grader error" and g.key == "" and "could not save" in g.reason

    monkeypatch.setattr(supervised, "write_gradebooks", _full)
    with pytest.raises(SystemExit) as exit_:
        supervised.write_or_exit(b, [g])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert f"the gradebook could not be written in {b.out}" in err and "is full" in err


def test_a_kernel_process_that_hides_its_descriptors_is_stopped(tmp_path, monkeypatch):
    """As an ordinary user, a process of the kernel that made itself undumpable (prctl) has a
    /proc/<pid>/fd its own user cannot read (root reads it: forced here): its memfds and deleted
    files would be unseen, so the kernel's watchdog stops the tree; a zombie (unreadable too,
    holding nothing) is no such process."""
    from course_tools import processes

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    zombie = subprocess.Popen(["true"])
    time.sleep(0.3)  # `true` ended, not reaped: a zombie
    hidden = {f"/proc/{child.pid}/fd", f"/proc/{zombie.pid}/fd"}
    listdir = os.listdir

    def refusing(path="."):
        if str(path) in hidden:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refusing)
    try:
        assert processes.held_files([processes.psutil.Process(zombie.pid)]).unreadable == 0
        with processes.Watchdog(child.pid, 10**6, seconds=30, what="the notebook") as dog:
            time.sleep(0.5)
        assert dog.reason == ""  # not a kernel's tree: nothing said
        with processes.Watchdog(
            child.pid, 10**6, seconds=30, what="the notebook", first_to_go=True
        ) as dog:
            child.wait(timeout=10)
        assert "hid the files it holds open" in dog.reason
    finally:
        child.kill()
        child.wait()
        zombie.wait()


def test_the_empty_tfds_folders_of_this_process_are_removed(tmp_path):
    """tensorflow-datasets leaves an empty tmp*tfds folder in the temporary folder whenever the
    batch's data source is decided on a dataset not prepared: the routes remove those this
    process made (empty, this user's, since it started), never a fuller or older one."""
    from course_tools.grade.routes import batch

    new, full, old = (
        tmp_path / "tmpa1b2c3d4tfds",
        tmp_path / "tmpfull0000tfds",
        tmp_path / "tmpold00000tfds",
    )
    for folder in (new, full, old):
        folder.mkdir()
    (full / "dataset_info.json").write_text("{}")
    os.utime(old, (1_000_000, 1_000_000))
    assert batch.remove_tfds_leftovers(tmp_path) == [new]
    assert not new.exists() and full.exists() and old.exists()


def test_the_slurm_route_says_which_jail_limits_are_not_enforced(tmp_path, monkeypatch, capsys):
    """At submission, the Slurm route prints the `NOT ENFORCED` lines a local run prints (the
    same function), and each task's log starts with what its node's kernel enforced."""
    from types import SimpleNamespace

    from course_tools.grade.core.roster import Submission
    from course_tools.grade.jail import limits as jail_limits
    from course_tools.grade.routes import slurm_array

    rows = [
        jail_limits.Limit("memory", held=False, how="resident memory only"),
        jail_limits.Limit("host knobs", held=True, how="/proc/sys read-only"),
    ]
    monkeypatch.setattr(jail_limits, "enforced", lambda: rows)
    monkeypatch.setattr(slurm_array, "missing", lambda: None)
    monkeypatch.setattr(slurm_array.roster, "collect_submissions", lambda paths: [])
    monkeypatch.setattr(slurm_array, "check_out", lambda *args: None)
    alice = Submission("alice", tmp_path / "alice.ipynb")
    monkeypatch.setattr(slurm_array, "to_grade", lambda b, s, regrade: [alice])

    class Submitted(Exception):
        pass

    def submit(*args):
        raise Submitted

    monkeypatch.setattr(slurm_array, "submit", submit)
    monkeypatch.setattr(slurm_array, "_cancel_after", lambda *args, **kwargs: None)
    b = SimpleNamespace(
        sandboxed=True, out=tmp_path, solution_path=None, forget_solution=lambda: None
    )
    with pytest.raises(Submitted):
        slurm_array.grade(b, [], slurm_array.SlurmOptions(), progress=False)
    out = capsys.readouterr().out
    assert out == (
        "course grade: jail memory: NOT ENFORCED by the kernel here: resident memory only\n"
    )
    assert jail_limits.missing() == [out.removeprefix("course grade: ").strip()]
    node = os.uname().nodename
    assert slurm_array.node_limits() == [
        f"jail memory on {node}: NOT ENFORCED by the kernel: resident memory only",
        f"jail host knobs on {node}: enforced: /proc/sys read-only",
    ]


@pytest.mark.parametrize("version", [1, 2])
def test_a_slurm_kernel_killed_at_the_tasks_memory_limit_says_memory_limit(
    tmp_path, monkeypatch, version
):
    """In a Slurm task without a group of its own for the kernel (an ordinary user's), a kernel
    that died while the out-of-memory killer took a process in the task's cgroup (up to the
    job's, never above: other jobs share those) is "killed" for the memory limit, saved so."""
    from course_tools.grade.core import report
    from course_tools.grade.jail import cgroups
    from course_tools.grade.routes import slurm_array

    root = tmp_path / "cgroup"
    own = "/slurm/uid_1001/job_7/step_0/task_0"
    if version == 1:
        proc = f"5:memory:{own}\n4:pids:{own}\n"
        top, name, line = root / "memory", "memory.oom_control", "oom_kill_disable 0\noom_kill {}\n"
    else:
        proc = f"0::{own}\n"
        top, name, line = root, "memory.events", "low 0\noom {}\noom_kill {}\n"
        (root / "cgroup.controllers").parent.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("memory pids\n")
    folders = {p: top / p for p in ("slurm/uid_1001", "slurm/uid_1001/job_7", own.lstrip("/"))}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)

    def kills(uid: int, job: int, task: int) -> None:
        for key, count in (("slurm/uid_1001", uid), ("slurm/uid_1001/job_7", job)):
            (folders[key] / name).write_text(line.format(count, count))
        (folders[own.lstrip("/")] / name).write_text(line.format(task, task))

    kills(5, 0, 0)
    assert cgroups.own_oom_kills(root, proc) == 0  # another job's kills: not this task's
    kills(6, 1, 1)
    assert cgroups.own_oom_kills(root, proc) == 2

    before = {"n": 0}
    monkeypatch.setattr(cgroups, "own_oom_kills", lambda: before["n"])
    g = report.Grade("alice", tmp_path / "alice.ipynb", "kernel died", "the kernel died")
    assert not slurm_array.memory_killed(g, 0, tmp_path / "alice")  # no kill meanwhile
    before["n"] = 2
    assert slurm_array.memory_killed(g, 0, tmp_path / "alice")
    assert g.status == "killed" and g.reason.startswith("memory limit:")
    assert report.load(tmp_path / "alice").status == "killed"
    graded = report.Grade("bob", tmp_path / "bob.ipynb", "graded")
    assert not slurm_array.memory_killed(graded, 0, tmp_path / "bob")


def _dead_pid() -> int:
    """The pid of a process that has ended (reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("version", [1, 2])
def test_a_slurm_nodes_groups_left_by_graders_that_are_gone_are_removed_by_the_next(
    tmp_path, version
):
    """On a fake cgroup tree of a Slurm node: making a group sweeps the node's whole Slurm tree
    (not only the new group's parent, another job's every time), removing every group of a grader
    that is gone (a cancelled or timed-out task's) and then the job's own groups it kept Slurm from
    removing, while they are empty; a live grader's group, a group holding a process and
    anything not the grader's are left, and so is everything outside the Slurm tree."""
    from course_tools.grade.jail import cgroups

    root = tmp_path / "cgroup"
    dead, alive = _dead_pid(), os.getpid()
    if version == 1:
        mounts = [root / "memory", root / "pids"]
        node, task = "slurm_node/uid_0", "step_batch/task_0"
        proc = f"8:pids:/{node}/job_2/{task}\n4:memory:/{node}/job_2/{task}\n"
        for mount in mounts:
            (mount / node / "job_2" / task).mkdir(parents=True)
            (mount / "cgroup.procs").write_text("")
    else:
        mounts = [root]
        node, task = "system.slice/slurmstepd.scope", "step_batch/user/task_0"
        proc = f"0::/{node}/job_2/{task}\n"
        (root / node / "job_2" / task).mkdir(parents=True)
        for folder in ("", f"{node}/job_2/step_batch/user", f"{node}/job_2/{task}"):
            (root / folder / "cgroup.controllers").write_text("memory pids")
            (root / folder / "cgroup.subtree_control").write_text("memory pids")
    (root / "proc").mkdir()
    (root / "proc" / "cgroup").write_text(proc)
    where = {
        "gone": f"{node}/job_1/{task}/{cgroups.PREFIX}{dead}-aaaa",
        "alive": f"{node}/job_3/{task}/{cgroups.PREFIX}{alive}-bbbb",
        "busy": f"{node}/job_4/{task}/{cgroups.PREFIX}{dead}-cccc",
        "other": f"{node}/job_5/{task}/someone-else",
        "outside": f"elsewhere/{cgroups.PREFIX}{dead}-dddd",
    }
    for mount in mounts:
        for path in where.values():
            (mount / path).mkdir(parents=True)
        (mount / node / "job_4" / task / "cgroup.procs").write_text("4242")  # a process in it
    group = cgroups.Cgroup.create(memory_mb=100, pids=50, root=root, proc=root / "proc")
    assert group is not None and group.version == version
    for mount in mounts:
        assert not (mount / node / "job_1").exists()  # its group, then the job's own groups
        assert (mount / where["alive"]).is_dir() and (mount / where["other"]).is_dir()
        assert not (mount / where["busy"]).exists() and (mount / node / "job_4" / task).is_dir()
        assert (mount / where["outside"]).is_dir()
        assert (mount / node / "job_2" / task).is_dir()  # this task's own


def test_a_group_whose_making_fails_half_way_leaves_nothing(tmp_path):
    """An ordinary user's Slurm task (cgroup v1): the memory group can be made in the task's
    group handed to the user, the pids one cannot: the memory folder made is removed before the
    error (it was left in every task's group, and kept Slurm from removing the job's)."""
    from course_tools.grade.jail import cgroups

    root = tmp_path / "cgroup"
    own = "slurm_node/uid_1001/job_7/step_batch/task_0"
    (root / "memory" / own).mkdir(parents=True)
    (root / "pids").mkdir()  # the pids group of the task: not there (root's: not allowed)
    for mount in ("memory", "pids"):
        (root / mount / "cgroup.procs").write_text("")
    (root / "proc").mkdir()
    (root / "proc" / "cgroup").write_text(f"8:pids:/{own}\n4:memory:/{own}\n")
    with pytest.raises(OSError):
        cgroups.Cgroup.create(memory_mb=100, pids=50, root=root, proc=root / "proc")
    assert list((root / "memory" / own).iterdir()) == []
    assert cgroups.why_not(root).startswith("cannot make a control group")
    assert list((root / "memory" / own).iterdir()) == []


def test_the_kernel_log_escapes_c1_controls_and_bytes_that_are_not_utf8(tmp_path):
    """What red team 29a's cell wrote (CSI and OSC as C1 characters, U+009B, U+009D, and as lone
    bytes 0x9b, 0x9d) reaches kernel.log (and checks.log: the same `CappedLog`) as \\xNN, never
    as a control a terminal acts on; other characters, an é cut between two pipe reads
    included, stay as written."""
    from course_tools.runner import CappedLog

    code = (
        "import os, time\n"
        "os.write(1, '\\u009b2J\\u009bH \\u009d0;C1-TITLE\\u009c'.encode())\n"
        "os.write(2, b'\\x9b2J\\x9d0;T\\x9c caf\\xc3')\n"
        "time.sleep(0.3)\n"
        "os.write(2, b'\\xa9 ok\\x1b[2J\\n\\xc3')\n"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log = CappedLog(writer.stdout, tmp_path / "kernel.log", limit=2**20)
    log.start()
    assert writer.wait(timeout=30) == 0
    log.join(timeout=30)
    data = (tmp_path / "kernel.log").read_bytes()
    text = data.decode("utf-8")  # all of it UTF-8 now
    assert not [c for c in text if ord(c) < 0x20 and c not in "\t\n" or 0x7F <= ord(c) < 0xA0]
    assert text == (
        "\\x9b2J\\x9bH \\x9d0;C1-TITLE\\x9c\\x9b2J\\x9d0;T\\x9c café ok\\x1b[2J\n\\xc3"
    ), text


def test_a_slurm_tasks_grader_removes_its_own_groups_first_on_sigterm(tmp_path):
    """On SIGTERM (scancel, --time) a task's grader first removes every group it made (its
    kernel's and its check process's, on a fake v1 tree) before anything slower, and no group of
    another grader; `grade_task` passes it to its SIGTERM handler."""
    import inspect

    from course_tools.grade.jail import cgroups
    from course_tools.grade.routes import slurm_array

    root = tmp_path / "cgroup"
    own = "slurm_node/uid_0/job_2/step_batch/task_0"
    mine = [f"{cgroups.PREFIX}{os.getpid()}-{i}" for i in ("aaaa", "bbbb")]
    other = f"{cgroups.PREFIX}{os.getpid() + 1}-cccc"
    for mount in ("memory", "pids"):
        (root / mount / "cgroup.procs").parent.mkdir(parents=True)
        (root / mount / "cgroup.procs").write_text("")
        for name in [*mine, other]:
            (root / mount / own / name).mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc" / "cgroup").write_text(f"8:pids:/{own}\n4:memory:/{own}\n")
    cgroups.remove_own(root, root / "proc")
    for mount in ("memory", "pids"):
        assert sorted(p.name for p in (root / mount / own).iterdir()) == [other]
    assert "cgroups.remove_own()" in inspect.getsource(slurm_array._stopped)


#: A process that maps `N` GB read-only and reads one byte every 2 MB: the kernel keeps one page of
#: page tables (4 kB) per 2 MB read, in no RSS (its reads return the shared zero page).
TABLES = """
import mmap, sys
gb = int(sys.argv[1])
area = mmap.mmap(-1, gb << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
total = sum(area[i] for i in range(0, gb << 30, 2 << 20))
print("built", total, flush=True)
sys.stdin.readline()
"""


def test_page_tables_count_as_the_tree_s_memory():
    """Red team 30a: a notebook built 3.1 GB of page tables (a read-only mapping read once every
    2 MB) behind 54 MB of resident memory, unseen by a 2,048 MB cap as an ordinary user. The
    watchdog counts each process's page tables (`VmPTE`) with its resident memory: 400 GB mapped
    that way hold about 800 MB of tables, past a 300 MB cap, with under 100 MB resident."""

    child = subprocess.Popen(
        [sys.executable, "-c", TABLES, "400"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _stopped_for_memory(child, memory_mb=300, within=60)


def test_a_check_that_times_out_leaves_its_stack_and_its_submission_in_the_check_log(tmp_path):
    """The real check process, given a hidden test that outlasts the job's time limit: the
    submission's tests fail with the limit, and checks.log says whose checks were stopped, why, and
    where the process was (every thread's stack, written before the grader stopped it); the next
    submission gets a fresh process."""
    from course_tools.exercise import HiddenTest

    log = tmp_path / "checks.log"
    process = checker.CheckProcess(dict(os.environ), tmp_path, log, run_in=tmp_path)
    slow = "import time\ntime.sleep(120)"
    tests = [HiddenTest(question="1", title="sleeps", points=1, source=slow, cell_index=0)]
    quick = [HiddenTest(question="1", title="quick", points=1, source="pass", cell_index=0)]
    (tmp_path / "slow" / "artifacts").mkdir(parents=True)
    (tmp_path / "next" / "artifacts").mkdir(parents=True)
    try:
        stopped = process.run(tmp_path / "slow" / "artifacts", {}, tests, timeout=30)
        after = process.run(tmp_path / "next" / "artifacts", {}, quick, timeout=120)
    finally:
        process.close()
    (passed, why), *_ = stopped
    assert not passed and "longer than 30 s" in why and "details: checks.log" in why, stopped
    text = log.read_text()
    assert "<hidden test 0: sleeps>" in text, text[-3000:]  # the stack, from faulthandler
    where = f"course grade: no answer for {tmp_path / 'slow' / 'artifacts'}: time limit: "
    assert where in text, text[-600:]
    assert text.index("<hidden test 0: sleeps>") < text.index("course grade: no answer for")
    assert after == [(True, "")]


def test_a_task_exiting_is_read_from_its_stat_flags(tmp_path):
    """`processes.exiting` reads a task's state and its `PF_EXITING` flag from its stat, counting
    fields after the name's last parenthesis (a name may hold ") R ("); a missing folder is gone."""
    from course_tools import processes

    def task(state: str, flags: int) -> str:
        folder = tmp_path / f"{state}{flags}"
        folder.mkdir()
        (folder / "stat").write_text(f"41 (a ) R (name) {state} 1 41 41 0 -1 {flags} 120 0 0 0\n")
        return str(folder)

    assert processes.exiting(task("R", 0x400000 | processes.PF_EXITING))
    assert not processes.exiting(task("R", 0x400000))
    assert not processes.exiting(task("S", 0x400140))
    assert processes.exiting(task("Z", 0x400000))
    assert processes.exiting(str(tmp_path / "gone"))
    zombie = subprocess.Popen(["true"])
    time.sleep(0.3)  # ended, not reaped: a zombie
    try:
        assert processes.exiting(f"/proc/{zombie.pid}")
        assert not processes.exiting(f"/proc/{os.getpid()}")
    finally:
        zombie.wait()


def test_a_process_that_starts_to_exit_as_it_is_looked_at_is_not_taken_for_hiding(monkeypatch):
    """Red team 34b: as an ordinary user, /proc/<pid>/fd of a process that has started to exit is
    unreadable (EACCES) while its state still reads running; about 2% of ending `multiprocessing`
    pools got an honest kernel killed as hiding its files. The scan asks again after the refusal
    (`exiting`) and counts only a process still not exiting (forced here: the listing refused,
    then the flag read)."""
    from course_tools import processes

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    listdir, exiting = os.listdir, processes.exiting
    looks = []

    def refusing(path="."):
        if str(path) == f"/proc/{child.pid}/fd":
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    def exits_after_the_refusal(folder: str) -> bool:
        looks.append(folder)
        return len(looks) > 1 or exiting(folder)  # the first look: running, as /proc said

    monkeypatch.setattr(os, "listdir", refusing)
    monkeypatch.setattr(processes, "exiting", exits_after_the_refusal)
    try:
        held = processes.held_files([processes.psutil.Process(child.pid)])
    finally:
        child.kill()
        child.wait()
    assert looks == [f"/proc/{child.pid}"] * 2 and held.unreadable == 0


#: A process that holds memory (resident) and a memfd, then ends its first thread while another
#: runs: its own /proc folder then reads no memory and no descriptor (a zombie leader).
FIRST_THREAD_ENDS = """
import ctypes, os, threading, time
kept = bytearray(64 * 2**20)
for i in range(0, len(kept), 4096):
    kept[i] = 1
fd = os.memfd_create("held")
os.write(fd, b"\\1" * (32 * 2**20))
threading.Thread(target=time.sleep, args=(60,)).start()
print("held", flush=True)
ctypes.CDLL(None).pthread_exit(None)  # ctypes lets the GIL go: the other thread runs on
"""


def test_a_process_whose_first_thread_ended_still_shows_its_memory_and_files():
    """A process whose first thread ended while another runs shows a zombie's /proc/<pid>: no
    resident memory, no descriptor; the watchdog's readings go through a running thread's folder
    (`proc_folder`), so its memory and its memfd are counted all the same."""
    from course_tools import processes

    child = subprocess.Popen([sys.executable, "-c", FIRST_THREAD_ENDS], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"held"
        time.sleep(1)
        tree = processes.process_tree(child.pid)
        assert processes.psutil.Process(child.pid).status() == processes.psutil.STATUS_ZOMBIE
        assert processes.proc_folder(child.pid).startswith(f"/proc/{child.pid}/task/")
        assert processes.resident_mb(tree) > 64
        held = processes.held_files(tree)
        assert held.memfd_bytes >= 32 * 2**20 and held.unreadable == 0
        assert processes.descriptor_count(tree) >= 1
    finally:
        child.kill()
        child.wait()


#: A check process that answers with its pid; after a job on a folder named "hog" it holds 150 MB,
#: and it dies on any later job (as the memory a model it could not load left behind made the next
#: submission's checks fail: red team 35b); a fresh process answers every job.
LEFT_BEHIND = """
import json, os, sys
held = None
for line in sys.stdin:
    job = json.loads(line)
    if held is not None:
        os._exit(9)  # killed reading these files, for what an earlier job left
    if job["artifacts"].endswith("hog"):
        held = bytearray(150 * 2**20)
        held[::4096] = b"\\1" * len(held[::4096])
    answer = [{"passed": True, "message": str(os.getpid())}] * len(job["tests"])
    print(json.dumps(answer), flush=True)
"""


def _left_behind(tmp_path: Path, memory_mb: float) -> checker.CheckProcess:
    return checker.CheckProcess(
        dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "checks.log",
        memory_mb=memory_mb,
        wrap=lambda argv: [sys.executable, "-c", LEFT_BEHIND],
    )


def test_a_check_failing_after_other_submissions_is_run_again_in_a_fresh_process(tmp_path):
    """Red team 35b: a model file that could not be loaded left 3.3 GB in the shared check process,
    and the next (honest) submission's checks failed at the memory limit: 1/12, kept on a re-run.
    Checks that fail in a process that had read other submissions' files are run once more in a
    fresh one, and the log says so; a failure in a fresh process stands (the files' own)."""
    from course_tools.exercise import HiddenTest

    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)]
    process = _left_behind(tmp_path, memory_mb=10**6)  # no recycling: the hog's memory stays
    try:
        hog = process.run(tmp_path / "hog", {}, tests, timeout=60)
        honest = process.run(tmp_path / "honest", {}, tests, timeout=60)
    finally:
        process.close()
    assert hog[0][0] and honest[0][0], (hog, honest)
    assert honest[0][1] != hog[0][1]  # another process answered
    log = (tmp_path / "checks.log").read_text()
    assert f"no answer for {tmp_path / 'honest'}: " in log and "; once more, fresh\n" in log, log
    assert f"course grade: {tmp_path / 'honest'}: the fresh process answered" in log, log


def test_a_check_process_left_holding_half_its_limit_is_replaced_before_the_next_job(tmp_path):
    """After a job that leaves the check process holding more than `RECYCLE_SHARE` of its memory
    limit, the next submission starts in a fresh process (never the first try in the old one)."""
    from course_tools.exercise import HiddenTest

    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)]
    process = _left_behind(tmp_path, memory_mb=250)  # the hog holds about 160 MB: over half
    try:
        hog = process.run(tmp_path / "hog", {}, tests, timeout=60)
        replaced = process.process is None
        honest = process.run(tmp_path / "honest", {}, tests, timeout=60)
    finally:
        process.close()
    assert replaced and hog[0][0] and honest[0][0] and honest[0][1] != hog[0][1]
    assert "no answer" not in (tmp_path / "checks.log").read_text()


def test_a_model_config_of_too_many_layers_is_refused_unloaded(tmp_path):
    """Red team 35a: Keras rebuilds a deep `Sequential` in more than linear time (700 layers 69 s),
    and three crafted 31 KB files held the shared check process for its whole 300 s. A config that
    declares more than `MAX_MODEL_LAYERS` layers (nested ones counted) fails with the count and is
    never built; a model of the exercise's size loads."""
    import json
    import zipfile

    import keras

    from course_tools.grade.core import checks

    small = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2)])
    small.save(tmp_path / "small.keras")
    assert checks.config_layers(tmp_path / "small.keras") == 2  # its InputLayer and Dense
    assert isinstance(checks.load_model(tmp_path / "small.keras"), keras.Model)
    dense = {"class_name": "Dense", "config": {"units": 4}}
    inner = {"class_name": "Sequential", "config": {"layers": [dense] * 150}}
    config = {"class_name": "Sequential", "config": {"layers": [inner, *[dense] * 60]}}
    with zipfile.ZipFile(tmp_path / "deep.keras", "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("metadata.json", "{}")
    assert checks.config_layers(tmp_path / "deep.keras") == 211
    started = time.monotonic()
    with pytest.raises(checks.CheckError, match="declares 211 layers, more than the 200"):
        checks.load_model(tmp_path / "deep.keras")
    assert time.monotonic() - started < 5  # refused, not built


#: A check process whose job on "slow" works `SLOW` s and then dies, once it has read another job
#: (the first job of a process never dies): a crash placed just before the time limit.
SLOW_THEN_DIES = """
import json, os, sys, time
jobs = 0
for line in sys.stdin:
    job = json.loads(line)
    jobs += 1
    if job["artifacts"].endswith("slow"):
        time.sleep(float(os.environ["SLOW"]))
        if jobs > 1:
            os._exit(9)
    answer = [{"passed": True, "message": str(os.getpid())}] * len(job["tests"])
    print(json.dumps(answer), flush=True)
"""


def test_a_second_run_gets_only_what_the_first_left_of_the_time_limit(tmp_path):
    """Red team 36a: checks that worked almost to the time limit and then crashed ran a second
    time in a fresh process with a whole new limit, holding the batch's one check process twice as
    long. The second run gets what the first left; with under `RETRY_LEFT_SHARE` of the limit left
    there is none, and the crash stands."""
    from course_tools.exercise import HiddenTest

    tests = [HiddenTest(question="1", title="one", points=1, source="pass", cell_index=0)]
    process = checker.CheckProcess(
        {**os.environ, "SLOW": "9.5"},
        cwd=tmp_path,
        log_path=tmp_path / "checks.log",
        wrap=lambda argv: [sys.executable, "-c", SLOW_THEN_DIES],
    )
    started = time.monotonic()
    try:
        first = process.run(tmp_path / "first", {}, tests, timeout=60)
        slow = process.run(tmp_path / "slow", {}, tests, timeout=10)
    finally:
        process.close()
    assert first[0][0] and not slow[0][0], (first, slow)
    assert time.monotonic() - started < 20  # not a second run of 10 s more
    log = (tmp_path / "checks.log").read_text()
    assert "once more, fresh" not in log and f"no answer for {tmp_path / 'slow'}" in log, log


def _display(display_id: str, html: str = "x") -> dict:
    content = {"data": {"text/html": html}, "metadata": {}, "transient": {"display_id": display_id}}
    header = {"msg_type": "display_data", "msg_id": "m"}
    return {"msg_type": "display_data", "header": header, "parent_header": {}, "content": content}


def test_display_ids_count_against_the_caps_and_long_ones_are_never_kept():
    """Red team 37a: nbclient keeps every display id it is given, and the caps counted only the
    output: 3,000 outputs with 1 MB ids grew the grader to 3.1 GB. An id longer than
    `DISPLAY_ID_CHARS` is not kept (its output is, as a plain one); a shorter one counts against
    the caps with its output, and an output dropped past them takes its id along; a widget's id
    counts too."""
    import nbformat

    from course_tools import runner

    client = runner._CappedClient(
        nbformat.v4.new_notebook(), cell_limit=10_000, notebook_limit=10_000, log_path=None
    )
    client.reset_execution_trackers()  # as nbclient does before a run
    client.clear_before_next_output = False  # as it does before each cell
    outs: list = []
    for index in range(50):  # 50 ids of 1 MB: none kept
        msg = _display(f"{index:04d}" + "x" * 2**20)
        client.output(outs, msg, msg["content"]["transient"]["display_id"], 0)
    assert client._display_id_map == {} and len(outs) == 50
    assert client.kept < 10_000  # the outputs themselves, without their ids
    for index in range(200):  # short ids: kept while the caps allow, dropped with their output
        client.output(outs, _display(f"id-{index}" + "y" * 200), f"id-{index}" + "y" * 200, 0)
    kept_ids = len(client._display_id_map)
    assert 0 < kept_ids < 200 and client.dropped[0] > 0
    assert sum(len(k) for k in client._display_id_map) <= client.kept <= 10_000
    comm = {"data": {"state": {}}, "comm_id": "c" * 20_000, "target_name": "jupyter.widget"}
    client.handle_comm_msg([], {"msg_type": "comm_open", "content": comm, "buffers": []}, 0)
    assert client.comm_cut and "c" * 20_000 not in getattr(client, "widget_state", {})


def test_keras_settings_a_job_changes_are_put_back_before_the_next(tmp_path):
    """Red team 37a: a saved model can change Keras's global settings in the check process (an
    activation named `keras.config.set_epsilon` loads in safe mode); the next submission's checks
    see them as they were at the start."""
    from course_tools.exercise import HiddenTest

    def test(source: str) -> list:
        return [HiddenTest(question="1", title="t", points=1, source=source, cell_index=0)]

    process = checker.CheckProcess(dict(os.environ), tmp_path, tmp_path / "checks.log")
    (tmp_path / "a").mkdir()
    try:
        changed = "import keras\nkeras.config.set_epsilon(0.5)\nkeras.config.set_floatx('float16')"
        first = process.run(tmp_path / "a", {}, test(changed), timeout=120)
        same = "import keras\nassert keras.config.epsilon() == 1e-7\n"
        same += "assert keras.config.floatx() == 'float32'"
        second = process.run(tmp_path / "a", {}, test(same), timeout=120)
    finally:
        process.close()
    assert first == [(True, "")] and second == [(True, "")], (first, second)
