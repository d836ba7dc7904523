"""Audit the golden queries of a pack: seals, empty results, drift, orphan dependence and ties.

``evalpack audit PACK`` (:func:`audit_pack`) reruns each gold query on each rotation's written
tables and reports, per question (every build runs the same per-rotation checks,
:func:`audit_rotation`, on the connection its verification pass already loaded, against what
verification observed, and checks the seals of the questions it wrote):

- ``seal``: the question text no longer hashes to its ``question_sha256`` (edited after sealing);
- ``error``: the gold query no longer runs;
- ``drift``: the answer differs from the value recorded when the pack was made (the certificate's
  observed value for built packs, ``observed_answer`` for imported ones);
- ``mismatch``: the answer differs from the expected answer (without drift: a disagreement already
  recorded at import, e.g. an authored number the query does not return);
- ``empty``: no rows, or only NULL, unless the question is marked ``expected_empty``;
- ``orphans``: rewritten to exclude child rows whose parent is missing, the query answers
  differently (both values are given), unless the question is about orphans;
- ``tie``: an ORDER BY ... LIMIT cuts between rows with equal sort keys that differ in what the
  query returns.

The three query checks are :func:`evalpack.checks.golden.check`, the same rules verification applies at
build time (README.md, "Golden checks"); this module only turns them into findings with evidence.

and, for imported packs, ``as_received``: the received file no longer has its recorded SHA-256.

Every gold query, and every query derived from one, runs in verify.py's sandbox in a worker process
(read-only, no file access, one SELECT, time-limited, under operating-system memory and CPU limits);
this process runs only the SQL it writes itself (table shapes, link counts).
Links for the orphan check come, in this order, from the spec's declared relationships (built
packs), from the source database's own foreign keys (recorded at import), and only then from the
data (:func:`infer_links`): a column of another table whose name names a unique key (``c_nationkey``
and ``n_nationkey``, ``film_id`` and ``films.id``), of the same type, whose distinct non-NULL values
are all found in that key, or at least 95 % of them (the orphan rate is then stated wherever the
link is shown). An inferred link is marked so in the manifest and in every finding it causes; a
table is never linked to itself, and no gold SQL is rewritten: a finding shows the query without
orphans for a person to judge.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from evalpack.checks import golden as golden_rules
from evalpack.checks.golden import Golden, Link, LinkCount, OrphanEffect, Run, Runner, count_orphans, counted, read_back
from evalpack.checks.verification import rotation_connection
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import (
    DEFAULT_TIMEOUT,
    ROWS_TYPE,
    Limits,
    SandboxWorker,
    answer_matches,
    answer_type_of,
    check_pack_entries,
    expected_for,
    load_questions,
    observed,
    printable,
    quote_ident,
    write_json_report,
)
from evalpack.core.scoring import run_query as run_untrusted

# the golden rules live in evalpack.checks.golden; these eight are re-exported for callers that import them from here
__all__ = ["Golden", "Link", "LinkCount", "OrphanEffect", "Run", "count_orphans", "counted", "read_back",
           "Finding", "audit_pack", "audit_rotation", "audit_query", "audit_command", "golden", "tie_at_limit",
           "orphan_effect", "same_rows", "run_query", "matches_answer", "infer_links", "link_of", "pack_links",
           "seal_findings", "in_question_order", "summary", "as_received_findings"]

NEAR_SUBSET = 0.95
NOT_RECORDED = object()  # no value was recorded for this question and rotation
KINDS = ("as_received", "seal", "error", "drift", "mismatch", "empty", "orphans", "tie")
_INT_TYPES = re.compile(r"^(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?|U?INT(8|16|32|64|128))$")
GENERIC_NAMES = frozenset({"id", "key", "code", "no", "num", "number", "uuid", "pk", "name"})
_PREFIX = re.compile(r"^([a-z]{1,4})_(.+)$")  # TPC-H's c_nationkey, ps_partkey: a short table prefix


@dataclass(frozen=True)
class Finding:
    """One audit finding: which question, what was seen (with the values), and what to do."""

    question: str  # question id; "" for a finding about the pack itself
    kind: str  # one of KINDS
    rotation: str | None
    message: str
    action: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        return [self.message, f"    do: {self.action}"]


# --------------------------------------------------------------------------- running queries


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def run_query(con: duckdb.DuckDBPyConnection, sql: str) -> Run:
    """Run one query the way verify.py runs SQL: one SELECT statement, under its time and row limits.

    ``con`` is a sandbox (:func:`evalpack.core.scoring.open_sandbox`): gold SQL of an imported pack comes
    from outside and is run as untrusted, like a candidate's.
    """
    outcome = run_untrusted(con, sql)
    return Run(outcome.rows, outcome.error)


def worker_runner(worker: SandboxWorker, timeout: float = DEFAULT_TIMEOUT) -> Runner:
    """A runner that sends each query to ``worker``, a sandbox in its own process under the scorer's
    operating-system limits (its connection argument is not used): how SQL from outside is run."""
    def run(_con: duckdb.DuckDBPyConnection, sql: str) -> Run:
        outcome = worker.run(sql, timeout)
        return Run(outcome.rows, outcome.error)

    return run


def matches_answer(r: dict, expected: Any, rows: list[tuple]) -> bool:
    """Whether ``rows`` answer record ``r`` (expected here: ``expected``) under the pack's comparison rule."""
    ordered = golden_rules.in_order(r.get("answer_type"), r["gold_sql"])
    return answer_matches({**r, "answer_type": r.get("answer_type") or "number"}, expected, rows, ordered=ordered)


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """The same answer (:func:`evalpack.checks.golden.same_rows`: a multiset of rows, floats at 12 significant digits)."""
    return golden_rules.same_rows(a, b)


