"""evalpack serve, driven by the official MCP client: the tools' semantics through the SDK's in-memory client (the
server built in this process, one session as over stdio), and each transport (stdio, streamable HTTP) through a
server process of its own. Answers are graded by the scorer, the episode report is the one `evalpack score` writes
for the same answers, hostile SQL escapes nothing, holdout answers never reach the agent, and 50 sessions at once
complete."""

from __future__ import annotations

import copy
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path

import anyio
import duckdb
import pytest
from conftest import copy_pack, full_questions
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from test_scoring_isolation import hostile
from test_scoring_sandbox import _snapshot

from evalpack.agent.grader import Grader, value_sql
from evalpack.agent.serve import CARD_URI, DICTIONARY_URI, ServeOptions, build_server, close_desk, open_desk
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import Limits

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"list_tables", "describe_table", "run_sql", "list_questions", "submit_answer", "end_episode"}
SERVE = [sys.executable, "-m", "evalpack.cli", "serve"]


# --------------------------------------------------------------------------- driving the server


def serve_args(pack: Path, episode: Path, *extra: str) -> list[str]:
    return [str(pack), "--episode", str(episode), "--timeout", "5", *extra]


@asynccontextmanager
async def stdio_session(pack: Path, episode: Path, *extra: str):
    params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *serve_args(pack, episode, *extra)],
                                   cwd=str(episode.parent))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def memory_session(pack: Path, episode: Path, **options):
    """The server built in this process and its one session through the SDK's in-memory client, in the SDK's legacy
    mode (one connection for the session, as stdio's): the episode ends when the client closes, and every sandbox
    process when the desk closes, as `evalpack serve` does when its input closes."""
    desk = open_desk(pack, ServeOptions(episode=episode, limits=Limits(timeout=5), **options))
    try:
        async with Client(build_server(desk), mode="legacy") as client:
            yield client
    finally:
        await anyio.to_thread.run_sync(close_desk, desk)


