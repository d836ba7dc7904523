"""The database an import is about, read without trusting it: a DuckDB or SQLite file in a worker process of its
own (:class:`SourceWorker`, under the scorer's limits, the file under a neutral name in a private folder), or a
folder of Parquet and CSV files, written as the pack's tables (:func:`write_source`), every table and view
bounded and refused in one line when it reads the machine rather than the database."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evalpack.checks.verification import Link
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import (
    SANDBOX_SCRATCH,
    WATCHDOG,
    InputError,
    Limits,
    Outcome,
    SandboxWorker,
    first_line,
    out_of_memory,
    printable,
    quote_ident,
    quote_literal,
    sha256_file,
    sweep_scratch,
    worker_main,
)
from evalpack.dialects.sqlite import PROGRESS_STEPS, _guard_of, open_sqlite_sandbox, sqlite_uri
from evalpack.interop.received import ROTATION

# --------------------------------------------------------------------------- the database


@dataclass
class Source:
    """The database the questions are about, written as the pack's tables."""

    kind: str  # duckdb | sqlite | folder
    name: str
    digests: dict[str, str]  # file name -> SHA-256
    tables: dict[str, dict] = field(default_factory=dict)  # name -> {"columns": {...}, "rows": {rotation: n}}
    foreign_keys: list[Link] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _safe_table_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def _write(con: duckdb.DuckDBPyConnection, select: str, name: str, out: Path, source: Source, origin: str) -> None:
    """Write one table as Parquet and CSV and record its columns and rows."""
    parquet, csv_path = out / f"{name}.parquet", out / f"{name}.csv"
    con.execute(f"COPY ({select}) TO {quote_literal(str(parquet))} (FORMAT parquet, COMPRESSION zstd)").fetchall()
    con.execute(f"COPY (SELECT * FROM read_parquet({quote_literal(str(parquet))})) TO {quote_literal(str(csv_path))} "
                "(FORMAT csv, HEADER true)").fetchall()
    columns = {c: t for c, t, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet({quote_literal(str(parquet))})")
               .fetchall()}
    rows = con.execute(f"SELECT COUNT(*) FROM read_parquet({quote_literal(str(parquet))})").fetchall()[0][0]
    source.tables[name] = {"columns": columns, "rows": {ROTATION: int(rows)}, "from": origin}


def _add_foreign_key(source: Source, table: str, cols: list[str], parent: str, pcols: list[str]) -> None:
    if len(cols) == 1 and len(pcols) == 1:
        source.foreign_keys.append(Link(table, cols[0], parent, pcols[0]))
    else:
        source.warnings.append(f"foreign key {table}({', '.join(cols)}) -> {parent}({', '.join(pcols)}) has "
                               f"{len(cols)} columns; the orphan audit follows single-column keys only")


# --------------------------------------------------------------------------- a database file, read in a worker
# A database file comes from outside: its views (and DuckDB's macros and generated columns) are SQL that runs when
# they are read. So this process never opens it. A worker process of the scorer's kind (scoring.worker_main, started
# as ``python -m evalpack.interop.importer --source-worker``) reads it under the scorer's limits: an address-space cap, a time
# limit per request (the worker is killed past it), CPU seconds, no file writes, few descriptors, death with this
# process. The file is read-only by construction: DuckDB attaches it READ_ONLY on a connection that reaches no other
# file, network or extension and whose configuration is locked; SQLite opens it by a read-only, immutable URI with
# query_only and the scorer's SQLite authorizer (dialect_scoring.open_sqlite_sandbox). This process asks for the
# catalogue, then for each table or view its rows, a chunk at a time (DuckDB: Arrow IPC; SQLite: the rows), and
# refuses with one line what passes a bound below (on each table or view, on all of them, on their number, on the
# time for the whole file).
# The connection that reads the file knows no path of the machine, by construction: the worker reads a hard link to
# the file (a copy where a link cannot be made) named source.duckdb or source.sqlite in a private scratch folder of
# the temp folder (SOURCE_SCRATCH), its working folder, and DuckDB's home, extension and secret folders are
# /nonexistent, its temp folder none. (Both engines resolve a link and /proc/self/fd/N to the file's real path: an
# open descriptor would show the path all the same.) So its settings (allowed_paths lists the file and its WAL) and
# catalogue (duckdb_databases().path) show the scratch name only. In depth: views, macros and generated columns that
# read DuckDB's description of the machine (settings, attached files, paths) or run SQL written as text are refused
# by name before anything runs (MACHINE_*), and what a view returns must hold neither the home folder, the file's
# path, the temp folder nor a scratch folder's name, as written or reversed, in hex or base64 (machine_paths).

