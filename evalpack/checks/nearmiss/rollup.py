"""Answer single-table aggregate queries from a rollup of their table instead of its rows.

Most near-miss mutants read one table as ``SELECT f(aggregates) FROM t WHERE cond`` where
``cond`` reads a few low-cardinality columns (a date, a channel, a flag). A rollup groups ``t``
once by those columns, keeping the row count and each measure's SUM, COUNT, MIN and MAX; a
query is then rewritten to re-aggregate the rollup's partial aggregates. The answer is the
same value of the same type: sums are re-added only for exact types (integers and decimals),
counts are re-summed, MIN of MINs is the MIN, and each re-aggregate is cast to the type the
original aggregate has. A TIMESTAMP column is grouped by day (and whether it is exactly
midnight) only for queries that compare it with midnight literals alone, for which every
timestamp of one such group gives the same truth value.

The same holds inside a larger query: every SELECT that reads the table (a CTE body grouping it by
month, a scalar subquery) is rewritten the same way, grouping included, and what reads their results
(a window over the CTE's rows) is left as it is; ``FILTER (WHERE ...)`` on the rollup's columns is kept on the
re-aggregate. AVG and DISTINCT aggregates, window functions
and joins over the table, and any column the rollup does not hold leave a query as it is: it runs on
the table's rows.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import duckdb
from sqlglot import exp

from evalpack.core.scoring import quote_ident
from evalpack.questions.derive import DIALECT, parse_gold

MAX_DIM_VALUES = 4096  # a column with more distinct values is not worth grouping by
MIN_REDUCTION = 8  # a rollup must be at least this many times smaller than its table
EXACT_SUM_TYPES = ("DECIMAL", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                    "UINTEGER", "UBIGINT", "UHUGEINT")
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


@dataclass(frozen=True)
class Need:
    """What one query needs from a rollup of its table: the columns it filters on (``dims``) and
    the partial aggregates it re-aggregates (``measures``: ("sum" | "count" | "min" | "max", column
    or "*"))."""

    table: str
    dims: frozenset[str]
    measures: frozenset[tuple[str, str]]
    grouped: bool = False  # the query is more than one scalar aggregate (it groups, nests or returns rows)


def rollup_name(table: str) -> str:
    """The table (in the in-memory database, where every cursor sees it) holding ``table``'s rollup."""
    return f"__rollup_{table}"


@dataclass(frozen=True)
class Rollup:
    """One table's rollup: grouped by ``dims`` (``by_day``: TIMESTAMP dims grouped by day)."""

    table: str
    dims: tuple[str, ...]
    by_day: tuple[str, ...]
    measures: tuple[tuple[str, str], ...]

    def covers(self, need: Need) -> bool:
        return need.table == self.table and need.dims <= set(self.dims) and need.measures <= set(self.measures)

    def create_sql(self) -> str:
        """CREATE TABLE ... AS SELECT dims, partial aggregates FROM table GROUP BY dims."""
        select, group = [], []
        for dim in self.dims:
            # any timestamp of a by-day group stands for all of them: MIN is one
            select.append(f"MIN({quote_ident(dim)}) AS {quote_ident(dim)}" if dim in self.by_day else quote_ident(dim))
            group += _group_keys(dim, dim in self.by_day)
        select += [f"{_aggregate_sql(m)} AS {quote_ident(_partial(m))}" for m in self.measures]
        sql = (f"CREATE OR REPLACE TABLE {quote_ident(rollup_name(self.table))} AS SELECT {', '.join(select)} "
               f"FROM {quote_ident(self.table)}")
        return sql + (f" GROUP BY {', '.join(group)}" if group else "")


