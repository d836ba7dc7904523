"""Stage 4: every question's gold SQL and golden checks on every rotation's written files (DuckDB).

Connections come from ``dagster_duckdb.DuckDBResource``: one fresh connection per rotation (the
engine opens one per rotation and closes it when that rotation is done). Keep the resource
in-memory (``:memory:``); a database file would be shared by parallel runs.
"""

from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, MetadataValue, Output, asset
from dagster_duckdb import DuckDBResource

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource, pack_check
from assets.tables import rotation_tables
from evalpack.build import verify_pack_tables
from evalpack.questions import Question
from evalpack.spec import Spec
from evalpack.verify import Verdict

MAX_ROWS_SHOWN = 50


def verify_with(resource: DuckDBResource, spec: Spec, derived: tuple[Question, ...], folder: Path) -> tuple:
    """The engine's verification with its connections taken from ``resource`` (each closed afterwards)."""
    with ExitStack() as stack:
        return verify_pack_tables(spec, derived, folder, connect=lambda: stack.enter_context(resource.get_connection()))


def kinds_markdown(verdicts: tuple[Verdict, ...]) -> str:
    shipped = Counter(v.question.kind for v in verdicts if v.ships)
    dropped = Counter(v.question.kind for v in verdicts if not v.ships)
    lines = ["| kind | shipped | dropped |", "|---|---:|---:|"]
    lines += [f"| {k} | {shipped[k]} | {dropped[k]} |" for k in sorted(shipped | dropped)]
    lines.append(f"| **all** | {sum(shipped.values())} | {sum(dropped.values())} |")
    return "\n".join(lines)


def drops_markdown(verdicts: tuple[Verdict, ...]) -> str:
    dropped = [v for v in verdicts if not v.ships]
    if not dropped:
        return "No question was dropped: every question passed every golden check on every rotation."
    lines = ["| question | kind | drop reason | failing rotations |", "|---|---|---|---|"]
    for v in dropped[:MAX_ROWS_SHOWN]:
        failing = ", ".join(o.rotation for o in v.observations if not o.passed)
        lines.append(f"| {v.question.id} | {v.question.kind} | {v.drop_reason} | {failing} |")
    if len(dropped) > MAX_ROWS_SHOWN:
        lines.append(f"| ... | {len(dropped) - MAX_ROWS_SHOWN} more | | |")
    return "\n".join(lines)


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"duckdb"}, deps=[rotation_tables])
def verification(context: AssetExecutionContext, spec: Spec, questions: tuple, evalpack: EvalpackResource,
                 duckdb: DuckDBResource) -> Output[tuple]:
    """One verdict per question: its observation and golden checks on every rotation; it ships only if all pass."""
    folder = evalpack.require_work_dir(context.partition_key)
    verdicts: tuple[Verdict, ...] = verify_with(duckdb, spec, questions, folder)
    shipped = sum(v.ships for v in verdicts)
    reasons = Counter(v.drop_reason for v in verdicts if not v.ships)
    context.log.info(f"{shipped}/{len(verdicts)} questions verify on every rotation; dropped: {dict(reasons)}")
    return Output(verdicts, metadata={
        "shipped": shipped,
        "dropped": len(verdicts) - shipped,
        "by_kind": MetadataValue.md(kinds_markdown(verdicts)),
        "drop_reasons": MetadataValue.md(drops_markdown(verdicts)),
        "drop_reason_counts": MetadataValue.json(dict(sorted(reasons.items()))),
        "rotations": MetadataValue.json([f"seed_{s}" for s in spec.seeds()]),
    })


def answer_key_failures(verdicts: tuple[Verdict, ...]) -> list[tuple[Verdict, object]]:
    """(verdict, observation) pairs where the gold SQL errored or did not return the planned answer."""
    return [(v, o) for v in verdicts for o in v.observations
            if o.error is not None or dict(o.checks).get("matches") is False]


@pack_check(asset=verification, blocking=True)
def rotations_hold_the_answer_key(verification: tuple) -> AssetCheckResult:
    """Every question's gold SQL runs and returns the answer the plan fixed, on every rotation's written tables,
    and at least one question ships. Answers come from the plan, never from the data, so a mismatch or an error
    means a rotation's files are not what the plan wrote: a bad pack that must not go further. Questions dropped
    by the other golden checks (empty result, orphan dependence, tie at LIMIT) are reported on the asset, as
    `evalpack build` does, and do not block."""
    failures = answer_key_failures(verification)
    shipped = sum(v.ships for v in verification)
    lines = ["| question | kind | rotation | expected | observed |", "|---|---|---|---|---|"]
    for v, o in failures[:MAX_ROWS_SHOWN]:
        seen = f"error: {o.error}" if o.error else repr(o.value)
        lines.append(f"| {v.question.id} | {v.question.kind} | {o.rotation} | "
                     f"{v.question.expected_for(o.rotation)!r} | {seen} |")
    passed = not failures and shipped > 0
    if passed:
        description = f"all {len(verification)} questions return their planned answers on every rotation"
    elif failures:
        description = f"{len(failures)} (question, rotation) pairs contradict the answer key"
    else:
        description = "no question verified on every rotation, so there is no pack to ship"
    return AssetCheckResult(passed=passed, severity=AssetCheckSeverity.ERROR, description=description, metadata={
        "failures": len(failures),
        "rotations_affected": MetadataValue.json(sorted({o.rotation for _, o in failures})),
        "questions_affected": len({v.question.id for v, _ in failures}),
        "shipped": shipped,
        "details": MetadataValue.md("\n".join(lines) if failures else "none"),
    })
