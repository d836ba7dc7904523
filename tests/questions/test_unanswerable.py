"""Questions to decline (issue 20): derived from the spec, proved unanswerable, scored with a penalty."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SCHEMAS, full_questions

from evalpack.data.plan import plan_rotation
from evalpack.questions import unanswerable
from evalpack.spec.kinds import KINDS
from evalpack.spec.reader import load_spec, parse_spec

DATA_KINDS = {"no_such_measure", "no_such_attribute"}


def declines(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("answerable") is False]


def spec_words(path: Path) -> set[str]:
    """Every text value of the spec's YAML and every name it gives (tables, columns, business words), split into
    lowercased words: an independent vocabulary, without evalpack's (structural keys such as `type` are left out)."""
    out: set[str] = set()
    naming = {"tables", "columns", "measures", "synonyms"}  # mappings whose keys are names

    def walk(node, keys_are_names: bool = False) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if keys_are_names:
                    walk(k)
                walk(v, k in naming)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str):
            out.update(w for w in re.split(r"[^0-9a-z]+", node.lower()) if w)

    walk(yaml.safe_load(path.read_text()))
    return out


@pytest.mark.parametrize("name", ["retail", "finance"])
def test_the_example_packs_ship_every_kind_of_unanswerable_question_with_its_proof(name, retail_pack, finance_pack):
    pack = {"retail": retail_pack, "finance": finance_pack}[name]
    records = full_questions(pack)
    to_decline = declines(records)
    kinds = {r["kind"] for r in to_decline}
    assert kinds & DATA_KINDS and "no_such_entity" in kinds and "beyond_sql" in kinds, kinds
    share = len(to_decline) / len(records)
    assert 0.08 <= share <= 0.12, share
    for r in to_decline:
        assert r["gold_sql"] is None and r["expected_answer"] is None and r["unanswerable_reason"]
        assert r["split"] == "dev" and r["skills"] == ["decline"] and r["question"] and r["evidence"] is None
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", r["question"]), r["question"]  # business words, no identifiers
    assert all(r["answerable"] is True for r in records if r not in to_decline)
    manifest = json.loads((pack / "manifest.json").read_text())["unanswerable"]
    assert [p["id"] for p in manifest["proofs"]] == [r["id"] for r in to_decline]
    words = spec_words(SCHEMAS / f"{name}.yaml")
    spec = load_spec(SCHEMAS / f"{name}.yaml")
    assert kinds & {"no_coverage", "no_such_grain"}, kinds  # the kinds only the dictionary decides
    for proof in manifest["proofs"]:
        assert proof["matched"] == []
        if proof["kind"] == "no_coverage":  # a month before the first date the time column holds
            table, month = proof["key"].split(":")[1:3]
            time = next(c for c in spec.table(table).columns if c.type in ("date", "datetime") and c.start)
            assert dt.date.fromisoformat(f"{month}-01") < time.start.replace(day=1), proof
            continue
        if proof["kind"] == "no_such_grain":  # no column of the table holds a time of day
            table = proof["key"].split(":")[1]
            assert not any(c.type == "datetime" for c in spec.table(table).columns), proof
            continue
        assert proof["terms"]
        if proof["concept"] in ("forecast", "cause", "advice"):
            continue
        # none of the concept's terms is a word of the spec, checked here without evalpack's vocabulary
        assert not {t for t in proof["terms"] if t in words or any(w.startswith(t) for w in words)}, proof


def test_a_forecast_asks_for_a_month_after_the_data_ends(retail_pack):
    spec = load_spec(SCHEMAS / "retail.yaml")
    end = spec.table("orders").column("ordered_at").end
    forecasts = [r for r in declines(full_questions(retail_pack)) if r["key"].startswith("beyond_sql:forecast")]
    assert forecasts
    names = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
             "November", "December"]
    for r in forecasts:
        month = re.search(rf"({'|'.join(names)}) (\d{{4}})", r["question"])
        assert month and (int(month[2]), names.index(month[1]) + 1) > (end.year, end.month), r["question"]


def test_a_spec_that_records_a_concept_is_never_asked_to_decline_it():
    text = (SCHEMAS / "retail.yaml").read_text()
    base = parse_spec(text, file="retail.yaml")
    concepts = {u.concept for u in unanswerable.derive(base, plan_rotation(base, base.seed).answer_key)}
    assert {"profit", "suppliers", "age"} <= concepts
    more = text.replace("      note:        {type: text, text_type: sentence, nullable: 0.1}\n",
                        "      note:        {type: text, text_type: sentence, nullable: 0.1}\n"
                        "      unit_cost:   {type: float, min: 1, max: 100, decimals: 2}\n"
                        "      vendor_name: {type: text, text_type: company}\n")
    more = more.replace("      segment:", "      birth_date:  {type: date, start: \"1950-01-01\", end: \"2005-12-31\"}\n"
                                         "      segment:")
    assert more.count("unit_cost") == 1 and more.count("birth_date") == 1
    spec = parse_spec(more, file="retail.yaml")
    concepts = {u.concept for u in unanswerable.derive(spec, plan_rotation(spec, spec.seed).answer_key)}
    assert not {"profit", "suppliers", "age"} & concepts, concepts


