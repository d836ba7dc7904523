"""Rows that hold a rotation's plan exactly, produced chunk by chunk as Arrow record batches.

Every column of every chunk draws from its own generator seeded from (rotation seed, table,
column, chunk), so the bytes do not depend on how or where chunks are produced. Money is
integer units until it becomes decimal128; dates are date32 at midnight; datetimes are
timestamp[us].
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from evalpack.core.errors import SpecError
from evalpack.data.plan import (
    BLOCK_ROWS,
    NO_MAX_UNITS,
    ZONE_SHARE,
    Cell,
    Chunk,
    RotationPlan,
    TablePlan,
    int_keys,
    rng_for,
    stable_int,
)
from evalpack.data.textgen import text_values
from evalpack.spec.links import NO_PARENT, ORPHAN, periods
from evalpack.spec.model import Branch, Coded, Column, Distribution, Spec, Table, add_months
from evalpack.spec.units import allocate, from_units, to_units

EPOCH = dt.date(1970, 1, 1)
US_PER_DAY = 86_400_000_000
GOLDEN = 0.6180339887498949  # successive months' factor centres, spread evenly over a sibling's range
UNCOUNTED_STREAM = 1 << 24  # the random streams of rows that do not count start past every chunk's index
EDGE_SHARE = 3e-4  # rows of a cell placed on each edge of its period


def arrow_type(spec: Spec, table: Table, col: Column) -> pa.DataType:
    """The fixed Arrow type of a column, the same on every rotation."""
    if col.type == "foreign_key":
        rel = next(r for r in spec.relationships if (r.child_table, r.child_column) == (table.name, col.name))
        parent = spec.table(rel.parent_table).column(rel.parent_column)
        return arrow_type(spec, spec.table(rel.parent_table), parent)
    if spec.traps.coded(table.name, col.name):
        return pa.int64()
    return {
        "int": pa.int64(),
        "float": pa.decimal128(18, col.decimals),
        "text": pa.string(),
        "categorical": pa.string(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "datetime": pa.timestamp("us"),
    }[col.type]


def arrow_schema(spec: Spec, table: Table) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(spec, table, c)) for c in table.columns])


def _stable_order(t: np.ndarray) -> np.ndarray:
    """np.argsort(t, kind="stable"); a span under 2**16 is sorted as uint16 offsets, which numpy
    radix-sorts (a month of days: several times faster, the same permutation)."""
    if len(t) and int(t.max()) - int(t.min()) < 1 << 16:
        return np.argsort((t - t.min()).astype(np.uint16), kind="stable")
    return np.argsort(t, kind="stable")


def _days(day: dt.date) -> int:
    return (day - EPOCH).days


def _decimal(units: np.ndarray, decimals: int, valid: np.ndarray | None = None) -> pa.Array:
    units = np.ascontiguousarray(units, dtype=np.int64)
    words = np.empty((len(units), 2), dtype=np.int64)
    words[:, 0] = units
    words[:, 1] = units >> 63
    validity = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(18, decimals), len(units), [validity, pa.py_buffer(words)])


def _stored_codes(coded: Coded, labels: pa.Array) -> pa.Array:
    """A coded column's labels as the integer codes its code book gives them (``traps.codes``)."""
    names, codes = zip(*coded.book)
    return pc.take(pa.array(codes, pa.int64()), pc.index_in(labels, pa.array(names)))


def _group_codes(values: pa.Array) -> tuple[list[str], np.ndarray]:
    """A group column's distinct values as text (NULL as "") and each row's index into them, in the order of first
    appearance (Arrow's dictionary encoding: sorting Python strings was most of the cost)."""
    encoded = pc.dictionary_encode(pc.fill_null(values.cast(pa.string()), ""))
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _units_of(values: pa.Array) -> np.ndarray:
    """The integer units of an int64 or decimal128 array (a decimal's 128-bit integers, whose low 64 bits hold every
    amount evalpack writes), 0 where NULL."""
    if pa.types.is_integer(values.type):
        return pc.fill_null(values, 0).to_numpy().astype(np.int64)
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)[2 * values.offset:2 * (values.offset + len(values))]
    return np.where(values.is_valid().to_numpy(zero_copy_only=False), words[::2], 0)


