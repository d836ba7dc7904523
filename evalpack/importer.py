"""Import questions that arrive from outside, plus the database they are about, as a pack.

``evalpack import QUESTIONS --data DB -o PACK [--force] [--holdout F] [--signing-key K]``

QUESTIONS is JSON Lines, a JSON array (or an object with a ``questions`` array), or CSV/TSV with a
header. DB is a DuckDB file (attached read-only), a SQLite file (read with Python's ``sqlite3``:
DuckDB's sqlite extension is not installed offline, and one reader keeps packs reproducible), or a
folder of Parquet/CSV tables, one table per file. The pack has the layout of a built pack with one
rotation, ``rotations/seed_0`` (one database, no generator seed: 0 marks "as received"):

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

Answers keep their types (:func:`evalpack.golden.typed`): in a result-set answer a number stays a
JSON number (``532348211.65``, ``0.0``; never its text), an integer an integer, null null, text text;
what a query returned is recorded the same way, a date or timestamp as its ISO text. The comparison is
the scorer's (:func:`evalpack.scoring.answer_matches`), and a disagreement is reported at its first
differing cell, both values with their types (:func:`evalpack.golden.first_difference`).

Import verifies what it writes: the pack is assembled and attested in a staging folder and checked by
``evalpack verify`` (:func:`evalpack.attest.verify_pack`); a pack it rejects (a query and an answer that
disagree, a query that fails) is not written: :class:`ImportRefused` (exit 1) names each problem, and
nothing at ``-o`` changes.

Links for the orphan check: those declared with ``--link`` first, then the database's own foreign keys (DuckDB,
SQLite) for the columns they leave, then links inferred
by :func:`evalpack.audit.infer_links` (a name that names another table's unique key, the same type,
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

import csv
import hashlib
import io
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evalpack import __version__
from evalpack.audit import (
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
from evalpack.build import assemble_pack, discard, publish_dir, staging_dir
from evalpack.certify import HASHES
from evalpack.errors import EvalpackError
from evalpack.golden import Runner, empty_text, first_difference, in_order, shown, typed
from evalpack.holdout import seal_received, write_received_key
from evalpack.layout import QUESTIONS, PackLayout, rotation_name
from evalpack.scoring import (
    COMPARISON_RULE,
    ROWS_TYPE,
    SCALAR_TYPES,
    SIGNIFICANT_DIGITS,
    Limits,
    SandboxWorker,
    answer_type_of,
    printable,
    quote_ident,
    scorable,
    sha256_file,
)
from evalpack.verify import Link, rotation_connection

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


def read_jsonl(data: bytes) -> Received:
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
    if _skip_ws(text, end) < len(text):
        return read_jsonl(data)  # one JSON value per line, named .json
    if isinstance(document, dict) and isinstance(document.get("questions"), list):
        elements = _array_elements(text, _member_position(text, start, "questions", decoder), decoder)
    elif isinstance(document, list):
        elements = _array_elements(text, start, decoder)
    else:
        raise EvalpackError(f"{name}: expected a JSON array of question objects or an object with a `questions` "
                            f"array, found a {type(document).__name__}")
    items, bad = [], []
    for value, pos in elements:
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
        return read_jsonl(data)
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
        return read_jsonl(data)
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
    cell keeps its type (:func:`evalpack.golden.typed`): a number stays a number (``532348211.65``, ``0.0``),
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


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _safe_table_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def _write(con: duckdb.DuckDBPyConnection, select: str, name: str, out: Path, source: Source, origin: str) -> None:
    """Write one table as Parquet and CSV and record its columns and rows."""
    parquet, csv_path = out / f"{name}.parquet", out / f"{name}.csv"
    con.execute(f"COPY ({select}) TO {_literal(str(parquet))} (FORMAT parquet, COMPRESSION zstd)").fetchall()
    con.execute(f"COPY (SELECT * FROM read_parquet({_literal(str(parquet))})) TO {_literal(str(csv_path))} "
                "(FORMAT csv, HEADER true)").fetchall()
    columns = {c: t for c, t, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet({_literal(str(parquet))})")
               .fetchall()}
    rows = con.execute(f"SELECT COUNT(*) FROM read_parquet({_literal(str(parquet))})").fetchall()[0][0]
    source.tables[name] = {"columns": columns, "rows": {ROTATION: int(rows)}, "from": origin}


def _from_duckdb(path: Path, out: Path, source: Source) -> None:
    """Every table and view of the main schema of the DuckDB file at ``path``. The file comes from outside: its views
    (and generated columns) are SQL that runs when read, so it is read on a connection that can reach no file, network
    or extension once the file is attached (:data:`LOCKED_DOWN`); the rows go to the pack's files through another."""
    con, writer = duckdb.connect(":memory:"), duckdb.connect(":memory:")
    try:
        try:
            con.execute(f"ATTACH {_literal(str(path))} AS src (READ_ONLY)")
        except duckdb.Error as exc:
            raise EvalpackError(f"{path}: cannot open the DuckDB database read-only ({exc})") from None
        for setting in LOCKED_DOWN:
            con.execute(f"SET {setting}")
        found = con.execute(
            "SELECT schema_name, table_name, 'table' FROM duckdb_tables() WHERE database_name = 'src' UNION ALL "
            "SELECT schema_name, view_name, 'view' FROM duckdb_views() WHERE database_name = 'src' AND NOT internal "
            "ORDER BY 1, 2").fetchall()
        for schema, table, kind in found:
            if schema != "main" or not _safe_table_name(table):
                source.warnings.append(f"{path.name}: {schema}.{table} not imported (only tables of the main schema "
                                       "with plain names become pack tables)")
                continue
            select = f"SELECT * FROM src.main.{quote_ident(table)}"
            try:
                declared = {name: kind_ for name, kind_, *_ in con.execute(f"DESCRIBE {select}").fetchall()}
                writer.register("__import_rows", con.sql(select).to_arrow_reader(IMPORT_BATCH_ROWS))
                _write(writer, _as_declared(writer, declared), table, out, source, kind)
            except duckdb.Error as exc:
                raise EvalpackError(f"{path}: cannot read {kind} {table} ({str(exc).splitlines()[0]}); a view may "
                                    "read only the database's own tables") from None
            finally:
                writer.unregister("__import_rows")
        for table, cols, parent, pcols in con.execute(
                "SELECT table_name, constraint_column_names, referenced_table, referenced_column_names "
                "FROM duckdb_constraints() WHERE database_name = 'src' AND schema_name = 'main' "
                "AND constraint_type = 'FOREIGN KEY' ORDER BY table_name, constraint_index").fetchall():
            _add_foreign_key(source, table, list(cols), parent, list(pcols))
    finally:
        con.close()
        writer.close()


