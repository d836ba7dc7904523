"""Questions over a curve's groups (``group_shares``): the gap between two groups in a month; a month's
or a quarter's groups as a ranked list with their totals; and the groups of a quarter that reached a
bar (GROUP BY ... HAVING), both result-set answers.

Answers come from the plan's exact group totals per month. The ranked list is asked even where two
groups could tie: the golden checks drop it on a rotation where a tie makes its order depend on row
order. The HAVING bar is the middle group's exact total, so ``>`` instead of ``>=`` drops a group. A
group's share in percent and the leading group alone are not asked: with declared shares, the share is
the declared percentage whatever the window, and a one-day mistake does not move a leader, so nearly
every near-miss mutant of those would pass.
"""

from __future__ import annotations

from evalpack.core.scoring import quote_literal
from evalpack.data.plan import AnswerKey
from evalpack.questions import phrasing
from evalpack.questions.families.base import Draft, Drafts, money
from evalpack.questions.families.periods import period_label
from evalpack.questions.families.trends import quarters, window_sql
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import Spec, add_months
from evalpack.spec.semantics import plural_of
from evalpack.spec.units import from_units


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every segment question of every curve that declares group shares, with this rotation's answers."""
    out: Drafts = []
    for c in key.curves:
        if not c.group_column or len(c.groups) < 2:
            continue
        w = Words(spec.semantics, c.table)
        m = w.measure(c.column)
        d, tail = c.decimals, w.rounded(c.decimals)
        g, gc = w.col(c.group_column), c.group_column
        plural_g = plural_of(g)
        names = {label: f"the {spec.semantics.value(label, c.table, gc)} {g}" for label in c.groups}
        layout = f" Give each {g} {phrasing.recorded(spec, c.table, gc)}, then its {m}."
        index = {month: i for i, month in enumerate(c.months)}
        n = len(c.groups)
        for i, month in enumerate(c.months):
            nxt = add_months(month, 1)
            mon = month_words(month)
            totals = c.group_totals[i]
            tag = ("group_shares", c.table, f"{month:%Y-%m}")
            a, b = c.groups[i % n], c.groups[(i + 1) % n]
            ia, ib = c.groups.index(a), c.groups.index(b)
            out.append((Draft(
                f"group_gap:{c.table}.{c.column}:{a}:{b}:{month}",
                Wording(tuple(text + f" Negative when {names[b]} brought in more.{tail}" for text in (
                    f"How much more {m} did {names[a]} bring in than {names[b]} in {mon}?",
                    f"In {mon}, what was the {m} of {names[a]} minus that of {names[b]}?",
                    f"By how much did {names[a]} exceed {names[b]} in {m} in {mon}?"))),
                parse_sql(f"SELECT ROUND(SUM({c.column}) FILTER (WHERE {gc} = {quote_literal(a)}) - SUM({c.column}) "
                      f"FILTER (WHERE {gc} = {quote_literal(b)}), {d}) FROM {c.table} WHERE {window_sql(c, month, nxt)}"),
                "number", d, "group_gap", tag + (a, b), (c.table,)), money(totals[ia] - totals[ib], d)))
        runs = [(month,) for month in c.months] + quarters(c.months, 3)
        for run in runs:
            label = month_words(run[0]) if len(run) == 1 else period_label(run)
            nxt = add_months(run[-1], 1)
            sums = [sum(c.group_totals[index[x]][j] for x in run) for j in range(n)]
            order = sorted(range(n), key=lambda j: -sums[j])
            where = window_sql(c, run[0], nxt)
            tag = ("group_shares", c.table, f"{run[0]:%Y-%m}")
            out.append((Draft(
                f"group_ranking:{c.table}.{c.column}:{run[0]}:{len(run)}",
                phrasing.group_ranking(g, plural_g, m, label, tail, phrasing.recorded(spec, c.table, gc)),
                parse_sql(f"SELECT {gc}, ROUND(SUM({c.column}), {d}) AS total FROM {c.table} "
                      f"WHERE {where} GROUP BY {gc} ORDER BY total DESC"),
                "rows", d, "group_ranking", tag, (c.table,)),
                [[c.groups[j], money(sums[j], d)] for j in order]))
            if len(run) == 1 or spec.answers == "rotated":
                continue  # the bar is a literal in the SQL, which every rotation shares: rotated totals move it
            # the bar is the middle group's exact total: ">=" keeps it, ">" would not, a wrong window moves it
            bar = sorted(sums)[n // 2]
            kept = [j for j in order if sums[j] >= bar]
            amount = f"{from_units(bar, d):,}" + (f" {spec.semantics.currency}" if spec.semantics.currency else "")
            out.append((Draft(
                f"group_threshold:{c.table}.{c.column}:{run[0]}",
                Wording(tuple(text + layout + tail for text in (
                    f"Which {plural_g} brought in at least {amount} of {m} in {label}?",
                    f"In {label}, which {plural_g} reached {amount} or more in {m}?",
                    f"List the {plural_g} whose {m} in {label} was {amount} or more."))),
                parse_sql(f"SELECT {gc}, ROUND(SUM({c.column}), {d}) AS total FROM {c.table} WHERE {where} "
                      f"GROUP BY {gc} HAVING SUM({c.column}) >= {from_units(bar, d)}"),
                "rows", d, "group_threshold", tag, (c.table,)),
                [[c.groups[j], money(sums[j], d)] for j in kept]))
    return out
