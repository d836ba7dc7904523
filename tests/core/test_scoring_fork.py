"""verify.py (and evalpack score, verify and audit) fork their sandbox workers ahead instead of starting a new
interpreter for each: the forked workers answer as started ones do, under the same limits, die with the scorer,
and a worker that has to be replaced is started as before."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import copy_pack, gold_questions

# runs in a process of its own: prestart_workers forks only while its process has a single thread
DRIVER = r"""
import importlib.util, json, sys, time
from pathlib import Path

pack = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("verify", pack / "verify.py")
v = importlib.util.module_from_spec(spec)
sys.modules["verify"] = v
spec.loader.exec_module(v)
mode = sys.argv[2]
if mode == "compare":
    forked = v.prestart_workers(1)
    tables = pack / "rotations" / "seed_42" / "tables"
    questions = [q for q in v.load_questions(pack) if v.scorable(q)]
    answers = {}
    for name in ("forked", "started"):
        with v.SandboxWorker(tables, v.Limits(), in_place=True) as worker:
            rows = [worker.run(q["gold_sql"], 10).rows for q in questions]
            # in no order: a query without ORDER BY may give its rows in any
            answers[name] = {"kind": type(worker.proc).__name__,
                             "rows": [sorted(json.dumps(v._encode_value(list(row))) for row in r) for r in rows],
                             "loaded": worker.loaded}
    print(json.dumps({"prestarted": forked, **answers}))
elif mode == "limits":
    print(json.dumps({"forked": v.prestart_workers(1)}), flush=True)
    tables = pack / "rotations" / "seed_42" / "tables"
    with v.SandboxWorker(tables, v.Limits(timeout=2.0, memory_mb=256)) as worker:
        before = worker.run("SELECT count(*) FROM orders", 10)
        kind_before = type(worker.proc).__name__
        # beyond the address-space cap (outside DuckDB's own memory limit), then past the wall clock
        capped = worker.run("SELECT len(range(100000000))", 2.0)
        kind_capped = type(worker.proc).__name__
        stuck = worker.run("SELECT length(regexp_replace(regexp_replace(repeat('ab', 20000000), 'a', 'aa', 'g'), "
                           "'b', 'bb', 'g'))", 2.0)
        after = worker.run("SELECT count(*) FROM orders", 10)
        out = {"before": before.rows, "kind_before": kind_before, "capped": capped.error, "kind_capped": kind_capped,
               "stuck": stuck.error, "replaced": worker.replaced, "after": after.rows,
               "kind_after": type(worker.proc).__name__, "cap": worker.cap_bytes}
    print(json.dumps(out), flush=True)
elif mode == "main":
    counts = []
    prestart = v.prestart_workers
    v.prestart_workers = lambda n: counts.append((n, prestart(n))) or counts[-1][1]
    code = v.main([])
    print(json.dumps({"code": code, "counts": counts, "left": len(v._SPARES)}), file=sys.stderr)
elif mode == "orphan":
    v.prestart_workers(2)
    print(json.dumps([w.pid for w in v._SPARES]), flush=True)
    time.sleep(600)
"""


def _driver(tmp_path: Path, pack: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.run([sys.executable, str(script), str(pack), mode], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def test_a_forked_worker_answers_every_gold_query_as_a_started_one_does(tmp_path, retail_pack):
    run = _driver(tmp_path, retail_pack, "compare")
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["prestarted"] == 1
    # the first worker took the spare, forked; the second found none left and was started as before
    assert got["forked"]["kind"] == "ForkedWorker" and got["started"]["kind"] == "Popen"
    assert got["forked"]["rows"] == got["started"]["rows"]
    assert got["forked"]["loaded"] == got["started"]["loaded"]
    lines = (retail_pack / "questions.jsonl").read_text().splitlines()
    public = [r for r in map(json.loads, lines) if r.get("gold_sql")]
    assert len(got["forked"]["rows"]) == len(public) and all(got["forked"]["rows"])


def test_a_forked_worker_is_held_to_its_limits_and_replaced_by_a_started_one(tmp_path, retail_pack):
    run = _driver(tmp_path, retail_pack, "limits")
    assert run.returncode == 0, run.stderr[-3000:]
    first, second = (json.loads(line) for line in run.stdout.splitlines())
    assert first["forked"] == 1
    assert second["kind_before"] == "ForkedWorker", second
    # a worker that ran out of memory answers nothing more: the query was asked again of a fresh (started) worker,
    # which ran out too and was retired as well
    assert "bad allocation" in second["capped"] and second["kind_capped"] == "NoneType", second
    assert "its worker process was killed" in second["stuck"] and second["replaced"] == 3, second
    assert second["kind_after"] == "Popen"
    assert second["after"] == second["before"] and second["before"][0][0] > 0
    assert second["cap"] > 0


def test_verify_py_forks_one_worker_per_rotation_and_uses_them_all(tmp_path, retail_pack):
    pack = tmp_path / "pack"
    copy_pack(retail_pack, pack)
    run = _driver(tmp_path, pack, "main")
    got = json.loads(run.stderr.strip().splitlines()[-1])
    assert got["code"] == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rotations = len(list((pack / "rotations").iterdir()))
    assert got["counts"] == [[rotations, rotations]] and got["left"] == 0
    questions = gold_questions(pack)
    assert f"{len(questions)}/{len(questions)} questions verify on every rotation" in run.stdout


def test_forked_workers_die_with_the_scorer(tmp_path, retail_pack):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(script), str(retail_pack), "orphan"], stdout=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    try:
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 2
        for pid in pids:
            assert Path(f"/proc/{pid}").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by init, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


AUDIT_DRIVER = r"""
import json, sys
import evalpack.core.scoring as scoring
from evalpack import cli

counts = []
prestart = scoring.prestart_workers
scoring.prestart_workers = lambda n: counts.append((n, prestart(n))) or counts[-1][1]
code = cli.main([sys.argv[2], sys.argv[1], *sys.argv[3:]])
print(json.dumps({"code": code, "counts": counts, "left": len(scoring._SPARES)}), file=sys.stderr)
"""


def test_evalpack_audit_verify_and_score_fork_their_workers_before_any_thread_starts(tmp_path, retail_pack):
    script = tmp_path / "audit_driver.py"
    script.write_text(AUDIT_DRIVER)
    rotations = len(list((retail_pack / "rotations").iterdir()))
    candidates = tmp_path / "candidates.jsonl"
    lines = (retail_pack / "questions.jsonl").read_text().splitlines()
    candidates.write_text("".join(json.dumps({"id": r["id"], "sql": r["gold_sql"]}) + "\n"
                                  for r in map(json.loads, lines) if r.get("gold_sql")))
    for command in (["audit"], ["verify"], ["score", "--candidates", str(candidates)]):
        run = subprocess.run([sys.executable, str(script), str(retail_pack), *command], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        got = json.loads(run.stderr.strip().splitlines()[-1])
        # score: 1 as the holdout's questions are not scored without their key
        assert got["code"] == (1 if command[0] == "score" else 0), run.stdout[-2000:] + run.stderr[-2000:]
        assert command != ["audit"] or "no findings" in run.stdout, run.stdout[-2000:]
        assert command != ["verify"] or "OK gold SQL" in run.stdout, run.stdout[-2000:]
        # every rotation's worker was forked (NumPy's threads would have stopped that) and taken
        assert got["counts"] == [[rotations, rotations]] and got["left"] == 0, (command, got)
