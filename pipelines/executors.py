"""The executor that runs a pack's steps, chosen by name so a distributed one can be swapped in.

``multiprocess`` (default) runs independent steps (the rotations of a pack) in parallel processes
on this machine; ``in_process`` runs them one after another in the run's process (debugging).

Swapping in a distributed executor (issue 10: ``dagster-dask`` against a ``dask.distributed``
cluster) is one more entry in ``EXECUTORS``: nothing else changes, because every step already
takes its inputs from the IO manager and its files from the pack's working folder, never from
memory shared with another step. On a cluster both must be shared storage (an object-store IO
manager, and ``packs_dir`` on a shared or object-store path).
"""

import os
from collections.abc import Callable

from dagster import ExecutorDefinition, in_process_executor, multiprocess_executor


def _multiprocess() -> ExecutorDefinition:
    # One process per CPU (max_concurrent 0). forkserver: every step forks from a server that has already
    # imported dagster, the engine and these definitions, instead of paying those imports once per step.
    return multiprocess_executor.configured({"max_concurrent": 0, "start_method": {"forkserver": {}}},
                                            name="multiprocess")


EXECUTORS: dict[str, Callable[[], ExecutorDefinition]] = {
    "multiprocess": _multiprocess,
    "in_process": lambda: in_process_executor,
}


def executor(name: str | None = None) -> ExecutorDefinition:
    """The executor called ``name`` (default: ``$EVALPACK_EXECUTOR``, else ``multiprocess``)."""
    name = name or os.environ.get("EVALPACK_EXECUTOR", "multiprocess")
    try:
        return EXECUTORS[name]()
    except KeyError:
        raise ValueError(f"EVALPACK_EXECUTOR={name!r}: unknown executor; choose one of {sorted(EXECUTORS)}") from None