COUNTED = """\
name: signups
seed: 3
tables:
  users:
    rows: 1200
    columns:
      user_id: {type: int, unique: true, min: 1}
      churned: {type: boolean}
      signed_up: {type: date, start: "2024-01-01", end: "2024-12-31"}
rate_curves:
  - {table: users, column: churned, time_column: signed_up,
     rate_points: [{period: "2024-03", rate: 0.2}, {period: "2024-09", rate: 0.3}]}
"""


def test_money_concepts_are_asked_only_of_an_amount():
    """With no amount column the measure is a count of rows: 'convert the number of users to yen' (found in specs
    `misata init` writes) is no question anyone asks, so the concepts of money (profit, tax, an exchange rate)
    are left out; the others remain, and with an amount they are asked."""
    spec = parse_spec(COUNTED, file="signups.yaml")
    asked = unanswerable.derive(spec, plan_rotation(spec, spec.seed).answer_key)
    texts = " ".join(text for u in asked for text in u.wording.phrasings)
    assert asked and not {"yen", "profit", "tax"} & set(re.findall(r"[a-z]+", texts.lower()))
    assert not {"profit", "tax", "exchange rate"} & {u.concept for u in asked}
    base = parse_spec((SCHEMAS / "retail.yaml").read_text(), file="retail.yaml")
    concepts = {u.concept for u in unanswerable.derive(base, plan_rotation(base, base.seed).answer_key)}
    # retail's gross amount is "the order amount with tax added": tax is a word of its data, so not asked
    assert {"profit", "exchange rate"} <= concepts and "tax" not in concepts


def test_the_share_is_set_by_the_spec_and_zero_turns_them_off():
    text = (SCHEMAS / "retail.yaml").read_text()
    spec = parse_spec(text + "questions: {unanswerable: 0}\n", file="retail.yaml")
    assert unanswerable.how_many(spec, 170) == 0
    spec = parse_spec(text + "questions: {unanswerable: 0.2}\n", file="retail.yaml")
    assert unanswerable.how_many(spec, 160) == 40  # 40 of 200
    with pytest.raises(Exception, match=r"questions\.unanswerable.*at most 0.5"):
        parse_spec(text + "questions: {unanswerable: 0.9}\n", file="retail.yaml")


def test_the_schema_lists_every_family():
    schema = json.loads((SCHEMAS / "evalpack.schema.json").read_text())
    assert schema["$defs"]["family"]["enum"] == list(KINDS)
    assert "unanswerable" in schema["properties"]["questions"]["properties"]


# --------------------------------------------------------------------------- scoring


