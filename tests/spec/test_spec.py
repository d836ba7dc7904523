"""The spec format: bad specs are refused by the real CLI with file, line and key path, and nothing
is written; a Misata-format spec builds unchanged; the JSON Schema matches what the loader accepts."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import jsonschema
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import verified_records

from evalpack.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
SCHEMA_FILE = SCHEMAS / "evalpack.schema.json"

# A valid spec; every bad spec below is this text with one change.
BASE = """\
name: shop
seed: 11
rotations: 2
tables:
  customers:
    rows: 50
    columns:
      customer_id: {type: int, unique: true, min: 1}
      segment: {type: categorical, choices: [a, b]}
  orders:
    rows: 120
    columns:
      order_id: {type: int, unique: true, min: 1}
      customer_id: {type: foreign_key}
      channel: {type: categorical, choices: [web, app]}
      amount: {type: float, min: 1, max: 5000, decimals: 2}
      refunded: {type: boolean}
      ordered_at: {type: date, start: "2025-01-01", end: "2025-06-30"}
relationships:
  - {parent: customers.customer_id, child: orders.customer_id, orphans: 2, nulls: 3}
outcome_curves:
  - table: orders
    column: amount
    time_column: ordered_at
    start_date: "2025-02-01"
    curve_points:
      - {month: 1, target_value: 10000.37}
      - {month: 3, target_value: 12000.55}
group_shares:
  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.6, app: 0.4}}
rate_curves:
  - table: orders
    column: refunded
    time_column: ordered_at
    rate_points:
      - {period: "2025-02", rate: 0.05}
"""


# A valid ledger and waterfall spec, for the refusals that only the planner or the generator can find.
BOOKS = """\
name: books
seed: 3
tables:
  entries:
    rows: 3
    columns:
      entry_id: {type: int, unique: true, min: 1}
  lines:
    rows: 30
    columns:
      line_id: {type: int, unique: true, min: 1}
      entry_id: {type: foreign_key}
      debit: {type: float, min: 0, max: 5000, decimals: 2}
      credit: {type: float, min: 0, max: 5000, decimals: 2}
    constraints:
      - {type: balanced_ledger, group_by: [entry_id], debit_column: debit, credit_column: credit}
  mrr:
    rows: 40
    columns:
      movement_id: {type: int, unique: true, min: 1}
      period: {type: date, start: "2024-12-01", end: "2025-04-30"}
      movement_type: {type: categorical, choices: [new, expansion, contraction, churn]}
      amount: {type: float, min: -5000, max: 5000, decimals: 2}
relationships:
  - entries.entry_id -> lines.entry_id
waterfalls:
  - table: mrr
    starting_value: 10000.00
    points:
      - {period: "2025-01", ending_value: 10500.37}
      - {period: "2025-02", ending_value: 10200.18}
      - {period: "2025-03", ending_value: 10900.55}
"""


def line_of(text: str, marker: str) -> int:
    """The 1-based number of the one line of ``text`` that contains ``marker``."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} is on lines {hits}"
    return hits[0]


def edit(old: str, new: str, count: int = 1, base: str = BASE) -> str:
    """``base`` with the first ``count`` occurrences of ``old`` replaced (``old`` must occur)."""
    assert old in base, old
    return base.replace(old, new, count)


@dataclass(frozen=True)
class Bad:
    id: str
    text: str
    marker: str | None  # substring of the line the error must name; None: line 1
    keypath: str | None  # None: the error has no key path (e.g. YAML syntax)
    says: str  # a fragment of the specific message


