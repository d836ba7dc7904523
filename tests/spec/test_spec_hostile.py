"""Hostile and careless specs (issue 17): each is refused while the spec is read, with one
EvalpackError that names the file, the line, the key path and the limit, never a traceback, a hang
or runaway work; and generated values stay within the declared min/max after rounding."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb
import jsonschema
import pytest
import sqlglot
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_spec import BASE, BOOKS, edit, line_of  # the valid spec its refusals edit, one change each

from evalpack.build import write_rotations
from evalpack.core.errors import EvalpackError, SpecError
from evalpack.data.plan import plan_pack
from evalpack.data.tables import connect_tables
from evalpack.spec.grammar import (
    MAX_ALIAS_VALUES,
    MAX_DEPTH,
    MAX_NAME_LENGTH,
    MAX_ROTATION_ROWS,
    MAX_SPEC_BYTES,
    MAX_TABLE_ROWS,
)
from evalpack.spec.model import Spec
from evalpack.spec.reader import parse_spec

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
FILE = "hostile.yaml"


def refusal(text: str) -> str:
    """The one-line message parse_spec refuses ``text`` with."""
    with pytest.raises(EvalpackError) as info:
        parse_spec(text, file=FILE)
    assert isinstance(info.value, SpecError)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    assert len(message) < 600, message
    return message


def test_base_spec_is_valid() -> None:
    """Each refusal below is for its one change, not for something wrong in the spec it edits."""
    assert isinstance(parse_spec(BASE, file=FILE), Spec)


# --------------------------------------------------------------------------- YAML aliases


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The 'billion laughs': each level lists the previous one ``width`` times (9**9 values)."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\ntables: *a{levels - 1}\n"


def test_alias_bomb_is_refused_before_it_expands() -> None:
    text = alias_bomb()
    assert len(text) < 1500
    tracemalloc.start()
    try:
        message = refusal(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the 387,420,489 values were never made: the refusal comes from the node graph, a few KB of text
    assert peak < 20 * 2**20, f"peak {peak:,} bytes"
    assert f"{FILE}:" in message
    assert "YAML aliases would repeat more than" in message and f"{MAX_ALIAS_VALUES:,} values" in message
    assert "before expanding" in message


ALIAS_CHAIN = "".join(f"l{i}: &l{i} [{'*l' + str(i - 1) if i else 'x'}]\n" for i in range(30)) + "tables: *l29\n"


@pytest.mark.parametrize("text, says", [
    ("a: &a [1, *a]\ntables: *a\n", "the YAML alias *a refers to a mapping or list that contains it"),
    ("a: &a {b: *a}\ntables: *a\n", "the YAML alias *a refers to a mapping or list that contains it"),
    # each alias adds a level: a chain of 30 nests deeper than the limit although it repeats 30 values
    (ALIAS_CHAIN, f"YAML aliases here nest the spec more than {MAX_DEPTH} levels deep"),
], ids=["list_contains_itself", "mapping_contains_itself", "alias_chain_too_deep"])
def test_alias_cycles_and_chains_are_refused(text: str, says: str) -> None:
    assert says in refusal(text)


def test_modest_aliases_still_load() -> None:
    """Anchors for a repeated column declaration are fine: the limit is on what they expand to."""
    text = edit("      customer_id: {type: int, unique: true, min: 1}",
                "      customer_id: &key {type: int, unique: true, min: 1}").replace(
        "      order_id: {type: int, unique: true, min: 1}", "      order_id: *key", 1)
    text = text.replace("  orders:\n", "  customers_copy: &table\n    rows: 5\n    columns: {x: {type: boolean}}\n"
                        "  other_copy: *table\n  orders:\n", 1)
    spec = parse_spec(text, file=FILE)
    assert spec.table("orders").column("order_id").unique
    assert spec.table("other_copy").rows == 5


# --------------------------------------------------------------------------- one refusal per class


@dataclass(frozen=True)
class Hostile:
    id: str
    text: str
    marker: str | None  # a substring of the line the error names; None: the error names no line
    keypath: str | None  # the key path the error names; None: none
    says: tuple[str, ...]  # fragments of the message: what is wrong, the limit, what to do


def deep(n: int) -> str:
    return "[" * n + "]" * n


HOSTILE = [
    # rows: per table, the top-level default, all tables of a rotation, rows planned by an average
    Hostile("rows_per_table", edit("    rows: 120", "    rows: 1000000000"), "rows: 1000000000",
            "tables.orders.rows", ("must be at most 50,000,000 rows", "lower rows")),
    Hostile("default_rows", "rows: 60000000\n" + BASE.replace("    rows: 50\n", ""), "rows: 60000000",
            "rows", ("must be at most 50,000,000 rows",)),
    Hostile("rows_per_rotation", edit("    rows: 50\n", "    rows: 40000000\n").replace(
        "    rows: 120", "    rows: 40000001").replace(
        "  orders:\n", "  more:\n    rows: 40000000\n    columns: {x: {type: boolean}}\n  orders:\n"),
            "rows: 40000001", "tables.orders.rows",
            ("the tables hold 120,000,001 rows per rotation in all", f"a rotation holds at most {MAX_ROTATION_ROWS:,} rows",
             "lower rows")),
    Hostile("rows_from_avg_transaction_value", edit("    start_date: \"2025-02-01\"\n",
                                                    "    start_date: \"2025-02-01\"\n    avg_transaction_value: 0.01\n"
                                                    ).replace("10000.37", "1000000.37"),
            "avg_transaction_value: 0.01", "outcome_curves[0].avg_transaction_value",
            (f"a table holds at most {MAX_TABLE_ROWS:,} rows", "raise avg_transaction_value")),
    # names: case collisions, length, SQL keywords, not identifiers
    Hostile("tables_differ_by_case", edit("  orders:\n", "  Customers:\n    columns: {x: {type: boolean}}\n"
                                          "  orders:\n"), "  Customers:", "tables.Customers",
            ("table 'Customers' differs from table 'customers' (line 5) only by case", "rename one")),
    Hostile("columns_differ_by_case", edit("      refunded: {type: boolean}\n",
                                           "      refunded: {type: boolean}\n      Amount: {type: int}\n"),
            "Amount: {type: int}", "tables.orders.columns.Amount",
            ("column 'Amount' differs from column 'amount' (line 16) only by case",)),
    Hostile("long_column_name", edit("      refunded: {type: boolean}\n",
                                     "      refunded: {type: boolean}\n      " + "x" * 300 + ": {type: int}\n"),
            "x" * 300, "tables.orders.columns." + "x" * 57 + "...",
            ("the column is 300 characters long", f"limited to {MAX_NAME_LENGTH}", "shorten it")),
    Hostile("long_table_name", edit("  orders:\n", "  " + "t" * 64 + ":\n    columns: {x: {type: int}}\n"
                                    "  orders:\n"), "t" * 64, None, ("the table is 64 characters long",)),
    Hostile("long_pack_name", edit("name: shop", "name: " + "p" * 64), "name: ppp", "name",
            ("the pack name is 64 characters long", f"limited to {MAX_NAME_LENGTH}")),
    Hostile("keyword_table", edit("  orders:\n", "  select:\n    columns: {x: {type: int}}\n  orders:\n"),
            "  select:", "tables.select", ("'select' is an SQL keyword", "rename the table")),
    Hostile("keyword_column", edit("      refunded: {type: boolean}\n",
                                   "      refunded: {type: boolean}\n      order: {type: int}\n"),
            "order: {type: int}", "tables.orders.columns.order", ("'order' is an SQL keyword", "rename the column")),
    Hostile("keyword_from", edit("      segment:", "      from:"), "from: {type", "tables.customers.columns.from",
            ("'from' is an SQL keyword",)),
    Hostile("keyword_group_any_case", edit("      segment:", "      GROUP:"), "GROUP:", "tables.customers.columns.GROUP",
            ("'GROUP' is an SQL keyword",)),
    Hostile("keyword_join_word", edit("      segment:", "      left:"), "left:", "tables.customers.columns.left",
            ("'left' is an SQL keyword",)),
    Hostile("sqlglot_function_name", edit("      segment:", "      current_user:"), "current_user:",
            "tables.customers.columns.current_user", ("sqlglot does not read it as a name", "rename the column")),
    Hostile("name_with_newline", edit("      segment:", '      "segment\\n":'), 'segment\\n', "tables.customers.columns.segment\\n",
            ("is not a valid identifier",)),
    # nesting
    Hostile("deep_nesting", edit("name: shop\n", f"name: shop\ndescription: {deep(5000)}\n"), "description:", None,
            (f"nests more than {MAX_DEPTH} levels deep", "remove the extra nesting")),
    Hostile("deep_mapping", edit("name: shop\n", "name: shop\ndescription: " + "{a: " * 40 + "1" + "}" * 40 + "\n"),
            "description:", None, (f"more than {MAX_DEPTH} levels deep",)),
    # numbers: huge integers, non-finite floats, beyond a column's decimals
    Hostile("huge_int_seed", edit("seed: 11", "seed: 100000000000000000000000000"), "seed: 1", "seed",
            ("must be at most 4,294,967,295",)),
    Hostile("huge_int_min", edit("customer_id: {type: int, unique: true, min: 1}",
                                 "customer_id: {type: int, unique: true, min: 100000000000000000000000}"),
            "min: 100000000000000000000000", "tables.customers.columns.customer_id.min",
            ("beyond evalpack's limit of ±1,000,000,000,000,000",)),
    Hostile("huge_int_target", edit("target_value: 10000.37", "target_value: 100000000000000000000000000"),
            "target_value: 1000000", "outcome_curves[0].curve_points[0].target_value",
            ("beyond evalpack's limit of ±1,000,000,000,000,000",)),
    Hostile("int_of_5000_digits", edit("seed: 11", "seed: " + "9" * 5000), "seed: 999", "seed",
            ("is too long; numbers are limited to ±1,000,000,000,000,000",)),
    Hostile("huge_month_index", edit("{month: 3, target_value", "{month: 300000000, target_value"),
            "month: 300000000", "outcome_curves[0].curve_points[1].month", ("must be at most 3,612",)),
    Hostile("nan_target", edit("target_value: 10000.37", "target_value: .nan"), ".nan",
            "outcome_curves[0].curve_points[0].target_value", ("expected a finite number, got nan",)),
    Hostile("inf_max", edit("max: 5000,", "max: .inf,"), "max: .inf", "tables.orders.columns.amount.max",
            ("expected a finite number, got inf",)),
    Hostile("minus_inf_min", edit("min: 1, max: 5000", "min: -.inf, max: 5000"), "min: -.inf",
            "tables.orders.columns.amount.min", ("expected a finite number, got -inf",)),
    Hostile("nan_rate", edit("rate: 0.05", "rate: .NaN"), "rate: .NaN", "rate_curves[0].rate_points[0].rate",
            ("expected a finite number, got nan",)),
    Hostile("nan_nullable", edit("max: 5000, decimals: 2", "max: 5000, decimals: 2, nullable: .nan"), "nullable: .nan",
            "tables.orders.columns.amount.nullable", ("expected a finite number",)),
    Hostile("inf_weight", edit("choices: [a, b]}", "choices: [a, b], weights: [.inf, 0.3]}"), "weights: [.inf",
            "tables.customers.columns.segment.weights[0]", ("expected a finite number, got inf",)),
    Hostile("float_overflow", edit("target_value: 10000.37", "target_value: 1.0e+400"), "1.0e+400",
            "outcome_curves[0].curve_points[0].target_value", ("expected a finite number, got inf",)),
    Hostile("amount_beyond_decimals", edit("max: 5000, decimals: 2", "max: 10000000000, decimals: 6"),
            "max: 10000000000", "tables.orders.columns.amount.max",
            ("the largest amount a column with 6 decimals holds, ±1,000,000,000.000000",)),
    Hostile("target_beyond_decimals", edit("max: 5000, decimals: 2", "decimals: 6").replace(
        "target_value: 10000.37", "target_value: 10000000000.37"), "target_value: 1000000", "outcome_curves[0].curve_points[0]",
            ("beyond the largest amount orders.amount holds with 6 decimals",)),
    Hostile("avg_below_one_unit", edit("max: 5000, decimals: 2", "decimals: 0").replace(
        "    start_date: \"2025-02-01\"\n", "    start_date: \"2025-02-01\"\n    avg_transaction_value: 0.4\n"),
            "avg_transaction_value: 0.4", "outcome_curves[0].avg_transaction_value", ("rounds to 0",)),
    # dates
    Hostile("date_year_1", edit('start: "2025-01-01"', 'start: "0001-01-01"'), "0001-01-01",
            "tables.orders.columns.ordered_at.start", ("0001-01-01 is outside the dates evalpack accepts, "
                                                       "1900-01-01 to 2200-12-31",)),
    Hostile("date_year_9999", edit('end: "2025-06-30"', "end: 9999-12-31"), "9999-12-31",
            "tables.orders.columns.ordered_at.end", ("9999-12-31 is outside the dates",)),
    Hostile("period_year_9999", edit('{period: "2025-02", rate', '{period: "9999-12", rate'), "9999-12",
            "rate_curves[0].rate_points[0].period", ("9999-12-01 is outside the dates",)),
    Hostile("month_past_the_last_date", edit('start_date: "2025-02-01"', 'start_date: "2200-12-01"'),
            "{month: 3", "outcome_curves[0].curve_points[1].month", ("2201-02-01 is outside the dates",)),
    Hostile("impossible_date", edit('start_date: "2025-02-01"', "start_date: 2025-13-45"), "2025-13-45",
            "outcome_curves[0].start_date", ("cannot read the value '2025-13-45'",)),
    # declared bounds with no representable value
    Hostile("no_value_between_bounds", edit("      refunded: {type: boolean}\n",
                                            "      refunded: {type: boolean}\n"
                                            "      qty: {type: float, min: 0.5, max: 0.9, decimals: 0}\n"),
            "qty:", "tables.orders.columns.qty.min", ("no value with 0 decimals lies between min and max",
                                                      "round inward to 1 and 0", "widen the range")),
    Hostile("no_int_between_bounds", edit("      refunded: {type: boolean}\n",
                                          "      refunded: {type: boolean}\n      qty: {type: int, min: 2.1, max: 2.9}\n"),
            "qty:", "tables.orders.columns.qty.min", ("no value with 0 decimals lies between min and max",)),
    # the file itself
    Hostile("spec_too_large", BASE + "# " + "x" * MAX_SPEC_BYTES + "\n", None, None,
            (f"evalpack reads specs of at most {MAX_SPEC_BYTES:,} bytes",)),
    Hostile("control_character", edit("name: shop", "name: sh\x07op"), "name: sh", None,
            ("character '\\x07' is not allowed in YAML",)),
    Hostile("list_as_key", edit("  orders:\n", "  ? [a, b]\n  : {columns: {x: {type: int}}}\n  orders:\n"),
            "? [a, b]", "tables", ("a key must be a name, not a list or mapping",)),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[h.id for h in HOSTILE])
def test_hostile_spec_is_refused_with_one_clear_error(case: Hostile) -> None:
    message = refusal(case.text)
    where = f"{FILE}:{line_of(case.text, case.marker)}:" if case.marker else f"{FILE}:"
    assert message.startswith(where), message
    if case.keypath is not None:
        assert message.startswith(f"{where} {case.keypath}: "), message
    for fragment in case.says:
        assert fragment in message, message


CLI_CASES = {h.id: (h.text, h.says[0]) for h in HOSTILE if h.id in ("rows_per_table", "keyword_column")}
CLI_CASES["alias_bomb"] = (alias_bomb(), "YAML aliases would repeat more than")


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_the_cli_refuses_with_exit_2_one_line_and_no_pack(case: str, tmp_path: Path) -> None:
    text, says = CLI_CASES[case]
    spec = tmp_path / "bad.yaml"
    spec.write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(tmp_path / "pack")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.startswith(f"evalpack: error: {spec}:") and says in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no pack, no staging folder


@pytest.mark.parametrize("case", [h for h in HOSTILE if h.id in (
    "rows_per_table", "default_rows", "long_column_name", "long_table_name", "long_pack_name", "huge_int_seed")],
    ids=lambda h: h.id)
def test_the_json_schema_states_the_limits_it_can(case: Hostile) -> None:
    """The editor's JSON Schema refuses what breaks a limit it can express (rows, name length, seed)."""
    schema = json.loads((SCHEMAS / "evalpack.schema.json").read_text(encoding="utf-8"))
    assert not jsonschema.Draft202012Validator(schema).is_valid(yaml.safe_load(case.text))


