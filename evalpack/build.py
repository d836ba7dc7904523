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
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb

from evalpack.checks.audit import Finding, Run, audit_rotation, in_question_order, seal_findings
from evalpack.checks.nearmiss.gate import gate_summary, gated
from evalpack.checks.nearmiss.study import (
    Mutant,
    MutantSet,
    prepare_mutants,
    still_studied,
    study_outcomes,
    summarize_study,
)
from evalpack.checks.verification import Link, Observation, OnDemand, Verdict, tables_digest, verify_rotation
from evalpack.core.cache import cache_dir
from evalpack.core.errors import EvalpackError, SpecError
from evalpack.core.gcpause import gc_paused
from evalpack.core.layout import PackLayout, rotation_name
from evalpack.data.plan import RotationPlan, plan_pack
from evalpack.data.tables import duckdb_types, write_rotation, write_table
from evalpack.pack.attest import load_signer, now_utc, write_attestation
from evalpack.pack.certify import certificate, manifest, pack_warnings
from evalpack.pack.diff import changes_since
from evalpack.pack.folder import assemble_pack, discard, is_pack, publish_dir, staging_dir, write_dictionary
from evalpack.pack.holdout import read_previous, seal, write_key
from evalpack.questions.derive import (
    PreviousSplits,
    Question,
    Selection,
    derive_declines,
    derive_selected,
    rotation_answers,
)
from evalpack.spec.dictionary import build_dictionary
from evalpack.spec.model import Spec
from evalpack.spec.reader import load_spec

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
    young objects are collected 70 times less often: preparing mutants makes many (:mod:`evalpack.core.gcpause`)."""
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
    """The answers of the rotations after the first (:func:`evalpack.questions.derive.rotation_answers`), submitted to
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
    their splits continue ``previous``, the version this build follows (:func:`evalpack.questions.derive.assign_splits`)."""
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
    ``tables``: the digest of the rotation's files, for the cache on disk (:func:`evalpack.checks.verification.verify_rotation`)."""
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

    The rotation is loaded only when a check runs (:class:`evalpack.checks.verification.OnDemand`): with every question's
    observation and study outcomes in the cache on disk, for files byte for byte these, none does."""
    files = PackLayout(pack_dir).tables(seed)
    digest = cached_digest(files)
    with OnDemand(files, con=con) as con:
        verified = verify_and_audit(spec, derived.questions, rotation_name(seed), con, digest)
        return study_verified(spec, derived, seed, con, verified, earlier, mutants, digest)


@dataclass
class RotationsChecked:
    """The checks of the rotations one run has done so far in one process, for a run that checks its rotations one
    step at a time (Dagster's): which earlier checks a rotation may build on is decided here. All the rotations
    before it in seed order, when every one is done here: then only the mutants that matched on all of them are
    studied (as :func:`check_rotations` does); else none, and every mutant is studied (a step run in a process of
    its own, or ahead of an earlier seed). The study's summary is the same either way."""

    done: dict[int, RotationCheck] = field(default_factory=dict)

    def earlier(self, seed: int, seeds: Sequence[int]) -> tuple[RotationCheck, ...] | None:
        before = list(seeds)[:list(seeds).index(seed)]
        return tuple(self.done[s] for s in before) if all(s in self.done for s in before) else None

    def check(self, spec: Spec, derived: Derived, pack_dir: Path, seed: int,
              con: duckdb.DuckDBPyConnection | None = None) -> RotationCheck:
        """:func:`check_rotation` of ``seed``, building on what :meth:`earlier` allows; kept for the next."""
        checked = check_rotation(spec, derived, pack_dir, seed, con=con, earlier=self.earlier(seed, spec.seeds()))
        self.done[seed] = checked
        return checked


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
    """The digest of a rotation's files (:func:`evalpack.checks.verification.tables_digest`) when the cache on disk is on (it
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
    per_rotation = {c.rotation: c.outcomes for c in checks}
    verdicts = gated(tuple(Verdict(q, tuple(c.observations[i] for c in checks)) for i, q in enumerate(questions)),
                     derived.mutants, per_rotation, spec.near_miss_gate)
    shipped = tuple(v.question.id for v in verdicts if v.ships)
    if not shipped:
        reasons = Counter(v.drop_reason for v in verdicts)
        raise EvalpackError(f"{spec.path}: no question verified on every rotation, so there is no pack to "
                            f"ship (drop reasons: {dict(reasons)})", exit_code=1)
    near_miss = summarize_study(derived.mutants, shipped, per_rotation,
                                kinds={q.id: q.kind for q in questions},
                                withheld={q.id for q in questions if q.split == "holdout"})
    near_miss["gate"] = gate_summary(verdicts, spec.near_miss_gate)
    keep = set(shipped)
    return Checked(verdicts, near_miss, tuple(f for c in checks for f in c.findings if f.question in keep))


def pack_findings(folder: Path, checked: Checked) -> tuple[Finding, ...]:
    """The audit `evalpack audit` runs, for a pack just written: its query checks ran in the passes over
    the rotations; the seals are checked on the written questions."""
    records = PackLayout(folder).read_records()
    return tuple(in_question_order(records, seal_findings(records) + list(checked.findings)))


def write_pack_files(folder: Path, spec: Spec, derived: Derived, verdicts: tuple[Verdict, ...],
                     rows: dict[str, dict[str, int]], near_miss: dict | None = None) -> None:
    """A built pack's questions.jsonl, certificate.json, manifest.json, README.md and verify.py, and beside
    it the holdout's answer key (:mod:`evalpack.pack.holdout`): nothing in the pack gives a holdout answer away."""
    sealed = seal(spec, [v.question.to_record(spec.answers) for v in verdicts if v.ships] +
                  [q.to_record(spec.answers) for q in derived.declines], derived.previous)
    made = manifest(spec, derived.plans, verdicts, rows, duckdb_types(spec), near_miss,
                    selection=derived.selection.to_dict() if derived.selection else None, previous=derived.previous,
                    declines=derived.declines)
    if made.get("changelog") and derived.previous.folder:  # the full diff against the version it continues
        made["changelog"]["diff"] = changes_since(derived.previous.folder, list(sealed.public), made)
    write_dictionary(folder, build_dictionary(spec))
    if spec.exports:  # `exports:` written into the pack, verified in their dialects (evalpack.interop.exports), attested with it
        from evalpack.interop.exports import build_exports

        made["dialects"] = build_exports(folder, spec.exports, list(sealed.public), made)
    assemble_pack(folder, list(sealed.public), certificate(verdicts, [p.rotation for p in derived.plans]), made)
    write_key(folder, spec, sealed)


def continued_splits(spec: Spec, out: str | Path, previous: str | Path | None = None) -> PreviousSplits | None:
    """The splits a build continues: those of the pack at ``previous`` (EvalpackError when it is not a pack
    with question keys), else those of the pack of the same name at ``out`` that the build replaces. That pack,
    when it is of the spec's version, is the same version rebuilt: its splits are kept and what it records of the
    version it continues is carried over (:attr:`evalpack.questions.derive.PreviousSplits.rebuilt`), so the same spec and
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


def build_pack(spec_path: str | Path, out: str | Path, *, seed: int | None = None, rotations: int | None = None,
               force: bool = False, jobs: int = 1, progress: Progress | None = None,
               signing_key: str | Path | None = None, previous: str | Path | None = None) -> BuildResult:
    """Build the pack of ``spec_path`` at ``out``. Raises EvalpackError (2: bad input, 1: no question ships).

    The questions' splits continue ``previous`` (an earlier version's pack folder), else the pack being
    replaced at ``out`` (:func:`continued_splits`); the holdout's answer key is written beside ``out``."""
    started = now_utc()
    spec = load_spec(spec_path, seed=seed, rotations=rotations)
    if spec.exports:  # a postgres export without a server to verify it fails now, not after the whole build
        from evalpack.interop.exports import check_exports

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
