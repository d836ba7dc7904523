"""Cells answer grouped queries over whole periods exactly as the table's rows do."""

from __future__ import annotations

import duckdb
import pytest

from evalpack.checks.nearmiss.cells import cells_form, merged, worth_computing
from evalpack.questions.derive import parse_gold

TYPES = {"sales": {"id": "BIGINT", "shop": "VARCHAR", "paid": "BOOLEAN", "amount": "DECIMAL(18,2)",
                   "qty": "INTEGER", "ratio": "DOUBLE", "day": "DATE", "sold_at": "TIMESTAMP"},
         "shops": {"shop": "VARCHAR", "region": "VARCHAR"}}


@pytest.fixture(scope="module")
def sales():
    """100,000 rows with NULL shops, amounts and days, repeated amounts (so DISTINCT matters), and timestamps
    at midnight and a microsecond either side of it."""
    con = duckdb.connect(":memory:")
    con.execute("""
        CREATE TABLE sales AS
        SELECT i AS id,
               CASE WHEN i % 13 = 0 THEN NULL ELSE ['north', 'south', 'east'][1 + i % 3] END AS shop,
               i % 2 = 0 AS paid,
               CASE WHEN i % 11 = 0 THEN NULL ELSE CAST((i * 7919) % 5000 / 100 AS DECIMAL(18,2)) END AS amount,
               CAST(i % 7 AS INTEGER) AS qty,
               i / 3.0 AS ratio,
               CASE WHEN i % 17 = 0 THEN NULL ELSE DATE '2024-11-01' + CAST(i % 500 AS INTEGER) END AS day,
               CASE WHEN i % 7 = 3 THEN TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY
                    WHEN i % 7 = 4 THEN TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY - INTERVAL 1 MICROSECOND
                    ELSE TIMESTAMP '2025-01-01' + INTERVAL (i % 400) DAY + INTERVAL (i % 86400) SECOND END AS sold_at
        FROM range(100000) t(i)""")
    con.execute("CREATE TABLE shops AS SELECT * FROM (VALUES ('north', 'n'), ('south', 's')) v(shop, region)")
    yield con
    con.close()


