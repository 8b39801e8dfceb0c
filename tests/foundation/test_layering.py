"""The package's layers, enforced: every import in src/searchrl (top-level or inside a function) goes down or
sideways, never up, and no two units of one layer import each other in a cycle.

    foundation (config, config_eval, utils, models, tuning, device, shapes)
    < data, retrieval, protocols, generation
    < rollout < rewards < rl, sft
    < applications: eval, viz, pipeline, runner, preflight, validation, demo, testing, and every command module
      (``cli.py`` / ``*_cli.py``)
"""

from __future__ import annotations

import ast
from pathlib import Path

import searchrl

LAYERS: list[set[str]] = [
    {"searchrl", "config", "config_eval", "config_errors", "utils", "models", "tuning", "device", "shapes"},
    {"data", "retrieval", "protocols", "generation"},
    {"rollout"},
    {"rewards"},
    {"rl", "sft"},
    {"eval", "viz", "pipeline", "runner", "preflight", "validation", "demo", "testing", "cli", "__main__"},
]
APPS = len(LAYERS) - 1
ROOT = Path(searchrl.__file__).parent


def unit_of(module: str) -> str:
    """``searchrl.rl.trainer`` -> ``rl``; ``searchrl.config`` -> ``config``; ``searchrl`` -> ``searchrl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(unit: str, path: Path | None = None) -> int:
    if path is not None and (path.name == "cli.py" or path.name.endswith("_cli.py")):
        return APPS  # a command module may wire anything together
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"searchrl.{unit} has no layer: add it to LAYERS in {__file__}")


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, imported searchrl module)`` for every import statement in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "searchrl"]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports (searchrl....)"
            if node.module and node.module.split(".")[0] == "searchrl":
                if node.module == "searchrl":  # from searchrl import utils (a module) or __version__ (a name)
                    out += [(node.lineno, f"searchrl.{a.name}" if (root / a.name).exists()
                             or (root / f"{a.name}.py").exists() else "searchrl") for a in node.names]  # fmt: skip
                else:
                    out.append((node.lineno, node.module))
    return out


def layering_violations(root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    edges: dict[tuple[str, str], str] = {}  # same-layer unit -> unit, with one example site
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        parts = rel.with_suffix("").parts
        src_unit = unit_of(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        src_layer = layer_of(src_unit, path)
        for line, target in imports_of(path, root):
            dst_unit = unit_of(target)
            if dst_unit == src_unit:
                continue
            dst_layer = layer_of(dst_unit)
            site = f"{rel}:{line} imports {target}"
            if dst_layer > src_layer:
                problems.append(f"{site}: layer {src_layer} ({src_unit}) may not import layer {dst_layer} "
                                f"({dst_unit})")  # fmt: skip
            elif dst_layer == src_layer and src_layer != APPS:
                edges.setdefault((src_unit, dst_unit), site)
    for (a, b), site in edges.items():
        if (b, a) in edges and a < b:
            problems.append(f"cycle between {a} and {b}: {site}; {edges[(b, a)]}")
    return problems


def test_no_upward_imports_and_no_cycles() -> None:
    problems = layering_violations()
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "searchrl"
    (pkg / "rollout").mkdir(parents=True)
    (pkg / "rewards").mkdir()
    (pkg / "rollout" / "engine.py").write_text("def f():\n    from searchrl.rewards.metrics import exact_match\n")
    (pkg / "rewards" / "metrics.py").write_text("from searchrl.rollout.engine import f\n")
    (pkg / "rl").mkdir()
    (pkg / "sft").mkdir()
    (pkg / "rl" / "memorization.py").write_text("from searchrl.sft.types import SFTExample\n")
    (pkg / "sft" / "trainer.py").write_text("from searchrl.rl import algorithms\n")
    problems = layering_violations(pkg)
    assert any("rollout/engine.py:2 imports searchrl.rewards.metrics: layer 2" in p for p in problems), problems
    assert any(p.startswith("cycle between rl and sft") for p in problems), problems
    assert not any("rewards/metrics.py" in p for p in problems)  # downward is fine


def test_no_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"split these modules (600 lines at most): {long}"
