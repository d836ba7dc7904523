"""Import questions that arrive from outside, plus the database they are about, as a pack.

``evalpack import QUESTIONS --data DB -o PACK [--force] [--holdout F] [--signing-key K]``

QUESTIONS is JSON Lines, a JSON array (or an object with a ``questions`` array), or CSV/TSV with a
header (an item nested more than MAX_NESTING levels deep is an error naming its line). DB is a DuckDB file
(attached read-only), a SQLite file (read with Python's ``sqlite3``: DuckDB's sqlite extension is not installed
offline, and one reader keeps packs reproducible), or a folder of Parquet/CSV tables, one table per file. A
database file is read in a sandbox worker process under the scorer's limits, within bounds on each table or view
(:class:`SourceWorker`, MAX_TABLE_*). The pack has the layout of a built pack with one rotation,
``rotations/seed_0`` (one database, no generator seed: 0 marks "as received"):

```
PACK/as-received/<QUESTIONS file name>   the questions file byte for byte (never edited, not even line endings);
                                         with a holdout it is in PACK.holdout-key/ instead (it holds every answer)
PACK/rotations/seed_0/tables/<t>.parquet and <t>.csv   every table of DB
PACK/questions.jsonl  certificate.json  manifest.json  verify.py  attestation.intoto.json
```

Fields read from each item (keys case-insensitive; the first name is the one written in the pack):

- ``question`` (also ``prompt``, ``nl_question``): required; an item without it did not parse.
- ``gold_sql`` (``sql``, ``query``, ``gold_query``), ``check_sql`` (``second_sql``): DuckDB SQL.
- ``expected_answer`` (``answer``, ``expected``, ``gold_answer``); ``answer_type`` (number | integer |
  string) and ``round_decimals``, inferred from the answer when absent (``12.50`` -> number at 2).
- ``criteria`` (``rubric``, ``acceptance_criteria``); ``id`` (``question_id``, ``qid``); ``tags``;
  ``expected_empty`` and ``about_orphans`` (booleans, for the audit). Other fields: ``source_fields``.

Record form of an imported pack's ``questions.jsonl`` (one JSON object per line, file order):

```
id, question, gold_sql, expected_answer, answer_type, round_decimals, kind ("imported"), split,
question_sha256, tags                       -- as in built packs (PACK_FORMAT.md), plus:
status          scorable | provisional | criteria | no_golden
verified_by     null | "authored_query" | "authored_query+check_sql"
authored_answer the answer exactly as received (null when none arrived)
observed_answer what gold_sql returned at import (the scalar, or up to 5 rows); null without a query
error           why the query or the answer could not be checked, or null
source_line     the line of the item in the received file
check_sql, check_answer, criteria, expected_empty, about_orphans, failed_checks, source_fields
```

``gold_sql`` is null for ``criteria`` and ``no_golden`` items and for an answer that arrived alone;
``expected_answer`` is null when no usable answer arrived. verify.py scores only records whose
``gold_sql`` and ``expected_answer`` are both non-null (status scorable or provisional) and must
skip every other record.

Answers keep their types (:func:`evalpack.checks.golden.typed`): in a result-set answer a number stays a
JSON number (``532348211.65``, ``0.0``; never its text), an integer an integer, null null, text text;
what a query returned is recorded the same way, a date or timestamp as its ISO text. The comparison is
the scorer's (:func:`evalpack.core.scoring.answer_matches`), and a disagreement is reported at its first
differing cell, both values with their types (:func:`evalpack.checks.golden.first_difference`).

Import verifies what it writes: the pack is assembled and attested in a staging folder and checked by
``evalpack verify`` (:func:`evalpack.pack.attest.verify_pack`); a pack it rejects (a query and an answer that
disagree, a query that fails) is not written: :class:`ImportRefused` (exit 1) names each problem, and
nothing at ``-o`` changes.

Links for the orphan check: those declared with ``--link`` first, then the database's own foreign keys (DuckDB,
SQLite) for the columns they leave, then links inferred
by :func:`evalpack.checks.audit.infer_links` (a name that names another table's unique key, the same type,
the values found there), each listed in ``manifest.json -> relationships`` with its ``source`` and
``inferred`` and, for inferred ones, its evidence and orphan rate, and printed in the report.

Classification (nothing is edited, invented or dropped): a query and an answer -> the query is run;
it returns the answer -> ``verified_by: authored_query``, ``provisional`` unless a second derivation
(``check_sql``, an independently written query returning the same answer) agrees and the golden
checks pass, then ``scorable``; it returns something else -> both values recorded, ``provisional``;
it fails -> the error recorded, ``provisional``. An answer alone -> ``provisional``. A query alone ->
``provisional`` (nothing to compare yet; what it returned is recorded). Prose criteria ->
``criteria``. Nothing -> ``no_golden``. An item that cannot be parsed is reported with its line.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evalpack import __version__
from evalpack.checks.audit import (
    Golden,
    LinkCount,
    Run,
    counted,
    describe_link,
    golden,
    infer_links,
    link_of,
    matches_answer,
    run_query,
    worker_runner,
)
from evalpack.checks.golden import CHECKS, MATCHES, Runner, empty_text, first_difference, in_order, shown, typed
from evalpack.checks.verification import Link, rotation_connection
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import QUESTIONS, PackLayout, rotation_name
from evalpack.core.scoring import (
    COMPARISON_RULE,
    ROWS_TYPE,
    SANDBOX_SCRATCH,
    SCALAR_TYPES,
    SIGNIFICANT_DIGITS,
    WATCHDOG,
    InputError,
    Limits,
    Outcome,
    SandboxWorker,
    answer_type_of,
    first_line,
    out_of_memory,
    printable,
    quote_ident,
    quote_literal,
    scorable,
    sha256_file,
    sweep_scratch,
    worker_main,
)
from evalpack.dialects.sqlite import PROGRESS_STEPS, _guard_of, open_sqlite_sandbox, sqlite_uri
from evalpack.pack.certify import HASHES
from evalpack.pack.folder import assemble_pack, discard, publish_dir, staging_dir
from evalpack.pack.holdout import seal_received, write_received_key

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


# --------------------------------------------------------------------------- the database


@dataclass
class Source:
    """The database the questions are about, written as the pack's tables."""

    kind: str  # duckdb | sqlite | folder
    name: str
    digests: dict[str, str]  # file name -> SHA-256
    tables: dict[str, dict] = field(default_factory=dict)  # name -> {"columns": {...}, "rows": {rotation: n}}
    foreign_keys: list[Link] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _safe_table_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def _write(con: duckdb.DuckDBPyConnection, select: str, name: str, out: Path, source: Source, origin: str) -> None:
    """Write one table as Parquet and CSV and record its columns and rows."""
    parquet, csv_path = out / f"{name}.parquet", out / f"{name}.csv"
    con.execute(f"COPY ({select}) TO {quote_literal(str(parquet))} (FORMAT parquet, COMPRESSION zstd)").fetchall()
    con.execute(f"COPY (SELECT * FROM read_parquet({quote_literal(str(parquet))})) TO {quote_literal(str(csv_path))} "
                "(FORMAT csv, HEADER true)").fetchall()
    columns = {c: t for c, t, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet({quote_literal(str(parquet))})")
               .fetchall()}
    rows = con.execute(f"SELECT COUNT(*) FROM read_parquet({quote_literal(str(parquet))})").fetchall()[0][0]
    source.tables[name] = {"columns": columns, "rows": {ROTATION: int(rows)}, "from": origin}


def _add_foreign_key(source: Source, table: str, cols: list[str], parent: str, pcols: list[str]) -> None:
    if len(cols) == 1 and len(pcols) == 1:
        source.foreign_keys.append(Link(table, cols[0], parent, pcols[0]))
    else:
        source.warnings.append(f"foreign key {table}({', '.join(cols)}) -> {parent}({', '.join(pcols)}) has "
                               f"{len(cols)} columns; the orphan audit follows single-column keys only")


