"""How questions are worded: an analyst's words from the spec's semantics, several phrasings of each
question.

A question is complete under the pack's data dictionary (:mod:`evalpack.spec.dictionary`): its own words give
the period, the group, the threshold, the direction of a ranking, which figures to give back and in what
order; the dictionary says what the words mean in the tables (which column a measure sums, which date places a
row in a month, what a stored value stands for) and the conventions (a month, rounding, unknown parents). So a
question never shows an identifier, a stored value, a date bound or SQL phrasing ("rows", "strictly before",
"= 'web'"), and its ``evidence`` is only external knowledge (:func:`evidence_for`). Which phrasing a question uses
is chosen from the pack's seed; the others are kept as its ``paraphrases``, and every phrasing asks the same
thing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from evalpack.data.plan import stable_int
from evalpack.spec.model import Spec
from evalpack.spec.semantics import Semantics, article, plural_of  # noqa: F401 - article: the families' name for it

#: Words that give away SQL instead of asking a business question (tests/questions/test_phrasing.py checks them).
SQL_PHRASING = ("rows", "row ", "strictly", "on or after", "= '", "null", "true", "false", "select ", "sum(",
                "count(", "where ")


@dataclass(frozen=True)
class Wording:
    """Every phrasing of one question."""

    phrasings: tuple[str, ...]

    def chosen(self, seed: int, key: str) -> tuple[str, tuple[str, ...]]:
        """(the phrasing the seed picks for the question ``key``, the others in order)."""
        i = stable_int("phrasing", seed, key) % len(self.phrasings)
        return self.phrasings[i], self.phrasings[:i] + self.phrasings[i + 1:]


def month_words(month: dt.date) -> str:
    return f"{month:%B %Y}"


def span_words(first: dt.date, last: dt.date) -> str:
    """A run of calendar months ("from January 2025 through December 2025")."""
    return f"from {month_words(first)} through {month_words(last)}"


class Words:
    """The phrasing of each question family over one table's business words."""

    def __init__(self, semantics: Semantics, table: str) -> None:
        self.sem, self.table = semantics, table
        names = semantics.table(table)
        self.one, self.many = names.singular, names.plural

    def col(self, column: str) -> str:
        return self.sem.column(self.table, column)

    def measure(self, column: str) -> str:
        """The name of the sum of ``column`` (the dictionary defines it)."""
        return self.sem.sum_measure(self.table, column)

    def rounded(self, decimals: int) -> str:
        return f" Answer {self.sem.money(decimals)}."


def evidence_for(text: str, terms: tuple[tuple[str, str], ...]) -> str | None:
    """A question's evidence, in BIRD's sense: external knowledge in plain words, here the definition of each
    business term (``terms``: the dictionary's, as (term, definition)) the question's words use; None when it
    uses none. A term's definition never names a table, a column or a stored value (the dictionary's do not)."""
    lowered = text.lower()
    found = [f"{term}: {definition}" for term, definition in terms if term.lower() in lowered]
    return " ".join(found) if found else None


def with_synonyms(semantics: Semantics, word: str, phrasings: tuple[str, ...]) -> tuple[str, ...]:
    """The phrasings, plus one per declared synonym of ``word``: the first phrasing whose verb does not agree
    with ``word`` ("what was the revenue" would read "what was the sales"), reworded."""
    agreeing = [p for p in phrasings if word in p and not any(f"{verb} the {word}" in p for verb in ("was", "is"))]
    base = agreeing[0] if agreeing else phrasings[0]
    return phrasings + tuple(base.replace(word, alt, 1) for alt in semantics.alternatives(word) if word in base)


def period_total(w: Words, column: str, month: dt.date, decimals: int) -> Wording:
    m = w.measure(column)
    mon = month_words(month)
    tail = w.rounded(decimals)
    return Wording(with_synonyms(w.sem, m, (f"What was the {m} in {mon}?{tail}", f"Give the {m} for {mon}.{tail}",
                                            f"For {mon}, what is the {m}?{tail}")))


def period_rows(w: Words, time_column: str, month: dt.date) -> Wording:
    mon, t = month_words(month), w.col(time_column)
    count = w.sem.count_measure(w.table) or f"number of {w.many}"
    return Wording((f"How many {w.many} have {article(t)} in {mon}?", f"What was the {count} in {mon}?",
                    f"Count the {w.many} whose {t} falls in {mon}."))


