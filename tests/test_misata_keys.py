"""Misata's column keys that shape values no declared fact touches, read as Misata means them (issue 21 point 6):
`distribution:` with Misata's parameters, a numeric column that `depends_on` a label (`mapping:`, `default:`),
`probabilities:` and a boolean's `probability:`, display names, `domain:` and `locale:` (read and not used, with a
warning). Each value stays within the column's declared bounds; a wrong use is refused naming its key."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from evalpack.errors import SpecError
from evalpack.generate import table_batches
from evalpack.plan import plan_rotation
from evalpack.spec import parse_spec

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


@pytest.mark.parametrize("change, keypath, says", [
    ("depends_on: plan", "tables.customers.columns.fee.depends_on", "'tier' is not a column of this table"),
    ("depends_on: plan", "tables.customers.columns.fee.depends_on", "is a boolean column"),
    ("          pro: {min: 20", "tables.customers.columns.fee.mapping.gold", "'gold' is not one of plan's choices"),
    ("default: {min: 100,", "tables.customers.columns.fee.default.min", "lies outside the column's min"),
    ("free: {value: 0}", "tables.customers.columns.fee.mapping.free.value", "more than the column's 2 decimals"),
    ("free: {value: 0}", "tables.customers.columns.fee.mapping.free.min", "either `value:` or a range"),
    ("visits: {type: int, min: 0,", "tables.customers.columns.visits.distribution",
     "a unique int column's values are its keys"),
])
def test_a_wrong_use_is_refused_naming_its_key(change, keypath, says):
    replacement = {
        "'tier' is not a column of this table": "depends_on: tier",
        "is a boolean column": "depends_on: active",
        "'gold' is not one of plan's choices": "          gold: {min: 20",
        "lies outside the column's min": "default: {min: -5,",
        "more than the column's 2 decimals": "free: {value: 0.001}",
        "either `value:` or a range": "free: {value: 0, min: 0}",
        "a unique int column's values are its keys": "visits: {type: int, unique: true, min: 0,",
    }[says]
    text = SPEC.replace(change, replacement, 1)
    assert text != SPEC
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file="shop.yaml")
    message = str(caught.value)
    assert f": {keypath}: " in message and says in message, message
