"""A step's experience: its prompts (a seeded permutation per data epoch, sharded over processes), its sampling
rounds (DAPO's refill), their rewards, and the generator's counted work. The trainer samples on the policy itself;
one-step off-policy training (``searchrl.rl.async_rollout``) samples the same way on a behaviour copy, in a
background thread, with its own copy of the data position."""

from __future__ import annotations

import contextlib
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from searchrl import device as placement
from searchrl.config import RunConfig
from searchrl.data.records import QAExample
from searchrl.rl import algorithms as A
from searchrl.rl.checkpoint import TrainState
from searchrl.rl.hooks import NLLSequence, RewardFn
from searchrl.rl.passes import Passes
from searchrl.rollout.engine import RolloutEngine
from searchrl.rollout.trajectory import Trajectory


@dataclass
class Experience:
    """One step's scored rollouts (this process's share) and what was counted while making them."""

    trajs: list[Trajectory]
    scores: list[float]
    reward_metrics: dict[str, float]
    engine_stats: dict[str, float]  # the rollout engine's timings, summed over the sampling rounds
    gen_counts: dict[str, float]  # the generator's work counters' increase over the step
    aux_seqs: list[NLLSequence] = field(default_factory=list)  # the memorization hook's NLL sequences
    #: off-policy: the behaviour policy's log-prob of every response token of each trajectory (0 on inserted ones),
    #: the ratio's denominator; None: the trainer's own old log-probs (on-policy).
    behaviour_logp: list[list[float]] | None = None

    def behaviour_logprobs(self, rows: Sequence[int], mask_BT: torch.Tensor) -> torch.Tensor | None:
        """The behaviour log-probs of trajectories ``rows`` as the step batch's ``(B, T)``, 0 outside ``mask_BT``."""
        if self.behaviour_logp is None:
            return None
        out_BT = torch.zeros(mask_BT.shape, dtype=torch.float32)  # (B, T)
        for b, i in enumerate(rows):
            lp = self.behaviour_logp[i]
            out_BT[b, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
        return torch.where(mask_BT.bool(), out_BT.to(mask_BT.device), 0.0)


def check_finite(scores: Sequence[float], trajs: Sequence[Trajectory]) -> None:
    """A score that is not a finite number (NaN, inf) would turn the step's advantages, its loss and then the
    weights into NaN: one line naming its rollout instead."""
    bad = next((i for i, s in enumerate(scores) if not math.isfinite(float(s))), None)
    if bad is not None:
        raise ValueError(
            f"the reward function returned {scores[bad]} for rollout {bad} (question {trajs[bad].question_id}): "
            "return a finite number for every rollout (e.g. 0.0 where it cannot score one)"
        )


class Sampler:
    """Rolls out a step: rounds of ``prompts_per_step`` questions until the step is full (see :meth:`experience`)."""

    def __init__(self, cfg: RunConfig, examples: list[QAExample], passes: Passes, rank: int, world: int) -> None:
        self.cfg = cfg
        self.examples = examples
        self.passes = passes
        self.rank, self.world = rank, world

    def prompts(self, state: TrainState) -> list[QAExample]:
        """The next ``prompts_per_step`` questions for this process, moving ``state``'s data position past them."""
        n, seed = self.cfg.training.prompts_per_step, self.cfg.training.seed
        out: list[QAExample] = []
        while len(out) < n:
            order = list(range(len(self.examples)))
            random.Random(seed * 1_000_003 + state.data_epoch).shuffle(order)
            take = order[state.data_pos : state.data_pos + n - len(out)]
            out.extend(self.examples[i] for i in take)
            state.data_pos += len(take)
            if state.data_pos >= len(order):
                state.data_epoch, state.data_pos = state.data_epoch + 1, 0
        return out[self.rank :: self.world]

    def experience(
        self, engine: RolloutEngine, reward_fn: RewardFn, step: int, state: TrainState, root: nn.Module | None = None
    ) -> Experience:
        """Step ``step``'s scored rollouts by ``engine``, the questions drawn from ``state``'s data position (FSDP2's
        root parameters of ``root`` gathered around each rollout: ``searchrl.device.unsharded``). With
        ``algorithm.max_sampling_rounds`` > 1 (and ``drop_uniform_groups``), DAPO's dynamic sampling: further rounds
        of ``prompts_per_step`` fresh questions until the step holds that many informative groups (counted over all
        processes) or the rounds run out; every informative group is kept."""
        cfg, alg = self.cfg, self.cfg.algorithm
        if hasattr(engine.retriever, "set_progress"):  # a simulated engine's noise curriculum
            engine.retriever.set_progress(step / max(cfg.training.steps - 1, 1))
        before = engine.generator.counters()
        trajs: list[Trajectory] = []
        scores: list[float] = []
        per_round: list[dict[str, float]] = []
        engine_stats: Counter[str] = Counter()
        for rnd in range(alg.max_sampling_rounds):
            with placement.unsharded(root) if root is not None else contextlib.nullcontext():
                new = engine.run(
                    self.prompts(state),
                    group_size=cfg.rollout.group_size,
                    temperature=cfg.rollout.temperature,
                    top_p=cfg.rollout.top_p,
                    seed=cfg.training.seed * 7919 + step * 101 + self.rank + rnd * 1_000_033,
                    group_prefix=f"s{step}/" if rnd == 0 else f"s{step}r{rnd}/",
                )
            engine_stats.update(engine.stats)
            new_scores, m = reward_fn(new)
            check_finite(new_scores, new)
            trajs, scores = trajs + new, scores + list(new_scores)
            per_round.append(m)
            if rnd + 1 < alg.max_sampling_rounds:
                informative = A.informative_group_count(scores, [t.group_id for t in trajs])
                if self.passes.global_count(float(informative)) >= cfg.training.prompts_per_step:
                    break
        reward_metrics = {k: float(np.mean([m[k] for m in per_round if k in m])) for k in per_round[0]}
        reward_metrics["reward/total"] = float(np.mean(scores)) if scores else 0.0  # the scores given, any reward_fn
        reward_metrics["sampling/rounds"] = float(len(per_round))
        gen_counts = Counter(engine.generator.counters())
        gen_counts.subtract(before)
        return Experience(trajs, scores, reward_metrics, dict(engine_stats), dict(gen_counts))
