"""Questions of a waterfall per month: its net movement, each movement type, the closing balance."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import (
    Draft,
    Drafts,
    equals_text,
    money,
    month_label,
    rounded,
    select_from,
    sum_of,
    window,
)
from evalpack.questions.sqltext import DIALECT
from evalpack.spec.model import Spec, add_months
from evalpack.spec.units import from_units


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    out: Drafts = []
    sem = spec.semantics
    for f in key.waterfalls:
        d = f.decimals
        words = phrasing.Words(sem, f.table)
        start_text = from_units(f.starting, d)
        first = f.months[0]
        components = dict(f.components)
        # the signed movement: the amount, or (every amount stored positive) minus it for an outflow type
        movement = sum_of(f.amount_column) if f.signed else exp.func("SUM", sqlglot.parse_one(f.movement_sql(),
                                                                                            read=DIALECT))
        for m, month in enumerate(f.months):
            nxt = add_months(month, 1)
            w = window(f.period_column, month, nxt, f.period_type)
            prev = f.starting if m == 0 else f.endings[m - 1]
            tag = ("waterfall", f.table, month_label(month))
            out.append((Draft(f"wf_net:{f.table}:{month}",
                       phrasing.waterfall_net(words, f.amount_column, month, d),
                       select_from(rounded(movement.copy(), d), f.table, w), "number", d, "waterfall_net", tag,
                       (f.table,)), money(f.endings[m] - prev, d)))
            for mtype, values in components.items():
                out.append((Draft(f"wf_component:{f.table}:{mtype}:{month}",
                           phrasing.waterfall_component(words, f.amount_column, f.type_column, mtype, month, d, f.signed),
                           select_from(rounded(sum_of(f.amount_column), d), f.table,
                                   exp.and_(equals_text(f.type_column, mtype), w)),
                           "number", d, "waterfall_component", tag + (mtype,), (f.table,)),
                    money(f.stored(values[m]), d)))
            balance = exp.Add(this=exp.Literal.number(str(start_text)), expression=movement.copy())
            out.append((Draft(f"wf_ending:{f.table}:{month}",
                       phrasing.waterfall_ending(words, str(start_text), first, month, d),
                       select_from(rounded(balance, d), f.table, window(f.period_column, first, nxt, f.period_type)),
                       "number", d, "waterfall_ending", tag, (f.table,)), money(f.endings[m], d)))
    return out
