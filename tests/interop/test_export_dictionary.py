"""The data dictionary in the exports (issue 52): SQLite's schema carries it as comments, BIRD's database_description
from it (value meanings in value_description), a pack without one exports as before; the questions' evidence can be
left out (BIRD's setting without evidence). The PostgreSQL dump's COMMENT ON is restored on a real server in
tests/dialects/test_postgres_dictionary.py."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest
from conftest import NOTED_DESCRIPTION, copy_pack, gold_questions

from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import answer_matches, expected_for, load_questions, top_level_order_by
from evalpack.dialects.common import MAX_COMMENT_CHARS, Comments, Keys, comment_text
from evalpack.dialects.sqlite import sqlite_ddl
from evalpack.interop.exports import REPORT, Source, verify, write_format

NOTED_LINE = ("note: what the customer's agent typed -- \"as is\" then a line); DROP TABLE orders; -- a back\\slash; "
              "in words")  # the description on one line, its unit after it


@pytest.fixture(scope="module")
def exported(tmp_path_factory, noted_pack):
    """export(format, *options) -> the folder `evalpack export` wrote of the noted pack, and what it printed."""
    done: dict[tuple[str, ...], tuple[Path, str]] = {}

    def export(fmt: str, *options: str) -> tuple[Path, str]:
        if (fmt, *options) not in done:
            out = tmp_path_factory.mktemp("exports") / f"noted-{fmt}"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert main(["export", str(noted_pack), "--format", fmt, "-o", str(out), *options]) == 0
            done[(fmt, *options)] = out, printed.getvalue()
        return done[(fmt, *options)]

    return export


def schema_of(database: Path) -> dict[str, str]:
    """Each table's CREATE TABLE as the SQLite file keeps it (sqlite_schema.sql)."""
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall())
    finally:
        con.close()


# --------------------------------------------------------------------------- SQLite


def test_the_sqlite_schema_carries_the_dictionary_and_the_export_still_verifies(exported, noted_pack):
    folder, _ = exported("sqlite")
    layout = PackLayout(noted_pack)
    manifest, dictionary = layout.read_manifest(), layout.read_dictionary()
    report = json.loads((folder / REPORT).read_text())
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]
    assert report["sqlite"]["verified"] == len(questions) > 100 and report["sqlite"]["drop_rate"] <= 0.05
    for rotation in layout.rotations():
        database = folder / f"{rotation}.sqlite"
        schema = schema_of(database)
        assert sorted(schema) == sorted(manifest["tables"])  # no table more: Spider's and BIRD's lists stay the pack's
        orders = schema["orders"].splitlines()
        assert orders[0] == 'CREATE TABLE "orders" ( -- One row is one order.'
        assert '  "amount" REAL, -- order amount: what the customer paid for the order, net of tax; in EUR' in orders
        assert ('  "customer_id" INTEGER, -- customer: points at a customer (customers.customer_id); some name a '
                "customer no longer on record; may be null") in orders
        assert "  \"channel\" INTEGER, -- sales channel: a code; 1 means web; 2 means app; 3 means store" in orders
        assert f'  "note" TEXT, -- {NOTED_LINE}' in orders  # its line break, quotes and `--` stay inside the comment
        assert any(line.startswith('  "refunded" INTEGER, -- refunded: ') and line.endswith(
            "(stored as 1 for true, 0 for false)") for line in orders)
        for table in dictionary["tables"]:  # every column's line names what questions call it and what it means
            lines = schema[table["name"]].splitlines()
            for column in table["columns"]:
                line = next(x for x in lines if x.startswith(f'  "{column["name"]}" '))
                assert f"-- {column['label']}: {comment_text(column['description'])}" in line, line
        con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:  # the comments changed nothing the tables hold: the pack's columns and rows, the gold SQL's answers
            for table, info in manifest["tables"].items():
                names = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
                assert names == list(info["columns"]), table
                assert con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == info["rows"][rotation]
            with duckdb.connect() as duck:
                for q in questions:
                    rows = con.execute(q["gold_sql"]).fetchall()
                    assert answer_matches(q, expected_for(q, rotation), rows,
                                          ordered=top_level_order_by(duck, q["duckdb_sql"])), (q["id"], rotation)
        finally:
            con.close()


