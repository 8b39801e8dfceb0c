"""Your own protocols, retrievers, evaluation methods and RL algorithms, by name, and the code that adds them.

A run config's ``plugins:`` lists Python files (``my_ext.py``, in the working directory or beside the recipe) or
modules (``my_pkg.ext``, on ``PYTHONPATH``). Each is imported once, before the rest of the config is validated, and
registers what it adds with the register function of its kind:

- a protocol: ``searchrl.protocols.register_protocol("query_tags", QueryProtocol)``; ``rollout.protocol: query_tags``;
- a retriever: ``searchrl.retrieval.register_retriever("my_api", factory)``; ``retrieval.kind: my_api``;
- an evaluation method: ``searchrl.eval.register_method("my_rag", factory)``; ``evaluation.methods: [my_rag]``;
- an algorithm: ``searchrl.config.algorithms.declare(Algorithm("my_grpo", grouped=True))`` plus its advantage
  estimator, ``@searchrl.rl.advantages.register("my_grpo")``; ``algorithm.name: my_grpo``.

The config's fields accept the built-in names and the registered ones, checked when a config is validated (not when
this module loads), so a name a plugin registers is as good as a built-in one. Reward components need no plugin:
``reward.components`` names your function directly (``my_rewards.py:brevity``).

A stage of ``searchrl run`` records the digest of every plugin file and reward file it used, so editing one makes
the stage run again (:func:`code_digests`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from searchrl.utils import error_line

#: the names each kind accepts: the built-in ones, then what plugins register (:func:`add_name`).
NAMES: dict[str, list[str]] = {
    "protocol": [
        "search_r1",
        "r1_searcher",
        "r1_searcher_pp",
        "r_search",
        "rag_r1",
        "search_o1",
        "tool_call",
        "reason",
        "rag",
    ],
    "retriever": ["bm25", "dense", "hybrid", "remote", "web", "simulated", "mcp"],
    "method": ["direct", "cot", "naive_rag", "iterative_rag", "iter_retgen", "search_o1", "agent", "prior"],
}
_BUILTIN = {kind: tuple(names) for kind, names in NAMES.items()}
_MODULES: dict[str, ModuleType] = {}  # user files and plugins already run, by resolved path (or module name)


def same_definition(old: Any, new: Any) -> bool:
    """Whether ``new`` is ``old`` defined again: the same module and qualified name, as when a notebook cell or a
    reloaded module registers it a second time (then it replaces the first, instead of being refused)."""
    return old is not None and all(
        getattr(old, a, None) is not None and getattr(old, a, None) == getattr(new, a, None)
        for a in ("__module__", "__qualname__")
    )


def add_name(kind: str, name: str, again: bool = False) -> None:
    """Make ``name`` a valid value of ``kind``'s config field; a name already taken is refused, unless ``again``
    (the same definition registered again, :func:`same_definition`)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a {kind} needs a name (a non-empty string)")
    if again and name in NAMES[kind] and name not in _BUILTIN[kind]:
        return
    if name in NAMES[kind]:
        origin = "a built-in" if name in _BUILTIN[kind] else "an already registered"
        raise ValueError(f"{kind} {name!r} is {origin} {kind}; register yours under another name")
    NAMES[kind].append(name)


def registered(kind: str) -> list[str]:
    """The names plugins added to ``kind`` (not the built-in ones)."""
    return [n for n in NAMES[kind] if n not in _BUILTIN[kind]]


def known(kind: str) -> Callable[[str], str]:
    """A pydantic ``AfterValidator`` accepting ``kind``'s names, as they are when the config is validated."""

    def check(value: str) -> str:
        if value not in NAMES[kind]:
            raise ValueError(
                f"unknown {kind} {value!r}; one of: {', '.join(NAMES[kind])} (your own: register it in a module "
                "that plugins: lists)"
            )
        return value

    return check


def split_file(spec: str) -> tuple[str | None, str]:
    """The file of a ``file.py`` / ``file.py:name`` spec and the rest; ``(None, "")`` for a module or a built-in name.

    A colon not followed by a name is part of the path (a Windows drive: ``C:\\exp\\my_ext.py``).

    >>> split_file("exp/my_rewards.py:brevity"), split_file("my_ext.py"), split_file("mypkg.rewards:brevity")
    (('exp/my_rewards.py', ':brevity'), ('my_ext.py', ''), (None, ''))
    """
    file, colon, attr = spec.rpartition(":")
    if not colon or not attr.isidentifier():
        file, colon, attr = spec, "", ""
    return (file, colon + attr) if file.endswith(".py") else (None, "")


