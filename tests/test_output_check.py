"""course_tools.output_check, which .ci/device-sweep and the browser test apply to executed
notebooks: a warning, stderr or an unexpected error fails; a tagged error and clean text do not."""

from __future__ import annotations

import subprocess
import sys

import nbformat

from course_tools.output_check import problems


def executed(tmp_path, *outputs, tags=()):
    cell = nbformat.v4.new_code_cell("pass", outputs=list(outputs))
    cell.metadata["tags"] = list(tags)
    path = tmp_path / "executed.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return path


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_clean_outputs_pass(tmp_path):
    path = executed(tmp_path, stream("Epoch 1/3: loss 0.42\nno warnings here\n"))
    assert problems(path) == []
    result = subprocess.run(
        [sys.executable, "-m", "course_tools.output_check", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "clean" in result.stdout, result.stdout + result.stderr


def test_each_kind_of_problem_is_named_with_its_cell(tmp_path):
    for output, words in [
        (stream("x\n/site.py:3: UserWarning: careful\n"), "warning: UserWarning: careful"),
        (stream("WARNING:tensorflow:retracing\n"), "warning: WARNING:tensorflow"),
        (stream("W0000 00:00 log line\n"), "warning: W0000"),
        (stream("oops\n", name="stderr"), "stderr: oops"),
        (nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[]), "error"),
    ]:
        found = problems(executed(tmp_path, output))
        assert len(found) == 1 and found[0].startswith("cell 0:") and words in found[0], found
    result = subprocess.run(
        [sys.executable, "-m", "course_tools.output_check", str(tmp_path / "executed.ipynb")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "1 problem(s)" in result.stdout, result.stdout


def test_an_error_in_a_raises_exception_cell_is_expected(tmp_path):
    error = nbformat.v4.new_output("error", ename="NotImplementedError", evalue="", traceback=[])
    assert problems(executed(tmp_path, error, tags=["raises-exception"])) == []
