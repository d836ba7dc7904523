"""Run every gold SQL on every rotation's written files and apply the golden checks.

A question ships only when, on every rotation, its gold SQL returns exactly the expected
answer and passes the golden checks of :mod:`evalpack.checks.golden` (the rules are there and in
README.md): the result is not empty, the answer does not depend on orphan rows, and no tie sits
at an ORDER BY ... LIMIT boundary. This module only runs them and reports the check booleans
(:class:`Observation`, :class:`Verdict`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from evalpack.checks import golden
from evalpack.checks.golden import (
    CHECKS,
    DROP_REASONS,
    MATCHES,
    Link,
    exclude_orphans,
    live_links,
    orphan_key_tables,
    orphans_sql,
    run_trusted,
    tie_probe,
)
from evalpack.core import cache
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import DAMAGED
from evalpack.core.scoring import ROWS_TYPE, answer_matches, first_line, observed, quote_ident, sha256_files
from evalpack.core.scoring import _decode_value as decode_value  # the sandbox's reply encoding: it keeps every
from evalpack.core.scoring import _encode_value as encode_value  # type of value DuckDB returns
from evalpack.data.tables import connect_tables
from evalpack.questions.derive import Question

# the golden rules live in evalpack.checks.golden; these six are re-exported for callers that import them from here
__all__ = ["Link", "exclude_orphans", "live_links", "orphan_key_tables", "orphans_sql", "tie_probe",
           "CHECKS", "Observation", "Verdict", "check_question", "verify_questions", "materialize",
           "rotation_connection", "OnDemand", "verify_rotation", "map_on_cursors", "gradable"]

# the drop reason of a question the near-miss gate keeps out, before the operators whose mutants pass
NEAR_MISS_REASON = "a plausible mistake passes on every rotation"

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Observation:
    rotation: str
    value: Any
    checks: tuple[tuple[str, bool | None], ...]  # None: the check does not apply
    error: str | None = None
    rows: tuple[tuple, ...] | None = field(default=None, compare=False, repr=False)  # what the gold SQL returned

    @property
    def passed(self) -> bool:
        return self.error is None and all(v is not False for _, v in self.checks)

    def failed_checks(self) -> list[str]:
        return [name for name, v in self.checks if v is False]


@dataclass(frozen=True)
class Verdict:
    question: Question
    observations: tuple[Observation, ...]
    # (operator, mutant SQL) of each plausible mistake that returns the expected answer on every rotation, when
    # the near-miss gate drops the question for them (evalpack.checks.nearmiss.gate)
    passing_mistakes: tuple[tuple[str, str], ...] = ()

    @property
    def verified(self) -> bool:
        """Its gold SQL returned the expected answer and passed the golden checks on every rotation."""
        return all(o.passed for o in self.observations)

    @property
    def ships(self) -> bool:
        return self.verified and not self.passing_mistakes

    @property
    def drop_kind(self) -> str | None:
        """The drop reason as drops are counted: the near-miss gate's as one kind, whatever its operators."""
        return NEAR_MISS_REASON if self.passing_mistakes else self.drop_reason

    @property
    def drop_reason(self) -> str | None:
        if self.ships:
            return None
        if self.verified:
            return f"{NEAR_MISS_REASON}: " + ", ".join(dict.fromkeys(op for op, _ in self.passing_mistakes))
        reasons = []
        for o in self.observations:
            if o.error:
                reasons.append("error")
            reasons += o.failed_checks()
        order = ("error",) + CHECKS
        named = {**DROP_REASONS, "error": "error"}
        return ", ".join(named[r] for r in order if r in reasons)


