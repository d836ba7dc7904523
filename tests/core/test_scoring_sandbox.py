"""Candidate SQL is untrusted: attacks are scored wrong or rejected, touch nothing outside the
pack's tables, and the run finishes."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from conftest import copy_pack, gold_questions

from evalpack.core import scoring
from evalpack.core.scoring import Limits, catalog_state, open_sandbox, pack_source, run_gold, run_query, score_command

SECRET = "s3cr3t-never-leaves-this-file"


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (files with their SHA-256, folders as 'dir')."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


@pytest.fixture()
def arena(tmp_path: Path, retail_pack: Path, monkeypatch) -> dict[str, Path]:
    pack = tmp_path / "pack"
    copy_pack(retail_pack, pack)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.csv"
    secret.write_text(f"token\n{SECRET}\n")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # DuckDB would spill an in-memory database to ./.tmp
    return {"pack": pack, "outside": outside, "secret": secret, "cwd": work, "tmp": tmp_path}


def attacks(a: dict[str, Path]) -> dict[str, str]:
    out, pack, secret = a["outside"], a["pack"], a["secret"]
    orders = pack / "rotations" / "seed_43" / "tables" / "orders.parquet"
    return {
        "copy_to": f"COPY orders TO '{out}/copied.csv'",
        "copy_query_into_pack": f"COPY (SELECT 1) TO '{pack}/planted.csv'",
        "export_database": f"EXPORT DATABASE '{out}/exported'",
        "attach_file": f"ATTACH '{out}/attached.duckdb' AS x",
        "attach_memory": "ATTACH ':memory:' AS scratch",
        "read_csv_outside": f"SELECT token FROM read_csv('{secret}')",
        "read_text_outside": f"SELECT content FROM read_text('{secret}')",
        "replacement_scan_outside": f"SELECT * FROM '{secret}'",
        "read_answer_key": f"SELECT expected_answer FROM read_json('{pack}/questions.jsonl') LIMIT 1",
        "read_other_rotation": f"SELECT count(*) FROM read_parquet('{orders}')",
        "read_blob_etc": "SELECT content FROM read_blob('/etc/passwd')",
        "glob_root": "SELECT count(*) FROM glob('/*')",
        "install": "INSTALL httpfs",
        "load": "LOAD httpfs",
        "set_external_access": "SET enable_external_access = true",
        "unlock_configuration": "SET lock_configuration = false",
        "pragma": "PRAGMA threads = 64",
        "create": "CREATE TABLE planted AS SELECT 1 AS x",
        "insert": "INSERT INTO orders SELECT * FROM orders",
        "drop": "DROP TABLE orders",
        "with_insert": "WITH x AS (SELECT * FROM orders) INSERT INTO orders SELECT * FROM x",
        "two_statements": "SELECT 1; DROP TABLE customers",
        "call_checkpoint": "CHECKPOINT",
        "recursive_cte": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        "cross_join": "SELECT count(*) FROM orders a, orders b, orders c",
        "memory_bomb": "SELECT list(a.order_id) FROM orders a, orders b",
        "getenv": "SELECT getenv('HOME')",
        "url": "SELECT * FROM read_csv('https://example.com/x.csv')",
    }


def test_attacks_are_wrong_or_rejected_and_nothing_leaks(arena):
    pack = arena["pack"]
    questions = gold_questions(pack)
    attack = attacks(arena)
    assert len(attack) >= 12
    ids = [q["id"] for q in questions]
    candidates = dict(zip(ids, attack.values(), strict=False))
    gold_after = {q["id"]: q["gold_sql"] for q in questions[len(attack):len(attack) + 5]}
    file = arena["tmp"] / "candidates.json"
    file.write_text(json.dumps({**candidates, **gold_after}))
    before_pack, before_outside = _snapshot(pack), _snapshot(arena["outside"])
    report_path = arena["tmp"] / "report.json"
    code = score_command(pack, file, json_path=report_path, timeout=0.5, memory_mb=256)
    assert code == 1
    report = json.loads(report_path.read_text())
    by_id = {r["id"]: r for r in report["questions"]}
    for (name, _), qid in zip(attack.items(), ids, strict=False):
        result = by_id[qid]
        assert result["status"] == "wrong", name
        for rotation, run in result["rotations"].items():
            assert run["match"] is False and "error" in run, (name, rotation, run)
    # the tables were intact after every attack: gold SQL that ran later on the same connections is correct
    assert all(by_id[qid]["status"] == "correct" for qid in gold_after)
    assert _snapshot(pack) == before_pack
    assert _snapshot(arena["outside"]) == before_outside
    assert list(arena["cwd"].iterdir()) == []
    assert SECRET not in report_path.read_text()
    timeouts = {name: by_id[qid]["rotations"]["seed_42"]["error"] for (name, _), qid in zip(attack.items(), ids,
                                                                                             strict=False)}
    assert timeouts["recursive_cte"].startswith("timeout")
    assert timeouts["cross_join"].startswith("timeout")
    assert timeouts["two_statements"].startswith("rejected: expected exactly one statement")
    assert timeouts["drop"].startswith("rejected: only a query")
    assert timeouts["install"] == "rejected: only a query (SELECT/WITH) may run, not INSTALL"
    assert "Permission" in timeouts["read_answer_key"] or "disabled" in timeouts["read_answer_key"]


def test_runaway_recursive_cte_stops_within_the_limit(arena):
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables", Limits(timeout=0.5))
    try:
        outcome = run_query(con, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                                 "SELECT max(n) FROM r", timeout=0.5)
        streamed = run_query(con, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                                  "SELECT n FROM r WHERE n < 0", timeout=0.5)
        after = run_query(con, "SELECT count(*) FROM orders", timeout=0.5)
    finally:
        con.close()
    assert outcome.timed_out and outcome.rows is None
    assert outcome.seconds < 5  # the limit is 0.5 s; generous slack for a loaded machine
    assert streamed.timed_out and streamed.seconds < 5
    assert after.rows == [(41999,)]  # the connection is usable after an interrupt


def test_sandbox_is_locked_and_holds_the_rotation(arena):
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables", Limits(memory_mb=128, threads=1))
    try:
        settings = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                                    "('enable_external_access', 'lock_configuration', 'threads', "
                                    "'temp_directory', 'autoload_known_extensions', "
                                    "'autoinstall_known_extensions')").fetchall())
        tables = sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
        views = con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0]
    finally:
        con.close()
    assert settings["enable_external_access"] == "false"
    assert settings["lock_configuration"] == "true"
    assert settings["threads"] == "1"
    assert settings["temp_directory"] == ""
    assert settings["autoload_known_extensions"] == "false"
    assert settings["autoinstall_known_extensions"] == "false"
    assert tables == ["customers", "orders"] and views == 0


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment", "SELEC 1", "SELECT 1;;SELECT 2",
                                 "PIVOT orders ON channel"])
def test_unrunnable_sql_is_an_error_not_a_crash(arena, sql):
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables")
    try:
        outcome = run_query(con, sql)
    finally:
        con.close()
    assert outcome.rows is None and outcome.error


def test_the_lock_holds_even_without_the_statement_filter(arena):
    """Second layer: statements the filter would reject fail inside DuckDB too when run directly."""
    import duckdb

    out = arena["outside"]
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables")
    failed = []
    try:
        for sql in [f"COPY orders TO '{out}/raw.csv'", f"EXPORT DATABASE '{out}/raw_export'",
                    f"ATTACH '{out}/raw.duckdb' AS x", "INSTALL httpfs", "LOAD httpfs",
                    "SET enable_external_access = true", "SET lock_configuration = false", "RESET threads",
                    "SET temp_directory = '.'", f"SELECT * FROM read_csv('{arena['secret']}')"]:
            try:
                con.execute(sql)
            except duckdb.Error:
                failed.append(sql)
        locked = con.execute("SELECT current_setting('enable_external_access')").fetchone()[0]
        before = catalog_state(con)
        con.execute("CREATE TEMP TABLE planted AS SELECT 1 AS x")  # what the statement filter keeps out
        tripped = catalog_state(con) != before
    finally:
        con.close()
    assert tripped  # the per-rotation catalog check would stop the run
    assert len(failed) == 10
    assert locked is False
    assert list(out.iterdir()) == [arena["secret"]]


def test_huge_results_are_cut_off_not_fetched(arena):
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables")
    try:
        wide = run_query(con, "SELECT repeat('x', 100000) AS big FROM range(100000)", max_bytes=8 * 2**20)
        endless = run_query(con, "SELECT range FROM range(10000000000)", max_rows=1000)
        exact = run_query(con, "SELECT range FROM range(1000)", max_rows=1000)
    finally:
        con.close()
    assert wide.rows is None and wide.error.startswith("result too large")
    assert endless.rows is None and endless.error == "too many rows: more than 1000"
    assert exact.error is None and len(exact.rows) == 1000


def test_the_gold_sandbox_reads_its_own_table_files_and_nothing_else(arena):
    """Gold mode queries the Parquet files in place: file access is allowed for exactly the
    rotation's table files, so every attack still fails, even run past the statement filter."""
    import duckdb

    tables = (arena["pack"] / "rotations" / "seed_42" / "tables").resolve()  # as the sandbox names its files
    before_pack, before_outside = _snapshot(arena["pack"]), _snapshot(arena["outside"])
    con = open_sandbox(tables, Limits(timeout=0.5, memory_mb=256), in_place=True)
    try:
        outcomes = {name: run_query(con, sql, timeout=0.5) for name, sql in attacks(arena).items()}
        past_filter = []
        for sql in [f"COPY orders TO '{arena['outside']}/raw.csv'", f"EXPORT DATABASE '{arena['outside']}/x'",
                    f"ATTACH '{arena['outside']}/raw.duckdb' AS x", "SET enable_external_access = true",
                    "SET allowed_paths = ['/']", "SET lock_configuration = false",
                    f"SELECT * FROM read_csv('{arena['secret']}')",
                    f"SELECT * FROM read_csv('{tables / 'orders.csv'}')",
                    f"SELECT * FROM read_json('{arena['pack'] / 'questions.jsonl'}')"]:
            try:
                con.execute(sql).fetchall()
                past_filter.append(sql)
            except duckdb.Error:
                pass
        own = run_query(con, f"SELECT count(*) FROM read_parquet('{tables / 'orders.parquet'}')")
        view = run_query(con, "SELECT count(*) FROM orders")
        kinds = con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()[0], \
            sorted(r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall())
    finally:
        con.close()
    assert {name: o.rows for name, o in outcomes.items() if o.rows is not None} == {}
    assert past_filter == []
    assert own.rows == view.rows == [(41999,)]
    assert kinds == (0, ["customers", "orders"])  # nothing copied into memory
    assert _snapshot(arena["pack"]) == before_pack and _snapshot(arena["outside"]) == before_outside
    assert all(SECRET not in (o.error or "") for o in outcomes.values())


