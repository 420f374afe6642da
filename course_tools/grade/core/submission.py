"""Run one submitted notebook in the sandbox, then the solution's hidden probe in its kernel.

The probe (`grade.core.probe`, the solution's HIDDEN PROBE cell) collects facts about the objects
the notebook left in memory. It does not go through the notebook's cells: each of its two steps is
a user expression of an empty execute request (`RunOptions.extra_expressions`), which IPython
evaluates without its input or AST transformers, in the notebook's namespace. The expression looks
up no name there (`expression`): it reaches the interpreter's builtins from a literal and runs the
step in a namespace of its own, so a notebook that binds `exec`, `compile`, `globals`,
`isinstance` or `__builtins__` changes nothing the probe calls. The first step resets IPython's
input and AST transformers and the display formatter that turns the answer into text (`RESET`),
the second checks that they stayed reset and that the shell's methods that run code are
IPython's own, then loads `grade.core.probe` afresh from the read-only course and runs the probe
(`PROBE`); before it answers, it checks that every step showing its answer as text is IPython's
own, and refuses (`REFUSED`, an error no formatter writes) when one is not. Its answer is a str's
repr of the facts' repr, written by the builtin types' own C code (`probe.answer`), read by
`read_facts`; anything unreadable is the submission's error.

What a kernel-side fact can prove: what an honest run of this notebook left in memory (which
models are mirrored over how many devices, which weights they hold, what the input pipelines
yield). What it cannot: anything against a notebook that takes over its own kernel (patches
IPython's or ipykernel's methods, TensorFlow or Python itself), which can answer with made-up
facts. The checks therefore give points only for what the grader observes itself (the saved
files, evaluated in the check process; its own clock; the notebook's code, read as code) and use
kernel facts only to corroborate, never to give a point alone; a tampered shell found by `PROBE`,
code that reaches IPython's shell (`reading.SHELL_NAMES`) or changes a library the probe relies
on (`reading.Code.module_patches`) fails every check that rests on facts.

Example:

    from course_tools.grade.core import submission
    setup = submission.RunSetup(Limits(), probe_source=parts.probe)
    outcome, facts, why_none = submission.run(notebook, Path("/tmp/work/alice"), env, setup)
"""

from __future__ import annotations

import ast
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from course_tools.grade.core import fresh, probe
from course_tools.grade.jail import limits as jail_limits
from course_tools.grade.jail import sandbox
from course_tools.grade.jail import workdir as jail_workdir
from course_tools.runner import Limits, RunOptions, RunOutcome, run_notebook

#: The largest probe answer read, in characters (the course's facts take a few KB).
MAX_FACTS_CHARS = 2**20
#: The most brackets and commas in the facts parsed (`ast.literal_eval` builds a syntax tree of
#: them: about 1.5 KB a value).
MAX_FACTS_VALUES = probe.MAX_VALUES
#: The probe's answer as IPython shows a `str`: one quoted literal, as `repr` writes it (no
#: prefix, no raw line break, no second literal after it). Checked before `ast.literal_eval`,
#: which builds a syntax tree of whatever literal it is given (a list of 300,000 dicts: 500 MB).
_STRING_LITERAL = re.compile(
    r"'[^'\\\n]*(?:\\.[^'\\\n]*)*'" + "|" + r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"', re.DOTALL
)

#: Step 1: IPython's input and AST transformers, and the display formatter that turns the
#: answer into text (where `for_type(str, ...)` would rewrite it), back to a fresh shell's; those
#: installed are remembered under random names (`{key}_manager`, `{key}_formatter`) so that step
#: 2 can tell they were not replaced.
RESET = """
import IPython.core.inputtransformer2 as _it2
from IPython.core.formatters import DisplayFormatter as _DisplayFormatter
from IPython.core.getipython import get_ipython as _get_ipython
_shell = _get_ipython()
_shell.input_transformers_post = []
_shell.ast_transformers = []
_shell.input_transformer_manager = _it2.TransformerManager()
_shell.display_formatter = _DisplayFormatter(parent=_shell)
globals()[{key!r} + "_manager"] = _shell.input_transformer_manager
globals()[{key!r} + "_formatter"] = _shell.display_formatter
{key} = "reset"
"""

