"""The holdout stays held out (issue 18): a public pack carries no holdout gold SQL or answer, only
commitments; the answer key beside it reveals them and is checked against them; splits follow a
question's identity from version to version."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCHEMAS

from evalpack.build import build_pack
from evalpack.core.scoring import (
    HOLDOUT_FILE,
    InputError,
    commitment,
    holdout_key_beside,
    load_questions,
    pack_questions,
    score_pack,
    with_holdout_key,
)


def _spec(tmp: Path, name: str, edits: dict[str, str]) -> Path:
    """retail.yaml with ``edits``, keeping the questions a plausible mistake passes (flagged): their surviving
    mutants, which return a holdout question's answer, must be counted and never listed."""
    text = (SCHEMAS / "retail.yaml").read_text() + "\nnear_miss:\n  gate: keep\n"
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> dict[str, Path]:
    """retail 1.0.0 (at most 120 questions); 1.1.0 (only the version changed) built over it at the same -o;
    1.2.0 with every question and a larger holdout, continuing 1.1.0 by --previous into another folder."""
    tmp = tmp_path_factory.mktemp("versions")
    out = tmp / "packs" / "retail"
    fewer = {"holdout: 0.2": "holdout: 0.2\nquestions:\n  max: 120"}
    build_pack(_spec(tmp, "v100", fewer), out, rotations=2)
    v100 = tmp / "v100"
    shutil.copytree(out, v100)
    shutil.copytree(holdout_key_beside(out), holdout_key_beside(v100))
    build_pack(_spec(tmp, "v110", {**fewer, "version: 1.0.0": "version: 1.1.0"}), out, rotations=2, force=True)
    v120 = tmp / "v120" / "retail"
    build_pack(_spec(tmp, "v120", {"version: 1.0.0": "version: 1.2.0", "holdout: 0.2": "holdout: 0.5"}), v120,
               rotations=2, previous=out)
    return {"1.0.0": v100, "1.1.0": out, "1.2.0": v120}


def _key_records(pack: Path) -> list[dict]:
    return [json.loads(line) for line in (holdout_key_beside(pack) / HOLDOUT_FILE).read_text().splitlines()]


def test_no_public_file_gives_a_holdout_answer_or_gold_sql_away(versions):
    pack = versions["1.0.0"]
    held = _key_records(pack)
    assert len(held) >= 10
    public = load_questions(pack)
    assert {r["id"] for r in public if r["split"] == "holdout"} == {r["id"] for r in held}
    secrets = [r["gold_sql"] for r in held]
    # answers worth searching for: long enough not to occur by chance in other numbers or text
    answers = [json.dumps(r["expected_answer"]) for r in held if len(json.dumps(r["expected_answer"])) >= 7]
    assert answers
    spec_text = (SCHEMAS / "retail.yaml").read_text()
    for path in sorted(p for p in pack.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)
        if path.suffix != ".parquet" and path.suffix != ".csv":  # the tables are the database itself
            text = data.decode("utf-8")
            for answer in answers:
                assert answer not in text, (path, answer)
            assert "targets:" not in text or path.name == "verify.py", path  # the spec declares the answers
    assert spec_text not in (pack / "manifest.json").read_text()
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["spec"]["text"] is None and manifest["spec"]["sha256"]
    for r in public:
        if r["split"] == "holdout":
            assert r["gold_sql"] is None and r["expected_answer"] is None and r["commitment"].startswith("sha256:")
    # a near-miss survivor returns its question's answer on every rotation: the holdout's are counted, not listed
    study = manifest["near_miss_study"]
    held_ids = {r["id"] for r in held}
    assert study["survivors"] and not [v for v in study["survivors"] if v["question"] in held_ids]
    assert study["survivors_withheld"] > 0 and study["survivors_total"] >= len(study["survivors"])


