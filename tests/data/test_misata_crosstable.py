"""Misata 0.9.8's cross-table schema features (issue 19 point 5): each builds unchanged, with foreign keys
that reference their parents, or `evalpack build` refuses it with exit 2 and one message naming the key
path and what to write instead. Where the message says what to write, the rewritten spec builds and holds
it. Misata's shorthands build as Misata builds them: a foreign key's `references:` alone is its relationship,
and a relationship's `min_children: N` gives every parent at least N children (per_parent `{"N+": 1.0}`).
No Misata here: benchmarks/misata_crosstable.py runs these specs through `misata evalpack` too."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_spec import SCHEMA_FILE, edit

import evalpack.spec.reader as spec_module
from evalpack.cli import main
from evalpack.core.errors import SpecError
from evalpack.data.tables import connect_tables
from evalpack.spec.model import ChildCount, PerParent, Relationship
from evalpack.spec.reader import parse_spec

# Misata's evalpack format only (no evalpack extension), so `misata evalpack` reads each case as it is.
BASE = """\
name: crosstable
seed: 7
tables:
  customers:
    rows: 30
    columns:
      customer_id: {type: int, unique: true, min: 1, max: 100000}
      segment: {type: categorical, choices: [a, b]}
  orders:
    rows: 90
    columns:
      order_id: {type: int, unique: true, min: 1, max: 1000000}
      customer_id: {type: foreign_key}
      amount: {type: float, min: 5, max: 900, decimals: 2}
relationships:
  - customers.customer_id -> orders.customer_id
"""

# Chains, two parents of one table, two keys to one parent, a text (uuid) parent key, a self-reference.
GRAPH = """\
name: crosstable_graph
seed: 7
tables:
  customers:
    rows: 20
    columns:
      customer_id: {type: int, unique: true, min: 1, max: 100000}
  products:
    rows: 15
    columns:
      sku: {type: text, text_type: uuid, unique: true}
  orders:
    rows: 60
    columns:
      order_id: {type: int, unique: true, min: 1, max: 1000000}
      customer_id: {type: foreign_key}
      ship_to_id: {type: foreign_key}
  order_items:
    rows: 150
    columns:
      item_id: {type: int, unique: true, min: 1, max: 1000000}
      order_id: {type: foreign_key}
      sku: {type: foreign_key}
  employees:
    rows: 25
    columns:
      employee_id: {type: int, unique: true, min: 1, max: 1000}
      manager_id: {type: foreign_key}
relationships:
  - customers.customer_id -> orders.customer_id
  - {parent: customers.customer_id, child: orders.ship_to_id}
  - {parent_table: orders, parent_key: order_id, child_table: order_items, child_key: order_id}
  - {parent: products, parent_col: sku, child: order_items, child_col: sku}
  - employees.employee_id → employees.manager_id
"""

REL = "  - customers.customer_id -> orders.customer_id\n"
FK = "customer_id: {type: foreign_key}"
KEY = "customer_id: {type: int, unique: true, min: 1, max: 100000}"


def rel(mapping: str) -> str:
    """BASE with its relationship written as ``mapping``."""
    return edit(REL, f"  - {mapping}\n", base=BASE)


def fk(column: str, relationships: bool = True) -> str:
    """BASE with orders.customer_id written as ``column``, without relationships: unless ``relationships``."""
    text = edit(FK, column, base=BASE)
    return text if relationships else edit("relationships:\n" + REL, "", base=text)


def constraint(line: str) -> str:
    """BASE with a credit column on customers and ``line`` under orders' constraints:."""
    text = edit("      segment: {type: categorical, choices: [a, b]}\n",
                "      segment: {type: categorical, choices: [a, b]}\n      credit: {type: float, min: 100, max: 1000}\n",
                base=BASE)
    return edit(AMOUNT, AMOUNT + f"    constraints:\n      - {line}\n", base=text)


AMOUNT = "      amount: {type: float, min: 5, max: 900, decimals: 2}\n"
MIN_CHILDREN = "{parent: customers.customer_id, child: orders.customer_id, min_children: %s}"


