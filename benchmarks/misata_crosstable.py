"""Misata's cross-table schema features side by side: each spec of tests/data/test_misata_crosstable.py (and the
lookup-table features, whose refusal lies outside relationships, foreign key columns and constraints) through
`misata evalpack` and `evalpack build`, one rotation each, as a Markdown table.

    python benchmarks/misata_crosstable.py                    # misata from benchmarks/.venv-misata or PATH
    python benchmarks/misata_crosstable.py --misata /tmp/misata-venv/bin/misata

Without misata (its command missing, or its Python unable to import it) it says so and exits 0.
A Misata exit 0 is "builds"; exit 1 is a build that shipped no question; exit 2 a refusal.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "data"), str(HERE.parent / "tests" / "spec"), str(HERE.parent / "tests")]
from build import misata_command  # noqa: E402
from test_misata_crosstable import BASE, CASES, Case  # noqa: E402
from test_spec import edit  # noqa: E402

ELSEWHERE = (  # refused by readers other than the relationship's, the foreign key column's and the constraint's
    Case("is_reference", "table `is_reference: true` (lookup table)",
         edit("    rows: 30\n", "    rows: 30\n    is_reference: true\n", base=BASE), "?"),
    Case("inline_data", "table `inline_data:` (lookup rows)",
         edit("    rows: 30\n", "    rows: 30\n    inline_data: [{customer_id: 1, segment: a}]\n", base=BASE), "?"),
)


def last_line(text: str) -> str:
    """The message of a run: its last line that says something, without Rich's box drawing or pydantic's link."""
    lines = [line.strip(" │╭╰─") for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("For further information")]
    return lines[-1] if lines else ""


def outcome(code: int, out: str, err: str) -> str:
    if code == 0:
        return "builds"
    if code == 1:
        return "builds, ships no question (exit 1)"
    return f"refused (exit {code}): {last_line(err or out)}"


def run(misata: str, case: Case, work: Path) -> tuple[str, str]:
    spec = work / f"{case.id}.yaml"
    spec.write_text(case.text)
    theirs = subprocess.run([misata, "evalpack", "-c", str(spec), "-o", str(work / f"misata_{case.id}")],
                            capture_output=True, text=True, cwd=work, timeout=600)
    ours = subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(work / f"ours_{case.id}"),
                           "--rotations", "1", "--force"], capture_output=True, text=True, timeout=600)
    return outcome(theirs.returncode, theirs.stdout, theirs.stderr), outcome(ours.returncode, ours.stdout, ours.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misata", help="the misata command (default: benchmarks/.venv-misata/bin/misata, or PATH)")
    args = parser.parse_args()
    misata = args.misata or misata_command()
    python = Path(misata).with_name("python") if misata else None
    if not misata or not Path(misata).exists() or (python and python.exists() and subprocess.run(
            [str(python), "-c", "import misata"], capture_output=True).returncode != 0):
        print("misata is not installed (pip install 'misata[evalpack]'); nothing to compare")
        return 0
    version = subprocess.run([str(python), "-c", "import misata; print(misata.__version__)"], capture_output=True,
                             text=True).stdout.strip() if python and python.exists() else "?"
    print(f"misata {version} ({misata}) vs evalpack ({sys.executable})\n")
    print("| feature | misata evalpack | evalpack build |\n|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="crosstable-") as tmp:
        for case in CASES + ELSEWHERE:
            theirs, ours = run(misata, case, Path(tmp))
            print(f"| {case.feature} | {theirs.replace('|', '/')} | {ours.replace('|', '/')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
