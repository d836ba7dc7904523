"""Shared fixtures: the example packs, built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpack.build import build_pack

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"


@pytest.fixture(scope="session")
def retail_pack(tmp_path_factory) -> Path:
    """schemas/retail.yaml built with 3 rotations (read-only: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("packs") / "retail"
    build_pack(SCHEMAS / "retail.yaml", out, rotations=3)
    return out


@pytest.fixture(scope="session")
def finance_pack(tmp_path_factory) -> Path:
    """schemas/finance.yaml built with 3 rotations (read-only: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("packs") / "finance"
    build_pack(SCHEMAS / "finance.yaml", out, rotations=3)
    return out


def build_variant(tmp_path_factory, name: str, old: str, new: str) -> Path:
    """schemas/retail.yaml with one text edit (which must apply), built with 3 rotations."""
    text = (SCHEMAS / "retail.yaml").read_text()
    assert old in text, f"{old!r} is not in schemas/retail.yaml"
    spec_path = tmp_path_factory.mktemp("spec") / f"{name}.yaml"
    spec_path.write_text(text.replace(old, new))
    out = tmp_path_factory.mktemp("packs") / name
    build_pack(spec_path, out, rotations=3)
    return out
