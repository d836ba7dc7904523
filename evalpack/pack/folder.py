"""A pack folder written whole or not at all, for a build and an import alike.

Takes the files of a pack (:func:`assemble_pack`) and where it goes; gives a folder that is either the old pack or
the new one, never half of each: staged beside the target (:func:`staging_dir`), checked before anything is replaced
(``--force`` replaces only an empty folder or a pack evalpack wrote, :func:`check_output`; the holdout answer key
beside it only when wholly evalpack's, :func:`replaceable_key`), swapped in atomically (:func:`publish_dir`) and put
back after a crash between two renames (:func:`recover`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from evalpack.core import debris
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import (
    ATTESTATION,
    CARD,
    CERTIFICATE,
    DICTIONARY,
    DICTIONARY_MD,
    MANIFEST,
    QUESTIONS,
    PackLayout,
)
from evalpack.core.layout import SCORER as SCORER_FILE
from evalpack.core.scoring import HOLDOUT_FILE, b64decode, holdout_key_beside, printable, read_envelope, walk_pack
from evalpack.pack.certify import dumps
from evalpack.pack.holdout import KEY_README, RECEIVED_KEY_README
from evalpack.pack.hubfiles import write_questions_parquet

SCORER = Path(__file__).parents[1] / "core" / "scoring.py"  # copied into every pack as verify.py


def write_dictionary(folder: Path, dictionary) -> None:
    """The pack's data dictionary (:class:`evalpack.spec.dictionary.Dictionary`) as dictionary.json and
    dictionary.md; written before the exports and the card, which read it."""
    (folder / DICTIONARY).write_bytes(dumps(dictionary.as_json()))
    (folder / DICTIONARY_MD).write_text(dictionary.markdown() + "\n", encoding="utf-8")


def assemble_pack(folder: Path, records: list[dict], certificate_: dict, manifest_: dict) -> None:
    """The files every pack has besides its tables and attestation, for a build and an import alike:
    questions.jsonl (and its Parquet form for the Hub's loader, :mod:`evalpack.pack.hubfiles`), certificate.json,
    manifest.json, README.md (the dataset card, rendered from those three) and verify.py."""
    from evalpack.pack.card import hub_configs, part_of, write_card

    layout = PackLayout(folder)
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    layout.questions.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    layout.certificate.write_bytes(dumps(certificate_))
    layout.manifest.write_bytes(dumps(manifest_))
    for split in hub_configs(manifest_)[0].splits:  # the questions config: a file per part (and rotation)
        part = [r for r in records if part_of(r) == split.part]
        write_questions_parquet(folder, part, [(split.path, split.rotation)])
    write_card(folder)  # deterministic, and attested with the rest
    shutil.copyfile(SCORER, layout.scorer)



def _read_regular(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (not a link, a FIFO or a device: none is followed or
    waited on) of at most ``limit`` bytes (None: any size), else None."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = handle.read() if limit is None else handle.read(limit + 1)
        return data if limit is None or len(data) <= limit else None


def is_pack(folder: str | Path) -> bool:
    """Whether ``folder`` holds a pack evalpack wrote (built or imported): a questions.jsonl, and a
    manifest.json whose tool is evalpack, both regular files (a link or a FIFO is not followed)."""
    layout = PackLayout(folder)
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.lstat(layout.questions).st_mode):
            return False
        data = _read_regular(layout.manifest)
        tool = json.loads(data).get("tool") if data is not None else None
        return isinstance(tool, dict) and tool.get("name") == "evalpack"
    return False


#: the files evalpack writes at the top of every pack: a folder --force replaces may hold these and the files its
#: attestation lists, nothing else
PACK_FILES = frozenset({CARD, QUESTIONS, CERTIFICATE, MANIFEST, SCORER_FILE, ATTESTATION, DICTIONARY, DICTIONARY_MD})


def attested_names(folder: Path) -> frozenset[str]:
    """The names of the files that ``folder``'s attestation lists; none when it has no readable one (read as the
    scorer reads it: a link or a FIFO in its place is not opened)."""
    data, _ = read_envelope(folder)
    payload = b64decode(data["payload"]) if data is not None else None
    try:
        statement = json.loads(payload) if payload is not None else None
    except (ValueError, RecursionError):
        return frozenset()
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    return frozenset(s["name"] for s in subjects if isinstance(s, dict) and isinstance(s.get("name"), str)) \
        if isinstance(subjects, list) else frozenset()


def unexpected_entry(folder: Path) -> tuple[str, str] | None:
    """The first entry of ``folder`` (by name) that is not a file of a pack evalpack wrote, as (its name, what it
    is), or None: a symlink or special file anywhere (found without following or opening it), a file of a Hub
    download, or a file that is neither one evalpack writes at the top of a pack (:data:`PACK_FILES`) nor one the
    pack's attestation lists (a file a user put there, which --force must not delete)."""
    found = walk_pack(folder)
    odd = {**{name: "is a symlink or a special file, not a file evalpack writes" for name in found.refused},
           **{name.rstrip("/"): "belongs to a Hub download, not to a pack" for name in found.ignored}}
    if not odd:  # the attestation is read only when nothing in the folder can stall or redirect a read
        listed = attested_names(folder) | PACK_FILES
        odd = {name: f"is not a file of the pack (its {ATTESTATION} does not list it)"
               for name in found.files if name not in listed}
    return min(odd.items()) if odd else None


