"""Gold SQL in another dialect's words: DuckDB's SQL transpiled with sqlglot for SQLite or PostgreSQL, with our own
rewrites where sqlglot's output would not run or would mean something else there (date truncation and date parts in
SQLite, ROUND of a float and PRINTF in PostgreSQL); what neither can write faithfully raises :class:`Untranslatable`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from evalpack.core.scoring import (
    first_line,
)
from evalpack.dialects import DIALECTS

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


