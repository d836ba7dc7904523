"""The golden checks are written once (evalpack.checks.golden): verification and the audit agree (issue 15)."""

from __future__ import annotations

import duckdb
import pytest

from evalpack.checks import golden
from evalpack.checks.audit import audit_query, counted, tie_at_limit
from evalpack.checks.verification import Link, check_question, live_links
from evalpack.questions.derive import Question

LINK = Link("orders", "customer_id", "customers", "id")


@pytest.fixture
def con():
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE players (name VARCHAR, team VARCHAR, points INTEGER)")
    con.execute("INSERT INTO players VALUES ('ann', 'red', 10), ('bob', 'red', 10), ('cy', 'blue', 7), "
                "('dee', 'green', 7), ('eve', 'blue', 1)")
    con.execute("CREATE TABLE customers (id INTEGER, region VARCHAR)")
    con.execute("INSERT INTO customers VALUES (1, 'north'), (2, 'south'), (3, 'east')")
    con.execute("CREATE TABLE orders (id INTEGER, customer_id INTEGER, region VARCHAR, amount DOUBLE)")
    # order 9 is an orphan (customer 99 does not exist); order 10 has no customer (NULL: not an orphan)
    con.execute("INSERT INTO orders VALUES (1, 1, 'north', 100.25), (2, 2, 'south', 200.5), (3, 3, 'east', 300.0), "
                "(4, 1, 'north', 0.125), (9, 99, 'north', 500.0), (10, NULL, 'south', 1.0)")
    yield con
    con.close()


def verify_says(con, sql: str, answer_type: str = "string", round_decimals: int | None = None,
                links: tuple[Link, ...] = ()) -> dict:
    value = con.execute(sql).fetchall()
    expected = value[0][0] if answer_type != "rows" else [list(r) for r in value]
    q = Question("q1", "?", sql, (("r", expected),), answer_type, round_decimals, "imported", ())
    return dict(check_question(con, q, "r", expected, live_links(con, links)).checks)


def audit_says(con, sql: str, answer_type: str = "string", round_decimals: int | None = None,
               links: tuple[Link, ...] = ()) -> set[str]:
    value = con.execute(sql).fetchall()
    expected = value[0][0] if answer_type != "rows" else [list(r) for r in value]
    record = {"id": "q1", "question": "?", "gold_sql": sql, "expected_answer": expected,
              "answer_type": answer_type, "round_decimals": round_decimals, "kind": "imported"}
    findings = audit_query(con, record, "r", counted(con, [(lk, "declared") for lk in links]))
    return {f.kind for f in findings}


# --------------------------------------------------------------------------- ties


TIES = [
    # tied sort key 10 at LIMIT 1, but both tied rows return 'red': the answer does not depend on row order
    ("SELECT team FROM players ORDER BY points DESC LIMIT 1", False),
    # tied sort key 10 at LIMIT 1 and the rows differ (ann, bob): a tie
    ("SELECT name FROM players ORDER BY points DESC LIMIT 1", True),
    ("SELECT name FROM players ORDER BY points DESC, name LIMIT 1", False),  # a tie-breaker
    # ORDER BY an alias and by position: the sort key is the select expression (7 = 7 between cy and dee)
    ("SELECT team, points * 2 AS p FROM players ORDER BY p DESC LIMIT 3", True),
    ("SELECT team, points * 2 AS p FROM players ORDER BY 2 DESC LIMIT 3", True),
    ("SELECT team, points * 2 AS p FROM players ORDER BY 2 DESC LIMIT 4", False),
    # an OFFSET cuts too: ann and bob tie at 10, bob is kept and ann skipped (or the other way round)
    ("SELECT name FROM players ORDER BY points DESC LIMIT 3 OFFSET 1", True),
    ("SELECT name FROM players ORDER BY points DESC LIMIT 2 OFFSET 2", False),
    ("SELECT COUNT(*) AS n FROM players GROUP BY team ORDER BY n LIMIT 1", False),  # 1 = 1 (green), same row
]


@pytest.mark.parametrize(("sql", "tie"), TIES)
def test_tie_rule_is_the_same_in_verification_and_audit(con, sql, tie):
    checks = verify_says(con, sql, "string" if "COUNT" not in sql else "integer")
    assert checks["deterministic"] is (not tie)
    assert ("tie" in audit_says(con, sql, "string" if "COUNT" not in sql else "integer")) is tie
    assert (golden.find_tie(con, sql) is not None) is tie


