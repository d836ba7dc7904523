"""Questions, gold SQL and expected answers, derived from the answer keys alone.

Gold SQL is built as a sqlglot AST (DuckDB dialect) so that verification and the near-miss
study can transform it. The text is an analyst's question in the spec's business words
(:mod:`evalpack.questions.phrasing`), complete under the pack's data dictionary; its ``evidence`` is external
knowledge in plain words (the definition of a business term it uses) or None.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from sqlglot import exp

from evalpack.core import cache
from evalpack.core.errors import SpecError
from evalpack.data.plan import AnswerKey, RotationPlan, stable_int
from evalpack.questions import unanswerable
from evalpack.questions.difficulty import label
from evalpack.questions.families import FAMILIES
from evalpack.questions.families.base import Draft, Drafts
from evalpack.questions.phrasing import evidence_for
from evalpack.questions.sqltext import DIALECT, parse_sql
from evalpack.questions.traps import TRAP_SKILL, counted_wording, read_traps, touched_by
from evalpack.spec.kinds import LEVELS
from evalpack.spec.model import Spec


@dataclass(frozen=True)
class Question:
    """One question. ``expected`` maps each rotation folder (``seed_42``) to its answer."""

    id: str
    question: str
    gold_sql: str
    expected: tuple[tuple[str, Any], ...]
    answer_type: str  # number | integer | string
    round_decimals: int | None
    kind: str
    tags: tuple[str, ...]
    split: str = "dev"
    tables: tuple[str, ...] = ()
    evidence: str | None = None  # external knowledge in words (BIRD's "evidence"), never SQL in words
    paraphrases: tuple[str, ...] = ()  # the question's other phrasings, asking the same thing
    difficulty: str = ""  # simple | moderate | challenging, from the gold SQL (evalpack.questions.difficulty.RULE)
    skills: tuple[str, ...] = ()  # what the gold SQL exercises (evalpack.questions.difficulty.SKILLS)
    key: str = ""  # the question's identity: its family and parameters, never its wording (fixes its split)
    orphan_rows: str = ""  # "included": the answer counts rows whose parent is missing; "excluded": joined away
    answerable: bool = True  # False: no SQL on this schema answers it, declining is correct (evalpack.questions.unanswerable)
    unanswerable_reason: str = ""  # why not, in a sentence
    traps: tuple[str, ...] = ()  # the traps its answer reads through (evalpack.questions.traps.touched_by)
    # the near-miss operators whose mutants pass on every rotation, for a question the spec keeps anyway
    # (near_miss: {gate: keep}; evalpack.checks.nearmiss.gate): the mistakes it cannot catch
    uncaught: tuple[str, ...] = ()

    @property
    def question_sha256(self) -> str:
        return hashlib.sha256(self.question.encode("utf-8")).hexdigest()

    def expected_for(self, rotation: str) -> Any:
        return dict(self.expected)[rotation]

    def to_record(self, answers: str) -> dict:
        """The questions.jsonl record (PACK_FORMAT.md)."""
        values = dict(self.expected)
        expected = next(iter(values.values())) if answers == "shared" else values
        return {
            "id": self.id,
            "key": self.key,
            "orphan_rows": self.orphan_rows,
            "question": self.question,
            "evidence": self.evidence,
            "paraphrases": list(self.paraphrases),
            "answerable": self.answerable,
            "unanswerable_reason": self.unanswerable_reason or None,
            "gold_sql": self.gold_sql if self.answerable else None,
            "expected_answer": expected if self.answerable else None,
            "answer_type": self.answer_type if self.answerable else None,
            "round_decimals": self.round_decimals,
            "kind": self.kind,
            "difficulty": self.difficulty,
            "skills": list(self.skills),
            "split": self.split,
            "question_sha256": self.question_sha256,
            "tags": list(self.tags),
            **({"traps": list(self.traps)} if self.traps else {}),
            **({"uncaught": list(self.uncaught)} if self.uncaught else {}),
        }


# --------------------------------------------------------------------------- SQL pieces


# --------------------------------------------------------------------------- families


def _drafts(spec: Spec, key: AnswerKey) -> Drafts:
    """Every question the answer key of one rotation yields, with that rotation's answer: each family's drafts, in
    the order of :data:`~evalpack.questions.families.FAMILIES`."""
    return [draft for family in FAMILIES for draft in family(spec, key)]


@dataclass(frozen=True)
class Selection:
    """How ``questions:`` chose a pack's questions from every one its declarations give (the pool)."""

    pool: tuple[tuple[str, int], ...]  # per difficulty level, after include/exclude
    chosen: tuple[tuple[str, int], ...]
    mix: tuple[tuple[str, float], ...] | None  # the mix asked for; None: ``difficulty: any``
    mix_applied: bool
    note: str = ""  # why the mix was not applied

    def to_dict(self) -> dict:
        """The manifest's ``questions.selection``."""
        return {"pool": dict(self.pool), "chosen": dict(self.chosen), "pool_size": sum(n for _, n in self.pool),
                "mix": dict(self.mix) if self.mix else "any", "mix_applied": self.mix_applied, "note": self.note,
                "rule": SELECTION_RULE}