def test_a_comment_cannot_write_sql_into_the_schema():
    hostile = "x\n  , \"evil\" TEXT\n); DROP TABLE t; --\r\x00\ud800" + "y" * 5000
    comments = Comments((("t", hostile),), (("t", "a", hostile), ("t", "b", "b: \u2028second line")))
    ddl = sqlite_ddl("t", {"a": "BIGINT", "b": "VARCHAR"}, Keys(), comments)
    assert len(ddl.splitlines()) == 4  # CREATE ... (, a, b, )
    con = sqlite3.connect(":memory:")
    con.execute(ddl)
    assert [r[1] for r in con.execute("PRAGMA table_info(t)")] == ["a", "b"]
    assert con.execute("SELECT sql FROM sqlite_schema").fetchone()[0] == ddl
    line = comment_text(hostile)
    assert len(line) == MAX_COMMENT_CHARS and line.endswith("...") and "\n" not in line and "\x00" not in line
    assert "\ud800" not in line and comment_text("a \u2028 b\tc") == "a b c"


# --------------------------------------------------------------------------- BIRD


def descriptions(folder: Path, db_id: str, table: str) -> dict[str, dict[str, str]]:
    path = folder / "dev_databases" / db_id / "database_description" / f"{table}.csv"
    with open(path, encoding="utf-8", newline="") as stream:
        return {row["original_column_name"]: row for row in csv.DictReader(stream)}


def test_birds_database_description_is_the_dictionary_with_value_meanings(exported, noted_pack):
    folder, _ = exported("bird")
    layout = PackLayout(noted_pack)
    manifest = layout.read_manifest()
    for rotation in layout.rotations():
        db_id = f"{manifest['pack']}_{rotation}"
        for table, info in manifest["tables"].items():
            assert list(descriptions(folder, db_id, table)) == list(info["columns"])
        orders, customers = descriptions(folder, db_id, "orders"), descriptions(folder, db_id, "customers")
        assert orders["channel"]["value_description"] == "1: web; 2: app; 3: store"  # a coded column
        assert customers["segment"]["value_description"] == ("consumer: consumer; small_business: small business; "
                                                              "enterprise: enterprise")
        assert (orders["amount"]["column_name"], orders["amount"]["column_description"]) == (
            "order amount", "what the customer paid for the order, net of tax; in EUR")  # the spec's description
        assert orders["amount"]["value_description"] == "" and orders["amount"]["data_format"] == "real"
        assert "customers.customer_id" in orders["customer_id"]["column_description"]
        assert orders["note"]["column_description"] == f"{NOTED_DESCRIPTION}; in words"  # as written, line break too
        assert orders["refunded"]["data_format"] == "integer (0 or 1)"


def test_the_dictionary_in_the_exports_gives_no_gold_sql_or_answer_away(exported, noted_pack):
    secret = gold_questions(noted_pack)  # holdout's too, from the key
    answers = {json.dumps(r["expected_answer"]) for r in secret if isinstance(r["expected_answer"], (int, float))
               and abs(r["expected_answer"]) >= 1000}
    bird, _ = exported("bird")
    sqlite_folder, _ = exported("sqlite")
    texts = [p.read_text(encoding="utf-8") for p in bird.rglob("database_description/*.csv")]
    texts += list(schema_of(next(sqlite_folder.glob("*.sqlite"))).values())
    assert len(answers) > 10 and texts
    for text in texts:
        assert not any(r["gold_sql"] in text for r in secret)
        assert not any(answer in text for answer in answers)


# --------------------------------------------------------------------------- evidence