BAD = [
    Bad("unknown_column_key", edit("min: 1, max: 5000", "min: 1, maxx: 5000"), "maxx: 5000",
        "tables.orders.columns.amount.maxx", "unknown column key 'maxx'; did you mean 'max'?"),
    Bad("unknown_top_key", edit("outcome_curves:", "outcome_curve:"), "outcome_curve:",
        "outcome_curve", "unknown key 'outcome_curve'; did you mean 'outcome_curves'?"),
    Bad("unknown_curve_key", edit("    time_column: ordered_at", "    time_colum: ordered_at"), "time_colum: ",
        "outcome_curves[0].time_colum", "did you mean 'time_column'?"),
    Bad("wrong_type_rows", edit("    rows: 120", "    rows: lots"), "rows: lots",
        "tables.orders.rows", "expected an integer, got the string 'lots'"),
    Bad("wrong_type_unique", edit("unique: true, min: 1}\n      segment", "unique: yes please, min: 1}\n      segment"),
        "yes please", "tables.customers.columns.customer_id.unique", "expected true or false"),
    Bad("min_greater_than_max", edit("min: 1, max: 5000", "min: 6000, max: 5000"), "min: 6000",
        "tables.orders.columns.amount.min", "min 6000 is greater than max 5000"),
    Bad("shares_do_not_sum_to_one", edit("{web: 0.6, app: 0.4}", "{web: 0.6, app: 0.5}"), "app: 0.5",
        "group_shares[0].shares", "shares must sum to 1, they sum to 1.1"),
    Bad("curve_point_outside_date_range", edit("{month: 3, target_value", "{month: 7, target_value"), "month: 7",
        "outcome_curves[0].curve_points[1]", "2025-08 is outside the time column's range 2025-01-01 to 2025-06-30"),
    Bad("rate_point_outside_date_range", edit('{period: "2025-02", rate', '{period: "2026-02", rate'), "2026-02",
        "rate_curves[0].rate_points[0]", "2026-02 is outside the time column's range"),
    Bad("foreign_key_to_missing_table", edit("parent: customers.customer_id", "parent: clients.customer_id"),
        "parent: clients", "relationships[0]", "unknown table 'clients'"),
    Bad("time_grid_on_datetime_curve_column",
        edit('ordered_at: {type: date,', 'ordered_at: {type: datetime,')
        + "time_grids:\n  - {table: orders, column: ordered_at, minute_grid: 15}\n",
        "{table: orders, column: ordered_at, minute_grid", "time_grids[0]", "is the time column of a curve"),
    Bad("unsupported_misata_stock_flows", BASE + "stock_flows:\n  - {table: orders, column: amount}\n",
        "stock_flows:", "stock_flows", "`stock_flows` is not supported by evalpack (line {line})"),
    Bad("unsupported_misata_scd2_in_table", edit("  customers:\n    rows: 50\n",
                                                 "  customers:\n    rows: 50\n    scd2: {key: customer_id}\n"),
        "scd2:", "tables.customers.scd2", "`scd2` is not supported by evalpack (line {line})"),
    Bad("unsupported_misata_column_distribution",
        edit("amount: {type: float, min: 1,", "amount: {type: float, distribution: weibull, min: 1,"),
        "distribution: weibull", "tables.orders.columns.amount.distribution",
        "distribution 'weibull' is not one evalpack draws; use one of uniform, normal, lognormal"),
    Bad("misata_lambda_is_refused_with_its_scale",
        edit("amount: {type: float, min: 1,", "amount: {type: float, distribution: exponential, lambda: 2, min: 1,"),
        "lambda: 2", "tables.orders.columns.amount.lambda", "`scale` (1/lambda); write scale: 1/lambda"),
    Bad("misata_rollup_says_what_misata_does",
        edit("amount: {type: float, min: 1,", "amount: {type: float, rollup: {from_table: x, agg: sum}, min: 1,"),
        "rollup:", "tables.orders.columns.amount.rollup", "Misata fills each row with an aggregate of its child rows"),
    Bad("misata_relative_dates_say_what_misata_does",
        edit("ordered_at: {type: date,", "ordered_at: {type: date, relative_to: customers.signed_up_at,"),
        "relative_to:", "tables.orders.columns.ordered_at.relative_to", "give start: and end:"),
    Bad("misata_sum_limit_says_what_misata_does", BASE + "constraints:\n  - {name: cap, type: sum_limit, "
        "table: orders, group_by: [channel]}\n", "type: sum_limit", "constraints[0].type",
        "evalpack does not scale a group's values down to a limit (Misata's `sum_limit`)"),
    Bad("distribution_parameter_without_a_shape",
        edit("amount: {type: float, min: 1,", "amount: {type: float, sigma: 0.5, min: 1,"),
        "sigma: 0.5", "tables.orders.columns.amount.sigma", "add `distribution:`"),
    Bad("parameter_the_shape_does_not_read",
        edit("amount: {type: float, min: 1,", "amount: {type: float, distribution: normal, sigma: 0.5, min: 1,"),
        "sigma: 0.5", "tables.orders.columns.amount.sigma", "a normal distribution does not read `sigma`"),
    Bad("weights_and_probabilities_together",
        edit("segment: {type: categorical, choices: [a, b]}",
             "segment: {type: categorical, choices: [a, b], weights: [1, 1], probabilities: [0.5, 0.5]}"),
        "segment: {type: categorical", "tables.customers.columns.segment.probabilities", "not both"),
    Bad("unsupported_column_type", edit("segment: {type: categorical, choices: [a, b]}", "segment: {type: json}"),
        "segment: {type: json}", "tables.customers.columns.segment.type", "column type `json` is not supported"),
    Bad("yaml_syntax_error", edit("choices: [web, app]}", "choices: [web, app}"), "choices: [web, app}",
        None, "YAML syntax error"),
    Bad("duplicate_key", edit("      refunded: {type: boolean}\n",
                              "      refunded: {type: boolean}\n      channel: {type: text}\n"),
        "channel: {type: text}", "tables.orders.columns.channel", "duplicate key 'channel'"),
    Bad("unique_int_range_smaller_than_rows", edit("order_id: {type: int, unique: true, min: 1}",
                                                   "order_id: {type: int, unique: true, min: 1, max: 100}"),
        "max: 100}", "tables.orders.columns.order_id.max", "hold 100 values, fewer than the table's 120 rows"),
    Bad("foreign_key_without_relationship", edit("      refunded: {type: boolean}\n",
                                                 "      refunded: {type: boolean}\n"
                                                 "      referrer_id: {type: foreign_key}\n"),
        "referrer_id:", "tables.orders.columns.referrer_id", "has no relationship"),
    Bad("group_shares_without_outcome_curve", edit("measure: amount", "measure: order_id"), "measure: order_id",
        "group_shares[0]", "needs an outcome curve on the same table and measure"),
    # found by a spec author: a second split of the same curve was built without it, silently
    Bad("second_group_shares_on_a_table",
        edit("  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.6, app: 0.4}}\n",
             "  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.6, app: 0.4}}\n"
             "  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.2, app: 0.8}}\n"),
        "shares: {web: 0.2, app: 0.8}", "group_shares[1]", "already has group_shares (group_shares[0], by channel)"),
    Bad("rate_curve_on_non_boolean", edit("    column: refunded", "    column: channel"), "    column: channel",
        "rate_curves[0].column", "orders.channel is a categorical column; this needs boolean"),
    Bad("unknown_column_type", edit("refunded: {type: boolean}", "refunded: {type: booleen}"), "booleen",
        "tables.orders.columns.refunded.type", "unknown column type 'booleen'; did you mean 'boolean'?"),
    Bad("orphans_plus_nulls_exceed_rows", edit("orphans: 2, nulls: 3", "orphans: 100, nulls: 30"), "orphans: 100",
        "relationships[0]", "orphans + nulls (130) exceed orders's 120 rows"),
    Bad("missing_parents_do_not_fit_the_window", edit("orphans: 2, nulls: 3", "orphans: 2, nulls: 115"),
        "nulls: 115", "relationships[0]", "115 rows without a parent do not fit the"),
    Bad("curve_points_out_of_order", edit("{month: 1, target_value", "{month: 4, target_value"),
        "month: 3,", "outcome_curves[0].curve_points[1]", "points must be in increasing month order"),
    Bad("unsupported_constraint_type",
        BASE + "constraints:\n  - {table: orders, type: unique_together, group_by: [order_id]}\n",
        "unique_together", "constraints[0].type", "constraint type `unique_together` is not supported"),
    Bad("too_few_rows_for_the_curve", edit("    rows: 120", "    rows: 10"), "rows: 10",
        "tables.orders.rows", "needs at least"),
    Bad("empty_file", "# nothing here yet\n", None, None, "the file is empty"),
    # found with a raised peak month: the refusal named a month whose total was fine, not the one too big for the rows
    Bad("peak_month_needs_more_rows_than_the_table_has",
        edit("{month: 3, target_value: 12000.55}", "{month: 3, target_value: 400000.55}"),
        "target_value: 400000.55", "outcome_curves[0].curve_points[1]",
        "2025-04: orders.amount total 400000.55 needs at least 82 rows of at most 5000.00, and the 3 months from "
        "2025-02 to 2025-04 need 128 together, more than the 114 rows orders has in them (of its 120); raise "
        "orders's rows, lower the target or raise amount's max"),
    Bad("month_total_too_small_for_the_rows_left_to_it",
        edit("min: 1, max: 5000", "min: 50, max: 5000",
             base=edit("{month: 1, target_value: 10000.37}", "{month: 1, target_value: 1800.37}",
                       base=edit("{month: 3, target_value: 12000.55}", "{month: 3, target_value: 2100.55}"))),
        "target_value: 1800.37", "outcome_curves[0].curve_points[0]",
        "2025-02: orders.amount total 1800.37 takes at most 35 rows of at least 50.00"),
    Bad("too_few_rows_for_the_waterfall", edit("    rows: 40", "    rows: 12", base=BOOKS), "rows: 12",
        "tables.mrr.rows", "mrr needs at least 20 rows for 3 months of its waterfall"),
    Bad("ledger_amounts_too_narrow_to_balance", edit("credit: {type: float, min: 0, max: 5000,",
                                                     "credit: {type: float, min: 0, max: 0.01,", base=BOOKS),
        "max: 0.01", "tables.lines.columns.credit.max", "cannot balance with amounts between 0.01 and 0.01"),
    Bad("ledger_grouped_by_a_unique_column", edit("group_by: [entry_id]", "group_by: [line_id]", base=BOOKS),
        "group_by: [line_id]", "tables.lines.constraints[0].group_by", "lines.line_id is unique"),
    Bad("ledger_group_with_one_orphan", edit("  - entries.entry_id -> lines.entry_id",
                                             "  - {parent: entries.entry_id, child: lines.entry_id, orphans: 1}",
                                             base=BOOKS),
        "orphans: 1", "relationships[0]", "orphans and nulls there must be 0 or at least 2"),
    Bad("top_level_ledger_on_a_missing_column",
        edit("    constraints:\n      - {type: balanced_ledger, group_by: [entry_id], debit_column: debit, "
             "credit_column: credit}\n", "", base=BOOKS)
        + "constraints:\n  - {type: balanced_ledger, table: lines, group_by: [entry_id], debit_column: debits}\n",
        "debit_column: debits", "constraints[0].debit_column", "table 'lines' has no column 'debits'"),
    Bad("unknown_question_family", BASE + "questions:\n  include: [period_totals]\n", "include: [period_totals]",
        "questions.include[0]", "unknown question family 'period_totals'; did you mean 'period_total'?"),
    Bad("family_included_and_excluded", BASE + "questions:\n  include: [rate]\n  exclude: [rate]\n",
        "exclude: [rate]", "questions.exclude", "['rate'] are both included and excluded"),
    Bad("mix_not_adding_up", BASE + "questions:\n  difficulty: {simple: 0.5, moderate: 0.6}\n",
        "difficulty: {simple", "questions.difficulty", "the shares add up to 1.1; make them add up to 1"),
    Bad("mix_unknown_level", BASE + "questions:\n  difficulty: {easy: 1}\n", "difficulty: {easy",
        "questions.difficulty.easy", "unknown difficulty level 'easy'"),
    Bad("max_not_positive", BASE + "questions:\n  max: 0\n", "max: 0", "questions.max", "must be at least 1"),
    Bad("license_not_a_hub_id", edit("seed: 11", "license: Apache 2.0\nseed: 11"), "license: Apache 2.0", "license",
        "license 'Apache 2.0' is not a Hugging Face Hub license identifier; did you mean `apache-2.0`?"),
    Bad("license_unknown_to_the_hub", edit("seed: 11", "license: my-own-terms\nseed: 11"), "license: my-own",
        "license", "use `other` for a license the Hub does not list"),
    Bad("repo_without_owner", edit("seed: 11", "repo: retail-evalpack\nseed: 11"), "repo: retail-evalpack", "repo",
        "repo 'retail-evalpack' is not a Hub repo id: expected OWNER/NAME"),
    Bad("repo_with_double_dash", edit("seed: 11", "repo: acme/retail--v1\nseed: 11"), "repo: acme/retail--v1",
        "repo", "no '--' or '..'"),
]