SELECTION_RULE = (
    "Every question the declarations give forms the pool (after questions.include / exclude). With a difficulty "
    "mix, n is the largest count whose share of each level the pool can fill (at most questions.max); each level "
    "gets n times its share, rounded by largest remainder. Within a level, questions are taken round-robin over "
    "the families (families whose SQL needs a window, CTE, subquery, HAVING or join first, the rest in an order "
    "drawn from the seed), each family's questions in an order drawn from the seed, so every family is kept "
    "before any has two more than another. When the mix could keep fewer than half of the pool (however large "
    "questions.max), it is not applied: the pool ships (up to questions.max, taken the same way) and the manifest "
    "says why."
)
COMPLEX_SKILLS = frozenset({"window", "cte", "subquery", "having", "join"})


def _order(spec: Spec, items: list[tuple[Draft, str, tuple[str, ...]]]) -> list[int]:
    """Indexes of ``items`` round-robin over their families (complex families first, then seeded order)."""
    families: dict[str, list[int]] = {}
    for i, (draft, _, _) in enumerate(items):
        families.setdefault(draft.kind, []).append(i)

    def family_key(kind: str) -> tuple:
        complex_ = any(COMPLEX_SKILLS & set(items[i][2]) for i in families[kind])
        return (not complex_, stable_int("family", spec.seed, kind))

    queues = [sorted(families[k], key=lambda i: stable_int("pick", spec.seed, items[i][0].key))
              for k in sorted(families, key=family_key)]
    out: list[int] = []
    depth = 0
    while len(out) < len(items):
        out += [q[depth] for q in queues if depth < len(q)]
        depth += 1
    return out


def _counts(mix: tuple[tuple[str, float], ...], pool: dict[str, int], most: int | None) -> dict[str, int]:
    """How many questions of each level the mix takes from ``pool``: the largest n it can fill."""
    shares = dict(mix)
    fill = [int(Fraction(pool.get(level, 0)) / Fraction(str(share))) for level, share in mix if share > 0]
    n = min(fill + ([most] if most is not None else []))
    exact = {level: Fraction(str(shares[level])) * n for level in shares}
    counts = {level: int(v) for level, v in exact.items()}
    by_remainder = sorted(shares, key=lambda level: (-(exact[level] - counts[level]), LEVELS.index(level)))
    for level in by_remainder[:n - sum(counts.values())]:
        counts[level] += 1
    return {level: min(c, pool.get(level, 0)) for level, c in counts.items()}


