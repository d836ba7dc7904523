"""A blind reading of a pack: what a reader is given (questions, the dictionary, a read-only database), and the
score of what it answered.

    python benchmarks/blind_kit.py kit PACK KIT [--size 66] [--seed 52] [--no-conventions]   # the reader's kit
    python benchmarks/blind_kit.py score PACK KIT                         # score KIT/answers.jsonl

`kit` writes into KIT a stratified sample of the pack's questions (two of every kind, then at random up to
--size; `questions.json` holds id, question and evidence, nothing else), the pack's `dictionary.md` and
`dictionary.json`, and `data.duckdb` holding the first rotation's tables. The reader (a person or an agent
briefed to read nothing else) writes `answers.jsonl`, one {"id", "sql"} or {"id", "declined": true} per
question. `score` runs `evalpack score` on the pack (every rotation) and prints, for the sampled questions,
the count per status and every miss with its gold SQL, expected answer and the reader's answer, for the miss
to be classified (reader's mistake, two honest readings, wrong gold, scoring too strict).

benchmarks/blind/ holds the run of 2026-12-07 (RESULTS.md has its figures).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def records(pack: Path) -> list[dict]:
    return [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines() if line.strip()]


def without_conventions(kit: Path) -> None:
    """The kit's dictionary without its conventions (the reading "without the conventions shown")."""
    given = json.loads((kit / "dictionary.json").read_text())
    given["conventions"] = []
    (kit / "dictionary.json").write_text(json.dumps(given, indent=1) + "\n")
    text = (kit / "dictionary.md").read_text()
    start = text.index("## Conventions")
    (kit / "dictionary.md").write_text(text[:start] + text[text.index("\n## ", start + 1) + 1:])


def write_kit(pack: Path, kit: Path, size: int, seed: int, conventions: bool = True) -> None:
    rng = random.Random(seed)
    by_kind = collections.defaultdict(list)
    for r in records(pack):
        by_kind[r["kind"]].append(r)
    sample, rest = [], []
    for kind in sorted(by_kind):
        rng.shuffle(by_kind[kind])
        sample += by_kind[kind][:2]
        rest += by_kind[kind][2:]
    rng.shuffle(rest)
    sample += rest[:max(0, size - len(sample))]
    rng.shuffle(sample)
    kit.mkdir(parents=True, exist_ok=True)
    (kit / "questions.json").write_text(json.dumps(
        [{"id": r["id"], "question": r["question"], "evidence": r["evidence"]} for r in sample], indent=1) + "\n")
    for name in ("dictionary.md", "dictionary.json"):
        shutil.copy(pack / name, kit / name)
    if not conventions:
        without_conventions(kit)
    first = sorted((pack / "rotations").iterdir())[0]
    database = kit / "data.duckdb"
    database.unlink(missing_ok=True)
    with duckdb.connect(str(database)) as con:
        for table in sorted((first / "tables").glob("*.parquet")):
            con.execute(f"CREATE TABLE {table.stem} AS SELECT * FROM read_parquet('{table}')")
    print(f"{kit}: {len(sample)} questions, {sum(r['answerable'] is False for r in sample)} to decline, "
          f"{len({r['kind'] for r in sample})} kinds; tables of {first.name}")


def score(pack: Path, kit: Path) -> None:
    sampled = {q["id"] for q in json.loads((kit / "questions.json").read_text())}
    answers = {a["id"]: a for a in map(json.loads, (kit / "answers.jsonl").read_text().splitlines()) if a}
    report = kit / "report.json"
    subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(pack), "--candidates", str(kit / "answers.jsonl"),
                    "--json", str(report)], cwd=ROOT, capture_output=True, text=True)
    scored = [q for q in json.loads(report.read_text())["questions"] if q["id"] in sampled]
    print(dict(collections.Counter(q["status"] for q in scored)), f"of {len(scored)} sampled")
    gold = {r["id"]: r for r in records(pack)}
    for q in scored:
        if q["status"] != "correct":
            r = gold[q["id"]]
            print(f"- {q['id']} {r['kind']} {q['status']}: {r['question']}\n  gold: {r['gold_sql']} -> "
                  f"{r['expected_answer']}\n  reader: {answers.get(q['id'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("kit", "score"))
    parser.add_argument("pack", type=Path)
    parser.add_argument("kit", type=Path)
    parser.add_argument("--size", type=int, default=66)
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--no-conventions", action="store_true", help="leave the dictionary's conventions out")
    args = parser.parse_args(argv)
    if args.step == "kit":
        write_kit(args.pack, args.kit, args.size, args.seed, conventions=not args.no_conventions)
    else:
        score(args.pack, args.kit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
