"""Load a pack spec (YAML) into frozen, typed objects, or refuse it with file, line and key path.

The accepted keys are those of SPEC_FORMAT.md: Misata's evalpack names and shapes plus our
extensions. Anything else is refused with the closest valid key; Misata features evalpack does
not support are refused by name.
"""

from __future__ import annotations

import bisect
import datetime as dt
import difflib
import functools
import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import duckdb
import yaml

from evalpack.core.errors import SpecError
from evalpack.core.layout import rotation_name
from evalpack.spec.kinds import KINDS, LEVELS
from evalpack.spec.links import GRAINS, periods
from evalpack.spec.semantics import Measure, Semantics, TableWords, plural_of

# matched with fullmatch: `$` alone lets a trailing newline through
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
PERIOD_RE = re.compile(r"^(\d{4})-(\d{2})$")
QUARTER_RE = re.compile(r"^(\d{4})-?[Qq]([1-4])$")
# `repo:` the Hub repo id, the rule of publish.layout.check_repo_id (copied: the engine imports no publish)
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
# `license:` the Hub's license identifiers, from huggingface/hub-docs docs/hub/repositories-licenses.md
# ("region licenses", commit 242f4a1e, 2026-08-22; https://huggingface.co/docs/hub/repositories-licenses)
HUB_LICENSES = (
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0", "cc-by-sa-3.0",
    "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-3.0",
    "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0", "cdla-sharing-1.0",
    "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0", "etalab-2.0", "eupl-1.1",
    "eupl-1.2", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1", "lgpl-3.0", "isc", "h-research",
    "intel-research", "lppl-1.3c", "ms-pl", "apple-ascl", "apple-amlr", "mpl-2.0", "odc-by", "odbl", "openmdw-1.0",
    "openmdw-1.1", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib", "pddl", "lgpl-lr",
    "deepfloyd-if-license", "fair-noncommercial-research-license", "llama2", "llama3", "llama3.1", "llama3.2",
    "llama3.3", "llama4", "grok2-community", "gemma", "unknown", "other",
)

COLUMN_TYPES = ("int", "float", "text", "categorical", "boolean", "date", "datetime", "foreign_key")
TYPE_ALIASES = {"integer": "int", "number": "float", "string": "text", "bool": "boolean"}
TEXT_TYPE_ALIASES = {"email": "email", "uuid": "uuid"}  # Misata column types that are text kinds
# the text kinds evalpack.data.textgen draws (TEXT_TYPES), and Misata's other names for them (TEXT_TYPE_NAMES)
TEXT_TYPE_NAMES = {
    "phone_number": "phone", "job": "job_title", "zip": "postal_code", "zip_code": "postal_code",
    "postcode": "postal_code", **{prose: "sentence" for prose in (
        "description", "product_description", "bio", "caption", "review", "comment_body", "support_ticket",
        "email_body", "ticket_body", "resolution_notes", "transaction_memo", "text")},
    **{short: "title" for short in ("short_review_title", "ticket_subject", "research_project_name",
                                    "restaurant_name", "menu_item")},
}
TEXT_TYPES = ("name", "email", "company", "city", "word", "sentence", "uuid", "first_name", "last_name", "username",
              "phone", "url", "address", "country", "state", "job_title", "product_name", "postal_code", "title")

# Misata features evalpack refuses by name, rather than as unknown keys.
UNSUPPORTED_TOP = (
    "scd2", "stock_flows", "lifecycles", "graph_motifs", "retention", "missingness",
    "late_arrivals", "duplicates", "event_logs", "processes", "outliers", "typos", "bitemporal",
    "dag_edges", "closures", "degradations", "joint_distributions", "noise", "noise_config",
    "realism", "vocabularies", "preset", "generation_mode",
)
# Misata keys that shape only what no declared fact touches: evalpack reads them, does without them and says so
# in the build's warnings (the manifest's `warnings`), so that a Misata spec builds unchanged.
NOTED_TOP = {
    "domain": "Misata picks realistic value distributions for that business domain; evalpack's values follow each "
              "column's own declaration",
    "locale": "Misata localises names and money with it; evalpack's text is locale-free",
    "events": "Misata applies each scenario event (a modifier on the rows its condition selects) after drawing the "
              "rows; evalpack's rows follow the declarations alone, so no event changes them (declare an outcome "
              "or rate curve for a change that questions should measure)",
}
NOTED_CURVE = {
    "concentration": "Misata spreads a period's total over its rows with a Dirichlet of that concentration; evalpack "
                     "spreads it within the column's min and max itself, to the same exact total",
    "intra_period_pattern": "Misata leans a period's rows towards weekdays or weekends; evalpack spreads them over "
                            "the month, with rows on its first and last day so that a wrong bound shows",
    "pattern_type": "Misata shapes the months between the declared points by it (seasonal, growth, ...); evalpack "
                    "interpolates them linearly, and every declared point's month holds its target exactly",
}
UNSUPPORTED_TABLE = ("scd2", "correlations", "inline_data", "is_reference")
UNSUPPORTED_COLUMN = ("lambda", "formula", "pattern", "values", "rollup", "relative_to", "min_delta_days",
                      "max_delta_days")
