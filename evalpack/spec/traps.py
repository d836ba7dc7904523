"""The reader of ``traps:``: sibling columns, rows that do not count and coded columns (SPEC_FORMAT.md, "traps").

Read in two steps: :func:`read_traps` before ``semantics`` (a sibling adds its column to its table, which the
dictionary then describes), :func:`bind_traps` after it (a coded column's code book is ``semantics.columns.*.values``
when given; the values that mark rows not counted are then read as labels or codes)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from evalpack.spec.declarations import _split_ref
from evalpack.spec.model import Coded, Column, NotCounted, Sibling, Table, Traps
from evalpack.spec.semantics import Semantics
from evalpack.spec.yamldoc import _keys, _Reader

TRAPS_KEYS = ("siblings", "not_counted", "codes")
SIBLING_KEYS = ("column", "of", "relation")
RELATIONS = ("times", "plus_days")  # a sibling's relation to its column: an amount's, a date's
NOT_COUNTED_KEYS = ("table", "share", "marked_by", "reason")


def _column(r: _Reader, tables: dict[str, Table], value: Any, path: tuple) -> tuple[Table, Column]:
    t, c = _split_ref(r, value, path)
    table = tables.get(t)
    col = table.column(c) if table is not None else None
    if col is None:
        raise r.err(path, f"unknown column {t}.{c}; write table.column of a declared column")
    return table, col


def read_traps(r: _Reader, raw: Any, tables: dict[str, Table]) -> tuple[Traps, dict[str, Table]]:
    """``traps:`` as declared, and ``tables`` with each sibling's column added to its table. Code books and
    marking values are bound later (:func:`bind_traps`)."""
    if raw is None:
        return Traps(), tables
    p = ("traps",)
    m = r.mapping(raw, p, TRAPS_KEYS, (), "traps key")
    tables = dict(tables)
    siblings = []
    for i, item in enumerate(r.sequence(m.get("siblings", []), p + ("siblings",))):
        sp = p + ("siblings", i)
        sm = r.mapping(item, sp, SIBLING_KEYS, (), "sibling key")
        table, of = _column(r, tables, r.required(sm, "of", sp), sp + ("of",))
        t, name = _split_ref(r, r.required(sm, "column", sp), sp + ("column",))
        r.ident(name, sp + ("column",), "column")
        if t != table.name:
            raise r.err(sp + ("column",), f"a sibling lives in the table of its column: write {table.name}.{name}")
        if table.column(name) is not None:
            raise r.err(sp + ("column",), f"{t}.{name} is already declared; a sibling trap adds its column itself, "
                                          "so name a new column (or remove it from tables)")
        rel = r.mapping(r.required(sm, "relation", sp), sp + ("relation",), RELATIONS, (), "relation")
        if len(rel) != 1:
            raise r.err(sp + ("relation",), "give the relation as {times: [low, high]} (an amount) or "
                                            "{plus_days: [low, high]} (a date)")
        (kind, raw_bounds), = rel.items()
        rp = sp + ("relation", kind)
        dated = kind == "plus_days"
        if dated and of.type not in ("date", "datetime"):
            raise r.err(sp + ("of",), f"{t}.{of.name} is {of.type}; plus_days follows a date or datetime column")
        if not dated and (of.type not in ("int", "float") or of.unique):
            raise r.err(sp + ("of",), f"{t}.{of.name} is not an amount a sibling can shadow: give a numeric column "
                                      "that is not a key (or plus_days for a date)")
        bounds = r.sequence(raw_bounds, rp)
        if len(bounds) != 2:
            raise r.err(rp, "expected [low, high]")
        if dated:
            low, high = (r.integer(b, rp + (j,), lo=0, hi=366) for j, b in enumerate(bounds))
            if not low <= high or high < 1:
                raise r.err(rp, f"[{low}, {high}] must be 0 <= low <= high with high at least 1: a sibling no day "
                                "later is the same date; try [0, 9]")
        else:
            low, high = (r.number(b, rp + (j,), lo=0.0, hi=100.0) for j, b in enumerate(bounds))
            signed = of.min is None or of.min < 0
            if not low <= high or (low <= 1.0 <= high) or (signed and low != high):
                raise r.err(rp, f"[{low:g}, {high:g}] must be low <= high and lie on one side of 1 (one factor, "
                                "low = high, for a column that may be negative): a factor of 1 copies the column, so a "
                                "query using the sibling could still give the right answer; try [1.07, 1.19]")
        siblings.append(Sibling(t, name, of.name, low, high, r.line(sp), kind))
        if dated:
            col = Column(name, of.type, r.line(sp), start=of.start, end=of.end, nullable=of.nullable)
        else:
            col = Column(name, "float" if of.decimals or of.type == "float" else "int", r.line(sp), min=None,
                         decimals=of.decimals, nullable=of.nullable)
        tables[t] = replace(table, columns=table.columns + (col,))
    not_counted = []
    for i, item in enumerate(r.sequence(m.get("not_counted", []), p + ("not_counted",))):
        np_ = p + ("not_counted", i)
        nm = r.mapping(item, np_, NOT_COUNTED_KEYS, (), "not_counted key")
        t = r.string(r.required(nm, "table", np_), np_ + ("table",))
        if t not in tables:
            raise r.err(np_ + ("table",), f"unknown table {t!r}")
        share = r.number(r.required(nm, "share", np_), np_ + ("share",), lo=0.0, hi=1.0)
        if share <= 0:
            raise r.err(np_ + ("share",), "a share above 0 is needed: rows that do not count must exist to be a trap")
        marked = r.mapping(r.required(nm, "marked_by", np_), np_ + ("marked_by",), _keys(nm["marked_by"]))
        if len(marked) != 1:
            raise r.err(np_ + ("marked_by",), "mark the rows by one column of the table: {table.column: [values]}")
        (ref, values), = marked.items()
        mp = np_ + ("marked_by", ref)
        table, col = _column(r, tables, ref, mp)
        if table.name != t:
            raise r.err(mp, f"mark rows of {t} by a column of {t} (a parent's flag is not built yet)")
        if col.type not in ("categorical", "boolean") or col.depends_on:
            raise r.err(mp, f"{t}.{col.name} is {col.type}; mark rows by a categorical column (its values) or a "
                            "boolean one (true)")
        if col.nullable:
            raise r.err(mp, f"{t}.{col.name} may be NULL (nullable); a marking column holds a value on every row, "
                            "so remove `nullable`")
        if col.type == "boolean":
            if values is not True:
                raise r.err(mp, "a boolean column marks the rows where it is true: write `true`")
            marks: tuple[str, ...] = ("true",)
        else:
            marks = tuple(str(v) for v in r.sequence(values, mp))
            if not marks:
                raise r.err(mp, "list the values that mark a row as not counted")
        reason = r.string(nm.get("reason", "not counted"), np_ + ("reason",))
        not_counted.append(NotCounted(t, col.name, marks, share, reason, r.line(np_)))
    codes = []
    for i, ref in enumerate(r.sequence(m.get("codes", []), p + ("codes",))):
        cp = p + ("codes", i)
        table, col = _column(r, tables, ref, cp)
        if col.type != "categorical" or col.depends_on:
            raise r.err(cp, f"{table.name}.{col.name} is {col.type}; codes store a categorical column's labels as "
                            "integers")
        codes.append(Coded(table.name, col.name, (), r.line(cp)))
    return Traps(tuple(siblings), tuple(not_counted), tuple(codes)), tables


def bind_traps(r: _Reader, traps: Traps, semantics: Semantics, tables: dict[str, Table]) -> Traps:
    """``traps`` with each coded column's code book and each marking column's values as labels, checked."""
    codes = []
    for i, coded in enumerate(traps.codes):
        cp = ("traps", "codes", i)
        col = tables[coded.table].column(coded.column)
        given = semantics.note(coded.table, coded.column).values
        if not given:
            book = tuple((label, n) for n, label in enumerate(col.choices, 1))
        else:
            vp = ("semantics", "columns", f"{coded.table}.{coded.column}", "values")
            book_list = []
            for stored, meaning in given:
                try:
                    book_list.append((meaning, int(stored)))
                except ValueError:
                    raise r.err(vp + (stored,), f"a coded column's stored values are integers; {stored!r} is not") from None
                if meaning not in col.choices:
                    raise r.err(vp + (stored,), f"{meaning!r} is not one of {coded.table}.{coded.column}'s choices "
                                                f"({', '.join(col.choices)})")
            missing = [c for c in col.choices if c not in dict(book_list)]
            if missing:
                raise r.err(vp, f"give a code to every choice; missing: {', '.join(missing)}")
            book = tuple(book_list)
        codes.append(replace(coded, book=book))
        if len({code for _, code in codes[-1].book}) != len(codes[-1].book):
            raise r.err(cp, "two labels share a code; give each its own")
    bound = replace(traps, codes=tuple(codes))
    not_counted = []
    for i, nc in enumerate(traps.not_counted):
        mp = ("traps", "not_counted", i, "marked_by", f"{nc.table}.{nc.column}")
        col = tables[nc.table].column(nc.column)
        if col.type == "boolean":
            not_counted.append(nc)
            continue
        coded = bound.coded(nc.table, nc.column)
        by_code = {str(code): label for label, code in coded.book} if coded else {}
        labels = tuple(by_code.get(v, v) for v in nc.values)
        wrong = [v for v in labels if v not in col.choices]
        if wrong:
            raise r.err(mp, f"{', '.join(map(repr, wrong))} is not a value of {nc.table}.{nc.column} (its choices: "
                            f"{', '.join(col.choices)})")
        if len(set(labels)) == len(col.choices):
            raise r.err(mp, "every value of the column marks a row as not counted; leave at least one for the rows "
                            "that count")
        not_counted.append(replace(nc, values=labels))
    return replace(bound, not_counted=tuple(not_counted))


def check_traps(r: _Reader, spec) -> None:
    """What the rest of the spec must leave to the traps: a marking column no declared fact reads, and a table of
    rows that do not count that no other table's keys point at, nor a ledger or waterfall keeps balanced."""
    facts = {(g.table, g.group_column) for g in spec.group_shares} | {(c.table, c.column) for c in spec.rate_curves}
    facts |= {(s.by_table, s.by_column) for s in spec.segment_shares} | {(c.table, c.column) for c in spec.outcome_curves}
    parents = {rel.parent_table for rel in spec.relationships}
    kept = {w.table for w in spec.waterfalls} | {ledger.table for ledger in spec.ledgers}
    for i, nc in enumerate(spec.traps.not_counted):
        path = ("traps", "not_counted", i)
        if (nc.table, nc.column) in facts:
            raise r.err(path + ("marked_by",), f"{nc.table}.{nc.column} carries a declared fact; mark the rows that "
                                               "do not count by a column of their own (a status, a flag)")
        if nc.table in parents:
            raise r.err(path + ("table",), f"other tables' keys point at {nc.table}; rows that do not count are built "
                                           "for tables no relationship has as parent")
        if nc.table in kept:
            raise r.err(path + ("table",), f"{nc.table} is a ledger's or waterfall's table, whose rows all count")