def orphan_effect(con: duckdb.DuckDBPyConnection, sql: str, run: Run,
                  links: tuple[LinkCount, ...]) -> OrphanEffect | None:
    """How excluding orphan rows changes the answer of ``sql`` (``run`` is its result); None if it does not."""
    return golden_rules.orphan_effect(con, sql, run, links, runner=run_query)


def tie_at_limit(con: duckdb.DuckDBPyConnection, sql: str, round_decimals: int | None = None) -> dict | None:
    """Evidence of a tie at an ORDER BY ... LIMIT boundary (the limit, the tied key, both rows), or None
    (:func:`evalpack.checks.golden.find_tie`: equal sort keys and rows that differ in what the query returns)."""
    tie = golden_rules.find_tie(con, sql, round_decimals, run_query)
    return None if tie is None else tie.evidence()


def golden(con: duckdb.DuckDBPyConnection, r: dict, run: Run, links: tuple[LinkCount, ...],
           runner: Runner = run_query) -> Golden:
    """The golden checks (:func:`evalpack.checks.golden.check`) of record ``r``'s gold query, whose result on
    ``con`` is ``run``, each derived query run by ``runner`` like the query itself."""
    sql = r["gold_sql"]
    about = golden_rules.counts_orphans(r.get("kind"), r.get("about_orphans"), r.get("orphan_rows"))
    return golden_rules.check(con, sql, run, links, about_orphans=about, expected_empty=bool(r.get("expected_empty")),
                              round_decimals=r.get("round_decimals"),
                              ordered=golden_rules.in_order(r.get("answer_type"), sql), runner=runner)


# --------------------------------------------------------------------------- links


def _family(duckdb_type: str) -> str | None:
    t = duckdb_type.upper()
    if _INT_TYPES.match(t):
        return "int"
    if t == "VARCHAR" or t.startswith("VARCHAR("):
        return "str"
    if t == "UUID":
        return "uuid"
    return None


FAMILY_WORDS = {"int": "integers", "str": "text", "uuid": "UUIDs"}