SOURCE_WORKER_FLAG = "--source-worker"
MAX_SOURCE_OBJECTS = 1_000  # tables and views one database file (or folder of table files) may hold
MAX_SOURCE_SECONDS = 600.0  # seconds for reading a whole database file (at most the Limits' run_timeout)
SOURCE_SCRATCH = "evalpack-source-"  # the private folder the worker reads the file in: {prefix}{pid}-{random}
SOURCE_NAME = "source"  # the file's name there: source.duckdb or source.sqlite
DUCKDB_COMPANIONS = (".wal", ".wal.checkpoint", ".wal.recovery")  # what DuckDB reads beside a file (read-only too)
MAX_TABLE_ROWS = 10_000_000  # rows one table or view of a database file may hold
MAX_TABLE_BYTES = 512 * 2**20  # and bytes (Arrow's buffers; SQLite: the rows as JSON text)
MAX_SOURCE_BYTES = 4 * MAX_TABLE_BYTES  # all tables and views of one database file together
MAX_TABLE_SECONDS = 120.0  # the worker's seconds for one table or view (each request: the Limits' timeout)
MAX_ROW_BYTES = 32 * 2**20  # one row
SOURCE_CHUNK_BYTES = 16 * 2**20  # about what one reply of the worker holds
SQLITE_FETCH_ROWS = 256  # SQLite rows fetched at a time, at most (fewer when they are long)
NOWHERE = "/nonexistent"  # where the reading connection's home, extension and secret folders are said to be
# what the connection reading a DuckDB file from outside may not do once the file is attached
LOCKED_DOWN = ("autoinstall_known_extensions = false", "autoload_known_extensions = false",
               "allow_community_extensions = false", "enable_external_access = false", "lock_configuration = true")
SOURCE_SETTINGS = ("temp_directory = ''", "max_temp_directory_size = '0B'", "allow_persistent_secrets = false",
                   "enable_progress_bar = false", f"home_directory = '{NOWHERE}'",
                   f"extension_directory = '{NOWHERE}'", f"secret_directory = '{NOWHERE}'")
# DuckDB's description of the running system: every built-in duckdb_* and pragma_* table function and view
# (settings, attached databases and their files, extensions and where they are installed, secrets, memory, logs) ...
MACHINE_NAMES = ("SELECT function_name FROM duckdb_functions() WHERE internal AND (prefix(function_name, 'duckdb_') "
                 "OR prefix(function_name, 'pragma_')) UNION SELECT view_name FROM duckdb_views() WHERE internal "
                 "AND (prefix(view_name, 'duckdb_') OR prefix(view_name, 'pragma_'))")
MACHINE_TABLES = frozenset({"pg_settings"})  # ... PostgreSQL's view of the settings ...
# ... and the functions that read a setting or a variable, or run SQL written as text (which could name any of them):
# query and query_table take SQL, json_execute_serialized_sql runs SQL serialized as JSON, json_deserialize_sql turns
# that back into SQL text, and json_serialize_sql and json_serialize_plan parse (the plan: bind, constants folded) it
MACHINE_CALLS = frozenset({"current_setting", "getenv", "getvariable", "which_secret", "query", "query_table",
                           "json_execute_serialized_sql", "json_deserialize_sql", "json_serialize_sql",
                           "json_serialize_plan"})
IMPORT_BATCH_ROWS = 1 << 16
# the types Arrow carries as others (HUGEINT as DECIMAL(38,0), UUID as text): cast back, so the files hold what a
# direct copy of the table would
_CAST_BACK = ("HUGEINT", "UHUGEINT", "UUID")
_READ, _NEXT, _OPEN = "read", "next", "open"


def machine_name(sql: str, names: Collection[str]) -> str | None:
    """The name in ``sql`` (a view's, a macro's or a generated column's) that reads the machine's description: one of
    ``names`` (the built-in catalogue, :data:`MACHINE_TABLES`) wherever it stands, or a call of one of
    :data:`MACHINE_CALLS`; None when there is none. Identifiers are compared unquoted, in lower case (as DuckDB
    resolves them); string constants and comments are not names."""
    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - SQL DuckDB wrote but cannot tokenize is not read
        return "SQL that cannot be checked"
    words = []
    for i, (start, kind) in enumerate(tokens):
        if kind != duckdb.token_type.comment:
            end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
            words.append((sql[start:end].strip(), kind))
    for i, (text, kind) in enumerate(words):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        name = (text[1:-1].replace('""', '"') if text.startswith('"') and text.endswith('"') else text).lower()
        called = i + 1 < len(words) and words[i + 1][0].startswith("(")
        if name in names or name in MACHINE_TABLES or (called and name in MACHINE_CALLS):
            return name
    return None