# what the connection reading a DuckDB file from outside may not do once the file is attached
LOCKED_DOWN = ("autoinstall_known_extensions = false", "autoload_known_extensions = false",
               "allow_community_extensions = false", "enable_external_access = false", "lock_configuration = true")
IMPORT_BATCH_ROWS = 1 << 16
# the types Arrow carries as others (HUGEINT as DECIMAL(38,0), UUID as text): cast back, so the files hold what a
# direct copy of the table would
_CAST_BACK = ("HUGEINT", "UHUGEINT", "UUID")


def _as_declared(writer: duckdb.DuckDBPyConnection, declared: dict[str, str]) -> str:
    """A SELECT of the rows registered as ``__import_rows`` with each column of a type in :data:`_CAST_BACK` cast back
    to the type ``declared`` in the source."""
    arrived = {name: kind for name, kind, *_ in writer.execute("DESCRIBE SELECT * FROM __import_rows").fetchall()}
    columns = [f"CAST({quote_ident(name)} AS {declared[name]}) AS {quote_ident(name)}"
               if declared.get(name) in _CAST_BACK and kind != declared[name] else quote_ident(name)
               for name, kind in arrived.items()]
    return f"SELECT {', '.join(columns)} FROM __import_rows"


def _add_foreign_key(source: Source, table: str, cols: list[str], parent: str, pcols: list[str]) -> None:
    if len(cols) == 1 and len(pcols) == 1:
        source.foreign_keys.append(Link(table, cols[0], parent, pcols[0]))
    else:
        source.warnings.append(f"foreign key {table}({', '.join(cols)}) -> {parent}({', '.join(pcols)}) has "
                               f"{len(cols)} columns; the orphan audit follows single-column keys only")


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


def _from_sqlite(path: Path, out: Path, source: Source) -> None:
    try:
        sq = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise EvalpackError(f"{path}: cannot open the SQLite database read-only ({exc})") from None
    con = duckdb.connect(":memory:")
    try:
        found = sq.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                           "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name").fetchall()
        for table, kind in found:
            if not _safe_table_name(table):
                source.warnings.append(f"{path.name}: table {table!r} not imported (its name cannot be a file name)")
                continue
            try:
                declared = {r[1]: r[2] for r in sq.execute(f"PRAGMA table_info({quote_ident(table)})").fetchall()}
                cur = sq.execute(f"SELECT * FROM {quote_ident(table)}")
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
            except sqlite3.Error as exc:
                raise EvalpackError(f"{path}: cannot read table {table} ({exc})") from None
            arrays = []
            for i, name in enumerate(names):
                array, note = _sqlite_array([r[i] for r in rows], declared.get(name, ""))
                arrays.append(array)
                if note:
                    source.warnings.append(f"{path.name}: {table}.{name} {note}")
            con.register("__import_table", pa.table(arrays, names=names))
            _write(con, "SELECT * FROM __import_table", table, out, source, kind)
            con.unregister("__import_table")
            keys: dict[int, list] = {}
            for fk in sq.execute(f"PRAGMA foreign_key_list({quote_ident(table)})").fetchall():
                keys.setdefault(fk[0], []).append(fk)
            for fk_rows in keys.values():
                parent = fk_rows[0][2]
                cols = [r[3] for r in fk_rows]
                pcols = [r[4] for r in fk_rows]
                if any(p is None for p in pcols):  # REFERENCES parent: the parent's primary key
                    pk = sq.execute(f"PRAGMA table_info({quote_ident(parent)})").fetchall()
                    pcols = [r[1] for r in sorted(pk, key=lambda r: r[5]) if r[5]]
                _add_foreign_key(source, table, cols, parent, pcols)
    finally:
        sq.close()
        con.close()


