"""Each near-miss operator against its fixture: what it makes of real gold SQL, one file per operator.

``tests/fixtures/nearmiss/<operator>.json`` holds, for a few gold SQL texts of the example and test specs' packs (and,
for an operator none of them gives work, one written for it), every mutant the operator makes, in order, printed in
DuckDB's dialect, with the schema, nullable and unique columns it was made with. Adding an operator means adding its
function to the registry (``evalpack.checks.nearmiss.operators``) and its fixture here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpack.checks.nearmiss.operators import OPERATORS, mutants_of
from evalpack.checks.nearmiss.study import PRINTER
from evalpack.questions.derive import Question, lean, parse_gold

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nearmiss"
SQL_OPERATORS = [op for op in OPERATORS if op != "constant_answer"]  # constant_answer reads answers, not SQL


def made_by(operator: str, gold: str, context: dict) -> list[str]:
    nullable = {t: set(c) for t, c in context["nullable"].items()}
    unique = {t: set(c) for t, c in context["unique"].items()}
    question = Question("", "", gold, (), "", None, "", ())
    return [tree.sql(dialect=PRINTER) for op, tree in
            mutants_of(question, context["types"], nullable, None, unique, parsed=lean(parse_gold(gold)),
                       traps=context.get("traps"))
            if op == operator]


@pytest.mark.parametrize("operator", SQL_OPERATORS)
def test_an_operator_makes_of_each_gold_sql_what_its_fixture_says(operator):
    fixture = json.loads((FIXTURES / f"{operator}.json").read_text(encoding="utf-8"))
    assert fixture["operator"] == operator
    for case in fixture["cases"]:
        assert made_by(operator, case["gold"], fixture["contexts"][case["spec"]]) == case["mutants"], case["gold"]


def test_every_operator_has_a_fixture_where_it_makes_a_mutant_and_no_fixture_is_left_over():
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted(SQL_OPERATORS)
    for operator in SQL_OPERATORS:
        cases = json.loads((FIXTURES / f"{operator}.json").read_text(encoding="utf-8"))["cases"]
        assert any(case["mutants"] for case in cases), operator


def test_the_fixture_test_fails_for_an_operator_that_makes_something_else():
    fixture = json.loads((FIXTURES / "inclusive_end.json").read_text(encoding="utf-8"))
    case = next(c for c in fixture["cases"] if c["mutants"])
    assert made_by("exclusive_start", case["gold"], fixture["contexts"][case["spec"]]) != case["mutants"]
