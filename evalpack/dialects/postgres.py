"""A pack's rotations in PostgreSQL: a plain-SQL dump per rotation, an engine for trusted gold SQL, a sandbox for
candidate SQL.

* :func:`write_dump` writes one rotation as a plain-SQL file that ``psql -f`` restores into an empty database: a
  CREATE TABLE per table with PostgreSQL types mapped from the manifest's DuckDB types (:func:`pg_type`) and what the
  pack's data dictionary says of it and its columns as ``COMMENT ON`` (:func:`comment_statements`), the rows
  as ``COPY ... FROM stdin`` read from the rotation's Parquet files, then the primary keys and the foreign keys the
  pack declares (:func:`evalpack.dialects.common.keys_of`). A declared link whose rotation holds orphans by design (child
  rows pointing at no parent) is added ``NOT VALID``: PostgreSQL keeps it for new rows and does not check the
  existing ones. No server is needed and the same tables give the same bytes.
* :func:`open_postgres_sandbox` is where untrusted SQL runs (``evalpack score --dialect postgres``, through
  :func:`postgres_sandboxes`). Per rotation it creates a database and a login role of its own that owns nothing and
  may only SELECT its tables (see :class:`PostgresSandbox`): that, not a test of the statement, is what keeps the
  data as it is. Each candidate runs in a ``READ ONLY`` transaction as a cursor (``DECLARE ... CURSOR FOR``: the
  server takes exactly one query, SELECT/VALUES/WITH without data-modifying parts), stopped at the time limit from
  outside its session, fetched in chunks up to the row and byte caps, then rolled back and the session reset
  (``DISCARD ALL``); the database and the role are dropped at the end. Values come back as the scorer compares
  them: NUMERIC as Decimal, DATE as date, TIMESTAMP as datetime, integers as int, DOUBLE PRECISION as float.
* :class:`PostgresEngine` (a libpq DSN) runs a pack's own gold SQL (translated by
  :func:`evalpack.dialects.translate.transpile`) in such a sandbox too: ``open_rotation`` yields ``run(sql) -> rows``.

The driver is psycopg 3. The DSN names a role that may create databases, schemas and roles (a superuser in the
tests' private server, ``tests/pg.py``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import re
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import (
    KILL_GRACE,
    MAX_FETCH_ROWS,
    MAX_RESULT_BYTES,
    WATCHDOG,
    InputError,
    Limits,
    Outcome,
    Query,
    SandboxWorker,
    fetch_capped,
    first_line,
    pack_source,
    query_outcome,
    quote_ident,
    quote_literal,
    sql_refused,
    worker_main,
)
from evalpack.dialects.common import (
    GOLD_MEMORY_MB,
    GOLD_SECONDS,
    Comments,
    ForeignKey,
    comment_text,
    file_into_place,
    parquet_batches,
)

# DuckDB type -> PostgreSQL type, for the types without parameters
PG_TYPES = {
    "BIGINT": "BIGINT", "INT8": "BIGINT", "LONG": "BIGINT",
    "INTEGER": "INTEGER", "INT": "INTEGER", "INT4": "INTEGER", "SIGNED": "INTEGER",
    "SMALLINT": "SMALLINT", "INT2": "SMALLINT", "SHORT": "SMALLINT", "TINYINT": "SMALLINT", "INT1": "SMALLINT",
    "UTINYINT": "SMALLINT", "USMALLINT": "INTEGER", "UINTEGER": "BIGINT", "UBIGINT": "NUMERIC(20,0)",
    "HUGEINT": "NUMERIC(39,0)", "UHUGEINT": "NUMERIC(39,0)",
    "DOUBLE": "DOUBLE PRECISION", "FLOAT8": "DOUBLE PRECISION", "FLOAT": "REAL", "FLOAT4": "REAL", "REAL": "REAL",
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
    "DATE": "DATE", "TIME": "TIME", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ", "TIMESTAMPTZ": "TIMESTAMPTZ", "INTERVAL": "INTERVAL",
    "VARCHAR": "TEXT", "TEXT": "TEXT", "STRING": "TEXT", "CHAR": "TEXT", "BPCHAR": "TEXT",
    "UUID": "UUID", "BLOB": "BYTEA", "BYTEA": "BYTEA", "JSON": "JSONB",
}
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
DSN_ENV = "EVALPACK_POSTGRES_DSN"  # the PostgreSQL server, when no --postgres-dsn names one
CURSOR = "evalpack_candidate"
QUERY_WORDS = ("SELECT", "WITH", "VALUES", "TABLE")  # what DECLARE ... CURSOR FOR takes
# large-object functions: they write inside the database; revoked from PUBLIC in each sandbox database
LARGE_OBJECT_FUNCTIONS = r"^(lo_.*|lo(read|write|open|close|creat|unlink))$"
RECONNECT_SECONDS = 10.0  # how long a sandbox waits for its role's single connection slot to free up
END_SECONDS = 5.0  # how long ending a killed worker's sessions on the server may take
CONNECTION_CHECK_MS = "500"  # how often a sandbox backend in a query looks whether its client is still there
DEFAULT_LIMITS = Limits()


def dsn_from(given: str | None) -> str | None:
    """The PostgreSQL server: the DSN given (``--postgres-dsn``), else ``$EVALPACK_POSTGRES_DSN``, else None."""
    return given or os.environ.get(DSN_ENV) or None


# --------------------------------------------------------------------------- types and values


def pg_type(duckdb_type: str) -> str:
    """The PostgreSQL type of a DuckDB column type (``DECIMAL(18,2)`` -> ``NUMERIC(18,2)``, ``VARCHAR`` -> ``TEXT``).
    EvalpackError for a type with no PostgreSQL column type here."""
    name = " ".join(str(duckdb_type).upper().split())
    if name in PG_TYPES:
        return PG_TYPES[name]
    match = _DECIMAL.fullmatch(name)
    if match:
        return f"NUMERIC({match.group(1)},{match.group(2)})"
    if name in ("DECIMAL", "NUMERIC"):
        return "NUMERIC(18,3)"  # DuckDB's default precision and scale
    raise EvalpackError(f"manifest.json: column type {duckdb_type!r} has no PostgreSQL type here; the pack's "
                        f"tables must use {', '.join(sorted(set(PG_TYPES)))} or DECIMAL(p,s)")


def copy_value(value: Any) -> str:
    """One cell in COPY's text format: ``\\N`` for NULL, ``t``/``f``, ISO dates and timestamps, exact decimals,
    floats by their shortest repr, text with backslash, tab, newline and carriage return escaped."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\\\x" + bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, sort_keys=True).translate(_COPY_ESCAPES)
    return str(value).translate(_COPY_ESCAPES)


