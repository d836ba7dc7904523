"""`evalpack import`: questions from outside plus a database -> a pack that says what each answer key is worth.

The film catalogue below is the fixture of issue 9: 6,000 films, 5 countries, and a film_countries link table
in which one Spanish row points at film 6001, which was deleted. Counting Spanish films through the link table
gives 2,662; 2,661 Spanish films exist.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import evalpack
from evalpack.checks.audit import describe_link, infer_links
from evalpack.checks.verification import Link, gradable
from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.interop.importer import HELD_OUT_STEP, ImportRefused, import_pack
from evalpack.interop.received import parse_answer

SPAIN_LINKS, SPAIN_FILMS = 2662, 2661
SPAIN_AVG_YEAR = sum(1950 + i % 70 for i in range(1, SPAIN_FILMS + 1)) / SPAIN_FILMS

CATALOGUE = """
CREATE TABLE countries (id INTEGER PRIMARY KEY, name VARCHAR);
INSERT INTO countries VALUES (1, 'Spain'), (2, 'France'), (3, 'Portugal'), (4, 'Italy'), (5, 'Germany');
CREATE TABLE films (id INTEGER PRIMARY KEY, title VARCHAR, year INTEGER);
INSERT INTO films SELECT i, 'Film ' || i, 1950 + i % 70 FROM range(1, 6002) t(i);
CREATE TABLE film_countries (film_id INTEGER, country_id INTEGER REFERENCES countries(id));
INSERT INTO film_countries SELECT id, CASE WHEN id <= 2661 OR id = 6001 THEN 1 WHEN id <= 4500 THEN 2
    WHEN id <= 5200 THEN 3 WHEN id <= 5600 THEN 4 ELSE 5 END FROM films;
INSERT INTO film_countries SELECT id, 2 FROM films WHERE id <= 100;
DELETE FROM films WHERE id = 6001;
"""

SPAIN_SQL = ("SELECT COUNT(*) FROM film_countries fc JOIN countries c ON c.id = fc.country_id "
             "WHERE c.name = 'Spain'")
SPAIN_FIXED_SQL = ("SELECT COUNT(*) FROM film_countries fc JOIN films f ON f.id = fc.film_id "
                   "JOIN countries c ON c.id = fc.country_id WHERE c.name = 'Spain'")


def make_duckdb(path: Path) -> Path:
    """The catalogue as a DuckDB file; film_countries.country_id has a FOREIGN KEY, film_id none (it has an orphan)."""
    con = duckdb.connect(str(path))
    con.execute(CATALOGUE)
    con.close()
    return path


def _catalogue_rows() -> dict[str, list[tuple]]:
    con = duckdb.connect()
    con.execute(CATALOGUE)
    rows = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("countries", "films",
                                                                                    "film_countries")}
    con.close()
    return rows


def make_sqlite(path: Path) -> Path:
    """The catalogue as a SQLite file with both keys declared (SQLite does not enforce them by default)."""
    rows = _catalogue_rows()
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE countries (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE films (id INTEGER PRIMARY KEY, title TEXT, year INTEGER);
        CREATE TABLE film_countries (film_id INTEGER REFERENCES films(id), country_id INTEGER REFERENCES countries);
    """)
    con.executemany("INSERT INTO countries VALUES (?, ?)", rows["countries"])
    con.executemany("INSERT INTO films VALUES (?, ?, ?)", rows["films"])
    con.executemany("INSERT INTO film_countries VALUES (?, ?)", rows["film_countries"])
    con.commit()
    con.close()
    return path


def make_folder(path: Path) -> Path:
    """The catalogue as a folder: films and film_countries in Parquet, countries in CSV."""
    path.mkdir()
    con = duckdb.connect()
    con.execute(CATALOGUE)
    con.execute(f"COPY films TO '{path / 'films.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY film_countries TO '{path / 'film_countries.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY countries TO '{path / 'countries.csv'}' (FORMAT csv, HEADER true)")
    con.close()
    return path


SOURCES = {"duckdb": lambda d: make_duckdb(d / "films.duckdb"), "sqlite": lambda d: make_sqlite(d / "films.sqlite"),
           "folder": lambda d: make_folder(d / "tables")}

