"""The check process: runs the solution's hidden tests on a submission's files, never its code.

One long-lived check process per batch, this module started by `LAUNCH` (TensorFlow loads once),
sandboxed like the kernels. It reads one job per stdin line (JSON: the artifacts folder, the probe's
facts, the tests' sources) and answers one JSON line per job: for each test, passed or not and why.
Everything else the tests or TensorFlow print goes to stderr (the check log), not into the answers.
`CheckProcess` restarts it when it crashes, takes too long or uses too much memory.

Example:

    checks = CheckProcess(env, cwd=out, log_path=out / "checks.log")
    checks.start()  # TensorFlow loads while the first notebook runs
    verdicts = checks.run(Path("grades/alice/artifacts"), facts, parts.tests, timeout=300)
    # [(True, ''), (False, 'the fit model was not saved: ...')]
    checks.stop()
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from course_tools.exercise import HiddenTest
from course_tools.grade.core import checks, probe, reading
from course_tools.grade.core.checks import MESSAGE_CHARS, cap_message, clear_cache
from course_tools.processes import Watchdog, kill_tree, process_tree, resident_mb
from course_tools.runner import CappedLog

if TYPE_CHECKING:
    from course_tools.grade.jail.cgroups import Cgroup

#: The most of a check process's own output kept in the batch's check log, in bytes.
LOG_BYTES = 8 * 2**20
#: (passed, message) for one hidden test.
CheckVerdict = tuple[bool, str]

#: The longest answer line the grader reads from the check process: every message is cut to
#: `MESSAGE_CHARS` there, so this is room for a hundred tests' messages, escaped for JSON.
ANSWER_CHARS = 100 * 6 * (MESSAGE_CHARS + 100)
#: What `CheckProcess._read` queues for a longer line (then it reads no more: the process is
#: restarted).
TOO_LONG = "too long"
#: The check process's first line, once it has imported the course and TensorFlow and before it
#: reads a job: a process that ends before it could not start, whatever the submission.
READY = '"ready"'


class CheckStartError(RuntimeError):
    """The check process ended before it was ready (the grader's failure, never a submission's:
    it had read no job yet); the message ends with the last line of its log."""


def _facts(job: dict) -> dict:
    """The probe's facts, marked tampered with when the notebook's code (read here, never run)
    reaches IPython's shell, where the probe's answer could be rewritten (`reading.SHELL_NAMES`,
    `reading.SHELL_MAGICS`), assigns an attribute of a module the probe relies on
    (`json.dumps = f`: `Code.module_patches`), or runs code it cannot read (`exec(SRC)`:
    `Code.unread_code`), or when the probe found the grader's hook (`fresh`, installed before
    the first cell) gone (`start_hook`)."""
    facts = job["facts"] if isinstance(job.get("facts"), dict) else {}
    try:
        code = reading.Code.of(job.get("observed"))
        found = []
        for name in code.shell_reached():
            why = reading.MAGIC_WHY.get(name.removeprefix("%"))
            found.append(f"`{name}` {why}" if why else f"reaches IPython's shell: `{name}`")
        found += [
            f"changes a library the grader relies on ({where}): a library's own functions "
            "could answer for the notebook; remove that assignment (a shim such as "
            "`np.float = float` belongs in your own code: write `float`), and the checks that "
            "use the kernel's memory count again"
            for where in code.module_patches()
        ]
        found += [
            f"runs code the grader cannot read as code ({where}): put that code in a cell "
            "(and keep data in a format that holds no code: JSON, .npy, a Keras file)"
            for where in code.unread_code()
        ]
        hook = facts.get("start_hook")
        if hook:  # installed before the first cell (`fresh`): gone, the notebook removed it
            found.append(
                f"removed the grader's record of each model's first optimizer step ({hook}): "
                "leave Keras's and TensorFlow's classes and the builtins as they are"
            )

    except Exception as exc:  # noqa: BLE001 - whatever the code is, the checks still run
        found = [f"unreadable code ({type(exc).__name__})"]
    if found:
        tampered = facts.get("tampered")
        tampered = tampered if isinstance(tampered, list) else [tampered] if tampered else []
        facts = {**facts, "tampered": [*tampered, *found]}
    return facts


#: The largest file of the grader's copies of each start read (`probe.START_FILE`: the graded
#: models' records only), in MB: the solution's three models take about 8 MB. Removed from the
#: grades once the check process has read it (`one_submission._check`).
START_FILE_MB = 64
#: The training examples each start is measured on, loaded once per check process (`measured`).
_examples: list = []


def measured(facts: dict, artifacts: Path) -> dict:
    """`facts` with each model's starts measured here, in the check process, never in the kernel
    (`checks.measure_starts`): on `probe.START_EXAMPLES` training examples this process draws at
    random (`_start_examples`) with the grader's own settings (the batch's data: nothing the
    notebook set reaches them), with a copy of the model's saved file (the one `checks.own_model`
    ties to the kernel's model by its fingerprint) given the grader's copies of its weights, which
    the probe wrote to `probe.START_FILE` (read only when its SHA-256 is the one in the facts).
    Scores a kernel sent (`starts`) are dropped: only these count. A start that cannot be measured
    is a `start_error` (the check fails the model's points)."""
    models = facts.get("models")
    if not isinstance(models, dict):
        return facts
    for fact in models.values():
        if isinstance(fact, dict):
            fact.pop("starts", None)
            fact.pop("later_optimizers", None)
    wanting = {  # a name is a Python identifier: the file read is `<name>.keras` in artifacts
        name: fact
        for name, fact in models.items()
        if isinstance(name, str)
        and name.isidentifier()
        and isinstance(fact, dict)
        and isinstance(fact.get("start_weights"), dict)
    }
    if not wanting:
        return facts
    try:
        if not isinstance(facts.get("start_records"), list):
            raise ValueError("the probe sent no record")
        arrays = _start_arrays(facts.get("start_file"), Path(artifacts))
        if not _examples:
            _examples.append(_start_examples())
    except Exception as exc:  # noqa: BLE001 - every model's start is then unmeasured
        why = f"the grader's copies of the starts cannot be read: {str(exc)[:300]}"
        for fact in wanting.values():
            fact["start_error"] = why
        return facts
    for name, fact in wanting.items():
        try:
            model = checks.load_model(Path(artifacts) / f"{name}.keras")
            if fact.get("fingerprint") != checks.fingerprint(model):
                raise ValueError(f"{name}.keras does not hold the weights of `{name}`")
            fact.update(checks.measure_starts(fact, facts, arrays, model, _examples[0]))
        except Exception as exc:  # noqa: BLE001 - the check says the start is unmeasured
            fact["start_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return facts


def _start_arrays(info, artifacts: Path) -> dict:
    """The arrays of `probe.START_FILE` in `artifacts`: a regular file reached without symbolic
    links, at most `START_FILE_MB`, whose SHA-256 is `info["sha256"]` (the probe's), read as
    NumPy arrays without pickle. ValueError saying why not."""
    import hashlib
    import io

    import numpy as np

    if not isinstance(info, dict) or not isinstance(info.get("sha256"), str):
        why = info.get("error") if isinstance(info, dict) else None
        raise ValueError(f"the probe did not write them ({why or 'no file named in its facts'})")
    path = artifacts / probe.START_FILE
    if os.path.realpath(path) != os.path.abspath(path) or not path.is_file():
        raise ValueError(f"{probe.START_FILE} is missing or not a regular file")
    if path.stat().st_size > START_FILE_MB * 2**20:
        raise ValueError(f"{probe.START_FILE} is larger than {START_FILE_MB} MB")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise ValueError(f"{probe.START_FILE} changed after the probe wrote it")
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _start_examples() -> tuple:
    """(images, labels): `probe.START_EXAMPLES` training examples no notebook can know, drawn here
    at random (a seed from the operating system) under the grader's settings: on the synthetic
    stand-in, new examples of its training distribution (`data.synthetic_arrays` with that seed);
    on the real data, examples at random among the first `probe.START_POOL` of the training split.
    A fixed set (the first 512, red team 33a) let a classmate's model be tuned to fail on just
    those examples and keep its skill elsewhere."""
    import secrets

    import numpy as np

    from course_utils import data, settings

    name, wanted = probe.START_DATASET, probe.START_EXAMPLES
    rng = np.random.default_rng(secrets.randbits(128))
    if not data.use_real_data(name, settings.read_settings().data):
        images, labels = data.synthetic_arrays(name, "train", wanted, seed=rng)
        return images.astype(np.float32) / 255.0, labels  # as `data.load` scales them
    chosen = np.sort(rng.choice(probe.START_POOL, size=wanted, replace=False))
    found_images, found_labels, seen = [], [], 0
    for images, labels in data.load(name, "train", limit=probe.START_POOL).batch(1024):
        here = chosen[(chosen >= seen) & (chosen < seen + len(labels))] - seen
        found_images.append(images.numpy()[here])
        found_labels.append(labels.numpy().reshape(-1)[here])
        seen += len(labels)
    return np.concatenate(found_images), np.concatenate(found_labels)


def _run_tests(job: dict, settings) -> list[dict]:
    namespace = {
        "__name__": "__hidden_tests__",
        "settings": settings,
        "ARTIFACTS": Path(job["artifacts"]),
        "FACTS": measured(_facts(job), Path(job["artifacts"])),
        # what the grader itself saw: the cells' code and times, the artifacts' times
        "OBSERVED": job.get("observed") or {},
    }
    results = []
    for index, test in enumerate(job["tests"]):
        try:
            code = compile(test["source"], f"<hidden test {index}: {test['title']}>", "exec")
            exec(code, namespace)
            results.append({"passed": True, "message": ""})
        except AssertionError as exc:
            message = cap_message(str(exc) or "an assertion failed")
            results.append({"passed": False, "message": message})
        except Exception as exc:
            message = cap_message(f"{type(exc).__name__}: {exc}", 500)
            results.append({"passed": False, "message": message})
    return results


#: The share of its memory limit a check process may still hold after a job before it is
#: replaced by a fresh one for the next submission: a model that could not be loaded once left
#: 3.3 GB of a 4,096 MB limit behind, and the next submission's checks failed for it (red team
#: 35b). TensorFlow and the solution's models take a few hundred MB.
RECYCLE_SHARE = 0.5

#: A job that failed in a process that had read other submissions' files runs once more in a
#: fresh one only when more than this share of its time limit is left (`CheckProcess.run`).
RETRY_LEFT_SHARE = 0.1

#: Seconds before a job's time limit at which the check process writes every thread's stack to
#: its log (`faulthandler`): the grader stops it at the limit, and the log then says where it was.
DUMP_BEFORE_S = 5


def main() -> None:
    """The check process: one JSON job per stdin line, one JSON result per stdout line."""
    results_out = os.fdopen(os.dup(1), "w", buffering=1)
    # Anything else printed here (TensorFlow, the tests) goes to stderr, not to the results.
    os.dup2(2, 1)
    import course_utils

    settings = course_utils.setup(verbose=False)
    import keras

    # Keras's global settings as they start: a saved model can change them (an activation named
    # `keras.config.set_epsilon` loads in safe mode, red team 37a); put back after each job
    settings_at_start = {
        keras.config.set_epsilon: keras.config.epsilon(),
        keras.config.set_floatx: keras.config.floatx(),
        keras.config.set_image_data_format: keras.config.image_data_format(),
    }
    results_out.write(READY + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        clear_cache()
        if job.get(
            "deadline"
        ):  # where a job the grader will stop was: every thread's stack, logged
            left = job["deadline"] - time.time()  # the grader's clock: its timeout counts start-up
            faulthandler.dump_traceback_later(max(1.0, left - DUMP_BEFORE_S))
        try:
            results = _run_tests(job, settings)
        finally:
            faulthandler.cancel_dump_traceback_later()
        keras.backend.clear_session()
        for setter, value in settings_at_start.items():
            setter(value)
        results_out.write(json.dumps(results) + "\n")


def launch(module: str) -> str:
    """`python -c` code that runs `module` as `python -m` would, without the working folder on
    sys.path: `-m` and `-c` put it first, where a file or folder named like a module (a student's
    `jax`, `nbformat` or `course_tools` when `course grade` is run from a submission's folder)
    would be imported in its place, outside the sandbox (`-P` needs Python 3.11). `sys` is
    built in. Every Python process of the grader starts so (`child_argv`)."""
    return (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; import runpy; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )


#: How the check process starts (`launch`).
LAUNCH = launch("course_tools.grade.core.checker")


def child_argv(module: str, *args: str) -> list[str]:
    """The command line that runs `module` with `args` as `python -m` would (`launch`)."""
    return [sys.executable, "-c", launch(module), *args]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) for a Python process of the grader: PYTHONPATH and PATH
    keep only their absolute entries. Python reads an empty entry (`PYTHONPATH=$PYTHONPATH:/x`
    with PYTHONPATH unset gives one) as the working folder, and a relative one from it, both
    beyond what `launch` drops: run from a submission's folder, its files would be imported."""
    env = dict(os.environ if env is None else env)
    for name in ("PYTHONPATH", "PATH"):  # PATH: see `absolute_path`
        if name in env:
            kept = [p for p in env[name].split(os.pathsep) if os.path.isabs(p)]
            if kept:
                env[name] = os.pathsep.join(kept)
            else:
                del env[name]
    return env


def absolute_path() -> None:
    """Drop PATH's empty and relative entries from this process's environment: the grader runs
    programs by name (bwrap, mount, chown, prlimit, setpriv, sbatch, squeue...), and a `.` or an
    empty entry would find them in the folder `course grade` is run from, a submission's own at
    times. Called first by `course grade`; its children inherit it (`child_env` drops them too)."""
    cleaned = child_env({"PATH": os.environ.get("PATH", "")}).get("PATH")
    if cleaned is None:
        os.environ.pop("PATH", None)
    else:
        os.environ["PATH"] = cleaned


class CheckProcess:
    """A long-lived check process running hidden tests for one submission at a time.

    Started through `wrap` (the sandbox) when given; killed and restarted when it crashes, takes
    too long or uses more than `memory_mb`. `cgroup`: the control group `wrap` starts it in (its
    memory then capped by the kernel too), removed by `close`. `cwd`: the grades folder (its log
    is named from there); `run_in`: the process's working folder (default `cwd`), never on its
    sys.path (`LAUNCH`); `plan.start_checks` gives an empty one.
    """

    # PLR0913: the process's environment, folder, log and limits, and how the sandbox starts it
    def __init__(  # noqa: PLR0913
        self,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        memory_mb: float = 4096,
        wrap: Callable[[list[str]], list[str]] | None = None,
        *,
        cgroup: Cgroup | None = None,
        run_in: Path | None = None,
    ) -> None:
        self.env, self.cwd, self.log_path = env, cwd, log_path
        self.run_in = run_in or cwd
        self.memory_mb, self.wrap, self.cgroup = memory_mb, wrap, cgroup
        self.process: subprocess.Popen | None = None
        self.ready = False  # the current process has said `READY` (or answered)
        self.lines: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.closed = False
        self.jobs = 0  # jobs the current process has been given

    def _start(self) -> None:
        self.jobs = 0
        argv = [sys.executable, "-c", LAUNCH]
        self.process = subprocess.Popen(
            self.wrap(argv) if self.wrap else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.run_in,
            start_new_session=True,
        )
        # what it prints besides its answers (TensorFlow, Keras's warnings, which repeat names a
        # model file chose): at most LOG_BYTES a process, the rest counted and dropped
        self.log = CappedLog(self.process.stderr, self.log_path, LOG_BYTES, append=True)
        self.log.start()
        self.lines = queue.Queue()
        self.ready = False
        threading.Thread(target=self._read, args=(self.process, self.lines), daemon=True).start()

    @staticmethod
    def _read(process: subprocess.Popen, lines: queue.Queue) -> None:
        """Queue each answer line, at most `ANSWER_CHARS` of it: a longer one is queued as
        `TOO_LONG`, and nothing after it."""
        while line := process.stdout.readline(ANSWER_CHARS + 1):
            if len(line) > ANSWER_CHARS:
                lines.put(TOO_LONG)
                return
            lines.put(line)
        # end of output: the process exited
        lines.put(None)

    def start(self) -> None:
        """Start the process now (so TensorFlow loads while the first submission runs)."""
        with self.lock:
            if self.process is None:
                self._start()

    def _held_mb(self) -> float:
        """The resident memory the process's tree holds now, in MB (0 when it is gone)."""
        return resident_mb(process_tree(self.process.pid)) if self.process else 0.0

    def _ask(self, job: dict, timeout: float) -> tuple[str | None, str]:
        """Send one job; (its answer line or None, why there is none)."""
        self.jobs += 1
        dog = Watchdog(self.process.pid, self.memory_mb, timeout, what="the check process")
        self.ooms = self.cgroup.oom_kills() if self.cgroup is not None else 0
        try:
            with dog:
                self.process.stdin.write(json.dumps(job) + "\n")
                self.process.stdin.flush()
                line = self.lines.get(timeout=timeout + 5)
                if line is not None and line.strip() == READY:
                    self.ready = True
                    line = self.lines.get(timeout=timeout + 5)
                self.ready = self.ready or line is not None
        except queue.Empty:
            line, why = None, f"the grader's tests took longer than {timeout:.0f} s on these files"
        except (BrokenPipeError, OSError):
            line, why = None, "the grader's check process stopped"
        else:
            why = "the grader's check process crashed while reading these files"
        if line == TOO_LONG:
            line = None
            why = f"the grader's check process answered more than {ANSWER_CHARS:,} characters"
        if line is None and dog.reason:
            why = f"{dog.reason} while reading these files"
        elif line is None and self.cgroup is not None and self.cgroup.oom_kills() > self.ooms:
            why = f"the check process used more than {self.memory_mb:g} MB reading these files"
        return line, why

    def run(
        self,
        artifacts: Path,
        facts: dict,
        tests: list[HiddenTest],
        timeout: float,
        observed: dict | None = None,
    ) -> list[CheckVerdict]:
        """(passed, message) for each test; all failed with the reason when the process fails.
        observed: what the grader saw itself (`OBSERVED` in the tests)."""
        with self.lock:
            if self.closed:
                return [(False, "not checked: grading stopped")] * len(tests)
            if self.process is None or self.process.poll() is not None:
                self._start()
            job = {
                "artifacts": str(artifacts),
                "deadline": time.time() + timeout,  # the stack is logged before it (`main`)
                "facts": facts,
                "observed": observed or {},
                "tests": [{"title": t.title, "source": t.source} for t in tests],
            }
            started = time.monotonic()
            line, why = self._ask(job, timeout)
            left = timeout - (time.monotonic() - started)  # one budget for both runs
            if (
                line is None
                and self.ready
                and self.jobs > 1
                and left > timeout * RETRY_LEFT_SHARE
                and not self.closed
            ):
                # a process that had read other submissions' files may have failed for them (the
                # memory a model it could not load left behind, an outside kill): these files get
                # a fresh process before their checks fail (red team 35b), within what the first
                # run left of their time (after a time limit, none), so that one submission never
                # holds the batch's one process past its limit (red team 36a)
                self.stop()  # its output copied first: the line below comes after its stack
                self._log_line(f"course grade: no answer for {artifacts}: {why}; once more, fresh")
                self._start()
                job["deadline"] = time.time() + left
                line, why = self._ask(job, left)
                if line is not None:
                    self._log_line(f"course grade: {artifacts}: the fresh process answered")
            if line is None:
                ready = self.ready
                self.stop()
                log = (
                    self.log_path.relative_to(self.cwd)
                    if self.log_path.is_relative_to(self.cwd)
                    else self.log_path
                )
                if not ready:  # it never read these files: the grader's failure, not theirs
                    raise CheckStartError(
                        f"the grader's check process could not start ({self._last_logged()}; "
                        f"details: {log})"
                    )
                self._log_line(f"course grade: no answer for {artifacts}: {why}")
                return [(False, f"{why} (details: {log})")] * len(tests)
            if self._held_mb() > self.memory_mb * RECYCLE_SHARE:  # what a job left: not the next's
                self.stop()
            return [(r["passed"], r["message"]) for r in json.loads(line)]

    def _log_line(self, text: str) -> None:
        """Append `text` to the check log (after `stop`: its copy of the process's output has
        ended), so that the log says which submission's checks failed and why, under the stack
        the process wrote before it was stopped (`DUMP_BEFORE_S`)."""
        with contextlib.suppress(OSError), open(self.log_path, "a", encoding="utf-8") as log:
            log.write(text + "\n")

    def _last_logged(self) -> str:
        """The last line of the check log (why a process could not start), at most 300
        characters."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
                lines = log.read().decode("utf-8", "replace").strip().splitlines()
        except OSError as exc:
            return f"its log cannot be read: {exc.strerror}"
        return lines[-1][:300] if lines else "it printed nothing"

    def stop(self) -> None:
        """Kill the process (`run` starts a new one)."""
        process, self.process = self.process, None
        if process is not None:
            kill_tree(process.pid)
            process.wait()
            self.log.join(timeout=10)  # its pipe ends with the process: the log is complete

    def close(self) -> None:
        """Kill the process now, even during a job (its `run` returns failed verdicts), and start
        no other one."""
        self.closed = True
        self.stop()
        if self.cgroup is not None:
            self.cgroup.remove()


if __name__ == "__main__":
    main()
