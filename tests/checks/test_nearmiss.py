"""The near-miss study: operators on the AST, planted rows, survival on the example packs (issue 5)."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from conftest import build_variant, spec_text

from evalpack.build import build_pack
from evalpack.checks.golden import orders_result as compared_in_order
from evalpack.checks.nearmiss.operators import OPERATORS, mutants_of
from evalpack.checks.nearmiss.rollup import plan_rollups
from evalpack.checks.nearmiss.study import (
    build_mutants,
    plan_runs,
    plan_study,
    prepare_mutants,
    still_studied,
    study_markdown,
    study_rotation,
    summarize_study,
)
from evalpack.checks.verification import materialize, rotation_connection
from evalpack.core.scoring import answer_matches, verdict_in_any_order
from evalpack.data.plan import plan_pack
from evalpack.data.tables import connect_tables, duckdb_types
from evalpack.questions.derive import DIALECT, Question, derive_questions
from evalpack.spec.reader import load_spec, parse_spec

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

TYPES = {
    "orders": {"order_id": "BIGINT", "customer_id": "BIGINT", "channel": "VARCHAR", "note": "VARCHAR",
               "amount": "DECIMAL(18,2)", "refund": "DECIMAL(18,2)", "ordered_at": "DATE"},
    "customers": {"customer_id": "BIGINT", "referrer_id": "BIGINT", "segment": "VARCHAR"},
}
WINDOW = "ordered_at >= CAST('2025-01-01' AS DATE) AND ordered_at < CAST('2025-02-01' AS DATE)"

# one gold query per operator, and one mutant the operator must produce from it
CASES = {
    "inclusive_end": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}",
                      "ordered_at <= CAST('2025-02-01' AS DATE)"),
    "exclusive_start": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}",
                        "ordered_at > CAST('2025-01-01' AS DATE)"),
    "inclusive_start": ("SELECT COUNT(*) FROM orders WHERE ordered_at > CAST('2025-01-01' AS DATE)",
                        "ordered_at >= CAST('2025-01-01' AS DATE)"),
    "exclusive_end": ("SELECT COUNT(*) FROM orders WHERE ordered_at <= CAST('2025-01-31' AS DATE)",
                      "ordered_at < CAST('2025-01-31' AS DATE)"),
    "date_shift": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}", "CAST('2024-12-31' AS DATE)"),
    "whole_units": (f"SELECT ROUND(SUM(amount), 2) FROM orders WHERE {WINDOW}", "ROUND(SUM(amount), 0)"),
    "agg_swap": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}", "SELECT AVG(amount)"),
    "distinct": (f"SELECT COUNT(customer_id) FROM orders WHERE {WINDOW}", "COUNT(DISTINCT customer_id)"),
    "inner_join": ("SELECT COUNT(*) FROM orders AS c LEFT JOIN customers AS p ON c.customer_id = p.customer_id "
                   "WHERE p.customer_id IS NULL", "FROM orders AS c JOIN customers"),
    "join_key": ("SELECT COUNT(*) FROM orders AS c LEFT JOIN customers AS p ON c.customer_id = p.customer_id",
                 "ON c.customer_id = p.referrer_id"),
    "drop_conjunct": (f"SELECT SUM(amount) FROM orders WHERE channel = 'web' AND {WINDOW}",
                      "WHERE channel = 'web' AND ordered_at < CAST('2025-02-01' AS DATE)"),
    "and_or": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}",
               "ordered_at >= CAST('2025-01-01' AS DATE) OR ordered_at"),
    "null_flip": ("SELECT COUNT(*) FROM orders WHERE customer_id IS NULL", "WHERE NOT customer_id IS NULL"),
    "order_flip": ("SELECT channel FROM orders GROUP BY channel ORDER BY SUM(amount) DESC LIMIT 1",
                   "ORDER BY SUM(amount) ASC LIMIT 1"),
    "limit_shift": ("SELECT channel FROM orders GROUP BY channel ORDER BY SUM(amount) DESC LIMIT 1", "LIMIT 2"),
    "constant_shift": ("SELECT ROUND(250000.00 + SUM(amount), 2) FROM orders", "250001.00 + SUM(amount)"),
    "column_swap": (f"SELECT SUM(amount) FROM orders WHERE {WINDOW}", "SELECT SUM(refund)"),
}


def _question(sql: str, expected=1, answers=(("seed_1", 1),)) -> Question:
    return Question("q1", "?", sql, tuple(answers), "number", 2, "test", ())


@pytest.mark.parametrize("operator", sorted(CASES))
def test_each_operator_makes_its_mutant(operator):
    gold, fragment = CASES[operator]
    made = [(op, tree.sql(dialect=DIALECT)) for op, tree in mutants_of(_question(gold), TYPES,
                                                                      {"orders": {"customer_id", "note"}})]
    mine = [sql for op, sql in made if op == operator]
    assert any(fragment in sql for sql in mine), (operator, mine)
    assert all(sql != gold for sql in mine)


def test_count_star_only_swaps_to_columns_that_can_be_null():
    made = mutants_of(_question(f"SELECT COUNT(*) FROM orders WHERE {WINDOW}"), TYPES, {"orders": {"note"}})
    swaps = [t.sql(dialect=DIALECT) for op, t in made if op == "agg_swap"]
    assert swaps == [f"SELECT COUNT(note) FROM orders WHERE {WINDOW}"]


def test_constant_answer_only_with_rotated_answers():
    q = _question("SELECT SUM(amount) FROM orders", answers=(("seed_1", 10.5), ("seed_2", 11.25)))
    assert not [op for op, _ in mutants_of(q, TYPES, {})if op == "constant_answer"]
    made = [t.sql() for op, t in mutants_of(q, TYPES, {}, dict(q.expected)) if op == "constant_answer"]
    assert made == ["SELECT 10.5"]


def test_equivalent_mutants_are_dropped_and_counted():
    spec = load_spec(SCHEMAS / "retail.yaml")
    # x >= a AND x >= a: dropping either conjunct yields the same query, which sqlglot normalises alike
    q = Question("q1", "?", "SELECT COUNT(*) FROM orders WHERE amount >= 5 AND amount >= 5", (("seed_42", 1),),
                 "integer", None, "test", ())
    mutants, equivalent = build_mutants(spec, (q,), duckdb_types(spec))
    assert equivalent["drop_conjunct"] >= 1
    assert [m.sql for m in mutants if m.operator == "drop_conjunct"] == []
    assert len({m.sql for m in mutants}) == len(mutants)


def _study(pack: Path) -> dict:
    return json.loads((pack / "manifest.json").read_text())["near_miss_study"]


def _rate(study: dict) -> float:
    ran = sum(r["mutants"] for r in study["operators"].values())
    return sum(r["match_all"] for r in study["operators"].values()) / ran


def test_example_packs_let_at_most_one_percent_survive(retail_pack, finance_pack):
    for pack in (retail_pack, finance_pack):
        study = _study(pack)
        assert study["mutants_run"] > 500
        assert _rate(study) <= 0.01, study_markdown(study)
        assert study["operators"]["inner_join"]["mutants"] >= 1
        assert study["operators"]["inner_join"]["match_all"] == 0  # orphans and nulls are declared
        # the holdout's survivors are counted, not listed (each returns its question's answer)
        assert len(study["survivors"]) == min(50, study["survivors_total"] - study["survivors_withheld"])
        for survivor in study["survivors"]:
            assert survivor["operator"] in OPERATORS and survivor["sql"].startswith(("SELECT", "WITH"))


@pytest.fixture(scope="module")
def datetime_pack(tmp_path_factory) -> Path:
    return build_variant(tmp_path_factory, "retail_datetime", "ordered_at:  {type: date,",
                         "ordered_at:  {type: datetime,")


def test_datetime_curve_column_still_catches_window_mistakes(datetime_pack):
    study = _study(datetime_pack)
    assert _rate(study) <= 0.05, study_markdown(study)
    for op in ("inclusive_end", "exclusive_start", "date_shift"):
        assert study["operators"][op]["mutants"] > 50
        assert study["operators"][op]["match_all"] == 0


def test_study_records_what_each_mutant_did(retail_pack):
    """Known outcomes on the retail pack: a killed mutant, a surviving one, an erroring one."""
    spec = load_spec(SCHEMAS / "retail.yaml", rotations=3)
    plans = plan_pack(spec)
    window = "ordered_at >= CAST('2025-01-01' AS DATE) AND ordered_at < CAST('2025-02-01' AS DATE)"
    gold = next(q for q in derive_questions(spec, plans) if q.kind == "period_total")
    assert window in gold.gold_sql
    # answered as 0 rows with channel code 9 (no such channel): COUNT(*) -> COUNT(note) also gives 0,
    # as does every window edit: those mutants survive. b1 carries the only LIMIT.
    zero = Question("z1", "?", f"SELECT COUNT(*) FROM orders WHERE channel = 9 AND {window}",
                    tuple((f"seed_{p.seed}", 0) for p in plans), "integer", None, "test", ())
    broken = Question("b1", "?", "SELECT SUM(amount) FROM orders WHERE customer_id IN (SELECT 1) LIMIT 1",
                      tuple((f"seed_{p.seed}", 0) for p in plans), "number", 2, "test", ())
    questions = (gold, zero, broken)
    prepared = prepare_mutants(spec, questions, duckdb_types(spec))
    mutants, _ = prepared.of(q.id for q in questions)
    per_rotation = {}
    for p in plans:  # the near-miss part of build.check_rotation, for questions whether they verify or not
        with rotation_connection(retail_pack / "rotations" / f"seed_{p.seed}" / "tables") as con:
            per_rotation[f"seed_{p.seed}"] = study_rotation(con, f"seed_{p.seed}", {q.id: q for q in questions},
                                                            plan_study(con, mutants, duckdb_types(spec)))
    study = summarize_study(prepared, tuple(q.id for q in questions), per_rotation)
    # a build studies on each rotation only the mutants that matched on every rotation before it: same summary
    pruned: dict = {}
    for rotation, outcomes in per_rotation.items():
        pruned[rotation] = {m: outcomes[m] for m in still_studied(mutants, pruned.values())}
    assert sum(map(len, pruned.values())) < sum(map(len, per_rotation.values()))
    assert summarize_study(prepared, tuple(q.id for q in questions), pruned) == study
    # a mutant that errors only after a mismatch was killed, not errored
    first, *later = per_rotation
    killed = next(m for m in mutants if per_rotation[first][m] is False)
    assert summarize_study(prepared, tuple(q.id for q in questions),
                           {first: per_rotation[first], **{r: {**per_rotation[r], killed: None} for r in later}}) == study
    ops = study["operators"]
    survivors = {(s["question"], s["operator"]) for s in study["survivors"]}
    assert ("z1", "inclusive_end") in survivors and ("z1", "agg_swap") in survivors
    assert not [s for s in study["survivors"] if s["question"] == gold.id]
    assert ops["inclusive_end"]["mutants"] == 2 and ops["inclusive_end"]["match_all"] == 1
    assert ops["inclusive_end"]["match_first"] == 1
    # limit_shift to LIMIT 0 returns no row: a mismatch, not an error
    assert ops["limit_shift"]["mutants"] == 2 and ops["limit_shift"]["errored"] == 0
    total_made = sum(r["mutants"] + r["errored"] for r in ops.values())
    mutants, _ = build_mutants(spec, (gold, zero, broken), duckdb_types(spec))
    assert total_made == len(mutants)


def _rows_or_none(con, sql: str) -> list[tuple] | None:
    try:
        return con.execute(sql).fetchall()
    except duckdb.Error:
        return None


def test_mutants_compared_in_row_order_are_judged_as_if_each_ran_alone(retail_pack):
    """Mutants of questions whose rows are compared in order run batched as lists of rows (in no guaranteed
    order): the list decides only where no order of its rows could change the verdict, and every other one runs
    again alone. Each outcome is what running the mutant alone and comparing its rows in order gives."""
    spec = load_spec(SCHEMAS / "retail.yaml", rotations=3)
    plans = plan_pack(spec)
    questions = [q for q in derive_questions(spec, plans) if q.answer_type == "rows" and compared_in_order(q.gold_sql)]
    assert len(questions) >= 5
    mutants, _ = prepare_mutants(spec, tuple(questions), duckdb_types(spec)).of(q.id for q in questions)
    by_id = {q.id: q for q in questions}
    rotation = f"seed_{plans[0].seed}"
    with rotation_connection(retail_pack / "rotations" / rotation / "tables") as con:
        plan = plan_study(con, mutants, duckdb_types(spec))
        listed = {i for job in plan.jobs() if job.rows for i in job.members}
        assert len(listed) > len(mutants) // 2, "ordered mutants share statements"
        outcomes = study_rotation(con, rotation, by_id, plan)
        decided_by_list = 0
        for i, m in enumerate(mutants):
            q = by_id[m.question_id]
            record = {"answer_type": q.answer_type, "round_decimals": q.round_decimals}
            rows = next((r for r in map(functools.partial(_rows_or_none, con), dict.fromkeys((plan.sql[i], m.sql)))
                         if r is not None), None)
            if rows is None:  # an error either way
                assert outcomes[m] is None, m.sql
                continue
            assert outcomes[m] == answer_matches(record, q.expected_for(rotation), rows, ordered=True), m.sql
            decided_by_list += verdict_in_any_order(record, q.expected_for(rotation), rows[::-1]) is not None
    assert {True, False, None} <= set(outcomes.values())
    assert 0 < decided_by_list < len(mutants), "some are decided by their list, some need their order"


def test_rotated_answers_kill_the_constant_answer(tmp_path):
    text = (SCHEMAS / "finance.yaml").read_text().replace("rotations: 3", "rotations: 3\nanswers: rotated")
    spec_path = tmp_path / "finance_rotated.yaml"
    spec_path.write_text(text)
    result = build_pack(spec_path, tmp_path / "pack", rotations=3)
    row = result.near_miss["operators"]["constant_answer"]
    # questions whose answer is the same on every rotation (balanced ledger: 0) are the only survivors
    invariant = sum(1 for q in result.shipped if len({json.dumps(v) for _, v in q.expected}) == 1)
    assert row["mutants"] + row["errored"] == len(result.shipped)
    assert row["match_all"] == invariant
    assert row["match_all"] < row["mutants"]


def _outcome(cursor, sql: str):
    """The rows (in order only when the query orders them, as the scorer compares) and their types, or the error."""
    try:
        rows = cursor.execute(sql).fetchall()
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        return ("error", type(exc).__name__)
    types = [[type(v) for v in row] for row in rows]
    if not compared_in_order(sql):
        rows, types = sorted(rows, key=repr), sorted(types, key=repr)
    return rows, types


def test_compressed_tables_answer_every_gold_and_mutant_as_plain_ones(retail_pack, monkeypatch):
    """A rotation loaded compressed (what rotations of a million rows and more get) returns, for every gold
    SQL and every mutant, the rows and types the plain in-memory load returns; its tables are compressed,
    and what lists the database's own tables sees each once."""
    from evalpack.checks import verification as verify

    spec = parse_spec(spec_text(retail_pack), file="retail.yaml")
    questions = derive_questions(spec, plan_pack(spec))
    mutants, _ = build_mutants(spec, questions, duckdb_types(spec))
    tables = sorted((retail_pack / "rotations").iterdir())[0] / "tables"
    plain = materialize(connect_tables(tables))
    monkeypatch.setattr(verify, "COMPRESS_MIN_ROWS", 0)
    packed = materialize(connect_tables(tables))
    stored = packed.execute(f"SELECT DISTINCT compression FROM pragma_storage_info('{verify.LOADED}.{verify.LOADED}.orders')"
                            ).fetchall()
    assert {c for (c,) in stored} - {"Uncompressed", "Constant"}, stored
    listed = "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main' ORDER BY ALL"
    assert packed.execute(listed).fetchall() == plain.execute(listed).fetchall()
    # every gold SQL and up to 40 mutants of each operator (all of them take half a minute)
    by_operator: dict[str, list[str]] = {}
    for m in mutants:
        if m.operator != "partition_drop" and len(by_operator.setdefault(m.operator, [])) < 40:
            by_operator[m.operator].append(m.sql)
    sqls = list(dict.fromkeys([q.gold_sql for q in questions] + [sql for run in by_operator.values() for sql in run]))
    assert len(by_operator) >= 15 and len(sqls) > 500

    def outcome(con, sql: str):
        try:
            rows = con.execute(sql).fetchall()
        except duckdb.Error as exc:
            return "error", type(exc).__name__
        return rows, [[type(v) for v in row] for row in rows]

    differ = [sql for sql in sqls if outcome(packed, sql) != outcome(plain, sql)
              and (compared_in_order(sql) or _outcome(packed, sql) != _outcome(plain, sql))]
    assert differ == []


