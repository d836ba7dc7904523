"""evalpack export against a pack whose tables expand without limit once written (a4: a 3.2 MB orders.parquet of 1M
rows of ~2 KB text, re-attested, wrote a 2.06 GB SQLite file in 117 s at 1.23 GB of memory).

Before anything is written each rotation's size once exported is estimated from a streaming scan of its Parquet
files; over the bound (:data:`evalpack.interop.exports.MAX_EXPORT_FLOOR`, :data:`evalpack.interop.exports.MAX_EXPORT_EXPANSION`)
or over the free space at ``-o`` it is one line, exit 2, nothing left behind. The SQLite writer turns a bounded
number of bytes at a time into Python values. A pack evalpack built exports exactly as before.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import copy_pack, one_line_error

from evalpack.cli import main
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import quote_ident, quote_literal
from evalpack.dialects import common
from evalpack.dialects.common import Comments, comments_of, keys_of, parquet_batches
from evalpack.dialects.sqlite import sqlite_ddl, sqlite_value, write_sqlite
from evalpack.interop import exports
from evalpack.pack.attest import attest, now_utc

BOMB_ROWS, BOMB_WIDTH = 20_000, 2_000  # ~40 MB of text once written, from ~0.1 MB of Parquet


def bomb(retail_pack: Path, folder: Path) -> tuple[Path, Path]:
    """A copy of the retail pack whose first rotation's orders.parquet holds BOMB_ROWS near-identical rows of
    BOMB_WIDTH characters of text (the manifest's row count rewritten to match), re-attested (unsigned); the pack
    and the table file."""
    pack = copy_pack(retail_pack, folder / "bomb")
    rotation = PackLayout(pack).rotations()[0]
    table = PackLayout(pack).tables(rotation) / "orders.parquet"
    with duckdb.connect() as con:
        con.execute(f"""COPY (SELECT range AS order_id, 1 + range % 2000 AS customer_id, 1 AS channel,
            CAST(1.00 AS DECIMAL(18,2)) AS amount, false AS refunded, DATE '2025-01-01' AS ordered_at,
            repeat('x', {BOMB_WIDTH}) || range AS note, 'placed' AS status,
            CAST(1.10 AS DECIMAL(18,2)) AS gross_amount, DATE '2025-01-02' AS shipped_on FROM range({BOMB_ROWS}))
            TO {quote_literal(str(table))} (FORMAT parquet, COMPRESSION zstd)""")
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["tables"]["orders"]["rows"][rotation] = BOMB_ROWS
    (pack / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (pack / "attestation.intoto.json").unlink()
    attest(pack, external_parameters={}, resolved_dependencies=[], started=now_utc(), finished=now_utc())
    return pack, table




def nothing_left(out: Path) -> None:
    """No ``out``, no staging folder beside it, not even the folder made for it."""
    assert not out.parent.exists(), sorted(p.name for p in out.parent.iterdir())


@pytest.mark.parametrize("fmt", ["sqlite", "bird", "spider", "postgres"])
def test_a_table_that_expands_past_the_bound_is_refused_in_one_line_quickly_with_nothing_written(
        retail_pack, tmp_path, monkeypatch, capsys, fmt):
    pack, table = bomb(retail_pack, tmp_path)
    monkeypatch.setattr(exports, "MAX_EXPORT_FLOOR", 4 << 20, raising=False)  # 4 MiB: the bomb's ~40 MB is over
    monkeypatch.delenv(exports.DSN_ENV, raising=False)
    out = tmp_path / "new" / "out"
    started = time.monotonic()
    assert main(["export", str(pack), "--format", fmt, "-o", str(out)]) == 2
    elapsed = time.monotonic() - started
    line = one_line_error(capsys.readouterr().err)
    assert str(table) in line and "bound" in line and "MB" in line, line
    assert elapsed < 10, f"refused after {elapsed:.1f} s"
    nothing_left(out)


def test_an_export_larger_than_the_free_space_at_out_is_refused_in_one_line(retail_pack, tmp_path, monkeypatch,
                                                                            capsys):
    monkeypatch.setattr(exports, "free_bytes", lambda path: 1 << 20, raising=False)  # 1 MiB free everywhere
    out = tmp_path / "new" / "out"
    assert main(["export", str(retail_pack), "--format", "sqlite", "-o", str(out)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "needs about" in line and "free" in line, line
    nothing_left(out)


def test_the_estimate_of_a_pack_evalpack_built_is_close_to_what_is_written(retail_pack, tmp_path):
    manifest = json.loads((retail_pack / "manifest.json").read_text())
    columns = {t: dict(info["columns"]) for t, info in manifest["tables"].items()}
    keys = keys_of(manifest)
    for rotation in PackLayout(retail_pack).rotations():
        tables = PackLayout(retail_pack).tables(rotation)
        estimate = sum(size for _, size in exports.estimate_rotation(tables, columns, keys))
        write_sqlite(tables, columns, tmp_path / f"{rotation}.sqlite", keys=keys)
        actual = (tmp_path / f"{rotation}.sqlite").stat().st_size
        assert 0.8 * actual <= estimate <= 1.5 * actual, (rotation, estimate, actual)
        parquet = sum(p.stat().st_size for p in tables.glob("*.parquet"))
        assert estimate < exports.MAX_EXPORT_EXPANSION * parquet  # far from the bound


def test_the_sqlite_writer_turns_a_bounded_number_of_bytes_into_python_values_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": pa.array(range(3000), pa.int64()), "note": [f"{i}" + "y" * 10_000
                                                                                for i in range(3000)]}), path)
    monkeypatch.setattr(common, "BATCH_BYTES", 1 << 20, raising=False)
    batches = list(parquet_batches(path, ["id", "note"]))
    assert sum(b.num_rows for b in batches) == 3000
    assert max(b.nbytes for b in batches) <= 1 << 20, max(b.nbytes for b in batches)


def reference_sqlite(tables_dir: Path, columns: dict, keys, path: Path, comments: Comments = Comments()) -> None:
    """The rotation as evalpack wrote it before exports were bounded: each table read whole, one transaction (the
    schema with the data dictionary's comments, as the export writes it since)."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=4096")
    con.execute("PRAGMA journal_mode=OFF")
    with con:
        for table, cols in columns.items():
            con.execute(sqlite_ddl(table, cols, keys, comments))
            rows = pq.read_table(tables_dir / f"{table}.parquet", columns=list(cols)).to_pylist()
            con.executemany(f"INSERT INTO {quote_ident(table)} VALUES ({', '.join('?' * len(cols))})",
                            [[sqlite_value(row[c]) for c in cols] for row in rows])
        for fk in keys.foreign:
            con.execute(f"CREATE INDEX {quote_ident(f'{fk.child_table}_{fk.child_column}')} ON "
                        f"{quote_ident(fk.child_table)} ({quote_ident(fk.child_column)})")
    con.close()


@pytest.mark.parametrize("fmt", ["sqlite", "bird"])
def test_a_pack_evalpack_built_exports_byte_for_byte_as_before(retail_pack, tmp_path, fmt):
    out = tmp_path / "out"
    assert main(["export", str(retail_pack), "--format", fmt, "-o", str(out)]) == 0
    manifest = json.loads((retail_pack / "manifest.json").read_text())
    columns = {t: dict(info["columns"]) for t, info in manifest["tables"].items()}
    keys = keys_of(manifest)
    assert not keys.linked
    comments = comments_of(PackLayout(retail_pack).read_dictionary())
    assert comments.columns  # the schema carries the dictionary
    for rotation in PackLayout(retail_pack).rotations():
        reference = tmp_path / f"{rotation}.sqlite"
        reference_sqlite(PackLayout(retail_pack).tables(rotation), columns, keys, reference, comments)
        db = f"retail_{rotation}"
        written = out / (f"{rotation}.sqlite" if fmt == "sqlite" else f"dev_databases/{db}/{db}.sqlite")
        assert written.read_bytes() == reference.read_bytes(), rotation
