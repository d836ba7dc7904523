"""PostgreSQL (issue 22, part B): a rotation's dump restores with psql and holds the Parquet's rows and types; the
gold SQL of both example packs, transpiled, answers as in DuckDB on every rotation of a real server; untrusted
candidate SQL runs in a sandbox that writes nothing, reads nothing outside its rotation, leaves no query running
and leaves no role or database behind. The server is the session's private one (tests/pg.py)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import copy_pack, gold_questions
from psycopg import sql as pgsql
from test_scoring_isolation import hostile
from test_scoring_sandbox import SECRET, _snapshot

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import Limits, answer_matches, expected_for, rotations, score_command
from evalpack.dialects.common import keys_of
from evalpack.dialects.engines import verify_in_dialects
from evalpack.dialects.postgres import (
    PostgresEngine,
    manifest_columns,
    open_postgres_sandbox,
    pg_type,
    postgres_sandboxes,
    write_dump,
)
from evalpack.dialects.translate import transpile

MAX_DROP_RATE = 0.05
PG_DATA_TYPES = {"BIGINT": ("bigint", None, None), "VARCHAR": ("text", None, None), "DATE": ("date", None, None),
                 "TIMESTAMP": ("timestamp without time zone", None, None), "BOOLEAN": ("boolean", None, None),
                 "DECIMAL(18,2)": ("numeric", 18, 2)}


def _pack(request, name: str) -> Path:
    return request.getfixturevalue(f"{name}_pack")


def _admin(dsn: str, database: str | None = None) -> psycopg.Connection:
    return psycopg.connect(dsn if database is None else psycopg.conninfo.make_conninfo(dsn, dbname=database),
                           autocommit=True)


def _digest(values: list) -> str:
    """A checksum of a column's values, independent of row order (the values as Python sees them)."""
    return hashlib.sha256("\n".join(sorted(map(repr, values))).encode()).hexdigest()


def _leftovers(dsn: str) -> dict[str, list]:
    """Databases, roles and schemas the PostgreSQL module creates, still on the server."""
    with _admin(dsn) as admin:
        return {
            "databases": admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'evalpack%'").fetchall(),
            "roles": admin.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'evalpack_%'").fetchall(),
            "schemas": admin.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'evalpack%'").fetchall(),
        }


# --------------------------------------------------------------------------- the dump


def test_types_map_from_duckdb():
    assert pg_type("DECIMAL(18,2)") == "NUMERIC(18,2)"
    assert pg_type("decimal(9, 4)") == "NUMERIC(9,4)"
    assert pg_type("VARCHAR") == "TEXT"
    assert pg_type("TIMESTAMP") == "TIMESTAMP"
    assert pg_type("BIGINT") == "BIGINT"
    with pytest.raises(EvalpackError, match=r"manifest.json: column type 'MAP\(VARCHAR, INTEGER\)' has no PostgreSQL"):
        pg_type("MAP(VARCHAR, INTEGER)")