def rollup_form(tree: exp.Expression, need: Need, result_types: dict[tuple[str, tuple[str, str]], str], *,
                copy: bool = True) -> exp.Expression:
    """``tree`` (whose need is ``need``) rewritten over its table's rollup; ``tree`` is not modified (with
    ``copy=False`` it is rewritten in place: for a caller that has no more use for it).

    Every SELECT that reads the table (the query itself, a CTE body or a subquery) reads the rollup
    instead, and its own aggregates (not those of an enclosing or nested query) re-aggregate the
    rollup's partial aggregates. ``result_types``: (table, measure) -> the DuckDB type of the
    aggregate on the table's rows, which each re-aggregate is cast to (see :func:`aggregate_types`)."""

    def swap(node: exp.Expression) -> exp.Expression:
        measure = _measure_of(node)
        filtered = node.parent if isinstance(node.parent, exp.Filter) else None
        partial = exp.column(_partial(measure))
        if measure[0] in ("min", "max"):
            total = exp.Max(this=partial) if measure[0] == "max" else exp.Min(this=partial)
        else:
            if isinstance(node, exp.CountIf):
                partial = exp.Case(ifs=[exp.If(this=exp.Paren(this=node.this.copy()), true=partial)])
            total = exp.Sum(this=partial)
        if filtered is not None:  # FILTER belongs to the re-aggregate itself, inside the cast
            total = exp.Filter(this=total, expression=filtered.expression.copy())
        if measure[0] == "count":
            total = exp.Coalesce(this=total, expressions=[exp.Literal.number(0)])
        return exp.Cast(this=total, to=_data_type(result_types[(need.table, measure)]))

    out = tree.copy() if copy else tree
    for select, table in table_readers(out, {need.table}):
        for node in [n for n in _own_nodes(select) if _measure_of(n) is not None and _outermost_aggregate(n, select)]:
            (node.parent if isinstance(node.parent, exp.Filter) else node).replace(swap(node))
        table.replace(exp.Table(this=exp.to_identifier(rollup_name(need.table))))
    return out


def _own_nodes(select: exp.Select) -> list[exp.Expression]:
    """The nodes of ``select`` that belong to it, not to a query nested in it."""
    return [n for n in select.walk(prune=lambda n: n is not select and isinstance(n, exp.Query))
            if n is select or not isinstance(n, exp.Query)]


def _outermost_aggregate(node: exp.Expression, select: exp.Select) -> bool:
    parent = node.parent
    while parent is not None and parent is not select:
        if isinstance(parent, exp.AggFunc):
            return False
        parent = parent.parent
    return True