def test_gold_sql_returns_the_same_rows_in_place_as_on_copied_tables(arena):
    tables = arena["pack"] / "rotations" / "seed_43" / "tables"
    copied, in_place = open_sandbox(tables), open_sandbox(tables, in_place=True)
    try:
        for q in gold_questions(arena["pack"]):
            a, b = run_query(copied, q["gold_sql"]), run_query(in_place, q["gold_sql"])
            assert a.error is None and b.error is None, q["id"]
            assert sorted(map(repr, a.rows)) == sorted(map(repr, b.rows)), q["id"]
    finally:
        copied.close()
        in_place.close()


def test_verify_reads_small_rotations_from_copies_and_reports_what_it_reports_in_place(arena, monkeypatch):
    """Gold mode copies rotations of less than COPIED_GOLD_BYTES of Parquet into its sandbox (40,000 orders
    are about 0.2 MB) and reads larger ones in place; the report is the same either way."""
    source = pack_source(arena["pack"])
    rotations = [name for name, _ in source.databases]
    copied = run_gold(arena["pack"])
    assert [scoring.gold_in_place(source, r) for r in rotations] == [False] * 3
    monkeypatch.setattr(scoring, "COPIED_GOLD_BYTES", 1)
    assert [scoring.gold_in_place(source, r) for r in rotations] == [True] * 3
    assert run_gold(arena["pack"]) == copied
    assert copied[0] == copied[1] > 100