class _Stop(Exception):
    """Why the worker stopped: ``kind`` is the bound (time, memory, rows, bytes, row) or ``open``/``error``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")


class _SourceSession:
    """The worker's side: the database file (opened read-only at the first request, ``open``, which answers with its
    catalogue) and the table or view being read (``read``: its first chunk; ``next``: the next one). A reply is one
    row: (the chunk, whether it was the last, what the first chunk adds, rows so far, bytes so far). A chunk is
    Arrow IPC (DuckDB; the first adds the declared types) or the rows as JSON text, a BLOB as ``{"$b": base64}``
    (SQLite; the first adds the column names)."""

    def __init__(self, setup: dict, limits: Limits) -> None:
        self.path, self.format, self.limits = Path(setup["database"]), setup["format"], limits
        self.con: Any = None
        self.stream: Any = None  # DuckDB: an Arrow reader; SQLite: a cursor
        self.pending: list[pa.RecordBatch] = []
        self.guard: Any = None
        self.rows = self.bytes = 0
        self.fetch = SQLITE_FETCH_ROWS // 8  # SQLite rows fetched at a time

    def run(self, sql: str, timeout: float, max_rows: int, max_bytes: int) -> Outcome:
        started = time.perf_counter()
        stopped = [False]

        def stop() -> None:
            stopped[0] = True
            if self.format == "duckdb" and self.con is not None:
                self.con.interrupt()

        try:
            request = json.loads(sql)
            with WATCHDOG.armed(timeout, stop):
                row = (self._duckdb if self.format == "duckdb" else self._sqlite)(request, stopped, max_rows,
                                                                                   max_bytes)
            return Outcome([row], None, time.perf_counter() - started)
        except _Stop as exc:
            error = str(exc)
        except MemoryError:
            error = f"memory: more than its {self.limits.memory_mb} MiB"
        except (duckdb.Error, sqlite3.Error) as exc:
            text = first_line(exc)
            if stopped[0]:
                error = f"time: stopped after {timeout:g} s"
            elif out_of_memory(text):
                error = f"memory: {text}"
            elif "string or blob too big" in text:
                error = f"row: {text}"
            elif self.guard is not None and self.guard.refused:
                error = f"error: {self.guard.refused} is not allowed"
            else:
                error = f"error: {text}"
        self._drop()
        return Outcome(None, error, time.perf_counter() - started, timed_out=error.startswith("time:"))

    def _drop(self) -> None:
        stream, self.stream, self.pending, self.guard = self.stream, None, [], None
        self.rows = self.bytes = 0
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _count(self, rows: int, size: int, max_rows: int, max_bytes: int) -> None:
        self.rows, self.bytes = self.rows + rows, self.bytes + size
        if self.rows > max_rows:
            raise _Stop("rows", f"more than {max_rows}")
        if self.bytes > max_bytes:
            raise _Stop("bytes", f"more than {max_bytes}")

    # DuckDB

    def _duckdb(self, request: dict, stopped: list[bool], max_rows: int, max_bytes: int) -> tuple:
        if _OPEN in request:
            return (json.dumps(self._duckdb_catalogue()),)
        info = None
        if _READ in request:
            self._drop()
            select = f"SELECT * FROM src.main.{quote_ident(request[_READ])}"
            info = {name: kind for name, kind, *_ in self.con.execute(f"DESCRIBE {select}").fetchall()}
            self.stream = self.con.sql(select).to_arrow_reader(IMPORT_BATCH_ROWS)
        if self.stream is None:
            raise _Stop("error", "no table is being read")
        schema, batches, size, done = self.stream.schema, [], 0, False
        while size < SOURCE_CHUNK_BYTES:
            if not self.pending:
                try:
                    batch = self.stream.read_next_batch()
                except StopIteration:
                    done = True
                    break
                self._count(batch.num_rows, batch.nbytes, max_rows, max_bytes)
                self.pending = _split(batch)
            batch = self.pending.pop(0)
            if batch.nbytes > MAX_ROW_BYTES:
                raise _Stop("row", f"a row of {batch.nbytes} bytes")
            batches.append(batch)
            size += batch.nbytes
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as ipc:
            for batch in batches:
                ipc.write_batch(batch)
        reply = (sink.getvalue().to_pybytes(), done, info, self.rows, self.bytes)
        if done:
            self._drop()
        return reply

    def _duckdb_catalogue(self) -> dict:
        self.con = con = duckdb.connect(":memory:")
        con.execute(f"SET threads = {max(1, int(self.limits.threads))}")
        con.execute(f"SET memory_limit = '{max(64, int(self.limits.memory_mb)) * 2**20}B'")
        for setting in SOURCE_SETTINGS:
            with contextlib.suppress(duckdb.Error):  # a setting this DuckDB version does not have
                con.execute(f"SET {setting}")
        try:
            con.execute(f"ATTACH {quote_literal(str(self.path))} AS src (READ_ONLY)")
        except duckdb.Error as exc:
            raise _Stop("open", first_line(exc)) from None
        for setting in LOCKED_DOWN:
            con.execute(f"SET {setting}")
        locked = con.execute("SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
                             "(SELECT readonly FROM duckdb_databases() WHERE database_name = 'src')").fetchone()
        if str(locked[0]).lower() != "false" or str(locked[1]).lower() != "true" or locked[2] is not True:
            raise RuntimeError("the connection reading the database did not lock; refusing to read it")
        objects = con.execute(
            "SELECT schema_name, table_name, 'table' FROM duckdb_tables() WHERE database_name = 'src' UNION ALL "
            "SELECT schema_name, view_name, 'view' FROM duckdb_views() WHERE database_name = 'src' AND NOT internal "
            "ORDER BY 1, 2").fetchall()
        keys = con.execute(
            "SELECT table_name, constraint_column_names, referenced_table, referenced_column_names "
            "FROM duckdb_constraints() WHERE database_name = 'src' AND schema_name = 'main' "
            "AND constraint_type = 'FOREIGN KEY' ORDER BY table_name, constraint_index").fetchall()
        names = {name.lower() for name, in con.execute(MACHINE_NAMES).fetchall()}
        machine = []
        for what, sql in con.execute(
                "SELECT 'view ' || view_name, sql FROM duckdb_views() WHERE database_name = 'src' AND NOT internal "
                "UNION ALL SELECT 'macro ' || function_name, macro_definition FROM duckdb_functions() "
                "WHERE database_name = 'src' AND macro_definition IS NOT NULL UNION ALL "
                "SELECT 'table ' || table_name || ' (its column ' || column_name || ')', generation_expression "
                "FROM information_schema.columns WHERE table_catalog = 'src' AND is_generated = 'ALWAYS' "
                "ORDER BY 1").fetchall():
            found = machine_name(sql or "", names)
            if found is not None:
                machine.append([what, found])
        computed = con.execute("SELECT DISTINCT table_name FROM information_schema.columns WHERE table_catalog = "
                               "'src' AND table_schema = 'main' AND is_generated = 'ALWAYS' ORDER BY 1").fetchall()
        return {"objects": [list(o) for o in objects], "machine": machine, "computed": [t for t, in computed],
                "foreign_keys": [[t, list(c), p, list(pc)] for t, c, p, pc in keys]}

    # SQLite

    @contextlib.contextmanager
    def _clock(self, stopped: list[bool]) -> Iterator[None]:
        """SQLite looks at ``stopped`` (set by the watchdog at the time limit) every PROGRESS_STEPS steps."""
        self.con.set_progress_handler(lambda: 1 if stopped[0] else 0, PROGRESS_STEPS)
        try:
            yield
        finally:
            self.con.set_progress_handler(None, PROGRESS_STEPS)

    def _sqlite(self, request: dict, stopped: list[bool], max_rows: int, max_bytes: int) -> tuple:
        if _OPEN in request:
            return (json.dumps(self._sqlite_catalogue()),)
        info = None
        if _READ in request:
            self._drop()
            self.guard = _guard_of(self.con)  # what the scorer's authorizer refuses, it names
            with self._clock(stopped):
                self.stream = self.con.execute(f"SELECT * FROM {quote_ident(request[_READ])}")
            info = [d[0] for d in self.stream.description]
        if self.stream is None:
            raise _Stop("error", "no table is being read")
        parts, size, done = [], 0, False
        with self._clock(stopped):
            while size < SOURCE_CHUNK_BYTES:
                asked = self.fetch
                got = self.stream.fetchmany(asked)
                text = json.dumps(got, default=_json_bytes)[1:-1]
                if len(text) > MAX_ROW_BYTES:
                    longest = max(len(json.dumps(row, default=_json_bytes)) for row in got)
                    if longest > MAX_ROW_BYTES:
                        raise _Stop("row", f"a row of {longest} bytes")
                self._count(len(got), len(text), max_rows, max_bytes)
                if got:
                    parts.append(text)
                    size += len(text)
                    # as many rows at a time as take about a sixteenth of a chunk
                    self.fetch = max(1, min(SQLITE_FETCH_ROWS, SOURCE_CHUNK_BYTES * len(got) // (16 * len(text) + 1)))
                if len(got) < asked:
                    done = True
                    break
        reply = ("[" + ",".join(parts) + "]", done, info, self.rows, self.bytes)
        if done:
            self._drop()
        return reply

    def _sqlite_catalogue(self) -> dict:
        try:
            self.con = open_sqlite_sandbox(self.path, self.limits, cap_heap=True)
            meta = sqlite3.connect(sqlite_uri(self.path), uri=True)
        except sqlite3.Error as exc:
            raise _Stop("open", first_line(exc)) from None
        objects = []
        try:
            meta.execute("PRAGMA query_only = ON")
            try:
                found = meta.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                                     "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name").fetchall()
            except sqlite3.Error as exc:
                raise _Stop("open", first_line(exc)) from None
            for name, kind in found:
                entry: dict[str, Any] = {"name": name, "kind": kind, "declared": {}, "foreign_keys": [], "error": None}
                try:
                    entry["declared"] = {r[1]: r[2] for r in meta.execute(f"PRAGMA table_info({quote_ident(name)})")}
                    keys: dict[int, list] = {}
                    for fk in meta.execute(f"PRAGMA foreign_key_list({quote_ident(name)})").fetchall():
                        keys.setdefault(fk[0], []).append(fk)
                    for fk_rows in keys.values():
                        parent = fk_rows[0][2]
                        cols, pcols = [r[3] for r in fk_rows], [r[4] for r in fk_rows]
                        if any(p is None for p in pcols):  # REFERENCES parent: the parent's primary key
                            pk = meta.execute(f"PRAGMA table_info({quote_ident(parent)})").fetchall()
                            pcols = [r[1] for r in sorted(pk, key=lambda r: r[5]) if r[5]]
                        entry["foreign_keys"].append([name, cols, parent, pcols])
                except sqlite3.Error as exc:
                    entry["error"] = first_line(exc)
                objects.append(entry)
        finally:
            meta.close()
        return {"objects": objects}


def _json_bytes(value: Any) -> dict:
    """A BLOB in a chunk of SQLite rows (JSON: every other value SQLite returns is a JSON value)."""
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"a {type(value).__name__} in a SQLite row")


def _bytes_json(value: dict) -> Any:
    return base64.b64decode(value["$b"]) if set(value) == {"$b"} else value


def _split(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` in pieces of at most :data:`SOURCE_CHUNK_BYTES` (or of one row)."""
    if batch.nbytes <= SOURCE_CHUNK_BYTES or batch.num_rows <= 1:
        return [batch]
    half = batch.num_rows // 2
    return _split(batch.slice(0, half)) + _split(batch.slice(half))


