"""The near-miss study: plausible wrong versions of each gold SQL, rerun on every rotation.

Each operator makes one edit on the sqlglot AST of a gold query. A mutant whose SQL is the gold
SQL's or an earlier mutant's (for edits of AND/OR: after sqlglot's simplifier) is dropped as
equivalent; one that fails to run is recorded as errored. The rest run on every rotation with the
verification comparison; the study records, per operator, how many matched the expected answer on
at least one and on all databases.

Operators: date and range bounds (``inclusive_end``, ``exclusive_start``, ``inclusive_start``,
``exclusive_end``, ``date_shift``), rounding (``whole_units``), aggregates (``agg_swap``,
``distinct``), joins (``inner_join``, ``join_key``, ``outer_join``, ``anti_join_side``, ``not_in``,
``count_star_outer``, ``join_dropped``), filters (``drop_conjunct``, ``and_or``, ``null_flip``),
ordering (``order_flip``, ``limit_shift``), literals and columns (``constant_shift``,
``column_swap``), windows (``window_frame``, ``partition_drop``, ``window_order_flip``,
``lag_offset``, ``rank_swap``), HAVING bounds (``having_bound``), ratios (``percent_scale``,
``integer_division``) and, with rotated answers, ``constant_answer``. Each construct has one owner:
``agg_swap`` leaves COUNT(col) of a LEFT JOINed table to ``count_star_outer``, ``order_flip`` leaves
a window's ORDER BY to ``window_order_flip``, the four bound operators leave HAVING to
``having_bound``, and ``constant_shift`` leaves a LAG/LEAD offset to ``lag_offset`` (as it leaves
ROUND digits to ``whole_units`` and LIMIT to ``limit_shift``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import duckdb
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.simplify import simplify

from evalpack.checks.golden import orders_result
from evalpack.checks.nearmiss.cells import Cells, cells_form, merged, worth_computing
from evalpack.checks.nearmiss.rollup import (
    Need,
    Rollup,
    aggregate_types,
    create_rollups,
    every_measure,
    need_of,
    plan_rollups,
    rollup_form,
)
from evalpack.checks.verification import map_on_cursors
from evalpack.core import cache
from evalpack.core.scoring import answer_matches, verdict_in_any_order
from evalpack.questions.derive import DIALECT, Question, lean, parse_gold
from evalpack.spec.model import Spec

# one dialect object for the thousands of mutants printed: naming the dialect made a new one for every print
PRINTER = Dialect.get_or_raise(DIALECT)

OPERATORS = (
    "inclusive_end", "exclusive_start", "inclusive_start", "exclusive_end", "date_shift", "whole_units",
    "agg_swap", "distinct", "inner_join", "join_key", "outer_join", "anti_join_side", "not_in", "count_star_outer",
    "join_dropped", "drop_conjunct", "and_or", "null_flip", "order_flip", "limit_shift", "constant_shift",
    "column_swap", "window_frame", "partition_drop", "window_order_flip", "lag_offset", "rank_swap", "having_bound",
    "percent_scale", "integer_division", "constant_answer",
)
MAX_SURVIVORS_LISTED = 50


@dataclass(frozen=True)
class _Batchable:
    """A mutant of the form SELECT f(aggregates) FROM source [WHERE cond], rewritten so that many
    with the same source (a table, or tables and their joins) are computed in one scan: every
    aggregate reads only the rows where cond holds."""

    source: str  # what follows FROM, as SQL
    projection: str  # the projection with filtered aggregates, as SQL
    bounds: tuple[str, str | None, str | None] | None  # (column, lower literal SQL, upper literal SQL)


@dataclass(frozen=True)
class Mutant:
    question_id: str
    operator: str
    sql: str
    batch: _Batchable | None = None
    need: Need | None = None  # what a rollup must hold to answer it
    rollup_sql: str | None = None  # the same query over its table's rollup
    # its scalar subqueries that read only tables (as SQL, each as it appears in ``sql``): where mutants
    # share one, a rotation computes it once (see plan_runs)
    subqueries: tuple[str, ...] = ()
    # the same query reading its groups' aggregates from cells (evalpack.checks.nearmiss.cells), and those cells
    cells: tuple[str, tuple[Cells, ...]] | None = None


# --------------------------------------------------------------------------- column types


class _Columns:
    """Column -> DuckDB type per table (money swaps only with money of the same scale), and the
    alias -> table map of one query."""

    def __init__(self, types: dict[str, dict[str, str]], tree: exp.Expression) -> None:
        self.types = {t: {c: v.upper() for c, v in cols.items()} for t, cols in types.items()}
        self.alias = {}
        self.default = None
        for table in tree.find_all(exp.Table):
            self.alias[table.alias_or_name] = table.name
            self.default = self.default or table.name

    def table_of(self, col: exp.Column) -> str | None:
        return self.alias.get(col.table) if col.table else self.default

    def type_of(self, col: exp.Column) -> str | None:
        table = self.table_of(col)
        return self.types.get(table, {}).get(col.name) if table else None

    def same_type(self, col: exp.Column) -> list[str]:
        table, typ = self.table_of(col), self.type_of(col)
        if typ is None:
            return []
        return [c for c, t in self.types[table].items() if t == typ and c != col.name]


# --------------------------------------------------------------------------- operators


def _edits(tree: exp.Expression, kind: type | tuple, edit: Callable[[exp.Expression], list[exp.Expression]]
           ) -> Iterator[exp.Expression]:
    """One mutant per (matching node, replacement): each on a fresh copy of the tree, so the
    edit sees the node in place (with its parents) and may reuse its children.

    An edit that offers nothing leaves its node alone, so the copy it looked at serves the next
    node: most nodes of a kind offer nothing, and copying the tree is most of an operator's cost."""
    count = sum(1 for _ in tree.find_all(kind))
    scratch = None
    for index in range(count):
        if scratch is None:
            scratch = tree.copy()
        target = _nth(scratch, kind, index)
        options = edit(target)
        for option in range(len(options)):
            if option:
                scratch = tree.copy()
                target = _nth(scratch, kind, index)
                options = edit(target)
            replacement = options[option]
            if target is scratch:
                yield replacement
            else:
                target.replace(replacement)
                yield scratch
            scratch = None


def _nth(tree: exp.Expression, kind: type | tuple, index: int) -> exp.Expression:
    return next(node for i, node in enumerate(tree.find_all(kind)) if i == index)


def _date_literal(node: exp.Expression) -> tuple[dt.date, str] | None:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        target = node.to.this
        text = node.this.this
        try:
            if target == exp.DataType.Type.DATE:
                return dt.date.fromisoformat(text), "date"
            if target in exp.DataType.TEMPORAL_TYPES:
                return dt.date.fromisoformat(text[:10]), text[10:]
        except ValueError:
            return None
    return None


def _shift_date(node: exp.Expression) -> list[exp.Expression]:
    parsed = _date_literal(node)
    if not parsed:
        return []
    day, rest = parsed
    out = []
    for delta in (-1, 1):
        moved = (day + dt.timedelta(days=delta)).isoformat()
        new = node.copy()
        new.this.set("this", moved if rest == "date" else moved + rest)
        out.append(new)
    return out


def _is_round_digits(lit: exp.Literal) -> bool:
    parent = lit.parent
    return isinstance(parent, exp.Round) and parent.args.get("decimals") is lit


def _is_limit(lit: exp.Literal) -> bool:
    return isinstance(lit.parent, (exp.Limit, exp.Offset))


def _is_lag_offset(lit: exp.Literal) -> bool:
    parent = lit.parent
    return isinstance(parent, (exp.Lag, exp.Lead)) and parent.args.get("offset") is lit


def _numeric_shift(lit: exp.Literal) -> list[exp.Expression]:
    if lit.is_string or _is_round_digits(lit) or _is_limit(lit) or _is_lag_offset(lit):
        return []
    text = lit.this
    try:
        if "." in text:
            scale = len(text.split(".")[1])
            return [exp.Literal.number(f"{Decimal(text) + d:.{scale}f}") for d in (-1, 1)]
        return [exp.Literal.number(str(int(text) + d)) for d in (-1, 1)]
    except ValueError:
        return []


AGG_SWAPS = {exp.Sum: exp.Avg, exp.Avg: exp.Sum, exp.Min: exp.Max, exp.Max: exp.Min}
RUNNING = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)  # aggregates that an ordered window makes running
RANKINGS = (exp.RowNumber, exp.Rank, exp.DenseRank)


def _in_having(node: exp.Expression) -> bool:
    """Whether ``node`` is in the HAVING of its own query (not of an enclosing one)."""
    return isinstance(node.find_ancestor(exp.Having, exp.Query), exp.Having)


def _in_window_order(node: exp.Ordered) -> bool:
    """Whether ``node`` is a sort key of a window's ORDER BY (``OVER (... ORDER BY node)``)."""
    return isinstance(node.parent, exp.Order) and isinstance(node.parent.parent, exp.Window)


def _is_number(node: exp.Expression, value: int) -> bool:
    if not isinstance(node, exp.Literal) or node.is_string:
        return False
    try:
        return Decimal(node.this) == value
    except InvalidOperation:
        return False


def _fractional_cast(node: exp.Expression) -> bool:
    """A CAST (or ::) to a fractional type: DOUBLE, FLOAT, DECIMAL and their kin."""
    return isinstance(node, exp.Cast) and node.to.is_type(*exp.DataType.REAL_TYPES)


