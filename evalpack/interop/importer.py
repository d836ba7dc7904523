"""Import questions that arrive from outside, plus the database they are about, as a pack.

``evalpack import QUESTIONS --data DB -o PACK [--force] [--holdout F] [--signing-key K]``

QUESTIONS is JSON Lines, a JSON array (or an object with a ``questions`` array), or CSV/TSV with a
header (an item nested more than MAX_NESTING levels deep is an error naming its line). DB is a DuckDB file
(attached read-only), a SQLite file (read with Python's ``sqlite3``: DuckDB's sqlite extension is not installed
offline, and one reader keeps packs reproducible), or a folder of Parquet/CSV tables, one table per file. A
database file is read in a sandbox worker process under the scorer's limits, within bounds on each table or view
(:class:`SourceWorker`, MAX_TABLE_*). The pack has the layout of a built pack with one rotation,
``rotations/seed_0`` (one database, no generator seed: 0 marks "as received"):

```
PACK/as-received/<QUESTIONS file name>   the questions file byte for byte (never edited, not even line endings);
                                         with a holdout it is in PACK.holdout-key/ instead (it holds every answer)
PACK/rotations/seed_0/tables/<t>.parquet and <t>.csv   every table of DB
PACK/questions.jsonl  certificate.json  manifest.json  verify.py  attestation.intoto.json
```

Fields read from each item (keys case-insensitive; the first name is the one written in the pack):

- ``question`` (also ``prompt``, ``nl_question``): required; an item without it did not parse.
- ``gold_sql`` (``sql``, ``query``, ``gold_query``), ``check_sql`` (``second_sql``): DuckDB SQL.
- ``expected_answer`` (``answer``, ``expected``, ``gold_answer``); ``answer_type`` (number | integer |
  string) and ``round_decimals``, inferred from the answer when absent (``12.50`` -> number at 2).
- ``criteria`` (``rubric``, ``acceptance_criteria``); ``id`` (``question_id``, ``qid``); ``tags``;
  ``expected_empty`` and ``about_orphans`` (booleans, for the audit). Other fields: ``source_fields``.

Record form of an imported pack's ``questions.jsonl`` (one JSON object per line, file order):

```
id, question, gold_sql, expected_answer, answer_type, round_decimals, kind ("imported"), split,
question_sha256, tags                       -- as in built packs (PACK_FORMAT.md), plus:
status          scorable | provisional | criteria | no_golden
verified_by     null | "authored_query" | "authored_query+check_sql"
authored_answer the answer exactly as received (null when none arrived)
observed_answer what gold_sql returned at import (the scalar, or up to 5 rows); null without a query
error           why the query or the answer could not be checked, or null
source_line     the line of the item in the received file
check_sql, check_answer, criteria, expected_empty, about_orphans, failed_checks, source_fields
null_answer     true when the answer is rows of only NULL (present only then): not scored, as any query
                returning NULL would match it (evalpack.core.scoring.only_null)
```

``gold_sql`` is null for ``criteria`` and ``no_golden`` items and for an answer that arrived alone;
``expected_answer`` is null when no usable answer arrived. verify.py scores only records whose
``gold_sql`` and ``expected_answer`` are both non-null (status scorable or provisional) and must
skip every other record.

Answers keep their types (:func:`evalpack.checks.golden.typed`): in a result-set answer a number stays a
JSON number (``532348211.65``, ``0.0``; never its text), an integer an integer, null null, text text;
what a query returned is recorded the same way, a date or timestamp as its ISO text. The comparison is
the scorer's (:func:`evalpack.core.scoring.answer_matches`), and a disagreement is reported at its first
differing cell, both values with their types (:func:`evalpack.checks.golden.first_difference`).

Import verifies what it writes: the pack is assembled and attested in a staging folder and checked by
``evalpack verify`` (:func:`evalpack.pack.attest.verify_pack`); a pack it rejects (a query and an answer that
disagree, a query that fails) is not written: :class:`ImportRefused` (exit 1) names each problem, and
nothing at ``-o`` changes.

Links for the orphan check: those declared with ``--link`` first, then the database's own foreign keys (DuckDB,
SQLite) for the columns they leave, then links inferred
by :func:`evalpack.checks.audit.infer_links` (a name that names another table's unique key, the same type,
the values found there), each listed in ``manifest.json -> relationships`` with its ``source`` and
``inferred`` and, for inferred ones, its evidence and orphan rate, and printed in the report.

Classification (nothing is edited, invented or dropped): a query and an answer -> the query is run;
it returns the answer -> ``verified_by: authored_query``, ``provisional`` unless a second derivation
(``check_sql``, an independently written query returning the same answer) agrees and the golden
checks pass, then ``scorable``; it returns something else -> both values recorded, ``provisional``;
it fails -> the error recorded, ``provisional``. An answer alone -> ``provisional``. A query alone ->
``provisional`` (nothing to compare yet; what it returned is recorded). Prose criteria ->
``criteria``. Nothing -> ``no_golden``. An item that cannot be parsed is reported with its line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import duckdb

from evalpack.checks.audit import (
    Golden,
    LinkCount,
    Run,
    counted,
    describe_link,
    golden,
    infer_links,
    link_of,
    matches_answer,
    run_query,
    worker_runner,
)
from evalpack.checks.golden import CHECKS, MATCHES, Runner, empty_text, first_difference, in_order, shown
from evalpack.checks.verification import Link, rotation_connection
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import QUESTIONS, PackLayout
from evalpack.core.scoring import (
    Limits,
    SandboxWorker,
    answer_type_of,
    only_null,
    printable,
    scorable,
)
from evalpack.interop.received import (
    GROUPS,
    RECEIVED,
    ROTATION,
    STATUSES,
    Case,
    Received,
    Unparsed,
    parse_cases,
    read_questions,
)
from evalpack.interop.sources import SCRATCH_NAMES, Source, machine_path_in, machine_paths, write_source
from evalpack.pack.certify import HASHES, certificate_header, tool_entry
from evalpack.pack.folder import assemble_pack, discard, publish_dir, staging_dir
from evalpack.pack.holdout import seal_received, write_received_key

# --------------------------------------------------------------------------- classification


@dataclass(frozen=True)
class Classified:
    record: dict  # the questions.jsonl record
    group: str | None  # with_query | answer_only | query_only, for provisional records
    next_step: str  # why this status, and what would make it scorable
    checks: dict | None = None  # the golden checks of its gold query (certificate), None when it did not run
    run: Run | None = None  # what its gold query returned, None without a query


def _problems(g: Golden, run: Run) -> list[str]:
    out = []
    if g.empty:
        out.append(f"it returns {empty_text(run.rows)} (mark it expected_empty if that is the answer)")
    if g.orphans is not None:
        out.append(f"without orphan rows it returns {shown(g.orphans.without_orphans.recorded())} "
                   f"({g.orphans.because()})")
    if g.tie is not None:
        out.append(f"a tie at LIMIT {g.tie.limit} makes it depend on row order" if g.tie.error is None else
                   f"its ORDER BY ... LIMIT {g.tie.limit} cannot be checked for a tie ({g.tie.error})")
    return out


def classify(con: duckdb.DuckDBPyConnection, case: Case, links: tuple[LinkCount, ...],
             runner: Runner = run_query) -> Classified:
    """Run what arrived with ``case`` on the pack's tables and decide its status."""
    record = {
        "id": case.id, "question": case.question, "gold_sql": case.gold_sql, "expected_answer": case.expected,
        "answer_type": case.answer_type, "round_decimals": case.round_decimals, "kind": "imported", "split": "dev",
        "question_sha256": hashlib.sha256(case.question.encode("utf-8")).hexdigest(), "tags": case.tags,
        "status": "provisional", "verified_by": None, "authored_answer": case.raw_answer, "observed_answer": None,
        "error": case.answer_error, "source_line": case.line, "check_sql": case.check_sql, "check_answer": None,
        "criteria": case.criteria, "expected_empty": case.expected_empty, "about_orphans": case.about_orphans,
        "failed_checks": [], "source_fields": case.source_fields,
    }
    answered = case.raw_answer is not None
    if only_null(record):  # SELECT NULL would match it: kept, marked, and never scored (the scorer's rule)
        record["null_answer"] = True
    if case.gold_sql is None:
        if answered:
            return Classified(record, "answer_only", f"a number alone ({shown(case.raw_answer)}): add the gold query "
                              "that returns it, and a check_sql")
        record["status"] = "criteria" if case.criteria is not None else "no_golden"
        note = ("prose criteria: kept, not scored by verify.py" if case.criteria is not None else
                "nothing to compare against: kept, it measures coverage")
        return Classified(record, None, note)
    run = runner(con, case.gold_sql)
    errors = [e for e in (case.answer_error, run.error and f"the query fails: {run.error}") if e]
    record["error"] = "; ".join(errors) or None
    record["observed_answer"] = None if run.error else run.recorded()
    check = runner(con, case.check_sql) if case.check_sql else None
    record["check_answer"] = check.recorded() if check else None
    if run.error:
        step = f"{record['error']}: fix it to read the pack's tables" + ("" if answered else ", add the answer")
        return Classified(record, "with_query" if answered else "query_only", step, run=run)
    g = golden(con, record, run, links, runner)
    record["failed_checks"] = g.failed()
    problems = _problems(g, run)
    matches = None if case.expected is None else matches_answer(record, case.expected, run.rows)
    checks = {MATCHES: matches, **g.checks()}
    observed_text = run.describe()
    if not answered:
        step = (f"its query returns {observed_text}; nothing to compare it with yet: add the expected answer, derived "
                "independently of the query, and a check_sql")
        return Classified(record, "query_only", "; ".join([step] + problems), checks, run)
    if case.answer_error:
        return Classified(record, "with_query", f"{case.answer_error}; its query returns {observed_text}", checks, run)
    if not matches:
        diff = first_difference(answer_type_of(record), record["round_decimals"], case.expected, run.rows,
                                in_order(record["answer_type"], case.gold_sql))
        step = f"its query returns {observed_text}, the authored answer is {shown(case.raw_answer)}"
        if diff is not None and diff.type_only:
            step += (f"; {diff.text}: the values read the same and differ in type only: write the answer with "
                     "the type the query returns")
        else:
            step += f"{'; ' + diff.text if diff else ''}: decide which is right and correct the other"
        return Classified(record, "with_query", "; ".join([step] + problems), checks, run)
    record["verified_by"] = "authored_query"
    check_ok = check is not None and check.error is None and matches_answer(record, case.expected, check.rows)
    if check_ok and not problems:
        record["status"], record["verified_by"] = "scorable", "authored_query+check_sql"
        return Classified(record, None, "its query and its check_sql both return the authored answer; the golden "
                                        "checks pass", checks, run)
    if check is None:
        advice = "add check_sql (a second query, written independently, that returns the same answer)"
    elif check.error:
        advice = f"its check_sql fails ({check.error})"
    elif not check_ok:
        advice = f"its check_sql returns {check.describe()}, not {shown(case.raw_answer)}"
    else:
        advice = None
    parts = [f"its query returns the authored answer {shown(case.raw_answer)}", *problems]
    parts += [advice] if advice else []
    return Classified(record, "with_query", "; ".join(parts), checks, run)


