"""The exercise generator: exercises/ is exactly what `course exercise` makes from solutions/.

Fast (no kernel): run with `pytest tests/test_exercise.py`.
"""

from __future__ import annotations

import argparse
import re
import shutil

import nbformat
import pytest
from helpers import ROOT

from course_tools import exercise

SOLUTION = ROOT / "solutions" / "05_svhn_solution.ipynb"
EXERCISE = ROOT / "exercises" / "05_svhn_exercise.ipynb"


def test_exercises_are_exactly_what_the_generator_produces():
    # CI fails here when someone edits the exercise by hand or forgets to regenerate it.
    assert EXERCISE.exists(), "exercises/05_svhn_exercise.ipynb is missing: run `course exercise`"
    assert EXERCISE.read_text(encoding="utf-8") == exercise.render(SOLUTION, ROOT), (
        "exercises/05_svhn_exercise.ipynb is out of date: edit solutions/05_svhn_solution.ipynb, "
        "then run `course exercise` and commit both"
    )


def test_notebooks_are_committed_without_outputs():
    for path in (SOLUTION, EXERCISE):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (
                    f"{path.name} has outputs: strip them"
                )


def _solution_only_lines(solution) -> set[str]:
    """Code lines inside SOLUTION regions that appear nowhere else in the solution notebook."""
    inside, lines, elsewhere = False, set(), set()
    for index, cell in enumerate(solution.cells):
        if cell.cell_type != "code" or exercise.is_hidden(cell, index):
            continue
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line or "### END SOLUTION" in line:
                inside = "BEGIN" in line
            elif len(line.strip()) > 15:
                (lines if inside else elsewhere).add(line.strip())
    return lines - elsewhere


def test_the_exercise_hides_the_solution_and_the_hidden_tests():
    solution = nbformat.read(SOLUTION, as_version=4)
    generated = exercise.make_exercise(solution)
    text = "\n".join(cell.source for cell in generated.cells)
    assert "### BEGIN" not in text and "### END" not in text and "<!-- HIDDEN" not in text
    assert not re.search(r"\bFACTS\b|\bchecks\.\w+\(", text), (
        "the probe or hidden tests leaked into the exercise"
    )
    code_lines = {
        line.strip()
        for cell in generated.cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
    }
    leaked = sorted(_solution_only_lines(solution) & code_lines)
    assert not leaked, f"solution code in the exercise: {leaked}"
    answer = exercise.parse_solution(solution).answers[0]
    assert exercise.find_answer(generated, answer) == "", (
        "the exercise's answer cell should hold only the placeholder"
    )
    assert text.count("raise NotImplementedError()") == sum(
        "### BEGIN SOLUTION" in c.source for c in solution.cells
    )


def test_stub_cells_and_the_cells_that_use_them_may_raise_under_nbval():
    generated = exercise.make_exercise(nbformat.read(SOLUTION, as_version=4))
    code = [cell for cell in generated.cells if cell.cell_type == "code"]
    tagged = [exercise.RAISES_TAG in cell.metadata.get("tags", []) for cell in code]
    assert all(tagged[i] for i, cell in enumerate(code) if "NotImplementedError" in cell.source)
    # The set-up, imports, data and model cells come before any stub and must run normally.
    assert not any(tagged[:5]), "cells before the first stub must not be allowed to fail"
    assert tagged[
        code.index(next(c for c in code if "fit_scores = fit_model.evaluate" in c.source))
    ]


def test_the_solution_defines_tests_points_and_answers():
    parts = exercise.parse_solution(nbformat.read(SOLUTION, as_version=4))
    assert parts.probe.startswith("### BEGIN HIDDEN PROBE")
    assert {t.question for t in parts.tests} == {"q1", "q2", "q3", "q4", "q6"}
    assert [a.question for a in parts.answers] == ["q5"]
    assert parts.max_points == 12


def _tiny_solution() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Tiny"),
        nbformat.v4.new_code_cell("import math\nBASE = 2"),
        nbformat.v4.new_code_cell(
            "def double(x):\n    ### BEGIN SOLUTION\n    return BASE * x\n    ### END SOLUTION"
        ),
        nbformat.v4.new_code_cell("assert double(2) == 4  # visible check"),
        nbformat.v4.new_code_cell("print(math.pi)"),
        nbformat.v4.new_markdown_cell(
            "**Why?**\n<!-- BEGIN SOLUTION [q2] why (2 points) -->\nBecause.\n<!-- END SOLUTION -->"
        ),
        nbformat.v4.new_code_cell(
            "### BEGIN HIDDEN TESTS [q1] doubles (1 point)\nassert double(3) == 6\n### END HIDDEN "
            "TESTS"
        ),
        nbformat.v4.new_markdown_cell("<!-- HIDDEN -->\nfor instructors"),
    ]
    return nb


