"""``evalpack serve PACK``: an MCP server (the official ``mcp`` SDK) through which a data agent works in a pack.

The agent explores one rotation (``--rotation``, default the first): it lists the tables, describes them and
runs read-only SQL there, in the scorer's sandbox (:mod:`evalpack.agent.grader`). It reads the questions of a split
(their text and evidence, never an answer or a gold SQL) and submits an answer per question (SQL, a value, or a
decline), which is graded at once on every rotation with the scorer's own code. The agent learns correct or
wrong of a dev question; of a holdout question only that its answer was recorded (``--holdout-feedback``: correct
or wrong, no more), and a holdout question takes at most ``--holdout-attempts`` answers per episode (default 3; the
last counts), so that the holdout's answers cannot be searched for through ``submit_answer``. Each session is an
episode (stdio: the one session of the process; streamable HTTP: each ``mcp-session-id``), logged call by call to
the episode file (bounded: :mod:`evalpack.agent.episode`), and its report, the JSON ``evalpack score --json`` writes for
the same answers, is logged when it ends: when the agent calls ``end_episode``, when the HTTP client deletes its
session, or when the server stops (stdio: its input closes). ``end_episode`` tells the agent the counts of the
splits it gets feedback on, never a holdout question's grade.
"""

from __future__ import annotations

import ipaddress
import json
import math
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT

from evalpack.agent.episode import (
    DEFAULT_EPISODE_MAX_MB,
    Episode,
    EpisodeLog,
    Episodes,
    argument_size,
    episode_log_beside,
    refuse_inside_pack,
)
from evalpack.agent.grader import Grader, typed_value, value_sql
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout
from evalpack.core.scoring import (
    MAX_SQL_CHARS,
    NOT_ANSWERED,
    InputError,
    Limits,
    check_integrity,
    first_line,
    jsonable,
    preview,
    printable,
    quote_ident,
    quote_literal,
)

SESSION_HEADER = "mcp-session-id"
STDIO_EPISODE = "stdio"
CARD_URI = "evalpack://pack/README.md"
DICTIONARY_URI = "evalpack://pack/dictionary.md"
DEFAULT_MAX_ROWS = 200
SAMPLE_ROWS = 5
SPLITS = ("dev", "holdout", "all")
DEFAULT_HOLDOUT_ATTEMPTS = 3
RECORDED = "recorded"


@dataclass(frozen=True)
class ValueMeaning:
    """A stored value of a column and what it stands for."""

    value: str
    meaning: str


@dataclass(frozen=True)
class Column:
    """A column of a table: its name and DuckDB type, and what the pack's data dictionary says of it (None when the
    pack has none): what questions call it, what it means, its unit, what each stored value stands for, the column it
    refers to (``table.column``)."""

    name: str
    type: str
    label: str | None = None
    description: str | None = None
    unit: str | None = None
    values: list[ValueMeaning] | None = None
    refers_to: str | None = None


@dataclass(frozen=True)
class TableList:
    """The tables of the rotation the agent explores."""

    rotation: str
    tables: list[str]


@dataclass(frozen=True)
class TableDescription:
    """One table: its columns with their types and meanings, its number of rows and its first rows, and from the
    pack's data dictionary what one row is (``one order``) and the table's description (None when it says none)."""

    rotation: str
    table: str
    columns: list[Column]
    row_count: int
    sample_rows: list[list[Any]]
    row: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class QueryResult:
    """A query's result as a table: column names, rows (decimals and dates as text), how many, seconds taken, and
    each column's DuckDB type (a DECIMAL's value is text to keep every digit: it is a number all the same)."""

    rotation: str
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    seconds: float
    types: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QuestionText:
    """What the agent may read of a question: its id, its text and its evidence (definitions, never the answer)."""

    id: str
    question: str
    evidence: str | None = None


@dataclass(frozen=True)
class QuestionList:
    """The questions of one split (``dev``, ``holdout`` or ``all``)."""

    split: str
    questions: list[QuestionText]