# A plain int or float column's `distribution:` (Misata's shapes and parameter names), drawn within its min and
# max (evalpack.data.generate.draw_distribution); the parameters each shape reads.
DISTRIBUTIONS = {
    "uniform": (), "normal": ("mean", "std"), "lognormal": ("mu", "sigma", "mean", "std"),
    "exponential": ("scale",), "gamma": ("shape", "scale"), "beta": ("a", "b"), "pareto": ("alpha", "a", "scale"),
}
DISTRIBUTION_ALIASES = {"log_normal": "lognormal", "power_law": "pareto", "zipf": "pareto"}
DISTRIBUTION_KEYS = ("distribution", "mean", "std", "mu", "sigma", "scale", "shape", "alpha", "a", "b")
DEPENDENT_KEYS = ("depends_on", "mapping", "default")  # Misata's per-label values of a numeric column
UNSUPPORTED_COLUMN_TYPES = ("time", "json", "array", "object")
# What Misata does with a key evalpack refuses by name, and what to write instead (appended to the refusal).
MISATA_NOTES = {
    "preset": "Misata applies that use case's defaults (rows, dates, dirt); evalpack reads only what the spec "
              "declares; remove it and declare rows and dates on the tables",
    "lambda": "Misata draws an exponential of that rate; evalpack's exponential reads Misata's other name for it, "
              "`scale` (1/lambda); write scale: 1/lambda instead",
    "formula": "Misata computes the column from the row's other columns; evalpack draws each column from its own "
               "declaration; remove it and give the column min/max (a question can compute it in SQL)",
    "rollup": "Misata fills each row with an aggregate of its child rows in another table; evalpack does not derive "
              "a column from another table's rows; remove it (a question can ask for that aggregate with a join)",
    **{key: "Misata dates each row within that many days of its parent's date; evalpack draws a date between the "
            "column's start and end; remove relative_to, min_delta_days and max_delta_days and give start: and end:"
       for key in ("relative_to", "min_delta_days", "max_delta_days")},
}
# Misata's relationship options, each with what to write instead. The value that asks for nothing (false, 0,
# null, {} or []) is accepted, as it is what evalpack does anyway; any other is refused with this message
# ({child}: the foreign key, {parent_table}: the parent's table, {value}: the value written).
UNSUPPORTED_RELATIONSHIP = {
    "temporal": "evalpack does not keep a child's dates after its parent's (Misata's temporal constraint); "
                "remove it or write `temporal: false`",
    "temporal_constraint": "evalpack does not keep a child's dates after its parent's (Misata's temporal "
                           "constraint); remove it or write `temporal_constraint: false`",
    "parent_time": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "child_time": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "child_time_table": "evalpack does not choose parents by their time (Misata's temporal eligibility); remove it",
    "filters": "evalpack draws the parent of {child} from every row of {parent_table}, not from the rows a "
               "filter keeps; remove it or write `filters: {{}}`",
    "partition_by": "evalpack does not keep the parent of {child} within the child's {value}; remove it or write "
                    "`partition_by: []`",
}
# `min_children: N` on a relationship builds as per_parent `{child: <fk>, counts: {"N+": 1.0}}` (parse_spec).
# Misata's keys about a column's parent (`references`, `sampling`, `unique` on a foreign key, ...) are read by
# _fk_column_keys, each honoured or refused with what to write instead; `references` alone makes the column's
# relationship, as in Misata (parse_spec).
# Misata's constraint types other than balanced_ledger, each with what to write instead.
UNSUPPORTED_CONSTRAINT = {
    "sum_limit": "evalpack does not scale a group's values down to a limit (Misata's `sum_limit`); remove the "
                 "constraint, and bound the column with its `max:` instead",
    "max_per_group": "evalpack does not cap the rows of a group (Misata's `max_per_group`); remove the constraint "
                     "(per_parent declares how many children each parent has)",
    "min_per_group": "evalpack does not raise the rows of a group (Misata's `min_per_group`); remove the constraint "
                     "(per_parent declares how many children each parent has)",
    "unique_combination": "evalpack does not drop rows that repeat a combination of columns (Misata's "
                          "`unique_combination`); remove the constraint",
    "inequality": "evalpack does not order two columns of a row (Misata's `inequality`); remove the constraint and "
                  "give the columns ranges that do not overlap",
    "col_range": "evalpack does not bound a column by two others of its row (Misata's `col_range`); remove the "
                 "constraint and bound the column by constants with `min:` and `max:`",
    "when_then": "evalpack does not apply a rule on one column when another holds a value (Misata's `when_then`); "
                 "remove the constraint",
    "lte_parent": "evalpack does not bound a child's value by its parent's row (Misata's `lte_parent`); remove the "
                  "constraint, and bound the column by constants with its `min:` and `max:` instead",
    "sum_lte_parent": "evalpack does not bound the sum of a parent's children by the parent's row (Misata's "
                      "`sum_lte_parent`); remove the constraint: the column's `max:` times the most children a "
                      "parent has (per_parent's counts) bounds the sum instead",
}
CURVE_VALUE_KEYS = ("target_value", "value", "target", "amount")