def test_generator_on_a_small_notebook():
    generated = exercise.make_exercise(_tiny_solution())
    sources = [cell.source for cell in generated.cells]
    assert sources[2] == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert sources[5] == "**Why?**\n<!-- ANSWER [q2] -->\nYOUR ANSWER HERE"
    assert len(sources) == 6, "the hidden test cell and the instructors' markdown are left out"
    tags = [cell.metadata.get("tags", []) for cell in generated.cells]
    assert exercise.RAISES_TAG in tags[2] and exercise.RAISES_TAG in tags[3], (
        "the stub and its visible check may raise"
    )
    assert exercise.RAISES_TAG not in tags[4], (
        "a cell that does not use the stub's names must still pass"
    )
    parts = exercise.parse_solution(_tiny_solution())
    assert [(t.question, t.points) for t in parts.tests] == [("q1", 1.0)] and parts.max_points == 3


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n### BEGIN SOLUTION\ny = 2", "without ### END SOLUTION"),
        ("### END SOLUTION", "without ### BEGIN SOLUTION"),
        ("### BEGIN HIDDEN TESTS [q1] no end (1 point)\nassert True", "must end with"),
        (
            "### BEGIN HIDDEN TESTS q1 missing points\nassert True\n### END HIDDEN TESTS",
            "write the header as",
        ),
    ],
)
def test_malformed_markers_give_a_clear_error(source, message):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    with pytest.raises(exercise.MarkerError, match=re.escape(message)) as raised:
        exercise.make_exercise(nb)  # what `course exercise` runs: every kind of marker checked
    assert "cell 0" in str(raised.value)


def test_find_answer_reads_what_the_student_wrote():
    solution = _tiny_solution()
    generated = exercise.make_exercise(solution)
    answer = exercise.parse_solution(solution).answers[0]
    generated.cells[5].source = generated.cells[5].source.replace(
        "YOUR ANSWER HERE", "Because devices share cores."
    )
    assert exercise.find_answer(generated, answer) == "Because devices share cores."
    generated.cells[5].source = "**Why?**\nI removed the marker but answered."  # found by cell id
    assert exercise.find_answer(generated, answer) == "I removed the marker but answered."
    del generated.cells[5]
    assert exercise.find_answer(generated, answer) is None


def test_course_exercise_check_reports_a_stale_exercise(tmp_path, capsys):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    shutil.copy(SOLUTION, solutions / SOLUTION.name)
    args = argparse.Namespace(check=True, solutions=solutions, exercises=exercises)
    assert exercise.run(args) == 1, "a missing exercise must fail --check"
    assert "course exercise" in capsys.readouterr().err
    assert (
        exercise.run(argparse.Namespace(check=False, solutions=solutions, exercises=exercises)) == 0
    )
    written = exercises / "05_svhn_exercise.ipynb"
    assert written.read_text(encoding="utf-8") == EXERCISE.read_text(encoding="utf-8").replace(
        "solutions/05_svhn_solution.ipynb", "05_svhn_solution.ipynb"
    )
    assert exercise.run(args) == 0
    written.write_text(
        written.read_text(encoding="utf-8").replace("YOUR CODE HERE", "edited by hand", 1),
        encoding="utf-8",
    )
    assert exercise.run(args) == 1
    assert "differ from what the generator produces" in capsys.readouterr().err


def test_cells_after_a_stub_say_which_question_to_answer_first():
    # Run All on the untouched exercise: only the stubs may raise; every cell that uses a stub's
    # names first checks they exist and prints which question to answer (no NameError traceback).
    generated = exercise.make_exercise(nbformat.read(SOLUTION, as_version=4))
    code = [cell.source for cell in generated.cells if cell.cell_type == "code"]
    first_stub = next(i for i, source in enumerate(code) if "NotImplementedError" in source)
    users = [
        source
        for source in code[first_stub:]
        if "NotImplementedError" not in source and "results.json" not in source
    ]
    assert len(users) >= 8
    for source in users:
        assert "if name not in globals()" in source and "first: `{missing[0]}`" in source, source


def test_the_grader_docstring_examples_run():
    """The examples in the grader's docstrings that show an output are real doctests."""
    import doctest

    from course_tools import exercise
    from course_tools.grade.core import report

    for module in (exercise, report):
        finder = doctest.DocTestFinder(recurse=False)
        tests = finder.find(module)
        assert tests, module.__name__
        for test in tests:
            result = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE).run(test)
            assert result.attempted and not result.failed, test.name
