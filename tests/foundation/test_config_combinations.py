"""Whole-config checks: combinations that are valid field by field but not together fail with one line naming the
fix. (That every config field is read somewhere in the package: test_dead_fields.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl import config as C
from searchrl.config import ConfigError, load_config


def _error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, list(overrides))
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_defaults_validate() -> None:
    cfg = load_config(None)
    assert cfg.algorithm.name in C.group_algorithms() and cfg.rollout.group_size > 1


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_group_algorithms_need_groups(algo: str) -> None:
    msg = _error(f"algorithm.name={algo}", "rollout.group_size=1")
    assert "rollout.group_size > 1" in msg and "set rollout.group_size=" in msg
    load_config(None, ["algorithm.name=ppo", "rollout.group_size=1"])
    load_config(None, ["algorithm.name=reinforce_pp", "rollout.group_size=1"])


def test_clip_higher_is_for_token_ratios_and_adam_betas_below_one() -> None:
    assert "use gspo_clip_high" in _error("algorithm.name=gspo", "algorithm.clip_eps_high=0.28")
    load_config(None, ["algorithm.name=grpo", "algorithm.clip_eps_high=0.28"])
    assert "adam_betas" in _error("sft.adam_betas=[0.9, 1.0]")


def test_a_retrieval_timeout_must_be_positive() -> None:
    assert "timeout_s" in _error("retrieval.timeout_s=0")


@pytest.mark.parametrize("estimator", ["reinforce_baseline", "group_norm"])
def test_group_baselined_reinforce_needs_groups(estimator: str) -> None:
    msg = _error("algorithm.name=reinforce_pp", f"algorithm.reinforce_estimator={estimator}", "rollout.group_size=1")
    assert estimator in msg and "rollout.group_size=5" in msg and "reinforce_estimator=reinforce" in msg


def test_an_algorithm_with_its_own_loss_aggregation_refuses_another() -> None:
    assert "remove algorithm.loss_agg" in _error("algorithm.name=dr_grpo", "algorithm.loss_agg=seq_mean_token_mean")
    for agg in ("token_mean", "seq_mean_token_sum_norm"):  # the default (as a resolved config repeats it), its own
        load_config(None, ["algorithm.name=dr_grpo", f"algorithm.loss_agg={agg}"])


@pytest.mark.parametrize(
    ("setting", "fix"),
    [("algorithm.old_logprobs=rollout", "auto or recompute"), ("training.off_policy_steps=1", "off_policy_steps=0")],
)
def test_the_masking_ablation_refuses_rollout_log_probs(setting: str, fix: str) -> None:
    """The rollout has no log-probs for retrieved tokens (0 in the record): with them in the loss the ratio there
    would be exp(logp - 0)."""
    assert fix in _error("algorithm.mask_observations=false", setting, "rollout.backend=hf")
    load_config(None, [setting, "rollout.backend=hf"])


@pytest.mark.parametrize(
    "field",
    [
        "algorithm.value_coef=0.1",
        "algorithm.critic_mask_observations=false",
        "training.critic_lr=3e-5",
        "training.critic_warmup_steps=3",
        "algorithm.lam=0.95",
        "algorithm.gamma=0.99",
    ],
)
def test_critic_fields_are_ppo_only(field: str) -> None:
    msg = _error("algorithm.name=grpo", field)
    assert field.split("=")[0] in msg and "algorithm.name=ppo" in msg
    load_config(None, ["algorithm.name=ppo", field])


def test_prompts_per_step_must_divide_among_processes(monkeypatch, tmp_path: Path) -> None:
    from accelerate import Accelerator

    from searchrl.data.records import QAExample
    from searchrl.rl.trainer import Trainer
    from searchrl.testing import LettersProtocol, tiny_model, tokenizer

    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 3))
    cfg = load_config(None, ["training.prompts_per_step=4", f"training.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"prompts_per_step=4 must be divisible by the 3 processes"):
        Trainer(cfg, tiny_model(), tokenizer(), LettersProtocol(), None, [QAExample("q", "q?", ["a"])])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["algorithm.name=grpo", "algorithm.reinforce_estimator=group_norm"], "reinforce_estimator"),
        (["algorithm.name=grpo", "algorithm.gspo_clip_low=0.001"], "gspo_clip_low"),
        (["algorithm.name=gspo", "algorithm.clip_eps=0.3"], "clip_eps"),
        (["algorithm.name=gspo", "algorithm.dual_clip=3.0"], "dual_clip"),
        (["algorithm.name=rloo", "algorithm.norm_adv_by_std=false"], "norm_adv_by_std"),
        (["algorithm.name=dr_grpo", "algorithm.norm_adv_by_std=false"], "norm_adv_by_std"),
        (["algorithm.kl_horizon=500"], "kl_horizon"),
    ],
)
def test_settings_the_algorithm_never_reads_are_refused_and_blamed_on_their_layer(overrides, field) -> None:
    """Like the critic's settings without PPO: a value that would silently do nothing fails, naming the layer."""
    with pytest.raises(ConfigError, match=rf"override '{overrides[-1]}': algorithm: algorithm.{field} applies .* "
                       "would do nothing: remove it"):  # fmt: skip
        load_config(None, ["rollout.group_size=4", *overrides])
    # the defaults, as a resolved config repeats them, pass; so does each setting where it acts
    load_config(None, ["rollout.group_size=4", overrides[0], f"algorithm.{field}={_DEFAULTS[field]}"])


_DEFAULTS = {
    "reinforce_estimator": "reinforce",
    "gspo_clip_low": 3e-4,
    "clip_eps": 0.2,
    "dual_clip": "null",
    "norm_adv_by_std": "true",
    "kl_horizon": 10000,
}


def test_settings_where_they_act_pass() -> None:
    load_config(
        None, ["algorithm.name=reinforce_pp", "algorithm.reinforce_estimator=group_norm", "rollout.group_size=4"]
    )
    load_config(None, ["algorithm.name=gspo", "algorithm.gspo_clip_low=0.001", "algorithm.norm_adv_by_std=false"])
    load_config(None, ["algorithm.clip_eps=0.3", "algorithm.dual_clip=3.0", "algorithm.norm_adv_by_std=false"])
    load_config(None, ["algorithm.kl_ctrl=adaptive", "algorithm.kl_horizon=500", "algorithm.kl_target=0.05"])
