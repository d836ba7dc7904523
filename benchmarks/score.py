"""Benchmark: score 1,000 candidates on the retail pack (3 rotations); time per candidate per rotation.

    python benchmarks/score.py [--pack PACK] [--candidates 1000] [--json out.json]

Without --pack the retail pack is built into a temporary folder first (not timed). Candidates
are a mix of the gold SQL (correct), a constant, a shifted date window and a query that fails,
spread over the pack's questions (one candidate per question per batch; a batch is one scoring
run, so the 1,000 candidates take ceil(1000 / questions) runs). Reported per candidate per
rotation: the whole scoring run (sandbox set-up, query, comparison) and the query alone. The goal
for scalar questions is under 5 ms per candidate per rotation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalpack.core.scoring import Limits, check_integrity, load_questions, score_pack  # noqa: E402


def variants(question: dict, k: int) -> str:
    """The k-th kind of candidate for ``question``."""
    sql = question["gold_sql"]
    kind = k % 4
    if kind == 0:
        return sql
    if kind == 1:
        return "SELECT 180000.0"
    if kind == 2:
        return sql.replace("2025-01-01", "2025-01-02").replace(">=", ">") if ">=" in sql else sql + " LIMIT 0"
    return sql.replace("SELECT", "SELECT no_such_column,", 1)


def retail_pack(given: str | None, tmp: str) -> Path:
    """The pack ``given``, else schemas/retail.yaml built with 3 rotations into ``tmp`` (its time printed, not
    counted in any figure)."""
    if given:
        return Path(given)
    from evalpack.build import build_pack

    pack = Path(tmp) / "retail"
    started = time.perf_counter()
    build_pack(ROOT / "schemas" / "retail.yaml", pack, rotations=3, jobs=2)
    print(f"built {pack} in {time.perf_counter() - started:.1f}s (not timed below)")
    return pack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", help="an existing pack (default: build schemas/retail.yaml with 3 rotations)")
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the figures as JSON")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="evalpack-bench-") as tmp:
        pack = retail_pack(args.pack, tmp)
        questions = load_questions(pack)
        started = time.perf_counter()
        integrity = check_integrity(pack)
        integrity_seconds = time.perf_counter() - started

        batches: list[dict[str, str]] = []
        made = 0
        while made < args.candidates:
            batch = {}
            for q in questions:
                if made == args.candidates:
                    break
                batch[q["id"]] = variants(q, len(batches) + len(batch))
                made += 1
            batches.append(batch)

        total = query = 0.0
        queries = 0
        per_query: list[float] = []
        statuses = {"correct": 0, "wrong": 0, "declined": 0}
        limits = Limits(threads=args.threads)
        for batch in batches:
            started = time.perf_counter()
            report = score_pack(pack, batch, limits=limits)
            total += time.perf_counter() - started
            query += report["timing"]["query_seconds"]
            queries += report["timing"]["queries"]
            for r in report["questions"]:
                if r["id"] in batch:
                    statuses[r["status"]] += 1
                    per_query += [run["seconds"] for run in r["rotations"].values()]
        rotations = len(report["rotations"])

    figures = {
        "candidates": made,
        "rotations": rotations,
        "scoring_runs": len(batches),
        "queries": queries,
        "statuses": statuses,
        "integrity_check_ms": round(integrity_seconds * 1000, 2),
        "integrity": integrity.status,
        "ms_per_candidate_per_rotation_total": round(total / queries * 1000, 3),
        "ms_per_candidate_per_rotation_query": round(query / queries * 1000, 3),
        "ms_median_query": round(statistics.median(per_query) * 1000, 3),
        "ms_p95_query": round(sorted(per_query)[int(0.95 * (len(per_query) - 1))] * 1000, 3),
        "seconds_total": round(total, 3),
    }
    print(f"{made} candidates x {rotations} rotations = {queries} queries in {len(batches)} scoring runs "
          f"({statuses['correct']} correct, {statuses['wrong']} wrong)")
    print(f"integrity check (re-hash every file): {figures['integrity_check_ms']} ms ({integrity.status})")
    print(f"per candidate per rotation, whole run (sandbox set-up + query + comparison): "
          f"{figures['ms_per_candidate_per_rotation_total']} ms")
    print(f"per candidate per rotation, query alone (parse, run, fetch, under the time limit): "
          f"{figures['ms_per_candidate_per_rotation_query']} ms (median {figures['ms_median_query']} ms, "
          f"p95 {figures['ms_p95_query']} ms)")
    print(f"goal < 5 ms: {'met' if figures['ms_per_candidate_per_rotation_total'] < 5 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
