"""Write a rotation's tables to Parquet and CSV, streaming batch by batch."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from evalpack.generate import arrow_schema, table_batches
from evalpack.plan import RotationPlan
from evalpack.spec import Spec

PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "write_statistics": True, "use_dictionary": True}
# Row groups of whole chunks (a month of a time-planned table), merged up to at least this many
# rows: readers that size batches by the first row group (datasets) stay fast, and DuckDB skips
# the row groups outside a queried window by their statistics.
MIN_ROW_GROUP = 100_000
MAX_ROW_GROUP = 1 << 20


def rotation_dir(seed: int) -> str:
    """The POSIX folder of a rotation inside a pack (a valid Hub split name)."""
    return f"rotations/seed_{seed}"


def write_table(spec: Spec, plan: RotationPlan, table: str, pack_dir: Path) -> int:
    """Generate one table of one rotation into its Parquet and CSV files; returns the rows written."""
    out = pack_dir / rotation_dir(plan.seed) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    schema = arrow_schema(spec, spec.table(table))
    count = 0
    with pq.ParquetWriter(out / f"{table}.parquet", schema, **PARQUET_OPTIONS) as pw, \
            pacsv.CSVWriter(out / f"{table}.csv", schema) as cw:
        pending: list[pa.RecordBatch] = []
        for batch in table_batches(spec, plan, table):
            cw.write_batch(batch)
            count += batch.num_rows
            pending.append(batch)
            if sum(b.num_rows for b in pending) >= MIN_ROW_GROUP:
                pw.write_table(pa.Table.from_batches(pending, schema), row_group_size=MAX_ROW_GROUP)
                pending = []
        if pending or not count:
            pw.write_table(pa.Table.from_batches(pending, schema), row_group_size=MAX_ROW_GROUP)
    return count


def write_rotation(spec: Spec, plan: RotationPlan, pack_dir: Path, progress=None) -> dict[str, int]:
    """Generate and write every table of one rotation; returns rows written per table."""
    rows: dict[str, int] = {}
    for table in spec.tables:
        rows[table.name] = write_table(spec, plan, table.name, pack_dir)
        if progress:
            progress(plan.seed, table.name, rows[table.name])
    return rows


def duckdb_types(spec: Spec) -> dict[str, dict[str, str]]:
    """table -> {column: DuckDB type} of the fixed Arrow schema (pins CSV reads to Parquet's types)."""
    names = {"int64": "BIGINT", "string": "VARCHAR", "bool": "BOOLEAN", "date32[day]": "DATE",
             "timestamp[us]": "TIMESTAMP"}
    out = {}
    for table in spec.tables:
        cols = {}
        for field in arrow_schema(spec, table):
            t = str(field.type)
            cols[field.name] = (f"DECIMAL({field.type.precision},{field.type.scale})"
                                if t.startswith("decimal") else names[t])
        out[table.name] = cols
    return out