def check_question(con: duckdb.DuckDBPyConnection, q: Question, rotation: str, expected: Any,
                   links: tuple[Link, ...], key_tables: tuple[str | None, ...] | None = None, *,
                   about_orphans: bool = False, expected_empty: bool = False) -> Observation:
    """Run one question's gold SQL and golden checks (:func:`evalpack.checks.golden.check`) on one connection.

    ``links``: the links whose orphans the answer must not depend on (only those with orphan rows
    on ``con`` matter, see :func:`live_links`); ``key_tables``: their orphan keys, if on ``con``.
    ``about_orphans``: the question is about orphans (so is kind ``fk_orphans``)."""
    run = run_trusted(con, q.gold_sql)
    if run.rows is None:
        return Observation(rotation, None, (), error=run.error)
    rows = run.rows
    ordered = golden.in_order(q.answer_type, q.gold_sql)
    matches = answer_matches({"answer_type": q.answer_type, "round_decimals": q.round_decimals}, expected, rows,
                             ordered=ordered)
    about = golden.counts_orphans(q.kind, about_orphans, q.orphan_rows)
    g = golden.check(con, q.gold_sql, run, links, key_tables, about_orphans=about,
                     expected_empty=expected_empty, round_decimals=q.round_decimals, ordered=ordered, explain=False)
    checks = ((MATCHES, matches), *g.checks().items())
    return Observation(rotation, observed(rows, ordered or q.answer_type != ROWS_TYPE), checks, rows=tuple(rows))


def verify_questions(con: duckdb.DuckDBPyConnection, questions, links: tuple[Link, ...] = (),
                     rotation: str = "default") -> tuple[list, list]:
    """Check ``questions`` on any DuckDB connection; returns (kept, dropped with drop_reason).

    ``questions`` are Question objects or question records (dicts with gold_sql,
    expected_answer, answer_type, round_decimals, kind).
    """
    questions, dropped = gradable(questions)
    links = live_links(con, tuple(links))
    kept = []
    for q in questions:
        question = q if isinstance(q, Question) else _from_record(q, rotation)
        flags = q if isinstance(q, dict) else {}
        obs = check_question(con, question, rotation, question.expected_for(rotation), links,
                             about_orphans=bool(flags.get("about_orphans")),
                             expected_empty=bool(flags.get("expected_empty")))
        verdict = Verdict(question, (obs,))
        if verdict.ships:
            kept.append(q)
        else:
            dropped.append({**(q if isinstance(q, dict) else question.to_record("rotated")),
                            "drop_reason": verdict.drop_reason, "observed": {rotation: obs.value}})
    return kept, dropped


def _from_record(record: dict, rotation: str) -> Question:
    value = record["expected_answer"]
    expected = value[rotation] if isinstance(value, dict) else value
    return Question(record.get("id", "?"), record.get("question", ""), record["gold_sql"], ((rotation, expected),),
                    record.get("answer_type", "number"), record.get("round_decimals"), record.get("kind", "imported"),
                    tuple(record.get("tags", ())), orphan_rows=str(record.get("orphan_rows") or ""))


MATERIALIZE_ROWS = 5_000_000


