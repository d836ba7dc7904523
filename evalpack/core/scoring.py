"""Score SQL against a pack: gold SQL (``python verify.py``) and candidate SQL (``--candidates``).

This module holds only what ``verify.py`` needs: the engine may import from it but never adds to
it (an edit here changes the attested bytes of every pack). It uses only the standard library and
``duckdb`` (``cryptography`` is imported only to check a signature when a public key is given). It
is copied byte for byte into every pack as ``verify.py``; ``evalpack score`` runs the same code
through :func:`score_command`, and ``evalpack verify`` and ``evalpack publish`` run the same
integrity check (:func:`inspect_integrity`).

Question records (``questions.jsonl``, one JSON object per line)
----------------------------------------------------------------
Scalar questions: ``answer_type`` is ``number``, ``integer`` or ``string`` and
``expected_answer`` is one JSON value. Result-set questions: ``answer_type`` is ``rows`` and
``expected_answer`` is a JSON list of rows, each row a JSON list of cell values in column order
(``[["web", 1200.5], ["app", 800.25]]``); dates and timestamps are written as ISO text, NULL as
``null``. With ``answers: rotated`` the expected answer is an object with one such value per
rotation folder: ``{"seed_42": ..., "seed_43": ...}``. ``round_decimals`` (optional) applies to
every number of the question. For the ``spider`` rule a result-set question is compared in
row order exactly when its ``gold_sql`` has a top-level ORDER BY (decided by DuckDB's own
parser, ``json_serialize_sql``). A missing ``answer_type`` is implied by the answer (a list:
rows, text: string, a whole number: integer, else number). Records whose ``gold_sql`` or
``expected_answer`` is null (imported packs keep criteria-only or answer-only items) are not
scored, in either mode, nor is a result-set question whose answer is only NULL (``SELECT NULL`` would
match it): reports list those apart (``null_answer``).

Comparison (COMPARISON_RULE below, written into certificate.json)
----------------------------------------------------------------
* Scalar questions, under either rule: exactly one row of one column, else wrong. Numbers are
  compared as exact decimals (a float by its shortest repr) after rounding both sides
  half-to-even at ``round_decimals`` (when it is null, a number that is not whole at 12 significant
  digits, so that floating-point noise is not a difference); an integer answer needs a
  number with no fractional part; a string answer needs equal text (a DATE/TIMESTAMP counts as
  its ISO text); booleans are not numbers; NULL never equals a value.
* Result-set questions, cell by cell: numbers as above, text exactly, booleans as booleans,
  dates and times by their ISO text, NULL equals NULL (as in Spider's and BIRD's evaluators).
  ``spider``: the same number of rows, columns matched by value (some one-to-one mapping of the
  candidate's columns onto the gold's columns), rows compared as a multiset, in order only
  when the gold has a top-level ORDER BY; two empty results are equal. ``bird``: the set of
  distinct rows must be equal, columns by position, order ignored.
  The differences from ``evaldata``'s ExecutionAccuracy are listed in tests/test_scoring_evaldata.py.

Candidates
----------
JSON Lines of ``{"id": "q001", "sql": "..."}``, a JSON list of those, or one JSON object
mapping id to SQL (a null value declines). ``{"id": "q001", "declined": true}`` or ``"sql": null``
declines explicitly; a question with no candidate is not answered: neither correct nor declined, it counts
against accuracy and coverage and is listed apart. A record may carry a
``"confidence"`` from 0 to 1 (for the risk-coverage curve). On a question with ``"answerable":
false`` declining is correct and any SQL is wrong (it is not run). A candidate is correct only when it
matches on every rotation; an error, a rejected statement or a timeout is wrong. A record that
names an id but is otherwise malformed (SQL that is not text, ``declined`` not a boolean, both) is
that question's error (wrong, with the reason). A file that is not JSON (or nested too deeply, or
with a number too long), a record without an id, an empty file or a duplicate id is refused (exit 2)
with the file and line, and so are ids the pack does not have (listed, with the pack's id where only
the case differs); ids of questions that cannot be scored are reported and not scored. Reports escape
control characters and lone surrogates. Accuracy is correct / questions and wrong-rate is wrong /
questions, overall and by ``kind``, ``difficulty``, skill and ``split``, with coverage (the questions answered
or declined / questions), decline precision and recall over explicit declines and the penalty score
(:data:`PENALTY_RULE`). The exit code is 0 when every question is correct (or, with ``--min-accuracy A``,
when accuracy is at least A), 1 otherwise, 2 on bad input or a tampered pack.

Sandbox
-------
SQL to score never runs in the scoring process. Per rotation a worker process (this file, run with
``--sandbox-worker``, or forked from ``python verify.py`` and ``evalpack score``/``verify``/``audit`` as
they start, before any thread) holds the sandbox below, under operating-system limits set before any
table loads: its address space (what the engine holds once started, plus the working memory, plus
WORKER_OVERHEAD_MB), CPU seconds per query, file writes (the loading database's, bounded by
``scratch_bytes``, then none at all: RLIMIT_FSIZE 0), 256 descriptors, no core dumps. It ends soon
after its parent (it looks every PARENT_POLL_SECONDS; Linux's per-thread parent-death signal would
kill it when the thread that started it ends), and a worker found dead is reaped and replaced
before it is sent a query.
The scorer sends one query at a time and kills the worker when no answer came within the time limit
plus KILL_GRACE; a worker that was killed or ended is replaced for the next query. Results cross
the pipe as JSON with tagged values (decimals, dates, intervals, bytes), never as pickles. SQL text
longer than MAX_SQL_CHARS or not valid Unicode is refused before any parser sees it, and
``--run-timeout`` bounds a whole run (queries not started by then are wrong, with the reason).
Per rotation a DuckDB database gets one table per Parquet file of the rotation, written under the
memory limit into a file in a private scratch folder; a Parquet file holding more rows than the
pack's manifest declares for its table is refused before it loads. The file is then opened again
READ-ONLY and unlinked: no statement of any type (``WITH x AS (DELETE ... RETURNING ...) SELECT``
parses as a SELECT) can change what a later query reads. For candidate SQL the tables are copied
before the lock, so a candidate's query reads no file of the pack. The pack's own gold SQL (gold
mode) reads the Parquet files in place through views, with file access allowed for exactly those
files (``allowed_paths``): no copy, and DuckDB skips what the query does not need. Then spilling,
extension install/load and all other file/network access are switched off
(``enable_external_access=false``), a memory limit and a thread count are set, and the
configuration is locked (``lock_configuration=true``). Each candidate must be exactly one
statement of type SELECT (DuckDB's ``extract_statements``: SELECT, WITH ... SELECT, VALUES,
FROM-first); it runs under a time limit enforced by ``interrupt()`` from a timer thread, and at
most a bounded number of rows is fetched. The state (databases and whether each is read-only,
tables with their row counts and an order-free hash of their rows, views and their definitions,
sequences, indexes, types) must be the same after a rotation's candidates as before, or the run
stops. questions.jsonl is read only when it holds at most MAX_QUESTIONS_BYTES and MAX_QUESTIONS.

Integrity
---------
Before anything is scored the pack must match ``attestation.intoto.json``, a DSSE envelope
(``payloadType`` ``application/vnd.in-toto+json``; payload in standard or URL-safe base64) around
an in-toto Statement v1 (``_type``) with the SLSA provenance v1 ``predicateType``. Every subject
name must be a relative POSIX path inside the pack (no ``..``, no leading ``/``, no backslash, no
NUL or control character) listed once with a lowercase hex SHA-256; every subject must exist with
that hash, every other regular file of the pack must be a subject, and a symlink or special file
anywhere is refused, and every folder must hold a subject (an extra rotation folder, even empty,
would change what is scored). A missing attestation is refused too: nothing would pin the files.
Otherwise the pack is refused (exit 2) naming each file. ``--allow-unattested`` turns a missing
attestation and unlisted files or folders into notes the report prints; nothing else. With ``--public-key`` one signature over the DSSE
pre-authentication encoding of the payload bytes must verify with that key (ed25519, or ECDSA
P-256 with SHA-256 in DER, the encoding securesystemslib writes; a raw r||s signature is not
accepted) and an envelope without signatures is refused; without a key (``--public-key`` defaults
to $EVALPACK_PUBLIC_KEY) a signature is reported as NOT CHECKED, saying anyone could have signed it,
and an envelope without signatures as UNSIGNED.

Packs made by Misata
--------------------
A pack ``misata evalpack`` (Misata 0.9.8) wrote is read too (:func:`pack_source`): its manifest names
``misata_version``; its database is ``tables/*.csv``, or one per ``rotations/seed-<n>/tables/``. Each CSV file is
copied into the sandbox with the column types of the manifest's schema where it gives them, else with DuckDB's
type sniffing, and the report says which per table (:func:`load_csv`). Its questions are scored with the rules
above. Its attestation is checked as Misata made it (:func:`_inspect_misata`): per database a bare Statement
whose subjects are that database's tables (re-hashed; every file of its ``tables/`` must be one) and an envelope
holding the same bytes, unsigned unless someone signed it. It covers the tables only: every report says that the
pack is Misata's and names the files nothing pins, ``questions.jsonl`` (the gold SQL and answers) first among them.

Exit codes: 0 every question correct (gold mode: every gold SQL verifies), 1 otherwise,
2 bad input or a pack that fails its integrity check.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import csv
import datetime as dt
import hashlib
import json
import math
import os
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation, localcontext
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, NoReturn

import duckdb

COMPARISON_RULE = (
    "A scalar question expects exactly one row with one column. Numbers are compared as exact "
    "decimals after rounding both sides half-to-even at the question's round_decimals (negative "
    "zero is zero; when round_decimals is null, a number that is not whole is rounded half-to-even at 12 "
    "significant digits, so that floating-point noise is not a difference); integers must be equal as numbers with "
    "no fractional part; strings must be equal exactly (a date or timestamp counts as its ISO text); "
    "booleans are not numbers; NULL never equals a value. A result-set question (answer_type rows) "
    "compares whole results cell by cell under the same value rules, NULL equal to NULL: rule "
    "'spider' matches columns by value, compares rows as a multiset and in order only when the gold "
    "SQL has a top-level ORDER BY; rule 'bird' compares the sets of rows. A question passes only "
    "when it matches on every rotation."
)

RULES = ("spider", "bird")
SCALAR_TYPES = ("number", "integer", "string")
ROWS_TYPE = "rows"
# The pack's layout as this file needs it (evalpack.layout owns it; tests/test_layout.py checks these match).
QUESTIONS_FILE = "questions.jsonl"
ROTATIONS_DIR = "rotations"
TABLES_DIR = "tables"
ROTATION_FOLDER = re.compile(r"seed_(\d+)")
ATTESTATION = "attestation.intoto.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
DEFAULT_TIMEOUT = 10.0  # seconds per query per rotation
DEFAULT_MEMORY_MB = 1024  # working memory per rotation, on top of the loaded tables
DEFAULT_THREADS = 2
PAIRED_PARQUET_BYTES = 64 * 2**20  # rotations with less Parquet than this are scored two at once
COPIED_GOLD_BYTES = 4 * 2**20  # even in place, rotations with less Parquet than this are copied into memory
DEFAULT_RUN_TIMEOUT = 3600.0  # seconds for a whole run; what is left when it is spent is not run (wrong)
MAX_SQL_CHARS = 100_000  # longer SQL text is that candidate's error, never parsed
KILL_GRACE = 1.0  # seconds past a query's time limit before its worker process is killed
MAX_FETCH_ROWS = 100_000  # a bird candidate may repeat rows; beyond this many it is wrong
MAX_RESULT_BYTES = 64 * 2**20  # what one result may hold (text, nested values counted in full) before it is wrong
MAX_QUESTIONS_BYTES = 64 * 2**20  # questions.jsonl may be this large (retail's 170 questions: 0.2 MiB)
MAX_QUESTIONS = 50_000  # and hold this many questions (BIRD's training set, imported, 9,428)
MAX_JSON_VALUES = 5_000_000  # and at most this many JSON objects, lists and items (retail's: 11,000; ~0.5 GB parsed)
MAX_MANIFEST_BYTES = 16 * 2**20  # manifest.json (retail's: 36 KiB)
_SEARCH_BUDGET = 200_000  # column-mapping steps tried before a spider comparison gives up (wrong)


class InputError(Exception):
    """Input a user can fix (a candidates file, a key, a pack): the message names the file; exit 2."""


class PackIntegrityError(InputError):
    """The pack on disk is not the pack its attestation describes (one line per file)."""


# --------------------------------------------------------------------------- values


def _as_decimal(value: Any) -> Decimal | None:
    """The exact decimal value of a finite number (a float by its shortest repr); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    return None


def _round(number: Decimal, places: int | None) -> Decimal | None:
    """``number`` rounded half-to-even at ``places`` decimals (negative zero is zero); with ``places`` None, a number
    that is not whole at :data:`SIGNIFICANT_DIGITS` significant digits (floating-point noise is below them)."""
    if places is None:
        if number == number.to_integral_value():
            return number
        places = SIGNIFICANT_DIGITS - 1 - number.adjusted()
    precision = max(28, abs(number.adjusted()) + abs(int(places)) + 5)
    with localcontext(Context(prec=precision)):
        try:
            rounded = number.quantize(Decimal(1).scaleb(-int(places)), rounding=ROUND_HALF_EVEN)
        except InvalidOperation:
            return None
        return rounded + 0 if rounded else Decimal(0).quantize(rounded)


# the digits a number that is not whole is compared at when the question declares no round_decimals: an answer
# received from outside (TPC-H's) and a query summing DOUBLEs in another order differ from the 16th digit on
SIGNIFICANT_DIGITS = 12


def _temporal_text(value: dt.date | dt.time) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return value.isoformat()


def normalize(value: Any, answer_type: str, round_decimals: int | None) -> Any:
    """The comparable form of one scalar value, or None when it cannot equal any answer."""
    if answer_type == "string":
        if isinstance(value, str):
            return value
        return _temporal_text(value) if isinstance(value, (dt.date, dt.time)) else None
    number = _as_decimal(value)
    if number is None:
        return None
    if answer_type == "integer":
        return int(number) if number == number.to_integral_value() else None
    if answer_type == "number":
        return _round(number, round_decimals)
    return None


def scalar_matches(expected: Any, answer_type: str, round_decimals: int | None, rows: list[tuple]) -> bool:
    """True when ``rows`` is one row of one value equal to ``expected`` under the rule."""
    if len(rows) != 1 or len(rows[0]) != 1:
        return False
    got = normalize(rows[0][0], answer_type, round_decimals)
    want = normalize(expected, answer_type, round_decimals)
    return got is not None and want is not None and got == want


