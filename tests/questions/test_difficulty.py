"""Difficulty levels and skill tags of hand-written DuckDB queries, one row per query."""

from __future__ import annotations

import doctest

import pytest

import evalpack.questions.difficulty
from evalpack.questions.difficulty import RULE, SKILLS, difficulty, label, skills
from evalpack.spec.kinds import LEVELS

JAN = "ordered_at >= CAST('2025-01-01' AS DATE) AND ordered_at < CAST('2025-02-01' AS DATE)"

# (name, gold SQL, answer type, difficulty, skills)
CASES = [
    # simple: one aggregate over one table, at most one filter (a date window is one)
    ("period_total", f"SELECT ROUND(SUM(amount), 2) FROM orders WHERE {JAN}", "number",
     "simple", ("aggregation", "date_arithmetic")),
    ("date_literals", "SELECT SUM(amount) FROM orders WHERE ordered_at BETWEEN DATE '2025-01-01' AND DATE '2025-01-31'",
     "number", "simple", ("aggregation", "date_arithmetic")),
    ("row_count", "SELECT COUNT(*) FROM orders", "integer", "simple", ("aggregation",)),
    ("fk_nulls", "SELECT COUNT(*) FROM orders WHERE customer_id IS NULL", "integer",
     "simple", ("aggregation", "null_handling")),
    ("coalesce", "SELECT COALESCE(SUM(amount), 0) FROM orders WHERE channel = 'phone'", "number",
     "simple", ("aggregation", "null_handling")),
    ("unit_division", f"SELECT ROUND(SUM(amount) / 100, 2) FROM orders WHERE {JAN}", "number",
     "simple", ("aggregation", "date_arithmetic")),
    # moderate
    ("second_filter", f"SELECT ROUND(SUM(amount), 2) FROM orders WHERE channel = 'web' AND ({JAN})", "number",
     "moderate", ("aggregation", "date_arithmetic")),
    ("or_filter", "SELECT COUNT(*) FROM orders WHERE channel = 'web' OR channel = 'app'", "integer",
     "moderate", ("aggregation",)),
    ("rate", f"SELECT ROUND(CAST(COUNT_IF(refunded) AS DOUBLE) / COUNT(*), 4) FROM orders WHERE {JAN}", "number",
     "moderate", ("aggregation", "date_arithmetic", "ratio")),
    ("percentage_case", "SELECT ROUND(100.0 * SUM(CASE WHEN refunded THEN 1 ELSE 0 END) / COUNT(*), 2) FROM orders",
     "number", "moderate", ("aggregation", "ratio")),
    ("average_nullif", "SELECT ROUND(SUM(amount) / NULLIF(COUNT(*), 0), 2) FROM orders WHERE channel = 'web'",
     "number", "moderate", ("aggregation", "null_handling", "ratio")),
    ("peak_month",
     "SELECT PRINTF('%04d-%02d', YEAR(d), MONTH(d)) AS month FROM t GROUP BY YEAR(d), MONTH(d) "
     "ORDER BY SUM(a) DESC LIMIT 1", "string",
     "moderate", ("aggregation", "date_arithmetic", "group_by", "order_limit")),
    ("largest_order", "SELECT order_id FROM orders ORDER BY amount DESC LIMIT 1", "string",
     "moderate", ("order_limit",)),
    ("totals_by_channel", "SELECT channel, SUM(amount) FROM orders GROUP BY channel", "rows",
     "moderate", ("aggregation", "group_by", "rows_answer")),
    ("quarter_list",
     "SELECT EXTRACT(quarter FROM ordered_at) AS q, ROUND(SUM(amount), 2) FROM orders GROUP BY q ORDER BY q", "rows",
     "moderate", ("aggregation", "date_arithmetic", "group_by", "rows_answer")),
    ("having", "SELECT channel FROM orders GROUP BY channel HAVING SUM(amount) > 1000000", "string",
     "moderate", ("aggregation", "group_by", "having")),
    ("late_shipments", "SELECT COUNT(*) FROM orders WHERE DATE_DIFF('day', ordered_at, shipped_at) > 7", "integer",
     "moderate", ("aggregation", "date_arithmetic")),
    ("last_week",
     "SELECT COUNT(*) FROM orders WHERE ordered_at >= DATE '2025-03-01' - INTERVAL 7 DAY "
     "AND ordered_at < DATE '2025-03-01'", "integer", "moderate", ("aggregation", "date_arithmetic")),
    ("fk_orphans",
     "SELECT COUNT(*) FROM orders AS c LEFT JOIN customers AS p ON c.customer_id = p.customer_id "
     "WHERE NOT c.customer_id IS NULL AND p.customer_id IS NULL", "integer",
     "moderate", ("aggregation", "join", "null_handling")),
    ("above_average", "SELECT COUNT(*) FROM orders WHERE amount > (SELECT AVG(amount) FROM orders)", "integer",
     "moderate", ("aggregation", "subquery")),
    ("union_rows",
     "SELECT 'web' AS channel, SUM(amount) FROM orders WHERE channel = 'web' "
     "UNION ALL SELECT 'store', SUM(amount) FROM orders WHERE channel = 'store'", "rows",
     "moderate", ("aggregation", "rows_answer", "set_operation")),
    # challenging
    ("unbalanced_groups", "SELECT COUNT(*) FROM (SELECT g FROM t GROUP BY g HAVING SUM(a) <> SUM(b)) AS u", "integer",
     "challenging", ("aggregation", "group_by", "having", "subquery")),
    ("month_over_month",
     "WITH monthly AS (SELECT DATE_TRUNC('month', ordered_at) AS month, SUM(amount) AS revenue FROM orders GROUP BY 1), "
     "change AS (SELECT month, revenue - LAG(revenue) OVER (ORDER BY month) AS delta FROM monthly) "
     "SELECT ROUND(delta, 2) FROM change WHERE month = DATE '2025-03-01'", "number",
     "challenging", ("aggregation", "cte", "date_arithmetic", "group_by", "window")),
    ("percent_change",
     "WITH monthly AS (SELECT STRFTIME(ordered_at, '%Y-%m') AS month, SUM(amount) AS revenue FROM orders GROUP BY 1) "
     "SELECT ROUND(100.0 * (revenue - prev) / prev, 2) FROM "
     "(SELECT month, revenue, LAG(revenue) OVER (ORDER BY month) AS prev FROM monthly) AS m WHERE month = '2025-03'",
     "number", "challenging", ("aggregation", "cte", "date_arithmetic", "group_by", "ratio", "subquery", "window")),
    ("rank_per_month",
     "SELECT month, channel FROM (SELECT DATE_TRUNC('month', ordered_at) AS month, channel, "
     "RANK() OVER (PARTITION BY DATE_TRUNC('month', ordered_at) ORDER BY SUM(amount) DESC) AS rnk "
     "FROM orders GROUP BY 1, 2) AS ranked WHERE rnk = 1 ORDER BY month", "rows",
     "challenging", ("aggregation", "date_arithmetic", "group_by", "rows_answer", "subquery", "window")),
    ("running_total",
     "SELECT STRFTIME(ordered_at, '%Y-%m') AS month, SUM(SUM(amount)) OVER (ORDER BY STRFTIME(ordered_at, '%Y-%m') "
     "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS ytd FROM orders GROUP BY 1 ORDER BY 1", "rows",
     "challenging", ("aggregation", "date_arithmetic", "group_by", "rows_answer", "window")),
    ("window_only", "SELECT amount - LAG(amount) OVER (ORDER BY ordered_at) FROM orders", "rows",
     "challenging", ("rows_answer", "window")),
    ("repeat_customers",
     "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.customer_id "
     "GROUP BY c.name HAVING COUNT(*) >= 3 ORDER BY c.name", "rows",
     "challenging", ("aggregation", "group_by", "having", "join", "rows_answer")),
    ("top_region",
     "SELECT c.region FROM orders AS o JOIN customers AS c ON o.customer_id = c.customer_id "
     "GROUP BY c.region ORDER BY SUM(o.amount) DESC LIMIT 1", "string",
     "challenging", ("aggregation", "group_by", "join", "order_limit")),
    ("both_channels",
     "SELECT COUNT(*) FROM (SELECT customer_id FROM orders WHERE channel = 'web' "
     "INTERSECT SELECT customer_id FROM orders WHERE channel = 'store') AS both_channels", "integer",
     "challenging", ("aggregation", "set_operation", "subquery")),
    ("refunders_joined",
     "SELECT COUNT(DISTINCT o.customer_id) FROM orders AS o JOIN customers AS c ON o.customer_id = c.customer_id "
     "WHERE c.customer_id IN (SELECT customer_id FROM orders WHERE refunded)", "integer",
     "challenging", ("aggregation", "join", "subquery")),
]


