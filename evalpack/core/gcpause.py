"""Python's cyclic garbage collector paused around allocation-heavy pure work.

sqlglot's trees link every node to its parent, so deriving questions and mutating their gold SQL
allocate about a million container objects, most of them soon garbage. The collector then runs
hundreds of times, each pass walking every young object (and now and then every object the process
holds: the modules of sqlglot, NumPy, pyarrow and DuckDB) to free little: a fifth of that work's
CPU time. Paused, the garbage of the block waits for the first collection after it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off; it is on again (if it was) when the last of the blocks
    running at once, in any thread, ends."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