# One line per item, joined with CRLF. Lines 4, 11, 14 and 15 do not parse; line 8 is blank.
LINES = [
    json.dumps({"id": "spain", "question": "How many films are from Spain?", "sql": SPAIN_SQL,
                "answer": SPAIN_LINKS}),
    json.dumps({"id": "spain_fixed", "question": "How many films in the catalogue are from Spain?",
                "sql": SPAIN_FIXED_SQL, "answer": SPAIN_FILMS,
                "check_sql": "SELECT COUNT(*) FROM films WHERE id IN (SELECT film_id FROM film_countries "
                             "WHERE country_id = (SELECT id FROM countries WHERE name = 'Spain'))"}),
    json.dumps({"id": "france", "question": "How many films are from France?",
                "sql": "SELECT COUNT(*) FROM film_countries WHERE country_id = 2", "answer": 1900}),
    '{"id": "broken", "question": "How many films came out in 1999?", "answer": 86',
    json.dumps({"id": "movies", "question": "How many movies are there?", "sql": "SELECT COUNT(*) FROM movies",
                "answer": 6000}),
    json.dumps({"id": "countries", "question": "How many countries are in the catalogue?", "answer": 5}),
    json.dumps({"id": "latest", "question": "What is the most recent release year?",
                "sql": "SELECT MAX(year) FROM films"}),
    "",
    json.dumps({"id": "decades", "question": "Describe how the catalogue spreads over the decades.",
                "criteria": "Names every decade from the 1950s to the 2010s and says the spread is even"}),
    json.dumps({"id": "director", "question": "Which director has the most films?"}),
    "[1, 2]",
    json.dumps({"id": "none_1900", "question": "Which films came out in 1900?",
                "sql": "SELECT title FROM films WHERE year = 1900", "expected_empty": True}),
    json.dumps({"id": "empty", "question": "What is the title of the film from 1900?",
                "sql": "SELECT title FROM films WHERE year = 1900", "answer": "none"}),
    json.dumps({"id": "spain", "question": "How many Spanish films are there?"}),
    json.dumps({"id": "noq", "sql": "SELECT 1", "answer": 1}),
    '{"question": "What is the average release year of Spanish films? Round to 2 decimals.", '
    '"sql": "SELECT AVG(f.year) FROM films f JOIN film_countries fc ON fc.film_id = f.id WHERE fc.country_id = 1", '
    '"check_sql": "SELECT SUM(year) * 1.0 / COUNT(*) FROM films WHERE id IN '
    '(SELECT film_id FROM film_countries WHERE country_id = 1)", '
    f'"answer": {round(SPAIN_AVG_YEAR, 2):.2f}}}',
]
RECEIVED = ("\r\n".join(LINES) + "\r\n").encode("utf-8")
# Lines 3, 5 and 13 pair a query with an answer it does not return (1939 films, not 1900), a query on a table that
# does not exist, and a query with no rows with the answer "none": `evalpack verify` would reject a pack holding them,
# so that file is not imported (test_a_pack_verify_would_reject_is_not_written). The file imported below has them
# blank, so that every other line keeps its number.
REJECTED = {3: "france", 5: "movies", 13: "empty"}
ACCEPTED_LINES = ["" if i in REJECTED else line for i, line in enumerate(LINES, 1)]
QUESTIONS = ("\r\n".join(ACCEPTED_LINES) + "\r\n").encode("utf-8")

STATUS = {"spain": "provisional", "spain_fixed": "scorable", "countries": "provisional", "latest": "provisional",
          "decades": "criteria", "director": "no_golden", "none_1900": "provisional", "q008": "scorable"}

SUMMARY = ("8 cases from 12 lines: 2 scorable now; 4 provisional (1 with their query, 1 a number alone, "
           "2 nothing to compare yet); 1 criteria; 1 no golden; 4 lines did not parse (lines 4, 11, 14, 15)")
FILM_LINK = ("  film_countries.film_id -> films.id: inferred from names and data; 1 row has no parent (0.0164 % of "
             "6101 rows): film_id names films.id; both hold integers; 6000 of 6001 distinct values are found there")

REPORT = [
    SUMMARY,
    "did not parse (not in the pack; fix them in the file and import again):",
    f"  line 4: not JSON (Expecting ',' delimiter at column {len(LINES[3]) + 1})",  # the line ends too early
    "  line 11: a JSON list, not an object",
    "  line 14: id 'spain' is already used on line 1",
    "  line 15: no question text (a `question` field)",
    "links the orphan check follows (1 from the database's foreign keys, 1 inferred):",
    "  film_countries.country_id -> countries.id: a foreign key of the database; every row has its parent",
    FILM_LINK,
    "what turns provisional into scorable: the gold query returns the expected answer, a second derivation agrees "
    "(check_sql: a query written independently that returns the same answer), and the golden checks pass (a "
    "non-empty result, no dependence on orphan rows, no tie at LIMIT); then import again:",
    "  spain (line 1, with their query): its query returns the authored answer 2662; without orphan rows it returns "
    "2661 (1 film_countries row whose film_id matches no films.id, a link inferred from the data); add check_sql (a "
    "second query, written independently, that returns the same answer)",
    "  countries (line 6, a number alone): a number alone (5): add the gold query that returns it, and a check_sql",
    "  latest (line 7, nothing to compare yet): its query returns 2019; nothing to compare it with yet: add the "
    "expected answer, derived independently of the query, and a check_sql",
    "  none_1900 (line 12, nothing to compare yet): its query returns no rows; nothing to compare it with yet: add "
    "the expected answer, derived independently of the query, and a check_sql",
]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("catalogue")
    return {kind: make(root) for kind, make in SOURCES.items()}


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("received") / "customer_questions.jsonl"
    path.write_bytes(QUESTIONS)
    return path


@pytest.fixture
def rejected_file(tmp_path) -> Path:
    """The file as it first arrived, with the three lines verify would reject."""
    path = tmp_path / "received" / "customer_questions.jsonl"
    path.parent.mkdir()
    path.write_bytes(RECEIVED)
    return path


@pytest.fixture(scope="module")
def packs(sources, questions_file, tmp_path_factory) -> dict[str, Path]:
    """The questions imported over each form of the catalogue (read-only: copy before changing)."""
    root = tmp_path_factory.mktemp("imported")
    return {kind: import_pack(questions_file, data=data, output=root / kind).path for kind, data in sources.items()}