def _from_folder(path: Path, out: Path, source: Source) -> None:
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
                _write(con, f"SELECT * FROM {reader}({_literal(str(file))}{options})", name, out, source, file.name)
            except duckdb.Error as exc:
                raise EvalpackError(f"{file}: cannot read the table ({str(exc).splitlines()[0]})") from None
            source.digests[file.name] = sha256_file(file)
    finally:
        con.close()


def write_source(data: str | Path, out: Path) -> Source:
    """Write every table of ``data`` into ``out`` (Parquet + CSV); returns what was read and its foreign keys."""
    data = Path(data)
    out.mkdir(parents=True, exist_ok=True)
    if data.is_dir():
        source = Source("folder", data.name, {})
        _from_folder(data, out, source)
    elif data.is_file():
        with open(data, "rb") as handle:
            head = handle.read(16)
        if head.startswith(b"SQLite format 3\x00"):
            source = Source("sqlite", data.name, {data.name: sha256_file(data)})
            _from_sqlite(data, out, source)
        elif head[8:12] == b"DUCK":
            source = Source("duckdb", data.name, {data.name: sha256_file(data)})
            _from_duckdb(data, out, source)
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
    checks = {"matches": matches, **g.checks()}
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
        "golden_checks": {
            "matches": "the gold SQL returns exactly the authored answer (null: no usable answer arrived)",
            "non_empty": "the result is not empty and not NULL, unless the question is marked expected_empty",
            "orphan_independent": "rewritten to exclude child rows whose parent is missing, the gold SQL returns "
                                  "the same answer (null: the question is marked about_orphans, or reads no "
                                  "child table with orphan rows)",
            "deterministic": "no tie at an ORDER BY ... LIMIT boundary (null: no ORDER BY ... LIMIT)",
        },
        "questions": [
            {"id": c.record["id"], "status": c.record["status"],
             "results": {ROTATION: {**({} if c.record["id"] in held else {
                 "observed": c.run.value if c.run.error is None else None, "error": c.run.error}),
                 "match": bool(c.checks and c.checks["matches"]), "checks": c.checks}}}
            for c in scored
        ],
        "scorable": len(scorable),
        "all_match": bool(scorable) and all(c.checks and c.checks["matches"] for c in scorable),
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
                links: tuple[str, ...] = ()) -> ImportResult:
    """Make the pack ``output`` from the questions file and the database ``data``; ``links`` are declared links
    (:func:`parse_link`), followed before the database's foreign keys and inference. Raises EvalpackError (exit 2)
    on bad input, and ImportRefused (exit 1) when ``evalpack verify`` would reject the pack: nothing is written."""
    from evalpack.attest import attest, now_utc, verify_pack

    started = now_utc()
    questions, output = Path(questions), Path(output)
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
        source = write_source(data, tables_dir)
        # the questions' SQL comes from outside: it runs like a candidate's, in a sandbox worker process;
        # this connection runs only the link counts evalpack writes. Links: --link first, the database's own
        # foreign keys on the columns those leave, then inference for the rest (audit.infer_links)
        with rotation_connection(tables_dir) as con, SandboxWorker(tables_dir, Limits()) as worker:
            check_links(con, declared_links)
            given = {(lk.child_table, lk.child_column) for lk in declared_links}
            declared = counted(con, [(lk, "declared") for lk in declared_links] + [
                (lk, "foreign_key") for lk in source.foreign_keys if (lk.child_table, lk.child_column) not in given])
            inferred = infer_links(con, tuple(lc.link for lc in declared))
            links = declared + counted(con, [(link_of(e), "inferred") for e in inferred])
            classified = [classify(con, case, links, worker_runner(worker)) for case in cases]
        records = [c.record for c in classified]
        assign_splits(records, file_sha, holdout)
        # a holdout question's answer stays out of the pack: its record is sealed, its next step (which names what
        # its query returned) and the file as received (which holds every answer) go to the answer key beside it
        held = {r["id"] for r in records if r["split"] == "holdout"}
        sealed = seal_received(records, raw, {c.record["id"]: c.next_step for c in classified if c.record["id"] in held})
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
                   holdout: float = 0.0, signing_key: str | Path | None = None, links: tuple[str, ...] = ()) -> int:
    """``evalpack import``: make the pack and print the report. 0 on success; 2 (EvalpackError) on bad input; 1
    (ImportRefused, after the report is printed) when the pack would not pass ``evalpack verify``."""
    try:
        result = import_pack(questions, data=data, output=output, force=force, holdout=holdout,
                             signing_key=signing_key, links=links)
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