@pytest.mark.parametrize(("cores", "asked", "each"), [(2, 2, 1), (8, 2, 2), (8, 1, 1), (64, 8, 8)])
def test_verify_gives_each_rotation_s_sandbox_its_share_of_the_cores(arena, monkeypatch, cores, asked, each):
    """The gold run's sandboxes (one per rotation, side by side) get no more DuckDB threads than their share of
    the cores, and never more than asked for; candidates keep the threads asked for."""
    started: list[int] = []

    class Recorded(scoring.SandboxWorker):
        def setup(self) -> dict:
            started.append(self.limits.threads)
            return super().setup()

    monkeypatch.setattr(scoring, "SandboxWorker", Recorded)
    monkeypatch.setattr(scoring.os, "cpu_count", lambda: cores)
    passed, total, _ = run_gold(arena["pack"], limits=Limits(threads=asked))
    assert passed == total > 100 and started == [each] * 3
    started.clear()
    gold = {q["id"]: q["gold_sql"] for q in gold_questions(arena["pack"])[:3]}
    scoring.score_pack(arena["pack"], gold, limits=Limits(threads=asked))
    assert started and set(started) == {asked}


def test_queries_sent_together_are_each_held_to_their_limits_in_order(arena):
    """run_many sends a rotation's queries to its worker at once: each still gets its own outcome, in order, as
    run gives it; a query that has to be killed with its worker is that query's timeout and a new worker answers
    the rest; a refused query never reaches the worker; those not started by the deadline are None."""
    tables = arena["pack"] / "rotations" / "seed_42" / "tables"
    count = "SELECT count(*) FROM orders"
    recursive = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    # DuckDB cannot interrupt this one: its worker process is killed
    unstoppable = ("SELECT length(regexp_replace(regexp_replace(repeat('ab', 20000000), 'a', 'aa', 'g'), 'b', 'bb', "
                   "'g'))")
    with scoring.SandboxWorker(tables, Limits(timeout=1.0, memory_mb=256)) as worker:
        alone = worker.run(count, 10)
        outcomes = list(worker.run_many([scoring.Query(count, 10), scoring.Query(unstoppable, 1.0),
                                         scoring.Query(count, 10), scoring.Query("SELECT '\ud800'", 10),
                                         scoring.Query(recursive, 1.0), scoring.Query("SELECT 2", 10)]))
        replaced = worker.replaced
        late = list(worker.run_many([scoring.Query(recursive, 1.0), scoring.Query(count, 10), scoring.Query(count, 10)],
                                    deadline=scoring.time.monotonic() + 0.5))
    assert alone.rows and [o.rows for o in outcomes[::2]] == [alone.rows, alone.rows, None]
    assert outcomes[1].timed_out and "its worker process was killed" in outcomes[1].error and replaced == 1
    assert outcomes[3].error.startswith("rejected: the SQL is not valid Unicode")
    assert outcomes[4].timed_out and outcomes[4].error.startswith("timeout") and outcomes[5].rows == [(2,)]
    assert late[0].error.startswith("timeout") and late[1:] == [None, None]


