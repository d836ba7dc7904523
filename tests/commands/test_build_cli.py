"""`evalpack build`: refuses an existing PACK without --force, replaces it with --force, writes nothing at
PACK when the build fails (nor a temporary folder beside it), prints progress and a summary."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import evalpack.build
from evalpack.cli import main

SPEC = """\
name: tiny
seed: 21
rotations: 2
tables:
  customers:
    rows: 25
    columns:
      customer_id: {type: int, unique: true, min: 1}
      segment: {type: categorical, choices: [a, b]}
  orders:
    rows: 80
    columns:
      order_id: {type: int, unique: true, min: 1}
      customer_id: {type: foreign_key}
      amount: {type: float, min: 1, max: 900, decimals: 2}
      ordered_at: {type: date, start: "2024-12-01", end: "2025-03-31"}
relationships:
  - {parent: customers.customer_id, child: orders.customer_id, orphans: 2, nulls: 2}
outcome_curves:
  - {table: orders, column: amount, time_column: ordered_at,
     curve_points: [{period: "2025-01", target_value: 3100.37}, {period: "2025-02", target_value: 2900.45}]}
"""

# Valid, but declares nothing to ask about: the build makes rotations and then finds no question (exit 1).
NO_QUESTIONS = """\
name: empty
tables:
  things:
    rows: 10
    columns:
      thing_id: {type: int, unique: true, min: 1}
"""


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for folders)."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def beside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def build(*args: str) -> int:
    return main(["build", *args, "--jobs", "1"])


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    """A folder at PACK holding an earlier pack of the user's (--force replaces only a pack: issue 17)."""
    out = tmp_path / "pack"
    (out / "notes").mkdir(parents=True)
    (out / "README.md").write_text("my earlier pack\n", encoding="utf-8")
    (out / "notes" / "keep.txt").write_bytes(b"\x00precious\n")
    (out / "questions.jsonl").write_text("", encoding="utf-8")
    (out / "manifest.json").write_text('{"tool": {"name": "evalpack"}}', encoding="utf-8")
    return out


