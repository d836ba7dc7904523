"""Gold SQL in other SQL dialects: transpiled with sqlglot, run on the real engine, compared by the scorer's rules.

A pack's gold SQL is DuckDB's dialect. :func:`transpile` writes it for SQLite or PostgreSQL with sqlglot and a few
rewrites of our own where sqlglot's output would not run or would mean something else there (date truncation and
date parts in SQLite, ROUND of a float and PRINTF in PostgreSQL); what neither can write faithfully raises
:class:`Untranslatable`. :func:`write_sqlite` writes a rotation's tables as one SQLite file, typed as a SQLite user
expects. An engine (:class:`DialectEngine`: :class:`SqliteEngine` here, ``evalpack.postgres.PostgresEngine`` for
PostgreSQL) loads a rotation and runs gold SQL on it in that dialect's candidate sandbox, read-only by construction
(a pack someone else built has gold SQL as untrusted as a candidate's); :func:`verify_in_dialects` runs every
translated gold SQL on every rotation and keeps, per dialect, the questions that answer exactly as in DuckDB, and the
drops with their reasons. Nothing is shipped in a dialect unverified; a drop in a dialect changes nothing in the
DuckDB pack.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from evalpack.errors import EvalpackError
from evalpack.layout import DAMAGED
from evalpack.scoring import (
    DEFAULT_MEMORY_MB,
    MAX_FETCH_ROWS,
    ROWS_TYPE,
    Limits,
    answer_matches,
    answer_type_of,
    cell_key,
    expected_for,
    first_line,
    quote_ident,
    scorable,
    top_level_order_by,
)

DIALECTS = ("sqlite", "postgres")
SQLGLOT_NAMES = {"sqlite": "sqlite", "postgres": "postgres"}
Run = Callable[[str], list[tuple]]


class Untranslatable(Exception):
    """Gold SQL that cannot be written faithfully in a dialect; its str is the reason."""


# --------------------------------------------------------------------------- transpiling


def _unit(node: exp.Expression) -> str:
    unit = node.args.get("unit")
    return (unit.name if unit is not None else "").upper()


def _strftime_int(fmt: str, value: exp.Expression) -> exp.Expression:
    """CAST(STRFTIME(fmt, value) AS INTEGER): a date part as SQLite computes it from ISO text."""
    return exp.cast(_sqlite_call("STRFTIME", exp.Literal.string(fmt), value.copy()), exp.DataType.build("INTEGER"))


SQLITE_PARTS = {"YEAR": "%Y", "MONTH": "%m", "DAY": "%d", "HOUR": "%H", "MINUTE": "%M"}
SQLITE_PART_NODES = {exp.Year: "YEAR", exp.Month: "MONTH", exp.Day: "DAY"}


def _sqlite_quarter(value: exp.Expression) -> exp.Expression:
    return exp.Div(this=exp.Paren(this=exp.Add(this=_strftime_int("%m", value), expression=exp.Literal.number(2))),
                   expression=exp.Literal.number(3), typed=True)


def _sqlite_part(part: str, value: exp.Expression) -> exp.Expression:
    if part == "QUARTER":
        return _sqlite_quarter(value)
    if part not in SQLITE_PARTS:
        raise Untranslatable(f"the date part {part} has no SQLite equivalent here")
    return _strftime_int(SQLITE_PARTS[part], value)


def _sqlite_call(name: str, *args: exp.Expression) -> exp.Expression:
    """A call of SQLite's own function ``name``, written as is (sqlglot's builder would check another arity)."""
    return exp.Anonymous(this=name, expressions=list(args))


def _sqlite_trunc(node: exp.Expression) -> exp.Expression:
    """DATE_TRUNC(unit, value) as SQLite's DATETIME(value, modifiers): the period's first moment as ISO text,
    'YYYY-MM-DD 00:00:00', which is what DuckDB's TIMESTAMP result reads as (DuckDB truncates a DATE to a
    TIMESTAMP too)."""
    unit, value = _unit(node), node.this
    if unit in ("DAY", "MONTH", "YEAR"):
        return _sqlite_call("DATETIME", value.copy(), exp.Literal.string(f"start of {unit.lower()}"))
    if unit == "QUARTER":  # back (month - 1) % 3 months from the month's first day
        back = exp.Mod(this=exp.Paren(this=exp.Sub(this=_strftime_int("%m", value), expression=exp.Literal.number(1))),
                       expression=exp.Literal.number(3))
        shift = _sqlite_call("PRINTF", exp.Literal.string("-%d months"), back)
        return _sqlite_call("DATETIME", value.copy(), exp.Literal.string("start of month"), shift)
    raise Untranslatable(f"DATE_TRUNC to {unit or 'an unknown unit'} has no SQLite equivalent here")


# DuckDB constructs that SQLite has no faithful form of (sqlglot writes them anyway)
SQLITE_REFUSED = {exp.Interval: "interval arithmetic", exp.DateAdd: "date arithmetic", exp.DateSub: "date arithmetic",
                  exp.DateDiff: "DATEDIFF", exp.IntDiv: "integer division (//)", exp.DayOfWeek: "DAYOFWEEK",
                  exp.RegexpLike: "regular expressions", exp.Array: "lists", exp.Struct: "structs",
                  exp.Unnest: "UNNEST", exp.Pivot: "PIVOT"}


def decimal_scales(columns: Mapping[str, Mapping[str, str]] | None) -> dict[str, int]:
    """Column name -> scale of the columns that are DECIMAL in every table that has a column of that name."""
    scales: dict[str, int] = {}
    other: set[str] = set()
    for cols in (columns or {}).values():
        for name, kind in cols.items():
            found = re.fullmatch(r"\s*(?:DECIMAL|NUMERIC)\s*\(\s*\d+\s*,\s*(\d+)\s*\)\s*", kind, re.IGNORECASE)
            if found:
                scales[name] = max(scales.get(name, 0), int(found.group(1)))
            else:
                other.add(name)
    return {name: scale for name, scale in scales.items() if name not in other}


def _value_scales(node: exp.Expression, scales: Mapping[str, int]) -> list[tuple[int, bool]] | None:
    """(scale, is a column) of each decimal value ``node`` can take, when it is exact decimal arithmetic over decimal
    columns and number literals: +, -, unary minus, parentheses, NULL, and the values (not the conditions) of CASE,
    IF and COALESCE. None when any value is something else (text, another column type, a product, a function)."""
    if isinstance(node, exp.Column):
        return [(scales[node.name], True)] if node.name in scales else None
    if isinstance(node, exp.Literal):
        return None if node.is_string else [(len(node.this.partition(".")[2]), False)]
    if isinstance(node, exp.Null):
        return []
    if isinstance(node, exp.Case):
        parts = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
    elif isinstance(node, exp.If):
        parts = [node.args.get("true"), node.args.get("false")]
    elif isinstance(node, exp.Coalesce):
        parts = [node.this, *node.expressions]
    elif isinstance(node, (exp.Add, exp.Sub)):
        parts = [node.this, node.expression]
    elif isinstance(node, (exp.Neg, exp.Paren)):
        parts = [node.this]
    else:
        return None
    found: list[tuple[int, bool]] = []
    for part in parts:
        if part is None:  # a CASE without ELSE: NULL
            continue
        more = _value_scales(part, scales)
        if more is None:
            return None
        found += more
    return found


def _decimal_scale(node: exp.Expression, scales: Mapping[str, int]) -> int | None:
    """The scale of ``node`` when it is exact decimal arithmetic over decimal columns (:func:`_value_scales`), at
    least one of them a column; else None."""
    found = _value_scales(node, scales) or []
    return max(scale for scale, _ in found) if any(column for _, column in found) else None


def _exact_sums(scales: Mapping[str, int]) -> Callable[[exp.Expression], exp.Expression]:
    """SUM of decimals as SQLite's REAL sum rounded at the decimals' scale: the exact sum that DuckDB computes,
    as the nearest REAL (so that HAVING SUM(amount) >= 986115.60 and SUM(debit) <> SUM(credit) mean what they
    mean in DuckDB)."""
    def rewrite(node: exp.Expression) -> exp.Expression:
        # the whole aggregate: SUM(x), SUM(x) FILTER (...), SUM(x) OVER (...), SUM(x) FILTER (...) OVER (...)
        inner = node
        while isinstance(inner, (exp.Window, exp.Filter)):
            inner = inner.this
        if not isinstance(inner, exp.Sum) or isinstance(node.parent, (exp.Window, exp.Filter, exp.Round)):
            return node
        scale = _decimal_scale(inner.this, scales)
        if scale is None:
            return node
        return exp.Round(this=node.copy(), decimals=exp.Literal.number(scale))
    return rewrite


def _sqlite_rewrite(node: exp.Expression) -> exp.Expression:
    for kind, what in SQLITE_REFUSED.items():
        if isinstance(node, kind):
            raise Untranslatable(f"{what} has no faithful SQLite form")
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return _sqlite_trunc(node)
    for kind, part in SQLITE_PART_NODES.items():
        if type(node) is kind:
            return _sqlite_part(part, node.this)
    if isinstance(node, exp.Quarter):
        return _sqlite_quarter(node.this)
    if isinstance(node, exp.Extract):
        return _sqlite_part(node.this.name.upper(), node.expression)
    return node


def _printf_pieces(fmt: str) -> list[tuple[str, int | None]]:
    """PRINTF's format as (literal text, None) and (conversion, zero-pad width) pieces: %d, %0Nd, %s and %%."""
    pieces: list[tuple[str, int | None]] = []
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            j = fmt.find("%", i)
            j = len(fmt) if j < 0 else j
            pieces.append((fmt[i:j], None))
            i = j
            continue
        j = i + 1
        while j < len(fmt) and fmt[j].isdigit():
            j += 1
        spec, conv = fmt[i + 1:j], fmt[j] if j < len(fmt) else ""
        if conv == "%" and not spec:
            pieces.append(("%", None))
        elif conv in ("d", "s") and (not spec or (conv == "d" and spec.startswith("0"))):
            pieces.append((conv, int(spec) if spec else 0))
        else:
            raise Untranslatable(f"PRINTF format {fmt!r}: only %d, %0Nd, %s and %% have a PostgreSQL form here")
        i = j + 1
    return pieces


