"""The analyst families (evalpack/families/): answers exact from the plan, SQL an analyst writes, every
question verified on every rotation of the example pack."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb

from evalpack.difficulty import label
from evalpack.families import FAMILIES
from evalpack.plan import plan_pack
from evalpack.questions import derive_questions
from evalpack.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
NEW = {"month_over_month", "percent_change", "running_total", "quarter_total", "half_year_total", "average_per_row",
       "monthly_series", "group_gap", "group_ranking"}


def _retail():
    spec = load_spec(ROOT / "schemas" / "retail.yaml")
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
    manifest = json.loads((retail_pack / "manifest.json").read_text())
    assert not [d for d in manifest["dropped"] if d["kind"] in NEW]
    shipped = {r["kind"] for r in records}
    assert shipped >= NEW
    # a result-set answer, rerun by hand on one rotation, reads back as the record says
    series = next(r for r in records if r["kind"] == "monthly_series")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW orders AS SELECT * FROM read_parquet('{retail_pack}/rotations/seed_43/tables/orders.parquet')")
    rows = con.execute(series["gold_sql"]).fetchall()
    assert [[m, float(v)] for m, v in rows] == series["expected_answer"]