def _stem(column: str) -> str:
    """A column's name without a short table prefix (``c_nationkey`` -> ``nationkey``), lower case; a name
    whose rest is generic (``user_id``) is kept whole."""
    name = column.lower()
    m = _PREFIX.match(name)
    return m.group(2) if m and m.group(2) not in GENERIC_NAMES else name


def _table_words(table: str) -> set[str]:
    """A table's name and its singular (``films`` -> film, ``countries`` -> country)."""
    t = table.lower()
    out = {t}
    if t.endswith("ies"):
        out.add(t[:-3] + "y")
    if t.endswith(("ses", "xes", "ches", "shes")):
        out.add(t[:-2])
    if t.endswith("s") and not t.endswith("ss"):
        out.add(t[:-1])
    return out


def names_refer(child_column: str, parent_table: str, parent_column: str, child_unique: bool = False) -> bool:
    """Whether a column's name names a parent key: the same name up to a short table prefix (``o_custkey``
    and ``c_custkey``, not a generic one like ``id`` or ``name``), or the parent table's name and its
    generic key (``film_id`` for ``films.id``). A child that is itself unique in its table must name the
    parent table, so that two tables' own keys are not linked to each other.

    >>> names_refer("c_nationkey", "nation", "n_nationkey"), names_refer("n_nationkey", "customer", "c_custkey")
    (True, False)
    >>> names_refer("film_id", "films", "id"), names_refer("id", "films", "id")
    (True, False)
    """
    c, p = child_column.lower(), parent_column.lower()
    words = _table_words(parent_table)
    if p in GENERIC_NAMES:
        return any(c in (f"{w}_{p}", f"{w}{p}") for w in words)
    stem = _stem(c)
    if stem != _stem(p) or stem in GENERIC_NAMES:
        return False
    return not child_unique or any(w in stem for w in words)


def infer_links(con: duckdb.DuckDBPyConnection, exclude: tuple[Link, ...] = (),
                threshold: float = NEAR_SUBSET) -> list[dict]:
    """Links inferred from the tables (views) visible in ``con``'s main schema, for columns no declared
    link or foreign key covers (``exclude``).

    A column is linked to a unique key of *another* table (non-null, distinct on every row) only when
    its name names that key (:func:`names_refer`), both hold the same kind of value (integers, text or
    UUIDs) and its distinct non-NULL values are found in that key: all of them, or at least
    ``threshold`` of them, in which case the entry's ``orphan_rows`` and ``orphan_rate`` (orphan rows /
    non-NULL rows) say what made it a link with orphans. Data alone (a key's values that happen to
    occur in another column) never makes a link. Returns dicts marked ``"inferred": true`` with the
    evidence, sorted by child then parent.
    """
    cols: dict[str, list[tuple[str, str]]] = {}
    for table, column, dtype in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
        fam = _family(dtype)
        if fam:
            cols.setdefault(table, []).append((column, fam))
    stats: dict[tuple[str, str], tuple[int, int, int, str]] = {}  # (rows, non-null, distinct, family)
    for table, columns in cols.items():
        parts = ["COUNT(*)"] + [f"COUNT({quote_ident(c)}), COUNT(DISTINCT {quote_ident(c)})" for c, _ in columns]
        row = con.execute(f"SELECT {', '.join(parts)} FROM {quote_ident(table)}").fetchall()[0]
        for i, (c, fam) in enumerate(columns):
            stats[(table, c)] = (row[0], row[1 + 2 * i], row[2 + 2 * i], fam)
    keys = [(t, c) for (t, c), (n, nn, d, _) in stats.items() if n > 0 and nn == n and d == n]
    known = {(lk.child_table, lk.child_column) for lk in exclude}
    found = []
    for (ct, cc), (_, non_null, distinct, fam) in sorted(stats.items()):
        if distinct == 0 or (ct, cc) in known:
            continue
        for pt, pc in keys:
            parent_rows, _, _, pfam = stats[(pt, pc)]
            if pt == ct or pfam != fam or parent_rows < threshold * distinct \
                    or not names_refer(cc, pt, pc, child_unique=(ct, cc) in keys):
                continue
            misses = con.execute(
                f"SELECT COUNT(*) FROM (SELECT DISTINCT {quote_ident(cc)} AS v FROM {quote_ident(ct)} "
                f"WHERE {quote_ident(cc)} IS NOT NULL) AS d "
                f"WHERE NOT EXISTS (SELECT 1 FROM {quote_ident(pt)} AS p WHERE p.{quote_ident(pc)} = d.v)").fetchall()[0][0]
            if (distinct - misses) < threshold * distinct:
                continue
            orphans = count_orphans(con, Link(ct, cc, pt, pc)) if misses else 0
            found.append({"child": f"{ct}.{cc}", "parent": f"{pt}.{pc}", "source": "inferred", "inferred": True,
                          "rule": f"{cc} names {pt}.{pc}; both hold {FAMILY_WORDS[fam]}; "
                                  + ("every value is found there" if not misses else
                                     f"{distinct - misses} of {distinct} distinct values are found there"),
                          "distinct_values": distinct, "missing_values": int(misses),
                          "coverage": round((distinct - misses) / distinct, 6),
                          "rows": int(non_null), "orphan_rows": int(orphans),
                          "orphan_rate": round(orphans / non_null, 6) if non_null else 0.0})
    return found


