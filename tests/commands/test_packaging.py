"""What a wheel of evalpack holds: every package of the four the layers live in, subpackages included.

An editable install finds any module of the checkout, so a package missing from pyproject.toml's list shows only
in a wheel (`pip install .`, the image the README's cluster setup builds): evalpack.questions.families was missing once."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("evalpack", "assets", "pipelines", "publish")


def test_the_wheel_s_packages_are_every_package_of_the_layers():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "find" in config["packages"], "a fixed list of packages misses the subpackages added later"
    found = set(find_packages(str(ROOT), **config["packages"]["find"]))
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for layer in LAYERS
               for init in (ROOT / layer).rglob("__init__.py") if "__pycache__" not in init.parts}
    assert found == on_disk and {"evalpack.questions.families", *LAYERS} <= found
