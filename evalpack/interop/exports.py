"""A pack where people already evaluate: SQLite databases, PostgreSQL dumps, and the BIRD and Spider layouts.

``evalpack export PACK --format F -o DIR`` writes one format of a finished pack; a spec's ``exports:`` builds the
same files inside the pack (``exports/<format>/``), attested with it, their verification in the manifest's
``dialects`` section. Either way every question goes through :func:`evalpack.dialects.engines.verify_in_dialects` first: its
gold SQL, translated, must return the pack's answer on every rotation in the dialect's real engine, or the
question is left out of that format with the reason. Only public questions are exported: a holdout question has
no public gold SQL or answer, and a question to decline (``"answerable": false``) has no gold SQL to export.

Formats (``DIR`` is the ``-o`` folder, or ``PACK/exports/<format>``):

* ``sqlite``: ``<rotation>.sqlite`` per rotation (:func:`evalpack.dialects.sqlite.write_sqlite`) and ``questions.jsonl``,
  the verified questions with their SQLite gold SQL (``gold_sql``; DuckDB's in ``duckdb_sql``).
* ``postgres``: ``<rotation>.sql`` per rotation, a plain dump that ``psql -f`` restores
  (``evalpack.dialects.postgres.write_dump``), and, when a server verified them, ``questions.jsonl`` with PostgreSQL gold SQL.
* ``bird``: ``dev.json`` (question_id, db_id, question, evidence, SQL, difficulty), ``dev_tables.json``,
  ``dev.sql`` and ``dev_gold.sql`` (``SQL<TAB>db_id`` per line, BIRD's gold file under both its names) and
  ``dev_databases/<db_id>/<db_id>.sqlite`` with
  BIRD's ``database_description/<table>.csv`` beside it (from the pack's data dictionary: each column's
  description, and what its stored values stand for as the ``value_description``).
* ``spider``: ``dev.json`` (db_id, question, query), ``tables.json`` (column names, types, primary and foreign
  keys), ``dev_gold.sql`` and ``database/<db_id>/<db_id>.sqlite``.

The data dictionary (``dictionary.json``) travels in every database's schema: ``--`` comments in SQLite's CREATE
TABLE (``.schema`` shows them), ``COMMENT ON`` in the PostgreSQL dumps (:class:`evalpack.dialects.common.Comments`);
a pack without one (an import) is exported as before. ``evalpack export --no-evidence`` writes the questions without
their evidence (BIRD's "without evidence" setting: dev.json's ``evidence`` is ``""``, questions.jsonl's ``null``);
``export.json`` says which (``"evidence": "with"`` or ``"without"``).

One db_id per rotation (``<pack>_<rotation>``): with rotated answers a question's answer differs per rotation, so
each question appears once per db_id. ``evalpack export`` also writes ``export.json``, what was exported and what was
left out and why; the build records the same in ``manifest.json``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import logging
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from evalpack.core import cache
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import DAMAGED, PackLayout
from evalpack.core.scoring import (
    answer_type_of,
    check_integrity,
    is_unanswerable,
    load_questions,
    printable,
    quote_ident,
    quote_literal,
    scorable,
    sha256_files,
)
from evalpack.dialects import DIALECTS
from evalpack.dialects.common import (
    Comments,
    Keys,
    column_words,
    comments_of,
    file_into_place,
    keys_of,
    table_file,
    unreadable_table,
)
from evalpack.dialects.engines import DialectEngine, DialectResult, Drop, engine_for, verify_in_dialects
from evalpack.dialects.postgres import DSN_ENV, dsn_from
from evalpack.dialects.sqlite import sqlite_type, write_sqlite
from evalpack.pack.certify import dumps
from evalpack.spec.grammar import EXPORT_FORMATS

FORMATS = EXPORT_FORMATS
REPORT = "export.json"
QUESTIONS = "questions.jsonl"
VERIFICATION_RULE = (
    "Each public question's gold SQL is translated from DuckDB's dialect with sqlglot (and evalpack.dialects.engines' "
    "rewrites), run on every rotation in the dialect's engine (SQLite: the standard library's sqlite3 on the "
    "rotation's tables as the exported database holds them; PostgreSQL: a server) and compared with the pack's "
    "answer by the scorer's rules (rule spider, in order when the gold SQL orders its result). A question that "
    "cannot be translated, fails or differs on any rotation is dropped from that dialect only, with the reason; "
    "the DuckDB pack is unchanged. Holdout questions are not exported (no public gold SQL or answer).")
SPIDER_TYPES = {"INTEGER": "number", "REAL": "number"}
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True)
class Source:
    """What an export reads: the pack's name, its public question records, rotation name -> tables folder, the
    tables' DuckDB column types (manifest.json's ``tables``), the declared keys, the column meanings (manifest.json's
    ``semantics``), the pack's data dictionary (``dictionary.json``; None when the pack has none, as an imported
    one) and the comments a database's schema carries of it, and whether the questions' evidence is exported."""

    name: str
    records: tuple[dict, ...]
    rotations: tuple[tuple[str, Path], ...]
    columns: dict[str, dict[str, str]]
    keys: Keys
    semantics: dict
    dictionary: dict | None = None
    comments: Comments = Comments()
    evidence: bool = True  # False: BIRD's "without evidence" setting (dev.json's evidence "", questions.jsonl's null)
    written: dict[str, Path] = field(default_factory=dict, compare=False, repr=False)  # rotation -> its SQLite file

    @classmethod
    def of(cls, folder: Path, records: Iterable[dict], manifest: Mapping[str, Any], *, evidence: bool = True) -> Source:
        """The source of the pack (built or being built) in ``folder`` with these records and manifest (its
        dictionary read from the folder: a build writes it before the exports)."""
        layout = PackLayout(folder)
        tables = manifest.get("tables") or {}  # its shape checked as read (evalpack.core.layout.check_manifest)
        # names that become paths (a table's file, a BIRD/Spider database id) must stay inside their folders
        for key, name in [("pack", manifest.get("pack")), *(("tables", t) for t in tables)]:
            if not isinstance(name, str) or not PLAIN_NAME.fullmatch(name):
                raise EvalpackError(f"{layout.manifest}: {key}: {printable(repr(name))} is not a plain name (letters, "
                                    f"digits, '_', '-' and '.', not starting with '.'); {DAMAGED}")
        columns = {t: dict(info["columns"]) for t, info in tables.items()}
        dictionary = layout.read_dictionary()  # its shape checked as read (evalpack.core.layout.check_dictionary)
        return cls(str(manifest.get("pack")), tuple(records),
                   tuple((r, layout.tables(r)) for r in layout.rotations()), columns, keys_of(manifest),
                   dict(manifest.get("semantics") or {}), dictionary, comments_of(dictionary), evidence)

    def db_id(self, rotation: str) -> str:
        """The BIRD/Spider database id of a rotation (``retail_seed_42``)."""
        return f"{self.name}_{rotation}"

    def column_entry(self, table: str, column: str) -> dict | None:
        """The dictionary's entry of a column (``name``, ``label``, ``description``, ``unit``, ``values``,
        ``refers_to``), or None."""
        entry = next((t for t in (self.dictionary or {}).get("tables") or () if t["name"] == table), None)
        return next((c for c in (entry or {}).get("columns") or () if c["name"] == column), None)

    def evidence_of(self, record: dict) -> str | None:
        """A question's evidence as exported: its own, or None when the export is without evidence."""
        return record.get("evidence") if self.evidence else None

    @property
    def evidence_setting(self) -> str:
        """``with`` or ``without`` (evidence), as the export's report and the episode reports of ``evalpack serve``
        say it."""
        return "with" if self.evidence else "without"


