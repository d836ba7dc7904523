"""Misata's column keys that shape values no declared fact touches, read as Misata means them (issue 21 point 6):
`distribution:` with Misata's parameters, a numeric column that `depends_on` a label (`mapping:`, `default:`),
`probabilities:` and a boolean's `probability:`, display names, `domain:` and `locale:` (read and not used, with a
warning). Each value stays within the column's declared bounds; a wrong use is refused naming its key."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest

from evalpack.core.errors import SpecError
from evalpack.data.generate import table_batches
from evalpack.data.plan import plan_rotation
from evalpack.data.textgen import COUNTRY
from evalpack.spec.reader import parse_spec

TEXT_POOLS = {"country": COUNTRY}

SPEC = """\
name: Shop Dataset
domain: ecommerce
locale: de_DE
rows: 4000
tables:
  customers:
    columns:
      customer_id: {type: int, unique: true}
      plan: {type: categorical, choices: [free, pro, team], probabilities: [0.5, 0.3, 0.2]}
      active: {type: boolean, probability: 0.25}
      age: {type: int, min: 18, max: 90, distribution: normal, mean: 40, std: 12}
      spend: {type: float, min: 1, max: 5000, distribution: lognormal, mu: 4, sigma: 0.5}
      visits: {type: int, min: 0, max: 200, distribution: exponential, scale: 10}
      score: {type: float, min: 0, max: 1, decimals: 3, distribution: beta, a: 2, b: 5}
      wait: {type: float, min: 0, distribution: gamma, shape: 2, scale: 3}
      big: {type: float, min: 1, max: 100000, distribution: power_law, alpha: 1.5}
      even: {type: float, min: 10, max: 20, distribution: uniform}
      fee:
        type: float
        min: 0
        max: 1000
        depends_on: plan
        mapping:
          free: {value: 0}
          pro: {min: 20, max: 60, distribution: normal, mean: 40, std: 5}
        default: {min: 100, distribution: lognormal, mean: 300, std: 100}
"""


def columns(spec_text: str = SPEC, seed: int = 7) -> dict[str, np.ndarray]:
    spec = parse_spec(spec_text, file="shop.yaml")
    table = pa.Table.from_batches(list(table_batches(spec, plan_rotation(spec, seed), "customers")))
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def test_misata_value_keys_draw_their_shapes_within_the_declared_bounds():
    spec = parse_spec(SPEC, file="shop.yaml")
    assert spec.name == "shop_dataset"
    assert [n.split(": ", 2)[1] for n in spec.notes] == ["domain", "locale", "name"]
    assert all(n.startswith("shop.yaml:") and "Misata" in n for n in spec.notes)
    c = columns()
    floats = {k: c[k].astype(float) for k in ("spend", "score", "wait", "big", "even", "fee")}
    assert c["age"].min() >= 18 and c["age"].max() <= 90 and abs(np.mean(c["age"]) - 40) < 1.5
    assert abs(np.median(floats["spend"]) - np.exp(4)) < 5  # a lognormal's median is e**mu
    assert floats["spend"].min() >= 1 and floats["spend"].max() <= 5000
    assert abs(np.mean(c["visits"]) - 10) < 1.5 and c["visits"].min() >= 0
    assert abs(np.mean(floats["score"]) - 2 / 7) < 0.02 and floats["score"].max() <= 1
    assert abs(np.mean(floats["wait"]) - 6) < 0.5  # gamma: shape * scale
    assert 1 <= np.median(floats["big"]) < 2 and 10 < np.quantile(floats["big"], 0.99) <= 100000  # heavy tail
    assert floats["even"].min() >= 10 and floats["even"].max() <= 20
    assert abs(np.mean(c["active"].astype(float)) - 0.25) < 0.03
    plans = c["plan"]
    assert abs(np.mean(plans == "free") - 0.5) < 0.03
    fee = floats["fee"]
    assert (fee[plans == "free"] == 0).all()
    assert fee[plans == "pro"].min() >= 20 and fee[plans == "pro"].max() <= 60
    assert abs(np.mean(fee[plans == "pro"]) - 40) < 1
    team = fee[plans == "team"]
    assert team.min() >= 100 and team.max() <= 1000 and abs(np.median(team) - 285) < 30


def test_the_same_spec_and_seed_draw_the_same_values_and_another_seed_others():
    first, again, other = columns(), columns(), columns(seed=8)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["fee"], other["fee"])


def test_a_spec_without_these_keys_draws_what_it_drew_before():
    """The uniform draw is unchanged: the same values as a column declaring no distribution at all."""
    plain = SPEC.replace(", distribution: uniform", "")
    assert np.array_equal(columns(plain)["even"], columns()["even"])


RATES = """\
name: churn
rows: 3000
tables:
  users:
    columns:
      user_id: {type: int, unique: true}
      tier: {type: categorical, choices: [gold, silver, bronze, tin], sampling: zipf}
      seats: {type: int, min: 1, max: 50, decimals: 0}
      country: {type: text, text_type: country}
      phone: {type: text, text_type: phone_number}
      bio: {type: text, text_type: bio}
      churned: {type: boolean, rate: 0.5}
      signed_up: {type: date, start: "2023-01-01", end: "2024-12-31"}