@pytest.mark.parametrize("name", ["retail", "finance"])
def test_each_rotations_dump_restores_with_psql_and_equals_the_parquet(request, postgres_dsn, tmp_path, name):
    pack = _pack(request, name)
    layout = PackLayout(pack)
    manifest = layout.read_manifest()
    columns, keys = manifest_columns(pack), keys_of(manifest)
    assert keys.foreign, "the example packs declare a link"
    for rotation in rotations(pack):
        tables_dir = pack / "rotations" / rotation / "tables"
        dump = tmp_path / f"{rotation}.sql"
        write_dump(tables_dir, columns, dump, primary_keys=dict(keys.primary), links=keys.foreign)
        database = f"restored_{name}_{rotation}"
        with _admin(postgres_dsn) as admin:
            admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(database)))
        try:
            restore = subprocess.run(["psql", psycopg.conninfo.make_conninfo(postgres_dsn, dbname=database), "-X", "-q",
                                      "-v", "ON_ERROR_STOP=1", "-f", str(dump)], capture_output=True, text=True,
                                     timeout=300)
            assert restore.returncode == 0, restore.stderr
            assert "ERROR" not in restore.stderr
            with _admin(postgres_dsn, database) as con:
                for table, cols in columns.items():
                    parquet = pq.read_table(tables_dir / f"{table}.parquet")
                    count = con.execute(pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(table))).fetchone()
                    assert count[0] == parquet.num_rows == manifest["tables"][table]["rows"][rotation]
                    for column, duck_type in cols.items():
                        got = [r[0] for r in con.execute(pgsql.SQL("SELECT {} FROM {}").format(
                            pgsql.Identifier(column), pgsql.Identifier(table))).fetchall()]
                        assert _digest(got) == _digest(parquet.column(column).to_pylist()), (rotation, table, column)
                        kind = con.execute("SELECT data_type, numeric_precision, numeric_scale FROM "
                                           "information_schema.columns WHERE table_name = %s AND column_name = %s",
                                           [table, column]).fetchone()
                        want = PG_DATA_TYPES[duck_type]
                        assert (kind[0], *(kind[1:] if want[1] else (None, None))) == want, (table, column, kind)
                constraints = {r[0]: r[1:] for r in con.execute(
                    "SELECT conname, contype, convalidated, pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE contype IN ('p', 'f')").fetchall()}
                for table, column in keys.primary:
                    assert constraints[f"{table}_pkey"] == ("p", True, f"PRIMARY KEY ({column})")
                for fk in keys.foreign:
                    orphans = con.execute(pgsql.SQL(
                        "SELECT count(*) FROM {c} WHERE {cc} IS NOT NULL AND NOT EXISTS (SELECT FROM {p} WHERE {p}.{pc} = {c}.{cc})").format(
                        c=pgsql.Identifier(fk.child_table), cc=pgsql.Identifier(fk.child_column),
                        p=pgsql.Identifier(fk.parent_table), pc=pgsql.Identifier(fk.parent_column))).fetchone()[0]
                    # a link with orphans by design is declared NOT VALID; one without is checked
                    assert constraints[f"{fk.child_table}_{fk.child_column}_fkey"][:2] == ("f", orphans == 0)
                    if name == "retail":
                        assert orphans > 0  # the retail example plants orphans (30 declared)
        finally:
            with _admin(postgres_dsn) as admin:
                admin.execute(pgsql.SQL("DROP DATABASE {} WITH (FORCE)").format(pgsql.Identifier(database)))


def test_awkward_values_survive_the_dump_and_the_engine(postgres_dsn, tmp_path):
    """Text with COPY's special characters, NULLs, empty text, negative and zero decimals, microseconds, dates far
    apart: the same values back from a psql restore and from the engine."""
    tables = tmp_path / "tables"
    tables.mkdir()
    rows = {
        "id": [1, 2, 3, 4, None],
        "note": ["tab\there", "line\nbreak\r\nwindows", "back\\slash \\N \\.", "", None],
        "amount": [Decimal("-0.05"), Decimal("0.00"), Decimal("123456789012.34"), None, Decimal("1.10")],
        "flag": [True, False, None, True, False],
        "day": [dt.date(1, 1, 1), dt.date(2024, 2, 29), None, dt.date(9999, 12, 31), dt.date(1970, 1, 1)],
        "at": [dt.datetime(2024, 1, 1, 0, 0, 0, 5), dt.datetime(2025, 6, 30, 23, 59, 59), None,
               dt.datetime(2000, 1, 1), dt.datetime(1999, 12, 31, 12)],
    }
    types = {"id": pa.int64(), "note": pa.string(), "amount": pa.decimal128(18, 2), "flag": pa.bool_(),
             "day": pa.date32(), "at": pa.timestamp("us")}
    pq.write_table(pa.table({k: pa.array(v, types[k]) for k, v in rows.items()}), tables / "odd.parquet")
    columns = {"odd": {"id": "BIGINT", "note": "VARCHAR", "amount": "DECIMAL(18,2)", "flag": "BOOLEAN", "day": "DATE",
                       "at": "TIMESTAMP"}}
    want = [tuple(r) for r in zip(*rows.values(), strict=True)]
    write_dump(tables, columns, tmp_path / "odd.sql")
    with _admin(postgres_dsn) as admin:
        admin.execute("CREATE DATABASE odd")
    try:
        restore = subprocess.run(["psql", psycopg.conninfo.make_conninfo(postgres_dsn, dbname="odd"), "-X", "-q", "-v",
                                  "ON_ERROR_STOP=1", "-f", str(tmp_path / "odd.sql")], capture_output=True, text=True,
                                 timeout=300)
        assert restore.returncode == 0, restore.stderr
        with _admin(postgres_dsn, "odd") as con:
            restored = con.execute("SELECT * FROM odd").fetchall()
    finally:
        with _admin(postgres_dsn) as admin:
            admin.execute("DROP DATABASE odd WITH (FORCE)")
    with PostgresEngine(postgres_dsn).open_rotation(tables, columns) as run:
        loaded = run("SELECT * FROM odd")
    assert restored == want
    assert loaded == want


