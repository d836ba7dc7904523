"""The pack's data dictionary, derived from the spec alone: what one row of each table is, what each column
means (its unit or format, what each stored value stands for, what it refers to), the measures and business
terms in words, and the conventions every question shares (what a month is, how a month is written, rounding,
how a row whose parent is unknown counts).

It is BIRD's database description with the conventions added: questions are complete under it, so that their
``evidence`` holds only what no dictionary says (``PACK_FORMAT.md``). The pack ships it as ``dictionary.json``
(:meth:`Dictionary.as_json`) and ``dictionary.md`` (:meth:`Dictionary.markdown`); the exports and ``evalpack
serve`` read the same object. Misata-format specs, which have no ``semantics``, get every entry from the
identifiers (:mod:`evalpack.spec.semantics`).
"""

from __future__ import annotations

from dataclasses import dataclass

from evalpack.spec.model import Column, Spec, Table
from evalpack.spec.semantics import article, words
from evalpack.spec.units import to_units

FORMAT = "evalpack-dictionary/1"

TEXT_KINDS = {
    "name": "a person's name", "first_name": "a person's first name", "last_name": "a person's last name",
    "email": "an email address", "company": "a company name", "city": "a city name", "word": "a word",
    "sentence": "free text", "uuid": "a UUID", "username": "a user name",
}


@dataclass(frozen=True)
class ColumnEntry:
    """One column: its identifier, what questions call it, its type in words, what it means, its unit, what each
    stored value stands for, and the column it refers to."""

    name: str
    label: str
    type: str
    description: str
    unit: str | None = None
    values: tuple[tuple[str, str], ...] = ()
    refers_to: str | None = None

    def as_json(self) -> dict:
        return {"name": self.name, "label": self.label, "type": self.type, "description": self.description,
                "unit": self.unit, "values": [{"value": v, "meaning": m} for v, m in self.values] or None,
                "refers_to": self.refers_to}


@dataclass(frozen=True)
class TableEntry:
    name: str
    row: str  # what one row is ("one order")
    description: str | None
    columns: tuple[ColumnEntry, ...]

    def as_json(self) -> dict:
        return {"name": self.name, "row": self.row, "description": self.description,
                "columns": [c.as_json() for c in self.columns]}


@dataclass(frozen=True)
class Definition:
    """A measure or a business term: its name and its meaning in words."""

    name: str
    definition: str

    def as_json(self) -> dict:
        return {"name": self.name, "definition": self.definition}


@dataclass(frozen=True)
class Dictionary:
    pack: str
    tables: tuple[TableEntry, ...]
    measures: tuple[Definition, ...]
    terms: tuple[Definition, ...]
    conventions: tuple[Definition, ...]

    def table(self, name: str) -> TableEntry | None:
        return next((t for t in self.tables if t.name == name), None)

    def as_json(self) -> dict:
        return {"format": FORMAT, "pack": self.pack, "tables": [t.as_json() for t in self.tables],
                "measures": [m.as_json() for m in self.measures], "terms": [t.as_json() for t in self.terms],
                "conventions": [c.as_json() for c in self.conventions]}

    def conventions_text(self) -> str:
        return "\n".join(f"- **{c.name}**: {c.definition}" for c in self.conventions)

    def markdown(self) -> str:
        """The dictionary for people: the conventions, the measures and terms, then a table per table."""
        out = [f"# Data dictionary: {self.pack}", "", "## Conventions", "", self.conventions_text(), ""]
        for title, entries in (("Measures", self.measures), ("Terms", self.terms)):
            if entries:
                out += [f"## {title}", "", *(f"- **{e.name}**: {e.definition}" for e in entries), ""]
        for t in self.tables:
            out += [f"## Table `{t.name}`", "", f"One row is {t.row}." + (f" {sentence(t.description)}" if t.description else ""),
                    "", "| column | called | type | meaning |", "|---|---|---|---|"]
            for c in t.columns:
                meaning = column_meaning(c.as_json())
                out.append(f"| `{c.name}` | {c.label} | {c.type} | {meaning.replace('|', '/')} |")
            out.append("")
        return "\n".join(out)


def column_meaning(entry: dict) -> str:
    """A column's meaning in one line, from its ``dictionary.json`` entry: its description, unit and what each
    stored value stands for where the meaning says more than the value (the card, dictionary.md, the manifest's
    ``semantics`` and the exports' descriptions read it)."""
    parts = [str(entry.get("description") or "")]
    if entry.get("unit") and str(entry["unit"]) not in parts[0]:
        parts.append(f"in {entry['unit']}")
    parts += [f"{v['value']} means {v['meaning']}" for v in entry.get("values") or [] if v["meaning"] != v["value"]]
    return "; ".join(p for p in parts if p)


