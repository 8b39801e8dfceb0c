"""The RL loop on accelerate: prompts -> rollouts -> rewards -> log-probs -> advantages -> K epochs of updates.

How this departs from the textbook algorithms (each choice is configurable where the papers disagree):
- Retrieved tokens are out of the policy loss, KL, entropy and value loss (``mask_observations``; off: the ablation).
- Old log-probs (``algorithm.old_logprobs``): with one on-policy update per step (one epoch, one mini-batch) and the
  policy's own weights in the generator, the generator's (a recomputation's to ~1e-5, tested: one pass saved); else
  recomputed after the rollout, so the ratio is 1 on the first mini-batch whatever engine or precision generated.
- No pass the step does not need: no reference forward without KL; rows sharing a prompt run it once
  (``TokenScorer``); micro-batches are length-bucketed and trimmed to their own longest row, within a token budget;
  ``algorithm.drop_uniform_groups`` leaves out the groups whose samples all scored alike (advantage 0), and
  ``algorithm.max_sampling_rounds`` refills them with fresh questions (DAPO's dynamic sampling).
- Group ids are ``"s<step>/<question id>"``, globally unique across steps and merged data sets.
- Losses divide by the whole mini-batch's token (or sequence) count over micro-batches and processes: any split.
- Several processes each roll out an equal shard of the step's prompts (groups never straddle two). The mini-batch
  size counts all processes' trajectories, so optimizer steps per RL step do not depend on the process count; PPO and
  REINFORCE++ whiten over all processes' rows. Every process makes the same number of forward/backward passes
  (zero-weight ones where it has fewer rows or memorization sequences): uneven shards never leave a collective waiting.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from searchrl import device as placement
from searchrl.config import ConfigError, RunConfig, dump_config
from searchrl.data.records import QAExample
from searchrl.generation import make_generator
from searchrl.generation.base import Generator
from searchrl.models import portable_tokenizer_config
from searchrl.protocols.base import Protocol
from searchrl.rewards.correctness import Correctness
from searchrl.rewards.summary import rollout_metrics
from searchrl.rl import algorithms as A
from searchrl.rl.advantages import get_estimator
from searchrl.rl.batch import (
    Batch,
    TokenScorer,
    collate_trajectories,
    forward_tokens,
    plan_micro_batches,
    prompt_keys,
    score_tokens,
)
from searchrl.rl.kl_control import make_kl_controller
from searchrl.rl.metrics_log import MetricsWriter, log_rollouts
from searchrl.rl.update import StepTensors, ValueModel, policy_micro_loss, value_micro_loss
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.rollout.trajectory import Trajectory
from searchrl.tuning import atomic_dir, full_state_dict, load_policy_weights, save_merged, warmup_schedule, wrap_lora
from searchrl.utils import hard_exit, make_adamw, progress, tune_allocator

#: ``(trajectories, protocol) -> (scores, metrics)``; the default composes cfg.reward's components.
RewardFn = Callable[[Sequence[Trajectory]], tuple[list[float], dict[str, float]]]
#: ``(step, trajectories) -> list of (prompt_ids, response_ids, loss_mask)`` extra NLL sequences (memorization loss).
AuxNLLHook = Callable[[int, Sequence[Trajectory]], list[tuple[list[int], list[int], list[int]]]]


@dataclass
class TrainState:
    step: int = 0
    data_epoch: int = 0
    data_pos: int = 0
    kl_coef: float | None = None  # the KL controller's coefficient (adaptive control changes it step by step)


def default_reward_fn(cfg: RunConfig, protocol: Protocol, tokenizer, reader=None, judge=None) -> RewardFn:
    from searchrl.rewards import RewardComposer, RewardInput

    composer = RewardComposer.from_config(cfg.reward, reader=reader, judge=judge)

    def fn(trajs: Sequence[Trajectory]) -> tuple[list[float], dict[str, float]]:
        inputs = [RewardInput.from_trajectory(protocol, t, tokenizer) for t in trajs]
        res = composer(inputs)
        return res.total, res.metrics

    return fn


class Trainer:
    def __init__(
        self,
        cfg: RunConfig,
        model: nn.Module,
        tokenizer,
        protocol: Protocol,
        retriever,
        train_examples: Sequence[QAExample],
        reward_fn: RewardFn | None = None,
        aux_nll_hook: AuxNLLHook | None = None,
        micro_batch_size: int | None = None,
        generator: Generator | None = None,
        eval_examples: Sequence[QAExample] | None = None,
    ) -> None:
        from accelerate import Accelerator

        self.cfg = cfg
        self.alg = cfg.algorithm
        self.tcfg = cfg.training
        self.place = placement.configure_from(cfg)
        self.acc = Accelerator(
            gradient_accumulation_steps=1,
            cpu=self.place.device.type == "cpu",
            mixed_precision="bf16" if self.place.precision == "bf16" else "no",
        )
        if self.tcfg.prompts_per_step % self.acc.num_processes:
            raise ConfigError(
                f"training.prompts_per_step={self.tcfg.prompts_per_step} must be divisible by the "
                f"{self.acc.num_processes} processes (each process rolls out an equal share of the step's prompts)"
            )
        self.tokenizer = tokenizer
        self.protocol = protocol
        self.examples = list(train_examples)
        if not self.examples:
            raise ValueError("no training questions: check data.train (and data.kinds / data.train_limit)")
        self.reward_fn = reward_fn or default_reward_fn(cfg, protocol, tokenizer)
        self.correctness = Correctness.from_reward_config(cfg.reward)  # the run's one "is this answer correct"
        self.eval_examples = list(eval_examples or [])[: self.tcfg.eval_limit]
        self.aux_nll_hook = aux_nll_hook
        self.mem_coef = cfg.memorization.coef
        self._aux_on = aux_nll_hook is not None and self.mem_coef > 0
        self.estimator = get_estimator(self.alg.name)
        self.kl_ctrl = make_kl_controller(self.alg)
        self.micro = micro_batch_size or self.tcfg.micro_batch_size
        tune_allocator()
        self.out_dir = Path(self.tcfg.output_dir)
        self.state = TrainState()
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

        self.ref: nn.Module | None = None
        needs_ref = self.alg.kl_coef > 0
        if self.tcfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False  # the training forward keeps no cache; generation passes its own
        if cfg.model.lora is not None:
            model = wrap_lora(model, cfg.model.lora)
        elif needs_ref:  # a frozen copy on the device, in bf16 under mixed precision (no fp32 second copy)
            self.ref = placement.frozen_copy(model, self.acc.device)
        model.train()
        self.critic: ValueModel | None = None
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = make_adamw(params, lr=self.tcfg.lr, weight_decay=self.tcfg.weight_decay)
        self.sched = warmup_schedule(self.opt, self.tcfg.warmup_steps)
        # self.model is the (possibly DDP-wrapped) scorer; self.policy the causal LM inside it.
        self.model, self.opt = self.acc.prepare(TokenScorer(model), self.opt)
        self.policy = self.acc.unwrap_model(self.model).lm
        if self.estimator.critic:
            import copy

            critic = ValueModel(copy.deepcopy(self.policy))
            self.critic_opt = make_adamw(critic.parameters(), lr=self.tcfg.critic_lr)
            self.critic, self.critic_opt = self.acc.prepare(critic, self.critic_opt)
            self.critic_sched = warmup_schedule(self.critic_opt, self.tcfg.critic_warmup_steps)
        # The default generator shares the policy's weights; another backend (e.g. vLLM) keeps its own copy, which
        # _sync_generator refreshes before each rollout that follows an optimizer step.
        if generator is None and cfg.rollout.backend == "vllm":
            raise ValueError("rollout.backend=vllm: pass the engine as generator= (searchrl train builds it for you)")
        self.generator = generator or make_generator(cfg.rollout.backend, self.policy, tokenizer)
        self._weights_version = 0  # optimizer steps (and checkpoint loads) applied to the policy
        self._generator_version = 0  # the policy version the generator's weights hold
        self._tokens: Counter[str] = Counter()
        limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
        self.engine = RolloutEngine(self.generator, retriever, protocol, limits, cfg.model.prompt_style)
        self._writer = MetricsWriter(self.out_dir, self.tcfg.tensorboard, self.tcfg.wandb, cfg.name, cfg.model_dump())

    # ------------------------------------------------------------------------------------------------ data
    def _next_prompts(self) -> list[QAExample]:
        """The step's prompts for this process: a seeded permutation per data epoch, sharded across processes."""
        n = self.tcfg.prompts_per_step
        out: list[QAExample] = []
        while len(out) < n:
            order = list(range(len(self.examples)))
            random.Random(self.tcfg.seed * 1_000_003 + self.state.data_epoch).shuffle(order)
            take = order[self.state.data_pos : self.state.data_pos + n - len(out)]
            out.extend(self.examples[i] for i in take)
            self.state.data_pos += len(take)
            if self.state.data_pos >= len(order):
                self.state.data_epoch, self.state.data_pos = self.state.data_epoch + 1, 0
        return out[self.acc.process_index :: self.acc.num_processes]

    # ------------------------------------------------------------------------------------------------ step
    def _loss_mask(self, b: Batch) -> torch.Tensor:
        return b.action_mask if self.alg.mask_observations else b.response_mask  # (B, T)

    def _old_logprobs_from_rollout(self, n_global: int) -> bool:
        """Whether the step's old log-probs can be the generator's own: exactly one on-policy update (one epoch, one
        mini-batch) and a generator that runs the policy's own weights (so they match a recomputation to ~1e-5)."""
        mode = self.alg.old_logprobs
        if mode != "auto":
            return mode == "rollout"
        one_update = self.alg.ppo_epochs == 1 and self.alg.mini_batch_size >= n_global
        # In bf16 the decode loop and the training forward round differently (docs/gpu.md): recompute, so the
        # ratio is exactly 1 on the first mini-batch, as in fp32.
        exact = self.place.precision == "fp32"
        return one_update and exact and getattr(self.generator, "model", None) is self.policy

    def _micro(self, batch: Batch, rows: Sequence[int] | None = None, grad: bool = True) -> list[list[int]]:
        """Length-bucketed micro-batches over ``rows`` (default all), rows with one prompt kept together; no-grad
        passes get 4x the rows and the token budget."""
        rows = list(range(len(batch))) if rows is None else list(rows)
        resp = batch.response_mask.sum(-1).tolist()
        prompt = [n - r for n, r in zip(batch.lengths, resp, strict=True)]
        keys = prompt_keys(batch)
        scale = 1 if grad else 4
        plans = plan_micro_batches(
            [prompt[i] for i in rows],
            [resp[i] for i in rows],
            self.micro * scale,
            self.tcfg.micro_batch_tokens * scale,
            [keys[i] for i in rows],
        )
        return [[rows[j] for j in p] for p in plans]

    @torch.no_grad()
    def _logprobs(self, scorer: nn.Module, batch: Batch, mask_BT: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(mask_BT.shape, dtype=torch.float32, device=mask_BT.device)  # (B, T)
        for idx, real in self._equal_passes(self._micro(batch, grad=False)):
            mb = batch.select(idx)
            T = mb.response_ids.shape[1]
            with self.acc.autocast():
                logp_BT = score_tokens(scorer, mb, mask_BT[idx, :T])[0].float()
            if real:
                out[idx, :T] = logp_BT
                self._tokens["logprob"] += forward_tokens(mb, scorer.share_prompts)
        return out

    def _equal_passes(self, plans: list[list[int]]) -> list[tuple[list[int], bool]]:
        """``plans`` padded with ``(row 0, False)`` passes up to the most any process makes: sharded weights (FSDP)
        are gathered at every forward, so every process must make as many as the others."""
        (n,) = self._global_max([len(plans)])
        return [(plans[k], True) if k < len(plans) else ([0], False) for k in range(n)]

    def _sync_generator(self) -> None:
        """Push the policy's current weights into a generator that keeps its own copy (e.g. vLLM), once per new
        optimizer state, before it generates."""
        if self._generator_version == self._weights_version or getattr(self.generator, "model", None) is self.policy:
            return
        self.generator.load_weights(full_state_dict(self.policy))
        self._generator_version = self._weights_version

    def _sample(self, step: int) -> tuple[list[Trajectory], list[float], dict[str, float], dict[str, float]]:
        """The step's scored rollouts. With ``algorithm.max_sampling_rounds`` > 1 (and ``drop_uniform_groups``), DAPO's
        dynamic sampling: further rounds of ``prompts_per_step`` fresh questions until the step holds that many
        informative groups (counted over all processes) or the rounds run out; every informative group is kept."""
        trajs: list[Trajectory] = []
        scores: list[float] = []
        per_round: list[dict[str, float]] = []
        gen_stats: Counter[str] = Counter()
        for rnd in range(self.alg.max_sampling_rounds):
            new = self.engine.run(
                self._next_prompts(),
                group_size=self.cfg.rollout.group_size,
                temperature=self.cfg.rollout.temperature,
                top_p=self.cfg.rollout.top_p,
                seed=self.tcfg.seed * 7919 + step * 101 + self.acc.process_index + rnd * 1_000_033,
                group_prefix=f"s{step}/" if rnd == 0 else f"s{step}r{rnd}/",
            )
            gen_stats.update(self.engine.stats)
            new_scores, m = self.reward_fn(new)
            trajs, scores = trajs + new, scores + list(new_scores)
            per_round.append(m)
            if rnd + 1 < self.alg.max_sampling_rounds:
                informative = A.informative_group_count(scores, [t.group_id for t in trajs])
                if self._global_count(float(informative)) >= self.tcfg.prompts_per_step:
                    break
        reward_metrics = {k: float(np.mean([m[k] for m in per_round if k in m])) for k in per_round[0]}
        reward_metrics["sampling/rounds"] = float(len(per_round))
        return trajs, scores, reward_metrics, dict(gen_stats)

    def train_step(self) -> dict[str, float]:
        # the step's algorithm settings carry the KL controller's current coefficient (fixed: algorithm.kl_coef)
        self.alg = alg = self.cfg.algorithm.model_copy(update={"kl_coef": self.kl_ctrl.value})
        step = self.state.step
        t0 = time.perf_counter()
        placement.reset_peak_memory()
        self._sync_generator()
        gen_before = Counter(getattr(self.generator, "stats", {}))
        trajs, scores, reward_metrics, gen_stats = self._sample(step)
        gen_counts = Counter(getattr(self.generator, "stats", {}))
        gen_counts.subtract(gen_before)
        aux_seqs: list[tuple[list[int], list[int], list[int]]] = []
        if self._aux_on:
            assert self.aux_nll_hook is not None
            aux_seqs = list(self.aux_nll_hook(step, trajs))  # once per step; its NLL joins every optimizer step
        t_reward = time.perf_counter()

        self._tokens = Counter()
        gids = [t.group_id for t in trajs]  # the rows scored and updated: all, or those of informative groups
        rows, m_filter = A.informative_rows(scores, gids) if alg.drop_uniform_groups else (list(range(len(trajs))), {})
        upd, upd_scores = [trajs[i] for i in rows], [scores[i] for i in rows]
        batch = collate_trajectories(upd, self._pad).to(self.acc.device)
        mask_BT = self._loss_mask(batch)  # (B, T) the policy-loss positions
        # The critic's positions: the policy's tokens, or every response token (RAG-R1's code) when
        # critic_mask_observations is off; the policy loss always uses mask_BT.
        cmask_BT = mask_BT if alg.critic_mask_observations else batch.response_mask.to(mask_BT.dtype)  # (B, T)
        scores_B = torch.tensor(upd_scores, dtype=torch.float32, device=self.acc.device)  # (B,)
        n_global = int(self._global_count(float(len(batch))))  # the step's trajectories, all processes
        scorer = self.acc.unwrap_model(self.model)
        if self._old_logprobs_from_rollout(n_global):
            old_logp_BT = torch.where(mask_BT.bool(), batch.rollout_logp, 0.0)  # (B, T) the sampler's own
        else:
            old_logp_BT = self._logprobs(scorer, batch, mask_BT)  # (B, T)
        ref_logp_BT = None
        if alg.kl_coef > 0:
            if self.ref is not None:
                ref_logp_BT = self._logprobs(TokenScorer(self.ref), batch, mask_BT)
            else:  # LoRA: the base model is the adapter-disabled policy
                with self.policy.disable_adapter():
                    ref_logp_BT = self._logprobs(scorer, batch, mask_BT)
        metrics: dict[str, float] = {}
        kl_BT = torch.zeros_like(old_logp_BT)
        if ref_logp_BT is not None:
            kl_BT, m = A.kl_penalty(old_logp_BT, ref_logp_BT, mask_BT, alg.kl_estimator)
            metrics.update(m)
        old_values_BT = None
        if self.critic is not None:
            old_values_BT = self._values(batch)  # (B, T)
        adv_BT, returns_BT, m = self.estimator.fn(
            scores_B,
            kl_BT,
            old_values_BT,
            mask_BT,
            [t.group_id for t in upd],
            alg,
            critic_mask_BT=cmask_BT,
            sum_across=self._sum_across,
        )
        metrics.update({**m, **m_filter})
        kl_in_loss = alg.kl_coef > 0 and not alg.kl_in_reward and ref_logp_BT is not None
        st = StepTensors(
            mask_BT, cmask_BT, old_logp_BT, adv_BT, ref_logp_BT if kl_in_loss else None, old_values_BT, returns_BT
        )

        # ---- K epochs over mini-batches, each accumulated over micro-batches with global normalisers
        t_update = time.perf_counter()
        acc_metrics: dict[str, list[float]] = {}
        aux_tokens = self._global_count(float(sum(sum(s[2]) for s in aux_seqs))) if self._aux_on else 0.0
        gen = torch.Generator().manual_seed(self.tcfg.seed + step)
        n_updates = 0
        for _epoch in range(alg.ppo_epochs):
            for mini in self._mini_batches(len(batch), n_global, gen):
                self.opt.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic_opt.zero_grad(set_to_none=True)
                for k, v in self._update_policy(batch, mini, st).items():
                    acc_metrics.setdefault(k, []).extend(v)
                if aux_tokens > 0:
                    acc_metrics.setdefault("loss/memorization_nll", []).append(
                        self._aux_nll(aux_seqs, aux_tokens, batch)
                    )
                gnorm = self.acc.clip_grad_norm_(self.model.parameters(), self.tcfg.max_grad_norm)
                acc_metrics.setdefault("grad_norm", []).append(float(gnorm))
                self.opt.step()
                n_updates += 1
                self._weights_version += 1
                if self.critic is not None:
                    self.acc.clip_grad_norm_(self.critic.parameters(), self.tcfg.max_grad_norm)
                    self.critic_opt.step()
        self.sched.step()
        if self.critic is not None:
            self.critic_sched.step()
        t_end = time.perf_counter()
        metrics["update/optimizer_steps"] = float(n_updates)

        metrics.update({k: float(np.mean(v)) for k, v in acc_metrics.items()})
        metrics.update(reward_metrics)
        metrics.update(placement.peak_memory_metrics())  # CUDA: torch's allocated / reserved peaks of the step
        metrics.update(rollout_metrics(trajs, self.protocol, self.tokenizer, self.correctness))
        metrics.update(getattr(self.aux_nll_hook, "last_metrics", None) or {})
        n_prompt = sum(len(t.prompt_ids) for t in trajs)
        n_resp = sum(len(t.response_ids) for t in trajs)
        metrics.update({f"gen/{k}": float(v) for k, v in gen_counts.items()})
        metrics.update(
            {
                "tokens/prompt": float(n_prompt),
                "tokens/response": float(n_resp),
                "tokens/generated": float(sum(t.n_policy_tokens for t in trajs)),
                "tokens/scored_padded": float(sum(self._tokens.values())),  # positions computed, padding included
                **{f"tokens/scored_{k}": float(v) for k, v in self._tokens.items()},  # per phase
                "step": step + 1,
                "lr": self.sched.get_last_lr()[0],
                "time/generate_s": gen_stats.get("generate_s", 0.0),
                "time/retrieve_s": gen_stats.get("retrieve_s", 0.0),
                "time/reward_s": t_reward - t0 - gen_stats.get("engine_s", 0.0),
                "time/logprob_s": t_update - t_reward,
                "time/update_s": t_end - t_update,
                "time/step_s": t_end - t0,
            }
        )
        metrics["kl/coef"] = alg.kl_coef
        if "kl/mean" in metrics:
            self.kl_ctrl.update(metrics["kl/mean"], n_global)
        self.state.kl_coef = self.kl_ctrl.value
        self.state.step += 1
        self.last_trajectories = trajs
        self._log_rollouts(step + 1, trajs, scores)
        return metrics

    def _sum_across(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over every process (itself in one process)."""
        return self.acc.reduce(t, reduction="sum") if self.acc.num_processes > 1 else t

    def _global_count(self, x: float) -> float:
        return float(self._sum_across(torch.tensor([x], dtype=torch.float64, device=self.acc.device)).item())

    def _global_max(self, xs: Sequence[int]) -> list[int]:
        """Element-wise maximum over processes (how many forward/backward passes every process must make)."""
        if self.acc.num_processes == 1:
            return list(xs)
        t = torch.tensor(list(xs), dtype=torch.int64, device=self.acc.device)
        return self.acc.gather(t).view(self.acc.num_processes, -1).amax(0).tolist()

    def _mini_batches(self, n_rows: int, n_global: int, gen: torch.Generator) -> list[list[int]]:
        """This process's rows, shuffled, in the step's mini-batches.

        ``algorithm.mini_batch_size`` counts trajectories of all processes together, so every process makes the same
        ``ceil(n_global / mini_batch_size)`` optimizer steps whatever the number of processes, and each mini-batch
        takes an even share of every process's rows (possibly none: a process then makes zero-weight passes)."""
        n = max(1, math.ceil(n_global / self.alg.mini_batch_size))
        perm = torch.randperm(n_rows, generator=gen).tolist()
        return [perm[round(i * n_rows / n) : round((i + 1) * n_rows / n)] for i in range(n)]

    @torch.no_grad()
    def _values(self, batch: Batch) -> torch.Tensor:
        """The critic's values before the update."""
        critic = self.acc.unwrap_model(self.critic)
        out = torch.zeros(batch.response_ids.shape, dtype=torch.float32, device=batch.response_ids.device)  # (B, T)
        for idx, real in self._equal_passes(self._micro(batch, grad=False)):
            v_BT = critic(batch.select(idx))
            if real:
                out[idx, : v_BT.shape[1]] = v_BT.float()
        return out

    def _update_policy(self, batch: Batch, mini: list[int], st: StepTensors) -> dict[str, list[float]]:
        """Gradients of one mini-batch's policy (and value) loss, accumulated over micro-batches.

        Every process makes as many passes as the process with the most micro-batches (DDP and FSDP synchronise at
        every pass); a process short of rows makes zero-weight passes on its first row."""
        alg = self.alg
        g_tok = self._global_count(float(st.mask_BT[mini].sum()))
        g_seq = self._global_count(float((st.mask_BT[mini].sum(-1) > 0).sum()))
        c_tok, c_seq = g_tok, g_seq
        if self.critic is not None and st.cmask_BT is not st.mask_BT:
            cm = st.cmask_BT[mini]
            c_tok, c_seq = self._global_count(float(cm.sum())), self._global_count(float((cm.sum(-1) > 0).sum()))
        out: dict[str, list[float]] = {}
        for idx, real in self._equal_passes(self._micro(batch, mini) if mini else []):
            weight = 1.0 if real else 0.0
            mb = batch.select(idx)
            self._tokens["update"] += forward_tokens(mb)
            loss, pm = policy_micro_loss(self.model, mb, idx, st, alg, g_tok, g_seq)
            # DDP averages gradients over processes; the loss is already global, so undo the average.
            self.acc.backward(weight * loss * self.acc.num_processes)
            if self.critic is not None:
                vl, vm = value_micro_loss(self.critic, mb, idx, st, alg, c_tok, c_seq)
                self.acc.backward(weight * alg.value_coef * vl * self.acc.num_processes)
                pm.update(vm)
            if weight:
                pm["loss/policy_total"] = float(loss.detach())
                for key, v in pm.items():
                    out.setdefault(key, []).append(v)
        return out

    def _aux_nll(self, seqs: Sequence[tuple[list[int], list[int], list[int]]], n_tok: float, batch: Batch) -> float:
        """Adds ``coef * NLL`` of extra sequences (R1-Searcher++'s memorization loss, Eq. 8) to the gradients:
        the token mean over the ``n_tok`` counted tokens of all processes' sequences, in micro-batches. A process
        with fewer micro-batches than another (or no sequence) makes zero-weight passes on its first rollout."""
        from searchrl.rl.batch import collate

        parts = [seqs[i : i + self.micro] for i in range(0, len(seqs), self.micro)]
        (n_parts,) = self._global_max([len(parts)])
        total = 0.0
        for k in range(n_parts):
            if k < len(parts):
                part, weight = parts[k], 1.0
                b = collate([s[0] for s in part], [s[1] for s in part], [s[2] for s in part], pad_id=self._pad)
                b = b.to(self.acc.device)
            else:
                b, weight = batch.select([0]), 0.0
            logp_BT, _ = score_tokens(self.model, b, b.action_mask)  # (B, T)
            nll = -A.aggregate_loss(logp_BT, b.action_mask, "token_mean", global_tokens=n_tok)
            self.acc.backward(weight * self.mem_coef * nll * self.acc.num_processes)
            total += weight * float(nll.detach())
        return total

    def _log_rollouts(self, step: int, trajs: Sequence[Trajectory], scores: Sequence[float]) -> None:
        if self.acc.is_main_process:
            log_rollouts(self.out_dir, self.tcfg.log_rollouts, step, trajs, scores, self.correctness)

    def evaluate(self) -> dict[str, float]:
        """Greedy rollouts on the held-out questions (main process only): ``eval/*`` metrics, and the trajectories
        in ``<output_dir>/evals/step_<k>.jsonl`` for ``searchrl view``."""
        if not self.eval_examples or not self.acc.is_main_process:
            return {}
        from searchrl.rewards.summary import scored_records, summarize
        from searchrl.utils import write_jsonl

        t0, step = time.perf_counter(), self.state.step
        trajs = self.engine.run(self.eval_examples, temperature=0.0, seed=self.tcfg.seed, group_prefix="eval/")
        summary = summarize(trajs, self.protocol, self.tokenizer, self.correctness)
        rows = scored_records(trajs, source=f"eval/step_{step}", correctness=self.correctness, step=step)
        write_jsonl(self.out_dir / "evals" / f"step_{step}.jsonl", rows)
        out = {f"eval/{k}": v for k, v in summary.items() if k != "n"}
        out["time/eval_s"] = time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------------------------------- run / io
    def close(self, exit_process: bool = False) -> None:
        """End a multi-process run: every process reaches this point, then the process group is destroyed; with
        ``exit_process`` the process then ends (:func:`searchrl.utils.hard_exit`: gloo's teardown at interpreter exit
        can deadlock or abort). A no-op with one process."""
        if self.acc.num_processes > 1:
            self.acc.wait_for_everyone()
            self.acc.end_training()
            if exit_process:
                hard_exit()

    def train(self, steps: int | None = None, resume: bool = False) -> list[dict[str, float]]:
        total = steps if steps is not None else self.tcfg.steps
        if resume:
            self.load_checkpoint(self.out_dir / "checkpoint")
        if self.acc.is_main_process:
            dump_config(self.cfg, self.out_dir / "config.yaml")
        history = []
        every = self.tcfg.eval_every
        if every and self.state.step == 0 and self.eval_examples:
            self._log({"step": 0, **self.evaluate()})  # the starting point of the held-out curve
        with progress() as bar:
            task = bar.add_task("rl steps", total=total, completed=self.state.step)
            while self.state.step < total:
                m = self.train_step()
                if every and (self.state.step % every == 0 or self.state.step == total):
                    m.update(self.evaluate())
                history.append(m)
                self._log(m)
                desc = f"rl steps  reward={m.get('reward/total', 0):.3f}"
                if "eval/em" in m:
                    desc += f"  held-out EM={m['eval/em']:.3f}"
                bar.update(task, advance=1, description=desc)
                if self.tcfg.save_every and self.state.step % self.tcfg.save_every == 0:
                    self.save_checkpoint(self.out_dir / "checkpoint")
        self.save_checkpoint(self.out_dir / "checkpoint")
        self.save_model(self.out_dir / "final")
        self._close()
        return history

    def _log(self, m: dict[str, float]) -> None:
        if self.acc.is_main_process:
            self._writer.write(m)

    def _close(self) -> None:
        self._writer.close()

    def save_model(self, path: Path) -> None:
        """A plain model (LoRA adapters merged into a copy) that ``from_pretrained`` loads."""
        if self.acc.is_main_process:
            save_merged(self.policy, self.tokenizer, path)

    def save_checkpoint(self, path: Path) -> None:
        """Atomic: written to a sibling temp dir, then renamed over the old checkpoint. A LoRA policy saves its
        adapters only (``model/adapter_model.safetensors``)."""
        if not self.acc.is_main_process:
            return
        with atomic_dir(path) as tmp:
            self.policy.save_pretrained(tmp / "model", safe_serialization=True)
            if hasattr(self.tokenizer, "save_pretrained"):
                self.tokenizer.save_pretrained(tmp / "model")
                portable_tokenizer_config(tmp / "model")
            state: dict[str, Any] = {
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(),
                "train_state": vars(self.state),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
            }
            if self.critic is not None:
                state["critic"] = self.acc.unwrap_model(self.critic).state_dict()
                state["critic_optimizer"] = self.critic_opt.state_dict()
                state["critic_scheduler"] = self.critic_sched.state_dict()
            torch.save(state, tmp / "trainer_state.pt")

    def load_checkpoint(self, path: Path) -> None:
        if not (path / "trainer_state.pt").exists():
            raise FileNotFoundError(f"no checkpoint at {path}; run without --resume to start fresh")
        load_policy_weights(self.policy, path / "model")
        self._weights_version += 1
        state = torch.load(path / "trainer_state.pt", weights_only=False)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.state = TrainState(**state["train_state"])
        if self.state.kl_coef is not None:
            self.kl_ctrl.value = self.state.kl_coef
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if self.critic is not None and "critic" in state:
            self.acc.unwrap_model(self.critic).load_state_dict(state["critic"])
            self.critic_opt.load_state_dict(state["critic_optimizer"])
            if "critic_scheduler" in state:
                self.critic_sched.load_state_dict(state["critic_scheduler"])
