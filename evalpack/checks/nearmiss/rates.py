"""What the near-miss study's counts mean, in one place: the manifest, the card, Dagster's metadata, `evalpack diff`
and the release gate all read a study's survival through :func:`survival_rate`.

Per operator, ``mutants`` counts the mutants run: equivalent ones (``equivalent``) and those whose first non-match
was an error (``errored``) are counted apart, never inside it. A survivor (``match_all``) matched on every rotation.
"""

from __future__ import annotations

from collections.abc import Mapping


def survival_rate(operators: Mapping[str, Mapping[str, int]]) -> float | None:
    """The share (0 to 1) of the mutants run that match on every rotation; None when none ran."""
    run = sum(int(row.get("mutants", 0)) for row in operators.values())
    return sum(int(row.get("match_all", 0)) for row in operators.values()) / run if run > 0 else None


__all__ = ["survival_rate"]