def assign_splits(records: list[dict], file_sha256: str, holdout: float) -> None:
    """Freeze ``round(holdout * n)`` records into ``holdout``, ranked by SHA-256 of file hash, question hash and id."""
    count = int(Decimal(str(holdout * len(records))).to_integral_value(ROUND_HALF_EVEN))
    ranked = sorted(records, key=lambda r: hashlib.sha256(
        f"{file_sha256}:{r['question_sha256']}:{r['id']}".encode()).hexdigest())
    held = {r["id"] for r in ranked[:count]}
    for r in records:
        r["split"] = "holdout" if r["id"] in held else "dev"


# --------------------------------------------------------------------------- the report


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def summary_line(received: Received, classified: list[Classified], unparsed: list[Unparsed]) -> str:
    """``47 cases from 50 lines: 12 scorable now; 29 provisional (21 with their query, ...); 6 no golden; ...``"""
    status = Counter(c.record["status"] for c in classified)
    groups = Counter(c.group for c in classified if c.record["status"] == "provisional")
    unit = received.unit[:-1]
    text = f"{_plural(len(classified), 'case')} from {_plural(received.count, unit)}: {status['scorable']} scorable now"
    text += f"; {status['provisional']} provisional"
    detail = [f"{groups[g]} {label}" for g, label in GROUPS.items() if groups[g]]
    if detail:
        text += f" ({', '.join(detail)})"
    if status["criteria"]:
        text += f"; {status['criteria']} criteria"
    text += f"; {status['no_golden']} no golden"
    if unparsed:
        lines = ", ".join(str(u.line) for u in unparsed)
        text += (f"; {_plural(len(unparsed), unit)} did not parse "
                 f"({'line' if len(unparsed) == 1 else 'lines'} {lines})")
    return text