def describe_link(entry: dict) -> str:
    """One manifest relationship in words for a report: where it comes from and its orphan rows (with the
    rate, for an inferred link that has some)."""
    head = f"{entry['child']} -> {entry['parent']}"
    source = {"foreign_key": "a foreign key of the database", "declared": "declared",
              "inferred": "inferred from names and data"}.get(entry.get("source"), str(entry.get("source")))
    orphans = int(entry.get("orphan_rows") or 0)
    if not orphans:
        return f"{head}: {source}; every row has its parent"
    rows = entry.get("rows")
    rate = f" ({entry['orphan_rate'] * 100:.3g} % of {rows} rows)" if rows and "orphan_rate" in entry else ""
    return (f"{head}: {source}; {orphans} {'row has' if orphans == 1 else 'rows have'} no parent{rate}"
            + (f": {entry['rule']}" if entry.get("rule") else ""))


def link_of(entry: dict) -> Link:
    """A Link from a ``{"child": "t.c", "parent": "p.k"}`` entry (manifest relationships)."""
    ct, cc = entry["child"].split(".", 1)
    pt, pc = entry["parent"].split(".", 1)
    return Link(ct, cc, pt, pc)


def _spec_links(manifest: dict) -> list[tuple[Link, str]] | None:
    """A built pack's declared links: listed in its manifest, else read from the spec's text (older packs)."""
    if isinstance(manifest.get("declared_links"), list):
        return [(Link(e["child_table"], e["child_column"], e["parent_table"], e["parent_column"]), "declared")
                for e in manifest["declared_links"]]
    text = (manifest.get("spec") or {}).get("text")
    if not text:
        return None
    from evalpack.spec.reader import parse_spec

    spec = parse_spec(text, file=manifest["spec"].get("file", "spec.yaml"))
    return [(Link(r.child_table, r.child_column, r.parent_table, r.parent_column), "declared")
            for r in spec.relationships]


# --------------------------------------------------------------------------- findings


def seal_findings(records: list[dict]) -> list[Finding]:
    out = []
    for r in records:
        now = hashlib.sha256(str(r.get("question", "")).encode("utf-8")).hexdigest()
        sealed = r.get("question_sha256")
        if sealed != now:
            what = "has no seal (question_sha256)" if not sealed else "no longer matches its seal"
            out.append(Finding(
                str(r.get("id")), "seal", None,
                f"{r.get('id')} seal: the question text {what}: sealed {sealed}, the text now hashes to {now}",
                "restore the question text that was sealed (an imported pack keeps the original under as-received/), "
                "or re-import / rebuild so that the new text is sealed and the change is on record",
                {"sealed": sealed, "now": now, "question": r.get("question")}))
    return out