@functools.lru_cache(maxsize=256)
def _integer_type(name: str) -> bool:
    try:
        return exp.DataType.build(name, dialect=DIALECT).is_type(*exp.DataType.INTEGER_TYPES)
    except Exception:  # a type sqlglot does not parse is not known to be an integer
        return False


def _projection(select: exp.Expression, name: str) -> exp.Expression | None:
    """What the output column ``name`` of a SELECT is computed from."""
    if not isinstance(select, exp.Select):
        return None
    for p in select.expressions:
        if p.alias_or_name == name:
            return p.unalias()
    return None


def _integer_typed(node: exp.Expression, types: dict[str, dict[str, str]], depth: int = 0) -> bool:
    """Whether ``node`` (in its tree) surely has an integer type: DuckDB's ``//`` truncates only an
    integer divided by an integer (on DECIMAL or DOUBLE it is ``/``). Columns resolve through the
    declared ``types`` and through CTEs and subqueries to the expressions that compute them; anything
    not known to be an integer is not."""
    if depth > 32:
        return False
    node = node.unnest()
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.isdigit()
    if isinstance(node, (exp.Count, exp.CountIf, exp.RowNumber, exp.Rank, exp.DenseRank)):
        return True
    if isinstance(node, exp.Cast):
        return node.to.is_type(*exp.DataType.INTEGER_TYPES)
    if isinstance(node, exp.Distinct):
        return len(node.expressions) == 1 and _integer_typed(node.expressions[0], types, depth + 1)
    if isinstance(node, (exp.Sum, exp.Min, exp.Max, exp.Lag, exp.Lead, exp.Window, exp.Filter, exp.Neg, exp.Abs)):
        return node.this is not None and _integer_typed(node.this, types, depth + 1)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod)):
        return _integer_typed(node.this, types, depth + 1) and _integer_typed(node.expression, types, depth + 1)
    if isinstance(node, exp.Subquery):
        query = node.this
        return isinstance(query, exp.Select) and len(query.expressions) == 1 \
            and _integer_typed(query.expressions[0].unalias(), types, depth + 1)
    if not isinstance(node, exp.Column):
        return False
    select = node.find_ancestor(exp.Select)
    if select is None:
        return False
    source = select.args.get("from_") or select.args.get("from")
    sources = ([source.this] if source else []) + [j.this for j in select.args.get("joins") or []]
    ctes = {cte.alias_or_name: cte.this for cte in node.root().find_all(exp.CTE)}
    for src in sources:
        if node.table and node.table != src.alias_or_name:
            continue
        if isinstance(src, exp.Subquery):
            computed = _projection(src.this, node.name)
        elif isinstance(src, exp.Table) and src.name in ctes:
            computed = _projection(ctes[src.name], node.name)
        elif isinstance(src, exp.Table) and node.name in types.get(src.name, {}):
            return _integer_type(types[src.name][node.name])
        else:
            continue
        if computed is not None:
            return _integer_typed(computed, types, depth + 1)
    return False


def _running(window: exp.Window) -> bool:
    """Whether ``window`` (ordered) frames each row from its partition's start up to it: no frame
    (the default, RANGE from UNBOUNDED PRECEDING to CURRENT ROW) or such an explicit one."""
    spec = window.args.get("spec")
    if spec is None:
        return True
    start = str(spec.args.get("start") or "").upper()
    end = str(spec.args.get("end") or "CURRENT ROW").upper()
    return start == "UNBOUNDED" and str(spec.args.get("start_side") or "").upper() == "PRECEDING" \
        and end == "CURRENT ROW"


def _reads_only_last(window: exp.Window) -> bool:
    """Whether the query keeps, of the rows ``window`` is computed over, only the last one in the
    window's order: its own SELECT, or one reading it (from its CTE or FROM subquery) with no
    filter, is ORDER BY the window's keys reversed LIMIT 1. A running aggregate's value there is
    its whole partition's: dropping the window's ORDER BY gives the same answer."""
    select = window.find_ancestor(exp.Select)
    if select is None or not _running(window):
        return False
    keys = [(k.this, bool(k.args.get("desc"))) for k in window.args["order"].expressions]
    readers = [(select, True)]
    holder = select.parent
    if isinstance(holder, exp.CTE):
        for other in select.root().find_all(exp.Select):
            source = other.args.get("from_") or other.args.get("from")
            if source and isinstance(source.this, exp.Table) and source.this.name == holder.alias_or_name \
                    and not other.args.get("joins"):
                readers.append((other, False))
    elif isinstance(holder, exp.Subquery) and isinstance(holder.parent, exp.From):
        readers.append((holder.parent.parent, False))
    for reader, own in readers:
        limit = reader.args.get("limit")
        order = reader.args.get("order")
        if not (isinstance(limit, exp.Limit) and _is_number(limit.expression, 1) and order) \
                or len(order.expressions) != len(keys):
            continue
        if not own and any(reader.args.get(k) for k in ("where", "group", "having", "qualify", "distinct")):
            continue
        matched = True
        for ordered, (key, desc) in zip(order.expressions, keys):
            if bool(ordered.args.get("desc")) == desc:
                matched = False
            elif own:
                matched = matched and ordered.this == key
            else:  # the reader sees the window's key through the output column of the same name
                exposed = _projection(select, key.name) if isinstance(key, exp.Column) else None
                matched = matched and exposed == key and isinstance(ordered.this, exp.Column) \
                    and ordered.this.name == key.name
        if matched:
            return True
    return False


def _operand(node: exp.Expression, right: bool) -> exp.Expression:
    """``node`` as the left or right operand of a division: parenthesised unless it binds tightly
    enough (a product or quotient only on the left: division is left-associative)."""
    if isinstance(node, (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Cast, exp.Filter, exp.Window,
                         exp.Subquery)):
        return node
    if not right and isinstance(node, (exp.Mul, exp.Div, exp.IntDiv, exp.Mod)):
        return node
    return exp.Paren(this=node)


