"""The spec controls the mix (``questions:``): families included or excluded, a maximum, a difficulty
mix; the retail example meets the issue's bar, and the manifest, card and summary report it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from evalpack.core.errors import SpecError
from evalpack.data.plan import plan_pack
from evalpack.questions.derive import derive_selected
from evalpack.spec.kinds import KINDS
from evalpack.spec.model import DEFAULT_MIX, QuestionPlan
from evalpack.spec.reader import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
COMPLEX = {"window", "cte", "subquery", "having", "join"}


def _derive(plan: QuestionPlan | None = None, path: str = "schemas/retail.yaml"):
    spec = load_spec(ROOT / path)
    if plan is not None:
        spec = replace(spec, questions=plan)
    return derive_selected(spec, plan_pack(spec))


def test_the_default_mix_is_birds_and_is_met_exactly():
    questions, selection = _derive()
    levels = Counter(q.difficulty for q in questions)
    n = len(questions)
    assert n >= 150 and selection.mix_applied and selection.mix == DEFAULT_MIX
    for level, share in DEFAULT_MIX:
        assert abs(levels[level] - share * n) < 1, (level, levels[level], n)
    # n is the largest the pool can fill: one more question would need a level the pool has run out of
    pool = dict(selection.pool)
    assert any(int(share * (n + 1) + 0.5) > pool[level] or share * (n + 1) > pool[level] for level, share in DEFAULT_MIX)
    assert len({q.kind for q in questions}) >= 12
    assert sum(bool(COMPLEX & set(q.skills)) for q in questions) >= 0.40 * n
    assert sum(q.answer_type == "rows" for q in questions) >= 0.15 * n
    assert [q.id for q in questions] == [f"q{i + 1:03d}" for i in range(n)]


def test_round_robin_keeps_every_family_before_doubling_any():
    questions, _ = _derive()
    everything, _ = _derive(QuestionPlan(mix=None))
    assert {q.kind for q in questions} == {q.kind for q in everything}
    for level in ("simple", "moderate", "challenging"):
        kept = Counter(q.kind for q in questions if q.difficulty == level)
        pool = Counter(q.kind for q in everything if q.difficulty == level)
        # a family short of its pool has at least as many kept as any other family, less one
        for kind, n in kept.items():
            if n < pool[kind]:
                assert all(m <= n + 1 for m in kept.values()), (level, kind, kept)


def test_include_exclude_and_max():
    only, _ = _derive(QuestionPlan(include=("period_total", "group_change"), mix=None))
    assert Counter(q.kind for q in only) == {"period_total": 12, "group_change": 11}
    without, _ = _derive(QuestionPlan(exclude=("period_total",), mix=None))
    everything, _ = _derive(QuestionPlan(mix=None))
    assert len(without) == len(everything) - 12 and "period_total" not in {q.kind for q in without}
    capped, selection = _derive(QuestionPlan(max=40))
    assert len(capped) == 40 and dict(selection.chosen) == {"simple": 12, "moderate": 20, "challenging": 8}
    assert {q.difficulty for q in capped} == {"simple", "moderate", "challenging"}


def test_a_pool_that_cannot_fill_the_mix_ships_whole_and_says_why():
    questions, selection = _derive(QuestionPlan(include=("period_total", "period_rows", "running_total")))
    assert not selection.mix_applied and len(questions) == 12 + 12 + 11
    assert "would fill the mix with only" in selection.note
    record = selection.to_dict()
    assert record["pool"] == {"simple": 24, "moderate": 0, "challenging": 11} and record["mix_applied"] is False


def test_the_selection_is_deterministic_and_follows_the_seed():
    a, _ = _derive()
    b, _ = _derive()
    assert [q.gold_sql for q in a] == [q.gold_sql for q in b]
    spec = load_spec(ROOT / "schemas" / "retail.yaml", seed=7)
    c, _ = derive_selected(spec, plan_pack(spec))
    assert Counter(q.difficulty for q in c) == Counter(q.difficulty for q in a)
    assert {q.gold_sql for q in c} != {q.gold_sql for q in a}  # another seed keeps other months


def test_every_kind_is_named_in_the_vocabulary_and_the_readme():
    everything, _ = _derive(QuestionPlan(mix=None))
    finance, _ = _derive(QuestionPlan(mix=None), "schemas/finance.yaml")
    kinds = {q.kind for q in everything} | {q.kind for q in finance}
    assert kinds <= set(KINDS)
    readme = (ROOT / "README.md").read_text()
    assert [k for k in KINDS if f"`{k}`" not in readme] == []


def test_the_built_pack_reports_the_mix(retail_pack):
    manifest = json.loads((retail_pack / "manifest.json").read_text())
    info = manifest["questions"]
    shipped = info["shipped"]
    assert info["dropped"] == manifest["near_miss_study"]["gate"]["dropped"] and shipped >= 150  # none but the gate's
    for level, share in DEFAULT_MIX:
        assert abs(info["by_difficulty"][level] / shipped - share) <= 0.10
    # the mix is applied to what is selected, before the near-miss gate leaves out what a mistake passes
    assert info["selection"]["mix_applied"] and sum(info["selection"]["chosen"].values()) == shipped + info["dropped"]
    assert len(info["shipped_by_kind"]) >= 12
    card = (retail_pack / "README.md").read_text()
    assert f"The declarations give {info['selection']['pool_size']} questions" in card
    assert "near-miss mutants caught" in card
    families = manifest["near_miss_study"]["families"]
    assert set(families) == set(info["shipped_by_kind"])
    assert all(f["match_all_rate"] <= 1 for f in families.values())


def test_the_later_rotations_answers_may_come_from_worker_processes():
    """A build derives the first rotation's questions itself and takes the other rotations' answers from its
    worker processes (``later``): the questions are those derived in one process, and the answers are the ones
    the workers gave."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    from evalpack.questions.derive import rotation_answers

    rotated = ROOT / "schemas/retail.yaml"
    spec = parse_spec(rotated.read_text(encoding="utf-8").replace("answers: shared", "answers: rotated"), file=str(rotated))
    plans = plan_pack(spec)
    here, selection = derive_selected(spec, plans)
    assert any(len({repr(value) for _, value in q.expected}) > 1 for q in here)  # the rotations' answers differ
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        later = [pool.submit(rotation_answers, spec, plan) for plan in plans[1:]]
        there, selection_there = derive_selected(spec, plans, later=later)
    assert there == here and selection_there == selection

    given = rotation_answers(spec, plans[2])
    marked = [(key, ("given", n)) for n, (key, _) in enumerate(given)]
    futures = [Future(), Future()]
    futures[0].set_result(rotation_answers(spec, plans[1]))
    futures[1].set_result(marked)
    used, _ = derive_selected(spec, plans, later=futures)
    assert all(q.expected[2][1][0] == "given" for q in used)
    assert [q.expected[:2] for q in used] == [q.expected[:2] for q in here]

    futures[1] = Future()
    futures[1].set_result(marked[1:])  # a different question set
    with pytest.raises(AssertionError, match="different question sets"):
        derive_selected(spec, plans, later=futures)


