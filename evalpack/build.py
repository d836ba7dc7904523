"""Build a pack: plan, generate every rotation, derive and verify questions, certify, attest.

The CLI and the Dagster assets call these functions; a pack is written to a temporary folder
beside the target and renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import multiprocessing
import os
import secrets
import shutil
import signal
import stat
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from evalpack import debris
from evalpack.attest import load_signer, now_utc, write_attestation
from evalpack.audit import Finding, Run, audit_rotation, in_question_order, seal_findings
from evalpack.cache import cache_dir
from evalpack.certify import certificate, dumps, manifest, pack_warnings
from evalpack.diff import changes_since
from evalpack.errors import EvalpackError, SpecError
from evalpack.gcpause import gc_paused
from evalpack.holdout import KEY_README, RECEIVED_KEY_README, read_previous, seal, write_key
from evalpack.hubfiles import write_questions_parquet
from evalpack.layout import ATTESTATION, CARD, CERTIFICATE, MANIFEST, QUESTIONS, PackLayout, rotation_name
from evalpack.layout import SCORER as SCORER_FILE
from evalpack.nearmiss import Mutant, MutantSet, prepare_mutants, still_studied, study_outcomes, summarize_study
from evalpack.plan import RotationPlan, plan_pack
from evalpack.questions import (
    PreviousSplits,
    Question,
    Selection,
    derive_declines,
    derive_selected,
    rotation_answers,
)
from evalpack.scoring import HOLDOUT_FILE, b64decode, holdout_key_beside, printable, read_envelope, walk_pack
from evalpack.spec import Spec, load_spec
from evalpack.tables import duckdb_types, write_rotation, write_table
from evalpack.verify import Link, Observation, OnDemand, Verdict, tables_digest, verify_rotation

SCORER = Path(__file__).with_name("scoring.py")
Progress = Callable[[int, str, int], None]
# below this many rows a rotation is small: written in this process unless the caller's worker processes are
# already running (starting some for it would cost more than it saves), and checked with the other rotations
# open at once (see check_rotations)
PARALLEL_MIN_ROWS = 250_000


@dataclass(frozen=True)
class BuildResult:
    path: Path
    spec: Spec
    verdicts: tuple[Verdict, ...]
    rows: dict[str, dict[str, int]]
    near_miss: dict
    warnings: tuple[str, ...]
    audit: tuple = ()
    selection: Selection | None = None
    declines: tuple[Question, ...] = ()  # shipped beside the verified questions: declining is their answer

    @property
    def shipped(self) -> list[Question]:
        return [v.question for v in self.verdicts if v.ships]


def links_of(spec: Spec) -> tuple[Link, ...]:
    """Every declared parent -> child key, for the orphan check."""
    return tuple(Link(r.child_table, r.child_column, r.parent_table, r.parent_column) for r in spec.relationships)


def _write_one(args: tuple) -> tuple[int, str, int]:
    spec, plan, table, folder = args
    return plan.seed, table, write_table(spec, plan, table, Path(folder))


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int) -> None:
    """Have Linux SIGKILL this worker when ``parent`` (the build that forked it) dies, so a killed build's
    writers do not write on; then check that it has not died already, before the request."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no such request, workers outlive a killed build there
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _start_worker(parent: int) -> None:
    """Pool initializer: :func:`_die_with` ``parent``; the objects inherited from the build are left out of
    garbage collection, which would otherwise walk them again and again (and copy every page it touches), and
    young objects are collected 70 times less often: preparing mutants makes many (:mod:`evalpack.gcpause`)."""
    _die_with(parent)
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _worker_context() -> multiprocessing.context.BaseContext | None:
    """The workers are the build's own children (fork, Python 3.11's default on Linux, pinned because
    :func:`_die_with` watches the parent: a forkserver's children would watch the server)."""
    return multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None


