"""Questions over a curve's months as an analyst asks them: month-over-month changes in amount and
percent, running totals, quarter and half-year totals, averages per row, and a quarter's monthly
series (a result-set answer), with gold SQL written as an analyst writes it (a monthly CTE, LAG, a
running SUM ... OVER) and answers computed exactly from the plan's integer totals.

Answers are exact: totals are integer units (cents), changes and sums of them are exact, and ratios
are rounded half-to-even from the exact fraction. Each query reads exactly the months it asks
about, so that a wrong date bound changes its answer. Families whose answer a small mistake cannot
move (the leading month or group, a count of months above a threshold) wait for planted rows that
make such mistakes visible (issue 16, point 5); asked now, most of their near-miss mutants would pass.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from evalpack.data.plan import AnswerKey, CurveFacts
from evalpack.questions import phrasing
from evalpack.questions.families.base import Draft, Drafts, money, ratio_answer
from evalpack.questions.phrasing import Wording, Words, month_words, span_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months


def time_literal(day: dt.date, time_type: str) -> str:
    """A day as a DATE or TIMESTAMP literal matching the time column, or (a text period column of 'YYYY-MM'
    labels, which sort as their months do) its month's label."""
    if time_type == "text":
        return f"'{day:%Y-%m}'"
    return f"DATE '{day.isoformat()}'" if time_type == "date" else f"TIMESTAMP '{day.isoformat()} 00:00:00'"


def month_start(column: str, time_type: str = "date") -> str:
    """The first day of ``column``'s month: what monthly questions group by (a text period column: its label)."""
    return column if time_type == "text" else f"DATE_TRUNC('month', {column})"


def month_text(column: str, time_type: str = "date") -> str:
    """``column``'s month as YYYY-MM text, formatted after grouping by :func:`month_start` (formatting every
    row first is ten times slower); a text period column is that text already."""
    return column if time_type == "text" else f"STRFTIME({month_start(column)}, '%Y-%m')"


def window_on(column: str, time_type: str, start: dt.date, end: dt.date) -> str:
    """``column`` from ``start`` up to ``end`` (excluded), as SQL."""
    return f"{column} >= {time_literal(start, time_type)} AND {column} < {time_literal(end, time_type)}"


def window_sql(c: CurveFacts, start: dt.date, end: dt.date) -> str:
    """The curve's time column from ``start`` up to ``end`` (excluded), as SQL."""
    return window_on(c.time_column, c.time_type, start, end)


def _monthly(c: CurveFacts, first: dt.date, end: dt.date) -> str:
    """The analyst's first step: one row per month from ``first`` up to ``end`` (excluded) with its total.

    Each question reads exactly the months it needs and keeps exactly the rows it asks about, so that
    a wrong bound (a month too many or too few) changes its answer instead of going unnoticed."""
    month = f"DATE_TRUNC('month', {c.time_column})"
    return (f"WITH monthly AS (SELECT {month} AS month, SUM({c.column}) AS total FROM {c.table} "
            f"WHERE {window_sql(c, first, end)} GROUP BY {month})")


def _tag(c: CurveFacts, month: dt.date | None = None) -> tuple[str, ...]:
    return ("outcome_curve", c.table) + ((f"{month:%Y-%m}",) if month else ())


