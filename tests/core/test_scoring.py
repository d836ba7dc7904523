"""The scorer: whole-result comparison, candidate files, three-way scoring and its report."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from collections import Counter
from decimal import Decimal
from itertools import permutations
from pathlib import Path

import duckdb
import pytest
from conftest import copy_pack, full_questions
from hypothesis import given
from hypothesis import strategies as st

from evalpack.core.scoring import (
    InputError,
    answer_matches,
    load_candidates,
    normalize,
    result_sets_match,
    scalar_matches,
    score_command,
    score_pack,
    top_level_order_by,
    verdict_in_any_order,
)

# --------------------------------------------------------------------------- scalar comparison


def test_scalar_needs_exactly_one_row_and_one_column():
    assert scalar_matches(5, "integer", None, [(5,)])
    assert not scalar_matches(5, "integer", None, [(5,), (5,)])
    assert not scalar_matches(5, "integer", None, [(5, 5)])
    assert not scalar_matches(5, "integer", None, [(5, None)])
    assert not scalar_matches(5, "integer", None, [])


CELLS = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["a", "b"]), st.sampled_from([Decimal("1.004"), 1.0]))


@given(st.integers(1, 3).flatmap(lambda width: st.tuples(
    st.lists(st.tuples(*[CELLS] * width), max_size=4), st.lists(st.tuples(*[CELLS] * width), max_size=4),
    st.sampled_from(["rows", "integer"]), st.sampled_from([None, 2]))))
def test_a_verdict_in_any_order_is_the_verdict_of_every_order(case):
    """Where verdict_in_any_order decides (True or False), every order of the rows gets that verdict compared in
    row order; the study judges a batched list of a mutant's rows, which come in no guaranteed order, by it."""
    expected, got, answer_type, digits = case
    record = {"answer_type": answer_type, "round_decimals": digits}
    want = [list(r) for r in expected] if answer_type == "rows" else (expected[0][0] if expected else 1)
    verdict = verdict_in_any_order(record, want, got)
    in_order = {answer_matches(record, want, list(order), ordered=True) for order in permutations(got)}
    if verdict is not None:
        assert in_order == {verdict}
    # a list and its reverse, both fine to decide from: the rows themselves, in order, decide it alone
    if expected and answer_type == "rows":
        assert verdict_in_any_order(record, want, list(expected)[::-1]) in (True, None)


def test_numbers_round_half_even_as_exact_decimals():
    assert scalar_matches(980000.37, "number", 2, [(Decimal("980000.3712"),)])
    assert scalar_matches(0.3, "number", 2, [(0.1 + 0.2,)])
    # 2.675 is 2.67499999... in binary: rounding the float's decimal text gives 2.68 (Python's round gives 2.67)
    assert round(2.675, 2) == 2.67
    assert scalar_matches(2.68, "number", 2, [(2.675,)])
    assert scalar_matches(0.12, "number", 2, [(Decimal("0.125"),)])  # half to even
    assert not scalar_matches(0.13, "number", 2, [(Decimal("0.125"),)])
    assert scalar_matches(0.0, "number", 2, [(-0.001,)])  # negative zero is zero
    assert not scalar_matches(980000.37, "number", 2, [(980000.38,)])
    assert not scalar_matches(980000.37, "number", 2, [("980000.37",)])  # text is not a number
    assert not scalar_matches(1, "number", 0, [(True,)])  # a boolean is not a number
    assert scalar_matches(1e300, "number", 2, [(1e300,)])  # large values keep their digits


