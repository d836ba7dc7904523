"""A pack downloaded from the Hub verifies as it lands (issue 18, build item 5).

The pack's own files are uploaded as they are to the fake Hub of tests/fakehub.py and tagged, then
downloaded with the real ``huggingface_hub.snapshot_download`` in both of its forms: into the cache
(``datasets--owner--name/snapshots/<commit>/``, every file a symlink to ``../../blobs/<hash>``) and into
a ``local_dir`` (plain files, plus the client's ``.cache/huggingface/`` and the repo's ``.gitattributes``).
``evalpack verify``, ``evalpack score`` and the pack's own ``verify.py`` accept both, and still refuse a
link that leads anywhere but the snapshot's own blobs, a link loop, a changed blob and any other file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakehub import FakeHub, client_env

from evalpack.cli import main
from evalpack.core.scoring import ATTESTATION, load_questions
from evalpack.pack.attest import now_utc, write_attestation
from evalpack.spec.reader import load_spec

ROOT = Path(__file__).resolve().parents[2]
REPO = "tester/downloaded-pack"
TAG = "v1.0.0"
TABLE = "rotations/seed_42/tables/orders.parquet"

UPLOAD = """
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo(sys.argv[1], repo_type="dataset")
api.upload_folder(folder_path=sys.argv[2], repo_id=sys.argv[1], repo_type="dataset", commit_message="the pack")
api.create_tag(sys.argv[1], tag=sys.argv[3], repo_type="dataset")
"""

DOWNLOAD = """
import sys
from huggingface_hub import snapshot_download
repo, tag, form, where = sys.argv[1:]
place = {"cache_dir": where} if form == "cache" else {"local_dir": where}
print(snapshot_download(repo, repo_type="dataset", revision=tag, **place))
"""


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def public_key(work) -> Path:
    assert main(["keygen", str(work / "keys")]) == 0
    return work / "keys" / "evalpack.pub"


@pytest.fixture(scope="module")
def signed(work, retail_pack, public_key) -> Path:
    """The session's retail pack, its attestation signed with the test key."""
    pack = Path(shutil.copytree(retail_pack, work / "signed"))
    write_attestation(pack, load_spec(ROOT / "schemas" / "retail.yaml", rotations=3), started=now_utc(),
                      finished=now_utc(), signing_key=public_key.with_name("evalpack.key"))
    return pack


@pytest.fixture(scope="module")
def candidates(work, signed) -> Path:
    """Every gold SQL as a candidate, as one JSON object id -> SQL (null: a decline, for the questions to decline):
    an intact pack scores all correct (exit 0)."""
    path = work / "gold.json"
    path.write_text(json.dumps({q["id"]: q["gold_sql"] for q in load_questions(signed)
                                if q.get("gold_sql") or q.get("answerable") is False}))
    return path


def hf(env: dict, script: str, *args: str) -> str:
    run = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.strip()


@pytest.fixture(scope="module")
def downloads(work, signed) -> dict[str, Path]:
    """The tagged pack downloaded both ways (read-only: copy before changing anything); the fake Hub
    runs only for the upload and the downloads."""
    hub = FakeHub()
    hub.start()
    try:
        env = client_env(hub, work / "hf_home")
        hf(env, UPLOAD, REPO, str(signed), TAG)
        out = {form: Path(hf(env, DOWNLOAD, REPO, TAG, form, str(work / form))) for form in ("cache", "local_dir")}
    finally:
        hub.stop()
    assert out["cache"].parent.name == "snapshots" and out["cache"].parent.parent.name == "datasets--tester--downloaded-pack"
    assert all((out["cache"] / name).is_symlink() for name in ("questions.jsonl", "verify.py", ATTESTATION, TABLE))
    assert (out["local_dir"] / ".cache" / "huggingface").is_dir() and not (out["local_dir"] / "verify.py").is_symlink()
    for folder in out.values():
        assert (folder / ".gitattributes").exists()  # the Hub's, not the pack's
    return out


