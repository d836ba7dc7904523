"""Dagster's own cost for a pack: the `build_pack` job's shape, every step doing nothing, run as the pack's run is.

    DAGSTER_HOME=$(mktemp -d) python benchmarks/dagster_floor.py [--rotations 3]

The job here has the nodes of `pipelines.definitions`' `build_pack` (its assets, the `rotations` graph asset's
dynamic fan-out with one step per rotation, its asset checks, blocking as theirs are), partitioned by pack, with
the in-process executor and Dagster's default IO manager. Each step returns a small value at once. The script
first checks that the job's node names are those of the real job, so the two cannot drift apart unseen, then
runs it for a `retail` partition with `execute_job` on the instance at DAGSTER_HOME, as `python -m pipelines.run`
runs the pack's job, and prints its RUN_START to RUN_SUCCESS time in seconds. `benchmarks/dagster_vs_cli.py
--floor` runs it each round beside the real run: what a Dagster run of a pack costs before any of its work.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    DynamicOut,
    DynamicOutput,
    DynamicPartitionsDefinition,
    asset,
    asset_check,
    define_asset_job,
    execute_job,
    graph_asset,
    in_process_executor,
    op,
    reconstructable,
)

ROOT = Path(__file__).resolve().parents[1]
PACKS = DynamicPartitionsDefinition(name="packs")
GROUP = "evalpack"
ROTATIONS = int(os.environ.get("EVALPACK_FLOOR_ROTATIONS", "3"))


def _asset(fn):
    return asset(partitions_def=PACKS, group_name=GROUP)(fn)


def _check(asset_, blocking: bool):
    def decorate(fn):
        return asset_check(asset=asset_, blocking=blocking, partitions_def=PACKS, name=fn.__name__)(fn)
    return decorate


@_asset
def spec() -> dict:
    return {"name": "retail"}


@_asset
def questions(spec: dict) -> list:
    return list(range(200))


@op(out=DynamicOut())
def rotation_seeds(questions: list):
    for seed in range(42, 42 + ROTATIONS):
        yield DynamicOutput(seed, mapping_key=f"seed_{seed}")


@op
def check_rotation(seed: int) -> int:
    return seed


@op
def collect_rotations(checked: list) -> list:
    return sorted(checked)


@graph_asset(partitions_def=PACKS, group_name=GROUP)
def rotations(questions: list) -> list:
    return collect_rotations(rotation_seeds(questions).map(check_rotation).collect())


@_asset
def verification(questions: list, rotations: list) -> int:
    return len(rotations)


@_check(verification, blocking=True)
def rotations_hold_the_answer_key() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@_check(verification, blocking=False)
def near_miss_survival_under_threshold() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@_asset
def certificate(spec: dict, questions: list, rotations: list, verification: int) -> int:
    return verification


@_check(certificate, blocking=True)
def shipped_questions_verify_on_every_rotation() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@_asset
def attestation(certificate: int) -> int:
    return certificate


@_check(attestation, blocking=True)
def attestation_verifies() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@_asset
def pack(attestation: int) -> int:
    return attestation


defs = Definitions(
    assets=[spec, questions, rotations, verification, certificate, attestation, pack],
    asset_checks=[rotations_hold_the_answer_key, near_miss_survival_under_threshold,
                  shipped_questions_verify_on_every_rotation, attestation_verifies],
    jobs=[define_asset_job("build_pack", selection=AssetSelection.groups(GROUP))],
    executor=in_process_executor,
)


def floor_job():
    """The no-op ``build_pack`` (module level, so that it is reconstructable)."""
    return defs.resolve_job_def("build_pack")


def node_names(job) -> set[str]:
    names = set()
    for node in job.graph.node_defs:
        names.add(node.name)
        names |= {inner.name for inner in getattr(node, "node_defs", ())}  # a graph asset's ops
    return names


def same_shape() -> str | None:
    """Why this job's nodes are not the real ``build_pack``'s, or None when they are."""
    sys.path.insert(0, str(ROOT))
    from pipelines.definitions import defs as real

    ours, theirs = node_names(floor_job()), node_names(real.resolve_job_def("build_pack"))
    if ours != theirs:
        return f"only here: {sorted(ours - theirs)}; only in build_pack: {sorted(theirs - ours)}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    if not os.environ.get("DAGSTER_HOME"):
        sys.exit("set DAGSTER_HOME to a fresh folder")
    drift = same_shape()
    if drift:
        sys.exit(f"the floor job no longer has build_pack's nodes ({drift}): update benchmarks/dagster_floor.py")
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(PACKS.name, ["retail"])
        with execute_job(reconstructable(floor_job), instance=instance, tags={"dagster/partition": "retail"}) as run:
            if not run.success:
                sys.exit("the floor job failed")

        def stamp(kind: DagsterEventType) -> float:
            (record,) = instance.fetch_run_status_changes(kind, limit=1).records
            return record.timestamp

        print(f"{stamp(DagsterEventType.RUN_SUCCESS) - stamp(DagsterEventType.RUN_START):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
