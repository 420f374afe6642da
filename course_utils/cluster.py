"""Run a small TensorFlow cluster on this machine, safely: `LocalCluster` and `run`.

Notebook 4's `subprocess.Popen` workers, with safeguards: waiting reads the logs for a line (never
sleeps); a failed worker, the deadline or Ctrl-C stops every worker, and the error ends with the
failed worker's last log lines. Each worker runs in its own process group, out of reach of the
notebook's Ctrl-C, so one signal stops it with all it started (SIGTERM asks, SIGKILL forces, as
when a machine is lost); a kernel that dies without cleaning up leaves that to a guard process.
Tasks are named 0, 1, ... for workers, "chief", "ps 0", "ps 1" for other jobs.

Example (with the worker scripts a notebook writes):

    from course_utils import cluster

    done = cluster.run("worker.py", workers=2, timeout=300)  # start, wait, stop
    with cluster.LocalCluster("train.py", workers=2, ready=r"replicas: 2") as c:
        c.wait_for(r"saved step (\\d+)", worker=0)  # read worker 0's log until this appears
        c.kill(1)  # lose worker 1
        c.wait(check=False)  # watch what the other does
    with cluster.LocalCluster("ps.py", workers=2, jobs={"chief": 1, "ps": 1}) as c:
        c.wait(until=["chief"])  # parameter servers never end by themselves
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import portpicker

#: How often the waiting loops read the logs (seconds).
POLL_SECONDS = 0.05
#: Between SIGTERM and SIGKILL when the cluster is stopped (seconds).
STOP_GRACE_SECONDS = 3.0
#: In each worker's environment: the pid that started it (`course doctor` finds orphans by it).
#: Workers started by hand (notebook 4) can carry it too.
MARKER = "COURSE_CLUSTER_PARENT"

# On the workers' PYTHONPATH, so that they (and the guard) import this package.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[1])


class ClusterError(RuntimeError):
    """Something went wrong with a local cluster."""


class ClusterTimeout(ClusterError):
    """The cluster did not finish, or print what was awaited, before its deadline."""


#: A task: the index of a worker, or "type index" for a task of another job ("chief 0", "ps 1").
Task = int | str


def task_name(task: Task) -> str:
    """ "worker 1" for worker 1, the name itself for other jobs' tasks."""
    return f"worker {task}" if isinstance(task, int) else task


class WorkerFailed(ClusterError):
    """A task exited with an error; the message ends with the last lines of its log."""

    def __init__(self, worker: Task, returncode: int, log_path: Path, log: str):
        self.worker, self.returncode, self.log_path = worker, returncode, log_path
        how = f"exited with code {returncode}"
        if returncode < 0:
            how = f"was killed by {signal.Signals(-returncode).name}"
        message = f"{task_name(worker)} {how}; the other tasks were stopped.\n"
        if re.search("Could not start gRPC server|Address already in use", log):
            message += "Hint: the worker could not listen on its port (taken meanwhile): retry.\n"
        super().__init__(f"{message}Last lines of its log ({log_path}):\n{_tail(log, 25)}")


def _tail(text: str, count: int) -> str:
    """The last `count` lines of `text`, indented."""
    return "\n".join("    " + line for line in text.splitlines()[-count:]) or "    (empty)"


#: Lines of a TensorFlow error message that say where, not why.
_NOT_THE_REASON = (
    "Graph execution error",
    "Detected at node",
    "Additional GRPC",
    "The error could",
)


