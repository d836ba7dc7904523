"""segment_shares and per_parent as SPEC_FORMAT.md spells them (`via:` the child's foreign key, `attribute:` the
parent's column, per_parent's `parent:` and `child:` tables) and as evalpack spelled them first (`by:`, and a
dotted `child:`): both read into the same declarations and build the same questions, answers and tables; a
`via` that is no foreign key of the declaration's table to the attribute's (or parent's) table, or two
spellings that disagree, is refused with exit 2, the file, line and key path."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import verified_kinds
from test_spec import SCHEMA_FILE

from evalpack.cli import main
from evalpack.core.errors import SpecError
from evalpack.spec.reader import parse_spec

SPECS = Path(__file__).resolve().parents[1] / "specs"
ROOT = Path(__file__).resolve().parents[2]

# (evalpack's spelling, SPEC_FORMAT.md's) of each spec's declarations
SHOP_JOINS = (SPECS / "shop_joins.yaml", (
    ("{table: orders, measure: amount, by: regions.zone,",
     "{table: orders, measure: amount, via: orders.customer_id, attribute: regions.zone,"),
    ("{child: orders.customer_id, counts:", "{parent: customers, child: orders, via: orders.customer_id, counts:"),
))
COHORTS = (SPECS / "cohorts.yaml", (
    ("by: customers.signed_up_at,", "via: orders.customer_id, attribute: customers.signed_up_at,"),
    ("{child: orders.customer_id, counts:", "{parent: customers, child: orders, via: orders.customer_id, counts:"),
))
RETAIL = (ROOT / "schemas" / "retail.yaml", (
    ("    by: customers.segment\n    shares: {consumer: 0.55, small_business: 0.3, enterprise: 0.15}\n\n",  # same lines
     "    via: orders.customer_id\n    attribute: customers.segment\n"
     "    shares: {consumer: 0.55, small_business: 0.3, enterprise: 0.15}\n"),
    ("  - child: orders.customer_id ", "  - via: orders.customer_id    "),
))


def documented(case: tuple[Path, tuple]) -> str:
    """The case's spec with its declarations in SPEC_FORMAT.md's spelling."""
    path, changes = case
    text = path.read_text(encoding="utf-8")
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("case", [SHOP_JOINS, COHORTS, RETAIL], ids=["grandparent", "date_grain", "retail"])
def test_both_spellings_read_into_the_same_spec(case) -> None:
    engine = parse_spec(case[0].read_text(encoding="utf-8"), file="spec.yaml")
    spelled = parse_spec(documented(case), file="spec.yaml")
    assert spelled.segment_shares and spelled.per_parent
    assert replace(spelled, source=engine.source, sha256=engine.sha256) == engine


def test_both_spellings_mixed_in_one_entry_are_read_when_they_agree() -> None:
    path, _ = COHORTS
    text = path.read_text(encoding="utf-8").replace(
        "by: customers.signed_up_at,", "by: customers.signed_up_at, attribute: customers.signed_up_at,").replace(
        "{child: orders.customer_id, counts:", "{child: orders.customer_id, via: orders.customer_id, counts:")
    engine = parse_spec(path.read_text(encoding="utf-8"), file="spec.yaml")
    assert replace(parse_spec(text, file="spec.yaml"), source=engine.source, sha256=engine.sha256) == engine


def file_hashes(pack: Path) -> dict[str, str]:
    return {str(f.relative_to(pack)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(pack.rglob("*")) if f.is_file()}


def test_the_documented_spelling_builds_the_same_questions_answers_and_tables(tmp_path: Path, capsys) -> None:
    """Byte for byte: only the files that carry the spec's own text or hash differ."""
    packs = {}
    for name, text in (("engine", COHORTS[0].read_text(encoding="utf-8")), ("documented", documented(COHORTS))):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text, encoding="utf-8")
        assert main(["build", str(spec), "-o", str(tmp_path / name), "--jobs", "1"]) == 0, capsys.readouterr().err
        packs[name] = file_hashes(tmp_path / name)
    engine, spelled = packs["engine"], packs["documented"]
    assert engine.keys() == spelled.keys()
    same = {f for f in engine if engine[f] == spelled[f]}
    assert {"questions.jsonl", "data/questions/dev.parquet"} <= same
    assert sum(f.startswith("rotations/") for f in same) == sum(f.startswith("rotations/") for f in engine) > 0
    assert set(engine) - same == {"manifest.json", "attestation.intoto.json"}  # the spec's name, hash and text
    manifests = [json.loads((tmp_path / name / "manifest.json").read_text()) for name in packs]
    assert [m.pop("spec")["file"] for m in manifests] == ["engine.yaml", "documented.yaml"]
    assert manifests[0] == manifests[1]
    assert {"segment_month", "period_parents_at_least"} <= verified_kinds(tmp_path / "documented")


# A second foreign key on orders (to stores), for a `via` that leads to the wrong parent.
STORES = SHOP_JOINS[0].read_text(encoding="utf-8").replace(
    "tables:\n", "tables:\n  stores:\n    rows: 5\n    columns:\n      store_id: {type: int, unique: true, min: 1}\n",
    1).replace("      channel:", "      store_id: {type: foreign_key, references: stores.store_id}\n      channel:", 1)
