"""The "one line, exit 2, nothing written" contract, every command in one table.

For each command a bad input a user makes: the command exits 2, prints exactly one line on stderr that starts with
``evalpack: error:`` and names what was wrong (the file, the option or the key), prints nothing on stdout that looks
like a traceback, and leaves the folder it was run in as it found it. Each command runs as a user runs it: the
``evalpack`` console script in a process of its own, in an empty working folder.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import refused_in_one_line

SPEC_WITH_A_TYPO = """name: shop
version: 1.0.0
seed: 5
rotations: 1
tables:
  orders:
    rows: 100
    columns:
      order_id: {type: int, unique: true}
      amount: {type: flaot, min: 1, max: 10}
"""

# command line (in an empty folder holding `spec.yaml` with a typo and `q.jsonl` with one question), what the
# error line must name
CASES = {
    "build_missing_spec": (["build", "missing.yaml", "-o", "out"], "missing.yaml"),
    "build_bad_spec": (["build", "spec.yaml", "-o", "out"], "flaot"),
    "verify_not_a_pack": (["verify", "nowhere"], "nowhere"),
    "score_not_a_pack": (["score", "nowhere", "--candidates", "q.jsonl"], "nowhere"),
    "report_not_a_pack": (["report", "nowhere", "--html", "page.html"], "nowhere"),
    "audit_not_a_pack": (["audit", "nowhere"], "nowhere"),
    "serve_not_a_pack": (["serve", "nowhere"], "nowhere"),
    "export_not_a_pack": (["export", "nowhere", "--format", "sqlite", "-o", "out"], "nowhere"),
    "export_unknown_format": (["export", "nowhere", "--format", "mysql", "-o", "out"], "mysql"),
    "import_missing_data": (["import", "q.jsonl", "--data", "missing.duckdb", "-o", "out"], "missing.duckdb"),
    "diff_not_packs": (["diff", "old", "new"], "old"),
    "publish_not_a_pack": (["publish", "nowhere", "--repo", "me/shop"], "nowhere"),
    "score_bad_timeout": (["score", "nowhere", "--candidates", "q.jsonl", "--timeout", "-1"], "timeout"),
}


def listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(case, tmp_path):
    argv, named = CASES[case]
    (tmp_path / "spec.yaml").write_text(SPEC_WITH_A_TYPO, encoding="utf-8")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "How many orders?", "sql": "SELECT 1"}\n',
                                      encoding="utf-8")
    before = listing(tmp_path)
    run = subprocess.run([shutil.which("evalpack"), *argv], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": str(Path(shutil.which("evalpack")).parent) + ":/usr/bin:/bin",
                                           "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                                           "XDG_CACHE_HOME": str(tmp_path / "cache")})
    refused_in_one_line(run, named)
    assert "Traceback" not in run.stdout
    assert [p for p in listing(tmp_path) if not p.startswith(("home", "xdg", "cache"))] == before
