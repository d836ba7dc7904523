"""SQLite: a rotation written as one SQLite file, typed as a SQLite user expects (:func:`write_sqlite`), and the
sandbox untrusted SQL runs in there (:func:`open_sqlite_sandbox`, in a worker process: :class:`SqliteWorker`).

SQLite sandbox (one per rotation, in a worker process like the DuckDB one, under the same operating-system
limits: no file writes, few descriptors, an address-space cap, death with the parent). The rotation's database
is the pack's own ``exports/sqlite`` file when the pack carries one, else written from the rotation's Parquet
tables into a private temporary folder (:func:`evalpack.dialects.sqlite.write_sqlite`) that is removed afterwards. It is
opened by a read-only, immutable URI (``file:...?mode=ro&immutable=1``: SQLite neither writes nor locks it), with
``query_only``, memory-held temporary storage, a heap limit of the working memory (set in the worker process
only: SQLite's heap limit is process-wide), no attached databases
(``SQLITE_LIMIT_ATTACHED`` 0), extension loading off and an authorizer that allows reading only: SELECT, reading
columns (``sqlite_schema`` included), recursive CTEs and functions other than those that load code or touch
files (:data:`REFUSED_FUNCTIONS`); ATTACH/DETACH (VACUUM INTO attaches), every pragma (table-valued ones too),
transactions and anything that writes are refused. A candidate is one statement starting with SELECT, WITH or
VALUES; a progress handler stops it at the time limit, and at most the scorer's row and byte caps are fetched.
Writes fail by construction, whatever the statement: the file is opened read-only, ``query_only`` is on, and the
authorizer refuses every write (a data-changing ``WITH ... DELETE``/``UPDATE``/``INSERT`` included); each of the
three alone refuses it. The schema, the changes counter, the file's size and modification time (checked by the
worker) and a digest of the file's bytes (checked by the scorer's own process) must be the same after a
rotation's candidates as before, or the run stops.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evalpack.core import debris
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import (
    MAX_FETCH_ROWS,
    MAX_RESULT_BYTES,
    MAX_SQL_CHARS,
    InputError,
    Limits,
    Outcome,
    SandboxWorker,
    fetch_capped,
    first_line,
    pack_source,
    query_outcome,
    quote_ident,
    sql_refused,
    worker_main,
)
from evalpack.dialects.common import (
    Comments,
    Keys,
    comment_text,
    comments_of,
    file_into_place,
    keys_of,
    parquet_batches,
)

SQLITE_WORKER_FLAG = "--sqlite-worker"
MAX_VALUE_BYTES = 64 * 2**20  # the longest text or blob a SQLite expression may build (SQLITE_LIMIT_LENGTH)
PROGRESS_STEPS = 1000  # SQLite virtual-machine steps between two looks at the clock
QUERY_KEYWORDS = ("select", "with", "values")
DIGEST_CHUNK = 4 * 2**20  # bytes read at a time for a database file's digest
# functions that load code or read/write files (readfile/writefile/edit come with the sqlite3 shell's fileio,
# not the library, but a build that has them must not run them either)
REFUSED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "lsdir",
                               "sqlar_compress", "sqlar_uncompress", "zipfile", "zipfile_cds"})
SCHEMA_TABLES = ("sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema")
ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                             sqlite3.SQLITE_RECURSIVE})  # reading, and nothing else
ACTION_NAMES = {getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ") for name in (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW",
    "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE",
    "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "PRAGMA", "READ", "SELECT",
    "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE",
    "FUNCTION", "SAVEPOINT", "RECURSIVE")}
_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$)|\()*", re.S)
_WORD = re.compile(r"[A-Za-z_]+")



def sqlite_type(duckdb_type: str) -> str:
    """The declared SQLite type of a DuckDB column type: INTEGER (integers and booleans as 0/1), REAL (decimals,
    doubles) or TEXT (text, ISO dates and timestamps)."""
    t = duckdb_type.upper()
    if t in ("BOOLEAN", "BOOL") or t.endswith("INT") or t in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT",
                                                               "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT"):
        return "INTEGER"
    if t.startswith(("DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL")):
        return "REAL"
    return "TEXT"


def sqlite_value(value: Any) -> Any:
    """One cell as SQLite stores it: booleans 0/1, decimals as floats, dates 'YYYY-MM-DD', timestamps
    'YYYY-MM-DD HH:MM:SS' (with microseconds only when there are any), NULL as NULL."""
    if value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def sqlite_ddl(table: str, columns: Mapping[str, str], keys: Keys = Keys(), comments: Comments = Comments()) -> str:
    """CREATE TABLE for one table: SQLite types, the primary key and the foreign keys it declares, and what the pack's
    data dictionary says of the table and each column as ``--`` comments (SQLite keeps a CREATE TABLE's text as
    written in ``sqlite_schema.sql``, so that ``.schema`` shows them). A comment is one line whatever it was given
    (:func:`evalpack.dialects.common.comment_text`): a line break in it would end the comment and make its words
    SQL. Without comments the statement is as it was before the dictionary."""
    pk = keys.primary_of(table)
    lines = [(f"{quote_ident(c)} {sqlite_type(t)}{' NOT NULL PRIMARY KEY' if c == pk else ''}",
              _comment(comments.column(table, c), t)) for c, t in columns.items()]
    lines += [(f"FOREIGN KEY ({quote_ident(fk.child_column)}) REFERENCES {quote_ident(fk.parent_table)} "
               f"({quote_ident(fk.parent_column)})", "") for fk in keys.foreign_of(table)]
    body = [f"  {sql}{',' if i < len(lines) - 1 else ''}{f' -- {note}' if note else ''}"
            for i, (sql, note) in enumerate(lines)]
    about = _comment(comments.table(table))
    return f"CREATE TABLE {quote_ident(table)} ({f' -- {about}' if about else ''}\n" + "\n".join(body) + "\n)"


def _comment(text: str | None, duckdb_type: str = "") -> str:
    """A comment as one line ('' for none), a boolean column's saying how SQLite stores it (1 or 0)."""
    line = comment_text(text or "")
    if line and duckdb_type.upper() in ("BOOLEAN", "BOOL"):
        return f"{line} (stored as 1 for true, 0 for false)"
    return line


