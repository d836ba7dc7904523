"""Gold SQL as text and as a tree: its dialect, and the one parser every stage reads it with."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

DIALECT = "duckdb"  # the dialect of every gold SQL a pack holds


def parse_sql(sql: str) -> exp.Expression:
    """Gold SQL as a new sqlglot tree (DuckDB dialect), the caller's to change."""
    return sqlglot.parse_one(sql, read=DIALECT)