def _conjuncts(cond: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of ``cond`` (none for None), each without its parentheses."""
    if cond is None:
        return []
    return [term.unnest() for term in (cond.unnest().flatten() if isinstance(cond.unnest(), exp.And) else [cond])]


def _column_of(node: exp.Expression | None, alias: str) -> bool:
    """Whether ``node``, unwrapped of parentheses and casts, is a column of the table aliased ``alias``."""
    while isinstance(node, (exp.Paren, exp.Cast)):
        node = node.this
    return isinstance(node, exp.Column) and node.table == alias


def _key_pairs(on: exp.Expression | None, alias: str) -> list[tuple[exp.Column, exp.Column]] | None:
    """(column of ``alias``, the other table's column it equals) for each term of a join condition made
    only of such equalities between ``alias`` and one other table; None for any other condition."""
    pairs = []
    for term in _conjuncts(on):
        if not (isinstance(term, exp.EQ) and isinstance(term.this, exp.Column)
                and isinstance(term.expression, exp.Column)):
            return None
        own, other = (term.this, term.expression) if term.this.table == alias else (term.expression, term.this)
        if own.table != alias or other.table in ("", alias):
            return None
        pairs.append((own, other))
    return pairs if pairs and len({other.table for _, other in pairs}) == 1 else None


def _joined(select: exp.Expression | None) -> dict[str, exp.Join]:
    """The joins of ``select`` (a SELECT, else none), by the alias of the table each adds."""
    if not isinstance(select, exp.Select):
        return {}
    return {j.alias_or_name: j for j in select.args.get("joins") or []}


def _inner(join: exp.Join) -> bool:
    return not join.side and join.kind in ("", "INNER") and join.args.get("on") is not None


def _null_extended(node: exp.Expression) -> set[str]:
    """The aliases of the tables a LEFT JOIN adds to ``node``'s own SELECT: NULL in the rows they do not match."""
    return {alias for alias, j in _joined(node.find_ancestor(exp.Select)).items() if j.side == "LEFT"}


NULL_REJECTING = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)


def _rejects_null(term: exp.Expression, alias: str) -> bool:
    """Whether ``term`` is false or unknown when the columns of ``alias`` are NULL: a comparison (or
    ``NOT ... IS NULL``) of one of them."""
    if isinstance(term, exp.Not) and isinstance(term.this.unnest(), exp.Is):
        return _column_of(term.this.unnest().this, alias)
    return isinstance(term, NULL_REJECTING) and (_column_of(term.this, alias) or _column_of(term.expression, alias))


def _argument(agg: exp.Expression) -> exp.Expression | None:
    """What an aggregate reads: the x of SUM(x) or COUNT(DISTINCT x); None for COUNT(*)."""
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        return arg.expressions[0] if len(arg.expressions) == 1 else None
    return None if isinstance(arg, exp.Star) else arg


def _unmatched_ignored(join: exp.Join, unique: Mapping[str, set[str]]) -> bool:
    """Whether the rows ``join`` made LEFT would add (the other tables' rows that match none of its
    table's, NULL in each of its columns) change nothing in its query: a WHERE term or a later inner
    join's condition rejects them; or the query aggregates without GROUP BY and every aggregate reads
    a column of the joined table (aggregates skip NULLs); or it groups by a unique column of its one
    other table, so that each such row is a group of its own, and its HAVING asks for more rows of the
    joined table than such a group holds (COUNT(*) >= 2 and the like)."""
    select, alias = join.parent, join.alias_or_name
    if not isinstance(select, exp.Select):
        return True
    where = select.args.get("where")
    if any(_rejects_null(term, alias) for term in _conjuncts(where.this if where else None)):
        return True
    joins = select.args.get("joins") or []
    later = joins[joins.index(join) + 1:]
    if any(_inner(j) and any(_rejects_null(term, alias) for term in _conjuncts(j.args["on"])) for j in later):
        return True
    group = select.args.get("group")
    aggregates = [a for p in select.expressions for a in p.find_all(AGGREGATES)]
    if group is None and aggregates and all(_column_of(_argument(a), alias) for a in aggregates):
        return True
    source = select.args.get("from_") or select.args.get("from")
    having = select.args.get("having")
    if group is None or having is None or len(joins) != 1 or not isinstance(source.this, exp.Table):
        return False
    keys = unique.get(source.this.name, set())
    if not any(isinstance(g, exp.Column) and g.table in ("", source.this.alias_or_name) and g.name in keys
               for g in group.expressions):
        return False
    for term in _conjuncts(having.this):
        if isinstance(term, (exp.GTE, exp.GT)) and isinstance(term.this, exp.Count) \
                and isinstance(term.expression, exp.Literal) and not term.expression.is_string:
            counted = term.this.this
            rows = 1 if isinstance(counted, exp.Star) else 0 if _column_of(counted, alias) else None
            bar = Decimal(term.expression.this)
            if rows is not None and not (rows >= bar if isinstance(term, exp.GTE) else rows > bar):
                return True
    return False


def _without_table(select: exp.Select, index: int, types: dict[str, dict[str, str]],
                   unique: Mapping[str, set[str]]) -> exp.Select | None:
    """``select`` without its ``index``-th table (0: the FROM one, then its joins in order) and the
    inner join that links it, when that join only checks that a row of the other table has a parent
    there: the join equates a unique column of the dropped table with the other table's columns, and the
    rest of the query reads no column of the dropped table but those, each read from the column it equals
    (under its own name where it is an output column)."""
    joins = select.args["joins"]
    source = select.args.get("from_") or select.args.get("from")
    dropped = source.this if index == 0 else joins[index - 1].this
    link = joins[0] if index == 0 else joins[index - 1]
    alias = dropped.alias_or_name
    pairs = _key_pairs(link.args.get("on"), alias) if _inner(link) and isinstance(dropped, exp.Table) else None
    if not pairs or not any(own.name in unique.get(dropped.name, ()) for own, _ in pairs):
        return None
    equal = {own.name: other for own, other in pairs}
    new = select.copy()
    kept = new.args["joins"]
    if index == 0:
        new.set("from_", exp.From(this=kept[0].this.copy()))
        kept = kept[1:]
    else:
        kept = kept[:index - 1] + kept[index:]
    new.set("joins", kept or None)
    if any(t.alias_or_name == alias for t in new.find_all(exp.Table)):
        return None  # a subquery names another table so: its columns are not the dropped table's
    for col in list(new.find_all(exp.Column)):
        if col.table == alias and col.name in equal:
            other = equal[col.name].copy()
            # a bare output column keeps its name, which an enclosing query may read
            col.replace(exp.alias_(other, col.name) if col.parent is new and other.name != col.name else other)
        elif col.table == alias or (not col.table and col.name in types.get(dropped.name, {})):
            return None
    return new


def mutants_of(q: Question, types: dict[str, dict[str, str]], nullable: dict[str, set[str]] | None = None,
               rotated_answers: dict[str, object] | None = None, unique: dict[str, set[str]] | None = None,
               parsed: exp.Expression | None = None) -> list[tuple[str, exp.Expression]]:
    """Every (operator, mutated AST) for one question's gold SQL.

    ``nullable`` names the columns that can hold NULL: COUNT(*) -> COUNT(col) and NOT EXISTS -> NOT IN
    are only mistakes (rather than the same query) on those. ``unique`` names the columns that hold no
    value twice: a join on one of them finds at most one row, the parent, which ``join_dropped`` drops.
    ``parsed``: the gold SQL already parsed and :func:`lean` (it is left as it is; each mutant is a copy).
    """
    tree = lean(parse_gold(q.gold_sql)) if parsed is None else parsed
    cols = _Columns(types, tree)
    out: list[tuple[str, exp.Expression]] = []

    def add(op: str, trees) -> None:
        out.extend((op, t) for t in trees)

    def bound(new: type) -> Callable[[exp.Expression], list[exp.Expression]]:
        """One comparison rewritten as ``new`` (HAVING's comparisons are ``having_bound``'s)."""
        return lambda n: [] if _in_having(n) else [new(this=n.this, expression=n.expression)]

    add("inclusive_end", _edits(tree, exp.LT, bound(exp.LTE)))
    add("exclusive_start", _edits(tree, exp.GTE, bound(exp.GT)))
    add("inclusive_start", _edits(tree, exp.GT, bound(exp.GTE)))
    add("exclusive_end", _edits(tree, exp.LTE, bound(exp.LT)))
    def later_bound(n: exp.Expression) -> bool:
        """``n`` is the DATE literal of ``date_col >= d`` or ``date_col < d`` outside HAVING: one day later
        it selects what ``> d`` or ``<= d`` do, the bound operators' mutant."""
        parent = n.parent
        return isinstance(parent, (exp.GTE, exp.LT)) and parent.expression is n and not _in_having(parent) \
            and isinstance(parent.this, exp.Column) and cols.type_of(parent.this) == "DATE" \
            and (_date_literal(n) or (None, ""))[1] == "date"

    def shift(n: exp.Expression) -> list[exp.Expression]:
        options = _shift_date(n)
        return options[:1] if options and later_bound(n) else options

    def shift_as_bound(n: exp.Expression) -> list[exp.Expression]:
        if not later_bound(n.expression):
            return []
        return [(exp.GT if isinstance(n, exp.GTE) else exp.LTE)(this=n.this, expression=n.expression)]

    add("date_shift", _edits(tree, exp.Cast, shift))
    # written as the bound it equals, so that the study counts it as equivalent instead of running it twice
    add("date_shift", _edits(tree, (exp.GTE, exp.LT), shift_as_bound))

    def whole(n: exp.Round) -> list[exp.Expression]:
        digits = n.args.get("decimals")
        if isinstance(digits, exp.Literal) and digits.this not in ("0",):
            return [exp.Round(this=n.this, decimals=exp.Literal.number(0))]
        return []

    add("whole_units", _edits(tree, exp.Round, whole))

    def agg(n: exp.Expression) -> list[exp.Expression]:
        if type(n) in AGG_SWAPS:
            return [AGG_SWAPS[type(n)](this=n.this)]
        if isinstance(n, exp.Count):
            if isinstance(n.this, exp.Star):
                return [exp.Count(this=exp.column(c)) for c in sorted((nullable or {}).get(cols.default, ()))]
            if isinstance(n.this, exp.Column) and n.this.table not in _null_extended(n):  # else count_star_outer's
                return [exp.Count(this=exp.Star())]
        return []

    add("agg_swap", _edits(tree, (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count), agg))

    def distinct(n: exp.Expression) -> list[exp.Expression]:
        inner = n.this
        if isinstance(n.parent, exp.Window):
            return []  # DISTINCT in a window aggregate: PostgreSQL, SQLite and SQL Server refuse it, no one writes it
        if isinstance(inner, exp.Distinct):
            return [type(n)(this=inner.expressions[0])]
        if isinstance(inner, exp.Star):
            return []
        return [type(n)(this=exp.Distinct(expressions=[inner]))]

    add("distinct", _edits(tree, (exp.Sum, exp.Avg, exp.Count), distinct))

    def inner_join(n: exp.Join) -> list[exp.Expression]:
        if n.side == "LEFT":
            new = n.copy()
            new.set("side", None)
            return [new]
        return []

    add("inner_join", _edits(tree, exp.Join, inner_join))

    def join_key(n: exp.Join) -> list[exp.Expression]:
        on = n.args.get("on")
        if not isinstance(on, exp.EQ):
            return []
        out_ = []
        for side in ("this", "expression"):
            col = on.args[side]
            if isinstance(col, exp.Column):
                for other in cols.same_type(col):
                    new = n.copy()
                    new.args["on"].set(side, exp.column(other, table=col.table or None))
                    out_.append(new)
        return out_

    add("join_key", _edits(tree, exp.Join, join_key))

    def outer_join(n: exp.Join) -> list[exp.Expression]:
        """An inner join made LEFT, unless the rows it adds change nothing (:func:`_unmatched_ignored`)."""
        if not _inner(n) or _unmatched_ignored(n, unique or {}):
            return []
        new = n.copy()
        new.set("side", "LEFT")
        new.set("kind", None)
        return [new]

    add("outer_join", _edits(tree, exp.Join, outer_join))

    def anti_join_side(n: exp.Is) -> list[exp.Expression]:
        """``x.col IS NULL`` in the WHERE of a query that LEFT JOINs x, col a join column or unique key of x
        (an anti-join) -> the other side's join column IS NULL: the wrong table's key tested for a missing match."""
        col = n.this
        if isinstance(n.parent, exp.Not) or not isinstance(col, exp.Column) or not isinstance(n.expression, exp.Null) \
                or not isinstance(n.find_ancestor(exp.Where, exp.Query), exp.Where):
            return []
        join = _joined(n.find_ancestor(exp.Select)).get(col.table)
        pairs = _key_pairs(join.args.get("on"), col.table) if join is not None and join.side == "LEFT" else None
        if not pairs or not (col.name in (unique or {}).get(cols.alias.get(col.table, ""), ())
                             or any(own.name == col.name for own, _ in pairs)):
            return []
        other = next((o for own, o in pairs if own.name == col.name), pairs[0][1])
        return [exp.Is(this=other.copy(), expression=exp.Null())]

    add("anti_join_side", _edits(tree, exp.Is, anti_join_side))

    def not_in(n: exp.Not) -> list[exp.Expression]:
        """NOT EXISTS (SELECT ... FROM t WHERE t.k = outer.k [AND rest]) -> outer.k NOT IN (SELECT t.k FROM t
        [WHERE rest]), where either key can be NULL: one NULL t.k makes NOT IN reject every row, and a NULL
        outer.k is rejected where NOT EXISTS keeps it."""
        sub = n.this.this if isinstance(n.this, exp.Exists) else None
        if not isinstance(sub, exp.Select) or sub.args.get("where") is None:
            return []
        own = {t.alias_or_name for t in sub.find_all(exp.Table)}
        link, rest = None, []
        for term in _conjuncts(sub.args["where"].this):
            sides = (term.this, term.expression) if isinstance(term, exp.EQ) else ()
            if link is None and all(isinstance(s, exp.Column) for s in sides) \
                    and [s.table in own for s in sides] in ([True, False], [False, True]):
                link = sides if sides[0].table in own else sides[::-1]
            else:
                rest.append(term)
        if link is None or any(c.table not in own for term in rest for c in term.find_all(exp.Column)):
            return []
        inner, outer = link
        if not any(c.name in (nullable or {}).get(cols.alias.get(c.table, ""), ()) for c in link):
            return []  # without NULLs NOT IN is NOT EXISTS
        query = sub.copy()
        query.set("expressions", [inner.copy()])
        query.set("where", exp.Where(this=exp.and_(*(t.copy() for t in rest))) if rest else None)
        return [exp.Not(this=exp.In(this=outer.copy(), query=exp.Subquery(this=query)))]

    add("not_in", _edits(tree, exp.Not, not_in))

    def count_star_outer(n: exp.Count) -> list[exp.Expression]:
        """COUNT(x.col) -> COUNT(*) where x is LEFT JOINed: a row without a match counts as one."""
        if isinstance(n.this, exp.Column) and n.this.table in _null_extended(n):
            return [exp.Count(this=exp.Star())]
        return []

    add("count_star_outer", _edits(tree, exp.Count, count_star_outer))

    def join_dropped(n: exp.Select) -> list[exp.Expression]:
        """The query without the inner join to a parent (a unique key) that it reads only the key of:
        rows whose parent is missing (orphans, NULL keys) count again (:func:`_without_table`)."""
        joins = n.args.get("joins") or []
        if not joins:
            return []
        return [new for index in range(len(joins) + 1)
                if (new := _without_table(n, index, types, unique or {})) is not None]

    add("join_dropped", _edits(tree, exp.Select, join_dropped))

    def drop(n: exp.And) -> list[exp.Expression]:
        return [n.this.copy(), n.expression.copy()]

    add("drop_conjunct", _edits(tree, exp.And, drop))
    add("and_or", _edits(tree, exp.And, lambda n: [exp.Or(this=n.this, expression=n.expression)]))

    def null_flip(n: exp.Expression) -> list[exp.Expression]:
        if isinstance(n, exp.Not) and isinstance(n.this, exp.Is):
            return [n.this.copy()]
        if isinstance(n, exp.Is) and not isinstance(n.parent, exp.Not):
            return [exp.Not(this=n.copy())]
        return []

    add("null_flip", _edits(tree, (exp.Not, exp.Is), null_flip))

    def order_flip(n: exp.Ordered) -> list[exp.Expression]:
        if _in_window_order(n):  # window_order_flip's
            return []
        new = n.copy()
        new.set("desc", not n.args.get("desc"))
        return [new]

    add("order_flip", _edits(tree, exp.Ordered, order_flip))

    def limit_shift(n: exp.Limit) -> list[exp.Expression]:
        try:
            value = int(n.expression.this)
        except (AttributeError, TypeError, ValueError):
            return []
        return [exp.Limit(expression=exp.Literal.number(v)) for v in (value - 1, value + 1) if v >= 0]

    add("limit_shift", _edits(tree, exp.Limit, limit_shift))
    add("constant_shift", _edits(tree, exp.Literal, _numeric_shift))

    def column_swap(n: exp.Column) -> list[exp.Expression]:
        if not (n.find_ancestor(exp.Where, exp.Select, exp.Having)) or n.find_ancestor(exp.Join):
            return []
        return [exp.column(other, table=n.table or None) for other in cols.same_type(n)]

    add("column_swap", _edits(tree, exp.Column, column_swap))

    def window_frame(n: exp.Window) -> list[exp.Expression]:
        """ROWS BETWEEN UNBOUNDED PRECEDING -> 1 PRECEDING (the frame ends where it did); and a
        running aggregate (one with an ORDER BY) over its whole partition: ORDER BY and frame dropped,
        unless the query reads only the last row of the window's order (the same answer there)."""
        out_ = []
        spec = n.args.get("spec")
        if spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS" \
                and str(spec.args.get("start") or "").upper() == "UNBOUNDED" \
                and str(spec.args.get("start_side") or "").upper() == "PRECEDING":
            new = n.copy()
            new.args["spec"].set("start", exp.Literal.number(1))
            out_.append(new)
        whole = spec is not None and str(spec.args.get("start") or "").upper() == "UNBOUNDED" \
            and str(spec.args.get("end") or "").upper() == "UNBOUNDED"
        if isinstance(n.this, RUNNING) and n.args.get("order") and not whole and not _reads_only_last(n):
            new = n.copy()
            new.set("order", None)
            new.set("spec", None)  # a frame without ORDER BY would run in no defined order
            out_.append(new)
        return out_

    add("window_frame", _edits(tree, exp.Window, window_frame))

    def partition_drop(n: exp.Window) -> list[exp.Expression]:
        if not n.args.get("partition_by"):
            return []
        new = n.copy()
        new.set("partition_by", None)
        return [new]

    add("partition_drop", _edits(tree, exp.Window, partition_drop))

    def window_order_flip(n: exp.Window) -> list[exp.Expression]:
        """Every key of the window's ORDER BY the other way round (ascending <-> descending)."""
        if not n.args.get("order"):
            return []
        new = n.copy()
        for key in new.args["order"].expressions:
            key.set("desc", not key.args.get("desc"))
        return [new]

    add("window_order_flip", _edits(tree, exp.Window, window_order_flip))

    def lag_offset(n: exp.Expression) -> list[exp.Expression]:
        """LAG/LEAD(x[, k]) -> offset k + 1 and (k > 1) k - 1; then LAG <-> LEAD with the same arguments."""
        offset = n.args.get("offset")
        k = 1 if offset is None else (int(offset.this) if isinstance(offset, exp.Literal) and not offset.is_string
                                      and offset.this.isdigit() else None)
        out_ = []
        for v in ((k + 1, k - 1) if k is not None else ()):
            if v >= 1:
                new = n.copy()
                new.set("offset", exp.Literal.number(v))
                out_.append(new)
        other = exp.Lead if isinstance(n, exp.Lag) else exp.Lag
        out_.append(other(**{arg: value.copy() for arg, value in n.args.items() if value is not None}))
        return out_

    add("lag_offset", _edits(tree, (exp.Lag, exp.Lead), lag_offset))

    def rank_swap(n: exp.Expression) -> list[exp.Expression]:
        if not isinstance(n.parent, exp.Window) or any(n.args.values()):
            return []
        return [other() for other in RANKINGS if not isinstance(n, other)]

    add("rank_swap", _edits(tree, RANKINGS, rank_swap))

    having_swaps = {exp.GT: exp.GTE, exp.GTE: exp.GT, exp.LT: exp.LTE, exp.LTE: exp.LT}

    def having_bound(n: exp.Expression) -> list[exp.Expression]:
        if not _in_having(n):
            return []
        return [having_swaps[type(n)](this=n.this, expression=n.expression)]

    add("having_bound", _edits(tree, tuple(having_swaps), having_bound))

    def percent_scale(n: exp.Mul) -> list[exp.Expression]:
        """100 * e or e * 100 -> e: a fraction where a percentage was asked."""
        return [n.args[keep].copy() for drop_, keep in (("this", "expression"), ("expression", "this"))
                if _is_number(n.args[drop_], 100)][:1]

    add("percent_scale", _edits(tree, exp.Mul, percent_scale))

    def integer_division(n: exp.Div) -> list[exp.Expression]:
        """a / b -> a // b where a and b are integers (DuckDB's // of a DECIMAL or DOUBLE is /, the
        same query); and each fractional CAST operand dropped: what is left is written a // b when
        it divides an integer by an integer (the truncation the cast was there to prevent: DuckDB's
        / would still divide exactly), a / b when the cast was a DECIMAL's rounding, and not at all
        when it was a DOUBLE or FLOAT cast of a non-integer (the same query)."""
        out_ = []
        if _integer_typed(n.this, cols.types) and _integer_typed(n.expression, cols.types):
            out_.append(exp.IntDiv(this=n.this.copy(), expression=n.expression.copy()))
        for side in ("this", "expression"):
            cast = n.args[side]
            if not _fractional_cast(cast):
                continue
            other = n.expression if side == "this" else n.this
            kept = {side: _operand(cast.this.copy(), side == "expression"),
                    ("expression" if side == "this" else "this"): other.copy()}
            if _integer_typed(cast.this, cols.types) and _integer_typed(other, cols.types):
                out_.append(exp.IntDiv(**kept))
            elif not cast.to.is_type(exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):
                out_.append(exp.Div(**kept))
        return out_

    add("integer_division", _edits(tree, exp.Div, integer_division))

    if rotated_answers:
        out.append(("constant_answer", constant_answer(rotated_answers)))
    return out


def constant_answer(rotated_answers: dict[str, object]) -> exp.Expression:
    """The ``constant_answer`` mutant: the first rotation's answer as a literal, the last of :func:`mutants_of`
    and the only one that reads the answers. Written where rotations answer differently, it matches on one."""
    first = next(iter(rotated_answers.values()))
    literal = exp.Literal.string(first) if isinstance(first, str) else exp.Literal.number(first)
    return exp.select(literal)


def table_subqueries(tree: exp.Expression, types: dict[str, dict[str, str]]) -> tuple[str, ...]:
    """The SQL of each scalar subquery of ``tree`` that depends on nothing outside it: it reads only
    tables of ``types`` (no CTE of the query) and each of its columns is one of their columns.

    Such a subquery has one value per database, whatever query holds it."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    out = []
    for sub in tree.find_all(exp.Subquery):
        if isinstance(sub.parent, (exp.From, exp.Join)) or not isinstance(sub.this, exp.Select):
            continue
        tables = list(sub.find_all(exp.Table))
        if not tables or any(t.name in ctes or t.name not in types for t in tables):
            continue
        names = {t.alias_or_name: t.name for t in tables}
        columns = set().union(*(types[t.name] for t in tables))
        if all((c.table in names and c.name in types[names[c.table]]) if c.table else c.name in columns
               for c in sub.find_all(exp.Column)):
            out.append(sub.sql(dialect=PRINTER))
    return tuple(dict.fromkeys(out))


# the operators whose edit changes a boolean connective: only there can the mutant collapse into the
# gold query by logic alone (a duplicated or absorbed conjunct); sqlglot's simplifier, which costs about
# as much as everything else in preparing a mutant, runs on those alone
CONNECTIVE_OPERATORS = frozenset({"drop_conjunct", "and_or"})


def _canonical(tree: exp.Expression) -> str:
    """The SQL of ``tree`` after sqlglot's simplifier (``tree`` is consumed)."""
    try:
        return simplify(tree).sql(dialect=PRINTER, copy=False)
    except Exception:  # simplify can fail on unusual trees; the plain SQL still identifies the query
        return tree.sql(dialect=PRINTER, copy=False)


# --------------------------------------------------------------------------- running


def nullable_columns(spec: Spec) -> dict[str, set[str]]:
    """Columns that can be NULL in the data: declared nullable, or a foreign key with declared nulls."""
    out: dict[str, set[str]] = {t.name: {c.name for c in t.columns if c.nullable} for t in spec.tables}
    for rel in spec.relationships:
        if rel.nulls:
            out[rel.child_table].add(rel.child_column)
    return out


def unique_columns(spec: Spec) -> dict[str, set[str]]:
    """Columns that hold no value twice: declared unique (every parent key is)."""
    return {t.name: {c.name for c in t.columns if c.unique} for t in spec.tables}


@dataclass(frozen=True)
class MutantSet:
    """Every question's non-equivalent mutants, and which (question, operator) edits were
    equivalent to the gold SQL and dropped."""

    mutants: tuple[Mutant, ...]
    equivalent: tuple[tuple[str, str], ...]

    def of(self, question_ids) -> tuple[list[Mutant], dict[str, int]]:
        """The mutants of ``question_ids`` and their equivalent count per operator."""
        ids = set(question_ids)
        equivalent = dict.fromkeys(OPERATORS, 0)
        for question_id, op in self.equivalent:
            if question_id in ids:
                equivalent[op] += 1
        return [m for m in self.mutants if m.question_id in ids], equivalent


def prepare_mutants(spec: Spec, questions: tuple[Question, ...], types: dict[str, dict[str, str]],
                    pool: Executor | None = None) -> MutantSet:
    """Mutate every question's gold SQL (no data needed: a build starts this while it writes).

    Each gold SQL is prepared once per process (a process that builds the same spec again, such as
    Dagster's code server, reuses it) and kept in the cache on disk for other processes. With ``pool``
    (worker processes) the gold SQL texts not prepared yet are shared out among its workers: the
    work is pure, so the mutants are the same either way."""
    nullable = nullable_columns(spec)
    schema = json.dumps(types, sort_keys=True)
    maybe_null = json.dumps({t: sorted(c) for t, c in nullable.items()}, sort_keys=True)
    unique = json.dumps({t: sorted(c) for t, c in unique_columns(spec).items()}, sort_keys=True)
    keys = [(q.gold_sql, schema, maybe_null, json.dumps(list(q.expected), default=str)
             if spec.answers == "rotated" else None, unique) for q in questions]
    missing = [k for k in dict.fromkeys(keys) if k not in _PREPARED]
    if len(_PREPARED) + len(missing) > PREPARED_CACHE:
        _PREPARED.clear()
    if pool is not None and len(missing) > 1:
        _PREPARED.update(zip(missing, pool.map(_cached_prepared, missing, chunksize=PREPARE_CHUNK)))
    else:
        _PREPARED.update((k, _cached_prepared(k)) for k in missing)
    mutants: list[Mutant] = []
    equivalent = []
    for q, key in zip(questions, keys):
        for op, prepared in _PREPARED[key]:
            if prepared is None:
                equivalent.append((q.id, op))
            else:
                mutants.append(Mutant(q.id, op, *prepared))
    return MutantSet(tuple(mutants), tuple(equivalent))


PREPARED_CACHE = 4096  # gold SQL texts whose mutants a process keeps
PREPARE_CHUNK = 4  # gold SQL texts per task given to a worker: their costs differ, small tasks balance them
_PREPARED: dict[tuple, tuple] = {}
# what preparing a gold SQL's mutants reads besides its arguments: a change to any of them is a new key
PREPARING_CODE = ("evalpack.checks.nearmiss.study", "evalpack.checks.nearmiss.rollup", "evalpack.checks.nearmiss.cells", "evalpack.questions.derive", "evalpack.core.scoring")


def _cached_prepared(key: tuple) -> tuple:
    """:func:`_prepared` of ``key``, through the cache on disk (see evalpack.core.cache): a process that
    builds a spec another process built before (a test session, the CLI after Dagster) skips the sqlglot work."""
    return cache.remembered("mutants", PREPARING_CODE, key, lambda: _prepared(*key), decode=decode_prepared,
                            encode=encode_prepared)


def encode_prepared(prepared: tuple) -> list:
    """:func:`_prepared`'s result as JSON values (:func:`decode_prepared` gives it back, equal)."""
    out = []
    for op, made in prepared:
        if made is None:
            out.append([op, None])
            continue
        sql, batch, need, over_rollup, shared, cells = made
        out.append([op, [sql, None if batch is None else [batch.source, batch.projection, batch.bounds],
                         None if need is None else [need.table, sorted(need.dims), sorted(need.measures), need.grouped],
                         over_rollup, list(shared),
                         None if cells is None else [cells[0], [[c.table, list(c.keys), [list(a) for a in c.aggregates],
                                                                 None if c.window is None else list(c.window)]
                                                                for c in cells[1]]]]])
    return out


def decode_prepared(stored: list) -> tuple:
    """The inverse of :func:`encode_prepared`; raises TypeError or ValueError on anything else."""
    out = []
    for op, made in stored:
        if op not in OPERATORS:
            raise ValueError(f"unknown operator {op!r}")
        if made is None:
            out.append((op, None))
            continue
        sql, batch, need, over_rollup, shared, cells = made
        if not isinstance(sql, str) or not (over_rollup is None or isinstance(over_rollup, str)) \
                or not all(isinstance(sub, str) and sub in sql for sub in shared):
            raise TypeError("mutant SQL is not text")
        if batch is not None:
            source, projection, bounds = batch
            batch = _Batchable(str(source), str(projection), None if bounds is None else tuple(bounds))
        if need is not None:
            table, dims, measures, grouped = need
            need = Need(str(table), frozenset(dims), frozenset(tuple(m) for m in measures), bool(grouped))
        if cells is not None:
            cells_sql, tables = cells
            if not isinstance(cells_sql, str):
                raise TypeError("cells SQL is not text")
            cells = (cells_sql, tuple(Cells(str(table), tuple(map(str, keys)), tuple((str(c), str(a)) for c, a in aggs),
                                            None if window is None else tuple(map(str, window)))
                                      for table, keys, aggs, window in tables))
        out.append((op, (sql, batch, need, over_rollup, tuple(shared), cells)))
    return tuple(out)


def _prepared(gold_sql: str, schema: str, maybe_null: str, rotated: str | None, unique_keys: str = "{}"
              ) -> tuple[tuple[str, tuple | None], ...]:
    """(operator, (sql, batch form, rollup need, rollup SQL, table subqueries, cells form) or None when equivalent to the
    gold SQL) for one gold SQL. Pure, and its arguments are text (JSON), so that they key :data:`_PREPARED`.

    With ``rotated`` answers the mutants are those without them, read through :func:`_cached_prepared` (a fact of
    the spec changed, the answers with it, the SQL not: only the last mutant is new), then
    :func:`constant_answer`, the last of :func:`mutants_of` and the only one that reads them."""
    expected = json.loads(rotated) if rotated else []
    if expected:
        unanswered = _cached_prepared((gold_sql, schema, maybe_null, None, unique_keys))
        return unanswered + (_constant_prepared(gold_sql, schema, dict((r, v) for r, v in expected), unanswered),)
    types = json.loads(schema)
    nullable = {t: set(c) for t, c in json.loads(maybe_null).items()}
    unique = {t: set(c) for t, c in json.loads(unique_keys).items()}
    result_types = _result_types(schema)
    q = Question("", "", gold_sql, (), "", None, "", ())
    gold = lean(parse_gold(gold_sql))
    seen = {gold.sql(dialect=PRINTER), _canonical(gold.copy())}
    return tuple((op, _prepared_one(op, tree, types, result_types, seen))
                 for op, tree in mutants_of(q, types, nullable, None, unique, parsed=gold))


def _constant_prepared(gold_sql: str, schema: str, rotated_answers: dict[str, object],
                       unanswered: tuple[tuple[str, tuple | None], ...]) -> tuple[str, tuple | None]:
    """:func:`constant_answer` prepared after ``unanswered`` (the gold SQL's other mutants, prepared), as it would be
    at the end of their loop. What it is compared with there: the gold SQL printed and simplified, and each earlier
    mutant's SQL; the simplified forms of the connective ones are left out, since every one of them reads a table and
    this mutant reads none."""
    gold = lean(parse_gold(gold_sql))
    seen = {gold.sql(dialect=PRINTER), _canonical(gold.copy()), *(made[0] for _, made in unanswered if made)}
    tree = constant_answer(rotated_answers)
    return "constant_answer", _prepared_one("constant_answer", tree, json.loads(schema), _result_types(schema), seen)


def _prepared_one(op: str, tree: exp.Expression, types: dict[str, dict[str, str]], result_types: dict,
                  seen: set[str]) -> tuple | None:
    """One mutant's prepared forms (see :func:`_prepared`), or None when it is the same query as the gold SQL or an
    earlier mutant (``seen``: their SQL, to which this one's is added; ``tree`` is consumed)."""
    sql = tree.sql(dialect=PRINTER, copy=False)  # printing leaves the tree as it was
    if sql in seen:
        return None
    need = need_of(tree, types)
    # a rollup is small enough to run its queries one by one: batch only the others
    batch = None if need else batchable(tree)
    connective = op in CONNECTIVE_OPERATORS
    # the tree is needed after the rollup form only by _canonical, which consumes it
    over_rollup = rollup_form(tree, need, result_types, copy=connective).sql(dialect=PRINTER, copy=False) \
        if need else None
    shared = () if need or batch else table_subqueries(tree, types)
    cells = None if need or batch else cells_form(tree, types)
    forms = {sql, _canonical(tree)} if connective else {sql}
    if forms & seen:
        return None
    seen |= forms
    return sql, batch, need, over_rollup, shared, cells


@functools.lru_cache(maxsize=16)
def _result_types(schema: str) -> dict:
    types = json.loads(schema)
    return aggregate_types(types, every_measure(types))


def build_mutants(spec: Spec, questions: tuple[Question, ...], types: dict[str, dict[str, str]]
                  ) -> tuple[list[Mutant], dict[str, int]]:
    """Non-equivalent mutants of every question, and the count of equivalent ones per operator."""
    return prepare_mutants(spec, questions, types).of(q.id for q in questions)


AGGREGATES = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count, exp.CountIf)