def open_source_worker(setup: dict, limits: Limits, on_connected: Callable[[], Any] | None = None
                       ) -> tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]:
    """The worker's opener (:func:`evalpack.core.scoring.worker_main`): the file is opened at the first request, under the
    worker's limits; nothing it does can change it (its state is therefore not compared)."""
    session = _SourceSession(setup, limits)
    return session.run, (lambda: None), {}


def private_source(database: Path, file_format: str) -> Path:
    """A new private scratch folder (:data:`SOURCE_SCRATCH`, mode 0700, in the temp folder) holding ``database`` as
    ``source.<file_format>`` (and a DuckDB file's WAL beside it), each a hard link, or a copy where a link cannot be
    made: the path the worker's engine is given, and shows, names nothing of the machine but the scratch folder."""
    parent = Path(tempfile.gettempdir())
    sweep_scratch(parent, SOURCE_SCRATCH)
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f"{SOURCE_SCRATCH}{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise EvalpackError(f"{database}: cannot make a private folder to read it in, in {parent} "
                            f"({exc.strerror})") from None
    target = scratch / f"{SOURCE_NAME}.{file_format}"
    try:
        for suffix in ("",) + (DUCKDB_COMPANIONS if file_format == "duckdb" else ()):
            origin, copy = database.with_name(database.name + suffix), target.with_name(target.name + suffix)
            if suffix and not origin.is_file():
                continue
            try:
                os.link(origin, copy)
            except OSError:  # another file system, or a file this user may read but not link
                shutil.copyfile(origin, copy)
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise EvalpackError(f"{database}: cannot link or copy it into a private folder to read it, in {parent} "
                            f"({exc.strerror})") from None
    return scratch


