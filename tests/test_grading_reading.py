"""The grader's static reading (`course_tools.grade.core.reading`) on the routes of red team 10a
and the honest lines beside them, through what the check process says (`checker._facts`): code
the reading cannot read is marked, a library's class changed through an object is marked, and
ordinary NumPy, pickle writing and Keras loading are not.

Run: pytest tests/test_grading_reading.py  (a few seconds, no kernel).
"""

from __future__ import annotations

from course_tools.grade.core import checker

#: Red team 10a's forging helper: it salts `hashlib.sha256`, so a second pass over a pipeline
#: that repeats its order seems to see other batches.
SALTER = (
    "import hashlib\n_real = hashlib.sha256\n"
    "def sha256(data=b'', **kw):\n    return _real(bytes(data) + b'!', **kw)\n"
    "hashlib.sha256 = sha256\n"
)


def _untrusted(*cells: str) -> str:
    """What the check process says marks the facts of a notebook of `cells` untrusted."""
    job = {"facts": {"models": {}}, "observed": {"cells": [{"source": c} for c in cells]}}
    return " ".join(checker._facts(job).get("tampered", []))


def _escaped(text: str) -> str:
    """`text` with its quotes, newlines and backslashes as `\\uXXXX` escapes."""
    return "".join(f"\\u{ord(c):04x}" if c in '"\n\\' else c for c in text)


def test_a_coding_that_changes_the_code_is_marked_and_plain_codings_are_read():
    """Red team 10a's `%%writefile` with `unicode_escape`: the reading saw one string, Python
    imported the salting helper. A coding other than UTF-8, ASCII or Latin-1 is marked, named in
    the message; a plain one is decoded as Python will and read as code (a patch in it counts)."""
    hidden = '%%writefile tidy_helpers.py\n# -*- coding: unicode_escape -*-\nNOTE = "notes'
    hidden += _escaped('"\n' + SALTER + 'END = "') + '"\n'
    said = _untrusted(hidden, "import tidy_helpers")
    assert "runs code the grader cannot read as code (cell 1, line 1: `%%writefile" in said, said
    assert "declares the coding unicode-escape" in said, said
    rot = 'exec(b"# coding: rot13\\nvzcbeg wfba")'
    assert "declares the coding rot-13" in _untrusted(rot), _untrusted(rot)
    for coding in ("utf-8", "latin-1", "ascii", "utf8", "iso-8859-1"):
        plain = f"%%writefile helpers.py\n# -*- coding: {coding} -*-\nx = 1\n"
        assert _untrusted(plain, "import helpers") == "", coding
        patched = f"%%writefile helpers.py\n# coding: {coding}\n{SALTER}"
        said = _untrusted(patched, "import helpers")
        assert "(cell 1, line 6: `hashlib.sha256 = sha256`)" in said, (coding, said)
