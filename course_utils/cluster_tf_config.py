"""Set TF_CONFIG from Slurm's (or a Kubernetes Indexed Job's) variables, then run a worker script.

Notebook 4 copies this file next to its worker scripts; it needs only Python's standard library, so
it runs on any cluster node. Inside a Slurm job step (`srun`), or in a pod of a Kubernetes Indexed
Job, it builds the TF_CONFIG of this task and replaces itself with the command it was given (same
process, same pid), which then finds TF_CONFIG in its environment:

    srun python cluster_tf_config.py python loop_worker.py --epochs 3

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


def slurm_ports(env: Mapping[str, str], count: int) -> list[int]:
    """`count` ports for this job's tasks on one node: the ones `srun --resv-ports` reserved for
    the step, else 32 ports from 20000 chosen by the job id (different for jobs whose ids differ
    by less than 1000)."""
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
    base = 20000 + int(env["SLURM_JOB_ID"]) % 1000 * 32
    if count > 32:
        raise SystemExit(f"{count} tasks on one node: use srun --resv-ports={count}")
    return list(range(base, base + count))


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


if __name__ == "__main__":
    config = tf_config(os.environ)
    workers = config["cluster"]["worker"]
    print(
        f"cluster_tf_config: worker {config['task']['index']} of {workers}",
        file=sys.stderr,
        flush=True,
    )
    if len(sys.argv) < 2:
        print(json.dumps(config))
    else:
        os.environ["TF_CONFIG"] = json.dumps(config)
        os.execvp(sys.argv[1], sys.argv[1:])  # becomes the worker: same process, same pid
