"""A transliterator of evalpack's own question templates: how much of a pack a page of regular expressions
scores, reading only each question's text and evidence (no schema, no dictionary, no data, no gold SQL).

    python benchmarks/transliterate.py PACK [--guess generic|evalpack] [--json out.json]

Issue 52 asks that this score at most 10% on a pack from a spec we did not tune on. The rules are the question
templates of evalpack/questions/ read backwards: each recognised question becomes the SQL its template was made
from, with the identifiers guessed from the words. ``--guess generic`` makes the guesses anyone would (words
joined by underscores: "order date" -> order_date, "total amount of orders" -> amount of orders, a month by a
column named after the table: order_date); ``--guess evalpack`` inverts evalpack's own default words
(evalpack.spec.semantics: "order date" <- ordered_at, the key of a parent "customer" <- customer_id), the
strongest guess a reader of this repository can make without the pack's schema. A question no rule recognises is
answered with a constant; a question naming a concept no template of the answerable families uses (tax, a
forecast, an hour of the day...) is declined, the phrases read from the templates of the questions to decline.
The candidates are scored by `evalpack score` (every rotation, the pack's own comparison rule).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MONTHS = {m: i for i, m in enumerate(["January", "February", "March", "April", "May", "June", "July", "August",
                                      "September", "October", "November", "December"], 1)}
MONTH = r"(January|February|March|April|May|June|July|August|September|October|November|December) (\d{4})"
# the phrases of the questions to decline's templates (evalpack/questions/unanswerable.py), as a reader of the
# templates would collect them
DECLINE = re.compile(r"\b(tax|profit|discount|yen|shipping|age|women|men|gender|rating|review|delivered|arrive|"
                     r"supplier|employee|staff|stock|warehouse|campaign|store had|flagship|forecast|will the|"
                     r"expect|why|caused|explain|strategy|recommend|should the business|hour of the day|noon|6 pm)\b",
                     re.IGNORECASE)
PARTICIPLE_OF = {"order": "ordered", "creation": "created", "update": "updated", "sign-up": "signed_up",
                 "sale": "sold", "shipping": "shipped", "payment": "paid", "booking": "booked", "posting": "posted",
                 "registration": "registered", "purchase": "purchased", "invoice": "invoiced", "delivery": "delivered",
                 "start": "started", "end": "ended"}


def snake(text: str) -> str:
    return "_".join(re.findall(r"[a-z0-9]+", text.lower()))


def singular(plural: str) -> str:
    return plural[:-3] + "y" if plural.endswith("ies") else plural[:-1] if plural.endswith("s") else plural


class Guess:
    """Identifiers from words, generically or by inverting evalpack's default words."""

    def __init__(self, how: str) -> None:
        self.how = how

    def date_column(self, table: str, said: str | None = None) -> str:
        noun = said.removesuffix(" date") if said else singular(table.split("_")[-1])
        if self.how == "evalpack" and noun in PARTICIPLE_OF:
            return f"{PARTICIPLE_OF[noun]}_at"
        return f"{snake(noun)}_date"

    def measure(self, words: str) -> tuple[str, str]:
        """(column, table) of a measure's words: "total amount of orders" -> (amount, orders)."""
        found = re.fullmatch(r"total (.+) of (.+)", words)
        if found:
            return snake(found.group(1)), snake(found.group(2))
        return "amount", "orders"  # a named measure ("revenue"): the commonest guess

    def key(self, parent: str) -> str:
        return f"{snake(singular(parent))}_id"


def month_of(name: str, year: str) -> dt.date:
    return dt.date(int(year), MONTHS[name], 1)


