"""Plain-text tables, the one way the course prints them (results, devices, reports).

Example:
    >>> from course_utils.tables import format_table
    >>> print(format_table(["run", "examples/s"], [["fit", "1,230"], ["loop", "1,000"]]))
    run   examples/s
    ----------------
    fit        1,230
    loop       1,000
"""

from __future__ import annotations

from collections.abc import Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[c]) for row in cells) for c in range(len(header))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in cells
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def count(n: int, noun: str) -> str:
    """`n` and the noun in the number that agrees with it.

    >>> count(1, "replica"), count(4, "replica")
    ('1 replica', '4 replicas')
    """
    return f"{n:,} {noun if n == 1 else noun + 's'}"
