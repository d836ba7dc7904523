"""Questions are an analyst's words: no raw identifier, no SQL phrasing, complete under the pack's data
dictionary; evidence is external knowledge in words, never SQL in words.

Every question (the whole pool, questions to decline included) of both example specs, of a three-table spec of
our own and of a Misata-format spec (no `semantics:` at all, so every word is a default derived from the
identifiers) is read, with each of its paraphrases.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from evalpack.core.errors import SpecError
from evalpack.data.plan import plan_pack
from evalpack.questions.derive import derive_declines, derive_questions
from evalpack.questions.phrasing import SQL_PHRASING, article
from evalpack.spec.dictionary import build_dictionary
from evalpack.spec.model import QuestionPlan
from evalpack.spec.reader import load_spec, parse_spec
from evalpack.spec.semantics import Semantics, column_words

ROOT = Path(__file__).resolve().parents[2]
SPECS = [ROOT / "schemas" / "retail.yaml", ROOT / "schemas" / "finance.yaml",
         ROOT / "benchmarks" / "specs" / "retail_misata.yaml", ROOT / "tests" / "specs" / "shop_joins.yaml"]
SQL_WORDS = re.compile(r"\b(?:SELECT|FROM|WHERE|GROUP BY|ORDER BY|HAVING|JOIN|LEFT|INNER|NULL|IS NOT|COALESCE|CAST)\b"
                       r"|(?i:\b(?:sum|count|avg|min|max|round|date_trunc)\s*\(|\bnull\b)|[<>]=?|!=")
ISO_DATE = re.compile(r"\b\d{4}-\d{2}(?:-\d{2})?\b")


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


def evidence_problems(evidence: str | None, spec) -> list[str]:
    """What an evidence gives away of the gold SQL: a table.column name, a stored categorical value in quotes, an
    ISO date or month, SQL words (none of which evidence may hold: it is external knowledge in words)."""
    if evidence is None:
        return []
    found = [f"{t.name}.{c.name}" for t in spec.tables for c in t.columns if f"{t.name}.{c.name}" in evidence]
    found += [f"'{v}'" for t in spec.tables for c in t.columns for v in c.choices
              if f"'{v}'" in evidence or f'"{v}"' in evidence]
    found += ISO_DATE.findall(evidence) + SQL_WORDS.findall(evidence)
    return found


def every_question(spec):
    """The whole pool of ``spec``'s questions (every family, before the difficulty mix chooses) and its questions
    to decline."""
    pool = replace(spec, questions=replace(spec.questions, mix=None))
    plans = plan_pack(pool)
    answerable = derive_questions(pool, plans)
    return list(answerable) + list(derive_declines(pool, plans, len(answerable)))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_no_question_or_paraphrase_shows_an_identifier_or_sql_phrasing(path):
    spec = load_spec(path)
    questions = every_question(spec)
    assert questions
    names = identifiers(spec)
    for q in questions:
        for text in (q.question, *q.paraphrases):
            assert problems(text, names) == [], (q.id, q.kind, text)
        if q.answerable:
            assert len(q.paraphrases) >= 2 and q.question not in q.paraphrases, q.id  # at least 3 phrasings
        assert len({q.question, *q.paraphrases}) == 1 + len(q.paraphrases)
        assert evidence_problems(q.evidence, spec) == [], (q.id, q.evidence)


def test_the_check_catches_what_it_is_for():
    names = {"ordered_at", "orders"}
    assert problems("How many orders have ordered_at in January?", names) == ["ordered_at", "ordered_at"]
    assert problems("What is the total amount of orders rows with channel = 'web'?", names) == ["rows", "= '"]
    assert problems("How many orders were refunded in March 2025?", names) == []


def test_the_evidence_check_catches_what_it_is_for():
    spec = load_spec(ROOT / "schemas" / "retail.yaml")
    assert evidence_problems("revenue is the sum of orders.amount", spec) == ["orders.amount"]
    assert evidence_problems("the web sales channel means channel = 'web'", spec) == ["'web'"]
    assert evidence_problems("from 2025-01-01 up to 2025-02", spec) == ["2025-01-01", "2025-02"]
    assert evidence_problems("orders LEFT JOIN customers where the key IS NULL", spec) == ["LEFT", "JOIN", "NULL"]
    assert evidence_problems("A repeat customer has at least two orders that count.", spec) == []


def test_the_dictionary_carries_what_the_evidence_used_to():
    """What a question needs beyond its words is in the data dictionary: which column a measure sums and which
    date places an order in a month, what a group's stored value is, what a key refers to."""
    spec = load_spec(ROOT / "schemas" / "retail.yaml")
    dictionary = build_dictionary(spec)
    web = next(q for q in every_question(spec) if q.kind == "group_period_total" and "January" in q.question
               and "web" in q.question)
    assert web.evidence is None and "web sales channel" in web.question and "January 2025" in web.question
    orders = {c.name: c for c in dictionary.table("orders").columns}
    assert orders["channel"].label == "sales channel" and ("2", "app") in orders["channel"].values  # coded
    assert orders["amount"].unit == "EUR" and orders["customer_id"].refers_to == "customers.customer_id"
    revenue = next(m for m in dictionary.measures if m.name == "revenue")
    assert "order amount" in revenue.definition and "order date" in revenue.definition
    assert any("An order falls in the month of its order date" in c.definition for c in dictionary.conventions)