# --------------------------------------------------------------------------- SQL keywords


def test_every_duckdb_keyword_is_refused_or_works_unquoted() -> None:
    """The names the loader lets through work unquoted in DuckDB and in sqlglot; the rest are refused."""
    con = duckdb.connect()
    keywords = [k for (k,) in con.execute("SELECT keyword_name FROM duckdb_keywords()").fetchall()]
    assert len(keywords) > 300
    refused = 0
    for word in keywords:
        text = edit("      segment:", f"      {word}:")
        try:
            parse_spec(text, file=FILE)
        except SpecError as exc:
            assert "SQL keyword" in str(exc), str(exc)
            refused += 1
            continue
        sql = f"SELECT {word}, SUM(t.{word}) FROM {word} AS t WHERE t.{word} > 0 GROUP BY {word} ORDER BY {word}"
        con.execute(f"CREATE OR REPLACE TABLE {word} ({word} INT)")
        con.execute(sql).fetchall()
        con.execute(sqlglot.transpile(sql, read="duckdb", write="duckdb")[0]).fetchall()
    reserved = con.execute("SELECT count(*) FROM duckdb_keywords() WHERE keyword_category = 'reserved'").fetchone()[0]
    assert refused >= reserved


# --------------------------------------------------------------------------- bounds after rounding

