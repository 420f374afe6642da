"""A real single-node Slurm for the tests: munge, slurmctld and slurmd from a temporary config.

Everything lives in one temporary folder (config, keys, sockets, state, logs); nothing under /etc,
/run or /var is touched, so it runs beside a system Slurm. The daemons run in the foreground as
children of the test process and are stopped when the block ends, after every job was cancelled.
Jobs submitted with `SlurmCluster.env` carry a marker variable, so that `leftover_processes` can
check afterwards that no daemon, job step or worker survived.

Where the host has a cgroup memory controller (v1 or v2), Slurm constrains every task itself,
as a production cluster does (`task/cgroup` with `CGROUP_CONF`, `proctrack/cgroup`, memory a
consumable resource); otherwise the cluster runs without (`cgroups_missing` says why).

Needs root (munged and slurmd run as root here) and Debian's `slurm-wlm` and `munge`.

Example:
    >>> with single_node_slurm(tmp_path) as slurm:
    ...     subprocess.run(["srun", "-n2", "hostname"], env=slurm.env, check=True)
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import portpicker
import psutil

from course_utils import cluster_tf_config

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo")
#: Set in the daemons' and the jobs' environment (value: the cluster's folder).
MARKER = "COURSE_SLURM_TEST"
START_TIMEOUT_S = 30.0

SLURM_CONF = """\
ClusterName=course
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
ProctrackType={proctrack}
TaskPlugin={task}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters={select}
DefMemPerCPU={mem_per_cpu}
FirstJobId={first_job}
SlurmdParameters=config_overrides
MpiDefault=none
MpiParams=ports={first_port}-{last_port}
ReturnToService=2
JobRequeue=1
# SIGTERM to SIGKILL (Slurm's default: 30 s): a cancelled grading task stops its kernel and check
# process, removes its cgroup and unmounts its work folder, then its script removes the folder
KillWait=10
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

#: Slurm's own limits on every task (its cgroup plugins, v1 or v2 as the host has): memory as
#: asked with --mem (or DefMemPerCPU per CPU), swap included; the task's processes tracked by
#: their cgroup, so that none escapes the job's end.
CGROUP_CONF = """\
CgroupPlugin=autodetect
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedRAMSpace=100
AllowedSwapSpace=0
"""
#: The node's memory, as a share of the machine's (slurmd refuses a node with more than it has).
MEMORY_SHARE = 0.8


def cgroups_missing() -> str | None:
    """Why Slurm's cgroup plugins cannot constrain the test cluster's tasks here, or None.

    They need root and a memory controller: cgroup v1's /sys/fs/cgroup/memory, or cgroup v2
    with memory enabled at its root; without them the cluster runs with proctrack/linuxproc and
    no task plugin, and the jail's own cgroups are all that limit a grading task."""
    root = Path("/sys/fs/cgroup")
    v2 = root / "cgroup.controllers"
    if os.geteuid() != 0:
        return "Slurm's cgroup plugins need root"
    if (root / "memory" / "memory.limit_in_bytes").exists():
        return None
    if v2.exists() and "memory" in v2.read_text().split():
        return None
    return f"no cgroup memory controller under {root} (v1 memory, or v2 with memory enabled)"