# --------------------------------------------------------------------------- a database file, read in a worker
# A database file comes from outside: its views (and DuckDB's macros and generated columns) are SQL that runs when
# they are read. So this process never opens it. A worker process of the scorer's kind (scoring.worker_main, started
# as ``python -m evalpack.interop.importer --source-worker``) reads it under the scorer's limits: an address-space cap, a time
# limit per request (the worker is killed past it), CPU seconds, no file writes, few descriptors, death with this
# process. The file is read-only by construction: DuckDB attaches it READ_ONLY on a connection that reaches no other
# file, network or extension and whose configuration is locked; SQLite opens it by a read-only, immutable URI with
# query_only and the scorer's SQLite authorizer (dialect_scoring.open_sqlite_sandbox). This process asks for the
# catalogue, then for each table or view its rows, a chunk at a time (DuckDB: Arrow IPC; SQLite: the rows), and
# refuses with one line what passes a bound below (on each table or view, on all of them, on their number, on the
# time for the whole file).
# The connection that reads the file knows no path of the machine, by construction: the worker reads a hard link to
# the file (a copy where a link cannot be made) named source.duckdb or source.sqlite in a private scratch folder of
# the temp folder (SOURCE_SCRATCH), its working folder, and DuckDB's home, extension and secret folders are
# /nonexistent, its temp folder none. (Both engines resolve a link and /proc/self/fd/N to the file's real path: an
# open descriptor would show the path all the same.) So its settings (allowed_paths lists the file and its WAL) and
# catalogue (duckdb_databases().path) show the scratch name only. In depth: views, macros and generated columns that
# read DuckDB's description of the machine (settings, attached files, paths) or run SQL written as text are refused
# by name before anything runs (MACHINE_*), and what a view returns must hold neither the home folder, the file's
# path, the temp folder nor a scratch folder's name, as written or reversed, in hex or base64 (machine_paths).

SOURCE_WORKER_FLAG = "--source-worker"
MAX_SOURCE_OBJECTS = 1_000  # tables and views one database file (or folder of table files) may hold
MAX_SOURCE_SECONDS = 600.0  # seconds for reading a whole database file (at most the Limits' run_timeout)
SOURCE_SCRATCH = "evalpack-source-"  # the private folder the worker reads the file in: {prefix}{pid}-{random}
SOURCE_NAME = "source"  # the file's name there: source.duckdb or source.sqlite
DUCKDB_COMPANIONS = (".wal", ".wal.checkpoint", ".wal.recovery")  # what DuckDB reads beside a file (read-only too)
MAX_TABLE_ROWS = 10_000_000  # rows one table or view of a database file may hold
MAX_TABLE_BYTES = 512 * 2**20  # and bytes (Arrow's buffers; SQLite: the rows as JSON text)
MAX_SOURCE_BYTES = 4 * MAX_TABLE_BYTES  # all tables and views of one database file together
MAX_TABLE_SECONDS = 120.0  # the worker's seconds for one table or view (each request: the Limits' timeout)
MAX_ROW_BYTES = 32 * 2**20  # one row
SOURCE_CHUNK_BYTES = 16 * 2**20  # about what one reply of the worker holds
SQLITE_FETCH_ROWS = 256  # SQLite rows fetched at a time, at most (fewer when they are long)
NOWHERE = "/nonexistent"  # where the reading connection's home, extension and secret folders are said to be
# what the connection reading a DuckDB file from outside may not do once the file is attached
LOCKED_DOWN = ("autoinstall_known_extensions = false", "autoload_known_extensions = false",
               "allow_community_extensions = false", "enable_external_access = false", "lock_configuration = true")
SOURCE_SETTINGS = ("temp_directory = ''", "max_temp_directory_size = '0B'", "allow_persistent_secrets = false",
                   "enable_progress_bar = false", f"home_directory = '{NOWHERE}'",
                   f"extension_directory = '{NOWHERE}'", f"secret_directory = '{NOWHERE}'")
# DuckDB's description of the running system: every built-in duckdb_* and pragma_* table function and view
# (settings, attached databases and their files, extensions and where they are installed, secrets, memory, logs) ...
MACHINE_NAMES = ("SELECT function_name FROM duckdb_functions() WHERE internal AND (prefix(function_name, 'duckdb_') "
                 "OR prefix(function_name, 'pragma_')) UNION SELECT view_name FROM duckdb_views() WHERE internal "
                 "AND (prefix(view_name, 'duckdb_') OR prefix(view_name, 'pragma_'))")
MACHINE_TABLES = frozenset({"pg_settings"})  # ... PostgreSQL's view of the settings ...
# ... and the functions that read a setting or a variable, or run SQL written as text (which could name any of them):
# query and query_table take SQL, json_execute_serialized_sql runs SQL serialized as JSON, json_deserialize_sql turns
# that back into SQL text, and json_serialize_sql and json_serialize_plan parse (the plan: bind, constants folded) it
MACHINE_CALLS = frozenset({"current_setting", "getenv", "getvariable", "which_secret", "query", "query_table",
                           "json_execute_serialized_sql", "json_deserialize_sql", "json_serialize_sql",
                           "json_serialize_plan"})
IMPORT_BATCH_ROWS = 1 << 16
# the types Arrow carries as others (HUGEINT as DECIMAL(38,0), UUID as text): cast back, so the files hold what a
# direct copy of the table would
_CAST_BACK = ("HUGEINT", "UHUGEINT", "UUID")
_READ, _NEXT, _OPEN = "read", "next", "open"


def machine_name(sql: str, names: Collection[str]) -> str | None:
    """The name in ``sql`` (a view's, a macro's or a generated column's) that reads the machine's description: one of
    ``names`` (the built-in catalogue, :data:`MACHINE_TABLES`) wherever it stands, or a call of one of
    :data:`MACHINE_CALLS`; None when there is none. Identifiers are compared unquoted, in lower case (as DuckDB
    resolves them); string constants and comments are not names."""
    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - SQL DuckDB wrote but cannot tokenize is not read
        return "SQL that cannot be checked"
    words = []
    for i, (start, kind) in enumerate(tokens):
        if kind != duckdb.token_type.comment:
            end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
            words.append((sql[start:end].strip(), kind))
    for i, (text, kind) in enumerate(words):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        name = (text[1:-1].replace('""', '"') if text.startswith('"') and text.endswith('"') else text).lower()
        called = i + 1 < len(words) and words[i + 1][0].startswith("(")
        if name in names or name in MACHINE_TABLES or (called and name in MACHINE_CALLS):
            return name
    return None