def select(spec: Spec, items: list[tuple[Draft, str, tuple[str, ...]]]) -> tuple[list[int], Selection]:
    """The indexes (in ``items``' order) of the questions ``spec.questions`` keeps, and how they were chosen.

    ``items`` are (draft, difficulty, skills); the choice reads only the drafts' keys, kinds and labels,
    which are the same on every rotation."""
    plan = spec.questions
    eligible = [i for i, (d, _, _) in enumerate(items)
                if (not plan.include or d.kind in plan.include) and d.kind not in plan.exclude]
    answerable = [kind for kind in plan.include if kind not in unanswerable.REASONS]
    if answerable and not eligible:  # else the build ends in "no question verified", which says nothing of why
        given = sorted({d.kind for d, _, _ in items})
        raise SpecError(spec.path, None, "questions",
                        f"include lists {', '.join(answerable)}, and this spec's declarations give no question of "
                        f"{'that family' if len(answerable) == 1 else 'those families'}; the families they "
                        f"give are {', '.join(given) or 'none'}: include some of those, or declare what the family "
                        "asks about (README.md, the table of families)")
    by_level = {level: [i for i in eligible if items[i][1] == level] for level in LEVELS}
    pool = {level: len(v) for level, v in by_level.items()}
    chosen: set[int] = set()
    note, applied = "", False
    if plan.mix is not None:
        fillable = sum(_counts(plan.mix, pool, None).values())
        if fillable and 2 * fillable >= len(eligible):
            applied = True
            counts = _counts(plan.mix, pool, plan.max)
            for level, ids in by_level.items():
                picked = _order(spec, [items[i] for i in ids])[:counts[level]]
                chosen |= {ids[j] for j in picked}
        else:
            note = (f"the pool ({', '.join(f'{k} {v}' for k, v in pool.items())}) would fill the mix with only "
                    f"{fillable} of its {len(eligible)} questions; the pool ships instead")
    if not applied:
        limit = len(eligible) if plan.max is None else plan.max
        chosen = {eligible[j] for j in _order(spec, [items[i] for i in eligible])[:limit]}
    kept = sorted(chosen)
    return kept, Selection(tuple(pool.items()), tuple((level, sum(items[i][1] == level for i in kept))
                                                       for level in LEVELS), plan.mix, applied, note)


def derive_questions(spec: Spec, plans: tuple[RotationPlan, ...]) -> tuple[Question, ...]:
    """All questions of a pack, with each rotation's expected answer, ids ``q001``..."""
    return derive_selected(spec, plans)[0]


def rotation_answers(spec: Spec, plan: RotationPlan) -> list[tuple[str, Any]]:
    """(key, answer) of every question one rotation's answer key yields: what :func:`derive_selected` needs of
    each rotation after the first (the wording and gold SQL are the same on every rotation)."""
    return [(draft.key, answer) for draft, answer in _drafts(spec, plan.answer_key)]


