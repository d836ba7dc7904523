"""Property tests of the generator: over generated valid specs, every declared fact holds exactly in the
written Parquet and CSV of every rotation, queried with DuckDB.

The expected values are computed here from the declarations themselves (exact linear interpolation,
half-even rounding to cents, shares, rates, declared orphans and nulls), not read back from the plan,
except where the spec leaves a choice to the planner (how many rows fall in each month).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from evalpack.build import write_rotations
from evalpack.cli import main
from evalpack.data.plan import plan_pack
from evalpack.data.tables import connect_tables, duckdb_types
from evalpack.spec.model import Spec
from evalpack.spec.reader import parse_spec

# A fixed set of examples in CI; EVALPACK_EXPLORE=N runs N fresh random examples instead.
EXPLORE = int(os.environ.get("EVALPACK_EXPLORE", "0"))
# Shrinking a failing spec can take minutes; EVALPACK_SHRINK=1 turns it on when debugging one.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if os.environ.get("EVALPACK_SHRINK") else [])
SETTINGS = settings(max_examples=EXPLORE or 25, deadline=None, derandomize=not EXPLORE, database=None, phases=PHASES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- exact arithmetic


def half_even(value: Fraction) -> int:
    """``value`` rounded to an integer, halves to even."""
    floor = value.numerator // value.denominator
    rest = value - floor
    return floor + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2) else 0)


def interpolate(points: dict[int, Fraction], n: int) -> list[Fraction]:
    """Exact linear interpolation between ``{index: value}`` over indices 0..n-1 (held flat outside)."""
    keys = sorted(points)
    out = []
    for i in range(n):
        a = max((k for k in keys if k <= i), default=keys[0])
        b = min((k for k in keys if k >= i), default=keys[-1])
        out.append(points[a] if a == b else points[a] + (points[b] - points[a]) * Fraction(i - a, b - a))
    return out


def add_months(day: dt.date, n: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + n
    return dt.date(index // 12, index % 12 + 1, 1)


def last_day(month: dt.date) -> dt.date:
    return add_months(month, 1) - dt.timedelta(days=1)


def money(units: int, decimals: int = 2) -> str:
    """Integer units as decimal text for YAML (``123456`` -> ``1234.56``)."""
    return str(Decimal(units).scaleb(-decimals))


def dec(units: int, decimals: int = 2) -> Decimal:
    return Decimal(units).scaleb(-decimals)


# --------------------------------------------------------------------------- generated specs


@dataclass(frozen=True)
class CurveModel:
    """What a generated curve spec declares, kept beside its YAML to compute expectations."""

    text: str
    time_type: str
    time_column: str
    months: tuple[dt.date, ...]
    points: tuple[tuple[int, int], ...]  # (index into months, cents)
    rows: int
    shares: tuple[tuple[str, Fraction], ...]  # empty: no group_shares
    rate_points: tuple[tuple[int, Fraction], ...]  # empty: no rate curve
    relationship: tuple[int, int] | None  # (orphans, nulls)
    grid: tuple[int, int, int] | None  # (minute_grid, first hour, end hour) on customers.signed_up_at
    orphans_inside: bool = False  # the time column leaves no room outside the declared months


LABELS = ("web", "app", "store", "phone")


@st.composite
def curve_specs(draw) -> CurveModel:
    seed = draw(st.integers(0, 10_000))
    time_type = draw(st.sampled_from(["date", "datetime"]))
    first = dt.date(draw(st.integers(2023, 2026)), draw(st.integers(1, 12)), 1)
    npoints = draw(st.integers(1, 6))
    span = 1 if npoints == 1 else draw(st.integers(npoints, 9))
    inner = draw(st.lists(st.integers(1, span - 2), min_size=npoints - 2, max_size=npoints - 2, unique=True)) \
        if npoints > 2 else []
    indices = sorted({0, span - 1} | set(inner)) if npoints > 1 else [0]
    months = tuple(add_months(first, i) for i in range(span))
    cents = [draw(st.integers(100_000, 500_000)) for _ in indices]

    with_rel = draw(st.booleans())
    orphans = draw(st.integers(0, 5)) if with_rel else 0
    nulls = draw(st.integers(0, 5)) if with_rel else 0
    # no gap on either side: the time column's range is the curve's months, so the orphans go inside them
    gap_before = draw(st.integers(0, 2))
    gap_after = draw(st.integers(0, 2))
    # the time column's range: whole months around the window, or starting/ending inside its edge months
    col_start = add_months(first, -gap_before).replace(day=draw(st.sampled_from([1, 1, 2, 15, 28])))
    col_end = last_day(add_months(months[-1], gap_after))
    col_end = max(col_start, col_end.replace(day=draw(st.sampled_from([col_end.day, col_end.day, 1, 14,
                                                                        col_end.day - 1]))))

    groups = draw(st.integers(0, 3))
    shares: list[tuple[str, Fraction]] = []
    if groups:
        # shares in twentieths, each at least 4/20
        parts = [4] * groups
        for i in draw(st.lists(st.integers(0, groups - 1), min_size=20 - 4 * groups, max_size=20 - 4 * groups)):
            parts[i] += 1
        shares = [(LABELS[i], Fraction(p, 20)) for i, p in enumerate(parts)]
    extra_choice = groups > 0 and draw(st.booleans())

    rate_points: list[tuple[int, Fraction]] = []
    if draw(st.booleans()):
        k = draw(st.integers(1, min(3, span)))
        at = sorted(draw(st.lists(st.integers(0, span - 1), min_size=k, max_size=k, unique=True)))
        rate_points = [(i, Fraction(draw(st.integers(0, 500)), 1000)) for i in at]

    # two rows per group per month, plus the rows planted outside the window (a few sentinels per side
    # with room, and the orphans); generous, so every drawn spec is one the planner must accept
    room = col_start < first or col_end >= add_months(months[-1], 1)
    zone = (2 * max(groups, 2) if gap_before else 0) + (2 * max(groups, 2) if gap_after else 0) + (
        orphans if room else 0)
    min_rows = max(2 * max(groups, 1) * span, nulls + (0 if room else orphans)) + zone  # missing parents: inside
    rows = draw(st.integers(min_rows, min_rows + 120))
    measure_min = draw(st.sampled_from([None, "0", "0.5", "1"]))
    measure_max = draw(st.sampled_from([None, "10000", "25000.5"]))
    measure_nullable = draw(st.sampled_from([None, "0.1"]))
    grid = None
    if with_rel and draw(st.booleans()):
        g = draw(st.sampled_from([5, 15, 30, 60]))
        h0 = draw(st.integers(0, 20))
        grid = (g, h0, draw(st.integers(h0 + 1, 24)))

    tcol = draw(st.sampled_from(["ordered_at", "booked_on"]))
    lines = [f"name: prop_{time_type}", f"seed: {seed}", "rotations: 2", "tables:"]
    if with_rel:
        prows = draw(st.integers(1, 40))
        key = draw(st.sampled_from(["int", "int_max", "uuid", "email"]))
        kmin = draw(st.integers(-50, 1000))
        key_decl = {
            "int": f"{{type: int, unique: true, min: {kmin}}}",
            "int_max": f"{{type: int, primary_key: true, min: {kmin}, max: {kmin + prows + 10}}}",
            "uuid": "{type: uuid, unique: true}",
            "email": "{type: text, text_type: email, unique: true}",
        }[key]
        lines += [
            "  customers:",
            f"    rows: {prows}",
            "    columns:",
            f"      customer_id: {key_decl}",
            "      name: {type: text, text_type: name}",
            "      tier: {type: categorical, choices: [gold, silver, bronze], weights: [1, 3, 6]}",
            "      score: {type: int, min: -5, max: 5, nullable: 0.2}",
            "      balance: {type: float, min: -100, max: 100.5, decimals: 3}",
            '      signed_up_at: {type: datetime, start: "2022-01-01", end: "2022-12-31"}',
        ]
    choices = [lbl for lbl, _ in shares] + (["other"] if extra_choice else [])
    lines += ["  orders:", f"    rows: {rows}", "    columns:", "      order_id: {type: int, unique: true, min: 1}"]
    if with_rel:
        lines.append("      customer_id: {type: foreign_key}")
    if shares:
        lines.append(f"      channel: {{type: categorical, choices: [{', '.join(choices)}]}}")
    bounds = "".join(f", {k}: {v}" for k, v in (("min", measure_min), ("max", measure_max),
                                                  ("nullable", measure_nullable)) if v is not None)
    lines.append(f"      amount: {{type: float, decimals: 2{bounds}}}")
    if rate_points:
        lines.append("      refunded: {type: boolean}")
    lines += [
        "      qty: {type: int, min: 1, max: 9}",
        "      note: {type: text, text_type: sentence, nullable: 0.3}",
        f'      {tcol}: {{type: {time_type}, start: "{col_start}", end: "{col_end}"}}',
    ]
    if with_rel:
        if orphans or nulls or draw(st.booleans()):
            lines += ["relationships:", "  - {parent: customers.customer_id, child: orders.customer_id, "
                      f"orphans: {orphans}, nulls: {nulls}}}"]
        else:
            lines += ["relationships:", "  - customers.customer_id -> orders.customer_id"]

    # the curve: points placed by month (from a start_date), date or period; values under any spelling
    offset = draw(st.integers(0, 2))
    start_date = add_months(first, -offset).replace(day=draw(st.integers(1, 28)))
    lines += ["outcome_curves:", "  - table: orders", "    column: amount", f"    time_column: {tcol}",
              f'    start_date: "{start_date}"', "    curve_points:"]
    for i, c in zip(indices, cents):
        how = draw(st.sampled_from(["month", "date", "period"]))
        place = {"month": f"month: {i + offset + 1}",
                 "date": f'date: "{months[i].replace(day=draw(st.integers(1, 28)))}"',
                 "period": f'period: "{months[i]:%Y-%m}"'}[how]
        value_key = draw(st.sampled_from(["target_value", "value", "target", "amount"]))
        lines.append(f"      - {{{place}, {value_key}: {money(c)}}}")
    if shares:
        body = ", ".join(f"{lbl}: {float(s)}" for lbl, s in shares)
        lines += ["group_shares:", f"  - {{table: orders, measure: amount, group_column: channel, shares: {{{body}}}}}"]
    if rate_points:
        lines += ["rate_curves:", "  - table: orders", "    column: refunded", f"    time_column: {tcol}",
                  "    rate_points:"]
        for i, r in rate_points:
            place = draw(st.sampled_from([f'period: "{months[i]:%Y-%m}"', f'date: "{months[i].replace(day=15)}"']))
            lines.append(f"      - {{{place}, rate: {float(r)}}}")
    if grid:
        lines += ["time_grids:", f"  - {{table: customers, column: signed_up_at, minute_grid: {grid[0]}, "
                  f"hours: [{grid[1]}, {grid[2]}]}}"]
    return CurveModel("\n".join(lines) + "\n", time_type, tcol, months, tuple(zip(indices, cents)), rows,
                      tuple(shares), tuple(rate_points), (orphans, nulls) if with_rel else None, grid,
                      orphans_inside=not room)


@dataclass(frozen=True)
class LedgerModel:
    text: str
    orphans: int
    nulls: int
    with_fk: bool
    waterfall: tuple | None  # (months, start units, ending units, outflow rate, inflow shares, outflow shares)


@st.composite
def ledger_specs(draw) -> LedgerModel:
    seed = draw(st.integers(0, 10_000))
    with_fk = draw(st.booleans())
    erows = draw(st.integers(2, 40))
    orphans = draw(st.sampled_from([0, 2, 3, 4])) if with_fk else 0
    nulls = draw(st.sampled_from([0, 2, 3])) if with_fk else 0
    lrows = draw(st.integers(2 + orphans + nulls, 150))
    dmax = draw(st.sampled_from(["25000", "5000", "60"]))
    cmax = draw(st.sampled_from(["25000", "5000", "60"]))
    cmin = draw(st.sampled_from(["", "min: 0, ", "min: -10, "]))
    gmin = draw(st.integers(-20, 5000))
    group_decl = "{type: foreign_key}" if with_fk else draw(st.sampled_from([
        f"{{type: int, min: {gmin}, max: {gmin + draw(st.integers(0, 60))}}}", f"{{type: int, min: {gmin}}}",
        "{type: categorical, choices: [a, b, c, d]}", "{type: text}"]))
    decimals = draw(st.sampled_from([2, 2, 0]))
    lines = [f"name: ledger{seed}", f"seed: {seed}", "rotations: 2", "tables:"]
    if with_fk:
        lines += ["  entries:", f"    rows: {erows}", "    columns:",
                  f"      entry_id: {{type: int, unique: true, min: {draw(st.integers(1, 5000))}}}",
                  '      posted_on: {type: date, start: "2025-01-01", end: "2025-03-31"}']
    lines += ["  lines:", f"    rows: {lrows}", "    columns:", "      line_id: {type: int, unique: true, min: 1}",
              f"      entry_id: {group_decl}",
              "      account: {type: categorical, choices: [cash, revenue, payables]}",
              f"      debit: {{type: float, min: 0, max: {dmax}, decimals: {decimals}}}",
              f"      credit: {{type: float, {cmin}max: {cmax}, decimals: {decimals}}}"]
    constraint = ("{name: double_entry, type: balanced_ledger, group_by: [entry_id], debit_column: debit, "
                  f"credit_column: credit, decimals: {decimals}")
    top_level = draw(st.booleans())
    if not top_level:
        lines += ["    constraints:", f"      - {constraint}}}"]

    waterfall = None
    if draw(st.booleans()):
        first = dt.date(draw(st.integers(2024, 2026)), draw(st.integers(1, 12)), 1)
        n = draw(st.integers(1, 6))
        months = tuple(add_months(first, i) for i in range(n))
        start = draw(st.integers(1_000_000, 5_000_000))
        endings, prev = [], start
        for _ in months:
            prev = max(0, prev + draw(st.integers(-prev // 12, prev // 12)))
            endings.append(prev)
        rate = draw(st.sampled_from(["0", "0.03", "0.1"]))
        inflow = draw(st.sampled_from([(("new", Fraction(13, 20)), ("expansion", Fraction(7, 20))),
                                       (("new", Fraction(1)),)]))
        outflow = (("contraction", Fraction(3, 10)), ("churn", Fraction(7, 10)))
        wrows = draw(st.integers(4 * n + 8, 4 * n + 60))  # a row per type per month, 4 sentinels per side
        period_type = draw(st.sampled_from(["date", "datetime"]))
        lines += ["  mrr:", f"    rows: {wrows}", "    columns:", "      movement_id: {type: int, unique: true, min: 1}",
                  f'      period: {{type: {period_type}, start: "{add_months(first, -1)}", '
                  f'end: "{last_day(add_months(months[-1], 1))}"}}',
                  "      movement_type: {type: categorical, choices: [new, expansion, contraction, churn]}",
                  "      amount: {type: float, min: -100000, max: 100000, decimals: 2}"]
        waterfall = (months, start, tuple(endings), rate, inflow, outflow)
    if with_fk:
        if orphans or nulls:
            lines += ["relationships:", "  - {parent: entries.entry_id, child: lines.entry_id, "
                      f"orphans: {orphans}, nulls: {nulls}}}"]
        else:
            lines += ["relationships:", "  - entries.entry_id -> lines.entry_id"]
    if top_level:
        lines += ["constraints:", f"  - {constraint}, table: lines}}"]
    if waterfall:
        months, start, endings, rate, inflow, outflow = waterfall
        ins = ", ".join(f"{k}: {float(v)}" for k, v in inflow)
        outs = ", ".join(f"{k}: {float(v)}" for k, v in outflow)
        lines += ["waterfalls:", "  - table: mrr", "    period_column: period", "    type_column: movement_type",
                  "    amount_column: amount", f"    starting_value: {money(start)}", f"    outflow_rate: {rate}",
                  f"    inflow_shares: {{{ins}}}", f"    outflow_shares: {{{outs}}}", "    points:"]
        lines += [f'      - {{period: "{m:%Y-%m}", ending_value: {money(e)}}}' for m, e in zip(months, endings)]
    return LedgerModel("\n".join(lines) + "\n", orphans, nulls, with_fk, waterfall)


# --------------------------------------------------------------------------- writing and reading


def write(spec: Spec, folder: Path) -> tuple:
    plans = plan_pack(spec)
    write_rotations(spec, plans, folder, jobs=1)
    return plans


FORMATS = ("parquet", "csv")


def load(spec: Spec, folder: Path) -> duckdb.DuckDBPyConnection:
    """One connection holding every rotation's tables twice, read from Parquet and from CSV (with the
    pinned column types), each (format, rotation) in its own schema; see ``rotations``."""
    con = duckdb.connect()
    for seed in spec.seeds():
        tables = folder / "rotations" / f"seed_{seed}" / "tables"
        for fmt in FORMATS:
            con.execute(f"CREATE SCHEMA {fmt}_{seed}; USE {fmt}_{seed}")
            connect_tables(tables, fmt=fmt, con=con, types=duckdb_types(spec) if fmt == "csv" else None)
            for table in spec.tables:  # load once: a CSV view would re-parse its file on every query
                con.execute(f'CREATE TABLE "_{table.name}" AS SELECT * FROM "{table.name}"')
                con.execute(f'DROP VIEW "{table.name}"')
                con.execute(f'ALTER TABLE "_{table.name}" RENAME TO "{table.name}"')
    return con


def rotations(con: duckdb.DuckDBPyConnection, spec: Spec):
    """Switch ``con`` to each rotation in each format in turn, yielding (seed, format)."""
    for seed in spec.seeds():
        for fmt in FORMATS:
            con.execute(f"USE {fmt}_{seed}")
            yield seed, fmt


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def lit(day: dt.date, time_type: str) -> str:
    return f"DATE '{day}'" if time_type == "date" else f"TIMESTAMP '{day} 00:00:00'"


def check_columns(spec: Spec, con: duckdb.DuckDBPyConnection, where: tuple) -> None:
    """Every column within its declaration: rows, min/max, unique, NULLs, date range, choices, time grid."""
    for table in spec.tables:
        t = f'"{table.name}"'
        parts = []
        for col in table.columns:
            c = f'"{col.name}"'
            parts += [f"MIN({c})", f"MAX({c})", f"COUNT({c})", f"COUNT(DISTINCT {c})",
                      f"LIST(DISTINCT {c})" if col.type == "categorical" else "NULL"]
        stats = con.execute(f"SELECT COUNT(*), {', '.join(parts)} FROM {t}").fetchone()
        assert stats[0] == table.rows, (*where, table.name)
        for i, col in enumerate(table.columns):
            lo, hi, n, distinct, found = stats[1 + 5 * i: 6 + 5 * i]
            at = (*where, table.name, col.name, lo, hi)
            if col.min is not None and n:
                assert lo >= Decimal(str(col.min)), at
            if col.max is not None and n:
                assert hi <= Decimal(str(col.max)), at
            if col.unique:
                assert n == distinct == table.rows, at
            if not col.nullable and col.type != "foreign_key":
                assert n == table.rows, (*at, "has NULLs")
            if col.type == "date":
                assert col.start <= lo and hi <= col.end, at
            if col.type == "datetime":
                assert dt.datetime.combine(col.start, dt.time()) <= lo, at
                assert hi <= dt.datetime.combine(col.end, dt.time.max), at
            if col.type == "categorical":
                assert set(found) <= set(col.choices), at
    for grid in spec.time_grids:
        c = f'"{grid.column}"'
        bad = con.execute(
            f'SELECT COUNT(*) FROM "{grid.table}" WHERE minute({c}) % {grid.minute_grid} <> 0 '
            f"OR second({c}) <> 0 OR microsecond({c}) % 1000000 <> 0 OR hour({c}) < {grid.hours[0]} "
            f"OR hour({c}) >= {grid.hours[1]}").fetchone()[0]
        assert bad == 0, (*where, "time grid")


def check_common(spec: Spec, folder: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Facts every spec declares, on every rotation in both formats; Parquet and CSV hold the same rows;
    fixed column types (decimal128 money, date32 at midnight, timestamp[us]); rotations differ."""
    seeds = spec.seeds()
    rows = {}
    for seed, fmt in rotations(con, spec):
        check_columns(spec, con, (seed, fmt))
        for table in spec.tables:
            rows[seed, fmt, table.name] = con.execute(f'SELECT * FROM "{table.name}"').fetchall()
    for seed in seeds:
        tables = folder / "rotations" / f"seed_{seed}" / "tables"
        for table in spec.tables:
            assert rows[seed, "parquet", table.name] == rows[seed, "csv", table.name], \
                f"{table.name}: parquet and csv differ"
            schema = pq.read_schema(tables / f"{table.name}.parquet")
            with open(tables / f"{table.name}.csv", newline="", encoding="utf-8") as handle:
                text = list(csv.DictReader(handle))
            for col in table.columns:
                kind = str(schema.field(col.name).type)
                if col.type == "float":
                    assert kind == f"decimal128(18, {col.decimals})", (table.name, col.name, kind)
                if col.type == "date":  # a date, at midnight: no time of day anywhere, also in the CSV text
                    assert kind == "date32[day]", (table.name, col.name, kind)
                    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", r[col.name]) for r in text if r[col.name]), \
                        (table.name, col.name)
                if col.type == "datetime":
                    assert kind == "timestamp[us]", (table.name, col.name, kind)

    # different rotations: no table file identical across rotations
    first, second = (folder / "rotations" / f"seed_{s}" / "tables" for s in seeds[:2])
    for table in spec.tables:
        for ext in ("parquet", "csv"):
            assert (first / f"{table.name}.{ext}").read_bytes() != (second / f"{table.name}.{ext}").read_bytes(), \
                f"{table.name}.{ext} is identical on two rotations"