def test_a_deadline_spent_mid_batch_leaves_the_worker_answering(arena):
    tables = arena["pack"] / "rotations" / "seed_42" / "tables"
    slow = "SELECT count(*) FROM orders a, orders b WHERE a.order_id % 7 = b.order_id % 11"
    with scoring.SandboxWorker(tables, Limits(timeout=5.0, memory_mb=256)) as worker:
        outcomes = list(worker.run_many([scoring.Query(slow, 5.0)] * 3 + [scoring.Query("SELECT 1", 5.0)] * 40,
                                        deadline=scoring.time.monotonic() + 0.3))
        after = worker.run("SELECT 3", 5.0)
    # the worker skipped what it had not started by the deadline, and its replies were all read: the next
    # query gets its own answer, and closing finds the sandbox unchanged (else close raises)
    assert outcomes[-1] is None and after.rows == [(3,)]
    assert all(o is None or o.rows is not None or o.error for o in outcomes)


def test_many_queries_go_in_batches_and_an_abandoned_run_leaves_no_stale_reply(arena, monkeypatch):
    tables = arena["pack"] / "rotations" / "seed_42" / "tables"
    queries = [scoring.Query(f"SELECT {n} AS n", 5.0) for n in range(2 * scoring.BATCH_QUERIES + 7)]
    sent = []
    write = scoring._write_frame
    monkeypatch.setattr(scoring, "_write_frame", lambda out, message: sent.append(len(message.get("batch", ()))) or
                        write(out, message))
    with scoring.SandboxWorker(tables, Limits(timeout=5.0, memory_mb=256)) as worker:
        assert [o.rows for o in worker.run_many(queries)] == [[(n,)] for n in range(len(queries))]
        assert sent[1:] == [scoring.BATCH_QUERIES, scoring.BATCH_QUERIES, 7]  # after the setup message
        monkeypatch.setattr(scoring, "BATCH_CHARS", 30)  # three of these 13-character queries are too many
        sent.clear()
        assert [o.rows for o in worker.run_many(queries[:7])] == [[(n,)] for n in range(7)]
        assert sent == [2, 2, 2, 1]
        started = worker.run_many(queries)
        assert next(started).rows == [(0,)]
        started.close()  # the rest of its replies are never read: its worker goes, and the next run has its own
        assert worker.run("SELECT 42", 5.0).rows == [(42,)] and worker.replaced == 0


