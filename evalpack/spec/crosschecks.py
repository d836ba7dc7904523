"""What no single section can check alone: names that lead nowhere, declarations that contradict each other,
row counts a rotation cannot hold."""

from __future__ import annotations

import bisect
import datetime as dt
import difflib
import math
from collections.abc import Callable
from decimal import Decimal

from evalpack.spec.declarations import _amount
from evalpack.spec.grammar import MAX_ROTATION_ROWS, MAX_TABLE_ROWS
from evalpack.spec.links import periods
from evalpack.spec.model import Column, OutcomeCurve, Relationship, SegmentShares, Spec, Table, add_months, month_start
from evalpack.spec.yamldoc import _clip, _Reader

Need = Callable[..., "Column | None"]  # a named table (and column) that must exist, of the types given
TimeAxis = Callable[[str, str, tuple], None]  # a table planned by month on one time column only
InRange = Callable[["Column", dt.date, tuple], None]  # a declared month inside the time column's range


def _check_relationships(r: _Reader, spec: Spec, rel_paths: list[tuple], tables: dict[str, Table], need: Need,
                         fk_targets: set[tuple[str, str]]) -> None:
    for p, rel in zip(rel_paths, spec.relationships):
        pcol = need(rel.parent_table, rel.parent_column, p, ("int", "text"))
        need(rel.child_table, rel.child_column, p, ("foreign_key",))
        if not pcol.unique:
            raise r.err(p, f"parent key {rel.parent_table}.{rel.parent_column} must be `unique: true`")
        if pcol.nullable:
            raise r.err(p, f"parent key {rel.parent_table}.{rel.parent_column} cannot be nullable")
        if (rel.child_table, rel.child_column) in fk_targets:
            raise r.err(p, f"{rel.child_table}.{rel.child_column} already has a parent")
        fk_targets.add((rel.child_table, rel.child_column))
        child_rows = tables[rel.child_table].rows
        if rel.orphans + rel.nulls > child_rows:
            raise r.err(p, f"orphans + nulls ({rel.orphans + rel.nulls}) exceed {rel.child_table}'s {child_rows} rows")


def _check_foreign_keys_have_parents(r: _Reader, spec: Spec, fk_targets: set[tuple[str, str]]) -> None:
    for t in spec.tables:
        for c in t.columns:
            if c.type == "foreign_key" and (t.name, c.name) not in fk_targets:
                raise r.err(("tables", t.name, "columns", c.name),
                            f"foreign key {t.name}.{c.name} has no relationship; add one under relationships: "
                            "(or give the column `references: <table>.<key>`)")


def _check_outcome_curves(r: _Reader, spec: Spec, need: Need, time_axis: TimeAxis, in_range: InRange, curves:
                          dict[tuple[str, str], OutcomeCurve]) -> None:
    for i, c in enumerate(spec.outcome_curves):
        p = ("outcome_curves", i)
        mcol = need(c.table, c.column, p + ("column",), ("float", "int"))
        for j, point in enumerate(c.points):
            _amount(r, point.value, mcol, c.table, p + ("curve_points", j), "the target")
        if c.avg_transaction_value is not None:
            avg = _amount(r, c.avg_transaction_value, mcol, c.table, p + ("avg_transaction_value",),
                          "avg_transaction_value")
            if avg < 1:
                raise r.err(p + ("avg_transaction_value",), f"avg_transaction_value {c.avg_transaction_value} rounds "
                            f"to 0 at {c.column}'s {mcol.decimals} decimals; give at least one unit "
                            f"({Decimal(1).scaleb(-mcol.decimals)})")
        tcol = need(c.table, c.time_column, p + ("time_column",), ("date", "datetime"))
        time_axis(c.table, c.time_column, p)
        if (c.table, c.column) in curves:
            raise r.err(p, f"{c.table}.{c.column} already has an outcome curve")
        if any(oc.table == c.table for oc in curves.values()):
            raise r.err(p, f"table '{c.table}' already has an outcome curve; evalpack plans one measure per table")
        curves[(c.table, c.column)] = c
        for j, point in enumerate(c.points):
            in_range(tcol, point.month, p + ("curve_points", j))
        if any(w.table == c.table for w in spec.waterfalls):
            raise r.err(p, f"table '{c.table}' holds a waterfall; a table takes one or the other")


