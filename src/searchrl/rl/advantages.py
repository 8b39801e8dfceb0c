"""Advantage estimators: one registry, one shape (verl's ``core_algos`` pattern), the math in ``algorithms``.

Every estimator is ``(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg, *, critic_mask_BT, sum_across) ->
(advantages_BT, returns_BT | None, metrics)``:

- ``scores_B``: the outcome score of each trajectory; ``kl_BT``: the per-token KL estimate to the reference (0 without
  one); ``values_BT``: the critic's values (None for critic-free estimators); ``mask_BT``: the policy-loss positions;
  ``group_ids``: one id per row, shared by the rollouts of one prompt (groups never straddle processes);
  ``cfg``: the ``AlgorithmConfig``.
- ``critic_mask_BT``: the critic's positions (PPO: ``algorithm.critic_mask_observations``); ``sum_across`` sums a
  tensor over every process, so a whitening over "the batch" is over the whole step's batch, not one process's shard.

The trainer looks an estimator up by ``algorithm.name`` and knows nothing else about it: a new algorithm is declared
with its traits (grouped, critic) in ``searchrl.config.algorithms``, which ``algorithm.name`` accepts, and its
estimator is a function here plus ``@register("name")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from searchrl.config import ALGORITHMS, Algorithm, AlgorithmConfig
from searchrl.config.extensions import same_definition
from searchrl.rl import algorithms as A

Returns = tuple[Tensor, Tensor | None, A.Metrics]
EstimatorFn = Callable[..., Returns]


@dataclass(frozen=True)
class Estimator:
    fn: EstimatorFn
    #: the algorithm's declared traits (searchrl.config.algorithms): the one place they are stated.
    algorithm: Algorithm

    @property
    def name(self) -> str:
        return self.algorithm.name

    @property
    def critic(self) -> bool:
        """Trains a value model beside the policy (its values are passed in as ``values_BT``)."""
        return self.algorithm.critic


ESTIMATORS: dict[str, Estimator] = {}


def register(name: str) -> Callable[[EstimatorFn], EstimatorFn]:
    """The estimator of the declared algorithm ``name``; a second estimator for one name, or one for an algorithm
    that ``searchrl.config.algorithms`` does not declare, is refused."""

    def deco(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS and not same_definition(ESTIMATORS[name].fn, fn):
            raise ValueError(f"estimator '{name}' is registered twice; give the new one another name")
        if name not in ALGORITHMS:
            raise ValueError(f"estimator '{name}': declare the algorithm first (searchrl.config.algorithms.declare)")
        ESTIMATORS[name] = Estimator(fn, ALGORITHMS[name])
        return fn

    return deco


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        if name in ALGORITHMS:
            raise ValueError(
                f"algorithm.name {name} is declared but has no advantage estimator: add @register({name!r})"
            )
        raise ValueError(f"unknown algorithm.name '{name}'; registered estimators: {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name]


def takes_sequences(fn: EstimatorFn) -> EstimatorFn:
    """An estimator that also takes Python numbers (``[1.0, 0.0]`` scores, nested-list masks): they become float32
    tensors (on the device of the tensors given); tensors pass as they are."""

    @functools.wraps(fn)
    def estimator(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg, **kwargs) -> Returns:
        like = next((t for t in (mask_BT, kl_BT, values_BT, scores_B) if isinstance(t, Tensor)), None)
        if kwargs.get("critic_mask_BT") is not None:
            kwargs["critic_mask_BT"] = A.as_tensor(kwargs["critic_mask_BT"], like)
        values_BT = None if values_BT is None else A.as_tensor(values_BT, like)
        tensors = (A.as_tensor(t, like) for t in (scores_B, kl_BT, mask_BT))
        scores_B, kl_BT, mask_BT = tensors
        return fn(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg, **kwargs)

    return estimator


@register("ppo")
@takes_sequences
def ppo_gae(
    scores_B: Tensor,
    kl_BT: Tensor,
    values_BT: Tensor | None,
    mask_BT: Tensor,
    group_ids: A.GroupIds,
    cfg: AlgorithmConfig,
    *,
    critic_mask_BT: Tensor | None = None,
    sum_across: A.SumAcross | None = None,
) -> Returns:
    """PPO: the score on the last critic position, ``-kl_coef * kl`` per token when ``kl_in_reward``, GAE over the
    critic's positions, advantages whitened over the critic's positions of the whole step (all processes): the
    policy's tokens by default, every response token with ``critic_mask_observations: false`` (veRL's
    ``masked_whiten`` over the response mask, as Search-R1's and RAG-R1's code; with the biased variance of
    OpenRLHF where veRL takes the unbiased one, a factor sqrt(n / (n - 1)) on n counted tokens)."""
    if values_BT is None:
        raise ValueError("ppo needs the critic's values")
    cm_BT = mask_BT if critic_mask_BT is None else critic_mask_BT  # (B, T)
    last_BT = (cm_BT.cumsum(-1) == cm_BT.sum(-1, keepdim=True)) & (cm_BT > 0)  # (B, T) at or after the last counted
    first_last_BT = last_BT & (last_BT.cumsum(-1) == 1)  # (B, T) the last counted position only
    zeros_BT = torch.zeros_like(values_BT)
    rewards_BT = torch.where(first_last_BT, scores_B[:, None].to(zeros_BT.dtype).expand_as(zeros_BT), zeros_BT)
    if cfg.kl_in_reward:
        rewards_BT = rewards_BT - cfg.kl_coef * kl_BT
    (adv_BT, returns_BT), metrics = A.gae_advantages(rewards_BT, values_BT, cm_BT, cfg.gamma, cfg.lam)
    return A.whiten(adv_BT, cm_BT, sum_across=sum_across), returns_BT, metrics


def _kl_shaped(scores_B: Tensor, kl_BT: Tensor, mask_BT: Tensor, cfg: AlgorithmConfig) -> Tensor:
    """Outcome scores less ``kl_coef`` times each sequence's summed KL when ``kl_in_reward`` (verl's token-level
    rewards ``score - beta * kl_t`` summed over the response, as its outcome estimators read them)."""
    if not cfg.kl_in_reward:
        return scores_B
    return scores_B.to(kl_BT.dtype) - cfg.kl_coef * (kl_BT * mask_BT).sum(-1)


@register("grpo")
@takes_sequences
def grpo(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg: AlgorithmConfig, **_: object) -> Returns:
    """GRPO: ``(r - group mean) / (group std + eps)`` (``norm_adv_by_std``), KL in the loss (or the reward)."""
    adv_BT, metrics = A.grpo_advantages(
        _kl_shaped(scores_B, kl_BT, mask_BT, cfg), group_ids, mask_BT, cfg.norm_adv_by_std
    )
    return adv_BT, None, metrics


@register("dr_grpo")
@takes_sequences
def dr_grpo(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg: AlgorithmConfig, **_: object) -> Returns:
    """Dr. GRPO: ``r - group mean``, never divided by the group's std (its difficulty bias); the loss aggregation
    (``seq_mean_token_sum_norm``) is the algorithm's, see ``searchrl.config.algorithms``."""
    adv_BT, metrics = A.grpo_advantages(_kl_shaped(scores_B, kl_BT, mask_BT, cfg), group_ids, mask_BT, False)
    return adv_BT, None, metrics