def as_received_findings(pack: Path, manifest: dict) -> list[Finding]:
    received = (manifest.get("source") or {}).get("questions")
    if not received or not received.get("as_received"):  # none, or withheld: it lives in the holdout's answer key
        return []
    path = pack / received["as_received"]
    now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    if now == received["sha256"]:
        return []
    seen = "is missing" if now is None else f"now hashes to {now}"
    return [Finding("", "as_received", None,
                    f"pack: {received['as_received']} {seen}; the manifest recorded {received['sha256']}",
                    "restore the file exactly as it was received (it is never edited, not even line endings)",
                    {"recorded": received["sha256"], "now": now})]


def _label(r: dict) -> str:
    text = str(r.get("question", ""))
    return text if len(text) <= 80 else text[:77] + "..."


def audit_query(con: duckdb.DuckDBPyConnection, r: dict, rotation: str, links: tuple[LinkCount, ...],
                recorded: Any = NOT_RECORDED, made: str = "build", run: Run | None = None,
                checks: golden_rules.Golden | None = None, runner: Runner = run_query) -> list[Finding]:
    """Findings for one question's gold query on one rotation. ``recorded``: the value recorded at
    ``made``; ``run``: the gold query's result on ``con`` if already obtained; ``checks``: its golden
    checks on ``con``, if already run; ``runner``: how the gold query and its derived queries run."""
    qid, sql = str(r["id"]), r["gold_sql"]
    head = f'{qid} "{_label(r)}"'
    run = run or runner(con, sql)
    if run.error is not None:
        return [Finding(qid, "error", rotation, f"{head} ({rotation}): the gold query fails: {run.error}",
                        "fix the query; it reads the tables under rotations/" + rotation + "/tables by file name",
                        {"error": run.error, "recorded": None if recorded is NOT_RECORDED else recorded})]
    out = []
    ordered = r.get("answer_type") != ROWS_TYPE or golden_rules.orders_result(sql)
    now = golden_rules.recorded_result(run.rows, ordered)
    legacy = observed(run.rows, ordered)  # how packs recorded results before values kept their types
    expected = expected_for(r, rotation) if r.get("expected_answer") is not None else None
    matches = None if expected is None else matches_answer(r, expected, run.rows)
    checks = checks or golden(con, r, run, links, runner)
    # with a tie at the LIMIT, which tied row comes back varies from run to run: the tie is the
    # finding, and a different value from the recorded or expected one says nothing more
    steady = checks.tie is None
    if steady and recorded is not NOT_RECORDED and not golden_rules.same_record(read_back(recorded), now) \
            and read_back(recorded) != legacy:
        also = "" if matches is None else (" (it equals the expected answer)" if matches else
                                           f" (the expected answer is {_short(expected)})")
        out.append(Finding(qid, "drift", rotation,
                           f"{head} ({rotation}): the answer was {_short(recorded)} at {made} and is {_short(now)} "
                           f"now{also}",
                           "find what changed in the tables or the query (`evalpack verify PACK` re-hashes every "
                           "file); if the new value is right, re-import or rebuild so the key and its record agree",
                           {"recorded": recorded, "now": now, "expected": expected}))
    elif steady and matches is False:
        diff = golden_rules.first_difference(
            answer_type_of(r), r.get("round_decimals"), expected, run.rows,
            golden_rules.in_order(r.get("answer_type"), sql))
        where = f": {diff.text}" if diff else ""
        action = ("write the expected answer with the type the query returns (the values read the same)"
                  if diff and diff.type_only else
                  "decide which is right from an independent derivation, then correct the query or the "
                  "answer in the source file and re-import")
        out.append(Finding(qid, "mismatch", rotation,
                           f"{head} ({rotation}): the gold query returns {_short(now)}, the expected answer is "
                           f"{_short(expected)}{where}",
                           action, {"now": now, "expected": expected, "difference": diff.text if diff else None}))
    if checks.empty:
        out.append(Finding(qid, "empty", rotation,
                           f"{head} ({rotation}): the gold query returns {golden_rules.empty_text(run.rows)}",
                           "check its filters and names against the data; if no answer is the intended answer, "
                           "mark the question expected_empty: true",
                           {"rows": run.value}))
    effect = checks.orphans
    if effect is not None:
        out.append(Finding(qid, "orphans", rotation,
                           f"{head} ({rotation}): the answer depends on orphan rows: {_short(now)} as written, "
                           f"{_short(effect.without_orphans.recorded())} without them ({effect.because()})",
                           "if the question means rows whose parent exists, correct the gold query (join the "
                           "parent table) and its expected answer; if it is about the dangling rows, mark it "
                           f"about_orphans: true. The query without orphans: {effect.sql}",
                           effect.evidence()))
    tie = checks.tie
    if tie is not None and tie.error is not None:
        out.append(Finding(qid, "tie", rotation,
                           f"{head} ({rotation}): ORDER BY ... LIMIT {tie.limit}: the query with its sort keys "
                           f"fails ({tie.error}), so whether a tie decides the answer is unknown",
                           "make the ORDER BY terms columns or expressions of the query's own tables",
                           tie.evidence()))
    elif tie is not None:
        out.append(Finding(qid, "tie", rotation,
                           f"{head} ({rotation}): ORDER BY ... LIMIT {tie.limit} cuts between rows with the same "
                           f"sort key {_short(tie.sort_key)}: {_short(tie.last_row_kept)} is kept and "
                           f"{_short(tie.first_row_cut)} is cut, so the answer depends on row order",
                           "add a tie-breaker to ORDER BY (a unique column), or ask a question whose answer is unique",
                           tie.evidence()))
    return out


