"""Time `evalpack build` of this checkout against the same command at an earlier revision, side by side.

    python benchmarks/build_vs_revision.py                     # 100x, against dc357c7 (before issue 16)
    python benchmarks/build_vs_revision.py --scales 1 100 --rounds 3 --revision HEAD~1

The revision is exported with `git archive` into a temporary folder and run from there with the same
Python and packages (PYTHONPATH), so both sides differ only in evalpack's own code. Each round runs
the two sides one after the other (the order alternates between rounds), each as its own process
tree, on the same scaled Misata-format spec as benchmarks/build.py; wall time and peak memory are
measured as there, and CPU time (user + system of the whole process tree), which varies less than wall time on a
machine that other work shares. The table gives each side's median and the ratio this checkout / revision, and
what each side shipped (questions, near-miss mutants), since the two build different packs.

evalpack's cache on disk (prepared mutants, studied rotations) is off by default (`--cache off`): every
run does all the work, as a first build of a spec does. `--cache warm` gives each scale one cache,
filled by an unmeasured build first: the time of rebuilding a spec that has not changed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from build import SPEC, compile_tree, measure  # noqa: E402
from scaled import scaled_spec  # noqa: E402

BEFORE_ISSUE_16 = "dc357c7"
# `evalpack build` as the side's own command (console() where it has one), without the subcommands that other
# packages of the installed distribution register: those are this checkout's, which an older tree cannot load
RUNNER = ("import importlib.metadata as m, sys\n"
          "found = m.entry_points\n"
          "m.entry_points = lambda **kw: [] if kw.get('group') == 'evalpack.commands' else found(**kw)\n"
          "import evalpack.cli as cli\n"
          "sys.argv = ['evalpack', *sys.argv[1:]]\n"
          "sys.exit(cli.console() if hasattr(cli, 'console') else cli.main())\n")


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` (this repository) as plain files under ``into``."""
    archive = into / "tree.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision], check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def shipped(pack: Path) -> str:
    """'<questions> q, <mutants> mutants' from a built pack's manifest."""
    manifest = json.loads((pack / "manifest.json").read_text())
    return f"{manifest['questions']['shipped']} q, {manifest['near_miss_study']['mutants_run']} mutants"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revision", default=BEFORE_ISSUE_16)
    parser.add_argument("--scales", type=int, nargs="+", default=[100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rotations", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache", choices=["off", "warm"], default="off")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evalpack-rev-") as tmp:
        work = Path(tmp)
        sides = {"this checkout": ROOT, args.revision: export(args.revision, work)}
        for tree in sides.values():
            compile_tree(tree)
        print(f"spec: {SPEC.name} scaled; rotations: {args.rotations}; --jobs {args.jobs}; rounds: {args.rounds}; "
              f"cache: {args.cache}")
        header = f"{'scale':>6} | {'side':>14} | {'median s':>8} {'runs':>24} | {'MB':>6} | {'shipped':>22}"
        print(header)
        print("-" * len(header))
        for scale in args.scales:
            spec = scaled_spec(SPEC, scale, work / "specs")
            runs: dict[str, list] = {name: [] for name in sides}
            made: dict[str, str] = {}
            cache = work / f"cache_{scale}" if args.cache == "warm" else "off"
            command = [sys.executable, "-c", RUNNER, "build", str(spec), "-o", str(work / f"pack_{scale}"),
                       "--rotations", str(args.rotations), "--jobs", str(args.jobs), "--force"]

            def build(name: str, command=command, cache=cache):
                return measure(["env", f"PYTHONPATH={sides[name]}", f"EVALPACK_CACHE_DIR={cache}", *command], cwd=work)

            if args.cache == "warm":
                build("this checkout")
            for round_ in range(args.rounds):
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for name in order:
                    run = build(name)
                    if run.code:
                        print(f"{name} failed at {scale}x:\n{run.tail}")
                        return 1
                    runs[name].append(run)
                    made[name] = shipped(work / f"pack_{scale}")
            medians = {name: statistics.median(r.seconds for r in rs) for name, rs in runs.items()}
            cpu = {name: statistics.median(r.cpu_seconds for r in rs) for name, rs in runs.items()}
            for name, rs in runs.items():
                times = ", ".join(f"{r.seconds:.1f}" for r in rs)
                print(f"{scale:>5}x | {name:>14} | {medians[name]:8.1f} {times:>24} | "
                      f"{max(r.peak_mb for r in rs):6.0f} | {made[name]:>22} | CPU {cpu[name]:.1f} s")
            ours, theirs = medians["this checkout"], medians[args.revision]
            print(f"{'':>6} | ratio this checkout / {args.revision}: {ours / theirs:.2f} (CPU time, user + "
                  f"system of the process tree: {cpu['this checkout'] / cpu[args.revision]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
