"""The analyst families (evalpack/questions/families/): answers exact from the plan, SQL an analyst writes, every
question verified on every rotation of the example pack."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from conftest import failed_checks, verified_kinds

from evalpack.build import build_pack
from evalpack.data.plan import plan_pack
from evalpack.questions.derive import derive_questions
from evalpack.questions.difficulty import label
from evalpack.questions.families import FAMILIES
from evalpack.spec.model import QuestionPlan
from evalpack.spec.reader import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
NEW = {"month_over_month", "percent_change", "running_total", "quarter_total", "half_year_total", "average_per_row",
       "monthly_series", "group_gap", "group_ranking", "quarter_count", "half_year_count", "span_count", "share_of_span",
       "share_of_quarter", "versus_average", "month_ranking", "group_threshold", "group_running", "group_change",
       "rate_change", "fk_linked"}


def _retail():
    """The retail spec and every question its declarations give (the whole pool, before the difficulty mix)."""
    spec = replace(load_spec(ROOT / "schemas" / "retail.yaml"), questions=QuestionPlan(mix=None))
    return spec, derive_questions(spec, plan_pack(spec))


def test_every_family_is_registered_once_and_yields_for_retail():
    spec, questions = _retail()
    assert len(FAMILIES) == len(set(FAMILIES))
    assert {q.kind for q in questions} >= NEW


def test_answers_are_exact_arithmetic_of_the_declared_totals():
    _, questions = _retail()
    total = {q.tags[-1]: Decimal(str(q.expected_for("seed_42"))) for q in questions if q.kind == "period_total"}
    for q in questions:
        month = q.tags[-1]
        value = q.expected_for("seed_42")
        if q.kind == "month_over_month":
            prev = f"{int(month[:4]) - (month[5:] == '01')}-{(int(month[5:]) - 2) % 12 + 1:02d}"
            assert Decimal(str(value)) == total[month] - total[prev], q.id
        if q.kind == "running_total":
            assert Decimal(str(value)) == sum(v for m, v in total.items() if m <= month), q.id
        if q.kind == "quarter_total":
            start = int(month[5:])
            months = [f"{month[:4]}-{m:02d}" for m in range(start, start + 3)]
            assert Decimal(str(value)) == sum(total[m] for m in months), q.id
        if q.kind == "monthly_series":
            assert [row[0] for row in value] == sorted(row[0] for row in value)
            assert all(Decimal(str(v)) == total[m] for m, v in value), q.id
    # declared 980000.37 (January) and 1040250.18 (March), February interpolated between them
    march = next(q for q in questions if q.kind == "percent_change" and q.tags[-1] == "2025-03")
    feb = total["2025-02"]
    exact = (Decimal("1040250.18") - feb) * 100 / feb
    assert Decimal(str(march.expected_for("seed_42"))) == exact.quantize(Decimal("0.01"))


def _months_after(month: str, n: int) -> str:
    """``month`` (YYYY-MM) plus ``n`` months."""
    index = int(month[:4]) * 12 + int(month[5:]) - 1 + n
    return f"{index // 12}-{index % 12 + 1:02d}"


def _round(value: Fraction, places: int = 2) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal(1).scaleb(-places))


def test_new_family_answers_are_exact_arithmetic_of_the_simple_ones():
    _, questions = _retail()
    answer = {}
    for q in questions:
        answer.setdefault(q.kind, {})[q.tags[2:]] = q.expected_for("seed_44")
    total = {tags[0]: Fraction(Decimal(str(v))) for tags, v in answer["period_total"].items()}
    rows = {tags[0]: v for tags, v in answer["period_rows"].items()}
    year = sum(total.values())
    group = {tags: Fraction(Decimal(str(v))) for tags, v in answer["group_period_total"].items()}  # (label, month)
    assert answer["span_count"][("2025-01", "12 months")] == sum(rows.values())
    for (first, size), n in answer["quarter_count"].items() | answer["half_year_count"].items():
        m = int(first[5:])
        assert n == sum(rows[f"2025-{x:02d}"] for x in range(m, m + int(size.split()[0])))
    for (month,), share in answer["share_of_span"].items():
        assert Decimal(str(share)) == _round(100 * total[month] / year), month
    for (month,), gap in answer["versus_average"].items():
        assert Decimal(str(gap)) == _round(total[month] - year / 12), month
    assert len(answer["month_ranking"]) == 3  # H1, H2 and the year
    for (first, size), lines in answer["month_ranking"].items():
        end = _months_after(first, int(size.split()[0]))
        months = sorted((m for m in total if first <= m < end), key=lambda m: -total[m])
        assert [m for m, _ in lines] == months and all(Fraction(Decimal(str(v))) == total[m] for m, v in lines)
    for lines in answer["group_running"].values():
        for name, month, value in lines:
            assert Fraction(Decimal(str(value))) == sum(v for (g, m), v in group.items() if g == name and m <= month)
    for (month,), lines in answer["group_change"].items():
        prev = _months_after(month, -1)
        assert {g: Fraction(Decimal(str(v))) for g, v in lines} == {
            g: group[(g, month)] - group[(g, prev)] for g in ("web", "app", "store")}
    for (first,), lines in answer["group_threshold"].items():
        sums = {g: sum(v for (gg, m), v in group.items() if gg == g and first <= m < _months_after(first, 3))
                for g in ("web", "app", "store")}
        bar = sorted(sums.values())[1]
        assert sorted(g for g, _ in lines) == sorted(g for g, v in sums.items() if v >= bar) and len(lines) == 2
    flagged = {tags[0]: v for tags, v in answer["flagged_count"].items()}
    for (month,), change in answer["rate_change"].items():
        months = sorted(flagged)
        prev = months[months.index(month) - 1]
        assert Decimal(str(change)) == _round(100 * Fraction(flagged[month], rows[month])
                                              - 100 * Fraction(flagged[prev], rows[prev])), month
    (linked,) = answer["fk_linked"].values()
    (orphans,), (nulls,) = answer["fk_orphans"].values(), answer["fk_nulls"].values()
    assert linked == 40_000 - orphans - nulls == 40_000 - 30 - 36  # schemas/retail.yaml's declared counts


def test_the_sql_is_an_analysts_and_its_labels_follow_from_it():
    _, questions = _retail()
    by_kind = {q.kind: q for q in questions}
    assert "LAG(" in by_kind["month_over_month"].gold_sql and by_kind["month_over_month"].gold_sql.startswith("WITH")
    assert "OVER (ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)" in by_kind["running_total"].gold_sql
    assert "FILTER(WHERE" in by_kind["group_gap"].gold_sql.replace("FILTER (WHERE", "FILTER(WHERE")
    for kind in ("month_over_month", "percent_change", "running_total"):
        level, skills = label(by_kind[kind].gold_sql, by_kind[kind].answer_type)
        assert level == "challenging" and {"cte", "window"} <= set(skills), kind
    assert by_kind["monthly_series"].answer_type == by_kind["group_ranking"].answer_type == "rows"


def test_every_new_question_verifies_on_every_rotation_of_the_pack(retail_pack):
    records = [json.loads(line) for line in (retail_pack / "questions.jsonl").read_text().splitlines()]
    assert not [d for d in failed_checks(retail_pack) if d["kind"] in NEW]
    assert verified_kinds(retail_pack) >= NEW
    # a result-set answer, rerun by hand on one rotation, reads back as the record says
    series = next(r for r in records if r["kind"] == "monthly_series")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW orders AS SELECT * FROM read_parquet('{retail_pack}/rotations/seed_43/tables/orders.parquet')")
    rows = con.execute(series["gold_sql"]).fetchall()
    assert [[m, float(v)] for m, v in rows] == series["expected_answer"]


RESIZED = """\
name: resized_child
seed: 42
tables:
  users:
    rows: 800
    columns:
      user_id: {type: int, unique: true}
  subscriptions:
    rows: 6000
    columns:
      subscription_id: {type: int, unique: true}
      user_id: {type: foreign_key}
      amount: {type: float, min: 5, max: 2000}
      start_date: {type: date, start: "2024-01-01", end: "2024-12-31"}
