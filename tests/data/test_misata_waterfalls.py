"""Misata-format specs that Misata 0.9.8 builds (issue 21 point 6): waterfalls whose period column is text
('YYYY-MM' labels) and whose amount column has `min: 0` build unchanged with every declared fact exact on every
rotation; where evalpack must refuse a Misata spec, `evalpack build` exits 2 with one line naming the key, what
Misata does with it and what to write, and the spec written as it says builds.

The specs are ours, in Misata's evalpack format only: an MRR bridge as Misata's declaration reference shows one (a
movements table, an opening balance, an ending value per 'YYYY-MM' period, inflow and outflow shares) in the column
types Misata writes it into (a text period, a text movement type, a positive amount). tests/pack/test_misata_packs.py
builds the same specs with Misata itself and scores its packs with `evalpack score`."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from conftest import verified_records
from test_spec import edit

from evalpack.cli import main
from evalpack.data.generate import table_batches
from evalpack.data.plan import plan_rotation
from evalpack.spec.reader import parse_spec

TEXT_BRIDGE = """\
name: mrr_bridge
seed: 17
rotations: 3
tables:
  mrr_movements:
    rows: 600
    columns:
      movement_id: {type: int, unique: true, min: 1, max: 10000000}
      period: {type: text}
      movement_type: {type: text}
      amount: {type: float, min: 0, decimals: 2}
waterfalls:
  - table: mrr_movements
    starting_value: 100000
    points:
      - {period: "2026-01", ending_value: 106000.37}
      - {period: "2026-02", ending_value: 112480.12}
      - {period: "2026-03", ending_value: 109955.48}
      - {period: "2026-04", ending_value: 117310.09}
      - {period: "2026-05", ending_value: 121004.66}
      - {period: "2026-06", ending_value: 126870.31}
    inflow_shares: {new: 0.7, expansion: 0.3}
    outflow_shares: {churn: 1.0}
"""

# A date period column with a month of room on each side, a positive amount with a max, and no shares: Misata's
# default shares (new 0.65 / expansion 0.35, churn 0.7 / contraction 0.3).
DATED_BRIDGE = """\
name: dated_bridge
seed: 23
rotations: 3
tables:
  mrr_movements:
    rows: 500
    columns:
      movement_id: {type: int, unique: true, min: 1, max: 10000000}
      period: {type: date, start: "2025-12-01", end: "2026-05-31"}
      movement_type: {type: categorical, choices: [new, expansion, contraction, churn]}
      amount: {type: float, min: 0, max: 20000, decimals: 2}
waterfalls:
  - table: mrr_movements
    period_column: period
    type_column: movement_type
    amount_column: amount
    starting_value: 250000.00
    outflow_rate: 0.04
    points:
      - {period: "2026-01", ending_value: 262410.55}
      - {period: "2026-02", ending_value: 271980.13}
      - {period: "2026-03", ending_value: 268450.72}
      - {period: "2026-04", ending_value: 279112.09}
"""


# An outcome curve in Misata's format, for the refusals of its keys.
CURVE = """\
name: curve
tables:
  orders:
    rows: 300
    columns:
      order_id: {type: int, unique: true, min: 1}
      amount: {type: float, min: 1, max: 900, decimals: 2}
      ordered_on: {type: date, start: "2023-12-01", end: "2024-04-30"}
outcome_curves:
  - table: orders
    column: amount
    time_column: ordered_on
    start_date: "2024-01-01"
    curve_points:
      - {month: 1, target_value: 20000.37}
      - {month: 3, target_value: 26000.18}
