"""The readers of each section of a spec: columns and their distributions, relationships, the declared facts
(curves, rates, shares, ledgers, waterfalls), semantics, questions, license, repo and exports."""

from __future__ import annotations

import datetime as dt
import difflib
import re
from dataclasses import replace
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from typing import Any

from evalpack.spec.grammar import (
    BRANCH_KEYS,
    COLUMN_KEYS,
    COLUMN_TYPES,
    CONSTRAINT_KEYS,
    CURVE_VALUE_KEYS,
    DEPENDENT_KEYS,
    DISTRIBUTION_ALIASES,
    DISTRIBUTION_KEYS,
    DISTRIBUTIONS,
    EXPORT_FORMATS,
    FAMILIES_KEYS,
    FIRST_DATE,
    HUB_LICENSES,
    LAST_DATE,
    MAX_MONTHS,
    MAX_TABLE_ROWS,
    MAX_UNITS,
    NEAR_MISS_GATES,
    NEAR_MISS_KEYS,
    NOTED_CURVE,
    PERIOD_RE,
    QUESTIONS_KEYS,
    REPO_ID_RE,
    SEMANTICS_KEYS,
    TEXT_TYPE_ALIASES,
    TEXT_TYPE_NAMES,
    TEXT_TYPES,
    TYPE_ALIASES,
    UNSUPPORTED_COLUMN,
    UNSUPPORTED_COLUMN_TYPES,
    UNSUPPORTED_CONSTRAINT,
    UNSUPPORTED_RELATIONSHIP,
)
from evalpack.spec.kinds import KINDS, LEVELS
from evalpack.spec.links import GRAINS
from evalpack.spec.model import (
    DEFAULT_MIX,
    BalancedLedger,
    Branch,
    ChildCount,
    Column,
    CurvePoint,
    Distribution,
    GroupShares,
    OutcomeCurve,
    PerParent,
    QuestionPlan,
    RateCurve,
    RatePoint,
    Relationship,
    SegmentShares,
    Table,
    TimeGrid,
    Waterfall,
    WaterfallPoint,
    _Via,
    add_months,
    month_start,
)
from evalpack.spec.semantics import CONVENTIONS, ColumnNote, Conventions, Measure, Semantics, TableWords, plural_of
from evalpack.spec.yamldoc import _clip, _fmt, _is_number, _keys, _kind, _number, _Reader

# --------------------------------------------------------------------------- sections