def cell_key(value: Any, round_decimals: int | None = None) -> Any:
    """A hashable key for one cell of a result set; equal keys mean equal cells (NULL is None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, Decimal)):
        number = _as_decimal(value)
        if number is None:  # NaN, Infinity, -Infinity
            text = str(value).lower().lstrip("+")
            return ("float", "nan" if "nan" in text else text.replace("infinity", "inf"))
        rounded = _round(number, round_decimals)
        return ("num", number if rounded is None else rounded)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (dt.date, dt.time)):
        return ("str", _temporal_text(value))
    if isinstance(value, uuid.UUID):
        return ("str", str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(value))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(cell_key(v, round_decimals) for v in value))
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return ("map", tuple((str(k), cell_key(v, round_decimals)) for k, v in items))
    if isinstance(value, dt.timedelta):
        return ("interval", value)
    return ("other", type(value).__name__, repr(value))


def _row_keys(rows: list, round_decimals: int | None) -> list[tuple]:
    return [tuple(cell_key(v, round_decimals) for v in row) for row in rows]


def _spider_equal(gold: list[tuple], got: list[tuple], ordered: bool, budget: int = _SEARCH_BUDGET) -> bool:
    """Spider's rule on keyed rows: a column bijection under which the rows are equal as a
    multiset (as a list when ``ordered``). A search longer than ``budget`` steps counts as unequal."""
    if not gold and not got:
        return True
    if len(gold) != len(got):
        return False
    width = len(gold[0])
    if any(len(r) != width for r in gold) or any(len(r) != width for r in got):
        return False
    if width == 0:
        return True
    gold_cols, got_cols = list(zip(*gold, strict=True)), list(zip(*got, strict=True))
    if ordered:  # equal row lists under a column bijection <=> equal multisets of column vectors
        return Counter(gold_cols) == Counter(got_cols)
    # Necessary: each row's multiset of cells, and each column's multiset of cells, must pair up.
    if Counter(frozenset(Counter(r).items()) for r in gold) != Counter(frozenset(Counter(r).items()) for r in got):
        return False
    gold_sig = [frozenset(Counter(c).items()) for c in gold_cols]
    got_sig = [frozenset(Counter(c).items()) for c in got_cols]
    if Counter(gold_sig) != Counter(got_sig):
        return False
    # Depth-first over mappings of candidate column j -> gold column, pruned by the multiset of
    # partial rows; interchangeable (identical) gold columns are tried once.
    first_of = {}
    twin = [first_of.setdefault(col, i) for i, col in enumerate(gold_cols)]
    choices = [[k for k in range(width) if gold_sig[k] == got_sig[j]] for j in range(width)]
    order = sorted(range(width), key=lambda j: len(choices[j]))
    used = [False] * width
    mapping: list[int] = []
    steps = [budget]

    def partial_ok(depth: int) -> bool:
        cols_got = [got_cols[order[d]] for d in range(depth)]
        cols_gold = [gold_cols[mapping[d]] for d in range(depth)]
        return Counter(zip(*cols_got, strict=True)) == Counter(zip(*cols_gold, strict=True))

    def search(depth: int) -> bool:
        if depth == width:
            return True
        tried = set()
        for k in choices[order[depth]]:
            if used[k] or twin[k] in tried:
                continue
            steps[0] -= 1
            if steps[0] < 0:
                return False
            tried.add(twin[k])
            used[k] = True
            mapping.append(k)
            if partial_ok(depth + 1) and search(depth + 1):
                return True
            mapping.pop()
            used[k] = False
        return False

    return search(0)


def result_sets_match(expected: list, got: list, rule: str = "spider", ordered: bool = False,
                      round_decimals: int | None = None) -> bool:
    """Whether result ``got`` equals ``expected`` (lists of rows) under ``rule`` (spider | bird)."""
    gold_keys, got_keys = _row_keys(expected, round_decimals), _row_keys(got, round_decimals)
    if rule == "bird":
        return set(gold_keys) == set(got_keys)
    if rule == "spider":
        return _spider_equal(gold_keys, got_keys, ordered)
    raise ValueError(f"unknown comparison rule {rule!r}; use one of {', '.join(RULES)}")


def answer_matches(record: dict, expected: Any, rows: list[tuple], rule: str = "spider", ordered: bool = False) -> bool:
    """Whether ``rows`` answer the question ``record`` whose expected answer here is ``expected``."""
    answer_type = answer_type_of(record)
    if answer_type == ROWS_TYPE:
        if not isinstance(expected, list) or not all(isinstance(r, (list, tuple)) for r in expected):
            return False
        return result_sets_match(expected, rows, rule, ordered, record.get("round_decimals"))
    return scalar_matches(expected, answer_type, record.get("round_decimals"), rows)


def verdict_in_any_order(record: dict, expected: Any, rows: list[tuple]) -> bool | None:
    """What :func:`answer_matches` compared in row order (spider rule) says of ``rows`` in any order of them,
    or None when their order decides it. A scalar, or at most one row, is decided as it is; otherwise False
    when what every order shares already differs: the row count, the width, the multiset of each column's
    cells, the multiset of each row's cells (an ordered match pairs columns and rows one to one)."""
    if answer_type_of(record) != ROWS_TYPE or len(rows) <= 1:
        return answer_matches(record, expected, rows, ordered=True)
    if not isinstance(expected, list) or not all(isinstance(r, (list, tuple)) for r in expected):
        return False
    gold, got = _row_keys(expected, record.get("round_decimals")), _row_keys(rows, record.get("round_decimals"))
    if len(gold) != len(got) or len({len(r) for r in gold + got}) != 1:
        return False

    def shared(keys: list[tuple]) -> tuple[Counter, Counter]:
        return (Counter(frozenset(Counter(c).items()) for c in zip(*keys, strict=True)),
                Counter(frozenset(Counter(r).items()) for r in keys))

    return None if shared(gold) == shared(got) else False


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of an observed value (decimals keep their digits as strings)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (dt.date, dt.time)):
        return _temporal_text(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def observed(rows: list[tuple], ordered: bool = True) -> Any:
    """What a result looked like, for reports: the scalar when there is one, else its first rows. A result
    not compared in order is recorded in a canonical order, so the record does not depend on row order."""
    if len(rows) == 1 and len(rows[0]) == 1:
        return jsonable(rows[0][0])
    listed = jsonable([list(r) for r in rows])
    if not ordered:
        listed.sort(key=lambda row: json.dumps(row, sort_keys=True))
    return listed[:5]


def top_level_order_by(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether the (single) statement ``sql`` orders its final result (DuckDB's parser decides: ``con``'s
    tables and settings play no part, so the answer is kept per text; a build asks it of each gold SQL
    again on every rotation)."""
    return kept_order(sql, lambda text: parsed_order_by(con, text))


def kept_order(sql: str, decide: Callable[[str], bool]) -> bool:
    """Whether ``sql`` orders its final result, as ``decide`` (text -> bool) says the first time this process asks
    of that text (:func:`top_level_order_by`; a build decides through its cache on disk); False for what is not text."""
    if not isinstance(sql, str):
        return False
    known = _ORDERED.get(sql)
    if known is None:
        if len(_ORDERED) >= ORDERED_KEPT:
            _ORDERED.clear()
        known = _ORDERED[sql] = decide(sql)
    return known


ORDERED_KEPT = 4096  # SQL texts whose top_level_order_by answer is kept
_ORDERED: dict[str, bool] = {}


def parsed_order_by(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """:func:`top_level_order_by` worked out by DuckDB's parser on ``con``, without the answers kept per text."""
    try:
        text = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
        tree = json.loads(text)
    except (duckdb.Error, TypeError, ValueError):
        return False
    if tree.get("error") or not tree.get("statements"):
        return False
    node = tree["statements"][0].get("node") or {}
    return any(m.get("type") == "ORDER_MODIFIER" for m in node.get("modifiers") or ())


# --------------------------------------------------------------------------- tables and sandbox


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Limits:
    """Resource limits for untrusted SQL: seconds per query, MiB of working memory, threads, seconds
    for the whole run."""

    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    threads: int = DEFAULT_THREADS
    run_timeout: float = DEFAULT_RUN_TIMEOUT

    def checked(self) -> Limits:
        """These limits, or InputError naming the one that is not a finite positive number."""
        for name, value in (("--timeout", self.timeout), ("--run-timeout", self.run_timeout),
                            ("--memory-mb", self.memory_mb), ("--threads", self.threads)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise InputError(f"{name} must be a finite positive number, not {value!r}; "
                                 "a limit cannot be switched off")
        if self.threads > 64 or self.memory_mb > 2**20:
            raise InputError("--threads is at most 64 and --memory-mb at most 1048576")
        return self


SANDBOX_SCRATCH = "evalpack-sandbox-"  # a private folder per sandbox while it loads: {prefix}{pid}-{random}
SANDBOX_DATABASE = "memory.duckdb"  # its name is the database's: DuckDB's in-memory default, so names qualified by it resolve
MIN_SCRATCH_BYTES = 1 << 30  # what loading a rotation may write at least (the database and its spill)
SCRATCH_PER_TABLE_BYTE = 8  # and this much per byte of its table files, beyond that


def _try_set(con: duckdb.DuckDBPyConnection, setting: str) -> None:
    with contextlib.suppress(duckdb.Error):  # a setting this DuckDB version does not have
        con.execute(f"SET {setting}")


def scratch_bytes(files: Iterable[Path]) -> int:
    """What loading tables from ``files`` may write into its scratch folder (the database and what it spills)."""
    return MIN_SCRATCH_BYTES + SCRATCH_PER_TABLE_BYTE * sum(path.stat().st_size for path in files)


def sweep_scratch(parent: Path, prefix: str = SANDBOX_SCRATCH) -> None:
    """Remove the scratch folders ``{prefix}{pid}-*`` in ``parent`` whose process is gone (killed while using them)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            found = pattern.match(path.name)
            if found and path.is_dir() and not path.is_symlink() and not process_alive(int(found.group(1))):
                _remove_tree(path)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a dead process its parent has not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return status.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _lockdown(con: duckdb.DuckDBPyConnection, limits: Limits, files: Sequence[Path], in_place: bool) -> None:
    """Lock the read-only connection ``con``: no spill, extension or file access (but ``files`` when ``in_place``),
    its memory and threads set, its configuration locked."""
    con.execute(f"SET threads={max(1, int(limits.threads))}")
    con.execute("SET temp_directory=''")  # nothing spills: a read-only database has nothing to offload but cache
    for setting in ("max_temp_directory_size='0B'", "autoinstall_known_extensions=false",
                    "autoload_known_extensions=false", "allow_community_extensions=false",
                    "allow_persistent_secrets=false", "enable_progress_bar=false",
                    # what would show a query the machine's folders (current_setting, duckdb_settings())
                    "home_directory='/nonexistent'", "secret_directory='/nonexistent'",
                    "extension_directory='/nonexistent'"):
        _try_set(con, setting)
    if in_place:
        _try_set(con, "parquet_metadata_cache=true")  # an optimisation: footers are read once
        con.execute("SET allowed_paths=[" + ", ".join(quote_literal(str(path)) for path in files) + "]")
    con.execute(f"SET memory_limit='{max(64, int(limits.memory_mb)) * 2**20}B'")
    con.execute("SET enable_external_access=false")
    con.execute("SET lock_configuration=true")
    locked = con.execute("SELECT current_setting('lock_configuration'), current_setting('enable_external_access'), "
                         "bool_and(readonly) FILTER (WHERE NOT internal) "
                         "FROM duckdb_databases()").fetchone()
    if str(locked[0]).lower() != "true" or str(locked[1]).lower() != "false" or locked[2] is not True:
        raise RuntimeError("the DuckDB sandbox did not lock; refusing to run untrusted SQL")


def _check_rows(con: duckdb.DuckDBPyConnection, path: Path, declared: dict[str, int] | None) -> None:
    """InputError when the Parquet file ``path`` holds more rows than the pack's manifest declares for its table."""
    rows = (declared or {}).get(path.stem)
    if rows is None:
        return
    try:
        held = con.execute("SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata(?)", [str(path)]).fetchone()[0]
    except duckdb.Error as exc:
        raise InputError(f"{path}: not a Parquet file DuckDB can read: {first_line(exc)}") from None
    if held > rows:
        raise InputError(f"{path}: holds {held:,} rows where {MANIFEST_FILE} declares {rows:,} for table "
                         f"{printable(path.stem)}; the pack is damaged, refused before loading it")


def open_sandbox(tables_dir: Path, limits: Limits = Limits(), *, in_place: bool = False,
                 csv_types: dict[str, dict[str, str]] | None = None,
                 loaded: dict[str, str] | None = None, declared_rows: dict[str, int] | None = None,
                 on_connected: Callable[[], Any] | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB database with one table per Parquet file of ``tables_dir``, locked down.

    The tables are written into a database file in a private scratch folder under the memory limit
    (``on_connected`` is called once the engine has started and before any table loads: a worker limits its
    address space there), with at most :func:`scratch_bytes` of spill; the file is then opened again READ-ONLY
    and unlinked, so no statement of any type can change what a query reads, and nothing is left behind.
    A Parquet file holding more rows than ``declared_rows`` (table -> rows, from the pack's manifest) is an
    InputError before it loads, and so is a table that does not fit the memory limit or the scratch space.

    After this returns the connection loads no extension, spills nothing to disk and cannot change
    its own configuration. By default each table is copied and the connection reads no file at all
    (for candidate SQL). ``in_place`` makes each table a view over its Parquet file and allows reading
    exactly those files and no other (for the pack's own gold SQL: no copy, and a query reads only the
    columns and row groups it needs).

    ``csv_types`` (a pack made by Misata, whose tables are CSV: :func:`pack_source`) loads one table per
    CSV file instead, always copied (:func:`load_csv`); ``loaded`` receives how each was typed.
    """
    tables_dir = Path(tables_dir).resolve()
    if csv_types is not None:
        files, in_place = sorted(tables_dir.glob("*.csv")), False
    else:
        files = sorted(tables_dir.glob("*.parquet"))
    parent = Path(tempfile.gettempdir())
    sweep_scratch(parent)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SANDBOX_SCRATCH}{os.getpid()}-", dir=parent))
    database = scratch / SANDBOX_DATABASE
    try:
        build = duckdb.connect(str(database))
        try:
            build.execute(f"SET threads={max(1, int(limits.threads))}")
            build.execute(f"SET memory_limit='{max(64, int(limits.memory_mb)) * 2**20}B'")
            build.execute(f"SET temp_directory={quote_literal(str(scratch / 'spill'))}")
            build.execute(f"SET max_temp_directory_size='{scratch_bytes(files)}B'")
            for setting in ("autoinstall_known_extensions=false", "autoload_known_extensions=false",
                            "enable_progress_bar=false"):
                _try_set(build, setting)
            if on_connected is not None:
                on_connected()
            for path in files:
                try:
                    if csv_types is not None:
                        how = load_csv(build, path, csv_types.get(path.stem))
                        if loaded is not None:
                            loaded[path.stem] = how
                        continue
                    _check_rows(build, path, declared_rows)
                    source = f"read_parquet({quote_literal(str(path))})"
                    kind = "VIEW" if in_place else "TABLE"
                    build.execute(f"CREATE {kind} {quote_ident(path.stem)} AS SELECT * FROM {source}")
                except duckdb.Error as exc:
                    raise InputError(f"{path}: cannot be loaded into the sandbox (at most "
                                     f"{max(64, int(limits.memory_mb))} MiB of memory, "
                                     f"{scratch_bytes(files) // 2**20} MiB of scratch space): {first_line(exc)}") \
                        from None
        finally:
            build.close()
        con = duckdb.connect(str(database), read_only=True)
    finally:
        _remove_tree(scratch)  # an open database needs no name: the file lives on until the connection closes
    try:
        _lockdown(con, limits, files, in_place)
    except BaseException:
        con.close()
        raise
    return con


SNIFFED = "DuckDB's type sniffing"


def load_csv(con: duckdb.DuckDBPyConnection, path: Path, types: dict[str, str] | None) -> str:
    """Copy one CSV file (header row first) into a table named by its stem; how its columns were typed.

    With ``types`` (column -> DuckDB type, from the schema the pack's producer recorded) the columns the
    header names get those types and the rest are sniffed; when that read fails (a value the type cannot
    hold), or without types, DuckDB sniffs every column (``read_csv`` alone, as Misata's own verify.py
    reads them) and the text says why."""
    name, source = quote_ident(path.stem), quote_literal(str(path))
    why = "the producer's schema gives no column types for this table"
    if types:
        try:
            with open(path, encoding="utf-8", newline="") as handle:
                header = next(csv.reader(handle), [])
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            header, why = [], f"its header cannot be read: {first_line(exc)}"
        given = {column: kind for column, kind in types.items() if column in header}
        if given:
            spec = "{" + ", ".join(f"{quote_literal(c)}: {quote_literal(t)}" for c, t in given.items()) + "}"
            try:
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv({source}, header=true, types={spec})")
                rest = len(header) - len(given)
                return f"typed by the schema ({len(given)} columns{f'; {rest} sniffed' if rest else ''})"
            except duckdb.Error as exc:
                why = f"the schema's types do not read it: {first_line(exc)}"
        elif header:
            why = "the schema names none of its columns"
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv({source}, header=true)")
    return f"read with {SNIFFED} ({why})"


@dataclass(frozen=True)
class Outcome:
    """What one query did: its rows (None when it failed), the error, the seconds it took."""

    rows: list[tuple] | None
    error: str | None
    seconds: float
    timed_out: bool = False


class Query(NamedTuple):
    """One query for a sandbox worker (:meth:`SandboxWorker.run_many`): its SQL, seconds, rows and bytes it may take."""

    sql: str
    timeout: float
    max_rows: int = MAX_FETCH_ROWS
    max_bytes: int = MAX_RESULT_BYTES


def catalog_state(con: duckdb.DuckDBPyConnection) -> tuple:
    """Everything a statement could have changed in the sandbox: databases (and whether each is read-only),
    tables (their sizes, and the row count and an order-free hash of every row of each), views and their
    definitions, sequences, indexes, user types. Equal before and after a rotation's candidates, or the
    sandbox was not read-only: a row deleted, updated or inserted changes a table's count or hash."""
    queries = ("SELECT database_name, readonly FROM duckdb_databases() ORDER BY ALL",
               "SELECT database_name, schema_name, table_name, estimated_size, column_count FROM duckdb_tables() "
               "ORDER BY ALL",
               "SELECT database_name, schema_name, view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY ALL",
               "SELECT database_name, schema_name, sequence_name FROM duckdb_sequences() ORDER BY ALL",
               "SELECT database_name, schema_name, index_name FROM duckdb_indexes() ORDER BY ALL",
               "SELECT database_name, schema_name, type_name FROM duckdb_types() WHERE NOT internal ORDER BY ALL")
    catalog = tuple(tuple(con.execute(q).fetchall()) for q in queries)
    contents = tuple(
        con.execute(f"SELECT count(*), bit_xor(hash(t)) FROM {'.'.join(map(quote_ident, name))} AS t").fetchone()
        for name in (row[:3] for row in catalog[1]))
    return catalog + (contents,)


class Watchdog:
    """One thread that calls each armed action at its deadline, for every query of the process.

    A sandbox worker starts it before limiting its address space: a thread started per query could
    fail to get its stack under that limit once an earlier query has grown the process (Python
    raises "can't start new thread"), and the next query, however correct, would fail with it."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No thread and nothing armed: how a forked child starts (it has none of its parent's threads, and the
        parent's lock may have been held at the fork)."""
        self._due: dict[int, tuple[float, Callable[[], Any], threading.Event]] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._next = 0
        self._wakes_at: float | None = None  # when the thread's wait ends (None: when notified)
        self.wakes = 0  # how many times the thread has looked for due actions

    def start(self) -> None:
        """Start the thread (once); :meth:`armed` starts it when needed."""
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="evalpack-watchdog", daemon=True)
                self._thread.start()

    def _watch(self) -> None:
        with self._changed:
            while True:
                self.wakes += 1
                now = time.monotonic()
                for key, (deadline, action, fired) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[key]
                        fired.set()
                        with contextlib.suppress(Exception):  # the thread serves every later query too
                            action()
                soonest = min((deadline for deadline, _, _ in self._due.values()), default=None)
                self._wakes_at = soonest
                self._changed.wait(None if soonest is None else max(0.0, soonest - time.monotonic()))

    @contextlib.contextmanager
    def armed(self, timeout: float, action: Callable[[], Any]) -> Any:
        """``action`` is called once ``timeout`` seconds have passed, unless the block has ended by then;
        yields an Event set when it was called. When the block ends, the action has run or never will.

        The thread is woken only when the new deadline comes before the one it waits for: queries one after
        another, each with the same timeout, wake it once per timeout rather than twice per query."""
        self.start()
        fired = threading.Event()
        with self._changed:
            key, self._next = self._next, self._next + 1
            deadline = time.monotonic() + timeout
            self._due[key] = (deadline, action, fired)
            if self._wakes_at is None or deadline < self._wakes_at:
                self._changed.notify()
        try:
            yield fired
        finally:
            with self._changed:  # the watchdog calls actions holding this lock: none is under way now
                self._due.pop(key, None)  # a deadline it still waits for finds nothing due, which is harmless


WATCHDOG = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG.reset)


def run_query(con: duckdb.DuckDBPyConnection, sql: str, timeout: float = DEFAULT_TIMEOUT,
              max_rows: int = MAX_FETCH_ROWS, max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
    """Run one untrusted query on a sandbox connection: one SELECT statement, interrupted after
    ``timeout`` seconds; at most ``max_rows`` + 1 rows and about ``max_bytes`` of text are fetched
    (the rest of a streamed result is never computed)."""
    started = time.perf_counter()
    refused = sql_refused(sql)
    if refused:
        return Outcome(None, refused, 0.0)
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        return Outcome(None, f"parse error: {first_line(exc)}", time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - whatever the text does to the parser is this query's error
        return Outcome(None, f"parse error: {type(exc).__name__}: {first_line(exc)}", time.perf_counter() - started)
    if len(statements) != 1:
        return Outcome(None, f"rejected: expected exactly one statement, got {len(statements)}",
                       time.perf_counter() - started)
    statement = statements[0]
    if statement.type != duckdb.StatementType.SELECT:
        kind = getattr(statement.type, "name", str(statement.type))
        if kind == "LOAD":  # DuckDB's type for LOAD, INSTALL and FORCE INSTALL: say which one was sent
            kind = " ".join(statement.query.split()[:2 if statement.query.upper().startswith("FORCE") else 1]).upper()
        return Outcome(None, f"rejected: only a query (SELECT/WITH) may run, not {kind}", time.perf_counter() - started)
    rows, error = None, None
    with WATCHDOG.armed(timeout, con.interrupt) as fired:
        try:
            rows, error = fetch_capped(con.execute(statement).fetchmany, max_rows, max_bytes)
        except duckdb.Error as exc:
            error = first_line(exc)
        except Exception as exc:  # noqa: BLE001 - a value Python cannot hold (an INTERVAL of 10^8 years), no memory
            error = f"cannot read the result: {type(exc).__name__}: {first_line(exc)}"
    return query_outcome(rows, error, time.perf_counter() - started, timeout, fired.is_set(), max_rows)


def query_outcome(rows: list | None, error: str | None, seconds: float, timeout: float, stopped: bool,
                  max_rows: int = MAX_FETCH_ROWS) -> Outcome:
    """How a query that ended is reported: a timeout when the clock ``stopped`` it and it failed (not for a
    result that was too large), else its error, else too many rows when it had more than ``max_rows``, else
    its rows."""
    if stopped and error is not None and not error.startswith("result too large"):
        return Outcome(None, f"timeout: stopped after {timeout:g} s", seconds, timed_out=True)
    if error is not None:
        return Outcome(None, error, seconds)
    if len(rows) > max_rows:
        return Outcome(None, f"too many rows: more than {max_rows}", seconds)
    return Outcome(rows, None, seconds)


def fetch_capped(fetchmany: Callable[[int], list], max_rows: int = MAX_FETCH_ROWS,
                 max_bytes: int = MAX_RESULT_BYTES) -> tuple[list, str | None]:
    """Rows of a result, 256 at a time through ``fetchmany``, up to ``max_rows`` + 1 rows (one more shows there
    were too many) and about ``max_bytes`` of text: (rows, None), or (rows so far, why it stopped)."""
    rows: list = []
    size = 0
    while len(rows) <= max_rows:
        want = min(256, max_rows + 1 - len(rows))
        chunk = fetchmany(want)
        rows += chunk
        size += sum(value_bytes(v, max_bytes - size) for row in chunk for v in row)
        if size > max_bytes:
            return rows, f"result too large: more than {max_bytes // 2**20} MiB"
        if len(chunk) < want:
            break
    return rows, None


OUT_OF_MEMORY = ("Out of Memory Error", "cannot read the result: MemoryError", "out of memory")


def out_of_memory(error: str | None) -> bool:
    """Whether a query's error is the engine's own out-of-memory error (DuckDB's, Python's reading the result,
    SQLite's or libpq's), by how it starts: a candidate's own message (DuckDB's ``error()``, PostgreSQL's
    ``RAISE``) comes with another prefix, so a candidate cannot ask for a fresh worker by saying so."""
    return error is not None and error.startswith(OUT_OF_MEMORY)


def value_bytes(value: Any, limit: float = math.inf) -> int:
    """About how many bytes ``value`` takes as a result cell: text and bytes their length, a list, struct or map
    the sum of what it holds (each value at least 16), anything else 16. Counting stops once past ``limit``."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if not isinstance(value, (list, tuple)):
        return 16
    total = 16
    for item in value:
        total += value_bytes(item, limit - total)
        if total > limit:
            break
    return total


def sql_refused(sql: Any) -> str | None:
    """Why ``sql`` is refused before any parser sees it (not text, too long, not valid Unicode), or None."""
    if not isinstance(sql, str):
        return "rejected: the SQL is not text"
    if len(sql) > MAX_SQL_CHARS:
        return f"rejected: the SQL is {len(sql):,} characters long; at most {MAX_SQL_CHARS:,} are run"
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:
        return "rejected: the SQL is not valid Unicode (it holds a lone surrogate)"
    return None


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: Any) -> str:
    """``text`` safe to print on one terminal line: control characters (newlines, ANSI escapes, C1
    codes), line and paragraph separators, bidirectional marks and overrides and lone surrogates are shown as
    escapes."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", str(text))


def error_text(exc: BaseException, prefix: str = "error: ") -> str:
    """An error message for a terminal: each of its lines :func:`printable`, the first after ``prefix``."""
    return "\n".join(printable(line) for line in f"{prefix}{exc}".splitlines())


def jsonl_lines(text: str) -> list[str]:
    """The lines of JSON Lines text: split at newlines only (``str.splitlines`` also splits at U+2028 and other
    separators, which a JSON string may hold as they are), a carriage return before a newline dropped."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- the worker process
# Untrusted SQL never runs in the process that scores it. Each rotation's sandbox lives in a child
# process (this same file run with --sandbox-worker) under operating-system limits: address space,
# CPU seconds per query, no file may be written, few descriptors, and it dies with its parent. The
# parent sends one query at a time and kills the child when no answer comes within the time limit
# and a grace; a child that was killed, crashed or ran out of memory is replaced for the next query.
# Results cross the pipe as length-prefixed JSON with tagged values, so nothing the child sends is
# ever executed by the parent (no pickle).

WORKER_FLAG = "--sandbox-worker"
BATCH_QUERIES = 100  # queries sent to a sandbox worker in one message (SandboxWorker.run_many)
BATCH_CHARS = 2_000_000  # and at most this much SQL text, unless a single query is longer
MAX_FRAME_BYTES = 4 * MAX_RESULT_BYTES + 2**20
# a worker's address space may grow past what it held with its tables loaded by the working memory
# and this much more (DuckDB's own allocations outside its buffer manager, Python's result objects)
WORKER_OVERHEAD_MB = 256
_FRAME = struct.Struct(">Q")


def _encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if value.bit_length() < 4000 else {"$i": format(value, "x")}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$f": repr(value)}
    if isinstance(value, Decimal):
        return {"$d": str(value)}
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$t": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$td": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"$u": str(value)}
    if isinstance(value, (list, tuple)):
        return [_encode_value(v) for v in value]
    if isinstance(value, dict):
        return {"$m": [[_encode_value(k), _encode_value(v)] for k, v in value.items()]}
    return {"$s": str(value)}


def _decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    (tag, data), = value.items()
    if tag == "$i":
        return int(data, 16)
    if tag == "$f":
        return float(data)
    if tag == "$d":
        return Decimal(data)
    if tag == "$dt":
        return dt.datetime.fromisoformat(data)
    if tag == "$date":
        return dt.date.fromisoformat(data)
    if tag == "$t":
        return dt.time.fromisoformat(data)
    if tag == "$td":
        return dt.timedelta(days=data[0], seconds=data[1], microseconds=data[2])
    if tag == "$b":
        return base64.b64decode(data)
    if tag == "$u":
        return uuid.UUID(data)
    if tag == "$m":
        return {_hashable(_decode_value(k)): _decode_value(v) for k, v in data}
    return str(data)


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _write_frame(out, message: dict) -> None:
    data = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    out.write(_FRAME.pack(len(data)) + data)
    out.flush()


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    """``size`` bytes from ``fd``; None at end of file or when ``deadline`` (monotonic) passes."""
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None = None) -> dict | None:
    head = _read_exactly(fd, _FRAME.size, deadline)
    if head is None:
        return None
    (size,) = _FRAME.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise OSError(f"a worker message of {size} bytes is larger than any result may be")
    body = _read_exactly(fd, size, deadline)
    return None if body is None else json.loads(body)


def _vm_bytes(pid: int | str = "self", field: str = "VmSize") -> int:
    """A /proc/<pid>/status size in bytes (0 where there is none)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


PARENT_POLL_SECONDS = 0.5  # how often a worker looks whether the process that started it is still there


def _die_with_parent(parent: int) -> None:
    """End this process soon after ``parent`` ends (and now, if that already happened).

    Linux's PR_SET_PDEATHSIG is not used: it fires when the *thread* that started the child ends, and a server
    starts workers from pool threads that retire when idle, which killed workers still in use. A daemon thread
    looks instead, every :data:`PARENT_POLL_SECONDS`; an idle worker also ends when its input closes."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(0)

    if os.getppid() != parent:
        os._exit(0)
    threading.Thread(target=watch, name="evalpack-parent-watch", daemon=True).start()


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (soft, soft if hard is None else hard))


# an opener: (setup, limits, on_connected) -> how to run a query, the sandbox's state, how its tables were loaded. It
# calls on_connected once its engine has started and before it loads anything (the address-space cap is set there;
# an opener that does not call it is capped when it returns)
Opener = Callable[[dict, Limits, Callable[[], Any]],
                  tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]]


def open_duckdb_worker(setup: dict, limits: Limits, on_connected: Callable[[], Any] | None = None
                       ) -> tuple[Callable[[str, float, int, int], Outcome], Callable[[], Any], dict[str, str]]:
    """The DuckDB sandbox of a worker (:func:`open_sandbox`): how to run a query on it (:func:`run_query`), its
    state (:func:`catalog_state`) and how its CSV tables were typed. ``on_connected``: see :func:`open_sandbox`."""
    loaded: dict[str, str] = {}
    con = open_sandbox(Path(setup["tables"]), limits, in_place=setup["in_place"], csv_types=setup.get("csv_types"),
                       loaded=loaded, declared_rows=setup.get("declared_rows"), on_connected=on_connected)
    return (lambda *query: run_query(con, *query)), (lambda: catalog_state(con)), loaded


def worker_main(argv: list[str], opener: Opener = open_duckdb_worker) -> int:
    """The child: ``python verify.py --sandbox-worker PARENT_PID``. Reads a setup message, opens the
    sandbox (``opener``: DuckDB's, or another engine's with the same answers) under its limits, then answers
    query messages until its input closes.

    The address-space cap is in force before any table loads: ``opener`` calls back once its engine has started
    (an opener that does not limits itself when it returns). While the tables load the worker may write at most
    :func:`scratch_bytes` (a file grown past that fails with EFBIG, the signal ignored); after, nothing at all."""
    import resource

    _die_with_parent(int(argv[0]))
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # whatever a library prints must not corrupt the replies
    inbox = 0  # stdin's descriptor, whatever became of sys.stdin in a process this one was forked from
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, 0, resource.RLIM_INFINITY)  # raised while the tables load, then 0 for good
    _limit(resource.RLIMIT_NOFILE, 256)
    setup = _read_frame(inbox)
    if setup is None:
        return 0
    limits = Limits(setup["timeout"], setup["memory_mb"], setup["threads"])
    caps: list[int] = []

    def cap_memory() -> None:
        if not caps:
            WATCHDOG.start()  # its stack is mapped now, under no limit (see Watchdog)
            caps.append(_vm_bytes() + (limits.memory_mb + WORKER_OVERHEAD_MB) * 2**20)
            _limit(resource.RLIMIT_AS, caps[0])

    try:
        if setup.get("tables"):  # where a started DuckDB worker begins; a forked one learns it here
            os.chdir(setup["tables"])
            tables = Path(setup["tables"])
            with contextlib.suppress(AttributeError, ValueError):
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
            _limit(resource.RLIMIT_FSIZE, scratch_bytes(p for p in tables.iterdir() if p.is_file()),
                   resource.RLIM_INFINITY)
        run, state, loaded = opener(setup, limits, cap_memory)
        _limit(resource.RLIMIT_FSIZE, 0)  # no file can be written, whatever the SQL does
        before = state()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        _write_frame(replies, {"error": f"{type(exc).__name__}: {first_line(exc)}"})
        return 1
    cap_memory()
    _write_frame(replies, {"ready": True, "cap_bytes": caps[0], "loaded": loaded})
    while (request := _read_frame(inbox)) is not None:
        if request.get("finish"):
            _write_frame(replies, {"unchanged": state() == before, "peak_bytes": _vm_bytes(field="VmHWM")})
            continue
        # a batch's queries run one after another, each answered as it ends: the parent reads each reply under
        # that query's own time limit, and no query waits for the parent to send it (see SandboxWorker.run_many)
        ends = time.monotonic() + request["run_seconds"] if request.get("run_seconds") is not None else math.inf
        for query in request["batch"]:
            left = ends - time.monotonic()
            _write_reply(replies, _answer(run, query, min(query["timeout"], left), limits.threads) if left > 0
                         else {"skipped": True})
    return 0


def _answer(run: Callable[[str, float, int, int], Outcome], query: dict, timeout: float, threads: int) -> dict:
    """A worker's reply to one query of a batch: its rows (encoded), error and seconds, under ``timeout`` seconds
    of wall time and about as much CPU time per thread."""
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    _limit(resource.RLIMIT_CPU, math.ceil(used.ru_utime + used.ru_stime + timeout * threads + 2), resource.RLIM_INFINITY)
    try:
        outcome = run(query["sql"], timeout, query["max_rows"], query["max_bytes"])
        rows = None if outcome.rows is None else [_encode_value(list(row)) for row in outcome.rows]
        return {"rows": rows, "error": outcome.error, "seconds": outcome.seconds, "timed_out": outcome.timed_out}
    except Exception as exc:  # noqa: BLE001 - whatever a result does on its way out is this query's error
        return {"rows": None, "error": f"{type(exc).__name__}: {first_line(exc)}", "seconds": 0.0,
                "timed_out": False}


def _write_reply(replies, reply: dict) -> None:
    reply["peak_bytes"] = _vm_bytes(field="VmHWM")
    try:
        _write_frame(replies, reply)
    except (ValueError, MemoryError) as exc:
        _write_frame(replies, {"rows": None, "error": f"the result cannot be sent: {first_line(exc)}",
                               "seconds": reply.get("seconds", 0.0), "timed_out": False})


class ForkedWorker:
    """A sandbox worker forked from this process (:func:`prestart_workers`), with the members of
    :class:`subprocess.Popen` that :class:`SandboxWorker` uses."""

    def __init__(self, pid: int, stdin, stdout) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def _reaped(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: how it ended is unknown
                pid, status = self.pid, 1 << 8
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def wait(self) -> int:
        return self._reaped(0)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


_SPARES: list[ForkedWorker] = []
_SPARES_LOCK = threading.Lock()


def _one_thread() -> bool:
    """Whether this process runs a single thread, so that a fork copies no lock another thread holds (Linux)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _fork_worker(parent_ends: list[int]) -> ForkedWorker:
    """One worker forked from here; ``parent_ends``: this process's ends of the pipes of the workers forked
    before it, which the child closes."""
    to_child, to_parent = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the sandbox worker, as if started with --sandbox-worker
        code = 1
        try:
            os.dup2(to_child[0], 0)
            os.dup2(to_parent[1], 1)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 2)
            # the parent's ends of every pipe, so that each worker sees the end of its own input alone
            for fd in {null, *to_child, *to_parent, *parent_ends} - {0, 1, 2}:
                os.close(fd)
            code = worker_main([str(os.getppid())])
        finally:
            os._exit(code)
    os.close(to_child[0])
    os.close(to_parent[1])
    return ForkedWorker(pid, os.fdopen(to_child[1], "wb"), os.fdopen(to_parent[0], "rb"))


def prestart_workers(count: int) -> int:
    """Fork ``count`` sandbox workers ahead for :class:`SandboxWorker` to take instead of starting a new
    interpreter each (which imports DuckDB and this file again: about 0.2 s each). Only while this
    process runs one thread and on Linux; so call it first thing, before any thread pool or DuckDB
    database. Spares left from an earlier call count towards ``count``. Returns how many were forked;
    workers never taken end when this process does."""
    if count <= 0 or not sys.platform.startswith("linux") or not _one_thread():
        return 0
    with _SPARES_LOCK:
        wanted = count - len(_SPARES)
        for _ in range(wanted):
            ends = [fd for w in _SPARES for fd in (w.stdin.fileno(), w.stdout.fileno())]
            _SPARES.append(_fork_worker(ends))
    return max(wanted, 0)


def prestart_for(pack: str | Path) -> int:
    """:func:`prestart_workers`: one per rotation of ``pack``, the workers a run on it starts (none when the pack
    cannot be read: the command reports that)."""
    try:
        rotations = len(pack_source(Path(pack)).databases)
    except Exception:  # noqa: BLE001 - whatever a damaged pack raises is reported by the run, not here
        return 0
    return prestart_workers(rotations)


def _spare() -> ForkedWorker | None:
    with _SPARES_LOCK:
        while _SPARES:
            spare = _SPARES.pop(0)
            if spare.poll() is None:
                return spare
    return None


class SandboxWorker:
    """One rotation's sandbox (:func:`open_sandbox`) in a child process; :meth:`run` is :func:`run_query`
    with the wall clock enforced by killing the child. Use as a context manager. ``csv_types``: the
    tables are CSV files (a Misata pack), typed as :func:`load_csv` says; ``loaded`` is how each was."""

    def __init__(self, tables_dir: Path, limits: Limits, in_place: bool = False,
                 csv_types: dict[str, dict[str, str]] | None = None,
                 declared_rows: dict[str, int] | None = None) -> None:
        self.tables_dir, self.limits, self.in_place = Path(tables_dir).resolve(), limits, in_place
        self.csv_types = csv_types
        self.declared_rows = declared_rows if declared_rows is not None else rows_declared_for(self.tables_dir)
        self.loaded: dict[str, str] = {}
        self.proc: subprocess.Popen | ForkedWorker | None = None
        self.cap_bytes = 0
        self.peak_bytes = 0
        self.replaced = 0

    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self) -> list[str]:
        """The child's command line (a worker over another engine answers the same messages)."""
        return [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, str(os.getpid())]

    def setup(self) -> dict[str, Any]:
        """The first message the child reads: what to open and under which limits."""
        return {"tables": str(self.tables_dir), "in_place": self.in_place, "timeout": self.limits.timeout,
                "memory_mb": self.limits.memory_mb, "threads": self.limits.threads, "csv_types": self.csv_types,
                "declared_rows": self.declared_rows}

    def _start(self) -> subprocess.Popen | ForkedWorker:
        # a worker forked ahead runs this file's DuckDB sandbox: only for a worker started with this command
        spare = _spare() if type(self).command is SandboxWorker.command else None
        proc = spare or subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, close_fds=True, cwd=str(self.tables_dir))
        try:
            _write_frame(proc.stdin, self.setup())
            ready = _read_frame(proc.stdout.fileno())
        except (OSError, ValueError):
            ready = None
        if not ready or not ready.get("ready"):
            self._kill(proc)
            why = (ready or {}).get("error", f"it exited with {proc.returncode}")
            # what stops a worker is the rotation's files (a table DuckDB cannot read) or its lock: the pack's problem
            raise InputError(f"{self.tables_dir}: the sandbox could not open this rotation: {printable(why)}")
        self.cap_bytes = int(ready["cap_bytes"])
        self.loaded = dict(ready.get("loaded") or {})
        return proc

    def _kill(self, proc: subprocess.Popen | ForkedWorker) -> None:
        self.peak_bytes = max(self.peak_bytes, _vm_bytes(proc.pid, "VmHWM"))
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()

    def run(self, sql: str, timeout: float, max_rows: int = MAX_FETCH_ROWS,
            max_bytes: int = MAX_RESULT_BYTES) -> Outcome:
        """``sql`` in the child, under ``timeout`` seconds: an Outcome as :func:`run_query` gives."""
        return next(self.run_many([Query(sql, timeout, max_rows, max_bytes)]))

    def run_many(self, queries: Sequence[Query], deadline: float | None = None) -> Iterator[Outcome | None]:
        """Each of ``queries`` in the child, in order, as :meth:`run` runs one; None for those not started by
        ``deadline`` (monotonic seconds). They go to the child in batches (:data:`BATCH_QUERIES`) that it answers
        query by query as each ends, so none waits for this process to send it (``verify.py`` at 1x: 0.01-0.04 s
        less than one at a time). Each reply is awaited under its own query's time limit, counted from when this
        process asks for it, and a worker that fails one is replaced for the rest. The outcomes are given as they
        come: one result set at a time is held here."""
        end = math.inf if deadline is None else deadline
        refused = [sql_refused(query.sql) for query in queries]
        sent: deque[int] = deque()  # asked of the current worker and not answered yet
        try:
            for i, query in enumerate(queries):
                if refused[i]:
                    yield Outcome(None, refused[i], 0.0)
                    continue
                if not sent:
                    if end <= time.monotonic():
                        yield None
                        continue
                    sent.extend(self._send(queries, refused, i, end))
                sent.popleft()
                outcome = self._answer(query, end)
                if outcome is not None and out_of_memory(outcome.error):
                    # DuckDB keeps memory an earlier query made it take, so a worker may run out where a fresh one
                    # would not: the query is asked again of a fresh worker, and one that ran out is asked nothing
                    # more. A question's outcome does not depend on which queries ran before it.
                    self._retire()
                    sent.clear()  # what else the retired worker was asked goes to the next one
                    if end > time.monotonic():
                        self._send(queries, refused, i, end, most=1)
                        outcome = self._answer(query, end)
                        if outcome is not None and out_of_memory(outcome.error):
                            self._retire()
                if self.proc is None:
                    sent.clear()  # the worker is replaced: the rest go to the next one
                yield outcome
        finally:
            if sent:  # left with replies still to come, which must not be read as the answer to another message
                self._kill(self.proc)
                self.proc = None

    def _answer(self, query: Query, end: float) -> Outcome | None:
        """The worker's reply to the first query it was sent and has not answered (``query``): its Outcome, or None
        when the run's time (``end``) was spent before it started. A reply that does not come in time is a timeout
        and the worker is replaced (:meth:`_lost`)."""
        started = time.monotonic()
        try:
            reply = _read_frame(self.proc.stdout.fileno(),
                                started + max(0.0, min(query.timeout, end - started)) + KILL_GRACE)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            return self._lost(self.proc, started, query.timeout)
        self.peak_bytes = max(self.peak_bytes, int(reply.get("peak_bytes", 0)))
        if reply.get("skipped"):  # the run's time was spent before it started
            return None
        rows = reply["rows"]
        return Outcome(None if rows is None else [tuple(_decode_value(row)) for row in rows], reply["error"],
                       float(reply["seconds"]), bool(reply["timed_out"]))

    def open(self) -> None:
        """Start the worker now (it starts at the first query otherwise), or a fresh one when the one started before
        has ended since (it is reaped, and counted as replaced): a worker that died while idle is never what answers
        the next query. RuntimeError or InputError when it cannot start."""
        self.reap()
        if self.proc is None:
            self.proc = self._start()

    def reap(self) -> bool:
        """Whether the worker process had ended (killed from outside, say): if so it is reaped now, so that no zombie
        is left, and a fresh one starts at the next query. Call it only while no query is under way."""
        if self.proc is not None and self.proc.poll() is not None:
            self._retire()
            return True
        return False

    def _retire(self) -> None:
        """Stop the worker (any replies still to come are dropped with it); the next query starts a fresh one."""
        if self.proc is not None:
            self._kill(self.proc)
            self.proc, self.replaced = None, self.replaced + 1

    def _send(self, queries: Sequence[Query], refused: list[str | None], first: int, end: float,
              most: int = BATCH_QUERIES) -> list[int]:
        """Send the worker (started if need be) the next batch from ``first`` on (at most ``most`` queries), the
        refused left out; its indices. The worker skips what it has not started by ``end`` (monotonic seconds)."""
        self.open()
        batch, chars = [], 0
        for i in range(first, len(queries)):
            if refused[i] is None:
                if batch and (len(batch) == most or chars + len(queries[i].sql) > BATCH_CHARS):
                    break
                batch.append(i)
                chars += len(queries[i].sql)
        with contextlib.suppress(OSError, ValueError):  # a worker that cannot be written to fails the first query
            _write_frame(self.proc.stdin, {"run_seconds": None if end == math.inf else end - time.monotonic(),
                                           "batch": [queries[i]._asdict() for i in batch]})
        return batch

    def _lost(self, proc: subprocess.Popen | ForkedWorker, started: float, timeout: float) -> Outcome:
        """The outcome of a query whose reply never came (the worker is killed and replaced): a timeout when the
        worker was still running it, else how the worker ended."""
        alive = proc.poll() is None
        self._kill(proc)
        self.proc, self.replaced = None, self.replaced + 1
        seconds = time.monotonic() - started
        if alive:
            return Outcome(None, f"timeout: stopped after {seconds:.1f} s (limit {timeout:g} s; its worker process "
                                 "was killed)", seconds, timed_out=True)
        code = proc.returncode
        how = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit code {code}"
        return Outcome(None, f"the query ended its worker process ({how}): over its memory cap of "
                             f"{self.cap_bytes // 2**20} MiB or its CPU time, or it crashed DuckDB", seconds)

    def close(self) -> None:
        """End the child; RuntimeError when the sandbox database changed while candidates ran."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            _write_frame(proc.stdin, {"finish": True})
            reply = _read_frame(proc.stdout.fileno(), time.monotonic() + 30)
        except (OSError, ValueError):
            reply = None
        self._kill(proc)
        if reply is not None:
            self.peak_bytes = max(self.peak_bytes, int(reply.get("peak_bytes", 0)))
            if not reply.get("unchanged"):
                raise RuntimeError(f"{self.tables_dir}: the sandbox database changed while candidates ran; "
                                   "scores from this run cannot be trusted")


# --------------------------------------------------------------------------- the pack


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the pack file ``path``, which may hold at most ``limit`` (InputError naming it otherwise, before
    more than that is read; ``what`` it holds, for the message)."""
    try:  # a link is followed (a Hub download's files are links to its blobs), a FIFO or device is refused unread
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"not a regular file: {path}")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{path}: {what} larger than {limit // 2**20} MiB, more than any pack holds; "
                         "the pack is damaged or hostile, refused before reading it")
    return data


def questions_text(path: Path) -> str:
    """The text of a pack's questions file ``path``: refused unread when it holds more than
    :data:`MAX_QUESTIONS_BYTES`, and unparsed when it holds more than :data:`MAX_JSON_VALUES` JSON objects, lists
    and list items (each a Python object once parsed: a file of ``[{},{},...]`` within the size would otherwise take
    gigabytes), as every reader of questions takes it."""
    data = read_bounded(path, MAX_QUESTIONS_BYTES, "the questions")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); the pack is damaged") from None
    values = text.count(",") + text.count("[") + text.count("{")  # at least as many as the values it holds
    if values > MAX_JSON_VALUES:
        raise InputError(f"{path}: holds up to {values:,} JSON values, more than the {MAX_JSON_VALUES:,} any pack "
                         "holds; the pack is damaged or hostile, refused before parsing it")
    return text