#: The error the probe raises when the way its answer is shown was changed (its text would be
#: the notebook's, not the probe's): its message says what, and the facts are untrusted.
REFUSED = "GraderProbeRefused"

#: Step 2: the checks on step 1's reset, then the probe: the text of the course's own file, read
#: by the grader and compiled by the interpreter's own `compile` (no file loader of the kernel's,
#: whose `_io.open_code` a notebook can replace, reads it); the answer is
#: left under `{key}` as the repr of builtin values (`probe.answer`: nothing the notebook can
#: replace writes it, unlike `json.dumps`), after a check of every step that turns it into text
#: (the display formatter and its formatters' classes and printers, IPython's pretty printer,
#: the shell's methods that format a user expression's value): one not IPython's own raises
#: `REFUSED` instead, as an error, whose text no formatter makes.
PROBE = """
import inspect as _inspect, sys as _sys
import traitlets as _traitlets
from IPython.core.getipython import get_ipython as _get_ipython
from IPython.lib import pretty as _pretty
_shell = _get_ipython()
def _ipython_code(function):
    where = getattr(getattr(function, "__code__", None), "co_filename", "")
    if where.endswith("/contextlib.py"):  # IPython's own @contextmanager methods
        return _ipython_code(getattr(function, "__wrapped__", None))
    return "/IPython/" in where or "/ipykernel/" in where
def _own(name):
    function = getattr(getattr(_shell, name, None), "__func__", None)
    return name not in vars(_shell) and _ipython_code(function)
def _own_class(cls):
    if not cls.__module__.startswith(("IPython.", "ipykernel.")):
        return False
    for klass in cls.__mro__:
        if not klass.__module__.startswith(("IPython.", "ipykernel.")):
            continue
        for value in vars(klass).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if _inspect.isfunction(value) and not _ipython_code(value):
                return False
            if _inspect.isfunction(value) or isinstance(value, (type, _traitlets.BaseDescriptor)):
                continue
            if callable(value):
                return False
    return True
def _own_object(value, methods=("__call__", "format", "lookup", "lookup_by_type", "_check_return")):
    return _own_class(type(value)) and not set(methods) & set(vars(value))
_tampered = [name for name in ("run_cell", "run_cell_async", "transform_cell", "user_expressions",
             "run_ast_nodes", "run_code", "should_run_async") if not _own(name)]
import gc as _gc, threading as _threading
if any(hook() is not None for hook in (_sys.getprofile, _sys.gettrace, _threading.getprofile,
                                       _threading.gettrace)):
    _tampered.append("a profile or trace hook, which sees every call the probe makes")
if _gc.callbacks:
    _tampered.append("a garbage collector callback, which runs during the probe")
_display = _shell.display_formatter
_shown = [name for name in ("_format_user_obj", "_user_obj_error") if not _own(name)]
if _display is not globals().pop({key!r} + "_formatter", None) or not _own_object(_display):
    _shown.append("display_formatter")
_formatters = {{"ipython_display": _display.ipython_display_formatter,
               "mimebundle": _display.mimebundle_formatter, **_display.formatters}}
def _printers(types, deferred, singletons):
    # those a str could be shown by: for its type or a base, by name, or by its id
    found = [types.get(str), types.get(object), *singletons.values()]
    return [p for p in found + [deferred.get(("builtins", n)) for n in ("str", "object")] if p]
for _mime, _formatter in _formatters.items():
    _found = _printers(_formatter.type_printers, _formatter.deferred_printers,
                       getattr(_formatter, "singleton_printers", {{}}))
    if not _own_object(_formatter) or not all(map(_ipython_code, _found)):
        _shown.append(f"the {{_mime}} formatter")
_found = _printers(
    _pretty._type_pprinters, _pretty._deferred_type_pprinters, _pretty._singleton_pprinters
)
if not all(map(_ipython_code, _found)):
    _shown.append("IPython's default printers")
if not all(map(_own_class, (_pretty.RepresentationPrinter, type(_shell.displayhook)))):
    _shown.append("IPython's pretty printer or displayhook")
if _shell.input_transformers_post or _shell.ast_transformers:
    _tampered.append("transformers")
if _shell.input_transformer_manager is not globals().pop({key!r} + "_manager", None):
    _tampered.append("input_transformer_manager")
_probe = type(len.__self__)("course_tools.grade.core.probe")  # builtins' ModuleType
_probe.__file__ = {path!r}
exec(compile({code!r}, {path!r}, "exec"), _probe.__dict__)
{source}
FACTS["tampered"] = _tampered
_answer = _probe.answer(FACTS)
if _shell._format_user_obj(_answer).get("data") != {{"text/plain": "".__class__.__repr__(_answer)}}:
    _shown.append("the text/plain form of a str")
if _shown:
    class GraderProbeRefused(Exception):
        pass
    _shown = ", ".join(_shown)
    raise GraderProbeRefused(f"the notebook changed how its kernel shows values ({{_shown}})")
{key} = _answer
"""


