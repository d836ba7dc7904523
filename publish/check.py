"""Re-verify a pack before it goes anywhere: nothing is sent for a pack that fails.

First, the files the Hub layout is made of must agree with ``manifest.json`` (every table of every
rotation is there with the row count the manifest and the card state, ``questions.jsonl`` has as
many questions as shipped, ``certificate.json`` says ``all_match``). Then ``evalpack verify``
(:func:`evalpack.pack.attest.verify_pack`), which runs the pack's one integrity check
(:func:`evalpack.core.scoring.inspect_integrity`, the same as its ``verify.py``: the signature when a public
key is given, ``payloadType``, ``_type`` and ``predicateType``, every subject re-hashed, the files on
disk equal to the subjects) and then reruns every gold SQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from evalpack.core.layout import PackLayout
from evalpack.pack import attest


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
    tables, rotations = manifest.get("tables", {}), manifest.get("rotations", [])
    if not isinstance(tables, dict) or not isinstance(rotations, list) or not all(
            isinstance(info, dict) for info in tables.values()):
        return ["manifest.json: `tables` must map each table to its rows per rotation, and `rotations` list the "
                "rotation folders; rebuild the pack"]
    for table, info in tables.items():
        for rotation in rotations:
            path = PackLayout(pack).table(rotation, table)
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
    questions = PackLayout(pack).questions
    if not questions.is_file():
        failures.append("questions.jsonl: missing")
    else:
        text = questions.read_bytes().decode("utf-8", errors="replace")
        count = sum(1 for line in text.splitlines() if line.strip())
        shipped = (manifest.get("questions") or {}).get("shipped")
        declines = (manifest.get("unanswerable") or {}).get("count", 0)
        if shipped is not None and shipped + declines != count:
            failures.append(f"questions.jsonl: {count} questions, manifest.json says {shipped} shipped"
                            + (f" and {declines} unanswerable" if declines else ""))
    certificate = PackLayout(pack).certificate
    if not certificate.is_file():
        failures.append("certificate.json: missing")
    else:
        try:
            data = json.loads(certificate.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("all_match") is not True:
                failures.append("certificate.json: all_match is not true")
        except (ValueError, UnicodeDecodeError) as exc:
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
