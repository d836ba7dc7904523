"""Label a gold SQL query with a difficulty level and the skills it exercises.

Both labels are read from the query's sqlglot AST (DuckDB dialect), never from its text, so
two spellings of one query get the same labels. Skills are tags from the fixed vocabulary
``SKILLS``; difficulty is one of BIRD's three levels (simple, moderate, challenging), derived
from the query's components like Spider's hardness rule:

Difficulty is a weighted count of the gold query's components, read from its sqlglot AST in
the DuckDB dialect. Every WHERE clause scores 1 for each predicate beyond its first, where the
predicates are the conditions joined by AND or OR, and a lower and an upper bound on the same
expression (a date window such as d >= X AND d < Y) count as one predicate, as does a
BETWEEN. Every JOIN scores 3, and so does every subquery (a query nested in FROM, WHERE,
SELECT or elsewhere, but not a CTE body or a branch of a set operation). The other components
score once per query however often they occur: a CTE 5, a window function 5, a set operation
(UNION, INTERSECT or EXCEPT) 3, HAVING 3, GROUP BY 1, ORDER BY with or without LIMIT 1 (an
ORDER BY inside OVER does not count), CASE or IF 1, date arithmetic 1 (a date or time function
such as YEAR, EXTRACT, DATE_TRUNC, DATE_DIFF or STRFTIME, or an INTERVAL; a cast to DATE or
TIMESTAMP does not count), a ratio 1 (a division by anything but a number literal, or a
multiplication by 100), and an answer that is a set of rows 1. A score of 0 is simple, 1 to 4
is moderate, and 5 or more is challenging. So one aggregate over one table filtered to one
date window is simple; a second filter, a GROUP BY, an ORDER BY ... LIMIT or a HAVING makes it
moderate; and a CTE, a window function, or any two of a join, a subquery, a HAVING and a GROUP
BY with an ORDER BY make it challenging.

The module imports only the standard library and sqlglot, so any layer (the question
families, the near-miss study, the card) can use it. A query sqlglot cannot parse raises
``sqlglot.errors.ParseError``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from sqlglot import exp

from evalpack.questions.sqltext import DIALECT, parse_sql

SKILLS = (
    "aggregation", "cte", "date_arithmetic", "group_by", "having", "join", "null_handling", "order_limit", "ratio",
    "rows_answer", "set_operation", "subquery", "window",
)
RULE = (
    "Difficulty is a weighted count of the gold query's components, read from its sqlglot AST in the DuckDB "
    "dialect. Every WHERE clause scores 1 for each predicate beyond its first, where the predicates are the "
    "conditions joined by AND or OR, and a lower and an upper bound on the same expression (a date window such as "
    "d >= X AND d < Y) count as one predicate, as does a BETWEEN. Every JOIN scores 3, and so does every subquery "
    "(a query nested in FROM, WHERE, SELECT or elsewhere, but not a CTE body or a branch of a set operation). The "
    "other components score once per query however often they occur: a CTE 5, a window function 5, a set "
    "operation (UNION, INTERSECT or EXCEPT) 3, HAVING 3, GROUP BY 1, ORDER BY with or without LIMIT 1 (an ORDER "
    "BY inside OVER does not count), CASE or IF 1, date arithmetic 1 (a date or time function such as YEAR, "
    "EXTRACT, DATE_TRUNC, DATE_DIFF or STRFTIME, or an INTERVAL; a cast to DATE or TIMESTAMP does not count), a "
    "ratio 1 (a division by anything but a number literal, or a multiplication by 100), and an answer that is a "
    "set of rows 1. A score of 0 is simple, 1 to 4 is moderate, and 5 or more is challenging. So one aggregate "
    "over one table filtered to one date window is simple; a second filter, a GROUP BY, an ORDER BY ... LIMIT or "
    "a HAVING makes it moderate; and a CTE, a window function, or any two of a join, a subquery, a HAVING and a "
    "GROUP BY with an ORDER BY make it challenging."
)

# points of a component that counts once per query; joins, subqueries and extra predicates count per occurrence
_ONCE = {"cte": 5, "window": 5, "set_operation": 3, "having": 3, "group_by": 1, "order_by": 1, "case": 1,
         "date_function": 1, "ratio": 1, "rows_answer": 1}
_EACH = {"join": 3, "subquery": 3, "extra_predicate": 1}
_MODERATE_FROM = 1  # the lowest score that is moderate
_CHALLENGING_FROM = 5  # the lowest score that is challenging

_DATE_FUNCTIONS = (
    exp.AddMonths, exp.CurrentDate, exp.CurrentTimestamp, exp.Date, exp.DateAdd, exp.DateBin, exp.DateDiff,
    exp.DateFromParts, exp.DateSub, exp.DateTrunc, exp.DatetimeAdd, exp.DatetimeDiff, exp.DatetimeSub,
    exp.DatetimeTrunc, exp.Day, exp.DayOfMonth, exp.DayOfWeek, exp.DayOfWeekIso, exp.DayOfYear, exp.Dayname,
    exp.Extract, exp.Hour, exp.Interval, exp.LastDay, exp.Minute, exp.Month, exp.Monthname, exp.MonthsBetween,
    exp.Quarter, exp.Second, exp.StrToDate, exp.StrToTime, exp.TimeAdd, exp.TimeDiff, exp.TimeSub, exp.TimeToStr,
    exp.TimeToUnix, exp.TimeTrunc, exp.TimestampAdd, exp.TimestampDiff, exp.TimestampFromParts, exp.TimestampSub,
    exp.TimestampTrunc, exp.UnixToTime, exp.Week, exp.WeekOfYear, exp.Year,
)
# DuckDB date functions sqlglot keeps as anonymous calls (DATE_SUB is DuckDB's DATE_DIFF)
_DATE_FUNCTION_NAMES = frozenset({
    "age", "century", "date_part", "datepart", "date_sub", "datesub", "decade", "epoch_ms", "epoch_us", "era",
    "isodow", "isoyear", "make_timestamp", "millennium", "time_bucket", "weekday", "yearweek",
})
_NULL_FUNCTION_NAMES = frozenset({"ifnull", "nvl", "isnull", "notnull"})
_LOWER_BOUNDS = {exp.GT: "this", exp.GTE: "this", exp.LT: "expression", exp.LTE: "expression"}  # side bounded below
_WRAPPERS = (exp.Subquery, exp.Paren, exp.SetOperation)


def skills(sql: str, answer_type: str) -> tuple[str, ...]:
    """The skills the query exercises, as a sorted tuple of tags from ``SKILLS``.

    >>> skills("SELECT g, SUM(a) FROM t GROUP BY g ORDER BY 2 DESC LIMIT 1", "rows")
    ('aggregation', 'group_by', 'order_limit', 'rows_answer')
    """
    return _skills(_Nodes(parse_sql(sql)), answer_type)


def difficulty(sql: str, answer_type: str) -> str:
    """The query's level, ``simple``, ``moderate`` or ``challenging``, by the rule in ``RULE``.

    >>> difficulty("SELECT SUM(a) FROM t WHERE d >= DATE '2025-01-01' AND d < DATE '2025-02-01'", "number")
    'simple'
    >>> difficulty("SELECT SUM(a) FROM t WHERE g = 'web' AND d >= DATE '2025-01-01'", "number")
    'moderate'
    """
    return _level(_score(_Nodes(parse_sql(sql)), answer_type))


def label(sql: str, answer_type: str) -> tuple[str, tuple[str, ...]]:
    """The query's difficulty and skills, from one parse.

    >>> label("WITH m AS (SELECT 1 AS x) SELECT x FROM m", "integer")
    ('challenging', ('cte',))
    """
    nodes = _Nodes(parse_sql(sql))
    return _level(_score(nodes, answer_type)), _skills(nodes, answer_type)


class _Nodes:
    """A tree's nodes by class, from one walk: the rule asks about thirty questions of each tree, and one walk
    of the tree per question was most of a label's cost."""

    def __init__(self, tree: exp.Expression) -> None:
        self.by_class: dict[type, list[exp.Expression]] = {}
        for node in tree.walk():
            self.by_class.setdefault(type(node), []).append(node)

    def all(self, *kinds: type) -> Iterator[exp.Expression]:
        """Every node that is an instance of one of ``kinds`` (in no particular order)."""
        for cls, nodes in self.by_class.items():
            if issubclass(cls, kinds):
                yield from nodes

    def has(self, *kinds: type) -> bool:
        """Whether some node is an instance of one of ``kinds``."""
        return any(issubclass(cls, kinds) for cls in self.by_class)


