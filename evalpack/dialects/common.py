"""What every dialect shares: the pack's declared keys, what its data dictionary says of each table and column (in a
form a database's schema can carry), a rotation's table files read a bounded batch at a time, a file written whole or
not at all, and the limits a gold query runs under in a dialect's engine."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import DAMAGED
from evalpack.core.scoring import (
    DEFAULT_MEMORY_MB,
    first_line,
)
from evalpack.spec.dictionary import column_meaning

Run = Callable[[str], list[tuple]]  # a gold query run in a dialect's engine: its rows
GOLD_SECONDS = 120.0  # a gold query's time in a dialect's engine before it is that question's error
GOLD_MEMORY_MB = DEFAULT_MEMORY_MB  # and its working memory in SQLite (the scorer's default for a candidate)


@dataclass(frozen=True)
class ForeignKey:
    child_table: str
    child_column: str
    parent_table: str
    parent_column: str


@dataclass(frozen=True)
class Keys:
    """The keys a pack declares: a primary key column per table (where it has one) and the foreign keys."""

    primary: tuple[tuple[str, str], ...] = ()  # (table, column)
    foreign: tuple[ForeignKey, ...] = ()
    linked: tuple[ForeignKey, ...] = ()  # an imported pack's links: both columns indexed, not declared as keys

    def primary_of(self, table: str) -> str | None:
        return dict(self.primary).get(table)

    def foreign_of(self, table: str) -> list[ForeignKey]:
        return [fk for fk in self.foreign if fk.child_table == table]


def keys_of(manifest: Mapping[str, Any]) -> Keys:
    """The keys ``manifest.json`` declares: ``primary_keys`` (table -> column) and ``declared_links`` (the
    foreign keys, whose parent columns are unique by the spec's rule). A pack written before ``primary_keys``
    existed gets the parent columns of its links as primary keys."""
    links = manifest.get("declared_links") or []
    foreign = tuple(ForeignKey(str(e["child_table"]), str(e["child_column"]), str(e["parent_table"]),
                               str(e["parent_column"])) for e in links if isinstance(e, dict))
    given = manifest.get("primary_keys")
    if isinstance(given, dict):
        primary = {str(t): str(c) for t, c in given.items() if isinstance(c, str)}
    else:
        primary = {}
        for fk in foreign:
            primary.setdefault(fk.parent_table, fk.parent_column)
    linked = []  # an import's links (manifest.json -> relationships: "child": "t.c", "parent": "t.c")
    for entry in manifest.get("relationships") or ():
        sides = [entry.get("child"), entry.get("parent")] if isinstance(entry, dict) else []
        parts = [side.split(".") for side in sides if isinstance(side, str)]
        if len(parts) == 2 and all(len(part) == 2 and all(part) for part in parts):
            link = ForeignKey(*parts[0], *parts[1])
            if link not in foreign and link not in linked:
                linked.append(link)
    return Keys(tuple(primary.items()), foreign, tuple(linked))


# --------------------------------------------------------------------------- the dictionary in a schema

MAX_COMMENT_CHARS = 1_000  # a table's or a column's comment is cut to this many characters ...
MAX_TABLE_COMMENT_CHARS = 64_000  # ... and a table's column comments take at most this many (its CREATE TABLE stays
# far below the statement length the SQLite sandbox accepts, evalpack.dialects.sqlite.open_sqlite_sandbox)
# what a comment may not hold: line breaks and other control characters (a `--` comment ends at a line break, so one
# would let a dictionary's words write SQL), and lone surrogates (no UTF-8 for them)
_UNPRINTABLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\ud800-\udfff]+")


def comment_text(text: str) -> str:
    """``text`` as one line a schema comment can hold: every run of whitespace or control characters one space, lone
    surrogates dropped, at most :data:`MAX_COMMENT_CHARS` characters (a cut one ends in ``...``)."""
    line = _UNPRINTABLE.sub(" ", text).strip()
    return line if len(line) <= MAX_COMMENT_CHARS else line[:MAX_COMMENT_CHARS - 3].rstrip() + "..."


def column_words(entry: Mapping[str, Any], *, values: bool = True) -> str:
    """A column of ``dictionary.json``'s meaning (:func:`evalpack.spec.dictionary.column_meaning`: its description,
    unit and, with ``values``, what each stored value stands for) and the column it refers to where the meaning does
    not say."""
    meaning = column_meaning(entry if values else {**entry, "values": None})
    refers = entry.get("refers_to")
    return "; ".join(p for p in (meaning, f"refers to {refers}" if refers and refers not in meaning else "") if p)


def column_comment(entry: Mapping[str, Any]) -> str:
    """A column of ``dictionary.json`` in one line: what questions call it, then its meaning (:func:`column_words`):
    ``order amount: an amount in EUR, to the cent``."""
    label, meaning = entry.get("label") or "", column_words(entry)
    return comment_text(f"{label}: {meaning}" if label and meaning else label or meaning)


def table_comment(entry: Mapping[str, Any]) -> str:
    """A table of ``dictionary.json`` in one line: what one row is, and its description (``One row is one order.``)."""
    row, description = entry.get("row"), entry.get("description")
    return comment_text(" ".join(p for p in (f"One row is {row}." if row else "", description or "") if p))


@dataclass(frozen=True)
class Comments:
    """What the pack's data dictionary says of each table and column, one line each (:func:`comments_of`), for the
    schema of a database the pack is exported to: comments inside SQLite's CREATE TABLE, PostgreSQL's COMMENT ON. A
    pack without a dictionary has none, and its schema is as it was before the dictionary."""

    tables: tuple[tuple[str, str], ...] = ()  # (table, comment)
    columns: tuple[tuple[str, str, str], ...] = ()  # (table, column, comment)

    def table(self, table: str) -> str | None:
        return dict(self.tables).get(table)

    def column(self, table: str, column: str) -> str | None:
        return next((text for t, c, text in self.columns if (t, c) == (table, column)), None)


def comments_of(dictionary: Mapping[str, Any] | None) -> Comments:
    """The comments of a pack's ``dictionary.json`` (as :meth:`evalpack.core.layout.PackLayout.read_dictionary` reads
    it, its shape checked; None: no dictionary, no comments). Empty ones are left out, and a table's column comments
    stop at :data:`MAX_TABLE_COMMENT_CHARS`."""
    if not dictionary:
        return Comments()
    tables, columns = [], []
    for table in dictionary.get("tables") or ():
        name, budget = table["name"], MAX_TABLE_COMMENT_CHARS
        if text := table_comment(table):
            tables.append((name, text))
        for column in table.get("columns") or ():
            text = column_comment(column)
            if text and len(text) <= budget:
                budget -= len(text)
                columns.append((name, column["name"], text))
    return Comments(tuple(tables), tuple(columns))


BATCH_BYTES = 16 * 2**20  # Arrow bytes of a table file turned into Python values at a time (a batch's rows)
BATCH_ROWS = 1 << 16  # and at most this many rows


def parquet_batches(path: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of a pack's table file, ``columns`` only (the manifest's), in file order, each of at most
    :data:`BATCH_BYTES` (one row larger than that alone) and :data:`BATCH_ROWS` rows: the rows read at a time follow
    the file's own sizes, and a batch larger than its file said is sliced. EvalpackError naming the file when it
    cannot be read as Parquet or lacks one of ``columns`` (:func:`table_file`)."""
    parquet = table_file(path, columns)
    try:
        for batch in parquet.iter_batches(columns=columns, batch_size=_rows_per_batch(parquet, columns)):
            yield from _sliced(batch)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(path, exc) from None


