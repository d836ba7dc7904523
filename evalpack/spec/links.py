"""Planned foreign keys: which parent each child row gets, decided before a row exists.

A foreign key is planned when a ``segment_shares`` or ``per_parent`` declaration depends on it. The
parents' segment column is planned too (how many parents carry each label), so that every joined
answer (a segment's total in a month, customers with at least three orders, active customers in a
month, the top customers) is exact on every rotation. Rows are addressed in *cell order*: the order in
which the plan lays out a table's chunks and cells, before the generator sorts each chunk by time.
Codes: a segment index (0, 1, ...) for a row with a known parent, ``ORPHAN`` for a row whose parent
was deleted, ``NO_PARENT`` for a NULL key.
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from evalpack.spec.units import apportion

ORPHAN = -1
NO_PARENT = -2
NOT_PLACED = -3  # a row another step places (per_parent's periods)


GRAINS = ("month", "quarter", "year")


def periods(start: dt.date, end: dt.date, grain: str) -> list[tuple[str, dt.date, dt.date]]:
    """The calendar periods that meet ``start``..``end`` (both included), each as (label, first day, last day)
    clipped to that range; labels read ``2024-03``, ``2024-Q1`` or ``2024``."""
    months = {"month": 1, "quarter": 3, "year": 12}[grain]
    out, year, month = [], start.year, (start.month - 1) // months * months + 1
    while dt.date(year, month, 1) <= end:
        nxt_year, nxt_month = (year, month + months) if month + months <= 12 else (year + 1, month + months - 12)
        last = dt.date(nxt_year, nxt_month, 1) - dt.timedelta(days=1)
        out.append((period_of(dt.date(year, month, 1), grain), max(start, dt.date(year, month, 1)), min(end, last)))
        year, month = nxt_year, nxt_month
    return out


def period_of(day: dt.date, grain: str) -> str:
    """The label of the calendar period holding ``day`` (as ``periods`` writes it)."""
    return {"month": f"{day.year}-{day.month:02d}", "quarter": f"{day.year}-Q{(day.month - 1) // 3 + 1}",
            "year": f"{day.year}"}[grain]


def planned_labels(rows: int, weights: list[float], rng: np.random.Generator) -> np.ndarray:
    """A label code per row: each label's count by ``weights`` (at least one row each where the rows
    allow), in an order drawn from ``rng``."""
    minimum = 1 if rows >= len(weights) else 0
    counts = apportion(rows, weights, minimum=minimum)
    codes = np.repeat(np.arange(len(weights), dtype=np.int64), counts)
    rng.shuffle(codes)
    return codes


def scatter_unlinked(codes: np.ndarray, start: int, rows: int, orphans: int, nulls: int,
                     rng: np.random.Generator) -> None:
    """Mark ``orphans`` and ``nulls`` rows of ``codes[start:start + rows]`` at positions drawn from ``rng``."""
    if not orphans and not nulls:
        return
    picked = start + rng.permutation(rows)[: orphans + nulls]
    codes[picked[:orphans]] = ORPHAN
    codes[picked[orphans:]] = NO_PARENT


def bucket_counts(parents: int, rows: int, buckets: list[tuple[int, bool, float]], rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """Children per parent for ``parents`` parents sharing ``rows`` rows, by ``buckets`` (count, open, share),
    and which parents sit in the open bucket; None when the rows cannot fill the buckets (too few for the
    counts, or some left over with no open bucket)."""
    sizes = apportion(parents, [share for _, _, share in buckets]) if parents else np.zeros(len(buckets), np.int64)
    counts = np.repeat(np.array([c for c, _, _ in buckets], dtype=np.int64), sizes)
    is_open = np.repeat(np.array([o for _, o, _ in buckets], dtype=bool), sizes)
    spare = rows - int(counts.sum())
    open_at = np.flatnonzero(is_open)
    if spare < 0 or (spare and not len(open_at)):
        return None
    # a tenth of the open bucket stays at its floor, so that its bar (three or more) sits on parents
    growing = open_at[len(open_at) // 10:] if len(open_at) > 1 else open_at
    if spare:
        counts[growing] += rng.multinomial(spare, np.full(len(growing), 1 / len(growing)))
    order = rng.permutation(parents)
    return counts[order], is_open[order]


def separate_top(counts: np.ndarray, groups: np.ndarray, top: int, movable: np.ndarray, floor: int) -> bool:
    """Lower counts until the ``top + 1`` largest all differ and every other count is below them (no tie at or
    above the cut of a top-``top`` list): each lowered parent gives its surplus to the smallest ``movable`` parent
    of its group, and keeps at least ``floor``. False when that cannot be done."""
    if top <= 0:
        return True
    if len(counts) <= top:
        return False
    order = np.lexsort((np.arange(len(counts)), -counts))
    head = order[: top + 1]
    targets = counts[head].copy()
    for i in range(1, top + 1):
        targets[i] = min(targets[i], targets[i - 1] - 1)
    cap = int(targets[-1]) - 1
    crowd = order[top + 1:][counts[order[top + 1:]] > cap]  # outside the head, at or above its last count
    takers = movable.copy()
    takers[head] = False
    takers[crowd] = False
    for parent, target in list(zip(head, targets)) + [(p, cap) for p in crowd]:
        surplus = int(counts[parent] - target)
        if surplus <= 0:
            continue
        if not movable[parent] or target < floor:
            return False
        pool = np.flatnonzero(takers & (groups == groups[parent]) & (counts + surplus < cap))
        if not len(pool):
            return False
        taker = pool[np.argmin(counts[pool])]
        counts[parent] -= surplus
        counts[taker] += surplus
    return True


def favour(counts: np.ndarray, groups: np.ndarray, leaders: np.ndarray) -> None:
    """Give ``leaders``, in their order, the largest counts of their group, each swapping with the parent that
    held it (so every group keeps its counts as a multiset)."""
    taken = np.zeros(len(counts), dtype=bool)
    for leader in leaders:
        pool = np.flatnonzero((groups == groups[leader]) & ~taken)
        best = pool[np.argmax(counts[pool])]
        counts[leader], counts[best] = counts[best], counts[leader]
        taken[leader] = True


def lift_leaders(index: np.ndarray, groups: np.ndarray, leaders: np.ndarray, periods: list[np.ndarray],
                 floor: int) -> None:
    """Move rows in ``index`` (each row's parent) to the ``leaders`` until each leader's total is above every
    other parent's: a leader takes, within one period's ``rows``, rows of another parent of its group that has
    more than ``floor`` of them there, while the leader itself has at least ``floor`` there (both stay in the
    open bucket, so no period's count at or below a declared bar changes)."""
    parents = len(groups)
    totals = np.bincount(index[index >= 0], minlength=parents)
    others = np.ones(parents, dtype=bool)
    others[leaders] = False
    bar = int(totals[others].max()) if others.any() else -1
    per_period = [np.bincount(index[rows][index[rows] >= 0], minlength=parents) for rows in periods]
    for leader in leaders[np.argsort(totals[leaders], kind="stable")]:
        for rows, held in zip(periods, per_period):
            need = bar + 1 - int(totals[leader])
            if need <= 0:
                break
            if held[leader] < floor:
                continue
            donors = np.flatnonzero((groups == groups[leader]) & others & (held > floor))
            for donor in donors[np.argsort(-held[donors], kind="stable")]:
                give = min(need, int(held[donor]) - floor)
                moved = rows[index[rows] == donor][:give]
                index[moved] = leader
                held[donor] -= give
                held[leader] += give
                totals[donor] -= give
                totals[leader] += give
                need -= give
                if need <= 0:
                    break
        bar = int(totals[leader])


def tops_apart(counts: np.ndarray, top: int) -> bool:
    """Whether the ``top`` largest counts all differ and the next one is below them (no tie decides a
    top-``top`` list in order)."""
    if len(counts) <= top:
        return False
    head = np.sort(counts)[::-1][: top + 1]
    return bool((np.diff(head) < 0).all())


def assign(row_codes: np.ndarray, parent_codes: np.ndarray, counts: np.ndarray, rng: np.random.Generator
           ) -> np.ndarray:
    """The parent row of every child row: the rows of segment ``s`` go to parents of segment ``s``, parent
    ``p`` getting ``counts[p]`` of them, in an order drawn from ``rng``; unlinked rows keep their code."""
    out = row_codes.copy()
    for segment in np.flatnonzero(np.bincount(row_codes[row_codes >= 0])):
        rows = np.flatnonzero(row_codes == segment)
        parents = np.flatnonzero(parent_codes == segment)
        chosen = np.repeat(parents, counts[parents])
        out[rows] = rng.permutation(chosen)
    return out


def controlled_round(rows: list[int], columns: list[int]) -> np.ndarray:
    """Whole numbers with row sums ``rows`` and column sums ``columns`` (equal grand totals), each its
    proportional share ``rows[i] * columns[j] / total`` rounded down or up."""
    total = sum(columns)
    if not total:
        return np.zeros((len(rows), len(columns)), dtype=np.int64)
    exact = [[(ri * cj, total) for cj in columns] for ri in rows]
    floor = np.array([[a // b for a, b in row] for row in exact], dtype=np.int64)
    out = floor.copy()
    left_r = [int(r) - int(x) for r, x in zip(rows, out.sum(axis=1))]
    left_c = [int(c) - int(x) for c, x in zip(columns, out.sum(axis=0))]
    remainders = sorted(((a % b, i, j) for i, row in enumerate(exact) for j, (a, b) in enumerate(row)), reverse=True)
    for _, i, j in remainders:
        if left_r[i] > 0 and left_c[j] > 0:
            out[i, j] += 1
            left_r[i] -= 1
            left_c[j] -= 1
    while any(left_r):  # what the greedy pass left: a row and a column that still need a unit each, joined
        i = next(k for k, v in enumerate(left_r) if v)  # through a rounded-up cell (k, l) moved over to (k, j)
        j = next(k for k, v in enumerate(left_c) if v)
        step = next(((k, m) for k in range(len(rows)) for m in range(len(columns))
                     if out[i, m] == floor[i, m] and out[k, m] > floor[k, m] and out[k, j] == floor[k, j]), None)
        if step is None:
            out[i, j] += 1
        else:
            k, m = step
            out[i, m] += 1
            out[k, m] -= 1
            out[k, j] += 1
        left_r[i] -= 1
        left_c[j] -= 1
    return out
