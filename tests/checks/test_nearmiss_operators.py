"""The window, HAVING and ratio operators of the near-miss study, and its per-family summary.

Each operator runs on a small gold query over a tiny in-memory table: it makes the mutants it
should (and only those), each mutant is valid DuckDB SQL that answers differently on the table,
and SQL without the construct gets none."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
import sqlglot

from evalpack.checks.nearmiss.operators import OPERATORS, mutants_of
from evalpack.checks.nearmiss.study import plan_study, prepare_mutants, study_rotation, summarize_study
from evalpack.data.tables import duckdb_types
from evalpack.questions.derive import DIALECT, Question
from evalpack.spec.model import Traps
from evalpack.spec.reader import load_spec

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

TYPES = {"monthly": {"month": "DATE", "grp": "VARCHAR", "total": "BIGINT", "amount": "DECIMAL(18,2)"}}
# two groups over four months; every total distinct, and b's four months sum to 23
ROWS = [("2025-01-01", "a", 10, "10.25"), ("2025-02-01", "a", 30, "30.50"), ("2025-03-01", "a", 20, "20.75"),
        ("2025-04-01", "a", 50, "50.10"), ("2025-01-01", "b", 7, "7.35"), ("2025-02-01", "b", 3, "3.40"),
        ("2025-03-01", "b", 11, "11.05"), ("2025-04-01", "b", 2, "2.20")]

RUNNING = "SUM(total) OVER (PARTITION BY grp ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
CHANGE = "total - LAG(total) OVER (ORDER BY month)"
A_ONLY = "FROM monthly WHERE grp = 'a'"

# operator -> (gold SQL, one fragment per expected mutant in the order they are made, SQL without the construct)
CASES = {
    "window_frame": (
        f"SELECT grp, month, {RUNNING} AS run FROM monthly ORDER BY grp, month",
        ["ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", "SUM(total) OVER (PARTITION BY grp) AS run"],
        "SELECT grp, month, SUM(total) OVER (PARTITION BY grp) AS whole FROM monthly ORDER BY grp, month"),
    "partition_drop": (
        f"SELECT grp, month, {RUNNING} AS run FROM monthly ORDER BY grp, month",
        ["SUM(total) OVER (ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run"],
        "SELECT month, SUM(total) OVER (ORDER BY month) AS run FROM monthly ORDER BY month, run"),
    "window_order_flip": (
        f"SELECT month, {CHANGE} AS change {A_ONLY} ORDER BY month",
        ["LAG(total) OVER (ORDER BY month DESC) AS change"],
        "SELECT grp, SUM(total) AS total FROM monthly GROUP BY grp ORDER BY total DESC"),
    "lag_offset": (
        f"SELECT month, {CHANGE} AS change {A_ONLY} ORDER BY month",
        ["LAG(total, 2) OVER", "LEAD(total) OVER"],
        f"SELECT month, total {A_ONLY} ORDER BY month"),
    "rank_swap": (
        "SELECT r FROM (SELECT RANK() OVER (ORDER BY grp) AS r FROM monthly) ORDER BY r",
        ["ROW_NUMBER() OVER (ORDER BY grp)", "DENSE_RANK() OVER (ORDER BY grp)"],
        "SELECT r FROM (SELECT COUNT(*) OVER (ORDER BY grp) AS r FROM monthly) ORDER BY r"),
    "having_bound": (
        "SELECT grp, SUM(total) FROM monthly GROUP BY grp HAVING SUM(total) >= 23 AND COUNT(*) <= 4 ORDER BY grp",
        ["HAVING SUM(total) > 23 AND COUNT(*) <= 4", "HAVING SUM(total) >= 23 AND COUNT(*) < 4"],
        "SELECT grp, SUM(total) FROM monthly WHERE total >= 3 AND total < 30 GROUP BY grp ORDER BY grp"),
    "percent_scale": (
        "SELECT ROUND(100 * SUM(total) FILTER (WHERE grp = 'b') / SUM(total), 2), "
        "ROUND(SUM(total) FILTER (WHERE grp = 'a') / COUNT(*) * 100, 2) FROM monthly",
        # sites in sqlglot's breadth-first order: the shallower multiplication first
        ["ROUND(SUM(total) FILTER(WHERE grp = 'a') / COUNT(*), 2)",
         "ROUND(SUM(total) FILTER(WHERE grp = 'b') / SUM(total), 2)"],
        "SELECT 100 + SUM(total), SUM(total) * 10 FROM monthly"),
    "integer_division": (
        "SELECT COUNT(*) FILTER (WHERE total > 10) / COUNT(*) FROM monthly",
        ["COUNT(*) FILTER(WHERE total > 10) // COUNT(*)"],
        "SELECT SUM(total) - COUNT(*), SUM(total) // COUNT(*) FROM monthly"),
}


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute("CREATE TABLE monthly (month DATE, grp VARCHAR, total BIGINT, amount DECIMAL(18,2))")
    con.executemany("INSERT INTO monthly VALUES (CAST(? AS DATE), ?, ?, CAST(? AS DECIMAL(18,2)))", ROWS)
    yield con
    con.close()


def _question(sql: str) -> Question:
    return Question("q1", "?", sql, (("seed_1", 1),), "number", 2, "test", ())


def _made(sql: str) -> list[tuple[str, str]]:
    return [(op, tree.sql(dialect=DIALECT)) for op, tree in mutants_of(_question(sql), TYPES, {})]


def _of(operator: str, sql: str) -> list[str]:
    return [mutant for op, mutant in _made(sql) if op == operator]


def test_the_new_operators_are_registered_before_constant_answer():
    assert OPERATORS[-1] == "constant_answer"
    assert set(CASES) <= set(OPERATORS)
    assert len(set(OPERATORS)) == len(OPERATORS)


@pytest.mark.parametrize("operator", sorted(CASES))
def test_operator_makes_its_mutants(operator):
    gold, fragments, _ = CASES[operator]
    made = _of(operator, gold)
    assert len(made) == len(fragments), made
    for mutant, fragment in zip(made, fragments):
        assert fragment in mutant, (fragment, mutant)
    assert _canonical(gold) not in made


@pytest.mark.parametrize("operator", sorted(CASES))
def test_each_mutant_is_valid_duckdb_and_answers_differently(operator, con):
    gold, _, _ = CASES[operator]
    expected = con.execute(gold).fetchall()
    for mutant in _of(operator, gold):
        assert sqlglot.parse_one(mutant, read=DIALECT).sql(dialect=DIALECT) == mutant  # renders back as itself
        assert con.execute(mutant).fetchall() != expected, mutant


@pytest.mark.parametrize("operator", sorted(CASES))
def test_operator_leaves_sql_without_its_construct_alone(operator, con):
    _, _, without = CASES[operator]
    con.execute(without).fetchall()  # the control query is valid
    assert _of(operator, without) == []


def _canonical(sql: str) -> str:
    return sqlglot.parse_one(sql, read=DIALECT).sql(dialect=DIALECT)


# --------------------------------------------------------------------------- window_frame


def test_window_frame_adds_no_frame_to_an_ordered_window_without_one():
    made = _of("window_frame", f"SELECT month, SUM(total) OVER (ORDER BY month) AS run {A_ONLY} ORDER BY month")
    assert made == [f"SELECT month, SUM(total) OVER () AS run {A_ONLY} ORDER BY month"]
    assert _of("window_frame", f"SELECT month, {CHANGE} AS change {A_ONLY} ORDER BY month") == []


def test_window_frame_keeps_the_order_where_only_the_last_row_is_read(con):
    """A running total read at its last month is the whole partition's total: dropping the window's
    ORDER BY there is the same query on any data, so only the 1 PRECEDING mutant is made."""
    gold = (f"WITH running AS (SELECT month, SUM(total) OVER (ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING "
            f"AND CURRENT ROW) AS run {A_ONLY}) SELECT run FROM running ORDER BY month DESC LIMIT 1")
    made = _of("window_frame", gold)
    assert len(made) == 1 and "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW" in made[0]
    whole = gold.replace("(ORDER BY month ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)", "()")
    assert con.execute(whole).fetchall() == con.execute(gold).fetchall() == [(110,)]
    # read at its first month instead, the whole partition answers differently: that mutant is made
    first = gold.replace("month DESC LIMIT 1", "month LIMIT 1")
    made = _of("window_frame", first)
    assert len(made) == 2 and "OVER () AS run" in made[1]
    assert con.execute(made[1]).fetchall() != con.execute(first).fetchall()


# --------------------------------------------------------------------------- ordering and LAG


def test_order_flip_leaves_the_window_order_to_window_order_flip():
    gold = f"SELECT month, {CHANGE} AS change {A_ONLY} ORDER BY month"
    assert _of("order_flip", gold) == [f"SELECT month, {CHANGE} AS change {A_ONLY} ORDER BY month DESC"]
    assert _of("window_order_flip", gold) == [
        f"SELECT month, total - LAG(total) OVER (ORDER BY month DESC) AS change {A_ONLY} ORDER BY month"]


def test_lag_offset_moves_an_explicit_offset_both_ways_and_constant_shift_leaves_it(con):
    gold = f"SELECT month, total - LAG(total, 2) OVER (ORDER BY month) AS change {A_ONLY} ORDER BY month"
    made = _of("lag_offset", gold)
    assert [m.split(" - ")[1].split(" OVER")[0] for m in made] == ["LAG(total, 3)", "LAG(total, 1)", "LEAD(total, 2)"]
    expected = con.execute(gold).fetchall()
    assert all(con.execute(m).fetchall() != expected for m in made)
    shifted = _of("constant_shift", gold)
    assert not [m for m in shifted if "LAG(total, 1)" in m or "LAG(total, 3)" in m]


# --------------------------------------------------------------------------- HAVING


def test_having_comparisons_belong_to_having_bound_alone():
    gold = ("SELECT grp FROM monthly WHERE month >= DATE '2025-01-01' AND month < DATE '2025-05-01' GROUP BY grp "
            "HAVING SUM(total) > 22 AND SUM(total) <= 110")
    made = _made(gold)
    bounds = [sql for op, sql in made if op in ("inclusive_end", "exclusive_start", "inclusive_start", "exclusive_end")]
    assert len(bounds) == 2  # the WHERE's two bounds only
    assert all("HAVING SUM(total) > 22 AND SUM(total) <= 110" in sql for sql in bounds)
    having = [sql for op, sql in made if op == "having_bound"]
    assert [sql.split("HAVING ")[1] for sql in having] == ["SUM(total) >= 22 AND SUM(total) <= 110",
                                                           "SUM(total) > 22 AND SUM(total) < 110"]


def test_having_bound_ignores_a_subquery_where_inside_having():
    gold = ("SELECT grp FROM monthly GROUP BY grp HAVING SUM(total) = "
            "(SELECT MAX(total) FROM monthly WHERE month < DATE '2025-03-01')")
    assert _of("having_bound", gold) == []
    assert len(_of("inclusive_end", gold)) == 1


# --------------------------------------------------------------------------- ratios


def test_integer_division_drops_a_cast_into_the_division_it_guarded(con):
    gold = "SELECT CAST(COUNT(*) FILTER (WHERE total > 20) AS DOUBLE) / COUNT(*) FROM monthly"
    made = _of("integer_division", gold)
    assert made == ["SELECT COUNT(*) FILTER(WHERE total > 20) // COUNT(*) FROM monthly"]
    assert con.execute(gold).fetchall() == [(0.25,)] and con.execute(made[0]).fetchall() == [(0,)]
    # the cast dropped but / kept would be the same query in DuckDB: that is not what is made
    assert con.execute(gold.replace("CAST(", "(").replace(" AS DOUBLE)", ")")).fetchall() == [(0.25,)]


def test_integer_division_keeps_what_the_cast_held_together(con):
    gold = "SELECT SUM(total) / CAST(COUNT(*) * 2 AS DOUBLE) FROM monthly"
    made = _of("integer_division", gold)
    assert made == ["SELECT SUM(total) // (COUNT(*) * 2) FROM monthly"]
    assert con.execute(gold).fetchall() == [(133 / 16,)] and con.execute(made[0]).fetchall() == [(8,)]


def test_integer_division_drops_a_decimal_rounding_cast(con):
    gold = f"SELECT CAST(AVG(total) AS DECIMAL(18, 0)) / 2 {A_ONLY}"
    made = _of("integer_division", gold)
    assert made == [f"SELECT AVG(total) / 2 {A_ONLY}"]
    assert con.execute(gold).fetchall() != con.execute(made[0]).fetchall()


def test_integer_division_follows_cte_columns_to_their_types(con):
    integer = ("WITH s AS (SELECT grp, SUM(total) AS t, COUNT(*) AS n FROM monthly GROUP BY grp) "
               "SELECT grp, t / n FROM s ORDER BY grp")
    made = _of("integer_division", integer)
    assert made == [integer.replace("t / n", "t // n")]
    assert con.execute(made[0]).fetchall() != con.execute(integer).fetchall()
    assert _of("integer_division", integer.replace("SUM(total)", "SUM(amount)")) == []


def test_no_integer_division_where_duckdb_divides_exactly_anyway(con):
    """DuckDB's // of a DECIMAL or DOUBLE is ordinary division: such a mutant would be the same query."""
    for gold in ("SELECT SUM(amount) / COUNT(*) FROM monthly",
                 "SELECT CAST(SUM(amount) AS DOUBLE) / COUNT(*) FROM monthly",
                 "SELECT AVG(total) / 3 FROM monthly"):
        assert _of("integer_division", gold) == [], gold
        same = gold.replace(" / ", " // ")
        assert con.execute(same).fetchall() == con.execute(gold).fetchall(), same