def table_readers(tree: exp.Expression, tables: set[str]) -> list[tuple[exp.Select, exp.Table]] | None:
    """(SELECT, its FROM table) for every reference in ``tree`` to one of ``tables`` (not a CTE of the
    same name), or None when a reference is not the sole source of a SELECT (a join, a lateral...)."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    out = []
    for table in tree.find_all(exp.Table):
        if table.name not in tables or table.name in ctes:
            continue
        source = table.parent
        select = source.parent if isinstance(source, exp.From) else None
        if not isinstance(select, exp.Select) or table.args.get("alias") or table.args.get("db") \
                or select.args.get("joins") or select.args.get("laterals"):
            return None
        out.append((select, table))
    return out


def every_measure(types: dict[str, dict[str, str]]) -> list[Need]:
    """One need per table holding every partial aggregate a query could re-aggregate."""
    needs = []
    for table, columns in types.items():
        measures = {("count", "*")}
        for column, typ in columns.items():
            measures |= {("count", column), ("min", column), ("max", column)}
            if typ.upper().startswith(EXACT_SUM_TYPES):
                measures.add(("sum", column))
        needs.append(Need(table, frozenset(), frozenset(measures)))
    return needs


@functools.lru_cache(maxsize=64)
def _parsed_type(name: str) -> exp.DataType:
    return exp.DataType.build(name, dialect=DIALECT)


def _data_type(name: str) -> exp.DataType:
    return _parsed_type(name).copy()  # a node may sit in one tree only


def aggregate_types(types: dict[str, dict[str, str]], needs: list[Need]) -> dict[tuple[str, tuple[str, str]], str]:
    """(table, measure) -> the DuckDB type of that aggregate over the table (asked of DuckDB on
    empty tables of the declared types, so it is exactly what the raw query returns)."""
    con = duckdb.connect(":memory:")
    try:
        out = {}
        for table in sorted({n.table for n in needs}):
            columns = ", ".join(f"{quote_ident(c)} {t}" for c, t in types[table].items())
            con.execute(f"CREATE TABLE {quote_ident(table)} ({columns})")
            measures = sorted(set().union(*(n.measures for n in needs if n.table == table)))
            described = con.execute(f"DESCRIBE SELECT {', '.join(map(_aggregate_sql, measures))} "
                                    f"FROM {quote_ident(table)}").fetchall()
            out.update({(table, m): row[1] for m, row in zip(measures, described)})
        return out
    finally:
        con.close()


def _partial(measure: tuple[str, str]) -> str:
    kind, column = measure
    return "__rows" if column == "*" else f"__{kind}_{column}"


def _aggregate_sql(measure: tuple[str, str]) -> str:
    kind, column = measure
    return "COUNT(*)" if column == "*" else f"{kind.upper()}({quote_ident(column)})"


def _measure_of(node: exp.Expression) -> tuple[str, str] | None:
    """The partial aggregate an aggregate node re-aggregates, or None for another node."""
    if isinstance(node, exp.CountIf):
        return ("count", "*")
    kinds = {exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Count: "count"}
    kind = kinds.get(type(node))
    if kind is None:
        return None
    arg = node.this
    if isinstance(arg, exp.Star) and kind == "count":
        return ("count", "*")
    return (kind, arg.name) if isinstance(arg, exp.Column) else None


def literal_moment(node: exp.Expression) -> dt.datetime | None:
    """The value of a DATE or TIMESTAMP literal without a time zone (``CAST('2025-01-01' AS DATE)``, or a
    bare string), else None."""
    if isinstance(node, exp.Cast):
        if not node.to.is_type(exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ,
                               exp.DataType.Type.DATETIME):
            return None
        node = node.this
    if not (isinstance(node, exp.Literal) and node.is_string):
        return None
    try:
        value = dt.datetime.fromisoformat(node.this)
    except ValueError:
        return None
    return None if value.tzinfo else value


def _midnight(node: exp.Expression) -> bool:
    """A DATE or TIMESTAMP literal at midnight (``CAST('2025-01-01' AS DATE)``, or a bare string)."""
    moment = literal_moment(node)
    return moment is not None and moment.time() == dt.time(0)


def _only_midnight_comparisons(col: exp.Column) -> bool:
    parent = col.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, _COMPARISONS):
        other = parent.expression if parent.this is col else parent.this
        return _midnight(other.unnest())
    if isinstance(parent, exp.Is):
        return isinstance(parent.expression, exp.Null)
    if isinstance(parent, exp.Between) and parent.this is col:
        return _midnight(parent.args["low"]) and _midnight(parent.args["high"])
    return False


_LEAF_BLOCKERS = ("joins", "laterals", "distinct", "qualify", "windows", "pivots")


def need_of(query: str | exp.Expression, types: dict[str, dict[str, str]]) -> Need | None:
    """What ``query`` needs from a rollup, or None when a rollup cannot answer it exactly.

    Every SELECT that reads a declared table (the query, a CTE body, a subquery) must read that one
    table alone and aggregate it: SUM (of an exact type), COUNT, COUNT_IF, MIN or MAX of its columns,
    filtered, grouped and ordered by columns the rollup holds. What encloses those SELECTs (windows
    over a CTE's rows, arithmetic on a subquery's value) is left as it is."""
    tree = parse_gold(query) if isinstance(query, str) else query
    if not isinstance(tree, exp.Query):
        return None
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    read = {t.name for t in tree.find_all(exp.Table) if t.name in types and t.name not in ctes}
    if len(read) != 1:
        return None
    (name,) = read
    readers = table_readers(tree, read)
    if not readers:
        return None
    leaves = [_leaf_need(select, name, types) for select, _ in readers]
    if any(leaf is None for leaf in leaves):
        return None
    single = len(readers) == 1 and readers[0][0] is tree and not tree.args.get("group")
    return Need(name, frozenset().union(*(dims for dims, _ in leaves)), frozenset().union(*(m for _, m in leaves)),
                grouped=not single)


def _leaf_need(select: exp.Select, table: str, types: dict[str, dict[str, str]]
               ) -> tuple[frozenset[str], frozenset[tuple[str, str]]] | None:
    """(dims, measures) of one SELECT over ``table``, or None when a rollup cannot answer it exactly."""
    if any(select.args.get(k) for k in _LEAF_BLOCKERS):
        return None
    columns = {c: t.upper() for c, t in types[table].items()}
    own = _own_nodes(select)
    if any(isinstance(n, (exp.Window, exp.Avg, exp.Distinct, exp.Star))
           and not (isinstance(n, exp.Star) and isinstance(n.parent, exp.Count)) for n in own):
        return None
    grouped = bool(select.args.get("group"))
    aliases = {e.alias for e in select.expressions if e.alias} - set(columns)
    measures, dims = set(), set()
    aggregates = [n for n in own if isinstance(n, exp.AggFunc)]
    if not aggregates and not grouped:
        return None
    for agg in aggregates:
        measure = _measure_of(agg)
        if measure is None or not _outermost_aggregate(agg, select):
            return None
        kind, column = measure
        if column != "*" and column not in columns:
            return None
        if kind == "sum" and not columns[column].startswith(EXACT_SUM_TYPES):
            return None
        measures.add(measure)
    for col in (n for n in own if isinstance(n, exp.Column)):
        agg = col.find_ancestor(exp.AggFunc)
        if agg is not None and agg in aggregates and not isinstance(agg, exp.CountIf):
            continue  # a measured column
        if not col.table and col.name in aliases:
            continue  # a reference to one of the query's own output columns
        if not grouped and agg is None and not col.find_ancestor(exp.Where):
            return None  # a column outside every aggregate: a per-row result
        if col.table and col.table != table or col.name not in columns:
            return None
        if columns[col.name] == "TIMESTAMP" and not _only_midnight_comparisons(col):
            return None
        if columns[col.name].startswith(("TIMESTAMP ", "TIMESTAMP_", "TIMESTAMPTZ")):
            return None
        dims.add(col.name)
    return frozenset(dims), frozenset(measures)


def plan_rollups(con: duckdb.DuckDBPyConnection, needs: list[Need], types: dict[str, dict[str, str]]
                 ) -> tuple[Rollup, ...]:
    """One rollup per table that several needs share, grouped by the columns worth grouping by on
    ``con``'s data (few distinct values, a rollup at least MIN_REDUCTION times smaller than the table)."""
    rollups = []
    for table in sorted({n.table for n in needs}):
        mine = [n for n in needs if n.table == table]
        wanted = sorted(set().union(*(n.dims for n in mine)))
        by_day = {d for d in wanted if types[table][d].upper() == "TIMESTAMP"}
        keys = {d: _group_keys(d, d in by_day) for d in wanted}
        try:
            rows, *distinct = con.execute(
                "SELECT COUNT(*)" + "".join(f", approx_count_distinct(hash({', '.join(keys[d])}))" for d in wanted)
                + f" FROM {quote_ident(table)}").fetchone()
        except duckdb.Error:  # a table or column the data does not have: its queries fail as written
            continue
        candidates = sorted((d for d, n in zip(wanted, distinct) if (n or 0) < MAX_DIM_VALUES),
                            key=lambda d: (dict(zip(wanted, distinct))[d], d))
        dims = _widest_fitting(con, table, candidates, keys, rows)
        covered = [n for n in mine if n.dims <= set(dims)]
        if len(covered) < 2:
            continue
        measures = tuple(sorted(set().union(*(n.measures for n in covered))))
        rollups.append(Rollup(table, tuple(dims), tuple(sorted(by_day & set(dims))), measures))
    return tuple(rollups)


