"""Notebook 4 on a real single-node Slurm: its scripts, its Slurm cells, and nothing left behind.

One Slurm cluster (tests/slurm.py: munge, slurmctld, slurmd from a temporary config) serves the
whole module. With it: the notebook's worker script trained by a 2-task `sbatch` job, a task killed
and the job resubmitted to the same final step, and notebook 4 itself under nbval (its one nbval
run: with Slurm up when the machine has Slurm, so its Slurm cells submit real jobs; without Slurm
the same run checks that they skip). The last test stops the cluster and checks that no daemon,
job or worker survived. The TF_CONFIG derivation and the Kubernetes manifests need no Slurm.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import slurm
import test_notebooks
import yaml
from test_fault_tolerance import NOTEBOOK, losses_by_step, write_notebook_scripts

EXAMPLES, PER_WORKER_BATCH, EPOCHS, SAVE_EVERY = 2048, 16, 3, 20
TOTAL_STEPS = EPOCHS * (EXAMPLES // (2 * PER_WORKER_BATCH))
NO_SLURM = slurm.missing_programs()

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    """A folder with the notebook's %%writefile files and a small training set."""
    folder = tmp_path_factory.mktemp("notebook4_scripts")
    write_notebook_scripts(folder)
    (folder / "logs").mkdir()
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, EXAMPLES)
    images = (rng.random((EXAMPLES, 28, 28, 1)) * 0.5 + labels[:, None, None, None] / 20).astype(
        np.float32
    )
    np.savez(folder / "mnist_data.npz", images=images, labels=labels)
    return folder


