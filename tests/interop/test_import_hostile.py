"""`evalpack import` against a database and a questions file made to hurt it (issue 50, causes 1, 3 and 6).

A database file's views are SQL from outside that runs when they are read: import reads the file in a sandbox
worker process under the scorer's limits (memory cap, a time limit per batch of rows, no file writes) with a
bound on the rows and bytes of each table or view, and refuses what exceeds them with one line naming the
view and the limit (exit 2, nothing written). A view may not read DuckDB's or SQLite's description of the
machine (settings, attached files, paths). The questions' SQL runs on tables that cannot be changed (a
data-changing CTE fails), and a questions file nested too deeply to read is one error line.

The blow-up tests run the real command in a process of its own, under a protective address-space cap (so that
the code before this fix could not take the machine down), and measure the peak resident memory of the whole
process tree (``RUSAGE_CHILDREN`` of a wrapper process: the largest of the command and its workers).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import one_line_error

from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import Limits
from evalpack.interop.importer import import_pack

PROTECTIVE_CAP = 4 * 2**30  # address space of the command under test: far above what a bounded import needs
PEAK_BOUND_KIB = 1536 * 1024  # the generous bound on the peak resident memory of the import's process tree
HANG_GUARD = 300  # seconds: only so that a test cannot hang; nothing is asserted about time

# the peak resident memory of the command (and every process it waited for) into the file argv[1]
_WRAPPER = ("import resource, subprocess, sys\n"
            "code = subprocess.call(sys.argv[2:])\n"
            "with open(sys.argv[1], 'w') as f:\n"
            "    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
            "sys.exit(code)\n")


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PROTECTIVE_CAP, PROTECTIVE_CAP))


def run_import(tmp_path: Path, questions: Path, data: Path, pack: Path) -> tuple[int, str, str, int]:
    """``evalpack import QUESTIONS --data DATA -o PACK`` in a process of its own: (exit code, stdout, stderr,
    peak KiB of the process tree)."""
    peak = tmp_path / "peak.kib"
    command = [sys.executable, "-c", _WRAPPER, str(peak), sys.executable, "-m", "evalpack.cli", "import",
               str(questions), "--data", str(data), "-o", str(pack)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=_cap, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"evalpack import did not end within {HANG_GUARD} s")
    return proc.returncode, out, err, int(peak.read_text()) if peak.exists() else -1




def nothing_written(pack: Path) -> None:
    assert not pack.exists()
    assert not [p.name for p in pack.parent.iterdir() if p.name.startswith(f".{pack.name}.")]


def questions_about_t(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "How many rows has t?", "sql": "SELECT COUNT(*) FROM t",
                                "answer": count}) + "\n")
    return path


def sqlite_with_view(path: Path, view: str) -> Path:
    con = sqlite3.connect(path)
    con.executescript(f"CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3); {view};")
    con.commit()
    con.close()
    return path


def duckdb_with(path: Path, *statements: str) -> Path:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t AS SELECT range AS x FROM range(1, 4)")
        for statement in statements:
            con.execute(statement)
    return path


# --------------------------------------------------------------------------- views that grow without end


@pytest.mark.parametrize("view", [
    # the string doubles each row: SQLite's default length limit is a billion bytes, 2 GB of rows before it
    pytest.param("CREATE VIEW grow AS WITH RECURSIVE r(n, s) AS (SELECT 1, 'x' UNION ALL SELECT n + 1, s || s "
                 "FROM r WHERE n < 40) SELECT n, s FROM r", id="doubling"),
    # each row 1,000 bytes longer than the one before, without end
    pytest.param("CREATE VIEW grow AS WITH RECURSIVE r(n, s) AS (SELECT 1, '' UNION ALL SELECT n + 1, "
                 "s || printf('%.1000c', 'x') FROM r) SELECT n, s FROM r", id="endless"),
])
def test_a_recursive_sqlite_view_is_refused_within_bounded_memory(tmp_path, view):
    data = sqlite_with_view(tmp_path / "grow.sqlite", view)
    pack = tmp_path / "pack"
    code, _, err, peak = run_import(tmp_path, questions_about_t(tmp_path), data, pack)
    assert code == 2, err[-3000:]
    one_line_error(err, "grow.sqlite", "view grow", "limit")
    nothing_written(pack)
    assert 0 < peak < PEAK_BOUND_KIB, peak


def test_a_duckdb_string_agg_view_is_refused_within_bounded_memory(tmp_path):
    data = duckdb_with(tmp_path / "agg.duckdb",
                       "CREATE VIEW blob AS SELECT string_agg(repeat('x', 10000), '') AS s FROM range(1000000)")
    pack = tmp_path / "pack"
    code, _, err, peak = run_import(tmp_path, questions_about_t(tmp_path), data, pack)
    assert code == 2, err[-3000:]
    one_line_error(err, "agg.duckdb", "view blob", "limit")
    nothing_written(pack)
    assert 0 < peak < PEAK_BOUND_KIB, peak


def test_a_view_too_large_for_the_row_bound_is_refused_before_it_is_written(tmp_path, monkeypatch):
    """The bound on rows (and bytes) per table or view is what keeps a view from filling the disk: lowered here
    so that the test stays small."""
    import evalpack.interop.sources as sources

    monkeypatch.setattr(sources, "MAX_TABLE_ROWS", 1000)
    data = duckdb_with(tmp_path / "huge.duckdb",
                       "CREATE VIEW huge AS SELECT range AS i, repeat('x', 100) AS s FROM range(100000000)")
    pack = tmp_path / "pack"
    with pytest.raises(EvalpackError) as refused:
        import_pack(questions_about_t(tmp_path), data=data, output=pack)
    assert refused.value.exit_code == 2
    assert "\n" not in str(refused.value) and "view huge" in str(refused.value), str(refused.value)
    assert "1,000 rows" in str(refused.value)
    nothing_written(pack)


def test_a_cross_join_view_is_stopped_at_the_time_limit(tmp_path):
    data = duckdb_with(tmp_path / "pairs.duckdb",
                       "CREATE VIEW pairs AS SELECT COUNT(*) AS n FROM range(1000000) a, range(1000000) b "
                       "WHERE (a.range * b.range) % 7 = 3")
    pack = tmp_path / "pack"
    with pytest.raises(EvalpackError) as refused:
        import_pack(questions_about_t(tmp_path), data=data, output=pack, limits=Limits(timeout=1.0))
    message = str(refused.value)
    assert refused.value.exit_code == 2
    assert "\n" not in message and "view pairs" in message and "1 s" in message, message
    nothing_written(pack)


# --------------------------------------------------------------------------- views that describe the machine


def _machine_paths(data: Path) -> list[str]:
    return [str(Path.home()), str(data.resolve().parent), str(data.resolve())]


def _holding(folder: Path, needles: list[str], skip: set[Path]) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and path not in skip:
            content = path.read_bytes()
            found += [f"{path}: {n}" for n in needles if n.encode() in content]
    return found


@pytest.mark.parametrize(("name", "statement"), [
    ("settings", "CREATE VIEW settings AS SELECT name, value FROM duckdb_settings()"),
    ("files", "CREATE VIEW files AS SELECT database_name, path FROM duckdb_databases()"),
    ("files", "CREATE VIEW files AS SELECT * FROM duckdb_databases"),
    ("files", "CREATE VIEW files AS SELECT * FROM pragma_database_list"),
    ("settings", "CREATE VIEW settings AS SELECT * FROM pg_catalog.pg_settings"),
    ("secrets", "CREATE VIEW secrets AS SELECT current_setting('secret_directory') AS folder"),
    ("hidden", "CREATE VIEW hidden AS SELECT reverse(path) AS p FROM query('SELECT path FROM duckdb_' || "
               "'databases()')"),
    ("m", "CREATE MACRO m() AS TABLE SELECT value FROM duckdb_settings()"),
    ("generated", "CREATE TABLE generated (x INTEGER, home VARCHAR AS (current_setting('secret_directory')))"),
    # reads nothing of the machine, but returns its home folder all the same (guessed): what a view returns is checked
    ("guess", f"CREATE VIEW guess AS SELECT '{Path.home()}/.ssh/id_rsa' AS key"),
])
def test_a_view_over_the_machine_s_catalogue_puts_no_machine_path_in_the_pack(tmp_path, capsys, name, statement):
    data = duckdb_with(tmp_path / "machine.duckdb", statement)
    if statement.startswith("CREATE TABLE"):
        with duckdb.connect(str(data)) as con:
            con.execute("INSERT INTO generated (x) VALUES (1)")
    questions = questions_about_t(tmp_path)
    pack = tmp_path / "pack"
    assert main(["import", str(questions), "--data", str(data), "-o", str(pack)]) == 2
    one_line_error(capsys.readouterr().err, "machine.duckdb", name)
    nothing_written(pack)
    assert not _holding(tmp_path, _machine_paths(data), {data, questions})


def test_names_that_read_the_machine_are_found_however_they_are_written():
    from evalpack.interop.sources import machine_name

    names = {"duckdb_settings", "duckdb_databases", "pragma_database_list"}
    for sql, found in [
        ("SELECT * FROM duckdb_settings()", "duckdb_settings"),
        ('SELECT * FROM "DuckDB_Settings"()', "duckdb_settings"),
        ("SELECT * FROM system.main.DUCKDB_DATABASES", "duckdb_databases"),
        ("SELECT * FROM query /* dynamic */ ('SELECT 1')", "query"),
        ("SELECT current_setting('home_directory')", "current_setting"),
        ("SELECT * FROM pg_catalog.pg_settings", "pg_settings"),
        # a column named like a function, a string, a comment: none reads anything
        ("SELECT query, 'duckdb_settings()' AS s FROM searches -- duckdb_databases", None),
        ("SELECT t.current_setting FROM t", None),
    ]:
        assert machine_name(sql, names) == found, sql


@pytest.mark.parametrize("view", [
    "CREATE VIEW files AS SELECT * FROM pragma_database_list",
    "CREATE VIEW files AS SELECT file FROM pragma_database_list",
    f"CREATE VIEW files AS SELECT '{Path.home()}/.ssh/id_rsa' AS key",
])
def test_a_sqlite_view_over_pragma_functions_is_refused(tmp_path, capsys, view):
    data = sqlite_with_view(tmp_path / "machine.sqlite", view)
    questions = questions_about_t(tmp_path)
    pack = tmp_path / "pack"
    assert main(["import", str(questions), "--data", str(data), "-o", str(pack)]) == 2
    one_line_error(capsys.readouterr().err, "machine.sqlite", "view files")
    nothing_written(pack)
    assert not _holding(tmp_path, _machine_paths(data), {data, questions})


def test_a_question_whose_sql_reads_the_machine_puts_no_machine_path_in_the_pack(tmp_path, capsys):
    """The questions' SQL runs in the scorer's sandbox; what it returned is written into the pack, so an answer that
    holds the home folder or the data's path is refused, naming the line and the question."""
    data = duckdb_with(tmp_path / "t.duckdb")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "Where are secrets kept?",
                                     "sql": "SELECT current_setting('secret_directory')"}) + "\n")
    pack = tmp_path / "pack"
    code = main(["import", str(questions), "--data", str(data), "-o", str(pack)])
    err = capsys.readouterr().err
    if code == 2:  # the sandbox showed the home folder: refused
        one_line_error(err, f"{questions}: line 1: question q001")
        nothing_written(pack)
    else:  # the sandbox shows nothing of the machine: imported
        assert code == 0, err
    assert not _holding(tmp_path, _machine_paths(data), {data, questions})


