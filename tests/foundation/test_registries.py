"""Each registry owns its names and traits; the config fields that name its entries agree with it."""

from __future__ import annotations

from typing import get_args

import pytest

from searchrl.config import ALGORITHMS, AlgorithmConfig, ConfigError, EvaluationConfig, load_config
from searchrl.config.algorithms import Algorithm, declare


def test_algorithm_name_accepts_exactly_the_declared_algorithms() -> None:
    for name in ALGORITHMS:
        assert AlgorithmConfig(name=name).name == name
    with pytest.raises(ValueError, match="unknown algorithm.name 'grpo2'; one of: ppo, grpo, reinforce_pp, rloo"):
        AlgorithmConfig(name="grpo2")


def test_every_declared_algorithm_has_an_estimator_and_shares_its_traits() -> None:
    from searchrl.rl.advantages import ESTIMATORS

    assert set(ESTIMATORS) == set(ALGORITHMS)
    for name, est in ESTIMATORS.items():
        assert est.algorithm is ALGORITHMS[name] and est.critic == ALGORITHMS[name].critic


def test_an_estimator_needs_a_declared_algorithm_and_a_name_is_declared_once() -> None:
    from searchrl.rl.advantages import register

    with pytest.raises(ValueError, match="declare the algorithm first"):
        register("not_declared")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="declared twice"):
        declare(Algorithm("grpo", grouped=True))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_config_checks_follow_the_traits(name: str) -> None:
    """A grouped algorithm refuses groups of one; a critic-free one refuses the critic's settings."""
    traits = ALGORITHMS[name]
    overrides = [f"algorithm.name={name}", "rollout.group_size=1"]
    if traits.grouped:
        with pytest.raises(ConfigError, match="rollout.group_size > 1"):
            load_config(None, overrides)
    else:
        load_config(None, overrides)
    critic_setting = [f"algorithm.name={name}", "algorithm.value_coef=0.1"]
    if traits.critic:
        load_config(None, critic_setting)
    else:
        with pytest.raises(ConfigError, match="configures the critic"):
            load_config(None, critic_setting)
    drop = [f"algorithm.name={name}", "algorithm.drop_uniform_groups=true"]
    if traits.has_group_baseline("reinforce"):
        load_config(None, drop)
    else:
        with pytest.raises(ConfigError, match="needs a group baseline"):
            load_config(None, drop)


def test_evaluation_methods_accept_exactly_the_registered_methods() -> None:
    from searchrl.config.extensions import NAMES, registered
    from searchrl.eval.methods import METHODS, RETRIEVAL_METHODS

    assert set(NAMES["method"]) - set(registered("method")) == set(METHODS)
    with pytest.raises(ValueError, match="unknown method 'naive-rag'; one of: direct, cot, naive_rag"):
        EvaluationConfig(methods=["naive-rag"])
    assert {n for n, m in METHODS.items() if m.needs_retriever} == RETRIEVAL_METHODS
    assert {"naive_rag", "agent"} <= RETRIEVAL_METHODS and "direct" not in RETRIEVAL_METHODS


def test_reward_component_names_are_exactly_the_registered_components() -> None:
    from searchrl.config.rewards import BuiltinComponent
    from searchrl.rewards.components import COMPONENTS

    assert set(get_args(BuiltinComponent)) == set(COMPONENTS)
