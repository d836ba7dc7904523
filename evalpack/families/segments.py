"""Questions over a curve's groups (``group_shares``): the leading group of a month, a group's rank,
its share in percent, the gap between two groups, and each month's groups as a ranked list.

Answers come from the plan's exact group totals per month. A rank is ``1 +`` the number of groups
with a strictly larger total, which is what RANK() returns, ties included; which group leads and the
ranked list are asked anyway, and the golden checks drop them on a rotation where a tie makes the
answer depend on row order.
"""

from __future__ import annotations

from fractions import Fraction

from evalpack import phrasing
from evalpack.families.base import Draft, Drafts, money, parse, ratio_answer
from evalpack.families.trends import quarters, window_sql
from evalpack.phrasing import Wording, Words, month_words
from evalpack.plan import AnswerKey, stable_int
from evalpack.semantics import plural_of
from evalpack.spec import Spec, add_months


def _quote(label: str) -> str:
    return "'" + label.replace("'", "''") + "'"


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every segment question of every curve that declares group shares, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        if not c.group_column or len(c.groups) < 2:
            continue
        w = Words(spec.semantics, c.table)
        m, defined = w.measure(c.column)
        d, tail = c.decimals, w.rounded(c.decimals)
        g, gc = w.col(c.group_column), c.group_column
        plural_g = plural_of(g)
        names = {label: f"the {spec.semantics.value(label)} {g}" for label in c.groups}
        literal = {label: f"{names[label]} means {c.table}.{gc} = '{label}'" for label in c.groups}
        index = {month: i for i, month in enumerate(c.months)}
        n = len(c.groups)
        for i, month in enumerate(c.months):
            nxt = add_months(month, 1)
            mon = month_words(month)
            totals = c.group_totals[i]
            window = w.window(c.time_column, month, nxt, mon)
            tag = ("group_shares", c.table, f"{month:%Y-%m}")
            lead = max(range(n), key=lambda j: totals[j])
            out.append((Draft(
                f"top_group:{c.table}.{c.column}:{month}",
                Wording((f"Which {g} brought in the most {m} in {mon}?", f"In {mon}, which {g} had the highest {m}?",
                         f"Name the {g} with the largest {m} in {mon}."),
                        phrasing.join(defined, window, f"answer with the {g} exactly as stored in {c.table}.{gc} "
                                      f"({', '.join(repr(x) for x in c.groups)})")),
                parse(f"SELECT {gc} FROM {c.table} WHERE {window_sql(c, month, nxt)} GROUP BY {gc} "
                      f"ORDER BY SUM({c.column}) DESC LIMIT 1"),
                "string", None, "top_group", tag, (c.table,)), c.groups[lead]))
            pick = stable_int("rank", c.table, month) % n
            label = c.groups[pick]
            out.append((Draft(
                f"group_rank:{c.table}.{c.column}:{month}",
                Wording((f"Where did {names[label]} rank by {m} among the {plural_g} in {mon}, 1 being the highest?",
                         f"In {mon}, what was the rank of {names[label]} by {m}, counting the highest as 1?",
                         f"Ranking the {plural_g} by {m} for {mon}, highest first, in which place was "
                         f"{names[label]}?"),
                        phrasing.join(defined, literal[label], window, f"a {g}'s rank is 1 plus the number of "
                                      f"{plural_g} with a higher {m}")),
                parse(f"WITH by_group AS (SELECT {gc}, SUM({c.column}) AS total FROM {c.table} "
                      f"WHERE {window_sql(c, month, nxt)} GROUP BY {gc}), ranked AS (SELECT {gc}, "
                      f"RANK() OVER (ORDER BY total DESC) AS position FROM by_group) "
                      f"SELECT position FROM ranked WHERE {gc} = {_quote(label)}"),
                "integer", None, "group_rank", tag + (label,), (c.table,)),
                1 + sum(1 for j in range(n) if totals[j] > totals[pick])))
            share = c.groups[stable_int("share", c.table, month) % n]
            whole = sum(totals)
            if whole:
                out.append((Draft(
                    f"group_share:{c.table}.{c.column}:{share}:{month}",
                    Wording((f"What percentage of the {m} in {mon} came from {names[share]}? Answer in percent, to "
                             f"2 decimal places.",
                             f"In {mon}, what share of the {m} did {names[share]} account for, in percent to 2 "
                             f"decimal places?",
                             f"How many percent of the {m} of {mon} were from {names[share]}? Give it to 2 decimal "
                             f"places."),
                            phrasing.join(defined, literal[share], window, f"the share is 100 times the {m} of "
                                          f"{names[share]} divided by the {m} of all {plural_g}",
                                          "round to 2 decimal places")),
                    parse(f"SELECT ROUND(100 * SUM(CASE WHEN {gc} = {_quote(share)} THEN {c.column} END) / "
                          f"SUM({c.column}), 2) FROM {c.table} WHERE {window_sql(c, month, nxt)}"),
                    "number", 2, "group_share", tag + (share,), (c.table,)),
                    ratio_answer(Fraction(100 * totals[c.groups.index(share)], whole), 2)))
            a, b = c.groups[i % n], c.groups[(i + 1) % n]
            ia, ib = c.groups.index(a), c.groups.index(b)
            out.append((Draft(
                f"group_gap:{c.table}.{c.column}:{a}:{b}:{month}",
                Wording((f"How much more {m} did {names[a]} bring in than {names[b]} in {mon}?{tail}",
                         f"In {mon}, what was the {m} of {names[a]} minus that of {names[b]}?{tail}",
                         f"By how much did {names[a]} exceed {names[b]} in {m} in {mon}?{tail}"),
                        phrasing.join(defined, literal[a], literal[b], window, "negative when the second is larger",
                                      w.rounding_evidence(d))),
                parse(f"SELECT ROUND(SUM({c.column}) FILTER (WHERE {gc} = {_quote(a)}) - SUM({c.column}) "
                      f"FILTER (WHERE {gc} = {_quote(b)}), {d}) FROM {c.table} WHERE {window_sql(c, month, nxt)}"),
                "number", d, "group_gap", tag + (a, b), (c.table,)), money(totals[ia] - totals[ib], d)))
        for run in quarters(c.months, 3):
            label = f"Q{(run[0].month - 1) // 3 + 1} {run[0].year}"
            nxt = add_months(run[-1], 1)
            sums = [sum(c.group_totals[index[x]][j] for x in run) for j in range(n)]
            order = sorted(range(n), key=lambda j: -sums[j])
            out.append((Draft(
                f"group_ranking:{c.table}.{c.column}:{run[0]}",
                Wording((f"List each {g} with its {m} in {label}, highest first.{tail}",
                         f"Rank the {plural_g} by {m} for {label}, showing each total, largest first.{tail}",
                         f"What was the {m} of every {g} in {label}? List them from the highest down.{tail}"),
                        phrasing.join(defined, w.window(c.time_column, run[0], nxt, label),
                                      f"one row per {g}: its value in {c.table}.{gc}, then its total",
                                      w.rounding_evidence(d))),
                parse(f"SELECT {gc}, ROUND(SUM({c.column}), {d}) AS total FROM {c.table} "
                      f"WHERE {window_sql(c, run[0], nxt)} GROUP BY {gc} ORDER BY total DESC"),
                "rows", d, "group_ranking", ("group_shares", c.table, f"{run[0]:%Y-%m}"), (c.table,)),
                [[c.groups[j], money(sums[j], d)] for j in order]))
    return out
