"""The package's layers, enforced: every import in src/searchrl (top-level or inside a function) goes down or
sideways, never up, and the units (a subpackage or a top-level module) import each other in no cycle of any length.

    foundation (config, utils, models, bundled, tuning, device, shapes, partial, storage)
    < data, retrieval, protocols, generation, tools
    < pipeline (the one resolver: config -> data, retriever, protocol, policy)
    < rollout < rewards < rl, sft
    < eval, viz, testing
    < stages, runner, preflight, validation, demo (a run's stages, their order and their checks)
    < commands, cli, __main__ (the application: flags -> overrides -> a stage)
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import searchrl

LAYERS: list[set[str]] = [
    {
        "searchrl",
        "_lazy",
        "config",
        "utils",
        "models",
        "bundled",
        "tuning",
        "device",
        "shapes",
        "partial",
        "httputil",
        "storage",
    },
    {"data", "retrieval", "protocols", "generation", "tools"},
    {"pipeline"},
    {"rollout"},
    {"rewards"},
    {"rl", "sft"},
    {"eval", "viz", "testing"},
    {"stages", "runner", "preflight", "demo", "validation"},
    {"commands", "cli", "__main__"},
]
ROOT = Path(searchrl.__file__).parent


def unit_of(module: str) -> str:
    """``searchrl.rl.trainer`` -> ``rl``; ``searchrl.config`` -> ``config``; ``searchrl`` -> ``searchrl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"searchrl.{unit} has no layer: add it to LAYERS in {__file__}")


def _typing_only(tree: ast.AST) -> set[int]:
    """The ids of the import statements under ``if TYPE_CHECKING:``, which never run."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, imported searchrl module)`` for every import statement in the file; a package's ``__init__`` leaves
    out those under ``if TYPE_CHECKING:`` (its lazy exports, for type checkers: they never run)."""
    out = []
    tree = ast.parse(path.read_text(), str(path))
    typing_only = _typing_only(tree) if path.name == "__init__.py" else set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "searchrl"]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports (searchrl....)"
            if node.module and node.module.split(".")[0] == "searchrl":
                if node.module == "searchrl":  # from searchrl import utils (a module) or __version__ (a name)
                    for a in node.names:
                        is_module = (root / a.name).exists() or (root / f"{a.name}.py").exists()
                        out.append((node.lineno, f"searchrl.{a.name}" if is_module else "searchrl"))
                else:
                    out.append((node.lineno, node.module))
    return out


def unit_edges(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """Every import between two units, with one example site (``file:line imports module``)."""
    edges: dict[tuple[str, str], str] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        parts = rel.with_suffix("").parts
        src = unit_of(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for line, target in imports_of(path, root):
            if (dst := unit_of(target)) != src:
                edges.setdefault((src, dst), f"{rel}:{line} imports {target}")
    return edges


def cycles(edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """The units that import each other in a cycle: the strongly connected components with more than one unit
    (Tarjan's algorithm), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layering_violations(root: Path = ROOT) -> list[str]:
    edges = unit_edges(root)
    problems = []
    for (a, b), site in edges.items():
        if layer_of(b) > layer_of(a):
            problems.append(f"{site}: layer {layer_of(a)} ({a}) may not import layer {layer_of(b)} ({b})")
    for component in cycles(edges):
        members = set(component)
        sites = [site for (a, b), site in edges.items() if a in members and b in members]
        problems.append(f"cycle between {', '.join(component)}: " + "; ".join(sites))
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
    assert any("rollout/engine.py:2 imports searchrl.rewards.metrics: layer 3" in p for p in problems), problems
    assert any(p.startswith("cycle between rl, sft") for p in problems), problems
    assert not any(
        p.startswith("rewards/metrics.py") or "searchrl/rewards/metrics.py" in p.split(":")[0] for p in problems
    )


def test_the_check_catches_a_cycle_of_three_units(tmp_path: Path) -> None:
    """a -> b -> c -> a within one layer: no two of them import each other, yet they form a cycle."""
    pkg = tmp_path / "searchrl"
    for unit, target in (("data", "retrieval"), ("retrieval", "protocols"), ("protocols", "data")):
        (pkg / unit).mkdir(parents=True)
        (pkg / unit / "mod.py").write_text(f"from searchrl.{target}.mod import x\n")
    (pkg / "generation").mkdir()
    (pkg / "generation" / "mod.py").write_text("from searchrl.data.mod import x\n")  # into the cycle, not part of it
    problems = layering_violations(pkg)
    assert [p.split(":")[0] for p in problems] == ["cycle between data, protocols, retrieval"], problems
    assert all(f"searchrl/{u}/mod.py:1" in problems[0] for u in ("data", "retrieval", "protocols"))


def test_the_commands_are_the_top_layer() -> None:
    """Nothing imports the command package but the entry points (``cli``, ``__main__``); commands live there only."""
    edges = unit_edges()
    into = {a for (a, b) in edges if b == "commands"}
    assert into <= {"cli", "__main__"}, into
    stray = [p for p in ROOT.rglob("*cli.py") if p.parent != ROOT]
    assert not stray, f"command modules belong in searchrl/commands: {stray}"


def test_no_module_is_over_500_lines_and_none_is_packed() -> None:
    """Modules stay readable: 500 lines at most, formatted by the formatter (no ``fmt: skip`` to pack lines)."""
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in ROOT.rglob("*.py")}
    long = {name: n for name, text in texts.items() if (n := len(text.splitlines())) > 500}
    assert not long, f"split these modules (500 lines at most): {long}"
    marker = "fmt: " + "skip"
    packed = sorted(name for name, text in texts.items() if marker in text)
    assert not packed, f"let the formatter format these modules (drop the {marker} comments): {packed}"


def test_lazy_exports_keep_the_layer_order() -> None:
    """A package's lazy names (its ``_EXPORTS`` table: name -> module, imported on first use) come from its own layer
    or below, like its import statements. The top level ``searchrl`` is the exception: its table re-exports the
    notebook names of every layer, and its ``__init__`` imports none of them until asked."""
    tables = [p.parent for p in ROOT.glob("*/__init__.py") if "_EXPORTS" in p.read_text()]
    assert {"rollout", "rl", "data", "sft"} <= {p.name for p in tables}
    for package in tables:
        module = importlib.import_module(f"searchrl.{package.name}")
        for name, where in module._EXPORTS.items():
            assert layer_of(unit_of(where)) <= layer_of(package.name), f"searchrl.{package.name}.{name} <- {where}"
    at_load = [target for _, target in imports_of(ROOT / "__init__.py") if target != "searchrl._lazy"]
    for package in [ROOT, *tables]:  # what type checkers see is what __getattr__ gives
        tree = ast.parse((package / "__init__.py").read_text())
        seen = {
            a.asname or a.name: node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and id(node) in _typing_only(tree)
            for a in node.names
        }
        exports = importlib.import_module("searchrl" if package == ROOT else f"searchrl.{package.name}")._EXPORTS
        assert seen == exports, f"{package / '__init__.py'}: its TYPE_CHECKING imports differ from _EXPORTS"
    assert not at_load, f"searchrl/__init__.py imports {at_load} at load time"