def load_sqlite(con: sqlite3.Connection, tables_dir: Path, columns: Mapping[str, Mapping[str, str]],
                keys: Keys = Keys(), comments: Comments = Comments()) -> None:
    """Create and fill, in ``con``, one table per entry of ``columns`` from ``tables_dir/<table>.parquet``
    (rows in file order, one transaction), and index each foreign key column; ``comments``: the dictionary's, in
    each CREATE TABLE (:func:`sqlite_ddl`)."""
    with con:
        for table, cols in columns.items():
            con.execute(sqlite_ddl(table, cols, keys, comments))
            names = list(cols)
            insert = (f"INSERT INTO {quote_ident(table)} ({', '.join(map(quote_ident, names))}) "
                      f"VALUES ({', '.join('?' * len(names))})")
            for batch in parquet_batches(Path(tables_dir) / f"{table}.parquet", names):
                values = [[sqlite_value(v) for v in batch.column(name).to_pylist()] for name in names]
                con.executemany(insert, zip(*values, strict=True))
        # a join or NOT EXISTS on a key would scan one table per row of the other (TPC-H's Q21 on an import: 80 s)
        indexed = [(fk.child_table, fk.child_column) for fk in keys.foreign] + [
            side for link in keys.linked for side in ((link.child_table, link.child_column),
                                                      (link.parent_table, link.parent_column))
            if side not in keys.primary]
        for table, column in dict.fromkeys(indexed):
            if column in columns.get(table, ()):
                con.execute(f"CREATE INDEX {quote_ident(f'{table}_{column}')} ON {quote_ident(table)} "
                            f"({quote_ident(column)})")


