"""Score candidate SQL in another dialect: ``evalpack score PACK --candidates FILE --dialect sqlite|postgres``.

The candidates are written for that engine (what a SQLite or PostgreSQL model writes); the expected answers,
the comparison rule, the candidates file, the report and the exit codes are the scorer's own
(:func:`evalpack.core.scoring.score_command`): only the engine a rotation's candidates run on changes, through
:func:`~evalpack.core.scoring.score_pack`'s ``sandbox`` seam. ``duckdb`` (the default) is ``evalpack score`` as it is.

PostgreSQL (:func:`evalpack.dialects.postgres.postgres_sandboxes`): each rotation is loaded into a database of its own on
the server ``--postgres-dsn`` names (default ``$EVALPACK_POSTGRES_DSN``), and candidates run as a login role made
for it, without superuser, allowed only to read that database's tables, in a read-only transaction under
``statement_timeout``; the database and the role are dropped at the end.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpack.core.errors import ERROR_PREFIX
from evalpack.core.scoring import (
    InputError,
    error_text,
    score_command,
)
from evalpack.dialects import SCORING_DIALECTS
from evalpack.dialects.postgres import DSN_ENV, dsn_from, postgres_sandboxes
from evalpack.dialects.sqlite import sqlite_sandboxes

# --------------------------------------------------------------------------- PostgreSQL


def postgres_dsn(given: str | None) -> str:
    """The PostgreSQL server to score on: ``--postgres-dsn``, else ``$EVALPACK_POSTGRES_DSN``; InputError naming
    the option when there is neither."""
    dsn = dsn_from(given)
    if not dsn:
        raise InputError(f"--dialect postgres needs a PostgreSQL server: pass --postgres-dsn "
                         f"'postgresql://USER@HOST:PORT/DB' (a role that may create databases and roles), or set "
                         f"${DSN_ENV}")
    return dsn


# --------------------------------------------------------------------------- the command


def dialect_label(dialect: str) -> str:
    """How the report names the engine: ``sqlite (SQLite 3.40.1)``."""
    if dialect == "sqlite":
        return f"sqlite (SQLite {sqlite3.sqlite_version})"
    return dialect


def dialect_score_command(pack: str | Path, candidates: str | Path, dialect: str, *,
                          postgres: str | None = None, err=None, error_prefix: str = "error: ",
                          **options: Any) -> int:
    """``evalpack score --dialect sqlite|postgres``: :func:`evalpack.core.scoring.score_command` with the candidates
    run on that engine (``options`` are score_command's; ``duckdb`` is score_command itself). ``postgres``: the
    server's DSN (``--postgres-dsn``)."""
    err = err or sys.stderr
    if dialect == "duckdb":  # the scorer as it is
        return score_command(pack, candidates, err=err, error_prefix=error_prefix, **options)
    try:
        if dialect not in SCORING_DIALECTS:
            raise InputError(f"--dialect {dialect!r}: use one of {', '.join(SCORING_DIALECTS)}")
        if dialect == "sqlite":
            opened = sqlite_sandboxes(Path(pack))
        else:

            opened = postgres_sandboxes(Path(pack), postgres_dsn(postgres))
        with opened as sandbox:
            return score_command(pack, candidates, err=err, error_prefix=error_prefix, sandbox=sandbox,
                                 dialect=dialect_label(dialect), **options)
    except InputError as exc:
        print(error_text(exc, error_prefix), file=err)
        return 2


def score_arguments(args: Any, on_report: Callable[[dict[str, Any]], None] | None = None) -> int:
    """``evalpack score ... --dialect sqlite|postgres`` from the parsed command line (evalpack.cli's ``score``)."""
    return dialect_score_command(args.pack, args.candidates, args.dialect, postgres=args.postgres_dsn,
                                 json_path=args.json, rule=args.rule, public_key=args.public_key,
                                 timeout=args.timeout, memory_mb=args.memory_mb, threads=args.threads,
                                 run_timeout=args.run_timeout, allow_unattested=args.allow_unattested,
                                 error_prefix=ERROR_PREFIX, holdout_key=args.holdout_key, on_report=on_report,
                                 min_accuracy=args.min_accuracy)