@pytest.mark.parametrize(("sql", "answer_type", "level", "tags"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_labels(sql, answer_type, level, tags):
    assert difficulty(sql, answer_type) == level
    assert skills(sql, answer_type) == tags
    assert label(sql, answer_type) == (level, tags)


def test_the_cases_cover_every_skill_and_level():
    assert {tag for case in CASES for tag in case[4]} == set(SKILLS)
    assert {case[3] for case in CASES} == set(LEVELS)


def test_skills_is_a_sorted_vocabulary():
    assert list(SKILLS) == sorted(set(SKILLS))
    assert LEVELS == ("simple", "moderate", "challenging")


@pytest.mark.parametrize(("first", "second"), [
    (f"SELECT SUM(amount) FROM orders WHERE {JAN}",
     "select sum(amount) from orders where ordered_at < DATE '2025-02-01' and ordered_at >= DATE '2025-01-01'"),
    ("SELECT IFNULL(SUM(a), 0) FROM t", "SELECT COALESCE(SUM(a), 0) FROM t"),
    ("SELECT COUNT(*) FROM t WHERE x > 1 AND 5 > x", "SELECT COUNT(*) FROM t WHERE x BETWEEN 2 AND 4"),
])
def test_spellings_of_one_query_get_one_label(first, second):
    assert label(first, "number") == label(second, "number")


def test_count_of_a_column_is_not_null_handling():
    assert "null_handling" not in skills("SELECT COUNT(customer_id) FROM orders", "integer")


def test_order_by_inside_over_is_not_order_limit():
    assert "order_limit" not in skills("SELECT ROW_NUMBER() OVER (ORDER BY a) FROM t LIMIT 5", "rows")


def test_a_union_in_from_is_one_subquery():
    one = "SELECT COUNT(*) FROM (SELECT a FROM t UNION SELECT a FROM u) AS v"
    two = "SELECT COUNT(*) FROM (SELECT a FROM t) AS v JOIN (SELECT a FROM u) AS w ON v.a = w.a"
    assert difficulty(one, "integer") == "challenging"  # set operation 3 + one subquery 3
    assert skills(one, "integer") == ("aggregation", "set_operation", "subquery")
    assert skills(two, "integer") == ("aggregation", "join", "subquery")


def test_a_cte_body_is_not_a_subquery():
    assert "subquery" not in skills("WITH m AS (SELECT 1 AS x UNION ALL SELECT 2) SELECT SUM(x) FROM m", "integer")


def test_the_rule_is_the_module_docstring():
    assert " ".join(RULE.split()) in " ".join(evalpack.questions.difficulty.__doc__.split())


def test_doctests():
    result = doctest.testmod(evalpack.questions.difficulty)
    assert result.attempted > 0
    assert result.failed == 0
