"""course_utils.cluster: free ports, clear errors, deadlines, and no process left behind.

Most tests use tests/workers/tiny_worker.py (no TensorFlow: fast); the `slow` ones start real
MultiWorkerMirroredStrategy workers. "No process left behind" is checked in the process table
(psutil), for every worker and for the children they started.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from helpers import ROOT

from course_tools import doctor
from course_tools.processes import process_tree
from course_utils import cluster

WORKERS = Path(__file__).parent / "workers"
TINY = WORKERS / "tiny_worker.py"


def assert_gone(processes, within: float = 10.0) -> None:
    """Every pid in `processes` has ended (a zombie waiting for its reaper counts as ended)."""
    deadline = time.monotonic() + within
    alive = list(processes)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.05)
    assert not alive, (
        f"processes still running: {[psutil.Process(p).cmdline() for p in alive if _running(p)]}"
    )


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids(c: cluster.LocalCluster) -> list[int]:
    """Pids of the cluster's tasks."""
    return [process.pid for process in c.processes.values()]


def child_pids(c: cluster.LocalCluster) -> list[int]:
    """Pids of the processes the tiny workers started (`child pid N` in their logs)."""
    return [int(pid) for task in c.workers for pid in re.findall(r"child pid (\d+)", c.log(task))]


# --- TF_CONFIG ------------------------------------------------------------------------------------


def test_each_worker_gets_the_cluster_and_its_own_index(tmp_path):
    c = cluster.run(TINY, workers=3, log_dir=tmp_path, timeout=60)
    ports = [int(address.rsplit(":", 1)[1]) for address in c.spec["worker"]]
    assert c.spec["worker"] == [f"localhost:{port}" for port in ports] and len(set(ports)) == 3
    for worker in c.workers:  # the tiny worker prints its task and cluster from TF_CONFIG
        assert f"task worker {worker} pid" in c.log(worker)
        assert f"cluster={json.dumps(c.spec)}" in c.log(worker)
    for port in ports:
        with socket.socket() as s:
            s.bind(("localhost", port))  # free again: raises if a worker still held it


# --- running, failing, timing out -----------------------------------------------------------------


def test_run_success_keeps_each_log_and_leaves_nothing(tmp_path, monkeypatch):
    # The notebook's simulated devices must not reach the workers.
    monkeypatch.setenv("COURSE_DEVICES", "4")
    done = cluster.run(
        TINY,
        workers=3,
        args=["--child", "--sleep", "0.2"],
        log_dir=tmp_path,
        timeout=60,
    )
    assert list(done.returncodes.values()) == [0, 0, 0]
    for worker in done.workers:
        log = done.log(worker)
        assert f"task worker {worker}" in log and log.rstrip().endswith("done")
        assert "COURSE_DEVICES=None" in log
        assert done.log_paths[worker].read_text().count("\n") >= 4
    assert_gone(pids(done) + child_pids(done))


def test_a_stopped_clusters_logs_survive_a_later_run_in_the_same_folder(tmp_path):
    first = cluster.run(TINY, workers=1, args=["--sleep", "0.1"], log_dir=tmp_path, timeout=60)
    with pytest.raises(cluster.WorkerFailed):
        cluster.run(TINY, workers=1, args=["--fail", "worker 0"], log_dir=tmp_path, timeout=60)
    assert first.log(0).rstrip().endswith("done") and "fails on purpose" not in first.log(0)
    assert "fails on purpose" in first.log_paths[0].read_text()


def test_failing_worker_stops_the_others_and_shows_its_log(tmp_path):
    # The others hang: without failure detection this would end in ClusterTimeout instead.
    c = cluster.LocalCluster(
        TINY,
        workers=3,
        args=["--fail", "worker 1", "--hang", "--child"],
        log_dir=tmp_path,
        timeout=60,
    )
    with pytest.raises(cluster.WorkerFailed) as info:
        with c:
            c.wait()
    message = str(info.value)
    assert "worker 1 exited with code 3" in message
    assert "ValueError: this worker fails on purpose" in message  # the tail of its log
    assert str(c.log_paths[1]) in message
    assert info.value.worker == 1 and info.value.returncode == 3
    assert_gone(pids(c) + child_pids(c))