def test_number_without_round_decimals_is_compared_at_twelve_significant_digits():
    """No round_decimals (imported answers): floating-point noise is not a difference, the 12th digit is."""
    assert scalar_matches(1.5, "number", None, [(Decimal("1.50"),)])
    assert not scalar_matches(1.5, "number", None, [(1.5000001,)])
    assert normalize(2.5, "number", None) == Decimal("2.5")
    assert scalar_matches(0.3, "number", None, [(0.1 + 0.2,)])
    assert scalar_matches(35785.70930693735, "number", None, [(35785.709306937344,)])  # TPC-H Q1, summed elsewhere
    assert not scalar_matches(35785.7093069, "number", None, [(35785.7093070,)])
    assert scalar_matches(123456789012345678, "number", None, [(Decimal(123456789012345678),)])
    assert not scalar_matches(123456789012345678, "number", None, [(Decimal(123456789012345679),)])  # whole: exact


def test_a_result_set_without_round_decimals_ignores_floating_point_noise():
    """TPC-H Q3's answer against a candidate that computes in DOUBLE: the same rows."""
    expected = [[47714, 267010.5894, "1995-03-11", 0], [22276, 266351.5562, "1995-01-29", 0]]
    doubled = [(47714, 267010.58939999998, dt.date(1995, 3, 11), 0), (22276, 266351.55620000005, dt.date(1995, 1, 29), 0)]
    assert result_sets_match(expected, doubled, ordered=True)
    assert result_sets_match(expected, doubled, rule="bird")
    assert not result_sets_match(expected, [(47714, 267010.5895, dt.date(1995, 3, 11), 0), doubled[1]], ordered=True)


def test_integers_and_strings():
    assert scalar_matches(2946, "integer", None, [(2946.0,)])
    assert not scalar_matches(2946, "integer", None, [(2946.5,)])
    assert not scalar_matches(2946, "integer", None, [(2947,)])
    assert scalar_matches("2025-12", "string", None, [("2025-12",)])
    assert not scalar_matches("web", "string", None, [("Web",)])
    assert not scalar_matches("web", "string", None, [("web ",)])
    assert not scalar_matches("1", "string", None, [(1,)])
    assert scalar_matches("2025-03-14", "string", None, [(dt.date(2025, 3, 14),)])


def test_null_never_equals_a_value():
    assert not scalar_matches(None, "number", 2, [(None,)])
    assert not scalar_matches(0, "integer", None, [(None,)])
    assert not scalar_matches("", "string", None, [(None,)])


# --------------------------------------------------------------------------- result sets


def test_spider_matches_columns_by_value_and_rows_as_a_multiset():
    gold = [("web", 10), ("app", 5), ("app", 5)]
    assert result_sets_match(gold, [(5, "app"), (10, "web"), (5, "app")], "spider")
    assert not result_sets_match(gold, [("web", 10), ("app", 5)], "spider")  # multiplicity counts
    assert not result_sets_match(gold, [("web", 10), ("app", 5), ("app", 5), ("app", 5)], "spider")
    assert not result_sets_match(gold, [("web", 10, 1), ("app", 5, 1), ("app", 5, 1)], "spider")  # extra column
    assert not result_sets_match(gold, [("web",), ("app",), ("app",)], "spider")  # missing column
    assert not result_sets_match(gold, [("web", 5), ("app", 10), ("app", 5)], "spider")  # cells moved rows
    assert result_sets_match([], [], "spider")


def test_spider_order_counts_only_when_the_gold_orders():
    gold = [("a", 1), ("b", 2)]
    assert result_sets_match(gold, [(2, "b"), (1, "a")], "spider", ordered=False)
    assert not result_sets_match(gold, [(2, "b"), (1, "a")], "spider", ordered=True)
    assert result_sets_match(gold, [(1, "a"), (2, "b")], "spider", ordered=True)


def test_spider_column_search_with_repeated_and_identical_columns():
    gold = [(1, 1, 2, 2, 3, 3, 4, 4), (2, 2, 3, 3, 4, 4, 1, 1), (3, 3, 4, 4, 1, 1, 2, 2)]
    got = [tuple(row[i] for i in (7, 1, 5, 3, 0, 6, 2, 4)) for row in gold]
    assert result_sets_match(gold, got, "spider")
    broken = [got[0], got[1], tuple(reversed(got[2]))]
    assert not result_sets_match(gold, broken, "spider")


