r"""What grading writes: one submission's grade, its report, the gradebook and its exports.

A `Grade` is saved as `<out>/<student>/result.json` next to the student's `report.md`; the batch
(local or a Slurm job array) reads those files back and writes `<out>/gradebook.csv` from them, so
both routes give the same reports and the same gradebook. For a learning platform the gradebook is
also exported in Canvas's and Moodle's grade-import CSV formats.

Everything a submission controls (its recorded strings, error messages, artifact names, written
answers) goes through `escape` before it reaches a report or an export, and every file is written
with `errors="backslashreplace"`: a lone surrogate or a name that is not UTF-8 is shown escaped,
never an error that stops the batch.

Example:

    from course_tools.grade.core import report
    g = report.Grade("alice", Path("alice.ipynb"), status="graded", max_score=12)
    report.save(g, Path("grades/alice"))
    report.write_gradebook([g], Path("grades/gradebook.csv"), questions=["q1", "q2"])

>>> escape("<b>12/12</b> # done")
'&lt;b&gt;12/12&lt;/b&gt; \\# done'
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: File of one graded submission, in its folder under the grades.
RESULT_NAME = "result.json"
#: Statuses of a grade the grader failed to give, whatever the submission: a re-run grades them
#: again, and `course grade` exits with 1 when the gradebook has one.
GRADER_FAILURES = frozenset(
    {"grader error", "could not start", "task failed", "task timed out", "task cancelled"}
)


@dataclass
class CheckResult:
    """One hidden test (or written answer) and how it went."""

    question: str
    title: str
    points: float
    earned: float
    # why it failed, or a note
    message: str = ""
    # a written answer for the instructor to read
    manual: bool = False


@dataclass
class Grade:
    """The grade of one submission.

    status: "graded", "invalid notebook", "unchanged exercise", "several notebooks", "too many
    files" (a student folder too large to walk), "no notebook" (a student folder without one),
    "grader error", how the run failed (`RunOutcome.status`), why a Slurm task gave no result
    ("task failed", "task timed out", "task cancelled"), or "killed the grader" (its grading
    process died while it ran alone: scored 0, `routes.supervised`).

    notes go wherever the grade goes, the student's report and Moodle's feedback included;
    instructor_notes only into `gradebook.csv` (they name other students: whom a submission ran
    beside when the grader's process died).
    """

    student: str
    path: Path
    status: str
    reason: str = ""
    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    instructor_notes: list[str] = field(default_factory=list)
    cell_errors: list[str] = field(default_factory=list)
    answers: dict[str, str | None] = field(default_factory=dict)
    seconds: float = 0.0
    # executing the notebook, the kernel's highest memory use, the hidden tests
    run_seconds: float = 0.0
    peak_mb: float = 0.0
    check_seconds: float = 0.0
    max_score: float = 0.0
    # what it was graded from (submission, solution, settings): a re-run skips it when unchanged
    key: str = ""

    @property
    def grader_failed(self) -> bool:
        """The grader, not the submission, failed (`GRADER_FAILURES`): not a final grade."""
        return self.status in GRADER_FAILURES

    @property
    def score(self) -> float:
        return sum(r.earned for r in self.results)

    @property
    def to_read(self) -> list[str]:
        """The questions whose points are given for now: written answers the instructor has yet
        to read (a point taken back by hand changes the score before any import)."""
        return sorted({r.question for r in self.results if r.manual and r.earned}, key=natural)

    def question_scores(self) -> dict[str, float]:
        scores: dict[str, float] = {}
        for r in self.results:
            scores[r.question] = scores.get(r.question, 0.0) + r.earned
        return scores

    def to_json(self) -> str:
        # ensure_ascii: a lone surrogate is written as an escape, never an encoding error
        return json.dumps({**dataclasses.asdict(self), "path": str(self.path)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Grade:
        data = json.loads(text)
        data["path"] = Path(data["path"])
        data["results"] = [CheckResult(**r) for r in data["results"]]
        return cls(**data)


#: Characters with a meaning in Markdown, backslash-escaped by `escape`.
MARKDOWN_SPECIAL = frozenset("\\`*_{}[]()#+-.!|~")
#: Characters with a meaning in HTML (Markdown renderers pass HTML through), as entities.
HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
#: A spreadsheet cell starting with one of these is a formula: prefixed with "'" in the CSVs.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def escape(text: object, *, markdown: bool = True, html: bool = True) -> str:
    """`text` as plain text in a Markdown report (markdown=True), an HTML field (markdown=False) or
    the grader's console (both False): one line, Markdown's special characters backslash-escaped,
    HTML's as entities, lone surrogates and control characters (a terminal's escape sequences)
    shown as escapes. Everything a submission controls goes through it."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if c.isprintable() else " " if c in "\n\r\t" else repr(c)[1:-1] for c in text)
    if markdown:
        text = "".join("\\" + c if c in MARKDOWN_SPECIAL else c for c in text)
    return "".join(HTML_ENTITIES.get(c, c) for c in text) if html else text


