"""Imports only go down the layers: schemas/ -> evalpack/ (engine) -> publish/ -> assets/ -> pipelines/.

Read from the source with ``ast``: every ``import`` and ``from ... import`` anywhere in a module, at
its top or inside a function, counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "evalpack": {"assets", "pipelines", "publish", "dagster", "dagster_duckdb", "dagster_dask", "dagster_webserver"},
    "publish": {"assets", "pipelines", "dagster"},
    "assets": {"pipelines"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_module_imports_a_layer_above_its_own(layer):
    offenders = {p.relative_to(ROOT).as_posix(): sorted(imported_packages(p) & FORBIDDEN[layer])
                 for p in sorted((ROOT / layer).rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from publish.cli import publish_command\n    import dagster.x\n")
    assert imported_packages(module) == {"publish", "dagster"}