def _check_rate_curves(spec: Spec, need: Need, time_axis: TimeAxis, in_range: InRange) -> None:
    for i, c in enumerate(spec.rate_curves):
        p = ("rate_curves", i)
        need(c.table, c.column, p + ("column",), ("boolean",))
        tcol = need(c.table, c.time_column, p + ("time_column",), ("date", "datetime"))
        time_axis(c.table, c.time_column, p)
        for j, point in enumerate(c.points):
            in_range(tcol, point.month, p + ("rate_points", j))


def _check_group_shares(r: _Reader, spec: Spec, need: Need, curves: dict[tuple[str, str], OutcomeCurve]) -> None:
    for i, g in enumerate(spec.group_shares):
        p = ("group_shares", i)
        gcol = need(g.table, g.group_column, p + ("group_column",), ("categorical",))
        need(g.table, g.measure, p + ("measure",))
        if (g.table, g.measure) not in curves:
            raise r.err(p, f"group_shares on {g.table}.{g.measure} needs an outcome curve on the same table and "
                        "measure; add one under outcome_curves:")
        earlier = next((j for j, o in enumerate(spec.group_shares[:i]) if o.table == g.table), None)
        if earlier is not None:  # the plan splits a table's curve by one column: a second split would be ignored
            raise r.err(p, f"table '{g.table}' already has group_shares (group_shares[{earlier}], by "
                        f"{spec.group_shares[earlier].group_column}); evalpack splits a curve's measure one way: keep "
                        "one of them")
        unknown = [k for k, _ in g.shares if k not in gcol.choices]
        if unknown:
            raise r.err(p + ("shares",), f"{unknown} are not choices of {g.table}.{g.group_column} "
                        f"({', '.join(gcol.choices)})")


def _check_segment_shares(r: _Reader, spec: Spec, need: Need, curves: dict[tuple[str, str], OutcomeCurve]) -> None:
    for i, g in enumerate(spec.segment_shares):
        p = ("segment_shares", i)
        by = r.written(p + ("by",))
        need(g.table, g.measure, p + ("measure",))
        bcol = need(g.by_table, g.by_column, by, ("date", "datetime") if g.grain else ("categorical",))
        if (g.table, g.measure) not in curves:
            raise r.err(p, f"segment_shares on {g.table}.{g.measure} needs an outcome curve on the same table and "
                        "measure; add one under outcome_curves:")
        if any(o.table == g.table for o in spec.segment_shares[:i]):
            raise r.err(p, f"table '{g.table}' already has segment_shares; evalpack splits a measure one way")
        route = segment_path(spec, g)
        if route is None:
            raise r.err(by, f"{g.by_table} is not a parent of {g.table}, nor a parent of one of its "
                        f"parents, through one relationship each; segment by a column of a table {g.table} reaches "
                        "through its foreign keys")
        first, via = route[0], r.vias.get(p)
        if via and via.column != (first.child_table, first.child_column):
            need(*via.column, p + ("via",), ("foreign_key",))
            reach = "" if first.parent_table == g.by_table else f", through which {g.table} reaches {g.by_table}"
            raise r.err(p + ("via",), f"{'.'.join(via.column)} is a foreign key to {_parent_of(spec, via.column)}, "
                        f"not to {first.parent_table}{reach} (`{by[-1]}: {g.by_table}.{g.by_column}`); write "
                        f"`via: {first.child_table}.{first.child_column}`")
        labels = segment_labels(bcol, g.grain)
        unknown = [k for k, _ in g.shares if k not in labels]
        if unknown:
            what = f"{g.grain}s of {g.by_table}.{g.by_column}'s range" if g.grain else \
                f"choices of {g.by_table}.{g.by_column}"
            raise r.err(p + ("shares",), f"{unknown} are not {what} ({_clip(', '.join(labels), 200, quote=False)})")


def _check_per_parent(r: _Reader, spec: Spec, pp_paths: list[tuple], need: Need) -> None:
    for i, (p, pp) in enumerate(zip(pp_paths, spec.per_parent)):
        need(pp.child_table, pp.child_column, r.written(p + ("child",)) if p[0] == "per_parent" else p,
             ("foreign_key",))
        via = r.vias.get(p)
        if via and via.parent != (parent := _parent_of(spec, via.column)):
            raise r.err(p + ("parent",), f"{'.'.join(via.column)} is a foreign key to {parent}, not to {via.parent}; "
                        f"write `parent: {parent}`, or name a foreign key of {pp.child_table} to {via.parent} in "
                        f"`{r.written(p + ('child',))[-1]}`")
        if any((o.child_table, o.child_column) == (pp.child_table, pp.child_column) for o in spec.per_parent[:i]):
            raise r.err(p, f"{pp.child_table}.{pp.child_column} already has per_parent counts")
        if any(led.table == pp.child_table for led in spec.ledgers):
            raise r.err(p, f"{pp.child_table} is a balanced ledger, whose groups decide its keys; drop "
                        f"{'per_parent' if p[0] == 'per_parent' else 'min_children'}")