def next_month(day: dt.date, n: int = 1) -> dt.date:
    i = day.year * 12 + day.month - 1 + n
    return dt.date(i // 12, i % 12 + 1, 1)


def window(column: str, start: dt.date, end: dt.date) -> str:
    return f"{column} >= DATE '{start}' AND {column} < DATE '{end}'"


def decimals_of(text: str) -> int:
    if "to the cent" in text:
        return 2
    found = re.search(r"to (\d+) decimal places", text)
    return int(found.group(1)) if found else 2


def period(text: str) -> tuple[dt.date, dt.date] | None:
    """The period a question names: a month, a quarter, a half-year, a year or a span of months."""
    if found := re.search(r"from " + MONTH + r" through " + MONTH, text):
        return month_of(*found.group(1, 2)), next_month(month_of(*found.group(3, 4)))
    if found := re.search(r"\bQ([1-4]) (\d{4})", text):
        first = dt.date(int(found.group(2)), 3 * int(found.group(1)) - 2, 1)
        return first, next_month(first, 3)
    if found := re.search(r"\bH([12]) (\d{4})", text):
        first = dt.date(int(found.group(2)), 6 * int(found.group(1)) - 5, 1)
        return first, next_month(first, 6)
    if found := re.search(MONTH, text):
        first = month_of(*found.group(1, 2))
        return first, next_month(first)
    if found := re.search(r"\bin (\d{4})\b", text):
        return dt.date(int(found.group(1)), 1, 1), dt.date(int(found.group(1)) + 1, 1, 1)
    return None


def transliterate(text: str, guess: Guess) -> str | None:
    """The SQL the template of ``text`` was made from, or None (no rule; decline when a decline phrase shows)."""
    if DECLINE.search(text):
        return None
    d = decimals_of(text)
    span = period(text)
    measure = re.search(r"\b(?:the|much|more|largest|highest|cumulative|year-to-date|monthly) (total [a-z ]+? of "
                        r"[a-z ]+?|revenue|sales)\b(?= in| for| of| from| change| between| had| came| was|,|\?|\.)",
                        text)
    column, table = guess.measure(measure.group(1)) if measure else ("amount", "orders")
    date = guess.date_column(table)
    if span is None:
        return f"SELECT ROUND(SUM({column}), {d}) FROM {table}"
    start, end = span
    where = window(date, start, end)
    if re.search(r"\b(How many|Count the|number of)\b", text) and not measure:
        noun = re.search(r"(?:How many|Count the|number of) ([a-z ]+?)(?: have| were| whose| in| with|\?|\.)", text)
        table = snake(noun.group(1)) if noun else table
        said = re.search(r"whose ([a-z -]+ date) falls", text)
        return f"SELECT COUNT(*) FROM {table} WHERE {window(guess.date_column(table, said.group(1) if said else None), start, end)}"
    if "minus" in text and "figure" in text:  # a change from one month to the next
        later = start
        earlier = next_month(later, -1)
        return (f"SELECT ROUND((SELECT SUM({column}) FROM {table} WHERE {window(date, later, next_month(later))}) - "
                f"(SELECT SUM({column}) FROM {table} WHERE {window(date, earlier, later)}), {d})")
    if re.search(r"\b(mean|average) ", text) and "per" in text:
        return f"SELECT ROUND(SUM({column}) / COUNT(*), {d}) FROM {table} WHERE {where}"
    group = re.search(r"the ([a-z]+) ([a-z ]+?) (?:channel|segment)?\b", text)
    if re.search(r"\b(List|Rank|Order)\b", text):
        return (f"SELECT strftime({date}, '%Y-%m') AS month, ROUND(SUM({column}), {d}) AS total FROM {table} "
                f"WHERE {where} GROUP BY 1 ORDER BY total DESC")
    if group and re.search(r"from the ([a-z]+) (channel|segment)", text):
        label, col = re.search(r"from the ([a-z]+) ([a-z]+)", text).group(1, 2)
        return f"SELECT ROUND(SUM({column}), {d}) FROM {table} WHERE {col} = '{label}' AND {where}"
    return f"SELECT ROUND(SUM({column}), {d}) FROM {table} WHERE {where}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("--guess", choices=("generic", "evalpack"), default="evalpack")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    guess = Guess(args.guess)
    records = [json.loads(line) for line in (args.pack / "questions.jsonl").read_text().splitlines() if line.strip()]
    seen = [{"id": r["id"], "question": r["question"], "evidence": r.get("evidence")} for r in records]  # all it reads
    with tempfile.TemporaryDirectory() as tmp:
        candidates = Path(tmp) / "candidates.jsonl"
        lines = []
        for q in seen:
            sql = transliterate(f"{q['question']} {q['evidence'] or ''}", guess)
            lines.append({"id": q["id"], "sql": sql or "SELECT 0"} if sql or not DECLINE.search(q["question"])
                         else {"id": q["id"], "declined": True})
        candidates.write_text("".join(json.dumps(line) + "\n" for line in lines))
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(args.pack), "--candidates",
                        str(candidates), "--json", str(report)], cwd=ROOT, capture_output=True, text=True)
        scored = json.loads(report.read_text())
    questions = scored["questions"]
    answerable = [q for q in questions if q.get("answerable", True) is not False]
    declines = [q for q in questions if q.get("answerable") is False]
    right = sum(q["status"] == "correct" for q in answerable)
    declined_right = sum(q["status"] == "correct" for q in declines)
    out = {"pack": str(args.pack), "guess": args.guess, "questions": len(questions),
           "answerable": len(answerable), "answerable_correct": right,
           "answerable_score": round(right / max(1, len(answerable)), 4),
           "overall_correct": right + declined_right,
           "overall_score": round((right + declined_right) / max(1, len(questions)), 4),
           "declines": len(declines), "declines_caught": declined_right}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
