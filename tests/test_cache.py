"""The cache on disk of prepared near-miss mutants: an optimisation that never changes what a build makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpack import cache, nearmiss
from evalpack.plan import plan_pack
from evalpack.questions import derive_selected
from evalpack.spec import load_spec
from evalpack.tables import duckdb_types

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