def _check_waterfalls(r: _Reader, spec: Spec, tables: dict[str, Table], need: Need, time_axis: TimeAxis, in_range:
                      InRange) -> None:
    for i, w in enumerate(spec.waterfalls):
        p = ("waterfalls", i)
        acol = need(w.table, w.amount_column, p + ("amount_column",))
        if acol.type != "float":
            raise r.err(p + ("amount_column",), f"{w.table}.{w.amount_column} is a {acol.type} column; Misata writes "
                        "amounts with cents into it whatever its type, evalpack needs a float column: write "
                        f"`{w.amount_column}: {{type: float, min: 0, decimals: 2}}`")
        _amount(r, w.starting_value, acol, w.table, p + ("starting_value",), "starting_value")
        for j, point in enumerate(w.points):
            _amount(r, point.ending_value, acol, w.table, p + ("points", j, "ending_value"), "ending_value")
        tcol = need(w.table, w.type_column, p + ("type_column",))
        if tcol.type not in ("categorical", "text"):
            raise r.err(p + ("type_column",), f"{w.table}.{w.type_column} is a {tcol.type} column; Misata writes the "
                        "movement type labels into it whatever its type, evalpack needs a categorical column (with "
                        f"the labels as choices) or a text one: write `{w.type_column}: {{type: categorical, choices: "
                        f"[{', '.join(k for k, _ in w.inflow_shares + w.outflow_shares)}]}}`")
        pcol = need(w.table, w.period_column, p + ("period_column",))
        if pcol.type not in ("date", "datetime", "text"):
            raise r.err(p + ("period_column",), f"{w.table}.{w.period_column} is a {pcol.type} column; Misata writes "
                        "each point's period label ('2025-01') into it whatever its type, evalpack needs a date or "
                        "datetime column (rows dated inside their month) or a text one (the 'YYYY-MM' label): write "
                        f"`{w.period_column}: {{type: text}}`")
        time_axis(w.table, w.period_column, p)
        missing = [k for k, _ in w.inflow_shares + w.outflow_shares if tcol.type == "categorical" and k not in tcol.choices]
        if missing:
            raise r.err(p, f"movement types {missing} are not choices of {w.table}.{w.type_column}")
        for j, point in enumerate(w.points):
            if pcol.type != "text":
                in_range(pcol, point.month, p + ("points", j))
        if any(other.table == w.table for other in spec.waterfalls[:i]):
            raise r.err(p, f"table '{w.table}' already holds a waterfall")
        if tables[w.table].column(w.amount_column).nullable:
            raise r.err(p + ("amount_column",), "a waterfall amount cannot be nullable")


def _check_time_grids(r: _Reader, spec: Spec, need: Need, axis: dict[str, tuple[str, tuple]]) -> None:
    for i, g in enumerate(spec.time_grids):
        p = ("time_grids", i)
        need(g.table, g.column, p + ("column",), ("datetime",))
        if axis.get(g.table, (None,))[0] == g.column:
            raise r.err(p, f"{g.table}.{g.column} is the time column of a curve; a time_grid there would move "
                        "rows across period boundaries. Put the grid on another datetime column")


def _check_per_parent_time_axis(r: _Reader, spec: Spec, pp_paths: list[tuple],
                                axis: dict[str, tuple[str, tuple]]) -> None:
    for p, pp in zip(pp_paths, spec.per_parent):
        if pp.per and pp.child_table not in axis:
            raise r.err(p + ("per",), f"per: {pp.per} counts {pp.child_table} rows in each {pp.per} of its curve, "
                        f"and {pp.child_table} has none; give it an outcome_curves entry or drop per")