def test_the_dump_is_the_same_bytes_wherever_the_pack_is(retail_pack, tmp_path):
    copy = copy_pack(retail_pack, tmp_path / "copy")
    columns = manifest_columns(retail_pack)
    keys = keys_of(PackLayout(retail_pack).read_manifest())
    for i, pack in enumerate((retail_pack, copy, retail_pack)):
        write_dump(pack / "rotations" / "seed_43" / "tables", columns, tmp_path / f"{i}.sql",
                   primary_keys=dict(keys.primary), links=keys.foreign)
    first = (tmp_path / "0.sql").read_bytes()
    assert first == (tmp_path / "1.sql").read_bytes() == (tmp_path / "2.sql").read_bytes()
    assert str(tmp_path) not in first.decode() and str(retail_pack) not in first.decode()
    assert b"NOT VALID" in first  # the orphans' link
    assert first.count(b"\n\\.\n") == len(columns)


def test_a_type_without_a_postgres_form_writes_nothing(retail_pack, tmp_path):
    columns = manifest_columns(retail_pack)
    columns["orders"] = {**columns["orders"], "amount": "MAP(VARCHAR, INTEGER)"}
    with pytest.raises(EvalpackError, match="amount|MAP"):
        write_dump(retail_pack / "rotations" / "seed_42" / "tables", columns, tmp_path / "out" / "seed_42.sql")
    assert list((tmp_path / "out").iterdir()) == []


# --------------------------------------------------------------------------- gold SQL on the engine


@pytest.mark.parametrize("name", ["retail", "finance"])
def test_every_gold_sql_answers_in_postgres_on_every_rotation(request, postgres_dsn, name):
    pack = _pack(request, name)
    records = gold_questions(pack)
    rotation_dirs = {r: pack / "rotations" / r / "tables" for r in rotations(pack)}
    result = verify_in_dialects(records, rotation_dirs, manifest_columns(pack), [PostgresEngine(postgres_dsn)])
    postgres = result["postgres"]
    assert postgres.checked == len([r for r in records if r.get("gold_sql")]) > 50
    assert all(d.reason for d in postgres.drops)
    print(f"{name}: {postgres.checked} questions, {len(postgres.drops)} dropped in postgres "
          f"({postgres.drop_rate:.1%}): {[d.to_dict() for d in postgres.drops]}")
    assert postgres.drop_rate <= MAX_DROP_RATE, [d.to_dict() for d in postgres.drops]
    assert _leftovers(postgres_dsn)["schemas"] == []


