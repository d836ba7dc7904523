"""The release gate, --public-key and --holdout-repo of ``evalpack publish`` (issue 18, items 1, 4 and 7), run as
the real command against the fake Hub of tests/fakehub.py with the real huggingface_hub client (as test_publish.py).

One repo tells the story: retail 1.0.0 is released; the same version with a changed target is blocked by the gate
(nothing sent), released anyway with ``gate: warn`` until the tag rule refuses it; a 1.1.0 whose holdout shrank
(questions held out before come back as dev) is blocked; the 1.1.0 that continues the splits is released, its
answer key to a private repo. The public repo then holds no holdout answer or gold SQL, and its download scores
the holdout with the key's download.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_pack
from fakehub import FakeHub, client_env

from evalpack.build import build_pack
from evalpack.core.errors import SpecError
from evalpack.core.scoring import ATTESTATION, HOLDOUT_FILE, holdout_key_beside, load_questions
from evalpack.pack.attest import envelope, envelope_bytes, keygen, load_signer, now_utc, write_attestation
from evalpack.pack.diff import diff_packs, load_side
from evalpack.spec.reader import load_spec, parse_spec
from publish.hub import last_release, release_order

ROOT = Path(__file__).resolve().parents[2]
REPO = "tester/gate-evalpack"
KEY_REPO = "tester/gate-evalpack-holdout"
JANUARY = "{month: 1, target_value: 980000.37}"
RETARGETED = "{month: 1, target_value: 980123.45}"
WRITES = ("POST", "PUT", "DELETE", "PATCH")


@pytest.fixture(scope="module")
def env(hub, tmp_path_factory) -> dict[str, str]:
    return dict(client_env(hub, tmp_path_factory.mktemp("hf_home"), drop=("EVALPACK_",)), PYTHONUNBUFFERED="1")


def publish(env: dict, pack: Path, *args: str, repo: str = REPO) -> subprocess.CompletedProcess:
    """The real ``evalpack publish``; stderr into stdout, so the order of the messages is the order printed."""
    return subprocess.run([sys.executable, "-m", "evalpack.cli", "publish", str(pack), "--repo", repo, *args],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)


def writes(hub: FakeHub) -> list:
    return [r for r in hub.requests if r.method in WRITES]


def spec_file(folder: Path, *edits: tuple[str, str]) -> Path:
    text = (ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / "retail.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def packs(tmp_path_factory, retail_pack) -> dict[str, Path]:
    """retail 1.0.0 (conftest) and three builds of 3 rotations: the target changed at 1.0.0 ("retargeted"); a 1.1.0
    with holdout 0.1 built afresh ("leaked"); the changed target at 1.1.0 continuing 1.0.0's splits ("bumped")."""
    out = {"1.0.0": retail_pack}
    for name, edits, previous in (
            ("retargeted", [(JANUARY, RETARGETED)], None),
            ("leaked", [("\nholdout: 0.2\n", "\nholdout: 0.1\n"), ("\nversion: 1.0.0\n", "\nversion: 1.1.0\n")], None),
            ("bumped", [(JANUARY, RETARGETED), ("\nversion: 1.0.0\n", "\nversion: 1.1.0\n")], retail_pack)):
        folder = tmp_path_factory.mktemp(name)
        build_pack(spec_file(folder, *edits), folder / "pack", rotations=3, previous=previous)
        out[name] = folder / "pack"
    return out


@pytest.fixture(scope="module")
def released_1_0_0(hub, env, packs) -> subprocess.CompletedProcess:
    run = publish(env, packs["1.0.0"])
    assert run.returncode == 0, run.stdout
    return run


@pytest.fixture(scope="module")
def released_1_1_0(hub, env, packs, released_1_0_0) -> subprocess.CompletedProcess:
    """The blocked attempts first (their tests use this order too), then 1.1.0 with its key to a private repo."""
    hub.clear_requests()
    run = publish(env, packs["bumped"], "--holdout-repo", KEY_REPO)
    assert run.returncode == 0, run.stdout
    return run


def diff_of(old: Path, new: Path):
    return diff_packs(load_side(old), load_side(new))


# --------------------------------------------------------------------------- the gate