def test_a_result_s_size_counts_what_its_lists_and_structs_hold(arena):
    """One cell can hold a list of a million texts: the cap on a result's bytes counts them, not 16 bytes a cell."""
    con = open_sandbox(arena["pack"] / "rotations" / "seed_42" / "tables")
    try:
        listed = run_query(con, "SELECT list(repeat('x', 600)) FROM range(20000)", max_bytes=8 * 2**20)
        nested = run_query(con, "SELECT {'a': [repeat('y', 1000)]} FROM range(10000)", max_bytes=8 * 2**20)
        small = run_query(con, "SELECT list(repeat('z', 100)) FROM range(1000)", max_bytes=8 * 2**20)
    finally:
        con.close()
    assert listed.rows is None and listed.error.startswith("result too large")
    assert nested.rows is None and nested.error.startswith("result too large")
    assert small.error is None and len(small.rows[0][0]) == 1000
    assert scoring.value_bytes(["ab", {"k": "cde"}, 7]) == 16 + 2 + (16 + 1 + 3) + 16


def test_a_query_that_runs_out_of_memory_is_asked_again_of_a_fresh_worker(arena):
    """DuckDB keeps memory a query made it take: after a query that ran its worker out of memory, a query that fits
    in a fresh worker failed there too. Its outcome must not depend on what ran before it: it is asked again of a
    fresh worker, and a worker that ran out of memory answers nothing more."""
    tables = arena["pack"] / "rotations" / "seed_42" / "tables"
    fan_out = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r, range(2)) SELECT count(*) FROM r"
    fits = "SELECT length(repeat('x', 400000000))"
    with scoring.SandboxWorker(tables, Limits()) as fresh:
        alone = fresh.run(fits, 30)
    with scoring.SandboxWorker(tables, Limits()) as worker:
        after = list(worker.run_many([scoring.Query(fan_out, 30), scoring.Query(fits, 30), scoring.Query("SELECT 5", 30)]))
    assert alone.rows == [(400000000,)] and fresh.replaced == 0
    assert scoring.out_of_memory(after[0].error), after[0].error
    assert after[1].rows == [(400000000,)], after[1].error
    assert after[2].rows == [(5,)]
    assert worker.replaced >= 2  # the worker that ran out, and the fresh one that ran out again on the same query
    with scoring.SandboxWorker(tables, Limits()) as worker:  # a candidate cannot ask for a fresh worker by saying so
        said = worker.run("SELECT error('Out of Memory Error: give me a fresh worker')", 30)
    assert said.error.startswith("Invalid Input Error") and not scoring.out_of_memory(said.error)
    assert worker.replaced == 0


def test_a_report_shows_a_bounded_preview_of_each_result(arena, tmp_path):
    """A wrong answer's observed value is in the report; a 5 MB text or a list of 100,000 values is shown by its start
    and its size, so that the process writing the report holds little of each result."""
    pack = arena["pack"]
    questions = gold_questions(pack)
    long_text, long_list = questions[0]["id"], questions[1]["id"]
    candidates = tmp_path / "candidates.jsonl"
    candidates.write_text(json.dumps({"id": long_text, "sql": "SELECT repeat('x', 5000000)"}) + "\n"
                          + json.dumps({"id": long_list, "sql": "SELECT list(range) FROM range(100000)"}) + "\n")
    report_path = tmp_path / "report.json"
    assert score_command(pack, candidates, report_path, out=io.StringIO()) == 1
    report = json.loads(report_path.read_text())
    entries = {q["id"]: q for q in report["questions"]}
    for rotation in entries[long_text]["rotations"].values():
        assert rotation["observed"] == "x" * scoring.REPORTED_CHARS + "... (5,000,000 characters)"
    for rotation in entries[long_list]["rotations"].values():
        assert rotation["observed"] == [*range(scoring.REPORTED_ITEMS), "... (100,000 items)"]
    assert report_path.stat().st_size < 200_000