def worker_pool(jobs: int) -> contextlib.AbstractContextManager[ProcessPoolExecutor | None]:
    """``jobs`` worker processes as a context manager, started now (before the caller starts threads of its own,
    which a fork would not carry over) and, on Linux, dying with the build even when it is killed with SIGKILL.
    It gives None (the caller works in its own process) for one job, and in a process that may not have children
    (a daemonic one: a Dask worker's, another pool's worker)."""
    if jobs <= 1 or multiprocessing.current_process().daemon:
        return contextlib.nullcontext()
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_worker_context(), initializer=_start_worker,
                               initargs=(os.getpid(),))
    pool.submit(int).result()  # the fork context starts every worker at the first task
    return pool


def write_rotations(spec: Spec, plans: tuple[RotationPlan, ...], folder: Path, jobs: int = 1,
                    progress: Progress | None = None, pool: ProcessPoolExecutor | None = None
                    ) -> dict[str, dict[str, int]]:
    """Write every rotation's tables, in ``jobs`` worker processes: those of ``pool`` when given (whatever
    the size: they are running already, and this process derives the questions meanwhile), else, for large
    packs, a :func:`worker_pool` of their own.

    Each (rotation, table) is one task, largest first, so that three rotations keep two cores busy
    to the end; every file depends only on its own plan, so the bytes do not depend on the order."""
    rows_per_rotation = sum(t.rows for t in plans[0].tables)
    if jobs <= 1 or len(plans) == 1 or (rows_per_rotation < PARALLEL_MIN_ROWS and pool is None):
        return {p.rotation: write_rotation(spec, p, folder, progress) for p in plans}
    tasks = sorted(((spec, p, t.name, str(folder)) for p in plans for t in p.tables),
                   key=lambda task: -task[1].table(task[2]).rows)
    rows: dict[str, dict[str, int]] = {p.rotation: {} for p in plans}
    with contextlib.nullcontext(pool) if pool else worker_pool(jobs) as workers:
        written = workers.map(_write_one, tasks) if workers else map(_write_one, tasks)
        for seed, table, count in written:
            rows[rotation_name(seed)][table] = count
            if progress:
                progress(seed, table, count)
    # the manifest lists tables in spec order
    return {name: {t.name: counts[t.name] for t in spec.tables} for name, counts in rows.items()}


@dataclass(frozen=True)
class Derived:
    """What the declarations alone give: the questions, and the near-miss mutants of their gold SQL."""

    plans: tuple[RotationPlan, ...]
    questions: tuple[Question, ...]
    mutants: MutantSet
    selection: Selection | None = None  # how questions: chose them (None: the questions were given)
    previous: PreviousSplits | None = None  # the version whose splits these continue
    declines: tuple[Question, ...] = ()  # the questions to decline: no gold SQL, nothing to verify or mutate

    def plan(self, seed: int) -> RotationPlan:
        return next(p for p in self.plans if p.seed == seed)


def later_answers(spec: Spec, plans: tuple[RotationPlan, ...], workers: ProcessPoolExecutor | None
                  ) -> list[Future] | None:
    """The answers of the rotations after the first (:func:`evalpack.questions.rotation_answers`), submitted to
    ``workers`` now, ahead of what is submitted after: :func:`select_questions` takes them as ``later`` and
    derives the first rotation's questions meanwhile. None without workers (it works them out itself)."""
    return [workers.submit(rotation_answers, spec, plan) for plan in plans[1:]] if workers else None


def select_questions(spec: Spec, plans: tuple[RotationPlan, ...], previous: PreviousSplits | None = None,
                     later: Sequence[Future] | None = None
                     ) -> tuple[tuple[Question, ...], tuple[Question, ...], Selection]:
    """(the questions with gold SQL, the questions to decline, how they were selected); ``later``: from
    :func:`later_answers`."""
    with gc_paused():
        selected, selection = derive_selected(spec, plans, previous, later)
    if not selected:
        raise SpecError(str(spec.path), None, "", "declares no fact a question can ask about (an outcome curve, a "
                        "rate curve, a relationship, a ledger or a waterfall), so no question can be derived; add "
                        "one, e.g. outcome_curves with monthly targets on a measure (README.md, 'Writing a spec')")
    return selected, derive_declines(spec, plans, len(selected)), selection


