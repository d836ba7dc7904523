"""Where people already evaluate: a pack's questions and tables in SQLite and PostgreSQL.

Takes a pack's gold SQL and tables; gives them translated and verified in each dialect's real engine
(:mod:`.engines`), the SQLite sandbox and scoring there (:mod:`.scoring`), and PostgreSQL's dumps, engine and
sandbox (:mod:`.postgres`).
"""

from evalpack.core.reexport import lazy_exports

# the dialects a pack is translated, verified and exported in, and scored in besides DuckDB: the one list that
# the CLI's choices, the exports and the engines read (kept here, light, so the CLI imports no engine to know it)
DIALECTS = ("sqlite", "postgres")
SCORING_DIALECTS = ("duckdb", *DIALECTS)  # what `evalpack score --dialect` takes: DuckDB, the pack's own, first

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".common": ("Keys", "file_into_place", "keys_of", "table_file", "unreadable_table"),
    ".engines": ("DialectEngine", "DialectResult", "engine_for", "verify_in_dialects"),
    ".postgres": ("DSN_ENV", "connect", "dsn_from", "write_dump"),
    ".scoring": ("score_arguments",),
    ".sqlite": ("PROGRESS_STEPS", "open_sqlite_sandbox", "sqlite_type", "sqlite_uri", "write_sqlite"),
})
