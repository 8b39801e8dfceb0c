"""Deep config validation: the free-form parts of a recipe checked before any model, retriever or data is loaded.

The schema (:mod:`searchrl.config`) stops at four free-form mappings; :func:`validate_deep` checks them the way a
run would use them, with stand-ins for the runtime dependencies:

- ``rollout.options``: the protocol is built from the config (``searchrl.pipeline.make_protocol``), and the rollout
  engine around it with a stand-in generator, so an unknown option or a limit the protocol cannot honour fails;
- ``reward.components[].params``: each component is built by the reward composer with a stand-in reader and judge;
- ``pipeline[].set``: every dotted key is checked against the config's schema, then the stage's merged config is
  validated (and, when it changes them, its protocol and rewards are built again);
- ``pipeline[].args``: every key is checked against the arguments the stage's op accepts (:func:`stage_arg_names`).

Problems are collected and raised as one :class:`~searchrl.config.ConfigError`, one line each, naming the key path
and the valid choices.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from searchrl.config import ConfigError, RewardComponent, RunConfig, StageConfig
from searchrl.config.loading import override_key

#: stage fields the runner sets itself: as args they would fight those fields.
_SET_BY_RUNNER = {
    "recipe": "the stage's recipe:",
    "set": "the stage's set:",
    "profile": "the run's --profile",
    "out": "the stage's directory (not settable)",
    "model": "the stage's init_from:",
    "data": "the stage's data:",
    "world": "the stage's data:",
    "index": "the stage's index:",
}


class _StandIn:
    """A runtime dependency (reward reader, judge) for a check that passes no inputs; never called."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - a check passes no inputs
        raise RuntimeError("a stand-in dependency was called during a config check")


class _StandInGenerator:
    """What the rollout engine reads of a generator when it is built: its tokenizer (none needed for the check)."""

    tokenizer = None


def _unknown(where: str, key: str, owner: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{where}: unknown key '{key}' for {owner}{hint}; valid: {', '.join(valid) or 'none'}"


def _error_text(err: Exception) -> str:
    return str(err).removeprefix("Value error, ")


# ---------------------------------------------------------------------------------------------------- protocol


def protocol_problems(cfg: RunConfig) -> list[str]:
    """``rollout.options`` against the protocol's options; then the protocol and rollout engine, built."""
    from searchrl.pipeline import make_protocol
    from searchrl.protocols import PROTOCOLS
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits

    name = cfg.rollout.protocol
    valid = sorted(getattr(PROTOCOLS[name], "option_defaults", {}))
    unknown = sorted(set(cfg.rollout.options) - set(valid))
    if unknown:
        return [_unknown("rollout.options", k, f"protocol '{name}'", valid) for k in unknown]
    try:
        protocol = make_protocol(cfg)
    except (TypeError, ValueError) as err:
        return [f"rollout.options: {_error_text(err)}"]
    try:
        RolloutEngine(_StandInGenerator(), None, protocol, RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk))
    except (TypeError, ValueError) as err:
        return [f"rollout: {_error_text(err)}"]
    return []


# ----------------------------------------------------------------------------------------------------- rewards


def _component_params(comp: RewardComponent) -> list[str] | None:
    """The params a reward component takes (None: its function checks them itself and gives no list)."""
    from searchrl.protocols.base import FORMAT_SCHEMES
    from searchrl.rewards.components import _DEPENDENCIES, component_fn

    sig = inspect.signature(component_fn(comp.name)).parameters
    dep = _DEPENDENCIES.get(comp.name)
    names = [p for p, v in sig.items() if p not in ("inputs", dep) and v.kind != v.VAR_KEYWORD]
    if any(v.kind == v.VAR_KEYWORD for v in sig.values()):  # format: the params of the scheme ``paper`` names
        scheme = FORMAT_SCHEMES.get(comp.params.get("paper"))  # type: ignore[arg-type]
        if scheme is None:
            return None  # the composer names the valid papers
        names += list(inspect.signature(scheme[0]).parameters)[3:]  # after (report, n_searches, evidence)
    return names


def reward_problems(cfg: RunConfig) -> list[str]:
    """Each ``reward.components[i].params`` key and value, then the components together (duplicates)."""
    import searchrl.protocols  # noqa: F401  (its modules register the format schemes)
    from searchrl.rewards.components import RewardComposer

    deps = {"reader": _StandIn(), "judge": _StandIn()}
    problems: list[str] = []
    for i, comp in enumerate(cfg.reward.components):
        where = f"reward.components[{i}].params"
        try:
            valid = _component_params(comp)
        except ValueError as err:  # your own component's file or module cannot be loaded
            problems.append(f"reward.components[{i}].name: {_error_text(err)}")
            continue
        unknown = sorted(set(comp.params) - set(valid)) if valid is not None else []
        if unknown:
            problems += [_unknown(where, k, f"component '{comp.name}'", valid or []) for k in unknown]
            continue
        try:
            RewardComposer([comp], **deps)
        except (TypeError, ValueError) as err:
            problems.append(f"{where}: {_error_text(err)}")
    if not problems:
        try:
            RewardComposer(cfg.reward.components, **deps)
        except (TypeError, ValueError) as err:
            problems.append(f"reward.components: {_error_text(err)}")
    return problems