def test_a_worker_killed_by_a_signal_shows_its_python_stack(tmp_path):
    # A crash in TensorFlow's C++ leaves no Python traceback of its own: the log must show where
    # the task was (PYTHONFAULTHANDLER, set by LocalCluster).
    c = cluster.LocalCluster(
        TINY, workers=2, args=["--crash", "worker 1", "--hang"], log_dir=tmp_path, timeout=60
    )
    with pytest.raises(cluster.WorkerFailed) as info:
        with c:
            c.wait()
    message = str(info.value)
    assert "worker 1 was killed by SIGSEGV" in message
    assert "Fatal Python error: Segmentation fault" in c.log(1)
    assert 'tiny_worker.py", line' in message  # the stack's last frame, in the log's tail
    assert_gone(pids(c))


def test_worker_that_cannot_listen_gets_a_hint(tmp_path):
    with pytest.raises(
        cluster.WorkerFailed,
        match=r"(?s)Hint: the worker could not listen on its port.*Could not start gRPC",
    ):
        cluster.run(
            TINY,
            workers=2,
            args=[
                "--fail",
                "worker 0",
                "--hang",
                "--message",
                "tensorflow...UnknownError: Could not start gRPC server",
            ],
            log_dir=tmp_path,
            timeout=60,
        )


def test_hung_worker_hits_the_timeout(tmp_path):
    c = cluster.LocalCluster(
        TINY, workers=2, args=["--hang", "--ignore-term", "--child"], log_dir=tmp_path, timeout=1.5
    )
    with pytest.raises(
        cluster.ClusterTimeout, match=r"(?s)Timed out.*worker 0 \(still running\).*ready"
    ):
        with c:
            c.wait()
    assert all(code == -signal.SIGKILL for code in c.returncodes.values())  # SIGTERM was ignored
    assert_gone(pids(c) + child_pids(c))


def test_wait_for_reads_the_logs_and_fails_clearly(tmp_path):
    with cluster.LocalCluster(
        TINY, workers=2, args=["--sleep", "0.3"], log_dir=tmp_path, ready="^ready$", timeout=60
    ) as c:
        match = c.wait_for(r"pid (\d+)", worker=1)
        assert int(match.group(1)) == c.processes[1].pid
        with pytest.raises(
            cluster.ClusterError,
            match=r"worker 0 exited \(code 0\) without printing 'never printed'",
        ):
            c.wait_for("never printed", worker=0)
    assert_gone(pids(c))


def test_keyboard_interrupt_while_waiting_leaves_no_child(tmp_path):
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    c = cluster.LocalCluster(
        TINY, workers=2, args=["--hang", "--child"], log_dir=tmp_path, timeout=60
    )
    try:
        c.start()
        c.wait_for("child pid", worker="all")
        # Ctrl-C (the notebook's "interrupt") during wait():
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            c.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert_gone(pids(c) + child_pids(c))