def test_the_engine_returns_values_the_scorer_compares(retail_pack, postgres_dsn):
    engine = PostgresEngine(postgres_dsn)
    tables = retail_pack / "rotations" / "seed_42" / "tables"
    with engine.open_rotation(tables, manifest_columns(retail_pack)) as run:
        total, first, signed, refunded = run("SELECT sum(amount), min(ordered_at), max(signed_up_at), "
                                             "bool_or(refunded) FROM orders JOIN customers USING (customer_id)")[0]
        with pytest.raises(psycopg.Error):
            run("SELECT no_such_column FROM orders")
        after = run("SELECT count(*) FROM orders")  # the connection is usable after an error
    assert isinstance(total, Decimal) and total.as_tuple().exponent == -2
    assert type(first).__name__ == "date" and type(signed).__name__ == "datetime" and refunded is True
    assert after == [(41999,)]
    record = {"answer_type": "number", "round_decimals": 2}
    assert answer_matches(record, float(total), [(total,)])
    assert not answer_matches(record, float(total) + 0.01, [(total,)])
    assert answer_matches({"answer_type": "string"}, first.isoformat(), [(first,)])
    assert answer_matches({"answer_type": "string"}, signed.isoformat(sep=" "), [(signed,)])
    assert _leftovers(postgres_dsn)["schemas"] == []


# --------------------------------------------------------------------------- the sandbox


@pytest.fixture()
def arena(tmp_path: Path, retail_pack: Path) -> Iterator[dict[str, Path]]:
    pack = copy_pack(retail_pack, tmp_path / "pack")
    # a folder the server's own user may read and write: only the sandbox keeps it from a candidate
    outside = Path(tempfile.mkdtemp(prefix="evalpack-pg-outside-"))
    try:
        outside.chmod(0o777)
        secret = outside / "secret.csv"
        secret.write_text(f"token\n{SECRET}\n")
        secret.chmod(0o644)
        yield {"pack": pack, "outside": outside, "secret": secret, "tmp": tmp_path}
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def postgres_attacks(a: dict[str, Path], other_database: str) -> dict[str, str]:
    """What a PostgreSQL candidate could try: server files, programs, large objects, extensions, other databases,
    settings, writes."""
    out, secret = a["outside"], a["secret"]
    return {
        "pg_read_file": f"SELECT pg_read_file('{secret}')",
        "pg_read_binary_file": f"SELECT pg_read_binary_file('{secret}')",
        "pg_ls_dir": "SELECT * FROM pg_ls_dir('.')",
        "pg_stat_file": f"SELECT * FROM pg_stat_file('{secret}')",
        "copy_to_file": f"COPY orders TO '{out}/copied.csv'",
        "copy_from_file": f"COPY orders FROM '{secret}'",
        "copy_from_program": "COPY orders FROM PROGRAM 'cat /etc/passwd'",
        "copy_query_to_program": f"COPY (SELECT 1) TO PROGRAM 'touch {out}/planted'",
        "lo_import": f"SELECT lo_import('{secret}')",
        "lo_export": f"SELECT lo_export(lo_from_bytea(0, 'x'), '{out}/planted')",
        "lo_create": "SELECT lo_create(0)",
        "dblink": "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(x int)",
        "create_extension": "CREATE EXTENSION dblink",
        "other_rotation": f"SELECT count(*) FROM {other_database}.public.orders",
        "other_database_catalog": f"SELECT count(*) FROM {other_database}.pg_catalog.pg_class",
        "data_directory": "SELECT current_setting('data_directory')",
        "hba_file": "SELECT * FROM pg_hba_file_rules",
        "set_role": "SET ROLE evalpack",
        "read_write": "SET default_transaction_read_only = off",
        "write_cte": "WITH gone AS (DELETE FROM orders RETURNING 1) SELECT count(*) FROM gone",
        "insert": "INSERT INTO orders SELECT * FROM orders",
        "temp_table": "CREATE TEMP TABLE planted AS SELECT 1 AS x",
        "select_into": "SELECT * INTO planted FROM orders",
        "for_update": "SELECT * FROM orders FOR UPDATE",
        "truncate": "TRUNCATE orders",
        "two_statements": "SELECT 1; DROP TABLE customers",
        "do_block": "DO $$BEGIN EXECUTE 'DROP TABLE orders'; END$$",
        "sleep": "SELECT pg_sleep(30)",
        "cross_join_pg": "SELECT count(*) FROM orders a, orders b, orders c",
        "end_own_session": "SELECT pg_terminate_backend(pg_backend_pid())",
        "end_admin_sessions": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
        "commit": "COMMIT",
    }


