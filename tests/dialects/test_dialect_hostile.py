"""Issue 50: read-only by construction in the SQLite and PostgreSQL sandboxes (candidates and gold SQL alike), and
PostgreSQL settings a candidate cannot turn against its time limit, the read-only guarantee or the next candidate.

Every test checks the tables themselves before and after (row counts and a checksum of each table's content), not
only the error a refused statement gives. The rotation is a small one made here; the PostgreSQL server is the
session's private one (tests/pg.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import signal
import sqlite3
import threading
import time
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg import sql as pgsql

from evalpack.core.scoring import KILL_GRACE, Limits
from evalpack.dialects.common import Keys
from evalpack.dialects.engines import SqliteEngine
from evalpack.dialects.postgres import RECONNECT_SECONDS, PostgresEngine, open_postgres_sandbox
from evalpack.dialects.sqlite import SqliteWorker, open_sqlite_sandbox, write_sqlite

LIMIT = 2.0  # seconds per query in the timing tests
SLACK = 3.0  # what a loaded two-core test machine may add to a stop

COLUMNS = {"items": {"item_id": "BIGINT", "label": "VARCHAR", "price": "DECIMAL(18,2)", "added": "DATE"},
           "sales": {"sale_id": "BIGINT", "item_id": "BIGINT", "sold_at": "TIMESTAMP", "qty": "BIGINT"}}
ROWS = {"items": 50, "sales": 400}

# what a candidate (or a pack's gold SQL) could send to change the data, each a single query-looking statement
SQLITE_WRITES = {
    "with_delete": "WITH x AS (SELECT 1) DELETE FROM sales",
    "with_update": "WITH x AS (SELECT 1) UPDATE items SET price = 0",
    "with_insert": "WITH x AS (SELECT 1) INSERT INTO sales SELECT * FROM sales",
    "with_replace": "WITH x AS (SELECT 1) REPLACE INTO items SELECT * FROM items",
    "delete_in_cte": "WITH x AS (DELETE FROM sales RETURNING *) SELECT count(*) FROM x",
    "update_in_cte": "WITH x AS (UPDATE items SET price = 0 RETURNING *) SELECT count(*) FROM x",
    "insert_in_cte": "WITH x AS (INSERT INTO sales SELECT * FROM sales RETURNING *) SELECT count(*) FROM x",
    "values_then_delete": "VALUES (1); DELETE FROM sales",
}
POSTGRES_WRITES = {
    "delete_in_cte": "WITH x AS (DELETE FROM sales RETURNING 1) SELECT count(*) FROM x",
    "update_in_cte": "WITH x AS (UPDATE items SET price = 0 RETURNING 1) SELECT count(*) FROM x",
    "insert_in_cte": "WITH x AS (INSERT INTO sales SELECT * FROM sales RETURNING 1) SELECT count(*) FROM x",
    "truncate_after_cte": "WITH x AS (SELECT 1) SELECT count(*) FROM x; TRUNCATE sales",
    "read_only_off_then_delete": "WITH s AS (SELECT set_config('default_transaction_read_only', 'off', false), "
                                 "set_config('transaction_read_only', 'off', false)), "
                                 "x AS (DELETE FROM sales RETURNING 1) SELECT count(*) FROM x, s",
}


def _rows() -> dict[str, pa.Table]:
    start = dt.date(2024, 1, 1)
    items = pa.table({
        "item_id": pa.array(range(1, ROWS["items"] + 1), pa.int64()),
        "label": pa.array([f"item {i:03d}" for i in range(ROWS["items"])], pa.string()),
        "price": pa.array([Decimal(i * 37 % 1000) / 4 for i in range(ROWS["items"])], pa.decimal128(18, 2)),
        "added": pa.array([start + dt.timedelta(days=i) for i in range(ROWS["items"])], pa.date32()),
    })
    sales = pa.table({
        "sale_id": pa.array(range(1, ROWS["sales"] + 1), pa.int64()),
        "item_id": pa.array([i % ROWS["items"] + 1 for i in range(ROWS["sales"])], pa.int64()),
        "sold_at": pa.array([dt.datetime(2024, 2, 1) + dt.timedelta(minutes=7 * i) for i in range(ROWS["sales"])],
                            pa.timestamp("us")),
        "qty": pa.array([i % 5 + 1 for i in range(ROWS["sales"])], pa.int64()),
    })
    return {"items": items, "sales": sales}


@pytest.fixture()
def rotation(tmp_path: Path) -> Path:
    """A rotation's tables folder: two Parquet tables."""
    tables = tmp_path / "rotation" / "tables"
    tables.mkdir(parents=True)
    for name, table in _rows().items():
        pq.write_table(table, tables / f"{name}.parquet")
    return tables


