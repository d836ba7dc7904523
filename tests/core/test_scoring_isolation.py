"""Hostile candidates cannot take a scoring run down: each query runs in a worker process under
operating-system limits, is stopped within its time limit plus a small margin, stays under its memory
cap, and the run always writes its report. Malformed records are that record's error or exit 2 with
one line, never a traceback or a hang."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import copy_pack, full_questions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_scoring_sandbox import _snapshot, attacks

from evalpack.core.scoring import KILL_GRACE, MAX_SQL_CHARS, score_command

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0
MARGIN = 2.0  # seconds past the limit and the kill grace that a loaded test machine may add


def hostile(arena: dict[str, Path]) -> dict[str, str]:
    """The hostile candidates of the issue, then the sandbox suite's attacks."""
    return {
        "range_list": "SELECT len(range(100000000))",
        "range_3e8": "SELECT list_sum(range(300000000))",
        "repeat_2e9": "SELECT length(repeat('x', 2000000000))",
        "nested_regexp": "SELECT length(regexp_replace(regexp_replace(repeat('ab', 20000000), 'a', 'aa', 'g'), "
                         "'b', 'bb', 'g'))",
        "huge_text": "SELECT " + " + ".join(["1"] * 3_000_000),
        "interval_overflow": "SELECT INTERVAL 100000000 YEAR",
        "lone_surrogate": "SELECT '\ud800'",
        "long_number": "SELECT " + "9" * 5000,
        "cartesian_memory": "SELECT list(a.order_id || b.order_id) FROM orders a, orders b",
        **attacks(arena),
    }


def _tree_peaks(root: int, peaks: dict[int, int], done: threading.Event) -> None:
    """Sample the resident memory (KiB) of every process under ``root`` until ``done``."""
    while not done.is_set():
        stack = [root]
        while stack:
            pid = stack.pop()
            try:
                with open(f"/proc/{pid}/status") as status:
                    rss = next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
                peaks[pid] = max(peaks.get(pid, 0), rss)
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as children:
                        stack.extend(int(c) for c in children.read().split())
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
        time.sleep(0.02)


