"""Fail when an executed notebook shows an error, stderr or a warning (.ci/device-sweep, and
tests/test_browser.py on what JupyterLab saved).

An error output counts unless its cell is tagged `raises-exception` (the exercise's stubs raise by
design). stderr streams and any output text with a warning (Python's `...Warning:`, TensorFlow's
`WARNING:` or a `W0000` log line) count everywhere: a lesson's outputs must be clean.

Example:
    $ .venv/bin/python -m course_tools.output_check build/dev3/01_keras_fit_mnist.ipynb
    build/dev3/01_keras_fit_mnist.ipynb: clean
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

WARNING = re.compile(r"\w*Warning: |^WARNING[: ]|^W\d{4} ", re.MULTILINE)


def problems(path: Path) -> list[str]:
    """One line per offending output: cell number, kind, first line."""
    found = []
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error":
                if "raises-exception" not in tags:
                    found.append(f"cell {index}: error {output['ename']}: {output['evalue'][:200]}")
                continue
            text = output.get("text", "") if kind == "stream" else ""
            if kind in ("display_data", "execute_result"):
                text = output.get("data", {}).get("text/plain", "")
            if kind == "stream" and output.get("name") == "stderr":
                found.append(f"cell {index}: stderr: {text.strip().splitlines()[0][:200]}")
            elif (match := WARNING.search(text)) is not None:
                line = text[match.start() :].splitlines()[0]
                found.append(f"cell {index}: warning: {line[:200]}")
    return found


def main(paths: list[str]) -> int:
    return report({name: problems(Path(name)) for name in paths})


def report(found: dict[str, list[str]], clean: str = "clean") -> int:
    """Print each checked path with `clean` or its problems, one per line (also
    course_tools.artifact_check's); return 1 if any has a problem, else 0."""
    for name, lines in found.items():
        print(f"{name}: {clean if not lines else f'{len(lines)} problem(s)'}")
        for line in lines:
            print(f"  {line}")
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
