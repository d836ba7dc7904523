"""What a pack holds and where: every file name and path of a pack is spelled here, and nowhere else.

::

    PACK/
      README.md  questions.jsonl  certificate.json  manifest.json  verify.py  attestation.intoto.json
      rotations/seed_<n>/tables/<table>.parquet   (and .csv)

The pack's own ``verify.py`` is a copy of :mod:`evalpack.scoring`, which must stand alone and so
cannot import this module; it spells the few names it needs itself, and ``tests/test_layout.py``
checks that they are these.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpack.errors import EvalpackError

CARD = "README.md"
QUESTIONS = "questions.jsonl"
CERTIFICATE = "certificate.json"
MANIFEST = "manifest.json"
SCORER = "verify.py"
ATTESTATION = "attestation.intoto.json"
ROTATIONS = "rotations"
TABLES = "tables"
ROTATION_PREFIX = "seed_"
ROTATION_NAME = re.compile(rf"{ROTATION_PREFIX}(\d+)")
FORMATS = ("parquet", "csv")
EXPORTS = "exports"  # exports/<format>/...: the spec's `exports:` built with the pack (evalpack.exports)


def rotation_name(seed: int) -> str:
    """The name of a rotation: its folder under ``rotations/`` and its split on the Hub (``seed_42``)."""
    return f"{ROTATION_PREFIX}{seed}"


def seed_of(rotation: str) -> int:
    """The seed a rotation name stands for (``seed_42`` -> 42)."""
    match = ROTATION_NAME.fullmatch(rotation)
    if match is None:
        raise ValueError(f"{rotation!r} is not a rotation name ({ROTATION_PREFIX}<n>)")
    return int(match.group(1))


def rotation_path(rotation: str | int) -> str:
    """The POSIX path of a rotation's folder inside a pack (``rotations/seed_42``)."""
    name = rotation_name(rotation) if isinstance(rotation, int) else rotation
    return f"{ROTATIONS}/{name}"


def table_path(rotation: str | int, table: str, fmt: str = "parquet") -> str:
    """The POSIX path of one table file inside a pack (``rotations/seed_42/tables/orders.parquet``)."""
    return f"{rotation_path(rotation)}/{TABLES}/{table}.{fmt}"


@dataclass(frozen=True)
class PackLayout:
    """The paths of one pack folder (built, imported, or being assembled), and readers for its files."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def card(self) -> Path:
        return self.root / CARD

    @property
    def questions(self) -> Path:
        return self.root / QUESTIONS

    @property
    def certificate(self) -> Path:
        return self.root / CERTIFICATE

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def scorer(self) -> Path:
        return self.root / SCORER

    @property
    def attestation(self) -> Path:
        return self.root / ATTESTATION

    def rotation(self, rotation: str | int) -> Path:
        return self.root / rotation_path(rotation)

    def tables(self, rotation: str | int) -> Path:
        """The folder of a rotation's table files."""
        return self.rotation(rotation) / TABLES

    def table(self, rotation: str | int, table: str, fmt: str = "parquet") -> Path:
        return self.root / table_path(rotation, table, fmt)

    def export(self, fmt: str) -> Path:
        """The folder of one export format built with the pack (``exports/sqlite``, ``exports/bird``, ...)."""
        return self.root / EXPORTS / fmt

    def rotations(self) -> list[str]:
        """The rotation folders on disk, in seed order. Raises EvalpackError when there is none."""
        root = self.root / ROTATIONS
        found = [p.name for p in root.iterdir() if p.is_dir() and ROTATION_NAME.fullmatch(p.name)] \
            if root.is_dir() else []
        if not found:
            raise EvalpackError(f"{root}: no rotation folder ({ROTATION_PREFIX}<n>); is {self.root} a pack?")
        return sorted(found, key=seed_of)

    def read_json(self, path: Path) -> dict[str, Any]:
        """A JSON file of the pack (manifest, certificate). Raises EvalpackError naming the file."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EvalpackError(f"{path}: not found; is {self.root} a pack (built or imported)?") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EvalpackError(f"{path}: not valid JSON ({exc}); the pack is damaged: rebuild or re-import it") \
                from None
        except RecursionError:
            raise EvalpackError(f"{path}: JSON nested too deeply; the pack is damaged: rebuild or re-import it") \
                from None
        if not isinstance(data, dict):
            raise EvalpackError(f"{path}: not a JSON object; the pack is damaged: rebuild or re-import it")
        return data

    def read_manifest(self) -> dict[str, Any]:
        return self.read_json(self.manifest)

    def read_certificate(self) -> dict[str, Any]:
        return self.read_json(self.certificate)

    def read_records(self) -> list[dict]:
        """The question records (built or imported; records without a gold query included)."""
        path = self.questions
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise EvalpackError(f"{path}: not found; is {self.root} a pack (built or imported)?") from None
        except UnicodeDecodeError as exc:
            raise EvalpackError(f"{path}: not UTF-8 ({exc.reason}); the pack is damaged") from None
        records = []
        # JSON Lines: split at newlines only (a JSON string may hold U+2028, where str.splitlines splits too)
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvalpackError(f"{path}: line {number}: not JSON ({exc.msg}); the pack is damaged") from None
            except RecursionError:
                raise EvalpackError(f"{path}: line {number}: JSON nested too deeply; the pack is damaged") from None
            if not isinstance(record, dict) or "id" not in record:
                raise EvalpackError(f"{path}: line {number}: not a question record (an object with an id)")
            records.append(record)
        return records