def test_bird_compares_sets_of_rows_by_position():
    gold = [("web", 10), ("app", 5)]
    assert result_sets_match(gold, [("app", 5), ("web", 10), ("web", 10)], "bird")
    assert not result_sets_match(gold, [(10, "web"), (5, "app")], "bird")  # columns by position
    assert not result_sets_match(gold, [("web", 10)], "bird")


def test_result_set_cells():
    assert result_sets_match([(None, 1)], [(None, 1)], "spider")  # NULL equals NULL inside result sets
    assert not result_sets_match([(None,)], [(0,)], "spider")
    assert not result_sets_match([(None,)], [("",)], "bird")
    assert result_sets_match([(1.25,)], [(Decimal("1.2500"),)], "spider")
    assert result_sets_match([(1.24,)], [(1.2449,)], "spider", round_decimals=2)
    assert not result_sets_match([(1,)], [(True,)], "bird")
    with pytest.raises(ValueError):
        result_sets_match([], [], "sql")


def test_rows_answer_type_dispatch():
    record = {"answer_type": "rows", "round_decimals": 1}
    assert answer_matches(record, [["web", 10.04]], [(10.0, "web")], "spider")
    assert not answer_matches(record, [["web", 10.04]], [(10.0, "web")], "bird")
    assert not answer_matches(record, 10.0, [(10.0,)], "spider")  # a rows question needs a list of rows


@pytest.mark.parametrize(("sql", "ordered"), [
    ("SELECT a FROM t ORDER BY a", True),
    ("SELECT a FROM t", False),
    ("WITH x AS (SELECT a FROM t ORDER BY a) SELECT a FROM x", False),
    ("WITH x AS (SELECT a FROM t) SELECT a FROM x ORDER BY a DESC", True),
    ("SELECT a, rank() OVER (ORDER BY a) FROM t", False),
    ("SELECT a FROM t UNION SELECT a FROM u ORDER BY 1", True),
    ("SELECT a FROM (SELECT a FROM t ORDER BY a) s", False),
    ("not sql at all", False),
])
def test_top_level_order_by(sql, ordered):
    con = duckdb.connect()
    try:
        assert top_level_order_by(con, sql) is ordered
    finally:
        con.close()


# --------------------------------------------------------------------------- candidate files


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_three_input_forms_and_declines(tmp_path):
    jsonl = _write(tmp_path, "a.jsonl", '{"id": "q001", "sql": "SELECT 1"}\n\n{"id": "q002", "declined": true}\n')
    listed = _write(tmp_path, "b.json",
                    '[\n  {"id": "q001", "sql": "SELECT 1"},\n  {"id": "q002", "declined": true}\n]')
    mapping = _write(tmp_path, "c.json", '{\n  "q001": "SELECT 1",\n  "q002": null\n}\n')
    one_line_map = _write(tmp_path, "d.json", '{"q001": "SELECT 1", "q002": null}')
    single = _write(tmp_path, "e.jsonl", '{"id": "q001", "sql": "SELECT 1"}')
    forms = [load_candidates(p) for p in (jsonl, listed, mapping, one_line_map)]
    assert [c.form for c in forms] == ["jsonl", "json-list", "json-object", "json-object"]
    for c in forms:
        assert c.sql == {"q001": "SELECT 1", "q002": None}
    assert forms[0].lines == {"q001": 1, "q002": 3}
    assert forms[1].lines == {"q001": 2, "q002": 3}
    assert forms[2].lines == {"q001": 2, "q002": 3}
    assert load_candidates(single).sql == {"q001": "SELECT 1"}


