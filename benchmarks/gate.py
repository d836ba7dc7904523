"""The near-miss gate on every spec at hand: what ships, what the gate left out and why.

    python benchmarks/gate.py [--misata-python PATH] [SPEC ...]

Builds each spec with 3 rotations (the example specs, tests/specs, benchmarks/specs, and Misata's quickstart: the
"Sixty seconds" spec of Misata's README, read from the metadata of the misata installed beside PATH's Python when
given; nothing of it is stored here) and prints, per spec, the questions shipped and dropped by the gate, the drops
per operator, the mutants the declared ranges make equivalent, and the survival rate of the shipped questions.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from evalpack.build import build_pack  # noqa: E402


def misata_quickstart(python: str, folder: Path) -> Path | None:
    """The first YAML block of the README of the misata installed for ``python``, written to ``folder``."""
    found = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.metadata('misata').get_payload())"],
                           capture_output=True, text=True)
    blocks = re.findall(r"```yaml\n(.*?)```", found.stdout, re.S)
    if found.returncode or not blocks:
        return None
    path = folder / "misata_quickstart.yaml"
    path.write_text(blocks[0], encoding="utf-8")
    return path


def row(name: str, spec: Path, out: Path) -> str:
    result = build_pack(spec, out, rotations=3, force=True, jobs=2)
    study = result.near_miss
    gate = study["gate"]
    shipped = len(result.shipped)
    ops = ", ".join(f"{op} {n}" for op, n in gate["dropped_by_operator"].items()) or "-"
    ranges = sum(study.get("equivalent_by_ranges", {}).values())
    return (f"| {name} | {shipped + gate['dropped']} | {shipped} | {gate['dropped']} | {ops} | {ranges} | "
            f"{study['mutants_run']} | {study['match_all_rate']:.2%} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", type=Path)
    parser.add_argument("--misata-python", help="a Python with misata installed, for its quickstart spec")
    args = parser.parse_args()
    specs = args.specs or [*sorted((ROOT / "schemas").glob("*.yaml")), *sorted((ROOT / "tests" / "specs").glob("*.yaml")),
                           *sorted((HERE / "specs").glob("*.yaml"))]
    with tempfile.TemporaryDirectory(prefix="evalpack-gate-") as tmp:
        work = Path(tmp)
        if args.misata_python and (quick := misata_quickstart(args.misata_python, work)):
            specs.append(quick)
        print("| spec | verified | shipped | dropped by the gate | drops per operator (a question under each) | "
              "equivalent by ranges | mutants run | survival of shipped |")
        print("|---|---:|---:|---:|---|---:|---:|---:|")
        for spec in specs:
            print(row(spec.stem, spec, work / spec.stem), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
