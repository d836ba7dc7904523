"""Packs that Misata 0.9.8 builds (`misata evalpack`) score with `evalpack score` and check with `evalpack verify`
(issue 21 point 5): its layouts (one database in tables/, or rotations/seed-<n>/tables/), its CSV tables (read with
the column types of its manifest's schema, else DuckDB's sniffing, and the report says which), its questions scored
with evalpack's rules, and every report saying that the pack is Misata's and which files its attestation does not
cover. A changed or added table is refused (exit 2) as in an evalpack pack.

Misata is installed here, once per session, in its own virtual environment under pytest's temporary folder
(`pip install misata[evalpack]==0.9.8`: the test needs the package index), which reads the packages of the test's
own environment where they meet Misata's requirements; EVALPACK_MISATA names a `misata` command
to use instead. The specs: the one `misata init` writes (Misata's documented starting spec) and the one
`misata init --story "A SaaS company"` writes (the example of that command's documentation) and the one it writes
for "SaaS with 50K users, 20% churn in Q3" (a story `misata examples` lists), read from Misata at test time; and our Misata-format MRR bridges of tests/data/test_misata_waterfalls.py (a text period column, positive
amounts), which evalpack builds too. Nothing Misata wrote is kept in this repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import duckdb
import pytest
from conftest import verified_records
from test_misata_waterfalls import DATED_BRIDGE, TEXT_BRIDGE

MISATA_VERSION = "0.9.8"
MISATA_ENV = "EVALPACK_MISATA"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def misata(tmp_path_factory) -> str:
    """The `misata` command of Misata 0.9.8: $EVALPACK_MISATA, or one installed in a fresh virtual environment."""
    command = os.environ.get(MISATA_ENV)
    if not command:
        venv = tmp_path_factory.mktemp("misata-venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
        # the environment sees this one's packages after its own (a .pth line): pip installs only what Misata needs
        # beyond them (Faker, scipy), or another version where Misata pins one; 6 s instead of 21
        python = str(venv / "bin" / "python")
        theirs = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        Path(theirs, "evalpack-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        done = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--disable-pip-version-check",
                               "--quiet", f"misata[evalpack]=={MISATA_VERSION}"], capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        command = str(venv / "bin" / "misata")
    version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120)
    assert MISATA_VERSION in version.stdout, (version.stdout, version.stderr)
    return command


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600, cwd=cwd)


def evalpack(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("EVALPACK_SIGNING_KEY", "EVALPACK_PUBLIC_KEY")}
    return subprocess.run([sys.executable, "-m", "evalpack.cli", *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)


@pytest.fixture(scope="session")
def packs(misata, tmp_path_factory) -> dict[str, Path]:
    """Packs `misata evalpack` wrote: name -> folder (read-only: copy one before changing it)."""
    work = tmp_path_factory.mktemp("misata-packs")
    specs = {"init": work / "init.yaml", "story": work / "story.yaml", "churn_story": work / "churn_story.yaml",
             "text_bridge": work / "text_bridge.yaml", "dated_bridge": work / "dated_bridge.yaml"}
    for args in (["init", "-o", str(specs["init"]), "--force"],
                 ["init", "--story", "A SaaS company", "-o", str(specs["story"]), "--force"],
                 ["init", "--story", "SaaS with 50K users, 20% churn in Q3", "-o", str(specs["churn_story"]),
                  "--force"]):
        done = run(misata, *args, cwd=work)
        assert done.returncode == 0, done.stderr
    specs["text_bridge"].write_text(TEXT_BRIDGE, encoding="utf-8")
    specs["dated_bridge"].write_text(DATED_BRIDGE, encoding="utf-8")
    rotations = {"init": 3, "story": 1, "churn_story": 1, "text_bridge": 3, "dated_bridge": 1}
    out = {}
    for name, spec in specs.items():
        out[name] = work / f"{name}_pack"
        done = run(misata, "evalpack", "-c", str(spec), "-o", str(out[name]), "--rotations", str(rotations[name]),
                   cwd=work)
        assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-2000:])
        assert (out[name] / "questions.jsonl").read_text(encoding="utf-8").strip(), name
    return out


def questions(pack: Path) -> list[dict]:
    return [json.loads(line) for line in (pack / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line]


def candidates(pack: Path, folder: Path, change: dict[str, str | None] | None = None) -> Path:
    """The pack's own gold SQL as a candidates file, with ``change`` (id -> SQL, None: declined) applied."""
    path = folder / f"{pack.name}.candidates.jsonl"
    lines = []
    for q in questions(pack):
        sql = (change or {}).get(q["id"], q["gold_sql"])
        lines.append(json.dumps({"id": q["id"], "sql": sql}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_misata_writes_what_evalpack_reads(packs):
    """The layouts as Misata 0.9.8 writes them: CSV tables, an attestation per database, no evalpack layout."""
    single, rotated = packs["story"], packs["init"]
    assert sorted(p.name for p in (single / "tables").iterdir()) and all(
        p.suffix == ".csv" for p in (single / "tables").iterdir())
    assert (single / "attestation.intoto.json").is_file() and (single / "attestation.dsse.json").is_file()
    seeds = sorted(p.name for p in (rotated / "rotations").iterdir())
    assert seeds == ["seed-42", "seed-43", "seed-44"]
    assert all((rotated / "rotations" / s / "attestation.intoto.json").is_file() for s in seeds)
    assert not (rotated / "attestation.intoto.json").exists()
    manifest = json.loads((rotated / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["misata_version"] == MISATA_VERSION and "columns" in manifest["schema"]


@pytest.mark.parametrize("name", ["init", "story", "churn_story", "text_bridge", "dated_bridge"])
def test_a_misata_pack_scores_with_evalpack_score(name, packs, tmp_path):
    pack = packs[name]
    report = tmp_path / "report.json"
    done = evalpack("score", str(pack), "--candidates", str(candidates(pack, tmp_path)), "--json", str(report))
    n = len(questions(pack))
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr)
    assert f"{n}/{n} correct, 0 wrong, 0 declined" in done.stdout
    # whose pack it is, and what its attestation does not cover
    assert f"integrity: a pack misata {MISATA_VERSION} wrote, scored with evalpack's rules" in done.stdout
    assert "NOT COVERED by them (nothing shows these are Misata's): questions.jsonl (its gold SQL and answers)" \
           in done.stdout
    assert "UNSIGNED: Misata leaves its DSSE envelopes unsigned" in done.stdout
    # how its CSV tables were read
    assert "tables: CSV copied into DuckDB, with the column types of manifest.json's schema" in done.stdout
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["source"]["producer"] == "misata" and data["source"]["version"] == MISATA_VERSION
    loaded = data["source"]["tables_loaded"]
    assert set(loaded) == set(data["rotations"]) and all(loaded.values())
    seeds = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))["seeds"]
    assert data["rotations"] == [f"seed-{s}" for s in seeds]
    assert data["integrity"]["status"] == "unsigned"
    kinds = {q["kind"] for q in data["questions"]}
    assert "?" not in kinds  # Misata's source.kind names each family


def test_misata_tables_are_typed_by_its_schema_or_sniffed_and_the_report_says_which(packs, tmp_path):
    # a text period: every column typed as Misata's schema says
    typed = evalpack("score", str(packs["text_bridge"]), "--candidates", str(candidates(packs["text_bridge"], tmp_path)))
    assert typed.returncode == 0, typed.stderr
    assert "mrr_movements typed by the schema (4 columns)" in typed.stdout
    # a date period column, into which Misata writes 'YYYY-MM' labels: the schema's DATE cannot read them
    sniffed = evalpack("score", str(packs["dated_bridge"]), "--candidates",
                       str(candidates(packs["dated_bridge"], tmp_path)))
    assert sniffed.returncode == 0, sniffed.stderr
    assert "mrr_movements read with DuckDB's type sniffing (the schema's types do not read it: Conversion Error" \
           in sniffed.stdout


def test_wrong_and_declined_candidates_on_a_misata_pack(packs, tmp_path):
    pack = packs["text_bridge"]
    first, second = questions(pack)[:2]
    wrong = candidates(pack, tmp_path, {first["id"]: f"SELECT ({first['gold_sql']}) + 0.01", second["id"]: None})
    done = evalpack("score", str(pack), "--candidates", str(wrong))
    n = len(questions(pack))
    assert done.returncode == 1, done.stderr
    assert f"WRONG    {first['id']}" in done.stdout and f"DECLINED {second['id']}" in done.stdout
    assert f"{n - 2}/{n} correct, 1 wrong, 1 declined" in done.stdout


def test_evalpack_verify_reruns_a_misata_packs_gold_sql_and_says_what_is_not_covered(packs):
    for name in ("init", "story"):
        done = evalpack("verify", str(packs[name]))
        assert done.returncode == 0, (done.stdout, done.stderr)
        n = len(questions(packs[name]))
        assert f"MISATA: manifest.json says misata {MISATA_VERSION} made this pack" in done.stdout
        assert f"OK gold SQL: {n}/{n} questions verify on every rotation" in done.stdout
        assert "NOT COVERED by Misata's attestation (it pins the tables only; nothing shows these are the files " \
               "Misata wrote): questions.jsonl (its gold SQL and answers)" in done.stdout
        assert f"a pack misata {MISATA_VERSION} wrote;" in done.stdout.splitlines()[-1]


def test_commands_for_evalpack_s_own_packs_say_a_misata_pack_is_one(packs, tmp_path):
    """audit, diff and export read what only `evalpack build` writes: on a Misata pack each says so in one line
    (exit 2) and names the commands that do read it (diff ended in a traceback, export said the manifest was damaged)."""
    pack = packs["init"]
    for args in (["audit", str(pack)], ["diff", str(pack), str(pack)],
                 ["export", str(pack), "--format", "sqlite", "-o", str(tmp_path / "out")]):
        done = evalpack(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "a pack misata 0.9.8 wrote" in lines[0] and "evalpack score" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_changed_or_added_table_refuses_a_misata_pack(packs, tmp_path):
    pack = shutil.copytree(packs["init"], tmp_path / "changed")
    table = next((pack / "rotations" / "seed-43" / "tables").glob("*.csv"))
    table.write_bytes(table.read_bytes() + b"\n")  # one more byte
    gold = candidates(packs["init"], tmp_path)
    done = evalpack("score", str(pack), "--candidates", str(gold))
    assert done.returncode == 2
    assert f"{table}: sha256" in done.stderr and "differs from the attested" in done.stderr
    assert evalpack("verify", str(pack)).returncode == 1

    added = shutil.copytree(packs["init"], tmp_path / "added")
    extra = added / "rotations" / "seed-42" / "tables" / "extra.csv"
    extra.write_text("a\n1\n", encoding="utf-8")
    done = evalpack("score", str(added), "--candidates", str(gold))
    assert done.returncode == 2
    assert "extra.csv: in rotations/seed-42/tables/ but not in rotations/seed-42/attestation.intoto.json (a table " \
           "was added" in done.stderr


def test_a_misata_pack_without_its_attestation_needs_allow_unattested(packs, tmp_path):
    pack = shutil.copytree(packs["story"], tmp_path / "bare")
    (pack / "attestation.intoto.json").unlink()
    gold = candidates(packs["story"], tmp_path)
    refused = evalpack("score", str(pack), "--candidates", str(gold))
    assert refused.returncode == 2
    assert "attestation.intoto.json: missing, so nothing pins this database's tables" in refused.stderr
    allowed = evalpack("score", str(pack), "--candidates", str(gold), "--allow-unattested")
    assert allowed.returncode == 0, allowed.stderr
    assert "NOT CHECKED: 1 of 1 databases have no attestation and --allow-unattested was given" in allowed.stdout


def test_an_edited_question_is_scored_as_edited_because_nothing_pins_it(packs, tmp_path):
    """What 'not covered' means: questions.jsonl can be changed and the integrity check cannot see it."""
    pack = shutil.copytree(packs["story"], tmp_path / "edited")
    records = questions(pack)
    records[0]["expected_answer"] = -1
    (pack / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    done = evalpack("score", str(pack), "--candidates", str(candidates(packs["story"], tmp_path)))
    assert done.returncode == 1  # the gold SQL no longer matches the edited answer, and nothing refused the pack
    assert "NOT COVERED" in done.stdout


def test_misata_and_evalpack_agree_on_the_declared_balances_of_the_same_spec(packs, tmp_path):
    """The MRR bridge with a text period column, built by both tools: the closing balances each asks for are the
    declared ones."""
    theirs = sorted(q["expected_answer"] for q in questions(packs["text_bridge"])
                    if q["source"]["kind"] == "waterfall_balance")
    spec = tmp_path / "text_bridge.yaml"
    spec.write_text(TEXT_BRIDGE, encoding="utf-8")
    built = evalpack("build", str(spec), "-o", str(tmp_path / "ours"), "--jobs", "1")
    assert built.returncode == 0, built.stderr
    ours = sorted(q["expected_answer"] for q in questions(tmp_path / "ours") if q["kind"] == "waterfall_ending")
    assert theirs == ours == [106000.37, 109955.48, 112480.12, 117310.09, 121004.66, 126870.31]


def test_the_specs_misata_init_writes_build_unchanged(misata, tmp_path):
    """Misata's documented starting specs (`misata init`, and `misata init --story ...`) build as written: display
    names, `domain:`, `probabilities:`, a boolean's `probability:`, `distribution:` with Misata's parameters and a
    column whose values depend on a label (`depends_on`/`mapping`/`default`) are read; what evalpack does without is
    a warning naming its line."""
    built = {}
    for name, extra in (("init", []), ("story", ["--story", "A SaaS company"])):
        spec = tmp_path / f"{name}.yaml"
        assert run(misata, "init", *extra, "-o", str(spec), "--force", cwd=tmp_path).returncode == 0
        out = tmp_path / f"{name}_pack"
        done = evalpack("build", str(spec), "-o", str(out), "--jobs", "1", "--rotations", "2")
        assert done.returncode == 0, done.stderr
        assert f"{spec}:" in done.stdout and ": domain: read and not used: Misata picks" in done.stdout
        assert "is a display name (Misata takes any)" in done.stdout
        built[name] = out
    con = duckdb.connect()

    def table(pack: Path, name: str) -> str:
        return f"read_parquet('{pack}/rotations/seed_42/tables/{name}.parquet')"

    init, story = built["init"], built["story"]
    shares = dict(con.execute(f"SELECT plan, count(*) / 1000 FROM {table(init, 'users')} GROUP BY 1").fetchall())
    assert set(shares) == {"free", "pro", "enterprise"} and shares["free"] > shares["pro"] > shares["enterprise"]
    low, median, high = con.execute(f"SELECT min(amount), median(amount), max(amount) FROM {table(init, 'orders')}").fetchone()
    assert low >= 5 and high <= 500 and median < (5 + 500) / 2 - 50  # lognormal: most amounts low, a long tail
    by_plan = {plan: (lo, hi) for plan, lo, hi in con.execute(
        f"SELECT plan, min(mrr), max(mrr) FROM {table(story, 'subscriptions')} GROUP BY 1").fetchall()}
    assert by_plan["free"] == (0, 0)
    assert by_plan["starter"][0] >= 9 and by_plan["pro"][0] >= 49 and by_plan["enterprise"][0] >= 200
    assert by_plan["enterprise"][1] > by_plan["pro"][1] > by_plan["starter"][1]
    churned = con.execute(f"SELECT avg(churned::INT) FROM {table(story, 'users')}").fetchone()[0]
    assert 0.1 < churned < 0.2  # `probability: 0.15`


def test_the_curves_misata_init_documents_build_or_say_what_to_write(misata, tmp_path):
    """The outcome and rate curves that `misata init` documents (commented out), uncommented onto its own tables:
    `concentration` and `intra_period_pattern` are read with a warning and every declared total holds; a quarterly
    rate curve is refused naming the key, what Misata does and what to write, and builds once that is written."""
    spec = tmp_path / "init.yaml"
    assert run(misata, "init", "-o", str(spec), "--force", cwd=tmp_path).returncode == 0
    text = spec.read_text(encoding="utf-8")
    documented = [line[2:] for line in text.splitlines() if line.startswith("# ") and (
        line.startswith(("# outcome_curves:", "# rate_curves:", "#   ", "#     ", "#       ")))]
    curves = "\n".join(documented)
    assert "concentration:" in curves and "time_unit: quarter" in curves
    curves = (curves.replace("time_column: order_date", "time_column: placed_at")
              .replace("table: transactions", "table: orders").replace("column: is_fraud", "column: refunded")
              .replace("time_column: transaction_date", "time_column: placed_at"))
    curves = "\n".join(line for line in curves.splitlines() if "group_by" not in line and "name: " not in line
                       and "type: unique" not in line and "column_a" not in line)
    start = curves.index("outcome_curves:")
    text = text.replace("      status:\n", "      refunded:\n        type: boolean\n      status:\n", 1)
    spec.write_text(text + "\n" + curves[start:] + "\n", encoding="utf-8")
    refused = evalpack("build", str(spec), "-o", str(tmp_path / "pack"), "--jobs", "1")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "rate_curves[0].time_unit: time_unit 'quarter' is not supported by evalpack: Misata holds the curve's " \
           "rates per quarter" in refused.stderr and "write time_unit: month" in refused.stderr
    spec.write_text(spec.read_text(encoding="utf-8").replace("time_unit: quarter", "time_unit: month"), "utf-8")
    done = evalpack("build", str(spec), "-o", str(tmp_path / "pack"), "--jobs", "1", "--rotations", "2")
    assert done.returncode == 0, done.stderr
    assert "outcome_curves[0].concentration: read and not used" in done.stdout
    assert "outcome_curves[0].intra_period_pattern: read and not used" in done.stdout
    assert "orders.amount: distribution read and not used: its plan sets its values" in done.stdout
    con = duckdb.connect()
    for seed in ("seed_42", "seed_43"):
        totals = dict(con.execute(f"SELECT strftime(placed_at, '%Y-%m'), sum(amount) FROM read_parquet("
                              f"'{tmp_path}/pack/rotations/{seed}/tables/orders.parquet') GROUP BY 1").fetchall())
        assert (totals["2024-01"], totals["2024-06"], totals["2024-12"]) == (10000, 45000, 120000)


STORIES = ("SaaS with 50K users, 20% churn in Q3", "E-commerce with 100K orders", "Pharma with 500 projects, 50K timesheets")


def test_the_stories_misata_documents_build_or_say_what_misata_does(misata, tmp_path):
    """The stories `misata examples` lists, as `misata init --story` writes them: the SaaS story (scenario events, a
    churn rate for month 8 without interpolation) and the e-commerce story (zipf sampling, int decimals, Misata's
    text types) build as written; the pharma story's rollup columns are refused naming the key and what Misata does."""
    done = {}
    for number, story in enumerate(STORIES):
        spec = tmp_path / f"story{number}.yaml"
        assert run(misata, "init", "--story", story, "-o", str(spec), "--force", cwd=tmp_path).returncode == 0
        done[story] = (evalpack("build", str(spec), "-o", str(tmp_path / f"pack{number}"), "--jobs", "1",
                                "--rotations", "2"), tmp_path / f"pack{number}")
    saas, saas_pack = done[STORIES[0]]
    assert saas.returncode == 0, saas.stderr
    assert ": events: read and not used: Misata applies each scenario event" in saas.stdout
    # the rate questions verify; every month's rate is the same 20 %, so a rate over the months before counts too and
    # the near-miss gate leaves them out (drop_conjunct passes), which the manifest says
    rates = [q for q in verified_records(saas_pack) if q["kind"] == "rate"]
    months = sorted(q["key"].rsplit(":", 1)[-1][:7] for q in rates)
    assert months == ["2022-08", "2023-08", "2024-08"], rates  # Misata's period "8": every August of the range
    assert all(abs(q["expected_answer"] - 0.2) < 0.001 for q in rates), rates  # 20 % of each month's rows, rounded
    shop, shop_pack = done[STORIES[1]]
    assert shop.returncode == 0, shop.stderr
    counts = duckdb.connect().execute(f"SELECT category, count(*) FROM read_parquet('{shop_pack}/rotations/seed_42/"
                                      "tables/products.parquet') GROUP BY 1").fetchall()
    listed = ["electronics", "clothing", "home & garden", "sports", "books", "beauty"]
    by_label = dict(counts)
    assert by_label[listed[0]] > by_label[listed[-1]]  # zipf: the listed order, most frequent first
    pharma, pharma_pack = done[STORIES[2]]
    assert pharma.returncode == 2 and pharma.stderr.count("\n") == 1 and not pharma_pack.exists()
    assert ".rollup: `rollup` is not supported by evalpack" in pharma.stderr
    assert "Misata fills each row with an aggregate of its child rows" in pharma.stderr