def derive(spec: Spec, plans: tuple[RotationPlan, ...], previous: PreviousSplits | None = None, jobs: int = 1
           ) -> Derived:
    """The questions of ``spec`` and their prepared mutants (pure: no row is read), in ``jobs`` worker processes;
    their splits continue ``previous``, the version this build follows (:func:`evalpack.questions.assign_splits`)."""
    with worker_pool(jobs) as workers:
        questions, declines, selection = select_questions(spec, plans, previous, later_answers(spec, plans, workers))
        mutants = prepare_mutants(spec, questions, duckdb_types(spec), workers)
    return Derived(plans, questions, mutants, selection, previous, declines)


@dataclass(frozen=True)
class RotationCheck:
    """What one rotation's pass found: every question's observation (in question order), the audit's
    findings for the questions that passed here, and the near-miss outcome of each of their mutants."""

    rotation: str
    observations: tuple[Observation, ...]
    findings: tuple[Finding, ...]
    outcomes: dict[Mutant, bool | None]


@dataclass(frozen=True)
class Verified:
    """One rotation's verification and audit, which need only the questions: every question's observation
    (in question order), the audit's findings, and the ids of the questions that passed there."""

    observations: tuple[Observation, ...]
    findings: tuple[Finding, ...]
    passed: frozenset[str]


def verify_and_audit(spec: Spec, questions: tuple[Question, ...], rotation: str,
                     con: duckdb.DuckDBPyConnection, tables: str | None = None) -> Verified:
    """Verification's golden checks of every question on a rotation's connection, then the audit's checks of
    the questions that passed (on verification's gold results: the same SQL on the same connection).
    ``tables``: the digest of the rotation's files, for the cache on disk (:func:`evalpack.verify.verify_rotation`)."""
    # which links have orphan rows is read from ``con`` only when a question's check runs (not found in the cache)
    observations = tuple(verify_rotation(con, questions, rotation, links_of(spec), tables=tables))
    passed = {q.id: o for q, o in zip(questions, observations) if o.passed}
    # what the certificate will record: verification's observation, through JSON
    recorded = {(qid, rotation): json.loads(json.dumps(o.value)) for qid, o in passed.items()}
    runs = {qid: Run(list(o.rows)) for qid, o in passed.items()}
    records = [q.to_record(spec.answers) for q in questions if q.id in passed]
    # every record audited passed verification's golden checks, which the audit takes as they are: it reads no link
    findings = audit_rotation(con, records, rotation, (), recorded, runs=runs, verified=frozenset(passed))
    return Verified(observations, tuple(findings), frozenset(passed))


def study_verified(spec: Spec, derived: Derived, seed: int, con: duckdb.DuckDBPyConnection,
                   verified: Verified, earlier: tuple[RotationCheck, ...] | None = None,
                   mutants: Callable[[], MutantSet] | None = None, tables: str | None = None) -> RotationCheck:
    """The near-miss study of the mutants of the questions that passed on a verified rotation, and the
    rotation's check (:func:`check_rotation` says what ``earlier`` and ``mutants`` do; ``tables`` is the digest
    of the rotation's files, for the cache on disk)."""
    rotation = rotation_name(seed)
    studied, _ = (mutants() if mutants else derived.mutants).of(verified.passed)
    if earlier is not None:
        studied = still_studied(studied, [c.outcomes for c in earlier])
    outcomes = study_outcomes(con, tables, rotation, {q.id: q for q in derived.questions}, studied, duckdb_types(spec))
    return RotationCheck(rotation, verified.observations, verified.findings, outcomes)


