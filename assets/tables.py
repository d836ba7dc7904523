"""Stage 2: every rotation's tables, one step per rotation (parallel under the multiprocess executor).

``rotation_tables`` is a graph-backed asset: ``rotation_seeds`` opens a fresh working folder and fans
out one dynamic step per seed of the spec, ``write_rotation_tables`` plans and writes that rotation
with the engine, and ``rotation_rows`` collects the rows written per table per rotation. The number
of rotations comes from the spec (or the run's override), so it cannot be a static partition
dimension; a dynamic fan-out gives one step per rotation for any spec.
"""

import shutil

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

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource
from evalpack.generate import arrow_schema
from evalpack.plan import plan_rotation
from evalpack.spec import Spec
from evalpack.tables import rotation_dir, write_rotation

Rows = dict[str, dict[str, int]]  # rotation folder (seed_42) -> table -> rows written


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
    work = evalpack.work_dir(context.partition_key)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    work.chmod(0o755)
    context.log.info(f"working folder {work}; rotations {[f'seed_{s}' for s in spec.seeds()]}")
    for seed in spec.seeds():
        yield DynamicOutput(seed, mapping_key=f"seed_{seed}")


@op(description="Plan one rotation and write its tables (Parquet and CSV) into the working folder.")
def write_rotation_tables(context: OpExecutionContext, spec: Spec, seed: int,
                          evalpack: EvalpackResource) -> tuple[str, dict[str, int]]:
    work = evalpack.require_work_dir(context.partition_key)
    plan = plan_rotation(spec, seed)
    for warning in plan.warnings:
        context.log.warning(f"seed_{seed}: {warning}")
    rows = write_rotation(spec, plan, work)
    context.log.info(f"seed_{seed}: " + ", ".join(f"{t} {n:,} rows" for t, n in rows.items()))
    return f"seed_{seed}", rows


@op(description="Rows written per table per rotation, in seed order, with the tables' schema.")
def rotation_rows(context: OpExecutionContext, spec: Spec, written: list,
                  evalpack: EvalpackResource) -> Output[dict]:
    by_rotation = dict(written)
    rows: Rows = {f"seed_{s}": by_rotation[f"seed_{s}"] for s in spec.seeds()}
    work = evalpack.require_work_dir(context.partition_key)
    files = sorted(p for s in spec.seeds() for p in (work / rotation_dir(s) / "tables").iterdir())
    metadata = {
        "rows": MetadataValue.md(rows_markdown(rows)),
        "rows_per_table": MetadataValue.json(rows),
        "dagster/row_count": sum(n for counts in rows.values() for n in counts.values()),
        "dagster/column_schema": column_schema(spec),
        "rotations": MetadataValue.json(list(rows)),
        "folder": MetadataValue.path(str(work / "rotations")),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
    }
    metadata.update({f"schema/{t.name}": table_schema(spec, t) for t in spec.tables})
    return Output(rows, metadata=metadata)


@graph_asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"parquet", "csv"})
def rotation_tables(spec: Spec) -> dict:
    """Every rotation's tables under ``rotations/seed_<n>/tables/``: one step per rotation, run in parallel."""
    written = rotation_seeds(spec).map(lambda seed: write_rotation_tables(spec, seed))
    return rotation_rows(spec, written.collect())
