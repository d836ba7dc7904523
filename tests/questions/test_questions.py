"""Questions from declarations, verification on every rotation, golden checks (issue 3)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import build_variant, failed_checks, full_questions, gated_out, verified_kinds

from evalpack.build import Derived, check_rotation, links_of
from evalpack.checks.nearmiss.study import MutantSet
from evalpack.checks.verification import (
    Link,
    Verdict,
    check_question,
    exclude_orphans,
    live_links,
    orphan_key_tables,
    rotation_connection,
    verify_rotation,
)
from evalpack.core.layout import PackLayout
from evalpack.data.plan import plan_pack
from evalpack.data.tables import connect_tables, duckdb_types
from evalpack.questions.derive import Question, _drafts, derive_questions
from evalpack.questions.difficulty import label
from evalpack.spec.kinds import KINDS
from evalpack.spec.reader import load_spec

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

ALL_FAMILIES = set(KINDS)  # the two example specs together ship every family


def _records(pack: Path) -> list[dict]:
    """The pack's answerable questions as built (those with gold SQL; tests/questions/test_unanswerable.py covers the
    rest): the holdout's gold SQL and answers from the key beside it."""
    return [r for r in full_questions(pack) if r["answerable"]]


def _manifest(pack: Path) -> dict:
    return json.loads((pack / "manifest.json").read_text())


def test_retail_ships_at_least_60_and_none_fails_a_golden_check(retail_pack):
    records = _records(retail_pack)
    manifest = _manifest(retail_pack)
    assert len(records) >= 60
    assert not failed_checks(retail_pack)
    assert manifest["questions"]["dropped"] == len(gated_out(retail_pack)) == manifest["near_miss_study"]["gate"][
        "dropped"]
    cert = json.loads((retail_pack / "certificate.json").read_text())
    assert cert["all_match"] is True and cert["shipped"] == len(records)
    assert {q["id"] for q in cert["questions"]} == {r["id"] for r in records}
    assert set(cert["rotations"]) == {"seed_42", "seed_43", "seed_44"}


def test_every_family_verifies_and_reverifies_on_every_rotation(retail_pack, finance_pack):
    """Every family is asked and verifies on every rotation of the example packs: it ships, or the near-miss gate
    left it out because these rows cannot catch one of its mistakes (tests/checks/test_nearmiss_gate.py)."""
    kinds = verified_kinds(retail_pack) | verified_kinds(finance_pack)
    assert kinds == ALL_FAMILIES
    finance_kinds = verified_kinds(finance_pack)
    assert {"ledger_balance", "trial_balance", "waterfall_net", "waterfall_component", "waterfall_ending",
            "fk_orphans", "fk_nulls"} <= finance_kinds
    for pack in (retail_pack, finance_pack):
        # the pack's own verify.py reruns every gold SQL on every rotation, independently of the build
        run = subprocess.run([sys.executable, str(pack / "verify.py")], capture_output=True, text=True, cwd=pack)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"{len(_records(pack))}/{len(_records(pack))} questions verify" in run.stdout


def test_question_records_follow_the_pack_format(retail_pack):
    import hashlib

    for r in full_questions(retail_pack):
        committed = {"commitment"} if r["split"] == "holdout" else set()
        assert set(r) == {"id", "key", "orphan_rows", "question", "evidence", "paraphrases", "answerable",
                          "unanswerable_reason", "gold_sql", "expected_answer", "answer_type", "round_decimals", "kind",
                          "difficulty", "skills", "split", "question_sha256", "tags"} | committed | (
                          {"traps"} if r["answerable"] else set())
        assert (r["answerable"], r["unanswerable_reason"] is None) in ((True, True), (False, False))
    # the labels are those of the query as its family writes it, before the traps' reading (difficulty.RULE);
    # reading through a trap adds the skill business_rule
    spec = load_spec(SCHEMAS / "retail.yaml")
    written = {draft.key: draft for draft, _ in _drafts(spec, plan_pack(spec)[0].answer_key)}
    for r in _records(retail_pack):
        draft = written[r["key"]]
        level, skills = label(draft.sql.sql(dialect="duckdb"), r["answer_type"])
        assert (r["difficulty"], tuple(r["skills"])) == (level, (*skills, "business_rule"))
        assert r["traps"] and r["gold_sql"] != draft.sql.sql(dialect="duckdb")
        assert r["question_sha256"] == hashlib.sha256(r["question"].encode()).hexdigest()
        assert r["split"] in ("dev", "holdout")
        if r["kind"] in ("period_total", "group_period_total", "rate", "period_rows", "flagged_count"):
            # the question names the month; what a month covers is the dictionary's convention, not evidence
            assert re.search(r"(January|February|March|April|May|June|July|August|September|October|November|"
                             r"December) 2025", r["question"])
            assert r["evidence"] is None
        if r["answer_type"] == "number" and r["kind"] not in ("rate", "percent_change", "rate_change", "share_of_span",
                                                              "share_of_quarter", "children_per_parent"):
            assert "in EUR, to the cent" in r["question"]
    splits = [r["split"] for r in _records(retail_pack)]
    # up to a fifth: linked questions go to one split whole, and not every group fits (tests/pack/test_holdout_secret.py)
    assert 10 <= splits.count("holdout") <= round(0.2 * len(splits))


