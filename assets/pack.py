"""Stage 7: the finished pack, moved from its working folder into ``<packs_dir>/<pack>`` in one rename.

It runs only after the blocking checks upstream passed, so a pack that reaches ``packs/`` is whole,
verified and attested; a failed build leaves its working folder in ``packs/.work/`` to inspect.
"""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from assets.attestation import attestation
from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource
from evalpack.build import publish_dir
from evalpack.core.layout import PackLayout


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"folder"}, deps=[attestation])
def pack(context: AssetExecutionContext, evalpack: EvalpackResource) -> MaterializeResult:
    """The published pack folder (replacing the previous build of this pack only once the new one is whole)."""
    work = evalpack.require_work_dir(context.partition_key)
    evalpack.claim_packs_dir()
    out = evalpack.pack_dir(context.partition_key)
    publish_dir(work, out)
    files = [p for p in out.rglob("*") if p.is_file()]
    context.log.info(f"pack published at {out}")
    return MaterializeResult(metadata={
        "path": MetadataValue.path(str(out)),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "questions": len(PackLayout(out).read_records()),
    })
