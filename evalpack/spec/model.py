"""The spec as frozen, typed objects: tables, columns, relationships and every declared fact, the answer key's
source. Built by :func:`evalpack.spec.reader.parse_spec`; nothing here reads YAML."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from evalpack.core.layout import rotation_name
from evalpack.spec.semantics import Semantics


@dataclass(frozen=True)
class Distribution:
    """A plain numeric column's shape (``distribution:`` and its parameters, Misata's names), drawn within the
    column's min and max."""

    shape: str
    params: tuple[tuple[str, float], ...] = ()

    def param(self, name: str) -> float | None:
        """The parameter called ``name``, or None when not given."""
        return next((v for k, v in self.params if k == name), None)


@dataclass(frozen=True)
class Branch:
    """What a ``depends_on`` column holds on the rows of one label (``mapping:``) or of the others (``default:``):
    a constant ``value``, or values between ``min`` and ``max`` (the column's own where left out) drawn with
    ``distribution`` (evenly when None)."""

    value: float | None = None
    min: float | None = None
    max: float | None = None
    distribution: Distribution | None = None


@dataclass(frozen=True)
class Column:
    """One declared column. ``decimals`` is the number of fractional digits of numbers."""

    name: str
    type: str
    line: int
    unique: bool = False
    min: float | None = None
    max: float | None = None
    decimals: int = 0
    nullable: float = 0.0
    choices: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    rate: float | None = None
    start: dt.date | None = None
    end: dt.date | None = None
    text_type: str | None = None
    references: tuple[str, str] | None = None  # a foreign key's `references: table.column`, as written
    dated: bool = True  # a date/datetime column declared its start or end (else 2025 is its range)
    distribution: Distribution | None = None  # a plain int/float column's shape (None: even between min and max)
    depends_on: str | None = None  # a categorical column of the same table whose label picks the branch
    mapping: tuple[tuple[str, Branch], ...] = ()  # label -> what the rows of that label hold
    default: Branch | None = None  # the rows of the other labels (None: the column's own min, max, distribution)


@dataclass(frozen=True)
class Table:
    name: str
    rows: int
    columns: tuple[Column, ...]
    line: int
    rows_line: int = 0  # the line of `rows:` (the table's line when rows come from the default)

    def column(self, name: str) -> Column | None:
        """The column called ``name``, or None."""
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class Relationship:
    parent_table: str
    parent_column: str
    child_table: str
    child_column: str
    line: int
    orphans: int = 0
    nulls: int = 0


@dataclass(frozen=True)
class CurvePoint:
    month: dt.date  # first day of the calendar month the point sits on
    value: float
    line: int


@dataclass(frozen=True)
class OutcomeCurve:
    table: str
    column: str
    time_column: str
    points: tuple[CurvePoint, ...]
    line: int
    avg_transaction_value: float | None = None
    rows_per_period: tuple[int | None, int | None] = (None, None)  # Misata's min/max_transactions_per_period


@dataclass(frozen=True)
class RatePoint:
    month: dt.date
    rate: float
    line: int


@dataclass(frozen=True)
class RateCurve:
    table: str
    column: str
    time_column: str
    points: tuple[RatePoint, ...]
    line: int
    interpolate: bool = True  # False: the months between points keep the column's own rate (Misata's)


@dataclass(frozen=True)
class GroupShares:
    table: str
    measure: str
    group_column: str
    shares: tuple[tuple[str, float], ...]
    line: int


@dataclass(frozen=True)
class SegmentShares:
    """``segment_shares``: a curve's measure split by a categorical column of a parent table (``by``), reached
    through the table's foreign key, or of a grandparent reached through the parent's foreign key."""

    table: str
    measure: str
    by_table: str
    by_column: str
    shares: tuple[tuple[str, float], ...]
    line: int
    grain: str | None = None  # with a date column: its calendar period (month | quarter | year) is the label


@dataclass(frozen=True)
class ChildCount:
    """One bucket of ``per_parent.counts``: parents with exactly ``count`` children, or at least it (``open``)."""

    count: int
    open: bool
    share: float


@dataclass(frozen=True)
class PerParent:
    """``per_parent``: how many rows of ``child_table`` each parent has through ``child_column``."""

    child_table: str
    child_column: str
    counts: tuple[ChildCount, ...]
    line: int
    top: int = 5  # the parents with most children a question lists (0: none)
    path: str = field(default="", compare=False)  # where declared: per_parent[0], relationships[1].min_children
    per: str | None = None  # month | quarter | year: the counts hold within each such period of the child's curve


@dataclass(frozen=True)
class _Via:
    """What SPEC_FORMAT.md's spelling says of a declaration's foreign key, checked once the relationships are
    known: segment_shares' `via` (``column``: table, column), or per_parent's key with its `parent` table."""

    column: tuple[str, str]
    parent: str | None = None


@dataclass(frozen=True)
class WaterfallPoint:
    month: dt.date
    ending_value: float
    line: int


@dataclass(frozen=True)
class Waterfall:
    table: str
    period_column: str
    type_column: str
    amount_column: str
    starting_value: float
    points: tuple[WaterfallPoint, ...]
    inflow_shares: tuple[tuple[str, float], ...]
    outflow_shares: tuple[tuple[str, float], ...]
    outflow_rate: float
    line: int


@dataclass(frozen=True)
class TimeGrid:
    table: str
    column: str
    minute_grid: int
    hours: tuple[int, int]
    line: int