def sentence(text: str) -> str:
    """``text`` with its first letter raised (an initialism keeps its capitals: "an MRR movement")."""
    return text[:1].upper() + text[1:]


def build_dictionary(spec: Spec) -> Dictionary:
    """The dictionary of ``spec`` (pure: same spec, same dictionary)."""
    tables = tuple(_table_entry(spec, t) for t in spec.tables)
    return Dictionary(spec.name, tables, _measures(spec), _terms(spec), _conventions(spec))


# --------------------------------------------------------------------------- tables and columns


def _table_entry(spec: Spec, table: Table) -> TableEntry:
    names = spec.semantics.table(table.name)
    return TableEntry(table.name, f"one {names.singular}", names.description,
                      tuple(_column_entry(spec, table, c) for c in table.columns))


def _parent_of(spec: Spec, table: str, column: str):
    return next((r for r in spec.relationships if (r.child_table, r.child_column) == (table, column)), None)


def _column_entry(spec: Spec, table: Table, c: Column) -> ColumnEntry:
    sem = spec.semantics
    note = sem.note(table.name, c.name)
    one = sem.table(table.name).singular
    label = sem.column(table.name, c.name)
    rel = _parent_of(spec, table.name, c.name)
    refers_to = f"{rel.parent_table}.{rel.parent_column}" if rel else None
    unit = note.unit or (sem.currency if _is_money(spec, table.name, c.name) else None)
    values: tuple[tuple[str, str], ...] = ()
    movements = _movement_meanings(spec, table.name, c.name)
    coded = spec.traps.coded(table.name, c.name)
    if coded is not None:  # the stored codes, each with the label questions use
        values = tuple((str(code), label) for label, code in coded.book)
    elif c.type == "categorical":
        given = dict(note.values) | movements
        values = tuple((v, given.get(v) or words(v)) for v in c.choices)
    elif movements:  # a text column a waterfall's types are written in
        values = tuple(movements.items())
    elif note.values:
        values = note.values
    described = note.description or _default_description(spec, table, c, one, label, rel)
    kind = "whole number (a code; what each stands for is listed)" if coded else _type_words(c, rel is not None)
    return ColumnEntry(c.name, label, kind, described, unit, values, refers_to)


def waterfall_signed(amount: Column) -> bool:
    """Whether a waterfall's outflows are stored negative: its amount column may hold a negative amount at its
    decimals. A min of 0 or more stores every amount positive, its type giving its direction (as Misata writes
    them); the plan (evalpack.data.plan) and the dictionary both ask this."""
    return amount.min is None or to_units(amount.min, amount.decimals) < 0


def _movement_meanings(spec: Spec, table: str, column: str) -> dict[str, str]:
    """A waterfall's movement types, each saying whether it adds to the balance or takes from it."""
    fall = next((w for w in spec.waterfalls if w.table == table and w.type_column == column), None)
    if fall is None:
        return {}
    given = dict(spec.semantics.note(table, column).values)
    return {**{k: given.get(k) or "an inflow, adding to the balance" for k, _ in fall.inflow_shares},
            **{k: given.get(k) or "an outflow, taking from the balance" for k, _ in fall.outflow_shares}}


def _type_words(c: Column, is_key: bool) -> str:
    if is_key or c.type == "foreign_key":
        return "key"
    if c.type == "int":
        return "whole number"
    if c.type == "float":
        return f"number with {c.decimals} decimals" if c.decimals else "number"
    return {"text": "text", "categorical": "text (one of the values listed)", "boolean": "true or false",
            "date": "date", "datetime": "date and time"}[c.type]


def _is_money(spec: Spec, table: str, column: str) -> bool:
    """A column whose sums questions ask for in the currency: a curve's, a group or segment share's, a
    waterfall's amount or a ledger's debit and credit."""
    summed = {(c.table, c.column) for c in spec.outcome_curves}
    summed |= {(w.table, w.amount_column) for w in spec.waterfalls}
    summed |= {(g.table, g.debit_column) for g in spec.ledgers} | {(g.table, g.credit_column) for g in spec.ledgers}
    summed |= {(m.table, m.column) for m in spec.semantics.measures if m.kind == "sum"}
    return (table, column) in summed