def test_questions_come_from_the_answer_key_not_the_data(tmp_path):
    """Derivation needs no rows at all, and ids/splits are stable across derivations."""
    spec = load_spec(SCHEMAS / "retail.yaml")
    first = derive_questions(spec, plan_pack(spec))
    second = derive_questions(load_spec(SCHEMAS / "retail.yaml"), plan_pack(spec))
    assert [(q.id, q.question, q.gold_sql, q.split) for q in first] == [
        (q.id, q.question, q.gold_sql, q.split) for q in second]
    totals = {q.key: q.expected_for("seed_42") for q in first if q.kind == "period_total"}
    # declared points are answered exactly as declared
    assert totals["curve_total:orders.amount:2025-01-01"] == 980000.37
    assert totals["curve_total:orders.amount:2025-12-01"] == 1412050.07


def _corrupt_one_amount(pack: Path, seed: str) -> dict:
    """Add one cent to a web order (channel code 1) in March 2025 of one rotation; returns that row's month and
    channel."""
    path = pack / "rotations" / seed / "tables" / "orders.parquet"
    table = pq.read_table(path)
    month = pc.strftime(table["ordered_at"], format="%Y-%m")
    mask = pc.and_(pc.equal(month, "2025-03"), pc.and_(pc.equal(table["channel"], 1),
                                                          pc.is_valid(table["amount"])))
    index = pc.index(mask, True).as_py()
    amounts = table["amount"].to_pylist()
    amounts[index] += Decimal("0.01")
    table = table.set_column(table.schema.get_field_index("amount"), table.schema.field("amount"),
                             pa.array(amounts, table.schema.field("amount").type))
    pq.write_table(table, path)
    return {"month": "2025-03", "channel": "web", "index": index}


def verdicts_on(spec, plans, questions, pack: Path, fmt: str = "parquet") -> tuple[Verdict, ...]:
    """Every question's verdict on the pack's written files: the build's per-rotation unit for Parquet (no
    mutants to run), verification's golden checks alone on the CSV files."""
    if fmt == "parquet":
        derived = Derived(plans, questions, MutantSet((), ()))
        checks = [check_rotation(spec, derived, pack, p.seed) for p in plans]
        return tuple(Verdict(q, tuple(c.observations[i] for c in checks)) for i, q in enumerate(questions))
    observations = []
    for p in plans:
        with rotation_connection(PackLayout(pack).tables(p.seed), fmt, duckdb_types(spec)) as con:
            observations.append(verify_rotation(con, questions, p.rotation, links_of(spec)))
    return tuple(Verdict(q, tuple(o[i] for o in observations)) for i, q in enumerate(questions))


