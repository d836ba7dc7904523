"""The near-miss gate: a question that a plausible mistake answers correctly on every rotation does not ship.

Such a question cannot tell the mistake from the right query, so shipping it would raise every model's score and hide
the weakness in an average. By default (``near_miss: {gate: drop}``) it is dropped like a question that failed a
golden check, its drop reason naming the operators; a spec may keep such questions (``gate: keep``), each flagged in
its record with the mistakes it cannot catch (``uncaught``), which the scorer reports apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from evalpack.spec.grammar import NEAR_MISS_GATES as GATE_POLICIES

if TYPE_CHECKING:  # the card and the report read this module's words, and load neither sqlglot nor DuckDB for them
    from evalpack.checks.nearmiss.study import Mutant, MutantSet
    from evalpack.checks.verification import Verdict

RULE = ("a question ships only when every non-equivalent mutant of the near-miss study fails on at least one "
        "rotation (on a pack with rotated answers, the memorised answer of the first rotation is a mutant too: "
        "constant_answer); with gate: keep such a question ships flagged with the operators it cannot catch "
        "(its record's `uncaught`)")
# which declaration lets the rows tell each operator's mistake from the gold query: the build's warnings name the
# column or relationship; these say what kind of declaration it is
REMEDIES = {
    "inclusive_end": "rows outside the questions' date bounds: widen the time column's start and end by a month, or "
                     "declare near_miss: {margin: {table.column: 1 month}}",
    "date_shift": "rows outside the questions' date bounds: widen the time column's start and end by a month, or "
                  "declare near_miss: {margin: {table.column: 1 month}}",
    "drop_conjunct": "rows each filter removes: a time column with room around the declared months, declared "
                     "`nulls:` or `orphans:` on the relationship",
    "and_or": "rows each filter removes: a time column with room around the declared months",
    "inner_join": "declare `orphans:` on the relationship", "outer_join": "declare `orphans:` on the relationship",
    "anti_join_side": "declare `orphans:` on the relationship", "join_dropped": "declare `orphans:` on the relationship",
    "null_flip": "declare `nulls:` on the relationship",
    "whole_units": "curve targets with cents (e.g. 180000.37)",
    "constant_answer": "more rotations: this question's answer is the same on every one",
}
OTHER_REMEDY = "the rows give the mistake and the gold query the same answer; a fact with more spread would not"


def operators_of(mutants: tuple[Mutant, ...] | tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The operators of ``mutants`` (or of (operator, SQL) pairs), each once, in order."""
    return tuple(dict.fromkeys(m[0] if isinstance(m, tuple) else m.operator for m in mutants))


def gated(verdicts: tuple[Verdict, ...], prepared: MutantSet,
          per_rotation: Mapping[str, Mapping[Mutant, bool | None]], policy: str = "drop") -> tuple[Verdict, ...]:
    """``verdicts`` after the gate: each verified question with a surviving mutant is dropped with them
    (``drop``) or kept with its question's ``uncaught`` set (``keep``). ``per_rotation``: the study's outcomes,
    in seed order. When the gate would drop every verified question, they are kept flagged instead
    (:func:`left_nothing` says so): a pack of flagged questions, reported apart, serves better than none, and the
    build's warnings name the declarations that would let the rows catch the mistakes."""
    from evalpack.checks.nearmiss.study import survivors_of

    if policy not in GATE_POLICIES:
        raise ValueError(f"near-miss gate policy {policy!r}; expected one of {GATE_POLICIES}")
    verified = [v.question.id for v in verdicts if v.verified]
    passing = survivors_of(prepared, verified, per_rotation)
    if verified and len(passing) == len(verified):
        policy = "keep"
    out = []
    for v in verdicts:
        found = passing.get(v.question.id)
        if not found:
            out.append(v)
        elif policy == "drop":
            out.append(replace(v, passing_mistakes=tuple((m.operator, m.sql) for m in found)))
        else:
            out.append(replace(v, question=replace(v.question, uncaught=operators_of(found))))
    return tuple(out)


