"""Our RL math against the trainers the papers' authors ran, on small literal batches.

Every expected value below was obtained by running the authors' functions on the case (their code is not vendored
here), so a change to an estimator, a KL estimator, a loss or its aggregation that breaks parity fails this file:

- veRL as forked by Search-R1 (also R-Search's and RAG-R1's copies, identical in this math),
  ``verl/trainer/ppo/core_algos.py`` and ``ray_trainer.py``: ``apply_kl_penalty`` (k1 on the policy's tokens) then
  ``compute_gae_advantage_return``; ``compute_grpo_outcome_advantage``; ``kl_penalty`` (kl / mse / low_var_kl);
  ``compute_policy_loss``; ``compute_value_loss``; ``entropy_from_logits`` with ``masked_mean``;
  ``AdaptiveKLController``;
- upstream veRL: ``compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=False)``,
  ``compute_rloo_outcome_advantage``, ``compute_policy_loss`` with dual clip (``clip_ratio_c``) and ``agg_loss``;
- OpenRLHF as forked by R1-Searcher (``OpenRLHF-RAG``): the group transforms of ``process_experiences``,
  ``compute_approx_kl`` (k1) and ``compute_reward`` with the retrieve mask, ``get_cumulative_returns``,
  ``ReplayBuffer.normalize`` (REINFORCE++), and ``PolicyLoss`` (each sequence's masked mean, then the mean).

Known differences, documented (``docs/recipes.md``) and so not listed as cases: groups of one get advantage 0 (veRL:
the raw score); the PPO whitening's variance is the biased one (veRL's is unbiased: the advantages here are veRL's
times sqrt(n / (n - 1)) over n whitened tokens).
"""

from __future__ import annotations

import pytest
import torch

from searchrl.config import AlgorithmConfig
from searchrl.rl import algorithms as A
from searchrl.rl.advantages import get_estimator
from searchrl.rl.kl_control import AdaptiveKL

T = torch.tensor
TOL = 1e-5