# --------------------------------------------------------------------------- SQL that changes data


FILMS = [(i, 2000 + i) for i in range(10)]  # the latest year is 2009


def _films(kind: str, path: Path) -> Path:
    if kind == "sqlite":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE films (id INTEGER, year INTEGER)")
        con.executemany("INSERT INTO films VALUES (?, ?)", FILMS)
        con.commit()
        con.close()
    else:
        with duckdb.connect(str(path)) as con:
            con.execute("CREATE TABLE films (id INTEGER, year INTEGER)")
            con.executemany("INSERT INTO films VALUES (?, ?)", FILMS)
    return path


@pytest.mark.parametrize("change", [
    "WITH z AS (UPDATE films SET year = 0 RETURNING id) SELECT COUNT(*) FROM z",
    "WITH z AS (DELETE FROM films RETURNING id) SELECT COUNT(*) FROM z",
    "WITH z AS (INSERT INTO films VALUES (99, 9999) RETURNING id) SELECT COUNT(*) + 9 FROM z",
])
@pytest.mark.parametrize("kind", ["duckdb", "sqlite"])
def test_a_data_changing_check_query_changes_nothing(tmp_path, capsys, kind, change):
    """DuckDB parses a data-changing CTE as a SELECT: the tables the questions run on cannot be changed at all, so
    the query fails, the question after it ships with its true result and the source file keeps its bytes."""
    data = _films(kind, tmp_path / f"films.{kind}")
    before = hashlib.sha256(data.read_bytes()).hexdigest()
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps({"id": "count", "question": "How many films?", "sql": "SELECT COUNT(*) FROM films", "answer": 10,
                    "check_sql": change}) + "\n"
        + json.dumps({"id": "latest", "question": "Latest year?", "sql": "SELECT MAX(year) FROM films",
                      "answer": 2009, "check_sql": "SELECT year FROM films ORDER BY year DESC LIMIT 1"}) + "\n")
    pack = tmp_path / "pack"
    assert main(["import", str(questions), "--data", str(data), "-o", str(pack)]) == 0, capsys.readouterr().err
    records = {r["id"]: r for r in map(json.loads, (pack / "questions.jsonl").read_text().splitlines())}
    assert records["latest"]["status"] == "scorable", records["latest"]
    assert records["latest"]["observed_answer"] == 2009
    # the data-changing check query failed: the question that carries it cannot be scorable
    assert records["count"]["status"] == "provisional" and records["count"]["check_answer"] != 10, records["count"]
    assert hashlib.sha256(data.read_bytes()).hexdigest() == before
    with duckdb.connect() as con:
        table = pack / "rotations" / "seed_0" / "tables" / "films.parquet"
        assert con.execute(f"SELECT * FROM '{table}' ORDER BY id").fetchall() == FILMS


