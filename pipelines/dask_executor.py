"""The ``dask`` executor: each step of a run sent to a ``dask.distributed`` cluster once it is ready.

Why not ``dagster_dask.dask_executor`` as it stands: that executor submits the whole execution plan up
front, level by level, so it cannot run a dynamic fan-out (dagster-io/dagster issue 9785), and
``rotations`` is one (one step per rotation of the spec). ``DaskStepExecutor`` keeps dagster-dask's
executor config (``cluster: {existing: {address}} | {local: {...}} | ...``) and its cluster types, and
walks the plan with Dagster's own ``ActiveExecution`` (as the multiprocess executor does): each step is
submitted to dask when it becomes ready, so the mapped rotation steps are submitted once
``rotation_seeds`` has resolved them.

Dagster has no public API for an executor that submits steps one at a time (issue 9785 above), so this
module, and no other of the project, imports private ``dagster._*`` names; ``pipelines.executors``
imports it only when the ``dask`` executor is chosen.
"""

import functools
import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

from dagster import (
    DagsterInstance,
    Executor,
    ExecutorDefinition,
    InitExecutorContext,
    MetadataValue,
    multiple_process_executor_requirements,
)
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import create_execution_plan, execute_plan_iterator
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.context_creation_job import create_context_free_log_manager
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.plan.state import KnownExecutionState
from dagster._core.execution.retries import RetryMode
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.dagster_run import DagsterRun
from dagster._utils.error import serializable_error_info_from_exc_info
from dagster_shared.serdes import deserialize_value, serialize_value

DASK_SCHEDULER = "EVALPACK_DASK_SCHEDULER"

#: dagster-dask's cluster types (the keys of its ``cluster`` selector) -> the class that starts one.
DASK_CLUSTERS = {
    "local": "dask.distributed:LocalCluster", "ssh": "dask.distributed:SSHCluster",
    "yarn": "dask_yarn:YarnCluster", "kube": "dask_kubernetes:KubeCluster",
    **{kind: f"dask_jobqueue:{kind.upper()}Cluster" for kind in ("pbs", "sge", "lsf", "slurm", "oar")},
    "moab": "dask_jobqueue:MoabCluster",
}


def run_step_on_dask_worker(recon_job: ReconstructableJob, dagster_run: DagsterRun, run_config: Mapping[str, Any],
                            step_key: str, instance_ref: InstanceRef, known_state: KnownExecutionState,
                            repository_load_data: Any) -> str:
    """Runs one step in a dask worker: what the multiprocess executor's child process does, in a worker.

    Its events go to the run's instance from here (the worker must reach the run storage) and back to
    the run as the task's result, serialised as Dagster stores them (a string dask can size and move).
    The first one records the worker's address and process id.
    """
    from dask.distributed import get_worker

    with DagsterInstance.from_ref(instance_ref) as instance:
        worker = get_worker().address
        started = DagsterEvent.step_worker_started(
            create_context_free_log_manager(instance, dagster_run), dagster_run.job_name,
            message=f'Executing step "{step_key}" in dask worker {worker} (pid {os.getpid()}).',
            metadata={"pid": MetadataValue.text(str(os.getpid())), "dask_worker": MetadataValue.text(worker)},
            step_key=step_key)
        plan = create_execution_plan(job=recon_job, run_config=run_config, step_keys_to_execute=[step_key],
                                     known_state=known_state, repository_load_data=repository_load_data)
        return serialize_value([started, *execute_plan_iterator(plan, recon_job, dagster_run, run_config=run_config,
                                                                 retry_mode=RetryMode.DISABLED, instance=instance)])


def load_on_dask_worker(recon_job: ReconstructableJob) -> int:
    """Loads the job's definitions in this worker (cached for its steps); returns the worker's process id."""
    recon_job.get_definition()
    return os.getpid()


