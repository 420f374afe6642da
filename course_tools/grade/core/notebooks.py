"""A notebook's text parsed with the grader's memory bounded: its JSON values counted before it is
parsed, and refused past `MAX_VALUES`.

The bytes read are capped already (`plan.NOTEBOOK_MB`), but not what parsing them costs:
`nbformat.reads` turns every JSON value into a Python object and then into a `NotebookNode`,
about 500 bytes for an empty `{}` of 3 bytes (an 11 MB file of 4 million of them took the
grader past 2 GB). Counting first is one regular-expression pass that drops the strings (a
string costs no more than its bytes), then a count of the characters that open a value (`[`,
`{`, `,`): at least as many as the values the text holds, however it is laid out. The course's
executed solution holds about 1,800 values; the cap is more than 100 times that.

The pass is linear whatever the text: a string runs to its closing quote or, unterminated, to
the end of the text (the pattern always matches, so it never restarts from a later quote, which
made an unterminated string cost time quadratic in the file's size); a text that ends inside a
string, or does not start with `{`, is not a notebook and is refused (`NotJSON`) before
anything is counted further.

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

#: A JSON string, escapes included, to its closing quote or, unterminated, to the end of the
#: text: it matches from every quote it starts at, so a scan never restarts (each character
#: matches one way only, and there is nothing to backtrack for).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
#: Appended before the strings are dropped: when the text ends inside a string, ` "` closes it
#: (the space absorbs a trailing backslash) and the `x` is left; otherwise ` "x` is a string of
#: its own, unterminated, and is dropped with the rest.
_END = ' "x'


class TooManyValues(ValueError):
    """A notebook holding more JSON values than the grader parses."""


class InvalidNotebook(ValueError):
    """JSON that breaks the notebook format's schema (a cell's source a number, a dictionary)."""


class NotJSON(ValueError):
    """A text that cannot be a notebook's JSON (a string that never ends, no `{` first)."""


def count_values(text: str) -> int:
    """An upper bound on the JSON values in `text` (at most twice their number): the characters
    outside strings that start a value or separate two. Time linear in the text's length;
    NotJSON when a string in it never ends.

    >>> count_values('{"a": [1, "x,{"]}')
    4
    """
    bare = _STRING.sub("", text + _END)
    if bare.endswith("x"):
        raise NotJSON("a string in it never ends (no closing quote): it is not JSON")
    return bare.count("{") + bare.count("[") + bare.count(",") + 1


def parse(text: str, max_values: int = MAX_VALUES) -> nbformat.NotebookNode:
    """`text` as a version 4 notebook; TooManyValues, before anything is parsed, when it holds
    more than `max_values` JSON values; NotJSON when it cannot be JSON (see `count_values`);
    InvalidNotebook when it breaks the notebook format's schema (keys it does not name allowed):
    a submission's "invalid notebook", never a grader error where the grader reads it."""
    if not text.lstrip()[:1] == "{":
        raise NotJSON("it does not start with `{`: it is not a notebook's JSON")
    found = count_values(text)
    if found > max_values:
        raise TooManyValues(
            f"it holds about {found:,} JSON values, more than the {max_values:,} the grader "
            "reads (a notebook of the exercise holds a few thousand): hand in the notebook "
            "without the extra data"
        )
    notebook = nbformat.reads(text, as_version=4)  # which only logs what breaks the schema
    try:  # extra keys allowed (editors add their own): what the grader reads is checked
        nbformat.validate(notebook, relax_add_props=True)
    except nbformat.ValidationError as exc:
        where = "/".join(map(str, getattr(exc, "absolute_path", []) or []))
        what = str(getattr(exc, "message", exc))
        what = what if len(what) <= 200 else f"{what[:200]}..."
        raise InvalidNotebook(
            f"it breaks the notebook format (nbformat 4) at {where or 'its top'}: {what}"
        ) from None
    return notebook