def test_a_term_the_spec_defines_is_the_evidence_of_the_questions_that_use_it():
    text = (ROOT / "schemas" / "retail.yaml").read_text().replace(
        "  currency: EUR\n", "  currency: EUR\n  terms:\n    sales channel: \"where the customer placed the order\"\n")
    spec = parse_spec(text)
    questions = every_question(spec)
    channel = [q for q in questions if "sales channel" in " ".join((q.question, *q.paraphrases))]
    assert channel and all(q.evidence == "sales channel: where the customer placed the order" for q in channel)
    assert all(q.evidence is None for q in questions if q not in channel)


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
    ("semantics:\n  conventions: {percent: ratio}\n", "semantics.conventions.percent"),
    ("semantics:\n  columns: {journal_lines.account: {name: account, colour: red}}\n",
     "semantics.columns.journal_lines.account.colour"),
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
    ("customer", "a customer"), ("house", "a house"), ("User", "a User"), ("MRR movement", "an MRR movement"),
    ("SKU", "an SKU"), ("KPI", "a KPI"),
])
def test_the_article_follows_how_the_word_is_said(word, said):
    """Misata's SaaS story has a users table: "a user", never "an user" (found in its questions and card)."""
    assert article(word) == said


def test_what_the_spec_says_of_its_data_reaches_the_dictionary():
    """Descriptions, units, value meanings, terms and conventions given in `semantics:` are the dictionary's."""
    text = (ROOT / "schemas" / "finance.yaml").read_text().replace("  currency: USD\n", """\
  currency: USD
  terms: {booked revenue: "revenue recognised in the month it is earned"}
  conventions: {week_starts: sunday, percent: fraction}
""")
    # the account as stored labels (not coded), with a description and one value's meaning
    coded = next(line for line in text.splitlines(keepends=True) if line.startswith("    journal_lines.account:"))
    text = text.replace(coded, """\
    journal_lines.account: {name: ledger account, description: "the account a line posts to", values: {cash: money held}}
""").replace("codes: [mrr_movements.movement_type, journal_lines.account]", "codes: [mrr_movements.movement_type]")
    dictionary = build_dictionary(parse_spec(text))
    account = next(c for c in dictionary.table("journal_lines").columns if c.name == "account")
    assert account.label == "ledger account" and account.description == "the account a line posts to"
    assert ("cash", "money held") in account.values and ("equity", "equity") in account.values
    assert ("booked revenue", "revenue recognised in the month it is earned") in [
        (t.name, t.definition) for t in dictionary.terms]
    conventions = {c.name: c.definition for c in dictionary.conventions}
    assert conventions["week"] == "A week starts on Sunday." and conventions["shares"].endswith("a fraction.")
    assert "ledger account" in dictionary.markdown() and "cash means money held" in dictionary.markdown()
