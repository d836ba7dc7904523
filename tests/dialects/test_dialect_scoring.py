"""`evalpack score --dialect sqlite|postgres`: candidates written for SQLite or PostgreSQL run on that engine under
the scorer's rules and sandboxes; the gold SQL, translated, scores correct; hostile candidates write nothing, read
nothing outside the pack and leave nothing running."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import copy_pack, full_questions, gold_questions
from test_scoring_isolation import hostile
from test_scoring_sandbox import _snapshot

from evalpack.core import debris
from evalpack.core.scoring import Limits, pack_source
from evalpack.dialects.common import keys_of
from evalpack.dialects.engines import SqliteEngine, verify_in_dialects
from evalpack.dialects.scoring import dialect_score_command
from evalpack.dialects.sqlite import (
    REFUSED_FUNCTIONS,
    open_sqlite_sandbox,
    run_sqlite,
    sqlite_sandboxes,
    write_rotation_sqlite,
)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1.0
MARGIN = 4.0  # seconds past the limit (and the kill grace) that a loaded test machine may add
MAX_DROP_RATE = 0.05  # issue 22: at most 5% of a pack's questions dropped per dialect


def engine(dialect: str, dsn: str | None, pack: Path):
    """The real engine of ``dialect`` for trusted gold SQL (helper modules' own)."""
    manifest = json.loads((pack / "manifest.json").read_text())
    if dialect == "sqlite":
        return SqliteEngine(keys_of(manifest))
    from evalpack.dialects.postgres import PostgresEngine

    return PostgresEngine(dsn)


def translated_gold(pack: Path, dialect: str, dsn: str | None, limit: int | None = None) -> tuple[dict[str, str], int]:
    """The gold SQL of ``pack``'s questions (holdout included) translated to ``dialect`` where it verifies there on
    every rotation, and how many were checked."""
    manifest = json.loads((pack / "manifest.json").read_text())
    columns = {t: dict(info["columns"]) for t, info in manifest["tables"].items()}
    records = full_questions(pack)[:limit]
    source = pack_source(pack)
    rotations = {name: source.tables_dir(name) for name, _ in source.databases}
    result = verify_in_dialects(records, rotations, columns, [engine(dialect, dsn, pack)])[dialect]
    return result.translated, result.checked


def score_cli(pack: Path, candidates: Path, report: Path, *args: str, env: dict | None = None, cwd: Path | None = None
              ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(pack), "--candidates", str(candidates),
                           "--json", str(report), *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=env, timeout=900)


def children() -> list[int]:
    """The child processes of this test process that are still running."""
    found = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as listed:
            found += [int(pid) for pid in listed.read().split()]
    return found


def dialect_args(dialect: str, dsn: str | None) -> list[str]:
    return ["--dialect", dialect] + (["--postgres-dsn", dsn] if dsn else [])


@pytest.fixture(params=["sqlite", "postgres"])
def dialect(request) -> tuple[str, str | None]:
    """A dialect to score in and, for PostgreSQL, the DSN of the session's private server."""
    if request.param == "postgres":
        return "postgres", request.getfixturevalue("postgres_dsn")
    return "sqlite", None


# --------------------------------------------------------------------------- gold SQL scores correct


@pytest.mark.parametrize("name", ["retail_pack", "finance_pack"])
def test_translated_gold_sql_scores_correct_and_a_wrong_candidate_wrong(request, name, dialect, tmp_path):
    pack = request.getfixturevalue(name)
    which, dsn = dialect
    translated, checked = translated_gold(pack, which, dsn)
    assert len(translated) >= (1 - MAX_DROP_RATE) * checked, (which, len(translated), checked)
    candidates = tmp_path / "gold.json"
    candidates.write_text(json.dumps(translated))
    report_path = tmp_path / "report.json"

    run = score_cli(pack, candidates, report_path, *dialect_args(which, dsn), cwd=tmp_path)

    assert run.returncode in (0, 1) and run.stderr == "", run.stderr
    report = json.loads(report_path.read_text())
    by_id = {r["id"]: r for r in report["questions"]}
    wrong = {qid: by_id[qid]["rotations"] for qid in translated if by_id[qid]["status"] != "correct"}
    assert wrong == {}
    assert report["dialect"].startswith(which)
    assert f"dialect: {which}" in run.stdout.splitlines()[1]
    # the rest is the scorer's report: every question, not answered where no candidate was given
    assert {r["id"] for r in report["questions"]} == {q["id"] for q in full_questions(pack) if q.get("gold_sql")
                                                      or q.get("answerable") is False}
    assert all(r["status"] == "not_answered" for r in report["questions"] if r["id"] not in translated)
    assert run.returncode == (0 if report["summary"]["overall"]["not_answered"] == 0 else 1)

    # a wrong candidate scores wrong: a scalar answer off by one, and rows that are not the answer
    scalar = next(q for q in gold_questions(pack) if q["id"] in translated and q.get("answer_type") == "integer")
    rows = next((q for q in gold_questions(pack) if q["id"] in translated and q.get("answer_type") == "rows"), None)
    bad = {scalar["id"]: f"SELECT ({translated[scalar['id']]}) + 1"}
    if rows is not None:
        bad[rows["id"]] = "SELECT 1, 2"
    candidates.write_text(json.dumps(bad))
    run = score_cli(pack, candidates, report_path, *dialect_args(which, dsn), cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    by_id = {r["id"]: r for r in json.loads(report_path.read_text())["questions"]}
    for qid in bad:
        assert by_id[qid]["status"] == "wrong", by_id[qid]
        assert all(not r["match"] and "error" not in r for r in by_id[qid]["rotations"].values()), by_id[qid]


# --------------------------------------------------------------------------- hostile candidates


def sqlite_attacks(a: dict[str, Path]) -> dict[str, str]:
    """What a SQLite candidate could try: files, attached databases, pragmas, extensions, writes, huge values."""
    out, secret = a["outside"], a["secret"]
    return {
        "sqlite_attach": f"ATTACH '{out}/attached.sqlite' AS x",
        "sqlite_vacuum_into": f"VACUUM INTO '{out}/copy.sqlite'",
        "sqlite_pragma_write": "PRAGMA query_only = OFF",
        "sqlite_pragma_function": "SELECT file FROM pragma_database_list",
        "sqlite_load_extension": "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0')",
        "sqlite_readfile": f"SELECT readfile('{secret}')",
        "sqlite_writefile": f"SELECT writefile('{out}/written.txt', 'x')",
        "sqlite_with_insert": "WITH x AS (SELECT 1) INSERT INTO orders SELECT * FROM orders",
        "sqlite_with_delete": "WITH x AS (SELECT 1) DELETE FROM orders",
        "sqlite_begin": "BEGIN IMMEDIATE",
        "sqlite_zeroblob": "SELECT length(zeroblob(2000000000))",
        "sqlite_doubling": "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT max(length(s)) FROM r",
        "sqlite_fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    }


def postgres_attacks(a: dict[str, Path]) -> dict[str, str]:
    """What a PostgreSQL candidate could try: server files, programs, large objects, writes, sleeping."""
    out, secret = a["outside"], a["secret"]
    return {
        "pg_copy_program": f"COPY (SELECT 1) TO PROGRAM 'touch {out}/pwned'",
        "pg_copy_to": f"COPY orders TO '{out}/copied.csv'",
        "pg_read_file": f"SELECT pg_read_file('{secret}')",
        "pg_ls_dir": "SELECT count(*) FROM pg_ls_dir('.')",
        "pg_lo_import": f"SELECT lo_import('{secret}')",
        "pg_with_delete": "WITH gone AS (DELETE FROM orders RETURNING 1) SELECT count(*) FROM gone",
        "pg_sleep": "SELECT pg_sleep(100)",
        "pg_create_temp": "CREATE TEMP TABLE planted AS SELECT 1 AS x",
        "pg_read_only_off": "SET default_transaction_read_only = off",
    }


@pytest.fixture()
def arena(tmp_path: Path, retail_one_rotation: Path) -> dict[str, Path]:
    """A copy of the retail pack (one rotation: each attack runs to its limit once per rotation), a folder outside it
    with a secret, a working folder and a temporary folder."""
    pack = tmp_path / "packs" / "pack"
    pack.parent.mkdir()
    copy_pack(retail_one_rotation, pack)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.csv"
    secret.write_text("token\nnever-leaves\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    work = tmp_path / "cwd"
    work.mkdir()
    return {"pack": pack, "outside": outside, "secret": secret, "tmp": tmp_path, "temp": temp, "cwd": work}


def test_hostile_candidates_write_nothing_read_nothing_and_leave_nothing_running(arena, dialect, monkeypatch):
    which, dsn = dialect
    pack = arena["pack"]
    cases = {**hostile(arena), **(sqlite_attacks(arena) if which == "sqlite" else postgres_attacks(arena))}
    questions = [q for q in gold_questions(pack) if q.get("split") != "holdout"]
    ids = [q["id"] for q in questions][:len(cases)]
    assert len(ids) == len(cases)
    translated, _ = translated_gold(pack, which, dsn, limit=len(cases) + 30)
    gold_after = {qid: sql for qid, sql in translated.items() if qid not in ids}
    assert len(gold_after) >= 3
    gold_after = dict(list(gold_after.items())[:3])
    candidates = arena["tmp"] / "candidates.json"
    candidates.write_text(json.dumps({**dict(zip(ids, cases.values(), strict=True)), **gold_after}))
    report_path = arena["tmp"] / "report.json"
    monkeypatch.setattr(tempfile, "tempdir", str(arena["temp"]))  # where the SQLite databases are written
    monkeypatch.chdir(arena["cwd"])
    before = {name: _snapshot(arena[name]) for name in ("pack", "outside")}
    beside = sorted(p.name for p in pack.parent.iterdir())
    tables_before = {p: p.stat().st_mtime_ns for p in pack.rglob("*.parquet")}
    running = set(children())  # the session's PostgreSQL server, when it runs
    started = time.monotonic()

    code = dialect_score_command(pack, candidates, which, postgres=dsn, json_path=report_path, timeout=TIMEOUT,
                                 memory_mb=256, run_timeout=600)

    assert code == 1
    report = json.loads(report_path.read_text())
    by_id = {r["id"]: r for r in report["questions"]}
    for (name, _), qid in zip(cases.items(), ids, strict=True):
        assert by_id[qid]["status"] == "wrong", (name, by_id[qid])
        for run in by_id[qid]["rotations"].values():
            assert not run["match"], (name, run)
            assert run["seconds"] <= TIMEOUT + 1.0 + MARGIN, (name, run)
            assert "error" in run or name in ("long_number", "pg_read_only_off"), (name, run)
    errors = {name: by_id[qid]["rotations"]["seed_42"].get("error") or "" for (name, _), qid
              in zip(cases.items(), ids, strict=True)}
    # the tables were intact after every attack: translated gold SQL scored after them is correct
    assert all(by_id[qid]["status"] == "correct" for qid in gold_after), [by_id[qid] for qid in gold_after]
    assert errors["recursive_cte"].startswith("timeout"), errors["recursive_cte"]
    assert errors["cross_join"].startswith("timeout"), errors["cross_join"]
    assert errors["huge_text"].startswith("rejected: the SQL is")
    assert errors["lone_surrogate"].startswith("rejected: the SQL is not valid Unicode")
    if which == "sqlite":
        assert errors["two_statements"] == "rejected: expected exactly one statement"
        for name in ("sqlite_attach", "sqlite_vacuum_into", "sqlite_pragma_write", "sqlite_begin", "drop", "create",
                     "copy_to", "install"):
            assert errors[name].startswith("rejected: only a query (SELECT/WITH/VALUES) may run"), (name, errors[name])
        assert errors["sqlite_pragma_function"] == ("rejected: a table-valued pragma function (or a change to the "
                                                    "schema) is not allowed")
        assert errors["sqlite_load_extension"] == ("rejected: the function load_extension() (it loads code or "
                                                   "touches files) is not allowed")
        assert errors["sqlite_with_insert"] == "rejected: INSERT orders is not allowed"
        assert errors["sqlite_with_delete"] == "rejected: DELETE orders is not allowed"
        assert "too big" in errors["sqlite_zeroblob"]
        assert "too big" in errors["sqlite_doubling"] or errors["sqlite_doubling"].startswith("out of memory")
    else:
        assert errors["pg_sleep"].startswith("timeout")
        for name in ("pg_read_file", "pg_ls_dir", "pg_lo_import"):
            assert "permission denied" in errors[name] or "read-only" in errors[name], (name, errors[name])
    # nothing written: the pack (its table files' times too), the folder outside, the working and temporary folders
    assert {name: _snapshot(arena[name]) for name in ("pack", "outside")} == before
    assert {p: p.stat().st_mtime_ns for p in pack.rglob("*.parquet")} == tables_before
    assert sorted(p.name for p in pack.parent.iterdir()) == beside
    assert list(arena["cwd"].iterdir()) == [] and list(arena["temp"].iterdir()) == []
    assert "never-leaves" not in report_path.read_text()
    # nothing left running: no worker process, and on PostgreSQL no sandbox database, role or session
    assert set(children()) - running == set()
    if which == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            left = conn.execute("SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE 'evalpack_sandbox%'), "
                                "(SELECT count(*) FROM pg_roles WHERE rolname LIKE 'evalpack_sandbox%'), "
                                "(SELECT count(*) FROM pg_stat_activity WHERE usename LIKE 'evalpack_sandbox%')"
                                ).fetchone()
        assert left == (0, 0, 0)
    assert time.monotonic() - started < 600


def test_the_packs_own_sqlite_file_is_opened_read_only_and_left_as_it_was(arena):
    """A pack that carries exports/sqlite/<rotation>.sqlite is scored on those files, which keep their bytes and
    modification times (read-only, immutable), and no journal or other file appears beside them."""
    pack = arena["pack"]
    folder = pack / "exports" / "sqlite"
    for rotation, tables in pack_source(pack).databases:
        write_rotation_sqlite(pack, rotation, tables / "tables", folder)
    files = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    cases = {**hostile(arena), **sqlite_attacks(arena)}
    ids = [q["id"] for q in gold_questions(pack) if q.get("split") != "holdout"][:len(cases)]
    candidates = arena["tmp"] / "candidates.json"
    candidates.write_text(json.dumps(dict(zip(ids, cases.values(), strict=True))))
    report_path = arena["tmp"] / "report.json"
    # the exports written here are not in the pack's attestation (a pack built with `exports:` has them attested)
    code = dialect_score_command(pack, candidates, "sqlite", json_path=report_path, timeout=TIMEOUT, memory_mb=256,
                                 allow_unattested=True)
    assert code == 1
    report = json.loads(report_path.read_text())
    assert all(r["status"] == "wrong" for r in report["questions"] if r["id"] in ids)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == files
    assert list(arena["outside"].iterdir()) == [arena["secret"]]


# --------------------------------------------------------------------------- the SQLite sandbox itself


@pytest.fixture()
def database(arena) -> Path:
    """The seed_42 rotation of the retail pack as a SQLite file."""
    pack = arena["pack"]
    return write_rotation_sqlite(pack, "seed_42", pack / "rotations" / "seed_42" / "tables", arena["tmp"] / "db")


def test_a_runaway_recursive_cte_stops_within_the_limit_and_the_connection_still_works(database):
    con = open_sqlite_sandbox(database, Limits(timeout=0.5))
    try:
        endless = run_sqlite(con, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                                  "SELECT max(n) FROM r", timeout=0.5)
        streamed = run_sqlite(con, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                                   "SELECT n FROM r WHERE n < 0", timeout=0.5)
        after = run_sqlite(con, "SELECT count(*) FROM orders", timeout=0.5)
    finally:
        con.close()
    assert endless.timed_out and endless.rows is None and endless.error == "timeout: stopped after 0.5 s"
    assert endless.seconds < 0.5 + MARGIN and streamed.timed_out and streamed.seconds < 0.5 + MARGIN
    assert after.rows == [(41999,)]


def test_the_lock_holds_even_without_the_statement_filter(database, arena):
    """Second layer: run straight on the connection (past run_sqlite's one-query check), whatever writes, attaches,
    changes a pragma or calls a refused function is not authorized, and nothing appears on disk."""
    out = arena["outside"]
    con = open_sqlite_sandbox(database)
    # a function named like the sqlite3 shell's file functions, as a build that has them would: refused by name
    con.create_function("readfile", 1, lambda path: Path(path).read_text())
    refused = []
    try:
        for sql in [f"ATTACH '{out}/x.sqlite' AS x", "ATTACH ':memory:' AS m", f"VACUUM INTO '{out}/copy.sqlite'",
                    "PRAGMA query_only = OFF", "PRAGMA writable_schema = ON", "PRAGMA journal_mode = DELETE",
                    "CREATE TEMP TABLE planted AS SELECT 1 AS x", "INSERT INTO orders SELECT * FROM orders",
                    "DELETE FROM orders", "DROP TABLE orders", "BEGIN", "ANALYZE", "SAVEPOINT s",
                    "SELECT load_extension('x')", f"SELECT readfile('{arena['secret']}')",
                    "SELECT * FROM pragma_database_list", "CREATE VIEW v AS SELECT 1"]:
            try:
                con.execute(sql).fetchall()
            except sqlite3.DatabaseError as exc:
                refused.append((sql, str(exc)))
        allowed = con.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table'").fetchone()
    finally:
        con.close()
    assert len(refused) == 17, refused
    assert [(sql, why) for sql, why in refused if "authoriz" not in why] == []
    assert allowed == (2,)  # reading the schema is allowed
    assert list(out.iterdir()) == [arena["secret"]]
    assert {"load_extension", "readfile", "writefile", "edit"} <= REFUSED_FUNCTIONS


# --------------------------------------------------------------------------- options


def test_postgres_without_a_server_or_with_one_that_cannot_be_reached_is_one_line_exit_2(retail_pack, tmp_path):
    candidates = tmp_path / "c.json"
    candidates.write_text('{"q001": "SELECT 1"}')
    env = {k: v for k, v in os.environ.items() if k != "EVALPACK_POSTGRES_DSN"}
    for extra in ([], ["--postgres-dsn", f"host={tmp_path}/no-server port=5432 user=nobody dbname=none"]):
        run = score_cli(retail_pack, candidates, tmp_path / "r.json", "--dialect", "postgres", *extra, env=env,
                        cwd=tmp_path)
        assert run.returncode == 2 and run.stdout == "", run.stderr
        assert run.stderr.count("\n") == 1 and run.stderr.startswith("evalpack: error: "), run.stderr
        assert "--postgres-dsn" in run.stderr
        assert not (tmp_path / "r.json").exists()


def test_duckdb_stays_the_default_and_says_nothing_of_a_dialect(retail_pack, tmp_path):
    questions = gold_questions(retail_pack)[:5]
    candidates = tmp_path / "c.json"
    candidates.write_text(json.dumps({q["id"]: q["gold_sql"] for q in questions}))
    plain = score_cli(retail_pack, candidates, tmp_path / "plain.json", cwd=tmp_path)
    named = score_cli(retail_pack, candidates, tmp_path / "named.json", "--dialect", "duckdb", cwd=tmp_path)
    assert plain.returncode == named.returncode == 1  # the other questions are declined
    assert plain.stdout == named.stdout and "dialect" not in plain.stdout
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "named"))
    assert "dialect" not in a and a.keys() == b.keys()

    def results(report: dict) -> list:
        return [(r["id"], r["status"], {k: {**v, "seconds": 0} for k, v in r["rotations"].items()})
                for r in report["questions"]]

    assert results(a) == results(b) and a["summary"] == b["summary"]


def test_an_unknown_dialect_is_one_line_exit_2(retail_pack, tmp_path):
    candidates = tmp_path / "c.json"
    candidates.write_text('{"q001": "SELECT 1"}')
    err = io.StringIO()
    assert dialect_score_command(retail_pack, candidates, "mysql", err=err, json_path=tmp_path / "r.json") == 2
    assert err.getvalue().count("\n") == 1 and "--dialect 'mysql': use one of duckdb, sqlite, postgres" in err.getvalue()
    assert not (tmp_path / "r.json").exists()
    run = score_cli(retail_pack, candidates, tmp_path / "r.json", "--dialect", "mysql", cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--dialect" in run.stderr, run.stderr


def test_sqlite_copies_of_a_killed_run_are_removed_by_the_next_one(retail_pack, tmp_path, monkeypatch):
    """A run killed while it scored in SQLite left its rotations' databases in the temporary folder: the next run
    removes such folders (their lock free, their process gone), never a live run's, and its own at its end."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead = tmp_path / f"{debris.SQLITE}{finished.pid}-abcd1234"
    dead.mkdir()
    (dead / "seed_42.sqlite").write_bytes(b"x" * 1000)
    live = debris.owned_dir(tmp_path, debris.SQLITE)  # another scoring run, still working
    try:
        with sqlite_sandboxes(retail_pack) as open_worker:
            with open_worker("seed_42", Limits()) as worker:
                assert worker.run("SELECT count(*) FROM customers", 10).rows == [(2000,)]
            ours = [p for p in tmp_path.iterdir() if p not in (live, dead)]
            assert not dead.exists() and live.is_dir() and len(ours) == 1
        assert not ours[0].exists() and live.is_dir()
    finally:
        debris.remove(live)
