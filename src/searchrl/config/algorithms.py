"""The RL algorithms by name, each with what it needs from the rest of the config: the one table that
``algorithm.name`` accepts, that whole-config validation reads, and that the advantage estimators of
``searchrl.rl.advantages`` are registered against (an estimator for a name missing here is refused, and a test
keeps every name here paired with an estimator).

A new algorithm is one :func:`declare` call plus its estimator (``@register("name")`` of ``searchrl.rl.advantages``),
made in a module that a run config's ``plugins:`` lists (``searchrl.config.extensions``); ``algorithm.name`` is checked
against this table when a config is validated, so a declared name is as good as a built-in one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from searchrl.config.base import Section


@dataclass(frozen=True)
class Algorithm:
    name: str
    #: the advantage is relative to the other rollouts of the same question, always: ``rollout.group_size`` > 1.
    grouped: bool = False
    #: trains a value model beside the policy (the critic's settings configure it; other algorithms refuse them).
    critic: bool = False
    #: ``algorithm.reinforce_estimator`` values that give this (otherwise ungrouped) algorithm a group baseline.
    group_baseline_estimators: tuple[str, ...] = ()
    #: the policy loss: "clip" (PPO's per-token clipped surrogate) or "gspo" (one clipped ratio per sequence).
    policy_loss: str = "clip"
    #: the loss aggregation the method defines (None: ``algorithm.loss_agg``).
    loss_agg: str | None = None

    def has_group_baseline(self, reinforce_estimator: str) -> bool:
        """Whether the advantage is relative to the group (what ``algorithm.drop_uniform_groups`` needs)."""
        return self.grouped or reinforce_estimator in self.group_baseline_estimators


ALGORITHMS: dict[str, Algorithm] = {}


def declare(algorithm: Algorithm) -> Algorithm:
    """Make ``algorithm.name`` a valid ``algorithm.name`` with these traits (then register its estimator with
    :func:`searchrl.rl.advantages.register`). Declaring the same traits again (a re-run notebook cell) is a no-op."""
    if ALGORITHMS.get(algorithm.name) == algorithm and algorithm.name not in _BUILTIN:
        return algorithm
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"algorithm '{algorithm.name}' is declared twice; give the new one another name")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


declare(Algorithm("ppo", critic=True))
declare(Algorithm("grpo", grouped=True))
declare(Algorithm("reinforce_pp", group_baseline_estimators=("reinforce_baseline", "group_norm")))
declare(Algorithm("rloo", grouped=True))
#: Dr. GRPO (Liu et al., 2025): GRPO's advantage without the std division, each sequence's summed loss over a
#: constant length (``algorithm.loss_norm_tokens``) instead of its own
declare(Algorithm("dr_grpo", grouped=True, loss_agg="seq_mean_token_sum_norm"))
#: GSPO (Zheng et al., 2025): GRPO's advantage, one length-normalised importance ratio per sequence, clipped whole
declare(Algorithm("gspo", grouped=True, policy_loss="gspo"))


_BUILTIN = tuple(ALGORITHMS)


def algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(
            f"unknown algorithm.name '{name}'; one of: {', '.join(ALGORITHMS)} (your own: declare it in a module "
            "that plugins: lists)"
        )
    return ALGORITHMS[name]


def group_baselines() -> str:
    """``grpo, rloo, or reinforce_pp with reinforce_estimator=reinforce_baseline or group_norm``."""
    conditional = [
        f"{a.name} with reinforce_estimator={' or '.join(a.group_baseline_estimators)}"
        for a in ALGORITHMS.values()
        if a.group_baseline_estimators and not a.grouped
    ]
    return ", or ".join(filter(None, [", ".join(group_algorithms()), *conditional]))


def ungrouped() -> list[str]:
    return [n for n, a in ALGORITHMS.items() if not a.grouped]


def group_algorithms() -> tuple[str, ...]:
    """The algorithms whose advantage is relative to the other rollouts of the same question."""
    return tuple(n for n, a in ALGORITHMS.items() if a.grouped)


def critic_algorithms() -> tuple[str, ...]:
    """The algorithms that train a value model (critic)."""
    return tuple(n for n, a in ALGORITHMS.items() if a.critic)


def _algorithm_name(value: str) -> str:
    algorithm(value)  # a ValueError naming the declared algorithms
    return value


class AlgorithmConfig(Section):
    #: one of searchrl.config.algorithms.ALGORITHMS, as it is when the config is validated (plugins may declare more).
    name: Annotated[str, AfterValidator(_algorithm_name)] = "grpo"
    clip_eps: float = Field(default=0.2, gt=0)
    #: the ratio's upper clip is 1 + this (DAPO's clip-higher: 0.28); null: clip_eps.
    clip_eps_high: float | None = Field(default=None, gt=0)
    dual_clip: float | None = None  # dual-clip constant c (> 1) for negative advantages; None: off
    #: truncated importance sampling (Yao et al., 2025; veRL's tis_imp_ratio_cap): each token's policy loss is
    #: weighted by min(pi_old / pi_rollout, tis_cap), pi_old the training forward's probability and pi_rollout the
    #: sampler's, correcting for an engine whose numerics differ (vLLM, bf16 decoding); null: off (e.g. 2.0 on).
    tis_cap: float | None = Field(default=None, ge=1.0)
    kl_coef: float = Field(default=0.001, ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    #: True: -kl_coef * KL folded into the reward before the estimator (PPO, REINFORCE++: per token; GRPO, RLOO: the
    #: sequence's summed KL off its score, as verl does); False: a loss term.
    kl_in_reward: bool = False
    kl_ctrl: Literal["fixed", "adaptive"] = "fixed"  #: adaptive: PPO's KL control toward kl_target (rl/kl_control.py)
    kl_target: float = Field(default=0.1, gt=0)
    kl_horizon: int = Field(default=10000, ge=1)
    gamma: float = Field(default=1.0, ge=0, le=1)
    lam: float = Field(default=1.0, ge=0, le=1)
    value_clip: float = Field(default=0.2, gt=0)
    value_coef: float = Field(default=0.5, ge=0)
    entropy_coef: float = 0.0
    norm_adv_by_std: bool = True
    #: how per-token losses become one (searchrl.rl.masked.aggregate_loss); dr_grpo: seq_mean_token_sum_norm.
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = (
        "token_mean"
    )
    #: the constant length of seq_mean_token_sum_norm (Dr. GRPO's "a constant instead of |o_i|"); under Adam it
    #: scales the gradient only as gradient clipping sees it.
    loss_norm_tokens: int = Field(default=1024, ge=1)
    #: GSPO's clip range around 1 of the per-sequence ratio: 1 - low, 1 + high (the paper's 3e-4 and 4e-4).
    gspo_clip_low: float = Field(default=3e-4, gt=0)
    gspo_clip_high: float = Field(default=4e-4, gt=0)
    #: REINFORCE++ only (OpenRLHF's advantage_estimator): "reinforce" = plain (R1-Searcher++ Eq. 1), returns whitened;
    #: "reinforce_baseline" = score minus group mean first (R1-Searcher's code); "group_norm" = (score - group mean) /
    #: (group std + 1e-9), returns not whitened (R1-Searcher's stage-1 code).
    reinforce_estimator: Literal["reinforce", "reinforce_baseline", "group_norm"] = "reinforce"
    mask_observations: bool = True  # retrieved tokens out of every loss term; False: the masking ablation only
    #: PPO critic on the policy's tokens only (True) or every response token (False, RAG-R1's code)
    critic_mask_observations: bool = True
    ppo_epochs: int = Field(default=1, ge=1)
    #: trajectories per optimizer step over all processes (P prompts x G rollouts: ceil(P * G / mini_batch_size)
    #: optimizer steps per epoch). Upstream veRL's ``ppo_mini_batch_size`` counts prompts (multiply it by
    #: rollout.n); Search-R1's veRL fork (also under R-Search) repeats prompts n_agent times first and does not
    #: scale the mini-batch, so there it counts trajectories as given.
    mini_batch_size: int = Field(default=8, ge=1)
    #: old log-probs of the ratio: "rollout" (the generator's), "recompute" (a pass after the rollout), "current" (the
    #: update's own forward, detached: only for one update per step), or "auto": with one on-policy update per step,
    #: the rollout's when the policy's own weights generated in fp32, the current ones in bf16 (unless the KL is in
    #: the reward); else recomputed.
    old_logprobs: Literal["auto", "rollout", "recompute", "current"] = "auto"
    #: DAPO's dynamic sampling (group baselines only): groups that all scored alike (advantage 0) skip the log-prob and
    #: update passes and leave the token-mean loss; max_sampling_rounds > 1 refills them: rounds of prompts_per_step
    #: fresh questions until the step holds that many informative groups (all of them are kept).
    drop_uniform_groups: bool = False
    max_sampling_rounds: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> AlgorithmConfig:
        if self.max_sampling_rounds > 1 and not self.drop_uniform_groups:
            raise ValueError("max_sampling_rounds > 1 refills dropped groups: set algorithm.drop_uniform_groups=true")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError("algorithm.dual_clip must be > 1 (e.g. 3.0) or null to disable it")
        if self.drop_uniform_groups and not algorithm(self.name).has_group_baseline(self.reinforce_estimator):
            raise ValueError(f"algorithm.drop_uniform_groups needs a group baseline: {group_baselines()}")
        own = algorithm(self.name).loss_agg
        if own and self.loss_agg not in (own, type(self).model_fields["loss_agg"].default):
            raise ValueError(f"algorithm.name={self.name} aggregates the loss as {own}: remove algorithm.loss_agg")
        if self.old_logprobs == "rollout" and not self.mask_observations:
            raise ValueError("algorithm.old_logprobs=rollout lacks retrieved tokens' log-probs: use auto or recompute")
        if self.clip_eps_high is not None and algorithm(self.name).policy_loss == "gspo":
            raise ValueError("algorithm.clip_eps_high clips tokens; gspo clips sequences: use gspo_clip_high")
        for field, applies, where in self._only_with():
            if not applies and getattr(self, field) != type(self).model_fields[field].default:
                raise ValueError(f"algorithm.{field} applies {where}, so here it would do nothing: remove it")
        return self

    def _only_with(self) -> list[tuple[str, bool, str]]:
        """(field, whether it acts in this config, where it does): the settings only some algorithms read. A
        resolved config (dump_config) repeats the defaults, so only other values are refused."""
        traits = algorithm(self.name)
        clip = traits.policy_loss == "clip"
        # a plugin's algorithm may read norm_adv_by_std; among the built-in ones only GRPO's and GSPO's do
        by_std = self.name in ("grpo", "gspo") or self.name not in _BUILTIN
        return [
            ("reinforce_estimator", bool(traits.group_baseline_estimators), "to reinforce_pp"),
            ("gspo_clip_low", not clip, "to gspo's sequence ratio"),
            ("gspo_clip_high", not clip, "to gspo's sequence ratio"),
            ("clip_eps", clip, "to token ratios (gspo clips sequences: gspo_clip_low / gspo_clip_high)"),
            ("dual_clip", clip, "to token ratios, not gspo's sequence ratio"),
            ("tis_cap", clip, "to token losses, not gspo's sequence ratio"),
            ("norm_adv_by_std", by_std, "to grpo and gspo (dr_grpo never divides by the std)"),
            ("kl_target", self.kl_ctrl == "adaptive", "with algorithm.kl_ctrl=adaptive"),
            ("kl_horizon", self.kl_ctrl == "adaptive", "with algorithm.kl_ctrl=adaptive"),
        ]
