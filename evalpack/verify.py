"""Run every gold SQL on every rotation's written files and apply the golden checks.

A question ships only when, on every rotation, its gold SQL returns exactly the expected
answer, the result is not empty, the answer does not depend on orphan rows, and no tie sits
at an ORDER BY ... LIMIT boundary.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb
from sqlglot import exp

from evalpack.questions import DIALECT, Question, parse_gold
from evalpack.scoring import connect_tables, observed, quote_ident, scalar_matches

T = TypeVar("T")
R = TypeVar("R")
CHECKS = ("matches", "non_empty", "orphan_independent", "deterministic")


@dataclass(frozen=True)
class Link:
    """A child column whose rows may point at a missing parent."""

    child_table: str
    child_column: str
    parent_table: str
    parent_column: str


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

    @property
    def ships(self) -> bool:
        return all(o.passed for o in self.observations)

    @property
    def drop_reason(self) -> str | None:
        if self.ships:
            return None
        reasons = []
        for o in self.observations:
            if o.error:
                reasons.append("error")
            reasons += o.failed_checks()
        order = ("error",) + CHECKS
        named = {"matches": "mismatch", "non_empty": "empty_result", "orphan_independent": "depends_on_orphans",
                 "deterministic": "tie_at_limit", "error": "error"}
        return ", ".join(named[r] for r in order if r in reasons)


@functools.lru_cache(maxsize=4096)
def exclude_orphans(sql: str, links: tuple[Link, ...], key_tables: tuple[str | None, ...] | None = None) -> str | None:
    """The query with every child table replaced by its rows whose parent exists (or is NULL).

    With ``key_tables`` (one per link: a table of the link's orphan keys, see
    :func:`orphan_key_tables`) a child row is dropped when its key is one of those: the same rows,
    found by probing a handful of keys instead of the whole parent table.
    Returns None when the query reads no child table of ``links``.
    """
    tree = parse_gold(sql)
    by_child: dict[str, list[tuple[Link, str | None]]] = {}
    for link, keys in zip(links, key_tables or (None,) * len(links)):
        by_child.setdefault(link.child_table, []).append((link, keys))
    changed = False

    def rewrite(node: exp.Expression) -> exp.Expression:
        nonlocal changed
        if not isinstance(node, exp.Table) or node.name not in by_child or isinstance(node.parent, exp.Subquery):
            return node
        conditions = []
        for link, keys in by_child[node.name]:
            col = exp.column(link.child_column)
            if keys is None:
                parents = exp.select(exp.column(link.parent_column)).from_(link.parent_table)
                kept = exp.In(this=col.copy(), query=parents.subquery())
            else:
                kept = exp.Not(this=exp.In(this=col.copy(), query=exp.select("k").from_(keys).subquery()))
            conditions.append(exp.or_(exp.Is(this=col, expression=exp.Null()), kept))
        inner = exp.select(exp.Star()).from_(exp.to_table(node.name)).where(exp.and_(*conditions))
        changed = True
        return inner.subquery(node.alias_or_name)

    rewritten = tree.transform(rewrite, copy=True)
    return rewritten.sql(dialect=DIALECT) if changed else None


def orphans_sql(link: Link, what: str) -> str:
    """SELECT ``what`` over the child rows of ``link`` whose non-NULL key has no parent (an anti join)."""
    c, p = quote_ident(link.child_column), quote_ident(link.parent_column)
    return (f"SELECT {what} FROM {quote_ident(link.child_table)} AS c ANTI JOIN {quote_ident(link.parent_table)} AS p "
            f"ON c.{c} = p.{p} WHERE c.{c} IS NOT NULL")


def live_links(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> tuple[Link, ...]:
    """The links that have at least one orphan row on ``con`` (read-only): excluding orphans can
    only change an answer through these. A link that cannot be read counts as live, so that the
    check runs and reports it."""
    def live(link: Link) -> bool:
        try:
            return bool(con.execute(f"SELECT EXISTS ({orphans_sql(link, '1')})").fetchone()[0])
        except duckdb.Error:
            return True

    return tuple(link for link in links if live(link))


def orphan_key_tables(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> tuple[str | None, ...]:
    """For each link, a table on ``con`` of its distinct orphan keys (our own connection only);
    None for a link that cannot be read (its check then reads the parent table itself)."""
    names: list[str | None] = []
    for i, link in enumerate(links):
        name = f"__orphan_keys_{i}"
        try:
            con.execute(f"CREATE OR REPLACE TABLE {name} AS "
                        f"{orphans_sql(link, f'DISTINCT c.{quote_ident(link.child_column)} AS k')}")
        except duckdb.Error:
            name = None
        names.append(name)
    return tuple(names)


@functools.lru_cache(maxsize=4096)
def tie_probe(sql: str) -> tuple[str, int, int] | None:
    """The query extended with its ORDER BY keys as trailing columns over LIMIT+1 rows, LIMIT and
    the number of keys; None without ORDER BY ... LIMIT."""
    tree = parse_gold(sql)
    if not isinstance(tree, exp.Select):
        return None
    limit, order = tree.args.get("limit"), tree.args.get("order")
    if limit is None or order is None:
        return None
    try:
        n = int(limit.expression.this)
    except (AttributeError, TypeError, ValueError):
        return None
    probe = tree.copy()
    keys = [exp.alias_(o.this.copy(), f"__tie_key_{i}") for i, o in enumerate(order.expressions)]
    probe.set("expressions", [*probe.expressions, *keys])
    width = len(keys)
    return probe.limit(n + 1).sql(dialect=DIALECT), n, width


def check_question(con: duckdb.DuckDBPyConnection, q: Question, rotation: str, expected: Any,
                   links: tuple[Link, ...], key_tables: tuple[str | None, ...] | None = None) -> Observation:
    """Run one question's gold SQL and golden checks on one connection.

    ``links``: the links whose orphans the answer must not depend on (only those with orphan rows
    on ``con`` matter, see :func:`live_links`); ``key_tables``: their orphan keys, if on ``con``."""
    try:
        rows = con.execute(q.gold_sql).fetchall()
    except duckdb.Error as exc:
        return Observation(rotation, None, (), error=str(exc).splitlines()[0])
    matches = scalar_matches(expected, q.answer_type, q.round_decimals, rows)
    non_empty = bool(rows) and any(v is not None for v in rows[0])
    deterministic: bool | None = None
    probe = tie_probe(q.gold_sql)
    if probe:
        probe_sql, n, width = probe
        try:
            keys = [row[-width:] for row in con.execute(probe_sql).fetchall()]
            deterministic = not (len(keys) > n and keys[n - 1] == keys[n])
        except duckdb.Error:
            deterministic = False
    orphan_ok: bool | None = None
    # with a tie at the LIMIT the returned row varies between runs: that is the tie's failure, not orphans
    if q.kind != "fk_orphans" and links and deterministic is not False:
        rewritten = exclude_orphans(q.gold_sql, links, key_tables)
        if rewritten is not None:
            # the answer must not move when orphan rows are excluded (with `matches`: it stays the declared one)
            try:
                orphan_ok = con.execute(rewritten).fetchall() == rows
            except duckdb.Error:
                orphan_ok = False
    checks = (("matches", matches), ("non_empty", non_empty), ("orphan_independent", orphan_ok),
              ("deterministic", deterministic))
    return Observation(rotation, observed(rows), checks, rows=tuple(rows))


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
        obs = check_question(con, question, rotation, question.expected_for(rotation), links)
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
                    tuple(record.get("tags", ())))


MATERIALIZE_ROWS = 5_000_000


def materialize(con: duckdb.DuckDBPyConnection, max_rows: int = MATERIALIZE_ROWS) -> duckdb.DuckDBPyConnection:
    """Load the views over a rotation's files into memory when the rotation has at most
    ``max_rows`` rows in all: many queries then run on in-memory tables (zone maps, no
    decompression); larger rotations stay on their files so memory stays bounded."""
    con.execute("SET enable_progress_bar = false")  # DuckDB draws a bar on a terminal for long loads
    views = [name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    quoted = {name: '"' + name.replace('"', '""') + '"' for name in views}
    total = sum(con.execute(f"SELECT COUNT(*) FROM {quoted[name]}").fetchone()[0] for name in views)
    if total > max_rows:
        return con
    for name in views:
        staged = '"__load_' + name.replace('"', '""') + '"'
        con.execute(f"CREATE TABLE {staged} AS SELECT * FROM {quoted[name]}")
        con.execute(f"DROP VIEW {quoted[name]}")
        con.execute(f"ALTER TABLE {staged} RENAME TO {quoted[name]}")
    return con


ENGINE_MEMORY_LIMIT = "1GiB"  # DuckDB's working memory per connection; beyond it DuckDB spills to disk


@contextlib.contextmanager
def rotation_connection(tables_dir: Path, fmt: str = "parquet", types: dict | None = None,
                        con: duckdb.DuckDBPyConnection | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to one rotation's tables (trusted SQL only), loaded into memory when small
    (:func:`materialize`; CSV always). Our own connections get a memory limit and a private spill
    folder, so peak memory stays bounded however large the rotation is."""
    spill = None
    if con is None:
        spill = tempfile.mkdtemp(prefix="evalpack-spill-")
        con = duckdb.connect(":memory:", config={"memory_limit": ENGINE_MEMORY_LIMIT, "temp_directory": spill})
    try:
        connect_tables(tables_dir, fmt=fmt, con=con, types=types)
        # CSV views re-parse their file on every query: always load them
        yield materialize(con, max_rows=1 << 62 if fmt == "csv" else MATERIALIZE_ROWS)
    finally:
        con.close()
        if spill:
            shutil.rmtree(spill, ignore_errors=True)