def test_leaving_the_with_block_by_an_exception_stops_the_cluster(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with cluster.LocalCluster(
            TINY, workers=2, args=["--hang"], log_dir=tmp_path, ready="ready", timeout=60
        ) as c:
            raise KeyboardInterrupt
    assert_gone(pids(c))


def test_kill_one_worker_and_watch_the_rest(tmp_path):
    with cluster.LocalCluster(
        TINY, workers=2, args=["--sleep", "0.5"], log_dir=tmp_path, ready="ready", timeout=60
    ) as c:
        c.kill(1)
        codes = c.wait(check=False)
    assert codes == {0: 0, 1: -signal.SIGKILL}
    with pytest.raises(ValueError, match="No worker 5"):
        c.kill(5)


def test_other_jobs_get_their_tasks_and_waiting_for_the_chief_stops_the_servers(tmp_path):
    """Parameter-server training's shape: a chief that ends, workers and a ps that serve forever."""
    args = ["--hang-job", "worker", "--hang-job", "ps", "--sleep", "0.3"]
    c = cluster.run(
        TINY, workers=2, jobs={"chief": 1, "ps": 1}, args=args, log_dir=tmp_path, timeout=60,
        until=["chief"],
    )  # fmt: skip
    assert c.tasks == [0, 1, "chief 0", "ps 0"]
    assert set(c.spec) == {"worker", "chief", "ps"}
    addresses = [a for job in c.spec.values() for a in job]
    assert len(addresses) == len(set(addresses)) == 4
    for task, (job, index) in zip(c.tasks, [("worker", 0), ("worker", 1), ("chief", 0), ("ps", 0)]):
        assert f"task {job} {index} pid" in c.log(task)
        assert c.log_paths[task].name == f"tiny_worker-{job}-{index}.log"
    assert c.log("chief") == c.log("chief 0") and c.log("worker 1") == c.log(1)
    assert "done" in c.log("chief") and "done" not in c.log("ps")
    codes = c.returncodes
    assert codes["chief 0"] == 0 and all(codes[t] == -signal.SIGTERM for t in (0, 1, "ps 0"))
    assert_gone(pids(c))


def test_a_failing_parameter_server_stops_the_cluster(tmp_path):
    with pytest.raises(cluster.WorkerFailed, match="ps 0 exited with code 3") as failed:
        cluster.run(
            TINY, workers=1, jobs={"chief": 1, "ps": 1}, args=["--fail", "ps 0", "--hang"],
            log_dir=tmp_path, timeout=60, until=["chief"],
        )  # fmt: skip
    assert failed.value.worker == "ps 0" and "fails on purpose" in str(failed.value)


def test_bad_jobs_are_refused_clearly(tmp_path):
    for jobs in ({"worker": 1}, {"ps": 0}, {"PS": 1}):
        with pytest.raises(ValueError, match="give other jobs than 'worker'"):
            cluster.LocalCluster(TINY, workers=1, jobs=jobs)
    c = cluster.LocalCluster(TINY, workers=1, jobs={"ps": 1}, log_dir=tmp_path)
    with pytest.raises(ValueError, match="No task 'evaluator'.* workers 0-0 and 'ps 0'"):
        c.log("evaluator")


def test_two_clusters_back_to_back_and_side_by_side(tmp_path):
    first = cluster.run(TINY, workers=2, log_dir=tmp_path, timeout=60)
    second = cluster.run(TINY, workers=2, log_dir=tmp_path, timeout=60)  # same log files
    for task in second.workers:  # each run keeps its own log, though they share the files
        first_pid, second_pid = (str(run.processes[task].pid) for run in (first, second))
        assert first_pid in first.log(task) and second_pid not in first.log(task)
        assert second_pid in second.log(task) and first_pid not in second.log(task)
    a = cluster.LocalCluster(
        TINY, workers=2, args=["--sleep", "0.5"], log_dir=tmp_path / "a", timeout=60
    )
    b = cluster.LocalCluster(
        TINY, workers=2, args=["--sleep", "0.5"], log_dir=tmp_path / "b", timeout=60
    )
    with a, b:
        assert set(a.spec["worker"]).isdisjoint(b.spec["worker"])
        assert all(code == 0 for code in list(a.wait().values()) + list(b.wait().values()))
    assert_gone(pids(a) + pids(b))


def test_bad_input_is_refused_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="%%writefile"):
        cluster.LocalCluster(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="at least 1 worker, not 0"):
        cluster.LocalCluster(TINY, workers=0)
    c = cluster.LocalCluster(TINY, workers=1, log_dir=tmp_path)
    with pytest.raises(cluster.ClusterError, match="Start the cluster first"):
        c.wait()