rate_curves:
  - table: users
    column: churned
    time_column: signed_up
    interpolate: false
    rate_points:
      - {period: "3", rate: 0.1}
      - {period: 20, rate: 0.3}
"""


def test_misata_rate_periods_name_calendar_and_running_months_and_interpolate_false_holds_only_them():
    spec = parse_spec(RATES, file="churn.yaml")
    (curve,) = spec.rate_curves
    assert [(f"{p.month:%Y-%m}", p.rate) for p in curve.points] == [("2023-03", 0.1), ("2024-03", 0.1),
                                                                     ("2024-08", 0.3)]
    assert curve.interpolate is False
    plan = plan_rotation(spec, 42)
    (facts,) = plan.answer_key.rates
    assert [abs(f - rate * n) <= 0.5 for f, n, rate in zip(facts.flagged, facts.rows, (0.1, 0.1, 0.3))] == [True] * 3
    table = pa.Table.from_batches(list(table_batches(spec, plan, "users")))
    months = pa.compute.strftime(table["signed_up"], "%Y-%m").to_numpy(zero_copy_only=False)
    churned = table["churned"].to_numpy(zero_copy_only=False)
    between = (months > "2023-03") & (months < "2024-03")  # not declared: the column's own rate, not 0.1 to 0.1
    assert abs(churned[between].mean() - 0.5) < 0.06
    tiers = table["tier"].to_numpy(zero_copy_only=False)
    shares = [np.mean(tiers == t) for t in ("gold", "silver", "bronze", "tin")]
    assert shares == sorted(shares, reverse=True) and abs(shares[0] - 1 / sum(1 / r ** 1.2 for r in range(1, 5))) < 0.03
    assert set(table["country"].to_pylist()) <= set(TEXT_POOLS["country"])
    assert all(p.startswith("+1-555-") for p in table["phone"].to_pylist())
    assert all(b.endswith(".") for b in table["bio"].to_pylist())


@pytest.mark.parametrize("interpolate", ["false", "true"])
def test_a_rate_curve_spreads_its_table_over_the_time_column_s_declared_range(interpolate):
    """One rate point inside a three-year range (found in Misata's SaaS churn story): every month of the range holds
    rows, the point's month its declared rate, the months the curve does not reach the column's own rate; not the
    whole table in the point's month and one month either side."""
    text = RATES.replace("interpolate: false", f"interpolate: {interpolate}").replace(
        '      - {period: "3", rate: 0.1}\n      - {period: 20, rate: 0.3}\n', '      - {period: "2023-06", rate: 0.1}\n')
    text = text.replace('start: "2023-01-01", end: "2024-12-31"', 'start: "2022-01-01", end: "2024-12-31"')
    spec = parse_spec(text, file="churn.yaml")
    plan = plan_rotation(spec, 42)
    (facts,) = plan.answer_key.rates
    assert [f"{m:%Y-%m}" for m in facts.months] == ["2023-06"] and abs(facts.flagged[0] - 0.1 * facts.rows[0]) <= 0.5
    assert not [w for w in plan.warnings if "no room" in w]
    table = pa.Table.from_batches(list(table_batches(spec, plan, "users")))
    months = pa.compute.strftime(table["signed_up"], "%Y-%m").to_numpy(zero_copy_only=False)
    churned = table["churned"].to_numpy(zero_copy_only=False)
    counts = {m: int((months == m).sum()) for m in set(months)}
    assert len(counts) == 36 and max(counts.values()) - min(counts.values()) <= 1  # 3,000 rows over 2022-2024
    assert abs(churned[months == "2023-06"].mean() - 0.1) < 0.01
    assert abs(churned[months != "2023-06"].mean() - 0.5) < 0.03


@pytest.mark.parametrize("base, change, replacement, keypath, says", [
    (SPEC, "depends_on: plan", "depends_on: tier", "tables.customers.columns.fee.depends_on",
     "'tier' is not a column of this table"),
    (SPEC, "depends_on: plan", "depends_on: active", "tables.customers.columns.fee.depends_on", "is a boolean column"),
    (SPEC, "          pro: {min: 20", "          gold: {min: 20", "tables.customers.columns.fee.mapping.gold",
     "'gold' is not one of plan's choices"),
    (SPEC, "default: {min: 100,", "default: {min: -5,", "tables.customers.columns.fee.default.min",
     "lies outside the column's min"),
    (SPEC, "free: {value: 0}", "free: {value: 0.001}", "tables.customers.columns.fee.mapping.free.value",
     "more than the column's 2 decimals"),
    (SPEC, "free: {value: 0}", "free: {value: 0, min: 0}", "tables.customers.columns.fee.mapping.free.min",
     "either `value:` or a range"),
    (SPEC, "visits: {type: int, min: 0,", "visits: {type: int, unique: true, min: 0,",
     "tables.customers.columns.visits.distribution", "a unique int column's values are its keys"),
    (RATES, '{period: "3", rate: 0.1}', '{period: "40", rate: 0.1}', "rate_curves[0].rate_points[0].period",
     "holds no such month"),
    (RATES, '{period: "3", rate: 0.1}', '{period: "March", rate: 0.1}', "rate_curves[0].rate_points[0].period",
     "expected a period 'YYYY-MM'"),
    (RATES, '{period: "3", rate: 0.1}', '{period: "2023-Q2", rate: 0.1}', "rate_curves[0].rate_points[0].period",
     "got the quarter '2023-Q2': evalpack declares a fact per month; write one point for each of its months "
     "(2023-04, 2023-05, 2023-06)"),
    (RATES, "seats: {type: int, min: 1, max: 50, decimals: 0}", "seats: {type: int, min: 1, max: 50, decimals: 2}",
     "tables.users.columns.seats.decimals", "an int column holds whole numbers"),
    (RATES, "tier: {type: categorical, choices: [gold, silver, bronze, tin], sampling: zipf}",
     "tier: {type: categorical, choices: [gold, silver], sampling: pareto}", "tables.users.columns.tier.sampling",
     "Misata's are uniform, zipf and auto"),
    (RATES, "{period: 20, rate: 0.3}", "{period: 15, rate: 0.3}", "rate_curves[0].rate_points[1]",
     "2024-03 already has a rate"),
])
def test_a_wrong_use_is_refused_naming_its_key(base, change, replacement, keypath, says):
    text = base.replace(change, replacement, 1)
    assert text != base
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file="spec.yaml")
    message = str(caught.value)
    assert f": {keypath}: " in message and says in message, message


