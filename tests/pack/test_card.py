"""The dataset card (issue 18, item 6): the repo id from the spec's `repo:`, a `dataset_info` header that
`datasets` reads back as the features `load_dataset` gives, field meanings, example rows and `dev` questions,
intended use, limitations and a changelog; never a holdout answer or gold SQL, never the spec's text; the
same bytes from two builds of one spec."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import full_questions, spec_text
from test_spec import BASE

from evalpack.build import build_pack
from evalpack.core.layout import table_path
from evalpack.pack.card import (
    DUCKDB_DTYPES,
    REPO_PLACEHOLDER,
    arrow_feature,
    card_metadata,
    duckdb_dtype,
    hub_configs,
    read_card_metadata,
    render_card,
    size_category,
)

# test_spec's small spec with a holdout, a repo id and business words; v2 adds a curve point (new questions)
# and drops a family.
SHOP = BASE.replace("name: shop\n", "name: shop\nversion: 1.0.0\nlicense: apache-2.0\nrepo: acme/shop-evalpack\n"
                    "holdout: 0.3\n") + """\
semantics:
  columns: {orders.amount: order value, orders.channel: sales channel}
  measures: {turnover: {sum: orders.amount}}
  currency: EUR
"""
SHOP_V2 = (SHOP.replace("version: 1.0.0", "version: 1.1.0")
           .replace("      - {month: 3, target_value: 12000.55}\n",
                    "      - {month: 3, target_value: 12000.55}\n      - {month: 5, target_value: 11500.19}\n")
           + "questions:\n  exclude: [grand_total]\n")


def _build(tmp: Path, name: str, text: str, previous: Path | None = None) -> Path:
    spec = tmp / f"{name}.yaml"
    spec.write_text(text, encoding="utf-8")
    out = tmp / name / "shop"
    build_pack(spec, out, previous=previous)
    return out


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("card")
    v1 = _build(tmp, "v1", SHOP)
    return {"v1": v1, "v2": _build(tmp, "v2", SHOP_V2, previous=v1)}


def _manifest(pack: Path) -> dict:
    return json.loads((pack / "manifest.json").read_text(encoding="utf-8"))


def _card(pack: Path) -> str:
    return (pack / "README.md").read_text(encoding="utf-8")


def _section(card: str, title: str) -> str:
    return card.split(f"\n{title}\n", 1)[1].split("\n## ", 1)[0]


# --------------------------------------------------------------------------- the header


@pytest.mark.parametrize("which", ["retail", "finance", "shop"])
def test_dataset_info_is_what_load_dataset_reads(which, retail_pack, finance_pack, shop, tmp_path, monkeypatch):
    """Every config of the card's dataset_info, as the Hub client parses the card, has the features and
    split sizes that `datasets.load_dataset(PACK_DIR, config)` gives (which would cast the Parquet to wrong
    features, so they are also checked against the ones `datasets` infers from the Parquet alone)."""
    import datasets
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCard

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pack = {"retail": retail_pack, "finance": finance_pack, "shop": shop["v2"]}[which]
    configs = hub_configs(_manifest(pack))
    info = DatasetCard.load(pack / "README.md").data.dataset_info
    assert [c["config_name"] for c in info] == [c.name for c in configs]  # every config, in the configs' order
    infos = DatasetInfosDict.from_dataset_card_data(DatasetCard.load(pack / "README.md").data)
    for config in configs:
        loaded = datasets.load_dataset(str(pack), config.name, cache_dir=str(tmp_path / "cache"))
        entry = infos[config.name]
        assert sorted(loaded) == sorted(entry.splits) == sorted(s.name for s in config.splits)
        for split in config.splits:
            # the card's features are what load_dataset gives, and what it infers from the Parquet without them
            inferred = datasets.Features.from_arrow_schema(pq.read_schema(pack / split.path))
            assert loaded[split.name].features == entry.features == inferred, (config.name, split.name)
            assert loaded[split.name].num_rows == entry.splits[split.name].num_examples == split.rows
            assert loaded[split.name].info.splits[split.name].num_bytes == entry.splits[split.name].num_bytes


@pytest.mark.parametrize("which", ["retail", "finance"])
def test_each_duckdb_type_maps_to_the_dtype_its_parquet_has(which, retail_pack, finance_pack):
    import datasets

    pack = {"retail": retail_pack, "finance": finance_pack}[which]
    manifest = _manifest(pack)
    for table, info in manifest["tables"].items():
        schema = pq.read_schema(pack / table_path(manifest["rotations"][0], table))
        features = datasets.Features.from_arrow_schema(schema)
        for column, ctype in info["columns"].items():
            dtype = duckdb_dtype(ctype)
            assert dtype == arrow_feature(schema.field(column).type)["dtype"] == features[column].dtype, \
                (table, column, ctype)
    assert (duckdb_dtype("DECIMAL(18,2)"), duckdb_dtype("DATE"), duckdb_dtype("TIMESTAMP")) == \
        ("decimal128(18, 2)", "date32", "timestamp[us]")
    assert (duckdb_dtype("BIGINT"), duckdb_dtype("VARCHAR"), duckdb_dtype("BOOLEAN")) == ("int64", "string", "bool")


def test_the_dtype_table_matches_what_duckdb_writes_to_parquet(tmp_path):
    """Every DuckDB type of DUCKDB_DTYPES, written to Parquet by DuckDB and read back by pyarrow."""
    types = {**DUCKDB_DTYPES, "DECIMAL(18,2)": "decimal128(18, 2)", "DECIMAL(4,1)": "decimal128(4, 1)"}
    values = {"BOOLEAN": "true", "VARCHAR": "'x'", "DATE": "DATE '2025-01-01'", "BLOB": "'ab'",
              "TIMESTAMP": "TIMESTAMP '2025-01-01 10:00:00'"}
    select = ", ".join(f"CAST({values.get(t, '1')} AS {t}) AS c{i}" for i, t in enumerate(types))
    path = tmp_path / "types.parquet"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {select}) TO '{path}' (FORMAT parquet)")
    schema = pq.read_schema(path)
    for i, (ctype, dtype) in enumerate(types.items()):
        assert arrow_feature(schema.field(f"c{i}").type) == {"dtype": dtype}, ctype
        assert duckdb_dtype(ctype) == dtype


def test_size_categories_count_every_row_load_dataset_returns(retail_pack, shop):
    """Issue 55 point 6: the header said n<1K (its questions) above a table of 126,189 rows."""
    for pack in (retail_pack, shop["v1"]):
        header = read_card_metadata(_card(pack))
        splits = [s for c in hub_configs(_manifest(pack)) for s in c.splits]
        rows = sum(s.rows for s in splits)
        assert rows == sum(pq.ParquetFile(pack / s.path).metadata.num_rows for s in splits)  # what the files hold
        assert header["size_categories"] == [size_category(rows)]
    assert size_category(999) == "n<1K" and size_category(1000) == "1K<n<10K"
    assert "dataset_info" not in card_metadata(_manifest(retail_pack))  # its sizes need the pack's files


# --------------------------------------------------------------------------- the repo id


def test_the_specs_repo_is_recorded_and_named_by_the_card(shop):
    pack = shop["v1"]
    assert _manifest(pack)["repo"] == "acme/shop-evalpack"
    card = _card(pack)
    assert REPO_PLACEHOLDER not in card and "set `repo:`" not in card
    assert 'REPO = "acme/shop-evalpack"' in _section(card, "## How to load")
    assert 'REPO="acme/shop-evalpack"' in _section(card, "## How to score")
    citation = _section(card, "## Citation")
    assert "author       = {acme}" in citation
    assert "https://huggingface.co/datasets/acme/shop-evalpack/tree/v1.0.0" in citation


def test_without_repo_the_card_keeps_the_placeholder_and_says_how_to_set_it(retail_pack):
    card = _card(retail_pack)
    assert _manifest(retail_pack)["repo"] is None
    assert f'REPO = "{REPO_PLACEHOLDER}"' in card and f'REPO="{REPO_PLACEHOLDER}"' in card
    assert "set `repo:` in the spec" in _section(card, "## How to load")
    assert "set `repo:` in the spec" in _section(card, "## Citation")


# --------------------------------------------------------------------------- the body


def test_every_column_has_its_type_dtype_and_meaning(retail_pack, shop):
    card = _card(retail_pack)
    assert ("| `amount` | `DECIMAL(18,2)` | `decimal128(18, 2)` | order amount: what the customer paid for the order, "
            "net of tax; in EUR |") in card  # the spec's own description
    assert "| `ordered_at` | `DATE` | `date32` | order date: a calendar date (no time) |" in card
    assert "| `signed_up_at` | `TIMESTAMP` | `timestamp[us]` | sign-up date: a date and time |" in card
    assert "| `channel` | `BIGINT` | `int64` | sales channel: a code; 1 means web; 2 means app; 3 means store |" in card
    assert ("| `segment` | `VARCHAR` | `string` | segment: one of consumer, small_business, enterprise; "
            "small_business means small business |") in card
    dictionary = _section(card, "## Data dictionary")
    assert "- **revenue**: The total order amount of the orders, in EUR" in dictionary
    assert "- **month of an order**: An order falls in the month of its order date" in dictionary
    manifest = _manifest(retail_pack)
    for table, info in manifest["tables"].items():
        block = card.split(f"### `{table}`\n", 1)[1]
        for column in info["columns"]:
            assert f"| `{column}` | `{info['columns'][column]}` |" in block, (table, column)
            assert manifest["semantics"]["tables"][table]["columns"][column] in block
    shop_card = _card(shop["v1"])
    assert "order value: an amount in EUR, to the cent" in shop_card and "- **turnover**: The total order value" in shop_card
    assert ("customer: points at a customer (customers.customer_id); some name a customer no longer on record; "
            "may be null") in shop_card


def test_three_rows_of_each_table_from_the_first_rotation(retail_pack):
    card = _card(retail_pack)
    manifest = _manifest(retail_pack)
    first = manifest["rotations"][0]
    for table in manifest["tables"]:
        block = card.split(f"### `{table}`\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        assert f"The first 3 rows of `{first}`:" in block
        rows = pq.read_table(retail_pack / table_path(first, table)).slice(0, 3).to_pylist()
        lines = [line for line in block.splitlines() if line.startswith("| ")]
        body = lines[-3:]
        for row, line in zip(rows, body):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            assert cells[0] == str(row[next(iter(row))]), (table, line)
            assert len(cells) == len(row)


def test_example_questions_are_dev_with_sql_and_answer(retail_pack, shop):
    for pack in (retail_pack, shop["v1"]):
        card = _card(pack)
        block = card.split("### Example questions", 1)[1].split("\n## ", 1)[0]
        ids = re.findall(r"^\*\*(q\d+)\*\*", block, flags=re.M)
        records = {r["id"]: r for r in full_questions(pack)}
        assert len(ids) == 3 and len(set(ids)) == 3
        for qid in ids:
            q = records[qid]
            assert q["split"] == "dev"
            assert q["question"] in block and q["gold_sql"] in block
            assert f"answer: `{json.dumps(q['expected_answer'], ensure_ascii=False)}`" in block


@pytest.mark.parametrize("which", ["retail", "shop"])
def test_the_card_never_shows_a_holdout_answer_gold_sql_or_the_spec(which, retail_pack, shop):
    pack = {"retail": retail_pack, "shop": shop["v1"]}[which]
    card = _card(pack)
    assert card == render_card(pack)
    holdout = [q for q in full_questions(pack) if q["split"] == "holdout"]
    assert holdout, "the pack has a holdout"
    for q in holdout:
        assert q["gold_sql"] not in card, q["id"]
        answer = json.dumps(q["expected_answer"], ensure_ascii=False)
        if len(answer) >= 6:  # a short number may be any count on the card
            assert answer not in card, q["id"]
    for line in spec_text(pack).splitlines():
        if len(line.strip()) >= 25:
            assert line.strip() not in card, line
    for section in ("## How to score", "## Intended use", "## Limitations", "## Changelog"):
        assert f"\n{section}\n" in card, section
    limits = _section(card, "## Limitations")
    for needed in ("Synthetic data", "Answers fixed by declarations", "near-miss study", "Holdout answers are private",
                   "DuckDB"):
        assert needed in limits, needed


# --------------------------------------------------------------------------- the changelog


def test_a_first_version_says_so_and_a_later_one_lists_what_changed(shop):
    v1, v2 = shop["v1"], shop["v2"]
    assert _manifest(v1)["changelog"] is None
    assert "the first version of this pack" in _section(_card(v1), "## Changelog")

    before = {r["key"]: r["split"] for r in full_questions(v1)}
    after = {r["key"]: r["split"] for r in full_questions(v2)}
    log = _manifest(v2)["changelog"]
    assert log["continues"] == "1.0.0" and _manifest(v2)["splits"]["continues"] == "1.0.0"
    assert log["added"] == sorted(after.keys() - before.keys()) and log["added"]
    assert log["removed"] == sorted(before.keys() - after.keys()) and log["removed"]
    assert any(k.startswith("curve_total:orders.amount:2025-06") for k in log["added"])
    assert log["kept"] == len(after.keys() & before.keys())
    assert log["moved"] == [{"key": k, "from": before[k], "to": after[k]}
                            for k in sorted(after.keys() & before.keys()) if before[k] != after[k]]
    text = _section(_card(v2), "## Changelog")
    assert "v1.1.0 against v1.0.0" in text
    assert (f"{log['kept']} kept, {len(log['added'])} added, {len(log['removed'])} removed, "
            f"{len(log['moved'])} moved") in text
    assert f"`{log['added'][0]}`" in text and f"`{log['removed'][0]}`" in text


def test_two_builds_of_one_spec_give_the_same_card(shop, tmp_path):
    again = _build(tmp_path, "v1", SHOP)
    assert (again / "README.md").read_bytes() == (shop["v1"] / "README.md").read_bytes()


# --------------------------------------------------------------------------- an imported pack


def test_an_imported_packs_features_come_from_its_parquet(tmp_path, monkeypatch):
    """Imported tables keep the types they arrived with: dataset_info reads them from the Parquet, and a
    table with a type `datasets` has no dtype for (UUID) is left to `datasets` to describe."""
    import datasets

    from evalpack.interop.importer import import_pack

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("CREATE TABLE sales AS SELECT * FROM (VALUES (1, 10.5, DATE '2025-01-02', "
                    "TIMESTAMP '2025-01-02 10:00:00', true, 'a'), (2, 20.25, NULL, NULL, NULL, NULL)) "
                    "AS t(id, amount, day, sold_at, ok, label)")
        con.execute("CREATE TABLE tokens AS SELECT gen_random_uuid() AS token")
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "c1", "question": "How many sales are there?",
                                                  "sql": "SELECT COUNT(*) FROM sales", "answer": 2}) + "\n")
    pack = tmp_path / "pack"
    import_pack(tmp_path / "q.jsonl", data=tmp_path / "w.duckdb", output=pack)
    header = read_card_metadata(_card(pack))
    info = {c["config_name"]: c for c in header["dataset_info"]}
    assert list(info) == ["questions", "sales"]
    assert {f["name"]: f["dtype"] for f in info["sales"]["features"]} == {
        "id": "int32", "amount": "decimal128(4, 2)", "day": "date32", "sold_at": "timestamp[us]", "ok": "bool",
        "label": "string"}
    loaded = datasets.load_dataset(str(pack), "sales", cache_dir=str(tmp_path / "cache"))
    assert loaded["seed_0"].features == datasets.Features._from_yaml_list(info["sales"]["features"])
    # one database, no rotations: the card does not claim that a memorised answer fails
    assert "memorised" not in _card(pack) and "on the one database it was asked of" in _card(pack)
