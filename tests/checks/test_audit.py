"""`evalpack audit PACK`: seals, empty results, drift, orphan dependence and ties, on imported and built packs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from test_import import SOURCES, SPAIN_FILMS, SPAIN_FIXED_SQL, SPAIN_LINKS, SPAIN_SQL, make_duckdb

from evalpack.checks.audit import audit_pack
from evalpack.cli import main
from evalpack.data.tables import connect_tables
from evalpack.interop.importer import import_pack

FILMS = [
    {"id": "spain", "question": "How many films are from Spain?", "sql": SPAIN_SQL, "answer": SPAIN_LINKS},
    {"id": "spain_fixed", "question": "How many films in the catalogue are from Spain?", "sql": SPAIN_FIXED_SQL,
     "answer": SPAIN_FILMS},
    {"id": "fewest", "question": "Which country has the fewest films?",
     "sql": "SELECT c.name FROM film_countries fc JOIN countries c ON c.id = fc.country_id "
            "GROUP BY c.name ORDER BY COUNT(*) LIMIT 1"},
    {"id": "fewest_count", "question": "How many films has the country with the fewest films?",
     "sql": "SELECT COUNT(*) AS n FROM film_countries GROUP BY country_id ORDER BY n LIMIT 1", "answer": 400},
    {"id": "none_1900", "question": "Which films came out in 1900?", "sql": "SELECT title FROM films WHERE year = 1900",
     "expected_empty": True},
    {"id": "empty", "question": "What is the title of the film from 1900?",
     "sql": "SELECT title FROM films WHERE year = 1900"},
    {"id": "no_year", "question": "What is the latest year before 1900?",
     "sql": "SELECT MAX(year) FROM films WHERE year < 1900"},
    {"id": "dangling", "question": "How many film links point at a film that is not in the catalogue?",
     "sql": "SELECT COUNT(*) FROM film_countries WHERE film_id NOT IN (SELECT id FROM films)", "answer": 1,
     "about_orphans": True},
    {"id": "director", "question": "Which director has the most films?"},
]


def write_questions(path: Path, items: list[dict]) -> Path:
    path.write_bytes(b"".join(json.dumps(i).encode() + b"\r\n" for i in items))
    return path


@pytest.fixture(scope="module")
def film_packs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("films")
    questions = write_questions(root / "films.jsonl", FILMS)
    return {kind: import_pack(questions, data=make(root), output=root / f"pack_{kind}").path
            for kind, make in SOURCES.items()}


@pytest.fixture
def film_pack(film_packs, tmp_path) -> Path:
    """A copy of the DuckDB-sourced pack that a test may change."""
    return Path(shutil.copytree(film_packs["duckdb"], tmp_path / "pack"))


def kinds(findings) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.question, []).append(f.kind)
    return out


@pytest.mark.parametrize("kind", list(SOURCES))
def test_orphan_audit_flags_the_count_through_the_link_table(film_packs, kind):
    findings = audit_pack(film_packs[kind])
    assert kinds(findings) == {"spain": ["orphans"], "fewest": ["tie"], "empty": ["empty"], "no_year": ["empty"]}
    spain = findings[0]
    assert (spain.evidence["as_written"], spain.evidence["without_orphans"]) == (SPAIN_LINKS, SPAIN_FILMS)
    assert spain.evidence["links"] == [{"child": "film_countries.film_id", "parent": "films.id",
                                        "source": "foreign_key" if kind == "sqlite" else "inferred",
                                        "orphan_rows": 1}]
    inferred = "" if kind == "sqlite" else ", a link inferred from the data"
    assert f"2662 as written, 2661 without them (1 film_countries row whose film_id matches no films.id{inferred})" \
        in spain.message
    assert spain.message.startswith('spain "How many films are from Spain?" (seed_0)')
    assert "correct the gold query (join the parent table)" in spain.action
    # the query the finding proposes returns the corrected answer on the pack's own tables
    con = duckdb.connect()
    for name in ("films", "film_countries", "countries"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM "
                    f"'{film_packs[kind] / 'rotations' / 'seed_0' / 'tables' / name}.parquet'")
    assert con.execute(spain.evidence["query_without_orphans"]).fetchall() == [(SPAIN_FILMS,)]


def test_the_corrected_query_passes(film_packs):
    findings = kinds(audit_pack(film_packs["duckdb"]))
    assert "spain_fixed" not in findings  # joins films: no orphan dependence, no drift, matches 2661
    records = {r["id"]: r for r in map(json.loads, (film_packs["duckdb"] / "questions.jsonl").read_text().splitlines())}
    assert records["spain_fixed"]["failed_checks"] == [] and records["spain_fixed"]["observed_answer"] == SPAIN_FILMS


def test_marked_questions_are_not_findings(film_packs):
    findings = kinds(audit_pack(film_packs["duckdb"]))
    assert "none_1900" not in findings  # empty, and marked expected_empty
    assert "dangling" not in findings  # about orphans, and marked so
    assert "fewest_count" not in findings  # a tie on the sort key, but both tied rows read 400


def test_tie_names_both_rows(film_packs):
    tie = next(f for f in audit_pack(film_packs["duckdb"]) if f.kind == "tie")
    assert tie.question == "fewest" and tie.evidence["limit"] == 1 and tie.evidence["sort_key"] == [400]
    assert sorted([tie.evidence["last_row_kept"], tie.evidence["first_row_cut"]]) == [["Germany"], ["Italy"]]
    assert "add a tie-breaker to ORDER BY" in tie.action


def test_one_row_holding_null_is_not_no_rows(film_packs):
    """Issue 21: a query returning one row holding NULL was described as returning no rows."""
    empty = {f.question: f.message for f in audit_pack(film_packs["duckdb"]) if f.kind == "empty"}
    assert empty["empty"].endswith("(seed_0): the gold query returns no rows")
    assert empty["no_year"].endswith("(seed_0): the gold query returns one row holding NULL")


def test_a_mismatch_names_the_first_differing_cell_and_its_types(film_pack):
    path = film_pack / "questions.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    assert record["id"] == "spain_fixed"
    record["expected_answer"] = str(SPAIN_FILMS)  # the number written as text
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    [mismatch] = [f for f in audit_pack(film_pack) if f.kind == "mismatch"]
    assert mismatch.message.endswith(f'the gold query returns {SPAIN_FILMS}, the expected answer is "{SPAIN_FILMS}": '
                                     f'the answer has "{SPAIN_FILMS}" (text), the query returns {SPAIN_FILMS} (integer)')
    assert mismatch.action.startswith("write the expected answer with the type the query returns")


def test_edited_question_is_caught_by_its_seal(film_pack):
    assert "seal" not in {f.kind for f in audit_pack(film_pack)}
    path = film_pack / "questions.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record["question"] = "How many films in the catalogue are from Spain or Portugal?"
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seal = [f for f in audit_pack(film_pack) if f.kind == "seal"]
    assert [f.question for f in seal] == ["spain_fixed"]
    assert seal[0].evidence["sealed"] == hashlib.sha256(b"How many films in the catalogue are from Spain?").hexdigest()
    assert seal[0].evidence["now"] == hashlib.sha256(record["question"].encode()).hexdigest()
    assert "as-received/" in seal[0].action


def test_drift_when_the_tables_change(film_pack):
    films = film_pack / "rotations" / "seed_0" / "tables" / "films.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM '{films}' WHERE id <> 777) TO '{films}.new' (FORMAT parquet)").fetchall()
    Path(f"{films}.new").replace(films)
    drift = {f.question: f for f in audit_pack(film_pack) if f.kind == "drift"}
    assert set(drift) == {"spain_fixed", "dangling"}  # film 777 was Spanish: one film fewer, one more dangling link
    assert (drift["dangling"].evidence["recorded"], drift["dangling"].evidence["now"]) == (1, 2)
    assert (drift["spain_fixed"].evidence["recorded"], drift["spain_fixed"].evidence["now"]) == (
        SPAIN_FILMS, SPAIN_FILMS - 1)
    assert "was 2661 at import and is 2660 now (the expected answer is 2661)" in drift["spain_fixed"].message


def test_as_received_file_is_checked(film_pack):
    received = film_pack / "as-received" / "films.jsonl"
    received.write_bytes(received.read_bytes().replace(b"\r\n", b"\n"))
    findings = [f for f in audit_pack(film_pack) if f.kind == "as_received"]
    assert len(findings) == 1 and findings[0].question == ""
    assert findings[0].evidence["now"] == hashlib.sha256(received.read_bytes()).hexdigest()


def test_audit_command_exit_codes_and_json(film_packs, tmp_path, capsys):
    report = tmp_path / "audit.json"
    assert main(["audit", str(film_packs["duckdb"]), "--json", str(report)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"audit {film_packs['duckdb']}: 4 findings in 9 questions (2 empty, 1 orphans, 1 tie)"
    assert out[1].startswith('  spain "How many films are from Spain?" (seed_0): the answer depends on orphan rows')
    assert out[2].startswith("      do: ")
    data = json.loads(report.read_text())
    assert data["counts"] == {"orphans": 1, "tie": 1, "empty": 2}
    assert data["findings"][0]["evidence"]["as_written"] == SPAIN_LINKS
    (tmp_path / "empty").mkdir()
    assert main(["audit", str(tmp_path / "empty")]) == 2
    assert "manifest.json: not found" in capsys.readouterr().err
    before = sorted(p.name for p in Path(film_packs["duckdb"]).iterdir())
    assert main(["audit", str(film_packs["duckdb"]), "--json", str(Path(film_packs["duckdb"]) / "audit.json")]) == 2
    assert "inside the pack" in capsys.readouterr().err  # its files are attested: one more fails its verification
    assert sorted(p.name for p in Path(film_packs["duckdb"]).iterdir()) == before


def test_a_clean_pack_exits_0(tmp_path, capsys):
    questions = write_questions(tmp_path / "q.jsonl", [FILMS[1]])
    pack = import_pack(questions, data=make_duckdb(tmp_path / "films.duckdb"), output=tmp_path / "pack").path
    assert main(["audit", str(pack)]) == 0
    assert capsys.readouterr().out == f"audit {pack}: no findings in 1 questions\n"


def test_built_pack_is_clean_and_declared_relationships_are_used(retail_pack, tmp_path):
    assert audit_pack(retail_pack) == []  # every shipped question passed the same checks at build time
    pack = Path(shutil.copytree(retail_pack, tmp_path / "retail"))
    question = "How many orders have a customer?"
    record = {"id": "q999", "question": question, "gold_sql": "SELECT COUNT(customer_id) FROM orders",
              "expected_answer": None, "answer_type": "integer", "round_decimals": None, "kind": "extra",
              "split": "dev", "question_sha256": hashlib.sha256(question.encode()).hexdigest(), "tags": []}
    with open(pack / "questions.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    findings = audit_pack(pack)
    assert {(f.question, f.kind) for f in findings} == {("q999", "orphans")}
    assert len(findings) == len(json.loads((pack / "manifest.json").read_text())["rotations"])
    for f in findings:  # the spec declares 30 orphans among the orders that count; those that do not count add theirs
        con = connect_tables(pack / "rotations" / f.rotation / "tables")
        orphans, uncounted = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE status IN ('cancelled', 'test')) FROM orders AS o WHERE "
            "customer_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM customers AS c WHERE c.customer_id = o.customer_id)"
        ).fetchone()
        assert orphans - uncounted == 30 and uncounted >= 1
        assert f.evidence["links"] == [{"child": "orders.customer_id", "parent": "customers.customer_id",
                                        "source": "declared", "orphan_rows": orphans}]
        assert f.evidence["as_written"] - f.evidence["without_orphans"] == orphans


def test_a_pack_whose_tables_link_outside_it_is_refused_before_anything_is_read(retail_pack, tmp_path, capsys):
    """The audit reads a pack's tables in its own process and may be given a pack from anywhere: a table that is a
    symlink to a file outside (whose values it would print as drift) or a FIFO (where it would wait forever) stops
    it with one line per file, exit 2. Edited files are the audit's to report, so the attestation is not required."""
    import os

    pack = Path(shutil.copytree(retail_pack, tmp_path / "pack"))
    outside = tmp_path / "outside.parquet"
    duckdb.sql("COPY (SELECT 'TOPSECRET' AS secret) TO '" + str(outside) + "' (FORMAT parquet)")
    table = pack / "rotations" / "seed_42" / "tables" / "orders.parquet"
    table.unlink()
    table.symlink_to(outside)
    fifo = pack / "rotations" / "seed_43" / "tables" / "customers.parquet"
    fifo.unlink()
    os.mkfifo(fifo)
    assert main(["audit", str(pack)]) == 2
    captured = capsys.readouterr()
    assert "TOPSECRET" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 2 and all("not a regular file" in line for line in lines), lines
    assert "seed_42/tables/orders.parquet" in lines[0] and "seed_43/tables/customers.parquet" in lines[1]
