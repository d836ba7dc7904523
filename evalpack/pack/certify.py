"""certificate.json (the verification run) and manifest.json (how the pack was made)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import duckdb
import pyarrow

from evalpack import __version__
from evalpack.checks.golden import MEANINGS
from evalpack.checks.verification import Verdict
from evalpack.core.scoring import COMMITMENT_RULE, COMPARISON_RULE
from evalpack.data.plan import RotationPlan
from evalpack.pack.holdout import SALT_RULE, derivable
from evalpack.questions import unanswerable
from evalpack.questions.derive import SPLIT_RULE, PreviousSplits, Question, fixed_answers
from evalpack.questions.difficulty import RULE
from evalpack.questions.traps import trap_names
from evalpack.spec.dictionary import build_dictionary, column_meaning
from evalpack.spec.kinds import LEVELS
from evalpack.spec.model import Spec

HASHES = {
    "spec_sha256": "SHA-256 (hex) of the spec file's bytes exactly as read, before any parsing; "
                   "CLI overrides (--seed, --rotations) are recorded beside it, not hashed into it",
    "question_sha256": "SHA-256 (hex) of the UTF-8 bytes of the question text",
    "attestation_subjects": "SHA-256 (hex) of each file's bytes, one subject per regular file of the pack "
                            "except attestation.intoto.json, POSIX relative paths, sorted",
    "holdout_commitment": COMMITMENT_RULE,
    "holdout_salt": SALT_RULE,
}


def dumps(data: Any) -> bytes:
    """Canonical JSON bytes for pack files: indented, keys in insertion order, UTF-8, newline."""
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def certificate_header(rotations: list[str], golden_checks: Mapping[str, str] = MEANINGS) -> dict:
    """What every certificate.json opens with, a build's and an import's: the DuckDB that ran the gold SQL, the
    comparison rule, the rotations and what each golden check means there."""
    return {"duckdb_version": duckdb.__version__, "comparison": COMPARISON_RULE, "rotations": rotations,
            "golden_checks": dict(golden_checks)}


def tool_entry() -> dict:
    """manifest.json's ``tool``, a build's and an import's: what made the pack."""
    return {"name": "evalpack", "version": __version__, "duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__}


def certificate(verdicts: tuple[Verdict, ...], rotations: list[str]) -> dict:
    """The verification run: per shipped question and rotation the observed value and the match."""
    shipped = [v for v in verdicts if v.ships]
    return {
        **certificate_header(rotations),
        "questions": [
            {
                "id": v.question.id,
                "results": {
                    # a holdout answer is in the answer key only: the certificate says that it matched
                    o.rotation: {**({} if v.question.split == "holdout" else {"observed": o.value}), "match": o.passed,
                                 "checks": {name: val for name, val in o.checks}}
                    for o in v.observations
                },
            }
            for v in shipped
        ],
        "shipped": len(shipped),
        "all_match": bool(shipped) and all(v.ships for v in shipped),
    }


def dropped_entry(v: Verdict) -> dict:
    """A dropped question as the manifest lists it; a holdout question's gold SQL, answer and observed
    values are left out (a question may have been in an earlier version's holdout)."""
    entry = {
        "id": v.question.id,
        "key": v.question.key,
        "kind": v.question.kind,
        "question": v.question.question,
        "gold_sql": v.question.gold_sql,
        "expected_answer": dict(v.question.expected),
        "drop_reason": v.drop_reason,
        "observed": {o.rotation: (o.value if o.error is None else f"error: {o.error}") for o in v.observations},
        "failed_checks": {o.rotation: o.failed_checks() + (["error"] if o.error else [])
                          for o in v.observations if not o.passed},
        **({"passing_mistakes": [{"operator": op, "sql": sql} for op, sql in v.passing_mistakes]}
           if v.passing_mistakes else {}),
    }
    if v.question.split == "holdout":  # a mutant that passes returns the answer too
        entry.update(gold_sql=None, expected_answer=None, observed=None,
                     **({"passing_mistakes": [{"operator": op, "sql": None} for op, _ in v.passing_mistakes]}
                        if v.passing_mistakes else {}))
    return entry


def semantics(spec: Spec) -> dict:
    """The business words of the schema (the spec's ``semantics:``, else derived from the names): what a row
    of each table is, what each column means, the measures the questions name."""
    dictionary = build_dictionary(spec)
    entries = {t.name: t for t in dictionary.tables}
    return {
        "tables": {t.name: {"row": spec.semantics.table(t.name).singular,
                            "columns": {c.name: f"{c.label}: {column_meaning(c.as_json())}"
                                        for c in entries[t.name].columns}}
                   for t in spec.tables},
        "measures": {m.name: m.definition for m in dictionary.measures},
        "currency": spec.semantics.currency,
    }


def primary_keys(spec: Spec) -> dict[str, str]:
    """Each table's primary key column, where it has one: the parent column its declared links point at, else its
    first unique int column that is never null (`evalpack export` and the exports declare them)."""
    keys = {}
    for r in spec.relationships:
        keys.setdefault(r.parent_table, r.parent_column)
    for t in spec.tables:
        linked = {r.child_column for r in spec.relationships if r.child_table == t.name}
        found = [c.name for c in t.columns if c.type == "int" and c.unique and not c.nullable and c.name not in linked]
        if t.name not in keys and found:
            keys[t.name] = found[0]
    return {t.name: keys[t.name] for t in spec.tables if t.name in keys}


CHANGELOG_BASIS = ("question identities (`key`) and splits against the version continued, as its questions.jsonl "
                   "and manifest.json give them; answers, tables and the near-miss study are compared by "
                   "`evalpack diff OLD_PACK NEW_PACK`")


def changelog(previous: PreviousSplits | None, shipped: list[Question]) -> dict | None:
    """What changed against the version these splits continue (None for a first version): questions added and
    removed by identity, and split moves."""
    if previous is None:
        return None
    before = dict(previous.split_of)
    now = {q.key: q.split for q in shipped}
    return {
        "continues": previous.version,
        "basis": CHANGELOG_BASIS,
        "questions_before": len(before),
        "questions_now": len(now),
        "kept": len(now.keys() & before.keys()),
        "added": sorted(now.keys() - before.keys()),
        "removed": sorted(before.keys() - now.keys()),
        "moved": [{"key": k, "from": before[k], "to": now[k]} for k in sorted(now.keys() & before.keys())
                  if before[k] != now[k]],
    }


def pack_warnings(spec: Spec, plans: tuple[RotationPlan, ...], verdicts: tuple[Verdict, ...],
                  more: list[str] | None = None) -> list[str]:
    """What a build warns of, once each: the spec's notes (Misata keys read and not used), the plans' warnings,
    ``more``, the shipped questions whose answer is the same on every rotation of a rotated pack, and what
    :func:`holdout_warnings` finds. The manifest records them and the CLI prints them."""
    shipped = [v.question for v in verdicts if v.ships]
    return list(dict.fromkeys([*spec.notes, *(w for p in plans for w in p.warnings), *(more or []),
                               *fixed_answers(spec, shipped), *holdout_warnings(spec, plans, verdicts)]))


def holdout_warnings(spec: Spec, plans: tuple[RotationPlan, ...], verdicts: tuple[Verdict, ...]) -> list[str]:
    """A holdout smaller than ``holdout:`` asks for (whole groups of linked questions go to one split, and not every
    group fits), and each holdout answer of a shipped question that the dev answers give away
    (:func:`evalpack.pack.holdout.derivable`: a version continued had the group in both splits, and nothing leaves the
    holdout)."""
    if not spec.holdout or not verdicts:
        return []
    out = []
    held = sum(v.question.split == "holdout" for v in verdicts)
    target = int(Decimal(str(spec.holdout * len(verdicts))).to_integral_value(ROUND_HALF_EVEN))
    if held < target:
        out.append(f"holdout: {spec.holdout:g} asks for {target} of the {len(verdicts)} questions and {held} are "
                   "held out: questions the families' arithmetic links (one table's rows, one relationship) go to "
                   "one split whole, so that no dev answer gives a holdout answer away, and each other group is too "
                   "large for what is left, dev in the version continued, or answered by a row count the manifest "
                   "publishes (manifest.json -> splits.rule)")
    shipped = [v.question.to_record(spec.answers) for v in verdicts if v.ships]
    if any(r["split"] == "holdout" for r in shipped):
        rows = {t.name: {p.rotation: p.table(t.name).rows for p in plans} for t in plans[0].tables} if plans else {}
        given = {}
        for d in derivable(shipped, rows, rotated=spec.answers == "rotated"):
            given.setdefault(d.question, d)
        out += [f"a dev answer gives away a holdout answer: {d} (the version continued had its group in both "
                "splits, and nothing leaves the holdout)" for d in given.values()]
    return out


def manifest(spec: Spec, plans: tuple[RotationPlan, ...], verdicts: tuple[Verdict, ...],
             rows: dict[str, dict[str, int]], schemas: dict[str, dict[str, str]],
             near_miss: dict | None = None, warnings: list[str] | None = None, selection: dict | None = None,
             previous: PreviousSplits | None = None, declines: tuple[Question, ...] = ()) -> dict:
    """How the pack was made, what was dropped and why, the near-miss study, how the splits continue
    ``previous``, and the proof of each question to decline (``declines``). With holdout questions the spec's
    text is withheld (it declares their answers)."""
    shipped = [v for v in verdicts if v.ships]
    dropped = [v for v in verdicts if not v.ships]
    private = any(v.question.split == "holdout" for v in shipped)
    ever = sorted({v.question.key for v in shipped if v.question.split == "holdout"}
                  | (previous.ever_holdout if previous else frozenset()))
    all_warnings = pack_warnings(spec, plans, verdicts, warnings)
    carried = json.loads(previous.rebuilt) if previous and previous.rebuilt else None
    return {
        "pack": spec.name,
        "version": spec.version,
        "description": spec.description,
        "license": spec.license,
        "repo": spec.repo,
        "tool": tool_entry(),
        "seeds": [p.seed for p in plans],
        "rotations": [p.rotation for p in plans],
        "answers": spec.answers,
        "holdout": spec.holdout,
        "gate": spec.gate, "gate_margin": spec.gate_margin,
        "spec": {"file": spec.path.replace("\\", "/").rsplit("/", 1)[-1], "sha256": spec.sha256,
                 "text": None if private else spec.source,
                 **({"text_withheld": "the spec declares the holdout's answers: its text is in the holdout answer "
                                      "key (PACK.holdout-key), its SHA-256 is above"} if private else {})},
        "splits": {"rule": SPLIT_RULE, "continues": carried["continues"] if carried else previous.version if previous
                   else None, "ever_holdout": ever,
                   "holdout_key": {"folder": "PACK.holdout-key (beside the pack, never in it)",
                                   "commitment": COMMITMENT_RULE, "salt": SALT_RULE} if private else None},
        "changelog": carried["changelog"] if carried else changelog(previous, [v.question for v in shipped]
                                                                      + list(declines)),
        "hashes": HASHES,
        "primary_keys": primary_keys(spec),
        "declared_links": [{"child_table": r.child_table, "child_column": r.child_column,
                            "parent_table": r.parent_table, "parent_column": r.parent_column}
                           for r in spec.relationships],
        "tables": {name: {"columns": cols, "rows": {rot: rows[rot][name] for rot in rows}}
                   for name, cols in schemas.items()},
        "semantics": semantics(spec),
        "questions": {
            "shipped": len(shipped),
            "dropped": len(dropped),
            "shipped_by_kind": dict(sorted(Counter(v.question.kind for v in shipped).items())),
            "dropped_by_kind": dict(sorted(Counter(v.question.kind for v in dropped).items())),
            "by_split": dict(sorted(Counter(v.question.split for v in shipped).items())),
            "by_difficulty": {level: sum(v.question.difficulty == level for v in shipped) for level in LEVELS},
            "by_skill": dict(sorted(Counter(s for v in shipped for s in v.question.skills).items())),
            "difficulty_rule": RULE + (TRAPS_DIFFICULTY if spec.traps else ""),
            **({"selection": selection} if selection else {}),
        },
        "warnings": all_warnings,
        "dropped": [dropped_entry(v) for v in dropped],
        "near_miss_study": near_miss,
        "unanswerable": unanswerable.manifest_section(spec, plans[0].answer_key, [(q.id, q.key) for q in declines]),
        **({"traps": traps_section(spec, [v.question for v in shipped])} if spec.traps else {}),
    }


TRAPS_DIFFICULTY = (" With traps declared, the query read is the gold SQL as its family writes it, before the traps' "
                    "reading (rows that do not count left out, codes compared for labels): a question that reads "
                    "through a trap gains the skill business_rule, not points.")


def traps_section(spec: Spec, shipped: list[Question]) -> dict:
    """The manifest's ``traps``: each declared trap with the shipped questions that read through it, and the share
    of the answerable shipped questions some trap touches."""
    answerable = [q for q in shipped if q.answerable]
    touched = sum(bool(q.traps) for q in answerable)
    return {
        "rule": "a question reads through a trap when the query its family writes reads a table with rows that do "
                "not count, a column with a sibling, or a coded column; its record lists them (traps)",
        "declared": {name: {"questions": sum(name in q.traps for q in answerable)} for name in trap_names(spec)},
        "questions_touched": touched,
        "share_touched": round(touched / len(answerable), 4) if answerable else 0.0,
    }
