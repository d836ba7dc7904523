"""Stage 5, the pack: verdicts in, an attested folder out.

Takes the verified questions and the rotations; gives the pack's files: certificate and manifest (:mod:`.certify`),
the dataset card (:mod:`.card`) and the Hub's Parquet (:mod:`.hubfiles`), the holdout and its answer key
(:mod:`.holdout`), the in-toto attestation (:mod:`.attest`), the folder written whole or not at all
(:mod:`.folder`), and, for a pack already built, its HTML report (:mod:`.report`) and what changed since another
version (:mod:`.diff`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".attest": (
        "keygen_command", "load_signer", "now_utc", "signature_note", "verify_command", "verify_pack",
        "write_attestation"
    ),
    ".card": (
        "Config", "QUESTIONS_CONFIG", "configs_metadata", "hub_configs", "read_card_metadata",
        "rotated_answers", "total_rows"
    ),
    ".certify": ("HASHES", "certificate", "dumps", "manifest", "pack_warnings"),
    ".diff": (
        "DEFAULT_MARGIN_POINTS", "GateResult", "POLICIES", "PackDiff", "PackSide", "QuestionChange",
        "changes_since", "diff_command", "diff_packs", "format_diff", "gate", "load_side"
    ),
    ".folder": ("assemble_pack", "check_output", "discard", "is_pack", "publish_dir", "staging_dir"),
    ".holdout": ("read_previous", "seal", "seal_received", "write_key", "write_received_key"),
    ".report": ("pack_facts", "pack_html", "report_path_beside", "score_html", "write_pack_report"),
})