TRAPS = """\
      status: {type: categorical, choices: [placed, cancelled]}
"""
TRAPPED = edit("      ordered_at: {type: date", TRAPS + "      ordered_at: {type: date"
               ) + """\
traps:
  siblings:
    - {column: orders.gross, of: orders.amount, relation: {times: [1.07, 1.19]}}
  not_counted:
    - {table: orders, share: 0.05, marked_by: {orders.status: [cancelled]}}
  codes: [orders.channel]
"""


def trapped(old: str, new: str) -> str:
    return edit(old, new, base=TRAPPED)


BAD += [
    Bad("trap_factor_straddles_one", trapped("times: [1.07, 1.19]", "times: [0.9, 1.1]"), "times: [0.9",
        "traps.siblings[0].relation.times", "lie on one side of 1"),
    Bad("trap_sibling_exists", trapped("column: orders.gross,", "column: orders.refunded,"), "column: orders.refunded",
        "traps.siblings[0].column", "already declared"),
    Bad("trap_sibling_of_text", trapped("of: orders.amount", "of: orders.channel"), "of: orders.channel",
        "traps.siblings[0].of", "is not an amount a sibling can shadow"),
    Bad("trap_date_sibling_of_amount", trapped("relation: {times: [1.07, 1.19]}", "relation: {plus_days: [0, 9]}"),
        "plus_days", "traps.siblings[0].of", "plus_days follows a date or datetime column"),
    Bad("trap_date_sibling_no_later", trapped("{column: orders.gross, of: orders.amount, relation: {times: [1.07, 1.19]}}",
                                              "{column: orders.shipped, of: orders.ordered_at, relation: {plus_days: [0, 0]}}"),
        "plus_days", "traps.siblings[0].relation.plus_days", "high at least 1"),
    Bad("trap_unknown_mark", trapped("[cancelled]}", "[refunded]}"), "marked_by",
        "traps.not_counted[0].marked_by.orders.status", "'refunded' is not a value of orders.status"),
    Bad("trap_mark_every_value", trapped("[cancelled]}", "[cancelled, placed]}"), "marked_by",
        "traps.not_counted[0].marked_by.orders.status", "leave at least one"),
    Bad("trap_mark_by_fact", trapped("{orders.status: [cancelled]}", "{orders.channel: [web]}"), "marked_by",
        "traps.not_counted[0].marked_by", "carries a declared fact"),
    Bad("trap_marks_a_parent", trapped("{table: orders, share: 0.05, marked_by: {orders.status: [cancelled]}}",
                                       "{table: customers, share: 0.05, marked_by: {customers.segment: [b]}}"),
        "table: customers, share", "traps.not_counted[0].table", "other tables' keys point at customers"),
    Bad("trap_code_of_number", trapped("codes: [orders.channel]", "codes: [orders.amount]"), "codes: [orders.amount]",
        "traps.codes[0]", "codes store a categorical column's labels"),
    Bad("trap_zero_share", trapped("share: 0.05", "share: 0"), "share: 0,", "traps.not_counted[0].share",
        "a share above 0 is needed"),
]


