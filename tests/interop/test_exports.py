"""evalpack export and the spec's exports: SQLite, PostgreSQL, BIRD and Spider, verified, public only, attested.

The BIRD and Spider layouts are scored by evaldata's own loaders (load_bird, load_spider) and its ExecutionAccuracy
on the exported SQLite files: the gold SQL as predictions scores 100%, wrong predictions do not.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest
from conftest import SCHEMAS, copy_pack, gold_questions
from evaldata import CallableSolver, ExecutionAccuracy, load_bird, load_spider, run_benchmark
from evaldata.platforms.registry import close_all

from evalpack.build import build_pack
from evalpack.cli import main
from evalpack.core.errors import EvalpackError, SpecError
from evalpack.core.layout import ATTESTATION, PackLayout
from evalpack.core.scoring import answer_matches, expected_for, top_level_order_by
from evalpack.dialects.translate import transpile
from evalpack.interop.exports import DSN_ENV, REPORT
from evalpack.pack.attest import verify_pack
from evalpack.spec.reader import parse_spec

MAX_DROP_RATE = 0.05
BIRD = ExecutionAccuracy(row_order="ignore", multiplicity="set")  # evaldata's BIRD preset
SPIDER = ExecutionAccuracy(column_alignment="by_value")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, request):
    """export(pack name, format) -> the folder `evalpack export` wrote (once per pack and format)."""
    done: dict[tuple[str, str], Path] = {}

    def export(name: str, fmt: str) -> Path:
        if (name, fmt) not in done:
            out = tmp_path_factory.mktemp("exports") / f"{name}-{fmt}"
            assert main(["export", str(request.getfixturevalue(f"{name}_pack")), "--format", fmt, "-o", str(out)]) == 0
            done[(name, fmt)] = out
        return done[(name, fmt)]

    return export


def evaldata_accuracy(fmt: str, folder: Path, predict, db_id: str | None = None) -> tuple[int, float]:
    """evaldata's accuracy of ``predict`` (case -> SQL) on an exported layout, with evaldata's own loader; with
    ``db_id``, on that database's cases only."""
    cases = load_bird(folder) if fmt == "bird" else load_spider(folder)
    if db_id is not None:
        cases = [case for case in cases if case.metadata["db_id"] == db_id]
        assert cases, db_id
    try:
        summary = run_benchmark(cases, CallableSolver(predict), scorers=[BIRD if fmt == "bird" else SPIDER])
    finally:
        close_all()  # evaldata keeps one pool per database name: another test's folder has the same db_ids
    return summary.total, summary.accuracy


# --------------------------------------------------------------------------- BIRD and Spider