def _postgres_printf(node: exp.Anonymous) -> exp.Expression:
    """PRINTF('%04d-%02d', a, b) as LPAD(CAST(a AS TEXT), 4, '0') || '-' || ...: PostgreSQL's FORMAT pads no zeros."""
    args = list(node.expressions)
    if not args or not isinstance(args[0], exp.Literal) or not args[0].is_string:
        raise Untranslatable("PRINTF with a format that is not a literal has no PostgreSQL form here")
    values = iter(args[1:])
    parts: list[exp.Expression] = []
    for text, width in _printf_pieces(args[0].this):
        if width is None:
            parts.append(exp.Literal.string(text))
            continue
        value = next(values, None)
        if value is None:
            raise Untranslatable("PRINTF with fewer values than its format asks for")
        as_text = exp.cast(value.copy(), exp.DataType.build("TEXT"))
        parts.append(exp.func("LPAD", as_text, exp.Literal.number(width), exp.Literal.string("0")) if width
                     else as_text)
    if next(values, None) is not None:
        raise Untranslatable("PRINTF with more values than its format uses")
    out = parts[0] if parts else exp.Literal.string("")
    for part in parts[1:]:
        out = exp.DPipe(this=out, expression=part, safe=True)
    return exp.Paren(this=out)


def _postgres_rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
        # PostgreSQL rounds to decimals only a NUMERIC (ROUND(double precision, int) does not exist)
        value = node.this
        if not (isinstance(value, exp.Cast) and value.to.is_type("decimal")):
            node.set("this", exp.cast(value.copy(), exp.DataType.build("NUMERIC")))
        return node
    if isinstance(node, exp.Anonymous) and str(node.this).upper() == "PRINTF":
        return _postgres_printf(node)
    return node


