"""Dagster software-defined assets over the evalpack engine: one module per stage of a pack build.

spec -> rotation_tables (one step per rotation) -> questions -> verification -> near_miss
     -> certificate (questions.jsonl, certificate.json, manifest.json, README.md, verify.py) -> attestation -> pack
"""

from assets.attestation import attestation, attestation_verifies
from assets.certificate import certificate, shipped_questions_verify_on_every_rotation
from assets.common import GROUP, PACKS, EvalpackResource
from assets.near_miss import near_miss, near_miss_survival_under_threshold
from assets.pack import pack
from assets.questions import questions
from assets.spec import SpecConfig, spec
from assets.tables import rotation_tables
from assets.verification import rotations_hold_the_answer_key, verification

ALL_ASSETS = [spec, rotation_tables, questions, verification, near_miss, certificate, attestation, pack]
ALL_CHECKS = [rotations_hold_the_answer_key, near_miss_survival_under_threshold,
              shipped_questions_verify_on_every_rotation, attestation_verifies]

__all__ = [
    "ALL_ASSETS", "ALL_CHECKS", "GROUP", "PACKS", "EvalpackResource", "SpecConfig",
    "spec", "rotation_tables", "questions", "verification", "near_miss", "certificate", "attestation", "pack",
    "rotations_hold_the_answer_key", "near_miss_survival_under_threshold",
    "shipped_questions_verify_on_every_rotation", "attestation_verifies",
]
