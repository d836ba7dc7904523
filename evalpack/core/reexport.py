"""How a stage's ``__init__`` re-exports its public names without importing its modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for the package ``package`` whose public names are ``exports``
    (relative module name -> names it holds): each name is imported from its module when first asked for, so that
    importing a stage imports none of its modules (and no stage's ``__init__`` can close an import circle)."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted(home)

    return __getattr__, __dir__, sorted(home)
