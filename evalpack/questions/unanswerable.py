"""Questions no SQL on this schema answers, derived from the spec so that each is certainly unanswerable.

Three reasons, each a question kind: data no table holds (``no_such_measure``: profit with no cost,
``no_such_attribute``: a customer's age with no birth date), an entity the schema lacks
(``no_such_entity``: suppliers), and requests beyond SQL (``beyond_sql``: a forecast past the last date
the data can hold, the cause of a change, advice). The proof is mechanical (:data:`PROOF_RULE`): every
word the spec gives (:func:`vocabulary`) is searched for each term of the concept, and a concept is
asked about only when none is found. Each question carries its proof; the manifest lists them.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from evalpack.data.plan import AnswerKey, stable_int
from evalpack.questions import phrasing
from evalpack.questions.phrasing import Wording, Words, month_words
from evalpack.spec.model import Spec, add_months
from evalpack.spec.semantics import plural_of, singular_of

REASONS = {
    "no_such_measure": "a measure no table holds",
    "no_such_attribute": "an attribute no table holds",
    "no_such_entity": "an entity the schema lacks",
    "beyond_sql": "a request no query answers (a forecast, a cause, advice)",
    "no_coverage": "a period before the first date the data holds (the dictionary says what it covers)",
    "no_such_grain": "a time of day, which a date without a time does not hold",
}
DIFFICULTY = {"no_such_entity": "simple", "no_such_measure": "moderate", "no_such_attribute": "moderate",
              "beyond_sql": "challenging", "no_coverage": "moderate", "no_such_grain": "moderate"}
#: the kinds only the dictionary decides: their words are the answerable questions' own (a month, a measure)
SKILLS = ("decline",)
PROOF_RULE = (
    "The vocabulary is every word of the spec: table and column names split at underscores, categorical values, "
    "text types, the business words of semantics (table names and descriptions, column words, descriptions, units and "
    "value meanings, measures, terms, synonyms, currency), the "
    "pack's name and description; each lowercased, with its singular. A concept is asked about only when none of "
    "its terms is a vocabulary word, begins one, or (terms of four letters or more) occurs inside one. A forecast "
    "asks for a month after the last date the time column can hold; a cause or advice is asked only when no "
    "vocabulary word records a reason or a plan. A period the data does not cover is a month before the first "
    "date the time column can hold (the dictionary states the span each table covers); a time of day is asked "
    "only of a table whose time column is a date and which has no date-and-time column. Declining is the correct "
    "answer; any SQL is wrong."
)
PERSONS = frozenset({"customer", "user", "client", "member", "patient", "student", "employee", "subscriber",
                     "buyer", "person", "contact", "guest", "passenger", "player", "account", "shopper"})


@dataclass(frozen=True)
class Unanswerable:
    """One question to decline: its identity, wording, kind, the reason in words and its proof."""

    key: str
    wording: Wording
    kind: str  # a key of REASONS
    reason: str  # why no SQL answers it, in a sentence
    concept: str
    terms: tuple[str, ...]  # searched in the vocabulary, none found


@dataclass(frozen=True)
class _Anchor:
    """What the questions are about: a table of events, its measure and time column, the months it covers."""

    table: str
    column: str | None
    time_column: str | None
    months: tuple[dt.date, ...]
    last_day: dt.date | None  # the last date the time column can hold


def tokens(text: str) -> set[str]:
    """The lowercased words of ``text`` (split at anything but letters and digits, underscores included),
    each with its singular."""
    out = set()
    for word in re.split(r"[^0-9a-z]+", text.lower()):
        if word:
            out |= {word, singular_of(word)}
    return out


def vocabulary(spec: Spec) -> frozenset[str]:
    """Every word the spec gives its data (:data:`PROOF_RULE`)."""
    texts = [spec.name, spec.description or ""]
    for t in spec.tables:
        texts.append(t.name)
        for c in t.columns:
            texts += [c.name, c.text_type or "", *c.choices]
    sem = spec.semantics
    texts += [f"{n.singular} {n.plural}" for _, n in sem.tables]
    texts += [f"{ref} {word}" for ref, word in sem.columns]
    texts += [f"{m.name} {m.table} {m.column or ''}" for m in sem.measures]
    texts += [f"{word} {' '.join(others)}" for word, others in sem.synonyms]
    texts.append(sem.currency or "")
    texts += [n.description or "" for _, n in sem.tables]
    texts += [f"{note.description or ''} {note.unit or ''} " + " ".join(f"{v} {meaning}" for v, meaning in note.values)
              for _, note in sem.notes]
    texts += [m.description or "" for m in sem.measures]
    texts += [f"{term} {meaning}" for term, meaning in sem.terms]
    for t in spec.tables:  # the words questions would use for them
        texts += [sem.table(t.name).plural] + [sem.column(t.name, c.name) for c in t.columns]
    return frozenset(w for text in texts for w in tokens(text))


def found(terms: tuple[str, ...], words: frozenset[str]) -> list[str]:
    """The vocabulary words that match any of ``terms`` (:data:`PROOF_RULE`); empty: none does."""
    return sorted(w for w in words for t in terms
                  if w == t or w.startswith(t) or (len(t) >= 4 and t in w))


# concept, terms, whether it needs sales-like events (SALES), people (PERSONS) or an amount ("money": {m} must be one),
# and question templates ({m}: the measure, {many}/{one}: the events, {person}/{persons}, {when}: a month; {money} and
# {pct}: how an amount or a share is asked for, as the answerable questions ask it, so that no ending tells the
# questions to decline apart)
MEASURES = (
    ("profit", ("profit", "cost", "cogs", "margin", "expense", "markup"), "money",
     ("What was the profit in {when}?{money}", "How much profit did the business make in {when}?{money}",
      "What was the profit margin in {when}?{pct}")),
    ("discount", ("discount", "coupon", "promo", "markdown", "voucher", "rebate"), "sales",
     ("How much was given away in discounts on {many} in {when}?{money}", "What was the total discount on {many} in {when}?{money}",
      "In {when}, how much discount did {many} receive?{money}")),
    ("tax", ("tax", "vat", "gst", "duty", "levy"), "money",
     ("How much tax did the business pay in {when}?{money}", "What was the tax bill for {when}?{money}",
      "How much of the {m} in {when} went to tax?{money}")),
    ("exchange rate", ("exchange", "fx", "forex", "conversion", "yen", "jpy"), "money",
     ("What was the {m} of {when} in Japanese yen? Answer to 2 decimal places.", "Convert the {m} of {when} to yen at that month's rate. Answer to 2 decimal places.",
      "At the exchange rates of the time, what was the {m} of {when} worth in yen? Answer to 2 decimal places.")),
    ("shipping cost", ("shipping", "freight", "postage", "carrier", "ship", "courier"), "sales",
     ("What did shipping the {many} of {when} cost?{money}", "How much was spent on shipping {many} in {when}?{money}",
      "In {when}, what were the shipping costs of {many}?{money}")),
)
ATTRIBUTES = (
    ("age", ("age", "birth", "born", "dob", "birthday"), "persons",
     ("What is the average age of {persons}? Answer to 2 decimal places.", "How old is the typical {person}?",
      "What share of {persons} are under 30 years old?{pct}")),
    ("gender", ("gender", "sex"), "persons",
     ("What share of {persons} are women?{pct}", "How many {persons} are men?",
      "Break down the {persons} by gender. Give each gender, then its number of {persons}.")),
    ("rating", ("rating", "review", "score", "satisfaction", "star", "nps", "feedback"), "sales",
     ("What was the average customer rating of {many} in {when}? Answer to 2 decimal places.", "How satisfied were customers with the {many} "
      "of {when}, on average? Answer to 2 decimal places.", "What share of {many} in {when} got a five-star review?{pct}")),
    ("delivery time", ("delivery", "delivered", "shipped", "shipping", "fulfil", "arrival", "arrive", "dispatch"),
     "sales",
     ("How many days on average did {many} of {when} take to arrive? Answer to 2 decimal places.", "What was the average delivery time of "
      "{many} in {when}? Answer to 2 decimal places.", "How long did {many} placed in {when} take to be delivered, on average? Answer in days, to 2 decimal places.")),
)
ENTITIES = (
    ("suppliers", ("supplier", "vendor", "manufacturer", "procurement", "wholesale"), "",
     ("How many suppliers does the business buy from?", "Which supplier was paid the most in {when}? Give the supplier, then the amount paid.{money}",
      "List the suppliers with their number of deliveries. Give each supplier, then its number of deliveries, most first.")),
    ("employees", ("employee", "staff", "salesperson", "seller", "agent", "rep", "cashier", "worker", "manager"), "",
     ("How many employees did the business have in {when}?", "Which employee brought in the most {m} in {when}? Give the employee, then the {m}.{money}",
      "Who on the staff was paid the most in {when}? Give the person, then the pay.{money}")),
    ("warehouses", ("warehouse", "inventory", "stock", "depot", "storage"), "sales",
     ("How many units were in stock at the end of {when}?", "Which warehouse shipped the most {many} in {when}?",
      "How many warehouses does the business run?")),
    ("marketing campaigns", ("campaign", "marketing", "advert", "utm", "ad", "ads"), "",
     ("Which marketing campaign brought in the most {m} in {when}? Give the campaign, then its {m}.{money}", "How much {m} came from email campaigns in "
      "{when}?{money}", "What did the marketing campaigns of {when} cost?{money}")),
    ("stores", ("store", "branch", "shop", "outlet", "location", "site", "franchise"), "sales",
     ("Which store had the highest {m} in {when}? Give the store, then its {m}.{money}", "How many stores made a sale in {when}?",
      "What was the {m} of the flagship store in {when}?{money}")),
)
SALES = frozenset({"order", "sale", "purchase", "transaction", "booking", "invoice", "checkout", "basket", "receipt"})
REASON_TERMS = ("reason", "cause", "why", "explanation", "comment", "note")
PLAN_TERMS = ("plan", "target", "budget", "goal", "forecast", "strategy", "recommendation")


def _anchor(spec: Spec, key: AnswerKey) -> _Anchor | None:
    """The events the questions are about: the first curve's table, else the first waterfall's, else the first
    table with a date column."""
    for c in key.curves:
        col = spec.table(c.table).column(c.time_column)
        return _Anchor(c.table, c.column, c.time_column, c.months, col.end)
    for w in key.waterfalls:
        col = spec.table(w.table).column(w.period_column)
        return _Anchor(w.table, w.amount_column, w.period_column, w.months, col.end)
    for t in spec.tables:
        times = [c for c in t.columns if c.type in ("date", "datetime")]
        amounts = [c for c in t.columns if c.type == "float"]
        if times:
            col = times[0]
            first = dt.date(col.start.year, col.start.month, 1)
            months = tuple(m for m in (add_months(first, i) for i in range(120)) if m <= col.end)
            return _Anchor(t.name, amounts[0].name if amounts else None, col.name, months, col.end)
    return None


def derive(spec: Spec, key: AnswerKey) -> list[Unanswerable]:
    """Every question to decline the spec allows (each proved: none of its concept's terms is a word of the spec),
    in a seeded order that takes each reason in turn."""
    words = vocabulary(spec)
    anchor = _anchor(spec, key)
    sem = spec.semantics
    if anchor is None:
        return []
    w = Words(sem, anchor.table)
    m = w.measure(anchor.column) if anchor.column else f"number of {w.many}"
    months = anchor.months or ()
    persons = [t.name for t in spec.tables if singular_of(sem.table(t.name).singular.split()[-1]) in PERSONS]
    pools: dict[str, list[Unanswerable]] = {kind: [] for kind in REASONS}

    def when(concept: str, n: int) -> tuple[str, str]:
        """(a month of the data as words, as the key's text) for the ``n``-th question of ``concept``."""
        if not months:
            return "the whole period", "all"
        month = months[stable_int("unanswerable", spec.seed, concept, n) % len(months)]
        return month_words(month), f"{month:%Y-%m}"

    decimals = spec.table(anchor.table).column(anchor.column).decimals if anchor.column else 2
    register = {"money": w.rounded(decimals), "pct": " Answer in percent, to 2 decimal places."}

    def add(kind: str, concept: str, terms: tuple[str, ...], texts: tuple[str, ...], reason: str,
            fill: dict[str, str]) -> None:
        if found(terms, words):
            return
        for n, text in enumerate(texts):
            said, tag = when(concept, n)
            values = {"m": m, "many": w.many, "one": w.one, "when": said, **register, **fill}
            pools[kind].append(Unanswerable(f"{kind}:{concept}:{n}:{tag}", Wording((text.format(**values),)),
                                            kind, reason.format(**values), concept, terms))

    sales = singular_of(w.one.split()[-1]) in SALES
    person = sem.table(persons[0]) if persons else None
    fill = {"person": person.singular, "persons": person.plural} if person else {}
    for kind, concepts in (("no_such_measure", MEASURES), ("no_such_attribute", ATTRIBUTES),
                           ("no_such_entity", ENTITIES)):
        for concept, terms, needs, texts in concepts:
            if (needs == "sales" and not sales) or (needs == "persons" and not person) or (
                    needs == "money" and not anchor.column):  # a count of rows converted to yen is no question
                continue
            of = " of {persons}" if needs == "persons" else " of {many}" if needs == "sales" else ""
            reason = {"no_such_measure": f"no table, column or business word of this schema records {concept} or "
                                         "what it is made of",
                      "no_such_attribute": f"the schema records no {concept}{of}, nor anything it could be derived "
                                           "from",
                      "no_such_entity": f"the schema has no {concept}: no table, column or business word names "
                                        "them"}[kind]
            add(kind, concept, terms, texts, reason, fill)
    if anchor.last_day is not None and anchor.column:
        after = add_months(dt.date(anchor.last_day.year, anchor.last_day.month, 1), 1)
        ahead = month_words(after)
        texts = (f"What will the {{m}} be in {ahead}?{{money}}", f"Forecast the {{m}} for {ahead}.{{money}}",
                 f"How much {{m}} should we expect in {ahead}?{{money}}")
        add("beyond_sql", "forecast", ("forecast", "prediction", "projection", "estimate"), texts,
            f"{ahead} lies after the last date the data holds ({anchor.last_day.isoformat()}); a forecast is a "
            "model's guess, not the result of a query", {})
    if len(months) >= 2:
        first, second = months[0], months[1]
        texts = (f"Why did the {{m}} change from {month_words(first)} to {month_words(second)}?",
                 f"What caused the {{m}} of {month_words(second)} to differ from {month_words(first)}?",
                 f"Explain why the {{m}} moved between {month_words(first)} and {month_words(second)}.")
        add("beyond_sql", "cause", REASON_TERMS, texts, "a cause is not a value any column holds; a query can show that the {m} changed, not why", {})
    texts = ("What should the business do to raise its {m} next quarter?",
             "Which strategy would grow the {m} fastest?",
             "Recommend how to increase the {m} of {many}.")
    add("beyond_sql", "advice", PLAN_TERMS, texts, "advice is a judgement, not a value any column holds or a query computes", {})
    _dictionary_kinds(spec, anchor, w, m, register, pools)
    for kind in pools:
        pools[kind].sort(key=lambda u: stable_int("unanswerable-order", spec.seed, u.key))
    data = [u for pair in zip(pools["no_such_measure"], pools["no_such_attribute"]) for u in pair]
    data += pools["no_such_measure"][len(data) // 2:] + pools["no_such_attribute"][len(data) // 2:]
    decided = [u for pair in zip(pools["no_coverage"], pools["no_such_grain"]) for u in pair]
    decided += pools["no_coverage"][len(decided) // 2:] + pools["no_such_grain"][len(decided) // 2:]
    # the dictionary's kinds in four turns of seven: their words are the answerable questions' own, so no word of
    # a question tells them apart; the others are asked in words no answerable question uses
    queues = [decided[0::4], data, decided[1::4], pools["no_such_entity"], decided[2::4], pools["beyond_sql"],
              decided[3::4]]
    out: list[Unanswerable] = []
    depth = 0
    while any(depth < len(q) for q in queues):
        out += [q[depth] for q in queues if depth < len(q)]
        depth += 1
    return out


def _dictionary_kinds(spec: Spec, anchor: _Anchor, w: Words, m: str, register: dict[str, str],
                      pools: dict[str, list[Unanswerable]]) -> None:
    """The questions to decline that only the dictionary decides, in the answerable questions' own words: a month
    before the first date the time column can hold (``no_coverage``: a month's total, its count, its change, a
    ranking of the months of the year before, its distance from that year's average month, its groups ranked), and a
    time of day of a table dated by day only (``no_such_grain``)."""
    table = spec.table(anchor.table)
    time = table.column(anchor.time_column) if anchor.time_column else None
    if time is None or time.start is None:
        return
    said = w.col(anchor.time_column)
    first = dt.date(time.start.year, time.start.month, 1)
    decimals = table.column(anchor.column).decimals if anchor.column else 0
    tail = w.rounded(decimals)
    shares = next((g for g in spec.group_shares if g.table == anchor.table), None)
    year = f"{first.year - 1}"  # a whole year before the data begins
    for k in range(2, 14):  # the year before the data begins, each month and the one after it both uncovered
        month = add_months(first, -k)
        nxt, mon = add_months(month, 1), month_words(month)
        if not anchor.column:
            wording = phrasing.period_rows(w, anchor.time_column, month)
        else:  # the answerable questions' wordings, short and long alike
            forms = [phrasing.period_total(w, anchor.column, month, decimals),
                     phrasing.period_rows(w, anchor.time_column, month),
                     phrasing.month_over_month(m, month, nxt, tail),
                     phrasing.month_ranking(m, year, tail),
                     phrasing.versus_average(m, year, 12, mon, tail)]
            if shares is not None:
                g = w.col(shares.group_column)
                forms.append(phrasing.group_ranking(g, plural_of(g), m, mon, tail,
                                                    phrasing.recorded(spec, shares.table, shares.group_column)))
            wording = forms[k % len(forms)]
        pools["no_coverage"].append(Unanswerable(
            f"no_coverage:{anchor.table}:{month:%Y-%m}", wording, "no_coverage",
            f"{mon} is before {time.start.isoformat()}, the first date the {said} can hold: the data does not "
            "cover it", "coverage", ()))
    if time.type != "date" or any(c.type == "datetime" for c in table.columns):
        return
    money = register["money"] if anchor.column else ""
    texts = (f"In which hour of the day were the most {w.many} placed in {{when}}? Give the hour, from 0 to 23.",
             f"What was the {m} of the {w.many} placed before noon in {{when}}?{money}",
             f"How many {w.many} in {{when}} came in after 6 pm?",
             f"List the hours of the day in {{when}} with the {m} of the {w.many} placed in each, busiest hour "
             f"first. Give each hour, from 0 to 23, then its {m}.{money}",
             f"How much higher or lower was the {m} of the {w.many} placed in the morning than of those placed in "
             f"the afternoon in {{when}}? Give the morning's figure minus the afternoon's (negative when lower)."
             f"{money}")
    for n, month in enumerate(anchor.months or ()):
        pools["no_such_grain"].append(Unanswerable(
            f"no_such_grain:{anchor.table}:{n % len(texts)}:{month:%Y-%m}",
            Wording((texts[n % len(texts)].format(when=month_words(month)),)), "no_such_grain",
            f"the {said} is a calendar date with no time of day, and no column of the {w.many} holds one",
            "time of day", ()))


def how_many(spec: Spec, answerable: int) -> int:
    """The unanswerable questions to ship beside ``answerable`` ones: their share of the whole pack is
    ``questions.unanswerable`` (rounded half up, at least one when the share is above 0)."""
    share = spec.questions.unanswerable
    if share <= 0 or answerable == 0:
        return 0
    return max(1, int(share * answerable / (1 - share) + 0.5))


def proof(u: Unanswerable, words: frozenset[str]) -> dict:
    """The manifest's record of why ``u`` is unanswerable: the concept, the terms searched and that none matched.
    Raises AssertionError when one does (derive never offers such a question)."""
    matched = found(u.terms, words)
    if matched:
        raise AssertionError(f"{u.key}: the spec's words {matched} may answer it")
    return {"key": u.key, "kind": u.kind, "concept": u.concept, "terms": list(u.terms), "matched": matched,
            "reason": u.reason}


SCORING_RULE = ("on a question with answerable: false, declining is correct and any SQL is wrong, even SQL that "
                "runs; README.md, 'Scoring', gives the penalty score")


def manifest_section(spec: Spec, key: AnswerKey, chosen: list[tuple[str, str]]) -> dict:
    """The manifest's ``unanswerable``: the share asked for, how many ship by kind, and each one's proof
    (``chosen``: the shipped questions' (id, key))."""
    words = vocabulary(spec)
    by_key = {u.key: u for u in derive(spec, key)}
    proofs = [{"id": qid, **proof(by_key[k], words)} for qid, k in chosen]
    kinds = {kind: sum(p["kind"] == kind for p in proofs) for kind in REASONS}
    return {"share": spec.questions.unanswerable, "count": len(proofs), "by_kind": kinds,
            "vocabulary_words": len(words), "rule": PROOF_RULE, "scoring": SCORING_RULE, "split": "dev",
            "proofs": proofs}