def _bounds(where: exp.Expression | None) -> tuple[str, exp.Expression | None, exp.Expression | None] | None:
    """The column and literal bounds (either may be missing) of a top-level AND-chain window."""
    if where is None:
        return None
    found: dict[str, list] = {}
    for term in (where.flatten() if isinstance(where, exp.And) else [where]):
        term = term.unnest()
        if isinstance(term, exp.And):
            inner = _bounds(term)
            if inner:
                slot = found.setdefault(inner[0], [None, None])
                slot[0], slot[1] = slot[0] or inner[1], slot[1] or inner[2]
            continue
        if isinstance(term, (exp.GTE, exp.GT, exp.LT, exp.LTE)) and isinstance(term.this, exp.Column) \
                and isinstance(term.expression, exp.Cast):
            slot = found.setdefault(term.this.name, [None, None])
            slot[0 if isinstance(term, (exp.GTE, exp.GT)) else 1] = term.expression
    if len(found) != 1:
        return None
    column, (lower, upper) = next(iter(found.items()))
    return column, lower, upper


def _only_when(agg: exp.Expression, cond: exp.Expression) -> exp.Expression:
    """``agg`` over the rows where ``cond`` holds: each argument becomes CASE WHEN cond THEN arg END.

    The aggregates batched here ignore NULL arguments, so this equals ``agg FILTER (WHERE cond)``;
    DuckDB evaluates it about three times faster than FILTER on wide batches."""
    def when(arg: exp.Expression) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=exp.Paren(this=cond.copy()), true=arg)])

    arg = agg.this
    if isinstance(arg, exp.Distinct):
        arg.set("expressions", [when(e) for e in arg.expressions])
    elif arg is None or isinstance(arg, exp.Star):  # COUNT(*): count the rows where cond holds
        agg.set("this", when(exp.Literal.number(1)))
    else:
        agg.set("this", when(arg))
    return agg


