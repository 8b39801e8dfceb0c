"""Reinforcement learning: the :class:`Trainer` (PPO, GRPO, RLOO, REINFORCE++ and their variants) and the
advantage and loss functions it is built from, usable on their own.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searchrl._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see (they do not run __getattr__)
    from searchrl.rl.advantages import get_estimator as get_estimator
    from searchrl.rl.algorithms import gae_advantages as gae_advantages
    from searchrl.rl.algorithms import grpo_advantages as grpo_advantages
    from searchrl.rl.algorithms import gspo_loss as gspo_loss
    from searchrl.rl.algorithms import kl_penalty as kl_penalty
    from searchrl.rl.algorithms import masked_mean as masked_mean
    from searchrl.rl.algorithms import policy_loss as policy_loss
    from searchrl.rl.algorithms import reinforce_pp_returns as reinforce_pp_returns
    from searchrl.rl.algorithms import rloo_advantages as rloo_advantages
    from searchrl.rl.algorithms import value_loss as value_loss
    from searchrl.rl.algorithms import whiten as whiten
    from searchrl.rl.batch import collate_trajectories as collate_trajectories
    from searchrl.rl.trainer import AuxNLLHook as AuxNLLHook
    from searchrl.rl.trainer import RewardFn as RewardFn
    from searchrl.rl.trainer import Trainer as Trainer
    from searchrl.rl.trainer import TrainState as TrainState
    from searchrl.rl.trainer import default_reward_fn as default_reward_fn

#: name -> the module that defines it (this package's, or a layer below it)
_EXPORTS = {
    "Trainer": "searchrl.rl.trainer",
    "TrainState": "searchrl.rl.trainer",
    "RewardFn": "searchrl.rl.trainer",
    "AuxNLLHook": "searchrl.rl.trainer",
    "default_reward_fn": "searchrl.rl.trainer",
    "get_estimator": "searchrl.rl.advantages",
    "grpo_advantages": "searchrl.rl.algorithms",
    "rloo_advantages": "searchrl.rl.algorithms",
    "gae_advantages": "searchrl.rl.algorithms",
    "reinforce_pp_returns": "searchrl.rl.algorithms",
    "policy_loss": "searchrl.rl.algorithms",
    "gspo_loss": "searchrl.rl.algorithms",
    "value_loss": "searchrl.rl.algorithms",
    "kl_penalty": "searchrl.rl.algorithms",
    "whiten": "searchrl.rl.algorithms",
    "masked_mean": "searchrl.rl.algorithms",
    "collate_trajectories": "searchrl.rl.batch",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