#: The interpreter's builtins, reached from a literal without looking up a name, with the import
#: machinery the probe's imports go through: the namespace of importlib's bootstrap module
#: ("I", found through its `BuiltinImporter`), the builtins it was run with ("B") and the
#: bootstrap's external half ("E": file loaders). A user expression is evaluated in the
#: notebook's namespace, where `exec`, `compile`, `globals` or `__builtins__` itself can be bound
#: to anything, in ways no reading of the code could list. The path itself is made of objects a
#: notebook can change (the namespace, the class's name): what it gives is checked against
#: `ANCHOR` before it is used (`expression`).
NAMESPACES = (
    "(lambda g: {'B': g.get('__builtins__'), 'I': g, 'E': (g.get('_bootstrap_external') or "
    "''.__class__).__dict__})("
    "(c for c in ''.__class__.__base__.__subclasses__() if c.__name__ == 'BuiltinImporter')"
    ".__next__().find_spec.__func__.__globals__)"
)
#: The attributes of `sys` that the kernel itself sets as it runs cells (the last error, the
#: streams and hooks IPython installs, prompts, the argument list): not compared.
VOLATILE = frozenset(
    {"last_type", "last_value", "last_traceback", "last_exc", "ps1", "ps2", "ps3", "stdin",
     "stdout", "stderr", "displayhook", "excepthook", "argv", "tracebacklimit", "_git"}
)  # fmt: skip
#: The modules the probe computes its facts with that the kernel has loaded when it starts: their
#: attributes are compared too (`hashlib.sha256`, which every checksum calls, replaced through a
#: function's parameter, bought the reshuffling point).
PROBE_MODULES = frozenset(
    {"hashlib", "_hashlib", "_sha256", "_sha2", "abc", "inspect", "math", "functools", "typing"}
)
#: `object.__repr__`, which writes an object's address ("<dict object at 0x7f...>"): two objects
#: alive at once never share one.
REPR = "''.__class__.__base__.__repr__"


def _let(*bindings: tuple[str, str], body: str) -> str:
    """`body` with each (name, value) bound in turn, as one expression (a lambda a binding)."""
    for name, value in reversed(bindings):
        body = f"(lambda {name}: {body})({value})"
    return body