def write_sqlite(tables_dir: Path, columns: dict[str, dict[str, str]], path: Path, *, keys: Keys = Keys(),
                 comments: Comments = Comments()) -> None:
    """One SQLite file at ``path`` holding a rotation's tables (:func:`load_sqlite`, the data dictionary's
    ``comments`` in its schema), written beside it and renamed into place only when complete
    (:func:`file_into_place`). The same input gives the same bytes with the same SQLite version (the file's header
    records the version that wrote it)."""
    with file_into_place(path) as name:  # SQLite takes an empty file for an empty database
        con = sqlite3.connect(name)
        try:
            con.execute("PRAGMA page_size=4096")
            con.execute("PRAGMA journal_mode=OFF")
            load_sqlite(con, tables_dir, columns, keys, comments)
        finally:
            con.close()


# --------------------------------------------------------------------------- the SQLite sandbox


def first_keyword(sql: str) -> str:
    """The statement's first word, lower case, after whitespace, comments and opening parentheses ('' if none)."""
    match = _WORD.match(sql, _LEADING.match(sql).end())
    return match.group().lower() if match else ""


class _Guard:
    """The authorizer of a sandbox connection: allows reading, refuses the rest, remembers the first thing it
    refused."""

    def __init__(self) -> None:
        self.refused: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, database: str | None,
                 trigger: str | None) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in REFUSED_FUNCTIONS:
            what = f"the function {arg2}() (it loads code or touches files)"
        elif action in ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        elif action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in SCHEMA_TABLES:
            # SQLite asks this when a table-valued pragma function (pragma_database_list, ...) is first used
            what = "a table-valued pragma function (or a change to the schema)"
        elif action == sqlite3.SQLITE_PRAGMA:
            what = f"PRAGMA {arg1}" + ("" if arg2 is None else f" = {arg2}")
        else:
            what = ACTION_NAMES.get(action, f"action {action}") + (f" {arg1}" if arg1 else "")
        self.refused = self.refused or what
        return sqlite3.SQLITE_DENY


def sqlite_uri(path: Path) -> str:
    """The read-only, immutable URI of a database file (SQLite neither writes, locks nor journals it)."""
    return f"file:{quote(str(Path(path).resolve()))}?mode=ro&immutable=1"


def open_sqlite_sandbox(path: Path, limits: Limits | None = None, *, cap_heap: bool = False) -> sqlite3.Connection:
    """A locked-down read-only connection to the SQLite database ``path`` (see the module's docstring).

    ``cap_heap``: cap SQLite's heap at :func:`heap_limit_mb`. That cap is process-wide and the pragma can only lower
    it, so only a worker process of its own asks for it (a caller's process would keep it for every later
    connection: a MemoryError in an unrelated test showed it). The progress handler is installed per query by
    :func:`run_sqlite`."""
    limits = limits or Limits()
    con = sqlite3.connect(sqlite_uri(path), uri=True, isolation_level=None, check_same_thread=False)
    try:
        with contextlib.suppress(AttributeError):  # a Python built without extension loading has no switch
            con.enable_load_extension(False)
        for pragma in ("query_only = ON", "trusted_schema = OFF", "temp_store = MEMORY", "mmap_size = 0"):
            con.execute(f"PRAGMA {pragma}")
        if cap_heap:
            con.execute(f"PRAGMA hard_heap_limit = {heap_limit_mb(limits) * 2**20}")
        con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        con.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 4 * MAX_SQL_CHARS)
        con.setlimit(sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)
        if con.execute("PRAGMA query_only").fetchone() != (1,) or con.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED) != 0:
            raise RuntimeError("the SQLite sandbox did not lock; refusing to run untrusted SQL")
        con.set_authorizer(_Guard())
    except BaseException:
        con.close()
        raise
    return con


def heap_limit_mb(limits: Limits) -> int:
    """The SQLite sandbox's heap limit in MiB: the working memory of ``limits``, at least 64."""
    return max(64, int(limits.memory_mb))


def _guard_of(con: sqlite3.Connection) -> _Guard:
    guard = _Guard()
    con.set_authorizer(guard)
    return guard


