"""The sensor that watches ``schemas/*.yaml``: new files become packs, edited files rebuild their pack.

Each tick hashes every spec file (SHA-256 of its bytes: the same hash as ``Spec.sha256`` and the
spec asset's data version) and compares it with the cursor:

- a file whose stem is not yet a ``packs`` partition is registered (dynamic partition) and built;
- a file whose hash changed is rebuilt: one ``build_pack`` run for exactly that partition;
- an unchanged file requests nothing.

The run key is ``<pack>:<spec sha256>:<generation>``: it names the spec content it builds, so a
replayed or duplicated tick starts nothing twice, and the generation (one more per change) lets
an edit that reverts a file to an earlier content rebuild it again. A pack with a run already in
progress is left for the next tick (its working folder is in use). Nothing is run for files that
disappear; their partitions and history stay.
"""

import hashlib
import json
from pathlib import Path

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from assets.common import PACK_KEY, PACKS, EvalpackResource
from pipelines.jobs import build_pack

ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
PARTITION_TAG = "dagster/partition"


def spec_files(folder: Path) -> tuple[dict[str, str], list[str]]:
    """({pack key: SHA-256 of the file's bytes}, names skipped because the stem cannot be a pack key)."""
    found, skipped = {}, []
    for path in sorted(Path(folder).glob("*.yaml")):
        if not path.is_file():
            continue
        if not PACK_KEY.fullmatch(path.stem):
            skipped.append(path.name)
            continue
        found[path.stem] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found, skipped


def pack_busy(instance: DagsterInstance, key: str) -> bool:
    """True while a run for this pack partition is queued or in progress."""
    return bool(instance.get_run_records(RunsFilter(tags={PARTITION_TAG: key}, statuses=ACTIVE), limit=1))


def build_request(key: str, sha: str, run_key: str) -> RunRequest:
    return RunRequest(partition_key=key, run_key=run_key, tags={"evalpack/pack": key, "evalpack/spec_sha256": sha})


@sensor(job=build_pack, minimum_interval_seconds=30, default_status=DefaultSensorStatus.STOPPED,
        description="Watches <schemas_dir>/*.yaml: registers new specs as pack partitions and builds them; "
                    "rebuilds exactly the pack whose spec changed; an unchanged file starts nothing.")
def spec_file_sensor(context: SensorEvaluationContext, evalpack: EvalpackResource) -> SensorResult:
    seen: dict[str, dict] = json.loads(context.cursor) if context.cursor else {}
    files, skipped = spec_files(Path(evalpack.schemas_dir))
    for name in skipped:
        context.log.warning(f"{name}: skipped; a pack key is letters, digits, '_', '.', '-' (rename the file)")
    known = set(context.instance.get_dynamic_partitions(PACKS.name))
    new = [key for key in files if key not in known]
    state: dict[str, dict] = {}
    requests = []
    for key, sha in files.items():
        prev = seen.get(key)
        if prev and prev["sha256"] == sha and key in known:
            state[key] = prev
            continue
        if key in known and pack_busy(context.instance, key):
            context.log.info(f"{key}: spec changed while a run is in progress; it is rebuilt on a later tick")
            if prev:
                state[key] = prev
            continue
        generation = prev["generation"] + 1 if prev else 1
        requests.append(build_request(key, sha, f"{key}:{sha}:{generation}"))
        state[key] = {"sha256": sha, "generation": generation}
        context.log.info(f"{key}: {'new spec' if key in new else 'spec changed'} ({sha[:12]}); requesting a build")
    for key in sorted(set(seen) - set(files)):
        context.log.info(f"{key}: spec file removed; the partition and its history stay")
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[PACKS.build_add_request(new)] if new else None,
        cursor=json.dumps(state, sort_keys=True),
        skip_reason=None if requests else "no spec file is new or changed",
    )
