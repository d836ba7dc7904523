"""A cache on disk for pure work that is slow to redo: the prepared near-miss mutants of a gold SQL, the difficulty
labels of a pack's derived queries, whether a gold SQL's result set is compared in order, and a question's
verification (its gold SQL's result and golden checks) and study outcomes on a rotation's files.

Entries are addressed by content: the SHA-256 of everything the work reads (its arguments, the
sqlglot version and the source of the modules that do it), so a changed input or a changed evalpack
never finds an old entry. The cache is an optimisation only: an entry that is missing, unreadable or
malformed is recomputed and rewritten, a cache that cannot be written is ignored, and a build
gives the same bytes with or without it.

Where: ``$EVALPACK_CACHE_DIR`` if set (``off`` or an empty value turns the cache off), else
``$XDG_CACHE_HOME/evalpack`` or ``~/.cache/evalpack``. The entries are rows of one SQLite database there,
``entries.sqlite3`` (write-ahead log, so concurrent builds read and write it safely): a build writes about a
thousand entries at 1x, which as a file each cost 0.15-0.3 s of a 3.9 s first build, and as rows 0.1 s. Only its
owner can read it (mode 0600, as SQLite's journal files then are too): it holds answers, the holdout's among them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

CACHE_ENV = "EVALPACK_CACHE_DIR"
FORMAT = 1  # bump when what an entry holds changes shape


def cache_dir() -> Path | None:
    """The cache's folder, or None when the environment turns it off."""
    return _cache_dir(os.environ.get(CACHE_ENV), os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _cache_dir(configured: str | None, xdg_cache_home: str | None, home: str | None) -> Path | None:
    # asked for every entry a build reads (about a thousand at 1x): worked out once per environment
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "false", "no") else Path(configured)
    base = xdg_cache_home or str(Path(home or Path.home()) / ".cache")
    return Path(base) / "evalpack"


@functools.lru_cache(maxsize=8)
def code_fingerprint(modules: tuple[str, ...]) -> str:
    """SHA-256 over the source files of ``modules`` (names of evalpack modules) and sqlglot's version."""
    import importlib

    import sqlglot

    digest = hashlib.sha256(f"format {FORMAT}; sqlglot {sqlglot.__version__}".encode())
    for name in modules:
        source = Path(importlib.import_module(name).__file__)
        digest.update(name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()


def entry_key(namespace: str, fingerprint: str, parts: Iterable[str | None]) -> str:
    """The address of one entry: SHA-256 over the namespace, the code fingerprint and the parts."""
    return hashlib.sha256(json.dumps([namespace, fingerprint, *parts]).encode()).hexdigest()


T = TypeVar("T")


def remembered(namespace: str, modules: tuple[str, ...], parts: Iterable[str | None], compute: Callable[[], T],
               decode: Callable[[object], T | None] = lambda value: value,
               encode: Callable[[T], object] = lambda value: value) -> T:
    """``compute()`` through one entry: the one at :func:`entry_key` of ``namespace``, the :func:`code_fingerprint`
    of ``modules`` and ``parts``, given back by ``decode`` (JSON -> the value; None, or TypeError, ValueError,
    KeyError or IndexError, for an entry it cannot read, which is recomputed and replaced), else computed and
    stored as ``encode`` makes it. With the cache off, ``compute()`` alone."""
    key = entry_key(namespace, code_fingerprint(modules), parts) if cache_dir() else None
    if key is not None:
        stored = load(namespace, key)
        if stored is not None:
            try:
                value = decode(stored)
            except (TypeError, ValueError, KeyError, IndexError):
                value = None
            if value is not None:
                return value
    value = compute()
    if key is not None:
        store(namespace, key, encode(value))
    return value


DATABASE = "entries.sqlite3"
_OPEN: dict[Path, sqlite3.Connection | None] = {}  # this process's connection to each folder's database (None: unusable)
_LOCK = threading.Lock()  # one statement at a time on a connection: verification's threads share it


def _close_connections() -> None:
    """Close this process's connections; each is opened again when next needed. Called before every fork: a SQLite
    connection must not cross one (the child would share its locks and write-ahead state)."""
    with _LOCK:
        for con in _OPEN.values():
            if con is not None:
                con.close()
        _OPEN.clear()


os.register_at_fork(before=_close_connections)


def _database(folder: Path) -> sqlite3.Connection | None:
    """This process's connection to the database in ``folder`` (call with ``_LOCK`` held), opened at first use; None
    when the folder cannot hold one (the cache is then ignored)."""
    if folder not in _OPEN:
        _OPEN[folder] = _opened(folder / DATABASE)
    return _OPEN[folder]


def _opened(path: Path, replace_damaged: bool = True) -> sqlite3.Connection | None:
    con = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # created private; an empty file is an empty database
        con = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")  # a cache: an entry lost to a power cut is only worked out again
        con.execute("CREATE TABLE IF NOT EXISTS entries (namespace TEXT NOT NULL, key TEXT NOT NULL, "
                    "value TEXT NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID")
        return con
    except OSError:
        return None
    except sqlite3.Error as error:
        if con is not None:
            con.close()
        if replace_damaged and _damaged(error) and _discard(path):
            return _opened(path, replace_damaged=False)
        return None


def _damaged(error: sqlite3.Error) -> bool:
    return getattr(error, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def _discard(path: Path) -> bool:
    """Delete the damaged database at ``path`` (it holds nothing that cannot be worked out again); whether it went."""
    try:
        for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            part.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _execute(statement: str, parameters: tuple) -> list | None:
    """The rows of one statement on the cache's database, or None when the cache is off or cannot be used. A database
    found damaged (a file there that is not one, or a corrupted one) is replaced by an empty one, once."""
    folder = cache_dir()
    if folder is None:
        return None
    with _LOCK:
        for attempt in range(2):
            con = _database(folder)
            if con is None:
                return None
            try:
                return con.execute(statement, parameters).fetchall()
            except sqlite3.Error as error:
                if attempt or not _damaged(error):
                    return None
                con.close()
                _OPEN[folder] = _opened(folder / DATABASE, replace_damaged=False) if _discard(folder / DATABASE) else None
    return None


def load(namespace: str, key: str) -> object | None:
    """The JSON value stored at ``key``, or None (absent, unreadable, or the cache is off)."""
    rows = _execute("SELECT value FROM entries WHERE namespace = ? AND key = ?", (namespace, key))
    try:
        return json.loads(rows[0][0]) if rows else None
    except (ValueError, TypeError):
        return None


def store(namespace: str, key: str, value: object) -> None:
    """Write ``value`` (JSON) at ``key``, replacing what was there, in one transaction; a cache that cannot be written
    is ignored."""
    if cache_dir() is not None:
        _execute("INSERT OR REPLACE INTO entries (namespace, key, value) VALUES (?, ?, ?)",
                 (namespace, key, json.dumps(value, separators=(",", ":"))))
