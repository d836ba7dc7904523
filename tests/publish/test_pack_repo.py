"""The pack folder is its own Hub repo (issue 18, item 5): the card's configs point at the pack's own
files, so `datasets.load_dataset(PACK_DIR, config)` reads exactly what the pack holds."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from evalpack.core.scoring import load_questions
from evalpack.pack.card import hub_configs, read_card_metadata


@pytest.mark.parametrize("which", ["retail", "finance"])
def test_load_dataset_on_the_pack_folder_gives_the_parquet_rows(which, retail_pack, finance_pack, tmp_path,
                                                                  monkeypatch):
    import datasets

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pack = {"retail": retail_pack, "finance": finance_pack}[which]
    manifest = json.loads((pack / "manifest.json").read_text())
    configs = hub_configs(manifest)
    card = read_card_metadata((pack / "README.md").read_text())
    assert [c["config_name"] for c in card["configs"]] == [c.name for c in configs]
    for config in configs:
        # cache_dir: HF_DATASETS_CACHE is read when `datasets` is first imported, maybe by an earlier test, and
        # its default cache can hold another build's rows under the same fingerprint (a pack of the same path)
        loaded = datasets.load_dataset(str(pack), config.name, cache_dir=str(tmp_path / "cache"))
        assert sorted(loaded) == sorted(s.name for s in config.splits)
        for split in config.splits:
            expected = pq.read_table(pack / split.path).to_pylist()
            got = loaded[split.name].to_list()
            assert len(got) == split.rows == len(expected)
            assert got == expected, (config.name, split.name)
    # the questions config holds every question of questions.jsonl, dev and holdout each in its own split, the holdout
    # without its answers
    rows = {r["id"]: r for s in configs[0].splits for r in pq.read_table(pack / s.path).to_pylist()}
    records = load_questions(pack)
    assert sorted(rows) == sorted(r["id"] for r in records)
    assert all(rows[r["id"]]["split"] == r["split"] == s.part for s in configs[0].splits
               for r in pq.read_table(pack / s.path).to_pylist())
    for r in records:
        assert rows[r["id"]]["gold_sql"] == r["gold_sql"] and rows[r["id"]]["commitment"] == r.get("commitment")