#: What the probe's steps compare, as one expression of `spaces` (`NAMESPACES`), `R` (`REPR`) and
#: `T` (`type`), giving {path: text}: for each namespace, its dict and each value, the value's
#: class; when the value is a class of Python code, each method of its own dict (a method
#: replaced through an object, `type(loader).get_code = ...`, keeps the class's address; its data,
#: such as a counter `importlib.invalidate_caches()` moves, is not compared); when the value is a
#: module the import machinery calls (`_io`, whose `open_code` reads every source file, `marshal`,
#: `posix`, `sys`...), each of its attributes but `VOLATILE`'s; for each function among them (or
#: inside a classmethod, staticmethod or property), its code, its defaults and what its closure's
#: cells hold. Every attribute is read through its class's own descriptor (`type.__dict__[...]`),
#: which no notebook can override, and nothing is called that a notebook defined. The object
#: addresses change when any of them is replaced.
WALK = _let(
    ("G", "lambda n: T.__dict__[n].__get__"),  # one of `type`'s own descriptors
    ("D", "G('__dict__')"),  # a class's own dict
    (
        "S",
        "{G('__name__')(c): c for c in G('__subclasses__')(G('__base__')(T))() "
        "if G('__flags__')(c) & 512 == 0 and G('__name__')(c) in "
        "('function', 'classmethod', 'staticmethod', 'property', 'cell', 'module')}",
    ),
    ("V", "lambda v, n: D(T(v))[n].__get__(v)"),  # v's attribute n, from its class's descriptor
    (
        "F",
        "lambda f: [] if T(f) is not S['function'] else [('code', R(V(f, '__code__'))), "
        "('defaults', R(V(f, '__defaults__'))), ('kwdefaults', R(V(f, '__kwdefaults__')))] + "
        "[('cell', D(S['cell'])['__repr__'](c)) for c in V(f, '__closure__') or ()]",
    ),
    (
        "P",
        "lambda v: F(V(v, '__func__')) if T(v) is S['classmethod'] or T(v) is "
        "S['staticmethod'] else [e for n in ('fget', 'fset', 'fdel') for e in F(V(v, n))] "
        "if T(v) is S['property'] else F(v)",
    ),
    (
        "N",
        "lambda p, v: [(p, R(v)), (p + ' class', R(T(v)))] + [(p + ' ' + n, t) for n, t in P(v)]",
    ),
    (
        "M",  # a method: what a class's own dict holds that the class's instances call
        "lambda w: [c for c in (S['function'], S['classmethod'], S['staticmethod'], "
        "S['property']) if c is T(w)]",
    ),
    ("O", "[d for d in spaces.values()]"),  # a module whose dict is a namespace: walked as one
    (
        "C",  # the entries walked inside a value: a class's methods, a module's attributes
        "lambda p, v: [e for a, w in D(v).items() if M(w) for e in N(p + '.' + a, w)] "
        "if [c for c in G('__mro__')(T(v)) if c is T] and G('__flags__')(v) & 512 else "
        "[e for a, w in V(v, '__dict__').items() if not (a in "
        f"{sorted(VOLATILE)!r} and V(v, '__dict__').get('__name__') == 'sys') "
        "for e in N(p + ':' + a, w)] "
        "if T(v) is S['module'] and not [d for d in O if d is V(v, '__dict__')] else []",
    ),
    (
        "L",  # sys.modules, each module as one path ("M name"), read at once (no thread between),
        # and the attributes of those the probe computes with (`PROBE_MODULES`)
        "(lambda y: (lambda ms: [('M ' + k, R(m)) for k, m in ms] + [e for k, m in ms "
        f"if k in {sorted(PROBE_MODULES)!r} and T(m) is S['module'] "
        "for a, w in V(m, '__dict__').items() for e in N('M ' + k + ':' + a, w)])"
        "([*V(y, '__dict__')['modules'].items()]) if T(y) is S['module'] else [])"
        "(spaces['I'].get('sys'))",
    ),
    body="{p: t for s, d in spaces.items() for p, t in [(s, R(d))] + [e for k, v in d.items() "
    "for e in N(s + ' ' + k, v) + C(s + ' ' + k, v)]} | {p: t for p, t in L}",
)
#: `type`, reached from a literal.
TYPE = "''.__class__.__class__"
#: The first expression, evaluated as the kernel starts, before any of the notebook's code runs
#: (`RunOptions.first_expression`): `WALK`, one "path<TAB>text" a line, which the probe's steps
#: compare with what they find.
ANCHOR = (
    f"(lambda spaces, R, T: ''.join([p + '\\t' + t + '\\n' for p, t in {WALK}.items()]))"
    f"({NAMESPACES}, {REPR}, {TYPE})"
)
#: The builtins the kernel itself swaps while it runs code (ipykernel forwards `input` and
#: `getpass` to the front end for each request): not compared.
SWAPPED = frozenset({"input", "raw_input", "getpass"})
#: An error of a class named `REFUSED`, raised from an expression (no `raise` there, no name to
#: look up): `type` and `BaseException` are found through `type`'s own descriptors, which no
#: class can override, among the interpreter's own (static) types.
_RAISE = (
    "(lambda T: (_ for _ in ()).throw(T('" + "GraderProbeRefused" + "', ([c for c in "
    "''.__class__.__base__.__subclasses__() if T.__dict__['__flags__'].__get__(c) & 512 == 0 "
    "and T.__dict__['__name__'].__get__(c) == 'BaseException'][0],), {{}})({message})))"
    "(''.__class__.__class__)"
)


