"""evalpack.dialects.engines: gold SQL transpiled to SQLite (and PostgreSQL), SQLite files written from a rotation, and every
gold SQL of both example packs verified on the real SQLite engine by the scorer's rules."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gold_questions, spec_text

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.data.plan import plan_pack
from evalpack.dialects import DIALECTS
from evalpack.dialects import engines as dialects
from evalpack.dialects.common import ForeignKey, Keys, keys_of
from evalpack.dialects.engines import SqliteEngine, engine_for, verify_in_dialects
from evalpack.dialects.sqlite import sqlite_type, write_sqlite
from evalpack.dialects.translate import Untranslatable, transpile
from evalpack.questions.derive import derive_questions
from evalpack.spec.reader import parse_spec

MAX_DROP_RATE = 0.05


def manifest_columns(pack: Path) -> dict[str, dict[str, str]]:
    return {t: dict(v["columns"]) for t, v in PackLayout(pack).read_manifest()["tables"].items()}


def rotation_dirs(pack: Path) -> dict[str, Path]:
    layout = PackLayout(pack)
    return {r: layout.tables(r) for r in layout.rotations()}


# --------------------------------------------------------------------------- transpiling

DAYS = ["2024-02-29", "2025-01-01", "2025-03-31", "2025-05-17", "2025-08-01", "2025-12-31"]


@pytest.fixture()
def days(tmp_path: Path) -> dict:
    """A table of dates and timestamps, in DuckDB and in SQLite (as write_sqlite stores them)."""
    table = pa.table({"d": pa.array([dt.date.fromisoformat(d) for d in DAYS], pa.date32()),
                      "ts": pa.array([dt.datetime.fromisoformat(d + " 13:45:00") for d in DAYS], pa.timestamp("us")),
                      "amount": pa.array([Decimal("0.10"), Decimal("0.20"), Decimal("0.30"), Decimal("1.15"),
                                          Decimal("-0.05"), Decimal("2.35")], pa.decimal128(18, 2))})
    tables = tmp_path / "tables"
    tables.mkdir()
    pq.write_table(table, tables / "t.parquet")
    columns = {"t": {"d": "DATE", "ts": "TIMESTAMP", "amount": "DECIMAL(18,2)"}}
    return {"tables": tables, "columns": columns}


@pytest.mark.parametrize("expression", [
    "DATE_TRUNC('MONTH', d)", "DATE_TRUNC('QUARTER', d)", "DATE_TRUNC('YEAR', d)", "DATE_TRUNC('DAY', d)",
    "YEAR(d)", "MONTH(d)", "DAY(d)", "QUARTER(d)", "EXTRACT(YEAR FROM d)", "EXTRACT(MONTH FROM ts)",
    "PRINTF('%04d-%02d', YEAR(d), MONTH(d))", "STRFTIME(DATE_TRUNC('MONTH', d), '%Y-%m')",
    "STRFTIME(DATE_TRUNC('QUARTER', ts), '%Y-%m')", "CAST(d AS VARCHAR)",
])
def test_date_expressions_mean_in_sqlite_what_they_mean_in_duckdb(days, expression):
    sql = f"SELECT {expression} AS v FROM t ORDER BY d"
    with duckdb.connect() as con:
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{days['tables'] / 't.parquet'}')")
        want = [row[0] for row in con.execute(sql).fetchall()]
    with SqliteEngine().open_rotation(days["tables"], days["columns"]) as run:
        got = [row[0] for row in run(transpile(sql, "sqlite", columns=days["columns"]))]
    normal = [v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat() if isinstance(v, dt.date) else v
              for v in want]
    assert got == normal, (transpile(sql, "sqlite"), got, normal)


def test_date_literals_compare_with_the_text_dates_sqlite_holds(days):
    sql = ("SELECT COUNT(*) FROM t WHERE d >= CAST('2025-01-01' AS DATE) AND d < CAST('2025-06-01' AS DATE) "
           "AND ts < CAST('2025-05-17 13:45:{} AS TIMESTAMP)")
    with SqliteEngine().open_rotation(days["tables"], days["columns"]) as run:
        assert run(transpile(sql.format("01'"), "sqlite")) == [(3,)]  # 2025-01-01, 2025-03-31, 2025-05-17
        assert run(transpile(sql.format("00'"), "sqlite")) == [(2,)]  # 13:45:00 is not before itself


def test_sums_of_decimals_stay_exact_in_sqlite(days):
    # 0.10 + 0.20 is 0.30000000000000004 in REAL: compared with 0.30 it is not equal, unless the sum is rounded
    # at the decimals' scale, which is what DuckDB's exact DECIMAL sum gives
    sql = "SELECT SUM(amount) = 0.30 FROM t WHERE d < CAST('2025-03-01' AS DATE)"  # 0.10 + 0.20
    translated = transpile(sql, "sqlite", columns=days["columns"])
    assert "ROUND(SUM(amount), 2)" in translated
    with SqliteEngine().open_rotation(days["tables"], days["columns"]) as run:
        assert run(translated) == [(1,)]
        assert run(transpile(sql, "sqlite")) == [(0,)]  # without the columns' types the REAL sum is off
    filtered = transpile("SELECT SUM(amount) FILTER (WHERE d > CAST('2025-01-01' AS DATE)) - SUM(amount) FROM t",
                         "sqlite", columns=days["columns"])
    assert filtered.count("ROUND(") == 2 and "FILTER" in filtered
    cased = transpile("SELECT SUM(CASE WHEN d < CAST('2025-03-01' AS DATE) THEN amount ELSE 0 END) = 0.30 FROM t",
                      "sqlite", columns=days["columns"])
    with SqliteEngine().open_rotation(days["tables"], days["columns"]) as run:
        assert run(cased) == [(1,)]
    # only sums whose values are decimals: a count of decimals' rows stays an integer
    assert transpile("SELECT SUM(CASE WHEN amount > 1 THEN 1 END) FROM t", "sqlite", columns=days["columns"]) == \
        "SELECT SUM(CASE WHEN amount > 1 THEN 1 END) FROM t"


def test_postgres_forms_of_what_postgres_lacks():
    rounded = transpile("SELECT ROUND(CAST(COUNT_IF(refunded) AS DOUBLE) / COUNT(*), 4) FROM orders", "postgres")
    assert "ROUND(CAST(" in rounded and "AS DECIMAL), 4)" in rounded
    printf = transpile("SELECT PRINTF('%04d-%02d', YEAR(d), MONTH(d)) FROM t", "postgres")
    assert "PRINTF" not in printf.upper() and "LPAD(CAST(" in printf and "'-'" in printf
    with pytest.raises(Untranslatable, match="PRINTF"):
        transpile("SELECT PRINTF('%5.2f', x) FROM t", "postgres")


@pytest.mark.parametrize("sql, dialect, reason", [
    ("SELECT d + INTERVAL 1 MONTH FROM t", "sqlite", "interval"),
    ("SELECT DATE_TRUNC('WEEK', d) FROM t", "sqlite", "WEEK"),
    ("SELECT 7 // 2", "sqlite", "integer division"),
    ("SELECT FROM WHERE", "sqlite", "cannot parse"),
    ("SELECT 1; SELECT 2", "postgres", "one statement"),
])
def test_what_has_no_faithful_form_is_untranslatable_with_its_reason(sql, dialect, reason):
    with pytest.raises(Untranslatable, match=reason):
        transpile(sql, dialect)


def test_unknown_dialects_are_refused():
    with pytest.raises(ValueError, match="mysql"):
        transpile("SELECT 1", "mysql")
    with pytest.raises(EvalpackError, match="unknown dialect 'mysql'"):
        engine_for("mysql")
    with pytest.raises(EvalpackError, match="--postgres-dsn"):
        engine_for("postgres")
    assert DIALECTS == ("sqlite", "postgres") and engine_for("sqlite").name == "sqlite"


# --------------------------------------------------------------------------- SQLite files


def test_the_sqlite_file_is_typed_keyed_and_the_same_bytes_each_time(retail_pack, tmp_path):
    manifest = PackLayout(retail_pack).read_manifest()
    columns, keys = manifest_columns(retail_pack), keys_of(manifest)
    tables = PackLayout(retail_pack).tables("seed_42")
    first, second = tmp_path / "a" / "seed_42.sqlite", tmp_path / "b" / "seed_42.sqlite"
    write_sqlite(tables, columns, first, keys=keys)
    write_sqlite(tables, columns, second, keys=keys)
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    assert sorted(p.name for p in first.parent.iterdir()) == ["seed_42.sqlite"]  # no temporary file left
    con = sqlite3.connect(f"file:{first}?mode=ro", uri=True)
    try:
        declared = {(t, row[1]): (row[2], row[5]) for t in ("customers", "orders")
                    for row in con.execute(f"PRAGMA table_info({t})")}
        assert declared[("orders", "amount")] == ("REAL", 0)
        assert declared[("orders", "ordered_at")] == ("TEXT", 0)
        assert declared[("orders", "refunded")] == ("INTEGER", 0)
        assert declared[("customers", "customer_id")] == ("INTEGER", 1)
        assert declared[("orders", "order_id")] == ("INTEGER", 1)
        fks = con.execute("PRAGMA foreign_key_list(orders)").fetchall()
        assert [(fk[2], fk[3], fk[4]) for fk in fks] == [("customers", "customer_id", "customer_id")]
        # the values as a SQLite user expects them
        ordered_at, signed_up_at = con.execute(
            "SELECT o.ordered_at, c.signed_up_at FROM orders o JOIN customers c USING (customer_id) LIMIT 1").fetchone()
        assert dt.date.fromisoformat(ordered_at).isoformat() == ordered_at
        assert len(signed_up_at) == 19 and dt.datetime.strptime(signed_up_at, "%Y-%m-%d %H:%M:%S")
        kinds = dict(con.execute("SELECT 'refunded', group_concat(DISTINCT typeof(refunded)) FROM orders "
                                 "UNION ALL SELECT 'values', group_concat(DISTINCT refunded) FROM orders "
                                 "UNION ALL SELECT 'amount', group_concat(DISTINCT typeof(amount)) FROM orders"))
        assert kinds["refunded"] == "integer" and sorted(kinds["values"].split(",")) == ["0", "1"]
        assert set(kinds["amount"].split(",")) == {"real", "null"}
        # every row and every NULL of the Parquet file, with its sum
        with duckdb.connect() as duck:
            want = duck.execute(f"SELECT count(*), count(amount), count(customer_id), sum(amount) "
                                f"FROM read_parquet('{tables / 'orders.parquet'}')").fetchone()
        got = con.execute("SELECT count(*), count(amount), count(customer_id), round(sum(amount), 2) FROM orders")
        assert tuple(got.fetchone()) == (want[0], want[1], want[2], float(want[3]))
    finally:
        con.close()


def test_a_failed_write_leaves_nothing(retail_pack, tmp_path):
    columns = manifest_columns(retail_pack)
    columns["missing"] = {"x": "BIGINT"}  # no missing.parquet
    target = tmp_path / "out" / "seed_42.sqlite"
    with pytest.raises(EvalpackError, match=r"missing\.parquet: no such table file"):
        write_sqlite(PackLayout(retail_pack).tables("seed_42"), columns, target)
    assert list(target.parent.iterdir()) == []


def test_keys_come_from_the_manifest():
    manifest = {"primary_keys": {"customers": "customer_id", "orders": "order_id"},
                "declared_links": [{"child_table": "orders", "child_column": "customer_id",
                                    "parent_table": "customers", "parent_column": "customer_id"}]}
    keys = keys_of(manifest)
    assert keys.primary_of("orders") == "order_id" and keys.foreign_of("orders")[0].parent_table == "customers"
    older = keys_of({"declared_links": manifest["declared_links"]})  # a pack from before primary_keys
    assert older.primary == (("customers", "customer_id"),)
    assert keys_of({}) == Keys()
    assert [sqlite_type(t) for t in ("BIGINT", "BOOLEAN", "DECIMAL(18,2)", "DOUBLE", "DATE", "TIMESTAMP", "VARCHAR")] \
        == ["INTEGER", "INTEGER", "REAL", "REAL", "TEXT", "TEXT", "TEXT"]


def test_an_imported_pack_s_links_are_indexed_in_sqlite(tmp_path):
    """An import declares no keys, only links (manifest.json -> relationships, inferred ones too): SQLite indexes
    both columns of each, so a join on them is a lookup, not a scan per row (TPC-H's Q21 took 80 s without)."""
    tables = tmp_path / "tables"
    tables.mkdir()
    pq.write_table(pa.table({"o_orderkey": list(range(200))}), tables / "orders.parquet")
    pq.write_table(pa.table({"l_orderkey": [i % 200 for i in range(2000)]}), tables / "lineitem.parquet")
    keys = keys_of({"relationships": [{"child": "lineitem.l_orderkey", "parent": "orders.o_orderkey",
                                       "source": "inferred", "inferred": True}]})
    assert keys.linked == (ForeignKey("lineitem", "l_orderkey", "orders", "o_orderkey"),) and not keys.foreign
    target = tmp_path / "db.sqlite"
    write_sqlite(tables, {"orders": {"o_orderkey": "BIGINT"}, "lineitem": {"l_orderkey": "BIGINT"}}, target, keys=keys)
    with contextlib.closing(sqlite3.connect(target)) as con:
        indexed = {(t, c) for (t, c) in con.execute(
            "SELECT m.tbl_name, i.name FROM sqlite_master m, pragma_index_info(m.name) i WHERE m.type = 'index'")}
        plan = " ".join(str(r) for r in con.execute(
            "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey"))
    assert indexed == {("lineitem", "l_orderkey"), ("orders", "o_orderkey")}
    assert "USING COVERING INDEX" in plan or "USING INDEX" in plan, plan


# --------------------------------------------------------------------------- verification


@pytest.mark.parametrize("name", ["retail", "finance"])
def test_every_gold_sql_answers_in_sqlite_on_every_rotation(request, name):
    pack = request.getfixturevalue(f"{name}_pack")
    records = gold_questions(pack)  # the holdout's too, from the answer key beside the pack
    keys = keys_of(PackLayout(pack).read_manifest())
    result = verify_in_dialects(records, rotation_dirs(pack), manifest_columns(pack), [SqliteEngine(keys)])["sqlite"]
    assert result.checked == len(records) > 50
    assert all(d.reason and d.kind in ("untranslatable", "error", "mismatch", "inexact") for d in result.drops)
    print(f"{name}: {result.checked} questions, {len(result.drops)} dropped in sqlite ({result.drop_rate:.1%})")
    assert result.drop_rate <= MAX_DROP_RATE, [d.to_dict() for d in result.drops]
    assert set(result.translated) | {d.id for d in result.drops} == {r["id"] for r in records}


def test_a_drop_names_its_kind_rotation_and_first_differing_value(finance_pack):
    records = [r for r in gold_questions(finance_pack) if r.get("split") == "dev"]
    scalar = next(r for r in records if r["answer_type"] == "number")
    rows = next(r for r in records if r["answer_type"] == "rows")
    wrong_scalar = {**scalar, "id": "wrong_scalar", "expected_answer": 1.5}
    wrong_rows = {**rows, "id": "wrong_rows",
                  "expected_answer": [[row[0], 0.01, *row[2:]] for row in rows["expected_answer"]]
                  if not isinstance(rows["expected_answer"], dict) else None}
    failing = {**scalar, "id": "failing", "gold_sql": "SELECT no_such_column FROM journal_lines"}
    untranslatable = {**scalar, "id": "untranslatable", "gold_sql": "SELECT 7 // 2"}
    result = verify_in_dialects([scalar, wrong_scalar, wrong_rows, failing, untranslatable],
                                rotation_dirs(finance_pack), manifest_columns(finance_pack), [SqliteEngine()])
    drops = {d.id: d for d in result["sqlite"].drops}
    assert list(result["sqlite"].translated) == [scalar["id"]]
    first = PackLayout(finance_pack).rotations()[0]
    assert drops["wrong_scalar"].kind == "mismatch" and drops["wrong_scalar"].rotation == first
    assert "expected 1.5 (float), got" in drops["wrong_scalar"].reason and "(float)" in drops["wrong_scalar"].reason
    assert drops["wrong_rows"].kind == "mismatch" and "column 2: expected 0.01 (float)" in drops["wrong_rows"].reason
    assert drops["failing"].kind == "error" and "no_such_column" in drops["failing"].reason
    assert drops["failing"].sql == "SELECT no_such_column FROM journal_lines" and drops["untranslatable"].sql is None
    assert drops["untranslatable"].kind == "untranslatable" and drops["untranslatable"].rotation is None
    assert json.loads(json.dumps(result["sqlite"].to_dict()))["dropped"] == 4


def test_gold_sql_from_a_pack_someone_else_built_writes_nothing_and_stops(finance_pack, tmp_path, monkeypatch):
    """`evalpack export` of a downloaded pack runs its gold SQL in SQLite: VACUUM INTO and ATTACH wrote files
    anywhere, and a runaway query never ended. The engine is locked as the scorer's SQLite sandbox is and stops a
    query at its time limit: each such question is dropped with the reason, and nothing is written."""
    monkeypatch.setattr(dialects, "GOLD_SECONDS", 1.0)
    scalar = next(r for r in gold_questions(finance_pack) if r.get("split") == "dev" and r["answer_type"] == "number")
    hostile = {"vacuum": f"VACUUM INTO '{tmp_path / 'copy.db'}'",
               "attach": f"ATTACH DATABASE '{tmp_path / 'attached.db'}' AS y",
               "select_attach": "SELECT count(*) FROM pragma_database_list",
               "runaway": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"}
    records = [scalar, *({**scalar, "id": name, "gold_sql": sql} for name, sql in hostile.items())]
    result = verify_in_dialects(records, rotation_dirs(finance_pack), manifest_columns(finance_pack),
                                [SqliteEngine()])["sqlite"]
    drops = {d.id: d for d in result.drops}
    assert list(result.translated) == [scalar["id"]] and set(drops) == set(hostile)
    assert all(d.kind in ("error", "untranslatable") for d in drops.values()), drops
    assert drops["runaway"].reason.startswith("timeout"), drops["runaway"]
    assert list(tmp_path.iterdir()) == []


def test_a_gold_query_that_takes_more_memory_than_a_candidate_may_is_dropped(finance_pack, monkeypatch):
    """The export's SQLite runs a pack's gold SQL in the scorer's sandbox process under a candidate's limits: a
    query that takes all the memory there is (a DISTINCT over millions of generated texts) ran in the export's own
    process, which grew by gigabytes; now it is dropped as out of memory and the other questions verify."""
    monkeypatch.setattr(dialects, "GOLD_MEMORY_MB", 64)
    scalar = next(r for r in gold_questions(finance_pack) if r.get("split") == "dev" and r["answer_type"] == "number")
    bomb = {**scalar, "id": "bomb", "gold_sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE "
            "n < 3000000) SELECT count(DISTINCT h) FROM (SELECT hex(randomblob(40)) AS h FROM r)"}
    result = verify_in_dialects([scalar, bomb], rotation_dirs(finance_pack), manifest_columns(finance_pack),
                                [SqliteEngine()])["sqlite"]
    assert list(result.translated) == [scalar["id"]]
    (drop,) = result.drops
    assert drop.id == "bomb" and drop.kind == "error" and "out of memory" in drop.reason, drop
    # the export has no --memory-mb: the reason names the limit itself
    assert "of 64 MiB" in drop.reason and "--memory-mb" not in drop.reason, drop


def test_a_question_whose_natural_sqlite_query_answers_otherwise_is_left_out(finance_pack):
    """SQLite holds decimals as REAL: 'entries whose debit and credit sums differ', written plainly, counts hundreds
    of balanced entries. The exact translation (sums rounded at the decimals' scale) verifies, but a SQLite user's
    query would be scored wrong for rounding, so the question is not asked in SQLite; the rest are."""
    # the balance questions, as derived: a balanced ledger gives them the same answer under some plausible mistakes
    # on every database it allows, so the near-miss gate leaves them out of the pack; the export's rule is the same
    spec = parse_spec(spec_text(finance_pack), file="finance.yaml")
    derived = {q.kind: q.to_record(spec.answers) for q in derive_questions(spec, plan_pack(spec))}
    ledger, total = derived["ledger_balance"], derived["trial_balance"]
    rotations, columns = rotation_dirs(finance_pack), manifest_columns(finance_pack)
    result = verify_in_dialects([ledger, total], rotations, columns, [SqliteEngine()])["sqlite"]
    assert list(result.translated) == [total["id"]]
    (drop,) = result.drops
    assert (drop.id, drop.kind) == (ledger["id"], "inexact")
    assert "SQLite stores decimals as REAL" in drop.reason and "expected 0 (int), got" in drop.reason
    assert drop.sql == transpile(ledger["gold_sql"], "sqlite") != transpile(ledger["gold_sql"], "sqlite", columns=columns)
    with SqliteEngine().open_rotation(rotations[drop.rotation], columns) as run:
        assert run(drop.sql) != [(0,)]  # the plain query miscounts
        assert run(transpile(ledger["gold_sql"], "sqlite", columns=columns)) == [(0,)]


def test_rotated_answers_are_compared_per_rotation(tmp_path):
    from conftest import SCHEMAS

    from evalpack.build import build_pack

    spec = tmp_path / "finance.yaml"
    spec.write_text((SCHEMAS / "finance.yaml").read_text().replace("rotations: 3", "rotations: 2\nanswers: rotated"))
    pack = build_pack(spec, tmp_path / "pack").path
    records = [r for r in gold_questions(pack) if isinstance(r["expected_answer"], dict)
               and len({json.dumps(v) for v in r["expected_answer"].values()}) == 2]
    assert len(records) > 20
    swapped = [{**r, "expected_answer": dict(zip(r["expected_answer"], reversed(r["expected_answer"].values()),
                                                 strict=True))} for r in records]
    columns, rotations = manifest_columns(pack), rotation_dirs(pack)
    right = verify_in_dialects(records, rotations, columns, [SqliteEngine()])["sqlite"]
    wrong = verify_in_dialects(swapped, rotations, columns, [SqliteEngine()])["sqlite"]
    assert right.drops == () and len(right.translated) == len(records)
    assert {d.kind for d in wrong.drops} == {"mismatch"} and len(wrong.drops) == len(records)