def test_corrupting_one_cent_drops_exactly_the_questions_that_read_that_row(retail_pack, tmp_path):
    pack = tmp_path / "retail"
    shutil.copytree(retail_pack, pack)
    _corrupt_one_amount(pack, "seed_43")
    spec = load_spec(SCHEMAS / "retail.yaml", rotations=3)
    plans = plan_pack(spec)
    questions = derive_questions(spec, plans)
    verdicts = verdicts_on(spec, plans, questions, pack)
    dropped = {v.question.id: v for v in verdicts if not v.ships}

    def reads_row(q: Question) -> bool:
        sums_amount = "SUM(amount)" in q.gold_sql and q.kind != "peak_period"
        tags = set(q.tags)
        in_month = "2025-03" in tags or q.kind in ("grand_total", "group_total")
        in_group = q.kind not in ("group_period_total", "group_total") or "web" in tags
        return sums_amount and in_month and in_group

    # the one-total families: exactly the questions that read the row; the analyst families (evalpack/families)
    # read it through their monthly totals, so every one of them over March 2025 drops too
    one_total = {"period_total", "grand_total", "group_period_total", "group_total"}
    expected = {q.id for q in questions if reads_row(q) and q.kind in one_total | {"peak_period"}}
    assert expected == {qid for qid, v in dropped.items() if v.question.kind in one_total}
    analyst = {v.question.kind for v in dropped.values()} - one_total
    assert analyst <= {"month_over_month", "percent_change", "running_total", "quarter_total", "half_year_total",
                       "average_per_row", "monthly_series", "group_gap", "group_ranking", "share_of_span",
                       "share_of_quarter", "versus_average", "month_ranking", "group_threshold", "group_running",
                       "group_change", "segment_month", "segment_total", "segment_ranking", "segment_threshold",
                       "segment_unlinked"}
    assert "running_total" in analyst and "quarter_total" in analyst
    dropped = {qid: v for qid, v in dropped.items() if v.question.kind in one_total}
    # which of them the difficulty mix kept: each family that reads the row drops
    assert {v.question.kind for v in dropped.values()} == {q.kind for q in questions if q.id in expected}
    assert {"period_total", "grand_total"} <= {v.question.kind for v in dropped.values()}
    for v in dropped.values():
        assert v.drop_reason == "mismatch"
        obs = {o.rotation: Decimal(str(o.value)) for o in v.observations}
        want = Decimal(str(v.question.expected_for("seed_43")))
        assert obs["seed_43"] - want == Decimal("0.01")
        assert obs["seed_42"] == want and obs["seed_44"] == want


def test_dropped_questions_are_kept_in_the_manifest_with_reason_and_observations(retail_pack, tmp_path):
    from evalpack.build import derive, write_pack_files

    pack = tmp_path / "retail"
    shutil.copytree(retail_pack, pack)
    _corrupt_one_amount(pack, "seed_42")
    spec = load_spec(SCHEMAS / "retail.yaml", rotations=3)
    derived = derive(spec, plan_pack(spec))
    verdicts = verdicts_on(spec, derived.plans, derived.questions, pack)
    rows = {f"seed_{p.seed}": {t.name: 0 for t in spec.tables} for p in derived.plans}
    write_pack_files(pack, spec, derived, verdicts, rows, None)
    manifest = _manifest(pack)
    assert manifest["questions"]["dropped"] == len(manifest["dropped"]) > 0
    for d in manifest["dropped"]:
        assert d["drop_reason"] == "mismatch"
        if d["observed"] is None:  # a holdout question's values are never published, dropped or not
            assert d["gold_sql"] is None and d["expected_answer"] is None
            continue
        assert set(d["observed"]) == {"seed_42", "seed_43", "seed_44"}
        assert d["failed_checks"] == {"seed_42": ["matches"]}
    shipped_ids = {r["id"] for r in _records(pack)}
    assert not shipped_ids & {d["id"] for d in manifest["dropped"]}


def _scalar(con, sql):
    return con.execute(sql).fetchone()[0]


def test_orphan_check_catches_counting_through_the_child_table(retail_pack):
    """The 2,662-vs-2,661 case: a count over the child table that silently includes orphans."""
    spec = load_spec(SCHEMAS / "retail.yaml")
    con = connect_tables(retail_pack / "rotations" / "seed_42" / "tables")
    links = links_of(spec)
    naive = "SELECT COUNT(DISTINCT customer_id) FROM orders WHERE customer_id IS NOT NULL"
    joined = ("SELECT COUNT(DISTINCT o.customer_id) FROM orders AS o JOIN customers AS c "
              "ON o.customer_id = c.customer_id")
    naive_value, joined_value = _scalar(con, naive), _scalar(con, joined)
    assert naive_value > joined_value  # the deleted customers' ids are counted by the naive query
    for sql, value, ok in ((naive, naive_value, False), (joined, joined_value, True)):
        q = Question("q1", "How many customers placed an order?", sql, (("seed_42", value),), "integer", None,
                     "imported", ())
        obs = check_question(con, q, "seed_42", value, links)
        assert dict(obs.checks)["matches"] is True
        assert dict(obs.checks)["orphan_independent"] is ok
    rewritten = exclude_orphans(naive, links)
    assert _scalar(con, rewritten) == joined_value