def score(pack: Path, candidates: list[dict], tmp_path: Path, name: str, *, verify_py: bool = False) -> dict:
    """The JSON report of ``evalpack score`` (or the pack's own verify.py) on ``candidates``."""
    file, report = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.json"
    file.write_text("".join(json.dumps(c) + "\n" for c in candidates))
    command = ([sys.executable, str(pack / "verify.py"), "--candidates", str(file)] if verify_py else
               [sys.executable, "-m", "evalpack.cli", "score", str(pack), "--candidates", str(file)])
    run = subprocess.run(command + ["--json", str(report)], capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads(report.read_text())


def test_declining_what_cannot_be_answered_beats_answering_everything(retail_pack, tmp_path):
    records = full_questions(retail_pack)
    gold = [{"id": r["id"], "sql": r["gold_sql"]} for r in records if r["answerable"]]
    everything = gold + [{"id": r["id"], "sql": "SELECT 1"} for r in declines(records)]
    knows = gold + [{"id": r["id"], "declined": True} for r in declines(records)]
    n, u = len(records), len(declines(records))
    a = score(retail_pack, everything, tmp_path, "everything")["summary"]
    b = score(retail_pack, knows, tmp_path, "knows")["summary"]
    # by hand: answering everything gets every answerable question right and every unanswerable one wrong
    assert (a["overall"]["correct"], a["overall"]["wrong"], a["overall"]["declined"]) == (n - u, u, 0)
    assert a["overall"]["penalty"] == pytest.approx({"0": (n - u) / n, "10": (n - u - 10 * u) / n,
                                                     "N": (n - u - n * u) / n})
    assert a["overall"]["decline_precision"] is None and a["overall"]["decline_recall"] == 0
    assert (b["overall"]["correct"], b["overall"]["wrong"], b["overall"]["declined"]) == (n, 0, 0)
    assert b["overall"]["penalty"] == {"0": 1.0, "10": 1.0, "N": 1.0}
    assert b["overall"]["decline_precision"] == 1.0 and b["overall"]["decline_recall"] == 1.0
    assert b["overall"]["penalty"]["10"] > a["overall"]["penalty"]["10"]
    assert a["penalty_costs"] == {"0": 0, "10": 10, "N": n}
    # by kind, difficulty and split too: an unanswerable kind is all wrong when answered
    assert a["by_kind"]["beyond_sql"]["accuracy"] == 0 and b["by_kind"]["beyond_sql"]["accuracy"] == 1
    assert set(a["by_difficulty"]) == {"simple", "moderate", "challenging"} and "decline" in a["by_skill"]
    assert a["by_split"]["dev"]["unanswerable"] == u


def test_a_mixed_model_scores_as_computed_by_hand_with_its_risk_coverage(retail_pack, tmp_path):
    records = full_questions(retail_pack)
    answerable = [r for r in records if r["answerable"]]
    to_decline = declines(records)
    candidates = ([{"id": r["id"], "sql": r["gold_sql"], "confidence": 0.9} for r in answerable[:100]]
                  + [{"id": r["id"], "sql": "SELECT 42", "confidence": 0.3} for r in answerable[100:120]]
                  + [{"id": r["id"], "declined": True} for r in answerable[120:130]]
                  + [{"id": r["id"], "sql": "SELECT 1", "confidence": 0.5} for r in to_decline[:4]]
                  + [{"id": r["id"], "declined": True} for r in to_decline[4:]])
    n = len(records)
    left_out = len(answerable) - 130  # no candidate: not answered
    report = score(retail_pack, candidates, tmp_path, "mixed")
    o = report["summary"]["overall"]
    correct, wrong = 100 + len(to_decline) - 4, 20 + 4
    assert (o["correct"], o["wrong"], o["declined"], o["not_answered"]) == (correct, wrong, 10, left_out)
    assert o["coverage"] == pytest.approx(1 - left_out / n)
    assert o["penalty"]["10"] == pytest.approx((correct - 10 * wrong) / n)
    declined_unanswerable = len(to_decline) - 4
    assert o["decline_precision"] == pytest.approx(declined_unanswerable / (declined_unanswerable + 10))
    assert o["decline_recall"] == pytest.approx(declined_unanswerable / len(to_decline))
    curve = report["summary"]["risk_coverage"]
    points = curve["points"]
    assert len(points) == 124 and curve["without_confidence"] == 0
    assert points[99] == {"coverage": 100 / n, "accuracy": 1.0, "answered": 100, "confidence": 0.9}
    assert points[103]["accuracy"] == pytest.approx(100 / 104) and points[103]["confidence"] == 0.5
    assert points[-1]["accuracy"] == pytest.approx(100 / 124) and points[-1]["coverage"] == pytest.approx(124 / n)
    # the pack's standalone verify.py scores the same candidates the same way
    same = score(retail_pack, candidates, tmp_path, "mixed-verify", verify_py=True)
    assert same["summary"] == report["summary"]
    assert [(q["id"], q["status"]) for q in same["questions"]] == [(q["id"], q["status"]) for q in report["questions"]]


def test_ids_that_match_no_question_are_refused_with_a_hint(retail_pack, tmp_path):
    file = tmp_path / "slip.jsonl"
    file.write_text('{"id": "Q001", "sql": "SELECT 1"}\n{"id": "q002", "sql": "SELECT 1"}\n{"id": "nope", "sql": "1"}\n')
    for command in ([sys.executable, "-m", "evalpack.cli", "score", str(retail_pack)],
                    [sys.executable, str(retail_pack / "verify.py")]):
        run = subprocess.run(command + ["--candidates", str(file)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr.count("\n") == 1 and "2 id(s) match no question" in run.stderr
        assert "Q001 (did you mean q001?)" in run.stderr and "nope" in run.stderr and str(file) in run.stderr


def test_a_confidence_outside_0_to_1_is_that_candidates_error(retail_pack, tmp_path):
    records = full_questions(retail_pack)
    first = next(r for r in records if r["answerable"])
    report = score(retail_pack, [{"id": first["id"], "sql": first["gold_sql"], "confidence": 1.5}], tmp_path, "bad")
    entry = next(q for q in report["questions"] if q["id"] == first["id"])
    assert entry["status"] == "wrong"
    assert all("confidence" in run["error"] for run in entry["rotations"].values())