def test_an_export_without_evidence_says_so_and_gives_none(exported, noted_pack):
    records = {r["id"]: r for r in load_questions(noted_pack)}
    assert sum(1 for r in records.values() if r.get("evidence")) > 50  # the pack's term gives evidence
    with_it, printed = exported("bird")
    without, printed_without = exported("bird", "--no-evidence")
    assert "with evidence" in printed and "without evidence" in printed_without
    assert json.loads((with_it / REPORT).read_text())["evidence"] == "with"
    assert json.loads((without / REPORT).read_text())["evidence"] == "without"
    given = json.loads((with_it / "dev.json").read_text())
    assert all(e["evidence"] == (records[e["evalpack_id"]]["evidence"] or "") for e in given)
    assert sum(1 for e in given if e["evidence"]) > 50
    stripped = json.loads((without / "dev.json").read_text())
    assert [e["evidence"] for e in stripped] == [""] * len(given)
    assert [{**e, "evidence": ""} for e in given] == stripped  # nothing else differs

    sqlite_with, _ = exported("sqlite")
    sqlite_without, _ = exported("sqlite", "--no-evidence")
    kept = [json.loads(line) for line in (sqlite_with / "questions.jsonl").read_text().splitlines()]
    gone = [json.loads(line) for line in (sqlite_without / "questions.jsonl").read_text().splitlines()]
    assert [q["evidence"] for q in kept] == [records[q["id"]].get("evidence") for q in kept]
    assert [q["evidence"] for q in gone] == [None] * len(kept)
    assert [{**q, "evidence": None} for q in kept] == gone
    assert schema_of(sqlite_with / "seed_42.sqlite") == schema_of(sqlite_without / "seed_42.sqlite")


# --------------------------------------------------------------------------- a pack without a dictionary


OLD_ORDERS_DDL = ('CREATE TABLE "orders" (\n  "order_id" INTEGER NOT NULL PRIMARY KEY,\n  "customer_id" INTEGER,\n'
                  '  "channel" INTEGER,\n  "amount" REAL,\n  "refunded" INTEGER,\n  "ordered_at" TEXT,\n  "note" TEXT,\n'
                  '  "status" TEXT,\n  "gross_amount" REAL,\n  "shipped_on" TEXT,\n'
                  '  FOREIGN KEY ("customer_id") REFERENCES "customers" ("customer_id")\n)')


def without_dictionary(pack: Path, target: Path) -> Source:
    copy = copy_pack(pack, target)
    for name in ("dictionary.json", "dictionary.md"):
        (copy / name).unlink()
    layout = PackLayout(copy)
    return Source.of(copy, layout.read_records(), layout.read_manifest())


def test_a_pack_without_a_dictionary_exports_as_before(noted_pack, tmp_path):
    source = without_dictionary(noted_pack, tmp_path / "plain")
    assert source.dictionary is None and source.comments == Comments()
    results = verify(source, ["bird", "postgres"], None)
    for fmt in ("bird", "postgres"):
        write_format(fmt, source, results, tmp_path / fmt)
    assert schema_of(tmp_path / "bird" / "dev_databases" / "retail_seed_42" / "retail_seed_42.sqlite")["orders"] \
        == OLD_ORDERS_DDL
    orders = descriptions(tmp_path / "bird", "retail_seed_42", "orders")
    assert {row["value_description"] for row in orders.values()} == {""}
    meanings = source.semantics["tables"]["orders"]["columns"]  # manifest.json's, as before the dictionary
    assert orders["amount"]["column_description"] == meanings["amount"].split(":", 1)[1].strip()
    assert b"COMMENT ON" not in (tmp_path / "postgres" / "seed_42.sql").read_bytes()


def test_a_dictionary_of_another_shape_is_refused_naming_the_key(retail_pack, tmp_path):
    copy = copy_pack(retail_pack, tmp_path / "odd")
    path = copy / "dictionary.json"
    dictionary = json.loads(path.read_text())
    dictionary["tables"][1]["columns"][3]["values"] = [{"value": "web", "meaning": 7}]
    path.write_text(json.dumps(dictionary))
    layout = PackLayout(copy)
    with pytest.raises(EvalpackError, match=r"dictionary\.json: tables\[1\]\.columns\[3\]\.values\[0\]\.meaning: "
                                            "expected a text, got an integer; the pack is damaged"):
        Source.of(copy, layout.read_records(), layout.read_manifest())