class _Stop(Exception):
    """Why the worker stopped: ``kind`` is the bound (time, memory, rows, bytes, row) or ``open``/``error``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")


class _SourceSession:
    """The worker's side: the database file (opened read-only at the first request, ``open``, which answers with its
    catalogue) and the table or view being read (``read``: its first chunk; ``next``: the next one). A reply is one
    row: (the chunk, whether it was the last, what the first chunk adds, rows so far, bytes so far). A chunk is
    Arrow IPC (DuckDB; the first adds the declared types) or the rows as JSON text, a BLOB as ``{"$b": base64}``
    (SQLite; the first adds the column names)."""

    def __init__(self, setup: dict, limits: Limits) -> None:
        self.path, self.format, self.limits = Path(setup["database"]), setup["format"], limits
        self.con: Any = None
        self.stream: Any = None  # DuckDB: an Arrow reader; SQLite: a cursor
        self.pending: list[pa.RecordBatch] = []
        self.guard: Any = None
        self.rows = self.bytes = 0
        self.fetch = SQLITE_FETCH_ROWS // 8  # SQLite rows fetched at a time

    def run(self, sql: str, timeout: float, max_rows: int, max_bytes: int) -> Outcome:
        started = time.perf_counter()
        stopped = [False]

        def stop() -> None:
            stopped[0] = True
            if self.format == "duckdb" and self.con is not None:
                self.con.interrupt()

        try:
            request = json.loads(sql)
            with WATCHDOG.armed(timeout, stop):
                row = (self._duckdb if self.format == "duckdb" else self._sqlite)(request, stopped, max_rows,
                                                                                   max_bytes)
            return Outcome([row], None, time.perf_counter() - started)
        except _Stop as exc:
            error = str(exc)
        except MemoryError:
            error = f"memory: more than its {self.limits.memory_mb} MiB"
        except (duckdb.Error, sqlite3.Error) as exc:
            text = first_line(exc)
            if stopped[0]:
                error = f"time: stopped after {timeout:g} s"
            elif out_of_memory(text):
                error = f"memory: {text}"
            elif "string or blob too big" in text:
                error = f"row: {text}"
            elif self.guard is not None and self.guard.refused:
                error = f"error: {self.guard.refused} is not allowed"
            else:
                error = f"error: {text}"
        self._drop()
        return Outcome(None, error, time.perf_counter() - started, timed_out=error.startswith("time:"))

    def _drop(self) -> None:
        stream, self.stream, self.pending, self.guard = self.stream, None, [], None
        self.rows = self.bytes = 0
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _count(self, rows: int, size: int, max_rows: int, max_bytes: int) -> None:
        self.rows, self.bytes = self.rows + rows, self.bytes + size
        if self.rows > max_rows:
            raise _Stop("rows", f"more than {max_rows}")
        if self.bytes > max_bytes:
            raise _Stop("bytes", f"more than {max_bytes}")

    # DuckDB

    def _duckdb(self, request: dict, stopped: list[bool], max_rows: int, max_bytes: int) -> tuple:
        if _OPEN in request:
            return (json.dumps(self._duckdb_catalogue()),)
        info = None
        if _READ in request:
            self._drop()
            select = f"SELECT * FROM src.main.{quote_ident(request[_READ])}"
            info = {name: kind for name, kind, *_ in self.con.execute(f"DESCRIBE {select}").fetchall()}
            self.stream = self.con.sql(select).to_arrow_reader(IMPORT_BATCH_ROWS)
        if self.stream is None:
            raise _Stop("error", "no table is being read")
        schema, batches, size, done = self.stream.schema, [], 0, False
        while size < SOURCE_CHUNK_BYTES:
            if not self.pending:
                try:
                    batch = self.stream.read_next_batch()
                except StopIteration:
                    done = True
                    break
                self._count(batch.num_rows, batch.nbytes, max_rows, max_bytes)
                self.pending = _split(batch)
            batch = self.pending.pop(0)
            if batch.nbytes > MAX_ROW_BYTES:
                raise _Stop("row", f"a row of {batch.nbytes} bytes")
            batches.append(batch)
            size += batch.nbytes
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as ipc:
            for batch in batches:
                ipc.write_batch(batch)
        reply = (sink.getvalue().to_pybytes(), done, info, self.rows, self.bytes)
        if done:
            self._drop()
        return reply

    def _duckdb_catalogue(self) -> dict:
        self.con = con = duckdb.connect(":memory:")
        con.execute(f"SET threads = {max(1, int(self.limits.threads))}")
        con.execute(f"SET memory_limit = '{max(64, int(self.limits.memory_mb)) * 2**20}B'")
        for setting in SOURCE_SETTINGS:
            with contextlib.suppress(duckdb.Error):  # a setting this DuckDB version does not have
                con.execute(f"SET {setting}")
        try:
            con.execute(f"ATTACH {quote_literal(str(self.path))} AS src (READ_ONLY)")
        except duckdb.Error as exc:
            raise _Stop("open", first_line(exc)) from None
        for setting in LOCKED_DOWN:
            con.execute(f"SET {setting}")
        locked = con.execute("SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
                             "(SELECT readonly FROM duckdb_databases() WHERE database_name = 'src')").fetchone()
        if str(locked[0]).lower() != "false" or str(locked[1]).lower() != "true" or locked[2] is not True:
            raise RuntimeError("the connection reading the database did not lock; refusing to read it")
        objects = con.execute(
            "SELECT schema_name, table_name, 'table' FROM duckdb_tables() WHERE database_name = 'src' UNION ALL "
            "SELECT schema_name, view_name, 'view' FROM duckdb_views() WHERE database_name = 'src' AND NOT internal "
            "ORDER BY 1, 2").fetchall()
        keys = con.execute(
            "SELECT table_name, constraint_column_names, referenced_table, referenced_column_names "
            "FROM duckdb_constraints() WHERE database_name = 'src' AND schema_name = 'main' "
            "AND constraint_type = 'FOREIGN KEY' ORDER BY table_name, constraint_index").fetchall()
        names = {name.lower() for name, in con.execute(MACHINE_NAMES).fetchall()}
        machine = []
        for what, sql in con.execute(
                "SELECT 'view ' || view_name, sql FROM duckdb_views() WHERE database_name = 'src' AND NOT internal "
                "UNION ALL SELECT 'macro ' || function_name, macro_definition FROM duckdb_functions() "
                "WHERE database_name = 'src' AND macro_definition IS NOT NULL UNION ALL "
                "SELECT 'table ' || table_name || ' (its column ' || column_name || ')', generation_expression "
                "FROM information_schema.columns WHERE table_catalog = 'src' AND is_generated = 'ALWAYS' "
                "ORDER BY 1").fetchall():
            found = machine_name(sql or "", names)
            if found is not None:
                machine.append([what, found])
        computed = con.execute("SELECT DISTINCT table_name FROM information_schema.columns WHERE table_catalog = "
                               "'src' AND table_schema = 'main' AND is_generated = 'ALWAYS' ORDER BY 1").fetchall()
        return {"objects": [list(o) for o in objects], "machine": machine, "computed": [t for t, in computed],
                "foreign_keys": [[t, list(c), p, list(pc)] for t, c, p, pc in keys]}

    # SQLite

    @contextlib.contextmanager
    def _clock(self, stopped: list[bool]) -> Iterator[None]:
        """SQLite looks at ``stopped`` (set by the watchdog at the time limit) every PROGRESS_STEPS steps."""
        self.con.set_progress_handler(lambda: 1 if stopped[0] else 0, PROGRESS_STEPS)
        try:
            yield
        finally:
            self.con.set_progress_handler(None, PROGRESS_STEPS)

    def _sqlite(self, request: dict, stopped: list[bool], max_rows: int, max_bytes: int) -> tuple:
        if _OPEN in request:
            return (json.dumps(self._sqlite_catalogue()),)
        info = None
        if _READ in request:
            self._drop()
            self.guard = _guard_of(self.con)  # what the scorer's authorizer refuses, it names
            with self._clock(stopped):
                self.stream = self.con.execute(f"SELECT * FROM {quote_ident(request[_READ])}")
            info = [d[0] for d in self.stream.description]
        if self.stream is None:
            raise _Stop("error", "no table is being read")
        parts, size, done = [], 0, False
        with self._clock(stopped):
            while size < SOURCE_CHUNK_BYTES:
                asked = self.fetch
                got = self.stream.fetchmany(asked)
                text = json.dumps(got, default=_json_bytes)[1:-1]
                if len(text) > MAX_ROW_BYTES:
                    longest = max(len(json.dumps(row, default=_json_bytes)) for row in got)
                    if longest > MAX_ROW_BYTES:
                        raise _Stop("row", f"a row of {longest} bytes")
                self._count(len(got), len(text), max_rows, max_bytes)
                if got:
                    parts.append(text)
                    size += len(text)
                    # as many rows at a time as take about a sixteenth of a chunk
                    self.fetch = max(1, min(SQLITE_FETCH_ROWS, SOURCE_CHUNK_BYTES * len(got) // (16 * len(text) + 1)))
                if len(got) < asked:
                    done = True
                    break
        reply = ("[" + ",".join(parts) + "]", done, info, self.rows, self.bytes)
        if done:
            self._drop()
        return reply

    def _sqlite_catalogue(self) -> dict:
        try:
            self.con = open_sqlite_sandbox(self.path, self.limits, cap_heap=True)
            meta = sqlite3.connect(sqlite_uri(self.path), uri=True)
        except sqlite3.Error as exc:
            raise _Stop("open", first_line(exc)) from None
        objects = []
        try:
            meta.execute("PRAGMA query_only = ON")
            try:
                found = meta.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                                     "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name").fetchall()
            except sqlite3.Error as exc:
                raise _Stop("open", first_line(exc)) from None
            for name, kind in found:
                entry: dict[str, Any] = {"name": name, "kind": kind, "declared": {}, "foreign_keys": [], "error": None}
                try:
                    entry["declared"] = {r[1]: r[2] for r in meta.execute(f"PRAGMA table_info({quote_ident(name)})")}
                    keys: dict[int, list] = {}
                    for fk in meta.execute(f"PRAGMA foreign_key_list({quote_ident(name)})").fetchall():
                        keys.setdefault(fk[0], []).append(fk)
                    for fk_rows in keys.values():
                        parent = fk_rows[0][2]
                        cols, pcols = [r[3] for r in fk_rows], [r[4] for r in fk_rows]
                        if any(p is None for p in pcols):  # REFERENCES parent: the parent's primary key
                            pk = meta.execute(f"PRAGMA table_info({quote_ident(parent)})").fetchall()
                            pcols = [r[1] for r in sorted(pk, key=lambda r: r[5]) if r[5]]
                        entry["foreign_keys"].append([name, cols, parent, pcols])
                except sqlite3.Error as exc:
                    entry["error"] = first_line(exc)
                objects.append(entry)
        finally:
            meta.close()
        return {"objects": objects}


def _json_bytes(value: Any) -> dict:
    """A BLOB in a chunk of SQLite rows (JSON: every other value SQLite returns is a JSON value)."""
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"a {type(value).__name__} in a SQLite row")


def _bytes_json(value: dict) -> Any:
    return base64.b64decode(value["$b"]) if set(value) == {"$b"} else value


def _split(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` in pieces of at most :data:`SOURCE_CHUNK_BYTES` (or of one row)."""
    if batch.nbytes <= SOURCE_CHUNK_BYTES or batch.num_rows <= 1:
        return [batch]
    half = batch.num_rows // 2
    return _split(batch.slice(0, half)) + _split(batch.slice(half))


def open_source_worker(setup: dict, limits: Limits, on_connected: Callable[[], Any] | None = None
                       ) -> tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]:
    """The worker's opener (:func:`evalpack.core.scoring.worker_main`): the file is opened at the first request, under the
    worker's limits; nothing it does can change it (its state is therefore not compared)."""
    session = _SourceSession(setup, limits)
    return session.run, (lambda: None), {}