REWRITES: dict[str, Callable[[exp.Expression], exp.Expression]] = {"sqlite": _sqlite_rewrite,
                                                                   "postgres": _postgres_rewrite}


def transpile(sql: str, dialect: str, *, columns: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """``sql`` (DuckDB's dialect, one statement) written in ``dialect`` (one of :data:`DIALECTS`).

    sqlglot transpiles (raising on what it knows it cannot write), after our rewrites of what it would write
    wrongly or not at all for that engine. ``columns`` (table -> column -> DuckDB type, the manifest's) lets the
    SQLite form keep sums of decimals exact (:func:`_exact_sums`): SQLite stores them as REAL. Raises
    :class:`Untranslatable` with the reason, ValueError for an unknown dialect."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; use one of {', '.join(DIALECTS)}")
    try:
        trees = sqlglot.parse(sql, read="duckdb", error_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise Untranslatable(f"sqlglot cannot parse it: {first_line(exc)}") from None
    if len(trees) != 1 or trees[0] is None:
        raise Untranslatable("not exactly one statement")
    tree = trees[0]
    if dialect == "sqlite" and decimal_scales(columns):
        tree = tree.transform(_exact_sums(decimal_scales(columns)))
    tree = tree.transform(REWRITES[dialect])
    try:
        return tree.sql(dialect=SQLGLOT_NAMES[dialect], unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise Untranslatable(f"sqlglot cannot write it for {dialect}: {first_line(exc)}") from None


# --------------------------------------------------------------------------- keys and SQLite files


@dataclass(frozen=True)
class ForeignKey:
    child_table: str
    child_column: str
    parent_table: str
    parent_column: str


@dataclass(frozen=True)
class Keys:
    """The keys a pack declares: a primary key column per table (where it has one) and the foreign keys."""

    primary: tuple[tuple[str, str], ...] = ()  # (table, column)
    foreign: tuple[ForeignKey, ...] = ()
    linked: tuple[ForeignKey, ...] = ()  # an imported pack's links: both columns indexed, not declared as keys

    def primary_of(self, table: str) -> str | None:
        return dict(self.primary).get(table)

    def foreign_of(self, table: str) -> list[ForeignKey]:
        return [fk for fk in self.foreign if fk.child_table == table]


def keys_of(manifest: Mapping[str, Any]) -> Keys:
    """The keys ``manifest.json`` declares: ``primary_keys`` (table -> column) and ``declared_links`` (the
    foreign keys, whose parent columns are unique by the spec's rule). A pack written before ``primary_keys``
    existed gets the parent columns of its links as primary keys."""
    links = manifest.get("declared_links") or []
    foreign = tuple(ForeignKey(str(e["child_table"]), str(e["child_column"]), str(e["parent_table"]),
                               str(e["parent_column"])) for e in links if isinstance(e, dict))
    given = manifest.get("primary_keys")
    if isinstance(given, dict):
        primary = {str(t): str(c) for t, c in given.items() if isinstance(c, str)}
    else:
        primary = {}
        for fk in foreign:
            primary.setdefault(fk.parent_table, fk.parent_column)
    linked = []  # an import's links (manifest.json -> relationships: "child": "t.c", "parent": "t.c")
    for entry in manifest.get("relationships") or ():
        sides = [entry.get("child"), entry.get("parent")] if isinstance(entry, dict) else []
        parts = [side.split(".") for side in sides if isinstance(side, str)]
        if len(parts) == 2 and all(len(part) == 2 and all(part) for part in parts):
            link = ForeignKey(*parts[0], *parts[1])
            if link not in foreign and link not in linked:
                linked.append(link)
    return Keys(tuple(primary.items()), foreign, tuple(linked))


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


def sqlite_ddl(table: str, columns: Mapping[str, str], keys: Keys = Keys()) -> str:
    """CREATE TABLE for one table: SQLite types, the primary key and the foreign keys it declares."""
    pk = keys.primary_of(table)
    lines = [f"{quote_ident(c)} {sqlite_type(t)}{' NOT NULL PRIMARY KEY' if c == pk else ''}"
             for c, t in columns.items()]
    lines += [f"FOREIGN KEY ({quote_ident(fk.child_column)}) REFERENCES {quote_ident(fk.parent_table)} "
              f"({quote_ident(fk.parent_column)})" for fk in keys.foreign_of(table)]
    return f"CREATE TABLE {quote_ident(table)} (\n  " + ",\n  ".join(lines) + "\n)"


BATCH_BYTES = 16 * 2**20  # Arrow bytes of a table file turned into Python values at a time (a batch's rows)
BATCH_ROWS = 1 << 16  # and at most this many rows


def parquet_batches(path: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of a pack's table file, ``columns`` only (the manifest's), in file order, each of at most
    :data:`BATCH_BYTES` (one row larger than that alone) and :data:`BATCH_ROWS` rows: the rows read at a time follow
    the file's own sizes, and a batch larger than its file said is sliced. EvalpackError naming the file when it
    cannot be read as Parquet or lacks one of ``columns`` (:func:`table_file`)."""
    parquet = table_file(path, columns)
    try:
        for batch in parquet.iter_batches(columns=columns, batch_size=_rows_per_batch(parquet, columns)):
            yield from _sliced(batch)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(path, exc) from None


def table_file(path: Path, columns: Iterable[str]) -> pq.ParquetFile:
    """A pack's table file, opened; EvalpackError naming the file when it is missing, cannot be read as Parquet or
    lacks one of ``columns`` (the manifest's): a pack from elsewhere may hold anything there."""
    try:
        parquet = pq.ParquetFile(path)
    except FileNotFoundError:
        raise EvalpackError(f"{path}: no such table file; manifest.json lists the table {path.stem!r}; {DAMAGED}") \
            from None
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(path, exc) from None
    missing = [c for c in columns if c not in parquet.schema_arrow.names]
    if missing:
        raise EvalpackError(f"{path}: no column {missing[0]!r}, which manifest.json lists for table "
                            f"{path.stem!r}; {DAMAGED}")
    return parquet


def unreadable_table(path: Path, exc: BaseException) -> EvalpackError:
    """The error for a table file that cannot be read as Parquet, naming it and why."""
    return EvalpackError(f"{path}: not a Parquet table evalpack can read ({first_line(exc)}); {DAMAGED}")


def _rows_per_batch(parquet: pq.ParquetFile, columns: list[str]) -> int:
    """How many rows of ``columns`` take about :data:`BATCH_BYTES` by the file's largest row group (its uncompressed
    sizes), within 1 .. :data:`BATCH_ROWS`."""
    meta, wanted, widest = parquet.metadata, set(columns), 0.0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns)
                   if group.column(c).path_in_schema in wanted)
        widest = max(widest, size / max(1, group.num_rows))
    return int(max(1, min(BATCH_ROWS, BATCH_BYTES // max(1.0, widest))))


def _sliced(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in consecutive slices of at most :data:`BATCH_BYTES` each (a row larger than that alone)."""
    if batch.nbytes <= BATCH_BYTES or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, batch.num_rows * BATCH_BYTES // batch.nbytes)
    for start in range(0, batch.num_rows, rows):
        yield from _sliced(batch.slice(start, rows))


def load_sqlite(con: sqlite3.Connection, tables_dir: Path, columns: Mapping[str, Mapping[str, str]],
                keys: Keys = Keys()) -> None:
    """Create and fill, in ``con``, one table per entry of ``columns`` from ``tables_dir/<table>.parquet``
    (rows in file order, one transaction), and index each foreign key column."""
    with con:
        for table, cols in columns.items():
            con.execute(sqlite_ddl(table, cols, keys))
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


@contextlib.contextmanager
def file_into_place(path: Path) -> Iterator[Path]:
    """Write a file at ``path`` whole or not at all: yields an empty temporary file beside it, which is made
    readable by all and renamed onto ``path`` when the block ends without an error, and removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(name)
        os.chmod(name, 0o644)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise


def write_sqlite(tables_dir: Path, columns: dict[str, dict[str, str]], path: Path, *, keys: Keys = Keys()) -> None:
    """One SQLite file at ``path`` holding a rotation's tables (:func:`load_sqlite`), written beside it and
    renamed into place only when complete (:func:`file_into_place`). The same input gives the same bytes with the
    same SQLite version (the file's header records the version that wrote it)."""
    with file_into_place(path) as name:  # SQLite takes an empty file for an empty database
        con = sqlite3.connect(name)
        try:
            con.execute("PRAGMA page_size=4096")
            con.execute("PRAGMA journal_mode=OFF")
            load_sqlite(con, tables_dir, columns, keys)
        finally:
            con.close()


# --------------------------------------------------------------------------- engines


class DialectEngine(Protocol):
    """A real engine of one dialect, for a pack's gold SQL: ``open_rotation`` loads a rotation's tables and yields a
    ``run(sql) -> rows`` function (run in the dialect's sandbox, where nothing can change the tables); leaving the
    context drops what it loaded."""

    name: str

    def open_rotation(self, tables_dir: Path, columns: dict[str, dict[str, str]]
                      ) -> contextlib.AbstractContextManager[Callable[[str], list[tuple]]]: ...


@dataclass(frozen=True)
class SqliteEngine:
    """The standard library's sqlite3, on a rotation written as a SQLite file in a private temporary folder."""

    keys: Keys = Keys()
    name: str = "sqlite"

    @contextlib.contextmanager
    def open_rotation(self, tables_dir: Path, columns: dict[str, dict[str, str]]) -> Iterator[Run]:
        """The rotation written as the export writes it, its queries run in the scorer's SQLite sandbox: a worker
        process under the candidates' limits (a pack someone else built has gold SQL as untrusted as a candidate's:
        ``VACUUM INTO`` or ``ATTACH`` would write files, and a query could take all the memory there is), each query
        stopped after :data:`GOLD_SECONDS`; a query's error is raised as sqlite3.Error with the sandbox's words."""
        from evalpack import debris
        from evalpack.dialect_scoring import SqliteWorker

        with debris.sqlite_scratch() as folder:
            database = folder / "rotation.sqlite"
            write_sqlite(tables_dir, columns, database, keys=self.keys)
            with SqliteWorker(database, folder, Limits(GOLD_SECONDS, GOLD_MEMORY_MB)) as worker:
                def run(sql: str) -> list[tuple]:
                    outcome = worker.run(sql, GOLD_SECONDS, max_rows=MAX_FETCH_ROWS)
                    if outcome.rows is None:
                        raise sqlite3.Error(outcome.error)
                    return [tuple(row) for row in outcome.rows]

                yield run


GOLD_SECONDS = 120.0  # a gold query's time in a dialect's engine before it is that question's error
GOLD_MEMORY_MB = DEFAULT_MEMORY_MB  # and its working memory in SQLite (the scorer's default for a candidate)


def engine_for(dialect: str, *, postgres_dsn: str | None = None, keys: Keys = Keys()) -> DialectEngine:
    """The engine of ``dialect``: :class:`SqliteEngine`, or ``evalpack.postgres.PostgresEngine`` on the server at
    ``postgres_dsn``. Raises EvalpackError for an unknown dialect, a missing DSN or a missing PostgreSQL module."""
    if dialect == "sqlite":
        return SqliteEngine(keys)
    if dialect == "postgres":
        if not postgres_dsn:
            raise EvalpackError("the postgres dialect needs a server: give --postgres-dsn (or set "
                                "EVALPACK_POSTGRES_DSN), e.g. postgresql://user@localhost:5432/evalpack")
        try:
            from evalpack.postgres import PostgresEngine
        except ImportError as exc:
            raise EvalpackError(f"the postgres dialect is not available in this evalpack ({exc}); "
                                f"use one of: sqlite") from None
        return PostgresEngine(postgres_dsn)
    raise EvalpackError(f"unknown dialect {dialect!r}; use one of {', '.join(DIALECTS)}")


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True)
class Drop:
    """A question left out of one dialect, and why (``untranslatable``, ``error``, ``mismatch``, or ``inexact``:
    the exact translation verified but the query as the dialect's users write it answers differently)."""

    id: str
    kind: str
    reason: str
    rotation: str | None = None
    sql: str | None = None  # the translation that failed or differed (None: untranslatable)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "drop": self.kind, "rotation": self.rotation, "reason": self.reason, "sql": self.sql}


@dataclass(frozen=True)
class DialectResult:
    """One dialect's verification: the translated gold SQL of each question that verified on every rotation
    (in question order), and the drops."""

    dialect: str
    translated: dict[str, str] = field(default_factory=dict)
    drops: tuple[Drop, ...] = ()

    @property
    def checked(self) -> int:
        return len(self.translated) + len(self.drops)

    @property
    def drop_rate(self) -> float:
        return len(self.drops) / self.checked if self.checked else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``dialects.<name>`` entry."""
        return {"checked": self.checked, "verified": len(self.translated), "dropped": len(self.drops),
                "drop_rate": round(self.drop_rate, 4), "drops": [d.to_dict() for d in self.drops]}


def _type_name(value: Any) -> str:
    return "NULL" if value is None else type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def first_difference(record: dict, expected: Any, rows: list[tuple]) -> str:
    """Where ``rows`` first differs from ``expected``: the values and their types (rows in canonical order)."""
    if answer_type_of(record) != ROWS_TYPE:
        if len(rows) != 1 or len(rows[0]) != 1:
            return f"expected one value, got {len(rows)} row(s) of {len(rows[0]) if rows else 0} column(s)"
        got = rows[0][0]
        return f"expected {_show(expected)} ({_type_name(expected)}), got {_show(got)} ({_type_name(got)})"
    if not isinstance(expected, list) or len(expected) != len(rows):
        return f"expected {len(expected) if isinstance(expected, list) else '?'} row(s), got {len(rows)}"
    places = record.get("round_decimals")

    def order(table: list) -> list:
        return sorted(table, key=lambda row: repr([cell_key(v, places) for v in row]))

    for i, (want, got) in enumerate(zip(order(expected), order(rows), strict=True)):
        if len(want) != len(got):
            return f"row {i + 1}: expected {len(want)} column(s), got {len(got)}"
        for j, (a, b) in enumerate(zip(want, got, strict=True)):
            if cell_key(a, places) != cell_key(b, places):
                return (f"row {i + 1}, column {j + 1}: expected {_show(a)} ({_type_name(a)}), "
                        f"got {_show(b)} ({_type_name(b)})")
    return "the rows differ in order"


def _plain_forms(questions: list[dict], translated: Mapping[str, str], dialect: str) -> dict[str, str]:
    """The gold SQL as a user of ``dialect`` writes it, where the translation differs from it: in SQLite, sums of
    decimals without :func:`_exact_sums`' rounding (SQLite stores decimals as REAL)."""
    if dialect != "sqlite":
        return {}
    out = {}
    for r in questions:
        if r["id"] in translated:
            with contextlib.suppress(Untranslatable):  # then the exact form, which verified, is the only form
                sql = transpile(r["gold_sql"], dialect)
                if sql != translated[r["id"]]:
                    out[r["id"]] = sql
    return out


def _inexact(record: dict, expected: Any, ordered: bool, sql: str, run: Callable[[str], list[tuple]]) -> str | None:
    """Why a question whose exact translation verified cannot be asked in this dialect: its plain form
    (:func:`_plain_forms`) answers differently, so a user's natural query would be scored wrong for the engine's
    arithmetic, not for its meaning. None when the plain form answers the same."""
    try:
        rows = run(sql)
    except Exception as exc:  # the engine's own error, whatever its driver calls it
        return f"the same query with plain sums of its REAL decimals fails: {first_line(exc)}"
    if answer_matches(record, expected, rows, ordered=ordered):
        return None
    return (f"SQLite stores decimals as REAL, so the same query with plain sums answers differently "
            f"({first_difference(record, expected, rows)}): a natural SQLite query would be scored wrong for "
            f"floating-point rounding, not for its meaning")


def verify_in_dialects(records: Iterable[dict], rotations: Mapping[str, Path], columns: dict[str, dict[str, str]],
                       engines: Iterable[DialectEngine]) -> dict[str, DialectResult]:
    """Each scorable question of ``records`` (gold SQL in DuckDB's dialect, expected answer per rotation) on each
    rotation (name -> tables folder) in each engine's dialect: transpiled, run, compared by the scorer's rules
    (:func:`evalpack.scoring.answer_matches`, in order when the gold SQL orders its result at the top level).
    Returns per dialect the translated SQL of the questions that matched on every rotation and the drops:
    untranslatable, an error (its first line) or a mismatch naming the rotation and the first differing value."""
    questions = [r for r in records if scorable(r)]
    with duckdb.connect(":memory:") as con:
        ordered = {r["id"]: top_level_order_by(con, r["gold_sql"]) for r in questions}
    results = {}
    for engine in engines:
        translated: dict[str, str] = {}
        drops: dict[str, Drop] = {}
        for r in questions:
            try:
                translated[r["id"]] = transpile(r["gold_sql"], engine.name, columns=columns)
            except Untranslatable as exc:
                drops[r["id"]] = Drop(r["id"], "untranslatable", str(exc))
        plain = _plain_forms(questions, translated, engine.name)
        for rotation, tables_dir in rotations.items():
            with engine.open_rotation(Path(tables_dir), columns) as run:
                for r in questions:
                    qid = r["id"]
                    if qid in drops:
                        continue
                    try:
                        rows = run(translated[qid])
                    except Exception as exc:  # the engine's own error, whatever its driver calls it
                        drops[qid] = Drop(qid, "error", first_line(exc), rotation, translated[qid])
                        continue
                    expected = expected_for(r, rotation)
                    if not answer_matches(r, expected, rows, ordered=ordered[qid]):
                        drops[qid] = Drop(qid, "mismatch", first_difference(r, expected, rows), rotation,
                                          translated[qid])
                    elif qid in plain:
                        inexact = _inexact(r, expected, ordered[qid], plain[qid], run)
                        if inexact is not None:
                            drops[qid] = Drop(qid, "inexact", inexact, rotation, plain[qid])
        results[engine.name] = DialectResult(
            engine.name, {q["id"]: translated[q["id"]] for q in questions if q["id"] not in drops},
            tuple(drops[q["id"]] for q in questions if q["id"] in drops))
    return results