def left_out(record: dict) -> str | None:
    """Why a question record is not exported at all, or None: ``holdout`` (no public gold SQL or answer),
    ``unanswerable`` (declining is its answer: no gold SQL), ``no gold SQL`` (an imported criteria-only item)."""
    if record.get("split") == "holdout":
        return "holdout"
    if is_unanswerable(record):
        return "unanswerable"
    if not scorable(record):
        return "no gold SQL"
    return None


def dialects_needed(formats: Iterable[str]) -> tuple[str, ...]:
    """The dialects the formats are written in, in DIALECTS order."""
    wanted = {DIALECT_OF[f] for f in formats}
    return tuple(d for d in DIALECTS if d in wanted)


def engines(dialects: Iterable[str], keys: Keys, postgres_dsn: str | None, comments: Comments = Comments()
            ) -> list[DialectEngine]:
    """One engine per dialect that can be verified: PostgreSQL only with a DSN; SQLite's databases with the data
    dictionary's ``comments`` in their schema, as the export writes them."""
    return [engine_for(d, postgres_dsn=postgres_dsn, keys=keys, comments=comments) for d in dialects
            if d != "postgres" or postgres_dsn]


@contextlib.contextmanager
def sqlglot_quiet() -> Iterator[None]:
    """sqlglot's warnings unprinted (``'LOAD httpfs' contains unsupported syntax. Falling back to parsing as a
    'Command'``, on stderr through the ``sqlglot`` logger): a gold query it cannot translate is dropped, and the
    export says why on its own line. Errors still show; evalpack's own messages are not logged."""
    logger = logging.getLogger("sqlglot")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


