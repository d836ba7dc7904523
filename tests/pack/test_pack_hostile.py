"""Packs from strangers (the hostile-pack sweep): a copy of a good pack, changed, then attested again as it is, so
that its hashes match. A manifest field of the wrong type, a table file that is not Parquet, duplicate question ids,
an expected answer longer than any result: each command that reads one says so in one line naming the file and
where in it, exit 2, and writes nothing. Never a traceback."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import refused_in_one_line
from test_attest import TINY
from test_integrity import cli

from evalpack.build import build_pack
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import check_manifest
from evalpack.core.scoring import ATTESTATION, MAX_FETCH_ROWS, InputError, load_questions
from evalpack.pack.attest import now_utc, write_attestation
from evalpack.spec.reader import load_spec


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "tiny.yaml"
    path.write_text(TINY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def good(spec_path) -> Path:
    """test_attest's tiny pack (rotations seed_7 and seed_8), built here: copy it before changing anything."""
    out = spec_path.parent / "good"
    build_pack(spec_path, out)
    return out


def hostile(good: Path, spec_path: Path, folder: Path, edit: Callable[[Path], None]) -> Path:
    """A copy of ``good`` in ``folder`` changed by ``edit`` and attested again, as a stranger would hand it over."""
    pack = Path(shutil.copytree(good, folder / "pack"))
    edit(pack)
    (pack / ATTESTATION).unlink()
    write_attestation(pack, load_spec(spec_path), started=now_utc(), finished=now_utc())
    return pack