SPAN = "day >= CAST('2025-02-01' AS DATE) AND day < CAST('2025-06-01' AS DATE)"
MONTH = "DATE_TRUNC('month', day)"
ANSWERED = [
    f"SELECT {MONTH} AS m, SUM(DISTINCT amount) AS s FROM sales WHERE {SPAN} GROUP BY {MONTH}",
    f"SELECT shop, STRFTIME({MONTH}, '%Y-%m') AS m, ROUND(AVG(amount), 2) FROM sales WHERE {SPAN} "
    f"GROUP BY shop, {MONTH} HAVING AVG(amount) > 24.5 ORDER BY m, shop LIMIT 5",
    f"WITH monthly AS (SELECT shop, {MONTH} AS month, SUM(DISTINCT amount) AS total FROM sales WHERE {SPAN} "
    f"GROUP BY shop, {MONTH}) SELECT shop, month, SUM(total) OVER (PARTITION BY shop ORDER BY month) FROM monthly",
    f"SELECT {MONTH}, COUNT(*) FILTER (WHERE paid), COUNT(DISTINCT qty), MIN(ratio), MAX(id) FROM sales "
    f"WHERE shop = 'north' AND ({SPAN}) GROUP BY {MONTH}, shop",
    f"SELECT {MONTH}, AVG(qty), COUNT(amount) FROM sales WHERE shop IS NULL GROUP BY shop, {MONTH}",  # NULL days too
    "SELECT DATE_TRUNC('month', sold_at), SUM(amount), AVG(DISTINCT amount) FROM sales "
    "WHERE sold_at >= CAST('2025-03-01' AS TIMESTAMP) AND sold_at < CAST('2025-05-01' AS TIMESTAMP) "
    "GROUP BY DATE_TRUNC('month', sold_at)",
    "SELECT DATE_TRUNC('quarter', day), SUM(DISTINCT amount) FROM sales WHERE day >= CAST('2025-04-01' AS DATE) "
    "GROUP BY DATE_TRUNC('quarter', day)",
    "SELECT YEAR(DATE_TRUNC('year', day)), COUNT(*) FROM sales WHERE day < '2025-01-01' GROUP BY DATE_TRUNC('year', day)",
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE day >= CAST('2030-01-01' AS DATE) GROUP BY {MONTH}",  # no rows
    # groups within one whole period: the cells of that period
    "SELECT shop, ROUND(SUM(DISTINCT amount), 2) AS t FROM sales WHERE day >= CAST('2025-04-01' AS DATE) "
    "AND day < CAST('2025-07-01' AS DATE) GROUP BY shop HAVING AVG(amount) >= 24",
    "SELECT shop FROM sales WHERE day >= CAST('2025-03-01' AS DATE) AND day < CAST('2025-04-01' AS DATE) "
    "GROUP BY shop ORDER BY AVG(amount) DESC LIMIT 1",
    "SELECT paid, COUNT(DISTINCT shop) FROM sales WHERE day >= '2025-01-01' AND day < '2026-01-01' GROUP BY paid",
    "SELECT shop, MAX(amount) FROM sales WHERE sold_at >= CAST('2025-03-02' AS TIMESTAMP) "
    "AND sold_at < CAST('2025-03-03' AS TIMESTAMP) GROUP BY shop",
    # no filter at all: the groups are the cells
    "SELECT DATE_TRUNC('week', day), SUM(amount) FROM sales GROUP BY DATE_TRUNC('week', day)",
    "SELECT PRINTF('%04d-%02d', YEAR(day), MONTH(day)) FROM sales GROUP BY YEAR(day), MONTH(day) "
    "ORDER BY SUM(DISTINCT amount) DESC LIMIT 1",
    "SELECT shop, SUM(DISTINCT amount) FROM sales GROUP BY shop",
    # one SELECT qualifies; the scalar subquery over the rows (not grouped) stays as it is
    f"WITH m AS (SELECT {MONTH} AS month, SUM(DISTINCT amount) AS t FROM sales WHERE {SPAN} GROUP BY {MONTH}) "
    f"SELECT month, t - (SELECT AVG(amount) FROM sales) FROM m",
]
LEFT_ALONE = [
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE day >= CAST('2025-02-15' AS DATE) GROUP BY {MONTH}",  # mid-month
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE day <= CAST('2025-06-01' AS DATE) GROUP BY {MONTH}",  # takes a day
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE amount > 5 AND {SPAN} GROUP BY {MONTH}",  # rows, not groups
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE {SPAN} OR shop = 'east' GROUP BY {MONTH}",
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE shop = 'north' AND {SPAN} GROUP BY {MONTH}",  # shop: not a group
    f"SELECT shop, SUM(DISTINCT amount) FROM sales WHERE {SPAN} GROUP BY shop",  # four months, not grouped by month
    "SELECT shop, SUM(amount) FROM sales WHERE day >= CAST('2025-04-01' AS DATE) AND day < CAST('2025-07-01' AS DATE) "
    "AND day >= CAST('2025-05-01' AS DATE) GROUP BY shop",  # a third bound
    "SELECT shop, SUM(amount) FROM sales WHERE day >= CAST('2025-04-02' AS DATE) AND day < CAST('2025-05-02' AS DATE) "
    "GROUP BY shop",  # a month's length, not a month
    "SELECT SUM(DISTINCT amount) FROM sales WHERE day >= CAST('2025-04-01' AS DATE) "
    "AND day < CAST('2025-05-01' AS DATE)",  # not grouped: one row even with no rows to aggregate
    f"SELECT {MONTH}, SUM(ratio) FROM sales GROUP BY {MONTH}",  # a DOUBLE sum depends on the order of addition
    f"SELECT {MONTH}, AVG(ratio) FROM sales GROUP BY {MONTH}",
    f"SELECT {MONTH}, SUM(amount + qty) FROM sales GROUP BY {MONTH}",
    f"SELECT {MONTH}, SUM(amount) FROM sales GROUP BY 1",
    f"SELECT {MONTH} AS m, SUM(amount) FROM sales GROUP BY m",
    f"SELECT DATE_TRUNC('week', day), SUM(amount) FROM sales WHERE {SPAN} GROUP BY DATE_TRUNC('week', day)",
    "SELECT DATE_TRUNC('month', sold_at), COUNT(*) FROM sales WHERE sold_at >= CAST('2025-03-01 12:00:00' AS TIMESTAMP) "
    "GROUP BY DATE_TRUNC('month', sold_at)",
    f"SELECT {MONTH}, SUM(s.amount) FROM sales AS s JOIN shops USING (shop) GROUP BY {MONTH}",
    f"SELECT {MONTH}, SUM(amount) FROM sales WHERE shop IN (SELECT shop FROM shops) GROUP BY {MONTH}",
    f"SELECT {MONTH}, SUM(amount) OVER () FROM sales GROUP BY {MONTH}, amount",
]