def link_lines(relationships: list[dict]) -> list[str]:
    """The links the orphan check follows, each with where it comes from and its orphan rows."""
    if not relationships:
        return []
    sources = Counter(e.get("source") for e in relationships)
    parts = [f"{sources['declared']} declared with --link" if sources["declared"] else "",
             f"{sources['foreign_key']} from the database's foreign keys" if sources["foreign_key"] else "",
             f"{sources['inferred']} inferred" if sources["inferred"] else ""]
    head = f"links the orphan check follows ({', '.join(p for p in parts if p)}):"
    return [head] + [f"  {describe_link(e)}" for e in relationships]


def report_lines(received: Received, classified: list[Classified], unparsed: list[Unparsed],
                 limit: int = 50, relationships: list[dict] | None = None) -> list[str]:
    """What a user reads after an import: the summary, what did not parse, the links the orphan check
    follows, and what makes provisional scorable."""
    out = [summary_line(received, classified, unparsed)]
    if unparsed:
        out.append("did not parse (not in the pack; fix them in the file and import again):")
        out += [f"  line {u.line}: {u.error}" for u in unparsed]
    out += link_lines(relationships or [])
    provisional = [c for c in classified if c.record["status"] == "provisional"]
    if provisional:
        out.append("what turns provisional into scorable: the gold query returns the expected answer, a second "
                   "derivation agrees (check_sql: a query written independently that returns the same answer), and "
                   "the golden checks pass (a non-empty result, no dependence on orphan rows, no tie at LIMIT); "
                   "then import again:")
        for c in provisional[:limit]:
            out.append(f"  {c.record['id']} (line {c.record['source_line']}, {GROUPS[c.group]}): {c.next_step}")
        if len(provisional) > limit:
            out.append(f"  ... and {len(provisional) - limit} more: manifest.json -> classification")
    return out