def labels_of(queries: Sequence[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """:func:`evalpack.questions.difficulty.label` of each (gold SQL, answer type), through the cache on disk: one entry for
    them all, addressed by evalpack.questions.difficulty's source, sqlglot's version and every query in order. A pure function
    of the texts, so a spec rebuilt with the same questions finds its labels (a tenth of a second of parsing at 1x)."""
    def decode(stored: object) -> list[tuple[str, tuple[str, ...]]] | None:
        if isinstance(stored, list) and len(stored) == len(queries) and all(
                isinstance(s, list) and len(s) == 2 and s[0] in LEVELS and isinstance(s[1], list)
                and all(isinstance(skill, str) for skill in s[1]) for s in stored):
            return [(level, tuple(skills)) for level, skills in stored]
        return None

    return cache.remembered("labels", ("evalpack.questions.difficulty",), [json.dumps(list(queries))],
                            lambda: [label(sql, answer_type) for sql, answer_type in queries], decode=decode,
                            encode=lambda made: [[level, list(skills)] for level, skills in made])


def derive_selected(spec: Spec, plans: tuple[RotationPlan, ...], previous: PreviousSplits | None = None,
                    later: Sequence[Future] | None = None) -> tuple[tuple[Question, ...], Selection]:
    """The questions ``spec.questions`` selects, with each rotation's expected answer, ids ``q001``..., and
    how they were selected; their splits continue ``previous`` (:func:`assign_splits`). ``later``: the
    :func:`rotation_answers` of the rotations after the first, being computed elsewhere (a build's worker
    processes); else they are computed here."""
    base = _drafts(spec, plans[0].answer_key)
    if spec.traps:
        base = [(counted_wording(spec, draft), answer) for draft, answer in base]
    written = [draft.sql.sql(dialect=DIALECT) for draft, _ in base]
    # the level and skills are those of the query as its family writes it (difficulty.RULE); reading the traps
    # adds the skill TRAP_SKILL, not a level
    gold = [read_traps(spec, draft.sql).sql(dialect=DIALECT) for draft, _ in base] if spec.traps else written
    labels = labels_of([(sql, draft.answer_type) for sql, (draft, _) in zip(written, base)])
    reached = [touched_by(spec, draft.sql) for draft, _ in base]
    keys = [draft.key for draft, _ in base]
    per_rotation = [[answer for _, answer in base]]
    for plan, pending in zip(plans[1:], later or [None] * (len(plans) - 1), strict=True):
        pairs = pending.result() if pending is not None else rotation_answers(spec, plan)
        if [key for key, _ in pairs] != keys:
            raise AssertionError("rotations planned different question sets")
        per_rotation.append([answer for _, answer in pairs])
    kept, selection = select(spec, [(draft, level, skills) for (draft, _), (level, skills) in zip(base, labels)])
    width = _id_width(len(kept), len(_to_decline(spec, plans, len(kept))))
    orphan_rows = _orphan_rows(plans[0].answer_key)
    terms = dictionary_terms(spec)
    questions = []
    for n, i in enumerate(kept):
        draft = base[i][0]
        expected = tuple((p.rotation, answers[i]) for p, answers in zip(plans, per_rotation))
        text, paraphrases = draft.wording.chosen(spec.seed, draft.key)
        level, skills = labels[i]
        if reached[i]:
            skills = (*skills, TRAP_SKILL)
        questions.append(Question(
            id=f"q{n + 1:0{width}d}",
            question=text,
            evidence=evidence_for(" ".join(draft.wording.phrasings), terms),
            paraphrases=paraphrases,
            gold_sql=gold[i],
            expected=expected,
            answer_type=draft.answer_type,
            round_decimals=draft.round_decimals,
            kind=draft.kind,
            tags=draft.tags,
            tables=draft.tables,
            difficulty=level,
            skills=skills,
            key=draft.key,
            orphan_rows="included" if draft.kind in ABOUT_ORPHANS else orphan_rows(draft.tables),
            traps=reached[i],
        ))
    return assign_splits(spec, tuple(questions), previous, public_numbers(plans)), selection


def dictionary_terms(spec: Spec) -> tuple[tuple[str, str], ...]:
    """The business terms the spec declares (``semantics.terms``), as (term, definition): what a question's
    evidence draws on. The terms the families define themselves (a trial balance, a closing balance) are in the
    dictionary only: evidence they would give every question of a family and none of the questions to decline,
    so its presence alone would tell the two apart."""
    return spec.semantics.terms


def _id_width(answerable: int, declines: int) -> int:
    return max(3, len(str(answerable + declines)))


def _to_decline(spec: Spec, plans: tuple[RotationPlan, ...], answerable: int) -> list[unanswerable.Unanswerable]:
    """The unanswerable questions to ship beside ``answerable`` ones, as ``questions:`` includes their kinds."""
    plan = spec.questions
    pool = [u for u in unanswerable.derive(spec, plans[0].answer_key)
            if (not plan.include or u.kind in plan.include) and u.kind not in plan.exclude]
    return pool[:unanswerable.how_many(spec, answerable)]


def derive_declines(spec: Spec, plans: tuple[RotationPlan, ...], answerable: int) -> tuple[Question, ...]:
    """The questions to decline beside ``answerable`` selected ones (their ids follow those): no gold SQL, no
    answer; always in the dev split, since their labels (kind, ``answerable``) would give a holdout question's
    answer away."""
    chosen = _to_decline(spec, plans, answerable)
    terms = dictionary_terms(spec)
    width = _id_width(answerable, len(chosen))
    out = []
    for n, u in enumerate(chosen):
        text, paraphrases = u.wording.chosen(spec.seed, u.key)
        out.append(Question(
            id=f"q{answerable + n + 1:0{width}d}", question=text, gold_sql="",
            expected=tuple((p.rotation, None) for p in plans), answer_type="", round_decimals=None, kind=u.kind,
            tags=("unanswerable", u.concept), evidence=evidence_for(" ".join(u.wording.phrasings), terms),
            paraphrases=paraphrases,
            difficulty=unanswerable.DIFFICULTY[u.kind], skills=unanswerable.SKILLS, key=u.key, answerable=False,
            unanswerable_reason=u.reason))
    return tuple(out)


def fixed_answers(spec: Spec, questions) -> list[str]:
    """With rotated answers, a warning for each question whose answer is the same on every rotation (a
    balanced ledger's zero, a peak the curve cannot move): a memorised answer would pass it."""
    if spec.answers != "rotated" or spec.rotations < 2:
        return []
    return [f"{q.id} ({q.key}): the same answer on every rotation, so a memorised answer passes it"
            for q in questions if len({json.dumps(v, sort_keys=True) for _, v in q.expected}) == 1]


ABOUT_ORPHANS = ("fk_orphans", "segment_unlinked")  # kinds whose answer is the rows without a known parent


def _orphan_rows(key: AnswerKey):
    """Whether a question over ``tables`` counts the orphan rows the plan put inside the declared months
    ("included": it reads the child table without its parent), joins them away ("excluded"), or meets none."""
    inside = [k for k in key.keys if k.inside and k.orphans]

    def of(tables: tuple[str, ...]) -> str:
        touched = [k for k in inside if k.child_table in tables]
        if any(k.parent_table not in tables for k in touched):
            return "included"
        return "excluded" if touched else ""

    return of


@dataclass(frozen=True)
class PreviousSplits:
    """What an earlier version of the pack fixed: each question's split by identity, and every identity
    that was ever in the holdout (carried from version to version in the manifest)."""

    version: str
    split_of: tuple[tuple[str, str], ...] = ()
    ever_holdout: frozenset[str] = frozenset()
    salts: tuple[tuple[str, str], ...] = ()  # key -> the salt of its commitment, from that version's answer key
    folder: str = ""  # where that version's pack is, while this build runs (its changelog compares the two)
    # the same version rebuilt (not one it continues): the JSON of what that pack recorded of the version *it*
    # continues ({"continues", "changelog"}), carried over so that a rebuild gives the same bytes
    rebuilt: str = ""


SPLIT_RULE = (
    "a question's split is fixed by its identity (`key`: family and parameters, not wording): a question of the "
    "version this one continues keeps its split there, and one that was ever in the holdout stays there. New "
    "questions go in groups, each group all in one split, so that no dev answer gives a holdout answer away by "
    "the families' arithmetic (a quarter is the sum of its months, a month its quarter minus the other two, a part "
    "its total minus the other parts, a running total the last one plus a month, an average or a rate a total or "
    "a count divided by the rows counted, and siblings often share an answer): the questions about one table's rows "
    "(every sum, count, rate, average, share, change and ranking of it, over any period, and its parts by group "
    "or segment; the second field of the key names the table) are one group, and the questions about one declared "
    "relationship (its orphans, nulls, linked rows and parents counted; the key names the child key) another; "
    "groups whose answers share a number of at least 5 characters written as JSON are one group (a shorter number "
    "shared by unrelated measures is chance, and within a group any number is shared already), and a group with an "
    "answer equal to a row count this manifest publishes (its own table's, or any of at least 5 characters) is "
    "dev. A group with a question that was ever in the holdout is all holdout but for its questions that the "
    "version continued has in dev, which stay dev (the warnings name any holdout answer their answers give away); "
    "a group with a dev question of that version and none in the holdout is all dev; the other groups are taken in "
    "the order of SHA-256 of the seed and their first key while they fit in round(holdout x questions), so the "
    "holdout may hold fewer (the warnings say so)"
)


def measure_of(key: str) -> str:
    """The measure a question's key names: its second field (``orders.amount`` of ``curve_total:orders.amount:...``,
    ``orders`` of a row count, ``orders.customer_id`` of a relationship), or the whole key when it has one field."""
    parts = key.split(":")
    return parts[1] if len(parts) > 1 else key


def split_unit(key: str, relationships: frozenset[str] = frozenset()) -> str:
    """The group a question's key puts it in (:data:`SPLIT_RULE`): the child key of a declared relationship
    (``orders.customer_id``, one of ``relationships``) when the key names one, else the table its measure reads
    (``orders`` of ``orders.amount``, ``orders.refunded`` and ``orders``): the families' arithmetic links every
    sum, count, rate and average of one table's rows, over any period, and their parts."""
    measure = measure_of(key)
    return measure if measure in relationships else measure.split(".")[0]


def _texts(q: Question) -> set[str]:
    """Every number of ``q``'s answers on every rotation, as JSON text."""
    out: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.add(json.dumps(value))

    for _, value in q.expected:
        walk(value)
    return out


def _atoms(q: Question) -> set[str]:
    """The distinctive numbers of ``q``'s answers on every rotation (JSON text of 5 characters or more)."""
    return {text for text in _texts(q) if len(text) >= 5}


def answer_groups(questions: tuple[Question, ...], relationships: frozenset[str] = frozenset()
                  ) -> list[list[Question]]:
    """``questions`` in the groups of :data:`SPLIT_RULE`: one per table and per relationship
    (:func:`split_unit`), joined where their answers share a distinctive number (:func:`_atoms`), transitively;
    in question order, each group in question order."""
    parent = list(range(len(questions)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, q in enumerate(questions):
        for atom in {"unit:" + split_unit(q.key, relationships)} | _atoms(q):
            j = first.setdefault(atom, i)
            parent[root(i)] = root(j)
    groups: dict[int, list[Question]] = {}
    for i, q in enumerate(questions):
        groups.setdefault(root(i), []).append(q)
    return list(groups.values())


def assign_splits(spec: Spec, questions: tuple[Question, ...], previous: PreviousSplits | None = None,
                  public: dict[str, frozenset[str]] | None = None) -> tuple[Question, ...]:
    """Each question's split (:data:`SPLIT_RULE`): stable across versions, whatever else changes. ``public``: table
    -> the row counts a pack publishes (as JSON, :func:`public_numbers`); a group holding one stays in dev."""
    before = dict(previous.split_of) if previous else {}
    ever = previous.ever_holdout if previous else frozenset()
    target = int(Decimal(str(spec.holdout * len(questions))).to_integral_value(ROUND_HALF_EVEN))
    relationships = frozenset(f"{r.child_table}.{r.child_column}" for r in spec.relationships)
    public = public or {}
    everywhere = frozenset(text for counts in public.values() for text in counts)

    def published(q: Question) -> bool:
        """Whether an answer of ``q`` is a row count the pack publishes: of its own table at any length (a
        relationship without orphans or nulls links every row), of any table at 5 characters or more."""
        return bool(_atoms(q) & everywhere or _texts(q) & public.get(measure_of(q.key).split(".")[0], frozenset()))

    held: set[str] = set()
    new: list[list[Question]] = []
    for group in answer_groups(questions, relationships):
        fresh = [q for q in group if q.key not in before and q.key not in ever]
        if any(q.key in ever or before.get(q.key) == "holdout" for q in group):
            # nothing leaves the holdout, and nothing more of the group is published: its new questions are held
            held |= {q.key for q in fresh} | {q.key for q in group if q.key in ever or before.get(q.key) == "holdout"}
        elif fresh and not any(before.get(q.key) == "dev" or published(q) for q in group):
            new.append(fresh)  # else its numbers are public already
    for group in sorted(new, key=lambda g: hashlib.sha256(f"{spec.seed}:{g[0].key}".encode()).hexdigest()):
        if len(held) + len(group) <= target:
            held |= {q.key for q in group}
    return tuple(replace(q, split="holdout" if q.key in held else "dev") for q in questions)


def public_numbers(plans: Sequence[RotationPlan]) -> dict[str, frozenset[str]]:
    """What a pack publishes besides its answers that an answer could equal: table -> its row counts on every
    rotation (the manifest's ``tables``), as JSON."""
    return {t.name: frozenset(json.dumps(p.table(t.name).rows) for p in plans) for t in plans[0].tables}


@functools.lru_cache(maxsize=4096)
def parse_gold(sql: str) -> exp.Expression:
    """The gold SQL as an AST (:func:`~evalpack.questions.sqltext.parse_sql`), one tree per text kept: a caller
    copies it before changing it."""
    return parse_sql(sql)


POSITIONS = ("line", "col", "start", "end")  # where the parser found a node, kept in its meta


def lean(tree: exp.Expression) -> exp.Expression:
    """``tree`` without what the parser leaves on its nodes that nothing here reads: source positions in
    their meta and empty comment lists. Every mutant is a copy of the gold tree, and copying those small
    dictionaries and lists was about half the cost of a copy (the other keys of a meta, which sqlglot's
    generator and simplifier read, stay; an empty comment list prints as nothing)."""
    for node in tree.walk():
        meta = node._meta  # None until something is stored: reading ``meta`` would create one
        if meta:
            for key in POSITIONS:
                meta.pop(key, None)
            if not meta:
                node._meta = None
        if node.comments == []:
            node.comments = None
    return tree
