"""Generate the exercise notebooks from the solution notebooks: one hand-edited source, two files.

A solution notebook (solutions/*_solution.ipynb) marks what students must not see:

    ### BEGIN SOLUTION              in a code cell: the lines up to `### END SOLUTION` become
    ...                             `# YOUR CODE HERE` + `raise NotImplementedError()`
    ### END SOLUTION

    <!-- BEGIN SOLUTION [q5] your answer (1 point) -->     in a markdown cell: the text up to
    ...                                                    `<!-- END SOLUTION -->` becomes
    <!-- END SOLUTION -->                                  `<!-- ANSWER [q5] -->` + `YOUR ANSWER
    HERE`

    ### BEGIN HIDDEN TESTS [q1] what it checks (1 point)   a whole code cell, up to
    ...                                                    `### END HIDDEN TESTS`: a grader check
    ### BEGIN HIDDEN PROBE ... ### END HIDDEN PROBE        a whole code cell: the grader's probe
    <!-- HIDDEN -->                                        first line of a markdown cell:
    instructors only

Hidden cells are left out of the exercise; the grader (`grade.routes.batch`) reads them from
the solution. Visible
checks (ordinary cells) stay, so students can test themselves. In the exercise, the stub cells
and the
cells that use a name a stub would have defined are tagged `raises-exception`, so that nbval and
nbclient run past them instead of stopping.

Example:
    >>> import nbformat
    >>> from course_tools import exercise
    >>> from course_tools.paths import course_root
    >>> solution = nbformat.read(course_root() / "solutions/05_svhn_solution.ipynb", as_version=4)
    >>> notebook = exercise.make_exercise(solution)      # a new notebook; the solution is unchanged
    >>> [t.question for t in exercise.parse_solution(solution).tests][:2]
    ['q1', 'q1']

From the shell: `course exercise` regenerates exercises/, `course exercise --check` exits 1 when
exercises/ is not what the generator produces (CI runs the same comparison as a test).
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_tools import colab
from course_tools.paths import course_root

STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
RAISES_TAG = "raises-exception"

_BEGIN_SOLUTION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\s*$")
_END_SOLUTION = re.compile(r"^[ \t]*### END SOLUTION\s*$")
_HEADER = r"\[(?P<question>[\w.-]+)\]\s+(?P<title>.+?)\s+\((?P<points>\d+(?:\.\d+)?) points?\)"
_BEGIN_TESTS = re.compile(r"^### BEGIN HIDDEN TESTS\s+" + _HEADER + r"\s*$")
_END_TESTS = "### END HIDDEN TESTS"
_BEGIN_PROBE, _END_PROBE = "### BEGIN HIDDEN PROBE", "### END HIDDEN PROBE"
_HIDDEN_MARKDOWN = "<!-- HIDDEN -->"
_BEGIN_ANSWER = re.compile(r"<!--\s*BEGIN SOLUTION\s+" + _HEADER + r"\s*-->")
_END_ANSWER = re.compile(r"<!--\s*END SOLUTION\s*-->")
_ANSWER_MARK = re.compile(r"<!--\s*ANSWER\s+\[(?P<question>[\w.-]+)\]\s*-->")


class MarkerError(ValueError):
    """A solution notebook's markers are malformed (unclosed region, bad header, ...)."""


@dataclass(frozen=True)
class HiddenTest:
    """One hidden test cell: worth `points` when its code raises nothing."""

    question: str
    title: str
    points: float
    source: str
    cell_index: int


@dataclass(frozen=True)
class Answer:
    """A written answer (markdown) the instructor reads; `cell_id` locates it in submissions."""

    question: str
    title: str
    points: float
    cell_id: str
    prefix: str = ""  # the cell's text before the answer (a heading), kept in the exercise


@dataclass
class SolutionParts:
    """What the grader needs from a solution notebook."""

    tests: list[HiddenTest] = field(default_factory=list)
    probe: str = ""
    answers: list[Answer] = field(default_factory=list)

    @property
    def max_points(self) -> float:
        return sum(t.points for t in self.tests) + sum(a.points for a in self.answers)


def _where(index: int, cell) -> str:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return f"cell {index} ({first[:60]!r})"


def _whole_cell(cell, index: int, begin: str, end: str) -> bool:
    """True when the cell is a hidden block from `begin` to `end`; MarkerError when half-marked."""
    lines = cell.source.strip().splitlines()
    if not lines or not lines[0].startswith(begin):
        return False
    if lines[-1].strip() != end:
        raise MarkerError(
            f"{_where(index, cell)}: a cell starting with {begin!r} must end with {end!r}"
        )
    return True


