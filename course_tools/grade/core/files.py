"""The files a submission made, read the safe way: only regular files, never through a link,
never waiting on one, size-capped before reading; trees walked and removed without recursion,
with caps, and never an exception out of a clean-up.

Everything the grader reads from a submission (its notebook, the artifacts it copies out, the
work folder it watches and removes) goes through here, because a student controls what these
paths are: a symbolic link to another student's notebook or to `/etc/shadow`, a FIFO that blocks
whoever opens it, `/dev/zero`, a folder 1,100 levels deep (deeper than Python's recursion limit)
or 300,000 folders.

Example:

    from course_tools.grade.core import files
    data = files.read_regular(Path("submissions/alice/homework.ipynb"), limit=64 * 2**20)
    for entry in files.walk(Path("work/alice/artifacts")):
        print(entry.relative, entry.kind, entry.size)
    problems = files.remove_tree(Path("/tmp/course-grade-x/alice"))  # [] when all went
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: The deepest folder `walk` enters, and the most entries it lists (a submission's own files are
#: a few dozen, a few levels deep).
MAX_DEPTH = 64
MAX_ENTRIES = 100_000


class UnsafeFile(OSError):
    """A path the grader will not read: what it is, in words a report can show."""


def kind(mode: int) -> str:
    """What a file of this `st_mode` is, in words."""
    for test, name in [
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a regular file"),
    ]:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, limit: int) -> int:
    """A read-only file descriptor on `path` if it is a regular file of at most `limit` bytes,
    reached without following a link in its last component; else UnsafeFile saying what it is.

    O_NOFOLLOW refuses a link, O_NONBLOCK makes opening a FIFO return at once (then refused by
    fstat), and the checks are made on the opened file itself, so nothing can swap it between a
    check and the read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        # ELOOP: the last component is a link (O_NOFOLLOW)
        try:
            what = kind(os.lstat(path).st_mode)
        except OSError:
            what = "missing"
        raise UnsafeFile(f"{Path(path).name} is {what}: only regular files are read") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(
                f"{Path(path).name} is {kind(info.st_mode)}: only regular files are read"
            )
        if info.st_size > limit:
            raise UnsafeFile(
                f"{Path(path).name} is {info.st_size / 2**20:,.1f} MB, more than the "
                f"{limit / 2**20:g} MB read"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes reached without a link
    (`open_regular`); UnsafeFile otherwise. At most `limit` bytes are read, even from a file that
    grows meanwhile."""
    fd = open_regular(path, limit)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{Path(path).name} grew past {limit / 2**20:g} MB while being read")
    return data


def copy_regular(source: Path, target: Path, limit: int) -> int:
    """Copy `source` (a regular file, `open_regular`) into a new file `target`, with its access
    and modification times; the bytes copied."""
    fd = open_regular(source, limit)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        copied = 0
        with open(target, "xb") as out:
            while copied <= limit and (chunk := handle.read(min(2**20, limit + 1 - copied))):
                out.write(chunk)
                copied += len(chunk)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    return copied


@dataclass(frozen=True)
class Entry:
    """One entry of a walked tree: its path, its path under the top, what it is (`kind`), its
    size and blocks (from lstat: a link is never followed)."""

    path: Path
    relative: Path
    kind: str
    size: int
    blocks: int
    mtime_ns: int


class TreeTooLarge(Exception):
    """`walk` stopped at its depth or entry cap; the message says which."""


def walk(
    top: Path, *, max_depth: int | None = None, max_entries: int | None = None, strict: bool = False
) -> Iterator[Entry]:
    """Every entry under `top` (not `top` itself), folders before their contents, names sorted,
    without following links and without recursion (a stack: any depth is safe). It enters at most
    `max_depth` levels and yields at most `max_entries` (default: `MAX_DEPTH`, `MAX_ENTRIES`);
    past a cap it stops, raising TreeTooLarge when `strict`. A folder that cannot be listed is
    skipped."""
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    stack: list[tuple[Path, Path, int]] = [(Path(top), Path(), 0)]
    count = 0
    while stack:
        folder, relative, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        below = []
        for entry in reversed(entries):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            count += 1
            if count > max_entries:
                if strict:
                    raise TreeTooLarge(f"more than {max_entries:,} files and folders")
                return
            path, name = Path(entry.path), relative / entry.name
            what = kind(info.st_mode)
            yield Entry(path, name, what, info.st_size, info.st_blocks, info.st_mtime_ns)
            if stat.S_ISDIR(info.st_mode):
                if depth + 1 >= max_depth:
                    if strict:
                        raise TreeTooLarge(f"folders deeper than {max_depth} levels")
                    continue
                below.append((path, name, depth + 1))
        stack.extend(reversed(below))


def disk_bytes(top: Path) -> int:
    """The bytes the files and folders under `top` take on disk (links not followed, no cap on
    depth or count: for a watch of the whole tree)."""
    total = 0
    stack = [Path(top)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(Path(entry.path))
        except OSError:
            continue
    return total


def remove_tree(top: Path) -> list[str]:
    """Remove `top` and everything under it, at any depth, without following links; never raises.
    Returns what could not be removed (empty when everything went), for the grader to report.

    Each folder is made readable, writable and searchable by its owner (`_open_up`) before it is
    listed and emptied, so folders a submission made read-only or unreadable (0500, 0000) go too,
    as the grader's own user. Folders are emptied with a stack, not recursion (shutil.rmtree
    recurses, so a tree deeper than the recursion limit raises RecursionError, which its onerror
    does not catch)."""
    problems: list[str] = []
    top = Path(top)
    try:
        if not os.path.lexists(top):
            return []
        if not top.is_dir() or top.is_symlink():
            top.unlink()
            return []
        # (folder, listed): a folder is removed once its contents were
        stack: list[tuple[Path, bool]] = [(top, False)]
        while stack:
            folder, listed = stack.pop()
            if listed:
                _remove(os.rmdir, folder, problems)
                continue
            stack.append((folder, True))
            _open_up(folder)
            with _scandir(folder, problems) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), False))
                    else:
                        _remove(os.unlink, Path(entry.path), problems)
    except Exception as exc:  # noqa: BLE001 - a clean-up reports, it never stops the batch
        problems.append(f"{top}: {type(exc).__name__}: {exc}")
    return problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])


def _open_up(folder: Path) -> None:
    """Give the owner read, write and search permission on `folder` (a folder, not a link: checked
    right before; the submission's processes are gone by then), so its entries can be listed and
    unlinked. Quiet where the grader is not the owner: the removal then says what is left."""
    with contextlib.suppress(OSError):
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o700 != 0o700:
            os.chmod(folder, stat.S_IMODE(info.st_mode) | 0o700)


class _Listing:
    """os.scandir that gives nothing (and records why) when the folder cannot be listed."""

    def __init__(self, folder: Path, problems: list[str]) -> None:
        self.folder, self.problems, self.inner = folder, problems, None

    def __enter__(self):
        try:
            self.inner = os.scandir(self.folder)
            return list(self.inner)
        except OSError as exc:
            self.problems.append(f"{self.folder}: {exc.strerror or exc}")
        return []

    def __exit__(self, *exc_info) -> None:
        if self.inner is not None:
            self.inner.close()


def _scandir(folder: Path, problems: list[str]) -> _Listing:
    return _Listing(folder, problems)


def _remove(function, path: Path, problems: list[str]) -> None:
    try:
        function(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror or exc}")
