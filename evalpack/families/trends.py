"""Questions over a curve's months as an analyst asks them: changes, running totals, quarters,
averages, thresholds and series, with gold SQL written as an analyst writes it (a monthly CTE, LAG,
a running SUM ... OVER, HAVING) and answers computed exactly from the plan's integer totals.

Answers are exact: totals are integer units (cents), changes and sums of them are exact, and ratios
are rounded half-to-even from the exact fraction. A fact that could tie (the largest increase, the
three largest months) is asked anyway: the golden checks drop the question on a rotation where its
ORDER BY ... LIMIT cuts a tie, so nothing ambiguous ships.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from evalpack import phrasing
from evalpack.families.base import Draft, Drafts, money, parse, ratio_answer
from evalpack.phrasing import Wording, Words, month_words, span_words
from evalpack.plan import AnswerKey, CurveFacts
from evalpack.spec import Spec, add_months


def _lit(day: dt.date, time_type: str) -> str:
    return f"DATE '{day.isoformat()}'" if time_type == "date" else f"TIMESTAMP '{day.isoformat()} 00:00:00'"


def window_sql(c: CurveFacts, start: dt.date, end: dt.date) -> str:
    """The curve's time column from ``start`` up to ``end`` (excluded), as SQL."""
    t = c.time_column
    return f"{t} >= {_lit(start, c.time_type)} AND {t} < {_lit(end, c.time_type)}"


def _monthly(c: CurveFacts) -> str:
    """The analyst's first step: one row per declared month with its total."""
    first, end = c.months[0], add_months(c.months[-1], 1)
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