class DaskStepExecutor(Executor):
    """Runs each step of a run as a task on a dask.distributed cluster, submitted when the step is ready."""

    def __init__(self, cluster_type: str, cluster_configuration: Mapping[str, Any] | None):
        self.cluster_type = cluster_type
        self.cluster_configuration = dict(cluster_configuration or {})

    @property
    def retries(self) -> RetryMode:
        return RetryMode.DISABLED  # as dagster-dask: a failed step fails the run (re-execute it from failure)

    def cluster(self, job_name: str) -> Any:
        """The scheduler's address (``existing``), or a cluster started for this run (dagster-dask's kwargs)."""
        if self.cluster_type == "existing":
            return self.cluster_configuration["address"]
        from dagster_dask.executor import DaskExecutor

        module, _, name = DASK_CLUSTERS[self.cluster_type].partition(":")
        kwargs = DaskExecutor(self.cluster_type, self.cluster_configuration).build_dict(job_name)
        return getattr(importlib.import_module(module), name)(**kwargs)

    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        from dask.distributed import Client, wait

        instance = plan_context.instance
        if not instance.is_persistent:
            raise ValueError("the dask executor needs a persistent Dagster instance that its workers reach: "
                             "set DAGSTER_HOME (one machine) or put the run storage on Postgres (a cluster)")
        run = plan_context.dagster_run
        job = plan_context.reconstructable_job
        with ExitStack() as stack:
            cluster = self.cluster(run.job_name)
            if not isinstance(cluster, str):
                stack.callback(cluster.close)  # a cluster started for this run stops with it
            client = stack.enter_context(Client(cluster))
            # every worker loads the code location now, in parallel, instead of inside its first step: a worker
            # that cannot (missing package, wrong environment) fails the run here, before any step starts
            workers = client.run(functools.partial(load_on_dask_worker, job))
            yield DagsterEvent.engine_event(
                plan_context,
                f"Executing steps on dask cluster {client.scheduler.address} ({len(workers)} workers): "
                f"run coordinator pid {os.getpid()}",
                EngineEventData(metadata={"scheduler": MetadataValue.text(client.scheduler.address),
                                          "cluster": MetadataValue.text(self.cluster_type),
                                          "worker_pids": MetadataValue.json(workers),
                                          "pid": MetadataValue.text(str(os.getpid()))}))
            concurrency = stack.enter_context(InstanceConcurrencyContext(instance, run))
            active = stack.enter_context(ActiveExecution(execution_plan, retry_mode=self.retries,
                                                         instance_concurrency_context=concurrency))
            running: dict[str, Any] = {}
            while not active.is_complete:
                if active.check_for_interrupts():
                    yield DagsterEvent.engine_event(plan_context, "dask executor: interrupted; cancelling the "
                                                    "steps' dask tasks", EngineEventData.interrupted(list(running)))
                    client.cancel(list(running.values()))
                    active.mark_interrupted()
                    break
                for step in active.get_steps_to_execute():
                    # the arguments travel inside a partial: dask must not traverse Dagster's records as task inputs
                    task = functools.partial(run_step_on_dask_worker, job, run, plan_context.run_config, step.key,
                                             instance.get_ref(), active.get_known_state(),
                                             execution_plan.repository_load_data)
                    running[step.key] = client.submit(task, key=f"{run.job_name}-{run.run_id}-{step.key}",
                                                      pure=False, resources=dask_resources(step.tags))
                yield from active.concurrency_event_iterator(plan_context)
                if not running:
                    active.sleep_til_ready()
                else:
                    try:
                        done = wait(list(running.values()), timeout=1, return_when="FIRST_COMPLETED").done
                    except TimeoutError:
                        done = set()
                    for key in [k for k, future in running.items() if future in done]:
                        yield from self.step_events(plan_context, active, key, running.pop(key))
                        active.verify_complete(plan_context, key)
                yield from active.plan_events_iterator(plan_context)

    def step_events(self, plan_context: PlanOrchestrationContext, active: ActiveExecution, key: str,
                    future: Any) -> Iterator[DagsterEvent]:
        """The events of a finished step's task; a task that raised (a lost worker, ...) fails its step, and so
        does a resource that failed to initialise in the worker (as under the multiprocess executor)."""
        step_context = plan_context.for_step(active.get_step_by_key(key))
        try:
            events = deserialize_value(future.result(), list)
        except Exception:
            error = serializable_error_info_from_exc_info(sys.exc_info())
            yield DagsterEvent.engine_event(step_context, f"dask executor: the task of step {key} failed",
                                            EngineEventData.engine_error(error))
            events = [self.log_failure_or_retry_event_after_error(step_context, error, active.get_known_state())]
        for event in events:
            yield event
            active.handle_event(event)
            if event.is_resource_init_failure and event.engine_event_data.error is not None:
                failure = self.log_failure_or_retry_event_after_error(step_context, event.engine_event_data.error,
                                                                      active.get_known_state())
                yield failure
                active.handle_event(failure)


def dask_resources(tags: Mapping[str, str]) -> dict:
    """dagster-dask's per-step dask resources (the op tag ``dagster-dask/resource_requirements``)."""
    from dagster_dask.executor import get_dask_resource_requirements

    return get_dask_resource_requirements(tags)


def _dask_executor(init_context: InitExecutorContext) -> DaskStepExecutor:
    ((cluster_type, configuration),) = init_context.executor_config["cluster"].items()
    return DaskStepExecutor(cluster_type, configuration)


def dask_executor_definition() -> ExecutorDefinition:
    try:
        from dagster_dask import dask_executor
    except ImportError as exc:
        raise ValueError("EVALPACK_EXECUTOR=dask needs the dask extra: pip install -e '.[dask]'") from exc
    if os.environ.get(DASK_SCHEDULER):
        cluster: dict = {"existing": {"address": {"env": DASK_SCHEDULER}}}
    else:
        cluster = {"local": {}}  # dagster-dask starts LocalCluster(threads_per_worker=1): one worker per CPU
    definition = ExecutorDefinition(
        name="dask", config_schema=dask_executor.config_schema, requirements=multiple_process_executor_requirements(),
        executor_creation_fn=_dask_executor,
        description="dagster-dask's executor config; each step runs as a dask task once it is ready (dynamic "
                    "fan-outs included)")
    return definition.configured({"cluster": cluster}, name="dask")