def month_over_month(m: str, before: dt.date, month: dt.date, tail: str) -> Wording:
    """The change of the measure ``m`` from the month ``before`` to ``month``, one reading of its sign."""
    mon, prev = month_words(month), month_words(before)
    return Wording(tuple(text + f" Give {mon}'s figure minus {prev}'s (negative for a fall).{tail}" for text in (
        f"By how much did the {m} change from {prev} to {mon}?",
        f"What was the change in {m} between {prev} and {mon}?",
        f"How much higher or lower was the {m} in {mon} than in {prev}?")))


def versus_average(m: str, the_span: str, months: int, mon: str, tail: str) -> Wording:
    """A month's distance from the average month of a span (``months`` long), one reading of its sign."""
    below = f" The average month is the {m} of {the_span} over its {months} months; a month below it gives a negative figure."
    return Wording(tuple(text + below + tail for text in (
        f"How far above or below the average month of {the_span} was the {m} of {mon}?",
        f"By how much did the {m} of {mon} differ from the monthly average of {the_span}?",
        f"Compared with an average month of {the_span}, how much more {m} came in {mon}?")))


def month_ranking(m: str, named: str, tail: str) -> Wording:
    """The months of a period ranked by the measure ``m``, each with its figure."""
    return Wording(tuple(text + f" Give each month, then its {m}." + tail for text in (
        f"Rank the months of {named} by {m}, highest first.",
        f"List every month of {named} from the strongest month to the weakest by {m}.",
        f"Order the months of {named} from the highest {m} to the lowest.")))


AS_RECORDED = "as the data records it"


def recorded(spec: Spec, table: str, column: str) -> str:
    """How a question asks for a group's value: as stored, or, for a coded column (``traps.codes``), by the name
    the dictionary gives its code."""
    return "by its name" if spec.traps.coded(table, column) else AS_RECORDED


def group_ranking(g: str, groups: str, m: str, label: str, tail: str, written: str = AS_RECORDED) -> Wording:
    """Each group of a categorical column (``g``, plural ``groups``) with its figure of ``m`` in ``label``, each
    group given ``written`` (:func:`recorded`)."""
    layout = f" Give each {g} {written}, then its {m}."
    return Wording(tuple(text + layout + tail for text in (
        f"List each {g} with its {m} in {label}, highest first.",
        f"Rank the {groups} by {m} for {label}, showing each total, largest first.",
        f"What was the {m} of every {g} in {label}? List them from the highest down.")))


def grand_total(w: Words, column: str, first: dt.date, last: dt.date, decimals: int) -> Wording:
    m = w.measure(column)
    span, tail = span_words(first, last), w.rounded(decimals)
    return Wording(with_synonyms(w.sem, m, (f"What was the {m} {span}?{tail}",
                                            f"Give the {m} for the whole period {span}.{tail}",
                                            f"Taking every month {span} together, what is the {m}?{tail}")))


def peak_period(w: Words, column: str) -> Wording:
    m = w.measure(column)
    return Wording((f"Of all the months the data covers, in which was the {m} highest? Answer as YYYY-MM.",
                    f"Which month of all the data had the largest {m}? Give it as YYYY-MM.",
                    f"Name the month with the highest {m} in the whole of the data, as YYYY-MM."))


def _segment(w: Words, group_column: str, label: str) -> str:
    """A group as words ("the web sales channel"); the dictionary says which stored value it is."""
    return f"the {w.sem.value(label, w.table, group_column)} {w.col(group_column)}"


def group_period_total(w: Words, column: str, group_column: str, label: str, month: dt.date,
                       decimals: int) -> Wording:
    m = w.measure(column)
    seg = _segment(w, group_column, label)
    mon, tail = month_words(month), w.rounded(decimals)
    return Wording((f"What was the {m} from {seg} in {mon}?{tail}", f"In {mon}, how much {m} came from {seg}?"
                    f"{tail}", f"Give the {m} of {seg} for {mon}.{tail}"))


def group_total(w: Words, column: str, group_column: str, label: str, first: dt.date, last: dt.date,
                decimals: int) -> Wording:
    m = w.measure(column)
    seg = _segment(w, group_column, label)
    span, tail = span_words(first, last), w.rounded(decimals)
    return Wording((f"What was the {m} from {seg} {span}?{tail}", f"How much of the {m} {span} came from {seg}?{tail}",
                    f"Give the {m} of {seg} over the whole period {span}.{tail}"))


