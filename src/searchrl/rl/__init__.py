"""Reinforcement learning: the :class:`Trainer` (PPO, GRPO, RLOO, REINFORCE++ and their variants) and the
advantage and loss functions it is built from, usable on their own.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from searchrl._lazy import lazy_exports

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
