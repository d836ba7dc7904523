"""A pack opened for an agent that works in it (``evalpack serve``): its sandboxes and its grader.

Every query runs where ``evalpack score`` runs candidate SQL: in a sandbox worker process of the standalone
scorer (:class:`evalpack.core.scoring.SandboxWorker`: one read-only statement, the time limit, the memory cap,
no file or network access). A :class:`WorkerPool` keeps a few such processes per rotation alive between
calls, lent one at a time. :class:`Grader` grades one submission the moment it arrives, on every rotation,
with the scorer's own comparison (:func:`evalpack.core.scoring.answer_matches`), and assembles an episode's
report in the form :func:`evalpack.core.scoring.score_pack` gives it, from those gradings.
"""

from __future__ import annotations

import contextlib
import math
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import (
    NOT_ANSWERED,
    ROWS_TYPE,
    Integrity,
    Limits,
    Outcome,
    SandboxWorker,
    _fetch_cap,  # the scorer's own rules for one candidate on one rotation: rows fetched, the value reported
    answer_matches,
    answer_type_of,
    assemble_report,
    expected_for,
    is_unanswerable,
    pack_questions,
    pack_source,
    printable,
    question_result,
    quote_literal,
    reported,
    scorable,
    top_level_order_by,
)

REAP_SECONDS = 2.0  # how often a pool looks for idle workers whose process has ended


class WorkerPool:
    """Sandbox worker processes over one rotation's tables, at most ``size`` of them, each lent to one
    caller at a time (:meth:`lend`); a caller waits while all are busy. Processes start on first use."""

    def __init__(self, tables_dir: Path, limits: Limits, size: int,
                 csv_types: dict[str, dict[str, str]] | None = None) -> None:
        self.tables_dir, self.limits, self.size, self.csv_types = Path(tables_dir), limits, size, csv_types
        self._idle: queue.LifoQueue[SandboxWorker] = queue.LifoQueue()
        self._all: list[SandboxWorker] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._reap_while_open, name="evalpack-reaper", daemon=True).start()

    def _reap_while_open(self) -> None:
        while not self._closed.wait(REAP_SECONDS):
            self.reap_idle()

    def reap_idle(self) -> int:
        """Reap the processes of idle workers that have ended since their last query (a server may sit idle for
        long: no zombie waits for the next call); how many. Each is replaced at its next query."""
        taken = []
        with contextlib.suppress(queue.Empty):
            while True:
                taken.append(self._idle.get_nowait())
        reaped = sum(worker.reap() for worker in taken)
        for worker in reversed(taken):  # back in the order they were idle in
            self._idle.put(worker)
        return reaped

    @contextlib.contextmanager
    def lend(self) -> Iterator[SandboxWorker]:
        """One worker, for the caller alone until the block ends."""
        worker = None
        with self._lock:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                if len(self._all) < self.size:
                    worker = SandboxWorker(self.tables_dir, self.limits, csv_types=self.csv_types)
                    self._all.append(worker)
        if worker is None:
            worker = self._idle.get()
        try:
            yield worker
        finally:
            self._idle.put(worker)

    def usage(self) -> tuple[int, int, int, dict[str, str]]:
        """(address-space cap, peak resident bytes, processes replaced, how CSV tables were typed) so far."""
        with self._lock:
            workers = list(self._all)
        loaded = next((w.loaded for w in workers if w.loaded), {})
        return (max((w.cap_bytes for w in workers), default=0), max((w.peak_bytes for w in workers), default=0),
                sum(w.replaced for w in workers), loaded)

    def close(self) -> list[str]:
        """End every worker process; the problems found (a sandbox database that changed), if any."""
        problems = []
        self._closed.set()
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            try:
                worker.close()
            except RuntimeError as exc:
                problems.append(str(exc))
        return problems


@dataclass(frozen=True)
class Graded:
    """One submission graded on every rotation: its SQL (None: declined), each rotation's entry as
    :func:`evalpack.core.scoring.score_pack` reports it (``match``, ``seconds``, ``error`` or ``observed``), the
    status the report gives the question (``correct``, ``wrong``, ``declined``, or ``not scored`` for a
    question whose answer the pack does not hold), and the seconds its queries took."""

    question_id: str
    sql: str | None
    rotations: dict[str, dict[str, Any]]
    status: str
    query_seconds: float = 0.0


