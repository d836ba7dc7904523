"""Integrity first: the scorer re-hashes the pack against its attestation before scoring anything.

The envelopes here are written by hand (hashlib, base64, json) so that the scorer is checked
against the format (DSSE envelope, in-toto Statement v1), not against our own attestation writer.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from evalpack.core.scoring import (
    ATTESTATION,
    PackIntegrityError,
    check_integrity,
    load_questions,
    score_command,
)

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _subjects(pack: Path) -> list[dict]:
    out = []
    for path in sorted(pack.rglob("*")):
        rel = path.relative_to(pack).as_posix()
        if path.is_file() and rel != ATTESTATION:
            out.append({"name": rel, "digest": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}})
    return out


def _pae(payload: bytes) -> bytes:
    kind = PAYLOAD_TYPE.encode()
    return b"DSSEv1 " + str(len(kind)).encode() + b" " + kind + b" " + str(len(payload)).encode() + b" " + payload


def write_envelope(pack: Path, key=None, subjects: list[dict] | None = None, payload: bytes | None = None) -> bytes:
    """Write attestation.intoto.json over the pack as it is now; returns the payload bytes."""
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": subjects or _subjects(pack),
                 "predicateType": "https://slsa.dev/provenance/v1", "predicate": {}}
    payload = payload or json.dumps(statement, sort_keys=True).encode()
    signatures = []
    if isinstance(key, ed25519.Ed25519PrivateKey):
        signatures.append({"keyid": "k1", "sig": base64.b64encode(key.sign(_pae(payload))).decode()})
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        signatures.append({"keyid": "k1", "sig": base64.b64encode(key.sign(_pae(payload),
                                                                          ec.ECDSA(hashes.SHA256()))).decode()})
    envelope = {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE, "signatures": signatures}
    (pack / ATTESTATION).write_text(json.dumps(envelope))
    return payload


def write_public(key, path: Path) -> Path:
    path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


@pytest.fixture()
def pack(tmp_path: Path, retail_pack: Path) -> Path:
    out = tmp_path / "pack"
    shutil.copytree(retail_pack, out)
    (out / ATTESTATION).unlink(missing_ok=True)
    return out


def _declines(tmp_path: Path, pack: Path, sql_for_first: str | None = None) -> Path:
    """A candidates file that declines everything (scores nothing), or answers the first question."""
    first = load_questions(pack)[0]
    path = tmp_path / "cands.jsonl"
    record = {"id": first["id"], "sql": sql_for_first} if sql_for_first else {"id": first["id"], "declined": True}
    path.write_text(json.dumps(record) + "\n")
    return path


def _run(pack: Path, candidates: Path, json_path: Path | None = None, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = score_command(pack, candidates, json_path=json_path, out=out, err=err, **kw)
    return code, out.getvalue(), err.getvalue()


def test_unsigned_pack_passes_and_says_unsigned(tmp_path, pack):
    write_envelope(pack)
    result = check_integrity(pack)
    assert result.status == "unsigned" and result.files == len(_subjects(pack))
    first = load_questions(pack)[0]
    code, out, _ = _run(pack, _declines(tmp_path, pack, first["gold_sql"]), json_path=tmp_path / "r.json")
    assert code == 1  # the other questions are declined
    assert "UNSIGNED" in out
    assert json.loads((tmp_path / "r.json").read_text())["integrity"]["status"] == "unsigned"


def test_pack_without_attestation_is_refused(tmp_path, pack):
    """Nothing would pin the files: the scorer refuses, as `evalpack verify` does."""
    with pytest.raises(PackIntegrityError, match="missing, so nothing in this pack is pinned"):
        check_integrity(pack)
    code, out, err = _run(pack, _declines(tmp_path, pack))
    assert code == 2 and out == "" and f"{pack / ATTESTATION}: missing" in err


@pytest.mark.parametrize("victim", [
    "rotations/seed_42/tables/orders.parquet",
    "rotations/seed_43/tables/customers.csv",
    "questions.jsonl",
    "manifest.json",
    "certificate.json",
    "verify.py",
])
def test_one_flipped_byte_in_any_file_refuses_the_pack(tmp_path, pack, victim):
    write_envelope(pack)
    target = pack / victim
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(PackIntegrityError) as caught:
        check_integrity(pack)
    assert str(caught.value).startswith(f"{target}: sha256 ") and "differs from the attested" in str(caught.value)
    report = tmp_path / "r.json"
    code, out, err = _run(pack, _declines(tmp_path, pack), json_path=report)
    assert code == 2 and str(target) in err and out == "" and not report.exists()


def test_added_removed_and_linked_files_are_named(pack):
    write_envelope(pack)
    added = pack / "rotations" / "seed_42" / "tables" / "extra.parquet"
    added.write_bytes(b"PAR1")
    removed = pack / "rotations" / "seed_44" / "tables" / "orders.csv"
    removed.unlink()
    with pytest.raises(PackIntegrityError) as caught:
        check_integrity(pack)
    message = str(caught.value)
    assert f"{added}: in the pack but not in {ATTESTATION}" in message
    assert f"{removed}: listed in {ATTESTATION} but missing" in message
    added.unlink()
    shutil.copyfile(pack / "rotations" / "seed_43" / "tables" / "orders.csv", removed)
    with pytest.raises(PackIntegrityError):
        check_integrity(pack)  # the right name with another rotation's bytes
    write_envelope(pack)
    assert check_integrity(pack).status == "unsigned"
    link = pack / "linked.csv"
    os.symlink(removed, link)
    with pytest.raises(PackIntegrityError) as caught:
        check_integrity(pack)
    assert f"{link}: not a regular file" in str(caught.value)


@pytest.mark.parametrize("bad", [
    {"payloadType": "text/plain"},
    {"payload": "%%% not base64 %%%"},
    {"payload": base64.b64encode(b'{"_type": "https://in-toto.io/Statement/v0.1", "subject": []}').decode()},
    {"payload": base64.b64encode(b'{"_type": "https://in-toto.io/Statement/v1", '
                                 b'"subject": [{"name": "../outside", "digest": {"sha256": "' + b"0" * 64 + b'"}}]}')
     .decode()},
])
def test_malformed_envelopes_are_refused(pack, bad):
    write_envelope(pack)
    envelope = json.loads((pack / ATTESTATION).read_text())
    envelope.update(bad)
    (pack / ATTESTATION).write_text(json.dumps(envelope))
    with pytest.raises(PackIntegrityError) as caught:
        check_integrity(pack)
    assert str(pack / ATTESTATION) in str(caught.value)


@pytest.mark.parametrize("algorithm", ["ed25519", "ecdsa-p256"])
def test_signatures_verify_with_the_right_key_only(tmp_path, pack, algorithm):
    key = ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    other = ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    public, wrong = write_public(key, tmp_path / "right.pub"), write_public(other, tmp_path / "wrong.pub")
    write_envelope(pack, key)
    verified = check_integrity(pack, public)
    assert verified.status == "verified" and algorithm.split("-")[0] in verified.message
    unchecked = check_integrity(pack)
    assert unchecked.status == "signed" and "NOT CHECKED" in unchecked.message
    with pytest.raises(PackIntegrityError, match="does not verify"):
        check_integrity(pack, wrong)
    code, _, err = _run(pack, _declines(tmp_path, pack), public_key=wrong)
    assert code == 2 and "does not verify" in err


def test_a_rewritten_payload_with_new_hashes_fails_the_signature(tmp_path, pack):
    key = ed25519.Ed25519PrivateKey.generate()
    public = write_public(key, tmp_path / "k.pub")
    write_envelope(pack, key)
    signature = json.loads((pack / ATTESTATION).read_text())["signatures"]
    questions = pack / "questions.jsonl"
    questions.write_text(questions.read_text().replace("SELECT", "select", 1))
    write_envelope(pack)  # an attacker re-hashes every file ...
    envelope = json.loads((pack / ATTESTATION).read_text())
    envelope["signatures"] = signature  # ... and keeps the old signature
    (pack / ATTESTATION).write_text(json.dumps(envelope))
    assert check_integrity(pack).status == "signed"  # hashes alone match
    with pytest.raises(PackIntegrityError, match="does not verify"):
        check_integrity(pack, public)


def test_a_key_for_an_unsigned_pack_is_refused(tmp_path, pack):
    key = ed25519.Ed25519PrivateKey.generate()
    write_envelope(pack)
    with pytest.raises(PackIntegrityError, match="UNSIGNED"):
        check_integrity(pack, write_public(key, tmp_path / "k.pub"))
    (tmp_path / "junk.pub").write_text("not a key")
    write_envelope(pack, key)
    code, _, err = _run(pack, _declines(tmp_path, pack), public_key=tmp_path / "junk.pub")
    assert code == 2 and "not a PEM public key" in err


def test_gold_mode_refuses_a_tampered_pack_before_running_anything(pack, capsys):
    from evalpack.core.scoring import main

    write_envelope(pack)
    manifest = pack / "manifest.json"
    manifest.write_text(manifest.read_text() + " ")
    assert main(["--pack", str(pack)]) == 2
    captured = capsys.readouterr()
    assert str(manifest) in captured.err and "PASS" not in captured.out
