"""Declarations -> the answer key and a row plan per rotation, before any row exists.

The answer key holds every declared fact in exact integer units. The row plan says, for each
table, how many rows sit in each chunk (a month of its time column, the zones just outside
the declared window, or a block of rows), how each chunk's declared total splits over its
groups, how many rows are flagged, and where the planted orphans and missing parents go.
The generator only realises this plan; the questions only read the answer key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from evalpack.core.errors import SpecError
from evalpack.core.layout import rotation_name
from evalpack.core.scoring import quote_literal
from evalpack.spec import links
from evalpack.spec.crosschecks import segment_labels, segment_path
from evalpack.spec.dictionary import waterfall_signed
from evalpack.spec.model import (
    Column,
    GroupShares,
    OutcomeCurve,
    PerParent,
    RateCurve,
    Relationship,
    SegmentShares,
    Spec,
    Table,
    add_months,
)
from evalpack.spec.units import apportion, round_fraction, to_units

BLOCK_ROWS = 1_000_000
SENTINELS_PER_SIDE = 2
ZONE_SHARE = 0.05  # rows just outside the declared window, per side, as a share of an average month's rows
NO_MAX_UNITS = 1 << 40
REPEAT = 2  # children in one month that make a parent a repeat parent (repeat customers)
ROTATED_BAND = 0.08  # with rotated answers, a declared value moves up to this share either way
INTERPOLATED_BAND = 0.01  # with rotated answers, a month between declared points moves up to this share
PEAK_BAND = 0.07  # where a rotation's chosen peak month goes: near the top of its band


def stable_int(*parts: object) -> int:
    """A stable 63-bit integer from names (Python's hash() is salted per process)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rng_for(seed: int, *names: object) -> np.random.Generator:
    """The generator for one (rotation seed, table, column, ...) stream."""
    return np.random.default_rng([seed, *(stable_int(n) for n in names)])


# --------------------------------------------------------------------------- answer key


@dataclass(frozen=True)
class CurveFacts:
    table: str
    column: str
    time_column: str
    time_type: str
    decimals: int
    months: tuple[dt.date, ...]
    totals: tuple[int, ...]
    rows: tuple[int, ...]
    group_column: str | None = None
    groups: tuple[str, ...] = ()
    group_totals: tuple[tuple[int, ...], ...] = ()  # [month][group]


@dataclass(frozen=True)
class RateFacts:
    table: str
    column: str
    time_column: str
    time_type: str
    months: tuple[dt.date, ...]  # the declared months only
    flagged: tuple[int, ...]
    rows: tuple[int, ...]


@dataclass(frozen=True)
class LedgerFacts:
    name: str
    table: str
    group_column: str
    debit_column: str
    credit_column: str
    decimals: int


@dataclass(frozen=True)
class WaterfallFacts:
    """A waterfall's answers. ``period_type`` date | datetime | text (the period column holds 'YYYY-MM' labels).
    ``signed``: outflows are stored as negative amounts; otherwise (the amount column's min is 0 or more, as
    Misata writes them) every amount is positive and ``inflows`` names the types that add to the balance."""

    table: str
    period_column: str
    period_type: str
    type_column: str
    amount_column: str
    decimals: int
    months: tuple[dt.date, ...]
    starting: int
    endings: tuple[int, ...]
    components: tuple[tuple[str, tuple[int, ...]], ...]  # signed totals per type per month
    signed: bool = True
    inflows: tuple[str, ...] = ()

    def movement_sql(self) -> str:
        """A row's signed movement as SQL: the amount, or (positive amounts) minus it for an outflow type."""
        if self.signed:
            return self.amount_column
        listed = ", ".join(quote_literal(t) for t in self.inflows)
        return f"CASE WHEN {self.type_column} IN ({listed}) THEN {self.amount_column} ELSE -{self.amount_column} END"

    def stored(self, total: int) -> int:
        """A signed component total as the rows store it: as it is, or (positive amounts) its size."""
        return total if self.signed else abs(total)


@dataclass(frozen=True)
class KeyFacts:
    parent_table: str
    parent_column: str
    child_table: str
    child_column: str
    orphans: int
    nulls: int
    inside: bool = False  # the orphans sit among the rows questions read (a declared month, or a table without one)
    child_rows: int = 0  # the child table's planned rows (not the declared count an average transaction replaces)


@dataclass(frozen=True)
class SegmentFacts:
    """A curve's measure split by a parent's (or grandparent's) label: ``path`` holds the joins from the
    table up, as (child table, child column, parent table, parent key)."""

    table: str
    column: str
    time_column: str
    time_type: str
    decimals: int
    path: tuple[tuple[str, str, str, str], ...]
    by_table: str
    by_column: str
    grain: str | None  # a date column's period ("quarter": labels 2024-Q1), or None for a categorical column
    labels: tuple[str, ...]
    months: tuple[dt.date, ...]
    totals: tuple[tuple[int, ...], ...]  # [month][label], rows with a known parent only
    unlinked: tuple[int, ...]  # per month: the total of rows whose parent is missing (orphans) or NULL


@dataclass(frozen=True)
class PeriodChildren:
    """``per_parent`` with ``per``: how many rows one period (a month, quarter or year of the curve) gives each
    parent."""

    label: str  # 2025-03, 2025-Q1, 2025
    first: dt.date  # its first month
    end: dt.date  # the month after its last
    children: tuple[tuple[int, int], ...]  # (children in the period, parents with exactly that many), ascending


@dataclass(frozen=True)
class ParentFacts:
    """How many rows of a child table each parent has, from the planned foreign key."""

    child_table: str
    child_column: str
    parent_table: str
    parent_column: str
    parents: int
    linked: int  # child rows with a known parent
    children: tuple[tuple[int, int], ...]  # (children, parents with exactly that many), ascending
    time_column: str | None = None
    time_type: str = "date"
    months: tuple[dt.date, ...] = ()
    active: tuple[int, ...] = ()  # per month: parents with at least one child row in it
    repeat: tuple[int, ...] = ()  # per month: parents with at least REPEAT child rows in it
    top: tuple[tuple[int, int], ...] = ()  # (parent key, children): most children first, no tie at the cut
    per: str | None = None  # the period per_parent's counts hold in, when declared
    periods: tuple[PeriodChildren, ...] = ()


@dataclass(frozen=True)
class AnswerKey:
    """Every declared fact of one rotation, in integer units."""

    curves: tuple[CurveFacts, ...]
    rates: tuple[RateFacts, ...]
    ledgers: tuple[LedgerFacts, ...]
    waterfalls: tuple[WaterfallFacts, ...]
    keys: tuple[KeyFacts, ...]
    segments: tuple[SegmentFacts, ...] = ()
    parents: tuple[ParentFacts, ...] = ()


# --------------------------------------------------------------------------- row plan


@dataclass(frozen=True)
class Cell:
    """Rows of one chunk that share a group label and a declared total (units)."""

    label: str | None
    rows: int
    total: int | None = None
    null_measures: int = 0
    segment: int | None = None  # a planned key's segment, or links.ORPHAN / links.NO_PARENT


@dataclass(frozen=True)
class Link:
    """A planned foreign key: the parent row of every row (links.ORPHAN / links.NO_PARENT where it has
    none), in cell order when ``cell_order`` (else in the table's final row order)."""

    column: str
    parent: str
    index: np.ndarray = field(compare=False, repr=False)
    cell_order: bool = True


@dataclass(frozen=True)
class Labels:
    """A planned column: the index of each row's choice (or, with ``grain``, of the calendar period its date
    falls in, see links.periods), in the table's final row order."""

    column: str
    codes: np.ndarray = field(compare=False, repr=False)
    grain: str | None = None


@dataclass(frozen=True)
class Chunk:
    """A run of rows written together: a month, a zone outside the window, or a block."""

    kind: str  # "month" | "before" | "after" | "block"
    month: dt.date | None
    rows: int
    offset: int
    cells: tuple[Cell, ...] = ()
    flagged: int | None = None
    orphans: tuple[tuple[str, int], ...] = ()
    fk_nulls: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class TablePlan:
    name: str
    rows: int
    chunks: tuple[Chunk, ...]
    time_column: str | None = None
    measure: str | None = None
    group_column: str | None = None
    sign_by_label: tuple[tuple[str, int], ...] = ()
    deleted_keys: tuple[tuple[str, tuple[int, ...]], ...] = ()
    ledger: LedgerFacts | None = None
    links: tuple[Link, ...] = ()
    labels: tuple[Labels, ...] = ()

    def link(self, column: str) -> Link | None:
        return next((x for x in self.links if x.column == column), None)

    def labels_of(self, column: str) -> Labels | None:
        return next((x for x in self.labels if x.column == column), None)


@dataclass(frozen=True)
class RotationPlan:
    seed: int
    answer_key: AnswerKey
    tables: tuple[TablePlan, ...]
    warnings: tuple[str, ...] = field(default=())

    def table(self, name: str) -> TablePlan:
        return next(t for t in self.tables if t.name == name)

    @property
    def rotation(self) -> str:
        """This rotation's name (``seed_42``): its folder in the pack and its split on the Hub."""
        return rotation_name(self.seed)


# --------------------------------------------------------------------------- helpers


def _perturb(seed: int, answers: str, key: str, value: float, lo: float = 0.0, hi: float | None = None) -> float:
    """The declared ``value`` for this rotation: itself when shared, nudged when rotated."""
    if answers != "rotated":
        return value
    delta = rng_for(seed, "__answers__", key).uniform(-ROTATED_BAND, ROTATED_BAND)
    out = value * (1.0 + delta)
    return min(max(out, lo), hi) if hi is not None else max(out, lo)


def _bounds(col: Column, default_lo: int = 1) -> tuple[int, int]:
    lo = to_units(col.min, col.decimals) if col.min is not None else default_lo
    hi = to_units(col.max, col.decimals) if col.max is not None else NO_MAX_UNITS
    return lo, hi


def months_between(first: dt.date, last: dt.date) -> list[dt.date]:
    months, m = [], first
    while m <= last:
        months.append(m)
        m = add_months(m, 1)
    return months


def _interpolate(points: list[tuple[dt.date, int]], months: list[dt.date]) -> list[int]:
    """Linear interpolation between declared month points, rounded to whole units."""
    index = {m: i for i, m in enumerate(months)}
    known = [(index[m], v) for m, v in points]
    out = []
    for i in range(len(months)):
        before = max((k for k in known if k[0] <= i), key=lambda k: k[0], default=None)
        after = min((k for k in known if k[0] >= i), key=lambda k: k[0], default=None)
        if before is None:
            out.append(after[1])
        elif after is None or before[0] == after[0]:
            out.append(before[1])
        else:
            (ia, va), (ib, vb) = before, after
            out.append(round_fraction(Fraction(va * (ib - i) + vb * (i - ia), ib - ia)))
    return out


def _with_cents(totals: list[int], declared: set[dt.date], months: list[dt.date], decimals: int) -> list[int]:
    """Interpolated (not declared) month totals that land on a whole number move by one unit,
    so that a 'rounded to whole units' mistake changes every answer."""
    if not decimals:
        return totals
    whole = 10 ** decimals
    return [t + 1 if (t % whole == 0 and t > 0 and m not in declared) else t for t, m in zip(totals, months)]


def _period_runs(months: list[dt.date]) -> list[range]:
    """The runs of months whose totals questions add up: each calendar quarter and half-year the months hold whole,
    and the whole span."""
    runs = [range(i, i + size) for size in (3, 6) for i, m in enumerate(months)
            if (m.month - 1) % size == 0 and i + size <= len(months)]
    return runs + [range(len(months))]


def _without_whole_runs(totals: list[int], movable: list[int], months: list[dt.date], decimals: int, *,
                        half_average: bool = False) -> tuple[list[int], list[range]]:
    """Totals whose quarters, half-years and span (:func:`_period_runs`) are not whole numbers, so that a 'rounded to
    whole units' mistake changes those answers too: a ``movable`` month's total moves a unit (staying not whole
    itself, and above 0) while that leaves fewer whole runs (``half_average``: an even number of months whose
    average sits on half a unit, which ROUND may take either way, counts as one more). Unchanged when no run is
    whole; also returns the runs still whole."""
    runs, whole, n = _period_runs(months), 10 ** decimals, len(months)

    def flaws(values: list[int]) -> int:
        return (sum(1 for r in runs if sum(values[i] for i in r) % whole == 0)
                + (half_average and n % 2 == 0 and sum(values) % n == n // 2))

    out = list(totals)
    while flaws(out):
        moves = ([*out[:i], out[i] + step, *out[i + 1:]] for i in movable for step in (1, -1)
                 if (out[i] + step) % whole and out[i] + step > 0)
        better = next((m for m in moves if flaws(m) < flaws(out)), None)
        if better is None:
            break
        out = better
    return out, [r for r in runs if sum(out[i] for i in r) % whole == 0]


def _spread_cents(parts: np.ndarray, decimals: int) -> np.ndarray:
    """Move single units between group totals so none is a whole number (the sum is unchanged)."""
    parts = parts.copy()
    if not decimals or len(parts) < 2:
        return parts
    whole = 10 ** decimals
    for i in range(len(parts)):
        if parts[i] > 0 and parts[i] % whole == 0:
            j = (i + 1) % len(parts)
            if parts[j] > 1 and (parts[j] - 1) % whole != 0:
                parts[i] += 1
                parts[j] -= 1
            elif (parts[j] + 1) % whole != 0 and parts[i] > 1:
                parts[i] -= 1
                parts[j] += 1
    return parts


def _group_rows(rows: int, share_w: list[float], null_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """A month's ``rows`` split over its groups: the rows holding a value in each, and the rows whose value is null."""
    nulls = round_fraction(Fraction(null_rate).limit_denominator(10**6) * rows) if null_rate else 0
    nulls = min(nulls, rows - len(share_w))
    g_rows = apportion(rows - nulls, share_w, minimum=1 if rows - nulls >= len(share_w) else 0)
    return g_rows, apportion(nulls, share_w)


def _short(totals: np.ndarray, rows: np.ndarray, hi: int) -> bool:
    """Whether a part's total needs more rows than it has, at ``hi`` a row."""
    return any(t > 0 and r == 0 or t > r * hi for t, r in zip(map(int, totals), map(int, rows)))


def _over(totals: np.ndarray, rows: np.ndarray, lo: int) -> bool:
    """Whether a part has more rows than its total allows, at ``lo`` a row."""
    return any(r * lo > t for t, r in zip(map(int, totals), map(int, rows)))


def _first(holds, a: int, b: int) -> int:
    """The smallest n in [a, b] for which ``holds(n)``, ``b + 1`` when none (``holds`` false, then true, as n rises)."""
    b += 1
    while a < b:
        mid = (a + b) // 2
        if holds(mid):
            b = mid
        else:
            a = mid + 1
    return a


def _within(rows: list[int], low: list[int], high: list[int]) -> list[int]:
    """``rows`` moved into ``low[i]..high[i]`` each with their sum kept: the parts outside go to the nearest bound and
    the rows they took or gave are spread over the others in proportion to their room (``rows`` themselves when
    every part is inside; the caller sees that the bounds' sums leave room)."""
    out = [min(max(r, a), b) for r, a, b in zip(rows, low, high)]
    more = sum(rows) - sum(out)
    if more > 0:
        out = [r + int(x) for r, x in zip(out, apportion(more, [b - r for r, b in zip(out, high)]))]
    elif more < 0:
        out = [r - int(x) for r, x in zip(out, apportion(-more, [r - a for r, a in zip(out, low)]))]
    return out


def _rate_months(col: Column, span: list[dt.date]) -> list[dt.date]:
    """The months a table with a rate curve (and no outcome curve or waterfall) spreads its rows over: every month of
    its time column's declared range when that range holds the points' ``span`` (as Misata spreads them; the months
    without a point keep the column's own rate), else the span itself."""
    if col.type not in ("date", "datetime") or not col.dated or col.start is None or col.end is None:
        return span
    first, last = col.start.replace(day=1), col.end.replace(day=1)
    return months_between(first, last) if first <= span[0] and span[-1] <= last else span


def _zone_room(col: Column, months: list[dt.date]) -> tuple[bool, bool]:
    """Whether the time column's declared range leaves room before/after the window (a text period column,
    which holds the declared months' labels, has none)."""
    if col.type == "text":
        return False, False
    return col.start < months[0], col.end >= add_months(months[-1], 1)


class _Planner:
    def __init__(self, spec: Spec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.warnings: list[str] = []
        self.tables = {t.name: t for t in spec.tables}
        # planned keys follow the answers: one structure on every rotation when they are shared
        self.answers_seed = seed if spec.answers == "rotated" else spec.seed
        self.segment_of = {g.table: (g, segment_path(spec, g)) for g in spec.segment_shares}
        self.per_parent = {(pp.child_table, pp.child_column): pp for pp in spec.per_parent}
        self.planned = set(self.per_parent) | {(rel.child_table, rel.child_column)
                                               for _, path in self.segment_of.values() for rel in path}
        self.segment_facts: list[SegmentFacts] = []

    def err(self, path: str, line: int, message: str) -> SpecError:
        return SpecError(self.spec.path, line, path, message)

    def value(self, key: str, value: float, lo: float = 0.0, hi: float | None = None) -> float:
        return _perturb(self.seed, self.spec.answers, key, value, lo, hi)

    # ---- keys

    def key_facts(self) -> list[KeyFacts]:
        out = []
        for i, rel in enumerate(self.spec.relationships):
            edge = f"{rel.child_table}.{rel.child_column} -> {rel.parent_table}.{rel.parent_column}"
            if not rel.orphans:
                self.warnings.append(f"{edge}: no orphans declared, so a LEFT-vs-INNER join mistake (inner_join) "
                                     "cannot be caught there; declare `orphans:` on the relationship")
            if not rel.nulls:
                self.warnings.append(f"{edge}: no nulls declared, so a missing `IS NOT NULL` (drop_conjunct, "
                                     "null_flip) cannot be caught there; declare `nulls:` on the relationship")
            child_rows = self.tables[rel.child_table].rows
            orphans = rel.orphans + (self._bump(f"orphans{i}") if rel.orphans else 0)
            nulls = rel.nulls + (self._bump(f"nulls{i}") if rel.nulls else 0)
            if orphans + nulls > child_rows:
                orphans, nulls = rel.orphans, rel.nulls
            out.append(KeyFacts(rel.parent_table, rel.parent_column, rel.child_table, rel.child_column, orphans, nulls))
        return out

    def _bump(self, key: str) -> int:
        if self.spec.answers != "rotated":
            return 0
        return int(rng_for(self.seed, "__answers__", key).integers(0, 4))

    # ---- time axis tables

    def _warn_unwatched_edges(self, table: Table, time_column: str, tcol: Column, watched_before: bool,
                              watched_after: bool) -> None:
        """Warn when no rows can lie just outside the declared months, where an off-by-one window shows."""
        if tcol.type == "text":
            self.warnings.append(
                f"{table.name}.{time_column}: a text period column holds only the declared months' labels, so an "
                "off-by-one mistake at the outer edges cannot be caught; a date column with a month of room on each "
                "side can")
        elif not (watched_before and watched_after):
            edges = " or ".join(side for side, watched in (("before", watched_before), ("after", watched_after))
                                if not watched)
            widen = "start and end" if not (watched_before or watched_after) else (
                "start" if not watched_before else "end")
            self.warnings.append(
                f"{table.name}.{time_column}: the column's range leaves no room {edges} the declared months, so an "
                f"off-by-one mistake at {'those outer edges' if ' or ' in edges else 'that outer edge'} cannot be "
                f"caught; widen {widen} by a month (or declare `near_miss: {{margin: {{{table.name}.{time_column}: 1 month}}}}`)")

    def _rate_plan(self, table: Table, rate: RateCurve | None, months: list, rows: list[int], time_column: str,
                   tcol: Column) -> tuple[list, RateFacts | None]:
        """Each month's flagged rows of a table with a rate curve (None for every month without one), and the
        curve's facts for the answer key."""
        spec = self.spec
        flagged = [None] * len(months)
        if rate:
            declared = [(p.month, self.value(f"{table.name}.{rate.column}.{p.month}", p.rate, 0.0, 1.0))
                        for p in rate.points]
            index = {m: i for i, m in enumerate(months)}
            for point, _ in declared:
                if point not in index:
                    raise self.err(f"rate_curves[{spec.rate_curves.index(rate)}]", rate.line,
                                   f"rate point {point:%Y-%m} lies outside {table.name}'s planned months "
                                   f"{months[0]:%Y-%m} to {months[-1]:%Y-%m}")
            own = table.column(rate.column).rate
            if rate.interpolate:
                rate_by_month = self._interpolate_rates(declared, months)
                first, last = min(m for m, _ in declared), max(m for m, _ in declared)
                if own is not None:  # the months before the first point and after the last keep the column's own
                    rate_by_month = [r if first <= m <= last else own for m, r in zip(months, rate_by_month)]
            else:  # Misata's `interpolate: false`: only the declared months are held; the others keep the column's
                at = dict(declared)
                rate_by_month = [at.get(m, 0.5 if own is None else own) for m in months]
            flagged = [round_fraction(Fraction(r).limit_denominator(10**9) * n) for r, n in zip(rate_by_month, rows)]
            return flagged, RateFacts(
                table.name, rate.column, time_column, tcol.type, tuple(m for m, _ in declared),
                tuple(flagged[index[m]] for m, _ in declared), tuple(rows[index[m]] for m, _ in declared),
            )
        return flagged, None

    @staticmethod
    def _time_chunks(table: Table, months: list, rows: list[int], month_cells: list, flagged: list,
                     before_rows: int, after_rows: int, orphan_split: dict, inside_split: dict, null_split: dict,
                     time_column: str, measure: str | None, group_column: str | None,
                     sign_by_label: tuple[tuple[str, int], ...]) -> TablePlan:
        """The table's plan in chunks: the rows just before the declared months, each month, the rows after."""
        chunks, offset = [], 0
        if before_rows:
            chunks.append(Chunk("before", add_months(months[0], -1), before_rows, offset,
                                orphans=tuple((n, v[0]) for n, v in orphan_split.items() if v[0])))
            offset += before_rows
        for m, month in enumerate(months):
            chunks.append(Chunk("month", month, int(rows[m]), offset, tuple(month_cells[m]), flagged[m],
                                orphans=tuple((n, int(v[m])) for n, v in inside_split.items() if v[m]),
                                fk_nulls=tuple((n, int(v[m])) for n, v in null_split.items() if v[m])))
            offset += int(rows[m])
        if after_rows:
            chunks.append(Chunk("after", add_months(months[-1], 1), after_rows, offset,
                                orphans=tuple((n, v[1]) for n, v in orphan_split.items() if v[1])))
            offset += after_rows
        return TablePlan(table.name, offset, tuple(chunks), time_column, measure, group_column, sign_by_label)

    def _curve_plan(self, table: Table, curve: OutcomeCurve, groups_decl: GroupShares | None, months: list,
                    tcol: Column, time_column: str, window_rows: int, zone_rows: int
                    ) -> tuple[list[list[Cell]], list[int], str | None, CurveFacts]:
        """The months of a table planned by an outcome curve: each month's cells (a group's rows and total),
        its rows, the group column and the curve's facts for the answer key."""
        spec = self.spec
        month_cells: list[list[Cell]] = []
        mcol = table.column(curve.column)
        d = mcol.decimals
        declared = [(p.month, to_units(self.value(f"{table.name}.{curve.column}.{p.month}", p.value), d))
                    for p in curve.points]
        if all(u % (10 ** d) == 0 for _, u in declared) and d > 0:
            self.warnings.append(
                f"{table.name}.{curve.column}: every curve target is a whole number, so a 'rounded to whole "
                f"units' mistake cannot be caught; give targets with cents (e.g. 180000.37)")
        totals = _with_cents(_interpolate(declared, months), {m for m, _ in declared}, months, d)
        points = {m for m, _ in declared}
        if spec.answers == "rotated":
            # months between declared points move too, or a linear run's middle month would hold a third of
            # its quarter on every rotation
            nudge = rng_for(self.seed, "__answers__", table.name, curve.column, "__between__").uniform(
                -INTERPOLATED_BAND, INTERPOLATED_BAND, size=len(months))
            totals = [t if m in points else round_fraction(Fraction(t) * Fraction(1 + float(x)).limit_denominator(
                10 ** 6)) for t, m, x in zip(totals, months, nudge)]
            totals = _with_cents(totals, points, months, d)
            base = _interpolate([(p.month, to_units(p.value, d)) for p in curve.points], months)
            totals = self.rotate_peak(table, curve.column, base, totals, d)
        n = len(months)
        between = [i for i, m in enumerate(months) if m not in points]
        if n % 2 == 0 and sum(totals) % n == n // 2 and between:
            # the average month would sit on half a unit, which ROUND may take either way: a month between
            # declared points moves a unit (a declared target stays the answer its question expects)
            low = min(between, key=lambda i: totals[i])
            totals[low] += 1 if (totals[low] + 1) % 10 ** d else -1
        if d and any(sum(totals[i] for i in r) % 10 ** d == 0 for r in _period_runs(months)):
            totals, still = _without_whole_runs(totals, between, months, d, half_average=True)
            for r in still:
                named = f"{months[r[0]]:%Y-%m}" + (f" to {months[r[-1]]:%Y-%m}" if len(r) > 1 else "")
                self.warnings.append(
                    f"{table.name}.{curve.column}: the declared targets of {named} add up to a whole number, so "
                    f"a 'rounded to whole units' mistake in that period's total cannot be caught; change the "
                    f"cents of one of them")
        lo, hi = _bounds(mcol)
        null_rate = mcol.nullable
        shares = groups_decl.shares if groups_decl else ((None, 1.0),)
        share_w = [s for _, s in shares]
        g_tots = [_spread_cents(apportion(t, share_w), d) for t in totals]
        if curve.avg_transaction_value:
            avg = to_units(curve.avg_transaction_value, d)
            rows = [max(1, round_fraction(Fraction(t, avg))) for t in totals]
            declared_rows = table.rows
            window_rows = sum(rows)
            if declared_rows != window_rows + zone_rows:
                self.warnings.append(
                    f"{table.name}: avg_transaction_value sets {window_rows + zone_rows} rows in place of the "
                    f"declared {declared_rows}")
        else:
            min_rows = 2 * (len(groups_decl.shares) if groups_decl else 1)
            if window_rows < min_rows * len(months):
                raise self.err(f"tables.{table.name}.rows", table.rows_line or table.line,
                               f"{table.name} needs at least {min_rows * len(months) + zone_rows} rows for "
                               f"{len(months)} months of its outcome curve; raise rows")
            rows = self._rows_per_month(window_rows, totals, [min_rows] * n, [window_rows] * n)
            if any(_short(g, r, hi) or _over(g, r, lo) for g, r in zip(
                    g_tots, (_group_rows(x, share_w, null_rate)[0] for x in rows))):
                # a month whose total needs more rows (at the per-row max) or fewer (at the per-row min) than
                # its share gives it: rows planned again within every month's bounds
                least, most = self._month_row_bounds(table, curve, months, g_tots, share_w, window_rows, min_rows)
                rows = self._rows_per_month(window_rows, totals, least, most)
        low, high = curve.rows_per_period
        for month, n in zip(months, rows):
            if (low is not None and n < low) or (high is not None and n > high):
                raise self.err(f"outcome_curves[{spec.outcome_curves.index(curve)}]", curve.line,
                               f"{month:%Y-%m} plans {n} rows of {table.name}, outside the declared "
                               f"{low or 1} to {high or 'any'} transactions per period; change the table's "
                               "rows or the bounds")
        group_column = groups_decl.group_column if groups_decl else None
        group_totals = []
        for m, month in enumerate(months):
            g_tot = g_tots[m]
            g_rows, g_nulls = _group_rows(rows[m], share_w, null_rate)
            cells = []
            for (label, _), t, r, z in zip(shares, g_tot, g_rows, g_nulls):
                t, r, z = int(t), int(r), int(z)
                if t > 0 and r == 0 or r * lo > t or t > r * hi:
                    raise self.err(f"outcome_curves[{spec.outcome_curves.index(curve)}]", curve.line,
                                   f"{month:%Y-%m}: {table.name}.{curve.column} total {t / 10 ** d:.{d}f}"
                                   f"{f' for {label}' if label else ''} cannot be made from {r} rows between "
                                   f"{lo / 10 ** d:.{d}f} and {hi / 10 ** d:.{d}f}; change rows, min/max or the "
                                   "target")
                cells.append(Cell(label, r + z, t, z))
            month_cells.append(cells)
            group_totals.append(tuple(int(x) for x in g_tot))
        facts = CurveFacts(
            table.name, curve.column, time_column, tcol.type, d, tuple(months), tuple(int(t) for t in totals),
            tuple(int(r) for r in rows), group_column, tuple(lbl for lbl, _ in shares) if groups_decl else (),
            tuple(group_totals) if groups_decl else (),
        )
        return month_cells, rows, group_column, facts

    def time_plan(self, table: Table, keys: list[KeyFacts]) -> tuple[TablePlan, list, list, list]:
        """Plan a table with a curve, a rate curve or a waterfall on its time column."""
        spec = self.spec
        curve = next((c for c in spec.outcome_curves if c.table == table.name), None)
        rate = next((c for c in spec.rate_curves if c.table == table.name), None)
        fall = next((w for w in spec.waterfalls if w.table == table.name), None)
        time_column = (curve or rate).time_column if (curve or rate) else fall.period_column
        tcol = table.column(time_column)
        curves, rates, falls = [], [], []

        if curve:
            months = months_between(curve.points[0].month, curve.points[-1].month)
        elif fall:
            months = [p.month for p in fall.points]
        else:
            months = _rate_months(tcol, months_between(rate.points[0].month, rate.points[-1].month))
        room_before, room_after = _zone_room(tcol, months)
        # rows on either side of the months questions ask about: the zones, or months of the range without a point
        asked = [p.month for p in rate.points] if rate and not (curve or fall) else months
        watched_before, watched_after = room_before or months[0] < min(asked), room_after or months[-1] > max(asked)

        orphans = {k.child_column: k.orphans for k in keys if k.child_table == table.name and k.orphans}
        fk_nulls = {k.child_column: k.nulls for k in keys if k.child_table == table.name and k.nulls}
        # orphans go just outside the declared months where the column's range leaves room, so that no answer
        # but the key questions depends on them; otherwise inside the months, where every period total holds them
        # a planned key's orphans go inside the months too: its joined answers are asked per month
        inside = {name: count for name, count in orphans.items()
                  if not (room_before or room_after) or (table.name, name) in self.planned}
        orphans = {name: count for name, count in orphans.items() if name not in inside}
        for name, count in list(inside.items()):  # one just outside each open edge, so a wrong window shows
            edges = min(count // 3, int(room_before) + int(room_after))
            if (table.name, name) in self.planned and edges:
                orphans[name], inside[name] = edges, count - edges
        groups_decl = next((g for g in spec.group_shares if g.table == table.name), None)
        labels = len(groups_decl.shares) if groups_decl else (
            len(fall.inflow_shares) + len(fall.outflow_shares) if fall else 1)
        # one per group at least, so every group's edge is watched; and a share of an average month, so that
        # a window stretched past the declared span moves a percentage of the span's total at 2 decimals
        sentinels = max(SENTINELS_PER_SIDE, labels, math.ceil(table.rows / len(months) * ZONE_SHARE))
        before_rows = sentinels if room_before else 0
        after_rows = sentinels if room_after else 0
        orphan_split = {}
        for name, count in orphans.items():
            if room_before and room_after:
                orphan_split[name] = (count // 2, count - count // 2)
            else:
                orphan_split[name] = (count, 0) if room_before else (0, count)
        before_rows += sum(v[0] for v in orphan_split.values())
        after_rows += sum(v[1] for v in orphan_split.values())
        zone_rows = before_rows + after_rows
        window_rows = table.rows - zone_rows
        self._warn_unwatched_edges(table, time_column, tcol, watched_before, watched_after)

        measure = curve.column if curve else (fall.amount_column if fall else None)
        month_cells: list[list[Cell]] = []
        sign_by_label: tuple[tuple[str, int], ...] = ()
        group_column = None

        if curve:
            month_cells, rows, group_column, facts = self._curve_plan(table, curve, groups_decl, months, tcol,
                                                                      time_column, window_rows, zone_rows)
            curves.append(facts)
        elif fall:
            month_cells, facts = self._fall_cells(table, fall, months, window_rows, zone_rows)
            falls.append(facts)
            group_column = fall.type_column
            sign_by_label = tuple((k, 1) for k, _ in fall.inflow_shares) + tuple(
                (k, -1 if facts.signed else 1) for k, _ in fall.outflow_shares)
            rows = [sum(c.rows for c in cells) for cells in month_cells]
        else:
            if window_rows < len(months):
                raise self.err(f"tables.{table.name}.rows", table.rows_line or table.line,
                               f"{table.name} needs at least one row per month ({len(months)}); raise rows")
            rows = [int(r) for r in apportion(window_rows, [1] * len(months))]
            month_cells = [[Cell(None, r)] for r in rows]

        flagged, rate_facts = self._rate_plan(table, rate, months, rows, time_column, tcol)
        if rate_facts is not None:
            rates.append(rate_facts)
        self._check_missing_parents_fit(table, months, rows, fk_nulls, inside)
        null_split = {name: apportion(count, rows) for name, count in fk_nulls.items()}
        inside_split = {name: apportion(count, rows) for name, count in inside.items()}
        if table.name in self.segment_of:
            month_cells = self._segment_month_cells(table, keys, months, rows, month_cells, curves[-1], fk_nulls,
                                                    inside, null_split, inside_split)
        plan = self._time_chunks(table, months, rows, month_cells, flagged, before_rows, after_rows, orphan_split,
                                 inside_split, null_split, time_column, measure, group_column, sign_by_label)
        self.unshaped(table, (measure,), "its plan sets its values to the declared totals")
        return plan, curves, rates, falls

    def _fall_cells(self, table: Table, fall, months: list, window_rows: int, zone_rows: int) -> tuple:
        """A waterfall table's cells per month (a row per movement type per month at least) and its facts."""
        need = (len(fall.inflow_shares) + len(fall.outflow_shares)) * len(months)
        if window_rows < need:
            raise self.err(f"tables.{table.name}.rows", table.rows_line or table.line,
                           f"{table.name} needs at least {need + zone_rows} rows for {len(months)} months of its "
                           "waterfall (a row per movement type per month, plus rows outside the window); "
                           "raise rows")
        return self.waterfall_cells(table, fall, window_rows)

    def _check_missing_parents_fit(self, table: Table, months: list, rows: list, fk_nulls: dict,
                                   inside: dict) -> None:
        """Missing parents go on rows inside the declared months: refuse a count that does not fit them."""
        for i, rel in enumerate(self.spec.relationships):
            if rel.child_table != table.name:
                continue
            count = fk_nulls.get(rel.child_column, 0) + inside.get(rel.child_column, 0)
            if count > sum(rows):  # messages quote the declared counts, not this rotation's
                declared = rel.nulls + (rel.orphans if rel.child_column in inside else 0)
                raise self.err(f"relationships[{i}]", rel.line,
                               f"{declared} rows without a parent do not fit the {sum(rows)} rows of {table.name} "
                               f"inside its declared months ({months[0]:%Y-%m} to {months[-1]:%Y-%m}); lower "
                               f"{'nulls and orphans' if rel.child_column in inside else 'nulls'} or raise "
                               f"{table.name}'s rows")

    def _segment_month_cells(self, table: Table, keys: list[KeyFacts], months: list, rows: list, month_cells: list,
                             curve: CurveFacts, fk_nulls: dict, inside: dict, null_split: dict,
                             inside_split: dict) -> list:
        """The month cells of a table whose measure is split by a parent's attribute (segment_shares); the key's
        missing parents re-split by the months' totals (``null_split`` and ``inside_split`` updated)."""
        declared, path = self.segment_of[table.name]
        fk = path[0].child_column
        # by the months' totals, not their rows (which the seed jitters): with shared answers every label's
        # total is then the same whatever the seed
        monthly = [int(t) for t in curve.totals]
        for split, count in ((inside_split, inside.get(fk, 0)), (null_split, fk_nulls.get(fk, 0))):
            split[fk] = apportion(count, monthly)
        average = Fraction(sum(monthly), sum(int(r) for r in rows))
        # a chain's parents without a known grandparent still have rows, which no label's join reaches
        hop = next((k for k in keys if len(path) == 2 and (k.child_table, k.child_column) == (
            path[1].child_table, path[1].child_column)), None)
        unlabelled = Fraction(hop.orphans + hop.nulls, self.tables[hop.child_table].rows) if hop else Fraction(0)
        return self.segment_cells(table, declared, path, months, month_cells, inside_split[fk], null_split[fk],
                                  average, unlabelled)

    def unshaped(self, table: Table, planned: tuple[str | None, ...], why: str) -> None:
        """Warn of a planned column's ``distribution`` or ``depends_on``, which its plan leaves unused."""
        for name in planned:
            col = table.column(name) if name else None
            keys = [k for k, given in (("distribution", col and col.distribution), ("depends_on", col and col.depends_on))
                    if given]
            if keys:
                self.warnings.append(f"{table.name}.{name}: {' and '.join(keys)} read and not used: {why}")

    def segment_cells(self, table: Table, declared: SegmentShares, path: tuple[Relationship, ...],
                      months: list[dt.date], month_cells: list[list[Cell]], orphans: np.ndarray, nulls: np.ndarray,
                      average: Fraction, unlabelled: Fraction = Fraction(0)) -> list[list[Cell]]:
        """Each month's cells split by the parents' label (``segment_shares``): the rows without a known parent
        first take ``average`` each (the curve's average row) from one cell's total, then the rest of the month's
        total splits over the labels by the declared shares, exactly, each cell keeping its own total."""
        curve = next(c for c in self.spec.outcome_curves if c.table == table.name)
        mcol = table.column(curve.column)
        d, (lo, hi) = mcol.decimals, _bounds(mcol)
        where = f"segment_shares[{self.spec.segment_shares.index(declared)}]"
        weights = [share * float(1 - unlabelled) for _, share in declared.shares] + (
            [float(unlabelled)] if unlabelled else [])
        names = [label for label, _ in declared.shares] + ["unlabelled"]
        out, totals, unlinked = [], [], []
        parts_of = [[(code, count, round_fraction(average * count)) for code, count in
                     ((links.ORPHAN, int(orphans[m])), (links.NO_PARENT, int(nulls[m]))) if count]
                    for m in range(len(month_cells))]
        if d:  # the unlinked rows' quarter totals are answers too: none whole, so rounding to units shows
            base = [sum(part for _, _, part in parts) for parts in parts_of]
            roomy = [m for m, parts in enumerate(parts_of) if parts and parts[0][1] * lo < parts[0][2] < parts[0][1] * hi]
            fixed, _ = _without_whole_runs(base, roomy, months, d)
            parts_of = [[(code, count, part + (f - b if i == 0 else 0)) for i, (code, count, part) in enumerate(parts)]
                        for parts, f, b in zip(parts_of, fixed, base)]
        for m, cells in enumerate(month_cells):
            sizes = [c.rows - c.null_measures for c in cells]
            # the month's rows without a known parent share one cell, so each kind opens and closes the month
            largest = sizes.index(max(sizes))
            split = [(int(orphans[m]), int(nulls[m])) if i == largest else (0, 0) for i in range(len(cells))]
            rest, linked, outside = [], [], 0
            for c, (o, n), filled in zip(cells, split, sizes):
                if o + n >= filled:
                    raise self.err(where, declared.line, f"{months[m]:%Y-%m}: {table.name} has too few "
                                   "rows for its orphans and missing parents beside its segments; raise rows")
                parts = [Cell(c.label, count, part, 0, code) for code, count, part in parts_of[m]] if o + n else []
                outside += sum(x.total for x in parts)
                rest.append(parts)
                linked.append(c.total - sum(x.total for x in parts))
            targets = [int(x) for x in _spread_cents(apportion(sum(linked), weights), d)]
            grid = links.controlled_round(linked, targets)
            month_out = []
            for c, (o, n), parts, row in zip(cells, split, rest, grid):
                filled = c.rows - c.null_measures - o - n
                share = [int(x) for x in row] if row.sum() else [1] * len(row)
                wanted = sum(1 for x in row if x)
                filled_rows = apportion(filled, share, minimum=1 if filled >= wanted else 0)
                null_rows = apportion(c.null_measures, share)
                for s, label in enumerate(names[:len(weights)]):
                    total, r, z = int(row[s]), int(filled_rows[s]), int(null_rows[s])
                    if total and (r == 0 or r * lo > total or total > r * hi):
                        raise self.err(where, declared.line,
                                       f"{months[m]:%Y-%m}: the {label} part {total / 10 ** d:.{d}f} of "
                                       f"{table.name}.{curve.column} cannot be made from {r} rows between "
                                       f"{lo / 10 ** d:.{d}f} and {hi / 10 ** d:.{d}f}; raise rows or change the shares")
                    if r + z:
                        month_out.append(Cell(c.label, r + z, total, z, s))
                month_out += parts
            out.append(month_out)
            totals.append(tuple(int(x) for x in grid.sum(axis=0)[:len(declared.shares)]))
            unlinked.append(outside)
        hops = tuple((rel.child_table, rel.child_column, rel.parent_table, rel.parent_column) for rel in path)
        self.segment_facts.append(SegmentFacts(
            table.name, curve.column, curve.time_column, table.column(curve.time_column).type, d, hops,
            declared.by_table, declared.by_column, declared.grain, tuple(label for label, _ in declared.shares),
            tuple(months),
            tuple(totals), tuple(unlinked)))
        return out

    def rotate_peak(self, table: Table, column: str, base: list[int], totals: list[int], d: int) -> list[int]:
        """With rotated answers, each rotation's peak month is another of the months the curve leaves in reach (a
        month whose unperturbed total, moved up within its band, passes every other moved down within theirs): the
        chosen month goes near the top of its band and every month above it just below it."""
        reach = [i for i, v in enumerate(base) if v * (1 + PEAK_BAND) > max(base[:i] + base[i + 1:], default=v) * (
            1 - ROTATED_BAND)]
        if len(reach) < 2:
            self.warnings.append(
                f"{table.name}.{column}: the peak month is the same on every rotation (no other month's total comes "
                f"within {ROTATED_BAND * 200:.0f}% of the largest), so its question's answer does not rotate")
            return totals
        reach.sort(key=lambda i: stable_int(self.spec.seed, table.name, column, "__peak__", i))
        target = reach[(self.seed - self.spec.seed) % len(reach)]
        lift = rng_for(self.seed, "__answers__", table.name, column, "__peak__").uniform(0.8, 1.0) * PEAK_BAND
        top = round_fraction(Fraction(base[target]) * Fraction(1 + lift).limit_denominator(10 ** 6))
        out = list(totals)
        out[target] = top
        above = sorted((i for i, t in enumerate(totals) if i != target and t >= top), key=lambda i: -totals[i])
        for rank, i in enumerate(above, start=1):  # just below the new peak, in their order, none tied
            out[i] = top - rank * max(1, top // 200)
        return [t + 1 if d and t % 10 ** d == 0 else t for t in out]  # cents catch 'rounded to whole units'

    def _rows_per_month(self, window_rows: int, totals: list[int], low: list[int], high: list[int]) -> list[int]:
        """Rows per month, roughly proportional to the month's total but not exactly, so that the
        month with the highest total is not also the month with the highest average row; month i gets between
        low[i] and high[i] rows."""
        jitter = rng_for(self.answers_seed, "__rows_per_month__").uniform(0.97, 1.03, size=len(totals))
        rows = [int(r) for r in apportion(window_rows, [t * j for t, j in zip(totals, jitter)], minimum=min(low))]
        rows = _within(rows, low, high)
        if len(rows) > 1 and sum(1 for t in totals if t == max(totals)) == 1:
            peak = totals.index(max(totals))
            for _ in range(100):
                averages = [Fraction(t, r) for t, r in zip(totals, rows)]
                if averages.index(max(averages)) != peak:
                    break
                donor = averages.index(min(averages))
                step = max(1, rows[donor] // 50)
                if rows[donor] - step < low[donor] or rows[peak] + step > high[peak]:
                    break
                rows[donor] -= step
                rows[peak] += step
            if len(rows) > 2:
                self._fewer_rows_at_peak(rows, totals, peak, low, high)
        return rows

    @staticmethod
    def _fewer_rows_at_peak(rows: list[int], totals: list[int], peak: int, low: list[int], high: list[int]) -> None:
        """Give the runner-up month more rows than the peak month, so that 'the month with most rows' is not the
        peak; then make a third month's average row the highest (rows from it to the runner-up)."""
        runner = max((i for i in range(len(totals)) if i != peak), key=lambda i: totals[i])
        if rows[peak] >= rows[runner]:
            move = rows[peak] - rows[runner] + max(1, rows[runner] // 100)
            if rows[peak] - move < low[peak] or rows[runner] + move > high[runner]:
                return
            rows[peak] -= move
            rows[runner] += move
        others = [i for i in range(len(rows)) if i not in (peak, runner)]
        for _ in range(200):
            averages = [Fraction(t, r) for t, r in zip(totals, rows)]
            if averages.index(max(averages)) != peak:
                return
            donor = max(others, key=lambda i: averages[i])
            step = max(1, rows[donor] // 50)
            if rows[donor] - step < low[donor] or rows[runner] + step > high[runner]:
                return
            rows[donor] -= step
            rows[runner] += step

    def _month_row_bounds(self, table: Table, curve, months: list[dt.date], g_tots: list[np.ndarray],
                          share_w: list[float], window_rows: int, min_rows: int) -> tuple[list[int], list[int]]:
        """The fewest and the most rows each month of an outcome curve can hold: every group's part of the month's
        total made from rows between the column's min and max. Refuses a curve whose months cannot share the rows
        inside them that way."""
        mcol = table.column(curve.column)
        d, (lo, hi) = mcol.decimals, _bounds(mcol)

        def parts(rows: int) -> np.ndarray:
            return _group_rows(rows, share_w, mcol.nullable)[0]

        # the fewest searched past the window's rows too, so that a refusal says how many a month needs
        least = [_first(lambda r, g=g: not _short(g, parts(r), hi), min_rows, 10 ** 12) for g in g_tots]
        most = [_first(lambda r, g=g: _over(g, parts(r), lo), min_rows, window_rows) - 1 for g in g_tots]
        if sum(least) <= window_rows <= sum(most) and all(a <= b for a, b in zip(least, most)):
            return least, most

        def money(units: int) -> str:
            return f"{units / 10 ** d:.{d}f}"

        c = self.spec.outcome_curves.index(curve)
        span = f"the {len(months)} months from {months[0]:%Y-%m} to {months[-1]:%Y-%m}"
        inside = f"the {window_rows} rows {table.name} has in them (of its {table.rows})"
        if min(most) < min_rows:
            m = most.index(min(most))
            what = (f"cannot be made from the {min_rows} rows a month holds at least, between {money(lo)} and "
                    f"{money(hi)}; raise the target or lower {curve.column}'s min")
        elif sum(least) > window_rows:
            m = least.index(max(least))
            what = (f"needs at least {least[m]} rows of at most {money(hi)}, and {span} need {sum(least)} together, "
                    f"more than {inside}; raise {table.name}'s rows, lower the target or raise {curve.column}'s max")
        elif sum(most) < window_rows:
            m = most.index(min(most))
            what = (f"takes at most {most[m]} rows of at least {money(lo)}, and {span} take {sum(most)} together, "
                    f"fewer than {inside}; lower {table.name}'s rows, raise the target or lower {curve.column}'s min")
        else:
            m = next(i for i, (a, b) in enumerate(zip(least, most)) if a > b)
            what = (f"cannot be made from any number of rows between {money(lo)} and {money(hi)}; change "
                    f"{curve.column}'s min/max or the target")
        point = next((j for j, p in enumerate(curve.points) if p.month == months[m]), None)
        if point is None:  # a month between the curve's points
            path, line, between = f"outcome_curves[{c}]", curve.line, " (interpolated between curve points)"
        else:
            path, line, between = f"outcome_curves[{c}].curve_points[{point}]", curve.points[point].line, ""
        raise self.err(path, line, f"{months[m]:%Y-%m}: {table.name}.{curve.column} total "
                                   f"{money(int(sum(g_tots[m])))}{between} {what}")

    @staticmethod
    def _interpolate_rates(declared: list[tuple[dt.date, float]], months: list[dt.date]) -> list[float]:
        xs = [months.index(m) for m, _ in declared]
        return list(np.interp(np.arange(len(months)), xs, [r for _, r in declared]))

    def waterfall_cells(self, table: Table, fall, window_rows: int) -> tuple[list[list[Cell]], WaterfallFacts]:
        acol = table.column(fall.amount_column)
        d = acol.decimals
        lo_neg = to_units(acol.min, d) if acol.min is not None else -NO_MAX_UNITS
        hi_pos = to_units(acol.max, d) if acol.max is not None else NO_MAX_UNITS
        signed = waterfall_signed(acol)
        least = max(lo_neg, 1)  # the smallest positive amount a row holds
        start = to_units(fall.starting_value, d)
        endings = [to_units(self.value(f"{table.name}.ending.{p.month}", p.ending_value), d) for p in fall.points]
        months = [p.month for p in fall.points]
        types = [k for k, _ in fall.inflow_shares] + [k for k, _ in fall.outflow_shares]
        rows_per_month = apportion(window_rows, [1] * len(months), minimum=len(types))
        prev = start
        components: dict[str, list[int]] = {t: [] for t in types}
        cells_by_month = []
        for m, (month, end) in enumerate(zip(months, endings)):
            net = end - prev
            outflow = max(round_fraction(Fraction(fall.outflow_rate).limit_denominator(10**9) * prev), -net, 0)
            inflow = net + outflow
            ins = _spread_cents(apportion(inflow, [s for _, s in fall.inflow_shares]), d)
            outs = _spread_cents(apportion(outflow, [s for _, s in fall.outflow_shares]), d)
            amounts = [int(x) for x in ins] + [-int(x) for x in outs]
            nonzero = [a != 0 for a in amounts]
            weights = [abs(a) if a else 0 for a in amounts]
            n = int(rows_per_month[m])
            k = sum(nonzero)
            rows = apportion(n - k, weights) + np.array(nonzero, dtype=np.int64) if k else apportion(n, [1] * len(types))
            cells = []
            for t, a, r in zip(types, amounts, rows):
                r = int(r)
                if a == 0:
                    r = 0
                cap = hi_pos if a > 0 or not signed else -lo_neg
                if abs(a) > r * cap or not signed and least > 1 and abs(a) < r * least:
                    raise self.err(f"waterfalls[{self.spec.waterfalls.index(fall)}]", fall.line,
                                   f"{month:%Y-%m}: {t} of {abs(a) / 10 ** d:.{d}f} does not fit {r} rows within "
                                   f"{table.name}.{fall.amount_column}'s min/max (Misata writes a waterfall's amounts "
                                   "whatever the column's min and max); raise rows or widen min/max")
                cells.append(Cell(t, r, a if signed else abs(a)))
                components[t].append(a)
            moved = sum(c.rows for c in cells)
            if moved < n:  # rows of zero-amount types went nowhere: give them to the largest movement
                big = max(range(len(cells)), key=lambda i: abs(cells[i].total or 0))
                c = cells[big]
                cells[big] = Cell(c.label, c.rows + n - moved, c.total)
            cells_by_month.append(cells)
            prev = end
        facts = WaterfallFacts(
            table.name, fall.period_column, table.column(fall.period_column).type, fall.type_column,
            fall.amount_column, d, tuple(months), start, tuple(endings),
            tuple((t, tuple(v)) for t, v in components.items()), signed, tuple(k for k, _ in fall.inflow_shares),
        )
        return cells_by_month, facts

    # ---- other tables

    def block_plan(self, table: Table, keys: list[KeyFacts]) -> TablePlan:
        """Plan a table without a time axis: blocks of rows; orphans/nulls spread over blocks."""
        ledger = next((lg for lg in self.spec.ledgers if lg.table == table.name), None)
        sizes = [BLOCK_ROWS] * (table.rows // BLOCK_ROWS) + ([table.rows % BLOCK_ROWS] if table.rows % BLOCK_ROWS else [])
        orphans = {k.child_column: apportion(k.orphans, sizes) for k in keys if k.child_table == table.name and k.orphans}
        nulls = {k.child_column: apportion(k.nulls, sizes) for k in keys if k.child_table == table.name and k.nulls}
        chunks, offset = [], 0
        for b, size in enumerate(sizes):
            chunks.append(Chunk("block", None, size, offset,
                                orphans=tuple((n, int(v[b])) for n, v in orphans.items() if v[b]),
                                fk_nulls=tuple((n, int(v[b])) for n, v in nulls.items() if v[b])))
            offset += size
        facts = None
        if ledger:
            facts = LedgerFacts(ledger.name, table.name, ledger.group_by[0], ledger.debit_column,
                                ledger.credit_column, ledger.decimals)
            self.unshaped(table, (ledger.debit_column, ledger.credit_column), "the ledger plans its amounts to balance")
        return TablePlan(table.name, table.rows, tuple(chunks), ledger=facts)

    def deleted_keys(self, plans: dict[str, TablePlan], keys: list[KeyFacts]) -> dict[str, TablePlan]:
        """Parents of planted orphans: ids that existed in the key range and were deleted."""
        out = dict(plans)
        for k in keys:
            if not k.orphans:
                continue
            col = self.tables[k.parent_table].column(k.parent_column)
            if col.type != "int":
                continue
            rows = self.tables[k.parent_table].rows
            count = min(k.orphans, 5)
            rng = rng_for(self.answers_seed, k.parent_table, k.parent_column, "__deleted__")  # keys are answers
            lo = int(col.min) if col.min is not None else 1
            span = rows + count
            if col.max is not None and lo + span - 1 > col.max:
                raise self.err(f"tables.{k.parent_table}.columns.{k.parent_column}.max", col.line,
                               f"room is needed for {count} deleted parent ids beside {rows} rows; raise max")
            # gaps inside the key range; a parent table of one row leaves too few inner ids, so use them all
            pool = np.arange(1, span - 1) if span - 2 >= count else np.arange(span)
            picked = sorted(int(x) for x in rng.choice(pool, size=count, replace=False) + lo)
            plan = out[k.parent_table]
            existing = dict(plan.deleted_keys)
            existing[k.parent_column] = tuple(sorted(set(existing.get(k.parent_column, ())) | set(picked)))
            out[k.parent_table] = replace(plan, deleted_keys=tuple(sorted(existing.items())))
        return out


    # ---- planned keys

    def plan_links(self, plans: dict[str, TablePlan], keys: list[KeyFacts]) -> tuple[dict[str, TablePlan],
                                                                                      list[ParentFacts]]:
        """The segment columns' labels, then every planned foreign key (a chain's middle key first)."""
        out = dict(plans)
        labels: dict[tuple[str, str], np.ndarray] = {}
        for g, _ in self.segment_of.values():
            if (g.by_table, g.by_column) in labels:
                continue
            col = self.tables[g.by_table].column(g.by_column)
            weights = list(col.weights or [1.0] * len(col.choices)) if not g.grain else [
                (last - first).days + 1 for _, first, last in links.periods(col.start, col.end, g.grain)]
            codes = links.planned_labels(self.tables[g.by_table].rows, weights,
                                         rng_for(self.answers_seed, g.by_table, g.by_column, "__labels__"))
            labels[(g.by_table, g.by_column)] = codes
            out[g.by_table] = replace(out[g.by_table], labels=out[g.by_table].labels + (
                Labels(g.by_column, codes, g.grain),))
        middle = [(path[1].child_table, path[1].child_column) for _, path in self.segment_of.values() if len(path) == 2]
        index_of: dict[tuple[str, str], np.ndarray] = {}
        facts = []
        for table, column in dict.fromkeys(middle + sorted(self.planned)):
            rel = next(r for r in self.spec.relationships if (r.child_table, r.child_column) == (table, column))
            rng = rng_for(self.answers_seed, table, column, "__links__")
            declared, path = self.segment_of.get(table, (None, ()))
            segmented = bool(path) and path[0].child_column == column
            codes = self.row_codes(out[table], column, declared if segmented else None, rng)
            if segmented:
                choices = segment_labels(self.tables[declared.by_table].column(declared.by_column), declared.grain)
                remap = np.full(len(choices), -1, dtype=np.int64)
                remap[[choices.index(label) for label, _ in declared.shares]] = np.arange(len(declared.shares))
                owner = remap[labels[(declared.by_table, declared.by_column)]]
                if len(path) == 1:
                    parent_codes = owner
                else:
                    up = index_of[(path[1].child_table, path[1].child_column)]
                    parent_codes = np.where(up >= 0, owner[np.maximum(up, 0)], len(declared.shares))
            else:
                parent_codes = np.zeros(self.tables[rel.parent_table].rows, dtype=np.int64)
            pp = self.per_parent.get((table, column))
            periods: tuple[PeriodChildren, ...] = ()
            if pp is not None and pp.per:
                index, counts, top, periods = self.assign_per_period(rel, out[table], codes, parent_codes,
                                                                     declared if segmented else None, pp, rng)
            else:
                counts, top = self.child_counts(rel, codes, parent_codes, declared if segmented else None, rng)
                index = links.assign(codes, parent_codes, counts, rng)
            index_of[(table, column)] = index
            out[table] = replace(out[table], links=out[table].links + (Link(column, rel.parent_table, index, segmented),))
            if (table, column) not in middle or (table, column) in self.per_parent:
                facts.append(replace(self.parent_facts(rel, out, index, counts, top), per=pp.per if pp else None,
                                     periods=periods))
        return out, facts

    def row_codes(self, plan: TablePlan, column: str, declared: SegmentShares | None,
                  rng: np.random.Generator) -> np.ndarray:
        """Each row's segment (or links.ORPHAN / links.NO_PARENT) in cell order: a month's cells carry it; rows
        outside the window draw a label by the shares; without segments, every row with a known parent is 0."""
        codes = np.zeros(plan.rows, dtype=np.int64)
        for chunk in plan.chunks:
            if declared is not None and chunk.kind == "month":
                at = chunk.offset
                for cell in chunk.cells:
                    codes[at:at + cell.rows] = cell.segment
                    at += cell.rows
                continue
            if declared is not None:
                weights = np.array([share for _, share in declared.shares])
                codes[chunk.offset:chunk.offset + chunk.rows] = rng.choice(len(weights), size=chunk.rows,
                                                                           p=weights / weights.sum())
            links.scatter_unlinked(codes, chunk.offset, chunk.rows, dict(chunk.orphans).get(column, 0),
                                   dict(chunk.fk_nulls).get(column, 0), rng)
        return codes

    def child_counts(self, rel: Relationship, codes: np.ndarray, parent_codes: np.ndarray,
                     declared: SegmentShares | None, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Children per parent row: by ``per_parent`` where declared (within each segment), else uniform; and
        how many top parents a question may list (0: none without a tie at the cut)."""
        pp = self.per_parent.get((rel.child_table, rel.child_column))
        counts, movable, floor = self.segment_counts(rel, codes, parent_codes, declared, pp, rng)
        top = pp.top if pp is not None else 0
        if top and not links.separate_top(counts, parent_codes, top, movable, floor):
            self.tie_warning(rel, top)
            top = 0
        return counts, top

    def segment_counts(self, rel: Relationship, codes: np.ndarray, parent_codes: np.ndarray,
                       declared: SegmentShares | None, pp: PerParent | None, rng: np.random.Generator,
                       when: str = "") -> tuple[np.ndarray, np.ndarray, int]:
        """Children per parent row for the rows ``codes`` (a segment index each; others are skipped): by ``pp``'s
        counts within each segment, else uniform; which parents may give rows away; the open bucket's floor."""
        counts = np.zeros(len(parent_codes), dtype=np.int64)
        movable = np.zeros(len(parent_codes), dtype=bool)
        floor = 0
        parent = self.spec.semantics.table(rel.parent_table)
        sizes = np.bincount(codes[codes >= 0])
        for segment in np.flatnonzero(sizes):
            rows = int(sizes[segment])
            parents = np.flatnonzero(parent_codes == segment)
            label = f" labelled {declared.shares[segment][0]}" if declared is not None and segment < len(
                declared.shares) else ""
            if not len(parents):
                g = self.spec.segment_shares.index(declared)
                raise self.err(f"segment_shares[{g}].shares", declared.line,
                               f"no {parent.singular}{label} is left to take {rows} {rel.child_table} rows; give "
                               f"{declared.by_table} more rows or drop that label's share")
            if pp is None:
                counts[parents] = rng.multinomial(rows, np.full(len(parents), 1 / len(parents)))
                movable[parents] = True
                continue
            shares = [self.value(f"per_parent.{rel.child_table}.{rel.child_column}.{b.count}", b.share) for b in pp.counts]
            made = links.bucket_counts(len(parents), rows, [(b.count, b.open, share)
                                                            for b, share in zip(pp.counts, shares)], rng)
            if made is None:
                where = pp.path if pp.path.endswith("min_children") else f"{pp.path}.counts"
                raise self.err(where, pp.line,
                               f"{rows} {rel.child_table} rows{when} cannot give {len(parents)} {parent.plural}"
                               f"{label} exactly these counts; change the counts (an open bucket such as '3+' takes "
                               f"the rest) or {rel.child_table}'s rows")
            counts[parents], movable[parents] = made
            floor = max((b.count for b in pp.counts if b.open), default=0)
        return counts, movable, floor

    def tie_warning(self, rel: Relationship, top: int) -> None:
        parent = self.spec.semantics.table(rel.parent_table)
        self.warnings.append(f"{rel.child_table}.{rel.child_column}: the top {top} {parent.plural} by "
                             f"{rel.child_table} rows would tie at the cut, so that question is not asked")

    def assign_per_period(self, rel: Relationship, plan: TablePlan, codes: np.ndarray, parent_codes: np.ndarray,
                          declared: SegmentShares | None, pp: PerParent, rng: np.random.Generator
                          ) -> tuple[np.ndarray, np.ndarray, int, tuple[PeriodChildren, ...]]:
        """The parent of every row when ``pp`` holds within each ``pp.per`` period of the child's curve: each
        period's rows are shared by the declared counts, the rows outside the window uniformly among the other
        parents. The top parents are drawn up front: they take each period's largest counts of their segment, then
        rows of open-bucket parents above the bucket's floor until their totals stand apart (which moves no parent
        across a declared count); where that cannot be done, a warning and no top question. Returns (the parent
        index per row, children per parent, the top size, each period's children per parent)."""
        index = np.where(codes < 0, codes, links.NOT_PLACED)
        leaders = rng.permutation(len(parent_codes))[: pp.top]
        groups: dict[str, list[Chunk]] = {}
        for chunk in plan.chunks:
            if chunk.kind == "month":
                groups.setdefault(links.period_of(chunk.month, pp.per), []).append(chunk)
        spans = []
        for label, chunks in groups.items():
            rows = np.concatenate([np.arange(c.offset, c.offset + c.rows) for c in chunks])
            inside = np.full(len(codes), links.NOT_PLACED)
            inside[rows] = codes[rows]
            counts, _, floor = self.segment_counts(rel, inside, parent_codes, declared, pp, rng, f" in {label}")
            links.favour(counts, parent_codes, leaders)
            index[rows] = links.assign(inside, parent_codes, counts, rng)[rows]
            spans.append((label, chunks[0].month, add_months(chunks[-1].month, 1), rows))
        rest = np.where(index == links.NOT_PLACED, codes, links.NOT_PLACED)
        others = parent_codes.copy()
        others[leaders] = -1
        for segment in np.flatnonzero(np.bincount(rest[rest >= 0])):
            if not (others == segment).any():
                others[parent_codes == segment] = segment
        spread, _, _ = self.segment_counts(rel, rest, others, declared, None, rng)
        index[rest >= 0] = links.assign(rest, others, spread, rng)[rest >= 0]
        if any(b.open for b in pp.counts):
            floor = max(b.count for b in pp.counts if b.open)
            links.lift_leaders(index, parent_codes, leaders, [rows for *_, rows in spans], floor)
        counts = np.bincount(index[index >= 0], minlength=len(parent_codes))
        top = pp.top
        if top and not links.tops_apart(counts, top):
            self.tie_warning(rel, top)
            top = 0
        facts = []
        for label, first, end, rows in spans:
            placed = index[rows]
            values, many = np.unique(np.bincount(placed[placed >= 0], minlength=len(parent_codes)),
                                     return_counts=True)
            facts.append(PeriodChildren(label, first, end, tuple((int(v), int(n)) for v, n in zip(values, many))))
        return index, counts, top, tuple(facts)

    def parent_facts(self, rel: Relationship, plans: dict[str, TablePlan], index: np.ndarray, counts: np.ndarray,
                     top: int) -> ParentFacts:
        """What the planned key ``rel`` fixes: the children-per-parent counts, active parents per month, the top."""
        child = plans[rel.child_table]
        months, active, repeat = [], [], []
        for chunk in child.chunks:
            if chunk.kind == "month":
                part = index[chunk.offset:chunk.offset + chunk.rows]
                per_parent = np.bincount(part[part >= 0], minlength=len(counts))
                months.append(chunk.month)
                active.append(int((per_parent > 0).sum()))
                repeat.append(int((per_parent >= REPEAT).sum()))
        values, many = np.unique(counts, return_counts=True)
        pcol = self.tables[rel.parent_table].column(rel.parent_column)
        leaders: tuple[tuple[int, int], ...] = ()
        if top and pcol.type == "int":
            order = np.lexsort((np.arange(len(counts)), -counts))[:top]
            deleted = dict(plans[rel.parent_table].deleted_keys).get(rel.parent_column, ())
            keys_ = int_keys(pcol, order, deleted)
            leaders = tuple((int(k), int(counts[i])) for k, i in zip(keys_, order))
        tcol = self.tables[rel.child_table].column(child.time_column) if child.time_column else None
        if tcol is not None and tcol.type == "datetime" and months:
            parent = self.spec.semantics.table(rel.parent_table).plural
            self.warnings.append(
                f"{rel.child_table}.{child.time_column}: a datetime column, so {parent} counted within a month or "
                f"a period (active_parents, repeat_parents, period_parents_at_least, period_parents_without) are "
                f"not asked: a window a moment off moves only the few {rel.child_table} rows at midnight, whose "
                f"{parent} mostly have other rows then, so the count would not show it (a date column's whole first "
                f"day would)")
        return ParentFacts(rel.child_table, rel.child_column, rel.parent_table, rel.parent_column, len(counts),
                           int((index >= 0).sum()), tuple((int(v), int(n)) for v, n in zip(values, many)),
                           child.time_column, tcol.type if tcol else "date", tuple(months), tuple(active), tuple(repeat),
                           leaders)


def int_keys(col: Column, index: np.ndarray, deleted: tuple[int, ...]) -> np.ndarray:
    """The values of a unique int key column at rows ``index``: from its min, skipping the deleted ids."""
    keys = np.asarray(index, dtype=np.int64) + (int(col.min) if col.min is not None else 1)
    for d in deleted:
        keys += keys >= d
    return keys


def plan_rotation(spec: Spec, seed: int) -> RotationPlan:
    """The answer key and the row plan of the rotation with ``seed``."""
    planner = _Planner(spec, seed)
    keys = planner.key_facts()
    axis_tables = {c.table for c in spec.outcome_curves} | {c.table for c in spec.rate_curves} | {
        w.table for w in spec.waterfalls}
    plans: dict[str, TablePlan] = {}
    curves, rates, falls = [], [], []
    for table in spec.tables:
        if table.name in axis_tables:
            plan, c, r, f = planner.time_plan(table, keys)
            curves += c
            rates += r
            falls += f
        else:
            plan = planner.block_plan(table, keys)
        plans[table.name] = plan
    plans = planner.deleted_keys(plans, keys)
    plans, parents = planner.plan_links(plans, keys)
    keys = [replace(k, inside=any(dict(chunk.orphans).get(k.child_column) for chunk in plans[k.child_table].chunks
                                  if chunk.kind in ("month", "block")), child_rows=plans[k.child_table].rows)
            for k in keys]
    ledgers = tuple(p.ledger for p in plans.values() if p.ledger)
    key = AnswerKey(tuple(curves), tuple(rates), ledgers, tuple(falls), tuple(keys), tuple(planner.segment_facts),
                    tuple(parents))
    return RotationPlan(seed, key, tuple(plans[t.name] for t in spec.tables), tuple(planner.warnings))


def plan_pack(spec: Spec) -> tuple[RotationPlan, ...]:
    """One plan per rotation. With ``answers: shared`` every answer key is identical."""
    return tuple(plan_rotation(spec, s) for s in spec.seeds())