def test_the_first_release_has_nothing_to_compare_and_keeps_the_key_local(hub, released_1_0_0, packs):
    out = released_1_0_0.stdout
    assert f"first release: no v<semver> tag on {REPO} yet" in out
    assert f"holdout answer key stays local at {holdout_key_beside(packs['1.0.0'])}" in out
    assert set(hub.repos[("dataset", REPO)].tags) == {"v1.0.0"}
    assert ("dataset", KEY_REPO) not in hub.repos


def test_a_changed_answer_without_a_new_version_is_blocked_and_nothing_is_sent(hub, env, packs, released_1_0_0):
    diff = diff_of(packs["1.0.0"], packs["retargeted"])
    changed = [q.new_id for q in diff.answers] + [q.new_id for q in diff.commitments]
    assert changed and not diff.version_changed
    before = dict(hub.repos[("dataset", REPO)].tags)
    hub.clear_requests()
    run = publish(env, packs["retargeted"])
    assert run.returncode == 1, run.stdout
    assert writes(hub) == [] and hub.requests  # it read the repo and the last release, and wrote nothing
    assert hub.repos[("dataset", REPO)].tags == before
    out = run.stdout
    assert "changes since v1.0.0:" in out  # the diff, printed before the decision
    error = out[out.index("evalpack: error:"):]
    assert out.index("changes since v1.0.0:") < out.index("evalpack: error:")
    assert f"{REPO}: release 1.0.0 blocked by the gate against the last release v1.0.0" in error
    for qid in changed:  # every question is named
        assert f"without a new version (1.0.0): {qid} (key " in error, qid
    assert "nothing was sent" in error and "bump `version`" in error and "gate: warn" in error
    assert "already exists" not in out  # the gate decided first


