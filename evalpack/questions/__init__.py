"""Stage 3, the questions: a spec and its plans in, questions with gold SQL and answers out.

Takes a spec and its rotation plans; gives every question the declarations answer (:mod:`.derive`, one module per
family in :mod:`.families`), in words (:mod:`.phrasing`), labelled by difficulty (:mod:`.difficulty`), and the
questions to decline (:mod:`.unanswerable`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".derive": (
        "PreviousSplits", "Question", "SPLIT_RULE", "Selection", "derive_declines", "derive_selected",
        "fixed_answers", "lean", "measure_of", "parse_gold", "rotation_answers"
    ),
    ".difficulty": ("RULE", "label"),
    ".phrasing": ("article",),
})
