"""Attestation (issue 6): DSSE envelope + in-toto Statement v1, signing, keygen, and `evalpack verify`."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from evalpack.cli import main
from evalpack.core.errors import EvalpackError
from evalpack.pack.attest import (
    ATTESTATION,
    BUILD_TYPE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    now_utc,
    signature_note,
    source_date_epoch,
    verify_pack,
    write_attestation,
)
from evalpack.spec.reader import load_spec

EPOCH = 1767225600  # 2026-01-01T00:00:00Z

TINY = """\
name: tiny
version: 1.0.0
seed: 7
rotations: 2
answers: shared
tables:
  customers:
    rows: 40
    columns:
      customer_id: {type: int, unique: true, min: 1}
      segment:     {type: categorical, choices: [consumer, enterprise]}
  orders:
    rows: 300
    columns:
      order_id:    {type: int, unique: true, min: 1}
      customer_id: {type: foreign_key}
      channel:     {type: categorical, choices: [web, store]}
      amount:      {type: float, min: 5, max: 900, decimals: 2}
      ordered_at:  {type: date, start: "2025-01-01", end: "2025-03-31"}
relationships:
  - {parent: customers.customer_id, child: orders.customer_id}
outcome_curves:
  - table: orders
    column: amount
    time_column: ordered_at
    start_date: "2025-01-01"
    curve_points:
      - {month: 1, target_value: 30000.37}
      - {month: 3, target_value: 40250.18}
group_shares:
  - table: orders
    measure: amount
    group_column: channel
    shares: {web: 0.6, store: 0.4}