def test_tie_evidence_names_both_rows(con):
    evidence = tie_at_limit(con, "SELECT name FROM players ORDER BY points DESC LIMIT 1")
    assert evidence["limit"] == 1 and evidence["sort_key"] == [10]
    assert sorted([evidence["last_row_kept"], evidence["first_row_cut"]]) == [["ann"], ["bob"]]


def test_tied_rows_that_round_the_same_are_no_tie(con):
    con.execute("CREATE TABLE prices (item VARCHAR, price DOUBLE, rank INTEGER)")
    con.execute("INSERT INTO prices VALUES ('a', 1.001, 1), ('b', 1.004, 1), ('c', 2.0, 2)")
    sql = "SELECT price FROM prices ORDER BY rank LIMIT 1"
    assert verify_says(con, sql, "number", 2)["deterministic"] is True  # 1.00 either way
    assert "tie" not in audit_says(con, sql, "number", 2)
    assert verify_says(con, sql, "number", 3)["deterministic"] is False  # 1.001 or 1.004
    assert "tie" in audit_says(con, sql, "number", 3)


def test_no_order_by_limit_means_the_tie_check_does_not_apply(con):
    assert verify_says(con, "SELECT COUNT(*) FROM players", "integer")["deterministic"] is None
    assert golden.cut_probe("SELECT name FROM players LIMIT 1") is None
    assert golden.cut_probe("SELECT name FROM players ORDER BY points LIMIT 0").cuts == ()


# --------------------------------------------------------------------------- orphans


def test_orphans_that_change_the_answer_fail_in_both(con):
    sql = "SELECT SUM(amount) FROM orders"
    assert verify_says(con, sql, "number", 2, (LINK,))["orphan_independent"] is False
    assert audit_says(con, sql, "number", 2, (LINK,)) == {"orphans"}
    joined = "SELECT SUM(o.amount) FROM orders o JOIN customers c ON c.id = o.customer_id"
    assert verify_says(con, joined, "number", 2, (LINK,))["orphan_independent"] is True
    assert audit_says(con, joined, "number", 2, (LINK,)) == set()


def test_float_noise_beyond_12_digits_is_the_same_answer(con):
    con.execute("UPDATE orders SET amount = 1e-10 WHERE id = 9")  # the orphan adds 1e-10 to 600.875 (13th digit)
    sql = "SELECT SUM(amount) FROM orders WHERE customer_id IS NOT NULL"
    with_orphan = con.execute(sql).fetchone()[0]
    without = con.execute(golden.exclude_orphans(sql, (LINK,))).fetchone()[0]
    assert with_orphan != without  # exactly, they differ ...
    # ... but not in the first 12 significant digits: the same answer, even with no rounding declared
    assert verify_says(con, sql, "number", None, (LINK,))["orphan_independent"] is True
    assert audit_says(con, sql, "number", None, (LINK,)) == set()
    con.execute("UPDATE orders SET amount = 1e-6 WHERE id = 9")  # at the 10th significant digit: different
    assert verify_says(con, sql, "number", None, (LINK,))["orphan_independent"] is False
    assert audit_says(con, sql, "number", None, (LINK,)) == {"orphans"}


# the regions by their total, smallest first: the orphan order's 500 moves north from first to last
BY_TOTAL = "SELECT region, SUM(amount) AS s FROM orders WHERE customer_id IS NOT NULL GROUP BY region ORDER BY s"
UNORDERED = f"SELECT region FROM ({BY_TOTAL})"  # the same order in practice, but not part of the answer


def test_order_alone_changes_the_answer_only_when_order_is_compared(con):
    rows = con.execute(UNORDERED).fetchall()
    moved = con.execute(golden.exclude_orphans(UNORDERED, (LINK,))).fetchall()
    assert rows != moved and sorted(rows) == sorted(moved)  # only the order changed
    # without a top-level ORDER BY the rows are compared as a multiset: the same answer
    assert verify_says(con, UNORDERED, "rows", None, (LINK,))["orphan_independent"] is True
    assert "orphans" not in audit_says(con, UNORDERED, "rows", None, (LINK,))
    # a result set ordered by the query is compared in order: excluding orphans reorders it
    ordered = ("SELECT region FROM orders WHERE customer_id IS NOT NULL GROUP BY region ORDER BY SUM(amount)")
    assert verify_says(con, ordered, "rows", None, (LINK,))["orphan_independent"] is False
    assert "orphans" in audit_says(con, ordered, "rows", None, (LINK,))
    # a scalar has one row: order never matters
    assert golden.same_rows([(1.0,)], [(1.0,)], ordered=True)