# --------------------------------------------------------------------------- a questions file nested too deeply


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(("name", "text", "line"), [
    ("deep.jsonl", '{"question": "a"}\n' + DEEP + "\n", 2),
    ("deep.jsonl", '{"question": "a"}\n{"question": "b", "answer": ' + DEEP + "}\n", 2),
    ("deep.jsonl", '{"question": "a", "notes": ' + "[" * 900 + "]" * 900 + "}\n", 1),
    ("deep.json", '[\n{"question": "a"},\n' + DEEP + "\n]\n", 3),
])
def test_a_questions_file_nested_too_deeply_is_one_error_line(tmp_path, capsys, name, text, line):
    data = duckdb_with(tmp_path / "t.duckdb")
    questions = tmp_path / name
    questions.write_text(text)
    pack = tmp_path / "pack"
    assert main(["import", str(questions), "--data", str(data), "-o", str(pack)]) == 2
    one_line_error(capsys.readouterr().err, f"{questions}: line {line}:", "nested")
    nothing_written(pack)


# --------------------------------------------------------------------------- no machine path, by construction


def _disguised(text: str) -> list[bytes]:
    """``text`` as a query may write it to slip past a plain search: itself, reversed, as hex and in base64 (the part
    of its encoding that does not depend on the bytes around it, at each of the three alignments)."""
    raw = text.encode()
    forms = [raw, raw[::-1], raw.hex().encode(), raw.hex().upper().encode()]
    for shift in range(3):
        core = base64.b64encode(b"\0" * shift + raw)[4 if shift else 0:-4]
        if len(core) >= 8:
            forms.append(core)
    return forms