# the code a dialect verification's outcome depends on: a change to any of it verifies again
VERIFYING_CODE = ("evalpack.dialects.engines", "evalpack.dialects.translate", "evalpack.dialects.common",
                  "evalpack.dialects.sqlite", "evalpack.core.scoring")


def verify(source: Source, formats: Iterable[str], postgres_dsn: str | None) -> dict[str, DialectResult]:
    """The exportable questions of ``source`` verified in the dialects of ``formats`` (PostgreSQL only with a DSN).

    SQLite's verdicts are remembered (evalpack.core.cache) by the questions, the tables' bytes, the keys, the
    dictionary's comments, SQLite's version and the code: exporting a pack as BIRD after Spider, or again, reruns
    nothing (retail: 113-159 s under load, each time). A PostgreSQL server's answers are its own: never remembered."""
    records = [r for r in source.records if left_out(r) is None]
    dialects = dialects_needed(formats)

    def run() -> dict[str, DialectResult]:
        with sqlglot_quiet():
            return verify_in_dialects(records, dict(source.rotations), source.columns,
                                      engines(dialects, source.keys, postgres_dsn, source.comments))

    if postgres_dsn and "postgres" in dialects:
        return run()
    tables = {rotation: dict(zip((p.name for p in files), sha256_files(files)))
              for rotation, folder in source.rotations for files in [sorted(Path(folder).glob("*.parquet"))]}
    parts = [json.dumps(dialects), sqlite3.sqlite_version, json.dumps(records, sort_keys=True, default=str),
             json.dumps(source.columns, sort_keys=True), json.dumps(tables, sort_keys=True), repr(source.keys),
             repr(source.comments)]
    return cache.remembered("dialects", VERIFYING_CODE, parts, run, decode=_results_of, encode=_results_json)


def _results_json(results: Mapping[str, DialectResult]) -> dict:
    return {name: {"translated": r.translated, "drops": [dataclasses.asdict(d) for d in r.drops]}
            for name, r in results.items()}


def _results_of(stored: object) -> dict[str, DialectResult]:
    return {name: DialectResult(name, dict(entry["translated"]), tuple(Drop(**d) for d in entry["drops"]))
            for name, entry in dict(stored).items()}


def engine_name(dialect: str, postgres_dsn: str | None = None) -> str:
    """The engine a dialect is verified on, with its version (PostgreSQL's from the server, when there is one)."""
    if dialect == "sqlite":
        return f"SQLite {sqlite3.sqlite_version} (Python's sqlite3)"
    if not postgres_dsn:
        return "PostgreSQL"
    from evalpack.dialects.postgres import connect

    with connect(postgres_dsn) as con:
        version = con.info.server_version  # e.g. 150013
    return f"PostgreSQL {version // 10000}.{version % 10000}"


# --------------------------------------------------------------------------- the formats


def _verified(source: Source, result: DialectResult) -> list[dict]:
    """The records that verified in ``result``'s dialect, in question order."""
    return [r for r in source.records if r["id"] in result.translated]


def _questions_jsonl(source: Source, result: DialectResult, path: Path) -> None:
    lines = []
    for r in _verified(source, result):
        record = {**r, "gold_sql": result.translated[r["id"]], "duckdb_sql": r["gold_sql"], "dialect": result.dialect}
        if not source.evidence:
            record["evidence"] = None
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def _databases(source: Source, folder: Path, place: str) -> None:
    """One SQLite database per rotation at ``folder/<place>`` (``{db_id}``, ``{rotation}`` filled in); a rotation
    already written for another format of the same source is copied (the same bytes)."""
    for rotation, tables in source.rotations:
        target = folder / place.format(db_id=source.db_id(rotation), rotation=rotation)
        if rotation in source.written:
            with file_into_place(target) as name:
                shutil.copyfile(source.written[rotation], name)
        else:
            write_sqlite(tables, source.columns, target, keys=source.keys, comments=source.comments)
            source.written[rotation] = target


def write_sqlite_format(source: Source, result: DialectResult, folder: Path) -> None:
    """``<rotation>.sqlite`` per rotation and ``questions.jsonl`` (the verified questions in SQLite)."""
    _databases(source, folder, "{rotation}.sqlite")
    _questions_jsonl(source, result, folder / QUESTIONS)


def write_postgres_format(source: Source, result: DialectResult | None, folder: Path) -> None:
    """``<rotation>.sql`` per rotation (a plain dump), and ``questions.jsonl`` when a server verified them."""
    from evalpack.dialects.postgres import write_dump

    for rotation, tables in source.rotations:
        write_dump(tables, source.columns, folder / f"{rotation}.sql", primary_keys=dict(source.keys.primary),
                   links=source.keys.foreign, comments=source.comments)
    if result is not None:
        _questions_jsonl(source, result, folder / QUESTIONS)


def column_name(source: Source, table: str, column: str) -> str:
    """A column in words, as Spider's ``column_names`` gives it: the pack's meaning up to its first colon."""
    meaning = (source.semantics.get("tables", {}).get(table, {}).get("columns", {}).get(column))
    if isinstance(meaning, str) and ":" in meaning:
        return meaning.split(":", 1)[0].strip()
    return column.replace("_", " ")


def table_name(source: Source, table: str) -> str:
    row = source.semantics.get("tables", {}).get(table, {}).get("row")
    return row if isinstance(row, str) and row else table.replace("_", " ")


def tables_entry(source: Source, rotation: str) -> dict[str, Any]:
    """One database of Spider's ``tables.json`` (BIRD's ``dev_tables.json``): tables, columns (index 0 is ``*``),
    types, primary keys and foreign keys as column indexes."""
    from evalpack.dialects.sqlite import sqlite_type

    originals, names, types, index = [[-1, "*"]], [[-1, "*"]], ["text"], {}
    for t, (table, cols) in enumerate(source.columns.items()):
        for column, kind in cols.items():
            index[(table, column)] = len(originals)
            originals.append([t, column])
            names.append([t, column_name(source, table, column)])
            upper = kind.upper()
            types.append("boolean" if upper == "BOOLEAN" else "time" if upper.startswith(("DATE", "TIMESTAMP"))
                         else SPIDER_TYPES.get(sqlite_type(kind), "text"))
    primary = [index[(t, c)] for t, c in source.keys.primary if (t, c) in index]
    foreign = [[index[(fk.child_table, fk.child_column)], index[(fk.parent_table, fk.parent_column)]]
               for fk in source.keys.foreign + source.keys.linked
               if (fk.child_table, fk.child_column) in index and (fk.parent_table, fk.parent_column) in index]
    return {"db_id": source.db_id(rotation), "table_names_original": list(source.columns),
            "table_names": [table_name(source, t) for t in source.columns], "column_names_original": originals,
            "column_names": names, "column_types": types, "primary_keys": primary, "foreign_keys": foreign}


def _one_line(sql: str) -> str:
    return " ".join(sql.split())


def _write_json(path: Path, data: Any) -> None:
    path.write_bytes(dumps(data))


def difficulty_of(record: dict) -> str:
    """A question's BIRD level: its own, or (an imported question has none) the one evalpack gives its gold SQL
    (:func:`evalpack.questions.difficulty.label`): BIRD's evaluation.py counts the questions of each level and divides by it."""
    from evalpack.questions.difficulty import label

    return record.get("difficulty") or label(record["gold_sql"], answer_type_of(record))[0]


def write_bird_format(source: Source, result: DialectResult, folder: Path) -> None:
    """BIRD's dev layout: ``dev.json``, ``dev_tables.json``, ``dev.sql`` (and the same lines as ``dev_gold.sql``) and
    ``dev_databases/<db_id>/<db_id>.sqlite``."""
    entries, gold = [], []
    for rotation, _ in source.rotations:
        for r in _verified(source, result):
            sql = _one_line(result.translated[r["id"]])
            entries.append({"question_id": len(entries), "db_id": source.db_id(rotation), "question": r["question"],
                            "evidence": source.evidence_of(r) or "", "SQL": sql, "difficulty": difficulty_of(r),
                            "evalpack_id": r["id"]})
            gold.append(f"{sql}\t{source.db_id(rotation)}\n")
    _write_json(folder / "dev.json", entries)
    _write_json(folder / "dev_tables.json", [tables_entry(source, rotation) for rotation, _ in source.rotations])
    # BIRD's dev download names its gold file dev.sql; the evaluation.py of BIRD's repository opens dev_gold.sql
    for name in ("dev.sql", "dev_gold.sql"):
        (folder / name).write_text("".join(gold), encoding="utf-8")
    _databases(source, folder, "dev_databases/{db_id}/{db_id}.sqlite")
    for rotation, _ in source.rotations:
        write_descriptions(source, folder / "dev_databases" / source.db_id(rotation) / "database_description")


BIRD_FORMATS = {"INTEGER": "integer", "REAL": "real"}
DESCRIPTION_HEADER = ("original_column_name", "column_name", "column_description", "data_format", "value_description")


def write_descriptions(source: Source, folder: Path) -> None:
    """BIRD's ``database_description/<table>.csv``: per column its name in words, what it holds and its data format as
    the SQLite file stores it, and what its stored values stand for. From the pack's data dictionary
    (:func:`evalpack.dialects.common.column_words`, :func:`value_description`), else (a pack without one) from manifest.json's column
    meanings with no value description."""
    from evalpack.dialects.sqlite import sqlite_type

    folder.mkdir(parents=True, exist_ok=True)
    for table, cols in source.columns.items():
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(DESCRIPTION_HEADER)
        meanings = source.semantics.get("tables", {}).get(table, {}).get("columns", {})
        for column, kind in cols.items():
            upper = kind.upper()
            fmt = ("date" if upper == "DATE" else "datetime" if upper.startswith("TIMESTAMP")
                   else "integer (0 or 1)" if upper == "BOOLEAN" else BIRD_FORMATS.get(sqlite_type(kind), "text"))
            entry = source.column_entry(table, column)
            if entry is not None:  # the description without the values' meanings: they are the value description
                writer.writerow((column, entry.get("label") or column_name(source, table, column),
                                 column_words(entry, values=False), fmt, value_description(entry)))
                continue
            meaning = meanings.get(column)
            what = meaning.split(":", 1)[1].strip() if isinstance(meaning, str) and ":" in meaning else ""
            writer.writerow((column, column_name(source, table, column), what, fmt, ""))
        (folder / f"{table}.csv").write_text(out.getvalue(), encoding="utf-8")


def value_description(entry: Mapping[str, Any]) -> str:
    """BIRD's ``value_description`` of a dictionary column: what each stored value stands for, as BIRD's own files
    give it (``web: web; app: app; small_business: small business``); '' for a column without listed values."""
    return "; ".join(f"{v['value']}: {v['meaning']}" for v in entry.get("values") or ())


def write_spider_format(source: Source, result: DialectResult, folder: Path) -> None:
    """Spider's layout: ``dev.json``, ``tables.json``, ``dev_gold.sql`` and ``database/<db_id>/<db_id>.sqlite``."""
    entries, gold = [], []
    for rotation, _ in source.rotations:
        for r in _verified(source, result):
            sql = _one_line(result.translated[r["id"]])
            entries.append({"db_id": source.db_id(rotation), "question": r["question"], "query": sql,
                            "question_toks": r["question"].split(), "evalpack_id": r["id"]})
            gold.append(f"{sql}\t{source.db_id(rotation)}\n")
    _write_json(folder / "dev.json", entries)
    _write_json(folder / "tables.json", [tables_entry(source, rotation) for rotation, _ in source.rotations])
    (folder / "dev_gold.sql").write_text("".join(gold), encoding="utf-8")
    _databases(source, folder, "database/{db_id}/{db_id}.sqlite")


def write_format(fmt: str, source: Source, results: Mapping[str, DialectResult], folder: Path) -> None:
    """Write format ``fmt`` of ``source`` into ``folder`` (created), from the verification ``results``."""
    folder.mkdir(parents=True, exist_ok=True)
    dialect, writer = FORMAT_WRITERS[fmt]
    writer(source, results.get(dialect), folder)


# each export format (evalpack.spec.grammar.EXPORT_FORMATS: the spec's `exports:` and the CLI's --format read it),
# the dialect its gold SQL is verified in and the function that writes it
FORMAT_WRITERS = {"sqlite": ("sqlite", write_sqlite_format), "postgres": ("postgres", write_postgres_format),
                  "bird": ("sqlite", write_bird_format), "spider": ("sqlite", write_spider_format)}
assert tuple(FORMAT_WRITERS) == EXPORT_FORMATS, "one writer per export format, in the spec's order"
DIALECT_OF = {fmt: dialect for fmt, (dialect, _) in FORMAT_WRITERS.items()}


# --------------------------------------------------------------------------- reports