BOUNDS = edit("      refunded: {type: boolean}\n", """\
      refunded: {type: boolean}
      qty: {type: float, min: 0.5, max: 3.5, decimals: 0}
      price: {type: float, min: 0.001, max: 9.996, decimals: 2}
      count: {type: int, min: 0.5, max: 9.5}
      below: {type: float, max: -5.005, decimals: 2}
      below_int: {type: int, max: -5}
""")


def test_generated_values_respect_min_and_max_after_rounding(tmp_path: Path) -> None:
    spec = parse_spec(BOUNDS, file=FILE)
    orders = spec.table("orders")
    # the loader moves each bound inward to the nearest value the column holds
    assert (orders.column("qty").min, orders.column("qty").max) == (1, 3)
    assert (orders.column("price").min, orders.column("price").max) == (0.01, 9.99)
    assert (orders.column("count").min, orders.column("count").max) == (1, 9)
    assert orders.column("below").max == -5.01
    write_rotations(spec, plan_pack(spec), tmp_path, jobs=1)
    con = connect_tables(tmp_path / "rotations" / f"seed_{spec.seed}" / "tables")
    declared = {"qty": (0.5, 3.5), "price": (0.001, 9.996), "count": (0.5, 9.5), "below": (None, -5.005),
                "below_int": (None, -5), "amount": (1, 5000)}
    for column, (lo, hi) in declared.items():
        low, high, n = con.execute(f"SELECT min({column}), max({column}), count({column}) FROM orders").fetchone()
        assert n > 100
        assert lo is None or Decimal(low) >= Decimal(str(lo)), (column, low)
        assert Decimal(high) <= Decimal(str(hi)), (column, high)
    assert con.execute("SELECT count(*) FROM orders WHERE qty = 0").fetchone()[0] == 0
    assert con.execute("SELECT max(price) FROM orders").fetchone()[0] < Decimal("10")