def is_hidden(cell, index: int = 0) -> bool:
    """Whether the cell is left out of the exercise (hidden tests, probe, instructors' markdown)."""
    if cell.cell_type == "markdown":
        return cell.source.lstrip().startswith(_HIDDEN_MARKDOWN)
    if cell.cell_type != "code":
        return False
    return _whole_cell(cell, index, "### BEGIN HIDDEN TESTS", _END_TESTS) or _whole_cell(
        cell, index, _BEGIN_PROBE, _END_PROBE
    )


def parse_solution(notebook) -> SolutionParts:
    """The hidden tests, the probe and the written answers of a solution notebook."""
    parts = SolutionParts()
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and _whole_cell(
            cell, index, "### BEGIN HIDDEN TESTS", _END_TESTS
        ):
            match = _BEGIN_TESTS.match(cell.source.strip().splitlines()[0])
            if not match:
                raise MarkerError(
                    f"{_where(index, cell)}: write the header as "
                    "'### BEGIN HIDDEN TESTS [q1] what it checks (1 point)'"
                )
            parts.tests.append(
                HiddenTest(
                    match["question"], match["title"], float(match["points"]), cell.source, index
                )
            )
        elif cell.cell_type == "code" and _whole_cell(cell, index, _BEGIN_PROBE, _END_PROBE):
            if parts.probe:
                raise MarkerError(
                    f"{_where(index, cell)}: a solution has at most one HIDDEN PROBE cell"
                )
            parts.probe = cell.source
        elif cell.cell_type == "markdown" and (match := _BEGIN_ANSWER.search(cell.source)):
            prefix = cell.source[: match.start()].strip()
            parts.answers.append(
                Answer(
                    match["question"],
                    match["title"],
                    float(match["points"]),
                    cell.get("id", ""),
                    prefix,
                )
            )
    return parts


def _stub_code(source: str, where: str) -> str:
    """Replace every BEGIN/END SOLUTION region of a code cell by the stub, at the region's
    indentation."""
    out: list[str] = []
    inside = False
    for line in source.splitlines():
        begin = _BEGIN_SOLUTION.match(line)
        if begin:
            if inside:
                raise MarkerError(f"{where}: ### BEGIN SOLUTION inside another solution region")
            inside = True
            out.extend(begin["indent"] + stub_line for stub_line in STUB.splitlines())
        elif _END_SOLUTION.match(line):
            if not inside:
                raise MarkerError(f"{where}: ### END SOLUTION without ### BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise MarkerError(f"{where}: ### BEGIN SOLUTION without ### END SOLUTION")
    return "\n".join(out)


def _stub_answer(source: str, where: str) -> str:
    begin = _BEGIN_ANSWER.search(source)
    end = _END_ANSWER.search(source, begin.end()) if begin else None
    if begin and not end:
        raise MarkerError(f"{where}: <!-- BEGIN SOLUTION ... --> without <!-- END SOLUTION -->")
    if not begin:
        return source
    replacement = f"<!-- ANSWER [{begin['question']}] -->\n{ANSWER_PLACEHOLDER}"
    return source[: begin.start()] + replacement + source[end.end() :]


def _names(source: str) -> tuple[set[str], set[str]] | None:
    """(names a cell assigns, names it reads), or None when it does not parse (IPython magics
    aside)."""
    code = "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
    )
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    stores: set[str] = set()
    loads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (stores if isinstance(node.ctx, (ast.Store, ast.Del)) else loads).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stores.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return stores, loads


def make_exercise(solution, source_name: str = "") -> nbformat.NotebookNode:
    """The exercise notebook for a solution notebook (which is left unchanged).

    Outputs and execution counts are dropped; cell ids are kept, so the grader can find the answer
    cells in submissions. Malformed markers raise `MarkerError` before anything is written.
    """
    parse_solution(solution)  # every marker checked, so no half-stubbed exercise goes out
    exercise = nbformat.v4.new_notebook(metadata=copy.deepcopy(solution.metadata))
    exercise.nbformat, exercise.nbformat_minor = solution.nbformat, solution.nbformat_minor
    if source_name:
        exercise.metadata["course"] = {
            "generated_from": source_name,
            "note": "generated by `course exercise`: do not edit",
        }
    # Names that a stub would have defined, directly or through other cells.
    tainted: set[str] = set()
    for index, cell in enumerate(solution.cells):
        if is_hidden(cell, index):
            continue
        where = _where(index, cell)
        new = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            new.source = _stub_answer(cell.source, where)
        elif cell.cell_type == "code":
            new.source = _stub_code(cell.source, where)
            new.outputs, new.execution_count = [], None
            names = _names(cell.source)
            stubbed = new.source != cell.source
            uses_stub = names is None or bool(names[1] & tainted)
            if stubbed or (tainted and uses_stub):
                tainted |= names[0] if names else set()
                tags = new.metadata.setdefault("tags", [])
                if RAISES_TAG not in tags:
                    tags.append(RAISES_TAG)
        exercise.cells.append(new)
    return exercise