# --------------------------------------------------------------------------- the pack


HELD_OUT_STEP = "a holdout question: what its query returned and what would make it scorable are in the answer key"
HELD_OUT_FILE = ("the file holds the holdout's answers: it is in the holdout answer key (PACK.holdout-key), byte for "
                 "byte; its SHA-256 is above")


@dataclass(frozen=True)
class ImportResult:
    path: Path
    records: list[dict]
    unparsed: list[Unparsed]
    report: list[str]
    manifest: dict


class ImportRefused(EvalpackError):
    """The pack would not pass its own ``evalpack verify``: it is not written (exit 1). ``report`` is the
    import's report, ``reasons`` one line per problem."""

    def __init__(self, message: str, report: list[str], reasons: list[str]) -> None:
        super().__init__(message, exit_code=1)
        self.report = report
        self.reasons = reasons


def refusal_reasons(classified: list[Classified], failures: tuple[str, ...] | list[str]) -> list[str]:
    """Why ``evalpack verify`` rejects the pack: for each question whose gold SQL verify reruns (a query and
    an answer) and that does not return its answer, what the import saw (with the first differing cell),
    and every other failure verify reported, as it reported it."""
    reasons, explained = [], set()
    for c in classified:
        r = c.record
        prefix = f"FAIL {QUESTIONS}: {r['id']} "
        if not scorable(r) or not any(f.startswith(prefix) for f in failures):
            continue
        explained.add(prefix)
        failed = c.run is not None and c.run.error is not None
        reasons.append(f"{r['id']} (line {r['source_line']}): {c.next_step} "
                       + ("(or leave the answer without its query)" if failed else "(or leave out the query or the "
                          "answer until both agree)"))
    reasons += [f"evalpack verify: {f}" for f in failures if not any(f.startswith(p) for p in explained)]
    return reasons


def _pack_name(out: Path) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", out.name.lower()).strip("_")
    return name if re.match(r"[a-z]", name) else f"pack_{name}"


