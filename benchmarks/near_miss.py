"""The near-miss study side by side: evalpack's per-operator table, and misata's figures.

    python benchmarks/near_miss.py

Builds schemas/retail.yaml and schemas/finance.yaml (3 rotations) and prints evalpack's
per-operator survival table for each. Then builds benchmarks/specs/retail_misata.yaml (a spec in
the shapes both tools accept) with both tools, when misata is installed (see build.py), and
prints misata's study beside evalpack's on the operators misata has.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from build import misata_command  # noqa: E402

from evalpack.build import build_pack  # noqa: E402
from evalpack.checks.nearmiss.study import study_markdown  # noqa: E402


def ours(spec: Path, out: Path) -> dict:
    return build_pack(spec, out, rotations=3, jobs=2).near_miss


def theirs(spec: Path, out: Path) -> dict | None:
    misata = misata_command()
    if not misata:
        return None
    subprocess.run([misata, "evalpack", "-c", str(spec), "-o", str(out), "--rotations", "3"], check=True,
                   capture_output=True)
    return json.loads((out / "manifest.json").read_text())["near_miss_study"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="evalpack-nearmiss-") as tmp:
        work = Path(tmp)
        for name in ("retail", "finance"):
            study = ours(ROOT / "schemas" / f"{name}.yaml", work / name)
            print(f"\n## evalpack, schemas/{name}.yaml, 3 rotations\n")
            print(study_markdown(study))
        spec = HERE / "specs" / "retail_misata.yaml"
        mine = ours(spec, work / "ours_misata_format")
        print("\n## evalpack, benchmarks/specs/retail_misata.yaml (Misata format), 3 rotations\n")
        print(study_markdown(mine))
        other = theirs(spec, work / "misata")
        if other is None:
            print("\nmisata is not installed: no side-by-side table")
            return 0
        print("\n## The same spec: misata's study beside evalpack's, on misata's operators\n")
        print("| operator | misata mutants | misata match on all | evalpack mutants | evalpack match on all |")
        print("|---|---:|---:|---:|---:|")
        for op, row in sorted(other["by_mistake"].items()):
            ran = row["queries"]
            survived = round(row["false_positive_rate_all_databases"] * ran)
            mine_row = mine["operators"].get(op, {"mutants": 0, "match_all": 0})
            share = mine_row["match_all"] / mine_row["mutants"] if mine_row["mutants"] else 0.0
            print(f"| {op} | {ran} | {survived} ({row['false_positive_rate_all_databases']:.1%}) | "
                  f"{mine_row['mutants']} | {mine_row['match_all']} ({share:.1%}) |")
        print(f"| **all of misata's operators** | {other['queries']} | "
              f"{other['false_positive_rate_all_databases']:.1%} | | |")
        print(f"| **all of evalpack's operators** | | | {mine['mutants_run']} | {mine['match_all_rate']:.2%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
