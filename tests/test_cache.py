"""The cache on disk of prepared near-miss mutants: an optimisation that never changes what a build makes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from evalpack import cache, nearmiss
from evalpack.build import build_pack
from evalpack.plan import plan_pack
from evalpack.questions import derive_selected
from evalpack.spec import load_spec
from evalpack.tables import duckdb_types
from evalpack.verify import rotation_connection

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@pytest.fixture(scope="module")
def finance():
    spec = load_spec(SCHEMAS / "finance.yaml")
    questions, _ = derive_selected(spec, plan_pack(spec))
    return spec, questions


def _prepare(spec, questions, monkeypatch, folder: str) -> nearmiss.MutantSet:
    monkeypatch.setenv(cache.CACHE_ENV, folder)
    nearmiss._PREPARED.clear()  # the in-process layer would answer before the disk
    return nearmiss.prepare_mutants(spec, questions, duckdb_types(spec))


def test_cold_warm_and_off_prepare_the_same_mutants(finance, monkeypatch, tmp_path):
    spec, questions = finance
    off = _prepare(spec, questions, monkeypatch, "off")
    assert not any(tmp_path.iterdir())
    cold = _prepare(spec, questions, monkeypatch, str(tmp_path))
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == len({q.gold_sql for q in questions})
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
    entries = sorted(tmp_path.rglob("*.json"))
    entries[0].write_text("[[\"no_such_operator\", null]]")
    entries[1].write_text("{not json")
    again = _prepare(spec, questions[:5], monkeypatch, str(tmp_path))
    assert again == first
    assert all(json.loads(e.read_text())[0][0] in nearmiss.OPERATORS for e in entries)


def test_an_unwritable_cache_is_ignored(finance, monkeypatch, tmp_path):
    spec, questions = finance
    blocker = tmp_path / "a-file"  # the cache's folder is a file: nothing can be written under it, even as root
    blocker.write_text("")
    made = _prepare(spec, questions[:3], monkeypatch, str(blocker))
    assert made == _prepare(spec, questions[:3], monkeypatch, "off")
    assert blocker.read_text() == ""


def test_the_key_covers_the_code_and_the_inputs():
    fingerprint = cache.code_fingerprint(nearmiss.PREPARING_CODE)
    key = cache.entry_key("mutants", fingerprint, ["SELECT 1", "{}", "{}", None])
    assert key != cache.entry_key("mutants", fingerprint, ["SELECT 2", "{}", "{}", None])
    assert key != cache.entry_key("mutants", fingerprint, ["SELECT 1", "{}", "{}", "[]"])
    assert key != cache.entry_key("mutants", cache.code_fingerprint(("evalpack.nearmiss",)), ["SELECT 1", "{}", "{}", None])


def test_a_rotation_studied_before_is_not_studied_again_and_gives_the_same_study(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    first = build_pack(SCHEMAS / "finance.yaml", tmp_path / "first", rotations=2)

    def refuse(*args, **kwargs):
        raise AssertionError("a rotation whose files were studied before ran its mutants again")

    monkeypatch.setattr(nearmiss, "study_rotation", refuse)
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
    keys = nearmiss.study_keys(copy, rotation.name, by_id, mutants)
    assert len(set(keys.values())) == len(keys) == len({m.question_id for m in mutants}) > 1
    assert keys == nearmiss.study_keys(rotation / "tables", rotation.name, by_id, mutants)
    # one mutant fewer changes its question's key alone
    fewer = nearmiss.study_keys(rotation / "tables", rotation.name, by_id, mutants[1:])
    first = mutants[0].question_id
    assert fewer[first] != keys[first] and {q: k for q, k in fewer.items() if q != first} == \
        {q: k for q, k in keys.items() if q != first}
    # a question renumbered by another selection keeps its key
    renamed = {f"x{qid}": replace(q, id=f"x{qid}") for qid, q in by_id.items()}
    moved = [replace(m, question_id=f"x{m.question_id}") for m in mutants]
    assert nearmiss.study_keys(copy, rotation.name, renamed, moved) == {f"x{q}": k for q, k in keys.items()}
    target = sorted(copy.glob("*.csv"))[0]
    data = bytearray(target.read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    target.write_bytes(bytes(data))
    changed = nearmiss.study_keys(copy, rotation.name, by_id, mutants)
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
            return nearmiss.study_outcomes(con, tables, tables.parent.name, by_id, these, types)

    first = outcomes(str(tmp_path), earlier)
    every = outcomes(str(tmp_path), mutants)  # the other half of the questions joins the selection
    assert [set(s) for s in studied] == [set(earlier), set(mutants) - set(earlier)]
    assert list(every) == mutants and {m: every[m] for m in earlier} == first
    assert every == outcomes("off", mutants)
    assert outcomes(str(tmp_path), mutants) == every and len(studied) == 3  # all found: nothing more studied
    assert any(every.values()) and not all(every.values())