def check_replaceable(out: str | Path) -> None:
    """Refuse (EvalpackError) to replace the existing ``out`` unless it is an empty folder or entirely a pack
    evalpack wrote (:func:`is_pack`, and :func:`unexpected_entry` finds nothing): what ``--force`` replaces. A
    link or a file at ``out``, a folder that is not a pack, and a pack holding a link, a special file or a file
    of the user's are left alone, with one line naming what was found and what to do."""
    out = Path(out)
    if out.is_symlink() or not out.is_dir():
        raise EvalpackError(f"{out}: not a pack folder but a {'link' if out.is_symlink() else 'file'}; "
                            "--force replaces only a pack, so it was left alone: choose another -o")
    if not is_pack(out):
        if any(out.iterdir()):
            raise EvalpackError(f"{out}: not an evalpack pack (no questions.jsonl and manifest.json written by "
                                "evalpack), so --force left it alone: choose another -o or remove it yourself")
        return
    odd = unexpected_entry(out)
    if odd is not None:
        name, what = odd
        raise EvalpackError(f"{out / printable(name)}: {what}, so --force left {out} alone (it replaces only a "
                            "folder that is wholly a pack evalpack wrote): move that out of the pack, or choose "
                            "another -o")


#: the files evalpack writes into every holdout answer key; besides these it keeps one file there, the spec or the
#: questions file as received (:func:`evalpack.pack.holdout.write_key`, ``write_received_key``), which its README names
KEY_FILES = frozenset({HOLDOUT_FILE, "README.md"})
#: the line of a key's README (:data:`evalpack.pack.holdout.KEY_README`, ``RECEIVED_KEY_README``) naming that file
KEPT_LINES = tuple(line for template, field in ((KEY_README, "spec_file"), (RECEIVED_KEY_README, "file"))
                   for line in template.splitlines() if line.startswith(f"- `{{{field}}}`"))
KEY_README_MAX_BYTES = 1 << 20  # a README larger than this is not one evalpack wrote: it names no file


def _kept_by_key(key: Path, candidates: set[str]) -> set[str]:
    """Which of ``candidates`` (files of the answer key ``key``) its README names as the spec or the questions file
    evalpack keeps there, in evalpack's own line (:data:`KEPT_LINES`); the README is not followed through a link,
    waited on, nor read beyond :data:`KEY_README_MAX_BYTES`."""
    data = _read_regular(key / "README.md", KEY_README_MAX_BYTES)
    readme = set(data.decode("utf-8", "replace").splitlines()) if data is not None else set()
    return {name for name in candidates if any(line.format(spec_file=name, file=name) in readme for line in KEPT_LINES)}


def _listing(key: Path) -> dict[str, bool]:
    """The entries of the folder ``key``, each with whether it is a regular file (links not followed)."""
    with os.scandir(key) as entries:
        return {entry.name: entry.is_file(follow_symlinks=False) for entry in entries}


def unexpected_key_entry(key: Path, listing: dict[str, bool] | None = None) -> tuple[str, str] | None:
    """The first entry of the holdout answer key folder ``key`` (by name; of ``listing``, from :func:`_listing`, when
    given) that is not a file evalpack writes there, as (its name, what it is), or None: a symlink, a folder or a
    special file (found without following or opening it), or a file that is none of :data:`KEY_FILES` and the spec
    or questions file its README names (:func:`_kept_by_key`): a file a user put there, which a build must not
    delete."""
    try:
        entries = _listing(key) if listing is None else listing
    except OSError as exc:
        return "", f"cannot be read ({exc.strerror or exc})"
    odd = {name: "is a symlink, a folder or a special file, not a file evalpack writes into an answer key"
           for name, regular in entries.items() if not regular}
    if not odd:  # the README is read only when nothing in the key can stall or redirect a read
        others = set(entries) - KEY_FILES
        kept = _kept_by_key(key, others) if others and "README.md" in entries else set()
        if len(kept) > 1:  # evalpack keeps one such file, never two: which is the user's is not known
            kept = set()
        odd = {name: f"is not a file evalpack writes into a holdout answer key (only {HOLDOUT_FILE}, README.md and "
                     "the spec or questions file the README names)" for name in others - kept}
    return min(odd.items()) if odd else None