@dataclass(frozen=True)
class BalancedLedger:
    name: str
    table: str
    group_by: tuple[str, ...]
    debit_column: str
    credit_column: str
    decimals: int
    line: int
    path: tuple = ()  # where it is declared: ("tables", t, "constraints", i) or ("constraints", i)


@dataclass(frozen=True)
class Sibling:
    """``traps.siblings[i]``: a column that reads like ``of`` but is not it; the trap adds the column. An amount's
    sibling (``relation: times``) holds ``of``'s value times a factor drawn evenly from [low, high], to its decimals;
    a date's (``plus_days``) holds ``of``'s date or time a whole number of days in [low, high] later. NULL where
    ``of`` is NULL."""

    table: str
    column: str
    of: str  # the real column, of the same table
    low: float
    high: float
    line: int
    relation: str = "times"  # times | plus_days


@dataclass(frozen=True)
class NotCounted:
    """``traps.not_counted[i]``: rows of ``table`` that exist but do not count. For every ``per_rows`` rows that
    count, ``share`` times as many more are written that do not, in every month and group of the rows they copy;
    they carry one of ``values`` in ``column`` (a categorical column of the table, or a boolean one marked by
    true), which the counted rows never do. Every declared fact holds over the rows that count."""

    table: str
    column: str
    values: tuple[str, ...]  # labels of a categorical column, or ("true",) of a boolean one
    share: float
    reason: str
    line: int


@dataclass(frozen=True)
class Coded:
    """``traps.codes[i]``: a categorical column stored as integer codes; ``book`` pairs each label (what questions and
    answers say) with its code (what the table holds), from ``semantics.columns.<column>.values`` or 1, 2, ... in
    the order of the column's choices."""

    table: str
    column: str
    book: tuple[tuple[str, int], ...]
    line: int

    def code(self, label: str) -> int:
        return dict(self.book)[label]


@dataclass(frozen=True)
class Traps:
    """``traps:``: columns and rows that punish a careless query (none unless declared)."""

    siblings: tuple[Sibling, ...] = ()
    not_counted: tuple[NotCounted, ...] = ()
    codes: tuple[Coded, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.siblings or self.not_counted or self.codes)

    def sibling(self, table: str, column: str) -> Sibling | None:
        return next((s for s in self.siblings if (s.table, s.column) == (table, column)), None)

    def excluded(self, table: str) -> tuple[NotCounted, ...]:
        return tuple(n for n in self.not_counted if n.table == table)

    def coded(self, table: str, column: str) -> Coded | None:
        return next((c for c in self.codes if (c.table, c.column) == (table, column)), None)


DEFAULT_MIX = (("simple", 0.3), ("moderate", 0.5), ("challenging", 0.2))  # BIRD's split


@dataclass(frozen=True)
class QuestionPlan:
    """``questions:``: which families to ask, at most how many, and the difficulty mix to ship.

    ``mix`` is None when the spec says ``difficulty: any`` (every question that verifies ships)."""

    include: tuple[str, ...] = ()  # empty: every family
    exclude: tuple[str, ...] = ()
    max: int | None = None
    mix: tuple[tuple[str, float], ...] | None = DEFAULT_MIX
    unanswerable: float = 0.1  # the share of the shipped questions that no SQL on this schema answers (0: none)


@dataclass(frozen=True)
class Spec:
    """A validated pack spec. ``sha256`` is the SHA-256 of the spec file's bytes as read."""

    name: str
    version: str
    description: str | None
    license: str
    seed: int
    rotations: int
    answers: str
    holdout: float
    tables: tuple[Table, ...]
    relationships: tuple[Relationship, ...] = ()
    outcome_curves: tuple[OutcomeCurve, ...] = ()
    rate_curves: tuple[RateCurve, ...] = ()
    group_shares: tuple[GroupShares, ...] = ()
    segment_shares: tuple[SegmentShares, ...] = ()
    per_parent: tuple[PerParent, ...] = ()
    waterfalls: tuple[Waterfall, ...] = ()
    time_grids: tuple[TimeGrid, ...] = ()
    ledgers: tuple[BalancedLedger, ...] = ()
    semantics: Semantics = Semantics()
    traps: Traps = Traps()
    questions: QuestionPlan = QuestionPlan()
    repo: str | None = None  # `repo:` OWNER/NAME on the Hub, named by the card (evalpack.pack.card)
    gate: str = "block"  # the release gate's policy (evalpack.pack.diff.gate): block | warn | off
    gate_margin: float = 1.0  # percentage points the near-miss survival rate may rise by before the gate
    near_miss_gate: str = "drop"  # `near_miss: {gate:}`: drop | keep a question a plausible mistake passes everywhere
    exports: tuple[str, ...] = ()  # `exports:` formats built inside the pack (evalpack.interop.exports), in EXPORT_FORMATS order
    path: str = ""
    sha256: str = ""
    source: str = field(default="", repr=False)
    notes: tuple[str, ...] = ()  # Misata keys read and done without, each saying so (build warnings)

    def table(self, name: str) -> Table:
        """The table called ``name`` (validated to exist)."""
        return next(t for t in self.tables if t.name == name)

    def seeds(self) -> tuple[int, ...]:
        """One seed per rotation: ``seed + i``."""
        return tuple(self.seed + i for i in range(self.rotations))

    def rotation_names(self) -> tuple[str, ...]:
        """The rotations' names, in seed order (``seed_42``, ...)."""
        return tuple(rotation_name(s) for s in self.seeds())


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def add_months(day: dt.date, months: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)

