"""Publishing to the Hub, against the in-memory fake Hub of tests/fakehub.py with the real clients.

Everything that talks to the Hub runs the real ``evalpack publish`` command or the real
``datasets.load_dataset`` in a subprocess whose environment points ``HF_ENDPOINT`` at the fake Hub
(set before huggingface_hub is imported, which reads it at import time), keeps its caches and login
in temporary folders, and routes every other host to a dead proxy: nothing can reach the real Hub.
"""

from __future__ import annotations

import base64
import io
import json
import shlex
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from fakehub import DEAD_PROXY, git_blob_sha1

from evalpack.build import build_pack
from evalpack.pack.attest import ATTESTATION
from evalpack.pack.card import REPO_PLACEHOLDER, hub_configs, question_count, render_card, size_category, write_card
from evalpack.pack.hubfiles import QUESTION_SCHEMA, write_questions_parquet
from publish.layout import PublishError, build_layout

ROOT = Path(__file__).resolve().parents[2]
REPO = "tester/retail-evalpack"


def publish_cli(env: dict, pack: Path, *args: str, repo: str = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalpack.cli", "publish", str(pack), "--repo", repo, *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def retail_v110(tmp_path_factory, retail_pack) -> Path:
    """The retail spec with its version bumped to 1.1.0, built from another seed with two rotations; its splits
    continue retail v1.0.0 (else holdout questions could come back as dev, and the release gate blocks it)."""
    folder = tmp_path_factory.mktemp("retail_v110")
    text = (ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8")
    assert "\nversion: 1.0.0\n" in text
    spec = folder / "retail.yaml"
    spec.write_text(text.replace("\nversion: 1.0.0\n", "\nversion: 1.1.0\n"), encoding="utf-8")
    build_pack(spec, folder / "pack", seed=7, rotations=2, jobs=2, previous=retail_pack)
    return folder / "pack"


@pytest.fixture(scope="module")
def published(hub, hub_env, retail_pack, retail_v110):
    """retail published as v1.0.0, then the changed pack as v1.1.0, through the real CLI."""
    first = publish_cli(hub_env, retail_pack)
    assert first.returncode == 0, first.stdout + first.stderr
    second = publish_cli(hub_env, retail_v110)
    assert second.returncode == 0, second.stdout + second.stderr
    return {"v1.0.0": first, "v1.1.0": second}


def manifest(pack: Path) -> dict:
    return json.loads((pack / "manifest.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- layout and card (no network)


@pytest.mark.parametrize(("rows", "label"), [
    (0, "n<1K"), (999, "n<1K"), (1_000, "1K<n<10K"), (9_999, "1K<n<10K"), (10_000, "10K<n<100K"),
    (126_073, "100K<n<1M"), (999_999, "100K<n<1M"), (1_000_000, "1M<n<10M"), (10**9, "1B<n<10B"),
    (10**12, "n>1T"),
])
def test_size_categories_follow_the_hub_bounds(rows, label):
    assert size_category(rows) == label


def card_header(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_is_rendered_from_the_pack_alone(retail_pack):
    """evalpack.pack.card.render_card: the README.md `evalpack build` wrote, from the pack's files, no Hub repo id."""
    card = render_card(retail_pack)
    assert (retail_pack / "README.md").read_text(encoding="utf-8") == card  # what the build wrote
    m = manifest(retail_pack)
    header = card_header(card)

    # size_categories by every row load_dataset returns (it said n<1K, from the questions, beside 126,189 rows)
    rows = sum(sum(t["rows"].values()) for t in m["tables"].values()) + question_count(m)
    assert rows > 100_000 and header["size_categories"] == [size_category(rows)] == ["100K<n<1M"]
    assert header["license"] == m["license"]
    assert header["task_categories"] == ["table-question-answering"]
    assert {"text-to-sql", "evaluation", "synthetic"} <= set(header["tags"])

    # configs: questions first and default, one per table with a split per rotation, naming exactly the
    # data/ files the Hub layout uploads
    configs = {c["config_name"]: c for c in header["configs"]}
    assert header["configs"][0]["config_name"] == "questions" and configs["questions"]["default"] is True
    assert [c for c in configs if configs[c].get("default")] == ["questions"]
    # a split per part: load_dataset(..., split="holdout") (dev and holdout were one `test` split)
    assert configs["questions"]["data_files"] == [{"split": "dev", "path": "data/questions/dev.parquet"},
                                                  {"split": "holdout", "path": "data/questions/holdout.parquet"}]
    assert list(configs) == ["questions", *m["tables"]]
    for table in m["tables"]:  # the pack's own files: the pack folder is the repo
        assert configs[table]["data_files"] == [{"split": r, "path": f"rotations/{r}/tables/{table}.parquet"}
                                                for r in m["rotations"]]
    layout = build_layout(retail_pack, REPO)
    named = {d["path"] for c in header["configs"] for d in c["data_files"]}
    assert named <= {f.path for f in layout.files}
    assert [c.name for c in layout.configs] == list(configs)  # one function lays both out
    assert layout.configs == hub_configs(m)

    # the body: no repo id, a clearly named placeholder, pinned to the version tag
    assert REPO not in card and "tester" not in card
    assert f'REPO = "{REPO_PLACEHOLDER}"  # this dataset\'s id on the Hub' in card
    assert 'load_dataset(REPO, "questions", revision="v1.0.0")' in card
    for needed in ("verify.py", "### The pass rule", "all 3 rotations", "## Tables", "## Questions",
                   "## Near misses", "| operator |", "## Verify the attestation", "UNSIGNED", "--public-key",
                   "```bibtex", "41,999", "group_period_total", "every rotation"):
        assert needed in card, needed
    for field in QUESTION_SCHEMA.names:  # the question fields it documents are the Parquet columns
        assert f"`{field}`" in card, field

    from huggingface_hub import DatasetCard  # the card parses as the Hub client parses it

    data = DatasetCard(card).data
    assert data.license == m["license"] and data.size_categories == ["100K<n<1M"]


def test_the_card_is_byte_identical_across_two_builds(retail_pack, tmp_path):
    """Same spec, same seed and rotations: the same README.md bytes (no timestamps), and it is attested."""
    again = tmp_path / "again"
    build_pack(ROOT / "schemas" / "retail.yaml", again, rotations=3)
    assert (again / "README.md").read_bytes() == (retail_pack / "README.md").read_bytes()
    assert render_card(again) == render_card(retail_pack)
    envelope = json.loads((retail_pack / ATTESTATION).read_text(encoding="utf-8"))
    subjects = {s["name"] for s in json.loads(base64.b64decode(envelope["payload"]))["subject"]}
    assert "README.md" in subjects


def test_the_layout_uploads_exactly_the_pack_files_unchanged_and_the_card_as_built(retail_pack):
    layout = build_layout(retail_pack, REPO)
    m = manifest(retail_pack)
    paths = {f.path for f in layout.files}
    assert {"data/questions/dev.parquet", "data/questions/holdout.parquet"} <= paths
    pack_files = {p.relative_to(retail_pack).as_posix() for p in retail_pack.rglob("*") if p.is_file()}
    assert "README.md" in pack_files and pack_files == paths  # every pack file, the card included, and no other
    for rel in pack_files:
        assert layout.file(rel).read_bytes() == (retail_pack / rel).read_bytes()
    total = sum(sum(t["rows"].values()) for t in m["tables"].values()) + question_count(m)
    assert question_count(m) == m["questions"]["shipped"] + m["unanswerable"]["count"]  # answerable and not
    assert layout.total_rows == total
    header = card_header(layout.file("README.md").read_bytes().decode())
    assert header["size_categories"] == [size_category(layout.total_rows)]


def test_a_pack_without_a_card_or_with_a_card_naming_other_files_is_refused(retail_pack, tmp_path):
    pack = tmp_path / "no-card"
    shutil.copytree(retail_pack, pack)
    (pack / "README.md").unlink()
    with pytest.raises(PublishError, match="README.md: missing.*rebuild"):
        build_layout(pack, REPO)

    pack = tmp_path / "stale-card"
    shutil.copytree(retail_pack, pack)
    card = (pack / "README.md").read_text(encoding="utf-8")
    (pack / "README.md").write_text(card.replace("rotations/seed_43/tables/orders.parquet", "data/orders/other.parquet"),
                                    encoding="utf-8")
    with pytest.raises(PublishError, match="configs.*does not name"):
        build_layout(pack, REPO)


def test_questions_parquet_holds_every_answer_type(retail_pack):
    layout = build_layout(retail_pack, REPO)
    parts = [pq.read_table(io.BytesIO(layout.file(f"data/questions/{part}.parquet").read_bytes()))
             for part in ("dev", "holdout")]
    assert all(table.schema.equals(QUESTION_SCHEMA, check_metadata=False) for table in parts)
    records = [json.loads(line) for line in (retail_pack / "questions.jsonl").read_text().splitlines()]
    rows = parts[0].to_pylist() + parts[1].to_pylist()
    assert {r["split"] for r in parts[0].to_pylist()} == {"dev"} and {r["split"] for r in parts[1].to_pylist()} == {
        "holdout"}
    records = [q for q in records if q["split"] == "dev"] + [q for q in records if q["split"] == "holdout"]
    assert [r["id"] for r in rows] == [q["id"] for q in records]
    seen = set()
    for row, record in zip(rows, records, strict=True):
        assert row["answerable"] is (record["answerable"] is not False)
        if record.get("commitment"):  # a holdout question: nothing of its answer in the public pack
            assert row["expected_answer"] is None and row["gold_sql"] is None
            assert row["commitment"] == record["commitment"]
            continue
        if not row["answerable"]:  # to decline: a reason, no gold SQL, no answer
            assert row["unanswerable_reason"] == record["unanswerable_reason"] and row["unanswerable_reason"]
            assert row["expected_answer"] is None and row["gold_sql"] is None and row["answer_type"] is None
            seen.add("unanswerable")
            continue
        assert json.loads(row["expected_answer"]) == record["expected_answer"]
        typed = {"number": row["expected_number"], "integer": row["expected_integer"],
                 "string": row["expected_string"]}
        if record["answer_type"] == "rows":  # a result set: its JSON text only
            assert all(v is None for v in typed.values())
            seen.add("rows")
            continue
        assert typed.pop(record["answer_type"]) == record["expected_answer"]
        assert all(v is None for v in typed.values())
        seen.add(record["answer_type"])
    assert {"number", "integer", "unanswerable"} <= seen


def test_rotated_answers_give_one_questions_split_per_rotation(retail_pack, tmp_path):
    pack = tmp_path / "rotated"
    shutil.copytree(retail_pack, pack)
    m = manifest(pack)
    m["answers"] = "rotated"
    (pack / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    records = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines()]
    for record in records:
        if record["expected_answer"] is None:  # a holdout question's answer is not in the public pack
            continue
        if record["answer_type"] == "integer":
            record["expected_answer"] = {r: record["expected_answer"] + i for i, r in enumerate(m["rotations"])}
        else:
            record["expected_answer"] = {r: record["expected_answer"] for r in m["rotations"]}
    (pack / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(PublishError, match="configs"):  # the card still says one shared split
        build_layout(pack, REPO)
    write_card(pack)
    dev = [r for r in records if r["split"] == "dev"]
    write_questions_parquet(pack, dev, [(f"data/questions/{r}.parquet", r) for r in m["rotations"]])
    header = card_header((pack / "README.md").read_text(encoding="utf-8"))
    # the dev questions once per rotation, with its answers; the holdout once, without any
    assert header["configs"][0]["data_files"] == [{"split": r, "path": f"data/questions/{r}.parquet"}
                                                  for r in m["rotations"]] + [
        {"split": "holdout", "path": "data/questions/holdout.parquet"}]
    layout = build_layout(pack, REPO)
    questions = layout.configs[0]
    assert questions.name == "questions" and [s.name for s in questions.splits] == [*m["rotations"], "holdout"]
    integer = next(r for r in dev if r["answer_type"] == "integer")
    for i, split in enumerate(questions.splits[:-1]):
        rows = pq.read_table(io.BytesIO(layout.file(split.path).read_bytes())).to_pylist()
        row = next(r for r in rows if r["id"] == integer["id"])
        assert row["expected_integer"] == integer["expected_answer"][split.name] == json.loads(row["expected_answer"])
        assert split.name == m["rotations"][i]


# --------------------------------------------------------------------------- the fake Hub and the real clients


def test_two_versions_each_one_commit_and_one_tag(hub, published, retail_pack, retail_v110):
    for out in published.values():
        assert hub.token not in out.stdout + out.stderr  # the token is never printed
    repo = hub.repos[("dataset", REPO)]
    assert set(repo.tags) == {"v1.0.0", "v1.1.0"}
    history = hub.history(REPO)
    assert [c.oid for c in history[:2]] == [repo.tags["v1.1.0"], repo.tags["v1.0.0"]]  # one commit per version
    assert history[2].parent is None and len(history) == 3  # then the repo's initial commit

    v1 = hub.files(REPO, "v1.0.0")
    v11 = hub.files(REPO, "v1.1.0")
    for version, pack in (("v1.0.0", retail_pack), ("v1.1.0", retail_v110)):
        files = hub.files(REPO, version)
        expected = {f.path: f.read_bytes() for f in build_layout(pack, REPO, hub.url).files}
        assert {p: git_blob_sha1(b) for p, b in files.items() if p != ".gitattributes"} == {
            p: git_blob_sha1(b) for p, b in expected.items()}
    stale = [p for p in v1 if "seed_42" in p]
    assert "rotations/seed_42/tables/orders.parquet" in stale and "rotations/seed_42/tables/orders.csv" in stale
    assert not any("seed_42" in p for p in v11)  # gone at v1.1.0 ...
    assert all(p in hub.files(REPO, "v1.0.0") for p in stale)  # ... and still there at v1.0.0
    assert ".gitattributes" in v11
    assert "removed" in published["v1.1.0"].stdout
    # every Parquet file went up through the Hub's large-file (LFS) path, as on the real Hub; text inline
    for version, files in (("v1.0.0", v1), ("v1.1.0", v11)):
        lfs = hub.lfs_paths(REPO, version)
        assert {p for p in files if p.endswith(".parquet")} == set(lfs), version
        assert all(hub.lfs_objects[sha] == files[p] for p, sha in lfs.items())
        assert "questions.jsonl" not in lfs and "README.md" not in lfs
    # a version bump that continues the splits moves no question between dev and holdout
    def splits(files: dict[str, bytes]) -> dict[str, str]:
        return {r["key"]: r["split"] for r in map(json.loads, files["questions.jsonl"].decode().splitlines())}

    before, after = splits(v1), splits(v11)
    assert before and {k: after[k] for k in before if k in after} == {k: before[k] for k in before if k in after}


def test_load_dataset_from_each_tag(hub, hub_env, published, retail_pack, retail_v110):
    script = r"""
import json, sys
from datasets import load_dataset
repo, tag = sys.argv[1], sys.argv[2]
orders = load_dataset(repo, "orders", revision=tag)
questions = load_dataset(repo, "questions", revision=tag)
first = {s: orders[s][0] for s in orders}
print(json.dumps({
    "orders": {s: orders[s].num_rows for s in orders},
    "types": sorted({(k, type(v).__name__) for row in first.values() for k, v in row.items()}),
    "amount": str(next(iter(first.values()))["amount"]),
    "questions": {s: questions[s].num_rows for s in questions},
    "expected": {r["id"]: r["expected_answer"] for s in questions for r in questions[s]},
    "holdout": [[r["split"], r["gold_sql"], r["expected_answer"]] for r in
                load_dataset(repo, "questions", split="holdout", revision=tag)],
}))
"""
    hub.clear_requests()
    runs = {tag: subprocess.Popen([sys.executable, "-c", script, REPO, tag], env=hub_env, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for tag in ("v1.0.0", "v1.1.0")}  # the two loads run side by side
    got = {}
    for tag, proc in runs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        got[tag] = json.loads(out.strip().splitlines()[-1])
    assert hub.requests and all(r.method in ("GET", "HEAD") for r in hub.requests)  # it read from the fake Hub

    for tag, pack in (("v1.0.0", retail_pack), ("v1.1.0", retail_v110)):
        m = manifest(pack)
        assert got[tag]["orders"] == {r: m["tables"]["orders"]["rows"][r] for r in m["rotations"]}
        types = dict(map(tuple, got[tag]["types"]))
        assert types["amount"] == "Decimal" and types["ordered_at"] == "date"
        Decimal(got[tag]["amount"])
        holdout = sum(1 for line in (pack / "questions.jsonl").read_text().splitlines()
                      if json.loads(line)["split"] == "holdout")
        assert holdout and got[tag]["questions"] == {"dev": question_count(m) - holdout, "holdout": holdout}
        assert got[tag]["holdout"] == [["holdout", None, None]] * holdout  # the part alone, without its answers
        records = [json.loads(line) for line in (pack / "questions.jsonl").read_text().splitlines()]
        shown = got[tag]["expected"]  # a holdout question's answer is null there, as in questions.jsonl
        assert {q["id"]: None if shown[q["id"]] is None else json.loads(shown[q["id"]]) for q in records} == {
            q["id"]: q["expected_answer"] for q in records}
    assert list(got["v1.0.0"]["orders"]) == ["seed_42", "seed_43", "seed_44"]
    assert list(got["v1.1.0"]["orders"]) == ["seed_7", "seed_8"]


def test_publishing_the_same_version_again_sends_nothing(hub, published, retail_pack, monkeypatch):
    """publish_pack, the function the Dagster asset calls: the same content at the same tag is a no-op."""
    import huggingface_hub.constants
    from huggingface_hub.utils import close_session

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, DEAD_PROXY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    close_session()  # the next client reads the environment above
    from publish import publish_pack

    tag_commit = hub.repos[("dataset", REPO)].tags["v1.0.0"]
    hub.clear_requests()
    result = publish_pack(retail_pack, REPO, token=hub.token, endpoint=hub.url)
    close_session()
    assert result.already_published and result.tag == "v1.0.0" and result.commit_sha == tag_commit
    assert result.repo_url == f"{hub.url}/datasets/{REPO}" and result.tag_url.endswith("/tree/v1.0.0")
    assert not [r for r in hub.requests if r.method != "GET" and "repos/create" not in r.path]
    assert hub.repos[("dataset", REPO)].tags["v1.0.0"] == tag_commit


def test_an_existing_tag_is_never_moved(hub, hub_env, published, finance_pack):
    assert manifest(finance_pack)["version"] == "1.0.0"
    before = dict(hub.repos[("dataset", REPO)].tags)
    hub.clear_requests()
    run = publish_cli(hub_env, finance_pack)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "tag v1.0.0 already exists" in run.stderr and "never moved" in run.stderr
    assert not [r for r in hub.requests if "/commit/" in r.path or "/tag/" in r.path]
    assert hub.repos[("dataset", REPO)].tags == before


def _tamper_answer(pack: Path) -> str:
    lines = (pack / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["expected_answer"] = record["expected_answer"] + 1
    lines[0] = json.dumps(record)
    (pack / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return record["id"]


def _drop_a_row(pack: Path) -> str:
    rotation = manifest(pack)["rotations"][1]
    path = pack / "rotations" / rotation / "tables" / "orders.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)
    return f"rotations/{rotation}/tables/orders.parquet"


@pytest.mark.parametrize("tamper", [_tamper_answer, _drop_a_row])
def test_a_tampered_pack_is_refused_before_any_request(hub, hub_env, retail_pack, tmp_path, tamper):
    pack = tmp_path / "tampered"
    shutil.copytree(retail_pack, pack)
    named = tamper(pack)
    hub.clear_requests()
    run = publish_cli(hub_env, pack, repo="tester/tampered")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "refused" in run.stderr and "nothing was sent" in run.stderr
    assert named in run.stderr or "questions.jsonl" in run.stderr  # names what failed
    assert hub.requests == []
    assert ("dataset", "tester/tampered") not in hub.repos


def test_dry_run_prints_the_layout_and_makes_no_request(hub, hub_env, retail_pack):
    env = {k: v for k, v in hub_env.items() if k != "HF_TOKEN"}  # no token needed to look
    hub.clear_requests()
    run = publish_cli(env, retail_pack, "--dry-run", repo="tester/dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert hub.requests == []
    assert ("dataset", "tester/dry-run") not in hub.repos
    assert "nothing was sent" in out and "tag v1.0.0" in out
    assert "verified (evalpack verify)" in out  # re-verified first, with the engine's check
    dev, holdout = (sum(1 for line in (retail_pack / "questions.jsonl").read_text().splitlines()
                        if json.loads(line)["split"] == part) for part in ("dev", "holdout"))
    assert f"questions [default]: dev ({dev} rows), holdout ({holdout} rows)" in out
    assert "orders: seed_42 (41,999 rows), seed_43 (41,999 rows), seed_44 (41,999 rows)" in out
    for path in ("README.md", "rotations/seed_42/tables/orders.parquet", "data/questions/dev.parquet",
                 "questions.jsonl", "manifest.json", "certificate.json", "verify.py"):
        assert f"  {path}\n" in out, path
    assert "KB  rotations/seed_42/tables/orders.parquet" in out


def test_private_is_refused_on_an_existing_public_repo(hub, hub_env, published, retail_pack):
    run = publish_cli(hub_env, retail_pack, "--private")
    assert run.returncode == 1 and "exists and is public" in run.stderr


def test_a_rejected_token_is_reported_but_never_printed(hub, hub_env, retail_pack):
    env = dict(hub_env, HF_TOKEN="hf_this_token_is_wrong_0123456789")
    run = publish_cli(env, retail_pack, repo="tester/wrong-token")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "401" in run.stderr or "Unauthorized" in run.stderr or "credentials" in run.stderr
    assert "hf_this_token_is_wrong_0123456789" not in run.stdout + run.stderr
    assert ("dataset", "tester/wrong-token") not in hub.repos


def test_the_cards_download_and_verify_steps_work(hub, hub_env, published, retail_pack, tmp_path):
    """Follow the published card: download the tag, then verify and score the download as it is."""
    card = hub.files(REPO, "v1.0.0")["README.md"].decode()
    block = card.split("## How to score", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert f'REPO="{REPO_PLACEHOLDER}"' in block  # the card does not know the repo: the reader sets it
    download = next(line for line in block.splitlines() if line.startswith("hf download"))
    args = [REPO if arg == "$REPO" else arg for arg in shlex.split(download)[1:]]
    assert REPO in args
    local = args[args.index("--local-dir") + 1]
    run = subprocess.run([sys.executable, "-m", "huggingface_hub.cli.hf", *args],
                         env=hub_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    got = {p.relative_to(tmp_path / local).as_posix() for p in (tmp_path / local).rglob("*") if p.is_file()
           and not p.relative_to(tmp_path / local).as_posix().startswith(".cache/huggingface/")}
    got.discard(".gitattributes")  # the Hub's own files of a download
    assert got == {p.relative_to(retail_pack).as_posix() for p in retail_pack.rglob("*") if p.is_file()}
    assert "README.md" in got and (tmp_path / local / "README.md").read_text() == card  # the Hub card is the pack's
    for rel in got:
        assert (tmp_path / local / rel).read_bytes() == (retail_pack / rel).read_bytes()
    verify = subprocess.run([sys.executable, "-m", "evalpack.cli", "verify", local], env=hub_env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "FAIL" not in verify.stdout and f"verified {local}" in verify.stdout  # README.md re-hashed with the rest
    score = subprocess.run([sys.executable, f"{local}/verify.py"], env=hub_env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert score.returncode == 0, score.stdout + score.stderr


def test_reverification_names_every_problem(retail_pack, tmp_path):
    """Consistency with the manifest, then evalpack verify: a tampered pack fails, naming each file."""
    from publish.check import verify_pack

    clean = verify_pack(retail_pack, manifest(retail_pack))
    assert clean.ok and clean.method == "evalpack verify", clean.failures
    assert any("gold SQL" in note for note in clean.notes)

    pack = tmp_path / "tampered"
    shutil.copytree(retail_pack, pack)
    _tamper_answer(pack)
    with open(pack / "verify.py", "a", encoding="utf-8") as handle:
        handle.write("# edited\n")
    table = _drop_a_row(pack)
    result = verify_pack(pack, manifest(pack))
    assert not result.ok
    text = "\n".join(result.failures)
    assert f"{table}: " in text  # the row count no longer agrees with the manifest
    assert "FAIL verify.py" in text and "FAIL questions.jsonl" in text


def test_an_imported_pack_has_a_card_and_is_published_like_a_built_one(hub, hub_env, tmp_path):
    """`evalpack import` assembles its pack with the same function as `evalpack build`: it gets a card, and
    `evalpack publish` releases it; `load_dataset` then reads its table and questions from the tag."""
    import duckdb

    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        con.execute("CREATE TABLE sales AS SELECT * FROM (VALUES (1, 10.5), (2, 20.25), (3, 4.0)) AS t(id, amount)")
    (tmp_path / "q.jsonl").write_text(json.dumps({
        "id": "c1", "question": "How many sales are there?", "sql": "SELECT COUNT(*) FROM sales",
        "check_sql": "SELECT COUNT(id) FROM sales", "answer": 3}) + "\n", encoding="utf-8")
    pack = tmp_path / "customer"
    done = subprocess.run([sys.executable, "-m", "evalpack.cli", "import", str(tmp_path / "q.jsonl"), "--data",
                           str(tmp_path / "warehouse.duckdb"), "-o", str(pack)], cwd=ROOT, env=hub_env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    card = (pack / "README.md").read_text(encoding="utf-8")
    header = card_header(card)
    assert [c["config_name"] for c in header["configs"]] == ["questions", "sales"]
    assert "synthetic" not in header["tags"] and "imported with evalpack" in card and "`q.jsonl`" in card
    assert card == render_card(pack)

    repo = "tester/customer-evalpack"
    released = publish_cli(hub_env, pack, repo=repo)
    assert released.returncode == 0, released.stdout + released.stderr
    assert set(hub.repos[("dataset", repo)].tags) == {"v0.1.0"}
    script = ("import json, sys; from datasets import load_dataset; "
              "s = load_dataset(sys.argv[1], 'sales', revision='v0.1.0'); "
              "q = load_dataset(sys.argv[1], 'questions', revision='v0.1.0'); "
              "print(json.dumps({'sales': {k: s[k].num_rows for k in s}, 'questions': q['dev'].num_rows}))")
    loaded = subprocess.run([sys.executable, "-c", script, repo], cwd=ROOT, env=hub_env, capture_output=True,
                            text=True, timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert json.loads(loaded.stdout.strip().splitlines()[-1]) == {"sales": {"seed_0": 3}, "questions": 1}


def test_the_specs_repo_is_the_default_and_another_repo_is_refused(tmp_path_factory, hub_env):
    from conftest import build_variant

    pack = build_variant(tmp_path_factory, "named", "license: cc-by-4.0\n", "license: cc-by-4.0\nrepo: tester/named\n")
    assert 'REPO = "tester/named"' in (pack / "README.md").read_text()  # the card names it
    run = subprocess.run([sys.executable, "-m", "evalpack.cli", "publish", str(pack), "--dry-run"], env=hub_env,
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "-> " in run.stdout and "/datasets/tester/named (tag v1.0.0)" in run.stdout, \
        run.stdout + run.stderr
    other = publish_cli(hub_env, pack, "--dry-run", repo="tester/other")
    assert other.returncode == 2 and "names the repo tester/named" in other.stderr and "tester/other" in other.stderr
    with pytest.raises(PublishError, match="names the repo tester/named"):
        build_layout(pack, "tester/other")