def check_determinism(spec: Spec, folder: Path) -> None:
    """Same spec and seed, written again: byte-identical files."""
    with tempfile.TemporaryDirectory() as again:
        write(spec, Path(again))
        assert files(Path(again)) == files(folder)


# --------------------------------------------------------------------------- properties


def check_curve_facts(model: CurveModel, spec: Spec, con: duckdb.DuckDBPyConnection, plans) -> None:
    months = model.months
    n = len(months)
    totals = [half_even(v) for v in interpolate({i: Fraction(c) for i, c in model.points}, n)]
    # evalpack's rule beside rounding: an interpolated (undeclared) month whose total lands on a whole
    # number moves up by one cent, so that a "rounded to whole units" mistake changes every answer
    declared = {i for i, _ in model.points}
    totals = [t + 1 if i not in declared and t > 0 and t % 100 == 0 else t for i, t in enumerate(totals)]
    tc, tt = f'"{model.time_column}"', model.time_type
    window = f"{tc} >= {lit(months[0], tt)} AND {tc} < {lit(add_months(months[-1], 1), tt)}"
    for p in plans:
        assert list(p.answer_key.curves[0].totals) == totals  # the answer key is the declaration
    for seed, fmt in rotations(con, spec):
        plan = next(p for p in plans if p.seed == seed)
        planned_rows = plan.answer_key.curves[0].rows
        got = con.execute(f"SELECT date_trunc('month', {tc})::DATE AS m, SUM(amount), COUNT(*) FROM orders "
                          f"WHERE {window} GROUP BY m ORDER BY m").fetchall()
        assert [m for m, _, _ in got] == list(months), (fmt, seed)
        for (month, total, rows), want, planned in zip(got, totals, planned_rows):
            assert total == dec(want), (fmt, seed, month, total, dec(want))
            assert rows == planned, (fmt, seed, month)
            assert rows >= 2 * max(len(model.shares), 1)
        # each month's total also holds with the literal window of the gold SQL
        sums = ", ".join(f"SUM(amount) FILTER (WHERE {tc} >= {lit(m, tt)} AND {tc} < {lit(add_months(m, 1), tt)})"
                         for m in months)
        assert list(con.execute(f"SELECT {sums} FROM orders").fetchone()) == [dec(t) for t in totals]
        if model.shares:
            share = dict(model.shares)
            by_group = con.execute(f"SELECT date_trunc('month', {tc})::DATE AS m, channel, SUM(amount) FROM orders "
                                   f"WHERE {window} GROUP BY ALL").fetchall()
            seen = {}
            for month, label, total in by_group:
                assert label in share, (label, "has rows in the window but no share")
                seen[(month, label)] = total
            groups = [lbl for lbl, _ in model.shares]
            for m, month in enumerate(months):
                for g, label in enumerate(groups):
                    got_units = int(seen[(month, label)].scaleb(2))
                    exact = totals[m] * share[label]
                    # largest remainders (< 1 cent off), then up to two single cents moved so that no group
                    # total is a whole number
                    assert abs(got_units - exact) < 3, (month, label, got_units, exact)
                    assert got_units == plan.answer_key.curves[0].group_totals[m][g]
        if model.rate_points:
            rates = dict(model.rate_points)
            lo, hi = min(rates), max(rates)
            expected = interpolate(rates, n)
            flagged = con.execute(f"SELECT date_trunc('month', {tc})::DATE AS m, COUNT_IF(refunded), COUNT(*) "
                                  f"FROM orders WHERE {window} GROUP BY m ORDER BY m").fetchall()
            for i, (month, count, rows) in enumerate(flagged):
                if lo <= i <= hi:
                    assert count == half_even(expected[i] * rows), (fmt, month, count, rows, expected[i])
        if model.relationship:
            orphans, nulls = model.relationship
            assert con.execute("SELECT COUNT(*) FROM orders WHERE customer_id IS NULL").fetchone()[0] == nulls
            missing = con.execute("SELECT COUNT(*) FROM orders o LEFT JOIN customers c USING (customer_id) "
                                  "WHERE o.customer_id IS NOT NULL AND c.customer_id IS NULL").fetchone()[0]
            assert missing == orphans, (fmt, seed, missing, orphans)
            # the planted orphans sit outside every declared month where the time column leaves room, so no
            # other answer depends on them; else inside the months, and the period totals above include them
            inside = con.execute(f"SELECT COUNT(*) FROM orders o LEFT JOIN customers c USING (customer_id) "
                                 f"WHERE o.customer_id IS NOT NULL AND c.customer_id IS NULL AND {window}"
                                 ).fetchone()[0]
            assert inside == (orphans if model.orphans_inside else 0)


