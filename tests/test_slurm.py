"""Notebook 4 on a real single-node Slurm: its scripts, its Slurm cells, and nothing left behind.

One Slurm cluster (tests/slurm.py: munge, slurmctld, slurmd from a temporary config) serves the
whole module. With it, notebook 4 itself runs under nbval (its one nbval run: with Slurm up when
the machine has Slurm, so that its Slurm cells submit real 2-task `sbatch` jobs of the notebook's
worker script: one ended with SIGTERM mid-training, which saves, and one that resumes; without
Slurm the same run checks that they skip). The last test stops the cluster and
checks that no daemon, job or worker survived. The TF_CONFIG derivation
(course_utils/cluster_tf_config.py) and the Kubernetes manifests (k8s/) need no Slurm.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import psutil
import pytest
import slurm
import yaml
from helpers import require_or_skip, run_notebook_under_nbval

from course_tools import doctor
from course_utils import cluster_tf_config

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "04_multi_worker.ipynb"
NO_SLURM = slurm.missing_programs()

pytestmark = pytest.mark.timeout(900)

#: What each task of notebook 4's preempted job prints once it saved (its loop_worker.py).
SAID_PREEMPTED = (
    r"^preempted: saved ckpt-(\d+) at step \1; all 2 replicas passed the barrier after saving$"
)


def manifest(name: str) -> list[dict]:
    """The documents of the Kubernetes manifest k8s/<name>."""
    return list(yaml.safe_load_all((ROOT / "k8s" / name).read_text()))


@pytest.fixture(scope="module")
def tf_config_module():
    return cluster_tf_config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(SlurmCluster or None, the ExitStack that stops it): one cluster for the module."""
    with contextlib.ExitStack() as stack:
        if NO_SLURM:
            yield None, stack
        else:
            folder = tmp_path_factory.mktemp("slurm")
            yield stack.enter_context(slurm.single_node_slurm(folder)), stack


@pytest.fixture
def slurm_cluster(cluster) -> slurm.SlurmCluster:
    if cluster[0] is None:
        require_or_skip("slurm", NO_SLURM)
    return cluster[0]


# --- TF_CONFIG from Slurm's variables, and Kubernetes manifests (no Slurm needed) -------------