def _edges(cells: tuple[Cell, ...], rows: int, span_start: bool) -> list[tuple[int, int, int, int]]:
    """Each cell's (first row, rows with an amount, edge, more) in a month's row order (no cells: the chunk's
    ``rows`` as one). Its first ``edge`` rows open the month at its first instant, the next ``edge`` close it on
    its last day; ``edge`` grows with the cell so that a shifted edge still moves a rate at 4 decimals.

    ``more``: on a datetime column only the rows at exactly midnight tell ``>`` from ``>=`` at a month's first
    instant, where a date column has the whole first day. At the span's first instant (``span_start``) the
    next ``more`` rows (a ZONE_SHARE of the cell, as just outside the window) open it too, so that this
    mistake moves a month's share of the whole span at 2 decimals."""
    out, start = [], 0
    for cell in cells or (None,):
        filled = cell.rows - cell.null_measures if cell is not None else rows
        edge = min(max(1, math.ceil(filled * EDGE_SHARE)), filled // 2) if filled >= 2 else filled
        more = max(0, min(math.ceil(filled * ZONE_SHARE), filled - 2 * edge)) if span_start else 0
        out.append((start, filled, edge, more))
        start += cell.rows if cell is not None else rows
    return out


def _distinct_openings(units: np.ndarray, cells: tuple[Cell, ...], edges: list[tuple[int, int, int, int]]) -> None:
    """Swap amounts within cells (in place; each cell keeps its amounts and their sum) until no two labels
    open the month with the same amount: on a datetime column those rows alone tell ``>`` from ``>=`` at
    the month's first instant, and a gap between two labels would not move if theirs were equal (each cell's
    first rows are often all at the column's max)."""
    opening: dict[str | None, list[np.ndarray]] = {}
    inside: dict[str | None, list[np.ndarray]] = {}
    for cell, (start, filled, edge, more) in zip(cells, edges):
        opening.setdefault(cell.label, []).append(np.r_[start:start + edge, start + 2 * edge:start + 2 * edge + more])
        inside.setdefault(cell.label, []).append(np.r_[start + edge:start + 2 * edge, start + 2 * edge + more:start + filled])
    taken: set[int] = set()
    for label, ats in opening.items():
        total = int(sum(units[at].sum() for at in ats))
        for at, rest in zip(ats, inside[label]):
            if total not in taken:
                break
            if not len(at):
                continue
            swap = _first_swap(units, int(at[0]), rest, total, taken)
            if swap is not None:
                total = int(total - units[at[0]] + units[swap])
                units[at[0]], units[swap] = units[swap], units[at[0]]
        taken.add(total)


def _first_swap(units: np.ndarray, row: int, rest: np.ndarray, total: int, taken: set[int]) -> int | None:
    """The first of the rows ``rest`` whose amount, swapped with ``row``'s, makes the opening's ``total`` one not
    ``taken``; None when none does. Looked for a block at a time: at scale a cell has hundreds of thousands of
    rows and the first few nearly always do."""
    for lo in range(0, len(rest), 256):
        part = rest[lo:lo + 256]
        free = np.flatnonzero(~np.isin(total - units[row] + units[part], list(taken)))
        if len(free):
            return int(part[free[0]])
    return None


def _plant_duplicate(part: np.ndarray, sign: int, lo: int, hi: int) -> np.ndarray:
    """Make two amounts of a cell equal (its sum unchanged), so SUM(DISTINCT ...) differs from SUM."""
    if len(part) < 3:
        return part
    mags = np.abs(part)
    if len(part) == 3:  # a small cell (a month's orphans): its first amount takes up the difference
        moved = mags[0] + mags[2] - mags[1]
        if lo <= moved <= hi:
            mags = mags.copy()
            mags[0], mags[2] = moved, mags[1]
        return sign * mags
    moved = mags[3] + mags[2] - mags[1]
    if lo <= moved <= hi:
        mags = mags.copy()
        mags[2], mags[3] = mags[1], moved
    return sign * mags


def _group_values(col: Column, rows: int) -> int:
    """How many distinct ledger groups a non-key group column can hold within its declaration."""
    if col.type == "categorical":
        return len(col.choices)
    if col.type == "int" and col.max is not None:
        return math.floor(col.max) - (math.ceil(col.min) if col.min is not None else 1) + 1
    return rows


def _plain_range(col: Column, width: int) -> tuple[int, int]:
    """The [lo, hi] units a plain int or float column draws from: its declared min and max (which the
    spec has already rounded inward to its decimals); an open end lies ``width`` units from the other
    end, or at 0 below a max of at least 0. An int column's units are whole numbers."""
    lo = to_units(col.min, col.decimals) if col.min is not None else None
    hi = to_units(col.max, col.decimals) if col.max is not None else None
    if lo is None:
        lo = 0 if hi is None or hi >= 0 else hi - width
    if hi is None:
        hi = (max(lo, 0) if col.type == "int" else lo) + width
    return lo, hi


def draw_distribution(rng: np.random.Generator, dist: Distribution, n: int, lo: int, hi: int,
                      decimals: int) -> np.ndarray:
    """``n`` values of the shape ``dist`` as whole units of ``decimals`` within [lo, hi] units (values beyond an
    end are held at it, as Misata does). Parameters left out are set from the range: a normal is centred on it
    with a sixth of it as its deviation; the others start at min and reach about a fifth of the range at their
    median; a pareto starts at min (README.md, "Writing a spec")."""
    unit = 10 ** decimals
    low, span = lo / unit, max(hi - lo, 1) / unit

    def given(name: str, default: float) -> float:
        value = dist.param(name)
        return default if value is None else value

    if dist.shape == "normal":
        values = rng.normal(given("mean", low + span / 2), given("std", span / 6), n)
    elif dist.shape == "lognormal" and dist.param("mean") is not None:
        mean = given("mean", 1.0)
        sigma2 = math.log1p((given("std", mean / 2) / mean) ** 2)
        values = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    elif dist.shape == "lognormal" and (dist.param("mu") is not None or dist.param("sigma") is not None):
        values = rng.lognormal(given("mu", 0.0), given("sigma", 0.8), n)
    elif dist.shape == "lognormal":
        values = low + rng.lognormal(0.0, 0.8, n) * span / 5
    elif dist.shape == "exponential":
        values = low + rng.exponential(given("scale", span / 5), n)
    elif dist.shape == "gamma":
        values = low + rng.gamma(given("shape", 2.0), given("scale", span / 10), n)
    elif dist.shape == "beta":
        values = low + rng.beta(given("a", 2.0), given("b", 5.0), n) * span
    else:  # pareto: scale / U**(1/alpha), from scale (min, or one unit) up, as Misata's power_law
        alpha = dist.param("alpha") or dist.param("a") or 1.5
        values = given("scale", max(low, 1 / unit)) * np.power(1.0 - rng.random(n), -1.0 / alpha)
    return np.clip(np.rint(values * unit), lo, hi).astype(np.int64)


def _null_mask(rng: np.random.Generator, n: int, rate: float) -> np.ndarray | None:
    return rng.random(n) >= rate if rate else None


class _TableGen:
    """Produces one table's batches for one rotation."""

    def __init__(self, spec: Spec, plan: RotationPlan, tplan: TablePlan) -> None:
        self.spec = spec
        self.plan = plan
        self.tplan = tplan
        self.table = spec.table(tplan.name)
        self.seed = plan.seed
        self.schema = arrow_schema(spec, self.table)
        self.deleted = dict(tplan.deleted_keys)
        self.grids = {g.column: g for g in spec.time_grids if g.table == self.table.name}
        self.rates = {c.column: c for c in spec.rate_curves if c.table == self.table.name}
        self.parents = {(r.child_column): r for r in spec.relationships if r.child_table == self.table.name}
        time = self.table.column(tplan.time_column) if tplan.time_column else None
        self.timestamps = time is not None and time.type == "datetime"
        self.first_month = next((c.month for c in tplan.chunks if c.kind == "month"), None)
        self.last_month = max((c.month for c in tplan.chunks if c.kind == "month"), default=None)
        traps = spec.traps
        self.marks = {nc.column: nc.values for nc in traps.excluded(self.table.name)}
        self.uncounted = traps.excluded(self.table.name)
        self.uncounted_keys = tplan.rows  # the row index the next row that does not count takes its keys from
        self.codes = {c.column: c for c in traps.codes if c.table == self.table.name}
        self.siblings = {s.column: s for s in traps.siblings if s.table == self.table.name}
        self.handed_on: dict[str, int] = {}  # a date sibling's rows the last month moved into the next

    def edges(self, chunk: Chunk) -> list[tuple[int, int, int, int]]:
        """:func:`_edges` of a month of this table."""
        return _edges(chunk.cells, chunk.rows, self.timestamps and chunk.month == self.first_month)

    def rng(self, column: str, chunk: int) -> np.random.Generator:
        return rng_for(self.seed, self.table.name, column, chunk)

    # ---- keys

    def key_values(self, table: Table, col: Column, index: np.ndarray, deleted: tuple[int, ...]) -> pa.Array:
        """Value of a unique key column at row ``index`` (past the end: keys that do not exist)."""
        if col.type == "int":
            return pa.array(int_keys(col, index, deleted), pa.int64())
        return text_values(col.text_type, stable_int(self.seed, table.name, col.name), index, True)

    def planned_keys(self, col: Column, chunk: Chunk, k: int, order: np.ndarray | None) -> pa.Array:
        """Parent keys of a planned foreign key (``plan.Link``): the chunk's slice of the plan, sorted with the
        chunk when the plan holds it in cell order; deleted parents' ids for orphans, NULL for missing parents."""
        link = self.tplan.link(col.name)
        index = link.index[chunk.offset:chunk.offset + chunk.rows]
        if link.cell_order and order is not None:
            index = index[order]
        parent_table = self.spec.table(link.parent)
        parent_col = parent_table.column(self.parents[col.name].parent_column)
        parent_plan = self.plan.table(link.parent)
        deleted = dict(parent_plan.deleted_keys).get(parent_col.name, ())
        values = self.key_values(parent_table, parent_col, np.maximum(index, 0), deleted)
        orphans = np.flatnonzero(index == ORPHAN)
        if len(orphans):
            rng = self.rng(col.name, k)
            if parent_col.type == "int" and deleted:
                arr = values.to_numpy().copy()
                arr[orphans] = np.array(deleted, dtype=np.int64)[rng.integers(0, len(deleted), size=len(orphans))]
                values = pa.array(arr, pa.int64())
            else:
                ghosts = self.key_values(parent_table, parent_col, parent_plan.rows + 1_000_000 + chunk.offset + orphans, ())
                lst = values.to_pylist()
                for at, ghost in zip(orphans, ghosts.to_pylist()):
                    lst[at] = ghost
                values = pa.array(lst, values.type)
        missing = index == NO_PARENT
        if missing.any():
            values = pc.if_else(pa.array(~missing), values, pa.scalar(None, values.type))
        return values

    def foreign_keys(self, col: Column, n: int, chunk: Chunk, k: int, prefer: np.ndarray | None = None) -> pa.Array:
        """Parent keys for ``n`` child rows; the chunk's planted orphans and missing parents go to
        ``prefer`` rows first (rows whose measure is NULL), so COUNT(column) mistakes show."""
        rel = self.parents[col.name]
        parent_table = self.spec.table(rel.parent_table)
        parent_col = parent_table.column(rel.parent_column)
        parent_rows = next(p for p in self.plan.tables if p.name == parent_table.name)
        deleted = dict(parent_rows.deleted_keys).get(parent_col.name, ())
        rng = self.rng(col.name, k)
        index = rng.integers(0, parent_rows.rows, size=n)
        orphans = dict(chunk.orphans).get(col.name, 0)
        nulls = dict(chunk.fk_nulls).get(col.name, 0)
        order = rng.permutation(n)
        if prefer is not None and len(prefer):
            order = np.concatenate([rng.permutation(prefer), order[~np.isin(order, prefer)]])
        special = order[: orphans + nulls]
        values = self.key_values(parent_table, parent_col, index, deleted)
        if orphans:
            pos = special[:orphans]
            if parent_col.type == "int" and deleted:
                orphan_vals = np.array(deleted, dtype=np.int64)[rng.integers(0, len(deleted), size=orphans)]
                arr = values.to_numpy().copy()
                arr[pos] = orphan_vals
                values = pa.array(arr, pa.int64())
            else:
                ghost = self.key_values(parent_table, parent_col,
                                        parent_rows.rows + 1_000_000 + rng.integers(0, 1_000_000, size=orphans), ())
                lst = values.to_pylist() if parent_col.type != "int" else values.to_numpy().copy()
                for p, g in zip(pos, ghost.to_pylist()):
                    lst[p] = g
                values = pa.array(lst, values.type)
        if nulls:
            valid = np.ones(n, dtype=bool)
            valid[special[orphans:]] = False
            values = pa.array(values.to_numpy(zero_copy_only=False), values.type, mask=~valid) \
                if parent_col.type == "int" else pa.array(
                    [v if ok else None for v, ok in zip(values.to_pylist(), valid)], values.type)
        return values

    # ---- time axis

    def times(self, col: Column, chunk: Chunk, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-row time (days or microseconds since epoch) and a 'boundary row' marker."""
        rng = self.rng(col.name, k)
        n = chunk.rows
        unit = 1 if col.type == "date" else US_PER_DAY
        boundary = np.zeros(n, dtype=bool)
        if chunk.kind == "before":
            day = np.full(n, _days(chunk.month) + (add_months(chunk.month, 1) - chunk.month).days - 1, dtype=np.int64)
            t = day * unit + (rng.integers(0, US_PER_DAY, size=n) if unit != 1 else 0)
            return t, boundary
        if chunk.kind == "after":
            return np.full(n, _days(chunk.month) * unit, dtype=np.int64), boundary
        # the month's days within the column's declared start/end (a range may begin or end mid-month)
        first = max(_days(chunk.month), _days(col.start))
        last = min(_days(add_months(chunk.month, 1)) - 1, _days(col.end))
        day = rng.integers(first, last + 1, size=n)
        t = day * unit + (rng.integers(0, US_PER_DAY, size=n) if unit != 1 else 0)
        # each cell's first rows open the period at midnight and the next close it on its last day (see _edges)
        for s, filled, edge, more in self.edges(chunk):
            t[s:s + edge] = first * unit
            boundary[s:s + edge] = True
            if filled >= 2:
                t[s + edge:s + 2 * edge] = last * unit + (rng.integers(0, US_PER_DAY, size=edge) if unit != 1 else 0)
                boundary[s + edge:s + 2 * edge] = True
            t[s + 2 * edge:s + 2 * edge + more] = first * unit
        return t, boundary

    def time_array(self, col: Column, t: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
        if col.type == "date":
            return pa.array(t.astype(np.int32), pa.int32(), mask=None if valid is None else ~valid).cast(pa.date32())
        return pa.array(t.astype(np.int64), pa.int64(), mask=None if valid is None else ~valid).cast(
            pa.timestamp("us"))

    # ---- plain columns

    @staticmethod
    def numbers(rng: np.random.Generator, col: Column, n: int) -> np.ndarray:
        """A plain int or float column's ``n`` values in units: its declared distribution, else even between its
        min and max (an open end: see _plain_range; a shaped column's open max lies 10**6 above its min)."""
        width = 1000 if col.distribution is None else 10**6
        lo, hi = _plain_range(col, to_units(width, col.decimals))
        if col.distribution is None:
            return rng.integers(lo, hi + 1, size=n)
        return draw_distribution(rng, col.distribution, n, lo, hi, col.decimals)

    def dependent_units(self, col: Column, n: int, k: int, labels: pa.Array) -> np.ndarray:
        """A ``depends_on`` column's ``n`` values in units: each mapped label's rows drawn from its branch (a stream
        of its own per label), the other rows (NULL labels included) from ``default`` or the column's own."""
        labels = labels.to_numpy(zero_copy_only=False)
        units = np.empty(n, dtype=np.int64)
        rest = np.ones(n, dtype=bool)
        own = Branch(min=col.min, max=col.max, distribution=col.distribution)
        for label, branch in (*col.mapping, (None, col.default or own)):
            rows = rest.copy() if label is None else labels == label
            rest &= ~rows
            if branch.value is not None:
                units[rows] = to_units(branch.value, col.decimals)
            else:
                shaped = replace(col, min=col.min if branch.min is None else branch.min,
                                 max=col.max if branch.max is None else branch.max, distribution=branch.distribution)
                units[rows] = self.numbers(self.rng(f"{col.name}={label or ''}", k), shaped, int(rows.sum()))
        return units

    def plain_columns(self, arrays: dict[str, pa.Array], n: int, k: int, offset: int) -> None:
        """Fill ``arrays`` with every column not yet in it: the independent ones, then the ``depends_on`` ones
        (which read their label column's values)."""
        for col in sorted(self.table.columns, key=lambda c: (c.name in self.siblings, c.depends_on is not None)):
            if col.name in arrays:
                continue
            if col.name in self.siblings:
                arrays[col.name] = self.sibling(col, arrays, k)
            else:
                arrays[col.name] = self.plain(col, n, k, offset, arrays.get(col.depends_on or ""))

    def sibling(self, col: Column, arrays: dict[str, pa.Array], k: int) -> pa.Array:
        """A sibling trap's values (:class:`~evalpack.spec.model.Sibling`). An amount's: each row's value of its
        column times a factor in [low, high], to the column's decimals, and never equal to it (one unit past it, the
        way the factor points), NULL where it is. The factor centres on a point of its range that differs from month
        to month and group to group (as a tax rate differs by channel), so that the sibling's shares and rankings
        are not the real column's."""
        trap = self.siblings[col.name]
        of = arrays[trap.of]
        if trap.relation == "plus_days":
            return self.later_dates(col, of, k)
        valid = of.is_valid().to_numpy(zero_copy_only=False)
        units = _units_of(of)
        centre = np.full(len(of), (k * GOLDEN) % 1.0)
        if self.tplan.group_column and self.tplan.group_column in arrays:
            labels, index = _group_codes(arrays[self.tplan.group_column])
            centre = (centre + np.array([stable_int(self.seed, g) % 997 / 997 for g in labels])[index] * 0.5) % 1.0
        spread = 0.8 * centre + 0.2 * self.rng(col.name, k).random(len(of))
        factor = trap.low + spread * (trap.high - trap.low)
        moved = np.rint(units * factor).astype(np.int64)
        step = 1 if trap.low > 1 else -1
        moved = np.where(moved == units, units + step, moved)
        if col.type == "int" and not col.decimals:
            return pa.array(moved, pa.int64(), mask=~valid)
        return _decimal(moved, col.decimals, valid)

    def plain(self, col: Column, n: int, k: int, offset: int, labels: pa.Array | None = None) -> pa.Array:
        rng = self.rng(col.name, k)
        valid = _null_mask(rng, n, col.nullable)
        typ = arrow_type(self.spec, self.table, col)
        if col.type == "int":
            if col.unique:
                return self.key_values(self.table, col, np.arange(offset, offset + n), self.deleted.get(col.name, ()))
            units = self.numbers(rng, col, n) if labels is None else self.dependent_units(col, n, k, labels)
            return pa.array(units, pa.int64(), mask=None if valid is None else ~valid)
        if col.type == "float":
            units = self.numbers(rng, col, n) if labels is None else self.dependent_units(col, n, k, labels)
            return _decimal(units, col.decimals, valid)
        if col.type == "text":
            # a unique text column's values are its keys: the same stream as key_values(), so that the
            # foreign keys of child tables match them
            stream = stable_int(self.seed, self.table.name, col.name) if col.unique else stable_int(
                self.seed, self.table.name, col.name, k)
            index = np.arange(offset, offset + n) if col.unique else np.arange(n)
            values = text_values(col.text_type, stream, index, col.unique)
            return values if valid is None else pc.if_else(pa.array(valid), values, pa.scalar(None, pa.string()))
        planned = self.tplan.labels_of(col.name)
        if planned is not None and planned.grain is None:
            return pc.take(pa.array(col.choices, pa.string()), pa.array(planned.codes[offset:offset + n]))
        if col.type == "categorical":
            p = np.array(col.weights or [1.0] * len(col.choices), dtype=float)
            p[[col.choices.index(v) for v in self.marks.get(col.name, ())]] = 0.0  # the marks of rows not counted
            idx = rng.choice(len(col.choices), size=n, p=p / p.sum())
            values = pc.take(pa.array(col.choices, pa.string()), pa.array(idx))
            return values if valid is None else pc.if_else(pa.array(valid), values, pa.scalar(None, pa.string()))
        if col.type == "boolean":
            rate = 0.0 if col.name in self.marks else col.rate if col.rate is not None else 0.5
            return pa.array(rng.random(n) < rate, pa.bool_(), mask=None if valid is None else ~valid)
        if col.type in ("date", "datetime"):
            first, last = _days(col.start), _days(col.end)
            day = rng.integers(first, last + 1, size=n)
            if planned is not None:  # each row's day inside the period the plan gave it
                spans = np.array([(_days(a), _days(b)) for _, a, b in periods(col.start, col.end, planned.grain)])
                lo, hi = spans[planned.codes[offset:offset + n]].T
                day = lo + (rng.random(n) * (hi - lo + 1)).astype(np.int64)
            if col.type == "date":
                return self.time_array(col, day, valid)
            grid = self.grids.get(col.name)
            if grid:
                slots = (grid.hours[1] - grid.hours[0]) * 60 // grid.minute_grid
                minute = grid.hours[0] * 60 + rng.integers(0, slots, size=n) * grid.minute_grid
                t = day * US_PER_DAY + minute * 60_000_000
            else:
                t = day * US_PER_DAY + rng.integers(0, US_PER_DAY, size=n)
            return self.time_array(col, t, valid)
        raise AssertionError(typ)

    # ---- chunks

    def chunk_batch(self, chunk: Chunk, k: int) -> pa.RecordBatch:
        """One chunk's rows in time order. The cell-structured columns (time, measure, group) are
        made cell by cell and then sorted by time; every other column is drawn directly in final
        order, since a random permutation of independent draws would add nothing."""
        tp, n = self.tplan, chunk.rows
        arrays: dict[str, pa.Array] = {}
        boundary = None
        if tp.time_column and self.table.column(tp.time_column).type == "text":
            # a waterfall's text period column: every row of a month carries its 'YYYY-MM' label (no zones)
            order, boundary = np.arange(n), None
            arrays[tp.time_column] = pa.array([f"{chunk.month:%Y-%m}"] * n, pa.string())
            if tp.measure:
                arrays[tp.measure] = self.measure(chunk, k)
            if tp.group_column:
                arrays[tp.group_column] = self.groups(chunk, k)
        elif tp.time_column:
            tcol = self.table.column(tp.time_column)
            t, boundary = self.times(tcol, chunk, k)
            order = _stable_order(t)
            boundary = boundary[order]
            arrays[tcol.name] = self.time_array(tcol, t[order])
            if tp.measure:
                arrays[tp.measure] = self.measure(chunk, k, order)
            if tp.group_column:
                arrays[tp.group_column] = self.groups(chunk, k, order)
        null_measure = (np.flatnonzero(arrays[tp.measure].is_null().to_numpy(zero_copy_only=False))
                        if tp.measure and tp.measure in arrays else None)
        for col in self.table.columns:
            if col.type == "foreign_key" and tp.link(col.name) is not None:
                arrays[col.name] = self.planned_keys(col, chunk, k, order if tp.time_column else None)
            elif col.type == "foreign_key":
                arrays[col.name] = self.foreign_keys(col, n, chunk, k, prefer=null_measure)
        if boundary is not None:
            # planted rows (NULL measures, missing parents) are flagged right after the boundary rows
            special = np.zeros(n, dtype=bool)
            if null_measure is not None:
                special[null_measure] = True
            for col in self.table.columns:
                if col.type == "foreign_key":
                    special |= arrays[col.name].is_null().to_numpy(zero_copy_only=False)
            for name in self.rates:
                arrays[name] = self.flags(chunk, k, boundary, special)
        self.plain_columns(arrays, n, k, chunk.offset)
        return self.assemble(arrays)

    def later_dates(self, col: Column, of: pa.Array, k: int) -> pa.Array:
        """A date sibling's values: ``of``'s date or time plus whole days drawn in [low, high]. On the table's time
        axis the rows are planted so that reading the sibling moves every window of months: the rows before the first
        month hand one row to it at least, and each month hands more rows to the next than the month before it did
        (one more at least), so that any run of months loses more rows at its end than it gains at its start."""
        trap = self.siblings[col.name]
        unit = 1 if col.type == "date" else US_PER_DAY
        valid = of.is_valid().to_numpy(zero_copy_only=False)
        t = pc.fill_null(of.cast(pa.int32() if unit == 1 else pa.int64()), 0).to_numpy().astype(np.int64)
        rng = self.rng(col.name, k)
        later = t + rng.integers(int(trap.low), int(trap.high) + 1, size=len(t)) * unit
        if self.tplan.time_column == trap.of and self.first_month is not None and valid.any():
            first = _days(self.first_month) * unit
            before = valid & (t < first)
            if before.any():  # what the rows before the first month hand on to it: one row at least
                if not (later[before] >= first).any():
                    row = np.flatnonzero(before)[-1]
                    later[row] = t[row] + int(trap.high) * unit
                self.handed_on[col.name] = self.handed_on.get(col.name, 0) + int((later[before] >= first).sum())
            month = t[valid].max() // unit
            start = dt.date(1970, 1, 1) + dt.timedelta(days=int(month))
            if self.first_month <= start.replace(day=1) <= self.last_month:
                nxt = _days(add_months(start.replace(day=1), 1)) * unit
                crossing = valid & (later >= nxt)
                target = max(int(crossing.sum()), self.handed_on.get(col.name, 0) + 1)
                can = np.flatnonzero(valid & ~crossing & (t + int(trap.high) * unit >= nxt))
                short = target - int(crossing.sum())
                if short > len(can):
                    i = self.spec.traps.siblings.index(trap)
                    raise SpecError(self.spec.path, trap.line, f"traps.siblings[{i}].relation.plus_days",
                                    f"{start:%B %Y} has too few rows near its end for {col.name} to move more of "
                                    "them into the next month than the month before did; widen plus_days")
                moved = rng.permutation(can)[:max(0, short)]
                later[moved] = t[moved] + int(trap.high) * unit
                self.handed_on[col.name] = target
        return self.time_array(col, later, valid if not valid.all() else None)

    def assemble(self, arrays: dict[str, pa.Array]) -> pa.RecordBatch:
        """The batch of ``arrays`` in the schema's order, each coded column's labels stored as their codes."""
        for name, coded in self.codes.items():
            arrays[name] = _stored_codes(coded, arrays[name])
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in self.schema], schema=self.schema)

    def measure(self, chunk: Chunk, k: int, order: np.ndarray | None = None) -> pa.Array:
        """The measure's amounts, cell after cell (then in ``order``, if given)."""
        units, valid, decimals = self._measure_units(chunk, k)
        if order is not None:
            units, valid = units[order], valid[order]
        return _decimal(units, decimals, valid)

    def _measure_units(self, chunk: Chunk, k: int) -> tuple[np.ndarray, np.ndarray, int]:
        col = self.table.column(self.tplan.measure)
        rng = self.rng(col.name, k)
        signed = dict(self.tplan.sign_by_label)
        if chunk.kind != "month":
            lo = to_units(col.min, col.decimals) if col.min is not None else 1
            hi = to_units(col.max, col.decimals) if col.max is not None else lo + to_units(1000, col.decimals)
            valid = np.ones(chunk.rows, dtype=bool)
            valid[-1:] = not col.nullable  # a NULL measure outside the window, where planted orphans go first
            return rng.integers(max(lo, 1) if signed else lo, hi + 1, size=chunk.rows), valid, col.decimals
        units = np.zeros(chunk.rows, dtype=np.int64)
        valid = np.ones(chunk.rows, dtype=bool)
        start = 0
        for cell in chunk.cells:
            filled = cell.rows - cell.null_measures
            if signed:
                sign = signed[cell.label]
                bound = col.max if sign > 0 else (-col.min if col.min is not None else None)
                hi = to_units(bound, col.decimals) if bound is not None else NO_MAX_UNITS
                # positive amounts of a column with a positive min hold it (the plan made room); else a movement
                # smaller than its row count (a net of 0.01 over 4 rows) needs some zero amounts
                least = to_units(col.min, col.decimals) if col.min is not None and col.min > 0 else 1
                floor = least if abs(cell.total) >= filled * least else 1 if abs(cell.total) >= filled else 0
                part = sign * allocate(np.array([filled]), np.array([abs(cell.total)]), floor, hi, rng)
            else:
                lo = to_units(col.min, col.decimals) if col.min is not None else 1
                hi = to_units(col.max, col.decimals) if col.max is not None else NO_MAX_UNITS
                part = allocate(np.array([filled]), np.array([cell.total]), lo if cell.total else 0, hi, rng)
            part = _plant_duplicate(part, sign if signed else 1, lo if not signed else max(1, floor), hi)
            # boundary rows (the cell's first two) always carry an amount; NULL measures come after
            units[start:start + filled] = part
            valid[start + filled:start + cell.rows] = False
            start += cell.rows
        if self.timestamps:
            _distinct_openings(units, chunk.cells, self.edges(chunk))
        return units, valid, col.decimals

    def groups(self, chunk: Chunk, k: int, order: np.ndarray | None = None) -> pa.Array:
        """The group labels, cell after cell (then in ``order``, if given)."""
        col = self.table.column(self.tplan.group_column)
        if chunk.kind != "month":
            rng = self.rng(col.name, k)
            labels = list(dict(self.tplan.sign_by_label)) or [c.label for c in self._month_cells()] or list(col.choices)
            # every group gets a row just outside the window, so a shifted edge shows in each group's answer
            index = np.resize(rng.permutation(len(labels)), chunk.rows)
        else:
            labels = [c.label for c in chunk.cells]
            index = np.repeat(np.arange(len(labels)), [c.rows for c in chunk.cells])
        return pc.take(pa.array(labels, pa.string()), pa.array(index if order is None else index[order]))

    def _month_cells(self) -> tuple:
        return next((c.cells for c in self.tplan.chunks if c.kind == "month"), ())

    def flags(self, chunk: Chunk, k: int, boundary: np.ndarray, special: np.ndarray) -> pa.Array:
        rng = self.rng(next(iter(self.rates)), k)
        n = chunk.rows
        if chunk.flagged is None:
            return pa.array(rng.random(n) < 0.5, pa.bool_())
        # boundary rows are flagged first so that a shifted window moves the rate visibly
        rest = ~boundary & ~special
        order = np.concatenate([rng.permutation(np.flatnonzero(boundary)),
                                rng.permutation(np.flatnonzero(special & ~boundary)),
                                rng.permutation(np.flatnonzero(rest))])
        flag = np.zeros(n, dtype=bool)
        flag[order[: chunk.flagged]] = True
        return pa.array(flag, pa.bool_())

    # ---- ledger

    def ledger_batches(self) -> Iterator[pa.RecordBatch]:
        led = self.tplan.ledger
        rng = self.rng("__ledger__", 0)
        n = self.tplan.rows
        rel = self.parents.get(led.group_column)
        facts = next((f for f in self.plan.answer_key.keys if rel and (f.child_table, f.child_column) == (
            self.table.name, led.group_column)), None)
        orphans, nulls = (facts.orphans, facts.nulls) if facts else (0, 0)
        normal = n - orphans - nulls
        if rel:
            parent_plan = next(p for p in self.plan.tables if p.name == rel.parent_table)
            groups = max(1, min(parent_plan.rows, normal // 2))
            members = np.sort(rng.choice(parent_plan.rows, size=groups, replace=False))
        else:
            groups = max(1, min(normal // 2, _group_values(self.table.column(led.group_column), normal)))
            members = np.arange(groups)
        sizes = 2 + rng.multinomial(normal - 2 * groups, np.full(groups, 1.0 / groups))
        orphan_sizes = [2] * (orphans // 2 - 1) + [2 + orphans % 2] if orphans else []
        null_sizes = [nulls] if nulls else []
        all_sizes = np.concatenate([sizes, np.array(orphan_sizes + null_sizes, dtype=np.int64)]).astype(np.int64)
        kinds = np.concatenate([np.zeros(groups, np.int8), np.ones(len(orphan_sizes), np.int8),
                                np.full(len(null_sizes), 2, np.int8)])
        ends = np.cumsum(all_sizes)
        start_group, k = 0, 0
        while start_group < len(all_sizes):
            base = ends[start_group - 1] if start_group else 0
            stop = int(np.searchsorted(ends, base + BLOCK_ROWS, side="right"))
            stop = max(stop, start_group + 1)
            yield self.ledger_chunk(k, int(base), all_sizes[start_group:stop], kinds[start_group:stop],
                                    members[start_group:min(stop, groups)] if start_group < groups else np.zeros(0),
                                    start_group)
            start_group, k = stop, k + 1

    def ledger_chunk(self, k: int, offset: int, sizes: np.ndarray, kinds: np.ndarray, members: np.ndarray,
                     first_group: int) -> pa.RecordBatch:
        led = self.tplan.ledger
        rng = self.rng(led.debit_column, k)
        debit_col = self.table.column(led.debit_column)
        sides = (debit_col, self.table.column(led.credit_column))
        # one amount range for both sides: every line's amount must fit the debit's and the credit's min/max
        lo = max([1] + [to_units(c.min, led.decimals) for c in sides if c.min is not None])
        maxes = [(to_units(c.max, led.decimals), c) for c in sides if c.max is not None]
        hi, narrow = min(maxes, key=lambda m: m[0]) if maxes else (lo + to_units(5000, led.decimals), debit_col)
        n = int(sizes.sum())
        g = len(sizes)
        debits = 1 + (rng.random(g) * (sizes - 1)).astype(np.int64)
        credits = sizes - debits
        many = np.maximum(debits, credits)
        few = np.minimum(debits, credits)
        # a side's total must stay exact in int64 and in allocate()'s float64 split (below 2**53): a line's
        # amount is capped so that no side of the largest group sums past 2**52 (amounts stay within min/max)
        exact = (1 << 52) // int(sizes.max())
        if lo > exact:
            wide = max((c for c in sides if c.min is not None), key=lambda c: to_units(c.min, led.decimals))
            raise SpecError(self.spec.path, wide.line, f"tables.{self.table.name}.columns.{wide.name}.min",
                            f"a group of {int(sizes.max())} lines (one {led.group_column}) with amounts of at least "
                            f"{from_units(lo, led.decimals)} sums past what evalpack keeps exact "
                            f"({from_units(exact, led.decimals)} per line); lower min or group by a column with "
                            "more values")
        hi = min(hi, exact)
        low_total, high_total = many * lo, few * hi
        if np.any(low_total > high_total):
            size = int(sizes[np.argmax(low_total > high_total)])
            raise SpecError(self.spec.path, narrow.line, f"tables.{self.table.name}.columns.{narrow.name}.max",
                            f"a group of {size} lines (one {led.group_column}) cannot balance with amounts between "
                            f"{from_units(lo, led.decimals)} and {from_units(hi, led.decimals)}; raise max")
        totals = low_total + (rng.random(g) * (high_total - low_total) * 0.5).astype(np.int64)
        cell_rows = np.stack([debits, credits], axis=1).reshape(-1)
        cell_totals = np.repeat(totals, 2)
        amounts = allocate(cell_rows, cell_totals, lo, hi, rng)
        # a side of two lines with an even total splits evenly: equal amounts show SUM(DISTINCT ...) mistakes
        starts = np.concatenate(([0], np.cumsum(cell_rows)[:-1]))
        pairs = (cell_rows == 2) & (cell_totals % 2 == 0)
        amounts[starts[pairs]] = cell_totals[pairs] // 2
        amounts[starts[pairs] + 1] = cell_totals[pairs] // 2
        is_debit = np.repeat(np.tile([True, False], g), cell_rows)
        debit_units = np.where(is_debit, amounts, 0)
        credit_units = np.where(is_debit, 0, amounts)
        arrays: dict[str, pa.Array] = {
            led.debit_column: _decimal(debit_units, led.decimals),
            led.credit_column: _decimal(credit_units, led.decimals),
        }
        group_col = self.table.column(led.group_column)
        row_group = np.repeat(np.arange(g), sizes)
        if group_col.type == "foreign_key":
            rel = self.parents[group_col.name]
            parent_table = self.spec.table(rel.parent_table)
            parent_col = parent_table.column(rel.parent_column)
            parent_plan = next(p for p in self.plan.tables if p.name == parent_table.name)
            deleted = dict(parent_plan.deleted_keys).get(parent_col.name, ())
            index = np.zeros(g, dtype=np.int64)
            normal = kinds == 0
            index[normal] = members[: int(normal.sum())]
            orphan_at = np.flatnonzero(kinds == 1)
            keys = self.key_values(parent_table, parent_col, index, deleted)
            if len(orphan_at) and parent_col.type == "int" and deleted:
                arr = keys.to_numpy().copy()
                arr[orphan_at] = np.array(deleted)[np.arange(len(orphan_at)) % len(deleted)]
                keys = pa.array(arr, pa.int64())
            elif len(orphan_at):
                ghosts = self.key_values(parent_table, parent_col, parent_plan.rows + 1_000_000 + first_group +
                                         orphan_at, ())
                lst = keys.to_pylist()
                for at, v in zip(orphan_at, ghosts.to_pylist()):
                    lst[at] = v
                keys = pa.array(lst, keys.type)
            valid = kinds != 2
            keys = pa.array(keys.to_pylist() if parent_col.type != "int" else keys.to_numpy(zero_copy_only=False),
                            keys.type, mask=~valid) if not valid.all() else keys
            arrays[group_col.name] = keys.take(pa.array(row_group))
        else:
            ids = np.arange(first_group, first_group + g)
            if group_col.type == "categorical":  # groups are the choices
                values = pa.array(np.array(group_col.choices, dtype=object)[ids], pa.string())
            elif group_col.type == "int":  # ids from the column's min (the group count respects its max)
                values = pa.array(ids + (math.ceil(group_col.min) if group_col.min is not None else 1), pa.int64())
            else:
                values = pa.array(ids + 1, pa.int64()).cast(pa.string())
            arrays[group_col.name] = values.take(pa.array(row_group))
        empty = Chunk("block", None, n, offset)
        for col in self.table.columns:
            if col.name not in arrays and col.type == "foreign_key":
                arrays[col.name] = self.foreign_keys(col, n, empty, k)
        self.plain_columns(arrays, n, k, offset)
        return self.assemble(arrays)

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.tplan.ledger:
            yield from self.ledger_batches()
            return
        for k, chunk in enumerate(self.tplan.chunks):
            batch = self.chunk_batch(chunk, k)
            yield batch
            if self.uncounted and batch.num_rows:
                yield from self.uncounted_rows(batch, k)

    def uncounted_rows(self, batch: pa.RecordBatch, k: int) -> list[pa.RecordBatch]:
        """The rows that do not count (``traps.not_counted``) beside a chunk's ``batch``, written right after it (so
        its month's rows stay together): for each such trap, copies of ``share`` of its rows in their order, each
        marked by one of the trap's values and given new keys past every counted row's. So that counting them
        changes every answer, and not only totals, the copies hold a row of each group the batch has, the rest are
        drawn with the rows of its rarest group twice as likely as the others (a group's share moves), each is
        flagged by every rate column (a rate moves), and their parents are drawn anew (parents without a counted
        child gain one), one of them missing and one unknown where the relationship declares such rows."""
        tp, n = self.tplan, batch.num_rows
        parts = []
        for j, trap in enumerate(self.uncounted):
            rng = self.rng(f"~uncounted{j}", k)
            # a weighted draw without replacement: the rows with the largest u ** (1 / weight)
            keys = rng.random(n)
            chosen = np.zeros(0, np.int64)
            if tp.group_column:
                _, groups = _group_codes(batch.column(tp.group_column))
                counts = np.bincount(groups)
                rarest = groups == int(np.argmin(np.where(counts > 0, counts, n + 1)))
                keys[rarest] = np.sqrt(keys[rarest])  # weight 2
                # and a row of each group: its row with the largest key
                members = [np.flatnonzero(groups == g) for g in np.flatnonzero(counts)]
                chosen = np.array([rows[np.argmax(keys[rows])] for rows in members], dtype=np.int64)
                keys[chosen] = -1.0
            wanted = max(0, min(n - len(chosen), round(trap.share * n) - len(chosen)))
            rest = np.argpartition(-keys, wanted - 1)[:wanted] if wanted else np.zeros(0, np.int64)
            pick = np.concatenate([chosen, rest]) if len(chosen) + len(rest) else np.array([int(np.argmax(keys))])
            copy = batch.take(pa.array(np.sort(pick).astype(np.int64)))
            arrays = {f.name: copy.column(f.name) for f in self.schema}
            index = np.arange(self.uncounted_keys, self.uncounted_keys + len(copy))
            self.uncounted_keys += len(copy)
            for col in self.table.columns:
                if col.unique:
                    arrays[col.name] = self.key_values(self.table, col, index, self.deleted.get(col.name, ()))
            for name in self.rates:
                arrays[name] = pa.array(np.ones(len(copy), dtype=bool), pa.bool_())
            for col in self.table.columns:
                if col.type == "foreign_key":
                    rel = self.parents[col.name]
                    planted = Chunk("block", None, len(copy), 0, orphans=((col.name, 1),) if rel.orphans else (),
                                    fk_nulls=((col.name, 1),) if rel.nulls else ())
                    arrays[col.name] = self.foreign_keys(col, len(copy), planted, UNCOUNTED_STREAM * (j + 1) + k)
            col = self.table.column(trap.column)
            if col.type == "boolean":
                arrays[col.name] = pa.array(np.ones(len(copy), dtype=bool), pa.bool_())
            else:
                marks = pa.array(trap.values, pa.string()).take(pa.array(rng.integers(0, len(trap.values), len(copy))))
                coded = self.codes.get(col.name)
                arrays[col.name] = marks if coded is None else _stored_codes(coded, marks)
            parts.append(pa.RecordBatch.from_arrays([arrays[f.name] for f in self.schema], schema=self.schema))
        return parts


def table_batches(spec: Spec, plan: RotationPlan, table: str) -> Iterator[pa.RecordBatch]:
    """The record batches of ``table`` in ``plan``'s rotation, in row order."""
    return _TableGen(spec, plan, plan.table(table)).batches()
