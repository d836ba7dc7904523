"""What a pack holds and where: every file name and path of a pack is spelled here, and nowhere else.

::

    PACK/
      README.md  questions.jsonl  certificate.json  manifest.json  verify.py  attestation.intoto.json
      rotations/seed_<n>/tables/<table>.parquet   (and .csv)

The pack's own ``verify.py`` is a copy of :mod:`evalpack.core.scoring`, which must stand alone and so
cannot import this module; it spells the few names it needs itself, and ``tests/core/test_layout.py``
checks that they are these.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import MAX_QUESTIONS_BYTES, InputError, load_questions, read_bounded

CARD = "README.md"
QUESTIONS = "questions.jsonl"
CERTIFICATE = "certificate.json"
MANIFEST = "manifest.json"
DICTIONARY = "dictionary.json"  # the data dictionary (evalpack.spec.dictionary); dictionary.md for people
DICTIONARY_MD = "dictionary.md"
SCORER = "verify.py"
ATTESTATION = "attestation.intoto.json"
ROTATIONS = "rotations"
TABLES = "tables"
ROTATION_PREFIX = "seed_"
ROTATION_NAME = re.compile(rf"{ROTATION_PREFIX}(\d+)")
FORMATS = ("parquet", "csv")
EXPORTS = "exports"  # exports/<format>/...: the spec's `exports:` built with the pack (evalpack.interop.exports)
#: what to do about a pack file that is not as evalpack writes it (a pack from elsewhere may hold anything)
DAMAGED = "the pack is damaged or was not made by evalpack: rebuild it, or get it again from where it came from"


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
    def dictionary(self) -> Path:
        return self.root / DICTIONARY

    @property
    def dictionary_md(self) -> Path:
        return self.root / DICTIONARY_MD

    def read_dictionary(self) -> dict | None:
        """The pack's data dictionary (None for a pack without one: imported, or built before it existed), its fields
        of the types evalpack writes (:func:`check_dictionary`)."""
        if not self.dictionary.is_file():
            return None
        return check_dictionary(self.read_json(self.dictionary), self.dictionary)

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
        if not path.exists():
            raise EvalpackError(f"{path}: not found; is {self.root} a pack (built or imported)?")
        try:
            data = json.loads(read_bounded(path, MAX_QUESTIONS_BYTES, "a JSON file of the pack").decode("utf-8"))
        except InputError as exc:
            raise EvalpackError(str(exc)) from None
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
        """manifest.json, its fields that evalpack reads of the types it writes (:func:`check_manifest`)."""
        return check_manifest(self.read_json(self.manifest), self.manifest)

    def read_certificate(self) -> dict[str, Any]:
        return self.read_json(self.certificate)

    def read_records(self) -> list[dict]:
        """The question records (built or imported; records without a gold query included), read by the scorer's
        own reader (:func:`evalpack.core.scoring.load_questions`: bounded, a repeated id or a malformed record
        refused), so that every command reads a pack's questions as its users' scores read them."""
        if not self.questions.exists():
            raise EvalpackError(f"{self.questions}: not found; is {self.root} a pack (built or imported)?")
        try:
            return load_questions(self.root)
        except InputError as exc:
            raise EvalpackError(f"{exc}; the pack is damaged") from None


# --------------------------------------------------------------------------- manifest.json's and dictionary.json's shape
# A pack may come from anyone: before a reader (audit, export, diff, the card, serve) indexes into manifest.json or
# dictionary.json, the fields it reads are checked once, here, against the types evalpack writes. A field may be
# absent (older and imported packs lack some; the readers handle that), null only where evalpack writes null or
# readers take null for empty.


@dataclass(frozen=True)
class Obj:
    """A JSON object: the ``fields`` named (each may be absent, and null if ``nullable``; one in ``required`` must be
    there) and, when ``each`` is given, every value of another name of that shape."""

    fields: dict[str, Any] | None = None
    each: Any = None
    required: tuple[str, ...] = ()
    nullable: tuple[str, ...] = ()


@dataclass(frozen=True)
class Arr:
    """A JSON list of ``item`` values."""

    item: Any


@dataclass(frozen=True)
class Dotted:
    """A text ``table.column``."""


NUMBER = (int, float)
LINK = Obj({"child_table": str, "child_column": str, "parent_table": str, "parent_column": str},
           required=("child_table", "child_column", "parent_table", "parent_column"))
MANIFEST_SHAPE = Obj({
    "pack": str,
    "version": (str, *NUMBER),
    "tool": Obj({"name": str, "version": str}),
    "rotations": Arr(str),
    "spec": Obj({"file": str, "text": str}, nullable=("text",)),  # no text: withheld with the holdout's answers
    "primary_keys": Obj(each=str),
    "declared_links": Arr(LINK),
    "relationships": Arr(Obj({"child": Dotted(), "parent": Dotted(), "source": str}, required=("child", "parent"))),
    "tables": Obj(each=Obj({"columns": Obj(each=str), "rows": Obj(each=int)}, required=("columns",))),
    "semantics": Obj({"tables": Obj(each=Obj({"row": str, "columns": Obj(each=str)}))}),
    "near_miss_study": Obj({"operators": Obj(each=Obj(dict.fromkeys(
        ("mutants", "equivalent", "errored", "match_first", "match_all"), NUMBER)))}),
    "source": Obj({"questions": Obj({"as_received": str, "sha256": str}, nullable=("as_received",))},
                  nullable=("questions",)),
    "dialects": Obj(),
}, nullable=("tool", "spec", "primary_keys", "declared_links", "tables", "semantics", "near_miss_study", "source",
             "dialects"))  # their readers take null for none
DEFINITION = Obj({"name": str, "definition": str}, required=("name", "definition"))
DICTIONARY_SHAPE = Obj({  # dictionary.json (evalpack.spec.dictionary.Dictionary.as_json)
    "format": str,
    "pack": str,
    "tables": Arr(Obj({
        "name": str, "row": str, "description": str,
        "columns": Arr(Obj({"name": str, "label": str, "type": str, "description": str, "unit": str,
                            "values": Arr(Obj({"value": str, "meaning": str}, required=("value", "meaning"))),
                            "refers_to": str},
                           required=("name",), nullable=("label", "type", "description", "unit", "values", "refers_to"))),
    }, required=("name",), nullable=("row", "description", "columns"))),
    "measures": Arr(DEFINITION),
    "terms": Arr(DEFINITION),
    "conventions": Arr(DEFINITION),
}, nullable=("tables", "measures", "terms", "conventions"))
_NAMES = {dict: "an object", list: "a list", str: "a text", int: "an integer", float: "a number", bool: "true or false",
          type(None): "null"}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_manifest(data: dict[str, Any], path: Path | str = MANIFEST) -> dict[str, Any]:
    """``data`` (manifest.json, read from ``path``) when each field evalpack reads has the shape it writes
    (:data:`MANIFEST_SHAPE`); else EvalpackError naming the file and the key path
    (``manifest.json: declared_links[0] lacks child_column``), never a reader's KeyError or TypeError later."""
    if isinstance(data, dict) and isinstance(data.get("misata_version"), str):
        raise EvalpackError(f"{path}: a pack misata {data['misata_version']} wrote; this command reads packs "
                            "`evalpack build` wrote (`evalpack verify` and `evalpack score` read Misata's packs too)")
    _check_shape(data, MANIFEST_SHAPE, "", Path(path))
    return data