def _recorded_values(pack: Path, manifest: dict) -> tuple[dict, str]:
    """{(id, rotation): value recorded in certificate.json when the pack was made}, and when (import | build)."""
    made = "import" if manifest.get("source") else "build"
    layout = PackLayout(pack)
    if not layout.certificate.is_file():
        return {}, made
    cert = layout.read_certificate()
    return {(str(q["id"]), rot): f"error: {res['error']}" if res.get("error") else res.get("observed")
            for q in cert.get("questions", []) for rot, res in q.get("results", {}).items()}, made


def pack_links(con: duckdb.DuckDBPyConnection, manifest: dict) -> tuple[LinkCount, ...]:
    """The links of a pack with their orphan counts: declared in the spec (built packs), else recorded at import
    plus inferred from the tables now."""
    declared = _spec_links(manifest)
    if declared is not None:
        return counted(con, declared)
    # links recorded at import from the database's own keys are kept; inferred ones are inferred again by the
    # rule in force (a pack imported by an older evalpack may list links its looser rule made up)
    recorded = [(link_of(e), e.get("source", "recorded")) for e in manifest.get("relationships", [])
                if e.get("source") != "inferred"]
    inferred = [(link_of(e), "inferred") for e in infer_links(con, tuple(lk for lk, _ in recorded))]
    return counted(con, recorded + inferred)


