"""Set TF_CONFIG from Slurm's (or a Kubernetes Indexed Job's) variables, then run a worker script.

Notebook 4 copies this file (standard library only) next to its worker scripts. Inside `srun` or a
pod of an Indexed Job it builds this task's TF_CONFIG, gives each task of a node that would share
its GPUs its own (`task_gpus`), and replaces itself with the command (same pid):

    srun python cluster_tf_config.py python loop_worker.py --epochs 3

Why not TensorFlow's `SlurmClusterResolver` (TensorFlow 2.21): it gives each task of a node the
port `port_base` (8888) + its local rank, so two jobs on one node collide; and on a node without
GPUs it does not start (https://github.com/tensorflow/tensorflow/issues/56894): `gpus_per_node=0`
raises "ValueError: range() arg 3 must not be zero", `gpus_per_task=1` "RuntimeError: Requested
more GPUs per node than available.". With `gpus_per_node` = tasks per node and
`auto_set_gpu=False` it runs, but `num_accelerators()` says {'GPU': 1}: each worker is set up
with a GPU it does not have, its variables on the CPU only by soft placement. This file uses
the ports Slurm reserves for the step and runs on CPU nodes as they are.

Without a command it prints the TF_CONFIG. Example:
    >>> tf_config({"SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "n[7-8]",
    ...            "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_STEP_RESV_PORTS": "27001"})
    {'cluster': {'worker': ['n7:27001', 'n8:27001']}, 'task': {'type': 'worker', 'index': 1}}
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list: "node[07-08,10],gpu1" -> node07, node08, node10, gpu1."""
    hosts, depth, start = [], 0, 0
    for i, char in enumerate(hostlist + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            name, start = hostlist[start:i], i + 1
            match = re.match(r"([^\[]*)\[([^\]]*)\](.*)$", name)
            if not match:
                hosts += [name] if name else []
                continue
            prefix, ranges, rest = match.groups()
            tails = expand_hostlist(rest) if rest else [""]
            for part in ranges.split(","):
                first, _, last = part.partition("-")
                for number in range(int(first), int(last or first) + 1):
                    hosts += [f"{prefix}{number:0{len(first)}d}{tail}" for tail in tails]
    return hosts


def expand_counts(counts: str) -> list[int]:
    """Slurm's tasks per node: "2(x3),1" -> [2, 2, 2, 1]."""
    result = []
    for part in counts.split(","):
        number, _, repeat = part.partition("(x")
        result += [int(number)] * int(repeat.rstrip(")") or 1)
    return result


#: Ports derived from the job id, when Slurm reserved none: below Linux's default ephemeral range
#: (32768-60999, /proc/sys/net/ipv4/ip_local_port_range), where the system picks the source ports of
#: outgoing connections, so that no connection of this or another job can hold a worker's port.
DERIVED_PORTS = range(20000, 32768)


def slurm_ports(env: Mapping[str, str], count: int) -> list[int]:
    """`count` ports for this job's tasks on one node.

    First the ports `srun --resv-ports` reserved for the job step (`SLURM_STEP_RESV_PORTS`):
    Slurm gives each port of a node to one step at a time, so jobs never collide. Without them,
    a block of `count` ports in DERIVED_PORTS chosen by the job id: two jobs that run on one
    node at the same time collide only when their ids agree modulo the number of blocks (6384
    blocks of 2 ports), or when a block overlaps another job's of a different size or a program
    that listens there; a collision fails at once ("Address already in use"), and
    `--resv-ports` is then the fix.
    """
    if env.get("SLURM_STEP_RESV_PORTS"):
        ports: list[int] = []
        for part in env["SLURM_STEP_RESV_PORTS"].split(","):
            first, _, last = part.partition("-")
            ports += range(int(first), int(last or first) + 1)
        if len(ports) < count:
            raise SystemExit(
                f"srun reserved {len(ports)} ports, {count} tasks share a node: "
                f"use srun --resv-ports={count}"
            )
        return ports[:count]
    blocks = len(DERIVED_PORTS) // count
    base = DERIVED_PORTS.start + int(env["SLURM_JOB_ID"]) % blocks * count
    ports = list(range(base, base + count))
    ephemeral = ephemeral_ports()
    if ephemeral and ports[-1] >= ephemeral.start and ports[0] < ephemeral.stop:
        raise SystemExit(
            f"ports {ports[0]}-{ports[-1]} are in this node's ephemeral range "
            f"({ephemeral.start}-{ephemeral.stop - 1}): use srun --resv-ports={count}"
        )
    return ports


def ephemeral_ports() -> range | None:
    """The ports Linux picks outgoing connections' source ports from, or None (not Linux)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
    except (OSError, ValueError):
        return None
    return range(low, high + 1)


def task_gpus(env: Mapping[str, str], tasks_here: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES this task should have, or None to leave it as it is.

    Slurm binds GPUs per task when asked (`srun --gpus-per-task=1`, `--gpu-bind`): each task then
    sees its own, and nothing changes. When the `tasks_here` tasks of this node all see the same
    GPUs (CUDA_VISIBLE_DEVICES lists as many as the step's SLURM_STEP_GPUS, or was set by the
    script), each would allocate every GPU's memory: local task i gets the i-th equal share.
    No GPUs (unset, empty, -1), or one task on the node: None.

        >>> task_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_LOCALID": "1"}, 2)
        '2,3'
    """
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [g for g in visible.split(",") if g.strip()]
    if tasks_here <= 1 or not gpus or visible.strip() in ("-1", "NoDevFiles"):
        return None
    step_gpus = [g for g in env.get("SLURM_STEP_GPUS", "").split(",") if g.strip()]
    if step_gpus and len(step_gpus) != len(gpus):
        return None  # Slurm bound this task to its own GPUs
    if len(gpus) < tasks_here:
        raise SystemExit(
            f"{tasks_here} tasks share {len(gpus)} GPUs on this node: "
            "ask for one GPU per task (srun --gpus-per-task=1) or fewer tasks per node"
        )
    share = len(gpus) // tasks_here
    local = int(env.get("SLURM_LOCALID", 0))
    return ",".join(gpus[local * share : (local + 1) * share])


def slurm_tf_config(env: Mapping[str, str]) -> dict:
    """TF_CONFIG of this task inside `srun`: one worker per task, worker 0 (the chief) = task 0."""
    needed = ("SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
    missing = [name for name in needed if name not in env]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not set: start the worker with srun, inside a job")
    hosts = expand_hostlist(env["SLURM_STEP_NODELIST"])
    counts = expand_counts(env["SLURM_STEP_TASKS_PER_NODE"])
    ports = slurm_ports(env, max(counts))
    workers = [f"{host}:{ports[i]}" for host, count in zip(hosts, counts) for i in range(count)]
    rank = int(env["SLURM_PROCID"])
    if "SLURM_NODEID" in env:
        here = f"{hosts[int(env['SLURM_NODEID'])]}:{ports[int(env['SLURM_LOCALID'])]}"
        if workers[rank] != here:
            raise SystemExit(
                "tasks are not placed node by node: run srun with --distribution=block"
            )
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def indexed_job_tf_config(env: Mapping[str, str]) -> dict:
    """TF_CONFIG in a Kubernetes Indexed Job, from JOB_COMPLETION_INDEX (set by Kubernetes),
    TF_WORKERS and TF_WORKER_ADDRESS (set in the manifest, e.g. "job-{index}.service:2222")."""
    count, address = int(env["TF_WORKERS"]), env["TF_WORKER_ADDRESS"]
    workers = [address.format(index=i) for i in range(count)]
    index = int(env["JOB_COMPLETION_INDEX"])
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


def tf_config(env: Mapping[str, str]) -> dict:
    """This task's TF_CONFIG, from a Kubernetes Indexed Job's variables or else from Slurm's."""
    if "JOB_COMPLETION_INDEX" in env:
        return indexed_job_tf_config(env)
    return slurm_tf_config(env)


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to set for this task: TF_CONFIG, and CUDA_VISIBLE_DEVICES when the tasks of
    a Slurm node would otherwise share its GPUs (`task_gpus`)."""
    config = tf_config(env)
    result = {"TF_CONFIG": json.dumps(config)}
    if "JOB_COMPLETION_INDEX" not in env:
        counts = expand_counts(env["SLURM_STEP_TASKS_PER_NODE"])
        gpus = task_gpus(env, counts[int(env.get("SLURM_NODEID", 0))])
        if gpus is not None:
            result["CUDA_VISIBLE_DEVICES"] = gpus
    return result


if __name__ == "__main__":
    variables = worker_env(os.environ)
    config = json.loads(variables["TF_CONFIG"])
    gpus = variables.get("CUDA_VISIBLE_DEVICES")
    print(
        f"cluster_tf_config: worker {config['task']['index']} of {config['cluster']['worker']}"
        + (f", GPUs {gpus}" if gpus else ""),
        file=sys.stderr,
        flush=True,
    )
    if len(sys.argv) < 2:
        print(variables["TF_CONFIG"])
    else:
        os.environ.update(variables)
        os.execvp(sys.argv[1], sys.argv[1:])  # becomes the worker: same process, same pid