SEGMENT = "  - {table: orders, measure: amount, by: regions.zone,"
PER_PARENT = "  - {child: orders.customer_id, counts:"


@pytest.mark.parametrize(("old", "new", "where", "says"), [
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, via: orders.store_id, attribute: regions.zone,",
        "segment_shares[0].via", "orders.store_id is a foreign key to stores, not to customers, through which "
        "orders reaches regions (`attribute: regions.zone`); write `via: orders.customer_id`",
        id="segment_via_to_another_parent"),
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, via: orders.channel, attribute: customers.country,",
        "segment_shares[0].via", "orders.channel is a categorical column; this needs foreign_key",
        id="segment_via_not_a_foreign_key"),
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, via: customers.region_id, attribute: regions.zone,",
        "segment_shares[0].via", "`via: customers.region_id` is a column of customers, but `table` is orders",
        id="segment_via_of_another_table"),
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, by: regions.zone, attribute: customers.country,",
        "segment_shares[0].by", "`by: regions.zone` and `attribute: customers.country` are two spellings of one key",
        id="segment_by_and_attribute_disagree"),
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, via: orders.customer_id, attribute: regions.zonee,",
        "segment_shares[0].attribute", "table 'regions' has no column 'zonee'; did you mean 'zone'?",
        id="segment_attribute_unknown_column"),
    pytest.param(
        SEGMENT, "  - {table: orders, measure: amount, via: orders.customer_id,",
        "segment_shares[0]", "missing required key 'attribute' (or 'by', its other spelling)",
        id="segment_without_attribute"),
    pytest.param(
        PER_PARENT, "  - {parent: stores, child: orders, via: orders.customer_id, counts:",
        "per_parent[0].parent", "orders.customer_id is a foreign key to customers, not to stores; write `parent: "
        "customers`, or name a foreign key of orders to stores in `via`",
        id="per_parent_wrong_parent"),
    pytest.param(
        PER_PARENT, "  - {parent: customers, child: orders, via: orders.order_id, counts:",
        "per_parent[0].via", "orders.order_id is a int column; this needs foreign_key",
        id="per_parent_via_not_a_foreign_key"),
    pytest.param(
        PER_PARENT, "  - {parent: regions, child: orders, via: customers.region_id, counts:",
        "per_parent[0].via", "`via: customers.region_id` is a column of customers, but `child` is orders",
        id="per_parent_via_of_another_table"),
    pytest.param(
        PER_PARENT, "  - {parent: customers, child: orders, counts:",
        "per_parent[0].child", "`child: orders` names a table; name its foreign key to the parent too: "
        "`via: orders.<column>`",
        id="per_parent_child_table_without_via"),
    pytest.param(
        PER_PARENT, "  - {child: orders.customer_id, via: orders.store_id, counts:",
        "per_parent[0].child", "`child: orders.customer_id` and `via: orders.store_id` are two spellings of one key",
        id="per_parent_child_and_via_disagree"),
])
def test_a_via_that_disagrees_is_refused_with_exit_2_and_its_key_path(old, new, where, says, tmp_path: Path,
                                                                       capsys) -> None:
    assert STORES.count(old) == 1
    text = STORES.replace(old, new)
    spec = tmp_path / "shop.yaml"
    spec.write_text(text, encoding="utf-8")
    line = text[:text.index(new)].count("\n") + 1
    assert main(["build", str(spec), "-o", str(tmp_path / "pack"), "--jobs", "1"]) == 2
    captured = capsys.readouterr()
    assert f"{spec}:{line}: {where}: " in captured.err and says in captured.err, captured.err
    assert captured.out == "" and "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.yaml"]


def test_the_spec_the_refusals_edit_is_valid() -> None:
    """The refusals above are for their one change, not for the added stores table."""
    spec = parse_spec(STORES, file="shop.yaml")
    assert ("stores", "store_id", "orders", "store_id") in {
        (r.parent_table, r.parent_column, r.child_table, r.child_column) for r in spec.relationships}


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


@pytest.mark.parametrize("case", [SHOP_JOINS, COHORTS, RETAIL], ids=["grandparent", "date_grain", "retail"])
def test_the_json_schema_accepts_both_spellings(case) -> None:
    for text in (case[0].read_text(encoding="utf-8"), documented(case)):
        assert [e.message for e in validator().iter_errors(yaml.safe_load(text))] == []


@pytest.mark.parametrize(("old", "new"), [
    (SEGMENT, "  - {table: orders, measure: amount,"),  # no column to split by
    (SEGMENT, "  - {table: orders, measure: amount, attribute: zone,"),  # not table.column
    (PER_PARENT, "  - {parent: customers, child: orders, counts:"),  # a child table without via
    (PER_PARENT, "  - {parent: customers, counts:"),
    (PER_PARENT, "  - {child: orders, via: customer_id, counts:"),
])
def test_the_json_schema_and_the_loader_refuse_a_declaration_without_its_column(old, new) -> None:
    text = STORES.replace(old, new)
    assert not validator().is_valid(yaml.safe_load(text))
    with pytest.raises(SpecError):
        parse_spec(text, file="shop.yaml")