def test_refuses_an_existing_pack_without_force(spec: Path, existing: Path, tmp_path: Path, capsys) -> None:
    before = snapshot(existing)
    assert build(str(spec), "-o", str(existing)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evalpack: error: {existing}: already exists")
    assert "--force" in err
    assert "Traceback" not in err
    assert snapshot(existing) == before
    assert beside(tmp_path) == ["pack", "tiny.yaml"]


def test_refuses_an_existing_file_at_pack_without_force(spec: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pack"
    out.write_text("not a folder\n", encoding="utf-8")
    assert build(str(spec), "-o", str(out)) == 2
    assert "already exists" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "not a folder\n"
    assert beside(tmp_path) == ["pack", "tiny.yaml"]


def test_force_replaces_the_pack_and_prints_a_summary(spec: Path, existing: Path, tmp_path: Path, capsys) -> None:
    # a folder holding a file no pack lists is the user's: --force leaves it alone (issue 50)
    assert build(str(spec), "-o", str(existing), "--force") == 2
    assert (existing / "notes" / "keep.txt").read_bytes() == b"\x00precious\n"
    shutil.rmtree(existing)
    assert build(str(spec), "--seed", "7", "-o", str(existing)) == 0
    earlier = (existing / "manifest.json").read_bytes()
    capsys.readouterr()
    assert build(str(spec), "-o", str(existing), "--force") == 0
    out = capsys.readouterr().out
    # the earlier pack is gone, a whole pack is in its place, and nothing is left beside it
    assert (existing / "manifest.json").read_bytes() != earlier
    card = existing / "README.md"
    assert not card.exists() or card.read_text(encoding="utf-8") != "my earlier pack\n"
    for name in ("questions.jsonl", "certificate.json", "manifest.json", "verify.py"):
        assert (existing / name).is_file(), name
    assert beside(tmp_path) == ["pack", "tiny.yaml"]

    # the summary states what was built, and its figures are those of the written pack
    assert out.startswith(f"built {existing} from {spec} in ")
    rotations = sorted(p.name for p in (existing / "rotations").iterdir())
    assert rotations == ["seed_21", "seed_22"]
    assert re.search(r"^  rotations: seed_21, seed_22$", out, re.M), out
    con = duckdb.connect()
    for table in ("customers", "orders"):
        counts = {con.execute(f"SELECT COUNT(*) FROM read_parquet('{existing}/rotations/{r}/tables/{table}.parquet')")
                  .fetchone()[0] for r in rotations}
        assert len(counts) == 1
        assert re.search(rf"^  {table}: {counts.pop():,} rows per rotation$", out, re.M), out
    con.close()
    records = (existing / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    shipped = [line for line in records if json.loads(line)["answerable"]]
    match = re.search(r"^  questions shipped: (\d+) \(", out, re.M)
    assert match and int(match.group(1)) == len(shipped) > 0, out
    declines = re.search(r"^  unanswerable: (\d+) to decline \(", out, re.M)
    assert declines and int(declines.group(1)) == len(records) - len(shipped) > 0, out
    shipped = records
    kinds = {json.loads(line)["kind"] for line in shipped}
    for kind in kinds:
        assert kind in out


def test_force_over_a_real_pack_replaces_it_with_the_new_build(spec: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pack"
    assert build(str(spec), "-o", str(out)) == 0
    assert build(str(spec), "-o", str(out), "--force", "--seed", "500", "--rotations", "1") == 0
    assert sorted(p.name for p in (out / "rotations").iterdir()) == ["seed_500"]
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["seeds"] == [500]
    assert beside(tmp_path) == ["pack", "tiny.yaml"]


def test_a_bad_spec_writes_nothing_at_pack(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("rows: 80", "rows: eighty"), encoding="utf-8")
    assert build(str(bad), "-o", str(tmp_path / "pack")) == 2
    assert beside(tmp_path) == ["bad.yaml"]


def test_a_spec_without_facts_is_refused_and_writes_nothing(tmp_path: Path, capsys) -> None:
    """A spec with tables and nothing to ask about (what `misata init -s "fitness app"` writes) is the spec's
    problem, said as one: exit 2, the file, and what to declare; not a verification failure (exit 1)."""
    spec = tmp_path / "empty.yaml"
    spec.write_text(NO_QUESTIONS, encoding="utf-8")
    out = tmp_path / "deep" / "pack"
    assert build(str(spec), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evalpack: error: {spec}: declares no fact a question can ask about") and "outcome_curves" in err
    assert not out.exists()
    assert list((tmp_path / "deep").iterdir()) == [], "a temporary folder was left behind"


def test_a_failed_forced_build_leaves_the_existing_pack_untouched(existing: Path, tmp_path: Path, capsys) -> None:
    spec = tmp_path / "empty.yaml"
    spec.write_text(NO_QUESTIONS, encoding="utf-8")
    before = snapshot(existing)
    assert build(str(spec), "-o", str(existing), "--force") == 2
    assert snapshot(existing) == before
    assert beside(tmp_path) == ["empty.yaml", "pack"]


def test_an_interrupted_build_writes_nothing(spec: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    real = evalpack.build.write_rotations

    def interrupted(spec_, plans, folder, *args, **kwargs):
        real(spec_, plans[:1], folder, *args, **kwargs)  # part of the pack is on disk when Ctrl-C arrives
        assert any(Path(folder).rglob("*.parquet"))
        raise KeyboardInterrupt

    monkeypatch.setattr(evalpack.build, "write_rotations", interrupted)
    assert build(str(spec), "-o", str(tmp_path / "pack")) == 130
    assert beside(tmp_path) == ["tiny.yaml"]


def test_rotations_below_one_are_refused(spec: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        build(str(spec), "-o", str(tmp_path / "pack"), "--rotations", "0")
    assert exc.value.code == 2
    assert "--rotations must be at least 1" in capsys.readouterr().err
    assert beside(tmp_path) == ["tiny.yaml"]


def test_console_script_shows_progress_per_rotation_and_table(spec: Path, tmp_path: Path) -> None:
    """The installed `evalpack` command: progress on stderr with -v, the summary on stdout, exit 0;
    then the same command again is refused (exit 2) and leaves the pack as it was."""
    exe = shutil.which("evalpack")
    assert exe, "the `evalpack` console script is not installed"
    out = tmp_path / "pack"
    cmd = [exe, "build", str(spec), "-o", str(out), "--rotations", "3", "--jobs", "1", "-v"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for seed in (21, 22, 23):
        for table, rows in (("customers", 25), ("orders", 80)):
            assert f"seed_{seed}: {table} {rows:,} rows" in proc.stderr, proc.stderr
    assert proc.stdout.startswith(f"built {out} from {spec}")
    assert sorted(p.name for p in (out / "rotations").iterdir()) == ["seed_21", "seed_22", "seed_23"]

    before = snapshot(out)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2
    assert "already exists" in again.stderr and "Traceback" not in again.stderr
    assert again.stdout == ""
    assert snapshot(out) == before
    assert beside(tmp_path) == ["pack", "tiny.yaml"]


def test_the_evalpack_command_builds_without_importing_pandas_and_writes_the_same_pack(spec: Path, tmp_path: Path,
                                                                                      capsys) -> None:
    """`evalpack build` (the console entry point) keeps pyarrow from importing pandas (issue 24: 0.3-0.8 s of a small
    build) and writes the same pack as main() in a process that has pandas; to_pandas() still works afterwards."""
    assert build(str(spec), "-o", str(tmp_path / "in_process"), "--seed", "3") == 0
    script = ("import sys; from evalpack.cli import console\n"
              f"sys.argv = ['evalpack', 'build', {str(spec)!r}, '-o', {str(tmp_path / 'console')!r}, '--seed', '3', "
              "'--jobs', '1']\n"
              "code = console(); seen = 'pandas' in sys.modules\n"
              "import pyarrow as pa; frame = pa.table({'a': [1]}).to_pandas()\n"
              "print(code, seen, type(frame).__name__)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 False DataFrame"
    ours, theirs = snapshot(tmp_path / "in_process"), snapshot(tmp_path / "console")
    differing = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    assert set(differing) <= {"attestation.intoto.json"}, differing  # the attestation records the build's times


def test_evalpack_help_lists_publish_and_diff_without_loading_what_only_they_use() -> None:
    """Every `evalpack` command registers `publish` and `diff` (entry points); the Hub client, the pack's checks and
    pyarrow load only when one of those runs (issue 24: `evalpack --help` under 0.3 s), and the package's names
    still resolve on first use."""
    heavy = ("publish.hub", "publish.check", "publish.layout", "huggingface_hub", "pyarrow", "sqlglot")
    script = ("import sys; from evalpack.cli import console\n"
              "sys.argv = ['evalpack', '--help']\n"
              "try:\n    console()\nexcept SystemExit as done:\n    code = done.code\n"
              f"print(code, sorted(m for m in {heavy!r} if m in sys.modules))\n"
              "from publish import PackRefused, publish_pack, HubLayout\n"
              "print(PackRefused.__module__, publish_pack.__module__, HubLayout.__module__)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *usage, loaded, resolved = done.stdout.splitlines()
    assert {"publish", "diff"} <= set(" ".join(usage).replace("{", " ").replace("}", " ").replace(",", " ").split())
    assert loaded == "0 []"
    assert resolved == "publish.hub publish.hub publish.layout"
