"""Hostile input, second round (issue 50), DuckDB's sandbox: read-only by construction (a data-changing CTE
parses as a SELECT), a state check that notices a changed row, workers that outlive the thread that started
them and are replaced when they die, and loads bounded before they start (rows the manifest declares, the
memory cap, the size of questions.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import copy_pack, gold_questions

from evalpack.core import scoring
from evalpack.core.scoring import InputError, Limits, SandboxWorker, catalog_state, load_questions, score_command

CHANGES = {
    "delete": "WITH gone AS (DELETE FROM orders RETURNING 1) SELECT count(*) FROM gone",
    "update": "WITH zeroed AS (UPDATE orders SET amount = 0 RETURNING 1) SELECT count(*) FROM zeroed",
    "insert": "WITH added AS (INSERT INTO orders SELECT * FROM orders RETURNING 1) SELECT count(*) FROM added",
    "delete_outside_window": "WITH gone AS (DELETE FROM orders WHERE ordered_at < DATE '2025-03-01' RETURNING 1) "
                             "SELECT count(*) FROM gone",
}
TOTALS = "SELECT count(*), sum(amount), count(DISTINCT channel) FROM orders"


@pytest.fixture()
def tables(tmp_path: Path, retail_pack: Path, monkeypatch) -> Path:
    pack = copy_pack(retail_pack, tmp_path / "pack")
    monkeypatch.chdir(tmp_path)
    return pack / "rotations" / "seed_42" / "tables"


@pytest.mark.parametrize("in_place", [False, True], ids=["copied", "in_place"])
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_data_changing_sql_that_parses_as_a_select_changes_nothing(tables, name, in_place):
    with SandboxWorker(tables, Limits(timeout=10.0, memory_mb=256), in_place=in_place) as worker:
        before = worker.run(TOTALS, 10.0)
        attempt = worker.run(CHANGES[name], 10.0)
        after = worker.run(TOTALS, 10.0)
    # close() above raised nothing: the worker's own state check found the database unchanged
    assert before.error is None and after.rows == before.rows
    assert attempt.rows is None and attempt.error


def test_a_cheat_cannot_delete_rows_for_the_queries_after_it(tmp_path, retail_pack, monkeypatch):
    """The first candidate deletes every order before March; each later one is the pack's own gold SQL, which must
    still match on every rotation (and the run is not stopped as tampered with: nothing changed)."""
    monkeypatch.chdir(tmp_path)
    gold = {q["id"]: q["gold_sql"] for q in gold_questions(retail_pack)}
    first = next(iter(gold))
    candidates = tmp_path / "candidates.json"
    candidates.write_text(json.dumps({first: CHANGES["delete_outside_window"], **{i: s for i, s in gold.items()
                                                                                  if i != first}}))
    report = tmp_path / "report.json"
    code = score_command(retail_pack, candidates, json_path=report)
    results = {r["id"]: r for r in json.loads(report.read_text())["questions"]}
    assert code == 1
    assert results[first]["status"] == "wrong"
    assert all(results[i]["status"] == "correct" for i in gold if i != first)


def test_the_state_check_notices_a_changed_row_of_the_same_size():
    con = duckdb.connect()
    con.execute("CREATE TABLE orders AS SELECT range AS id, (range * 7) % 100 AS amount FROM range(10000)")
    before = catalog_state(con)
    con.execute("UPDATE orders SET amount = 99 - amount WHERE id = 5000")  # same rows, same sizes
    assert catalog_state(con) != before


def test_the_sandbox_database_is_opened_read_only(tables):
    con = scoring.open_sandbox(tables, Limits(memory_mb=256))
    try:
        readonly = con.execute("SELECT database_name, readonly FROM duckdb_databases() WHERE NOT internal").fetchall()
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM orders")  # no statement filter here: the database itself refuses
    finally:
        con.close()
    assert readonly == [("memory", True)]


def test_a_worker_outlives_the_thread_that_started_it(tables):
    """A server starts workers from pool threads that retire when idle; the worker must not die with its thread."""
    with SandboxWorker(tables, Limits(timeout=10.0, memory_mb=256)) as worker:
        starter = threading.Thread(target=worker.open)
        starter.start()
        starter.join()
        time.sleep(1.5)
        outcome = worker.run("SELECT count(*) FROM orders", 10.0)
        replaced = worker.replaced
    assert outcome.error is None and outcome.rows == [(41999,)]
    assert replaced == 0


def test_a_dead_worker_is_replaced_before_the_next_query_and_reaped(tables):
    with SandboxWorker(tables, Limits(timeout=10.0, memory_mb=256)) as worker:
        worker.open()
        dead = worker.proc.pid
        os.kill(dead, signal.SIGKILL)
        time.sleep(0.5)
        outcome = worker.run("SELECT count(*) FROM orders", 10.0)
        replaced = worker.replaced
        with pytest.raises(ChildProcessError):
            os.waitpid(dead, os.WNOHANG)  # reaped already: no zombie left
    assert outcome.error is None and outcome.rows == [(41999,)]
    assert replaced == 1


def test_a_worker_ends_soon_after_its_parent(tables, tmp_path):
    script = (
        "import sys, os\n"
        "from pathlib import Path\n"
        "from evalpack.core.scoring import SandboxWorker, Limits\n"
        f"w = SandboxWorker(Path({str(tables)!r}), Limits(memory_mb=256))\n"
        "w.open()\n"
        "print(w.proc.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    worker = int(child.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists() \
            and "Z" not in Path(f"/proc/{worker}/stat").read_text().split()[2]:
        time.sleep(0.1)
    state = Path(f"/proc/{worker}/stat").read_text().split()[2] if Path(f"/proc/{worker}").exists() else "gone"
    assert state in ("gone", "Z")


# --------------------------------------------------------------------------- bounded loads


def _bomb(path: Path, rows: int) -> None:
    """A Parquet file of about 1 MB that holds ``rows`` rows of 2 KB text each (2 GB for a million)."""
    path.unlink(missing_ok=True)
    duckdb.connect().execute(
        f"COPY (SELECT range AS order_id, repeat('x', 2000) || (range % 4)::VARCHAR AS note FROM range({rows})) "
        f"TO '{path}' (FORMAT parquet, COMPRESSION zstd)")


def _hostile_rotation(tmp_path: Path, declared: int, held: int) -> Path:
    pack = tmp_path / "hostile"
    tables = pack / "rotations" / "seed_1" / "tables"
    tables.mkdir(parents=True)
    _bomb(tables / "orders.parquet", held)
    (pack / "manifest.json").write_text(json.dumps({"pack": "hostile", "tables": {
        "orders": {"columns": {"order_id": "BIGINT", "note": "VARCHAR"}, "rows": {"seed_1": declared}}}}))
    return tables


def test_a_table_holding_more_rows_than_declared_is_refused_before_it_loads(tmp_path):
    tables = _hostile_rotation(tmp_path, declared=1000, held=1_000_000)
    worker = SandboxWorker(tables, Limits(memory_mb=256))
    with pytest.raises(InputError) as refused:
        worker.open()
    worker.close()
    message = str(refused.value)
    assert "orders.parquet" in message and "1,000,000 rows" in message and "declares 1,000" in message
    assert worker.peak_bytes < 1024 * 2**20


def test_a_table_that_expands_a_thousandfold_loads_under_the_memory_cap(tmp_path):
    """1 MB of Parquet that is 2 GB of text, declared honestly: the worker loads it within its cap (the tables are
    no longer held in memory on top of it) and answers over it."""
    tables = _hostile_rotation(tmp_path, declared=1_000_000, held=1_000_000)
    with SandboxWorker(tables, Limits(timeout=60.0, memory_mb=256)) as worker:
        outcome = worker.run("SELECT count(*), sum(length(note)) FROM orders", 60.0)
        cap, peak = worker.cap_bytes, worker.peak_bytes
    assert outcome.error is None and outcome.rows == [(1_000_000, 2_001_000_000)]
    assert peak <= cap
    assert peak < 1536 * 2**20


def test_no_scratch_folder_is_left_behind(tables, tmp_path, monkeypatch):
    import tempfile

    # a temporary folder of the test's own: another sandbox (the other test worker's) may be loading in /tmp now
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", str(private))

    def scratch() -> set[str]:
        return {p.name for p in private.glob(scoring.SANDBOX_SCRATCH + "*")}

    before = scratch()
    with SandboxWorker(tables, Limits(memory_mb=256)) as worker:
        worker.run("SELECT 1", 10.0)
        during = scratch()
    assert during - before == set()  # the database file is unlinked once it is open
    assert scratch() - before == set()


def test_an_oversized_questions_file_is_refused_unread(tmp_path, retail_pack):
    pack = copy_pack(retail_pack, tmp_path / "pack")
    with open(pack / "questions.jsonl", "ab") as handle:
        handle.write(b"\n" * (scoring.MAX_QUESTIONS_BYTES + 1))
    with pytest.raises(InputError, match=r"questions\.jsonl: the questions larger than 64 MiB"):
        load_questions(pack)


def test_a_questions_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path, retail_pack):
    pack = copy_pack(retail_pack, tmp_path / "pack")
    (pack / "questions.jsonl").unlink()
    os.mkfifo(pack / "questions.jsonl")
    with pytest.raises(InputError, match="not a regular file"):
        load_questions(pack)


def test_a_query_reads_no_folder_of_the_machine(tables):
    """current_setting() and duckdb_settings() show no home, secret or extension folder of the scoring machine."""
    home = str(Path.home())
    with SandboxWorker(tables, Limits(memory_mb=256)) as worker:
        settings = worker.run("SELECT string_agg(coalesce(value, ''), '|') FROM duckdb_settings()", 10.0)
        secrets = worker.run("SELECT current_setting('secret_directory')", 10.0)
    assert settings.error is None and home not in settings.rows[0][0]
    assert secrets.error is None and home not in secrets.rows[0][0]


def test_an_idle_pool_reaps_a_worker_that_died_without_waiting_for_a_call(tables):
    from evalpack.agent.grader import REAP_SECONDS, WorkerPool

    pool = WorkerPool(tables, Limits(memory_mb=256), size=1)
    try:
        with pool.lend() as worker:
            worker.run("SELECT 1", 10.0)
            dead = worker.proc.pid
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 5 * REAP_SECONDS
        while time.monotonic() < deadline and Path(f"/proc/{dead}").exists():
            time.sleep(0.1)
        reaped = not Path(f"/proc/{dead}").exists()  # a zombie keeps its /proc entry until reaped
        with pool.lend() as worker:
            outcome = worker.run("SELECT count(*) FROM orders", 10.0)
    finally:
        pool.close()
    assert reaped
    assert outcome.error is None and outcome.rows == [(41999,)]


def test_a_questions_file_of_countless_tiny_values_is_refused_before_parsing(tmp_path, retail_pack):
    """63 MB of `{}` is within the size bound but would be 21 million dicts (gigabytes) once parsed."""
    pack = copy_pack(retail_pack, tmp_path / "pack")
    line = b'{"id": "bomb", "tags": [' + b"{}," * (scoring.MAX_JSON_VALUES // 2) + b"{}]}\n"
    with open(pack / "questions.jsonl", "ab") as handle:
        handle.write(line)
    with pytest.raises(InputError, match="JSON values"):
        load_questions(pack)
    from evalpack.core.errors import EvalpackError
    from evalpack.core.layout import PackLayout

    with pytest.raises(EvalpackError, match="JSON values"):
        PackLayout(pack).read_records()  # the engine's reader (report, audit, card) takes the same bounds


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u061c", "\u0085"])
def test_line_separators_are_shown_as_escapes(separator):
    assert separator not in scoring.printable(f"q001{separator}OK all checks passed")
