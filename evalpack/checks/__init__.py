"""Stage 4, the checks: questions and a rotation's files in, verdicts out.

Takes the questions and each rotation's written files; gives per question and rotation whether its gold SQL returns
the declared answer and passes the golden checks (:mod:`.golden`, run per rotation by :mod:`.verification`), the
audit's findings (:mod:`.audit`) and the near-miss study (:mod:`.nearmiss`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".audit": (
        "Finding", "audit_command", "audit_pack", "audit_rotation", "describe_link", "in_question_order",
        "infer_links", "link_of", "matches_answer", "run_query", "seal_findings", "worker_runner"
    ),
    ".golden": (
        "CHECKS", "MATCHES", "MEANINGS", "Runner", "empty_text", "first_difference", "in_order", "shown",
        "typed"
    ),
    ".nearmiss.study": (
        "Mutant", "MutantSet", "prepare_mutants", "still_studied", "study_markdown", "study_outcomes",
        "summarize_study"
    ),
    ".verification": (
        "Observation", "OnDemand", "Verdict", "rotation_connection", "tables_digest", "verify_questions",
        "verify_rotation"
    ),
})