@SETTINGS
@given(curve_specs())
def test_curve_facts_hold_on_every_rotation_in_parquet_and_csv(model: CurveModel) -> None:
    spec = parse_spec(model.text, file="generated.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plans = write(spec, folder)
        con = load(spec, folder)
        check_curve_facts(model, spec, con, plans)
        check_common(spec, folder, con)
        con.close()
        check_determinism(spec, folder)


def check_ledger_facts(model: LedgerModel, spec: Spec, con: duckdb.DuckDBPyConnection) -> None:
    for seed, fmt in rotations(con, spec):
        unbalanced = con.execute("SELECT COUNT(*) FROM (SELECT entry_id FROM lines GROUP BY entry_id "
                                 "HAVING SUM(debit) <> SUM(credit))").fetchone()[0]
        assert unbalanced == 0, (fmt, seed)
        assert con.execute("SELECT SUM(debit) - SUM(credit) FROM lines").fetchone()[0] == 0
        # one side of every line is zero, the other is not
        assert con.execute("SELECT COUNT(*) FROM lines WHERE (debit = 0) = (credit = 0)").fetchone()[0] == 0
        if model.with_fk:
            assert con.execute("SELECT COUNT(*) FROM lines WHERE entry_id IS NULL").fetchone()[0] == model.nulls
            missing = con.execute("SELECT COUNT(*) FROM lines l LEFT JOIN entries e USING (entry_id) "
                                  "WHERE l.entry_id IS NOT NULL AND e.entry_id IS NULL").fetchone()[0]
            assert missing == model.orphans, (fmt, seed)
        if model.waterfall:
            months, start, endings, rate, inflow, outflow = model.waterfall
            rate = Fraction(rate)
            ptype = spec.table("mrr").column("period").type
            prev = start
            for month, end in zip(months, endings):
                w = f"period >= {lit(month, ptype)} AND period < {lit(add_months(month, 1), ptype)}"
                net = end - prev
                assert con.execute(f"SELECT SUM(amount) FROM mrr WHERE {w}").fetchone()[0] == dec(net)
                cum = con.execute(f"SELECT {dec(start)} + SUM(amount) FROM mrr WHERE period >= "
                                  f"{lit(months[0], ptype)} AND period < {lit(add_months(month, 1), ptype)}"
                                  ).fetchone()[0]
                assert cum == dec(end), (fmt, seed, month, cum, end)
                out_total = max(half_even(rate * prev), -net, 0)
                in_total = net + out_total
                parts = dict(con.execute(f"SELECT movement_type, SUM(amount) FROM mrr WHERE {w} GROUP BY ALL")
                             .fetchall())
                units = {k: int(v.scaleb(2)) for k, v in parts.items()}
                for label, share in inflow:
                    assert units.get(label, 0) >= 0
                    assert abs(units.get(label, 0) - in_total * share) < 3, (label, units, in_total)
                for label, share in outflow:
                    assert units.get(label, 0) <= 0
                    assert abs(-units.get(label, 0) - out_total * share) < 3, (label, units, out_total)
                assert set(units) <= {k for k, _ in inflow + outflow}
                prev = end


@SETTINGS
@given(ledger_specs())
def test_ledger_and_waterfall_facts_hold_on_every_rotation(model: LedgerModel) -> None:
    spec = parse_spec(model.text, file="generated.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write(spec, folder)
        con = load(spec, folder)
        check_ledger_facts(model, spec, con)
        check_common(spec, folder, con)
        con.close()
        check_determinism(spec, folder)


# --------------------------------------------------------------------------- whole builds

SMALL = """\
name: small
seed: 5
rotations: 2
tables:
  customers:
    rows: 30
    columns:
      customer_id: {type: int, unique: true, min: 1}
      name: {type: text, text_type: name}
  orders:
    rows: 90
    columns:
      order_id: {type: int, unique: true, min: 1}
      customer_id: {type: foreign_key}
      amount: {type: float, min: 1, max: 900, decimals: 2}
      ordered_at: {type: date, start: "2024-12-01", end: "2025-04-30"}
relationships:
  - {parent: customers.customer_id, child: orders.customer_id, orphans: 2, nulls: 1}
outcome_curves:
  - {table: orders, column: amount, time_column: ordered_at, curve_points: [
      {period: "2025-01", target_value: 4100.37}, {period: "2025-03", value: 5200.11}]}
"""


def _build(spec: Path, out: Path, *extra: str) -> None:
    assert main(["build", str(spec), "-o", str(out), *extra]) == 0


def test_same_spec_and_seed_give_byte_identical_packs(tmp_path: Path, capsys, monkeypatch) -> None:
    import evalpack.build

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # reproducible build: fixed attestation times
    in_this_process = []
    write_rotation = evalpack.build.write_rotation
    monkeypatch.setattr(evalpack.build, "write_rotation",
                        lambda spec, plan, *rest: in_this_process.append(plan.seed) or write_rotation(spec, plan, *rest))
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL, encoding="utf-8")
    _build(spec, tmp_path / "a", "--jobs", "1")
    assert in_this_process == [5, 6]
    in_this_process.clear()
    _build(spec, tmp_path / "b", "--jobs", "2")  # a small spec too is written by the build's worker processes
    assert in_this_process == []
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert any(name.endswith(".parquet") for name in a) and any(name.endswith(".csv") for name in a)
    assert "questions.jsonl" in a and "manifest.json" in a
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], f"{name} differs between two builds"


