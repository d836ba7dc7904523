"""Questions that compare a declared rate between two periods: how many percentage points the share
of flagged rows moved from one declared month to the next (a monthly CTE and LAG).

Answers are exact: each month's rate is flagged / rows from the plan, and the difference of the two
fractions is rounded half-to-even once.
"""

from __future__ import annotations

from fractions import Fraction

from evalpack.data.plan import AnswerKey
from evalpack.questions.families.base import Draft, Drafts, ratio_answer
from evalpack.questions.families.trends import window_on
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """One question per pair of consecutive declared months of every rate curve, with this rotation's answers."""
    out: Drafts = []
    for r in key.rates:
        w = Words(spec.semantics, r.table)
        f, t = w.col(r.column), r.time_column
        month = f"DATE_TRUNC('month', {t})"
        for i in range(1, len(r.months)):
            now, prev = r.months[i], r.months[i - 1]
            mon, before = month_words(now), month_words(prev)

            change = Fraction(100 * r.flagged[i], r.rows[i]) - Fraction(100 * r.flagged[i - 1], r.rows[i - 1])
            out.append((Draft(
                f"rate_change:{r.table}.{r.column}:{prev}:{now}",
                Wording(tuple(text + f" Give {mon}'s share minus {before}'s, in percentage points to 2 decimal "
                                     "places." for text in (
                                         f"By how many percentage points did the share of {f} {w.many} change from "
                                         f"{before} to {mon}?",
                                         f"How much did the {f} rate move between {before} and {mon}?",
                                         f"What was the change in the share of {w.many} that were {f}, {before} "
                                         f"against {mon}?"))),
                parse_sql(f"WITH monthly AS (SELECT {month} AS month, 100 * COUNT_IF({r.column}) / COUNT(*) AS share "
                      f"FROM {r.table} WHERE ({window_on(t, r.time_type, prev, add_months(prev, 1))}) "
                      f"OR ({window_on(t, r.time_type, now, add_months(now, 1))}) GROUP BY {month}), "
                      f"paired AS (SELECT month, share - LAG(share) OVER (ORDER BY month) AS change FROM monthly) "
                      f"SELECT ROUND(change, 2) FROM paired WHERE change IS NOT NULL"),
                "number", 2, "rate_change", ("rate_curve", r.table, f"{now:%Y-%m}"), (r.table,)),
                ratio_answer(change, 2)))
    return out