def test_the_answer_key_reveals_the_holdout_and_is_checked_against_the_commitments(versions, tmp_path):
    pack = versions["1.0.0"]
    held = _key_records(pack)
    public = {r["id"]: r for r in load_questions(pack)}
    for r in held:
        assert commitment(r, r["salt"]) == public[r["id"]]["commitment"]
    full, used = pack_questions(pack)
    assert used == holdout_key_beside(pack)
    assert all(r["gold_sql"] and r["expected_answer"] is not None for r in full if r["answerable"])
    assert all(r["split"] == "dev" for r in full if not r["answerable"])  # their labels would give them away
    # an edited answer, or another version's key, is refused naming the question
    forged = tmp_path / "forged"
    forged.mkdir()
    edited = [dict(r) for r in held]
    edited[3]["expected_answer"] = 1
    (forged / HOLDOUT_FILE).write_text("".join(json.dumps(r) + "\n" for r in edited))
    with pytest.raises(InputError, match=edited[3]["id"] + " does not match its commitment"):
        with_holdout_key(load_questions(pack), forged)
    readme = (holdout_key_beside(pack) / "README.md").read_text()  # no temporary folder of the build's named
    assert "--holdout-key PACK.holdout-key" in readme and "staging" not in readme
    shutil.copy(holdout_key_beside(versions["1.2.0"]) / HOLDOUT_FILE, forged / HOLDOUT_FILE)
    with pytest.raises(InputError, match="this pack|commitment|no answer"):
        with_holdout_key(load_questions(pack), forged)
    # the edited key beside a copy of the pack: `evalpack verify` names it and says what to do
    copy = tmp_path / "copy" / "retail"
    shutil.copytree(pack, copy)
    holdout_key_beside(copy).mkdir()
    (holdout_key_beside(copy) / HOLDOUT_FILE).write_text("".join(json.dumps(r) + "\n" for r in edited))
    verified = subprocess.run([sys.executable, "-m", "evalpack.cli", "verify", str(copy)], capture_output=True,
                              text=True, timeout=600)
    assert verified.returncode != 0 and "Traceback" not in verified.stderr
    told = verified.stdout + verified.stderr
    assert "the answer key found beside the pack" in told and "--holdout-key" in told and "cannot rerun" not in told


def test_scoring_a_public_pack_leaves_the_holdout_unscored_the_full_pack_scores_both(versions, tmp_path):
    public = tmp_path / "downloaded"
    shutil.copytree(versions["1.0.0"], public)  # no key beside it, as after a download
    records = load_questions(public)
    held = {r["id"] for r in records if r["split"] == "holdout"}
    gold = {r["id"]: r["gold_sql"] for r in pack_questions(versions["1.0.0"])[0]}
    report = score_pack(public, gold)
    assert set(report["holdout_not_scored"]) == held and report["holdout_key"] is None
    assert {r["id"] for r in report["questions"]} == {r["id"] for r in records} - held
    full = score_pack(public, gold, holdout_key=holdout_key_beside(versions["1.0.0"]))
    assert full["holdout_not_scored"] == [] and full["summary"]["overall"]["correct"] == len(records)
    assert full["summary"]["by_split"]["holdout"]["n"] == len(held)


def test_splits_follow_identity_across_versions(versions):
    v100, v110, v120 = (load_questions(versions[v]) for v in ("1.0.0", "1.1.0", "1.2.0"))
    assert all(r["key"] for r in v100) and len({r["key"] for r in v100}) == len(v100)
    by_key = {r["key"]: r for r in v100}
    # a version bump moves nothing, and a question's commitment stays while its answer does
    assert [(r["key"], r["split"], r.get("commitment")) for r in v110] == \
        [(r["key"], r["split"], r.get("commitment")) for r in v100]
    # new questions fill the larger holdout; nothing held out before comes back to dev, no dev question moves
    held_before = {k for k, r in by_key.items() if r["split"] == "holdout"}
    held_now = {r["key"] for r in v120 if r["split"] == "holdout"}
    assert held_before <= held_now and len(held_now) > len(held_before)
    assert all(r["split"] == by_key[r["key"]]["split"] for r in v120 if r["split"] == "dev" and r["key"] in by_key)
    manifest = json.loads((versions["1.2.0"] / "manifest.json").read_text())
    assert manifest["splits"]["continues"] == "1.1.0"
    assert held_before <= set(manifest["splits"]["ever_holdout"])


def test_the_changelog_holds_what_evalpack_diff_reports_against_the_version_continued(versions):
    from evalpack.pack.diff import diff_packs, format_diff, load_side

    manifest = json.loads((versions["1.2.0"] / "manifest.json").read_text())
    found = manifest["changelog"]["diff"]
    assert found["lines"] == format_diff(diff_packs(load_side(versions["1.1.0"]), load_side(versions["1.2.0"])))
    assert found["counts"]["added"] == len(manifest["changelog"]["added"]) > 0
    assert "/" not in found["lines"][0]  # no paths: the same builds give the same bytes
    card = (versions["1.2.0"] / "README.md").read_text()
    assert "What `evalpack diff` reports against v1.1.0" in card and found["lines"][0] in card


def test_a_folder_in_the_answer_keys_place_is_left_alone_before_any_work(tmp_path):
    from evalpack.core.errors import EvalpackError

    out = tmp_path / "retail"
    mine = holdout_key_beside(out)
    mine.mkdir()
    (mine / "notes.txt").write_text("not a key")
    with pytest.raises(EvalpackError, match="holdout answer key goes, but not one"):
        build_pack(SCHEMAS / "retail.yaml", out, rotations=2)
    assert not out.exists() and (mine / "notes.txt").read_text() == "not a key"
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]  # no staging left behind


def test_the_same_version_rebuilt_at_the_same_place_gives_the_same_bytes(versions, tmp_path, monkeypatch):
    """A pack of the spec's own version at -o is that version rebuilt, not a version it continues: the same spec and
    seed give the same bytes at every rebuild (a publish of the same version then sends nothing), and a version
    that continued another keeps saying so, with the same changelog (found rebuilding the quick start's pack)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    for version in ("1.1.0", "1.2.0"):  # 1.1.0 was built over 1.0.0 at its -o; 1.2.0 continued 1.1.0 by --previous
        place = tmp_path / version / "retail"
        shutil.copytree(versions[version], place)
        shutil.copytree(holdout_key_beside(versions[version]), holdout_key_beside(place))
        edits = {"version: 1.0.0": f"version: {version}",
                 **({"holdout: 0.2": "holdout: 0.2\nquestions:\n  max: 120"} if version == "1.1.0" else
                    {"holdout: 0.2": "holdout: 0.5"})}
        spec = _spec(tmp_path, f"again_{version.replace('.', '')}", edits)
        build_pack(spec, place, rotations=2, force=True)
        first = {p.relative_to(place): p.read_bytes() for p in place.rglob("*") if p.is_file()}
        build_pack(spec, place, rotations=2, force=True)
        again = {p.relative_to(place): p.read_bytes() for p in place.rglob("*") if p.is_file()}
        assert first.keys() == again.keys() and [n for n in first if first[n] != again[n]] == []
        manifest = json.loads((place / "manifest.json").read_text())
        before = json.loads((versions[version] / "manifest.json").read_text())
        assert manifest["splits"]["continues"] == before["splits"]["continues"] == {"1.1.0": "1.0.0",
                                                                                   "1.2.0": "1.1.0"}[version]
        assert manifest["changelog"] == before["changelog"]


def test_a_holdout_key_answer_above_the_row_cap_is_refused(tmp_path):
    """An answer key whose entry matches its commitment (its maker wrote both) but holds more rows than any query
    result may have is refused naming the key's line and the question, as questions.jsonl's answers are."""
    from evalpack.core.scoring import MAX_FETCH_ROWS

    def keyed(rows: int) -> tuple[Path, list[dict]]:
        entry = {"id": "h1", "salt": "s", "gold_sql": "SELECT range FROM range(9)",
                 "expected_answer": [[i] for i in range(rows)]}
        folder = tmp_path / f"key{rows}"
        folder.mkdir()
        (folder / HOLDOUT_FILE).write_text(json.dumps(entry) + "\n")
        return folder, [{"id": "h1", "split": "holdout", "commitment": commitment(entry, "s")}]

    folder, records = keyed(MAX_FETCH_ROWS)
    assert len(with_holdout_key(records, folder)[0]["expected_answer"]) == MAX_FETCH_ROWS
    folder, records = keyed(MAX_FETCH_ROWS + 1)
    with pytest.raises(InputError, match=rf"{HOLDOUT_FILE}:1: question 'h1': its expected answer has 100,001 rows"):
        with_holdout_key(records, folder)