# --- the notebook kernel dies ---------------------------------------------------------------------

PARENT = """
import json, re, sys, time
from course_utils import cluster
from course_tools import doctor
c = cluster.LocalCluster({script!r}, workers=2, args={args!r}, log_dir={log_dir!r}, timeout=120)
c.start()
c.wait_for("ready", worker="all")
children = [int(p) for t in c.workers for p in re.findall(r"child pid (\\d+)", c.log(t))]
print(json.dumps([p.pid for p in c.processes.values()] + children), flush=True)
{ending}
"""


def _guards_of(parent: psutil.Process) -> list[psutil.Process]:
    """The cluster guard processes `parent` started (not psutil's children(): see process_tree)."""
    return [
        p
        for p in process_tree(parent.pid)
        if p.ppid() == parent.pid and "course_utils.cluster" in " ".join(p.cmdline())
    ]


@pytest.mark.parametrize(
    "ending",
    ["time.sleep(120)", "sys.exit(0)"],
    ids=["parent-killed", "parent-exits-without-stop"],
)
def test_no_worker_survives_its_parent(tmp_path, ending):
    """Killed with SIGKILL (no clean-up runs) or ending without stop(): the guard kills every
    task's process group, the tasks' children included."""
    code = PARENT.format(
        args=["--hang", "--child"], script=str(TINY), log_dir=str(tmp_path), ending=ending
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        started = json.loads(parent.stdout.readline())
        # The tasks printed "ready", and so did their children.
        assert len(started) == 4
        if "sleep" in ending:
            assert all(_running(p) for p in started)
            parent.kill()
        parent.wait(timeout=30)
        assert_gone(started)
    finally:
        parent.kill()
        parent.wait()


def test_leftover_workers_finds_orphans_only(tmp_path):
    with cluster.LocalCluster(
        TINY, workers=2, args=["--hang"], log_dir=tmp_path / "live", ready="ready", timeout=60
    ) as live:
        # An orphan: its guard is killed first, then its parent dies.
        code = PARENT.format(
            args=["--hang"],
            script=str(TINY),
            log_dir=str(tmp_path / "orphan"),
            ending="time.sleep(120)",
        )
        parent = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        orphans = json.loads(parent.stdout.readline())
        try:
            (guard,) = _guards_of(psutil.Process(parent.pid))
            # SIGKILL: it never runs again (it stays a zombie until its parent is gone).
            guard.kill()
            parent.kill()
            parent.wait(10)
            found = {p.pid for p in doctor.leftover_workers()}
            # The orphans are listed, a live cluster's tasks are not.
            assert set(orphans) <= found
            assert found.isdisjoint(pids(live))
        finally:
            for pid in orphans:
                psutil.Process(pid).kill()
    assert_gone(orphans + pids(live))


def test_the_guard_stops_with_its_cluster(tmp_path):
    with cluster.LocalCluster(
        TINY, workers=1, args=["--hang"], log_dir=tmp_path, ready="ready", timeout=60
    ) as c:
        (guard,) = _guards_of(psutil.Process())
    assert_gone([guard.pid] + pids(c))


@pytest.mark.slow
def test_jupyter_kernel_restart_kills_the_workers(tmp_path):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:

        def run(code: str) -> str:
            out = []
            reply = kc.execute_interactive(
                code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", ""))
            )
            assert reply["content"]["status"] == "ok", reply["content"]
            return "".join(out)

        run(
            f"from course_utils import cluster\nc = cluster.LocalCluster({str(TINY)!r}, workers=2, "
            f"args=['--hang'], log_dir={str(tmp_path)!r}, ready='ready')\nc.start()"
        )
        code = "import json; print(json.dumps([p.pid for p in c.processes.values()]))"
        tasks = json.loads(run(code))
        assert all(_running(p) for p in tasks)  # alive after the cell that started them ended
        # What "Restart kernel" does when the kernel does not answer: SIGKILL.
        km.restart_kernel(now=True)
        assert_gone(tasks)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


# --- real TensorFlow workers ---------------------------------------------------------------------


@pytest.mark.slow
def test_real_multi_worker_strategy_back_to_back(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DEVICES", "4")
    for _ in range(2):  # a second cluster right after the first: no port or log clash
        with cluster.LocalCluster(
            WORKERS / "tf_worker.py",
            workers=2,
            log_dir=tmp_path,
            timeout=240,
            env={"CUDA_VISIBLE_DEVICES": "-1"},
            ready=r"replicas in sync: \d+",
        ) as c:
            c.wait()
        for task in c.workers:
            log = c.log(task)
            assert "replicas in sync: 2" in log
            assert "COURSE_DEVICES=None" in log  # the notebook's simulation did not leak
            device = f"/job:worker/replica:0/task:{task}/device:CPU:0"
            assert f"worker devices: ['{device}']" in log
            assert "all-reduce sum: 3.0" in log  # 1 + 2, across the two processes
        assert_gone(pids(c))


def test_error_summary_gives_the_exception_and_the_line_that_says_why():
    """The two shapes notebook 4 and the appendix meet when a peer dies: a broken connection
    (the reason under the node trace) and missed heartbeats (the reason on the exception's line,
    after the node's name, with the lost task on the next line)."""
    reset = textwrap.dedent("""\
        E0000 00:00:1.0 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE
        Traceback (most recent call last):
        tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:

        Detected at node adam/CollectiveReduceV2 defined at (most recent call last):
          File "loop_worker.py", line 78, in <module>

        Collective ops is aborted by: recvmsg:Connection reset by peer
        Additional GRPC error information from remote target /job:worker/replica:0/task:1
        The error could be from a previous operation. Restart your program to reset.
        """)
    assert cluster.error_summary(reset) == (
        "UnavailableError: Collective ops is aborted by: recvmsg:Connection reset by peer"
    )
    heartbeats = (
        "tensorflow.python.framework.errors_impl.UnavailableError: {{function_node __wrapped__"
        "CollectiveReduceV2_device_/job:worker/replica:0/task:0/device:CPU:0}} Collective ops is"
        " aborted by: The following tasks are unhealthy (stopped sending heartbeats):\n"
        "/job:worker/replica:0/task:1\nThe tasks have crashed.\n"
    )
    assert cluster.error_summary(heartbeats) == (
        "UnavailableError: Collective ops is aborted by: The following tasks are unhealthy "
        "(stopped sending heartbeats): /job:worker/replica:0/task:1"
    )
    assert cluster.error_summary("ready: worker 0\nfinished at step 192\n") is None


@pytest.mark.slow
def test_tensorflow_servers_listen_on_every_interface(tmp_path):
    """What notebook 4 (section 1) warns about: a TensorFlow server whose TF_CONFIG says
    `localhost` still listens on every interface (TensorFlow binds the wildcard address; none other
    in 2.21). If a TensorFlow version binds `localhost` only, this test fails and
    the warning, LocalCluster's docstring and appendix A's note must be revised."""
    script = tmp_path / "server.py"
    script.write_text(
        textwrap.dedent("""\
            import time
            import tensorflow as tf
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                          task_index=resolver.task_id, protocol="grpc")
            print("listening", flush=True)
            time.sleep(120)
            """)
    )
    with cluster.LocalCluster(
        script, workers=2, timeout=180, env={"CUDA_VISIBLE_DEVICES": "-1"}, ready="listening"
    ) as c:
        for task, process in c.processes.items():
            port = int(c.spec["worker"][task].rsplit(":", 1)[1])
            assert c.spec["worker"][task] == f"localhost:{port}"
            listening = {
                conn.laddr.ip
                for conn in psutil.Process(process.pid).net_connections(kind="tcp")
                if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
            }
            assert listening and listening <= {"::", "0.0.0.0"}, listening  # not 127.0.0.1
        workers = pids(c)
    assert_gone(workers)