def _group_keys(dim: str, by_day: bool) -> list[str]:
    if not by_day:
        return [quote_ident(dim)]
    day = f"CAST({quote_ident(dim)} AS DATE)"
    return [day, f"({quote_ident(dim)} = CAST({day} AS TIMESTAMP))"]


def _widest_fitting(con: duckdb.DuckDBPyConnection, table: str, dims: list[str], keys: dict[str, list[str]],
                    rows: int) -> list[str]:
    """The longest prefix of ``dims`` (fewest values first) whose groups number at most
    rows / MIN_REDUCTION (estimated in one scan)."""
    if not dims:
        return []
    prefixes = [[k for d in dims[:i + 1] for k in keys[d]] for i in range(len(dims))]
    groups = con.execute("SELECT " + ", ".join(f"approx_count_distinct(hash({', '.join(p)}))" for p in prefixes)
                         + f" FROM {quote_ident(table)}").fetchone()
    fitting = [i for i, n in enumerate(groups) if (n or 0) * MIN_REDUCTION <= rows]
    return dims[:fitting[-1] + 1] if fitting and fitting[0] == 0 else []


def create_rollups(con: duckdb.DuckDBPyConnection, rollups: tuple[Rollup, ...]) -> None:
    """Create every rollup on ``con`` (one scan of each table)."""
    for rollup in rollups:
        con.execute(rollup.create_sql())


__all__ = ["Need", "Rollup", "aggregate_types", "every_measure", "create_rollups", "need_of", "plan_rollups", "rollup_form",
           "rollup_name"]