class SourceWorker(SandboxWorker):
    """The database file ``database`` (``duckdb`` or ``sqlite``) read in a worker process under ``limits``
    (:class:`_SourceSession`); :meth:`ask` sends one request, the wall clock enforced by killing the worker. The
    worker reads the file's :func:`private_source` (its working folder too), removed when this closes: use as a
    context manager."""

    def __init__(self, database: Path, file_format: str, limits: Limits) -> None:
        database = Path(database).resolve()
        self.database, self.format = database, file_format  # the file as the user named it: for messages only
        self.scratch = private_source(database, file_format)
        try:
            super().__init__(self.scratch, limits)
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def command(self) -> list[str]:
        # -I: no environment variables of Python's, no user site-packages, the working folder not on sys.path
        return [sys.executable, "-I", "-m", "evalpack.interop.sources", SOURCE_WORKER_FLAG, str(os.getpid())]

    def setup(self) -> dict[str, Any]:
        return {"database": str(self.scratch / f"{SOURCE_NAME}.{self.format}"), "format": self.format,
                "timeout": self.limits.timeout, "memory_mb": self.limits.memory_mb, "threads": self.limits.threads}

    def ask(self, request: dict, timeout: float, max_bytes: int = MAX_TABLE_BYTES) -> Outcome:
        try:
            return self.run(json.dumps(request), timeout, MAX_TABLE_ROWS, max_bytes)
        except InputError as exc:  # the worker did not start
            raise EvalpackError(f"{self.database}: the process that reads it did not start ({first_line(exc)})") \
                from None


SCRATCH_NAMES = (SANDBOX_SCRATCH.encode(), SOURCE_SCRATCH.encode())  # the scratch folders' names, wherever they are
MIN_DISGUISED = 8  # bytes a path or name needs before its reversed, hex and base64 forms are looked for


def machine_paths(data: Path) -> tuple[bytes, ...]:
    """What a view's rows (or what a question's SQL returns) must not hold: the home folder, the path of the
    database file (or folder) on this machine, and the temp folder (where the scratch folders of the scorer's
    sandbox and of the worker reading a file are: :data:`SCRATCH_NAMES`)."""
    temp = tempfile.gettempdir()
    found = {str(data.resolve()), str(data.absolute()), temp, str(Path(temp).resolve())}
    with contextlib.suppress(RuntimeError, KeyError):
        found.add(str(Path.home()))
    return tuple(sorted(p.encode() for p in found if p.strip("/")))


def holds_path(blob: bytes, path: bytes) -> bool:
    """Whether ``blob`` holds ``path`` itself or a path under it (``/root``, ``/root/x``; not ``/rootkit``)."""
    return re.search(re.escape(path) + rb"(?![\w.-])", blob) is not None


def disguises(text: bytes) -> tuple[bytes, ...]:
    """How a query may write ``text`` to slip past a search for it: reversed, in hex (either case) and in base64 (the
    part of the encoding that does not depend on the bytes around it, at each of the three alignments); none for text
    shorter than :data:`MIN_DISGUISED` bytes, which would be found by chance."""
    if len(text) < MIN_DISGUISED:
        return ()
    forms = [text[::-1], text.hex().encode(), text.hex().upper().encode()]
    for shift in range(3):
        forms.append(base64.b64encode(b"\0" * shift + text)[4 if shift else 0:-4])
    return tuple(forms)