def _default_description(spec: Spec, table: Table, c: Column, one: str, label: str, rel) -> str:
    """What a column holds, in words: its kind of value, what it refers to or identifies, and its notes (unique,
    may be null). Nothing a declaration fixes as an answer (no target, share, rate, orphan or null count)."""
    sem = spec.semantics
    what = {"int": "a whole number", "boolean": f"whether the {one} is {label}: true or false",
            "date": "a calendar date (no time)", "datetime": "a date and time",
            "categorical": "one of " + ", ".join(c.choices),
            "text": TEXT_KINDS.get(c.text_type or "", "text")}.get(c.type, c.type)
    if c.type == "float":
        what = (f"an amount in {sem.currency}, to the cent" if sem.currency and c.decimals == 2
                and _is_money(spec, table.name, c.name) else f"a number with {c.decimals} decimals")
    if c.type == "text" and c.name == _dated_by(spec, table.name):
        what = "a month, written YYYY-MM"
    if rel is not None:
        parent = sem.table(rel.parent_table)
        what = f"points at {article(parent.singular)} ({rel.parent_table}.{rel.parent_column})"
        if rel.orphans:
            what += f"; some name {article(parent.singular)} no longer on record"
    elif c.type == "int" and c.unique:
        what = f"identifies {article(one)}"
    fall = next((w for w in spec.waterfalls if w.table == table.name and w.amount_column == c.name), None)
    if fall is not None:
        kind = sem.column(table.name, fall.type_column)
        what += ("; positive when it adds to the balance, negative when it takes from it"
                 if waterfall_signed(c) else
                 f"; always stored positive: its {kind} says whether it adds to the balance or takes from it")
    sibling = spec.traps.sibling(table.name, c.name)
    if sibling is not None:
        what = (f"another amount of the {one}, in the same unit as its {sem.column(table.name, sibling.of)} but "
                "not it")
    if spec.traps.coded(table.name, c.name):
        what = "a code"
    notes = ["unique"] if c.unique else []
    if c.nullable or (rel is not None and rel.nulls):
        notes.append("may be null")
    return "; ".join([what, *notes])


# --------------------------------------------------------------------------- measures, terms, conventions


def _measures(spec: Spec) -> tuple[Definition, ...]:
    """Each measure a question names: the declared ones, and the sum behind every curve without one."""
    sem = spec.semantics
    out: dict[str, str] = {}
    for m in sem.measures:
        out[m.name] = m.description or _measure_words(spec, m.kind, m.table, m.column)
    for c in spec.outcome_curves:
        name = sem.sum_measure(c.table, c.column)
        out.setdefault(name, _measure_words(spec, "sum", c.table, c.column))
        count = sem.count_measure(c.table) or f"number of {sem.table(c.table).plural}"
        out.setdefault(count, _measure_words(spec, "count", c.table, None))
    return tuple(Definition(name, text) for name, text in out.items())


def _dated_by(spec: Spec, table: str) -> str | None:
    """The column that puts a row of ``table`` in a month for the questions (a curve's, a rate's or a
    waterfall's time column)."""
    for decl in (*spec.outcome_curves, *spec.rate_curves):
        if decl.table == table:
            return decl.time_column
    return next((w.period_column for w in spec.waterfalls if w.table == table), None)


def _measure_words(spec: Spec, kind: str, table: str, column: str | None) -> str:
    sem = spec.semantics
    names = sem.table(table)
    dated = _dated_by(spec, table)
    when = (f" A month's figure counts the {names.plural} whose {sem.column(table, dated)} falls in that month."
            if dated else "")
    if kind == "count":
        counted = " that count (see the conventions)" if spec.traps.excluded(table) else ""
        return f"How many {names.plural}{counted} there are; each {names.singular} counts once.{when}"
    money = f", in {sem.currency}" if sem.currency else ""
    if spec.traps.excluded(table):
        when = f" Only the {names.plural} that count (see the conventions)." + when
    return (f"The total {sem.column(table, column)} of the {names.plural}{money}; {article(names.singular)} with no "
            f"{sem.column(table, column)} adds nothing.{when}")


