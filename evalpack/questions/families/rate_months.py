"""Questions of a flag over the declared months: its rate and count per month (rate curves)."""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import (
    Draft,
    Drafts,
    count_star,
    month_label,
    ratio_answer,
    rounded,
    select_from,
    window,
)
from evalpack.spec.model import Spec, add_months


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    out: Drafts = []
    sem = spec.semantics
    for r in key.rates:
        words = phrasing.Words(sem, r.table)
        for month, flagged, rows in zip(r.months, r.flagged, r.rows):
            nxt = add_months(month, 1)
            w = window(r.time_column, month, nxt, r.time_type)
            ratio = exp.Div(
                this=exp.cast(exp.func("COUNT_IF", exp.column(r.column)), exp.DataType.build("DOUBLE")),
                expression=count_star(),
            )
            tag = ("rate_curve", r.table, month_label(month))
            out.append((Draft(f"rate:{r.table}.{r.column}:{month}",
                       phrasing.rate(words, r.column, month),
                       select_from(rounded(ratio, 4), r.table, w), "number", 4, "rate", tag, (r.table,)),
                ratio_answer(Fraction(flagged, rows), 4)))
            out.append((Draft(f"flagged:{r.table}.{r.column}:{month}",
                       phrasing.flagged_count(words, r.column, month),
                       select_from(count_star(), r.table, exp.and_(w, exp.column(r.column))), "integer", None,
                       "flagged_count", tag, (r.table,)), flagged))
    return out