def test_a_ledger_with_huge_bounds_still_balances(tmp_path: Path) -> None:
    """One group of thousands of lines with amounts up to 10**13: each side's sum stays exact."""
    text = BOOKS.replace("min: 0, max: 5000,", "min: 0, max: 10000000000000,")
    text = edit("    rows: 30\n", "    rows: 20000\n", base=edit("    rows: 3\n", "    rows: 1\n", base=text))
    assert text.count("max: 10000000000000,") == 2  # debit and credit
    spec = parse_spec(text, file=FILE)
    write_rotations(spec, plan_pack(spec), tmp_path, jobs=1)
    con = connect_tables(tmp_path / "rotations" / "seed_3" / "tables")
    net, top = con.execute("SELECT sum(debit) - sum(credit), greatest(max(debit), max(credit)) FROM lines").fetchone()
    assert net == 0
    assert top <= Decimal("10000000000000")


# --------------------------------------------------------------------------- random malformed specs

ODD = [
    10**30, -(10**30), 2**63, 2**64 + 1, -1, 0, 1, 0.5, -0.0, 1e308, 1e-308, math.nan, math.inf, -math.inf,
    "", " ", "ünïcødé", "名前", "\x00", "\x1b[2J", "a\nb", "select", "Order", "x" * 300, "2025-13-01",
    "0001-01-01", "9999-12-31", dt.date(1, 1, 1), dt.date(9999, 12, 31), [], {}, None, True, False,
    [[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]], {"a": {"b": {"c": [1, [2, [3]]]}}},
]