def _with_questions(block: str):
    text = (ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8")
    assert "\nquestions:" not in text  # the block below is the spec's only `questions:`
    return parse_spec(text + "\nquestions:\n" + block, file="retail.yaml")


def test_families_take_the_spec_formats_form_and_the_flat_one_alike():
    # SPEC_FORMAT.md: `questions: {families: {exclude: [...]}}  # or include: [...]`
    nested = _with_questions("  families: {exclude: [period_rows], include: []}\n  max: 40\n").questions
    flat = _with_questions("  exclude: [period_rows]\n  max: 40\n").questions
    assert nested == flat and nested.exclude == ("period_rows",) and nested.max == 40
    only = _with_questions("  families:\n    include: [period_total, group_change]\n").questions
    assert only.include == ("period_total", "group_change") and only.exclude == ()


def test_families_given_both_ways_or_misspelt_are_refused_by_line():
    with pytest.raises(SpecError, match=r"retail\.yaml:\d+: questions\.include: .*both choose families"):
        _with_questions("  families: {exclude: [period_rows]}\n  include: [period_total]\n")
    with pytest.raises(SpecError, match=r"questions\.families\.exlude: unknown families key 'exlude'; "
                                        r"did you mean 'exclude'\?"):
        _with_questions("  families: {exlude: [period_rows]}\n")
    with pytest.raises(SpecError, match=r"questions\.families\.include\[0\]: unknown question family 'period_totl'; did you mean 'period_total'\?"):
        _with_questions("  families: {include: [period_totl]}\n")


def test_including_only_families_the_spec_cannot_give_is_refused_saying_which_it_gives():
    """A spec author's `include: [waterfall_net]` on retail (no waterfall) ended in "no question verified on every
    rotation (drop reasons: {})": now an input error naming the family and those the declarations give."""
    with pytest.raises(SpecError, match=r"questions: include lists waterfall_net, and this spec's declarations give "
                                        r"no question of that family; the families they give are .*period_total"):
        _derive(QuestionPlan(include=("waterfall_net",), mix=None))
    questions, _ = _derive(QuestionPlan(include=("waterfall_net", "period_total"), mix=None))  # one it gives: fine
    assert {q.kind for q in questions} == {"period_total"}