relationships:
  - {parent: users.user_id, child: subscriptions.user_id, orphans: 7, nulls: 5}
outcome_curves:
  - table: subscriptions
    column: amount
    time_column: start_date
    avg_transaction_value: 250
    start_date: "2024-01-01"
    curve_points:
      - {month: 1, target_value: 50000}
      - {month: 6, target_value: 110000}
      - {month: 12, target_value: 200000}
"""


def test_a_join_count_counts_the_planned_rows_where_an_average_transaction_resizes_the_child(tmp_path):
    """Misata's dbt example: avg_transaction_value plans the child table's rows (5,844 here, not the declared 6,000);
    the rows that find their parent are counted from the plan, so the question ships and the data holds it."""
    spec_path = tmp_path / "resized.yaml"
    spec_path.write_text(RESIZED)
    spec = load_spec(spec_path)
    plan = plan_pack(spec)[0]
    planned = plan.table("subscriptions").rows
    assert planned != 6000
    (linked,) = [q for q in derive_questions(spec, (plan,)) if q.kind == "fk_linked"]
    assert linked.expected_for(plan.rotation) == planned - 7 - 5
    pack = build_pack(spec_path, tmp_path / "pack", rotations=1).path
    manifest = json.loads((pack / "manifest.json").read_text())
    assert not [d for d in manifest["dropped"] if d["kind"] == "fk_linked"]
    tables = pack / "rotations" / plan.rotation / "tables"
    with duckdb.connect() as con:
        joined = con.execute(f"SELECT COUNT(*) FROM '{tables / 'subscriptions.parquet'}' AS c "
                             f"JOIN '{tables / 'users.parquet'}' AS p ON c.user_id = p.user_id").fetchone()[0]
    assert joined == planned - 7 - 5


TIMED = """\
name: timed
seed: 7
rotations: 2
tables:
  customers:
    rows: 40
    columns:
      customer_id: {type: int, unique: true, min: 1}
  orders:
    rows: 1200
    columns:
      order_id: {type: int, unique: true, min: 1}
      customer_id: {type: foreign_key}
      channel: {type: categorical, choices: [web, app, store]}
      amount: {type: float, min: 5, max: 900, decimals: 2}
      ordered_at: {type: date, start: "2024-12-01", end: "2025-05-31"}
