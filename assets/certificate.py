"""Stage 5: questions.jsonl, certificate.json, manifest.json, README.md (the dataset card) and verify.py, written
from the verified results."""

from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource, pack_check
from evalpack.build import Checked, Derived, pack_findings, write_pack_files
from evalpack.core import layout
from evalpack.core.scoring import run_gold
from evalpack.pack.report import report_path_beside, write_pack_report
from evalpack.spec.model import Spec

PACK_FILES = (layout.QUESTIONS, layout.CERTIFICATE, layout.MANIFEST, layout.CARD, layout.SCORER)
#: The report is written before the attestation asset runs: its page says so instead of "unattested".
NOT_YET_ATTESTED = {"status": "pending", "files": 0,
                    "message": "this report was written by the certificate asset, before the attestation asset "
                               "attests the pack; check the finished pack with `evalpack verify PACK`"}


def files_markdown(folder: Path, names: tuple[str, ...]) -> str:
    lines = ["| file | bytes |", "|---|---:|"]
    lines += [f"| {n} | {(folder / n).stat().st_size:,} |" for n in names if (folder / n).exists()]
    return "\n".join(lines)


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def audit_markdown(findings: list) -> str:
    if not findings:
        return "The audit (`evalpack audit`) found nothing."
    lines = ["| question | kind | rotation | finding | do |", "|---|---|---|---|---|"]
    lines += [f"| {f.question or '(pack)'} | {f.kind} | {f.rotation or ''} | {cell(f.message)} | {cell(f.action)} |"
              for f in findings[:50]]
    return "\n".join(lines)


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"json"})
def certificate(context: AssetExecutionContext, spec: Spec, questions: Derived, rotations: list,
                verification: Checked, evalpack: EvalpackResource) -> MaterializeResult:
    """The shipped questions, the verification certificate and the manifest (with the near-miss study), audited."""
    folder = evalpack.require_work_dir(context.partition_key)
    rows = {r.check.rotation: r.rows for r in rotations}
    write_pack_files(folder, spec, questions, verification.verdicts, rows, verification.near_miss)
    findings = pack_findings(folder, verification)  # the audit `evalpack build` prints
    cert, manifest = layout.PackLayout(folder).read_certificate(), layout.PackLayout(folder).read_manifest()
    evalpack.claim_packs_dir()  # the report goes beside the finished pack, in Dagster's own folder
    report = write_pack_report(folder, report_path_beside(evalpack.pack_dir(context.partition_key)),
                               findings=[f.to_dict() for f in findings], attestation=NOT_YET_ATTESTED)
    return MaterializeResult(metadata={
        "folder": MetadataValue.path(str(evalpack.placed(context.partition_key, folder))),
        "report": MetadataValue.path(str(report)),
        "report_url": MetadataValue.url(report.as_uri()),
        "files": MetadataValue.md(files_markdown(folder, PACK_FILES)),
        "shipped": manifest.get("questions", {}).get("shipped"),
        "dropped": manifest.get("questions", {}).get("dropped"),
        "all_match": cert.get("all_match"),
        "warnings": MetadataValue.json(manifest.get("warnings", [])),
        "spec_sha256": spec.sha256,
        "audit_findings": len(findings),
        "audit": MetadataValue.md(audit_markdown(findings)),
    })


@pack_check(asset=certificate, blocking=True)
def shipped_questions_verify_on_every_rotation(context, evalpack: EvalpackResource) -> AssetCheckResult:
    """Reruns every question of the written questions.jsonl on every rotation's tables as they are on disk now,
    with the same code a consumer's verify.py runs (evalpack.core.scoring.run_gold): all must match."""
    folder = evalpack.current_dir(context.partition_key)
    passed, total, lines = run_gold(folder)
    failing = [line for line in lines if not line.startswith("PASS")]
    return AssetCheckResult(
        passed=bool(total) and passed == total, severity=AssetCheckSeverity.ERROR,
        description=f"{passed}/{total} shipped questions verify on every rotation of {folder}",
        metadata={"passed": passed, "total": total,
                  "folder": MetadataValue.path(str(evalpack.placed(context.partition_key, folder))),
                  "failures": MetadataValue.md("\n".join(f"- {line}" for line in failing[:50]) or "none")})