def test_percent_scale_only_drops_a_factor_of_exactly_100():
    assert _of("percent_scale", "SELECT SUM(total) * 100.0 / COUNT(*) FROM monthly") == [
        "SELECT SUM(total) / COUNT(*) FROM monthly"]
    assert _of("percent_scale", "SELECT SUM(total) * 1000 / COUNT(*) FROM monthly") == []


# --------------------------------------------------------------------------- per-family summary


SETUP = {  # rotation -> orders rows (order_id, amount, channel): the expected answers differ per rotation;
    # amounts repeat (SUM(DISTINCT) differs) and sit on both sides of every bound a mutant moves (19.50, 20)
    "seed_1": [(1, "19.50", "web"), (2, "20.00", "app"), (3, "30.00", "web"), (4, "30.00", "store"),
               (5, "20.50", "app")],
    "seed_2": [(1, "19.50", "web"), (2, "25.00", "web"), (3, "35.00", "app"), (4, "35.00", "web"),
               (5, "20.00", "store"), (6, "20.75", "app")],
}


def _rotation(types: dict[str, dict[str, str]], rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table, columns in types.items():
        con.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c} {t}" for c, t in columns.items())})')
    con.executemany("INSERT INTO orders (order_id, amount, channel, ordered_at) "
                    "VALUES (?, CAST(? AS DECIMAL(18,2)), ?, DATE '2025-01-15')", rows)
    return con