def absolute_file(spec: str) -> str:
    """``spec`` with its file named by its absolute path when the file exists (a dumped config then loads from any
    directory); anything else as given."""
    file, rest = split_file(spec)
    path = Path(file).expanduser() if file else None
    return f"{path.resolve()}{rest}" if path is not None and path.is_file() else spec


def _run_file(path: Path, prefix: str) -> ModuleType:
    """Execute a Python file once, as a module of its own in ``sys.modules`` (as an import would: dataclasses and
    pickle look it up)."""
    key = str(path)
    if key not in _MODULES:
        name = f"{prefix}_{hashlib.sha1(key.encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except BaseException:
            del sys.modules[name]
            raise
        _MODULES[key] = module
    return _MODULES[key]


def _import(name: str) -> ModuleType:
    """``importlib.import_module``, except that a module whose file already ran by its path (``my_ext.py``) is that
    module, not a second run of the file (which would register its names twice)."""
    if name not in sys.modules:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        origin = getattr(found, "origin", None)
        if origin and (key := str(Path(origin).resolve())) in _MODULES:
            sys.modules[name] = _MODULES[key]
            return _MODULES[key]
    module = importlib.import_module(name)
    if getattr(module, "__file__", None):
        _MODULES.setdefault(str(Path(module.__file__).resolve()), module)
    return module


def import_plugin(spec: str) -> ModuleType:
    """Import a plugin, a ``path/to/file.py`` or a ``module``, once; every failure is one line naming the fix."""
    if spec.endswith(".py"):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"plugin {spec!r}: there is no file {path} (nor beside the recipe)")
        load: Callable[[], ModuleType] = lambda: _run_file(path, "searchrl_plugin")  # noqa: E731
    else:
        load = lambda: _import(spec)  # noqa: E731
    try:
        return load()
    except Exception as err:  # noqa: BLE001 -- whatever the user's module raises on import: one line naming it
        fix = "" if spec.endswith(".py") else "; put its package on PYTHONPATH, or name its file (file.py)"
        raise ValueError(f"plugin {spec!r} cannot be loaded: {error_line(err)}{fix}") from None


def load_object(spec: str, what: str) -> Any:
    """The object a ``path/to/file.py:name`` or ``module:name`` spec names (``what``: "reward component", for the
    errors); the file runs once however many specs name it."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise ValueError(f"{what} {spec!r}: name it as 'path/to/file.py:name' or 'module:name'")
    path = Path(where).expanduser().resolve() if where.endswith(".py") else None
    if path is not None and not path.is_file():
        raise ValueError(f"{what} {spec!r}: there is no file {where}")
    try:
        module = _run_file(path, "searchrl_user") if path is not None else _import(where)
    except Exception as err:  # noqa: BLE001 -- whatever the user's module raises on import: one line naming it
        fix = "" if path is not None else "; put its package on PYTHONPATH, or name its file (file.py:name)"
        raise ValueError(f"{what} {spec!r}: {where} cannot be loaded: {error_line(err)}{fix}") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise ValueError(f"{what} {spec!r}: {where} has no {attr!r}")
    return obj


def _source_file(spec: str) -> Path | None:
    """The file behind a plugin or ``file.py:name`` / ``module:name`` spec (None: a built-in name, or no file)."""
    where = split_file(spec)[0] or (spec.rpartition(":")[0] if ":" in spec else spec)
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        return path if path.is_file() else None
    try:
        found = importlib.util.find_spec(where) if where else None
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def code_digests(specs: Iterable[str]) -> dict[str, str]:
    """``{spec: sha256 of its code}`` for the specs that name a user file or module (built-in names are skipped): the
    file, or every module of a package. What a finished stage records, so that editing a plugin or a reward function
    makes it run again. (Other modules a plugin file imports are not followed.)"""
    out = {}
    for spec in specs:
        path = _source_file(spec)
        if path is None or "site-packages" in path.parts or path.is_relative_to(_PACKAGE):
            continue
        files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
        h = hashlib.sha256()
        for f in files:
            h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes())
        out[spec] = h.hexdigest()[:16]
    return out


_PACKAGE = Path(__file__).resolve().parents[1]