def _holding_disguised(folder: Path, texts: list[str], skip: set[Path]) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and path not in skip:
            content = path.read_bytes()
            found += [f"{path}: {t} ({form!r})" for t in texts for form in _disguised(t) if form in content]
    return found


def _serialized(sql: str) -> str:
    with duckdb.connect() as con:
        text = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
    return "'" + text.replace("'", "''") + "'"


# the red team's views: SQL serialized as JSON text, run by json_execute_serialized_sql, and what it returns encoded
SERIALIZED_VIEWS = (
    "CREATE VIEW leak AS SELECT database_name, reverse(path) AS p, to_base64(encode(path)) AS b FROM "
    f"json_execute_serialized_sql({_serialized('SELECT database_name, path FROM duckdb_databases()')})",
    "CREATE VIEW leak2 AS SELECT name, to_base64(encode(value)) AS v, reverse(value) AS r, hex(value) AS h FROM "
    f"json_execute_serialized_sql({_serialized('SELECT name, value FROM duckdb_settings()')})",
)


def test_a_view_running_serialized_sql_puts_no_machine_path_in_the_pack(tmp_path, capsys):
    """json_execute_serialized_sql runs SQL written as JSON text, which no name filter reads: refused by name all the
    same (defence in depth), and nothing of the machine in any file, however encoded."""
    data = duckdb_with(tmp_path / "leaky.duckdb", *SERIALIZED_VIEWS)
    questions = questions_about_t(tmp_path)
    pack = tmp_path / "pack"
    code = main(["import", str(questions), "--data", str(data), "-o", str(pack)])
    err = capsys.readouterr().err
    assert code == 2, err
    one_line_error(err, "leaky.duckdb", "json_execute_serialized_sql")
    nothing_written(pack)
    assert not _holding_disguised(tmp_path, _machine_paths(data), {data, questions})


