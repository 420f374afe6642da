"""What changed in the course while submissions ran: the course package and the solution, hashed
at the start of the batch and compared after each submission.

Sandboxed, a submission cannot have made the change (the course and the solution are mounted
read-only in its sandbox, and the hidden tests were read before the batch): the change is said
once on the grader's console, never in a student's row. Without the sandbox, student code runs
with your rights, so the row of the submission(s) running then gets the note (it cannot tell a
submission's write from your own edit, and says so).

Example:

    watch = TamperWatch(batch, "this submission")
    grade.notes += watch.notes()  # [] sandboxed: a change is printed on the console instead
"""

from __future__ import annotations

import hashlib
import sys
import threading
from pathlib import Path

from course_tools.grade.core import plan
from course_tools.grade.core.plan import Batch
from course_tools.grade.core.report import console


class TamperWatch:
    """Changes to the course package and the solution while submissions run; the solution as it
    was at the start is kept beside the gradebook."""

    def __init__(self, batch: Batch, suspects: str = "this submission") -> None:
        self.batch, self.suspects = batch, suspects
        self.solution_bytes = batch.solution_bytes
        self.hashes = self._hash()
        self.lock = threading.Lock()

    @staticmethod
    def _hash() -> dict[Path, str]:
        paths = sorted(plan.PACKAGE.rglob("*.py"))
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.exists()}

    def notes(self) -> list[str]:
        """Notes for the row of the submission that just ran: what changed while it ran, when it
        could have made the change (unsandboxed); [] otherwise (said on the console instead)."""
        with self.lock:
            changes = self._changes()
        if not self.batch.sandboxed:
            return [
                f"{what} changed while {self.suspects} ran (tampering, or an edit of yours?){more}"
                for what, more in changes
            ]
        for what, more in changes:
            print(
                f"course grade: {console(what)} changed during the batch, not by a submission "
                f"(its sandbox mounts it read-only){console(more)}",
                file=sys.stderr,
                flush=True,
            )
        return []

    def _changes(self) -> list[tuple[str, str]]:
        """(what, more to say) for each change since the last call: each change is said once."""
        changes = []
        solution = self.batch.solution_path
        now = solution.read_bytes()
        if now != self.solution_bytes:
            kept = self.batch.out / f"{solution.stem}.at-batch-start.ipynb"
            kept.write_bytes(self.batch.solution_bytes)
            self.solution_bytes = now
            more = (
                ". Grades are unaffected: the hidden tests were read before the batch. The file "
                f"was left as it is; {kept} is the version the batch started with."
            )
            changes.append((solution.name, more))
        after = self._hash()
        changes += [
            (str(p.relative_to(plan.PACKAGE.parent)), "")
            for p in after
            if self.hashes.get(p) != after[p]
        ]
        self.hashes = after
        return changes
