"""The near-miss gate (issue 54): a question a plausible mistake answers on every rotation does not ship, unless the
spec keeps it flagged; equivalence is judged on every database the spec allows, never on the rows."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from sqlglot import parse_one

from evalpack.build import build_pack
from evalpack.checks.nearmiss.ranges import always_true, declared_ranges
from evalpack.checks.nearmiss.study import IMPLIED, _prepared
from evalpack.checks.verification import NEAR_MISS_REASON
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import score_pack
from evalpack.pack.diff import survival_pct
from evalpack.spec.reader import load_spec

# whole-number targets (a rounded-to-units mistake cannot fail) and a date range with no day outside the curve's
# months (a mistake at the outer edges cannot fail on any database the spec allows)
SPEC = """\
name: gatecheck
seed: 11
rotations: 3
tables:
  tickets:
    rows: 6000
    columns:
      ticket_id: {type: int, unique: true, min: 1}
      queue: {type: categorical, choices: [billing, tech]}
      cost: {type: float, min: 1, max: 400, decimals: 2}
      opened_on: {type: date, start: "2024-01-01", end: "2024-06-30"}
outcome_curves:
  - {table: tickets, column: cost, time_column: opened_on, start_date: "2024-01-01",
     curve_points: [{month: 1, target_value: 60000}, {month: 6, target_value: 90000}]}
group_shares:
  - {table: tickets, measure: cost, group_column: queue, shares: {billing: 0.55, tech: 0.45}}
