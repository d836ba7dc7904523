"""Time `evalpack build` against `misata evalpack` on the same Misata-format spec, side by side.

    python benchmarks/build.py                 # 1x, 10x, 100x (40k, 400k, 4M orders), 3 rotations
    python benchmarks/build.py --scales 1 10   # a subset
    python benchmarks/build.py --scales 1000 --only evalpack   # 40M orders, evalpack alone

Each side runs in turn as its own process tree; wall time is measured around it and peak
memory is the largest sum of resident memory over the whole tree (worker processes included),
sampled every 50 ms from /proc (on two cores a faster sampler takes measurable CPU from the
side being measured). `misata` is used when benchmarks/.venv-misata/bin/misata exists
(`python -m venv benchmarks/.venv-misata && benchmarks/.venv-misata/bin/pip install 'misata[evalpack]'`)
or `misata` is on PATH. Ratios are misata / evalpack.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
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
SAMPLE_SECONDS = 0.05


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_mb: float
    code: int
    tail: str


def _tree_rss_kb(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    stack.extend(int(c) for c in children.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(cmd: list[str], cwd: Path | None = None) -> Run:
    """Run ``cmd``; wall time and the peak summed RSS of its process tree."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    return Run(time.perf_counter() - started, peak / 1024, proc.returncode, out[-600:])


def misata_command() -> str | None:
    local = HERE / ".venv-misata" / "bin" / "misata"
    return str(local) if local.exists() else shutil.which("misata")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--rotations", type=int, default=3)
    parser.add_argument("--only", choices=("evalpack", "misata"), help="run one side only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spec", type=Path, default=SPEC)
    args = parser.parse_args(argv)

    misata = None if args.only == "evalpack" else misata_command()
    evalpack = [sys.executable, "-m", "evalpack.cli"]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"spec: {args.spec.name}; rotations: {args.rotations}; evalpack --jobs {args.jobs}; "
          f"misata: {misata or 'not installed'}")
    header = f"{'scale':>6} {'orders':>11} | {'evalpack s':>10} {'MB':>7} | {'misata s':>9} {'MB':>7} | " \
             f"{'time x':>6} {'mem x':>6}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="evalpack-bench-") as tmp:
        work = Path(tmp)
        for scale in args.scales:
            spec = scaled_spec(args.spec, scale, work / "specs")
            orders = 40_000 * scale
            ours = theirs = None
            if args.only != "misata":
                out = work / f"evalpack_{scale}"
                ours = measure([*evalpack, "build", str(spec), "-o", str(out), "--rotations", str(args.rotations),
                                "--jobs", str(args.jobs)])
                if ours.code:
                    print(f"evalpack failed at {scale}x:\n{ours.tail}")
                shutil.rmtree(out, ignore_errors=True)
            if misata and args.only != "evalpack":
                out = work / f"misata_{scale}"
                theirs = measure([misata, "evalpack", "-c", str(spec), "-o", str(out), "--rotations",
                                  str(args.rotations)])
                if theirs.code:
                    print(f"misata failed at {scale}x:\n{theirs.tail}")
                shutil.rmtree(out, ignore_errors=True)
            e = f"{ours.seconds:10.1f} {ours.peak_mb:7.0f}" if ours else f"{'-':>10} {'-':>7}"
            m = f"{theirs.seconds:9.1f} {theirs.peak_mb:7.0f}" if theirs else f"{'-':>9} {'-':>7}"
            ratio = (f"{theirs.seconds / ours.seconds:6.1f} {theirs.peak_mb / ours.peak_mb:6.1f}"
                     if ours and theirs else f"{'-':>6} {'-':>6}")
            print(f"{scale:>5}x {orders:>11,} | {e} | {m} | {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