def test_hostile_candidates_in_the_postgres_sandbox_write_nothing_read_nothing_and_stop(arena, postgres_dsn):
    pack, tmp = arena["pack"], arena["tmp"]
    columns = manifest_columns(pack)
    questions = gold_questions(pack)
    # a sandbox of another rotation stands open meanwhile: its database is what "other_rotation" aims at
    with open_postgres_sandbox(postgres_dsn, pack / "rotations" / "seed_44" / "tables", columns) as other:
        cases = {**hostile(arena), **postgres_attacks(arena, other.database)}
        assert len(questions) > len(cases) + 5
        ids = [q["id"] for q in questions][:len(cases)]
        gold_after = {q["id"]: transpile(q["gold_sql"], "postgres") for q in questions[len(cases):len(cases) + 5]}
        candidates = tmp / "candidates.jsonl"
        candidates.write_text("".join(json.dumps({"id": qid, "sql": sql}) + "\n"
                                      for qid, sql in [*zip(ids, cases.values(), strict=True), *gold_after.items()]))
        before_pack, before_outside = _snapshot(pack), _snapshot(arena["outside"])
        report_path = tmp / "report.json"
        with postgres_sandboxes(pack, postgres_dsn) as sandbox:
            code = score_command(pack, candidates, json_path=report_path, timeout=1.0, memory_mb=256,
                                 sandbox=sandbox, dialect="postgres")
        other_rows = other.run("SELECT count(*) FROM orders").rows
    assert code == 1
    report = json.loads(report_path.read_text())
    by_id = {r["id"]: r for r in report["questions"]}
    for (name, _), qid in zip(cases.items(), ids, strict=True):
        assert by_id[qid]["status"] == "wrong", name
        for rotation, run in by_id[qid]["rotations"].items():
            assert run["match"] is False, (name, rotation, run)
            assert "error" in run or name == "long_number", (name, rotation, run)  # a 5,000-digit NUMERIC is a value
            assert run["seconds"] < 1.0 + 3.0, (name, run)  # the limit, the kill grace and a loaded machine's slack
    errors = {name: by_id[qid]["rotations"]["seed_42"].get("error") or "" for (name, _), qid in
              zip(cases.items(), ids, strict=True)}
    for name in ("recursive_cte", "cross_join", "cross_join_pg", "sleep"):
        assert errors[name].startswith("timeout"), (name, errors[name])
    for name in ("pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
                 "lo_create", "data_directory", "hba_file"):
        assert "permission denied" in errors[name] or "must be superuser" in errors[name], (name, errors[name])
    for name in ("copy_to_file", "copy_from_file", "copy_from_program", "copy_query_to_program", "insert",
                 "temp_table", "truncate", "do_block", "create_extension", "set_role", "read_write", "commit"):
        assert errors[name].startswith("rejected: only a query"), (name, errors[name])
    assert errors["two_statements"] == "rejected: expected exactly one statement"
    assert "cross-database references are not implemented" in errors["other_rotation"]
    assert "cross-database references are not implemented" in errors["other_database_catalog"]
    assert "data-modifying" in errors["write_cte"] and "read-only" in errors["for_update"]
    assert "does not exist" in errors["dblink"]
    # the tables were intact after every attack: gold SQL scored after them is correct on every rotation
    assert all(by_id[qid]["status"] == "correct" for qid in gold_after), [by_id[q] for q in gold_after]
    assert report["dialect"] == "postgres"
    assert other_rows == [(41999,)]
    assert _snapshot(pack) == before_pack and _snapshot(arena["outside"]) == before_outside
    assert SECRET not in report_path.read_text()
    with _admin(postgres_dsn) as admin:
        assert admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename LIKE 'evalpack_sandbox%'"
                             ).fetchone() == (0,)
        assert admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
    assert _leftovers(postgres_dsn) == {"databases": [], "roles": [], "schemas": []}