def exercise_path(solution_path: Path, exercises_dir: Path) -> Path:
    """exercises/NAME_exercise.ipynb for solutions/NAME_solution.ipynb."""
    if not solution_path.stem.endswith("_solution"):
        raise ValueError(f"{solution_path.name}: solution notebooks are named NAME_solution.ipynb")
    return exercises_dir / (solution_path.stem[: -len("_solution")] + "_exercise.ipynb")


def render(solution_path: Path, root: Path | None = None) -> str:
    """The exact text of the exercise generated from `solution_path` (what goes on disk)."""
    solution = nbformat.read(solution_path, as_version=4)
    name = (
        solution_path.relative_to(root).as_posix()
        if root and solution_path.is_relative_to(root)
        else solution_path.name
    )
    exercise = make_exercise(solution, name)
    # The exercise's own Open in Colab badge and install cell.
    if root is not None:
        target = exercise_path(solution_path, root / "exercises")
        colab.apply(exercise, target.relative_to(root).as_posix(), root)
    text = nbformat.writes(exercise)
    return text if text.endswith("\n") else text + "\n"


def find_answer(notebook, answer: Answer) -> str | None:
    """A submission's text for `answer` (placeholder and marker removed), or None if the cell is
    gone."""
    candidates = [
        c
        for c in notebook.cells
        if c.cell_type == "markdown" and c.get("id") == answer.cell_id and answer.cell_id
    ]
    candidates += [
        c
        for c in notebook.cells
        if c.cell_type == "markdown"
        and any(m["question"] == answer.question for m in _ANSWER_MARK.finditer(c.source))
    ]
    if not candidates:
        return None
    text = candidates[0].source.strip()
    mark = _ANSWER_MARK.search(text)
    if mark:
        text = text[mark.end() :]
    elif answer.prefix and text.startswith(answer.prefix):
        text = text[len(answer.prefix) :]
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)  # markers are not part of the answer
    return text.replace(ANSWER_PLACEHOLDER, "").strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `course exercise`."""
    parser.add_argument(
        "--check", action="store_true", help="do not write: exit 1 if exercises/ is out of date"
    )
    parser.add_argument(
        "--solutions",
        type=Path,
        help="folder of *_solution.ipynb (default: solutions/ of the course)",
    )
    parser.add_argument(
        "--exercises", type=Path, help="folder to write *_exercise.ipynb into (default: exercises/)"
    )


def run(args: argparse.Namespace) -> int:
    """`course exercise [--check]`: regenerate the exercises, or check that they are current."""
    root = course_root()
    solutions = (args.solutions or root / "solutions").resolve()
    exercises = (args.exercises or root / "exercises").resolve()
    paths = sorted(solutions.glob("*_solution.ipynb"))
    if not paths:
        print(f"course exercise: no *_solution.ipynb in {solutions}", file=sys.stderr)
        return 1
    stale = []
    for path in paths:
        target = exercise_path(path, exercises)
        try:
            text = render(path, root)
        except MarkerError as exc:
            print(f"course exercise: {path.name}: {exc}", file=sys.stderr)
            return 1
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            print(
                f"{target.relative_to(root) if target.is_relative_to(root) else target}: up to date"
            )
        elif args.check:
            stale.append(target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(
                f"{target.relative_to(root) if target.is_relative_to(root) else target}: written "
                f"from {path.name}"
            )
    if stale:
        names = ", ".join(str(p.relative_to(root) if p.is_relative_to(root) else p) for p in stale)
        print(
            f"course exercise --check: {names} differ from what the generator produces from "
            f"solutions/. "
            "Edit the solution, never the exercise, then run `course exercise` and commit both.",
            file=sys.stderr,
        )
        return 1
    return 0