def certificate(classified: list[Classified], held: Collection[str] = ()) -> dict:
    """The import's verification run: per question with a gold query, what it returned and its checks; of a ``held``
    (holdout) question only whether it matched and its checks: what it returned is in the answer key."""
    scored = [c for c in classified if c.run is not None]
    scorable = [c for c in classified if c.record["status"] == "scorable"]
    return {
        **certificate_header([ROTATION], IMPORT_MEANINGS),
        "questions": [
            {"id": c.record["id"], "status": c.record["status"],
             "results": {ROTATION: {**({} if c.record["id"] in held else {
                 "observed": c.run.value if c.run.error is None else None, "error": c.run.error}),
                 "match": bool(c.checks and c.checks[MATCHES]), "checks": c.checks}}}
            for c in scored
        ],
        "scorable": len(scorable),
        "all_match": bool(scorable) and all(c.checks and c.checks[MATCHES] for c in scorable),
    }


LINK_RE = re.compile(r"\s*([^.\s=>-]+)\.([^.\s=>-]+)\s*(?:=|->)\s*([^.\s=>-]+)\.([^.\s=>-]+)\s*")


def parse_link(text: str) -> Link:
    """A ``--link`` of ``evalpack import``: ``child_table.column=parent_table.column`` (or ``->``)."""
    match = LINK_RE.fullmatch(text)
    if not match:
        raise EvalpackError(f"--link {printable(text)}: write it as child_table.column=parent_table.column, e.g. "
                            "--link orders.customer_id=customers.customer_id")
    link = Link(*match.groups())
    if link.child_table == link.parent_table:
        raise EvalpackError(f"--link {printable(text)}: links a table to itself; a link joins a child table's column "
                            "to another table's key")
    return link


def check_links(con: duckdb.DuckDBPyConnection, links: tuple[Link, ...]) -> None:
    """Refuse a declared link whose table or column the database lacks, naming the ones it has."""
    columns: dict[str, list[str]] = {}
    for table, column in con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                     "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
        columns.setdefault(table, []).append(column)
    for link in links:
        for table, column in ((link.child_table, link.child_column), (link.parent_table, link.parent_column)):
            shown = f"--link {link.child_table}.{link.child_column}={link.parent_table}.{link.parent_column}"
            if table not in columns:
                raise EvalpackError(f"{shown}: the database has no table {printable(table)}; its tables are "
                                    f"{', '.join(sorted(columns))}")
            if column not in columns[table]:
                raise EvalpackError(f"{shown}: {printable(table)} has no column {printable(column)}; its columns are "
                                    f"{', '.join(columns[table])}")