def _rows(con, sql):
    rows = con.execute(sql).fetchall()
    return sorted(rows, key=repr), sorted(([type(v) for v in row] for row in rows), key=repr)


def test_grouped_queries_over_whole_periods_read_cells_and_return_the_same_rows(sales):
    forms = [cells_form(parse_gold(sql), TYPES) for sql in ANSWERED]
    assert all(forms), [sql for sql, f in zip(ANSWERED, forms) if f is None]
    tables = merged([c for _, cells in forms for c in cells])
    assert len(tables) < sum(len(cells) for _, cells in forms)  # queries grouping alike share one table
    for cells in tables:
        sales.execute(cells.create_sql())
    for sql, (rewritten, _) in zip(ANSWERED, forms):
        assert "__cells_" in rewritten
        assert _rows(sales, rewritten) == _rows(sales, sql), sql
    # the cases are not vacuous: DISTINCT changes sums, windows keep rows, the midnight timestamps count
    assert sales.execute(f"SELECT SUM(DISTINCT amount) <> SUM(amount) FROM sales WHERE {SPAN}").fetchone()[0]
    assert all(sales.execute(sql).fetchall() for sql in ANSWERED[:8] + ANSWERED[9:16])
    assert sales.execute(ANSWERED[-1]).fetchall() and "(SELECT AVG(amount) FROM sales)" in forms[-1][0]


@pytest.mark.parametrize("sql", LEFT_ALONE)
def test_queries_cells_cannot_answer_exactly_are_left_alone(sql):
    assert cells_form(parse_gold(sql), TYPES) is None


def test_one_table_holds_every_aggregate_asked_of_the_same_groups():
    a = cells_form(parse_gold(ANSWERED[0]), TYPES)[1][0]
    b = cells_form(parse_gold(f"SELECT {MONTH}, AVG(amount) FROM sales WHERE {SPAN} GROUP BY {MONTH}"), TYPES)[1][0]
    (both,) = merged([a, b])
    assert a.name == b.name == both.name and set(both.aggregates) == set(a.aggregates) | set(b.aggregates)


def _reader(sql: str):
    (cells,) = cells_form(parse_gold(sql), TYPES)[1]
    return cells


def test_cells_are_computed_only_where_their_readers_would_read_the_span_twice():
    def months(start: str, end: str) -> str:
        return (f"SELECT {MONTH}, SUM(DISTINCT amount) FROM sales WHERE day >= CAST('{start}' AS DATE) "
                f"AND day < CAST('{end}' AS DATE) GROUP BY {MONTH}")

    series = [_reader(months("2025-01-01", end)) for end in ("2026-01-01", "2025-11-01", "2025-08-01")]
    assert worth_computing(series)  # 12 + 10 + 7 months over a span of 12
    assert merged(series)[0].window == ("day", "2025-01-01 00:00:00", "2026-01-01 00:00:00")
    ends = [_reader(months("2025-01-01", "2025-02-01")), _reader(months("2025-12-01", "2026-01-01"))]
    assert not worth_computing(ends)  # two months at either end of a year: a table of all twelve costs more
    whole = _reader("SELECT shop, SUM(DISTINCT amount) FROM sales GROUP BY shop")
    assert whole.window is None and worth_computing([whole, whole]) and not worth_computing([whole, *series])