def check_rotation(spec: Spec, derived: Derived, pack_dir: Path, seed: int,
                   con: duckdb.DuckDBPyConnection | None = None,
                   earlier: tuple[RotationCheck, ...] | None = None,
                   mutants: Callable[[], MutantSet] | None = None) -> RotationCheck:
    """The unit of work per rotation, on its written tables loaded once into one connection with the
    engine's limits: verification's golden checks of every question, then, for the questions that
    passed, the audit's checks and the near-miss mutants (:func:`verify_and_audit`, :func:`study_verified`).
    ``evalpack build`` loops over it (:func:`check_rotations`); Dagster runs it as one step per rotation,
    with ``con`` from its DuckDB resource (the engine's limits are applied to it; it is closed after).

    With ``earlier`` (the checks of the rotations before this one, in seed order) only the mutants that
    matched on all of them are studied here: a mutant's study ends at its first mismatch
    (:func:`summarize_study`), so the outcomes here of the others would not change the study.
    Without it every mutant is studied, as Dagster's parallel steps must; the summary is the same.

    ``mutants`` (default: ``derived.mutants``) is called only once verification and the audit are done:
    ``evalpack build`` checks rotations while the mutants are still being prepared.

    The rotation is loaded only when a check runs (:class:`evalpack.verify.OnDemand`): with every question's
    observation and study outcomes in the cache on disk, for files byte for byte these, none does."""
    files = PackLayout(pack_dir).tables(seed)
    digest = cached_digest(files)
    with OnDemand(files, con=con) as con:
        verified = verify_and_audit(spec, derived.questions, rotation_name(seed), con, digest)
        return study_verified(spec, derived, seed, con, verified, earlier, mutants, digest)


def check_rotations(spec: Spec, derived: Derived, pack_dir: Path, seeds: Iterable[int],
                    mutants: Callable[[], MutantSet] | None = None, small: bool = False) -> tuple[RotationCheck, ...]:
    """:func:`check_rotation` of every rotation in seed order, each studying only what the rotations before it
    left. ``small`` rotations are opened together (their tables in memory at once): every one is verified and
    audited first, while the mutants may still be being prepared, and studied after; large ones are checked
    one at a time, so that memory stays that of one rotation. The checks are the same either way."""
    checks: tuple[RotationCheck, ...] = ()
    if not small:
        for seed in seeds:
            checks += (check_rotation(spec, derived, pack_dir, seed, earlier=checks, mutants=mutants),)
        return checks
    with contextlib.ExitStack() as opened:
        files = {seed: PackLayout(pack_dir).tables(seed) for seed in seeds}
        cons = {seed: opened.enter_context(OnDemand(files[seed])) for seed in seeds}
        digests = {seed: cached_digest(files[seed]) for seed in seeds}
        verified = {seed: verify_and_audit(spec, derived.questions, rotation_name(seed), con, digests[seed])
                    for seed, con in cons.items()}
        for seed, con in cons.items():
            checks += (study_verified(spec, derived, seed, con, verified[seed], checks, mutants, digests[seed]),)
    return checks


def cached_digest(tables: Path) -> str | None:
    """The digest of a rotation's files (:func:`evalpack.verify.tables_digest`) when the cache on disk is on (it
    keys the cache's entries), else None: hashing the files costs time (0.2 s of CPU a 4M-row rotation)."""
    return tables_digest(tables) if cache_dir() else None


@dataclass(frozen=True)
class Checked:
    """What the passes over the rotations found, together."""

    verdicts: tuple[Verdict, ...]
    near_miss: dict
    findings: tuple[Finding, ...]  # the audit's, for the questions that ship

    @property
    def shipped(self) -> tuple[str, ...]:
        return tuple(v.question.id for v in self.verdicts if v.ships)


def combine_rotations(spec: Spec, derived: Derived, checks: list[RotationCheck]) -> Checked:
    """Every rotation's pass (in seed order) into the verdicts, the near-miss study of the questions that
    ship and their audit findings. Raises EvalpackError (exit 1) when no question verifies on every rotation."""
    questions = derived.questions
    verdicts = tuple(Verdict(q, tuple(c.observations[i] for c in checks)) for i, q in enumerate(questions))
    shipped = tuple(v.question.id for v in verdicts if v.ships)
    if not shipped:
        reasons = Counter(v.drop_reason for v in verdicts)
        raise EvalpackError(f"{spec.path}: no question verified on every rotation, so there is no pack to "
                            f"ship (drop reasons: {dict(reasons)})", exit_code=1)
    near_miss = summarize_study(derived.mutants, shipped, {c.rotation: c.outcomes for c in checks},
                                kinds={q.id: q.kind for q in questions},
                                withheld={q.id for q in questions if q.split == "holdout"})
    keep = set(shipped)
    return Checked(verdicts, near_miss, tuple(f for c in checks for f in c.findings if f.question in keep))