def test_a_role_that_may_create_databases_and_roles_but_is_no_superuser_scores(arena, postgres_dsn):
    """README asks of --postgres-dsn a role that may create databases and roles, not a superuser. Such a role cannot
    revoke the large-object functions (their owner is the bootstrap superuser): the sandbox is made without that,
    scores, and leaves nothing behind; what a candidate does with large objects is rolled back."""
    pack, tmp = arena["pack"], arena["tmp"]
    with _admin(postgres_dsn) as admin:
        admin.execute("DROP ROLE IF EXISTS scorer")
        admin.execute("CREATE ROLE scorer LOGIN CREATEDB CREATEROLE")
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, user="scorer")
    questions = gold_questions(pack)
    gold = {q["id"]: transpile(q["gold_sql"], "postgres") for q in questions[:3]}
    out = arena["outside"]
    attempts = {questions[3]["id"]: f"SELECT lo_export(lo_from_bytea(0, 'x'), '{out}/planted')",
                questions[4]["id"]: "SELECT lo_creat(-1)",
                questions[5]["id"]: f"SELECT lo_import('{arena['secret']}')"}
    candidates = tmp / "candidates.jsonl"
    candidates.write_text("".join(json.dumps({"id": qid, "sql": sql}) + "\n" for qid, sql in [*gold.items(),
                                                                                            *attempts.items()]))
    report_path = tmp / "report.json"
    try:
        with postgres_sandboxes(pack, dsn) as sandbox:
            code = score_command(pack, candidates, json_path=report_path, timeout=5.0, sandbox=sandbox,
                                 dialect="postgres")
        with _admin(postgres_dsn) as admin:
            objects = admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    finally:
        with _admin(postgres_dsn) as admin:
            admin.execute("DROP ROLE IF EXISTS scorer")
    assert code == 1
    by_id = {r["id"]: r for r in json.loads(report_path.read_text())["questions"]}
    assert all(by_id[qid]["status"] == "correct" for qid in gold)
    assert all(by_id[qid]["status"] == "wrong" for qid in attempts)
    errors = {qid: by_id[qid]["rotations"]["seed_42"].get("error") or "" for qid in attempts}
    assert "permission denied" in errors[questions[3]["id"]] and "permission denied" in errors[questions[5]["id"]]
    assert objects == (0,) and list(out.iterdir()) == [arena["secret"]]
    assert _leftovers(postgres_dsn) == {"databases": [], "roles": [], "schemas": []}


def test_a_server_that_refuses_the_sandbox_is_one_clear_error(arena, postgres_dsn, capsys):
    """A role that passes the check but whose sessions are read-only cannot create the sandbox's database: the score
    stops with one line naming --postgres-dsn and exit 2, not a traceback, and leaves nothing on the server."""
    pack, tmp = arena["pack"], arena["tmp"]
    with _admin(postgres_dsn) as admin:
        admin.execute("DROP ROLE IF EXISTS reader")
        admin.execute("CREATE ROLE reader LOGIN CREATEDB CREATEROLE")
        admin.execute("ALTER ROLE reader SET default_transaction_read_only = on")
    question = gold_questions(pack)[0]
    candidates = tmp / "candidates.jsonl"
    candidates.write_text(json.dumps({"id": question["id"], "sql": transpile(question["gold_sql"], "postgres")}) + "\n")
    try:
        with postgres_sandboxes(pack, psycopg.conninfo.make_conninfo(postgres_dsn, user="reader")) as sandbox:
            code = score_command(pack, candidates, sandbox=sandbox, dialect="postgres")
    finally:
        with _admin(postgres_dsn) as admin:
            admin.execute("DROP ROLE IF EXISTS reader")
    err = capsys.readouterr().err
    assert code == 2 and "PostgreSQL refused to make the sandbox" in err and "--postgres-dsn" in err, err
    assert "Traceback" not in err
    assert _leftovers(postgres_dsn) == {"databases": [], "roles": [], "schemas": []}