def test_cli_seed_overrides_the_spec_seed(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL, encoding="utf-8")
    _build(spec, tmp_path / "file_seed", "--jobs", "1")
    _build(spec, tmp_path / "cli_seed", "--jobs", "1", "--seed", "1000")
    assert sorted(p.name for p in (tmp_path / "file_seed" / "rotations").iterdir()) == ["seed_5", "seed_6"]
    assert sorted(p.name for p in (tmp_path / "cli_seed" / "rotations").iterdir()) == ["seed_1000", "seed_1001"]
    for table in ("customers", "orders"):
        for ext in ("parquet", "csv"):
            old = (tmp_path / "file_seed" / "rotations" / "seed_5" / "tables" / f"{table}.{ext}").read_bytes()
            new = (tmp_path / "cli_seed" / "rotations" / "seed_1000" / "tables" / f"{table}.{ext}").read_bytes()
            assert old != new, f"{table}.{ext}: --seed did not change the data"
    manifest = json.loads((tmp_path / "cli_seed" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["seeds"] == [1000, 1001]
    assert manifest["spec"]["text"] == SMALL  # the override is recorded beside the spec, not written into it


@pytest.mark.parametrize("time_type", ["date", "datetime"])
def test_rotated_answers_differ_per_rotation_and_each_rotation_holds_its_own(time_type: str, tmp_path: Path) -> None:
    spec = parse_spec(SMALL.replace("rotations: 2", "rotations: 3\nanswers: rotated")
                      .replace("ordered_at: {type: date", f"ordered_at: {{type: {time_type}"), file="rotated.yaml")
    plans = write(spec, tmp_path)
    totals = [p.answer_key.curves[0].totals for p in plans]
    assert len({tuple(t) for t in totals}) == 3, "rotated answers are the same on two rotations"
    con = load(spec, tmp_path)
    for (seed, fmt), plan in zip(rotations(con, spec), [p for p in plans for _ in FORMATS]):
        got = con.execute(f"SELECT SUM(amount) FROM orders WHERE ordered_at >= {lit(dt.date(2025, 1, 1), time_type)} "
                          f"AND ordered_at < {lit(dt.date(2025, 2, 1), time_type)}").fetchone()[0]
        assert got == dec(plan.answer_key.curves[0].totals[0]), (seed, fmt)
        key = plan.answer_key.keys[0]
        assert con.execute("SELECT COUNT(*) FROM orders WHERE customer_id IS NULL").fetchone()[0] == key.nulls
    con.close()


def test_integer_backed_columns_are_delta_encoded_and_text_dictionary_encoded(retail_pack: Path) -> None:
    seen = set()
    for path in sorted(retail_pack.glob("rotations/*/tables/*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            for index in range(meta.num_columns):
                chunk = meta.row_group(group).column(index)
                where = f"{path.name}:{chunk.path_in_schema}"
                if chunk.physical_type in ("INT32", "INT64"):
                    assert "DELTA_BINARY_PACKED" in chunk.encodings, where
                    seen.add(meta.schema.column(index).logical_type.type)
                elif chunk.physical_type == "BYTE_ARRAY":
                    assert "RLE_DICTIONARY" in chunk.encodings, where
    assert {"DECIMAL", "DATE"} <= seen, "the retail pack has decimal and date columns stored as integers"
