"""Gold SQL in other SQL dialects: transpiled with sqlglot, run on the real engine, compared by the scorer's rules.

A pack's gold SQL is DuckDB's dialect. :func:`transpile` writes it for SQLite or PostgreSQL with sqlglot and a few
rewrites of our own where sqlglot's output would not run or would mean something else there (date truncation and
date parts in SQLite, ROUND of a float and PRINTF in PostgreSQL); what neither can write faithfully raises
:class:`Untranslatable`. :func:`write_sqlite` writes a rotation's tables as one SQLite file, typed as a SQLite user
expects. An engine (:class:`DialectEngine`: :class:`SqliteEngine` here, ``evalpack.dialects.postgres.PostgresEngine`` for
PostgreSQL) loads a rotation and runs gold SQL on it in that dialect's candidate sandbox, read-only by construction
(a pack someone else built has gold SQL as untrusted as a candidate's); :func:`verify_in_dialects` runs every
translated gold SQL on every rotation and keeps, per dialect, the questions that answer exactly as in DuckDB, and the
drops with their reasons. Nothing is shipped in a dialect unverified; a drop in a dialect changes nothing in the
DuckDB pack.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb

from evalpack.core import debris
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import (
    MAX_FETCH_ROWS,
    ROWS_TYPE,
    Limits,
    answer_matches,
    answer_type_of,
    cell_key,
    expected_for,
    first_line,
    scorable,
    top_level_order_by,
)
from evalpack.dialects import DIALECTS
from evalpack.dialects.common import GOLD_MEMORY_MB, GOLD_SECONDS, Comments, Keys, Run
from evalpack.dialects.postgres import DSN_ENV, PostgresEngine
from evalpack.dialects.sqlite import SqliteWorker, write_sqlite
from evalpack.dialects.translate import Untranslatable, transpile

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
    """The standard library's sqlite3, on a rotation written as a SQLite file in a private temporary folder (with the
    pack's keys and its data dictionary's comments, as the export writes it)."""

    keys: Keys = Keys()
    name: str = "sqlite"
    comments: Comments = Comments()

    @contextlib.contextmanager
    def open_rotation(self, tables_dir: Path, columns: dict[str, dict[str, str]]) -> Iterator[Run]:
        """The rotation written as the export writes it, its queries run in the scorer's SQLite sandbox: a worker
        process under the candidates' limits (a pack someone else built has gold SQL as untrusted as a candidate's:
        ``VACUUM INTO`` or ``ATTACH`` would write files, and a query could take all the memory there is), each query
        stopped after :data:`GOLD_SECONDS`; a query's error is raised as sqlite3.Error with the sandbox's words."""

        with debris.sqlite_scratch() as folder:
            database = folder / "rotation.sqlite"
            write_sqlite(tables_dir, columns, database, keys=self.keys, comments=self.comments)
            with SqliteWorker(database, folder, Limits(GOLD_SECONDS, GOLD_MEMORY_MB)) as worker:
                def run(sql: str) -> list[tuple]:
                    outcome = worker.run(sql, GOLD_SECONDS, max_rows=MAX_FETCH_ROWS)
                    if outcome.rows is None:
                        raise sqlite3.Error(outcome.error)
                    return [tuple(row) for row in outcome.rows]

                yield run




def engine_for(dialect: str, *, postgres_dsn: str | None = None, keys: Keys = Keys(),
               comments: Comments = Comments()) -> DialectEngine:
    """The engine of ``dialect``: :class:`SqliteEngine` (``comments``: the data dictionary's, in its schema), or
    ``evalpack.dialects.postgres.PostgresEngine`` on the server at ``postgres_dsn``. Raises EvalpackError for an
    unknown dialect or a missing DSN."""
    if dialect == "sqlite":
        return SqliteEngine(keys, comments=comments)
    if dialect == "postgres":
        if not postgres_dsn:
            raise EvalpackError(f"the postgres dialect needs a server: give --postgres-dsn (or set {DSN_ENV}), e.g. "
                                "postgresql://user@localhost:5432/evalpack")
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
    (:func:`evalpack.core.scoring.answer_matches`, in order when the gold SQL orders its result at the top level).
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
