"""A pack built with `exports:` goes to the Hub with its SQLite databases as files (issue 22, point 4): the
published repo holds them, a download opens them with sqlite3 and finds every table with its rows, the card
says how to use them with BIRD's and Spider's evaluation scripts and with `evalpack score --dialect sqlite`.

Against the fake Hub of tests/fakehub.py with the real huggingface_hub and datasets clients, as in
tests/publish/test_publish.py."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import build_variant

from evalpack.dialects.sqlite import sqlite_uri
from evalpack.pack.card import render_card

ROOT = Path(__file__).resolve().parents[2]
REPO = "tester/retail-dialects"
TAG = "v1.0.0"
SECTION = "## SQLite, BIRD and Spider"


@pytest.fixture(scope="module")
def exported_pack(tmp_path_factory) -> Path:
    """schemas/retail.yaml with `exports: [sqlite, bird, spider]`, built with 3 rotations."""
    return build_variant(tmp_path_factory, "exported", "license: cc-by-4.0\n",
                         "license: cc-by-4.0\nexports: [sqlite, bird, spider]\n")


@pytest.fixture(scope="module")
def download(hub, hub_env, exported_pack, tmp_path_factory) -> Path:
    """The pack published with the real `evalpack publish`, then its tag downloaded with huggingface_hub."""
    released = subprocess.run([sys.executable, "-m", "evalpack.cli", "publish", str(exported_pack), "--repo", REPO],
                              env=hub_env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert released.returncode == 0, released.stdout + released.stderr
    folder = tmp_path_factory.mktemp("download") / "retail"
    script = ("import sys; from huggingface_hub import snapshot_download; "
              "print(snapshot_download(sys.argv[1], repo_type='dataset', revision=sys.argv[2], local_dir=sys.argv[3]))")
    got = subprocess.run([sys.executable, "-c", script, REPO, TAG, str(folder)], env=hub_env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    return folder


def rotations_of(pack: Path) -> dict[str, dict]:
    manifest = json.loads((pack / "manifest.json").read_text())
    return {"rotations": manifest["rotations"], "tables": manifest["tables"], "pack": manifest["pack"]}


def tables_in(path: Path) -> dict[str, int]:
    """Each table of a SQLite file and its row count, read through a read-only URI."""
    with sqlite3.connect(sqlite_uri(path), uri=True) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        return {name: con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}


def test_the_published_repo_holds_the_sqlite_databases_and_they_open_with_sqlite3(hub, download, exported_pack):
    facts = rotations_of(exported_pack)
    repo_files = hub.files(REPO, TAG)
    expected = {f"exports/sqlite/{r}.sqlite" for r in facts["rotations"]}
    expected |= {f"exports/bird/dev_databases/{facts['pack']}_{r}/{facts['pack']}_{r}.sqlite" for r in facts["rotations"]}
    expected |= {f"exports/spider/database/{facts['pack']}_{r}/{facts['pack']}_{r}.sqlite" for r in facts["rotations"]}
    assert {p for p in repo_files if p.endswith(".sqlite")} == expected
    for rel in sorted(expected):
        path = download / rel
        assert path.read_bytes() == (exported_pack / rel).read_bytes() == repo_files[rel], rel
        rotation = rel.split("/")[-1].removesuffix(".sqlite").removeprefix(f"{facts['pack']}_")
        assert tables_in(path) == {t: info["rows"][rotation] for t, info in sorted(facts["tables"].items())}, rel
    # what BIRD's and Spider's scripts read: each gold line's db_id has its database at the path they build
    bird = download / "exports" / "bird"
    for line in (bird / "dev.sql").read_text().splitlines():
        sql, db_id = line.rsplit("\t", 1)
        with sqlite3.connect(sqlite_uri(bird / "dev_databases" / db_id / f"{db_id}.sqlite"), uri=True) as con:
            con.execute(sql).fetchall()  # BIRD's evaluation.py runs the gold SQL on that file
    spider = download / "exports" / "spider"
    db_ids = {entry["db_id"] for entry in json.loads((spider / "tables.json").read_text())}
    assert {e["db_id"] for e in json.loads((spider / "dev.json").read_text())} == db_ids
    assert all((spider / "database" / d / f"{d}.sqlite").is_file() for d in db_ids)


def test_the_download_verifies_and_scores_sqlite_sql_on_its_own_sqlite_files(download, exported_pack, hub_env,
                                                                              tmp_path):
    """The snapshot is the attested pack, exports included: `evalpack verify` passes, and `evalpack score
    --dialect sqlite` scores the exported SQLite gold SQL correct on the pack's own SQLite files."""
    verify = subprocess.run([sys.executable, "-m", "evalpack.cli", "verify", str(download)], env=hub_env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    gold = [json.loads(line) for line in (download / "exports/sqlite/questions.jsonl").read_text().splitlines()]
    candidates = tmp_path / "sqlite.jsonl"
    candidates.write_text("".join(json.dumps({"id": r["id"], "sql": r["gold_sql"]}) + "\n" for r in gold))
    score = subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(download), "--candidates",
                            str(candidates), "--dialect", "sqlite", "--json", str(tmp_path / "report.json")],
                           env=hub_env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert score.returncode in (0, 1) and score.stderr == "", score.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    status = {r["id"]: r["status"] for r in report["questions"]}
    assert gold and all(status[r["id"]] == "correct" for r in gold)
    assert report["dialect"].startswith("sqlite") and report["integrity"]["status"] != "unattested"