def test_orphan_keys_exclude_the_same_rows_as_the_parent_table(retail_pack):
    """Verification probes a table of orphan keys instead of the parent table: same answers."""
    spec = load_spec(SCHEMAS / "retail.yaml")
    con = connect_tables(retail_pack / "rotations" / "seed_42" / "tables")
    links = links_of(spec)
    assert live_links(con, links) == links  # retail declares orphans
    keys = orphan_key_tables(con, links)
    assert all(con.execute(f"SELECT COUNT(*) FROM {k}").fetchone()[0] > 0 for k in keys)
    naive = "SELECT COUNT(DISTINCT customer_id) FROM orders WHERE customer_id IS NOT NULL"
    checked = 0
    for sql in [naive] + [q.gold_sql for q in derive_questions(spec, plan_pack(spec))]:
        by_parent, by_keys = exclude_orphans(sql, links), exclude_orphans(sql, links, keys)
        assert (by_parent is None) == (by_keys is None)
        if by_parent is not None:
            assert sorted(con.execute(by_keys).fetchall(), key=repr) == \
                sorted(con.execute(by_parent).fetchall(), key=repr), sql
            checked += 1
    assert checked > 10
    assert con.execute(exclude_orphans(naive, links, keys)).fetchall() != con.execute(naive).fetchall()
    # a link without orphan rows is not live: no rewrite can change an answer through it
    fine = Link("orders", "customer_id", "orders", "customer_id")
    assert live_links(con, (fine,)) == ()


def test_tie_check_catches_order_by_limit_with_a_tie(retail_pack):
    con = connect_tables(retail_pack / "rotations" / "seed_42" / "tables")
    tied = "SELECT segment FROM customers GROUP BY segment ORDER BY COUNT(*) > 0 DESC LIMIT 1"
    untied = "SELECT segment FROM customers GROUP BY segment ORDER BY COUNT(*) DESC LIMIT 1"
    for sql, ok in ((tied, False), (untied, True)):
        value = _scalar(con, sql)
        q = Question("q1", "Which segment?", sql, (("seed_42", value),), "string", None, "imported", ())
        obs = check_question(con, q, "seed_42", value, ())
        assert dict(obs.checks)["matches"] is True
        assert dict(obs.checks)["deterministic"] is ok


def test_empty_result_is_a_failed_check(retail_pack):
    con = connect_tables(retail_pack / "rotations" / "seed_42" / "tables")
    q = Question("q1", "Total in 1990?", "SELECT SUM(amount) FROM orders WHERE ordered_at < DATE '1990-01-01'",
                 (("seed_42", 0),), "number", 2, "imported", ())
    obs = check_question(con, q, "seed_42", 0, ())
    assert dict(obs.checks)["non_empty"] is False and not obs.passed


@pytest.fixture(scope="module")
def rotated_pack(tmp_path_factory) -> Path:
    return build_variant(tmp_path_factory, "retail_rotated", "answers: shared", "answers: rotated")


def test_rotated_answers_differ_across_rotations_and_all_verify(rotated_pack):
    records = _records(rotated_pack)
    assert not failed_checks(rotated_pack)
    # no shipped question has the same answer on every rotation: a memorised answer is a mutant the gate drops
    assert all(len({json.dumps(v, sort_keys=True) for v in r["expected_answer"].values()}) > 1 for r in records)
    for r in records:
        assert set(r["expected_answer"]) == {"seed_42", "seed_43", "seed_44"}
    totals = [r for r in records if r["kind"] == "period_total"]
    assert all(len(set(r["expected_answer"].values())) == 3 for r in totals)
    run = subprocess.run([sys.executable, str(rotated_pack / "verify.py")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def test_csv_and_parquet_give_the_same_answers(retail_pack, finance_pack):
    for name, pack in (("retail", retail_pack), ("finance", finance_pack)):
        spec = load_spec(SCHEMAS / f"{name}.yaml", rotations=3)
        plans = plan_pack(spec)
        questions = derive_questions(spec, plans)
        parquet = verdicts_on(spec, plans, questions, pack, fmt="parquet")
        csv = verdicts_on(spec, plans, questions, pack, fmt="csv")
        assert all(v.ships for v in csv)
        for a, b in zip(parquet, csv):
            assert [o.value for o in a.observations] == [o.value for o in b.observations], a.question.id


def test_no_question_ships_is_exit_1(tmp_path, monkeypatch):
    """When every question is dropped the build fails with exit 1 and leaves nothing behind."""
    from evalpack import build as build_module
    from evalpack.cli import main

    original = build_module.write_rotations

    def without_tables(spec, plans, folder, *args, **options):
        rows = original(spec, plans, folder, *args, **options)
        for path in folder.rglob("*.parquet"):
            path.unlink()  # every gold SQL now errors
        return rows

    monkeypatch.setattr(build_module, "write_rotations", without_tables)
    code = main(["build", str(SCHEMAS / "retail.yaml"), "-o", str(tmp_path / "out"), "--jobs", "1"])
    assert code == 1
    assert list(tmp_path.iterdir()) == []
