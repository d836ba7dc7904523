"""What every question family yields: drafts (one per fact, the same on every rotation) with the
rotation's answer, and the exact arithmetic answers are made with."""

from __future__ import annotations

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