def replaceable_key(out: str | Path) -> tuple[str, ...]:
    """The entries of the holdout answer key beside ``out`` (``OUT.holdout-key``; none when there is none) that a
    build replacing it removes, when it is an empty folder or wholly a key evalpack wrote (:func:`unexpected_key_entry`
    finds nothing); else EvalpackError, one line naming what was found and what to do: a link or a file in its
    place, a folder without ``holdout.jsonl``, a key holding a link, a folder or a file of the user's are all left
    alone, with or without ``--force``."""
    key = holdout_key_beside(out)
    if not os.path.lexists(key):
        return ()
    if key.is_symlink() or not key.is_dir() or (not (key / HOLDOUT_FILE).is_file() and any(key.iterdir())):
        raise EvalpackError(f"{key}: where the pack's holdout answer key goes, but not one (no {HOLDOUT_FILE}), so it "
                            "was left alone: move it or choose another -o")
    try:
        listing = _listing(key)
    except OSError as exc:
        raise EvalpackError(f"{key}: the pack's holdout answer key cannot be read ({exc.strerror or exc}), so it was "
                            "left alone: move it or choose another -o") from None
    odd = unexpected_key_entry(key, listing)
    if odd is not None:
        name, what = odd
        raise EvalpackError(printable(f"{key / name}: {what}, so the pack's holdout answer key {key} was left alone "
                                      "(a build replaces only a key folder wholly evalpack's): move that out of the "
                                      "answer key, or choose another -o"))
    return tuple(sorted(listing))