def test_summary_counts_mutants_per_family():
    spec = load_spec(SCHEMAS / "retail.yaml")
    spec = replace(spec, traps=Traps())  # the channel as stored labels
    types = duckdb_types(spec)
    golds = {  # id -> (kind, gold SQL, answer type)
        "web": ("count", "SELECT COUNT(*) FROM orders WHERE channel = 'web'", "integer"),
        "none": ("count", "SELECT COUNT(*) FROM orders WHERE channel = 'phone'", "integer"),  # 0 everywhere
        "big": ("total", "SELECT SUM(amount) FROM orders WHERE amount >= 20", "number"),
        "loose": ("total", "SELECT SUM(amount) FROM orders", "number"),  # in no family
    }
    cons = {rotation: _rotation(types, rows) for rotation, rows in SETUP.items()}
    try:
        questions = tuple(
            Question(qid, "?", sql, tuple((r, c.execute(sql).fetchone()[0]) for r, c in cons.items()),
                     answer_type, 2 if answer_type == "number" else None, kind, ())
            for qid, (kind, sql, answer_type) in golds.items())
        prepared = prepare_mutants(spec, questions, types)
        ids = tuple(q.id for q in questions)
        mutants, _ = prepared.of(ids)
        by_id = {q.id: q for q in questions}
        per_rotation = {r: study_rotation(c, r, by_id, plan_study(c, mutants, types)) for r, c in cons.items()}
    finally:
        for c in cons.values():
            c.close()
    kinds = {qid: kind for qid, (kind, _, _) in golds.items() if qid != "loose"}
    study = summarize_study(prepared, ids, per_rotation, kinds=kinds)
    plain = summarize_study(prepared, ids, per_rotation)
    assert "families" not in plain
    assert {k: v for k, v in study.items() if k != "families"} == plain

    families = study["families"]
    assert list(families) == ["count", "total"]
    assert families["count"]["questions"] == 2 and families["total"]["questions"] == 1
    # counted from the outcomes themselves: run = no error on any rotation, match_all = matched on every one
    for kind, row in families.items():
        mine = [m for m in mutants if kinds.get(m.question_id) == kind]
        outcomes = [[per_rotation[r][m] for r in per_rotation] for m in mine]
        ran = [o for o in outcomes if None not in o]
        assert row["mutants"] == len(ran) > 0
        assert row["match_all"] == sum(all(o) for o in ran)
        assert row["match_all_rate"] == round(row["match_all"] / row["mutants"], 4)
    # the zero-answer question lets mutants through (a COUNT over no row stays 0); "big" none of its own
    assert families["count"]["match_all"] >= 1
    assert not [s for s in study["survivors"] if s["question"] == "big"]
    assert families["total"]["match_all"] == 0 and families["total"]["match_all_rate"] == 0.0
    loose = sum(1 for m in mutants if m.question_id == "loose" and None not in [per_rotation[r][m] for r in per_rotation])
    assert sum(f["mutants"] for f in families.values()) == study["mutants_run"] - loose


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM p WHERE NOT EXISTS (SELECT * FROM c WHERE c.pid = p.id AND c.x > 2 OR c.s <> 'void')",
    "SELECT COUNT(*) FROM p WHERE EXISTS (SELECT * FROM c WHERE c.pid = p.id OR c.x > 2 AND c.s = 'void')",
    "SELECT COUNT(*) FROM p WHERE NOT EXISTS (SELECT * FROM c WHERE (c.pid = p.id OR c.x > 4) OR c.s = 'gone')",
])
def test_an_exists_over_an_or_is_split_into_exists_of_each_part_with_the_same_answer(sql):
    """The study runs EXISTS (... WHERE a OR b) as EXISTS (... a) OR EXISTS (... b), which DuckDB decorrelates (a
    correlated OR ran as a nested loop): the same answer on rows where each part alone differs."""
    from evalpack.checks.nearmiss.study import split_exists

    con = duckdb.connect()
    con.execute("CREATE TABLE p AS SELECT range AS id FROM range(6)")
    con.execute("CREATE TABLE c AS SELECT range % 4 AS pid, range AS x, CASE WHEN range % 3 = 0 THEN 'void' ELSE "
                "'ok' END AS s FROM range(5)")
    tree = sqlglot.parse_one(sql, read="duckdb")
    split = split_exists(tree)
    assert split is not tree and split.sql(dialect="duckdb").count("EXISTS") >= 2
    assert con.execute(split.sql(dialect="duckdb")).fetchall() == con.execute(sql).fetchall()
    plain = sqlglot.parse_one("SELECT COUNT(*) FROM p WHERE EXISTS (SELECT * FROM c WHERE c.pid = p.id)", read="duckdb")
    assert split_exists(plain) is plain
