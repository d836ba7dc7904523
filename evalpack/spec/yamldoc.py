"""YAML with lines: a bounded loader that keeps each node's line, and the reader that walks a document and refuses
what it cannot take with the file, the line and the key path."""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import math
import re
from typing import Any

import duckdb
import yaml

from evalpack.core.errors import SpecError
from evalpack.spec.grammar import (
    FIRST_DATE,
    IDENT_RE,
    LAST_DATE,
    MAX_ALIAS_VALUES,
    MAX_DEPTH,
    MAX_NAME_LENGTH,
    MAX_NUMBER,
    MAX_SPEC_BYTES,
    MISATA_NOTES,
    PERIOD_RE,
    QUARTER_RE,
)
from evalpack.spec.model import _Via

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


