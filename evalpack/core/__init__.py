"""What every stage shares, below all of them.

The standalone scorer (:mod:`.scoring`, copied into every pack as ``verify.py``: the rules a pack's user is judged
by, so every other stage compares, rounds and sandboxes through it), the pack's file layout (:mod:`.layout`),
errors, the build cache, garbage-collection pauses and the clean-up of what a killed run left behind
(:mod:`.debris`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".cache": ("cache_dir",),
    ".errors": ("EvalpackError", "SpecError"),
    ".gcpause": ("gc_paused",),
    ".layout": (
        "ATTESTATION", "CARD", "CERTIFICATE", "DAMAGED", "MANIFEST", "PackLayout", "QUESTIONS", "ROTATIONS",
        "SCORER", "rotation_name", "table_path"
    ),
    ".reexport": ("lazy_exports",),
    ".scoring": (
        "COMMITMENT_RULE", "COMPARISON_RULE", "DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT", "HOLDOUT_FILE",
        "HOLDOUT_KEY_SUFFIX", "InputError", "Integrity", "KILL_GRACE", "Limits", "MAX_FETCH_ROWS",
        "MAX_RESULT_BYTES", "MAX_SQL_CHARS", "OneLineParser", "Outcome", "PAYLOAD_TYPE", "PREDICATE_TYPE",
        "PUBLIC_KEY_ENV", "PackIntegrityError", "Query", "ROWS_TYPE", "SANDBOX_SCRATCH", "SCALAR_TYPES",
        "SIGNIFICANT_DIGITS", "STATEMENT_TYPE", "SandboxWorker", "UNSIGNED_NOTE", "WATCHDOG", "WITHHELD",
        "add_holdout_option", "add_integrity_options", "add_limit_options", "answer_matches",
        "answer_type_of", "assemble_report", "b64decode", "cell_key", "check_integrity",
        "check_pack_entries", "check_report_file", "commitment", "error_text", "expected_for",
        "fetch_capped", "first_line", "format_report", "holdout_key_beside", "inspect_integrity",
        "is_unanswerable", "jsonable", "jsonl_lines", "kept_order", "load_questions", "map_files",
        "observed", "out_of_memory", "pack_entries", "pack_questions", "pack_source", "parsed_order_by",
        "prestart_for", "preview", "printable", "query_outcome", "question_result", "quote_ident",
        "quote_literal", "read_envelope", "report_beside", "reported", "run_gold", "run_query", "scorable",
        "score_command", "sha256_file", "sha256_files", "sql_refused", "sweep_scratch",
        "top_level_order_by", "verdict_in_any_order", "walk_pack", "with_holdout_key", "worker_main",
        "write_json_report", "write_report"
    ),
})