def console(text: object) -> str:
    """`text` for the grader's console: `escape` without Markdown or HTML, so a name a submission
    chose cannot move the cursor, clear the screen or print a line of its own.

    >>> console("x\\x1b[2J\\nalice 12 / 12")
    'x\\\\x1b[2J alice 12 / 12'
    """
    return escape(text, markdown=False, html=False)


def _cell(value: str) -> str:
    """A CSV cell a spreadsheet reads as text, not as a formula."""
    return "'" + value if value.startswith(FORMULA_START) else value


def natural(question: str) -> tuple:
    """Sort key that puts Q2 before Q10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", question))


def save(g: Grade, folder: Path) -> None:
    """Write the student's report.md and result.json into `folder` (nothing a submission wrote can
    make it fail on encoding: see the module's docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_report(g, folder / "report.md")
    # last, and whole or not at all: its presence says "graded" to a re-run and to `slurm_array`
    _write_whole(folder / RESULT_NAME, g.to_json())


def _write_whole(path: Path, text: str) -> None:
    """Write `path` through a temporary file renamed over it: a reader (or a crash) never sees
    half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def load(folder: Path) -> Grade | None:
    """The grade saved in `folder`, or None when there is none (or it cannot be read)."""
    try:
        return Grade.from_json((folder / RESULT_NAME).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _check_rows(g: Grade) -> list[str]:
    lines = ["## Checks", "", "| question | check | points | result |", "|---|---|---|---|"]
    for r in sorted(g.results, key=lambda r: natural(r.question)):
        verdict = "FAILED" if r.earned < r.points else ("to read" if r.manual else "passed")
        detail = f": {escape(r.message)}" if r.message and verdict != "passed" else ""
        lines.append(
            f"| {r.question} | {escape(r.title)} | {r.earned:g}/{r.points:g} | {verdict}{detail} |"
        )
    return lines


def write_report(g: Grade, path: Path) -> None:
    """The student's report: score, each check and why it failed, errors, written answers (never
    the notes for the instructor only: it may be handed to the student)."""
    lines = [
        f"# {escape(g.student)}: {g.score:g} / {g.max_score:g}",
        "",
        f"- submission: {escape(g.path.name)}",
        f"- status: {g.status}" + (f" ({escape(g.reason)})" if g.reason else ""),
    ]
    if g.run_seconds:
        lines.append(
            f"- graded in {g.seconds:.0f} s (notebook {g.run_seconds:.0f} s, checks "
            f"{g.check_seconds:.0f} s), peak memory {g.peak_mb:.0f} MB; the executed notebook is "
            f"`executed.ipynb`, its files `artifacts/`"
        )
        lines.append(
            '- a message\'s "cell [N]" is the code cell shown as `[N]` in `executed.ipynb` '
            "(its execution count: the code cells that hold code, counted from the top)"
        )
    lines.append("")
    if g.notes:
        lines += ["## Notes", "", *[f"- {escape(note)}" for note in g.notes], ""]
    lines += _check_rows(g)
    if g.cell_errors:
        lines += [
            "",
            "## Errors while running the notebook",
            "",
            "Later cells still ran; a failing cell usually makes the cells that use its "
            "results fail too.",
            "",
        ]
        lines += [f"- {escape(error)}" for error in g.cell_errors[:30]]
    for question, text in g.answers.items():
        lines += ["", f"## Written answer ({question})", ""]
        lines += [f"> {escape(line)}  " for line in (text or "(no answer)").splitlines()]
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_whole(path, "\n".join(lines) + "\n")


def saved_rows(out: str | os.PathLike, which: Callable[[str], bool] = bool) -> list[Grade]:
    """The grades saved earlier in `out` that its gradebooks hold as rows, in the order of their
    folders: each student's folder (no link, no leading dot) whose grade (`load`) is of the student
    it is named after; only the folders whose name `which` keeps are read (all by default)."""
    rows = []
    with contextlib.suppress(OSError):
        for folder in sorted(Path(out).iterdir()):
            if folder.name.startswith(".") or not which(folder.name) or folder.is_symlink():
                continue
            saved = load(folder) if folder.is_dir() else None
            if saved is not None and saved.student == folder.name:
                rows.append(saved)
    return rows


def kept_grades(grades: list[Grade], out: Path) -> list[Grade]:
    """`grades`, then the grades saved earlier in `out` (`saved_rows`) of the students not among
    them, by name: the gradebooks of a batch that grades a few students into `out` again (a late
    submission, one folder given alone) keep every other student's row. (A batch's name spelt
    otherwise than a row's, `Alice` beside a row `alice`, stops before grading:
    `roster.check_spellings`.)"""
    names = {g.student for g in grades}
    return [*grades, *saved_rows(out, lambda name: name not in names)]


def _text(value: object) -> str:
    """A CSV cell of what a submission may have chosen (a name, notes, a reason): `console`'s
    escapes (no control character or escape sequence reaches the instructor's terminal or
    spreadsheet), then quoted when a spreadsheet would read a formula (`_cell`)."""
    return _cell(console(value))


def _notes(g: Grade, *, instructor: bool = False) -> str:
    """The row's notes and reason; with `instructor`, the notes for the instructor only too."""
    notes = g.notes + (g.instructor_notes if instructor else [])
    return "; ".join(notes + ([g.reason] if g.reason else []))


def write_gradebook(grades: list[Grade], path: Path, questions: list[str]) -> None:
    """One row per submission: score, points per question, status and notes, those for the
    instructor only included (a cell that a spreadsheet would read as a formula, the student's
    name included, starts with "'"; what a submission chose shown escaped: `_text`). The
    instructor's file: it may name other students. The rows of students graded earlier into the
    same folder follow (`kept_grades`)."""
    questions = sorted(questions, key=natural)
    grades = kept_grades(grades, path.parent)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "student",
                "score",
                "max_score",
                *questions,
                "status",
                "to_read",
                "notes",
                "seconds",
                "report",
            ]
        )
        for g in grades:
            scores = g.question_scores()
            writer.writerow(
                [
                    _text(g.student),
                    f"{g.score:g}",
                    f"{g.max_score:g}",
                    *[f"{scores.get(q, 0):g}" for q in questions],
                    _text(g.status),
                    " ".join(g.to_read),
                    _text(_notes(g, instructor=True)),
                    f"{g.seconds:.0f}",
                    _text(f"{g.student}/report.md"),
                ]
            )


def write_canvas(grades: list[Grade], path: Path, assignment: str) -> None:
    """The gradebook as a Canvas "Import grades" CSV: Student, ID, SIS User ID, SIS Login ID,
    Section, then one column named after the assignment holding the score.

    Canvas matches a row to a student by ID, SIS User ID or SIS Login ID. The grader only knows the
    submission's name, so it goes in "SIS Login ID" (name the submissions after the students'
    logins) and "Student"; the other identifying columns stay empty. A column whose header is a new
    assignment name creates that assignment on import. The "Points Possible" row under the header
    (as in Canvas's own export) gives the maximum score. Earlier rows kept: `kept_grades`.
    """
    grades = kept_grades(grades, path.parent)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
        maximum = max((g.max_score for g in grades), default=0)
        writer.writerow(["    Points Possible", "", "", "", "", f"{maximum:g}"])
        for g in grades:
            writer.writerow([_text(g.student), "", "", _text(g.student), "", f"{g.score:g}"])


def write_moodle(grades: list[Grade], path: Path, assignment: str) -> None:
    """The gradebook as a Moodle "Import > CSV file" file: a user column, a grade column and a
    feedback column.

    On import, map "Username" (Map from) to the Moodle field that names your students (Map to:
    username, ID number or email), the grade column to the grade item, and "Feedback" to that item's
    feedback. The grade is the score; the feedback, which Moodle shows the student, is the status
    and notes, never the notes for the instructor only (`Grade.instructor_notes`). Earlier rows
    kept: `kept_grades`.
    """
    grades = kept_grades(grades, path.parent)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Username", assignment, "Feedback"])
        for g in grades:
            feedback = f"{g.score:g}/{g.max_score:g}, {escape(g.status, markdown=False)}"
            if _notes(g):
                # Moodle shows the feedback as HTML
                feedback += f": {escape(_notes(g), markdown=False)}"
            if g.to_read:
                feedback += f" ({', '.join(g.to_read)}: given for now, your answer is read by hand)"
            writer.writerow([_text(g.student), f"{g.score:g}", _cell(feedback)])
