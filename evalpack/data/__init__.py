"""Stage 2, the rows: a spec and a seed in, a rotation's tables out.

Takes a :class:`~evalpack.spec.Spec`; gives each rotation's plan, every declared fact fixed to the cent before a row
exists (:mod:`.plan`), the rows that hold it (:mod:`.generate`, text from :mod:`.textgen`) and the Parquet and CSV
files written from them (:mod:`.tables`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".generate": ("arrow_schema",),
    ".plan": (
        "AnswerKey", "CurveFacts", "ParentFacts", "REPEAT", "RotationPlan", "SegmentFacts",
        "WaterfallFacts", "plan_pack", "stable_int"
    ),
    ".tables": ("connect_tables", "duckdb_types", "write_rotation", "write_table"),
})