def _level(score: int) -> str:
    if score >= _CHALLENGING_FROM:
        return "challenging"
    return "moderate" if score >= _MODERATE_FROM else "simple"


def _skills(nodes: _Nodes, answer_type: str) -> tuple[str, ...]:
    found = {
        "aggregation": any(not _is_window_function(node) for node in nodes.all(exp.AggFunc)),
        "cte": nodes.has(exp.CTE),
        "date_arithmetic": _has_date_function(nodes) or any(_is_temporal_cast(node) for node in nodes.all(exp.Cast)),
        "group_by": nodes.has(exp.Group),
        "having": nodes.has(exp.Having),
        "join": nodes.has(exp.Join),
        "null_handling": _has_null_handling(nodes),
        "order_limit": any(query.args.get("order") and query.args.get("limit") for query in nodes.all(exp.Query)),
        "ratio": _has_ratio(nodes),
        "rows_answer": answer_type == "rows",
        "set_operation": nodes.has(exp.SetOperation),
        "subquery": _subquery_count(nodes) > 0,
        "window": nodes.has(exp.Window),
    }
    return tuple(sorted(skill for skill, present in found.items() if present))


def _score(nodes: _Nodes, answer_type: str) -> int:
    """The rule's weighted count of the query's components."""
    once = {
        "cte": nodes.has(exp.CTE),
        "window": nodes.has(exp.Window),
        "set_operation": nodes.has(exp.SetOperation),
        "having": nodes.has(exp.Having),
        "group_by": nodes.has(exp.Group),
        "order_by": any(isinstance(node.parent, exp.Query) for node in nodes.all(exp.Order)),
        "case": nodes.has(exp.Case, exp.If),
        "date_function": _has_date_function(nodes),
        "ratio": _has_ratio(nodes),
        "rows_answer": answer_type == "rows",
    }
    each = Counter({
        "join": sum(1 for _ in nodes.all(exp.Join)),
        "subquery": _subquery_count(nodes),
        "extra_predicate": sum(max(_predicate_count(where.this) - 1, 0) for where in nodes.all(exp.Where)),
    })
    return sum(_ONCE[name] for name, present in once.items() if present) + sum(_EACH[k] * n for k, n in each.items())