def table_file(path: Path, columns: Iterable[str]) -> pq.ParquetFile:
    """A pack's table file, opened; EvalpackError naming the file when it is missing, cannot be read as Parquet or
    lacks one of ``columns`` (the manifest's): a pack from elsewhere may hold anything there."""
    try:
        parquet = pq.ParquetFile(path)
    except FileNotFoundError:
        raise EvalpackError(f"{path}: no such table file; manifest.json lists the table {path.stem!r}; {DAMAGED}") \
            from None
    except (pa.ArrowException, OSError) as exc:
        raise unreadable_table(path, exc) from None
    missing = [c for c in columns if c not in parquet.schema_arrow.names]
    if missing:
        raise EvalpackError(f"{path}: no column {missing[0]!r}, which manifest.json lists for table "
                            f"{path.stem!r}; {DAMAGED}")
    return parquet


def unreadable_table(path: Path, exc: BaseException) -> EvalpackError:
    """The error for a table file that cannot be read as Parquet, naming it and why."""
    return EvalpackError(f"{path}: not a Parquet table evalpack can read ({first_line(exc)}); {DAMAGED}")


def _rows_per_batch(parquet: pq.ParquetFile, columns: list[str]) -> int:
    """How many rows of ``columns`` take about :data:`BATCH_BYTES` by the file's largest row group (its uncompressed
    sizes), within 1 .. :data:`BATCH_ROWS`."""
    meta, wanted, widest = parquet.metadata, set(columns), 0.0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns)
                   if group.column(c).path_in_schema in wanted)
        widest = max(widest, size / max(1, group.num_rows))
    return int(max(1, min(BATCH_ROWS, BATCH_BYTES // max(1.0, widest))))


def _sliced(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in consecutive slices of at most :data:`BATCH_BYTES` each (a row larger than that alone)."""
    if batch.nbytes <= BATCH_BYTES or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, batch.num_rows * BATCH_BYTES // batch.nbytes)
    for start in range(0, batch.num_rows, rows):
        yield from _sliced(batch.slice(start, rows))


@contextlib.contextmanager
def file_into_place(path: Path) -> Iterator[Path]:
    """Write a file at ``path`` whole or not at all: yields an empty temporary file beside it, which is made
    readable by all and renamed onto ``path`` when the block ends without an error, and removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(name)
        os.chmod(name, 0o644)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise


