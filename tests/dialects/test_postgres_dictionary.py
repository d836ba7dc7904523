"""The data dictionary in the PostgreSQL dumps (issue 52): restored with psql on the session's private server
(tests/pg.py), every table and column has the dictionary's words as its comment (``obj_description``,
``col_description``), quotes, backslashes and `--` kept as written, line breaks as spaces; the rows and tables are
the pack's, and a pack without a dictionary gets no comment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from conftest import NOTED_DESCRIPTION
from psycopg import sql as pgsql

from evalpack.cli import main
from evalpack.core.layout import PackLayout
from evalpack.dialects.common import Comments, keys_of
from evalpack.dialects.postgres import DSN_ENV, manifest_columns, write_dump


def restored(dsn: str, dump: Path, database: str) -> psycopg.Connection:
    """A new database on the server with ``dump`` restored into it by psql (dropped by :func:`dropped`)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(database)))
    target = psycopg.conninfo.make_conninfo(dsn, dbname=database)
    run = subprocess.run(["psql", target, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(dump)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "ERROR" not in run.stderr, run.stderr
    return psycopg.connect(target, autocommit=True)


def dropped(dsn: str, database: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(database)))


def comments_on(con: psycopg.Connection, table: str) -> tuple[str | None, dict[str, str | None]]:
    """The comment of ``table`` and of each of its columns, as PostgreSQL gives them back."""
    about = con.execute("SELECT obj_description(%s::regclass, 'pg_class')", [f'"{table}"']).fetchone()[0]
    columns = con.execute("SELECT a.attname, col_description(a.attrelid, a.attnum) FROM pg_attribute a "
                          "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                          [f'"{table}"']).fetchall()
    return about, dict(columns)


def test_the_dump_restores_the_dictionary_as_comments(noted_pack, postgres_dsn, tmp_path, monkeypatch):
    monkeypatch.delenv(DSN_ENV, raising=False)  # the dumps alone: no gold SQL verified here
    out = tmp_path / "pg"
    assert main(["export", str(noted_pack), "--format", "postgres", "-o", str(out)]) == 0
    layout = PackLayout(noted_pack)
    manifest, dictionary = layout.read_manifest(), layout.read_dictionary()
    rotation = layout.rotations()[-1]
    try:
        with restored(postgres_dsn, out / f"{rotation}.sql", "noted_comments") as con:
            tables = [r[0] for r in con.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                                "ORDER BY 1")]
            assert tables == sorted(manifest["tables"])
            for table in dictionary["tables"]:
                about, columns = comments_on(con, table["name"])
                assert about == f"One row is {table['row']}."
                assert list(columns) == list(manifest["tables"][table["name"]]["columns"])
                for column in table["columns"]:
                    said = columns[column["name"]]
                    assert said.startswith(f"{column['label']}: {' '.join(column['description'].split())}"), said
                rows = con.execute(pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(table["name"])))
                assert rows.fetchone()[0] == manifest["tables"][table["name"]]["rows"][rotation]
            _, orders = comments_on(con, "orders")
            assert orders["note"] == f"note: {NOTED_DESCRIPTION.replace(chr(10), ' ')}; in words"  # ' and \ as written
            assert orders["amount"] == "order amount: what the customer paid for the order, net of tax; in EUR"
            assert orders["channel"] == "sales channel: a code; 1 means web; 2 means app; 3 means store"
    finally:
        dropped(postgres_dsn, "noted_comments")


@pytest.mark.parametrize("hostile", ["it's \\'; DROP TABLE t; --", "a\x00b\nc $$ $x$ E'\\x41'", "\ud800 \u2028"])
def test_a_comment_is_one_literal_whatever_its_words(postgres_dsn, retail_pack, tmp_path, hostile):
    columns = {"customers": manifest_columns(retail_pack)["customers"]}
    comments = Comments((("customers", hostile),), (("customers", "name", hostile),))
    dump = tmp_path / "customers.sql"
    write_dump(retail_pack / "rotations" / "seed_42" / "tables", columns, dump, comments=comments)
    try:
        with restored(postgres_dsn, dump, "hostile_comments") as con:
            about, said = comments_on(con, "customers")
            assert [r[0] for r in con.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")] \
                == ["customers"]
            expected = " ".join(hostile.replace("\x00", " ").replace("\ud800", " ").split()) or None
            assert about == said["name"] == expected
    finally:
        dropped(postgres_dsn, "hostile_comments")


def test_a_pack_without_a_dictionary_gets_no_comment(retail_pack, tmp_path):
    keys = keys_of(PackLayout(retail_pack).read_manifest())
    write_dump(retail_pack / "rotations" / "seed_42" / "tables", manifest_columns(retail_pack), tmp_path / "a.sql",
               primary_keys=dict(keys.primary), links=keys.foreign)
    assert b"COMMENT ON" not in (tmp_path / "a.sql").read_bytes()