def test_gate_warn_publishes_past_the_reasons_until_the_tag_rule_refuses(hub, env, packs, released_1_0_0, tmp_path):
    """The same pack with `gate: warn` in its manifest (re-attested as the build would): the reasons are printed,
    then the existing rule refuses to move tag v1.0.0, and still nothing is written."""
    pack = copy_pack(packs["retargeted"], tmp_path / "warned")
    manifest = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))
    manifest["gate"] = "warn"
    (pack / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    spec = holdout_key_beside(pack) / manifest["spec"]["file"]
    write_attestation(pack, load_spec(spec), started=now_utc(), finished=now_utc())
    hub.clear_requests()
    run = publish(env, pack)
    assert run.returncode == 1, run.stdout
    out = run.stdout
    warned = out.index("gate (warn): answer changed without a new version (1.0.0)")
    assert out.index("changes since v1.0.0:") < warned < out.index("tag v1.0.0 already exists")
    assert "blocked" not in out and "never moved" in out
    assert writes(hub) == []


def test_a_holdout_question_back_in_dev_is_blocked(hub, env, packs, released_1_0_0):
    diff = diff_of(packs["1.0.0"], packs["leaked"])
    leaked = [q for q in diff.split_moves if (q.old, q.new) == ("holdout", "dev")]
    assert leaked and diff.version_changed and not diff.answers
    hub.clear_requests()
    run = publish(env, packs["leaked"])
    assert run.returncode == 1, run.stdout
    assert writes(hub) == []
    for q in leaked:
        assert f"holdout leaked into dev: {q.new_id} (key {q.identity})" in run.stdout
    assert "release 1.1.0 blocked by the gate against the last release v1.0.0" in run.stdout
    assert "--previous" in run.stdout  # what to do about it
    assert set(hub.repos[("dataset", REPO)].tags) == {"v1.0.0"}


def test_a_new_version_that_continues_the_splits_is_released_with_its_changes(hub, packs, released_1_1_0):
    out = released_1_1_0.stdout
    assert "changes since v1.0.0:" in out and "version: 1.0.0 -> 1.1.0" in out
    assert "answer changed" in out and "gate: passed against v1.0.0" in out
    assert set(hub.repos[("dataset", REPO)].tags) == {"v1.0.0", "v1.1.0"}
    assert "holdout.jsonl" not in hub.files(REPO, "v1.1.0")


# --------------------------------------------------------------------------- --holdout-repo


def test_the_answer_key_goes_to_a_private_repo_under_the_same_tag(hub, packs, released_1_1_0):
    key_repo = hub.repos[("dataset", KEY_REPO)]
    assert key_repo.private
    assert set(key_repo.tags) == {"v1.1.0"}
    history = hub.history(KEY_REPO)
    assert len(history) == 2 and history[0].oid == key_repo.tags["v1.1.0"]  # one commit on the initial one
    key = holdout_key_beside(packs["bumped"])
    local = {p.relative_to(key).as_posix(): p.read_bytes() for p in key.rglob("*") if p.is_file()}
    assert HOLDOUT_FILE in local and "README.md" in local and "retail.yaml" in local
    assert {p: b for p, b in hub.files(KEY_REPO, "v1.1.0").items() if p != ".gitattributes"} == local
    assert f"holdout answer key published privately: {hub.url}/datasets/{KEY_REPO}/tree/v1.1.0" in \
        released_1_1_0.stdout


def test_the_public_repo_gives_nothing_away_and_its_download_scores_the_holdout_with_the_key(
        hub, env, packs, released_1_1_0, tmp_path):
    script = ("import json, sys; from huggingface_hub import snapshot_download as d; print(json.dumps("
              "[d(r, repo_type='dataset', revision='v1.1.0') for r in sys.argv[1:]]))")
    got = subprocess.run([sys.executable, "-c", script, REPO, KEY_REPO], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    public, key = map(Path, json.loads(got.stdout.strip().splitlines()[-1]))
    held = [json.loads(line) for line in (key / HOLDOUT_FILE).read_text(encoding="utf-8").splitlines()]
    assert len(held) >= 10
    secrets = [r["gold_sql"] for r in held]
    # answers long enough not to occur by chance in other numbers or text; when the held answers are all short
    # counts, each as a record would give it away
    answers = [json.dumps(r["expected_answer"]) for r in held if len(json.dumps(r["expected_answer"])) >= 7] or [
        f'"expected_answer": {json.dumps(r["expected_answer"])}' for r in held]
    assert answers
    files = sorted(p for p in public.rglob("*") if p.is_file())
    assert {p.relative_to(public).as_posix() for p in files} >= {"questions.jsonl", "manifest.json", "README.md"}
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)
        if path.suffix in (".json", ".jsonl", ".md", ".py", ".txt") or path.name == ".gitattributes":
            text = data.decode("utf-8")
            for answer in answers:
                assert answer not in text, (path, answer)

    records = load_questions(public)
    candidates = tmp_path / "gold.jsonl"
    gold = {r["id"]: r["gold_sql"] for r in held} | {r["id"]: r["gold_sql"] for r in records if r["gold_sql"]} | {
        r["id"]: None for r in records if r.get("answerable") is False}  # declined: a question left out is not answered
    candidates.write_text("".join(json.dumps({"id": i, "sql": s}) + "\n" for i, s in gold.items()), encoding="utf-8")
    score = subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(public), "--candidates",
                            str(candidates), "--holdout-key", str(key), "--json", str(tmp_path / "report.json")],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert score.returncode == 0, score.stdout[-3000:] + score.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["holdout_not_scored"] == []
    assert report["summary"]["by_split"]["holdout"]["n"] == len(held)
    assert report["summary"]["overall"]["correct"] == len(records)


def test_a_holdout_without_its_key_or_with_the_public_repo_as_key_repo_is_refused_before_any_request(
        hub, env, packs, tmp_path):
    pack = tmp_path / "no-key"
    shutil.copytree(packs["1.0.0"], pack)  # the pack alone: no PACK.holdout-key beside it
    hub.clear_requests()
    run = publish(env, pack, "--holdout-repo", "tester/nokey-holdout", repo="tester/nokey")
    assert run.returncode == 2, run.stdout
    assert "no answer key beside the pack" in run.stdout and "nothing was sent" in run.stdout
    same = publish(env, packs["1.0.0"], "--holdout-repo", "tester/nokey", repo="tester/nokey")
    assert same.returncode == 2 and "never goes to the public repo" in same.stdout, same.stdout
    assert hub.requests == []
    assert ("dataset", "tester/nokey") not in hub.repos
    # refused before the pack is rerun, which takes a while: nothing of the rerun was printed
    for refused in (run, same):
        assert "verified (" not in refused.stdout and "publishing" not in refused.stdout, refused.stdout


