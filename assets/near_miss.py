"""Stage 5: the near-miss study: plausible wrong versions of each shipped gold SQL, rerun on every rotation."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, MetadataValue, Output, asset

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource, pack_check
from evalpack import nearmiss
from evalpack.plan import plan_pack
from evalpack.spec import Spec

COLUMNS = ("mutants", "equivalent", "errored", "match_any", "match_all")


def study_markdown(study: dict) -> str:
    """The engine's Markdown table when it has one, else a table of whatever per-operator counts the study has."""
    render = getattr(nearmiss, "study_markdown", None)
    if render is not None:
        return render(study)
    operators = study.get("operators") or {}
    if not operators:
        return "No mutant was run."
    columns = [c for c in COLUMNS if any(c in row for row in operators.values())] or sorted(
        {k for row in operators.values() for k in row})
    lines = ["| operator | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {op} | " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for op, row in operators.items()]
    return "\n".join(lines)


def survival(study: dict) -> tuple[float, int, int]:
    """(share of mutants run that match on every rotation, survivors, mutants run)."""
    operators = (study.get("operators") or {}).values()
    ran = study.get("mutants_run", sum(r.get("mutants", 0) for r in operators))
    survived = sum(r.get("match_all", 0) for r in operators)
    rate = study.get("match_all_rate", survived / ran if ran else 0.0)
    return float(rate), survived, ran


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"duckdb", "sql"})
def near_miss(context: AssetExecutionContext, spec: Spec, verification: tuple,
              evalpack: EvalpackResource) -> Output[dict]:
    """How many plausible wrong queries per mutation operator would still pass (the manifest's near_miss_study)."""
    folder = evalpack.require_work_dir(context.partition_key)
    shipped = tuple(v.question for v in verification if v.ships)
    study = nearmiss.run_study(spec, plan_pack(spec), shipped, folder)
    rate, survived, ran = survival(study)
    context.log.info(f"near-miss study: {ran} mutants run, {survived} match on every rotation ({rate:.2%})")
    return Output(study, metadata={
        "near_miss": MetadataValue.md(study_markdown(study)),
        "mutants_run": ran,
        "survivors": survived,
        "survival_rate": rate,
        "questions_studied": len(shipped),
    })


@pack_check(asset=near_miss, blocking=False)
def near_miss_survival_under_threshold(near_miss: dict, evalpack: EvalpackResource) -> AssetCheckResult:
    """The share of near-miss mutants that still match on every rotation stays at or under the pack's threshold
    (a warning: the pack still ships, but its questions let too many plausible wrong queries pass)."""
    rate, survived, ran = survival(near_miss)
    threshold = evalpack.near_miss_threshold
    if threshold is None:
        threshold = near_miss.get("threshold")
    if threshold is None:
        return AssetCheckResult(passed=True, severity=AssetCheckSeverity.WARN, metadata={"survival_rate": rate},
                                description="no threshold: set near_miss_threshold on the evalpack resource")
    survivors = near_miss.get("survivors") or []
    listed = "\n".join(f"- {s.get('question')} `{s.get('operator')}`: `{s.get('sql')}`" for s in survivors[:20])
    return AssetCheckResult(
        passed=rate <= threshold, severity=AssetCheckSeverity.WARN,
        description=f"{survived} of {ran} mutants match on every rotation ({rate:.2%}; threshold {threshold:.2%})",
        metadata={"survival_rate": rate, "threshold": float(threshold), "survivors": survived, "mutants_run": ran,
                  "examples": MetadataValue.md(listed or "none")})
