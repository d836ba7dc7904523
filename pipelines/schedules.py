"""The weekly schedule: rebuild every registered pack whose spec file still exists (Mondays 03:00 UTC)."""

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from assets.common import PACKS, EvalpackResource
from pipelines.jobs import build_pack
from pipelines.sensors import pack_busy, spec_files


@schedule(job=build_pack, cron_schedule="0 3 * * 1", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.STOPPED,
          description="Rebuilds every registered pack once a week (new tool versions, fresh attestations).")
def weekly_rebuild(context: ScheduleEvaluationContext, evalpack: EvalpackResource):
    files, _ = spec_files(evalpack.schemas_dir)
    when = context.scheduled_execution_time
    stamp = when.strftime("%Y-%m-%dT%H:%M") if when else "now"
    requests = []
    for key in sorted(context.instance.get_dynamic_partitions(PACKS.name)):
        if key not in files:
            context.log.info(f"{key}: no spec file {evalpack.spec_path(key)}; not rebuilt")
        elif pack_busy(context.instance, key):
            context.log.info(f"{key}: a run is in progress; not rebuilt this week")
        else:
            requests.append(RunRequest(partition_key=key, run_key=f"weekly:{key}:{stamp}",
                                       tags={"evalpack/pack": key, "evalpack/spec_sha256": files[key]}))
    return requests or SkipReason("no registered pack has a spec file (turn on spec_file_sensor to register them)")
