"""One module owns the pack layout (evalpack/core/layout.py); the standalone scorer spells its part of it alone."""

from __future__ import annotations

import re

import pytest

from evalpack.core import layout, scoring
from evalpack.core.errors import EvalpackError
from evalpack.core.layout import PackLayout, rotation_name, seed_of


def test_the_scorer_spells_the_layout_as_the_layout_module_does():
    assert scoring.QUESTIONS_FILE == layout.QUESTIONS
    assert scoring.ROTATIONS_DIR == layout.ROTATIONS
    assert scoring.TABLES_DIR == layout.TABLES
    assert scoring.ATTESTATION == layout.ATTESTATION
    assert scoring.ROTATION_FOLDER.pattern == layout.ROTATION_NAME.pattern


def test_paths_of_a_pack(tmp_path):
    pack = PackLayout(tmp_path)
    assert rotation_name(42) == "seed_42" and seed_of("seed_42") == 42
    assert pack.table(42, "orders") == tmp_path / "rotations" / "seed_42" / "tables" / "orders.parquet"
    assert pack.table("seed_7", "orders", "csv") == tmp_path / "rotations" / "seed_7" / "tables" / "orders.csv"
    assert [pack.card.name, pack.questions.name, pack.certificate.name, pack.manifest.name, pack.scorer.name,
            pack.attestation.name] == ["README.md", "questions.jsonl", "certificate.json", "manifest.json",
                                       "verify.py", "attestation.intoto.json"]
    with pytest.raises(ValueError):
        seed_of("seed_x")


def test_rotations_are_read_in_seed_order_and_a_folder_without_any_is_refused(tmp_path):
    pack = PackLayout(tmp_path)
    with pytest.raises(EvalpackError, match="no rotation folder"):
        pack.rotations()
    for name in ("seed_10", "seed_9", "seed_100", "other", "seed_"):
        (tmp_path / "rotations" / name).mkdir(parents=True)
    assert pack.rotations() == ["seed_9", "seed_10", "seed_100"]
    assert scoring.rotations(tmp_path) == pack.rotations()


def test_damaged_pack_files_are_one_clear_error(tmp_path):
    pack = PackLayout(tmp_path)
    pack.manifest.write_text("[1, 2]")
    with pytest.raises(EvalpackError, match=re.escape(f"{pack.manifest}: not a JSON object")):
        pack.read_manifest()
    pack.questions.write_text('{"id": "q1"}\n\n[1]\n')
    with pytest.raises(EvalpackError, match="questions.jsonl:3: a question record needs an id"):
        pack.read_records()


def test_questions_whose_text_holds_a_line_separator_read_back_as_written(tmp_path):
    """questions.jsonl is written with ensure_ascii=False: a question (a category value in its words) may hold U+2028
    unescaped, which is JSON; the pack and the standalone scorer read it at newlines only."""
    records = [{"id": "q1", "question": "orders from the \u2028north\u2029 region?"}, {"id": "q2", "question": "x\x85"}]
    pack = PackLayout(tmp_path)
    pack.questions.write_text("".join(scoring.json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                              encoding="utf-8")
    assert pack.read_records() == records
    assert scoring.jsonl_lines("a\u2028b\r\nc\n") == ["a\u2028b", "c", ""]


def test_a_pack_file_nested_too_deeply_or_not_utf8_is_one_clear_error(tmp_path):
    """A pack from elsewhere can hold JSON nested 200,000 deep or bytes that are not UTF-8: the readers of the
    engine and of the standalone scorer name the file (and line) instead of raising RecursionError or
    UnicodeDecodeError."""
    pack = PackLayout(tmp_path)
    deep = "[" * 200_000 + "]" * 200_000
    pack.manifest.write_text('{"tables": ' + deep + "}")
    with pytest.raises(EvalpackError, match="manifest.json: JSON nested too deeply"):
        pack.read_manifest()
    pack.questions.write_text('{"id": "q1"}\n{"id": "q2", "x": ' + deep + "}\n")
    with pytest.raises(EvalpackError, match="questions.jsonl:2: not valid JSON: nested too deeply"):
        pack.read_records()
    with pytest.raises(scoring.InputError, match=r"questions.jsonl:2: not valid JSON: nested too deeply"):
        scoring.load_questions(tmp_path)
    pack.questions.write_bytes(b'{"id": "q1", "question": "\xff"}\n')
    with pytest.raises(scoring.InputError, match="not UTF-8 text"):
        scoring.load_questions(tmp_path)


def test_every_reader_of_questions_jsonl_is_the_scorer_s(tmp_path):
    """One reader (issue 51): PackLayout.read_records once took a repeated id that the scorer refuses."""
    from evalpack.core.scoring import InputError, load_questions

    (tmp_path / "questions.jsonl").write_text('{"id": "q1"}\n{"id": "q1"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="duplicate question id") as scorer:
        load_questions(tmp_path)
    with pytest.raises(EvalpackError, match="duplicate question id") as layout:
        PackLayout(tmp_path).read_records()
    assert str(layout.value).startswith(str(scorer.value))