"""
DATED = 'ordered_on: {type: date, start: "2023-12-01", end: "2024-04-30"}'
START = 'start_date: "2024-01-01"\n'


@dataclass(frozen=True)
class Bridge:
    text: str
    starting: str
    endings: dict[str, str]  # 'YYYY-MM' -> the declared ending value
    inflows: dict[str, Fraction]
    outflows: dict[str, Fraction]
    rate: Fraction
    seeds: tuple[int, ...]


BRIDGES = {
    "text_period": Bridge(TEXT_BRIDGE, "100000", {"2026-01": "106000.37", "2026-02": "112480.12", "2026-03": "109955.48",
                                                  "2026-04": "117310.09", "2026-05": "121004.66", "2026-06": "126870.31"},
                          {"new": Fraction(7, 10), "expansion": Fraction(3, 10)}, {"churn": Fraction(1)},
                          Fraction(3, 100), (17, 18, 19)),
    "date_period_default_shares": Bridge(
        DATED_BRIDGE, "250000.00", {"2026-01": "262410.55", "2026-02": "271980.13", "2026-03": "268450.72",
                                    "2026-04": "279112.09"},
        {"new": Fraction(65, 100), "expansion": Fraction(35, 100)}, {"churn": Fraction(7, 10), "contraction": Fraction(3, 10)},
        Fraction(4, 100), (23, 24, 25)),
}


def build(text: str, tmp_path: Path, capsys, name: str = "spec") -> tuple[int, str, str, Path]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / f"{name}_pack"
    code = main(["build", str(spec), "-o", str(out), "--jobs", "1"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err, out


def month_of(con: duckdb.DuckDBPyConnection, bridge: Bridge) -> str:
    """The SQL for a row's 'YYYY-MM' period, whatever the period column's type."""
    kind = con.execute("SELECT data_type FROM information_schema.columns WHERE column_name = 'period'").fetchone()[0]
    return "period" if kind == "VARCHAR" else "strftime(period, '%Y-%m')"


@pytest.mark.parametrize("case", sorted(BRIDGES))
def test_misata_waterfall_builds_unchanged_with_every_declared_fact_exact(case: str, tmp_path: Path, capsys) -> None:
    bridge = BRIDGES[case]
    code, out, err, pack = build(bridge.text, tmp_path, capsys)
    assert code == 0, err
    manifest = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["spec"]["text"] == bridge.text  # built unchanged
    inflows = ", ".join(f"'{k}'" for k in bridge.inflows)
    for seed in bridge.seeds:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW mrr_movements AS SELECT * FROM "
                    f"read_parquet('{pack}/rotations/seed_{seed}/tables/mrr_movements.parquet')")
        month = month_of(con, bridge)
        # every amount is stored positive (min: 0), the movement type giving its direction, as Misata writes them
        assert con.execute("SELECT COUNT(*) FROM mrr_movements WHERE amount < 0 OR amount IS NULL").fetchone()[0] == 0
        if "max: 20000" in bridge.text:
            assert con.execute("SELECT MAX(amount) FROM mrr_movements").fetchone()[0] <= 20000
        if month == "period":  # a text period column holds exactly the declared 'YYYY-MM' labels
            labels = {r[0] for r in con.execute("SELECT DISTINCT period FROM mrr_movements").fetchall()}
            assert labels == set(bridge.endings)
        signed = f"CASE WHEN movement_type IN ({inflows}) THEN amount ELSE -amount END"
        previous = Decimal(bridge.starting)
        for label, ending in bridge.endings.items():
            net, balance = con.execute(
                f"SELECT SUM({signed}) FILTER (WHERE {month} = '{label}'), {bridge.starting} + "
                f"SUM({signed}) FILTER (WHERE {month} <= '{label}') FROM mrr_movements "
                f"WHERE {month} >= '{min(bridge.endings)}'").fetchone()
            assert balance == Decimal(ending), (seed, label, balance)  # the declared ending, to the cent
            assert net == Decimal(ending) - previous, (seed, label)
            # gross outflow as Misata plans it: the rate of the last balance, raised to cover a decline
            units = {k: int(v * 100) for k, v in con.execute(
                f"SELECT movement_type, SUM(amount) FROM mrr_movements WHERE {month} = '{label}' GROUP BY ALL"
            ).fetchall()}
            out_total = max(round(bridge.rate * Fraction(previous) * 100), -int(net * 100), 0)
            in_total = int(net * 100) + out_total
            for kinds, total in ((bridge.inflows, in_total), (bridge.outflows, out_total)):
                for kind, share in kinds.items():
                    assert abs(units.get(kind, 0) - total * share) < 3, (seed, label, kind, units, total)
            assert set(units) <= set(bridge.inflows) | set(bridge.outflows)
            previous = Decimal(ending)
        con.close()
    # the questions ask for the declared endings, in SQL that signs each amount by its type
    records = verified_records(pack)  # shipped, or left out by the near-miss gate: either way verified
    endings = [r for r in records if r["kind"] == "waterfall_ending"]
    assert sorted(Decimal(str(r["expected_answer"])) for r in endings) == sorted(map(Decimal, bridge.endings.values()))
    assert all(f"CASE WHEN movement_type IN ({inflows}) THEN amount ELSE -amount END" in r["gold_sql"] for r in endings)
    # the dictionary, not the evidence, says how an amount gets its sign
    dictionary = json.loads((pack / "dictionary.json").read_text(encoding="utf-8"))
    columns = {c["name"]: c for t in dictionary["tables"] if t["name"] == "mrr_movements" for c in t["columns"]}
    assert "always stored positive" in columns["amount"]["description"]
    assert {v["value"]: v["meaning"].split(",")[0] for v in columns["movement_type"]["values"]} == {
        **{k: "an inflow" for k in bridge.inflows}, **{k: "an outflow" for k in bridge.outflows}}
    assert all(r["evidence"] is None for r in endings if "evidence" in r)  # the shipped ones carry it
    certificate = json.loads((pack / "certificate.json").read_text(encoding="utf-8"))
    assert certificate["all_match"]


def test_a_text_period_waterfall_says_its_outer_edges_cannot_be_tested(tmp_path: Path, capsys) -> None:
    code, out, err, _ = build(TEXT_BRIDGE, tmp_path, capsys)
    assert code == 0, err
    assert "mrr_movements.period: a text period column holds only the declared months' labels" in out


def test_signed_waterfalls_keep_their_amounts_and_questions(tmp_path: Path) -> None:
    """An amount column that allows negatives still stores outflows negative (evalpack's own waterfalls)."""
    text = edit("amount: {type: float, min: 0, max: 20000, decimals: 2}", "amount: {type: float, min: -20000, max: "
                "20000, decimals: 2}", base=DATED_BRIDGE)
    spec = parse_spec(text, file="signed.yaml")
    facts = plan_rotation(spec, 23).answer_key.waterfalls[0]
    assert facts.signed and facts.movement_sql() == "amount"
    assert any(v < 0 for _, values in facts.components for v in values)


# --------------------------------------------------------------------------- refusals: key, Misata, what to write


@dataclass(frozen=True)
class Refusal:
    id: str
    text: str
    says: tuple[str, ...]  # fragments of the one line: the key path, what Misata does, what to write
    instead: tuple[str, str] | None = None  # (old, new): the spec as the message says to write it, which builds


REFUSALS = (
    Refusal("period_categorical", edit("period: {type: text}", "period: {type: categorical, choices: [2026-01]}",
                                       base=TEXT_BRIDGE),
            ("waterfalls[0].period_column:", "Misata writes each point's period label", "write `period: {type: text}`"),
            ("period: {type: categorical, choices: [2026-01]}", "period: {type: text}")),
    Refusal("period_int", edit("period: {type: text}", "period: {type: int, min: 1, max: 12}", base=TEXT_BRIDGE),
            ("waterfalls[0].period_column:", "is a int column; Misata writes", "write `period: {type: text}`"),
            ("period: {type: int, min: 1, max: 12}", "period: {type: text}")),
    Refusal("type_boolean", edit("movement_type: {type: text}", "movement_type: {type: boolean}", base=TEXT_BRIDGE),
            ("waterfalls[0].type_column:", "Misata writes the movement type labels into it",
             "write `movement_type: {type: categorical, choices: [new, expansion, churn]}`"),
            ("movement_type: {type: boolean}", "movement_type: {type: categorical, choices: [new, expansion, churn]}")),
    Refusal("amount_int", edit("amount: {type: float, min: 0, decimals: 2}", "amount: {type: int, min: 0}",
                               base=TEXT_BRIDGE),
            ("waterfalls[0].amount_column:", "Misata writes amounts with cents into it",
             "write `amount: {type: float, min: 0, decimals: 2}`"),
            ("amount: {type: int, min: 0}", "amount: {type: float, min: 0, decimals: 2}")),
    Refusal("period_label", edit('period: "2026-03"', 'period: "march"', base=TEXT_BRIDGE),
            ("waterfalls[0].points[2].period:", "Misata writes any label as it is given",
             'write the month as period: "2025-01"'),
            ('period: "march"', 'period: "2026-03"')),
    Refusal("shares_not_one", edit("inflow_shares: {new: 0.7, expansion: 0.3}", "inflow_shares: {new: 0.6, expansion: 0.3}",
                                   base=TEXT_BRIDGE),
            ("waterfalls[0].inflow_shares:", "Misata rescales them to 1",
             "write inflow_shares: {new: 0.666666666667, expansion: 0.333333333333}"),
            ("inflow_shares: {new: 0.6, expansion: 0.3}", "inflow_shares: {new: 0.666666666667, expansion: 0.333333333333}")),
    Refusal("segments", edit("    outflow_shares: {churn: 1.0}\n", "    outflow_shares: {churn: 1.0}\n    segment_column: tenant\n"
                             "    segment_value: acme\n", base=TEXT_BRIDGE),
            ("waterfalls[0].segment_column:", "Misata splits one movements table between several waterfalls",
             "give each segment its own movements table and waterfall, and remove segment_column"),
            ("    segment_column: tenant\n    segment_value: acme\n", "")),
    Refusal("amount_min_too_high", edit("amount: {type: float, min: 0, decimals: 2}",
                                        "amount: {type: float, min: 50, decimals: 2}", base=TEXT_BRIDGE),
            ("waterfalls[0]:", "does not fit", "Misata writes a waterfall's amounts whatever the column's min and max",
             "raise rows or widen min/max"),
            ("min: 50,", "min: 0,")),
    Refusal("text_type", edit("movement_type: {type: text}", "movement_type: {type: text}\n      plate: {type: text, "
                              "text_type: license_plate}", base=TEXT_BRIDGE),
            ("tables.mrr_movements.columns.plate.text_type:", "Misata draws license_plate values for it",
             "write `type: categorical, choices: [...]`"),
            ("plate: {type: text, text_type: license_plate}", "plate: {type: categorical, choices: [AB1, CD2]}")),
)


# Misata keys evalpack reads: the spec builds as written, and what evalpack does without is a warning naming it.
READ = (
    ("name", edit("name: mrr_bridge", "name: MRR Bridge (2026)", base=TEXT_BRIDGE),
     "name: 'MRR Bridge (2026)' is a display name (Misata takes any); evalpack names the dataset, its files and its "
     "Hub repo mrr_bridge_2026"),
    ("domain", "domain: saas\n" + TEXT_BRIDGE, ":1: domain: read and not used: Misata picks realistic value"),
    ("distribution", edit("amount: {type: float, min: 0, decimals: 2}",
                          "amount: {type: float, min: 0, decimals: 2, distribution: lognormal}", base=TEXT_BRIDGE),
     "mrr_movements.amount: distribution read and not used: its plan sets its values to the declared totals"),
    ("probabilities", edit("movement_type: {type: text}", "movement_type: {type: text}\n      plan: {type: "
                           "categorical, choices: [free, pro], probabilities: [0.8, 0.2]}", base=TEXT_BRIDGE), None),
    ("concentration", edit(START, START + "    concentration: 2.0\n", base=CURVE),
     "outcome_curves[0].concentration: read and not used: Misata spreads a period's total over its rows"),
    ("intra_period_pattern", edit(START, START + "    intra_period_pattern: weekday_heavy\n", base=CURVE),
     "outcome_curves[0].intra_period_pattern: read and not used: Misata leans a period's rows towards weekdays"),
    ("pattern_type", edit(START, START + "    pattern_type: seasonal\n", base=CURVE),
     "outcome_curves[0].pattern_type: read and not used: Misata shapes the months between the declared points"),
    # Misata's dbt example: a curve's date column without start or end is dated inside the curve's months
    ("start", edit(DATED, "ordered_on: {type: date}", base=CURVE),
     "tables.orders.columns.ordered_on declares no start or end: its range is the outcome curve's months"),
)


@pytest.mark.parametrize("key, text, warning", READ, ids=[r[0] for r in READ])
def test_a_misata_key_evalpack_reads_builds_and_says_what_it_did_without(key, text, warning, tmp_path: Path,
                                                                         capsys) -> None:
    code, out, err, pack = build(text, tmp_path, capsys, key)
    assert code == 0, err
    warnings = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))["warnings"]
    if warning is not None:
        assert any(warning in w for w in warnings), warnings
        assert warning in out
    else:
        assert not [w for w in warnings if key in w], warnings


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.id for r in REFUSALS])
def test_a_misata_spec_evalpack_cannot_build_is_refused_with_the_key_misata_and_what_to_write(
        refusal: Refusal, tmp_path: Path, capsys) -> None:
    code, out, err, pack = build(refusal.text, tmp_path, capsys, refusal.id)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in refusal.says:
        assert fragment in err, (fragment, err)
    assert not pack.exists()
    if refusal.instead:
        old, new = refusal.instead
        assert old in refusal.text
        code, out, err, _ = build(refusal.text.replace(old, new), tmp_path, capsys, refusal.id + "_fixed")
        assert code == 0, err


def test_a_curve_s_undated_date_column_takes_the_curve_s_months_as_its_range() -> None:
    """As Misata dates such rows (its dbt example has no start or end on the curve's column): the range is the
    first point's month to the last's, every row inside it; a declared range is left as written."""
    spec = parse_spec(edit(DATED, "ordered_on: {type: date}", base=CURVE), file="curve.yaml")
    col = spec.table("orders").column("ordered_on")
    assert (col.start, col.end, col.dated) == (dt.date(2024, 1, 1), dt.date(2024, 3, 31), True)
    assert parse_spec(CURVE, file="curve.yaml").table("orders").column("ordered_on").start == dt.date(2023, 12, 1)
    plan = plan_rotation(spec, 42)
    days = pa.Table.from_batches(list(table_batches(spec, plan, "orders")))["ordered_on"].to_pylist()
    assert min(days) >= dt.date(2024, 1, 1) and max(days) <= dt.date(2024, 3, 31)
