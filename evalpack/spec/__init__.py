"""Stage 1, the spec: YAML in, a checked :class:`Spec` out.

Takes a spec file (evalpack's format or Misata's); gives the frozen model of its tables, columns and declared facts
(:mod:`.reader`), with the vocabulary it is checked against: question kinds and difficulty levels (:mod:`.kinds`),
measure and table words (:mod:`.semantics`), time grains and periods (:mod:`.links`) and exact unit arithmetic
(:mod:`.units`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".kinds": ("KINDS", "LEVELS"),
    ".links": ("NO_PARENT", "ORPHAN", "periods"),
    ".reader": (
        "Branch", "Column", "Distribution", "EXPORT_FORMATS", "PerParent", "Relationship", "SegmentShares",
        "Spec", "Table", "add_months", "load_spec", "parse_spec", "segment_labels", "segment_path"
    ),
    ".semantics": ("Semantics", "column_words", "plural_of", "singular_of"),
    ".units": ("allocate", "apportion", "from_units", "round_fraction", "to_units"),
})