def private_source(database: Path, file_format: str) -> Path:
    """A new private scratch folder (:data:`SOURCE_SCRATCH`, mode 0700, in the temp folder) holding ``database`` as
    ``source.<file_format>`` (and a DuckDB file's WAL beside it), each a hard link, or a copy where a link cannot be
    made: the path the worker's engine is given, and shows, names nothing of the machine but the scratch folder."""
    parent = Path(tempfile.gettempdir())
    sweep_scratch(parent, SOURCE_SCRATCH)
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f"{SOURCE_SCRATCH}{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise EvalpackError(f"{database}: cannot make a private folder to read it in, in {parent} "
                            f"({exc.strerror})") from None
    target = scratch / f"{SOURCE_NAME}.{file_format}"
    try:
        for suffix in ("",) + (DUCKDB_COMPANIONS if file_format == "duckdb" else ()):
            origin, copy = database.with_name(database.name + suffix), target.with_name(target.name + suffix)
            if suffix and not origin.is_file():
                continue
            try:
                os.link(origin, copy)
            except OSError:  # another file system, or a file this user may read but not link
                shutil.copyfile(origin, copy)
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise EvalpackError(f"{database}: cannot link or copy it into a private folder to read it, in {parent} "
                            f"({exc.strerror})") from None
    return scratch


class SourceWorker(SandboxWorker):
    """The database file ``database`` (``duckdb`` or ``sqlite``) read in a worker process under ``limits``
    (:class:`_SourceSession`); :meth:`ask` sends one request, the wall clock enforced by killing the worker. The
    worker reads the file's :func:`private_source` (its working folder too), removed when this closes: use as a
    context manager."""

    def __init__(self, database: Path, file_format: str, limits: Limits) -> None:
        database = Path(database).resolve()
        self.database, self.format = database, file_format  # the file as the user named it: for messages only
        self.scratch = private_source(database, file_format)
        try:
            super().__init__(self.scratch, limits)
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def command(self) -> list[str]:
        # -I: no environment variables of Python's, no user site-packages, the working folder not on sys.path
        return [sys.executable, "-I", "-m", "evalpack.interop.importer", SOURCE_WORKER_FLAG, str(os.getpid())]

    def setup(self) -> dict[str, Any]:
        return {"database": str(self.scratch / f"{SOURCE_NAME}.{self.format}"), "format": self.format,
                "timeout": self.limits.timeout, "memory_mb": self.limits.memory_mb, "threads": self.limits.threads}

    def ask(self, request: dict, timeout: float, max_bytes: int = MAX_TABLE_BYTES) -> Outcome:
        try:
            return self.run(json.dumps(request), timeout, MAX_TABLE_ROWS, max_bytes)
        except InputError as exc:  # the worker did not start
            raise EvalpackError(f"{self.database}: the process that reads it did not start ({first_line(exc)})") \
                from None


SCRATCH_NAMES = (SANDBOX_SCRATCH.encode(), SOURCE_SCRATCH.encode())  # the scratch folders' names, wherever they are
MIN_DISGUISED = 8  # bytes a path or name needs before its reversed, hex and base64 forms are looked for


def machine_paths(data: Path) -> tuple[bytes, ...]:
    """What a view's rows (or what a question's SQL returns) must not hold: the home folder, the path of the
    database file (or folder) on this machine, and the temp folder (where the scratch folders of the scorer's
    sandbox and of the worker reading a file are: :data:`SCRATCH_NAMES`)."""
    temp = tempfile.gettempdir()
    found = {str(data.resolve()), str(data.absolute()), temp, str(Path(temp).resolve())}
    with contextlib.suppress(RuntimeError, KeyError):
        found.add(str(Path.home()))
    return tuple(sorted(p.encode() for p in found if p.strip("/")))


def holds_path(blob: bytes, path: bytes) -> bool:
    """Whether ``blob`` holds ``path`` itself or a path under it (``/root``, ``/root/x``; not ``/rootkit``)."""
    return re.search(re.escape(path) + rb"(?![\w.-])", blob) is not None


def disguises(text: bytes) -> tuple[bytes, ...]:
    """How a query may write ``text`` to slip past a search for it: reversed, in hex (either case) and in base64 (the
    part of the encoding that does not depend on the bytes around it, at each of the three alignments); none for text
    shorter than :data:`MIN_DISGUISED` bytes, which would be found by chance."""
    if len(text) < MIN_DISGUISED:
        return ()
    forms = [text[::-1], text.hex().encode(), text.hex().upper().encode()]
    for shift in range(3):
        forms.append(base64.b64encode(b"\0" * shift + text)[4 if shift else 0:-4])
    return tuple(forms)


def machine_path_in(blob: bytes, paths: Collection[bytes], names: Collection[bytes] = SCRATCH_NAMES) -> bytes | None:
    """The first of ``paths`` (:func:`holds_path`, written as it is or JSON-escaped) or ``names`` (anywhere) that
    ``blob`` holds, either as written or in one of its :func:`disguises`; None when it holds none."""
    for path in paths:
        escaped = json.dumps(path.decode(errors="replace"))[1:-1].encode()
        if holds_path(blob, path) or holds_path(blob, escaped) or any(d in blob for d in disguises(path)):
            return path
    for name in names:
        if name in blob or any(d in blob for d in disguises(name)):
            return name
    return None


@dataclass(frozen=True)
class _Budget:
    """The time for reading a whole database file: ``seconds`` (:data:`MAX_SOURCE_SECONDS`, at most the limits'
    ``run_timeout``), spent at ``ends`` (``time.monotonic()``)."""

    seconds: float
    ends: float

    @classmethod
    def start(cls, limits: Limits) -> _Budget:
        seconds = min(MAX_SOURCE_SECONDS, limits.run_timeout)
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        return self.ends - time.monotonic()


class _Reading:
    """One table or view of a database file, asked of its worker a chunk at a time within the time ``budget`` of the
    whole file; each reply is checked, and what passes a bound is an EvalpackError naming the table or view and the
    bound (kept in ``refusal`` too, for when DuckDB reads the chunks and reports the error its own way)."""

    def __init__(self, worker: SourceWorker, what: str, max_bytes: int, budget: _Budget,
                 needles: tuple[bytes, ...] | None = None) -> None:
        self.worker, self.what, self.max_bytes, self.budget, self.needles = worker, what, max_bytes, budget, needles
        self.seconds = 0.0
        self.bytes = 0
        self.refusal: EvalpackError | None = None

    def ask(self, request: dict) -> tuple:
        limits, left = self.worker.limits, self.budget.left()
        if left < 0.1:
            self.refusal = self._over_budget()
            raise self.refusal
        bound = min(limits.timeout, MAX_TABLE_SECONDS - self.seconds)
        outcome = self.worker.ask(request, max(0.1, min(bound, left)), self.max_bytes)
        self.seconds += outcome.seconds
        if outcome.error is not None:
            timed_out = outcome.timed_out or outcome.error.startswith("time:")
            self.refusal = self._over_budget() if left < bound and timed_out else self._refused(outcome)
            raise self.refusal
        row = outcome.rows[0]
        if len(row) > 1:
            self.bytes = int(row[4])
            chunk = row[0] if isinstance(row[0], bytes) else row[0].encode()
            needle = None if self.needles is None else machine_path_in(chunk, self.needles)
            if needle is not None:
                self.refusal = EvalpackError(
                    f"{self.worker.database}: {self.what} returns a path of this machine "
                    f"({printable(needle.decode(errors='replace'))}); a view may read only the database's own "
                    "tables, not where this machine keeps its files: drop or rewrite it, and import again")
                raise self.refusal
            if not row[1] and self.seconds >= MAX_TABLE_SECONDS:
                self.refusal = self._refused(Outcome(None, "time: in all", self.seconds, True))
                raise self.refusal
        return row

    def _over_budget(self) -> EvalpackError:
        return EvalpackError(
            f"{self.worker.database}: reading the whole file took more than {self.budget.seconds:g} s, the time limit "
            f"for reading a database file (stopped at {self.what}); a file whose views take this long is refused: "
            "make them cheaper or drop them, or import a smaller extract, and import again")

    def _refused(self, outcome: Outcome) -> EvalpackError:
        where, what, limits = self.worker.database, self.what, self.worker.limits
        kind, _, detail = (outcome.error or "").partition(": ")
        smaller = "; import a smaller extract, or the rows as Parquet files in a folder (--data FOLDER)"
        if outcome.timed_out or kind == "time":
            text = (f"{what} was stopped at the time limit for reading it ({limits.timeout:g} s for each batch of "
                    f"rows, {MAX_TABLE_SECONDS:g} s in all); a view that takes this long is refused: make it cheaper "
                    "or drop it, and import again")
        elif kind == "memory" or "ended its worker process" in outcome.error:
            text = (f"{what} needs more than the memory limit for reading it ({limits.memory_mb} MiB; its reading "
                    "process was stopped); a view that builds this much is refused: make it cheaper or drop it, and "
                    "import again")
        elif kind == "rows":
            text = f"{what} holds more than {MAX_TABLE_ROWS:,} rows, the limit for a table or view of a database file"
            text += smaller
        elif kind == "bytes" and self.max_bytes < MAX_TABLE_BYTES:
            text = (f"its tables and views hold more than {MAX_SOURCE_BYTES // 2**20:,} MiB together, the limit for "
                    f"a database file (passed at {what})") + smaller
        elif kind == "bytes":
            text = (f"{what} holds more than {MAX_TABLE_BYTES // 2**20:,} MiB, the limit for a table or view of a "
                    "database file") + smaller
        elif kind == "row":
            text = (f"{what} has a row or value larger than the limit for one row ({MAX_ROW_BYTES // 2**20} MiB); "
                    "a view that builds such values is refused: drop it, and import again")
        elif kind == "open":
            text = f"cannot open the {'DuckDB' if self.worker.format == 'duckdb' else 'SQLite'} database read-only " \
                   f"({detail})"
        else:
            text = f"cannot read {what} ({detail or outcome.error}); a view may read only the database's own tables"
        return EvalpackError(f"{where}: {text}")


