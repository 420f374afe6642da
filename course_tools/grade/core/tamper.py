"""What unsandboxed code changed: notes on the course package and the solution changing while
submissions run (possible only with the sandbox off)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from course_tools.grade.core.plan import PACKAGE, Batch


class TamperWatch:
    """Notes on the course package and the solution changing while submissions run (possible only
    without the sandbox); the solution as it was at the start is kept beside the gradebook."""

    def __init__(self, batch: Batch, suspects: str = "this submission") -> None:
        self.batch, self.suspects = batch, suspects
        self.solution_bytes = batch.solution_bytes
        self.hashes = self._hash()
        self.lock = threading.Lock()

    @staticmethod
    def _hash() -> dict[Path, str]:
        paths = sorted(PACKAGE.rglob("*.py"))
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.exists()}

    def notes(self) -> list[str]:
        with self.lock:
            return self._notes(self.suspects)

    def _notes(self, suspects: str) -> list[str]:
        notes = []
        solution = self.batch.solution_path
        if solution.read_bytes() != self.solution_bytes:
            # It may be the submission, or your own edit during a long batch: keep both versions.
            kept = self.batch.out / f"{solution.stem}.at-batch-start.ipynb"
            kept.write_bytes(self.solution_bytes)
            # report each change once
            self.solution_bytes = solution.read_bytes()
            notes.append(
                f"{solution.name} changed while {suspects} ran (tampering, or an edit of yours?). "
                "Grades are unaffected: the hidden tests were read before the batch. The file was "
                f"left as it is; {kept} is the version the batch started with."
            )
        after = self._hash()
        notes += [
            f"{p.relative_to(PACKAGE.parent)} changed while {suspects} ran (tampering?)"
            for p in after
            if self.hashes.get(p) != after[p]
        ]
        self.hashes = after
        return notes