def _run_cli(spec: Path, out: Path, capsys) -> tuple[int, str, str]:
    code = main(["build", str(spec), "-o", str(out), "--jobs", "1"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
def test_bad_spec_is_refused_with_file_line_and_key_path(bad: Bad, tmp_path: Path, capsys) -> None:
    spec = tmp_path / f"{bad.id}.yaml"
    spec.write_text(bad.text, encoding="utf-8")
    out = tmp_path / "pack"
    code, stdout, stderr = _run_cli(spec, out, capsys)

    assert code == 2, stderr
    line = line_of(bad.text, bad.marker) if bad.marker else 1
    where = f"{spec}:{line}:"
    assert where in stderr, f"expected {where!r} in {stderr!r}"
    if bad.keypath is not None:
        assert f"{where} {bad.keypath}:" in stderr, stderr
    assert bad.says.format(line=line) in stderr, stderr
    assert "Traceback" not in stderr
    assert stdout == ""
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.name], "a temporary folder was left behind"


@pytest.mark.parametrize("base", [BASE, BOOKS, TRAPPED], ids=["shop", "books", "trapped"])
def test_base_specs_are_valid(base: str, tmp_path: Path, capsys) -> None:
    """The bad specs are refused for their one change, not for something wrong in the spec they edit."""
    spec = tmp_path / "base.yaml"
    spec.write_text(base, encoding="utf-8")
    code, stdout, stderr = _run_cli(spec, tmp_path / "pack", capsys)
    assert code == 0, stderr
    assert (tmp_path / "pack" / "questions.jsonl").is_file()


@pytest.mark.parametrize("first, last, least, most", [
    # the peak month needs more rows (at 5000.00 a row) than a share of the rows by its total leaves it
    ("10000.37", "300000.55", "1", "5000"),
    # a month's total holds fewer rows (at 50.00 a row) than that share gives it
    ("1700.37", "2300.55", "50", "5000"),
], ids=["rows_for_the_peak", "rows_for_a_small_month"])
def test_a_month_outside_its_share_of_rows_builds_with_exact_totals(first: str, last: str, least: str, most: str,
                                                                     tmp_path: Path, capsys) -> None:
    """Rows go to the months by their totals; a month that needs more or fewer rows than that gives it, while the
    others can give or take them, gets them, and every month still holds its total to the cent."""
    text = (BASE.replace("{month: 1, target_value: 10000.37}", f"{{month: 1, target_value: {first}}}")
            .replace("{month: 3, target_value: 12000.55}", f"{{month: 3, target_value: {last}}}")
            .replace("min: 1, max: 5000", f"min: {least}, max: {most}"))
    spec = tmp_path / "shop.yaml"
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "pack"
    code, _, stderr = _run_cli(spec, out, capsys)
    assert code == 0, stderr
    middle = Decimal(_round_fraction((Fraction(first) + Fraction(last)) / 2 * 100)).scaleb(-2)
    expected = {dt.date(2025, 2, 1): Decimal(first), dt.date(2025, 3, 1): middle, dt.date(2025, 4, 1): Decimal(last)}
    questions = verified_records(out)
    assert sorted(Decimal(str(q["expected_answer"])) for q in questions if q["kind"] == "period_total") == sorted(
        expected.values())
    for seed in (11, 12):
        orders = out / "rotations" / f"seed_{seed}" / "tables" / "orders.parquet"
        con = duckdb.connect()
        rows = con.execute(f"SELECT date_trunc('month', ordered_at)::DATE, SUM(amount), MIN(amount), MAX(amount) "
                           f"FROM read_parquet('{orders}') WHERE ordered_at >= DATE '2025-02-01' "
                           "AND ordered_at < DATE '2025-05-01' GROUP BY 1").fetchall()
        con.close()
        assert {month: total for month, total, _, _ in rows} == expected
        assert all(Decimal(least) <= low and high <= Decimal(most) for _, _, low, high in rows), rows


@pytest.mark.parametrize("bad", [b for b in BAD if b.id in ("unknown_column_key", "yaml_syntax_error",
                                                            "license_not_a_hub_id")],
                         ids=lambda b: b.id)
def test_bad_spec_in_a_real_process(bad: Bad, tmp_path: Path) -> None:
    """The same refusal from ``python -m evalpack.cli``: exit status 2, one line, no traceback."""
    spec = tmp_path / "bad.yaml"
    spec.write_text(bad.text, encoding="utf-8")
    out = tmp_path / "pack"
    proc = subprocess.run([sys.executable, "-m", "evalpack.cli", "build", str(spec), "-o", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    line = line_of(bad.text, bad.marker)
    assert proc.stderr.startswith(f"evalpack: error: {spec}:{line}:")
    assert bad.says in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


# --------------------------------------------------------------------------- a Misata-format spec

MISATA = """\
# A Misata evalpack schema written in Misata's own shapes: string relationships, month/date/period
# curve points, value/target/amount spellings, top-level constraints with table:, type aliases.
name: misata_shop
seed: 5
rotations: 2
tables:
  customers:
    rows: 60
    columns:
      customer_id: {type: integer, unique: true, min: 1}
      full_name: {type: string, text_type: name}
      email: {type: email, unique: true}
      token: {type: uuid}
      lifetime_value: {type: number, min: 0, max: 1000, decimals: 2}
      vip: {type: bool}
  orders:
    rows: 300
    columns:
      order_id: {type: integer, primary_key: true, min: 1}
      customer_id: {type: foreign_key}
      channel: {type: categorical, choices: [web, app, store]}
      amount: {type: number, min: 1, max: 2000, decimals: 2}
      returned: {type: bool}
      order_date: {type: date, start: "2024-12-01", end: "2025-07-31"}
  journal_entries:
    rows: 40
    columns:
      entry_id: {type: integer, unique: true, min: 100}
      memo: {type: string}
  journal_lines:
    rows: 160
    columns:
      line_id: {type: integer, unique: true, min: 1}
      entry_id: {type: foreign_key}
      debit: {type: number, min: 0, max: 5000, decimals: 2}
      credit: {type: number, min: 0, max: 5000, decimals: 2}
relationships:
  - customers.customer_id -> orders.customer_id
  - journal_entries.entry_id -> journal_lines.entry_id
outcome_curves:
  - table: orders
    column: amount
    time_column: order_date
    start_date: "2025-01-01"
    curve_points:
      - {month: 1, target_value: 20000.37}
      - {date: "2025-03-01", value: 23500.18}
      - {period: "2025-05", target: 21000.91}
      - {period: "2025-06", amount: 26000.45}
group_shares:
  - {table: orders, measure: amount, group_column: channel, shares: {web: 0.5, app: 0.3, store: 0.2}}
rate_curves:
  - table: orders
    column: returned
    time_column: order_date
    rate_points:
      - {period: "2025-01", rate: 0.05}
      - {period: "2025-06", rate: 0.1}
constraints:
  - {name: double_entry, type: balanced_ledger, table: journal_lines, group_by: [entry_id],
     debit_column: debit, credit_column: credit, decimals: 2}
"""


def _month(i: int) -> dt.date:
    """The i-th month (0 = 2025-01) of the Misata spec's curve."""
    return dt.date(2025 + i // 12, i % 12 + 1, 1)


def _round_fraction(value: Fraction) -> int:
    """Round half to even, exactly."""
    floor = value.numerator // value.denominator
    rest = value - floor
    return floor + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2) else 0)


def _interpolate(points: dict[int, Fraction], n: int) -> list[Fraction]:
    """Linear interpolation between {month index: value}, exact."""
    keys = sorted(points)
    out = []
    for i in range(n):
        a = max(k for k in keys if k <= i)
        b = min(k for k in keys if k >= i)
        out.append(points[a] if a == b else points[a] + (points[b] - points[a]) * Fraction(i - a, b - a))
    return out


def test_misata_format_spec_builds_unchanged_and_its_facts_hold(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "misata_shop.yaml"
    spec.write_bytes(MISATA.encode("utf-8"))
    out = tmp_path / "pack"
    code, stdout, stderr = _run_cli(spec, out, capsys)
    assert code == 0, stderr
    assert spec.read_bytes() == MISATA.encode("utf-8")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["spec"]["sha256"] == hashlib.sha256(MISATA.encode("utf-8")).hexdigest()
    assert manifest["spec"]["text"] == MISATA
    assert manifest["seeds"] == [5, 6]

    # month totals: declared points Jan, Mar, May, Jun 2025; Feb and Apr interpolated, half-even to cents
    declared = {0: Fraction("20000.37"), 2: Fraction("23500.18"), 4: Fraction("21000.91"), 5: Fraction("26000.45")}
    cents = [_round_fraction(v * 100) for v in _interpolate(declared, 6)]
    expected = {_month(i): Decimal(c).scaleb(-2) for i, c in enumerate(cents)}
    shares = {"web": Fraction(1, 2), "app": Fraction(3, 10), "store": Fraction(1, 5)}
    rates = _interpolate({0: Fraction("0.05"), 5: Fraction("0.1")}, 6)

    questions = verified_records(out)  # shipped, or left out by the near-miss gate: either way verified
    kinds = {q["kind"] for q in questions}
    assert {"period_total", "group_period_total", "rate", "fk_orphans", "ledger_balance"} <= kinds
    period_answers = sorted(Decimal(str(q["expected_answer"])) for q in questions if q["kind"] == "period_total")
    assert period_answers == sorted(expected.values())

    for seed in (5, 6):
        tables = out / "rotations" / f"seed_{seed}" / "tables"
        con = duckdb.connect()
        for name in ("customers", "orders", "journal_entries", "journal_lines"):
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{tables / name}.parquet')")
        months = dict(con.execute(
            "SELECT date_trunc('month', order_date)::DATE, SUM(amount) FROM orders "
            "WHERE order_date >= DATE '2025-01-01' AND order_date < DATE '2025-07-01' GROUP BY 1").fetchall())
        assert months == expected
        for (month, channel, total) in con.execute(
                "SELECT date_trunc('month', order_date)::DATE, channel, SUM(amount) FROM orders "
                "WHERE order_date >= DATE '2025-01-01' AND order_date < DATE '2025-07-01' GROUP BY 1, 2").fetchall():
            exact = Fraction(expected[month]) * shares[channel]
            assert abs(Fraction(total) - exact) < Fraction(1, 100), (month, channel, total)
        for i, (month, flagged, rows) in enumerate(con.execute(
                "SELECT date_trunc('month', order_date)::DATE AS m, COUNT_IF(returned), COUNT(*) FROM orders "
                "WHERE order_date >= DATE '2025-01-01' AND order_date < DATE '2025-07-01' GROUP BY 1 ORDER BY 1")
                .fetchall()):
            assert month == _month(i)
            assert flagged == _round_fraction(rates[i] * rows)
        # string relationships declare no orphans and no nulls
        assert con.execute("SELECT COUNT(*) FROM orders o LEFT JOIN customers c USING (customer_id) "
                           "WHERE c.customer_id IS NULL").fetchone() == (0,)
        assert con.execute("SELECT COUNT(*) FROM journal_lines l LEFT JOIN journal_entries e USING (entry_id) "
                           "WHERE e.entry_id IS NULL").fetchone() == (0,)
        # the top-level ledger constraint holds on its table
        assert con.execute("SELECT COUNT(*) FROM (SELECT entry_id FROM journal_lines GROUP BY entry_id "
                           "HAVING SUM(debit) <> SUM(credit))").fetchone() == (0,)
        assert con.execute("SELECT SUM(debit) - SUM(credit) FROM journal_lines").fetchone() == (0,)
        # Misata type aliases became evalpack types
        schema = pq.read_schema(tables / "customers.parquet")
        assert str(schema.field("customer_id").type) == "int64"
        assert str(schema.field("full_name").type) == "string"
        assert str(schema.field("lifetime_value").type) == "decimal128(18, 2)"
        assert str(schema.field("vip").type) == "bool"
        emails, tokens, distinct = con.execute(
            "SELECT COUNT_IF(email LIKE '%_@_%._%'), COUNT_IF(regexp_full_match(token, "
            "'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}')), COUNT(DISTINCT email) "
            "FROM customers").fetchone()
        assert (emails, tokens, distinct) == (60, 60, 60)
        assert con.execute("SELECT COUNT(DISTINCT order_id), COUNT(*) FROM orders").fetchone() == (300, 300)
        con.close()


# --------------------------------------------------------------------------- the JSON Schema


class _StringDates(yaml.SafeLoader):
    """YAML as an editor's JSON Schema validator sees it: dates stay strings."""


_StringDates.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    return jsonschema.Draft202012Validator(schema)


def _doc(text: str) -> dict:
    return yaml.load(text, Loader=_StringDates)


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.yaml")), ids=lambda p: p.name)
def test_example_specs_validate_against_the_json_schema(path: Path) -> None:
    errors = [e.message for e in _validator().iter_errors(_doc(path.read_text(encoding="utf-8")))]
    assert errors == []


def test_misata_and_base_specs_validate_against_the_json_schema() -> None:
    validator = _validator()
    for text in (MISATA, BASE):
        assert [e.message for e in validator.iter_errors(_doc(text))] == []


# Bad specs whose fault is visible to a schema (cross-references and sums are the loader's job).
SCHEMA_VISIBLE = ("unknown_column_key", "unknown_top_key", "unknown_curve_key", "wrong_type_rows", "wrong_type_unique",
                  "unsupported_misata_stock_flows", "unsupported_misata_scd2_in_table",
                  "unsupported_misata_column_distribution", "unsupported_column_type", "unknown_column_type",
                  "unsupported_constraint_type", "license_not_a_hub_id", "license_unknown_to_the_hub",
                  "repo_without_owner", "repo_with_double_dash")


@pytest.mark.parametrize("bad", [b for b in BAD if b.id in SCHEMA_VISIBLE], ids=lambda b: b.id)
def test_the_json_schema_rejects_what_the_loader_refuses(bad: Bad) -> None:
    assert not _validator().is_valid(_doc(bad.text))


@pytest.mark.parametrize("change", [
    ("{month: 1, target_value: 10000.37}", "{month: 1, date: \"2025-02-01\", target_value: 10000.37}"),
    ("{month: 1, target_value: 10000.37}", "{month: 1, target_value: 10000.37, value: 3.5}"),
    ("{month: 1, target_value: 10000.37}", "{target_value: 10000.37}"),
    ('{period: "2025-02", rate: 0.05}', '{period: "2025-02", rate: 1.5}'),
    ('{period: "2025-02", rate: 0.05}', '{period: "2025-13", rate: 0.05}'),
    ("orphans: 2, nulls: 3", "orphans: -2, nulls: 3"),
    ("{parent: customers.customer_id, child: orders.customer_id, orphans: 2, nulls: 3}",
     "customers.customer_id => orders.customer_id"),
    ("{parent: customers.customer_id, child: orders.customer_id, orphans: 2, nulls: 3}",
     "{parent: customers.customer_id, child: orders.customer_id, temporal: true}"),
    ("{type: boolean}", "{type: boolean, min: 3}"),
    ("choices: [web, app]}", "choices: []}"),
    ('start: "2025-01-01"', 'start: "first of January"'),
    ("rotations: 2", "rotations: 0"),
    ("name: shop", 'name: ""'),
])
def test_the_json_schema_rejects_malformed_declarations(change: tuple[str, str], tmp_path: Path) -> None:
    text = edit(*change)
    assert not _validator().is_valid(_doc(text))
    # ... and so does the loader: the schema is no stricter than evalpack itself
    from evalpack.core.errors import SpecError
    from evalpack.spec.reader import parse_spec
    with pytest.raises(SpecError):
        parse_spec(text, file="x.yaml")


@pytest.mark.parametrize("change", [
    ("- customers.customer_id -> orders.customer_id", "- customers.customer_id → orders.customer_id"),
    ("- customers.customer_id -> orders.customer_id",
     "- {parent_table: customers, parent_key: customer_id, child_table: orders, child_key: customer_id}"),
    ("constraints:\n  - {name: double_entry, type: balanced_ledger, table: journal_lines,",
     "constraints:\n  - {type: balanced_ledger, table: journal_lines,"),
    ("email: {type: email, unique: true}", "email: {type: text, text_type: email, unique: true, nullable: true}"),
    ("    rate_points:", "    time_unit: month\n    true_value: true\n    interpolate: true\n    rate_points:"),
])
def test_the_json_schema_accepts_other_accepted_shapes(change: tuple[str, str]) -> None:
    old, new = change
    assert old in MISATA
    text = MISATA.replace(old, new, 1)
    from evalpack.spec.reader import parse_spec
    parse_spec(text, file="misata_shop.yaml")  # the loader accepts it ...
    assert [e.message for e in _validator().iter_errors(_doc(text))] == []  # ... and so does the schema


def test_schema_top_level_keys_match_the_loader() -> None:
    from evalpack.spec import grammar as loader
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert set(schema["properties"]) == set(loader.TOP_KEYS) | set(loader.NOTED_TOP)
    assert set(schema["$defs"]["table"]["properties"]) == set(loader.TABLE_KEYS)
    assert set(schema["$defs"]["column"]["properties"]) == set(loader.COLUMN_KEYS)
    assert set(schema["$defs"]["balanced_ledger"]["properties"]) == set(loader.CONSTRAINT_KEYS)
    types = set(schema["$defs"]["column"]["properties"]["type"]["enum"])
    assert types == set(loader.COLUMN_TYPES) | set(loader.TYPE_ALIASES) | set(loader.TEXT_TYPE_ALIASES)
    assert re.fullmatch(schema["properties"]["name"]["anyOf"][0]["pattern"], "retail_2")


def test_license_and_repo_are_read_and_the_schema_knows_the_hubs_licenses() -> None:
    """`license:` is one of the Hub's identifiers (the JSON Schema lists the same ones); `repo:` is kept."""
    from evalpack.spec import grammar as loader
    from evalpack.spec.reader import parse_spec

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema["properties"]["license"]["enum"] == list(loader.HUB_LICENSES)
    assert {"apache-2.0", "cc-by-4.0", "mit", "other", "unknown"} <= set(loader.HUB_LICENSES)
    text = edit("seed: 11", "license: apache-2.0\nrepo: acme/shop.evalpack_v1\nseed: 11")
    parsed = parse_spec(text, file="shop.yaml")
    assert (parsed.license, parsed.repo) == ("apache-2.0", "acme/shop.evalpack_v1")
    assert [e.message for e in _validator().iter_errors(_doc(text))] == []
    default = parse_spec(BASE, file="shop.yaml")
    assert (default.license, default.repo) == ("cc-by-4.0", None)


def test_an_export_format_is_one_entry_that_the_schema_the_cli_and_the_writers_read() -> None:
    """The format registry (issue 51): the spec's EXPORT_FORMATS, the JSON Schema's `exports`, the writers and the
    CLI's --format choices name the same formats in the same order."""
    from evalpack.cli import build_parser
    from evalpack.interop.exports import FORMAT_WRITERS
    from evalpack.spec.grammar import EXPORT_FORMATS

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert tuple(schema["properties"]["exports"]["items"]["enum"]) == EXPORT_FORMATS == tuple(FORMAT_WRITERS)
    export = build_parser()._subparsers._group_actions[0].choices["export"]
    assert tuple(next(a for a in export._actions if a.dest == "format").choices) == EXPORT_FORMATS
