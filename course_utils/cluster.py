"""Run a small TensorFlow cluster on this machine, safely.

A multi-worker job is several copies of one worker script, each told its place in the cluster by
the TF_CONFIG environment variable. Started by hand (`%%bash --bg`, `sleep 10`, fixed ports), such
jobs leave students with busy ports, orphaned workers and cells that hang. `LocalCluster` does the
same thing without those traps:

- ports are picked free (portpicker), and a busy port is reported with the process that holds it;
- every task logs to its own file; the notebook waits by *reading the logs*, never by sleeping;
- when a task dies, the others are stopped and the error shows the tail of the failing task's log;
- a deadline (`timeout`) stops a hung cluster;
- every task runs in its own process group, and the whole group is killed on exit, on error, on
  KeyboardInterrupt, and when the notebook kernel dies or restarts (a small watchdog process
  does it then, and on Linux the kernel also sends SIGKILL to each task when its parent dies).

Example:
    >>> from course_utils import cluster
    >>> done = cluster.run("worker.py", workers=2, timeout=300)      # start, wait, stop: one call
    >>> done.show_logs()
    >>> with cluster.LocalCluster("train.py", workers=2, ready=r"replicas: 2") as c:
    ...     c.wait_for(r"saved step (\\d+)", task=0)   # read worker 0's log until the line appears
    ...     c.kill(1)                                  # simulate losing worker 1
    ...     c.wait(check=False)                        # watch the others stop
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import portpicker
import psutil

from course_utils.processes import die_with_parent, kill_group, start_orphan_guard

#: How often the waiting loops look at the logs and the processes (seconds).
POLL_SECONDS = 0.05
#: Time a task gets to exit after SIGTERM before it is killed with SIGKILL (seconds).
STOP_GRACE_SECONDS = 3.0
#: Environment variable set in every task this module starts (value: "<parent pid>"), so that
#: `leftover_workers` can find them in the process table.
MARKER = "COURSE_CLUSTER_PARENT"

# Lines TensorFlow prints while its shared libraries load, before TF_CPP_MIN_LOG_LEVEL is read
# (see course_utils.quiet): they are kept in the log files but left out of what the notebook shows.
_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|I\d{4} \d\d:\d\d:\d\d"  # absl INFO lines (oneDNN notice, "Could not find cuda drivers")
    r"|E\d{4} .*(cuInit|cuda_platform)"  # "failed call to cuInit" on machines without a GPU
    r"|This TensorFlow binary is optimized|To enable the following instructions)"
)


# --------------------------------------------------------------------------------------------
# TF_CONFIG


class Task(NamedTuple):
    """One process of the cluster: its job (`"chief"`, `"worker"` or `"ps"`) and index."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type} {self.index}"


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that are free on this machine right now (portpicker)."""
    ports: list[int] = []
    while len(ports) < count:
        port = portpicker.pick_unused_port()
        if port not in ports:
            ports.append(port)
    return ports


def cluster_spec(
    workers: int = 2,
    chief: bool = False,
    ps: int = 0,
    ports: Sequence[int] | None = None,
    host: str = "localhost",
) -> dict[str, list[str]]:
    """The `cluster` part of TF_CONFIG: job name -> list of "host:port" addresses.

    Ports are picked free unless given (one per task, in the order chief, workers, ps).

    >>> cluster_spec(workers=2, ports=[2222, 2223])
    {'worker': ['localhost:2222', 'localhost:2223']}
    """
    sizes = {"chief": int(chief), "worker": workers, "ps": ps}
    if workers < 1 or ps < 0:
        raise ValueError(
            f"A cluster needs at least 1 worker and 0 or more ps tasks (got workers={workers}, "
            f"ps={ps})."
        )
    total = sum(sizes.values())
    ports = list(ports) if ports is not None else free_ports(total)
    if len(ports) != total or len(set(ports)) != total:
        raise ValueError(
            f"Give {total} distinct ports (chief, workers, ps in that order), got {ports}."
        )
    spec, it = {}, iter(ports)
    for job, size in sizes.items():
        if size:
            spec[job] = [f"{host}:{next(it)}" for _ in range(size)]
    return spec


def tf_config(spec: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> dict:
    """The TF_CONFIG of one task: the whole cluster plus which task this process is.

    >>> tf_config({"worker": ["localhost:2222", "localhost:2223"]}, "worker", 1)["task"]
    {'type': 'worker', 'index': 1}
    """
    if task_type not in spec or not 0 <= task_index < len(spec[task_type]):
        raise ValueError(f"No task {task_type} {task_index} in cluster {dict(spec)}.")
    return {
        "cluster": {job: list(addresses) for job, addresses in spec.items()},
        "task": {"type": task_type, "index": task_index},
    }


# --------------------------------------------------------------------------------------------
# Errors


class ClusterError(RuntimeError):
    """Something went wrong with a local cluster (base class of the errors below)."""


class WorkerFailed(ClusterError):
    """A task exited with an error; the message ends with the tail of its log."""

    def __init__(self, task: Task, returncode: int, log_path: Path, tail: str, hint: str = ""):
        self.task, self.returncode, self.log_path, self.tail = task, returncode, log_path, tail
        how = (
            f"was killed by {signal.Signals(-returncode).name}"
            if returncode < 0
            else f"exited with code {returncode}"
        )
        hint = f"\nHint: {hint}" if hint else ""
        super().__init__(
            f"{task} {how}; the other tasks were stopped.{hint}\n"
            f"Last lines of its log ({log_path}):\n{_indent(tail)}"
        )


class ClusterTimeout(ClusterError):
    """The cluster did not finish (or print what was awaited) before its deadline."""


class PortBusy(ClusterError):
    """A port meant for a task is already taken by another process."""


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"


def _port_owner(port: int) -> str:
    """'pid 123 (python worker.py)' for the process listening on `port`, if psutil can see it."""
    try:
        for conn in psutil.net_connections(kind="inet"):
            if (
                conn.laddr
                and conn.laddr.port == port
                and conn.status == psutil.CONN_LISTEN
                and conn.pid
            ):
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline())[:120]})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def _hint_for(log: str) -> str:
    if "Could not start gRPC server" in log or "Address already in use" in log:
        return (
            "the task could not listen on its port: another process took it. If you passed ports=, "
            "free them or leave ports=None so that free ones are picked; otherwise simply run "
            "again."
        )
    return ""


# --------------------------------------------------------------------------------------------
# Stopping children even when the notebook kernel dies

_LIVE: set[LocalCluster] = set()


@atexit.register
def _stop_all() -> None:
    """At interpreter exit (e.g. a clean kernel restart), stop every live cluster."""
    for cluster in list(_LIVE):
        cluster.stop(grace=0.5)


#: Two guards against orphans when the kernel dies without stopping its clusters (tests switch
#: them off one at a time): on Linux the kernel sends SIGKILL to each task when its parent dies
#: (prctl PR_SET_PDEATHSIG); everywhere, a watchdog process kills the tasks' whole process groups
#: (children of tasks included) once the parent is gone. Both come from `course_utils.processes`.
USE_PDEATHSIG = sys.platform.startswith("linux")
USE_WATCHDOG = True


def leftover_workers() -> list[psutil.Process]:
    """Tasks started by this module that outlived their cluster: an empty list means none did.

    Finds them by the COURSE_CLUSTER_PARENT variable in their environment: a task counts when its
    parent (the kernel that started it) is gone, or when it is ours but its cluster was stopped.
    Clusters run by other live processes (another notebook, a test run) are left out.
    """
    live = {p.pid for c in _LIVE for p in c._procs.values()}
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            parent = proc.environ().get(MARKER)
            if parent is None or proc.pid in live or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if int(parent) == os.getpid() or not psutil.pid_exists(int(parent)):
                found.append(proc)
        except (psutil.Error, OSError, ValueError):
            continue
    return found


# --------------------------------------------------------------------------------------------
# The cluster


class LocalCluster:
    """Start one worker script as a cluster of processes on this machine.

    Every task runs `python script *args` with its own TF_CONFIG, in `cwd` (default: the script's
    folder), logging stdout and stderr to `log_dir/<script>-<type>-<index>.log`. The environment is
    this process's, plus `env`, minus COURSE_DEVICES (the notebook simulates devices for itself; a
    worker is one device), with PYTHONUNBUFFERED=1 (so log lines appear at once) and `course_utils`
    importable.

    Arguments:
        script: the worker script (same for every task; it reads TF_CONFIG to know its role).
        workers, chief, ps: how many tasks of each job.
        args, env: command-line arguments and extra environment variables for every task.
        ready: a regular expression every task prints once it is ready; `start()` waits for it.
        timeout: seconds from `start()` after which the cluster is stopped and ClusterTimeout
        raised.
        stream: print each new (non-noise) log line as `[worker 0] ...` while waiting.
        ports: fixed ports (chief, workers, ps order); default: free ones.

    Use it as a context manager (stopped on leaving the block, whatever happens), or call
    `start()` / `wait()` / `stop()` yourself; `run()` does all three.
    """

    def __init__(
        self,
        script: str | os.PathLike,
        workers: int = 2,
        *,
        chief: bool = False,
        ps: int = 0,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        log_dir: str | os.PathLike | None = None,
        ready: str | None = None,
        timeout: float = 600.0,
        stream: bool = False,
        ports: Sequence[int] | None = None,
        python: str = sys.executable,
    ):
        self.script = Path(script).resolve()
        if not self.script.is_file():
            raise FileNotFoundError(
                f"Worker script {self.script} does not exist (write it first, e.g. with "
                f"%%writefile)."
            )
        if os.name != "posix":
            raise ClusterError(
                "LocalCluster needs Linux or macOS (process groups); on Windows use WSL or Colab."
            )
        self.cwd = Path(cwd) if cwd is not None else self.script.parent
        self.log_dir = Path(log_dir) if log_dir is not None else self.cwd / "logs"
        self.args, self.extra_env, self.python = [str(a) for a in args], dict(env or {}), python
        self.ready, self.timeout, self.stream = ready, timeout, stream
        self.spec = cluster_spec(workers, chief, ps, ports)
        self.tasks = [
            Task(job, i) for job, addresses in self.spec.items() for i in range(len(addresses))
        ]
        self.log_paths = {
            t: self.log_dir / f"{self.script.stem}-{t.type}-{t.index}.log" for t in self.tasks
        }
        self._procs: dict[Task, subprocess.Popen] = {}
        self._files: dict[Task, object] = {}
        self._text = {t: "" for t in self.tasks}  # log contents read so far
        self._offset = {t: 0 for t in self.tasks}
        self._killed: set[Task] = set()
        self._watchdog: subprocess.Popen | None = None
        self._started = self._deadline = 0.0
        self._stopped = False
        self._logs_final = False
        self.seconds = 0.0  # wall time from start() to stop()

    # -- starting -----------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Check the ports, start every task, and (if `ready` was given) wait until all print it."""
        if self._started:
            raise ClusterError(
                "This cluster was already started; make a new LocalCluster to run again."
            )
        for task in self.tasks:
            port = int(self.spec[task.type][task.index].rsplit(":", 1)[1])
            if not portpicker.is_port_free(port):
                raise PortBusy(
                    f"Port {port} (for {task}) is already in use by {_port_owner(port)}. A worker "
                    f"from an earlier run may still be alive: stop it (cluster.leftover_workers() "
                    f"lists the course's), or leave ports=None so that free ports are picked."
                )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        self._deadline = self._started + self.timeout
        _LIVE.add(self)
        try:
            for task in self.tasks:
                self._launch(task)
            if USE_WATCHDOG:
                self._watchdog = start_orphan_guard(
                    [p.pid for p in self._procs.values()], python=self.python
                )
            if self.ready:
                self.wait_for(self.ready, task="all")
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, task: Task) -> None:
        env = {**os.environ, **self.extra_env}
        if "COURSE_DEVICES" not in self.extra_env:
            env.pop(
                "COURSE_DEVICES", None
            )  # each worker is one device; simulation is for one-process notebooks
        package_root = str(
            Path(__file__).resolve().parent.parent
        )  # so workers can `import course_utils`
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONUNBUFFERED"] = "1"
        env[MARKER] = str(os.getpid())
        env["TF_CONFIG"] = json.dumps(tf_config(self.spec, task.type, task.index))
        log = open(
            self.log_paths[task], "wb"
        )  # truncated: no stale line from an earlier run can match
        self._files[task] = log
        self._procs[task] = subprocess.Popen(
            [self.python, str(self.script), *self.args],
            cwd=self.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # own process group: killed as a whole, untouched by the notebook's Ctrl-C
            start_new_session=True,
            preexec_fn=die_with_parent(os.getpid()) if USE_PDEATHSIG else None,
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- looking at tasks ---------------------------------------------------------------------

    def _task(self, task: Task | int | str) -> Task:
        """Accepts a Task, a worker index (1 -> worker 1), or "chief" / "ps 1"."""
        if isinstance(task, int):
            task = Task("worker", task)
        elif isinstance(task, str):
            job, _, index = task.partition(" ")
            task = Task(job, int(index or 0))
        if task not in self.tasks:
            raise ValueError(
                f"No task {task} in this cluster; its tasks are: {', '.join(map(str, self.tasks))}."
            )
        return task

    @property
    def pids(self) -> dict[Task, int]:
        return {t: p.pid for t, p in self._procs.items()}

    @property
    def returncodes(self) -> dict[Task, int | None]:
        """Exit code of every task (None while it runs; negative: killed by that signal)."""
        return {t: p.poll() for t, p in self._procs.items()}

    def log(self, task: Task | int | str = 0, raw: bool = False) -> str:
        """The log of one task so far (without TensorFlow's start-up noise unless `raw`)."""
        task = self._task(task)
        self._read(task)
        text = self._text[task]
        return (
            text if raw else "\n".join(line for line in text.splitlines() if not _NOISE.match(line))
        )

    def tail(self, task: Task | int | str = 0, lines: int = 15) -> str:
        return "\n".join(self.log(task).splitlines()[-lines:])

    def show_logs(
        self,
        lines: int | None = None,
        tasks: Sequence[Task | int | str] | None = None,
        match: str | None = None,
    ) -> None:
        """Print each task's log under a header: its last `lines` lines (default: all), and only the
        lines matching the regular expression `match` when given."""
        for task in [self._task(t) for t in tasks] if tasks is not None else self.tasks:
            text = [
                line
                for line in self.log(task).splitlines()
                if match is None or re.search(match, line)
            ]
            path = os.path.relpath(
                self.log_paths[task]
            )  # short when the logs are below the notebook
            print(f"--- {task}  ({self.log_paths[task] if path.startswith('..') else path}) ---")
            print("\n".join(text[-lines:] if lines else text) or "(empty)")

    def _read(self, task: Task, final: bool = False) -> None:
        """Append what the task wrote since the last call to its text (and print it if streaming).

        Only whole lines are taken (a line being written is read next time), unless `final`.
        """
        path = self.log_paths[task]
        if self._logs_final or not path.exists():  # after stop() the file may belong to a newer run
            return
        with open(path, "rb") as f:
            f.seek(self._offset[task])
            new = f.read()
        if not new:
            return
        end = len(new) if final else new.rfind(b"\n") + 1
        if end == 0:
            return
        self._offset[task] += end
        chunk = new[:end].decode("utf-8", errors="replace")
        self._text[task] += chunk
        if self.stream:
            for line in chunk.splitlines():
                if not _NOISE.match(line):
                    print(f"[{task}] {line}", flush=True)

    # -- waiting ------------------------------------------------------------------------------

    def _poll(self, check: bool) -> None:
        """Read new log lines; with `check`, stop everything and raise if a task failed."""
        for task in self.tasks:
            self._read(task)
        if not check:
            return
        for task, proc in self._procs.items():
            code = proc.poll()
            if code not in (None, 0) and task not in self._killed:
                self._read(task)
                tail = self.tail(task, 25)
                hint = _hint_for(self._text[task])
                self.stop()
                raise WorkerFailed(task, code, self.log_paths[task], tail, hint)

    def _check_deadline(self, what: str, deadline: float) -> None:
        if time.monotonic() > deadline:
            running = [t for t, p in self._procs.items() if p.poll() is None]
            tails = "\n".join(
                f"{t} (still running), last lines:\n{_indent(self.tail(t, 8))}" for t in running
            )
            waited = deadline - self._started
            self.stop()
            raise ClusterTimeout(
                f"Timed out after {waited:.0f} s waiting for {what}; all tasks were stopped. "
                "A worker that waits for its peers forever, or a run longer than "
                f"timeout={self.timeout:g} s, ends like this.\n{tails}"
            )

    def _deadline_for(self, timeout: float | None) -> float:
        if not self._procs:
            raise ClusterError("Start the cluster first (start(), or use it in a `with` block).")
        return (
            self._deadline if timeout is None else min(self._deadline, time.monotonic() + timeout)
        )

    def wait_for(
        self, pattern: str, task: Task | int | str = 0, timeout: float | None = None
    ) -> re.Match:
        """Read the logs until `pattern` (a regular expression) appears in `task`'s log; return the
        match.

        `task="all"` waits until every task printed it (and returns the last match). Raises
        WorkerFailed if any task fails first (a task killed with `kill` does not count),
        ClusterError if the awaited task exits without printing it, ClusterTimeout at the deadline.
        """
        awaited = self.tasks if task == "all" else [self._task(task)]
        deadline = self._deadline_for(timeout)
        regex = re.compile(pattern, re.MULTILINE)
        try:
            while True:
                self._poll(check=True)
                matches = [regex.search(self._text[t]) for t in awaited]
                if all(matches):
                    return matches[-1]
                for t, match in zip(awaited, matches):
                    if not match and self._procs[t].poll() is not None:
                        code = self._procs[t].returncode
                        self.stop()
                        raise ClusterError(
                            f"{t} exited (code {code}) without printing {pattern!r}. "
                            f"Last lines of its log:\n{_indent(self.tail(t, 25))}"
                        )
                self._check_deadline(
                    f"{pattern!r} in the log of {'every task' if task == 'all' else awaited[0]}",
                    deadline,
                )
                time.sleep(POLL_SECONDS)
        except BaseException:  # KeyboardInterrupt included: never leave workers behind
            self.stop()
            raise

    def wait(self, timeout: float | None = None, check: bool = True) -> dict[Task, int]:
        """Wait until every task has exited, then stop the cluster; return the exit codes.

        With `check` (default), the first task that fails stops the others and raises WorkerFailed.
        With `check=False`, tasks may fail; this just waits for all of them to end (used to watch
        what the others do after `kill`).
        """
        deadline = self._deadline_for(timeout)
        try:
            while any(p.poll() is None for p in self._procs.values()):
                self._poll(check)
                self._check_deadline("every task to finish", deadline)
                time.sleep(POLL_SECONDS)
            self._poll(check)
        finally:
            self.stop()
        return self.returncodes

    # -- stopping -----------------------------------------------------------------------------

    def kill(self, task: Task | int | str) -> None:
        """Kill one task at once with SIGKILL (like a machine that is preempted); the rest go on."""
        task = self._task(task)
        proc = self._procs[task]
        self._killed.add(task)
        kill_group(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop every task: SIGTERM to each process group, SIGKILL after `grace` seconds.
        Idempotent."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        running = [p for p in self._procs.values() if p.poll() is None]
        for proc in running:
            kill_group(proc.pid, signal.SIGTERM)
        end = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for task, proc in self._procs.items():
            if task not in self._killed:
                kill_group(proc.pid, signal.SIGKILL)  # the whole group: children of a task die too
            proc.wait()
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
        for f in self._files.values():
            f.close()
        for task in self.tasks:
            self._read(task, final=True)
        self._logs_final = True
        self.seconds = time.monotonic() - self._started
        _LIVE.discard(self)

    def __repr__(self) -> str:
        state = {
            t: ("running" if c is None else f"exit {c}") for t, c in self.returncodes.items()
        } or "not started"
        return f"LocalCluster({self.script.name}, {state})"


def run(script: str | os.PathLike, workers: int = 2, **kwargs) -> LocalCluster:
    """Start a cluster, wait for every task to finish, stop it; return it (for `.log()`,
    `.show_logs()`).

    Takes the arguments of LocalCluster. Raises WorkerFailed / ClusterTimeout like `wait()`.

    >>> done = run("worker.py", workers=2, args=["--epochs", "2"], timeout=300)
    >>> done.returncodes
    {Task(type='worker', index=0): 0, Task(type='worker', index=1): 0}
    """
    cluster = LocalCluster(script, workers, **kwargs)
    with cluster:
        cluster.wait()
    return cluster