def materialize(con: duckdb.DuckDBPyConnection, max_rows: int = MATERIALIZE_ROWS) -> duckdb.DuckDBPyConnection:
    """Load the views over a rotation's files into memory when the rotation has at most
    ``max_rows`` rows in all: many queries then run on in-memory tables (zone maps, no
    decompression); larger rotations stay on their files so memory stays bounded.

    From :data:`COMPRESS_MIN_ROWS` rows on, the tables are stored compressed (:func:`_load_compressed`)."""
    con.execute("SET enable_progress_bar = false")  # DuckDB draws a bar on a terminal for long loads
    views = [name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    quoted = {name: quote_ident(name) for name in views}
    total = sum(con.execute(f"SELECT COUNT(*) FROM {quoted[name]}").fetchone()[0] for name in views)
    if total > max_rows or (total >= COMPRESS_MIN_ROWS and _load_compressed(con, list(quoted.values()))):
        return con
    for name in views:
        staged = quote_ident("__load_" + name)
        con.execute(f"CREATE TABLE {staged} AS SELECT * FROM {quoted[name]}")
        con.execute(f"DROP VIEW {quoted[name]}")
        con.execute(f"ALTER TABLE {staged} RENAME TO {quoted[name]}")
    return con


# Below this many rows compressing costs more than it saves (at 400,000 rows: the same check time); at
# 4M rows a rotation's verification took 0.45 s instead of 1.0 s and the first near-miss study 2.8 s instead of 4.0
COMPRESS_MIN_ROWS = 1_000_000
UNUSED_ENCODINGS = ("bitpacking", "roaring", "zstd", "fsst", "alp", "alprd", "chimp", "patas")
LOADED = "__evalpack_loaded"  # the attached in-memory database, and its schema, that hold compressed tables


def _load_compressed(con: duckdb.DuckDBPyConnection, views: list[str]) -> bool:
    """Copy each view's rows into a compressed in-memory database attached to ``con`` and point the view at
    its copy; False (nothing changed) where this DuckDB cannot attach one.

    DuckDB compresses an in-memory database's tables only when it is attached with COMPRESS and checkpointed.
    Its scans then hand text columns to aggregates as dictionaries and dates as runs: grouping by a channel or
    by a month costs a third of what it costs on plain in-memory tables. The values, types and names queries
    see are the same; the copies live in their own schema, so nothing that lists ``main`` sees them twice."""
    try:
        con.execute(f"ATTACH ':memory:' AS {LOADED} (COMPRESS)")
    except duckdb.Error:
        return False
    con.execute(f"CREATE SCHEMA {LOADED}.{LOADED}")
    for view in views:
        con.execute(f"CREATE TABLE {LOADED}.{LOADED}.{view} AS SELECT * FROM {view}")
    # dictionaries and runs are what make grouping and filtering cheaper; the other encodings cost the
    # checkpoint half its time and the queries their unpacking (4M rows: 0.49 -> 0.26 s, queries no slower)
    with contextlib.suppress(duckdb.Error):
        con.execute(f"SET disabled_compression_methods = '{','.join(UNUSED_ENCODINGS)}'")
    con.execute(f"CHECKPOINT {LOADED}")
    with contextlib.suppress(duckdb.Error):
        con.execute("RESET disabled_compression_methods")
    for view in views:
        con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {LOADED}.{LOADED}.{view}")
    return True


ENGINE_MEMORY_LIMIT = "1GiB"  # DuckDB's working memory per connection; beyond it DuckDB spills to disk


def _spill_dir() -> str:
    """A private spill folder for one connection, ``evalpack-spill-{pid}-{random}`` in the temporary folder,
    held by this process until removed (:mod:`evalpack.core.debris`); first removes those of dead runs."""
    from evalpack.core import debris

    temp = tempfile.gettempdir()
    debris.sweep(temp, debris.SPILL_PATTERN)
    return str(debris.owned_dir(temp, debris.SPILL))


@contextlib.contextmanager
def rotation_connection(tables_dir: Path, fmt: str = "parquet", types: dict | None = None,
                        con: duckdb.DuckDBPyConnection | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to one rotation's tables (trusted SQL only), loaded into memory when small
    (:func:`materialize`; CSV always). ``con``: an empty in-memory connection to use (a resource's),
    else a new one. Either way it gets the engine's memory limit and a private spill folder, so peak
    memory stays bounded however large the rotation is, and it is closed afterwards."""
    spill = _spill_dir()
    if con is None:
        con = duckdb.connect(":memory:", config={"memory_limit": ENGINE_MEMORY_LIMIT, "temp_directory": spill})
    else:
        con.execute(f"SET memory_limit = '{ENGINE_MEMORY_LIMIT}'")
        con.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
    try:
        connect_tables(tables_dir, fmt=fmt, con=con, types=types)
        try:  # CSV views re-parse their file on every query: always load them
            loaded = materialize(con, max_rows=1 << 62 if fmt == "csv" else MATERIALIZE_ROWS)
        except duckdb.OutOfMemoryException:
            raise
        except duckdb.Error as exc:  # a pack from elsewhere: a table's data may be anything
            raise EvalpackError(f"{tables_dir}: DuckDB cannot read this rotation's tables ({first_line(exc)}); "
                                f"{DAMAGED}") from None
        yield loaded
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


class OnDemand:
    """A rotation's connection (:func:`rotation_connection`) opened and loaded the first time it is used: a
    rotation whose every check is found in the cache on disk is never loaded (4M rows: 0.4 s a rotation). It
    stands in for the connection (every attribute is the connection's) until :meth:`close`."""

    def __init__(self, tables_dir: Path, con: duckdb.DuckDBPyConnection | None = None) -> None:
        self._open = lambda: rotation_connection(tables_dir, con=con)
        self._opened = contextlib.ExitStack()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The rotation's connection, opened now if it was not yet."""
        with self._lock:
            if self._con is None:
                self._con = self._opened.enter_context(self._open())
            return self._con

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own, not yet set (a copy being made): never the connection's
            raise AttributeError(name)
        return getattr(self.connection(), name)

    def close(self) -> None:
        """Close the connection if it was opened."""
        self._opened.close()

    def __enter__(self) -> OnDemand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verify_rotation(con: duckdb.DuckDBPyConnection, questions: tuple[Question, ...], rotation: str,
                    links: tuple[Link, ...] = (), live: tuple[Link, ...] | None = None,
                    tables: str | None = None) -> list[Observation]:
    """Every question's observation on one rotation's connection (ours: it gets tables of orphan keys).
    ``live``: the links with orphan rows on ``con``, when already known (else read when a question runs).

    ``tables``: the :func:`tables_digest` of the files loaded into ``con``: each question's observation then goes
    through the cache on disk (:func:`verification_keys`), and only the questions not checked before on files byte
    for byte these, with the same SQL, answer, links and code, run. An observation depends on nothing else, so the
    observations are the same either way."""
    keys = verification_keys(tables, rotation, questions, links) if tables and cache.cache_dir() else {}
    known: dict[str, Observation] = {}
    for q in questions if keys else ():
        stored = _decoded_observation(cache.load("verified", keys[q.id]), rotation)
        if stored is not None:
            known[q.id] = stored
    missing = [q for q in questions if q.id not in known]
    if missing:
        live = live_links(con, links) if live is None else live
        key_tables = orphan_key_tables(con, live)
        checked = map_on_cursors(
            con, lambda cur, q: check_question(cur, q, rotation, q.expected_for(rotation), live, key_tables), missing)
        for q, observation in zip(missing, checked):
            known[q.id] = observation
            entry = _encoded_observation(observation) if keys else None
            if entry is not None:
                cache.store("verified", keys[q.id], entry)
    return [known[q.id] for q in questions]


# what checking a question reads besides its own fields and the files: a change to any of them is a new key
VERIFYING_CODE = ("evalpack.checks.verification", "evalpack.checks.golden", "evalpack.core.scoring", "evalpack.data.tables")


def tables_digest(tables: Path) -> str:
    """SHA-256 over a rotation's table files (each one's name and SHA-256): what keys the cache's entries that
    read them (verification's observations, the near-miss study's outcomes)."""
    paths = sorted(Path(tables).iterdir())
    files = hashlib.sha256()
    for path, digest in zip(paths, sha256_files(paths)):
        files.update(path.name.encode() + b"\0" + digest.encode() + b"\0")
    return files.hexdigest()


def verification_keys(tables: str, rotation: str, questions: tuple[Question, ...], links: tuple[Link, ...]
                      ) -> dict[str, str]:
    """The cache address of each question's observation on a rotation (question id -> key): SHA-256 over the code,
    DuckDB's version, the :func:`tables_digest` of its files, the declared links (which of them have orphan rows
    follows from the files) and what :func:`check_question` reads of the question: its gold SQL, answer type,
    digits, kind, orphan rows and expected answer here. Not its id or wording, which a new selection changes."""
    common = [f"duckdb {duckdb.__version__}", tables, json.dumps([repr(link) for link in links])]
    fingerprint = cache.code_fingerprint(VERIFYING_CODE)
    return {q.id: cache.entry_key("verified", fingerprint, [*common, json.dumps(
        [q.gold_sql, q.answer_type, q.round_decimals, q.kind, q.orphan_rows, q.expected_for(rotation)],
        default=repr)]) for q in questions}


def _encoded_observation(observation: Observation) -> list | None:
    """``observation`` (but its rotation) as JSON values, or None when they would not give it back exactly (a value
    of a type the encoding does not keep) or the gold SQL failed (an error can be the machine's, out of memory or
    time, and the next build runs it again): such an observation is not cached."""
    if observation.error is not None:
        return None
    rows = None if observation.rows is None else encode_value([list(row) for row in observation.rows])
    entry = [observation.value, [list(check) for check in observation.checks], observation.error, rows]
    try:
        back = _decoded_observation(json.loads(json.dumps(entry)), observation.rotation)
    except (TypeError, ValueError):
        return None
    same = back is not None and repr((back.value, back.checks, back.error, back.rows)) == \
        repr((observation.value, observation.checks, observation.error, observation.rows))
    return entry if same else None


def _decoded_observation(entry: object, rotation: str) -> Observation | None:
    """The observation :func:`_encoded_observation` stored, on ``rotation``; None for anything else."""
    try:
        value, checks, error, rows = entry  # type: ignore[misc]
        if not all(ok is None or isinstance(ok, bool) for _, ok in checks):
            return None
        return Observation(rotation, value, tuple((str(name), ok) for name, ok in checks),
                           None if error is None else str(error),
                           None if rows is None else tuple(tuple(row) for row in decode_value(rows)))
    except (TypeError, ValueError, KeyError, IndexError):
        return None


def map_on_cursors(con: duckdb.DuckDBPyConnection, fn: Callable[[duckdb.DuckDBPyConnection, T], R],
                   items, workers: int = 2) -> list[R]:
    """``[fn(cursor, item) for item in items]``, computed by ``workers`` threads that each take the
    next item from one queue and run it on their own cursor of ``con``. DuckDB runs each query on
    one thread then (the setting is the database's): most of these queries are too small to split,
    so two at a time is what keeps two cores busy."""
    items = list(items)
    pending: queue.SimpleQueue = queue.SimpleQueue()
    for index, item in enumerate(items):
        pending.put((index, item))
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.execute("SET threads = 1")
    results: dict[int, R] = {}

    def work(_: int) -> None:
        cursor = con.cursor()
        try:
            while True:
                try:
                    index, item = pending.get_nowait()
                except queue.Empty:
                    return
                results[index] = fn(cursor, item)
        finally:
            cursor.close()

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
            list(pool.map(work, range(workers)))
    finally:
        con.execute(f"SET threads = {int(threads)}")
    return [results[i] for i in range(len(items))]


def gradable(questions) -> tuple[list, list]:
    """(questions that can be checked, the others with ``drop_reason``).

    Imported packs keep records that have no gold query (``no_gold_sql``: criteria, no golden, an
    answer alone) or no expected answer (``no_expected_answer``: a query alone); they cannot be run
    against an answer, so ``verify_questions`` reports them as dropped instead of running them.
    """
    kept, dropped = [], []
    for q in questions:
        if isinstance(q, dict) and not q.get("gold_sql"):
            dropped.append({**q, "drop_reason": "no_gold_sql"})
        elif isinstance(q, dict) and q.get("expected_answer") is None:
            dropped.append({**q, "drop_reason": "no_expected_answer"})
        else:
            kept.append(q)
    return kept, dropped