def hook_expression() -> str:
    """An expression that installs the grader's record of each optimizer's first step
    (`fresh.install`): the course's own file, compiled by the interpreter's own `compile` and run
    in a namespace of its own, with the interpreter's builtins (`NAMESPACES`). Evaluated before
    the notebook's first cell and before `ANCHOR` (`first_expression`), so the anchor holds the
    builtin `__import__` the hook wraps: put back, the probe refuses to run."""
    path = str(Path(fresh.__file__).resolve())
    source = Path(path).read_text() + "\ninstall()\n"
    own = "{'__builtins__': b, '__name__': 'course_tools.grade.core.fresh'}"
    run = f"b['exec'](b['compile']({source!r}, {path!r}, 'exec'), {own})"
    return f"(lambda b: {run})({NAMESPACES}['B'])"


def first_expression() -> str:
    """The first expression of a run with the probe: the grader's hook (`hook_expression`),
    then `ANCHOR`, whose text it gives."""
    return f"[{hook_expression()}, {ANCHOR}][1]"


def read_anchor(text: str) -> dict[str, str]:
    r"""What `WALK` found before the first cell, {path: text}, from the text of `ANCHOR`'s answer
    (a str's repr), `SWAPPED` left out; ValueError for anything else.

    >>> read_anchor(repr("B\t<dict at 0x1>\nB input\t<x>\nI\t<dict at 0x2>\nE\t<dict at 0x3>\n"))
    {'B': '<dict at 0x1>', 'I': '<dict at 0x2>', 'E': '<dict at 0x3>'}
    """
    if len(text) > MAX_FACTS_CHARS or not _STRING_LITERAL.fullmatch(text):
        raise ValueError(f"not a string's repr: {text[:60]!r}")
    anchor = {}
    for line in ast.literal_eval(text).splitlines():
        path, found = line.split("\t", 1)
        space, _, rest = path.partition(" ")
        if not (space == "B" and rest.split(" ")[0].split(".")[0] in SWAPPED):
            anchor[path] = found
    if not {"B", "I", "E"} <= set(anchor):
        raise ValueError(f"namespaces {sorted(p for p in anchor if ' ' not in p)}, not B, I and E")
    return anchor


def expression(code: str, key: str, anchor: dict[str, str]) -> str:
    """A user expression that runs `code` and gives back what it left under `key`, without a
    name looked up in the notebook's namespace: the code runs in a namespace of its own, whose
    builtins are the interpreter's (`NAMESPACES`), and whose `globals()` is the notebook's
    namespace (as the probe cell finds it when it runs in the solution). Before it runs, `WALK`'s
    findings are checked against `anchor` (`read_anchor`): each the same as before the first
    cell, and no method added to a class since; else it raises `REFUSED`, naming the first ten
    paths that changed.

    >>> anchor = {s: f"<dict object at 0x{i}>" for i, s in enumerate("BIE")}
    >>> expression("x = 1", "x", anchor).startswith("(lambda spaces, n, R, T:")
    True
    """
    # a path not in the anchor counts inside a class's dict (a method added over an inherited
    # one); a name added to a namespace, or a module imported since, does not change what the
    # probe's code runs
    changed = (
        f"(lambda A: [p for p, a in A.items() if W.get(p) != a] + "
        "[p for p in W if p not in A and p[0] != 'M' and '.' in p.partition(' ')[2].split(' ')[0]])"
        f"({anchor!r})"
    )
    message = (
        "'the notebook changed Python\\'s builtins or imports (' + ', '.join("
        "[p.replace(' ', '.', 1) for p in C[:10]]) + (', ...' if C[10:] else '') + ')'"
    )
    run = f"b['exec'](b['compile']({code!r}, '<grader probe>', 'exec'), p) or p[{key!r}]"
    own = "{'__builtins__': b, '__name__': '__grader_probe__', 'globals': lambda: n}"
    body = f"(lambda b: (lambda p: {run})({own}))(spaces['B'])"
    refuse = _RAISE.format(message=message)
    return (
        f"(lambda spaces, n, R, T: (lambda W: (lambda C: {body} if not C else {refuse})"
        f"({changed}))({WALK}))({NAMESPACES}, (lambda: 0).__globals__, {REPR}, {TYPE})"
    )


