"""`python PACK/verify.py` against the least any gold-mode check of the same pack can do, side by side.

    python benchmarks/verify_floor.py                    # builds the 1x Misata-format pack, 3 rotations, 7 rounds
    python benchmarks/verify_floor.py --pack PACK --rounds 11

verify.py's gold mode reruns every gold SQL of the pack on every rotation. Whatever else it does (the integrity
check of every file, a sandbox per rotation, the comparison rule, the report), it cannot take less time than
the reruns alone. Each round runs, in turn, as its own process:

- `verify.py`: `python PACK/verify.py`, as a consumer runs it;
- `floor, processes`: a script that imports DuckDB, forks one process per rotation, and in each loads the
  rotation's Parquet files into memory and runs every gold SQL once, fetching its rows: nothing is checked,
  compared or reported, and the script is compiled once, not at every run as verify.py is;
- `floor, threads`: the same in one process, one thread (and DuckDB connection) per rotation.

The table gives each side's fastest and median wall time and its median CPU time (user + system of the process
tree), and the ratios of verify.py's medians to the faster floor's. The machine's load average is printed before
the rounds. With the goal of issue 24 (verify.py under 0.5 s at 1x) beside it: when a floor's median is above
0.5 s, no gold-mode check of this pack on this machine meets the goal.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scaled import scaled_spec  # noqa: E402

FLOOR = textwrap.dedent("""\
    import json, os, sys, threading
    from pathlib import Path
    import duckdb

    pack, how = Path(sys.argv[1]), sys.argv[2]
    gold = [r["gold_sql"] for r in map(json.loads, (pack / "questions.jsonl").read_text().splitlines())
            if r.get("gold_sql")]
    rotations = sorted(p / "tables" for p in (pack / "rotations").iterdir())

    def rerun(tables):
        con = duckdb.connect(":memory:", config={"threads": 1})
        for path in sorted(tables.glob("*.parquet")):
            con.execute(f"CREATE TABLE \\"{path.stem}\\" AS SELECT * FROM read_parquet('{path}')")
        for sql in gold:
            con.execute(sql).fetchall()
        con.close()

    if how == "processes":
        children = []
        for tables in rotations:
            pid = os.fork()
            if pid == 0:
                rerun(tables)
                os._exit(0)
            children.append(pid)
        if any(os.waitpid(pid, 0)[1] for pid in children):
            sys.exit(1)
    else:
        threads = [threading.Thread(target=rerun, args=(tables,)) for tables in rotations]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """)


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of ``cmd``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-400:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def build_pack(work: Path, scale: int, rotations: int) -> Path:
    spec = scaled_spec(HERE / "specs" / "retail_misata.yaml", scale, work / "specs")
    out = work / "pack"
    env = {**os.environ, "EVALPACK_CACHE_DIR": str(work / "cache")}
    subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(out), "--rotations",
                    str(rotations), "--force"], check=True, stdout=subprocess.DEVNULL, env=env)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pack", type=Path, help="a built pack (default: build the Misata-format spec)")
    parser.add_argument("--scale", type=int, default=1, help="scale of the spec built when --pack is not given")
    parser.add_argument("--rotations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalpack-floor-") as tmp:
        work = Path(tmp)
        pack = args.pack or build_pack(work, args.scale, args.rotations)
        floor = work / "floor.py"
        floor.write_text(FLOOR)
        sides = {"verify.py": [sys.executable, str(pack / "verify.py")],
                 "floor, processes": [sys.executable, str(floor), str(pack), "processes"],
                 "floor, threads": [sys.executable, str(floor), str(pack), "threads"]}
        for cmd in sides.values():  # unmeasured: the files in the page cache, the floor script compiled
            timed(cmd)
        rotations = len([p for p in (pack / "rotations").iterdir() if p.is_dir()])
        questions = sum(bool(json.loads(line).get("gold_sql")) for line in (pack / "questions.jsonl").open())
        one, five, fifteen = os.getloadavg()
        print(f"pack: {pack.name}, {questions} gold SQL x {rotations} rotations; {os.cpu_count()} cores; "
              f"{args.rounds} rounds; load before: {one:.2f} {five:.2f} {fifteen:.2f}")
        runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, cmd in sides.items():
                runs[side].append(timed(cmd))
    print(f"{'side':<18} | {'fastest s':>9} {'median s':>9} {'CPU s':>7}")
    print("-" * 50)
    medians = {}
    for side, measured in runs.items():
        walls = [w for w, _ in measured]
        medians[side] = statistics.median(walls)
        print(f"{side:<18} | {min(walls):9.3f} {medians[side]:9.3f} {statistics.median(c for _, c in measured):7.3f}")
    floor_side = min(("floor, processes", "floor, threads"), key=medians.get)
    print(f"verify.py / {floor_side}: {medians['verify.py'] / medians[floor_side]:.2f}x (medians); "
          f"the faster floor's median is {medians[floor_side]:.3f} s against the goal's 0.5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