def records(pack: Path) -> dict[str, dict]:
    lines = (pack / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def manifest(pack: Path) -> dict:
    return json.loads((pack / "manifest.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the report and the classification


def test_report_is_the_issue_style_and_exact(sources, questions_file, tmp_path, capsys):
    code = main(["import", str(questions_file), "--data", str(sources["duckdb"]), "-o", str(tmp_path / "pack")])
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"imported customer_questions.jsonl with films.duckdb (3 tables) into {tmp_path / 'pack'}"
    assert out[1:] == REPORT
    assert manifest(tmp_path / "pack")["report"] == REPORT


@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_item_is_classified_by_what_arrived_with_it(packs, kind):
    recs = records(packs[kind])
    assert {i: r["status"] for i, r in recs.items()} == STATUS
    assert list(recs) == list(STATUS)  # file order, nothing dropped, nothing invented

    spain = recs["spain"]  # a query and a number that agree: verified by the query, still provisional
    assert (spain["verified_by"], spain["observed_answer"], spain["authored_answer"]) == ("authored_query", 2662, 2662)
    assert spain["failed_checks"] == ["orphan_independent"]
    fixed = recs["spain_fixed"]  # ... and with a second derivation and clean golden checks: scorable
    assert (fixed["verified_by"], fixed["check_answer"], fixed["failed_checks"]) == (
        "authored_query+check_sql", SPAIN_FILMS, [])
    countries = recs["countries"]  # a number alone
    assert (countries["gold_sql"], countries["expected_answer"], countries["answer_type"]) == (None, 5, "integer")
    latest = recs["latest"]  # a query alone: what it returned is recorded, nothing to compare it with
    assert (latest["expected_answer"], latest["observed_answer"]) == (None, 2019)
    assert recs["decades"]["criteria"].startswith("Names every decade") and recs["decades"]["gold_sql"] is None
    assert recs["director"]["gold_sql"] is None and recs["director"]["expected_answer"] is None
    assert recs["none_1900"]["failed_checks"] == []  # empty, and marked expected_empty
    avg = recs["q008"]  # an item without an id gets one by position; the answer's digits give round_decimals
    assert (avg["answer_type"], avg["round_decimals"], avg["expected_answer"]) == ("number", 2, 1984.49)
    assert avg["source_line"] == 16


@pytest.mark.parametrize("kind", list(SOURCES))
def test_questions_are_sealed_and_never_edited(packs, kind):
    for r in records(packs[kind]).values():
        assert r["question"] == json.loads(ACCEPTED_LINES[r["source_line"] - 1])["question"]  # as received
        assert r["question_sha256"] == hashlib.sha256(r["question"].encode("utf-8")).hexdigest()
        assert r["kind"] == "imported" and r["split"] == "dev"


@pytest.mark.parametrize("kind", list(SOURCES))
def test_as_received_is_byte_identical_and_hashed(packs, questions_file, kind):
    pack = packs[kind]
    copy = pack / "as-received" / "customer_questions.jsonl"
    assert copy.read_bytes() == questions_file.read_bytes() == QUESTIONS
    assert b"\r\n" in copy.read_bytes()
    source = manifest(pack)["source"]["questions"]
    assert source == {"file": "customer_questions.jsonl", "as_received": "as-received/customer_questions.jsonl",
                      "sha256": hashlib.sha256(QUESTIONS).hexdigest(), "bytes": len(QUESTIONS), "format": "jsonl",
                      "lines": 12}


@pytest.mark.parametrize("kind", list(SOURCES))
def test_pack_layout_tables_and_relationships(packs, kind):
    pack = packs[kind]
    for name in ("questions.jsonl", "certificate.json", "manifest.json", "verify.py", "attestation.intoto.json"):
        assert (pack / name).is_file(), name
    tables = pack / "rotations" / "seed_0" / "tables"
    assert sorted(p.name for p in tables.iterdir()) == sorted(
        f"{t}.{ext}" for t in ("countries", "films", "film_countries") for ext in ("parquet", "csv"))
    m = manifest(pack)
    assert m["rotations"] == ["seed_0"] and m["seeds"] == [0]
    assert {t: v["rows"]["seed_0"] for t, v in m["tables"].items()} == {"countries": 5, "films": 6000,
                                                                        "film_countries": 6101}
    con = duckdb.connect()
    assert con.execute(f"SELECT COUNT(*) FROM read_csv('{tables / 'films.csv'}')").fetchone()[0] == 6000
    rels = {(r["child"], r["parent"]): (r["source"], r["orphan_rows"]) for r in m["relationships"]}
    assert all(r["inferred"] is (r["source"] == "inferred") for r in m["relationships"])
    expected = {"duckdb": {("film_countries.country_id", "countries.id"): ("foreign_key", 0),
                           ("film_countries.film_id", "films.id"): ("inferred", 1)},
                "sqlite": {("film_countries.film_id", "films.id"): ("foreign_key", 1),
                           ("film_countries.country_id", "countries.id"): ("foreign_key", 0)},
                "folder": {("film_countries.film_id", "films.id"): ("inferred", 1),  # names, types and values
                           ("film_countries.country_id", "countries.id"): ("inferred", 0)}}
    assert rels == expected[kind]
    assert m["questions"]["by_status"] == {"scorable": 2, "provisional": 4, "criteria": 1, "no_golden": 1}
    assert m["unparsed"] == [{"line": 4, "error": REPORT[2].split(": ", 1)[1]},
                             {"line": 11, "error": "a JSON list, not an object"},
                             {"line": 14, "error": "id 'spain' is already used on line 1"},
                             {"line": 15, "error": "no question text (a `question` field)"}]
    cert = json.loads((pack / "certificate.json").read_text())
    by_id = {q["id"]: q["results"]["seed_0"] for q in cert["questions"]}
    assert by_id["spain"]["checks"]["orphan_independent"] is False and by_id["spain"]["observed"] == 2662
    assert cert["all_match"] is True


def test_attestation_covers_the_received_file(packs):
    from evalpack.pack.attest import verify_pack

    result = verify_pack(packs["duckdb"], gold=False)
    assert result.ok


# --------------------------------------------------------------------------- a pack verify would reject is not written


def _debris(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_pack_verify_would_reject_is_not_written(sources, rejected_file, capsys):
    """Issue 21: `evalpack import` exited 0 with a pack that `evalpack verify` then rejected (gold SQL on a table
    that does not exist). Now it verifies what it would write, and writes nothing that verify rejects (exit 1)."""
    out_dir = rejected_file.parent.parent / "pack"
    code = main(["import", str(rejected_file), "--data", str(sources["duckdb"]), "-o", str(out_dir)])
    assert code == 1
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert out[0] == "not imported: customer_questions.jsonl with films.duckdb"
    assert out[1].startswith("11 cases from 15 lines: 2 scorable now; 7 provisional")  # the report, as always
    assert err[0] == (f"evalpack: error: {rejected_file}: not imported: `evalpack verify` would reject this pack (3 "
                      f"problems), so nothing was written to {out_dir} and customer_questions.jsonl is left as it "
                      "was; correct these in the file and import again:")
    assert err[1] == ("  france (line 3): its query returns 1939, the authored answer is 1900; the answer has 1900 "
                      "(integer), the query returns 1939 (integer): decide which is right and correct the other (or "
                      "leave out the query or the answer until both agree)")
    assert err[2].startswith("  movies (line 5): the query fails: Catalog Error: Table with name movies does not "
                             "exist!") and err[2].endswith("(or leave the answer without its query)")
    assert err[3] == ('  empty (line 13): its query returns no rows, the authored answer is "none"; the query returns '
                      'no rows; the answer ("none") is one value, one row with one column: decide which is right and '
                      "correct the other; it returns no rows (mark it expected_empty if that is the answer) (or leave "
                      "out the query or the answer until both agree)")
    assert len(err) == 4
    assert not out_dir.exists() and _debris(out_dir.parent) == []  # nothing written, no staging folder left
    assert rejected_file.read_bytes() == RECEIVED  # the file as received is kept as it was


def test_a_refused_import_leaves_the_pack_it_would_replace(sources, questions_file, rejected_file, capsys):
    out_dir = rejected_file.parent.parent / "pack"
    assert main(["import", str(questions_file), "--data", str(sources["sqlite"]), "-o", str(out_dir)]) == 0
    before = {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["import", str(rejected_file), "--data", str(sources["sqlite"]), "-o", str(out_dir), "--force"]) == 1
    assert "nothing was written to" in capsys.readouterr().err
    assert {p.relative_to(out_dir): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()} == before
    with pytest.raises(ImportRefused) as refused:
        import_pack(rejected_file, data=sources["sqlite"], output=out_dir, force=True)
    assert refused.value.exit_code == 1 and [r.split(" ")[0] for r in refused.value.reasons] == [
        "france", "movies", "empty"]


# --------------------------------------------------------------------------- answers keep their types


SHARES_SQL = "SELECT name, CAST(id * 1.5 AS DECIMAL(6, 2)) AS share FROM countries WHERE id <= 3 ORDER BY id"


def test_decimals_in_a_result_set_stay_numbers(sources, tmp_path):
    """Issue 21: every non-integer number of a result-set answer became text (532348211.65 as "532348211.65", 0.0 as
    "0.0"), so answers did not match their own gold SQL. Read with its digits, each stays the number it is."""
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "shares", "question": "What share has each of the first three countries?",
                                "sql": SHARES_SQL}).rstrip("}") + ', "answer": [["Spain", 1.50], ["France", 3.00], '
                    '["Portugal", 4.5]]}\n' + json.dumps({
                        "id": "zero", "question": "What is the smallest year gap?", "answer_type": "rows",
                        "sql": "SELECT 0.0 AS gap, NULL AS nothing, DATE '1995-03-11' AS day"}).rstrip("}")
                    + ', "answer": [[0.0, null, "1995-03-11"]]}\n', encoding="utf-8")
    result = import_pack(path, data=sources["duckdb"], output=tmp_path / "pack")
    shares, zero = result.records
    assert shares["expected_answer"] == [["Spain", 1.5], ["France", 3.0], ["Portugal", 4.5]]
    assert all(isinstance(row[1], float) for row in shares["expected_answer"])
    assert shares["authored_answer"] == shares["expected_answer"] == shares["observed_answer"]
    assert zero["expected_answer"] == [[0.0, None, "1995-03-11"]] and isinstance(zero["expected_answer"][0][0], float)
    assert (shares["verified_by"], zero["verified_by"]) == ("authored_query", "authored_query")
    written = (tmp_path / "pack" / "questions.jsonl").read_text(encoding="utf-8")
    assert '"expected_answer":[["Spain",1.5],["France",3.0],["Portugal",4.5]]' in written


def test_a_mismatch_shows_the_first_differing_cell_with_both_types(sources, tmp_path, capsys):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join([
        json.dumps({"id": "as_text", "question": "What share has each of the first three countries?",
                    "sql": SHARES_SQL, "answer": [["Spain", "1.50"], ["France", "3.00"], ["Portugal", "4.50"]]}),
        json.dumps({"id": "wrong", "question": "And as numbers?", "sql": SHARES_SQL,
                    "answer": [["Spain", 1.5], ["France", 3.5], ["Portugal", 4.5]]}),
    ]) + "\n", encoding="utf-8")
    assert main(["import", str(path), "--data", str(sources["duckdb"]), "-o", str(tmp_path / "pack")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1] == ('  as_text (line 1): its query returns [["Spain", 1.5], ["France", 3.0], ["Portugal", 4.5]], the '
                      'authored answer is [["Spain", "1.50"], ["France", "3.00"], ["Portugal", "4.50"]]; row 1, column 2: '
                      'the answer has "1.50" (text), the query returns 1.50 (decimal): the values read the same and '
                      "differ in type only: write the answer with the type the query returns (or leave out the query "
                      "or the answer until both agree)")
    assert err[2].startswith('  wrong (line 2): its query returns [["Spain", 1.5], ["France", 3.0], ["Portugal", 4.5]], '
                             'the authored answer is [["Spain", 1.5], ["France", 3.5], ["Portugal", 4.5]]; row 2, column 2: '
                             "the answer has 3.5 (number), the query returns 3.00 (decimal): decide which is right")
    assert not (tmp_path / "pack").exists()


# --------------------------------------------------------------------------- one row holding NULL is not no rows


def test_one_row_holding_null_and_no_rows_are_told_apart(sources, tmp_path):
    """Issue 21: a query returning one row holding NULL was described as returning no rows."""
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in [
        {"id": "null_row", "question": "What is the latest year before 1900?",
         "sql": "SELECT MAX(year) FROM films WHERE year < 1900"},
        {"id": "no_rows", "question": "Which films came out before 1900?",
         "sql": "SELECT title FROM films WHERE year < 1900"},
        {"id": "null_cols", "question": "Which first and last year before 1900?",
         "sql": "SELECT MIN(year), MAX(year) FROM films WHERE year < 1900"},
    ]) + "\n", encoding="utf-8")
    result = import_pack(path, data=sources["duckdb"], output=tmp_path / "pack")
    steps = {c["id"]: c["next_step"] for c in result.manifest["classification"]}
    assert steps["null_row"] == ("its query returns one row holding NULL; nothing to compare it with yet: add the "
                                 "expected answer, derived independently of the query, and a check_sql; it returns "
                                 "one row holding NULL (mark it expected_empty if that is the answer)")
    assert steps["no_rows"].startswith("its query returns no rows; ") and steps["no_rows"].endswith(
        "; it returns no rows (mark it expected_empty if that is the answer)")
    assert "it returns one row holding only NULL (2 columns)" in steps["null_cols"]
    assert [r["failed_checks"] for r in result.records] == [["non_empty"]] * 3


