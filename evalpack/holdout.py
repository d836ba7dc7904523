"""The holdout stays private: what a public pack says about its holdout questions, and the answer key.

A holdout question ships in the public pack with its text, evidence and labels, but its gold SQL and
expected answer are withheld: in their place a ``commitment`` (:func:`evalpack.scoring.commitment`),
so the key can be revealed later and checked. The key is a folder beside the pack,
``PACK.holdout-key/`` (:func:`evalpack.scoring.holdout_key_beside`), holding ``holdout.jsonl`` (id, key,
gold SQL, expected answer, salt, commitment per question), the spec it was built from and a README. It
is never part of the pack, so neither the attestation nor ``evalpack publish`` ever carries it;
``evalpack publish --holdout-repo`` sends it to a separate private repo.

The salts are secret because the spec is: each is SHA-256 of the spec's bytes, the seed and the
question's key, and a question keeps its salt from version to version (:data:`SALT_RULE`). A pack with holdout questions therefore does not publish the spec's text either (it
declares the answers); its manifest keeps the spec's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalpack.layout import PackLayout
from evalpack.questions import PreviousSplits
from evalpack.scoring import (
    COMMITMENT_RULE,
    HOLDOUT_FILE,
    HOLDOUT_KEY_SUFFIX,
    WITHHELD,
    InputError,
    commitment,
    holdout_key_beside,
    jsonl_lines,
    with_holdout_key,
)
from evalpack.spec import Spec

SALT_RULE = ("a question of the version this one continues keeps its salt from that version's answer key; a new "
             "one gets SHA-256 (hex) of the UTF-8 bytes of 'evalpack-holdout-salt', the spec file's text, the seed and "
             "the question's key, joined by U+001F: secret as long as the spec is (the spec's text is not published "
             "when the pack has holdout questions)")
KEY_README = """# Holdout answer key of {name} {version}

Private. This folder holds the gold SQL and expected answers of the {count} holdout questions of the
pack `{name}` {version}. The public pack carries each holdout question's text and a commitment in place of
what is here; never publish this folder with it.

- `holdout.jsonl`: one record per holdout question: `id`, `key`, `gold_sql`, `expected_answer`, `salt`,
  `commitment`. The commitment is {rule}.
- `{spec_file}`: the spec the pack was built from (it declares the answers, so it is kept here, not in the pack).

Score the holdout with `evalpack score PACK --candidates FILE --holdout-key {folder}` or
`python PACK/verify.py --holdout-key {folder}`; every record is checked against its commitment first.
"""


@dataclass(frozen=True)
class Sealed:
    """A pack's question records as published, and the answer key of its holdout (empty without one)."""

    public: tuple[dict, ...]
    key: tuple[dict, ...]


def salt(spec: Spec, key: str) -> str:
    """The secret salt of one holdout question (:data:`SALT_RULE`)."""
    text = "\x1f".join(("evalpack-holdout-salt", spec.source, str(spec.seed), key))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(spec: Spec, records: list[dict], previous: PreviousSplits | None = None) -> Sealed:
    """Withhold the gold SQL and answer of every holdout record, committing to them. A question of the
    ``previous`` version keeps its salt there, so its commitment changes only when its gold SQL or answer do."""
    kept = dict(previous.salts) if previous else {}
    return _sealed(records, WITHHELD, lambda r: kept.get(r["key"]) or salt(spec, r["key"]),
                   lambda r: ({"key": r["key"]}, {}))


def _sealed(records: list[dict], hidden: tuple[str, ...], salt_of: Callable[[dict], str],
            around: Callable[[dict], tuple[dict, dict]]) -> Sealed:
    """Every holdout record with its ``hidden`` fields withheld behind a commitment (salted by ``salt_of``), and its
    key record: id, ``around``'s first mapping, the hidden fields, its second, salt and commitment."""
    public, key = [], []
    for r in records:
        if r.get("split") != "holdout":
            public.append(r)
            continue
        s = salt_of(r)
        promise = commitment(r, s)
        first, last = around(r)
        key.append({"id": r["id"], **first, **{k: r.get(k) for k in hidden}, **last, "salt": s, "commitment": promise})
        public.append({**{k: (None if k in hidden else v) for k, v in r.items()}, "commitment": promise})
    return Sealed(tuple(public), tuple(key))


def write_key(pack: Path, spec: Spec, sealed: Sealed) -> Path | None:
    """Write the answer key beside ``pack`` (replacing an older one there); remove a stale one when the
    pack has no holdout. Returns the key folder, or None."""
    spec_file = Path(spec.path).name if spec.path else f"{spec.name}.yaml"
    return _write_key(pack, sealed, {spec_file: spec.source.encode("utf-8")}, KEY_README.format(
        name=spec.name, version=spec.version, count=len(sealed.key), rule=COMMITMENT_RULE, spec_file=spec_file,
        folder=f"PACK{HOLDOUT_KEY_SUFFIX}"))