def run_sqlite(con: sqlite3.Connection, sql: str, timeout: float, max_rows: int = MAX_FETCH_ROWS,
               max_bytes: int = MAX_RESULT_BYTES, *, memory_mb: int | None = None) -> Outcome:
    """Run one untrusted query on a sandbox connection, as :func:`evalpack.core.scoring.run_query` does on DuckDB:
    one statement starting with SELECT, WITH or VALUES, stopped after ``timeout`` seconds by the progress
    handler, at most ``max_rows`` + 1 rows and about ``max_bytes`` of text fetched. ``memory_mb``: the heap limit
    the connection was opened with, which an out-of-memory error names."""
    started = time.perf_counter()
    refused = sql_refused(sql)
    if refused:
        return Outcome(None, refused, 0.0)
    keyword = first_keyword(sql)
    if keyword not in QUERY_KEYWORDS:
        return Outcome(None, f"rejected: only a query (SELECT/WITH/VALUES) may run, not {keyword.upper() or 'nothing'}",
                       time.perf_counter() - started)
    guard = _guard_of(con)
    deadline = time.monotonic() + timeout
    fired = []

    def clock() -> int:
        if time.monotonic() > deadline:
            fired.append(True)
            return 1
        return 0

    con.set_progress_handler(clock, PROGRESS_STEPS)
    rows, error = None, None
    cursor = con.cursor()
    try:
        cursor.execute(sql)
        rows, error = fetch_capped(cursor.fetchmany, max_rows, max_bytes)
    except sqlite3.ProgrammingError as exc:
        one = "one statement" in str(exc)
        error = "rejected: expected exactly one statement" if one else first_line(exc)
    except sqlite3.Error as exc:
        error = f"rejected: {guard.refused} is not allowed" if guard.refused else first_line(exc)
    except MemoryError:  # SQLite's heap limit (the working memory) was reached
        limit = "" if memory_mb is None else f" of {memory_mb} MiB"
        error = f"out of memory: the query needs more than its working memory{limit}"
    except Exception as exc:  # noqa: BLE001 - whatever a value does on its way out is this query's error
        error = f"cannot read the result: {type(exc).__name__}: {first_line(exc)}"
    finally:
        con.set_progress_handler(None, PROGRESS_STEPS)
        with contextlib.suppress(sqlite3.Error):
            cursor.close()
    return query_outcome(rows, error, time.perf_counter() - started, timeout, bool(fired), max_rows)


def sqlite_state(con: sqlite3.Connection, path: Path) -> tuple:
    """Everything a statement could have changed: the schema (temporary objects too), the connection's
    changes counter and the database file's size and modification time."""
    schema = tuple(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema UNION ALL "
                               "SELECT type, name, tbl_name, sql FROM sqlite_temp_schema ORDER BY 1, 2, 3").fetchall())
    stat = Path(path).stat()
    return schema, con.total_changes, stat.st_size, stat.st_mtime_ns


def open_sqlite_worker(setup: dict, limits: Limits, on_connected: Callable[[], Any] | None = None
                       ) -> tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]:
    """The SQLite sandbox of a worker process (:func:`evalpack.core.scoring.worker_main`'s ``opener``): how to run a
    query on it (:func:`run_sqlite`) and its state (:func:`sqlite_state`)."""
    database = Path(setup["database"])
    con = open_sqlite_sandbox(database, limits, cap_heap=True)
    return (lambda *query: run_sqlite(con, *query, memory_mb=heap_limit_mb(limits))), \
        (lambda: sqlite_state(con, database)), {}


def file_digest(path: Path) -> tuple[int, str]:
    """The size and a BLAKE2b digest of every byte of the file at ``path``: what a SQLite database holds (its
    schema, every table's rows, its free pages), whatever its modification time says."""
    digest = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as stream:
        while chunk := stream.read(DIGEST_CHUNK):
            digest.update(chunk)
    return Path(path).stat().st_size, digest.hexdigest()


