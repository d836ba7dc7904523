"""The holdout stays private: what a public pack says about its holdout questions, and the answer key.

A holdout question ships in the public pack with its text, evidence and labels, but its gold SQL and
expected answer are withheld: in their place a ``commitment`` (:func:`evalpack.core.scoring.commitment`),
so the key can be revealed later and checked. The key is a folder beside the pack,
``PACK.holdout-key/`` (:func:`evalpack.core.scoring.holdout_key_beside`), holding ``holdout.jsonl`` (id, key,
gold SQL, expected answer, salt, commitment per question), the spec it was built from and a README. It
is never part of the pack, so neither the attestation nor ``evalpack publish`` ever carries it;
``evalpack publish --holdout-repo`` sends it to a separate private repo.

The salts come from a secret the builder keeps (:func:`holdout_secret`), never from anything a reader of the pack
or of the spec has: each is HMAC-SHA256 of that secret and the pack's name, the seed and the question's key, and a
question keeps its salt from version to version (:data:`SALT_RULE`). The same spec, seed and secret give the
same bytes. A pack with holdout questions does not publish the spec's text either (it declares the answers); its
manifest keeps the spec's SHA-256.

Which questions are held out is :func:`evalpack.questions.derive.assign_splits`'s choice; :func:`derivable` checks a pack
for a holdout answer its dev answers give away (the build warns of any, :func:`evalpack.pack.certify.pack_warnings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import (
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
from evalpack.questions.derive import PreviousSplits, measure_of
from evalpack.spec.model import Spec

SECRET_ENV = "EVALPACK_HOLDOUT_SECRET"  # the file holding the builder's holdout secret, when not the default one
SECRET_FILE = "holdout.secret"  # the default one: in $XDG_CONFIG_HOME/evalpack, else ~/.config/evalpack
SECRET_BYTES = 32  # of randomness in a secret evalpack makes; a secret given must be at least this long
SALT_RULE = ("a question of the version this one continues keeps its salt from that version's answer key; a new "
             "one gets HMAC-SHA256 (hex), keyed with the builder's holdout secret, of the UTF-8 bytes of "
             "'evalpack-holdout-salt', the pack's name, the seed and the question's key, joined by U+001F. The "
             f"secret is the content (surrounding whitespace stripped) of the file ${SECRET_ENV} names, else of "
             f"$XDG_CONFIG_HOME/evalpack/{SECRET_FILE} (~/.config/evalpack/{SECRET_FILE}), made from "
             f"{SECRET_BYTES} random bytes on first use; it is in no file of the pack or of its answer key, so "
             "neither the pack nor the spec gives a salt away, and the same spec, seed and secret give the same bytes")
KEY_README = """# Holdout answer key of {name} {version}

Private. This folder holds the gold SQL and expected answers of the {count} holdout questions of the
pack `{name}` {version}. The public pack carries each holdout question's text and a commitment in place of
what is here; never publish this folder with it.

- `holdout.jsonl`: one record per holdout question: `id`, `key`, `gold_sql`, `expected_answer`, `salt`,
  `commitment`. The commitment is {rule}.
- `{spec_file}`: the spec the pack was built from (it declares the answers, so it is kept here, not in the pack).

The salts of new questions are HMAC-SHA256, keyed with the builder's holdout secret, of the pack's name, the
seed and each question's key (the pack's `manifest.json` -> `hashes.holdout_salt`). The secret is not here;
rebuilding this pack to the same bytes takes the same spec, seed and secret, the one whose id (SHA-256 of
'evalpack-holdout-secret-id' and the secret) is

    {secret_id}

Score the holdout with `evalpack score PACK --candidates FILE --holdout-key {folder}` or
`python PACK/verify.py --holdout-key {folder}`; every record is checked against its commitment first.
"""


@dataclass(frozen=True)
class Sealed:
    """A pack's question records as published, and the answer key of its holdout (empty without one)."""

    public: tuple[dict, ...]
    key: tuple[dict, ...]
    secret_id: str = ""  # which holdout secret salted the key's new questions (:func:`secret_id`)


def secret_path() -> Path:
    """Where the builder's holdout secret is kept: the file ``$EVALPACK_HOLDOUT_SECRET`` names, else
    ``$XDG_CONFIG_HOME/evalpack/holdout.secret`` (``~/.config/evalpack/holdout.secret``)."""
    configured = os.environ.get(SECRET_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base) / "evalpack" / SECRET_FILE


