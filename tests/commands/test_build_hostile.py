"""A careless user and a crashing machine against `evalpack build` (issue 17, build items 5 and 6).

Output-path mistakes exit 2 with one line before any work and write nothing; --force replaces only a
pack or an empty folder; a build killed with SIGKILL leaves no process behind, and the next build
removes its staging and spill folders (but never a live run's); the final swap never leaves -o missing.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import one_line_error
from test_build_cli import SPEC, snapshot

from evalpack.cli import main
from evalpack.core import debris
from evalpack.core.layout import PackLayout
from evalpack.pack import folder as pack_folder

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str, str]:
    """``evalpack ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()




def complete(pack: Path) -> None:
    """``pack`` is an evalpack pack whose attestation lists exactly the files on disk."""
    assert pack_folder.is_pack(pack), pack
    layout = PackLayout(pack)
    for path in (layout.card, layout.certificate, layout.scorer, layout.attestation):
        assert path.is_file(), path
    envelope = json.loads(layout.attestation.read_text(encoding="utf-8"))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    listed = {s["name"] for s in statement["subject"]}
    on_disk = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()} - {"attestation.intoto.json"}
    assert listed == on_disk
    assert layout.rotations() and all(any(layout.tables(r).glob("*.parquet")) for r in layout.rotations())


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A real pack, built once."""
    where = tmp_path_factory.mktemp("built")
    (where / "tiny.yaml").write_text(SPEC, encoding="utf-8")
    code, _, err = run("build", str(where / "tiny.yaml"), "-o", str(where / "pack"), "--jobs", "1")
    assert code == 0, err
    return where / "pack"


# --------------------------------------------------------------------------- output-path mistakes


@pytest.mark.parametrize("case", ["seed", "dot", "dot-force", "parent-of-cwd", "spec-folder", "under-a-file",
                                  "unwritable", "file-force", "missing-o"])
def test_an_output_mistake_is_one_line_exit_2_and_writes_nothing(case: str, spec: Path, tmp_path: Path,
                                                                  monkeypatch) -> None:
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    (tmp_path / "afile").write_text("mine\n", encoding="utf-8")
    (tmp_path / "specs").mkdir()
    kept = tmp_path / "specs" / "tiny.yaml"
    kept.write_text(SPEC, encoding="utf-8")
    monkeypatch.chdir(work)
    args, words = {
        "seed": (["-o", str(tmp_path / "p"), "--seed", "-1"], ["--seed", "at least 0"]),
        "dot": (["-o", "."], [".: is the current folder", "choose another -o"]),
        "dot-force": (["-o", ".", "--force"], [".: is the current folder", "choose another -o"]),
        "parent-of-cwd": (["-o", str(tmp_path / "work"), "--force"], [str(tmp_path / "work"), "current folder"]),
        "spec-folder": (["-o", str(tmp_path / "specs"), "--force"], [str(kept), "choose another -o"]),
        "under-a-file": (["-o", str(tmp_path / "afile" / "pack")], [str(tmp_path / "afile"), "is a file"]),
        "unwritable": (["-o", "/proc/evalpack-x"], ["/proc/evalpack-x", "cannot create", "choose another -o"]),
        "file-force": (["-o", str(tmp_path / "afile"), "--force"], [str(tmp_path / "afile"), "left alone"]),
        "missing-o": ([], ["-o/--output"]),
    }[case]
    before = snapshot(tmp_path)
    code, out, err = run("build", str(kept if case == "spec-folder" else spec), *args, "--jobs", "1")
    assert code == 2
    assert out == ""
    one_line_error(err, *words)
    assert snapshot(tmp_path) == before
    assert not os.path.lexists("/proc/evalpack-x")


def test_audit_json_into_a_missing_folder_is_refused_before_the_audit(built: Path, tmp_path: Path,
                                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before, pack = snapshot(tmp_path), snapshot(built)
    for target, words in (("missing/dir/out.json", ["missing/dir/out.json", "does not exist", "--json"]),
                          ("/proc/evalpack-x.json", ["/proc/evalpack-x.json", "cannot write", "--json"]),
                          (str(built), ["is a folder", "--json"])):
        code, out, err = run("audit", str(built), "--json", target)
        assert code == 2
        assert out == "", "the audit ran before the report path was checked"
        one_line_error(err, *words)
    assert snapshot(tmp_path) == before and snapshot(built) == pack


def test_import_refuses_the_folder_holding_its_questions(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "how many?", "sql": "SELECT 1"}\n', encoding="utf-8")
    (tmp_path / "data").mkdir()
    before = snapshot(tmp_path)
    code, out, err = run("import", str(tmp_path / "q.jsonl"), "--data", str(tmp_path / "data"), "-o", str(tmp_path),
                         "--force")
    assert code == 2 and out == ""
    one_line_error(err, "q.jsonl", "choose another -o")
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- --force


def test_force_refuses_a_folder_that_is_not_a_pack_and_keeps_it(spec: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "README.md").write_text("my earlier work\n", encoding="utf-8")
    (mine / "notes" / "keep.txt").write_bytes(b"\x00precious\n")
    (mine / "manifest.json").write_text('{"tool": {"name": "something else"}}', encoding="utf-8")
    (mine / "questions.jsonl").write_text("", encoding="utf-8")
    before = snapshot(tmp_path)
    code, out, err = run("build", str(spec), "-o", str(mine), "--force", "--jobs", "1")
    assert code == 2 and out == ""
    one_line_error(err, str(mine), "not an evalpack pack", "left it alone")
    assert snapshot(tmp_path) == before


def test_force_replaces_a_real_pack(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "pack"
    assert run("build", str(spec), "-o", str(out), "--jobs", "1")[0] == 0
    code, _, err = run("build", str(spec), "-o", str(out), "--force", "--seed", "500", "--rotations", "1", "--jobs", "1")
    assert code == 0, err
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["seeds"] == [500]
    assert PackLayout(out).rotations() == ["seed_500"]
    complete(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack", "tiny.yaml"]


def test_force_fills_an_empty_folder(spec: Path, tmp_path: Path) -> None:
    (tmp_path / "pack").mkdir()
    assert run("build", str(spec), "-o", str(tmp_path / "pack"), "--force", "--jobs", "1")[0] == 0
    complete(tmp_path / "pack")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack", "tiny.yaml"]


# --------------------------------------------------------------------------- the final swap


def fake_pack(folder: Path, text: str) -> Path:
    """A folder :func:`evalpack.pack.folder.is_pack` takes for a pack."""
    folder.mkdir()
    (folder / "questions.jsonl").write_text(text, encoding="utf-8")
    (folder / "manifest.json").write_text('{"tool": {"name": "evalpack"}}', encoding="utf-8")
    return folder


def test_publish_swaps_in_one_step_over_an_existing_pack(tmp_path: Path, monkeypatch) -> None:
    out = fake_pack(tmp_path / "pack", "old\n")
    staging = pack_folder.staging_dir(out, force=True)
    (staging / "questions.jsonl").write_text("new\n", encoding="utf-8")
    swaps = []
    real = pack_folder._exchange

    def exchange(a: Path, b: Path) -> bool:
        swapped = real(a, b)
        swaps.append(swapped)
        assert swapped and (b / "questions.jsonl").read_text(encoding="utf-8") == "new\n"  # -o is whole at once
        return swapped

    monkeypatch.setattr(pack_folder, "_exchange", exchange)
    pack_folder.publish_dir(staging, out)
    assert swaps == [True]
    assert (out / "questions.jsonl").read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack"]


def test_publish_falls_back_to_two_renames(tmp_path: Path, monkeypatch) -> None:
    out = fake_pack(tmp_path / "pack", "old\n")
    staging = pack_folder.staging_dir(out, force=True)
    (staging / "questions.jsonl").write_text("new\n", encoding="utf-8")
    monkeypatch.setattr(pack_folder, "_exchange", lambda a, b: False)
    pack_folder.publish_dir(staging, out)
    assert (out / "questions.jsonl").read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack"]


HALF_SWAP = """\
import os, sys, time
from pathlib import Path
from evalpack.core import debris
out = Path(sys.argv[1])
old = out.with_name(f".{out.name}.old-{os.getpid()}-0000abcd")
debris.hold(out, key=old)   # what publish_dir does before its two renames
out.rename(old)             # the first of them; the second never comes
print(old, flush=True)
time.sleep(600)
"""


def test_a_crash_between_the_two_renames_is_undone_by_the_next_build(tmp_path: Path) -> None:
    out = fake_pack(tmp_path / "pack", "old\n")
    swapper = subprocess.Popen([sys.executable, "-c", HALF_SWAP, str(out)], stdout=subprocess.PIPE, text=True,
                               cwd=ROOT)
    try:
        old = Path(swapper.stdout.readline().strip())
        assert old.is_dir() and not out.exists()
        assert pack_folder.recover(out) is None, "a live build's swap was undone"
        assert old.is_dir() and not out.exists()
    finally:
        swapper.kill()
        swapper.wait()
    assert pack_folder.recover(out) == out
    assert (out / "questions.jsonl").read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack"]


# --------------------------------------------------------------------------- debris


def test_a_dead_runs_folder_is_swept_and_a_live_ones_is_not(tmp_path: Path) -> None:
    live = debris.owned_dir(tmp_path, debris.SPILL)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead = tmp_path / f"{debris.SPILL}{finished.pid}-abcd1234"
    young = tmp_path / f"{debris.SPILL}{os.getpid()}-abcd1234"  # unlocked, but its pid is alive and it is new
    other = tmp_path / f"spill-{finished.pid}-abcd1234"
    for folder in (dead, young, other):
        folder.mkdir()
    try:
        assert debris.sweep(tmp_path, debris.SPILL_PATTERN) == [dead]
        assert live.is_dir() and young.is_dir() and other.is_dir() and not dead.exists()
    finally:
        debris.remove(live)


LIVE = """\
import sys, time
from pathlib import Path
from evalpack.pack.folder import staging_dir
from evalpack.checks.verification import rotation_connection
staging = staging_dir(Path(sys.argv[1]), False)
with rotation_connection(Path(sys.argv[2])):
    print(staging, flush=True)
    time.sleep(600)
