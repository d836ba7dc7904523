"""The near-miss study: plausible mistakes applied to each gold SQL, and which would pass.

Takes the questions and a rotation; gives each mutant's outcome (:mod:`.study`), the mutants made by the operators
of one registry (:mod:`.operators`), run many to a scan over per-rotation aggregates (:mod:`.cells`,
:mod:`.rollup`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".study": (
        "Mutant", "MutantSet", "prepare_mutants", "still_studied", "study_markdown", "study_outcomes",
        "summarize_study"
    ),
})