def copy_column(array: pa.Array) -> pa.Array:
    """A column's cells in COPY's text format (:func:`copy_value`), computed by Arrow for the pack's own types:
    integers, decimals (their digits at the column's scale), dates, timestamps without a zone, booleans (``t``/``f``)
    and text (escaped); any other type cell by cell in Python. NULL is ``\\N``."""
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_decimal(kind) or pa.types.is_date32(kind) or \
            (pa.types.is_timestamp(kind) and kind.tz is None):
        text = pc.cast(array, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(array, "t", "f")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = array
        for raw, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
            text = pc.replace_substring(text, raw, escaped)
    else:
        return pa.array([copy_value(v) for v in array.to_pylist()], pa.string())
    return pc.coalesce(text, pa.scalar("\\N"))


def copy_chunks(tables_dir: Path, table: str, columns: Iterable[str]) -> Iterator[str]:
    """The rows of ``tables_dir/<table>.parquet`` (the given columns, in file order) as COPY text, one chunk of
    whole lines per record batch."""
    names = list(columns)
    for batch in parquet_batches(Path(tables_dir) / f"{table}.parquet", names):
        if batch.num_rows:
            cells = [copy_column(batch.column(name)) for name in names]
            lines = pc.binary_join_element_wise(*cells, "\t") if len(cells) > 1 else cells[0]
            yield "\n".join(lines.to_pylist()) + "\n"


def create_table_sql(table: str, columns: Mapping[str, str]) -> str:
    """CREATE TABLE for one table, with the PostgreSQL types of its DuckDB types."""
    body = ",\n".join(f"    {quote_ident(name)} {pg_type(kind)}" for name, kind in columns.items())
    return f"CREATE TABLE {quote_ident(table)} (\n{body}\n);\n"


def comment_statements(table: str, columns: Iterable[str], comments: Comments) -> str:
    """``COMMENT ON TABLE`` and ``COMMENT ON COLUMN`` for what the pack's data dictionary says of ``table`` and its
    ``columns`` (``obj_description`` and ``col_description`` read them; ``\\d+`` shows them), each one line
    (:func:`evalpack.dialects.common.comment_text`: no NUL, which PostgreSQL's text cannot hold) as a string literal
    (quotes doubled: the dump sets ``standard_conforming_strings``, so a backslash is itself); '' when the dictionary
    says nothing of them."""
    out = []
    if about := comment_text(comments.table(table) or ""):
        out.append(f"COMMENT ON TABLE {quote_ident(table)} IS {quote_literal(about)};\n")
    for column in columns:
        if note := comment_text(comments.column(table, column) or ""):
            out.append(f"COMMENT ON COLUMN {quote_ident(table)}.{quote_ident(column)} IS {quote_literal(note)};\n")
    return "".join(out)


def copy_sql(table: str, columns: Iterable[str]) -> str:
    """``COPY table (columns) FROM stdin`` (the data follows in COPY's text format)."""
    return f"COPY {quote_ident(table)} ({', '.join(map(quote_ident, columns))}) FROM stdin"


# --------------------------------------------------------------------------- keys


def _links(links: Iterable[ForeignKey | Mapping[str, str]]) -> list[ForeignKey]:
    return [link if isinstance(link, ForeignKey) else ForeignKey(**{k: str(link[k]) for k in (
        "child_table", "child_column", "parent_table", "parent_column")}) for link in links]


def orphan_count(tables_dir: Path, link: ForeignKey) -> int:
    """How many child rows of ``link`` (non-null keys) point at no parent row in this rotation."""
    def column(table: str, name: str):
        return pq.read_table(Path(tables_dir) / f"{table}.parquet", columns=[name]).column(name)

    child = pc.drop_null(column(link.child_table, link.child_column))
    parents = column(link.parent_table, link.parent_column).combine_chunks()
    return int(len(child) - pc.sum(pc.is_in(child, value_set=parents)).as_py()) if len(child) else 0


def key_statements(tables_dir: Path, columns: Mapping[str, Mapping[str, str]], primary_keys: Mapping[str, str],
                   links: Iterable[ForeignKey | Mapping[str, str]]) -> list[str]:
    """The ALTER TABLE statements adding the declared keys (tables and links outside ``columns`` are skipped): a
    primary key per table that has one, a UNIQUE constraint on a link's parent column that is not its table's
    primary key, and each foreign key, ``NOT VALID`` (with a comment saying why) where the rotation holds orphans."""
    out = []
    for table, column in sorted(primary_keys.items()):
        if column in columns.get(table, {}):
            out.append(f"ALTER TABLE ONLY {quote_ident(table)} ADD CONSTRAINT {quote_ident(f'{table}_pkey')} "
                       f"PRIMARY KEY ({quote_ident(column)});\n")
    for link in _links(links):
        if link.child_column not in columns.get(link.child_table, {}) or \
                link.parent_column not in columns.get(link.parent_table, {}):
            continue
        if primary_keys.get(link.parent_table) != link.parent_column:
            name = f"{link.parent_table}_{link.parent_column}_key"
            unique = (f"ALTER TABLE ONLY {quote_ident(link.parent_table)} ADD CONSTRAINT {quote_ident(name)} "
                      f"UNIQUE ({quote_ident(link.parent_column)});\n")
            if unique not in out:
                out.append(unique)
        orphans = orphan_count(tables_dir, link)
        note = (f"-- {orphans} row(s) of {link.child_table}.{link.child_column} point at no {link.parent_table} row "
                "(orphans the pack declares): the key holds for new rows, the existing ones are not checked\n"
                if orphans else "")
        out.append(f"{note}ALTER TABLE ONLY {quote_ident(link.child_table)} ADD CONSTRAINT "
                   f"{quote_ident(f'{link.child_table}_{link.child_column}_fkey')} FOREIGN KEY "
                   f"({quote_ident(link.child_column)}) REFERENCES {quote_ident(link.parent_table)} "
                   f"({quote_ident(link.parent_column)}){' NOT VALID' if orphans else ''};\n")
    return out


# --------------------------------------------------------------------------- the dump


def write_dump(tables_dir: Path, columns: dict[str, dict[str, str]], path: Path, *,
               primary_keys: Mapping[str, str] | None = None,
               links: Iterable[ForeignKey | Mapping[str, str]] = (), comments: Comments = Comments()) -> None:
    """A plain-SQL dump of one rotation at ``path``, for ``psql -f`` into an empty database (one transaction).

    ``columns`` is manifest.json's ``tables[name]["columns"]`` (table -> column -> DuckDB type); the rows come from
    ``tables_dir/<table>.parquet``. ``primary_keys`` (table -> column) and ``links`` (foreign keys, as
    :func:`evalpack.dialects.common.keys_of` reads them from the manifest, or ``declared_links`` entries) are added after
    the data; ``comments`` (the pack's data dictionary, :func:`evalpack.dialects.common.comments_of`) follow each CREATE
    TABLE as COMMENT ON statements (:func:`comment_statements`). The file is written beside ``path`` and renamed into
    place when complete; same input, same bytes."""
    with file_into_place(path) as temporary, open(temporary, "w", encoding="utf-8", newline="\n") as out:
        out.write("-- A rotation of an evalpack pack, for PostgreSQL: psql -v ON_ERROR_STOP=1 -f THIS_FILE "
                  "(into an empty database)\n"
                  "SET client_encoding = 'UTF8';\nSET standard_conforming_strings = on;\n"
                  "SET client_min_messages = warning;\nSET check_function_bodies = false;\n"
                  "SET search_path = public;\nBEGIN;\n\n")
        for table, cols in columns.items():
            out.write(create_table_sql(table, cols))
            out.write(comment_statements(table, cols, comments))
            out.write(copy_sql(table, cols) + ";\n")
            for chunk in copy_chunks(tables_dir, table, cols):
                out.write(chunk)
            out.write("\\.\n\n")
        for statement in key_statements(tables_dir, columns, primary_keys or {}, links):
            out.write(statement)
        out.write("\nCOMMIT;\nANALYZE;\n")


# --------------------------------------------------------------------------- loading into a server


def load_tables(conn: psycopg.Connection, tables_dir: Path, columns: Mapping[str, Mapping[str, str]]) -> None:
    """Create and fill one table per entry of ``columns`` in the connection's current schema (COPY from the
    rotation's Parquet files, the same text :func:`write_dump` writes), then ANALYZE them."""
    for table, cols in columns.items():
        conn.execute(create_table_sql(table, cols).encode())
        with conn.cursor().copy(copy_sql(table, cols).encode()) as copy:
            for chunk in copy_chunks(tables_dir, table, cols):
                copy.write(chunk)
        conn.execute(f"ANALYZE {quote_ident(table)}".encode())


def _name(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def connect(dsn: str, **options: Any) -> psycopg.Connection:
    """An autocommit connection to ``dsn``; EvalpackError naming the server when it cannot be reached."""
    try:
        return psycopg.connect(dsn, autocommit=True, **options)
    except psycopg.Error as exc:
        raise EvalpackError(f"cannot connect to PostgreSQL ({first_line(exc)}); check --postgres-dsn (a libpq DSN "
                            "or postgresql:// URI of a role that may create databases and roles)") from None


class PostgresEngine:
    """PostgreSQL for a pack's gold SQL (:class:`evalpack.dialects.engines.DialectEngine`), run where a candidate's runs:
    each rotation in a sandbox of its own on the server at ``dsn`` (:class:`PostgresSandbox`: a database, a login
    role that may only read its tables, a worker process), each query a read-only cursor stopped after ``timeout``
    seconds (:data:`evalpack.dialects.common.GOLD_SECONDS`) under ``memory_mb`` of working memory
    (:data:`evalpack.dialects.common.GOLD_MEMORY_MB`); the database and the role are dropped when the rotation's block
    ends, and the tables must be unchanged then. A pack someone else built has gold SQL as untrusted as a
    candidate's: run as the DSN's role (often a superuser), a data-changing CTE emptied the table it was checked
    against, and a server file or program was one function away. The DSN's role must be able to create databases
    and roles, as for scoring."""

    name = "postgres"

    def __init__(self, dsn: str, timeout: float | None = None, memory_mb: int | None = None) -> None:
        self.dsn, self.timeout, self.memory_mb = dsn, timeout, memory_mb

    @contextlib.contextmanager
    def open_rotation(self, tables_dir: Path, columns: dict[str, dict[str, str]]
                      ) -> Iterator[Callable[[str], list[tuple]]]:
        """Load the rotation in ``tables_dir`` into a sandbox of its own; yield ``run(sql) -> rows``, which raises
        psycopg.Error with the sandbox's words (the server's error, a timeout, too many rows) when a query fails."""
        timeout = GOLD_SECONDS if self.timeout is None else self.timeout
        memory_mb = GOLD_MEMORY_MB if self.memory_mb is None else self.memory_mb
        with open_postgres_sandbox(self.dsn, tables_dir, columns, Limits(timeout, memory_mb)) as box:
            def run(sql: str) -> list[tuple]:
                outcome = box.run(sql, timeout)
                if outcome.rows is None:
                    raise psycopg.Error(outcome.error or "the query gave no result")
                return [tuple(row) for row in outcome.rows]

            yield run


# --------------------------------------------------------------------------- the sandbox for candidate SQL


class PostgresSandbox:
    """One rotation's sandbox on a PostgreSQL server, for untrusted SQL; use as a context manager.

    Entering it, with the DSN's role (which must be able to create databases and roles):

    * a database of its own (from ``template0``) holds the rotation's tables (:func:`load_tables`) in ``public``;
      CONNECT, CREATE and TEMPORARY on it are revoked from PUBLIC, and so is every privilege on its ``public``
      schema; other rotations' sandboxes are other databases, whose tables and catalogs cannot be reached
      (PostgreSQL has no cross-database queries);
    * a login role of its own: NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS, member of
      no role (so none of pg_read_server_files, pg_write_server_files, pg_execute_server_program, pg_read_all_data),
      CONNECTION LIMIT 1, a random password; it may CONNECT to that database, USAGE its ``public`` schema and
      SELECT its tables, nothing else. Its defaults: ``default_transaction_read_only`` on, ``statement_timeout``
      the limit per query, ``lock_timeout``, ``idle_in_transaction_session_timeout``, ``work_mem`` from the working
      memory, no parallel workers, ISO dates in UTC, ``temp_file_limit`` (when the DSN's role is a superuser, which
      that setting needs). Entering checks these hold and refuses to run anything otherwise.

    What keeps the data as it is does not depend on what the candidate sends: the role owns nothing and holds
    SELECT alone, so a write fails for want of privilege even where a candidate has switched the read-only settings
    off; the read-only transaction and the cursor (which takes no data-changing CTE) are further layers.

    :meth:`run` takes one candidate. It runs in a worker process (:class:`PostgresWorker`), which holds the role's
    session and fetches the result under the worker's operating-system limits, so that no result, however large, is held
    in the scorer's own process. Text refused by :func:`evalpack.core.scoring.sql_refused` never reaches the server;
    otherwise ``BEGIN READ ONLY``, ``SET LOCAL statement_timeout`` to the time left, ``DECLARE evalpack_candidate NO
    SCROLL CURSOR FOR`` + the SQL (sent with the extended protocol, which carries exactly one statement; a cursor is
    only a SELECT, VALUES or WITH query without INSERT/UPDATE/DELETE in it), ``FETCH`` of 256 rows at a time up to the
    row cap + 1 and the byte cap, each under the time left, then ROLLBACK and ``DISCARD ALL``: nothing a candidate sets
    (``set_config`` included) or holds (an advisory lock) reaches the next one, which starts from the role's own
    settings. The time limit is kept from outside the candidate's session, so that no setting of its own switches it
    off: the worker's clock cancels the query at the limit (a cancel request through the postmaster; the session's
    ``statement_timeout``, armed before the candidate's query starts, is a second clock), the scorer kills the worker
    (and starts another) at the limit plus KILL_GRACE, and whenever a worker is killed the sandbox ends the role's
    sessions on the server from the DSN's role's own connection (:meth:`end_sessions`), so that no query goes on running
    there (``client_connection_check_interval`` on the role is the server's own backstop). A candidate that ends its own
    session is that candidate's error; the next one gets a new connection. Leaving drops the database (``WITH (FORCE)``:
    its sessions end) and the role, and raises RuntimeError when a table's rows, the database's relations or privileges,
    or the role's attributes, memberships or settings changed while candidates ran.
    """

    def __init__(self, dsn: str, tables_dir: Path, columns: Mapping[str, Mapping[str, str]],
                 limits: Limits = DEFAULT_LIMITS) -> None:
        self.dsn, self.tables_dir, self.columns, self.limits = dsn, Path(tables_dir), columns, limits
        self.database = self.role = _name("evalpack_sandbox")
        self.password = secrets.token_urlsafe(24)
        self.worker: PostgresWorker | None = None
        self.before: tuple | None = None
        self.created: list[str] = []
        self.loaded: dict[str, str] = {}

    # what evalpack.core.scoring.score_pack reads of a sandbox: its worker process's cap, peak and replacements
    cap_bytes = property(lambda self: self.worker.cap_bytes if self.worker else 0)
    peak_bytes = property(lambda self: self.worker.peak_bytes if self.worker else 0)
    replaced = property(lambda self: self.worker.replaced if self.worker else 0)

    def conninfo(self) -> str:
        """How the sandbox role connects to its database (its password included)."""
        return make_conninfo(self.dsn, user=self.role, password=self.password, dbname=self.database)

    # ----------------------------------------------------------------- setup and teardown

    def __enter__(self) -> PostgresSandbox:
        try:
            self._create()
            self.worker = PostgresWorker(self.conninfo(), self.tables_dir, self.limits, on_kill=self.end_sessions)
            self.worker.open()  # the role's one session is open from now on, in the worker
        except BaseException as exc:
            if self.worker is not None:
                self.worker.close()
            self._drop()
            if isinstance(exc, psycopg.Error):  # the server refused what the DSN's role asked of it
                raise EvalpackError(f"PostgreSQL refused to make the sandbox of {self.tables_dir.parent.name}: "
                                    f"{first_line(exc)}; --postgres-dsn needs a role that may create databases and "
                                    "roles (CREATEDB CREATEROLE) on a server that lets it") from None
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _admin(self, database: str | None = None) -> psycopg.Connection:
        return connect(make_conninfo(self.dsn, dbname=database) if database else self.dsn)

    def _create(self) -> None:
        db, role = pgsql.Identifier(self.database), pgsql.Identifier(self.role)
        timeout_ms = max(1, int(self.limits.timeout * 1000))
        with self._admin() as admin:
            admin.execute(pgsql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(db))
            self.created.append("database")
            admin.execute(pgsql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
            admin.execute(pgsql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION "
                                    "NOBYPASSRLS CONNECTION LIMIT 1 PASSWORD {}").format(role,
                                                                                         pgsql.Literal(self.password)))
            self.created.append("role")
            admin.execute(pgsql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, role))
            settings = {"default_transaction_read_only": "on", "statement_timeout": f"{timeout_ms}",
                        "lock_timeout": f"{timeout_ms}",
                        "idle_in_transaction_session_timeout": f"{timeout_ms * 4 + 60000}",
                        "work_mem": f"{max(4, int(self.limits.memory_mb) // 4)}MB",
                        "max_parallel_workers_per_gather": "0", "search_path": "public",
                        # the text forms psycopg reads dates, intervals and timestamps in
                        "datestyle": "ISO, MDY", "intervalstyle": "postgres", "timezone": "UTC"}
            superuser = admin.info.parameter_status("is_superuser") == "on"
            if superuser:
                settings["temp_file_limit"] = f"{max(64, int(self.limits.memory_mb))}MB"
            for name, value in settings.items():
                admin.execute(pgsql.SQL("ALTER ROLE {} IN DATABASE {} SET {} = {}").format(
                    role, db, pgsql.Identifier(name), pgsql.Literal(value)))
            if admin.info.server_version >= 140000:
                # a backend whose client is gone ends its query at the next look (Linux servers; elsewhere the
                # server refuses the setting and end_sessions is the only way)
                with contextlib.suppress(psycopg.Error):
                    admin.execute(pgsql.SQL("ALTER ROLE {} IN DATABASE {} SET client_connection_check_interval = "
                                            "{}").format(role, db, pgsql.Literal(CONNECTION_CHECK_MS)))
            if not superuser:
                # end_sessions signals the role's backends, which needs the role's privileges: the DSN's role is
                # made a member of it (the sandbox role is a member of nothing, so gains nothing)
                with contextlib.suppress(psycopg.Error):
                    admin.execute(pgsql.SQL("GRANT {} TO CURRENT_USER").format(role))
        with self._admin(self.database) as admin:
            admin.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
            for (function,) in admin.execute("SELECT oid::regprocedure::text FROM pg_proc WHERE proname ~ %s",
                                             [LARGE_OBJECT_FUNCTIONS]).fetchall():
                # only a superuser may revoke these (their owner is the bootstrap superuser); without it they stay
                # as the server ships them: lo_import and lo_export (files on the server) are for superusers, and
                # what the others create or change is rolled back with the candidate's transaction (the state check
                # at the end counts large objects too)
                with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                    admin.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC".encode())
            admin.execute("SET search_path TO public")
            load_tables(admin, self.tables_dir, self.columns)
            admin.execute(pgsql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role))
            admin.execute(pgsql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(role))
            self._check_role(admin)
            self.before = self.state(admin)

    def _check_role(self, admin: psycopg.Connection) -> None:
        """RuntimeError unless the role is what the docstring says: no superuser, no predefined role, no privilege
        but SELECT on this rotation's tables."""
        row = admin.execute(
            "SELECT rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls OR rolinherit, "
            "rolconnlimit, (SELECT count(*) FROM pg_auth_members WHERE member = r.oid) FROM pg_roles r "
            "WHERE rolname = %s", [self.role]).fetchone()
        grants = admin.execute(
            "SELECT DISTINCT privilege_type FROM information_schema.role_table_grants WHERE grantee = %s",
            [self.role]).fetchall()
        if row is None or row[0] or row[1] != 1 or row[2] != 0 or {g[0] for g in grants} != {"SELECT"}:
            raise RuntimeError("the PostgreSQL sandbox role is not read-only as required; refusing to run "
                               "untrusted SQL")

    def state(self, admin: psycopg.Connection) -> tuple:
        """What a candidate could have changed, as the DSN's role sees it in the sandbox database: every relation
        outside the system schemas (its owner and privileges too), the schemas' and the database's privileges,
        every large object, each table's row count and content digest, and the role itself: its attributes, the
        roles it is a member of and its settings (and the database's) that a session starts from."""
        relations = admin.execute(
            "SELECT n.nspname, c.relname, c.relkind, c.relowner::regrole::text, c.relacl::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2").fetchall()
        grants = admin.execute(
            "SELECT (SELECT array_agg(nspname || ':' || coalesce(nspacl::text, '') ORDER BY nspname) FROM "
            "pg_namespace), (SELECT datacl::text FROM pg_database WHERE datname = current_database())").fetchone()
        objects = admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        digests = [admin.execute(pgsql.SQL("SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY "
                                           "md5(t::text)), '')) FROM {} t").format(pgsql.Identifier(table))).fetchone()
                   for table in self.columns]
        role = admin.execute(
            "SELECT r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, r.rolreplication, "
            "r.rolbypassrls, r.rolconnlimit, r.rolvaliduntil::text, "
            "(SELECT array_agg(m.roleid::regrole::text ORDER BY 1) FROM pg_auth_members m WHERE m.member = r.oid), "
            "(SELECT array_agg(s.setrole::text || '@' || s.setdatabase::text || ':' || array_to_string(s.setconfig, "
            "',') ORDER BY 1) FROM pg_db_role_setting s WHERE s.setrole IN (r.oid, 0) AND s.setdatabase IN (0, "
            "(SELECT oid FROM pg_database WHERE datname = current_database()))) FROM pg_roles r WHERE r.rolname = %s",
            [self.role]).fetchone()
        return tuple(relations), grants, objects, tuple(digests), role

    def close(self) -> None:
        """Drop the database and the role; RuntimeError when the tables changed while candidates ran."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.close()
        changed = False
        if self.before is not None and "database" in self.created:
            with contextlib.suppress(psycopg.Error), self._admin(self.database) as admin:
                changed = self.state(admin) != self.before
        self._drop()
        if changed:
            raise RuntimeError(f"{self.tables_dir}: the PostgreSQL sandbox database changed while candidates ran; "
                               "scores from this run cannot be trusted")

    def end_sessions(self) -> None:
        """End every session of the sandbox role on the server, from a connection of the DSN's role, and wait (at
        most :data:`END_SECONDS`) until they are gone: a query a killed worker left running stops there and then,
        whatever it set in its own session, and the role's one connection slot is free for the next worker. A
        server that cannot be reached or refuses is left to its own clocks (``statement_timeout``,
        ``client_connection_check_interval``)."""
        if "role" not in self.created:
            return
        deadline = time.monotonic() + END_SECONDS
        with contextlib.suppress(psycopg.Error, EvalpackError), self._admin() as admin:
            while admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s",
                                [self.role]).fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.02)

    def _drop(self) -> None:
        if not self.created:
            return
        with self._admin() as admin:
            if "database" in self.created:
                admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pgsql.Identifier(self.database)))
            if "role" in self.created:
                admin.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(pgsql.Identifier(self.role)))
        self.created = []

    # ----------------------------------------------------------------- candidates

    def run_many(self, queries: Sequence[Query], deadline: float | None = None) -> Iterator[Outcome | None]:
        """Each of ``queries`` in the worker process, as :meth:`evalpack.core.scoring.SandboxWorker.run_many` runs them."""
        return self.worker.run_many(queries, deadline)

    def run(self, sql: str, timeout: float | None = None, max_rows: int = MAX_FETCH_ROWS,
            max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
        """One untrusted query in the worker process (:meth:`CandidateSession.run` there)."""
        return self.worker.run(sql, self.limits.timeout if timeout is None else timeout, max_rows, max_bytes)


class PostgresWorker(SandboxWorker):
    """The process where a PostgreSQL sandbox's candidates run (:func:`open_postgres_worker`): the sandbox role's
    session and every result it fetches live there, under the worker's operating-system limits (its address space
    above all: a row of a gigabyte of text fails there, not in the scorer), and it is killed at a query's time limit
    and a grace, as a DuckDB worker is (:class:`evalpack.core.scoring.SandboxWorker`)."""

    def __init__(self, conninfo: str, folder: Path, limits: Limits,
                 on_kill: Callable[[], Any] | None = None) -> None:
        super().__init__(folder, limits)
        self.conninfo, self.on_kill = conninfo, on_kill

    def _kill(self, proc: Any) -> None:
        """Kill the worker process, then have the sandbox end what its session left running on the server
        (``on_kill``: :meth:`PostgresSandbox.end_sessions`): a backend does not notice that its client died until
        it next looks."""
        try:
            super()._kill(proc)
        finally:
            if self.on_kill is not None:
                self.on_kill()

    def command(self) -> list[str]:
        # -I: no environment variables, no user site-packages, and the working folder is not on sys.path
        return [sys.executable, "-I", "-m", "evalpack.dialects.postgres", POSTGRES_WORKER_FLAG, str(os.getpid())]

    def setup(self) -> dict[str, Any]:
        return {"conninfo": self.conninfo, "timeout": self.limits.timeout, "memory_mb": self.limits.memory_mb,
                "threads": self.limits.threads}


POSTGRES_WORKER_FLAG = "--postgres-worker"


def open_postgres_worker(setup: dict, limits: Limits, on_connected: Callable[[], Any] | None = None
                         ) -> tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]:
    """The sandbox role's session in a worker process (:func:`evalpack.core.scoring.worker_main`'s ``opener``): how to run
    a query on it. Its state is the parent's to check (as the DSN's role, which sees every relation and large
    object): the worker reports none."""
    session = CandidateSession(setup["conninfo"], limits)
    return session.run, tuple, {}


def connect_sandbox_role(conninfo: str) -> psycopg.Connection:
    """The sandbox role's single connection (retried while an ended session still holds the slot); RuntimeError
    unless the session is read-only and no superuser's."""
    deadline = time.monotonic() + RECONNECT_SECONDS
    while True:
        try:
            # no server-side prepared statements: DISCARD ALL after each candidate drops them
            conn = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    settings = conn.execute("SELECT current_setting('default_transaction_read_only'), "
                            "current_setting('is_superuser'), current_setting('statement_timeout')").fetchone()
    if settings[0] != "on" or settings[1] != "off" or settings[2] in ("0", ""):
        conn.close()
        raise RuntimeError("the PostgreSQL sandbox session is not read-only and timed; refusing to run untrusted SQL")
    return conn


