"""The join operators of the near-miss study: outer_join, anti_join_side, not_in, count_star_outer, join_dropped.

Each runs on the gold shapes of the join questions over tiny in-memory tables holding what join mistakes
feed on: orders whose customer is missing (orphans) or NULL, a customer without orders, and customers
whose region is missing or NULL. An operator makes its mutant on the shapes it applies to, the mutant is
valid DuckDB SQL that answers differently on these tables, and it makes none where it does not apply
(where its edit would give the same query, the data shows that too)."""

from __future__ import annotations

import json

import duckdb
import pytest
import sqlglot

from evalpack.checks.nearmiss.operators import OPERATORS, mutants_of
from evalpack.checks.nearmiss.study import Mutant, _prepared, plan_study, study_rotation
from evalpack.questions.derive import DIALECT, Question

TYPES = {
    "orders": {"order_id": "BIGINT", "customer_id": "BIGINT", "amount": "DECIMAL(18,2)", "ordered_at": "DATE"},
    "customers": {"customer_id": "BIGINT", "country": "VARCHAR", "region_id": "BIGINT", "referrer_id": "BIGINT"},
    "regions": {"region_id": "BIGINT", "zone": "VARCHAR"},
}
NULLABLE = {"orders": {"customer_id"}, "customers": {"region_id", "referrer_id"}}
UNIQUE = {"orders": {"order_id"}, "customers": {"customer_id"}, "regions": {"region_id"}}

REGIONS = [(1, "north"), (2, "south")]
# customer 5 has no orders; customer 4's region is NULL and customer 6's (9) is missing; customers 1 and 2
# referred others, and customer 3's referrer (7) is missing
CUSTOMERS = [(1, "DE", 1, None), (2, "DE", 2, 1), (3, "FR", 1, 7), (4, "FR", None, 1), (5, "DE", 1, None),
             (6, "FR", 9, 2)]
# orders 7 and 12 belong to missing customers (99, 98); 8, 13 and 15 have none (NULL)
ORDERS = [(1, 1, "10.00", "2025-01-05"), (2, 1, "20.00", "2025-01-06"), (3, 1, "5.00", "2025-01-07"),
          (4, 2, "7.50", "2025-01-08"), (5, 3, "12.00", "2025-01-09"), (6, 4, "3.00", "2025-01-10"),
          (7, 99, "100.00", "2025-01-11"), (8, None, "50.00", "2025-01-12"), (9, 6, "8.00", "2025-01-13"),
          (10, 2, "9.00", "2025-02-02"), (11, 2, "1.00", "2025-02-03"), (12, 98, "4.00", "2025-02-04"),
          (13, None, "2.00", "2025-02-05"), (14, 3, "6.00", "2025-02-06"), (15, None, "1.00", "2025-03-01")]

JAN = "o.ordered_at >= CAST('2025-01-01' AS DATE) AND o.ordered_at < CAST('2025-02-01' AS DATE)"
OC = "FROM orders AS o JOIN customers AS c ON o.customer_id = c.customer_id"
CO = "FROM customers AS c JOIN orders AS o ON o.customer_id = c.customer_id"
CO_LEFT = "FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.customer_id"
REGION = "JOIN regions AS r ON c.region_id = r.region_id"

# the gold shapes of the join questions
DE_MONTH = f"SELECT ROUND(SUM(o.amount), 2) {OC} WHERE c.country = 'DE' AND {JAN}"
BY_COUNTRY = f"SELECT c.country, ROUND(SUM(o.amount), 2) AS total {OC} WHERE {JAN} GROUP BY c.country ORDER BY total DESC"
COUNTRY_BAR = f"SELECT c.country, ROUND(SUM(o.amount), 2) AS total {OC} WHERE {JAN} GROUP BY c.country " \
              "HAVING SUM(o.amount) >= 30.00"
NORTH_MONTH = f"SELECT ROUND(SUM(o.amount), 2) {OC} {REGION} WHERE r.zone = 'north' AND {JAN}"
BY_ZONE = f"SELECT r.zone, ROUND(SUM(o.amount), 2) AS total {OC} {REGION} WHERE {JAN} GROUP BY r.zone ORDER BY total DESC"
ANTI_LEFT = f"SELECT COUNT(*) {CO_LEFT} WHERE o.customer_id IS NULL"
ANTI_EXISTS = "SELECT COUNT(*) FROM customers AS c WHERE NOT EXISTS (SELECT 1 FROM orders AS o " \
              "WHERE o.customer_id = c.customer_id)"
