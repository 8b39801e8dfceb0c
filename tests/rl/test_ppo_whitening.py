"""PPO whitens its GAE advantages over the critic's positions: the policy's tokens by default, every response token
with ``critic_mask_observations: false`` (veRL's masked_whiten over the response mask)."""

from __future__ import annotations

import torch

from searchrl.config import AlgorithmConfig
from searchrl.rl.advantages import get_estimator


def test_whitening_follows_the_critic_mask() -> None:
    torch.manual_seed(0)
    B, T = 4, 10
    policy = torch.ones(B, T)
    policy[:, 3:6] = 0  # inserted (retrieved) tokens
    everything = torch.ones(B, T)
    values = torch.randn(B, T)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0])
    fn = get_estimator("ppo").fn
    cfg = AlgorithmConfig(name="ppo", kl_coef=0.0)
    groups = list(range(B))
    adv_p, _, _ = fn(scores, torch.zeros(B, T), values, policy, groups, cfg, critic_mask_BT=policy)
    adv_all, _, _ = fn(scores, torch.zeros(B, T), values, policy, groups, cfg, critic_mask_BT=everything)
    assert abs(float(adv_p[policy > 0].mean())) < 1e-5  # whitened over the policy's tokens
    assert abs(float(adv_all.mean())) < 1e-5  # whitened over every response token
    assert abs(float(adv_all[policy > 0].mean())) > 1e-3  # so not zero-mean over the policy's tokens alone
