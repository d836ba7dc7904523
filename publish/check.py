"""Re-verify a pack before it goes anywhere: nothing is sent for a pack that fails.

Order of trust:

1. When the engine has ``evalpack.attest.verify_command`` (the attestation issue), it is the check:
   signature (when a public key is given), ``payloadType`` and ``_type``, every subject re-hashed, the
   files on disk equal to the subjects, and every gold SQL rerun. It is looked up at run time, so
   publishing uses it as soon as it exists; a ``NotImplementedError`` from it counts as absent.
2. Without it: the attestation's subjects (when ``attestation.intoto.json`` exists) are re-hashed and
   compared with the files on disk as a set (the signature is not checked, and the output says so),
   then every gold SQL is rerun on every rotation with ``evalpack.scoring.run_gold``.

Always, and first: the files the Hub layout is made of agree with ``manifest.json`` (every table of
every rotation is there with the row count the manifest and the card state, ``questions.jsonl`` has
as many questions as shipped, ``certificate.json`` says ``all_match``).
"""

from __future__ import annotations

import base64
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from evalpack.attest import sha256_file
from evalpack.errors import EvalpackError

ATTESTATION = "attestation.intoto.json"


@dataclass(frozen=True)
class Verification:
    """The outcome of re-verifying a pack: ``ok`` only when nothing failed."""

    ok: bool
    method: str
    failures: tuple[str, ...]
    notes: tuple[str, ...]

    def summary(self) -> str:
        if self.ok:
            return f"verified ({self.method})"
        return f"{len(self.failures)} check(s) failed ({self.method})"


def check_consistency(pack: Path, manifest: dict) -> list[str]:
    """What the layout relies on: tables, row counts, question count, certificate."""
    failures = []
    for table, info in manifest.get("tables", {}).items():
        for rotation in manifest.get("rotations", []):
            path = pack / "rotations" / rotation / "tables" / f"{table}.parquet"
            if not path.is_file():
                failures.append(f"{path.relative_to(pack).as_posix()}: missing")
                continue
            try:
                rows = pq.ParquetFile(path).metadata.num_rows
            except Exception as exc:  # a damaged file: name it, whatever pyarrow raised
                failures.append(f"{path.relative_to(pack).as_posix()}: unreadable Parquet ({exc})")
                continue
            stated = (info.get("rows") or {}).get(rotation)
            if stated != rows:
                failures.append(f"{path.relative_to(pack).as_posix()}: {rows} rows, manifest.json says {stated}")
    questions = pack / "questions.jsonl"
    if not questions.is_file():
        failures.append("questions.jsonl: missing")
    else:
        count = sum(1 for line in questions.read_text(encoding="utf-8").splitlines() if line.strip())
        shipped = (manifest.get("questions") or {}).get("shipped")
        if shipped is not None and shipped != count:
            failures.append(f"questions.jsonl: {count} questions, manifest.json says {shipped} shipped")
    certificate = pack / "certificate.json"
    if not certificate.is_file():
        failures.append("certificate.json: missing")
    else:
        try:
            if json.loads(certificate.read_text(encoding="utf-8")).get("all_match") is not True:
                failures.append("certificate.json: all_match is not true")
        except ValueError as exc:
            failures.append(f"certificate.json: unreadable ({exc})")
    return failures


def check_subjects(pack: Path) -> tuple[list[str], list[str]]:
    """Re-hash the attestation's subjects and compare them with the files on disk (no signature check)."""
    path = pack / ATTESTATION
    try:
        envelope = json.loads(path.read_text(encoding="utf-8"))
        statement = json.loads(base64.b64decode(envelope["payload"]))
        subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{ATTESTATION}: unreadable envelope or statement ({exc})"], []
    on_disk = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()} - {ATTESTATION}
    failures = [f"{name}: listed in {ATTESTATION} but missing" for name in sorted(set(subjects) - on_disk)]
    failures += [f"{name}: not listed in {ATTESTATION} (extra file)" for name in sorted(on_disk - set(subjects))]
    for name in sorted(set(subjects) & on_disk):
        if sha256_file(pack / name) != subjects[name]:
            failures.append(f"{name}: SHA-256 differs from {ATTESTATION}")
    signed = bool(envelope.get("signatures"))
    notes = [f"{ATTESTATION}: {len(subjects)} subjects re-hashed; "
             + ("signature NOT checked (evalpack.attest.verify_command is not available)" if signed else "UNSIGNED")]
    return failures, notes


def _engine_verify(pack: Path, public_key) -> tuple[int, list[str]] | None:
    """Run ``evalpack.attest.verify_command`` when the engine has it; None when it does not."""
    try:
        from evalpack import attest
    except ImportError:
        return None
    verify = getattr(attest, "verify_command", None)
    if not callable(verify):
        return None
    buffer = io.StringIO()
    try:
        with redirect_stdout(buffer), redirect_stderr(buffer):
            code = verify(str(pack), public_key=str(public_key) if public_key else None)
    except NotImplementedError:
        return None
    except EvalpackError as exc:
        buffer.write(f"{exc}\n")
        code = exc.exit_code or 1
    return int(code or 0), [line for line in buffer.getvalue().splitlines() if line.strip()]


def verify_pack(pack: str | Path, manifest: dict, public_key: str | Path | None = None) -> Verification:
    """Re-verify a built pack (see the module docstring). Never touches the network."""
    from evalpack.scoring import run_gold

    pack = Path(pack)
    failures = check_consistency(pack, manifest)
    notes: list[str] = []
    engine = _engine_verify(pack, public_key)
    if engine is not None:
        code, lines = engine
        method = "evalpack verify"
        if code != 0:
            failures += [line for line in lines if line.startswith("FAIL")] or lines or [
                f"evalpack verify exited {code}"]
        else:
            notes += lines[-1:]
    else:
        method = "gold SQL rerun" + (" + attestation subjects" if (pack / ATTESTATION).is_file() else "")
        if (pack / ATTESTATION).is_file():
            bad, more = check_subjects(pack)
            failures += bad
            notes += more
        else:
            notes.append(f"{ATTESTATION}: absent, so file integrity rests on the gold SQL rerun")
        try:
            passed, total, lines = run_gold(pack)
        except Exception as exc:  # a damaged pack can break the rerun itself: that is a failure, named
            failures.append(f"gold SQL rerun failed: {type(exc).__name__}: {exc}")
        else:
            failures += [line for line in lines if not line.startswith("PASS")]
            notes.append(f"gold SQL: {passed}/{total} questions match on every rotation")
    return Verification(not failures, method, tuple(failures), tuple(notes))