"""


def build(tmp: Path, name: str, extra: str = "") -> tuple[Path, dict]:
    spec = tmp / f"{name}.yaml"
    spec.write_text(SPEC + extra)
    out = tmp / name
    build_pack(spec, out, force=True)
    return out, json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def dropped(tmp_path_factory) -> tuple[Path, dict]:
    return build(tmp_path_factory.mktemp("gate"), "drop")


def rows_of(pack: Path, rotation: str, sql: str) -> list[tuple]:
    con = duckdb.connect()
    for table in ("tickets",):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{PackLayout(pack).table(rotation, table)}')")
    return con.execute(sql).fetchall()


def same(a: list[tuple], b: list[tuple]) -> bool:
    """The same rows in any order, numbers compared by value (a mutant's ROUND(x, 0) prints 60000 for 60000.00)."""
    def cells(rows):
        return sorted(repr(tuple(float(c) if isinstance(c, Decimal) else c for c in row)) for row in rows)
    return cells(a) == cells(b)


def test_a_question_a_mistake_passes_everywhere_is_dropped_naming_it(dropped):
    pack, manifest = dropped
    gate = manifest["near_miss_study"]["gate"]
    gated = [d for d in manifest["dropped"] if d["drop_reason"].startswith(NEAR_MISS_REASON)]
    assert gate["policy"] == "drop" and gate["dropped"] == len(gated) > 0
    assert "whole_units" in gate["dropped_by_operator"] and "whole_units" in gate["remedies"]
    # each named mistake really returns what the gold SQL returns on every rotation: rerun here, outside the build
    rotations = manifest["rotations"]
    for entry in gated:
        assert entry["passing_mistakes"], entry
        for mistake in entry["passing_mistakes"]:
            assert mistake["operator"] in entry["drop_reason"]
            for rotation in rotations:
                assert same(rows_of(pack, rotation, mistake["sql"]), rows_of(pack, rotation, entry["gold_sql"]))
    shipped = PackLayout(pack).read_records()
    assert not {r["id"] for r in shipped} & {d["id"] for d in gated}
    assert all("uncaught" not in r for r in shipped)


def test_the_card_and_the_report_say_what_the_gate_left_out(dropped):
    from evalpack.pack.report import pack_facts, pack_html

    pack, manifest = dropped
    gate = manifest["near_miss_study"]["gate"]
    said = f"The near-miss gate left out {gate['dropped']} question(s)"
    assert said in (pack / "README.md").read_text()
    page = pack_html(pack_facts(pack))
    assert said in page and all(f"{op} {n}" in page for op, n in gate["dropped_by_operator"].items())


def test_nothing_that_ships_has_a_surviving_mutant(dropped):
    _, manifest = dropped
    study = manifest["near_miss_study"]
    assert study["mutants_run"] > 0
    assert study["match_all_rate"] == 0.0 and study["survivors_total"] == 0
    assert sum(row["match_all"] for row in study["operators"].values()) == 0


def test_the_edges_no_database_can_show_are_equivalent_not_survivors(dropped):
    """The range has no day outside the curve's months: dropping its first bound is the same query on every
    database the spec allows, so it is counted as equivalent (by ranges), and does not drop the question."""
    _, manifest = dropped
    study = manifest["near_miss_study"]
    assert study["equivalent_by_ranges"].get("drop_conjunct", 0) > 0
    assert "inclusive_end" not in manifest["near_miss_study"]["gate"]["dropped_by_operator"]
    assert manifest["questions"]["shipped"] > manifest["near_miss_study"]["gate"]["dropped"]


def test_keep_ships_them_flagged_and_the_scorer_reports_them_apart(dropped, tmp_path):
    _, dropped_manifest = dropped
    pack, manifest = build(tmp_path, "keep", "near_miss:\n  gate: keep\n")
    gate = manifest["near_miss_study"]["gate"]
    assert gate["policy"] == "keep" and gate["dropped"] == 0
    assert gate["kept_flagged"] == dropped_manifest["near_miss_study"]["gate"]["dropped"] > 0
    records = PackLayout(pack).read_records()
    flagged = [r for r in records if r.get("uncaught")]
    assert len(flagged) == gate["kept_flagged"]
    assert manifest["near_miss_study"]["survivors_total"] > 0  # kept, so their survivors are in the study
    # one survival rate: `evalpack diff` and the release gate read the manifest's counts as the manifest does
    study = manifest["near_miss_study"]
    assert survival_pct(study["operators"]) == pytest.approx(100 * study["match_all_rate"], abs=0.005)
    assert study["match_all_rate"] == round(study["survivors_total"] / study["mutants_run"], 4)
    report = score_pack(pack, {r["id"]: r["gold_sql"] for r in records if r["answerable"]})
    by_gate = report["summary"]["by_gate"]
    assert by_gate["flagged"]["n"] == len(flagged)
    assert by_gate["flagged"]["n"] + by_gate["not flagged"]["n"] == report["summary"]["overall"]["n"]


def test_the_gate_decides_the_same_on_every_build(dropped, tmp_path):
    pack, manifest = dropped
    again, second = build(tmp_path, "drop")
    assert second["dropped"] == manifest["dropped"]
    assert (again / "questions.jsonl").read_bytes() == (pack / "questions.jsonl").read_bytes()


def test_a_bad_gate_or_margin_is_one_line_naming_the_key(tmp_path):
    from evalpack.core.errors import SpecError
    for extra, key in (("near_miss:\n  gate: maybe\n", "near_miss.gate"),
                       ("near_miss:\n  margin: {tickets.cost: 1 month}\n", "near_miss.margin.tickets.cost"),
                       ("near_miss:\n  margin: {tickets.opened_on: 40 months}\n", "near_miss.margin.tickets.opened_on"),
                       ("near_miss:\n  gates: drop\n", "near_miss.gates")):
        path = tmp_path / "bad.yaml"
        path.write_text(SPEC + extra)
        with pytest.raises(SpecError) as err:
            load_spec(path)
        assert key in str(err.value) and "\n" not in str(err.value)


def test_a_margin_widens_the_range_so_rows_lie_outside_the_months(tmp_path):
    pack, manifest = build(tmp_path, "margin", "near_miss:\n  margin: {tickets.opened_on: 1 month}\n")
    column = load_spec(tmp_path / "margin.yaml").tables[0].column("opened_on")
    assert (str(column.start), str(column.end)) == ("2023-12-01", "2024-07-31")
    outside = rows_of(pack, manifest["rotations"][0], "SELECT count(*) FROM tickets WHERE opened_on < DATE '2024-01-01' "
                      "OR opened_on > DATE '2024-06-30'")[0][0]
    assert outside > 0
    assert manifest["near_miss_study"]["equivalent_by_ranges"] == {}
    assert manifest["near_miss_study"]["match_all_rate"] == 0.0


RANGES = {"orders": {"ordered_at": ["date", "2025-01-01", "2025-12-31"], "channel": ["text", "app", "web"],
                     "period": ["text", "2025-01", "2025-02"]}}
JAN = "SELECT SUM(amount) FROM orders WHERE ordered_at >= CAST('2025-01-01' AS DATE) AND ordered_at < CAST('2025-02-01' AS DATE)"
MAR = "SELECT SUM(amount) FROM orders WHERE ordered_at >= CAST('2025-03-01' AS DATE) AND ordered_at < CAST('2025-04-01' AS DATE)"


@pytest.mark.parametrize(("sql", "read_true"), [
    (JAN, ["ordered_at >= CAST('2025-01-01' AS DATE)"]),
    ("SELECT COUNT(*) FROM orders WHERE ordered_at <= CAST('2026-01-01' AS DATE)", ["ordered_at <= CAST('2026-01-01' AS DATE)"]),
    ("SELECT COUNT(*) FROM orders WHERE ordered_at <= CAST('2025-12-31' AS DATE)", ["ordered_at <= CAST('2025-12-31' AS DATE)"]),
    ("SELECT COUNT(*) FROM orders WHERE CAST('2024-12-31' AS DATE) < ordered_at", ["CAST('2024-12-31' AS DATE) < ordered_at"]),
    # the range's last day is a row's day: a bound that leaves it out is not always true
    ("SELECT COUNT(*) FROM orders WHERE ordered_at < CAST('2025-12-31' AS DATE)", []),
    ("SELECT COUNT(*) FROM orders WHERE ordered_at > CAST('2025-01-01' AS DATE)", []),
    # a NULL-extended row holds no date, and a CTE's column is not the table's
    ("SELECT COUNT(*) FROM customers AS c LEFT JOIN orders AS o ON c.id = o.customer_id "
     "WHERE o.ordered_at >= CAST('2025-01-01' AS DATE)", []),
    ("WITH m AS (SELECT ordered_at + 400 AS ordered_at FROM orders) SELECT COUNT(*) FROM m "
     "WHERE ordered_at >= CAST('2025-01-01' AS DATE)", []),
    # labels: a text period column's months, a categorical column's choices (letters sort after digits)
    ("SELECT COUNT(*) FROM orders WHERE period >= '2025-01' AND channel = 'web'", ["period >= '2025-01'"]),
    ("SELECT COUNT(*) FROM orders WHERE channel >= '2025-01'", ["channel >= '2025-01'"]),
    ("SELECT COUNT(*) FROM orders WHERE period > '2025-01'", []),
    ("SELECT COUNT(*) FROM orders WHERE channel < 'web'", []),
])
def test_only_comparisons_every_allowed_database_makes_true_are_read_as_true(sql, read_true):
    reduced = always_true(parse_one(sql, read="duckdb"), RANGES)
    if not read_true:
        assert reduced is None
        return
    assert reduced is not None
    printed = reduced.sql("duckdb")
    assert "TRUE" in printed and not any(part in printed for part in read_true)


def test_equivalent_only_by_accident_of_the_rows_is_not_equivalent():
    """A March question's `<=` end: no row may fall on April 1st in these rows (then the mutant passes), but a
    database the spec allows can hold one, so the mutant is run, not called equivalent; at the range's own end
    the same edit is equivalent, since no allowed database has a day after it."""
    schema = json.dumps({"orders": {"amount": "DECIMAL(18,2)", "ordered_at": "DATE", "customer_id": "BIGINT"}})
    ranges = json.dumps(RANGES)
    march = dict(_prepared(MAR, schema, "{}", None, "{}", "{}", ranges))
    assert march["inclusive_end"] not in (None, IMPLIED)
    dec = MAR.replace("2025-03-01", "2025-12-01").replace("2025-04-01", "2026-01-01")
    december = dict(_prepared(dec, schema, "{}", None, "{}", "{}", ranges))
    assert december["inclusive_end"] == IMPLIED
    # the rows where the March mutant passes by accident: none on April 1st; it is still a survivor to run
    con = duckdb.connect()
    con.execute("CREATE TABLE orders AS SELECT 10.00::DECIMAL(18,2) AS amount, DATE '2025-03-05' + i::INTEGER AS ordered_at, "
                "1::BIGINT AS customer_id FROM range(20) t(i)")
    assert con.execute(march["inclusive_end"][0]).fetchall() == con.execute(MAR).fetchall()
    # without the ranges (a nullable column, or none declared) nothing is implied
    plain = dict(_prepared(dec, schema, "{}", None, "{}", "{}", "{}"))
    assert plain["inclusive_end"] not in (None, IMPLIED)


def test_the_traps_columns_are_never_read_by_their_declared_ranges():
    """A date sibling copies its column's start and end but holds later days; the status column marks rows that do
    not count with labels; the channel is stored as codes: none of them bounds a comparison."""
    from evalpack.checks.nearmiss.study import nullable_columns

    spec = load_spec(Path(__file__).resolve().parents[2] / "schemas" / "retail.yaml")
    declared = declared_ranges(spec, nullable_columns(spec))["orders"]
    assert spec.traps.sibling("orders", "shipped_on") and "ordered_at" in declared
    assert not {"shipped_on", "status", "channel"} & set(declared)