def run_sampled(command: list[str], cwd: Path | None = None,
                timeout: float = 900) -> tuple[subprocess.Popen, str, str, dict[int, int]]:
    """Run ``command`` to its end while sampling the resident memory of it and its children: the
    finished process, its output and errors, and {pid: peak KiB}."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    peaks: dict[int, int] = {}
    done = threading.Event()
    sampler = threading.Thread(target=_tree_peaks, args=(proc.pid, peaks, done), daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        done.set()
        sampler.join()
    return proc, out, err, peaks


@pytest.fixture()
def arena(tmp_path: Path, retail_one_rotation: Path) -> dict[str, Path]:
    pack = tmp_path / "pack"
    copy_pack(retail_one_rotation, pack)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("token\nnever-leaves\n")
    return {"pack": pack, "outside": outside, "secret": outside / "secret.csv", "tmp": tmp_path}


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["evalpack score", "verify.py"])
def test_hostile_candidates_finish_within_their_limits_and_the_report_is_written(arena, entry):
    pack, tmp = arena["pack"], arena["tmp"]
    questions = full_questions(pack)
    cases = hostile(arena)
    ids = [q["id"] for q in questions][:len(cases)]
    gold_after = {q["id"]: q["gold_sql"] for q in questions[len(cases):len(cases) + 3]}
    records = [{"id": qid, "sql": sql} for qid, sql in zip(ids, cases.values(), strict=True)]
    records += [{"id": qid, "sql": sql} for qid, sql in gold_after.items()]
    candidates = tmp / "candidates.jsonl"
    candidates.write_text("".join(json.dumps(r) + "\n" for r in records))
    report_path = tmp / "report.json"
    limits = ["--timeout", str(TIMEOUT), "--memory-mb", "256", "--run-timeout", "600"]
    if entry == "verify.py":
        command = [sys.executable, str(pack / "verify.py"), "--candidates", str(candidates)]
    else:
        command = [sys.executable, "-m", "evalpack.cli", "score", str(pack), "--candidates", str(candidates)]
    before_pack, before_outside = _snapshot(pack), _snapshot(arena["outside"])

    proc, out, err, peaks = run_sampled([*command, "--json", str(report_path), *limits], cwd=tmp)

    assert proc.returncode == 1, err
    assert "Traceback" not in err and err == ""
    report = json.loads(report_path.read_text())
    by_id = {r["id"]: r for r in report["questions"]}
    for (name, _), qid in zip(cases.items(), ids, strict=True):
        assert by_id[qid]["status"] == "wrong", name
        for run in by_id[qid]["rotations"].values():
            assert run["seconds"] <= TIMEOUT + KILL_GRACE + MARGIN, (name, run)
            assert "error" in run or name == "long_number", (name, run)  # a 5,000-digit literal is a value
    errors = {name: by_id[qid]["rotations"]["seed_42"].get("error") for (name, _), qid in zip(cases.items(), ids,
                                                                                              strict=True)}
    assert errors["huge_text"].startswith(f"rejected: the SQL is {len(cases['huge_text']):,} characters long")
    assert errors["lone_surrogate"] == "rejected: the SQL is not valid Unicode (it holds a lone surrogate)"
    assert errors["interval_overflow"].startswith("cannot read the result")
    assert errors["nested_regexp"].startswith("timeout: stopped after")
    # the tables were intact after every attack: gold SQL scored after them is correct
    assert all(by_id[qid]["status"] == "correct" for qid in gold_after), json.dumps(
        {qid: by_id[qid] for qid in gold_after if by_id[qid]["status"] != "correct"}, default=str)
    # the process running the queries was replaced where one was killed or ended
    timing = report["timing"]
    assert timing["workers_replaced"] >= 1
    assert 0 < timing["worker_peak_mb"] <= timing["worker_cap_mb"]
    workers = {pid: kib for pid, kib in peaks.items() if pid != proc.pid}
    assert workers, "no worker process was seen"
    assert max(workers.values()) // 1024 <= timing["worker_cap_mb"]
    assert max(peaks.values()) < 4 * 2**20  # KiB: the 6 GiB growth of the issue is gone
    assert _snapshot(pack) == before_pack and _snapshot(arena["outside"]) == before_outside
    # an id the pack does not have, with escapes and a lone surrogate, is refused in one escaped line: no fake
    # line, no terminal control
    hostile_id = tmp / "hostile-id.jsonl"
    hostile_id.write_text(json.dumps({"id": "q\ud800\u001b[2J\nCORRECT everything", "sql": "SELECT 1"}) + "\n")
    command[command.index(str(candidates))] = str(hostile_id)
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp, timeout=300)
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert "\x1b" not in run.stderr and "q\\ud800\\x1b[2J\\x0aCORRECT everything" in run.stderr
    assert "never-leaves" not in report_path.read_text()


def test_a_run_has_an_overall_time_limit(arena):
    pack, tmp = arena["pack"], arena["tmp"]
    ids = [q["id"] for q in full_questions(pack)][:6]
    slow = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    candidates = tmp / "slow.json"
    candidates.write_text(json.dumps({qid: slow for qid in ids}))
    report_path = tmp / "report.json"
    started = time.monotonic()
    code = score_command(pack, candidates, json_path=report_path, timeout=1.0, run_timeout=2.0)
    elapsed = time.monotonic() - started
    assert code == 1
    report = json.loads(report_path.read_text())
    errors = [run["error"] for q in report["questions"] if q["id"] in ids for run in q["rotations"].values()]
    assert len(errors) == 6
    assert any(e.startswith("not run: the run's time limit of 2 s was reached") for e in errors)
    # 6 queries of 1 s each would take at least 6 s one after the other; the run stopped near 2 s
    assert elapsed < 6


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf"])
@pytest.mark.parametrize("option", ["--timeout", "--run-timeout"])
def test_limits_cannot_be_switched_off(arena, option, value):
    candidates = arena["tmp"] / "c.jsonl"
    candidates.write_text('{"id": "q001", "sql": "SELECT 1"}\n')
    for command in ([sys.executable, "-m", "evalpack.cli", "score", str(arena["pack"]), "--candidates",
                     str(candidates)], [sys.executable, str(arena["pack"] / "verify.py")]):
        run = subprocess.run([*command, f"{option}={value}"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().count("\n") == 0
        assert f"{option} must be a finite positive number" in run.stderr


def test_oversized_sql_is_refused_before_parsing(arena):
    candidates = arena["tmp"] / "c.jsonl"
    candidates.write_text(json.dumps({"id": "q001", "sql": "SELECT 1" + " " * MAX_SQL_CHARS}) + "\n")
    report_path = arena["tmp"] / "r.json"
    assert score_command(arena["pack"], candidates, json_path=report_path) == 1
    q001 = next(q for q in json.loads(report_path.read_text())["questions"] if q["id"] == "q001")
    assert all(run["error"].startswith("rejected: the SQL is") for run in q001["rotations"].values())
    assert json.loads(report_path.read_text())["timing"]["worker_cap_mb"] == 0  # no worker was needed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8)
records = st.one_of(
    json_values,
    st.fixed_dictionaries({"id": st.sampled_from(["q001", "q002", "zz"]) | json_values},
                          optional={"sql": st.sampled_from(["SELECT 1", "SELECT '\ud800'", "DROP TABLE orders",
                                                            "SELECT INTERVAL 100000000 YEAR", ""]) | json_values,
                                    "declined": json_values}),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lines=st.lists(records, min_size=1, max_size=4), raw=st.sampled_from(["", "[" * 50_000, "{", "\ud800", "9" * 5000]))
def test_random_candidate_files_give_a_report_or_one_line_exit_2(arena, lines, raw):
    candidates = arena["tmp"] / "random.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if raw and len(lines) > 2:
        text += raw + "\n"
    candidates.write_text(text, encoding="utf-8", errors="surrogatepass")
    out, err = _Capture(), _Capture()
    code = score_command(arena["pack"], candidates, json_path=arena["tmp"] / "r.json", timeout=2.0,
                         out=out, err=err)
    assert code in (0, 1, 2)
    if code == 2:
        assert err.text.count("\n") == 1 and err.text.startswith("error: ")
    else:
        report = json.loads((arena["tmp"] / "r.json").read_text())
        assert report["summary"]["overall"]["n"] == len(report["questions"])
        assert not any(math.isnan(q.get("seconds", 0)) for q in report["questions"])


class _Capture:
    """A text stream that, like a terminal, refuses what cannot be encoded as UTF-8."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        text.encode("utf-8")
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass
