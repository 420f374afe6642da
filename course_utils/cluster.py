"""Run a small TensorFlow cluster on this machine, safely: `LocalCluster` and `run`.

What notebook 4 first does with `subprocess.Popen`, with safeguards: waiting reads the logs for a
line (never sleeps); a failed worker, the deadline or Ctrl-C stops every worker, and the error ends
with the failed worker's last log lines.

Why this module sends signals: each worker runs in its own process group, out of reach of the
notebook's Ctrl-C, and one signal to the group stops it with all it started (SIGTERM asks, SIGKILL
forces, as when a machine is lost). A kernel that dies without cleaning up (a crash, "Restart
kernel" on a busy one) leaves that to a small guard process each cluster starts (`guard`).

Example (with the worker scripts a notebook writes):

    from course_utils import cluster

    done = cluster.run("worker.py", workers=2, timeout=300)  # start, wait, stop
    with cluster.LocalCluster("train.py", workers=2, ready=r"replicas: 2") as c:
        c.wait_for(r"saved step (\\d+)", worker=0)  # read worker 0's log until this appears
        c.kill(1)  # lose worker 1
        c.wait(check=False)  # watch what the other does
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
MARKER = "COURSE_CLUSTER_PARENT"

# On the workers' PYTHONPATH, so that they (and the guard) import this package.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[1])


class ClusterError(RuntimeError):
    """Something went wrong with a local cluster."""


class ClusterTimeout(ClusterError):
    """The cluster did not finish, or print what was awaited, before its deadline."""


class WorkerFailed(ClusterError):
    """A worker exited with an error; the message ends with the last lines of its log."""

    def __init__(self, worker: int, returncode: int, log_path: Path, log: str):
        self.worker, self.returncode, self.log_path = worker, returncode, log_path
        how = f"exited with code {returncode}"
        if returncode < 0:
            how = f"was killed by {signal.Signals(-returncode).name}"
        message = f"worker {worker} {how}; the other workers were stopped.\n"
        if re.search("Could not start gRPC server|Address already in use", log):
            message += "Hint: the worker could not listen on its port (taken meanwhile): retry.\n"
        super().__init__(f"{message}Last lines of its log ({log_path}):\n{_tail(log, 25)}")


def _tail(text: str, count: int) -> str:
    """The last `count` lines of `text`, indented."""
    return "\n".join("    " + line for line in text.splitlines()[-count:]) or "    (empty)"


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
    and its log in `log_dir`. `start()` waits until each printed `ready` (a regular expression);
    `timeout` seconds after the start, everything is stopped."""

    # PLR0913 counts keyword-only options too: each of these is a keyword with a default that
    # notebook 4 writes out where the lesson is about it (ready=, timeout=, env=); an options
    # object would hide them from the reader.
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
    ):
        self.script = Path(script).resolve()
        if not self.script.is_file():
            raise FileNotFoundError(f"No script {self.script}: write it first (%%writefile).")
        if workers < 1:
            raise ValueError(f"A cluster needs at least 1 worker, not {workers}.")
        if os.name != "posix":
            raise ClusterError("LocalCluster needs Linux or macOS: on Windows use WSL or Colab.")
        self.log_dir = Path(log_dir) if log_dir is not None else self.script.parent / "logs"
        self.args, self.env = [str(a) for a in args], dict(env or {})
        self.ready, self.timeout = ready, timeout
        # As notebook 4 builds it; portpicker never gives one process the same port twice.
        ports = [portpicker.pick_unused_port() for _ in range(workers)]
        self.spec = {"worker": [f"localhost:{port}" for port in ports]}
        self.workers = list(range(workers))
        self.log_paths = {
            i: self.log_dir / f"{self.script.stem}-worker-{i}.log" for i in self.workers
        }
        #: Each worker's log as it was when the cluster stopped (a later run may reuse the file).
        self._final_logs: dict[int, str] = {}
        #: The running (or finished) process of each worker.
        self.processes: dict[int, subprocess.Popen] = {}
        self._killed: set[int] = set()
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
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_PARENT, env.get("PYTHONPATH")]))
        env[MARKER] = str(os.getpid())
        self._started = time.monotonic()
        self._deadline = self._started + self.timeout
        try:
            for i in self.workers:
                config = json.dumps({"cluster": self.spec, "task": {"type": "worker", "index": i}})
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

    def _worker(self, worker: int) -> int:
        if worker not in self.workers:
            raise ValueError(
                f"No worker {worker!r}: this cluster has workers 0-{self.workers[-1]}."
            )
        return worker

    @property
    def returncodes(self) -> dict[int, int | None]:
        """Exit code of each worker: None while it runs, negative when killed by that signal."""
        return {i: process.poll() for i, process in self.processes.items()}

    def log(self, worker: int = 0) -> str:
        """The log of one worker so far (as it was at `stop()` once stopped)."""
        if self._worker(worker) in self._final_logs:
            return self._final_logs[worker]
        path = self.log_paths[worker]
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
                        message += f"\nworker {i} (still running), last lines:\n"
                        message += _tail(self.log(i), 8)
                    raise ClusterTimeout(message)
                time.sleep(POLL_SECONDS)
        except BaseException:  # Ctrl-C included: never leave workers behind
            self.stop()
            raise

    def wait_for(
        self, pattern: str, worker: int | str = 0, timeout: float | None = None
    ) -> re.Match:
        """Read the logs until the regular expression `pattern` is in the log of `worker` (of
        every worker with "all"); return the match. Fails clearly if that worker ends without
        printing it, if a worker (not a killed one) fails first, or at the deadline."""
        awaited = self.workers if worker == "all" else [self._worker(worker)]
        regex = re.compile(pattern, re.MULTILINE)

        def found(codes: dict[int, int | None]) -> re.Match | None:
            matches = [regex.search(self.log(i)) for i in awaited]
            for i, match in zip(awaited, matches):
                if not match and codes[i] is not None:
                    raise ClusterError(
                        f"worker {i} exited (code {codes[i]}) without printing {pattern!r}. "
                        f"Last lines of its log:\n{_tail(self.log(i), 25)}"
                    )
            return matches[-1] if all(matches) else None

        where = "every worker" if worker == "all" else f"worker {worker}"
        return self._watch(found, f"{pattern!r} in the log of {where}", timeout)

    def wait(self, timeout: float | None = None, *, check: bool = True) -> dict[int, int]:
        """Wait until every worker ended, stop, return the exit codes. A failed worker stops the
        others and raises WorkerFailed, unless `check=False` (after `kill`)."""
        self._watch(
            lambda codes: None not in codes.values(), "every worker to end", timeout, check=check
        )
        self.stop()
        return self.returncodes

    def kill(self, worker: int) -> None:
        """Kill one worker at once with SIGKILL, as when a machine is lost; the others go on."""
        self._killed.add(self._worker(worker))
        signal_group(self.processes[worker].pid, signal.SIGKILL)
        self.processes[worker].wait()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop every worker: SIGTERM to each process group, SIGKILL `grace` seconds later."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        for process in self.processes.values():
            signal_group(process.pid, signal.SIGTERM)
        end = time.monotonic() + grace
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, end - time.monotonic()))
            # The whole group: a worker's children too.
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
        if self._guard is not None:
            self._guard.kill()
            self._guard.wait()
        self._final_logs = {i: self.log(i) for i in self.workers}


def run(script: str | os.PathLike, workers: int = 2, **kwargs) -> LocalCluster:
    """Start a `LocalCluster(script, workers, **kwargs)`, `wait()` for it, and return it (for its
    `.log()` and `.returncodes`)."""
    with LocalCluster(script, workers, **kwargs) as cluster:
        cluster.wait()
    return cluster


if __name__ == "__main__":
    guard(int(sys.argv[1]), [int(group) for group in sys.argv[2:]])