def load_questions(pack: Path) -> list[dict]:
    """Every question record of a pack, scorable or not (InputError naming the line of a bad one). At most
    :data:`MAX_QUESTIONS_BYTES` and :data:`MAX_QUESTIONS` are read (:func:`questions_text`)."""
    path = Path(pack) / QUESTIONS_FILE
    text = questions_text(path)
    records, seen = [], {}
    for number, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        if len(records) == MAX_QUESTIONS:
            raise InputError(f"{path}:{number}: more than {MAX_QUESTIONS:,} questions, more than any pack holds; "
                             "the pack is damaged or hostile")
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not valid JSON: {exc}") from None
        except RecursionError:
            raise InputError(f"{path}:{number}: not valid JSON: nested too deeply") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise InputError(f"{path}:{number}: a question record needs an id")
        if record["id"] in seen:
            raise InputError(f"{path}:{number}: duplicate question id {record['id']!r} "
                             f"(first at line {seen[record['id']]})")
        seen[record["id"]] = number
        if scorable(record) and answer_type_of(record) not in SCALAR_TYPES + (ROWS_TYPE,):
            raise InputError(f"{path}:{number}: unknown answer_type {record.get('answer_type')!r}; "
                             f"use one of {', '.join(SCALAR_TYPES + (ROWS_TYPE,))}")
        check_answer_rows(record, f"{path}:{number}")
        records.append(record)
    return records