@pytest.fixture()
def sqlite_file(rotation: Path, tmp_path: Path) -> Path:
    path = tmp_path / "db" / "rotation.sqlite"
    write_sqlite(rotation, COLUMNS, path)
    return path


# --------------------------------------------------------------------------- state checks of the tests' own


def sqlite_tables(path: Path) -> dict[str, tuple[int, str]]:
    """Each table's row count and a checksum of its rows (order-independent), read through a connection of the
    test's own."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY 1")]
        out = {}
        for name in names:
            rows = sorted(repr(r) for r in con.execute(f'SELECT * FROM "{name}"'))
            out[name] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
        return out
    finally:
        con.close()


def postgres_tables(dsn: str, database: str) -> dict[str, tuple[int, str]]:
    """Each table of ``database``'s ``public`` schema: its row count and an md5 of its rows (order-independent), as
    the server's superuser sees them."""
    with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, dbname=database), autocommit=True) as admin:
        names = [r[0] for r in admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                             "ORDER BY 1").fetchall()]
        return {name: tuple(admin.execute(pgsql.SQL(
            "SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY md5(t::text)), '')) FROM {} t"
        ).format(pgsql.Identifier(name))).fetchone()) for name in names}


def engine_tables(run) -> dict[str, tuple]:
    """The same check through an engine's own ``run``."""
    return {name: tuple(run(f"SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY md5(t::text)), '')) "
                            f"FROM {name} t")[0]) for name in COLUMNS}


def role_activity(dsn: str, role: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        return admin.execute("SELECT pid, state, query FROM pg_stat_activity WHERE usename = %s AND state <> 'idle'",
                             [role]).fetchall()


# --------------------------------------------------------------------------- SQLite


def test_sqlite_candidates_that_change_data_fail_and_the_tables_stay_the_same(sqlite_file, tmp_path):
    before = sqlite_tables(sqlite_file)
    assert {name: count for name, (count, _) in before.items()} == ROWS
    with SqliteWorker(sqlite_file, tmp_path, Limits(timeout=LIMIT, memory_mb=128)) as worker:
        outcomes = {name: worker.run(sql, LIMIT) for name, sql in SQLITE_WRITES.items()}
        after_inside = worker.run("SELECT count(*) FROM sales", LIMIT)
    failed = {name: o.error for name, o in outcomes.items() if o.rows is None and o.error}
    assert set(failed) == set(SQLITE_WRITES), outcomes
    assert after_inside.rows == [(ROWS["sales"],)]
    assert sqlite_tables(sqlite_file) == before


def test_the_sqlite_connection_is_read_only_without_its_authorizer_or_query_only(sqlite_file):
    """By construction: the file is opened by a read-only URI, so with the authorizer removed and query_only switched
    off (by this test, past everything a candidate may send) a write still fails and the tables are the same."""
    before = sqlite_tables(sqlite_file)
    con = open_sqlite_sandbox(sqlite_file, Limits(memory_mb=128))
    errors = []
    try:
        con.set_authorizer(None)
        con.execute("PRAGMA query_only = OFF")
        assert con.execute("PRAGMA query_only").fetchone() == (0,)
        for sql in ("DELETE FROM sales", "UPDATE items SET price = 0", "INSERT INTO sales SELECT * FROM sales",
                    "WITH x AS (SELECT 1) DELETE FROM sales", "CREATE TABLE planted (x)", "DROP TABLE sales"):
            with pytest.raises(sqlite3.OperationalError) as raised:
                con.execute(sql)
            errors.append(str(raised.value))
    finally:
        con.close()
    assert all("readonly" in e or "read-only" in e for e in errors), errors
    assert sqlite_tables(sqlite_file) == before


def test_opening_a_sqlite_sandbox_in_process_leaves_the_process_heap_uncapped(sqlite_file, tmp_path):
    """SQLite's heap limit is process-wide and can only be lowered: a caller that opens a sandbox in its own process
    (a test, a notebook) must not be left with every later connection capped. Only the worker process caps it."""
    con = open_sqlite_sandbox(sqlite_file, Limits(memory_mb=64))
    con.close()
    with sqlite3.connect(":memory:") as fresh:
        assert fresh.execute("PRAGMA hard_heap_limit").fetchone() == (0,)
    worker = SqliteWorker(sqlite_file, tmp_path, Limits(timeout=30, memory_mb=64))
    try:
        assert worker.run("SELECT count(*) FROM sales", LIMIT).rows == [(ROWS["sales"],)]
        grown = worker.run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3000000) "
                           "SELECT group_concat(printf('%0100d', n)) IS NULL FROM r", 30)
    finally:
        worker.close()
    assert grown.rows is None and "memory" in grown.error, grown  # the worker's own cap still holds


