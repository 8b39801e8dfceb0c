"""Lazy re-exports for a package's ``__init__``: each name is imported from its module on first use, so importing the
package stays cheap, and tab completion lists the names before any is imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``exports`` map a name to the module defining it;
    ``namespace`` is the package's ``globals()`` (its submodules appear there once imported)."""

    def __getattr__(name: str) -> Any:  # noqa: N807 -- the module hook's name
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*namespace, *exports} - {"annotations", "lazy_exports", "TYPE_CHECKING"})

    return __getattr__, __dir__
