"""`evalpack import`: questions from outside plus a database -> a pack that says what each answer key is worth.

The film catalogue below is the fixture of issue 9: 6,000 films, 5 countries, and a film_countries link table
in which one Spanish row points at film 6001, which was deleted. Counting Spanish films through the link table
gives 2,662; 2,661 Spanish films exist.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

import evalpack
from evalpack.cli import main
from evalpack.errors import EvalpackError
from evalpack.importer import import_pack
from evalpack.verify import Link, gradable

SPAIN_LINKS, SPAIN_FILMS = 2662, 2661
FRANCE_LINKS = (4500 - 2661) + 100  # films 2662..4500, and films 1..100 co-produced with France
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
QUESTIONS = ("\r\n".join(LINES) + "\r\n").encode("utf-8")

STATUS = {"spain": "provisional", "spain_fixed": "scorable", "france": "provisional", "movies": "provisional",
          "countries": "provisional", "latest": "provisional", "decades": "criteria", "director": "no_golden",
          "none_1900": "provisional", "empty": "provisional", "q011": "scorable"}

SUMMARY = ("11 cases from 15 lines: 2 scorable now; 7 provisional (4 with their query, 1 a number alone, "
           "2 nothing to compare yet); 1 criteria; 1 no golden; 4 lines did not parse (lines 4, 11, 14, 15)")

REPORT = [
    SUMMARY,
    "did not parse (not in the pack; fix them in the file and import again):",
    f"  line 4: not JSON (Expecting ',' delimiter at column {len(LINES[3]) + 1})",  # the line ends too early
    "  line 11: a JSON list, not an object",
    "  line 14: id 'spain' is already used on line 1",
    "  line 15: no question text (a `question` field)",
    "what turns provisional into scorable: the gold query returns the expected answer, a second derivation agrees "
    "(check_sql: a query written independently that returns the same answer), and the golden checks pass (a "
    "non-empty result, no dependence on orphan rows, no tie at LIMIT); then import again:",
    "  spain (line 1, with their query): its query returns the authored answer 2662; without orphan rows it returns "
    "2661 (1 film_countries row whose film_id matches no films.id); add check_sql (a second query, written "
    "independently, that returns the same answer)",
    "  france (line 3, with their query): its query returns 1939, the authored answer is 1900: decide which is right "
    "and correct the other",
    "  movies (line 5, with their query): the query fails: Catalog Error: Table with name movies does not exist!: fix "
    "it to read the pack's tables",
    "  countries (line 6, a number alone): a number alone (5): add the gold query that returns it, and a check_sql",
    "  latest (line 7, nothing to compare yet): its query returns 2019; nothing to compare it with yet: add the "
    "expected answer, derived independently of the query, and a check_sql",
    "  none_1900 (line 12, nothing to compare yet): its query returns []; nothing to compare it with yet: add the "
    "expected answer, derived independently of the query, and a check_sql",
    "  empty (line 13, with their query): its query returns [], the authored answer is \"none\": decide which is "
    "right and correct the other; it returns no rows (mark it expected_empty if that is the answer)",
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
    france = recs["france"]  # they differ: both values recorded
    assert (france["authored_answer"], france["observed_answer"], france["verified_by"]) == (1900, FRANCE_LINKS, None)
    movies = recs["movies"]  # the query fails: the error recorded
    assert movies["error"].startswith("the query fails: Catalog Error: Table with name movies does not exist")
    assert movies["observed_answer"] is None and movies["expected_answer"] == 6000
    countries = recs["countries"]  # a number alone
    assert (countries["gold_sql"], countries["expected_answer"], countries["answer_type"]) == (None, 5, "integer")
    latest = recs["latest"]  # a query alone: what it returned is recorded, nothing to compare it with
    assert (latest["expected_answer"], latest["observed_answer"]) == (None, 2019)
    assert recs["decades"]["criteria"].startswith("Names every decade") and recs["decades"]["gold_sql"] is None
    assert recs["director"]["gold_sql"] is None and recs["director"]["expected_answer"] is None
    assert recs["empty"]["failed_checks"] == ["non_empty"] and recs["none_1900"]["failed_checks"] == []
    avg = recs["q011"]  # an item without an id gets one by position; the answer's digits give round_decimals
    assert (avg["answer_type"], avg["round_decimals"], avg["expected_answer"]) == ("number", 2, 1984.49)
    assert avg["source_line"] == 16


@pytest.mark.parametrize("kind", list(SOURCES))
def test_questions_are_sealed_and_never_edited(packs, kind):
    for r in records(packs[kind]).values():
        assert r["question"] == json.loads(LINES[r["source_line"] - 1])["question"]  # the text as received
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
                      "lines": 15}


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
    expected = {"duckdb": {("film_countries.country_id", "countries.id"): ("foreign_key", 0),
                           ("film_countries.film_id", "films.id"): ("inferred", 1)},
                "sqlite": {("film_countries.film_id", "films.id"): ("foreign_key", 1),
                           ("film_countries.country_id", "countries.id"): ("foreign_key", 0)},
                "folder": {("film_countries.film_id", "films.id"): ("inferred", 1)}}
    assert rels == expected[kind]
    assert m["questions"]["by_status"] == {"scorable": 2, "provisional": 7, "criteria": 1, "no_golden": 1}
    assert m["unparsed"] == [{"line": 4, "error": REPORT[2].split(": ", 1)[1]},
                             {"line": 11, "error": "a JSON list, not an object"},
                             {"line": 14, "error": "id 'spain' is already used on line 1"},
                             {"line": 15, "error": "no question text (a `question` field)"}]
    cert = json.loads((pack / "certificate.json").read_text())
    by_id = {q["id"]: q["results"]["seed_0"] for q in cert["questions"]}
    assert by_id["spain"]["checks"]["orphan_independent"] is False and by_id["spain"]["observed"] == 2662
    assert by_id["movies"]["error"].startswith("Catalog Error") and cert["all_match"] is True


def test_attestation_covers_the_received_file(packs):
    from evalpack.attest import verify_pack

    result = verify_pack(packs["duckdb"], gold=False)
    assert result.ok


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
        json.dumps({"question": "Write a file?", "sql": f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'", "answer": 1}),
        json.dumps({"question": "Read a file?", "sql": f"SELECT COUNT(*) FROM read_text('{path_outside}')",
                    "answer": 1}),
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


def test_split_is_frozen_from_file_and_question_hashes(sources, questions_file, tmp_path):
    a = import_pack(questions_file, data=sources["duckdb"], output=tmp_path / "a", holdout=0.3)
    b = import_pack(questions_file, data=sources["sqlite"], output=tmp_path / "b", holdout=0.3)
    splits = [r["split"] for r in a.records]
    assert splits == [r["split"] for r in b.records]  # the same file gives the same split, whatever the database
    assert splits.count("holdout") == 3  # round(0.3 * 11)
    ranked = sorted(a.records, key=lambda r: hashlib.sha256(
        f"{hashlib.sha256(QUESTIONS).hexdigest()}:{r['question_sha256']}:{r['id']}".encode()).hexdigest())
    assert {r["id"] for r in ranked[:3]} == {r["id"] for r in a.records if r["split"] == "holdout"}
    with pytest.raises(EvalpackError, match="--holdout 1.5"):
        import_pack(questions_file, data=sources["duckdb"], output=tmp_path / "c", holdout=1.5)


# --------------------------------------------------------------------------- Python API


def test_verify_questions_on_any_duckdb_connection(packs, sources):
    recs = list(records(packs["duckdb"]).values())
    checkable, not_checkable = gradable(recs)
    assert {r["id"]: r["drop_reason"] for r in not_checkable} == {
        "countries": "no_gold_sql", "latest": "no_expected_answer", "decades": "no_gold_sql",
        "director": "no_gold_sql", "none_1900": "no_expected_answer"}
    con = duckdb.connect(str(sources["duckdb"]), read_only=True)  # the customer's own database, not the pack
    kept, dropped = evalpack.verify_questions(con, checkable)
    assert {r["id"] for r in kept} == {"spain", "spain_fixed", "q011"}
    assert {r["id"]: r["drop_reason"] for r in dropped} == {"france": "mismatch", "movies": "error",
                                                            "empty": "mismatch, empty_result"}
    link = Link("film_countries", "film_id", "films", "id")
    kept, dropped = evalpack.verify_questions(con, checkable, links=(link,))
    assert {r["id"] for r in kept} == {"spain_fixed", "q011"}
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

    lines = [json.dumps({"id": name, "question": f"What does {name} return?", "sql": sql, "answer": 1})
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
