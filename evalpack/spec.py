"""Load a pack spec (YAML) into frozen, typed objects, or refuse it with file, line and key path.

The accepted keys are those of SPEC_FORMAT.md: Misata's evalpack names and shapes plus our
extensions. Anything else is refused with the closest valid key; Misata features evalpack does
not support are refused by name.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalpack.difficulty import LEVELS
from evalpack.errors import SpecError
from evalpack.kinds import KINDS
from evalpack.layout import rotation_name
from evalpack.semantics import Measure, Semantics, TableWords, plural_of

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
PERIOD_RE = re.compile(r"^(\d{4})-(\d{2})$")

COLUMN_TYPES = ("int", "float", "text", "categorical", "boolean", "date", "datetime", "foreign_key")
TYPE_ALIASES = {"integer": "int", "number": "float", "string": "text", "bool": "boolean"}
TEXT_TYPE_ALIASES = {"email": "email", "uuid": "uuid"}  # Misata column types that are text kinds
TEXT_TYPES = ("name", "email", "company", "city", "word", "sentence", "uuid")

# Misata features evalpack refuses by name, rather than as unknown keys.
UNSUPPORTED_TOP = (
    "scd2", "stock_flows", "lifecycles", "graph_motifs", "events", "retention", "missingness",
    "late_arrivals", "duplicates", "event_logs", "processes", "outliers", "typos", "bitemporal",
    "dag_edges", "closures", "degradations", "joint_distributions", "noise", "noise_config",
    "realism", "vocabularies", "domain", "preset", "locale", "generation_mode",
)
UNSUPPORTED_TABLE = ("scd2", "correlations", "inline_data", "is_reference")
UNSUPPORTED_COLUMN = (
    "distribution", "mean", "std", "mu", "sigma", "scale", "alpha", "a", "b", "lambda",
    "formula", "pattern", "values", "probabilities",
)
UNSUPPORTED_COLUMN_TYPES = ("time", "json", "array", "object")
UNSUPPORTED_RELATIONSHIP = (
    "temporal", "temporal_constraint", "filters", "parent_time", "child_time",
    "child_time_table", "partition_by", "min_children",
)
CURVE_VALUE_KEYS = ("target_value", "value", "target", "amount")


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


@dataclass(frozen=True)
class GroupShares:
    table: str
    measure: str
    group_column: str
    shares: tuple[tuple[str, float], ...]
    line: int


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
    waterfalls: tuple[Waterfall, ...] = ()
    time_grids: tuple[TimeGrid, ...] = ()
    ledgers: tuple[BalancedLedger, ...] = ()
    semantics: Semantics = Semantics()
    questions: QuestionPlan = QuestionPlan()
    path: str = ""
    sha256: str = ""
    source: str = field(default="", repr=False)

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


class _Doc:
    """The parsed YAML plus the line of every key path, for error messages."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines: dict[tuple, int] = {}
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            line = mark.line + 1 if mark else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(file, line, "", f"YAML syntax error: {problem}. Fix the YAML at this line.") from None
        if node is None:
            raise SpecError(file, 1, "", "the file is empty; a spec needs at least `tables:`")
        self.root = self._convert(node, ())

    def _convert(self, node: yaml.Node, path: tuple) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                if key in out:
                    raise SpecError(self.file, line, _fmt(path + (key,)), f"duplicate key '{key}'; keep one of them")
                self.lines[path + (key,)] = line
                out[key] = self._convert(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(item, path + (i,)) for i, item in enumerate(node.value)]
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise SpecError(self.file, node.start_mark.line + 1, _fmt(path), f"cannot read value: {exc}") from None

    def line(self, path: tuple) -> int | None:
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path)

    def error(self, path: tuple, message: str) -> SpecError:
        return SpecError(self.file, self.line(path), _fmt(path), message)


def _fmt(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --------------------------------------------------------------------------- readers


class _Reader:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc

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
                raise self.err(kp, f"`{key}` is not supported by evalpack (line {self.line(kp)}); remove it")
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

    def ident(self, value: Any, path: tuple) -> str:
        text = self.string(value, path)
        if not IDENT_RE.match(text):
            raise self.err(path, f"'{text}' is not a valid identifier (letters, digits, underscore)")
        return text

    def integer(self, value: Any, path: tuple, lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(path, f"expected an integer, got {_kind(value)}")
        if lo is not None and value < lo:
            raise self.err(path, f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise self.err(path, f"must be at most {hi}, got {value}")
        return value

    def number(self, value: Any, path: tuple, lo: float | None = None, hi: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(path, f"expected a number, got {_kind(value)}")
        if lo is not None and value < lo:
            raise self.err(path, f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise self.err(path, f"must be at most {hi}, got {value}")
        return value

    def boolean(self, value: Any, path: tuple) -> bool:
        if not isinstance(value, bool):
            raise self.err(path, f"expected true or false, got {_kind(value)}")
        return value

    def date(self, value: Any, path: tuple) -> dt.date:
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value[:10])
            except ValueError:
                pass
        raise self.err(path, f"expected a date YYYY-MM-DD, got {value!r}")

    def month(self, value: Any, path: tuple) -> dt.date:
        """A `period: "YYYY-MM"` label placed on its calendar month."""
        if isinstance(value, str):
            m = PERIOD_RE.match(value)
            if m and 1 <= int(m.group(2)) <= 12:
                return dt.date(int(m.group(1)), int(m.group(2)), 1)
        raise self.err(path, f"expected a period 'YYYY-MM', got {value!r}")

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


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: f"the string {value!r}", bool: f"{value}"}.get(
        type(value), f"{type(value).__name__} {value!r}"
    )


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def add_months(day: dt.date, months: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


# --------------------------------------------------------------------------- sections

TOP_KEYS = (
    "name", "version", "description", "license", "seed", "rotations", "answers", "holdout", "rows",
    "tables", "relationships", "outcome_curves", "rate_curves", "group_shares", "waterfalls",
    "time_grids", "constraints", "semantics", "questions",
)
QUESTIONS_KEYS = ("include", "exclude", "max", "difficulty")
SEMANTICS_KEYS = ("tables", "columns", "measures", "currency", "synonyms")
TABLE_KEYS = ("rows", "columns", "constraints", "description")
COLUMN_KEYS = (
    "type", "unique", "min", "max", "decimals", "nullable", "choices", "weights", "rate", "start",
    "end", "text_type", "description", "primary_key",
)
CONSTRAINT_KEYS = ("name", "type", "table", "group_by", "debit_column", "credit_column", "decimals", "description")


def _read_column(r: _Reader, name: str, raw: Any, path: tuple, rows: int) -> Column:
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

    kw: dict[str, Any] = {"name": name, "type": ctype, "line": r.line(path)}
    allowed_by_type = {
        "int": {"unique", "min", "max", "nullable"},
        "float": {"min", "max", "decimals", "nullable"},
        "text": {"unique", "text_type", "nullable"},
        "categorical": {"choices", "weights", "nullable"},
        "boolean": {"rate", "nullable"},
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
        for key in ("min", "max"):
            if key in m:
                kw[key] = r.number(m[key], path + (key,))
        kw["decimals"] = r.integer(m.get("decimals", 2), path + ("decimals",), 0, 6) if ctype == "float" else 0
        if kw.get("min") is not None and kw.get("max") is not None and kw["min"] > kw["max"]:
            raise r.err(path + ("min",), f"min {kw['min']} is greater than max {kw['max']}; swap or fix them")
        if ctype == "int" and kw.get("unique"):
            lo, hi = kw.get("min", 1), kw.get("max")
            if hi is not None and hi - lo + 1 < rows:
                raise r.err(path + ("max",), f"unique ints in [{lo}, {hi}] hold {int(hi - lo + 1)} values, "
                            f"fewer than the table's {rows} rows; widen the range")
    elif ctype == "text":
        tt = m.get("text_type", text_type or "word")
        if tt not in TEXT_TYPES:
            raise r.err(path + ("text_type",), f"unknown text_type '{tt}'; use one of {', '.join(TEXT_TYPES)}")
        kw["text_type"] = tt
    elif ctype == "categorical":
        choices = r.sequence(r.required(m, "choices", path), path + ("choices",))
        if not choices:
            raise r.err(path + ("choices",), "a categorical column needs at least one choice")
        kw["choices"] = tuple(str(c) for c in choices)
        if len(set(kw["choices"])) != len(choices):
            raise r.err(path + ("choices",), "choices repeat a label; list each once")
        if "weights" in m:
            weights = r.sequence(m["weights"], path + ("weights",))
            if len(weights) != len(choices):
                raise r.err(path + ("weights",), f"{len(weights)} weights for {len(choices)} choices; give one per choice")
            kw["weights"] = tuple(r.number(w, path + ("weights", i), lo=0.0) for i, w in enumerate(weights))
            if sum(kw["weights"]) <= 0:
                raise r.err(path + ("weights",), "weights sum to zero")
    elif ctype == "boolean":
        if "rate" in m:
            kw["rate"] = r.number(m["rate"], path + ("rate",), lo=0.0, hi=1.0)
    elif ctype in ("date", "datetime"):
        kw["start"] = r.date(m.get("start", "2025-01-01"), path + ("start",))
        kw["end"] = r.date(m.get("end", "2025-12-31"), path + ("end",))
        if kw["start"] > kw["end"]:
            raise r.err(path + ("start",), f"start {kw['start']} is after end {kw['end']}")
    return Column(**kw)


def _read_ledger(r: _Reader, raw: Any, path: tuple, table: str | None) -> BalancedLedger:
    m = r.mapping(raw, path, CONSTRAINT_KEYS, what="constraint key")
    ctype = r.string(r.required(m, "type", path), path + ("type",))
    if ctype != "balanced_ledger":
        raise r.err(path + ("type",), f"constraint type `{ctype}` is not supported by evalpack "
                    f"(line {r.line(path + ('type',))}); only balanced_ledger is")
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
            "child_key", "orphans", "nulls", "description")
    m = r.mapping(raw, path, keys, UNSUPPORTED_RELATIONSHIP, "relationship key")
    parent = m.get("parent", m.get("parent_table"))
    child = m.get("child", m.get("child_table"))
    if parent is None or child is None:
        raise r.err(path, "a relationship needs `parent` and `child`")
    parent, child = r.string(parent, path + ("parent",)), r.string(child, path + ("child",))
    pcol = m.get("parent_col", m.get("parent_key"))
    ccol = m.get("child_col", m.get("child_key"))
    if "." in parent and pcol is None:
        parent, pcol = _split_ref(r, parent, path + ("parent",))
    if "." in child and ccol is None:
        child, ccol = _split_ref(r, child, path + ("child",))
    return Relationship(
        parent, str(pcol or "id"), child, str(ccol or f"{parent}_id"), line,
        orphans=r.integer(m.get("orphans", 0), path + ("orphans",), lo=0),
        nulls=r.integer(m.get("nulls", 0), path + ("nulls",), lo=0),
    )


def _curve_month(r: _Reader, point: dict, path: tuple, start: dt.date | None) -> dt.date:
    placed = [k for k in ("month", "date", "period") if k in point]
    if len(placed) != 1:
        raise r.err(path, "place each point with exactly one of `month`, `date` or `period`")
    key = placed[0]
    if key == "month":
        index = r.integer(point["month"], path + ("month",), lo=1)
        if start is None:
            raise r.err(path + ("month",), "a `month:` point needs the curve's `start_date` "
                        "(or a start on its time column)")
        return add_months(month_start(start), index - 1)
    if key == "date":
        return month_start(r.date(point["date"], path + ("date",)))
    return r.month(point["period"], path + ("period",))


def _read_outcome_curve(r: _Reader, raw: Any, path: tuple, tables: dict[str, Table]) -> OutcomeCurve:
    keys = ("table", "column", "time_column", "start_date", "curve_points", "avg_transaction_value",
            "min_transactions_per_period", "max_transactions_per_period", "time_unit", "value_mode", "pattern_type",
            "description")
    m = r.mapping(raw, path, keys, ("intra_period_pattern", "concentration"), "outcome curve key")
    table = r.string(r.required(m, "table", path), path + ("table",))
    time_column = r.string(m.get("time_column", "date"), path + ("time_column",))
    if m.get("time_unit", "month") != "month":
        raise r.err(path + ("time_unit",), f"time_unit `{m['time_unit']}` is not supported by evalpack; use month")
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


def _read_rate_curve(r: _Reader, raw: Any, path: tuple) -> RateCurve:
    keys = ("table", "column", "time_column", "rate_points", "time_unit", "true_value", "interpolate", "description")
    m = r.mapping(raw, path, keys, what="rate curve key")
    if m.get("time_unit", "month") != "month":
        raise r.err(path + ("time_unit",), f"time_unit `{m['time_unit']}` is not supported by evalpack; use month")
    if m.get("true_value", True) is not True:
        raise r.err(path + ("true_value",), "evalpack rate curves count `true` on a boolean column; remove true_value")
    if m.get("interpolate", True) is not True:
        raise r.err(path + ("interpolate",), "evalpack always interpolates between rate points; remove interpolate")
    raw_points = r.sequence(r.required(m, "rate_points", path), path + ("rate_points",))
    if not raw_points:
        raise r.err(path + ("rate_points",), "a rate curve needs at least one point")
    points = []
    for i, raw_point in enumerate(raw_points):
        pp = path + ("rate_points", i)
        point = r.mapping(raw_point, pp, ("period", "date", "rate"), what="rate point key")
        if "period" in point:
            month = r.month(point["period"], pp + ("period",))
        elif "date" in point:
            month = month_start(r.date(point["date"], pp + ("date",)))
        else:
            raise r.err(pp, "place each rate point with `period: YYYY-MM`")
        rate = r.number(r.required(point, "rate", pp), pp + ("rate",), lo=0.0, hi=1.0)
        points.append(RatePoint(month, float(rate), r.line(pp)))
    for i in range(1, len(points)):
        if points[i].month <= points[i - 1].month:
            raise r.err(path + ("rate_points", i), "rate points must be in increasing period order")
    return RateCurve(
        table=r.string(r.required(m, "table", path), path + ("table",)),
        column=r.string(r.required(m, "column", path), path + ("column",)),
        time_column=r.string(m.get("time_column", "date"), path + ("time_column",)),
        points=tuple(points),
        line=r.line(path),
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


def _read_waterfall(r: _Reader, raw: Any, path: tuple) -> Waterfall:
    keys = ("table", "period_column", "type_column", "amount_column", "starting_value", "points",
            "inflow_shares", "outflow_shares", "outflow_rate", "description")
    m = r.mapping(raw, path, keys, ("segment_column", "segment_value"), "waterfall key")
    raw_points = r.sequence(r.required(m, "points", path), path + ("points",))
    if not raw_points:
        raise r.err(path + ("points",), "a waterfall needs at least one point")
    points = []
    for i, raw_point in enumerate(raw_points):
        pp = path + ("points", i)
        point = r.mapping(raw_point, pp, ("period", "ending_value"), what="waterfall point key")
        points.append(WaterfallPoint(
            r.month(r.required(point, "period", pp), pp + ("period",)),
            float(r.number(r.required(point, "ending_value", pp), pp + ("ending_value",), lo=0.0)),
            r.line(pp),
        ))
    for i in range(1, len(points)):
        if points[i].month != add_months(points[i - 1].month, 1):
            raise r.err(path + ("points", i), "waterfall points must be consecutive months, one per period")
    inflow = r.shares(m["inflow_shares"], path + ("inflow_shares",)) if "inflow_shares" in m else (
        ("new", 0.6), ("expansion", 0.4))
    outflow = r.shares(m["outflow_shares"], path + ("outflow_shares",)) if "outflow_shares" in m else (
        ("contraction", 0.4), ("churn", 0.6))
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
    for t, v in r.mapping(m.get("tables", {}), p + ("tables",), tuple(m.get("tables") or {})).items():
        tp = p + ("tables", t)
        table(t, tp)
        if isinstance(v, str):
            names.append((t, TableWords(r.string(v, tp), plural_of(v))))
            continue
        tm = r.mapping(v, tp, ("name", "plural"))
        singular = r.string(r.required(tm, "name", tp), tp + ("name",))
        names.append((t, TableWords(singular, r.string(tm.get("plural", plural_of(singular)), tp + ("plural",)))))
    columns = []
    for ref, label in r.mapping(m.get("columns", {}), p + ("columns",), tuple(m.get("columns") or {})).items():
        t, c = column(ref, p + ("columns", ref))
        columns.append((f"{t}.{c}", r.string(label, p + ("columns", ref))))
    measures = []
    for name, v in r.mapping(m.get("measures", {}), p + ("measures",), tuple(m.get("measures") or {})).items():
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
    for word, alts in r.mapping(m.get("synonyms", {}), p + ("synonyms",), tuple(m.get("synonyms") or {})).items():
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

    def kinds(key: str) -> tuple[str, ...]:
        out = []
        for i, kind in enumerate(r.sequence(m.get(key, []), p + (key,))):
            if kind not in KINDS:
                close = difflib.get_close_matches(str(kind), tuple(KINDS), n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else "the families are listed in README.md"
                raise r.err(p + (key, i), f"unknown question family {kind!r}; {hint}")
            out.append(kind)
        return tuple(out)

    include, exclude = kinds("include"), kinds("exclude")
    both = sorted(set(include) & set(exclude))
    if both:
        raise r.err(p + ("exclude",), f"{both} are both included and excluded; keep each family in one list")
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
    return QuestionPlan(include, exclude, most, mix)


def _check_references(r: _Reader, spec: Spec) -> None:
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
    for i, rel in enumerate(spec.relationships):
        p = ("relationships", i)
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
        if tables[rel.child_table].column(rel.child_column).nullable:
            raise r.err(p, f"declare missing parents with `nulls:` on the relationship, not `nullable` on "
                        f"{rel.child_table}.{rel.child_column}")
    for t in spec.tables:
        for c in t.columns:
            if c.type == "foreign_key" and (t.name, c.name) not in fk_targets:
                raise r.err(("tables", t.name, "columns", c.name),
                            f"foreign key {t.name}.{c.name} has no relationship; add one under relationships:")

    axis: dict[str, tuple[str, tuple]] = {}

    def time_axis(table: str, column: str, path: tuple) -> None:
        if table in axis and axis[table][0] != column:
            raise r.err(path, f"table '{table}' is already planned by month on '{axis[table][0]}'; "
                        f"use the same time column")
        axis[table] = (column, path)

    def in_range(col: Column, month: dt.date, path: tuple) -> None:
        if month < month_start(col.start) or month > col.end:
            raise r.err(path, f"{month:%Y-%m} is outside the time column's range {col.start} to {col.end}; "
                        "move the point or widen the column's start/end")

    curves = {}
    for i, c in enumerate(spec.outcome_curves):
        p = ("outcome_curves", i)
        need(c.table, c.column, p + ("column",), ("float", "int"))
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
        unknown = [k for k, _ in g.shares if k not in gcol.choices]
        if unknown:
            raise r.err(p + ("shares",), f"{unknown} are not choices of {g.table}.{g.group_column} "
                        f"({', '.join(gcol.choices)})")
    for i, w in enumerate(spec.waterfalls):
        p = ("waterfalls", i)
        need(w.table, w.amount_column, p + ("amount_column",), ("float",))
        tcol = need(w.table, w.type_column, p + ("type_column",), ("categorical",))
        pcol = need(w.table, w.period_column, p + ("period_column",), ("date", "datetime"))
        time_axis(w.table, w.period_column, p)
        missing = [k for k, _ in w.inflow_shares + w.outflow_shares if k not in tcol.choices]
        if missing:
            raise r.err(p, f"movement types {missing} are not choices of {w.table}.{w.type_column}")
        for j, point in enumerate(w.points):
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
        for j, rel in enumerate(spec.relationships):
            if (rel.child_table, rel.child_column) == (led.table, led.group_by[0]) and 1 in (rel.orphans, rel.nulls):
                raise r.err(("relationships", j), f"{led.table}.{led.group_by[0]} groups a balanced ledger: "
                            "orphans and nulls there must be 0 or at least 2 (each group balances)")


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
    top = r.mapping(doc.root, (), TOP_KEYS, UNSUPPORTED_TOP)
    default_rows = r.integer(top.get("rows", 100), ("rows",), lo=1)
    name = top.get("name", Path(file).stem)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise r.err(("name",), f"pack name {name!r} must match [a-z][a-z0-9_]*")
    version = str(top.get("version", "0.1.0"))
    if not SEMVER_RE.match(version):
        raise r.err(("version",), f"version {version!r} is not semver (e.g. 1.0.0)")
    answers = top.get("answers", "shared")
    if answers not in ("shared", "rotated"):
        raise r.err(("answers",), f"answers is `shared` or `rotated`, got {answers!r}")

    raw_tables = r.mapping(r.required(top, "tables", ()), ("tables",), tuple(top["tables"]) if isinstance(
        top["tables"], dict) else ())
    if not raw_tables:
        raise r.err(("tables",), "declare at least one table")
    tables: list[Table] = []
    ledgers: list[BalancedLedger] = []
    for tname, raw in raw_tables.items():
        tp = ("tables", tname)
        r.ident(tname, tp)
        tm = r.mapping(raw, tp, TABLE_KEYS, UNSUPPORTED_TABLE, "table key")
        rows = r.integer(tm.get("rows", default_rows), tp + ("rows",), lo=1)
        raw_cols = r.required(tm, "columns", tp)
        if not isinstance(raw_cols, dict) or not raw_cols:
            raise r.err(tp + ("columns",), "expected a mapping of column name to definition")
        cols = tuple(_read_column(r, r.ident(cn, tp + ("columns", cn)), cv, tp + ("columns", cn), rows)
                     for cn, cv in raw_cols.items())
        tables.append(Table(tname, rows, cols, r.line(tp), rows_line=r.line(tp + ("rows",))))
        for i, raw_c in enumerate(r.sequence(tm.get("constraints", []), tp + ("constraints",))):
            ledgers.append(_read_ledger(r, raw_c, tp + ("constraints", i), tname))
    for i, raw_c in enumerate(r.sequence(top.get("constraints", []), ("constraints",))):
        ledgers.append(_read_ledger(r, raw_c, ("constraints", i), None))
    table_map = {t.name: t for t in tables}

    def many(key: str, reader) -> tuple:
        return tuple(reader(r, raw, (key, i)) for i, raw in enumerate(r.sequence(top.get(key, []), (key,))))

    spec = Spec(
        name=name,
        version=version,
        description=None if top.get("description") is None else str(top["description"]),
        license=str(top.get("license", "cc-by-4.0")),
        seed=seed if seed is not None else r.integer(top.get("seed", 42), ("seed",), lo=0),
        rotations=rotations if rotations is not None else r.integer(top.get("rotations", 1), ("rotations",), 1, 64),
        answers=answers,
        holdout=float(r.number(top.get("holdout", 0), ("holdout",), lo=0.0, hi=1.0)),
        tables=tuple(tables),
        relationships=many("relationships", _read_relationship),
        outcome_curves=many("outcome_curves", lambda rr, raw, p: _read_outcome_curve(rr, raw, p, table_map)),
        rate_curves=many("rate_curves", _read_rate_curve),
        group_shares=many("group_shares", _read_group_shares),
        waterfalls=many("waterfalls", _read_waterfall),
        time_grids=many("time_grids", _read_time_grid),
        ledgers=tuple(ledgers),
        semantics=_read_semantics(r, top.get("semantics"), table_map),
        questions=_read_questions(r, top.get("questions")),
        path=file,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        source=text,
    )
    if spec.rotations < 1:
        raise SpecError(file, None, "rotations", "at least one rotation is needed")
    _check_references(r, spec)
    return spec