UNLINKED = "SELECT ROUND(SUM(o.amount), 2) FROM orders AS o LEFT JOIN customers AS c ON o.customer_id = c.customer_id " \
           f"WHERE c.customer_id IS NULL AND {JAN}"
ACTIVE = f"SELECT COUNT(DISTINCT o.customer_id) {OC} WHERE {JAN}"
ACTIVE_PARENT = f"SELECT COUNT(DISTINCT c.customer_id) {OC} WHERE {JAN}"


def at_least(n: int) -> str:
    return f"SELECT COUNT(*) FROM (SELECT c.customer_id {CO} GROUP BY c.customer_id HAVING COUNT(*) >= {n}) AS t"


PER_CUSTOMER = f"SELECT ROUND(CAST(COUNT(o.order_id) AS DOUBLE) / COUNT(DISTINCT c.customer_id), 4) {CO_LEFT}"
# the enclosing query reads the subquery's output column by its name
REFERRERS = "SELECT COUNT(t.customer_id) FROM (SELECT ref.customer_id FROM customers AS c JOIN customers AS ref " \
            "ON c.referrer_id = ref.customer_id GROUP BY ref.customer_id) AS t"
TOP = f"SELECT c.customer_id, COUNT(*) AS orders {CO} GROUP BY c.customer_id ORDER BY orders DESC LIMIT 6"

# (operator, gold SQL, the mutants it makes, in order)
APPLIES = [
    ("outer_join", BY_COUNTRY, [BY_COUNTRY.replace(" JOIN ", " LEFT JOIN ")]),
    ("outer_join", COUNTRY_BAR, [COUNTRY_BAR.replace(" JOIN ", " LEFT JOIN ")]),
    ("outer_join", BY_ZONE, [BY_ZONE.replace(REGION, "LEFT " + REGION)]),  # the customers join: r's ON drops it again
    ("outer_join", ACTIVE, [ACTIVE.replace(" JOIN ", " LEFT JOIN ")]),
    ("outer_join", at_least(1), [at_least(1).replace(" JOIN ", " LEFT JOIN ")]),
    ("outer_join", TOP, [TOP.replace(" JOIN ", " LEFT JOIN ")]),
    ("anti_join_side", ANTI_LEFT, [ANTI_LEFT.replace("o.customer_id IS NULL", "c.customer_id IS NULL")]),
    ("anti_join_side", ANTI_LEFT.replace("o.customer_id IS", "o.order_id IS"),  # a unique key of orders
     [ANTI_LEFT.replace("o.customer_id IS", "c.customer_id IS")]),
    ("anti_join_side", UNLINKED, [UNLINKED.replace("c.customer_id IS NULL", "o.customer_id IS NULL")]),
    ("not_in", ANTI_EXISTS,
     ["SELECT COUNT(*) FROM customers AS c WHERE NOT c.customer_id IN (SELECT o.customer_id FROM orders AS o)"]),
    ("not_in", ANTI_EXISTS.replace("SELECT 1", "SELECT *"),
     ["SELECT COUNT(*) FROM customers AS c WHERE NOT c.customer_id IN (SELECT o.customer_id FROM orders AS o)"]),
    ("count_star_outer", PER_CUSTOMER, [PER_CUSTOMER.replace("COUNT(o.order_id)", "COUNT(*)")]),
    ("join_dropped", ACTIVE, [f"SELECT COUNT(DISTINCT o.customer_id) FROM orders AS o WHERE {JAN}"]),
    ("join_dropped", ACTIVE_PARENT, [f"SELECT COUNT(DISTINCT o.customer_id) FROM orders AS o WHERE {JAN}"]),
    ("join_dropped", at_least(3), ["SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders AS o GROUP BY o.customer_id "
                                   "HAVING COUNT(*) >= 3) AS t"]),
    ("join_dropped", TOP, ["SELECT o.customer_id, COUNT(*) AS orders FROM orders AS o GROUP BY o.customer_id "
                           "ORDER BY orders DESC LIMIT 6"]),
    ("join_dropped", REFERRERS, ["SELECT COUNT(t.customer_id) FROM (SELECT c.referrer_id AS customer_id FROM customers "
                                 "AS c GROUP BY c.referrer_id) AS t"]),
]