class SqliteWorker(SandboxWorker):
    """One rotation's SQLite sandbox in a child process (:func:`open_sqlite_worker`); :meth:`run` is
    :class:`~evalpack.core.scoring.SandboxWorker`'s (the wall clock enforced by killing the child). The database is
    checked unchanged at the end twice: by the child (:func:`sqlite_state`: schema, changes, size and modification
    time) and here, in this process, by the digest of the file's bytes taken before the first child started
    (:func:`file_digest`): a change to a table's rows that kept the file's size and time, made by anything at all,
    is noticed without trusting what the child reports. The child's working folder is ``folder``."""

    def __init__(self, database: Path, folder: Path, limits: Limits) -> None:
        super().__init__(folder, limits)
        self.database = Path(database).resolve()
        self.digest: tuple[int, str] | None = None

    def open(self) -> None:
        if self.digest is None:
            try:
                self.digest = file_digest(self.database)
            except OSError as exc:
                raise InputError(f"{self.database}: cannot read the rotation's SQLite database: "
                                 f"{exc.strerror or exc}") from None
        super().open()

    def close(self) -> None:
        """End the child; RuntimeError when the database changed while candidates ran (the child's check or the
        file's digest)."""
        before, self.digest = self.digest, None
        super().close()
        if before is None:
            return
        try:
            changed = file_digest(self.database) != before
        except OSError:  # gone or unreadable: not the database the candidates were scored on
            changed = True
        if changed:
            raise RuntimeError(f"{self.database}: the SQLite sandbox database changed while candidates ran; scores "
                               "from this run cannot be trusted")

    def command(self) -> list[str]:
        # -I: no environment variables, no user site-packages, and the working folder is not on sys.path
        return [sys.executable, "-I", "-m", "evalpack.dialects.sqlite", SQLITE_WORKER_FLAG, str(os.getpid())]

    def setup(self) -> dict[str, Any]:
        return {"database": str(self.database), "timeout": self.limits.timeout, "memory_mb": self.limits.memory_mb,
                "threads": self.limits.threads}


# --------------------------------------------------------------------------- the databases


def pack_sqlite_file(pack: Path, rotation: str) -> Path | None:
    """The pack's own SQLite database of ``rotation`` (``exports/sqlite/<rotation>.sqlite``), if it carries one."""

    path = PackLayout(Path(pack)).export("sqlite") / f"{rotation}.sqlite"
    return path if path.is_file() and not path.is_symlink() else None


def write_rotation_sqlite(pack: Path, rotation: str, tables_dir: Path, folder: Path) -> Path:
    """The rotation's tables as a SQLite file in ``folder``, with the keys the pack declares and its data dictionary
    in the schema (:func:`evalpack.dialects.sqlite.write_sqlite`, as ``evalpack export --format sqlite`` writes it)."""

    layout = PackLayout(pack)
    manifest = layout.read_manifest()
    columns = {table: dict(info["columns"]) for table, info in (manifest.get("tables") or {}).items()}
    target = Path(folder) / f"{rotation}.sqlite"
    write_sqlite(tables_dir, columns, target, keys=keys_of(manifest), comments=comments_of(layout.read_dictionary()))
    return target


@contextlib.contextmanager
def sqlite_sandboxes(pack: Path) -> Iterator[Callable[[str, Limits], SqliteWorker]]:
    """``score_pack``'s ``sandbox`` for SQLite: per rotation a :class:`SqliteWorker` over the pack's SQLite file,
    or one written into a private temporary folder that is removed when the block ends."""
    pack = Path(pack)
    source = pack_source(pack)
    if source.producer != "evalpack":
        raise InputError(f"{pack}: --dialect sqlite scores packs evalpack built (Parquet tables), not a pack "
                         f"{source.label} wrote; score it without --dialect")

    with debris.sqlite_scratch() as folder:
        def open_worker(rotation: str, limits: Limits) -> SqliteWorker:
            database = pack_sqlite_file(pack, rotation)
            if database is None:
                try:
                    database = write_rotation_sqlite(pack, rotation, source.tables_dir(rotation), folder)
                except InputError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one line for the user, whatever the tables did
                    raise InputError(f"{pack}: cannot write {rotation}'s tables as a SQLite database "
                                     f"({type(exc).__name__}: {first_line(exc)}); rebuild the pack") from None
            return SqliteWorker(database, folder, limits)

        yield open_worker


if __name__ == "__main__":
    if sys.argv[1:2] == [SQLITE_WORKER_FLAG]:
        sys.exit(worker_main(sys.argv[2:], open_sqlite_worker))
    sys.exit("usage: python -m evalpack.dialects.sqlite --sqlite-worker PARENT_PID (started by evalpack score)")