# one batch of three responses: right-padded (response mask), with retrieved tokens out of the loss (loss mask)
RESP = T([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float32)
LOSS = T([[1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float32)
OLD = T([[-0.5, -1.2, -0.1, -2.0, -0.3, -0.9], [-1.1, -0.2, -0.7, -0.4, 0.0, 0.0], [-0.6, 0, 0, 0, 0, 0]])
REF = T([[-0.7, -1.0, -0.4, -1.5, -0.2, -1.4], [-0.9, -0.6, -0.7, -0.9, 0.0, 0.0], [-0.2, 0, 0, 0, 0, 0]])
VALUES = T([[0.2, 0.4, 0.1, 0.3, 0.6, 0.5], [0.1, -0.2, 0.3, 0.2, 0.0, 0.0], [0.4, 0, 0, 0, 0, 0]])


def close(ours: torch.Tensor, theirs: list, mask: torch.Tensor | None = None) -> bool:
    theirs_t = torch.tensor(theirs, dtype=torch.float32)
    if mask is not None:
        ours, theirs_t = ours[mask.bool()], theirs_t[mask.bool()]
    return torch.allclose(ours.float(), theirs_t, atol=TOL)


def test_ppo_gae_with_the_kl_in_the_reward_as_search_r1s_verl() -> None:
    # search_r1_ppo / rag_r1: k1 (0.1 here) on the policy's tokens folded into the token rewards, the score on the
    # last response token, GAE (gamma = lam = 1) and whitening over every response token
    cfg = AlgorithmConfig(name="ppo", kl_in_reward=True, kl_coef=0.1, kl_estimator="k1")
    kl_BT, _ = A.kl_penalty(OLD, REF, LOSS, "k1")
    adv, returns, _ = get_estimator("ppo").fn(
        T([1.0, 0.0, 1.0]), kl_BT, VALUES, LOSS, [0, 1, 2], cfg, critic_mask_BT=RESP
    )
    verl_returns = [[0.96, 0.98, 0.96, 0.96, 0.96, 0.95], [-0.03, -0.05, -0.05, -0.05, 0, 0], [1.04, 0, 0, 0, 0, 0]]
    verl_adv = [
        [0.994723, 0.569334, 1.23105, 0.758396, 0.049414, 0.262108],
        [-1.10859, -0.446873, -1.62851, -1.392183, 0, 0],
        [0.71113, 0, 0, 0, 0, 0],
    ]
    n = RESP.sum()
    assert close(returns, verl_returns, RESP)
    assert close(adv * torch.sqrt((n - 1) / n), verl_adv, RESP)  # biased vs veRL's unbiased variance


# three groups: mixed, uniform (no signal), and real-valued scores
SCORES = T([1.0, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.2, 0.9, 0.4])
GROUPS = ["a", "a", "a", "a", "b", "b", "b", "c", "c", "c"]


@pytest.mark.parametrize(
    ("name", "norm_by_std", "theirs"),
    [
        ("grpo", True, [0.499999, -1.499997, 0.499999, 0.499999, 0, 0, 0, -0.832048, 1.109397, -0.277349]),
        ("grpo", False, [0.25, -0.75, 0.25, 0.25, 0, 0, 0, -0.3, 0.4, -0.1]),
        ("dr_grpo", True, [0.25, -0.75, 0.25, 0.25, 0, 0, 0, -0.3, 0.4, -0.1]),
        ("rloo", True, [1 / 3, -1.0, 1 / 3, 1 / 3, 0, 0, 0, -0.45, 0.6, -0.15]),
    ],
)
def test_group_advantages_as_verl(name: str, norm_by_std: bool, theirs: list) -> None:
    cfg = AlgorithmConfig(name=name, **({} if name != "grpo" else {"norm_adv_by_std": norm_by_std}))
    mask = torch.ones(10, 2)
    adv, _, _ = get_estimator(name).fn(SCORES, torch.zeros(10, 2), None, mask, GROUPS, cfg)
    assert close(adv[:, 0], theirs) and torch.equal(adv[:, 0], adv[:, 1])


# REINFORCE++: two groups of two; the last row's response ends inside a retrieved document (its last two generated
# positions are out of the loss), so R1-Searcher's code puts its score on a masked position
RETRIEVE = T([[1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.float32)
LOGP = T(
    [
        [-0.5, -1.2, -0.1, -2.0, -0.3, -0.9],
        [-1.1, -0.2, -0.7, -0.4, 0, 0],
        [-0.3, -0.8, -1.5, -0.2, -0.6, 0],
        [-0.9, -0.1, -0.4, -1.3, -0.7, 0],
    ]
)
REF_LOGP = T(
    [
        [-0.7, -1.0, -0.4, -1.5, -0.2, -1.4],
        [-0.9, -0.6, -0.7, -0.9, 0, 0],
        [-0.5, -0.8, -1.1, -0.6, -0.2, 0],
        [-0.6, -0.3, -0.4, -1.0, -1.5, 0],
    ]
)
R1_SEARCHER = {
    # R1-Searcher++ (Eq. 1): plain REINFORCE++, returns whitened over the batch
    "reinforce": [
        [0.749936, 0.804148, 0, 0, 0.749936, 0.72283],
        [-1.93357, 0, -1.987782, -1.987782, 0, 0],
        [0.37045, 0.424663, 0.424663, 0.316238, 0.424663, 0],
        [0.343344, 0.262026, 0.316238, 0, 0, 0],
    ],
    # R1-Searcher stage 2: score minus its group's mean, then the same
    "reinforce_baseline": [
        [1.282269, 1.340999, 0, 0, 1.282269, 1.252905],
        [-1.624861, 0, -1.68359, -1.68359, 0, 0],
        [-0.009788, 0.048942, 0.048942, -0.068518, 0.048942, 0],
        [-0.039153, -0.127248, -0.068518, 0, 0, 0],
    ],
    # R1-Searcher stage 1: (score - group mean) / (group std + 1e-9), returns not whitened
    "group_norm": [
        [0.667107, 0.687107, 0, 0, 0.667107, 0.657107],
        [-0.737107, 0, -0.757107, -0.757107, 0, 0],
        [0.02, 0.04, 0.04, 0, 0.04, 0],
        [0.01, -0.02, 0, 0, 0, 0],
    ],
}


@pytest.mark.parametrize("estimator", list(R1_SEARCHER))
def test_reinforce_pp_as_r1_searchers_openrlhf(estimator: str) -> None:
    cfg = AlgorithmConfig(
        name="reinforce_pp", kl_in_reward=True, kl_coef=0.1, kl_estimator="k1", reinforce_estimator=estimator
    )
    kl_BT, _ = A.kl_penalty(LOGP, REF_LOGP, RETRIEVE, "k1")
    adv, _, _ = get_estimator("reinforce_pp").fn(T([1.0, 0.0, 0.8, 0.8]), kl_BT, None, RETRIEVE, [0, 0, 1, 1], cfg)
    assert close(adv, R1_SEARCHER[estimator])  # 0 on retrieved tokens, as the code's returns * retrieve_mask


@pytest.mark.parametrize(
    ("estimator", "logp", "ref", "theirs"),
    [
        ("k1", [-0.5, -1.2, -3.0, -25.0], [-0.7, -1.0, -0.5, -1.0], [0.2, -0.2, -2.5, -24.0]),  # veRL "kl"
        ("k2", [-0.5, -1.2, -3.0, -25.0], [-0.7, -1.0, -0.5, -1.0], [0.02, 0.02, 3.125, 288.0]),  # "mse"
        ("k3", [-0.5, -1.2, -3.0, -25.0], [-0.7, -1.0, -0.5, -1.0], [0.018731, 0.021403, 8.682494, 10.0]),
        ("k3", [-0.5, -1.2, -0.5, -1.0], [-0.7, -1.0, -3.0, -25.0], [0.018731, 0.021403, 1.582085, 10.0]),
    ],
)
def test_kl_estimators_as_verl(estimator: str, logp: list, ref: list, theirs: list) -> None:
    kl, _ = A.kl_penalty(T([logp]), T([ref]), torch.ones(1, 4), estimator)
    assert close(kl, [theirs])


NEW = OLD + T([[0.3, -0.4, 0.05, 0.6, -0.1, -1.5], [0.25, 0.1, -0.3, 0.0, 0, 0], [1.2, 0, 0, 0, 0, 0]])
ADV = T([[1.0, -0.5, 2.0, -1.0, 0.5, -2.0], [-1.5, 0.3, 0.8, -0.2, 0, 0], [-1.0, 0, 0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("dual_clip", "agg", "theirs"),
    [
        (None, "token_mean", 0.650135),  # Search-R1's veRL (no dual clip)
        (3.0, "token_mean", 0.610121),  # upstream veRL, clip_ratio_c = 3
        (3.0, "seq_mean_token_mean", 1.199341),
        (3.0, "seq_mean_token_sum", 1.626988),
        (None, "seq_mean_token_mean", 1.306047),  # R1-Searcher's OpenRLHF PolicyLoss
    ],
)
def test_policy_loss_as_the_authors_trainers(dual_clip: float | None, agg: str, theirs: float) -> None:
    loss, metrics = A.policy_loss(NEW, OLD, ADV, LOSS, 0.2, dual_clip, agg)
    assert loss.item() == pytest.approx(theirs, abs=TOL)
    assert metrics["policy/clip_frac"] == pytest.approx(0.375)  # veRL's pg_clipfrac


def test_value_loss_and_entropy_as_search_r1s_verl() -> None:
    new_values = VALUES + T([[0.7, -0.1, 0.2, -0.9, 0.3, 0.05], [0.6, -0.55, 0.1, 0.0, 0, 0], [-0.8, 0, 0, 0, 0, 0]])
    returns = T([[1.0, 1.0, 0.5, -0.5, 1.0, 0.2], [0.0, 0.3, -1.0, 0.4, 0, 0], [-0.5, 0, 0, 0, 0, 0]])
    loss, metrics = A.value_loss(new_values, VALUES, returns, RESP, 0.5)
    assert loss.item() == pytest.approx(0.208864, abs=TOL)
    assert metrics["value/clip_frac"] == pytest.approx(3 / 11)  # vf_clipfrac
    logits = T([[[1.0, 0.0, -1.0], [2.0, 2.0, 2.0]], [[0.5, -3.0, 1.5], [9.0, 0.0, 0.0]]])
    entropy, _ = A.entropy_from_logits(logits, T([[1.0, 1.0], [1.0, 0.0]]))
    assert entropy.item() == pytest.approx(0.851795, abs=TOL)


def test_adaptive_kl_controller_as_verl() -> None:
    ctrl = AdaptiveKL(0.05, 0.1, 1000)
    seen = []
    for kl, n in [(0.3, 64), (0.02, 64), (0.11, 128), (0.09, 32)]:
        ctrl.update(kl, n)
        seen.append(ctrl.value)
    assert seen == pytest.approx([0.05064, 0.049991808, 0.0506317031, 0.0504696817], abs=1e-10)