# --------------------------------------------------------------------------- links


def _links(sql: str) -> set[tuple[str, str]]:
    con = duckdb.connect()
    con.execute(sql)
    found = {(e["child"], e["parent"]) for e in infer_links(con)}
    con.close()
    return found


def test_values_that_happen_to_occur_in_a_key_make_no_link():
    """Issue 21: a nation key (0..24) was linked to customer, part and supplier keys because 24 of its 25 values
    occur there. A link needs a name that names the key, the same type, and the values."""
    assert _links("""
        CREATE TABLE nation AS SELECT i AS n_nationkey, 'N' || i AS n_name FROM range(25) t(i);
        CREATE TABLE customer AS SELECT i AS c_custkey, i % 25 AS c_nationkey FROM range(1, 1501) t(i);
        CREATE TABLE supplier AS SELECT i AS s_suppkey, i % 25 AS s_nationkey FROM range(1, 101) t(i);
    """) == {("customer.c_nationkey", "nation.n_nationkey"), ("supplier.s_nationkey", "nation.n_nationkey")}


def test_a_table_is_never_linked_to_itself_nor_across_types():
    assert _links("""
        CREATE TABLE categories AS SELECT i AS id, CASE WHEN i > 1 THEN i - 1 END AS category_id FROM range(1, 50) t(i);
        CREATE TABLE products AS SELECT i AS id, CAST(i % 49 + 1 AS VARCHAR) AS category_id FROM range(1, 200) t(i);
        CREATE TABLE orders AS SELECT i AS id, i % 199 + 1 AS product_id FROM range(1, 900) t(i);
    """) == {("orders.product_id", "products.id")}  # categories.category_id is itself; products' is text


