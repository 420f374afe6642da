"""The submission's code read as code: its cells parsed (never run) into Python's syntax tree, for
the hidden tests to see what the notebook does from what it says, not from what its kernel
answers.

The cells come from the notebook the grader read itself (`OBSERVED["cells"]`, passed to the check
process); IPython's syntax (`%pip`, `!ls`) is turned into Python first by IPython's own
transformer, and a cell that still does not parse is left out. Reading code proves what the code
says, whatever its kernel later claims; it cannot tell code that runs from code that never does
(behind `if False:`), which the files and the kernel's facts then have to show.

Example:

    from course_tools.grade.core import reading
    code = reading.Code.of(OBSERVED)
    code.assigned_in_scope("fit_model")     # True: `fit_model = ...` inside `with ....scope():`
    code.pipeline("train_ds")               # ['cache', 'shuffle', 'batch', 'prefetch']
"""

from __future__ import annotations

import ast
import builtins
import codecs
import functools
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property


def _nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """`ast.walk(tree)` as a tuple, kept on the tree: every rule walks the same trees again (the
    reading made ~20 million walk steps for one notebook), and a tree never changes once parsed.

    >>> [type(n).__name__ for n in _nodes(ast.parse("x = 1"))]
    ['Module', 'Assign', 'Name', 'Constant', 'Store']
    """
    nodes = tree.__dict__.get("_course_nodes")
    if nodes is None:
        nodes = tree._course_nodes = tuple(ast.walk(tree))
    return nodes


#: The most code read, in characters (the exercise's is about 20,000).
MAX_CHARS = 2_000_000
#: What reaches IPython's shell, where a notebook can rewrite the probe's answer (its display
#: formatter, printers, displayhook, the expressions the probe is sent as): with one as a name or
#: an attribute in the code (not in a string, a docstring or a comment), the kernel's facts are
#: untrusted. (Words as common as `formatters` or `events` are left out: they are reached
#: through one of these.)
SHELL_NAMES = frozenset(
    {
        "get_ipython", "display_formatter", "displayhook", "for_type",
        "for_type_by_name", "type_printers", "deferred_printers", "singleton_printers",
        "ipython_display_formatter", "mimebundle_formatter", "user_expressions",
        "_format_user_obj", "_user_obj_error", "register_magic_function", "register_magics",
        "input_transformers_post", "input_transformer_manager", "ast_transformers",
        "_type_pprinters", "_deferred_type_pprinters", "_singleton_pprinters",
        "RepresentationPrinter", "PlainTextFormatter", "DisplayFormatter", "InteractiveShell",
        "ZMQInteractiveShell",
    }
)  # fmt: skip
#: Modules of IPython's shell (`IPython.display`, which shows a value, is not among them).
SHELL_MODULES = ("IPython.core", "IPython.lib", "IPython.terminal", "ipykernel", "traitlets")
#: The magics that change how the shell runs code, or run code the grader never reads (`%run` of
#: a file). `%config` and `%load_ext` are not among them: the probe builds a fresh display
#: formatter (a configured printer survives in it, but not unseen: the probe refuses to answer
#: past one not IPython's own), and `%config`'s value is read as code (`MAGIC_CODE`); an
#: extension is an installed package, or a file the notebook wrote with `%%writefile`, read as
#: code too.
SHELL_MAGICS = frozenset({"run", "alias_magic", "autoawait"})
#: The interpreter's hooks, which see (and can change) every call the grader's probe makes in the
#: kernel: with one as a name or an attribute in the code, the kernel's facts are untrusted.
#: `currentframe` counts however it is used (`inspect.currentframe().f_lineno` too): a frame
#: object reaches its callers' frames and their locals (`f_back.f_locals`), which a function
#: kept and called while the probe runs would read and change.
HOOK_NAMES = frozenset(
    {"setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads",
     "addaudithook", "_getframe", "set_asyncgen_hooks", "currentframe"}
)  # fmt: skip
#: What writes the interpreter's memory directly (ctypes, a NumPy array over any address, the
#: objects that refer to a dict of a builtin type): past every check the probe makes in the
#: kernel, so with one as a name or an attribute in the code, the kernel's facts are untrusted.
MEMORY_NAMES = frozenset(
    {"ctypes", "_ctypes", "ctypeslib", "cffi", "pythonapi", "get_referents", "get_referrers",
     "__array_interface__", "__array_struct__", "as_strided"}
)  # fmt: skip
#: What reaches the objects the grader keeps in the kernel while the notebook runs (its record of
#: each optimizer's first step, `fresh`, held by the functions it wraps): every object
#: (`gc.get_objects`), a function's closure and what its globals hold (`inspect.getclosurevars`),
#: every attribute of a wrapped method, its globals among them (`inspect.getmembers`). With one as
#: a name or an attribute in the code, the kernel's facts are untrusted. A list of names cannot
#: close every way to an attribute (`dir` and `getattr`, a name built at run time): the README
#: says so.
GRADER_STATE_NAMES = frozenset(
    {"get_objects", "getclosurevars", "__closure__", "cell_contents", "getmembers",
     "getmembers_static"}
)  # fmt: skip
#: The calls an array's interface dict may be shown by (`print(x.__array_interface__)`).
SHOWN = frozenset({"print", "display", "pprint", "repr", "str", "len"})


#: The listings of every attribute of an object (`inspect.getmembers`): given a wrapped method,
#: they reach its globals, the grader's record among them (`GRADER_STATE_NAMES`).
LISTINGS = frozenset({"getmembers", "getmembers_static"})
#: A module path's part: a lowercase name, not a dunder (`keras.callbacks`, `tf.keras.layers`).
MODULE_PART = re.compile(r"[a-z][a-z0-9_]*")


def _harmless_listing(trees: list[ast.Module]) -> set[int]:
    """The ids of the `LISTINGS` names called on a module path: `inspect.getmembers(
    keras.callbacks, inspect.isclass)`, whose first argument is lowercase names only, from a name
    bound only by an import of a module or a lowercase name (red team 33a: an honest listing of
    Keras's callbacks cost 11 points). A module's members are its classes and functions, none a
    wrapped method's globals; a class, a method, or a name the notebook binds otherwise
    (`type(f).__call__`, `x = ...`, a parameter) stays flagged."""
    nodes = [n for t in trees for n in _nodes(t)]
    imported, bound = set(), set()
    for node in nodes:
        if isinstance(node, ast.Import):
            imported |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {a.asname or a.name for a in node.names if MODULE_PART.fullmatch(a.name)}
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    harmless: set[int] = set()
    for node in nodes:
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = getattr(func, "id", None) or getattr(func, "attr", None)
        parts = _dotted(node.args[0]).split(".")
        if (
            name in LISTINGS
            and parts[0] in imported - bound
            and all(MODULE_PART.fullmatch(part) for part in parts)
        ):
            harmless.add(id(func))
    return harmless


def _harmless_memory(trees: list[ast.Module]) -> set[int]:
    """The ids of the nodes of `MEMORY_NAMES` that write no memory: `as_strided(...,
    writeable=False)` (a read-only window, like `sliding_window_view`), the import of
    `as_strided` when each use is such a call, and a read of `x.__array_interface__` (not one
    set, mutated, or given to a call: an object whose interface is a dict the notebook built
    makes an array over any address)."""
    harmless: set[int] = set()
    parents = {id(c): n for t in trees for n in _nodes(t) for c in ast.iter_child_nodes(n)}
    for node in (n for t in trees for n in _nodes(t)):
        if isinstance(node, ast.Call) and any(
            k.arg == "writeable" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in node.keywords
        ):
            harmless.add(id(node.func))  # as_strided(x, shape, strides, writeable=False)
        if not (
            isinstance(node, ast.Attribute)
            and node.attr == "__array_interface__"
            and isinstance(node.ctx, ast.Load)
        ):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
            continue  # x.__array_interface__["data"] = ...
        if isinstance(parent, ast.Attribute) and parent.attr in NAMESPACE_CHANGES:
            continue  # Raw.__array_interface__.update(...)
        if isinstance(parent, ast.keyword) or (
            isinstance(parent, ast.Call)
            and parent.func is not node
            and getattr(parent.func, "id", "") not in SHOWN
        ):
            continue  # Holder(x.__array_interface__)
        harmless.add(id(node))
    for node in (n for t in trees for n in _nodes(t)):
        if isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["as_strided"]:
            bound = node.names[0].asname or "as_strided"
            uses = [
                n for t in trees for n in _nodes(t) if isinstance(n, ast.Name) and n.id == bound
            ]
            if uses and all(
                isinstance(parents.get(id(n)), ast.Call)
                and parents[id(n)].func is n
                and id(n) in harmless
                for n in uses
            ):
                harmless.add(id(node))  # each use a read-only window
    return harmless


def _interface_named(node: ast.AST) -> str:
    """The array interface (`__array_interface__`, `__array_struct__`) `node` defines or names
    other than as an attribute: a method or property of that name, a keyword (`SimpleNamespace(
    __array_interface__=d)`), a string (`type("R", (), {"__array_interface__": d})`); ""
    otherwise."""
    name = getattr(node, "name", None) if isinstance(node, SCOPES[:4]) else None
    name = node.arg if isinstance(node, ast.keyword) else name
    name = node.value if isinstance(node, ast.Constant) else name
    return name if name in ("__array_interface__", "__array_struct__") else ""


#: Hooks named by their module (a bare `callbacks` or `monitoring` is a notebook's own word).
DOTTED_HOOKS = ("sys.monitoring", "gc.callbacks")
#: The attributes that change what an object or function is or runs (`ds.__class__ = Mine`,
#: `f.__code__ = ...`, `f.__globals__[...] = ...`): assigned anywhere, the facts are untrusted.
OBJECT_INTERNALS = frozenset(
    {"__class__", "__code__", "__globals__", "__dict__", "__defaults__", "__kwdefaults__",
     "__builtins__", "__closure__", "cell_contents", "__bases__", "__mro__"}
)  # fmt: skip
#: Why each of `SHELL_MAGICS` leaves the facts untrusted, and what to do instead.
MAGIC_WHY = {
    **{
        name: "sets a hook on the interpreter, which sees every call the grader's probe makes: "
        "remove it"
        for name in HOOK_NAMES | {"monitoring", "callbacks"}
    },
    **{
        name: "writes the interpreter's memory directly, past every check the grader's probe "
        "makes in the kernel: remove it"
        for name in MEMORY_NAMES
    },
    **{
        name: "reaches what the grader keeps in the kernel (its record of where each model's "
        "training started): remove it"
        for name in GRADER_STATE_NAMES
    },
    "run": "runs a file the grader cannot read as code: put that code in the notebook's cells",
    "alias_magic": "renames what a magic runs: call the magic by its own name",
    "autoawait": "changes how the shell runs each cell: remove it",
}
#: The magics whose text is Python the kernel runs: the cell of `%%time`, a `%timeit` line, the
#: value of a `%config` line (`cfg.` + its text, as IPython runs it), a `%%writefile` file
#: (imported or loaded as an extension later). Read as code when it parses.
MAGIC_CODE = {
    "time": "",
    "timeit": "",
    "prun": "",
    "capture": "",
    "writefile": "",
    "config": "cfg.",
}
#: The methods that set or delete an attribute.
SET_ATTRIBUTE = frozenset({"__setattr__", "__delattr__"})
#: The calls that change a dict in place (a module's `vars(...)` or `__dict__`).
NAMESPACE_CHANGES = frozenset(
    {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
)
#: The calls that give a module by its name.
IMPORTERS = frozenset({"__import__", "import_module"})
#: The modules the grader's probe, the course's code it loads and the kernel that answers rely
#: on: an attribute of one assigned by the notebook could answer for it. Others (`pandas`, `os`,
#: `time`, `matplotlib`) are the notebook's own business: `pd.options.display.max_rows = 50`.
RELIED_ON = frozenset(
    {
        "builtins", "json", "numpy", "hashlib", "tensorflow", "keras", "tf_keras", "IPython",
        "ipykernel", "traitlets", "jupyter_client", "zmq", "importlib", "_frozen_importlib",
        "inspect", "math", "course_utils", "course_tools",
    }
)  # fmt: skip
#: The attributes of `sys` the probe relies on (`sys.argv = [...]` is fine).
SYS_RELIED_ON = frozenset({"modules", "meta_path", "path_hooks", "path_importer_cache"})
#: The functions whose string argument is code the kernel runs.
CODE_RUNNERS = frozenset({"exec", "eval", "compile"})
#: The calls IPython's transformer writes for `%magic`, `%%magic`, `!command` and `x = !command`.
MAGIC_CALLS = frozenset({"run_line_magic", "run_cell_magic", "system", "getoutput"})
#: What `tf.distribute.MirroredStrategy` is, as the code imports it.
MIRRORED = "tensorflow.distribute.MirroredStrategy"


#: The codings (by `codecs`' name) that decode a source file's bytes into the text it shows; any
#: other one declared (`# -*- coding: unicode_escape -*-`, PEP 263) can turn text the grader reads
#: as a string into code when Python imports the file.
PLAIN_CODINGS = frozenset({"utf-8", "utf-8-sig", "ascii", "iso8859-1"})


def _as_python_reads(data: bytes) -> tuple[str | None, str]:
    """(text, coding): the text Python reads from `data` as a source file (decoded with the
    coding its BOM or its first two lines declare, PEP 263), and that coding; the text is None
    when the coding is not one of `PLAIN_CODINGS`, or Python cannot decode it (then nothing of it
    runs either).

        _as_python_reads(b"# coding: latin-1\nx = 1")   # ('# coding: latin-1\nx = 1', 'iso8859-1')
    """
    try:
        declared, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        coding = codecs.lookup(declared).name
    except (SyntaxError, LookupError):
        return None, ""  # Python refuses the file: it runs nothing
    if coding not in PLAIN_CODINGS:
        return None, coding
    try:
        return data.decode(coding), coding
    except UnicodeDecodeError:
        return None, coding


def _file_bytes(node: ast.AST) -> bytes | None:
    """The bytes Python decodes as a source file, with its coding declaration, that `node` gives
    the kernel: a `%%writefile` cell's text (IPython writes it as UTF-8; an import reads it), or
    bytes given to exec, eval or compile; None for anything else (a cell, or a str given to exec,
    is compiled as the text it is)."""
    name, args = _magic(node)
    texts = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if name == "writefile" and texts:
        return texts[-1].encode("utf-8", "replace")
    if _runs_code(node) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, bytes):
            return first.value
    return None


def _changed_coding(node: ast.AST) -> str:
    """The coding `node`'s file text declares (`_file_bytes`) when it is not one of
    `PLAIN_CODINGS`; "" for anything else."""
    data = _file_bytes(node)
    text, coding = _as_python_reads(data) if data is not None else ("", "")
    return coding if text is None else ""


class TooDeep(Exception):
    """A cell nested too deep for the check process to parse or read (RecursionError,
    MemoryError), which the kernel may run (after `sys.setrecursionlimit(...)`)."""


def _python(source: str, depth: int = 0, *, strict: bool = False) -> ast.Module | None:
    """`source` (a cell, magics and all) as IPython runs it, parsed; the code of a `%%time`,
    `%%capture` or `%%timeit` cell and of a `%time` or `%timeit` line is read as the code it
    runs (`_MagicBodies`). None when it does not parse; with `strict`, `TooDeep` when it is
    nested too deep to parse or read here (a SyntaxError runs nothing in the kernel either)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
        if depth < 3:
            tree = _MagicBodies(depth).visit(tree)
            ast.fix_missing_locations(tree)
    except (SyntaxError, ValueError):
        return None
    except (RecursionError, MemoryError) as exc:
        if strict:
            raise TooDeep(type(exc).__name__) from None
        return None
    return tree


#: The magics that run their cell's (or line's) Python in the kernel's namespace, read as that
#: code: `%%time`, `%%capture`, `%%timeit` (its first line's setup too), `%time`, `%timeit`.
READ_MAGICS = frozenset({"time", "timeit", "capture"})
#: The cell magics whose body is not Python the kernel runs: a file written, markup, a shell
#: (a shell that runs Python is `_runs_command`'s). Any other cell magic (`%%python`,
#: `%%script python`, `%%prun`, one the notebook registers) runs code the reading cannot read.
NOT_PYTHON_CELL_MAGICS = frozenset(
    {"writefile", "file", "html", "markdown", "latex", "svg", "javascript", "js", "bash", "sh",
     "perl", "ruby", "script"}
)  # fmt: skip
#: `%timeit`'s options (IPython's "n:r:tcp:qo"): what follows them is the statement.
TIMEIT_OPTIONS = re.compile(r"^(?:\s*-(?:[nrp]\s*\d+|[tcqo]+)(?=\s|$))*\s*")
#: The line magics the reading reads past: `%time` and `%timeit` read as the statement they run
#: (`_MagicBodies`; one whose statement it cannot parse is unreadable), the rest run no Python
#: in the kernel's namespace (`%load_ext` of `LOADED_EXTENSIONS` only, `%config` of the inline
#: backend to a literal only, `_inline_setting`). Any other
#: line magic (`%prun <statement>`, `%run`, one the notebook registers) makes the reading
#: unreadable, as any other cell magic does.
LINE_MAGICS = frozenset(
    {"time", "timeit", "load_ext", "reload_ext", "tensorboard", "matplotlib", "config", "pip",
     "autoreload", "pwd", "who", "whos"}
)  # fmt: skip
#: The extensions `%load_ext` (`%reload_ext`) may load: an extension's code runs in the kernel.
LOADED_EXTENSIONS = frozenset({"tensorboard", "autoreload"})


def _inline_setting(line: object) -> bool:
    """`line` is a `%config` of the inline backend, or of which values a cell shows
    (`InteractiveShell.ast_node_interactivity`), set to a literal (`InlineBackend.figure_format
    = 'retina'`, `InteractiveShell.ast_node_interactivity = 'all'`): the shell evaluates a
    `%config` value as Python in the kernel's namespace."""
    if not isinstance(line, str):
        return False
    setting, _, value = line.partition("=")
    if not re.fullmatch(
        r"\s*(InlineBackend\.\w+|InteractiveShell\.ast_node_interactivity)\s*", setting
    ):
        return False
    try:
        ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _timed_statement(name: str, line: str) -> str | None:
    """The statement a `%time` or `%timeit` line runs, its own options taken off: `%timeit`'s
    ("n:r:tcp:qo", up to the first word that is none); `%time`'s `--no-raise-error` (or a
    prefix of it, as its argument parser takes) before the statement. None when the options
    cannot be told from the statement: an option left after them (`%timeit --`), or for
    `%time` a word its parser would take as an option anywhere in the line (`--no`, `--help`,
    `-h`, `--`), which it takes out of the code it runs."""
    if name == "timeit":
        statement = TIMEIT_OPTIONS.sub("", line, count=1)
        return None if statement.startswith("-") else statement
    words = line.split()
    while words and len(words[0]) > 2 and "--no-raise-error".startswith(words[0]):
        words.pop(0)
    if any(w == "-h" or w == "--" or w.startswith(("--n", "--h")) for w in words):
        return None
    at = line.find(words[0]) if words else len(line)
    return line[at:]


class _MagicBodies(ast.NodeTransformer):
    """A `%%time`/`%%capture`/`%%timeit` cell, or a `%time`/`%timeit` line, as the code it runs:
    IPython's transformer writes `get_ipython().run_cell_magic("time", "", "<the cell>")`,
    whose string the reading would never see as code (its bindings, steps and fits ran).
    `%%capture out` binds `out` (to IPython's CapturedIO, a name the reading cannot follow).

        _python("%%time\ntrain_ds = other")  # read as `train_ds = other`, at line 2
    """

    def __init__(self, depth: int):
        self.depth = depth
        self.hoisted: list[ast.stmt] = []

    def visit(self, node: ast.AST) -> ast.AST | list[ast.stmt]:
        """A statement holding `x = %time <statement>` reads as that statement, then itself
        (the magic's value None): `%time` runs its statement in the kernel's namespace."""
        if not isinstance(node, ast.stmt):
            return super().visit(node)
        outer, self.hoisted = self.hoisted, []
        try:
            done = super().visit(node)
            hoisted = self.hoisted
        finally:
            self.hoisted = outer
        if not hoisted:
            return done
        return hoisted + (done if isinstance(done, list) else [done] if done else [])

    def _parsed(self, text: str, lines: int) -> list[ast.stmt] | None:
        tree = _python(text, self.depth + 1)
        if tree is None:
            return None
        ast.increment_lineno(tree, lines)
        return tree.body

    def visit_Expr(self, node: ast.Expr) -> ast.AST | list[ast.stmt]:
        name, args = _magic(node.value)
        texts = [a.value if isinstance(a, ast.Constant) else None for a in args]
        if name not in READ_MAGICS or not texts or not all(isinstance(t, str) for t in texts):
            return self.generic_visit(node)
        cell = node.value.func.attr == "run_cell_magic"
        line = texts[0]
        if not cell:
            line = _timed_statement(name, line) if name in ("time", "timeit") else None
            if line is None:
                return self.generic_visit(node)  # unread: unreadable (`_unreadable_why`)
        elif name == "timeit":
            line = TIMEIT_OPTIONS.sub("", line, count=1)
        body: list[ast.stmt] = []
        if cell and name == "capture":
            output = [w for w in line.split() if not w.startswith("-")]
            if output:
                body += self._parsed(f"{output[0]} = CapturedIO()", node.lineno - 1) or []
        elif cell and name == "timeit" and line.strip():
            body += self._parsed(line.strip(), node.lineno - 1) or []  # the setup line
        code = texts[-1] if cell else line
        parsed = self._parsed(code, node.lineno if cell else node.lineno - 1)
        if parsed is None or (cell and len(texts) < 2) or (not cell and name == "capture"):
            return self.generic_visit(node)
        return body + parsed or ast.Pass()

    def visit_Call(self, node: ast.Call) -> ast.AST:  # y = %time f(): the expression's value
        name, args = _magic(node)
        text = args[0].value if args and isinstance(args[0], ast.Constant) else None
        if name in ("time", "timeit") and node.func.attr == "run_line_magic":
            statement = _timed_statement(name, text) if isinstance(text, str) else None
            if statement is not None:
                parsed = self._parsed(statement, node.lineno - 1)
                if parsed and len(parsed) == 1 and isinstance(parsed[0], ast.Expr):
                    return parsed[0].value
                if parsed:  # x = %time train_ds = other: the statement runs, x is None
                    self.hoisted += parsed
                    return ast.copy_location(ast.Constant(None), node)
        return self.generic_visit(node)


def _fit_of(node: ast.AST, name: str) -> bool:
    """`node` is a call `name.fit(...)`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "fit"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == name
    )


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for the expression a.b.c ("" for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *parts[::-1]]) if isinstance(node, ast.Name) else ""


#: The smallest literal shuffle buffer that counts as a shuffle: the exercise asks for a buffer of
#: thousands. Measured with TensorFlow's shuffle at 2,048, 20,000 and 73,257 examples in batches
#: of 64 to 512 (one to eight replicas): 1,000 keeps at most 0.12 of the way from a full
#: shuffle's share of batch-mates together again to all of them, at every size, where 64 keeps
#: 0.21-0.78 and 100 or 128 pass the run-time measure at two replicas and fail it at eight. A
#: literal floor of 1,000 makes the point for a literal buffer the same at every device count.
SMALL_BUFFER = 1_000


def _small_buffer(node: ast.AST) -> bool:
    """A literal number below `SMALL_BUFFER` (`1`, `0`, `-1`, `2`, `100`): a shuffle buffer that
    keeps the order (below 2) or much of it."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _small_buffer(node.operand) or isinstance(node.operand, ast.Constant)
    value = getattr(node, "value", None) if isinstance(node, ast.Constant) else None
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value < SMALL_BUFFER


#: The most replicas the grader runs a notebook with (`--devices`): a buffer that depends on
#: `num_replicas_in_sync` is read at its smallest over 1 to this many.
MAX_REPLICAS = 8
#: The operators and functions `_fold` computes.
FOLDED_OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b if abs(b) <= 64 and abs(a) <= 1e6 else None,
}
FOLDED_CALLS = {"int": int, "max": max, "min": min, "abs": abs, "round": round}


@dataclass(frozen=True)
class Folding:
    """What `_fold` may read beyond arithmetic: `pickers`, the names bound to the course's
    settings (`settings = course_utils.setup()`), whose `pick(full=..., quick=...)` is read at
    its smallest; `shadowed`, the builtins of `FOLDED_CALLS` (and `len`) the notebook binds to
    something else, which are not read."""

    pickers: frozenset[str] = frozenset()
    shadowed: frozenset[str] = frozenset()


def _fold(
    node: ast.AST,
    names: dict[str, ast.AST],
    replicas: int,
    depth: int = 0,
    folding: Folding = Folding(),  # noqa: B008 - frozen
):
    """The number `node` computes when it is constant arithmetic: literals, `+ - * / // % **`,
    `int`, `max`, `min`, `abs`, `round` (the builtins: not those of `shadowed`, which the
    notebook binds), `X.num_replicas_in_sync` (as `replicas`), `settings.pick(full=...,
    quick=...)` of the course's settings (`pickers`: the names bound to them) at its smallest,
    and the names of `names` ({name: the one expression it is bound to}); None for anything
    else.

        _fold(ast.parse("2 ** 9", mode="eval").body, {}, 2)   # 512
    """
    if depth > 20:
        return None

    def fold(inner: ast.AST):
        return _fold(inner, names, replicas, depth + 1, folding)

    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(node, ast.Name) and node.id in names:
        return fold(names[node.id])
    if isinstance(node, ast.Attribute) and node.attr == "num_replicas_in_sync":
        return replicas
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = fold(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp) and type(node.op) in FOLDED_OPERATORS:
        left, right = fold(node.left), fold(node.right)
        if left is None or right is None:
            return None
        try:
            value = FOLDED_OPERATORS[type(node.op)](left, right)
        except (ArithmeticError, ValueError):
            return None
        return value if isinstance(value, (int, float)) and abs(value) < 1e15 else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "pick"
        and getattr(node.func.value, "id", None) in folding.pickers
        and not node.args
        and node.keywords
        and all(k.arg in ("full", "quick", "cpu") for k in node.keywords)
    ):
        values = [fold(k.value) for k in node.keywords]  # whichever the profile picks
        return None if None in values else min(values)
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") in FOLDED_CALLS
        and node.func.id not in folding.shadowed
        and node.args
        and not node.keywords
    ):
        values = [fold(a) for a in node.args]
        if None in values or (node.func.id not in ("max", "min") and len(values) != 1):
            return None
        try:
            return FOLDED_CALLS[node.func.id](*values)
        except (ArithmeticError, ValueError, TypeError):
            return None
    return None


def _folded(
    node: ast.AST,
    names: dict[str, ast.AST],
    folding: Folding = Folding(),  # noqa: B008 - frozen
) -> ast.AST:
    """`node` as a literal when it is constant arithmetic (`_fold`, reading what `folding`
    allows), at its smallest over 1 to `MAX_REPLICAS` replicas; `node` itself otherwise (a
    literal too: `-1` stays as written)."""
    if isinstance(node, ast.Constant):
        return node
    values = [_fold(node, names, n, 0, folding) for n in range(1, MAX_REPLICAS + 1)]
    if None in values:
        return node
    return ast.copy_location(ast.Constant(value=min(values)), node)


#: The calls that train on a dataset, with the keyword that names it: every one must be given the
#: bare name of the training pipeline (`Code.training_places`).
TRAINERS = {
    "fit": "x",
    "experimental_distribute_dataset": "dataset",
    "distribute_datasets_from_function": "dataset_fn",
}
#: The calls of a module that load a data set (`Code._loaded`), and the methods that keep every
#: example of a dataset (its count is the loaded split's).
LOADERS = frozenset({"load", "load_data", "builder"})
KEPT_EXAMPLES = frozenset({"cache", "map", "prefetch"})
#: The chain of `tf.data.Dataset.from_tensor_slices(...)` (`Code._slices_loaded`).
SLICED = ["data", "Dataset", "from_tensor_slices"]
#: The methods of a variable that write it (`Code.step_assignments`).
SCATTERS = ("update", "add", "sub", "max", "min", "mul", "div", "nd_update", "nd_add", "nd_sub")
STEP_WRITERS = frozenset(
    {"assign", "assign_add", "assign_sub", "batch_scatter_update"}
    | {f"scatter_{s}" for s in SCATTERS}
)
#: The functions that write a variable given to them (`keras.backend.set_value(v, 12)`).
VALUE_SETTERS = frozenset(
    {"set_value", "batch_set_value", "AssignVariableOp", "AssignAddVariableOp",
     "AssignSubVariableOp", "load_own_variables", "set_weights",
     *("ResourceScatter" + s.title().replace("_", "") for s in (*SCATTERS, "nd_max", "nd_min"))}
)  # fmt: skip
#: The calls that look a method up by its name (`getattr(model, "fit")`).
LOOKUPS = frozenset({"getattr", "attrgetter", "methodcaller"})
#: The methods called only on a model or a strategy (`Code._models_and_strategies`).
MODEL_METHODS = frozenset(
    {"fit", "compile", "evaluate", "predict", "save", "save_weights", "load_weights",
     "train_on_batch", "scope", "run", "experimental_distribute_dataset"}
)  # fmt: skip
#: The calls that wrap a function of the notebook's own into one the reading still names
#: (`tf.function(train_step)(batch)`).
WRAPPERS = frozenset({"function", "partial"})
#: The calls that make a model whose name does not say "model" (`keras.Sequential(...)`).
MODEL_MAKERS = frozenset({"Sequential", "Model", "Functional"})


#: Calls that read examples from outside the notebook's code (files, generators): a dataset made
#: with one is not a batch of the notebook's own (`Code._not_training`).
READERS = frozenset(
    {
        "TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "list_files",
        "image_dataset_from_directory", "text_dataset_from_directory",
        "audio_dataset_from_directory", "from_generator", "as_dataset", "snapshot", "open",
        "fromfile", "loadtxt", "genfromtxt", "read_file", "load_model", "GFile", "read",
        "read_bytes", "read_text", "get_file", "urlopen",
    }
)  # fmt: skip
#: Builtins a batch of the notebook's own may be computed with (`Code._not_training`).
PLAIN_BUILTINS = frozenset(
    {"range", "list", "tuple", "len", "int", "float", "min", "max", "sum", "abs", "round", "zip"}
)
#: The modules a batch of the notebook's own may be computed with (`Code._not_training`).
TENSOR_MODULES = ("tensorflow", "numpy", "keras", "course_utils", "tensorflow_datasets")


#: The modules whose loaders give a data set's examples (`Code._loaded`).
DATASET_LOADERS = frozenset({"course_utils", "tensorflow_datasets", "keras", "tensorflow"})


def _paired(target: ast.AST, value: ast.AST) -> bool:
    """`target` and `value` are tuples (or lists) of the same length without `*`: `a, b = 1, 2`."""
    kinds = (ast.Tuple, ast.List)
    return (
        isinstance(target, kinds)
        and isinstance(value, kinds)
        and len(target.elts) == len(value.elts)
        and not any(isinstance(e, ast.Starred) for e in [*target.elts, *value.elts])
    )


#: The keywords by which a function is given the variable it writes (`tf.raw_ops`'s take keywords).
WRITTEN_KEYWORDS = frozenset({"resource", "ref", "variable", "x"})


def _written(call: ast.Call) -> ast.AST | None:
    """The variable a writer function `call` is given: its first argument, or by keyword
    (`tf.raw_ops.AssignVariableOp(resource=v.handle, value=w)`)."""
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in WRITTEN_KEYWORDS), None)


