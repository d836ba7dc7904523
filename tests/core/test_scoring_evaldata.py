"""Differential test of the result-set rules against evaldata's ExecutionAccuracy.

``spider`` is compared with ``ExecutionAccuracy(column_alignment="by_value")`` (multiset rows,
order only when the gold has a top-level ORDER BY) and ``bird`` with
``ExecutionAccuracy(row_order="ignore", multiplicity="set")`` (evaldata's own BIRD preset). The
real scorer objects run; only the platform that returns the gold rows is a fixed-rows adapter.

On random result pairs built from values where the rules are meant to agree there must be no
disagreement. Where we differ on purpose, each difference has a test below (INTENDED_DIFFERENCES
names them all):
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from evaldata.equivalence.rows import compare_rows
from evaldata.platforms.duckdb import DuckDBAdapter
from evaldata.scorers import ExecutionAccuracy
from evaldata.scorers.context import ScoreContext
from evaldata.scorers.query import QueryRunner
from evaldata.types import DuckDBPlatformRef, EvalCase, ExecutionFailure, ExecutionSuccess, GoldQuery, SolverSuccess

from evalpack.core.scoring import (
    MAX_FETCH_ROWS,
    _row_keys,
    _spider_equal,
    answer_matches,
    open_sandbox,
    result_sets_match,
    run_query,
    top_level_order_by,
)

INTENDED_DIFFERENCES = {
    "bool_is_not_a_number": "evaldata: True == 1 (Python); we: a boolean never equals a number",
    "decimal_equals_float_by_text": "evaldata: Decimal('0.1') != 0.1; we: a float is the exact decimal of its repr",
    "round_decimals": "we round every number half-to-even at the question's round_decimals; evaldata compares exactly",
    "temporal_as_iso_text": "we: DATE 2025-01-01 equals the text '2025-01-01' (JSON answers hold dates as text)",
    "nan_equals_nan": "we: NaN equals NaN (as in DuckDB); evaldata: two NaN objects differ",
    "nested_values": "evaldata raises TypeError on LIST cells (unhashable); we compare them element-wise",
    "parenthesized_order_by": "'(SELECT ... ORDER BY x)' is ordered for DuckDB's parser (ours), not for sqlglot",
    "bird_ignores_order": "ExecutionAccuracy(multiplicity='set') with its default row_order compares an ordered "
                          "gold as a list; BIRD (and we) compare sets",
    "scalar_needs_one_cell": "scalar questions need exactly 1 row x 1 column under both rules; evaldata's set rule "
                             "accepts repeated rows",
    "duplicate_column_names": "evaldata's DuckDB adapter fails a result with duplicate column names; we compare values",
    "fetch_cap": f"a bird candidate with more than {MAX_FETCH_ROWS} rows is wrong for us; evaldata fetches them all",
    "search_budget": "a spider column-mapping search that exceeds its step budget is wrong for us",
}

SPIDER = ExecutionAccuracy(column_alignment="by_value")
BIRD = ExecutionAccuracy(row_order="ignore", multiplicity="set")


class FixedRows:
    """A platform adapter that returns one fixed result (the gold rows) for any SQL."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def execute(self, sql: str) -> ExecutionSuccess:
        return ExecutionSuccess(rows=self.rows, latency_seconds=0.0)

    def cancel(self) -> None:
        return None

    def close(self) -> None:
        return None


def _dicts(rows: list[tuple]) -> list[dict]:
    return [{f"c{i}": v for i, v in enumerate(row)} for row in rows]


def evaldata_passes(scorer: ExecutionAccuracy, gold_sql: str, gold: list[tuple], got: list[tuple]) -> bool:
    case = EvalCase(id="pair", input="q", expected=GoldQuery(sql=gold_sql), platform=DuckDBPlatformRef(name="d"))
    context = ScoreContext(queries=QueryRunner(FixedRows(_dicts(gold)), "SELECT 1", "duckdb", None))
    candidate = ExecutionSuccess(rows=_dicts(got), latency_seconds=0.0)
    result = scorer.score(case, SolverSuccess(output="SELECT 1"), candidate, context=context)
    return result.verdict == "pass"