relationships:
  - {parent: customers.customer_id, child: orders.customer_id, orphans: 3, nulls: 2}
outcome_curves:
  - {table: orders, column: amount, time_column: ordered_at, start_date: "2025-01-01", curve_points: [
      {month: 1, target_value: 98000.37}, {month: 4, target_value: 112050.91}]}
group_shares:
  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.5, app: 0.3, store: 0.2}}
questions:
  difficulty: any
"""
WINDOW_MISTAKES = ("inclusive_end", "exclusive_start", "date_shift")


def test_a_datetime_curve_column_asks_and_verifies_the_families_of_a_date_one(tmp_path):
    """The same declarations with the time column a datetime: the same questions (the group gap and the share of
    the whole span included), every one verified, and their window mistakes caught as on a date column."""
    built = {}
    for time_type in ("date", "datetime"):
        spec_path = tmp_path / f"{time_type}.yaml"
        spec_path.write_text(TIMED.replace("ordered_at: {type: date", f"ordered_at: {{type: {time_type}"))
        pack = build_pack(spec_path, tmp_path / time_type).path
        manifest = json.loads((pack / "manifest.json").read_text())
        kinds = {q["id"]: q["kind"] for q in map(json.loads, (pack / "questions.jsonl").read_text().splitlines())}
        study = manifest["near_miss_study"]
        assert not failed_checks(pack) and study["survivors_total"] == len(study["survivors"]), time_type
        missed = [(kinds[s["question"]], s["operator"]) for s in study["survivors"]
                  if s["operator"] in WINDOW_MISTAKES and kinds[s["question"]] in ("group_gap", "share_of_span")]
        assert missed == [], (time_type, missed)
        assert study["families"]["group_gap"]["mutants"] and study["families"]["share_of_span"]["mutants"]
        built[time_type] = manifest["questions"]["shipped_by_kind"]
    assert built["datetime"] == built["date"]
    assert built["date"]["group_gap"] == 4 and built["date"]["share_of_span"] == 4


def test_a_datetime_child_column_says_which_parent_counts_it_does_not_ask():
    """active_parents, repeat_parents and the per-period counts need a date column: on a datetime one the build
    says so in its warnings instead of leaving them out unseen."""
    per_parent = 'per_parent:\n  - {child: orders.customer_id, counts: {0: 0.2, 1: 0.3, "2+": 0.5}}\n'
    for time_type, said in (("date", False), ("datetime", True)):
        spec = parse_spec(TIMED.replace("ordered_at: {type: date", f"ordered_at: {{type: {time_type}") + per_parent)
        plan = plan_pack(spec)[0]
        warned = [w for w in plan.warnings if "active_parents" in w]
        assert bool(warned) == said, (time_type, plan.warnings)
        kinds = {q.kind for q in derive_questions(spec, (plan,))}
        assert ("active_parents" in kinds) != said


SUMS = ("quarter_total", "half_year_total", "grand_total", "segment_unlinked", "segment_total", "period_total")


@pytest.mark.parametrize("march, answers", [("1040250.18", "shared"), ("1041250.18", "shared"),
                                            ("1041250.18", "rotated")])
def test_no_period_total_is_a_whole_number(tmp_path, march, answers):
    """A total with cents catches 'rounded to whole units'. With March at 1041250.18, April to June (two of them
    between declared points) added up to 3288052.00 and Q1's unlinked revenue to 4698.00, and ROUND(..., 0) passed;
    months between declared points and the unlinked rows' parts now move a cent so that no quarter, half-year or
    span total is whole."""
    text = (ROOT / "schemas" / "retail.yaml").read_text().replace("1040250.18", march)
    spec_path = tmp_path / "retail.yaml"
    spec_path.write_text(text.replace("answers: shared", f"answers: {answers}") if answers != "shared" else text)
    spec = replace(load_spec(spec_path), questions=QuestionPlan(mix=None))
    assert spec.answers == answers
    asked = [q for q in derive_questions(spec, plan_pack(spec)) if q.kind in SUMS and q.answer_type == "number"]
    assert {q.kind for q in asked} >= {"quarter_total", "half_year_total", "segment_unlinked"}
    whole = [(q.kind, rotation, value) for q in asked for rotation, value in q.expected
             if round(value * 100) % 100 == 0]
    assert whole == []


def test_declared_targets_that_add_up_to_a_whole_number_are_named_in_a_warning(tmp_path):
    """When every month of a quarter is declared, nothing may move: the build says which period and what to do."""
    spec_path = tmp_path / "retail.yaml"
    text = (ROOT / "schemas" / "retail.yaml").read_text()
    points = "\n".join(f"      - {{month: {m}, target_value: {v}}}" for m, v in
                       ((1, "1000000.25"), (2, "1000000.25"), (3, "1000000.50"), (4, "1100000.37"), (12, "1200000.41")))
    start = text.index("      - {month: 1,")
    end = text.index("\n", text.index("      - {month: 12,"))
    spec_path.write_text(text[:start] + points + text[end:])
    spec = load_spec(spec_path)
    plan = plan_pack(spec)[0]
    assert any("2025-01 to 2025-03 add up to a whole number" in w for w in plan.warnings), plan.warnings


def test_an_average_per_row_over_a_nullable_amount_says_in_the_question_how_empty_amounts_count():
    """Its gold SQL is SUM / COUNT(*): an analyst reading 'the mean amount per order' alone writes AVG, which skips
    the orders without an amount; with a nullable amount (retail's) every phrasing says they count as zero, with a
    required one (the Misata-format spec's) none does."""
    def averages(spec_path: Path) -> list:
        spec = replace(load_spec(spec_path), questions=QuestionPlan(mix=None))
        found = [q for q in derive_questions(spec, plan_pack(spec)) if q.kind == "average_per_row"]
        assert found and all("SUM(" in q.gold_sql and "COUNT(*)" in q.gold_sql for q in found)
        return [(q.question, *q.paraphrases) for q in found]

    clause = "counting orders without an order amount as zero"
    assert all(clause in text for texts in averages(ROOT / "schemas" / "retail.yaml") for text in texts)
    plain = averages(ROOT / "benchmarks" / "specs" / "retail_misata.yaml")
    assert not any("as zero" in text for texts in plain for text in texts)