# Limits. Each is far beyond an honest spec and small enough that a hostile or careless one is refused
# while it is read, before it costs minutes, gigabytes of memory or a disk full of rows (issue 17).
# README.md ("Limits") lists them; every refusal names the limit and what to do.
MAX_SPEC_BYTES = 1_000_000  # a spec file; the example specs are 2-3 KB
MAX_DEPTH = 20  # nested mappings and lists, counted after YAML aliases; a spec needs 6
MAX_ALIAS_VALUES = 100_000  # values YAML aliases may repeat in all (an alias bomb repeats billions)
MAX_NAME_LENGTH = 63  # a table or column name (and the pack name): PostgreSQL's identifier limit
MAX_TABLE_ROWS = 50_000_000  # rows of one table in one rotation
MAX_ROTATION_ROWS = 100_000_000  # rows of all tables of one rotation
MAX_NUMBER = 10**15  # the magnitude of any number read (ints are int64 in the pack; 10**15 < 2**53)
MAX_UNITS = 10**15  # an amount in units of its column's decimals: exact in int64 sums and float64
MAX_SEED = 2**32 - 1  # numpy's classic seed range
FIRST_DATE, LAST_DATE = dt.date(1900, 1, 1), dt.date(2200, 12, 31)  # any date or period
MAX_MONTHS = (LAST_DATE.year - FIRST_DATE.year + 1) * 12  # a curve point's `month:` index


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
    questions: QuestionPlan = QuestionPlan()
    repo: str | None = None  # `repo:` OWNER/NAME on the Hub, named by the card (evalpack.pack.card)
    gate: str = "block"  # the release gate's policy (evalpack.pack.diff.gate): block | warn | off
    gate_margin: float = 1.0  # percentage points the near-miss survival rate may rise by before the gate
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


# --------------------------------------------------------------------------- YAML with lines


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that composes a bounded document: it refuses, as it meets them, nesting
    deeper than MAX_DEPTH and YAML aliases that would repeat more than MAX_ALIAS_VALUES values, so
    an alias bomb is refused from its node graph (which stays small) before anything expands it.

    Each composed node's expanded size (values, aliases counted in full) and height are kept by id;
    an alias adds its anchor's size to the running count. An alias to a node still being composed
    (``&a [*a]``) would expand forever and is refused too."""

    def __init__(self, stream: str, file: str) -> None:
        super().__init__(stream)
        self.file = file
        self.depth = 0
        self.alias_values = 0
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height) once composed

    def refuse(self, event: yaml.Event, message: str) -> SpecError:
        return SpecError(self.file, event.start_mark.line + 1, "", _one_line(message))

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        alias = isinstance(event, yaml.AliasEvent)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self.refuse(event, f"the YAML nests more than {MAX_DEPTH} levels deep (evalpack's limit; "
                                  "a spec needs 6); remove the extra nesting")
            node = super().compose_node(parent, index)
            known = self.sizes.get(id(node))
            if alias:
                if known is None:
                    raise self.refuse(event, f"the YAML alias *{event.anchor} refers to a mapping or list that "
                                      "contains it, so it would expand forever; write the values out")
                self.alias_values += known[0]
                if self.alias_values > MAX_ALIAS_VALUES:
                    raise self.refuse(event, f"YAML aliases would repeat more than {MAX_ALIAS_VALUES:,} values "
                                      f"(evalpack's limit, checked before expanding them); write the values out or "
                                      "use fewer aliases")
                values, height = known
            else:
                children: list[yaml.Node] = []
                if isinstance(node, yaml.SequenceNode):
                    children = node.value
                elif isinstance(node, yaml.MappingNode):
                    children = [n for pair in node.value for n in pair]
                values = 1 + sum(self.sizes[id(c)][0] for c in children)
                height = 1 + max((self.sizes[id(c)][1] for c in children), default=0)
                self.sizes[id(node)] = (values, height)
            if self.depth - 1 + height > MAX_DEPTH:
                raise self.refuse(event, f"YAML aliases here nest the spec more than {MAX_DEPTH} levels deep "
                                  "(evalpack's limit; a spec needs 6); write the values out")
            return node
        finally:
            self.depth -= 1


class _Doc:
    """The parsed YAML plus the line of every key path, for error messages."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines: dict[tuple, int] = {}
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_SPEC_BYTES:
            raise SpecError(file, None, "", f"the spec is {size:,} bytes; evalpack reads specs of at most "
                            f"{MAX_SPEC_BYTES:,} bytes (an honest spec is a few KB). Split or shorten it")
        loader = None
        try:
            loader = _BoundedLoader(text, file)  # reading starts here: a bad character is refused at once
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            line = mark.line + 1 if mark else None
            if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (a control character)
                line = text.count("\n", 0, exc.position) + 1
                char = chr(exc.character) if isinstance(exc.character, int) else exc.character
                problem = f"character {char!r} is not allowed in YAML"
            else:
                problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise SpecError(file, line, "", _one_line(f"YAML syntax error: {problem}. Fix the YAML at this line.")) from None
        finally:
            if loader is not None:
                loader.dispose()
        if node is None:
            raise SpecError(file, 1, "", "the file is empty; a spec needs at least `tables:`")
        self.root = self._convert(node, ())

    def _convert(self, node: yaml.Node, path: tuple) -> Any:
        """The node as Python values; recursion is bounded by the loader's MAX_DEPTH."""
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise SpecError(self.file, line, _fmt(path), "a key must be a name, not a list or mapping; "
                                    "write it as a plain word")
                key = str(key_node.value)
                if key in out:
                    raise SpecError(self.file, line, _fmt(path + (key,)),
                                    _one_line(f"duplicate key {_clip(key)}; keep one of them"))
                self.lines[path + (key,)] = line
                out[key] = self._convert(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(item, path + (i,)) for i, item in enumerate(node.value)]
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            # a bad timestamp (2025-13-45), or an integer Python will not convert (more than 4,300 digits)
            line, where = node.start_mark.line + 1, _fmt(path)
            if node.tag == "tag:yaml.org,2002:int":
                raise SpecError(self.file, line, where, _one_line(f"the number {_clip(node.value)} is too long; "
                                                                  f"numbers are limited to ±{MAX_NUMBER:,}")) from None
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(self.file, line, where,
                            _one_line(f"cannot read the value {_clip(node.value)}: {problem}")) from None

    def line(self, path: tuple) -> int | None:
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path)

    def error(self, path: tuple, message: str) -> SpecError:
        return SpecError(self.file, self.line(path), _fmt(path), _one_line(message))


def _fmt(path: tuple) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _clip(str(part), quote=False)
    return out


def _clip(text: str, limit: int = 60, quote: bool = True) -> str:
    """``text`` for a one-line message: control characters escaped, at most ``limit`` characters."""
    shown = repr(text) if quote else repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


# --------------------------------------------------------------------------- readers


class _Reader:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.notes: list[str] = []
        self.vias: dict[tuple, _Via] = {}  # by the declaration's key path: segment_shares[0], per_parent[1]
        self.spelled: dict[tuple, tuple] = {}  # a key's path as the loader names it -> as the file writes it

    def written(self, path: tuple) -> tuple:
        """``path`` as the file spells it: segment_shares[0].by is the file's segment_shares[0].attribute when
        it uses SPEC_FORMAT.md's spelling."""
        return self.spelled.get(path, path)

    def note_misata(self, m: dict, path: tuple, noted: dict[str, str]) -> None:
        """Record each of ``noted``'s keys present in ``m`` (a Misata key evalpack does without) as a note naming
        its line and what Misata does with it."""
        for key, what in noted.items():
            if key in m:
                kp = path + (key,)
                self.notes.append(f"{self.doc.file}:{self.line(kp)}: {_fmt(kp)}: read and not used: {what}")

    def err(self, path: tuple, message: str) -> SpecError:
        return self.doc.error(path, message)

    def line(self, path: tuple) -> int:
        return self.doc.line(path) or 0

    def mapping(self, value: Any, path: tuple, allowed: tuple[str, ...], unsupported: tuple[str, ...] = (),
                what: str = "key") -> dict:
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key in allowed:
                continue
            kp = path + (key,)
            if key in unsupported:
                note = MISATA_NOTES.get(key, "remove it")
                raise self.err(kp, f"`{key}` is not supported by evalpack (line {self.line(kp)}){': ' if key in MISATA_NOTES else '; '}{note}")
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(allowed)}"
            raise self.err(kp, f"unknown {what} '{key}'{hint}")
        return value

    def required(self, m: dict, key: str, path: tuple) -> Any:
        if key not in m or m[key] is None:
            raise self.err(path, f"missing required key '{key}'")
        return m[key]

    def string(self, value: Any, path: tuple) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def ident(self, value: Any, path: tuple, what: str = "name") -> str:
        """A table or column name that every question's SQL can write unquoted (see ``_sql_name_problem``)."""
        text = self.string(value, path)
        if not IDENT_RE.fullmatch(text):
            raise self.err(path, f"{_clip(text)} is not a valid identifier (letters, digits, underscore)")
        if len(text) > MAX_NAME_LENGTH:
            raise self.err(path, f"the {what} is {len(text)} characters long; names are limited to {MAX_NAME_LENGTH} "
                           "(PostgreSQL's limit); shorten it")
        problem = _sql_name_problem(text)
        if problem:
            raise self.err(path, f"'{text}' {problem}, and the questions' SQL writes names unquoted; rename the "
                           f"{what} (e.g. '{text}_{what.split()[-1]}')")
        return text

    def integer(self, value: Any, path: tuple, lo: int | None = None, hi: int | None = None, limit: str = "") -> int:
        """An integer in [lo, hi]; within ±MAX_NUMBER in any case. ``limit`` follows 'must be at most hi'."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(path, f"expected an integer, got {_kind(value)}")
        return self._bounded(value, path, lo, hi, limit)

    def number(self, value: Any, path: tuple, lo: float | None = None, hi: float | None = None) -> float:
        """A finite number in [lo, hi]; within ±MAX_NUMBER in any case."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(path, f"expected a number, got {_kind(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.err(path, f"expected a finite number, got {value}; write the number out")
        return self._bounded(value, path, lo, hi)

    def _bounded(self, value: Any, path: tuple, lo: Any, hi: Any, limit: str = "") -> Any:
        if lo is not None and value < lo:
            raise self.err(path, f"must be at least {lo}, got {_number(value)}")
        if hi is not None and value > hi:
            raise self.err(path, f"must be at most {hi:,}{limit}, got {_number(value)}")
        if abs(value) > MAX_NUMBER:
            raise self.err(path, f"{_number(value)} is beyond evalpack's limit of ±{MAX_NUMBER:,} for any number; "
                           "use a smaller one")
        return value

    def boolean(self, value: Any, path: tuple) -> bool:
        if not isinstance(value, bool):
            raise self.err(path, f"expected true or false, got {_kind(value)}")
        return value

    def in_dates(self, day: dt.date, path: tuple) -> dt.date:
        if not FIRST_DATE <= day <= LAST_DATE:
            raise self.err(path, f"{day.isoformat()} is outside the dates evalpack accepts, {FIRST_DATE} to {LAST_DATE}; "
                           "use a date in that range")
        return day

    def date(self, value: Any, path: tuple) -> dt.date:
        if isinstance(value, dt.datetime):
            return self.in_dates(value.date(), path)
        if isinstance(value, dt.date):
            return self.in_dates(value, path)
        if isinstance(value, str):
            try:
                day = dt.date.fromisoformat(value[:10])
            except ValueError:
                pass
            else:
                return self.in_dates(day, path)
        raise self.err(path, f"expected a date YYYY-MM-DD, got {_kind(value)}")

    def month(self, value: Any, path: tuple) -> dt.date:
        """A `period: "YYYY-MM"` label placed on its calendar month."""
        if isinstance(value, str):
            m = PERIOD_RE.fullmatch(value)
            if m and 1 <= int(m.group(2)) <= 12 and int(m.group(1)) >= 1:
                return self.in_dates(dt.date(int(m.group(1)), int(m.group(2)), 1), path)
            quarter = QUARTER_RE.fullmatch(value.strip())
            if quarter:  # Misata's quarter label: evalpack holds facts per month
                first = 3 * int(quarter.group(2)) - 2
                months = ", ".join(f"{quarter.group(1)}-{first + i:02d}" for i in range(3))
                raise self.err(path, f"expected a period 'YYYY-MM', got the quarter {value!r}: evalpack declares a "
                               f"fact per month; write one point for each of its months ({months}) or for one of them")
        raise self.err(path, f"expected a period 'YYYY-MM', got {_kind(value)}")

    def sequence(self, value: Any, path: tuple) -> list:
        if not isinstance(value, list):
            raise self.err(path, f"expected a list, got {_kind(value)}")
        return value

    def shares(self, value: Any, path: tuple) -> tuple[tuple[str, float], ...]:
        if not isinstance(value, dict) or not value:
            raise self.err(path, f"expected a mapping of label to fraction, got {_kind(value)}")
        out = tuple((str(k), self.number(v, path + (k,), lo=0.0, hi=1.0)) for k, v in value.items())
        total = sum(v for _, v in out)
        if abs(total - 1.0) > 1e-9:
            raise self.err(path, f"shares must sum to 1, they sum to {total:g}; adjust them")
        return out


@functools.cache
def _duckdb_keywords() -> frozenset[str]:
    """The words DuckDB will not take as an unquoted table or column name.

    DuckDB's own list decides, asked of the installed DuckDB (the engine every question runs on):
    its ``reserved`` keywords (select, order, group, from) and its ``type_function`` keywords (left,
    join, like: they may name only a type or a function). Its ``unreserved`` and ``column_name``
    keywords work as names. sqlglot's list is not used: it has no such categories, and which words
    it cannot read as names is probed per name instead (``_sqlglot_reads_as_name``)."""
    with duckdb.connect() as con:
        rows = con.execute("SELECT keyword_name FROM duckdb_keywords() "
                           "WHERE keyword_category IN ('reserved', 'type_function')").fetchall()
    return frozenset(name.lower() for (name,) in rows)


@functools.cache
def _sqlglot_reads_as_name(name: str) -> bool:
    """Whether sqlglot (which parses, rewrites and prints every gold query) reads ``name``, unquoted,
    as a table and a column; words it reads as something else (current_date and current_user are
    functions to it, drop and values statement words) would change or break the questions' SQL."""
    import sqlglot  # on first use: reading a spec otherwise needs no SQL parser
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(f"SELECT {name}, SUM(t.{name}) FROM {name} AS t WHERE {name} > 0 GROUP BY {name}",
                                 read="duckdb")
    except sqlglot.errors.SqlglotError:
        return False
    columns = tree.expressions[:1] + [tree.expressions[1].this] if len(tree.expressions) == 2 else []
    tables = list(tree.find_all(exp.Table))
    return (len(columns) == 2 and all(isinstance(c, exp.Column) and c.name == name for c in columns)
            and len(tables) == 1 and tables[0].name == name)


def _sql_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an unquoted table or column name in the questions' SQL, or None."""
    if name.lower() in _duckdb_keywords():
        return "is an SQL keyword (DuckDB reserves it)"
    if not _sqlglot_reads_as_name(name.lower()):
        return "is an SQL keyword or built-in (sqlglot does not read it as a name)"
    return None


def _keys(value: Any) -> tuple:
    """The keys of a mapping that takes any key (anything else is refused by ``_Reader.mapping``)."""
    return tuple(value) if isinstance(value, dict) else ()


EXCERPT = 80  # characters of one unbroken run of text (a value, a key, a tag from the spec) a message quotes
MAX_MESSAGE = 600  # characters of a message; an honest one is under 400
_RUN = re.compile(r"\S+")
_CLOSING = ";,:.)'\"`"  # punctuation that ends a quoted value in a message and is kept after its excerpt: 'kkk...';


def _excerpt(run: re.Match) -> str:
    """A run of text without a space, cut to :data:`EXCERPT` characters when it is longer (its closing
    punctuation kept)."""
    text = run.group()
    core = text.rstrip(_CLOSING)
    if len(core) <= EXCERPT:
        return text
    return f"{core[:EXCERPT - 3]}... ({len(core):,} characters){text[len(core):]}"


def _one_line(message: str) -> str:
    """``message`` with control characters escaped (a name from the spec may hold a newline or an
    escape sequence), so that it prints as the one line it is, and short: a spec's line may be 700 KB long,
    and a message quotes at most :data:`EXCERPT` characters of any unbroken run of text in it (``kkk... (700,002
    characters)``) and, should a long value have spaces, at most :data:`MAX_MESSAGE` characters in all (its start
    and its end, which says what to do). Every message of the spec's reading that quotes the spec goes through here."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    text = _RUN.sub(_excerpt, text)
    if len(text) <= MAX_MESSAGE:
        return text
    tail = MAX_MESSAGE // 3
    return f"{text[:MAX_MESSAGE - tail - 40]} ... ({len(text):,} characters) ... {text[-tail:]}"


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    if isinstance(value, str):
        return f"the string {_clip(value)}"
    if isinstance(value, bool):
        return f"{value}"
    return f"{type(value).__name__} {_number(value) if isinstance(value, (int, float)) else _clip(repr(value), quote=False)}"


def _is_number(value: Any) -> bool:
    """A finite int or float within ±MAX_NUMBER (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_NUMBER


def _number(value: float) -> str:
    """A number for a message: an integer too long to print whole is described by its length."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"{'-' if value < 0 else ''}(an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits)"
    return str(value)


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def add_months(day: dt.date, months: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


# --------------------------------------------------------------------------- sections

TOP_KEYS = (
    "name", "version", "description", "license", "seed", "rotations", "answers", "holdout", "gate",
    "gate_margin", "rows", "tables", "relationships", "outcome_curves", "rate_curves", "group_shares",
    "waterfalls", "time_grids", "constraints", "semantics", "questions", "repo", "segment_shares", "per_parent",
    "exports",
)
GATE_POLICIES = ("block", "warn", "off")  # evalpack.pack.diff.POLICIES
EXPORT_FORMATS = ("sqlite", "postgres", "bird", "spider")  # evalpack.interop.exports writes them
QUESTIONS_KEYS = ("families", "include", "exclude", "max", "difficulty", "unanswerable")
FAMILIES_KEYS = ("include", "exclude")
SEMANTICS_KEYS = ("tables", "columns", "measures", "currency", "synonyms")
TABLE_KEYS = ("rows", "columns", "constraints", "description")
COLUMN_KEYS = (
    "type", "unique", "min", "max", "decimals", "nullable", "choices", "weights", "rate", "start",
    "end", "text_type", "description", "primary_key", "probabilities", "probability", "sampling", *DISTRIBUTION_KEYS,
    *DEPENDENT_KEYS,
)
BRANCH_KEYS = ("value", "min", "max", "decimals", *DISTRIBUTION_KEYS)
CONSTRAINT_KEYS = ("name", "type", "table", "group_by", "debit_column", "credit_column", "decimals", "description")


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
        tm = r.mapping(v, tp, ("name", "plural"))
        singular = r.string(r.required(tm, "name", tp), tp + ("name",))
        names.append((t, TableWords(singular, r.string(tm.get("plural", plural_of(singular)), tp + ("plural",)))))
    columns = []
    for ref, label in r.mapping(m.get("columns", {}), p + ("columns",), _keys(m.get("columns"))).items():
        t, c = column(ref, p + ("columns", ref))
        columns.append((f"{t}.{c}", r.string(label, p + ("columns", ref))))
    measures = []
    for name, v in r.mapping(m.get("measures", {}), p + ("measures",), _keys(m.get("measures"))).items():
        mp = p + ("measures", name)
        mm = r.mapping(v, mp, ("sum", "count"))
        if len(mm) != 1:
            raise r.err(mp, "a measure is one of {sum: table.column} or {count: table}")
        if "sum" in mm:
            t, c = column(mm["sum"], mp + ("sum",))
            measures.append(Measure(r.string(name, mp), "sum", t, c))
        else:
            measures.append(Measure(r.string(name, mp), "count", table(mm["count"], mp + ("count",))))
    synonyms = []
    for word, alts in r.mapping(m.get("synonyms", {}), p + ("synonyms",), _keys(m.get("synonyms"))).items():
        sp = p + ("synonyms", word)
        synonyms.append((str(word), tuple(r.string(a, sp) for a in r.sequence(alts, sp))))
    currency = None if m.get("currency") is None else r.string(m["currency"], p + ("currency",))
    return Semantics(tuple(names), tuple(columns), tuple(measures), currency, tuple(synonyms))


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
    for t in spec.tables:
        for c in t.columns:
            if c.type == "foreign_key" and (t.name, c.name) not in fk_targets:
                raise r.err(("tables", t.name, "columns", c.name),
                            f"foreign key {t.name}.{c.name} has no relationship; add one under relationships: "
                            "(or give the column `references: <table>.<key>`)")

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
    for i, c in enumerate(spec.rate_curves):
        p = ("rate_curves", i)
        need(c.table, c.column, p + ("column",), ("boolean",))
        tcol = need(c.table, c.time_column, p + ("time_column",), ("date", "datetime"))
        time_axis(c.table, c.time_column, p)
        for j, point in enumerate(c.points):
            in_range(tcol, point.month, p + ("rate_points", j))
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
    for i, g in enumerate(spec.time_grids):
        p = ("time_grids", i)
        need(g.table, g.column, p + ("column",), ("datetime",))
        if axis.get(g.table, (None,))[0] == g.column:
            raise r.err(p, f"{g.table}.{g.column} is the time column of a curve; a time_grid there would move "
                        "rows across period boundaries. Put the grid on another datetime column")
    for p, pp in zip(pp_paths, spec.per_parent):
        if pp.per and pp.child_table not in axis:
            raise r.err(p + ("per",), f"per: {pp.per} counts {pp.child_table} rows in each {pp.per} of its curve, "
                        f"and {pp.child_table} has none; give it an outcome_curves entry or drop per")
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


def load_spec(path: str | Path, *, seed: int | None = None, rotations: int | None = None) -> Spec:
    """Read, validate and return the spec at ``path``; ``seed``/``rotations`` override the file.

    Raises SpecError (exit code 2) naming the file, line and key path of the first problem.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(str(path), None, "", f"cannot read the spec: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), None, "", f"the spec is not UTF-8 ({exc.reason}); save it as UTF-8") from None
    return parse_spec(text, file=str(path), seed=seed, rotations=rotations)


def parse_spec(text: str, *, file: str = "<spec>", seed: int | None = None, rotations: int | None = None) -> Spec:
    """Validate spec ``text`` (named ``file`` in messages) into a Spec."""
    doc = _Doc(file, text)
    r = _Reader(doc)
    top = r.mapping(doc.root, (), TOP_KEYS + tuple(NOTED_TOP), UNSUPPORTED_TOP)
    r.note_misata(top, (), NOTED_TOP)
    default_rows = r.integer(top.get("rows", 100), ("rows",), lo=1, hi=MAX_TABLE_ROWS, limit=ROWS_LIMIT)
    name = top.get("name", Path(file).stem)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        slug = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
        slug = (slug if NAME_RE.fullmatch(slug or "-") else f"pack_{slug}".rstrip("_"))[:MAX_NAME_LENGTH]
        if not isinstance(name, str) or not name.strip():
            raise r.err(("name",), f"pack name {_clip(str(name))} must match [a-z][a-z0-9_]*; write name: {slug}")
        r.notes.append(f"{file}:{r.line(('name',))}: name: {_clip(name)} is a display name (Misata takes any); "
                       f"evalpack names the dataset, its files and its Hub repo {slug}: write name: {slug} to say so")
        name = slug
    if len(name) > MAX_NAME_LENGTH:
        raise r.err(("name",), f"the pack name is {len(name)} characters long; names are limited to "
                    f"{MAX_NAME_LENGTH}; shorten it")
    version = str(top.get("version", "0.1.0"))
    if not SEMVER_RE.fullmatch(version):
        raise r.err(("version",), f"version {_clip(version)} is not semver (e.g. 1.0.0)")
    answers = top.get("answers", "shared")
    if answers not in ("shared", "rotated"):
        raise r.err(("answers",), f"answers is `shared` or `rotated`, got {_kind(answers)}")
    gate = "off" if top.get("gate") is False else top.get("gate", "block")  # YAML 1.1 reads a bare `off` as false
    if gate not in GATE_POLICIES:
        raise r.err(("gate",), f"gate is `block`, `warn` or `off`, got {_kind(gate)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise SpecError(file, None, "seed", f"the seed override {_number(seed) if isinstance(seed, int) else seed!r} "
                        f"must be an integer from 0 to {MAX_SEED:,}")

    raw_tables = r.mapping(r.required(top, "tables", ()), ("tables",), tuple(top["tables"]) if isinstance(
        top["tables"], dict) else ())
    if not raw_tables:
        raise r.err(("tables",), "declare at least one table")
    tables: list[Table] = []
    ledgers: list[BalancedLedger] = []
    seen_tables: dict[str, str] = {}
    for tname, raw in raw_tables.items():
        tp = ("tables", tname)
        r.ident(tname, tp, "table")
        _unique_ignoring_case(r, tname, seen_tables, tp, "table", ("tables",))
        tm = r.mapping(raw, tp, TABLE_KEYS, UNSUPPORTED_TABLE, "table key")
        rows = r.integer(tm.get("rows", default_rows), tp + ("rows",), lo=1, hi=MAX_TABLE_ROWS, limit=ROWS_LIMIT)
        raw_cols = r.required(tm, "columns", tp)
        if not isinstance(raw_cols, dict) or not raw_cols:
            raise r.err(tp + ("columns",), "expected a mapping of column name to definition")
        seen_columns: dict[str, str] = {}
        for cn in raw_cols:
            r.ident(cn, tp + ("columns", cn), "column")
            _unique_ignoring_case(r, cn, seen_columns, tp + ("columns", cn), "column", tp + ("columns",))
        cols = tuple(_read_column(r, cn, cv, tp + ("columns", cn), rows) for cn, cv in raw_cols.items())
        _check_dependents(r, cols, tp + ("columns",))
        tables.append(Table(tname, rows, cols, r.line(tp), rows_line=r.line(tp + ("rows",))))
        for i, raw_c in enumerate(r.sequence(tm.get("constraints", []), tp + ("constraints",))):
            ledgers.append(_read_ledger(r, raw_c, tp + ("constraints", i), tname))
    for i, raw_c in enumerate(r.sequence(top.get("constraints", []), ("constraints",))):
        ledgers.append(_read_ledger(r, raw_c, ("constraints", i), None))
    table_map = {t.name: t for t in tables}

    def many(key: str, reader) -> tuple:
        return tuple(reader(r, raw, (key, i)) for i, raw in enumerate(r.sequence(top.get(key, []), (key,))))

    undated: set[tuple[str, str]] = set()  # time columns dated by their curves (_date_by_curve)
    read = {key: many(key, reader) for key, reader in (  # in the order of the file's sections, for messages
        ("relationships", _read_relationship),
        ("outcome_curves", lambda rr, raw, p: _date_by_curve(rr, _read_outcome_curve(rr, raw, p, table_map), table_map,
                                                             undated)),
        ("rate_curves", lambda rr, raw, p: _read_rate_curve(rr, raw, p, table_map)),
        ("group_shares", _read_group_shares),
        ("segment_shares", _read_segment_shares), ("per_parent", _read_per_parent))}
    tables = [table_map[t.name] for t in tables]
    relationships, per_parent, rel_paths, pp_paths = _implied(
        r, top, tables, read["relationships"], read["per_parent"], read["outcome_curves"])

    spec = Spec(
        name=name,
        version=version,
        description=None if top.get("description") is None else str(top["description"]),
        license=_read_license(r, top.get("license", "cc-by-4.0")),
        seed=seed if seed is not None else r.integer(top.get("seed", 42), ("seed",), lo=0, hi=MAX_SEED,
                                                             limit=" (numpy's seed range)"),
        rotations=rotations if rotations is not None else r.integer(top.get("rotations", 1), ("rotations",), 1, 64),
        answers=answers,
        holdout=float(r.number(top.get("holdout", 0), ("holdout",), lo=0.0, hi=1.0)),
        gate=gate,
        gate_margin=float(r.number(top.get("gate_margin", 1.0), ("gate_margin",), lo=0.0, hi=100.0)),
        tables=tuple(tables),
        relationships=relationships,
        outcome_curves=read["outcome_curves"],
        rate_curves=read["rate_curves"],
        group_shares=read["group_shares"],
        segment_shares=read["segment_shares"],
        per_parent=per_parent,
        waterfalls=many("waterfalls", _read_waterfall),
        time_grids=many("time_grids", _read_time_grid),
        ledgers=tuple(ledgers),
        semantics=_read_semantics(r, top.get("semantics"), table_map),
        questions=_read_questions(r, top.get("questions")),
        repo=_read_repo(r, top.get("repo")),
        exports=_read_exports(r, top.get("exports")),
        path=file,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        source=text,
        notes=tuple(r.notes),
    )
    if spec.rotations < 1:
        raise SpecError(file, None, "rotations", "at least one rotation is needed")
    _check_references(r, spec, rel_paths, pp_paths)
    _rotation_rows(r, spec)
    return spec