@dataclass(frozen=True)
class Submission:
    """A recorded answer: ``correct``, ``wrong``, ``declined``, ``not scored`` (the pack does not hold the answer)
    or ``recorded`` (no feedback: a holdout question's answer, unless the server gives holdout feedback, or any
    answer under ``--no-feedback``); ``error``: why the SQL failed on the rotation explored (dev questions only);
    ``attempts_left``: the answers this holdout question may still take in the episode (None: a dev question,
    which takes any number)."""

    question_id: str
    status: str
    answered_with: str
    error: str | None = None
    attempts_left: int | None = None


@dataclass(frozen=True)
class SplitSummary:
    """One split at an episode's end: its questions, how many the agent answered (SQL or a value; its last answer
    counts), and, where the agent gets feedback on the split, the report's counts: correct, wrong, declined (an
    unanswerable one declined is correct), not answered (no answer and no decline: never correct) and accuracy.
    None: not shown, the grades stay in the operator's episode file."""

    split: str
    questions: int
    answered: int
    correct: int | None = None
    wrong: int | None = None
    declined: int | None = None
    not_answered: int | None = None
    accuracy: float | None = None


@dataclass(frozen=True)
class EpisodeSummary:
    """An ended episode: the counts of each split (never a question's grade), what is not shown and why, and the
    file its whole report is in (the operator's)."""

    episode: str
    dev: SplitSummary
    holdout: SplitSummary
    withheld: str | None
    report_in: str


@dataclass(frozen=True)
class ServeOptions:
    """How ``evalpack serve`` runs: transport (``stdio`` or ``http``), the HTTP address, the rotation explored,
    the episode file and its cap per episode, the row cap of ``run_sql``, sandbox processes per rotation, whether
    answers get feedback (``feedback``: any; ``holdout_feedback``: holdout questions too), and the answers a holdout
    question takes per episode."""

    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8000
    rotation: str | None = None
    episode: str | Path | None = None
    max_rows: int = DEFAULT_MAX_ROWS
    workers: int = 2
    feedback: bool = True
    holdout_feedback: bool = False
    holdout_attempts: int = DEFAULT_HOLDOUT_ATTEMPTS
    episode_max_mb: float = DEFAULT_EPISODE_MAX_MB
    idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT
    rule: str = "spider"
    limits: Limits = field(default_factory=Limits)
    holdout_key: str | Path | None = None
    public_key: str | Path | None = None
    allow_unattested: bool = False
    evidence: bool = True  # False: list_questions gives no evidence (BIRD's setting without it)

    @property
    def evidence_setting(self) -> str:
        """``with`` or ``without`` (evidence), as the episode reports say it."""
        return "with" if self.evidence else "without"