"""


def descendants(pid: int) -> set[tuple[int, str]]:
    """The processes below ``pid`` (pid, start time), from /proc/<pid>/task/*/children."""
    found: set[tuple[int, str]] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids = [int(p) for p in children.read_text().split()]
        except OSError:
            continue
        for child in pids:
            start = started(child)
            if start:
                found |= {(child, start)} | descendants(child)
    return found


def started(pid: int) -> str | None:
    """The start time of a running (not zombie) process, or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@pytest.mark.slow
def test_a_killed_build_leaves_no_process_and_the_next_build_cleans_up(spec: Path, tmp_path: Path) -> None:
    big = yaml.safe_load((ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8"))
    for table in big["tables"].values():
        table["rows"] *= 20  # a few seconds of writing on two workers
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big, sort_keys=False), encoding="utf-8")
    temp, packs, empty = tmp_path / "tmp", tmp_path / "packs", tmp_path / "empty"
    for folder in (temp, packs, empty):
        folder.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    log = (tmp_path / "build.log").open("w")
    killed = subprocess.Popen([sys.executable, "-m", "evalpack.cli", "build", str(tmp_path / "big.yaml"),
                               "-o", str(packs / "big"), "--jobs", "2"], env=env, stdout=log, stderr=log, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        staging: list[Path] = []
        while not (staging and any(p.is_file() for p in staging[0].rglob("*"))):
            assert killed.poll() is None and time.monotonic() < deadline, "the build never started writing"
            time.sleep(0.02)
            staging = list(packs.glob(".big.evalpack-staging-*"))
        workers = descendants(killed.pid)
        os.kill(killed.pid, signal.SIGKILL)
    finally:
        killed.kill()
        killed.wait()
        log.close()
    assert len(workers) >= 2, f"the build was not writing in worker processes: {workers}"

    deadline = time.monotonic() + 10
    while survivors := {(pid, start) for pid, start in workers if started(pid) == start}:
        assert time.monotonic() < deadline, f"processes of the killed build live on: {survivors}"
        time.sleep(0.05)
    [left] = staging
    assert left.is_dir(), "the staging folder is the next build's to clean up"
    dead_spills = set(temp.glob(f"evalpack-spill-{killed.pid}-*"))

    # a run killed while its DuckDB connection was open leaves a spill folder too; a live one keeps its own
    holders = [subprocess.Popen([sys.executable, "-c", LIVE, str(packs / name), str(empty)], env=env,
                                stdout=subprocess.PIPE, text=True, cwd=ROOT) for name in ("dead", "live")]
    try:
        (dead_staging, live_staging) = (Path(h.stdout.readline().strip()) for h in holders)
        dead_spills |= set(temp.glob(f"evalpack-spill-{holders[0].pid}-*"))
        live_spills = set(temp.glob(f"evalpack-spill-{holders[1].pid}-*"))
        assert len(dead_spills) >= 1 and len(live_spills) == 1 and dead_staging.is_dir() and live_staging.is_dir()
        holders[0].kill()
        holders[0].wait()

        done = subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec),
                               "-o", str(packs / "small"), "--jobs", "1"], env=env, capture_output=True, text=True,
                              cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        assert not left.exists() and not dead_staging.exists(), "a dead build's staging folder is left"
        assert not any(p.exists() for p in dead_spills), "a dead run's spill folder is left"
        assert live_staging.is_dir() and all(p.is_dir() for p in live_spills), "a live run's folder was removed"
        assert sorted(p.name for p in packs.iterdir()) == sorted(["small", live_staging.name])
        complete(packs / "small")
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