def _argument(call: ast.Call, positional: list[str], parameter: str) -> ast.AST | None:
    """What `call` gives for `parameter` (by position among `positional`, or by keyword)."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    if parameter in positional and positional.index(parameter) < len(call.args):
        value = call.args[positional.index(parameter)]
        return None if isinstance(value, ast.Starred) else value
    return None


def _first_batch(node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(examples, size) for `next(iter(examples.batch(size)))`, else None."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "next"):
        return None
    inner = node.args[0] if len(node.args) == 1 else None
    if not (isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "iter"):
        return None
    batched = inner.args[0] if len(inner.args) == 1 else None
    if not (
        isinstance(batched, ast.Call)
        and getattr(batched.func, "attr", "") == "batch"
        and len(batched.args) == 1
        and not batched.keywords
    ):
        return None
    return batched.func.value, batched.args[0]


def _loader_call(node: ast.AST) -> ast.Call | None:
    """The loader's call (`LOADERS`) at the start of the chain `node`, if any."""
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOADERS
        ):
            return node
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _whole_training_split(call: ast.Call) -> bool:
    """The loader's `call` names the training split whole: `"train"` as a literal, and no
    `limit=` (nor `**`) that would keep fewer of its examples."""
    return _split_of(call) == "train" and not any(
        k.arg is None or k.arg == "limit" for k in call.keywords
    )


def _shuffle_name(node: ast.AST) -> str:
    """The name `_calls` gives a shuffle of literal buffer `node`: "shuffle(1)" below 2 (no
    shuffle at all), "shuffle(few)" below `SMALL_BUFFER`, "shuffle" for any other buffer."""
    if not _small_buffer(node):
        return "shuffle"
    value = node.value if isinstance(node, ast.Constant) else -1
    return "shuffle(1)" if value < 2 else "shuffle(few)"


def _targets(node: ast.AST) -> list[str]:
    """The plain names an assignment binds."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        targets = [node.target]
    else:
        return []
    names, todo = [], list(targets)
    while todo:  # a, (b, *c) = ...; not the names inside results[model.name] = ... or x.y = ...
        target = todo.pop()
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            todo += target.elts
        elif isinstance(target, ast.Starred):
            todo.append(target.value)
    return names


def _calls(node: ast.AST) -> list[str]:
    """The method names called on a chain, outermost last: x.a().b() -> ['a', 'b']; and the
    name the chain starts from. A shuffle with a literal buffer below 2 is named "shuffle(1)",
    below `SMALL_BUFFER` "shuffle(few)" (`_shuffle_name`), one whose buffer the reading cannot
    read "shuffle(unread)" (`Code._fold_buffers`)."""
    names = []
    while True:
        if isinstance(node, ast.Call):
            buffer = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "buffer_size")]
            if getattr(node.func, "attr", "") == "shuffle" and buffer and _small_buffer(buffer[0]):
                names.append(_shuffle_name(buffer[0]))  # keeps the order, or most of it
                node = node.func.value
                continue
            if getattr(node, "unread_buffer", None) is not None:  # `Code._fold_buffers`
                names.append("shuffle(unread)")
                node = node.func.value
                continue
            node = node.func
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        else:
            break
    return names[::-1], node.id if isinstance(node, ast.Name) else ""


def _chain(node: ast.AST) -> tuple[list[str], str, str]:
    """`_calls`, and the function called at the chain's start, if any: make(x).batch(...) ->
    (['batch'], '', 'make')."""
    calls, source = _calls(node)
    while isinstance(node, (ast.Call, ast.Attribute)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return calls, "", node.func.id
        node = node.func if isinstance(node, ast.Call) else node.value
    return calls, source, ""


@dataclass(frozen=True)
class TrainingProblem:
    """A training call (or a way of reaching one) the reading cannot accept as training on the
    pipeline it reads (`Code.training_places`): a fact, which `checks` words for the student.

    `kind` is one of: "reached" (a training method named without being called there, `f =
    model.fit`), "looked_up" (a training method looked up by a constant name, `getattr(model,
    "fit")`), "unnamed" (`getattr` of a model or strategy, `attrgetter` or `methodcaller`, by a
    name that is not a constant), "unresolved" (a call the reading cannot follow, given the
    training examples: `getattr(m, k)(train_ds)`, `f(train_ds)` with `f` bound by an assignment),
    "unpacked" (the dataset given through `*`/`**`), "no_dataset", "from_function"
    (`distribute_datasets_from_function` of the training examples), "other_dataset", "no_fit",
    "no_distribute" (no such call given the bare name), "unread_buffer" (a shuffle buffer the
    reading cannot read, `code` its text, `trained` the cell training on it).
    `cell` is the cell's number as `Code.cells` gives it (its execution count in the executed
    notebook); `code` the code, cut short; `receiver` what `fit` is called on."""

    kind: str
    cell: int = 0
    code: str = ""
    receiver: str = ""
    trained: int = 0


def _load_marks(node: ast.AST, imported: set[str]) -> set[str]:
    """A mark for each call in `node` that loads a data set through an imported module
    (`data.load("svhn_cropped", "train")`, `LOADERS`), the same for the same call written
    again: `Code._training_calls` knows a second load of the training examples by it."""
    return {
        f"<load {_split_of(sub)!r} {ast.dump(sub)}>"
        for sub in _nodes(node)
        if isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and sub.func.attr in LOADERS
        and getattr(_root(sub.func), "id", None) in imported
    }


def _split_of(call: ast.Call) -> str | None:
    """The split a loader's call names as a literal (`data.load("svhn_cropped", "test")`,
    `tfds.load(..., split="test")`), else None."""
    given = [k.value for k in call.keywords if k.arg == "split"] or call.args[1:2]
    value = getattr(given[0], "value", None) if given else None
    return value if isinstance(value, str) else None


def _test_load(mark: str) -> bool:
    """`mark` (`_load_marks`) is a load of the test split (`"test"`, `"test[:50%]"`)."""
    return mark.startswith("<load 'test")


def _short(node: ast.AST, limit: int = 100) -> str:
    """`node` as code, cut to `limit` characters (for a message)."""
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _magic(node: ast.AST) -> tuple[str, list[ast.AST]]:
    """The magic's name and arguments of `get_ipython().run_line_magic(name, ...)` (or
    run_cell_magic), as IPython's transformer writes a `%name` line; ("", []) for anything else."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("run_line_magic", "run_cell_magic")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return "", []
    return node.args[0].value, node.args[1:]


def _runs_code(node: ast.AST) -> bool:
    """`node` calls exec, eval or compile, by name or through the builtins module."""
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if isinstance(function, ast.Name):
        return function.id in CODE_RUNNERS
    return (
        isinstance(function, ast.Attribute)
        and function.attr in CODE_RUNNERS
        and _dotted(function.value) in ("builtins", "__builtins__")
    )


def _literal_code(node: ast.AST | None) -> str | None:
    """The text of a literal given as code: a str, bytes (UTF-8), or an f-string without a
    value in it; None for anything else (a name, an f-string with values, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        value = node.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(v.value for v in node.values)
    return None


def _code_text(node: ast.AST) -> str:
    """The Python text `node` has the kernel run, when it is given as a literal: a magic's
    (`MAGIC_CODE`), or the literal given to exec, eval or compile (`_literal_code`); "" for
    anything else."""
    data = _file_bytes(node)
    if data is not None:  # decoded as Python will: a coding that changes it is not read
        return _as_python_reads(data)[0] or ""
    name, args = _magic(node)
    texts = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if name in MAGIC_CODE and texts:
        return MAGIC_CODE[name] + texts[-1]  # the cell's text, or the line's
    if _runs_code(node) and node.args:
        return _literal_code(node.args[0]) or ""
    return ""


def _path_text(node: ast.AST | None, literals: dict[str, str]) -> str | None:
    """The text of a file path given as a literal, a name only ever assigned one
    (`literals`), an f-string without values, or the last part of `a / "m.py"`,
    `os.path.join(a, "m.py")` or `Path(a, "m.py")`; None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_text(node.right, literals)
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") in ("with_suffix", "with_name")
        and node.args
    ):
        return _path_text(node.args[0], literals)  # Path("m.txt").with_suffix(".py"): ".py"
    if (
        isinstance(node, ast.Call)
        and node.args
        and _dotted(node.func).split(".")[-1]
        in (
            "join",
            "Path",
            "PurePath",
        )
    ):
        return _path_text(node.args[-1], literals)
    if isinstance(node, ast.Name):
        return literals.get(node.id)
    return _literal_code(node)


def _iterated(node: ast.AST) -> list[ast.AST]:
    """What a loop over `node` iterates as data: `node`, or the parts of `zip(a, b)` and
    `enumerate(a)`; nothing for `range(...)` (numbers, whatever they are computed from)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "range":
        return []
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("zip", "enumerate"):
        parts = node.args if node.func.id == "zip" else node.args[:1]
        return [p for part in parts for p in _iterated(part)]
    return [node]


#: Library calls that yield their first argument's elements as they are (a progress bar, a
#: slice): iterating one of a distributed dataset iterates the distributed dataset.
ORDER_KEEPERS = frozenset(
    {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "itertools.islice"}
)
#: The calls that make a distributed dataset (`Code._distributed`).
#: The methods of a distributed iterator (and of the optional it gives) that give its next
#: element: read through, as `next(...)` is.
ITERATOR_METHODS = frozenset({"get_next", "get_next_as_optional", "get_value"})
DISTRIBUTERS = frozenset({"experimental_distribute_dataset", "distribute_datasets_from_function"})


#: The calls that load a module from a file the grader never read as code.
FILE_LOADERS = frozenset(
    {"SourceFileLoader", "SourcelessFileLoader", "spec_from_file_location", "exec_module",
     "load_module", "run_path", "run_module"}
)  # fmt: skip
#: The calls that give a file another name (a `.txt` written, then renamed to `.py` and imported).
FILE_MOVES = frozenset({"rename", "replace", "move", "copy", "copyfile", "copy2", "symlink_to",
                        "link_to", "hardlink_to"})  # fmt: skip


#: The endings of a file an import can run (a source, a compiled module, an archive on the import
#: path, an extension, a `.pth` file that `site` runs).
CODE_SUFFIXES = (".py", ".pyw", ".pyc", ".pyd", ".so", ".zip", ".egg", ".pth")
#: The endings of a file written or renamed that an import can run: a `.zip` runs nothing until
#: it is put on the import path, which is marked by itself (so zipping one's results for
#: hand-in, `shutil.make_archive` too, is not marked); a module written into one is
#: (`_zip_member`).
FILE_SUFFIXES = tuple(s for s in CODE_SUFFIXES if s != ".zip")
#: What runs code the grader never reads when it is called or reached: the decoders that call
#: what their data names (pickle and its kin: `pickle.loads(b"c__builtin__\nexec...")`), code
#: objects and functions made from bytes, and the ways to change how a module is found.
UNREAD_CALLS = frozenset(
    {
        *(f"{m}.{f}" for m in ("pickle", "_pickle", "dill", "cloudpickle")
          for f in ("load", "loads", "Unpickler")),
        "dill.load_session", "dill.load_module", "shelve.open", "shelve.Shelf",
        "shelve.DbfilenameShelf", "shelve.BsdDbShelf", "pandas.read_pickle", "joblib.load",
        "marshal.load", "marshal.loads", "types.FunctionType", "types.LambdaType",
        "types.CodeType", "codecs.register", "site.addsitedir", "zipimport.zipimporter",
        "zipfile.PyZipFile", "code.InteractiveInterpreter", "code.InteractiveConsole",
        "code.interact", "code.compile_command", "timeit.main", "yaml.unsafe_load",
        "yaml.unsafe_load_all", "yaml.UnsafeLoader", "yaml.CUnsafeLoader",
        "shutil.unpack_archive",
        *(f"doctest.{f}" for f in ("run_docstring_examples", "testmod", "testfile",
          "DocTestRunner", "DebugRunner", "DocTestSuite", "DocFileSuite", "debug", "debug_src",
          "debug_script", "script_from_examples")),
    }
)  # fmt: skip
#: The calls that compile and run a string given to them, like exec, and where that string is
#: given (keyword, position): a literal is read as code, anything else is marked.
STRING_RUNNERS = {
    **{f"timeit.{f}": (("stmt", 0), ("setup", 1)) for f in ("timeit", "repeat", "Timer")},
    **{f"{m}.{f}": (("statement", 0),) for m in ("cProfile", "profile") for f in ("run", "runctx")},
    "pdb.run": (("statement", 0),),
    "pdb.runctx": (("statement", 0),),
    "pdb.runeval": (("expression", 0),),
    "code.compile_command": (("source", 0),),
}
#: The methods of a profiler or debugger object that do the same (`Profile().runctx(s, ...)`).
STRING_METHODS = frozenset({"runctx", "runeval"})
#: The interpreters a cell magic runs its text with (`%%python3`, `%%perl`): code the grader
#: cannot read, which can write a module the next cell imports.
INTERPRETER_MAGICS = frozenset({"python", "python2", "python3", "pypy", "perl", "ruby"})
#: The shells a magic or `!` runs its text with (`%%bash`, `%%script sh`, `!cp a b`).
SHELL_RUNNERS = frozenset({"bash", "sh", "script", "system", "sx", "!"})
#: The Python calls that run a command (its text, or a list of its words).
COMMAND_CALLS = frozenset(
    {*(f"subprocess.{f}" for f in ("run", "call", "check_call", "check_output", "Popen",
                                   "getoutput", "getstatusoutput")),
     "os.system", "os.popen", "pty.spawn", "asyncio.create_subprocess_exec",
     "asyncio.create_subprocess_shell",
     *(f"os.{f}" for f in ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp",
                           "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
                           "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp"))}
)  # fmt: skip
#: What in a command's text can write or run a module: a name with an importable ending, Python
#: itself, or text the command builds at run time (IPython's `{x}`/`$x`, the shell's `$(...)`,
#: backquotes, escapes, eval/exec/source). Quotes are removed first (`b.p"y"` is `b.py`).
COMMAND_CODE = r"\.(py|pyw|pyc|pyd|so|zip|egg|pth)\b|python|[$`\\{]|\b(eval|exec|source)\b"
#: The lists and dicts that say where and how modules are found.
IMPORT_PATHS = frozenset({"sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache"})
#: What a parent folder is made of: `os.path.abspath("..")`, `Path.cwd().parent` (a clone's
#: `sys.path.insert(0, os.path.abspath(".."))` finds course_utils there).
PARENT_PARTS = frozenset(
    {"os", "path", "pathlib", "Path", "abspath", "realpath", "normpath", "join", "dirname", "str",
     "fspath", "resolve", "absolute", "getcwd", "cwd", "parent", "curdir"}
)  # fmt: skip


def _resolved(node: ast.AST, imports: dict[str, str]) -> str:
    """The dotted name `node` stands for, from what the code imports (`imports`: {name: what it
    is}): `pk.loads` after `import pickle as pk` is "pickle.loads"; "" when it starts elsewhere."""
    start, attributes = _attribute_path(node)
    module = _imported_module(start)
    if module is None and isinstance(start, ast.Name):
        module = imports.get(start.id)
    return ".".join([module, *attributes]) if module else ""


def _parent_folder(node: ast.AST) -> bool:
    """`node` names the working folder or the one above it, made only of `PARENT_PARTS` and
    dots ("..", ".", "", `os.getcwd()`, `os.curdir`, `Path.cwd().parent`): a folder, never an
    archive, so only the files in it an import finds, which the reading marks when the notebook
    writes them (the working folder is on the import path already)."""
    parts = list(_nodes(node))
    texts = [n.value for n in parts if isinstance(n, ast.Constant)]
    names = {getattr(n, "attr", getattr(n, "id", "")) for n in parts}
    names.discard("")
    kinds = (ast.Call, ast.Attribute, ast.Name, ast.Constant, ast.Load, ast.BinOp, ast.Div)
    plain = all(isinstance(n, kinds) for n in parts)
    dots = all(isinstance(t, str) and not set(t) - set("./") and t[:1] != "/" for t in texts)
    named = {"parent", "dirname", "getcwd", "cwd", "curdir"} & names
    return plain and dots and names <= PARENT_PARTS and bool(texts or named)


def _changes_import_path(node: ast.AST, imports: dict[str, str]) -> bool:
    """`node` changes where or how modules are found (`IMPORT_PATHS`: an item set, added or
    removed, the list assigned), other than by adding the parent folder to `sys.path`."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        written = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        targets = [t.value if isinstance(t, ast.Subscript) else t for t in written]
        return any(_resolved(t, imports) in IMPORT_PATHS for t in targets)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    owner = _resolved(node.func.value, imports)
    if owner not in IMPORT_PATHS or node.func.attr in ("index", "count", "copy", "get"):
        return False
    added = node.args[-1:] if node.func.attr in ("insert", "append") else []
    return not (owner == "sys.path" and added and _parent_folder(added[0]))


def _unread_code(
    node: ast.AST,
    literals: dict[str, str],
    imports: dict[str, str],
    tars: frozenset[str] = frozenset(),
) -> bool:
    """`node` has the kernel run code the grader cannot read as code: exec, eval or compile
    given anything but a literal (`exec(SRC)`, an f-string with values); a module imported by a
    name built at run time (`importlib.import_module(name)`); runpy; a file an import can run
    (`CODE_SUFFIXES`) written other than with `%%writefile` (`open("m.py", "w")`,
    `Path("m.py").write_text(...)`) or renamed to one; a decoder that runs what its data says
    (`UNREAD_CALLS`: `pickle.loads`, `np.load(..., allow_pickle=True)`, `marshal.loads`, Keras's
    `load_model(..., safe_mode=False)`); a change to where modules are found
    (`_changes_import_path`); zipimport."""
    if _runs_code(node):
        return not node.args or _literal_code(node.args[0]) is None
    if _imported_module(node) == "?":
        return True
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        if any((n or "").split(".")[0] in ("runpy", "zipimport") for n in names):
            return True
        if isinstance(node, ast.ImportFrom):  # from pickle import loads (or *)
            every = {c.rpartition(".")[0] for c in UNREAD_CALLS}
            return any(
                f"{node.module}.{a.name}" in UNREAD_CALLS or a.name == "*" and node.module in every
                for a in node.names
            )
        return False
    if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
        return _resolved(node, imports) in UNREAD_CALLS  # pickle.loads, called or not
    if _changes_import_path(node, imports):
        return True
    if not isinstance(node, ast.Call):
        return False
    if _runs_unread_string(node, imports) or _runs_command(node, imports):
        return True
    if _tar_extraction(node, imports, tars):
        return True
    if _resolved(node.func, imports) == "numpy.load":  # np.load(path) unpickles nothing
        unpickles = [k.value for k in node.keywords if k.arg in ("allow_pickle", None)]
        return any(
            not (isinstance(v, ast.Constant) and v.value in (False, None)) for v in unpickles
        )
    called = _dotted(node.func).split(".")[-1] or getattr(node.func, "attr", "")
    if called == "enable_unsafe_deserialization":
        return True  # Keras then runs the bytecode a saved Lambda layer holds
    if called == "load_model":  # keras.models.load_model(path, safe_mode=False): the same
        safe = [k.value for k in node.keywords if k.arg in ("safe_mode", None)]
        return any(not (isinstance(v, ast.Constant) and v.value is True) for v in safe)
    if called in FILE_LOADERS:
        return True  # SourceFileLoader(...).exec_module(...), spec_from_file_location(...)
    if called in FILE_MOVES and node.args:  # os.replace("m.txt", "m.py"), p.rename(q)
        target = node.args[1] if len(node.args) > 1 else None
        if target is None and isinstance(node.func, ast.Attribute) and called != "copy":
            target = node.args[0]  # Path("m.txt").rename(Path("m.txt").with_suffix(".py"))
        text = _path_text(target, literals) if target is not None else None
        return bool(text) and text.endswith(FILE_SUFFIXES)  # one built at run time: not seen
    if _zip_member(node, literals).endswith(CODE_SUFFIXES):
        return True  # z.writestr("tidy_helpers.py", src): a module in an archive
    path = None
    if (
        getattr(node.func, "id", "") == "open"
        or _resolved(node.func, imports) in ("io.open", "builtins.open")
        and node.args
    ):
        mode = node.args[1] if len(node.args) > 1 else None
        mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
        writes = isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax")
        path = node.args[0] if writes and node.args else None
    elif getattr(node.func, "attr", "") in ("write_text", "write_bytes"):
        path = node.func.value  # Path("m.py").write_text(...), (folder / "m.py").write_text(...)
    text = _path_text(path, literals) if path is not None else None
    return bool(text) and text.endswith(FILE_SUFFIXES)


def _string_code(node: ast.AST, imports: dict[str, str]) -> list[ast.AST]:
    """The arguments `node` gives a call of `STRING_RUNNERS` (or `STRING_METHODS`) as code to
    compile and run (`timeit.timeit(stmt, setup)`: both); [] for anything else."""
    if not isinstance(node, ast.Call):
        return []
    places = STRING_RUNNERS.get(_resolved(node.func, imports))
    if places is None and getattr(node.func, "attr", "") in STRING_METHODS:
        places = (("statement", 0), ("expression", 0))
    named = {k.arg: k.value for k in node.keywords}
    found = []
    for keyword, position in places or ():
        given = named.get(keyword) or (node.args[position : position + 1] or [None])[0]
        if given is not None and given not in found:
            found.append(given)
    return found


def _runs_unread_string(node: ast.Call, imports: dict[str, str]) -> bool:
    """`node` gives a `STRING_RUNNERS` call code other than a literal (`timeit.timeit(SRC)`,
    `cProfile.run(text)`), or reaches one by a name the reading cannot follow
    (`getattr(timeit, "timeit")`). timeit's callable (a lambda, a function the notebook
    defines) is code read. `yaml.load` without a safe loader builds any object its text names."""
    resolved = _resolved(node.func, imports)
    if resolved in ("yaml.load", "yaml.load_all"):
        loader = next((k.value for k in node.keywords if k.arg == "Loader"), None)
        loader = loader or (node.args[1] if len(node.args) > 1 else None)
        safe = ("SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader")
        return loader is None or _dotted(loader).split(".")[-1] not in safe
    code = _string_code(node, imports)
    timeit = resolved.startswith("timeit.")
    return any(
        _literal_code(given) is None
        and not (timeit and isinstance(given, (ast.Lambda, ast.Name)) and _callable(given))
        for given in code
    )


def _callable(node: ast.AST) -> bool:
    """A lambda, or a name (timeit's check that it is a function the notebook defines happens
    in `Code.unread_code`, which knows the notebook's functions)."""
    return isinstance(node, ast.Lambda) or getattr(node, "_function", False)


def _command_text(node: ast.Call, imports: dict[str, str]) -> str | None:
    """The text of the command `node` has a shell or program run, when it is one (`!cmd`,
    `%system cmd`, `%%bash` and `%%script` cells, `os.system(cmd)`, `subprocess.run([...])`):
    its literal words joined by spaces, None when one of them is not a literal (built at run
    time) or `node` runs no command; "" is never returned for a command."""
    name, args = _magic(node)
    shell = getattr(node.func, "attr", "") in ("system", "getoutput") and isinstance(
        node.func.value, ast.Call
    )
    if name in SHELL_RUNNERS:
        words = args
    elif shell:
        words = node.args
    elif _resolved(node.func, imports) in COMMAND_CALLS:
        words = [*node.args, *(k.value for k in node.keywords if k.arg == "args")]
    else:
        return ""
    texts = []
    for word in words:
        for part in word.elts if isinstance(word, (ast.List, ast.Tuple)) else [word]:
            text = "python" if _resolved(part, imports) == "sys.executable" else _literal_code(part)
            if text is None:
                return None
            texts.append(text)
    return " ".join(texts) or " "


def _runs_command(node: ast.Call, imports: dict[str, str]) -> bool:
    """`node` has a shell or program run text that can write or run a module (`COMMAND_CODE`:
    `!cp notes.txt m.py`, `subprocess.run(["python", ...])`), or text built at run time
    (`os.system(cmd)`); a cell of an interpreter (`%%python3`, `%%perl`), whatever it says.
    `!ls`, `!nvidia-smi`, `!pip install x` (and `%pip`, IPython's own) are not marked."""
    if _magic(node)[0] in INTERPRETER_MAGICS:
        return True
    text = _command_text(node, imports)
    if text is None:
        return True
    plain = text.replace('"', "").replace("'", "")
    if _only_reads(plain):
        return False
    return bool(text) and re.search(COMMAND_CODE, plain) is not None


#: Programs that only read or print (`!ls *.py`, `!cat helpers.py`, `!which python`): one of them
#: alone, without a redirection, a pipe or a second command, writes and runs nothing.
READ_ONLY_PROGRAMS = frozenset(
    {"ls", "cat", "head", "tail", "wc", "which", "du", "df", "nvidia-smi", "nproc", "free",
     "uname", "pwd", "lscpu", "date", "hostname", "whoami", "file", "stat", "md5sum", "sha256sum"}
)  # fmt: skip


def _only_reads(command: str) -> bool:
    """`command` is one of `READ_ONLY_PROGRAMS` alone (no `;`, `&`, `|`, `<`, `>`, no text built
    at run time), or Python asked only for its version (`python --version`).

    >>> _only_reads("ls *.py"), _only_reads("python -V"), _only_reads("cat a.py > b.py")
    (True, True, False)
    """
    if re.search(r"[;&|<>`$\\{\n]", command):
        return False
    words = command.split()
    if re.fullmatch(r"python[0-9.]*", words[0] if words else "") and words[1:] in (
        ["--version"],
        ["-V"],
    ):
        return True
    return bool(words) and words[0] in READ_ONLY_PROGRAMS