def rate(w: Words, flag: str, month: dt.date) -> Wording:
    f, mon = w.col(flag), month_words(month)
    return Wording((f"What share of {w.many} in {mon} were {f}? Give the fraction to 4 decimal places.",
                    f"In {mon}, what fraction of {w.many} were {f}? Answer to 4 decimal places.",
                    f"What was the rate of {f} {w.many} in {mon}, as a fraction to 4 decimal places?"))


def flagged_count(w: Words, flag: str, month: dt.date) -> Wording:
    f, mon = w.col(flag), month_words(month)
    return Wording((f"How many {w.many} in {mon} were {f}?", f"In {mon}, how many {w.many} were {f}?",
                    f"Count the {w.many} of {mon} that were {f}."))


def ledger_balance(w: Words, group_column: str, debit: str, credit: str) -> Wording:
    e = w.col(group_column)
    es, d, c = plural_of(e), w.col(debit), w.col(credit)
    together = f", the {w.many} with no {e} counting together as one {e}"
    return Wording((f"How many {es} do not balance, their total {d} differing from their total {c}{together}?",
                    f"Count the {es} whose {d} and {c} do not net to zero{together}.",
                    f"How many unbalanced {es} are there among the {w.many}{together}?"))


def trial_balance(w: Words, debit: str, credit: str, decimals: int) -> Wording:
    d, c, tail = w.col(debit), w.col(credit), w.rounded(decimals)
    return Wording((f"What is the trial balance of the {w.many}, total {d} minus total {c}?{tail}",
                    f"Over all {w.many}, what is the total {d} minus the total {c}?{tail}",
                    f"By how much does the total {d} exceed the total {c} across the {w.many}?{tail}"))


def waterfall_net(w: Words, amount: str, month: dt.date, decimals: int) -> Wording:
    a, mon, tail = w.col(amount), month_words(month), w.rounded(decimals)
    return Wording((f"What was the net {a} of the {w.many} in {mon}?{tail}",
                    f"In {mon}, what do the {w.many} add up to, each {a} with its sign?{tail}",
                    f"Give the net change from {w.many} in {mon}.{tail}"))


def waterfall_component(w: Words, amount: str, type_column: str, kind: str, month: dt.date, decimals: int,
                        signed: bool = True) -> Wording:
    a, k, mon = w.col(amount), w.sem.value(kind, w.table, type_column), month_words(month)
    # one reading of an outflow's total: with its sign, or its size as stored
    tail = (" An amount that takes from the balance counts as negative." if signed else
            " Give it as the amounts are stored (every amount positive).") + w.rounded(decimals)
    return Wording((f"What was the total {a} of {k} {w.many} in {mon}?{tail}",
                    f"In {mon}, how much {a} came from {k} {w.many}?{tail}",
                    f"Give the {k} {a} for {mon}.{tail}"))


def waterfall_ending(w: Words, start: str, first: dt.date, month: dt.date, decimals: int) -> Wording:
    mon, opening, tail = month_words(month), month_words(first), w.rounded(decimals)
    return Wording((f"Starting from a balance of {start} before {opening}, what is the balance at the end of "
                    f"{mon}?{tail}",
                    f"With an opening balance of {start} at the start of {opening}, what is the closing balance of "
                    f"{mon}?{tail}",
                    f"What is the closing balance at the end of {mon}, given {start} at the start of {opening}?"
                    f"{tail}"))


def fk_orphans(child: Words, parent: Words) -> Wording:
    return Wording((f"How many {child.many} name {article(parent.one)} that is not on record?",
                    f"Count the {child.many} whose recorded {parent.one} is missing from the {parent.many} on record.",
                    f"How many {child.many} point to {article(parent.one)} no longer on record?"))


def fk_nulls(child: Words, parent: Words) -> Wording:
    # no key at all, as against a key naming a parent that is gone (fk_orphans): one reading each
    return Wording((f"How many {child.many} have no {parent.one} recorded at all?",
                    f"Count the {child.many} with no {parent.one} recorded.",
                    f"How many {child.many} leave their {parent.one} empty?"))
