"""Questions over each group's months, asked as one result set: every group's year-to-date total at
the end of each month of a quarter (a running SUM ... OVER (PARTITION BY group ...)), and every
group's change from one month to the next (LAG ... OVER (PARTITION BY group ...)).

Answers come from the plan's exact group totals per month. Each answer line is one group (and month),
so a window that forgets its PARTITION BY, runs the wrong way or looks back the wrong number of
months changes the lines it returns.
"""

from __future__ import annotations

import datetime as dt

from evalpack.data.plan import AnswerKey, CurveFacts
from evalpack.questions import phrasing
from evalpack.questions.families.base import Draft, Drafts, money
from evalpack.questions.families.periods import period_label
from evalpack.questions.families.trends import month_start, month_text, quarters, window_sql
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months


def _monthly(c: CurveFacts, first: dt.date, end: dt.date, text: bool = False) -> str:
    """The first step: each group's total per month (as YYYY-MM text when ``text``: a one-day shift of a filter
    on whole months is then no mistake), from ``first`` up to ``end`` (excluded)."""
    month = (month_text if text else month_start)(c.time_column)
    return (f"WITH monthly AS (SELECT {c.group_column}, {month} AS month, SUM({c.column}) AS total FROM {c.table} "
            f"WHERE {window_sql(c, first, end)} GROUP BY {c.group_column}, {month_start(c.time_column)})")


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every per-group trend question of every curve that declares group shares, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        if not c.group_column or len(c.groups) < 2:
            continue
        w = Words(spec.semantics, c.table)
        m = w.measure(c.column)
        d, tail = c.decimals, w.rounded(c.decimals)
        g, gc = w.col(c.group_column), c.group_column
        written = phrasing.recorded(spec, c.table, gc)
        index = {month: i for i, month in enumerate(c.months)}

        for run in quarters(c.months, 3):
            label = period_label(run)
            start = max(c.months[0], run[0].replace(month=1))
            since = "year-to-date" if start.month == 1 else f"cumulative (since {month_words(start)})"
            end = add_months(run[-1], 1)
            lines = []
            for j, group in enumerate(c.groups):
                for x in run:
                    running = sum(c.group_totals[index[y]][j] for y in c.months if start <= y <= x)
                    lines.append([group, f"{x:%Y-%m}", money(running, d)])
            out.append((Draft(
                f"group_running:{c.table}.{c.column}:{run[0]}",
                Wording(tuple(text + f" Give each {g} {written}, the month, then the total.{tail}"
                              for text in (
                                  f"For each {g}, what was the {since} {m} at the end of each month of {label}?",
                                  f"Give every {g}'s {since} {m} as it stood at the close of each month in {label}.",
                                  f"Show, {g} by {g}, the {since} {m} at each month-end of {label}."))),
                parse_sql(f"{_monthly(c, start, end, text=True)}, running AS (SELECT {gc}, month, SUM(total) OVER (PARTITION BY "
                      f"{gc} ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running_total "
                      f"FROM monthly) SELECT {gc}, month, ROUND(running_total, {d}) AS running_total FROM running "
                      f"WHERE month >= '{run[0]:%Y-%m}'"),
                "rows", d, "group_running", ("group_shares", c.table, f"{run[0]:%Y-%m}"), (c.table,)), lines))
        for i in range(1, len(c.months)):
            now, prev = c.months[i], c.months[i - 1]
            mon, before = month_words(now), month_words(prev)
            lines = [[group, money(c.group_totals[i][j] - c.group_totals[i - 1][j], d)]
                     for j, group in enumerate(c.groups)]
            out.append((Draft(
                f"group_change:{c.table}.{c.column}:{now}",
                Wording(tuple(text + f" Give each {g} {written}, then {mon}'s figure minus {before}'s "
                                     f"(negative for a fall).{tail}" for text in (
                                         f"How did each {g}'s {m} change from {before} to {mon}?",
                                         f"For every {g}, by how much did the {m} rise or fall between {before} and "
                                         f"{mon}?",
                                         f"Give the change in {m} from {before} to {mon}, {g} by {g}."))),
                parse_sql(f"{_monthly(c, prev, add_months(now, 1))}, changes AS (SELECT {gc}, month, total - LAG(total) "
                      f"OVER (PARTITION BY {gc} ORDER BY month) AS change FROM monthly) "
                      f"SELECT {gc}, ROUND(change, {d}) AS change FROM changes WHERE change IS NOT NULL"),
                "rows", d, "group_change", ("group_shares", c.table, f"{now:%Y-%m}"), (c.table,)), lines))
    return out