def batchable(query: str | exp.Expression) -> _Batchable | None:
    """The batch form of a scalar aggregate query over a table or joined tables (SQL or AST, not
    modified), or None. Joined mutants share their join: its rows are what the aggregates filter."""
    tree = parse_gold(query) if isinstance(query, str) else query
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1:
        return None
    if any(tree.args.get(k) for k in ("group", "having", "order", "limit", "offset", "distinct", "with",
                                      "qualify", "windows")):
        return None
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source else None
    joins = tree.args.get("joins") or []
    if not isinstance(table, exp.Table) or any(not isinstance(j.this, exp.Table) for j in joins):
        return None
    plain = not joins and not table.args.get("alias")  # a single table: its window can bound the scan
    projection = tree.expressions[0].copy()
    if isinstance(projection, exp.Alias):
        projection = projection.this
    aggregates = [a for a in projection.find_all(AGGREGATES)]
    if not aggregates or any(isinstance(n, (exp.Subquery, exp.Select, exp.Window, exp.Filter))
                             for n in projection.find_all(exp.Expression)):
        return None
    # a column outside every aggregate would make the query invalid (or a per-row result)
    if any(not c.find_ancestor(*AGGREGATES) for c in projection.find_all(exp.Column)):
        return None
    where = tree.args.get("where")
    cond = where.this if where else None
    holder = exp.Paren(this=projection)  # so that a bare aggregate can be replaced too
    if cond is not None:
        for agg in list(projection.find_all(AGGREGATES)):
            agg.replace(_only_when(agg.copy(), cond))
    bounds = _bounds(cond) if plain else None
    if bounds is not None:
        bounds = (bounds[0], *(None if b is None else b.sql(dialect=PRINTER) for b in bounds[1:]))
    source_sql = " ".join([table.sql(dialect=PRINTER), *(j.sql(dialect=PRINTER) for j in joins)])
    return _Batchable(source_sql, holder.this.sql(dialect=PRINTER), bounds)


