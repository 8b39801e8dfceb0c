"""Every example in a docstring (``>>>``) runs and gives what it shows: a module's examples are part of its docs."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import searchrl

SRC = Path(searchrl.__file__).parent
MODULES = sorted(
    ".".join(("searchrl", *p.with_suffix("").relative_to(SRC).parts))
    for p in SRC.rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8")
)


def test_the_modules_with_examples_are_found() -> None:
    assert {"searchrl.rewards.metrics", "searchrl.viz.plots", "searchrl.protocols._tags"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
