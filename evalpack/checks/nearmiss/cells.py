"""Answer grouped queries from a table of their groups' aggregates, computed once per rotation.

A rollup (:mod:`evalpack.checks.nearmiss.rollup`) re-aggregates partial aggregates, which DISTINCT aggregates and AVG
do not allow. Many near-miss mutants that a rollup cannot answer group a table by month (a monthly
series, a running total, each channel's months) and filter it on whole months only. Such a query's
groups are whole groups of the table: every row of a month passes its filter or none does. Its
aggregates can then be computed for every group of the table once (the "cells": one row per group,
one column per aggregate), and the query reads the groups its filter keeps.

The answer is the same value of the same type: each cell is the aggregate DuckDB computes over
exactly the rows the query's group holds, and aggregates whose value depends on the order rows are
added in (SUM or AVG of a floating-point column) are not taken. A query qualifies when every SELECT
over the table that is rewritten (the query itself, a CTE body, a subquery):

- reads that table alone and groups it by expressions of its columns, one of them a column cut to
  whole periods (``DATE_TRUNC('month', day)``, or quarter, year or day);
- filters only with bounds ``>=`` and ``<`` on that column at the start of a period, and with terms
  over its grouping expressions alone (``channel = 'web'`` when it groups by channel);
- has aggregates (with DISTINCT or FILTER, in SELECT, HAVING or ORDER BY) over its columns and no
  other reference to them outside its grouping expressions.

SELECTs that do not qualify are left as they are, so one query may be partly rewritten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from sqlglot import exp

from evalpack.checks.nearmiss.rollup import EXACT_SUM_TYPES, literal_moment, table_readers
from evalpack.core.scoring import quote_ident
from evalpack.questions.derive import DIALECT

PERIODS = {"DAY": lambda d: True, "MONTH": lambda d: d.day == 1,
           "QUARTER": lambda d: d.day == 1 and d.month in (1, 4, 7, 10),
           "YEAR": lambda d: d.day == 1 and d.month == 1}
_AGGREGATES = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)
_ORDER_FREE = (exp.Min, exp.Max, exp.Count)  # exact whatever the column's type
_BLOCKERS = ("joins", "laterals", "distinct", "qualify", "windows", "pivots", "prewhere", "connect", "sample")


@dataclass(frozen=True)
class Cells:
    """The aggregates of one table's groups: ``keys`` (grouping expressions, as SQL) and ``aggregates``
    ((column, aggregate as SQL)), over the rows of ``window`` ((column, first moment, end), ISO; None: every
    row) that pass ``rows`` (a condition on the table's columns, as SQL: the rows that count of a table with
    traps, which every query of a question reads alike; None: every row). Tables with the same table, keys and
    rows are one table (:func:`merged`)."""

    table: str
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, str], ...]
    window: tuple[str, str, str] | None = None
    rows: str | None = None

    @property
    def name(self) -> str:
        parts = (self.table, *self.keys) if self.rows is None else (self.table, *self.keys, "\1", self.rows)
        digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]
        return f"__cells_{digest}"

    def create_sql(self) -> str:
        """CREATE TABLE name AS SELECT keys, aggregates FROM table GROUP BY keys."""
        keys = [f"{key} AS {_key(i)}" for i, key in enumerate(self.keys)]
        aggregates = [f"{sql} AS {column}" for column, sql in self.aggregates]
        conditions = [] if self.rows is None else [f"({self.rows})"]
        if self.window is not None:  # whole periods: every group is in it or out of it
            column, start, end = self.window
            conditions += [f"{quote_ident(column)} >= CAST('{start}' AS TIMESTAMP)",
                           f"{quote_ident(column)} < CAST('{end}' AS TIMESTAMP)"]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        return (f"CREATE OR REPLACE TABLE {quote_ident(self.name)} AS SELECT {', '.join(keys + aggregates)} "
                f"FROM {quote_ident(self.table)}{where} GROUP BY {', '.join(self.keys)}")


def merged(cells: list[Cells]) -> list[Cells]:
    """One table per name, holding every aggregate any of ``cells`` asks of it (in a stable order), over the
    span of their windows (every row when one of them has none)."""
    by_name: dict[str, Cells] = {}
    for c in cells:
        known = by_name.get(c.name)
        columns = dict(known.aggregates) if known else {}
        columns.update(c.aggregates)
        window = c.window
        if known is not None:
            window = None if known.window is None or window is None or known.window[0] != window[0] else \
                (window[0], min(known.window[1], window[1]), max(known.window[2], window[2]))
        by_name[c.name] = Cells(c.table, c.keys, tuple(sorted(columns.items())), window, c.rows)
    return [by_name[name] for name in sorted(by_name)]


def worth_computing(readers: list[Cells]) -> bool:
    """Whether one table of cells costs less than its ``readers`` (the Cells each reading query asks for)
    reading the table themselves: their windows, added up, cover the span of all of them at least twice
    (each reader without a window counts as the whole table, and the others then as nothing)."""
    whole = sum(1 for c in readers if c.window is None)
    if whole:
        return whole >= 2
    moments = [(dt.datetime.fromisoformat(c.window[1]), dt.datetime.fromisoformat(c.window[2])) for c in readers]
    span = (max(end for _, end in moments) - min(start for start, _ in moments)).total_seconds()
    covered = sum(max(0.0, (end - start).total_seconds()) for start, end in moments)
    return span > 0 and covered >= 2 * span


def _key(index: int) -> str:
    return f"__k{index}"


def _aggregate_column(sql: str) -> str:
    return "__a_" + hashlib.sha256(sql.encode()).hexdigest()[:12]


def cells_form(tree: exp.Expression, types: dict[str, dict[str, str]], counted: frozenset[str] = frozenset()
               ) -> tuple[str, tuple[Cells, ...]] | None:
    """``tree`` with every qualifying SELECT over a table reading that table's cells instead, as SQL, and the
    cells it reads; None when no SELECT qualifies. ``counted``: the predicates of the rows that count
    (:func:`evalpack.checks.nearmiss.operators.trap_facts`), which a SELECT may hold besides (the cells then hold
    only those rows). ``tree`` is not modified."""
    out = tree.copy()
    ctes = {cte.alias_or_name for cte in out.find_all(exp.CTE)}
    found = []
    for table in sorted({t.name for t in out.find_all(exp.Table)} & set(types) - ctes):
        for select, source in table_readers(out, {table}) or ():
            rewritten = _rewrite(select, source, types[table], counted)
            if rewritten is not None:
                replacement, cells = rewritten
                if select is out:
                    out = replacement
                else:
                    select.replace(replacement)
                found.append(cells)
    if not found:
        return None
    return out.sql(dialect=DIALECT), tuple(found)


def _period_key(key: exp.Expression, columns: dict[str, str]) -> tuple[str, str] | None:
    """(column, period) when ``key`` cuts a DATE or TIMESTAMP column of the table to whole periods."""
    if not isinstance(key, (exp.TimestampTrunc, exp.DateTrunc)) or not isinstance(key.this, exp.Column):
        return None
    unit = key.args.get("unit")
    period = (unit.name if unit is not None else "").upper()
    column = key.this
    if column.table or period not in PERIODS:
        return None
    kind = columns.get(column.name, "").upper()
    return (column.name, period) if kind == "DATE" or kind == "TIMESTAMP" else None


def _bound(term: exp.Expression, column: str, period: str) -> exp.Expression | None:
    """``term`` (``column >= start`` or ``column < start``, ``start`` the first moment of a period) as the
    same bound on the period key, which keeps exactly the groups whose rows it keeps; None otherwise."""
    if not isinstance(term, (exp.GTE, exp.LT)) or not isinstance(term.this, exp.Column) \
            or term.this.table or term.this.name != column:
        return None
    moment = literal_moment(term.expression)
    if moment is None or moment.time() != dt.time(0) or not PERIODS[period](moment.date()):
        return None
    return type(term)(this=exp.column(_key(0)), expression=term.expression.copy())


def _exact(agg: exp.Expression, value: exp.Expression, columns: dict[str, str]) -> bool:
    """Whether ``agg`` of ``value`` is a column of the table whose aggregate does not depend on row order."""
    if not isinstance(value, exp.Column) or value.table or value.name not in columns:
        return False
    return isinstance(agg, _ORDER_FREE) or columns[value.name].upper().startswith(EXACT_SUM_TYPES)


def _after(start: dt.datetime, period: str) -> dt.datetime:
    """The start of the period after the one that starts at ``start``."""
    if period == "DAY":
        return start + dt.timedelta(days=1)
    months = start.year * 12 + start.month - 1 + {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[period]
    return start.replace(year=months // 12, month=months % 12 + 1)


def _one_period(terms: list[exp.Expression], columns: dict[str, str]) -> tuple[str, str] | None:
    """(column, period) when ``terms`` bound a DATE or TIMESTAMP column to exactly one whole period (``>=`` its
    start and ``<`` the next one's; the longest period that fits), else None."""
    bounds: dict[str, dict[type, list[dt.datetime]]] = {}
    for term in terms:
        if isinstance(term, (exp.GTE, exp.LT)) and isinstance(term.this, exp.Column) and not term.this.table \
                and columns.get(term.this.name, "").upper() in ("DATE", "TIMESTAMP"):
            moment = literal_moment(term.expression)
            if moment is not None and moment.time() == dt.time(0):
                bounds.setdefault(term.this.name, {}).setdefault(type(term), []).append(moment)
    for column, sides in sorted(bounds.items()):
        (low, *more_low), (high, *more_high) = sides.get(exp.GTE, [None]), sides.get(exp.LT, [None])
        if low is None or high is None or more_low or more_high:
            continue
        for period in ("YEAR", "QUARTER", "MONTH", "DAY"):
            if PERIODS[period](low.date()) and _after(low, period) == high:
                return column, period
    return None


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """The terms of an AND chain, through parentheses and nested ANDs."""
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return [t for part in condition.flatten() for t in _conjuncts(part)]
    return [condition]


def _rewrite(select: exp.Select, source: exp.Table, columns: dict[str, str], counted: frozenset[str] = frozenset()
             ) -> tuple[exp.Select, Cells] | None:
    """The SELECT over the cells of ``source``'s table, and those cells; None when it does not qualify."""
    if any(select.args.get(k) for k in _BLOCKERS) or any(
            isinstance(n, (exp.Query, exp.Window)) and n is not select for n in select.walk()):
        return None
    group = select.args.get("group")
    if group is None or not group.expressions or any(group.args.get(k) for k in ("all", "rollup", "cube",
                                                                                  "grouping_sets")):
        return None
    keys = list(group.expressions)
    if any(isinstance(k, exp.Literal) for k in keys):
        return None  # GROUP BY 1
    where = select.args.get("where")
    conjuncts = _conjuncts(where.this) if where else []
    periods = [p for p in (_period_key(k, columns) for k in keys) if p]
    single = None if periods else _one_period(conjuncts, columns)
    column, period = periods[0] if periods else single or (None, None)
    if periods:  # the period key first: bounds are rewritten onto __k0
        first = next(i for i, k in enumerate(keys) if _period_key(k, columns))
        keys = [keys[first], *keys[:first], *keys[first + 1:]]
    elif single:  # one whole period: its groups are the cells of that period
        keys = [exp.TimestampTrunc(this=exp.column(column), unit=exp.var(period)), *keys]
    if any(c.table or c.name not in columns for k in keys for c in k.find_all(exp.Column)):
        return None
    aggregates: dict[str, str] = {}

    def aggregate(node: exp.Expression) -> exp.Expression | None:
        """The cells' column for an aggregate (or an aggregate with FILTER), or None when it is not exact."""
        agg = node.this if isinstance(node, exp.Filter) else node
        if not isinstance(agg, _AGGREGATES):
            return None
        arg = agg.this
        values = arg.expressions if isinstance(arg, exp.Distinct) else [arg]
        if len(values) != 1:
            return None
        value = values[0]
        if not (isinstance(value, exp.Star) and isinstance(agg, exp.Count)) and not _exact(agg, value, columns):
            return None
        if isinstance(node, exp.Filter) and any(c.table or c.name not in columns
                                                for c in node.expression.find_all(exp.Column)):
            return None
        sql = node.sql(dialect=DIALECT)
        name = _aggregate_column(sql)
        aggregates[name] = sql
        return exp.column(name)

    def substituted(node: exp.Expression) -> exp.Expression | None:
        """``node`` with its aggregates and grouping expressions replaced by the cells' columns, or None when
        a column of the table is left outside them."""
        node = node.copy()
        for agg in list(node.find_all(exp.AggFunc)):
            if agg.find_ancestor(exp.AggFunc) is not None and agg.find_ancestor(exp.AggFunc) is not node:
                continue
            unit = agg.parent if isinstance(agg.parent, exp.Filter) else agg
            column_node = aggregate(unit)
            if column_node is None:
                return None
            if unit is node:
                return column_node
            unit.replace(column_node)
        for index, key in enumerate(keys):
            for found in [n for n in node.find_all(type(key)) if n == key]:
                if found is node:
                    return exp.column(_key(index))
                found.replace(exp.column(_key(index)))
        if any(c.name in columns for c in node.find_all(exp.Column)):
            return None
        return node

    terms, starts, ends, rows = [], [], [], []
    for term in conjuncts:
        bound = _bound(term, column, period) if column else None
        if bound is not None:
            (starts if isinstance(term, exp.GTE) else ends).append(literal_moment(term.expression))
        else:
            bound = substituted(term)
            if bound is None and term.sql(dialect=DIALECT) in counted:  # which rows the cells hold
                rows.append(term.sql(dialect=DIALECT))
                continue
        if bound is None:
            return None
        terms.append(bound)
    having = select.args.get("having")
    if having is not None:
        kept = substituted(having.this)
        if kept is None:
            return None
        terms.append(kept)
    projection = []
    for item in select.expressions:
        value = substituted(item)
        if value is None:
            return None
        if isinstance(item, exp.Column) and not isinstance(value, exp.Alias):
            value = exp.alias_(value, item.name)  # the output column keeps its name
        projection.append(value)
    order = select.args.get("order")
    ordered = None
    if order is not None:
        ordered = substituted(order)
        if ordered is None:
            return None
    window = (column, max(starts).isoformat(sep=" "), min(ends).isoformat(sep=" ")) if starts and ends else None
    cells = Cells(source.name, tuple(k.sql(dialect=DIALECT) for k in keys), tuple(sorted(aggregates.items())), window,
                  " AND ".join(f"({r})" for r in sorted(rows)) if rows else None)
    rewritten = exp.select(*projection).from_(exp.Table(this=exp.to_identifier(cells.name)))
    if terms:
        rewritten = rewritten.where(exp.and_(*(exp.Paren(this=t) for t in terms)))
    if ordered is not None:
        rewritten.set("order", ordered)
    for part in ("limit", "offset"):
        if select.args.get(part) is not None:
            rewritten.set(part, select.args[part].copy())
    return rewritten, cells


__all__ = ["Cells", "cells_form", "merged", "worth_computing"]
