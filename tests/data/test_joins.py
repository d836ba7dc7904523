"""Questions across tables (issue 19): planned keys make joined answers exact on every rotation."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest
from conftest import failed_checks, verified_kinds
from hypothesis import given, settings
from hypothesis import strategies as st

from evalpack.checks.nearmiss.operators import mutants_of
from evalpack.checks.nearmiss.study import nullable_columns, unique_columns
from evalpack.core.scoring import answer_matches
from evalpack.data.plan import plan_rotation
from evalpack.questions.derive import Question
from evalpack.questions.families import joins as joins_family
from evalpack.spec import links
from evalpack.spec.kinds import KINDS
from evalpack.spec.reader import load_spec
from evalpack.spec.units import apportion

SPEC = Path(__file__).resolve().parents[1] / "specs" / "shop_joins.yaml"
TABLES = ("regions", "customers", "orders")


def built(spec: Path, out: Path) -> Path:
    """``evalpack build spec -o out``, which must succeed."""
    proc = subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(out), "--force"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    return built(SPEC, tmp_path_factory.mktemp("joins") / "pack")


@pytest.fixture(scope="module")
def cohorts_pack(tmp_path_factory) -> Path:
    return built(SPEC.parent / "cohorts.yaml", tmp_path_factory.mktemp("cohorts") / "pack")


@pytest.fixture(scope="module")
def records(pack) -> list[dict]:
    """The shipped questions with gold SQL (the questions to decline have none: tests/questions/test_unanswerable.py)."""
    rows = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines()]
    return [r for r in rows if r["answerable"]]


@pytest.fixture(scope="module")
def connections(pack) -> dict[str, duckdb.DuckDBPyConnection]:
    out = {}
    for folder in sorted((pack / "rotations").iterdir()):
        con = duckdb.connect()
        for t in TABLES:
            con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{folder / 'tables' / (t + '.parquet')}')")
        out[folder.name] = con
    return out


def joins(sql: str) -> int:
    return sql.upper().count(" JOIN ") + sql.upper().count("EXISTS")


def test_joined_questions_ship_and_three_tables_are_needed(records):
    joined = [r for r in records if joins(r["gold_sql"]) >= 1]
    three = [r for r in records if r["gold_sql"].upper().count(" JOIN ") >= 2]
    assert len(joined) >= 30 and len(three) >= 5, (len(joined), len(three))
    assert {"segment_month", "segment_ranking", "active_parents", "parents_without"} & {r["kind"] for r in joined}


def expected(record: dict, rotation: str):
    value = record["expected_answer"]
    return value[rotation] if isinstance(value, dict) else value


def test_every_joined_answer_holds_on_every_rotation(records, connections):
    for r in records:
        if not joins(r["gold_sql"]):
            continue
        for rotation, con in connections.items():
            rows = [list(x) for x in con.execute(r["gold_sql"]).fetchall()]
            assert answer_matches(r, expected(r, rotation), rows, ordered="ORDER BY" in r["gold_sql"].upper()), \
                (r["id"], rotation)


def assert_segment_totals(con: duckdb.DuckDBPyConnection, s, label_sql: str, more_joins: str = "") -> None:
    """Every label's total in every month, summed by DuckDB over the written rows, is the plan's to the cent."""
    end = s.months[-1].replace(day=28) + dt.timedelta(days=4)
    got = dict(con.execute(
        f"SELECT {label_sql} || ':' || strftime(o.ordered_at, '%Y-%m'), SUM(o.amount) FROM orders o "
        f"JOIN customers c ON o.customer_id = c.customer_id {more_joins} "
        f"WHERE o.ordered_at >= DATE '{s.months[0]}' AND o.ordered_at < DATE '{end.replace(day=1)}' "
        "GROUP BY 1").fetchall())
    for i, month in enumerate(s.months):
        for j, label in enumerate(s.labels):
            assert int(round(got[f"{label}:{month:%Y-%m}"] * 100)) == s.totals[i][j], (label, month)


def test_planned_facts_match_the_written_data(connections):
    spec = load_spec(SPEC)
    for seed, con in zip(spec.seeds(), connections.values()):
        key = plan_rotation(spec, seed).answer_key
        s = key.segments[0]
        assert_segment_totals(con, s, "g.zone", "JOIN regions g ON c.region_id = g.region_id")
        f = next(p for p in key.parents if p.child_table == "orders")
        histogram = Counter(n for (n,) in con.execute(
            "SELECT COUNT(o.order_id) FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
            "GROUP BY c.customer_id").fetchall())
        assert dict(histogram) == dict(f.children)
        # the declared orphans and missing parents: period totals include them, joined totals do not
        orphans = con.execute("SELECT COUNT(*) FROM orders o ANTI JOIN customers c ON o.customer_id = c.customer_id "
                              "WHERE o.customer_id IS NOT NULL").fetchone()[0]
        k = next(x for x in key.keys if x.child_table == "orders")
        assert orphans == k.orphans and k.inside


def test_join_mutants_rarely_match_every_rotation(records, connections):
    spec = load_spec(SPEC)
    first = next(iter(connections.values()))
    types = {t: dict(first.execute(f"SELECT column_name, column_type FROM (DESCRIBE {t})").fetchall()) for t in TABLES}
    total = survived = 0
    for r in records:
        if not joins(r["gold_sql"]):
            continue
        q = Question(r["id"], "", r["gold_sql"], tuple((rot, expected(r, rot)) for rot in connections),
                     r["answer_type"], r["round_decimals"], r["kind"], ())
        for _, tree in mutants_of(q, types, nullable_columns(spec), None, unique_columns(spec)):
            sql = tree.sql(dialect="duckdb")
            total += 1
            try:
                survived += all(answer_matches(r, expected(r, rot), [list(x) for x in con.execute(sql).fetchall()],
                                               ordered="ORDER BY" in sql.upper()) for rot, con in connections.items())
            except duckdb.Error:
                continue
    assert total > 300 and survived / total <= 0.01, (survived, total)


def test_rotated_answers_differ_between_rotations(records):
    moved = [r for r in records if len({json.dumps(v) for v in r["expected_answer"].values()}) > 1]
    assert len(moved) >= 0.95 * len(records), (len(moved), len(records))
    ranks = [r for r in records if r["kind"] in ("peak_period", "top_parents", "segment_ranking", "month_ranking")]
    assert {"peak_period", "segment_ranking"} <= {r["kind"] for r in ranks}
    assert all(r in moved for r in ranks), [r["kind"] for r in ranks if r not in moved]


def test_the_peak_month_is_not_the_month_with_most_rows():
    spec = load_spec(SPEC)
    peaks = set()
    for seed in spec.seeds():
        c = plan_rotation(spec, seed).answer_key.curves[0]
        peak = c.totals.index(max(c.totals))
        peaks.add(peak)
        assert c.rows.index(max(c.rows)) != peak
    assert len(peaks) > 1  # the argmax answer rotates


def test_answers_that_cannot_move_are_named_in_a_warning(pack, records):
    warnings = json.loads((pack / "manifest.json").read_text())["warnings"]
    fixed = [r for r in records if len({json.dumps(v) for v in r["expected_answer"].values()}) == 1]
    named = [w for w in warnings if "the same answer on every rotation" in w]
    assert sorted(w.split(" ")[0] for w in named) == sorted(r["id"] for r in fixed)


def test_every_join_family_verifies_from_the_two_join_specs(pack, cohorts_pack):
    """Every join family is asked and verifies on every rotation (shipped, or left out by the near-miss gate when
    these rows cannot catch one of its mistakes)."""
    assert set(joins_family.ASKS) <= verified_kinds(pack) | verified_kinds(cohorts_pack) <= set(KINDS)


def test_a_parent_date_column_splits_by_its_quarter(cohorts_pack):
    """segment_shares by customers.signed_up_at with grain: quarter: each order's customer signed up in the quarter
    the plan gave it, and every quarter's revenue per month is the plan's, on every rotation."""
    cohorts, out = SPEC.parent / "cohorts.yaml", cohorts_pack
    records = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    assert {"segment_month", "segment_ranking"} <= verified_kinds(out) and records
    assert not failed_checks(out)
    spec = load_spec(cohorts)
    for seed in spec.seeds():
        s = plan_rotation(spec, seed).answer_key.segments[0]
        assert s.grain == "quarter" and s.labels == ("2024-Q1", "2024-Q2", "2024-Q3", "2024-Q4")
        folder = out / "rotations" / f"seed_{seed}" / "tables"
        con = duckdb.connect()
        for t in ("customers", "orders"):
            con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{folder / (t + '.parquet')}')")
        assert con.execute("SELECT MIN(signed_up_at) >= TIMESTAMP '2024-01-01' AND MAX(signed_up_at) < "
                           "TIMESTAMP '2025-01-01' FROM customers").fetchone()[0]
        assert_segment_totals(con, s, "CONCAT(YEAR(c.signed_up_at), '-Q', QUARTER(c.signed_up_at))")


def test_per_period_counts_hold_in_every_quarter_of_the_written_data(cohorts_pack):
    """per_parent with per: quarter: in every quarter of the curve, on every rotation, the customers' order counts
    in the written Parquet are the plan's, and within each sign-up cohort the customers with 0 and with 1 orders
    in the quarter are the declared shares of that cohort's customers; the top customers stand apart."""
    spec = load_spec(SPEC.parent / "cohorts.yaml")
    pp = spec.per_parent[0]
    assert pp.per == "quarter"
    for seed in spec.seeds():
        f = plan_rotation(spec, seed).answer_key.parents[0]
        assert [p.label for p in f.periods] == ["2025-Q1", "2025-Q2"] and len(f.top) == 5
        con = duckdb.connect()
        folder = cohorts_pack / "rotations" / f"seed_{seed}" / "tables"
        for t in ("customers", "orders"):
            con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{folder / (t + '.parquet')}')")
        for period in f.periods:
            window = f"o.ordered_at >= DATE '{period.first}' AND o.ordered_at < DATE '{period.end}'"
            rows = con.execute(
                "SELECT CONCAT(YEAR(c.signed_up_at), '-Q', QUARTER(c.signed_up_at)), COUNT(o.order_id) FROM customers c "
                f"LEFT JOIN orders o ON o.customer_id = c.customer_id AND {window} GROUP BY c.customer_id, 1").fetchall()
            assert dict(Counter(n for _, n in rows)) == dict(period.children), period.label
            for cohort in ("2024-Q1", "2024-Q2", "2024-Q3", "2024-Q4"):
                held = Counter(n for label, n in rows if label == cohort)
                size = sum(held.values())
                shares = apportion(size, [b.share for b in pp.counts])
                assert (held[0], held[1]) == (shares[0], shares[1]), (period.label, cohort)
                assert sum(v for n, v in held.items() if n >= 2) == shares[2]
        totals = sorted((n for (n,) in con.execute(
            "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.customer_id"
        ).fetchall()), reverse=True)
        assert [n for _, n in f.top] == totals[:5] and totals[4] > totals[5]
    records = [json.loads(line) for line in (cohorts_pack / "questions.jsonl").read_text().splitlines()]
    study = json.loads((cohorts_pack / "manifest.json").read_text())["near_miss_study"]["families"]
    for kind in ("period_parents_at_least", "period_parents_without"):
        assert any(r["kind"] == kind for r in records), kind
        assert study[kind]["mutants"] >= 10 and study[kind]["match_all"] == 0, study[kind]