def quarters(months: tuple[dt.date, ...], size: int) -> list[tuple[dt.date, ...]]:
    """Runs of ``size`` declared months that make a calendar quarter (3) or half-year (6)."""
    have = set(months)
    out = []
    for m in months:
        if (m.month - 1) % size == 0:
            run = tuple(add_months(m, i) for i in range(size))
            if all(x in have for x in run):
                out.append(run)
    return out


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every trend question of every outcome curve, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        w = Words(spec.semantics, c.table)
        m = w.measure(c.column)
        d, tail = c.decimals, w.rounded(c.decimals)
        first = c.months[0]
        for i in range(1, len(c.months)):
            month, prev = c.months[i], c.months[i - 1]
            mon, before = month_words(month), month_words(prev)
            pair = _monthly(c, prev, add_months(month, 1))  # the two months compared, and nothing else
            change = c.totals[i] - c.totals[i - 1]
            out.append((Draft(
                f"mom_change:{c.table}.{c.column}:{month}",
                phrasing.month_over_month(m, prev, month, tail),
                parse_sql(f"{pair}, changes AS (SELECT month, total - LAG(total) OVER (ORDER BY month) AS change "
                      f"FROM monthly) SELECT ROUND(change, {d}) FROM changes WHERE change IS NOT NULL"),
                "number", d, "month_over_month", _tag(c, month), (c.table,)), money(change, d)))
            if c.totals[i - 1] != 0:
                out.append((Draft(
                    f"mom_pct:{c.table}.{c.column}:{month}",
                    Wording(tuple(text + f" The change is relative to {before}, negative for a fall." for text in (
                        f"By what percentage did the {m} change from {before} to {mon}? Answer in percent, "
                        f"to 2 decimal places.",
                        f"What was the percent change in {m} from {before} to {mon}, to 2 decimal places?",
                        f"How many percent higher or lower was the {m} in {mon} than in {before}? Give the "
                        f"percentage to 2 decimal places."))),
                    parse_sql(f"{pair}, paired AS (SELECT month, total, LAG(total) OVER (ORDER BY month) AS prev "
                          f"FROM monthly) SELECT ROUND(100 * (total - prev) / prev, 2) FROM paired "
                          f"WHERE prev IS NOT NULL"),
                    "number", 2, "percent_change", _tag(c, month), (c.table,)),
                    ratio_answer(Fraction(100 * change, c.totals[i - 1]), 2)))
            since = "year-to-date" if first.month == 1 and first.year == month.year else f"since {month_words(first)}"
            out.append((Draft(
                f"running_total:{c.table}.{c.column}:{month}",
                Wording((f"What was the {since} {m} at the end of {mon}?{tail}",
                         f"Give the cumulative {m} from {month_words(first)} through {mon}.{tail}",
                         f"How much {m} had built up by the end of {mon}, counting from {month_words(first)}?{tail}")),
                parse_sql(f"{_monthly(c, first, add_months(month, 1))}, running AS (SELECT month, SUM(total) OVER "
                      f"(ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running_total "
                      f"FROM monthly) SELECT ROUND(running_total, {d}) FROM running ORDER BY month DESC LIMIT 1"),
                "number", d, "running_total", _tag(c, month), (c.table,)), money(sum(c.totals[:i + 1]), d)))
        index = {month: i for i, month in enumerate(c.months)}
        for size, kind, name in ((3, "quarter_total", "quarter"), (6, "half_year_total", "half-year")):
            for run in quarters(c.months, size):
                label = (f"Q{(run[0].month - 1) // 3 + 1} {run[0].year}" if size == 3
                         else f"H{(run[0].month - 1) // 6 + 1} {run[0].year}")
                span = span_words(run[0], run[-1])
                nxt = add_months(run[-1], 1)
                out.append((Draft(
                    f"{kind}:{c.table}.{c.column}:{run[0]}",
                    Wording((f"What was the {m} in {label}?{tail}", f"Give the {m} for the {name} {label}.{tail}",
                             f"How much {m} was there in {label}, {span}?{tail}")),
                    parse_sql(f"SELECT ROUND(SUM({c.column}), {d}) FROM {c.table} WHERE {window_sql(c, run[0], nxt)}"),
                    "number", d, kind, _tag(c, run[0]), (c.table,)),
                    money(sum(c.totals[index[x]] for x in run), d)))
        amount = w.col(c.column)
        # SUM / COUNT(*), not AVG: with empty amounts the question itself says how they count
        every = (f", counting {w.many} without {phrasing.article(amount)} as zero"
                 if spec.table(c.table).column(c.column).nullable else "")
        for i, month in enumerate(c.months):
            if c.rows[i]:
                nxt = add_months(month, 1)
                mon = month_words(month)
                out.append((Draft(
                    f"average:{c.table}.{c.column}:{month}",
                    Wording((f"What was the average {amount} per {w.one} in {mon}{every}?{tail}",
                             f"In {mon}, what was the {amount} of {phrasing.article(w.one)} on average{every}?{tail}",
                             f"Give the mean {amount} per {w.one} for {mon}{every}.{tail}")),
                    parse_sql(f"SELECT ROUND(SUM({c.column}) / COUNT(*), {d}) FROM {c.table} "
                          f"WHERE {window_sql(c, month, nxt)}"),
                    "number", d, "average_per_row", _tag(c, month), (c.table,)),
                    ratio_answer(Fraction(c.totals[i], c.rows[i] * 10 ** d), d)))
        for run in quarters(c.months, 3):
            label = f"Q{(run[0].month - 1) // 3 + 1} {run[0].year}"
            nxt = add_months(run[-1], 1)
            out.append((Draft(
                f"monthly_series:{c.table}.{c.column}:{run[0]}",
                Wording(tuple(text + f" Give each month, then its {m}.{tail}" for text in (
                    f"List the {m} of each month of {label}, in month order.",
                    f"Show the monthly {m} for {label}, earliest month first.",
                    f"What was the {m} month by month in {label}? List them in month order."))),
                parse_sql(f"SELECT {month_text(c.time_column)} AS month, ROUND(SUM({c.column}), {d}) AS total "
                      f"FROM {c.table} WHERE {window_sql(c, run[0], nxt)} GROUP BY {month_start(c.time_column)} "
                      f"ORDER BY month"),
                "rows", d, "monthly_series", _tag(c, run[0]), (c.table,)),
                [[f"{x:%Y-%m}", money(c.totals[index[x]], d)] for x in run]))
    return out
