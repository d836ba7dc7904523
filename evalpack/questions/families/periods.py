"""Questions that set one period against a longer one: order counts per quarter, half-year and the
whole span; a month's share of its year or quarter and its distance from the average month (a scalar
subquery, as an analyst writes it); and the months of a half-year or of the span ranked by total (a
result set compared in order).

Answers come from the plan's integer totals and row counts. A share or a distance reads both
periods, so a wrong bound on either moves it (the plan puts rows just outside the declared span for
the outer bounds). Where two months of a ranking tie on a rotation, the question does not verify
there and is dropped (its order would depend on row order).
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from evalpack.data.plan import AnswerKey, CurveFacts
from evalpack.questions import phrasing
from evalpack.questions.families.base import Draft, Drafts, money, ratio_answer
from evalpack.questions.families.trends import month_start, month_text, quarters, window_sql
from evalpack.questions.phrasing import Wording, Words, month_words, span_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months


def period_label(run: tuple[dt.date, ...]) -> str:
    """A run of months as an analyst names it: Q2 2025, H1 2025, 2025, or from ... through ..."""
    first = run[0]
    if len(run) == 3 and (first.month - 1) % 3 == 0:
        return f"Q{(first.month - 1) // 3 + 1} {first.year}"
    if len(run) == 6 and (first.month - 1) % 6 == 0:
        return f"H{(first.month - 1) // 6 + 1} {first.year}"
    if len(run) == 12 and first.month == 1:
        return str(first.year)
    return span_words(first, run[-1])


def the_period(run: tuple[dt.date, ...]) -> str:
    """The run's label as a noun phrase ("Q2 2025", "the period from ... through ...")."""
    label = period_label(run)
    return label if label[0].isupper() or label[0].isdigit() else f"the period {label}"


def _periods(c: CurveFacts) -> list[tuple[dt.date, ...]]:
    """The quarters and half-years of the curve's months, then its whole span."""
    runs = quarters(c.months, 3) + quarters(c.months, 6)
    return runs + ([c.months] if c.months not in runs else [])


def _share(w: Words, c: CurveFacts, month: dt.date, run: tuple[dt.date, ...], kind: str, totals: dict) -> tuple:
    m = w.measure(c.column)
    mon, the_whole = month_words(month), the_period(run)
    end = add_months(run[-1], 1)
    total = sum(totals[x] for x in run)
    draft = Draft(
        f"{kind}:{c.table}.{c.column}:{run[0]}:{month}",
        Wording((f"What share of the {m} of {the_whole} came in {mon}? Answer in percent, to 2 decimal places.",
                 f"What percentage of the {m} of {the_whole} was earned in {mon}, to 2 decimal places?",
                 f"Of all the {m} in {the_whole}, how many percent fell in {mon}? Give it to 2 decimal places.")),
        parse_sql(f"SELECT ROUND(100 * SUM({c.column}) / (SELECT SUM({c.column}) FROM {c.table} "
              f"WHERE {window_sql(c, run[0], end)}), 2) FROM {c.table} "
              f"WHERE {window_sql(c, month, add_months(month, 1))}"),
        "number", 2, kind, ("outcome_curve", c.table, f"{month:%Y-%m}"), (c.table,))
    return draft, ratio_answer(Fraction(100 * totals[month], total), 2) if total else None  # NULL: 0 / 0


