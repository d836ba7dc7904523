"""verify.py is the scorer, runs isolated with only the standard library and duckdb, and
`evalpack score` runs the same code; rotated answers are scored per rotation."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_pack, full_questions, gold_questions

import evalpack.core.scoring
import evalpack.dialects.scoring
from evalpack.build import build_pack
from evalpack.cli import main as cli_main
from evalpack.core.scoring import check_integrity, score_command

ROOT = Path(__file__).resolve().parents[2]


def _imports_after_site(stderr: str) -> list[tuple[int, str]]:
    """(depth, module) for every import that ``-X importtime`` logged after interpreter start-up."""
    entries = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        name_part = line.rsplit("|", 1)[1]
        if name_part.strip() == "imported package":
            continue
        depth = (len(name_part) - len(name_part.lstrip(" ")) - 1) // 2
        entries.append((depth, name_part.strip()))
    starts = [i for i, (depth, name) in enumerate(entries) if depth == 0 and name == "site"]
    assert starts, "no start-up 'site' import in the importtime log"
    return entries[starts[-1] + 1:]


def test_verify_py_is_the_scorer_byte_for_byte(retail_pack):
    assert (retail_pack / "verify.py").read_bytes() == (ROOT / "evalpack" / "core" / "scoring.py").read_bytes()


def test_verify_py_runs_isolated_and_imports_only_stdlib_and_duckdb(tmp_path, retail_pack):
    pack = tmp_path / "pack"
    copy_pack(retail_pack, pack)
    run = subprocess.run([sys.executable, "-I", "-X", "importtime", str(pack / "verify.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    questions = gold_questions(pack)
    assert f"{len(questions)}/{len(questions)} questions verify on every rotation" in run.stdout
    assert run.stdout.count("\nPASS ") == len(questions)
    imported = _imports_after_site(run.stderr)
    direct = {name.split(".")[0] for depth, name in imported if depth == 0}
    allowed = set(sys.stdlib_module_names) | {"duckdb", "_duckdb"}
    assert "duckdb" in direct and "json" in direct and "hashlib" in direct
    assert direct <= allowed, direct - allowed
    assert not any(name.split(".")[0] in {"evalpack", "sqlglot", "cryptography", "numpy", "pyarrow", "yaml"}
                   for _, name in imported)


def test_verify_py_candidate_mode_in_a_subprocess(tmp_path, retail_pack):
    pack = tmp_path / "pack"
    copy_pack(retail_pack, pack)
    questions = gold_questions(pack)
    unanswerable = len(full_questions(pack)) - len(questions)  # left out: not answered, never correct
    cands = tmp_path / "cands.json"
    cands.write_text(json.dumps([{"id": q["id"], "sql": q["gold_sql"]} for q in questions[:3]]
                                + [{"id": questions[3]["id"], "sql": "SELECT 180000.0"}]))
    report = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-I", str(pack / "verify.py"), "--candidates", str(cands), "--json",
                          str(report), "--rule", "bird", "--timeout", "5"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    data = json.loads(report.read_text())
    assert data["rule"] == "bird" and data["candidates"]["form"] == "json-list"
    overall = data["summary"]["overall"]
    assert (overall["correct"], overall["wrong"], overall["declined"], overall["not_answered"]) == (
        3, 1, 0, len(questions) - 4 + unanswerable)
    assert "accuracy" in run.stdout and "wrong-rate" in run.stdout
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    bad = subprocess.run([sys.executable, "-I", str(pack / "verify.py"), "--candidates", str(empty)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and f"{empty}: empty file" in bad.stderr


def test_evalpack_score_runs_the_same_scorer(tmp_path, retail_pack, capsys):
    questions = gold_questions(retail_pack)
    declines = len(full_questions(retail_pack)) - len(questions)
    cands = tmp_path / "cands.jsonl"
    cands.write_text("".join(json.dumps({"id": q["id"], "sql": q["gold_sql"]}) + "\n" for q in questions[:5]))
    via_cli = tmp_path / "cli.json"
    code = cli_main(["score", str(retail_pack), "--candidates", str(cands), "--json", str(via_cli)])
    direct = tmp_path / "direct.json"
    assert code == score_command(retail_pack, cands, json_path=direct, out=io.StringIO(), err=io.StringIO()) == 1
    a, b = json.loads(via_cli.read_text()), json.loads(direct.read_text())
    for report in (a, b):
        report.pop("timing")
        for q in report["questions"]:
            for run in q["rotations"].values():
                run.pop("seconds")
    assert a == b
    out = capsys.readouterr().out
    assert f"\n5/{len(questions) + declines} correct, 0 wrong, 0 declined, {len(questions) - 5 + declines} not answered" in out
    assert f"not answered: {len(questions) - 5 + declines} question(s) the candidates leave out" in out
    verdicts = [line for line in out.splitlines() if line.split(" ")[0] in ("CORRECT", "WRONG", "DECLINED")]
    assert len(verdicts) == 5  # a line per answer, not one per question


def _files(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: a file's bytes, None for a folder."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in folder.rglob("*")}


def _verify_py(pack: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(pack / "verify.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_a_report_inside_the_pack_is_refused_and_the_pack_still_verifies(tmp_path, retail_pack, capsys):
    pack = copy_pack(retail_pack, tmp_path / "pack")
    (tmp_path / "link").symlink_to(pack, target_is_directory=True)
    cands = tmp_path / "cands.jsonl"
    cands.write_text("".join(json.dumps({"id": q["id"], "sql": q["gold_sql"]}) + "\n"
                             for q in gold_questions(pack)[:3]))
    before = _files(pack)
    for option, path in (("--json", pack / "report.json"), ("--json", pack / "rotations" / "report.json"),
                         ("--json", pack), ("--html", pack / "score.html"), ("--json", tmp_path / "link" / "r.json"),
                         ("--html", tmp_path / "link" / "score.html")):
        assert cli_main(["score", str(pack), "--candidates", str(cands), option, str(path)]) == 2, (option, path)
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"evalpack: error: {path}: "), err
        assert f"write the {option} report outside the pack" in err, err
    for args in (("--candidates", str(cands), "--json", "report.json"), ("--json", "gold.json")):
        run = _verify_py(pack, *args, cwd=pack)  # the pack's own scorer, its pack by default: the folder it is in
        assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
        assert run.stderr.startswith(f"error: {args[-1]}: is inside the pack") and run.stderr.count("\n") == 1
    assert _files(pack) == before
    check_integrity(pack)  # raises when a file was added or changed


def test_a_missing_report_folder_is_refused_before_any_scoring(tmp_path, retail_pack, capsys, monkeypatch):
    cands = tmp_path / "cands.jsonl"
    cands.write_text("".join(json.dumps({"id": q["id"], "sql": q["gold_sql"]}) + "\n"
                             for q in gold_questions(retail_pack)[:3]))

    def no_scoring(*_, **__):
        raise AssertionError("scoring started before the report's folder was checked")

    for name in ("prestart_for", "check_integrity", "score_pack"):
        monkeypatch.setattr(evalpack.core.scoring, name, no_scoring)
    monkeypatch.setattr(evalpack.dialects.scoring, "dialect_score_command", no_scoring)
    missing = tmp_path / "no" / "such" / "folder"
    for option, dialect in (("--json", "duckdb"), ("--html", "duckdb"), ("--json", "sqlite")):
        path = missing / f"report.{option[2:]}"
        code = cli_main(["score", str(retail_pack), "--candidates", str(cands), option, str(path), "--dialect", dialect])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"{path}: cannot write the report, its folder {missing} does not exist" in err and option in err
    monkeypatch.undo()
    for args in (("--candidates", str(cands)), ()):  # verify.py scoring candidates, and rerunning the gold SQL
        run = _verify_py(retail_pack, *args, "--json", str(missing / "report.json"), cwd=tmp_path)
        assert run.returncode == 2 and run.stdout == "", run.stdout  # no report: nothing was scored or rerun
        assert f"its folder {missing} does not exist" in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "no").exists()


@pytest.fixture(scope="module")
def rotated_pack(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rotated")
    spec = (ROOT / "schemas" / "retail.yaml").read_text(encoding="utf-8")
    assert "answers: shared" in spec
    path = folder / "retail_rotated.yaml"
    path.write_text(spec.replace("answers: shared", "answers: rotated"), encoding="utf-8")
    out = folder / "pack"
    build_pack(path, out, rotations=2)
    return out


def test_rotated_answers_use_each_rotations_own_answer(tmp_path, rotated_pack):
    questions = gold_questions(rotated_pack)
    assert all(isinstance(q["expected_answer"], dict) for q in questions)
    rotations = sorted(questions[0]["expected_answer"])
    assert len(rotations) == 2
    differing = [q for q in questions if q["expected_answer"][rotations[0]] != q["expected_answer"][rotations[1]]]
    assert len(differing) >= 10
    copied = {q["id"]: q for q in differing[:10]}
    cands = {}
    for q in questions:
        if q["id"] in copied:
            value = q["expected_answer"][rotations[0]]  # the answer of the first rotation, as a constant
            cands[q["id"]] = f"SELECT {value!r}" if isinstance(value, str) else f"SELECT {value}"
        else:
            cands[q["id"]] = q["gold_sql"]
    path = tmp_path / "cands.json"
    path.write_text(json.dumps(cands))
    report_path = tmp_path / "report.json"
    assert score_command(rotated_pack, path, json_path=report_path, out=io.StringIO(), err=io.StringIO()) == 1
    report = json.loads(report_path.read_text())
    for r in report["questions"]:
        if r["id"] in copied:
            assert r["status"] == "wrong"
            assert r["rotations"][rotations[0]]["match"] is True  # right on the rotation it was copied from
            assert r["rotations"][rotations[1]]["match"] is False
        else:  # an unanswerable question has no candidate: not answered
            assert r["status"] == ("correct" if r["answerable"] else "not_answered"), r
    overall = report["summary"]["overall"]
    left_out = overall["unanswerable"]
    assert left_out > 0 and (overall["correct"], overall["wrong"], overall["not_answered"]) == (
        len(questions) - 10, 10, left_out)


WRITE_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from evalpack.core.scoring import InputError, write_json_report
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_json_report(sys.argv[1], {"rows": ["x" * 100] * 200})
except InputError as exc:
    print(exc)
    sys.exit(2)
"""


def test_a_report_that_cannot_be_written_whole_leaves_the_old_one(tmp_path):
    """A disk that fills (here: the operating system's file-size limit) mid-report leaves the previous report as it
    was and no temporary file, and the error names the path."""
    report = tmp_path / "score.json"
    report.write_text('{"previous": true}\n')
    run = subprocess.run([sys.executable, "-c", WRITE_UNDER_A_FILE_SIZE_LIMIT, str(report)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stdout.startswith(f"{report}: cannot write the report (")
    assert report.read_text() == '{"previous": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["score.json"]
