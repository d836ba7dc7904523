"""Stage 3: every rotation, one step each: its tables written, then its checks (the engine's per-rotation unit).

``rotations`` is a graph-backed asset: ``rotation_seeds`` opens a fresh working folder and fans out
one dynamic step per seed of the spec; ``check_rotation`` writes that rotation's tables and runs
``evalpack.build.check_rotation`` on them (through ``evalpack.build.RotationsChecked``) (verification's golden checks, the audit's checks, the
near-miss mutants, on one connection), exactly what ``evalpack build`` runs per rotation; and
``collect_rotations`` gathers the results in seed order. The number of rotations comes from the
spec (or the run's override), so it cannot be a static partition dimension; a dynamic fan-out
gives one step per rotation for any spec.
"""

import shutil
from dataclasses import dataclass

from dagster import (
    DynamicOut,
    DynamicOutput,
    MetadataValue,
    OpExecutionContext,
    Output,
    TableColumn,
    TableSchema,
    graph_asset,
    op,
)
from dagster_duckdb import DuckDBResource

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource
from evalpack.build import Derived, RotationCheck
from evalpack.core.layout import ROTATIONS, PackLayout, rotation_name
from evalpack.data.generate import arrow_schema
from evalpack.data.tables import write_rotation
from evalpack.spec.model import Spec

Rows = dict[str, dict[str, int]]  # rotation folder (seed_42) -> table -> rows written

@dataclass(frozen=True)
class Rotation:
    """One rotation's step: the rows written per table and what its checks found."""

    rows: dict[str, int]
    check: RotationCheck


def column_schema(spec: Spec) -> TableSchema:
    """Every table's fixed Arrow schema as one TableSchema (columns named ``table.column``)."""
    columns = []
    for table in spec.tables:
        declared = {c.name: c.type for c in table.columns}
        columns += [TableColumn(name=f"{table.name}.{f.name}", type=str(f.type),
                                description=f"declared {declared.get(f.name, '?')} in {table.name}")
                    for f in arrow_schema(spec, table)]
    return TableSchema(columns=columns)


def table_schema(spec: Spec, table) -> TableSchema:
    return TableSchema(columns=[TableColumn(name=f.name, type=str(f.type)) for f in arrow_schema(spec, table)])


def rows_markdown(rows: Rows) -> str:
    rotations = list(rows)
    tables = list(next(iter(rows.values()), {}))
    lines = ["| table | " + " | ".join(rotations) + " |", "|---|" + "---:|" * len(rotations)]
    lines += [f"| {t} | " + " | ".join(f"{rows[r][t]:,}" for r in rotations) + " |" for t in tables]
    return "\n".join(lines)


@op(out=DynamicOut(int), description="A fresh working folder for the pack, then one output per rotation seed.")
def rotation_seeds(context: OpExecutionContext, spec: Spec, evalpack: EvalpackResource):
    evalpack.claim_packs_dir()
    work = evalpack.work_dir(context.partition_key)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    work.chmod(0o755)
    context.log.info(f"working folder {work}; rotations {list(spec.rotation_names())}")
    for seed in spec.seeds():
        yield DynamicOutput(seed, mapping_key=rotation_name(seed))


@op(name="check_rotation", description="Write one rotation's tables (Parquet and CSV), then run the engine's "
                                       "per-rotation checks on them: verification, audit, near-miss mutants.")
def rotation_step(context: OpExecutionContext, spec: Spec, questions: Derived, seed: int,
                  evalpack: EvalpackResource, duckdb: DuckDBResource) -> Rotation:
    work = evalpack.require_work_dir(context.partition_key)
    plan = questions.plan(seed)
    for warning in plan.warnings:
        context.log.warning(f"{plan.rotation}: {warning}")
    rows = write_rotation(spec, plan, work)
    context.log.info(f"{plan.rotation}: " + ", ".join(f"{t} {n:,} rows" for t, n in rows.items()))
    with duckdb.get_connection() as con:  # the engine loads the rotation into it, with its own limits
        # which earlier rotations' checks this one builds on is the engine's decision (RotationsChecked)
        checked = evalpack.rotations_checked(context.partition_key).check(spec, questions, work, seed, con=con)
    passed = sum(o.passed for o in checked.observations)
    context.log.info(f"{plan.rotation}: {passed}/{len(checked.observations)} questions pass the golden checks; "
                     f"{len(checked.outcomes)} near-miss mutants run")
    return Rotation(rows, checked)


@op(description="Every rotation's result in seed order, with the rows written and the tables' schema.")
def collect_rotations(context: OpExecutionContext, spec: Spec, results: list,
                      evalpack: EvalpackResource) -> Output[list]:
    by_rotation = {r.check.rotation: r for r in results}
    ordered = [by_rotation[name] for name in spec.rotation_names()]
    rows: Rows = {r.check.rotation: r.rows for r in ordered}
    work = evalpack.require_work_dir(context.partition_key)
    files = sorted(p for s in spec.seeds() for p in PackLayout(work).tables(s).iterdir())
    metadata = {
        "rows": MetadataValue.md(rows_markdown(rows)),
        "rows_per_table": MetadataValue.json(rows),
        "dagster/row_count": sum(n for counts in rows.values() for n in counts.values()),
        "dagster/column_schema": column_schema(spec),
        "rotations": MetadataValue.json(list(rows)),
        "folder": MetadataValue.path(str(evalpack.placed(context.partition_key, work / ROTATIONS))),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
    }
    metadata.update({f"schema/{t.name}": table_schema(spec, t) for t in spec.tables})
    return Output(ordered, metadata=metadata)


@graph_asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"parquet", "csv", "duckdb"})
def rotations(spec: Spec, questions: Derived) -> list:
    """Every rotation's tables under ``rotations/seed_<n>/tables/`` and its checks: one step per rotation."""
    results = rotation_seeds(spec).map(lambda seed: rotation_step(spec, questions, seed))
    return collect_rotations(spec, results.collect())
