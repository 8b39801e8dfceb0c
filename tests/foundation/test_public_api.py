"""The names a notebook reaches for: ``searchrl.X`` and the subpackages' main names, lazily imported, listed for
tab completion, and cheap to import."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import searchrl

PACKAGES = ["searchrl", "searchrl.rollout", "searchrl.rl", "searchrl.data", "searchrl.sft"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves_and_tab_completion_shows_it(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module)) and not {"lazy_exports", "annotations"} & set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        module.nope  # noqa: B018


def test_the_top_level_holds_the_notebook_names() -> None:
    from searchrl.config import load_config
    from searchrl.eval.harness import run_from_config
    from searchrl.rollout.engine import RolloutEngine

    names = {"load_config", "load_qa", "QAExample", "load_index", "build_index", "get_protocol", "RolloutEngine"}
    names |= {"Trainer", "evaluate", "run_from_config", "write_viewer", "read_trajectories", "load_policy"}
    assert names <= set(searchrl.__all__)
    assert searchrl.load_config is load_config and searchrl.RolloutEngine is RolloutEngine
    assert searchrl.run_from_config is run_from_config


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_loads_neither_torch_nor_transformers(package: str) -> None:
    code = (
        f"import sys, {package}; dir({package}); "
        "heavy = [m for m in ('torch', 'transformers', 'bm25s', 'faiss') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"import {package} loaded {out.strip()}"


def test_the_main_entry_points_say_what_they_take() -> None:
    import inspect

    from searchrl.eval.method import Method
    from searchrl.generation.base import Generator
    from searchrl.rollout.engine import RolloutEngine

    for fn in (Generator.generate, Method.answer, RolloutEngine.run, RolloutEngine.from_config):
        assert fn.__doc__ and len(fn.__doc__) > 100, fn.__qualname__
    params = [p for p in inspect.signature(RolloutEngine.__init__).parameters if p != "self"]
    undocumented = [p for p in params if f"    {p}: " not in RolloutEngine.__doc__]
    assert not undocumented, f"RolloutEngine's docstring lacks its arguments {undocumented}"
