"""Every config field is read by the package: a field nothing reads is a setting that silently does nothing.

A field ``section.field`` counts as read when some module outside the config's own package (searchrl/config/)
reads the attribute ``field`` of the section (a top-level field such as ``description``: of ``cfg`` or a name
annotated ``RunConfig``): ``cfg.rollout.max_turns``, or of a name bound to the section
(``r = cfg.retrieval`` then ``r.kind``; ``self.cfg, self.scfg = cfg, cfg.sft``; ``for comp in cfg.reward.components``;
``entry = as_entry(raw)`` for ``raw`` in ``ev.datasets``; a parameter annotated with the section's class), or through
``getattr(..., "field")``. A bare name (``.seed``) is not enough: every section has one.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from pydantic import BaseModel

import searchrl
from searchrl.config import RunConfig

ROOT = Path(searchrl.__file__).parent
#: the package that defines the config (searchrl/config/): its validators read fields, which is not use.
CONFIG_PACKAGE = ROOT / "config"
#: fields read only dynamically (by a name built at run time), or only by your own code, with where. Each must still
#: exist.
DYNAMIC: dict[str, str] = {
    "retrieval.options": "the factory of a retriever kind a plugin registers (searchrl.retrieval.register_retriever)",
}


def section_model(annotation: object) -> type[BaseModel] | None:
    """The pydantic model a field holds: ``WebConfig``, ``LoraConfig | None``, ``list[StageConfig]``."""
    for a in (annotation, *typing.get_args(annotation)):
        for b in (a, *typing.get_args(a)):
            if isinstance(b, type) and issubclass(b, BaseModel):
                return b
    return None


#: the name a top-level field is read from (``cfg.description``), beside the names annotated ``RunConfig``.
TOP = "cfg"


def config_fields(model: type[BaseModel] = RunConfig, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """``(dotted path, section name, section class name)`` for every field, the top level's under :data:`TOP`."""
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        yield path, prefix.split(".")[-1] if prefix else TOP, model.__name__
        if (sub := section_model(field.annotation)) is not None:
            yield from config_fields(sub, path)


def _last_name(node: ast.AST) -> str | None:
    """``cfg.rollout`` -> ``rollout``; ``scfg`` -> ``scfg``; anything else -> None."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _refers(node: ast.AST, names: set[str]) -> bool:
    """Whether an expression is (an element of, a wrapper around) a section or one of its aliases ``names``."""
    if isinstance(node, ast.Name | ast.Attribute):
        return _last_name(node) in names
    if isinstance(node, ast.Call):
        return any(_refers(a, names) for a in node.args)
    if isinstance(node, ast.Subscript | ast.Starred):
        return _refers(node.value, names)
    if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
        return any(_refers(g.iter, names) for g in node.generators)
    if isinstance(node, ast.BoolOp):
        return any(_refers(v, names) for v in node.values)
    if isinstance(node, ast.IfExp):
        return _refers(node.body, names) or _refers(node.orelse, names)
    return False


def _targets(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Tuple | ast.List):
        return [n for t in target.elts for n in _targets(t)]
    name = _last_name(target)
    return [name] if name else []


@cache
def _module(path: Path) -> tuple[list[tuple[list[str], ast.AST]], list[tuple[str, str]], list[tuple[str, str]]]:
    """A module's bindings ``(target names, value)``, annotated names ``(name, annotation text)`` and attribute
    reads ``(owner's last name, attribute)``."""
    tree = ast.parse(path.read_text(), str(path))
    bindings: list[tuple[list[str], ast.AST]] = []
    annotated: list[tuple[str, str]] = []
    reads: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    bindings += [(_targets(t), v) for t, v in zip(target.elts, node.value.elts, strict=False)]
                else:
                    bindings.append((_targets(target), node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            bindings.append((_targets(node.target), node.value))
        elif isinstance(node, ast.For | ast.comprehension):
            bindings.append((_targets(node.target), node.iter))
        elif isinstance(node, ast.NamedExpr):
            bindings.append((_targets(node.target), node.value))
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotated.append((node.arg, ast.unparse(node.annotation)))
        elif isinstance(node, ast.AnnAssign):
            annotated += [(n, ast.unparse(node.annotation)) for n in _targets(node.target)]
        if isinstance(node, ast.Attribute) and (owner := _last_name(node.value)) is not None:
            reads.append((owner, node.attr))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            reads.append(("*", str(node.args[1].value)))
    return bindings, annotated, reads


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if CONFIG_PACKAGE not in p.parents)


def is_read(section: str, class_name: str, field: str) -> bool:
    for path in _modules():
        bindings, annotated, reads = _module(path)
        names = {section} | {n for n, ann in annotated if class_name in ann.replace("|", " ").split()}
        while True:  # aliases of aliases: entries = [as_entry(d) for d in ev.datasets]; for e in entries
            more = {n for targets, value in bindings if _refers(value, names) for n in targets} - names
            if not more:
                break
            names |= more
        if any(attr == field and owner in names | {"*"} for owner, attr in reads):
            return True
    return False


def test_every_config_field_is_read() -> None:
    unread = [
        path
        for path, section, cls in config_fields()
        if path not in DYNAMIC and not is_read(section, cls, path.split(".")[-1])
    ]
    assert not unread, f"config fields nothing reads (use them, or delete them and their recipe lines): {unread}"


def test_dynamic_allow_list_names_real_fields() -> None:
    paths = {path for path, _, _ in config_fields()}
    stale = sorted(set(DYNAMIC) - paths)
    assert not stale, f"DYNAMIC in {__file__} names fields the config no longer has: {stale}; remove them"


def test_the_check_finds_an_unread_field() -> None:
    """The walk reaches nested sections and a field no module reads is reported."""
    paths = {path for path, _, _ in config_fields()}
    assert {"data.world.entities", "retrieval.web.pages", "reward.components.params", "pipeline.set"} <= paths
    assert {"name", "description", "pipeline"} <= paths  # the top level too
    assert is_read("rollout", "RolloutConfig", "max_turns")
    assert not is_read("rollout", "RolloutConfig", "no_such_field_anywhere")
    assert is_read(TOP, "RunConfig", "name")
    # an attribute of other objects does not count (a tool's .description is not the recipe's): the package reads
    # its MCP tools' .input_schema, which is no read of the config
    assert any(attr == "input_schema" for path in _modules() for _, attr in _module(path)[2])
    assert not is_read(TOP, "RunConfig", "input_schema")
