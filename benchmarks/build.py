"""Time `evalpack build` against `misata evalpack` on the same Misata-format spec, side by side.

    python benchmarks/build.py                 # 1x, 10x, 100x (40k, 400k, 4M orders), 3 rotations
    python benchmarks/build.py --scales 1 10   # a subset
    python benchmarks/build.py --scales 1000 --only evalpack   # 40M orders, evalpack alone

Each side runs in turn as its own process tree; wall time is measured around it, CPU time is its tree's user +
system time (from the rusage of reaped children: less affected than wall time by other work on the machine),
and peak memory is the largest sum of proportional memory (PSS) over the whole tree (worker processes
included), sampled every 250 ms from /proc. PSS divides each shared page among the processes sharing it, so
forked workers are not counted once for every page they share with the process that forked them (summed
resident memory would); reading it makes the kernel walk each process's page tables, which slows the side
being measured: every 50 ms (as until 2026-12-05) it cost 3-4% of the build's wall time (100x: 14.55 s against
13.97 s unsampled; 1x: 4.54 against 4.34 s), every 250 ms nothing measurable (13.93 s, 4.37 s) with the same
peaks (636 against 630 MB at 100x, 312 MB both at 1x). The wall time ends when the side exits, not after the
sampler's last sleep. `misata` is used when
benchmarks/.venv-misata/bin/misata exists (`python -m venv benchmarks/.venv-misata &&
benchmarks/.venv-misata/bin/pip install 'misata[evalpack]'`) or `misata` is on PATH. Ratios are misata /
evalpack.

evalpack runs as the `evalpack` command of this environment (its console entry point, as a user runs it)
with a cache folder of its own per scale, empty at first: the evalpack column is a first build of the
spec, all of its work done. `--warm` adds a second evalpack build of the same spec into the same cache
(a spec rebuilt unchanged: prepared mutants and studied rotations are found there). The machine's load
average is printed before each side's run.

Then each side's own `python PACK/verify.py` (gold mode: every gold SQL on every rotation) runs
`--verify-runs` times on the pack it just built (default 5; 0 skips it); the table gives the
fastest and the median run and their peak memory. The two scripts do different work: evalpack's
first re-hashes every file against the attestation and runs each query in a locked sandbox;
misata's loads each rotation's CSV files and runs the queries on them.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scaled import scaled_spec  # noqa: E402

SPEC = HERE / "specs" / "retail_misata.yaml"
SAMPLE_SECONDS = 0.25  # how often the process tree's PSS is read (see above)


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_mb: float
    code: int
    tail: str
    cpu_seconds: float = 0.0  # user + system time of the whole process tree (each process reaped by its parent)


def _tree_pss_kb(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    stack.extend(int(c) for c in children.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(cmd: list[str], cwd: Path | None = None) -> Run:
    """Run ``cmd``; wall time, CPU time and the peak summed PSS of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_pss_kb(proc.pid))
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    seconds = time.perf_counter() - started  # not the sampler's last sleep
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Run(seconds, peak / 1024, proc.returncode, out[-600:], cpu)


def compile_tree(root: Path) -> None:
    """Bytecode for the Python files of the project at ``root``, as Python writes it on a first import: a
    machine that sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile every module of an
    editable install at every start, which a user's installed evalpack never does."""
    for package in ("evalpack", "assets", "pipelines", "publish"):
        if (root / package).is_dir():
            compileall.compile_dir(root / package, quiet=1)


def print_load(what: str) -> None:
    """The load average (1, 5, 15 min) before a measured run, as the figures' context."""
    one, five, fifteen = os.getloadavg()
    print(f"  load before {what}: {one:.2f} {five:.2f} {fifteen:.2f}", flush=True)


def misata_command() -> str | None:
    local = HERE / ".venv-misata" / "bin" / "misata"
    return str(local) if local.exists() else shutil.which("misata")


def misata_python() -> str:
    local = HERE / ".venv-misata" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


@dataclass(frozen=True)
class VerifyRuns:
    fastest: float
    median: float
    peak_mb: float
    failed: str = ""


def time_verify(python: str, pack: Path, runs: int) -> VerifyRuns | None:
    """``python PACK/verify.py`` run ``runs`` times (gold mode); None when the pack has no verify.py."""
    script = pack / "verify.py"
    if runs < 1 or not script.exists():
        return None
    results = [measure([python, str(script)], cwd=pack) for _ in range(runs)]
    failed = next((r.tail for r in results if r.code), "")
    seconds = [r.seconds for r in results]
    return VerifyRuns(min(seconds), statistics.median(seconds), max(r.peak_mb for r in results), failed)


