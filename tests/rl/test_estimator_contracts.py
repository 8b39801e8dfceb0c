"""Behaviour of the advantage estimators and losses that the loop-reference tests leave open, each pinned with
numbers worked out by hand: PPO's discount and trace decay each in their own place, a KL folded into the outcome
score counted on the policy's tokens only, and gradients that reach the current log-probs and values only."""

from __future__ import annotations

import math

import pytest
import torch

from searchrl.config import AlgorithmConfig
from searchrl.rl.advantages import get_estimator
from searchrl.rl.algorithms import gspo_loss, policy_loss, value_loss


def test_ppo_discounts_by_gamma_and_decays_the_trace_by_lam() -> None:
    # one row of three policy tokens, the score 1 on the last; gamma = 0.9, lam = 0.5, so gamma * lam = 0.45
    #   delta_2 = 1 - (-0.1) = 1.1                     A_2 = 1.1
    #   delta_1 = 0.9 * (-0.1) - 0.2 = -0.29           A_1 = -0.29 + 0.45 * 1.1 = 0.205
    #   delta_0 = 0.9 * 0.2 - 0.5 = -0.32              A_0 = -0.32 + 0.45 * 0.205 = -0.22775
    # (gamma and lam swapped would give A_1 = -0.25 + 0.495 = 0.245)
    cfg = AlgorithmConfig(name="ppo", gamma=0.9, lam=0.5, kl_coef=0.0)
    values = torch.tensor([[0.5, 0.2, -0.1]], dtype=torch.float64)
    adv, returns, _ = get_estimator("ppo").fn(
        torch.tensor([1.0]), torch.zeros(1, 3, dtype=torch.float64), values, torch.ones(1, 3), [0], cfg
    )
    raw = [-0.22775, 0.205, 1.1]
    assert returns[0].tolist() == pytest.approx([a + v for a, v in zip(raw, [0.5, 0.2, -0.1], strict=True)], abs=1e-12)
    mean = sum(raw) / 3
    var = sum((a - mean) ** 2 for a in raw) / 3  # biased, as the whitening takes it
    assert adv[0].tolist() == pytest.approx([(a - mean) / math.sqrt(var + 1e-8) for a in raw], abs=1e-9)


@pytest.mark.parametrize(("name", "expected"), [("rloo", [1.02, -1.02]), ("dr_grpo", [0.51, -0.51])])
def test_a_kl_in_the_reward_sums_over_the_policy_tokens_only(name: str, expected: list[float]) -> None:
    # the middle token of each row is retrieved text: its (garbage) KL must not lower the score.
    # shaped scores: 1 - 0.1 * (0.1 + 0.2) = 0.97 and 0 - 0.1 * (0.5 + 0.0) = -0.05
    # rloo: r_i - r_j = +-1.02; dr_grpo: r_i - mean = +-0.51
    cfg = AlgorithmConfig(name=name, kl_in_reward=True, kl_coef=0.1)
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    kl = torch.tensor([[0.1, 5.0, 0.2], [0.5, 7.0, 0.0]], dtype=torch.float64)
    adv, _, _ = get_estimator(name).fn(torch.tensor([1.0, 0.0]), kl, None, mask, ["q", "q"], cfg)
    assert adv[:, 0].tolist() == pytest.approx(expected, abs=1e-9)
    assert adv[:, 1].tolist() == [0.0, 0.0]


def _leaves(*rows: list[float]) -> list[torch.Tensor]:
    return [torch.tensor([r], dtype=torch.float64, requires_grad=True) for r in rows]


def test_the_policy_losses_send_gradient_to_the_current_logprobs_only() -> None:
    # old log-probs and advantages are constants: a caller that hands over tensors still in a graph must not train
    # through them (the ratio's denominator, or the critic through its advantages)
    mask = torch.ones(1, 3)
    for loss_fn in (policy_loss, gspo_loss):
        logp, old, adv = _leaves([-1.0, -0.5, -2.0], [-1.1, -0.4, -2.0], [0.5, -1.0, 2.0])
        loss, _ = loss_fn(logp, old, adv, mask)
        loss.backward()
        assert logp.grad is not None and logp.grad.abs().sum() > 0
        assert old.grad is None and adv.grad is None, loss_fn.__name__


def test_the_value_loss_sends_gradient_to_the_current_values_only() -> None:
    values, old, returns = _leaves([0.5, 0.1, -0.3], [0.4, 0.0, 0.0], [1.0, 1.0, 1.0])
    loss, _ = value_loss(values, old, returns, torch.ones(1, 3))
    loss.backward()
    assert values.grad is not None and values.grad.abs().sum() > 0
    assert old.grad is None and returns.grad is None
