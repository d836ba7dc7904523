"""The cache on disk (prepared near-miss mutants, verification's observations, study outcomes): an optimisation that
never changes what a build makes."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import shutil
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from evalpack.build import build_pack, links_of
from evalpack.checks import golden
from evalpack.checks import verification as verify
from evalpack.checks.nearmiss import study as nearmiss
from evalpack.checks.verification import rotation_connection, tables_digest
from evalpack.core import cache, scoring
from evalpack.data.plan import plan_pack
from evalpack.data.tables import duckdb_types
from evalpack.questions import derive as questions_module
from evalpack.questions.derive import derive_selected
from evalpack.spec.reader import load_spec

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture(scope="module")
def finance():
    spec = load_spec(SCHEMAS / "finance.yaml")
    questions, _ = derive_selected(spec, plan_pack(spec))
    return spec, questions


def _entries(folder: Path) -> list[tuple[str, str]]:
    """The (namespace, key) of every entry in the cache database in ``folder``, read with SQLite itself."""
    with sqlite3.connect(folder / cache.DATABASE) as con:
        return con.execute("SELECT namespace, key FROM entries ORDER BY namespace, key").fetchall()


def _value(folder: Path, entry: tuple[str, str]) -> str:
    with sqlite3.connect(folder / cache.DATABASE) as con:
        return con.execute("SELECT value FROM entries WHERE namespace = ? AND key = ?", entry).fetchone()[0]


def _damage(folder: Path, entry: tuple[str, str], text: str) -> None:
    with sqlite3.connect(folder / cache.DATABASE) as con:
        con.execute("UPDATE entries SET value = ? WHERE namespace = ? AND key = ?", (text, *entry))


def _prepare(spec, questions, monkeypatch, folder: str) -> nearmiss.MutantSet:
    monkeypatch.setenv(cache.CACHE_ENV, folder)
    nearmiss._PREPARED.clear()  # the in-process layer would answer before the disk
    return nearmiss.prepare_mutants(spec, questions, duckdb_types(spec))


def test_cold_warm_and_off_prepare_the_same_mutants(finance, monkeypatch, tmp_path):
    spec, questions = finance
    off = _prepare(spec, questions, monkeypatch, "off")
    assert not any(tmp_path.iterdir())
    cold = _prepare(spec, questions, monkeypatch, str(tmp_path))
    entries = _entries(tmp_path)
    assert len(entries) == len({q.gold_sql for q in questions}) and {n for n, _ in entries} == {"mutants"}
    calls = []
    monkeypatch.setattr(nearmiss, "_prepared", lambda *key: calls.append(key))  # a warm cache never prepares
    warm = _prepare(spec, questions, monkeypatch, str(tmp_path))
    assert calls == []
    assert off == cold == warm
    assert len(warm.mutants) > 100


def test_encoding_round_trips_through_json(finance):
    spec, questions = finance
    types = json.dumps(duckdb_types(spec), sort_keys=True)
    nullable = json.dumps({t: sorted(c) for t, c in nearmiss.nullable_columns(spec).items()}, sort_keys=True)
    for q in questions[:40]:
        prepared = nearmiss._prepared(q.gold_sql, types, nullable, None)
        assert nearmiss.decode_prepared(json.loads(json.dumps(nearmiss.encode_prepared(prepared)))) == prepared


def test_a_damaged_entry_is_recomputed_and_replaced(finance, monkeypatch, tmp_path):
    spec, questions = finance
    first = _prepare(spec, questions[:5], monkeypatch, str(tmp_path))
    entries = _entries(tmp_path)
    _damage(tmp_path, entries[0], "[[\"no_such_operator\", null]]")
    _damage(tmp_path, entries[1], "{not json")
    again = _prepare(spec, questions[:5], monkeypatch, str(tmp_path))
    assert again == first
    assert all(json.loads(_value(tmp_path, e))[0][0] in nearmiss.OPERATORS for e in entries)


def test_an_unwritable_cache_is_ignored(finance, monkeypatch, tmp_path):
    spec, questions = finance
    blocker = tmp_path / "a-file"  # the cache's folder is a file: nothing can be written under it, even as root
    blocker.write_text("")
    made = _prepare(spec, questions[:3], monkeypatch, str(blocker))
    assert made == _prepare(spec, questions[:3], monkeypatch, "off")
    assert blocker.read_text() == ""


def test_a_file_that_is_not_a_database_is_replaced(finance, monkeypatch, tmp_path):
    spec, questions = finance
    (tmp_path / cache.DATABASE).write_bytes(b"not a SQLite database, something else wrote here" * 100)
    made = _prepare(spec, questions[:3], monkeypatch, str(tmp_path))
    assert made == _prepare(spec, questions[:3], monkeypatch, "off")
    assert len(_entries(tmp_path)) == len({q.gold_sql for q in questions[:3]})


def _store_many(folder: str, first: int) -> None:
    os.environ[cache.CACHE_ENV] = folder
    for n in range(first, first + 300):
        cache.store("test", f"{n:064x}", [n, "x" * 500])


def test_processes_forked_from_a_writer_write_the_same_database_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    cache.store("test", "before", 1)  # this process holds a connection when it forks its writers
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_store_many, args=(str(tmp_path), first)) for first in (0, 300, 600)]
    for writer in writers:
        writer.start()
    _store_many(str(tmp_path), 900)
    for writer in writers:
        writer.join(60)
    assert [w.exitcode for w in writers] == [0, 0, 0]
    assert [cache.load("test", f"{n:064x}") for n in range(1200)] == [[n, "x" * 500] for n in range(1200)]
    assert cache.load("test", "before") == 1 and len(_entries(tmp_path)) == 1201
    # it holds answers (the holdout's too): only its owner reads the database and its write-ahead log
    assert {path.name: path.stat().st_mode & 0o777 for path in tmp_path.glob(cache.DATABASE + "*")} == \
        {cache.DATABASE: 0o600, cache.DATABASE + "-wal": 0o600, cache.DATABASE + "-shm": 0o600}


def test_difficulty_labels_are_the_same_cold_warm_off_and_from_a_damaged_entry(finance, monkeypatch, tmp_path):
    _, questions = finance
    asked = [(q.gold_sql, q.answer_type) for q in questions]
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    off = questions_module.labels_of(asked)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    cold = questions_module.labels_of(asked)
    (entry,) = _entries(tmp_path)
    parsed = []
    monkeypatch.setattr(questions_module, "label", lambda *a: parsed.append(a) or ("simple", ()))
    warm = questions_module.labels_of(asked)
    assert parsed == [] and off == cold == warm
    assert {level for level, _ in warm} == {"simple", "moderate", "challenging"} and any(skills for _, skills in warm)
    assert questions_module.labels_of(asked[:-1]) == [("simple", ())] * (len(asked) - 1)  # other queries, other entry
    _damage(tmp_path, entry, json.dumps([["impossible", []]] * len(asked)))
    monkeypatch.undo()
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert questions_module.labels_of(asked) == off
    assert json.loads(_value(tmp_path, entry))[0][0] in ("simple", "moderate", "challenging")


def test_new_rotated_answers_prepare_only_the_mutant_that_reads_them(monkeypatch, tmp_path):
    """A spec whose facts changed gives new answers for the same gold SQL: with rotated answers only the
    constant_answer mutant reads them, so the rest come from the cache, and the mutants are those prepared afresh."""
    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "shop_joins.yaml")
    assert spec.answers == "rotated"
    questions, _ = derive_selected(spec, plan_pack(spec))
    before = _prepare(spec, questions, monkeypatch, str(tmp_path))
    moved = tuple(replace(q, expected=tuple((r, v + 1 if isinstance(v, (int, float)) else v) for r, v in q.expected))
                  for q in questions)
    assert any(m != q for m, q in zip(moved, questions))
    made = []
    mutants_of = nearmiss.mutants_of
    monkeypatch.setattr(nearmiss, "mutants_of", lambda *a, **k: made.append(a) or mutants_of(*a, **k))
    after = _prepare(spec, moved, monkeypatch, str(tmp_path))
    assert made == []  # no gold SQL was mutated again
    fresh = _prepare(spec, moved, monkeypatch, "off")
    assert len(made) == len({q.gold_sql for q in moved}) and after == fresh
    changed = {m.id for m, q in zip(moved, questions) if m.expected[0] != q.expected[0]}
    constants = {(m.question_id, m.sql) for m in after.mutants if m.operator == "constant_answer" and m.question_id in changed}
    assert len(constants) == len(changed) > 50  # each a new literal, none found in the cache
    assert constants.isdisjoint({(m.question_id, m.sql) for m in before.mutants})


def test_whether_a_result_set_is_ordered_is_the_same_cold_warm_off_and_from_a_damaged_entry(monkeypatch, tmp_path):
    asked = ["SELECT a FROM t ORDER BY a", "SELECT a FROM t", "SELECT * FROM (SELECT a FROM t ORDER BY a) s",
             "WITH w AS (SELECT a FROM t) SELECT a FROM w ORDER BY 1 DESC LIMIT 3", "SELECT a FROM t ORDER"]

    def ask(folder: str) -> list[bool]:
        monkeypatch.setenv(cache.CACHE_ENV, folder)
        scoring._ORDERED.clear()
        return [golden.in_order("rows", sql) for sql in asked]

    off = ask("off")
    assert off == [True, False, False, True, False] and not any(tmp_path.iterdir())
    assert ask(str(tmp_path)) == off
    entries = _entries(tmp_path)
    assert len(entries) == len(asked)
    monkeypatch.setattr(golden, "_parser", lambda: pytest.fail("parsed again with every answer on disk"))
    assert ask(str(tmp_path)) == off
    monkeypatch.undo()
    for entry in entries:
        _damage(tmp_path, entry, "not json")
    assert ask(str(tmp_path)) == off and all(json.loads(_value(tmp_path, e)) in (True, False) for e in entries)
    assert golden.in_order("number", asked[0]) is False  # a scalar's one row has no order to compare


def test_the_key_covers_the_code_and_the_inputs():
    fingerprint = cache.code_fingerprint(nearmiss.PREPARING_CODE)
    key = cache.entry_key("mutants", fingerprint, ["SELECT 1", "{}", "{}", None])
    assert key != cache.entry_key("mutants", fingerprint, ["SELECT 2", "{}", "{}", None])
    assert key != cache.entry_key("mutants", fingerprint, ["SELECT 1", "{}", "{}", "[]"])
    assert key != cache.entry_key("mutants", cache.code_fingerprint(("evalpack.checks.nearmiss.study",)), ["SELECT 1", "{}", "{}", None])


def test_a_rotation_checked_before_is_not_checked_again_and_gives_the_same_pack(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    first = build_pack(SCHEMAS / "finance.yaml", tmp_path / "first", rotations=2)

    def refuse(*args, **kwargs):
        raise AssertionError("a rotation whose files were checked before was loaded or ran its gold SQL or mutants")

    monkeypatch.setattr(nearmiss, "study_rotation", refuse)
    monkeypatch.setattr(verify, "check_question", refuse)
    monkeypatch.setattr(verify, "rotation_connection", refuse)
    monkeypatch.setattr(questions_module, "label", refuse)  # the difficulty labels are found too
    scoring._ORDERED.clear()  # which result sets are compared in order: found on disk, without a DuckDB parser
    monkeypatch.setattr(golden, "_parser", refuse)
    again = build_pack(SCHEMAS / "finance.yaml", tmp_path / "again", rotations=2)
    monkeypatch.undo()
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    nearmiss._PREPARED.clear()
    uncached = build_pack(SCHEMAS / "finance.yaml", tmp_path / "uncached", rotations=2)
    assert first.near_miss == again.near_miss == uncached.near_miss
    assert first.near_miss["mutants_run"] > 100
    for name in ("manifest.json", "questions.jsonl", "certificate.json", "README.md"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "uncached" / name).read_bytes()


def test_the_study_keys_cover_every_byte_of_the_tables_and_each_questions_mutants(tmp_path, finance_pack, finance):
    spec, questions = finance
    mutants = list(nearmiss.prepare_mutants(spec, questions, duckdb_types(spec)).mutants)[:50]
    rotation = sorted((finance_pack / "rotations").iterdir())[0]
    copy = tmp_path / "tables"
    shutil.copytree(rotation / "tables", copy)
    by_id = {q.id: q for q in questions}
    keys = nearmiss.study_keys(tables_digest(copy), rotation.name, by_id, mutants)
    assert len(set(keys.values())) == len(keys) == len({m.question_id for m in mutants}) > 1
    assert keys == nearmiss.study_keys(tables_digest(rotation / "tables"), rotation.name, by_id, mutants)
    # one mutant fewer changes its question's key alone
    fewer = nearmiss.study_keys(tables_digest(rotation / "tables"), rotation.name, by_id, mutants[1:])
    first = mutants[0].question_id
    assert fewer[first] != keys[first] and {q: k for q, k in fewer.items() if q != first} == \
        {q: k for q, k in keys.items() if q != first}
    # a question renumbered by another selection keeps its key
    renamed = {f"x{qid}": replace(q, id=f"x{qid}") for qid, q in by_id.items()}
    moved = [replace(m, question_id=f"x{m.question_id}") for m in mutants]
    assert nearmiss.study_keys(tables_digest(copy), rotation.name, renamed, moved) == {f"x{q}": k for q, k in keys.items()}
    target = sorted(copy.glob("*.csv"))[0]
    data = bytearray(target.read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    target.write_bytes(bytes(data))
    changed = nearmiss.study_keys(tables_digest(copy), rotation.name, by_id, mutants)
    assert not set(changed.values()) & set(keys.values())


def test_a_question_studied_before_on_the_same_files_is_not_studied_again(tmp_path, finance_pack, finance,
                                                                          monkeypatch):
    spec, questions = finance
    types = duckdb_types(spec)
    mutants = list(nearmiss.prepare_mutants(spec, questions, types).mutants)
    asked = sorted({m.question_id for m in mutants})
    earlier = [m for m in mutants if m.question_id in asked[: len(asked) // 2]]
    tables = sorted((finance_pack / "rotations").iterdir())[0] / "tables"
    by_id = {q.id: q for q in questions}
    studied = []
    real = nearmiss.study_rotation

    def recording(con, rotation, questions_, plan, *args, **kwargs):
        studied.append(list(plan.mutants))
        return real(con, rotation, questions_, plan, *args, **kwargs)

    monkeypatch.setattr(nearmiss, "study_rotation", recording)

    def outcomes(folder: str, these):
        monkeypatch.setenv(cache.CACHE_ENV, folder)
        with rotation_connection(tables) as con:
            return nearmiss.study_outcomes(con, tables_digest(tables), tables.parent.name, by_id, these, types)

    first = outcomes(str(tmp_path), earlier)
    every = outcomes(str(tmp_path), mutants)  # the other half of the questions joins the selection
    assert [set(s) for s in studied] == [set(earlier), set(mutants) - set(earlier)]
    assert list(every) == mutants and {m: every[m] for m in earlier} == first
    assert every == outcomes("off", mutants)
    assert outcomes(str(tmp_path), mutants) == every and len(studied) == 3  # all found: nothing more studied
    assert any(every.values()) and not all(every.values())


def _observations(tables: Path, questions, folder: str, monkeypatch, links=()):
    monkeypatch.setenv(cache.CACHE_ENV, folder)
    with rotation_connection(tables) as con:
        return verify.verify_rotation(con, tuple(questions), tables.parent.name, links, tables=tables_digest(tables))


def _exactly(observations) -> list[str]:
    """What an observation holds, types included (a Decimal is not a float, a tuple not a list)."""
    return [repr((o.rotation, o.value, o.checks, o.error, o.rows)) for o in observations]


def test_a_question_checked_before_on_the_same_files_is_not_checked_again(tmp_path, finance_pack, finance,
                                                                          monkeypatch):
    spec, questions = finance
    tables = sorted((finance_pack / "rotations").iterdir())[0] / "tables"
    links = links_of(spec)
    checked = []
    real = verify.check_question

    def recording(con, q, *args, **kwargs):
        checked.append(q.id)
        return real(con, q, *args, **kwargs)

    monkeypatch.setattr(verify, "check_question", recording)
    half = questions[: len(questions) // 2]
    first = _observations(tables, half, str(tmp_path), monkeypatch, links)
    every = _observations(tables, questions, str(tmp_path), monkeypatch, links)  # the rest join the selection
    assert sorted(checked) == sorted(q.id for q in questions)  # each question checked once
    assert _exactly(every[: len(half)]) == _exactly(first)
    uncached = _observations(tables, questions, "off", monkeypatch, links)
    assert _exactly(every) == _exactly(uncached)
    assert any(isinstance(cell, Decimal) for o in every for row in o.rows or () for cell in row)
    checked.clear()
    assert _exactly(_observations(tables, questions, str(tmp_path), monkeypatch, links)) == _exactly(every)
    assert checked == []


def test_the_verification_keys_cover_the_files_the_links_and_what_is_asked(tmp_path, finance_pack, finance):
    spec, questions = finance
    rotation = sorted((finance_pack / "rotations").iterdir())[0]
    copy = tmp_path / "tables"
    shutil.copytree(rotation / "tables", copy)
    links = links_of(spec)
    keys = verify.verification_keys(tables_digest(copy), rotation.name, questions, links)
    assert len(set(keys.values())) == len(keys) == len(questions)
    # renumbered and reworded by another selection: the same check, the same key
    renamed = tuple(replace(q, id=f"x{q.id}", question=q.question + "?") for q in questions)
    assert verify.verification_keys(tables_digest(copy), rotation.name, renamed, links) == \
        {f"x{qid}": k for qid, k in keys.items()}
    other = tuple(replace(q, expected=tuple((r, "0") for r, _ in q.expected)) for q in questions[:1])
    assert verify.verification_keys(tables_digest(copy), rotation.name, other, links)[other[0].id] != \
        keys[other[0].id]
    assert not set(verify.verification_keys(tables_digest(copy), rotation.name, questions, ()).values()) & \
        set(keys.values())
    target = sorted(copy.glob("*.parquet"))[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1
    target.write_bytes(bytes(data))
    assert not set(verify.verification_keys(tables_digest(copy), rotation.name, questions, links).values()) & \
        set(keys.values())


def test_an_observation_is_cached_only_when_it_comes_back_exactly():
    rows = ((Decimal("12.30"), dt.date(2025, 1, 31), dt.datetime(2025, 2, 1, 8, 30), None, 1.5, float("nan"), "a"),)
    kept = verify.Observation("seed_1", "12.30", (("matches", True), ("non_empty", None)), None, rows)
    entry = verify._encoded_observation(kept)
    back = verify._decoded_observation(json.loads(json.dumps(entry)), "seed_2")
    assert _exactly([back]) == _exactly([replace(kept, rotation="seed_2")])
    assert verify._encoded_observation(replace(kept, rows=((complex(1, 2),),))) is None  # it would come back as text
    assert verify._encoded_observation(verify.Observation("seed_1", None, (), "Out of Memory Error")) is None
    assert verify._decoded_observation(["1", [["matches", "yes"]], None, None], "seed_1") is None
    assert verify._decoded_observation({"not": "an entry"}, "seed_1") is None