def test_sqlite_gold_sql_that_changes_data_fails_and_the_tables_stay_the_same(rotation):
    with SqliteEngine(Keys()).open_rotation(rotation, COLUMNS) as run:
        before = {name: run(f"SELECT count(*) FROM {name}")[0][0] for name in COLUMNS}
        for sql in SQLITE_WRITES.values():
            with pytest.raises(sqlite3.Error):
                run(sql)
        after = {name: run(f"SELECT count(*) FROM {name}")[0][0] for name in COLUMNS}
    assert before == after == ROWS


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime_changes", "mtime_restored"])
def test_the_sqlite_sandbox_notices_a_change_made_behind_its_back(sqlite_file, tmp_path, keep_mtime):
    """The worker's own check at the end: data changed in the file while candidates ran (here by the test, through
    a connection of its own, one value for another of the same length) stops the run, even when the file's size
    and modification time were put back as they were."""
    stat = sqlite_file.stat()
    worker = SqliteWorker(sqlite_file, tmp_path, Limits(timeout=LIMIT, memory_mb=128))
    with pytest.raises(RuntimeError, match="changed while candidates ran"), worker:
        assert worker.run("SELECT count(*) FROM items", LIMIT).rows == [(ROWS["items"],)]
        con = sqlite3.connect(sqlite_file)
        try:
            with con:
                con.execute("UPDATE items SET label = 'item 999' WHERE item_id = 1")
        finally:
            con.close()
        assert sqlite_file.stat().st_size == stat.st_size
        if keep_mtime:
            os.utime(sqlite_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# --------------------------------------------------------------------------- PostgreSQL: writes


def test_postgres_candidates_that_change_data_fail_and_the_tables_stay_the_same(rotation, postgres_dsn):
    with open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=LIMIT, memory_mb=128)) as box:
        before = postgres_tables(postgres_dsn, box.database)
        assert {name: count for name, (count, _) in before.items()} == ROWS
        switched = box.run("SELECT set_config('default_transaction_read_only', 'off', false)")
        outcomes = {name: box.run(sql) for name, sql in POSTGRES_WRITES.items()}
        after = postgres_tables(postgres_dsn, box.database)
    assert switched.rows == [("off",)]  # a setting the candidate may change: it is not what keeps the data
    failed = {name: o.error for name, o in outcomes.items() if o.rows is None and o.error}
    assert set(failed) == set(POSTGRES_WRITES), outcomes
    assert after == before