# Values on which Python equality and our cell rule agree: no bools, no NaN, no text that looks
# like a date, decimals only where the float is exact.
POOL = [0, 1, 2, -1, 3, 0.5, 1.5, -2.25, 0.0, -0.0, 3.0, 1.0, Decimal("0.5"), Decimal("1.50"), Decimal("3"),
        Decimal("-2.25"), "a", "b", "", "A", "a ", None, dt.date(2025, 1, 1), dt.date(2025, 1, 2)]
SMALL_POOL = [0, 1, "a", None, 1.0, Decimal("1")]

GOLD_SQL = [
    ("SELECT c0 FROM t", False),
    ("SELECT c0 FROM t ORDER BY c0", True),
    ("WITH x AS (SELECT c0 FROM t ORDER BY c0) SELECT * FROM x", False),
    ("SELECT c0, row_number() OVER (ORDER BY c0) AS r FROM t", False),
    ("SELECT c0 FROM t UNION ALL SELECT c0 FROM u ORDER BY 1", True),
    ("SELECT * FROM (SELECT * FROM t ORDER BY c0) AS s", False),
    ("SELECT c0 FROM t ORDER BY c0 DESC LIMIT 5", True),
    ("SELECT c0 FROM t LIMIT 5", False),
    ("FROM t ORDER BY c0", True),
    ("SELECT c0 FROM t WHERE c0 IN (SELECT c0 FROM u ORDER BY c0 LIMIT 1)", False),
]


def _mutate(rng: random.Random, gold: list[tuple], width: int) -> list[tuple]:
    rows = [list(r) for r in gold]
    op = rng.randrange(13)
    if op == 0:
        pass
    elif op == 1:
        rng.shuffle(rows)
    elif op == 2 and width > 1:
        perm = rng.sample(range(width), width)
        rows = [[r[i] for i in perm] for r in rows]
    elif op == 3:
        perm = rng.sample(range(width), width)
        rows = [[r[i] for i in perm] for r in rows]
        rng.shuffle(rows)
    elif op == 4 and rows:
        rows.insert(rng.randrange(len(rows) + 1), list(rng.choice(rows)))
    elif op == 5 and rows:
        rows.pop(rng.randrange(len(rows)))
    elif op == 6 and rows:
        rows[rng.randrange(len(rows))][rng.randrange(width)] = rng.choice(POOL)
    elif op == 7:
        rows = [r + [rng.choice(SMALL_POOL)] for r in rows]
    elif op == 8 and width > 1:
        drop = rng.randrange(width)
        rows = [r[:drop] + r[drop + 1:] for r in rows]
    elif op == 9 and len(rows) > 1:
        col, a, b = rng.randrange(width), *rng.sample(range(len(rows)), 2)
        rows[a][col], rows[b][col] = rows[b][col], rows[a][col]
    elif op == 10:
        rows = [[rng.choice(SMALL_POOL) for _ in range(width)] for _ in range(rng.randrange(4))]
    elif op == 11:  # the same numbers in another Python type (int <-> float <-> Decimal)
        swap = {1: 1.0, 0: Decimal(0), 3: Decimal("3.0"), 0.5: Decimal("0.50"), -1: -1.0}
        rows = [[swap.get(v, v) if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) else v
                 for v in r] for r in rows]
    elif op == 12 and rows:  # duplicate every row: a multiset difference, the same set
        rows = rows + [list(r) for r in rows]
        rng.shuffle(rows)
    return [tuple(r) for r in rows]