@pytest.fixture(scope="module")
def tf_config_module(scripts):
    sys.path.insert(0, str(scripts))
    try:
        import cluster_tf_config

        yield cluster_tf_config
    finally:
        sys.path.remove(str(scripts))
        sys.modules.pop("cluster_tf_config", None)


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
        pytest.skip(NO_SLURM)
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
    # Without reserved ports: derived from the job id, different for neighbouring jobs.
    del env["SLURM_STEP_RESV_PORTS"]
    ports = {
        job: {
            a.rsplit(":", 1)[1]
            for a in tf_config_module.tf_config({**env, "SLURM_JOB_ID": job})["cluster"]["worker"]
        }  # fmt: skip
        for job in ("4242", "4243")
    }
    assert ports["4242"] == {"27744", "27745"} and not ports["4242"] & ports["4243"]
    # Clear errors: outside srun, cyclic task placement, too few reserved ports.
    with pytest.raises(SystemExit, match="start the worker with srun"):
        tf_config_module.tf_config({"SLURM_PROCID": "0"})
    with pytest.raises(SystemExit, match="--distribution=block"):
        tf_config_module.tf_config(
            {**env, "SLURM_PROCID": "1", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"}
        )
    with pytest.raises(SystemExit, match="--resv-ports=2"):
        tf_config_module.tf_config({**env, "SLURM_STEP_RESV_PORTS": "27001"})


def notebook_file(name: str) -> str:
    """The body of the notebook's `%%writefile .../name` cell."""
    import nbformat

    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        first, _, body = cell.source.partition("\n")
        if first.startswith("%%writefile") and first.endswith("/" + name):
            return body
    raise AssertionError(f"notebook 4 writes no {name}")


def test_indexed_job_manifest_renders_tf_config_for_two_workers(tf_config_module):
    service, job = yaml.safe_load_all(notebook_file("k8s_indexed_job.yaml"))
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
    (tfjob,) = yaml.safe_load_all(notebook_file("k8s_tfjob.yaml"))
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


# --- Real Slurm jobs ----------------------------------------------------------------------------


def submit(cluster: slurm.SlurmCluster, scripts: Path, checkpoint_dir: str) -> str:
    args = ["--epochs", EPOCHS, "--per-worker-batch", PER_WORKER_BATCH, "--save-every", SAVE_EVERY]
    env = {
        **cluster.env,
        "PYTHON": sys.executable,
        "CUDA_VISIBLE_DEVICES": "-1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    command = ["sbatch", "--parsable", "slurm_job.sh", "loop_worker.py", *map(str, args)]
    command += ["--checkpoint-dir", checkpoint_dir]
    done = subprocess.run(command, cwd=scripts, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip().split(";")[0]


def task_log(scripts: Path, job: str, task: int) -> str:
    path = scripts / "logs" / f"slurm-{job}-task{task}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def job_state(cluster: slurm.SlurmCluster, job: str) -> str:
    return re.search(r"JobState=(\S+)", cluster.run("scontrol", "show", "job", "-o", job)).group(1)


def wait_for_end(cluster: slurm.SlurmCluster, job: str, timeout: float = 300) -> str:
    slurm.wait_until(lambda: job not in cluster.jobs(), timeout, f"job {job} to end")
    return job_state(cluster, job)


def wait_for_log(cluster, scripts: Path, job: str, task: int, pattern: str) -> re.Match:
    found = []

    def seen() -> bool:
        found[:] = [re.search(pattern, task_log(scripts, job, task))]
        if not found[0] and job not in cluster.jobs():
            raise AssertionError(
                f"job {job} ended before {pattern!r}:\n{task_log(scripts, job, 0)}"
            )
        return bool(found[0])

    slurm.wait_until(seen, 300, f"{pattern!r} in task {task}'s log")
    return found[0]


@pytest.fixture(scope="module")
def slurm_runs(cluster, scripts) -> dict:
    """An uninterrupted 2-task job; a job whose task 1 is killed; that job resubmitted."""
    slurm_cluster = cluster[0]
    if slurm_cluster is None:
        pytest.skip(NO_SLURM)
    runs = {"full": submit(slurm_cluster, scripts, "uninterrupted")}
    runs["full_state"] = wait_for_end(slurm_cluster, runs["full"])
    killed = submit(slurm_cluster, scripts, "killed")
    saved = wait_for_log(
        slurm_cluster, scripts, killed, 0, r"saved checkpoint ckpt-\d+ at step (\d+)"
    )
    runs["saved"] = int(saved.group(1))
    wait_for_log(slurm_cluster, scripts, killed, 0, rf" step {runs['saved'] + 5} loss")
    pids = slurm_cluster.run("scontrol", "listpids", killed).splitlines()[1:]
    task_pid = {
        int(f[4]): int(f[0]) for f in map(str.split, pids) if f[2] == "0" and f[4].isdigit()
    }
    os.kill(task_pid[1], signal.SIGKILL)
    runs["killed"], runs["killed_state"] = killed, wait_for_end(slurm_cluster, killed)
    runs["resumed"] = submit(slurm_cluster, scripts, "killed")
    runs["resumed_state"] = wait_for_end(slurm_cluster, runs["resumed"])
    return runs


def test_the_notebook_worker_trains_on_a_two_task_slurm_job(slurm_runs, scripts):
    job = slurm_runs["full"]
    assert slurm_runs["full_state"] == "COMPLETED", task_log(scripts, job, 0)[-3000:]
    for task in range(2):
        log = task_log(scripts, job, task)
        assert "replicas in sync: 2" in log and f"finished at step {TOTAL_STEPS}" in log
    # TF_CONFIG came from Slurm: two workers on this node, on ports Slurm reserved for the step.
    workers = re.search(r"cluster_tf_config: worker 0 of (\[.*\])", task_log(scripts, job, 0))
    addresses = json.loads(workers.group(1).replace("'", '"'))
    assert len(addresses) == 2 and all(a.startswith("localhost:") for a in addresses)
    assert len(losses_by_step(task_log(scripts, job, 0))) == TOTAL_STEPS
    assert not list((scripts / "uninterrupted").glob("workertemp_*"))  # only the chief's files
    assert (scripts / "uninterrupted" / f"ckpt-{TOTAL_STEPS}.index").is_file()


def test_a_killed_task_and_a_resubmitted_job_end_at_the_same_step(slurm_runs, scripts):
    killed, resumed = slurm_runs["killed"], slurm_runs["resumed"]
    assert slurm_runs["killed_state"] == "FAILED"
    assert "finished" not in task_log(scripts, killed, 0)
    step_at_kill = max(losses_by_step(task_log(scripts, killed, 0)))
    assert slurm_runs["saved"] == SAVE_EVERY and step_at_kill < TOTAL_STEPS
    assert slurm_runs["resumed_state"] == "COMPLETED", task_log(scripts, resumed, 0)[-3000:]
    log = task_log(scripts, resumed, 0)
    resumed_from = int(re.search(r"restored ckpt-\d+: .* global step (\d+)", log).group(1))
    steps = losses_by_step(log)
    baseline = losses_by_step(task_log(scripts, slurm_runs["full"], 0))
    print(
        f"Slurm: killed after step {step_at_kill}, resumed from {resumed_from}, final {max(steps)}"
    )
    assert resumed_from == slurm_runs["saved"] and min(steps) == resumed_from + 1
    assert max(steps) == max(baseline) == TOTAL_STEPS
    assert steps[resumed_from + 1] == pytest.approx(baseline[resumed_from + 1], abs=1e-4)
    assert not list((scripts / "killed").glob("workertemp_*"))


# --- Notebook 4 under nbval: once, with Slurm up when the machine has it -----------------------


@pytest.mark.slow
def test_notebook_4_under_nbval(cluster, tmp_path, monkeypatch):
    """Notebook 4's one nbval run (tests/test_notebooks.py leaves it to this module)."""
    slurm_cluster = cluster[0]
    if slurm_cluster is not None:
        for name in ("SLURM_CONF", slurm.MARKER):
            monkeypatch.setenv(name, slurm_cluster.env[name])
    test_notebooks.test_notebook_runs_under_nbval(NOTEBOOK, 2, tmp_path)
    logs = tmp_path / "notebooks" / "artifacts" / "04_multi_worker" / "logs"
    slurm_logs = sorted(logs.glob("slurm-*-task0.log"))
    if slurm_cluster is None:
        assert not slurm_logs
    else:  # two jobs: killed, then resubmitted to completion
        assert len(slurm_logs) == 2 and "finished at step" in slurm_logs[-1].read_text()


@pytest.mark.skipif(NO_SLURM is not None, reason="without Slurm, the nbval run checks the skip")
def test_slurm_cells_skip_in_one_line_without_slurm(tmp_path):
    """The Slurm section's cells, run in IPython with no Slurm on PATH, each print one line."""
    import nbformat

    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.id.startswith("nb04-s")]
    code = [c.source for c in cells if c.cell_type == "code"]
    preamble = (
        "import os, re, shutil, sys, time, json\n"
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
    env = {**os.environ, "PATH": os.path.dirname(sys.executable), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("SLURM_CONF", None)
    done = subprocess.run(
        [sys.executable, "-c", runner], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]
    by_source = dict(zip(code, outputs))
    guard = next(o for s, o in by_source.items() if "slurm_up =" in s)
    assert guard.startswith("skipped: no Slurm") and guard.count("\n") == 1
    for source, out in by_source.items():
        if "if slurm_up:" in source:
            assert out == "skipped: no Slurm on this machine\n", source


# --- Afterwards: nothing left ---------------------------------------------------------------------


def test_no_slurm_daemon_job_or_worker_left(cluster):
    """Runs last in this module: stop the cluster and look for survivors in the process table."""
    slurm_cluster, stack = cluster
    if slurm_cluster is None:
        pytest.skip(NO_SLURM)
    stack.close()  # cancels jobs, stops slurmd, slurmctld and munged; raises if anything is left
    assert all(proc.poll() is not None for proc in slurm_cluster.daemons.values())
    assert not slurm.leftover_processes(slurm_cluster.folder)