def test_the_postgres_role_cannot_write_even_in_a_read_write_transaction(rotation, postgres_dsn):
    """By construction: the sandbox role owns nothing and holds SELECT alone, so as that role (SET ROLE, by the
    test's superuser), in a transaction that is not read-only, every write is refused by privilege."""
    with open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=LIMIT, memory_mb=128)) as box:
        before = postgres_tables(postgres_dsn, box.database)
        errors = {}
        with psycopg.connect(psycopg.conninfo.make_conninfo(postgres_dsn, dbname=box.database),
                             autocommit=True) as admin:
            owners = {r[0] for r in admin.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
            for sql in ("DELETE FROM sales", "UPDATE items SET price = 0", "INSERT INTO sales SELECT * FROM sales",
                        "TRUNCATE sales", "CREATE TABLE public.planted (x int)", "DROP TABLE sales",
                        "WITH x AS (DELETE FROM sales RETURNING 1) SELECT count(*) FROM x",
                        "ALTER TABLE items ADD COLUMN planted int", "CREATE TEMP TABLE planted (x int)"):
                admin.execute("BEGIN READ WRITE")
                try:
                    admin.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(box.role)))
                    admin.execute("SET LOCAL transaction_read_only = off")
                    admin.execute(sql)
                    errors[sql] = None
                except psycopg.Error as exc:
                    errors[sql] = type(exc).__name__
                finally:
                    admin.execute("ROLLBACK")
        after = postgres_tables(postgres_dsn, box.database)
    assert box.role not in owners
    assert errors and all(e in ("InsufficientPrivilege", "InvalidSchemaName") for e in errors.values()), errors
    assert after == before


def test_postgres_gold_sql_that_changes_data_fails_and_the_tables_stay_the_same(rotation, postgres_dsn):
    """A pack's gold SQL (a pack someone else built) is as untrusted as a candidate's: it ran as the DSN's role,
    a superuser here, where a data-changing CTE emptied the table it then counted."""
    with PostgresEngine(postgres_dsn).open_rotation(rotation, COLUMNS) as run:
        before = engine_tables(run)
        assert {name: count for name, (count, _) in before.items()} == ROWS
        errors = {}
        for name, sql in {**POSTGRES_WRITES, "read_server_file": "SELECT pg_read_file('/etc/hostname')",
                          "superuser": "SELECT 1 WHERE current_setting('is_superuser') = 'on'"}.items():
            try:
                rows = run(sql)
                errors[name] = None if rows else "no rows"
            except psycopg.Error as exc:
                errors[name] = str(exc)
        after = engine_tables(run)
    assert all(errors.values()), errors
    assert "permission denied" in errors["read_server_file"], errors
    assert after == before


# --------------------------------------------------------------------------- PostgreSQL: the time limit


def test_a_candidate_cannot_switch_the_time_limit_off(rotation, postgres_dsn):
    """set_config('statement_timeout', '0') in one candidate, then runaways in the next ones and in the same one:
    each is stopped at the limit, and nothing of theirs is left running on the server."""
    runaways = {
        "sleep": "SELECT pg_sleep(30)",
        "sleep_after_switch": "SELECT set_config('statement_timeout', '0', false), pg_sleep(30)",
        "switch_in_cte": "WITH s AS MATERIALIZED (SELECT set_config('statement_timeout', '0', false) AS t) "
                         "SELECT t, pg_sleep(30) FROM s",
        "cross_join": "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
        "lock_timeout_off": "SELECT set_config('lock_timeout', '0', false), "
                            "set_config('idle_in_transaction_session_timeout', '0', false), pg_sleep(30)",
    }
    with open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=LIMIT, memory_mb=128)) as box:
        switched = box.run("SELECT set_config('statement_timeout', '0', false)")
        stopped = {}
        for name, sql in runaways.items():
            started = time.monotonic()
            outcome = box.run(sql)
            stopped[name] = (outcome.timed_out, outcome.rows, round(time.monotonic() - started, 2))
        left = role_activity(postgres_dsn, box.role)
        after = box.run("SELECT count(*) FROM sales")
    assert switched.rows == [("0",)]
    for name, (timed_out, rows, seconds) in stopped.items():
        assert timed_out and rows is None, (name, stopped[name])
        assert seconds < LIMIT + KILL_GRACE + SLACK, (name, stopped[name])
    assert left == []
    assert after.rows == [(ROWS["sales"],)]