def test_json_strings_may_hold_line_separators_that_are_not_newlines(tmp_path):
    """JSON allows U+2028, U+2029 and U+0085 unescaped in a string (json.dumps with ensure_ascii=False writes them so):
    a JSON Lines file splits at newlines only."""
    sql = "SELECT 1 -- a comment\u2028with a line separator\u2029and more\x85"
    path = _write(tmp_path, "seps.jsonl", json.dumps({"id": "q001", "sql": sql}, ensure_ascii=False) + "\r\n"
                  + json.dumps({"id": "q002", "sql": "SELECT 2"}) + "\n")
    candidates = load_candidates(path)
    assert candidates.sql == {"q001": sql, "q002": "SELECT 2"} and candidates.lines == {"q001": 1, "q002": 2}


def test_a_candidates_path_that_is_no_regular_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "candidates.fifo"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for path in (fifo, tmp_path):
        with pytest.raises(InputError, match="not a regular file"):
            load_candidates(path)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("empty.jsonl", "", "empty file"),
    ("blank.jsonl", "  \n\n", "empty file"),
    ("bad.jsonl", '{"id": "q001", "sql": "SELECT 1"}\n{"id": "q002", "sql": \n', ":2: not valid JSON"),
    ("dup.jsonl", '{"id": "q001", "sql": "SELECT 1"}\n{"id": "q002", "sql": "SELECT 2"}\n{"id": "q001", "sql": "x"}\n',
     ":3: duplicate id 'q001' (first at line 1)"),
    ("dup.json", '[\n {"id": "q001", "sql": "a"},\n {"id": "q001", "sql": "b"}\n]', ":3: duplicate id 'q001'"),
    ("dupmap.json", '{\n "q001": "a",\n "q002": "b",\n "q001": "c"\n}', ":4: duplicate id 'q001' (first at line 2)"),
    ("badlist.json", '[\n {"id": "q001", "sql": "a"},\n {"id": "q002" "sql": "b"}\n]', ":3: not valid JSON"),
    ("noid.jsonl", '{"sql": "SELECT 1"}\n', ':1: a candidate needs an "id"'),
    ("deep.jsonl", '{"id": "q001", "sql": "SELECT 1"}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
     ":2: not valid JSON: nested too deeply"),
    ("deep.json", '{"q001": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON: nested too deeply"),
    ("longnumber.json", '{"q001": "SELECT 1", "q002": ' + "9" * 5000 + "}", "not valid JSON: Exceeds the limit"),
    ("notobj.jsonl", '{"id": "q001", "sql": "a"}\n[1, 2]\n', ":2: expected an object"),
    ("trailing.json", '[{"id": "q001", "sql": "a"}]\n{"id": "q002"}\n', ":2: unexpected text"),
])
def test_bad_candidate_files_name_the_file_and_line(tmp_path, name, text, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(InputError) as caught:
        load_candidates(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("badmap.json", '{\n "q001": "a",\n "q002": 7\n}', "the SQL must be text"),
    ("nosql.jsonl", '{"id": "q002"}\n', 'malformed candidate (line 1): "sql" must be text'),
    ("both.jsonl", '{"id": "q002", "sql": "SELECT 1", "declined": true}\n', 'both "sql" and "declined"'),
    ("declined.jsonl", '{"id": "q002", "declined": "yes"}\n', '"declined" must be true or false'),
])
def test_a_malformed_record_with_an_id_is_that_questions_error(tmp_path, retail_pack, name, text, reason):
    path = _write(tmp_path, name, text)
    refused = load_candidates(path).refused["q002"]
    assert refused.startswith("malformed candidate (line ") and reason in refused
    report_path = tmp_path / "report.json"
    out, err = io.StringIO(), io.StringIO()
    assert score_command(retail_pack, path, json_path=report_path, out=out, err=err) == 1, err.getvalue()
    report = json.loads(report_path.read_text())
    q002 = next(q for q in report["questions"] if q["id"] == "q002")
    assert q002["status"] == "wrong"
    assert {run["error"] for run in q002["rotations"].values()} == {refused}