def _examples() -> list[dict]:
    docs = [yaml.safe_load(BASE)]
    for path in sorted(SCHEMAS.glob("*.yaml")):
        docs.append(yaml.safe_load(path.read_text(encoding="utf-8")))
    return docs


EXAMPLES = _examples()


def _children(node) -> list:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


@st.composite
def malformed_specs(draw) -> str:
    """An example spec with 1-4 random changes: a key deleted or renamed, a value replaced by an odd
    one, a mapping where a list belongs (or back), values shared so that the YAML holds aliases, an
    alias bomb grafted in; or the YAML text cut or spliced."""
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 4))):
        parent, node, key = None, doc, None
        for _ in range(draw(st.integers(0, 6))):
            kids = _children(node)
            if not kids:
                break
            parent, key = node, draw(st.sampled_from(kids))
            node = node[key]
        if parent is None:
            continue
        op = draw(st.sampled_from(["delete", "odd", "number", "text", "wrap", "unwrap", "rename", "share", "bomb"]))
        if op == "delete":
            del parent[key]
        elif op == "odd":
            parent[key] = copy.deepcopy(draw(st.sampled_from(ODD)))
        elif op == "number":
            parent[key] = draw(st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True)))
        elif op == "text":
            parent[key] = draw(st.text(max_size=20))
        elif op == "wrap":
            parent[key] = [node] if not isinstance(node, list) else {"x": node}
        elif op == "unwrap":
            kids = _children(node)
            parent[key] = node[kids[0]] if kids else node
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.sampled_from([f"{k}x" for k in parent] + [str(k).upper() for k in parent] + ["", "ü"]))] = \
                parent.pop(key)
        elif op == "share":  # the same object twice: safe_dump writes an anchor and an alias
            other = draw(st.sampled_from(_children(doc)))
            parent[key] = doc[other]
        elif op == "bomb":
            level: list = ["lol"] * 9
            for _ in range(draw(st.integers(1, 8))):
                level = [level] * 9
            parent[key] = level
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=draw(st.booleans()))
    cut = draw(st.sampled_from(["none", "none", "truncate", "splice"]))
    if cut == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif cut == "splice":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["&a ", "*a", "[", "{", ": ", "\t", "- ", "? ", "!!python/name:os.system", "<<: *a\n"])) + text[at:]
    return text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(malformed_specs())
def test_malformed_specs_load_or_are_refused_with_one_line(text: str) -> None:
    try:
        spec = parse_spec(text, file=FILE)
    except EvalpackError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000, str(exc)
        return
    assert isinstance(spec, Spec)