# ---------------------------------------------------------------------------------------------------- pipeline


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``WebConfig``, ``LoraConfig | None``), or None for a plain value."""
    for a in (annotation, *get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _is_mapping(annotation: Any) -> bool:
    """Whether a field holds a free-form mapping (``dict[str, Any]``, possibly ``| None``)."""
    return any(get_origin(a) is dict or a is dict for a in (annotation, *get_args(annotation)))


def dotted_key_problem(key: str, model: type[BaseModel] = RunConfig) -> str | None:
    """Why ``key`` (``training.steps``) is not a dotted path into ``model``'s schema; None when it is. Keys under a
    free-form mapping (``rollout.options.multi_query``) pass here: the merged config's checks judge them. A list
    entry is named by its index, as an override names it (``reward.components[1].weight``)."""
    parts = override_key(key).split(".")
    cls: type[BaseModel] | None = model
    listed = False  # the field before held a list of sections: an index names an entry
    for n, part in enumerate(parts):
        prefix = ".".join(parts[:n])
        if listed and part.isdigit():
            listed = False
            continue
        if cls is None:
            return f"unknown key '{key}': '{prefix}' is a value, not a section"
        field = cls.model_fields.get(part)
        if field is None:
            valid = [f"{prefix}.{f}" if prefix else f for f in cls.model_fields]
            close = difflib.get_close_matches(".".join(parts[: n + 1]), valid, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            return f"unknown key '{key}'{hint}; valid: {', '.join(valid)}"
        if _is_mapping(field.annotation):
            return None
        cls = _section_model(field.annotation)
        listed = any(get_origin(a) is list for a in (field.annotation, *get_args(field.annotation)))
    return None


def algorithm_problems(cfg: RunConfig) -> list[str]:
    """An algorithm a plugin declared without registering its advantage estimator (the trainer would fail)."""
    from searchrl.rl.advantages import ESTIMATORS

    name = cfg.algorithm.name
    if name in ESTIMATORS:
        return []
    fix = f"add @register({name!r}) (searchrl.rl.advantages) beside its declare()"
    return [f"algorithm.name: {name} is declared but has no advantage estimator; {fix}"]


def stage_problems(cfg: RunConfig, load: Callable[[str], RunConfig], run_dir: Path = Path("<run>")) -> list[str]:
    """``pipeline.<stage>.args`` and ``pipeline.<stage>.set`` of every stage, and each stage's merged config."""
    from searchrl.runner import stage_arg_names
    from searchrl.stages.chain import _subst, stage_config, stage_output

    problems: list[str] = []
    refs: dict[str, str] = {"run": str(run_dir)}
    base_values = cfg.model_dump()
    for raw_stage in cfg.pipeline:
        label = f"pipeline.{raw_stage.name}"
        names = stage_arg_names(raw_stage.kind, raw_stage.op) if raw_stage.args else set()
        owner = f"op '{raw_stage.op}'" if raw_stage.kind == "data" else f"{raw_stage.kind} stages"
        for key in sorted(raw_stage.args):
            if key in names:
                continue
            line = _unknown(f"pipeline.{raw_stage.name}.args", key, owner, sorted(names))
            if key in _SET_BY_RUNNER and raw_stage.kind == "data":
                line += f" ('{key}' is set by the runner from {_SET_BY_RUNNER[key]})"
            elif not names:
                line += " (config values go in set:)"
            problems.append(line)
        bad_keys = [p for k in raw_stage.set if (p := dotted_key_problem(k)) is not None]
        problems += [f"pipeline.{raw_stage.name}.set: {p}" for p in bad_keys]
        try:
            stage = StageConfig.model_validate(_subst(raw_stage.model_dump(), refs, raw_stage.name, base_values))
            if not bad_keys:
                base = load(stage.recipe) if stage.recipe else cfg
                scfg = stage_config(base, stage, None, None)
                if stage.recipe or any(k.split(".")[0] in ("rollout", "retrieval", "reward") for k in stage.set):
                    problems += [f"{label}: {p}" for p in protocol_problems(scfg) + reward_problems(scfg)]
                if stage.kind == "rl" and (stage.recipe or any(k.startswith("algorithm.") for k in stage.set)):
                    problems += [f"{label}: {p}" for p in algorithm_problems(scfg)]
        except ConfigError as err:
            problems.append(f"{label}: {err}")
        refs[raw_stage.name] = str(stage_output(raw_stage, run_dir))
    return problems


# -------------------------------------------------------------------------------------------------------- entry


def validate_deep(cfg: RunConfig, load: Callable[[str], RunConfig] | None = None, source: str | None = None) -> None:
    """Check ``cfg``'s protocol options, reward params and pipeline stages (:mod:`searchrl.validation`) without
    loading a model, a retriever or data; ConfigError with one line per problem.

    ``load(name)`` gives the config of another recipe, for stages with ``recipe:`` (default: the recipe alone);
    ``source`` (the recipe's path) starts every line."""
    if load is None:
        from searchrl.config import load_config

        load = load_config
    problems = protocol_problems(cfg) + reward_problems(cfg) + algorithm_problems(cfg) + stage_problems(cfg, load)
    if problems:
        prefix = f"{source}: " if source else ""
        raise ConfigError("\n".join(prefix + p for p in dict.fromkeys(problems)))