def test_load_dataset_reads_the_configs_beside_the_exports(hub_env, download, exported_pack):
    """The repo's JSON and SQLite files do not disturb `datasets`: the card's configs name their files."""
    script = ("import json, sys; from datasets import load_dataset; "
              "q = load_dataset(sys.argv[1], 'questions', revision=sys.argv[2]); "
              "o = load_dataset(sys.argv[1], 'orders', revision=sys.argv[2]); "
              "print(json.dumps({'questions': sum(q[s].num_rows for s in q), 'orders': {k: o[k].num_rows for k in o}}))")
    loaded = subprocess.run([sys.executable, "-c", script, REPO, TAG], env=hub_env, cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    facts = rotations_of(exported_pack)
    got = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert got["orders"] == facts["tables"]["orders"]["rows"]
    assert got["questions"] == len((exported_pack / "questions.jsonl").read_text().splitlines())


def test_the_card_says_how_to_use_the_files_with_birds_script_and_why_not_spiders(hub, download, exported_pack, retail_pack):
    card = hub.files(REPO, TAG)["README.md"].decode()
    assert card == render_card(exported_pack) == (download / "README.md").read_text()
    assert SECTION not in render_card(retail_pack)  # a pack built without exports says nothing of them
    section = card.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = [block.split("```", 1)[0] for block in section.split("```bash\n")[1:]]
    assert len(blocks) == 2  # BIRD, evalpack score
    assert "Spider's own `evaluation.py`" in section and "parses every gold query with Spider's grammar" in section
    assert "in the wrong order scores right there" in section  # BIRD compares sets; the card says what that misses
    local = next(line for line in blocks[0].splitlines() if line.startswith("hf download")).split("--local-dir ")[1]
    commands = {}
    for block in blocks:
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command)
            script = next((w for w in words if w.endswith(".py")), None) if words[0].startswith("python") else None
            commands[script or words[0]] = words
    bird = commands["src/evaluation.py"]

    def option(words: list[str], name: str) -> Path:
        value = words[words.index(name) + 1]
        assert value.startswith(f"{local}/"), (name, value)
        return download / value.removeprefix(f"{local}/")

    # BIRD's script joins the paths as text: the gold file is <ground_truth_path><data_mode>_gold.sql, a database
    # <db_root_path><db_id>/<db_id>.sqlite
    mode = bird[bird.index("--data_mode") + 1]
    gold_path = bird[bird.index("--ground_truth_path") + 1] + mode + "_gold.sql"
    assert (download / gold_path.removeprefix(f"{local}/")).is_file()
    root = bird[bird.index("--db_root_path") + 1]
    assert root.endswith("/") and option(bird, "--db_root_path").is_dir()
    db_id = json.loads(option(bird, "--diff_json_path").read_text())[0]["db_id"]
    assert (download / (root + f"{db_id}/{db_id}.sqlite").removeprefix(f"{local}/")).is_file()
    assert commands["evalpack"][:2] == ["evalpack", "score"] and "--dialect" in commands["evalpack"]