def audit_pack(pack: Path, trusted: bool = False) -> list[Finding]:
    """Every finding of the audit on ``pack`` (built or imported), in question order.

    The gold SQL of a pack from elsewhere is untrusted: it and every query derived from it run in a
    sandbox worker process under the scorer's limits (:class:`evalpack.core.scoring.SandboxWorker`), while
    this process reads only the tables' shapes and link counts, by SQL it writes itself. ``trusted`` is
    for the build's own pack, whose SQL evalpack just wrote: it runs here on the same connection."""
    pack, layout = Path(pack), PackLayout(pack)
    manifest = layout.read_manifest()
    records = load_questions(pack)  # the scorer's reader: a repeated id is refused, not audited as drift
    findings = as_received_findings(pack, manifest) + seal_findings(records)
    recorded, made = _recorded_values(pack, manifest)
    for rotation in layout.rotations():
        folder = layout.tables(rotation)
        with rotation_connection(folder) as con, \
                contextlib.nullcontext() if trusted else SandboxWorker(folder, Limits()) as worker:
            runner = run_query if trusted else worker_runner(worker)
            findings += audit_rotation(con, records, rotation, pack_links(con, manifest), recorded, made,
                                       runner=runner)
    return in_question_order(records, findings)


def audit_rotation(con: duckdb.DuckDBPyConnection, records: list[dict], rotation: str,
                   links: tuple[LinkCount, ...], recorded: dict, made: str = "build",
                   runs: dict[str, Run] | None = None, verified: frozenset[str] = frozenset(),
                   runner: Runner = run_query) -> list[Finding]:
    """The findings of every gold query of ``records`` on one rotation's connection.
    ``recorded``: {(id, rotation): the value recorded at ``made``}; ``runs``: gold results already
    obtained on ``con`` (by id), which are not run again; ``verified``: ids whose golden checks
    verification ran on ``con`` and passed (not empty, no orphan dependence, no tie at a cut), which are
    not run again either; ``runner``: how the remaining queries run (:func:`worker_runner` for SQL from outside)."""
    passed = golden_rules.Golden(empty=False, orphans=None, tie=None)
    findings = []
    for r in records:
        if r.get("gold_sql"):
            qid = str(r["id"])
            value = recorded.get((qid, rotation), NOT_RECORDED)
            findings += audit_query(con, r, rotation, links, value, made, (runs or {}).get(qid),
                                    passed if qid in verified else None, runner)
    return findings


def in_question_order(records: list[dict], findings: list[Finding]) -> list[Finding]:
    """``findings`` sorted by question (as in ``records``), kind, then rotation."""
    order = {str(r["id"]): i for i, r in enumerate(records)}
    return sorted(findings, key=lambda f: (order.get(f.question, -1), KINDS.index(f.kind), f.rotation or ""))


def summary(pack: Path, findings: list[Finding], questions: int) -> str:
    if not findings:
        return f"audit {pack}: no findings in {questions} questions"
    kinds = Counter(f.kind for f in findings)
    parts = ", ".join(f"{kinds[k]} {k}" for k in KINDS if kinds[k])
    noun = "finding" if len(findings) == 1 else "findings"
    return f"audit {pack}: {len(findings)} {noun} in {questions} questions ({parts})"


def audit_command(pack: str | Path, json_path: str | Path | None = None) -> int:
    """``evalpack audit PACK [--json FILE]``: 0 without findings, 1 with findings, 2 when PACK is not a pack or holds
    anything but regular files (a symlink or a FIFO: the audit reads the tables in this process, and a pack from
    elsewhere could point them anywhere). The files need not match the attestation: finding what was edited is
    the audit's work."""
    pack = Path(pack)
    check_pack_entries(pack)
    findings = audit_pack(pack)
    questions = len(PackLayout(pack).read_records())
    # ids, texts and values come from the pack: each line is printed as the one line it is, its control
    # characters (a newline that would start a forged line, an ANSI escape) shown as escapes
    print(printable(summary(pack, findings, questions)))
    for f in findings:
        for line in f.lines():
            print(printable(f"  {line}"))
    if json_path:
        data = {"pack": str(pack), "questions": questions, "findings": [f.to_dict() for f in findings],
                "counts": dict(Counter(f.kind for f in findings))}
        write_json_report(json_path, data)
    return 1 if findings else 0
