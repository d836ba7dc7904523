"""The query watchdog: one thread for every query of a process, so that a sandbox worker under an
address-space limit never needs a new thread (and its stack) to run the next query."""

import multiprocessing
import subprocess
import sys
import textwrap
import threading
import time

import duckdb

from evalpack.core.scoring import Watchdog, run_query

LIMITED_WORKER = textwrap.dedent("""
    import resource, sys
    import duckdb
    from evalpack.core import scoring

    # one DuckDB thread: the query runs in this thread, whose malloc arena exists; a DuckDB worker thread
    # allocating for the first time under the limit would need a new arena, which is not what is tested here
    con = duckdb.connect(":memory:", config={"threads": 1})
    con.execute("CREATE TABLE t AS SELECT range AS x FROM range(1000)")
    con.execute("SELECT SUM(x) FROM t").fetchall()  # a worker has run queries before it reaches its cap
    if sys.argv[1] == "started":
        scoring.WATCHDOG.start()
    # no room left for another thread's stack (8 MiB), as after a query that grew the worker to its cap
    size = scoring._vm_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (size + 6 * 2**20, resource.RLIM_INFINITY))
    outcome = scoring.run_query(con, "SELECT SUM(x) FROM t", timeout=5)
    print(outcome.rows, outcome.error)
""")


def _limited(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LIMITED_WORKER, mode], capture_output=True, text=True, timeout=60)


def test_a_query_runs_under_an_address_space_limit_that_leaves_no_room_for_a_thread():
    proc = _limited("started")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[(499500,)] None"


def test_the_limit_really_leaves_no_room_for_a_new_thread():
    # the same limit without the watchdog started beforehand: its thread cannot start, so the limit is tight
    proc = _limited("not started")
    assert proc.returncode != 0 and "can't start new thread" in proc.stderr


def test_an_armed_action_runs_at_its_deadline_and_a_disarmed_one_never():
    watchdog = Watchdog()
    calls = []
    with watchdog.armed(0.05, lambda: calls.append("late")) as fired:
        time.sleep(0.3)
    assert fired.is_set() and calls == ["late"]
    with watchdog.armed(0.2, lambda: calls.append("early")) as fired:
        pass
    time.sleep(0.4)
    assert not fired.is_set() and calls == ["late"]


def test_a_sooner_deadline_fires_while_the_thread_waits_for_a_later_one():
    watchdog = Watchdog()
    calls = []
    with watchdog.armed(60, lambda: calls.append("later")) as later:
        time.sleep(0.05)  # the thread now sleeps until the later deadline
        with watchdog.armed(0.05, lambda: calls.append("sooner")) as sooner:
            time.sleep(0.5)
    assert sooner.is_set() and not later.is_set() and calls == ["sooner"]


def test_queries_one_after_another_do_not_wake_the_thread_each_time():
    watchdog = Watchdog()
    with watchdog.armed(60, lambda: None):
        time.sleep(0.05)
    settled = watchdog.wakes
    for _ in range(200):  # each block's deadline is later than the one the thread already waits for
        with watchdog.armed(60, lambda: None):
            pass
    time.sleep(0.05)
    assert settled >= 1 and watchdog.wakes - settled <= 1


def test_concurrent_queries_each_get_their_own_deadline():
    con = duckdb.connect(":memory:")
    slow = "SELECT COUNT(*) FROM range(100000000000) a WHERE a.range % 7 = 3"
    results = {}

    def run(name: str, sql: str, timeout: float) -> None:
        results[name] = run_query(con.cursor(), sql, timeout=timeout)

    threads = [threading.Thread(target=run, args=("slow", slow, 0.5)),
               threading.Thread(target=run, args=("quick", "SELECT 42", 30))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results["quick"].rows == [(42,)] and results["quick"].error is None
    assert results["slow"].timed_out and results["slow"].rows is None


def _slow_query_timed_out(results) -> None:
    con = duckdb.connect(":memory:")
    outcome = run_query(con, "SELECT COUNT(*) FROM range(100000000000) a WHERE a.range % 7 = 3", timeout=0.5)
    results.put(outcome.timed_out)


def test_a_forked_child_gets_a_watchdog_of_its_own():
    run_query(duckdb.connect(":memory:"), "SELECT 1", timeout=5)  # this process's watchdog thread is running
    results = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_slow_query_timed_out, args=(results,))
    child.start()
    child.join(60)
    stuck = child.is_alive()
    if stuck:
        child.kill()
    assert not stuck, "the child's query was never interrupted: its watchdog was the parent's thread, not carried over"
    assert results.get(timeout=5) is True