def references_alone(text: str, parents: dict[str, str]) -> str:
    """``text`` without relationships:, each foreign key `column` of ``parents`` naming its parent by
    `references:` instead (Misata's shorthand)."""
    for column, parent in parents.items():
        text = edit(f"      {column}: {{type: foreign_key}}", f"      {column}: {{type: foreign_key, references: {parent}}}",
                    base=text)
    return text[:text.index("relationships:\n")]


# GRAPH with every foreign key naming its parent by `references:` alone.
REFERENCES_GRAPH = references_alone(GRAPH, {
    "customer_id": "customers.customer_id", "ship_to_id": "customers.customer_id", "order_id": "orders.order_id",
    "sku": "products.sku", "manager_id": "employees.employee_id"})


@dataclass(frozen=True)
class Case:
    id: str
    feature: str  # Misata's feature, as the table in the report names it
    text: str
    keypath: str | None = None  # None: builds; else the key path the refusal names
    says: str = ""  # a fragment of the refusal: what to write instead
    instead: tuple[str, str] | None = None  # (old, new): the spec as the refusal says to write it


ONE_TO_ONE = "per_parent:\n  - {child: orders.customer_id, counts: {0: 0.5, 1: 0.5}}\n"
CASES = (
    Case("arrow", "relationship `parent.key -> child.key`", BASE),
    Case("arrow_unicode", "relationship with the arrow `→`", edit("->", "→", base=BASE)),
    Case("dotted", "relationship {parent: t.key, child: t.key}",
         rel("{parent: customers.customer_id, child: orders.customer_id}")),
    Case("model_names", "relationship {parent_table, parent_key, child_table, child_key}",
         rel("{parent_table: customers, parent_key: customer_id, child_table: orders, child_key: customer_id}")),
    Case("col_names", "relationship {parent, parent_col, child, child_col}",
         rel("{parent: customers, parent_col: customer_id, child: orders, child_col: customer_id}")),
    Case("dotted_and_key", "relationship `parent: t.key` and `parent_key: key` both",
         rel("{parent: customers.customer_id, parent_key: customer_id, child: orders.customer_id}")),
    Case("dotted_key_conflict", "relationship `parent: t.a` with `parent_key: b`",
         rel("{parent: customers.segment, parent_key: customer_id, child: orders.customer_id}"),
         "relationships[0].parent_key", "write the key once, as `parent: customers.<column>`"),
    Case("default_keys", "relationship keys left out (parent `id`, child `<parent>_id`)",
         edit(KEY, "id: {type: int, unique: true, min: 1, max: 100000}",
              base=edit(FK, "customers_id: {type: foreign_key}", base=rel("{parent: customers, child: orders}")))),
    Case("primary_key", "parent key declared `primary_key: true`", edit(KEY, "customer_id: {type: int, primary_key: true}",
                                                                       base=BASE)),
    Case("graph", "chain, two parents, two keys to one parent, text parent key, self-reference", GRAPH),
    Case("options_off", "temporal/filters/partition_by/min_children/parent_time at their off values",
         rel("{parent: customers.customer_id, child: orders.customer_id, temporal: false, temporal_constraint: false,"
             " filters: {}, partition_by: [], min_children: 0, parent_time: null}")),
    Case("temporal", "relationship `temporal: true`",
         rel("{parent: customers.customer_id, child: orders.customer_id, temporal: true}"),
         "relationships[0].temporal", "remove it or write `temporal: false`"),
    Case("temporal_constraint", "relationship `temporal_constraint: true`",
         rel("{parent: customers.customer_id, child: orders.customer_id, temporal_constraint: true}"),
         "relationships[0].temporal_constraint", "write `temporal_constraint: false`"),
    Case("parent_time", "relationship `parent_time`/`child_time`/`child_time_table` (temporal eligibility)",
         rel("{parent: customers.customer_id, child: orders.customer_id, parent_time: signed_up_at}"),
         "relationships[0].parent_time", "temporal eligibility); remove it"),
    Case("filters", "relationship `filters: {column: value}`",
         rel("{parent: customers.customer_id, child: orders.customer_id, filters: {segment: a}}"),
         "relationships[0].filters", "from every row of customers, not from the rows a filter keeps; remove it"),
    Case("partition_by", "relationship `partition_by: [columns]`",
         rel("{parent: customers.customer_id, child: orders.customer_id, partition_by: [segment]}"),
         "relationships[0].partition_by", "remove it or write `partition_by: []`"),
    Case("min_children", "relationship `min_children: 1`", rel(MIN_CHILDREN % 1)),
    Case("min_children_3", "relationship `min_children: 3` (30 parents, 90 children: 3 each)", rel(MIN_CHILDREN % 3)),
    Case("min_children_too_many", "relationship `min_children: 4` (30 parents, 90 children)",
         rel(MIN_CHILDREN % 4), "relationships[0].min_children",
         "min_children: 4 asks for 120 orders rows (4 for each of the 30 rows of customers), but orders has 90; "
         "lower min_children (at most 3 fits)"),
    Case("min_children_nulls", "relationship `min_children: 2` with `nulls: 31` (59 children with a parent)",
         rel(MIN_CHILDREN.replace("}", ", nulls: 31}") % 2), "relationships[0].min_children",
         "but orders has 59 with a parent; lower min_children (at most 1 fits)"),
    Case("min_children_and_per_parent", "relationship `min_children` and per_parent for the same key",
         rel(MIN_CHILDREN % 1) + 'per_parent:\n  - {child: orders.customer_id, counts: {"2+": 1.0}}\n',
         "relationships[0].min_children", "relationships[0].min_children and per_parent[0] both declare the children "
         "per parent of orders.customer_id; keep one"),
    Case("composite", "composite key (`parent_key: [a, b]`)",
         rel("{parent_table: customers, parent_key: [customer_id, segment], child_table: orders, child_key: customer_id}"),
         "relationships[0].parent_key", "composite keys are not supported by evalpack"),
    Case("one_to_one_key", "relationship `one_to_one:` / `cardinality:` / `on_delete:` (not Misata keys)",
         rel("{parent: customers.customer_id, child: orders.customer_id, one_to_one: true}"),
         "relationships[0].one_to_one", "unknown relationship key 'one_to_one'"),
    Case("parent_not_unique", "parent key without `unique`", edit(KEY, "customer_id: {type: int, min: 1, max: 100000}",
                                                                  base=BASE),
         "relationships[0]", "must be `unique: true`"),
    Case("references", "foreign key column `references: t.key` (no relationships: entry)",
         fk("customer_id: {type: foreign_key, references: customers.customer_id}", relationships=False)),
    Case("references_graph", "`references:` alone: chain, two keys to one parent, text parent key, self-reference", REFERENCES_GRAPH),
    Case("references_unknown", "`references:` naming a table that does not exist",
         fk("customer_id: {type: foreign_key, references: custmers.customer_id}", relationships=False),
         "tables.orders.columns.customer_id.references", "unknown table 'custmers'; did you mean 'customers'?"),
    Case("references_restated", "`references:` restating the column's relationship",
         fk("customer_id: {type: foreign_key, references: customers.customer_id}")),
    Case("references_conflict", "`references:` naming another parent than the relationship",
         fk("customer_id: {type: foreign_key, references: customers.segment}"),
         "tables.orders.columns.customer_id.references", "disagrees with the relationship"),
    Case("references_on_int", "`references:` on a column that is not a foreign key",
         fk("customer_id: {type: int, references: customers.customer_id}", relationships=False),
         "tables.orders.columns.customer_id.references",
         "a column with a parent is a foreign key; write `customer_id: {type: foreign_key, references: "
         "customers.customer_id}` (or `- customers.customer_id -> orders.customer_id` under relationships:)",
         ("{type: int, references:", "{type: foreign_key, references:")),
    Case("foreign_key_key", "column `foreign_key: {table, column}` (Misata's dict-schema form)",
         fk("customer_id: {type: int, foreign_key: {table: customers, column: customer_id}}", relationships=False),
         "tables.orders.columns.customer_id.foreign_key",
         "write `customer_id: {type: foreign_key, references: customers.customer_id}` (or `- customers.customer_id "
         "-> orders.customer_id` under relationships:), else remove `foreign_key`",
         ("{type: int, foreign_key: {table: customers, column: customer_id}}",
          "{type: foreign_key, references: customers.customer_id}")),
    Case("fk_unique", "one-to-one: `unique: true` on a foreign key",
         edit("rows: 90", "rows: 15", base=fk("customer_id: {type: foreign_key, unique: true}")),
         "tables.orders.columns.customer_id.unique", "with counts 0 and 1 only",
         (", unique: true}", "}"), ),
    Case("sampling_uniform", "foreign key `sampling: uniform`", fk("customer_id: {type: foreign_key, sampling: uniform}")),
    Case("fk_off", "foreign key `unique: false`, `null_rate: 0`, `nullable: false`",
         fk("customer_id: {type: foreign_key, unique: false, null_rate: 0, nullable: false}")),
    Case("sampling_pareto", "foreign key `sampling: pareto` / `alpha` / `popularity_sigma` (fan-out)",
         fk("customer_id: {type: foreign_key, sampling: pareto, alpha: 1.2}"),
         "tables.orders.columns.customer_id.sampling", "`per_parent: [{child: orders.customer_id, counts: {...}}]`"),
    Case("popularity_sigma", "foreign key `popularity_sigma`", fk("customer_id: {type: foreign_key, popularity_sigma: 0.5}"),
         "tables.orders.columns.customer_id.popularity_sigma", "evalpack draws each child's parent uniformly"),
    Case("null_rate", "foreign key `null_rate: 0.1`", fk("customer_id: {type: foreign_key, null_rate: 0.1}"),
         "tables.orders.columns.customer_id.null_rate", "write `nulls: 9` (0.1 of 90 rows) there",
         (", null_rate: 0.1}", "}"), ),
    Case("nullable", "foreign key `nullable: true`", fk("customer_id: {type: foreign_key, nullable: true}"),
         "tables.orders.columns.customer_id.nullable", "write `nulls: N` there"),
    Case("lte_parent", "constraint `lte_parent` (child column <= parent column)",
         constraint("{name: cap, type: lte_parent, column: amount, column_b: credit}"),
         "tables.orders.constraints[0].type", "constraint type `lte_parent` is not supported by evalpack (line 17); "
         "only balanced_ledger is: evalpack does not bound a child's value by its parent's row"),
    Case("sum_lte_parent", "constraint `sum_lte_parent` (children's sum <= parent column)",
         constraint("{name: cap, type: sum_lte_parent, column: amount, column_b: credit}"),
         "tables.orders.constraints[0].type", "constraint type `sum_lte_parent` is not supported by evalpack "
         "(line 17); only balanced_ledger is: evalpack does not bound the sum of a parent's children"),
)
BY_ID = {c.id: c for c in CASES}
# The spec each refusal's "write instead" asks for, beyond removing the key: the relationship or per_parent.
REWRITES = {
    "fk_unique": lambda text: text + ONE_TO_ONE,
    "null_rate": lambda text: edit(REL, "  - {parent: customers.customer_id, child: orders.customer_id, nulls: 9}\n",
                                   base=text),
}


