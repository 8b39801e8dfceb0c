"""KL folded into the reward is a step before every estimator: with ``kl_in_reward`` the policy gradient of PPO,
GRPO, REINFORCE++ and RLOO changes with the KL; the adaptive controller follows PPO's KL control rule."""

from __future__ import annotations

import pytest
import torch

from searchrl.config import AlgorithmConfig
from searchrl.rl import algorithms as A
from searchrl.rl.advantages import get_estimator
from searchrl.rl.kl_control import AdaptiveKL, FixedKL, make_kl_controller


def _policy_grad(name: str, kl_in_reward: bool) -> torch.Tensor:
    torch.manual_seed(0)
    B, T = 4, 5
    cfg = AlgorithmConfig(name=name, kl_coef=0.5, kl_in_reward=kl_in_reward)
    scores_B = torch.tensor([1.0, 1.0, 0.0, 0.0])  # two groups, each uniform: no signal without the KL
    kl_BT = torch.rand(B, T)
    mask_BT = torch.ones(B, T)
    values_BT = torch.zeros(B, T) if name == "ppo" else None
    adv_BT, _, _ = get_estimator(name).fn(scores_B, kl_BT, values_BT, mask_BT, ["a", "a", "b", "b"], cfg)
    logp_BT = torch.zeros(B, T, requires_grad=True)
    loss, _ = A.policy_loss(logp_BT, logp_BT.detach(), adv_BT, mask_BT)
    loss.backward()
    return logp_BT.grad


@pytest.mark.parametrize("name", ["ppo", "grpo", "reinforce_pp", "rloo"])
def test_kl_in_reward_changes_the_gradient_of_every_estimator(name: str) -> None:
    without, with_kl = _policy_grad(name, False), _policy_grad(name, True)
    assert not torch.allclose(without, with_kl, atol=1e-6), f"{name}: kl_in_reward left the gradient unchanged"


def test_grpo_kl_in_reward_subtracts_each_sequences_summed_kl_from_its_score() -> None:
    cfg = AlgorithmConfig(name="grpo", kl_coef=0.1, kl_in_reward=True, norm_adv_by_std=False)
    kl_BT = torch.tensor([[1.0, 1.0, 9.0], [0.0, 0.0, 9.0]])
    mask_BT = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # the 9s are masked out
    adv_BT, _, _ = get_estimator("grpo").fn(torch.tensor([1.0, 1.0]), kl_BT, None, mask_BT, ["g", "g"], cfg)
    # shaped scores 1 - 0.2 = 0.8 and 1.0: group mean 0.9, advantages -0.1 and +0.1 on the counted tokens
    assert torch.allclose(adv_BT[:, 0], torch.tensor([-0.1, 0.1]), atol=1e-6)


def test_adaptive_kl_controller_moves_toward_its_target_with_a_clipped_step() -> None:
    ctrl = AdaptiveKL(value=0.1, target=0.05, horizon=100)
    ctrl.update(kl=1.0, n_steps=10)  # error clipped to +0.2: 0.1 * (1 + 0.2 * 10 / 100)
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(kl=0.04, n_steps=10)  # error -0.2: shrinks
    assert ctrl.value == pytest.approx(0.102 * (1 - 0.2 * 0.1))
    fixed = FixedKL(0.3)
    fixed.update(5.0, 100)
    assert fixed.value == 0.3
    assert isinstance(make_kl_controller(AlgorithmConfig(kl_ctrl="adaptive")), AdaptiveKL)


def test_registering_an_estimator_or_format_scheme_twice_raises() -> None:
    from searchrl.protocols.base import format_scheme
    from searchrl.rl.advantages import register

    with pytest.raises(ValueError, match="registered twice"):
        register("grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="registered twice"):
        format_scheme("r1_searcher_stage2")(lambda *a, **k: None)