@pytest.mark.parametrize("kind", ["duckdb", "sqlite"])
def test_the_connection_reading_a_database_file_knows_no_path_of_the_machine(tmp_path, kind):
    """By construction, not by name: the worker reads a link to the file (or a copy) under a neutral name in a
    private scratch folder, with neutral home, extension, secret and temp folders, so neither its settings
    (allowed_paths among them) nor its catalogue (duckdb_databases().path) hold a path of the machine. Read here past
    the refusal by name, straight from the worker."""
    import pyarrow as pa

    from evalpack.interop.sources import SourceWorker

    if kind == "sqlite":
        data = sqlite_with_view(tmp_path / "machine.sqlite", "CREATE VIEW v AS SELECT x FROM t")
    else:
        data = duckdb_with(tmp_path / "machine.duckdb", *SERIALIZED_VIEWS,
                           "CREATE VIEW files AS SELECT database_name, path FROM duckdb_databases()",
                           "CREATE VIEW settings AS SELECT name, value FROM duckdb_settings()",
                           "CREATE VIEW allowed AS SELECT current_setting('allowed_paths') AS a, "
                           "current_setting('allowed_directories') AS d, current_setting('temp_directory') AS tmp, "
                           "current_setting('home_directory') AS home, current_setting('extension_directory') AS e, "
                           "current_setting('secret_directory') AS s")
    with SourceWorker(data, kind, Limits()) as worker:
        setup = json.dumps(worker.setup())
        assert str(data) not in setup and str(data.parent) not in setup, setup
        catalogue = json.loads(worker.ask({"open": True}, 30).rows[0][0])
        if kind == "duckdb":
            assert {name for _, name in catalogue["machine"]} >= {"json_execute_serialized_sql", "duckdb_settings"}
            seen = []
            for view in ("leak", "leak2", "files", "settings", "allowed"):
                outcome = worker.ask({"read": view}, 30)
                assert outcome.error is None, outcome.error
                seen.append(json.dumps(pa.ipc.open_stream(outcome.rows[0][0]).read_all().to_pylist()))
            text = "\n".join(seen)
            assert "/nonexistent" in text and "source.duckdb" in text, text[:2000]  # it read what it was shown
            for needle in _machine_paths(data) + [str(tmp_path)]:
                assert not [form for form in _disguised(needle) if form.decode() in text], needle
        scratch = Path(json.loads(setup)["database"]).parent
        assert scratch.is_dir() and scratch.name.startswith("evalpack-source-")
    assert not scratch.exists()  # the scratch folder goes with the worker