def _check_ledgers(r: _Reader, spec: Spec, rel_paths: list[tuple], tables: dict[str, Table], need: Need, axis:
                   dict[str, tuple[str, tuple]]) -> None:
    for i, led in enumerate(spec.ledgers):
        p = led.path or ("constraints", i)
        for col in led.group_by:
            if need(led.table, col, p + ("group_by",), ("int", "text", "foreign_key", "categorical")).unique:
                raise r.err(p + ("group_by",), f"{led.table}.{col} is unique, so no two lines could share a "
                            "group; group a ledger by a column that repeats")
        need(led.table, led.debit_column, p + ("debit_column",), ("float",))
        need(led.table, led.credit_column, p + ("credit_column",), ("float",))
        if len(led.group_by) != 1:
            raise r.err(p + ("group_by",), "evalpack balances ledgers grouped by one column")
        if any(o.table == led.table for o in spec.ledgers[:i]):
            raise r.err(p, f"table '{led.table}' already has a balanced ledger")
        if led.table in axis or led.table in {c.table for c in spec.outcome_curves}:
            raise r.err(p, f"table '{led.table}' is already planned by a curve; a ledger table takes no curve")
        t = tables[led.table]
        for name in (led.debit_column, led.credit_column):
            col = t.column(name)
            if col.nullable:
                raise r.err(p, f"ledger column {led.table}.{name} cannot be nullable")
            if col.min is not None and col.min > 0:
                raise r.err(("tables", led.table, "columns", name, "min"),
                            f"every ledger line leaves one side at 0, so {led.table}.{name} needs min 0 (or none)")
            if col.decimals != led.decimals:
                raise r.err(p + ("decimals",), f"ledger decimals {led.decimals} differ from {led.table}.{name}'s "
                            f"{col.decimals}")
        if t.rows < 2:
            raise r.err(p, f"a balanced ledger needs at least 2 rows in {led.table}")
        for rp, rel in zip(rel_paths, spec.relationships):
            if (rel.child_table, rel.child_column) == (led.table, led.group_by[0]) and 1 in (rel.orphans, rel.nulls):
                raise r.err(rp, f"{led.table}.{led.group_by[0]} groups a balanced ledger: "
                            "orphans and nulls there must be 0 or at least 2 (each group balances)")


