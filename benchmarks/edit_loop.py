"""Time the loop a spec author iterates: edit one fact of a spec, rebuild into the same cache, repeat.

    python benchmarks/edit_loop.py                                   # the 1x Misata-format spec, 3 edits
    python benchmarks/edit_loop.py --spec tests/specs/shop_joins.yaml --edits 5

The spec is copied to a temporary folder and built once (unmeasured) into a cache folder of its own. Then each
round changes the first ``target_value:`` of the copy by one cent (a monthly total: the rotations' data and the
answers change, the gold SQL mostly does not) and rebuilds it with `evalpack build` (the console entry point of
this environment), timed with the CPU time of its process tree; then the same spec is rebuilt unchanged, for
contrast. Run it from the checkout being measured; compare two commits by running it in a worktree of each, in
turn. The machine's load is printed before the first round.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACT = re.compile(r"(target_value:\s*)(-?\d+(?:\.\d+)?)")


def timed_build(spec: Path, out: Path, env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one `evalpack build` into a fresh ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).with_name("evalpack")), "build", str(spec), "-o", str(out),
                           "--rotations", "3"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"evalpack build {spec} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def edit_fact(spec: Path, round_: int) -> str:
    """Move the spec's first ``target_value`` by ``round_`` cents; the new line."""
    text = spec.read_text(encoding="utf-8")
    found = FACT.search(text)
    if not found:
        sys.exit(f"{spec}: no `target_value:` to edit; give a spec with outcome_curves (Misata's format)")
    value = float(found.group(2)) + round_ / 100
    spec.write_text(text[:found.start(2)] + f"{value:.2f}" + text[found.end(2):], encoding="utf-8")
    return f"{found.group(1)}{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "benchmarks" / "specs" / "retail_misata.yaml"))
    parser.add_argument("--edits", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; spec {args.spec}; evalpack from {ROOT}")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / Path(args.spec).name
        shutil.copyfile(args.spec, spec)
        env = {**os.environ, "EVALPACK_CACHE_DIR": str(Path(tmp) / "cache"), "SOURCE_DATE_EPOCH": "1700000000"}
        out = Path(tmp) / "pack"
        first = timed_build(spec, out, env)
        print(f"first build (cache empty): {first[0]:.2f} s, CPU {first[1]:.2f} s")
        edits = []
        for n in range(1, args.edits + 1):
            line = edit_fact(spec, n)
            edits.append(timed_build(spec, out, env))
            print(f"edit {n} ({line}): {edits[-1][0]:.2f} s, CPU {edits[-1][1]:.2f} s", flush=True)
        same = timed_build(spec, out, env)
        print(f"rebuilt unchanged: {same[0]:.2f} s, CPU {same[1]:.2f} s")
    walls = [w for w, _ in edits]
    print(f"after a fact edit: median {statistics.median(walls):.2f} s (fastest {min(walls):.2f} s), "
          f"CPU median {statistics.median(c for _, c in edits):.2f} s; unchanged {same[0]:.2f} s; "
          f"first build {first[0]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
