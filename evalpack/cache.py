"""A cache on disk for pure work that is slow to redo: the prepared near-miss mutants of a gold SQL, the difficulty
labels of a pack's derived queries, whether a gold SQL's result set is compared in order, and a question's
verification (its gold SQL's result and golden checks) and study outcomes on a rotation's files.

Entries are addressed by content: the SHA-256 of everything the work reads (its arguments, the
sqlglot version and the source of the modules that do it), so a changed input or a changed evalpack
never finds an old entry. The cache is an optimisation only: an entry that is missing, unreadable or
malformed is recomputed and rewritten, a cache that cannot be written is ignored, and a build
gives the same bytes with or without it.

Where: ``$EVALPACK_CACHE_DIR`` if set (``off`` or an empty value turns the cache off), else
``$XDG_CACHE_HOME/evalpack`` or ``~/.cache/evalpack``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
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


def _path(namespace: str, key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / namespace / key[:2] / f"{key}.json"


def load(namespace: str, key: str) -> object | None:
    """The JSON value stored at ``key``, or None (absent, unreadable, or the cache is off)."""
    path = _path(namespace, key)
    if path is None:
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def store(namespace: str, key: str, value: object) -> None:
    """Write ``value`` (JSON) at ``key`` atomically; a cache that cannot be written is ignored."""
    path = _path(namespace, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(json.dumps(value, separators=(",", ":")).encode())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        pass
