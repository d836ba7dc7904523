"""The sensor that watches ``schemas/*.yaml``: new files become packs, edited files rebuild their pack.

Each tick hashes every spec file (SHA-256 of its bytes: the same hash as ``Spec.sha256`` and the
spec asset's data version) and compares it with the cursor:

- an unchanged file requests nothing;
- a new or changed file is validated first (read and planned by the engine, as a build would): an
  invalid one is skipped, with its ``file:line`` reason in the tick's skip message and log, and is
  neither registered nor built until it changes again;
- a valid file whose pack was last built from exactly these bytes (its latest ``pack``
  materialisation came from the run whose ``spec`` step recorded this hash as its data version)
  requests nothing: turning the sensor off and on, or a new cursor, rebuilds nothing that is current;
- otherwise its stem is registered as a ``packs`` partition if new, and one ``build_pack`` run is
  requested for exactly that partition.

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
    AssetKey,
    AssetRecordsFilter,
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
from evalpack.core.errors import EvalpackError
from evalpack.data.plan import plan_pack
from evalpack.spec.reader import load_spec
from pipelines.jobs import build_pack

ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
PARTITION_TAG = "dagster/partition"
DATA_VERSION_TAG = "dagster/data_version"


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


def invalid_reason(path: Path) -> str | None:
    """Why the spec at ``path`` cannot be built (the engine's ``file:line: key: what to do``), or None."""
    try:
        plan_pack(load_spec(path))
    except EvalpackError as exc:
        return str(exc)
    return None


def pack_busy(instance: DagsterInstance, key: str) -> bool:
    """True while a run for this pack partition is queued or in progress."""
    return bool(instance.get_run_records(RunsFilter(tags={PARTITION_TAG: key}, statuses=ACTIVE), limit=1))


def _latest(instance: DagsterInstance, asset: str, key: str):
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[key]), limit=1).records
    return records[0] if records else None


def built_from(instance: DagsterInstance, key: str) -> str | None:
    """The spec hash the current pack of ``key`` was built from: the data version of the ``spec`` step of the run
    that last materialised ``pack`` (None: never built, or built with run-time overrides of seed or rotations)."""
    pack, spec = _latest(instance, "pack", key), _latest(instance, "spec", key)
    if pack is None or spec is None or pack.run_id != spec.run_id:
        return None
    return spec.asset_materialization.tags.get(DATA_VERSION_TAG)


def build_request(key: str, sha: str, run_key: str) -> RunRequest:
    return RunRequest(partition_key=key, run_key=run_key, tags={"evalpack/pack": key, "evalpack/spec_sha256": sha})


@sensor(job=build_pack, minimum_interval_seconds=30, default_status=DefaultSensorStatus.STOPPED,
        description="Watches `<schemas_dir>/*.yaml`: registers new valid specs as pack partitions and builds them; "
                    "rebuilds exactly the pack whose spec changed; skips invalid specs, saying why; an unchanged "
                    "file, or one whose pack is already built from it, starts nothing.")
def spec_file_sensor(context: SensorEvaluationContext, evalpack: EvalpackResource) -> SensorResult:
    seen: dict[str, dict] = json.loads(context.cursor) if context.cursor else {}
    files, skipped = spec_files(Path(evalpack.schemas_dir))
    for name in skipped:
        context.log.warning(f"{name}: skipped; a pack key is letters, digits, '_', '.', '-' (rename the file)")
    known = set(context.instance.get_dynamic_partitions(PACKS.name))
    state: dict[str, dict] = {}
    requests, new = [], []
    invalid: dict[str, list[str]] = {"changed": [], "unchanged": []}  # specs not built: new or edited this tick, or not
    for key, sha in files.items():
        prev = seen.get(key)
        if prev and prev["sha256"] == sha and (key in known or prev.get("invalid")):
            state[key] = prev
            if prev.get("invalid"):
                invalid["unchanged"].append(prev["invalid"])
            continue
        generation = prev["generation"] if prev else 0
        reason = invalid_reason(evalpack.spec_path(key))
        if reason:
            context.log.warning(f"{key}: not built: {reason}")
            state[key] = {"sha256": sha, "generation": generation, "invalid": reason}
            invalid["changed"].append(reason)
            continue
        if key in known and built_from(context.instance, key) == sha:
            state[key] = {"sha256": sha, "generation": generation}
            continue
        if key in known and pack_busy(context.instance, key):
            context.log.info(f"{key}: spec changed while a run is in progress; it is rebuilt on a later tick")
            if prev:
                state[key] = prev
            continue
        requests.append(build_request(key, sha, f"{key}:{sha}:{generation + 1}"))
        state[key] = {"sha256": sha, "generation": generation + 1}
        if key not in known:
            new.append(key)
        context.log.info(f"{key}: {'new spec' if key not in known else 'spec changed'} ({sha[:12]}); "
                         "requesting a build")
    for key in sorted(set(seen) - set(files)):
        context.log.info(f"{key}: spec file removed; the partition and its history stay")
    skip = None
    if not requests:
        skip = ("a spec file is new or changed and invalid, so nothing is built: " + " | ".join(invalid["changed"])
                if invalid["changed"] else "no spec file is new or changed")
        if invalid["unchanged"]:
            skip += "; still invalid: " + " | ".join(invalid["unchanged"])
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[PACKS.build_add_request(new)] if new else None,
        cursor=json.dumps(state, sort_keys=True),
        skip_reason=skip,
    )
