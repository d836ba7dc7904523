"""The golden checks, written once: empty result, orphan dependence and a tie at ORDER BY ... LIMIT.

Build-time verification (:mod:`evalpack.checks.verification`), the audit (:mod:`evalpack.checks.audit`, also run by
``evalpack build``) and the importer all call :func:`check` and differ only in how they report its
:class:`Golden`. The rules (README.md, "Golden checks"):

- **same answer** (:func:`same_rows`): two results are the same answer when their rows are equal
  as a multiset, in order only when the answer is compared in order (``answer_type`` ``rows``
  with a top-level ORDER BY); cells compare under the answer comparison's cell rule
  (:func:`evalpack.core.scoring.cell_key`: numbers as exact decimals rounded half-to-even at the
  question's ``round_decimals``, NULL equal to NULL), floating-point values first at 12
  significant digits so that summation-order noise is not a difference.
- **empty** (:func:`is_empty`): no rows, or a first row of only NULL, unless marked ``expected_empty``.
- **orphan dependence** (:func:`orphan_effect`): with every child table of a link that has orphan
  rows replaced by its rows whose parent exists (or whose key is NULL), the query must return the
  same answer; not applied to questions about orphans, nor when a tie already makes the answer vary.
- **tie** (:func:`find_tie`): at each cut of an ORDER BY ... LIMIT (after the last kept row, and
  before the first kept row when there is an OFFSET) the rows on either side have equal sort keys
  *and* are not the same answer: which of them is returned then depends on row order. Tied rows
  that read the same are no tie.

A check whose rewritten query cannot be built (sqlglot cannot parse the SQL, or the LIMIT or
OFFSET is not a number) does not apply; one whose rewritten query fails to run fails.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from evalpack.core import cache
from evalpack.core.scoring import ROWS_TYPE, cell_key, first_line, kept_order, parsed_order_by, quote_ident
from evalpack.questions.derive import DIALECT, parse_gold

# --------------------------------------------------------------------------- results


def read_back(value: Any) -> Any:
    """``value`` as it reads back from a pack file's JSON (for comparing with values recorded there); not
    :func:`evalpack.core.scoring.jsonable`, which makes a value JSON-safe for a report."""
    return json.loads(json.dumps(value, default=str))


def typed(value: Any) -> Any:
    """One value of a result as a pack file records it, keeping its type: an integer stays an integer, a
    decimal or a float is a JSON number (a decimal the nearest double: exact up to 15 significant digits),
    NULL is null, a date, timestamp or time is its ISO text (the only values that become text besides text:
    UUIDs and the like), a list or a struct stays one. Infinity and NaN, which JSON has no number for, are
    written as their text.

    >>> typed(Decimal("532348211.65")), typed(Decimal("0.0")), typed(None), typed(dt.date(1995, 3, 11))
    (532348211.65, 0.0, None, '1995-03-11')
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [typed(v) for v in value]
    if isinstance(value, dict):
        return {str(k): typed(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def recorded_result(rows: list[tuple], ordered: bool = True) -> Any:
    """What pack files record of a result, with :func:`typed` values: the scalar when the result is one row
    of one column, else its first 5 rows (in a canonical order when the answer is not compared in order, so
    the record does not depend on row order)."""
    if len(rows) == 1 and len(rows[0]) == 1:
        return typed(rows[0][0])
    listed = [typed(list(r)) for r in rows]
    if not ordered:
        listed.sort(key=lambda row: json.dumps(row, sort_keys=True))
    return listed[:5]


def _record_key(value: Any) -> Any:
    if isinstance(value, list):
        return ("list", tuple(_record_key(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((str(k), _record_key(v)) for k, v in value.items())))
    return cell_key(value)


def same_record(a: Any, b: Any) -> bool:
    """Whether two recorded results (:func:`recorded_result`, as read back from JSON) are the same: numbers
    as numbers (floats at 12 significant digits, so summation-order noise is not a change), text exactly.

    >>> same_record([[1, 0.1 + 0.2]], [[1, 0.3]]), same_record(532348211.65, "532348211.65")
    (True, False)
    """
    return _record_key(a) == _record_key(b)


@dataclass(frozen=True)
class Run:
    """One query's result on one connection: the rows, or the first line of the error."""

    rows: list[tuple] | None
    error: str | None = None

    @property
    def value(self) -> Any:
        """The observed value in the form pack files record (the scalar, or up to 5 rows; :func:`typed`)."""
        return None if self.rows is None else recorded_result(self.rows)

    @property
    def empty(self) -> bool:
        return self.rows is not None and is_empty(self.rows)

    def recorded(self) -> Any:
        """What a pack file records for this run: the value, or ``error: ...``."""
        return self.value if self.error is None else f"error: {self.error}"

    def describe(self) -> str:
        """The result in words for a report: ``no rows``, ``one row holding NULL``, or the recorded value."""
        if self.error is not None:
            return f"an error ({self.error})"
        if self.rows is not None and (not self.rows or is_empty(self.rows)):
            return empty_text(self.rows)
        return shown(self.value)


Runner = Callable[[duckdb.DuckDBPyConnection, str], Run]


def run_trusted(con: duckdb.DuckDBPyConnection, sql: str) -> Run:
    """Run SQL evalpack wrote itself on ``con`` (no sandbox, no time limit)."""
    try:
        return Run(con.execute(sql).fetchall())
    except duckdb.Error as exc:
        return Run(None, first_line(exc))


def is_empty(rows: list[tuple]) -> bool:
    """No rows, or a first row of only NULL."""
    return not rows or all(v is None for v in rows[0])


def empty_text(rows: list[tuple]) -> str:
    """What an empty result (:func:`is_empty`) is, in words: no rows and a row holding NULL are not the same.

    >>> empty_text([]), empty_text([(None,)]), empty_text([(None, None)]), empty_text([(None,), (1,)])
    ('no rows', 'one row holding NULL', 'one row holding only NULL (2 columns)', '2 rows, the first holding only NULL')
    """
    if not rows:
        return "no rows"
    if len(rows) == 1:
        return "one row holding NULL" if len(rows[0]) == 1 else f"one row holding only NULL ({len(rows[0])} columns)"
    return f"{len(rows)} rows, the first holding only NULL"


def shown(value: Any, width: int = 80) -> str:
    """A recorded value as JSON text for a report line, cut at ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------- how an answer differs


def value_type(value: Any, side: str = "query") -> str:
    """The type of one cell in words: of the answer as written (``side="answer"``: JSON's null, integer,
    number, text) or of what the query returned (DuckDB's NULL, integer, decimal, double, text, date, ...)."""
    if value is None:
        return "null" if side == "answer" else "NULL"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number" if side == "answer" else "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dt.datetime):
        return "timestamp"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    if isinstance(value, uuid.UUID):
        return "uuid"
    return type(value).__name__


def _cell_text(value: Any, side: str) -> str:
    if value is None:
        return "null" if side == "answer" else "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, (dt.date, dt.time)):
        return typed(value)
    return shown(typed(value), 60)


def _plain(value: Any) -> str:
    """A cell's digits or characters without its type (text unquoted, a date as ISO text)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dt.date, dt.time)):
        return str(typed(value))
    return str(value)


@dataclass(frozen=True)
class Difference:
    """The first place where a result differs from the expected answer, in words, and whether the two
    values there read the same and differ in type only (``"0.0"`` written as text against the number 0.0)."""

    text: str
    type_only: bool = False


def _cells(where: str, want: Any, got: Any) -> Difference:
    text = (f"{where}the answer has {_cell_text(want, 'answer')} ({value_type(want, 'answer')}), the query returns "
            f"{_cell_text(got, 'query')} ({value_type(got, 'query')})")
    same_text = want is not None and got is not None and _plain(want) == _plain(got)
    return Difference(text, same_text)


def _rows_of(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def first_difference(answer_type: str | None, round_decimals: int | None, expected: Any, rows: list[tuple],
                     ordered: bool = False) -> Difference | None:
    """The first cell where ``rows`` differ from ``expected`` under the answer comparison (the scorer's
    :func:`evalpack.core.scoring.cell_key` at ``round_decimals``; a result not compared in order is compared
    with both sides sorted), with both values and their types; None when no cell differs.

    >>> first_difference("rows", None, [["A", "532348211.65"]], [("A", Decimal("532348211.65"))]).text
    'row 1, column 2: the answer has "532348211.65" (text), the query returns 532348211.65 (decimal)'
    >>> first_difference("integer", None, 1900, [(1939,)]).text
    'the answer has 1900 (integer), the query returns 1939 (integer)'
    """
    if answer_type != ROWS_TYPE:
        if len(rows) != 1 or len(rows[0]) != 1:
            shape = "no rows" if not rows else f"{_rows_of(len(rows))} of {len(rows[0])} column" + (
                "s" if len(rows[0]) != 1 else "")
            return Difference(f"the query returns {shape}; the answer ({_cell_text(expected, 'answer')}) is one "
                              "value, one row with one column")
        return _cells("", expected, rows[0][0])
    if not isinstance(expected, list) or not all(isinstance(r, (list, tuple)) for r in expected):
        return Difference("the expected answer is not a list of rows")
    if len(expected) != len(rows):
        return Difference(f"the answer has {_rows_of(len(expected))}, the query returns {_rows_of(len(rows))}")
    want_rows, got_rows = [list(r) for r in expected], [list(r) for r in rows]
    for label, table in (("answer's", want_rows), ("query's", got_rows)):
        widths = sorted({len(r) for r in table})
        if len(widths) > 1:
            return Difference(f"the {label} rows have {' or '.join(map(str, widths))} columns")
    if want_rows and len(want_rows[0]) != len(got_rows[0]):
        return Difference(f"the answer's rows have {len(want_rows[0])} columns, the query's {len(got_rows[0])}")

    def keys(row: list) -> tuple:
        return tuple(cell_key(v, round_decimals) for v in row)

    if not ordered:
        want_rows.sort(key=lambda r: repr(keys(r)))
        got_rows.sort(key=lambda r: repr(keys(r)))
    for i, (want, got) in enumerate(zip(want_rows, got_rows), 1):
        for j, (a, b) in enumerate(zip(want, got), 1):
            if cell_key(a, round_decimals) != cell_key(b, round_decimals):
                where = f"row {i}{'' if ordered or len(want_rows) == 1 else ' (both sorted)'}, column {j}: "
                return _cells(where, a, b)
    return None


def same_rows(a: Iterable[tuple], b: Iterable[tuple], round_decimals: int | None = None,
              ordered: bool = False) -> bool:
    """Whether results ``a`` and ``b`` are the same answer: equal rows as a multiset (as a list when
    ``ordered``), cells compared by the scorer's cell rule (:func:`evalpack.core.scoring.cell_key`) at
    ``round_decimals``, or, without it, at 12 significant digits: a value is rounded once, as the scorer rounds it.

    >>> same_rows([(1, 0.1 + 0.2), (2, None)], [(2, None), (1, 0.3)])
    True
    >>> same_rows([(1,), (2,)], [(2,), (1,)], ordered=True)
    False
    >>> same_rows([(1.004,)], [(1.0,)], round_decimals=2), same_rows([(1.004,)], [(1.0,)])
    (True, False)
    >>> same_rows([(1.0149999999999,)], [(1.02,)], round_decimals=2)  # not rounded twice: 1.01 against 1.02
    False
    """
    keys_a = [tuple(cell_key(v, round_decimals) for v in row) for row in a]
    keys_b = [tuple(cell_key(v, round_decimals) for v in row) for row in b]
    return keys_a == keys_b if ordered else Counter(keys_a) == Counter(keys_b)


def in_order(answer_type: str | None, sql: str) -> bool:
    """Whether the answer of ``sql`` is compared in order: a result set (``rows``) whose query has a
    top-level ORDER BY (as the answer comparison decides; scalars have one row). DuckDB's parser decides, on
    a connection of its own: no rotation needs loading to know it. Each answer is kept per text, in this process
    (:func:`evalpack.core.scoring.kept_order`) and on disk."""
    return answer_type == ROWS_TYPE and orders_result(sql)


def orders_result(sql: str) -> bool:
    """Whether ``sql`` orders its final result: a top-level ORDER BY, found by DuckDB's parser as the scorer finds
    it (:func:`evalpack.core.scoring.parsed_order_by`; a parenthesised query's ORDER BY included), each answer kept per
    text in this process and on disk."""
    with _PARSER_LOCK:
        return kept_order(sql, _ordered)


def _ordered(sql: str) -> bool:
    """:func:`evalpack.core.scoring.parsed_order_by` of ``sql``, through the cache on disk (keyed by the text, DuckDB's
    version and evalpack.core.scoring's source): a rebuild whose checks are all cached opens no DuckDB database at all."""
    return cache.remembered("ordered", ("evalpack.core.scoring",), [f"duckdb {duckdb.__version__}", sql],
                            lambda: parsed_order_by(_parser(), sql),
                            decode=lambda stored: stored if isinstance(stored, bool) else None)


_PARSER_LOCK = threading.Lock()
_PARSERS: dict[int, duckdb.DuckDBPyConnection] = {}


def _parser() -> duckdb.DuckDBPyConnection:
    """This process's empty connection for parsing alone (one a forked child inherited is not used). It runs no
    thread of its own (threads=1), so a child that inherited it and drops it has no thread to wait for."""
    con = _PARSERS.get(os.getpid())
    if con is None:
        _PARSERS.clear()
        con = _PARSERS[os.getpid()] = duckdb.connect(":memory:", config={"threads": 1})
    return con


# --------------------------------------------------------------------------- links and orphans


@dataclass(frozen=True)
class Link:
    """A child column whose rows may point at a missing parent."""

    child_table: str
    child_column: str
    parent_table: str
    parent_column: str


@dataclass(frozen=True)
class LinkCount:
    """A link with the number of child rows whose non-null key matches no parent row."""

    link: Link
    orphan_rows: int
    source: str  # declared | foreign_key | inferred

    def describe(self) -> str:
        lk = self.link
        return f"{lk.child_table}.{lk.child_column} -> {lk.parent_table}.{lk.parent_column}"

    def to_dict(self) -> dict:
        lk = self.link
        return {"child": f"{lk.child_table}.{lk.child_column}", "parent": f"{lk.parent_table}.{lk.parent_column}",
                "source": self.source, "orphan_rows": self.orphan_rows}


def orphans_sql(link: Link, what: str) -> str:
    """SELECT ``what`` over the child rows of ``link`` whose non-NULL key has no parent (an anti join:
    the same rows as NOT EXISTS, and DuckDB runs it several times faster on large tables)."""
    c, p = quote_ident(link.child_column), quote_ident(link.parent_column)
    return (f"SELECT {what} FROM {quote_ident(link.child_table)} AS c ANTI JOIN {quote_ident(link.parent_table)} AS p "
            f"ON c.{c} = p.{p} WHERE c.{c} IS NOT NULL")


def count_orphans(con: duckdb.DuckDBPyConnection, link: Link) -> int:
    """The number of child rows of ``link`` on ``con`` whose non-null key matches no parent row."""
    return int(con.execute(orphans_sql(link, "COUNT(*)")).fetchall()[0][0])


def counted(con: duckdb.DuckDBPyConnection, links: list[tuple[Link, str]]) -> tuple[LinkCount, ...]:
    """Each (link, source) with its orphan rows on ``con``; links whose tables or columns are missing are skipped."""
    out, seen = [], set()
    for link, source in links:
        if link in seen:
            continue
        seen.add(link)
        try:
            out.append(LinkCount(link, count_orphans(con, link), source))
        except duckdb.Error:
            continue
    return tuple(out)


def live_links(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> tuple[Link, ...]:
    """The links that have at least one orphan row on ``con`` (read-only): excluding orphans can
    only change an answer through these. A link that cannot be read counts as live, so that the
    check runs and reports it."""
    def live(link: Link) -> bool:
        try:
            return bool(con.execute(f"SELECT EXISTS ({orphans_sql(link, '1')})").fetchone()[0])
        except duckdb.Error:
            return True

    return tuple(link for link in links if live(link))


def orphan_key_tables(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> tuple[str | None, ...]:
    """For each link, a table on ``con`` of its distinct orphan keys (our own connection only);
    None for a link that cannot be read (its check then reads the parent table itself)."""
    names: list[str | None] = []
    for i, link in enumerate(links):
        name = f"__orphan_keys_{i}"
        try:
            con.execute(f"CREATE OR REPLACE TABLE {name} AS "
                        f"{orphans_sql(link, f'DISTINCT c.{quote_ident(link.child_column)} AS k')}")
        except duckdb.Error:
            name = None
        names.append(name)
    return tuple(names)


@functools.lru_cache(maxsize=4096)
def exclude_orphans(sql: str, links: tuple[Link, ...], key_tables: tuple[str | None, ...] | None = None) -> str | None:
    """The query with every child table replaced by its rows whose parent exists (or is NULL).

    With ``key_tables`` (one per link: a table of the link's orphan keys, see
    :func:`orphan_key_tables`) a child row is dropped when its key is one of those: the same rows,
    found by probing a handful of keys instead of the whole parent table.
    Returns None when the query reads no child table of ``links``.
    """
    tree = parse_gold(sql)
    by_child: dict[str, list[tuple[Link, str | None]]] = {}
    for link, keys in zip(links, key_tables or (None,) * len(links)):
        by_child.setdefault(link.child_table, []).append((link, keys))
    changed = False

    def rewrite(node: exp.Expression) -> exp.Expression:
        nonlocal changed
        if not isinstance(node, exp.Table) or node.name not in by_child or isinstance(node.parent, exp.Subquery):
            return node
        conditions = []
        for link, keys in by_child[node.name]:
            col = exp.column(link.child_column)
            if keys is None:
                parents = exp.select(exp.column(link.parent_column)).from_(link.parent_table)
                kept = exp.In(this=col.copy(), query=parents.subquery())
            else:
                kept = exp.Not(this=exp.In(this=col.copy(), query=exp.select("k").from_(keys).subquery()))
            conditions.append(exp.or_(exp.Is(this=col, expression=exp.Null()), kept))
        inner = exp.select(exp.Star()).from_(exp.to_table(node.name)).where(exp.and_(*conditions))
        changed = True
        return inner.subquery(node.alias_or_name)

    rewritten = tree.transform(rewrite, copy=True)
    return rewritten.sql(dialect=DIALECT) if changed else None


def _without_orphans(sql: str, links: tuple[Link, ...], key_tables: tuple[str | None, ...] | None) -> str | None:
    try:
        return exclude_orphans(sql, links, key_tables)
    except sqlglot.errors.SqlglotError:
        return None  # the rewrite cannot be built: the check does not apply


@dataclass(frozen=True)
class OrphanEffect:
    """Excluding orphan rows changes the answer: both results, the query without orphans, and the
    links whose orphans alone change it (all live links when not worked out)."""

    as_written: Run
    without_orphans: Run
    sql: str
    links: tuple[Link, ...]
    counts: Mapping[Link, LinkCount] | None = None  # the links' orphan counts, when known (for reports)

    def culprits(self) -> tuple[LinkCount, ...]:
        """The culprit links with their orphan counts (those whose count is known)."""
        return tuple(self.counts[lk] for lk in self.links if self.counts and lk in self.counts)

    def because(self) -> str:
        return "; ".join(f"{lc.orphan_rows} {lc.link.child_table} {'row' if lc.orphan_rows == 1 else 'rows'} whose "
                         f"{lc.link.child_column} matches no {lc.link.parent_table}.{lc.link.parent_column}"
                         + (", a link inferred from the data" if lc.source == "inferred" else "")
                         for lc in self.culprits())

    def evidence(self) -> dict:
        return {"as_written": self.as_written.recorded(), "without_orphans": self.without_orphans.recorded(),
                "links": [lc.to_dict() for lc in self.culprits()], "query_without_orphans": self.sql}


def _live(links: Iterable[Link | LinkCount]) -> tuple[tuple[Link, ...], dict[Link, LinkCount]]:
    """The links with orphan rows (a bare Link is taken as live) and the counts of those counted."""
    live, counts = [], {}
    for lk in links:
        if isinstance(lk, LinkCount):
            if lk.orphan_rows > 0:
                live.append(lk.link)
                counts[lk.link] = lk
        else:
            live.append(lk)
    return tuple(live), counts


def orphan_effect(con: duckdb.DuckDBPyConnection, sql: str, run: Run, links: Iterable[Link | LinkCount],
                  key_tables: tuple[str | None, ...] | None = None, *, round_decimals: int | None = None,
                  ordered: bool = False, explain: bool = True, runner: Runner = run_trusted) -> OrphanEffect | None:
    """How excluding orphan rows changes the answer of ``sql`` (``run``: its result on ``con``), or None
    when it does not (or the check does not apply: see :func:`orphans_apply`).

    ``links``: Links (taken as live) or LinkCounts (live when they have orphan rows); ``key_tables``:
    tables of orphan keys, one per live link (see :func:`orphan_key_tables`). The answers compare
    by :func:`same_rows`; a rewritten query that fails counts as a different answer. With
    ``explain`` each live link is also tried alone, to name the links whose orphans change it."""
    live, counts = _live(links)
    if run.rows is None or not live:
        return None
    rewritten = _without_orphans(sql, live, key_tables)
    if rewritten is None:
        return None
    without = runner(con, rewritten)
    if without.rows is not None and same_rows(run.rows, without.rows, round_decimals, ordered):
        return None
    culprits = live
    if explain and len(live) > 1:
        alone = [lk for lk in live if (one := _without_orphans(sql, (lk,), None)) is not None
                 and not _same(run, runner(con, one), round_decimals, ordered)]
        culprits = tuple(alone) or live
    return OrphanEffect(run, without, rewritten, culprits, counts)


def _same(a: Run, b: Run, round_decimals: int | None, ordered: bool) -> bool:
    return a.rows is not None and b.rows is not None and same_rows(a.rows, b.rows, round_decimals, ordered)


def counts_orphans(kind: str | None, about_orphans: bool = False, orphan_rows: str | None = "") -> bool:
    """Whether a question's answer counts the rows whose parent is missing, by design: it asks about them (kind
    ``fk_orphans``, or flagged ``about_orphans`` on import) or its record says ``orphan_rows: included`` (the
    plan put orphans among the rows it reads). The orphan check does not apply to such a question."""
    return kind == "fk_orphans" or bool(about_orphans) or orphan_rows == "included"


def orphans_apply(sql: str, links: Iterable[Link | LinkCount], about_orphans: bool) -> bool:
    """Whether the orphan check applies: the question is not about orphans and ``sql`` reads the
    child table of a live link (a query that reads none cannot change when orphans are excluded)."""
    live, _ = _live(links)
    return not about_orphans and bool(live) and _without_orphans(sql, live, None) is not None


# --------------------------------------------------------------------------- ties


@dataclass(frozen=True)
class Probe:
    """The query extended with its ORDER BY keys as trailing columns, over the rows around its cuts."""

    sql: str
    limit: int
    width: int  # the number of sort keys (trailing columns)
    cuts: tuple[tuple[int, int], ...]  # (index of the kept row, index of the cut row) in the probe's rows


def _sort_key(order: exp.Ordered, select: exp.Select) -> exp.Expression:
    """The expression an ORDER BY term sorts by: a position (``ORDER BY 2``) or an alias of the
    select list is that select expression (ORDER BY binds aliases before columns)."""
    term, items = order.this, select.expressions
    if isinstance(term, exp.Literal) and term.is_int and 1 <= int(term.this) <= len(items):
        return items[int(term.this) - 1].unalias().copy()
    if isinstance(term, exp.Column) and not term.table:
        aliased = next((e for e in items if isinstance(e, exp.Alias) and e.alias.lower() == term.name.lower()), None)
        if aliased is not None:
            return aliased.this.copy()
    return term.copy()


def _integer(node: exp.Expression | None) -> int | None:
    value = getattr(node, "expression", None) if node is not None else None
    if isinstance(value, exp.Literal) and value.is_int:
        return int(value.this)
    return None


@functools.lru_cache(maxsize=4096)
def cut_probe(sql: str) -> Probe | None:
    """The probe of ``sql``'s ORDER BY ... LIMIT cuts; None without ORDER BY and a numeric LIMIT
    (or OFFSET), or when sqlglot cannot parse ``sql``."""
    try:
        tree = parse_gold(sql)
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    limit, order, offset = tree.args.get("limit"), tree.args.get("order"), tree.args.get("offset")
    n = _integer(limit)
    if order is None or n is None or (offset is not None and _integer(offset) is None):
        return None
    skip = _integer(offset) or 0
    probe = tree.copy()
    keys = [exp.alias_(_sort_key(o, tree), f"__tie_key_{i}") for i, o in enumerate(order.expressions)]
    probe.set("expressions", [*probe.expressions, *keys])
    cuts = []
    if skip > 0 and n > 0:  # the row before the first kept one: one more row at the front
        probe.set("offset", None)
        probe = probe.offset(skip - 1)
        cuts.append((1, 0))
    front = 1 if cuts else 0
    if n > 0:
        cuts.append((front + n - 1, front + n))
    probe = probe.limit(front + n + 1)
    return Probe(probe.sql(dialect=DIALECT), n, len(keys), tuple(cuts))


def tie_probe(sql: str) -> tuple[str, int, int] | None:
    """The query extended with its ORDER BY keys as trailing columns over LIMIT+1 rows, LIMIT and
    the number of keys; None without ORDER BY ... LIMIT (or with an OFFSET: see :func:`cut_probe`)."""
    probe = cut_probe(sql)
    if probe is None or probe.cuts and probe.cuts[0] == (1, 0):
        return None
    return probe.sql, probe.limit, probe.width


@dataclass(frozen=True)
class Tie:
    """A tie at a cut of ORDER BY ... LIMIT (or the probe's error: the check could not be made)."""

    limit: int
    sort_key: list | None = None
    last_row_kept: list | None = None
    first_row_cut: list | None = None
    error: str | None = None

    def evidence(self) -> dict:
        if self.error is not None:
            return {"limit": self.limit, "error": self.error}
        return {"limit": self.limit, "sort_key": self.sort_key, "last_row_kept": self.last_row_kept,
                "first_row_cut": self.first_row_cut}


def find_tie(con: duckdb.DuckDBPyConnection, sql: str, round_decimals: int | None = None,
             runner: Runner = run_trusted) -> Tie | None:
    """The tie at a cut of ``sql``'s ORDER BY ... LIMIT, or None: the rows on either side of a cut
    have equal sort keys and are not the same answer (:func:`same_rows`), so which one is returned
    depends on row order. A probe that fails to run is returned as a Tie with its error."""
    probe = cut_probe(sql)
    if probe is None:
        return None
    run = runner(con, probe.sql)
    if run.rows is None:
        return Tie(probe.limit, error=run.error)
    w = probe.width
    for kept, cut in probe.cuts:
        if len(run.rows) <= cut:
            continue
        a, b = run.rows[kept], run.rows[cut]
        if tuple(a[-w:]) == tuple(b[-w:]) and not same_rows([a[:-w]], [b[:-w]], round_decimals):
            return Tie(probe.limit, typed(list(a[-w:])), typed(list(a[:-w])), typed(list(b[:-w])))
    return None


# --------------------------------------------------------------------------- all checks


# --------------------------------------------------------------------------- the checks' names, once

MATCHES, NON_EMPTY, ORPHAN_INDEPENDENT, DETERMINISTIC = "matches", "non_empty", "orphan_independent", "deterministic"
CHECKS = (MATCHES, NON_EMPTY, ORPHAN_INDEPENDENT, DETERMINISTIC)  # in the order a drop reason lists them
# the drop reason a failed check gives a question (manifest.json -> drops), and what each check means in a built pack
# (certificate.json -> golden_checks; an import's certificate says what it means there)
DROP_REASONS = {MATCHES: "mismatch", NON_EMPTY: "empty_result", ORPHAN_INDEPENDENT: "depends_on_orphans",
                DETERMINISTIC: "tie_at_limit"}
MEANINGS = {
    MATCHES: "the gold SQL returns exactly the expected answer",
    NON_EMPTY: "the result is not empty and not NULL",
    ORPHAN_INDEPENDENT: "rewritten to exclude child rows whose parent is missing, the gold SQL still returns the "
                        "expected answer (not applied to questions about orphans)",
    DETERMINISTIC: "no tie at an ORDER BY ... LIMIT boundary",
}


@dataclass(frozen=True)
class Golden:
    """The golden checks of one query that ran. ``orphans``/``tie``: the failure, None when it
    passed or did not apply; ``*_apply``: whether the check applied."""

    empty: bool  # empty (or only NULL) and not marked expected_empty
    orphans: OrphanEffect | None
    tie: Tie | None
    orphans_apply: bool = False
    tie_applies: bool = False

    def failed(self) -> list[str]:
        """The names of the failed checks (of :data:`CHECKS`)."""
        return [name for name, bad in ((NON_EMPTY, self.empty), (ORPHAN_INDEPENDENT, self.orphans),
                                       (DETERMINISTIC, self.tie)) if bad]

    def checks(self) -> dict[str, bool | None]:
        """non_empty, orphan_independent, deterministic: True passed, False failed, None did not apply."""
        return {NON_EMPTY: not self.empty,
                ORPHAN_INDEPENDENT: (self.orphans is None) if self.orphans_apply else None,
                DETERMINISTIC: (self.tie is None) if self.tie_applies else None}


def check(con: duckdb.DuckDBPyConnection, sql: str, run: Run, links: Iterable[Link | LinkCount] = (),
          key_tables: tuple[str | None, ...] | None = None, *, about_orphans: bool = False,
          expected_empty: bool = False, round_decimals: int | None = None, ordered: bool = False,
          explain: bool = True, runner: Runner = run_trusted) -> Golden:
    """The golden checks of ``sql``, whose result on ``con`` is ``run`` (which ran).

    With a tie at the LIMIT, which tied row comes back varies from run to run, so comparing the
    answer with and without orphans would report that variation as orphan dependence: the orphan
    check then does not apply."""
    links = tuple(links)
    tie = find_tie(con, sql, round_decimals, runner)
    applies = tie is None and orphans_apply(sql, links, about_orphans)
    orphans = orphan_effect(con, sql, run, links, key_tables, round_decimals=round_decimals, ordered=ordered,
                            explain=explain, runner=runner) if applies else None
    empty = run.rows is not None and is_empty(run.rows) and not expected_empty
    return Golden(empty, orphans, tie, applies, cut_probe(sql) is not None)
