"""Equivalence on every database the spec allows: a comparison its declarations make true of every row.

A date column that cannot be NULL and declares a start and an end holds, in every database the spec allows, only
days in that range. So ``ordered_at >= DATE '2025-01-01'`` is true of every row when the range starts on that day,
and a mutant that drops it, moves it a day earlier or writes ``<=`` for ``<`` at the range's far end is the same
query as the gold SQL there: no database, not merely these rows, can tell them apart. The same holds of a text period
column, which holds only its months' labels, and of a categorical column, which holds only its choices
(``movement_type >= '2026-01'`` is true of 'new' and 'churn' alike). Where a date range has room the build plants rows
just outside the declared months (:mod:`evalpack.data.plan`'s zones), so such mutants differ.

The reduction is kept sound by refusing what it cannot read: a query with an outer join (a NULL-extended row holds
no value), a column it cannot trace to a base table of its own scope, a bound that is not a literal of its kind.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from evalpack.data.plan import months_between
from evalpack.spec.model import Spec

# each comparison as ``column OP literal`` (the literal on the left is turned around)
_TURNED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def declared_ranges(spec: Spec, nullable: Mapping[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """table -> column -> the values every database the spec allows keeps it within, for each column that can never
    be NULL and whose values the declarations bound: ``["date" | "datetime", first day, last day]`` for a date column
    that declares both ends, ``["text", value, ...]`` for a text period column (its months' 'YYYY-MM' labels), a
    waterfall's type column (its movement types) and a categorical column stored as its labels (its choices); not a
    column that marks rows that do not count, one stored as codes, nor a trap's sibling. ``nullable``:
    :func:`evalpack.checks.nearmiss.study.nullable_columns`. JSON values, as the mutants' cache key takes them."""
    out: dict[str, dict[str, list[str]]] = {}
    # a trap's sibling holds its column's value moved by the relation, not a value of the range it copies
    marked = {(n.table, n.column) for n in spec.traps.not_counted} | {
        (c.table, c.column) for c in spec.traps.codes} | {(s.table, s.column) for s in spec.traps.siblings}
    labels = {(w.table, w.period_column): [f"{p.month:%Y-%m}" for p in w.points] for w in spec.waterfalls}
    labels.update({(w.table, w.type_column): [k for k, _ in w.inflow_shares + w.outflow_shares]
                   for w in spec.waterfalls})
    for curve in spec.outcome_curves:
        months = months_between(curve.points[0].month, curve.points[-1].month)
        labels.setdefault((curve.table, curve.time_column), [f"{m:%Y-%m}" for m in months])
    for table in spec.tables:
        for c in table.columns:
            if c.name in nullable.get(table.name, ()) or c.nullable or (table.name, c.name) in marked:
                continue
            if c.type in ("date", "datetime") and c.start and c.end:
                out.setdefault(table.name, {})[c.name] = [c.type, c.start.isoformat(), c.end.isoformat()]
            elif c.type in ("text", "categorical") and (table.name, c.name) in labels:
                out.setdefault(table.name, {})[c.name] = ["text", *labels[table.name, c.name]]
            elif c.type == "categorical" and c.choices:
                out.setdefault(table.name, {})[c.name] = ["text", *c.choices]
    return out


def _literal_day(node: exp.Expression) -> dt.datetime | None:
    """The instant a date or timestamp literal names (``CAST('2025-01-01' AS DATE)``, ``'2025-01-01'``), else None."""
    if isinstance(node, exp.Cast) and node.to.this in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP):
        node = node.this
    if not (isinstance(node, exp.Literal) and node.is_string):
        return None
    try:
        return dt.datetime.fromisoformat(node.this)
    except ValueError:
        return None


_HOLDS = {exp.GT: lambda a, b: a > b, exp.GTE: lambda a, b: a >= b, exp.LT: lambda a, b: a < b,
          exp.LTE: lambda a, b: a <= b}


def _always_holds(op: type, declared: list[str], literal: exp.Expression) -> bool:
    """Whether ``column OP literal`` is true of every value ``declared`` (:func:`declared_ranges`) allows."""
    if declared[0] == "text":  # VARCHAR compares byte by byte: for UTF-8, code point by code point, as str does
        return isinstance(literal, exp.Literal) and literal.is_string and all(
            _HOLDS[op](value, literal.this) for value in declared[1:])
    bound = _literal_day(literal)
    if bound is None:
        return False
    lo = dt.datetime.fromisoformat(declared[1])
    end = dt.datetime.fromisoformat(declared[2]) + dt.timedelta(days=1)
    if declared[0] == "date" and op in (exp.LT, exp.LTE):
        end -= dt.timedelta(days=1)  # the last day's value is that day at midnight
        if op is exp.LT:
            end += dt.timedelta(microseconds=1)  # value <= last day < bound
    return _always(op, lo, end, bound)


def _always(op: type, lo: dt.datetime, end: dt.datetime, bound: dt.datetime) -> bool:
    """Whether ``value OP bound`` holds for every value with lo <= value < end."""
    if op is exp.GTE:
        return lo >= bound
    if op is exp.GT:
        return lo > bound
    if op in (exp.LT, exp.LTE):  # value < end <= bound
        return end <= bound
    return False


def _base_columns(tree: exp.Expression) -> dict[int, tuple[str, str]] | None:
    """id(column node) -> (table, column) for each column read straight from a base table in its own scope; None
    when the query has an outer join anywhere."""
    if any(j.side for j in tree.find_all(exp.Join)):
        return None
    found: dict[int, tuple[str, str]] = {}
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for scope in traverse_scope(tree):
        tables = {alias: source.name for alias, source in scope.sources.items()
                  if isinstance(source, exp.Table) and source.name not in ctes}
        only = next(iter(tables.values())) if len(tables) == len(scope.sources) == 1 else None
        for col in scope.columns:
            table = tables.get(col.table) if col.table else only
            if table:
                found[id(col)] = (table, col.name)
    return found


def always_true(tree: exp.Expression, ranges: Mapping[str, Mapping[str, list[str]]]) -> exp.Expression | None:
    """``tree`` (edited in place) with each comparison that every database the spec allows makes true replaced by
    TRUE; None when it has none (or is a query this reduction does not read: see the module's docstring)."""
    if not ranges:
        return None
    columns = _base_columns(tree)
    if not columns:
        return None
    hits = []
    for node in tree.find_all(*_TURNED):
        left, right, op = node.this, node.expression, type(node)
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, _TURNED[op]
        if not isinstance(left, exp.Column) or id(left) not in columns:
            continue
        table, column = columns[id(left)]
        declared = ranges.get(table, {}).get(column)
        if declared is not None and _always_holds(op, declared, right):
            hits.append(node)
    for node in hits:
        node.replace(exp.true())
    return tree if hits else None


def ranges_key(ranges: Mapping) -> str:
    """:func:`declared_ranges` as the text that keys the mutants' cache."""
    return json.dumps(ranges, sort_keys=True)


__all__ = ["always_true", "declared_ranges", "ranges_key"]