def test_hostlists_and_task_counts_expand_like_slurm(tf_config_module):
    expand = tf_config_module.expand_hostlist
    assert expand("localhost") == ["localhost"]
    assert expand("node[07-08,10],gpu1") == ["node07", "node08", "node10", "gpu1"]
    assert expand("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand("a[9-11]") == ["a9", "a10", "a11"]
    assert tf_config_module.expand_counts("2(x3),1") == [2, 2, 2, 1]


def test_tf_config_from_slurm_variables(tf_config_module):
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "3",
        "SLURM_NODEID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NODELIST": "node[07-08]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_RESV_PORTS": "27001-27002",
    }
    config = tf_config_module.tf_config(env)
    assert config == {
        "cluster": {"worker": ["node07:27001", "node07:27002", "node08:27001", "node08:27002"]},
        "task": {"type": "worker", "index": 3},
    }
    json.dumps(config)
    # Without reserved ports: derived from the job id, below the ephemeral range, different for
    # neighbouring jobs; jobs whose ids agree modulo the number of blocks share them (documented).
    del env["SLURM_STEP_RESV_PORTS"]

    def ports(job: str) -> set[int]:
        workers = tf_config_module.tf_config({**env, "SLURM_JOB_ID": job})["cluster"]["worker"]
        return {int(a.rsplit(":", 1)[1]) for a in workers}

    blocks = len(tf_config_module.DERIVED_PORTS) // 2
    assert ports("4242") == {28484, 28485} and not ports("4242") & ports("4243")
    assert ports("4242") == ports(str(4242 + blocks))
    for job in range(0, 3 * blocks, 997):
        assert all(20000 <= port < 32768 for port in ports(str(job)))
    ephemeral = tf_config_module.ephemeral_ports()
    assert ephemeral is None or not ports("4242") & set(ephemeral)
    # Clear errors: outside srun, cyclic task placement, too few reserved ports.
    with pytest.raises(SystemExit, match="start the worker with srun"):
        tf_config_module.tf_config({"SLURM_PROCID": "0"})
    with pytest.raises(SystemExit, match="--distribution=block"):
        tf_config_module.tf_config(
            {**env, "SLURM_PROCID": "1", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"}
        )
    with pytest.raises(SystemExit, match="--resv-ports=2"):
        tf_config_module.tf_config({**env, "SLURM_STEP_RESV_PORTS": "27001"})


def test_tasks_that_share_a_nodes_gpus_get_one_share_each(tf_config_module):
    gpus = tf_config_module.task_gpus
    four = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert [gpus({**four, "SLURM_LOCALID": str(i)}, 2) for i in range(2)] == ["0,1", "2,3"]
    assert [gpus({**four, "SLURM_LOCALID": str(i)}, 4) for i in range(4)] == ["0", "1", "2", "3"]
    # Slurm bound the task already (it sees fewer GPUs than the step has), one task, no GPUs.
    assert (
        gpus({"CUDA_VISIBLE_DEVICES": "1", "SLURM_STEP_GPUS": "0,1", "SLURM_LOCALID": "1"}, 2)
        is None
    )
    assert gpus(four, 1) is None
    for visible in ("", "-1", None):
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        assert gpus({**env, "SLURM_LOCALID": "1"}, 2) is None
    with pytest.raises(SystemExit, match="--gpus-per-task=1"):
        gpus({"CUDA_VISIBLE_DEVICES": "0", "SLURM_LOCALID": "1"}, 2)
    # What the wrapper sets for task 3 of two 2-task nodes, each node with 4 GPUs for the step.
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NODEID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NODELIST": "node[07-08]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_RESV_PORTS": "27001-27002",
        "SLURM_STEP_GPUS": "4,5,6,7",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    variables = tf_config_module.worker_env(env)
    assert variables["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert json.loads(variables["TF_CONFIG"])["task"] == {"type": "worker", "index": 3}
    assert "CUDA_VISIBLE_DEVICES" not in tf_config_module.worker_env(
        {**env, "CUDA_VISIBLE_DEVICES": "-1"}
    )


def test_indexed_job_manifest_renders_tf_config_for_two_workers(tf_config_module):
    service, job = manifest("indexed_job.yaml")
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    pod = job["spec"]["template"]["spec"]
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    assert pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["command"][:4] == [
        "python",
        "cluster_tf_config.py",
        "python",
        "loop_worker.py",
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    configs = [
        tf_config_module.tf_config({**env, "JOB_COMPLETION_INDEX": str(i)}) for i in range(2)
    ]
    # Kubernetes names pod i "<job>-<i>"; with the subdomain, "<job>-<i>.<service>" resolves.
    port = container["ports"][0]["containerPort"]
    hosts = [
        f"{job['metadata']['name']}-{i}.{service['metadata']['name']}:{port}" for i in range(2)
    ]
    assert port == service["spec"]["ports"][0]["port"]
    for i, config in enumerate(configs):
        assert config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        assert_resolves(config, i)


def test_tfjob_manifest_describes_two_workers():
    (tfjob,) = manifest("tfjob.yaml")
    assert tfjob["apiVersion"] == "kubeflow.org/v1" and tfjob["kind"] == "TFJob"
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"  # the operator only configures this container
    assert container["command"][:2] == ["python", "loop_worker.py"]
    assert {"name": "tfjob-port", "containerPort": 2222} in container["ports"]
    # The Training Operator gives replica i this TF_CONFIG (its documented format); TensorFlow's own
    # resolver must read it as a 2-worker cluster with this process as worker i.
    name = tfjob["metadata"]["name"]
    hosts = [f"{name}-worker-{w}.default.svc:2222" for w in range(2)]
    for i in range(2):
        assert_resolves({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}, i)


def assert_resolves(config: dict, index: int) -> None:
    """TensorFlow's TFConfigClusterResolver reads `config` as worker `index` of 2 workers."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TF_CONFIG", json.dumps(config))
        spec = resolver.cluster_spec()
        assert spec.num_tasks("worker") == 2 and spec.jobs == ["worker"]
        assert (resolver.task_type, resolver.task_id) == ("worker", index)


# --- Notebook 4 under nbval: its one run, with Slurm up when the machine has it ------------------


@pytest.fixture(scope="module")
def notebook4(cluster, tmp_path_factory) -> Path:
    """Run notebook 4 under nbval (tests/test_notebooks.py leaves it to this module); its folder."""
    slurm_cluster = cluster[0]
    folder = tmp_path_factory.mktemp("notebook4")
    with pytest.MonkeyPatch.context() as patch:
        if slurm_cluster is not None:  # the kernel, and the jobs it submits, use the test cluster
            for name in ("SLURM_CONF", slurm.MARKER):
                patch.setenv(name, slurm_cluster.env[name])
        try:
            run_notebook_under_nbval(NOTEBOOK, 2, folder)
        except AssertionError as failure:  # the Slurm jobs' own logs say why a job failed
            logs = sorted(folder.glob("notebooks/artifacts/04_multi_worker/logs/slurm-*"))
            tails = [f"--- {log.name}:\n{read(log)[-1500:]}" for log in logs]
            raise AssertionError("\n".join([str(failure), *tails])) from None
    return folder / "notebooks" / "artifacts" / "04_multi_worker"


def read(path: Path) -> str:
    return path.read_text(errors="replace")


def steps_per_epoch(log: str) -> int:
    return int(re.search(r"steps per epoch: (\d+)", log).group(1))


@pytest.mark.slow
def test_notebook_4_runs_under_nbval(notebook4):
    for name in ("logs/fit-worker-0.log", "loop_checkpoints/checkpoint", "cluster_tf_config.py"):
        assert (notebook4 / name).is_file(), name
    slurm_logs = sorted((notebook4 / "logs").glob("slurm-*.out"))
    assert len(slurm_logs) == (0 if NO_SLURM else 2)  # without Slurm its cells skip


@pytest.mark.slow
def test_fit_workers_started_with_popen_trained_one_model(notebook4):
    """Section 2: two plain subprocesses with their TF_CONFIG, tf_keras fit, nothing left."""
    logs = [read(notebook4 / "logs" / f"fit-worker-{i}.log") for i in range(2)]
    # The accuracies agree by construction (tf_keras sums metrics over the cluster): the weights
    # each worker hashed from its own copy are what shows one model.
    hashes = [re.search(r"^weights: sha256 ([0-9a-f]{16})$", log, re.MULTILINE) for log in logs]
    assert all(hashes) and hashes[0].group(1) == hashes[1].group(1)
    assert all("replicas in sync: 2" in log for log in logs)
    assert "Epoch 1/" in logs[0] and "Epoch 1/" not in logs[1]  # only the chief is verbose


@pytest.mark.slow
def test_keras3_fit_fails_under_multi_worker_mirrored_strategy(notebook4):
    """Section 2's one Keras 3 run of the same fit script: it stops at the first step with the
    PerReplica error the notebook prints, and trains nothing."""
    logs = [read(notebook4 / "logs" / "keras3_fit" / f"fit_worker-worker-{i}.log") for i in (0, 1)]
    assert "replicas in sync: 2" in logs[0]
    error = r"^ValueError: Attempt to convert a value \(PerReplica"  # the first worker to fail
    assert any(re.search(error, log, re.MULTILINE) for log in logs)
    assert not any("done:" in log or "weights:" in log for log in logs)


@pytest.mark.slow
def test_killed_worker_resumes_from_the_chief_checkpoint(notebook4):
    """Section 4: worker 1 killed after the chief saved epoch 1 (the kill lands in epoch 2, or
    later on a loaded machine); the restart resumes after the last epoch saved, on both workers,
    and ends at the step of 3 full epochs."""
    logs = notebook4 / "logs"
    killed = read(logs / "killed" / "loop_worker-worker-0.log")
    assert re.search(r"UnavailableError|aborted|unhealthy", killed)  # worker 0 lost its peer
    assert "epoch 1 saved" in killed and "finished" not in killed
    last_saved = max(int(e) for e in re.findall(r"^epoch (\d+) saved", killed, re.MULTILINE))
    for worker in range(2):
        resumed = read(logs / "resumed" / f"loop_worker-worker-{worker}.log")
        step = last_saved * steps_per_epoch(killed)
        restored = rf"^restored ckpt-{step}: starting at epoch {last_saved + 1}, step {step}$"
        assert re.search(restored, resumed, re.MULTILINE)
        assert f"finished at step {3 * steps_per_epoch(killed)}" in resumed
    assert not list((notebook4 / "loop_checkpoints").glob("workertemp_*"))
    # The whole model, saved by every worker at the end: only the chief's copy is left.
    assert (notebook4 / "loop_checkpoints" / "model.keras").is_file()


@pytest.mark.slow
def test_resumed_run_ends_where_an_uninterrupted_run_does(notebook4):
    """Section 4's comparison: same seed, one run killed and resumed, one not. The checkpoint plus
    the skip (steps x local replicas) and the seeded shuffle rebuild the whole state, so every
    epoch's mean loss, as printed, is the same in both."""
    logs = notebook4 / "logs"
    pattern = re.compile(r"^epoch (\d+) saved.*mean loss ([\d.]+)$", re.MULTILINE)

    def losses(*names: str) -> dict[int, str]:
        found: dict[int, str] = {}
        for name in names:
            found |= dict((int(e), loss) for e, loss in pattern.findall(read(logs / name)))
        return found

    straight = losses("uninterrupted/loop_worker-worker-0.log")
    resumed = losses("killed/loop_worker-worker-0.log", "resumed/loop_worker-worker-0.log")
    assert sorted(straight) == [1, 2, 3] and resumed == straight
    assert (notebook4 / "uninterrupted_checkpoints" / "checkpoint").is_file()


@pytest.mark.slow
def test_worker_ended_with_sigterm_saves_and_the_restart_ends_where_a_straight_run_ends(notebook4):
    """Section 4's preemption, without Slurm: SIGTERM to worker 1 alone once the chief saved epoch
    1. Both workers save after one agreed step (worker 0 got no signal), the restart resumes from
    it on both workers, and the final model's and optimizer's variables equal the uninterrupted
    run's."""
    logs = notebook4 / "logs"
    said = SAID_PREEMPTED
    saved = [
        re.findall(said, read(logs / "preempted" / f"loop_worker-worker-{w}.log"), re.MULTILINE)
        for w in (0, 1)
    ]
    assert len(saved[0]) == 1 and saved[0] == saved[1]
    step = int(saved[0][0])
    per_epoch = steps_per_epoch(read(logs / "preempted" / "loop_worker-worker-0.log"))
    assert per_epoch <= step < 3 * per_epoch
    for worker in (0, 1):
        resumed = read(logs / "after_preemption" / f"loop_worker-worker-{worker}.log")
        start = f"restored ckpt-{step}: starting at epoch {step // per_epoch + 1}, step {step}"
        assert start in resumed and f"finished at step {3 * per_epoch}" in resumed
    ends = [
        final_variables(notebook4 / f)
        for f in ("preempted_checkpoints", "uninterrupted_checkpoints")
    ]
    assert ends[0].keys() == ends[1].keys() and len(ends[0]) > 10
    assert all(np.array_equal(ends[0][n], ends[1][n]) for n in ends[0])


def final_variables(folder: Path) -> dict[str, np.ndarray]:
    """The model's and the optimizer's variables in the newest checkpoint of `folder`."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(folder))
    names = reader.get_variable_to_shape_map()
    return {n: reader.get_tensor(n) for n in names if n.startswith(("model/", "optimizer/"))}


@pytest.mark.slow
def test_preempted_slurm_job_saves_and_the_next_job_resumes_where_a_straight_run_ends(
    slurm_cluster, notebook4
):
    """Sections 3 and 5: a 2-task job of the loop worker, TF_CONFIG from Slurm's variables, sent
    SIGTERM by `scancel --signal=TERM` while it trains; PreemptionCheckpointHandler has both
    tasks save after the same step, mid-epoch, and exit with its code 42. The next job resumes
    from that step and ends with the same weights and optimizer state as section 4's
    uninterrupted run of the same seed."""
    logs = notebook4 / "logs"
    preempted, resumed = sorted(
        int(out.name.split("-")[1].split(".")[0]) for out in logs.glob("slurm-*.out")
    )

    def state(job: int) -> tuple[str, str]:
        info = slurm_cluster.run("scontrol", "show", "job", "-o", str(job))
        return re.search(r"JobState=(\S+)", info).group(1), re.search(
            r"ExitCode=(\S+)", info
        ).group(1)

    assert state(preempted) == ("FAILED", "42:0") and state(resumed) == ("COMPLETED", "0:0")
    chief = read(logs / f"slurm-{preempted}-task0.log")
    total = 3 * steps_per_epoch(chief)
    saved = set()
    for task in range(2):
        log = read(logs / f"slurm-{preempted}-task{task}.log")
        assert "replicas in sync: 2" in log and "finished" not in log
        (step,) = re.findall(
            SAID_PREEMPTED,
            log,
            re.MULTILINE,
        )
        saved.add(int(step))
    (step,) = saved  # both tasks saved after the same step
    # SIGTERM came once the chief had saved epoch 1: the save is in the middle of a later epoch.
    assert steps_per_epoch(chief) < step < total and step % steps_per_epoch(chief) != 0
    for task in range(2):
        log = read(logs / f"slurm-{resumed}-task{task}.log")
        epoch = step // steps_per_epoch(chief) + 1
        assert re.search(
            rf"^restored ckpt-{step}: starting at epoch {epoch}, step {step}$", log, re.MULTILINE
        )
        assert f"finished at step {total}" in log
    ends = [
        final_variables(notebook4 / f) for f in ("slurm_checkpoints", "uninterrupted_checkpoints")
    ]
    assert ends[0].keys() == ends[1].keys() and len(ends[0]) > 10
    assert all(np.array_equal(ends[0][n], ends[1][n]) for n in ends[0])
    # TF_CONFIG came from Slurm: both workers on this node, on ports Slurm reserved for the step.
    low, high = map(
        int,
        re.search(
            r"MpiParams=ports=(\d+)-(\d+)", read(slurm_cluster.folder / "slurm.conf")
        ).groups(),
    )
    workers = re.search(r"cluster_tf_config: worker 0 of \[(.*)\]", chief).group(1)
    addresses = [a.strip(" '") for a in workers.split(",")]
    assert len(addresses) == 2 and all(a.startswith("localhost:") for a in addresses)
    assert all(low <= int(a.rsplit(":", 1)[1]) <= high for a in addresses)
    assert not list((notebook4 / "slurm_checkpoints").glob("workertemp_*"))


#: What a fake `sinfo` prints where Slurm's programs are installed but no cluster is configured.
NO_CLUSTER = "sinfo: fatal: Could not establish a configuration source"


@pytest.mark.slow
@pytest.mark.skipif(NO_SLURM is not None, reason="without Slurm, the nbval run checks the skip")
@pytest.mark.parametrize(
    "sinfo, said",
    [
        (None, "no Slurm on this machine"),
        (
            f"echo '{NO_CLUSTER}' >&2; exit 1",
            f"Slurm's programs are here, but no Slurm cluster answers ({NO_CLUSTER})",
        ),
    ],
    ids=["no-slurm", "no-cluster"],
)
def test_slurm_cells_skip_in_one_line_without_slurm(tmp_path, sinfo, said):
    """The Slurm section's cells, run in IPython with no Slurm on PATH, or with Slurm's programs
    but no cluster answering `sinfo`: each cell skips in one line that says which."""
    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.id.startswith("nb04-s")]
    code = [c.source for c in cells if c.cell_type == "code"]
    preamble = (
        "import os, re, shutil, subprocess, sys, time, json\n"
        "from pathlib import Path\n"
        "import tensorflow as tf\n"
        "WORK = Path('artifacts/04_multi_worker')\n"
        "WORKER_ENV, LOOP_ARGS = {}, []\n"
    )
    runner = f"""
PREAMBLE = {preamble!r}
import json, os, re, shutil, sys, time
from pathlib import Path
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
shell = InteractiveShell.instance()
shell.run_cell(PREAMBLE)
os.makedirs("artifacts/04_multi_worker", exist_ok=True)
for source in json.loads({json.dumps(json.dumps(code))}):
    with capture_output() as out:
        result = shell.run_cell(source)
    result.raise_error()
    print(json.dumps(out.stdout))
"""
    path = os.path.dirname(sys.executable)
    if sinfo is not None:
        fake = tmp_path / "bin" / "sinfo"
        fake.parent.mkdir()
        fake.write_text(f"#!/bin/sh\n{sinfo}\n")
        fake.chmod(0o755)
        path = f"{fake.parent}{os.pathsep}{path}"
    env = {**os.environ, "PATH": path, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("SLURM_CONF", None)
    done = subprocess.run(
        [sys.executable, "-c", runner], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]
    by_source = dict(zip(code, outputs))
    guard = next(o for s, o in by_source.items() if "slurm_up =" in s)
    assert guard == f"skipped: {said}\n", guard
    for source, out in by_source.items():
        if "if slurm_up:" in source:
            assert out == f"skipped: {said}\n", source


# --- Afterwards: nothing left ---------------------------------------------------------------------


def test_no_slurm_daemon_job_or_worker_left(cluster):
    """Runs last in this module: stop the cluster and look for survivors in the process table."""
    slurm_cluster, stack = cluster
    if slurm_cluster is None:
        require_or_skip("slurm", NO_SLURM)
    stack.close()  # cancels jobs, stops slurmd, slurmctld and munged; raises if anything is left
    assert all(proc.poll() is not None for proc in slurm_cluster.daemons.values())
    assert not slurm.leftover_processes(slurm_cluster.folder)


@pytest.mark.slow
def test_no_worker_left_by_the_notebook(notebook4):
    # Its workers run in its folder; other modules' clusters may run at the same time (xdist).
    notebook = notebook4.parents[2]
    left = []
    for worker in doctor.leftover_workers():
        with contextlib.suppress(psutil.Error):
            if Path(worker.cwd()).is_relative_to(notebook):
                left.append(worker.cmdline())
    assert not left