def left_out_counts(source: Source) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in source.records:
        why = left_out(r)
        if why:
            counts[why] = counts.get(why, 0) + 1
    return counts


def dialect_entry(dialect: str, result: DialectResult | None, postgres_dsn: str | None = None) -> dict[str, Any]:
    """A dialect's verification as the manifest and export.json record it."""
    if result is None:
        return {"engine": engine_name(dialect), "verified_on_engine": False,
                "note": f"not verified: no PostgreSQL server was given (--postgres-dsn or ${DSN_ENV}); the dumps are "
                        "written, no translated gold SQL is"}
    return {"engine": engine_name(dialect, postgres_dsn), "verified_on_engine": True, **result.to_dict()}


def dialects_section(source: Source, formats: Iterable[str], results: Mapping[str, DialectResult],
                     postgres_dsn: str | None = None) -> dict[str, Any]:
    """The manifest's ``dialects`` section: the rule, what was left out of every export, each dialect's result."""
    return {"rule": VERIFICATION_RULE, "formats": list(formats), "left_out": left_out_counts(source),
            **{d: dialect_entry(d, results.get(d), postgres_dsn) for d in dialects_needed(formats)}}


# --------------------------------------------------------------------------- the build and the CLI


def check_exports(formats: Iterable[str], postgres_dsn: str | None = None) -> str | None:
    """The DSN the exports will verify PostgreSQL on (None when they need none); EvalpackError when the ``postgres``
    format has no server (``postgres_dsn``, default ``$EVALPACK_POSTGRES_DSN``): nothing ships unverified."""
    dsn = dsn_from(postgres_dsn)
    if "postgres" in formats and not dsn:
        raise EvalpackError(f"exports: postgres: a pack ships only what was verified, and its PostgreSQL gold SQL "
                            f"needs a server: set {DSN_ENV} (postgresql://USER@HOST:PORT/DB) or remove postgres from "
                            "exports (`evalpack export PACK --format postgres` writes the dumps without one)")
    return dsn


def build_exports(folder: Path, formats: Iterable[str], records: Iterable[dict], manifest: Mapping[str, Any],
                  postgres_dsn: str | None = None) -> dict[str, Any]:
    """The spec's ``exports:`` of a pack being built in ``folder``, written to ``exports/<format>/``; returns the
    manifest's ``dialects`` section. Nothing is shipped unverified: the ``postgres`` format needs a server
    (``postgres_dsn``, default ``$EVALPACK_POSTGRES_DSN``), else EvalpackError."""
    formats = [f for f in FORMATS if f in set(formats)]
    dsn = check_exports(formats, postgres_dsn)
    source = Source.of(folder, records, manifest)
    results = verify(source, formats, dsn)
    for fmt in formats:
        write_format(fmt, source, results, PackLayout(folder).export(fmt))
    return dialects_section(source, formats, results, dsn)


def _check_out(out: Path, pack: Path) -> None:
    """Refuse an ``-o`` that exists and is not an empty folder, or that lies inside the pack (which it would
    change: its attestation lists every file)."""
    if os.path.lexists(out) and (out.is_symlink() or not out.is_dir() or any(out.iterdir())):
        raise EvalpackError(f"{out}: already exists and is not an empty folder; choose another -o or remove it")
    if pack.resolve() in out.resolve().parents:
        raise EvalpackError(f"{out}: inside the pack {pack}, whose attestation lists every file it holds; choose an "
                            "-o outside the pack")


MAX_EXPORT_FLOOR = 2**30  # bytes a rotation may take once exported, whatever its Parquet ...
MAX_EXPORT_EXPANSION = 16  # ... or this many times its Parquet files, if more (evalpack's own packs: 2 to 5 times)
ROW_OVERHEAD = 8  # bytes SQLite spends per row besides its values and one header byte per value (rowid, pointers)
INDEX_OVERHEAD = 8  # and per row of an index, besides the indexed value
PAGE_FILL = 1.1  # pages are not filled to the last byte
ESTIMATE_MEMORY = "512MB"  # the working memory of the scan that estimates a table's size


def _cell_bytes(column: str, duckdb_type: str) -> str:
    """SQL for about the bytes SQLite stores the value of ``column`` in (:func:`evalpack.dialects.sqlite.sqlite_type`):
    integers by magnitude, reals 8, text (dates and timestamps as written) its UTF-8 length, NULL nothing."""
    name, kind = quote_ident(column), sqlite_type(duckdb_type)
    if duckdb_type.upper() in ("BOOLEAN", "BOOL"):
        return f"CASE WHEN {name} IS NULL THEN 0 ELSE 1 END"
    if kind == "INTEGER":
        return (f"CASE WHEN {name} IS NULL THEN 0 WHEN abs({name}) < 128 THEN 1 WHEN abs({name}) < 32768 THEN 2 "
                f"WHEN abs({name}) < 8388608 THEN 3 WHEN abs({name}) < 2147483648 THEN 4 ELSE 8 END")
    if kind == "REAL":
        return f"CASE WHEN {name} IS NULL THEN 0 ELSE 8 END"
    return f"coalesce(strlen(CAST({name} AS VARCHAR)), 0)"


def estimate_rotation(tables_dir: Path, columns: Mapping[str, Mapping[str, str]], keys: Keys
                      ) -> Iterator[tuple[Path, int]]:
    """Each table file of a rotation with about the bytes it takes once exported (a SQLite table and the indexes on
    its key columns; a PostgreSQL dump is of the same order), from one streaming scan of the file in a DuckDB of
    bounded memory: nothing is written, and a table whose rows expand without limit costs a scan, not a disk.
    EvalpackError naming the file when it cannot be read."""
    indexed = {(fk.child_table, fk.child_column) for fk in keys.foreign} | {
        side for link in keys.linked for side in ((link.child_table, link.child_column),
                                                  (link.parent_table, link.parent_column))}
    with duckdb.connect(":memory:", config={"memory_limit": ESTIMATE_MEMORY, "threads": 1}) as con:
        for table, cols in columns.items():
            path = Path(tables_dir) / f"{table}.parquet"
            table_file(path, cols)  # a missing file or column is named as the writer would name it
            cells = [_cell_bytes(c, t) for c, t in cols.items()]
            index = [_cell_bytes(c, t) for c, t in cols.items() if (table, c) in indexed]
            row = " + ".join([f"{len(cols) + ROW_OVERHEAD}", *cells, *(f"{INDEX_OVERHEAD} + {i}" for i in index)])
            try:
                total = con.execute(f"SELECT coalesce(sum({row}), 0) FROM read_parquet({quote_literal(str(path))})"
                                    ).fetchone()[0]
            except duckdb.OutOfMemoryException:
                raise EvalpackError(f"{path}: reading its rows to estimate their size took more than {ESTIMATE_MEMORY} "
                                    "of memory, past the bound on what an export reads at a time (a pack `evalpack "
                                    "build` wrote needs far less): export a pack you trust") from None
            except duckdb.Error as exc:
                raise unreadable_table(path, exc) from None
            yield path, int(total * PAGE_FILL)


def free_bytes(path: Path) -> int:
    """The bytes free on the file system of ``path``, or of its nearest existing folder."""
    missing = _missing_folders(path)
    return shutil.disk_usage(missing[-1].parent if missing else Path(path).absolute()).free


def check_export_size(source: Source) -> int:
    """Refuse, before anything is written, an export of ``source`` that takes more than its bound: per rotation about :func:`estimate_rotation`'s bytes, at most the larger of
    :data:`MAX_EXPORT_FLOOR` and :data:`MAX_EXPORT_EXPANSION` times the rotation's Parquet files (a pack from
    elsewhere may hold a table of kilobytes that is gigabytes once written). Returns the bytes the export needs."""
    needed = 0
    for _, tables_dir in source.rotations:
        sizes = list(estimate_rotation(tables_dir, source.columns, source.keys))
        parquet = sum(path.stat().st_size for path, _ in sizes if path.is_file())
        bound = max(MAX_EXPORT_FLOOR, MAX_EXPORT_EXPANSION * parquet)
        total = sum(size for _, size in sizes)
        if total > bound:
            largest, size = max(sizes, key=lambda entry: entry[1])
            raise EvalpackError(
                f"{largest}: would take about {size / 1e6:,.0f} MB once exported ({total / 1e6:,.0f} MB for its "
                f"rotation), past the bound of {bound / 1e6:,.0f} MB (the larger of {MAX_EXPORT_FLOOR / 1e6:,.0f} MB "
                f"and {MAX_EXPORT_EXPANSION} times the rotation's {parquet / 1e6:,.1f} MB of Parquet): a pack "
                "`evalpack build` wrote stays far below it; export a pack you trust")
        needed += total
    return needed