def _read_column(r: _Reader, name: str, raw: Any, path: tuple, rows: int) -> Column:
    references = None
    if isinstance(raw, dict) and (raw.get("type") == "foreign_key" or "references" in raw or "foreign_key" in raw):
        raw, references = _fk_column_keys(r, raw, path, rows)
    m = r.mapping(raw, path, COLUMN_KEYS, UNSUPPORTED_COLUMN, "column key")
    ctype = r.string(r.required(m, "type", path), path + ("type",))
    text_type = None
    if ctype in UNSUPPORTED_COLUMN_TYPES:
        raise r.err(path + ("type",), f"column type `{ctype}` is not supported by evalpack (line {r.line(path + ('type',))})")
    if ctype in TEXT_TYPE_ALIASES:
        ctype, text_type = "text", TEXT_TYPE_ALIASES[ctype]
    ctype = TYPE_ALIASES.get(ctype, ctype)
    if ctype not in COLUMN_TYPES:
        close = difflib.get_close_matches(ctype, COLUMN_TYPES, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else f"; use one of {', '.join(COLUMN_TYPES)}"
        raise r.err(path + ("type",), f"unknown column type '{ctype}'{hint}")

    kw: dict[str, Any] = {"name": name, "type": ctype, "line": r.line(path), "references": references}
    allowed_by_type = {
        "int": {"unique", "min", "max", "nullable", "decimals", *DISTRIBUTION_KEYS, *DEPENDENT_KEYS},
        "float": {"min", "max", "decimals", "nullable", *DISTRIBUTION_KEYS, *DEPENDENT_KEYS},
        "text": {"unique", "text_type", "nullable"},
        "categorical": {"choices", "weights", "probabilities", "sampling", "nullable"},
        "boolean": {"rate", "probability", "nullable"},
        "date": {"start", "end", "nullable"},
        "datetime": {"start", "end", "nullable"},
        "foreign_key": {"nullable"},
    }[ctype] | {"type", "description", "primary_key"}
    for key in m:
        if key not in allowed_by_type:
            raise r.err(path + (key,), f"`{key}` does not apply to a {ctype} column; remove it")

    if "unique" in m:
        kw["unique"] = r.boolean(m["unique"], path + ("unique",))
    if m.get("primary_key"):
        kw["unique"] = True
    if "nullable" in m:
        value = m["nullable"]
        kw["nullable"] = (0.05 if value else 0.0) if isinstance(value, bool) else r.number(
            value, path + ("nullable",), lo=0.0, hi=0.9)
    if ctype in ("int", "float"):
        kw["decimals"] = r.integer(m.get("decimals", 2), path + ("decimals",), 0, 6) if ctype == "float" else 0
        if ctype == "int" and m.get("decimals", 0) != 0:
            raise r.err(path + ("decimals",), "an int column holds whole numbers; write decimals: 0, or make it a "
                        "float column")
        for key in ("min", "max"):
            if key in m:
                kw[key] = r.number(m[key], path + (key,))
        if kw.get("min") is not None and kw.get("max") is not None and kw["min"] > kw["max"]:
            raise r.err(path + ("min",), f"min {kw['min']} is greater than max {kw['max']}; swap or fix them")
        _representable_bounds(r, kw, path)
        kw["distribution"] = _read_distribution(r, m, path, unique=bool(kw.get("unique")))
        kw.update(_read_dependent(r, m, path, kw))
        if ctype == "int" and kw.get("unique"):
            lo, hi = kw.get("min", 1), kw.get("max")
            if hi is not None and hi - lo + 1 < rows:
                raise r.err(path + ("max",), f"unique ints in [{lo}, {hi}] hold {int(hi - lo + 1)} values, "
                            f"fewer than the table's {rows} rows; widen the range")
    elif ctype == "text":
        tt = m.get("text_type", text_type or "word")
        tt = TEXT_TYPE_NAMES.get(tt, tt) if isinstance(tt, str) else tt
        if tt not in TEXT_TYPES:
            raise r.err(path + ("text_type",), f"unknown text_type {_clip(str(tt))}: Misata draws {_clip(str(tt), quote=False)} "
                        f"values for it, evalpack's text types are {', '.join(TEXT_TYPES)}; use one of them, or write "
                        "`type: categorical, choices: [...]` with the values to draw from")
        kw["text_type"] = tt
    elif ctype == "categorical":
        choices = r.sequence(r.required(m, "choices", path), path + ("choices",))
        if not choices:
            raise r.err(path + ("choices",), "a categorical column needs at least one choice")
        kw["choices"] = tuple(str(c) for c in choices)
        if len(set(kw["choices"])) != len(choices):
            raise r.err(path + ("choices",), "choices repeat a label; list each once")
        if "weights" in m and "probabilities" in m:
            raise r.err(path + ("probabilities",), "give `weights:` or Misata's `probabilities:`, not both; "
                        "they are the same list")
        key = "probabilities" if "probabilities" in m else "weights"
        sampling = m.get("sampling", "uniform")
        if sampling not in ("uniform", "zipf", "auto"):
            raise r.err(path + ("sampling",), f"sampling {_clip(str(sampling))}: Misata's are uniform, zipf and auto; "
                        "use one of them, or give weights:")
        if sampling == "zipf" and key not in m:  # Misata's zipf: the listed order, weight 1/rank**1.2
            kw["weights"] = tuple(1.0 / (rank ** 1.2) for rank in range(1, len(choices) + 1))
        if key in m:
            weights = r.sequence(m[key], path + (key,))
            if len(weights) != len(choices):
                raise r.err(path + (key,), f"{len(weights)} {key} for {len(choices)} choices; give one per choice")
            kw["weights"] = tuple(r.number(w, path + (key, i), lo=0.0) for i, w in enumerate(weights))
            if sum(kw["weights"]) <= 0:
                raise r.err(path + (key,), f"{key} sum to zero")
    elif ctype == "boolean":
        if "rate" in m and "probability" in m:
            raise r.err(path + ("probability",), "give `rate:` or Misata's `probability:`, not both; they are the "
                        "same share of true values")
        key = "probability" if "probability" in m else "rate"
        if key in m:
            kw["rate"] = r.number(m[key], path + (key,), lo=0.0, hi=1.0)
    elif ctype in ("date", "datetime"):
        kw["dated"] = "start" in m or "end" in m
        kw["start"] = r.date(m.get("start", "2025-01-01"), path + ("start",))
        kw["end"] = r.date(m.get("end", "2025-12-31"), path + ("end",))
        if kw["start"] > kw["end"]:
            raise r.err(path + ("start",), f"start {kw['start']} is after end {kw['end']}")
    return Column(**kw)


def _read_distribution(r: _Reader, m: dict, path: tuple, unique: bool) -> Distribution | None:
    """A numeric column's ``distribution:`` with the parameters its shape reads (DISTRIBUTIONS); a parameter
    without a shape, or one the shape does not read, is refused naming it."""
    given = [k for k in DISTRIBUTION_KEYS if k in m and k != "distribution"]
    if "distribution" not in m:
        if given:
            raise r.err(path + (given[0],), f"`{given[0]}` is a parameter of a distribution; add `distribution:` "
                        f"({', '.join(DISTRIBUTIONS)}) or remove it")
        return None
    raw = m["distribution"]
    shape = DISTRIBUTION_ALIASES.get(raw, raw) if isinstance(raw, str) else raw
    if shape not in DISTRIBUTIONS:
        raise r.err(path + ("distribution",), f"distribution {_clip(str(raw))} is not one evalpack draws; use one of "
                    f"{', '.join(DISTRIBUTIONS)} (Misata's {', '.join(DISTRIBUTION_ALIASES)} are read too), or remove "
                    "it to draw evenly between min and max")
    if unique:
        raise r.err(path + ("distribution",), "a unique int column's values are its keys, numbered in order; "
                    "remove `distribution`")
    params = []
    for key in given:
        if key not in DISTRIBUTIONS[shape]:
            reads = ", ".join(DISTRIBUTIONS[shape]) or "no parameter"
            raise r.err(path + (key,), f"a {shape} distribution does not read `{key}` (it reads {reads}); remove it")
        positive = key not in ("mean", "mu") or (shape, key) == ("lognormal", "mean")
        value = r.number(m[key], path + (key,), lo=0.0 if positive else None)
        if positive and value <= 0:
            raise r.err(path + (key,), f"`{key}` must be greater than 0")
        params.append((key, float(value)))
    return None if shape == "uniform" else Distribution(shape, tuple(params))  # None: even between min and max


def _read_dependent(r: _Reader, m: dict, path: tuple, kw: dict[str, Any]) -> dict[str, Any]:
    """A numeric column's ``depends_on:`` with its ``mapping:`` (label -> branch) and ``default:`` branch, as the
    Column's keyword arguments; the labels are checked against the column named once the table is read
    (:func:`_check_dependents`)."""
    given = [k for k in DEPENDENT_KEYS if k in m]
    if not given:
        return {}
    if "depends_on" not in m:
        raise r.err(path + (given[0],), f"`{given[0]}` needs `depends_on:` naming the categorical column whose "
                    "label picks the values; add it or remove this key")
    if kw.get("unique"):
        raise r.err(path + ("depends_on",), "a unique int column's values are its keys, numbered in order; "
                    "remove `depends_on`")
    raw_map = m.get("mapping", {})
    if not isinstance(raw_map, dict) or not raw_map:
        raise r.err(path + ("mapping",), "expected a mapping of label -> {value: ...} or {distribution: ..., "
                    "min: ..., max: ...}")
    mapping = tuple((str(label), _read_branch(r, raw, path + ("mapping", label), kw)) for label, raw in raw_map.items())
    default = _read_branch(r, m["default"], path + ("default",), kw) if m.get("default") is not None else None
    return {"depends_on": r.string(m["depends_on"], path + ("depends_on",)), "mapping": mapping, "default": default}


def _read_branch(r: _Reader, raw: Any, path: tuple, column: dict[str, Any]) -> Branch:
    """One label's values of a ``depends_on`` column: ``value:`` or a range with a distribution, at most the
    column's decimals and within its bounds."""
    b = r.mapping(raw, path, BRANCH_KEYS, what="mapping key")
    d = column["decimals"]
    if "decimals" in b and r.integer(b["decimals"], path + ("decimals",), 0, 6) > d:
        raise r.err(path + ("decimals",), f"the column holds {d} decimals; write decimals: {d} or fewer here, or "
                    "raise the column's own")
    if "value" in b:
        extra = [k for k in b if k not in ("value", "decimals")]
        if extra:
            raise r.err(path + (extra[0],), "a branch holds either `value:` or a range with a distribution; "
                        f"remove `{extra[0]}` or `value`")
        value = r.number(b["value"], path + ("value",))
        if round(value * 10 ** d) != value * 10 ** d:
            raise r.err(path + ("value",), f"{_number(value)} has more than the column's {d} decimals")
        return Branch(value=float(value))
    bounds = {"decimals": d, **{k: r.number(b[k], path + (k,)) for k in ("min", "max") if k in b}}
    if bounds.get("min") is not None and bounds.get("max") is not None and bounds["min"] > bounds["max"]:
        raise r.err(path + ("min",), f"min {bounds['min']} is greater than max {bounds['max']}; swap or fix them")
    _representable_bounds(r, bounds, path)
    for key in ("min", "max"):
        outer = column.get(key)
        inner = bounds.get(key)
        if outer is not None and inner is not None and (inner < outer if key == "min" else inner > outer):
            raise r.err(path + (key,), f"{key} {_number(inner)} lies outside the column's {key} {_number(outer)}; "
                        "keep each branch within the column's bounds")
    return Branch(min=bounds.get("min"), max=bounds.get("max"), distribution=_read_distribution(r, b, path, False))


def _check_dependents(r: _Reader, columns: tuple[Column, ...], path: tuple) -> None:
    """Each ``depends_on`` names a categorical column of the same table (itself independent), and each of its
    mapping's labels is one of that column's choices."""
    by_name = {c.name: c for c in columns}
    for col in columns:
        if col.depends_on is None:
            continue
        cp = path + (col.name, "depends_on")
        parent = by_name.get(col.depends_on)
        if parent is None or parent.type != "categorical":
            what = f"is a {parent.type} column" if parent else "is not a column of this table"
            raise r.err(cp, f"{_clip(col.depends_on)} {what}; `depends_on` names a categorical column of the same "
                        "table (Misata picks the values by its label)")
        if parent.depends_on is not None:
            raise r.err(cp, f"{col.depends_on} depends on another column itself; name an independent one")
        for label, _ in col.mapping:
            if label not in parent.choices:
                raise r.err(path + (col.name, "mapping", label), f"{_clip(label)} is not one of {col.depends_on}'s "
                            f"choices ({', '.join(parent.choices)}); fix the label or remove it")


def _representable_bounds(r: _Reader, kw: dict[str, Any], path: tuple) -> None:
    """Move a declared min up and a max down to the nearest values the column can hold at its
    decimals (min 0.5 at 0 decimals -> 1; max 9.996 at 2 -> 9.99), so that every generated value,
    which is a whole number of units, lies within the declaration; refuse a range that holds none,
    and amounts beyond MAX_UNITS units (kw: the column's keyword arguments, changed in place)."""
    d = kw["decimals"]
    step = Decimal(1).scaleb(-d)
    for key, rounding in (("min", ROUND_CEILING), ("max", ROUND_FLOOR)):
        value = kw.get(key)
        if value is None:
            continue
        exact = Decimal(str(value))
        if abs(exact.scaleb(d)) > MAX_UNITS:
            raise r.err(path + (key,), f"{key} {_number(value)} is beyond the largest amount a column with {d} decimals "
                        f"holds, ±{Decimal(MAX_UNITS).scaleb(-d):,f} ({MAX_UNITS:,} units of {step}; evalpack's "
                        "limit); use a smaller bound or fewer decimals")
        held = exact.quantize(step, rounding=rounding)
        if held != exact:
            kw[key] = int(held) if d == 0 else float(held)
    lo, hi = kw.get("min"), kw.get("max")
    if lo is not None and hi is not None and lo > hi:
        raise r.err(path + ("min",), f"no value with {d} decimals lies between min and max (they round inward to "
                    f"{_number(lo)} and {_number(hi)}); widen the range or allow more decimals")


def _read_ledger(r: _Reader, raw: Any, path: tuple, table: str | None) -> BalancedLedger:
    if isinstance(raw, dict) and "type" in raw:  # the type first: another type's keys are not ledger keys
        ctype = r.string(raw["type"], path + ("type",))
        if ctype != "balanced_ledger":
            raise r.err(path + ("type",), f"constraint type `{ctype}` is not supported by evalpack "
                        f"(line {r.line(path + ('type',))}); only balanced_ledger is: "
                        + UNSUPPORTED_CONSTRAINT.get(ctype, "remove the constraint"))
    m = r.mapping(raw, path, CONSTRAINT_KEYS, what="constraint key")
    r.required(m, "type", path)
    if table is None:
        table = r.string(r.required(m, "table", path), path + ("table",))
    elif "table" in m and m["table"] != table:
        raise r.err(path + ("table",), f"a constraint inside table '{table}' names table '{m['table']}'")
    group_by = r.sequence(r.required(m, "group_by", path), path + ("group_by",))
    if not group_by:
        raise r.err(path + ("group_by",), "group_by needs at least one column")
    return BalancedLedger(
        name=r.string(m.get("name", "balanced_ledger"), path + ("name",)),
        table=table,
        group_by=tuple(r.ident(g, path + ("group_by", i)) for i, g in enumerate(group_by)),
        debit_column=r.ident(m.get("debit_column", "debit"), path + ("debit_column",)),
        credit_column=r.ident(m.get("credit_column", "credit"), path + ("credit_column",)),
        decimals=r.integer(m.get("decimals", 2), path + ("decimals",), 0, 6),
        line=r.line(path),
        path=path,
    )


def _split_ref(r: _Reader, ref: Any, path: tuple) -> tuple[str, str]:
    text = r.string(ref, path)
    if "." not in text:
        raise r.err(path, f"expected 'table.column', got {text!r}")
    table, column = text.strip().split(".", 1)
    return table.strip(), column.strip()


def _read_relationship(r: _Reader, raw: Any, path: tuple) -> Relationship:
    line = r.line(path)
    if isinstance(raw, str):
        parts = re.split(r"\s*(?:->|→)\s*", raw.strip())
        if len(parts) != 2:
            raise r.err(path, f"expected 'parent.column -> child.column', got {raw!r}")
        (pt, pc), (ct, cc) = _split_ref(r, parts[0], path), _split_ref(r, parts[1], path)
        return Relationship(pt, pc, ct, cc, line)
    keys = ("parent", "child", "parent_col", "child_col", "parent_table", "child_table", "parent_key",
            "child_key", "orphans", "nulls", "min_children", "description")
    options = {k: v for k, v in raw.items() if k in UNSUPPORTED_RELATIONSHIP} if isinstance(raw, dict) else {}
    m = r.mapping({k: v for k, v in raw.items() if k not in options} if options else raw, path, keys,
                  what="relationship key")
    parent = m.get("parent", m.get("parent_table"))
    child = m.get("child", m.get("child_table"))
    if parent is None or child is None:
        raise r.err(path, "a relationship needs `parent` and `child`")
    parent, child = r.string(parent, path + ("parent",)), r.string(child, path + ("child",))
    parent, pcol = _relationship_end(r, m, path, parent, "parent", ("parent_col", "parent_key"))
    child, ccol = _relationship_end(r, m, path, child, "child", ("child_col", "child_key"))
    rel = Relationship(
        parent, pcol or "id", child, ccol or f"{parent}_id", line,
        orphans=r.integer(m.get("orphans", 0), path + ("orphans",), lo=0),
        nulls=r.integer(m.get("nulls", 0), path + ("nulls",), lo=0),
    )
    if m.get("min_children") is not None:
        r.integer(m["min_children"], path + ("min_children",), lo=0, hi=MAX_TABLE_ROWS)
    for key, value in options.items():
        if not _asks_nothing(value):
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            raise r.err(path + (key,), f"`{key}` is not supported by evalpack (line {r.line(path + (key,))}): "
                        + UNSUPPORTED_RELATIONSHIP[key].format(child=f"{rel.child_table}.{rel.child_column}",
                                                               parent_table=rel.parent_table,
                                                               value=shown))
    return rel


def _asks_nothing(value: Any) -> bool:
    """Whether a Misata option's value leaves it off (false, 0, null, {} or []): what evalpack does anyway."""
    return value is None or value == 0 or value in ({}, [])


def _relationship_end(r: _Reader, m: dict, path: tuple, ref: str, end: str, key_names: tuple[str, str]
                      ) -> tuple[str, str | None]:
    """The table and key column of a relationship's ``end`` ("parent" or "child"): ``ref`` is `table` or
    `table.column`; the column may also come from ``key_names`` (Misata's `parent_col`/`parent_key`)."""
    key_name = next((k for k in key_names if m.get(k) is not None), None)
    column = None
    if key_name is not None:
        kp = path + (key_name,)
        value = m[key_name]
        if isinstance(value, list):
            raise r.err(kp, f"composite keys are not supported by evalpack (line {r.line(kp)}): a relationship joins "
                        f"on one column; give the {end} one key column (a unique int) and name it here")
        column = r.string(value, kp)
    if "." not in ref:
        return ref, column
    table, dotted = _split_ref(r, ref, path + (end,))
    if column is not None and column != dotted:
        raise r.err(path + (key_name,), f"`{end}: {ref}` names column '{dotted}' but `{key_name}` names "
                    f"'{column}'; write the key once, as `{end}: {table}.<column>`")
    return table, dotted


def _fk_column_keys(r: _Reader, raw: dict, path: tuple, rows: int) -> tuple[dict, tuple[str, str] | None]:
    """``raw`` without the Misata keys about a column's parent that evalpack honours as written
    (`references`, `sampling: uniform`, `null_rate: 0`, `unique: false`), and the (table, column) a foreign
    key's `references` names (parse_spec makes it the column's relationship unless relationships: has one);
    any other key is refused with what to write instead. ``path`` is ("tables", table, "columns", column);
    ``rows`` the table's rows."""
    child, fk = f"{path[1]}.{path[3]}", raw.get("type") == "foreign_key"
    per_parent = f"`per_parent: [{{child: {child}, counts: {{...}}}}]`"
    kept, references = dict(raw), None
    for key, value in raw.items():
        kp = path + (key,)
        where = f"`{key}` on {'foreign key' if fk else 'column'} {child} is not supported by evalpack (line {r.line(kp)})"
        if key in ("references", "foreign_key") and not (fk and key == "references"):
            ref = value if isinstance(value, str) and "." in value else (
                f"{value.get('table')}.{value.get('column')}" if isinstance(value, dict) else "<table>.<key>")
            raise r.err(kp, f"{where}: a column with a parent is a foreign key; write `{path[3]}: {{type: "
                        f"foreign_key, references: {ref}}}` (or `- {ref} -> {child}` under relationships:), else "
                        f"remove `{key}`")
        if not fk:
            continue
        if key == "references":
            references = _split_ref(r, value, kp)
        elif key in ("alpha", "popularity_sigma") or (key == "sampling" and value != "uniform"):
            raise r.err(kp, f"{where}: evalpack draws each child's parent uniformly (`sampling: uniform`); to "
                        f"declare how many children each parent has write {per_parent}, else remove `{key}`")
        elif key == "unique" and value is not False:
            raise r.err(kp, f"{where}: for one child per parent at most (one-to-one) write {per_parent} with "
                        "counts 0 and 1 only, e.g. {0: 0.2, 1: 0.8}, and remove `unique`")
        elif key == "null_rate" and not _asks_nothing(value):
            count = (f"`nulls: {round(value * rows)}` ({value:g} of {rows} rows)"
                     if isinstance(value, (int, float)) and not isinstance(value, bool) else "`nulls: N`")
            raise r.err(kp, f"{where}: rows of a foreign key with no parent are declared on its relationship; "
                        f"write {count} there and remove `null_rate`")
        elif key == "nullable" and not _asks_nothing(value):
            raise r.err(kp, f"{where}: rows of a foreign key with no parent are declared on its relationship; write "
                        "`nulls: N` there (N rows); Misata's `nullable: true` alone makes none, so to build as Misata "
                        "does remove `nullable`")
        if key in ("references", "sampling", "null_rate", "unique"):
            del kept[key]  # honoured: names the parent, or asks for what evalpack does
    return kept, references


def _implied(r: _Reader, top: dict, tables: list[Table], relationships: tuple[Relationship, ...],
             per_parent: tuple[PerParent, ...], curves: tuple[OutcomeCurve, ...]
             ) -> tuple[tuple, tuple, list[tuple], list[tuple]]:
    """What Misata's shorthands declare, added as evalpack declares it: the relationship of a foreign key
    whose `references` no entry of relationships: declares (Misata's rule), and per_parent `{"N+": 1.0}` for a
    relationship's `min_children: N`. Returns the relationships and per_parent with these added, and the key
    path of each (for messages: the `references` or `min_children` that made it)."""
    rel_paths = [("relationships", i) for i in range(len(relationships))]
    pp_paths = [("per_parent", i) for i in range(len(per_parent))]
    declared = {(rel.child_table, rel.child_column): rel for rel in relationships}
    added_rels: list[Relationship] = []
    for t in tables:
        for c in t.columns:
            if c.references is None:
                continue
            path = ("tables", t.name, "columns", c.name, "references")
            ref, rel = ".".join(c.references), declared.get((t.name, c.name))
            if rel is None:
                added_rels.append(Relationship(*c.references, t.name, c.name, r.line(path)))
                rel_paths.append(path)
            elif ref != f"{rel.parent_table}.{rel.parent_column}":
                raise r.err(path, f"`references: {ref}` disagrees with the relationship that makes "
                            f"{rel.parent_table}.{rel.parent_column} the parent of {t.name}.{c.name}; make them "
                            "agree, or remove `references`")
    added_pp: list[PerParent] = []
    rows = {t.name: t.rows for t in tables}
    resized = {c.table for c in curves if c.avg_transaction_value}  # rows the planner decides
    for i, (rel, raw) in enumerate(zip(relationships, top.get("relationships") or [])):
        n = raw.get("min_children") if isinstance(raw, dict) else None
        if not n:
            continue
        path, child = ("relationships", i, "min_children"), f"{rel.child_table}.{rel.child_column}"
        j = next((j for j, pp in enumerate(per_parent) if (pp.child_table, pp.child_column) == (
            rel.child_table, rel.child_column)), None)
        if j is not None:
            raise r.err(path, f"relationships[{i}].min_children and per_parent[{j}] both declare the children "
                        f"per parent of {child}; keep one (per_parent[{j}] with its counts from {n} up, or "
                        "min_children)")
        linked, parents = rows.get(rel.child_table, 0) - rel.nulls - rel.orphans, rows.get(rel.parent_table, 0)
        known = {rel.child_table, rel.parent_table} <= set(rows) - resized and linked >= 0  # else checked later
        if known and n * parents > linked:
            has = f"{linked} with a parent" if linked != rows[rel.child_table] else f"{linked}"
            raise r.err(path, f"min_children: {n} asks for {n * parents} {rel.child_table} rows ({n} for each of "
                        f"the {parents} rows of {rel.parent_table}), but {rel.child_table} has {has}; lower "
                        f"min_children (at most {linked // parents} fits), raise the rows of {rel.child_table} or "
                        f"lower those of {rel.parent_table}")
        added_pp.append(PerParent(rel.child_table, rel.child_column, (ChildCount(n, True, 1.0),), rel.line, top=5,
                                  path=f"relationships[{i}].min_children"))
        pp_paths.append(path)
    return relationships + tuple(added_rels), per_parent + tuple(added_pp), rel_paths, pp_paths


def _curve_month(r: _Reader, point: dict, path: tuple, start: dt.date | None) -> dt.date:
    placed = [k for k in ("month", "date", "period") if k in point]
    if len(placed) != 1:
        raise r.err(path, "place each point with exactly one of `month`, `date` or `period`")
    key = placed[0]
    if key == "month":
        index = r.integer(point["month"], path + ("month",), lo=1, hi=MAX_MONTHS,
                          limit=f" (the months from {FIRST_DATE.year} to {LAST_DATE.year}, the dates evalpack accepts)")
        if start is None:
            raise r.err(path + ("month",), "a `month:` point needs the curve's `start_date` "
                        "(or a start on its time column)")
        return r.in_dates(add_months(month_start(start), index - 1), path + ("month",))
    if key == "date":
        return month_start(r.date(point["date"], path + ("date",)))
    return r.month(point["period"], path + ("period",))


def _monthly(r: _Reader, m: dict, path: tuple, what: str) -> None:
    """Refuse a curve's ``time_unit`` other than month, saying what Misata does with it and what to write."""
    unit = m.get("time_unit", "month")
    if unit != "month":
        raise r.err(path + ("time_unit",), f"time_unit {_clip(str(unit))} is not supported by evalpack: Misata holds "
                    f"the curve's {what} per {_clip(str(unit), quote=False)}, evalpack plans and asks them per month; "
                    "write time_unit: month (each point's month then holds its value exactly)")


def _read_outcome_curve(r: _Reader, raw: Any, path: tuple, tables: dict[str, Table]) -> OutcomeCurve:
    keys = ("table", "column", "time_column", "start_date", "curve_points", "avg_transaction_value",
            "min_transactions_per_period", "max_transactions_per_period", "time_unit", "value_mode", "description")
    m = r.mapping(raw, path, keys + tuple(NOTED_CURVE), what="outcome curve key")
    r.note_misata(m, path, NOTED_CURVE)
    table = r.string(r.required(m, "table", path), path + ("table",))
    time_column = r.string(m.get("time_column", "date"), path + ("time_column",))
    _monthly(r, m, path, "totals")
    if m.get("value_mode", "absolute") not in ("absolute", "auto"):
        raise r.err(path + ("value_mode",), f"value_mode `{m['value_mode']}` is not supported by evalpack; "
                    "give absolute totals")
    start = r.date(m["start_date"], path + ("start_date",)) if "start_date" in m else None
    if start is None and table in tables:
        col = tables[table].column(time_column)
        start = col.start if col else None
    raw_points = r.sequence(r.required(m, "curve_points", path), path + ("curve_points",))
    if not raw_points:
        raise r.err(path + ("curve_points",), "an outcome curve needs at least one point")
    points = []
    for i, raw_point in enumerate(raw_points):
        pp = path + ("curve_points", i)
        point = r.mapping(raw_point, pp, ("month", "date", "period", "index", *CURVE_VALUE_KEYS), what="curve point key")
        given = [k for k in CURVE_VALUE_KEYS if k in point]
        if len(given) != 1:
            raise r.err(pp, "give each point's total as exactly one of " + ", ".join(CURVE_VALUE_KEYS))
        value = r.number(point[given[0]], pp + (given[0],), lo=0.0)
        points.append(CurvePoint(_curve_month(r, point, pp, start), float(value), r.line(pp)))
    months = [p.month for p in points]
    for i in range(1, len(months)):
        if months[i] <= months[i - 1]:
            raise r.err(path + ("curve_points", i), f"points must be in increasing month order; "
                        f"{months[i]:%Y-%m} does not come after {months[i - 1]:%Y-%m}")
    avg = m.get("avg_transaction_value")
    return OutcomeCurve(
        table=table,
        column=r.string(r.required(m, "column", path), path + ("column",)),
        time_column=time_column,
        points=tuple(points),
        line=r.line(path),
        avg_transaction_value=None if avg is None else r.number(avg, path + ("avg_transaction_value",), lo=0.01),
        rows_per_period=tuple(
            None if m.get(key) is None else r.integer(m[key], path + (key,), lo=1)
            for key in ("min_transactions_per_period", "max_transactions_per_period")),
    )


def _rate_months(r: _Reader, value: Any, path: tuple, span: tuple[dt.date, dt.date] | None) -> list[dt.date]:
    """The months a rate point's ``period`` names: ``YYYY-MM``; Misata's ``M`` (1-12: that calendar month in every
    year of the time column's range), ``N`` above 12 (the N-th month of the range) and ``all`` (the range's first
    and last months, the rate held between them)."""
    text = str(value).strip().lower() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text is None or not (text == "all" or re.fullmatch(r"\d{1,4}", text)):
        return [r.month(value, path)]
    if span is None:
        raise r.err(path, f"period {_clip(str(value))} counts the months of the rate curve's time column, which "
                    "declares no start and end; give it start: and end:, or write period: YYYY-MM")
    first, last = month_start(span[0]), month_start(span[1])
    count = (last.year - first.year) * 12 + last.month - first.month + 1
    months = [add_months(first, i) for i in range(count)]
    if text == "all":
        return sorted({first, last})
    n = int(text)
    named = [m for m in months if m.month == n] if 1 <= n <= 12 else months[n - 1:n] if n > 12 else []
    if not named:
        raise r.err(path, f"period {_clip(str(value))}: the time column's range {first:%Y-%m} to {last:%Y-%m} "
                    f"holds no such month; Misata reads 1-12 as a calendar month of every year and a larger number "
                    "as the N-th month of the range")
    return named


def _date_by_curve(r: _Reader, curve: OutcomeCurve, tables: dict[str, Table], undated: set[tuple[str, str]]
                   ) -> OutcomeCurve:
    """Misata dates the rows of a curve whose date column declares no start or end inside the curve's months: such a
    column's range becomes those months (every curve's on it), in ``tables``, with a note in the build's warnings.
    ``undated``: the columns dated so, by the curves read before."""
    table = tables.get(curve.table)
    col = table.column(curve.time_column) if table else None
    key = (curve.table, curve.time_column)
    if col is None or col.type not in ("date", "datetime") or (col.dated and key not in undated):
        return curve
    first, last = curve.points[0].month, add_months(curve.points[-1].month, 1) - dt.timedelta(days=1)
    if key in undated:
        first, last = min(first, col.start), max(last, col.end)
    undated.add(key)
    dated = replace(col, start=first, end=last, dated=True)
    tables[curve.table] = replace(table, columns=tuple(dated if c.name == col.name else c for c in table.columns))
    r.notes.append(f"{r.doc.file}:{col.line}: tables.{curve.table}.columns.{col.name} declares no start or end: its "
                   f"range is the outcome curve's months, {first:%Y-%m} to {last:%Y-%m}, as Misata dates such rows; "
                   "write start: and end: to say so (a month of room on each side lets an off-by-one window fail)")
    return curve


def _read_rate_curve(r: _Reader, raw: Any, path: tuple, tables: dict[str, Table]) -> RateCurve:
    keys = ("table", "column", "time_column", "rate_points", "time_unit", "true_value", "interpolate", "description")
    m = r.mapping(raw, path, keys, what="rate curve key")
    _monthly(r, m, path, "rates")
    if m.get("true_value", True) is not True:
        raise r.err(path + ("true_value",), "evalpack rate curves count `true` on a boolean column; remove true_value")
    interpolate = r.boolean(m.get("interpolate", True), path + ("interpolate",))
    table = r.string(r.required(m, "table", path), path + ("table",))
    time_column = r.string(m.get("time_column", "date"), path + ("time_column",))
    tcol = tables[table].column(time_column) if table in tables else None
    span = (tcol.start, tcol.end) if tcol is not None and tcol.type in ("date", "datetime") and tcol.dated else None
    raw_points = r.sequence(r.required(m, "rate_points", path), path + ("rate_points",))
    if not raw_points:
        raise r.err(path + ("rate_points",), "a rate curve needs at least one point")
    points: dict[dt.date, RatePoint] = {}
    previous = None  # the last point placed on one month (YYYY-MM, date): those come in increasing order
    for i, raw_point in enumerate(raw_points):
        pp = path + ("rate_points", i)
        point = r.mapping(raw_point, pp, ("period", "date", "rate"), what="rate point key")
        if "period" in point:
            months = _rate_months(r, point["period"], pp + ("period",), span)
        elif "date" in point:
            months = [month_start(r.date(point["date"], pp + ("date",)))]
        else:
            raise r.err(pp, "place each rate point with `period: YYYY-MM`")
        rate = r.number(r.required(point, "rate", pp), pp + ("rate",), lo=0.0, hi=1.0)
        single = "date" in point or (isinstance(point["period"], str) and PERIOD_RE.fullmatch(point["period"]))
        if single and previous is not None and months[0] <= previous:
            raise r.err(path + ("rate_points", i), "rate points must be in increasing period order")
        previous = months[0] if single else previous
        for month in months:
            if month in points:
                raise r.err(pp, f"{month:%Y-%m} already has a rate (line {points[month].line}); give each month one")
            points[month] = RatePoint(month, float(rate), r.line(pp))
    ordered = [points[month] for month in sorted(points)]
    return RateCurve(
        table=table,
        column=r.string(r.required(m, "column", path), path + ("column",)),
        time_column=time_column,
        points=tuple(ordered),
        line=r.line(path),
        interpolate=interpolate,
    )


def _read_group_shares(r: _Reader, raw: Any, path: tuple) -> GroupShares:
    m = r.mapping(raw, path, ("table", "measure", "group_column", "shares", "description"), what="group_shares key")
    return GroupShares(
        table=r.string(r.required(m, "table", path), path + ("table",)),
        measure=r.string(r.required(m, "measure", path), path + ("measure",)),
        group_column=r.string(r.required(m, "group_column", path), path + ("group_column",)),
        shares=r.shares(r.required(m, "shares", path), path + ("shares",)),
        line=r.line(path),
    )


def _one_column(r: _Reader, m: dict, path: tuple, documented: str, engine: str) -> tuple[str, str]:
    """The table.column that ``m`` names under ``documented`` (SPEC_FORMAT.md's key) or ``engine`` (evalpack's
    own spelling of the same key); given both, they must agree. Later messages name the key the file wrote."""
    given = [key for key in (documented, engine) if m.get(key) is not None]
    if not given:
        raise r.err(path, f"missing required key '{documented}' (or '{engine}', its other spelling)")
    refs = {key: _split_ref(r, m[key], path + (key,)) for key in given}
    if len(set(refs.values())) > 1:
        raise r.err(path + (engine,), f"`{engine}: {m[engine]}` and `{documented}: {m[documented]}` are two spellings "
                    f"of one key and name different columns; keep one of them")
    if given[0] == documented:
        r.spelled[path + (engine,)] = path + (documented,)
    return refs[given[0]]


def _via_of(r: _Reader, m: dict, path: tuple, key: str, table: str) -> tuple[str, str]:
    """``m``'s `via`: a column of ``table``, the table that ``m``'s ``key`` names."""
    via = _split_ref(r, m["via"], path + ("via",))
    if via[0] != table:
        raise r.err(path + ("via",), f"`via: {'.'.join(via)}` is a column of {via[0]}, but `{key}` is {table}; via "
                    f"names the foreign key of {table} that leads to the parent: write `via: {table}.<column>`")
    return via


def _read_segment_shares(r: _Reader, raw: Any, path: tuple) -> SegmentShares:
    m = r.mapping(raw, path, ("table", "measure", "attribute", "by", "via", "grain", "shares", "description"),
                  what="segment_shares key")
    by_table, by_column = _one_column(r, m, path, "attribute", "by")
    grain = m.get("grain")
    if grain is not None and grain not in GRAINS:
        raise r.err(path + ("grain",), f"grain is one of {', '.join(GRAINS)}, got {_kind(grain)}")
    table = r.string(r.required(m, "table", path), path + ("table",))
    if m.get("via") is not None:
        r.vias[path] = _Via(_via_of(r, m, path, "table", table))
    return SegmentShares(
        table=table,
        measure=r.string(r.required(m, "measure", path), path + ("measure",)),
        by_table=by_table, by_column=by_column,
        shares=r.shares(r.required(m, "shares", path), path + ("shares",)),
        line=r.line(path),
        grain=grain,
    )




def _read_per_parent(r: _Reader, raw: Any, path: tuple) -> PerParent:
    m = r.mapping(raw, path, ("parent", "child", "via", "counts", "top", "per", "description"), what="per_parent key")
    child = None if m.get("child") is None else r.string(m["child"], path + ("child",))
    child_is_table = child is not None and "." not in child  # SPEC_FORMAT.md's `child: orders, via: orders.<key>`
    if child_is_table and m.get("via") is None:
        raise r.err(path + ("child",), f"`child: {child}` names a table; name its foreign key to the parent too: "
                    f"`via: {child}.<column>` (or write `child: {child}.<column>`)")
    child_table, child_column = _one_column(r, {"via": m.get("via"), "child": None if child_is_table else child},
                                            path, "via", "child")
    if child_is_table:
        _via_of(r, m, path, "child", child)
    if m.get("parent") is not None:
        r.vias[path] = _Via((child_table, child_column), r.string(m["parent"], path + ("parent",)))
    raw_counts = r.shares(r.required(m, "counts", path), path + ("counts",))
    counts = []
    for key, share in raw_counts:
        text = key.strip()
        match = re.fullmatch(r"(\d{1,6})(\+?)", text)
        if not match:
            raise r.err(path + ("counts", key), f"a count is a whole number of children (2) or an open bucket "
                        f"('3+': three or more), got {_clip(key)}")
        counts.append(ChildCount(int(match[1]), bool(match[2]), share))
    ordered = sorted(counts, key=lambda c: c.count)
    if len({c.count for c in counts}) != len(counts) or any(c.open for c in ordered[:-1]):
        raise r.err(path + ("counts",), "give each count once, and at most one open bucket ('3+'), the largest")
    per = m.get("per")
    if per is not None and per not in GRAINS:
        raise r.err(path + ("per",), f"per is the period the counts hold in: one of {', '.join(GRAINS)}, "
                    f"got {_kind(per)}")
    return PerParent(child_table, child_column, tuple(ordered), r.line(path),
                     top=r.integer(m.get("top", 5), path + ("top",), lo=0, hi=100), path=_fmt(path), per=per)


def _read_waterfall(r: _Reader, raw: Any, path: tuple) -> Waterfall:
    keys = ("table", "period_column", "type_column", "amount_column", "starting_value", "points",
            "inflow_shares", "outflow_shares", "outflow_rate", "description", "segment_column", "segment_value")
    m = r.mapping(raw, path, keys, what="waterfall key")
    for key in ("segment_column", "segment_value"):  # Misata's; null is its default
        if m.get(key) is not None:
            raise r.err(path + (key,), f"`{key}` is not supported by evalpack: Misata splits one movements table "
                        "between several waterfalls, one per segment_value, and writes the segment column; evalpack "
                        "holds one waterfall per table: give each segment its own movements table and waterfall, and "
                        f"remove {key}")
    raw_points = r.sequence(r.required(m, "points", path), path + ("points",))
    if not raw_points:
        raise r.err(path + ("points",), "a waterfall needs at least one point")
    points = []
    for i, raw_point in enumerate(raw_points):
        pp = path + ("points", i)
        point = r.mapping(raw_point, pp, ("period", "ending_value"), what="waterfall point key")
        label = r.required(point, "period", pp)
        if not (isinstance(label, str) and PERIOD_RE.fullmatch(label)):
            raise r.err(pp + ("period",), f"expected a period 'YYYY-MM', got {_kind(label)}: Misata writes any label "
                        "as it is given (and asks for running balances only where the labels sort), evalpack places "
                        "each point on its calendar month; write the month as period: \"2025-01\"")
        points.append(WaterfallPoint(
            r.month(label, pp + ("period",)),
            float(r.number(r.required(point, "ending_value", pp), pp + ("ending_value",), lo=0.0)),
            r.line(pp),
        ))
    for i in range(1, len(points)):
        if points[i].month != add_months(points[i - 1].month, 1):
            raise r.err(path + ("points", i), "waterfall points must be consecutive months, one per period")
    for key in ("inflow_shares", "outflow_shares"):
        given = m.get(key)
        if isinstance(given, dict) and given and all(_is_number(v) and v >= 0 for v in given.values()):
            total = sum(given.values())
            if total > 0 and abs(total - 1.0) > 1e-9:
                scaled = ", ".join(f"{k}: {v / total:.12g}" for k, v in given.items())
                raise r.err(path + (key,), f"shares must sum to 1, they sum to {total:g}: Misata rescales them to 1 "
                            f"(with a warning), evalpack takes them as written; write {key}: {{{scaled}}}")
    # without shares, Misata's own defaults: the same spec means the same movements in both tools
    inflow = r.shares(m["inflow_shares"], path + ("inflow_shares",)) if "inflow_shares" in m else (
        ("new", 0.65), ("expansion", 0.35))
    outflow = r.shares(m["outflow_shares"], path + ("outflow_shares",)) if "outflow_shares" in m else (
        ("churn", 0.7), ("contraction", 0.3))
    overlap = {k for k, _ in inflow} & {k for k, _ in outflow}
    if overlap:
        raise r.err(path + ("outflow_shares",), f"{sorted(overlap)} cannot be both inflow and outflow")
    return Waterfall(
        table=r.string(r.required(m, "table", path), path + ("table",)),
        period_column=r.string(m.get("period_column", "period"), path + ("period_column",)),
        type_column=r.string(m.get("type_column", "movement_type"), path + ("type_column",)),
        amount_column=r.string(m.get("amount_column", "amount"), path + ("amount_column",)),
        starting_value=float(r.number(r.required(m, "starting_value", path), path + ("starting_value",), lo=0.0)),
        points=tuple(points),
        inflow_shares=inflow,
        outflow_shares=outflow,
        outflow_rate=float(r.number(m.get("outflow_rate", 0.03), path + ("outflow_rate",), lo=0.0, hi=1.0)),
        line=r.line(path),
    )


def _read_time_grid(r: _Reader, raw: Any, path: tuple) -> TimeGrid:
    m = r.mapping(raw, path, ("table", "column", "minute_grid", "hours", "description"), what="time_grid key")
    grid = r.integer(m.get("minute_grid", 15), path + ("minute_grid",), 1, 60)
    if 60 % grid:
        raise r.err(path + ("minute_grid",), f"minute_grid {grid} does not divide an hour; use 1, 5, 10, 15, 30 or 60")
    hours = r.sequence(m.get("hours", [9, 17]), path + ("hours",))
    if len(hours) != 2:
        raise r.err(path + ("hours",), "hours is [first_hour, end_hour], e.g. [9, 17]")
    h0 = r.integer(hours[0], path + ("hours", 0), 0, 23)
    h1 = r.integer(hours[1], path + ("hours", 1), 1, 24)
    if h0 >= h1:
        raise r.err(path + ("hours",), f"the first hour {h0} must come before the end hour {h1}")
    return TimeGrid(
        table=r.string(r.required(m, "table", path), path + ("table",)),
        column=r.string(r.required(m, "column", path), path + ("column",)),
        minute_grid=grid,
        hours=(h0, h1),
        line=r.line(path),
    )


# --------------------------------------------------------------------------- cross-checks


def _read_semantics(r: _Reader, raw: Any, tables: dict[str, Table]) -> Semantics:
    """``semantics:`` (optional): business names of tables, columns and measures, a currency, synonyms."""
    if raw is None:
        return Semantics()
    p = ("semantics",)
    m = r.mapping(raw, p, SEMANTICS_KEYS, (), "semantics key")

    def table(name: Any, path: tuple) -> str:
        if name not in tables:
            raise r.err(path, f"unknown table {name!r}; semantics can name only declared tables")
        return name

    def column(ref: Any, path: tuple) -> tuple[str, str]:
        t, c = _split_ref(r, ref, path)
        if tables.get(t) is None or tables[t].column(c) is None:
            raise r.err(path, f"unknown column {ref!r}; write table.column of a declared column")
        return t, c

    names = []
    for t, v in r.mapping(m.get("tables", {}), p + ("tables",), _keys(m.get("tables"))).items():
        tp = p + ("tables", t)
        table(t, tp)
        if isinstance(v, str):
            names.append((t, TableWords(r.string(v, tp), plural_of(v))))
            continue
        tm = r.mapping(v, tp, ("name", "plural", "description"))
        singular = r.string(r.required(tm, "name", tp), tp + ("name",))
        names.append((t, TableWords(singular, r.string(tm.get("plural", plural_of(singular)), tp + ("plural",)),
                                    _optional_text(r, tm, "description", tp))))
    columns, notes = [], []
    for ref, label in r.mapping(m.get("columns", {}), p + ("columns",), _keys(m.get("columns"))).items():
        cp = p + ("columns", ref)
        t, c = column(ref, cp)
        if isinstance(label, str):
            columns.append((f"{t}.{c}", r.string(label, cp)))
            continue
        cm = r.mapping(label, cp, ("name", "description", "unit", "values"))
        if "name" in cm:
            columns.append((f"{t}.{c}", r.string(cm["name"], cp + ("name",))))
        values = tuple((str(stored), r.string(meaning, cp + ("values", stored))) for stored, meaning in
                       r.mapping(cm.get("values", {}), cp + ("values",), _keys(cm.get("values"))).items())
        notes.append((f"{t}.{c}", ColumnNote(_optional_text(r, cm, "description", cp),
                                             _optional_text(r, cm, "unit", cp), values)))
    measures = []
    for name, v in r.mapping(m.get("measures", {}), p + ("measures",), _keys(m.get("measures"))).items():
        mp = p + ("measures", name)
        mm = r.mapping(v, mp, ("sum", "count", "description"))
        described = _optional_text(r, mm, "description", mp)
        if len(set(mm) - {"description"}) != 1:
            raise r.err(mp, "a measure is one of {sum: table.column} or {count: table}")
        if "sum" in mm:
            t, c = column(mm["sum"], mp + ("sum",))
            measures.append(Measure(r.string(name, mp).replace("_", " "), "sum", t, c, described))
        else:
            measures.append(Measure(r.string(name, mp).replace("_", " "), "count", table(mm["count"], mp + ("count",)), None,
                                    described))
    synonyms = []
    for word, alts in r.mapping(m.get("synonyms", {}), p + ("synonyms",), _keys(m.get("synonyms"))).items():
        sp = p + ("synonyms", word)
        synonyms.append((str(word), tuple(r.string(a, sp) for a in r.sequence(alts, sp))))
    terms = tuple((str(term), r.string(meaning, p + ("terms", term))) for term, meaning in
                  r.mapping(m.get("terms", {}), p + ("terms",), _keys(m.get("terms"))).items())
    currency = None if m.get("currency") is None else r.string(m["currency"], p + ("currency",))
    return Semantics(tuple(names), tuple(columns), tuple(measures), currency, tuple(synonyms), tuple(notes), terms,
                     _read_conventions(r, m.get("conventions"), p + ("conventions",)))


def _optional_text(r: _Reader, m: dict, key: str, path: tuple) -> str | None:
    return None if m.get(key) is None else r.string(m[key], path + (key,))


def _read_conventions(r: _Reader, raw: Any, path: tuple) -> Conventions:
    """``semantics.conventions`` (optional): how the pack's questions read, each key with its default."""
    if raw is None:
        return Conventions()
    m = r.mapping(raw, path, tuple(CONVENTIONS), (), "conventions key")
    given = {}
    for key, value in m.items():
        allowed = CONVENTIONS[key][1]
        text = r.string(value, path + (key,))
        if allowed is not None and text not in allowed:
            raise r.err(path + (key,), f"{key}: {text!r} is not one of {', '.join(allowed)}")
        given[key] = text
    return Conventions(**given)


def _read_questions(r: _Reader, raw: Any) -> QuestionPlan:
    """``questions:`` (optional): families to include or exclude, a maximum count, a difficulty mix."""
    if raw is None:
        return QuestionPlan()
    p = ("questions",)
    m = r.mapping(raw, p, QUESTIONS_KEYS, (), "questions key")
    # SPEC_FORMAT's form is `families: {include: [...], exclude: [...]}`; `include:`/`exclude:` directly under
    # `questions:` (this README's form until 2026-12-05) are read the same way; a spec gives one form or the other
    fp, lists = p, m
    if "families" in m:
        flat = [key for key in FAMILIES_KEYS if key in m]
        if flat:
            raise r.err(p + (flat[0],), f"`questions.{flat[0]}` and `questions.families` both choose families; "
                                        f"move it into `families:` ({{include: [...], exclude: [...]}})")
        fp = p + ("families",)
        lists = r.mapping(m["families"], fp, FAMILIES_KEYS, (), "families key")

    def kinds(key: str) -> tuple[str, ...]:
        out = []
        for i, kind in enumerate(r.sequence(lists.get(key, []), fp + (key,))):
            if kind not in KINDS:
                close = difflib.get_close_matches(str(kind), tuple(KINDS), n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else "the families are listed in README.md"
                raise r.err(fp + (key, i), f"unknown question family {kind!r}; {hint}")
            out.append(kind)
        return tuple(out)

    include, exclude = kinds("include"), kinds("exclude")
    both = sorted(set(include) & set(exclude))
    if both:
        raise r.err(fp + ("exclude",), f"{both} are both included and excluded; keep each family in one list")
    most = None if m.get("max") is None else r.integer(m["max"], p + ("max",), lo=1)
    raw_mix = m.get("difficulty", dict(DEFAULT_MIX))
    mix: tuple[tuple[str, float], ...] | None
    if raw_mix == "any":
        mix = None
    else:
        dp = p + ("difficulty",)
        if not isinstance(raw_mix, dict):
            raise r.err(dp, "expected a mapping of level to share, such as {simple: 0.3, moderate: 0.5, "
                            "challenging: 0.2}, or `any` to ship every question that verifies")
        shares = r.mapping(raw_mix, dp, LEVELS, (), "difficulty level")
        mix = tuple((level, float(r.number(shares.get(level, 0), dp + (level,), lo=0.0, hi=1.0)))
                    for level in LEVELS)
        if abs(sum(v for _, v in mix) - 1.0) > 1e-9:
            raise r.err(dp, f"the shares add up to {sum(v for _, v in mix):g}; make them add up to 1")
    unanswerable = float(r.number(m.get("unanswerable", 0.1), p + ("unanswerable",), lo=0.0, hi=0.5))
    return QuestionPlan(include, exclude, most, mix, unanswerable)


def _amount(r: _Reader, value: float, col: Column, table: str, path: tuple, what: str) -> int:
    """``value`` in units of ``col``'s decimals (half-even, as the planner rounds it), refused beyond
    MAX_UNITS: the planner and the generator sum amounts as int64 and split them in float64."""
    units = int(Decimal(str(value)).scaleb(col.decimals).to_integral_value(ROUND_HALF_EVEN))
    if abs(units) > MAX_UNITS:
        raise r.err(path, f"{what} {_number(value)} is beyond the largest amount {table}.{col.name} holds with {col.decimals} "
                    f"decimals, {Decimal(MAX_UNITS).scaleb(-col.decimals):,f} ({MAX_UNITS:,} units; evalpack's "
                    "limit); use a smaller amount or fewer decimals")
    return units


def _read_license(r: _Reader, value: Any) -> str:
    """``license:``, one of the Hub's identifiers (HUB_LICENSES), so the card's header is one the Hub indexes."""
    if isinstance(value, str) and value in HUB_LICENSES:
        return value
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    guess = re.sub(r"[\s_]+", "-", text.lower()).removesuffix("-license")
    close = [guess] if guess in HUB_LICENSES else difflib.get_close_matches(guess, HUB_LICENSES, n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`?" if close else "use `other` for a license the Hub does not list"
    raise r.err(("license",), f"license {_clip(text) if text else f'({_kind(value)})'} is not a Hugging Face Hub license "
                f"identifier; {hint} (the list: https://huggingface.co/docs/hub/repositories-licenses)")


def _read_repo(r: _Reader, value: Any) -> str | None:
    """``repo:``, the Hub repo id OWNER/NAME the pack is published as (the rule of ``evalpack publish --repo``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not REPO_ID_RE.fullmatch(value) or "--" in value or ".." in value:
        raise r.err(("repo",), f"repo {_clip(value) if isinstance(value, str) else f'({_kind(value)})'} is not a Hub repo "
                    "id: expected OWNER/NAME (letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters "
                    "each), e.g. repo: acme/retail-evalpack")
    return value


def _read_exports(r: _Reader, value: Any) -> tuple[str, ...]:
    """``exports:``, the formats built inside the pack (a list of EXPORT_FORMATS, each once), in that order."""
    if value is None:
        return ()
    given = r.sequence(value, ("exports",))
    for i, fmt in enumerate(given):
        if fmt not in EXPORT_FORMATS:
            raise r.err(("exports", i), f"export format {_kind(fmt) if not isinstance(fmt, str) else _clip(fmt)} is "
                        f"not one evalpack writes; use some of: {', '.join(EXPORT_FORMATS)}")
        if fmt in given[:i]:
            raise r.err(("exports", i), f"export format {fmt} is listed twice; list each format once")
    return tuple(f for f in EXPORT_FORMATS if f in given)




def read_near_miss(r: _Reader, raw: Any) -> dict:
    """The ``near_miss:`` mapping, its ``gate`` checked (its ``margin`` is read by :func:`read_margin`)."""
    near_miss = r.mapping(raw or {}, ("near_miss",), NEAR_MISS_KEYS)
    if near_miss.get("gate", "drop") not in NEAR_MISS_GATES:
        raise r.err(("near_miss", "gate"), "near_miss.gate is `drop` (leave out a question a plausible mistake "
                    f"passes on every rotation) or `keep` (ship it flagged), got {_kind(near_miss['gate'])}")
    return near_miss


MARGIN_RE = re.compile(r"\s*(\d+)\s*(?:months?)?\s*")


def read_margin(r: _Reader, raw: Any, tables: dict[str, Table]) -> dict[str, Table]:
    """``near_miss: {margin: {table.column: N months}}``: each such date column's range widened by N months on each
    side (as if its start and end said so), so that rows can lie just outside the declared months and a mistake at
    their edges fails (evalpack.data.plan's zones); ``tables`` with those columns widened."""
    path = ("near_miss", "margin")
    if raw is None:
        return tables
    if not isinstance(raw, dict):
        raise r.err(path, f"expected a mapping of table.column to a number of months (e.g. orders.placed_on: "
                          f"1 month), got {_kind(raw)}")
    for ref, value in raw.items():
        kp = path + (ref,)
        table_name, column_name = _split_ref(r, ref, kp)
        table = tables.get(table_name)
        col = table.column(column_name) if table else None
        if col is None or col.type not in ("date", "datetime"):
            raise r.err(kp, f"{ref} is not a date or datetime column of the spec; a margin widens such a column's range")
        found = MARGIN_RE.fullmatch(str(value)) if not isinstance(value, bool) else None
        months = int(found.group(1)) if found else 0
        if not 1 <= months <= 12:
            raise r.err(kp, f"a margin is 1 to 12 months (e.g. `1 month`), got {_clip(str(value))}")
        start, end = col.start or dt.date(2025, 1, 1), col.end or dt.date(2025, 12, 31)
        wider = replace(col, start=add_months(start.replace(day=1), -months),
                        end=add_months(end.replace(day=1), months + 1) - dt.timedelta(days=1), dated=True)
        tables[table_name] = replace(table, columns=tuple(wider if c.name == col.name else c for c in table.columns))
    return tables
