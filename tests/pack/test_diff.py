"""`evalpack diff` and the release gate (evalpack.pack.diff), on packs the engine built from edited copies of
schemas/retail.yaml; what the engine cannot produce yet (keys, commitments, split moves, a weaker near-miss
study) is made by editing a copy's questions.jsonl or manifest.json."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fakehub import FakeHub, client_env

from evalpack.build import build_pack
from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.pack.diff import GateResult, diff_packs, format_diff, gate, load_side, survival_pct

ROOT = Path(__file__).resolve().parents[2]
JANUARY = "{month: 1, target_value: 980000.37}"


def built(tmp_path_factory, name: str, *edits: tuple[str, str]) -> Path:
    """schemas/retail.yaml with text edits (each must apply once), built with the fixture's 3 rotations."""
    text = (ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    folder = tmp_path_factory.mktemp(name)
    (folder / "retail.yaml").write_text(text, encoding="utf-8")
    build_pack(folder / "retail.yaml", folder / "pack", rotations=3)
    return folder / "pack"


@pytest.fixture(scope="module")
def retargeted(tmp_path_factory) -> Path:
    """January's revenue target changed, version kept at 1.0.0."""
    return built(tmp_path_factory, "retargeted", (JANUARY, "{month: 1, target_value: 980123.45}"))


@pytest.fixture(scope="module")
def retargeted_bumped(tmp_path_factory) -> Path:
    """The same change, released as 1.0.1."""
    return built(tmp_path_factory, "bumped", (JANUARY, "{month: 1, target_value: 980123.45}"),
                 ("\nversion: 1.0.0\n", "\nversion: 1.0.1\n"))


@pytest.fixture(scope="module")
def reshaped(tmp_path_factory) -> Path:
    """customers.city removed, orders.coupon added, 2,400 customers instead of 2,000."""
    return built(tmp_path_factory, "reshaped", ("      city:        {type: text, text_type: city}\n", ""),
                 ("nullable: 0.1}\n", "nullable: 0.1}\n      coupon:      {type: categorical, choices: [none, spring]}\n"),
                 ("    rows: 2000\n", "    rows: 2400\n"))


def edited(pack: Path, folder: Path, records=None, manifest=None) -> Path:
    """A copy of ``pack`` with ``records(list) -> list`` applied to its questions and ``manifest(dict)`` to its
    manifest (in place)."""
    copy = Path(tempfile.mkdtemp(dir=folder)) / "pack"
    shutil.copytree(pack, copy)
    if records:
        rows = [json.loads(line) for line in (copy / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
        text = "".join(json.dumps(r) + "\n" for r in records(rows))
        (copy / "questions.jsonl").write_text(text, encoding="utf-8")
    if manifest:
        data = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
        manifest(data)
        (copy / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    return copy


def diff_of(old: Path, new: Path):
    return diff_packs(load_side(old), load_side(new))


def changed_ids(changes) -> set[str]:
    return {c.new_id for c in changes}


def records_of(pack: Path) -> list[dict]:
    return [json.loads(line) for line in (pack / "questions.jsonl").read_text(encoding="utf-8").splitlines()]


def label(record: dict) -> str:
    """How a finding names a question: its id, and its key when the pack has keys."""
    return record["id"] + (f" (key {record['key']})" if record.get("key") else "")


def test_identical_packs_have_no_differences(retail_pack, tmp_path, capsys):
    copy = edited(retail_pack, tmp_path)
    assert main(["diff", str(retail_pack), str(copy)]) == 0
    assert capsys.readouterr().out == "no differences\n"
    result = diff_of(retail_pack, copy)
    assert result.differences == 0 and format_diff(result) == ["no differences"]
    assert gate(result) == GateResult(False, ()) and gate(result, policy="warn") == GateResult(False, (), "warn")


def test_a_changed_target_without_a_new_version_is_blocked_naming_the_question(retail_pack, retargeted, capsys):
    result = diff_of(retail_pack, retargeted)
    assert result.old_version == result.new_version == "1.0.0"
    changed = {c.new_id: c for c in result.answers + result.commitments}
    assert "q001" in changed  # January's revenue
    if changed["q001"] in result.answers:  # public holdout questions carry a commitment instead
        assert (changed["q001"].old, changed["q001"].new) == (980000.37, 980123.45)
    decision = gate(result)
    assert decision.blocked
    assert any("without a new version" in r and "q001" in r for r in decision.reasons)
    # each changed answer is its own reason
    assert len([r for r in decision.reasons if "without a new version" in r]) == len(changed)

    assert main(["diff", str(retail_pack), str(retargeted)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("retail 1.0.0 -> retail 1.0.0: ") and "answers changed" in out[0]
    assert any(line.startswith("answer changed q001") and "980000.37 -> 980123.45" in line
               or line.startswith("answer or gold SQL changed (committed) q001") for line in out)


def test_the_same_change_with_a_new_version_passes_rule_b(retail_pack, retargeted_bumped):
    result = diff_of(retail_pack, retargeted_bumped)
    assert (result.old_version, result.new_version) == ("1.0.0", "1.0.1")
    assert "q001" in changed_ids(result.answers + result.commitments)
    assert "version: 1.0.0 -> 1.0.1" in format_diff(result)
    assert not [r for r in gate(result).reasons if "without a new version" in r]


def test_holdout_leaking_into_dev_is_blocked(retail_pack, tmp_path):
    records = records_of(retail_pack)
    leaked = next(r for r in records if r["split"] == "holdout")
    frozen = next(r for r in records if r["split"] == "dev")
    swap = {"holdout": "dev", "dev": "holdout"}
    new = edited(retail_pack, tmp_path, records=lambda rows: [
        dict(r, split=swap[r["split"]]) if r["id"] in (leaked["id"], frozen["id"]) else r for r in rows])
    result = diff_of(retail_pack, new)
    assert {(m.new_id, m.old, m.new) for m in result.split_moves} == {(leaked["id"], "holdout", "dev"),
                                                                       (frozen["id"], "dev", "holdout")}
    decision = gate(result)
    assert decision.blocked and decision.reasons == (f"holdout leaked into dev: {label(leaked)}",)
    assert f"split moved {label(leaked)}: holdout -> dev" in format_diff(result)


def weaker(pack: Path, folder: Path, points: float) -> Path:
    """A copy whose near-miss study lets ``points`` percentage points more mutants survive."""
    def edit(manifest: dict) -> None:
        operators = manifest["near_miss_study"]["operators"]
        run = sum(c["mutants"] for c in operators.values())  # the mutants run: equivalent and errored are apart
        widest = max(operators.values(), key=lambda c: c["mutants"] - c["match_all"])
        widest["match_all"] += math.ceil(points / 100 * run)
        assert widest["match_all"] <= widest["mutants"]
    return edited(pack, folder, manifest=edit)


def test_a_weaker_near_miss_study_is_blocked_beyond_the_margin(retail_pack, tmp_path):
    result = diff_of(retail_pack, weaker(retail_pack, tmp_path, 2.0))
    study = result.near_miss
    assert 2.0 <= study.change_points < 2.1 and len(study.operators) == 1
    assert study.old_pct == pytest.approx(survival_pct(load_side(retail_pack).operators))
    blocked = gate(result, margin_points=1.0)
    assert blocked.blocked and len(blocked.reasons) == 1 and "near-miss survival worse by 2.0" in blocked.reasons[0]
    assert gate(result, margin_points=5.0) == GateResult(False, ())
    assert format_diff(result)[1].startswith(f"near-miss survival: {study.old_pct:.2f}% -> {study.new_pct:.2f}%")

    warned = gate(result, margin_points=1.0, policy="warn")
    assert not warned.blocked and warned.reasons == blocked.reasons
    assert gate(result, margin_points=1.0, policy="off") == GateResult(False, (), "off")
    # a stronger study is never a reason
    assert gate(diff_of(weaker(retail_pack, tmp_path, 2.0), retail_pack), margin_points=0.0).reasons == ()
    with pytest.raises(EvalpackError, match="not a policy"):
        gate(result, policy="loud")


def test_columns_added_and_removed_and_row_counts(retail_pack, reshaped, tmp_path, capsys):
    result = diff_of(retail_pack, reshaped)
    columns = {(c.table, c.column): (c.old, c.new) for c in result.columns}
    assert columns == {("customers", "city"): ("VARCHAR", None), ("orders", "coupon"): (None, "VARCHAR")}
    rows = {(r.table, r.rotation): (r.old, r.new) for r in result.rows}
    assert {k: v for k, v in rows.items() if k[0] == "customers"} == {
        ("customers", r): (2000, 2400) for r in ("seed_42", "seed_43", "seed_44")}
    assert main(["diff", str(retail_pack), str(reshaped)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert {"column removed: customers.city VARCHAR", "column added: orders.coupon VARCHAR",
            "rows customers seed_42: 2,000 -> 2,400"} <= set(out)

    retyped = edited(retail_pack, tmp_path, manifest=lambda m: m["tables"]["orders"]["columns"].update(
        amount="DOUBLE"))
    assert [line for line in format_diff(diff_of(retail_pack, retyped))[1:]] == [
        "column type changed: orders.amount DECIMAL(18,2) -> DOUBLE"]


def test_the_json_report(retail_pack, retargeted, tmp_path):
    report = tmp_path / "diff.json"
    assert main(["diff", str(retail_pack), str(retargeted), "--json", str(report)]) == 1
    data = json.loads(report.read_text(encoding="utf-8"))
    assert set(data) == {"old", "new", "identity", "identity_note", "differences", "counts", "questions",
                         "near_miss", "schema", "rows"}
    assert data["old"] == {"source": str(retail_pack), "name": "retail", "version": "1.0.0"}
    assert data["identity"] in ("key", "id")
    assert data["differences"] == sum(data["counts"].values()) > 0
    assert set(data["questions"]) == {"added", "removed", "reworded", "answers", "commitments", "split_moves",
                                      "not_compared"}
    for kind, found in data["questions"].items():  # not_compared is a note, not a difference
        assert len(found) == data["counts"].get(kind, 0 if kind != "not_compared" else len(found))
        assert all(set(q) == {"identity", "old_id", "new_id", "old", "new"} for q in found)
    assert "q001" in {q["new_id"] for q in data["questions"]["answers"] + data["questions"]["commitments"]}
    assert set(data["near_miss"]) == {"old_pct", "new_pct", "change_points", "operators"}
    assert set(data["schema"]) == {"tables_added", "tables_removed", "columns"}


def keyed(rows: list[dict]) -> list[dict]:
    return [dict(r, key=f"family:{r['id']}") for r in rows]


def test_questions_are_matched_by_key_across_renumbering(retail_pack, tmp_path):
    old = edited(retail_pack, tmp_path, records=keyed)
    renumber = {"q001": "q002", "q002": "q001"}

    def renumbered(rows):
        rows = [dict(r, id=renumber.get(r["id"], r["id"])) for r in keyed(rows)]
        rows[0]["question"] = "What was the January 2025 revenue, in EUR to the cent?"
        return rows

    new = edited(retail_pack, tmp_path, records=renumbered)
    result = diff_of(old, new)
    assert result.identity == "key" and result.identity_note is None
    assert result.differences == 1 and len(result.reworded) == 1
    change = result.reworded[0]
    assert (change.identity, change.old_id, change.new_id) == ("family:q001", "q001", "q002")
    assert change.new == "What was the January 2025 revenue, in EUR to the cent?" and change.old.startswith("For Jan")
    assert format_diff(result)[1].startswith('re-worded q001 -> q002 (key family:q001): "For January 2025')

    # one side without keys (an older pack): matched by id, and the JSON says so
    unkeyed = edited(retail_pack, tmp_path, records=lambda rows: [
        {k: v for k, v in r.items() if k != "key"} for r in rows])
    mixed = diff_of(unkeyed, old)
    assert mixed.identity == "id" and "old pack has no question keys" in mixed.identity_note
    assert mixed.differences == 0


def test_changed_commitments_of_public_holdout_questions(retail_pack, tmp_path):
    held = [r for r in records_of(retail_pack) if r["split"] == "holdout"][:2]
    ids = [r["id"] for r in held]

    def public(salt: str):  # the first two holdout questions as a public pack shows them
        return lambda rows: [dict(r, gold_sql=None, expected_answer=None, commitment=f"sha256:{salt}{r['id']}")
                             if r["id"] in ids else r for r in rows]

    def private(rows):  # the first committed anew, the second with its answer and no commitment
        rows = public("bb")(rows)
        return [{k: v for k, v in dict(r, gold_sql="SELECT 1", expected_answer=1).items() if k != "commitment"}
                if r["id"] == ids[1] else r for r in rows]

    result = diff_of(edited(retail_pack, tmp_path, records=public("aa")),
                     edited(retail_pack, tmp_path, records=private))
    assert [(c.new_id, c.old, c.new) for c in result.commitments] == [
        (ids[0], f"sha256:aa{ids[0]}", f"sha256:bb{ids[0]}")]
    assert result.answers == () and [c.new_id for c in result.not_compared] == [ids[1]]
    assert gate(result).reasons == (f"answer or gold SQL changed (committed) without a new version (1.0.0): "
                                    f"{label(held[0])}",)
    assert format_diff(result)[-1] == f"note: 1 answer(s) not compared (committed on one side only): {label(held[1])}"


@pytest.mark.parametrize("side", ["missing", "file", "no-manifest", "hub:not-a-repo"])
def test_bad_input_is_one_line_exit_2(retail_pack, tmp_path, capsys, side):
    bad = {"missing": str(tmp_path / "nothing"), "file": str(retail_pack / "manifest.json"),
           "no-manifest": str(tmp_path / "half"), "hub:not-a-repo": side}[side]
    (tmp_path / "half").mkdir()
    shutil.copy(retail_pack / "questions.jsonl", tmp_path / "half")
    assert main(["diff", str(retail_pack), bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("evalpack: error: ") and captured.err.count("\n") == 1
    assert bad in captured.err


@pytest.fixture(scope="module")
def fake_hub():
    with FakeHub() as fake:
        yield fake


def test_hub_revisions_are_compared_with_the_real_client(fake_hub, retail_pack, retargeted_bumped, tmp_path):
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=fake_hub.url, token=fake_hub.token)
    repo = "tester/retail-diff"
    api.create_repo(repo, repo_type="dataset")
    for pack, tag in ((retail_pack, "v1.0.0"), (retargeted_bumped, "v1.0.1")):
        files = [CommitOperationAdd(name, str(pack / name)) for name in ("questions.jsonl", "manifest.json")]
        api.create_commit(repo, files, commit_message=tag, repo_type="dataset")
        api.create_tag(repo, tag=tag, repo_type="dataset")
    env = client_env(fake_hub, tmp_path / "hf_home")

    def diff(*sides: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "evalpack.cli", "diff", *sides], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    same = diff(f"hub:{repo}@v1.0.0", str(retail_pack))
    assert (same.returncode, same.stdout, same.stderr) == (0, "no differences\n", "")
    changed = diff(f"hub:{repo}@v1.0.0", f"hub:{repo}@v1.0.1", "--json", "d.json")
    assert changed.returncode == 1, changed.stderr
    assert "version: 1.0.0 -> 1.0.1" in changed.stdout.splitlines()
    assert json.loads((tmp_path / "d.json").read_text())["new"]["source"] == f"hub:{repo}@v1.0.1"
    missing = diff(f"hub:{repo}@v9.9.9", str(retail_pack))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith(f"evalpack: error: hub:{repo}@v9.9.9: cannot download {repo} at v9.9.9")


def test_survival_counts_the_mutants_run_once():
    """A manifest's per-operator `mutants` are the mutants run (equivalent and errored ones are counted apart): the
    diff does not take them away again (issue 55: date_shift 408 run, 328 equivalent, read as 80 before)."""
    operators = {"date_shift": {"mutants": 408, "equivalent": 328, "errored": 3, "match_first": 9, "match_all": 4},
                 "whole_units": {"mutants": 92, "equivalent": 0, "errored": 0, "match_first": 1, "match_all": 1}}
    assert survival_pct(operators) == pytest.approx(100 * 5 / 500)
    assert survival_pct({"x": {"mutants": 0, "equivalent": 4, "match_all": 0}}) is None
