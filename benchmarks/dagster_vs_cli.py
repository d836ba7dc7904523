"""A Dagster run against `evalpack build` on the same spec, side by side, and their packs compared.

    python benchmarks/dagster_vs_cli.py                      # schemas/retail.yaml, 3 rounds
    python benchmarks/dagster_vs_cli.py --spec schemas/finance.yaml --rounds 5

Each round runs, in turn, `evalpack build SPEC -o A` and `python -m pipelines.run PACK` (the README's
headless Dagster command: every asset of the pack, its checks, on a fresh DAGSTER_HOME, with the code
location's default executor, or --executor), each as its own process, with the same SOURCE_DATE_EPOCH.
Three figures per side, medians over the rounds:

- `command`: wall time of the whole command (interpreter start, imports, Dagster's instance);
- `run`: for Dagster, the run's own duration as the UI shows it (RUN_START to RUN_SUCCESS, from the
  instance's event log); for the CLI, the same as `command`.

evalpack's cache on disk (prepared mutants, studied rotations) is a fresh empty folder for each side of each
round by default (`--cache cold`: both do all the work, as a first build of the spec does); `--cache warm`
gives both sides one folder per round, filled by an unmeasured `evalpack build` first.

`--floor` adds, each round, `benchmarks/dagster_floor.py` on a fresh DAGSTER_HOME: the same job shape with steps
that do nothing, its run's RUN_START to RUN_SUCCESS time: what Dagster itself costs a run of the pack.

Ratios are Dagster / CLI. The packs of every round must be byte-identical (every file), else the
script exits 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPOCH = "1767225600"


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def timed(cmd: list[str], env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def run_duration(dagster_home: Path) -> float:
    from dagster import DagsterEventType, DagsterInstance

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with DagsterInstance.get() as instance:
        def stamp(kind: DagsterEventType) -> float:
            (record,) = instance.fetch_run_status_changes(kind, limit=1).records
            return record.timestamp
        return stamp(DagsterEventType.RUN_SUCCESS) - stamp(DagsterEventType.RUN_START)


def floor_run(dagster_home: Path, env: dict) -> float:
    """RUN_START to RUN_SUCCESS of the no-op job (benchmarks/dagster_floor.py) on a fresh ``dagster_home``."""
    dagster_home.mkdir(parents=True)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dagster_floor.py")], cwd=ROOT,
                          env={**env, "DAGSTER_HOME": str(dagster_home)}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"benchmarks/dagster_floor.py exited {done.returncode}:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="schemas/retail.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executor", help="EVALPACK_EXECUTOR for the Dagster side (default: the code location's)")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold",
                        help="evalpack's cache on disk: empty for each side (cold), or filled first (warm)")
    parser.add_argument("--floor", action="store_true",
                        help="also run the job's shape with no-op steps (benchmarks/dagster_floor.py) each round")
    args = parser.parse_args()
    load = os.getloadavg()
    spec = ROOT / args.spec
    pack = spec.stem
    if spec.parent != ROOT / "schemas":
        sys.exit("--spec must be a file under schemas/ (Dagster builds the packs of that folder)")
    cli_times, dagster_times, run_times, floor_times = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            base = Path(tmp) / f"round{i}"
            env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "DAGSTER_HOME": str(base / "dagster_home"),
                   "EVALPACK_PACKS_DIR": str(base / "dagster_packs")}
            if args.executor:
                env["EVALPACK_EXECUTOR"] = args.executor
            cli_out = base / "cli" / pack
            build = [sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(cli_out)]
            env["EVALPACK_CACHE_DIR"] = str(base / "cache")
            if args.cache == "warm":
                timed([*build[:-1], str(base / "warming" / pack)], env)
            else:
                env["EVALPACK_CACHE_DIR"] = str(base / "cache_cli")
            cli_times.append(timed(build, env))
            if args.cache == "cold":
                env["EVALPACK_CACHE_DIR"] = str(base / "cache_dagster")
            dagster_times.append(timed([sys.executable, "-m", "pipelines.run", pack], env))
            run_times.append(run_duration(base / "dagster_home"))
            ours, theirs = files_of(base / "dagster_packs" / pack), files_of(cli_out)
            differing = sorted(n for n in ours.keys() | theirs.keys() if ours.get(n) != theirs.get(n))
            if differing:
                print(f"round {i}: the packs differ in {differing}")
                return 1
            if args.floor:
                floor_times.append(floor_run(base / "floor_home", env))
            print(f"round {i}: cli {cli_times[-1]:.2f} s, dagster command {dagster_times[-1]:.2f} s, "
                  f"dagster run {run_times[-1]:.2f} s; packs byte-identical ({len(ours)} files)"
                  + (f"; no-op run {floor_times[-1]:.2f} s" if args.floor else ""), flush=True)
    cli, command, run = (statistics.median(t) for t in (cli_times, dagster_times, run_times))
    print(f"\n{args.spec}, {args.rounds} rounds, medians, executor {args.executor or 'default'}, cache {args.cache}, "
          f"load average at the start {' '.join(f'{x:.2f}' for x in load)}:")
    print("| side | wall time | ratio to `evalpack build` |\n|---|---:|---:|")
    print(f"| `evalpack build` | {cli:.2f} s | 1.00 |")
    print(f"| Dagster run (RUN_START to RUN_SUCCESS) | {run:.2f} s | {run / cli:.2f} |")
    print(f"| `python -m pipelines.run` (whole command) | {command:.2f} s | {command / cli:.2f} |")
    if floor_times:
        floor = statistics.median(floor_times)
        print(f"| the same job, steps that do nothing (run) | {floor:.2f} s | {floor / cli:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
