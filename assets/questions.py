"""Stage 2: the rotation plans, the questions with gold SQL and expected answers, and the near-miss mutants
of that SQL, all derived from the declarations alone (no row is read)."""

import os
from collections import Counter

from dagster import AssetExecutionContext, MetadataValue, Output, asset

from assets.common import CODE_VERSION, GROUP, PACKS, EvalpackResource
from evalpack.build import Derived, continued_splits, derive
from evalpack.data.plan import plan_pack
from evalpack.spec.model import Spec


def counts_markdown(title: str, counts: dict[str, int]) -> str:
    lines = [f"| {title} | questions |", "|---|---:|"]
    lines += [f"| {k} | {n} |" for k, n in sorted(counts.items())]
    return "\n".join(lines)


@asset(partitions_def=PACKS, group_name=GROUP, code_version=CODE_VERSION, kinds={"python", "sql"})
def questions(context: AssetExecutionContext, spec: Spec, evalpack: EvalpackResource) -> Output[Derived]:
    """Every question the declarations fix, before any verification (answers come from the plan); their
    splits continue those of the finished pack this build will replace, as ``evalpack build`` does."""
    previous = continued_splits(spec, evalpack.pack_dir(context.partition_key))
    derived = derive(spec, plan_pack(spec), previous, jobs=os.cpu_count() or 1)
    drafts = derived.questions
    kinds = Counter(q.kind for q in drafts)
    splits = Counter(q.split for q in drafts)
    mutants, _ = derived.mutants.of(q.id for q in drafts)
    context.log.info(f"{len(drafts)} questions derived: {dict(sorted(kinds.items()))}; {len(mutants)} mutants")
    return Output(derived, metadata={
        "questions": len(drafts),
        "by_kind": MetadataValue.md(counts_markdown("kind", kinds)),
        "by_split": MetadataValue.json(dict(sorted(splits.items()))),
        "by_difficulty": MetadataValue.json(dict(Counter(q.difficulty for q in drafts))),
        "selection": MetadataValue.json(derived.selection.to_dict() if derived.selection else {}),
        "unanswerable": MetadataValue.json(dict(sorted(Counter(q.kind for q in derived.declines).items()))),
        "answers": spec.answers,
        "continues": previous.version if previous else "nothing (a first version)",
        "mutants": len(mutants),
        "first_question": MetadataValue.md(f"**{drafts[0].id}** {drafts[0].question}\n\n```sql\n"
                                           f"{drafts[0].gold_sql}\n```") if drafts else "none",
    })
