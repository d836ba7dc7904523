"""Questions over a waterfall (an MRR bridge) as a finance analyst asks them: the closing balance at
each month-end of a quarter (a running SUM over a monthly CTE, a result set), the change in net
movement from one month to the next (CTE + LAG), each month's net against the average month (a scalar
subquery), the months ranked by net movement
(a result set in order), and each movement type's year-to-date total per month (PARTITION BY type).

Answers come from the plan's exact integer endings and signed component totals per month.
"""

from __future__ import annotations

import datetime as dt

from evalpack.data.plan import AnswerKey, CurveFacts, WaterfallFacts
from evalpack.questions.families.base import Draft, Drafts, money
from evalpack.questions.families.periods import month_ranking, the_period, versus_average
from evalpack.questions.families.trends import month_start, month_text, quarters, window_on
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months
from evalpack.spec.units import from_units


def _monthly(f: WaterfallFacts, start: dt.date, end: dt.date, text: bool = False, by_type: bool = False) -> str:
    """The first step: the net per month (as YYYY-MM text when ``text``; and per movement type), from
    ``start`` up to ``end`` (excluded)."""
    keys = f"{f.type_column}, " if by_type else ""
    month = (month_text if text else month_start)(f.period_column, f.period_type)
    return (f"WITH monthly AS (SELECT {keys}{month} AS month, SUM({f.movement_sql()}) AS net FROM {f.table} "
            f"WHERE {window_on(f.period_column, f.period_type, start, end)} GROUP BY {keys}"
            f"{month_start(f.period_column, f.period_type)})")


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every waterfall question of every declared waterfall, with this rotation's answers."""
    out: Drafts = []
    for f in key.waterfalls:
        w = Words(spec.semantics, f.table)
        d, tail = f.decimals, w.rounded(f.decimals)
        a, p, tc = f.amount_column, f.period_column, f.type_column
        amount, kind_word = w.col(a), w.col(tc)
        first = f.months[0]
        opening = from_units(f.starting, d)
        nets = [f.endings[0] - f.starting] + [f.endings[i] - f.endings[i - 1] for i in range(1, len(f.months))]
        # every amount stored positive (as Misata writes them): the dictionary says how a type gives its sign
        measure = None if f.signed else f.movement_sql()
        negative = f" Any {amount} that takes from the balance counts as negative."

        for run in quarters(f.months, 3):
            label, end = the_period(run), add_months(run[-1], 1)
            out.append((Draft(
                f"waterfall_series:{f.table}:{run[0]}",
                Wording(tuple(text + " Give each month, then its closing balance." + tail for text in (
                    f"Starting from {opening} before {month_words(first)}, what was the closing balance at the end "
                    f"of each month of {label}, in month order?",
                    f"List the month-end balance for every month of {label}, earliest first, given an opening "
                    f"balance of {opening} at the start of {month_words(first)}.",
                    f"With {opening} at the start of {month_words(first)}, show how the balance closed each month "
                    f"of {label}, month by month."))),
                parse_sql(f"{_monthly(f, first, end, text=True)}, balances AS (SELECT month, {opening} + SUM(net) OVER (ORDER "
                      f"BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS balance FROM monthly) "
                      f"SELECT month, ROUND(balance, {d}) AS balance FROM balances WHERE month >= '{run[0]:%Y-%m}' "
                      f"ORDER BY month"),
                "rows", d, "waterfall_series", ("waterfall", f.table, f"{run[0]:%Y-%m}"), (f.table,)),
                [[f"{x:%Y-%m}", money(f.endings[f.months.index(x)], d)] for x in run]))
        for i in range(1, len(f.months)):
            now, prev = f.months[i], f.months[i - 1]
            mon, before = month_words(now), month_words(prev)
            out.append((Draft(
                f"net_change:{f.table}:{now}",
                Wording(tuple(text + f" Give {mon}'s net minus {before}'s." + tail for text in (
                    f"How much did the net {amount} of {mon} differ from that of {before}?",
                    f"By how much did the month's net {amount} change from {before} to {mon}?",
                    f"Compare the net {amount} of {mon} with {before}: what is the difference?"))),
                parse_sql(f"{_monthly(f, prev, add_months(now, 1))}, paired AS (SELECT month, net - LAG(net) OVER "
                      f"(ORDER BY month) AS change FROM monthly) SELECT ROUND(change, {d}) FROM paired "
                      f"WHERE change IS NOT NULL"),
                "number", d, "net_change", ("waterfall", f.table, f"{now:%Y-%m}"), (f.table,)),
                money(nets[i] - nets[i - 1], d)))
        as_curve = CurveFacts(f.table, a, p, f.period_type, d, f.months, tuple(nets), ())
        out += versus_average(w, as_curve, f"net {amount}", source="waterfall", measure_sql=measure)
        out += month_ranking(w, as_curve, f"net {amount}", kind="net_month_ranking", source="waterfall",
                             measure_sql=measure)
        for run in quarters(f.months, 3):
            label, end = the_period(run), add_months(run[-1], 1)
            start = max(first, run[0].replace(month=1))
            since = "year-to-date" if start.month == 1 else f"cumulative (since {month_words(start)})"
            lines = [[mtype, f"{x:%Y-%m}", money(sum(values[j] for j, y in enumerate(f.months) if start <= y <= x), d)]
                     for mtype, values in f.components for x in run]
            out.append((Draft(
                f"type_running:{f.table}:{run[0]}",
                Wording(tuple(text + f" Give each {kind_word}, the month, then the total.{negative}{tail}" for text in (
                    f"For each {kind_word}, what was the {since} {amount} at the end of each month of {label}?",
                    f"Give every {kind_word}'s {since} total {amount} as it stood at each month-end of {label}.",
                    f"Show, {kind_word} by {kind_word}, the {since} {amount} at the close of each month in "
                    f"{label}."))),
                parse_sql(f"{_monthly(f, start, end, text=True, by_type=True)}, running AS (SELECT {tc}, month, SUM(net) "
                      f"OVER (PARTITION BY {tc} ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS "
                      f"total FROM monthly) SELECT {tc}, month, ROUND(total, {d}) AS total FROM running "
                      f"WHERE month >= '{run[0]:%Y-%m}'"),
                "rows", d, "type_running", ("waterfall", f.table, f"{run[0]:%Y-%m}"), (f.table,)), lines))
    return out