NUMBER_TEXT = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?\s*")


def number_text(value: Any) -> Any:
    """The ``value`` of a number (or integer) question as a number where it is text that reads as one: ``run_sql``
    gives a DECIMAL's value as text, to keep every digit, and an agent may hand it back as it read it."""
    return Decimal(value.strip()) if isinstance(value, str) and NUMBER_TEXT.fullmatch(value) else value


def typed_value(record: dict, value: Any) -> Any:
    """An agent's ``value`` for ``record`` with the text that reads as a number made a number where the answer holds
    one: the whole value of a number (or integer) question (:func:`number_text`), and in a result-set answer each
    cell of a column whose expected cells are numbers (``run_sql`` shows a DECIMAL as text, and an agent may hand
    back the rows it was shown). Other text stays text: a label such as ``"2025"`` in a text column is no number."""
    if answer_type_of(record) in ("number", "integer"):
        return number_text(value)
    if not isinstance(value, list):
        return value
    expected = record.get("expected_answer")
    numeric = {j for rows in (expected.values() if isinstance(expected, dict) else [expected])
               if isinstance(rows, list) for row in rows if isinstance(row, list)
               for j, cell in enumerate(row) if isinstance(cell, (int, float)) and not isinstance(cell, bool)}
    return [[number_text(cell) if j in numeric else cell for j, cell in enumerate(row)] if isinstance(row, list)
            else row for row in value]


def value_sql(value: Any) -> str:
    """The query whose result is ``value``: ``SELECT <literal>`` for a number, text or boolean, a ``VALUES`` list
    for rows (a list of lists; a flat list is one column). EvalpackError for anything else (an object, NaN)."""

    def literal(cell: Any) -> str:
        if cell is None:
            return "NULL"
        if isinstance(cell, bool):
            return "TRUE" if cell else "FALSE"
        if isinstance(cell, int):
            return str(cell)
        if isinstance(cell, float):
            if not math.isfinite(cell):
                raise EvalpackError(f"value: {cell!r} is not a number an answer can be; give a finite number")
            return str(Decimal(repr(cell)))
        if isinstance(cell, Decimal):
            if not cell.is_finite():
                raise EvalpackError(f"value: {cell} is not a number an answer can be; give a finite number")
            return format(cell, "f")
        if isinstance(cell, str):
            return quote_literal(cell)
        raise EvalpackError(f"value: a cell must be a number, text, true/false or null, not {type(cell).__name__}")

    if isinstance(value, list):
        rows = [row if isinstance(row, list) else [row] for row in value]
        if not rows:
            return "SELECT 1 WHERE FALSE"
        if any(not row for row in rows):
            raise EvalpackError("value: a row of the answer is empty; give each row's cells in column order")
        return "SELECT * FROM (VALUES " + ", ".join("(" + ", ".join(map(literal, row)) + ")" for row in rows) + ")"
    if value is None:
        raise EvalpackError("value: null is no answer; to answer nothing, decline")
    return f"SELECT {literal(value)}"


