"""Stage 7: attestation.intoto.json (DSSE envelope, in-toto Statement v1) over every other file of the pack."""

import datetime as dt
import hashlib
import io
from contextlib import redirect_stdout

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
from evalpack import attest
from evalpack.spec import Spec

ATTESTATION = "attestation.intoto.json"


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
    path = folder / ATTESTATION
    metadata = {"folder": MetadataValue.path(str(folder)), "signed": key is not None}
    if path.is_file():
        data = path.read_bytes()
        metadata.update({"attestation": MetadataValue.path(str(path)), "bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()})
    return MaterializeResult(metadata=metadata)


@pack_check(asset=attestation, blocking=True)
def attestation_verifies(context, evalpack: EvalpackResource) -> AssetCheckResult:
    """`evalpack verify` on the pack: the signature (against public_key when configured), the statement, a
    re-hash of every file with the file set equal to the subjects, and every gold SQL rerun."""
    folder = evalpack.current_dir(context.partition_key)
    report = io.StringIO()
    try:
        with redirect_stdout(report):
            code = attest.verify_command(folder, public_key=evalpack.public_key)
    except Exception as exc:
        code = 2
        report.write(f"{type(exc).__name__}: {exc}\n")
    lines = report.getvalue().splitlines()
    return AssetCheckResult(
        passed=code == 0, severity=AssetCheckSeverity.ERROR,
        description=lines[-1] if lines else f"evalpack verify exited {code}",
        metadata={"exit_code": code, "folder": MetadataValue.path(str(folder)),
                  "report": MetadataValue.md("```\n" + "\n".join(lines[-200:]) + "\n```")})
