"""Row generation alone (plan every rotation, produce every table's record batches, write nothing), this
checkout against an earlier revision, side by side.

    python benchmarks/generation.py                          # 100x, against 3861bd1 (before issue 19)
    python benchmarks/generation.py --scales 1 100 --rounds 5 --revision HEAD~3

Each side runs in its own process with the revision's code first on PYTHONPATH (`git archive`, as in
build_vs_revision.py); the rounds alternate which side goes first. The spec is benchmarks/build.py's
Misata-format retail spec scaled by each factor, which declares no planned keys: the question is what
issue 19 costs a spec that does not use it. `--spec` measures another spec on this checkout only
(e.g. tests/specs/shop_joins.yaml scaled, with `segment_shares` and `per_parent`) against the same
spec with those two keys removed, to show what planned keys cost where they are used. `--traps` does the same for
a spec that declares traps (schemas/retail.yaml) against itself without them (issue 53: within 15%).
Each run also reports the generating process's peak resident memory.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from build import SPEC  # noqa: E402
from build_vs_revision import export  # noqa: E402
from scaled import scaled_spec  # noqa: E402

BEFORE_ISSUE_19 = "3861bd1"
GENERATE = r"""
import resource, sys, time
from evalpack.data.generate import table_batches
from evalpack.data.plan import plan_pack
from evalpack.spec.reader import load_spec
started = time.perf_counter()
spec = load_spec(sys.argv[1])
rows = 0
for plan in plan_pack(spec):
    for table in spec.tables:
        for batch in table_batches(spec, plan, table.name):
            rows += batch.num_rows
print(f"{time.perf_counter() - started:.3f} {rows} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}")
"""


PEAK_MB: dict[str, list[int]] = {}


def generate(code: Path, spec: Path) -> tuple[float, int]:
    """(seconds, rows) of generating every rotation of ``spec`` with the evalpack at ``code``; its peak memory in
    MB goes to PEAK_MB under the spec's path."""
    out = subprocess.run([sys.executable, "-c", GENERATE, str(spec)], env={"PYTHONPATH": str(code), "PATH": ""},
                         capture_output=True, text=True, check=True)
    seconds, rows, peak = out.stdout.split()
    PEAK_MB.setdefault(str(spec), []).append(int(peak))
    return float(seconds), int(rows)


def without_traps(spec: Path, into: Path) -> Path:
    """``spec`` without ``traps`` (and the dictionary entries of the columns its siblings add)."""
    data = yaml.safe_load(spec.read_text())
    traps = data.pop("traps", {}) or {}
    added = {s["column"] for s in traps.get("siblings", [])}
    columns = (data.get("semantics") or {}).get("columns") or {}
    for ref in added:
        columns.pop(ref, None)
    out = into / f"{spec.stem}_no_traps.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def without_planned_keys(spec: Path, into: Path) -> Path:
    """``spec`` without ``segment_shares`` and ``per_parent``."""
    data = yaml.safe_load(spec.read_text())
    data.pop("segment_shares", None)
    data.pop("per_parent", None)
    out = into / f"{spec.stem}_plain.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def compare(sides: dict[str, tuple[Path, Path]], rounds: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds per side over ``rounds`` rounds, alternating which side runs first, and the rows each made."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    rows: dict[str, int] = {}
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds, rows[name] = generate(*sides[name])
            times[name].append(seconds)
    return times, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revision", default=BEFORE_ISSUE_19)
    parser.add_argument("--scales", type=int, nargs="+", default=[100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spec", type=Path, help="a spec with planned keys, measured against itself without them")
    parser.add_argument("--traps", type=Path, help="a spec with traps, measured against itself without them")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalpack-gen-") as tmp:
        work = Path(tmp)
        for scale in args.scales:
            if args.traps:
                spec = scaled_spec(args.traps, scale, work / f"x{scale}")
                sides = {"with traps": (ROOT, spec), "without traps": (ROOT, without_traps(spec, work))}
            elif args.spec:
                spec = scaled_spec(args.spec, scale, work / f"x{scale}")
                sides = {"planned keys": (ROOT, spec), "without them": (ROOT, without_planned_keys(spec, work))}
            else:
                spec = scaled_spec(SPEC, scale, work / f"x{scale}")
                rev = work / "rev"
                if not rev.exists():
                    rev.mkdir()
                    export(args.revision, rev)
                tree = rev / "tree"
                sides = {"this checkout": (ROOT, spec), args.revision: (tree, spec)}
            times, rows = compare(sides, args.rounds)
            first, second = (statistics.median(times[name]) for name in sides)
            for name in sides:
                runs = ", ".join(f"{t:.2f}" for t in times[name])
                peak = max(PEAK_MB[str(sides[name][1])])
                print(f"{scale:>4}x | {name:>14} | {rows[name]:>11,} rows | median {statistics.median(times[name]):7.2f} s "
                      f"| runs {runs} | peak {peak:,} MB")
            print(f"{scale:>4}x | ratio {list(sides)[0]} / {list(sides)[1]}: {first / second:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