def holdout_secret() -> bytes:
    """The builder's holdout secret (:data:`SALT_RULE`): the content of :func:`secret_path`, surrounding whitespace
    stripped, made there (mode 0600, :data:`SECRET_BYTES` random bytes as hex) when the file does not exist yet.
    EvalpackError when it cannot be read or made, or is too short to be secret."""
    path = secret_path()
    try:
        data = path.read_bytes().strip()
    except FileNotFoundError:
        data = _make_secret(path)
    except OSError as exc:
        raise EvalpackError(f"{path}: cannot read the holdout secret ({exc.strerror or exc}); point "
                            f"${SECRET_ENV} at the file that holds it") from None
    if len(data) < SECRET_BYTES:
        raise EvalpackError(f"{path}: the holdout secret is too short ({len(data)} bytes; at least {SECRET_BYTES}): "
                            "anyone could try every one. Remove the file and evalpack makes one, or put "
                            f"{SECRET_BYTES} random bytes or more in it")
    return data


def _make_secret(path: Path) -> bytes:
    """A new secret written to ``path`` (mode 0600 from its first byte, folder 0700 when made here); when another
    build made one there first, that one."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = secrets.token_hex(SECRET_BYTES).encode("ascii") + b"\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp creates it 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(made)
            try:
                os.link(tmp, path)  # whole or not at all, never over one: two builds at once share the first
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links: created exclusively instead
                with contextlib.suppress(FileExistsError), \
                        os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                    handle.write(made)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return path.read_bytes().strip()
    except OSError as exc:
        raise EvalpackError(f"{path}: cannot make the holdout secret there ({exc.strerror or exc}); point "
                            f"${SECRET_ENV} at a file you can write, or at one that holds your secret") from None


def secret_id(secret: bytes) -> str:
    """A name for ``secret`` that gives nothing of it away: ``sha256:`` + SHA-256 of 'evalpack-holdout-secret-id',
    U+001F and the secret."""
    return "sha256:" + hashlib.sha256(b"evalpack-holdout-secret-id\x1f" + secret).hexdigest()


def salt(spec: Spec, key: str, secret: bytes | None = None) -> str:
    """The salt of a new holdout question (:data:`SALT_RULE`), with ``secret`` (default: :func:`holdout_secret`)."""
    message = "\x1f".join(("evalpack-holdout-salt", spec.name, str(spec.seed), key)).encode("utf-8")
    return hmac.new(holdout_secret() if secret is None else secret, message, hashlib.sha256).hexdigest()


def seal(spec: Spec, records: list[dict], previous: PreviousSplits | None = None,
         secret: bytes | None = None) -> Sealed:
    """Withhold the gold SQL and answer of every holdout record, committing to them. A question of the
    ``previous`` version keeps its salt there, so its commitment changes only when its gold SQL or answer do; a new
    one is salted with ``secret`` (default: the builder's, :func:`holdout_secret`, read only when a pack has
    holdout questions)."""
    kept = dict(previous.salts) if previous else {}
    if secret is None and any(r.get("split") == "holdout" for r in records):
        secret = holdout_secret()
    sealed = _sealed(records, WITHHELD, lambda r: kept.get(r["key"]) or salt(spec, r["key"], secret),
                     lambda r: ({"key": r["key"]}, {}))
    return Sealed(sealed.public, sealed.key, secret_id(secret) if secret is not None else "")


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
        folder=f"PACK{HOLDOUT_KEY_SUFFIX}", secret_id=sealed.secret_id or "none: every salt was kept"))


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
    """The splits an earlier version fixed (:class:`evalpack.questions.derive.PreviousSplits`), from the pack at
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


# --------------------------------------------------------------------------- derivable holdout answers
# Whether the public pack gives a holdout answer away by the families' own arithmetic: a holdout number that
# equals a dev number, or a sum or difference of up to DERIVABLE_TERMS dev numbers of the same measure (a quarter
# is its months, a month is its quarter minus the other two, a part is its total minus the others), the table's
# row count (in the manifest) counting as a dev number; a number of SHARED_NUMBER_CHARS characters or more that
# a dev answer of any measure holds too. The numbers of an answer are its scalar or every number in its rows.

DERIVABLE_TERMS = 3
ROWS_TERM = "rows:"  # a table's row count as a term: rows:TABLE
SHARED_NUMBER_CHARS = 5  # as JSON: a shorter number shared by two measures is chance, not arithmetic