def check_free_space(out: Path, needed: int) -> None:
    """Refuse an export of about ``needed`` bytes into ``out`` when its file system has less free."""
    free = free_bytes(out)
    if needed > free:
        raise EvalpackError(f"{out}: the export needs about {needed / 1e6:,.0f} MB and only {free / 1e6:,.0f} MB are "
                            "free there; free some space or choose another -o")


def _missing_folders(path: Path) -> list[Path]:
    """The folders of ``path`` (itself included) that do not exist yet, the innermost first."""
    missing = []
    path = Path(path).absolute()
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def export_pack(pack: str | Path, fmt: str, out: str | Path, *, postgres_dsn: str | None = None,
                evidence: bool = True) -> dict[str, Any]:
    """Write format ``fmt`` of the attested pack at ``pack`` into the new folder ``out`` (written beside it and renamed
    into place when complete), with its report ``export.json``; returns the report. ``evidence`` False: without the
    questions' evidence (BIRD's dev.json ``""``, questions.jsonl ``null``; the report's ``evidence`` says which).
    Raises EvalpackError (exit 2) for an unknown format, a pack that fails its integrity check or an ``out`` that
    exists and is not empty."""
    pack, out = Path(pack), Path(out)
    if fmt not in FORMATS:
        raise EvalpackError(f"--format {fmt}: not a format evalpack writes; use one of {', '.join(FORMATS)}")
    _check_out(out, pack)
    layout = PackLayout(pack)
    layout.read_manifest()  # "not found; is PACK a pack?" before the attestation's own complaint
    integrity = check_integrity(pack)
    manifest = layout.read_manifest()  # as attested
    if (manifest.get("tool") or {}).get("name") != "evalpack" or not manifest.get("tables"):
        raise EvalpackError(f"{pack}: not a pack evalpack built (manifest.json names no evalpack tool or tables); "
                            "export packs that `evalpack build` wrote")
    dsn = dsn_from(postgres_dsn)
    # the questions by the scorer's reader: duplicate ids are refused
    source = Source.of(pack, load_questions(pack), manifest, evidence=evidence)
    needed = check_export_size(source)
    made = _missing_folders(out.parent)  # removed again when the export fails: nothing is left behind
    try:  # before the verification, which can take minutes: a folder that cannot be written fails now
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    except OSError as exc:
        raise EvalpackError(f"{out}: cannot write the export there ({exc.strerror or exc}); choose another -o, in a "
                            "folder you can write") from None
    try:
        check_free_space(out, needed)
        results = verify(source, [fmt], dsn)
        write_format(fmt, source, results, staging)
        dialect = DIALECT_OF[fmt]
        report = {"pack": source.name, "version": manifest.get("version"), "format": fmt, "dialect": dialect,
                  "integrity": integrity.status, "verification": VERIFICATION_RULE,
                  "evidence": source.evidence_setting,
                  "questions": {"public": len(source.records) - left_out_counts(source).get("holdout", 0),
                                "exported": len(results[dialect].translated) if dialect in results else 0,
                                "left_out": left_out_counts(source)},
                  "databases": {rotation: source.db_id(rotation) for rotation, _ in source.rotations},
                  dialect: dialect_entry(dialect, results.get(dialect), dsn)}
        _write_json(staging / REPORT, report)
        staging.chmod(0o755)
        if os.path.lexists(out):
            out.rmdir()  # empty (checked above)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return report


def export_command(pack: str | Path, fmt: str, out: str | Path, *, postgres_dsn: str | None = None,
                   evidence: bool = True) -> int:
    """``evalpack export``: write the format, print what was dropped per dialect on stderr and a summary on stdout."""
    report = export_pack(pack, fmt, out, postgres_dsn=postgres_dsn, evidence=evidence)
    dialect = report[report["dialect"]]
    for d in dialect.get("drops", []):
        print(f"evalpack: export: {report['dialect']}: {d['id']} dropped ({d['drop']}"
              f"{' on ' + d['rotation'] if d['rotation'] else ''}: {d['reason']})", file=sys.stderr)
    left = ", ".join(f"{n} {why}" for why, n in report["questions"]["left_out"].items()) or "none"
    verified = (f"{dialect['verified']} of {dialect['checked']} verified on {dialect['engine']}, "
                f"{dialect['dropped']} dropped" if dialect.get("verified_on_engine") else dialect["note"])
    print(f"exported {report['pack']} as {fmt} to {out}: {report['questions']['exported']} questions x "
          f"{len(report['databases'])} rotations, {report['evidence']} evidence; {verified}; left out: {left} (see "
          f"{Path(out) / REPORT})")
    return 0
