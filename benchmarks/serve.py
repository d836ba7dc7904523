"""Benchmark: `evalpack serve` driven by the official MCP client; time per tool call, alone and under 50 sessions.

    python benchmarks/serve.py [--pack PACK] [--calls 40] [--sessions 50] [--json out.json] [--no-results]

Without --pack the retail pack is built with 3 rotations into a temporary folder first (not timed). The server runs
in a process of its own (`evalpack serve PACK`, default options: 2 sandbox processes per rotation). Timed on the
client, from the request to its answer:

- one session over stdio, then one over streamable HTTP: ``--calls`` calls of each tool one after the other
  (list_tables, describe_table, run_sql on a few queries, list_questions, submit_answer with the gold SQL of one
  question after another, graded on every rotation);
- ``--sessions`` streamable HTTP sessions at once, each: list_tables, 4 run_sql, 4 submit_answer, then closed
  (its episode ends and its report is logged).

Reported per tool: the median and 95th percentile of a call, in ms. The figures are written to
benchmarks/RESULTS.md, in the section "evalpack serve" (replaced on each run; --no-results leaves the file alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from score import retail_pack  # noqa: E402  (benchmarks/score.py, beside this script)

from evalpack.core.scoring import pack_questions  # noqa: E402

SECTION = "## evalpack serve (`python benchmarks/serve.py`)"
QUERIES = ("SELECT count(*) FROM orders", "SELECT channel, sum(amount) FROM orders GROUP BY channel ORDER BY 1",
           "SELECT * FROM customers LIMIT 20", "SELECT date_trunc('month', ordered_at) AS m, count(*) FROM orders "
           "GROUP BY 1 ORDER BY 1")


class Timings:
    """Seconds per call, by tool."""

    def __init__(self) -> None:
        self.by_tool: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []

    async def call(self, session: ClientSession, tool: str, **arguments) -> dict | None:
        started = time.perf_counter()
        result = await session.call_tool(tool, arguments)
        self.by_tool[tool].append(time.perf_counter() - started)
        if result.is_error:
            self.errors.append(f"{tool}: {result.content[0].text}")
            return None
        return result.structured_content

    def table(self) -> dict[str, dict[str, float]]:
        out = {}
        for tool, seconds in sorted(self.by_tool.items()):
            ordered = sorted(seconds)
            out[tool] = {"calls": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 2),
                         "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 2)}
        return out


async def one_session(session: ClientSession, gold: list[dict], calls: int, timings: Timings) -> None:
    await session.initialize()
    for k in range(calls):
        await timings.call(session, "list_tables")
        await timings.call(session, "describe_table", table="orders")
        await timings.call(session, "run_sql", sql=QUERIES[k % len(QUERIES)])
        await timings.call(session, "list_questions", split="dev")
        record = gold[k % len(gold)]
        await timings.call(session, "submit_answer", question_id=record["id"], sql=record["gold_sql"])


async def many_sessions(url: str, gold: list[dict], sessions: int, timings: Timings) -> float:
    async def agent(n: int) -> None:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await timings.call(session, "list_tables")
            for k in range(4):
                await timings.call(session, "run_sql", sql=QUERIES[k])
                record = gold[(4 * n + k) % len(gold)]
                await timings.call(session, "submit_answer", question_id=record["id"], sql=record["gold_sql"])

    started = time.perf_counter()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as group:
            for n in range(sessions):
                group.start_soon(agent, n)
    return time.perf_counter() - started


def server_side(episode: Path) -> dict[str, dict[str, float]]:
    """The seconds the server logged per call (its own work, without the transport), by tool."""
    timings = Timings()
    for line in episode.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["event"] == "call":
            timings.by_tool[record["tool"]].append(record["seconds"])
    return timings.table()


def start_http(pack: Path, episode: Path) -> tuple[subprocess.Popen, str]:
    errors = episode.with_suffix(".stderr")
    with open(errors, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "evalpack.cli", "serve", str(pack), "--transport", "http",
                                 "--port", "0", "--episode", str(episode)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while not (found := re.search(r"on (http://[^ ]+/mcp)", errors.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {errors.read_text()}")
        time.sleep(0.1)
    return proc, found.group(1)


def write_results(figures: dict) -> None:
    """Replace (or add) this benchmark's section of benchmarks/RESULTS.md."""
    lines = [SECTION, "",
             f"{figures['when']}, {figures['machine']}; pack: {figures['pack']} ({figures['rotations']} rotations, "
             f"{figures['questions']} questions), load average {figures['load']} on 2 cores at the start (other "
             "work shared the machine). Each call timed on the client, request to answer; submit_answer grades the "
             "gold SQL on every rotation. Under many sessions, the server's own time per call (logged in the "
             "episode file) is given beside it: the rest is the transport and the clients, all on one machine.", ""]
    for name, title in (("stdio", "one session over stdio, calls one after the other"),
                        ("http", "one session over streamable HTTP, calls one after the other"),
                        ("concurrent", f"{figures['sessions']} streamable HTTP sessions at once "
                                       f"({figures['concurrent_seconds']:.1f} s for all, "
                                       f"{figures['concurrent_calls_per_second']:.0f} calls/s, "
                                       f"{figures['concurrent_errors']} errors; list_tables is each "
                                       "session's first call, made while all the sessions open, so its wait is "
                                       "theirs)")):
        server = figures.get(f"{name}_server")
        lines += [f"{title}:", "", "| tool | calls | median ms | p95 ms |" + (" server median ms | server p95 ms |"
                                                                             if server else ""),
                  "|---|---:|---:|---:|" + ("---:|---:|" if server else "")]
        lines += [f"| {tool} | {row['calls']} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} |"
                  + (f" {server[tool]['median_ms']:.1f} | {server[tool]['p95_ms']:.1f} |" if server else "")
                  for tool, row in figures[name].items()]
        lines.append("")
    path = ROOT / "benchmarks" / "RESULTS.md"
    text = path.read_text(encoding="utf-8")
    section = "\n".join(lines)
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("\n" + text[end + 1:] if end >= 0 else "")
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", help="an existing pack (default: build schemas/retail.yaml with 3 rotations)")
    parser.add_argument("--calls", type=int, default=40, help="calls of each tool in the one-session runs")
    parser.add_argument("--sessions", type=int, default=50, help="HTTP sessions at once")
    parser.add_argument("--json", help="write the figures as JSON")
    parser.add_argument("--no-results", action="store_true", help="do not write benchmarks/RESULTS.md")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="evalpack-bench-") as tmp:
        pack = retail_pack(args.pack, tmp)
        records = pack_questions(pack)[0]
        gold = [r for r in records if r.get("gold_sql") and r.get("answerable") is not False]
        figures: dict = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                         "machine": f"{platform.machine()}, Python {platform.python_version()}",
                         "pack": "schemas/retail.yaml" if not args.pack else str(pack),
                         "rotations": len(list((pack / "rotations").iterdir())), "questions": len(records),
                         "sessions": args.sessions, "load": round(os.getloadavg()[0], 1)}

        stdio = Timings()

        async def over_stdio() -> None:
            params = StdioServerParameters(command=sys.executable, args=[
                "-m", "evalpack.cli", "serve", str(pack), "--episode", str(Path(tmp) / "stdio.jsonl")])
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await one_session(session, gold, args.calls, stdio)

        anyio.run(over_stdio)
        figures["stdio"] = stdio.table()

        proc, url = start_http(pack, Path(tmp) / "http.jsonl")
        try:
            http, concurrent = Timings(), Timings()

            async def over_http() -> None:
                async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                    await one_session(session, gold, args.calls, http)

            anyio.run(over_http)
            figures["http"] = http.table()
            before = len((Path(tmp) / "http.jsonl").read_text().splitlines())
            seconds = anyio.run(many_sessions, url, gold, args.sessions, concurrent)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        concurrent_log = Path(tmp) / "concurrent.jsonl"
        concurrent_log.write_text("".join(line + "\n" for line in
                                          (Path(tmp) / "http.jsonl").read_text().splitlines()[before:]))
        figures["concurrent_server"] = server_side(concurrent_log)
        calls = sum(len(v) for v in concurrent.by_tool.values())
        figures |= {"concurrent": concurrent.table(), "concurrent_seconds": seconds,
                    "concurrent_calls_per_second": calls / seconds,
                    "concurrent_errors": len(concurrent.errors) + len(http.errors) + len(stdio.errors)}
    for name in ("stdio", "http", "concurrent"):
        print(f"{name}:")
        for tool, row in figures[name].items():
            print(f"  {tool:<15} {row['calls']:>5} calls  median {row['median_ms']:8.1f} ms  p95 {row['p95_ms']:8.1f} ms")
    print(f"{args.sessions} sessions at once: {figures['concurrent_seconds']:.1f} s, "
          f"{figures['concurrent_calls_per_second']:.0f} calls/s, {figures['concurrent_errors']} errors")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if not args.no_results:
        write_results(figures)
    return 0 if figures["concurrent_errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
