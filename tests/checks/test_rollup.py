"""Rollups answer single-table aggregate queries exactly as the table's rows do (issue 10)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import duckdb
import pytest

from evalpack.checks.nearmiss.rollup import aggregate_types, create_rollups, need_of, plan_rollups, rollup_form
from evalpack.questions.derive import parse_gold

TYPES = {"sales": {"id": "BIGINT", "shop": "VARCHAR", "paid": "BOOLEAN", "amount": "DECIMAL(18,2)",
                   "qty": "INTEGER", "ratio": "DOUBLE", "day": "DATE", "sold_at": "TIMESTAMP"}}


@pytest.fixture()
def sales():
    """200,000 rows with the awkward cases: NULL dims and measures, timestamps exactly at midnight,
    a microsecond either side of it, and NULL timestamps."""
    con = duckdb.connect(":memory:")
    con.execute("""
        CREATE TABLE sales AS
        SELECT i AS id,
               CASE WHEN i % 13 = 0 THEN NULL ELSE ['north', 'south', 'east'][1 + i % 3] END AS shop,
               CASE WHEN i % 17 = 0 THEN NULL ELSE i % 2 = 0 END AS paid,
               CASE WHEN i % 11 = 0 THEN NULL ELSE CAST((i * 7919) % 100000 / 100 AS DECIMAL(18,2)) END AS amount,
               CAST(i % 7 AS INTEGER) AS qty,
               i / 3.0 AS ratio,
               DATE '2025-01-01' + CAST(i % 400 AS INTEGER) AS day,
               CASE WHEN i % 19 = 0 THEN NULL
                    WHEN i % 7 = 3 THEN TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY
                    WHEN i % 7 = 4 THEN TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY - INTERVAL 1 MICROSECOND
                    ELSE TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY + INTERVAL (i % 86400) SECOND END AS sold_at
        FROM range(200000) t(i)""")
    yield con
    con.close()


WINDOW = "day >= CAST('2025-03-01' AS DATE) AND day < CAST('2025-04-01' AS DATE)"
AT_WINDOW = "sold_at >= CAST('2025-03-01' AS TIMESTAMP) AND sold_at <= CAST('2025-04-01 00:00:00' AS TIMESTAMP)"
COVERED = [
    f"SELECT ROUND(SUM(amount), 2) FROM sales WHERE {WINDOW}",
    f"SELECT COUNT(*) FROM sales WHERE shop = 'north' AND {WINDOW}",
    f"SELECT COUNT(amount) FROM sales WHERE shop IS NULL OR {WINDOW}",
    f"SELECT ROUND(100.0 * COUNT_IF(paid) / COUNT(*), 4) FROM sales WHERE {WINDOW}",
    f"SELECT MIN(amount), MAX(ratio), SUM(qty) FROM sales WHERE NOT paid AND {WINDOW}",
    "SELECT COUNT(*), SUM(amount) FROM sales WHERE day >= CAST('2030-01-01' AS DATE)",  # no rows: 0 and NULL
    f"SELECT SUM(amount) FROM sales WHERE {AT_WINDOW}",
    "SELECT COUNT(*) FROM sales WHERE sold_at = CAST('2025-02-01' AS TIMESTAMP)",
    "SELECT COUNT(*) FROM sales WHERE sold_at < CAST('2025-02-01' AS DATE) OR sold_at IS NULL",
    "SELECT COUNT(*) FROM sales WHERE sold_at BETWEEN CAST('2025-02-01' AS DATE) AND CAST('2025-02-03' AS DATE)",
    "SELECT SUM(amount) * 2 + COUNT(*) FROM sales WHERE EXTRACT(month FROM day) = 3 AND shop <> 'east'",
    "SELECT MAX(shop) FROM sales WHERE paid IS NOT NULL",
]
NOT_COVERED = [
    f"SELECT AVG(amount) FROM sales WHERE {WINDOW}",  # AVG's double arithmetic is not re-derived
    f"SELECT SUM(DISTINCT amount) FROM sales WHERE {WINDOW}",
    f"SELECT SUM(ratio) FROM sales WHERE {WINDOW}",  # a DOUBLE sum depends on the order of addition
    "SELECT COUNT(*) FROM sales WHERE sold_at >= CAST('2025-03-01 12:00:00' AS TIMESTAMP)",  # not at midnight
    "SELECT COUNT(*) FROM sales WHERE HOUR(sold_at) = 3",
    "SELECT SUM(amount + qty) FROM sales",
    "SELECT amount FROM sales WHERE id = 3",
    "SELECT COUNT(*) FROM sales AS s JOIN sales AS t ON s.id = t.id",
    "SELECT SUM(amount) OVER (ORDER BY day) FROM sales",  # a window over the table's rows
    "WITH m AS (SELECT s.shop, SUM(s.amount) AS t FROM sales AS s JOIN sales AS u ON s.id = u.id GROUP BY s.shop) "
    "SELECT * FROM m",
    "SELECT DATE_TRUNC('month', sold_at), COUNT(*) FROM sales GROUP BY 1",  # a timestamp beyond midnight tests
    "WITH m AS (SELECT shop, AVG(amount) AS a FROM sales GROUP BY shop) SELECT MAX(a) FROM m",
    "SELECT (SELECT SUM(ratio) FROM sales) - SUM(amount) FROM sales",  # one reader is not exact: none is rewritten
]
GROUPED = [  # queries whose SELECTs over the table group, nest or feed a window: each such SELECT reads the rollup
    "SELECT shop, SUM(amount) FROM sales GROUP BY shop",
    "SELECT SUM(amount) FROM sales WHERE shop IN (SELECT 'north')",
    f"SELECT shop, ROUND(SUM(amount), 2) AS total FROM sales WHERE {WINDOW} GROUP BY shop ORDER BY total DESC",
    f"SELECT shop, SUM(amount) AS total FROM sales WHERE {WINDOW} GROUP BY shop HAVING SUM(amount) >= 100000",
    "WITH monthly AS (SELECT DATE_TRUNC('month', day) AS month, SUM(amount) AS total FROM sales "
    "GROUP BY DATE_TRUNC('month', day)) SELECT STRFTIME(month, '%Y-%m'), SUM(total) OVER (ORDER BY month ROWS "
    "BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM monthly",
    "WITH monthly AS (SELECT shop, STRFTIME(DATE_TRUNC('month', day), '%Y-%m') AS month, COUNT(*) AS n FROM sales "
    "WHERE paid GROUP BY shop, DATE_TRUNC('month', day)) SELECT shop, month, n - LAG(n) OVER (PARTITION BY shop "
    "ORDER BY month) FROM monthly",
    f"SELECT ROUND(100 * SUM(amount) / (SELECT SUM(amount) FROM sales WHERE day < CAST('2026-01-01' AS DATE)), 2) "
    f"FROM sales WHERE {WINDOW}",
    "SELECT MONTH(day) AS m, COUNT_IF(paid), MIN(amount), MAX(qty) FROM sales GROUP BY MONTH(day) ORDER BY m LIMIT 3",
    f"SELECT ROUND(SUM(amount) FILTER (WHERE shop = 'north') - SUM(amount) FILTER (WHERE shop = 'east'), 2), "
    f"COUNT(*) FILTER (WHERE paid), MAX(qty) FILTER (WHERE NOT paid) FROM sales WHERE {WINDOW}",
    "SELECT shop, COUNT(amount) FILTER (WHERE day > CAST('2025-06-01' AS DATE)) FROM sales GROUP BY shop",
]


@pytest.mark.parametrize("sql", NOT_COVERED)
def test_queries_a_rollup_cannot_answer_exactly_are_left_alone(sql):
    assert need_of(sql, TYPES) is None


def test_a_covered_query_returns_the_same_value_of_the_same_type(sales):
    needs = [need_of(sql, TYPES) for sql in COVERED]
    assert all(needs), [sql for sql, n in zip(COVERED, needs) if n is None]
    (rollup,) = plan_rollups(sales, needs, TYPES)
    assert set(rollup.dims) == {"shop", "paid", "day", "sold_at"} and rollup.by_day == ("sold_at",)
    create_rollups(sales, (rollup,))
    rollup_rows = sales.execute('SELECT COUNT(*) FROM "__rollup_sales"').fetchone()[0]
    assert rollup_rows * 8 <= 200_000  # the point of it: far fewer rows than the table
    result_types = aggregate_types(TYPES, needs)
    for sql, need in zip(COVERED, needs):
        assert rollup.covers(need)
        over = rollup_form(parse_gold(sql), need, result_types).sql(dialect="duckdb")
        assert "__rollup_sales" in over
        raw, rolled = sales.execute(sql).fetchall(), sales.execute(over).fetchall()
        assert rolled == raw, sql
        assert [type(v) for v in rolled[0]] == [type(v) for v in raw[0]], sql
    # the windows really select rows, and midnight timestamps sit on the boundaries
    assert sales.execute(COVERED[7]).fetchone()[0] > 0
    assert isinstance(sales.execute(COVERED[0]).fetchone()[0], Decimal)


def test_grouped_and_nested_queries_return_the_same_rows_over_the_rollup(sales):
    needs = [need_of(sql, TYPES) for sql in GROUPED]
    assert all(needs), [sql for sql, n in zip(GROUPED, needs) if n is None]
    # one value from one SELECT (the IN list reads no table) may share a statement with other scalars
    assert [n.grouped for n in needs] == [sql not in (GROUPED[1], GROUPED[-2]) for sql in GROUPED]
    assert not need_of(COVERED[0], TYPES).grouped  # one scalar aggregate: may share a statement with others
    (rollup,) = plan_rollups(sales, needs, TYPES)
    create_rollups(sales, (rollup,))
    result_types = aggregate_types(TYPES, needs)
    for sql, need in zip(GROUPED, needs):
        assert rollup.covers(need), sql
        over = rollup_form(parse_gold(sql), need, result_types).sql(dialect="duckdb")
        assert '"sales"' not in over and " sales " not in f"{over} " and "__rollup_sales" in over, over
        raw, rolled = sales.execute(sql).fetchall(), sales.execute(over).fetchall()
        assert raw and sorted(rolled, key=repr) == sorted(raw, key=repr), sql
        assert [[type(v) for v in row] for row in sorted(rolled, key=repr)] == \
            [[type(v) for v in row] for row in sorted(raw, key=repr)], sql


def test_columns_with_many_values_are_not_grouped_by(sales):
    need = need_of("SELECT SUM(amount) FROM sales WHERE id > 5", TYPES)
    other = need_of("SELECT COUNT(*) FROM sales WHERE id < 9", TYPES)
    assert need.dims == {"id"}
    assert plan_rollups(sales, [need, other], TYPES) == ()  # 200,000 ids: no rollup is smaller


def test_a_timestamp_rollup_keeps_midnight_apart_from_the_rest_of_the_day(sales):
    sql = "SELECT COUNT(*) FROM sales WHERE sold_at <= CAST('2025-01-02' AS TIMESTAMP)"
    need = need_of(sql, TYPES)
    (rollup,) = plan_rollups(sales, [need, need], TYPES)
    create_rollups(sales, (rollup,))
    over = rollup_form(parse_gold(sql), need, aggregate_types(TYPES, [need])).sql(dialect="duckdb")
    midnight = sales.execute("SELECT COUNT(*) FROM sales WHERE sold_at = TIMESTAMP '2025-01-02'").fetchone()[0]
    assert midnight > 0
    assert sales.execute(over).fetchone()[0] == sales.execute(sql).fetchone()[0]
    assert dt.datetime(2025, 1, 2) in {r[0] for r in sales.execute('SELECT sold_at FROM "__rollup_sales"').fetchall()}