def _as_typed(node: ast.AST) -> str:
    """A magic's or `!` command's call as the notebook typed it (`%%bash`, `!cp a b`), from
    what IPython's transformer wrote; "" for anything else."""
    name, args = _magic(node)
    if name:
        cell = node.func.attr == "run_cell_magic"
        words = [a.value for a in args[:1] if isinstance(a, ast.Constant)]
        return " ".join([("%%" if cell else "%") + name, *words]).strip()
    function = getattr(node, "func", None)
    if getattr(function, "attr", "") in ("system", "getoutput") and isinstance(
        function.value, ast.Call
    ):
        words = [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
        return "!" + "".join(map(str, words))
    return ""


def _bindings(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(value, target) of a plain assignment or a `with ... as` item."""
    if isinstance(node, ast.Assign):
        return [(node.value, t) for t in node.targets]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [(i.context_expr, i.optional_vars) for i in node.items if i.optional_vars]
    return []


def _tar_extraction(node: ast.Call, imports: dict[str, str], tars: set[str]) -> bool:
    """`node` extracts a tar archive (`tarfile.open(p).extractall()`, or `t.extract(...)` of a
    name bound to one, `tars`): its members, whatever their names, land where an import finds
    them."""
    if getattr(node.func, "attr", "") not in ("extractall", "extract"):
        return False
    owner = node.func.value
    if isinstance(owner, ast.Call):
        return _resolved(owner.func, imports).startswith("tarfile.")
    return isinstance(owner, ast.Name) and owner.id in tars


def _zip_member(node: ast.Call, literals: dict[str, str]) -> str:
    """The name of the member `node` writes into an archive, when given as a literal:
    `z.writestr("m.py", text)`, `z.writestr(ZipInfo("m.py"), text)`, `z.write(path,
    "m.py")`, `z.write("m.py")` (its own name); "" for anything else."""
    called = getattr(node.func, "attr", "")
    named = {k.arg: k.value for k in node.keywords}
    if called == "writestr":
        member = node.args[0] if node.args else named.get("zinfo_or_arcname")
        if isinstance(member, ast.Call) and _dotted(member.func).endswith("ZipInfo"):
            member = member.args[0] if member.args else None
    elif called == "write":
        member = named.get("arcname") or (node.args[1:2] or node.args[:1] or [None])[0]
    else:
        return ""
    return _path_text(member, literals) or "" if member is not None else ""


def _shows_every_value(node: ast.AST) -> bool:
    """`node` sets which of a cell's values IPython shows (`InteractiveShell.ast_node_interactivity
    = "all"`, through the class, `get_ipython()` or `%config`) to a literal: a setting of
    `run_cell` only, which neither the probe's expressions nor the text of its answer go through."""
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Attribute)
        and node.targets[0].attr == "ast_node_interactivity"
        and _literal_name(node.value) is not None
    )


def _named(node: ast.AST) -> str:
    """The name a string stands for where it is used as one: the key of a subscript
    (`globals()["get_ipython"]`) or the name given to getattr; "" for anything else."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr":
        key = node.args[1] if len(node.args) > 1 else None
    else:
        return ""
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else ""


def _root(node: ast.AST) -> ast.Name | None:
    """The name an expression of attributes and subscripts starts from (`a` of a.b[0].c)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _literal_name(node: ast.AST | None) -> str | None:
    """The text of a string literal, None for anything else."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _attribute_path(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """What an expression of attributes and subscripts starts from, and the attributes on the
    way (`sys.modules["json"].dumps`: (the Name sys, ['modules', 'dumps'])); `getattr(x, "a")`
    is the attribute a of x, and `x.get("k")` the item k of x
    (`getattr(sys.modules.get("json"), "dumps")`: the same)."""
    attributes = []
    while True:
        if isinstance(node, ast.Attribute):
            attributes.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "getattr"
            and len(node.args) >= 2
            and _literal_name(node.args[1]) is not None
        ):
            attributes.append(node.args[1].value)
            node = node.args[0]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _literal_name(node.args[0]) is not None
        ):
            node = node.func.value
        else:
            return node, attributes[::-1]


def _imported_module(node: ast.AST) -> str | None:
    """The module `__import__("json")` or `importlib.import_module("json")` gives ("?" when
    its name is not a literal); None for any other expression."""
    if not isinstance(node, ast.Call) or not (
        getattr(node.func, "id", "") in IMPORTERS or getattr(node.func, "attr", "") in IMPORTERS
    ):
        return None
    name = node.args[0] if node.args else None
    return name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else "?"


def _relied_on(module: str, attributes: list[str]) -> bool:
    """The grader's probe or its kernel relies on `module`'s attribute `attributes` (`RELIED_ON`;
    of `sys`, only `SYS_RELIED_ON`)."""
    root, *rest = module.split(".")
    path = [*rest, *attributes]
    if root == "?":
        return True  # a module named at run time: any of them
    if any(a == "sys" and b in SYS_RELIED_ON for a, b in zip(path, path[1:], strict=False)):
        return True  # os.sys.modules["json"].dumps: the modules reached through another's sys
    if root == "sys":
        return bool(path) and path[0] in SYS_RELIED_ON
    return root in RELIED_ON


def _module_of(node: ast.AST, modules: dict[str, str]) -> tuple[str, list[str]] | None:
    """(module, attributes) when `node` starts from one of `modules` ({name: module}) or an
    import call, also as an operand of `or`/`and` or of `... if ... else ...` (`json or None`);
    None otherwise."""
    start, attributes = _attribute_path(node)
    if isinstance(start, (ast.BoolOp, ast.IfExp)):
        operands = start.values if isinstance(start, ast.BoolOp) else [start.body, start.orelse]
        found = [_module_of(operand, modules) for operand in operands]
        return next(((m, [*a, *attributes]) for m, a in filter(None, found)), None)
    imported = _imported_module(start)
    if imported is not None:
        return imported, attributes
    if isinstance(start, ast.Name) and start.id in modules:
        return modules[start.id], attributes
    return None


def _patches(node: ast.AST, modules: dict[str, str]) -> bool:
    """`node` sets or deletes an attribute of a module the grader relies on (`_relied_on`;
    `modules`: {name: the module it stands for}), or an item of its `__dict__` / `vars(...)`,
    or updates those."""

    def relied(target: ast.AST, more: list[str] = ()) -> bool:
        found = _module_of(target, modules)
        return found is not None and _relied_on(found[0], [*found[1], *more])

    def namespace_of(owner: ast.AST) -> bool:  # vars(json), json.__dict__, sys.modules
        found = _module_of(owner, modules)
        if found is not None and ".".join([found[0], *found[1]]).endswith("sys.modules"):
            return True  # the modules every import gives: sys.modules["hashlib"] = fake
        if found is not None and found[0].endswith(".__dict__") and not found[1]:
            return _relied_on(found[0].removesuffix(".__dict__"), [])  # d = np.__dict__
        if isinstance(owner, ast.Attribute) and owner.attr == "__dict__":
            return relied(owner.value)
        return (
            isinstance(owner, ast.Call)
            and getattr(owner.func, "id", "") == "vars"
            and bool(owner.args)
            and relied(owner.args[0])
        )

    def module_attribute(target: ast.AST) -> bool:
        if isinstance(target, ast.Attribute):
            return relied(target)
        if isinstance(target, ast.Subscript):  # vars(json)["dumps"], json.__dict__["dumps"]
            return namespace_of(target.value)
        return False

    if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
        ast.unparse(node.value)
    ]:
        return False  # json.dumps = json.dumps: the same object, nothing changes
    if _changes_internals(node):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
        written = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        stored = (ast.Store, ast.Del)  # a.b = 1 stores a.b; (a.b, c) = ... too; a[b.c] = no
        targets = [
            t for w in written for t in _nodes(w) if isinstance(getattr(t, "ctx", None), stored)
        ]
        return any(module_attribute(t) for t in targets)
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if getattr(function, "id", "") in ("setattr", "delattr") and node.args:
        name = node.args[1] if len(node.args) > 1 else None
        more = (
            [name.value] if isinstance(name, ast.Constant) and isinstance(name.value, str) else []
        )
        return relied(node.args[0], more)
    if (  # operator.setitem(json.__dict__, ...), dict.__setitem__(vars(np), ...)
        _dotted(function).split(".")[-1] in ("setitem", "delitem", "__setitem__", "__delitem__")
        and node.args
        and namespace_of(node.args[0])
    ):
        return True
    if not isinstance(function, ast.Attribute):
        return False
    if function.attr in SET_ATTRIBUTE:
        owner = function.value  # json.__setattr__(...), object.__setattr__(json, ...)
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "type":
            return True  # type(json).__setattr__(...): of whatever it is given
        # object.__setattr__(json, ...), types.ModuleType.__setattr__(json, ...)
        return relied(owner) or bool(node.args) and relied(node.args[0])
    return function.attr in NAMESPACE_CHANGES and namespace_of(function.value)


def _changes_internals(node: ast.AST) -> bool:
    """`node` assigns or deletes one of `OBJECT_INTERNALS` of anything, or an item of a
    function's `__globals__`/`__builtins__` (`f.__globals__["x"] = y`, `.update(...)`), also by
    setattr."""

    def internal(target: ast.AST) -> bool:
        if isinstance(target, ast.Subscript):  # f.__globals__["x"] = y (not self.__dict__[k])
            return namespace(target.value)
        return isinstance(target, ast.Attribute) and target.attr in OBJECT_INTERNALS

    def namespace(owner: ast.AST) -> bool:  # a function's namespaces, not an object's __dict__
        while isinstance(owner, ast.Subscript):
            owner = owner.value
        return isinstance(owner, ast.Attribute) and owner.attr in ("__globals__", "__builtins__")

    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
        written = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        stored = (ast.Store, ast.Del)
        return any(
            internal(t)
            for w in written
            for t in _nodes(w)
            if isinstance(getattr(t, "ctx", None), stored)
        )
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if getattr(function, "id", "") in ("setattr", "delattr") and len(node.args) > 1:
        return _literal_name(node.args[1]) in OBJECT_INTERNALS
    return (
        isinstance(function, ast.Attribute)
        and function.attr in NAMESPACE_CHANGES
        and namespace(function.value)
    )


#: The statements whose body runs for some calls of a function and not for others.
BRANCHES = (ast.If, ast.Match, ast.For, ast.AsyncFor, ast.While)


def _branched(function: ast.FunctionDef) -> set[int]:
    """The ids of the nodes of `function` that sit in a branch (`if training: ds = ...`): code
    that runs for some calls and not for others."""
    inside = set()
    for node in _nodes(function):
        if isinstance(node, BRANCHES) and node is not function:
            inside.update(id(sub) for sub in _nodes(node) if sub is not node)
    return inside


def _inlined(function: ast.FunctionDef, name: str, value: ast.AST) -> tuple[list[str], str]:
    """The methods `function` applies to the pipeline it returns, and the caller's name it
    starts from (the argument given for the parameter the pipeline is made from). A method
    applied in a branch of the function (`if training: ds = ds.shuffle(...)`) is named with a
    trailing "?" ("shuffle?"): the code alone cannot say whether this call ran it."""
    body = Code(trees=[ast.Module(body=function.body, type_ignores=[])])
    returned = [n.value for n in _nodes(body.trees[0]) if isinstance(n, ast.Return) and n.value]
    if not returned:
        return [], ""
    calls, start, _ = _chain(returned[-1])
    if start:
        inner, start = body._trace(start, branched=_branched(function))
        calls = inner + calls
    parameters = [a.arg for a in function.args.args]
    call = next(
        (n for n in _nodes(value) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name),
        None,
    )
    if call is None or start not in parameters:
        return calls, ""
    position = parameters.index(start)
    given = {k.arg: k.value for k in call.keywords}
    argument = call.args[position] if position < len(call.args) else given.get(start)
    return calls, argument.id if isinstance(argument, ast.Name) else ""


#: Calls that make a model from a file or another model: a model made so was not trained itself.
#: (`clone_model` makes a new model with fresh weights: `UNTRAINED_COPIERS`.)
COPIERS = ("load_model", "clone_model", "copy", "deepcopy", "from_config", "model_from_json")


#: The copiers that make a new, untrained model (`keras.models.clone_model(m)`: m's layers, fresh
#: weights): such a model then trained by its own `fit` and saved by its own `.save` is the model
#: trained (one set of initial weights for every run).
UNTRAINED_COPIERS = frozenset({"clone_model"})


#: The context managers (by the name called) that never swallow an exception: an assignment
#: under their `with` runs whenever the block goes on past it.
SURE_CONTEXTS = frozenset(
    {"scope", "Timer", "GradientTape", "device", "name_scope", "EpochClock", "timer"}
)
SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
#: The builtins that only read what they are given: a graded model given to one is not held by
#: what it returns (`isinstance(fit_model, keras.Model)`, `print(fit_model)`).
READ_ONLY_BUILTINS = frozenset({"isinstance", "print", "len", "id", "type", "repr", "str", "hash"})
#: The attributes through which an object gives what it holds (`d.values()`, `box.__dict__`).
GIVING = frozenset(
    {"get", "pop", "popleft", "popitem", "values", "items", "setdefault", "copy", "__dict__",
     "__getitem__", "__getattribute__", "__getattr__"}
)  # fmt: skip


class _Places:
    """Where code runs, in the order of the cells: a node's place (cell, line, column), the
    places a function's body runs from (where its name is used: `strategy.run(train_step)`
    inside `distributed_train_step`, called in the loop's cell), and the plain bindings of a
    name at the top of a cell (`optimizer = keras.optimizers.Adam()`, under a `with` too).

        places = _Places(trees)
        places.runs(node)  # [(4, 12, 8)]: the cell, line and column of the call that runs it
    """

    def __init__(self, trees: list[ast.Module]):
        self.trees = trees
        self.parents: dict[int, ast.AST] = {}
        self.tree_of: dict[int, int] = {}
        self.loads: dict[str, list[ast.Name]] = {}
        self._rebound: dict[str, list[tuple[int, int, int]]] = {}
        for index, tree in enumerate(trees):
            for node in _nodes(tree):
                self.tree_of[id(node)] = index
                for child in ast.iter_child_nodes(node):
                    self.parents[id(child)] = node
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    self.loads.setdefault(node.id, []).append(node)

    def at(self, node: ast.AST) -> tuple[int, int, int]:
        return (self.tree_of.get(id(node), 0), getattr(node, "lineno", 0), node.col_offset)

    def _scope(self, node: ast.AST) -> ast.AST | None:
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, SCOPE_NODES):
            parent = self.parents.get(id(parent))
        return parent

    def _inside(self, node: ast.AST, scope: ast.AST) -> bool:
        while node is not None:
            if node is scope:
                return True
            node = self.parents.get(id(node))
        return False

    def runs(self, node: ast.AST, depth: int = 0) -> list[tuple[int, int, int]]:
        """The places the code of `node` runs from: its own at the top of a cell; in a
        function, every place its name is used (a decorator other than `tf.function`, or no
        use, adds the def's own place); an inline lambda runs where it is written."""
        scope = self._scope(node)
        if scope is None or depth > 8:
            return [self.at(node)]
        if isinstance(scope, ast.Lambda):
            parent = self.parents.get(id(scope))
            names = _targets(parent) if isinstance(parent, (ast.Assign, ast.NamedExpr)) else []
        else:
            names = [scope.name]
        uses = [
            use
            for name in names
            for use in self.loads.get(name, [])
            if not self._inside(use, scope)
        ]
        found = [place for use in uses for place in self.runs(use, depth + 1)]
        decorated = any(
            _dotted(d).split(".")[-1] != "function" for d in getattr(scope, "decorator_list", [])
        )
        if not uses or decorated:
            found += self.runs(scope, depth + 1)
        return found

    def rebound(self, name: str, *, loops: bool = False) -> list[tuple[int, int, int]]:
        """The places of the plain assignments to `name` at the top of a cell (under `with`
        only, of a context manager that lets every exception through, `SURE_CONTEXTS`: one
        under `if`, `for` or `try`, or under `with contextlib.suppress(...)` or another that
        may swallow an exception, may not run); with `loops`, also each `for` there whose
        target is `name` over a literal list or tuple of items (it binds `name` at least once:
        `for model in (a, b)`, not `for model in []` or `for model in models`)."""
        if loops:
            return self._rebound_by_loops(name)
        if name in self._rebound:
            return self._rebound[name]
        found = self._rebound[name] = []
        for index, statement in self._sure_statements():
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and name in _targets(statement):
                if statement.value is not None:
                    found.append((index, statement.lineno, statement.col_offset))
        return found

    def _sure_statements(self):
        """(cell index, statement) of each statement that surely runs once its cell runs: at
        the top of a cell, or in the body of a `with` of `SURE_CONTEXTS` there."""
        for index, tree in enumerate(self.trees):
            todo = list(tree.body)
            while todo:
                statement = todo.pop()
                if isinstance(statement, (ast.With, ast.AsyncWith)) and all(
                    isinstance(item.context_expr, ast.Call)
                    and (
                        getattr(item.context_expr.func, "attr", "")
                        or getattr(item.context_expr.func, "id", "")
                    )
                    in SURE_CONTEXTS
                    for item in statement.items
                ):
                    todo += statement.body
                else:
                    yield index, statement

    def _rebound_by_loops(self, name: str) -> list[tuple[int, int, int]]:
        key = f"for {name}"
        if key in self._rebound:
            return self._rebound[key]
        found = list(self.rebound(name))
        for index, statement in self._sure_statements():
            if (
                isinstance(statement, (ast.For, ast.AsyncFor))
                and isinstance(statement.target, ast.Name)
                and statement.target.id == name
                and isinstance(statement.iter, (ast.Tuple, ast.List))
                and statement.iter.elts
                and not any(isinstance(e, ast.Starred) for e in statement.iter.elts)
            ):
                found.append((index, statement.lineno, statement.col_offset))
        self._rebound[key] = sorted(found)
        return self._rebound[key]


#: Builtins that copy a list of callbacks and hand on the same objects (`callbacks=list(cbs)`).
CALLBACK_COPIES = frozenset({"list", "tuple", "sorted", "reversed"})


def _callback_names(value: ast.AST) -> list[str]:
    """The names of the callback objects in a `callbacks=` value, to which Keras gives the model
    (`[fit_clock, checkpoints]`, `cbs`, `cbs + [clock]`, `[*cbs]`): not the names a callback made
    in place is reached through (`keras` of `keras.callbacks.TerminateOnNaN()`: a new object no
    name holds; a callback class of the notebook's own holds through its `self`).

    >>> value = ast.parse("[clock, *more, keras.callbacks.TerminateOnNaN()] + cbs").body[0].value
    >>> _callback_names(value)
    ['clock', 'more', 'cbs']
    >>> _callback_names(ast.parse("list(cbs)").body[0].value)
    ['cbs']
    """
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, ast.Starred):
        return _callback_names(value.value)
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return [name for element in value.elts for name in _callback_names(element)]
    if isinstance(value, ast.BinOp):
        return _callback_names(value.left) + _callback_names(value.right)
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") in CALLBACK_COPIES:
        return [name for given in value.args for name in _callback_names(given)]  # list(cbs)
    return []


def _fresh_clone(call: ast.Call) -> bool:
    """`keras.models.clone_model(m)` with neither `clone_function` nor `call_function` (nor more
    positional arguments than the input tensors): Keras makes new layers, with new weights, so the
    clone is another model, not `m` (`keras/src/models/cloning.py`).

    >>> _fresh_clone(ast.parse("keras.models.clone_model(fit_model)").body[0].value)
    True
    >>> _fresh_clone(ast.parse("clone_model(m, clone_function=lambda layer: layer)").body[0].value)
    False
    """
    return (
        _dotted(call.func).split(".")[-1] == "clone_model"
        and len(call.args) <= 2
        and not any(k.arg in (None, "clone_function", "call_function") for k in call.keywords)
    )


class _Holds:
    """Whether an expression holds model `name` where it runs (`Code._model_names`): the model's
    name appears in it bare, or a name holding it does: anywhere in it but as the object of an
    attribute read (`fit_model.layers`, the parts walk's business; but for `GIVING`: `d.values()`
    gives what `d` holds) or as an argument of a read-only builtin (`print`, ...). A name
    bound from an expression that holds the model holds it: at the top of the cells (from where
    a loop around the binding starts) until it is bound again at the top of a cell
    (`_Places.rebound`, a `for` over a literal list too), not where a function of the notebook's
    own has a local of that name; in a function, there (a method's `self`: in all its class's
    methods); a global declared in a function, everywhere.

        holds = _Holds("fit_model", places)
        holds.bind("model", for_node)  # for model in (fit_model, single_model): ...
        holds(use)                     # True before `model = make_model()`, False after
        holds.within(expression)       # (fit_model, None), {"m": fit_model}, copy.copy(fit_model)
    """

    LOOPS = (
        ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp
    )  # fmt: skip

    def __init__(self, name: str, places: _Places):
        self.name = name
        self.places = places
        self.starts: dict[str, set[tuple[int, int, int]]] = {}
        self.scoped: dict[str, set[int]] = {}  # name: ids of the scopes it holds the model in
        self.everywhere: set[str] = set()
        self._runs: dict[int, list[tuple[int, int, int]]] = {}
        self._locals: dict[int, set[str]] = {}

    def size(self) -> int:
        scoped = sum(map(len, self.scoped.values()))
        return len(self.everywhere) + sum(map(len, self.starts.values())) + scoped

    def bind(self, target: str, node: ast.AST, scope: ast.AST | None = None) -> None:
        """`target` is bound to what holds the model by `node` (an assignment, a loop, a
        comprehension's generator, a def), in `scope` (by default the function `node` is in)."""
        if target == self.name or target in self.everywhere:
            return
        scope = scope or self.places._scope(node)
        if (
            isinstance(scope, ast.ClassDef)
            or scope is not None
            and target in self._local_names(scope)
        ):
            self.scoped.setdefault(target, set()).add(id(scope))
            return
        if scope is not None:  # global m; m = fit_model
            self.everywhere.add(target)
            self.starts.pop(target, None)
            return
        start, parent = node, node
        while parent is not None:  # a loop runs its body again: held from the loop's start
            if isinstance(parent, self.LOOPS):
                start = parent
            parent = self.places.parents.get(id(parent))
        self.starts.setdefault(target, set()).add(self.places.at(start))

    def _local_names(self, scope: ast.AST) -> set[str]:
        if id(scope) not in self._locals:
            self._locals[id(scope)] = _scope_locals(scope, set())
        return self._locals[id(scope)]

    def _local(self, node: ast.Name) -> bool:
        """`node` is a local of a function of the notebook's (a parameter, a name bound in it)."""
        parent = self.places.parents.get(id(node))
        while parent is not None:
            if isinstance(parent, SCOPE_NODES) and node.id in self._local_names(parent):
                return True
            parent = self.places.parents.get(id(parent))
        return False

    def __call__(self, node: ast.Name) -> bool:
        if node.id == self.name or node.id in self.everywhere:
            return True
        scopes = self.scoped.get(node.id, ())
        parent = self.places.parents.get(id(node)) if scopes else None
        while parent is not None:
            if id(parent) in scopes:
                return True
            parent = self.places.parents.get(id(parent))
        starts = self.starts.get(node.id)
        if not starts or self._local(node):
            return False
        if id(node) not in self._runs:
            self._runs[id(node)] = self.places.runs(node)
        again = self.places.rebound(node.id, loops=True)
        return any(
            start < at and not any(start < other < at for other in again)
            for at in self._runs[id(node)]
            for start in starts
        )

    def _bare(self, node: ast.AST, top: ast.AST) -> bool:
        """`node` stands bare in `top`: not read an attribute of, nor given to a read-only
        builtin, on the way up to `top`."""
        child, parent = node, self.places.parents.get(id(node))
        while child is not top and parent is not None:
            if isinstance(parent, ast.Attribute) and parent.attr not in GIVING:
                return False
            if (
                isinstance(parent, ast.Call)
                and child is not parent.func
                and getattr(parent.func, "id", "") in READ_ONLY_BUILTINS
            ):
                return False
            if isinstance(parent, ast.Call) and _fresh_clone(parent):
                return False  # a clone with new layers, new weights: not the model
            child, parent = parent, self.places.parents.get(id(parent))
        return True

    def within(self, node: ast.AST) -> bool:
        """`node` holds the model: a name holding it stands bare in it (or `gc.get_objects()`,
        which gives every object)."""
        return any(
            isinstance(sub, ast.Name)
            and isinstance(sub.ctx, ast.Load)
            and self(sub)
            and self._bare(sub, node)
            or isinstance(sub, ast.Call)
            and getattr(sub.func, "attr", getattr(sub.func, "id", None)) == "get_objects"
            for sub in _nodes(node)
        )

    def reached(self, node: ast.AST) -> bool:
        """`node` holds the model or is read from what does (`d["m"]`, `B.m`,
        `copy.copy(fit_model).layers[0]`, a method's result `fit_model.get_layer("d")`), not
        through its optimizer (`fit_model.optimizer.learning_rate`: the optimizer's rules)."""
        while not self.within(node):
            if isinstance(node, ast.Attribute) and node.attr != "optimizer":
                node = node.value
            elif isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                node = node.func.value
            else:
                return False
        return True


def _kept(method):
    """Method `method` of a `Code`, computed once per `Code` (its trees do not change once
    `Code.of` has read them; checks ask the same question several times per submission): each
    call returns a copy of the first answer's lists, so a caller may change what it gets.

    >>> code = Code.of({"cells": [{"source": "x = 1"}]})
    >>> code._run_code() is not code._run_code(), code._run_code() == code._run_code()
    (True, True)
    """

    @functools.wraps(method)
    def kept(self):
        answers = self.__dict__.setdefault("_answers", {})
        if method.__name__ not in answers:
            answers[method.__name__] = method(self)
        answer = answers[method.__name__]
        return tuple(list(part) for part in answer) if isinstance(answer, tuple) else list(answer)

    return kept


@dataclass
class Code:
    """The submission's code cells, parsed."""

    trees: list[ast.Module] = field(default_factory=list)
    #: The number of the observed cell each of `trees` was parsed from: its execution count in
    #: the executed notebook (`In [N]`), which counts the code cells that hold code, from 1 (the
    #: grader runs them in order, and the kernel numbers each one it runs).
    cells: list[int] = field(default_factory=list)
    #: {name: the one expression it is bound to} for names bound once (`_fold_buffers`).
    _once: dict = field(default_factory=dict, repr=False)
    #: The builtins the reading folds or counts with that the notebook binds (`_fold_buffers`).
    _shadowed: frozenset = field(default=frozenset(), repr=False)
    #: What `_fold` may read beyond arithmetic (`_fold_buffers`).
    _folding: Folding = field(default_factory=Folding, repr=False)
    #: (cell, code, why) of the code the kernel ran that is not read: "deep" for a cell nested
    #: too deep to parse here (`TooDeep`), "cut" for the first cell past `MAX_CHARS`.
    unparsed: list = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, observed: dict | None) -> Code:
        """The code of the cells the grader observed (empty without observations)."""
        code, chars, number = cls(), 0, 0
        for cell in (observed or {}).get("cells", []):
            source = cell.get("source") if isinstance(cell, dict) else None
            if not isinstance(source, str):
                continue
            number += bool(source.strip() or cell.get("cut"))  # nbclient numbers the others
            chars += len(source)
            if chars > MAX_CHARS or cell.get("cut"):  # the observations cut it (`MAX_CHARS`)
                code.unparsed.append((number, source.strip().split("\n")[0][:80], "cut"))
                break
            try:
                tree = _python(source, strict=True)
            except TooDeep:
                code.unparsed.append((number, source.strip().split("\n")[0][:80], "deep"))
                continue
            if tree is not None:
                code.trees.append(tree)
                code.cells.append(number)
        code._fold_buffers()
        return code

    def _fold_buffers(self) -> None:
        """Write the number into each `.shuffle(buffer)` whose buffer is constant arithmetic
        (`_fold`: `2 ** 9`, `4 * GLOBAL_BATCH`, a name bound once to such an expression), as if
        the literal were written there; one that depends on the replicas
        (`strategy.num_replicas_in_sync`) gets its smallest value at 1 to `MAX_REPLICAS`, so that
        the point is the same at every device count: below `SMALL_BUFFER` such a shuffle keeps
        the order or most of it (`_calls` names it "shuffle(1)" or "shuffle(few)")."""
        assigned: dict[str, list[ast.AST]] = {}
        stores: dict[str, int] = {}
        other = set()
        for node in self._walk():
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
                    elif _paired(target, node.value):  # BUFFER, SEED = 10_000, 42
                        for name, value in zip(target.elts, node.value.elts, strict=True):
                            if isinstance(name, ast.Name):
                                assigned.setdefault(name.id, []).append(value)
            elif isinstance(node, ast.arg):
                other.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                other.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                other.add(node.name)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                stores[node.id] = stores.get(node.id, 0) + 1
        once = {
            name: values[0]
            for name, values in assigned.items()
            if len(values) == 1 and stores.get(name) == 1 and name not in other
        }
        self._once = once
        imported = self._imported()
        self._shadowed = frozenset(self._bound_names() & {*FOLDED_CALLS, "len"})
        self._folding = Folding(
            pickers=frozenset(
                name for name, value in once.items() if self._course_settings(value, imported)
            ),
            shadowed=self._shadowed,
        )
        parameters = self._parameter_buffers(once)
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "shuffle"):
                    continue
                if node.args:
                    node.args[0] = _folded(node.args[0], once, self._folding)
                for keyword in node.keywords:
                    if keyword.arg == "buffer_size":
                        keyword.value = _folded(keyword.value, once, self._folding)
                buffer = [
                    *node.args[:1],
                    *(k.value for k in node.keywords if k.arg == "buffer_size"),
                ]
                if buffer and not isinstance(buffer[0], ast.Constant):
                    given = parameters.get(id(node))
                    place = (index, node.lineno, node.col_offset)
                    if given is not None:
                        self._set_buffer(node, given)
                    elif not self._counts_examples(buffer[0], once, at=place):
                        node.unread_buffer = ast.unparse(buffer[0])

    @staticmethod
    def _course_settings(value: ast.AST, imported: dict[str, str]) -> bool:
        """`value` calls the course's `course_utils.setup()` (imported as the course's), whose
        settings' `pick` the reading folds (`_fold`)."""
        if not isinstance(value, ast.Call):
            return False
        root, _, rest = _dotted(value.func).partition(".")
        path = imported.get(root, "")
        return (f"{path}.{rest}" if rest else path) == "course_utils.setup"

    def _set_buffer(self, call: ast.Call, given: list[ast.AST]) -> None:
        """Read the buffer of `call`, a parameter of the notebook's own function, from the
        arguments `given` for it where the function is called (`_parameter_buffers`): at the
        smallest number among them when each is a number or the examples' count
        (`_counts_examples`), unread otherwise."""
        numbers = [g.value for g in given if isinstance(g, ast.Constant)]
        read = all(
            isinstance(g, ast.Constant)
            and isinstance(g.value, (int, float))
            or self._counts_examples(g, self._once)
            for g in given
        )
        if not read:
            call.unread_buffer = " / ".join(ast.unparse(g) for g in given)
        elif numbers:
            smallest = ast.Constant(value=min(numbers))
            if call.args:
                call.args[0] = smallest
            for keyword in call.keywords:
                if keyword.arg == "buffer_size":
                    keyword.value = smallest

    def _parameter_buffers(self, once: dict[str, ast.AST]) -> dict[int, list[ast.AST]]:
        """{id of a `.shuffle(p)` call in a function of the notebook's own whose buffer is its
        parameter `p`: the arguments given for `p` where the function is called (its default
        where not given), each folded (`_folded`)}; calls that do not say (`*args`) leave it
        out."""
        functions = self._functions()
        calls: dict[str, list[ast.Call]] = {}
        for node in self._walk():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                calls.setdefault(node.func.id, []).append(node)
        found = {}
        for name, function in functions.items():
            parameters = [a.arg for a in function.args.args]
            defaults = dict(zip(parameters[::-1], function.args.defaults[::-1], strict=False))
            for node in _nodes(function):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "shuffle"):
                    continue
                buffer = [
                    *node.args[:1],
                    *(k.value for k in node.keywords if k.arg == "buffer_size"),
                ]
                if not buffer or not isinstance(buffer[0], ast.Name):
                    continue
                if buffer[0].id not in parameters or not calls.get(name):
                    continue
                position = parameters.index(buffer[0].id)
                given = []
                for call in calls[name]:
                    if any(isinstance(a, ast.Starred) for a in call.args) or any(
                        k.arg is None for k in call.keywords
                    ):
                        break
                    named = {k.arg: k.value for k in call.keywords}
                    argument = (
                        call.args[position]
                        if position < len(call.args)
                        else named.get(buffer[0].id, defaults.get(buffer[0].id))
                    )
                    if argument is None:
                        break
                    given.append(_folded(argument, once, self._folding))
                else:
                    found[id(node)] = given
        return found

    def _counts_examples(
        self, node: ast.AST, once: dict[str, ast.AST], depth: int = 0, at: tuple | None = None
    ) -> bool:
        """`node`, at the place `at` (None: the end of the code), is the count of the whole
        training split's examples: `len(examples)` (the builtin `len`, not one the notebook
        binds), `examples.cardinality()` or `tf.data.experimental.cardinality(examples)` (in
        `int(...)`, with `.numpy()`), `info.splits["train"].num_examples`, or a name bound once
        to one of them (`NUM_TRAIN`), where `examples` is what a data set loader gave for the
        training split, whole (`Code._loaded`), or arrays of all of them taken in one batch
        (`images, labels = next(iter(examples.batch(NUM_TRAIN)))`)."""
        if depth > 10:
            return False
        if isinstance(node, ast.Name) and node.id in once:
            found = self._assignments_in_order(node.id)
            place = found[0][0] if found else at
            return self._counts_examples(once[node.id], once, depth + 1, place)
        if isinstance(node, ast.Call) and not node.keywords:
            function = node.func
            if (
                isinstance(function, ast.Name)
                and function.id in ("int", "len")
                and function.id not in self._shadowed
                and len(node.args) == 1
            ):
                if function.id == "int":
                    return self._counts_examples(node.args[0], once, depth + 1, at)
                return self._loaded(node.args[0], at, once)
            if isinstance(function, ast.Attribute) and not node.args:
                if function.attr == "numpy":
                    return self._counts_examples(function.value, once, depth + 1, at)
                if function.attr == "cardinality":
                    return self._loaded(function.value, at, once)
            if self._tensorflow_path(function) == "data.experimental.cardinality":
                return len(node.args) == 1 and self._loaded(node.args[0], at, once)
        if isinstance(node, ast.Attribute) and node.attr == "num_examples":
            root, train = node.value, False
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                if isinstance(root, ast.Subscript):
                    train |= getattr(root.slice, "value", None) == "train"
                root = root.value
            return train and self._loaded(root, at, once, whole=False)
        return False

    def _tensorflow_path(self, function: ast.AST) -> str:
        """The path of `function` inside TensorFlow (`tf.data.experimental.cardinality` ->
        "data.experimental.cardinality") when its root is TensorFlow imported, else ""."""
        root, _, rest = _dotted(function).partition(".")
        return rest if self._imported().get(root) == "tensorflow" else ""

    def _loaded(
        self,
        node: ast.AST,
        at: tuple | None = None,
        once: dict[str, ast.AST] | None = None,
        *,
        whole: bool = True,
    ) -> bool:
        """`node`, at `at`, is what a data set loader of the course, TensorFlow Datasets or
        Keras gave (`data.load("svhn_cropped", "train")`, `tfds.load(...)`, `tfds.builder(...)`;
        with `whole`, for the training split as a literal `"train"`, without `limit=`),
        directly or through the names bound to it where it is used (the assignment in force)
        and `cache`, `map`, `prefetch` (which keep every example); or (with `once`) arrays of
        all of them taken in one batch, `next(iter(examples.batch(NUM_TRAIN)))`."""
        imported = self._imported()
        for _ in range(20):
            taken = _first_batch(node)
            if taken is not None and once is not None:
                examples, size = taken
                return self._loaded(examples, at, once) and self._counts_examples(size, once, 1, at)
            calls, source = _calls(node)
            loader = _loader_call(node)
            if LOADERS & set(calls) and source in imported:
                module = imported[source].split(".")[0]
                return (
                    loader is not None
                    and module in DATASET_LOADERS
                    and (not whole or _whole_training_split(loader))
                )
            if not set(calls) <= KEPT_EXAMPLES or not source or source in imported:
                return False
            found = [
                (place, n)
                for place, n in self._assignments_in_order(source)
                if at is None or place < at
            ]
            if not found:
                return False
            at, assignment = found[-1]
            node = assignment.value
            if not isinstance(node, ast.AST) or source not in _targets(assignment):
                return False
        return False

    @_kept
    def _run_code(self) -> list[tuple[int, ast.Module]]:
        """(cell number, tree) of every piece of code the kernel runs: the cells, and the text
        of magics and calls that run Python (`MAGIC_CODE`: a `%%time` cell, a `%config` value, a
        `%%writefile` file; `exec("...")`; `STRING_RUNNERS`: `timeit.timeit("...")`), where it
        parses (nested up to 3 deep)."""
        numbers = self.cells or [0] * len(self.trees)
        found = list(zip(numbers, self.trees, strict=False))
        todo = list(found)
        for _ in range(3):
            more = []
            imports = _imports(found)
            for number, tree in todo:
                for node in _nodes(tree):
                    texts = [_code_text(node)]
                    texts += [_literal_code(a) or "" for a in _string_code(node, imports)]
                    for text in filter(None, texts):
                        parsed = _python(text)
                        if parsed is not None:
                            more.append((number, parsed))
            found += more
            todo = more
        return found

    def _walk(self):
        for tree in self.trees:
            yield from _nodes(tree)

    def _imported(self) -> dict[str, str]:
        """{name: the module or object it is imported as}, for names only imports bind."""
        return self._imports

    @cached_property
    def _imports(self) -> dict[str, str]:
        """`_imported`, read once: the code does not change, and every call site of a strategy
        asks again (a walk of every tree each time made the reading quadratic)."""
        imported: dict[str, str] = {}
        bound = set()
        for node in self._walk():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    imported[name] = alias.name if alias.asname else name
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
        return {name: path for name, path in imported.items() if name not in bound}

    def _is_mirrored(self, node: ast.AST) -> bool:
        """`node` calls `tf.distribute.MirroredStrategy(...)` (tf imported as TensorFlow)."""
        if not isinstance(node, ast.Call):
            return False
        root, _, rest = _dotted(node.func).partition(".")
        path = self._imported().get(root, "")
        return bool(path) and ".".join(filter(None, [path, rest])) == MIRRORED

    @cached_property
    def _makers(self) -> set[str]:
        """The notebook's own functions every `return` of which gives a new
        `tf.distribute.MirroredStrategy(...)` (one level: `def make_strategy(): return
        tf.distribute.MirroredStrategy()`)."""
        return self._mirrored_makers()

    def _mirrored_makers(self) -> set[str]:
        """The notebook's own functions every `return` of which gives a new
        `tf.distribute.MirroredStrategy(...)` (one level: `def make_strategy(): return
        tf.distribute.MirroredStrategy()`)."""
        makers = set()
        for name, function in self._functions().items():
            returned = [n.value for n in _nodes(function) if isinstance(n, ast.Return)]
            if returned and all(v is not None and self._is_mirrored(v) for v in returned):
                makers.add(name)
        return makers

    def strategies(self) -> set[str]:
        """The names that only ever hold a `tf.distribute.MirroredStrategy(...)` (as read): made
        by a call of it, or of a function of the notebook's own that returns one, assigned
        plainly or with an annotation, or an alias of such a name (`s = strategy`)."""
        makers = self._makers
        assigned: dict[str, list[ast.AST | None]] = {}
        for node in self._walk():
            for name in _targets(node):
                plain = isinstance(node, (ast.Assign, ast.AnnAssign))
                value = getattr(node, "value", None) if plain else None
                assigned.setdefault(name, []).append(value)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                assigned.setdefault(node.name, []).append(None)

        def made(value: ast.AST | None, known: set[str]) -> bool:
            if value is None:
                return False
            if isinstance(value, ast.Name):  # an alias
                return value.id in known
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) in makers:
                return True
            return self._is_mirrored(value)

        known: set[str] = set()
        while True:  # aliases of aliases: each round can only add names
            found = {n for n, values in assigned.items() if all(made(v, known) for v in values)}
            if found == known:
                return known
            known = found

    def _is_scope(self, item: ast.withitem, strategies: set[str], scopes: set[str]) -> bool:
        """`with strategy.scope():` of a MirroredStrategy (`strategies`, or made right there), or
        `with scope:` of a name that holds one (`scopes`, `scope_names`)."""
        if isinstance(item.context_expr, ast.Name):
            return item.context_expr.id in scopes
        return self._scope_call(item.context_expr, strategies)

    def _scope_call(self, call: ast.AST, strategies: set[str]) -> bool:
        """`call` is `strategy.scope()` of a MirroredStrategy (`strategies`, or made right
        there)."""
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "scope"
        ):
            return False
        owner = call.func.value
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) in self._makers:
            return True  # with make_strategy().scope():
        return (isinstance(owner, ast.Name) and owner.id in strategies) or self._is_mirrored(owner)

    def scope_names(self, strategies: set[str]) -> set[str]:
        """The names bound once in all the code, by a plain assignment of a MirroredStrategy's
        scope (`scope = strategy.scope()`, then `with scope:`). A name bound more than once
        (assigned again, a loop's target, a parameter, an import, a namespace's key) is left
        out, whatever it holds then: which binding a `with` sees is not read.

            scope = strategy.scope()     # 'scope' is a scope name
            mine = strategy.scope()
            mine = nullcontext()         # 'mine' is not
        """
        bindings: dict[str, int] = {}
        values: dict[str, ast.AST] = {}
        for node in self._walk():
            names = [_bound_name(node), (_namespace_binding(node) or [None])[0]]
            if isinstance(node, ast.arg):
                names.append(node.arg)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names += [(a.asname or a.name).split(".")[0] for a in node.names]
            for name in filter(None, names):
                bindings[name] = bindings.get(name, 0) + 1
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    values[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    values[node.target.id] = node.value
        return {
            name
            for name, value in values.items()
            if bindings.get(name) == 1 and self._scope_call(value, strategies)
        }

    def assignments(self, name: str) -> list[tuple[ast.AST, bool]]:
        """Each assignment to `name`, anywhere, with whether it lies inside a
        `with strategy.scope():` block of a `tf.distribute.MirroredStrategy` (`strategies`; at
        any depth: a loop or an `if` inside it too)."""
        found: list[tuple[ast.AST, bool]] = []
        strategies = self.strategies()
        scopes = self.scope_names(strategies)
        for tree in self.trees:
            stack: list[tuple[ast.AST, bool]] = [(tree, False)]
            while stack:
                node, in_scope = stack.pop()
                if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                    self._is_scope(i, strategies, scopes) for i in node.items
                ):
                    in_scope = True
                if name in _targets(node):
                    found.append((node, in_scope))
                stack.extend((child, in_scope) for child in ast.iter_child_nodes(node))
        return found

    def functions_with_scope(self) -> set[str]:
        """The functions whose body opens a MirroredStrategy's `with ....scope():` block."""
        names = set()
        strategies = self.strategies()
        scopes = self.scope_names(strategies)
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(sub, (ast.With, ast.AsyncWith))
                and any(self._is_scope(i, strategies, scopes) for i in sub.items)
                for sub in _nodes(node)
            ):
                names.add(node.name)
        return names

    def assigned_in_scope(self, name: str) -> bool | None:
        """Whether `name` is created under a strategy's scope: every assignment to it lies in a
        `with ....scope():` block or calls a function that opens one. A placeholder creates
        nothing and is left out (`custom_model = None` before the scope, an annotation without
        a value). None when the code never assigns it anything else."""
        found = [
            (node, in_scope)
            for node, in_scope in self.assignments(name)
            if not isinstance(getattr(node, "value", None), (ast.Constant, type(None)))
        ]
        if not found:
            return None
        helpers = self.functions_with_scope()

        def scoped(assignment: tuple[ast.AST, bool]) -> bool:
            node, in_scope = assignment
            value = getattr(node, "value", None)
            called = [
                sub.func.id
                for sub in _nodes(value or ast.Module(body=[], type_ignores=[]))
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
            ]
            return in_scope or bool(helpers & set(called))

        return all(map(scoped, found))

    def _assignments_in_order(self, name: str) -> list[tuple[tuple[int, int, int], ast.AST]]:
        """Each assignment to `name` with its place in the code (cell, line, column), in order."""
        return list(self._assignments.get(name, ()))

    @cached_property
    def _assignments(self) -> dict[str, list[tuple[tuple[int, int, int], ast.AST]]]:
        """`_assignments_in_order` of every name, read in one walk of the trees."""
        placed: dict[str, list[tuple[tuple[int, int, int], ast.AST]]] = {}
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if getattr(node, "value", None) is None:
                    continue
                for name in set(_targets(node)):
                    placed.setdefault(name, []).append(
                        ((index, node.lineno, node.col_offset), node)
                    )
        return {name: sorted(found, key=lambda item: item[0]) for name, found in placed.items()}

    def _functions(self) -> dict[str, ast.FunctionDef]:
        """{name: def} of the notebook's own functions the reading follows: those not in
        `unfollowed` (a decorator that can swap what a call is given, or a name bound again)."""
        unfollowed = self.unfollowed
        return {
            node.name: node
            for node in self._walk()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name not in unfollowed
        }

    @cached_property
    def unfollowed(self) -> frozenset[str]:
        """The names of the notebook's own functions the reading does not follow: a `def` with a
        decorator other than `tf.function` (which can replace the function, and what its calls
        are given: `@plain def train(model, ds)` trains on a dataset of the decorator's), or
        whose name is bound in any other way too (assigned, another `def` or class, imported,
        a loop's target, declared `global`): which function a call reaches is not read. The
        same `def` written twice (a cell copied) is one function.

            @tf.function
            def distributed_train_step(inputs): ...   # followed
            @plain
            def train(model, ds): ...                  # 'train' is unfollowed
        """
        defs: dict[str, set[str]] = {}
        others: set[str] = set()
        decorated: set[str] = set()
        methods = {  # a class's methods are its attributes, never called by a bare name
            id(sub) for node in self._walk() if isinstance(node, ast.ClassDef) for sub in node.body
        }
        for node in self._walk():
            if id(node) in methods:
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.setdefault(node.name, set()).add(ast.dump(node))  # the same def twice: one
                if any(not self._tf_function(d) for d in node.decorator_list):
                    decorated.add(node.name)
            elif isinstance(node, ast.ClassDef):
                others.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                others.update(node.names)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                others.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                others.add(node.id)
            elif _bound_name(node):  # a capture pattern
                others.add(_bound_name(node))
        return frozenset(
            name for name, made in defs.items() if len(made) > 1 or name in others | decorated
        )

    def _tf_function(self, decorator: ast.AST) -> bool:
        """`decorator` is `tf.function` or `tf.function(...)` (tf imported as TensorFlow), which
        compiles the function it is given and calls it with the same arguments."""
        function = decorator.func if isinstance(decorator, ast.Call) else decorator
        root, _, rest = _dotted(function).partition(".")
        path = self._imported().get(root, "")
        return bool(path) and ".".join(filter(None, [path, rest])) == "tensorflow.function"

    def pipeline(self, name: str, depth: int = 20, at: tuple | None = None) -> list[str]:
        """The tf.data methods called to make `name`, first to last, following the names it is
        made from (train_ds = cached.shuffle(...).batch(...), cached = examples.cache():
        ['cache', 'shuffle', 'batch']), a name reassigned from itself (train_ds =
        train_ds.batch(...): the assignment before it), and a function of the notebook's own
        that returns a pipeline (train_ds = make(cached): its return value, its argument; a
        method it applies in a branch, such as `if training:`, is named with a trailing "?").
        With `at` (a place, `training_places`), the assignment in force there: the last one
        before it. A shuffle whose buffer the reading cannot read is named "shuffle" here
        (`training_places` fails it for the training set)."""
        methods = self._trace(name, depth, at=at)[0]
        return [method.replace("shuffle(unread)", "shuffle") for method in methods]

    def _trace(
        self,
        name: str,
        depth: int = 20,
        branched: set[int] | None = None,
        at: tuple | None = None,
    ) -> tuple[list[str], str]:
        """`pipeline`, and the name the pipeline starts from (one this code does not assign).
        The methods of an assignment among `branched` (node ids) get a trailing "?"."""
        methods: list[str] = []
        functions = self._functions()
        before = at  # only assignments before this place (a name made from itself, `at`)
        while name and depth > 0:
            depth -= 1
            found = [
                (place, node)
                for place, node in self._assignments_in_order(name)
                if before is None or place < before
            ]
            if not found:
                break
            place, node = found[-1]
            calls, source, helper = _chain(node.value)
            if helper in functions:
                inner, source = _inlined(functions[helper], helper, node.value)
                calls = inner + calls
            if calls[:3] == SLICED and self._slices_loaded(node.value, place):
                calls = calls[2:]  # the loaded examples, sliced: not a dataset of its own
            if branched and id(node) in branched:
                calls = [call if call.endswith("?") else f"{call}?" for call in calls]
            methods = calls + methods
            before = place if source == name else at
            name = source
        return methods, name

    def _slices_loaded(self, value: ast.AST, place: tuple) -> bool:
        """`value` (assigned at `place`) starts from `tf.data.Dataset.from_tensor_slices(...)`
        of arrays computed from a data set the code loaded (`images, labels =
        next(iter(train_examples.batch(NUM_TRAIN)))`): the loaded examples in a new dataset,
        whose order the probe reads, not one made beside them."""
        sliced = [
            sub
            for sub in _nodes(value)
            if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == SLICED[-1]
        ]
        if not sliced or not sliced[-1].args:
            return False
        marks = self._origins(sliced[-1].args[0], place)
        return any(mark.startswith("<load ") for mark in marks)

    def training_places(
        self, name: str, *, baseline: str = ""
    ) -> tuple[list[tuple[int, int, int]], list[TrainingProblem]]:
        """Where (cell, line, column) the code trains on the pipeline `name`, in order:
        `model.fit(name, ...)` (or `x=name`) and `strategy.experimental_distribute_dataset(name)`;
        and what the reading cannot accept (`TrainingProblem`), first found first.

        A problem is a training call not given the bare name `name` (`model.fit(other)`, a
        `*`/`**` argument, `distribute_datasets_from_function` of the training examples), a
        training method reached in a way the reading cannot follow (`getattr(model, "fit")`,
        `f = model.fit`, `getattr(model, "fi" + "t")`, a call it cannot resolve given the
        training examples), no `fit(name)` or no `experimental_distribute_dataset(name)` (the
        exercise asks for both), or `name` in force at a training call shuffled only with a
        buffer the reading cannot read (`Code._fold_buffers`). An
        `experimental_distribute_dataset` of other examples (the test set) is not training.
        The `fit` calls of `baseline` (`baseline_fits`) are that model's matter, left out, unless
        it is bound to another name (`single_model = fit_model`)."""
        bound = self.other_bindings(name)
        if bound:
            return [], [TrainingProblem("bound", *bound[0])]
        places, problems = self._training_calls(name, self._own_model(baseline))
        found = {kind for kind, _ in places}
        for kind, missing in (
            ("fit", "no_fit"),
            ("experimental_distribute_dataset", "no_distribute"),
        ):
            if kind not in found:
                problems.append(TrainingProblem(missing))
        # a loop fed undistributed batches is named after a training call missing or not read
        problems.sort(key=lambda problem: problem.kind == "undistributed")
        ordered = sorted(place for _, place in places)
        if problems:
            return ordered, problems
        for place in ordered:
            methods = self._trace(name, at=place)[0]
            shuffles = [m.removesuffix("?") for m in methods]
            last_batch = (
                len(shuffles) - 1 - shuffles[::-1].index("batch")
                if "batch" in shuffles
                else len(shuffles)
            )
            if (
                "shuffle(unread)" in shuffles[:last_batch]
                and "shuffle" not in shuffles[:last_batch]
            ):
                cell, buffer = self._unread_buffer(name)
                problem = TrainingProblem(
                    "unread_buffer", cell, buffer, trained=self.cells[place[0]]
                )
                return ordered, [problem]
        return ordered, []

    def _own_model(self, name: str) -> str:
        """`name` when every assignment to it makes a model of its own (a call: `make_model()`,
        `keras.Sequential(...)`), not another name for one (`single_model = fit_model`,
        `single_model = models[0]`); "" otherwise."""
        found = self._assignments_in_order(name) if name else []
        if found and all(isinstance(node.value, ast.Call) for _, node in found):
            return name
        return ""

    def baseline_fits(self, baseline: str, name: str) -> tuple[list[tuple[int, str]], bool]:
        """([(cell, call)] of each `baseline.fit(...)` not given the bare name `name`], whether
        there is one given it): the one-device baseline's training, which the exercise asks to
        be on the same `name` as the distributed runs."""
        others, bare = [], False
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if not _fit_of(node, baseline):
                    continue
                given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "x")]
                unpacked = any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                )
                if not unpacked and len(given) == 1 and getattr(given[0], "id", "") == name:
                    bare = True
                else:
                    others.append((self.cells[index], _short(node)))
        for function in self._functions().values():  # a helper given the baseline
            for call, dataset in self._helper_fits(function, baseline):
                if getattr(dataset, "id", None) == name:
                    bare = True
                else:
                    others.append(call)
        return others, bare

    def _helper_fits(
        self, function: ast.AST, model: str
    ) -> list[tuple[tuple[int, str], ast.AST | None]]:
        """[((cell, call), the dataset it gives)] for each call of the notebook's own `function`
        that gives `model` for a parameter `function` calls `fit` on, with the dataset given for
        that `fit`'s parameter (`def train_with_fit(model, dataset): model.fit(dataset)`,
        `train_with_fit(single_model, train_ds)`), or the global name the fit is given itself,
        as the distributed runs' reading takes it (`def train(model): model.fit(train_ds)`: a
        name neither a parameter nor bound in the helper); None for any other dataset."""
        arguments = function.args
        positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        parameters = positional + [a.arg for a in arguments.kwonlyargs]
        local = _scope_locals(function, set())

        def dataset_of(fit: ast.Call) -> ast.AST | None:
            given = [*fit.args[:1], *(k.value for k in fit.keywords if k.arg == "x")]
            unpacked = any(isinstance(a, ast.Starred) for a in fit.args) or any(
                k.arg is None for k in fit.keywords
            )
            return given[0] if not unpacked and len(given) == 1 else None

        fits = [
            (node.func.value.id, dataset_of(node))
            for node in _nodes(function)
            if isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "fit"
            and getattr(node.func.value, "id", None) in parameters
        ]
        found = []
        for index, tree in enumerate(self.trees):
            for call in _nodes(tree):
                if not (
                    isinstance(call, ast.Call) and getattr(call.func, "id", "") == function.name
                ):
                    continue
                for receiver, dataset in fits:
                    if getattr(_argument(call, positional, receiver), "id", None) != model:
                        continue
                    given = None
                    if isinstance(dataset, ast.Name) and dataset.id in parameters:
                        given = _argument(call, positional, dataset.id)
                    elif isinstance(dataset, ast.Name) and dataset.id not in local:
                        given = dataset  # the global: `model.fit(train_ds)` in the helper
                    found.append(((self.cells[index], _short(call)), given))
        return found

    def _unread_buffer(self, name: str) -> tuple[int, str]:
        """(cell, text) of the first shuffle buffer the reading cannot read
        (`Code._fold_buffers`) in the code that makes `name`, else anywhere (for a message)."""
        made = self._made_from(name)
        for mine in (True, False):
            for index, tree in enumerate(self.trees):
                for node in _nodes(tree):
                    if mine and not set(_targets(node)) & made:
                        continue
                    for sub in _nodes(node):
                        if getattr(sub, "unread_buffer", None) is not None:
                            return self.cells[index], sub.unread_buffer
        return 0, "?"

    def _models_and_strategies(self) -> set[str]:
        """The names the code uses as a model or a strategy: the strategies it makes, the
        names a model's or a strategy's method is called on (`m.compile(...)`,
        `s.scope()`), and the names bound to a call that makes one (`make_model()`,
        `keras.Sequential(...)`, `keras.models.load_model(...)`)."""
        found = set(self.strategies())
        for node in self._walk():
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MODEL_METHODS
            ):
                root = _root(node.func.value)
                if root is not None:
                    found.add(root.id)
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call):
                called = _dotted(value.func).split(".")[-1] or getattr(value.func, "attr", "")
                if "model" in called.lower() or called in MODEL_MAKERS:
                    found.update(_targets(node))
        return found

    def _unresolved(
        self, function: ast.AST, local: set[str], bindings: dict[str, list], depth: int = 5
    ) -> bool:
        """The callee `function` is one the reading cannot name: not a name or an attribute
        (`getattr(m, k)(...)`, `fns[0](...)`), or a name the code binds by an assignment to
        something else than a call or a lambda (`f = fns[0]`, `f = d["fit"]`, then `f(...)`;
        `g = f` followed), outside the notebook's own functions' parameters (`local`)."""
        if isinstance(function, ast.Attribute):
            return False
        if (
            isinstance(function, ast.Call)
            and _dotted(function.func).split(".")[-1] in WRAPPERS
            and function.args
            and isinstance(function.args[0], ast.Name)
            and function.args[0].id in self._functions()
        ):
            return False  # tf.function(train_step)(batch)
        if not isinstance(function, ast.Name):
            return True
        if function.id in local or depth == 0:
            return depth == 0
        for value in bindings.get(function.id, []):
            if isinstance(value, ast.Name):
                if self._unresolved(value, local, bindings, depth - 1):
                    return True
            elif not isinstance(value, (ast.Call, ast.Lambda)):
                return True
        return False

    def _training_calls(
        self, name: str, baseline: str = ""
    ) -> tuple[list[tuple[str, tuple]], list[TrainingProblem]]:
        """([(method, place)] of the training calls given the bare name `name`, [the problem
        with each other training call]) (`training_places`); `baseline.fit(...)` left out."""
        training = self._training_names(name)
        models: set[str] | None = None  # `_models_and_strategies`, read when first needed
        imported = set(self._imported())
        parameters = {
            arg.arg
            for node in self._walk()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for arg in _nodes(node.args)
            if isinstance(arg, ast.arg)
        }
        bindings: dict[str, list] = {}  # {name: the values assigned to it}, `_unresolved`
        for node in self._walk():
            if getattr(node, "value", None) is not None:
                for target in _targets(node):
                    bindings.setdefault(target, []).append(node.value)
        places, problems = [], []
        for index, tree in enumerate(self.trees):
            called = {id(n.func) for n in _nodes(tree) if isinstance(n, ast.Call)}
            for node in _nodes(tree):
                cell, code = self.cells[index], _short(node)
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in TRAINERS
                    and id(node) not in called
                ):
                    problems.append(TrainingProblem("reached", cell, code))
                    continue
                if not isinstance(node, ast.Call):
                    continue
                function = node.func
                place = (index, node.lineno, node.col_offset)
                lookup = _dotted(function).split(".")[-1]
                if lookup in LOOKUPS:
                    named = node.args[1:2] if lookup == "getattr" else node.args[:1]
                    if any(isinstance(a, ast.Constant) and a.value in TRAINERS for a in named):
                        problems.append(TrainingProblem("looked_up", cell, code))
                        continue
                    owner = _root(node.args[0]) if lookup == "getattr" and node.args else None
                    if named and not isinstance(named[0], ast.Constant) and owner is not None:
                        models = self._models_and_strategies() if models is None else models
                    if (
                        named
                        and not isinstance(named[0], ast.Constant)
                        and (owner is None or owner.id in models or owner.id not in imported)
                    ):
                        problems.append(TrainingProblem("unnamed", cell, code))
                        continue
                arguments = [*node.args, *(k.value for k in node.keywords)]
                if self._unresolved(node.func, parameters, bindings) and any(
                    self._origins(a, place) & training for a in arguments
                ):
                    problems.append(TrainingProblem("unresolved", cell, code))
                    continue
                if self._unfollowed_given(node, training, place, baseline):
                    problems.append(TrainingProblem("unfollowed", cell, code))
                    continue
                if not isinstance(function, ast.Attribute) or function.attr not in TRAINERS:
                    continue
                kind = function.attr
                if kind == "fit" and baseline and getattr(function.value, "id", "") == baseline:
                    continue  # the one-device baseline's: `baseline_fits`
                given = [
                    *node.args[:1],
                    *(k.value for k in node.keywords if k.arg == TRAINERS[kind]),
                ]
                unpacked = any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                )
                bare = (
                    not unpacked
                    and len(given) == 1
                    and isinstance(given[0], ast.Name)
                    and given[0].id == name
                )
                receiver = _short(function.value) if kind == "fit" else ""
                if (
                    bare
                    and kind != "distribute_datasets_from_function"
                    and self._holder(node, given[0]) is not None
                ):  # a helper's parameter named `name`: the global, given at every call
                    passed = self._passed_bare(node, given[0], name)
                    if passed is None:
                        problems.append(self._helper_problem(node, given[0], cell, code, receiver))
                    places += [(kind, at) for at in passed or []]
                    continue
                if bare and kind != "distribute_datasets_from_function":
                    places.append((kind, place))
                    continue
                passed = (
                    self._passed_bare(node, given[0], name, None if kind == "fit" else training)
                    if given and not unpacked and kind != "distribute_datasets_from_function"
                    else None
                )
                if passed is not None:  # a helper's dataset parameter, given `name` (or, to
                    places += [(kind, at) for at in passed]  # distribute, other examples)
                    continue
                holder = self._holder(node, given[0]) if given and not unpacked else None
                if holder is not None:  # a helper's parameter, given something else somewhere
                    if not (baseline and self._only_given(holder.name, baseline)):
                        problems.append(self._helper_problem(node, given[0], cell, code, receiver))
                    continue  # a helper only ever given the baseline: question 4's matter
                if (
                    kind != "fit"
                    and given
                    and not unpacked
                    and self._not_training(given[0], place, training)
                ):
                    continue  # a distributed test set, or a batch of the notebook's own
                problem = (
                    "unpacked"
                    if unpacked
                    else "no_dataset"
                    if not given
                    else "from_function"
                    if kind == "distribute_datasets_from_function"
                    else "other_dataset"
                )
                problems.append(TrainingProblem(problem, cell, code, receiver))
        problems += self._undistributed_feeds(training)
        # the lookup inside `getattr(m, "fit")(...)` names the problem better than the call
        problems.sort(key=lambda problem: (problem.cell, problem.kind == "unresolved"))
        return places, problems

    def _holder(self, call: ast.AST, parameter: ast.AST) -> ast.FunctionDef | None:
        """The innermost `def` holding `call` when `parameter` (a Name at `call`) is one of its
        parameters, not assigned inside it; None otherwise."""
        if not isinstance(parameter, ast.Name):
            return None
        holders = [  # the defs holding the call, outermost first (ast.walk goes down)
            function
            for tree in self.trees
            for function in _nodes(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(sub is call for sub in _nodes(function))
        ]
        if not holders:
            return None
        inner = holders[-1]
        arguments = inner.args
        positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        if parameter.id not in positional + [a.arg for a in arguments.kwonlyargs]:
            return None
        if any(
            isinstance(sub, ast.Name) and sub.id == parameter.id and isinstance(sub.ctx, ast.Store)
            for sub in _nodes(inner)
        ):
            return None  # rebound inside the helper
        return inner

    def _given_at_calls(
        self, function: ast.FunctionDef, parameter: str
    ) -> list[tuple[tuple[int, int, int], ast.AST | None]] | None:
        """[(place, the argument given for `parameter`)] at each call of the notebook's own
        `function` (by position or keyword; None when not given), when the function is
        followed (`unfollowed`), called at least once, and used in no other way (passed on,
        bound to a name); None otherwise, or when a call gives `*`/`**`."""
        if function.name in self.unfollowed:
            return None
        arguments = function.args
        positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        found, uses = [], 0
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if isinstance(node, ast.Name) and node.id == function.name:
                    uses += 1
                if not (
                    isinstance(node, ast.Call) and getattr(node.func, "id", "") == function.name
                ):
                    continue
                if any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                ):
                    return None
                found.append(
                    ((index, node.lineno, node.col_offset), _argument(node, positional, parameter))
                )
        if not found or uses != len(found):
            return None  # never called, or also named otherwise (passed on, bound to a name)
        return found

    def _passed_bare(
        self, call: ast.Call, given: ast.AST, name: str, training: set[str] | None = None
    ) -> list[tuple] | None:
        """The places of the calls of the notebook's own function (a `def`) whose parameter
        `given` is, at the training `call` inside it, that give the bare name `name` for it (by
        position or keyword), when every other call gives a dataset of other examples
        (`_not_training` of `training`: `def distribute(ds)` called with `train_ds` and with
        `test_ds`; only with `training` given) and the function is used in no other way
        (`def train_with_fit(model, dataset): model.fit(dataset)`, always called with
        `train_ds`); None otherwise."""
        inner = self._holder(call, given)
        found = self._given_at_calls(inner, given.id) if inner is not None else None
        if found is None:
            return None
        places = []
        for place, value in found:
            if isinstance(value, ast.Name) and value.id == name:
                places.append(place)
            elif not (
                training is not None
                and value is not None
                and self._not_training(value, place, training)
            ):
                return None
        return places

    def _parameter_passes_global(self, function: ast.AST, name: str) -> bool:
        """`function`, a `def` with a parameter `name` never assigned inside it, is given the
        bare global `name` for it at every call (`def train_with_fit(model, train_ds, ...)`,
        always called with `train_ds`): inside it, `name` is the global pipeline."""
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        parameter = ast.Name(id=name, ctx=ast.Load())
        holder = self._holder(function.body[0], parameter) if function.body else None
        if holder is not function:
            return False
        found = self._given_at_calls(function, name)
        return bool(found) and all(
            isinstance(value, ast.Name) and value.id == name for _, value in found
        )

    def _helper_problem(
        self, call: ast.Call, given: ast.AST, cell: int, code: str, receiver: str
    ) -> TrainingProblem:
        """The problem with a training `call` inside a helper, given the helper's parameter
        `given`, that the reading cannot resolve to `name` at every call: "unfollowed" for a
        helper the reading does not follow (`unfollowed`, named by its def), else
        "other_dataset"."""
        holder = self._holder(call, given)
        if holder is not None and holder.name in self.unfollowed:
            return TrainingProblem("unfollowed", cell, f"def {holder.name}(...)")
        return TrainingProblem("other_dataset", cell, code, receiver)

    def _only_given(self, function: str, model: str) -> bool:
        """Every call of `function` (at least one) is given the bare name `model`."""
        calls = [
            node
            for node in self._walk()
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == function
        ]
        return bool(calls) and all(
            any(
                isinstance(a, ast.Name) and a.id == model
                for a in [*c.args, *(k.value for k in c.keywords)]
            )
            for c in calls
        )

    def _unfollowed_given(
        self, call: ast.Call, training: set[str], place: tuple, baseline: str = ""
    ) -> bool:
        """`call` calls a function the reading does not follow (`unfollowed`) given the
        training examples, or gives such a function to a `.run(...)` (`strategy.run(step,
        args=(batch,))`) with them: what it trains on is not read. A call given the model
        `baseline` is that model's matter (`unfollowed_calls`)."""
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if baseline and any(isinstance(a, ast.Name) and a.id == baseline for a in arguments):
            return False
        named = getattr(call.func, "id", "")
        if named not in self.unfollowed:
            if getattr(call.func, "attr", "") != "run" or not call.args:
                return False
            named, arguments = getattr(call.args[0], "id", ""), arguments[1:]
            if named not in self.unfollowed:
                return False
        return any(self._origins(a, place) & training for a in arguments)

    def _runs_on_strategy(self, node: ast.AST) -> bool:
        """`node` calls `strategy.run(...)` of a MirroredStrategy the code makes, or of the
        strategy in force (`tf.distribute.get_strategy().run(...)`)."""
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run"
        ):
            return False
        owner = node.func.value
        root = _root(owner)
        if root is not None and root.id in self._strategy_names:
            return True
        return any(
            isinstance(sub, ast.Call) and _dotted(sub.func).endswith("get_strategy")
            for sub in _nodes(owner)
        )

    @cached_property
    def _strategy_names(self) -> frozenset[str]:
        """`strategies`, read once."""
        return frozenset(self.strategies())

    @cached_property
    def _step_functions(self) -> frozenset[str]:
        """The notebook's own functions (followed or not) that call `strategy.run`
        (`distributed_train_step`), or one of these in turn, and the names assigned a lambda
        or a wrapper of one (`step = lambda b: strategy.run(...)`, `step =
        tf.function(distributed_train_step)`): a call of one feeds the replicas what it is
        given."""
        candidates: dict[str, list[ast.AST]] = {}
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                candidates.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and (
                isinstance(node.value, ast.Lambda)
                or isinstance(node.value, ast.Call)
                and _dotted(node.value.func).split(".")[-1] in WRAPPERS
            ):
                for target in _targets(node):
                    candidates.setdefault(target, []).append(node.value)
        steps = {
            name
            for name, nodes in candidates.items()
            if any(self._runs_on_strategy(sub) for node in nodes for sub in _nodes(node))
        }
        while True:
            more = {
                name
                for name, nodes in candidates.items()
                if name not in steps
                and any(
                    isinstance(sub, ast.Name) and sub.id in steps
                    for node in nodes
                    for sub in _nodes(node)
                )
            }
            if not more:
                return frozenset(steps)
            steps |= more

    def _feeds(self, node: ast.AST) -> list[ast.AST]:
        """What `node`, a call, gives the replicas, when it is a call of a step function
        (`_step_functions`: its arguments) or of `strategy.run` (its `args`/`kwargs`, not the
        function it runs); [] for any other node."""
        if not isinstance(node, ast.Call):
            return []
        arguments = [*node.args, *(k.value for k in node.keywords)]
        called = {n.id for n in _nodes(node.func) if isinstance(n, ast.Name)}
        if called & self._step_functions:  # step(batch), tf.function(step)(batch)
            return arguments or [node]
        if self._runs_on_strategy(node):
            return arguments[1:] or [node]
        return []

    def _distributed(self, node: ast.AST, place: tuple, depth: int = 0) -> bool:
        """`node` (at `place`) is a distributed dataset, an iterator over one or an element of
        one: `strategy.experimental_distribute_dataset(...)` (or
        `distribute_datasets_from_function`) of a strategy the code makes, a call of a function
        of the notebook's own that returns one, `iter(...)`, `next(...)` or `enumerate(...)` of
        one (or a progress bar or slice of one: `ORDER_KEEPERS`, `tqdm(train_dist)`), or a name
        whose assignment in force there is one."""
        while isinstance(node, ast.Call):
            if (
                getattr(node.func, "id", "") in ("iter", "next", "enumerate")
                and getattr(node.func, "id", "") not in self._imports
                or _resolved(node.func, self._imports) in ORDER_KEEPERS
            ) and node.args:
                node = node.args[0]
            elif (  # iterator.get_next(), optional.get_value(): TensorFlow's own
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ITERATOR_METHODS
                and not node.args
                and not node.keywords
            ):
                node = node.func.value
            else:
                break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root = _root(node.func.value)
            return (
                node.func.attr in DISTRIBUTERS
                and root is not None
                and root.id in self._strategy_names
            )
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in self._functions():
            function = self._functions()[node.func.id]
            returned = [n.value for n in _nodes(function) if isinstance(n, ast.Return)]
            return bool(returned) and all(
                v is not None and self._distributed(v, place, depth + 1) for v in returned
            )
        if isinstance(node, ast.Name) and depth < 10:
            found = self._assignments_in_order(node.id)
            before = [(at, n) for at, n in found if at < place] or found
            if before:
                at, assignment = before[-1]
                return self._distributed(assignment.value, at, depth + 1)
        return False

    def _count(self, node: ast.AST, place: tuple, depth: int = 0) -> bool:
        """`node` (at `place`) is a number, never examples: an int literal, `len(...)`,
        `int(...)`, a `cardinality()`, `num_replicas_in_sync`, arithmetic of such, a tensor of
        one (`tf.constant(steps)`, `tf.cast`), or a name whose assignment in force is one: a step
        count given to a step function (`train_steps(iter(train_dist), tf.constant(steps))`)."""
        if depth > 10:
            return False
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.BinOp):
            return self._count(node.left, place, depth + 1) and self._count(
                node.right, place, depth + 1
            )
        if isinstance(node, ast.UnaryOp):
            return self._count(node.operand, place, depth + 1)
        if isinstance(node, ast.Attribute):
            return node.attr == "num_replicas_in_sync"
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            last = called.split(".")[-1]
            if called in ("len", "int") and called not in self._imports:
                return True
            if last in ("cardinality", "ceil", "floor") and not node.keywords:
                return last == "cardinality" or all(
                    self._count(a, place, depth + 1) for a in node.args
                )
            if _resolved(node.func, self._imports).startswith("tensorflow.") and last in (
                "constant",
                "convert_to_tensor",
                "cast",
            ):
                return bool(node.args) and self._count(node.args[0], place, depth + 1)
            return False
        if isinstance(node, ast.Name):
            found = self._assignments_in_order(node.id)
            before = [(at, n) for at, n in found if at < place]
            if before and isinstance(before[-1][1], (ast.Assign, ast.AnnAssign)):
                at, assignment = before[-1]
                return assignment.value is not None and self._count(assignment.value, at, depth + 1)
        return False

    def _undistributed_feeds(self, training: set[str]) -> list[TrainingProblem]:
        """A problem ("undistributed") for each loop that feeds the replicas (a call of a step
        function or `strategy.run` in its body, `_feeds`) while iterating something that is
        not a distributed dataset (`_distributed`) and is made from the training examples
        (`training`): `for batch in train_cached.batch(GLOBAL_BATCH): distributed_train_step(
        batch)` gives each replica the whole batch of an unshuffled pipeline; and for each
        such call given, other than through a loop's variable, something made from the
        training examples that is not distributed (`distributed_train_step(next(it))`, `it =
        iter(train_cached.batch(...))`). The function a step function runs is not looked into:
        its parameters are what its callers give it."""
        problems = []
        for index, tree in enumerate(self.trees):
            targets: dict[int, set[str]] = {}  # id of a node in a loop: the loops' variables
            for node in _nodes(tree):
                for loop in [node] if isinstance(node, (ast.For, ast.AsyncFor)) else []:
                    bound = {n.id for n in _nodes(loop.target) if isinstance(n, ast.Name)}
                    for sub in _nodes(node):
                        targets.setdefault(id(sub), set()).update(bound)
                for loop in getattr(node, "generators", []):
                    bound = {n.id for n in _nodes(loop.target) if isinstance(n, ast.Name)}
                    for sub in _nodes(node):
                        targets.setdefault(id(sub), set()).update(bound)
            for node in _nodes(tree):
                loops: list[tuple[ast.AST, list[ast.AST]]] = []
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    loops.append((node.iter, node.body))
                elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                    results = (
                        [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
                    )
                    loops += [(g.iter, [*results, *g.ifs]) for g in node.generators]
                for looped, body in loops:
                    if not any(self._feeds(sub) for part in body for sub in _nodes(part)):
                        continue
                    for iterated in _iterated(looped):
                        place = (index, iterated.lineno, iterated.col_offset)
                        if self._distributed(iterated, place):
                            continue
                        if self._origins(iterated, place) & training:
                            problems.append(
                                TrainingProblem(
                                    "undistributed", self.cells[index], _short(iterated)
                                )
                            )
                fed_parts = [f for f in self._feeds(node) if f is not node]
                while any(isinstance(f, (ast.Tuple, ast.List, ast.Starred)) for f in fed_parts):
                    fed_parts = [  # args=(images, labels): each part
                        p
                        for f in fed_parts
                        for p in (
                            f.elts
                            if isinstance(f, (ast.Tuple, ast.List))
                            else [f.value]
                            if isinstance(f, ast.Starred)
                            else [f]
                        )
                    ]
                for fed in fed_parts:
                    place = (index, node.lineno, node.col_offset)
                    if self._distributed(fed, place) or self._count(fed, place):
                        continue
                    if self._holder(node, fed) is not None:
                        continue  # a step function's parameter: its callers are read
                    root = _root(fed)
                    if root is not None and root.id in targets.get(id(node), ()):
                        continue  # a loop's variable (batch, batch[0]): the loop is read
                    if self._origins(fed, place) & training:
                        problems.append(
                            TrainingProblem("undistributed", self.cells[index], _short(node))
                        )
        return problems

    def _origins(self, node: ast.AST, place: tuple, calls: set[str] | None = None) -> set[str]:
        """Every name `node`, at `place`, is computed from: the assignment of each in force
        there (the last one before it), the names that assignment is computed from in turn, and
        the body of a function of the notebook's own that it calls (for `training_places`: does
        a dataset come from the training examples?). With `calls`, the names of the functions
        and methods called in all that code are added to it."""
        functions, imported = self._functions(), set(self._imported())
        seen = _load_marks(node, imported)
        todo = [(sub.id, place) for sub in _nodes(node) if isinstance(sub, ast.Name)]
        code = [node]
        while todo and len(seen) < 400:
            name, before = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            found = [(at, n) for at, n in self._assignments_in_order(name) if at < before]
            if found:
                at, assignment = found[-1]
                code.append(assignment.value)
                seen |= _load_marks(assignment.value, imported)
                todo += [(s.id, at) for s in _nodes(assignment.value) if isinstance(s, ast.Name)]
            for at, value in self._filled[name] if name in self._filled else []:
                if at < before:  # batches.append(b), in a loop over the training pipeline
                    code.append(value)
                    seen |= _load_marks(value, imported)
                    todo += [(s.id, at) for s in _nodes(value) if isinstance(s, ast.Name)]
            if name in functions:
                code.append(functions[name])
                seen |= _load_marks(functions[name], imported)
                todo += [(s.id, before) for s in _nodes(functions[name]) if isinstance(s, ast.Name)]
        if calls is not None:
            calls.update(
                _dotted(sub.func).split(".")[-1] or getattr(sub.func, "attr", "")
                for part in code
                for sub in _nodes(part)
                if isinstance(sub, ast.Call)
            )
        return seen

    @cached_property
    def _filled(self) -> dict[str, list[tuple[tuple, ast.AST]]]:
        """{name: (place, value) of each thing put into the container `name` is bound to}:
        `name.append(x)` (`extend`, `insert`, `add`, `update`), `name[i] = x`, `name += x`,
        and, when that happens in a loop, what the loop iterates (`for b in ds: out.append(b)`
        fills `out` from `ds`)."""
        filled: dict[str, list[tuple[tuple, ast.AST]]] = {}
        places = _Places(self.trees)
        for node in self._walk():
            values: list[ast.AST] = []
            name = ""
            call = isinstance(node, ast.Call)
            given = [*node.args, *(k.value for k in node.keywords)] if call else []
            called = getattr(node.func, "attr", "") or getattr(node.func, "id", "") if call else ""
            receiver = getattr(node.func, "value", None) if isinstance(node, ast.Call) else None
            root = _root(receiver) if receiver is not None else None
            if called in FILLERS and root is not None and root.id in CONTAINER_TYPES and given:
                first = _root(given[0])  # list.append(batches, b): the type's method
                name, values = (first.id if first else ""), given[1:]
            elif called in FILLERS and root is not None:  # held["batches"].append(b)
                name, values = root.id, given
            elif called in FILL_FUNCTIONS and given and _root(given[0]) is not None:
                name, values = _root(given[0]).id, given[1:]  # heapq.heappush(batches, b)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, (ast.Subscript, ast.Attribute)) and _root(target):
                        name, values = _root(target).id, [node.value]  # ns.b = x, d["k"][0] = x
            elif isinstance(node, ast.AugAssign) and _root(node.target) is not None:
                name, values = _root(node.target).id, [node.value]
            if not name:
                continue
            parent = places.parents.get(id(node))
            while parent is not None:
                if isinstance(parent, (ast.For, ast.AsyncFor)):
                    values.append(parent.iter)
                parent = places.parents.get(id(parent))
            filled.setdefault(name, []).extend((places.at(node), v) for v in values)
        return filled

    def _not_training(self, node: ast.AST, place: tuple, training: set[str]) -> bool:
        """The dataset `node` (given to `experimental_distribute_dataset` at `place`) is tied to
        other examples than the training ones (`training`, `_training_names`): computed from
        nothing of theirs, and from loads of the test split only (`test_ds`), or from no load
        at all: a batch of the notebook's own, made of its own tensors (the loss check's
        labels), through names the notebook binds, a few plain builtins, TensorFlow, NumPy or
        the course's modules, and no reader of files (`READERS`). Anything else (a second load
        of the training split spelled otherwise, `globals()["train_cached"]`,
        `__import__(...)`, a TFRecord file) is not tied, and counts as training on it."""
        calls: set[str] = set()
        origins = self._origins(node, place, calls)
        if origins & training or calls & READERS:
            return False
        loads = {mark for mark in origins if mark.startswith("<load ")}
        if not all(map(_test_load, loads)):
            return False
        imported = self._imported()
        bound = self._bound_names()
        for name in origins - loads:
            if name in imported:
                if imported[name].split(".")[0] not in TENSOR_MODULES:
                    return False
            elif name not in bound and name not in PLAIN_BUILTINS:
                return False
        return True

    def _bound_names(self) -> set[str]:
        """Every name the code binds in any way (assigned, a target, a parameter, a def, an
        import)."""
        names = set()
        for node in self._walk():
            if isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            else:
                bound = _bound_name(node)
                if bound:
                    names.add(bound)
        return names

    def other_bindings(self, name: str) -> list[tuple[int, str]]:
        """(cell, code) of each binding of `name` other than an assignment outside any function,
        class or comprehension (`name = ...`, `name: T = ...`, `name += ...`, `(name := ...)`):
        a `for` or comprehension target, a `with ... as`, a function's or lambda's parameter,
        `global name`, `except ... as name`, an import, a def, a capture pattern, and an
        assignment inside a function that gives that local `name` to a training call or to a
        function of the notebook's own (a local only looked at, `next(iter(name))`, is
        another variable). The reading resolves a bare `name` at a training call to its
        assignments outside any function: a call given `name` bound otherwise trains on a
        pipeline it does not read (a comprehension's variable leaves the global one unchanged
        for the probe too)."""
        found = []
        for index, tree in enumerate(self.trees):
            allowed: set[int] = set()
            stack: list[tuple[ast.AST, ast.AST | None, ast.AST]] = [(tree, None, tree)]
            while stack:
                node, scoped, shown = stack.pop()
                shown = node if isinstance(node, ast.stmt) else shown
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                    local = isinstance(scoped, (ast.FunctionDef, ast.AsyncFunctionDef))
                    if not scoped or (
                        local
                        and not isinstance(node, ast.NamedExpr)
                        and not self._given_on(scoped, name)
                    ):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        allowed |= {
                            id(sub)
                            for target in targets
                            for sub in _nodes(target)
                            if isinstance(sub, ast.Name)
                        }
                if isinstance(node, ast.arg):
                    bound = node.arg == name and not self._parameter_passes_global(scoped, name)
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    bound = name in node.names
                elif isinstance(node, ast.ExceptHandler):
                    bound = node.name == name
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    bound = any((a.asname or a.name).split(".")[0] == name for a in node.names)
                elif isinstance(node, ast.Name):
                    bound = (
                        node.id == name
                        and isinstance(node.ctx, ast.Store)
                        and id(node) not in allowed
                    )
                else:
                    bound = _bound_name(node) == name
                if bound:
                    found.append((self.cells[index], _short(shown)))
                inner = node if isinstance(node, SCOPES) else scoped
                stack.extend((child, inner, shown) for child in ast.iter_child_nodes(node))
        return sorted(found)

    def _given_on(self, scope: ast.AST, name: str) -> bool:
        """Code in `scope` gives `name` to a training call (`TRAINERS`) or to a function of the
        notebook's own."""
        functions = self._functions()
        for node in _nodes(scope):
            if not isinstance(node, ast.Call):
                continue
            if getattr(node.func, "attr", "") in TRAINERS or getattr(node.func, "id", "") in (
                functions
            ):
                given = [*node.args, *(k.value for k in node.keywords)]
                if any(
                    isinstance(sub, ast.Name) and sub.id == name
                    for value in given
                    for sub in _nodes(value)
                ):
                    return True
        return False

    @cached_property
    def _local_nodes(self) -> set[int]:
        """The ids of the nodes inside a function, lambda or class: a name there is another
        variable than the notebook's of the same name."""
        scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        return {
            id(sub)
            for node in self._walk()
            if isinstance(node, scopes)
            for sub in _nodes(node)
            if sub is not node
        }

    def _training_names(self, name: str) -> set[str]:
        """The names the pipeline `name` is made from, through every assignment of each outside
        a function (`train_ds = cached.shuffle(...)...`, `cached = train_examples.cache()`:
        {'train_ds', 'cached', 'train_examples'}), and a function of the notebook's own that
        returns a pipeline; imported modules left out."""
        functions, imported = self._functions(), set(self._imported())
        local = self._local_nodes
        names, todo = set(), [name]
        while todo and len(names) < 50:
            current = todo.pop()
            if current in names or current in imported:
                continue
            names.add(current)
            for _, node in self._assignments_in_order(current):
                if id(node) in local:
                    continue
                # a second load of them is them (a load of the test split is not)
                names |= {m for m in _load_marks(node.value, imported) if not _test_load(m)}
                _, source, helper = _chain(node.value)
                if helper in functions:
                    source = _inlined(functions[helper], helper, node.value)[1]
                if source:
                    todo.append(source)
        return names

    def trainings_elsewhere(self, name: str, *, baseline: str = "") -> list[tuple[int, str]]:
        """(cell, call) of each training call (`model.fit(x)`, `x=`, and
        `strategy.experimental_distribute_dataset(x)`) whose dataset is not the name `name` but
        is made from it (`train_ds.take(-1)`) or from the examples `name` is made from
        (`train_cached.batch(GLOBAL_BATCH)`, or `ds` so made): a pipeline the reading of `name`
        does not see. A dataset of other examples (`test_ds`) is not one. The `fit` calls of
        `baseline` are left out, as in `training_places`."""
        numbers = self.cells or list(range(1, len(self.trees) + 1))
        baseline = self._own_model(baseline)
        modules = {  # `tf.data.Dataset.from_tensor_slices(...)` starts from `tf`: not examples
            (a.asname or a.name).split(".")[0]
            for node in self._walk()
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for a in node.names
        }
        examples = self._made_from(name) - modules - {name}
        functions, found = self._functions(), []
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                keyword = {"fit": "x", "experimental_distribute_dataset": "dataset"}
                if node.func.attr not in keyword:
                    continue
                if baseline and getattr(node.func.value, "id", "") == baseline:
                    continue  # `baseline_fits`
                given = [
                    *node.args[:1],
                    *(k.value for k in node.keywords if k.arg == keyword[node.func.attr]),
                ]
                for argument in given:
                    if isinstance(argument, ast.Name) and argument.id == name:
                        continue
                    _, source, helper = _chain(argument)
                    if helper in functions:  # make(train_cached)
                        source = _inlined(functions[helper], helper, argument)[1]
                    made_from = self._made_from(source) - modules
                    if name in made_from or made_from & examples:
                        found.append((numbers[index], ast.unparse(node)))
        return found

    def _made_from(self, name: str) -> set[str]:
        """The names `name` is made from, itself included, following the last assignment of
        each (`ds = cached.batch(...)`, `cached = examples.cache()`: {'ds', 'cached',
        'examples'}) and a function of the notebook's own that returns a pipeline."""
        functions, names = self._functions(), set()
        while name and name not in names and len(names) < 20:
            names.add(name)
            found = self._assignments_in_order(name)
            if not found:
                break
            node = found[-1][1]
            _, source, helper = _chain(node.value)
            if helper in functions:
                source = _inlined(functions[helper], helper, node.value)[1]
            name = source
        return names

    def assigned_after(self, name: str, place: tuple) -> list[int]:
        """The cells (numbered as observed) that assign `name` after `place`, outside any
        function or class (a local of the same name in a `def` is another variable)."""
        numbers = self.cells or list(range(1, len(self.trees) + 1))
        local = self._local_nodes
        return sorted(
            {
                numbers[at[0]]
                for at, node in self._assignments_in_order(name)
                if at > place and id(node) not in local
            }
        )

    def savers(self, file_name: str) -> set[str]:
        """The names whose `.save(...)` is given a path that ends in the literal `file_name`
        (`one.save(ARTIFACTS / "fit_model.keras")`: {'one'})."""
        found = set()
        for node in self._walk():
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "save"
                and isinstance(node.func.value, ast.Name)
            ):
                continue
            given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "filepath")]
            texts = [
                sub.value
                for arg in given
                for sub in _nodes(arg)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
            ]
            if any(text.endswith(file_name) for text in texts):
                found.add(node.func.value.id)
        return found

    def fitted(self, name: str) -> bool:
        """The code calls `name.fit(...)`: it trains the model `name` itself."""
        return any(_fit_of(node, name) for node in self._walk())

    def copied(self, name: str) -> list[str]:
        """The loaders and copiers (`COPIERS`) an assignment to `name` calls:
        `fit_model = keras.models.load_model(path)` -> ['load_model']."""
        found = []
        for node, _ in self.assignments(name):
            for sub in _nodes(getattr(node, "value", None) or ast.Module(body=[], type_ignores=[])):
                if isinstance(sub, ast.Call):
                    called = getattr(sub.func, "attr", None) or getattr(sub.func, "id", "")
                    if called in COPIERS:
                        found.append(called)
        return found

    def _tiny(self, value: ast.AST | None) -> bool:
        """`value` is a learning rate below `TINY_RATE`: a literal (`_tiny_rate`), constant
        arithmetic (`1e-3 * 0`, a name bound once to such a value: `_fold`), `float("0")`, a
        lambda of no parameter that returns one, a Keras schedule that starts from one."""
        if value is None:
            return False
        if _tiny_rate(value):
            return True
        if isinstance(value, ast.Lambda) and not _nodes(value.args)[1:]:  # lambda: 0.0
            return self._tiny(value.body)
        if isinstance(value, ast.Call) and "schedules" in _dotted(value.func).split("."):
            start = _argument(value, ["initial_learning_rate"], "initial_learning_rate")
            return self._tiny(start)  # ExponentialDecay(0.0, ...): the rate it starts from
        if (
            isinstance(value, ast.Call)
            and getattr(value.func, "id", "") == "float"
            and "float" not in self._bound_names()
            and len(value.args) == 1
            and not value.keywords
        ):
            value = value.args[0]
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                try:
                    return float(value.value) < TINY_RATE
                except ValueError:
                    return False
        number = _fold(value, self._once, 1, folding=self._folding)
        return number is not None and number < TINY_RATE

    def _built_from(self, name: str, places: _Places) -> tuple[set[str], list[tuple[int, str]]]:
        """What model `name` is built from, in the values bound to it and the notebook's own
        functions they call (`make_from(donated)`): (1) the names whose objects flow into it, a
        layer or model placed in it (`keras.Sequential(parts)`, `head` in `keras.Sequential([...,
        head])`, `keras.Model(pre.inputs, pre.outputs)`, `keras.Model(x, pre(x))`,
        `clone_model(pre, clone_function=...)`), and the names theirs are bound from, all but
        the notebook's own functions, imports and builtins: a weight written into one of them
        (or a fit of one but the model itself: `fit_model = model`) is written into the model;
        (2) (cell, code) of each initializer given weights: `Constant(x)` of a value not
        literal, a `*_initializer` that is a lambda or the notebook's own function, a layer's
        `weights=`. `make_model()` shares nothing: its layers are new."""
        functions = self._functions()
        classes = {n.name for n in self._walk() if isinstance(n, ast.ClassDef)}
        defined = {  # the notebook's functions, followed or not
            n.name for n in self._walk() if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        excluded = set(self._imports) | defined | classes | BUILTIN_NAMES | {name}
        values: dict[str, list[ast.AST]] = {}  # a, b = x, y: each its own; a, b = runs: none
        for node in self._walk():
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value:
                for target in getattr(node, "targets", None) or [node.target]:
                    if isinstance(target, ast.Name):
                        values.setdefault(target.id, []).append(node.value)
                    elif _paired(target, node.value):
                        for each, value in zip(target.elts, node.value.elts, strict=True):
                            if isinstance(each, ast.Name):
                                values.setdefault(each.id, []).append(value)
        shared: set[str] = set()
        found: list[tuple[int, str]] = []
        todo = [(v, None) for v in values.get(name, [])]
        seen: set[int] = set()

        bindings = self._bindings_by_name()

        def plain(value: ast.AST) -> bool:  # 0.1, SEED = 42: no array
            if isinstance(value, ast.Name):
                values = bindings.get(value.id, [])
                return bool(values) and all(_literal_data(v) for v in values)
            return _literal_data(value)

        def constant(function: ast.AST) -> bool:  # keras.initializers.Constant, C = Constant
            dotted = _resolved(function, self._imports) or _dotted(function)
            if dotted.split(".")[-1] == "Constant" or dotted.endswith("initializers.constant"):
                return True
            values = bindings.get(function.id, []) if isinstance(function, ast.Name) else []
            return any(
                v is not None and not isinstance(v, ast.Call) and constant(v) for v in values
            )

        def initializer(value: ast.AST, depth: int = 0) -> bool:
            """`value`, given as a `*_initializer`, may give weights: the notebook's own
            callable, a `Constant` of no literal, another initializer given no literal."""
            if isinstance(value, ast.Lambda) or getattr(value, "id", "") in functions:
                return True
            if isinstance(value, ast.Name) and depth < 3:
                given = bindings.get(value.id, [])
                return any(v is not None and initializer(v, depth + 1) for v in given)
            if isinstance(value, ast.Call):
                return not all(plain(a) for a in [*value.args, *(k.value for k in value.keywords)])
            return False

        while todo and len(seen) < 200:
            value, scope = todo.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            local = _scope_locals(scope, set()) if scope is not None else set()
            called = set()  # clone_model(pre): new layers, pre's weights not shared
            placed = set()  # in a maker's body: what its Sequential, Model or add is given
            for sub in _nodes(value):
                if not isinstance(sub, ast.Call):
                    continue
                dotted = _resolved(sub.func, self._imports) or _dotted(sub.func)
                given = [*sub.args, *(k.value for k in sub.keywords)]
                if dotted.endswith("clone_model") and not any(
                    k.arg == "clone_function" for k in sub.keywords
                ):
                    called.update(id(n) for a in sub.args[:1] for n in _nodes(a))  # new layers
                if dotted.split(".")[-1] in {*MODEL_MAKERS, "add"}:
                    placed.update(id(n) for a in given for n in _nodes(a))
                function = functions.get(getattr(sub.func, "id", ""))
                if function is not None:  # trained(train_ds): read in the maker's own body
                    todo.append((function, function))
                if getattr(sub.func, "id", "") in defined:
                    called.update(id(n) for a in given for n in _nodes(a))
                if scope is not None and getattr(sub.func, "attr", "") in MAKER_WRITES:
                    at = places.tree_of.get(id(sub))  # the maker loads or trains what it makes
                    found.append((self.cells[at] if at is not None else 0, _short(sub, 80)))
                given = _argument(sub, ["value"], "value")
                weights = [
                    k.value
                    for k in sub.keywords
                    if k.arg == "weights"
                    and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                    or (k.arg or "").endswith("_initializer")
                    and initializer(k.value)
                ]
                if constant(sub.func) and given is not None and not plain(given):
                    weights.append(given)
                if weights:
                    at = places.tree_of.get(id(sub))
                    found.append((self.cells[at] if at is not None else 0, _short(sub, 80)))
            for sub in _nodes(value):
                if (
                    isinstance(sub, ast.Name)
                    and isinstance(sub.ctx, ast.Load)
                    and id(sub) not in called
                    and (scope is None or id(sub) in placed)
                    and sub.id not in excluded
                    and sub.id not in local
                    and sub.id not in shared
                ):
                    shared.add(sub.id)
                    todo += [(v, None) for v in values.get(sub.id, [])]
        whole = {name}  # fit_model = model: model's own fit is fit_model's
        for _ in range(5):
            whole |= {
                v.id for n in list(whole) for v in values.get(n, []) if isinstance(v, ast.Name)
            }
        for index, tree in enumerate(self.trees):  # pre.fit(...): trains the layers it shares
            for node in _nodes(tree):
                if (  # head.kernel_initializer = Constant(w): set on a part, not a literal
                    isinstance(node, (ast.Assign, ast.AnnAssign))
                    and node.value is not None
                    and not _literal_data(node.value)
                    and any(
                        isinstance(t, ast.Attribute) and getattr(_root(t), "id", None) in shared
                        for t in getattr(node, "targets", None) or [node.target]
                    )
                ):
                    found.append((self.cells[index], _short(node, 80)))
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"fit", *MODEL_STEPS}
                    and getattr(_root(node.func.value), "id", None) in shared - whole
                ):
                    found.append((self.cells[index], _short(node, 80)))
        return shared, found

    def step_assignments(self, name: str) -> list[tuple[int, str]]:
        """(cell, code) of each write to the optimizer state of model `name`, which holds its
        step count: `name.optimizer.iterations.assign(...)` (`assign_add`, `assign_sub`,
        `STEP_WRITERS`), one through `optimizer.variables` or a name bound to `name.optimizer`,
        one given it as an argument (`tf.compat.v1.assign(name.optimizer.iterations, 12)`,
        `keras.backend.set_value(...)`), one to a loop's or a comprehension's variable over
        them (`for v in name.optimizer.variables: v.assign(...)`), or to a lambda's parameter
        fed them (`tf.nest.map_structure(lambda v: v.assign(0), name.optimizer.variables)`),
        and `name.optimizer.iterations = ...`. A count so written says that a model trained
        which did not (weights copied in, then the count copied too): a copy, as `set_weights`.
        Reading the count (`int(name.optimizer.iterations)`) writes nothing."""
        return self._state_writes(name)

    def _state_writes(
        self,
        name: str,
        holds: _Holds | None = None,
        shared: frozenset[str] = frozenset(),
    ) -> list[tuple[int, str]]:
        """`step_assignments` (without `holds`), or (with `holds`: what holds the model `name`,
        `_Holds`) each write of the model's weights through what
        is reached from it (`MODEL_PARTS`: `name.layers`, `.layers[i]`, `.get_layer(...)`,
        `.weights`, `.trainable_variables`, a layer's `.kernel`, a name bound to one of these,
        a loop's or a comprehension's variable over them, paired through `zip`/`enumerate`, a
        lambda's or the notebook's own function's parameter fed them): `STEP_WRITERS` or
        `LOADED_INTO` reached on it (called, bound or given to `map`), given it first
        (`tf.compat.v1.assign(v, w)`, `keras.backend.batch_set_value(zip(...))`,
        `keras.Model.set_weights(layer, w)`), mapped over it (`map(tf.Variable.assign,
        name.weights, ...)`), or an optimizer's step given its variables; `shared`: names whose
        objects the model is built from (`_built_from`), written as its parts. One walk for both:
        weights written in, like a count written, are a copy, not the model trained."""
        weights = holds is not None
        model_of = holds.within if weights else None

        def optimizer_of(node: ast.AST, *, follow: bool = True) -> bool:
            for sub in _nodes(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and sub.attr == "optimizer"
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == name
                ):
                    return True
            roots = {s.id for s in _nodes(node) if isinstance(s, ast.Name)} - {name}
            for root in roots if follow else ():
                found = self._assignments_in_order(root)
                if found and optimizer_of(found[-1][1].value, follow=False):
                    return True
            return False

        looped: dict[int, set[str]] = {}  # id of a node in a loop over them: its variables
        bound: set[str] = set(shared)  # names assigned what is reached from the model (weights)

        def part(node: ast.AST, inside: ast.AST) -> bool:
            """`node` is reached from the model through its layers or variables (weights), or
            starts from a name that holds them at `inside`."""
            attributes = []
            while not model_of(node):
                if isinstance(node, ast.Attribute):
                    attributes.append(node.attr)
                    node = node.value
                elif isinstance(node, ast.Subscript):
                    node = node.value
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and (node.func.attr in PART_CALLS)
                ):
                    attributes.append(node.func.attr)
                    node = node.func.value
                elif (
                    isinstance(node, ast.Call)
                    and _dotted(node.func).endswith("getattr")
                    and len(node.args) > 1
                    and _literal_name(node.args[1]) is not None
                ):
                    attributes.append(node.args[1].value)
                    node = node.args[0]
                elif isinstance(node, ast.Call) and (  # next(it), parts.get("a"): an item
                    getattr(node.func, "attr", "") in TAKERS
                    or getattr(node.func, "id", "") in {"next", "iter", "list", "tuple"}
                    and node.args
                ):
                    node = node.func.value if isinstance(node.func, ast.Attribute) else node.args[0]
                else:
                    break
            if isinstance(node, ast.Name) and (
                node.id in bound or node.id in looped.get(id(inside), ())
            ):
                return True
            return (  # self.model.weights, box.m.layers: parts past what holds the model
                model_of(node)
                and "optimizer" not in attributes
                and any(a in MODEL_PARTS for a in attributes)
            )

        def reaches(node: ast.AST, inside: ast.AST) -> bool:
            if not weights:
                return optimizer_of(node)
            return any(part(sub, inside) for sub in _nodes(node))

        def feed(names: list[tuple[str, ast.AST]], body: ast.AST, at: ast.AST) -> None:
            held = {n for n, value in names if reaches(value, at)}
            for sub in _nodes(body) if held else ():
                looped.setdefault(id(sub), set()).update(held)

        callables = {  # the notebook's own functions and the lambdas bound to a name
            node.name: node
            for node in self._walk()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for node in self._walk():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                callables.update((t, node.value) for t in _targets(node))

        def parameters(function: ast.AST) -> list[str]:
            arguments = function.args
            return [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]

        for _ in range(5):  # chains: ls = fit_model.layers; for l in ls: for v in l.weights
            before = (sum(map(len, looped.values())), len(bound))
            for node in self._walk():
                loops = [node] if isinstance(node, (ast.For, ast.AsyncFor)) else []
                loops += getattr(node, "generators", [])
                for loop in loops:
                    feed(_fed(loop.target, loop.iter), node, node)
                if weights and isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                    if node.value is not None and reaches(node.value, node):
                        bound.update(_targets(node))
                        for target in getattr(node, "targets", None) or [node.target]:
                            held_in = _root(target)  # d[k] = layer, box.layer = layer
                            if held_in not in (None, target) and held_in.id != "self":
                                bound.add(held_in.id)
                if (  # ls.append(fit_model.layers[-1]): ls holds a part
                    weights
                    and isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in FILLERS
                    and isinstance(_root(node.func.value), ast.Name)
                    and _root(node.func.value).id != "self"
                    and any(
                        reaches(a, node) for a in [*node.args, *(k.value for k in node.keywords)]
                    )
                ):
                    bound.add(_root(node.func.value).id)
                if not isinstance(node, ast.Call):
                    continue
                given = [*node.args, *(k.value for k in node.keywords)]
                function = (
                    node.func
                    if isinstance(node.func, ast.Lambda)
                    else callables.get(getattr(node.func, "id", ""))
                )
                if function is not None:  # (lambda v: v.assign(0))(w); put(v, w)
                    feed(list(zip(parameters(function), node.args)), function, node)
                for value in given:  # map(lambda v, w: v.assign(w), a, b); map(put, a, b)
                    function = (
                        value
                        if isinstance(value, ast.Lambda)
                        else callables.get(getattr(value, "id", ""))
                    )
                    if function is None:
                        continue
                    others = [v for v in given if v is not value]
                    names = parameters(function)
                    pairs = (
                        list(zip(names, others))
                        if len(others) == len(names)
                        else [(n, v) for n in names for v in others]
                    )
                    feed(pairs, function, node)
            if (sum(map(len, looped.values())), len(bound)) == before:
                break

        def written(target: ast.AST, inside: ast.AST) -> bool:
            if weights:
                return part(target, inside)
            root = _root(target)
            if root is not None and root.id in looped.get(id(inside), set()):
                return True
            attributes = {a.attr for a in _nodes(target) if isinstance(a, ast.Attribute)}
            if (
                isinstance(inside, ast.Call)
                and getattr(inside.func, "value", None) is target
                and inside.func.attr in VALUE_SETTERS
            ):
                attributes.add("variables")  # the optimizer, written by its own method
            return bool(attributes & {"iterations", "variables"}) and optimizer_of(target)

        writers = STEP_WRITERS | LOADED_INTO

        def weight_write(node: ast.AST) -> bool:
            if isinstance(node, ast.Attribute):  # v.assign, layer.set_weights: called or not
                return (
                    node.attr in writers
                    and part(node.value, node)
                    or (
                        node.attr in STEP_WRITERS and holds.reached(node.value)  # d["m"].kernel
                    )
                )
            if not isinstance(node, ast.Call):
                return False
            called = getattr(node.func, "attr", None) or getattr(node.func, "id", "")
            if called == "getattr" and len(node.args) > 1:  # getattr(v, "assign")
                return _literal_name(node.args[1]) in writers and part(node.args[0], node)
            if called in STEP_METHODS:  # another optimizer's steps on its variables
                return any(
                    reaches(v, node) for v in [*node.args, *(k.value for k in node.keywords)]
                )
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if (
                called in writers | VALUE_SETTERS
                and (first := _written(node)) is not None
                and (
                    receiver is None
                    or _resolved(receiver, self._imports)
                    or isinstance(receiver, ast.Call)
                    and getattr(receiver.func, "id", "") == "type"
                )
            ):  # tf.compat.v1.assign(v, w), keras.Model.set_weights(layer, w), set_value
                if isinstance(first, ast.Call) and _dotted(first.func) == "zip" and first.args:
                    first = first.args[0]
                return reaches(first, node)
            mapped = [  # map(tf.Variable.assign, fit_model.weights, ws), methodcaller("assign")
                v
                for v in node.args
                if isinstance(v, ast.Attribute)
                and v.attr in writers
                or isinstance(v, ast.Call)
                and _dotted(v.func).endswith("methodcaller")
                and v.args
                and _literal_name(v.args[0]) in writers
            ]
            return bool(mapped) and any(
                reaches(v, node) for v in node.args if all(v is not m for m in mapped)
            )

        found = []
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if weights:
                    if weight_write(node):
                        found.append((self.cells[index], _short(node, 80)))
                    continue
                if isinstance(node, ast.Call):
                    called = getattr(node.func, "attr", None) or getattr(node.func, "id", "")
                    if called not in STEP_WRITERS | VALUE_SETTERS:
                        continue
                    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                    targets = [*node.args, *(k.value for k in node.keywords)]
                    if called in STEP_WRITERS and receiver is not None:
                        targets.append(receiver)
                    elif receiver is not None and optimizer_of(receiver):
                        targets.append(receiver)  # name.optimizer.set_weights(...)
                elif isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    targets = [t for t in targets if getattr(t, "attr", "") == "iterations"]
                else:
                    continue
                if any(written(target, node) for target in targets):
                    found.append((self.cells[index], _short(node, 80)))
        return found

    def _model_names(self, name: str, places: _Places) -> _Holds:
        """Which expressions hold model `name` (`_Holds`), by one rule: a name bound from an
        expression that holds it (any target: unpacked, a loop's or a comprehension's, `with ...
        as`, `:=`, `+=`, an item or attribute set, `d["m"] = ...` or `self.m = ...`, the class
        whose body binds it; a path read from one, `m = box.m`, too), a parameter of a lambda or
        of the notebook's own function (a class's `__init__`, a method) a call gives an argument
        that holds it (or a default that does; `map(f, [fit_model])` gives `f` its items), the
        notebook's own function whose `return` or `yield` holds it (its calls then do), a
        container filled with it (`ms.append(fit_model)`, `setattr(box, "m", fit_model)`), a
        `match`'s captures, an `except ... as` name where a `raise` holds it, IPython's output
        names after a cell shows it (`Out[n]`, `_`), what the model's `fit` returns (a History)
        and the callbacks its methods are given (Keras gives them the model), and a Keras
        callback's `self`."""
        holds = _Holds(name, places)
        functions: dict[str, list[ast.AST]] = {}  # by the name a call uses: defs, lambdas
        methods: set[int] = set()  # the defs whose first parameter is their object's
        callbacks = self._callback_classes()
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                for target in _targets(node):
                    functions.setdefault(target, []).append(node.value)
            elif isinstance(node, ast.ClassDef):
                for method in node.body:
                    if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods.add(id(method))
                        if method.name == "__init__":
                            functions.setdefault(node.name, []).append(method)
                        if node.name in callbacks and method.args.args:
                            holds.bind(method.args.args[0].arg, method, node)

        def parameters(function: ast.AST) -> list[ast.arg]:
            arguments = function.args
            found = [*arguments.posonlyargs, *arguments.args]
            return found[1:] if id(function) in methods else found

        def give(function: ast.AST, call: ast.Call | None) -> None:
            """Bind the parameters of `function` that `call` gives what holds the model (every
            one, with no call: `map(f, [fit_model])`)."""
            arguments = function.args
            positional = parameters(function)
            named = {a.arg: a for a in [*positional, *arguments.kwonlyargs]}
            rest = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            given: list[ast.arg] = []
            if call is None:
                given = [*named.values(), *rest]
            else:
                for index, value in enumerate(call.args):
                    if holds.within(value):
                        starred = isinstance(value, ast.Starred) or index >= len(positional)
                        given += [*positional, *rest] if starred else [positional[index]]
                for keyword in call.keywords:
                    if holds.within(keyword.value):
                        given += (
                            [named[keyword.arg]]
                            if keyword.arg in named
                            else [*named.values(), *rest]
                        )
            defaults = [*arguments.defaults, *arguments.kw_defaults]
            kept = [*positional[len(positional) - len(arguments.defaults) :], *arguments.kwonlyargs]
            given += [
                a for a, d in zip(kept, defaults, strict=False) if d is not None and holds.within(d)
            ]
            for argument in given:
                holds.bind(argument.arg, function, function)

        def bind(target: ast.AST, node: ast.AST) -> None:
            if isinstance(target, (ast.Tuple, ast.List)):
                for element in target.elts:
                    bind(element, node)
            elif isinstance(target, ast.Starred):
                bind(target.value, node)
            elif isinstance(target, ast.Name):
                holds.bind(target.id, node)
            elif (root := _root(target)) is not None:  # d["m"] = fit_model; self.m = m
                method = places._scope(node)
                owner = places.parents.get(id(method))
                if (
                    id(method) in methods
                    and method.args.args
                    and method.args.args[0].arg == root.id
                ):
                    holds.bind(root.id, node, owner)  # in all its class's methods
                    holds.bind(owner.name, owner)  # H(...) makes an object holding it
                else:
                    holds.bind(root.id, node)
            owner = places.parents.get(id(node))
            if isinstance(owner, ast.ClassDef):  # class B: m = fit_model
                holds.bind(owner.name, owner)

        def path(value: ast.AST) -> bool:
            """`value` is read from what holds the model (`m = box.m`, `B.m`), or is what its
            `fit` returns (a History, whose `.model` it is)."""
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                return value.func.attr == "fit" and holds.reached(value.func.value)
            return not any(isinstance(sub, ast.Call) for sub in _nodes(value)) and holds.reached(
                value
            )

        tops = {id(statement) for tree in self.trees for statement in tree.body}
        shown = {"Out", "_oh", "_", "__", "___"}  # IPython keeps what a cell shows
        shown.update(n.id for n in self._walk() if isinstance(n, ast.Name) and n.id[1:].isdigit())
        handlers = [n for n in self._walk() if isinstance(n, ast.ExceptHandler) and n.name]
        for _ in range(8):  # aliases of aliases: a = fit_model; b = a
            before = holds.size()
            for node in self._walk():
                value = getattr(node, "value", None)
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                    if value is not None and (holds.within(value) or path(value)):
                        for target in getattr(node, "targets", None) or [node.target]:
                            bind(target, node)
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    if holds.within(node.iter):
                        bind(node.target, node)
                elif isinstance(node, ast.withitem):
                    if node.optional_vars is not None and holds.within(node.context_expr):
                        bind(node.optional_vars, node.context_expr)
                elif isinstance(node, ast.Expr) and id(node) in tops and holds.within(node.value):
                    for name in shown:  # a cell ending `fit_model`: Out[n], _
                        holds.bind(name, node)
                elif isinstance(node, ast.Raise) and node.exc and holds.within(node.exc):
                    for handler in handlers:  # raise E(fit_model) ... except E as e
                        holds.bind(handler.name, handler)
                elif isinstance(node, ast.Match) and holds.within(node.subject):
                    for sub in _nodes(node):  # match fit_model: case m: ...
                        for captured in (getattr(sub, "name", None), getattr(sub, "rest", None)):
                            if isinstance(sub, ast.pattern) and captured:
                                holds.bind(captured, node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    give(node, ast.Call(func=node, args=[], keywords=[]))  # its defaults
                    if any(
                        isinstance(sub, (ast.Return, ast.Yield, ast.YieldFrom))
                        and sub.value
                        and holds.within(sub.value)
                        for sub in _nodes(node)
                    ):
                        holds.bind(node.name, node)  # def get(): return fit_model
                elif isinstance(node, ast.Call):
                    callee = node.func
                    filled = (  # setattr(box, "m", fit_model), ms.append(fit_model)
                        node.args[0]
                        if _dotted(callee).split(".")[-1].strip("_") == "setattr"
                        and len(node.args) > 2
                        else callee.value
                        if isinstance(callee, ast.Attribute)
                        and callee.attr in {*FILLERS, "__setattr__"}
                        else None
                    )
                    if filled is not None and any(
                        holds.within(v) for v in [*node.args, *(k.value for k in node.keywords)]
                    ):
                        bind(filled, node)
                    if isinstance(callee, ast.Attribute) and holds.reached(callee.value):
                        for keyword in node.keywords:  # Keras gives its callbacks the model
                            for name in (
                                _callback_names(keyword.value) if keyword.arg == "callbacks" else ()
                            ):
                                holds.bind(name, node)
                    for function in (
                        [callee]
                        if isinstance(callee, ast.Lambda)
                        else functions.get(
                            getattr(callee, "id", None) or getattr(callee, "attr", ""), []
                        )
                    ):
                        give(function, node)
                    given = [*node.args, *(k.value for k in node.keywords)]
                    for value in given:  # map(f, [fit_model]), partial(f, fit_model)
                        passed = (
                            [value]
                            if isinstance(value, ast.Lambda)
                            else functions.get(getattr(value, "id", ""), [])
                        )
                        if passed and any(holds.within(v) for v in given if v is not value):
                            for function in passed:
                                give(function, None)
            if holds.size() == before:
                break
        return holds

    def hand_steps(self, name: str, *, loads: bool = False) -> list[tuple[int, str]]:
        """(cell, code) of each place the code reaches a method that steps the optimizer of
        model `name` (`STEP_METHODS`: `apply_gradients`, `apply`, `minimize`, ...), called or
        not (`strategy.run(name.optimizer.apply_gradients, ...)`), or looks one up
        (`getattr(opt, "apply_gradients")`, or by a name not written out): on
        `name.optimizer` (its `inner_optimizer` too), on a name bound to it, on the optimizer
        object given to `name.compile(optimizer=...)` (inside Keras's `LossScaleOptimizer`
        too), on a parameter of the notebook's own function given one of these, on an alias of
        the model (`m = fit_model`, `for m in [fit_model]`) and on a callback's `self.model`
        (the model whose `fit` or `evaluate` runs it). A model
        trained by its `fit` makes its steps there: steps made by hand (zero gradients leave
        Adam's weights as they were while the count grows) are a count written, as
        `step_assignments` are. The custom loop's `optimizer.apply_gradients(...)` steps
        another optimizer, not counted. With `loads`, the places that load weights and optimizer
        state into the model instead (`LOADED_INTO` on it or its optimizer,
        `keras.saving.load_weights(model, ...)`, a `tf.train.Checkpoint` given the model or its
        optimizer anywhere among its arguments then read, restored or given to a
        `CheckpointManager` that restores it): Keras 3 saves a compiled model's optimizer with
        it, so its step count and moments come in with the weights."""

        def compiled_with(value: ast.AST) -> list[str]:
            while True:
                if isinstance(value, ast.NamedExpr):
                    return [value.target.id] if isinstance(value.target, ast.Name) else []
                if isinstance(value, ast.Name):
                    return [value.id]
                if isinstance(value, ast.Call) and _dotted(value.func).endswith(
                    "LossScaleOptimizer"
                ):
                    inner = _argument(value, ["inner_optimizer"], "inner_optimizer")
                    if inner is None:
                        return []
                    value = inner
                    continue
                return []

        places = _Places(self.trees)
        held: set[str] = set()
        holding: dict[str, list[tuple]] = {}  # name: places from which it holds the optimizer
        for node in self._walk():
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "compile"
                and getattr(node.func.value, "id", None) == name
            ):
                given = _argument(node, ["optimizer"], "optimizer")
                for compiled in compiled_with(given) if given is not None else []:
                    held.add(compiled)
                    holding.setdefault(compiled, []).append(places.at(node))

        holds = self._model_names(name, places)  # m = fit_model; d = {"m": fit_model}; ...
        model_of = holds.reached  # fit_model, what holds it, what is read from that

        def in_force(held_name: str, at: tuple | None) -> bool:
            """`held_name` holds the optimizer at `at`: bound to it (compile's object, an alias)
            before `at` and not bound again to another object in between (the custom loop's
            `optimizer = keras.optimizers.Adam()` after fit_model compiled with `optimizer`)."""
            if at is None or held_name not in holding:
                return True
            again = places.rebound(held_name)
            return any(
                start < at and not any(start < other < at for other in again)
                for start in holding[held_name]
            )

        def reaches(node: ast.AST, names: set[str], at: tuple | None = None) -> bool:
            return any(
                isinstance(sub, ast.Attribute)
                and sub.attr == "optimizer"
                and model_of(sub.value)
                or isinstance(sub, ast.Call)  # getattr(fit_model, "optimizer")
                and _dotted(sub.func).endswith("getattr")
                and len(sub.args) > 1
                and model_of(sub.args[0])
                and _literal_name(sub.args[1]) == "optimizer"
                or isinstance(sub, ast.Name)
                and sub.id in names
                and in_force(sub.id, at)
                for sub in _nodes(node)
            )

        def reached(node: ast.AST, names: set[str]) -> bool:  # where the code of `node` runs
            return any(reaches(node, names, at) for at in places.runs(node))

        own = {  # a call of these can give the optimizer back: (lambda: opt)(), get_opt()
            n.name for n in self._walk() if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

        def gives(value: ast.AST) -> bool:  # not int(...), a library's call, `.numpy()`
            return not isinstance(value, ast.Call) or (
                isinstance(value.func, ast.Lambda) or getattr(value.func, "id", "") in own
            )

        for _ in range(5):  # aliases of aliases: opt = fit_model.optimizer; o = opt
            before = set(held)
            for node in self._walk():
                value = getattr(node, "value", None)
                if isinstance(node, ast.withitem) and node.optional_vars is not None:
                    if reached(node.context_expr, held):  # with nullcontext(opt) as o
                        held.update(_bound_targets(node.optional_vars))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    if reached(node.iter, held):  # for o in (fit_model.optimizer,)
                        held.update(_bound_targets(node.target))
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and value:
                    if reached(value, held) and gives(value):
                        for target in _targets(node):
                            held.add(target)
                            if target in holding:  # an alias again: holds from here
                                start = places.at(node)
                                if start not in holding[target]:
                                    holding[target].append(start)
            if held == before:
                break

        def made_of(made: ast.AST, at: tuple) -> ast.AST:
            if isinstance(made, ast.Name):  # the assignment in force there
                found = [n for place, n in self._assignments_in_order(made.id) if place < at]
                return found[-1].value if found and hasattr(found[-1], "value") else made
            return made

        def attached(names: set[str]) -> list[ast.AST]:
            """What the code attaches to the objects `names` stand for as attributes
            (`_c.model = fit_model`, `setattr(_c, "model", fit_model)`): a checkpoint reads
            into them as into its arguments."""
            found = []
            for sub in self._walk():
                if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and sub.value:
                    targets = getattr(sub, "targets", None) or [sub.target]
                    if any(
                        isinstance(t, ast.Attribute) and getattr(t.value, "id", None) in names
                        for target in targets
                        for t in _nodes(target)
                    ):
                        found.append(sub.value)
                elif (
                    isinstance(sub, ast.Call)
                    and _dotted(sub.func).endswith("setattr")
                    and len(sub.args) > 2
                    and getattr(sub.args[0], "id", None) in names
                ):
                    found.append(sub.args[2])
            return found

        def restored(node: ast.AST) -> ast.AST | None:
            """The `tf.train.Checkpoint(...)` (whose arguments it reads into) of which `node`
            calls `read` or `restore` (on the call, or a name bound to one), or which a
            `tf.train.CheckpointManager` that `node` restores holds."""
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CHECKPOINT_READS
            ):
                return None
            at = places.at(node)
            made = made_of(node.func.value, at)
            if isinstance(made, ast.Call) and _dotted(made.func).endswith("CheckpointManager"):
                held_checkpoint = _argument(made, ["checkpoint"], "checkpoint")
                made = made_of(held_checkpoint, at) if held_checkpoint is not None else made
            if isinstance(made, ast.Call) and _dotted(made.func).endswith("Checkpoint"):
                return made
            return None

        def checkpoint_names(node: ast.Call) -> set[str]:
            """The names the checkpoint `node` reads stands for (its own, its manager's)."""
            names = {n.id for n in _nodes(node.func.value) if isinstance(n, ast.Name)}
            made = made_of(node.func.value, places.at(node))
            if isinstance(made, ast.Call):
                names.update(n.id for n in _nodes(made) if isinstance(n, ast.Name))
            return names

        def loader(value: ast.AST) -> bool:
            """`value` is a loader (`LOADED_INTO`) not called: `keras.Model.load_weights`,
            `fit_model.set_weights`, `getattr(m, "load_weights")`, a name bound to one."""
            if isinstance(value, ast.Attribute):
                return value.attr in LOADED_INTO
            if isinstance(value, ast.Name):
                if value.id in loaders:
                    return True
                resolved = _resolved(value, self._imports)
                return bool(resolved) and resolved.split(".")[-1] in LOADED_INTO
            return (
                isinstance(value, ast.Call)
                and _dotted(value.func).endswith("getattr")
                and len(value.args) > 1
                and _literal_name(value.args[1]) in LOADED_INTO
            )

        loaders: set[str] = set()  # lw = keras.Model.load_weights; lw(fit_model, path)
        for _ in range(5):
            before = set(loaders)
            for node in self._walk():
                value = getattr(node, "value", None)
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and value:
                    if loader(value):
                        loaders.update(_targets(node))
            if loaders == before:
                break

        def loader_named(node: ast.Call) -> bool:
            """`node` calls a loader by its name (`LOADED_INTO`), whatever its receiver:
            `keras.Model.load_weights(...)`, `type(m).load_weights(...)`, an imported or
            aliased `keras.saving.load_weights`, a name bound to a loader (`lw =
            keras.Model.load_weights`, `sw = fit_model.set_weights`)."""
            if isinstance(node.func, ast.Attribute):
                return node.func.attr in LOADED_INTO
            if isinstance(node.func, ast.Name) and node.func.id in loaders:
                return True
            resolved = _resolved(node.func, self._imports) or _dotted(node.func)
            return resolved.split(".")[-1] in LOADED_INTO

        makers = ("Sequential", "Model", "clone_model")
        own_functions = self._functions()
        touched = {"compile", "fit", "train_on_batch", *LOADED_INTO}
        shared = {"fit", "train_on_batch", "load_model", *LOADED_INTO, *MODEL_PARTS, *MODEL_ENDS}

        def foreign(sub: ast.AST) -> bool:  # single_model.layers; not keras.layers.Dense
            return (
                isinstance(sub, ast.Attribute)
                and sub.attr in shared
                and not _resolved(sub, self._imports)
            )

        def fresh(value: ast.AST, depth: int = 0) -> bool:
            """`value` makes a new model of initial weights: Keras's model makers given no
            other model's layers (`keras.Sequential(single_model.layers)` shares them;
            `clone_model` makes new ones), or the notebook's own function that returns only
            such a call (or a name of its own bound to one) and neither fits, loads nor reaches
            another model's layers (`make_model()`)."""
            if not isinstance(value, ast.Call) or depth > 5:
                return False
            if _dotted(value.func).endswith(makers):
                return _dotted(value.func).endswith("clone_model") or not any(
                    map(foreign, _nodes(value))
                )
            function = own_functions.get(getattr(value.func, "id", ""))
            if function is None or any(map(foreign, _nodes(function))):
                return False
            local = {n.id for n in _nodes(function) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store)}  # fmt: skip
            returned = [n.value for n in _nodes(function) if isinstance(n, ast.Return)]
            return bool(returned) and all(
                fresh(r, depth + 1) or isinstance(r, ast.Name) and r.id in local for r in returned
            )

        def untrained(node: ast.AST, depth: int = 0) -> bool:
            """`node` is `y.get_weights()` of a model `y` never trained nor loaded: bound only
            to a call of the notebook's own function or of Keras's model makers
            (`make_model()`, `keras.models.clone_model(...)`), never compiled, fit or given
            weights (red team 16a's honest clone: one set of initial weights for every run);
            `make_model().get_weights()` itself; or a name bound only to such weights and
            used only to be given to `set_weights` (`initial = make_model().get_weights()`)."""
            if isinstance(node, ast.Name) and depth < 5:
                values = self._bindings_by_name().get(node.id, [])
                uses = places.loads.get(node.id, [])
                return (
                    bool(values)
                    and all(v is not None and untrained(v, depth + 1) for v in values)
                    and all(kept(use) for use in uses)
                )
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_weights"
                and not node.args
            ):
                return False
            if fresh(node.func.value):  # make_model().get_weights()
                return True
            if not isinstance(node.func.value, ast.Name):
                return False
            other = node.func.value.id
            values = self._bindings_by_name().get(other, [])
            if not values or not all(
                isinstance(v, ast.Call)
                and (getattr(v.func, "id", "") in own or _dotted(v.func).endswith(makers))
                for v in values
            ):
                return False
            return not any(
                isinstance(sub, ast.Attribute)
                and sub.attr in touched
                and getattr(sub.value, "id", None) == other
                or isinstance(sub, ast.Call)
                and loader_named(sub)
                and any(getattr(a, "id", None) == other for a in sub.args)
                for sub in self._walk()
            )

        def kept(use: ast.Name, depth: int = 0) -> bool:
            """The weights `use` names are only given to `set_weights`, counted, printed or
            looked at (`initial[0].shape`; a loop's variable over them used so, `for w in
            initial: print(w.shape)`): nothing writes into them (`initial[0][:] = trained[0]`)."""
            parent, node = places.parents.get(id(use)), use
            while isinstance(parent, ast.Subscript) and parent.value is node:
                if not isinstance(parent.ctx, ast.Load):
                    return False
                parent, node = places.parents.get(id(parent)), parent
            if isinstance(parent, ast.Attribute) and parent.attr in LOOKED_AT:
                return True  # initial[0].shape: a new value, read
            if (
                isinstance(parent, (ast.For, ast.comprehension))
                and parent.iter is node
                and isinstance(parent.target, ast.Name)
                and depth < 3
            ):
                return all(kept(u, depth + 1) for u in places.loads.get(parent.target.id, []))
            return (
                isinstance(parent, ast.Call)
                and node in parent.args
                and (
                    node is use
                    and getattr(parent.func, "attr", "") == "set_weights"
                    or getattr(parent.func, "id", "") in {"len", "print"}
                )
            )

        def loaded(node: ast.AST) -> bool:
            """`node` loads weights and optimizer state into the model or its optimizer."""
            if isinstance(node, ast.Attribute) and node.attr in LOADED_INTO:
                call = places.parents.get(id(node))
                if (
                    node.attr == "set_weights"
                    and isinstance(call, ast.Call)
                    and call.func is node
                    and len(call.args) == 1
                    and untrained(call.args[0])
                ):
                    return False
                return model_of(node.value) or reached(node.value, held)
            if isinstance(node, ast.Call) and (
                loader_named(node)  # or a loader given with the model: partial(lw, fit_model)
                or any(loader(a) for a in [*node.args, *(k.value for k in node.keywords)])
            ):
                given = [*node.args, *(k.value for k in node.keywords)]
                if isinstance(node.func, ast.Attribute) and given and untrained(given[-1]):
                    given = given[:-1]  # fit_model.set_weights(initial.get_weights())
                receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                if (  # dst.set_weights(src.get_weights()): only its receiver is loaded into
                    receiver is not None
                    and not _resolved(receiver, self._imports)
                    and not (isinstance(receiver, ast.Call) and _dotted(receiver.func) == "type")
                    and not any(loader(a) for a in given)
                ):
                    given = []
                if any(reaches(value, held) or holds.within(value) for value in given):
                    return True  # not new.set_weights(fit_model.get_weights()): read from it
            checkpoint = restored(node)
            if checkpoint is None:
                return False
            at = places.at(node)
            given = [made_of(sub, at) for sub in _nodes(checkpoint) if isinstance(sub, ast.Name)]
            given += attached(checkpoint_names(node))  # _c.model = fit_model
            return any(  # Checkpoint(model=fit_model), Checkpoint(**kept), kept = dict(model=...)
                reaches(value, held, at) or any(holds.within(sub) for sub in _nodes(value))
                for value in [checkpoint, *given]
            )

        scoped: list[tuple[ast.AST, set[str]]] = [(tree, held) for tree in self.trees]
        for function in self._functions().values():  # def step(opt): opt.apply_gradients(...)
            arguments = function.args
            positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
            given = {
                parameter
                for parameter in positional + [a.arg for a in arguments.kwonlyargs]
                for _, value in self._given_at_calls(function, parameter) or []
                if value is not None and reached(value, held)
            }
            given.update(  # def step(o=fit_model.optimizer)
                parameter
                for parameter, d in zip(
                    [
                        *positional[len(positional) - len(arguments.defaults) :],
                        *(a.arg for a in arguments.kwonlyargs),
                    ],
                    [*arguments.defaults, *arguments.kw_defaults],
                    strict=False,
                )
                if d is not None and reached(d, held)
            )
            if given:
                scoped.append((function, held | given))

        def still_at_compile(node: ast.AST) -> bool:
            """`node` compiles the model with an optimizer made with a literal learning rate
            too small to move a weight (`optimizer=keras.optimizers.Adam(learning_rate=0.0)`,
            `SGD(0)`, such an optimizer bound to a name first, inside a `LossScaleOptimizer`):
            as the same rate set later (`_rate_written`)."""
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "compile"
                and model_of(node.func.value)
            ):
                return False
            todo = [_argument(node, ["optimizer"], "optimizer")]
            seen = 0
            while todo and seen < 20:
                value, seen = todo.pop(), seen + 1
                if isinstance(value, ast.Name):
                    todo += [v for v in self._bindings_by_name().get(value.id, []) if v]
                elif isinstance(value, ast.NamedExpr):
                    todo.append(value.value)
                elif isinstance(value, ast.Call):
                    if _dotted(value.func).endswith("LossScaleOptimizer"):
                        todo.append(_argument(value, ["inner_optimizer"], "inner_optimizer"))
                        continue
                    rates = [_argument(value, ["learning_rate"], "learning_rate")]
                    rates += [k.value for k in value.keywords if k.arg == "lr"]
                    for given in [  # Adam(**{...}), optimizers.get({...}), from_config({...})
                        *(k.value for k in value.keywords if k.arg is None),
                        *value.args[:1],
                    ]:
                        rates += _dict_rates(given)
                    if any(self._tiny(rate) for rate in rates):
                        return True
            return False

        found = []
        loading = []
        for tree_index, tree in enumerate(self.trees):  # before or after its fit: a fit in
            for node in _nodes(tree):  # the text before a load may never run (`if 0:`)
                if loaded(node):
                    loading.append((self.cells[tree_index], _short(node, 80)))
        shared, initialized = self._built_from(name, places)  # Sequential(parts); Constant(w)
        loading += initialized
        loading += self._state_writes(name, holds, frozenset(shared))  # .layers[1].set_weights
        for top, names in scoped:
            index = next(
                (i for i, tree in enumerate(self.trees) if any(n is top for n in _nodes(tree))),
                0,
            )
            for node in _nodes(top):
                looked = (
                    isinstance(node, ast.Call)
                    and _dotted(node.func).split(".")[-1] in LOOKUPS
                    and node.args
                )
                if looked:
                    named = node.args[1:2] if _dotted(node.func).endswith("getattr") else []
                    constant = _literal_name(named[0]) if named else None
                    stepping = constant is None or constant in STEP_METHODS | LOADED_INTO
                    if stepping and reached(node.args[0], names):
                        found.append((self.cells[index], _short(node, 80)))
                elif (
                    isinstance(node, ast.Attribute)
                    and node.attr in STEP_METHODS
                    and reached(node.value, names)
                ):
                    found.append((self.cells[index], _short(node, 80)))
                elif (
                    isinstance(node, ast.Attribute)
                    and node.attr in MODEL_STEPS
                    and (model_of(node.value) or reached(node.value, names))
                ):
                    found.append((self.cells[index], _short(node, 80)))  # train_on_batch
                elif still_at_compile(node):
                    found.append((self.cells[index], _short(node, 80)))  # Adam(learning_rate=0)
                elif _rate_written(node, self._tiny) is not None and reached(
                    _rate_written(node, self._tiny), names
                ):
                    found.append((self.cells[index], _short(node, 80)))  # learning rate 0
                elif restored(node) and reached(restored(node), names):
                    found.append((self.cells[index], _short(node, 80)))
        if loads:
            return sorted(set(loading))
        return sorted(set(found))

    def _callback_classes(self) -> set[str]:
        """The notebook's classes that derive from a Keras callback (`keras.callbacks.Callback`,
        `tf.keras.callbacks.Callback`, `Callback` imported from there, another such class of the
        notebook's own)."""
        classes = [n for n in self._walk() if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        for _ in range(5):
            before = set(found)
            for node in classes:
                for base in node.bases:
                    dotted = _resolved(base, self._imports) or _dotted(base)
                    if "callbacks" in dotted.split(".")[:-1] or dotted in found:
                        found.add(node.name)
            if found == before:
                break
        return found

    def unfollowed_calls(self, name: str) -> list[tuple[int, str]]:
        """(cell, call) of each call of a function the reading does not follow (`unfollowed`)
        given the bare name `name`, or `strategy.run` of one given it: what that call does
        with `name` is not read."""
        found = []
        for index, tree in enumerate(self.trees):
            for node in _nodes(tree):
                if not isinstance(node, ast.Call):
                    continue
                called = getattr(node.func, "id", "")
                if getattr(node.func, "attr", "") == "run" and node.args:
                    called = getattr(node.args[0], "id", "")
                given = [*node.args, *(k.value for k in node.keywords)]
                if called in self.unfollowed and any(
                    isinstance(a, ast.Name) and a.id == name for a in given
                ):
                    found.append((self.cells[index], _short(node)))
        return found

    @_kept
    def unreadable(self) -> list[tuple[int, str, str]]:
        """(cell, code, why) of each place the code the kernel runs (`_run_code`) binds names
        or reaches objects in a way the reading cannot read: `why` is "dynamic" for exec, eval,
        the builtin compile, `globals()`, `vars()`, `locals()`, `__builtins__`, `sys.modules`,
        `__main__` or a frame's or function's globals (a name bound through them,
        `globals()["train_ds"] = ...`, `exec("train_ds = ...")`, is no binding the reading
        sees), "private" for an attribute
        whose name starts with `_` (`strategy.extended._experimental_distribute_dataset`,
        `ds._variant_tensor`) or a private TensorFlow module, and for `strategy.extended`
        (`EXTENDED_READS` aside): a private API the reading does not know. Honest code needs
        none of them; allowed are a membership test (`"x" in globals()`, `"google.colab" in
        sys.modules`) and private attributes of the notebook's own
        objects (`self._count` in its class's methods, `clock._start` of `clock =
        EpochClock()`) or of modules other than TensorFlow's and Keras's."""
        run = self._run_code()
        imports = _imports(run)
        classes = {n.name for _, t in run for n in _nodes(t) if isinstance(n, ast.ClassDef)}
        instances = {  # names only ever bound to a new object of a class of the notebook's own
            target
            for target, values in self._bindings_by_name().items()
            if values
            and all(
                isinstance(v, ast.Call) and getattr(v.func, "id", "") in classes for v in values
            )
        }
        found = list(self.unparsed)  # code the kernel ran that is not read here
        for number, tree in run:
            parents = {id(c): n for n in _nodes(tree) for c in ast.iter_child_nodes(n)}
            for node in _nodes(tree):
                why = _unreadable_why(node, parents, imports, instances)
                shown = node
                while not isinstance(shown, ast.stmt) and id(shown) in parents:
                    shown = parents[id(shown)]  # the statement: `globals()["x"] = ...`
                if why:
                    found.append((number, _short(shown, 80), why))
        for number, tree in run:
            for node in _module_writes(tree, imports, classes):
                found.append((number, _short(node, 80), "module"))
        for number, _, text in self._patch_places()[0]:  # mods[0].sha256 = f, np.__dict__[...]
            found.append((number, text, "module"))
        models = set(GRADED_MODELS)  # m = fit_model: an alias is the model
        for _ in range(5):
            before = set(models)
            for target, values in self._bindings_by_name().items():
                if any(isinstance(v, ast.Name) and v.id in models for v in values):
                    models.add(target)
            if models == before:
                break
        ties = self._history_ties(models, run, imports)
        for number, tree in run:
            for node in _model_writes(tree, models, ties):
                found.append((number, _short(node, 80), "model"))
        return found

    def _history_ties(
        self, models: set[str], run: list[tuple[int, ast.Module]], imports: dict[str, str]
    ) -> _Ties:
        """What the reading ties to a graded model or a fit's History (`_Ties`): `models`, the
        parameters of the notebook's functions and lambdas (a method's `self` aside: what a call
        gives them is not followed), and the names bound to a tied value, as an assignment's, a
        loop's or a `with`'s target, or holding one (`box.h = fit_model.history`,
        `kept.append(h)`, `setattr(box, "h", h)`: `box` holds it)."""
        trees = [tree for _, tree in run]
        walked = [node for tree in trees for node in _nodes(tree)]
        classes: dict[str, bool] = {}
        for _ in range(5):  # class H(keras.callbacks.History), class G(H)
            before = dict(classes)
            for node in walked:
                if isinstance(node, ast.ClassDef):
                    bases = [_dotted(b).split(".")[-1] for b in node.bases]
                    classes[node.name] = any(
                        b in HISTORY_CLASSES - {"Callback"} or classes.get(b) for b in bases
                    ) or any(
                        isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and f.name == "__new__"
                        for f in node.body
                    )
            if classes == before:
                break
        parents = {
            id(c): n for tree in trees for n in _nodes(tree) for c in ast.iter_child_nodes(n)
        }
        names = set(models)
        for node in walked:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                arguments = node.args
                given = [
                    *arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                    *filter(None, [arguments.vararg, arguments.kwarg]),
                ]  # fmt: skip
                method = isinstance(parents.get(id(node)), ast.ClassDef)
                names.update(a.arg for a in given[1 if method else 0 :])
        ties = _Ties(names, imports, classes)
        ties.bound = {
            name
            for node in walked
            for name in (
                [node.id]
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
                else [node.name]
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                else [(a.asname or a.name).split(".")[0] for a in node.names]
                if isinstance(node, (ast.Import, ast.ImportFrom))
                else [node.arg]
                if isinstance(node, ast.arg)
                else [node.name]
                if isinstance(node, ast.ExceptHandler) and node.name
                else []
            )
        } | set(imports)
        ties.instances = {
            target
            for node in walked
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", "") in classes
            for target in _targets(node)
        }
        for _ in range(5):
            before = set(names)
            for node in walked:
                value = getattr(node, "value", None)
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and value:
                    if ties.tied(value):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        names.update(n for t in targets for n in _holders(t))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    if ties.tied(node.iter):
                        names.update(_holders(node.target))
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    if ties.tied(node.context_expr):
                        names.update(_holders(node.optional_vars))
                elif isinstance(node, ast.Call):
                    function, holder = node.func, None
                    given = [*node.args, *(k.value for k in node.keywords)]
                    if isinstance(function, ast.Attribute) and function.attr in FILLERS:
                        holder = function.value  # kept.append(fit_model.history)
                    elif _dotted(function).split(".")[-1] in {"setattr", *FILL_FUNCTIONS}:
                        holder, given = (node.args[0], given[1:]) if node.args else (None, [])
                    if holder is not None and any(ties.tied(g) for g in given):
                        names.update(_holders(holder))
            if names == before:
                break
        return ties

    def _bindings_by_name(self) -> dict[str, list[ast.AST | None]]:
        """{name: the value of each of its bindings (None for one without a value: a loop's
        target, a parameter, an import)}."""
        found: dict[str, list[ast.AST | None]] = {}
        for node in self._walk():
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                for target in _targets(node):
                    found.setdefault(target, []).append(getattr(node, "value", None))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                found.setdefault(node.id, [])
            elif isinstance(node, ast.arg):
                found.setdefault(node.arg, []).append(None)
        for node in self._walk():  # targets that are no plain assignment: a loop's, a `with`'s
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)):
                target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
                for sub in _nodes(target) if target is not None else ():
                    if isinstance(sub, ast.Name):
                        found.setdefault(sub.id, []).append(None)
        return found

    def function_calls(self, function: str, *, follow: bool = False) -> set[str] | None:
        """The names of the functions and methods called in `def function`, and the keyword
        arguments given to them as "call:keyword"; None when it is not defined. With `follow`,
        also those of the functions of the notebook's own it calls, and theirs in turn
        (compute_loss calling `count(labels)`, which calls all_reduce: all_reduce is found)."""
        calls = self._calls()  # one pass over the code: a long notebook costs no more
        if function not in calls:
            return None
        found, todo, seen = set(calls[function]), [function], {function}
        while follow and todo:
            for called in calls[todo.pop()]:
                if called in calls and called not in seen:
                    seen.add(called)
                    found |= calls[called]
                    todo.append(called)
        return found

    def _calls(self) -> dict[str, set[str]]:
        """{name of a `def`: what it calls, as `function_calls` says} (the last `def` of a name)."""
        calls = {}
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found = calls[node.name] = set()
                for sub in _nodes(node):
                    if isinstance(sub, ast.Call):
                        callee = sub.func
                        called = (
                            callee.attr
                            if isinstance(callee, ast.Attribute)
                            else callee.id
                            if isinstance(callee, ast.Name)
                            else ""
                        )
                        found.add(called)
                        found.update(f"{called}:{k.arg}" for k in sub.keywords if k.arg)
        return calls

    def shell_reached(self) -> list[str]:
        """What of IPython's shell the code reaches (`SHELL_NAMES`, `SHELL_MODULES`,
        `SHELL_MAGICS`, as "%run"), as names, attributes and imports of the code the kernel runs
        (`_run_code`: cells, `%%time` cells, `%config` values, `%%writefile` files, exec's
        strings), also as a string used as a name (`globals()["get_ipython"]`, getattr's),
        never in another string, a docstring or a comment: with one, the kernel can
        rewrite the probe's answer. The `get_ipython()` calls IPython's transformer writes for
        a magic (`%pip`, `!ls`, `%config`) are not counted."""
        reached = set()
        allowed = set()  # the get_ipython names of a magic's call, as the transformer writes it
        trees = [tree for _, tree in self._run_code()]
        for tree in trees:
            for node in _nodes(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MAGIC_CALLS
                    and isinstance(node.func.value, ast.Call)
                    and getattr(node.func.value.func, "id", "") == "get_ipython"
                ):
                    allowed.add(id(node.func.value.func))
                    if _magic(node)[0] in SHELL_MAGICS:
                        reached.add(f"%{_magic(node)[0]}")
        allowed |= _harmless_memory(trees) | _harmless_listing(trees)
        for tree in trees:
            for node in _nodes(tree):
                if _shows_every_value(node):  # InteractiveShell.ast_node_interactivity = "all"
                    allowed.update(id(sub) for sub in _nodes(node.targets[0]))
        shell_class = [
            n for t in trees for n in _nodes(t) if getattr(n, "id", "") == "InteractiveShell"
        ]
        if all(id(n) in allowed for n in shell_class):  # its import serves only that line
            allowed.update(
                id(n)
                for t in trees
                for n in _nodes(t)
                if isinstance(n, ast.ImportFrom)
                and n.module == "IPython.core.interactiveshell"
                and [(a.name, a.asname) for a in n.names] == [("InteractiveShell", None)]
            )
        for tree in trees:
            for node in _nodes(tree):
                if id(node) in allowed:
                    continue
                if (
                    isinstance(node, ast.Name)
                    and node.id in SHELL_NAMES | HOOK_NAMES | MEMORY_NAMES | GRADER_STATE_NAMES
                ):
                    reached.add(node.id)
                elif (
                    isinstance(node, ast.Attribute)
                    and node.attr in SHELL_NAMES | HOOK_NAMES | MEMORY_NAMES | GRADER_STATE_NAMES
                ):
                    reached.add(node.attr)
                elif isinstance(node, ast.Attribute) and _dotted(node).endswith(DOTTED_HOOKS):
                    reached.add(_dotted(node).split(".")[-1])  # sys.monitoring, gc.callbacks
                elif (
                    _named(node) in SHELL_NAMES | HOOK_NAMES | MEMORY_NAMES | GRADER_STATE_NAMES
                ):  # getattr(sys, "settrace")
                    reached.add(_named(node))
                elif _interface_named(node):  # def __array_interface__, {"__array_...": d}
                    reached.add(_interface_named(node))
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    imported = isinstance(node, ast.Import)
                    modules = [a.name for a in node.names] if imported else [node.module or ""]
                    names = [] if imported else [a.name for a in node.names]
                    reached.update(m for m in modules if m.startswith(SHELL_MODULES))
                    reached.update(
                        m.split(".")[0] for m in modules if m.split(".")[0] in MEMORY_NAMES
                    )
                    reached.update(n for n in names if n in SHELL_NAMES | MEMORY_NAMES)
        return sorted(reached)

    def unread_code(self) -> list[str]:
        """Where the code the kernel runs has it run code the grader cannot read as code
        (`_unread_code`: `exec(SRC)`, runpy, a Python file written by `open`), each as "cell [N],
        line L: `...`": what that code does, the reading never sees."""
        run = self._run_code()
        assigned: dict[str, list[ast.AST]] = {}
        for _, tree in run:
            for node in _nodes(tree):
                for name in _targets(node):
                    assigned.setdefault(name, []).append(getattr(node, "value", None))
        literals = {  # PATH = "helpers.py": a name only ever assigned one literal
            name: _literal_code(values[0])
            for name, values in assigned.items()
            if len(values) == 1 and _literal_code(values[0]) is not None
        }
        imports = _imports(run)
        functions = {
            n.name
            for _, tree in run
            for n in _nodes(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        tars = frozenset(  # t = tarfile.open(...), with tarfile.open(...) as t
            name
            for _, tree in run
            for n in _nodes(tree)
            for value, target in _bindings(n)
            if isinstance(value, ast.Call) and _resolved(value.func, imports).startswith("tarfile.")
            for name in [getattr(target, "id", "")]
        )
        for _, tree in run:  # timeit.timeit(step): a function the notebook defines, read
            for n in _nodes(tree):
                if isinstance(n, ast.Name) and n.id in functions and n.id not in assigned:
                    n._function = True  # type: ignore[attr-defined]
        found = []
        for number, tree in run:
            for node in _nodes(tree):
                coding = _changed_coding(node)
                if coding:
                    name, args = _magic(node)
                    shown = f"%%{name} {args[0].value}" if name else ast.unparse(node.func)
                    found.append(
                        f"cell [{number}], line {node.lineno}: `{shown[:80]}` declares the coding "
                        f"{coding}, which makes Python read other code than its text shows"
                    )
                elif _unread_code(node, literals, imports, tars):
                    line = (_as_typed(node) or ast.unparse(node)).splitlines()[0][:80]
                    found.append(f"cell [{number}], line {node.lineno}: `{line}`")
        unparsed = {"deep": "nested too deep to parse", "cut": f"past {MAX_CHARS:,} characters"}
        found += [f"cell [{n}]: `{line}`, {unparsed[why]}" for n, line, why in self.unparsed]
        return list(dict.fromkeys(found))

    @_kept
    def _patch_places(self) -> tuple[list[tuple[int, int, str]], list[str]]:
        """The assignments, in the code the kernel runs, to an attribute of a module the grader
        relies on (`RELIED_ON`), imported (`import json`, `import tensorflow as tf`) or an alias
        of one (`m = json`, and as a walrus, a loop over a literal list, a `with ... as`, a
        tuple) (`json.dumps = f`, `tf.distribute.MirroredStrategy = Fake`,
        `setattr(json, "dumps", f)`, `vars(np).update(...)`, `object.__setattr__(np, ...)`,
        `importlib.import_module("json").dumps = f`, through a container or a namespace, `mods =
        [hashlib]; mods[0].sha256 = f`, `d = np.__dict__; d["asarray"] = f`,
        `operator.setitem(json.__dict__, ...)`), each as (cell, line, code), with the changes of
        a relied-on class (`_class_changes`): with one, a library the probe or the course calls
        may answer for the notebook (and `unreadable` counts it as a module's attribute set).
        A function's parameter or local of the same name is not the module (`def f(np): np.x =
        1`); a name
        imported from a module relied on is that module's, whatever it is (`from json import
        encoder`; `from tensorflow.data import Dataset; Dataset.__iter__ = f`; `from keras import
        Model`; a literal set on such a class is data: `Callback.verbose = 0`), while a class the
        notebook derives from it is its own (`class Mine(Callback)`, `Mine.x = 1`).
        (`os.environ["X"] = "1"`, `pd.options.display.max_rows = 50` or `self.best = np.inf` are
        not counted.)"""
        run = self._run_code()
        modules: dict[str, str] = {}
        classes: set[str] = set()  # Dataset of `from tensorflow.data import Dataset`
        for _, tree in run:
            for node in _nodes(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        name = a.asname or a.name.split(".")[0]
                        modules[name] = a.name if a.asname else name
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    for a in node.names:
                        full = f"{node.module}.{a.name}"
                        plumbing = node.module.split(".")[0] in PLUMBING  # BuiltinImporter too
                        if plumbing or _relied_on(full, []):  # a module, class or function
                            modules[a.asname or a.name] = full
                            if not a.name[:1].islower() and not plumbing:
                                classes.add(a.asname or a.name)
        modules.pop("*", None)
        modules.setdefault("__builtins__", "builtins")  # the kernel's name for the module
        aliases: set[int] = set()  # the nodes that bind a name to a module
        for _ in range(5):  # aliases of aliases: m = json; n = m
            before = dict(modules)
            for _, tree in run:
                for node in _nodes(tree):
                    for target, module in _aliases(node, modules):
                        modules.setdefault(_bound_name(target), module)
                        aliases.add(id(target))
            if modules == before:
                break
        rebound = _top_level_rebindings(run, aliases)
        found = []

        def visit(node: ast.AST, known: dict[str, str], number: int, *, top: bool) -> None:
            """`known`: the module names visible at `node`; `top`: it is outside any function,
            class or comprehension."""
            where = (number, getattr(node, "lineno", 0))
            visible = _unless_rebound(known, rebound, where) if top else known
            if _patches(node, visible) and not _sets_data(node, classes):
                line = ast.unparse(node).splitlines()[0][:80]
                found.append((number, node.lineno, line))
            for child, scope in _children_in_scopes(node, known, modules, aliases):
                visit(child, scope, number, top=top and scope is known)

        for number, tree in run:
            for statement in tree.body:
                visit(statement, modules, number, top=True)
        return found, _class_changes(run)

    def module_patches(self) -> list[str]:
        """`_patch_places`, each as "cell [N], line L: `...`" (a class of a module relied on
        changed, `keras.Model.fit = fake`, too)."""
        found, classes = self._patch_places()
        shown = [f"cell [{number}], line {line}: `{text}`" for number, line, text in found]
        return list(dict.fromkeys(shown + classes))


#: The methods that give a container's item (`Code._state_writes`: `parts.get("a")`).
TAKERS = frozenset({"get", "pop", "popleft", "popitem", "values", "setdefault", "copy"})
#: What looking at an array reads (`Code.hand_steps`: initial weights looked at are kept).
LOOKED_AT = frozenset({"shape", "dtype", "ndim", "size", "nbytes"})
#: The methods of an optimizer that make a step (`Code.hand_steps`).
STEP_METHODS = frozenset(
    {"apply_gradients", "apply", "minimize", "update_step", "stateless_apply", "_apply",
     "_backend_apply_gradients", "_internal_apply_gradients"}
)  # fmt: skip
#: The methods that put something into a container (`Code._filled`).
FILLERS = frozenset(
    {"append", "extend", "insert", "add", "update", "__setitem__", "appendleft", "extendleft",
     "__iadd__", "__ior__", "setdefault", "put", "put_nowait", "push"}
)  # fmt: skip
#: The container types whose methods fill the container given first (`list.append(L, x)`).
CONTAINER_TYPES = frozenset({"list", "dict", "set", "deque", "collections", "bytearray"})
#: The functions that fill the container given first (`heapq.heappush(L, x)`).
FILL_FUNCTIONS = frozenset(
    {"heappush", "heappushpop", "insort", "insort_left", "insort_right", "setitem", "iadd",
     "iconcat", "ior"}
)  # fmt: skip
#: The methods of a model that step its optimizer outside `fit` (`fit_model.train_on_batch`).
#: The methods that load weights (and, but for `set_weights`, optimizer state) into a model (or
#: its optimizer) from a file or another's state: Keras 3 saves a compiled model's optimizer with
#: its weights; a model graded as trained by `fit` given another's weights is a copy either way.
LOADED_INTO = frozenset({"load_weights", "load_own_variables", "set_state_tree", "set_weights"})
#: What of a model holds its weights (`Code._state_writes`): its layers and variables, as
#: attributes (`fit_model.layers[0].kernel`) or through a call (`fit_model.get_layer("dense")`).
MODEL_PARTS = frozenset(
    {"layers", "_layers", "get_layer", "_flatten_layers", "submodules", "weights", "variables",
     "trainable_variables", "trainable_weights", "non_trainable_variables",
     "non_trainable_weights", "_trainable_variables", "_non_trainable_variables"}
)  # fmt: skip
#: The calls that give a part of a model (`MODEL_PARTS`).
PART_CALLS = frozenset({"get_layer", "_flatten_layers"})
#: The ends of a model through which a new model shares its layers (`keras.Model(m.input, ...)`).
MODEL_ENDS = frozenset({"input", "output", "inputs", "outputs"})


def _fed(target: ast.AST, value: ast.AST) -> list[tuple[str, ast.AST]]:
    """(name, what it takes its items from) for each name the loop target `target` binds over
    `value`: paired by position through `zip(...)` and `enumerate(...)` (`for mine, theirs in
    zip(a, b)`: mine from a, theirs from b; the index of enumerate from nothing), each name
    from the whole of `value` otherwise."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Call):
        called = _dotted(value.func)
        elements = target.elts
        plain = not any(isinstance(e, ast.Starred) for e in [*elements, *value.args])
        if plain and called == "zip" and len(value.args) == len(elements):
            return [pair for e, v in zip(elements, value.args) for pair in _fed(e, v)]
        if plain and called == "enumerate" and len(elements) == 2 and value.args:
            return _fed(elements[1], value.args[0])
    return [(n, value) for n in _bound_targets(target)]


#: The methods of a `tf.train.Checkpoint` (or a `CheckpointManager`) that read it into its objects.
CHECKPOINT_READS = frozenset({"read", "restore", "restore_or_initialize"})
MODEL_STEPS = frozenset({"train_on_batch", "train_step", "train_function", "make_train_function"})
#: What a model maker of the notebook's own may not call on what it makes (`Code._built_from`):
#: weights loaded or assigned, a fit or a step, a checkpoint read.
MAKER_WRITES = frozenset(
    {*LOADED_INTO, *STEP_WRITERS, *MODEL_STEPS, *CHECKPOINT_READS, "fit", "apply_gradients"}
)


def _rate_written(node: ast.AST, tiny: Callable | None = None) -> ast.AST | None:
    """The optimizer whose learning rate `node` sets to a literal too small to move a weight
    (`opt.learning_rate.assign(0.0)`, `opt.learning_rate = 0`, `opt.lr = 1e-9`: `TINY_RATE`):
    its steps then leave the weights as they are while its moments and count grow (`tiny`:
    `Code._tiny`, which reads constant arithmetic too). A rate an optimizer trains with
    (`assign(1e-3)`) is not such a write."""

    tiny = tiny or _tiny_rate
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        target = node.func.value
        if node.func.attr == "assign" and getattr(target, "attr", "") in RATES:
            return target.value if tiny(node.args[0]) else None
    if isinstance(node, ast.Assign) and tiny(node.value):
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr in RATES:
                return target.value
    return None


def _dict_rates(node: ast.AST | None, depth: int = 0) -> list[ast.AST]:
    """The learning rates a literal dict gives an optimizer made from it (`{"learning_rate":
    0.0}`, `{"class_name": "adam", "config": {"lr": 0.0}}`)."""
    if not isinstance(node, ast.Dict) or depth > 3:
        return []
    found = []
    for key, value in zip(node.keys, node.values, strict=True):
        name = _literal_name(key) if key is not None else None
        if name in RATES:
            found.append(value)
        elif name == "config" or key is None:  # **{...} inside
            found += _dict_rates(value, depth + 1)
    return found


def _tiny_rate(value: ast.AST | None) -> bool:
    """`value` is a literal learning rate below `TINY_RATE` (`0`, `0.0`, `-1.0`, `1e-9`)."""
    sign = 1
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        sign, value = (-1 if isinstance(value.op, ast.USub) else 1), value.operand
    number = getattr(value, "value", None) if isinstance(value, ast.Constant) else None
    real = isinstance(number, (int, float)) and not isinstance(number, bool)
    return real and sign * number < TINY_RATE


#: A learning rate below this moves no float32 weight of the exercise's size by a step of
#: Adam (each step moves a weight by about the rate).
TINY_RATE = 1e-6


#: An optimizer's learning rate, by its names.
RATES = frozenset({"learning_rate", "lr"})


def _bound_targets(node: ast.AST) -> list[str]:
    """The plain names a `for`'s or `with`'s target binds."""
    return [n.id for n in _nodes(node) if isinstance(n, ast.Name)]


#: The builtins that run code or give a namespace the kernel's names are bound in
#: (`Code.unreadable`).
DYNAMIC_NAMES = frozenset({"exec", "eval", "compile", "globals", "vars", "locals", "__builtins__"})
#: The attributes that give a namespace of the kernel's: a module's builtins, a frame's or a
#: function's globals (`f.__globals__["train_ds"] = ...`).
FRAME_NAMESPACES = frozenset({"__builtins__", "f_globals", "f_locals", "f_builtins", "__globals__"})
#: The modules whose private attributes are a private API of the libraries the exercise
#: teaches (`Code.unreadable`): the notebook's own objects and other modules are its business.
PRIVATE_API = frozenset({"tensorflow", "keras", "tf_keras", "tensorflow_datasets"})
#: What of `strategy.extended` the notebooks read (notebook 1 lists the devices): a value, no
#: method that distributes or runs anything.
EXTENDED_READS = frozenset(
    {"worker_devices", "parameter_devices", "should_checkpoint", "should_save_summary",
     "experimental_require_static_shapes", "experimental_between_graph",
     "experimental_should_init"}
)  # fmt: skip


def _self_attribute(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """`node` (an attribute) is read on the first parameter of the method of a class defined in
    the code that holds it (`self._count`)."""
    root = _root(node)
    if root is None:
        return False
    parent = parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            holder = parents.get(id(parent))
            arguments = [*parent.args.posonlyargs, *parent.args.args]
            return (
                isinstance(holder, ast.ClassDef) and bool(arguments) and arguments[0].arg == root.id
            )
        parent = parents.get(id(parent))
    return False


def _unreadable_why(
    node: ast.AST,
    parents: dict[int, ast.AST],
    imports: dict[str, str],
    own: set[str],
) -> str:
    """Why the reading cannot read `node` (`Code.unreadable`): "dynamic", "private", "magic"
    (a cell magic that runs Python the reading does not read) or "".
    `own`: the names bound only to new objects of the notebook's own classes."""
    parent = parents.get(id(node))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        if node.id == "__builtins__":
            return "dynamic"
        imported = imports.get(node.id, "builtins.")
        if node.id in DYNAMIC_NAMES and imported.startswith("builtins."):  # not re's compile
            membership = (  # "x" in globals()
                node.id == "globals"
                and isinstance(parent, ast.Call)
                and not parent.args
                and isinstance(parents.get(id(parent)), ast.Compare)
                and all(isinstance(o, (ast.In, ast.NotIn)) for o in parents[id(parent)].ops)
                and parent in parents[id(parent)].comparators
            )
            return "" if membership else "dynamic"
        if imports.get(node.id) == "sys.modules":  # from sys import modules
            return "dynamic"
        return ""
    if isinstance(node, ast.ImportFrom) and (node.module or "") == "builtins":
        return "dynamic" if {a.name for a in node.names} & (DYNAMIC_NAMES | {"*"}) else ""
    if isinstance(node, ast.Import) and any(a.name == "__main__" for a in node.names):
        return "dynamic"  # import __main__; __main__.train_ds = ...
    if isinstance(node, ast.ImportFrom) and node.module == "__main__":
        return "dynamic"
    if (
        isinstance(node, ast.Constant)
        and node.value == "__main__"
        and isinstance(parent, (ast.Call, ast.Subscript))
    ):
        return "dynamic"  # importlib.import_module("__main__"), sys.modules["__main__"]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        names = [] if isinstance(node, ast.Import) else [a.name for a in node.names]
        private = any(
            (m or "").split(".")[0] in PRIVATE_API
            and any(p.startswith("_") for p in (m or "").split("."))
            for m in modules
        ) or (
            (modules[0] or "").split(".")[0] in PRIVATE_API
            and any(n.startswith("_") for n in names)
        )
        return "private" if private else ""
    if isinstance(node, ast.Call):
        magic, given = _magic(node)
        if magic and getattr(node.func, "attr", "") == "run_cell_magic":
            line = given[0].value if given and isinstance(given[0], ast.Constant) else None
            python = not isinstance(line, str) or "python" in line or "py" in line.split()
            if magic not in READ_MAGICS | NOT_PYTHON_CELL_MAGICS or magic == "script" and python:
                return "magic"  # %%python, %%script python, %%prun: Python run past the reading
            return ""
        if magic in HISTORY_MAGICS:
            line = given[0].value if given and isinstance(given[0], ast.Constant) else None
            if magic != "store" or not isinstance(line, str) or "-r" in line.split():
                return "history"  # %rerun 9: an earlier cell again, after the later ones
            return ""
        if magic and getattr(node.func, "attr", "") == "run_line_magic":
            line = given[0].value if given and isinstance(given[0], ast.Constant) else None
            if magic in ("time", "timeit") or magic not in LINE_MAGICS:
                return "line"  # %prun, or a %time whose statement was not read: not read
            if magic in ("load_ext", "reload_ext") and (
                not isinstance(line, str) or not set(line.split()) <= LOADED_EXTENSIONS
            ):
                return "line"
            if magic == "config" and not _inline_setting(line):
                return "line"
            return ""
        called = _dotted(node.func).split(".")[-1]
        named = _literal_name(node.args[1]) if called == "getattr" and len(node.args) > 1 else None
        if named and named.startswith("_") and not named.endswith("__"):
            return "private"  # getattr(strategy, "_extended")
        if named == "extended":
            return "private"
        return ""
    if not isinstance(node, ast.Attribute):
        return ""
    resolved = _resolved(node, imports)
    if resolved.startswith("builtins.") and resolved.split(".")[1] in DYNAMIC_NAMES:
        return "dynamic"  # builtins.exec, builtins.globals
    if node.attr in FRAME_NAMESPACES:
        return "dynamic"
    if resolved == "sys.modules":
        if isinstance(parent, ast.Compare) and all(
            isinstance(o, (ast.In, ast.NotIn)) for o in parent.ops
        ):
            return ""  # "google.colab" in sys.modules
        return "dynamic"
    if node.attr == "extended":
        read = isinstance(parent, ast.Attribute) and parent.attr in EXTENDED_READS
        return "" if read else "private"
    if not node.attr.startswith("_") or node.attr.endswith("__"):
        return ""
    root = _root(node)
    if root is not None and root.id in imports:
        return "private" if imports[root.id].split(".")[0] in PRIVATE_API else ""
    directly = isinstance(node.value, ast.Name)  # self._count, not self.model._x
    if directly and (node.value.id in own or _self_attribute(node, parents)):
        return ""
    return "private"


#: IPython's magics that run earlier input or stored code again, or bring it back as code or
#: values (`%store -r`; a plain `%store x` only keeps a value): what they run is no cell the
#: reading reads in its place.
HISTORY_MAGICS = frozenset(
    {"rerun", "recall", "macro", "store", "load", "paste", "cpaste", "save", "edit", "ed"}
)
#: The calls that give a module object (`inspect.getmodule(f)` is the notebook's `__main__`).
MODULE_GETTERS = frozenset({"inspect.getmodule", "importlib.import_module", "importlib.reload"})


def _literal_data(node: ast.AST | None) -> bool:
    """`node` is a literal: a constant, or a tuple, list or set of them (data, never code)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal_data(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _literal_data(node.operand)
    return isinstance(node, ast.Constant)


#: The models the grader reads facts of in the kernel (`grade.core.probe`), by name: the
#: notebook's code may use them, never set or delete what they hold.
GRADED_MODELS = ("fit_model", "single_model", "custom_model")
#: The methods that change a list or dict in place.
IN_PLACE = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__",
     "__delitem__", "__iadd__", "update", "setdefault", "popitem"}
)  # fmt: skip
#: What a fit's `History` holds that the probe reads (`probe.fit_epochs`): the epochs it ran.
HISTORY_FIELDS = frozenset({"history", "epoch", "params"})


#: The methods by which Keras writes a `History` (`keras.callbacks.History`, from
#: `keras.callbacks.Callback`): `set_params` sets `params`, `on_train_begin` empties `epoch`,
#: `on_epoch_end` appends to it and sets `model.history` to the History, `set_model` names
#: that model. `fit` calls them; a notebook that calls them writes what the probe reads.
HISTORY_WRITERS = frozenset({"set_params", "set_model", "on_train_begin", "on_epoch_end"})
#: The classes whose methods are `HISTORY_WRITERS`, called through the class
#: (`keras.callbacks.History.set_params(h, ...)`).
HISTORY_CLASSES = frozenset({"History", "Callback", "CallbackList"})
#: Python's builtins, bound in every namespace.
BUILTIN_NAMES = frozenset(dir(builtins))
#: The builtins that make a new object of their own: their result is tied to a History only
#: through what they are given (`dict(h=fit_model.history)`).
NEW_OBJECTS = frozenset(
    {"dict", "list", "set", "tuple", "frozenset", "object", "str", "int", "float", "bool",
     "bytes", "range", "len", "print", "isinstance", "super", "repr", "sorted", "min", "max",
     "sum", "round", "abs", "zip", "enumerate", "iter", "next", "format", "hash", "id"}
)  # fmt: skip


class _Ties:
    """The names the reading ties to a graded model or a fit's `History` (`Code._history_ties`),
    and whether an expression is tied: one of those names or `models`, an attribute `history`
    or `model` on the way (`other.history`, a callback's `self.model`), a `fit(...)` (which
    returns its History), a `History()` or `CallbackList(...)` made by the notebook (or of a
    class of its own deriving from one, or defining `__new__`), or a call the reading does not
    resolve to a library's function (the notebook's own, a lambda, a method of its objects):
    what those give back may be a History."""

    def __init__(self, names: set[str], imports: dict[str, str], classes: dict[str, bool]):
        self.names = names
        self.imports = imports
        self.classes = classes  # the notebook's classes: whether one may be (or give) a History
        self.instances: set[str] = set()  # the names bound to a new object of one of them
        self.bound: set[str] | None = None  # every name the code binds (None: all of them)

    def named(self, name: str) -> bool:
        """`name` is tied: one of `names`, or a name the code never binds (nor Python's
        builtins: the reading cannot tell what it holds)."""
        if name in self.names:
            return True
        return self.bound is not None and name not in self.bound and name not in BUILTIN_NAMES

    def call(self, call: ast.Call) -> bool:
        function = call.func
        dotted = _dotted(function)
        if isinstance(function, ast.Attribute) and function.attr == "fit":
            return True
        if dotted.split(".")[-1] in HISTORY_CLASSES - {"Callback"}:
            return True
        if isinstance(function, ast.Name):
            if function.id in self.classes:
                return self.classes[function.id]
            if function.id in NEW_OBJECTS or function.id in self.imports:
                return False  # a builtin's new object, a library's function
            return True  # the notebook's own function: what it returns is not read
        if isinstance(function, ast.Attribute):  # a method of a tied object or of one of the
            receiver = function.value  # notebook's classes: what it returns is not read
            root = _root(receiver)
            own = (
                isinstance(receiver, ast.Call) and getattr(receiver.func, "id", "") in self.classes
            )
            return own or self.tied(receiver) or root is not None and root.id in self.instances
        return True  # (lambda: fit_model.history)()

    def tied(self, node: ast.AST | None) -> bool:
        """`node`'s value may be a graded model or a History, or hold one (in a container, a
        branch of a condition); not a value read from one (`len(h.epoch)`,
        `fit_model.history.history`, the dict of its metrics)."""
        if isinstance(node, ast.Name):
            return self.named(node.id)
        if isinstance(node, ast.Attribute):
            if node.attr == "history" and getattr(node.value, "attr", None) == "history":
                return False  # fit_model.history.history: the metrics, a dict
            return node.attr in ("history", "model") or self.tied(node.value)
        if isinstance(node, ast.Subscript):
            return self.tied(node.value)
        if isinstance(node, ast.Call):
            if _dotted(node.func).endswith("getattr") and node.args:
                return self.tied(node.args[0])
            return self.call(node)
        if isinstance(node, ast.Dict):
            return any(self.tied(v) for v in node.values)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.tied(e) for e in node.elts)
        if isinstance(node, (ast.Starred, ast.NamedExpr)):
            return self.tied(node.value)
        if isinstance(node, ast.IfExp):
            return self.tied(node.body) or self.tied(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(self.tied(v) for v in node.values)
        return False

    def owner(self, node: ast.AST) -> bool:
        """`node`, an object whose attribute is set or method called, is tied: its attribute
        path starts from a tied name or call, or passes through `history` or `model`."""
        start, path = _attribute_path(node)
        if "history" in path or "model" in path:
            return True
        if isinstance(start, ast.Name):
            return self.named(start.id)
        if isinstance(start, ast.Call):
            super_call = isinstance(start.func, ast.Name) and start.func.id == "super"
            return not super_call and self.tied(start)  # super().on_epoch_end(epoch, logs)
        return False


def _model_writes(tree: ast.AST, models: set[str], ties: _Ties | None = None) -> list[ast.AST]:
    """The statements of `tree` that set or delete what a graded model holds (`models`: the
    `GRADED_MODELS` and their aliases), or change what a fit's `History` holds: an attribute of
    the model (`fit_model.history = h`, `fit_model.history.epoch[:] = ...`, a loop's or a
    `with`'s target too, `setattr`/`delattr`; what its optimizer holds aside, which
    `Code.step_assignments` and the probe's optimizer facts read), an attribute named as one of
    `HISTORY_FIELDS` of an object tied to a model or a History (`ties`: `h.epoch = [0, 1, 2]`
    on the History a fit returned; not `run_info.history = ...` on an object of its own), a
    call that changes `epoch` or `params` of one in place (`h.epoch.extend(...)`,
    `operator.setitem(h.epoch, ...)`), or one of the History's own writers
    (`HISTORY_WRITERS`: `h.set_params(...)`, `keras.callbacks.History.on_epoch_end(h, 0)`, a
    `keras.callbacks.History()` of the notebook's own fed by hand), called or looked up; a
    class's own `self.epoch` aside. The probe reads these as the run's facts: a value the code
    sets is no fact of the run."""
    parents = {id(c): n for n in _nodes(tree) for c in ast.iter_child_nodes(n)}
    ties = ties or _Ties(set(models), {}, {})

    def of_model(node: ast.AST) -> bool:  # its optimizer aside: the optimizer's rules read it
        start, path = _attribute_path(node)
        return isinstance(start, ast.Name) and start.id in models and path[:1] != ["optimizer"]

    def history_field(node: ast.AST) -> bool:
        return any(
            isinstance(sub, ast.Attribute)
            and sub.attr in HISTORY_FIELDS - {"history"}
            and ties.owner(sub.value)
            for sub in _nodes(node)
        )

    def writer(node: ast.AST) -> bool:  # h.set_params, History.on_epoch_end, getattr(h, ...)
        if isinstance(node, ast.Attribute) and node.attr in HISTORY_WRITERS:
            if _dotted(node.value).split(".")[-1] in HISTORY_CLASSES:
                call = parents.get(id(node))
                first = call.args[0] if isinstance(call, ast.Call) and call.args else None
                # keras.callbacks.Callback.on_epoch_end(self, ...) in a callback's own method
                return not (call is not None and call.func is node and _is_self(first))
            return ties.owner(node.value)
        return (
            isinstance(node, ast.Call)
            and _dotted(node.func).endswith("getattr")
            and len(node.args) > 1
            and _literal_name(node.args[1]) in HISTORY_WRITERS
            and ties.owner(node.args[0])
        )

    found = []
    for node in _nodes(tree):
        hit = False
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
            node.ctx, (ast.Store, ast.Del)
        ):
            owner = node.value
            hit = (
                of_model(owner)
                or isinstance(node, ast.Attribute)
                and node.attr in HISTORY_FIELDS
                and ties.owner(owner)
                or history_field(owner)
            )
        elif writer(node):
            hit = True
        elif isinstance(node, ast.Call):
            name = _dotted(node.func).split(".")[-1]
            given = node.args[:1]
            if name in {"setattr", "delattr", *SET_ATTRIBUTE} and given:
                field = _literal_name(node.args[1]) if len(node.args) > 1 else None
                hit = (
                    of_model(given[0])
                    or (field is None or field in HISTORY_FIELDS)
                    and (ties.owner(given[0]))
                )
            elif isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE:
                hit = history_field(node.func.value)  # h.epoch.append(2)
            elif name in FILL_FUNCTIONS | NAMESPACE_CHANGES and given:
                hit = history_field(given[0])
        if hit:
            shown = node
            while not isinstance(shown, ast.stmt) and id(shown) in parents:
                shown = parents[id(shown)]
            found.append(shown)
    return found


def _is_self(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _holders(target: ast.AST) -> list[str]:
    """The names that hold what is stored into `target`: its plain names (`h`, `a, b`), or the
    name its attributes and items hang from (`box` of `box.h[0]`); a class's `self` aside."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _holders(e)]
    if isinstance(target, ast.Starred):
        return _holders(target.value)
    root = target if isinstance(target, ast.Name) else _root(target)
    return [root.id] if root is not None and root.id != "self" else []


def _module_writes(tree: ast.AST, imports: dict[str, str], classes: set[str]) -> list[ast.AST]:
    """The statements of `tree` that set or delete an attribute of a module object: one the code
    imports (`import tqdm.auto`, `from tqdm import auto`, `from tqdm.auto import tqdm`, whose
    class attribute is the module's business too), or one reached through a call
    (`inspect.getmodule(f).train_ds = ...`, `importlib.import_module("itertools").islice =
    ...`: `_may_give_module`; `logging.getLogger("tensorflow").level = ...` is no module's),
    as an assignment's, a loop's or a `with`'s target, or by `setattr`/`delattr`. The reading
    trusts what a module's names stand for (a wrapper it looks through, the notebook's own
    `__main__`), so it cannot read past such a write. A literal (`tqdm.monitor_interval = 0`) is
    data, not code."""
    parents = {id(c): n for n in _nodes(tree) for c in ast.iter_child_nodes(n)}
    gotten = {  # m = inspect.getmodule(f); m.train_ds = ...
        target
        for node in _nodes(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
        and isinstance(node.value, ast.Call)
        and (
            _resolved(node.value.func, imports) in MODULE_GETTERS
            or _imported_module(node.value) is not None
        )
        for target in _targets(node)
    }

    def module(owner: ast.AST) -> bool:
        start, _ = _attribute_path(owner)
        if isinstance(start, ast.Name):
            if start.id in gotten:
                return True
            return start.id in imports and not imports[start.id].startswith("builtins.")
        if isinstance(start, ast.Call):
            return _may_give_module(start, imports, classes)
        return False

    found = []
    for node in _nodes(tree):
        statement = node
        while not isinstance(statement, ast.stmt) and id(statement) in parents:
            statement = parents[id(statement)]
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            value = getattr(statement, "value", None)
            literal = isinstance(statement, (ast.Assign, ast.AnnAssign)) and _literal_data(value)
            if module(node.value) and not literal:
                found.append(statement)
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func).split(".")[-1] in ("setattr", "delattr")
            and node.args
            and module(node.args[0])
            and not (len(node.args) > 2 and _literal_data(node.args[2]))
        ):
            found.append(statement)
    return list({id(n): n for n in found}.values())


#: The calls whose result is a module (`sys.modules.get(name)`, `importlib.reload(m)`), by the
#: dotted names they resolve to, beside `MODULE_GETTERS` and `IMPORTERS`.
MODULE_GIVERS = ("sys.modules", "importlib.", "builtins.__import__", "builtins.getattr")


def _may_give_module(call: ast.Call, imports: dict[str, str], classes: set[str]) -> bool:
    """`call`'s result may be a module object: a call that gives one (`inspect.getmodule(f)`,
    `importlib.import_module(n)`, `__import__(n)`, `sys.modules.get(n)`, `getattr(m, n)`), a
    call of a library's function given a module (`functools.reduce(getattr, [...], os)`), or a
    call the reading does not resolve to a library's function (the notebook's own function, a
    lambda, a method of an object of its own), a new object of the notebook's own class aside.
    A library's function given no module gives none of the notebook's modules:
    `logging.getLogger("tensorflow")` is a logger."""
    if isinstance(call.func, ast.Name) and call.func.id in classes:
        return False
    if _imported_module(call) is not None:
        return True
    resolved = _resolved(call.func, imports)
    if not resolved:
        return True  # the notebook's own function, a lambda, a method of its own objects
    if resolved in MODULE_GETTERS or resolved.startswith(MODULE_GIVERS):
        return True
    return any(  # a module given to the library's function may come back
        isinstance(sub, ast.Name)
        and sub.id in imports
        and not imports[sub.id].startswith("builtins.")
        for given in [*call.args, *(k.value for k in call.keywords)]
        for sub in _nodes(given)
    )


def _sets_data(node: ast.AST, classes: set[str]) -> bool:
    """`node` assigns a literal (data, never code) to attributes of classes imported by name
    only (`classes`), or reached through their module with a capitalised name:
    `Callback.verbose = 0` or `keras.callbacks.Callback.verbose = False` sets a default, where
    `Model.fit = f` would answer for the notebook."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) or node.value is None:
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    written = node.targets if isinstance(node, ast.Assign) else [node.target]
    return all(
        isinstance(t, ast.Attribute)
        and (
            (isinstance(t.value, ast.Name) and t.value.id in classes)
            # the same class reached through its module (`keras.callbacks.Callback.verbose`):
            # a capitalised name, as Python names classes
            or (isinstance(t.value, ast.Attribute) and t.value.attr[:1].isupper())
        )
        for t in written
    )


def _imports(run: list[tuple[int, ast.Module]]) -> dict[str, str]:
    """{name: the dotted name it stands for} of every import in `run` (`import pickle as pk`:
    pk is "pickle"; `from sys import path`: path is "sys.path"), and of the plain names assigned
    one of them (`p = sys.path`, `f = pickle.loads`)."""
    imports: dict[str, str] = {}
    for _, tree in run:
        for node in _nodes(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    imports[a.asname or a.name] = f"{node.module}.{a.name}"
    for _ in range(3):  # aliases of aliases
        for _, tree in run:
            for node in _nodes(tree):
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    value = _resolved(node.value, imports)
                    if value and not isinstance(node.value, ast.Call):
                        imports.setdefault(node.targets[0].id, value)
    return imports


#: The attributes whose values hold an object's class or a library's classes: a pickling
#: recipe (`x.__reduce_ex__(2)[1][0]`) and a function's module namespace.
REACH_CLASSES = frozenset({"__reduce_ex__", "__reduce__", "__globals__"})
#: The attributes that give a class's bases (`type(x).__mro__[1]`, `Mine.__bases__[0]`).
BASES = frozenset({"__mro__", "__bases__", "__base__"})


def _class_changes(run: list[tuple[int, ast.Module]]) -> list[str]:
    """The assignments of an attribute on a class reached through an object, whose class may be
    a library's: `type(train_ds).__iter__ = f`, `x.__class__.m = f`, `setattr(type(x), ...)`,
    an item of `__mro__` or `__bases__`, a name bound to one (`T = type(x)`, `for k in
    type(x).__mro__:`), each as "cell [N], line L: `...`". A class named directly is the
    notebook's own (`EpochTimer.x = 1`); one reached through an object is not, except `self`
    in a method of a class the notebook defines (`type(self).count += 1`, `_own_instances`)."""
    nodes = [(number, n) for number, tree in run for n in _nodes(tree)]
    held: set[str] = set()
    own = _own_instances(run)

    def reached(node: ast.AST) -> bool:
        if id(node) in own:
            return False  # type(self) in a method of the notebook's class: that class
        if isinstance(node, ast.Call) and _class_named(node):
            return True  # getattr(x, "__class__"), object.__getattribute__(x, "__class__")
        if any(getattr(n, "attr", "") in REACH_CLASSES for n in _nodes(node)):
            return True  # x.__reduce_ex__(2)[1][0], f.__globals__["_PrefetchDataset"]
        if isinstance(node, ast.Subscript):
            return reached(node.value) or _dotted(node.value).endswith("getmro")
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "type":
            return len(node.args) == 1
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("getmro"):
            return True
        if isinstance(node, ast.Attribute):
            return node.attr in BASES | {"__class__"}
        return isinstance(node, ast.Name) and node.id in held

    for _ in range(3):  # T = type(x); U = T
        for _, node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value:
                if reached(node.value):
                    held.update(_targets(node))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                if reached(node.iter):  # for k in type(x).__mro__:
                    held.update(n.id for n in _nodes(node.target) if isinstance(n, ast.Name))
    found = []
    for number, node in nodes:
        if _counted(node):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
            written = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changed = any(
                isinstance(t, ast.Attribute) and reached(t.value)
                for w in written
                for t in _nodes(w)
                if isinstance(getattr(t, "ctx", None), (ast.Store, ast.Del))
            )
        else:
            changed = (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") in ("setattr", "delattr")
                and bool(node.args)
                and reached(node.args[0])
            )
        if changed:
            line = ast.unparse(node).splitlines()[0][:80]
            found.append(f"cell [{number}], line {node.lineno}: `{line}`")
    return found


def _counted(node: ast.AST) -> bool:
    """`x.count += 1`: a number literal added to or taken from an attribute, which installs no
    code on whatever class `x` is. The class's own value is read first: a number stays a number;
    a function, a property or a class has no `+` with a number (TypeError), and the literal's
    `__radd__` is the interpreter's, so nothing the notebook wrote is called (a name, `+= n`,
    could hold an object whose `__radd__` returns a method: that is no count). Red team 12a's
    honest counters, `type(self).count += 1` beside a `getattr(np, kind)` and
    `self.__class__.epochs_seen += 1` in a method called on a new object, are such counts."""
    if not (isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub))):
        return False
    value = node.value.operand if isinstance(node.value, ast.UnaryOp) else node.value
    number = getattr(value, "value", None) if isinstance(value, ast.Constant) else None
    return type(number) in (int, float) and isinstance(node.target, ast.Attribute)


def _class_named(node: ast.Call) -> bool:
    """`node` reads an object's class or bases by a literal name through a getter:
    `getattr(x, "__class__")`, `object.__getattribute__(x, "__class__")`,
    `x.__getattribute__("__mro__")`."""
    called = getattr(node.func, "id", "") or getattr(node.func, "attr", "")
    names = {_literal_name(a) for a in node.args}
    return called in ("getattr", "__getattribute__") and bool(names & (BASES | {"__class__"}))


def _own_instances(run: list[tuple[int, ast.Module]]) -> set[int]:
    """The ids of `type(self)` and `self.__class__` nodes that can only give a class the notebook
    defines (or a subclass of it): `self` is the first parameter of an undecorated method of a
    class defined in the cells, never rebound in it, and Python alone passes it, as the instance
    the method was looked up on. That holds unless the method can be called with another first
    argument: its name reached through a class or an expression rather than an instance (a
    name or a new object, `Timer().tick()`, are instances: `Timer.tick(train_ds)`,
    `type(x).tick`, `getattr(Timer, "tick")`, a string "tick" anywhere are not),
    a class of the notebook used as a value (`T = Timer`), or functions taken by a name built at
    run time or all at once (`__func__`, `__dict__`, `vars`, `getmembers`, `getattr(x, name)`);
    and unless some class of the notebook defines `__new__` or a metaclass
    (which can return another object), or the code names "__class__" as a string or calls a
    `__setattr__` (`object.__setattr__(self, "__class__", type(train_ds))` makes `self` an object
    of a library's class): then none is exempt."""
    classes = [n for _, tree in run for n in _nodes(tree) if isinstance(n, ast.ClassDef)]
    names = {c.name for c in classes}
    methods = {
        f.name
        for c in classes
        for f in c.body
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    nodes = [n for _, tree in run for n in _nodes(tree)]
    if any(
        f.name == "__new__" for c in classes for f in c.body if isinstance(f, ast.FunctionDef)
    ) or any(k.arg == "metaclass" for c in classes for k in c.keywords):
        return set()
    parents: dict[int, ast.AST] = {}
    for node in nodes:
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    unsafe = {n.value for n in nodes if isinstance(n, ast.Constant) and n.value in methods}
    for node in nodes:
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("__func__", "__dict__")
            or getattr(node, "id", "") in ("vars", "getmembers", "getattr_static")
            or isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "getattr"
            and (len(node.args) < 2 or _literal_name(node.args[1]) is None)
        ):
            return set()  # a class's functions by a name built at run time, or all of them
        if (
            isinstance(node, ast.Constant)
            and node.value == "__class__"
            or isinstance(node, ast.Attribute)
            and node.attr == "__setattr__"
        ):
            return set()  # object.__setattr__(self, "__class__", type(train_ds)): self is theirs
        if isinstance(node, ast.Attribute) and node.attr in methods:
            value = node.value
            is_super = isinstance(value, ast.Call) and getattr(value.func, "id", "") == "super"
            # Timer().tick(): an object the class just made, as `timer.tick()` is one
            made = isinstance(value, ast.Call) and getattr(value.func, "id", "") in names
            if not (isinstance(value, ast.Name) and value.id not in names or is_super or made):
                unsafe.add(node.attr)  # Timer.tick(x), type(x).tick(y)
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            parent = parents.get(id(node))
            called = isinstance(parent, ast.Call) and (
                parent.func is node
                or getattr(parent.func, "id", "") in ("isinstance", "issubclass", "super", "print")
            )
            base = isinstance(parent, ast.ClassDef) and node in parent.bases
            read = (
                isinstance(parent, ast.Attribute)
                and parent.attr not in methods
                and not parent.attr.startswith("__")
            )
            if not (called or base or read):
                return set()  # T = Timer, vars(Timer), [Timer]: the class as a value
    own: set[int] = set()
    for c in classes:
        for f in c.body:
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) or f.decorator_list:
                continue
            if f.name in unsafe or not f.args.args:
                continue
            first = f.args.args[0].arg
            inside = list(_nodes(f))
            if any(
                _bound_name(n) == first
                or isinstance(n, (ast.Global, ast.Nonlocal))
                and first in n.names
                or isinstance(n, ast.arg)
                and n.arg == first
                and n is not f.args.args[0]
                for n in inside
                if n is not f
            ):
                continue  # self = train_ds
            for n in inside:
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "type":
                    if [getattr(a, "id", None) for a in n.args] == [first]:
                        own.add(id(n))
                elif isinstance(n, ast.Attribute) and n.attr == "__class__":
                    if getattr(n.value, "id", None) == first:
                        own.add(id(n))
    return own


#: Modules of the import machinery the probe's path to the builtins goes through: any name
#: imported from one (`from importlib.machinery import BuiltinImporter`) is theirs.
PLUMBING = frozenset({"builtins", "importlib", "_frozen_importlib", "_frozen_importlib_external"})


def _children_in_scopes(
    node: ast.AST, known: dict[str, str], modules: dict[str, str], aliases: set[int]
) -> list[tuple[ast.AST, dict[str, str]]]:
    """`node`'s children, each with the module names visible where Python evaluates it: a
    function's decorators, defaults and annotations, a class's bases, and a comprehension's first
    iterable in the enclosing scope; a body in its own scope, less the names bound there (a
    `global` name is the module's again); a class body's functions skip the class's names."""

    def inner(scope: ast.AST, start: dict[str, str]) -> dict[str, str]:
        local = _scope_locals(scope, aliases)
        names = {k: v for k, v in start.items() if k not in local}
        declared = [
            n for sub in _own_statements(scope) if isinstance(sub, ast.Global) for n in sub.names
        ]
        names.update({n: modules[n] for n in declared if n in modules})
        return names

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        outside = [*getattr(node, "decorator_list", []), *node.args.defaults]
        outside += [d for d in node.args.kw_defaults if d is not None]
        outside += [a.annotation for a in _nodes(node.args) if getattr(a, "annotation", None)]
        outside += [node.returns] if getattr(node, "returns", None) else []
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        scope = inner(node, getattr(node, "_enclosing", known))
        return [(n, known) for n in outside] + [(n, scope) for n in body]
    if isinstance(node, ast.ClassDef):
        outside = [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
        scope = inner(node, known)
        for sub in node.body:  # a method sees the enclosing scope, not the class's names
            for function in _nodes(sub):
                if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    function._enclosing = known  # type: ignore[attr-defined]
        return [(n, known) for n in outside] + [(n, scope) for n in node.body]
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        scope = inner(node, known)
        parts = [(node.generators[0].iter, known)]  # evaluated where the comprehension is
        for index, generator in enumerate(node.generators):
            parts += [(generator.target, scope), *((test, scope) for test in generator.ifs)]
            parts += [(generator.iter, scope)] if index else []
        results = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return parts + [(result, scope) for result in results]
    return [(child, known) for child in ast.iter_child_nodes(node)]


def _own_statements(scope: ast.AST) -> list[ast.AST]:
    """The nodes of `scope`'s own body, not of the scopes nested in it."""
    body = [scope.body] if isinstance(scope, ast.Lambda) else list(getattr(scope, "body", []))
    found, todo = [], list(body)
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, SCOPES):
            todo += ast.iter_child_nodes(node)
    return found


def _top_level_rebindings(
    run: list[tuple[int, ast.Module]], aliases: set[int]
) -> dict[str, list[tuple[tuple[int, int], bool]]]:
    """For each name bound at the top level of a cell, where ((cell, line) of the statement) and
    whether to a module: imports and aliases anywhere at the top level, and the plain
    statements that bind it to anything else (`m = make_model()` directly in a cell's body: it
    certainly ran before the statements after it). A name also bound to a module inside a
    function or class (which may run at any time, `global m`) or by a namespace's key
    (`globals()["m"] = json`) is left out: no binding at the top level ends it."""
    found: dict[str, list[tuple[tuple[int, int], bool]]] = {}
    anywhere = set()
    for number, tree in run:
        for statement in tree.body:
            where = (number, getattr(statement, "lineno", 0))
            for node in _own_statements(ast.Module(body=[statement], type_ignores=[])):
                name = _bound_name(node)
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for a in node.names:
                        bound = (a.asname or a.name).split(".")[0]
                        found.setdefault(bound, []).append((where, True))
                elif name and id(node) in aliases:
                    found.setdefault(name, []).append((where, True))
                elif name and isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    if statement.value is not None:
                        found.setdefault(name, []).append((where, False))
            for node in _nodes(statement):
                if isinstance(node, SCOPES[:4]):  # functions, lambdas and classes
                    anywhere.update(_bound_name(n) for n in _nodes(node) if id(n) in aliases)
                named = _namespace_binding(node)
                if named:
                    anywhere.add(named[0])
    return {name: bindings for name, bindings in found.items() if name not in anywhere}


def _unless_rebound(
    known: dict[str, str],
    rebound: dict[str, list[tuple[tuple[int, int], bool]]],
    line: tuple[int, int],
) -> dict[str, str]:
    """`known` less the names that, at (cell, line) of the top level, were last bound by a plain
    statement to something else than a module (`for m in (tf, np): ...` then `m =
    load_model(...)`: `m.trainable = False` is the model's). Inside a function, which may run at
    any time, every binding counts (the caller does not ask)."""
    gone = set()
    for name in known:
        before = [(at, module) for at, module in rebound.get(name, []) if at < line]
        if before and not max(before)[1]:
            gone.add(name)
    return {k: v for k, v in known.items() if k not in gone} if gone else known


def _aliases(node: ast.AST, modules: dict[str, str]) -> list[tuple[ast.AST, str]]:
    """The plain names `node` binds to one of `modules` ({name: module}), each with its module
    (the Name, or the capture pattern, that binds it): `m = json`, `m: Any = json`,
    `(m := json)`, `m, n = json, 1`, `m = json or None`, `m = json if x else None`,
    `for m in [json]:`, `with nullcontext(json) as m:`, `m = importlib.import_module("json")`,
    `m = sys.modules.get("json")`, `match json: case m:`."""

    def module(value: ast.AST | None) -> str | None:
        if isinstance(value, ast.Name):
            return modules.get(value.id)
        namespace = (  # d = np.__dict__, d = vars(np): the module's namespace
            value.value
            if isinstance(value, ast.Attribute) and value.attr == "__dict__"
            else value.args[0]
            if isinstance(value, ast.Call)
            and getattr(value.func, "id", "") == "vars"
            and len(value.args) == 1
            else None
        )
        if namespace is not None:
            inner = module(namespace)
            return f"{inner}.__dict__" if inner and not inner.endswith(".__dict__") else None
        if isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):  # mods = [hashlib]
            items = value.values if isinstance(value, ast.Dict) else value.elts
            return next(filter(None, map(module, items)), None)
        if isinstance(value, (ast.BoolOp, ast.IfExp)):
            operands = value.values if isinstance(value, ast.BoolOp) else [value.body, value.orelse]
            return next(filter(None, map(module, operands)), None)
        if isinstance(value, (ast.Subscript, ast.Call)):  # sys.modules["json"], .get("json")
            container, key = (
                (value.value, value.slice)
                if isinstance(value, ast.Subscript)
                else (getattr(value.func, "value", None), value.args[0] if value.args else None)
            )
            named = _literal_name(key)
            if (
                container is not None
                and named
                and _module_of(container, modules)
                == (
                    "sys",
                    ["modules"],
                )
            ):
                return named
        return _imported_module(value) if value is not None else None

    pairs: list[tuple[ast.AST, ast.AST | None]] = []
    named = _namespace_binding(node)
    if named and module(named[1]):  # globals()["m"] = json
        return [(ast.copy_location(ast.Name(id=named[0], ctx=ast.Store()), node), module(named[1]))]
    if isinstance(node, ast.Assign):
        pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
        pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        items = node.iter.elts if isinstance(node.iter, (ast.List, ast.Tuple, ast.Set)) else []
        pairs = [(node.target, item) for item in items]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            value = item.context_expr  # `with json as m`, `with nullcontext(json) as m`
            given = (
                [*value.args, *(k.value for k in value.keywords)]
                if isinstance(value, ast.Call)
                else []
            )
            inside = [n for n in [value, *given] if module(n)]
            if inside and item.optional_vars is not None:
                pairs.append((item.optional_vars, inside[0]))
    elif isinstance(node, ast.Match) and module(node.subject):
        captures = [
            n
            for case in node.cases
            for n in _nodes(case.pattern)
            if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name
        ]
        return [(capture, module(node.subject)) for capture in captures]
    found = []
    while pairs:
        target, value = pairs.pop()
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            pairs += zip(target.elts, value.elts, strict=False)
        elif isinstance(target, ast.Name) and module(value):
            found.append((target, module(value)))
    return found


#: The calls that give a namespace of the kernel's: `globals()`, `vars()`, `locals()`.
NAMESPACE_CALLS = frozenset({"globals", "vars", "locals"})


def _namespace_binding(node: ast.AST) -> tuple[str, ast.AST] | None:
    """(name, value) when `node` binds a literal name through a namespace's key:
    `globals()["m"] = v`, `globals().update(m=v)`, `.setdefault("m", v)`, `.__setitem__("m", v)`;
    None for anything else."""

    def namespace(owner: ast.AST) -> bool:
        return (
            isinstance(owner, ast.Call)
            and getattr(owner.func, "id", "") in NAMESPACE_CALLS
            and not owner.args
        )

    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Subscript) and namespace(target.value):
            name = _literal_name(target.slice)
            return (name, node.value) if name else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if not namespace(node.func.value):
            return None
        if node.func.attr == "update" and node.keywords and node.keywords[0].arg:
            return node.keywords[0].arg, node.keywords[0].value
        if node.func.attr in ("setdefault", "__setitem__") and len(node.args) == 2:
            name = _literal_name(node.args[0])
            return (name, node.args[1]) if name else None
    return None


#: The nodes that open a scope of their own (names bound in them are theirs alone).
SCOPES = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
)  # fmt: skip


def _bound_name(node: ast.AST) -> str | None:
    """The name `node` binds: a Name stored or deleted, a capture pattern's, a def's or class's,
    an import's; None for anything else."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return node.id
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    return None


def _scope_locals(scope: ast.AST, aliases: set[int]) -> set[str]:
    """The names local to `scope` (one of `SCOPES`), as Python decides: its parameters (or a
    comprehension's targets) and the names bound in its own body, not in a scope nested in it,
    less those declared `global` or `nonlocal`; a name bound to a module (`aliases`: the ids of
    the binding nodes) does not hide the module."""
    if isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return {
            n.id for g in scope.generators for n in _nodes(g.target) if isinstance(n, ast.Name)
        } - {n.id for g in scope.generators for n in _nodes(g.target) if id(n) in aliases}
    names = set()
    if not isinstance(scope, ast.ClassDef):
        names = {a.arg for a in _nodes(scope.args) if isinstance(a, ast.arg)}
    body = [scope.body] if isinstance(scope, ast.Lambda) else scope.body
    declared = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        name = _bound_name(node)
        if name and id(node) not in aliases:
            names.add(name)
        if not isinstance(node, SCOPES):
            todo += ast.iter_child_nodes(node)
    return names - declared