def gate_summary(verdicts: tuple[Verdict, ...], policy: str) -> dict:
    """The near-miss study's ``gate``: the policy, the rule, how many questions it dropped (or kept flagged) in all
    and per operator (a question counts once under each operator whose mutant passed), and what would save them."""
    dropped = [operators_of(v.passing_mistakes) for v in verdicts if v.passing_mistakes]
    flagged = [v.question.uncaught for v in verdicts if v.ships and v.question.uncaught]
    by_operator = Counter(op for ops in dropped + flagged for op in ops)
    return {
        "policy": policy,
        **({"left_nothing": LEFT_NOTHING} if left_nothing(verdicts, policy) else {}),
        "rule": RULE,
        "dropped": len(dropped),
        "dropped_by_operator": dict(sorted(Counter(op for ops in dropped for op in ops).items())),
        "kept_flagged": len(flagged),
        "kept_by_operator": dict(sorted(Counter(op for ops in flagged for op in ops).items())),
        "remedies": {op: REMEDIES.get(op, OTHER_REMEDY) for op in sorted(by_operator)},
    }


LEFT_NOTHING = ("a plausible mistake passes every verified question on every rotation: rather than ship nothing, "
                "they ship flagged (`uncaught`), as with gate: keep")


def left_nothing(verdicts: tuple[Verdict, ...], policy: str) -> bool:
    """The gate, asked to drop, kept every question flagged: it would have left none (:func:`gated`)."""
    shipped = [v for v in verdicts if v.ships]
    return policy == "drop" and bool(shipped) and all(v.question.uncaught for v in shipped)


def gate_sentence(summary: object) -> str | None:
    """What the near-miss gate did, in a sentence for the card and the report (``summary``: a manifest's
    ``near_miss_study.gate``, read as untrusted: None when it is not one)."""
    if not isinstance(summary, Mapping):
        return None

    def counted(key: str) -> str:
        found = summary.get(key)
        return ", ".join(f"{op} {n}" for op, n in found.items() if isinstance(n, int)) if isinstance(found, Mapping) \
            else ""
    dropped, flagged = summary.get("dropped"), summary.get("kept_flagged")
    if not isinstance(dropped, int) or not isinstance(flagged, int):
        return None
    if flagged:
        why = ("since it would have left none" if summary.get("left_nothing") else
               "as the spec asks (near_miss: gate: keep)")
        return (f"The near-miss gate kept {flagged} question(s) that a plausible mistake answers correctly on every "
                f"rotation ({counted('kept_by_operator')}), {why}; each is flagged with the mistakes it cannot catch "
                "(`uncaught`), and the scorer reports them apart.")
    if dropped:
        return (f"The near-miss gate left out {dropped} question(s) that a plausible mistake answers correctly on every "
                f"rotation ({counted('dropped_by_operator')}; a question counts under each such operator): every "
                "shipped question fails each of its non-equivalent mutants on at least one rotation.")
    return ("The near-miss gate left nothing out: every shipped question fails each of its non-equivalent mutants on at "
            "least one rotation.")


def gate_line(summary: Mapping) -> str | None:
    """The build's one line about the gate (None when it kept nothing out and flagged nothing)."""
    if summary.get("dropped"):
        ops = ", ".join(f"{op} {n}" for op, n in summary["dropped_by_operator"].items())
        return (f"near-miss gate: {summary['dropped']} question(s) left out, a plausible mistake passes them on every "
                f"rotation ({ops}); the warnings name the declarations that would let the rows catch it, and "
                "`near_miss: {gate: keep}` ships them flagged (manifest.json -> near_miss_study.gate)")
    if summary.get("kept_flagged"):
        ops = ", ".join(f"{op} {n}" for op, n in summary["kept_by_operator"].items())
        why = ("; dropping them would have left no question, so they ship flagged: the warnings name the declarations "
               "that would let the rows catch the mistakes") if summary.get("left_nothing") else ""
        return (f"near-miss gate: {summary['kept_flagged']} question(s) kept flagged (`uncaught` in their records), "
                f"a plausible mistake passes them on every rotation ({ops}){why}")
    return None


__all__ = ["GATE_POLICIES", "LEFT_NOTHING", "REMEDIES", "RULE", "gate_line", "left_nothing", "gate_sentence", "gate_summary", "gated", "operators_of"]
