"""Questions that need joins, answered from planned foreign keys (``segment_shares``, ``per_parent``).

Over a segmented measure: a label's total in a month and over the span, each quarter's labels ranked
with their totals, the labels of a quarter that reached a bar (HAVING), and what the rows without a
known parent brought in (an anti-join). A segment reached through two keys needs three tables. Over a
planned key: parents with at least N children (GROUP BY ... HAVING in a subquery), parents with none
(NOT EXISTS), children per parent (a LEFT JOIN average), active parents per month (COUNT DISTINCT over
a join) and the parents with most children (no tie at the cut, by plan). Joined answers exclude the rows
whose parent is missing or NULL; the plan records their totals apart.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from evalpack.core.scoring import quote_literal
from evalpack.data.plan import REPEAT, AnswerKey, ParentFacts, SegmentFacts
from evalpack.questions import phrasing
from evalpack.questions.families.base import Draft, Drafts, money, ratio_answer
from evalpack.questions.families.periods import period_label, the_period
from evalpack.questions.families.trends import quarters, window_on
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.questions.sqltext import parse_sql
from evalpack.spec.model import PerParent, Spec, add_months
from evalpack.spec.semantics import plural_of
from evalpack.spec.units import from_units

ASKS = ("segment_month", "segment_total", "segment_ranking", "segment_threshold", "segment_unlinked",
        "parents_at_least", "parents_without", "children_per_parent", "active_parents", "repeat_parents",
        "top_parents", "period_parents_at_least", "period_parents_without")  # the kinds this module's questions have
ALIASES = ("t", "p", "g")
LABEL_FORMS = {"quarter": "YYYY-Qn (2024-Q1)", "month": "YYYY-MM", "year": "YYYY"}


PERIOD_SQL = {  # a date's calendar period as its label (evalpack.spec.links.periods)
    "quarter": "CONCAT(YEAR({c}), '-Q', QUARTER({c}))",
    "month": "STRFTIME({c}, '%Y-%m')",
    "year": "CAST(YEAR({c}) AS VARCHAR)",
}


def _joins(s: SegmentFacts) -> tuple[str, str]:
    """(the FROM clause from the table up to the label's table, the label as SQL: the label's column qualified
    by its alias, or the calendar period of that date column)."""
    sql = f"{s.table} AS t"
    for i, (_, column, parent, key) in enumerate(s.path):
        sql += f" JOIN {parent} AS {ALIASES[i + 1]} ON {ALIASES[i]}.{column} = {ALIASES[i + 1]}.{key}"
    column = f"{ALIASES[len(s.path)]}.{s.by_column}"
    return sql, PERIOD_SQL[s.grain].format(c=column) if s.grain else column


def _label_words(s: SegmentFacts, label: str) -> str:
    """A label as an analyst says it: a value, or a period ("Q1 2024", "March 2024", "2024")."""
    if s.grain == "quarter":
        year, quarter = label.split("-")
        return f"{quarter} {year}"
    if s.grain == "month":
        return month_words(dt.date.fromisoformat(f"{label}-01"))
    return label


def _segment_words(spec: Spec, s: SegmentFacts) -> tuple[dict[str, str], str]:
    """(each label as words: "customers whose region has zone north", how an answer line gives a label)."""
    parent = Words(spec.semantics, s.path[0][2])
    owner = Words(spec.semantics, s.by_table)
    attribute = owner.col(s.by_column)
    names = {}
    for label in s.labels:
        if s.grain:
            when = _label_words(s, label)
            names[label] = (f"{parent.many} whose {attribute} falls in {when}" if len(s.path) == 1 else
                            f"{parent.many} whose {owner.one}'s {attribute} falls in {when}")
            continue
        value = spec.semantics.value(label, s.by_table, s.by_column)
        names[label] = (f"{parent.many} with {attribute} {value}" if len(s.path) == 1 else
                        f"{parent.many} whose {owner.one} has {attribute} {value}")
    written = f"written {LABEL_FORMS[s.grain]}" if s.grain else phrasing.recorded(spec, s.by_table, s.by_column)
    return names, written


def segment_drafts(spec: Spec, s: SegmentFacts) -> Drafts:
    """Every question over one segmented measure, with this rotation's answers."""
    out: Drafts = []
    w = Words(spec.semantics, s.table)
    m = w.measure(s.column)
    d, tail = s.decimals, w.rounded(s.decimals)
    names, written = _segment_words(spec, s)
    tables = (s.table,) + tuple(parent for _, _, parent, _ in s.path)
    frm, attr = _joins(s)
    parent = Words(spec.semantics, s.path[0][2])
    tag = ("segment_shares", s.table, s.by_table)

    def window(start, end) -> str:
        return window_on(f"t.{s.time_column}", s.time_type, start, end)

    for j, label in enumerate(s.labels):
        for i, month in enumerate(s.months):
            nxt, mon = add_months(month, 1), month_words(month)
            out.append((Draft(
                f"segment_month:{s.table}.{s.column}:{s.by_table}.{s.by_column}:{label}:{month}",
                Wording((f"What was the {m} from {names[label]} in {mon}?{tail}",
                         f"How much {m} did {names[label]} bring in during {mon}?{tail}",
                         f"In {mon}, what {m} came from {names[label]}?{tail}")),
                parse_sql(f"SELECT ROUND(SUM(t.{s.column}), {d}) FROM {frm} WHERE {attr} = {quote_literal(label)} "
                      f"AND {window(month, nxt)}"),
                "number", d, "segment_month", tag + (label, f"{month:%Y-%m}"), tables), money(s.totals[i][j], d)))
        first, end = s.months[0], add_months(s.months[-1], 1)
        span = phrasing.span_words(first, s.months[-1])
        out.append((Draft(
            f"segment_total:{s.table}.{s.column}:{s.by_table}.{s.by_column}:{label}",
            Wording((f"What was the {m} from {names[label]} {span}?{tail}",
                     f"How much {m} came from {names[label]} {span}?{tail}",
                     f"Taking every month {span} together, what {m} did {names[label]} bring in?{tail}")),
            parse_sql(f"SELECT ROUND(SUM(t.{s.column}), {d}) FROM {frm} WHERE {attr} = {quote_literal(label)} "
                  f"AND {window(first, end)}"),
            "number", d, "segment_total", tag + (label,), tables), money(sum(row[j] for row in s.totals), d)))
    index = {month: i for i, month in enumerate(s.months)}
    # the rows without a known parent open and close every month (each kind two or more a month, as declared),
    # or a window a day off would leave their total unchanged
    rel = next(r for r in spec.relationships if (r.child_table, r.child_column) == s.path[0][:2])
    unlinked_edges = rel.orphans + rel.nulls > 0 and all(n == 0 or n >= 2 * len(s.months) for n in (rel.orphans,
                                                                                                  rel.nulls))
    group = Words(spec.semantics, s.by_table).col(s.by_column)
    if s.grain:  # "sign-up date" by quarter reads "sign-up quarter"
        group = f"{group[:-5]} {s.grain}" if group.endswith(" date") else f"{group} {s.grain}"
    layout = f" Give each {group} {written}, then its {m}.{tail}"
    for run in quarters(s.months, 3):
        label, nxt = period_label(run), add_months(run[-1], 1)
        sums = [sum(s.totals[index[x]][j] for x in run) for j in range(len(s.labels))]
        if len(set(sums)) == len(sums):
            ranked = sorted(range(len(sums)), key=lambda j: -sums[j])
            out.append((Draft(
                f"segment_ranking:{s.table}.{s.column}:{s.by_table}.{s.by_column}:{run[0]}",
                Wording(tuple(text + layout for text in (
                    f"Rank each {group} of the {parent.many} by the {m} it brought in during {label}, highest first.",
                    f"For {label}, list every {group} of the {parent.many} with its {m}, largest first.",
                    f"Which {group} of the {parent.many} brought in the most {m} in {label}? List all of them, from "
                    f"the highest down."))),
                parse_sql(f"SELECT {attr}, ROUND(SUM(t.{s.column}), {d}) AS total FROM {frm} "
                      f"WHERE {window(run[0], nxt)} GROUP BY {attr} ORDER BY total DESC"),
                "rows", d, "segment_ranking", tag + (f"{run[0]:%Y-%m}",), tables),
                [[s.labels[j], money(sums[j], d)] for j in ranked]))
        if spec.answers != "rotated" and len(sums) > 2:
            bar = sorted(sums)[len(sums) // 2]
            kept = [j for j in range(len(sums)) if sums[j] >= bar]
            amount = f"{from_units(bar, d):,}" + (f" {spec.semantics.currency}" if spec.semantics.currency else "")
            out.append((Draft(
                f"segment_threshold:{s.table}.{s.column}:{s.by_table}.{s.by_column}:{run[0]}",
                Wording(tuple(text + layout for text in (
                    f"Which {plural_of(group)} of the {parent.many} brought in at least {amount} of {m} in {label}?",
                    f"In {label}, for which {group} did the {parent.many} reach {amount} or more of {m}?",
                    f"List every {group} of the {parent.many} whose {m} in {label} was {amount} or more."))),
                parse_sql(f"SELECT {attr}, ROUND(SUM(t.{s.column}), {d}) AS total FROM {frm} "
                      f"WHERE {window(run[0], nxt)} GROUP BY {attr} HAVING SUM(t.{s.column}) >= {from_units(bar, d)}"),
                "rows", d, "segment_threshold", tag + (f"{run[0]:%Y-%m}",), tables),
                [[s.labels[j], money(sums[j], d)] for j in kept]))
        _, column, parent_table, key = s.path[0]
        if not unlinked_edges:
            continue
        out.append((Draft(
            f"segment_unlinked:{s.table}.{s.column}:{column}:{run[0]}",
            Wording(tuple(text + f" Count both: no {parent.one} recorded, or one not on record.{tail}"
                          for text in (
                              f"How much {m} in {label} came from {w.many} without a known {parent.one}?",
                              f"What {m} did {w.many} that match no known {parent.one} bring in during {label}?",
                              f"In {label}, what was the {m} of {w.many} whose {parent.one} is unknown?"))),
            parse_sql(f"SELECT ROUND(SUM(t.{s.column}), {d}) FROM {s.table} AS t LEFT JOIN {parent_table} AS p "
                  f"ON t.{column} = p.{key} WHERE p.{key} IS NULL AND {window(run[0], nxt)}"),
            "number", d, "segment_unlinked", tag + (f"{run[0]:%Y-%m}",), (s.table, parent_table)),
            money(sum(s.unlinked[index[x]] for x in run), d)))
    return out


def _key_words(spec: Spec, f: ParentFacts) -> tuple[Words, Words, str, tuple[str, str], PerParent | None]:
    """(the child's words, the parent's, the join condition, the two tables, the key's per_parent declaration if
    any)."""
    child, parent = Words(spec.semantics, f.child_table), Words(spec.semantics, f.parent_table)
    declared = next((pp for pp in spec.per_parent if (pp.child_table, pp.child_column) == (f.child_table,
                                                                                          f.child_column)), None)
    return child, parent, f"c.{f.child_column} = p.{f.parent_column}", (f.child_table, f.parent_table), declared


def parent_drafts(spec: Spec, f: ParentFacts) -> Drafts:
    """Every question over one planned key's children per parent, with this rotation's answers."""
    out: Drafts = []
    child, parent, on, tables, declared = _key_words(spec, f)
    known = f" Count only {parent.many} on record."
    tag = ("per_parent", f.child_table, f.parent_table)
    counts = dict(f.children)
    # the declared counts: parents sit exactly at each (the plan keeps some of an open bucket at its floor) and
    # one below it, so a bar moved by one counts other parents
    for n in sorted({b.count for b in declared.counts if b.count >= 2} if declared else ()):  # >= 1: a join
        reached = sum(many for value, many in f.children if value >= n)
        out.append((Draft(
            f"parents_at_least:{f.child_table}.{f.child_column}:{n}",
            Wording((f"How many {parent.many} have at least {n} {child.many if n > 1 else child.one}?",
                     f"Count the {parent.many} with {n} or more {child.many}.",
                     f"How many {parent.many} placed {n} {child.many if n > 1 else child.one} or more?")),
            parse_sql(f"SELECT COUNT(*) FROM (SELECT p.{f.parent_column} FROM {f.parent_table} AS p JOIN "
                  f"{f.child_table} AS c ON {on} GROUP BY p.{f.parent_column} HAVING COUNT(*) >= {n}) AS busy"),
            "integer", None, "parents_at_least", tag + (str(n),), tables), reached))
    out.append((Draft(
        f"parents_without:{f.child_table}.{f.child_column}",
        Wording((f"How many {parent.many} have no {child.many} at all?",
                 f"Count the {parent.many} that never had {phrasing.article(child.one)}.",
                 f"How many {parent.many} are there without a single {child.one}?")),
        parse_sql(f"SELECT COUNT(*) FROM {f.parent_table} AS p WHERE NOT EXISTS "
              f"(SELECT * FROM {f.child_table} AS c WHERE {on})"),
        "integer", None, "parents_without", tag, tables), counts.get(0, 0)))
    out.append((Draft(
        f"children_per_parent:{f.child_table}.{f.child_column}",
        Wording(tuple(text + f" Every {parent.one} counts, those with none included; {child.many} without a known "
                             f"{parent.one} do not count. Answer to 2 decimal places." for text in (
                                 f"On average, how many {child.many} does {phrasing.article(parent.one)} have?",
                                 f"What is the average number of {child.many} per {parent.one}?",
                                 f"How many {child.many} per {parent.one} are there on average?"))),
        parse_sql(f"SELECT ROUND(CAST(COUNT(c.{f.child_column}) AS DOUBLE) / COUNT(DISTINCT p.{f.parent_column}), 2) "
              f"FROM {f.parent_table} AS p LEFT JOIN {f.child_table} AS c ON {on}"),
        "number", 2, "children_per_parent", tag, tables), ratio_answer(Fraction(f.linked, f.parents), 2)))
    # per month only on a date column: on a datetime one a window a moment off moves the few rows at midnight,
    # whose parents mostly have other rows that month, so the distinct count would not show it
    for month, active, repeat in zip(f.months, f.active, f.repeat) if f.time_type == "date" else ():
        nxt, mon = add_months(month, 1), month_words(month)
        window = window_on(f"c.{f.time_column}", f.time_type, month, nxt)
        out.append((Draft(
            f"active_parents:{f.child_table}.{f.child_column}:{month}",
            Wording(tuple(text + known for text in (
                f"How many {parent.many} had at least one {child.one} in {mon}?",
                f"How many distinct {parent.many} were active in {mon}, by their {child.many}?",
                f"Count the different {parent.many} with {phrasing.article(child.one)} in {mon}."))),
            parse_sql(f"SELECT COUNT(DISTINCT p.{f.parent_column}) FROM {f.child_table} AS c JOIN {f.parent_table} AS p "
                  f"ON {on} WHERE {window}"),
            "integer", None, "active_parents", tag + (f"{month:%Y-%m}",), tables), active))
        out.append((Draft(
            f"repeat_parents:{f.child_table}.{f.child_column}:{month}",
            Wording(tuple(text + known for text in (
                f"How many {parent.many} had at least {REPEAT} {child.many} in {mon}?",
                f"How many repeat {parent.many} were there in {mon}, with {REPEAT} or more {child.many}?",
                f"Count the {parent.many} with {REPEAT} {child.many} or more in {mon}."))),
            parse_sql(f"SELECT COUNT(*) FROM (SELECT p.{f.parent_column} FROM {f.parent_table} AS p JOIN {f.child_table} "
                  f"AS c ON {on} WHERE {window} "
                  f"GROUP BY p.{f.parent_column} HAVING COUNT(*) >= {REPEAT}) AS repeat_{f.parent_table}"),
            "integer", None, "repeat_parents", tag + (f"{month:%Y-%m}",), tables), repeat))
    out += period_drafts(spec, f)
    if f.top:
        n = len(f.top)
        out.append((Draft(
            f"top_parents:{f.child_table}.{f.child_column}:{n}",
            Wording(tuple(text + f" Give each {parent.one}'s identifier, then its number of {child.many}, most "
                                 "first." for text in (
                                     f"Which {n} {parent.many} have the most {child.many}?",
                                     f"List the top {n} {parent.many} by number of {child.many}.",
                                     f"Which are the {n} {parent.many} with the largest number of {child.many}?"))),
            parse_sql(f"SELECT p.{f.parent_column}, COUNT(*) AS placed FROM {f.parent_table} AS p JOIN {f.child_table} "
                  f"AS c ON {on} GROUP BY p.{f.parent_column} ORDER BY placed DESC LIMIT {n}"),
            "rows", None, "top_parents", tag, tables), [[key, count] for key, count in f.top]))
    return out


def period_drafts(spec: Spec, f: ParentFacts) -> Drafts:
    """Questions over ``per_parent`` counts declared per period: parents with at least N children in a period
    (each declared count from 2), and parents with none in it. Date columns only, as for active parents."""
    out: Drafts = []
    child, parent, on, tables, declared = _key_words(spec, f)
    known = f" Count only {parent.many} on record."
    for period in f.periods if f.time_type == "date" else ():
        run = tuple(m for m in (add_months(period.first, i) for i in range(12)) if m < period.end)
        when = month_words(period.first) if len(run) == 1 else the_period(run)
        window = window_on(f"c.{f.time_column}", f.time_type, period.first, period.end)
        tag = ("per_parent", f.child_table, f.parent_table, period.label)
        for n in sorted({b.count for b in declared.counts if b.count >= 2} if declared else ()):  # 1: active
            things = child.many if n > 1 else child.one
            out.append((Draft(
                f"period_parents_at_least:{f.child_table}.{f.child_column}:{n}:{period.label}",
                Wording(tuple(text + known for text in (
                    f"How many {parent.many} had at least {n} {things} in {when}?",
                    f"In {when}, how many {parent.many} placed {n} {things} or more?",
                    f"Count the {parent.many} with {n} or more {things} in {when}."))),
                parse_sql(f"SELECT COUNT(*) FROM (SELECT p.{f.parent_column} FROM {f.parent_table} AS p JOIN "
                      f"{f.child_table} AS c ON {on} WHERE {window} GROUP BY p.{f.parent_column} "
                      f"HAVING COUNT(*) >= {n}) AS busy"),
                "integer", None, "period_parents_at_least", tag + (str(n),), tables),
                sum(many for value, many in period.children if value >= n)))
        out.append((Draft(
            f"period_parents_without:{f.child_table}.{f.child_column}:{period.label}",
            Wording((f"How many {parent.many} had no {child.many} in {when}?",
                     f"Count the {parent.many} without a single {child.one} in {when}.",
                     f"In {when}, how many {parent.many} did not have any {child.many}?")),
            parse_sql(f"SELECT COUNT(*) FROM {f.parent_table} AS p WHERE NOT EXISTS (SELECT * FROM {f.child_table} "
                  f"AS c WHERE {on} AND {window})"),
            "integer", None, "period_parents_without", tag, tables), dict(period.children).get(0, 0)))
    return out


def drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every join question of the answer key's planned keys, with this rotation's answers."""
    out: Drafts = []
    for s in key.segments:
        out += segment_drafts(spec, s)
    for f in key.parents:
        out += parent_drafts(spec, f)
    return out
