"""Loading a run config: recipes (YAML, by name or path), profiles (a machine's overlay on a recipe), dotted
command-line overrides, validation with errors that name the bad key and the layer that set it, and the resolved
config written beside a run's outputs.

A recipe is addressed by name (``search_r1_grpo`` -> ``searchrl/recipes/search_r1_grpo.yaml``) or by path; a
profile by name (``searchrl/recipes/profiles/NAME.yaml``) or path. Overrides use dotted paths:
``training.lr=1e-6 rollout.group_size=8``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Hashable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from searchrl.config.base import ConfigError
from searchrl.config.errors import flat_keys, validation_message
from searchrl.config.extensions import absolute_file, split_file
from searchrl.config.sections import RunConfig


def recipe_names() -> list[str]:
    root = resources.files("searchrl") / "recipes"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe's file: a path to a YAML file, else a shipped recipe's name (a directory of that name in the working
    directory, such as a run's, does not hide the recipe)."""
    p = Path(name_or_path)
    shipped = str(name_or_path) in recipe_names()
    if p.suffix in (".yaml", ".yml") or (p.exists() and not (shipped and p.is_dir())):
        if not p.is_file():
            what = "a directory, not a recipe file" if p.is_dir() else "recipe file not found"
            hint = f"; the shipped recipe is named {p.stem!r}, without .yaml" if p.stem in recipe_names() else ""
            raise ConfigError(f"{what}: {p}{hint} (give a path to a YAML file or one of: {recipe_names()})")
        return p
    root = resources.files("searchrl") / "recipes"
    candidate = Path(str(root / f"{name_or_path}.yaml"))
    if not candidate.exists():
        close = difflib.get_close_matches(str(name_or_path), recipe_names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown recipe '{name_or_path}'{hint} (available: {', '.join(recipe_names())})")
    return candidate


def profile_names() -> list[str]:
    root = resources.files("searchrl") / "recipes" / "profiles"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


class _Loader(yaml.SafeLoader):
    """YAML's safe loader reading ``1e-6`` and ``-2e0`` as numbers, as YAML 1.2 does (PyYAML's YAML 1.1 rules read
    them as strings, which only the typed settings turned back into numbers: a reward param stayed a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def yaml_value(text: str, what: str = "value") -> Any:
    """A value as an override or option writes it (``1e-6``, ``[a, b]``, ``{r: 8}``, ``null``, ``true``). Text that
    is no YAML value but a plain word (``*.jsonl``, ``@me``) is that string; a broken list or mapping is an error
    naming ``what`` (the override)."""
    try:
        return yaml.load(text, Loader=_Loader)  # a safe loader
    except yaml.YAMLError as err:
        if text.strip()[:1] not in ("[", "{"):
            return text
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{what}: {text!r} is not a valid YAML list or mapping ({problem}); fix it") from None


class _UniqueKeyLoader(_Loader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor`` merges; several are allowed
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # e.g. a list as a key: YAML's own error follows
                break
            if key in seen:
                mark = key_node.start_mark
                raise ConfigError(f"{mark.name}:{mark.line + 1}: key '{key}' is given twice; keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """A recipe or profile file, parsed; one-line errors with the line for bad syntax and repeated keys."""
    text = path.read_text(encoding="utf-8")
    try:
        loader = _UniqueKeyLoader(text)
        loader.name = str(path)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or err.__class__.__name__
        raise ConfigError(f"{where}: not valid YAML ({problem}); fix the file's syntax") from None


def load_profile(profile: str | Path, recipe_name: str) -> dict[str, Any]:
    """A profile overlay for one recipe: the profile's ``all:`` section, then its ``recipes: {NAME: ...}`` section.

    A profile (``src/searchrl/recipes/profiles/NAME.yaml`` or a path) shrinks a paper-scale recipe to a machine:
    model, retriever, data and step counts. Lists (e.g. ``pipeline``) replace the recipe's lists.
    """
    p = Path(profile)
    if p.suffix not in (".yaml", ".yml"):
        p = Path(str(resources.files("searchrl") / "recipes" / "profiles" / f"{profile}.yaml"))
    if not p.exists():
        close = difflib.get_close_matches(str(profile), profile_names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown profile '{profile}'{hint} (available: {', '.join(profile_names())})")
    raw = read_yaml(p) or {}
    unknown = {k for k in raw if not k.startswith("_")} - {"all", "recipes", "description"}  # _x: YAML anchors
    if unknown:
        raise ConfigError(
            f"{p}: unknown top-level key(s) {sorted(unknown)}; a profile has all:, recipes: (and _name: anchors)"
        )
    sections = raw.get("recipes") or {}
    if sections and recipe_name not in sections and recipe_name not in recipe_names():
        _warn_once(
            f"profile '{profile}' has no section for recipe '{recipe_name}', so only its all: settings apply (it has "
            f"sections for {', '.join(sorted(sections))}); a recipe copied from one of those keeps that name: to "
            "take its section"
        )
    out = deep_merge({}, raw.get("all") or {})
    return deep_merge(out, sections.get(recipe_name) or {})


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    from rich.markup import escape

    from searchrl.utils import console

    if message not in _WARNED:
        _WARNED.add(message)
        console.log(f"[yellow]warning:[/yellow] {escape(message)}")


def _set_dotted(d: dict[str, Any], dotted: str, value: Any, item: str, where: str) -> None:
    """``value`` at ``dotted`` inside ``d`` (``where`` in the config); an error names ``item``, the override."""
    keys = dotted.split(".")
    cur = d
    for n, k in enumerate(keys[:-1], 1):
        cur = cur.setdefault(k, {})
        if not isinstance(cur, dict):
            here = ".".join([where, *keys[:n]])
            raise ConfigError(f"override '{item}': {here} is a value ({cur!r}), not a section")
    cur[keys[-1]] = value


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["training.lr=1e-6", "rollout.group_size=4"]`` -> nested dict (values read as YAML): the overrides applied
    to an empty config (:func:`apply_overrides`)."""
    return apply_overrides({}, overrides)


def override_key(key: str) -> str:
    """A dotted key as the config names it: a list entry by its index, ``reward.components[1].params`` ->
    ``reward.components.1.params``."""
    return re.sub(r"\[(\d+)\]", r".\1", key.strip())


def _with_value(node: Any, keys: list[str], value: Any, item: str, done: tuple[str, ...] = ()) -> Any:
    """A copy of ``node`` with ``value`` at ``keys``: a dict merges into a section key by key (``{}`` empties it), a
    number names a list's entry (``reward.components.1.params.penalty=-1``)."""
    if not keys:
        return deep_merge(node, value) if value and isinstance(value, dict) and isinstance(node, dict) else value
    key, rest, here = keys[0], keys[1:], ".".join(done)
    if isinstance(node, list):
        if not key.isdigit():
            example = ".".join([here, "0", key, *rest])
            raise ConfigError(f"override '{item}': {here} is a list; name an entry by its index, e.g. {example}")
        if int(key) >= len(node):
            raise ConfigError(f"override '{item}': {here} has {len(node)} entries, numbered from 0")
        return [_with_value(v, rest, value, item, (*done, key)) if i == int(key) else v for i, v in enumerate(node)]
    if node is None:
        node = {}
    if not isinstance(node, dict):
        raise ConfigError(f"override '{item}': {here} is a value ({node!r}), not a section")
    return {**node, key: _with_value(node.get(key), rest, value, item, (*done, key))}


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``raw`` with dotted overrides (``training.lr=1e-6``, ``model.lora={r: 8}``, ``reward.components[1].weight=2``;
    values read as YAML), each in turn; ``raw`` itself is left as it was."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value (e.g. training.lr=1e-6)")
        key, text = item.split("=", 1)
        raw = _with_value(raw, override_key(key).split("."), yaml_value(text, f"override '{item}'"), item)
    return raw


