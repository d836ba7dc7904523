"""Compare query results with expected answers, for gold SQL and for candidates.

This module uses only the standard library and duckdb: it is copied byte for byte into
every pack as ``verify.py``, and ``evalpack score`` / ``evalpack verify`` run the same code.
"""

from __future__ import annotations

import json
import math
import sys
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import duckdb

COMPARISON_RULE = (
    "A scalar question expects exactly one row with one column. Numbers are compared as exact "
    "decimals after rounding both sides half-to-even at the question's round_decimals (negative "
    "zero is zero); integers must be equal as numbers with no fractional part; strings must be "
    "equal exactly; NULL never equals a value. A question passes only when it matches on every "
    "rotation."
)


def _as_decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return None if not math.isfinite(value) else Decimal(repr(value))
    return None


def normalize(value: Any, answer_type: str, round_decimals: int | None) -> Any:
    """The comparable form of one value, or None when it cannot equal any answer."""
    if answer_type == "string":
        return value if isinstance(value, str) else None
    number = _as_decimal(value)
    if number is None:
        return None
    if answer_type == "integer":
        return int(number) if number == number.to_integral_value() else None
    try:
        rounded = number.quantize(Decimal(1).scaleb(-(round_decimals or 0)), rounding=ROUND_HALF_EVEN)
    except InvalidOperation:
        return None
    return rounded + 0 if rounded else Decimal(0).quantize(rounded)


def scalar_matches(expected: Any, answer_type: str, round_decimals: int | None, rows: list[tuple]) -> bool:
    """True when ``rows`` is one row of one value equal to ``expected`` under the rule."""
    if len(rows) != 1 or len(rows[0]) != 1:
        return False
    got = normalize(rows[0][0], answer_type, round_decimals)
    want = normalize(expected, answer_type, round_decimals)
    return got is not None and want is not None and got == want


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of an observed value (decimals keep their digits as strings)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def observed(rows: list[tuple]) -> Any:
    """What a result looked like, for reports: the scalar when there is one, else the rows."""
    if len(rows) == 1 and len(rows[0]) == 1:
        return jsonable(rows[0][0])
    return jsonable([list(r) for r in rows[:5]])


def connect_tables(tables_dir: Path, fmt: str = "parquet", con: duckdb.DuckDBPyConnection | None = None,
                   types: dict | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with one view per table file in ``tables_dir``.

    ``types`` (table -> {column: duckdb type}) pins CSV column types so CSV and Parquet agree.
    """
    con = con or duckdb.connect(":memory:")
    for path in sorted(Path(tables_dir).glob(f"*.{fmt}")):
        name = path.stem
        quoted = '"' + name.replace('"', '""') + '"'
        location = str(path).replace("'", "''")
        if fmt == "parquet":
            source = f"read_parquet('{location}')"
        else:
            cols = (types or {}).get(name)
            if cols:
                spec = ", ".join(f"'{c}': '{t}'" for c, t in cols.items())
                source = f"read_csv('{location}', header=true, columns={{{spec}}})"
            else:
                source = f"read_csv('{location}', header=true)"
        con.execute(f"CREATE VIEW {quoted} AS SELECT * FROM {source}")
    return con


def load_questions(pack: Path) -> list[dict]:
    """The question records of a pack."""
    with open(Path(pack) / "questions.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def expected_for(record: dict, rotation: str) -> Any:
    """A question's expected answer on one rotation (shared or rotated answers)."""
    value = record["expected_answer"]
    return value[rotation] if isinstance(value, dict) else value


def rotations(pack: Path) -> list[str]:
    """The rotation folders of a pack, in seed order."""
    found = [p.name for p in (Path(pack) / "rotations").iterdir() if p.is_dir() and p.name.startswith("seed_")]
    return sorted(found, key=lambda n: int(n.split("_", 1)[1]))


def run_gold(pack: Path) -> tuple[int, int, list[str]]:
    """Rerun every gold SQL on every rotation; returns (passed, total, report lines)."""
    pack = Path(pack)
    questions = load_questions(pack)
    results = {q["id"]: [] for q in questions}
    for rotation in rotations(pack):
        con = connect_tables(pack / "rotations" / rotation / "tables")
        for q in questions:
            try:
                rows = con.execute(q["gold_sql"]).fetchall()
                ok = scalar_matches(expected_for(q, rotation), q["answer_type"], q.get("round_decimals"), rows)
                results[q["id"]].append((rotation, ok, observed(rows)))
            except duckdb.Error as exc:
                results[q["id"]].append((rotation, False, f"error: {exc}"))
        con.close()
    lines, passed = [], 0
    for q in questions:
        oks = [ok for _, ok, _ in results[q["id"]]]
        if all(oks):
            passed += 1
            lines.append(f"PASS {q['id']} {q['kind']}")
        else:
            bad = ", ".join(f"{r}={obs!r}" for r, ok, obs in results[q["id"]] if not ok)
            lines.append(f"FAIL {q['id']} {q['kind']}: expected {q['expected_answer']!r}, got {bad}")
    return passed, len(questions), lines


def main(argv: list[str] | None = None) -> int:
    """``python verify.py``: rerun every gold SQL of the pack this file sits in."""
    pack = Path(__file__).resolve().parent
    passed, total, lines = run_gold(pack)
    for line in lines:
        print(line)
    print(f"{passed}/{total} questions verify on every rotation")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
