"""Attestation of a pack: a DSSE envelope around an in-toto Statement v1 with SLSA provenance v1.

``attestation.intoto.json`` is the last file written into a pack. Its payload is a Statement with one
subject per regular file of the pack (every file except the attestation itself; POSIX relative names,
sorted; SHA-256) and a ``https://slsa.dev/provenance/v1`` predicate saying how the pack was made. The
envelope is built with in-toto's ``Envelope`` (over securesystemslib's DSSE envelope) and signed with
ed25519 (default) or ECDSA P-256 when a private key is given; without one it carries no signature and
every check says UNSIGNED.

``SOURCE_DATE_EPOCH`` (reproducible builds) fixes the start and finish times and derives the invocation
id from the build's inputs, so the same pack and the same key give byte-identical attestations.

``evalpack verify PACK [--public-key KEY]`` runs the pack's one integrity check
(:func:`evalpack.core.scoring.inspect_integrity`, the code every pack's ``verify.py`` and ``evalpack score``
run too: signature over the exact payload bytes, payload, statement and predicate types, every subject
re-hashed, the files on disk equal to the subjects), reports it line by line, then reruns every gold SQL.
This module adds signing, keys and that reporting; it never re-implements a check.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from in_toto.models.metadata import Envelope
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from evalpack import __version__
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import ATTESTATION, QUESTIONS
from evalpack.core.scoring import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    UNSIGNED_NOTE,
    InputError,
    inspect_integrity,
    pack_entries,
    printable,
    read_envelope,
    run_gold,
    sha256_files,
)

BUILD_TYPE = "https://evalpack.dev/buildtypes/pack/v1"
BUILDER_ID = "https://evalpack.dev/builder/evalpack"
PRIVATE_KEY_FILE = "evalpack.key"
PUBLIC_KEY_FILE = "evalpack.pub"
ALGORITHMS = ("ed25519", "ecdsa-p256")


# --------------------------------------------------------------------------- time


def now_utc() -> dt.datetime:
    """The current time in UTC (the build records it as start and finish unless SOURCE_DATE_EPOCH is set)."""
    return dt.datetime.now(dt.UTC)


def source_date_epoch() -> dt.datetime | None:
    """``SOURCE_DATE_EPOCH`` as a UTC datetime, or None when unset. A malformed value is a user error."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw.strip() == "":
        return None
    try:
        seconds = int(raw.strip())
        return dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (ValueError, OverflowError, OSError):
        raise EvalpackError(f"SOURCE_DATE_EPOCH={raw!r}: expected whole seconds since 1970-01-01 UTC "
                            "(e.g. $(git log -1 --format=%ct)); fix or unset it") from None


def rfc3339(moment: dt.datetime) -> str:
    """``2026-01-31T12:00:00Z`` (whole seconds, UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- files and subjects


def subjects(pack: Path) -> list[dict[str, Any]]:
    """One in-toto subject per regular file of ``pack`` (sorted by name). Raises on symlinks/special files."""
    pack = Path(pack)
    files, other = pack_entries(pack)
    if other:
        raise EvalpackError(f"{pack / other[0]}: not a regular file; a pack holds regular files only "
                            "(replace the link with a copy or remove it)")
    digests = sha256_files(list(files.values()))
    return [{"name": name, "digest": {"sha256": digest}} for name, digest in zip(files, digests)]


# --------------------------------------------------------------------------- provenance


def git_commit() -> str | None:
    """The evalpack checkout's HEAD commit when evalpack runs from a git checkout of itself, else None."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit) else None