def verify_rotations(questions: tuple[Question, ...], tables_dirs: dict[str, Path], links: tuple[Link, ...] = (),
                     connect: Callable[[], duckdb.DuckDBPyConnection] | None = None,
                     fmt: str = "parquet", types: dict | None = None) -> tuple[Verdict, ...]:
    """Every question on every rotation (one fresh connection per rotation, a view per table)."""
    per_question: dict[str, list[Observation]] = {q.id: [] for q in questions}
    for rotation, folder in tables_dirs.items():
        with rotation_connection(folder, fmt, types, connect() if connect else None) as con:
            for q, obs in zip(questions, verify_rotation(con, questions, rotation, links)):
                per_question[q.id].append(obs)
    return tuple(Verdict(q, tuple(per_question[q.id])) for q in questions)


def verify_rotation(con: duckdb.DuckDBPyConnection, questions: tuple[Question, ...], rotation: str,
                    links: tuple[Link, ...] = (), live: tuple[Link, ...] | None = None) -> list[Observation]:
    """Every question's observation on one rotation's connection (ours: it gets tables of orphan keys).
    ``live``: the links with orphan rows on ``con``, when already known."""
    live = live_links(con, links) if live is None else live
    keys = orphan_key_tables(con, live)
    return map_on_cursors(con, lambda cur, q: check_question(cur, q, rotation, q.expected_for(rotation), live, keys),
                          questions)


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