def test_bad_input_exits_2_with_the_message(tmp_path, retail_pack):
    path = _write(tmp_path, "dup.jsonl", '{"id": "q001", "sql": "SELECT 1"}\n{"id": "q001", "declined": true}\n')
    out, err = io.StringIO(), io.StringIO()
    assert score_command(retail_pack, path, out=out, err=err) == 2
    assert f"{path}:2: duplicate id 'q001'" in err.getvalue()
    assert out.getvalue() == ""
    missing = tmp_path / "nope.jsonl"
    assert score_command(retail_pack, missing, out=out, err=err) == 2
    assert str(missing) in err.getvalue()


# --------------------------------------------------------------------------- three-way scoring on a pack


def test_four_way_scoring_report_and_json(tmp_path, retail_pack):
    questions = full_questions(retail_pack)
    expected_status = {}
    lines = []
    for i, q in enumerate(questions):
        if not q["answerable"]:  # declining is correct, any SQL wrong, leaving it out is not answering it
            if i % 3 == 1:
                lines.append({"id": q["id"], "sql": "SELECT 1"})
            elif i % 3 == 2:
                lines.append({"id": q["id"], "declined": True})
            expected_status[q["id"]] = ("not_answered", "wrong", "correct")[i % 3]
        elif i % 5 == 0:
            lines.append({"id": q["id"], "declined": True})
            expected_status[q["id"]] = "declined"
        elif i % 5 == 1:
            lines.append({"id": q["id"], "sql": "SELECT 180000.0"})
            expected_status[q["id"]] = "wrong"
        elif i % 5 == 2:
            expected_status[q["id"]] = "not_answered"  # left out: neither an answer nor a decline
        elif i % 5 == 3:
            lines.append({"id": q["id"], "sql": f"SELECT * FROM ({q['gold_sql']}) AS g, (VALUES (1), (2)) AS v(x)"})
            expected_status[q["id"]] = "wrong"  # more rows and columns than the answer
        else:
            lines.append({"id": q["id"], "sql": q["gold_sql"]})
            expected_status[q["id"]] = "correct"
    assert {"correct", "wrong", "not_answered"} == {expected_status[q["id"]] for q in questions if not q["answerable"]}
    path = _write(tmp_path, "cands.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    out, err = io.StringIO(), io.StringIO()
    report_path = tmp_path / "report.json"
    assert score_command(retail_pack, path, json_path=report_path, out=out, err=err) == 1
    report = json.loads(report_path.read_text())
    got_status = {r["id"]: r["status"] for r in report["questions"]}
    assert got_status == expected_status
    assert report["candidates"] == {"file": str(path), "form": "jsonl"}
    # counts by kind and split, recomputed from questions.jsonl
    for field, key in (("kind", "by_kind"), ("split", "by_split")):
        for value, counts in report["summary"][key].items():
            members = [q["id"] for q in questions if q[field] == value]
            want = Counter(expected_status[m] for m in members)
            assert counts["n"] == len(members)
            assert (counts["correct"], counts["wrong"], counts["declined"], counts["not_answered"]) == (
                want["correct"], want["wrong"], want["declined"], want["not_answered"])
            assert counts["coverage"] == pytest.approx(1 - want["not_answered"] / len(members))
            assert counts["accuracy"] == pytest.approx(want["correct"] / len(members))
            assert counts["wrong_rate"] == pytest.approx(want["wrong"] / len(members))
    assert set(report["summary"]["by_split"]) == {q["split"] for q in questions}
    overall = report["summary"]["overall"]
    assert overall["n"] == len(questions) == sum(overall[k] for k in ("correct", "wrong", "declined", "not_answered"))
    text = out.getvalue()
    assert "accuracy" in text and "wrong-rate" in text
    first_wrong = next(q for i, q in enumerate(questions) if i % 5 == 1)
    assert f"WRONG    {first_wrong['id']}" in text and 'got "180000.0"' not in text
    assert f"split {questions[0]['split']}" in text and f"kind  {questions[0]['kind']}" in text


def test_every_gold_sql_is_correct_and_exits_0(tmp_path, retail_pack):
    questions = full_questions(retail_pack)
    path = _write(tmp_path, "gold.json", json.dumps({q["id"]: q["gold_sql"] for q in questions}))  # null: decline
    out = io.StringIO()
    assert score_command(retail_pack, path, rule="bird", out=out, err=io.StringIO()) == 0
    assert f"{len(questions)}/{len(questions)} correct, 0 wrong, 0 declined" in out.getvalue()


def _pack_with_rows_questions(tmp_path: Path, retail_pack: Path) -> tuple[Path, list[dict]]:
    """A copy of the retail pack with result-set questions appended; answers computed here with plain DuckDB."""
    pack = tmp_path / "rows_pack"
    copy_pack(retail_pack, pack)
    (pack / "attestation.intoto.json").unlink(missing_ok=True)
    rotations = sorted(p.name for p in (pack / "rotations").iterdir())
    golds = {
        "r001": "SELECT channel, count(*) AS n FROM orders GROUP BY channel ORDER BY n DESC, channel",
        "r002": "SELECT channel, round(sum(amount), 2) AS total FROM orders WHERE refunded GROUP BY channel",
        "r003": "SELECT segment FROM customers GROUP BY segment",
    }
    records = []
    for ident, sql in golds.items():
        answers = {}
        for rotation in rotations:
            con = duckdb.connect()
            source = pack / "rotations" / rotation / "tables"
            direct = (sql.replace("FROM orders", f"FROM read_parquet('{source}/orders.parquet')")
                      .replace("FROM customers", f"FROM read_parquet('{source}/customers.parquet')"))
            rows = con.execute(direct).fetchall()
            con.close()
            answers[rotation] = [[float(v) if isinstance(v, Decimal) else v for v in row] for row in rows]
        records.append({"id": ident, "question": ident, "gold_sql": sql, "expected_answer": answers,
                        "answer_type": "rows", "round_decimals": 2, "kind": "result_set", "split": "dev",
                        "question_sha256": "", "tags": []})
    with open(pack / "questions.jsonl", "a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return pack, records


def test_result_set_questions_under_spider_and_bird(tmp_path, retail_pack):
    pack, _ = _pack_with_rows_questions(tmp_path, retail_pack)
    candidates = {
        # r001: the gold orders by n DESC; the same rows in the same order (another spelling) -> correct for both
        "r001": "SELECT channel, count(order_id) AS n FROM orders GROUP BY ALL ORDER BY 2 DESC, 1",
        # r002: unrounded sums match at round_decimals 2; columns swapped: spider yes, bird (by position) no
        "r002": "SELECT sum(amount) AS total, channel FROM orders WHERE refunded GROUP BY channel",
        # r003: duplicates of the right set: bird yes, spider (multiset) no
        "r003": "SELECT segment FROM customers",
    }
    spider = score_pack(pack, candidates, rule="spider")
    bird = score_pack(pack, candidates, rule="bird")
    status = {rule: {r["id"]: r["status"] for r in rep["questions"] if r["id"].startswith("r")}
              for rule, rep in (("spider", spider), ("bird", bird))}
    assert status["spider"] == {"r001": "correct", "r002": "correct", "r003": "wrong"}
    assert status["bird"] == {"r001": "correct", "r002": "wrong", "r003": "correct"}
    reordered = {"r001": "SELECT channel, count(*) AS n FROM orders GROUP BY channel ORDER BY n ASC, channel"}
    again = score_pack(pack, reordered, rule="spider")
    assert {r["id"]: r["status"] for r in again["questions"]}["r001"] == "wrong"  # the gold orders: order counts
    again_bird = score_pack(pack, reordered, rule="bird")
    assert {r["id"]: r["status"] for r in again_bird["questions"]}["r001"] == "correct"


def test_records_without_gold_sql_or_answer_are_skipped(tmp_path, retail_pack):
    pack = tmp_path / "imported_like"
    copy_pack(retail_pack, pack)
    (pack / "attestation.intoto.json").unlink(missing_ok=True)
    extra = [{"id": "x1", "question": "criteria only", "gold_sql": None, "expected_answer": None, "answer_type": None,
              "kind": "imported", "split": "dev", "status": "criteria"},
             {"id": "x2", "question": "answer alone", "gold_sql": None, "expected_answer": 5, "answer_type": "integer",
              "kind": "imported", "split": "dev", "status": "provisional"},
             {"id": "x3", "question": "query alone", "gold_sql": "SELECT 1", "expected_answer": None,
              "kind": "imported", "split": "dev", "status": "provisional"},
             {"id": "x4", "question": "no answer_type", "gold_sql": "SELECT 'web'", "expected_answer": "web",
              "kind": "imported", "split": "holdout", "status": "scorable"}]
    with open(pack / "questions.jsonl", "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in extra)
    report = score_pack(pack, {"x1": "SELECT 1", "x3": "SELECT 1", "x4": "SELECT 'web'"})
    assert report["not_scored"] == ["x1", "x2", "x3"]
    assert report["unscored_candidates"] == ["x1", "x3"]
    assert report["unknown_ids"] == []
    status = {r["id"]: r["status"] for r in report["questions"]}
    assert "x1" not in status and "x2" not in status and "x3" not in status
    assert status["x4"] == "correct"
    assert report["summary"]["overall"]["n"] == len(full_questions(retail_pack)) + 1


def test_a_question_left_out_is_not_answered_never_correct_and_the_exit_code_can_take_a_threshold(tmp_path, retail_pack):
    """Issue 55 point 2: a candidates file answering one question of 177 scored 10% accuracy and a positive penalty,
    its left-out unanswerable questions counted as correctly declined. Left out is not answered: reported apart
    (coverage), never correct; declines are explicit, and the text spells out how they add up."""
    import subprocess
    import sys

    records = full_questions(retail_pack)
    answerable = next(r for r in records if r["answerable"])
    unanswerable = [r for r in records if not r["answerable"]]
    cands = _write(tmp_path, "one.jsonl", json.dumps({"id": answerable["id"], "sql": answerable["gold_sql"]}) + "\n"
                   + json.dumps({"id": unanswerable[0]["id"], "declined": True}) + "\n")
    out = io.StringIO()
    report_path = tmp_path / "report.json"
    assert score_command(retail_pack, cands, json_path=report_path, out=out, err=io.StringIO()) == 1
    report = json.loads(report_path.read_text())
    o = report["summary"]["overall"]
    n = len(records)
    assert (o["correct"], o["wrong"], o["declined"], o["not_answered"]) == (2, 0, 0, n - 2)
    assert o["accuracy"] == pytest.approx(2 / n) and o["coverage"] == pytest.approx(2 / n)
    assert o["penalty"]["10"] == pytest.approx(2 / n)
    assert (o["declined_unanswerable"], o["decline_precision"]) == (1, 1.0)
    assert o["decline_recall"] == pytest.approx(1 / len(unanswerable))
    statuses = Counter(q["status"] for q in report["questions"])
    assert statuses == {"correct": 2, "not_answered": n - 2}
    text = out.getvalue()
    assert f"declines: 1 = 1 of the {len(unanswerable)} unanswerable questions (each counted correct) + 0 answerable" \
        in text
    assert f"not answered: {n - 2} question(s) the candidates leave out" in text

    def score_cli(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "evalpack.cli", "score", str(retail_pack), "--candidates",
                               str(cands), *extra], capture_output=True, text=True, timeout=300)

    assert score_cli("--min-accuracy", "0.01").returncode == 0  # 2/177 = 1.1%
    assert score_cli("--min-accuracy", "2%").returncode == 1
    refused = score_cli("--min-accuracy", "1.5")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--min-accuracy" in refused.stderr
    verify = subprocess.run([sys.executable, "-I", str(retail_pack / "verify.py"), "--candidates", str(cands),
                             "--min-accuracy", "1%"], capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr
