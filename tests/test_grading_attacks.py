"""The attacks of a security review of `course grade` (local route), one submission each, graded
in one batch from a folder per student placed where submissions often live (/srv), 2 at a time:

1. a non-UTF-8 symbolic link and a lone surrogate in results.json (must not abort the batch);
2. `alice/bob.ipynb` beside `bob/05_svhn_exercise.ipynb` (a student's file name must not take
   another student's row);
3. full marks without the work (fewer epochs, a custom loop that trains nothing, one model saved
   three times);
4. the probe rewritten by an IPython input transformer (made-up facts);
5. update_display past the output caps, a large artifact;
6. Markdown and HTML injected into the report and the Moodle feedback;
7. an unreadable probe answer (100,000 brackets: RecursionError);
8. a walk of the file system for the other submissions.

And the batch-level promise: whatever one submission does, every other one is graded and the
gradebook and its exports are written.
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from grading_submissions import (
    BIG_ARTIFACT,
    DEEP,
    DISPLAY_FLOOD,
    ENV,
    FORGER,
    INJECT,
    SURROGATE,
    TOKEN,
    WALKER,
    cheater,
    completed_exercise,
    fill,
    notebook_of,
    write,
)

from course_tools import batch as grading_batch
from course_tools import sandbox, submission
from course_tools.runner import Limits

pytestmark = pytest.mark.slow


def _where() -> Path:
    """Where the submissions live: /srv when it can be written (as on a course server)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f"{TOKEN}-", dir="/srv"))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"{TOKEN}-"))


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    available, detail = sandbox.status()
    if not available:
        pytest.skip(f"no grading sandbox: {detail}")
    where = _where()
    folder = where / "submissions"
    out = tmp_path_factory.mktemp("grades")
    notebooks = {
        "alice/bob.ipynb": notebook_of("print('alice')"),
        "bob/05_svhn_exercise.ipynb": notebook_of("print('bob')"),
        "surrogate/mine.ipynb": notebook_of(SURROGATE, "print('after')"),
        "inject/mine.ipynb": notebook_of(INJECT),
        "display/mine.ipynb": notebook_of(DISPLAY_FLOOD, BIG_ARTIFACT),
        "forger/mine.ipynb": notebook_of(FORGER),
        "deep/mine.ipynb": notebook_of(DEEP),
        "walker/mine.ipynb": notebook_of(fill(WALKER, out)),
        "cheater/05_svhn_exercise.ipynb": cheater(completed_exercise()),
    }
    for name, notebook in notebooks.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write(notebook, folder / name)
    (where / f"{TOKEN}.txt").write_text("another course's secret")
    settings = grading_batch.GradingSettings(
        profile=ENV["COURSE_PROFILE"], devices=int(ENV["COURSE_DEVICES"]), data=ENV["COURSE_DATA"]
    )
    try:
        grades = grading_batch.grade(
            [folder],
            out,
            limits=Limits(cell_timeout=90, timeout=600),
            jobs=2,
            progress=False,
            settings=settings,
        )
        error = None
    except Exception as exc:  # what the batch did before: recorded, every test fails with it
        grades, error = [], f"{type(exc).__name__}: {exc}"
    yield {g.student: g for g in grades}, out, error
    shutil.rmtree(where, ignore_errors=True)


def _grades(attacks):
    grades, out, error = attacks
    assert error is None, f"the batch stopped: {error}"
    return grades, out


def test_every_submission_is_graded_and_the_exports_are_written(attacks):
    grades, out = _grades(attacks)
    expected = {"alice", "bob", "surrogate", "inject", "display", "forger", "deep", "walker"}
    assert expected | {"cheater"} == set(grades)
    assert not [g.student for g in grades.values() if g.grader_failed], {
        g.student: g.reason for g in grades.values()
    }
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        text = (out / name).read_text()
        assert all(student in text for student in grades), name
    assert not list(out.rglob("*.tmp")), "no half-written file is left"


def test_a_non_utf8_link_and_a_lone_surrogate_are_reported(attacks):
    grades, out = _grades(attacks)
    g = grades["surrogate"]
    assert g.status == "graded", (g.status, g.reason)
    assert any("symbolic link" in note for note in g.notes), g.notes
    report = (out / "surrogate" / "report.md").read_text(encoding="utf-8")
    assert "\\xff" in report or "\\udcff" in report, "the link's name, escaped"


def test_a_student_name_comes_from_the_folder_not_the_file_name(attacks):
    grades, out = _grades(attacks)
    assert grades["alice"].path.parent.name == "alice"
    assert grades["bob"].path.parent.name == "bob"
    assert "bob-2" not in grades


def test_full_marks_need_the_work(attacks):
    grades, out = _grades(attacks)
    g = grades["cheater"]
    assert g.status == "graded", g.reason
    messages = " ".join(r.message for r in g.results)
    assert g.score <= 8, {r.title: r.message for r in g.results}
    assert "epochs" in messages and "optimizer" in messages, messages
    assert "the same weights" in messages, messages


def test_an_input_transformer_does_not_forge_the_probe(attacks):
    grades, out = _grades(attacks)
    g = grades["forger"]
    earned = {r.title: r.earned for r in g.results if r.earned}
    assert g.score == 0, earned


def test_update_display_and_artifacts_are_capped(attacks):
    grades, out = _grades(attacks)
    g = grades["display"]
    executed = out / "display" / "executed.ipynb"
    assert executed.stat().st_size < 10 * 2**20, executed.stat().st_size
    assert any("display" in note for note in g.notes), g.notes
    assert not (out / "display" / "artifacts" / "big.bin").exists()
    assert any("artifacts larger than" in note for note in g.notes), g.notes


def test_what_a_submission_writes_is_escaped_in_the_report_and_exports(attacks):
    grades, out = _grades(attacks)
    report = (out / "inject" / "report.md").read_text()
    for raw in ("<script", "<img", "<!--", "\n# Full", "\n## Grade"):
        assert raw not in report, raw
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert all(not line.startswith("# ") for line in headings[1:]), headings
    with open(out / "moodle.csv") as handle:
        feedback = {row["Username"]: row["Feedback"] for row in csv.DictReader(handle)}
    assert "<script" not in feedback["inject"] and "<img" not in feedback["inject"]


def test_an_unreadable_probe_answer_is_the_submissions_error(attacks):
    grades, out = _grades(attacks)
    g = grades["deep"]
    assert g.status != "grader error", g.reason
    assert any("probe" in note for note in g.notes), g.notes


def test_other_submissions_and_the_host_are_out_of_sight(attacks):
    grades, out = _grades(attacks)
    executed = nbformat.read(out / "walker" / "executed.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    line = next(line for line in text.splitlines() if line.startswith("WALK "))
    import json

    seen = json.loads(line[len("WALK ") :])
    assert not [p for p in seen["found"] if TOKEN in p or "05_svhn" in p], seen["found"]
    assert "srv" not in seen["root"] and "home" not in seen["root"], seen["root"]


def test_the_work_folder_disk_use_is_capped(tmp_path):
    from grading_submissions import DISK_FILL

    available, detail = sandbox.status()
    if not available:
        pytest.skip(detail)
    outcome, _, _ = submission.run(
        notebook_of(DISK_FILL, "print('next')"),
        tmp_path,
        {**os.environ, **ENV},
        Limits(60, 120, disk_mb=64),
    )
    assert outcome.status == "killed" and "disk" in outcome.reason, (outcome.status, outcome.reason)