def test_an_inferred_link_with_orphans_states_its_rate():
    con = duckdb.connect()
    con.execute("CREATE TABLE films AS SELECT i AS id FROM range(1, 101) t(i);"
                "CREATE TABLE reviews AS SELECT i % 101 + 1 AS film_id FROM range(1000) t(i)")  # 101 has no film
    [entry] = infer_links(con)
    assert (entry["child"], entry["parent"], entry["inferred"]) == ("reviews.film_id", "films.id", True)
    assert (entry["missing_values"], entry["orphan_rows"], entry["rows"]) == (1, 9, 1000)
    assert describe_link(entry) == ("reviews.film_id -> films.id: inferred from names and data; 9 rows have no "
                                    "parent (0.9 % of 1000 rows): film_id names films.id; both hold integers; 100 "
                                    "of 101 distinct values are found there")
    con.execute("CREATE OR REPLACE TABLE reviews AS SELECT i % 120 + 1 AS film_id FROM range(1000) t(i)")
    assert infer_links(con) == []  # 20 of 120 values have no film: not a link
    con.close()


# --------------------------------------------------------------------------- other input forms


def test_csv_questions_with_crlf_and_multiline_sql(sources, tmp_path, capsys):
    text = ("id,question,sql,answer\r\n"
            "spain,How many films are from Spain?,\"SELECT COUNT(*)\r\nFROM film_countries fc JOIN countries c ON "
            "c.id = fc.country_id\r\nWHERE c.name = 'Spain'\",2662\r\n"
            "countries,How many countries are there?,,5\r\n"
            "bad,too,many,fields,here\r\n"
            "director,Which director has the most films?,,\r\n")
    path = tmp_path / "sheet.csv"
    path.write_bytes(text.encode("utf-8"))
    assert main(["import", str(path), "--data", str(sources["sqlite"]), "-o", str(tmp_path / "pack")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("3 cases from 4 lines: 0 scorable now; 2 provisional (1 with their query, 1 a number alone); "
                      "1 no golden; 1 line did not parse (line 6)")
    assert out[3] == "  line 6: 5 fields where the header has 4"
    recs = records(tmp_path / "pack")
    assert recs["spain"]["observed_answer"] == 2662 and recs["spain"]["expected_answer"] == 2662
    assert recs["spain"]["gold_sql"].count("\r\n") == 2  # the query exactly as received
    assert recs["countries"]["answer_type"] == "integer" and recs["director"]["status"] == "no_golden"
    assert (tmp_path / "pack" / "as-received" / "sheet.csv").read_bytes() == text.encode("utf-8")


def test_csv_without_a_question_column_exits_2_naming_the_file(sources, tmp_path, capsys):
    path = tmp_path / "export.csv"
    path.write_bytes(b"id,text,sql\r\n1,How many films?,SELECT 1\r\n")
    code = main(["import", str(path), "--data", str(sources["duckdb"]), "-o", str(tmp_path / "pack")])
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "no question column" in err and "columns: id, text, sql" in err
    assert not (tmp_path / "pack").exists() and list(tmp_path.iterdir()) == [path]


def test_json_array_reports_items_by_line(sources, tmp_path):
    path = tmp_path / "items.json"
    path.write_text('{"questions": [\n  {"question": "How many films are there?", "sql": "SELECT COUNT(*) FROM films",'
                    ' "answer": 6000},\n  "just text",\n  {"question": "And countries?"}\n]}\n', encoding="utf-8")
    result = import_pack(path, data=sources["folder"], output=tmp_path / "pack")
    assert result.report[0] == ("2 cases from 3 items: 0 scorable now; 1 provisional (1 with their query); "
                                "1 no golden; 1 item did not parse (line 3)")
    assert [r["source_line"] for r in result.records] == [2, 4]
    assert result.records[0]["verified_by"] == "authored_query"


def test_broken_json_document_exits_2_with_its_line(sources, tmp_path):
    path = tmp_path / "items.json"
    path.write_text('[\n  {"question": "a"},\n  {"question": "b"\n]\n', encoding="utf-8")
    with pytest.raises(EvalpackError, match=r"items.json: line 4 column 1: not valid JSON"):
        import_pack(path, data=sources["duckdb"], output=tmp_path / "pack")


def test_malformed_fields_are_reported_not_guessed(sources, tmp_path):
    path = tmp_path / "q.jsonl"
    path_outside = tmp_path / "secret.txt"
    path_outside.write_text("not for the pack")
    path.write_text("\n".join([
        json.dumps({"question": "Two queries?", "sql": "SELECT 1", "query": "SELECT 2"}),
        json.dumps({"question": "Odd type?", "answer": 1, "answer_type": "float"}),
        json.dumps({"question": 42}),
        json.dumps({"question": "A list of rows?", "sql": "SELECT name FROM countries ORDER BY id LIMIT 2",
                    "answer": ["Spain", "France"]}),
        json.dumps({"question": "Write a file?", "sql": f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'"}),
        json.dumps({"question": "Read a file?", "sql": f"SELECT COUNT(*) FROM read_text('{path_outside}')"}),
    ]) + "\n", encoding="utf-8")
    result = import_pack(path, data=sources["duckdb"], output=tmp_path / "pack")
    assert [(u.line, u.error) for u in result.unparsed] == [
        (1, "both `sql` and `query` give the gold_sql; keep one"),
        (2, "`answer_type` must be one of number, integer, string, rows, not 'float'"),
        (3, "`question` must be a string, not a int"),
    ]
    rows = result.records[0]
    assert (rows["answer_type"], rows["expected_answer"], rows["verified_by"]) == (
        "rows", [["Spain"], ["France"]], "authored_query")
    # SQL that arrives from outside runs in verify.py's sandbox: no file is written or read
    write, read = result.records[1], result.records[2]
    assert write["error"].startswith("the query fails: rejected: only a query") and not (tmp_path / "x.csv").exists()
    assert read["error"].startswith("the query fails: ") and read["observed_answer"] is None


def test_bad_data_and_existing_output_exit_2(sources, questions_file, tmp_path, capsys):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database")
    assert main(["import", str(questions_file), "--data", str(junk), "-o", str(tmp_path / "a")]) == 2
    assert "not a DuckDB or SQLite database file" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    assert main(["import", str(questions_file), "--data", str(sources["duckdb"]), "-o", str(tmp_path / "b")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["import", str(questions_file), "--data", str(sources["duckdb"]), "-o", str(tmp_path / "b"),
                 "--force"]) == 0


def test_a_duckdb_file_s_views_read_nothing_outside_it(tmp_path, capsys):
    """A view is SQL from outside that runs when it is read: one reading a local file refuses the import (exit 2, one
    line, nothing written, the file's content nowhere); one over the file's own tables is imported with its rows,
    and its HUGEINT and UUID columns keep the types a direct copy gives."""
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-import-me")
    data = tmp_path / "views.duckdb"
    with duckdb.connect(str(data)) as con:
        con.execute("CREATE TABLE t AS SELECT i AS id, i::HUGEINT AS big, uuid() AS u FROM range(5) r(i)")
        con.execute("CREATE VIEW doubled AS SELECT id * 2 AS twice FROM t")
    received = tmp_path / "q.jsonl"
    received.write_text(json.dumps({"question": "How many?", "sql": "SELECT SUM(twice) FROM doubled", "answer": 20})
                        + "\n")
    pack = tmp_path / "pack"
    assert main(["import", str(received), "--data", str(data), "-o", str(pack)]) == 0, capsys.readouterr().err
    tables = pack / "rotations" / "seed_0" / "tables"
    with duckdb.connect() as con:
        assert con.execute(f"SELECT SUM(twice) FROM '{tables / 'doubled.parquet'}'").fetchall() == [(20,)]
        types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                                 f"'{tables / 't.parquet'}')").fetchall())
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT * FROM range(1) r(i), (SELECT 1::HUGEINT AS big, uuid() AS u)) TO "
                    f"'{tmp_path / 'direct.parquet'}' (FORMAT parquet)")
        direct = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                                  f"'{tmp_path / 'direct.parquet'}')").fetchall())
    assert (types["big"], types["u"]) == (direct["big"], direct["u"])
    capsys.readouterr()
    with duckdb.connect(str(data)) as con:
        con.execute(f"CREATE VIEW leak AS SELECT * FROM read_text('{secret}')")
    leaked = tmp_path / "leaked"
    assert main(["import", str(received), "--data", str(data), "-o", str(leaked)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read view leak" in err and "file system operations are disabled" in err
    assert not leaked.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".leaked")]