@pytest.mark.parametrize("start, end, edges, widen", [
    ("2025-01-01", "2025-12-31", "before or after", "start and end"),
    ("2025-01-01", "2026-01-31", "before", "start"),
    ("2024-12-01", "2025-12-31", "after", "end"),
    ("2024-12-01", "2026-01-31", None, None)])
def test_the_no_room_warning_names_every_edge_without_room(start, end, edges, widen):
    """A date column whose range is exactly the curve's months (as Misata's specs write it) has no room on either
    side: a `<=` at the end is as invisible as a `>` at the start, and the warning says both."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "benchmarks" / "specs" / "retail_misata.yaml").read_text()
    text = text.replace('ordered_at: {type: date, start: "2025-01-01", end: "2025-12-31"}',
                        f'ordered_at: {{type: date, start: "{start}", end: "{end}"}}')
    assert f'start: "{start}", end: "{end}"' in text
    warned = [w for w in plan_rotation(parse_spec(text, file="r.yaml"), 42).warnings if "no room" in w]
    if edges is None:
        assert warned == []
    else:
        assert warned == [f"orders.ordered_at: the column's range leaves no room {edges} the declared months, so an "
                          f"off-by-one mistake at {'those outer edges' if ' or ' in edges else 'that outer edge'} "
                          f"cannot be caught; widen {widen} by a month (or declare `near_miss: {{margin: "
                          "{orders.ordered_at: 1 month}}`)"]