def pack_findings(folder: Path, checked: Checked) -> tuple[Finding, ...]:
    """The audit `evalpack audit` runs, for a pack just written: its query checks ran in the passes over
    the rotations; the seals are checked on the written questions."""
    records = PackLayout(folder).read_records()
    return tuple(in_question_order(records, seal_findings(records) + list(checked.findings)))


def assemble_pack(folder: Path, records: list[dict], certificate_: dict, manifest_: dict) -> None:
    """The files every pack has besides its tables and attestation, for a build and an import alike:
    questions.jsonl (and its Parquet form for the Hub's loader, :mod:`evalpack.hubfiles`), certificate.json,
    manifest.json, README.md (the dataset card, rendered from those three) and verify.py."""
    from evalpack.card import hub_configs, rotated_answers, write_card

    layout = PackLayout(folder)
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    layout.questions.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    layout.certificate.write_bytes(dumps(certificate_))
    layout.manifest.write_bytes(dumps(manifest_))
    rotated = rotated_answers(manifest_)
    write_questions_parquet(folder, records, [(s.path, s.name if rotated else None) for s in hub_configs(manifest_)[0].splits])
    write_card(folder)  # deterministic, and attested with the rest
    shutil.copyfile(SCORER, layout.scorer)


def write_pack_files(folder: Path, spec: Spec, derived: Derived, verdicts: tuple[Verdict, ...],
                     rows: dict[str, dict[str, int]], near_miss: dict | None = None) -> None:
    """A built pack's questions.jsonl, certificate.json, manifest.json, README.md and verify.py, and beside
    it the holdout's answer key (:mod:`evalpack.holdout`): nothing in the pack gives a holdout answer away."""
    sealed = seal(spec, [v.question.to_record(spec.answers) for v in verdicts if v.ships] +
                  [q.to_record(spec.answers) for q in derived.declines], derived.previous)
    made = manifest(spec, derived.plans, verdicts, rows, duckdb_types(spec), near_miss,
                    selection=derived.selection.to_dict() if derived.selection else None, previous=derived.previous,
                    declines=derived.declines)
    if made.get("changelog") and derived.previous.folder:  # the full diff against the version it continues
        made["changelog"]["diff"] = changes_since(derived.previous.folder, list(sealed.public), made)
    if spec.exports:  # `exports:` written into the pack, verified in their dialects (evalpack.exports), attested with it
        from evalpack.exports import build_exports

        made["dialects"] = build_exports(folder, spec.exports, list(sealed.public), made)
    assemble_pack(folder, list(sealed.public), certificate(verdicts, [p.rotation for p in derived.plans]), made)
    write_key(folder, spec, sealed)


