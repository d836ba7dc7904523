"""Temporary folders a crash may leave behind, named so that a later run can recognise and remove them.

A build writes its pack into a staging folder beside ``-o`` (``.{name}.evalpack-staging-{pid}-{random}``),
moves a pack it replaces aside as ``.{name}.old-{pid}-{random}`` for the moment of the swap, and DuckDB
spills into ``evalpack-spill-{pid}-{random}`` in the temporary folder, where ``evalpack score --dialect
sqlite`` and ``evalpack export`` write rotations as SQLite databases into ``evalpack-sqlite-{pid}-{random}``.
The process using such a folder holds an exclusive ``flock`` on the folder itself for as long as it uses
it: the lock is on the folder's inode, so it follows a rename, and the kernel drops it when the last
process holding it dies, however it dies. A folder of one of these shapes whose lock can be taken
therefore belongs to a dead run. The pid in the name guards the moment between a folder's creation and
its lock, and pid reuse: such a folder counts as dead when its lock is free and its pid is gone (or a
zombie), or when its lock is free and it is older than :data:`STALE_SECONDS`.

Where ``fcntl`` is missing (Windows) folders are still named this way, and none counts as dead.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from evalpack.core.scoring import process_alive

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

STAGING = "evalpack-staging-"
SPILL = "evalpack-spill-"
OLD = "old-"
_RANDOM = r"-[a-z0-9_]{8}"  # tempfile's names: 8 of [a-z0-9_]
#: a folder whose lock is free but whose pid is alive counts as dead only when this old (that pid was reused)
STALE_SECONDS = 600.0
# the lock of each folder this process uses: folder -> open descriptor of the folder. Process-wide on
# purpose: it mirrors the kernel's locks, which belong to the process.
_HELD: dict[str, int] = {}


def staging_pattern(name: str | None = None) -> re.Pattern[str]:
    """The names of staging folders (of the pack folder ``name``; of any, when None), and of the holdout
    answer keys written beside them; group 1 is the pid."""
    return re.compile(r"\." + (re.escape(name) if name else r".+") + r"\." + STAGING + r"(\d+)" + _RANDOM
                      + r"(?:\.holdout-key)?")


def old_pattern(name: str) -> re.Pattern[str]:
    """The names a replaced pack ``name`` has while it is swapped out; group 1 is the pid."""
    return re.compile(r"\." + re.escape(name) + r"\." + OLD + r"(\d+)" + _RANDOM)


SPILL_PATTERN = re.compile(SPILL + r"(\d+)" + _RANDOM)
SQLITE = "evalpack-sqlite-"  # a rotation's tables written as SQLite for scoring (evalpack.dialects.scoring)
SQLITE_PATTERN = re.compile(SQLITE + r"(\d+)" + _RANDOM)


def owned_dir(parent: str | Path, prefix: str) -> Path:
    """A new folder ``{prefix}{pid}-{random}`` in ``parent`` (mode 0700, as ``tempfile.mkdtemp`` makes it),
    locked by this process until :func:`release` or :func:`remove` (or the process's death)."""
    _forget_removed()
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    hold(path)
    return path


@contextlib.contextmanager
def sqlite_scratch() -> Iterator[Path]:
    """A private folder in the temporary folder for rotations written as SQLite databases (``evalpack-sqlite-…``),
    removed when the block ends; first the ones runs killed before they could remove theirs left behind."""
    temp = tempfile.gettempdir()
    sweep(temp, SQLITE_PATTERN)
    folder = owned_dir(temp, SQLITE)
    try:
        yield folder
    finally:
        remove(folder)


def hold(path: str | Path, key: str | Path | None = None) -> None:
    """Lock the existing folder ``path`` for this process (registered under ``key``, the name it will
    have, when given). Raises BlockingIOError when another process holds it."""
    if fcntl is None:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    _HELD[str(key or path)] = fd


def release(path: str | Path) -> None:
    """Drop this process's lock on a folder it holds (it may have been renamed since); no-op otherwise."""
    fd = _HELD.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def remove(path: str | Path) -> None:
    """Delete a folder this process holds, and drop its lock."""
    shutil.rmtree(path, ignore_errors=True)
    release(path)


def _forget_removed() -> None:
    """Close the locks of folders removed without :func:`remove` (by ``shutil.rmtree`` directly)."""
    for name, fd in list(_HELD.items()):
        try:
            gone = os.fstat(fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            release(name)


alive = process_alive  # the scorer's (it sweeps its own sandbox folders with it)


def dead(path: str | Path, pid: int) -> bool:
    """Whether the folder ``path`` (named with ``pid``) belongs to no live run: its lock is free, and its
    pid is gone or it is older than :data:`STALE_SECONDS`. Without ``fcntl``: never."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: a live run's
        return not alive(pid) or time.time() - os.fstat(fd).st_mtime > STALE_SECONDS
    finally:
        os.close(fd)  # and with it the lock, if we took it


def dead_dirs(parent: str | Path, pattern: re.Pattern[str]) -> list[Path]:
    """The folders directly in ``parent`` whose whole name matches ``pattern`` (group 1: the pid) and that
    are :func:`dead`; a missing or unreadable ``parent`` has none."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    found = []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and entry.is_dir(follow_symlinks=False) and dead(entry.path, int(match.group(1))):
            found.append(Path(entry.path))
    return found


def sweep(parent: str | Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the :func:`dead_dirs` of ``parent`` that match ``pattern``; return them. Never touches a live
    run's folder, nor anything named otherwise."""
    removed = dead_dirs(parent, pattern)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