def tool_versions() -> dict[str, str]:
    """evalpack, duckdb and pyarrow versions (the provenance's internalParameters)."""
    import duckdb
    import pyarrow

    return {"evalpack": __version__, "duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__}


def spec_parameters(spec) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(externalParameters, resolvedDependencies) of a build from ``spec`` (an evalpack.spec.reader.Spec)."""
    external = {
        "spec": {"name": spec.name, "version": spec.version, "sha256": spec.sha256},
        "seeds": list(spec.seeds()),
        "rotations": spec.rotations,
        "answers": spec.answers,
    }
    spec_file = Path(spec.path).name if spec.path else f"{spec.name}.yaml"
    return external, [{"name": spec_file, "digest": {"sha256": spec.sha256}, "mediaType": "application/yaml"}]


def provenance(*, external_parameters: dict[str, Any], resolved_dependencies: list[dict[str, Any]],
               started: dt.datetime, finished: dt.datetime, subject: list[dict[str, Any]]) -> dict[str, Any]:
    """The SLSA provenance v1 predicate. With SOURCE_DATE_EPOCH set, times and invocation id are fixed."""
    deps = list(resolved_dependencies)
    commit = git_commit()
    if commit:
        deps.append({"name": "evalpack", "digest": {"gitCommit": commit}})
    epoch = source_date_epoch()
    if epoch is not None:
        started = finished = epoch
        inputs = json.dumps([BUILD_TYPE, external_parameters, deps, subject, rfc3339(epoch)], sort_keys=True,
                            separators=(",", ":"), ensure_ascii=False)
        invocation = str(uuid.uuid5(uuid.NAMESPACE_URL, inputs))
    else:
        invocation = str(uuid.uuid4())
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external_parameters,
            "internalParameters": tool_versions(),
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {"evalpack": __version__}},
            "metadata": {"invocationId": invocation, "startedOn": rfc3339(started), "finishedOn": rfc3339(finished)},
        },
    }


def statement(subject: list[dict[str, Any]], predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 with the SLSA provenance predicate."""
    return {"_type": STATEMENT_TYPE, "subject": subject, "predicateType": PREDICATE_TYPE, "predicate": predicate}


# --------------------------------------------------------------------------- keys and signing


class PackSigner(CryptoSigner):
    """securesystemslib's CryptoSigner, with deterministic (RFC 6979) ECDSA so a fixed key gives fixed bytes.

    ed25519 signatures are deterministic already and go through CryptoSigner unchanged.
    """

    def __init__(self, private_key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> None:
        super().__init__(private_key)
        self._ecdsa = private_key if isinstance(private_key, ec.EllipticCurvePrivateKey) else None

    def sign(self, payload: bytes) -> Signature:
        if self._ecdsa is None:
            return super().sign(payload)
        sig = self._ecdsa.sign(payload, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
        return Signature(self.public_key.keyid, sig.hex())


def _check_algorithm(key: Any, path: Path) -> str:
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return "ecdsa-p256"
    raise EvalpackError(f"{path}: unsupported key type; evalpack signs with ed25519 or ECDSA P-256 keys "
                        "(make one with `evalpack keygen DIR`)")


def _read_key_file(path: str | Path, what: str) -> tuple[Path, bytes]:
    path = Path(path)
    try:
        return path, path.read_bytes()
    except OSError as exc:
        raise EvalpackError(f"{path}: cannot read the {what} ({exc.strerror}); make a key pair with "
                            "`evalpack keygen DIR`") from None


def load_signer(path: str | Path) -> PackSigner:
    """The signer for a PEM private key file (PKCS#8, unencrypted; ed25519 or ECDSA P-256)."""
    path, data = _read_key_file(path, "signing key")
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise EvalpackError(f"{path}: this is a public key; sign with the private key ({PRIVATE_KEY_FILE}) "
                            f"and give the public one ({PUBLIC_KEY_FILE}) to `evalpack verify --public-key`")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise EvalpackError(f"{path}: the private key is encrypted; evalpack reads unencrypted PKCS#8 PEM keys "
                            "(keep the file mode 0600 instead)") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise EvalpackError(f"{path}: not a PEM private key ({exc}); make one with `evalpack keygen DIR`") from None
    _check_algorithm(key, path)
    return PackSigner(key)


def envelope(statement_: dict[str, Any], signer: PackSigner | None = None) -> Envelope:
    """The in-toto DSSE envelope of ``statement_`` (signed when ``signer`` is given)."""
    payload = json.dumps(statement_, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    env = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    if signer is not None:
        env.create_signature(signer)
    return env


def envelope_bytes(env: Envelope) -> bytes:
    """The bytes of ``attestation.intoto.json`` (indented JSON, newline at the end)."""
    return (json.dumps(env.to_dict(), indent=2) + "\n").encode("utf-8")


# --------------------------------------------------------------------------- writing


def attest(pack: str | Path, *, external_parameters: dict[str, Any], resolved_dependencies: list[dict[str, Any]],
           started: dt.datetime, finished: dt.datetime, signing_key: str | Path | None = None) -> Path:
    """Write ``pack/attestation.intoto.json`` over every other file of ``pack``; returns its path.

    For packs that do not come from a spec (e.g. imported ones); builds use ``write_attestation``.
    """
    pack = Path(pack)
    signer = load_signer(signing_key) if signing_key else None
    subject = subjects(pack)
    predicate = provenance(external_parameters=external_parameters, resolved_dependencies=resolved_dependencies,
                           started=started, finished=finished, subject=subject)
    out = pack / ATTESTATION
    out.write_bytes(envelope_bytes(envelope(statement(subject, predicate), signer)))
    return out


def write_attestation(pack: str | Path, spec, *, started: dt.datetime, finished: dt.datetime,
                      signing_key: str | Path | None = None) -> Path:
    """Write the attestation of a pack built from ``spec`` (evalpack.spec.reader.Spec); call it after every other file."""
    external, deps = spec_parameters(spec)
    return attest(pack, external_parameters=external, resolved_dependencies=deps, started=started,
                  finished=finished, signing_key=signing_key)


# --------------------------------------------------------------------------- keygen


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 from the first byte on (temp file, then rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keygen(directory: str | Path, algorithm: str = "ed25519", force: bool = False) -> tuple[Path, Path, SSlibKey]:
    """Write ``evalpack.key`` (private, mode 0600) and ``evalpack.pub`` (public, 0644) into ``directory``.

    Refuses to overwrite an existing key file unless ``force``. Returns (private path, public path, key).
    """
    if algorithm not in ALGORITHMS:
        raise EvalpackError(f"--algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    directory = Path(directory)
    private_path, public_path = directory / PRIVATE_KEY_FILE, directory / PUBLIC_KEY_FILE
    if not force:
        for path in (private_path, public_path):
            if path.exists():
                raise EvalpackError(f"{path}: already exists; keep it, choose another folder, or pass --force to "
                                    "replace the key pair (packs signed with the old key then need the old .pub)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EvalpackError(f"{directory}: cannot create the folder ({exc.strerror})") from None
    private_key = ed25519.Ed25519PrivateKey.generate() if algorithm == "ed25519" else ec.generate_private_key(
        ec.SECP256R1())
    private_pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
    public_pem = private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_private(private_path, private_pem)
    public_path.write_bytes(public_pem)
    public_path.chmod(0o644)
    return private_path, public_path, SSlibKey.from_crypto(private_key.public_key())


def keygen_command(directory: str | Path, algorithm: str = "ed25519", force: bool = False) -> int:
    """``evalpack keygen DIR [--algorithm ed25519|ecdsa-p256] [--force]``."""
    private_path, public_path, key = keygen(directory, algorithm, force)
    print(f"wrote {private_path} ({algorithm} private key, mode 0600): keep it secret, sign with it")
    print(f"wrote {public_path} ({algorithm} public key): give it to whoever verifies your packs")
    print(f"keyid {key.keyid}")
    print(f"sign:   evalpack build SPEC -o PACK --signing-key {private_path}  (or EVALPACK_SIGNING_KEY={private_path})")
    print(f"verify: evalpack verify PACK --public-key {public_path}")
    return 0


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True)
class Verification:
    """What ``verify_pack`` found: every report line in order, and the failing ones among them."""

    pack: Path
    lines: tuple[str, ...]
    failures: tuple[str, ...]
    signature: str  # "verified" | "failed" | "not checked" | "unsigned" | "unattested"
    files: int
    gold: tuple[int, int] | None  # (passed, total); None when not rerun
    producer: str = "evalpack"  # or "misata <version>": a pack Misata wrote, whose attestation pins its tables only
    uncovered: tuple[str, ...] = ()  # the files of such a pack that no attestation pins

    @property
    def ok(self) -> bool:
        return not self.failures


class _Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failures: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)

    def fail(self, name: str, why: str) -> None:
        line = f"FAIL {name}: {why}"
        self.lines.append(line)
        self.failures.append(line)


def signature_note(pack: str | Path) -> str | None:
    """``UNSIGNED: ...`` when a pack's attestation carries no signature (or is missing), else None.

    For every command that reads a pack, to say plainly that nothing vouches for who made it.
    """
    data, why = read_envelope(Path(pack))
    if data is None:
        return f"UNSIGNED: {ATTESTATION} {why}"
    return None if data["signatures"] else UNSIGNED_NOTE


def _check_gold(pack: Path, report: _Report, holdout_key: str | Path | None = None) -> tuple[int, int] | None:
    try:
        passed, total, lines = run_gold(pack, holdout_key=holdout_key)
    except InputError as exc:  # an answer key that does not match the pack: its own message says which and why
        report.fail(QUESTIONS, str(exc))
        return None
    except Exception as exc:  # a pack whose questions cannot be run fails verification, with the reason
        report.fail(QUESTIONS, f"cannot rerun the gold SQL ({type(exc).__name__}: {exc})")
        return None
    for line in lines:
        if not line.startswith(("PASS", "NOTE ")):
            report.fail(QUESTIONS, line.removeprefix("FAIL "))
    if passed == total:
        report.say(f"OK gold SQL: {passed}/{total} questions verify on every rotation")
    for line in lines:  # after the verdict, which tools read at a fixed line
        if line.startswith("NOTE "):
            report.say(line.removeprefix("NOTE "))
    return passed, total


def verify_pack(pack: str | Path, public_key: str | Path | None = None, *, gold: bool = True,
                allow_unattested: bool = False, holdout_key: str | Path | None = None) -> Verification:
    """Check ``pack`` with the one integrity check (:func:`evalpack.core.scoring.inspect_integrity`: signature,
    types, hashes, file set), then rerun its gold SQL (the holdout's too, with its answer key:
    :func:`evalpack.core.scoring.pack_questions`).

    Raises EvalpackError for a folder that is not a pack or an unreadable key; all else is a report line.
    The gold SQL is not rerun (a SKIP line) when the files do not match the attestation.
    """
    pack = Path(pack)
    if not pack.is_dir():
        raise EvalpackError(f"{pack}: not a pack folder (expected the folder `evalpack build -o` wrote)")
    try:
        integrity = inspect_integrity(pack, public_key, allow_unattested=allow_unattested)
    except InputError as exc:  # a public key that cannot be used
        raise EvalpackError(str(exc)) from None
    report = _Report()
    for state, name, text in integrity.lines:
        if state == "fail":
            report.fail(name, text)
        else:
            report.say(text)
    gold_result = None
    if gold and report.failures:
        report.say("SKIP gold SQL: not rerun, because the checks above failed (the SQL in the pack is not trusted)")
    elif gold:
        gold_result = _check_gold(pack, report, holdout_key)
    return Verification(pack, tuple(report.lines), tuple(report.failures), integrity.signature, integrity.files,
                        gold_result, integrity.producer, integrity.uncovered)


def verify_command(pack: str | Path, public_key: str | Path | None = None, *, allow_unattested: bool = False,
                   holdout_key: str | Path | None = None) -> int:
    """``evalpack verify PACK [--public-key KEY] [--allow-unattested] [--holdout-key DIR]``: 0 when everything
    holds, 1 otherwise (2: bad input)."""
    result = verify_pack(pack, public_key, allow_unattested=allow_unattested, holdout_key=holdout_key)
    for line in result.lines:
        print(printable(line))
    if not result.ok:
        n = len(result.failures)
        print(f"FAILED {result.pack}: {n} problem{'s' if n != 1 else ''}")
        return 1
    passed, total = result.gold or (0, 0)
    how = {"verified": "signature verified",
           "not checked": "signature NOT CHECKED (no --public-key: anyone could have signed it)",
           "unsigned": "UNSIGNED", "unattested": "NO ATTESTATION (--allow-unattested)"}[result.signature]
    if result.producer != "evalpack":
        print(f"verified {result.pack}: a pack {result.producer} wrote; {result.files} table files match its "
              f"attestations, {passed}/{total} gold SQL (evalpack's rules), {how}; its attestation does not cover "
              f"{len(result.uncovered)} files, questions.jsonl among them")
        return 0
    print(f"verified {result.pack}: {result.files} files, {passed}/{total} gold SQL, {how}")
    return 0