def _write_key(pack: Path, sealed: Sealed, files: dict[str, bytes], readme: str) -> Path | None:
    folder = holdout_key_beside(pack)
    if folder.exists():
        shutil.rmtree(folder)
    if not sealed.key:
        return None
    folder.mkdir()
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in sealed.key]
    (folder / HOLDOUT_FILE).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "README.md").write_text(readme, encoding="utf-8")
    return folder


# what an imported record holds besides its gold SQL and answer that shows them: what arrived, what the query
# returned (or why it failed), the second query and its answer, the rubric and the fields evalpack does not read
RECEIVED_WITHHELD = ("authored_answer", "observed_answer", "error", "check_sql", "check_answer", "criteria",
                     "failed_checks", "source_fields")
RECEIVED_SALT_RULE = ("SHA-256 (hex) of 'evalpack-holdout-salt', the questions file's bytes as received and the "
                      "question's id, joined by U+001F: secret as long as the file is (with a holdout it is kept in "
                      "the answer key, not in the pack)")
RECEIVED_KEY_README = """# Holdout answer key of {name}

Private. This folder holds the gold SQL and expected answers of the {count} holdout questions of the pack
`{name}`, imported from `{file}`. The public pack carries each holdout question's text and a commitment in place
of what is here; never publish this folder with it.

- `holdout.jsonl`: one record per holdout question: `id`, `gold_sql`, `expected_answer`, what the import found
  about it (`authored_answer`, `observed_answer`, `error`, `check_sql`, `check_answer`, `criteria`,
  `failed_checks`, `source_fields`, `next_step`), `salt` and `commitment`. The commitment is {rule}.
- `{file}`: the questions file as received, byte for byte (it holds every answer, so it is kept here, not in the
  pack's `as-received/`).

Score the holdout with `evalpack score PACK --candidates FILE --holdout-key {folder}` or
`python PACK/verify.py --holdout-key {folder}`; every record is checked against its commitment first.
"""


def seal_received(records: list[dict], received: bytes, notes: dict[str, str]) -> Sealed:
    """An imported pack's holdout, withheld as a built pack's is (:func:`seal`): the gold SQL and answer behind a
    commitment, and the import's own fields that show them (:data:`RECEIVED_WITHHELD`, and ``notes``: id -> what
    would make it scorable, which names what the query returned) in the key only (:data:`RECEIVED_SALT_RULE`)."""
    return _sealed(records, WITHHELD + RECEIVED_WITHHELD,
                   lambda r: hashlib.sha256(b"\x1f".join((b"evalpack-holdout-salt", received,
                                                         r["id"].encode("utf-8")))).hexdigest(),
                   lambda r: ({}, {"next_step": notes.get(r["id"])}))


def write_received_key(pack: Path, name: str, file_name: str, received: bytes, sealed: Sealed) -> Path | None:
    """An imported pack's answer key beside ``pack`` (:func:`write_key`), with the questions file as received."""
    return _write_key(pack, sealed, {file_name: received}, RECEIVED_KEY_README.format(
        name=name, count=len(sealed.key), file=file_name, rule=COMMITMENT_RULE, folder=f"PACK{HOLDOUT_KEY_SUFFIX}"))


def read_previous(pack: str | Path) -> PreviousSplits | None:
    """The splits an earlier version fixed (:class:`evalpack.questions.PreviousSplits`), from the pack at
    ``pack``; None when there is no pack there, or it predates question keys."""
    layout = PackLayout(pack)
    if not (layout.questions.is_file() and layout.manifest.is_file()):
        return None
    records = layout.read_records()
    if not records or not all(r.get("key") for r in records):
        return None
    manifest = layout.read_manifest()
    ever = set((manifest.get("splits") or {}).get("ever_holdout") or ())
    ever |= {r["key"] for r in records if r.get("split") == "holdout"}
    return PreviousSplits(str(manifest.get("version")), tuple((r["key"], r["split"]) for r in records),
                          frozenset(ever), _salts(pack, records), str(Path(pack).resolve()))


def _salts(pack: str | Path, records: list[dict]) -> tuple[tuple[str, str], ...]:
    """key -> salt from the answer key beside ``pack``, for the records it matches (none without a key)."""
    try:
        revealed = with_holdout_key(records, holdout_key_beside(pack))
    except InputError:
        return ()
    by_id = {r["id"]: r for r in revealed}
    lines = jsonl_lines((holdout_key_beside(pack) / HOLDOUT_FILE).read_text(encoding="utf-8"))
    entries = [json.loads(line) for line in lines if line.strip()]
    return tuple((by_id[e["id"]]["key"], e["salt"]) for e in entries if e["id"] in by_id)