def import_pack(questions: str | Path, *, data: str | Path, output: str | Path, force: bool = False,
                holdout: float = 0.0, signing_key: str | Path | None = None,
                links: tuple[str, ...] = (), limits: Limits | None = None) -> ImportResult:
    """Make the pack ``output`` from the questions file and the database ``data``; ``links`` are declared links
    (:func:`parse_link`), followed before the database's foreign keys and inference. A database file and the
    questions' SQL are run in worker processes under ``limits`` (the scorer's by default). Raises EvalpackError
    (exit 2) on bad input, and ImportRefused (exit 1) when ``evalpack verify`` would reject the pack: nothing is
    written."""
    from evalpack.pack.attest import attest, now_utc, verify_pack

    started = now_utc()
    questions, output = Path(questions), Path(output)
    limits = (limits or Limits()).checked()
    if not 0.0 <= holdout <= 1.0:
        raise EvalpackError(f"--holdout {holdout}: a fraction between 0 and 1")
    declared_links = tuple(parse_link(text) for text in links)
    try:
        raw = questions.read_bytes()
    except OSError as exc:
        raise EvalpackError(f"{questions}: cannot read the questions file ({exc.strerror})") from None
    received = read_questions(str(questions), raw)
    cases, unparsed = parse_cases(received)
    if not cases:
        first = f" (line {unparsed[0].line}: {unparsed[0].error})" if unparsed else ""
        raise EvalpackError(f"{questions}: no question could be read from {_plural(received.count, received.unit[:-1])}"
                            f"{first}")
    file_sha = hashlib.sha256(raw).hexdigest()
    staging = staging_dir(output, force)
    try:
        tables_dir = PackLayout(staging).tables(ROTATION)
        source = write_source(data, tables_dir, limits)
        # the questions' SQL comes from outside: it runs like a candidate's, in a sandbox worker process;
        # this connection runs only the link counts evalpack writes. Links: --link first, the database's own
        # foreign keys on the columns those leave, then inference for the rest (audit.infer_links)
        with rotation_connection(tables_dir) as con, SandboxWorker(tables_dir, limits) as worker:
            check_links(con, declared_links)
            given = {(lk.child_table, lk.child_column) for lk in declared_links}
            declared = counted(con, [(lk, "declared") for lk in declared_links] + [
                (lk, "foreign_key") for lk in source.foreign_keys if (lk.child_table, lk.child_column) not in given])
            inferred = infer_links(con, tuple(lc.link for lc in declared))
            links = declared + counted(con, [(link_of(e), "inferred") for e in inferred])
            classified = [classify(con, case, links, worker_runner(worker, limits.timeout)) for case in cases]
        check_machine_paths(questions, classified, machine_paths(Path(data)))
        records = [c.record for c in classified]
        assign_splits(records, file_sha, holdout)
        # a holdout question's answer stays out of the pack: its record is sealed, its next step (which names what
        # its query returned) and the file as received (which holds every answer) go to the answer key beside it
        held = {r["id"] for r in records if r["split"] == "holdout"}
        sealed = seal_received(records, raw,
                               {c.record["id"]: c.next_step for c in classified if c.record["id"] in held})
        shown = [replace(c, next_step=HELD_OUT_STEP) if c.record["id"] in held else c for c in classified]
        relationships = [{**lc.to_dict(), "inferred": False} for lc in declared] + inferred
        report = report_lines(received, shown, unparsed, relationships=relationships)
        manifest = _manifest(_pack_name(output), questions.name, received, file_sha, len(raw), source, holdout,
                             relationships, shown, unparsed, report, received_in_pack=not held)
        if not held:
            (staging / RECEIVED).mkdir()
            (staging / RECEIVED / questions.name).write_bytes(raw)
        assemble_pack(staging, list(sealed.public), certificate(classified, held), manifest)
        write_received_key(staging, _pack_name(output), questions.name, raw, sealed)
        external = {"import": {"questions": {"name": questions.name, "sha256": file_sha},
                               "data": {"kind": source.kind, "name": source.name, "sha256": source.digests}},
                    "seeds": [0], "rotations": 1, "answers": "shared", "holdout": holdout}
        deps = [{"name": questions.name, "digest": {"sha256": file_sha}}] + [
            {"name": name, "digest": {"sha256": digest}} for name, digest in source.digests.items()]
        attest(staging, external_parameters=external, resolved_dependencies=deps, started=started,
               finished=now_utc(), signing_key=signing_key)
        # import verifies what it writes: a pack its own `evalpack verify` rejects is not written
        verdict = verify_pack(staging)
        if not verdict.ok:
            reasons = refusal_reasons(classified, verdict.failures)
            raise ImportRefused(
                f"{questions}: not imported: `evalpack verify` would reject this pack "
                f"({_plural(len(reasons), 'problem')}), so nothing was written to {output} and {questions.name} "
                "is left as it was; correct these in the file and import again:\n"
                + "\n".join(f"  {line}" for line in reasons), report, reasons)
        publish_dir(staging, output)
    except BaseException:
        discard(staging)
        raise
    return ImportResult(output, list(sealed.public), unparsed, report, manifest)


def check_machine_paths(questions: Path, classified: list[Classified], needles: tuple[bytes, ...]) -> None:
    """Refuse a question whose SQL returned (or failed with) a path of this machine (:func:`machine_paths`) or the
    name of a scratch folder (:data:`SCRATCH_NAMES`: the scorer's sandbox loads the pack's tables into
    ``<temp folder>/evalpack-sandbox-<pid>-<random>/memory.duckdb``, which its ``duckdb_databases()`` and
    ``allowed_paths`` show), as written or disguised (:func:`machine_path_in`): what a query returned is written into
    the pack, and a query may read only the pack's tables. A path the question's own SQL spells out (an error that
    quotes a refused ``read_text('/tmp/...')``) is not counted: that SQL ships in the pack as the author wrote it."""
    for c in classified:
        r = c.record
        seen = json.dumps([r["observed_answer"], r["check_answer"], r["error"]], default=str).encode()
        written = "\n".join(str(r.get(key) or "") for key in ("gold_sql", "check_sql")).encode()
        needle = machine_path_in(seen, [n for n in needles if n not in written],
                                 [n for n in SCRATCH_NAMES if n not in written])
        if needle is not None:
            raise EvalpackError(
                f"{questions}: line {r['source_line']}: question {printable(r['id'])}: what its SQL returned holds "
                f"a path of this machine ({printable(needle.decode(errors='replace'))}); a query may read only "
                "the pack's tables, not the settings or files of the machine that imports it: fix it and import "
                "again")