def error_summary(log: str) -> str | None:
    """The last exception in a worker's log and the first line of its message that says why, or
    None when the log has no exception. TensorFlow's errors from a distributed step start with
    "Graph execution error:" and the nodes involved, and give the reason further down:

        >>> error_summary("...UnavailableError: Graph execution error:\\n\\n"
        ...               "Detected at node x\\nCollective ops is aborted by: reset by peer\\n")
        'UnavailableError: Collective ops is aborted by: reset by peer'
    """
    *_, last = [None, *re.finditer(r"^([\w.]*Error): ", log, re.MULTILINE)]
    if last is None:
        return None
    name = last.group(1).rsplit(".", 1)[-1]
    message = re.sub(r"\{\{function_node .*?\}\} ", "", log[last.end() :])  # the node's name
    lines = [*message.splitlines(), ""]
    for line, after in zip(lines, lines[1:]):
        if re.match(r"[A-Z][a-z]", line) and not line.startswith(_NOT_THE_REASON):
            return f"{name}: {line} {after.strip()}" if line.endswith(":") else f"{name}: {line}"
    return f"{name}: {lines[0]}"


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to every process of the group `pgid` (nothing happens when it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def guard(parent: int, groups: Sequence[int]) -> None:
    """The guard's whole program (`python -m course_utils.cluster PARENT GROUP...`): wait while
    `parent` lives, then SIGKILL the process `groups`. A cluster that stops stops its guard."""
    while os.getppid() == parent:
        time.sleep(0.2)
    for group in groups:
        signal_group(group, signal.SIGKILL)


class LocalCluster:
    """A script run as `workers` processes, workers 0 to `workers - 1`, in a `with` block (or
    `start()`, `wait()`, `stop()`). Each runs `python script *args` in the script's folder with
    its TF_CONFIG, this environment plus `env` minus COURSE_DEVICES (a worker is one device),
    and its log in `log_dir`. `jobs` adds tasks of other jobs running the same script, e.g.
    `{"chief": 1, "ps": 1}` for parameter-server training. `start()` waits until each task printed
    `ready` (a regular expression); `timeout` seconds after the start, everything is stopped.

    The addresses say `localhost`, but TensorFlow's gRPC server listens on every interface (it
    binds the wildcard address, IPv4 and IPv6; TensorFlow 2.21 offers no other) and runs any
    graph sent to it, with no authentication: start clusters only on a machine or node no one
    else can reach (notebook 4, section 1)."""

    # Keyword options notebook 4 writes out where the lesson is about them (ready=, timeout=...).
    def __init__(  # noqa: PLR0913
        self,
        script: str | os.PathLike,
        workers: int = 2,
        *,
        args: Sequence[object] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike | None = None,
        ready: str | None = None,
        timeout: float = 600.0,
        jobs: Mapping[str, int] | None = None,
    ):
        self.script = Path(script).resolve()
        if not self.script.is_file():
            raise FileNotFoundError(f"No script {self.script}: write it first (%%writefile).")
        if workers < 1:
            raise ValueError(f"A cluster needs at least 1 worker, not {workers}.")
        jobs = dict(jobs or {})
        for job, count in jobs.items():
            if job == "worker" or not re.fullmatch(r"[a-z]+", job) or count < 1:
                raise ValueError(
                    f"jobs={jobs!r}: give other jobs than 'worker' (lower-case names such as "
                    "'chief' or 'ps') with 1 task or more; the workers are counted by `workers`."
                )
        if os.name != "posix":
            raise ClusterError("LocalCluster needs Linux or macOS: on Windows use WSL or Colab.")
        self.log_dir = Path(log_dir) if log_dir is not None else self.script.parent / "logs"
        self.args, self.env = [str(a) for a in args], dict(env or {})
        self.ready, self.timeout = ready, timeout
        # As notebook 4 builds it; portpicker never gives one process the same port twice.
        counts = {"worker": workers, **jobs}
        self.spec = {
            job: [f"localhost:{portpicker.pick_unused_port()}" for _ in range(count)]
            for job, count in counts.items()
        }
        self.workers = list(range(workers))
        self.tasks: list[Task] = [
            *self.workers,
            *(f"{job} {i}" for job, count in jobs.items() for i in range(count)),
        ]
        self.log_paths = {
            t: self.log_dir / f"{self.script.stem}-{task_name(t).replace(' ', '-')}.log"
            for t in self.tasks
        }
        self._final_logs: dict[Task, str] = {}  # at stop(): a later run may reuse the files
        self.processes: dict[Task, subprocess.Popen] = {}
        self._killed: set[Task] = set()
        self._guard: subprocess.Popen | None = None
        self._started = self._deadline = 0.0
        self._stopped = False

    def start(self) -> LocalCluster:
        """Start every worker, then wait until each printed `ready` (if given)."""
        if self._started:
            raise ClusterError("This cluster was started already: make a new LocalCluster.")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # Simulated devices (COURSE_DEVICES) are for the notebook: each worker is one device.
        inherited = {name: value for name, value in os.environ.items() if name != "COURSE_DEVICES"}
        env = {"TF_CPP_MIN_LOG_LEVEL": "2", **inherited, **self.env, "PYTHONUNBUFFERED": "1"}
        # A task that dies of a fatal signal (SIGSEGV, SIGABRT inside TensorFlow) writes the Python
        # stack of each thread to its log first, which WorkerFailed then shows.
        env["PYTHONFAULTHANDLER"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_PARENT, env.get("PYTHONPATH")]))
        env[MARKER] = str(os.getpid())
        self._started = time.monotonic()
        self._deadline = self._started + self.timeout
        try:
            for i in self.tasks:
                job, index = task_name(i).split()
                config = json.dumps(
                    {"cluster": self.spec, "task": {"type": job, "index": int(index)}}
                )
                # "wb" empties the log: no line of an earlier run can match.
                with open(self.log_paths[i], "wb") as log:
                    self.processes[i] = subprocess.Popen(
                        [sys.executable, str(self.script), *self.args],
                        cwd=self.script.parent,
                        env={**env, "TF_CONFIG": config},
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        # Its own process group: stopped as a whole, out of reach of Ctrl-C.
                        start_new_session=True,
                    )
            groups = [str(p.pid) for p in self.processes.values()]
            self._guard = subprocess.Popen(
                [sys.executable, "-m", "course_utils.cluster", str(os.getpid()), *groups],
                env=env,
                start_new_session=True,
            )
        except BaseException:
            self.stop()
            raise
        if self.ready:
            self.wait_for(self.ready, worker="all")
        return self

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _worker(self, worker: Task) -> Task:
        """The task `worker` names (an index, "chief", "ps 1"...), or a clear error."""
        task: Task = worker
        if isinstance(worker, str):
            job, _, index = worker.partition(" ")
            task = int(index or 0) if job == "worker" else f"{job} {index or 0}"
        if task not in self.tasks:
            others = ", ".join(repr(t) for t in self.tasks if isinstance(t, str))
            name = f"worker {worker}" if isinstance(worker, int) else f"task {worker!r}"
            raise ValueError(
                f"No {name}: this cluster has workers 0-{self.workers[-1]}"
                + (f" and {others}." if others else ".")
            )
        return task

    @property
    def returncodes(self) -> dict[Task, int | None]:
        """Exit code of each task: None while it runs, negative when killed by that signal."""
        return {i: process.poll() for i, process in self.processes.items()}

    def log(self, worker: Task = 0) -> str:
        """The log of one task so far (as it was at `stop()` once stopped)."""
        task = self._worker(worker)
        if task in self._final_logs:
            return self._final_logs[task]
        path = self.log_paths[task]
        return path.read_text(errors="replace") if path.exists() else ""

    def _watch(self, done: Callable, what: str, timeout: float | None, *, check: bool = True):
        """Read the logs until `done(returncodes)` returns something true; return that. On any
        error (a failed worker if `check`, the deadline, Ctrl-C) every worker is stopped first."""
        if not self.processes:
            raise ClusterError("Start the cluster first (start(), or a `with` block).")
        deadline = self._deadline
        if timeout is not None:
            deadline = min(deadline, time.monotonic() + timeout)
        try:
            while True:
                codes = self.returncodes  # before reading: a worker that ended wrote all its log
                failed = [i for i, code in codes.items() if code and i not in self._killed]
                if check and failed:
                    i = failed[0]
                    raise WorkerFailed(i, codes[i], self.log_paths[i], self.log(i))
                result = done(codes)
                if result:
                    return result
                if time.monotonic() > deadline:
                    message = f"Timed out waiting for {what}; all workers were stopped. A run "
                    message += "longer than the timeout, or a worker waiting for a lost peer, "
                    message += "ends like this."
                    for i in [i for i, code in codes.items() if code is None]:
                        message += f"\n{task_name(i)} (still running), last lines:\n"
                        message += _tail(self.log(i), 8)
                    raise ClusterTimeout(message)
                time.sleep(POLL_SECONDS)
        except BaseException:  # Ctrl-C included: never leave workers behind
            self.stop()
            raise

    def wait_for(self, pattern: str, worker: Task = 0, timeout: float | None = None) -> re.Match:
        """Read the logs until the regular expression `pattern` is in the log of `worker` (a task;
        every task with "all"); return the match. Fails clearly if that task ends without
        printing it, if a task (not a killed one) fails first, or at the deadline."""
        awaited = self.tasks if worker == "all" else [self._worker(worker)]
        regex = re.compile(pattern, re.MULTILINE)

        def found(codes: dict[int, int | None]) -> re.Match | None:
            matches = [regex.search(self.log(i)) for i in awaited]
            for i, match in zip(awaited, matches):
                if not match and codes[i] is not None:
                    raise ClusterError(
                        f"{task_name(i)} exited (code {codes[i]}) without printing {pattern!r}. "
                        f"Last lines of its log:\n{_tail(self.log(i), 25)}"
                    )
            return matches[-1] if all(matches) else None

        where = "every task" if worker == "all" else task_name(self._worker(worker))
        return self._watch(found, f"{pattern!r} in the log of {where}", timeout)

    def wait(
        self,
        timeout: float | None = None,
        *,
        check: bool = True,
        until: Sequence[Task] | None = None,
    ) -> dict[Task, int]:
        """Wait until every task ended (or the tasks `until`, e.g. ["chief"]: servers never end
        by themselves), stop the rest, return the exit codes. A failed task stops the others and
        raises WorkerFailed, unless `check=False` (after `kill`)."""
        awaited = self.tasks if until is None else [self._worker(t) for t in until]
        what = "every task" if until is None else ", ".join(map(task_name, awaited))

        def ended(codes: dict[Task, int | None]) -> bool:
            return all(codes[t] is not None for t in awaited)

        self._watch(ended, f"{what} to end", timeout, check=check)
        self.stop()
        return self.returncodes

    def kill(self, worker: Task) -> None:
        """Kill one task at once with SIGKILL, as when a machine is lost; the others go on."""
        task = self._worker(worker)
        self._killed.add(task)
        signal_group(self.processes[task].pid, signal.SIGKILL)
        self.processes[task].wait()

    def stop(self) -> None:
        """Stop every worker: SIGTERM to each process group, SIGKILL STOP_GRACE_SECONDS later."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        for process in self.processes.values():
            signal_group(process.pid, signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_SECONDS
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, end - time.monotonic()))
            # The whole group: a worker's children too.
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
        if self._guard is not None:
            self._guard.kill()
            self._guard.wait()
        self._final_logs = {i: self.log(i) for i in self.tasks}


def run(
    script: str | os.PathLike,
    workers: int = 2,
    *,
    until: Sequence[Task] | None = None,
    **kwargs,
) -> LocalCluster:
    """Start a `LocalCluster(script, workers, **kwargs)`, `wait(until=until)` for it, and return
    it (for its `.log()` and `.returncodes`)."""
    with LocalCluster(script, workers, **kwargs) as cluster:
        cluster.wait(until=until)
    return cluster


if __name__ == "__main__":
    guard(int(sys.argv[1]), [int(group) for group in sys.argv[2:]])
