"""Stage 3: questions with gold SQL and expected answers, derived from the plan alone (no row is read)."""

from collections import Counter

from dagster import AssetExecutionContext, MetadataValue, Output, asset

from assets.common import CODE_VERSION, GROUP, PACKS
from evalpack.plan import plan_pack
from evalpack.questions import Question, derive_questions
from evalpack.spec import Spec


def counts_markdown(title: str, counts: dict[str, int]) -> str:
    lines = [f"| {title} | questions |", "|---|---:|"]
    lines += [f"| {k} | {n} |" for k, n in sorted(counts.items())]
    return "\n".join(lines)


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"python", "sql"})
def questions(context: AssetExecutionContext, spec: Spec) -> Output[tuple]:
    """Every question the declarations fix, before any verification (answers come from the plan)."""
    derived: tuple[Question, ...] = derive_questions(spec, plan_pack(spec))
    kinds = Counter(q.kind for q in derived)
    splits = Counter(q.split for q in derived)
    context.log.info(f"{len(derived)} questions derived: {dict(sorted(kinds.items()))}")
    return Output(derived, metadata={
        "questions": len(derived),
        "by_kind": MetadataValue.md(counts_markdown("kind", kinds)),
        "by_split": MetadataValue.json(dict(sorted(splits.items()))),
        "answers": spec.answers,
        "first_question": MetadataValue.md(f"**{derived[0].id}** {derived[0].question}\n\n```sql\n"
                                           f"{derived[0].gold_sql}\n```") if derived else "none",
    })
