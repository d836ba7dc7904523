"""Re-verify a pack before it goes anywhere: nothing is sent for a pack that fails.

First, the files the Hub layout is made of must agree with ``manifest.json`` (every table of every
rotation is there with the row count the manifest and the card state, ``questions.jsonl`` has as
many questions as shipped, ``certificate.json`` says ``all_match``). Then the engine's
``evalpack verify`` check (:func:`evalpack.attest.verify_pack`): the signature when a public key is
given, ``payloadType`` and ``_type``, every subject re-hashed, the files on disk equal to the
subjects, and every gold SQL rerun.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from evalpack import attest

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


def verify_pack(pack: str | Path, manifest: dict, public_key: str | Path | None = None) -> Verification:
    """Re-verify a built pack (see the module docstring). Never touches the network."""
    pack = Path(pack)
    failures = check_consistency(pack, manifest)
    result = attest.verify_pack(pack, public_key=public_key)
    failures += list(result.failures)
    notes = [line for line in result.lines if line not in result.failures]
    return Verification(not failures, "evalpack verify", tuple(failures), tuple(notes))
