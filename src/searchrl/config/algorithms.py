"""The RL algorithms by name, each with what it needs from the rest of the config: the one table that
``algorithm.name`` accepts, that whole-config validation reads, and that the advantage estimators of
``searchrl.rl.advantages`` are registered against (an estimator for a name missing here is refused, and a test
keeps every name here paired with an estimator).

A new algorithm is one :func:`declare` call in this module (the config's ``Literal`` is built from the table when
the module loads) plus its estimator (``@register("name")`` in ``searchrl.rl.advantages``).
"""

from __future__ import annotations

from dataclasses import dataclass


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


def algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm.name '{name}'; one of: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def group_baselines() -> str:
    """``grpo, rloo, or reinforce_pp with reinforce_estimator=reinforce_baseline or group_norm``."""
    conditional = [
        f"{a.name} with reinforce_estimator={' or '.join(a.group_baseline_estimators)}"
        for a in ALGORITHMS.values()
        if a.group_baseline_estimators and not a.grouped
    ]
    return ", or ".join(filter(None, [", ".join(GROUP_ALGORITHMS), *conditional]))


def ungrouped() -> list[str]:
    return [n for n, a in ALGORITHMS.items() if not a.grouped]


#: Algorithms whose advantage is relative to the other rollouts of the same question.
GROUP_ALGORITHMS = tuple(n for n, a in ALGORITHMS.items() if a.grouped)
#: Algorithms that train a value model (critic).
CRITIC_ALGORITHMS = tuple(n for n, a in ALGORITHMS.items() if a.critic)