def check_dictionary(data: dict[str, Any], path: Path | str = DICTIONARY) -> dict[str, Any]:
    """``data`` (dictionary.json, read from ``path``) when each field evalpack reads has the shape it writes
    (:data:`DICTIONARY_SHAPE`): the exports put its words in a database's schema and ``evalpack serve`` hands them to
    an agent; else EvalpackError naming the file and the key path."""
    _check_shape(data, DICTIONARY_SHAPE, "", Path(path))
    return data


def _key(where: str, name: Any) -> str:
    if isinstance(name, int):
        return f"{where}[{name}]"
    return f"{where}.{name}".lstrip(".") if _PLAIN_KEY.fullmatch(name) else f"{where}[{json.dumps(name)}]"


def _check_shape(value: Any, shape: Any, where: str, path: Path) -> None:
    def refuse(what: str) -> None:
        raise EvalpackError(f"{path}: {what}; {DAMAGED}")

    def expect(wanted: str) -> None:
        refuse(f"{where or 'the file'}: expected {wanted}, got {_NAMES.get(type(value), type(value).__name__)}")

    if isinstance(shape, Obj):
        if not isinstance(value, dict):
            expect(_NAMES[dict])
        for name in shape.required:
            if value.get(name) is None:
                refuse(f"{where} lacks {name}")
        fields = shape.fields or {}
        for name, item in value.items():
            inner = fields.get(name, shape.each)
            if inner is not None and not (item is None and name in shape.nullable):
                _check_shape(item, inner, _key(where, name), path)
    elif isinstance(shape, Arr):
        if not isinstance(value, list):
            expect(_NAMES[list])
        for index, item in enumerate(value):
            _check_shape(item, shape.item, _key(where, index), path)
    elif isinstance(shape, Dotted):
        if not isinstance(value, str) or "." not in value:
            expect("a text table.column")
    else:
        kinds = shape if isinstance(shape, tuple) else (shape,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            expect(" or ".join(_NAMES[k] for k in kinds))