def missing_programs() -> str | None:
    """Why this machine cannot run the cluster (one line), or None when it can."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "the test Slurm cluster runs munged and slurmd as root; run the tests as root"
    return None


@dataclass
class SlurmCluster:
    folder: Path
    env: dict[str, str]
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *command: str, check: bool = True) -> str:
        """Run a Slurm client command (`squeue`, `sbatch`, ...) against this cluster; its stdout."""
        proc = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-o", "%t", check=False).strip()

    def jobs(self) -> list[str]:
        """Ids of the jobs still pending or running."""
        return self.run("squeue", "-h", "-o", "%i", check=False).split()

    def log(self, daemon: str) -> str:
        path = self.folder / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else "(no log)"


def wait_until(condition, timeout: float, what: str, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def leftover_processes(folder: Path) -> list[psutil.Process]:
    """Processes of the cluster in `folder` (daemons, job steps, tasks) other than this one."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARKER) == str(folder):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _start(cluster: SlurmCluster, name: str, command: list[str]) -> None:
    log = open(cluster.folder / "log" / f"{name}.out", "wb")
    cluster.daemons[name] = subprocess.Popen(
        command, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: The longest path of a Unix socket on Linux (sun_path's 108 bytes, less the final NUL).
SOCKET_PATH_MAX = 107
#: How many ports `srun --resv-ports` may hand out (slurm.conf's MpiParams=ports).
RESERVED_PORTS = 64
#: Where that block is chosen: above portpicker's fallback (15000-24999) and below Linux's
#: ephemeral range (32768 up, /proc/sys/net/ipv4/ip_local_port_range), so that no port a kernel
#: or portpicker asks the system for, and no outgoing connection's source port, lands in it.
#: (A block in the ephemeral range made a job's worker fail to bind when a Jupyter kernel of
#: a test running beside it had taken one of the block's ports.)
PORT_BLOCKS = range(25000, 32768)


def free_port_block(count: int) -> int:
    """The first port of `count` consecutive ports in PORT_BLOCKS, all free now (TCP, any address),
    at a random place so that two clusters on one machine rarely try the same block."""
    ephemeral = cluster_tf_config.ephemeral_ports()
    stop = min(PORT_BLOCKS.stop, ephemeral.start if ephemeral else PORT_BLOCKS.stop)
    starts = list(range(PORT_BLOCKS.start, stop - count + 1, count))
    random.shuffle(starts)
    for start in starts:
        if all(port_is_free(port) for port in range(start, start + count)):
            return start
    raise RuntimeError(f"no {count} free consecutive ports in {PORT_BLOCKS.start}-{stop - 1}")


def port_is_free(port: int) -> bool:
    """Whether a TCP socket can bind `port` on every address now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def single_node_slurm(folder: Path) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd (2 CPUs) in `folder`; yield when the node is idle.

    On the way out every job is cancelled and waited for, the daemons are stopped in reverse
    order, and a RuntimeError is raised if any process of the cluster is still alive.
    """
    folder = Path(folder).resolve()
    # slurmstepd listens on <spool>/localhost_<job>.<step> (".4294967291" for a batch step): a path
    # past Linux's 107 bytes for a Unix socket kills the step and Slurm holds the job forever
    longest = len(f"{folder}/spool/localhost_{2**25}.4294967291")
    if longest > SOCKET_PATH_MAX:
        raise RuntimeError(
            f"the test cluster's folder {folder} is too long for slurmd's sockets ({longest} > "
            f"{SOCKET_PATH_MAX} bytes): give single_node_slurm a shorter folder"
        )
    for sub in ("munge", "state", "spool", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
    (folder / "munge").chmod(0o711)  # munged wants a socket folder others can enter
    ctld_port, slurmd_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
    first_port = free_port_block(RESERVED_PORTS)
    conf = folder / "slurm.conf"
    memory_mb = int(psutil.virtual_memory().total / 2**20 * MEMORY_SHARE)
    constrained = cgroups_missing() is None
    if constrained:
        (folder / "cgroup.conf").write_text(CGROUP_CONF)
    conf.write_text(
        SLURM_CONF.format(
            folder=folder,
            ctld_port=ctld_port,
            slurmd_port=slurmd_port,
            first_port=first_port,
            last_port=first_port + RESERVED_PORTS - 1,
            proctrack="proctrack/cgroup" if constrained else "proctrack/linuxproc",
            task="task/cgroup" if constrained else "task/none",
            select="CR_CPU_Memory" if constrained else "CR_CPU",
            memory_mb=memory_mb,
            mem_per_cpu=memory_mb // 2,
            # job ids of their own: two test clusters on one machine share the cgroup folders
            # Slurm names after the node and the job (slurm_localhost/uid_0/job_<id>)
            first_job=random.randrange(1, 2**25),
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf), MARKER: str(folder)}
    cluster = SlurmCluster(folder, env)
    key = folder / "munge" / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    try:
        _start(
            cluster,
            "munged",
            [
                "munged",
                "--foreground",
                "--force",  # as root, in a private folder
                f"--socket={folder}/munge/munge.socket",
                f"--key-file={key}",
                f"--log-file={folder}/log/munged.log",
                f"--pid-file={folder}/munge/munged.pid",
                f"--seed-file={folder}/munge/munged.seed",
            ],
        )
        wait_until(lambda: (folder / "munge" / "munge.socket").exists(), START_TIMEOUT_S, "munged")
        _start(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        _start(cluster, "slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(conf)])

        def idle() -> bool:
            for name, proc in cluster.daemons.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{cluster.log(name)}")
            return cluster.node_state() == "idle"

        wait_until(idle, START_TIMEOUT_S, "the Slurm node to be idle")
        yield cluster
    finally:
        if "slurmctld" in cluster.daemons and cluster.daemons["slurmctld"].poll() is None:
            jobs = cluster.jobs()
            if jobs:
                cluster.run("scancel", *jobs, check=False)
                with contextlib.suppress(TimeoutError):
                    wait_until(lambda: not cluster.jobs(), 30, "cancelled jobs to end")
        for proc in reversed(cluster.daemons.values()):
            _stop(proc)
        left = []
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not leftover_processes(folder), 10, "the cluster's processes")
        for proc in leftover_processes(folder):
            with contextlib.suppress(psutil.Error):
                left.append(f"{proc.pid} {' '.join(proc.cmdline())}")
                proc.kill()
        if left:
            raise RuntimeError(f"processes of the test Slurm cluster outlived it: {left}")
