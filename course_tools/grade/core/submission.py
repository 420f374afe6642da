"""Run one submitted notebook in the sandbox, then the solution's hidden probe in its kernel.

The probe (`grade.core.probe`, the solution's HIDDEN PROBE cell) collects facts about the objects
the notebook left in memory. It does not go through the notebook's cells: each of its two steps is
a user expression of an empty execute request (`RunOptions.extra_expressions`), which IPython
evaluates without its input or AST transformers. The first step resets those transformers
(`RESET`), the second checks that they stayed reset and that the shell's methods that run code are
IPython's own, then loads `grade.core.probe` afresh from the read-only course and runs the probe
(`PROBE`). Its answer is JSON, read by `read_facts`; anything unreadable is the submission's error.

What a kernel-side fact can prove: what an honest run of this notebook left in memory (which
models are mirrored over how many devices, which weights they hold, what the input pipelines
yield). What it cannot: anything against a notebook that takes over its own kernel (patches
IPython's or ipykernel's methods, TensorFlow or Python itself), which can answer with made-up
facts. The checks therefore give points only for what the grader observes itself (the saved
files, evaluated in the check process; its own clock; the notebook's code, read as code) and use
kernel facts only to corroborate, never to give a point alone; a tampered shell found by `PROBE`,
or code that binds a name the expressions use (`exec`, `compile`, ...: they are looked up in the
notebook's namespace), fails every check that rests on facts.

Example:

    from course_tools.grade.core import submission
    setup = submission.RunSetup(Limits(), probe_source=parts.probe)
    outcome, facts, why_none = submission.run(notebook, Path("/tmp/work/alice"), env, setup)
"""

from __future__ import annotations

import ast
import json
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from course_tools.grade.core import probe
from course_tools.grade.jail import limits as jail_limits
from course_tools.grade.jail import sandbox
from course_tools.grade.jail import workdir as jail_workdir
from course_tools.runner import Limits, RunOptions, RunOutcome, run_notebook

#: The largest probe answer read, in characters (the course's facts take a few KB).
MAX_FACTS_CHARS = 2**20

#: Step 1: IPython's input and AST transformers back to a fresh shell's; the manager installed is
#: remembered under a random name (`{key}_manager`) so that step 2 can tell it was not replaced.
RESET = """
import IPython.core.inputtransformer2 as _it2
_shell = get_ipython()
_shell.input_transformers_post = []
_shell.ast_transformers = []
_shell.input_transformer_manager = _it2.TransformerManager()
globals()[{key!r} + "_manager"] = _shell.input_transformer_manager
globals()[{key!r}] = "reset"
"""

#: Step 2: the checks on step 1's reset, then the probe from the course's own file; the answer is
#: left as JSON under `{key}`.
PROBE = """
import importlib.util as _util, json as _json, sys as _sys
_shell = get_ipython()
def _own(name):
    function = getattr(getattr(_shell, name, None), "__func__", None)
    where = getattr(getattr(function, "__code__", None), "co_filename", "")
    return name not in vars(_shell) and ("/IPython/" in where or "/ipykernel/" in where)
_tampered = [name for name in ("run_cell", "run_cell_async", "transform_cell", "user_expressions",
             "run_ast_nodes", "run_code", "should_run_async") if not _own(name)]
if _shell.input_transformers_post or _shell.ast_transformers:
    _tampered.append("transformers")
if _shell.input_transformer_manager is not globals().pop({key!r} + "_manager", None):
    _tampered.append("input_transformer_manager")
_spec = _util.spec_from_file_location("course_tools.grade.core.probe", {path!r})
_probe = _util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)
_sys.modules["course_tools.grade.core.probe"] = _probe
import course_tools.grade.core as _core
_core.probe = _probe  # what `from course_tools.grade.core import probe` finds first
{source}
FACTS["tampered"] = _tampered
globals()[{key!r}] = _json.dumps(FACTS)
"""


