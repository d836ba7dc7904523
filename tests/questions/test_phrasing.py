"""Questions are an analyst's words: no raw identifier, no SQL phrasing; evidence makes each exact.

Every shipped question of both example specs and of a Misata-format spec (no `semantics:` at all,
so every word is a default derived from the identifiers) is read, with each of its paraphrases.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from evalpack.core.errors import SpecError
from evalpack.data.plan import plan_pack
from evalpack.questions.derive import derive_questions
from evalpack.questions.phrasing import SQL_PHRASING, article
from evalpack.spec.model import QuestionPlan
from evalpack.spec.reader import load_spec, parse_spec
from evalpack.spec.semantics import Semantics, column_words

ROOT = Path(__file__).resolve().parents[2]
SPECS = [ROOT / "schemas" / "retail.yaml", ROOT / "schemas" / "finance.yaml",
         ROOT / "benchmarks" / "specs" / "retail_misata.yaml"]


def identifiers(spec) -> set[str]:
    return {t.name for t in spec.tables} | {c.name for t in spec.tables for c in t.columns}


def problems(text: str, names: set[str]) -> list[str]:
    found = [w for w in re.findall(r"[A-Za-z0-9_]+", text) if "_" in w]  # a raw identifier
    found += [n for n in names if "_" in n and n in text]
    lowered = f" {text.lower()} "
    for phrase in (p.strip() for p in SQL_PHRASING):
        before = "(?<![a-z])" if phrase[0].isalpha() else ""
        after = "(?![a-z])" if phrase[-1].isalpha() else ""
        if re.search(before + re.escape(phrase) + after, lowered):
            found.append(phrase)
    return found


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_no_question_or_paraphrase_shows_an_identifier_or_sql_phrasing(path):
    spec = load_spec(path)
    questions = derive_questions(spec, plan_pack(spec))
    assert questions
    names = identifiers(spec)
    for q in questions:
        for text in (q.question, *q.paraphrases):
            assert problems(text, names) == [], (q.id, q.kind, text)
        assert len(q.paraphrases) >= 2 and q.question not in q.paraphrases, q.id  # at least 3 phrasings
        assert len({q.question, *q.paraphrases}) == 1 + len(q.paraphrases)
        assert q.evidence.endswith(".") and len(q.evidence) > 20, q.id


def test_the_check_catches_what_it_is_for():
    names = {"ordered_at", "orders"}
    assert problems("How many orders have ordered_at in January?", names) == ["ordered_at", "ordered_at"]
    assert problems("What is the total amount of orders rows with channel = 'web'?", names) == ["rows", "= '"]
    assert problems("How many orders were refunded in March 2025?", names) == []


def test_evidence_carries_the_exact_terms(tmp_path):
    spec = replace(load_spec(ROOT / "schemas" / "retail.yaml"), questions=QuestionPlan(mix=None))  # the whole pool
    questions = derive_questions(spec, plan_pack(spec))
    web = next(q for q in questions if q.kind == "group_period_total" and "'web'" in q.evidence
               and "January" in q.question)
    assert "revenue is the sum of orders.amount, in EUR" in web.evidence
    assert "orders.channel = 'web'" in web.evidence and "web sales channel" in web.question
    assert "from 2025-01-01 up to but not including 2025-02-01" in web.evidence and "January 2025" in web.question
    orphans = next(q for q in questions if q.kind == "fk_orphans")
    assert "orders.customer_id" in orphans.evidence and "customers.customer_id" in orphans.evidence


def test_the_seed_chooses_the_phrasing_and_synonyms_add_paraphrases():
    text = (ROOT / "schemas" / "retail.yaml").read_text()
    s, t = (replace(parse_spec(text, seed=seed), questions=QuestionPlan(mix=None)) for seed in (None, 1234))
    a, b = derive_questions(s, plan_pack(s)), derive_questions(t, plan_pack(t))  # the whole pool of each
    assert [q.question for q in a] != [q.question for q in b]  # another seed, other choices
    for qa, qb in zip(a, b):
        assert {qa.question, *qa.paraphrases} == {qb.question, *qb.paraphrases}  # the same phrasings
    revenue = [q for q in a if q.kind == "period_total"]
    assert all(any("sales" in p for p in (q.question, *q.paraphrases)) for q in revenue)  # synonyms: revenue: [sales]


def test_default_words_come_from_the_identifiers():
    sem = Semantics()
    assert column_words("ordered_at") == "order date" and column_words("signed_up_at") == "sign-up date"
    assert column_words("customer_id") == "customer" and column_words("is_active") == "active"
    assert sem.table("orders").singular == "order" and sem.table("categories").singular == "category"
    assert sem.table("journal_lines").plural == "journal lines"
    assert sem.sum_measure("orders", "amount") == "total amount of orders"
    assert sem.value("small_business") == "small business"


@pytest.mark.parametrize("semantics, where", [
    ("semantics:\n  tables: {order: x}\n", "semantics.tables.order"),
    ("semantics:\n  columns: {orders.when: x}\n", "semantics.columns.orders.when"),
    ("semantics:\n  measures: {revenue: {avg: orders.amount}}\n", "semantics.measures.revenue.avg"),
    ("semantics:\n  colums: {}\n", "semantics.colums"),
])
def test_a_bad_semantics_key_names_its_line_and_key_path(semantics, where):
    text = (ROOT / "schemas" / "finance.yaml").read_text()
    text = text[:text.index("semantics:")] + semantics + text[text.index("\nrelationships:"):]
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file="finance.yaml")
    assert str(caught.value).startswith("finance.yaml:") and where in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("word", "said"), [
    ("order", "an order"), ("item", "an item"), ("event", "an event"), ("unknown", "an unknown"),
    ("umbrella", "an umbrella"), ("uninsured", "an uninsured"), ("hour", "an hour"), ("honest", "an honest"),
    ("user", "a user"), ("unit", "a unit"), ("usage", "a usage"), ("euro", "a euro"), ("one-off", "a one-off"),
    ("customer", "a customer"), ("house", "a house"), ("User", "a User"),
])
def test_the_article_follows_how_the_word_is_said(word, said):
    """Misata's SaaS story has a users table: "a user", never "an user" (found in its questions and card)."""
    assert article(word) == said
