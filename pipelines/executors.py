"""The executor that runs a pack's steps, chosen by name so a distributed one can be swapped in.

``in_process`` (default) runs the steps one after another in the run's process, where the engine
uses both cores inside each step (DuckDB's threads, two query cursors); ``multiprocess`` runs
independent steps (the rotations of a pack) in parallel processes on this machine, which pays for
its ~2 s per step only when rotations are large; ``dask`` (the ``dask`` extra: ``pip install -e
'.[dask]'``) runs every step as a task on a ``dask.distributed`` cluster: the scheduler at
``$EVALPACK_DASK_SCHEDULER`` when that is set (an existing cluster: a laptop's, or one on
Kubernetes), else a ``LocalCluster`` started for the run (``pipelines.dask_executor``).

Every step already takes its inputs from the IO manager and its files from the pack's working
folder, never from memory shared with another step, so nothing else changes between executors.
On a cluster both must be storage every worker reaches (the run storage and the IO manager's
folder, and ``packs_dir``): see the README, "Rotations on a cluster".
"""

import os
from collections.abc import Callable

from dagster import ExecutorDefinition, in_process_executor, multiprocess_executor


def _multiprocess() -> ExecutorDefinition:
    # One process per CPU (max_concurrent 0). forkserver: every step forks from a server that has already
    # imported dagster, the engine and these definitions, instead of paying those imports once per step.
    return multiprocess_executor.configured({"max_concurrent": 0, "start_method": {"forkserver": {}}},
                                            name="multiprocess")


def _dask() -> ExecutorDefinition:
    try:
        from pipelines.dask_executor import dask_executor_definition
    except ImportError as exc:
        raise ValueError("EVALPACK_EXECUTOR=dask needs the dask extra: pip install -e '.[dask]'") from exc
    return dask_executor_definition()


EXECUTORS: dict[str, Callable[[], ExecutorDefinition]] = {
    "multiprocess": _multiprocess,
    "in_process": lambda: in_process_executor,
    "dask": _dask,
}


def executor(name: str | None = None) -> ExecutorDefinition:
    """The executor called ``name`` (default: ``$EVALPACK_EXECUTOR``, else ``in_process``: see the README, which
    measures both; a step process costs about 2 s to start, more than a rotation of the example specs takes)."""
    name = name or os.environ.get("EVALPACK_EXECUTOR", "in_process")
    try:
        return EXECUTORS[name]()
    except KeyError:
        raise ValueError(f"EVALPACK_EXECUTOR={name!r}: unknown executor; choose one of {sorted(EXECUTORS)}") from None
