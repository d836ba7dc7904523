"""Packs in from elsewhere, packs out to other formats.

Takes questions and a database someone else wrote (:mod:`.importer`: the questions file read by :mod:`.received`,
the database by :mod:`.sources`) or a finished pack (:mod:`.exports`); gives a pack, or its SQLite, PostgreSQL, BIRD
and Spider forms.
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".exports": ("build_exports", "check_exports", "export_command"),
    ".importer": ("import_command",),
})
