"""What every question family yields: drafts (one per fact, the same on every rotation) with the
rotation's answer, and the exact arithmetic answers are made with."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlglot import exp

from evalpack.questions.phrasing import Wording
from evalpack.spec.units import from_units, round_fraction


@dataclass(frozen=True)
class Draft:
    """One question before ids and splits: its stable key, wording, gold SQL and how it is answered."""

    key: str  # stable key of the fact, the same on every rotation
    wording: Wording
    sql: exp.Expression
    answer_type: str  # number | integer | string | rows
    round_decimals: int | None
    kind: str
    tags: tuple[str, ...]
    tables: tuple[str, ...]


Drafts = list[tuple[Draft, Any]]


def money(units: int, decimals: int) -> float | int:
    """An amount of integer units (cents) as the answer: a number with ``decimals`` places, or an int."""
    value = from_units(units, decimals)
    return float(value) if decimals else int(value)


def ratio_answer(value: Fraction, decimals: int) -> float:
    """A fraction rounded half-to-even at ``decimals`` places, exactly."""
    return float(Decimal(round_fraction(value * 10 ** decimals)).scaleb(-decimals))


# the SQL trees a family builds, as the gold SQL writes them


def time_literal(day: dt.date, time_type: str) -> exp.Expression:
    if time_type == "text":  # a text period column of 'YYYY-MM' labels, which sort as their months do
        return exp.Literal.string(f"{day:%Y-%m}")
    if time_type == "date":
        return exp.cast(exp.Literal.string(day.isoformat()), exp.DataType.build("DATE"))
    return exp.cast(exp.Literal.string(f"{day.isoformat()} 00:00:00"), exp.DataType.build("TIMESTAMP"))


def window(column: str, start: dt.date, end: dt.date, time_type: str) -> exp.Expression:
    """``column >= start AND column < end`` as an AST."""
    return exp.and_(
        exp.GTE(this=exp.column(column), expression=time_literal(start, time_type)),
        exp.LT(this=exp.column(column), expression=time_literal(end, time_type)),
    )


def select_from(projection: exp.Expression, table: str, where: exp.Expression | None = None) -> exp.Select:
    q = exp.select(projection).from_(table)
    return q.where(where) if where is not None else q


def rounded(e: exp.Expression, decimals: int) -> exp.Expression:
    return exp.func("ROUND", e, exp.Literal.number(decimals))


def sum_of(column: str) -> exp.Expression:
    return exp.func("SUM", exp.column(column))


def count_star() -> exp.Expression:
    return exp.Count(this=exp.Star())


def month_label(month: dt.date) -> str:
    return f"{month:%Y-%m}"


def equals_text(column: str, value: str) -> exp.Expression:
    return exp.EQ(this=exp.column(column), expression=exp.Literal.string(value))