@pytest.mark.parametrize(("old", "new", "where", "says"), [
    ('per: quarter', 'per: week', "per_parent[0].per", "one of month, quarter, year"),
    ('"2+": 0.4}, per: quarter', '"2+": 0.4}, per: quarter}\n  - {child: orders.order_id, counts: {1: 1.0}',
     "per_parent[1].child", "orders.order_id"),
    ('counts: {0: 0.3, 1: 0.3, "2+": 0.4}', 'counts: {0: 0.1, 1: 0.1, 5: 0.8}', "per_parent[0].counts",
     "in 2025-Q1 cannot give"),
])
def test_a_per_period_declaration_that_cannot_hold_is_refused_by_key(old, new, where, says):
    from evalpack.core.errors import SpecError
    from evalpack.spec.reader import parse_spec

    text = (SPEC.parent / "cohorts.yaml").read_text()
    assert old in text
    with pytest.raises(SpecError) as caught:
        spec = parse_spec(text.replace(old, new), file="cohorts.yaml")
        plan_rotation(spec, spec.seed)
    assert where in str(caught.value) and says in str(caught.value), str(caught.value)


def test_per_period_counts_need_a_curve_on_the_child_table():
    from evalpack.core.errors import SpecError
    from evalpack.spec.reader import parse_spec

    text = SPEC.read_text() + "  - {child: customers.region_id, counts: {0: 0.5, \"1+\": 0.5}, per: month}\n"
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file="shop.yaml")
    assert "per_parent[1].per" in str(caught.value) and "customers has none" in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("old", "new", "where", "says"), [
    ("grain: quarter,", "grain: week,", "segment_shares[0].grain", "grain is one of month, quarter, year"),
    ("by: customers.signed_up_at, grain: quarter,", "by: customers.signed_up_at,", "segment_shares[0].by",
     "needs categorical"),
    ("2024-Q4: 0.1", "2025-Q1: 0.1", "segment_shares[0].shares", "['2025-Q1'] are not quarters of"),
    ("by: customers.signed_up_at", "by: orders.order_id", "segment_shares[0].by", "needs date or datetime"),
    ("by: customers.signed_up_at", "by: nowhere.signed_up_at", "segment_shares[0].by", "unknown table 'nowhere'"),
])
def test_a_segment_declaration_that_cannot_hold_is_refused_by_key(old, new, where, says):
    from evalpack.core.errors import SpecError
    from evalpack.spec.reader import parse_spec

    text = (SPEC.parent / "cohorts.yaml").read_text()
    assert old in text
    with pytest.raises(SpecError) as caught:
        parse_spec(text.replace(old, new), file="cohorts.yaml")
    assert where in str(caught.value) and says in str(caught.value), str(caught.value)