def machine_path_in(blob: bytes, paths: Collection[bytes], names: Collection[bytes] = SCRATCH_NAMES) -> bytes | None:
    """The first of ``paths`` (:func:`holds_path`, written as it is or JSON-escaped) or ``names`` (anywhere) that
    ``blob`` holds, either as written or in one of its :func:`disguises`; None when it holds none."""
    for path in paths:
        escaped = json.dumps(path.decode(errors="replace"))[1:-1].encode()
        if holds_path(blob, path) or holds_path(blob, escaped) or any(d in blob for d in disguises(path)):
            return path
    for name in names:
        if name in blob or any(d in blob for d in disguises(name)):
            return name
    return None


@dataclass(frozen=True)
class _Budget:
    """The time for reading a whole database file: ``seconds`` (:data:`MAX_SOURCE_SECONDS`, at most the limits'
    ``run_timeout``), spent at ``ends`` (``time.monotonic()``)."""

    seconds: float
    ends: float

    @classmethod
    def start(cls, limits: Limits) -> _Budget:
        seconds = min(MAX_SOURCE_SECONDS, limits.run_timeout)
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        return self.ends - time.monotonic()


class _Reading:
    """One table or view of a database file, asked of its worker a chunk at a time within the time ``budget`` of the
    whole file; each reply is checked, and what passes a bound is an EvalpackError naming the table or view and the
    bound (kept in ``refusal`` too, for when DuckDB reads the chunks and reports the error its own way)."""

    def __init__(self, worker: SourceWorker, what: str, max_bytes: int, budget: _Budget,
                 needles: tuple[bytes, ...] | None = None) -> None:
        self.worker, self.what, self.max_bytes, self.budget, self.needles = worker, what, max_bytes, budget, needles
        self.seconds = 0.0
        self.bytes = 0
        self.refusal: EvalpackError | None = None

    def ask(self, request: dict) -> tuple:
        limits, left = self.worker.limits, self.budget.left()
        if left < 0.1:
            self.refusal = self._over_budget()
            raise self.refusal
        bound = min(limits.timeout, MAX_TABLE_SECONDS - self.seconds)
        outcome = self.worker.ask(request, max(0.1, min(bound, left)), self.max_bytes)
        self.seconds += outcome.seconds
        if outcome.error is not None:
            timed_out = outcome.timed_out or outcome.error.startswith("time:")
            self.refusal = self._over_budget() if left < bound and timed_out else self._refused(outcome)
            raise self.refusal
        row = outcome.rows[0]
        if len(row) > 1:
            self.bytes = int(row[4])
            chunk = row[0] if isinstance(row[0], bytes) else row[0].encode()
            needle = None if self.needles is None else machine_path_in(chunk, self.needles)
            if needle is not None:
                self.refusal = EvalpackError(
                    f"{self.worker.database}: {self.what} returns a path of this machine "
                    f"({printable(needle.decode(errors='replace'))}); a view may read only the database's own "
                    "tables, not where this machine keeps its files: drop or rewrite it, and import again")
                raise self.refusal
            if not row[1] and self.seconds >= MAX_TABLE_SECONDS:
                self.refusal = self._refused(Outcome(None, "time: in all", self.seconds, True))
                raise self.refusal
        return row

    def _over_budget(self) -> EvalpackError:
        return EvalpackError(
            f"{self.worker.database}: reading the whole file took more than {self.budget.seconds:g} s, the time limit "
            f"for reading a database file (stopped at {self.what}); a file whose views take this long is refused: "
            "make them cheaper or drop them, or import a smaller extract, and import again")

    def _refused(self, outcome: Outcome) -> EvalpackError:
        where, what, limits = self.worker.database, self.what, self.worker.limits
        kind, _, detail = (outcome.error or "").partition(": ")
        smaller = "; import a smaller extract, or the rows as Parquet files in a folder (--data FOLDER)"
        if outcome.timed_out or kind == "time":
            text = (f"{what} was stopped at the time limit for reading it ({limits.timeout:g} s for each batch of "
                    f"rows, {MAX_TABLE_SECONDS:g} s in all); a view that takes this long is refused: make it cheaper "
                    "or drop it, and import again")
        elif kind == "memory" or "ended its worker process" in outcome.error:
            text = (f"{what} needs more than the memory limit for reading it ({limits.memory_mb} MiB; its reading "
                    "process was stopped); a view that builds this much is refused: make it cheaper or drop it, and "
                    "import again")
        elif kind == "rows":
            text = f"{what} holds more than {MAX_TABLE_ROWS:,} rows, the limit for a table or view of a database file"
            text += smaller
        elif kind == "bytes" and self.max_bytes < MAX_TABLE_BYTES:
            text = (f"its tables and views hold more than {MAX_SOURCE_BYTES // 2**20:,} MiB together, the limit for "
                    f"a database file (passed at {what})") + smaller
        elif kind == "bytes":
            text = (f"{what} holds more than {MAX_TABLE_BYTES // 2**20:,} MiB, the limit for a table or view of a "
                    "database file") + smaller
        elif kind == "row":
            text = (f"{what} has a row or value larger than the limit for one row ({MAX_ROW_BYTES // 2**20} MiB); "
                    "a view that builds such values is refused: drop it, and import again")
        elif kind == "open":
            text = f"cannot open the {'DuckDB' if self.worker.format == 'duckdb' else 'SQLite'} database read-only " \
                   f"({detail})"
        else:
            text = f"cannot read {what} ({detail or outcome.error}); a view may read only the database's own tables"
        return EvalpackError(f"{where}: {text}")