def _check_count(path: Path, count: int, what: str = "tables and views") -> None:
    """Refuse a database file (or folder) of more than :data:`MAX_SOURCE_OBJECTS` tables and views, before any is
    read."""
    if count > MAX_SOURCE_OBJECTS:
        raise EvalpackError(f"{path}: holds {count:,} {what}, more than {MAX_SOURCE_OBJECTS:,}, the limit on the "
                            f"{what} of a database an import reads; import a smaller extract (the tables the "
                            "questions read), and import again")


def _duckdb_batches(reading: _Reading, row: tuple) -> Iterator[pa.RecordBatch]:
    """The record batches of a table or view, from its first reply ``row`` on."""
    while True:
        yield from pa.ipc.open_stream(pa.py_buffer(row[0]))
        if row[1]:
            return
        row = reading.ask({_NEXT: True})


def _from_duckdb(path: Path, out: Path, source: Source, limits: Limits) -> None:
    """Every table and view of the main schema of the DuckDB file at ``path``, read by a :class:`SourceWorker`; the
    rows go to the pack's files through a connection of this process."""
    needles, budget = machine_paths(path), _Budget.start(limits)
    with SourceWorker(path, "duckdb", limits) as worker, duckdb.connect(":memory:") as writer:
        catalogue = json.loads(_Reading(worker, "its catalogue", MAX_TABLE_BYTES, budget).ask({_OPEN: True})[0])
        if catalogue["machine"]:
            what, name = catalogue["machine"][0]
            raise EvalpackError(f"{path}: {printable(what)} reads {printable(name)}, DuckDB's description of the "
                                "machine running the import (its settings, files and paths) or SQL written as text, "
                                "not the database; a view may read only the database's own tables: drop or rewrite "
                                "it, and import again")
        _check_count(path, len(catalogue["objects"]))
        spent = 0
        for schema, table, kind in catalogue["objects"]:
            if schema != "main" or not _safe_table_name(table):
                source.warnings.append(f"{path.name}: {schema}.{table} not imported (only tables of the main schema "
                                       "with plain names become pack tables)")
                continue
            computed = kind == "view" or table in catalogue["computed"]
            reading = _Reading(worker, f"{kind} {printable(table)}", min(MAX_TABLE_BYTES, MAX_SOURCE_BYTES - spent),
                               budget, needles if computed else None)
            first = reading.ask({_READ: table})
            schema_of = pa.ipc.open_stream(pa.py_buffer(first[0])).schema
            writer.register("__import_rows", pa.RecordBatchReader.from_batches(schema_of,
                                                                               _duckdb_batches(reading, first)))
            try:
                _write(writer, _as_declared(writer, first[2]), table, out, source, kind)
            except duckdb.Error as exc:
                if reading.refusal is not None:
                    raise reading.refusal from None
                raise EvalpackError(f"{path}: cannot write {kind} {printable(table)} into the pack "
                                    f"({first_line(exc)})") from None
            finally:
                writer.unregister("__import_rows")
            spent += reading.bytes
        for table, cols, parent, pcols in catalogue["foreign_keys"]:
            _add_foreign_key(source, table, cols, parent, pcols)


def _as_declared(writer: duckdb.DuckDBPyConnection, declared: dict[str, str]) -> str:
    """A SELECT of the rows registered as ``__import_rows`` with each column of a type in :data:`_CAST_BACK` cast back
    to the type ``declared`` in the source."""
    arrived = {name: kind for name, kind, *_ in writer.execute("DESCRIBE SELECT * FROM __import_rows").fetchall()}
    columns = [f"CAST({quote_ident(name)} AS {declared[name]}) AS {quote_ident(name)}"
               if declared.get(name) in _CAST_BACK and kind != declared[name] else quote_ident(name)
               for name, kind in arrived.items()]
    return f"SELECT {', '.join(columns)} FROM __import_rows"


def _affinity(declared: str) -> pa.DataType:
    """SQLite's type affinity of a declared column type, as the Arrow type of a column without values."""
    t = (declared or "").upper()
    if "INT" in t:
        return pa.int64()
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if "BLOB" in t:
        return pa.binary()
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    return pa.string()


