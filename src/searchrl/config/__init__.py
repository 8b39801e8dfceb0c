"""Validated configuration: one frozen pydantic model per concern (``sections``), the RL algorithms and their traits
(``algorithms``), and recipes (YAML) with profiles and overrides that map onto them (``loading``).

Unknown keys are errors that name the key and the closest valid key, so a typo never silently falls back to a
default. Every public name is importable from ``searchrl.config``.
"""

from __future__ import annotations

from searchrl.config.algorithms import (
    ALGORITHMS,
    Algorithm,
    AlgorithmConfig,
    algorithm,
    critic_algorithms,
    declare,
    group_algorithms,
)
from searchrl.config.base import ConfigError, Section
from searchrl.config.evaluation import EvalDataset, EvaluationConfig
from searchrl.config.loading import (
    deep_merge,
    dump_config,
    load_config,
    load_profile,
    parse_overrides,
    profile_names,
    recipe_names,
    recipe_path,
    record_run,
    to_yaml,
    validate_dict,
    with_overrides,
)
from searchrl.config.retrieval import MCPConfig, RetrievalConfig, SimulatedConfig, WebConfig
from searchrl.config.rewards import RewardComponent, RewardConfig
from searchrl.config.sections import (
    DataConfig,
    LoraConfig,
    MemorizationConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    SFTConfig,
    StageConfig,
    TrainingConfig,
    WorldConfig,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmConfig",
    "ConfigError",
    "DataConfig",
    "EvalDataset",
    "EvaluationConfig",
    "LoraConfig",
    "MCPConfig",
    "MemorizationConfig",
    "ModelConfig",
    "RetrievalConfig",
    "RewardComponent",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "Section",
    "StageConfig",
    "TrainingConfig",
    "SimulatedConfig",
    "WebConfig",
    "WorldConfig",
    "algorithm",
    "deep_merge",
    "critic_algorithms",
    "declare",
    "group_algorithms",
    "dump_config",
    "record_run",
    "load_config",
    "load_profile",
    "parse_overrides",
    "profile_names",
    "recipe_names",
    "recipe_path",
    "to_yaml",
    "validate_dict",
    "with_overrides",
]