def cache_copy(downloads: dict[str, Path], tmp_path: Path) -> Path:
    """A private copy of the whole cache folder (links kept as links); the snapshot inside it."""
    cache = downloads["cache"].parents[2]
    copy = Path(shutil.copytree(cache, tmp_path / "cache", symlinks=True))
    return copy / downloads["cache"].relative_to(cache)


def flipped(path: Path) -> bytes:
    """The bytes of ``path`` with one bit of the middle byte flipped (the file stays readable)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    return bytes(data)


def local_copy(downloads: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(downloads["local_dir"], tmp_path / "local", symlinks=True))


# --------------------------------------------------------------------------- the three commands


def run_all(pack: Path, public_key: Path, candidates: Path, capsys, cwd: Path) -> dict[str, tuple[int, str]]:
    """(exit code, everything printed) of evalpack verify, evalpack score, verify.py and verify.py --candidates."""
    out: dict[str, tuple[int, str]] = {}
    capsys.readouterr()
    rc = main(["verify", str(pack), "--public-key", str(public_key)])
    printed = capsys.readouterr()
    out["evalpack verify"] = (rc, printed.out + printed.err)
    rc = main(["score", str(pack), "--candidates", str(candidates), "--public-key", str(public_key)])
    printed = capsys.readouterr()
    out["evalpack score"] = (rc, printed.out + printed.err)
    for name, extra in (("verify.py", []), ("verify.py --candidates", ["--candidates", str(candidates)])):
        run = subprocess.run([sys.executable, "-I", str(pack / "verify.py"), "--public-key", str(public_key), *extra],
                             cwd=cwd, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in run.stderr, run.stderr
        out[name] = (run.returncode, run.stdout + run.stderr)
    return out


def refused(got: dict[str, tuple[int, str]], *named: str) -> None:
    """Every command refuses the pack (verify 1, the others 2) and names each of ``named``."""
    assert {c: rc for c, (rc, _) in got.items()} == {"evalpack verify": 1, "evalpack score": 2, "verify.py": 2,
                                                      "verify.py --candidates": 2}, got
    for command, (_, text) in got.items():
        assert "Traceback" not in text, (command, text)
        for name in named:
            assert name in text, (command, name, text)


# --------------------------------------------------------------------------- both download forms verify


@pytest.mark.parametrize("form", ["cache", "local_dir"])
def test_both_download_forms_verify_and_score(form, downloads, public_key, candidates, tmp_path, capsys):
    pack = downloads[form]
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    assert {c: rc for c, (rc, _) in got.items()} == dict.fromkeys(got, 0), got
    for command, (_, text) in got.items():
        assert "FAIL" not in text and "error" not in text, (command, text)
    verify = got["evalpack verify"][1]
    assert "OK signature: ed25519 key" in verify and "none missing, none extra" in verify
    ignored = ".cache/huggingface/, .gitattributes" if form == "local_dir" else ".gitattributes"
    assert f"IGNORED (the Hub's own files of this download, not pack files): {ignored}\n" in verify
    assert "integrity: 21 files match attestation.intoto.json; OK signature" in got["verify.py"][1]  # dictionary.json and .md too
    assert re.search(r"\n(\d+)/\1 questions verify on every rotation\n", got["verify.py"][1]), got["verify.py"]
    for command in ("verify.py --candidates", "evalpack score"):
        assert re.search(r"\n(\d+)/\1 correct, 0 wrong, 0 declined, 0 not answered \(accuracy 100.0%",
                         got[command][1]), got[command]


def test_verify_py_in_a_snapshot_runs_from_any_folder_by_a_relative_path(downloads, public_key):
    """verify.py finds its pack through the snapshot's link, not the blob it resolves to."""
    pack = downloads["cache"]
    cache = pack.parents[2]
    run = subprocess.run([sys.executable, "-I", str(pack.relative_to(cache) / "verify.py"), "--public-key",
                          str(public_key)], cwd=cache, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "blobs" not in run.stdout + run.stderr


# --------------------------------------------------------------------------- and nothing else is let through


def test_a_link_out_of_the_cache_is_refused_even_to_identical_bytes(downloads, public_key, candidates, tmp_path,
                                                                      capsys):
    pack = cache_copy(downloads, tmp_path)
    outside = tmp_path / "elsewhere" / "questions.jsonl"
    outside.parent.mkdir()
    outside.write_bytes((pack / "questions.jsonl").read_bytes())
    (pack / "questions.jsonl").unlink()
    (pack / "questions.jsonl").symlink_to(outside)
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    refused(got, "questions.jsonl: not a regular file: a symlink to", str(outside))
    assert "SKIP gold SQL" in got["evalpack verify"][1]


def test_a_link_into_another_repos_blobs_or_a_tampered_copy_is_refused(downloads, public_key, candidates, tmp_path,
                                                                         capsys):
    pack = cache_copy(downloads, tmp_path)
    cache = pack.parents[2]
    other = cache / "datasets--someone--else" / "blobs"
    other.mkdir(parents=True)
    (other / "same").write_bytes((pack / "manifest.json").read_bytes())
    (pack / "manifest.json").unlink()
    (pack / "manifest.json").symlink_to(os.path.relpath(other / "same", pack))
    tampered = tmp_path / "tampered.parquet"
    tampered.write_bytes(flipped(pack / TABLE))
    (pack / TABLE).unlink()
    (pack / TABLE).symlink_to(tampered)
    refused(run_all(pack, public_key, candidates, capsys, cwd=tmp_path), "manifest.json: not a regular file", TABLE)


def test_a_changed_blob_fails_its_hash(downloads, public_key, candidates, tmp_path, capsys):
    pack = cache_copy(downloads, tmp_path)
    blob = (pack / TABLE).resolve()
    assert blob.parent.name == "blobs"
    blob.chmod(0o644)
    blob.write_bytes(flipped(blob))
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    refused(got, f"{TABLE}: sha256")
    assert "differs from the attested" in got["evalpack verify"][1]


def test_a_link_loop_is_one_line_never_followed(downloads, public_key, candidates, tmp_path, capsys):
    pack = cache_copy(downloads, tmp_path)
    (pack / "manifest.json").unlink()
    (pack / "manifest.json").symlink_to(tmp_path / "loop.json")
    (tmp_path / "loop.json").symlink_to(pack / "manifest.json")
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    refused(got, "manifest.json: not a regular file: a symlink that does not resolve")
    for command, (_, text) in got.items():
        assert sum("manifest.json" in line for line in text.splitlines()) == 1, (command, text)
    assert "FAIL manifest.json: not a regular file: a symlink that does not resolve (Too many levels of symbolic " \
           "links: a loop, or a link to nothing); it was not followed\n" in got["evalpack verify"][1]


def test_only_the_hubs_own_files_are_ignored(downloads, public_key, candidates, tmp_path, capsys):
    """In a local_dir download, .cache/huggingface/ may hold anything; any other file, even in .cache/ or
    named .gitattributes below the root, is an unattested extra."""
    pack = local_copy(downloads, tmp_path)
    (pack / ".cache" / "huggingface" / "download" / "more.metadata").write_text("the client's own\n")
    (pack / ".cache" / "notes.txt").write_text("not the Hub's\n")
    (pack / "rotations" / ".gitattributes").write_text("* -text\n")
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    refused(got, ".cache/notes.txt: in the pack but not in attestation.intoto.json",
            "rotations/.gitattributes: in the pack but not in")
    assert ".cache/huggingface" not in got["evalpack verify"][1].replace(
        "IGNORED (the Hub's own files of this download, not pack files): .cache/huggingface/", "")


def test_a_pack_that_is_no_download_ignores_nothing(signed, public_key, candidates, tmp_path, capsys):
    """Outside a Hub download, a .gitattributes is an extra file like any other, and a link is refused
    even into a folder named blobs."""
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    (pack / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    shutil.move(pack / "certificate.json", blobs / "certificate.json")
    (pack / "certificate.json").symlink_to(blobs / "certificate.json")
    got = run_all(pack, public_key, candidates, capsys, cwd=tmp_path)
    refused(got, ".gitattributes: in the pack but not in",
            "certificate.json: not a regular file (symlink or special file)")