def _check_references(r: _Reader, spec: Spec, rel_paths: list[tuple], pp_paths: list[tuple]) -> None:
    """Refuse names that lead nowhere and declarations that contradict each other. ``rel_paths`` and
    ``pp_paths``: the key path of each relationship and per_parent entry (see _implied), for messages."""
    tables = {t.name: t for t in spec.tables}

    def need(table: str, column: str | None, path: tuple, types: tuple[str, ...] | None = None) -> Column | None:
        if table not in tables:
            close = difflib.get_close_matches(table, list(tables), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else "; declare it under tables:"
            raise r.err(path, f"unknown table '{table}'{hint}")
        if column is None:
            return None
        col = tables[table].column(column)
        if col is None:
            names = [c.name for c in tables[table].columns]
            close = difflib.get_close_matches(column, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; columns are {', '.join(names)}"
            raise r.err(path, f"table '{table}' has no column '{column}'{hint}")
        if types and col.type not in types:
            raise r.err(path, f"{table}.{column} is a {col.type} column; this needs {' or '.join(types)}")
        return col

    fk_targets: set[tuple[str, str]] = set()

    axis: dict[str, tuple[str, tuple]] = {}

    def time_axis(table: str, column: str, path: tuple) -> None:
        if table in axis and axis[table][0] != column:
            raise r.err(path, f"table '{table}' is already planned by month on '{axis[table][0]}'; "
                        f"use the same time column")
        axis[table] = (column, path)

    def in_range(col: Column, month: dt.date, path: tuple) -> None:
        if month < month_start(col.start) or month > col.end:
            if not col.dated:
                raise r.err(path, f"{month:%Y-%m} is outside the time column {col.name}'s range, which is 2025 as it "
                            "declares no start or end: Misata dates the rows inside the declared months; write the "
                            f"range on the column: start: \"{month_start(month)}\" (or earlier) and an end on or after the last "
                            "declared month's last day")
            raise r.err(path, f"{month:%Y-%m} is outside the time column's range {col.start} to {col.end}; "
                        "move the point or widen the column's start/end")

    curves = {}

    _check_relationships(r, spec, rel_paths, tables, need, fk_targets)
    _check_foreign_keys_have_parents(r, spec, fk_targets)
    _check_outcome_curves(r, spec, need, time_axis, in_range, curves)
    _check_rate_curves(spec, need, time_axis, in_range)
    _check_group_shares(r, spec, need, curves)
    _check_segment_shares(r, spec, need, curves)
    _check_per_parent(r, spec, pp_paths, need)
    _check_waterfalls(r, spec, tables, need, time_axis, in_range)
    _check_time_grids(r, spec, need, axis)
    _check_per_parent_time_axis(r, spec, pp_paths, axis)
    _check_ledgers(r, spec, rel_paths, tables, need, axis)


def _parent_of(spec: Spec, column: tuple[str, str]) -> str | None:
    """The table the foreign key ``column`` (table, column) leads to; None when it is no foreign key."""
    return next((rel.parent_table for rel in spec.relationships if (rel.child_table, rel.child_column) == column), None)


def segment_labels(col: Column, grain: str | None) -> tuple[str, ...]:
    """The labels a segment column carries: its choices, or with ``grain`` the calendar periods its range meets
    (``2024-Q1``, ``2024-03``, ``2024``; evalpack.spec.links.periods)."""
    return tuple(label for label, _, _ in periods(col.start, col.end, grain)) if grain else col.choices


def segment_path(spec: Spec, g: SegmentShares) -> tuple[Relationship, ...] | None:
    """The relationships from ``g.table`` up to ``g.by_table``: the table's own foreign key to it, or its
    foreign key to a parent and that parent's to it. None when there is no such path or more than one."""
    up = [rel for rel in spec.relationships if rel.child_table == g.table]
    direct = [(rel,) for rel in up if rel.parent_table == g.by_table]
    chains = [(rel, nxt) for rel in up for nxt in spec.relationships
              if nxt.child_table == rel.parent_table and nxt.parent_table == g.by_table and rel.parent_table != g.table]
    paths = direct or chains
    return paths[0] if len(paths) == 1 else None


ROWS_LIMIT = " rows (evalpack's limit per table and rotation, which bounds a pack's disk use); lower rows"


def _unique_ignoring_case(r: _Reader, name: str, seen: dict[str, str], path: tuple, what: str, parent: tuple) -> None:
    """Refuse ``name`` when an earlier name of ``seen`` differs from it only by case: DuckDB matches
    names without regard to case, so both would name one table (or column)."""
    other = seen.setdefault(name.lower(), name)
    if other != name:
        raise r.err(path, f"{what} '{name}' differs from {what} '{other}' (line {r.line(parent + (other,))}) only by "
                    "case, and SQL names ignore case; rename one of them")


def _rotation_rows(r: _Reader, spec: Spec) -> None:
    """Refuse a rotation of more than MAX_ROTATION_ROWS rows, or a table whose outcome curve's
    avg_transaction_value plans more than MAX_TABLE_ROWS (rows = each month's total / the average)."""
    rows = {t.name: t.rows for t in spec.tables}
    slack = 1.1 if spec.answers == "rotated" else 1.0  # rotated answers move each target by up to 8%
    for i, c in enumerate(spec.outcome_curves):
        if not c.avg_transaction_value or c.table not in rows:
            continue
        first, last = c.points[0].month, c.points[-1].month
        months = [add_months(first, i) for i in range((last.year - first.year) * 12 + last.month - first.month + 1)]
        values = dict((p.month, p.value) for p in c.points)
        known = sorted(values)
        planned = 0.0
        for m in months:  # each month's total, interpolated linearly between the points around it
            before, after = known[bisect.bisect_right(known, m) - 1], known[bisect.bisect_left(known, m)]
            span = (after.year - before.year) * 12 + after.month - before.month
            at = (m.year - before.year) * 12 + m.month - before.month
            total = values[before] + (values[after] - values[before]) * (at / span if span else 0)
            planned += max(1.0, total * slack / c.avg_transaction_value)
        if planned > MAX_TABLE_ROWS:
            raise r.err(("outcome_curves", i, "avg_transaction_value"),
                        f"avg_transaction_value {c.avg_transaction_value} plans about {planned:,.0f} rows of {c.table} "
                        f"(each month's total / the average); a table holds at most {MAX_TABLE_ROWS:,} rows per "
                        "rotation (evalpack's limit); raise avg_transaction_value or lower the targets")
        rows[c.table] = max(rows[c.table], math.ceil(planned))
    total = 0
    for t in spec.tables:
        total += rows[t.name]
        if total > MAX_ROTATION_ROWS:
            raise r.err(("tables", t.name, "rows"), f"the tables hold {sum(rows.values()):,} rows per rotation in all; "
                        f"a rotation holds at most {MAX_ROTATION_ROWS:,} rows (evalpack's limit, which bounds a pack's "
                        "disk use); lower rows")


