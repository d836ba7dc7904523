"""Stage 1, the spec: YAML in, a checked :class:`Spec` out.

Takes a spec file (evalpack's format or Misata's); gives the frozen model of its tables, columns and declared facts
(:mod:`.model`). :mod:`.reader` reads it: the YAML with its lines (:mod:`.yamldoc`), each section
(:mod:`.declarations`), then what no section can check alone (:mod:`.crosschecks`), against what the format accepts
(:mod:`.grammar`), the question kinds and difficulty levels (:mod:`.kinds`), measure and table words
(:mod:`.semantics`), time grains and periods (:mod:`.links`) and exact unit arithmetic (:mod:`.units`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".crosschecks": ("segment_labels", "segment_path"),
    ".grammar": ("EXPORT_FORMATS",),
    ".kinds": ("KINDS", "LEVELS"),
    ".links": ("NO_PARENT", "ORPHAN", "periods"),
    ".model": (
        "Branch", "Column", "Distribution", "PerParent", "Relationship", "SegmentShares", "Spec", "Table",
        "add_months"
    ),
    ".reader": ("load_spec", "parse_spec"),
    ".semantics": ("Semantics", "column_words", "plural_of", "singular_of"),
    ".units": ("allocate", "apportion", "from_units", "round_fraction", "to_units"),
})