def _threshold(totals: tuple[int, ...]) -> int | None:
    """A round number of units strictly between the two middle totals (None when they are equal)."""
    ordered = sorted(totals)
    lo, hi = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
    if lo == hi:
        return None
    for step in (10 ** k for k in range(12, -1, -1)):
        x = (hi // step) * step
        if lo < x < hi:
            return x
        if lo < x + step < hi:
            return x + step
    return None


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every trend question of every outcome curve, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        w = Words(spec.semantics, c.table)
        m, defined = w.measure(c.column)
        d, tail = c.decimals, w.rounded(c.decimals)
        t = w.col(c.time_column)
        first, last, end = c.months[0], c.months[-1], add_months(c.months[-1], 1)
        base = f"{defined}; a month is a calendar month of {t} ({c.table}.{c.time_column})"
        monthly = _monthly(c)
        for i in range(1, len(c.months)):
            month, prev = c.months[i], c.months[i - 1]
            mon, before = month_words(month), month_words(prev)
            lit = _lit(month, "date")
            change = c.totals[i] - c.totals[i - 1]
            out.append((Draft(
                f"mom_change:{c.table}.{c.column}:{month}",
                Wording((f"By how much did the {m} change from {before} to {mon}?{tail}",
                         f"What was the change in {m} between {before} and {mon}?{tail}",
                         f"How much higher or lower was the {m} in {mon} than in {before}?{tail}"),
                        phrasing.join(base, f"the change is the {m} of {mon} minus that of {before}, negative for a "
                                      f"fall", w.rounding_evidence(d))),
                parse(f"{monthly}, changes AS (SELECT month, total - LAG(total) OVER (ORDER BY month) AS change "
                      f"FROM monthly) SELECT ROUND(change, {d}) FROM changes WHERE month = {lit}"),
                "number", d, "month_over_month", _tag(c, month), (c.table,)), money(change, d)))
            if c.totals[i - 1] != 0:
                out.append((Draft(
                    f"mom_pct:{c.table}.{c.column}:{month}",
                    Wording((f"By what percentage did the {m} change from {before} to {mon}? Answer in percent, "
                             f"to 2 decimal places.",
                             f"What was the percent change in {m} from {before} to {mon}, to 2 decimal places?",
                             f"How many percent higher or lower was the {m} in {mon} than in {before}? Give the "
                             f"percentage to 2 decimal places."),
                            phrasing.join(base, f"the percent change is 100 times ({mon} minus {before}) divided by "
                                          f"{before}, negative for a fall", "round to 2 decimal places")),
                    parse(f"{monthly}, paired AS (SELECT month, total, LAG(total) OVER (ORDER BY month) AS prev "
                          f"FROM monthly) SELECT ROUND(100 * (total - prev) / prev, 2) FROM paired "
                          f"WHERE month = {lit}"),
                    "number", 2, "percent_change", _tag(c, month), (c.table,)),
                    ratio_answer(Fraction(100 * change, c.totals[i - 1]), 2)))
            since = "year-to-date" if first.month == 1 and first.year == month.year else f"since {month_words(first)}"
            out.append((Draft(
                f"running_total:{c.table}.{c.column}:{month}",
                Wording((f"What was the {since} {m} at the end of {mon}?{tail}",
                         f"Give the cumulative {m} from {month_words(first)} through {mon}.{tail}",
                         f"How much {m} had built up by the end of {mon}, counting from {month_words(first)}?{tail}"),
                        phrasing.join(base, f"the running total adds up the {m} of every month from "
                                      f"{month_words(first)} through {mon}", w.rounding_evidence(d))),
                parse(f"{monthly}, running AS (SELECT month, SUM(total) OVER (ORDER BY month ROWS BETWEEN UNBOUNDED "
                      f"PRECEDING AND CURRENT ROW) AS running_total FROM monthly) "
                      f"SELECT ROUND(running_total, {d}) FROM running WHERE month = {lit}"),
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
                             f"How much {m} was there in {label}, {span}?{tail}"),
                            phrasing.join(defined, w.window(c.time_column, run[0], nxt, label),
                                          w.rounding_evidence(d))),
                    parse(f"SELECT ROUND(SUM({c.column}), {d}) FROM {c.table} WHERE {window_sql(c, run[0], nxt)}"),
                    "number", d, kind, _tag(c, run[0]), (c.table,)),
                    money(sum(c.totals[index[x]] for x in run), d)))
        for i, month in enumerate(c.months):
            if c.rows[i]:
                nxt = add_months(month, 1)
                mon = month_words(month)
                amount = w.col(c.column)
                out.append((Draft(
                    f"average:{c.table}.{c.column}:{month}",
                    Wording((f"What was the average {amount} per {w.one} in {mon}?{tail}",
                             f"In {mon}, how much {amount} did {phrasing.article(w.one)} bring in on average?{tail}",
                             f"Give the mean {amount} per {w.one} for {mon}.{tail}"),
                            phrasing.join(f"the average is the sum of {c.table}.{c.column} divided by the number of "
                                          f"{w.many}, every {w.one} counting (one without {phrasing.article(amount)} "
                                          f"adds nothing to the sum)", w.window(c.time_column, month, nxt, mon),
                                          w.rounding_evidence(d))),
                    parse(f"SELECT ROUND(SUM({c.column}) / COUNT(*), {d}) FROM {c.table} "
                          f"WHERE {window_sql(c, month, nxt)}"),
                    "number", d, "average_per_row", _tag(c, month), (c.table,)),
                    ratio_answer(Fraction(c.totals[i], c.rows[i] * 10 ** d), d)))
        threshold = _threshold(c.totals) if spec.answers == "shared" and len(c.months) > 2 else None
        if threshold is not None:
            level = phrasing.amount_words(spec.semantics, threshold, d)
            span = span_words(first, last)
            out.append((Draft(
                f"months_above:{c.table}.{c.column}",
                Wording((f"In how many months {span} did the {m} exceed {level}?",
                         f"Count the months {span} whose {m} was above {level}.",
                         f"{span.capitalize()}, how many months had more than {level} of {m}?"),
                        phrasing.join(base, f"a month counts when its {m} is strictly greater than "
                                      f"{money(threshold, d)}", w.window(c.time_column, first, end, "the period"))),
                parse(f"SELECT COUNT(*) FROM (SELECT DATE_TRUNC('month', {c.time_column}) AS month FROM {c.table} "
                      f"WHERE {window_sql(c, first, end)} GROUP BY DATE_TRUNC('month', {c.time_column}) "
                      f"HAVING SUM({c.column}) > {money(threshold, d)}) AS above"),
                "integer", None, "months_above_threshold", _tag(c), (c.table,)),
                sum(1 for x in c.totals if x > threshold)))
        if len(c.months) > 2:
            changes = [c.totals[i] - c.totals[i - 1] for i in range(1, len(c.months))]
            best = c.months[1 + changes.index(max(changes))]
            out.append((Draft(
                f"largest_increase:{c.table}.{c.column}",
                Wording((f"Which month saw the largest increase in {m} over the month before? Answer as YYYY-MM.",
                         f"In which month did the {m} grow the most compared with the previous month? Give it as "
                         f"YYYY-MM.",
                         f"Name the month with the biggest month-over-month rise in {m}, as YYYY-MM."),
                        phrasing.join(base, f"the increase of a month is its {m} minus that of the month before, "
                                      f"from {month_words(c.months[1])} on", w.window(c.time_column, first, end,
                                                                                       "the period"))),
                parse(f"{monthly}, changes AS (SELECT month, total - LAG(total) OVER (ORDER BY month) AS change "
                      f"FROM monthly) SELECT STRFTIME(month, '%Y-%m') FROM changes WHERE change IS NOT NULL "
                      f"ORDER BY change DESC LIMIT 1"),
                "string", None, "largest_increase", _tag(c), (c.table,)), f"{best:%Y-%m}"))
        series = f"STRFTIME(DATE_TRUNC('month', {c.time_column}), '%Y-%m')"
        for run in quarters(c.months, 3):
            label = f"Q{(run[0].month - 1) // 3 + 1} {run[0].year}"
            nxt = add_months(run[-1], 1)
            out.append((Draft(
                f"monthly_series:{c.table}.{c.column}:{run[0]}",
                Wording((f"List the {m} of each month of {label}, in month order.{tail}",
                         f"Show the monthly {m} for {label}, earliest month first.{tail}",
                         f"What was the {m} month by month in {label}? List them in month order.{tail}"),
                        phrasing.join(defined, w.window(c.time_column, run[0], nxt, label),
                                      "one row per month: the month as YYYY-MM, then its total",
                                      w.rounding_evidence(d))),
                parse(f"SELECT {series} AS month, ROUND(SUM({c.column}), {d}) AS total FROM {c.table} "
                      f"WHERE {window_sql(c, run[0], nxt)} GROUP BY {series} ORDER BY month"),
                "rows", d, "monthly_series", _tag(c, run[0]), (c.table,)),
                [[f"{x:%Y-%m}", money(c.totals[index[x]], d)] for x in run]))
        if len(c.months) > 3:
            top = sorted(range(len(c.months)), key=lambda i: -c.totals[i])[:3]
            out.append((Draft(
                f"top_months:{c.table}.{c.column}",
                Wording((f"Which three months had the highest {m}? List each with its {m}, highest first.{tail}",
                         f"Show the top three months by {m}, largest first, with their totals.{tail}",
                         f"List the three best months for {m} and their totals, from the highest down.{tail}"),
                        phrasing.join(base, w.window(c.time_column, first, end, "the period"),
                                      "one row per month: the month as YYYY-MM, then its total",
                                      w.rounding_evidence(d))),
                parse(f"SELECT {series} AS month, ROUND(SUM({c.column}), {d}) AS total FROM {c.table} "
                      f"WHERE {window_sql(c, first, end)} GROUP BY {series} ORDER BY total DESC LIMIT 3"),
                "rows", d, "top_months", _tag(c), (c.table,)),
                [[f"{c.months[i]:%Y-%m}", money(c.totals[i], d)] for i in top]))
    return out