def test_a_query_left_running_by_a_killed_worker_is_ended_on_the_server(rotation, postgres_dsn):
    """The worker holding the role's session dies (killed here, as the scorer kills one at the limit) while its
    query runs: the server would go on running it, holding the role's one connection, whatever the query set; the
    sandbox ends that backend from its own connection, and the next candidate runs at once."""
    with open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=60.0, memory_mb=128)) as box:
        assert box.run("SELECT 1").rows == [(1,)]
        pid = box.worker.proc.pid
        killer = threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL))
        killer.start()
        try:
            started = time.monotonic()
            killed = box.run("SELECT set_config('statement_timeout', '0', false), pg_sleep(30)")
            ended = time.monotonic() - started
        finally:
            killer.cancel()
        time.sleep(0.5)
        left = role_activity(postgres_dsn, box.role)
        started = time.monotonic()
        after = box.run("SELECT count(*) FROM sales")
        next_took = time.monotonic() - started
    assert killed.rows is None and "worker process" in killed.error, killed
    assert ended < 1.0 + SLACK, ended
    assert left == [], left
    # a new worker and session, not a wait for the old one's slot (RECONNECT_SECONDS) that ends in an error
    assert after.rows == [(ROWS["sales"],)] and next_took < 2 * SLACK < RECONNECT_SECONDS, (after, next_took)


# --------------------------------------------------------------------------- PostgreSQL: the next candidate


def test_what_a_candidate_sets_does_not_reach_the_next_one(rotation, postgres_dsn):
    """Settings (through set_config, session-wide) and session state (an advisory lock) of one candidate are gone
    when the next one runs: it sees the sandbox's own settings."""
    names = ("default_transaction_read_only", "transaction_read_only", "search_path", "timezone", "datestyle",
             "work_mem", "lock_timeout", "max_parallel_workers_per_gather", "client_connection_check_interval")
    # statement_timeout is the time left of the query's own limit (SET LOCAL), in milliseconds
    timed = f"(SELECT setting::int FROM pg_settings WHERE name = 'statement_timeout') BETWEEN 1 AND {LIMIT * 1000:.0f}"
    show = "SELECT " + ", ".join(f"current_setting('{n}')" for n in names) + f", {timed}"
    with open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=LIMIT, memory_mb=128)) as box:
        fresh = box.run(show)
        changed = box.run(
            "SELECT set_config('statement_timeout', '0', false), set_config('default_transaction_read_only', 'off', "
            "false), set_config('search_path', 'pg_catalog', false), set_config('timezone', 'Pacific/Kiritimati', "
            "false), set_config('datestyle', 'SQL, DMY', false), set_config('work_mem', '64kB', false), "
            "set_config('lock_timeout', '0', false), set_config('max_parallel_workers_per_gather', '4', false), "
            "pg_advisory_lock(50), pg_try_advisory_lock(51)")
        seen = box.run(show)
        locks = box.run("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        read_only = box.run("SELECT current_setting('transaction_read_only')")
    assert changed.error is None, changed
    assert fresh.rows is not None and seen.rows == fresh.rows, (fresh.rows, seen.rows)
    assert dict(zip((*names, "timed"), fresh.rows[0], strict=True))["default_transaction_read_only"] == "on"
    assert fresh.rows[0][-1] is True
    assert locks.rows == [(0,)]
    assert read_only.rows == [("on",)]


def test_the_postgres_sandbox_notices_a_change_made_behind_its_back(rotation, postgres_dsn):
    """The sandbox's own check at the end (as the DSN's role): a value changed in place (the row count kept), or
    the role's defaults changed (its time limit, its read-only default), stops the run."""
    changes = {
        "value": "UPDATE items SET label = 'item 999' WHERE item_id = 1",
        "timeout_default": "ALTER ROLE {role} IN DATABASE {db} SET statement_timeout = 0",
        "read_only_default": "ALTER ROLE {role} SET default_transaction_read_only = off",
    }
    for name, change in changes.items():
        box = open_postgres_sandbox(postgres_dsn, rotation, COLUMNS, Limits(timeout=LIMIT, memory_mb=128))
        with pytest.raises(RuntimeError, match="changed while candidates ran"), box:
            assert box.run("SELECT count(*) FROM items").rows == [(ROWS["items"],)], name
            with psycopg.connect(psycopg.conninfo.make_conninfo(postgres_dsn, dbname=box.database),
                                 autocommit=True) as admin:
                admin.execute(pgsql.SQL(change).format(role=pgsql.Identifier(box.role),
                                                       db=pgsql.Identifier(box.database)))
    with contextlib.closing(psycopg.connect(postgres_dsn, autocommit=True)) as admin:
        assert admin.execute("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'evalpack_sandbox%'").fetchone() == (0,)