class HttpServer:
    """``evalpack serve --transport http --port 0`` in a process of its own; ``url`` once it listens."""

    def __init__(self, pack: Path, episode: Path, *extra: str) -> None:
        self.errors = episode.with_suffix(".stderr")
        with open(self.errors, "wb") as err:
            self.proc = subprocess.Popen([*SERVE, *serve_args(pack, episode, "--transport", "http", "--port", "0",
                                                              *extra)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         cwd=episode.parent)
        deadline = time.monotonic() + 120
        # read often, so that the first request follows the printed address as closely as a harness's would
        while not (found := re.search(r"on (http://127\.0\.0\.1:(\d+)/mcp)", self.errors.read_text())):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.errors.read_text()
            time.sleep(0.001)
        self.url, self.port = found.group(1), int(found.group(2))

    @asynccontextmanager
    async def session(self):
        async with streamable_http_client(self.url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


async def call(session: ClientSession, seen: list[str], tool: str, **arguments):
    """A tool call's structured result (None when the call is an error, its text then kept in ``seen`` too)."""
    result = await session.call_tool(tool, arguments)
    seen.extend(block.text for block in result.content if hasattr(block, "text"))
    return None if result.is_error else result.structured_content


def episode_records(path: Path) -> list[dict]:
    """The episode file's whole records (a line still being written, without its newline, is not one yet)."""
    text = path.read_text(encoding="utf-8")
    complete = text[:text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def ended(path: Path, timeout: float = 60) -> list[dict]:
    """The end records of the episode file, waiting until there is at least one."""
    deadline = time.monotonic() + timeout
    while True:
        ends = [r for r in episode_records(path) if r["event"] == "end"] if path.exists() else []
        if ends or time.monotonic() > deadline:
            return ends
        time.sleep(0.1)


def comparable(report: dict) -> dict:
    """A report without what differs between two runs of the same answers: times, where the answers came from, and
    the excerpt of a result set (its first rows in the order DuckDB's threads returned them, which two runs of
    `evalpack score` need not share either)."""
    report = copy.deepcopy(report)
    report.pop("timing")
    report.pop("candidates")
    report.pop("evidence", None)  # the episode's: whether the agent was given the questions' evidence
    for question in report["questions"]:
        for run in question["rotations"].values():
            run.pop("seconds")
            if question["answer_type"] == "rows":
                run.pop("observed", None)
    return report


# --------------------------------------------------------------------------- the agent's episode


async def work_the_pack(session: ClientSession, pack: Path, records: list[dict]) -> tuple[dict, dict, list[str]]:
    """Discover the tools, explore, and answer every question: gold SQL, some wrong SQL, a value, declines. Returns
    the answers as `evalpack score` reads them (id -> SQL or None), the status each submission was given, and every
    text the server sent back."""
    seen: list[str] = []
    assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
    tables_dir = pack / "rotations" / "seed_42" / "tables"
    listed = await call(session, seen, "list_tables")
    assert listed["rotation"] == "seed_42"
    assert listed["tables"] == sorted(p.stem for p in tables_dir.glob("*.parquet"))
    with duckdb.connect() as con:
        orders = con.execute(f"SELECT count(*) FROM read_parquet('{tables_dir / 'orders.parquet'}')").fetchone()[0]
        names = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{tables_dir / 'orders.parquet'}')").fetchall()
    described = await call(session, seen, "describe_table", table="orders")
    assert described["row_count"] == orders and len(described["sample_rows"]) == 5
    assert [(c["name"], c["type"]) for c in described["columns"]] == [(n, t) for n, t, *_ in names]
    counted = await call(session, seen, "run_sql", sql="SELECT count(*) AS n, min(amount) AS low FROM orders;")
    assert counted["columns"] == ["n", "low"] and counted["rows"][0][0] == orders
    assert await call(session, seen, "run_sql", sql="DROP TABLE orders") is None
    assert "only a query" in seen[-1]
    assert await call(session, seen, "run_sql", sql="SELECT * FROM orders") is None
    assert "too many rows" in seen[-1]
    assert await call(session, seen, "describe_table", table="nope") is None
    for split in ("dev", "holdout"):
        listed = await call(session, seen, "list_questions", split=split)
        assert [q["id"] for q in listed["questions"]] == [r["id"] for r in records if r["split"] == split]
        assert all(set(q) == {"id", "question", "evidence"} for q in listed["questions"])
    assert (await session.list_resources()).resources[0].uri == "evalpack://pack/README.md"
    card = await session.read_resource("evalpack://pack/README.md")
    assert card.contents[0].text == (pack / "README.md").read_text(encoding="utf-8")

    gold = [r for r in records if r.get("answerable") is not False]
    declines = [r for r in records if r.get("answerable") is False]
    by_value = next(r for r in gold if r["answer_type"] == "integer" and r["split"] == "dev")
    first, second, declined = [r for r in gold if r is not by_value][:3]
    held = next(r for r in gold if r["split"] == "holdout" and r not in (first, second, declined))
    answers: dict[str, str | None] = {}
    statuses: dict[str, str] = {}

    async def submit(record: dict, **answer) -> None:
        result = await call(session, seen, "submit_answer", question_id=record["id"], **answer)
        statuses[record["id"]] = result["status"]
        answers[record["id"]] = answer.get("sql") if "sql" in answer else (
            f"SELECT {answer['value']}" if "value" in answer else None)

    await submit(first, sql="SELECT 1")
    assert statuses[first["id"]] == "wrong"
    for record in gold:
        if record not in (by_value, declined):
            await submit(record, sql=record["gold_sql"])
            assert statuses[record["id"]] == ("recorded" if record["split"] == "holdout" else "correct"), record["id"]
    await submit(second, sql="SELECT 1 AS nothing")  # the last answer counts: wrong
    await submit(held, sql="SELECT count(*) FROM orders")  # a holdout question: recorded, no verdict (issue 50)
    await submit(by_value, value=by_value["expected_answer"])
    await submit(declined, decline=True)
    for record in declines[1:]:
        await submit(record, decline=True)
    await submit(declines[0], sql="SELECT 1")
    assert await call(session, seen, "submit_answer", question_id=first["id"].upper(), decline=True) is None
    assert f"did you mean {first['id']}" in seen[-1]
    assert await call(session, seen, "submit_answer", question_id=first["id"], sql="SELECT 1", decline=True) is None
    told = {**{r["id"]: "correct" for r in gold + declines}, second["id"]: "wrong", held["id"]: "wrong",
            declined["id"]: "declined", declines[0]["id"]: "wrong"}
    split = {r["id"]: r["split"] for r in records}
    assert statuses == {i: "recorded" if split[i] == "holdout" else status for i, status in told.items()}
    return answers, statuses, seen


def check_episode(pack: Path, episode: Path, records: list[dict], answers: dict, seen: list[str],
                  end: dict, tmp: Path, wrong: int = 3) -> None:
    """The episode's log and report: every call logged, the report equal to `evalpack score` on the same answers,
    and nothing of the holdout's answers in what the agent was sent."""
    calls = [r for r in episode_records(episode) if r["event"] == "call" and r["episode"] == end["episode"]]
    assert all(c["seconds"] >= 0 and isinstance(c["result_bytes"], int) for c in calls)
    assert sum(c["tool"] == "submit_answer" and c["error"] is None for c in calls) >= len(answers)
    # the last answer per question, as `evalpack score` reads them (the value as the query that returns it)
    assert {a["id"]: a.get("sql") for a in end["answers"]} == answers
    candidates = tmp / "candidates.jsonl"
    candidates.write_text("".join(json.dumps({"id": i, "sql": s} if s is not None else {"id": i, "declined": True})
                                  + "\n" for i, s in answers.items()))
    scored = tmp / "scored.json"
    run = subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(pack), "--candidates", str(candidates),
                          "--json", str(scored), "--timeout", "5"], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert run.returncode == 1, run.stderr
    assert comparable(end["report"]) == comparable(json.loads(scored.read_text()))
    assert end["text"].splitlines()[-4:] == run.stdout.splitlines()[-4:]  # the totals as `evalpack score` prints them
    assert end["report"]["summary"]["overall"]["wrong"] == wrong
    assert end["report"]["evidence"] == "with"
    text = "\n".join(seen)
    for record in records:
        if record["split"] == "holdout":
            assert record["gold_sql"] and record["gold_sql"] not in text


def test_an_agent_works_a_pack_and_its_report_is_evalpack_scores(retail_pack, tmp_path):
    records = full_questions(retail_pack)
    episode = tmp_path / "episode.jsonl"

    async def agent() -> tuple[dict, dict, list[str]]:
        async with memory_session(retail_pack, episode) as session:
            return await work_the_pack(session, retail_pack, records)

    answers, _, seen = anyio.run(agent)
    ends = ended(episode, timeout=0)  # the session's close ended the episode, its report written
    assert len(ends) == 1
    records_ = episode_records(episode)
    calls = [r for r in records_ if r["event"] == "call"]
    # what the agent listed and read is in its episode too (issue 55 point 8), each call's arguments an object
    assert {c["tool"] for c in calls} == TOOLS - {"end_episode"} | {"list_tools", "list_resources", "read_resource"}
    assert records_[0]["event"] == "start" and calls[0]["tool"] == "list_tools"
    assert all(isinstance(c["arguments"], dict) for c in calls)
    assert [c["arguments"] for c in calls if c["tool"] == "read_resource"] == [{"uri": "evalpack://pack/README.md"}]
    check_episode(retail_pack, episode, records, answers, seen, ends[0], tmp_path)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_each_transport_serves_an_episode_whose_report_is_evalpack_scores(retail_pack, tmp_path, transport):
    """The tools over each transport, from a server process of its own: its episode ends when the client goes
    (stdio: its input closes; HTTP: it deletes its session), and the report is `evalpack score`'s."""
    records = [r for r in full_questions(retail_pack) if r["split"] == "dev" and r.get("answerable") is not False]
    right, wrong = records[:2]
    episode = tmp_path / "episode.jsonl"
    seen: list[str] = []

    async def agent(session_of) -> list[str]:
        async with session_of() as session:
            assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
            assert (await call(session, seen, "list_tables"))["rotation"] == "seed_42"
            graded = [await call(session, seen, "submit_answer", question_id=right["id"], sql=right["gold_sql"]),
                      await call(session, seen, "submit_answer", question_id=wrong["id"], sql="SELECT 1")]
            return [g["status"] for g in graded]

    if transport == "stdio":
        statuses = anyio.run(agent, lambda: stdio_session(retail_pack, episode))
        ends = ended(episode, timeout=0)  # the server wrote its report before it exited
    else:
        server = HttpServer(retail_pack, episode)
        try:
            statuses = anyio.run(agent, server.session)
            ends = ended(episode)  # the client deleted its session: the episode ended then
        finally:
            assert server.stop() == 0
    assert statuses == ["correct", "wrong"] and len(ends) == 1
    check_episode(retail_pack, episode, records, {right["id"]: right["gold_sql"], wrong["id"]: "SELECT 1"}, seen,
                  ends[0], tmp_path, wrong=1)


def test_a_client_that_connects_as_soon_as_the_address_is_printed_is_accepted(retail_pack, tmp_path):
    """`serve --transport http` prints its address once it listens: a harness that connects the moment it reads the
    line waits for the server instead of being refused while it starts (CI saw that refusal under load)."""
    server = HttpServer(retail_pack, tmp_path / "episode.jsonl")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            conn.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert conn.recv(12).startswith(b"HTTP/1.1 ")
    finally:
        server.stop()


def test_an_episode_ends_by_its_tool_and_a_new_session_starts_another(retail_pack, tmp_path):
    episode = tmp_path / "episode.jsonl"
    server = HttpServer(retail_pack, episode, "--no-feedback")
    record = next(r for r in full_questions(retail_pack) if r.get("answerable") is not False)
    seen: list[str] = []

    async def agent() -> tuple[dict, dict]:
        async with server.session() as session:
            submitted = await call(session, seen, "submit_answer", question_id=record["id"], sql=record["gold_sql"])
            summary = await call(session, seen, "end_episode")
            assert await call(session, seen, "list_tables") is None and "has ended" in seen[-1]
        return submitted, summary

    try:
        submitted, summary = anyio.run(agent)
        again, _ = anyio.run(agent)
        ends = ended(episode)
    finally:
        assert server.stop() == 0
    assert submitted["status"] == again["status"] == "recorded"  # --no-feedback: correct or not, the agent is not told
    assert summary["dev"]["correct"] is None and summary["dev"]["answered"] == 1  # nor at the end
    assert summary["report_in"] == str(episode)
    assert all(e["report"]["summary"]["overall"]["correct"] >= 1 for e in ends)
    assert len({e["episode"] for e in ends}) == 2


def test_a_session_the_client_leaves_without_closing_ends_its_episode_at_the_idle_timeout(retail_pack, tmp_path):
    episode = tmp_path / "episode.jsonl"
    server = HttpServer(retail_pack, episode, "--idle-timeout", "1")
    record = next(r for r in full_questions(retail_pack) if r.get("answerable") is not False)
    seen: list[str] = []

    async def vanishing_agent() -> None:  # goes away without deleting its session, as a crashed client would
        async with streamable_http_client(server.url, terminate_on_close=False) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            await call(session, seen, "submit_answer", question_id=record["id"], sql=record["gold_sql"])

    try:
        anyio.run(vanishing_agent)
        ends = ended(episode, timeout=60)  # while the server runs on
        assert server.proc.poll() is None
    finally:
        assert server.stop() == 0
    assert len(ends) == 1 and ends[0]["answers"] == [{"id": record["id"], "sql": record["gold_sql"]}]


def test_a_public_pack_grades_no_holdout_question_and_the_report_still_is_evalpack_scores(retail_pack, tmp_path):
    import shutil

    pack = tmp_path / "public"
    shutil.copytree(retail_pack, pack)  # without the answer key beside it: as downloaded
    records = full_questions(retail_pack)
    held = next(r for r in records if r["split"] == "holdout")
    dev = next(r for r in records if r["split"] == "dev" and r.get("answerable") is not False)
    episode = tmp_path / "episode.jsonl"
    seen: list[str] = []

    async def agent() -> dict:
        async with memory_session(pack, episode) as session:
            await call(session, seen, "submit_answer", question_id=dev["id"], sql=dev["gold_sql"])
            return await call(session, seen, "submit_answer", question_id=held["id"], sql=held["gold_sql"])

    graded = anyio.run(agent)
    assert graded["status"] == "recorded" and graded["error"] is None  # no key, no verdict: nothing to tell
    [end] = ended(episode, timeout=0)
    assert end["report"]["holdout_key"] is None and end["report"]["unscored_candidates"] == [held["id"]]
    check_episode(pack, episode, [], {dev["id"]: dev["gold_sql"], held["id"]: held["gold_sql"]}, seen, end, tmp_path,
                  wrong=0)


def test_every_expected_answer_given_as_a_value_is_correct_and_a_near_one_wrong(retail_pack):
    grader = Grader(retail_pack, workers=1)
    try:
        answered = [r for r in grader.records if r.get("expected_answer") is not None]
        assert {"number", "integer", "rows"} <= {r["answer_type"] for r in answered}
        for record in answered:
            assert grader.grade(record["id"], value_sql(record["expected_answer"])).status == "correct", record["id"]
        number = next(r for r in answered if r["answer_type"] == "number")
        assert grader.grade(number["id"], value_sql(number["expected_answer"] + 0.01)).status == "wrong"
    finally:
        assert grader.close() == []
    for bad in ({"a": 1}, float("nan"), [[]], None, [[{"x": 1}]]):
        with pytest.raises(EvalpackError, match="^value: "):
            value_sql(bad)


def test_a_decimal_read_from_run_sql_and_handed_back_as_a_value_is_correct(retail_pack, tmp_path):
    """run_sql gives a DECIMAL's value as text (every digit kept) and says the column's type; an agent that hands
    the text back as a number question's value is graded on the number (found with TPC-H's Q6 over MCP)."""
    records = [r for r in full_questions(retail_pack) if r["split"] == "dev" and r.get("answerable") is not False]
    number = next(r for r in records if r["answer_type"] == "number" and "ROUND(SUM(amount), 2)" in r["gold_sql"])
    # a question whose answer is not a number (retail's one month-name question is left out by the near-miss gate)
    text_question = next(r for r in records if r["answer_type"] in ("string", "rows"))

    async def agent() -> tuple[dict, dict, dict, dict]:
        seen: list[str] = []
        async with memory_session(retail_pack, tmp_path / "episode.jsonl") as session:
            result = await call(session, seen, "run_sql", sql=number["gold_sql"])
            handed = await call(session, seen, "submit_answer", question_id=number["id"], value=result["rows"][0][0])
            off = await call(session, seen, "submit_answer", question_id=number["id"],
                             value=str(Decimal(result["rows"][0][0]) + Decimal("0.01")))
            texted = await call(session, seen, "submit_answer", question_id=text_question["id"], value="12")
            return result, handed, off, texted

    result, handed, off, texted = anyio.run(agent)
    assert isinstance(result["rows"][0][0], str) and result["types"][0].startswith("DECIMAL")
    assert (handed["status"], off["status"], texted["status"]) == ("correct", "wrong", "wrong")



def test_result_set_rows_read_from_run_sql_and_handed_back_as_a_value_are_correct(retail_pack, tmp_path):
    """A result-set question's rows as run_sql shows them (its DECIMAL cells as text) handed back as the value are
    graded on their numbers (found by a user sweep over MCP: a channel ranking copied from run_sql was wrong); a
    number in a text column stays text, and a cent off is still wrong."""
    records = [r for r in full_questions(retail_pack) if r["split"] == "dev" and r.get("answerable") is not False]
    ranking = next(r for r in records if r["answer_type"] == "rows" and "ROUND(SUM(" in r["gold_sql"]
                   and isinstance(r["expected_answer"][0][0], str))

    async def agent() -> tuple[dict, dict, dict, dict]:
        seen: list[str] = []
        async with memory_session(retail_pack, tmp_path / "episode.jsonl") as session:
            result = await call(session, seen, "run_sql", sql=ranking["gold_sql"])
            rows = result["rows"]
            handed = await call(session, seen, "submit_answer", question_id=ranking["id"], value=rows)
            off = [[rows[0][0], str(Decimal(rows[0][1]) + Decimal("0.01")), *rows[0][2:]], *rows[1:]]
            nudged = await call(session, seen, "submit_answer", question_id=ranking["id"], value=off)
            labels = [[str(i), *row[1:]] for i, row in enumerate(rows)]
            relabelled = await call(session, seen, "submit_answer", question_id=ranking["id"], value=labels)
            return result, handed, nudged, relabelled

    result, handed, nudged, relabelled = anyio.run(agent)
    assert any(isinstance(cell, str) and cell[:1].isdigit() for row in result["rows"] for cell in row[1:])
    assert (handed["status"], nudged["status"], relabelled["status"]) == ("correct", "wrong", "wrong")


# --------------------------------------------------------------------------- hostile SQL


class _Listener(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"token\nfrom-the-network\n")

    def log_message(self, *args) -> None:
        pass


def _descendants(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        current = stack.pop()
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    kids = {int(c) for c in children.read().split()}
                stack.extend(kids - found)
                found |= kids
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_hostile_sql_through_run_sql_and_submit_answer_escapes_nothing(retail_one_rotation, tmp_path):
    pack = copy_pack(retail_one_rotation, tmp_path / "pack")  # each attack runs to its limit once per rotation
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("token\nnever-leaves\n")
    cases = hostile({"pack": pack, "outside": outside, "secret": outside / "secret.csv"})
    cases.pop("lone_surrogate")  # not UTF-8: the MCP client cannot send it (JSON-RPC over UTF-8)
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{listener.server_address[1]}/x.csv"
    cases |= {"loopback_url": f"SELECT * FROM read_csv('{url}')",
              "loopback_text": f"SELECT content FROM read_text('{url}')"}
    records = [r for r in full_questions(pack) if r.get("answerable") is not False]
    targets, after = records[:len(cases)], records[len(cases):len(cases) + 3]
    before_pack, before_outside = _snapshot(pack), _snapshot(outside)
    work = tmp_path / "cwd"
    work.mkdir()
    episode = work / "episode.jsonl"
    server = HttpServer(pack, episode, "--timeout", "1", "--memory-mb", "256")
    seen: list[str] = []
    workers: set[int] = set()

    async def attack() -> dict[str, tuple]:
        results = {}
        async with server.session() as session:
            for (name, sql), record in zip(cases.items(), targets, strict=True):
                try:
                    ran = await call(session, seen, "run_sql", sql=sql)
                    graded = await call(session, seen, "submit_answer", question_id=record["id"], sql=sql)
                except MCPError as exc:  # the transport refused the request (a body over its 4 MiB limit)
                    ran = graded = {"status": "refused", "error": str(exc)}
                workers.update(_descendants(server.proc.pid))
                results[name] = (ran, graded)
            for record in after:  # the tables are intact after every attack
                graded = await call(session, seen, "submit_answer", question_id=record["id"], sql=record["gold_sql"])
                assert graded["status"] == ("recorded" if record["split"] == "holdout" else "correct"), record["id"]
        return results

    try:
        results = anyio.run(attack)
        [end] = ended(episode)
    finally:
        assert server.stop() == 0
        listener.shutdown()
    statuses_at_end = {q["id"]: q["status"] for q in end["report"]["questions"]}
    assert all(statuses_at_end[r["id"]] == "correct" for r in after)
    for (name, (ran, graded)), record in zip(results.items(), targets, strict=True):
        if graded["status"] == "refused":  # 12 MB of SQL never reached the server over HTTP
            assert name == "huge_text" and ran is graded, (name, graded)
            continue
        assert graded["status"] == ("recorded" if record["split"] == "holdout" else "wrong"), name
        assert statuses_at_end[record["id"]] == "wrong", name  # a holdout one too, in the operator's report
        assert ran is None or name in ("long_number", "getenv", "interval_overflow"), (name, ran)
    assert _Listener.hits == []  # nothing reached the network, not even the loopback
    assert _snapshot(pack) == before_pack and _snapshot(outside) == before_outside
    assert sorted(p.name for p in work.iterdir()) == ["episode.jsonl", "episode.stderr"]
    assert "never-leaves" not in "\n".join(seen) and "never-leaves" not in episode.read_text()
    assert workers, "no sandbox process was seen"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a sandbox process outlived the server"


def test_arguments_longer_than_any_sql_that_runs_are_refused_and_logged_short(retail_pack, tmp_path):
    """An agent that sends megabytes of SQL (or of a value) gets the call's error, and the episode file keeps the
    start and length of the argument, not the whole of it: an agent cannot fill the disk through the log."""
    record = next(r for r in full_questions(retail_pack) if r["split"] == "dev" and r.get("answerable") is not False)
    long_sql = "SELECT " + " + ".join(["1"] * 300_000)  # 1.2 million characters
    episode = tmp_path / "episode.jsonl"

    async def agent() -> tuple:
        seen: list[str] = []
        async with memory_session(retail_pack, episode) as session:
            ran = await call(session, seen, "run_sql", sql=long_sql)
            graded = await call(session, seen, "submit_answer", question_id=record["id"], sql=long_sql)
            valued = await call(session, seen, "submit_answer", question_id=record["id"], value=[long_sql])
            right = await call(session, seen, "submit_answer", question_id=record["id"], sql=record["gold_sql"])
            return ran, graded, valued, right, seen

    ran, graded, valued, right, seen = anyio.run(agent)
    assert (ran, graded, valued) == (None, None, None) and right["status"] == "correct"
    assert sum("at most 100,000" in text for text in seen) == 3
    calls = [r for r in episode_records(episode) if r["event"] == "call"]
    assert [c["arguments"].get("sql") for c in calls[:2]] == [long_sql[:200] + "... (1,200,004 characters)"] * 2
    assert calls[2]["arguments"]["value"] == [long_sql[:200] + "... (1,200,004 characters)"]
    assert episode.stat().st_size < len(long_sql) / 4  # the end record (the whole report) is most of it
    answers = next(r for r in episode_records(episode) if r["event"] == "end")["answers"]
    assert answers == [{"id": record["id"], "sql": record["gold_sql"]}]


# --------------------------------------------------------------------------- many sessions, bad input


def test_fifty_concurrent_http_sessions_complete_without_an_error(retail_pack, tmp_path):
    episode = tmp_path / "episode.jsonl"
    records = [r for r in full_questions(retail_pack) if r.get("answerable") is not False][:50]
    server = HttpServer(retail_pack, episode)
    failures: list[str] = []

    async def one(record: dict) -> None:
        seen: list[str] = []
        try:
            async with server.session() as session:
                assert (await call(session, seen, "list_tables"))["tables"]
                assert (await call(session, seen, "run_sql", sql="SELECT count(*) FROM orders"))["row_count"] == 1
                graded = await call(session, seen, "submit_answer", question_id=record["id"], sql=record["gold_sql"])
                assert graded["status"] == ("recorded" if record["split"] == "holdout" else "correct"), seen
        except Exception as exc:  # noqa: BLE001 - every session's failure is reported below
            failures.append(f"{record['id']}: {type(exc).__name__}: {exc}")

    async def all_at_once() -> None:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as group:
                for record in records:
                    group.start_soon(one, record)

    try:
        anyio.run(all_at_once)
        deadline = time.monotonic() + 60
        while len(ended(episode)) < 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        ends = ended(episode)
    finally:
        assert server.stop() == 0
    assert failures == []
    assert len(ends) == 50
    assert all(e["report"]["summary"]["overall"]["correct"] >= 1 for e in ends)
    graded = {q["id"] for e in ends for q in e["report"]["questions"] if q["answered"] and q["status"] == "correct"}
    assert graded == {r["id"] for r in records}


@pytest.mark.parametrize("extra, message", [
    (["--rotation", "seed_7"], "--rotation seed_7: the pack's rotations are seed_42, seed_43, seed_44"),
    (["--transport", "http", "--host", "0.0.0.0"], "--host 0.0.0.0: evalpack serve listens on the loopback address"),
    (["--timeout", "0"], "--timeout must be a finite positive number"),
    (["--max-rows", "0"], "--max-rows and --workers must be at least 1"),
])
def test_bad_options_exit_2_with_one_line(retail_pack, tmp_path, extra, message):
    episode = tmp_path / "episode.jsonl"
    run = subprocess.run([*SERVE, str(retail_pack), "--episode", str(episode), *extra], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("evalpack: error: ") and run.stderr.count("\n") == 1
    assert message in run.stderr
    assert not episode.exists()


def test_a_folder_for_the_episode_file_is_refused(retail_pack, tmp_path):
    run = subprocess.run([*SERVE, str(retail_pack), "--episode", str(tmp_path)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "is a folder" in run.stderr


# --------------------------------------------------------------------------- the data dictionary and the evidence


def test_describe_table_and_a_resource_give_the_pack_its_data_dictionary(retail_pack, tmp_path):
    dictionary = json.loads((retail_pack / "dictionary.json").read_text())

    async def agent() -> tuple:
        seen: list[str] = []
        async with memory_session(retail_pack, tmp_path / "episode.jsonl") as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            described = {t["name"]: await call(session, seen, "describe_table", table=t["name"])
                         for t in dictionary["tables"]}
            resources = [r.uri for r in (await session.list_resources()).resources]
            text = (await session.read_resource(DICTIONARY_URI)).contents[0].text
            return tools, described, resources, text, session.instructions

    tools, described, resources, text, instructions = anyio.run(agent)
    assert tools == TOOLS  # the tool set is unchanged
    for table in dictionary["tables"]:
        got = described[table["name"]]
        assert (got["row"], got["description"]) == (table["row"], table["description"])
        assert [c["name"] for c in got["columns"]] == [c["name"] for c in table["columns"]]
        for column, entry in zip(got["columns"], table["columns"], strict=True):
            assert {k: column[k] for k in ("label", "description", "unit", "values", "refers_to")} == \
                {k: entry[k] for k in ("label", "description", "unit", "values", "refers_to")}, entry["name"]
    orders = {c["name"]: c for c in described["orders"]["columns"]}
    assert described["orders"]["row"] == "one order" and orders["amount"]["unit"] == "EUR"
    assert orders["customer_id"]["refers_to"] == "customers.customer_id"
    assert orders["channel"]["values"] == [{"value": str(code), "meaning": label}  # a coded column
                                           for code, label in ((1, "web"), (2, "app"), (3, "store"))]
    assert [str(uri) for uri in resources] == [CARD_URI, DICTIONARY_URI]
    assert text == (retail_pack / "dictionary.md").read_text(encoding="utf-8")
    assert DICTIONARY_URI in instructions and "evidence: knowledge the question shares" in instructions
    for convention in dictionary["conventions"]:
        assert f"- {convention['name']}: {convention['definition']}" in instructions


def test_a_pack_without_a_dictionary_is_described_as_before(retail_pack, tmp_path):
    pack = copy_pack(retail_pack, tmp_path / "plain")
    for name in ("dictionary.json", "dictionary.md", "attestation.intoto.json"):  # as an imported pack: no dictionary
        (pack / name).unlink()

    async def agent() -> tuple:
        async with memory_session(pack, tmp_path / "episode.jsonl", allow_unattested=True) as session:
            described = await call(session, [], "describe_table", table="orders")
            resources = [str(r.uri) for r in (await session.list_resources()).resources]
            return described, resources, session.instructions

    described, resources, instructions = anyio.run(agent)
    assert described["row"] is None and described["description"] is None and described["row_count"] > 0
    for column in described["columns"]:
        assert set(column) == {"name", "type", "label", "description", "unit", "values", "refers_to"}
        assert column["type"] and all(column[k] is None for k in ("label", "description", "unit", "values",
                                                                  "refers_to"))
    assert resources == [CARD_URI] and "dictionary" not in instructions


def test_no_evidence_gives_the_agent_none_and_the_report_says_so(noted_pack, tmp_path):
    records = {r["id"]: r for r in full_questions(noted_pack)}
    assert sum(1 for r in records.values() if r.get("evidence")) > 50  # the noted pack's term gives evidence
    dev = next(r for r in records.values() if r["split"] == "dev" and r.get("evidence") and r.get("answerable")
               is not False)

    async def agent(episode: Path, **options) -> tuple[dict, str]:
        seen: list[str] = []
        async with memory_session(noted_pack, episode, **options) as session:
            listed = await call(session, seen, "list_questions", split="all")
            await call(session, seen, "submit_answer", question_id=dev["id"], sql=dev["gold_sql"])
            return listed, session.instructions

    given, told = anyio.run(agent, tmp_path / "with.jsonl")
    withheld, told_without = anyio.run(lambda: agent(tmp_path / "without.jsonl", evidence=False))
    assert [q["evidence"] for q in given["questions"]] == [records[q["id"]].get("evidence")
                                                            for q in given["questions"]]
    assert [q["evidence"] for q in withheld["questions"]] == [None] * len(given["questions"])
    assert [{**q, "evidence": None} for q in given["questions"]] == withheld["questions"]
    assert "evidence: knowledge the question shares" in told and "run without evidence" in told_without
    for name, setting in (("with", "with"), ("without", "without")):
        records_of = episode_records(tmp_path / f"{name}.jsonl")
        [start] = [r for r in records_of if r["event"] == "start"]
        [end] = [r for r in records_of if r["event"] == "end"]
        assert start["evidence"] == end["report"]["evidence"] == setting
        assert end["report"]["summary"]["overall"]["correct"] >= 1


def test_the_no_evidence_flag_reaches_the_server(retail_pack, monkeypatch):
    from evalpack.cli import main

    given: list[ServeOptions] = []
    monkeypatch.setattr("evalpack.agent.serve.serve_command", lambda pack, options: given.append(options) or 0)
    assert main(["serve", str(retail_pack)]) == 0
    assert main(["serve", str(retail_pack), "--no-evidence"]) == 0
    assert [o.evidence for o in given] == [True, False]
    assert [o.evidence_setting for o in given] == ["with", "without"]
