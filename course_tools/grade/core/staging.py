"""What the check process reads, staged where its own uid can read it, whatever the host's umask.

Run as root, the check process runs as a uid of its own (`identity`), which no mode of the
instructor's grades folder lets in: under a umask of 027 or 077 the grades are 0750 or 0700 and
their files 0640 or 0600, and the instructor may have made the folder private. So the grader
never binds the grades into the check process's sandbox and never changes their modes: it copies
each submission's artifacts into a staging folder of the batch's work folder (`folder`: 0755,
files 0644, set explicitly; inside the work folder, 0700, that no other account can enter on the
host) and `sandbox.wrap` shows that folder to the check process at the grades' path (`views`),
read-only. The check process then reads the same paths as before, and nothing else of the grades.

Example:

    stage = staging.folder(base)  # base/.checks, made once per batch
    staging.put(out / "alice" / "artifacts", stage / "alice" / "artifacts")
    # ... the check process reads <out>/alice/artifacts, which is that copy
    staging.clear(stage / "alice")
"""

from __future__ import annotations

import os
from pathlib import Path

from course_tools.grade.core import files

#: The staging folder's name in a batch's work folder: a leading dot, which no student's folder
#: has (`roster`), so it is never a submission's work folder.
NAME = ".checks"
#: The modes of what is staged: readable to any uid (the check process's), in a folder (the
#: batch's work folder, 0700) that no other account can enter on the host.
FOLDER_MODE = 0o755
FILE_MODE = 0o644


def folder(base: Path) -> Path:
    """The staging folder of the batch's work folder `base` (made, mode 0755, when missing)."""
    stage = Path(base) / NAME
    try:
        stage.mkdir()
    except FileExistsError:
        if stage.is_symlink() or not stage.is_dir():
            raise
    os.chmod(stage, FOLDER_MODE, follow_symlinks=False)  # whatever the umask
    return stage


def put(source: Path, target: Path) -> None:
    """Copy the regular files and folders under `source` (the grader's own copy of a
    submission's artifacts) to `target` (made, with its parents up to the staging folder),
    folders 0755 and files 0644, times kept; what was there before is removed first. Links and
    other kinds of files are not copied (the grader's copy has none)."""
    clear(target)
    for parent in reversed([target, *target.parents]):
        if parent.name and not parent.exists():
            parent.mkdir()
            os.chmod(parent, FOLDER_MODE)
    if not source.is_dir():
        return
    for entry in files.walk(source):
        there = target / entry.relative
        if entry.kind == "a folder":
            there.mkdir()
            os.chmod(there, FOLDER_MODE)
        elif entry.kind == "a regular file":
            files.copy_regular(entry.path, there, entry.size)
            os.chmod(there, FILE_MODE)


def clear(target: Path) -> None:
    """Remove a staged tree (nothing when it is not there); OSError when some of it stays."""
    left = files.remove_tree(target)
    if left:
        raise OSError(f"could not clear the check process's copy: {'; '.join(left)[:300]}")