@pytest.mark.parametrize("name", ["retail", "finance"])
@pytest.mark.parametrize("fmt", ["bird", "spider"])
def test_bird_and_spider_layouts_score_100_percent_with_the_gold_sql_in_evaldata(exported, request, name, fmt):
    folder = exported(name, fmt)
    pack = request.getfixturevalue(f"{name}_pack")
    rotations = PackLayout(pack).rotations()
    entries = json.loads((folder / "dev.json").read_text())
    sql_key = "SQL" if fmt == "bird" else "query"
    tables = json.loads((folder / ("dev_tables.json" if fmt == "bird" else "tables.json")).read_text())
    assert [t["db_id"] for t in tables] == [f"{name}_{r}" for r in rotations]
    for rotation in rotations:
        db_id = f"{name}_{rotation}"
        databases = "dev_databases" if fmt == "bird" else "database"
        assert (folder / databases / db_id / f"{db_id}.sqlite").is_file()
    # each exported question once per db_id
    per_db = {t["db_id"]: sorted(e["evalpack_id"] for e in entries if e["db_id"] == t["db_id"]) for t in tables}
    assert len({tuple(ids) for ids in per_db.values()}) == 1 and len(set(next(iter(per_db.values())))) > 50
    if fmt == "bird":
        assert [e["question_id"] for e in entries] == list(range(len(entries)))
        assert {e["difficulty"] for e in entries} <= {"simple", "moderate", "challenging"}
        assert all(set(e) >= {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"} for e in entries)
        gold_file = (folder / "dev.sql").read_text().splitlines()
        assert (folder / "dev_gold.sql").read_text().splitlines() == gold_file  # the name BIRD's evaluation.py opens
    else:
        assert all(set(e) >= {"db_id", "question", "query"} for e in entries)
        gold_file = (folder / "dev_gold.sql").read_text().splitlines()
    assert gold_file == [f"{e[sql_key]}\t{e['db_id']}" for e in entries]

    total, accuracy = evaldata_accuracy(fmt, folder, lambda case: case.expected.sql)
    assert total == len(entries) and accuracy == 1.0

    # wrong predictions score wrong: a constant, and each question answered with its neighbour's SQL (on the first
    # rotation's database: the gold run above already read every database, and each wrong run took seconds)
    first = tables[0]["db_id"]
    total, accuracy = evaldata_accuracy(fmt, folder, lambda case: "SELECT 1", first)
    assert accuracy == 0.0
    by_case = {}
    for e in entries:
        by_case.setdefault(e["db_id"], []).append(e[sql_key])
    neighbour = {sql: sqls[(i + 1) % len(sqls)] for sqls in by_case.values() for i, sql in enumerate(sqls)}
    total, accuracy = evaldata_accuracy(fmt, folder, lambda case: neighbour[case.expected.sql], first)
    assert total == len(per_db[first]) and accuracy < 0.1, accuracy


def test_spider_tables_json_names_columns_types_and_keys(exported):
    tables = json.loads((exported("retail", "spider") / "tables.json").read_text())[0]
    columns = tables["column_names_original"]
    assert columns[0] == [-1, "*"] and tables["table_names_original"] == ["customers", "orders"]
    index = {(tables["table_names_original"][t], c): i for i, (t, c) in enumerate(columns) if t >= 0}
    types = dict(zip(map(tuple, columns), tables["column_types"], strict=True))
    assert types[(1, "amount")] == "number" and types[(1, "ordered_at")] == "time"
    assert types[(1, "refunded")] == "boolean" and types[(0, "name")] == "text"
    assert sorted(tables["primary_keys"]) == sorted([index[("customers", "customer_id")], index[("orders", "order_id")]])
    assert tables["foreign_keys"] == [[index[("orders", "customer_id")], index[("customers", "customer_id")]]]
    assert tables["column_names"][index[("orders", "ordered_at")]] == [1, "order date"]


# --------------------------------------------------------------------------- what is exported


def test_holdout_and_questions_to_decline_are_never_exported(exported, retail_pack):
    records = PackLayout(retail_pack).read_records()
    holdout = {r["id"] for r in records if r.get("split") == "holdout"}
    declines = {r["id"] for r in records if r.get("answerable") is False}
    assert len(holdout) > 10 and len(declines) > 5
    secret = [r for r in gold_questions(retail_pack) if r["id"] in holdout]  # their gold SQL, from the key
    for fmt in ("sqlite", "bird", "spider", "postgres"):
        folder = exported("retail", fmt)
        report = json.loads((folder / REPORT).read_text())
        assert report["questions"]["left_out"] == {"holdout": len(holdout), "unanswerable": len(declines)}
        texts = {p: p.read_text() for p in folder.rglob("*") if p.suffix in (".json", ".jsonl")}
        ids = set()
        for path, text in texts.items():
            if path.name in ("dev.json", "questions.jsonl"):
                rows = json.loads(text) if path.suffix == ".json" else [json.loads(x) for x in text.splitlines()]
                ids |= {row.get("evalpack_id", row.get("id")) for row in rows}
        assert not ids & (holdout | declines), fmt
        for text in [*texts.values(), *(p.read_text() for p in folder.glob("*.sql") if fmt != "postgres")]:
            assert not any(r["gold_sql"] in text or r["question"] in text for r in secret), fmt


def test_the_sqlite_export_answers_every_exported_question_on_its_own_files(exported, retail_pack):
    folder = exported("retail", "sqlite")
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]
    report = json.loads((folder / REPORT).read_text())
    assert report["sqlite"]["verified"] == len(questions) and report["sqlite"]["drop_rate"] <= MAX_DROP_RATE
    with duckdb.connect() as duck:
        ordered = {q["id"]: top_level_order_by(duck, q["duckdb_sql"]) for q in questions}
    for rotation in PackLayout(retail_pack).rotations():
        con = sqlite3.connect(f"file:{folder / f'{rotation}.sqlite'}?mode=ro", uri=True)
        try:
            for q in questions:
                rows = con.execute(q["gold_sql"]).fetchall()
                assert answer_matches(q, expected_for(q, rotation), rows, ordered=ordered[q["id"]]), (q["id"], rotation)
        finally:
            con.close()


def test_the_postgres_export_without_a_server_writes_the_dumps_and_says_nothing_was_verified(exported, monkeypatch):
    folder = exported("retail", "postgres")
    assert sorted(p.name for p in folder.iterdir()) == [REPORT, "seed_42.sql", "seed_43.sql", "seed_44.sql"]
    report = json.loads((folder / REPORT).read_text())
    assert report["postgres"]["verified_on_engine"] is False and DSN_ENV in report["postgres"]["note"]
    assert report["questions"]["exported"] == 0


def test_the_postgres_export_with_a_server_verifies_the_translated_sql(finance_pack, postgres_dsn, tmp_path, capsys):
    out = tmp_path / "pg"
    assert main(["export", str(finance_pack), "--format", "postgres", "-o", str(out), "--postgres-dsn",
                 postgres_dsn]) == 0
    report = json.loads((out / REPORT).read_text())
    assert report["postgres"]["verified_on_engine"] is True and report["postgres"]["drop_rate"] <= MAX_DROP_RATE
    questions = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    assert len(questions) == report["postgres"]["verified"] > 50
    assert all(q["dialect"] == "postgres" and q["gold_sql"] == transpile(q["duckdb_sql"], "postgres")
               for q in questions)
    assert "verified on PostgreSQL" in capsys.readouterr().out


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_one_line_exit_2_and_writes_nothing(finance_pack, tmp_path, capsys, monkeypatch):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main(["export", str(finance_pack), "--format", "sqlite", "-o", str(busy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evalpack: error: ") and "already exists" in err and err.count("\n") == 1
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]

    tampered = copy_pack(finance_pack, tmp_path / "tampered")
    with (tampered / "questions.jsonl").open("a") as f:
        f.write("\n")
    out = tmp_path / "out"
    assert main(["export", str(tampered), "--format", "bird", "-o", str(out)]) == 2
    assert "questions.jsonl" in capsys.readouterr().err and not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left

    with pytest.raises(SystemExit) as exit_:
        main(["export", str(finance_pack), "--format", "mysql", "-o", str(out)])
    assert exit_.value.code == 2 and "mysql" in capsys.readouterr().err and not out.exists()

    assert main(["export", str(tmp_path / "nothing"), "--format", "sqlite", "-o", str(out)]) == 2
    assert "is " + str(tmp_path / "nothing") + " a pack" in capsys.readouterr().err and not out.exists()

    inside = finance_pack / "exports" / "sqlite"
    assert main(["export", str(finance_pack), "--format", "sqlite", "-o", str(inside)]) == 2
    assert "inside the pack" in capsys.readouterr().err and not (finance_pack / "exports").exists()

    # a folder that cannot be written (root may write anywhere but /proc) fails before the verification, naming -o
    import evalpack.interop.exports as exports

    def verify_not_reached(*args, **kwargs):
        raise AssertionError("the gold SQL was verified before the output folder was checked")

    monkeypatch.setattr(exports, "verify", verify_not_reached)
    assert main(["export", str(finance_pack), "--format", "bird", "-o", "/proc/evalpack-export/bird"]) == 2
    err = capsys.readouterr().err
    assert "/proc/evalpack-export/bird: cannot write the export there" in err and err.count("\n") == 1
    monkeypatch.undo()

    empty = tmp_path / "empty"  # an empty folder is fine
    empty.mkdir()
    assert main(["export", str(finance_pack), "--format", "sqlite", "-o", str(empty)]) == 0
    assert (empty / "seed_7.sqlite").is_file() and (empty / REPORT).is_file()


@pytest.mark.parametrize("value, message", [
    ("[mysql]", "exports[0]: export format 'mysql' is not one evalpack writes; use some of: sqlite, postgres, "
                "bird, spider"),
    ("[bird, bird]", "exports[1]: export format bird is listed twice"),
    ("sqlite", "exports: expected a list"),
])
def test_the_spec_refuses_exports_it_cannot_build_naming_the_key(value, message):
    text = (SCHEMAS / "finance.yaml").read_text() + f"\nexports: {value}\n"
    with pytest.raises(SpecError) as error:
        parse_spec(text, file="finance.yaml")
    assert message in str(error.value) and str(error.value).startswith("finance.yaml:")
    assert parse_spec((SCHEMAS / "finance.yaml").read_text() + "\nexports: [spider, sqlite]\n").exports == \
        ("sqlite", "spider")


# --------------------------------------------------------------------------- exports built with the pack


def exports_spec(tmp_path: Path, formats: str) -> Path:
    spec = tmp_path / "finance.yaml"
    spec.write_text((SCHEMAS / "finance.yaml").read_text().replace("rotations: 3", "rotations: 2")
                    + f"\nexports: {formats}\n")
    return spec


def subjects_of(pack: Path) -> list[dict]:
    envelope = json.loads((pack / ATTESTATION).read_text())
    return json.loads(base64.b64decode(envelope["payload"]))["subject"]


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_exports_in_the_spec_are_built_verified_attested_and_the_same_bytes_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    spec = exports_spec(tmp_path, "[sqlite, bird, spider]")
    first, second = tmp_path / "a" / "finance", tmp_path / "b" / "finance"
    build_pack(spec, first)
    build_pack(spec, second)
    ours, theirs = files_of(first), files_of(second)
    assert sorted(ours) == sorted(theirs) and [n for n in ours if ours[n] != theirs[n]] == []
    exported = sorted(n for n in ours if n.startswith("exports/"))
    assert "exports/sqlite/seed_7.sqlite" in exported and "exports/bird/dev.json" in exported
    assert "exports/spider/database/finance_seed_8/finance_seed_8.sqlite" in exported

    manifest = PackLayout(first).read_manifest()
    dialects = manifest["dialects"]
    assert dialects["formats"] == ["sqlite", "bird", "spider"] and "postgres" not in dialects
    assert dialects["sqlite"]["verified_on_engine"] and dialects["sqlite"]["drop_rate"] <= MAX_DROP_RATE
    assert dialects["sqlite"]["checked"] == manifest["questions"]["shipped"]  # finance has no holdout
    subjects = {s["name"] for s in subjects_of(first)}
    assert set(exported) <= subjects
    assert verify_pack(first, gold=False).ok

    total, accuracy = evaldata_accuracy("bird", first / "exports" / "bird", lambda case: case.expected.sql)
    assert total == 2 * dialects["sqlite"]["verified"] and accuracy == 1.0
    # a changed export is caught like any pack file
    (first / "exports" / "spider" / "dev.json").write_text("[]")
    assert not verify_pack(first, gold=False).ok


def test_a_postgres_export_needs_a_server_to_verify_it_or_the_build_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(DSN_ENV, raising=False)
    spec = exports_spec(tmp_path, "[postgres]")
    out = tmp_path / "out" / "finance"
    with pytest.raises(EvalpackError, match=f"exports: postgres: .*{DSN_ENV}"):
        build_pack(spec, out)
    assert not out.parent.exists()  # refused before anything was written


def test_a_postgres_export_built_with_a_server_is_verified_there(tmp_path, monkeypatch, postgres_dsn):
    monkeypatch.setenv(DSN_ENV, postgres_dsn)
    out = tmp_path / "out" / "finance"
    build_pack(exports_spec(tmp_path, "[postgres]"), out)
    postgres = PackLayout(out).read_manifest()["dialects"]["postgres"]
    assert postgres["verified_on_engine"] and postgres["drop_rate"] <= MAX_DROP_RATE
    assert re.fullmatch(r"PostgreSQL \d+\.\d+", postgres["engine"]), postgres["engine"]
    assert postgres_dsn not in (out / "manifest.json").read_text()  # the DSN is nowhere in the pack
    assert sorted(p.name for p in (out / "exports" / "postgres").iterdir()) == \
        ["questions.jsonl", "seed_7.sql", "seed_8.sql"]
    shutil.rmtree(out)


def test_dagster_builds_the_same_exports_through_the_same_engine_function(tmp_path, monkeypatch):
    from dagster import instance_for_test, materialize
    from test_dagster import resources

    from assets import ALL_ASSETS, ALL_CHECKS

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    spec = exports_spec(schemas, "[sqlite, spider]")
    cli = tmp_path / "cli" / "finance"
    build_pack(spec, cli)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("packs", ["finance"])
        result = materialize([*ALL_ASSETS, *ALL_CHECKS], instance=instance, partition_key="finance",
                             resources=resources(tmp_path, schemas), raise_on_error=False)
    assert result.success
    ours, theirs = files_of(tmp_path / "packs" / "finance"), files_of(cli)
    assert any(name.startswith("exports/spider/") for name in ours)
    assert sorted(ours) == sorted(theirs) and [n for n in ours if ours[n] != theirs[n]] in ([], [ATTESTATION])
    # the attestations attest the same files; they may differ in the git commit they name (a commit made between
    # the two builds, in a shared work tree) and in the invocation id derived from it
    assert subjects_of(tmp_path / "packs" / "finance") == subjects_of(cli)


def test_an_imported_question_gets_a_bird_level_and_its_links_are_foreign_keys():
    """An import has no difficulty per question and declares no keys, only links: BIRD's dev.json gets the level
    evalpack gives the gold SQL (BIRD's evaluation.py counts each level's questions), tables.json the links."""
    from evalpack.dialects.common import keys_of
    from evalpack.interop.exports import Source, difficulty_of, tables_entry

    assert difficulty_of({"gold_sql": "SELECT COUNT(*) FROM orders", "answer_type": "integer"}) == "simple"
    assert difficulty_of({"gold_sql": "SELECT 1", "answer_type": "integer", "difficulty": "moderate"}) == "moderate"
    keys = keys_of({"relationships": [{"child": "lineitem.l_orderkey", "parent": "orders.o_orderkey",
                                       "inferred": True}]})
    source = Source("tpch", (), (("seed_0", Path(".")),), {"orders": {"o_orderkey": "BIGINT"},
                                                          "lineitem": {"l_orderkey": "BIGINT"}}, keys, {})
    entry = tables_entry(source, "seed_0")
    assert entry["foreign_keys"] == [[2, 1]] and entry["column_names_original"][1:] == [[0, "o_orderkey"],
                                                                                         [1, "l_orderkey"]]


def test_a_build_with_exports_says_what_it_wrote_and_how_each_dialect_verified(tmp_path, capsys):
    from evalpack.cli import main as cli_main

    spec = tmp_path / "finance.yaml"
    spec.write_text((SCHEMAS / "finance.yaml").read_text() + "\nexports: [sqlite, spider]\n")
    assert cli_main(["build", str(spec), "-o", str(tmp_path / "pack")]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  exports: ")]
    entry = json.loads((tmp_path / "pack" / "manifest.json").read_text())["dialects"]["sqlite"]
    dropped = f", {entry['dropped']} dropped" if entry["dropped"] else ""  # a count of none is not said
    assert line == (f"  exports: sqlite, spider under exports/; sqlite: {entry['verified']} of {entry['checked']} "
                    f"verified on {entry['engine']}{dropped} (manifest.json -> dialects)")
    # the one question SQLite's REALs would answer otherwise (the ledger's balance) is left out by the near-miss
    # gate before the export (tests/dialects/test_dialects.py checks the export's rule on it)
    assert entry["dropped"] == 0 and (tmp_path / "pack" / "exports" / "spider").is_dir()


@pytest.mark.parametrize(("key", "name"), [("pack", "../../outside/pwned"), ("tables", "/etc/passwd"),
                                           ("tables", "../customers"), ("pack", ".hidden"), ("pack", 7)])
def test_names_from_a_manifest_that_would_leave_their_folder_are_refused(retail_pack, key, name):
    """The pack's name becomes BIRD's and Spider's database ids (folders and files) and each table's name its file:
    a downloaded pack naming itself '../../x' wrote outside -o, and a table named '/path' was read from anywhere."""
    from evalpack.interop.exports import Source

    layout = PackLayout(retail_pack)
    manifest = layout.read_manifest()
    if key == "pack":
        manifest["pack"] = name
    else:
        manifest["tables"] = {name: manifest["tables"]["orders"], **manifest["tables"]}
    with pytest.raises(EvalpackError, match=r"manifest\.json: (pack|tables): .* is not a plain name"):
        Source.of(retail_pack, [], manifest)
    assert Source.of(retail_pack, [], layout.read_manifest()).name == "retail"


def test_a_second_export_reuses_the_first_ones_sqlite_verdicts(finance_pack, tmp_path, monkeypatch, capsys):
    """Issue 55 point 8: each export reran every gold SQL in SQLite (retail: 113-159 s under load). The verdicts are
    remembered by the questions, the tables' bytes and the code: BIRD after Spider runs nothing again, and says the
    same; another pack's tables, or the cache turned off, verify again."""
    import evalpack.interop.exports as exports
    from evalpack.core.cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    ran = []
    real = exports.verify_in_dialects
    monkeypatch.setattr(exports, "verify_in_dialects", lambda *a, **k: ran.append(1) or real(*a, **k))
    reports = {}
    for fmt in ("spider", "bird", "sqlite"):
        assert main(["export", str(finance_pack), "--format", fmt, "-o", str(tmp_path / fmt)]) == 0
        reports[fmt] = json.loads((tmp_path / fmt / REPORT).read_text())["sqlite"]
    assert len(ran) == 1  # the first export verified; the two after it reused its verdicts
    assert reports["spider"] == reports["bird"] == reports["sqlite"] and reports["spider"]["verified"] > 0
    changed = copy_pack(finance_pack, tmp_path / "changed")  # a pack whose tables differ is verified afresh
    table = next((changed / "rotations").glob("*/tables/*.parquet"))
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT * FROM read_parquet('{table}') LIMIT 5) TO '{tmp_path / 'few.parquet'}' (FORMAT parquet)")
    shutil.copyfile(tmp_path / "few.parquet", table)
    source = exports.Source.of(changed, gold_questions(changed), json.loads((changed / "manifest.json").read_text()))
    exports.verify(source, ["sqlite"], None)
    assert len(ran) == 2
    monkeypatch.setenv(CACHE_ENV, "off")
    assert main(["export", str(finance_pack), "--format", "sqlite", "-o", str(tmp_path / "uncached")]) == 0
    assert len(ran) == 3
    capsys.readouterr()