class CandidateSession:
    """The sandbox role's session, in the worker process: candidates one at a time (:meth:`run`)."""

    def __init__(self, conninfo: str, limits: Limits) -> None:
        self.conninfo, self.limits = conninfo, limits
        self.conn = connect_sandbox_role(conninfo)

    def run(self, sql: str, timeout: float | None = None, max_rows: int = MAX_FETCH_ROWS,
            max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
        """One untrusted query, as :func:`evalpack.core.scoring.run_query` runs one on DuckDB: an Outcome with its rows
        (at most ``max_rows``), or its error; ``timed_out`` when it was stopped after ``timeout`` seconds."""
        refused = sql_refused(sql)
        if refused:
            return Outcome(None, refused, 0.0)
        if "\x00" in sql:
            return Outcome(None, "rejected: the SQL holds a NUL character", 0.0)
        timeout = self.limits.timeout if timeout is None else timeout
        if self.conn is None or self.conn.closed or self.conn.broken:
            with contextlib.suppress(Exception):
                if self.conn is not None:
                    self.conn.close()
            self.conn = connect_sandbox_role(self.conninfo)
        conn = self.conn
        started = time.monotonic()
        deadline = started + timeout

        def cancel() -> None:
            with contextlib.suppress(Exception):
                conn.cancel_safe(timeout=KILL_GRACE / 4)

        rows: list[tuple] | None = None
        error, timed_out = None, False
        # the worker's one watchdog thread (started before its address space was limited) cancels the query at the
        # limit from outside the session (nothing the candidate sets there changes it); statement_timeout, armed
        # before the candidate's query starts, is the server's own clock, and the scorer kills this worker at the
        # limit and its grace
        with WATCHDOG.armed(timeout, cancel) as fired:
            try:
                with conn.cursor() as cur:
                    conn.execute("BEGIN READ ONLY")
                    self._time_left(conn, deadline)
                    cur.execute(f"DECLARE {CURSOR} NO SCROLL CURSOR FOR\n{sql}".encode(), binary=True)

                    def fetchmany(want: int) -> list[tuple]:
                        self._time_left(conn, deadline)
                        cur.execute(f"FETCH FORWARD {int(want)} FROM {CURSOR}".encode())
                        return [tuple(row) for row in cur.fetchall()]

                    rows, error = fetch_capped(fetchmany, max_rows, max_bytes)
            except (psycopg.errors.QueryCanceled, TimeoutError):
                timed_out = True
            except psycopg.Error as exc:
                error = _explained(exc, sql)
            except Exception as exc:  # noqa: BLE001 - a value Python cannot hold (a date out of range, no memory)
                error = f"cannot read the result: {type(exc).__name__}: {first_line(exc)}"
            finally:
                self._roll_back(conn)
        if timed_out:
            error = "canceled at the time limit"
        return query_outcome(rows, error, time.monotonic() - started, timeout, timed_out or fired.is_set(), max_rows)

    @staticmethod
    def _roll_back(conn: psycopg.Connection) -> None:
        """End the candidate's transaction and reset the session: nothing it set, created or held outlives it. A
        ROLLBACK can itself fail with the error of the query it ends (a cursor over temp_file_limit): it is asked
        again, and a session still in a transaction after that is closed, so that the next candidate gets a new one
        rather than an aborted one. Then ``DISCARD ALL``: every setting back to the role's own (what set_config
        changed session-wide, were it to outlive the transaction), advisory locks released, plans and cursors
        gone; a session where that fails is closed too."""
        for _ in range(2):
            with contextlib.suppress(Exception):
                if not conn.broken:
                    conn.execute("ROLLBACK")
            if conn.broken or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                break
        if not conn.broken and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            try:
                conn.execute("DISCARD ALL")
                return
            except Exception:  # noqa: BLE001 - whatever stops the reset, the session is not reused
                pass
        if not conn.closed:
            conn.close()

    @staticmethod
    def _time_left(conn: psycopg.Connection, deadline: float) -> None:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise TimeoutError
        conn.execute(f"SET LOCAL statement_timeout = {left}".encode())


def _explained(exc: psycopg.Error, sql: str) -> str:
    """The first line of a server error, said as the scorer says it where the cursor wrapping changes its words: a
    statement that is not a query, or more than one statement."""
    text = first_line(exc)
    if "cannot insert multiple commands" in text:
        return "rejected: expected exactly one statement"
    first = sql.split(None, 1)[0] if sql.split() else ""
    if isinstance(exc, psycopg.errors.SyntaxError) and first and text == f'syntax error at or near "{first}"' \
            and first.upper() not in QUERY_WORDS:
        return f"rejected: only a query (SELECT, WITH, VALUES or TABLE) may run, not {first.upper()}"
    return text


def open_postgres_sandbox(dsn: str, tables_dir: Path, columns: Mapping[str, Mapping[str, str]],
                          limits: Limits = DEFAULT_LIMITS) -> PostgresSandbox:
    """The sandbox of one rotation (``tables_dir``, typed by manifest.json's ``columns``) on the server at ``dsn``,
    under ``limits`` (its ``timeout`` is the role's ``statement_timeout``, its ``memory_mb`` sizes ``work_mem`` and
    ``temp_file_limit``). Use it as a context manager: entering creates the database and the role (see
    :class:`PostgresSandbox`), ``run(sql, timeout, max_rows, max_bytes)`` gives an
    :class:`evalpack.core.scoring.Outcome`, leaving drops them."""
    return PostgresSandbox(dsn, tables_dir, columns, limits)


def manifest_columns(pack: Path) -> dict[str, dict[str, str]]:
    """manifest.json's column types per table (table -> column -> DuckDB type)."""

    manifest = PackLayout(pack).read_manifest()
    return {table: dict(info["columns"]) for table, info in (manifest.get("tables") or {}).items()}


@contextlib.contextmanager
def postgres_sandboxes(pack: Path, dsn: str) -> Iterator[Callable[[str, Limits], PostgresSandbox]]:
    """:func:`evalpack.core.scoring.score_pack`'s ``sandbox`` for PostgreSQL: (rotation, limits) -> the rotation's
    :class:`PostgresSandbox`. InputError when the pack is not one evalpack built or the server cannot be reached."""
    pack = Path(pack)
    source = pack_source(pack)
    if source.producer != "evalpack":
        raise InputError(f"{pack}: --dialect postgres scores packs evalpack built (Parquet tables), not a pack "
                         f"{source.label} wrote; score it without --dialect")
    columns = manifest_columns(pack)
    with connect(dsn) as conn:
        can = conn.execute("SELECT rolsuper OR (rolcreatedb AND rolcreaterole) FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
    if not can or not can[0]:
        raise InputError("--postgres-dsn: its role may not create databases and roles (CREATEDB and CREATEROLE); "
                         "the sandbox needs both to give each rotation a database and a read-only role of its own")
    yield lambda rotation, limits: open_postgres_sandbox(dsn, source.tables_dir(rotation), columns, limits)


if __name__ == "__main__":
    if sys.argv[1:2] == [POSTGRES_WORKER_FLAG]:
        sys.exit(worker_main(sys.argv[2:], open_postgres_worker))
    sys.exit("usage: python -m evalpack.dialects.postgres --postgres-worker PARENT_PID (started by evalpack score)")