def _verify_cells(runs: VerifyRuns | None) -> str:
    return f"{runs.fastest:7.2f} {runs.median:7.2f} {runs.peak_mb:6.0f}" if runs else f"{'-':>7} {'-':>7} {'-':>6}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--rotations", type=int, default=3)
    parser.add_argument("--only", choices=("evalpack", "misata"), help="run one side only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--verify-runs", type=int, default=5, help="runs of each pack's verify.py (0: none)")
    parser.add_argument("--warm", action="store_true", help="also time a second evalpack build with the cache warm")
    args = parser.parse_args(argv)

    compile_tree(HERE.parent)
    misata = None if args.only == "evalpack" else misata_command()
    command = Path(sys.executable).with_name("evalpack")
    evalpack = [str(command)] if command.exists() else [sys.executable, "-m", "evalpack.cli"]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"spec: {args.spec.name}; rotations: {args.rotations}; evalpack --jobs {args.jobs}; "
          f"misata: {misata or 'not installed'}")
    header = f"{'scale':>6} {'orders':>11} | {'evalpack s':>10} {'MB':>7} | {'misata s':>9} {'MB':>7} | " \
             f"{'time x':>6} {'mem x':>6}"
    print(header)
    print("-" * len(header))
    verified: dict[int, dict[str, VerifyRuns | None]] = {}
    with tempfile.TemporaryDirectory(prefix="evalpack-bench-") as tmp:
        work = Path(tmp)
        for scale in args.scales:
            spec = scaled_spec(args.spec, scale, work / "specs")
            orders = 40_000 * scale
            ours = theirs = None
            checks: dict[str, VerifyRuns | None] = {"evalpack": None, "misata": None}
            if args.only != "misata":
                out = work / f"evalpack_{scale}"
                build = [*evalpack, "build", str(spec), "-o", str(out), "--rotations", str(args.rotations),
                         "--jobs", str(args.jobs), "--force"]
                os.environ["EVALPACK_CACHE_DIR"] = str(work / f"cache_{scale}")
                print_load(f"evalpack {scale}x")
                ours = measure(build)
                if ours.code:
                    print(f"evalpack failed at {scale}x:\n{ours.tail}")
                if args.warm:
                    warm = measure(build)
                    print(f"  evalpack {scale}x rebuilt with the cache warm: {warm.seconds:.2f} s, {warm.peak_mb:.0f} MB, "
                          f"CPU {warm.cpu_seconds:.1f} s"
                          + (f" (failed: {warm.tail})" if warm.code else ""))
                checks["evalpack"] = time_verify(sys.executable, out, args.verify_runs)
                shutil.rmtree(out, ignore_errors=True)
            if misata and args.only != "evalpack":
                out = work / f"misata_{scale}"
                print_load(f"misata {scale}x")
                theirs = measure([misata, "evalpack", "-c", str(spec), "-o", str(out), "--rotations",
                                  str(args.rotations)])
                if theirs.code:
                    print(f"misata failed at {scale}x:\n{theirs.tail}")
                checks["misata"] = time_verify(misata_python(), out, args.verify_runs)
                shutil.rmtree(out, ignore_errors=True)
            e = f"{ours.seconds:10.1f} {ours.peak_mb:7.0f}" if ours else f"{'-':>10} {'-':>7}"
            m = f"{theirs.seconds:9.1f} {theirs.peak_mb:7.0f}" if theirs else f"{'-':>9} {'-':>7}"
            ratio = (f"{theirs.seconds / ours.seconds:6.1f} {theirs.peak_mb / ours.peak_mb:6.1f}"
                     if ours and theirs else f"{'-':>6} {'-':>6}")
            print(f"{scale:>5}x {orders:>11,} | {e} | {m} | {ratio}", flush=True)
            cpu = ", ".join(f"{side} {run.cpu_seconds:.1f} s" for side, run in (("evalpack", ours), ("misata", theirs))
                            if run)
            print(f"  CPU time (user + system of the process tree): {cpu}", flush=True)
            verified[scale] = checks
    if args.verify_runs > 0:
        print_verify_table(verified, args.verify_runs)
    return 0


def print_verify_table(verified: dict[int, dict[str, VerifyRuns | None]], runs: int) -> None:
    print(f"\npython PACK/verify.py (gold mode), {runs} run(s) each: fastest and median seconds, peak MB")
    header = (f"{'scale':>6} | {'evalpack':>7} {'median':>7} {'MB':>6} | {'misata':>7} {'median':>7} {'MB':>6} | "
              f"{'median x':>8}")
    print(header)
    print("-" * len(header))
    for scale, checks in verified.items():
        ours, theirs = checks["evalpack"], checks["misata"]
        ratio = f"{theirs.median / ours.median:8.1f}" if ours and theirs else f"{'-':>8}"
        print(f"{scale:>5}x | {_verify_cells(ours)} | {_verify_cells(theirs)} | {ratio}")
        for side, runs_ in checks.items():
            if runs_ and runs_.failed:
                print(f"  {side}'s verify.py did not pass at {scale}x:\n{runs_.failed}")


if __name__ == "__main__":
    sys.exit(main())