def test_a_huge_row_is_fetched_in_the_worker_not_in_the_scorer(retail_pack, postgres_dsn):
    """A PostgreSQL row arrives whole: a candidate returning 900 MB of text in one row took the scorer's own
    process to gigabytes. The session and its fetch live in a worker process under an address-space cap: the
    candidate fails there and the scorer's memory does not grow by the row."""
    columns = manifest_columns(retail_pack)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_postgres_sandbox(postgres_dsn, retail_pack / "rotations" / "seed_42" / "tables", columns,
                               Limits(timeout=60.0)) as box:
        huge = box.run("SELECT repeat('x', 300000000) AS a, repeat('y', 300000000) AS b, repeat('z', 300000000) AS c")
        after_huge = box.run("SELECT count(*) FROM customers")
        worker = box.worker.proc.pid
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert huge.rows is None and huge.error, huge
    assert after_huge.rows == [(2000,)]
    assert worker != os.getpid() and grown_mb < 200, grown_mb


def test_the_sandbox_role_may_only_read_its_rotations_tables(retail_pack, postgres_dsn):
    columns = manifest_columns(retail_pack)
    limits = Limits(timeout=0.7, memory_mb=128)
    with open_postgres_sandbox(postgres_dsn, retail_pack / "rotations" / "seed_42" / "tables", columns,
                               limits) as box, _admin(postgres_dsn) as admin:
        role = admin.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolinherit, rolreplication, rolbypassrls, rolconnlimit "
            "FROM pg_roles WHERE rolname = %s", [box.role]).fetchone()
        members = {name: admin.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", [box.role, name]).fetchone()[0]
                   for name in ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                                "pg_read_all_data", "pg_write_all_data", "pg_read_all_settings", "pg_signal_backend")}
        database = {p: admin.execute("SELECT has_database_privilege(%s, %s, %s)", [box.role, box.database, p]
                                     ).fetchone()[0] for p in ("CONNECT", "CREATE", "TEMPORARY")}
        settings = dict(row[0].lower().split("=", 1) for row in admin.execute(
            "SELECT unnest(setconfig) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
            "WHERE r.rolname = %s", [box.role]).fetchall())
        with _admin(postgres_dsn, box.database) as inside:
            tables = {(t, p): inside.execute("SELECT has_table_privilege(%s, %s, %s)", [box.role, t, p]).fetchone()[0]
                      for t in columns for p in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES",
                                                 "TRIGGER")}
            public_create = inside.execute("SELECT has_schema_privilege(%s, 'public', 'CREATE')",
                                           [box.role]).fetchone()[0]
        second = None
        try:  # the role's one connection is the sandbox's own
            psycopg.connect(psycopg.conninfo.make_conninfo(postgres_dsn, user=box.role, password=box.password,
                                                           dbname=box.database)).close()
        except psycopg.OperationalError as exc:
            second = str(exc)
        slow = box.run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r WHERE n < 0")
        running = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state <> 'idle'",
                                [box.role]).fetchone()[0]
        ended = box.run("SELECT pg_terminate_backend(pg_backend_pid())")
        again = box.run("SELECT count(*) FROM customers")
        catalog = box.run("SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace "
                          "ORDER BY 1")
        huge = box.run("SELECT repeat('x', 100000) FROM generate_series(1, 100000)", max_bytes=8 * 2**20)
        endless = box.run("SELECT generate_series(1, 10000000000)", max_rows=1000)  # streamed
        exact = box.run("SELECT * FROM generate_series(1, 1000)", max_rows=1000)
        unreadable = box.run("SELECT 'infinity'::date")
        name = box.role
    assert role == (False, False, False, False, False, False, 1)
    assert not any(members.values()), members
    assert database == {"CONNECT": True, "CREATE": False, "TEMPORARY": False}
    assert settings["default_transaction_read_only"] == "on" and settings["statement_timeout"] == "700"
    assert settings["max_parallel_workers_per_gather"] == "0" and settings["temp_file_limit"] == "128mb"
    assert settings["datestyle"] == "iso, mdy" and settings["timezone"] == "utc"
    assert {k for k, v in tables.items() if v} == {(t, "SELECT") for t in columns}
    assert public_create is False
    assert second is not None and "too many connections" in second
    assert slow.timed_out and slow.rows is None and slow.seconds < 4
    assert running == 0  # the server stopped the query at its statement_timeout
    assert ended.rows is None and again.rows == [(2000,)]  # the worker's next query opened a new session
    assert catalog.rows == [("customers",), ("orders",)]
    assert huge.rows is None and huge.error.startswith("result too large")
    assert endless.rows is None and endless.error == "too many rows: more than 1000"
    assert exact.error is None and len(exact.rows) == 1000
    assert unreadable.rows is None and unreadable.error
    with _admin(postgres_dsn) as admin:
        assert admin.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", [name]).fetchone() == (0,)
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)