def build(tmp_path: Path, text: str, capsys) -> tuple[int, str, Path]:
    """`evalpack build` of ``text`` with one rotation: its exit code, its stderr and the pack's folder."""
    spec, out = tmp_path / "spec.yaml", tmp_path / "pack"
    spec.write_text(text)
    code = main(["build", str(spec), "-o", str(out), "--rotations", "1", "--force", "--jobs", "1"])
    return code, capsys.readouterr().err, out


def tables(out: Path):
    return connect_tables(next((out / "rotations").iterdir()) / "tables")


def dangling(con, text: str) -> dict[str, int]:
    """child.column -> child rows whose non-NULL key is no parent's key, for every relationship of ``text``."""
    return {f"{r.child_table}.{r.child_column}": con.execute(
        f"SELECT count(*) FROM {r.child_table} c WHERE c.{r.child_column} IS NOT NULL AND c.{r.child_column} "
        f"NOT IN (SELECT {r.parent_column} FROM {r.parent_table})").fetchone()[0]
        for r in parse_spec(text).relationships}


@pytest.mark.parametrize("case", [c for c in CASES if c.keypath is None], ids=lambda c: c.id)
def test_builds_with_keys_that_reference_parents(case: Case, tmp_path: Path, capsys) -> None:
    code, err, out = build(tmp_path, case.text, capsys)
    assert code == 0, err
    con = tables(out)
    found = dangling(con, case.text)
    assert found and set(found.values()) == {0}, found
    for r in parse_spec(case.text).relationships:
        nulls, rows = con.execute(f"SELECT count(*) - count({r.child_column}), count(*) FROM {r.child_table}").fetchone()
        assert nulls == 0 and rows == parse_spec(case.text).table(r.child_table).rows