@register("gspo")
@takes_sequences
def gspo(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg: AlgorithmConfig, **_: object) -> Returns:
    """GSPO: GRPO's group-normalised advantage; its own policy loss (``searchrl.rl.losses.gspo_loss``)."""
    adv_BT, metrics = A.grpo_advantages(
        _kl_shaped(scores_B, kl_BT, mask_BT, cfg), group_ids, mask_BT, cfg.norm_adv_by_std
    )
    return adv_BT, None, metrics


@register("rloo")
@takes_sequences
def rloo(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg: AlgorithmConfig, **_: object) -> Returns:
    """RLOO: the score less the mean of the group's other scores; KL in the loss (or the reward)."""
    adv_BT, metrics = A.rloo_advantages(_kl_shaped(scores_B, kl_BT, mask_BT, cfg), group_ids, mask_BT)
    return adv_BT, None, metrics


@register("reinforce_pp")
@takes_sequences
def reinforce_pp(
    scores_B: Tensor,
    kl_BT: Tensor,
    values_BT: Tensor | None,
    mask_BT: Tensor,
    group_ids: A.GroupIds,
    cfg: AlgorithmConfig,
    *,
    sum_across: A.SumAcross | None = None,
    **_: object,
) -> Returns:
    """REINFORCE++: return-to-go of the score and the per-token KL reward, whitened over the whole step's batch
    (all processes). ``reinforce_estimator``: ``reinforce_baseline`` first subtracts each group's mean score,
    ``group_norm`` normalises scores within each group and skips the whitening (R1-Searcher's code, stages 2 and 1)."""
    kl_coef = cfg.kl_coef if cfg.kl_in_reward else 0.0
    if cfg.reinforce_estimator == "reinforce_baseline":
        scores_B = A.group_centred(scores_B, group_ids)
    elif cfg.reinforce_estimator == "group_norm":
        scores_B = A.group_normalised(scores_B, group_ids)
    whiten = cfg.reinforce_estimator != "group_norm"
    adv_BT, metrics = A.reinforce_pp_returns(
        scores_B, kl_BT, mask_BT, kl_coef, whiten_returns=whiten, sum_across=sum_across
    )
    return adv_BT, None, metrics
