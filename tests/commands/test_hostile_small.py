"""Small attacks on the commands that read a pack or replace a folder (issue 50, point 6).

A hostile pack's ids and texts cannot forge lines on a terminal (`evalpack audit`) nor put raw control characters
in the HTML report; `evalpack report` refuses a pack holding a FIFO or a link before opening anything; `--force`
replaces only a folder that is wholly a pack evalpack wrote, and a build replaces the holdout answer key beside it
only when that is wholly a key evalpack wrote; a spec with a huge line gets a short error.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_line_error
from test_build_cli import SPEC, snapshot

from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import HOLDOUT_FILE, holdout_key_beside
from evalpack.pack import folder as pack_folder
from evalpack.pack.holdout import Sealed, write_received_key
from evalpack.pack.report import esc, pack_facts, pack_html

ROOT = Path(__file__).resolve().parents[2]
FORGED = "\nOK all checks passed\x1b[2J"
# what must never reach a terminal or a page raw: C0 and C1 controls (ANSI's ESC and CSI), DEL, bidi overrides
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def run(*argv: str) -> tuple[int, str, str]:
    """``evalpack ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def evalpack(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command in a process of its own; ``timeout`` only guards against a hang."""
    return subprocess.run([sys.executable, "-m", "evalpack.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)




@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A real pack, built once."""
    where = tmp_path_factory.mktemp("built")
    (where / "tiny.yaml").write_text(SPEC, encoding="utf-8")
    code, _, err = run("build", str(where / "tiny.yaml"), "-o", str(where / "pack"), "--jobs", "1")
    assert code == 0, err
    return where / "pack"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.fixture
def pack(built: Path, tmp_path: Path) -> Path:
    """A copy of the built pack that a test may change."""
    return Path(shutil.copytree(built, tmp_path / "pack"))


def hostile(pack: Path) -> Path:
    """``pack`` with its first question's id and text holding a forged line and a screen-clearing escape."""
    path = pack / "questions.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["id"] = "q" + FORGED + "\u202e"
    first["question"] = "How many?" + FORGED + "\x9b2J"
    lines[0] = json.dumps(first)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pack


# --------------------------------------------------------------------------- 1. control characters


def test_audit_shows_a_hostile_id_and_text_as_escapes(pack: Path) -> None:
    hostile(pack)
    done = evalpack("audit", str(pack))
    assert done.returncode == 1, done.stderr  # the edited text no longer matches its seal
    assert not RAW_CONTROL.search(done.stdout.replace("\n", "")), done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"audit {pack}: ") and all(line.startswith("  ") for line in lines[1:]), done.stdout
    assert not any(line.lstrip().startswith("OK") for line in lines)
    assert "q\\x0aOK all checks passed\\x1b[2J\\u202e seal:" in done.stdout


def test_the_html_report_shows_a_hostile_id_and_text_as_escapes(pack: Path, tmp_path: Path) -> None:
    hostile(pack)
    page_path = tmp_path / "pack.report.html"
    done = evalpack("report", str(pack), "--html", str(page_path))
    assert done.returncode == 0, done.stderr
    assert not RAW_CONTROL.search(done.stdout.replace("\n", ""))
    page = page_path.read_text(encoding="utf-8")
    # the page's own line breaks are the only control characters in it, and none comes from the pack
    assert not RAW_CONTROL.search(page.replace("\n", "")), "a raw control character in the page"
    assert "\nOK all checks passed" not in page
    assert "q\\x0aOK all checks passed\\x1b[2J\\u202e" in page


def test_every_text_of_the_page_is_escaped(built: Path) -> None:
    finding = {"question": "q" + FORGED, "kind": "drift" + FORGED, "rotation": "seed_21\x07",
               "message": "<b>x</b>" + FORGED, "action": "\x85do"}
    page = pack_html(pack_facts(built, findings=[finding], attestation={"status": "x\x1b", "files": 0,
                                                                         "message": "m\x00"}))
    assert not RAW_CONTROL.search(page.replace("\n", "")) and "<b>x</b>" not in page
    assert esc("a\nb\x1b<") == "a\\x0ab\\x1b&lt;"
    assert esc("plain 'text' & <tags>") == "plain &#x27;text&#x27; &amp; &lt;tags&gt;"  # as before


