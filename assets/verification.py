"""Stage 4: every rotation's pass combined: the verdict per question (it ships only if it passed every golden
check on every rotation), the near-miss study of the questions that ship, and the audit's findings."""

from collections import Counter

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, MetadataValue, Output, asset

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource, pack_check
from evalpack.build import Checked, Derived, combine_rotations
from evalpack.checks.nearmiss.study import study_markdown
from evalpack.checks.verification import Verdict
from evalpack.pack.report import report_path_beside
from evalpack.spec.model import Spec

MAX_ROWS_SHOWN = 50


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
        failing = ", ".join(o.rotation for o in v.observations if not o.passed) or "none (near-miss gate)"
        lines.append(f"| {v.question.id} | {v.question.kind} | {v.drop_reason} | {failing} |")
    if len(dropped) > MAX_ROWS_SHOWN:
        lines.append(f"| ... | {len(dropped) - MAX_ROWS_SHOWN} more | | |")
    return "\n".join(lines)


def survival(study: dict) -> tuple[float, int, int]:
    """(share of mutants run that match on every rotation, survivors, mutants run)."""
    return float(study["match_all_rate"]), int(study["survivors_total"]), int(study["mutants_run"])


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"duckdb"})
def verification(context: AssetExecutionContext, spec: Spec, questions: Derived, rotations: list,
                 evalpack: EvalpackResource) -> Output[Checked]:
    """One verdict per question: its observation and golden checks on every rotation; it ships only if all pass.
    With the near-miss study (plausible wrong versions of each shipped gold SQL) and the audit's findings."""
    checked = combine_rotations(spec, questions, [r.check for r in rotations])
    verdicts = checked.verdicts
    shipped = len(checked.shipped)
    reasons = Counter(v.drop_kind for v in verdicts if not v.ships)
    rate, survived, ran = survival(checked.near_miss)
    gate = checked.near_miss.get("gate") or {}
    context.log.info(f"{shipped}/{len(verdicts)} questions verify on every rotation and pass the near-miss gate; "
                     f"dropped: {dict(reasons)}; near-miss: {ran} mutants run, {survived} match on every rotation "
                     f"({rate:.2%})")
    return Output(checked, metadata={
        "shipped": shipped,
        "dropped": len(verdicts) - shipped,
        "by_kind": MetadataValue.md(kinds_markdown(verdicts)),
        "drop_reasons": MetadataValue.md(drops_markdown(verdicts)),
        "drop_reason_counts": MetadataValue.json(dict(sorted(reasons.items()))),
        "rotations": MetadataValue.json(list(spec.rotation_names())),
        "near_miss": MetadataValue.md(study_markdown(checked.near_miss)),
        "mutants_run": ran,
        "survivors": survived,
        "survival_rate": rate,
        # questions the near-miss gate kept out (or, with gate: keep, flagged), counted per operator
        "gate_dropped": int(gate.get("dropped", 0)),
        "gate_dropped_by_operator": MetadataValue.json(gate.get("dropped_by_operator", {})),
        "gate_kept_flagged": int(gate.get("kept_flagged", 0)),
        # the pack report (charts of this study, its survivors) that the certificate asset writes
        "report": MetadataValue.path(str(report_path_beside(evalpack.pack_dir(context.partition_key)))),
    })


def answer_key_failures(verdicts: tuple[Verdict, ...]) -> list[tuple[Verdict, object]]:
    """(verdict, observation) pairs where the gold SQL errored or did not return the planned answer."""
    return [(v, o) for v in verdicts for o in v.observations
            if o.error is not None or dict(o.checks).get("matches") is False]


@pack_check(asset=verification, blocking=True)
def rotations_hold_the_answer_key(verification: Checked) -> AssetCheckResult:
    """Every question's gold SQL runs and returns the answer the plan fixed, on every rotation's written tables.
    Answers come from the plan, never from the data, so a mismatch or an error means a rotation's files are not
    what the plan wrote: a bad pack that must not go further. Questions dropped by the other golden checks (empty
    result, orphan dependence, tie at LIMIT) are reported on the asset, as `evalpack build` does, and do not block."""
    verdicts = verification.verdicts
    failures = answer_key_failures(verdicts)
    lines = ["| question | kind | rotation | expected | observed |", "|---|---|---|---|---|"]
    for v, o in failures[:MAX_ROWS_SHOWN]:
        seen = f"error: {o.error}" if o.error else repr(o.value)
        lines.append(f"| {v.question.id} | {v.question.kind} | {o.rotation} | "
                     f"{v.question.expected_for(o.rotation)!r} | {seen} |")
    if failures:
        description = f"{len(failures)} (question, rotation) pairs contradict the answer key"
    else:
        description = f"all {len(verdicts)} questions return their planned answers on every rotation"
    return AssetCheckResult(passed=not failures, severity=AssetCheckSeverity.ERROR, description=description,
                            metadata={
                                "failures": len(failures),
                                "rotations_affected": MetadataValue.json(sorted({o.rotation for _, o in failures})),
                                "questions_affected": len({v.question.id for v, _ in failures}),
                                "shipped": len(verification.shipped),
                                "details": MetadataValue.md("\n".join(lines) if failures else "none"),
                            })


@pack_check(asset=verification, blocking=False)
def near_miss_survival_under_threshold(verification: Checked, evalpack: EvalpackResource) -> AssetCheckResult:
    """The share of near-miss mutants that still match on every rotation stays at or under the pack's threshold
    (a warning: the pack still ships, but its questions let too many plausible wrong queries pass)."""
    study = verification.near_miss
    rate, survived, ran = survival(study)
    threshold = evalpack.near_miss_threshold if evalpack.near_miss_threshold is not None else study["threshold"]
    listed = "\n".join(f"- {s['question']} `{s['operator']}`: `{s['sql']}`" for s in study["survivors"][:20])
    return AssetCheckResult(
        passed=rate <= threshold, severity=AssetCheckSeverity.WARN,
        description=f"{survived} of {ran} mutants match on every rotation ({rate:.2%}; threshold {threshold:.2%})",
        metadata={"survival_rate": rate, "threshold": float(threshold), "survivors": survived, "mutants_run": ran,
                  "examples": MetadataValue.md(listed or "none")})