"""


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("attest")


@pytest.fixture(scope="module")
def spec_path(work) -> Path:
    path = work / "tiny.yaml"
    path.write_text(TINY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def keys(work) -> Path:
    """An ed25519 key pair written by `evalpack keygen`."""
    assert main(["keygen", str(work / "keys")]) == 0
    return work / "keys"


@pytest.fixture(scope="module")
def signed(work, spec_path, keys) -> tuple[Path, Path]:
    """The tiny spec built twice through the CLI, with the same key and SOURCE_DATE_EPOCH."""
    out = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
        mp.setenv("EVALPACK_SIGNING_KEY", str(keys / "evalpack.key"))  # second build: key from the environment
        for i, extra in enumerate((["--signing-key", str(keys / "evalpack.key")], [])):
            pack = work / f"signed_{i}"
            assert main(["build", str(spec_path), "-o", str(pack), "--jobs", "1", *extra]) == 0
            out.append(pack)
    return out[0], out[1]


@pytest.fixture
def pack(signed, tmp_path) -> Path:
    """A private copy of the signed pack, free to tamper with."""
    return Path(shutil.copytree(signed[0], tmp_path / "pack"))


def run_verify(capsys, pack: Path, key: Path | None = None) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main(["verify", str(pack)] + (["--public-key", str(key)] if key else []))
    return rc, capsys.readouterr().out.splitlines()


def fails(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL ")]


def envelope_of(pack: Path) -> dict:
    return json.loads((pack / ATTESTATION).read_bytes())


def statement_of(pack: Path) -> dict:
    return json.loads(base64.b64decode(envelope_of(pack)["payload"]))


def pack_files(pack: Path) -> list[str]:
    return sorted(p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file() and p.name != ATTESTATION)


# --------------------------------------------------------------------------- what is written


def test_statement_covers_every_file_with_slsa_provenance(signed, spec_path):
    pack = signed[0]
    env = envelope_of(pack)
    assert env["payloadType"] == PAYLOAD_TYPE
    assert len(env["signatures"]) == 1
    stmt = statement_of(pack)
    assert stmt["_type"] == STATEMENT_TYPE
    assert stmt["predicateType"] == PREDICATE_TYPE
    names = [s["name"] for s in stmt["subject"]]
    assert names == pack_files(pack) == sorted(names)
    for kind in ("questions.jsonl", "manifest.json", "certificate.json", "verify.py",
                 "rotations/seed_7/tables/orders.parquet", "rotations/seed_8/tables/customers.csv"):
        assert kind in names
    for s in stmt["subject"]:
        assert s["digest"] == {"sha256": hashlib.sha256((pack / s["name"]).read_bytes()).hexdigest()}

    build = stmt["predicate"]["buildDefinition"]
    spec_sha = hashlib.sha256(spec_path.read_bytes()).hexdigest()
    assert build["buildType"] == BUILD_TYPE
    assert build["externalParameters"] == {"spec": {"name": "tiny", "version": "1.0.0", "sha256": spec_sha},
                                           "seeds": [7, 8], "rotations": 2, "answers": "shared"}
    assert set(build["internalParameters"]) == {"evalpack", "duckdb", "pyarrow"}
    assert build["resolvedDependencies"][0] == {"name": "tiny.yaml", "digest": {"sha256": spec_sha},
                                                "mediaType": "application/yaml"}
    for dep in build["resolvedDependencies"][1:]:  # the project's git commit, when evalpack runs from a checkout
        assert dep["name"] == "evalpack" and len(dep["digest"]["gitCommit"]) in (40, 64)
    run = stmt["predicate"]["runDetails"]
    assert run["builder"]["id"].startswith("https://")
    assert run["metadata"]["startedOn"] == run["metadata"]["finishedOn"] == "2026-01-01T00:00:00Z"
    assert run["metadata"]["invocationId"]


def test_fixed_key_and_source_date_epoch_give_identical_attestations(signed):
    first, second = ((p / ATTESTATION).read_bytes() for p in signed)
    assert first == second
    assert statement_of(signed[0])["predicate"]["runDetails"]["metadata"]["invocationId"] == \
        statement_of(signed[1])["predicate"]["runDetails"]["metadata"]["invocationId"]


def pae(payload_type: str, payload: bytes) -> bytes:
    return b"DSSEv1 %d %b %d %b" % (len(payload_type.encode()), payload_type.encode(), len(payload), payload)


def test_envelope_verifies_with_plain_cryptography(signed, keys):
    """DSSE by hand: PAE over the decoded payload, ed25519 verify with pyca/cryptography; none of our code."""
    env = json.loads((signed[0] / ATTESTATION).read_bytes())
    public = serialization.load_pem_public_key((keys / "evalpack.pub").read_bytes())
    message = pae(env["payloadType"], base64.b64decode(env["payload"]))
    public.verify(base64.b64decode(env["signatures"][0]["sig"]), message)
    with pytest.raises(InvalidSignature):
        public.verify(base64.b64decode(env["signatures"][0]["sig"]), message + b" ")


def test_ecdsa_p256_option_signs_deterministically_and_verifies(pack, spec_path, tmp_path, capsys, monkeypatch):
    assert main(["keygen", str(tmp_path / "ec"), "--algorithm", "ecdsa-p256"]) == 0
    private = serialization.load_pem_private_key((tmp_path / "ec" / "evalpack.key").read_bytes(), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp256r1"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    spec = load_spec(spec_path)
    write_attestation(pack, spec, started=now_utc(), finished=now_utc(), signing_key=tmp_path / "ec" / "evalpack.key")
    first = (pack / ATTESTATION).read_bytes()
    write_attestation(pack, spec, started=now_utc(), finished=now_utc(), signing_key=tmp_path / "ec" / "evalpack.key")
    assert (pack / ATTESTATION).read_bytes() == first

    env = json.loads(first)
    public = serialization.load_pem_public_key((tmp_path / "ec" / "evalpack.pub").read_bytes())
    public.verify(base64.b64decode(env["signatures"][0]["sig"]), pae(PAYLOAD_TYPE, base64.b64decode(env["payload"])),
                  ec.ECDSA(hashes.SHA256()))
    rc, lines = run_verify(capsys, pack, tmp_path / "ec" / "evalpack.pub")
    assert rc == 0, lines
    assert lines[0].startswith("OK signature: ecdsa-p256 key")


# --------------------------------------------------------------------------- evalpack verify: success


def test_verify_signed_pack_with_key(signed, keys, capsys):
    rc, lines = run_verify(capsys, signed[0], keys / "evalpack.pub")
    assert rc == 0, lines
    assert lines[0].startswith("OK signature: ed25519 key ")
    assert lines[1] == "OK files: 16 files match the attested sha256, none missing, none extra"
    assert lines[2].startswith("OK gold SQL: ") and lines[2].endswith(" questions verify on every rotation")
    assert lines[-1].startswith(f"verified {signed[0]}: 16 files, ") and lines[-1].endswith(", signature verified")
    assert not fails(lines)


def test_signed_pack_without_key_says_signature_not_checked(signed, capsys):
    rc, lines = run_verify(capsys, signed[0])
    assert rc == 0, lines
    assert lines[0].startswith("NOT CHECKED: attestation.intoto.json is signed")
    assert "signature was not checked" in lines[0]
    assert "anyone could have signed it" in lines[0] and "EVALPACK_PUBLIC_KEY" in lines[0]
    assert lines[-1].endswith("signature NOT CHECKED (no --public-key: anyone could have signed it)")
    assert signature_note(signed[0]) is None


def test_unsigned_pack_passes_integrity_and_says_unsigned(retail_pack, capsys):
    rc, lines = run_verify(capsys, retail_pack)
    assert rc == 0, lines
    assert lines[0].startswith("UNSIGNED: attestation.intoto.json carries no signature")
    assert lines[1].startswith("OK files: ")
    assert lines[2].startswith("OK gold SQL: ")
    assert lines[-1].endswith(", UNSIGNED")
    assert envelope_of(retail_pack)["signatures"] == []
    assert signature_note(retail_pack).startswith("UNSIGNED: ")


def test_unsigned_pack_fails_when_a_public_key_is_demanded(retail_pack, keys, capsys):
    rc, lines = run_verify(capsys, retail_pack, keys / "evalpack.pub")
    assert rc == 1
    assert fails(lines)[0].startswith("FAIL attestation.intoto.json: UNSIGNED, but --public-key")


# --------------------------------------------------------------------------- evalpack verify: tampering


@pytest.mark.parametrize("name", [
    "rotations/seed_7/tables/orders.parquet",
    "rotations/seed_8/tables/customers.csv",
    "questions.jsonl",
    "manifest.json",
    "certificate.json",
    "verify.py",
])
def test_one_flipped_byte_in_any_file_is_detected_and_named(pack, keys, capsys, name):
    path = pack / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    rc, lines = run_verify(capsys, pack, keys / "evalpack.pub")
    assert rc == 1
    assert len(fails(lines)) == 1, lines
    assert fails(lines)[0].startswith(f"FAIL {name}: sha256 ")
    assert lines[0].startswith("OK signature")  # the statement itself is intact
    assert "SKIP gold SQL: " in "\n".join(lines)
    assert lines[-1] == f"FAILED {pack}: 1 problem"


def test_added_file_is_detected(pack, keys, capsys):
    (pack / "notes.txt").write_text("hello\n")
    (pack / "rotations" / "seed_7" / "tables" / "extra.parquet").write_bytes(b"PAR1")
    rc, lines = run_verify(capsys, pack, keys / "evalpack.pub")
    assert rc == 1
    assert fails(lines) == [f"FAIL notes.txt: in the pack but not in {ATTESTATION} (a file was added)",
                            f"FAIL rotations/seed_7/tables/extra.parquet: in the pack but not in {ATTESTATION} "
                            "(a file was added)"]


def test_removed_file_is_detected(pack, keys, capsys):
    (pack / "rotations" / "seed_8" / "tables" / "orders.csv").unlink()
    rc, lines = run_verify(capsys, pack, keys / "evalpack.pub")
    assert rc == 1
    assert fails(lines) == [f"FAIL rotations/seed_8/tables/orders.csv: listed in {ATTESTATION} but missing from "
                            "the pack"]


def test_symlink_in_a_pack_is_detected(pack, capsys):
    (pack / "link.json").symlink_to(pack / "manifest.json")
    rc, lines = run_verify(capsys, pack)
    assert rc == 1
    assert fails(lines) == [("FAIL link.json: not a regular file (symlink or special file); a pack holds regular "
                            "files only")]


def test_missing_attestation_fails(pack, capsys):
    (pack / ATTESTATION).unlink()
    rc, lines = run_verify(capsys, pack)
    assert rc == 1
    assert fails(lines)[0].startswith("FAIL attestation.intoto.json: missing")
    assert signature_note(pack).startswith("UNSIGNED: ")


def test_payload_rewritten_with_new_hashes_fails_the_signature(pack, keys, capsys):
    manifest = pack / "manifest.json"
    manifest.write_bytes(manifest.read_bytes() + b" ")
    env = envelope_of(pack)
    stmt = statement_of(pack)
    for s in stmt["subject"]:
        s["digest"]["sha256"] = hashlib.sha256((pack / s["name"]).read_bytes()).hexdigest()
    env["payload"] = base64.b64encode(json.dumps(stmt, separators=(",", ":")).encode()).decode()
    (pack / ATTESTATION).write_text(json.dumps(env, indent=2) + "\n")

    rc, lines = run_verify(capsys, pack, keys / "evalpack.pub")
    assert rc == 1
    assert fails(lines) == [line for line in lines if line.startswith("FAIL attestation.intoto.json: the signature "
                                                                      "does not verify with ")]
    assert len(fails(lines)) == 1
    assert "OK files: 16 files match the attested sha256, none missing, none extra" in lines
    # without a key the hashes agree, and the output says plainly that nothing checked who signed them
    rc, lines = run_verify(capsys, pack)
    assert lines[0].startswith("NOT CHECKED: ") and lines[-1].endswith("(no --public-key: anyone could have signed it)")


def test_re_serialised_payload_fails_the_signature(pack, keys, capsys):
    """The signature covers the payload bytes exactly; the same statement serialised differently does not verify."""
    env = envelope_of(pack)
    env["payload"] = base64.b64encode(json.dumps(statement_of(pack), indent=1).encode()).decode()
    (pack / ATTESTATION).write_text(json.dumps(env))
    rc, lines = run_verify(capsys, pack, keys / "evalpack.pub")
    assert rc == 1
    assert fails(lines)[0].startswith("FAIL attestation.intoto.json: the signature does not verify")


def test_wrong_public_key_fails(pack, tmp_path, capsys):
    assert main(["keygen", str(tmp_path / "other")]) == 0
    rc, lines = run_verify(capsys, pack, tmp_path / "other" / "evalpack.pub")
    assert rc == 1
    assert len(fails(lines)) == 1
    assert fails(lines)[0].startswith(f"FAIL attestation.intoto.json: the signature does not verify with "
                                      f"{tmp_path / 'other' / 'evalpack.pub'}")
    assert lines[-1] == f"FAILED {pack}: 1 problem"


def test_wrong_payload_type_and_statement_type_fail(pack, capsys):
    env = envelope_of(pack)
    stmt = statement_of(pack)
    stmt["_type"] = "https://in-toto.io/Statement/v0.1"
    env["payloadType"] = "application/json"
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    (pack / ATTESTATION).write_text(json.dumps(env))
    rc, lines = run_verify(capsys, pack)
    assert rc == 1
    assert fails(lines) == [
        "FAIL attestation.intoto.json: payloadType is 'application/json', expected 'application/vnd.in-toto+json'",
        ("FAIL attestation.intoto.json: statement _type is 'https://in-toto.io/Statement/v0.1', expected "
        "'https://in-toto.io/Statement/v1'"),
    ]


def test_subject_escaping_the_pack_fails(pack, capsys):
    env = envelope_of(pack)
    stmt = statement_of(pack)
    stmt["subject"].append({"name": "../outside.txt", "digest": {"sha256": "0" * 64}})
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    (pack / ATTESTATION).write_text(json.dumps(env))
    rc, lines = run_verify(capsys, pack)
    assert rc == 1
    assert (f"FAIL {ATTESTATION}: subject '../outside.txt' is not a relative POSIX path inside the pack"
            in fails(lines))


def test_gold_sql_is_rerun_and_a_wrong_answer_fails(pack, spec_path, capsys):
    """An attested (here: re-attested, unsigned) pack whose answer key is wrong fails on the gold SQL rerun."""
    path = pack / "questions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    target = next(r for r in records if r["answer_type"] in ("number", "integer"))
    target["expected_answer"] = target["expected_answer"] + 1
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_attestation(pack, load_spec(spec_path), started=now_utc(), finished=now_utc())
    rc, lines = run_verify(capsys, pack)
    assert rc == 1
    assert lines[0].startswith("UNSIGNED: ")
    assert [line.split(":")[0] for line in fails(lines)] == ["FAIL questions.jsonl"]
    assert fails(lines)[0].startswith(f"FAIL questions.jsonl: {target['id']} ")


# --------------------------------------------------------------------------- keys


def test_keygen_modes_refusal_and_force(tmp_path, capsys):
    folder = tmp_path / "k"
    assert main(["keygen", str(folder)]) == 0
    private, public = folder / "evalpack.key", folder / "evalpack.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    key = serialization.load_pem_private_key(private.read_bytes(), None)
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    out = capsys.readouterr().out
    assert f"wrote {private} (ed25519 private key, mode 0600)" in out

    before = private.read_bytes()
    assert main(["keygen", str(folder)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert private.read_bytes() == before

    private.chmod(0o644)  # even a loosened old file ends up 0600 when replaced
    assert main(["keygen", str(folder), "--force"]) == 0
    assert private.read_bytes() != before
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert not [p for p in folder.iterdir() if p.name not in ("evalpack.key", "evalpack.pub")]


def test_signing_key_errors_are_user_errors(pack, spec_path, keys, tmp_path):
    spec = load_spec(spec_path)
    now = now_utc()
    with pytest.raises(EvalpackError, match="this is a public key"):
        write_attestation(pack, spec, started=now, finished=now, signing_key=keys / "evalpack.pub")
    with pytest.raises(EvalpackError, match="cannot read the signing key"):
        write_attestation(pack, spec, started=now, finished=now, signing_key=tmp_path / "nope.key")
    with pytest.raises(EvalpackError, match="this is a private key"):
        verify_pack(pack, keys / "evalpack.key")


def test_bad_source_date_epoch_is_a_user_error(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(EvalpackError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    assert source_date_epoch().isoformat() == "2026-01-01T00:00:00+00:00"



def test_a_bad_signing_key_fails_before_the_build_starts(spec_path, tmp_path, monkeypatch):
    """An unreadable key is refused with exit 2 before any rotation is generated: nothing is written."""
    from evalpack import build

    def no_generation(*args, **kwargs):
        raise AssertionError("rotations were generated before the key was checked")

    monkeypatch.setattr(build, "write_rotations", no_generation)
    key = tmp_path / "not-a-key.pem"
    key.write_text("not a key\n")
    out = tmp_path / "packs" / "pack"
    assert main(["build", str(spec_path), "-o", str(out), "--signing-key", str(key)]) == 2
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