def test_graph_reads_every_relationship_as_written() -> None:
    spec = parse_spec(GRAPH)
    assert [(r.parent_table, r.parent_column, r.child_table, r.child_column) for r in spec.relationships] == [
        ("customers", "customer_id", "orders", "customer_id"), ("customers", "customer_id", "orders", "ship_to_id"),
        ("orders", "order_id", "order_items", "order_id"), ("products", "sku", "order_items", "sku"),
        ("employees", "employee_id", "employees", "manager_id")]
    dotted_and_key = parse_spec(BY_ID["dotted_and_key"].text).relationships[0]
    assert (dotted_and_key.parent_table, dotted_and_key.parent_column) == ("customers", "customer_id")


@pytest.mark.parametrize("case", [c for c in CASES if c.keypath is not None], ids=lambda c: c.id)
def test_refused_naming_the_key_and_what_to_write(case: Case, tmp_path: Path, capsys) -> None:
    code, err, out = build(tmp_path, case.text, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "spec.yaml:" in lines[0] and f": {case.keypath}: " in lines[0], lines[0]
    assert case.says in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize("case_id", ["fk_unique", "null_rate", "references_on_int", "foreign_key_key"])
def test_what_the_refusal_says_to_write_builds_and_holds(case_id: str, tmp_path: Path, capsys) -> None:
    case = BY_ID[case_id]
    text = edit(*case.instead, base=case.text)
    text = REWRITES.get(case_id, lambda t: t)(text)
    code, err, out = build(tmp_path, text, capsys)
    assert code == 0, err
    con = tables(out)
    assert set(dangling(con, text).values()) == {0}
    counts = [n for (n,) in con.execute("SELECT count(o.customer_id) FROM customers c LEFT JOIN orders o "
                                        "ON o.customer_id = c.customer_id GROUP BY c.customer_id").fetchall()]
    nulls = con.execute("SELECT count(*) - count(customer_id) FROM orders").fetchone()[0]
    if case_id == "fk_unique":
        assert max(counts) == 1 and sum(counts) == 15
    elif case_id == "null_rate":
        assert nulls == 9
    else:
        assert sum(counts) == 90 and nulls == 0


def test_console_script_exits_2_on_a_refused_feature(tmp_path: Path) -> None:
    """The installed command, not only main(): exit code 2, one line on stderr, nothing on stdout."""
    exe = shutil.which("evalpack")
    assert exe, "the `evalpack` console script is not installed"
    spec = tmp_path / "spec.yaml"
    spec.write_text(BY_ID["temporal"].text)
    done = subprocess.run([exe, "build", str(spec), "-o", str(tmp_path / "pack"), "--rotations", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert "relationships[0].temporal: `temporal` is not supported by evalpack" in done.stderr


def test_references_are_checked_against_relationships_read_once(monkeypatch) -> None:
    """`references` on many columns reads relationships: once in all, not once per column (which a hostile
    spec would turn into minutes)."""
    columns = "".join(f"      k{i}: {{type: foreign_key, references: customers.customer_id}}\n" for i in range(300))
    rels = "".join(f"  - customers.customer_id -> orders.k{i}\n" for i in range(300))
    text = edit("      customer_id: {type: foreign_key}\n", columns, base=edit(REL, rels, base=BASE))
    calls = []
    read = spec_module._read_relationship
    monkeypatch.setattr(spec_module, "_read_relationship", lambda *args: calls.append(1) or read(*args))
    assert len(parse_spec(text).relationships) == 300
    assert len(calls) == 300


def test_references_alone_reads_as_relationships() -> None:
    """A foreign key's `references:` without a relationships: entry is its relationship (Misata's rule), on the
    line of `references`; with one, the entry is kept and `references` only restates it."""
    spec = parse_spec(REFERENCES_GRAPH)
    lines = REFERENCES_GRAPH.splitlines()
    line = {name: next(i for i, text in enumerate(lines, 1) if f"{name}: {{type: foreign_key" in text)
            for name in ("customer_id", "ship_to_id", "order_id", "sku", "manager_id")}
    assert spec.relationships == tuple(Relationship(r.parent_table, r.parent_column, r.child_table, r.child_column,
                                                    line[r.child_column]) for r in parse_spec(GRAPH).relationships)
    assert spec.table("orders").column("customer_id").references == ("customers", "customer_id")
    restated = parse_spec(BY_ID["references_restated"].text)
    assert restated.relationships == parse_spec(BASE).relationships


def test_references_with_an_entry_elsewhere_adds_only_the_missing_relationship() -> None:
    """relationships: declares one foreign key (with its nulls), `references` the other."""
    text = edit(FK, "customer_id: {type: foreign_key}\n      ship_to_id: {type: foreign_key, references: "
                "customers.customer_id}", base=edit(REL, "  - {parent: customers.customer_id, child: orders.customer_id, "
                                                          "nulls: 4}\n", base=BASE))
    rels = parse_spec(text).relationships
    assert [(r.child_column, r.nulls) for r in rels] == [("customer_id", 4), ("ship_to_id", 0)]


@pytest.mark.parametrize("relationship, least", [
    (MIN_CHILDREN % 1, 1), (MIN_CHILDREN % 2, 2), (MIN_CHILDREN % 3, 3),
    (MIN_CHILDREN.replace("}", ", nulls: 30}") % 2, 2),  # 60 children with a parent: exactly 2 each
    ("{parent: customers.customer_id, child: orders.customer_id, min_children: 2, nulls: 20, orphans: 10}", 2),
])
def test_min_children_builds_with_every_parent_at_least_n(relationship: str, least: int, tmp_path: Path,
                                                         capsys) -> None:
    text = rel(relationship)
    spec = parse_spec(text)
    assert spec.per_parent == (PerParent("orders", "customer_id", (ChildCount(least, True, 1.0),),
                                         spec.relationships[0].line, top=5),)
    code, err, out = build(tmp_path, text, capsys)
    assert code == 0, err
    con = tables(out)
    counts = [n for (n,) in con.execute("SELECT count(o.customer_id) FROM customers c LEFT JOIN orders o "
                                        "ON o.customer_id = c.customer_id GROUP BY c.customer_id").fetchall()]
    rel_ = spec.relationships[0]
    assert len(counts) == 30 and min(counts) >= least, sorted(counts)
    assert sum(counts) == 90 - rel_.nulls - rel_.orphans
    assert con.execute("SELECT count(*) - count(customer_id) FROM orders").fetchone()[0] == rel_.nulls


def test_min_children_beyond_rows_the_planner_decides_is_refused_by_the_planner(tmp_path: Path, capsys) -> None:
    """When an outcome curve decides the child table's rows (avg_transaction_value), the spec cannot count
    them; the planner refuses at the relationship's line, exit 2, before any pack is written."""
    text = rel(MIN_CHILDREN % 2)
    text = edit(AMOUNT, AMOUNT + '      ordered_at: {type: date, start: "2025-01-01", end: "2025-03-31"}\n', base=text)
    text += ("outcome_curves:\n  - table: orders\n    column: amount\n    time_column: ordered_at\n"
             '    start_date: "2025-01-01"\n    avg_transaction_value: 500\n    curve_points:\n'
             "      - {month: 1, target_value: 5000}\n      - {month: 3, target_value: 6000}\n")
    assert parse_spec(text).per_parent[0].counts == (ChildCount(2, True, 1.0),)
    code, err, out = build(tmp_path, text, capsys)
    assert code == 2, err
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "min_children" in t)
    assert err.strip().splitlines() == [err.strip()] and f"spec.yaml:{line}: " in err, err
    assert "orders rows cannot give 30 customers exactly these counts" in err, err
    assert not out.exists()


@pytest.mark.parametrize("value", ["true", "0.3", "0.9", "1", "yes please", "[1]"])
def test_a_nullable_foreign_key_is_refused_where_the_column_is_read(value: str) -> None:
    """`nullable` asking for NULLs on a foreign key is refused by the column's reader (_fk_column_keys) with
    what to write, so no foreign key reaches the relationship checks nullable (which no longer look)."""
    with pytest.raises(SpecError) as caught:
        parse_spec(fk(f"customer_id: {{type: foreign_key, nullable: {value}}}"))
    assert caught.value.path == "tables.orders.columns.customer_id.nullable"
    assert "`nullable` on foreign key orders.customer_id is not supported by evalpack" in str(caught.value)
    assert "write `nulls: N` there" in str(caught.value)


@pytest.mark.parametrize("value", ["false", "0", "0.0", "null"])
def test_a_foreign_key_nullable_at_its_off_value_reads_as_not_nullable(value: str) -> None:
    text = fk(f"customer_id: {{type: foreign_key, nullable: {value}}}")
    if value == "null":  # not a number nor true/false: refused as any column's nullable: null is
        with pytest.raises(SpecError, match="expected a number"):
            parse_spec(text)
        return
    assert parse_spec(text).table("orders").column("customer_id").nullable == 0


def test_other_constraint_types_are_refused_by_type_also_at_top_level() -> None:
    text = edit("relationships:", "constraints:\n  - {table: orders, type: lte_parent, column: amount, column_b: credit}\n"
                "relationships:", base=BY_ID["lte_parent"].text.replace("    constraints:\n      - {name: cap, type: "
                                                                         "lte_parent, column: amount, column_b: credit}\n", ""))
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    assert caught.value.path == "constraints[0].type" and "`lte_parent` is not supported" in str(caught.value)
    with pytest.raises(SpecError, match="constraint type `check` is not supported by evalpack .*; only "
                                        "balanced_ledger is: remove the constraint"):
        parse_spec(constraint("{type: check, column: amount}"))


def _schema_errors(text: str) -> list[str]:
    class Strings(yaml.SafeLoader):  # dates stay strings, as the editor sees them
        pass
    Strings.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
                                       for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    schema = jsonschema.Draft202012Validator(__import__("json").loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    return [f"{list(e.absolute_path)}: {e.message}" for e in schema.iter_errors(yaml.load(text, Loader=Strings))]


@pytest.mark.parametrize("case", [c for c in CASES if c.keypath is None], ids=lambda c: c.id)
def test_the_json_schema_accepts_what_builds(case: Case) -> None:
    assert _schema_errors(case.text) == []


@pytest.mark.parametrize("case_id", ["temporal", "temporal_constraint", "parent_time", "filters", "partition_by",
                                     "composite", "one_to_one_key", "references_on_int", "foreign_key_key", "fk_unique",
                                     "sampling_pareto", "popularity_sigma", "null_rate", "nullable", "lte_parent",
                                     "sum_lte_parent"])
def test_the_json_schema_rejects_the_refused_forms_it_can_see(case_id: str) -> None:
    assert _schema_errors(BY_ID[case_id].text)