# what each golden check (evalpack.checks.golden.CHECKS, in that order) means for an imported question
IMPORT_MEANINGS = dict(zip(CHECKS, (
    "the gold SQL returns exactly the authored answer (null: no usable answer arrived)",
    "the result is not empty and not NULL, unless the question is marked expected_empty",
    "rewritten to exclude child rows whose parent is missing, the gold SQL returns the same answer (null: the "
    "question is marked about_orphans, or reads no child table with orphan rows)",
    "no tie at an ORDER BY ... LIMIT boundary (null: no ORDER BY ... LIMIT)",
), strict=True))


def _manifest(name: str, file_name: str, received: Received, file_sha: str, size: int, source: Source,
              holdout: float, relationships: list[dict], classified: list[Classified], unparsed: list[Unparsed],
              report: list[str], received_in_pack: bool = True) -> dict:
    records = [c.record for c in classified]
    status = Counter(r["status"] for r in records)
    groups = Counter(c.group for c in classified if c.record["status"] == "provisional")
    return {
        "pack": name,
        "version": "0.1.0",
        "description": f"Questions imported from {file_name} over {source.name}",
        "tool": tool_entry(),
        "seeds": [0],
        "rotations": [ROTATION],
        "answers": "shared",
        "holdout": holdout,
        "source": {
            "questions": {"file": file_name, "as_received": f"{RECEIVED}/{file_name}" if received_in_pack else None,
                          **({} if received_in_pack else {"withheld": HELD_OUT_FILE}),
                          "sha256": file_sha, "bytes": size, "format": received.format, received.unit: received.count},
            "data": {"kind": source.kind, "name": source.name, "sha256": source.digests},
        },
        "hashes": {**HASHES,
                   "as_received_sha256": "SHA-256 (hex) of the questions file's bytes exactly as received",
                   "split": "the round(holdout * n) questions with the smallest SHA-256 of "
                            "'<as_received_sha256>:<question_sha256>:<id>' are frozen into holdout"},
        "tables": {t: {"columns": v["columns"], "rows": v["rows"], "from": v["from"]}
                   for t, v in source.tables.items()},
        "relationships": relationships,
        "questions": {
            "cases": len(records),
            "shipped": len(records),  # an import drops nothing: every case is in questions.jsonl
            "by_status": {s: status[s] for s in STATUSES},
            "provisional": {g: groups[g] for g in GROUPS},
            "by_split": dict(sorted(Counter(r["split"] for r in records).items())),
        },
        "classification": [
            {"id": c.record["id"], "source_line": c.record["source_line"], "status": c.record["status"],
             "group": c.group, "verified_by": c.record["verified_by"], "failed_checks": c.record["failed_checks"],
             "next_step": c.next_step}
            for c in classified
        ],
        "unparsed": [{"line": u.line, "error": u.error} for u in unparsed],
        "dropped": [],
        "warnings": source.warnings,
        "report": report,
        "near_miss_study": None,
    }


def import_command(questions: str | Path, *, data: str | Path, output: str | Path, force: bool = False,
                   holdout: float = 0.0, signing_key: str | Path | None = None, links: tuple[str, ...] = (),
                   limits: Limits | None = None) -> int:
    """``evalpack import``: make the pack and print the report. 0 on success; 2 (EvalpackError) on bad input; 1
    (ImportRefused, after the report is printed) when the pack would not pass ``evalpack verify``."""
    try:
        result = import_pack(questions, data=data, output=output, force=force, holdout=holdout,
                             signing_key=signing_key, links=links, limits=limits)
    except ImportRefused as exc:
        print(f"not imported: {Path(questions).name} with {Path(data).name}")
        for line in exc.report:
            print(line)
        raise
    tables = result.manifest["tables"]
    print(f"imported {Path(questions).name} with {Path(data).name} ({len(tables)} tables) into {result.path}")
    for line in result.report:
        print(line)
    for warning in result.manifest["warnings"]:
        print(f"warning: {warning}")
    return 0
