"""Questions of a measure over the declared months: its totals, rows, grand total, peak month and, with groups, each group's month and total (outcome curves)."""

from __future__ import annotations

from sqlglot import exp

from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import (
    Draft,
    Drafts,
    count_star,
    equals_text,
    money,
    month_label,
    rounded,
    select_from,
    sum_of,
    window,
)
from evalpack.spec.model import Spec, add_months


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    out: Drafts = []
    sem = spec.semantics
    for c in key.curves:
        d = c.decimals
        words = phrasing.Words(sem, c.table)
        first, end = c.months[0], add_months(c.months[-1], 1)
        for month, total, rows in zip(c.months, c.totals, c.rows):
            nxt = add_months(month, 1)
            w = window(c.time_column, month, nxt, c.time_type)
            tag = ("outcome_curve", c.table, month_label(month))
            out.append((Draft(f"curve_total:{c.table}.{c.column}:{month}",
                       phrasing.period_total(words, c.column, month, d),
                       select_from(rounded(sum_of(c.column), d), c.table, w), "number", d, "period_total", tag, (c.table,)),
                money(total, d)))
            out.append((Draft(f"curve_rows:{c.table}:{month}",
                       phrasing.period_rows(words, c.time_column, month),
                       select_from(count_star(), c.table, w), "integer", None, "period_rows", tag, (c.table,)), rows))
        w_all = window(c.time_column, first, end, c.time_type)
        out.append((Draft(f"curve_grand:{c.table}.{c.column}",
                   phrasing.grand_total(words, c.column, first, c.months[-1], d),
                   select_from(rounded(sum_of(c.column), d), c.table, w_all), "number", d, "grand_total",
                   ("outcome_curve", c.table), (c.table,)), money(sum(c.totals), d)))
        best = max(c.totals)
        if sum(1 for t in c.totals if t == best) == 1 and len(c.months) > 1:
            # asked over the whole table: the rows outside the declared months are too few to compete
            peak = c.months[c.totals.index(best)]
            year, month = exp.Year(this=exp.column(c.time_column)), exp.Month(this=exp.column(c.time_column))
            label = exp.func("PRINTF", exp.Literal.string("%04d-%02d"), year, month)
            # grouped by YEAR/MONTH and formatted once per group: a per-row STRFTIME is ten times slower
            sql = (exp.select(exp.alias_(label, "month")).from_(c.table)
                   .group_by(year.copy(), month.copy()).order_by(exp.Ordered(this=sum_of(c.column), desc=True)).limit(1))
            out.append((Draft(f"curve_peak:{c.table}.{c.column}",
                       phrasing.peak_period(words, c.column),
                       sql, "string", None, "peak_period", ("outcome_curve", c.table), (c.table,)),
                month_label(peak)))
        if c.group_column:
            for g, label in enumerate(c.groups):
                for m, month in enumerate(c.months):
                    nxt = add_months(month, 1)
                    w = exp.and_(equals_text(c.group_column, label), window(c.time_column, month, nxt, c.time_type))
                    out.append((Draft(f"group_month:{c.table}.{c.column}:{label}:{month}",
                               phrasing.group_period_total(words, c.column, c.group_column, label, month, d),
                               select_from(rounded(sum_of(c.column), d), c.table, w), "number", d, "group_period_total",
                               ("group_shares", c.table, label, month_label(month)), (c.table,)),
                        money(c.group_totals[m][g], d)))
                w = exp.and_(equals_text(c.group_column, label), w_all)
                out.append((Draft(f"group_total:{c.table}.{c.column}:{label}",
                           phrasing.group_total(words, c.column, c.group_column, label, first, c.months[-1], d),
                           select_from(rounded(sum_of(c.column), d), c.table, w), "number", d, "group_total",
                           ("group_shares", c.table, label), (c.table,)),
                    money(sum(row[g] for row in c.group_totals), d)))
    return out