def _sqlite_array(values: list, declared: str) -> tuple[pa.Array, str | None]:
    """The Arrow column of SQLite values (typed by the values; the declared type when all are NULL)."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.array(values, type=_affinity(declared)), None
    if kinds <= {int}:
        return pa.array(values, type=pa.int64()), None
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64()), None
    if kinds == {str}:
        return pa.array(values, type=pa.string()), None
    if kinds == {bytes}:
        return pa.array(values, type=pa.binary()), None
    text = [None if v is None else (v.hex() if isinstance(v, bytes) else str(v)) for v in values]
    names = ", ".join(sorted(k.__name__ for k in kinds))
    return pa.array(text, type=pa.string()), f"holds mixed value types ({names}); written as text"


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the first bytes of a SQLite rollback journal still to be played


def _check_sqlite_companions(path: Path) -> None:
    """Refuse a SQLite file whose write-ahead log or rollback journal holds what the file itself does not: it is read
    as it is (immutable), and SQLite would write to play them."""
    wal, journal = path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise EvalpackError(f"{wal}: {path.name} has changes in this write-ahead log that the file itself does not "
                            f"hold yet; close every program that has it open, or run sqlite3 {path.name} "
                            "'PRAGMA wal_checkpoint(TRUNCATE)', and import again")
    if journal.is_file():
        with open(journal, "rb") as handle:
            if handle.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC:
                raise EvalpackError(f"{journal}: {path.name} has a transaction that did not finish; open it once "
                                    f"with sqlite3 (which rolls it back), and import again")


def _from_sqlite(path: Path, out: Path, source: Source, limits: Limits) -> None:
    """Every table and view of the SQLite file at ``path``, read by a :class:`SourceWorker` (each column typed by its
    values, :func:`_sqlite_array`)."""
    _check_sqlite_companions(path)
    needles, budget = machine_paths(path), _Budget.start(limits)
    with SourceWorker(path, "sqlite", limits) as worker, duckdb.connect(":memory:") as con:
        catalogue = json.loads(_Reading(worker, "its catalogue", MAX_TABLE_BYTES, budget).ask({_OPEN: True})[0])
        _check_count(path, len(catalogue["objects"]))
        spent = 0
        for entry in catalogue["objects"]:
            table, kind = entry["name"], entry["kind"]
            if not _safe_table_name(table):
                source.warnings.append(f"{path.name}: table {table!r} not imported (its name cannot be a file name)")
                continue
            what = f"{kind} {printable(table)}"
            if entry["error"] is not None:
                raise EvalpackError(f"{path}: cannot read {what} ({entry['error']})")
            reading = _Reading(worker, what, min(MAX_TABLE_BYTES, MAX_SOURCE_BYTES - spent), budget,
                               needles if kind == "view" else None)
            row = reading.ask({_READ: table})
            names = row[2]
            columns: list[list] = [[] for _ in names]
            while True:
                for values in json.loads(row[0], object_hook=_bytes_json):
                    for column, value in zip(columns, values):
                        column.append(value)
                if row[1]:
                    break
                row = reading.ask({_NEXT: True})
            spent += reading.bytes
            arrays = []
            for name, values in zip(names, columns):
                array, note = _sqlite_array(values, entry["declared"].get(name, ""))
                arrays.append(array)
                if note:
                    source.warnings.append(f"{path.name}: {table}.{name} {note}")
            del columns
            con.register("__import_table", pa.table(arrays, names=names))
            _write(con, "SELECT * FROM __import_table", table, out, source, kind)
            con.unregister("__import_table")
            for child, cols, parent, pcols in entry["foreign_keys"]:
                _add_foreign_key(source, child, cols, parent, pcols)


def _from_folder(path: Path, out: Path, source: Source) -> None:
    _check_count(path, sum(1 for file in path.iterdir() if file.suffix.lower() in (".parquet", ".csv")), "table files")
    con = duckdb.connect(":memory:")
    try:
        for file in sorted(path.iterdir()):
            suffix = file.suffix.lower()
            if not file.is_file() or suffix not in (".parquet", ".csv"):
                source.warnings.append(f"{path.name}/{file.name} ignored (tables are .parquet or .csv files)")
                continue
            name = file.stem
            if name in source.tables:
                source.warnings.append(f"{path.name}/{file.name} ignored: table {name} already comes from "
                                       f"{source.tables[name]['from']}")
                continue
            reader = "read_parquet" if suffix == ".parquet" else "read_csv"
            options = "" if suffix == ".parquet" else ", header = true"
            try:
                _write(con, f"SELECT * FROM {reader}({quote_literal(str(file))}{options})", name, out, source, file.name)
            except duckdb.Error as exc:
                raise EvalpackError(f"{file}: cannot read the table ({first_line(exc)})") from None
            source.digests[file.name] = sha256_file(file)
    finally:
        con.close()


def write_source(data: str | Path, out: Path, limits: Limits | None = None) -> Source:
    """Write every table of ``data`` into ``out`` (Parquet + CSV); returns what was read and its foreign keys. A
    database file is read in a worker process under ``limits`` and the bounds above (:class:`SourceWorker`)."""
    data, limits = Path(data), limits or Limits()
    out.mkdir(parents=True, exist_ok=True)
    if data.is_dir():
        source = Source("folder", data.name, {})
        _from_folder(data, out, source)
    elif data.is_file():
        with open(data, "rb") as handle:
            head = handle.read(16)
        if head.startswith(b"SQLite format 3\x00"):
            source = Source("sqlite", data.name, {data.name: sha256_file(data)})
            _from_sqlite(data, out, source, limits)
        elif head[8:12] == b"DUCK":
            source = Source("duckdb", data.name, {data.name: sha256_file(data)})
            _from_duckdb(data, out, source, limits)
        else:
            raise EvalpackError(f"{data}: not a DuckDB or SQLite database file; --data takes one of those, or a "
                                "folder of .parquet/.csv tables")
    else:
        raise EvalpackError(f"{data}: not found; --data takes a DuckDB or SQLite file, or a folder of tables")
    if not source.tables:
        raise EvalpackError(f"{data}: holds no table to import")
    return source


# --------------------------------------------------------------------------- classification


@dataclass(frozen=True)
class Classified:
    record: dict  # the questions.jsonl record
    group: str | None  # with_query | answer_only | query_only, for provisional records
    next_step: str  # why this status, and what would make it scorable
    checks: dict | None = None  # the golden checks of its gold query (certificate), None when it did not run
    run: Run | None = None  # what its gold query returned, None without a query


def _problems(g: Golden, run: Run) -> list[str]:
    out = []
    if g.empty:
        out.append(f"it returns {empty_text(run.rows)} (mark it expected_empty if that is the answer)")
    if g.orphans is not None:
        out.append(f"without orphan rows it returns {shown(g.orphans.without_orphans.recorded())} "
                   f"({g.orphans.because()})")
    if g.tie is not None:
        out.append(f"a tie at LIMIT {g.tie.limit} makes it depend on row order" if g.tie.error is None else
                   f"its ORDER BY ... LIMIT {g.tie.limit} cannot be checked for a tie ({g.tie.error})")
    return out


def classify(con: duckdb.DuckDBPyConnection, case: Case, links: tuple[LinkCount, ...],
             runner: Runner = run_query) -> Classified:
    """Run what arrived with ``case`` on the pack's tables and decide its status."""
    record = {
        "id": case.id, "question": case.question, "gold_sql": case.gold_sql, "expected_answer": case.expected,
        "answer_type": case.answer_type, "round_decimals": case.round_decimals, "kind": "imported", "split": "dev",
        "question_sha256": hashlib.sha256(case.question.encode("utf-8")).hexdigest(), "tags": case.tags,
        "status": "provisional", "verified_by": None, "authored_answer": case.raw_answer, "observed_answer": None,
        "error": case.answer_error, "source_line": case.line, "check_sql": case.check_sql, "check_answer": None,
        "criteria": case.criteria, "expected_empty": case.expected_empty, "about_orphans": case.about_orphans,
        "failed_checks": [], "source_fields": case.source_fields,
    }
    answered = case.raw_answer is not None
    if case.gold_sql is None:
        if answered:
            return Classified(record, "answer_only", f"a number alone ({shown(case.raw_answer)}): add the gold query "
                              "that returns it, and a check_sql")
        record["status"] = "criteria" if case.criteria is not None else "no_golden"
        note = ("prose criteria: kept, not scored by verify.py" if case.criteria is not None else
                "nothing to compare against: kept, it measures coverage")
        return Classified(record, None, note)
    run = runner(con, case.gold_sql)
    errors = [e for e in (case.answer_error, run.error and f"the query fails: {run.error}") if e]
    record["error"] = "; ".join(errors) or None
    record["observed_answer"] = None if run.error else run.recorded()
    check = runner(con, case.check_sql) if case.check_sql else None
    record["check_answer"] = check.recorded() if check else None
    if run.error:
        step = f"{record['error']}: fix it to read the pack's tables" + ("" if answered else ", add the answer")
        return Classified(record, "with_query" if answered else "query_only", step, run=run)
    g = golden(con, record, run, links, runner)
    record["failed_checks"] = g.failed()
    problems = _problems(g, run)
    matches = None if case.expected is None else matches_answer(record, case.expected, run.rows)
    checks = {MATCHES: matches, **g.checks()}
    observed_text = run.describe()
    if not answered:
        step = (f"its query returns {observed_text}; nothing to compare it with yet: add the expected answer, derived "
                "independently of the query, and a check_sql")
        return Classified(record, "query_only", "; ".join([step] + problems), checks, run)
    if case.answer_error:
        return Classified(record, "with_query", f"{case.answer_error}; its query returns {observed_text}", checks, run)
    if not matches:
        diff = first_difference(answer_type_of(record), record["round_decimals"], case.expected, run.rows,
                                in_order(record["answer_type"], case.gold_sql))
        step = f"its query returns {observed_text}, the authored answer is {shown(case.raw_answer)}"
        if diff is not None and diff.type_only:
            step += (f"; {diff.text}: the values read the same and differ in type only: write the answer with "
                     "the type the query returns")
        else:
            step += f"{'; ' + diff.text if diff else ''}: decide which is right and correct the other"
        return Classified(record, "with_query", "; ".join([step] + problems), checks, run)
    record["verified_by"] = "authored_query"
    check_ok = check is not None and check.error is None and matches_answer(record, case.expected, check.rows)
    if check_ok and not problems:
        record["status"], record["verified_by"] = "scorable", "authored_query+check_sql"
        return Classified(record, None, "its query and its check_sql both return the authored answer; the golden "
                                        "checks pass", checks, run)
    if check is None:
        advice = "add check_sql (a second query, written independently, that returns the same answer)"
    elif check.error:
        advice = f"its check_sql fails ({check.error})"
    elif not check_ok:
        advice = f"its check_sql returns {check.describe()}, not {shown(case.raw_answer)}"
    else:
        advice = None
    parts = [f"its query returns the authored answer {shown(case.raw_answer)}", *problems]
    parts += [advice] if advice else []
    return Classified(record, "with_query", "; ".join(parts), checks, run)


def assign_splits(records: list[dict], file_sha256: str, holdout: float) -> None:
    """Freeze ``round(holdout * n)`` records into ``holdout``, ranked by SHA-256 of file hash, question hash and id."""
    count = int(Decimal(str(holdout * len(records))).to_integral_value(ROUND_HALF_EVEN))
    ranked = sorted(records, key=lambda r: hashlib.sha256(
        f"{file_sha256}:{r['question_sha256']}:{r['id']}".encode()).hexdigest())
    held = {r["id"] for r in ranked[:count]}
    for r in records:
        r["split"] = "holdout" if r["id"] in held else "dev"