def test_per_parent_counts_the_rows_cannot_fill_are_refused_with_the_declared_key():
    from evalpack.core.errors import SpecError
    from evalpack.spec.reader import parse_spec

    text = SPEC.read_text().replace('counts: {0: 0.1, 1: 0.2, 2: 0.2, "3+": 0.5}', "counts: {0: 0.5, 1: 0.5}")
    spec = parse_spec(text, file="shop.yaml")
    with pytest.raises(SpecError) as caught:
        plan_rotation(spec, spec.seed)
    assert "per_parent[0].counts" in str(caught.value) and "open bucket" in str(caught.value), str(caught.value)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), st.lists(st.integers(1, 100), min_size=1, max_size=5))
def test_controlled_rounding_keeps_both_margins(rows, weights):
    total = sum(rows)
    columns = [int(x) for x in apportion(total, weights)] if total else [0] * len(weights)
    grid = links.controlled_round(rows, columns)
    assert grid.sum(axis=1).tolist() == rows and grid.sum(axis=0).tolist() == columns and (grid >= 0).all()
    if total:
        share = np.array([[r * c / total for c in columns] for r in rows])
        assert np.abs(grid - share).max() < 1 + 1e-9


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_the_top_list_is_separated_without_changing_the_total(seed, top):
    rng = np.random.default_rng(seed)
    popularity = rng.lognormal(0, 0.6, size=400)  # some parents are busier than others, as customers are
    counts = 3 + rng.multinomial(4000, popularity / popularity.sum())
    groups = rng.integers(0, 3, size=400)
    before, totals = counts.sum(), np.bincount(groups, weights=counts)
    assert links.separate_top(counts, groups, top, np.ones(400, dtype=bool), 3)
    ranked = np.sort(counts)[::-1]
    assert all(ranked[i] > ranked[i + 1] for i in range(top))  # no tie at or above the cut
    assert counts.sum() == before and (np.bincount(groups, weights=counts) == totals).all() and counts.min() >= 3
