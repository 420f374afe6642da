"""A notebook's text parsed with the grader's memory bounded: its JSON values counted before it is
parsed, and refused past `MAX_VALUES`.

The bytes read are capped already (`plan.NOTEBOOK_MB`), but not what parsing them costs:
`nbformat.reads` turns every JSON value into a Python object and then into a `NotebookNode`,
about 500 bytes for an empty `{}` of 3 bytes (an 11 MB file of 4 million of them took the
grader past 2 GB). Counting first is one regular-expression pass that drops the strings (a
string costs no more than its bytes), then a count of the characters that open a value (`[`,
`{`, `,`): at least as many as the values the text holds, however it is laid out. The course's
executed solution holds about 1,800 values; the cap is more than 100 times that.

Example:

    from course_tools.grade.core import notebooks
    notebook = notebooks.parse(text)  # TooManyValues past MAX_VALUES, before any parsing
"""

from __future__ import annotations

import re

import nbformat

#: The most JSON values a notebook may hold (the exercise has about 950, its solution executed
#: about 1,800; at the cap, parsing takes about 100 MB).
MAX_VALUES = 200_000

#: A JSON string, escapes included (no backtracking: each character matches one way only).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class TooManyValues(ValueError):
    """A notebook holding more JSON values than the grader parses."""


def count_values(text: str) -> int:
    """An upper bound on the JSON values in `text` (at most twice their number): the characters
    outside strings that start a value or separate two."""
    bare = _STRING.sub("", text)
    return bare.count("{") + bare.count("[") + bare.count(",") + 1


def parse(text: str, max_values: int = MAX_VALUES) -> nbformat.NotebookNode:
    """`text` as a version 4 notebook; TooManyValues, before anything is parsed, when it holds
    more than `max_values` JSON values."""
    found = count_values(text)
    if found > max_values:
        raise TooManyValues(
            f"it holds about {found:,} JSON values, more than the {max_values:,} the grader "
            "reads (a notebook of the exercise holds a few thousand): hand in the notebook "
            "without the extra data"
        )
    return nbformat.reads(text, as_version=4)