# --------------------------------------------------------------------------- the report


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def summary_line(received: Received, classified: list[Classified], unparsed: list[Unparsed]) -> str:
    """``47 cases from 50 lines: 12 scorable now; 29 provisional (21 with their query, ...); 6 no golden; ...``"""
    status = Counter(c.record["status"] for c in classified)
    groups = Counter(c.group for c in classified if c.record["status"] == "provisional")
    unit = received.unit[:-1]
    text = f"{_plural(len(classified), 'case')} from {_plural(received.count, unit)}: {status['scorable']} scorable now"
    text += f"; {status['provisional']} provisional"
    detail = [f"{groups[g]} {label}" for g, label in GROUPS.items() if groups[g]]
    if detail:
        text += f" ({', '.join(detail)})"
    if status["criteria"]:
        text += f"; {status['criteria']} criteria"
    text += f"; {status['no_golden']} no golden"
    if unparsed:
        lines = ", ".join(str(u.line) for u in unparsed)
        text += (f"; {_plural(len(unparsed), unit)} did not parse "
                 f"({'line' if len(unparsed) == 1 else 'lines'} {lines})")
    return text


def link_lines(relationships: list[dict]) -> list[str]:
    """The links the orphan check follows, each with where it comes from and its orphan rows."""
    if not relationships:
        return []
    sources = Counter(e.get("source") for e in relationships)
    parts = [f"{sources['declared']} declared with --link" if sources["declared"] else "",
             f"{sources['foreign_key']} from the database's foreign keys" if sources["foreign_key"] else "",
             f"{sources['inferred']} inferred" if sources["inferred"] else ""]
    head = f"links the orphan check follows ({', '.join(p for p in parts if p)}):"
    return [head] + [f"  {describe_link(e)}" for e in relationships]


def report_lines(received: Received, classified: list[Classified], unparsed: list[Unparsed],
                 limit: int = 50, relationships: list[dict] | None = None) -> list[str]:
    """What a user reads after an import: the summary, what did not parse, the links the orphan check
    follows, and what makes provisional scorable."""
    out = [summary_line(received, classified, unparsed)]
    if unparsed:
        out.append("did not parse (not in the pack; fix them in the file and import again):")
        out += [f"  line {u.line}: {u.error}" for u in unparsed]
    out += link_lines(relationships or [])
    provisional = [c for c in classified if c.record["status"] == "provisional"]
    if provisional:
        out.append("what turns provisional into scorable: the gold query returns the expected answer, a second "
                   "derivation agrees (check_sql: a query written independently that returns the same answer), and "
                   "the golden checks pass (a non-empty result, no dependence on orphan rows, no tie at LIMIT); "
                   "then import again:")
        for c in provisional[:limit]:
            out.append(f"  {c.record['id']} (line {c.record['source_line']}, {GROUPS[c.group]}): {c.next_step}")
        if len(provisional) > limit:
            out.append(f"  ... and {len(provisional) - limit} more: manifest.json -> classification")
    return out


# --------------------------------------------------------------------------- the pack


HELD_OUT_STEP = "a holdout question: what its query returned and what would make it scorable are in the answer key"
HELD_OUT_FILE = ("the file holds the holdout's answers: it is in the holdout answer key (PACK.holdout-key), byte for "
                 "byte; its SHA-256 is above")


@dataclass(frozen=True)
class ImportResult:
    path: Path
    records: list[dict]
    unparsed: list[Unparsed]
    report: list[str]
    manifest: dict


class ImportRefused(EvalpackError):
    """The pack would not pass its own ``evalpack verify``: it is not written (exit 1). ``report`` is the
    import's report, ``reasons`` one line per problem."""

    def __init__(self, message: str, report: list[str], reasons: list[str]) -> None:
        super().__init__(message, exit_code=1)
        self.report = report
        self.reasons = reasons


def refusal_reasons(classified: list[Classified], failures: tuple[str, ...] | list[str]) -> list[str]:
    """Why ``evalpack verify`` rejects the pack: for each question whose gold SQL verify reruns (a query and
    an answer) and that does not return its answer, what the import saw (with the first differing cell),
    and every other failure verify reported, as it reported it."""
    reasons, explained = [], set()
    for c in classified:
        r = c.record
        prefix = f"FAIL {QUESTIONS}: {r['id']} "
        if not scorable(r) or not any(f.startswith(prefix) for f in failures):
            continue
        explained.add(prefix)
        failed = c.run is not None and c.run.error is not None
        reasons.append(f"{r['id']} (line {r['source_line']}): {c.next_step} "
                       + ("(or leave the answer without its query)" if failed else "(or leave out the query or the "
                          "answer until both agree)"))
    reasons += [f"evalpack verify: {f}" for f in failures if not any(f.startswith(p) for p in explained)]
    return reasons


def _pack_name(out: Path) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", out.name.lower()).strip("_")
    return name if re.match(r"[a-z]", name) else f"pack_{name}"


def certificate(classified: list[Classified], held: Collection[str] = ()) -> dict:
    """The import's verification run: per question with a gold query, what it returned and its checks; of a ``held``
    (holdout) question only whether it matched and its checks: what it returned is in the answer key."""
    scored = [c for c in classified if c.run is not None]
    scorable = [c for c in classified if c.record["status"] == "scorable"]
    return {
        "duckdb_version": duckdb.__version__,
        "comparison": COMPARISON_RULE,
        "rotations": [ROTATION],
        "golden_checks": IMPORT_MEANINGS,
        "questions": [
            {"id": c.record["id"], "status": c.record["status"],
             "results": {ROTATION: {**({} if c.record["id"] in held else {
                 "observed": c.run.value if c.run.error is None else None, "error": c.run.error}),
                 "match": bool(c.checks and c.checks[MATCHES]), "checks": c.checks}}}
            for c in scored
        ],
        "scorable": len(scorable),
        "all_match": bool(scorable) and all(c.checks and c.checks[MATCHES] for c in scorable),
    }


LINK_RE = re.compile(r"\s*([^.\s=>-]+)\.([^.\s=>-]+)\s*(?:=|->)\s*([^.\s=>-]+)\.([^.\s=>-]+)\s*")


def parse_link(text: str) -> Link:
    """A ``--link`` of ``evalpack import``: ``child_table.column=parent_table.column`` (or ``->``)."""
    match = LINK_RE.fullmatch(text)
    if not match:
        raise EvalpackError(f"--link {printable(text)}: write it as child_table.column=parent_table.column, e.g. "
                            "--link orders.customer_id=customers.customer_id")
    link = Link(*match.groups())
    if link.child_table == link.parent_table:
        raise EvalpackError(f"--link {printable(text)}: links a table to itself; a link joins a child table's column "
                            "to another table's key")
    return link


