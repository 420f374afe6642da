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
import itertools
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
    size, blocks, times and inode (from lstat: a link is never followed)."""

    path: Path
    relative: Path
    kind: str
    size: int
    blocks: int
    mtime_ns: int
    inode: int = 0
    ctime_ns: int = 0


class TreeTooLarge(Exception):
    """`walk` stopped at its depth or entry cap; the message says which."""


def walk(  # noqa: PLR0913 - the tree, its caps, and where it must be reached from
    top: Path,
    *,
    max_depth: int | None = None,
    max_entries: int | None = None,
    strict: bool = False,
    within: Path | None = None,
) -> Iterator[Entry]:
    """Every entry under `top` (not `top` itself), folders before their contents, names sorted,
    without following links and without recursion (a stack: any depth is safe). It enters at most
    `max_depth` levels and yields at most `max_entries` (default: `MAX_DEPTH`, `MAX_ENTRIES`);
    past a cap it stops, raising TreeTooLarge when `strict`, and it reads no more of a folder than
    the cap allows (a folder past it is sorted by the names read). A folder that cannot be listed
    is skipped. within: a folder above `top`, from which `top` is reached one name at a time
    without following a link; else `top` is opened by its path, as the caller names it (an
    instructor's link to the submissions is followed).

    Each folder is listed through a descriptor (`O_NOFOLLOW`) checked to be the folder that was
    seen in its parent's listing (device and inode): a folder swapped for a link, or a parent
    swapped, between the two is skipped, never listed where the link leads."""
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    try:
        fd: int | None = _open_top(Path(top), within)
    except OSError:
        return
    stack: list[tuple[Path, Path, int, tuple[int, int]]] = [(Path(top), Path(), 0, _identity(fd))]
    count = 0
    while stack:
        folder, relative, depth, expected = stack.pop()
        if fd is None:
            fd = _open_same(folder, expected)
            if fd is None:
                continue
        try:
            try:
                with os.scandir(fd) as listing:
                    # no more than the cap allows is read: a folder of millions is not listed whole
                    names = [e.name for e in itertools.islice(listing, max_entries - count + 1)]
            except OSError:
                continue
            names.sort()
            below = []
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                count += 1
                if count > max_entries:
                    if strict:
                        raise TreeTooLarge(f"more than {max_entries:,} files and folders")
                    return
                path, inside = folder / name, relative / name
                what = kind(info.st_mode)
                yield Entry(
                    path,
                    inside,
                    what,
                    info.st_size,
                    info.st_blocks,
                    info.st_mtime_ns,
                    info.st_ino,
                    info.st_ctime_ns,
                )
                if stat.S_ISDIR(info.st_mode):
                    if depth + 1 >= max_depth:
                        if strict:
                            raise TreeTooLarge(f"folders deeper than {max_depth} levels")
                        continue
                    below.append((path, inside, depth + 1, (info.st_dev, info.st_ino)))
            stack.extend(reversed(below))
        finally:
            os.close(fd)
            fd = None


def _open_top(top: Path, within: Path | None) -> int:
    """A descriptor on the folder `top`: reached from `within` one name at a time without
    following a link when given, else by its path."""
    if within is None:
        return os.open(top, _DIR_FLAGS & ~os.O_NOFOLLOW)
    fd = os.open(within, _DIR_FLAGS)
    try:
        for name in top.relative_to(within).parts:
            inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_same(folder: Path, expected: tuple[int, int]) -> int | None:
    """A descriptor on `folder` if it is still the folder of that (device, inode), else None."""
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError:
        return None
    if _identity(fd) != expected:
        os.close(fd)
        return None
    return fd


class LostWay(OSError):
    """A folder's parent changed while `_Tree` was inside it (the tree was moved meanwhile)."""


class _Tree:
    """A tree walked through directory descriptors, never full paths: each folder is opened
    relative to its parent (`openat`) and left through its `..`, checked to be the parent it came
    from, so a tree of any depth and any path length (past PATH_MAX, 4,096 characters) is reached
    whole with one folder open at a time, and without recursion. Links are never followed.

    `visit(fd, name, info)` is called for each entry of each folder (`fd`: the folder's
    descriptor, `info`: its lstat); `leave(fd, name)` after a folder `name` of the folder `fd`
    was walked; `enter(fd, name, info)` before a folder is opened, `failed(where, exc)` when one
    cannot be opened or listed. `stop()` ends the walk early."""

    def __init__(self, top: Path) -> None:
        self.top, self.stopped = Path(top), False

    def enter(self, fd: int, name: str, info: os.stat_result) -> None:
        """Called before the folder `name` of `fd` is opened."""

    def visit(self, fd: int, name: str, info: os.stat_result) -> None:
        """Called for each entry."""

    def leave(self, fd: int, name: str) -> None:
        """Called once the folder `name` of `fd` was walked."""

    def failed(self, where: str, exc: OSError) -> None:
        """Called for a folder that cannot be opened or listed."""

    def stop(self) -> None:
        self.stopped = True

    def _listing(self, fd: int, where: str) -> list[str]:
        """The names of the folders in `fd`, after `visit` saw each entry."""
        folders = []
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    try:
                        info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    self.visit(fd, entry.name, info)
                    if self.stopped:
                        return []
                    if stat.S_ISDIR(info.st_mode):
                        folders.append(entry.name)
        except OSError as exc:
            self.failed(where, exc)
        return folders

    def run(self) -> None:
        """Walk the tree under `top` (raises OSError when `top` cannot be opened, LostWay when
        the tree was moved during the walk)."""
        fd = os.open(self.top, _DIR_FLAGS)
        # each level: (its identity, its name, its folders still to walk)
        levels = [(_identity(fd), "", self._listing(fd, str(self.top)))]
        try:
            while levels and not self.stopped:
                identity, name, pending = levels[-1]
                if pending:
                    child = pending.pop()
                    where = f"{self.top}/.../{child}" if len(levels) > 1 else f"{self.top}/{child}"
                    try:
                        self.enter(fd, child, os.stat(child, dir_fd=fd, follow_symlinks=False))
                        inner = os.open(child, _DIR_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        continue  # gone meanwhile
                    except OSError as exc:
                        self.failed(where, exc)
                        continue
                    os.close(fd)
                    fd = inner
                    levels.append((_identity(fd), child, self._listing(fd, where)))
                    continue
                levels.pop()
                if not levels:
                    break
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                if _identity(fd) != levels[-1][0]:
                    raise LostWay(f"{self.top}: a folder was moved during the walk")
                self.leave(fd, name)
        finally:
            os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


@dataclass
class Usage:
    """What a tree takes: its bytes on disk, its entries (files, folders, links), and the folders
    in it that could not be listed (whose contents are unknown: a watch counts that as over)."""

    bytes: int = 0
    entries: int = 0
    unlisted: int = 0


class _Measure(_Tree):
    def __init__(self, top: Path, max_entries: int | None) -> None:
        super().__init__(top)
        self.usage, self.max_entries = Usage(), max_entries

    def visit(self, fd: int, name: str, info: os.stat_result) -> None:
        self.usage.bytes += info.st_blocks * 512
        self.usage.entries += 1
        if self.max_entries is not None and self.usage.entries > self.max_entries:
            self.stop()

    def failed(self, where: str, exc: OSError) -> None:
        self.usage.unlisted += 1


def usage(top: Path, max_entries: int | None = None, tries: int = 3) -> Usage:
    """The bytes and entries under `top` (not `top` itself) at any depth and path length, links
    not followed; the count stops just past `max_entries`. A folder that cannot be opened or
    listed is counted in `unlisted`; a walk that loses its way (a folder moved while it was
    inside) is tried again, `tries` times in all, then counted as one unlisted folder.

    Example:

        used = files.usage(Path("work/alice"), max_entries=20_000)
        over = used.bytes > 2**30 or used.entries > 20_000 or used.unlisted
    """
    for _ in range(tries):
        measure = _Measure(top, max_entries)
        try:
            measure.run()
        except LostWay:
            continue
        except OSError:
            measure.usage.unlisted += 1
        return measure.usage
    return Usage(unlisted=1)


def disk_bytes(top: Path) -> int:
    """The bytes the files and folders under `top` take on disk (links not followed, no cap on
    depth, path length or count: `usage`)."""
    return usage(top).bytes


class _Remove(_Tree):
    """Empties a tree: each folder opened up to its owner (`_open_up`) before it is entered,
    files unlinked and folders removed relative to their parent's descriptor."""

    def __init__(self, top: Path, problems: list[str]) -> None:
        super().__init__(top)
        self.problems = problems

    def enter(self, fd: int, name: str, info: os.stat_result) -> None:
        _open_up(fd, name, info)

    def visit(self, fd: int, name: str, info: os.stat_result) -> None:
        if not stat.S_ISDIR(info.st_mode):
            _remove(os.unlink, fd, name, self.problems)

    def leave(self, fd: int, name: str) -> None:
        _remove(os.rmdir, fd, name, self.problems)

    def failed(self, where: str, exc: OSError) -> None:
        self.problems.append(f"{_short(where)}: {exc.strerror or exc}")


def remove_tree(top: Path) -> list[str]:
    """Remove `top` and everything under it, at any depth and path length, without following
    links; never raises. Returns what could not be removed (empty when everything went), for the
    grader to report.

    Each folder is made readable, writable and searchable by its owner (`_open_up`) before it is
    listed and emptied, so folders a submission made read-only or unreadable (0500, 0000) go too,
    as the grader's own user. The tree is walked through directory descriptors (`_Tree`), not
    full paths (a path past PATH_MAX cannot be opened) nor recursion (shutil.rmtree recurses, so
    a tree deeper than the recursion limit raises RecursionError)."""
    problems: list[str] = []
    top = Path(top)
    try:
        if not os.path.lexists(top):
            return []
        if not top.is_dir() or top.is_symlink():
            top.unlink()
            return []
        with contextlib.suppress(OSError):
            _open_up(None, str(top), os.lstat(top))
        _Remove(top, problems).run()
        _remove(os.rmdir, None, str(top), problems)
    except Exception as exc:  # noqa: BLE001 - a clean-up reports, it never stops the batch
        problems.append(f"{_short(str(top))}: {type(exc).__name__}: {exc}")
    return problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])


def _short(text: str, limit: int = 300) -> str:
    """`text`, its middle cut past `limit` characters (a name can be thousands long)."""
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _open_up(fd: int | None, name: str, info: os.stat_result) -> None:
    """Give the owner read, write and search permission on the folder `name` of `fd` (a folder,
    not a link: `info` is its lstat, taken right before; the submission's processes are gone by
    then), so its entries can be listed and unlinked. Quiet where the grader is not the owner:
    the removal then says what is left."""
    if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o700 != 0o700:
        with contextlib.suppress(OSError):
            os.chmod(name, stat.S_IMODE(info.st_mode) | 0o700, dir_fd=fd)


def _remove(function, fd: int | None, name: str, problems: list[str]) -> None:
    try:
        function(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        problems.append(f"{_short(name)}: {exc.strerror or exc}")
