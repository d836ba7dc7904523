"""Stage 6: attestation.intoto.json (DSSE envelope, in-toto Statement v1) over every other file of the pack."""

import datetime as dt
import functools
import hashlib

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetRecordsFilter,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.certificate import certificate
from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource, pack_check
from assets.spec import spec as spec_asset
from evalpack.core.layout import PackLayout
from evalpack.pack import attest
from evalpack.spec.model import Spec


def build_started(context: AssetExecutionContext) -> dt.datetime:
    """When this pack's build started: the latest materialisation of its spec (now, if there is none)."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=spec_asset.key, asset_partitions=[context.partition_key]), limit=1).records
    if records:
        return dt.datetime.fromtimestamp(records[0].timestamp, dt.UTC)
    return attest.now_utc()


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"json"}, deps=[certificate])
def attestation(context: AssetExecutionContext, spec: Spec, evalpack: EvalpackResource) -> MaterializeResult:
    """The attestation, written last: one subject (SHA-256) per file; signed when a signing key is configured.
    With SOURCE_DATE_EPOCH set it is byte-identical to the one `evalpack build` writes."""
    folder = evalpack.require_work_dir(context.partition_key)
    key = evalpack.signing_key_path()
    attest.write_attestation(folder, spec, started=build_started(context), finished=attest.now_utc(),
                             signing_key=key)
    path = PackLayout(folder).attestation
    placed = functools.partial(evalpack.placed, context.partition_key)
    metadata = {"folder": MetadataValue.path(str(placed(folder))), "signed": key is not None}
    if path.is_file():
        data = path.read_bytes()
        metadata.update({"attestation": MetadataValue.path(str(placed(path))), "bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()})
    return MaterializeResult(metadata=metadata)


@pack_check(asset=attestation, blocking=True)
def attestation_verifies(context, evalpack: EvalpackResource) -> AssetCheckResult:
    """The integrity check `evalpack verify` makes: the signature (against public_key when configured), the
    statement, and a re-hash of every file with the file set equal to the subjects. The gold SQL is not rerun
    here: the certificate's check reran it on these files just before they were attested."""
    folder = evalpack.current_dir(context.partition_key)
    result = attest.verify_pack(folder, public_key=evalpack.public_key, gold=False)
    n = len(result.failures)
    description = (f"{result.files} files match the attestation; signature {result.signature}" if result.ok
                   else f"{n} problem{'s' if n != 1 else ''}: {result.failures[0]}")
    return AssetCheckResult(
        passed=result.ok, severity=AssetCheckSeverity.ERROR, description=description,
        metadata={"signature": result.signature, "files": result.files,
                  "folder": MetadataValue.path(str(evalpack.placed(context.partition_key, folder))),
                  "report": MetadataValue.md("```\n" + "\n".join(result.lines[-200:]) + "\n```")})