class Desk:
    """What the tools work on: the pack's grader, the rotation explored, the open episodes, the pack's data dictionary
    (``dictionary.json``; None when the pack has none)."""

    def __init__(self, grader: Grader, episodes: Episodes, rotation: str, options: ServeOptions,
                 dictionary: dict | None = None) -> None:
        self.grader, self.episodes, self.rotation, self.options = grader, episodes, rotation, options
        self.dictionary = dictionary
        self._described: dict[str, TableDescription] = {}
        self._tables: list[str] | None = None
        self._schema_lock = threading.Lock()  # the tables do not change: one query fills each cache entry

    # ------------------------------------------------------------------ the tools' work (blocking; run in threads)

    def _query(self, sql: str, max_rows: int) -> list[tuple]:
        outcome = self.grader.run(self.rotation, sql, max_rows)
        if outcome.rows is None:
            raise EvalpackError(printable(outcome.error))
        return outcome.rows

    def list_tables(self) -> TableList:
        """The tables of the rotation explored (asked of its sandbox once)."""
        with self._schema_lock:
            if self._tables is None:
                rows = self._query("SELECT table_name FROM information_schema.tables ORDER BY table_name", 10_000)
                self._tables = [row[0] for row in rows]
        return TableList(self.rotation, list(self._tables))

    def describe_table(self, table: str) -> TableDescription:
        """``table``'s columns and types, row count and first rows; EvalpackError naming the tables there are."""
        tables = self.list_tables().tables
        if table not in tables:
            raise EvalpackError(f"table {printable(table)!r}: no such table on {self.rotation}; the tables are "
                                f"{', '.join(tables)}")
        with self._schema_lock:
            if table not in self._described:
                self._described[table] = self._describe(table)
        return self._described[table]

    def _describe(self, table: str) -> TableDescription:
        columns = self._query("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                              f"{quote_literal(table)} ORDER BY ordinal_position", 10_000)
        count = self._query(f"SELECT count(*) FROM {quote_ident(table)}", 1)[0][0]
        sample = self._query(f"SELECT * FROM {quote_ident(table)} LIMIT {SAMPLE_ROWS}", SAMPLE_ROWS)
        entry = next((t for t in (self.dictionary or {}).get("tables") or () if t["name"] == table), {})
        meanings = {c["name"]: c for c in entry.get("columns") or ()}
        return TableDescription(self.rotation, table, [_column(n, t, meanings.get(n)) for n, t in columns], int(count),
                                jsonable([list(r) for r in sample]), entry.get("row"), entry.get("description"))

    def run_sql(self, sql: str) -> QueryResult:
        """``sql`` on the rotation explored, in the scorer's sandbox, at most ``--max-rows`` rows; its error as an
        EvalpackError."""
        started = time.perf_counter()
        outcome = self.grader.run(self.rotation, sql, self.options.max_rows)
        if outcome.rows is None:
            hint = "; add a LIMIT or aggregate" if outcome.error.startswith("too many rows") else ""
            raise EvalpackError(printable(outcome.error) + hint)
        width = len(outcome.rows[0]) if outcome.rows else None
        names, types = self._columns(sql, width)
        return QueryResult(self.rotation, names, jsonable([list(r) for r in outcome.rows]), len(outcome.rows),
                           round(time.perf_counter() - started, 6), types)

    def _columns(self, sql: str, width: int | None) -> tuple[list[str], list[str]]:
        """The result's column names and types, from DuckDB's DESCRIBE of the query (in the sandbox too): it binds
        the query without running it. ``column_<n>`` and no types where that cannot say."""
        text = sql.strip().rstrip(";").rstrip()
        outcome = self.grader.run(self.rotation, f"SELECT column_name, column_type FROM (DESCRIBE (\n{text}\n))",
                                  10_000)
        described = [(row[0], row[1]) for row in outcome.rows or ()]
        if outcome.rows is None or (width is not None and len(described) != width):
            return [f"column_{i}" for i in range(1, (width or 0) + 1)], []
        return [name for name, _ in described], [str(kind) for _, kind in described]

    def list_questions(self, split: str) -> QuestionList:
        """Id, text and evidence of the questions of ``split`` (``dev``, ``holdout`` or ``all``), in the pack's
        order."""
        if split not in SPLITS:
            raise EvalpackError(f"split {printable(split)!r}: use one of {', '.join(SPLITS)}")
        chosen = [r for r in self.grader.records if split == "all" or r.get("split", "dev") == split]
        shown = self.options.evidence  # --no-evidence: every question's evidence is null
        return QuestionList(split, [QuestionText(r["id"], str(r.get("question") or ""),
                                                 r.get("evidence") if shown else None) for r in chosen])

    def shows(self, split: str) -> bool:
        """Whether the agent is told the grades of ``split``'s answers (at once and in end_episode's counts)."""
        return self.options.feedback and (split != "holdout" or self.options.holdout_feedback)

    def submit_answer(self, episode: Episode, question_id: str, sql: str | None, value: Any,
                      decline: bool) -> Submission:
        """Grade one answer (exactly one of ``sql``, ``value``, ``decline``) on every rotation and keep it as the
        episode's answer to ``question_id``; what the agent is told of it. A holdout question's answer takes one of
        its ``--holdout-attempts`` first (none left: EvalpackError, nothing graded); an answer refused as input
        (two at once, a value that is no answer) takes none."""
        given = [name for name, v in (("sql", sql), ("value", value), ("decline", decline or None)) if v is not None]
        if len(given) != 1:
            raise EvalpackError("give exactly one of sql, value or decline: true"
                                + (f" (got {', '.join(given)})" if given else ""))
        record = self.grader.question(question_id)
        if value is not None:
            sql = value_sql(typed_value(record, value))
        split = record.get("split", "dev")
        left = episode.attempt(question_id, self.options.holdout_attempts) if split == "holdout" else None
        started = time.perf_counter()
        try:
            graded = self.grader.grade(question_id, None if decline else sql, episode.budget())
        except BaseException:
            if left is not None:
                episode.give_back(question_id)
            raise
        episode.record(graded, time.perf_counter() - started)
        if not self.shows(split):  # the answer is graded (for the report), the agent told only that it counts
            return Submission(question_id, RECORDED, given[0], None, left)
        error = None
        if split != "holdout":  # of a holdout question the agent learns correct or wrong, no more
            error = graded.rotations.get(self.rotation, {}).get("error")
        return Submission(question_id, graded.status, given[0], error, left)

    def end_episode(self, episode: Episode) -> EpisodeSummary:
        """End ``episode`` (its answers and report logged); the counts the agent may see (:class:`SplitSummary`)."""
        report = self.episodes.end(episode.id)
        if report is None:
            raise EvalpackError(f"episode {episode.id} has ended already")
        _announce(self, episode.id, report)
        return episode_summary(self, episode, report)


    # ------------------------------------------------------------------ calls

    def episode_id(self, ctx: Context) -> str | None:
        """The episode a request belongs to: stdio's one session, or the streamable HTTP session (None without one)."""
        return self.episode_of(ctx.headers)

    def episode_of(self, headers: Mapping[str, str] | None) -> str | None:
        """The episode of a request with these HTTP headers (stdio: its one session's)."""
        if self.episodes.transport == "stdio":
            return STDIO_EPISODE
        return (headers or {}).get(SESSION_HEADER)

    def opened(self, episode_id: str, session: Any) -> Episode:
        """The episode ``episode_id``, opened on its first request, which ties its end to ``session``'s."""
        episode, new = self.episodes.open(episode_id)
        if new:
            _on_connection_close(session, lambda: self.end_async(episode_id))
        return episode

    async def end_async(self, episode_id: str) -> None:
        """End an episode (its session closed) and say so on stderr."""
        _announce(self, episode_id, await anyio.to_thread.run_sync(self.episodes.end, episode_id))

    async def call(self, ctx: Context, tool: str, arguments: dict[str, Any], work: Callable[[Episode], Any]) -> Any:
        """Run ``work`` for the request's episode in a worker thread and log the call; an input error (or a query's
        error) is the call's error, raised as the SDK's ToolError for the agent to read. An episode's first call
        ties its end to its session's (:func:`_on_connection_close`)."""
        started = time.perf_counter()
        error, size = None, 0
        episode_id = self.episode_id(ctx)
        too_long = {name: length for name, value in arguments.items()
                    if (length := argument_size(value)) > MAX_SQL_CHARS}
        try:
            if too_long:  # refused before any work, and logged as a preview: an agent cannot fill the episode file
                name, length = next(iter(too_long.items()))
                raise EvalpackError(f"{name}: {length:,} characters long; an argument may have at most "
                                    f"{MAX_SQL_CHARS:,} (as JSON), the longest SQL that runs")
            if episode_id is None:
                raise EvalpackError("this server keeps one episode per session: connect with a session "
                                    f"(the {SESSION_HEADER} header of streamable HTTP)")
            episode = self.opened(episode_id, ctx.request_context.session)
            result = await anyio.to_thread.run_sync(work, episode)
            size = len(json.dumps(asdict(result), ensure_ascii=False, default=str).encode("utf-8", "replace"))
            return result
        except InputError as exc:
            error = str(exc)
            raise ToolError(error) from None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            logged = {name: preview(jsonable(value)) if name in too_long else value
                      for name, value in arguments.items()}
            self.episodes.call(episode_id or "-", tool, logged, time.perf_counter() - started, size, error)


def _column(name: str, kind: str, entry: dict | None) -> Column:
    """A column as describe_table gives it: its name and DuckDB type, and its dictionary ``entry`` (None: none)."""
    if entry is None:
        return Column(name, kind)
    values = entry.get("values")
    return Column(name, kind, entry.get("label"), entry.get("description"), entry.get("unit"),
                  None if values is None else [ValueMeaning(v["value"], v["meaning"]) for v in values],
                  entry.get("refers_to"))


def episode_summary(desk: Desk, episode: Episode, report: dict[str, Any]) -> EpisodeSummary:
    """What end_episode tells the agent: per split, its questions and how many it answered, and the report's counts
    only of a split it gets feedback on. A holdout count would be a verdict: an agent that answers one holdout
    question, ends its episode and reads the count learns that question's grade, and sessions are free."""
    by_split = report["summary"].get("by_split", {})
    with episode.lock:
        answered = {g.question_id for g in episode.graded.values() if g.sql is not None}
    splits, withheld = {}, []
    for split in ("dev", "holdout"):
        ids = [r["id"] for r in desk.grader.records if r.get("split", "dev") == split]
        counts = by_split.get(split)
        if desk.shows(split) and counts is not None:
            splits[split] = SplitSummary(split, len(ids), len(answered.intersection(ids)), counts["correct"],
                                         counts["wrong"], counts["declined"], counts[NOT_ANSWERED],
                                         counts["accuracy"])
        else:
            splits[split] = SplitSummary(split, len(ids), len(answered.intersection(ids)))
            if ids:
                why = ("not scored here: the server holds no answer key" if desk.shows(split) else
                       "no feedback on this server" if not desk.options.feedback else "holdout answers get no feedback")
                withheld.append(f"{split} grades ({why})")
    note = None
    if withheld:
        note = f"not shown: {' and '.join(withheld)}; the evaluation's report holds them"
    return EpisodeSummary(episode.id, splits["dev"], splits["holdout"], note, str(desk.episodes.log.path))


def instructions(desk: Desk) -> str:
    """The server's instructions to the agent: what the pack is, what each tool is for, and (a pack with a data
    dictionary) where the dictionary is and the conventions every question shares."""
    grader, options = desk.grader, desk.options
    dev = sum(1 for r in grader.records if r.get("split", "dev") == "dev")
    if not options.feedback:
        feedback = "You are told only that each answer was recorded, not whether it is correct. "
    elif options.holdout_feedback:
        feedback = "You are told whether each answer is correct. "
    else:
        feedback = ("You are told whether an answer to a dev question is correct; of a holdout question only that "
                    "the answer was recorded. ")
    tries = options.holdout_attempts
    described = ("columns, types, what each column and stored value means from the pack's data dictionary, row "
                 "count, sample rows" if desk.dictionary else "columns, types, row count, sample rows")
    evidence = ("evidence: knowledge the question shares, to follow, or null" if options.evidence else
                "evidence: null in this evaluation, which is run without evidence")
    text = (
        f"This server holds an evalpack evaluation pack ({grader.pack.name}): {len(grader.records)} questions about "
        f"the tables of a database ({dev} in the dev split), each with one right answer fixed before the data was "
        f"made. You work on rotation {desk.rotation}; your answers are graded on every rotation "
        f"({', '.join(grader.rotations)}), which hold other rows but the same facts, so answer with a query rather "
        f"than a number you saw. Tools: list_tables and describe_table ({described}) to "
        "learn the schema; run_sql runs one read-only SELECT (DuckDB SQL) on your rotation, with a time limit and "
        f"at most {desk.options.max_rows} rows; list_questions gives the questions of a split (id, question, "
        f"{evidence}); submit_answer records your answer to one question: the SQL that answers "
        "it (preferred), a value, or decline: true when no query on this schema can answer it (some questions are "
        "like that; declining them is correct). You may submit again: the last answer counts; a holdout question "
        f"takes at most {tries} answer{'s' if tries != 1 else ''} per episode. {feedback}end_episode ends your "
        f"episode and grades it. The dataset card is the resource {CARD_URI}."
    )
    if not desk.dictionary:
        return text
    where = f", the resource {DICTIONARY_URI}" if PackLayout(grader.pack).dictionary_md.is_file() else ""
    conventions = "\n".join(f"- {c['name']}: {c['definition']}" for c in desk.dictionary.get("conventions") or ())
    return (f"{text} Every question reads under the pack's data dictionary{where}: what one row of each table is, "
            "what each column and stored value means, the measures and terms"
            + (f", and these conventions:\n{conventions}" if conventions else "."))


def build_server(desk: Desk) -> MCPServer:
    """The MCP server (``mcp.server.mcpserver.MCPServer``) with the pack's tools and its dataset card."""
    server = MCPServer("evalpack", title=f"evalpack: {desk.grader.pack.name}", instructions=instructions(desk),
                       log_level="WARNING")
    server.middleware.append(ReadsLogged(desk))

    @server.tool()
    async def list_tables(ctx: Context) -> TableList:
        """The tables of the rotation you explore."""
        return await desk.call(ctx, "list_tables", {}, lambda _: desk.list_tables())

    @server.tool()
    async def describe_table(table: str, ctx: Context) -> TableDescription:
        """A table's columns with their types, its number of rows and its first rows."""
        return await desk.call(ctx, "describe_table", {"table": table}, lambda _: desk.describe_table(table))

    @server.tool()
    async def run_sql(sql: str, ctx: Context) -> QueryResult:
        """Run one read-only query (a single SELECT or WITH statement, DuckDB SQL) on your rotation; the result as a
        table. It is stopped at the time limit; a result with more rows than the cap is refused (add a LIMIT)."""
        return await desk.call(ctx, "run_sql", {"sql": sql}, lambda _: desk.run_sql(sql))

    @server.tool()
    async def list_questions(ctx: Context, split: str = "dev") -> QuestionList:
        """The questions of a split (dev, holdout or all): id, question and evidence (never an answer)."""
        return await desk.call(ctx, "list_questions", {"split": split},
                               lambda _: desk.list_questions(split))

    @server.tool()
    async def submit_answer(question_id: str, ctx: Context, sql: str | None = None, value: Any = None,
                            decline: bool = False) -> Submission:
        """Answer one question with exactly one of: ``sql`` (a query whose result is the answer, preferred),
        ``value`` (the answer itself: a number, a text, or rows as a list of lists), or ``decline: true`` (no query
        on this schema answers it). Graded at once on every rotation; the last answer to a question counts. A dev
        question's answer is told correct or wrong; a holdout question's only recorded (unless the server says
        otherwise), and a holdout question takes a few answers per episode at most (the server's instructions say
        how many)."""
        arguments = {"question_id": question_id, "sql": sql, "value": value, "decline": decline}
        return await desk.call(ctx, "submit_answer", arguments,
                               lambda episode: desk.submit_answer(episode, question_id, sql, value, decline))

    @server.tool()
    async def end_episode(ctx: Context) -> EpisodeSummary:
        """End your episode: your answers are final and graded (a question you neither answered nor declined is
        not answered: never correct)."""
        return await desk.call(ctx, "end_episode", {}, desk.end_episode)

    layout = PackLayout(desk.grader.pack)

    @server.resource(CARD_URI, name="dataset card", description="the pack's dataset card (README.md)",
                     mime_type="text/markdown")
    def dataset_card() -> str:
        return layout.card.read_text(encoding="utf-8")

    if desk.dictionary is not None and layout.dictionary_md.is_file():

        @server.resource(DICTIONARY_URI, name="data dictionary",
                         description="the pack's data dictionary (dictionary.md): conventions, measures, terms, and "
                                     "what each table's rows and each column mean", mime_type="text/markdown")
        def data_dictionary() -> str:
            return layout.dictionary_md.read_text(encoding="utf-8")

    return server


# what an agent lists and reads besides calling tools: part of its episode, logged as a call named like the SDK's
LOGGED_REQUESTS = {"tools/list": "list_tools", "resources/list": "list_resources",
                   "resources/templates/list": "list_resource_templates", "resources/read": "read_resource",
                   "prompts/list": "list_prompts"}


class ReadsLogged:
    """MCP middleware (the SDK's ``Server.middleware``): each request of :data:`LOGGED_REQUESTS` is logged in the
    episode file as a call, its arguments an object as every call's are (``read_resource``: ``{"uri": ...}``),
    and opens the episode like a tool call does."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        name = LOGGED_REQUESTS.get(ctx.method)
        if name is None:
            return await call_next(ctx)
        started, error, size = time.perf_counter(), None, 0
        try:
            result = await call_next(ctx)
            dump = getattr(result, "model_dump_json", None)
            size = len(dump().encode("utf-8")) if dump else 0
            return result
        except Exception as exc:
            error = f"{type(exc).__name__}: {first_line(exc)}"
            raise
        finally:
            self.log(ctx, name, time.perf_counter() - started, size, error)

    def log(self, ctx: Any, name: str, seconds: float, size: int, error: str | None) -> None:
        """Log one listing or reading in its episode, opening the episode; nothing once the episode has ended (the
        request itself is answered all the same: listing the tools after end_episode is no tool call)."""
        episode_id = self.desk.episode_of(getattr(ctx.request, "headers", None))
        if episode_id is not None:
            try:
                self.desk.opened(episode_id, ctx.session)
            except EvalpackError:  # ended: its answers are final, its file has its end record
                return
        arguments = {"uri": str((ctx.params or {}).get("uri"))} if name == "read_resource" else {}
        self.desk.episodes.call(episode_id or "-", name, arguments, seconds, size, error)


def _on_connection_close(session: Any, callback: Callable[[], Awaitable[None]]) -> bool:
    """Have ``callback`` awaited when the SDK closes the request's connection: an HTTP session however it ends
    (DELETE, the idle timeout, a crash, the server's stop) or stdio's one session. The SDK keeps a per-connection
    ``exit_stack`` for such teardown, but mcp 2.3 hands it only to the low-level Context, which MCPServer's tools do
    not get yet (the TODO on ``Context`` in mcp/server/context.py): it is read from the request's ServerSession
    here, this module's one use of a private name. False when it is not there; the DELETE hook
    (:class:`_EndOnDelete`) and the server's stop still end the episode then."""
    connection = getattr(session, "_connection", None)
    stack = getattr(connection, "exit_stack", None)
    if stack is None:
        return False
    stack.push_async_callback(callback)
    return True


class _EndOnDelete:
    """ASGI wrapper: when a client deletes its streamable HTTP session, that session's episode ends."""

    def __init__(self, app, desk: Desk) -> None:
        self.app, self.desk = app, desk

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)
        if scope.get("type") == "http" and scope.get("method") == "DELETE":
            session = dict(scope.get("headers") or ()).get(SESSION_HEADER.encode())
            if session:
                await self.desk.end_async(session.decode("latin-1"))


def _announce(desk: Desk, episode_id: str, report: dict | None) -> None:
    if report is not None:
        o = report["summary"]["overall"]
        print(printable(f"evalpack serve: episode {episode_id} ended: {o['correct']}/{o['n']} correct, {o['wrong']} "
                        f"wrong, {o['declined']} declined, {o[NOT_ANSWERED]} not answered; report in {desk.episodes.log.path}"), file=sys.stderr,
              flush=True)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_desk(pack: str | Path, options: ServeOptions) -> Desk:
    """Check the pack (its integrity, as ``evalpack score`` does), open its grader and the episode file; every
    mistake is an EvalpackError naming the option."""
    if options.transport not in ("stdio", "http"):
        raise EvalpackError(f"--transport {options.transport!r}: use stdio or http")
    if options.transport == "http" and not _loopback(options.host):
        raise EvalpackError(f"--host {options.host}: evalpack serve listens on the loopback address only "
                            "(127.0.0.1, ::1 or localhost)")
    if not 0 <= options.port <= 65535:
        raise EvalpackError(f"--port {options.port}: use a port from 1 to 65535 (0: any free port)")
    if options.max_rows < 1 or options.workers < 1:
        raise EvalpackError("--max-rows and --workers must be at least 1")
    if not (math.isfinite(options.idle_timeout) and options.idle_timeout > 0):
        raise EvalpackError(f"--idle-timeout {options.idle_timeout}: give a finite number of seconds above 0")
    if options.holdout_feedback and not options.feedback:
        raise EvalpackError("--holdout-feedback and --no-feedback: the one gives holdout answers feedback, the other "
                            "no answer any; give one of them")
    if options.holdout_attempts < 1:
        raise EvalpackError(f"--holdout-attempts {options.holdout_attempts}: give the answers a holdout question "
                            "takes per episode, at least 1")
    if not (math.isfinite(options.episode_max_mb) and options.episode_max_mb > 0):
        raise EvalpackError(f"--episode-max-mb {options.episode_max_mb:g}: give the megabytes an episode's call "
                            "records may take of the episode file, a finite number above 0")
    folder = Path(pack)
    if not folder.is_dir():
        raise EvalpackError(f"{pack}: not a pack folder; pass the folder `evalpack build -o` wrote")
    episode_file = options.episode or episode_log_beside(folder)
    refuse_inside_pack(episode_file, folder, options.holdout_key)  # before the server starts, anything read or written
    limits = options.limits.checked()
    integrity = check_integrity(folder, options.public_key, allow_unattested=options.allow_unattested)
    dictionary = PackLayout(folder).read_dictionary()  # its shape checked before an agent reads a word of it
    grader = Grader(folder, rule=options.rule, limits=limits, holdout_key=options.holdout_key,
                    integrity=integrity, workers=options.workers)
    rotation = options.rotation or grader.rotations[0]
    if rotation not in grader.rotations:
        raise EvalpackError(f"--rotation {rotation}: the pack's rotations are {', '.join(grader.rotations)}")
    log = EpisodeLog(episode_file)
    episodes = Episodes(grader, log, rotation, options.transport, max(1, int(options.episode_max_mb * 2**20)),
                        evidence=options.evidence_setting)
    return Desk(grader, episodes, rotation, options, dictionary)


def serve_command(pack: str | Path, options: ServeOptions) -> int:
    """``evalpack serve``: serve the pack until the client goes (stdio) or the server is stopped (HTTP); every
    open episode ends (its report logged) and every sandbox process ends before this returns."""
    desk = open_desk(pack, options)
    server = build_server(desk)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if options.transport == "stdio":
            anyio.run(server.run_stdio_async)
        else:
            anyio.run(_serve_http, server, desk)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM (a client's shutdown) lets the reports finish
        try:
            close_desk(desk)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return 0


def close_desk(desk: Desk) -> None:
    """End every open episode (its report logged and announced), close the episode file and end every sandbox
    process: what ``evalpack serve`` does as it stops, whatever stopped it."""
    for episode_id, report in desk.episodes.end_all():
        _announce(desk, episode_id, report)
    desk.episodes.log.close()
    for problem in desk.grader.close():
        print(printable(f"evalpack serve: {problem}"), file=sys.stderr)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


async def _serve_http(server, desk: Desk) -> None:
    import uvicorn

    options = desk.options
    app = _EndOnDelete(server.streamable_http_app(host=options.host, session_idle_timeout=options.idle_timeout), desk)
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((options.host, options.port))
    except OSError as exc:
        sock.close()
        raise EvalpackError(f"--port {options.port}: cannot listen on {options.host} ({exc.strerror or exc}); "
                            "choose another port (0: any free one)") from None
    # listening before the address is printed: a client that connects as soon as it reads the line waits in the
    # backlog until the server accepts, instead of being refused while the server starts (seen under load)
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    shown = host if family == socket.AF_INET else f"[{host}]"
    print(f"evalpack serve: {desk.grader.pack} on http://{shown}:{port}/mcp "
          f"(rotation {desk.rotation}; episodes in {desk.episodes.log.path})", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    await uvicorn.Server(config).serve(sockets=[sock])