# (operator, gold SQL) where the operator makes nothing
DOES_NOT_APPLY = [
    ("outer_join", DE_MONTH),  # WHERE c.country = 'DE' drops the rows a LEFT JOIN adds
    ("outer_join", NORTH_MONTH),  # so do r.zone = 'north' and, for the customers join, regions' ON
    ("outer_join", ACTIVE_PARENT),  # COUNT(DISTINCT c.customer_id) skips them
    ("outer_join", at_least(3)),  # a customer without orders is a group of one row: below 3
    ("outer_join", ANTI_LEFT),  # already LEFT
    ("outer_join", f"SELECT COUNT(*) FROM orders AS o WHERE {JAN}"),
    ("anti_join_side", f"SELECT COUNT(*) {OC} WHERE c.region_id IS NULL"),  # an inner join
    ("anti_join_side", f"SELECT COUNT(*) {CO_LEFT} WHERE NOT o.customer_id IS NULL"),
    ("anti_join_side", "SELECT COUNT(*) FROM orders AS o WHERE o.customer_id IS NULL"),
    ("anti_join_side", f"SELECT COUNT(*) {CO_LEFT} WHERE o.amount IS NULL"),  # not a key: no anti-join
    ("anti_join_side", ANTI_EXISTS),
    ("not_in", ANTI_EXISTS.replace("NOT EXISTS", "EXISTS")),  # IN for EXISTS is the same query
    ("not_in", ANTI_LEFT),
    ("not_in", "SELECT COUNT(*) FROM customers AS c WHERE NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.amount > 50)"),
    ("count_star_outer", f"SELECT COUNT(o.order_id) {CO}"),  # an inner join: no row without a match
    ("count_star_outer", f"SELECT COUNT(c.customer_id) {CO_LEFT}"),  # the preserved side
    ("count_star_outer", f"SELECT COUNT(DISTINCT o.customer_id) {CO_LEFT}"),
    ("join_dropped", DE_MONTH),  # the WHERE reads the parent's country
    ("join_dropped", BY_COUNTRY),
    ("join_dropped", NORTH_MONTH),  # customers links orders to regions; regions is filtered on
    ("join_dropped", ANTI_LEFT),  # a LEFT JOIN
    ("join_dropped", PER_CUSTOMER),
    ("join_dropped", ANTI_EXISTS),
]

NEW = ("outer_join", "anti_join_side", "not_in", "count_star_outer", "join_dropped")


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    for table, columns in TYPES.items():
        con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in columns.items())})")
    con.executemany("INSERT INTO regions VALUES (?, ?)", REGIONS)
    con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", CUSTOMERS)
    con.executemany("INSERT INTO orders VALUES (?, ?, CAST(? AS DECIMAL(18,2)), CAST(? AS DATE))", ORDERS)
    yield con
    con.close()


def _question(sql: str) -> Question:
    return Question("q1", "?", sql, (("seed_1", 1),), "number", 2, "test", ())


def _of(operator: str, sql: str, nullable=NULLABLE, unique=UNIQUE) -> list[str]:
    return [tree.sql(dialect=DIALECT) for op, tree in mutants_of(_question(sql), TYPES, nullable, None, unique)
            if op == operator]


def _rows(con, sql: str) -> list[tuple]:
    return sorted(con.execute(sql).fetchall(), key=repr)  # ties in an ORDER BY come back in any order


def _ids(cases: list[tuple]) -> list[str]:
    return [f"{case[0]}-{i}" for i, case in enumerate(cases)]


def test_the_join_operators_are_registered():
    assert set(NEW) <= set(OPERATORS)
    assert OPERATORS[-1] == "constant_answer"
    assert len(set(OPERATORS)) == len(OPERATORS)


def test_every_join_operator_has_cases():
    assert {op for op, _, _ in APPLIES} == {op for op, _ in DOES_NOT_APPLY} == set(NEW)


@pytest.mark.parametrize("case", APPLIES, ids=_ids(APPLIES))
def test_operator_makes_its_mutants(case):
    operator, gold, expected = case
    assert _of(operator, gold) == expected


@pytest.mark.parametrize("case", APPLIES, ids=_ids(APPLIES))
def test_each_mutant_is_valid_duckdb_and_answers_differently(case, con):
    operator, gold, _ = case
    expected = _rows(con, gold)
    for mutant in _of(operator, gold):
        assert sqlglot.parse_one(mutant, read=DIALECT).sql(dialect=DIALECT) == mutant  # renders back as itself
        assert _rows(con, mutant) != expected, mutant


@pytest.mark.parametrize("operator, gold", DOES_NOT_APPLY, ids=_ids(DOES_NOT_APPLY))
def test_operator_leaves_sql_it_does_not_apply_to_alone(operator, gold, con):
    con.execute(gold).fetchall()  # the control query is valid
    assert _of(operator, gold) == []


