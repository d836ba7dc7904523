"""The README's commands, run as written: each bash block is taken from README.md itself and run with
``bash -e`` in a scratch folder that holds a copy of ``schemas/`` (so relative paths mean what they say
in a checkout), with a fresh ``DAGSTER_HOME``.

Left to other tests, because they install packages or need a server: the quick start's ``pip install``
steps (they are what ``.ci/run`` runs, verbatim), ``pip install duckdb cryptography``, publishing for
real and ``load_dataset`` (tests/publish/test_publish.py, against the fake Hub), ``dagster dev``
(tests/dagster/test_dagster_dev.py) and the dask cluster (tests/dagster/test_dask.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import full_questions

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)


def block(containing: str, lang: str = "bash") -> str:
    """The one README code block of ``lang`` that contains ``containing``."""
    [found] = [body for kind, body in BLOCKS if kind == lang and containing in body]
    return found


def without(text: str, *prefixes: str) -> str:
    """``text`` without the lines that start with one of ``prefixes`` (install steps, network calls)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(prefixes))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "schemas", work / "schemas")
    return work


@pytest.fixture(scope="module")
def env(workdir) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "EVALPACK_", "HF_"))}
    bindir = str(Path(sys.executable).parent)  # the evalpack and python of this environment come first
    return {**clean, "PATH": bindir + os.pathsep + clean.get("PATH", ""), "SOURCE_DATE_EPOCH": "1767225600",
            "EVALPACK_PACKS_DIR": str(workdir / "packs" / "dagster")}


def bash(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.mark.slow
def test_quick_start_then_scoring_commands(workdir, env):
    quick = block("evalpack build schemas/retail.yaml -o packs/retail --rotations 3 --force")
    first = quick.splitlines()[0]
    assert first.startswith("pip install -e . && ")  # the install itself is .ci/run's, verbatim
    ok(bash(first.removeprefix("pip install -e . && "), workdir, env))
    assert (workdir / "packs" / "retail" / "attestation.intoto.json").is_file()

    records = full_questions(workdir / "packs" / "retail")  # the builder has the holdout's answer key beside the pack
    (workdir / "answers.jsonl").write_text("".join(json.dumps({"id": r["id"], "sql": r["gold_sql"]}) + "\n"
                                                   for r in records))
    out = ok(bash(block("python packs/retail/verify.py --candidates answers.jsonl"), workdir, env))
    assert json.loads((workdir / "report.json").read_text())["summary"]["overall"]["correct"] == len(records), out

    # the holdout's answer key: found beside the pack, absent from a copy, given back with --holdout-key
    held = sum(r["split"] == "holdout" for r in records)
    out = ok(bash(block("cp -r packs/retail downloaded"), workdir, env))
    dev = len(records) - held
    assert f"holdout: {held} questions not scored here" in out and f"{dev}/{dev} correct" in out, out
    assert out.count(f"{len(records)}/{len(records)} correct") == 2, out


@pytest.mark.slow
def test_import_and_audit_commands(workdir, env):
    with duckdb.connect(str(workdir / "warehouse.duckdb")) as con:
        con.execute("CREATE TABLE sales AS SELECT * FROM (VALUES (1, 10.5), (2, 20.25), (3, 4.0)) AS t(id, amount)")
    (workdir / "customer_questions.jsonl").write_text(
        json.dumps({"id": "c1", "question": "How many sales are there?", "sql": "SELECT COUNT(*) FROM sales",
                    "answer": 3}) + "\n" +
        json.dumps({"id": "c2", "question": "What is the total amount sold?", "sql": "SELECT SUM(amount) FROM sales",
                    "answer": 34.75}) + "\n")
    out = ok(bash(block("evalpack import customer_questions.jsonl"), workdir, env))
    assert "no findings in 2 questions" in out


@pytest.mark.slow
def test_signing_verifying_and_the_openssl_recipe(workdir, env):
    ok(bash(block("evalpack keygen keys"), workdir, env))
    out = ok(bash(block("evalpack verify packs/retail --public-key keys/evalpack.pub"), workdir, env))
    shown = block("OK signature: ed25519 key keys/evalpack.pub", lang="")
    assert out == shown  # the README shows exactly what the command prints
    ok(bash(without(block("python packs/retail/verify.py\n"), "pip install"), workdir, env))
    recipe = ok(bash(block("openssl pkeyutl -verify"), workdir, env))
    assert "hashes OK" in recipe and "file list OK" in recipe and "Signature Verified Successfully" in recipe


@pytest.mark.slow
def test_publish_dry_run_command(workdir, env):
    dry = [line for line in block("evalpack publish packs/retail").splitlines() if "--dry-run" in line]
    out = ok(bash("\n".join(dry), workdir, env))
    assert "you/retail-evalpack" in out


@pytest.mark.slow
def test_dagster_headless_commands_on_a_fresh_dagster_home(workdir, env):
    script = block("python -m pipelines.run finance --rotations 2")
    assert "export DAGSTER_HOME=$PWD/.dagster" in script and not (workdir / ".dagster").exists()
    out = ok(bash(script, workdir, env))
    assert "built retail: run" in out and "built finance: run" in out
    for pack in ("retail", "finance"):
        assert (workdir / "packs" / "dagster" / pack / "attestation.intoto.json").is_file()


def test_the_private_key_the_readme_recipe_writes_is_ignored_by_git(tmp_path):
    """`evalpack keygen keys` writes keys/evalpack.key into the checkout; git must never offer to commit it."""
    recipe = block("evalpack keygen keys")
    assert "keys/evalpack.key" in recipe
    checked = subprocess.run(["git", "check-ignore", "--no-index", "keys/evalpack.key", "keys/evalpack.pub"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and checked.stdout.split() == ["keys/evalpack.key", "keys/evalpack.pub"], checked


def test_the_readme_bird_command_is_the_cards():
    """README gives BIRD's evaluation.py command with every option the card's has (it lacked --diff_json_path)."""
    from evalpack.pack.card import exports_markdown

    def options(command: str) -> dict[str, str]:
        words = command.replace("\\\n", " ").split()
        return {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--") and i + 1 < len(words)}

    manifest = {"pack": "retail", "rotations": ["seed_42"], "dialects": {"formats": ["bird"]}}
    card = exports_markdown(manifest, "DIR", "you/retail-evalpack", "v1.0.0")
    [command] = re.findall(r"python3 -u src/evaluation.py .*?\n```", card, flags=re.S)
    readme = options(block("src/evaluation.py"))
    assert "--diff_json_path" in readme and readme == options(command.removesuffix("```"))
