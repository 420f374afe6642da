"""The README's feature inventory ("What you learn, feature by feature") against the code.

Each row names where a feature runs (a notebook number, `appendix`, or a `course_utils` module) and
the code patterns that run it; every pattern must appear in that place's code: the code cells of the
notebook (its `%%writefile` scripts included) or the module, with comments removed. A feature cut
from a notebook, or left only in prose, fails here until the README says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT

#: Features a shortened lesson once dropped without a word, brought back: the table must keep
#: listing them (and the test below, that their code runs).
BROUGHT_BACK = [
    # reworded (a loss-scale optimizer trains only on a GPU here; on CPU, bfloat16 and no scaling)
    "mixed precision: `mixed_float16` trained with a loss-scale optimizer on a GPU, "
    "`mixed_bfloat16` (no loss scaling) on CPU; the optimizer's flaw under `MirroredStrategy` "
    "shown in one step on either",
    "the TensorFlow profiler, its trace read back into compute, all-reduce, input and idle",
    "`ParameterServerStrategy` with a `ClusterCoordinator`, local workers and a parameter server",
    "tf.keras `fit` with `BackupAndRestore` surviving a killed worker",
]

SECTION = "## What you learn, feature by feature"


def inventory() -> list[tuple[str, str, list[str]]]:
    """(where, feature, patterns) for every row of the README's inventory table."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("where", "---"):
            continue
        where, feature, code = cells
        patterns = re.findall(r"`([^`]+)`", code)
        assert patterns, f"inventory row {feature!r} names no code pattern"
        rows.append((where, feature, patterns))
    return rows


def without_comments(source: str) -> str:
    """Code with `#` comments removed (a `#` inside a string is rare in the course's code)."""
    kept = []
    for line in source.splitlines():
        if line.lstrip().startswith("#"):
            continue
        kept.append(re.sub(r"\s+#\s.*$", "", line))
    return "\n".join(kept)


def sources(where: str) -> list[Path]:
    """The files a row's `where` names."""
    if where.startswith("course_utils/"):
        return [ROOT / where]
    if where == "appendix":
        return sorted((ROOT / "notebooks").glob("appendix_*.ipynb"))
    if where == "05":
        return sorted((ROOT / "solutions").glob("05_*.ipynb"))
    return sorted((ROOT / "notebooks").glob(f"{where}_*.ipynb"))


def code_of(path: Path) -> str:
    if path.suffix == ".py":
        return without_comments(path.read_text())
    notebook = nbformat.read(path, as_version=4)
    return "\n".join(
        without_comments(cell.source) for cell in notebook.cells if cell.cell_type == "code"
    )


ROWS = inventory()


def test_the_inventory_is_there_and_keeps_what_was_brought_back():
    features = [feature for _, feature, _ in ROWS]
    assert len(ROWS) >= 30, f"the inventory lists only {len(ROWS)} features"
    for feature in BROUGHT_BACK:
        assert feature in features, f"the README's inventory no longer lists {feature!r}"


@pytest.mark.parametrize(("where", "feature", "patterns"), ROWS, ids=[row[1] for row in ROWS])
def test_each_listed_feature_runs_in_the_code(where, feature, patterns):
    paths = sources(where)
    assert paths and all(path.exists() for path in paths), (
        f"{feature!r}: nothing to search for {where!r} ({[str(p) for p in paths]})"
    )
    code = "\n".join(code_of(path) for path in paths)
    missing = [pattern for pattern in patterns if pattern not in code]
    assert not missing, (
        f"{feature!r} ({where}): {missing} no longer in the code of "
        f"{', '.join(p.name for p in paths)}; bring the feature back, or change README.md's "
        "inventory and say where it went"
    )
