"""How well a rule on a question record's form tells the questions to decline from the answerable ones.

    python benchmarks/surface_rules.py PACK [PACK ...] [--json out.json]

Issue 52: no rule on the record's form (fields present, evidence present, length, fixed phrases) may separate
them better than chance plus 10 points. Each rule below reads only what a model is given of a record (its
`question` and `evidence`, and which fields it has) and says "decline" or "answer"; its score is the balanced
accuracy (the mean of the share of declines it finds and the share of answerable questions it leaves), so
chance is 0.5 whatever the mix. Rules tried: each field's presence, evidence present, length above each
threshold (and below), the first word, each ending phrase ("to the cent", "decimal places", "Give each ...",
"?" or "."), each of both signs. The best rule of each pack and over all packs together is reported.

A content detector (a list of the concepts the questions to decline ask about: tax, a forecast, an hour of the
day) is reported apart, as `content_keywords`: it is not a rule on the form, and it tells the kinds asked in
words no answerable question uses from the rest, which is what the kinds only the dictionary decides
(no_coverage, no_such_grain) are for.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from transliterate import DECLINE  # noqa: E402  (the decline phrases read from the templates)

ENDINGS = ("to the cent", "decimal places", "in percent", "Give each", "as YYYY-MM", "then its", "(negative",
           "Count only", "?", ".")


def rules(records: list[dict]) -> dict[str, Callable[[dict], bool]]:
    """Every rule tried, by name: True means "decline"."""
    out: dict[str, Callable[[dict], bool]] = {}
    for field in ("question", "evidence"):  # the fields a model is given (serve's list_questions, the exports)
        out[f"has field {field}"] = lambda r, f=field: r.get(f) is not None
    out["evidence present"] = lambda r: bool(r.get("evidence"))
    for n in range(20, 260, 5):
        out[f"length > {n}"] = lambda r, n=n: len(r["question"]) > n
    for word in sorted({r["question"].split()[0] for r in records}):
        out[f"starts with {word}"] = lambda r, w=word: r["question"].split()[0] == w
    for ending in ENDINGS:
        out[f"holds {ending!r}"] = lambda r, e=ending: e in r["question"]
    out["ends with ?"] = lambda r: r["question"].rstrip().endswith("?")
    return out


def balanced(rule: Callable[[dict], bool], declines: list[dict], answerable: list[dict]) -> float:
    found = sum(rule(r) for r in declines) / len(declines)
    left = sum(not rule(r) for r in answerable) / len(answerable)
    return (found + left) / 2


def best(records: list[dict]) -> dict:
    declines = [r for r in records if r["answerable"] is False]
    answerable = [r for r in records if r["answerable"] is not False]
    scored = []
    for name, rule in rules(records).items():
        score = balanced(rule, declines, answerable)
        scored.append((max(score, 1 - score), name if score >= 0.5 else f"not ({name})"))
    scored.sort(reverse=True)
    keywords = balanced(lambda r: bool(DECLINE.search(r["question"])), declines, answerable)
    return {"declines": len(declines), "answerable": len(answerable), "best_form_rule": scored[0][1],
            "best_form_rule_balanced_accuracy": round(scored[0][0], 4),
            "next_form_rules": [(name, round(score, 4)) for score, name in scored[1:4]],
            "content_keywords_balanced_accuracy": round(keywords, 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packs", type=Path, nargs="+")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    out, every = {}, []
    for pack in args.packs:
        records = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines() if line.strip()]
        # what a model is given of each record: its question, its evidence and which fields it has (no gold, no
        # labels: kind, answerable and unanswerable_reason are dropped, as serve and the exports drop them)
        shown = [{"question": r["question"], "evidence": r.get("evidence"), "answerable": r.get("answerable")}
                 for r in records]
        out[pack.name] = best(shown)
        every += shown
    out["all packs"] = best(every)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
