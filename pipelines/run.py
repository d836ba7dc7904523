"""Build packs with Dagster from the command line, on any instance, fresh or not.

``python -m pipelines.run retail [finance ...] [--seed N] [--rotations R]`` checks each spec
(``<schemas_dir>/<pack>.yaml``), registers its ``packs`` partition when the instance does not have it
yet (what the sensor or the UI's partition picker does), and runs the ``build_pack`` job for it on the
instance at ``$DAGSTER_HOME``, with the code location's executor. The run, its steps, checks and
materialisations are then in the UI like any other. ``dagster job execute -j build_pack --tags
'{"dagster/partition": "retail"}'`` works too, once the partition exists.
"""

import argparse
import os
import sys

from dagster import DagsterInstance, execute_job, reconstructable

from assets.common import PACKS
from evalpack.core.errors import EvalpackError
from evalpack.spec.reader import load_spec
from pipelines.resources import evalpack_resource
from pipelines.sensors import invalid_reason


def build_pack_job():
    """The resolved ``build_pack`` job of the code location (a module-level function, so it is reconstructable)."""
    from pipelines.definitions import defs

    return defs.resolve_job_def("build_pack")


def check(pack: str, seed: int | None = None, rotations: int | None = None) -> None:
    """EvalpackError (one line) when ``pack``'s spec cannot be built, with the overrides, as `evalpack build` checks
    them: before any instance is opened or run launched."""
    path = evalpack_resource().spec_path(pack)
    reason = invalid_reason(path)
    if reason:
        raise EvalpackError(f"{reason} (not built)")
    if seed is not None or rotations is not None:
        load_spec(path, seed=seed, rotations=rotations)


def build(pack: str, instance: DagsterInstance, seed: int | None = None, rotations: int | None = None) -> bool:
    """Register ``pack`` as a partition if needed, then run ``build_pack`` for it; True when the run succeeded."""
    settings = evalpack_resource()
    check(pack, seed, rotations)
    if not instance.has_dynamic_partition(PACKS.name, pack):
        instance.add_dynamic_partitions(PACKS.name, [pack])
    spec_config = {k: v for k, v in (("seed", seed), ("rotations", rotations)) if v is not None}
    run_config = {"ops": {"spec": {"config": spec_config}}} if spec_config else {}
    with execute_job(reconstructable(build_pack_job), instance=instance, run_config=run_config,
                     tags={"dagster/partition": pack}) as result:
        status = "built" if result.success else "FAILED"
        print(f"{status} {pack}: run {result.run_id} -> {settings.pack_dir(pack)}", flush=True)
        return result.success


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.run", description=__doc__.splitlines()[0])
    parser.add_argument("packs", nargs="+", help="pack keys: the stems of spec files under the schemas folder")
    parser.add_argument("--seed", type=int, help="base seed (overrides the spec's seed)")
    parser.add_argument("--rotations", type=int, help="number of rotations (overrides the spec)")
    args = parser.parse_args(argv)
    if not os.environ.get("DAGSTER_HOME"):
        print("pipelines.run: error: DAGSTER_HOME is not set; export DAGSTER_HOME=$PWD/.dagster (a folder that "
              "keeps runs between commands) and run again", file=sys.stderr)
        return 2
    os.makedirs(os.environ["DAGSTER_HOME"], exist_ok=True)
    try:
        for pack in args.packs:
            check(pack, args.seed, args.rotations)
        with DagsterInstance.get() as instance:
            results = [build(pack, instance, args.seed, args.rotations) for pack in args.packs]
    except (EvalpackError, ValueError) as exc:
        print(f"pipelines.run: error: {exc}", file=sys.stderr)
        return 2
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