@pytest.mark.parametrize(("text", "args", "message"), [
    ('[\n  {"question": "a"},\n  {"question": "b"\n]\n', [], "items.json: line 4 column 1: not valid JSON"),
    ('[\n{"sql": "SELECT 1"},\n7]\n', [], "items.json: no question could be read from 2 items (line 2: no question "
                                          "text"),
    ('[{"question": "a"}]\n', ["--holdout", "1.5"], "--holdout 1.5: a fraction between 0 and 1"),
    ('[{"question": "a"}]\n', ["--data", "missing.duckdb"], "missing.duckdb: not found; --data takes"),
])
def test_bad_input_exits_2_with_its_message_and_writes_nothing(sources, tmp_path, capsys, monkeypatch, text, args,
                                                              message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.json").write_text(text, encoding="utf-8")
    data = [] if "--data" in args else ["--data", str(sources["duckdb"])]
    assert main(["import", "items.json", *data, *args, "-o", "pack"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evalpack: error: ") and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.json"]


def test_split_is_frozen_from_file_and_question_hashes(sources, questions_file, tmp_path):
    a = import_pack(questions_file, data=sources["duckdb"], output=tmp_path / "a", holdout=0.3)
    b = import_pack(questions_file, data=sources["sqlite"], output=tmp_path / "b", holdout=0.3)
    splits = [r["split"] for r in a.records]
    assert splits == [r["split"] for r in b.records]  # the same file gives the same split, whatever the database
    assert splits.count("holdout") == 2  # round(0.3 * 8)
    ranked = sorted(a.records, key=lambda r: hashlib.sha256(
        f"{hashlib.sha256(QUESTIONS).hexdigest()}:{r['question_sha256']}:{r['id']}".encode()).hexdigest())
    assert {r["id"] for r in ranked[:2]} == {r["id"] for r in a.records if r["split"] == "holdout"}
    with pytest.raises(EvalpackError, match="--holdout 1.5"):
        import_pack(questions_file, data=sources["duckdb"], output=tmp_path / "c", holdout=1.5)


def test_an_imported_holdout_keeps_its_answers_out_of_the_pack(sources, questions_file, tmp_path, capsys):
    """--holdout seals as a build does: a holdout question's gold SQL and answer, and everything the import found
    that shows them (what arrived, what the query returned, the next step, the file as received), are in the answer
    key beside the pack and in no file of it; the key scores them, and the pack alone scores only the rest."""
    pack = tmp_path / "pack"
    result = import_pack(questions_file, data=sources["duckdb"], output=pack, holdout=0.3)
    key = tmp_path / "pack.holdout-key"
    entries = [json.loads(line) for line in (key / "holdout.jsonl").read_text().splitlines()]
    held = {e["id"] for e in entries}
    assert held == {r["id"] for r in result.records if r["split"] == "holdout"} and len(held) == 2
    assert (key / questions_file.name).read_bytes() == QUESTIONS and not (pack / "as-received").exists()
    secrets = [json.dumps(e[f]) for e in entries for f in ("gold_sql", "expected_answer", "authored_answer",
                                                           "observed_answer") if e[f] is not None]
    assert secrets and all(len(text) > 2 for text in secrets)
    files = {p.relative_to(pack).as_posix(): p for p in pack.rglob("*") if p.is_file() and "rotations" not in p.parts}
    texts = {name: path.read_text(encoding="utf-8") for name, path in files.items() if path.suffix != ".parquet"}
    texts.update({name: json.dumps(pq.read_table(path).to_pylist(), default=str) for name, path in files.items()
                  if path.suffix == ".parquet"})
    for text in secrets:
        body = text.strip('"')
        assert not [name for name, content in texts.items() if body in content or text in content], text
    public = records(pack)
    assert all(public[i]["gold_sql"] is None and public[i]["expected_answer"] is None and public[i]["commitment"]
               for i in held)
    steps = {c["id"]: c["next_step"] for c in json.loads((pack / "manifest.json").read_text())["classification"]}
    assert all(steps[i] == HELD_OUT_STEP for i in held) and all(e["next_step"] for e in entries)
    gold = tmp_path / "gold.jsonl"
    entries_by_id = {e["id"]: e for e in entries}
    answers = [{"id": i, "sql": (entries_by_id[i]["gold_sql"] if i in held else r["gold_sql"])}
               for i, r in public.items() if (r["gold_sql"] or i in held) and (entries_by_id.get(i) or r)["gold_sql"]]
    gold.write_text("".join(json.dumps(a) + "\n" for a in answers))
    capsys.readouterr()
    alone = tmp_path / "downloaded" / "pack"  # the pack without its key beside it, as the public gets it
    shutil.copytree(pack, alone)
    assert main(["score", str(alone), "--candidates", str(gold), "--json", str(tmp_path / "open.json")]) in (0, 1)
    report = json.loads((tmp_path / "open.json").read_text())
    assert sorted(report["holdout_not_scored"]) == sorted(i for i in held if entries_by_id[i]["gold_sql"]
                                                           and entries_by_id[i]["expected_answer"] is not None)
    assert main(["score", str(alone), "--candidates", str(gold), "--holdout-key", str(key), "--json",
                 str(tmp_path / "keyed.json")]) in (0, 1)
    keyed = {q["id"]: q for q in json.loads((tmp_path / "keyed.json").read_text())["questions"]}
    for i in report["holdout_not_scored"]:
        assert keyed[i]["status"] == "correct", keyed[i]
    assert main(["verify", str(pack)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # the file as received is withheld (manifest: as_received null): the audit has nothing of it to check
    assert main(["audit", str(pack)]) in (0, 1)
    assert "as_received" not in capsys.readouterr().out


@pytest.mark.parametrize(("written", "places"), [("12.50", 2), ("266351.5562", 4), ("0.000123", 6),
                                                  ("15.48654581228407", 10), ("35785.70930693735", 7)])
def test_an_answer_s_digits_give_its_rounding_up_to_twelve_significant_ones(written, places):
    """TPC-H's official answers carry a float's 16 or 17 digits: the ones past the 12th are noise, not a precision
    (a query summing in another order differs there), so they do not set round_decimals."""
    value, kind, decimals, error = parse_answer(Decimal(written), None, None)
    assert (kind, decimals, error) == ("number", places, None) and value == float(written)


# --------------------------------------------------------------------------- Python API


def test_verify_questions_on_any_duckdb_connection(packs, sources):
    recs = list(records(packs["duckdb"]).values())
    spain = next(r for r in recs if r["id"] == "spain")
    for line in REJECTED:  # the three records an import refuses to write, checked on the customer's database
        item = json.loads(LINES[line - 1])
        recs.append({**spain, "id": item["id"], "question": item["question"], "gold_sql": item["sql"],
                     "expected_answer": item["answer"], "answer_type": "string" if item["id"] == "empty" else
                     "integer"})
    checkable, not_checkable = gradable(recs)
    assert {r["id"]: r["drop_reason"] for r in not_checkable} == {
        "countries": "no_gold_sql", "latest": "no_expected_answer", "decades": "no_gold_sql",
        "director": "no_gold_sql", "none_1900": "no_expected_answer"}
    con = duckdb.connect(str(sources["duckdb"]), read_only=True)  # the customer's own database, not the pack
    kept, dropped = evalpack.verify_questions(con, checkable)
    assert {r["id"] for r in kept} == {"spain", "spain_fixed", "q008"}
    assert {r["id"]: r["drop_reason"] for r in dropped} == {"france": "mismatch", "movies": "error",
                                                            "empty": "mismatch, empty_result"}
    link = Link("film_countries", "film_id", "films", "id")
    kept, dropped = evalpack.verify_questions(con, checkable, links=(link,))
    assert {r["id"] for r in kept} == {"spain_fixed", "q008"}
    assert next(r for r in dropped if r["id"] == "spain")["drop_reason"] == "depends_on_orphans"
    con.close()


HOSTILE_GOLD = {
    "memory_bomb": "SELECT list_sum(range(300000000))",
    "slow_regexp": "SELECT length(regexp_replace(regexp_replace(regexp_replace(repeat('ab', 40000000), 'a', 'aa', "
                   "'g'), 'b', 'bb', 'g'), 'a', 'aa', 'g'))",  # about 15 s in one call DuckDB cannot interrupt
    "interval_overflow": "SELECT INTERVAL 100000000 YEAR",
}


@pytest.mark.slow
def test_gold_sql_from_outside_runs_in_a_limited_worker_on_import_and_audit(sources, tmp_path):
    """Imported gold SQL is untrusted: on import and on audit, a memory bomb, a query DuckDB cannot
    interrupt and one whose result cannot be read are each that question's error, in a worker process
    under its cap, while the command itself stays small and finishes."""
    import sys

    from test_scoring_isolation import run_sampled

    # without an answer: a failing query with one would make the pack one verify rejects, which is not written
    lines = [json.dumps({"id": name, "question": f"What does {name} return?", "sql": sql})
             for name, sql in HOSTILE_GOLD.items()]
    lines.append(json.dumps({"id": "latest", "question": "What is the most recent release year?",
                             "sql": "SELECT MAX(year) FROM films", "answer": 2019,
                             "check_sql": "SELECT year FROM films ORDER BY year DESC LIMIT 1"}))
    received = tmp_path / "hostile.jsonl"
    received.write_text("\n".join(lines) + "\n")
    pack = tmp_path / "pack"
    for args in (["import", str(received), "--data", str(sources["duckdb"]), "-o", str(pack)],
                 ["audit", str(pack), "--json", str(tmp_path / "audit.json")]):
        proc, _, err, peaks = run_sampled([sys.executable, "-m", "evalpack.cli", *args], timeout=600)
        assert "Traceback" not in err, err
        assert peaks[proc.pid] < 600 * 1024, (args[0], peaks[proc.pid])  # KiB: the command itself stays small
        workers = [kib for pid, kib in peaks.items() if pid != proc.pid]
        assert workers and max(workers) < 3 * 2**20, (args[0], workers)  # under the worker's cap, far from 6 GiB
        if args[0] == "import":
            assert proc.returncode == 0, err
            imported = records(pack)
            for name in HOSTILE_GOLD:
                assert imported[name]["status"] == "provisional" and "the query fails" in imported[name]["error"], \
                    imported[name]
            assert "worker process" in imported["slow_regexp"]["error"]  # killed at its limit, not waited for
            assert imported["latest"]["status"] == "scorable", imported["latest"]
        else:
            assert proc.returncode == 1, err
            findings = json.loads((tmp_path / "audit.json").read_text())["findings"]
            errors = {f["question"] for f in findings if f["kind"] == "error"}
            assert errors == set(HOSTILE_GOLD), findings
