"""The files that make a pack its own Hugging Face dataset repo: the questions as Parquet.

The card's ``configs:`` block (:func:`evalpack.pack.card.hub_configs`) points at the pack's own files: each
table's config at ``rotations/<rotation>/tables/<table>.parquet``, the ``questions`` config at
``data/questions/<split>.parquet``, written here with the pack and attested with the rest. ``datasets``
picks one reader for a whole repo from its first config's files, so the questions are Parquet too
(``questions.jsonl`` stays the pack's own form). So ``load_dataset(PACK_DIR, "orders")`` works on the
folder as built, and publishing uploads exactly the pack's files.

Questions in Parquet (one schema for every answer type): ``expected_answer`` is the JSON text of
the answer on that split's rotation (exactly as ``questions.jsonl`` has it, so nothing is lost), and
beside it one typed column per answer type, filled only for its own type and null elsewhere:
``expected_number`` (float64), ``expected_integer`` (int64), ``expected_string`` (string). The other
columns are the questions.jsonl fields. A holdout question of a public pack has no gold SQL and no
answer there (null), and its ``commitment``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": True, "write_statistics": True}

QUESTION_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("question", pa.string()),
    ("evidence", pa.string()),
    ("paraphrases", pa.list_(pa.string())),
    ("answerable", pa.bool_()),
    ("unanswerable_reason", pa.string()),
    ("gold_sql", pa.string()),
    ("answer_type", pa.string()),
    ("round_decimals", pa.int64()),
    ("expected_answer", pa.string()),
    ("expected_number", pa.float64()),
    ("expected_integer", pa.int64()),
    ("expected_string", pa.string()),
    ("kind", pa.string()),
    ("difficulty", pa.string()),
    ("skills", pa.list_(pa.string())),
    ("split", pa.string()),
    ("question_sha256", pa.string()),
    ("tags", pa.list_(pa.string())),
    ("key", pa.string()),
    ("orphan_rows", pa.string()),
    ("commitment", pa.string()),
])


def question_row(record: dict, rotation: str | None) -> dict:
    """One question as a row of the questions config (with ``rotation``'s answer when answers are rotated)."""
    value = record.get("expected_answer")
    if rotation is not None and isinstance(value, dict):
        value = value[rotation]
    kind = record.get("answer_type")
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return {
        "id": record["id"],
        "question": record["question"],
        "evidence": record.get("evidence"),
        "paraphrases": [str(p) for p in record.get("paraphrases") or []],
        "answerable": record.get("answerable") is not False,
        "unanswerable_reason": record.get("unanswerable_reason"),
        "gold_sql": record.get("gold_sql"),
        "answer_type": kind,
        "round_decimals": record.get("round_decimals"),
        "expected_answer": None if value is None else json.dumps(value, ensure_ascii=False),
        "expected_number": float(value) if kind == "number" and (is_int or isinstance(value, float)) else None,
        "expected_integer": value if kind == "integer" and is_int else None,
        "expected_string": value if kind == "string" and isinstance(value, str) else None,
        "kind": record.get("kind"),
        "difficulty": record.get("difficulty"),
        "skills": [str(s) for s in record.get("skills") or []],
        "split": record.get("split"),
        "question_sha256": record.get("question_sha256"),
        "tags": [str(t) for t in record.get("tags") or []],
        "key": record.get("key"),
        "orphan_rows": record.get("orphan_rows"),
        "commitment": record.get("commitment"),
    }


def questions_parquet(records: list[dict], rotation: str | None = None) -> bytes:
    """The questions of one split as Parquet bytes (deterministic for a given pyarrow)."""
    rows = [question_row(r, rotation) for r in records]
    table = pa.Table.from_pylist(rows, schema=QUESTION_SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **PARQUET_OPTIONS)
    return buffer.getvalue()




def write_questions_parquet(pack: Path, records: list[dict], splits: list[tuple[str, str | None]]) -> None:
    """The questions config's files in ``pack``: one per (repo path, rotation whose answers it holds, or
    None for shared answers)."""
    for path, rotation in splits:
        target = Path(pack) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(questions_parquet(records, rotation))