def bind_probe(source: str) -> str:
    r"""The probe cell's `source` with its import of the probe module (`from
    course_tools.grade.core import probe`) replaced by the module the grader compiled (`_probe`):
    an import after the notebook's code would go through `sys.modules`, where the notebook may
    have put a module of its own.

    >>> bind_probe("from course_tools.grade.core import probe\nFACTS = probe.collect({})")
    'probe = _probe\nFACTS = probe.collect({})'
    """
    tree = ast.parse(source)
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == "course_tools.grade.core":
            names = [a.asname or a.name for a in node.names if a.name == "probe"]
            if names and len(node.names) == 1:
                tree.body[index] = ast.parse(f"{names[0]} = _probe").body[0]
    return ast.unparse(tree)


class _Floats(ast.NodeTransformer):
    """`nan` and `inf` (a float's repr) as the floats they are, for `ast.literal_eval`."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Constant(float(node.id)) if node.id in ("nan", "inf") else node


def _literal(text: str):
    """The builtin values `probe.answer` wrote (`nan` and `inf`, which a float's repr writes,
    included); ValueError past `MAX_FACTS_VALUES` brackets and commas, before parsing."""
    found = sum(text.count(c) for c in "{[(,")
    if found > MAX_FACTS_VALUES:
        raise ValueError(f"{found:,} brackets and commas, more than {MAX_FACTS_VALUES:,}")
    tree = _Floats().visit(ast.parse(text, mode="eval"))
    return ast.literal_eval(tree.body)


def read_facts(outcome: RunOutcome) -> tuple[dict, str]:
    """The facts in the probe's answer, and why there are none ("" when there are). Whatever the
    answer holds (made up by the notebook, malformed, huge, deeply nested), this never raises."""
    if outcome.extra_error.startswith(f"{REFUSED}: "):  # the notebook's doing: not trusted
        return {"tampered": [outcome.extra_error.removeprefix(f"{REFUSED}: ")]}, ""
    if outcome.extra_error:
        return {}, outcome.extra_error
    text = outcome.extra_output
    if not text:
        return {}, "the probe gave no answer"
    if len(text) > MAX_FACTS_CHARS:
        return {}, f"unreadable facts: {len(text):,} characters"
    if not _STRING_LITERAL.fullmatch(text):  # before parsing: any other literal costs far more
        return {}, f"unreadable facts: not a string's repr but {text[:60]!r}"
    try:
        value = _literal(ast.literal_eval(text))
        if not isinstance(value, dict):
            raise TypeError(f"a {type(value).__name__}, not a dict")
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

    expressions = None
    if setup.probe_source:
        key = f"_grader_{secrets.token_hex(8)}"
        path = str(Path(probe.__file__).resolve())
        probe_code = PROBE.format(
            key=key, path=path, code=Path(path).read_text(), source=bind_probe(setup.probe_source)
        )

        def expressions(first: str) -> tuple[str, ...]:
            anchor = read_anchor(first)
            return (
                expression(RESET.format(key=key), key, anchor),
                expression(probe_code, key, anchor),
            )

    options = RunOptions(
        limits=setup.limits,
        connection_dir=connection,
        wrap=kernel_wrap,
        first_expression=first_expression() if expressions else "",
        extra_expressions=expressions or (),
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