def _set_stage_values(raw: dict[str, Any], items: list[str], source: str) -> dict[str, Any]:
    """``pipeline.<stage>.<key>=value`` overrides: a value of the pipeline stage of that name (e.g.
    ``pipeline.split.args.heldout=20``); an unknown stage names the recipe's stages."""
    if not items:
        return raw
    stages = [dict(st) if isinstance(st, dict) else st for st in raw.get("pipeline") or []]
    by_name = {st.get("name"): st for st in stages if isinstance(st, dict)}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like pipeline.STAGE.key=value (e.g. ...args.heldout=20)")
        key, value = item.split("=", 1)
        _, name, *rest = key.strip().split(".")
        if not rest:
            raise ConfigError(f"override '{item}': name a value of the stage, e.g. pipeline.{name}.args.heldout=20")
        if name not in by_name:
            known = ", ".join(str(n) for n in by_name) or "none"
            raise ConfigError(f"override '{item}': {source} has no pipeline stage '{name}' (its stages: {known})")
        stage = by_name[name]
        if rest[0] == "set" and len(rest) > 1:  # a stage's set: holds dotted config keys, as the recipes write them
            stage["set"] = {**(stage.get("set") or {}), ".".join(rest[1:]): yaml_value(value, f"override '{item}'")}
            continue
        if isinstance(stage.get(rest[0]), dict):  # copy what is changed, so the recipe's own dicts stay as read
            stage[rest[0]] = json.loads(json.dumps(stage[rest[0]]))
        _set_dotted(stage, ".".join(rest), yaml_value(value, f"override '{item}'"), item, f"pipeline.{name}")
    return {**raw, "pipeline": stages}


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, dicts merged key by key; an empty dict empties the key (``sft.oracle_mix={}``)."""
    merged = dict(base)
    for k, v in extra.items():
        merged[k] = deep_merge(merged[k], v) if v and isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def validate_dict(raw: dict[str, Any], source: str = "<config>", origins: dict[str, str] | None = None) -> RunConfig:
    """Validate a raw config; a ConfigError names the bad key and where its value came from: ``origins`` maps dotted
    keys to the layer that set them (a command-line override, a profile), anything else is blamed on ``source``."""
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        stages = raw.get("pipeline") if isinstance(raw, dict) else None
        stages = stages if isinstance(stages, list) else []
        names = [st.get("name") if isinstance(st, dict) else None for st in stages]
        raise ConfigError(validation_message(err, RunConfig, source, origins or {}, names)) from None


def _code_beside(raw: dict[str, Any], where: Path) -> dict[str, Any]:
    """A recipe's plugin files and reward files (``file.py`` / ``file.py:function``) that are not in the working
    directory but beside the recipe, named by their absolute paths there."""

    def placed(spec: Any) -> Any:
        if not isinstance(spec, str):
            return spec
        file, rest = split_file(spec)
        if file is None or Path(file).expanduser().is_absolute() or Path(file).is_file():
            return spec
        return absolute_file(f"{where / file}{rest}")

    out = dict(raw)
    if isinstance(raw.get("plugins"), list):
        out["plugins"] = [placed(p) for p in raw["plugins"]]
    reward = raw.get("reward")
    if isinstance(reward, dict) and isinstance(reward.get("components"), list):
        comps = [{**c, "name": placed(c.get("name"))} if isinstance(c, dict) else c for c in reward["components"]]
        out["reward"] = {**reward, "components": comps}
    return out


def load_config(
    recipe: str | Path | None = None, overrides: list[str] | None = None, profile: str | Path | None = None
) -> RunConfig:
    """The recipe (or the defaults), then the profile overlay (``--profile``), then dotted overrides."""
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if recipe is not None:
        path = recipe_path(recipe)
        source = str(path)
        raw = read_yaml(path) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a recipe must be a mapping of sections (model:, data:, ...)")
        raw = _code_beside(raw, path.parent)
    origins: dict[str, str] = {}
    if profile:
        name = str(raw.get("name") or (Path(str(recipe)).stem if recipe is not None else "default"))
        layer = load_profile(profile, name)
        raw = deep_merge(raw, layer)
        origins.update(dict.fromkeys(flat_keys(layer), f"profile {profile}"))
    return _overridden(raw, overrides or [], source, origins)


def _overridden(
    raw: dict[str, Any], overrides: list[str], source: str, origins: dict[str, str], label: str = "command-line"
) -> RunConfig:
    if overrides:
        stage_items = [o for o in overrides if o.strip().startswith("pipeline.")]
        raw = apply_overrides(raw, [o for o in overrides if o not in stage_items])
        raw = _set_stage_values(raw, stage_items, source)
        for item in overrides:
            origins[override_key(item.split("=", 1)[0])] = f"{label} override '{item}'".lstrip()
    return validate_dict(raw, source, origins)


def with_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """A copy of ``cfg`` with dotted overrides (``["training.lr=2e-6", "pipeline.rl.args.steps=5"]``), validated as a
    whole again, as :func:`load_config` validates them. Sections are frozen: this is how to change one in Python."""
    return _overridden(json.loads(cfg.model_dump_json()), list(overrides), "<config>", {}, "")


def to_yaml(cfg: RunConfig) -> str:
    """The fully resolved config (every default filled in) as YAML text, as ``config.yaml`` holds it."""
    return yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False)


def dump_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the fully resolved config (every default filled in) beside a run's outputs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_yaml(cfg), encoding="utf-8")
    return path


def record_run(cfg: RunConfig, out_dir: str | Path) -> Path:
    """A run's record in ``out_dir``: its resolved config (``config.yaml``) and one more line of ``run_info.jsonl``
    (:func:`searchrl.utils.run_environment`: command, versions, commit, hardware; a resumed run adds a line)."""
    from searchrl.utils import run_environment

    out_dir = Path(out_dir)
    path = dump_config(cfg, out_dir / "config.yaml")
    with (out_dir / "run_info.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(run_environment()) + "\n")
    return path