BATCH_WIDTH = 64
ROLLUP_BATCH = 16  # rollup queries per statement (8 a statement ran slower than one by one in DuckDB 2.0)
# mutants of one shape whose SQL differs only in DATE literals, as every mutant prints them
DATE_LITERAL = re.compile(r"CAST\('(\d{4}-\d{2}-\d{2})' AS DATE\)")
LITERALS = "__evalpack_literal"  # the table of a templated statement's literals; a SQL naming it is not templated
ROW_ALIAS = "__evalpack_row"  # a batched mutant's rows, each as a struct; a mutant whose SQL has it runs alone


def _parts(indices: list[int]) -> list[list[int]]:
    return [indices[k:k + ROLLUP_BATCH] for k in range(0, len(indices), ROLLUP_BATCH)]


@dataclass(frozen=True)
class StudyJob:
    """One statement of a rotation's study: ``sql`` returns one row with one value per member, the member's
    scalar answer or, with ``rows``, the list of its result rows (each a struct); None: the one member runs
    on its own. ``per_member``: ``sql`` returns one row per member instead, (member, list of its rows)."""

    sql: str | None
    members: list[int]
    rows: bool = False
    per_member: bool = False


def _rows_list(sql: str) -> str:
    """A scalar subquery with the list of ``sql``'s result rows, each a struct (NULL when there are none)."""
    return f"(SELECT list({ROW_ALIAS}) FROM ({sql}) AS {ROW_ALIAS})"