# --------------------------------------------------------------------------- 2. `evalpack report` and special files


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_report_refuses_a_fifo_promptly(pack: Path, tmp_path: Path) -> None:
    (pack / "manifest.json").unlink()
    os.mkfifo(pack / "manifest.json")  # a reader that opens it waits for a writer forever
    page = tmp_path / "pack.report.html"
    done = evalpack("report", str(pack), "--html", str(page), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    one_line_error(done.stderr, "manifest.json", "not a regular file")
    assert not page.exists()


def test_report_refuses_a_symlinked_questions_file(pack: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    shutil.move(pack / "questions.jsonl", outside)
    (pack / "questions.jsonl").symlink_to(outside)
    page = tmp_path / "pack.report.html"
    code, out, err = run("report", str(pack), "--html", str(page))
    assert code == 2 and out == ""
    one_line_error(err, "questions.jsonl", "symlink")
    assert not page.exists()


# --------------------------------------------------------------------------- 3. --force


def test_force_refuses_a_fake_pack_holding_a_user_file(spec: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "questions.jsonl").write_text("", encoding="utf-8")
    (mine / "manifest.json").write_text('{"tool": {"name": "evalpack"}}', encoding="utf-8")
    (mine / "notes.txt").write_bytes(b"\x00precious\n")
    before = snapshot(tmp_path)
    code, out, err = run("build", str(spec), "-o", str(mine), "--force", "--jobs", "1")
    assert code == 2 and out == ""
    one_line_error(err, str(mine / "notes.txt"), "--force")
    assert snapshot(tmp_path) == before


def test_force_refuses_a_built_pack_with_a_file_the_user_added(spec: Path, pack: Path, tmp_path: Path) -> None:
    (pack / "rotations" / "seed_21" / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = snapshot(tmp_path)
    code, out, err = run("build", str(spec), "-o", str(pack), "--force", "--jobs", "1")
    assert code == 2 and out == ""
    one_line_error(err, str(pack / "rotations" / "seed_21" / "notes.txt"), "--force")
    assert snapshot(tmp_path) == before


def test_force_refuses_a_pack_holding_a_link(spec: Path, pack: Path, tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("mine\n", encoding="utf-8")
    (pack / "link.txt").symlink_to(tmp_path / "target.txt")
    before = snapshot(tmp_path)
    code, _, err = run("build", str(spec), "-o", str(pack), "--force", "--jobs", "1")
    assert code == 2
    one_line_error(err, str(pack / "link.txt"))
    assert snapshot(tmp_path) == before


def test_force_replaces_a_genuine_pack(spec: Path, pack: Path, tmp_path: Path) -> None:
    code, _, err = run("build", str(spec), "-o", str(pack), "--force", "--seed", "500", "--rotations", "1",
                       "--jobs", "1")
    assert code == 0, err
    assert json.loads((pack / "manifest.json").read_text(encoding="utf-8"))["seeds"] == [500]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack", "tiny.yaml"]


def test_a_file_added_during_the_build_is_not_deleted(pack: Path) -> None:
    staging = pack_folder.staging_dir(pack, force=True)
    (staging / "questions.jsonl").write_text("new\n", encoding="utf-8")
    (pack / "notes.txt").write_text("written while the build ran\n", encoding="utf-8")
    try:
        with pytest.raises(EvalpackError, match="notes.txt"):
            pack_folder.publish_dir(staging, pack)
    finally:
        pack_folder.discard(staging)
    assert (pack / "notes.txt").read_text(encoding="utf-8") == "written while the build ran\n"
    assert (pack / "questions.jsonl").read_text(encoding="utf-8") != "new\n"


# --------------------------------------------------------------------------- 3b. --force and the answer key beside

HELD_SPEC = SPEC.replace("rotations: 2\n", "rotations: 2\nholdout: 0.2\n")


@pytest.fixture(scope="module")
def built_held(tmp_path_factory) -> Path:
    """A real pack with a holdout, built once: its answer key (``pack.holdout-key``) is beside it."""
    where = tmp_path_factory.mktemp("built_held")
    (where / "tiny.yaml").write_text(HELD_SPEC, encoding="utf-8")
    code, _, err = run("build", str(where / "tiny.yaml"), "-o", str(where / "pack"), "--jobs", "1")
    assert code == 0, err
    assert sorted(p.name for p in holdout_key_beside(where / "pack").iterdir()) == ["README.md", HOLDOUT_FILE,
                                                                                   "tiny.yaml"]
    return where / "pack"


@pytest.fixture
def held(built_held: Path, tmp_path: Path) -> Path:
    """A copy of the pack with a holdout and of its answer key, beside its spec (``tiny.yaml``), to change."""
    (tmp_path / "tiny.yaml").write_text(HELD_SPEC, encoding="utf-8")
    shutil.copytree(holdout_key_beside(built_held), holdout_key_beside(tmp_path / "pack"))
    return Path(shutil.copytree(built_held, tmp_path / "pack"))


def add_entry(key: Path, kind: str, tmp_path: Path) -> Path:
    """Something evalpack never writes into an answer key, of ``kind``, put into ``key``."""
    entry = key / {"file": "my_notes.md", "link": "link.md", "folder": "drafts", "fifo": "pipe"}[kind]
    if kind == "file":
        entry.write_text("precious\n", encoding="utf-8")
    elif kind == "link":
        (tmp_path / "target.md").write_text("mine\n", encoding="utf-8")
        entry.symlink_to(tmp_path / "target.md")
    elif kind == "folder":
        entry.mkdir()
        (entry / "draft.md").write_text("mine\n", encoding="utf-8")
    else:
        os.mkfifo(entry)
    return entry


@pytest.mark.parametrize("kind", ["file", "link", "folder", "fifo"])
def test_force_refuses_an_answer_key_holding_something_the_user_added(kind: str, held: Path, tmp_path: Path) -> None:
    entry = add_entry(holdout_key_beside(held), kind, tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run("build", str(tmp_path / "tiny.yaml"), "-o", str(held), "--force", "--jobs", "1")
    assert code == 2 and out == ""
    one_line_error(err, str(entry), "answer key", "move")
    assert snapshot(tmp_path) == before  # nothing written, nothing deleted: no staging folder either


def test_a_key_left_beside_a_removed_pack_keeps_a_file_the_user_added(held: Path, tmp_path: Path) -> None:
    shutil.rmtree(held)  # the key stays; a build to the same place would replace it, even without --force
    entry = add_entry(holdout_key_beside(held), "file", tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run("build", str(tmp_path / "tiny.yaml"), "-o", str(held), "--jobs", "1")
    assert code == 2 and out == ""
    one_line_error(err, str(entry), "answer key")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("pack_there", [True, False])
def test_force_replaces_a_genuine_answer_key(pack_there: bool, held: Path, tmp_path: Path) -> None:
    key = holdout_key_beside(held)
    (key / HOLDOUT_FILE).write_text("stale\n", encoding="utf-8")  # replaced, as any file evalpack writes there
    if not pack_there:
        shutil.rmtree(held)
    code, _, err = run("build", str(tmp_path / "tiny.yaml"), "-o", str(held), "--force", "--jobs", "1")
    assert code == 0, err
    assert sorted(p.name for p in key.iterdir()) == ["README.md", HOLDOUT_FILE, "tiny.yaml"]
    assert (key / HOLDOUT_FILE).read_text(encoding="utf-8") != "stale\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack", key.name, "tiny.yaml"]


def test_an_imported_packs_answer_key_is_replaceable_until_the_user_adds_a_file(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    key = write_received_key(out, "imported", "questions.csv", b"id,question\n", Sealed((), ({"id": "q1"},)))
    assert key == holdout_key_beside(out) and sorted(p.name for p in key.iterdir()) == [
        "README.md", HOLDOUT_FILE, "questions.csv"]
    pack_folder.check_output(out)  # what the import writes there, and nothing else: replaceable
    (key / "notes.txt").write_text("mine\n", encoding="utf-8")
    with pytest.raises(EvalpackError, match="notes.txt"):
        pack_folder.check_output(out)


def test_a_file_added_to_the_answer_key_during_the_build_is_not_deleted(held: Path) -> None:
    key = holdout_key_beside(held)
    staging = pack_folder.staging_dir(held, force=True)
    (staging / "questions.jsonl").write_text("new\n", encoding="utf-8")
    (key / "notes.txt").write_text("written while the build ran\n", encoding="utf-8")
    try:
        with pytest.raises(EvalpackError, match="notes.txt"):
            pack_folder.publish_dir(staging, held)
    finally:
        pack_folder.discard(staging)
    assert (key / "notes.txt").read_text(encoding="utf-8") == "written while the build ran\n"
    assert (key / HOLDOUT_FILE).is_file() and (held / "questions.jsonl").read_text(encoding="utf-8") != "new\n"



def test_a_file_added_to_the_answer_key_after_its_last_check_is_not_deleted(held: Path, monkeypatch) -> None:
    """Between the check before the pack's swap and the key's replacement: only the entries checked are removed."""
    key = holdout_key_beside(held)
    staging = pack_folder.staging_dir(held, force=True)
    real = pack_folder._exchange

    def exchange(a: Path, b: Path) -> bool:
        (key / "late.txt").write_text("written during the swap\n", encoding="utf-8")
        return real(a, b)

    monkeypatch.setattr(pack_folder, "_exchange", exchange)
    try:
        with pytest.raises(EvalpackError, match="late.txt"):
            pack_folder.publish_dir(staging, held)
    finally:
        pack_folder.discard(staging)
    assert (key / "late.txt").read_text(encoding="utf-8") == "written during the swap\n"

# --------------------------------------------------------------------------- 4. a spec with a huge line

BIG = "k" * 700_000
HUGE_LINES = {
    "unknown key": (f"? {BIG}\n: 1\n", 22),
    "unknown tag": (f"extra: !{BIG} 1\n", 22),
    "undefined alias": (f"extra: *{BIG}\n", 22),
    "column type": None,
    "spaced value": (f"? {'ab ' * 240_000}\n: 1\n", 22),
}


@pytest.mark.parametrize("case", sorted(HUGE_LINES))
def test_a_spec_with_a_huge_line_gets_a_short_error(case: str, tmp_path: Path) -> None:
    if HUGE_LINES[case] is None:
        text, line = SPEC.replace("amount: {type: float", f"amount: {{type: {BIG}"), 15
    else:
        extra, line = HUGE_LINES[case]
        text = SPEC + extra
    path = tmp_path / "huge.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run("build", str(path), "-o", str(tmp_path / "pack"))
    assert code == 2 and out == ""
    message = one_line_error(err, f"{path}:{line}:")
    assert len(err.encode("utf-8")) < 1024, (len(err), err[:300])
    assert "..." in message
    assert not (tmp_path / "pack").exists()