def _check_count(path: Path, count: int, what: str = "tables and views") -> None:
    """Refuse a database file (or folder) of more than :data:`MAX_SOURCE_OBJECTS` tables and views, before any is
    read."""
    if count > MAX_SOURCE_OBJECTS:
        raise EvalpackError(f"{path}: holds {count:,} {what}, more than {MAX_SOURCE_OBJECTS:,}, the limit on the "
                            f"{what} of a database an import reads; import a smaller extract (the tables the "
                            "questions read), and import again")


def _duckdb_batches(reading: _Reading, row: tuple) -> Iterator[pa.RecordBatch]:
    """The record batches of a table or view, from its first reply ``row`` on."""
    while True:
        yield from pa.ipc.open_stream(pa.py_buffer(row[0]))
        if row[1]:
            return
        row = reading.ask({_NEXT: True})


def _from_duckdb(path: Path, out: Path, source: Source, limits: Limits) -> None:
    """Every table and view of the main schema of the DuckDB file at ``path``, read by a :class:`SourceWorker`; the
    rows go to the pack's files through a connection of this process."""
    needles, budget = machine_paths(path), _Budget.start(limits)
    with SourceWorker(path, "duckdb", limits) as worker, duckdb.connect(":memory:") as writer:
        catalogue = json.loads(_Reading(worker, "its catalogue", MAX_TABLE_BYTES, budget).ask({_OPEN: True})[0])
        if catalogue["machine"]:
            what, name = catalogue["machine"][0]
            raise EvalpackError(f"{path}: {printable(what)} reads {printable(name)}, DuckDB's description of the "
                                "machine running the import (its settings, files and paths) or SQL written as text, "
                                "not the database; a view may read only the database's own tables: drop or rewrite "
                                "it, and import again")
        _check_count(path, len(catalogue["objects"]))
        spent = 0
        for schema, table, kind in catalogue["objects"]:
            if schema != "main" or not _safe_table_name(table):
                source.warnings.append(f"{path.name}: {schema}.{table} not imported (only tables of the main schema "
                                       "with plain names become pack tables)")
                continue
            computed = kind == "view" or table in catalogue["computed"]
            reading = _Reading(worker, f"{kind} {printable(table)}", min(MAX_TABLE_BYTES, MAX_SOURCE_BYTES - spent),
                               budget, needles if computed else None)
            first = reading.ask({_READ: table})
            schema_of = pa.ipc.open_stream(pa.py_buffer(first[0])).schema
            writer.register("__import_rows", pa.RecordBatchReader.from_batches(schema_of,
                                                                               _duckdb_batches(reading, first)))
            try:
                _write(writer, _as_declared(writer, first[2]), table, out, source, kind)
            except duckdb.Error as exc:
                if reading.refusal is not None:
                    raise reading.refusal from None
                raise EvalpackError(f"{path}: cannot write {kind} {printable(table)} into the pack "
                                    f"({first_line(exc)})") from None
            finally:
                writer.unregister("__import_rows")
            spent += reading.bytes
        for table, cols, parent, pcols in catalogue["foreign_keys"]:
            _add_foreign_key(source, table, cols, parent, pcols)


def _as_declared(writer: duckdb.DuckDBPyConnection, declared: dict[str, str]) -> str:
    """A SELECT of the rows registered as ``__import_rows`` with each column of a type in :data:`_CAST_BACK` cast back
    to the type ``declared`` in the source."""
    arrived = {name: kind for name, kind, *_ in writer.execute("DESCRIBE SELECT * FROM __import_rows").fetchall()}
    columns = [f"CAST({quote_ident(name)} AS {declared[name]}) AS {quote_ident(name)}"
               if declared.get(name) in _CAST_BACK and kind != declared[name] else quote_ident(name)
               for name, kind in arrived.items()]
    return f"SELECT {', '.join(columns)} FROM __import_rows"


def _affinity(declared: str) -> pa.DataType:
    """SQLite's type affinity of a declared column type, as the Arrow type of a column without values."""
    t = (declared or "").upper()
    if "INT" in t:
        return pa.int64()
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if "BLOB" in t:
        return pa.binary()
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    return pa.string()