def versus_average(w: Words, c: CurveFacts, m: str, source: str = "outcome_curve",
                   measure_sql: str | None = None) -> Drafts:
    """Each month's distance from the average month of the whole span (a scalar subquery), for the measure
    ``m`` (the sum of ``c.column``, or of ``measure_sql`` when given) of the declaration
    ``source``."""
    out: Drafts = []
    summed = measure_sql or c.column
    d, tail = c.decimals, w.rounded(c.decimals)
    whole, totals = c.months, dict(zip(c.months, c.totals))
    n, the_span = len(whole), the_period(whole)
    end = add_months(whole[-1], 1)
    for month in whole:
        mon = month_words(month)
        out.append((Draft(
            f"versus_average:{c.table}.{c.column}:{month}",
            phrasing.versus_average(m, the_span, n, mon, tail),
            parse_sql(f"SELECT ROUND(SUM({summed}) - (SELECT SUM({summed}) / {n} FROM {c.table} "
                  f"WHERE {window_sql(c, whole[0], end)}), {d}) FROM {c.table} "
                  f"WHERE {window_sql(c, month, add_months(month, 1))}"),
            "number", d, "versus_average", (source, c.table, f"{month:%Y-%m}"), (c.table,)),
            ratio_answer(Fraction(n * totals[month] - sum(c.totals), n * 10 ** d), d)))
    return out


def month_ranking(w: Words, c: CurveFacts, m: str, kind: str = "month_ranking",
                  source: str = "outcome_curve", measure_sql: str | None = None) -> Drafts:
    """The months of each half-year and of the whole span ranked by the measure ``m`` (the sum of
    ``c.column``, or of ``measure_sql`` when given), each with its total: a monthly CTE ordered by total, a
    result set compared in order.

    Every month of the period is listed, so a wrong bound at either end changes a line of the answer
    (a top three would hide a mistake in a month outside it)."""
    out: Drafts = []
    d, tail = c.decimals, w.rounded(c.decimals)
    totals = dict(zip(c.months, c.totals))
    halves = quarters(c.months, 6)
    for run in halves + ([c.months] if c.months not in halves and len(c.months) > 3 else []):
        named, end = the_period(run), add_months(run[-1], 1)
        ranked = sorted(run, key=lambda x: -totals[x])
        out.append((Draft(
            f"{kind}:{c.table}.{c.column}:{run[0]}:{len(run)}",
            phrasing.month_ranking(m, named, tail),
            parse_sql(f"WITH monthly AS (SELECT {month_text(c.time_column, c.time_type)} AS month, "
                  f"SUM({measure_sql or c.column}) AS total FROM {c.table} WHERE {window_sql(c, run[0], end)} "
                  f"GROUP BY {month_start(c.time_column, c.time_type)}) "
                  f"SELECT month, ROUND(total, {d}) AS total FROM monthly ORDER BY total DESC"),
            "rows", d, kind, (source, c.table, f"{run[0]:%Y-%m}", f"{len(run)} months"), (c.table,)),
            [[f"{x:%Y-%m}", money(totals[x], d)] for x in ranked]))
    return out


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every period question of every outcome curve, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        w = Words(spec.semantics, c.table)
        m = w.measure(c.column)
        totals = dict(zip(c.months, c.totals))
        rows = dict(zip(c.months, c.rows))
        count = spec.semantics.count_measure(c.table) or f"number of {w.many}"
        for run in _periods(c):
            end = add_months(run[-1], 1)
            kind = "span_count" if run == c.months else {3: "quarter_count", 6: "half_year_count"}[len(run)]
            during = f"in {the_period(run)}"
            out.append((Draft(
                f"{kind}:{c.table}:{run[0]}:{len(run)}",
                Wording((f"How many {w.many} were there {during}?", f"What was the {count} {during}?",
                         f"Count the {w.many} {during}.")),
                parse_sql(f"SELECT COUNT(*) FROM {c.table} WHERE {window_sql(c, run[0], end)}"),
                "integer", None, kind, ("outcome_curve", c.table, f"{run[0]:%Y-%m}", f"{len(run)} months"), (c.table,)),
                sum(rows[x] for x in run)))
        whole = c.months
        out += [_share(w, c, month, whole, "share_of_span", totals) for month in whole]
        out += [_share(w, c, month, run, "share_of_quarter", totals) for run in quarters(c.months, 3) for month in run]
        out += versus_average(w, c, m)
        out += month_ranking(w, c, m)
    return out