def expression(code: str, key: str) -> str:
    """A user expression that runs `code` in the notebook's namespace and gives back what it left
    under `key` (removed)."""
    return f"exec(compile({code!r}, '<grader probe>', 'exec'), globals()) or globals().pop({key!r})"


def read_facts(outcome: RunOutcome) -> tuple[dict, str]:
    """The facts in the probe's answer, and why there are none ("" when there are). Whatever the
    answer holds (made up by the notebook, malformed, huge, deeply nested), this never raises."""
    if outcome.extra_error:
        return {}, outcome.extra_error
    text = outcome.extra_output
    if not text:
        return {}, "the probe gave no answer"
    if len(text) > MAX_FACTS_CHARS:
        return {}, f"unreadable facts: {len(text):,} characters"
    try:
        value = json.loads(ast.literal_eval(text))
        if not isinstance(value, dict):
            raise TypeError(f"a JSON {type(value).__name__}, not an object")
    except Exception as exc:  # noqa: BLE001 - whatever the notebook made of it
        return {}, f"unreadable facts: {type(exc).__name__}: {str(exc)[:200]}"
    return value, ""


@dataclass(frozen=True)
class RunSetup:
    """How `run` runs one submission.

    limits: what the notebook may use (`Limits`; its work folder capped at `limits.disk_mb`).
    probe_source: the solution's HIDDEN PROBE cell ("" for none).
    log_path: where the kernel process's own output goes (capped).
    sandboxed: the kernel runs in the sandbox, where only the work folder is writable.
    hidden: folders and files that must stay out of the sandbox's sight.
    clock_folder: a folder whose files the grader times itself (`RunOutcome.file_times`).
    """

    limits: Limits = Limits()
    probe_source: str = ""
    log_path: Path | None = None
    sandboxed: bool = True
    hidden: tuple[Path, ...] = ()
    clock_folder: Path | None = None


def run(
    notebook,
    workdir: Path,
    env: dict[str, str],
    setup: RunSetup = RunSetup(),
    *,
    cancel: threading.Event | None = None,
) -> tuple[RunOutcome, dict, str]:
    """Execute `notebook` in a fresh kernel in `workdir` (errors allowed), then the probe there,
    as `setup` says; its connection file and sockets go in `workdir/.kernel`. cancel: once set,
    the kernel is killed.

    Returns the run's outcome, the facts the probe found and why it found none ("" if it did).
    """
    workdir = Path(workdir).resolve()
    connection = workdir / ".kernel"
    connection.mkdir(parents=True, exist_ok=True)
    kernel_wrap = None
    group = None
    if setup.sandboxed:
        env = sandbox.kernel_env(env, home=workdir)
        group = jail_limits.cgroup(setup.limits.memory_mb)

        def kernel_wrap(argv: list[str]) -> list[str]:
            return sandbox.wrap(
                argv,
                writable=[workdir],
                hidden=setup.hidden,
                cwd=workdir,
                cgroup=group,
            )

    expressions: tuple[str, ...] = ()
    if setup.probe_source:
        key = f"_grader_{secrets.token_hex(8)}"
        path = str(Path(probe.__file__).resolve())
        expressions = (
            expression(RESET.format(key=key), key),
            expression(PROBE.format(key=key, path=path, source=setup.probe_source), key),
        )
    options = RunOptions(
        limits=setup.limits,
        connection_dir=connection,
        wrap=kernel_wrap,
        extra_expressions=expressions,
        log_path=setup.log_path,
        # a capped work folder (`jail.workdir`) needs no sampled watch
        watch_folder=None if jail_workdir.is_capped(workdir) else workdir,
        clock_folder=setup.clock_folder,
    )
    try:
        outcome = run_notebook(notebook, workdir, env, options, cancel=cancel)
        if group is not None:
            jail_limits.explain(group, setup.limits.memory_mb, outcome)
    finally:
        if group is not None:
            group.remove()
    facts, probe_error = read_facts(outcome) if setup.probe_source else ({}, "")
    return outcome, facts, probe_error
