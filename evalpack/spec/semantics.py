"""Business words for a schema: what questions call its tables, columns, values and measures.

The spec's optional ``semantics:`` key names them (SPEC_FORMAT.md); every name it leaves out is
derived from the identifier, so that a question never shows a raw identifier: ``ordered_at`` reads
"ordered date", ``customer_id`` "customer", ``small_business`` "small business", a table ``orders``
"order" / "orders", the sum of ``orders.amount`` "total amount of orders".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a time column named <verb>_at / <verb>_on reads as "<noun> date"
PARTICIPLES = {
    "ordered": "order", "created": "creation", "updated": "update", "signed": "sign-up", "sold": "sale",
    "shipped": "shipping", "paid": "payment", "booked": "booking", "opened": "opening", "closed": "closing",
    "posted": "posting", "placed": "order", "registered": "registration", "joined": "joining",
    "purchased": "purchase", "invoiced": "invoice", "delivered": "delivery", "started": "start", "ended": "end",
}
TIME_SUFFIXES = ("at", "on", "date", "time", "ts")


def words(identifier: str) -> str:
    """An identifier as words: underscores become spaces (``small_business`` -> "small business")."""
    return " ".join(part for part in identifier.split("_") if part)


def singular_of(plural: str) -> str:
    if plural.endswith("ies") and len(plural) > 3:
        return plural[:-3] + "y"
    if plural.endswith(("sses", "xes", "ches", "shes")):
        return plural[:-2]
    if plural.endswith("s") and not plural.endswith("ss"):
        return plural[:-1]
    return plural


def plural_of(singular: str) -> str:
    if singular.endswith("y") and singular[-2:-1] not in "aeiou":
        return singular[:-1] + "ies"
    if singular.endswith(("s", "x", "ch", "sh")):
        return singular + "es"
    return singular + "s"


def column_words(column: str) -> str:
    """The default business name of a column (see the module docstring)."""
    parts = [p for p in column.split("_") if p]
    if len(parts) > 1 and parts[-1] in TIME_SUFFIXES:
        head = parts[:-1]
        if len(head) == 1 and head[0] in PARTICIPLES:
            return f"{PARTICIPLES[head[0]]} date"
        if len(head) == 2 and head[0] in PARTICIPLES and head[1] == "up":
            return f"{PARTICIPLES[head[0]]} date"
        return " ".join(head) + " date"
    if len(parts) > 1 and parts[-1] == "id":
        return " ".join(parts[:-1])
    if len(parts) > 1 and parts[0] in ("is", "has"):
        return " ".join(parts[1:])
    return " ".join(parts)


def article(word: str) -> str:
    """``a``/``an`` before ``word``, by how it is said: an order, a user, a unit, a one-off, an hour."""
    first = word.split()[0] if word.split() else word
    if len(first) > 1 and first.isupper():  # an initialism is said letter by letter: an MRR, an SKU, a KPI
        spoken_vowel = first[0] in "AEFHILMNORSX"
    else:
        spoken_vowel = word[:1].lower() in "aeiou"
        if spoken_vowel and _SAID_WITH_CONSONANT.match(word) or not spoken_vowel and _SILENT_H.match(word):
            spoken_vowel = not spoken_vowel
    return f"an {word}" if spoken_vowel else f"a {word}"


# words spelled with a vowel but said with a consonant ("you", "w"), and the h that is not said
_SAID_WITH_CONSONANT = re.compile(r"(?:uni(?![mnd])|use|usa|usu|uti|ubi|uku|ura|ure|uri|uro|eu|ewe|one\b|once)",
                                  re.IGNORECASE)
_SILENT_H = re.compile(r"(?:hour|honest|honor|honour|heir)", re.IGNORECASE)


@dataclass(frozen=True)
class TableWords:
    singular: str
    plural: str
    description: str | None = None  # what one row is, when the spec says more than its name


@dataclass(frozen=True)
class ColumnNote:
    """What the dictionary says of a column beyond its name: a description, a unit, what each stored value stands
    for (``values``: stored value -> meaning)."""

    description: str | None = None
    unit: str | None = None
    values: tuple[tuple[str, str], ...] = ()


#: The pack's conventions (``semantics.conventions``): each key, its default and the values it takes.
CONVENTIONS = {
    "week_starts": ("monday", ("monday", "sunday")),
    "month_label": ("YYYY-MM", ("YYYY-MM",)),
    "percent": ("percent", ("percent", "fraction")),
    "rounding": ("cents", ("cents",)),
    "time_zone": ("as stored", None),  # None: any name (an IANA zone, or "as stored")
    "unknown_parent": ("no_group", ("no_group",)),
}


@dataclass(frozen=True)
class Conventions:
    """How the pack's questions read, stated once in its dictionary (``semantics.conventions``)."""

    week_starts: str = "monday"
    month_label: str = "YYYY-MM"
    percent: str = "percent"
    rounding: str = "cents"
    time_zone: str = "as stored"
    unknown_parent: str = "no_group"


@dataclass(frozen=True)
class Measure:
    """A named measure: ``sum`` of ``table.column``, or ``count`` of ``table``'s rows."""

    name: str
    kind: str  # sum | count
    table: str
    column: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Semantics:
    """The business words of one spec (``semantics:``), with defaults derived from the identifiers."""

    tables: tuple[tuple[str, TableWords], ...] = ()
    columns: tuple[tuple[str, str], ...] = ()  # ("orders.ordered_at", "order date")
    measures: tuple[Measure, ...] = ()
    currency: str | None = None
    synonyms: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a business word -> other words for it
    notes: tuple[tuple[str, ColumnNote], ...] = ()  # ("orders.status", ColumnNote(values=(("1", "placed"), ...)))
    terms: tuple[tuple[str, str], ...] = ()  # a business term -> its definition in words
    conventions: Conventions = Conventions()

    def note(self, table: str, column: str) -> ColumnNote:
        """What the spec says of a column beyond its name (an empty note when nothing)."""
        return dict(self.notes).get(f"{table}.{column}", ColumnNote())

    def table(self, name: str) -> TableWords:
        """What a table's rows are called (``orders`` -> order / orders)."""
        given = dict(self.tables).get(name)
        if given is not None:
            return given
        text = words(name)
        singular = singular_of(text)
        return TableWords(singular, text if singular != text else plural_of(text))

    def column(self, table: str, column: str) -> str:
        """What a column is called (``orders.ordered_at`` -> "order date" unless the spec says otherwise)."""
        return dict(self.columns).get(f"{table}.{column}") or column_words(column)

    def value(self, value: str, table: str | None = None, column: str | None = None) -> str:
        """A categorical value as words: its meaning when the spec gives one (``semantics.columns.*.values``),
        else the value's words (``small_business`` -> "small business")."""
        if table is not None and column is not None:
            meaning = dict(self.note(table, column).values).get(value)
            if meaning:
                return meaning
        return words(value)

    def sum_measure(self, table: str, column: str) -> str:
        """The name of the sum of ``table.column`` ("revenue" when declared; else "total amount of orders")."""
        for m in self.measures:
            if m.kind == "sum" and (m.table, m.column) == (table, column):
                return m.name
        return f"total {self.column(table, column)} of {self.table(table).plural}"

    def count_measure(self, table: str) -> str | None:
        """The declared name of the count of ``table``'s rows, if any."""
        return next((m.name for m in self.measures if m.kind == "count" and m.table == table), None)

    def alternatives(self, word: str) -> tuple[str, ...]:
        """The synonyms declared for a business word (for paraphrases)."""
        return dict(self.synonyms).get(word, ())

    def money(self, decimals: int) -> str:
        """How a rounded amount is asked for ("in EUR, to the cent" / "to 2 decimal places")."""
        if self.currency and decimals == 2:
            return f"in {self.currency}, to the cent"
        if self.currency:
            return f"in {self.currency}, to {decimals} decimal places" if decimals else f"in whole {self.currency}"
        return f"to {decimals} decimal places" if decimals else "as a whole number"