def _is_window_function(node: exp.Expression) -> bool:
    """Whether an aggregate is the function of an OVER clause (SUM(x) OVER (...)), not a grouping aggregate."""
    parent = node.parent
    if isinstance(parent, exp.IgnoreNulls | exp.RespectNulls):
        parent = parent.parent
    return isinstance(parent, exp.Window)


def _has_date_function(nodes: _Nodes) -> bool:
    if nodes.has(*_DATE_FUNCTIONS):
        return True
    return any(node.name.lower() in _DATE_FUNCTION_NAMES for node in nodes.all(exp.Anonymous))


def _is_temporal_cast(node: exp.Cast) -> bool:
    return node.to.is_type(*exp.DataType.TEMPORAL_TYPES)


def _has_null_handling(nodes: _Nodes) -> bool:
    if nodes.has(exp.Coalesce, exp.Nullif, exp.NullSafeEQ, exp.NullSafeNEQ):
        return True
    if any(isinstance(node.expression, exp.Null) for node in nodes.all(exp.Is)):
        return True
    return any(node.name.lower() in _NULL_FUNCTION_NAMES for node in nodes.all(exp.Anonymous))


def _has_ratio(nodes: _Nodes) -> bool:
    """A division by anything but a number literal, or a multiplication by 100 (a percentage)."""
    if any(not _is_number(node.expression) for node in nodes.all(exp.Div, exp.IntDiv)):
        return True
    return any(_is_number(side, 100) for node in nodes.all(exp.Mul) for side in (node.this, node.expression))


def _is_number(node: exp.Expression, value: float | None = None) -> bool:
    node = node.unnest()
    if not (isinstance(node, exp.Literal) and node.is_number):
        return False
    return value is None or float(node.this) == value


def _subquery_count(nodes: _Nodes) -> int:
    """Queries nested in another query, not counting CTE bodies and the branches of a set operation.

    A nested query is found from each SELECT by climbing through its wrappers (parentheses and
    set operations) to the outermost one; that is a subquery unless it is the whole statement or
    a CTE body. A UNION in FROM is one subquery, not two.
    """
    tops = {}
    for select in nodes.all(exp.Select):
        top = select
        while isinstance(top.parent, _WRAPPERS):
            top = top.parent
        if top.parent is not None and not isinstance(top.parent, exp.CTE):
            tops[id(top)] = top
    return len(tops)


def _predicate_count(condition: exp.Expression) -> int:
    """How many predicates a WHERE condition joins with AND and OR; bounds on one expression count once."""
    condition = condition.unnest()
    if isinstance(condition, exp.Or):
        return _predicate_count(condition.this) + _predicate_count(condition.expression)
    if not isinstance(condition, exp.And):
        return 1
    count = 0
    bounds: dict[str, Counter[str]] = {}  # bounded expression -> number of lower and of upper bounds on it
    for conjunct in condition.flatten(unnest=True):
        bound = _bound(conjunct)
        if bound is None:
            count += _predicate_count(conjunct)
        else:
            bounds.setdefault(bound[0], Counter())[bound[1]] += 1
    return count + sum(max(sides.values()) for sides in bounds.values())


def _bound(node: exp.Expression) -> tuple[str, str] | None:
    """(bounded expression as SQL, "lower" | "upper") for a range comparison with a column on one side."""
    lower_side = _LOWER_BOUNDS.get(type(node))
    if lower_side is None:
        return None
    upper_side = "expression" if lower_side == "this" else "this"
    for side, direction in ((lower_side, "lower"), (upper_side, "upper")):
        operand = node.args[side]
        if operand.find(exp.Column) is not None and not isinstance(operand, exp.Literal):
            other = node.args[upper_side if side == lower_side else lower_side]
            if other.find(exp.Column) is None:
                return operand.sql(dialect=DIALECT), direction
    return None