@dataclass(frozen=True)
class Derivation:
    """A holdout number that public numbers give away: ``value`` = the signed ``terms`` (dev question ids, or
    ``rows:TABLE`` for a table's row count in the manifest), on ``rotation`` ("" when answers are shared)."""

    question: str
    key: str
    rotation: str
    value: str
    terms: tuple[str, ...]

    def __str__(self) -> str:
        on = f" on {self.rotation}" if self.rotation else ""
        ordered = sorted(self.terms, key=lambda t: t.startswith("-"))  # what is added, then what is taken away
        sum_ = " ".join(ordered).removeprefix("+ ")
        return f"{self.question} ({self.key}): its answer's {self.value} is {sum_}{on}"


def _numbers(value: object) -> list[tuple[Decimal, str]]:
    """Every number of an answer, exactly as written in JSON, with where it is: "" for a scalar answer, " row N"
    for a number in the N-th row of a result set."""
    if isinstance(value, (list, tuple)):
        return [(n, f" row {i}") for i, row in enumerate(value, 1) for n, _ in _numbers(row)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return [(Decimal(json.dumps(value)), "")]
    return []


def _per_rotation(record: dict, rotated: bool) -> list[tuple[str, object]]:
    answer = record.get("expected_answer")
    if rotated and isinstance(answer, dict):
        return sorted(answer.items())
    return [("", answer)]


def _scaled(value: Decimal, places: int) -> int:
    return int(value.scaleb(places))


def _places(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


class _Bucket:
    """The dev numbers of one measure on one rotation (a table's row counts among them, at most one of which a sum
    may use: with shared answers they are every rotation's), and the sums of their pairs (made when first asked)."""

    def __init__(self) -> None:
        self.dev: list[tuple[Decimal, str]] = []
        self._scale: int | None = None
        self._ints: list[int] = []
        self._counts: list[bool] = []
        self._by_value: dict[int, list[int]] = {}
        self._pairs: dict[int, list[tuple[int, int, int, int]]] | None = None

    def _ready(self, scale: int) -> None:
        if self._scale == scale and len(self._ints) == len(self.dev):
            return
        self._scale, self._pairs = scale, None
        self._ints = [_scaled(v, scale) for v, _ in self.dev]
        self._counts = [label.startswith(ROWS_TERM) for _, label in self.dev]
        self._by_value = {}
        for i, v in enumerate(self._ints):
            self._by_value.setdefault(v, []).append(i)

    def _apart(self, *terms: tuple[int, int]) -> bool:
        """Whether signed terms (sign, index) are distinct numbers, none cancelling another, one row count at most."""
        indexes = [i for _, i in terms]
        if len(set(indexes)) < len(indexes) or sum(self._counts[i] for i in indexes) > 1:
            return False
        return not any(s != t and self._ints[i] == self._ints[j] for n, (s, i) in enumerate(terms)
                       for t, j in terms[n + 1:])

    def _pair_sums(self) -> dict[int, list[tuple[int, int, int, int]]]:
        if self._pairs is None:
            pairs: dict[int, list[tuple[int, int, int, int]]] = {}
            ints = self._ints
            for i in range(len(ints)):
                for j in range(i + 1, len(ints)):
                    if self._counts[i] and self._counts[j]:
                        continue
                    for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                        if si != sj and ints[i] == ints[j]:
                            continue  # they cancel: nothing is derived from a - a
                        found = pairs.setdefault(si * ints[i] + sj * ints[j], [])
                        if len(found) < 4:
                            found.append((si, i, sj, j))
            self._pairs = pairs
        return self._pairs

    def derive(self, value: Decimal, most: int) -> tuple[str, ...] | None:
        """Signed terms of at most ``most`` dev numbers (:meth:`_apart`) summing to ``value``, or None."""
        if not self.dev:
            return None
        self._ready(max([_places(value)] + [_places(v) for v, _ in self.dev]))
        target, ints, labels = _scaled(value, self._scale), self._ints, [label for _, label in self.dev]

        def named(*terms: tuple[int, int]) -> tuple[str, ...]:
            return tuple(f"{'+' if sign > 0 else '-'} {labels[i]}" for sign, i in terms)

        for sign in (1, -1):
            if sign * target in self._by_value:
                return named((sign, self._by_value[sign * target][0]))
        if most >= 2:
            for i, v in enumerate(ints):
                for si in (1, -1):
                    for sj in (1, -1):
                        for j in self._by_value.get(sj * (target - si * v), ()):
                            if self._apart((si, i), (sj, j)):
                                return named((si, i), (sj, j))
        if most >= 3:
            pairs = self._pair_sums()
            for k, v in enumerate(ints):
                for sk in (1, -1):
                    for si, i, sj, j in pairs.get(target - sk * v, ()):
                        if self._apart((si, i), (sj, j), (sk, k)):
                            return named((si, i), (sj, j), (sk, k))
        return None


def _text(value: Decimal) -> str:
    """A number as plain decimal text, without trailing zeros (40000 and 40000.0 are one number)."""
    return format(value.normalize(), "f")


def derivable(records: list[dict], rows: dict[str, dict[str, int]] | None = None, rotated: bool = False,
              most: int = DERIVABLE_TERMS) -> list[Derivation]:
    """Every holdout number of ``records`` (question records with the holdout's answers revealed, as
    :func:`evalpack.core.scoring.with_holdout_key` gives them) that the dev records' answers give away: equal to a dev
    number, or the sum or difference of up to ``most`` dev numbers, of the same measure
    (:func:`evalpack.questions.derive.measure_of`); ``rows`` (table -> rotation -> row count, the manifest's) count as dev
    numbers of their table's measures. A number of :data:`SHARED_NUMBER_CHARS` characters or more is given away by
    any dev answer of any measure holding it. ``rotated``: each record's answer maps rotation -> answer, and each
    rotation is checked on its own. One derivation per holdout number (the first found), in record order."""
    rows = rows or {}
    buckets: dict[tuple[str, str], _Bucket] = {}
    shared: dict[tuple[str, str], str] = {}
    for table, by_rotation in sorted(rows.items()):
        for rotation, count in sorted(by_rotation.items()):
            if len(str(count)) >= SHARED_NUMBER_CHARS:
                shared.setdefault((rotation if rotated else "", str(count)), ROWS_TERM + table)

    def bucket(rotation: str, measure: str) -> _Bucket:
        if (rotation, measure) not in buckets:
            made = buckets[(rotation, measure)] = _Bucket()
            table = measure.split(".")[0]
            counts = {c for on, c in (rows.get(table) or {}).items() if not rotated or on == rotation}
            made.dev += [(Decimal(c), ROWS_TERM + table) for c in sorted(counts)]
        return buckets[(rotation, measure)]

    held: list[tuple[dict, str, Decimal]] = []
    for r in records:
        if r.get("answerable") is False:
            continue
        for rotation, answer in _per_rotation(r, rotated):
            numbers = _numbers(answer)
            if r.get("split") == "holdout":
                held += [(r, rotation, n) for n in dict.fromkeys(n for n, _ in numbers)]
                continue
            dev = bucket(rotation, measure_of(r.get("key") or r["id"])).dev
            for n, where in numbers:
                dev.append((n, r["id"] + where))
                if len(_text(n)) >= SHARED_NUMBER_CHARS:
                    shared.setdefault((rotation, _text(n)), r["id"] + where)
    out = []
    for r, rotation, value in held:
        terms = (f"+ {shared[(rotation, _text(value))]}",) if (rotation, _text(value)) in shared else None
        if terms is None:
            terms = bucket(rotation, measure_of(r.get("key") or r["id"])).derive(value, most)
        if terms is not None:
            out.append(Derivation(r["id"], r.get("key", ""), rotation, _text(value), terms))
    return out


def derivable_in_pack(pack: str | Path, holdout_key: str | Path | None = None,
                      most: int = DERIVABLE_TERMS) -> list[Derivation]:
    """:func:`derivable` on a built pack and its answer key (beside it unless ``holdout_key``): what its public
    files give away of its holdout answers. InputError when the key does not match the pack."""
    layout = PackLayout(pack)
    manifest = layout.read_manifest()
    records = layout.read_records()
    if any(r.get("split") == "holdout" for r in records):
        records = with_holdout_key(records, holdout_key if holdout_key is not None else holdout_key_beside(pack))
    rows = {name: {str(k): int(v) for k, v in (t.get("rows") or {}).items()}
            for name, t in (manifest.get("tables") or {}).items()}
    return derivable(records, rows, rotated=manifest.get("answers") == "rotated", most=most)