def test_about_orphans_and_untouched_queries_skip_the_orphan_check(con):
    sql = "SELECT COUNT(*) FROM orders WHERE customer_id NOT IN (SELECT id FROM customers)"
    q = Question("q1", "?", sql, (("r", 1),), "integer", None, "fk_orphans", ())
    assert dict(check_question(con, q, "r", 1, (LINK,)).checks)["orphan_independent"] is None
    assert verify_says(con, "SELECT COUNT(*) FROM players", "integer", links=(LINK,))["orphan_independent"] is None
    record = {"id": "q1", "question": "?", "gold_sql": sql, "expected_answer": 1, "answer_type": "integer",
              "about_orphans": True}
    assert audit_query(con, record, "r", counted(con, [(LINK, "declared")])) == []


def test_same_rows():
    assert golden.same_rows([(1, "a"), (2, None)], [(2, None), (1, "a")])
    assert not golden.same_rows([(1, "a"), (1, "a")], [(1, "a")])  # a multiset, not a set
    assert golden.same_rows([(0.1 + 0.2,)], [(0.3,)])
    assert not golden.same_rows([(0.3,)], [(0.3000001,)])
    assert golden.same_rows([(0.3,)], [(0.3000001,)], round_decimals=4)
    assert not golden.same_rows([("1",)], [(1,)])  # a string is not a number


# --------------------------------------------------------------------------- one rule with the scorer (issue 51)

ORDER_CASES = ["(SELECT 1 AS a ORDER BY a)", "((SELECT 1 AS a ORDER BY a))", "SELECT 1 AS a ORDER BY a",
               "SELECT 1 AS a", "SELECT * FROM (SELECT 1 AS a ORDER BY a)", "SELECT 1 UNION ALL SELECT 2 ORDER BY 1",
               "(SELECT 1 UNION ALL SELECT 2) ORDER BY 1", "WITH t AS (SELECT 1 AS a ORDER BY a) SELECT a FROM t",
               "SELECT a FROM (VALUES (2), (1)) v(a) ORDER BY a LIMIT 1"]


@pytest.mark.parametrize("sql", ORDER_CASES)
def test_whether_a_result_is_compared_in_order_is_the_scorer_s_answer_everywhere(sql):
    """The build's near-miss study and audit decide order as the scorer does: once a parenthesised query's ORDER BY
    was unordered for the build (sqlglot) and ordered for the scorer (DuckDB's parser)."""
    from evalpack.core.scoring import parsed_order_by

    with duckdb.connect() as con:
        scorer = parsed_order_by(con, sql)
    assert golden.orders_result(sql) == scorer
    assert golden.in_order("rows", sql) == scorer and golden.in_order("number", sql) is False


def test_a_parenthesised_order_by_is_ordered_for_the_build_and_the_scorer():
    assert golden.orders_result("(SELECT 1 AS a ORDER BY a)") is True


def test_same_rows_rounds_a_value_once_as_the_scorer_does():
    """same_rows (the orphan and tie checks) once rounded a float to 12 significant digits and then to the question's
    decimals: 1.0149999999999 became 1.015, then 1.02, and matched 1.02, which the scorer calls different."""
    from evalpack.core.scoring import cell_key

    assert golden.same_rows([(1.0149999999999,)], [(1.02,)], round_decimals=2) is False
    assert golden.same_rows([(1.0149999999999,)], [(1.01,)], round_decimals=2) is True
    values = [1.0149999999999, 1.015, 1.02, 1.01, 0.1 + 0.2, 0.3, 2.675, 2.67, 2.68, 1e-13, 0.0, -0.0, 123456.785,
              123456.78, 123456.79, 0.30000000000001, 1 / 3, 0.333333333333]
    for decimals in (None, 0, 1, 2, 3):
        for a in values:
            for b in values:
                assert golden.same_rows([(a,)], [(b,)], round_decimals=decimals) == \
                    (cell_key(a, decimals) == cell_key(b, decimals)), (a, b, decimals)