def continued_splits(spec: Spec, out: str | Path, previous: str | Path | None = None) -> PreviousSplits | None:
    """The splits a build continues: those of the pack at ``previous`` (EvalpackError when it is not a pack
    with question keys), else those of the pack of the same name at ``out`` that the build replaces. That pack,
    when it is of the spec's version, is the same version rebuilt: its splits are kept and what it records of the
    version it continues is carried over (:attr:`evalpack.questions.PreviousSplits.rebuilt`), so the same spec and
    seed give the same bytes however often they are built at the same ``out``."""
    if previous is not None:
        found = read_previous(previous)
        if found is None:
            raise EvalpackError(f"{previous}: not a pack with question keys (questions.jsonl with a `key` per "
                                "question and manifest.json); give the folder of the version this one follows")
        return found
    if is_pack(out) and (replaced := PackLayout(out).read_manifest()).get("pack") == spec.name:
        found = read_previous(out)
        if found is not None and found.version == spec.version:  # the same version rebuilt, not one it continues
            carried = {"continues": (replaced.get("splits") or {}).get("continues"),
                       "changelog": replaced.get("changelog")}
            return replace(found, folder="", rebuilt=json.dumps(carried, sort_keys=True))
        return found
    return None


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
PACK_FILES = frozenset({CARD, QUESTIONS, CERTIFICATE, MANIFEST, SCORER_FILE, ATTESTATION})


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
#: questions file as received (:func:`evalpack.holdout.write_key`, ``write_received_key``), which its README names
KEY_FILES = frozenset({HOLDOUT_FILE, "README.md"})
#: the line of a key's README (:data:`evalpack.holdout.KEY_README`, ``RECEIVED_KEY_README``) naming that file
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
    (one whose every check is in the cache does not). Live builds' folders are never touched (:mod:`evalpack.debris`)."""
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
    (:mod:`evalpack.debris`) until :func:`publish_dir` or :func:`discard`. First cleans up after dead builds
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


def build_pack(spec_path: str | Path, out: str | Path, *, seed: int | None = None, rotations: int | None = None,
               force: bool = False, jobs: int = 1, progress: Progress | None = None,
               signing_key: str | Path | None = None, previous: str | Path | None = None) -> BuildResult:
    """Build the pack of ``spec_path`` at ``out``. Raises EvalpackError (2: bad input, 1: no question ships).

    The questions' splits continue ``previous`` (an earlier version's pack folder), else the pack being
    replaced at ``out`` (:func:`continued_splits`); the holdout's answer key is written beside ``out``."""
    started = now_utc()
    spec = load_spec(spec_path, seed=seed, rotations=rotations)
    if spec.exports:  # a postgres export without a server to verify it fails now, not after the whole build
        from evalpack.exports import check_exports

        check_exports(spec.exports)
    splits = continued_splits(spec, out, previous)
    if signing_key:
        load_signer(signing_key)  # an unreadable or wrong key fails now, not after the whole build
    out = Path(out)
    staging = staging_dir(out, force, inputs=(spec_path,))
    try:
        plans = plan_pack(spec)
        with worker_pool(jobs) as workers, \
                ThreadPoolExecutor(1) as background:
            # the questions come from the declarations and mutating their gold SQL is pure Python:
            # both run while the rotations are written (one phase at a time keeps memory bounded:
            # writers and DuckDB never hold a large rotation at once); the questions first (the workers
            # work out the later rotations' answers before they write), so that the first rotation's
            # verification and audit, which need only them, run while the mutants are still being
            # prepared by the workers, after their writing
            selected = background.submit(select_questions, spec, plans, splits, later_answers(spec, plans, workers))
            prepared = background.submit(lambda: prepare_mutants(spec, selected.result()[0], duckdb_types(spec),
                                                                 workers))
            rows = write_rotations(spec, plans, staging, jobs, progress, workers)
            if workers:  # their work is done once the mutants are: their memory is not kept through the checks
                prepared.add_done_callback(lambda _: workers.shutdown(wait=False))
            questions, declines, selection = selected.result()
            pending = Derived(plans, questions, MutantSet((), ()), selection, splits, declines)
            checks = check_rotations(spec, pending, staging, [p.seed for p in plans], prepared.result,
                                     small=sum(t.rows for t in plans[0].tables) < PARALLEL_MIN_ROWS)
            derived = Derived(plans, questions, prepared.result(), selection, splits, declines)
            checked = combine_rotations(spec, derived, list(checks))
        verdicts, near_miss = checked.verdicts, checked.near_miss
        write_pack_files(staging, spec, derived, verdicts, rows, near_miss)
        findings = pack_findings(staging, checked)
        write_attestation(staging, spec, started=started, finished=now_utc(), signing_key=signing_key)
        publish_dir(staging, out)
    except BaseException:
        discard(staging)
        raise
    warnings = tuple(pack_warnings(spec, plans, verdicts))
    return BuildResult(out, spec, verdicts, rows, near_miss, warnings, findings, derived.selection, derived.declines)
