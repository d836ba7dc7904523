"""One integrity check (issue 15): `evalpack verify`, `evalpack score` and the pack's own `verify.py` give
the same verdict on the same tampered packs, and every input error leaves the CLI as one line, exit 2.

Each case tampers with a private copy of one signed pack and runs all three commands with the signer's
public key. A verdict is "pass" (verify 0; score 0 or 1; verify.py 0 or 1) or "fail" (verify 1; score 2;
verify.py 2), and a failure must name what failed in every command's output.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import refused_in_one_line
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from test_attest import TINY

from evalpack.build import build_pack
from evalpack.cli import main
from evalpack.core.scoring import ATTESTATION, load_questions
from evalpack.pack.attest import envelope, envelope_bytes, load_signer, now_utc, write_attestation
from evalpack.spec.reader import load_spec

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder with test_attest's tiny spec in it (two rotations, seeds 7 and 8)."""
    folder = tmp_path_factory.mktemp("integrity")
    (folder / "tiny.yaml").write_text(TINY, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def spec_path(work) -> Path:
    return work / "tiny.yaml"


@pytest.fixture(scope="module")
def keys(work) -> dict[str, Path]:
    """Key folders written by `evalpack keygen`: the signer's (ed25519), another one, and an ECDSA P-256 one."""
    out = {}
    for name, algorithm in (("ed25519", "ed25519"), ("other", "ed25519"), ("ecdsa", "ecdsa-p256")):
        assert main(["keygen", str(work / name), "--algorithm", algorithm]) == 0
        out[name] = work / name
    return out


@pytest.fixture(scope="module")
def signed(work, spec_path, keys) -> Path:
    out = work / "signed"
    build_pack(spec_path, out, signing_key=keys["ed25519"] / "evalpack.key")
    return out


@pytest.fixture(scope="module")
def candidates(work, signed) -> Path:
    """Every gold SQL as a candidate: an intact pack scores 0 (all correct)."""
    path = work / "gold.jsonl"
    path.write_text("".join(json.dumps({"id": q["id"], "sql": q["gold_sql"]}) + "\n" for q in load_questions(signed)))
    return path


# --------------------------------------------------------------------------- the three commands


def verdicts(pack: Path, public_key: Path, candidates: Path, capsys) -> dict[str, tuple[str, str]]:
    """(pass | fail, everything printed) per command."""
    out: dict[str, tuple[str, str]] = {}
    capsys.readouterr()
    rc = main(["verify", str(pack), "--public-key", str(public_key)])
    printed = capsys.readouterr()
    assert rc in (0, 1), printed
    out["evalpack verify"] = ("pass" if rc == 0 else "fail", printed.out + printed.err)

    rc = main(["score", str(pack), "--candidates", str(candidates), "--public-key", str(public_key)])
    printed = capsys.readouterr()
    out["evalpack score"] = ("fail" if rc == 2 else "pass", printed.out + printed.err)

    run = subprocess.run([sys.executable, "-I", str(pack / "verify.py"), "--public-key", str(public_key)],
                         cwd=pack.parent, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in run.stderr, run.stderr
    out["verify.py"] = ("fail" if run.returncode == 2 else "pass", run.stdout + run.stderr)
    return out


def statement(pack: Path) -> dict:
    return json.loads(base64.b64decode(json.loads((pack / ATTESTATION).read_bytes())["payload"]))


def resign(pack: Path, key: Path, edit: Callable[[dict], None]) -> None:
    """Edit the statement and sign it again with ``key`` (a valid signature over a bad statement)."""
    stmt = statement(pack)
    edit(stmt)
    (pack / ATTESTATION).write_bytes(envelope_bytes(envelope(stmt, load_signer(key / "evalpack.key"))))


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _edited(pack, keys):
    flip_byte(pack / "rotations" / "seed_7" / "tables" / "orders.parquet")


def _added(pack, keys):
    (pack / "notes.txt").write_text("hello\n")


def _removed(pack, keys):
    (pack / "rotations" / "seed_8" / "tables" / "orders.csv").unlink()


def _symlink(pack, keys):
    (pack / "link.json").symlink_to(pack / "manifest.json")


def _predicate_type(pack, keys):
    resign(pack, keys["ed25519"], lambda s: s.update(predicateType="https://example.com/other/v1"))


def _nul_name(pack, keys):
    def edit(stmt):
        stmt["subject"][0]["name"] += "\x00.txt"
    resign(pack, keys["ed25519"], edit)


def _attestation_as_subject(pack, keys):
    resign(pack, keys["ed25519"], lambda s: s["subject"].append({"name": ATTESTATION, "digest": {"sha256": "0" * 64}}))


def _uppercase_digest(pack, keys):
    def edit(stmt):
        stmt["subject"][0]["digest"]["sha256"] = stmt["subject"][0]["digest"]["sha256"].upper()
    resign(pack, keys["ed25519"], edit)


def _other_key(pack, keys):
    resign(pack, keys["other"], lambda s: None)


def _unsigned(pack, keys):
    (pack / ATTESTATION).write_bytes(envelope_bytes(envelope(statement(pack))))


def _missing(pack, keys):
    (pack / ATTESTATION).unlink()


def _urlsafe_payload(pack, keys):
    env = json.loads((pack / ATTESTATION).read_bytes())
    payload = base64.b64decode(env["payload"])
    env["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")  # DSSE allows either alphabet
    (pack / ATTESTATION).write_text(json.dumps(env))


CASES = {
    # name: (tamper, verdict, what every command's output must name)
    "intact": (lambda pack, keys: None, "pass", None),
    "urlsafe payload": (_urlsafe_payload, "pass", None),
    "file edited": (_edited, "fail", "rotations/seed_7/tables/orders.parquet"),
    "file added": (_added, "fail", "notes.txt"),
    "file removed": (_removed, "fail", "rotations/seed_8/tables/orders.csv"),
    "symlink": (_symlink, "fail", "link.json"),
    "predicateType changed": (_predicate_type, "fail", "predicateType is 'https://example.com/other/v1'"),
    "NUL in a name": (_nul_name, "fail", "is not a relative POSIX path inside the pack"),
    "attestation as a subject": (_attestation_as_subject, "fail", "is not a relative POSIX path inside the pack"),
    "uppercase digest": (_uppercase_digest, "fail", "lowercase hex sha256"),
    "signed by another key": (_other_key, "fail", "the signature does not verify"),
    "unsigned": (_unsigned, "fail", "UNSIGNED, but --public-key"),
    "attestation missing": (_missing, "fail", "missing, so nothing in this pack is pinned"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_three_commands_give_the_same_verdict(case, signed, keys, candidates, tmp_path, capsys):
    tamper, expected, named = CASES[case]
    pack = Path(shutil.copytree(signed, tmp_path / "pack", symlinks=True))
    tamper(pack, keys)
    got = verdicts(pack, keys["ed25519"] / "evalpack.pub", candidates, capsys)
    assert {command: verdict for command, (verdict, _) in got.items()} == dict.fromkeys(got, expected), got
    for command, (_, text) in got.items():
        if named:
            assert named in text, (command, text)
        else:
            assert "FAIL" not in text and "error" not in text, (command, text)


def test_ecdsa_der_signatures_verify_everywhere_and_raw_ones_nowhere(signed, spec_path, keys, candidates, tmp_path,
                                                                      capsys):
    """Our signer (securesystemslib's CryptoSigner with RFC 6979 nonces) writes DER; that verifies in all three.

    The same (r, s) as raw r||s bytes is refused by all three: one encoding per signature, the one
    securesystemslib writes and verifies."""
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    write_attestation(pack, load_spec(spec_path), started=now_utc(), finished=now_utc(),
                      signing_key=keys["ecdsa"] / "evalpack.key")
    public = keys["ecdsa"] / "evalpack.pub"
    got = verdicts(pack, public, candidates, capsys)
    assert {c: v for c, (v, _) in got.items()} == dict.fromkeys(got, "pass"), got
    assert "OK signature: ecdsa-p256 key" in got["evalpack verify"][1]

    env = json.loads((pack / ATTESTATION).read_bytes())
    r, s = decode_dss_signature(base64.b64decode(env["signatures"][0]["sig"]))
    env["signatures"][0]["sig"] = base64.b64encode(r.to_bytes(32, "big") + s.to_bytes(32, "big")).decode()
    (pack / ATTESTATION).write_text(json.dumps(env))
    got = verdicts(pack, public, candidates, capsys)
    assert {c: v for c, (v, _) in got.items()} == dict.fromkeys(got, "fail"), got
    assert all("the signature does not verify" in text for _, text in got.values()), got


def test_ed25519_signatures_from_our_signer_verify_everywhere(signed, keys, candidates, capsys):
    got = verdicts(signed, keys["ed25519"] / "evalpack.pub", candidates, capsys)
    assert {c: v for c, (v, _) in got.items()} == dict.fromkeys(got, "pass"), got
    assert "OK signature: ed25519 key" in got["evalpack verify"][1]
    assert "OK signature: ed25519 key" in got["verify.py"][1]


def test_there_is_one_checker():
    """attest.py reports the scorer's check; it has no check of its own to drift."""
    text = (ROOT / "evalpack" / "pack" / "attest.py").read_text()
    for name in ("def _check_signature", "def _check_statement", "def _check_files", "def _safe_name",
                 "def scan_pack", "env.verify(", "predicateType !=", "json.loads(payload"):
        assert name not in text, name
    assert "inspect_integrity(" in text


# --------------------------------------------------------------------------- input errors: one line, exit 2


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EVALPACK_SIGNING_KEY"}
    return subprocess.run([sys.executable, "-m", "evalpack.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)




def _rewrite_questions(pack: Path, edit: Callable[[list[dict]], None]) -> None:
    path = pack / "questions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    edit(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_audit_of_a_broken_pack_is_one_line_exit_2(signed, tmp_path):
    # a rotated answer that lacks a rotation: the scorer's InputError, once a traceback
    pack = Path(shutil.copytree(signed, tmp_path / "rotated"))
    _rewrite_questions(pack, lambda rs: rs[0].update(expected_answer={"seed_7": rs[0]["expected_answer"]}))
    refused_in_one_line(cli("audit", str(pack), cwd=tmp_path), load_questions(pack)[0]["id"], "seed_8")
    # a malformed line of questions.jsonl
    pack = Path(shutil.copytree(signed, tmp_path / "malformed"))
    with open(pack / "questions.jsonl", "a") as handle:
        handle.write("{not json\n")
    refused_in_one_line(cli("audit", str(pack), cwd=tmp_path), "questions.jsonl")
    # a file where the pack folder should be
    (tmp_path / "file.txt").write_text("x")
    refused_in_one_line(cli("audit", "file.txt", cwd=tmp_path), "file.txt", "not a pack folder")


def test_a_file_in_the_output_path_is_one_line_exit_2(spec_path, signed, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    refused_in_one_line(cli("build", str(spec_path), "-o", "file.txt/pack", cwd=tmp_path), "file.txt")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How many orders?", "gold_sql": "SELECT count(*) FROM orders"}) + "\n")
    refused_in_one_line(cli("import", str(questions), "--data", str(signed / "rotations" / "seed_7" / "tables"),
                       "-o", "file.txt/pack", cwd=tmp_path), "file.txt")


def test_bad_inputs_to_score_verify_and_keygen_are_one_line_exit_2(signed, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "c.jsonl").write_text('{"id": "q001", "sql": "SELECT 1"}\n')
    refused_in_one_line(cli("verify", "file.txt", cwd=tmp_path), "file.txt")
    refused_in_one_line(cli("verify", str(signed), "--public-key", "nope.pub", cwd=tmp_path), "nope.pub")
    refused_in_one_line(cli("verify", str(signed), "--public-key", "file.txt", cwd=tmp_path), "file.txt",
                   "not a PEM public key")
    refused_in_one_line(cli("score", str(signed), "--candidates", "c.jsonl", "--public-key", "nope.pub", cwd=tmp_path),
                   "nope.pub")
    refused_in_one_line(cli("keygen", "file.txt/keys", cwd=tmp_path), "file.txt")


def test_damaged_pack_files_and_bad_numbers_never_give_a_traceback(spec_path, signed, tmp_path):
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    (pack / "certificate.json").write_text("[1]\n")
    run = cli("publish", str(pack), "--repo", "tester/x", "--dry-run", cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "certificate.json: all_match is not true" in run.stderr and "nothing was sent" in run.stderr
    for args in (["build", str(spec_path), "-o", "out", "--seed", "-5"],
                 ["score", str(signed), "--candidates", "c.jsonl", "--timeout", "0"]):
        run = cli(*args, cwd=tmp_path)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        assert run.stderr.strip().splitlines()[-1].startswith("evalpack: error: --"), run.stderr


def test_argument_mistakes_of_every_command_and_verify_py_are_one_line_exit_2(signed, tmp_path):
    for args, named in ((["nosuch"], "invalid choice"), (["score", str(signed)], "--candidates"),
                        (["verify"], "pack"), (["keygen"], "directory"), (["publish"], "pack"),
                        (["audit", str(signed), "--bogus"], "--bogus"), (["import", "x.jsonl"], "--data"),
                        (["build", "--seed", "x"], "--seed")):
        refused_in_one_line(cli(*args, cwd=tmp_path), named, "--help")
    verify_py = subprocess.run([sys.executable, str(signed / "verify.py"), "--timeout", "soon"], cwd=tmp_path,
                               capture_output=True, text=True)
    refused_in_one_line(verify_py, "--timeout", "verify.py --help", prefixes=("error: ",))


def test_a_truncated_table_is_reported_by_verify_py_as_changed_not_a_traceback(signed, tmp_path):
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    table = next((pack / "rotations").glob("*/tables/*.parquet"))
    table.write_bytes(table.read_bytes()[:-100])  # a partial download: the Parquet footer is gone
    run = subprocess.run([sys.executable, str(pack / "verify.py")], cwd=tmp_path, capture_output=True, text=True)
    refused_in_one_line(run, table.name, "differs from the attested", prefixes=("error: ",))


def test_verify_py_opens_no_table_that_leads_outside_the_pack(signed, tmp_path):
    """verify.py reruns the gold SQL while it re-hashes the files: a table that is a symlink to a FIFO outside the
    pack was opened (and waited on forever) before the hash check could refuse it. Links and special files are
    refused before anything runs: one line, exit 2, at once."""
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    fifo = tmp_path / "outside.fifo"
    os.mkfifo(fifo)
    table = next((pack / "rotations").glob("*/tables/*.parquet"))
    table.unlink()
    table.symlink_to(fifo)
    run = subprocess.run([sys.executable, str(pack / "verify.py")], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "not a regular file" in run.stderr and str(table.relative_to(pack)) in run.stderr
    assert len([line for line in run.stderr.splitlines() if line.strip()]) == 1


def test_a_table_duckdb_cannot_read_is_one_line_from_score(signed, spec_path, tmp_path):
    """A pack from elsewhere, attested as it is, whose table file is not Parquet: the sandbox worker cannot open
    the rotation, and score says so in one line naming the folder, exit 2 (a RuntimeError traceback before)."""
    pack = Path(shutil.copytree(signed, tmp_path / "pack"))
    table = next((pack / "rotations").glob("*/tables/*.parquet"))
    table.write_bytes(b"PAR1 this is not a parquet file PAR1")
    (pack / ATTESTATION).unlink()
    write_attestation(pack, load_spec(spec_path), started=now_utc(), finished=now_utc())
    candidates = tmp_path / "candidates.jsonl"
    candidates.write_text(json.dumps({"id": load_questions(pack)[0]["id"], "sql": "SELECT 1"}) + "\n")
    run = cli("score", str(pack), "--candidates", str(candidates), cwd=tmp_path)
    refused_in_one_line(run, "the sandbox could not open this rotation", str(table.parent))