def date_template(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """``sql`` with each of its DATE literals read from a column of :data:`LITERALS` (``CAST('2025-01-01' AS
    DATE)`` becomes ``CAST(__evalpack_literal.__evalpack_literal_0 AS DATE)``), and those literals' texts; None
    when it has none or names :data:`LITERALS`. DuckDB's tokenizer confirms each is a literal, not text inside a
    quoted name, a string or a comment."""
    found = list(DATE_LITERAL.finditer(sql))
    if not found or LITERALS in sql:
        return None
    starts = dict(duckdb.tokenize(sql))
    if any(starts.get(m.start()) != duckdb.token_type.keyword
           or starts.get(m.start(1) - 1) != duckdb.token_type.string_const for m in found):
        return None
    parts, end = [], 0
    for n, m in enumerate(found):
        parts += [sql[end:m.start()], f"CAST({LITERALS}.{LITERALS}_{n} AS DATE)"]
        end = m.end()
    return "".join(parts) + sql[end:], tuple(m.group(1) for m in found)


def templated_jobs(sql: Mapping[int, str]) -> tuple[list[StudyJob], list[int]]:
    """Statements for the members of ``sql`` (index -> SQL) that share a :func:`date_template` with another:
    each group runs its template once per member's literals, as a correlated subquery over a VALUES list of
    them (planned once instead of once per member); and the members left over."""
    groups: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    rest = []
    for i, text in sql.items():
        found = date_template(text)
        if found is None:
            rest.append(i)
        else:
            groups.setdefault(found[0], []).append((i, found[1]))
    jobs = []
    for template, members in groups.items():
        if len(members) < 2:
            rest.append(members[0][0])
            continue
        columns = ", ".join(f"{LITERALS}_{n}" for n in range(len(members[0][1])))
        values = ", ".join(f"({i}, {', '.join(repr(text) for text in literals)})" for i, literals in members)
        jobs.append(StudyJob(f"SELECT {LITERALS}.{LITERALS}_member, {_rows_list(template)} "
                             f"FROM (VALUES {values}) AS {LITERALS}({LITERALS}_member, {columns})",
                             [i for i, _ in members], rows=True, per_member=True))
    return jobs, sorted(rest)


def _batches(items: list[tuple[str, _Batchable | None]]) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """(batch SQL, item indices) groups, and the indices of items that run one by one.

    ``items`` are (question id, batch form or None). Mutants of one question that bound the same
    column on the same sides share a scan restricted to the union of their windows, so zone maps
    still skip the rest of the table."""
    groups: dict[tuple, list[tuple[int, _Batchable]]] = {}
    alone = []
    for i, (question_id, b) in enumerate(items):
        if b is None:
            alone.append(i)
            continue
        column, lower, upper = b.bounds or (None, None, None)
        groups.setdefault((b.source, question_id, column, lower is not None, upper is not None), []).append((i, b))
    out = []
    for (source, _, column, has_lower, has_upper), members in groups.items():
        for start in range(0, len(members), BATCH_WIDTH):
            part = members[start:start + BATCH_WIDTH]
            sql = f'SELECT {", ".join(b.projection for _, b in part)} FROM {source}'
            # LEAST/GREATEST of the members' literals: a superset of their rows; each CASE does the rest
            limits = []
            if has_lower:
                limits.append(f'"{column}" >= LEAST({", ".join(b.bounds[1] for _, b in part)})')
            if has_upper:
                limits.append(f'"{column}" <= GREATEST({", ".join(b.bounds[2] for _, b in part)})')
            if limits:
                sql += " WHERE " + " AND ".join(limits)
            out.append((sql, [i for i, _ in part]))
    return out, alone


@dataclass(frozen=True)
class StudyPlan:
    """How a rotation runs the study: the rollups to create, the SQL each mutant runs as (its own,
    or its rewrite over a rollup), and the batches (indices into ``mutants``)."""

    mutants: tuple[Mutant, ...]
    rollups: tuple[Rollup, ...]
    sql: tuple[str, ...]
    batches: tuple[tuple[str, list[int]], ...]
    alone: tuple[int, ...]
    shared: tuple[tuple[str, str], ...] = ()  # (table, scalar subquery SQL) computed once per rotation
    cells: tuple[Cells, ...] = ()  # computed once per rotation
    over_cells: frozenset[int] = frozenset()  # the mutants that read them

    def create_tables(self, con: duckdb.DuckDBPyConnection) -> None:
        """The rollups, the shared subqueries' values and the cells, in ``con``'s database (every cursor sees
        them)."""
        create_rollups(con, self.rollups)
        # if one fails, the mutants reading it fall back to their own SQL, which fails or not on its own
        for table, subquery in self.shared:
            with contextlib.suppress(duckdb.Error):
                con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM {subquery}')
        for cells in self.cells:
            with contextlib.suppress(duckdb.Error):
                con.execute(cells.create_sql())

    def jobs(self) -> list[StudyJob]:
        """The statements that run the study, costliest kinds first."""
        # several mutants go in one statement: rewrites over a rollup that return one value as scalar
        # subqueries, and the others as the list of each one's rows (a list's order is not guaranteed to be
        # the rows', so a mutant compared in row order is judged on it only where no order could change the
        # verdict, and otherwise runs again on its own); one that DuckDB cannot run that way makes the
        # statement fail, and its members then run one by one
        # rewrites over a rollup or over cells read far fewer rows than the table has: they run last
        over_rollup = {i for i in self.alone if self.sql[i] == self.mutants[i].rollup_sql or i in self.over_cells}

        def kind(i: int) -> str:
            if i in over_rollup and self.mutants[i].need and not self.mutants[i].need.grouped:
                return "scalar"
            return "alone" if ROW_ALIAS in self.sql[i] else "listed"

        runs: dict[str, list[int]] = {"scalar": [], "alone": [], "listed": []}
        for i in self.alone:
            runs[kind(i)].append(i)
        scalar, alone, listed = runs["scalar"], runs["alone"], runs["listed"]

        def lists(members: list[int]) -> list[StudyJob]:
            return [StudyJob("SELECT " + ", ".join(_rows_list(self.sql[i]) for i in part), part, rows=True)
                    for part in _parts(members)]

        # over a rollup or cells, mutants that differ only in dates run as one correlated statement per shape
        # (on the table itself that is a join of every row with every date, far slower than each alone)
        templated, rest = templated_jobs({i: self.sql[i] for i in listed if i in over_rollup})
        return [*templated,
                *(StudyJob(sql, members) for sql, members in self.batches),
                *lists([i for i in listed if i not in over_rollup]),
                *(StudyJob(None, [i]) for i in alone),
                *(StudyJob("SELECT " + ", ".join(f"({self.sql[i]})" for i in part), part) for part in _parts(scalar)),
                *lists(rest)]


def plan_runs(mutants: list[Mutant], rollups: tuple[Rollup, ...]) -> StudyPlan:
    """Rewrite the mutants a rollup covers onto it, then batch everything that can share a scan.

    A scalar subquery that reads only tables and appears in several mutants (a year's total in every
    month's share, mistaken the same way) is computed once into a table; those mutants read its one value.
    Cells (:mod:`evalpack.checks.nearmiss.cells`) that several mutants read are computed once, and those mutants read them."""
    counts = Counter(sub for m in mutants if not (m.rollup_sql or m.batch) for sub in m.subqueries)
    shared = {sub: f"__shared_{index}" for index, sub in enumerate(sorted(s for s, n in counts.items() if n > 1))}
    covered = [bool(m.rollup_sql and any(r.covers(m.need) for r in rollups)) for m in mutants]
    readers: dict[str, list[Cells]] = {}
    for m, done in zip(mutants, covered):
        for c in m.cells[1] if m.cells and not done else ():
            readers.setdefault(c.name, []).append(c)
    cells = merged([c for name, of in readers.items() if worth_computing(of) for c in of])
    made = {c.name for c in cells}
    sql, items, over_cells = [], [], set()
    for i, (m, done) in enumerate(zip(mutants, covered)):
        if done:
            sql.append(m.rollup_sql)
            items.append((m.question_id, None))
        else:
            text = m.sql
            if m.cells and all(c.name in made for c in m.cells[1]):
                text = m.cells[0]
                over_cells.add(i)
            for sub in m.subqueries:
                if sub in shared:
                    text = text.replace(sub, f'(SELECT * FROM "{shared[sub]}")')
            sql.append(text)
            items.append((m.question_id, m.batch if m.need is None else batchable(m.sql)))
    batches, alone = _batches(items)
    return StudyPlan(tuple(mutants), rollups, tuple(sql), tuple(batches), tuple(alone),
                     tuple((table, sub) for sub, table in shared.items()), tuple(cells), frozenset(over_cells))


def plan_study(con: duckdb.DuckDBPyConnection, mutants: list[Mutant], types: dict[str, dict[str, str]]
               ) -> StudyPlan:
    """The plan for ``mutants``, with rollups chosen on ``con``'s data (they serve every rotation:
    a rollup only decides how fast a mutant runs, never what it returns)."""
    return plan_runs(mutants, plan_rollups(con, [m.need for m in mutants if m.need], types))


def study_rotation(con: duckdb.DuckDBPyConnection, rotation: str, questions: dict[str, Question],
                   plan: StudyPlan, workers: int = 2) -> dict[Mutant, bool | None]:
    """Each mutant's outcome on one rotation: True/False (matches the expected answer), None (error).

    Single-table aggregate mutants run many to a scan (each aggregate over its own WHERE's rows,
    which gives exactly the standalone result); the rest run one by one. A rewrite over a rollup
    that fails falls back to the mutant's own SQL, so only the mutant's own errors count. Two
    cursors with one DuckDB thread each keep both cores busy."""
    plan.create_tables(con)
    mutants = plan.mutants
    # a result set is compared in order when the gold SQL orders it (the scorer's spider rule)
    in_order = {qid: orders_result(questions[qid].gold_sql) for qid in {m.question_id for m in mutants}}

    def judge(i: int, rows: list[tuple]) -> bool:
        q = questions[mutants[i].question_id]
        return answer_matches({"answer_type": q.answer_type, "round_decimals": q.round_decimals},
                              q.expected_for(rotation), rows, ordered=in_order[q.id])

    def listed(cursor, i: int, rows: list[tuple]) -> bool | None:
        q = questions[mutants[i].question_id]
        if not in_order[q.id]:
            return judge(i, rows)
        verdict = verdict_in_any_order({"answer_type": q.answer_type, "round_decimals": q.round_decimals},
                                       q.expected_for(rotation), rows)
        return one(cursor, i) if verdict is None else verdict

    def one(cursor, i: int) -> bool | None:
        for sql in dict.fromkeys((plan.sql[i], mutants[i].sql)):
            try:
                return judge(i, cursor.execute(sql).fetchall())
            except duckdb.Error:
                continue
        return None

    def run(cursor, job: StudyJob) -> dict[int, bool | None]:
        try:
            if job.per_member:
                row = dict(cursor.execute(job.sql).fetchall())
                row = [row[i] for i in job.members] if len(row) == len(job.members) else None
            else:
                row = cursor.execute(job.sql).fetchone() if job.sql else None
        except (duckdb.Error, KeyError):  # one member does not bind or run: fall back to each on its own
            row = None
        if row is None:
            return {i: one(cursor, i) for i in job.members}
        if job.rows:  # no rows: the list is NULL
            return {i: listed(cursor, i, [tuple(struct.values()) for struct in value or ()])
                    for i, value in zip(job.members, row)}
        return {i: judge(i, [(value,)]) for i, value in zip(job.members, row)}

    return {mutants[i]: r for part in map_on_cursors(con, run, plan.jobs(), workers) for i, r in part.items()}


# what a rotation's study outcomes depend on besides the data, the mutants and the questions
STUDYING_CODE = ("evalpack.checks.nearmiss.study", "evalpack.checks.nearmiss.rollup", "evalpack.checks.nearmiss.cells", "evalpack.questions.derive", "evalpack.core.scoring",
                 "evalpack.checks.verification")


def study_keys(tables: str, rotation: str, questions: Mapping[str, Question], mutants: list[Mutant]
               ) -> dict[str, str]:
    """The cache address of each studied question's outcomes on a rotation (question id -> key): SHA-256 over the
    code, DuckDB's version, the :func:`evalpack.checks.verification.tables_digest` of its files, the question's comparison
    (answer type, digits, gold SQL, expected answer) and its mutants in order. Not the question's id, which a
    changed selection renumbers: a question asked again with the same SQL and answer on the same files finds its
    outcomes."""
    common = [f"duckdb {duckdb.__version__}", tables]
    fingerprint = cache.code_fingerprint(STUDYING_CODE)
    runs: dict[str, list[Mutant]] = {}
    for m in mutants:
        runs.setdefault(m.question_id, []).append(m)
    keys = {}
    for qid, studied in runs.items():
        q = questions[qid]
        asked = json.dumps([q.answer_type, q.round_decimals, q.gold_sql, q.expected_for(rotation)], default=repr)
        keys[qid] = cache.entry_key("studies", fingerprint, [*common, asked, _mutants_digest(tuple(studied))])
    return keys


@functools.lru_cache(maxsize=4096)
def _mutants_digest(mutants: tuple[Mutant, ...]) -> str:
    """SHA-256 over what a study runs of ``mutants`` (one question's, in order): the same on every rotation."""
    runs = [[m.operator, m.sql, m.rollup_sql, list(m.subqueries), m.cells and m.cells[0]] for m in mutants]
    return hashlib.sha256(json.dumps(runs).encode()).hexdigest()


def study_outcomes(con: duckdb.DuckDBPyConnection, tables: str | None, rotation: str, questions: Mapping[str, Question],
                   mutants: list[Mutant], types: dict[str, dict[str, str]]) -> dict[Mutant, bool | None]:
    """:func:`study_rotation` of ``mutants`` on a rotation loaded into ``con``; with ``tables``, the
    :func:`evalpack.checks.verification.tables_digest` of its files, through the cache on disk, question by question
    (:func:`study_keys`): only the questions not studied before on files byte for byte these, with the same
    mutants, answer and code, run. A mutant's outcome does not depend on which others run beside it (the plan
    decides only how fast), so the outcomes are the same either way; they are given in the order of ``mutants``."""
    keys = study_keys(tables, rotation, questions, mutants) if tables and cache.cache_dir() else {}
    of_question: dict[str, list[Mutant]] = {}
    for m in mutants:
        of_question.setdefault(m.question_id, []).append(m)
    known: dict[Mutant, bool | None] = {}
    for qid, studied in of_question.items() if keys else ():
        stored = cache.load("studies", keys[qid])
        if isinstance(stored, list) and len(stored) == len(studied) \
                and all(o is None or isinstance(o, bool) for o in stored):
            known.update(zip(studied, stored))
    missing = [m for m in mutants if m not in known]
    if missing:
        known.update(study_rotation(con, rotation, questions, plan_study(con, missing, types)))
        for qid in dict.fromkeys(m.question_id for m in missing) if keys else ():
            cache.store("studies", keys[qid], [known[m] for m in of_question[qid]])
    return {m: known[m] for m in mutants}


def judged(mutant: Mutant, per_rotation: Iterable[Mapping[Mutant, bool | None]]) -> list[bool | None]:
    """``mutant``'s outcomes in rotation order up to and including the first that is not a match."""
    outcomes = []
    for outcomes_here in per_rotation:
        outcomes.append(outcomes_here[mutant])
        if outcomes[-1] is not True:
            break
    return outcomes


def still_studied(mutants: Iterable[Mutant], per_rotation: Iterable[Mapping[Mutant, bool | None]]) -> list[Mutant]:
    """The ``mutants`` whose study goes on to the next rotation: they matched on every rotation so far."""
    earlier = list(per_rotation)
    return [m for m in mutants if all(outcomes.get(m) is True for outcomes in earlier)]


def summarize_study(prepared: MutantSet, question_ids: tuple[str, ...],
                    per_rotation: dict[str, dict[Mutant, bool | None]], threshold: float = 0.01,
                    kinds: Mapping[str, str] | None = None, withheld: Collection[str] = ()) -> dict:
    """The manifest's ``near_miss_study`` for ``question_ids``: per operator mutants / equivalent /
    errored / match_first / match_all, overall rates, and up to 50 surviving mutants. A survivor of a
    ``withheld`` question (the holdout's) is counted and not listed: its SQL returns that question's answer.

    ``per_rotation`` is in seed order. A mutant is judged rotation after rotation and its study ends
    at the first rotation where it does not match: it needs an outcome there and on every rotation
    before, none after (:func:`still_studied`), so a build may skip the rotations after a mismatch
    and a run that studied everything everywhere gives the same summary. It errored when that first
    non-match is an error; ``match_first`` counts the mutants that match on the first rotation (what
    a benchmark with one database would accept), ``match_all`` those that match on every rotation.

    With ``kinds`` (question id -> question kind) it also has ``families``: per kind, sorted, the
    questions, the mutants run, how many of them matched on every rotation and that rate (the same
    counts as the per-operator ones). Questions missing from ``kinds`` are in no family."""
    mutants, equivalent = prepared.of(question_ids)
    rotations = list(per_rotation)
    table = {op: {"mutants": 0, "equivalent": equivalent[op], "errored": 0, "match_first": 0, "match_all": 0}
             for op in OPERATORS}
    families: dict[str, dict] = {}
    if kinds is not None:
        for question_id in question_ids:
            if question_id in kinds:
                family = families.setdefault(kinds[question_id], {"questions": 0, "mutants": 0, "match_all": 0})
                family["questions"] += 1
    survivors = []
    for m in mutants:
        row = table[m.operator]
        family = families.get(kinds[m.question_id]) if kinds is not None and m.question_id in kinds else None
        outcomes = judged(m, per_rotation.values())
        if outcomes[-1] is None:
            row["errored"] += 1
            continue
        row["mutants"] += 1
        if family is not None:
            family["mutants"] += 1
        if outcomes[0]:
            row["match_first"] += 1
        if len(outcomes) == len(rotations) and outcomes[-1]:
            row["match_all"] += 1
            if family is not None:
                family["match_all"] += 1
            survivors.append({"question": m.question_id, "operator": m.operator, "sql": m.sql})
    ran = sum(r["mutants"] for r in table.values())
    survived = sum(r["match_all"] for r in table.values())
    first_match = sum(r["match_first"] for r in table.values())
    out = {
        "rule": "a mutant survives when it matches the expected answer on every rotation (same comparison "
                "as verification); it is judged rotation after rotation in seed order and its study ends at the "
                "first rotation where it does not match; it errored when that is an error; equivalent and "
                "errored mutants are not counted as run; match_first: matches on the first rotation",
        "rotations": rotations,
        "operators": {op: row for op, row in table.items() if row["mutants"] or row["equivalent"] or row["errored"]},
        "mutants_run": ran,
        "match_first_rate": round(first_match / ran, 4) if ran else 0.0,
        "match_all_rate": round(survived / ran, 4) if ran else 0.0,
        "threshold": threshold,
        "survivors": [v for v in survivors if v["question"] not in withheld][:MAX_SURVIVORS_LISTED],
        "survivors_total": len(survivors),
        "survivors_withheld": sum(v["question"] in withheld for v in survivors),
    }
    if kinds is not None:
        out["families"] = {kind: {**row, "match_all_rate": round(row["match_all"] / row["mutants"], 4)
                                  if row["mutants"] else 0.0}
                           for kind, row in sorted(families.items())}
    return out


def study_markdown(study: dict) -> str:
    """The per-operator table as Markdown (CLI output, dataset card, Dagster metadata)."""
    lines = ["| operator | mutants | equivalent | errored | match on the first | match on all |",
             "|---|---:|---:|---:|---:|---:|"]
    for op, r in study.get("operators", {}).items():
        lines.append(f"| {op} | {r['mutants']} | {r['equivalent']} | {r['errored']} | {r['match_first']} | "
                     f"{r['match_all']} |")
    lines.append(f"| **all** | {study.get('mutants_run', 0)} | | | {study.get('match_first_rate', 0):.2%} | "
                 f"{study.get('match_all_rate', 0):.2%} |")
    return "\n".join(lines)


__all__ = ["OPERATORS", "Mutant", "MutantSet", "StudyPlan", "build_mutants", "mutants_of", "plan_study",
           "prepare_mutants", "still_studied", "study_markdown", "study_rotation", "summarize_study"]
