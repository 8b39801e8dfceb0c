"""KL coefficient controllers: fixed, or adaptive as in PPO's KL control (Ziegler et al., 2019, "Fine-Tuning
Language Models from Human Preferences", §2.2).

The trainer asks the controller for the step's coefficient before it computes advantages (KL folded into the reward,
``algorithm.kl_in_reward``) or the loss (KL as a loss term), then tells it the step's measured KL:

- ``fixed``: ``algorithm.kl_coef`` throughout.
- ``adaptive``: ``beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon)`` after each step of ``n``
  trajectories, with ``algorithm.kl_target`` and ``algorithm.kl_horizon`` (verl's ``AdaptiveKLController`` and
  OpenRLHF's use the same rule). ``KL`` is the token mean over the policy's tokens (``kl/mean``, averaged over
  processes); verl feeds the mean over sequences of each sequence's mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from searchrl.config import AlgorithmConfig


@dataclass
class FixedKL:
    value: float

    def update(self, kl: float, n_steps: int) -> None:
        """A fixed coefficient ignores the measured KL."""


@dataclass
class AdaptiveKL:
    value: float
    target: float
    horizon: int

    def update(self, kl: float, n_steps: int) -> None:
        """A KL that is not finite (a step whose scoring pass overflowed) leaves the coefficient as it was: the clip
        passes NaN through, and the coefficient, saved in checkpoints, would stay NaN for good."""
        if not math.isfinite(kl):
            return
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(alg: AlgorithmConfig) -> FixedKL | AdaptiveKL:
    """The controller ``algorithm.kl_ctrl`` names, starting at ``algorithm.kl_coef``."""
    if alg.kl_ctrl == "adaptive":
        return AdaptiveKL(alg.kl_coef, alg.kl_target, alg.kl_horizon)
    return FixedKL(alg.kl_coef)