class Grader:
    """The pack's questions, its rotations' sandboxes and the scorer's grading, for one server.

    ``limits``, ``rule``, ``holdout_key`` and ``integrity`` mean what they mean to ``evalpack score``; ``workers``
    is the number of sandbox processes kept per rotation."""

    def __init__(self, pack: str | Path, *, rule: str = "spider", limits: Limits | None = None,
                 holdout_key: str | Path | None = None, integrity: Integrity | None = None, workers: int = 2) -> None:
        self.pack, self.rule, self.limits, self.integrity = Path(pack), rule, limits or Limits(), integrity
        self.records, self.key_used = pack_questions(self.pack, holdout_key)
        self.by_id = {r["id"]: r for r in self.records}
        self.source = pack_source(self.pack)
        self.rotations = [name for name, _ in self.source.databases]
        self.pools = {name: WorkerPool(self.source.tables_dir(name), self.limits, workers, self.source.csv_types)
                      for name in self.rotations}
        with contextlib.closing(duckdb.connect(":memory:")) as parser:
            self.ordered = {r["id"]: top_level_order_by(parser, r["gold_sql"]) for r in self.records
                            if scorable(r) and not is_unanswerable(r) and answer_type_of(r) == ROWS_TYPE}

    def question(self, question_id: str) -> dict:
        """The record of ``question_id``; EvalpackError naming the pack's id where only the case differs."""
        record = self.by_id.get(question_id)
        if record is None:
            folded = {qid.casefold(): qid for qid in self.by_id}
            hint = folded.get(str(question_id).casefold())
            raise EvalpackError(f"question_id {printable(question_id)!r} is no question of this pack"
                                + (f"; did you mean {hint}?" if hint else "; list_questions gives the ids"))
        return record

    def run(self, rotation: str, sql: str, max_rows: int, timeout: float | None = None) -> Outcome:
        """``sql`` on one rotation's sandbox (:meth:`evalpack.core.scoring.SandboxWorker.run`)."""
        with self.pools[rotation].lend() as worker:
            return worker.run(sql, self.limits.timeout if timeout is None else timeout, max_rows)

    def grade(self, question_id: str, sql: str | None, budget: float = math.inf) -> Graded:
        """``sql`` (None: declined) as the answer to ``question_id``, on every rotation, as ``evalpack score``
        grades it: an unanswerable question is correct when declined and wrong with any SQL (not run). ``budget``:
        the seconds of the episode's run time left (a query gets no more than that)."""
        q = self.question(question_id)
        if not scorable(q) and not is_unanswerable(q):
            return Graded(question_id, sql, {}, "not scored")
        if is_unanswerable(q):
            return Graded(question_id, sql, {}, "correct" if sql is None else "wrong")
        if sql is None:
            return Graded(question_id, None, {}, "declined")
        entries, spent = {}, 0.0
        for rotation in self.rotations:
            expected = expected_for(q, rotation)
            left = budget - spent
            if left <= 0:
                entries[rotation] = {"match": False, "seconds": 0.0, "error": "not run: the run's time limit of "
                                     f"{self.limits.run_timeout:g} s was reached (--run-timeout)"}
                continue
            outcome = self.run(rotation, sql, _fetch_cap(q, expected, self.rule), min(self.limits.timeout, left))
            spent += outcome.seconds
            entry: dict[str, Any] = {"match": False, "seconds": round(outcome.seconds, 6)}
            if outcome.rows is None:
                entry["error"] = outcome.error
            else:
                entry["match"] = answer_matches(q, expected, outcome.rows, self.rule, self.ordered.get(q["id"], False))
                entry["observed"] = reported(outcome.rows)
            entries[rotation] = entry
        status = "correct" if all(e["match"] for e in entries.values()) else "wrong"
        return Graded(question_id, sql, entries, status, spent)

    def report(self, graded: dict[str, Graded], seconds: float, candidates: dict[str, Any]) -> dict[str, Any]:
        """The report ``evalpack score --json`` writes for the answers ``graded`` (the last per question), in the
        same form and by the same rules as :func:`evalpack.core.scoring.score_pack`; ``seconds`` is the time grading
        took and ``candidates`` says where the answers came from.

        The report is assembled by the scorer's own :func:`evalpack.core.scoring.assemble_report`, from gradings made as
        the answers came in; tests/agent/test_serve.py holds it equal to ``evalpack score`` on the episode's answers."""
        unscored = {q["id"] for q in self.records if not scorable(q) and not is_unanswerable(q)}
        results = []
        for q in self.records:
            if q["id"] in unscored:
                continue
            given = graded.get(q["id"])
            answered = given is not None and given.sql is not None
            status = (NOT_ANSWERED if given is None else given.status if answered
                      else "correct" if is_unanswerable(q) else "declined")
            results.append(question_result(q, status, answered,
                                           given.rotations if answered and not is_unanswerable(q) else {}))
        usage = [pool.usage() for pool in self.pools.values()]
        return assemble_report(
            self.pack, rule=self.rule, limits=self.limits, integrity=self.integrity, origin=self.source,
            records=self.records, results=results, key_used=self.key_used, candidate_ids=list(graded),
            seconds=seconds, query_seconds=sum(g.query_seconds for g in graded.values()),
            usage=[u[:3] for u in usage], tables_loaded={name: u[3] for name, u in zip(self.rotations, usage)},
        ) | {"candidates": candidates}

    def close(self) -> list[str]:
        """End every sandbox process; the problems found (see :meth:`WorkerPool.close`)."""
        return [problem for pool in self.pools.values() for problem in pool.close()]
