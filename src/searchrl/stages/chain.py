"""How pipeline stages chain: the path each stage's ``${name}`` stands for, ``${...}`` references, the config a stage
runs with, and what its ``DONE`` marker records (used by the runner and by the pre-run checks alike)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, RunConfig, StageConfig, validate_dict
from searchrl.config.evaluation import CONTEXTS
from searchrl.config.extensions import registered
from searchrl.config.loading import apply_overrides
from searchrl.pipeline import data_file, index_kind
from searchrl.stages.resume import stage_settings

_REF = re.compile(r"\$\{([A-Za-z0-9_.-]+)\}")
_JOINED = re.compile(r"\$\{cfg\.(data\.source)\}/\$\{cfg\.(data\.\w+)\}")
MODEL_STAGES = ("sft", "rl")
NEEDS_MODEL = ("sft", "rl", "eval", "rejection-sample", "select-difficulty")


def stage_output(stage: StageConfig, run_dir: Path) -> Path:
    """The path a stage's ``${name}`` stands for."""
    d = run_dir / stage.name
    if stage.kind in MODEL_STAGES:
        return d / "final"
    if stage.kind == "eval" or stage.op in ("synth", "split"):
        return d
    if stage.op == "index":
        return d / "index"
    return d / "data.jsonl"


def _cfg_value(cfg: dict[str, Any], dotted: str, stage: str) -> str:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"stage '{stage}': ${{cfg.{dotted}}} is not a config value")
        node = node[part]
    return str(node)


def _subst(value: Any, refs: dict[str, str], stage: str, cfg: dict[str, Any] | None = None) -> Any:
    """``${name}`` -> an earlier stage's output path; ``${cfg.a.b}`` -> the run config's value (the command line's
    overrides in), ``${cfg.data.source}/${cfg.data.X}`` as :func:`~searchrl.pipeline.data_file` finds it."""
    if isinstance(value, str):
        if cfg is not None:  # a data file joined to its directory: an hf: source or an absolute path as it is
            value = _JOINED.sub(lambda m: data_file(*(_cfg_value(cfg, k, stage) for k in m.groups())), value)

        def one(m: re.Match) -> str:
            if m.group(1).startswith("cfg.") and cfg is not None:
                return _cfg_value(cfg, m.group(1)[4:], stage)
            if m.group(1) not in refs:
                raise ConfigError(
                    f"stage '{stage}': ${{{m.group(1)}}} is not an earlier stage (known: {', '.join(refs) or 'none'})"
                )
            return refs[m.group(1)]

        return _REF.sub(one, value)
    if isinstance(value, list):
        return [_subst(v, refs, stage, cfg) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v, refs, stage, cfg) for k, v in value.items()}
    return value


def stage_config(base: RunConfig, stage: StageConfig, world: str | None, index: str | None) -> RunConfig:
    """The run config a stage runs with: the recipe's, the chaining defaults (world, index), then ``stage.set``."""
    raw = base.model_dump()
    raw["pipeline"] = []
    if world is not None:  # a world stage reads the world's own files, never a file name meant for the user's data
        files = {"source": world, "train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}
        if stage.op == "index" and stage.data == CONTEXTS:  # the paragraphs the user's questions ship with: a world's
            d = base.data  # questions ship none
            files["train"] = d.train if d.source == "synthetic" else data_file(d.source, d.train)
        raw["data"].update(files, corpus="corpus.jsonl")
    if index is not None:
        raw["retrieval"]["index"] = index
        raw["retrieval"]["kind"] = index_kind(index) or raw["retrieval"]["kind"]
        if raw["retrieval"]["kind"] not in registered("retriever"):  # a plugin retriever's settings leave with it
            raw["retrieval"]["options"] = {}
    dotted = [f"{k}={json.dumps(v)}" for k, v in stage.set.items()]
    raw = apply_overrides(raw, dotted)
    return validate_dict(raw, f"stage '{stage.name}'")


def resolve_stage(
    base: RunConfig, stage: StageConfig, world: str | None, index: str | None, model: str | None, run_dir: Path
) -> tuple[RunConfig, str, str, dict[str, Any]]:
    """A stage's config (:func:`stage_config`), kind (its op for a data stage), starting model (the stage's, the
    previous SFT / RL stage's, the recipe's checkpoint, else ``model.policy``) and settings as DONE records them."""
    scfg = stage_config(base, stage, world, index)
    key = str(stage.op if stage.kind == "data" else stage.kind)
    recipe_model = scfg.training.init_from if key in ("rl", "eval") else None
    stage_model = stage.init_from or model or recipe_model or scfg.model.policy
    return scfg, key, stage_model, stage_settings(stage, scfg, stage_model if key in NEEDS_MODEL else None, run_dir)
