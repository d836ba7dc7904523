"""How questions are worded: an analyst's words from the spec's semantics, several phrasings of each
question, and the evidence (BIRD's sense: the definitions a reader needs) that makes each one exact.

A question's text never shows a raw identifier or SQL phrasing ("rows", "strictly before", "= 'web'");
the identifiers, literals and exact windows go in its ``evidence``, so a harness can run with or
without it. Which phrasing a question uses is chosen from the pack's seed; the others are kept as its
``paraphrases``, and every phrasing asks the same thing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from evalpack.data.plan import stable_int
from evalpack.spec.semantics import Semantics, article, plural_of  # noqa: F401 - article: the families' name for it

#: Words that give away SQL instead of asking a business question (tests/questions/test_phrasing.py checks them).
SQL_PHRASING = ("rows", "row ", "strictly", "on or after", "= '", "null", "true", "false", "select ", "sum(",
                "count(", "where ")


@dataclass(frozen=True)
class Wording:
    """Every phrasing of one question and the evidence that defines its terms."""

    phrasings: tuple[str, ...]
    evidence: str

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

    def window(self, time_column: str, start: dt.date, end: dt.date, what: str, time_type: str = "date") -> str:
        """Evidence for a period: which dates of which column it covers, end excluded (a text period column:
        which of its 'YYYY-MM' labels)."""
        if time_type == "text":
            return (f"{what} means {self.col(time_column)} ({self.table}.{time_column}, a 'YYYY-MM' label) from "
                    f"'{start:%Y-%m}' up to but not including '{end:%Y-%m}'")
        return (f"{what} means {self.col(time_column)} ({self.table}.{time_column}) from {start.isoformat()} up to "
                f"but not including {end.isoformat()}")

    def measure(self, column: str) -> tuple[str, str]:
        """(the measure's name, its definition) for the sum of ``column``."""
        name = self.sem.sum_measure(self.table, column)
        unit = f", in {self.sem.currency}" if self.sem.currency else ""
        return name, f"{name} is the sum of {self.table}.{column}{unit}"

    def rounded(self, decimals: int) -> str:
        return f" Answer {self.sem.money(decimals)}."

    def rounding_evidence(self, decimals: int) -> str:
        return f"round to {decimals} decimal places" if decimals else "a whole number"


def join(*parts: str) -> str:
    """Evidence clauses as one sentence."""
    return "; ".join(p for p in parts if p) + "."


def with_synonyms(semantics: Semantics, word: str, phrasings: tuple[str, ...]) -> tuple[str, ...]:
    """The phrasings, plus one per declared synonym of ``word``: the first phrasing whose verb does not agree
    with ``word`` ("what was the revenue" would read "what was the sales"), reworded."""
    agreeing = [p for p in phrasings if word in p and not any(f"{verb} the {word}" in p for verb in ("was", "is"))]
    base = agreeing[0] if agreeing else phrasings[0]
    return phrasings + tuple(base.replace(word, alt, 1) for alt in semantics.alternatives(word) if word in base)


def period_total(w: Words, column: str, time_column: str, month: dt.date, nxt: dt.date, decimals: int) -> Wording:
    m, defined = w.measure(column)
    mon = month_words(month)
    tail = w.rounded(decimals)
    return Wording(with_synonyms(w.sem, m, (f"What was the {m} in {mon}?{tail}", f"Give the {m} for {mon}.{tail}",
                                            f"For {mon}, what is the {m}?{tail}")),
                   join(defined, w.window(time_column, month, nxt, mon), w.rounding_evidence(decimals)))


def period_rows(w: Words, time_column: str, month: dt.date, nxt: dt.date) -> Wording:
    mon, t = month_words(month), w.col(time_column)
    count = w.sem.count_measure(w.table) or f"number of {w.many}"
    return Wording((f"How many {w.many} have {article(t)} in {mon}?", f"What was the {count} in {mon}?",
                    f"Count the {w.many} whose {t} falls in {mon}."),
                   join(w.window(time_column, month, nxt, mon), f"each {w.one} counts once"))


def grand_total(w: Words, column: str, time_column: str, first: dt.date, last: dt.date, end: dt.date,
                decimals: int) -> Wording:
    m, defined = w.measure(column)
    span, tail = span_words(first, last), w.rounded(decimals)
    return Wording(with_synonyms(w.sem, m, (f"What was the {m} {span}?{tail}",
                                            f"Give the {m} for the whole period {span}.{tail}",
                                            f"Taking every month {span} together, what is the {m}?{tail}")),
                   join(defined, w.window(time_column, first, end, "the period"), w.rounding_evidence(decimals)))


def peak_period(w: Words, column: str, time_column: str) -> Wording:
    m, defined = w.measure(column)
    return Wording((f"In which month was the {m} highest? Answer as YYYY-MM.",
                    f"Which month had the largest {m}? Give it as YYYY-MM.",
                    f"Name the month with the highest {m}, as YYYY-MM."),
                   join(defined, f"a month is a calendar month of {w.col(time_column)} ({w.table}.{time_column}), "
                         f"over every {w.one} in the table", "the answer is the month's year and number, e.g. 2025-03"))


def _segment(w: Words, group_column: str, label: str) -> tuple[str, str]:
    g, v = w.col(group_column), w.sem.value(label)
    return f"the {v} {g}", f"the {v} {g} means {w.table}.{group_column} = '{label}'"


def group_period_total(w: Words, column: str, time_column: str, group_column: str, label: str, month: dt.date,
                       nxt: dt.date, decimals: int) -> Wording:
    m, defined = w.measure(column)
    seg, seg_def = _segment(w, group_column, label)
    mon, tail = month_words(month), w.rounded(decimals)
    return Wording((f"What was the {m} from {seg} in {mon}?{tail}", f"In {mon}, how much of the {m} came from {seg}?"
                    f"{tail}", f"Give the {m} of {seg} for {mon}.{tail}"),
                   join(defined, seg_def, w.window(time_column, month, nxt, mon), w.rounding_evidence(decimals)))


def group_total(w: Words, column: str, time_column: str, group_column: str, label: str, first: dt.date,
                last: dt.date, end: dt.date, decimals: int) -> Wording:
    m, defined = w.measure(column)
    seg, seg_def = _segment(w, group_column, label)
    span, tail = span_words(first, last), w.rounded(decimals)
    return Wording((f"What was the {m} from {seg} {span}?{tail}", f"How much of the {m} {span} came from {seg}?{tail}",
                    f"Give the {m} of {seg} over the whole period {span}.{tail}"),
                   join(defined, seg_def, w.window(time_column, first, end, "the period"),
                         w.rounding_evidence(decimals)))


def rate(w: Words, flag: str, time_column: str, month: dt.date, nxt: dt.date) -> Wording:
    f, mon = w.col(flag), month_words(month)
    return Wording((f"What share of {w.many} in {mon} were {f}? Give the fraction to 4 decimal places.",
                    f"In {mon}, what fraction of {w.many} were {f}? Answer to 4 decimal places.",
                    f"What was the rate of {f} {w.many} in {mon}, as a fraction to 4 decimal places?"),
                   join(f"the share is the number of {w.many} with {w.table}.{flag} true divided by the number of "
                         f"all {w.many}", w.window(time_column, month, nxt, mon), "a fraction between 0 and 1"))


def flagged_count(w: Words, flag: str, time_column: str, month: dt.date, nxt: dt.date) -> Wording:
    f, mon = w.col(flag), month_words(month)
    return Wording((f"How many {w.many} in {mon} were {f}?", f"In {mon}, how many {w.many} were {f}?",
                    f"Count the {w.many} of {mon} that were {f}."),
                   join(f"{f} means {w.table}.{flag} is true", w.window(time_column, month, nxt, mon)))


def ledger_balance(w: Words, group_column: str, debit: str, credit: str) -> Wording:
    e = w.col(group_column)
    es, d, c = plural_of(e), w.col(debit), w.col(credit)
    return Wording((f"How many {es} do not balance, their total {d} differing from their total {c}?",
                    f"Count the {es} whose {d} and {c} do not net to zero.",
                    f"How many unbalanced {es} are there among the {w.many}?"),
                   join(f"{article(e)} is the set of {w.many} sharing one {w.table}.{group_column}, and the {w.many} "
                         f"without one count together as one {e}",
                         f"it balances when the sum of {w.table}.{debit} equals the sum of {w.table}.{credit}"))


def trial_balance(w: Words, debit: str, credit: str, decimals: int) -> Wording:
    d, c, tail = w.col(debit), w.col(credit), w.rounded(decimals)
    return Wording((f"What is the trial balance of the {w.many}, total {d} minus total {c}?{tail}",
                    f"Over all {w.many}, what is the total {d} minus the total {c}?{tail}",
                    f"By how much does the total {d} exceed the total {c} across the {w.many}?{tail}"),
                   join(f"the trial balance is the sum of {w.table}.{debit} minus the sum of {w.table}.{credit} "
                         f"over the whole table", w.rounding_evidence(decimals)))


def signed_amount(w: Words, amount: str, type_column: str, inflows: tuple[str, ...] | None = None) -> str:
    """Evidence for a waterfall whose amounts are all stored positive (``inflows``: the types that add to the
    balance): what its signed amount is. Empty where outflows are stored negative (``inflows`` None)."""
    if inflows is None:
        return ""
    return (f"every {w.table}.{amount} is stored positive: the signed {w.table}.{amount} is {w.table}.{amount} where "
            f"{w.table}.{type_column} is {' or '.join(repr(t) for t in inflows)} (an inflow) and minus "
            f"{w.table}.{amount} for any other {w.table}.{type_column}")


def waterfall_net(w: Words, amount: str, period: str, month: dt.date, nxt: dt.date, decimals: int,
                  type_column: str = "", inflows: tuple[str, ...] | None = None, time_type: str = "date") -> Wording:
    a, mon, tail = w.col(amount), month_words(month), w.rounded(decimals)
    return Wording((f"What was the net {a} of the {w.many} in {mon}?{tail}",
                    f"In {mon}, what do the {w.many} add up to, each {a} with its sign?{tail}",
                    f"Give the net change from {w.many} in {mon}.{tail}"),
                   join(f"the net is the sum of the signed {w.table}.{amount}" + (
                       " (inflows positive, outflows negative)" if inflows is None else ""),
                        signed_amount(w, amount, type_column, inflows), w.window(period, month, nxt, mon, time_type),
                        w.rounding_evidence(decimals)))


def waterfall_component(w: Words, amount: str, period: str, type_column: str, kind: str, month: dt.date,
                        nxt: dt.date, decimals: int, signed: bool = True, time_type: str = "date") -> Wording:
    a, k, mon, tail = w.col(amount), w.sem.value(kind), month_words(month), w.rounded(decimals)
    t = w.col(type_column)
    return Wording((f"What was the total {a} of {k} {w.many} in {mon}?{tail}",
                    f"In {mon}, how much {a} came from {k} {w.many}?{tail}",
                    f"Give the {k} {a} for {mon}.{tail}"),
                   join(f"{k} {w.many} are those whose {t} ({w.table}.{type_column}) is '{kind}'",
                        f"amounts are the signed {w.table}.{amount} (outflows negative)" if signed else
                        f"amounts are {w.table}.{amount} as stored (every amount positive)",
                        w.window(period, month, nxt, mon, time_type), w.rounding_evidence(decimals)))


def waterfall_ending(w: Words, amount: str, period: str, start: str, first: dt.date, month: dt.date, nxt: dt.date,
                     decimals: int, type_column: str = "", inflows: tuple[str, ...] | None = None,
                     time_type: str = "date") -> Wording:
    mon, opening, tail = month_words(month), month_words(first), w.rounded(decimals)
    return Wording((f"Starting from a balance of {start} before {opening}, what is the balance at the end of "
                    f"{mon}?{tail}",
                    f"With an opening balance of {start} at the start of {opening}, what is the closing balance of "
                    f"{mon}?{tail}",
                    f"What is the closing balance at the end of {mon}, given {start} at the start of {opening}?"
                    f"{tail}"),
                   join(f"the balance is {start} plus the sum of the signed {w.table}.{amount} of every {w.one} "
                        f"from the start of {opening} to the end of {mon}", signed_amount(w, amount, type_column, inflows),
                        w.window(period, first, nxt, "that span", time_type), w.rounding_evidence(decimals)))


def fk_orphans(child: Words, parent: Words, child_column: str, parent_column: str) -> Wording:
    return Wording((f"How many {child.many} refer to {article(parent.one)} that does not exist?",
                    f"Count the {child.many} whose {parent.one} is missing from the {parent.many}.",
                    f"How many {child.many} point to an unknown {parent.one}?"),
                   join(f"such {article(child.one)} has a {child.table}.{child_column} that is set but matches no "
                         f"{parent.table}.{parent_column}"))


def fk_nulls(child: Words, parent: Words, child_column: str) -> Wording:
    return Wording((f"How many {child.many} have no {parent.one}?", f"Count the {child.many} without {article(parent.one)}.",
                    f"How many {child.many} are not linked to any {parent.one}?"),
                   join(f"such {article(child.one)} has no {child.table}.{child_column} (it is NULL)"))
