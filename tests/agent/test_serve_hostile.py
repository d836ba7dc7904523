"""evalpack serve against an agent that attacks it (issue 50), driven by the official MCP client over stdio: the
holdout gives no verdict (correct or wrong) unless the operator asks for it, a holdout question takes a few answers
per episode at most, the episode file stays under its cap however large and many the calls, and an episode file
inside the pack or inside its holdout answer key is refused before the server starts (the pack still verifies, the key
still opens)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from conftest import copy_pack, full_questions
from mcp import ClientSession, StdioServerParameters, stdio_client
from test_serve import SERVE, call, episode_records, serve_args

from evalpack.core.scoring import HOLDOUT_FILE, check_integrity, holdout_key_beside

VERDICTS = ("correct", "wrong", "declined", "not scored")


@asynccontextmanager
async def session_of(pack: Path, episode: Path, *extra: str):
    """A stdio session with ``evalpack serve``; the server's stderr goes to ``episode``.stderr."""
    params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *serve_args(pack, episode, *extra)],
                                   cwd=str(episode.parent))
    with open(episode.with_suffix(".stderr"), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def split_of(pack: Path, split: str, answerable: bool = True) -> list[dict]:
    return [r for r in full_questions(pack) if r["split"] == split and (r.get("answerable") is not False) == answerable]


def end_record(episode: Path) -> dict:
    [end] = [r for r in episode_records(episode) if r["event"] == "end"]
    return end


def statuses(report: dict) -> dict[str, str]:
    return {q["id"]: q["status"] for q in report["questions"]}


# --------------------------------------------------------------------------- the holdout's verdicts


def test_holdout_answers_get_no_verdict_by_default_and_the_report_still_grades_them(retail_pack, tmp_path):
    """An agent that submits to holdout questions learns that its answer was recorded, nothing more: not from
    submit_answer (gold SQL, wrong SQL, a value, a decline alike), nor from end_episode, whose holdout counts are
    the agent's own (how many it answered). The episode file's report grades every one of them, for the operator."""
    gold, other, by_value, answerable = split_of(retail_pack, "holdout")[:4]
    declined = (split_of(retail_pack, "holdout", answerable=False) or [answerable])[0]
    dev = split_of(retail_pack, "dev")[0]
    episode = tmp_path / "episode.jsonl"
    seen: list[str] = []

    async def agent() -> tuple:
        async with session_of(retail_pack, episode) as session:
            submitted = [await call(session, seen, "submit_answer", question_id=gold["id"], sql=gold["gold_sql"]),
                         await call(session, seen, "submit_answer", question_id=other["id"], sql="SELECT 1"),
                         await call(session, seen, "submit_answer", question_id=by_value["id"],
                                    value=by_value["expected_answer"]),
                         await call(session, seen, "submit_answer", question_id=declined["id"], decline=True)]
            told = len(seen)
            graded_dev = await call(session, seen, "submit_answer", question_id=dev["id"], sql=dev["gold_sql"])
            before = len(seen)
            summary = await call(session, seen, "end_episode")
            return submitted, graded_dev, summary, seen[:told], seen[before:]

    submitted, graded_dev, summary, told, summary_text = anyio.run(agent)
    assert [s["status"] for s in submitted] == ["recorded"] * 4
    assert all(s["error"] is None for s in submitted)
    assert not any(word in text for text in told for word in VERDICTS)
    assert graded_dev["status"] == "correct"  # dev questions keep their feedback
    # end_episode: the dev split's counts; of the holdout only what the agent did itself
    # unanswerable questions the agent never declined are not answered, not correct
    assert (summary["dev"]["correct"], summary["dev"]["not_answered"]) == (
        1, len(split_of(retail_pack, "dev")) - 1 + len(split_of(retail_pack, "dev", answerable=False)))
    held = summary["holdout"]
    assert (held["correct"], held["wrong"], held["declined"], held["not_answered"], held["accuracy"]) == (
        None, None, None, None, None)
    assert held["answered"] == 3
    assert held["questions"] == len([r for r in full_questions(retail_pack) if r["split"] == "holdout"])
    assert "holdout grades" in summary["withheld"]
    assert not any(q in text for text in summary_text for q in (gold["id"], other["id"], by_value["id"]))
    # the operator's report grades them all
    graded = statuses(end_record(episode)["report"])
    assert (graded[gold["id"]], graded[other["id"]], graded[by_value["id"]]) == ("correct", "wrong", "correct")
    assert graded[declined["id"]] == ("declined" if declined is answerable else "correct")


def test_a_holdout_question_takes_three_answers_per_episode_and_the_last_one_counts(retail_pack, tmp_path):
    """The fourth answer to a holdout question is the call's error, naming the limit and its option, and nothing is
    graded: the third answer stands. A refused submission (two answers at once) uses no attempt; dev questions take
    any number of answers."""
    held = split_of(retail_pack, "holdout")[0]
    dev = split_of(retail_pack, "dev")[0]
    episode = tmp_path / "episode.jsonl"
    seen: list[str] = []

    async def agent() -> tuple[list, list]:
        async with session_of(retail_pack, episode) as session:
            assert await call(session, seen, "submit_answer", question_id=held["id"], sql="SELECT 1",
                              decline=True) is None
            answers = ["SELECT 1", "SELECT 2", held["gold_sql"], "SELECT 3"]
            results = [await call(session, seen, "submit_answer", question_id=held["id"], sql=sql) for sql in answers]
            refused = seen[-1]
            devs = [await call(session, seen, "submit_answer", question_id=dev["id"], sql=sql)
                    for sql in ["SELECT 1"] * 5 + [dev["gold_sql"]]]
            return results, refused, devs

    results, refused, devs = anyio.run(agent)
    assert [r and r["status"] for r in results] == ["recorded"] * 3 + [None]
    assert [r["attempts_left"] for r in results[:3]] == [2, 1, 0]
    assert "at most 3" in refused and "--holdout-attempts" in refused and held["id"] in refused
    assert [d["status"] for d in devs] == ["wrong"] * 5 + ["correct"]
    end = end_record(episode)
    assert {a["id"]: a.get("sql") for a in end["answers"]}[held["id"]] == held["gold_sql"]
    assert statuses(end["report"])[held["id"]] == "correct"
    calls = [r for r in episode_records(episode) if r["event"] == "call" and r["tool"] == "submit_answer"]
    assert sum(1 for c in calls if c["arguments"]["question_id"] == held["id"] and c["error"] is None) == 3


def test_the_operator_sets_the_attempts_and_asks_for_holdout_feedback(retail_pack, tmp_path):
    """``--holdout-attempts 1``: a second answer is refused. ``--holdout-feedback``: holdout answers are told
    correct or wrong, and end_episode gives the holdout's counts (never which question was which)."""
    first, second = split_of(retail_pack, "holdout")[:2]
    seen: list[str] = []

    async def once() -> tuple:
        async with session_of(retail_pack, tmp_path / "once.jsonl", "--holdout-attempts", "1") as session:
            answered = await call(session, seen, "submit_answer", question_id=first["id"], sql=first["gold_sql"])
            again = await call(session, seen, "submit_answer", question_id=first["id"], sql="SELECT 1")
            return answered, again, seen[-1]

    async def with_feedback() -> tuple:
        async with session_of(retail_pack, tmp_path / "feedback.jsonl", "--holdout-feedback") as session:
            right = await call(session, seen, "submit_answer", question_id=first["id"], sql=first["gold_sql"])
            wrong = await call(session, seen, "submit_answer", question_id=second["id"], sql="SELECT 1")
            summary = await call(session, seen, "end_episode")
            return right, wrong, summary

    answered, again, refused = anyio.run(once)
    assert answered["status"] == "recorded" and answered["attempts_left"] == 0
    assert again is None and "at most 1" in refused
    right, wrong, summary = anyio.run(with_feedback)
    assert (right["status"], wrong["status"]) == ("correct", "wrong")
    assert (summary["holdout"]["correct"], summary["holdout"]["wrong"], summary["holdout"]["answered"]) == (1, 1, 2)


def test_conflicting_or_bad_holdout_options_exit_2_with_one_line(retail_pack, tmp_path):
    episode = tmp_path / "episode.jsonl"
    for extra, message in ((["--holdout-feedback", "--no-feedback"], "--holdout-feedback and --no-feedback: "),
                           (["--holdout-attempts", "0"], "--holdout-attempts 0: "),
                           (["--episode-max-mb", "0"], "--episode-max-mb 0: ")):
        run = subprocess.run([*SERVE, *serve_args(retail_pack, episode, *extra)], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith(f"evalpack: error: {message}"), run.stderr
        assert not episode.exists()


# --------------------------------------------------------------------------- the episode file's size


def test_the_episode_file_stays_under_its_cap_however_many_large_calls(retail_pack, tmp_path):
    """200 calls with arguments of 99,000 characters (and errors that repeat them), some after the episode ended:
    the episode's call records stay under --episode-max-mb, each under 128 KiB; later calls are counted in the end
    record, not logged, and the server says so once on stderr. The end record (answers and report) is whole."""
    episode = tmp_path / "episode.jsonl"
    dev = split_of(retail_pack, "dev")[0]
    long_name = "t" * 99_000
    long_sql = "SELECT 1 /* " + "x" * 98_000 + " */"
    seen: list[str] = []

    async def agent() -> dict:
        async with session_of(retail_pack, episode, "--episode-max-mb", "0.5") as session:
            for _ in range(60):
                assert await call(session, seen, "describe_table", table=long_name) is None
                assert await call(session, seen, "list_questions", split=long_name) is None
                assert (await call(session, seen, "run_sql", sql=long_sql))["rows"] == [[1]]
            assert (await call(session, seen, "submit_answer", question_id=dev["id"], sql=dev["gold_sql"]))
            summary = await call(session, seen, "end_episode")
            for _ in range(19):  # after the end: refused, and not logged either
                assert await call(session, seen, "describe_table", table=long_name) is None
            # listing and reading still answer after the end (they are no tool call), and are not logged
            assert "end_episode" in {tool.name for tool in (await session.list_tools()).tools}
            assert (await session.read_resource("evalpack://pack/README.md")).contents[0].text
            return summary

    anyio.run(agent)
    lines = episode.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    calls = [len(line) for line, r in zip(lines, records, strict=True) if r["event"] == "call"]
    assert max(calls) <= 128 * 1024
    assert sum(calls) <= 0.5 * 2**20
    end = end_record(episode)
    logged = sum(1 for r in records[:records.index(end)] if r["event"] == "call")
    # end_episode is logged after it; the client's own tools/list (it reads the tools' output schemas) is a call too
    listed = sum(1 for r in records if r.get("tool") == "list_tools")
    assert listed == 1 and end["calls"] == 182 and end["calls_not_logged"] == 182 - logged > 0
    assert records[-1] is end or all(r["event"] != "call" for r in records[records.index(end):])
    assert end["answers"] == [{"id": dev["id"], "sql": dev["gold_sql"]}]
    assert episode.stat().st_size <= 0.5 * 2**20 + len(lines[-1]) + len(lines[0])
    stderr = episode.with_suffix(".stderr").read_text()
    assert stderr.count("--episode-max-mb") == 1, stderr


# --------------------------------------------------------------------------- the episode file's place


def test_an_episode_file_inside_the_pack_is_refused_and_the_pack_still_verifies(retail_pack, tmp_path):
    pack = copy_pack(retail_pack, tmp_path / "pack")
    link = tmp_path / "link"
    link.symlink_to(pack, target_is_directory=True)
    sneaky = tmp_path / "sneaky.jsonl"
    sneaky.symlink_to(pack / "episodes.jsonl")  # a link to a file (not there yet) inside the pack
    for episode in (pack / "episodes.jsonl", pack / "rotations" / "episodes.jsonl", link / "episodes.jsonl", sneaky,
                    Path(os.path.relpath(pack / "x.jsonl", tmp_path))):
        run = subprocess.run([*SERVE, str(pack), "--episode", str(episode)], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120, cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith(f"evalpack: error: --episode {episode}: ") and "inside the pack" in run.stderr
        assert "outside the pack" in run.stderr and str(pack.with_name("pack.episodes.jsonl")) in run.stderr
    assert not (pack / "episodes.jsonl").exists() and not (pack / "rotations" / "episodes.jsonl").exists()
    check_integrity(pack)  # raises PackIntegrityError naming a file that is not the pack's
    verified = subprocess.run([*SERVE[:-1], "verify", str(pack)], capture_output=True, text=True, timeout=600)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def key_bytes(key: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(key.iterdir())}


def test_an_episode_file_inside_the_holdout_answer_key_is_refused_and_the_key_still_opens(retail_pack, tmp_path):
    """Appending episode records to ``PACK.holdout-key/holdout.jsonl`` would corrupt the answer key (``verify.py
    --holdout-key``: 'not a holdout key record'): an episode file in the key beside the pack, or in the folder
    ``--holdout-key`` names, is refused however the path gets there (a link, ``..``, a hard link)."""
    pack = copy_pack(retail_pack, tmp_path / "pack")
    key = holdout_key_beside(pack)
    given = Path(shutil.copytree(key, tmp_path / "private" / "key"))  # the key kept elsewhere, given to serve
    before = key_bytes(key), key_bytes(given)
    (tmp_path / "keylink").symlink_to(key, target_is_directory=True)
    (tmp_path / "packlink").symlink_to(pack, target_is_directory=True)  # whose key beside is the real pack's
    (tmp_path / "sneaky.jsonl").symlink_to(key / HOLDOUT_FILE)
    os.link(key / HOLDOUT_FILE, tmp_path / "hard.jsonl")
    os.link(given / HOLDOUT_FILE, tmp_path / "hard_given.jsonl")
    with_key = ("--holdout-key", str(given))
    for target, episode, extra in (
            (pack, key / HOLDOUT_FILE, ()),
            (pack, key / "episodes.jsonl", ()),
            (pack, Path("pack.holdout-key") / ".." / "pack.holdout-key" / HOLDOUT_FILE, ()),
            (pack, Path("keylink") / HOLDOUT_FILE, ()),
            (pack, Path("sneaky.jsonl"), ()),
            (pack, Path("hard.jsonl"), ()),
            (tmp_path / "packlink", key / HOLDOUT_FILE, ()),
            (pack, key / HOLDOUT_FILE, with_key),  # the key beside the pack, whichever key is given
            (pack, given / HOLDOUT_FILE, with_key),
            (pack, given / "episodes.jsonl", with_key),
            (pack, Path("hard_given.jsonl"), with_key)):
        run = subprocess.run([*SERVE, str(target), "--episode", str(episode), *extra], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120, cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, (episode, run.stderr)
        assert run.stderr.startswith(f"evalpack: error: --episode {episode}: "), run.stderr
        assert "holdout answer key" in run.stderr and "outside the pack" in run.stderr, run.stderr
    assert (key_bytes(key), key_bytes(given)) == before  # nothing appended, no episode file added
    assert not (key / "episodes.jsonl").exists() and not (given / "episodes.jsonl").exists()
    assert full_questions(pack)  # the key beside still opens: every record checked against its commitment