def test_an_existing_public_repo_is_refused_as_key_repo_before_the_release(hub, env, packs, released_1_0_0):
    hub.clear_requests()
    run = publish(env, packs["1.0.0"], "--holdout-repo", REPO, repo="tester/other-public")  # REPO is public
    assert run.returncode == 1, run.stdout
    assert f"{REPO} exists and is public: refusing to put the holdout answer key there" in run.stdout
    assert writes(hub) == [] and ("dataset", "tester/other-public") not in hub.repos


# --------------------------------------------------------------------------- --public-key


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    for name in ("signer", "other"):
        keygen(folder / name)
    return {name: folder / name for name in ("signer", "other")}


def test_public_key_refuses_an_unsigned_pack_and_another_signer_before_any_request(hub, env, packs, keys, tmp_path):
    signed = tmp_path / "signed"
    shutil.copytree(packs["1.0.0"], signed)
    envelope_json = json.loads((signed / ATTESTATION).read_bytes())
    statement = json.loads(base64.b64decode(envelope_json["payload"]))
    (signed / ATTESTATION).write_bytes(envelope_bytes(envelope(statement, load_signer(keys["signer"] /
                                                                                      "evalpack.key"))))
    cases = ((packs["1.0.0"], keys["signer"], "UNSIGNED, but --public-key"),
             (signed, keys["other"], "the signature does not verify"))
    for pack, key, reason in cases:
        hub.clear_requests()
        for run in (publish(env, pack, "--public-key", str(key / "evalpack.pub"), repo="tester/signed"),
                    publish(dict(env, EVALPACK_PUBLIC_KEY=str(key / "evalpack.pub")), pack, repo="tester/signed")):
            assert run.returncode == 1, run.stdout
            assert [line for line in run.stdout.splitlines() if reason in line], run.stdout  # the reason, one line
            assert "refused" in run.stdout and "nothing was sent" in run.stdout
        assert hub.requests == []
    ok = publish(env, signed, "--public-key", str(keys["signer"] / "evalpack.pub"), "--dry-run", repo="tester/signed")
    assert ok.returncode == 0 and "OK signature" in ok.stdout, ok.stdout


# --------------------------------------------------------------------------- pieces (no network)


def test_the_last_release_is_the_highest_semver_tag():
    assert last_release(["v1.9.0", "v1.10.0", "v1.2.3", "main", "v2.0.0-rc.1", "latest"]) == "v2.0.0-rc.1"
    assert last_release(["v2.0.0-rc.1", "v2.0.0", "v2.0.0-rc.2"]) == "v2.0.0"
    assert release_order("v2.0.0-rc.2") > release_order("v2.0.0-rc.1") > release_order("v2.0.0-beta")
    assert release_order("v2.0.0-alpha.10") > release_order("v2.0.0-alpha.9")
    assert last_release(["release-1", "v1"]) is None and last_release([]) is None


MINIMAL = "name: x\n{gate}tables:\n  t:\n    rows: 3\n    columns:\n      a: {{type: int}}\n"


@pytest.mark.parametrize(("text", "policy", "margin"), [
    ("", "block", 1.0), ("gate: warn\n", "warn", 1.0), ("gate: off\n", "off", 1.0), ('gate: "off"\n', "off", 1.0),
    ("gate: block\ngate_margin: 2.5\n", "block", 2.5), ("gate_margin: 0\n", "block", 0.0),
])
def test_the_spec_keys_gate_and_gate_margin(text, policy, margin):
    spec = parse_spec(MINIMAL.format(gate=text))
    assert (spec.gate, spec.gate_margin) == (policy, margin)


@pytest.mark.parametrize(("text", "message"), [
    ("gate: loud\n", "<spec>:2: gate: gate is `block`, `warn` or `off`"),
    ("gate: true\n", "<spec>:2: gate: gate is `block`, `warn` or `off`"),
    ("gate_margin: -1\n", "<spec>:2: gate_margin: must be at least 0"),
    ("gate_margin: lots\n", "<spec>:2: gate_margin: expected a number"),
])
def test_a_bad_gate_key_is_one_line_naming_it(text, message):
    with pytest.raises(SpecError) as caught:
        parse_spec(MINIMAL.format(gate=text))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_manifest_records_the_gate(retail_pack):
    manifest = json.loads((retail_pack / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["gate"], manifest["gate_margin"]) == ("block", 1.0)