def _terms(spec: Spec) -> tuple[Definition, ...]:
    """The spec's own terms, then the terms the question families use, each in words."""
    sem = spec.semantics
    out = dict(sem.terms)
    for w in spec.waterfalls:
        names, amount = sem.table(w.table), sem.column(w.table, w.amount_column)
        inflows = ", ".join(sem.value(k, w.table, w.type_column) for k, _ in w.inflow_shares)
        out.setdefault(f"net {amount}", f"For a month: the {amount} of its {names.plural} that add to the balance "
                                        f"({inflows}) minus those that take from it (the other types).")
        out.setdefault("closing balance", f"The balance at the end of a month: the opening balance a question gives "
                                          f"plus the net {amount} of every month from the opening through that month.")
    for g in spec.ledgers:
        names = sem.table(g.table)
        debit, credit = sem.column(g.table, g.debit_column), sem.column(g.table, g.credit_column)
        group = " and ".join(sem.column(g.table, col) for col in g.group_by)
        out.setdefault("balanced", f"A {group} balances when the total {debit} of its {names.plural} equals their "
                                   f"total {credit}; the {names.plural} with no {group} recorded count together "
                                   f"as one {group}.")
        out.setdefault("trial balance", f"The total {debit} minus the total {credit} over all {names.plural}.")
    return tuple(Definition(name, text) for name, text in out.items())


def _which_dates(spec: Spec) -> list[tuple[str, str]]:
    """Per table the questions put in months: the date that places one of its rows in a month."""
    out = []
    for t in spec.tables:
        dated = _dated_by(spec, t.name)
        if dated:
            names = spec.semantics.table(t.name)
            said = spec.semantics.column(t.name, dated)
            column = t.column(dated)
            covered = (f" The {names.plural} cover {said}s from {column.start:%B %Y} through {column.end:%B %Y}: a "
                       "period outside that is not in the data, and a question about it cannot be answered from it."
                       if column.start and column.end else "")
            out.append((f"month of {article(names.singular)}",
                        f"{sentence(article(names.singular))} falls in the month of its {said}, unless a question "
                        f"names another date.{covered}"))
    return out


def _not_counted(spec: Spec) -> list[tuple[str, str]]:
    """Per table with rows that do not count (``traps.not_counted``): which they are, and that no figure counts them."""
    sem, out = spec.semantics, []
    for t in spec.tables:
        traps = spec.traps.excluded(t.name)
        if not traps:
            continue
        names = sem.table(t.name)
        marks = []
        for trap in traps:
            said = sem.column(t.name, trap.column)
            if trap.values == ("true",):
                marks.append(f"whose {said} is true")
            else:
                meant = [dict(sem.note(t.name, trap.column).values).get(v) or words(v) for v in trap.values]
                marks.append(f"whose {said} is " + " or ".join(meant))
        out.append((f"{names.plural} that count",
                    f"{sentence(names.plural.capitalize())} {' and those '.join(marks)} are in the table but do not "
                    f"count: no figure a question asks for includes them (totals, counts, shares, rankings, a "
                    f"parent's {names.plural}), unless the question asks about them by name."))
    return out


def _conventions(spec: Spec) -> tuple[Definition, ...]:
    sem, conv = spec.semantics, spec.semantics.conventions
    money = (f"Money is in {sem.currency}" if sem.currency else "Money is in the unit the data holds")
    out = [
        ("month", "A month is a calendar month, from its first day through its last. A question about a month "
                  "covers every row whose date falls in it; \"from January 2025 through March 2025\" includes both "
                  "end months; Q1 is January to March, H1 January to June, a year January to December."),
        *_which_dates(spec),
        *_not_counted(spec),
        ("month in an answer", f"Written {conv.month_label}: 2025-03 for March 2025."),
        ("week", f"A week starts on {conv.week_starts.capitalize()}."),
        ("shares", "A share asked in percent is out of 100 (12.5 means 12.5%); one asked as a fraction is between "
                   "0 and 1." + (" When a question does not say, percent." if conv.percent == "percent" else
                                 " When a question does not say, a fraction.")),
        ("rounding", f"{money}, rounded to the cent (2 decimals) unless a question says otherwise; other figures to "
                     "the decimals a question gives. Round the final figure only."),
        ("unknown parent", "A row whose parent is unknown (none recorded, or one missing from its table) belongs "
                           "to no group of that parent: it counts in totals over all rows, and in no group's."),
        ("time zone", "Dates and times are read as stored." if conv.time_zone == "as stored" else
         f"Business days and months are those of {conv.time_zone}."),
        ("answer layout", "A question that asks for several figures per line wants them in the order it names "
                          "them; a list it asks to be ordered is compared in that order, any other in any order."),
    ]
    return tuple(Definition(name, text) for name, text in out)