def edit_json(name: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    def edit(pack: Path) -> None:
        data = json.loads((pack / name).read_text(encoding="utf-8"))
        change(data)
        (pack / name).write_text(json.dumps(data), encoding="utf-8")
    return edit


def edit_questions(change: Callable[[list[dict]], object]) -> Callable[[Path], None]:
    def edit(pack: Path) -> None:
        records = [json.loads(line) for line in (pack / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
        change(records)
        (pack / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return edit


def candidates(folder: Path) -> str:
    path = folder / "candidates.jsonl"
    path.write_text(json.dumps({"id": "q001", "sql": "SELECT 1"}) + "\n", encoding="utf-8")
    return str(path)


def nothing_written(folder: Path) -> None:
    """No export ``out`` (nor an export's staging folder ``.out.export-*``) was left in ``folder``."""
    assert not [p.name for p in folder.iterdir() if p.name.startswith(("out", ".out"))], list(folder.iterdir())


# --------------------------------------------------------------------------- manifest.json

MANIFESTS = {  # case: (the change, the key path the error names)
    "links_a_text": (lambda m: m.update(declared_links="x"), "declared_links: expected a list, got a text"),
    "link_lacks_a_column": (lambda m: m["declared_links"][0].pop("child_column"),
                            "declared_links[0] lacks child_column"),
    "link_a_number": (lambda m: m["declared_links"].__setitem__(0, 5), "declared_links[0]: expected an object"),
    "spec_a_text": (lambda m: m.update(spec="x"), "spec: expected an object, got a text"),
    "operators_a_list": (lambda m: m["near_miss_study"].update(operators=[1, 2]),
                         "near_miss_study.operators: expected an object, got a list"),
    "tables_a_text": (lambda m: m.update(tables="orders"), "tables: expected an object, got a text"),
    "columns_a_list": (lambda m: m["tables"].update(orders=["order_id"]), "tables.orders: expected an object"),
    "column_type_a_number": (lambda m: m["tables"]["orders"]["columns"].update(order_id=5),
                             "tables.orders.columns.order_id: expected a text, got an integer"),
    "semantics_a_list": (lambda m: m.update(semantics=[1]), "semantics: expected an object, got a list"),
}


@pytest.mark.parametrize("case", MANIFESTS)
def test_a_manifest_field_of_the_wrong_type_is_one_line_from_audit_export_and_diff(good, spec_path, tmp_path, case):
    """man_types*: a manifest field evalpack reads, of another type than evalpack writes, was an AttributeError,
    KeyError or TypeError traceback in audit, export or diff (or, unnoticed, a wrong result)."""
    change, named = MANIFESTS[case]
    pack = hostile(good, spec_path, tmp_path, edit_json("manifest.json", change))
    for args in (("audit", str(pack)), ("export", str(pack), "--format", "sqlite", "-o", str(tmp_path / "out")),
                 ("diff", str(good), str(pack))):
        refused_in_one_line(cli(*args, cwd=tmp_path), f"{pack / 'manifest.json'}: {named}", "the pack is damaged")
    nothing_written(tmp_path)


def test_the_manifest_check_takes_the_nulls_evalpack_writes_and_no_others(good):
    """Null where evalpack writes it (an import's study, a withheld spec text or as-received file) reads as before;
    null where a reader needs a value, or a key no terminal shows plainly, is named in the message."""
    manifest = json.loads((good / "manifest.json").read_text(encoding="utf-8"))
    manifest["spec"]["text"] = None
    written = {**manifest, "near_miss_study": None, "source": {"questions": {"as_received": None, "sha256": "0" * 64}}}
    assert check_manifest(written) is written
    counts = {**manifest["near_miss_study"], "operators": {"agg_swap": {"mutants": None}}}
    with pytest.raises(EvalpackError, match=r"near_miss_study\.operators\.agg_swap\.mutants: expected an integer or a "
                                            r"number, got null"):
        check_manifest({**manifest, "near_miss_study": counts})
    with pytest.raises(EvalpackError, match=r'tables\["ord\\ners"\]: expected an object, got a text'):
        check_manifest({**manifest, "tables": {"ord\ners": "x"}})


# --------------------------------------------------------------------------- table files


def footer_huge(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-8] + struct.pack("<i", 2**31 - 1) + b"PAR1")


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + data[-8:])


def corrupted_pages(path: Path) -> None:
    """The footer intact, the data pages scrambled: DuckDB opens the file and fails as it reads the rows."""
    data = bytearray(path.read_bytes())
    for i in range(4, len(data) // 2, 7):
        data[i] = (data[i] * 7 + 13) % 256
    path.write_bytes(bytes(data))


TABLES = {
    "garbage": lambda path: path.write_bytes(b"PAR1 this is not a parquet file PAR1"),
    "footer_huge": footer_huge,
    "truncated": truncated,
    "corrupted_pages": corrupted_pages,
}


@pytest.mark.parametrize("case", TABLES)
def test_a_table_file_that_is_not_parquet_is_one_line_from_audit_and_export(good, spec_path, tmp_path, case):
    """pq_garbage, pq_footer_huge, pq_truncated: DuckDB's and pyarrow's errors were tracebacks in audit and
    export; now one line naming the file (the folder, for rows DuckDB fails on while loading them)."""
    pack = hostile(good, spec_path, tmp_path, lambda p: TABLES[case](p / "rotations/seed_7/tables/orders.parquet"))
    table = pack / "rotations/seed_7/tables/orders.parquet"
    where = str(table.parent) if case == "corrupted_pages" else str(table)
    refused_in_one_line(cli("audit", str(pack), cwd=tmp_path), where, "the pack is damaged")
    for fmt in ("sqlite", "postgres"):  # postgres: the dumps, written without a server
        run = cli("export", str(pack), "--format", fmt, "-o", str(tmp_path / "out"), cwd=tmp_path)
        refused_in_one_line(run, str(table), "not a Parquet table evalpack can read")
    nothing_written(tmp_path)


def test_a_table_file_without_a_column_the_manifest_lists_is_one_line_from_export(good, spec_path, tmp_path):
    """pq_hugerows: orders.parquet holding only order_id was a KeyError traceback in export."""
    def edit(pack: Path) -> None:
        path = pack / "rotations/seed_7/tables/orders.parquet"
        pq.write_table(pa.table({"order_id": pa.array(range(1000), pa.int64())}), path)

    pack = hostile(good, spec_path, tmp_path, edit)
    run = cli("export", str(pack), "--format", "sqlite", "-o", str(tmp_path / "out"), cwd=tmp_path)
    refused_in_one_line(run, str(pack / "rotations/seed_7/tables/orders.parquet"), "no column 'customer_id'")
    nothing_written(tmp_path)


# --------------------------------------------------------------------------- questions.jsonl


def test_export_and_audit_refuse_duplicate_question_ids_as_verify_and_score_do(good, spec_path, tmp_path):
    """q_dup: export wrote a pack whose questions.jsonl repeats an id, which verify, score and verify.py refuse."""
    pack = hostile(good, spec_path, tmp_path, edit_questions(lambda rs: rs[1].update(id=rs[0]["id"])))
    named = f"{pack / 'questions.jsonl'}:2: duplicate question id 'q001' (first at line 1)"
    refused_in_one_line(cli("export", str(pack), "--format", "sqlite", "-o", str(tmp_path / "out"), cwd=tmp_path), named)
    nothing_written(tmp_path)
    refused_in_one_line(cli("score", str(pack), "--candidates", candidates(tmp_path), cwd=tmp_path), named)
    refused_in_one_line(cli("audit", str(pack), cwd=tmp_path), named)  # not three findings of drift
    verify = cli("verify", str(pack), cwd=tmp_path)  # verify reports a damaged pack: FAIL, exit 1
    assert verify.returncode == 1 and f"FAIL questions.jsonl: {named}" in verify.stdout, verify.stdout


def test_export_prints_no_sqlglot_warnings_but_its_own_lines(good, spec_path, tmp_path):
    """gold_io: sqlglot logged "'LOAD httpfs' contains unsupported syntax. Falling back to parsing as a 'Command'."
    on stderr during export; the question is dropped, and evalpack's own line says why."""
    pack = hostile(good, spec_path, tmp_path, edit_questions(lambda rs: rs[0].update(gold_sql="LOAD httpfs")))
    run = cli("export", str(pack), "--format", "sqlite", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "unsupported syntax" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert lines and all(line.startswith("evalpack: export: sqlite: ") for line in lines), run.stderr
    assert any(line.startswith("evalpack: export: sqlite: q001 dropped") for line in lines), run.stderr


def test_an_expected_answer_above_the_row_cap_is_refused_by_verify_score_and_verify_py(good, spec_path, tmp_path):
    """q_huge: no result is read beyond MAX_FETCH_ROWS rows, yet verify.py passed a gold answer of 1,000,000 rows
    (taking 4 GB and 75 s); now verify.py and score refuse it in one line naming the line and the question, exit 2,
    and evalpack verify fails the pack with that line."""
    rows = MAX_FETCH_ROWS + 1

    def huge(records: list[dict]) -> None:
        records[1].update(answer_type="rows", gold_sql=f"SELECT range FROM range({rows})",
                          expected_answer=[[i] for i in range(rows)])

    pack = hostile(good, spec_path, tmp_path, edit_questions(huge))
    named = f"{pack / 'questions.jsonl'}:2: question 'q002': its expected answer has {rows:,} rows"
    refused_in_one_line(cli("score", str(pack), "--candidates", candidates(tmp_path), cwd=tmp_path), named)
    run = subprocess.run([sys.executable, "-I", str(pack / "verify.py")], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    refused_in_one_line(run, named, prefixes=("error: ",))
    verify = cli("verify", str(pack), cwd=tmp_path)
    assert verify.returncode == 1 and f"FAIL questions.jsonl: {named}" in verify.stdout, verify.stdout
    assert "Traceback" not in verify.stderr


def test_an_expected_answer_at_the_row_cap_is_read(good, tmp_path):
    """The cap refuses only what no result could match: an answer of exactly MAX_FETCH_ROWS rows (per rotation too)
    is read as before."""
    pack = Path(shutil.copytree(good, tmp_path / "pack"))
    records = load_questions(pack)
    records[1].update(answer_type="rows", expected_answer={"seed_7": [[i] for i in range(MAX_FETCH_ROWS)],
                                                           "seed_8": [[1]]})
    (pack / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert load_questions(pack)[1]["expected_answer"]["seed_7"][-1] == [MAX_FETCH_ROWS - 1]
    records[1]["expected_answer"]["seed_8"] = [[i] for i in range(MAX_FETCH_ROWS + 1)]
    (pack / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(InputError, match=r"questions\.jsonl:2: question 'q002': its expected answer has 100,001 rows"):
        load_questions(pack)
