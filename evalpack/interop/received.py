"""What arrives to be imported: a questions file read (JSON Lines, JSON or CSV/TSV, bounded, every problem named by
line) into items, and each item into a case (its question, gold SQL, answer and flags), or the reason it cannot be one."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from evalpack.checks.golden import typed
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import rotation_name
from evalpack.core.scoring import (
    ROWS_TYPE,
    SCALAR_TYPES,
    SIGNIFICANT_DIGITS,
)

ROTATION = rotation_name(0)
RECEIVED = "as-received"
STATUSES = ("scorable", "provisional", "criteria", "no_golden")
GROUPS = {"with_query": "with their query", "answer_only": "a number alone", "query_only": "nothing to compare yet"}
ALIASES = {
    "id": ("id", "question_id", "qid"),
    "question": ("question", "prompt", "nl_question"),
    "gold_sql": ("gold_sql", "sql", "query", "gold_query"),
    "check_sql": ("check_sql", "second_sql"),
    "expected_answer": ("expected_answer", "answer", "expected", "gold_answer"),
    "answer_type": ("answer_type",),
    "round_decimals": ("round_decimals",),
    "criteria": ("criteria", "rubric", "acceptance_criteria"),
    "tags": ("tags",),
    "expected_empty": ("expected_empty",),
    "about_orphans": ("about_orphans",),
}
_NUMBER = re.compile(r"[+-]?(0|[1-9][0-9]*)(\.[0-9]+)?")
MAX_NESTING = 100  # levels of arrays and objects an item of a questions file may nest (a result-set answer: 2)
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0", "")


# --------------------------------------------------------------------------- reading the questions file


@dataclass(frozen=True)
class Item:
    line: int
    fields: dict


@dataclass(frozen=True)
class Unparsed:
    line: int
    error: str


@dataclass(frozen=True)
class Received:
    """What the questions file held: its format, the unit it counts in, items and items that did not parse."""

    format: str  # jsonl | json | csv | tsv
    unit: str  # lines | items
    items: tuple[Item, ...]
    unparsed: tuple[Unparsed, ...]

    @property
    def count(self) -> int:
        return len(self.items) + len(self.unparsed)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _decode(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise EvalpackError(f"{name}: line {line}: not UTF-8 ({exc.reason} at byte {exc.start}); "
                            "save the file as UTF-8") from None


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests arrays and objects more than :data:`MAX_NESTING` levels deep (looked at without
    recursion)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth > MAX_NESTING:
                return True
            stack.extend((v, depth + 1) for v in value)
    return False


def _nesting_line(text: str, start: int = 0) -> int:
    """The line at which the JSON text from ``start`` first nests more than :data:`MAX_NESTING` levels deep (strings
    skipped), or the line of ``start``."""
    depth, pos = 0, start
    while pos < len(text):
        char = text[pos]
        if char == '"':
            while True:  # to the closing quote, past escaped characters
                pos = text.find('"', pos + 1)
                if pos < 0:
                    return _line_of(text, start)
                back = pos - 1
                while back > start and text[back] == "\\":
                    back -= 1
                if (pos - 1 - back) % 2 == 0:
                    break
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return _line_of(text, pos)
        elif char in "]}":
            depth -= 1
        pos += 1
    return _line_of(text, start)


def _nested_too_deeply(name: str, line: int) -> EvalpackError:
    return EvalpackError(f"{name}: line {line}: nested more than {MAX_NESTING} levels deep (arrays and objects), "
                         "which no question needs; a question is an object of plain fields, its answer at most a list "
                         "of rows: fix the line and import again")


TOO_MANY_DIGITS = re.compile(r"[0-9]{4301,}")  # more digits than Python reads as an integer (sys.int_info)


def read_jsonl(data: bytes, name: str = "the questions file") -> Received:
    """Items of JSON Lines: a line that is not a JSON object is reported with its number; one nested too deeply to
    read (:data:`MAX_NESTING`) is an EvalpackError naming ``name`` and the line."""
    items, bad = [], []
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for number, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"), parse_float=Decimal)
        except UnicodeDecodeError as exc:
            bad.append(Unparsed(number, f"not UTF-8 ({exc.reason} at column {exc.start + 1})"))
            continue
        except json.JSONDecodeError as exc:
            bad.append(Unparsed(number, f"not JSON ({exc.msg} at column {exc.colno})"))
            continue
        except RecursionError:
            raise _nested_too_deeply(name, number) from None
        except ValueError:  # an integer of more digits than Python reads
            bad.append(Unparsed(number, "not JSON that can be read (a number of more than 4,300 digits)"))
            continue
        if _too_deep(value):
            raise _nested_too_deeply(name, number)
        if isinstance(value, dict):
            items.append(Item(number, value))
        else:
            bad.append(Unparsed(number, f"a JSON {type(value).__name__}, not an object"))
    return Received("jsonl", "lines", tuple(items), tuple(bad))


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _array_elements(text: str, pos: int, decoder: json.JSONDecoder) -> list[tuple[Any, int]]:
    """The elements of the (valid) JSON array starting at ``text[pos] == '['``, each with its position."""
    out, pos = [], _skip_ws(text, pos + 1)
    if text[pos] == "]":
        return out
    while True:
        pos = _skip_ws(text, pos)
        value, end = decoder.raw_decode(text, pos)
        out.append((value, pos))
        pos = _skip_ws(text, end)
        if text[pos] == "]":
            return out
        pos += 1  # the comma


def _member_position(text: str, pos: int, key: str, decoder: json.JSONDecoder) -> int:
    """Where the value of ``key`` starts in the (valid) JSON object at ``text[pos] == '{'``."""
    pos = _skip_ws(text, pos + 1)
    while True:
        name, pos = decoder.raw_decode(text, pos)
        pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past the colon
        if name == key:
            return pos
        _, pos = decoder.raw_decode(text, pos)
        pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past the comma


def read_json(name: str, data: bytes) -> Received:
    text = _decode(name, data)
    decoder = json.JSONDecoder(parse_float=Decimal)
    start = _skip_ws(text, 0)
    try:
        document, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise EvalpackError(f"{name}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); nothing "
                            "was imported: fix the file, or send JSON Lines so that one bad line does not stop the "
                            "rest") from None
    except RecursionError:
        raise _nested_too_deeply(name, _nesting_line(text, start)) from None
    except ValueError:  # an integer of more digits than Python reads
        digits = TOO_MANY_DIGITS.search(text, start)
        raise EvalpackError(f"{name}: line {_line_of(text, digits.start() if digits else start)}: a number of more "
                            "than 4,300 digits, which cannot be read; nothing was imported") from None
    if _skip_ws(text, end) < len(text):
        return read_jsonl(data, name)  # one JSON value per line, named .json
    if isinstance(document, dict) and isinstance(document.get("questions"), list):
        elements = _array_elements(text, _member_position(text, start, "questions", decoder), decoder)
    elif isinstance(document, list):
        elements = _array_elements(text, start, decoder)
    else:
        raise EvalpackError(f"{name}: expected a JSON array of question objects or an object with a `questions` "
                            f"array, found a {type(document).__name__}")
    items, bad = [], []
    for value, pos in elements:
        if _too_deep(value):
            raise _nested_too_deeply(name, _nesting_line(text, pos))
        if isinstance(value, dict):
            items.append(Item(_line_of(text, pos), value))
        else:
            bad.append(Unparsed(_line_of(text, pos), f"a JSON {type(value).__name__}, not an object"))
    return Received("json", "items", tuple(items), tuple(bad))


def read_csv(name: str, data: bytes, delimiter: str = ",") -> Received:
    text = _decode(name, data)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if not header:
            raise EvalpackError(f"{name}: empty; expected a header row naming the columns (one must be `question`)")
        names = [h.strip() for h in header]
        if not any(n.lower() in ALIASES["question"] for n in names):
            raise EvalpackError(f"{name}: the header has no question column (columns: {', '.join(names)}); name the "
                                "column that holds the question text `question`")
        dupes = sorted(n for n, c in Counter(n.lower() for n in names).items() if c > 1)
        if dupes:
            raise EvalpackError(f"{name}: line 1: the header names {', '.join(dupes)} more than once")
        items, bad, last = [], [], reader.line_num
        for row in reader:
            line, last = last + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                bad.append(Unparsed(line, f"{len(row)} fields where the header has {len(names)}"))
                continue
            items.append(Item(line, dict(zip(names, row, strict=True))))
    except csv.Error as exc:
        raise EvalpackError(f"{name}: line {reader.line_num}: not CSV ({exc})") from None
    return Received("tsv" if delimiter == "\t" else "csv", "lines", tuple(items), tuple(bad))


def read_questions(name: str, data: bytes) -> Received:
    """Parse the questions file by its extension (sniffed from its first character when unknown)."""
    suffix = Path(name).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(data, name)
    if suffix == ".json":
        return read_json(name, data)
    if suffix == ".csv":
        return read_csv(name, data)
    if suffix == ".tsv":
        return read_csv(name, data, "\t")
    first = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if first == b"[":
        return read_json(name, data)
    if first == b"{":
        return read_jsonl(data, name)
    return read_csv(name, data)


# --------------------------------------------------------------------------- one item -> one case


@dataclass
class Case:
    """An item that parsed: its fields, and the answer as it will be compared."""

    line: int
    id: str | None
    question: str
    gold_sql: str | None
    check_sql: str | None
    criteria: Any
    raw_answer: Any  # as received, None when none arrived
    expected: Any  # comparable answer, None when none or unusable
    answer_type: str | None
    round_decimals: int | None
    answer_error: str | None
    tags: list[str]
    expected_empty: bool
    about_orphans: bool
    source_fields: dict


class _Bad(Exception):
    pass


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _pick(fields: dict) -> tuple[dict, dict]:
    """(field -> value for the known fields, the other fields) of one item."""
    by_lower: dict[str, str] = {}
    for key in fields:
        by_lower.setdefault(str(key).strip().lower(), key)
    known, used = {}, set()
    for name, aliases in ALIASES.items():
        hits = [by_lower[a] for a in aliases if a in by_lower and _present(fields[by_lower[a]])]
        if len(hits) > 1:
            raise _Bad(f"both {' and '.join(f'`{h}`' for h in hits)} give the {name}; keep one")
        used.update(by_lower[a] for a in aliases if a in by_lower)
        if hits:
            known[name] = fields[hits[0]]
    return known, {k: v for k, v in fields.items() if k not in used}


def _text(value: Any, name: str) -> str | None:
    if not _present(value):
        return None
    if not isinstance(value, str):
        raise _Bad(f"`{name}` must be a string, not a {type(value).__name__}")
    return value


def _flag(value: Any, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise _Bad(f"`{name}` must be true or false, not {value!r}")


def _decimals(value: Any) -> int | None:
    if not _present(value):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _Bad(f"`round_decimals` must be a whole number >= 0, not {value!r}")


def _rows_answer(raw: Any) -> list | None:
    """A result-set answer as rows: a list of rows (lists), or a list of values read as one column. Every
    cell keeps its type (:func:`evalpack.checks.golden.typed`): a number stays a number (``532348211.65``, ``0.0``),
    text stays text, null stays null."""
    if not isinstance(raw, list) or not raw:
        return None
    if all(isinstance(r, list) for r in raw):
        cells = [v for r in raw for v in r]
    elif not any(isinstance(v, (list, dict)) for v in raw):
        raw, cells = [[v] for v in raw], raw
    else:
        return None
    if any(isinstance(v, (list, dict)) for v in cells):
        return None
    return [[typed(v) for v in row] for row in raw]


def parse_answer(raw: Any, answer_type: str | None, round_decimals: int | None
                 ) -> tuple[Any, str | None, int | None, str | None]:
    """(comparable answer, answer_type, round_decimals, error) of an answer as received.

    A number's round_decimals is the number of digits written after its point (``12.50``: 2), at most as many as
    keep 12 significant digits (``15.48654581228407``: 10), unless given; a list is a result set (answer_type
    ``rows``); text that reads as a number is one, unless answer_type is ``string``.
    """
    if answer_type == ROWS_TYPE and isinstance(raw, str):
        try:
            raw = json.loads(raw, parse_float=Decimal)
        except json.JSONDecodeError:
            return None, ROWS_TYPE, round_decimals, f"the answer {raw!r} is not a JSON list of rows"
        except (ValueError, RecursionError):  # a number too long, nested too deeply
            return None, ROWS_TYPE, round_decimals, ("the answer is not a JSON list of rows that can be read (nested "
                                                     "too deeply, or a number of more than 4,300 digits)")
    if isinstance(raw, list) and answer_type in (None, ROWS_TYPE):
        rows = _rows_answer(raw)
        if rows is None:
            return None, ROWS_TYPE, round_decimals, "the answer is not a list of rows (lists of values) or of values"
        return rows, ROWS_TYPE, round_decimals, None
    if isinstance(raw, (bool, list, dict)) or answer_type == ROWS_TYPE:
        what = "true/false" if isinstance(raw, bool) else f"a JSON {type(raw).__name__}"
        return None, answer_type, round_decimals, (f"the answer is {what}; evalpack compares a number, an integer, "
                                                   "a string or a list of rows (answer_type rows)")
    if isinstance(raw, str) and answer_type != "string":
        text = raw.strip()
        if _NUMBER.fullmatch(text):
            raw = Decimal(text) if "." in text else int(text)
        elif answer_type in ("number", "integer"):
            return None, answer_type, round_decimals, f"the answer {raw!r} is not a {answer_type}"
    if isinstance(raw, str):
        return raw, "string", None, None
    if answer_type == "string":
        return str(raw), "string", None, None
    if isinstance(raw, int):
        kind = answer_type or "integer"
        return raw, kind, (round_decimals or 0) if kind == "number" else None, None
    # digits past the 12th significant one are a float's (15.48654581228407, summed in another order): not a precision
    decimals = max(0, min(-raw.as_tuple().exponent, SIGNIFICANT_DIGITS - 1 - raw.adjusted()))
    if answer_type == "integer":
        if raw != raw.to_integral_value():
            return None, "integer", None, f"the answer {raw} is not an integer"
        return int(raw), "integer", None, None
    return float(raw), "number", decimals if round_decimals is None else round_decimals, None


def parse_case(item: Item) -> Case:
    """One item as a case; raises _Bad when it cannot be read as a question."""
    known, other = _pick(item.fields)
    question = _text(known.get("question"), "question")
    if question is None:
        raise _Bad("no question text (a `question` field)")
    answer_type = known.get("answer_type")
    if answer_type is not None and answer_type not in SCALAR_TYPES + (ROWS_TYPE,):
        raise _Bad(f"`answer_type` must be one of {', '.join(SCALAR_TYPES + (ROWS_TYPE,))}, not {answer_type!r}")
    round_decimals = _decimals(known.get("round_decimals"))
    raw = known.get("expected_answer")
    expected, answer_type, round_decimals, error = (parse_answer(raw, answer_type, round_decimals)
                                                    if _present(raw) else (None, answer_type, round_decimals, None))
    tags = known.get("tags") or []
    if isinstance(tags, str):
        tags = [t.strip() for t in re.split(r"[,;]", tags) if t.strip()]
    elif not isinstance(tags, list):
        raise _Bad(f"`tags` must be a list or a comma-separated string, not {tags!r}")
    criteria = known.get("criteria")
    if criteria is not None and not isinstance(criteria, (str, list)):
        raise _Bad(f"`criteria` must be text or a list of texts, not a {type(criteria).__name__}")
    qid = known.get("id")
    return Case(item.line, None if qid is None else str(qid).strip(), question,
                _text(known.get("gold_sql"), "gold_sql"), _text(known.get("check_sql"), "check_sql"),
                criteria if _present(criteria) and criteria != [] else None,
                typed(raw) if _present(raw) else None, expected, answer_type, round_decimals, error,
                [str(t) for t in tags], _flag(known.get("expected_empty"), "expected_empty"),
                _flag(known.get("about_orphans"), "about_orphans"), typed(other))


def parse_cases(received: Received) -> tuple[list[Case], list[Unparsed]]:
    """Cases with ids (given ones kept; missing ones q001... by position), and what did not parse."""
    cases, bad = [], list(received.unparsed)
    seen: dict[str, int] = {}
    for item in received.items:
        try:
            case = parse_case(item)
            if case.id is not None and case.id in seen:
                raise _Bad(f"id {case.id!r} is already used on line {seen[case.id]}")
        except _Bad as exc:
            bad.append(Unparsed(item.line, str(exc)))
            continue
        if case.id is not None:
            seen[case.id] = item.line
        cases.append(case)
    width = max(3, len(str(len(cases))))
    for i, case in enumerate(cases, 1):
        if case.id is None:
            candidate = f"q{i:0{width}d}"
            case.id = candidate if candidate not in seen else f"line{case.line}"
            seen[case.id] = case.line
    return cases, sorted(bad, key=lambda u: u.line)


