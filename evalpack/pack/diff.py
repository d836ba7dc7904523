"""Compare two versions of a pack (``evalpack diff OLD NEW``) and decide whether the new one may be released.

A side is a pack folder (a Hub revision ``hub:OWNER/NAME@REVISION`` is fetched into one by the publish layer,
``publish.revision``: the engine talks to no Hub). :func:`load_side` is the only function here that reads anything;
:func:`diff_packs`, :func:`format_diff` and :func:`gate` are pure.

Questions are matched by their record's ``key`` (the question's family and parameters, stable across
versions and wordings) when both packs have keys, else by ``id`` (older and imported packs); a record without
a key in a pack that has them is matched by its id. The diff reports questions added, removed and re-worded,
answers changed (for holdout questions of a public pack, whose answer is replaced by a ``commitment``, a
changed commitment), dev <-> holdout moves, the near-miss study's survival rate, tables and columns added,
removed or retyped, row counts per rotation, and the pack's name and version.

The release gate (:func:`gate`) blocks when (a) a holdout question became dev, (b) an answer (or a
commitment) changed while the version did not, (c) the near-miss survival rate rose by more than a margin
(percentage points): more plausible wrong queries would pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalpack.checks.nearmiss.rates import survival_rate
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import QUESTIONS, PackLayout
from evalpack.core.scoring import load_questions, printable, write_json_report

POLICIES = ("block", "warn", "off")
DEFAULT_MARGIN_POINTS = 1.0
COUNTS = ("mutants", "equivalent", "errored", "match_first", "match_all")


# --------------------------------------------------------------------------- loading (the only I/O)


@dataclass(frozen=True)
class PackSide:
    """One side of a comparison: what :func:`diff_packs` needs of a pack, read once.

    ``records`` maps each question's identity to its record: its ``key`` when ``identity`` is ``"key"``
    (a record without a key is under its id), else its ``id``. ``tables`` is the manifest's ``tables``
    (``columns``: name -> type, ``rows``: rotation -> rows); ``operators`` the near-miss study's counts per
    mutation operator (empty when the pack has no study, as imported packs)."""

    source: str
    name: str
    version: str
    identity: str
    records: Mapping[str, dict]
    tables: Mapping[str, Any]
    operators: Mapping[str, Mapping[str, int]]
    note: str | None = None

    def by_id(self) -> dict[str, dict]:
        """The records by their ``id`` (unique in a pack)."""
        return {r["id"]: r for r in self.records.values()}


def load_side(path: str | Path, *, source: str | None = None) -> PackSide:
    """Read one side from a pack folder (``source``: how to name it, default the path; a Hub revision is
    fetched into a folder by the publish layer, :func:`publish.revision.fetch_side`). Raises EvalpackError
    naming the source when it is not a pack."""
    folder = Path(path)
    source = source or str(path)
    layout = PackLayout(folder)
    if not folder.is_dir() or not layout.questions.is_file():
        raise EvalpackError(f"{source}: not a pack folder (no {QUESTIONS}); pass a folder `evalpack build` or "
                            f"`evalpack import` wrote, or hub:OWNER/NAME@REVISION")
    return side_of(source, load_questions(folder), layout.read_manifest())


def side_of(source: str, records: list[dict], manifest: dict) -> PackSide:
    """A side from a pack's question records and manifest already in memory (a build comparing the pack it
    is writing with the version it continues)."""
    identity, by_identity, note = _identify(records)
    study = manifest.get("near_miss_study") or {}
    return PackSide(source=source, name=str(manifest.get("pack", "")), version=str(manifest.get("version", "")),
                    identity=identity, records=by_identity, tables=manifest.get("tables") or {},
                    operators=study.get("operators") or {}, note=note)


def _identify(records: list[dict]) -> tuple[str, dict[str, dict], str | None]:
    """(identity, records by identity, note): by key when any record has one (a non-empty text) and keys are
    unique, a record without one by its id; else by id."""
    keys = [r.get("key") if isinstance(r.get("key"), str) and r.get("key") else None for r in records]
    if not any(keys):
        return "id", {r["id"]: r for r in records}, None
    keyed: dict[str, dict] = {}
    for record, key in zip(records, keys, strict=True):
        name = key or record["id"]
        if name in keyed:
            return "id", {r["id"]: r for r in records}, f"key {name!r} is not unique ({keyed[name]['id']}, {record['id']})"
        keyed[name] = record
    return "key", keyed, None


# --------------------------------------------------------------------------- the diff


@dataclass(frozen=True)
class QuestionChange:
    """One question found in a comparison. ``old``/``new`` are what changed (texts, answers, commitments,
    splits), absent for an added or removed question."""

    identity: str
    old_id: str | None
    new_id: str | None
    old: Any = None
    new: Any = None

    def label(self, identity: str) -> str:
        """How findings name the question: its id (old -> new when renumbered) and, matched by key, the key."""
        if self.new_id in (None, self.old_id):
            ids = self.old_id
        else:
            ids = self.new_id if self.old_id is None else f"{self.old_id} -> {self.new_id}"
        keyed = identity == "key" and self.identity not in (self.old_id, self.new_id)
        return printable(f"{ids} (key {self.identity})" if keyed else ids)


@dataclass(frozen=True)
class OperatorChange:
    """A near-miss operator whose counts differ (None: the operator is on one side only)."""

    operator: str
    old: Mapping[str, int] | None
    new: Mapping[str, int] | None


@dataclass(frozen=True)
class NearMiss:
    """The near-miss survival rate, percent of the mutants run (each operator's ``mutants``) that match on every
    rotation, for both sides (None without a study or mutants), its change in points and the changed operators."""

    old_pct: float | None
    new_pct: float | None
    change_points: float | None
    operators: tuple[OperatorChange, ...]


@dataclass(frozen=True)
class ColumnChange:
    table: str
    column: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class RowChange:
    table: str
    rotation: str
    old: int | None
    new: int | None


@dataclass(frozen=True)
class PackDiff:
    """Everything that differs between two sides; empty tuples where nothing did."""

    old_source: str
    new_source: str
    old_name: str
    new_name: str
    old_version: str
    new_version: str
    identity: str
    identity_note: str | None
    added: tuple[QuestionChange, ...]
    removed: tuple[QuestionChange, ...]
    reworded: tuple[QuestionChange, ...]
    answers: tuple[QuestionChange, ...]
    commitments: tuple[QuestionChange, ...]
    split_moves: tuple[QuestionChange, ...]
    not_compared: tuple[QuestionChange, ...]
    near_miss: NearMiss
    tables_added: tuple[str, ...]
    tables_removed: tuple[str, ...]
    columns: tuple[ColumnChange, ...]
    rows: tuple[RowChange, ...]

    @property
    def counts(self) -> dict[str, int]:
        """The number of findings of each kind."""
        return {"added": len(self.added), "removed": len(self.removed), "reworded": len(self.reworded),
                "answers": len(self.answers), "commitments": len(self.commitments),
                "split_moves": len(self.split_moves), "near_miss": len(self.near_miss.operators),
                "tables": len(self.tables_added) + len(self.tables_removed), "columns": len(self.columns),
                "rows": len(self.rows), "name": int(self.old_name != self.new_name),
                "version": int(self.version_changed)}

    @property
    def version_changed(self) -> bool:
        return self.old_version != self.new_version

    @property
    def differences(self) -> int:
        """The number of findings (each question, operator, table, column, row count, name and version)."""
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """The diff as JSON-ready data (see README "Comparing versions")."""
        data = asdict(self)
        question = ("added", "removed", "reworded", "answers", "commitments", "split_moves", "not_compared")
        return {
            "old": {"source": self.old_source, "name": self.old_name, "version": self.old_version},
            "new": {"source": self.new_source, "name": self.new_name, "version": self.new_version},
            "identity": self.identity, "identity_note": self.identity_note,
            "differences": self.differences, "counts": self.counts,
            "questions": {k: data[k] for k in question},
            "near_miss": data["near_miss"],
            "schema": {"tables_added": data["tables_added"], "tables_removed": data["tables_removed"],
                       "columns": data["columns"]},
            "rows": data["rows"],
        }


def diff_packs(old: PackSide, new: PackSide) -> PackDiff:
    """What changed from ``old`` to ``new``: questions (matched by key when both sides have keys, else by id),
    answers, splits, the near-miss study, tables, columns and row counts."""
    identity = "key" if old.identity == new.identity == "key" else "id"
    note = old.note or new.note or (None if old.identity == new.identity else
                                    f"{'old' if old.identity == 'id' else 'new'} pack has no question keys")
    before, after = (old.records, new.records) if identity == "key" else (old.by_id(), new.by_id())
    both = [k for k in after if k in before]
    added = tuple(_change(k, None, after[k], new=after[k].get("question")) for k in after if k not in before)
    removed = tuple(_change(k, before[k], None, old=before[k].get("question")) for k in before if k not in after)
    reworded, answers, commitments, moves, not_compared = [], [], [], [], []
    for k in both:
        a, b = before[k], after[k]
        if a.get("question") != b.get("question"):
            reworded.append(_change(k, a, b, old=a.get("question"), new=b.get("question")))
        if a.get("split") != b.get("split"):
            moves.append(_change(k, a, b, old=a.get("split"), new=b.get("split")))
        found = _answer_change(a, b)
        if found == "committed":
            commitments.append(_change(k, a, b, old=a.get("commitment"), new=b.get("commitment")))
        elif found == "answer":
            answers.append(_change(k, a, b, old=a.get("expected_answer"), new=b.get("expected_answer")))
        elif found == "not compared":
            not_compared.append(_change(k, a, b))
    near_miss = _near_miss(old.operators, new.operators)
    tables_added = tuple(t for t in new.tables if t not in old.tables)
    tables_removed = tuple(t for t in old.tables if t not in new.tables)
    shared = [t for t in new.tables if t in old.tables]
    columns = tuple(c for t in shared for c in _pairs(t, old.tables[t].get("columns"), new.tables[t].get("columns"),
                                                      ColumnChange))
    rows = tuple(r for t in shared for r in _pairs(t, old.tables[t].get("rows"), new.tables[t].get("rows"),
                                                   RowChange))
    return PackDiff(old_source=old.source, new_source=new.source, old_name=old.name, new_name=new.name,
                    old_version=old.version, new_version=new.version, identity=identity, identity_note=note,
                    added=added, removed=removed, reworded=tuple(reworded), answers=tuple(answers),
                    commitments=tuple(commitments), split_moves=tuple(moves), not_compared=tuple(not_compared),
                    near_miss=near_miss, tables_added=tables_added, tables_removed=tables_removed,
                    columns=columns, rows=rows)


def _change(identity: str, before: dict | None, after: dict | None, old: Any = None, new: Any = None) -> QuestionChange:
    return QuestionChange(identity, before and before["id"], after and after["id"], old, new)


def _answer_change(old: dict, new: dict) -> str | None:
    """``committed`` (both commitments given, different), ``answer`` (expected answers differ as JSON values),
    ``not compared`` (committed on one side, no answer on the other), else None."""
    committed = (old.get("commitment"), new.get("commitment"))
    if None not in committed:
        return "committed" if committed[0] != committed[1] else None
    answers = (old.get("expected_answer"), new.get("expected_answer"))
    if committed != (None, None) and None in answers:
        return "not compared"
    return None if same_json(*answers) else "answer"


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal: numbers by value (1 == 1.0) but never booleans, objects as
    mappings (key order ignored), arrays in order, text exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _pairs(table: str, old: Mapping | None, new: Mapping | None, kind: type) -> list:
    """One ``kind`` (ColumnChange, RowChange) per name whose value differs or is on one side only."""
    old, new = old or {}, new or {}
    names = list(old) + [n for n in new if n not in old]
    return [kind(table, n, old.get(n), new.get(n)) for n in names if old.get(n) != new.get(n)]


def survival_pct(operators: Mapping[str, Mapping[str, int]]) -> float | None:
    """Percent of the mutants run that match on every rotation (:func:`evalpack.checks.nearmiss.rates.survival_rate`,
    the manifest's ``match_all_rate``); None when none ran."""
    rate = survival_rate(operators)
    return None if rate is None else 100.0 * rate


def _near_miss(old: Mapping[str, Mapping[str, int]], new: Mapping[str, Mapping[str, int]]) -> NearMiss:
    before, after = survival_pct(old), survival_pct(new)
    names = list(old) + [n for n in new if n not in old]
    changed = tuple(OperatorChange(n, old.get(n), new.get(n)) for n in names
                    if {k: (old.get(n) or {}).get(k) for k in COUNTS} != {k: (new.get(n) or {}).get(k) for k in COUNTS}
                    or (n in old) != (n in new))
    return NearMiss(before, after, None if before is None or after is None else after - before, changed)


# --------------------------------------------------------------------------- text


def format_diff(diff: PackDiff) -> list[str]:
    """The diff as text: a header with the counts, then one finding a line; ``["no differences"]`` when none."""
    if not diff.differences:
        return ["no differences"]
    parts = [f"{n} {label}" for key, label in _LABELS if (n := diff.counts.get(key, 0))]
    matched = f"questions matched by {diff.identity}" + (f"; {diff.identity_note}" if diff.identity_note else "")
    lines = [printable(f"{diff.old_name} {diff.old_version} -> {diff.new_name} {diff.new_version}: "
                       f"{diff.differences} difference(s): {', '.join(parts)} ({matched})")]
    if diff.counts.get("name"):
        lines.append(printable(f"name: {diff.old_name} -> {diff.new_name}"))
    if diff.version_changed:
        lines.append(printable(f"version: {diff.old_version} -> {diff.new_version}"))
    name = diff.identity
    lines += [printable(f"added {q.label(name)}: {q.new}") for q in diff.added]
    lines += [printable(f"removed {q.label(name)}: {q.old}") for q in diff.removed]
    lines += [f"re-worded {q.label(name)}: {_json(q.old, None)} -> {_json(q.new, None)}" for q in diff.reworded]
    lines += [f"answer changed {q.label(name)}: {_json(q.old)} -> {_json(q.new)}" for q in diff.answers]
    lines += [f"answer or gold SQL changed (committed) {q.label(name)}: {q.old} -> {q.new}"
              for q in diff.commitments]
    lines += [f"split moved {q.label(name)}: {q.old} -> {q.new}" for q in diff.split_moves]
    nm = diff.near_miss
    if nm.operators:
        lines.append(f"near-miss survival: {_pct(nm.old_pct)} -> {_pct(nm.new_pct)}"
                     + ("" if nm.change_points is None else f" ({nm.change_points:+.2f} points)"))
        lines += [f"near-miss {o.operator}: {_counts(o.old)} -> {_counts(o.new)}" for o in nm.operators]
    lines += [printable(f"table added: {t}") for t in diff.tables_added]
    lines += [printable(f"table removed: {t}") for t in diff.tables_removed]
    for c in diff.columns:
        what = "column added" if c.old is None else "column removed" if c.new is None else "column type changed"
        types = c.new if c.old is None else c.old if c.new is None else f"{c.old} -> {c.new}"
        lines.append(printable(f"{what}: {c.table}.{c.column} {types}"))
    lines += [printable(f"rows {r.table} {r.rotation}: {_num(r.old)} -> {_num(r.new)}") for r in diff.rows]
    if diff.not_compared:
        lines.append(f"note: {len(diff.not_compared)} answer(s) not compared (committed on one side only): "
                     + ", ".join(q.label(name) for q in diff.not_compared))
    return lines


_LABELS = (("added", "added"), ("removed", "removed"), ("reworded", "re-worded"), ("answers", "answers changed"),
           ("commitments", "commitments changed"), ("split_moves", "split moves"),
           ("near_miss", "near-miss operators changed"), ("tables", "tables added/removed"),
           ("columns", "column changes"), ("rows", "row counts changed"), ("name", "name"), ("version", "version"))


def _json(value: Any, limit: int | None = 120) -> str:
    """A JSON value on one line, cut to ``limit`` characters (None: whole)."""
    text = printable(json.dumps(value, ensure_ascii=False))
    return text if limit is None or len(text) <= limit else text[:limit - 3] + "..."


def _pct(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}%"


def _num(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


def _counts(counts: Mapping[str, int] | None) -> str:
    if counts is None:
        return "none"
    return (f"{counts.get('match_all', 0)}/{counts.get('mutants', 0)} survive ({counts.get('equivalent', 0)} "
            f"equivalent, {counts.get('errored', 0)} errored, not run)")


# --------------------------------------------------------------------------- the release gate


@dataclass(frozen=True)
class GateResult:
    """The release gate's decision: ``blocked`` only under policy ``block``; one reason per offending question
    or figure (kept under ``warn``, none under ``off``)."""

    blocked: bool
    reasons: tuple[str, ...]
    policy: str = "block"


def gate(diff: PackDiff, margin_points: float = DEFAULT_MARGIN_POINTS, policy: str = "block") -> GateResult:
    """Decide whether ``diff``'s new side may be released: (a) no holdout question became dev, (b) no answer or
    commitment changed unless the version did, (c) near-miss survival not worse by more than ``margin_points``."""
    if policy not in POLICIES:
        raise EvalpackError(f"gate: {policy!r} is not a policy; use one of {', '.join(POLICIES)}")
    if not margin_points >= 0:
        raise EvalpackError(f"gate margin: {margin_points!r} is not a number of points >= 0")
    if policy == "off":
        return GateResult(False, (), policy)
    name = diff.identity
    reasons = [f"holdout leaked into dev: {q.label(name)}" for q in diff.split_moves
               if q.old == "holdout" and q.new == "dev"]
    if not diff.version_changed:
        reasons += [f"answer changed without a new version ({diff.new_version}): {q.label(name)}"
                    for q in diff.answers]
        reasons += [f"answer or gold SQL changed (committed) without a new version ({diff.new_version}): "
                    f"{q.label(name)}" for q in diff.commitments]
    change = diff.near_miss.change_points
    if change is not None and change > margin_points:
        reasons.append(f"near-miss survival worse by {change:.2f} points ({_pct(diff.near_miss.old_pct)} -> "
                       f"{_pct(diff.near_miss.new_pct)}; margin {margin_points:g})")
    return GateResult(policy == "block" and bool(reasons), tuple(reasons), policy)


def diff_command(old: PackSide, new: PackSide, json_path: str | Path | None = None) -> int:
    """``evalpack diff OLD NEW [--json FILE]``: print the differences; 0 when none, 1 when some (like diff(1))."""
    result = diff_packs(old, new)
    for line in format_diff(result):
        print(line)
    if json_path:
        write_json_report(json_path, result.to_dict())
    return 1 if result.differences else 0


def changes_since(folder: str | Path, records: list[dict], manifest: dict) -> dict | None:
    """What ``evalpack diff`` says between the pack at ``folder`` (the version a build continues) and the
    pack being written (its public ``records`` and ``manifest``), for its changelog: the counts and the text
    lines (no paths, so the same builds give the same bytes). None when ``folder`` is no longer a pack."""
    try:
        old = load_side(folder)
    except EvalpackError:
        return None
    found = diff_packs(old, side_of("this build", records, manifest))
    return {"counts": dict(found.counts), "lines": format_diff(found)}
