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
from dataclasses import dataclass, field

#: Names the grader's probe uses in the kernel (`grade.core.submission`): a notebook that binds
#: one of them can answer the probe itself.
PROBE_NAMES = frozenset(
    {"exec", "compile", "globals", "get_ipython", "__builtins__", "__import__", "builtins", "eval"}
)
#: The most code read, in characters (the exercise's is about 20,000).
MAX_CHARS = 2_000_000


def _python(source: str) -> ast.Module | None:
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _is_scope(item: ast.withitem) -> bool:
    """`with <anything>.scope():`"""
    call = item.context_expr
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "scope"
    )


def _targets(node: ast.AST) -> list[str]:
    """The plain names an assignment binds."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    names = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def _calls(node: ast.AST) -> list[str]:
    """The method names called on a chain, outermost last: x.a().b() -> ['a', 'b']; and the
    name the chain starts from."""
    names = []
    while True:
        if isinstance(node, ast.Call):
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


def _inlined(function: ast.FunctionDef, name: str, value: ast.AST) -> tuple[list[str], str]:
    """The methods `function` applies to the pipeline it returns, and the caller's name it
    starts from (the argument given for the parameter the pipeline is made from)."""
    body = Code(trees=[ast.Module(body=function.body, type_ignores=[])])
    returned = [n.value for n in ast.walk(body.trees[0]) if isinstance(n, ast.Return) and n.value]
    if not returned:
        return [], ""
    calls, start, _ = _chain(returned[-1])
    if start:
        inner, start = body._trace(start)
        calls = inner + calls
    parameters = [a.arg for a in function.args.args]
    call = next(
        (
            n
            for n in ast.walk(value)
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name
        ),
        None,
    )
    if call is None or start not in parameters:
        return calls, ""
    position = parameters.index(start)
    given = {k.arg: k.value for k in call.keywords}
    argument = call.args[position] if position < len(call.args) else given.get(start)
    return calls, argument.id if isinstance(argument, ast.Name) else ""


@dataclass
class Code:
    """The submission's code cells, parsed."""

    trees: list[ast.Module] = field(default_factory=list)

    @classmethod
    def of(cls, observed: dict | None) -> Code:
        """The code of the cells the grader observed (empty without observations)."""
        code, chars = cls(), 0
        for cell in (observed or {}).get("cells", []):
            source = cell.get("source") if isinstance(cell, dict) else None
            if not isinstance(source, str):
                continue
            chars += len(source)
            if chars > MAX_CHARS:
                break
            tree = _python(source)
            if tree is not None:
                code.trees.append(tree)
        return code

    def _walk(self):
        for tree in self.trees:
            yield from ast.walk(tree)

    def assignments(self, name: str) -> list[tuple[ast.AST, bool]]:
        """Each assignment to `name`, anywhere, with whether it lies inside a
        `with ....scope():` block (at any depth: a loop or an `if` inside it too)."""
        found: list[tuple[ast.AST, bool]] = []
        for tree in self.trees:
            stack: list[tuple[ast.AST, bool]] = [(tree, False)]
            while stack:
                node, in_scope = stack.pop()
                if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                    _is_scope(i) for i in node.items
                ):
                    in_scope = True
                if name in _targets(node):
                    found.append((node, in_scope))
                stack.extend((child, in_scope) for child in ast.iter_child_nodes(node))
        return found

    def functions_with_scope(self) -> set[str]:
        """The functions whose body opens a `with ....scope():` block."""
        names = set()
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(sub, (ast.With, ast.AsyncWith)) and any(_is_scope(i) for i in sub.items)
                for sub in ast.walk(node)
            ):
                names.add(node.name)
        return names

    def assigned_in_scope(self, name: str) -> bool | None:
        """Whether `name` is created under a strategy's scope: every assignment to it lies in a
        `with ....scope():` block or calls a function that opens one. None when the code never
        assigns it."""
        found = self.assignments(name)
        if not found:
            return None
        helpers = self.functions_with_scope()

        def scoped(assignment: tuple[ast.AST, bool]) -> bool:
            node, in_scope = assignment
            value = getattr(node, "value", None)
            called = [
                sub.func.id
                for sub in ast.walk(value or ast.Module(body=[], type_ignores=[]))
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
            ]
            return in_scope or bool(helpers & set(called))

        return all(map(scoped, found))

    def _assignments_in_order(self, name: str) -> list[tuple[tuple[int, int, int], ast.AST]]:
        """Each assignment to `name` with its place in the code (cell, line, column), in order."""
        placed = []
        for index, tree in enumerate(self.trees):
            for node in ast.walk(tree):
                if name in _targets(node) and getattr(node, "value", None) is not None:
                    placed.append(((index, node.lineno, node.col_offset), node))
        return sorted(placed, key=lambda item: item[0])

    def _functions(self) -> dict[str, ast.FunctionDef]:
        return {
            node.name: node
            for node in self._walk()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def pipeline(self, name: str, depth: int = 20) -> list[str]:
        """The tf.data methods called to make `name`, first to last, following the names it is
        made from (train_ds = cached.shuffle(...).batch(...), cached = examples.cache():
        ['cache', 'shuffle', 'batch']), a name reassigned from itself (train_ds =
        train_ds.batch(...): the assignment before it), and a function of the notebook's own
        that returns a pipeline (train_ds = make(cached): its return value, its argument)."""
        return self._trace(name, depth)[0]

    def _trace(self, name: str, depth: int = 20) -> tuple[list[str], str]:
        """`pipeline`, and the name the pipeline starts from (one this code does not assign)."""
        methods: list[str] = []
        functions = self._functions()
        before = None  # only assignments before this place (a name made from itself)
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
            methods = calls + methods
            before = place if source == name else None
            name = source
        return methods, name

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
                for sub in ast.walk(node):
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

    def probe_names_bound(self) -> list[str]:
        """The names the probe relies on (`PROBE_NAMES`) that the code binds, imports or assigns
        attributes of: with one, the kernel can answer the probe itself."""
        bound = set()
        for node in self._walk():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound.add((alias.asname or alias.name).split(".")[0])
                    bound.add(alias.name.split(".")[0])
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in ("builtins", "__builtins__"):
                    bound.add(node.value.id)
            elif isinstance(node, ast.Constant) and node.value in PROBE_NAMES:
                bound.add(node.value)  # globals()["exec"] = ...
        return sorted(bound & PROBE_NAMES)