def test_a_changed_table_is_noticed_when_the_sandbox_closes(retail_pack, postgres_dsn):
    """Second layer: were a candidate to write past the role's privileges, closing the sandbox says so."""
    box = open_postgres_sandbox(postgres_dsn, retail_pack / "rotations" / "seed_42" / "tables",
                                manifest_columns(retail_pack))
    with pytest.raises(RuntimeError, match="changed while candidates ran"), box, \
            _admin(postgres_dsn, box.database) as inside:  # as the server's superuser, not the sandbox's role
        inside.execute("DELETE FROM orders WHERE order_id = 1")
    assert _leftovers(postgres_dsn) == {"databases": [], "roles": [], "schemas": []}


def test_translated_gold_sql_scores_correct_in_the_postgres_sandbox(finance_pack, postgres_dsn, tmp_path):
    """The values the sandbox returns (NUMERIC as Decimal, dates, timestamps) compare as the scorer expects."""
    questions = [q for q in gold_questions(finance_pack) if q.get("split") != "holdout"]
    candidates = tmp_path / "gold.json"
    candidates.write_text(json.dumps({q["id"]: transpile(q["gold_sql"], "postgres") for q in questions}))
    report_path = tmp_path / "report.json"
    with postgres_sandboxes(finance_pack, postgres_dsn) as sandbox:
        code = score_command(finance_pack, candidates, json_path=report_path, sandbox=sandbox, dialect="postgres")
    report = json.loads(report_path.read_text())
    ids = {q["id"] for q in questions}
    scored = [r for r in report["questions"] if r["id"] in ids]
    assert len(scored) == len(ids) > 30
    assert [(r["id"], r["rotations"]) for r in scored if r["status"] != "correct"] == []
    assert code in (0, 1)  # 1 when the pack has questions to decline or a holdout not scored here
    for q in questions[:3]:
        assert expected_for(q, "seed_7") is not None


def test_a_server_that_cannot_be_reached_is_one_input_error(retail_pack, tmp_path):
    with pytest.raises(EvalpackError, match="cannot connect to PostgreSQL"), \
            postgres_sandboxes(retail_pack, f"host={tmp_path} port=1 user=nobody dbname=none connect_timeout=2"):
        pass