@pytest.mark.parametrize("sql", [
    "SELECT path FROM duckdb_databases() WHERE path IS NOT NULL",
    "SELECT reverse(path) FROM duckdb_databases() WHERE path IS NOT NULL",
    "SELECT to_base64(encode(path)) FROM duckdb_databases() WHERE path IS NOT NULL",
    "SELECT current_setting('allowed_paths')",
])
def test_a_question_whose_sql_reads_the_sandbox_s_scratch_path_puts_none_in_the_pack(tmp_path, capsys, sql):
    """The scorer's sandbox loads the pack's tables into a database file in a scratch folder of the temp folder
    (evalpack-sandbox-<pid>-<random>/memory.duckdb): a question whose SQL returns that path is refused."""
    data = duckdb_with(tmp_path / "t.duckdb")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "Where is the database?", "sql": sql}) + "\n")
    pack = tmp_path / "pack"
    code = main(["import", str(questions), "--data", str(data), "-o", str(pack)])
    err = capsys.readouterr().err
    if code == 2:
        one_line_error(err, f"{questions}: line 1: question q001")
        nothing_written(pack)
    else:
        assert code == 0, err
    assert not _holding_disguised(tmp_path, ["evalpack-sandbox-", "evalpack-source-"], {data, questions})


# --------------------------------------------------------------------------- bounds on the whole file


@pytest.mark.parametrize("kind", ["duckdb", "sqlite"])
def test_a_file_of_too_many_tables_is_refused_before_any_is_read(tmp_path, monkeypatch, kind):
    """The bound on the tables and views of one file (what keeps 2,000 empty tables from taking half a minute and
    writing 4,000 files): lowered here so that the test stays small."""
    import evalpack.interop.sources as sources

    monkeypatch.setattr(sources, "MAX_SOURCE_OBJECTS", 5)
    tables = [f"CREATE TABLE t{i} (x INTEGER)" for i in range(4)] + ["CREATE VIEW v1 AS SELECT 1 AS x",
                                                                     "CREATE VIEW v2 AS SELECT 2 AS x"]
    if kind == "sqlite":
        data = sqlite_with_view(tmp_path / "many.sqlite", "; ".join(tables))
    else:
        data = duckdb_with(tmp_path / "many.duckdb", *tables)
    pack = tmp_path / "pack"
    with pytest.raises(EvalpackError) as refused:
        import_pack(questions_about_t(tmp_path), data=data, output=pack)
    message = str(refused.value)
    assert refused.value.exit_code == 2
    assert "\n" not in message and "7 tables and views" in message and "5" in message, message
    nothing_written(pack)
    assert not list((tmp_path).glob("**/*.parquet"))


SLOW_VIEWS = [f"CREATE VIEW slow{i} AS SELECT sum(hash(range)) AS s FROM range(2500000000)" for i in range(3)]


def test_a_file_that_takes_too_long_in_all_is_refused(tmp_path, monkeypatch):
    """Each view keeps under the time limit of a batch of rows, and of a view (each takes seconds); the time for
    reading the whole file is bounded too: lowered here so that the test stays fast."""
    import evalpack.interop.sources as sources

    monkeypatch.setattr(sources, "MAX_SOURCE_SECONDS", 2.0)
    data = duckdb_with(tmp_path / "slow.duckdb", *SLOW_VIEWS)
    pack = tmp_path / "pack"
    with pytest.raises(EvalpackError) as refused:
        import_pack(questions_about_t(tmp_path), data=data, output=pack, limits=Limits(timeout=30.0))
    message = str(refused.value)
    assert refused.value.exit_code == 2
    assert "\n" not in message and "slow.duckdb" in message and "2 s" in message, message
    assert "whole" in message, message
    nothing_written(pack)


def test_the_time_for_the_whole_file_follows_the_run_timeout(tmp_path, capsys):
    """The same bound, lowered by the limits' run_timeout (seconds for the whole run)."""
    data = duckdb_with(tmp_path / "slow.duckdb", *SLOW_VIEWS)
    pack = tmp_path / "pack"
    with pytest.raises(EvalpackError) as refused:
        import_pack(questions_about_t(tmp_path), data=data, output=pack, limits=Limits(timeout=30.0, run_timeout=1.5))
    message = str(refused.value)
    assert refused.value.exit_code == 2
    assert "\n" not in message and "1.5 s" in message and "whole" in message, message
    nothing_written(pack)