def _sqlite_array(values: list, declared: str) -> tuple[pa.Array, str | None]:
    """The Arrow column of SQLite values (typed by the values; the declared type when all are NULL)."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.array(values, type=_affinity(declared)), None
    if kinds <= {int}:
        return pa.array(values, type=pa.int64()), None
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64()), None
    if kinds == {str}:
        return pa.array(values, type=pa.string()), None
    if kinds == {bytes}:
        return pa.array(values, type=pa.binary()), None
    text = [None if v is None else (v.hex() if isinstance(v, bytes) else str(v)) for v in values]
    names = ", ".join(sorted(k.__name__ for k in kinds))
    return pa.array(text, type=pa.string()), f"holds mixed value types ({names}); written as text"


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the first bytes of a SQLite rollback journal still to be played


def _check_sqlite_companions(path: Path) -> None:
    """Refuse a SQLite file whose write-ahead log or rollback journal holds what the file itself does not: it is read
    as it is (immutable), and SQLite would write to play them."""
    wal, journal = path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise EvalpackError(f"{wal}: {path.name} has changes in this write-ahead log that the file itself does not "
                            f"hold yet; close every program that has it open, or run sqlite3 {path.name} "
                            "'PRAGMA wal_checkpoint(TRUNCATE)', and import again")
    if journal.is_file():
        with open(journal, "rb") as handle:
            if handle.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC:
                raise EvalpackError(f"{journal}: {path.name} has a transaction that did not finish; open it once "
                                    f"with sqlite3 (which rolls it back), and import again")


def _from_sqlite(path: Path, out: Path, source: Source, limits: Limits) -> None:
    """Every table and view of the SQLite file at ``path``, read by a :class:`SourceWorker` (each column typed by its
    values, :func:`_sqlite_array`)."""
    _check_sqlite_companions(path)
    needles, budget = machine_paths(path), _Budget.start(limits)
    with SourceWorker(path, "sqlite", limits) as worker, duckdb.connect(":memory:") as con:
        catalogue = json.loads(_Reading(worker, "its catalogue", MAX_TABLE_BYTES, budget).ask({_OPEN: True})[0])
        _check_count(path, len(catalogue["objects"]))
        spent = 0
        for entry in catalogue["objects"]:
            table, kind = entry["name"], entry["kind"]
            if not _safe_table_name(table):
                source.warnings.append(f"{path.name}: table {table!r} not imported (its name cannot be a file name)")
                continue
            what = f"{kind} {printable(table)}"
            if entry["error"] is not None:
                raise EvalpackError(f"{path}: cannot read {what} ({entry['error']})")
            reading = _Reading(worker, what, min(MAX_TABLE_BYTES, MAX_SOURCE_BYTES - spent), budget,
                               needles if kind == "view" else None)
            row = reading.ask({_READ: table})
            names = row[2]
            columns: list[list] = [[] for _ in names]
            while True:
                for values in json.loads(row[0], object_hook=_bytes_json):
                    for column, value in zip(columns, values):
                        column.append(value)
                if row[1]:
                    break
                row = reading.ask({_NEXT: True})
            spent += reading.bytes
            arrays = []
            for name, values in zip(names, columns):
                array, note = _sqlite_array(values, entry["declared"].get(name, ""))
                arrays.append(array)
                if note:
                    source.warnings.append(f"{path.name}: {table}.{name} {note}")
            del columns
            con.register("__import_table", pa.table(arrays, names=names))
            _write(con, "SELECT * FROM __import_table", table, out, source, kind)
            con.unregister("__import_table")
            for child, cols, parent, pcols in entry["foreign_keys"]:
                _add_foreign_key(source, child, cols, parent, pcols)


def _from_folder(path: Path, out: Path, source: Source) -> None:
    _check_count(path, sum(1 for file in path.iterdir() if file.suffix.lower() in (".parquet", ".csv")), "table files")
    con = duckdb.connect(":memory:")
    try:
        for file in sorted(path.iterdir()):
            suffix = file.suffix.lower()
            if not file.is_file() or suffix not in (".parquet", ".csv"):
                source.warnings.append(f"{path.name}/{file.name} ignored (tables are .parquet or .csv files)")
                continue
            name = file.stem
            if name in source.tables:
                source.warnings.append(f"{path.name}/{file.name} ignored: table {name} already comes from "
                                       f"{source.tables[name]['from']}")
                continue
            reader = "read_parquet" if suffix == ".parquet" else "read_csv"
            options = "" if suffix == ".parquet" else ", header = true"
            try:
                _write(con, f"SELECT * FROM {reader}({quote_literal(str(file))}{options})", name, out, source, file.name)
            except duckdb.Error as exc:
                raise EvalpackError(f"{file}: cannot read the table ({first_line(exc)})") from None
            source.digests[file.name] = sha256_file(file)
    finally:
        con.close()


def write_source(data: str | Path, out: Path, limits: Limits | None = None) -> Source:
    """Write every table of ``data`` into ``out`` (Parquet + CSV); returns what was read and its foreign keys. A
    database file is read in a worker process under ``limits`` and the bounds above (:class:`SourceWorker`)."""
    data, limits = Path(data), limits or Limits()
    out.mkdir(parents=True, exist_ok=True)
    if data.is_dir():
        source = Source("folder", data.name, {})
        _from_folder(data, out, source)
    elif data.is_file():
        with open(data, "rb") as handle:
            head = handle.read(16)
        if head.startswith(b"SQLite format 3\x00"):
            source = Source("sqlite", data.name, {data.name: sha256_file(data)})
            _from_sqlite(data, out, source, limits)
        elif head[8:12] == b"DUCK":
            source = Source("duckdb", data.name, {data.name: sha256_file(data)})
            _from_duckdb(data, out, source, limits)
        else:
            raise EvalpackError(f"{data}: not a DuckDB or SQLite database file; --data takes one of those, or a "
                                "folder of .parquet/.csv tables")
    else:
        raise EvalpackError(f"{data}: not found; --data takes a DuckDB or SQLite file, or a folder of tables")
    if not source.tables:
        raise EvalpackError(f"{data}: holds no table to import")
    return source


if __name__ == "__main__":
    if sys.argv[1:2] == [SOURCE_WORKER_FLAG]:
        sys.exit(worker_main(sys.argv[2:], open_source_worker))
    sys.exit("usage: python -m evalpack.interop.sources --source-worker PARENT_PID (started by evalpack import)")