def test_the_answers_the_mistakes_give(con):
    """What each mistake reads on these tables, against the gold answer (the tables' design, spelt out)."""
    assert _rows(con, ANTI_LEFT) == _rows(con, ANTI_EXISTS) == [(1,)]  # customer 5
    assert _rows(con, _of("anti_join_side", ANTI_LEFT)[0]) == [(0,)]  # a customer's own key is never NULL
    assert _rows(con, _of("not_in", ANTI_EXISTS)[0]) == [(0,)]  # orders hold NULL customer ids
    assert _rows(con, UNLINKED)[0][0] == 150 and _rows(con, _of("anti_join_side", UNLINKED)[0])[0][0] == 50  # NULLs only
    assert _rows(con, ACTIVE) == [(5,)] and _rows(con, _of("join_dropped", ACTIVE)[0]) == [(6,)]  # customer 99
    assert _rows(con, at_least(3)) == [(2,)] and _rows(con, _of("join_dropped", at_least(3))[0]) == [(3,)]  # NULL id
    assert _rows(con, PER_CUSTOMER) == [(round(10 / 6, 4),)]
    assert _rows(con, _of("count_star_outer", PER_CUSTOMER)[0]) == [(round(11 / 6, 4),)]  # customer 5 counts one
    assert (None, 150) in _rows(con, _of("outer_join", BY_COUNTRY)[0])  # orders 7 and 8, without a country
    assert _rows(con, REFERRERS) == [(2,)] and _rows(con, _of("join_dropped", REFERRERS)[0]) == [(3,)]  # 7 too


@pytest.mark.parametrize("gold", [DE_MONTH, NORTH_MONTH, ACTIVE_PARENT, at_least(3)])
def test_outer_join_is_not_made_where_it_is_the_same_query(gold, con):
    """The LEFT JOIN outer_join would make gives the gold answer on these tables, orphans and all."""
    for i in range(gold.count(" JOIN ")):
        parts = gold.split(" JOIN ")
        left = " JOIN ".join(parts[:i + 1]) + " LEFT JOIN " + " JOIN ".join(parts[i + 1:])
        assert _rows(con, left) == _rows(con, gold), left


def test_not_in_needs_a_key_that_can_be_null():
    assert _of("not_in", ANTI_EXISTS, nullable={}) == []
    assert len(_of("not_in", ANTI_EXISTS, nullable={"customers": {"customer_id"}})) == 1  # the outer key


def test_agg_swap_leaves_a_left_joined_count_to_count_star_outer():
    assert _of("agg_swap", PER_CUSTOMER) == []
    assert _of("agg_swap", f"SELECT COUNT(o.order_id) {CO}") == [f"SELECT COUNT(*) {CO}"]
    assert _of("count_star_outer", f"SELECT COUNT(o.order_id) {CO}") == []


def test_join_dropped_drops_only_a_parent_and_needs_the_unique_keys():
    assert _of("join_dropped", ACTIVE, unique={}) == []
    # customers' key is unique, orders' customer_id is not: at_least and TOP keep orders and drop customers
    assert _of("join_dropped", at_least(3), unique={"orders": {"order_id"}}) == []


def test_mutants_are_studied_and_none_matches(con):
    """Through preparation (none dropped as equivalent) and the study's batched runs (none errored),
    every join mutant of the scalar shapes misses the gold answer."""
    golds = [ANTI_LEFT, ANTI_EXISTS, UNLINKED, ACTIVE, ACTIVE_PARENT, at_least(1), at_least(3), PER_CUSTOMER]
    questions, mutants = {}, []
    for i, gold in enumerate(golds):
        answer = con.execute(gold).fetchone()[0]
        q = Question(f"q{i}", "?", gold, (("seed_1", float(answer)),), "number", 4, "test", ())
        questions[q.id] = q
        for op, made in _prepared(gold, json.dumps(TYPES), json.dumps({t: sorted(c) for t, c in NULLABLE.items()}),
                                  None, json.dumps({t: sorted(c) for t, c in UNIQUE.items()})):
            if op in NEW:
                assert made is not None, (op, gold)
                mutants.append(Mutant(q.id, op, *made))
    assert {m.operator for m in mutants} == set(NEW)
    outcomes = study_rotation(con, "seed_1", questions, plan_study(con, mutants, TYPES))
    assert {m.sql: outcomes[m] for m in mutants} == {m.sql: False for m in mutants}
