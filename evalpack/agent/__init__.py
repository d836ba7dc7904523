"""A pack served to an agent over MCP.

Takes a pack; gives the tools an agent calls (:mod:`.serve`), graded by the scorer's rules (:mod:`.grader`), each
session's calls and answers recorded (:mod:`.episode`).
"""

from evalpack.core.reexport import lazy_exports

# public names, by the module that holds them
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".serve": ("ServeOptions", "serve_command"),
})
