"""Dagster software-defined assets over the evalpack engine: one module per stage of a pack build.

spec -> questions -> rotations (one step per rotation: tables, then the engine's per-rotation checks)
     -> verification (verdicts, near-miss study, audit) -> certificate (questions.jsonl, certificate.json,
        manifest.json, README.md, verify.py) -> attestation -> pack
"""

from assets.attestation import attestation, attestation_verifies
from assets.certificate import certificate, shipped_questions_verify_on_every_rotation
from assets.common import GROUP, PACKS, EvalpackResource
from assets.pack import pack
from assets.questions import questions
from assets.rotations import rotations
from assets.spec import SpecConfig, spec
from assets.verification import near_miss_survival_under_threshold, rotations_hold_the_answer_key, verification

ALL_ASSETS = [spec, questions, rotations, verification, certificate, attestation, pack]
ALL_CHECKS = [rotations_hold_the_answer_key, near_miss_survival_under_threshold,
              shipped_questions_verify_on_every_rotation, attestation_verifies]

__all__ = [
    "ALL_ASSETS", "ALL_CHECKS", "GROUP", "PACKS", "EvalpackResource", "SpecConfig",
    "spec", "questions", "rotations", "verification", "certificate", "attestation", "pack",
    "rotations_hold_the_answer_key", "near_miss_survival_under_threshold",
    "shipped_questions_verify_on_every_rotation", "attestation_verifies",
]