def random_pairs(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        width = rng.choice([1, 1, 2, 2, 3, 4, 5])
        pool = SMALL_POOL if rng.random() < 0.5 else POOL
        gold = [tuple(rng.choice(pool) for _ in range(width)) for _ in range(rng.choice([0, 1, 2, 3, 4, 6]))]
        sql, _ = rng.choice(GOLD_SQL)
        yield sql, gold, _mutate(rng, gold, width)


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect(":memory:")
    yield connection
    connection.close()


def test_order_detection_agrees_with_evaldata_on_the_templates(con):
    for sql, ordered in GOLD_SQL:
        assert top_level_order_by(con, sql) is ordered, sql
        assert evaldata_passes(SPIDER, sql, [(1,), (2,)], [(2,), (1,)]) is (not ordered), sql


def test_spider_and_bird_agree_with_evaldata_on_2500_random_pairs(con):
    ordered_of = {sql: top_level_order_by(con, sql) for sql, _ in GOLD_SQL}
    disagreements = []
    seen = {"spider": [0, 0], "bird": [0, 0], "ordered": 0, "wide": 0}
    for sql, gold, got in random_pairs(seed=20_240_611, count=2500):
        ours_spider = result_sets_match(gold, got, "spider", ordered_of[sql])
        ours_bird = result_sets_match(gold, got, "bird")
        theirs_spider = evaldata_passes(SPIDER, sql, gold, got)
        theirs_bird = evaldata_passes(BIRD, sql, gold, got)
        if ours_spider != theirs_spider:
            disagreements.append(("spider", sql, gold, got, ours_spider, theirs_spider))
        if ours_bird != theirs_bird:
            disagreements.append(("bird", sql, gold, got, ours_bird, theirs_bird))
        seen["spider"][ours_spider] += 1
        seen["bird"][ours_bird] += 1
        seen["ordered"] += ordered_of[sql]
        seen["wide"] += bool(gold) and len(gold[0]) > 3
    assert disagreements == []
    # the sample exercises both verdicts, ordered golds and the >3-column path of evaldata
    assert min(seen["spider"]) > 500 and min(seen["bird"]) > 500, seen
    assert seen["ordered"] > 500 and seen["wide"] > 300, seen


def test_intended_difference_list_is_complete():
    tested = {name.removeprefix("test_difference_") for name in globals() if name.startswith("test_difference_")}
    assert tested == set(INTENDED_DIFFERENCES)


def test_difference_bool_is_not_a_number():
    assert evaldata_passes(SPIDER, "SELECT c0 FROM t", [(1,)], [(True,)])
    assert evaldata_passes(BIRD, "SELECT c0 FROM t", [(1,)], [(True,)])
    assert not result_sets_match([(1,)], [(True,)], "spider")
    assert not result_sets_match([(1,)], [(True,)], "bird")
    assert result_sets_match([(True,)], [(True,)], "spider")


def test_difference_decimal_equals_float_by_text():
    gold, got = [(Decimal("0.1"), "x")], [(0.1, "x")]
    assert not evaldata_passes(SPIDER, "SELECT c0 FROM t", gold, got)
    assert not evaldata_passes(BIRD, "SELECT c0 FROM t", gold, got)
    assert result_sets_match(gold, got, "spider") and result_sets_match(gold, got, "bird")
    assert not result_sets_match([(Decimal("0.1"),)], [(0.1000001,)], "spider")


def test_difference_round_decimals():
    gold, got = [(1.0, "web")], [(1.004, "web")]
    assert not evaldata_passes(SPIDER, "SELECT c0 FROM t", gold, got)
    assert result_sets_match(gold, got, "spider", round_decimals=2)
    assert result_sets_match(gold, got, "bird", round_decimals=2)
    assert not result_sets_match(gold, got, "spider")  # without round_decimals the comparison is exact
    assert not result_sets_match(gold, [(1.006, "web")], "spider", round_decimals=2)


def test_difference_temporal_as_iso_text():
    gold = [("2025-01-01", "2025-01-01 08:30:00")]
    got = [(dt.date(2025, 1, 1), dt.datetime(2025, 1, 1, 8, 30))]
    assert not evaldata_passes(SPIDER, "SELECT c0 FROM t", gold, got)
    assert result_sets_match(gold, got, "spider") and result_sets_match(gold, got, "bird")
    assert not result_sets_match([("2025-1-1",)], [(dt.date(2025, 1, 1),)], "spider")


def test_difference_nan_equals_nan():
    gold, got = [(float("nan"),)], [(float("nan"),)]
    assert gold[0][0] is not got[0][0]
    assert not evaldata_passes(SPIDER, "SELECT c0 FROM t", gold, got)
    assert result_sets_match(gold, got, "spider") and result_sets_match(gold, got, "bird")
    assert not result_sets_match(gold, [(float("inf"),)], "spider")


def test_difference_nested_values():
    gold, got = [([1, 2], {"k": "v"})], [([1, 2], {"k": "v"})]
    with pytest.raises(TypeError):
        compare_rows(got, gold, order_sensitive=False, multiplicity="multiset", column_alignment="by_value")
    assert result_sets_match(gold, got, "spider") and result_sets_match(gold, got, "bird")
    assert not result_sets_match(gold, [([2, 1], {"k": "v"})], "spider")


def test_difference_parenthesized_order_by(con):
    sql = "(SELECT c0 FROM t ORDER BY c0)"
    assert top_level_order_by(con, sql)
    assert evaldata_passes(SPIDER, sql, [(1,), (2,)], [(2,), (1,)])
    assert not result_sets_match([(1,), (2,)], [(2,), (1,)], "spider", ordered=top_level_order_by(con, sql))


def test_difference_bird_ignores_order():
    set_default_order = ExecutionAccuracy(multiplicity="set")
    sql = "SELECT c0 FROM t ORDER BY c0"
    assert not evaldata_passes(set_default_order, sql, [(1,), (2,)], [(2,), (1,)])
    assert not evaldata_passes(set_default_order, sql, [(1,), (1,)], [(1,)])
    assert evaldata_passes(BIRD, sql, [(1,), (2,)], [(2,), (1,)])
    assert result_sets_match([(1,), (2,)], [(2,), (1,)], "bird")
    assert result_sets_match([(1,), (1,)], [(1,)], "bird")


def test_difference_scalar_needs_one_cell():
    record = {"answer_type": "integer", "round_decimals": None}
    assert evaldata_passes(BIRD, "SELECT c0 FROM t", [(5,)], [(5,), (5,)])
    assert not answer_matches(record, 5, [(5,), (5,)], "bird")
    assert not answer_matches(record, 5, [(5, 5)], "spider")
    assert answer_matches(record, 5, [(5,)], "bird")


def test_difference_duplicate_column_names(tmp_path: Path):
    adapter = DuckDBAdapter()
    try:
        assert isinstance(adapter.execute("SELECT 1 AS a, 2 AS a"), ExecutionFailure)
    finally:
        adapter.close()
    con = open_sandbox(tmp_path)  # no tables needed
    try:
        outcome = run_query(con, "SELECT 1 AS a, 2 AS a")
    finally:
        con.close()
    assert outcome.error is None
    assert result_sets_match([(2, 1)], outcome.rows, "spider")


def test_difference_fetch_cap(tmp_path: Path):
    con = open_sandbox(tmp_path)
    try:
        outcome = run_query(con, f"SELECT 1 AS one FROM range({MAX_FETCH_ROWS + 1})")
        under = run_query(con, f"SELECT 1 AS one FROM range({MAX_FETCH_ROWS})")
    finally:
        con.close()
    assert outcome.rows is None and "too many rows" in outcome.error
    assert under.rows is not None and result_sets_match([(1,)], under.rows, "bird")
    many = [(1,)] * (MAX_FETCH_ROWS + 1)
    assert compare_rows(many, [(1,)], order_sensitive=False, multiplicity="set", column_alignment="by_position")


def test_difference_search_budget():
    # three columns with the same values: finding the mapping takes more than two steps
    gold = [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2)]
    got = [(r[2], r[0], r[1]) for r in gold]
    keyed_gold, keyed_got = _row_keys(gold, None), _row_keys(got, None)
    assert _spider_equal(keyed_gold, keyed_got, ordered=False)
    assert not _spider_equal(keyed_gold, keyed_got, ordered=False, budget=2)
    assert compare_rows(got, gold, order_sensitive=False, multiplicity="multiset", column_alignment="by_value")