def check_links(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> None:
    """Refuse a declared link whose table or column the database lacks, naming the ones it has."""
    columns: dict[str, list[str]] = {}
    for table, column in con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                     "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
        columns.setdefault(table, []).append(column)
    for link in links:
        for table, column in ((link.child_table, link.child_column), (link.parent_table, link.parent_column)):
            shown = f"--link {link.child_table}.{link.child_column}={link.parent_table}.{link.parent_column}"
            if table not in columns:
                raise EvalpackError(f"{shown}: the database has no table {printable(table)}; its tables are "
                                    f"{', '.join(sorted(columns))}")
            if column not in columns[table]:
                raise EvalpackError(f"{shown}: {printable(table)} has no column {printable(column)}; its columns are "
                                    f"{', '.join(columns[table])}")


def import_pack(questions: str | Path, *, data: str | Path, output: str | Path, force: bool = False,
                holdout: float = 0.0, signing_key: str | Path | None = None,
                links: tuple[str, ...] = (), limits: Limits | None = None) -> ImportResult:
    """Make the pack ``output`` from the questions file and the database ``data``; ``links`` are declared links
    (:func:`parse_link`), followed before the database's foreign keys and inference. A database file and the
    questions' SQL are run in worker processes under ``limits`` (the scorer's by default). Raises EvalpackError
    (exit 2) on bad input, and ImportRefused (exit 1) when ``evalpack verify`` would reject the pack: nothing is
    written."""
    from evalpack.pack.attest import attest, now_utc, verify_pack

    started = now_utc()
    questions, output = Path(questions), Path(output)
    limits = (limits or Limits()).checked()
    if not 0.0 <= holdout <= 1.0:
        raise EvalpackError(f"--holdout {holdout}: a fraction between 0 and 1")
    declared_links = tuple(parse_link(text) for text in links)
    try:
        raw = questions.read_bytes()
    except OSError as exc:
        raise EvalpackError(f"{questions}: cannot read the questions file ({exc.strerror})") from None
    received = read_questions(str(questions), raw)
    cases, unparsed = parse_cases(received)
    if not cases:
        first = f" (line {unparsed[0].line}: {unparsed[0].error})" if unparsed else ""
        raise EvalpackError(f"{questions}: no question could be read from {_plural(received.count, received.unit[:-1])}"
                            f"{first}")
    file_sha = hashlib.sha256(raw).hexdigest()
    staging = staging_dir(output, force)
    try:
        tables_dir = PackLayout(staging).tables(ROTATION)
        source = write_source(data, tables_dir, limits)
        # the questions' SQL comes from outside: it runs like a candidate's, in a sandbox worker process;
        # this connection runs only the link counts evalpack writes. Links: --link first, the database's own
        # foreign keys on the columns those leave, then inference for the rest (audit.infer_links)
        with rotation_connection(tables_dir) as con, SandboxWorker(tables_dir, limits) as worker:
            check_links(con, declared_links)
            given = {(lk.child_table, lk.child_column) for lk in declared_links}
            declared = counted(con, [(lk, "declared") for lk in declared_links] + [
                (lk, "foreign_key") for lk in source.foreign_keys if (lk.child_table, lk.child_column) not in given])
            inferred = infer_links(con, tuple(lc.link for lc in declared))
            links = declared + counted(con, [(link_of(e), "inferred") for e in inferred])
            classified = [classify(con, case, links, worker_runner(worker, limits.timeout)) for case in cases]
        check_machine_paths(questions, classified, machine_paths(Path(data)))
        records = [c.record for c in classified]
        assign_splits(records, file_sha, holdout)
        # a holdout question's answer stays out of the pack: its record is sealed, its next step (which names what
        # its query returned) and the file as received (which holds every answer) go to the answer key beside it
        held = {r["id"] for r in records if r["split"] == "holdout"}
        sealed = seal_received(records, raw,
                               {c.record["id"]: c.next_step for c in classified if c.record["id"] in held})
        shown = [replace(c, next_step=HELD_OUT_STEP) if c.record["id"] in held else c for c in classified]
        relationships = [{**lc.to_dict(), "inferred": False} for lc in declared] + inferred
        report = report_lines(received, shown, unparsed, relationships=relationships)
        manifest = _manifest(_pack_name(output), questions.name, received, file_sha, len(raw), source, holdout,
                             relationships, shown, unparsed, report, received_in_pack=not held)
        if not held:
            (staging / RECEIVED).mkdir()
            (staging / RECEIVED / questions.name).write_bytes(raw)
        assemble_pack(staging, list(sealed.public), certificate(classified, held), manifest)
        write_received_key(staging, _pack_name(output), questions.name, raw, sealed)
        external = {"import": {"questions": {"name": questions.name, "sha256": file_sha},
                               "data": {"kind": source.kind, "name": source.name, "sha256": source.digests}},
                    "seeds": [0], "rotations": 1, "answers": "shared", "holdout": holdout}
        deps = [{"name": questions.name, "digest": {"sha256": file_sha}}] + [
            {"name": name, "digest": {"sha256": digest}} for name, digest in source.digests.items()]
        attest(staging, external_parameters=external, resolved_dependencies=deps, started=started,
               finished=now_utc(), signing_key=signing_key)
        # import verifies what it writes: a pack its own `evalpack verify` rejects is not written
        verdict = verify_pack(staging)
        if not verdict.ok:
            reasons = refusal_reasons(classified, verdict.failures)
            raise ImportRefused(
                f"{questions}: not imported: `evalpack verify` would reject this pack "
                f"({_plural(len(reasons), 'problem')}), so nothing was written to {output} and {questions.name} "
                "is left as it was; correct these in the file and import again:\n"
                + "\n".join(f"  {line}" for line in reasons), report, reasons)
        publish_dir(staging, output)
    except BaseException:
        discard(staging)
        raise
    return ImportResult(output, list(sealed.public), unparsed, report, manifest)


def check_machine_paths(questions: Path, classified: list[Classified], needles: tuple[bytes, ...]) -> None:
    """Refuse a question whose SQL returned (or failed with) a path of this machine (:func:`machine_paths`) or the
    name of a scratch folder (:data:`SCRATCH_NAMES`: the scorer's sandbox loads the pack's tables into
    ``<temp folder>/evalpack-sandbox-<pid>-<random>/memory.duckdb``, which its ``duckdb_databases()`` and
    ``allowed_paths`` show), as written or disguised (:func:`machine_path_in`): what a query returned is written into
    the pack, and a query may read only the pack's tables. A path the question's own SQL spells out (an error that
    quotes a refused ``read_text('/tmp/...')``) is not counted: that SQL ships in the pack as the author wrote it."""
    for c in classified:
        r = c.record
        seen = json.dumps([r["observed_answer"], r["check_answer"], r["error"]], default=str).encode()
        written = "\n".join(str(r.get(key) or "") for key in ("gold_sql", "check_sql")).encode()
        needle = machine_path_in(seen, [n for n in needles if n not in written],
                                 [n for n in SCRATCH_NAMES if n not in written])
        if needle is not None:
            raise EvalpackError(
                f"{questions}: line {r['source_line']}: question {printable(r['id'])}: what its SQL returned holds "
                f"a path of this machine ({printable(needle.decode(errors='replace'))}); a query may read only "
                "the pack's tables, not the settings or files of the machine that imports it: fix it and import "
                "again")


# what each golden check (evalpack.checks.golden.CHECKS, in that order) means for an imported question
IMPORT_MEANINGS = dict(zip(CHECKS, (
    "the gold SQL returns exactly the authored answer (null: no usable answer arrived)",
    "the result is not empty and not NULL, unless the question is marked expected_empty",
    "rewritten to exclude child rows whose parent is missing, the gold SQL returns the same answer (null: the "
    "question is marked about_orphans, or reads no child table with orphan rows)",
    "no tie at an ORDER BY ... LIMIT boundary (null: no ORDER BY ... LIMIT)",
), strict=True))


def _manifest(name: str, file_name: str, received: Received, file_sha: str, size: int, source: Source,
              holdout: float, relationships: list[dict], classified: list[Classified], unparsed: list[Unparsed],
              report: list[str], received_in_pack: bool = True) -> dict:
    records = [c.record for c in classified]
    status = Counter(r["status"] for r in records)
    groups = Counter(c.group for c in classified if c.record["status"] == "provisional")
    return {
        "pack": name,
        "version": "0.1.0",
        "description": f"Questions imported from {file_name} over {source.name}",
        "tool": {"name": "evalpack", "version": __version__, "duckdb": duckdb.__version__, "pyarrow": pa.__version__},
        "seeds": [0],
        "rotations": [ROTATION],
        "answers": "shared",
        "holdout": holdout,
        "source": {
            "questions": {"file": file_name, "as_received": f"{RECEIVED}/{file_name}" if received_in_pack else None,
                          **({} if received_in_pack else {"withheld": HELD_OUT_FILE}),
                          "sha256": file_sha, "bytes": size, "format": received.format, received.unit: received.count},
            "data": {"kind": source.kind, "name": source.name, "sha256": source.digests},
        },
        "hashes": {**HASHES,
                   "as_received_sha256": "SHA-256 (hex) of the questions file's bytes exactly as received",
                   "split": "the round(holdout * n) questions with the smallest SHA-256 of "
                            "'<as_received_sha256>:<question_sha256>:<id>' are frozen into holdout"},
        "tables": {t: {"columns": v["columns"], "rows": v["rows"], "from": v["from"]}
                   for t, v in source.tables.items()},
        "relationships": relationships,
        "questions": {
            "cases": len(records),
            "shipped": len(records),  # an import drops nothing: every case is in questions.jsonl
            "by_status": {s: status[s] for s in STATUSES},
            "provisional": {g: groups[g] for g in GROUPS},
            "by_split": dict(sorted(Counter(r["split"] for r in records).items())),
        },
        "classification": [
            {"id": c.record["id"], "source_line": c.record["source_line"], "status": c.record["status"],
             "group": c.group, "verified_by": c.record["verified_by"], "failed_checks": c.record["failed_checks"],
             "next_step": c.next_step}
            for c in classified
        ],
        "unparsed": [{"line": u.line, "error": u.error} for u in unparsed],
        "dropped": [],
        "warnings": source.warnings,
        "report": report,
        "near_miss_study": None,
    }


def import_command(questions: str | Path, *, data: str | Path, output: str | Path, force: bool = False,
                   holdout: float = 0.0, signing_key: str | Path | None = None, links: tuple[str, ...] = (),
                   limits: Limits | None = None) -> int:
    """``evalpack import``: make the pack and print the report. 0 on success; 2 (EvalpackError) on bad input; 1
    (ImportRefused, after the report is printed) when the pack would not pass ``evalpack verify``."""
    try:
        result = import_pack(questions, data=data, output=output, force=force, holdout=holdout,
                             signing_key=signing_key, links=links, limits=limits)
    except ImportRefused as exc:
        print(f"not imported: {Path(questions).name} with {Path(data).name}")
        for line in exc.report:
            print(line)
        raise
    tables = result.manifest["tables"]
    print(f"imported {Path(questions).name} with {Path(data).name} ({len(tables)} tables) into {result.path}")
    for line in result.report:
        print(line)
    for warning in result.manifest["warnings"]:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [SOURCE_WORKER_FLAG]:
        sys.exit(worker_main(sys.argv[2:], open_source_worker))
    sys.exit("usage: python -m evalpack.interop.importer --source-worker PARENT_PID (started by evalpack import)")