def check_output(out: str | Path, force: bool = False, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse, before any work, a pack folder ``out`` that a build or an import cannot or must not write:
    the current folder, a folder holding it or one of ``inputs``, anything existing without ``force``,
    and with ``force`` anything but an empty folder or a folder that is wholly a pack evalpack wrote
    (:func:`check_replaceable`), which are all that ``--force`` replaces; a path through a file or a folder that
    cannot be written; anything but an answer key wholly evalpack's where the pack's key goes (``OUT.holdout-key``,
    :func:`replaceable_key`), which a build replaces with or without ``force``. Raises EvalpackError."""
    out = Path(out)
    replaceable_key(out)
    where = out.resolve()
    cwd = Path.cwd().resolve()
    if where == cwd or where in cwd.parents:
        raise EvalpackError(f"{out}: is the current folder or holds it; a pack needs a folder of its own: "
                            "choose another -o (e.g. -o packs/NAME)")
    for given in inputs:
        if where == Path(given).resolve() or where in Path(given).resolve().parents:
            raise EvalpackError(f"{out}: holds {given}, an input of this command; a pack needs a folder of "
                                "its own: choose another -o (e.g. -o packs/NAME)")
    if os.path.lexists(out):
        if not force:
            raise EvalpackError(f"{out}: already exists; choose another -o or pass --force to replace it "
                                "(--force replaces only a pack or an empty folder)")
        check_replaceable(out)
        return
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise EvalpackError(f"{out}: cannot create the pack folder, {parent} is a file; choose another -o")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise EvalpackError(f"{out}: cannot create the pack folder, {parent} is not writable; "
                                    "choose another -o")
            return


def recover(out: str | Path) -> Path | None:
    """Clean up after dead builds beside ``out``: remove their staging folders (of any pack in that folder),
    and their swapped-out packs of ``out`` (``.{name}.old-{pid}-*``) after putting the newest one back at
    ``out`` when a crash between the two renames of :func:`publish_dir` left ``out`` missing. Returns the
    folder put back, if any. Dead runs' DuckDB spill folders go too, whether or not this build opens a rotation
    (one whose every check is in the cache does not). Live builds' folders are never touched (:mod:`evalpack.core.debris`)."""
    out = Path(out)
    debris.sweep(out.parent, debris.staging_pattern())
    debris.sweep(tempfile.gettempdir(), debris.SPILL_PATTERN)
    olds = debris.dead_dirs(out.parent, debris.old_pattern(out.name))
    restored = None
    if olds and not os.path.lexists(out):
        try:
            newest = max(olds, key=lambda p: p.stat().st_ctime)  # the last renamed
            newest.rename(out)
            restored = out
            olds.remove(newest)
        except OSError:  # another build got there first
            return None
    for old in olds:
        shutil.rmtree(old, ignore_errors=True)
    return restored


def staging_dir(out: Path, force: bool, inputs: Iterable[str | Path] = ()) -> Path:
    """A fresh folder beside ``out`` to write a pack into, ``.{name}.evalpack-staging-{pid}-{random}``, held
    (:mod:`evalpack.core.debris`) until :func:`publish_dir` or :func:`discard`. First cleans up after dead builds
    beside ``out`` (:func:`recover`), then refuses what :func:`check_output` refuses."""
    out = Path(out)
    recover(out)
    check_output(out, force, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = debris.owned_dir(out.parent, f".{out.name}.{debris.STAGING}")
    except OSError as exc:
        raise EvalpackError(f"{out}: cannot create the pack folder in {out.parent} ({exc.strerror or exc}); "
                            "choose another -o, in a folder you can write") from None
    staging.chmod(0o755)  # mkdtemp makes it private; a pack is meant to be shared
    return staging


def discard(staging: Path) -> None:
    """Remove a staging folder of :func:`staging_dir` (a build that failed), and the answer key beside it."""
    debris.remove(staging)
    shutil.rmtree(holdout_key_beside(staging), ignore_errors=True)


def _move_key(staging: Path, out: Path, replaced: Iterable[str] = ()) -> None:
    """The holdout answer key written beside ``staging`` to its place beside ``out``, replacing an older one
    (a pack without holdout leaves none). Between the pack's swap and this, a key and a pack of different
    builds are refused by their commitments, never mixed. Of the older key only the entries ``replaced`` are
    removed, those :func:`replaceable_key` checked before the pack's swap: anything put there since is not deleted
    (EvalpackError, the older key left in place with it)."""
    source, target = holdout_key_beside(staging), holdout_key_beside(out)
    if os.path.lexists(target):
        for name in replaced:
            with contextlib.suppress(OSError):  # one replaced since by a folder stays, and so does the key
                os.unlink(target / name)
        try:
            target.rmdir()
        except OSError as exc:
            odd = unexpected_key_entry(target)
            what = f"{target / odd[0]}: {odd[1]} (put there while the pack was published)" if odd else \
                f"{target}: cannot be removed ({exc.strerror or exc})"
            raise EvalpackError(printable(f"{what}, so the older holdout answer key was left in place and the new one "
                                          f"was not written: move that out of {target} and build again")) from None
    if source.is_dir():
        source.rename(target)


RENAME_EXCHANGE = 2  # <linux/fs.h>
AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE). False where the system or the file
    system cannot; raises OSError for any other failure."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (38, 22, 95):  # ENOSYS, EINVAL (file system without it), EOPNOTSUPP
        return False
    raise OSError(errno, os.strerror(errno), str(a), None, str(b))


def publish_dir(staging: Path, out: Path) -> None:
    """Move a complete pack into place, replacing ``out`` only with a whole pack: with one atomic swap
    where Linux offers it, else with two renames (``out`` aside as ``.{name}.old-{pid}-*``, then the new
    one in), after which :func:`recover` puts the old one back if a crash fell between them. The old pack
    is then removed. What is at ``out`` and the answer key beside it are checked again first (:func:`check_replaceable`,
    :func:`replaceable_key`): a file a user put into the old pack or its key while the build ran is not deleted with
    it (EvalpackError; the new pack is not published)."""
    staging, out = Path(staging), Path(out)
    replaced = replaceable_key(out)  # the answer key beside is checked too, before anything is swapped or deleted
    if os.path.lexists(out):
        check_replaceable(out)
        old = out.with_name(f".{out.name}.{debris.OLD}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            debris.hold(out, key=old)  # the old pack is ours until removed, whatever its name
        except BlockingIOError:
            raise EvalpackError(f"{out}: another build is replacing it right now; try again when it is done") \
                from None
        try:
            if _exchange(staging, out):
                try:
                    staging.rename(old)  # the old pack, swapped to the staging name
                except OSError:
                    shutil.rmtree(staging, ignore_errors=True)
            else:
                out.rename(old)
                staging.rename(out)
        except BaseException:
            if not os.path.lexists(out) and old.is_dir():
                old.rename(out)  # the second rename failed: the old pack goes back
            debris.release(old)
            raise
        debris.remove(old)
    else:
        staging.rename(out)
    debris.release(staging)  # its lock followed the folder to ``out``
    _move_key(staging, out, replaced)