PER_FORM = 30  # mutants run as written per (operator, rewrite): every operator and rewrite, in bounded time
JOB_STRIDE = 3  # of the study's batched jobs, every third is run and its members checked against their own SQL


def sampled(indices: list[int], form) -> list[int]:
    """The first :data:`PER_FORM` of ``indices`` of each ``form(i)``: running all of retail's 4,000 rewritten
    mutants twice took 100 s, and one rewrite reads every mutant of an operator alike."""
    seen: Counter = Counter()
    out = []
    for i in indices:
        seen[form(i)] += 1
        if seen[form(i)] <= PER_FORM:
            out.append(i)
    return out


@pytest.mark.parametrize("which", ["retail", "retail_datetime", "finance"])
def test_the_study_runs_each_mutant_exactly_as_written(which, retail_pack, finance_pack, datetime_pack):
    """Rewrites over rollups and batched scans return what the mutant itself returns on the table's rows: same
    values, same types (one rotation; every job, and up to 30 mutants of each operator and rewrite)."""
    pack = {"retail": retail_pack, "retail_datetime": datetime_pack, "finance": finance_pack}[which]
    spec = parse_spec(spec_text(pack), file=f"{which}.yaml")
    questions = derive_questions(spec, plan_pack(spec))
    types = duckdb_types(spec)
    mutants, _ = build_mutants(spec, questions, types)
    first = sorted((pack / "rotations").iterdir())[0]
    con = materialize(connect_tables(first / "tables"))
    plan = plan_runs(mutants, plan_rollups(con, [m.need for m in mutants if m.need], types))
    plan.create_tables(con)
    cursor = con.cursor()  # the study's workers run on cursors
    rewritten = [i for i, sql in enumerate(plan.sql) if sql != mutants[i].sql]
    if which != "finance":  # finance's 6,000 movements over ~1,500 (day, type) pairs: no rollup is worth it
        assert len(rewritten) >= len(mutants) // 3, "rollups answer most single-table aggregate mutants"
        # the year's total in a month's share, mistaken alike in every month's question, is computed once
        assert plan.shared and all(any(table in plan.sql[i] for i in rewritten) for table, _ in plan.shared)
    # DISTINCT and AVG mistakes in monthly series: no rollup answers them; cells computed once do
    assert plan.cells and plan.over_cells and plan.over_cells <= set(rewritten)
    by_id = {q.id: q for q in questions}
    for i in sampled(rewritten, lambda i: (mutants[i].operator, i in plan.over_cells, plan.sql[i] == mutants[i].rollup_sql)):
        if mutants[i].operator == "partition_drop":
            continue  # a running sum over several groups' rows of one month: their order is the engine's choice
        ours, theirs = _outcome(cursor, plan.sql[i]), _outcome(con, mutants[i].sql)
        if ours != theirs and i in plan.over_cells and compared_in_order(mutants[i].sql):
            # groups tied on the ORDER BY come in the engine's order either way (an AVG mistaken for a SUM that
            # rounds alike for two channels): the same rows, judged alike against the question's answer
            q = by_id[mutants[i].question_id]
            assert sorted(ours[0], key=repr) == sorted(theirs[0], key=repr), mutants[i].sql
            assert [answer_matches({"answer_type": q.answer_type, "round_decimals": q.round_decimals},
                                   q.expected_for(first.name), rows, ordered=True) for rows in (ours[0], theirs[0])] \
                == [False, False], mutants[i].sql
            continue
        assert ours == theirs, mutants[i].sql
    assert plan.batches, "some mutants share a scan"
    jobs = plan.jobs()
    assert sorted(i for job in jobs for i in job.members) == list(range(len(mutants)))
    if which != "finance":
        assert any(job.rows for job in jobs), "row-returning rewrites share statements"
    shapes: set[tuple[bool, bool]] = set()
    for k, job in enumerate(jobs):
        shape = (bool(job.rows), bool(job.per_member))
        # every third job and the first of each shape: running all of retail's 597 took 14 s, a batch of 20
        # correlated NOT EXISTS mistakes 3 s of them, and one job's members are placed like another's of its shape
        if job.sql is None or (k % JOB_STRIDE and shape in shapes):
            continue
        shapes.add(shape)
        try:
            if job.per_member:  # one row per member: (member, its rows)
                per_member = dict(cursor.execute(job.sql).fetchall())
                assert sorted(per_member) == sorted(job.members), job.sql
                row = [per_member[i] for i in job.members]
            else:
                row = cursor.execute(job.sql).fetchone()
        except duckdb.Error:  # the study then runs each member on its own: one of them must fail as written
            assert any(_outcome(con, mutants[i].sql)[0] == "error" for i in job.members), job.sql
            continue
        assert len(row) == len(job.members)
        # each member's value is where the job puts it: both ends of every job and up to 4 members between
        members = list(zip(job.members, row))
        for i, value in members[:3] + members[3:-3][::max(1, (len(members) - 6) // 4)][:4] + members[3:][-3:]:
            if mutants[i].operator == "partition_drop":
                continue  # as above: which row of a month a running sum takes first is the engine's choice
            alone = con.execute(plan.sql[i]).fetchall()
            if job.rows:  # the same rows (a list keeps them in no guaranteed order: compared as a multiset)
                assert Counter(tuple(r.values()) for r in value or ()) == Counter(alone), plan.sql[i]
            else:
                assert [(value,)] == alone, plan.sql[i]
    con.close()


def test_a_date_template_reads_only_real_date_literals_from_the_literal_table():
    from evalpack.checks.nearmiss.study import LITERALS, date_template

    sql = "SELECT a FROM t WHERE d >= CAST('2025-01-01' AS DATE) AND d < CAST('2025-02-01' AS DATE)"
    template, literals = date_template(sql)
    assert literals == ("2025-01-01", "2025-02-01")
    assert template == (f"SELECT a FROM t WHERE d >= CAST({LITERALS}.{LITERALS}_0 AS DATE) "
                        f"AND d < CAST({LITERALS}.{LITERALS}_1 AS DATE)")
    # text that only looks like a literal (inside a quoted name or a comment) is not one: nothing is templated
    assert date_template("""SELECT "CAST('2025-01-01' AS DATE)" FROM t WHERE d >= CAST('2025-01-01' AS DATE)""") \
        is None
    assert date_template("SELECT 1 -- CAST('2025-01-01' AS DATE)") is None
    # inside a string the quotes are doubled: no match, and the string is left as it is
    kept = "SELECT 'CAST(''2025-03-01'' AS DATE)' FROM t WHERE d >= CAST('2025-01-01' AS DATE)"
    assert date_template(kept)[0].startswith("SELECT 'CAST(''2025-03-01'' AS DATE)' FROM t")
    assert date_template("SELECT 1") is None
    assert date_template(f"SELECT {LITERALS} FROM t WHERE d >= CAST('2025-01-01' AS DATE)") is None
