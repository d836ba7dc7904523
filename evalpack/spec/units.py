"""Exact integer arithmetic for declared amounts: units of 10**-decimals, largest remainders."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import numpy as np


def to_units(value: float | str | Decimal, decimals: int) -> int:
    """``value`` in integer units of ``10**-decimals`` (half-even), read from its decimal text."""
    return int(Decimal(str(value)).scaleb(decimals).to_integral_value(ROUND_HALF_EVEN))


def from_units(units: int, decimals: int) -> Decimal:
    """The exact decimal that ``units`` stands for."""
    return Decimal(units).scaleb(-decimals)


def round_fraction(value: Fraction) -> int:
    """Round a fraction to the nearest integer, halves to even (exact)."""
    floor = value.numerator // value.denominator
    rest = value - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2):
        return floor + 1
    return floor


def apportion(total: int, weights, minimum: int = 0) -> np.ndarray:
    """Split integer ``total`` into parts proportional to ``weights`` (largest remainders).

    Every part gets at least ``minimum``; remainders go to the largest fractional parts,
    ties to the lower index, so the split is deterministic and sums to ``total`` exactly.
    """
    weights = [Fraction(w) if not isinstance(w, float) else Fraction(w).limit_denominator(10**12) for w in weights]
    n = len(weights)
    rest = total - minimum * n
    if rest < 0:
        raise ValueError(f"cannot give {n} parts at least {minimum} from {total}")
    wsum = sum(weights)
    if wsum == 0:
        weights, wsum = [Fraction(1)] * n, Fraction(n)
    exact = [rest * w / wsum for w in weights]
    parts = [e.numerator // e.denominator for e in exact]
    left = rest - sum(parts)
    order = sorted(range(n), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return np.array([p + minimum for p in parts], dtype=np.int64)


def allocate(cell_rows: np.ndarray, cell_totals: np.ndarray, lo: int, hi: int, rng: np.random.Generator) -> np.ndarray:
    """Random per-row amounts (integer units) in [lo, hi] whose per-cell sums equal ``cell_totals``.

    Rows are laid out cell after cell. Vectorised: a proportional split of each cell's total
    above its floor, clipped to the cap, then the leftover filled greedily into the slack.
    The caller guarantees rows*lo <= total <= rows*hi for every cell.
    """
    cell_rows = np.asarray(cell_rows, dtype=np.int64)
    cell_totals = np.asarray(cell_totals, dtype=np.int64)
    n = int(cell_rows.sum())
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cell = np.repeat(np.arange(len(cell_rows)), cell_rows)
    above = cell_totals - cell_rows * lo
    cap = hi - lo
    weight = rng.gamma(2.0, 1.0, size=n) + 1e-9
    wsum = np.bincount(cell, weights=weight, minlength=len(cell_rows))
    share = np.floor(above[cell] * (weight / wsum[cell])).astype(np.int64)
    share = np.minimum(np.maximum(share, 0), cap)
    left = above - np.bincount(cell, weights=share, minlength=len(cell_rows)).astype(np.int64)
    slack = cap - share
    starts = np.concatenate(([0], np.cumsum(cell_rows)[:-1]))
    cum = np.cumsum(slack)
    before = cum - slack - (cum - slack)[starts][cell]
    give = np.clip(left[cell] - before, 0, slack)
    return lo + share + give