# --------------------------------------------------------------------------- the holdout answer key
# A public pack carries each holdout question's text but not its gold SQL or answer: in their place a
# commitment, SHA-256 of a secret salt and the canonical JSON of what was withheld. The answer key is a
# folder beside the pack (PACK.holdout-key/holdout.jsonl, never published with it); with it, the holdout
# is scored too, each record checked against its commitment first.

HOLDOUT_KEY_SUFFIX = ".holdout-key"
HOLDOUT_FILE = "holdout.jsonl"
WITHHELD = ("gold_sql", "expected_answer")
COMMITMENT_RULE = ('"sha256:" + SHA-256 (hex) of the UTF-8 bytes of salt + "\\n" + the JSON of {"id", "gold_sql", '
                   '"expected_answer"} with sorted keys, separators "," and ":", non-ASCII kept')


def commitment(record: dict, salt: str) -> str:
    """The commitment to a holdout question's withheld gold SQL and answer (:data:`COMMITMENT_RULE`)."""
    body = json.dumps({"id": record["id"], **{k: record.get(k) for k in WITHHELD}}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(f"{salt}\n{body}".encode()).hexdigest()


def holdout_key_beside(pack: str | Path) -> Path:
    """Where a pack's holdout answer key is written: ``PACK.holdout-key`` beside the pack folder."""
    pack = Path(os.path.abspath(pack))
    return pack.with_name(pack.name + HOLDOUT_KEY_SUFFIX)


def with_holdout_key(records: list[dict], key_dir: str | Path) -> list[dict]:
    """``records`` with each holdout question's gold SQL and answer filled in from the answer key at
    ``key_dir``, every one checked against its commitment. InputError naming the key file and the
    question when the key does not match the pack (another version's key, or an edited one)."""
    path = Path(key_dir) / HOLDOUT_FILE
    try:
        lines = jsonl_lines(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the holdout answer key: {exc.strerror or exc}") from None
    by_id = {r["id"]: r for r in records}
    revealed = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            qid, salt = entry["id"], entry["salt"]
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{path}:{number}: not a holdout key record (id, salt, gold_sql, "
                             "expected_answer)") from None
        public = by_id.get(qid)
        if public is None or public.get("split") != "holdout":
            raise InputError(f"{path}:{number}: {printable(qid)} is not a holdout question of this pack; "
                             "use the answer key written with this pack version")
        if commitment(entry, str(salt)) != public.get("commitment"):
            raise InputError(f"{path}:{number}: {printable(qid)} does not match its commitment in "
                             f"{QUESTIONS_FILE}; the key was edited or belongs to another version")
        check_answer_rows(entry, f"{path}:{number}")
        revealed[qid] = {k: entry.get(k) for k in WITHHELD}
    missing = [r["id"] for r in records if r.get("commitment") and r["id"] not in revealed]
    if missing:
        raise InputError(f"{path}: no answer for holdout question(s) {', '.join(map(printable, missing[:10]))}; "
                         "use the answer key written with this pack version")
    return [{**r, **revealed[r["id"]]} if r["id"] in revealed else r for r in records]


def pack_questions(pack: str | Path, holdout_key: str | Path | None = None) -> tuple[list[dict], Path | None]:
    """The pack's question records, with the holdout's answers from ``holdout_key`` or, when that is
    None, from the key beside the pack if there is one; and the key folder used (None: the holdout
    stays unscorable, as in a downloaded public pack)."""
    records = load_questions(Path(pack))
    if not any(r.get("split") == "holdout" and r.get("commitment") for r in records):
        return records, None
    key = Path(holdout_key) if holdout_key is not None else holdout_key_beside(pack)
    if holdout_key is None and not (key / HOLDOUT_FILE).is_file():
        return records, None
    try:
        return with_holdout_key(records, key), key
    except InputError as exc:
        if holdout_key is not None:
            raise
        raise InputError(f"{exc}; this is the answer key found beside the pack (another version's, or edited): move "
                         "it away, or give the pack's own with --holdout-key") from None


def check_answer_rows(record: dict, where: str) -> None:
    """InputError naming ``where`` (file:line) when a question's expected answer has, on some rotation, more rows
    than any query result may have (:data:`MAX_FETCH_ROWS`, every result's cap: rule bird, audit, export)."""
    value = record.get("expected_answer")
    answers = value.values() if isinstance(value, dict) else (value,)
    rows = max((len(a) for a in answers if isinstance(a, list)), default=0)
    if rows > MAX_FETCH_ROWS:
        raise InputError(f"{where}: question {printable(record.get('id'))!r}: its expected answer has {rows:,} rows, "
                         f"more than any query result may have ({MAX_FETCH_ROWS:,}); the pack is damaged or was not "
                         "made by evalpack")


def scorable(record: dict) -> bool:
    """Whether a question can be scored: it has a gold SQL and an expected answer (imported packs keep
    records without them; those are skipped), and that answer is not only NULL (:func:`only_null`)."""
    return isinstance(record.get("gold_sql"), str) and bool(record["gold_sql"].strip()) \
        and record.get("expected_answer") is not None and not only_null(record)


def only_null(record: dict) -> bool:
    """Whether a result-set question's answer, on every rotation, is rows holding nothing but NULL (TPC-H's Q17 on a
    small scale factor: one row, NULL). NULL equals NULL in a result set, so ``SELECT NULL`` would be correct: such
    a question measures nothing and is not scored; reports list it apart (``null_answer``), and import marks it."""
    if answer_type_of(record) != ROWS_TYPE:
        return False
    expected = record.get("expected_answer")
    answers = list(expected.values()) if isinstance(expected, dict) else [expected]
    return bool(answers) and all(
        isinstance(rows, list) and bool(rows)
        and all(isinstance(row, list) and all(cell is None for cell in row) for row in rows) for rows in answers)


def kind_of(record: dict) -> str:
    """A question's family: its ``kind``, else (a Misata question) its ``source.kind``, else ``?``."""
    kind = record.get("kind")
    if kind is None and isinstance(record.get("source"), dict):
        kind = record["source"].get("kind")
    return kind if isinstance(kind, str) else "?"


def is_unanswerable(record: dict) -> bool:
    """Whether declining is a question's correct answer (``answerable: false``): no SQL on the pack's schema
    answers it, so any SQL is wrong, even SQL that runs."""
    return record.get("answerable") is False


def answer_type_of(record: dict) -> str:
    """The record's answer_type, or the one its expected answer implies when the field is absent."""
    given = record.get("answer_type")
    if given is not None:
        return given
    value = record.get("expected_answer")
    if isinstance(value, dict) and value:
        value = next(iter(value.values()))
    if isinstance(value, list):
        return ROWS_TYPE
    if isinstance(value, str):
        return "string"
    return "integer" if isinstance(value, int) and not isinstance(value, bool) else "number"


def expected_for(record: dict, rotation: str) -> Any:
    """A question's expected answer on one rotation (shared or rotated answers)."""
    value = record["expected_answer"]
    if not isinstance(value, dict):
        return value
    if rotation not in value:
        raise InputError(f"questions.jsonl: {record.get('id')} has no expected answer for rotation {rotation}")
    return value[rotation]


def rotations(pack: Path) -> list[str]:
    """The rotation folders of a pack, in seed order."""
    root = Path(pack) / ROTATIONS_DIR
    if not root.is_dir():
        raise InputError(f"{root}: no {ROTATIONS_DIR} folder; is {pack} a pack?")
    found = [p.name for p in root.iterdir() if p.is_dir() and ROTATION_FOLDER.fullmatch(p.name)]
    return sorted(found, key=lambda n: int(ROTATION_FOLDER.fullmatch(n).group(1)))


def _tables_dir(pack: Path, rotation: str) -> Path:
    return Path(pack) / ROTATIONS_DIR / rotation / TABLES_DIR


# --------------------------------------------------------------------------- packs made by Misata
# `misata evalpack` (Misata 0.9.8, the system evalpack replaces) writes its tables as CSV: one database in
# tables/, or with --rotations N one per rotations/seed-<n>/tables/. manifest.json names misata_version and
# holds the schema (column types included). Each database folder holds attestation.intoto.json, a bare in-toto
# Statement v1 whose subjects are that database's table files only, and attestation.dsse.json, the same
# Statement in a DSSE envelope that Misata leaves unsigned. Nothing pins questions.jsonl (the gold SQL and the
# answers), manifest.json, the certificates, README.md or the scripts. evalpack scores such a pack with its own
# rules (comparison, sandbox, candidates) and every report says whose pack it is and what is not covered.

MANIFEST_FILE = "manifest.json"
MISATA_ROTATION = re.compile(r"seed-(\d+)")
MISATA_ENVELOPE = "attestation.dsse.json"
MISATA_PREDICATE = "https://misata.studio/attestation/certificate/v1"
# Misata's column types (its schema's canonical names) as DuckDB types; foreign keys take their parent key's
MISATA_TYPES = {"int": "BIGINT", "float": "DOUBLE", "date": "DATE", "datetime": "TIMESTAMP", "boolean": "BOOLEAN",
                "text": "VARCHAR", "categorical": "VARCHAR"}


@dataclass(frozen=True)
class PackSource:
    """Who made a pack and where its databases are (:func:`pack_source`). ``databases``: (rotation name, the
    folder holding its ``tables/``) in seed order. ``producer`` is ``evalpack`` (Parquet tables) or ``misata``
    (CSV tables, read with the DuckDB types of ``csv_types``: table -> column -> type, from its manifest)."""

    producer: str
    version: str | None
    databases: tuple[tuple[str, Path], ...]
    csv_types: dict[str, dict[str, str]] | None = None

    def tables_dir(self, rotation: str) -> Path:
        return dict(self.databases)[rotation] / TABLES_DIR

    @property
    def label(self) -> str:
        return f"misata {self.version}" if self.producer == "misata" else "evalpack"


def read_manifest(pack: Path) -> dict[str, Any] | None:
    """``manifest.json`` of ``pack`` as a JSON object, or None when there is none or it cannot be read (larger than
    :data:`MAX_MANIFEST_BYTES`, not JSON, not an object): the integrity check and the engine's readers say why."""
    try:
        data = json.loads(read_bounded(Path(pack) / MANIFEST_FILE, MAX_MANIFEST_BYTES, "the manifest").decode("utf-8"))
    except (InputError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def misata_manifest(pack: Path) -> dict[str, Any] | None:
    """``manifest.json`` of ``pack`` when it names ``misata_version`` (a pack `misata evalpack` wrote), else None."""
    data = read_manifest(pack)
    return data if data is not None and isinstance(data.get("misata_version"), str) else None


def rows_declared_for(tables_dir: Path) -> dict[str, int] | None:
    """Rows per table that the manifest of an evalpack pack declares for the rotation whose tables are in
    ``tables_dir`` (``PACK/rotations/seed_<n>/tables``): the most a sandbox loads of each. None when the folder is
    not laid out so or its manifest declares no rows (the memory and scratch limits still bound a load)."""
    tables_dir = Path(tables_dir)
    rotation = tables_dir.parent
    if tables_dir.name != TABLES_DIR or not ROTATION_FOLDER.fullmatch(rotation.name) \
            or rotation.parent.name != ROTATIONS_DIR:
        return None
    manifest = read_manifest(rotation.parent.parent)
    tables = manifest.get("tables") if manifest is not None else None
    declared = {}
    for name, entry in tables.items() if isinstance(tables, dict) else ():
        rows = entry.get("rows") if isinstance(entry, dict) else None
        count = rows.get(rotation.name) if isinstance(rows, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            declared[str(name)] = count
    return declared or None


def misata_column_types(manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    """DuckDB types per table and column from a Misata manifest's ``schema`` (MISATA_TYPES; a foreign key
    gets its parent key's type); columns of other types, and anything malformed, are left to sniffing."""
    schema = manifest.get("schema")
    columns = schema.get("columns") if isinstance(schema, dict) else None
    declared: dict[str, dict[str, str]] = {}
    for table, cols in (columns.items() if isinstance(columns, dict) else ()):
        for col in cols if isinstance(cols, list) else ():
            if isinstance(col, dict) and isinstance(col.get("name"), str) and isinstance(col.get("type"), str):
                declared.setdefault(str(table), {})[col["name"]] = col["type"]
    types = {table: {c: MISATA_TYPES[t] for c, t in cols.items() if t in MISATA_TYPES} for table, cols in declared.items()}
    for rel in schema.get("relationships") or () if isinstance(schema, dict) else ():
        if not isinstance(rel, dict):
            continue
        parent = types.get(str(rel.get("parent_table")), {}).get(str(rel.get("parent_key")))
        child, key = str(rel.get("child_table")), str(rel.get("child_key"))
        if parent and declared.get(child, {}).get(key) == "foreign_key":
            types[child][key] = parent
    return {table: cols for table, cols in types.items() if cols}


def pack_source(pack: Path) -> PackSource:
    """Where ``pack``'s databases are: ``rotations/seed_<n>/tables/*.parquet`` (evalpack), or a pack Misata wrote
    (its manifest names ``misata_version``): ``tables/*.csv``, or ``rotations/seed-<n>/tables/*.csv``. InputError
    when there is none."""
    pack = Path(pack)
    manifest = misata_manifest(pack)
    if manifest is None:
        root = pack / ROTATIONS_DIR
        names = rotations(pack) if root.is_dir() else []
        if names:
            return PackSource("evalpack", None, tuple((name, root / name) for name in names))
        if (pack / TABLES_DIR).is_dir() or root.is_dir() and any(MISATA_ROTATION.fullmatch(p.name) for p in root.iterdir()):
            raise InputError(f"{pack}: laid out like a pack Misata wrote (tables/ or rotations/seed-<n>/), but its "
                             f"{MANIFEST_FILE} does not name misata_version; pass the folder `misata evalpack -o` wrote, "
                             "with its manifest")
        rotations(pack)  # no rotations folder at all: its own error
        raise InputError(f"{root}: no seed_<n> rotation folders")
    version = manifest["misata_version"]
    if (pack / ROTATIONS_DIR).is_dir():
        found = sorted((int(m.group(1)), p) for p in (pack / ROTATIONS_DIR).iterdir()
                       if p.is_dir() and (m := MISATA_ROTATION.fullmatch(p.name)))
        databases = tuple((p.name, p) for _, p in found)
        if not databases:
            raise InputError(f"{pack / ROTATIONS_DIR}: a pack misata {version} wrote, without seed-<n> rotation folders")
    else:
        seed = manifest.get("seed")
        databases = ((f"seed-{seed}" if isinstance(seed, int) and not isinstance(seed, bool) else TABLES_DIR, pack),)
    for _, folder in databases:
        if not (folder / TABLES_DIR).is_dir():
            raise InputError(f"{folder / TABLES_DIR}: missing; a pack misata {version} wrote keeps each database's CSV "
                             "tables there")
    return PackSource("misata", version, databases, misata_column_types(manifest))


# --------------------------------------------------------------------------- integrity
# The one integrity check of a pack: `python verify.py`, `evalpack score`, `evalpack verify`
# (evalpack.attest.verify_pack) and `evalpack publish` all run inspect_integrity and differ only
# in how they report it.

UNSIGNED_NOTE = (f"UNSIGNED: {ATTESTATION} carries no signature; its hashes show the files are intact, "
                 "not who made them: anyone could have written it")
UNATTESTED_NOTE = (f"NOT CHECKED: the pack has no {ATTESTATION} and --allow-unattested was given; nothing shows "
                   "these files are the ones their publisher made")
PUBLIC_KEY_ENV = "EVALPACK_PUBLIC_KEY"  # the public key to check signatures with when --public-key is not given
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_BASE64_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


@dataclass(frozen=True)
class Integrity:
    """A pack that passed the integrity check: ``status`` is unsigned | signed (not checked) | verified."""

    status: str
    files: int
    message: str


@dataclass(frozen=True)
class IntegrityReport:
    """Everything the integrity check found, in the order it was checked.

    ``lines`` are ``(state, name, text)``: state ``ok``, ``note`` or ``fail``; ``name`` is the POSIX
    name inside the pack that a failure is about (the attestation itself for envelope and statement
    problems). ``signature`` is verified | not checked | unsigned | failed; ``files`` the number of
    subjects of a well-formed statement (0 otherwise).
    """

    lines: tuple[tuple[str, str, str], ...]
    signature: str
    files: int
    signature_line: str
    producer: str = "evalpack"  # or "misata <version>": a pack Misata wrote (:func:`pack_source`)
    uncovered: tuple[str, ...] = ()  # the files of a Misata pack that no attestation pins

    @property
    def problems(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, text) for state, name, text in self.lines if state == "fail")

    @property
    def ok(self) -> bool:
        return not self.problems


def pack_entries(pack: Path) -> tuple[dict[str, Path], list[str]]:
    """(files by sorted POSIX relative name -> the path to read, refused entries' names) of ``pack``,
    without the attestation (:func:`walk_pack`)."""
    found = walk_pack(pack)
    return found.files, sorted(found.refused)


# A pack downloaded from the Hub holds files that are the Hub's, not the pack's: every Hub repo has a
# root .gitattributes, and `snapshot_download(..., local_dir=DIR)` keeps its download metadata in
# DIR/.cache/huggingface/. Exactly these are left out of a download's check; nothing else is.
HUB_GITATTRIBUTES = ".gitattributes"
HUB_METADATA = ".cache/huggingface"
NOT_REGULAR = "not a regular file (symlink or special file); a pack holds regular files only"


@dataclass(frozen=True)
class PackFiles:
    """What a pack folder holds (:func:`walk_pack`). ``files``: sorted POSIX relative name -> the path
    to read (the blob for a link into the pack's own Hub cache); ``refused``: name -> why it is not a
    pack file (a symlink anywhere else, a special file); ``folders``: every folder; ``ignored``: the
    Hub's own files of a download (``.gitattributes``, ``.cache/huggingface/``), not checked."""

    files: dict[str, Path]
    refused: dict[str, str]
    folders: list[str]
    ignored: list[str]


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def hub_blobs(pack: Path) -> Path | None:
    """The ``blobs`` folder of the Hugging Face cache that ``pack`` is a snapshot of, or None.

    A ``snapshot_download`` into the cache is ``<cache>/datasets--<owner>--<name>/snapshots/<commit>/``
    whose files are symlinks to ``../../blobs/<hash>``: that repo cache's own ``blobs`` folder (a real
    folder, not a link) is the only place a pack's link may lead."""
    real = Path(os.path.realpath(pack))
    repo = real.parent.parent
    if real.parent.name != "snapshots" or not repo.name.startswith("datasets--"):
        return None
    return repo / "blobs" if _real_dir(repo / "blobs") else None


def _pack_file(path: Path, blobs: Path | None) -> tuple[Path | None, str]:
    """(the path to read, "") for a regular file, or for a symlink that resolves to a regular file
    directly inside ``blobs`` (see :func:`hub_blobs`); else (None, why it is refused). A link is only
    resolved (lstat and readlink), never opened, until it is known to lead there; a loop is reported."""
    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        return path, ""
    if not stat.S_ISLNK(mode) or blobs is None:
        return None, NOT_REGULAR
    try:
        target = Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        return None, (f"not a regular file: a symlink that does not resolve ({exc.strerror or exc}: a loop, or a "
                      "link to nothing); it was not followed")
    if target.parent != blobs or not stat.S_ISREG(os.lstat(target).st_mode):
        return None, (f"not a regular file: a symlink to {target}, outside {blobs} (this Hub snapshot's own "
                      "cache); a downloaded pack's links may lead only there")
    return target, ""


def check_pack_entries(pack: Path) -> None:
    """PackIntegrityError naming each entry of ``pack`` that is not a pack file (a symlink leading outside it, a
    FIFO, a device: :func:`walk_pack`), before anything is opened: the gold SQL runs while the files are re-hashed,
    and a table that is a link to elsewhere must not be read meanwhile (nor a FIFO waited on)."""
    refused = walk_pack(pack).refused if _real_dir(pack) else {}
    if refused:
        raise integrity_error(pack, sorted(refused.items()))


def integrity_error(pack: Path, problems: Iterable[tuple[str, str]]) -> PackIntegrityError:
    """The error for a pack's bad entries: one line per (name, what is wrong)."""
    return PackIntegrityError("\n".join(f"{pack / printable(name)}: {printable(why)}" for name, why in problems))


def walk_pack(pack: Path, listed: frozenset[str] | set[str] = frozenset()) -> PackFiles:
    """Every entry of ``pack`` (the attestation aside), links not followed: a pack holds regular files,
    except that in a snapshot of the Hugging Face cache a file may be a symlink into that repo cache's
    own ``blobs`` folder (:func:`hub_blobs`). In a Hub download (a cache snapshot, or a ``local_dir``
    download: ``.cache/huggingface/`` is a real folder) a root ``.gitattributes`` that ``listed`` does not
    name and ``.cache/huggingface/`` are ignored, and ``.cache`` is not a pack folder; the rest of
    ``.cache`` is walked like any other folder."""
    pack = Path(pack)
    blobs = hub_blobs(pack)
    local_dir = _real_dir(pack / ".cache") and _real_dir(pack / HUB_METADATA)
    download = local_dir or blobs is not None
    files: dict[str, Path] = {}
    refused: dict[str, str] = {}
    folders: list[str] = []
    ignored: list[str] = []
    for folder, dirnames, filenames in os.walk(pack, followlinks=False):
        for name in dirnames + filenames:
            path = Path(folder) / name
            rel = path.relative_to(pack).as_posix()
            mode = os.lstat(path).st_mode
            if local_dir and rel == HUB_METADATA:
                dirnames.remove(name)
                ignored.append(rel + "/")
            elif local_dir and rel == ".cache":
                continue
            elif download and rel == HUB_GITATTRIBUTES and rel not in listed and not stat.S_ISDIR(mode):
                ignored.append(rel)
            elif stat.S_ISDIR(mode):
                folders.append(rel)
            elif rel != ATTESTATION:
                source, why = _pack_file(path, blobs)
                if source is None:
                    refused[rel] = why
                else:
                    files[rel] = source
    return PackFiles(dict(sorted(files.items())), dict(sorted(refused.items())), sorted(folders), sorted(ignored))


def _open_regular(path: Path):
    """``path`` opened for binary reading, refusing a symlink or a special file found there now (the
    walk saw a regular file; O_NONBLOCK so that a FIFO put in its place cannot stall the open)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is no longer a regular file")
    return os.fdopen(fd, "rb")


def sha256_file(path: Path, *, nofollow: bool = False) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks; ``nofollow``: the file must be a regular
    file, not a link (:func:`_open_regular`)."""
    digest = hashlib.sha256()
    with _open_regular(path) if nofollow else open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack_digest(path: Path) -> str:
    """:func:`sha256_file` of a file :func:`walk_pack` found (not following a link put there since), or
    ``cannot be read (...)``."""
    try:
        return sha256_file(path, nofollow=True)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"


def sha256_files(paths: list[Path], hasher: Callable[[Path], str] = sha256_file) -> list[str]:
    """``hasher`` (:func:`sha256_file`) of each path (hashlib hashes large blocks without the GIL), by
    :func:`map_files`."""
    return map_files(hasher, paths)


def map_files(read: Callable[[Path], Any], paths: list[Path]) -> list[Any]:
    """``read`` of each path on every core, largest file first, returned in the order given: for readers
    that do their work without the GIL (hashing, decoding)."""

    def size(path: Path) -> int:
        try:
            return os.stat(path).st_size
        except OSError:
            return 0

    order = sorted(range(len(paths)), key=lambda i: -size(paths[i]))
    with ThreadPoolExecutor(max_workers=max(1, min(len(paths), os.cpu_count() or 1))) as pool:
        done = dict(zip(order, pool.map(read, [paths[i] for i in order])))
    return [done[i] for i in range(len(paths))]


def read_envelope(pack: Path, name: str = ATTESTATION) -> tuple[dict[str, Any] | None, str | None]:
    """(the DSSE envelope of ``pack`` (in its file ``name``) as JSON, None) or (None, why it cannot be read)."""
    path = Path(pack) / name
    if not path.exists() and not path.is_symlink():
        return None, ("missing, so nothing in this pack is pinned; ask its publisher for the attestation, or pass "
                      "--allow-unattested to use it anyway (every report then says so)")
    source, why = _pack_file(path, hub_blobs(Path(pack)))
    if source is None:
        return None, why
    try:
        with _open_regular(source) as handle:
            data = json.loads(handle.read())
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return None, f"not JSON ({first_line(exc)})"
    if not isinstance(data, dict) or not isinstance(data.get("payload"), str) or not isinstance(
            data.get("payloadType"), str) or not isinstance(data.get("signatures"), list):
        return None, "not a DSSE envelope (needs payload, payloadType and signatures)"
    return data, None


def b64decode(text: Any) -> bytes | None:
    """Standard or URL-safe base64 (DSSE allows either; padding optional), strictly; None if invalid."""
    if not isinstance(text, str):
        return None
    padded = text + "=" * (-len(text) % 4) if "=" not in text else text
    try:
        if _BASE64.fullmatch(text):
            return base64.b64decode(padded, validate=True)
        if _BASE64_URL.fullmatch(text):
            return base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError):
        return None
    return None


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE pre-authentication encoding that a signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def safe_name(name: Any) -> bool:
    """Whether a subject name is a relative POSIX path inside the pack: no empty, ``.`` or ``..``
    segment, no leading ``/``, no backslash, no NUL or other control character, not the attestation."""
    if not isinstance(name, str) or not name or name.startswith("/") or name == ATTESTATION:
        return False
    if "\\" in name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _crypto():
    """cryptography's modules, imported only when a signature is to be checked."""
    try:
        from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    except ImportError:
        raise InputError("checking a signature needs the 'cryptography' package (pip install cryptography); "
                         "or run without --public-key to check the file hashes only") from None
    return InvalidSignature, UnsupportedAlgorithm, hashes, serialization, ec, ed25519


def load_public_key(path: str | Path) -> tuple[Any, str]:
    """(the key, its algorithm) of a PEM public key file (SubjectPublicKeyInfo; ed25519 or ECDSA P-256).
    InputError names the file and what to pass instead."""
    _, unsupported, _, serialization, ec, ed25519 = _crypto()
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the public key ({exc.strerror or exc}); pass the evalpack.pub "
                         "of the key pair the pack was signed with") from None
    if b"PRIVATE KEY-----" in data:
        raise InputError(f"{path}: this is a private key; pass the public key (evalpack.pub) and keep the "
                         "private one secret")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, unsupported) as exc:
        raise InputError(f"{path}: not a PEM public key ({first_line(exc)}); pass the evalpack.pub written by "
                         "`evalpack keygen`") from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key, "ed25519"
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key, "ecdsa-p256"
    raise InputError(f"{path}: unsupported key type; packs are signed with ed25519 or ECDSA P-256 keys")


def signature_verifies(key: Any, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` over ``message`` verifies with ``key``: ed25519 (64 bytes), or ECDSA P-256
    with SHA-256 as DER, the encoding securesystemslib's signers (and evalpack's) write. A raw r||s
    ECDSA signature is not accepted: one encoding per signature, as securesystemslib verifies."""
    invalid, _, hashes, _, ec, ed25519 = _crypto()
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except (invalid, ValueError):
        return False
    return True


def _signature(data: dict[str, Any], payload: bytes, key: tuple[Any, str | None, str | Path | None], name: str,
               unsigned_note: str, lines: list[tuple[str, str, str]]) -> tuple[str, str]:
    """The signature verdict of the DSSE envelope ``data`` (the file ``name``) over ``payload``: (verified | not
    checked | unsigned | failed, the line that says so), its report line appended to ``lines``. ``key``: (the
    public key, its algorithm, its file) or Nones; with a key one signature must verify with it."""
    key, algorithm, public_key = key
    entries = data["signatures"]
    signatures = [(e.get("keyid") if isinstance(e.get("keyid"), str) else "", b64decode(e.get("sig")))
                  for e in entries if isinstance(e, dict)]
    keyids = ", ".join(keyid[:16] or "(none)" for keyid, _ in signatures)
    if len(signatures) != len(entries) or any(sig is None for _, sig in signatures):
        lines.append(("fail", name, "a signature entry is malformed (needs sig as base64 text)"))
        return "failed", f"a signature entry of {name} is malformed (needs sig as base64 text)"
    if not signatures and key is not None:
        lines.append(("fail", name, f"UNSIGNED, but --public-key {public_key} was given: the pack carries no "
                                    "signature, so nothing shows it comes from that key"))
        return "failed", f"UNSIGNED, but --public-key {public_key} was given"
    if not signatures:
        lines.append(("note", name, unsigned_note))
        return "unsigned", unsigned_note
    if key is None:
        line = (f"NOT CHECKED: {name} is signed but the signature was not checked, so anyone could have "
                f"signed it (the keyid it names, {keyids}, is the signer's own claim); pass --public-key KEY "
                f"or set {PUBLIC_KEY_ENV} to check it")
        lines.append(("note", name, line))
        return "not checked", line
    if any(signature_verifies(key, sig, pae(data["payloadType"], payload)) for _, sig in signatures):
        # DSSE keyids are unauthenticated hints: any signature that verifies with the given key counts
        line = f"OK signature: {algorithm} key {public_key} signed the statement"
        lines.append(("ok", name, line))
        return "verified", line
    lines.append(("fail", name, f"the signature does not verify with {public_key} ({algorithm} key; envelope keyid "
                                f"{keyids}): the statement was changed after signing, or another key signed it"))
    return "failed", f"the signature does not verify with {public_key}"


def _read_subjects(subjects: list, statement: str, prefix: str, inside: str, fail: Callable[[str, str], None],
                   listed: dict[str, str]) -> bool:
    """Each subject of the statement in the file ``statement`` into ``listed`` (its name after ``prefix`` -> its
    sha256); a malformed one, a name that is not a relative POSIX path inside ``inside``, or one listed twice is
    a failure (``fail(name, text)``). Whether every subject was well formed."""
    well_formed = True
    for i, entry in enumerate(subjects):
        name = entry.get("name") if isinstance(entry, dict) else None
        digest = entry.get("digest") if isinstance(entry, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            fail(statement, f"subject {i} is malformed (needs a name and a lowercase hex sha256 digest)")
        elif not safe_name(name):
            fail(statement, f"subject {name!r} is not a relative POSIX path inside {inside}")
        elif prefix + name in listed:
            fail(prefix + name, f"listed twice in {statement}")
        else:
            listed[prefix + name] = sha
            continue
        well_formed = False
    return well_formed


def inspect_integrity(pack: Path, public_key: str | Path | None = None, *,
                      allow_unattested: bool = False) -> IntegrityReport:
    """Check ``pack`` against its attestation and report every problem; raises only InputError for
    a public key that cannot be used.

    In order: the envelope (``payloadType``); the signature (over the DSSE pre-authentication
    encoding of the payload bytes exactly as decoded; with ``public_key`` one signature must verify,
    and an envelope without signatures fails; without it a signature is reported NOT CHECKED); the
    statement (``_type``, ``predicateType``, one well-formed subject per safe, distinct name); then
    the files: every subject re-hashed, and the regular files on disk (the attestation aside) must be
    exactly the subjects, and every folder must hold a subject, with no symlink or special file anywhere
    (except links into a Hub cache snapshot's own blobs, and the Hub's files of a download: :func:`walk_pack`).

    ``allow_unattested`` (the user's explicit ``--allow-unattested``) turns a missing attestation and
    files or folders it does not list into notes that say so; everything else still fails.
    """
    pack = Path(pack)
    key, algorithm = load_public_key(public_key) if public_key else (None, None)
    if misata_manifest(pack) is not None:
        return _inspect_misata(pack, (key, algorithm, public_key), allow_unattested)
    lines: list[tuple[str, str, str]] = []

    def fail(name: str, text: str) -> None:
        lines.append(("fail", name, text))

    def unlisted(name: str, text: str) -> None:
        lines.append(("note", name, f"ALLOWED (--allow-unattested): {name}: {text}") if allow_unattested
                     else ("fail", name, text))

    data, why = read_envelope(pack)
    if data is None and allow_unattested and not (pack / ATTESTATION).exists():
        lines.append(("note", ATTESTATION, UNATTESTED_NOTE))
        for name, why in walk_pack(pack).refused.items():
            fail(name, why)
        return IntegrityReport(tuple(lines), "unattested", 0, UNATTESTED_NOTE)
    if data is None:
        fail(ATTESTATION, why or "unreadable")
        return IntegrityReport(tuple(lines), "failed", 0, f"{ATTESTATION} {why}")
    if data["payloadType"] != PAYLOAD_TYPE:
        fail(ATTESTATION, f"payloadType is {data['payloadType']!r}, expected {PAYLOAD_TYPE!r}")
    payload = b64decode(data["payload"])
    if payload is None:
        fail(ATTESTATION, "the payload is not valid base64")
        return IntegrityReport(tuple(lines), "failed", 0, "the payload is not valid base64")

    signature, line = _signature(data, payload, (key, algorithm, public_key), ATTESTATION, UNSIGNED_NOTE, lines)

    # the statement
    def done(files: int = 0) -> IntegrityReport:
        return IntegrityReport(tuple(lines), signature, files, line)

    try:
        statement = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        fail(ATTESTATION, f"the payload is not a JSON statement ({first_line(exc)})")
        return done()
    if not isinstance(statement, dict):
        fail(ATTESTATION, "the payload is not a JSON object")
        return done()
    if statement.get("_type") != STATEMENT_TYPE:
        fail(ATTESTATION, f"statement _type is {statement.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        fail(ATTESTATION, f"predicateType is {statement.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        fail(ATTESTATION, "the statement lists no subject")
        return done()
    listed: dict[str, str] = {}
    if not _read_subjects(subjects, ATTESTATION, "", "the pack", fail, listed):
        return done()

    # the files
    found = walk_pack(pack, set(listed))
    if found.ignored:
        lines.append(("note", "", f"IGNORED (the Hub's own files of this download, not pack files): "
                                  f"{', '.join(found.ignored)}"))
    before = len(lines)
    for name, why in found.refused.items():
        fail(name, why)
    on_disk = found.files
    present = [name for name in listed if name in on_disk]
    digests = dict(zip(present, sha256_files([on_disk[name] for name in present], pack_digest)))
    for name, expected in listed.items():
        if name in found.refused:
            continue  # said above: one line per entry
        if name not in on_disk:
            fail(name, f"listed in {ATTESTATION} but missing from the pack")
        elif not _SHA256.fullmatch(digests[name]):
            fail(name, digests[name])
        elif digests[name] != expected:
            fail(name, f"sha256 {digests[name][:16]}... differs from the attested {expected[:16]}... (the file "
                       "was changed)")
    for name in on_disk:
        if name not in listed:
            unlisted(name, f"in the pack but not in {ATTESTATION} (a file was added)")
    attested_folders = {parent.as_posix() for name in listed for parent in PurePosixPath(name).parents}
    for name in found.folders:
        if name not in attested_folders:
            unlisted(name, f"a folder that holds no file of {ATTESTATION} (a folder was added; an extra "
                           "rotation folder would change what is scored)")
    if len(lines) == before:
        lines.append(("ok", "", f"OK files: {len(listed)} files match the attested sha256, none missing, none extra"))
    return done(len(listed))


MISATA_UNSIGNED = ("UNSIGNED: Misata leaves its DSSE envelopes unsigned (attestation.dsse.json); the hashes show the "
                   "tables are intact, not who made them: anyone could have written them")


def _inspect_misata(pack: Path, key: tuple[Any, str | None, str | Path | None],
                    allow_unattested: bool) -> IntegrityReport:
    """:func:`inspect_integrity` for a pack Misata wrote (:func:`pack_source`): per database, its Statement
    (``attestation.intoto.json``: type, subjects re-hashed, every file of its ``tables/`` a subject), its envelope
    (``attestation.dsse.json``: the Statement's exact bytes; the signature as for evalpack's), no symlink or special
    file, no folder under ``rotations/`` but the databases; then a note naming every file no Statement covers."""
    source = pack_source(pack)
    lines: list[tuple[str, str, str]] = []

    def fail(name: str, text: str) -> None:
        lines.append(("fail", name, text))

    found = walk_pack(pack)
    files, refused = dict(found.files), dict(found.refused)
    if (pack / ATTESTATION).exists() or (pack / ATTESTATION).is_symlink():  # walk_pack sets evalpack's own aside
        path, why = _pack_file(pack / ATTESTATION, hub_blobs(pack))
        if path is None:
            refused[ATTESTATION] = why
        else:
            files[ATTESTATION] = path
    lines.append(("note", MANIFEST_FILE, f"MISATA: {MANIFEST_FILE} says misata {source.version} made this pack; evalpack "
                  f"reads its {len(source.databases)} database(s) of CSV tables and scores them with evalpack's rules"))
    for name, why in refused.items():
        fail(name, why)
    listed: dict[str, str] = {}
    own: set[str] = set()  # the attestation files themselves
    verdicts: list[str] = []
    for _, root in source.databases:
        prefix = "" if root == pack else root.relative_to(pack).as_posix() + "/"
        statement_name, envelope_name = prefix + ATTESTATION, prefix + MISATA_ENVELOPE
        own.update((statement_name, envelope_name, prefix + "verify_attestation.py"))
        if statement_name not in files:
            if allow_unattested:
                lines.append(("note", statement_name, f"ALLOWED (--allow-unattested): {statement_name} is missing, so "
                              "nothing pins this database's tables"))
            elif statement_name not in refused:
                fail(statement_name, "missing, so nothing pins this database's tables; pass --allow-unattested to use "
                                     "it anyway (every report then says so)")
            verdicts.append("unattested")
            continue
        try:
            with _open_regular(files[statement_name]) as handle:
                raw = handle.read()
            statement = json.loads(raw)
        except OSError as exc:
            fail(statement_name, f"cannot be read ({exc.strerror or exc})")
            continue
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            fail(statement_name, f"not a JSON statement ({first_line(exc)})")
            continue
        if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
            fail(statement_name, f"not an in-toto Statement (_type is not {STATEMENT_TYPE!r})")
            continue
        if statement.get("predicateType") != MISATA_PREDICATE:
            fail(statement_name, f"predicateType is {statement.get('predicateType')!r}, expected Misata's "
                                 f"{MISATA_PREDICATE!r}")
        predicate = statement.get("predicate")
        if isinstance(predicate, dict) and predicate.get("result") not in (None, "PASSED"):
            lines.append(("note", statement_name, f"Misata's own invariants did not all hold on this database (its "
                                                  f"result is {predicate.get('result')!r}); evalpack scores it anyway"))
        subjects = statement.get("subject")
        if not isinstance(subjects, list) or not subjects:
            fail(statement_name, "the statement lists no subject")
            continue
        _read_subjects(subjects, statement_name, prefix, "its database folder", fail, listed)
        tables = f"{prefix}{TABLES_DIR}/"
        for name in files:
            if name.startswith(tables) and name not in listed:
                fail(name, f"in {tables} but not in {statement_name} (a table was added; it would be loaded and "
                           "queried)")
        if envelope_name not in files:
            lines.append(("note", envelope_name, f"missing; {statement_name} stands unsigned"))
            verdicts.append("unsigned")
            continue
        envelope, why = read_envelope(pack, envelope_name)
        if envelope is None:
            fail(envelope_name, why or "unreadable")
            continue
        if envelope["payloadType"] != PAYLOAD_TYPE:
            fail(envelope_name, f"payloadType is {envelope['payloadType']!r}, expected {PAYLOAD_TYPE!r}")
        payload = b64decode(envelope["payload"])
        if payload != raw:
            fail(envelope_name, f"its payload is not the bytes of {statement_name} (one of them was changed)")
            continue
        verdicts.append(_signature(envelope, payload, key, envelope_name, MISATA_UNSIGNED, lines)[0])
    present = [name for name in listed if name in files]
    digests = dict(zip(present, sha256_files([files[name] for name in present], pack_digest)))
    for name, expected in listed.items():
        if name in refused:
            continue
        if name not in files:
            fail(name, "listed in its database's attestation but missing from the pack")
        elif not _SHA256.fullmatch(digests[name]):
            fail(name, digests[name])
        elif digests[name] != expected:
            fail(name, f"sha256 {digests[name][:16]}... differs from the attested {expected[:16]}... (the file was "
                       "changed)")
    databases = {root.relative_to(pack).as_posix() for _, root in source.databases if root != pack}
    for name in found.folders:
        if name.count("/") == 1 and name.startswith(ROTATIONS_DIR + "/") and name not in databases:
            fail(name, "a folder under rotations/ that is not a seed-<n> database of this pack (an extra rotation "
                       "would change what is scored)")
    if listed and not any(state == "fail" for state, _, _ in lines):
        lines.append(("ok", "", f"OK tables: {len(listed)} table files match Misata's attestations, none missing, "
                                "none extra"))
    uncovered = [f"{name} (its gold SQL and answers)" if name == QUESTIONS_FILE else name
                 for name in sorted(files, key=lambda n: (n != QUESTIONS_FILE, n)) if name not in listed and name not in own]
    if uncovered:
        shown = ", ".join(uncovered[:12]) + (f" and {len(uncovered) - 12} more" if len(uncovered) > 12 else "")
        lines.append(("note", "", f"NOT COVERED by Misata's attestation (it pins the tables only; nothing shows these "
                                  f"are the files Misata wrote): {shown}"))
    order = ("failed", "unattested", "unsigned", "not checked", "verified")
    signature = next((v for v in order if v in verdicts), "failed")
    bare = verdicts.count("unattested")
    line = {"unsigned": MISATA_UNSIGNED,
            "unattested": f"NOT CHECKED: {bare} of {len(source.databases)} databases have no attestation and "
                          "--allow-unattested was given; nothing shows their tables are the ones Misata wrote",
            "verified": f"OK signature: every database's envelope is signed by {key[2]}",
            "not checked": "NOT CHECKED: the envelopes are signed but no --public-key was given, so anyone could have "
                           "signed them",
            "failed": "a database's attestation failed its check"}[signature]
    said = [(state, text) for state, _, text in lines]
    once = [entry for i, entry in enumerate(lines) if entry[0] != "note" or (entry[0], entry[2]) not in said[:i]]
    return IntegrityReport(tuple(once), signature, len(listed), line, producer=f"misata {source.version}",
                           uncovered=tuple(uncovered))


def check_integrity(pack: Path, public_key: str | Path | None = None, *, allow_unattested: bool = False) -> Integrity:
    """:func:`inspect_integrity` for the scorer: what was checked, or PackIntegrityError naming each
    bad file (one line each). InputError for a public key that cannot be used."""
    pack = Path(pack)
    report = inspect_integrity(pack, public_key, allow_unattested=allow_unattested)
    if not report.ok:
        raise integrity_error(pack, report.problems)
    allowed = [text for state, _, text in report.lines if state == "note" and text.startswith("ALLOWED")]
    extra = f"; {len(allowed)} unattested entries ALLOWED (--allow-unattested)" if allowed else ""
    if report.producer != "evalpack":
        return Integrity(report.signature if report.signature != "not checked" else "signed", report.files,
                         misata_note(report, extra))
    if report.signature == "unattested":
        return Integrity("unattested", 0, UNATTESTED_NOTE)
    status = "signed" if report.signature == "not checked" else report.signature
    return Integrity(status, report.files, f"{report.files} files match {ATTESTATION}{extra}; "
                                           f"{report.signature_line}")


def misata_note(report: IntegrityReport, extra: str = "") -> str:
    """What the integrity check of a pack Misata wrote showed, in one line: whose pack it is, what matched, what
    its attestation does not cover, and the signature."""
    shown = ", ".join(report.uncovered[:8]) + (f" and {len(report.uncovered) - 8} more" if len(report.uncovered) > 8
                                               else "")
    return (f"a pack {report.producer} wrote, scored with evalpack's rules: {report.files} table files match its "
            f"attestations{extra}; NOT COVERED by them (nothing shows these are Misata's): {shown or 'nothing'}; "
            f"{report.signature_line}")


# --------------------------------------------------------------------------- candidates


_DECODER = json.JSONDecoder()
_RECORD_KEYS = {"id", "sql", "declined", "confidence"}  # an object with one of these is a record, not an id -> SQL mapping
_WS = re.compile(r"[ \t\n\r]*")


def _scan_members(text: str, start: int) -> tuple[list[tuple[int, Any, Any]], int]:
    """(line, key, value) for each member of the JSON array or object at ``text[start]`` (key is
    None for an array), and the index after it. Raises json.JSONDecodeError."""
    close = "]" if text[start] == "[" else "}"
    members: list[tuple[int, Any, Any]] = []
    line, counted = 1 + text.count("\n", 0, start), start
    i = _WS.match(text, start + 1).end()
    if text[i:i + 1] == close:
        return members, i + 1
    while True:
        line, counted = line + text.count("\n", counted, i), i
        key = None
        if close == "}":
            if text[i:i + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            key, i = _DECODER.raw_decode(text, i)
            i = _WS.match(text, i).end()
            if text[i:i + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _WS.match(text, i + 1).end()
        value, i = _DECODER.raw_decode(text, i)
        members.append((line, key, value))
        i = _WS.match(text, i).end()
        if text[i:i + 1] == ",":
            i = _WS.match(text, i + 1).end()
        elif text[i:i + 1] == close:
            return members, i + 1
        else:
            raise json.JSONDecodeError(f"Expecting ',' or '{close}'", text, i)


@dataclass(frozen=True)
class Candidates:
    """Candidate SQL by question id (None: declined), the line each id came from, and the ids whose
    record is malformed with the reason (such a candidate is wrong, whatever else it holds)."""

    sql: dict[str, str | None]
    lines: dict[str, int]
    form: str
    refused: dict[str, str] = field(default_factory=dict)
    confidence: dict[str, float] = field(default_factory=dict)  # by id, where the record gives one (0 to 1)


MAX_CANDIDATES_BYTES = 256 * 2**20  # a candidates file larger than this is refused before it is read


def _record(path: Path, line: int, obj: Any) -> tuple[str, str | None, str | None, float | None]:
    """(id, SQL or None to decline, why the record is malformed or None, its confidence or None). A record
    without a usable id cannot be any question's: InputError naming the line."""
    where = f"{path}:{line}"
    if not isinstance(obj, dict):
        raise InputError(f'{where}: expected an object {{"id": ..., "sql": ...}}, got {type(obj).__name__}')
    ident = obj.get("id")
    if not isinstance(ident, str) or not ident:
        raise InputError(f'{where}: a candidate needs an "id" (text)')
    declined = obj.get("declined", False)
    sql = obj.get("sql")
    confidence = obj.get("confidence")
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
                                   or not 0 <= confidence <= 1):
        return ident, None, f'malformed candidate (line {line}): "confidence" must be a number from 0 to 1', None
    confidence = None if confidence is None else float(confidence)
    if not isinstance(declined, bool):
        return ident, None, f'malformed candidate (line {line}): "declined" must be true or false', None
    if "sql" in obj and sql is None:  # a model's "no query": declined
        declined = True
    if declined:
        if sql is not None:
            return ident, None, f'malformed candidate (line {line}): both "sql" and "declined": true', None
        return ident, None, None, confidence
    if not isinstance(sql, str):
        return ident, None, f'malformed candidate (line {line}): "sql" must be text (or "declined": true)', None
    return ident, sql, None, confidence


def _loads(text: str) -> Any:
    """json.loads, with every way a hostile text makes it fail (too deep, a number too long) a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_candidates(path: str | Path) -> Candidates:
    """Read a candidates file in any of the three forms; InputError names the file and line."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a folder, a FIFO or a device: nothing to read, or never an end
            raise InputError(f"{path}: not a regular file; pass the candidates file itself")
        if path.stat().st_size > MAX_CANDIDATES_BYTES:
            raise InputError(f"{path}: larger than {MAX_CANDIDATES_BYTES // 2**20} MiB; split the candidates "
                             "into several files")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the candidates file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise InputError(f'{path}: empty file; expected JSON Lines of {{"id": ..., "sql": ...}}, a JSON list of '
                         "those, or a JSON object mapping id to SQL")
    lines = jsonl_lines(text)
    first = next(n for n, line in enumerate(lines) if line.strip())
    start = _WS.match(text).end()
    entries: list[tuple[int, str, str | None, str | None, float | None]] = []
    form = "jsonl"
    try:
        first_obj = _loads(lines[first])
    except ValueError:
        first_obj = None
    more_lines = any(line.strip() for line in lines[first + 1:])
    if text[start] == "[" or (text[start] == "{" and not (isinstance(first_obj, dict)
                                                          and (more_lines or _RECORD_KEYS & set(first_obj)))):
        try:
            members, end = _scan_members(text, start)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # a number too long, nesting too deep
            why = "nested too deeply" if isinstance(exc, RecursionError) else first_line(exc)
            raise InputError(f"{path}: not valid JSON: {why}") from None
        rest = _WS.match(text, end).end()
        if rest != len(text):
            raise InputError(f"{path}:{1 + text.count(chr(10), 0, rest)}: unexpected text after the JSON document")
        if text[start] == "[":
            form = "json-list"
            entries = [(line, *_record(path, line, value)) for line, _, value in members]
        elif any(key in _RECORD_KEYS for _, key, _ in members):
            form = "json-record"
            line = 1 + text.count("\n", 0, start)
            entries = [(line, *_record(path, line, {k: v for _, k, v in members}))]
        else:
            form = "json-object"
            for line, key, value in members:
                if value is not None and not isinstance(value, str):
                    entries.append((line, key, None, f"malformed candidate (line {line}): the SQL must be text "
                                                     "(or null to decline)", None))
                else:
                    entries.append((line, key, value, None, None))
    else:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = _loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{number}: not valid JSON: {getattr(exc, 'msg', exc)}") from None
            entries.append((number, *_record(path, number, obj)))
    sql: dict[str, str | None] = {}
    where: dict[str, int] = {}
    refused: dict[str, str] = {}
    confidence: dict[str, float] = {}
    for line, ident, text_sql, problem, sure in entries:
        if ident in sql:
            raise InputError(f"{path}:{line}: duplicate id {ident!r} (first at line {where[ident]})")
        sql[ident], where[ident] = text_sql, line
        if problem:
            refused[ident] = problem
        if sure is not None:
            confidence[ident] = sure
    return Candidates(sql, where, form, refused, confidence)


# --------------------------------------------------------------------------- scoring


NOT_ANSWERED = "not_answered"  # a question the candidates leave out: no answer, and no decline either


def _bucket() -> dict[str, int]:
    return {"n": 0, "correct": 0, "wrong": 0, "declined": 0, NOT_ANSWERED: 0, "answerable": 0, "unanswerable": 0,
            "declined_unanswerable": 0}



PENALTY_COSTS = ("0", "10", "N")  # c of the penalty score; N: the number of questions scored
PENALTY_RULE = ("penalty score (TrustSQL): per question +1 when correct (an unanswerable one declined), -c when "
                "wrong (any SQL on an unanswerable one), 0 when an answerable one is declined or a question is not "
                "answered; summed and divided "
                "by the questions in the group; c = 0, 10 and N (the questions scored in the whole run)")


def _rates(counts: dict[str, int], total: int) -> dict[str, Any]:
    """A group's counts with its rates: accuracy, wrong-rate, coverage, decline precision and recall (over explicit
    declines: a question left out is no decline), penalty scores."""
    n, declines = counts["n"], counts["declined"] + counts["declined_unanswerable"]
    penalty = {name: (counts["correct"] - (total if name == "N" else int(name)) * counts["wrong"]) / n if n else 0.0
               for name in PENALTY_COSTS}
    return {**counts, "accuracy": counts["correct"] / n if n else 0.0, "wrong_rate": counts["wrong"] / n if n else 0.0,
            "declined_rate": counts["declined"] / n if n else 0.0,
            "coverage": (n - counts[NOT_ANSWERED]) / n if n else 0.0,
            "decline_precision": counts["declined_unanswerable"] / declines if declines else None,
            "decline_recall": (counts["declined_unanswerable"] / counts["unanswerable"]
                               if counts["unanswerable"] else None),
            "penalty": penalty}


def risk_coverage(results: list[dict]) -> dict[str, Any] | None:
    """Accuracy at each coverage level when candidates carry a ``confidence``: the answered questions ranked by
    it (highest first, then by id; an answer without one counts as 1), the first k kept and the rest declined.
    None when no candidate gives a confidence."""
    answered = [r for r in results if r["answered"]]
    if not any(r["confidence"] is not None for r in results):
        return None
    ranked = sorted(answered, key=lambda r: (-(1.0 if r["confidence"] is None else r["confidence"]), r["id"]))
    points, correct = [], 0
    for k, r in enumerate(ranked, 1):
        correct += r["status"] == "correct"
        points.append({"coverage": k / len(results), "accuracy": correct / k, "answered": k,
                       "confidence": 1.0 if r["confidence"] is None else r["confidence"]})
    return {"points": points, "without_confidence": sum(1 for r in answered if r["confidence"] is None)}


def summarize(results: list[dict]) -> dict[str, Any]:
    """Counts and rates overall and by kind, difficulty, skill and split, from per-question results; the
    risk-coverage curve when confidences were given."""
    overall: dict[str, int] = _bucket()
    groups: dict[str, dict[str, dict[str, int]]] = {"by_kind": {}, "by_difficulty": {}, "by_skill": {}, "by_split": {}}
    flagged = any(r.get("uncaught") for r in results)
    if flagged:  # a pack built with near_miss: {gate: keep}: its flagged questions apart from the others
        groups["by_gate"] = {}
    for r in results:
        buckets = [overall, groups["by_kind"].setdefault(r["kind"], _bucket()),
                   groups["by_split"].setdefault(r["split"], _bucket())]
        if flagged:
            buckets.append(groups["by_gate"].setdefault("flagged" if r.get("uncaught") else "not flagged", _bucket()))
        if r.get("difficulty"):
            buckets.append(groups["by_difficulty"].setdefault(r["difficulty"], _bucket()))
        buckets += [groups["by_skill"].setdefault(skill, _bucket()) for skill in r.get("skills") or ()]
        for bucket in buckets:
            bucket["n"] += 1
            bucket[r["status"]] += 1
            bucket["answerable" if r["answerable"] else "unanswerable"] += 1
            bucket["declined_unanswerable"] += (not r["answerable"]) and not r["answered"] and r["status"] == "correct"
    total = overall["n"]
    return {"overall": _rates(overall, total),
            **{name: {k: _rates(v, total) for k, v in sorted(g.items())} for name, g in groups.items()},
            "penalty_costs": {"0": 0, "10": 10, "N": total}, "penalty_rule": PENALTY_RULE,
            "risk_coverage": risk_coverage(results)}


def score_pack(pack: Path, sql_by_id: dict[str, str | None], *, rule: str = "spider", limits: Limits = Limits(),
               integrity: Integrity | None = None, in_place: bool = False,
               refused: dict[str, str] | None = None, holdout_key: str | Path | None = None,
               confidence: dict[str, float] | None = None, source: str = "the candidates",
               sandbox: Callable[[str, Limits], SandboxWorker] | None = None,
               dialect: str | None = None) -> dict[str, Any]:
    """Score candidate SQL (id -> SQL, None = declined) on every rotation of ``pack``; the report.
    The holdout is scored when its answer key is found (:func:`pack_questions`); otherwise its questions
    are listed as not scored. An unanswerable question (:func:`is_unanswerable`) is correct when declined and
    wrong with any SQL, which is not run; a question ``sql_by_id`` leaves out is :data:`NOT_ANSWERED`. Ids the pack does not have are an InputError naming ``source``.

    The pack's integrity is not checked here: callers check it first (``score_command`` does).
    ``in_place`` (the pack's own gold SQL only) queries the Parquet files where they are
    (:func:`open_sandbox`), except those of rotations with less than :data:`COPIED_GOLD_BYTES` of them.
    ``sandbox`` (rotation, limits) -> a worker like :class:`SandboxWorker` runs the candidates on another
    engine instead, named by ``dialect`` in the report.
    """
    if rule not in RULES:
        raise InputError(f"unknown rule {rule!r}; use one of {', '.join(RULES)}")
    pack = Path(pack)
    records, key_used = pack_questions(pack, holdout_key)
    questions = [q for q in records if scorable(q) and not is_unanswerable(q)]
    declines = [q for q in records if is_unanswerable(q)]
    origin = pack_source(pack)
    names = [name for name, _ in origin.databases]
    known = {q["id"] for q in records}
    unknown = [i for i in sql_by_id if i not in known]
    if unknown:
        folded = {q["id"].casefold(): q["id"] for q in records}
        hints = [f"{printable(i)} (did you mean {printable(folded[i.casefold()])}?)" if i.casefold() in folded
                 else printable(i) for i in unknown[:10]]
        raise InputError(f"{source}: {len(unknown)} id(s) match no question of {pack}: {', '.join(hints)}"
                         f"{', ...' if len(unknown) > 10 else ''}; ids are the pack's, exactly as in {QUESTIONS_FILE}")
    started = time.perf_counter()
    # a sandbox with copied tables holds its rotation in memory: two small rotations are scored at
    # once (one loads while the other queries), large ones one at a time so that memory stays that
    # of one rotation; sandboxes over the files hold only working memory, and more of them than
    # cores keeps the cores busy between short queries
    place = {r: in_place and gold_in_place(origin, r) for r in names}
    if in_place:
        workers = min(len(names), 2 * (os.cpu_count() or 1))
        # the gold SQL's queries are small and its sandboxes run side by side: threads beyond each one's share
        # of the cores only contend (verify.py on a 1x pack of 3 rotations: 0.90x the time with 1 thread, not 2)
        limits = replace(limits, threads=max(1, min(limits.threads, (os.cpu_count() or 1) // workers)))
    else:
        small = all(_table_bytes(origin, r, (".parquet", ".csv")) < PAIRED_PARQUET_BYTES for r in names)
        workers = 2 if small else 1
    deadline = time.monotonic() + limits.run_timeout
    # the gold SQL is parsed while the sandboxes load their tables (verify.py at 1x: 0.04 s of 0.6)
    with ThreadPoolExecutor(1) as parsing, ThreadPoolExecutor(max_workers=workers) as pool:
        ordered = parsing.submit(_compared_in_order, questions, sql_by_id)
        scored_rotations = list(pool.map(
            lambda rotation: _score_rotation(origin, rotation, questions, sql_by_id, rule, limits, place[rotation], ordered,
                                             deadline, sandbox),
            names))
    per_rotation: dict[str, dict[str, dict]] = {q["id"]: {} for q in questions}
    query_seconds = 0.0
    for rotation, (entries, seconds, _) in zip(names, scored_rotations):
        query_seconds += seconds
        for qid, entry in entries.items():
            per_rotation[qid][rotation] = entry
    results = []
    sure = confidence or {}
    scored_ids = {q["id"] for q in questions + declines}
    for q in [q for q in records if q["id"] in scored_ids]:  # in the pack's order
        answerable = not is_unanswerable(q)
        runs = per_rotation.get(q["id"], {})
        answered = sql_by_id.get(q["id"]) is not None or q["id"] in (refused or {})
        if q["id"] not in sql_by_id and q["id"] not in (refused or {}):
            status = NOT_ANSWERED
        elif refused and q["id"] in refused:
            status = "wrong"
            runs = {r: {"match": False, "seconds": 0.0, "error": refused[q["id"]]} for r in names} if answerable else {}
        elif not answered:
            status = "declined" if answerable else "correct"
        elif not answerable:
            status = "wrong"
        else:
            status = "correct" if all(runs[r]["match"] for r in names) else "wrong"
        results.append(question_result(q, status, answered, runs, sure.get(q["id"])))
    workers = [w for _, _, w in scored_rotations]
    return assemble_report(
        pack, rule=rule, limits=limits, integrity=integrity, origin=origin, records=records, results=results,
        key_used=key_used, candidate_ids=list(sql_by_id), seconds=time.perf_counter() - started,
        query_seconds=query_seconds, usage=[(w.cap_bytes, w.peak_bytes, w.replaced) for w in workers],
        tables_loaded={rotation: w.loaded for rotation, w in zip(names, workers)},
    ) | ({} if dialect is None else {"dialect": dialect})


def _table_bytes(source: PackSource, rotation: str, suffixes: tuple[str, ...]) -> int:
    return sum(p.stat().st_size for p in source.tables_dir(rotation).iterdir() if p.suffix in suffixes)


def gold_in_place(source: PackSource, rotation: str) -> bool:
    """Whether the pack's own gold SQL reads ``rotation``'s Parquet files in place rather than copies in
    memory: when they hold :data:`COPIED_GOLD_BYTES` or more. Loading a small rotation costs less than
    reading its files at every query (``verify.py`` at 1x: 1.58 -> 1.23 s, at 10x 2.24 -> 2.08 s); in
    place holds less memory, which is what counts for large ones."""
    return _table_bytes(source, rotation, (".parquet",)) >= COPIED_GOLD_BYTES


def question_result(q: dict, status: str, answered: bool, runs: dict, confidence: float | None = None) -> dict:
    """One question's entry in a score report: its status, how it was answered and its runs per rotation."""
    answerable = not is_unanswerable(q)
    return {"id": q["id"], "kind": kind_of(q), "split": q.get("split", "dev"), "status": status,
            "answerable": answerable, "answered": answered, "confidence": confidence,
            "difficulty": q.get("difficulty") or None, "skills": list(q.get("skills") or ()),
            "question": q.get("question"), "unanswerable_reason": q.get("unanswerable_reason"),
            "answer_type": answer_type_of(q) if answerable else None,
            "expected": q["expected_answer"] if answerable else None, "rotations": runs,
            # a question the pack's near-miss gate kept though these mistakes pass it: scored apart (by_gate)
            **({"uncaught": list(q["uncaught"])} if q.get("uncaught") else {})}


def assemble_report(pack: Path, *, rule: str, limits: Limits, integrity: Integrity | None, origin: PackSource,
                    records: list[dict], results: list[dict], key_used: Path | None, candidate_ids: list[str],
                    seconds: float, query_seconds: float, usage: list[tuple[int, int, int]],
                    tables_loaded: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The score report (what ``--json`` writes) of ``results`` (:func:`question_result`, in the pack's order) for
    the candidates ``candidate_ids``; ``usage`` is each sandbox's (address-space cap, peak bytes, processes
    replaced), ``tables_loaded`` how each rotation's CSV tables were typed. :func:`score_pack` and ``evalpack
    serve`` (evalpack.grader) both report through it."""
    names = [name for name, _ in origin.databases]
    known = {q["id"] for q in records}
    nulls = {q["id"] for q in records if only_null(q) and not is_unanswerable(q)}
    unscored = {q["id"] for q in records if not scorable(q) and not is_unanswerable(q)} - nulls
    scored = sum(1 for r in results if r["answered"] and r["answerable"])
    return {
        "pack": str(pack),
        "rule": rule,
        "duckdb_version": duckdb.__version__,
        "comparison_rule": COMPARISON_RULE,
        "limits": {"timeout_seconds": limits.timeout, "memory_mb": limits.memory_mb, "threads": limits.threads,
                   "run_timeout_seconds": limits.run_timeout},
        "integrity": None if integrity is None else {"status": integrity.status, "files": integrity.files,
                                                     "message": integrity.message},
        "rotations": names,
        "source": {"producer": origin.producer, "version": origin.version,
                   "databases": {name: str(folder) for name, folder in origin.databases},
                   "tables_loaded": tables_loaded if origin.csv_types is not None else None},
        "summary": summarize(results),
        "unknown_ids": sorted(i for i in candidate_ids if i not in known),
        "not_scored": sorted(unscored),  # without gold SQL or expected answer: imported, or holdout without its key
        "null_answer": sorted(nulls),  # an answer of only NULL, which SELECT NULL would match: not scored
        "holdout_key": None if key_used is None else str(key_used),
        "holdout_not_scored": sorted(q["id"] for q in records if q.get("split") == "holdout" and not scorable(q)),
        "unscored_candidates": sorted(i for i in candidate_ids if i in unscored | nulls),
        "questions": results,
        "timing": {"seconds": round(seconds, 6), "query_seconds": round(query_seconds, 6),
                   "queries": scored * len(names),
                   # measured, like the seconds: the worker processes' address-space cap and peak memory
                   "worker_cap_mb": max((u[0] for u in usage), default=0) // 2**20,
                   "worker_peak_mb": max((u[1] for u in usage), default=0) // 2**20,
                   "workers_replaced": sum(u[2] for u in usage)},
    }


def _compared_in_order(questions: list[dict], sql_by_id: dict[str, str | None]) -> dict[str, bool]:
    """Whether each result-set question answered in ``sql_by_id`` is compared in row order, which depends on its
    gold SQL alone (:func:`top_level_order_by`)."""
    with contextlib.closing(duckdb.connect(":memory:")) as parser:
        return {q["id"]: top_level_order_by(parser, q["gold_sql"]) for q in questions
                if answer_type_of(q) == ROWS_TYPE and sql_by_id.get(q["id"]) is not None}


def _score_rotation(source: PackSource, rotation: str, questions: list[dict], sql_by_id: dict[str, str | None],
                    rule: str, limits: Limits, in_place: bool, ordered: Future, deadline: float,
                    sandbox: Callable[[str, Limits], SandboxWorker] | None = None
                    ) -> tuple[dict[str, dict], float, Worked]:
    """Each candidate's entry on one rotation (in its own sandbox, in a worker process), the seconds its
    queries took and what the workers used. ``ordered``: the result-set questions compared in row
    order (:func:`_compared_in_order`, still being found); ``deadline`` (monotonic): when the whole run's time is spent."""
    entries: dict[str, dict] = {}
    query_seconds = 0.0
    opened = SandboxWorker(source.tables_dir(rotation), limits, in_place=in_place, csv_types=source.csv_types) \
        if sandbox is None else sandbox(rotation, limits)
    answered = [(q, expected_for(q, rotation)) for q in questions if sql_by_id.get(q["id"]) is not None]
    queries = [Query(sql_by_id[q["id"]], limits.timeout, _fetch_cap(q, expected, rule)) for q, expected in answered]
    with opened as worker:
        for (q, expected), outcome in zip(answered, worker.run_many(queries, deadline)):
            if outcome is None:
                entries[q["id"]] = {"match": False, "seconds": 0.0, "error": "not run: the run's time limit of "
                                    f"{limits.run_timeout:g} s was reached (--run-timeout)"}
                continue
            query_seconds += outcome.seconds
            entry = {"match": False, "seconds": round(outcome.seconds, 6)}
            if outcome.rows is None:
                entry["error"] = outcome.error
            else:
                entry["match"] = answer_matches(q, expected, outcome.rows, rule, ordered.result().get(q["id"], False))
                entry["observed"] = reported(outcome.rows)
            entries[q["id"]] = entry
    return entries, query_seconds, Worked(worker.cap_bytes, worker.peak_bytes, worker.replaced, worker.loaded)


@dataclass(frozen=True)
class Worked:
    """What one rotation's worker processes used: their address-space cap, their peak resident memory and
    how many were replaced (killed at the time limit, or ended by a query); how CSV tables were typed (:func:`load_csv`)."""

    cap_bytes: int
    peak_bytes: int
    replaced: int
    loaded: dict[str, str] = field(default_factory=dict)


REPORTED_CHARS = 200  # a longer text of a candidate's result is reported as its start and its length
REPORTED_ITEMS = 20  # a longer list (or struct, or map) as its first items and its length


def reported(rows: list[tuple]) -> Any:
    """A candidate's result as a report shows it (``observed``): :func:`observed`, with a scalar DECIMAL as a JSON
    number when a float holds it exactly, and long texts and lists cut short (:func:`preview`), so that a report
    (and the process writing it) holds a bounded amount of each result however large it was."""
    if len(rows) == 1 and len(rows[0]) == 1 and isinstance(rows[0][0], Decimal) and rows[0][0].is_finite():
        as_float = float(rows[0][0])
        if Decimal(repr(as_float)) == rows[0][0]:
            return as_float
    return preview(observed(rows))


def preview(value: Any) -> Any:
    """``value`` (JSON values) with each text over :data:`REPORTED_CHARS` characters cut to them plus
    ``... (N characters)``, and each list or object over :data:`REPORTED_ITEMS` items cut to them plus a last item
    ``... (N items)`` (an object's as key ``...``)."""
    if isinstance(value, str):
        return value if len(value) <= REPORTED_CHARS else f"{value[:REPORTED_CHARS]}... ({len(value):,} characters)"
    if isinstance(value, list):
        shown = [preview(v) for v in value[:REPORTED_ITEMS]]
        return shown if len(value) <= REPORTED_ITEMS else [*shown, f"... ({len(value):,} items)"]
    if isinstance(value, dict):
        shown = {k: preview(v) for k, v in list(value.items())[:REPORTED_ITEMS]}
        if len(value) > REPORTED_ITEMS:
            shown["..."] = f"({len(value):,} items)"
        return shown
    return value


def _fetch_cap(record: dict, expected: Any, rule: str) -> int:
    if answer_type_of(record) != ROWS_TYPE:
        return 1  # one row is all a scalar answer may have; a second one makes it wrong
    if rule == "spider" and isinstance(expected, list):
        return len(expected)  # a multiset comparison needs no more than one row beyond the answer
    return MAX_FETCH_ROWS


def _short(value: Any, width: int = 60) -> str:
    text = printable(json.dumps(value, ensure_ascii=False, default=str))
    return text if len(text) <= width else text[:width - 3] + "..."


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_table(summary: dict[str, Any]) -> str:
    """A readable table: overall, by kind, difficulty and split: each question in one of correct, wrong, declined
    and not answered; accuracy, coverage, wrong-rate and the penalty score at c = 10 side by side."""
    rows = [("all", summary["overall"])]
    for group, label in (("by_kind", "kind"), ("by_difficulty", "level"), ("by_split", "split"), ("by_gate", "gate")):
        rows += [(f"{label:<5} {k}", v) for k, v in summary.get(group, {}).items()]
    width = max(24, *(len(name) for name, _ in rows))
    head = (f"{'':<{width}} {'n':>5} {'correct':>8} {'wrong':>6} {'declined':>9} {'not answered':>13} "
            f"{'accuracy':>9} {'coverage':>9} {'wrong-rate':>11} {'penalty@10':>11}")
    out = [head, "-" * len(head)]
    for name, v in rows:
        out.append(f"{name:<{width}} {v['n']:>5} {v['correct']:>8} {v['wrong']:>6} {v['declined']:>9} "
                   f"{v.get(NOT_ANSWERED, 0):>13} {v['accuracy']:>9.1%} {v.get('coverage', 1.0):>9.1%} "
                   f"{v['wrong_rate']:>11.1%} {v['penalty']['10']:>11.3f}")
    return "\n".join(out)


def loaded_note(source: dict[str, Any] | None) -> str | None:
    """How the CSV tables of a pack Misata wrote were read (the report's ``source``), in one line; None for Parquet."""
    loaded = (source or {}).get("tables_loaded")
    if not loaded:
        return None
    ways: dict[str, list[str]] = {}
    for rotation, tables in loaded.items():
        for table, how in tables.items():
            ways.setdefault(f"{table} {how}", []).append(rotation)
    parts = [way + ("" if len(seen) == len(loaded) else f" (on {', '.join(seen)})") for way, seen in ways.items()]
    return ("tables: CSV copied into DuckDB, with the column types of manifest.json's schema where it gives them, "
            f"else {SNIFFED}: " + "; ".join(parts))


def format_report(report: dict[str, Any]) -> str:
    """The candidate report as text: one line per question, then the table and the reliability scores."""
    out = []
    if report.get("integrity"):
        out.append(f"integrity: {report['integrity']['message']}")
    if loaded_note(report.get("source")):
        out.append(printable(loaded_note(report["source"])))
    if report.get("dialect"):
        out.append(f"dialect: {printable(report['dialect'])} (the candidates ran on that engine)")
    out.append(f"rule: {report['rule']}; rotations: {', '.join(report['rotations'])}; "
               f"time limit {report['limits']['timeout_seconds']:g} s per query")
    left_out = [r["id"] for r in report["questions"] if r["status"] == NOT_ANSWERED]
    for r in report["questions"]:
        if r["status"] == NOT_ANSWERED:  # counted below, not a line each: a run of 12 answers prints 12 lines
            continue
        line = f"{r['status'].upper():<8} {printable(r['id'])} {printable(r['kind'])}"
        if r["status"] == "wrong" and not r["answerable"]:
            line += ": unanswerable, so declining was correct" + (
                f" ({printable(r['unanswerable_reason'])})" if r.get("unanswerable_reason") else "")
        elif r["status"] == "wrong":
            bad = []
            for rotation, run in r["rotations"].items():
                if run["match"]:
                    continue
                expected = r["expected"][rotation] if isinstance(r["expected"], dict) else r["expected"]
                got = f"error: {printable(run['error'])}" if "error" in run else f"got {_short(run['observed'])}"
                bad.append(f"{rotation}: {got} (expected {_short(expected)})")
            line += ": " + "; ".join(bad)
        elif r["status"] == "correct" and not r["answerable"]:
            line += ": unanswerable, declined"
        out.append(line)
    if report["unscored_candidates"]:
        out.append("ids of questions that are not scored (no gold SQL or expected answer, or an answer of only "
                   "NULL): "
                   f"{', '.join(map(printable, report['unscored_candidates']))}")
    if report.get("null_answer"):
        out.append(f"not scored: {len(report['null_answer'])} question(s) whose answer is only NULL, which any query "
                   f"returning NULL would match: {', '.join(map(printable, report['null_answer']))}")
    if left_out:
        out.append(f"not answered: {len(left_out)} question(s) the candidates leave out (neither answered nor "
                   f"declined; they count against accuracy and coverage): {', '.join(map(printable, left_out[:10]))}"
                   f"{', ...' if len(left_out) > 10 else ''}")
    held = report.get("holdout_not_scored") or []
    if held:
        out.append(f"holdout: {len(held)} questions not scored here (their answers are not in a public pack; "
                   "score with the answer key: --holdout-key DIR)")
    out.append("")
    out.append(format_table(report["summary"]))
    summary = report["summary"]
    o = summary["overall"]
    out.append(f"\n{o['correct']}/{o['n']} correct, {o['wrong']} wrong, {o['declined']} declined, "
               f"{o.get(NOT_ANSWERED, 0)} not answered (accuracy {o['accuracy']:.1%}, coverage "
               f"{o.get('coverage', 1.0):.1%}, wrong-rate {o['wrong_rate']:.1%})")
    right, declines = o["declined_unanswerable"], o["declined"] + o["declined_unanswerable"]
    out.append(f"declines: {declines} = {right} of the {o['unanswerable']} unanswerable questions (each counted "
               f"correct) + {o['declined']} answerable ones (declined); precision {right}/{declines} = "
               f"{_share(o['decline_precision'])}, recall {right}/{o['unanswerable']} = {_share(o['decline_recall'])}")
    costs = summary.get("penalty_costs", {})
    out.append("penalty score: " + ", ".join(f"c={costs.get(name, name)} {o['penalty'][name]:.3f}"
                                            for name in PENALTY_COSTS))
    curve = summary.get("risk_coverage")
    if curve and curve["points"]:
        marks = [p for p in curve["points"] if p["answered"] in {max(1, round(len(curve["points"]) * f))
                                                                   for f in (0.25, 0.5, 0.75, 1.0)}]
        out.append("risk-coverage: " + ", ".join(f"coverage {p['coverage']:.0%}: accuracy {p['accuracy']:.1%}"
                                                 for p in marks))
    return "\n".join(out)


def write_report(path: str | Path, text: str) -> Path:
    """Write a report file atomically: a new file beside ``path``, then renamed over it, so that a full disk or a
    stop leaves the file as it was (or none), never half a report. A lone surrogate (from a candidate's id) is
    written as its escape. InputError naming the path when it cannot be written."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8", "backslashreplace"))
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write the report ({exc.strerror or exc}); choose another path") from None
    return target


def write_json_report(path: str | Path, data: Any) -> Path:
    """:func:`write_report` of ``data`` as indented JSON (values JSON has no form for as their text)."""
    return write_report(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def report_beside(pack: str | Path, kind: str) -> Path:
    """Where a report on ``pack`` goes: ``<pack folder>.report.<kind>`` (``html``, ``json``), a sibling of the folder,
    never inside it, where every file is attested."""
    folder = Path(os.path.abspath(pack))
    return folder.with_name(f"{folder.name}.report.{kind}")


def check_report_file(path: str | Path | None, pack: str | Path | None = None, option: str = "--json") -> None:
    """Refuse, before any work, a report file (``option``: ``--json``, ``--html``) that must not or cannot be
    written: the folder ``pack`` or a path inside it, links followed (the attestation pins every file there, so one
    more fails the pack's verification); a folder; a folder for it that is missing or is a file, or that cannot be
    written. Raises InputError naming the path and the option; nothing is left behind."""
    if path is None:
        return
    target, kind = Path(path), option.lstrip("-")
    if pack is not None:
        folder, where = Path(pack).resolve(), target.resolve()
        if where == folder or folder in where.parents:
            what = "is a folder, the pack itself" if where == folder else "is inside the pack"
            beside = f", e.g. {option} {report_beside(folder, kind)}" if folder.name else ""
            raise InputError(f"{path}: {what} ({pack}), whose files are attested: a report there fails its "
                             f"verification; write the {option} report outside the pack{beside}")
    if target.is_dir():
        raise InputError(f"{path}: is a folder; pass a file name for the report, e.g. {option} report.{kind}")
    folder = target.absolute().parent
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise InputError(f"{path}: cannot write the report, its folder {folder} {what}; create the folder "
                         f"or choose another {option}")
    try:  # permissions alone do not say (root, /proc, a read-only mount): try, leaving nothing behind
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot write the report in {folder} ({exc.strerror or exc}); "
                         f"choose another {option}") from None


def score_command(pack: str | Path, candidates: str | Path, json_path: str | Path | None = None,
                  rule: str = "spider", *, public_key: str | Path | None = None, timeout: float = DEFAULT_TIMEOUT,
                  memory_mb: int = DEFAULT_MEMORY_MB, threads: int = DEFAULT_THREADS,
                  run_timeout: float = DEFAULT_RUN_TIMEOUT, allow_unattested: bool = False, out=None,
                  err=None, error_prefix: str = "error: ", holdout_key: str | Path | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None,
                  sandbox: Callable[[str, Limits], SandboxWorker] | None = None, dialect: str | None = None,
                  min_accuracy: float | None = None) -> int:
    """``evalpack score`` and ``verify.py --candidates``: integrity, then scoring; the exit code (:func:`passed_exit`).
    ``on_report`` receives the report once it is complete (``evalpack score --html`` renders it).
    ``sandbox`` and ``dialect``: candidates run on another engine (:func:`score_pack`).

    Input errors are printed as one line starting with ``error_prefix`` (the CLI passes its own)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        limits = Limits(timeout, memory_mb, threads, run_timeout).checked()
        integrity = check_integrity(pack, public_key, allow_unattested=allow_unattested)
        given = load_candidates(candidates)
        report = score_pack(Path(pack), given.sql, rule=rule, limits=limits, integrity=integrity,
                            refused=given.refused, holdout_key=holdout_key, confidence=given.confidence,
                            source=str(candidates), sandbox=sandbox, dialect=dialect)
        report["candidates"] = {"file": str(candidates), "form": given.form}
    except InputError as exc:
        print(error_text(exc, error_prefix), file=err)
        return 2
    print(format_report(report), file=out)
    try:
        if json_path:
            write_json_report(json_path, report)
        if on_report is not None:
            on_report(report)
    except InputError as exc:
        print(error_text(exc, error_prefix), file=err)
        return 2
    return passed_exit(report["summary"]["overall"], min_accuracy)


def passed_exit(overall: dict[str, Any], min_accuracy: float | None = None) -> int:
    """The exit code of a scored run: 0 when every question is correct, or with ``min_accuracy`` (from 0 to 1) when
    accuracy reaches it; 1 otherwise."""
    if min_accuracy is None:
        return 0 if overall["correct"] == overall["n"] else 1
    return 0 if overall["accuracy"] >= min_accuracy else 1


def accuracy_threshold(text: str) -> float:
    """``--min-accuracy``: a share from 0 to 1, or a percentage such as ``85%``."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an accuracy from 0 to 1 (or 0% to 100%)")
    return value


# --------------------------------------------------------------------------- gold mode


def run_gold(pack: Path, *, rule: str = "spider", limits: Limits = Limits(),
             holdout_key: str | Path | None = None) -> tuple[int, int, list[str]]:
    """Rerun every gold SQL on every rotation in the sandbox, reading the Parquet files in place (the
    holdout's too when its answer key is found, :func:`pack_questions`); returns (passed, total, report lines)."""
    pack = Path(pack)
    questions = [q for q in pack_questions(pack, holdout_key)[0] if scorable(q)]
    gold = {q["id"]: q["gold_sql"] for q in questions}
    report = score_pack(pack, gold, rule=rule, limits=limits, in_place=True, holdout_key=holdout_key)
    lines, passed = [], 0
    for r in [r for r in report["questions"] if r["answerable"]]:
        if r["status"] == "correct":
            passed += 1
            lines.append(f"PASS {printable(r['id'])} {printable(r['kind'])}")
        else:
            bad = ", ".join(f"{rot}={run.get('observed', 'error: ' + str(run.get('error')))!r}"
                            for rot, run in r["rotations"].items() if not run["match"])
            lines.append(printable(f"FAIL {r['id']} {r['kind']}: expected {r['expected']!r}, got {bad}"))
    if loaded_note(report.get("source")):
        lines.append(printable(f"NOTE {loaded_note(report['source'])}"))
    declines = report["summary"]["overall"]["unanswerable"]
    if declines:
        lines.append(f"NOTE unanswerable: {declines} questions have no gold SQL (declining is their answer); nothing "
                     "to rerun")
    if report["null_answer"]:
        lines.append(f"NOTE null answer: {len(report['null_answer'])} questions answer only NULL, which any query "
                     f"returning NULL would match; not checked: {', '.join(map(printable, report['null_answer']))}")
    held = report["holdout_not_scored"]
    if held:
        lines.append(f"NOTE holdout: {len(held)} questions not checked here (their gold SQL is in the answer key, "
                     "not in a public pack; pass --holdout-key DIR)")
    return passed, len(questions), lines


class OneLineParser(argparse.ArgumentParser):
    """An argument parser that reports a mistake like every other input error: one line starting
    with :attr:`prefix` that says where to look, exit 2 (argparse prints the whole usage first).
    Its subcommands' parsers are of the same class."""

    prefix = "error: "

    def error(self, message: str) -> NoReturn:
        self.exit(2, printable(f"{self.prefix}{message}; see `{self.prog} --help`") + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="verify.py", description="Check this pack: rerun every gold SQL, or score candidate SQL "
        "(--candidates). Exit 0: all correct (with --min-accuracy: accuracy at least that); 1: not; 2: bad input or "
        "a tampered pack.")
    # not resolved: in a Hub cache snapshot this file is a link into the cache's blobs folder
    parser.add_argument("--pack", default=str(Path(os.path.abspath(__file__)).parent),
                        help="the pack folder (default: the folder this file is in)")
    parser.add_argument("--candidates",
                        help="JSON Lines of {id, sql}, a JSON list of those, or a JSON object id -> SQL")
    parser.add_argument("--json", help="write the full report as JSON to this file")
    parser.add_argument("--rule", choices=RULES, default="spider", help="rule for result-set questions")
    add_threshold_option(parser)
    add_integrity_options(parser)
    add_holdout_option(parser)
    add_limit_options(parser)
    return parser


def add_threshold_option(parser: argparse.ArgumentParser) -> None:
    """``--min-accuracy``, as ``verify.py --candidates`` and ``evalpack score`` take it."""
    parser.add_argument("--min-accuracy", type=accuracy_threshold, metavar="A",
                        help="scoring candidates: exit 0 when accuracy (correct / questions) is at least A (0.85 or "
                             "85%%), not only when every question is correct")


def add_holdout_option(parser: argparse.ArgumentParser) -> None:
    """``--holdout-key``, as ``verify.py``, ``evalpack score`` and ``evalpack verify`` take it."""
    parser.add_argument("--holdout-key", metavar="DIR",
                        help="the pack's holdout answer key (default: PACK.holdout-key beside the pack, if there); "
                             "without it the holdout questions are not scored")


def add_integrity_options(parser: argparse.ArgumentParser) -> None:
    """How the pack's attestation is checked, as ``verify.py``, ``evalpack score`` and ``evalpack verify`` take it."""
    parser.add_argument("--public-key", default=os.environ.get(PUBLIC_KEY_ENV) or None,
                        help=f"PEM public key the attestation must be signed with (default ${PUBLIC_KEY_ENV}); "
                             "without one, anyone could have signed the pack")
    parser.add_argument("--allow-unattested", action="store_true",
                        help="use a pack without an attestation, or with files or folders it does not list; "
                             "the report says so")


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """The limits for untrusted SQL, as ``verify.py`` and ``evalpack score`` both take them."""
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per query per rotation (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--run-timeout", type=float, default=DEFAULT_RUN_TIMEOUT,
                        help=f"seconds for the whole run; queries not started by then are wrong "
                             f"(default {DEFAULT_RUN_TIMEOUT:g})")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                        help=f"DuckDB working memory per rotation in MiB (default {DEFAULT_MEMORY_MB})")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"DuckDB threads per rotation's sandbox (default {DEFAULT_THREADS}; rerunning the gold "
                             "SQL, no more than each rotation's share of the cores)")


def main(argv: list[str] | None = None) -> int:
    """``python verify.py [--candidates FILE [--json FILE] [--rule spider|bird]] [--public-key KEY]``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_FLAG]:
        return worker_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:  # before any work: a report that cannot or must not be written is known now, not after the run
        check_report_file(args.json, args.pack)
        try:
            check_pack_entries(Path(args.pack))
        except PackIntegrityError:  # the whole check then, which names every problem (it opens no refused entry)
            check_integrity(args.pack, args.public_key, allow_unattested=args.allow_unattested)
            raise
    except InputError as exc:
        print(error_text(exc), file=sys.stderr)
        return 2
    prestart_for(args.pack)
    if args.candidates:
        return score_command(args.pack, args.candidates, args.json, args.rule, public_key=args.public_key,
                             timeout=args.timeout, memory_mb=args.memory_mb, threads=args.threads,
                             run_timeout=args.run_timeout, allow_unattested=args.allow_unattested,
                             holdout_key=args.holdout_key, min_accuracy=args.min_accuracy)
    try:
        limits = Limits(args.timeout, args.memory_mb, args.threads, args.run_timeout).checked()
        with ThreadPoolExecutor(1) as background:
            # the files are re-hashed while the gold SQL runs; nothing is reported unless they are intact
            checking = background.submit(check_integrity, args.pack, args.public_key,
                                         allow_unattested=args.allow_unattested)
            try:
                passed, total, lines = run_gold(Path(args.pack), rule=args.rule, limits=limits,
                                                holdout_key=args.holdout_key)
            except Exception as exc:  # noqa: BLE001 - one line for the user, whatever a damaged pack raises
                checking.result()  # a tampered pack is reported as tampered, whatever else failed
                if isinstance(exc, InputError):
                    raise
                raise InputError(f"{args.pack}: cannot rerun the gold SQL ({type(exc).__name__}: "
                                 f"{first_line(exc)})") from None
            integrity = checking.result()
        print(f"integrity: {integrity.message}")
    except InputError as exc:
        print(error_text(exc), file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    print(f"{passed}/{total} questions verify on every rotation")
    if args.json:
        try:
            write_json_report(args.json, {"pack": args.pack, "integrity": integrity.status, "passed": passed,
                                          "total": total, "lines": lines})
        except InputError as exc:
            print(error_text(exc), file=sys.stderr)
            return 2
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
