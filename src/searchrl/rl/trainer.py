"""The RL loop on accelerate: prompts -> rollouts -> rewards -> log-probs -> advantages -> K epochs of updates.

How this departs from the textbook algorithms (each choice is configurable where the papers disagree):
- Retrieved tokens are out of the policy loss, KL and entropy (``mask_observations``; off: the ablation), and out of
  the value loss unless ``critic_mask_observations: false`` (RAG-R1's and Search-R1's code).
- Old log-probs (``algorithm.old_logprobs``): with one on-policy update per step (one epoch, one mini-batch) and the
  policy's own weights in the generator, the generator's in fp32 (a recomputation's to ~1e-5, tested) and the
  update's own forward, detached, in bf16 (ratio exactly 1): one pass saved either way; else recomputed after the
  rollout, so the ratio is 1 on the first mini-batch whatever engine or precision generated.
- No pass the step does not need: no reference forward without KL; rows sharing a prompt run it once
  (``TokenScorer``); micro-batches are length-bucketed and trimmed to their own longest row, within a token budget;
  ``algorithm.drop_uniform_groups`` leaves out the groups whose samples all scored alike (advantage 0), and
  ``algorithm.max_sampling_rounds`` refills them with fresh questions (DAPO's dynamic sampling).
- Group ids are ``"s<step>/<question id>"``, globally unique across steps and merged data sets.
- ``training.off_policy_steps: 1``: step t+1's rollouts are made in a background thread while step t updates, by a
  snapshot of the weights step t started from, whose log-probs are the ratio's old ones (``rl/async_rollout.py``).
- Losses divide by the whole mini-batch's token (or sequence) count over micro-batches and processes: any split.
- Several processes each roll out an equal shard of the step's prompts (groups never straddle two). The mini-batch
  size counts all processes' trajectories, so optimizer steps per RL step do not depend on the process count; PPO and
  REINFORCE++ whiten over all processes' rows. Every process makes the same number of forward/backward passes
  (zero-weight ones where it has fewer rows or memorization sequences): uneven shards never leave a collective waiting.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate.utils import gather_object
from torch import nn

from searchrl import device as placement
from searchrl.config import ConfigError, RunConfig, record_run
from searchrl.data.records import QAExample
from searchrl.generation import rollout_generator
from searchrl.generation.base import Generator
from searchrl.models import compile_layers
from searchrl.protocols.base import Protocol
from searchrl.rewards.correctness import Correctness
from searchrl.rewards.summary import rollout_metrics, scored_records, summarize
from searchrl.rl import algorithms as A
from searchrl.rl import checkpoint
from searchrl.rl.advantages import get_estimator
from searchrl.rl.async_rollout import OffPolicyRollouts, dropped_on_error
from searchrl.rl.batch import Batch, TokenScorer, collate_trajectories
from searchrl.rl.checkpoint import TrainState
from searchrl.rl.hooks import AuxNLLHook, NLLSequence, RewardFn, as_aux_nll, default_reward_fn
from searchrl.rl.kl_control import make_kl_controller
from searchrl.rl.metrics_log import MetricsWriter, UpdateMetrics, combine_process_metrics, log_rollouts, trim_logs
from searchrl.rl.passes import Passes
from searchrl.rl.profiling import maybe_profiled, phase
from searchrl.rl.sampling import Experience, Sampler
from searchrl.rl.sharded import full_weights, sharded
from searchrl.rl.update import SkippedSteps, StepTensors, ValueModel
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.tuning import full_state_dict, warmup_schedule, wrap_lora
from searchrl.utils import hard_exit, make_adamw, on_sigterm, progress, tune_allocator, write_jsonl

__all__ = ["AuxNLLHook", "RewardFn", "TrainState", "Trainer", "default_reward_fn"]


@dataclass
class StepBatch:
    """The rows the step updates (all, or those of informative groups) with everything their loss needs."""

    batch: Batch
    tensors: StepTensors
    n_global: int  # the step's updated trajectories over all processes
    metrics: dict[str, float]
    n_rows: int  # this process's updated rows (0: its rows only keep the passes equal, drop_uniform_groups)


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
        self.cfg = cfg
        self.alg = cfg.algorithm
        self.tcfg = cfg.training
        self.place = placement.configure_from(cfg)
        self.acc = placement.accelerator(self.place, self.tcfg.collective_timeout_s)
        if self.tcfg.prompts_per_step % self.acc.num_processes:
            raise ConfigError(
                f"training.prompts_per_step={self.tcfg.prompts_per_step} must be divisible by the "
                f"{self.acc.num_processes} processes (each process rolls out an equal share of the step's prompts)"
            )
        if self.tcfg.off_policy_steps:
            OffPolicyRollouts.check_processes(self.acc.num_processes)
        self.tokenizer = tokenizer
        self.protocol = protocol
        self.examples = list(train_examples)
        if not self.examples:
            raise ValueError(
                "no training questions: check data.train (and data.kinds / styles / held_out_styles / train_limit)"
            )
        self.reward_fn = reward_fn or default_reward_fn(cfg, protocol, tokenizer)
        self.correctness = Correctness.from_reward_config(cfg.reward)  # the run's one "is this answer correct"
        self.eval_examples = list(eval_examples or [])[: self.tcfg.eval_limit]
        self.aux_nll_hook = as_aux_nll(aux_nll_hook) if aux_nll_hook is not None else None
        self.mem_coef = cfg.memorization.coef
        self._aux_on = aux_nll_hook is not None and self.mem_coef > 0
        self.estimator = get_estimator(self.alg.name)
        self.kl_ctrl = make_kl_controller(self.alg)
        rows, tokens = placement.micro_batch_defaults(self.acc.device)
        self.micro = micro_batch_size or self.tcfg.micro_batch_size or rows
        tune_allocator()
        self.out_dir = Path(self.tcfg.output_dir)
        self.state = TrainState(questions=checkpoint.questions_digest(self.examples))
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
        if self.tcfg.compile_layers and self.acc.num_processes == 1:  # after the reference's copy: it stays eager
            compile_layers(model)
        model.train()
        self.critic: ValueModel | None = None
        self.skipped = SkippedSteps(self.tcfg.max_skipped_steps)  # updates with a gradient norm that is not finite
        params = [p for p in model.parameters() if p.requires_grad]
        t = self.tcfg
        self.opt = make_adamw(params, lr=t.lr, weight_decay=t.weight_decay, betas=t.adam_betas)
        self.sched = warmup_schedule(self.opt, t.warmup_steps)
        # self.model is the (possibly DDP-wrapped) scorer; self.policy the causal LM inside it.
        self.model, self.opt = self.acc.prepare(TokenScorer(model), self.opt)
        self.policy = self.acc.unwrap_model(self.model).lm
        if self.estimator.critic:
            critic = ValueModel(copy.deepcopy(self.policy))
            self.critic_opt = make_adamw(
                critic.parameters(), lr=t.critic_lr, weight_decay=t.weight_decay, betas=t.adam_betas
            )
            self.critic, self.critic_opt = self.acc.prepare(critic, self.critic_opt)
            self.critic_sched = warmup_schedule(self.critic_opt, self.tcfg.critic_warmup_steps)
        # The default generator shares the policy's weights; another backend (e.g. vLLM) keeps its own copy, which
        # _sync_generator refreshes before each rollout that follows an optimizer step.
        if generator is None and cfg.rollout.backend == "vllm":
            raise ValueError("rollout.backend=vllm: pass the engine as generator= (searchrl train builds it for you)")
        self.generator = generator or rollout_generator(cfg.rollout, self.policy, tokenizer, self.acc.device)
        self.sharded = self.acc.num_processes > 1 and sharded(self.policy)  # FSDP over several processes
        if self.sharded and (self.generator.runs_on(self.policy) or cfg.model.lora is not None):
            raise ConfigError(
                "FSDP over several processes needs rollout.backend=vllm (each process's own decode loop would gather "
                "the sharded weights a different number of times) and no model.lora; else use DDP "
                "(`searchrl config accelerate ddp`)"
            )
        self._weights_version = 0  # optimizer steps (and checkpoint loads) applied to the policy
        self._generator_version = 0  # the policy version the generator's weights hold
        self.passes = Passes(self.acc, self.micro, self.tcfg.micro_batch_tokens or tokens)
        limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
        self.engine = RolloutEngine(self.generator, retriever, protocol, limits, cfg.model.prompt_style)
        self.sampler = Sampler(cfg, self.examples, self.passes, self.acc.process_index, self.acc.num_processes)
        # training.off_policy_steps=1: the next step's rollouts made in a background thread by a behaviour snapshot
        self.rollouts = OffPolicyRollouts(self) if self.tcfg.off_policy_steps else None
        self._writer = MetricsWriter(self.out_dir, self.tcfg.tensorboard, self.tcfg.wandb, cfg.name, cfg.model_dump())

    # ------------------------------------------------------------------------------------------------ step
    def _loss_mask(self, b: Batch) -> torch.Tensor:
        return b.action_mask if self.alg.mask_observations else b.response_mask  # (B, T)

    def _old_logprobs_source(self, n_global: int) -> str:
        """Where the step's old log-probs come from: "rollout" (the generator's own: exactly one on-policy update,
        one epoch and one mini-batch, by a generator that runs the policy's own fp32 weights in fp32, so they match a
        recomputation to ~1e-5), "current" (that one update's own forward, detached: the ratio is exactly 1, with no
        pass of its own), or "recompute" (a scoring pass after the rollout)."""
        mode = self.alg.old_logprobs
        one_update = self.alg.ppo_epochs == 1 and self.alg.mini_batch_size >= n_global
        if mode == "current" and not one_update:
            raise ValueError(
                f"algorithm.old_logprobs=current needs one update per step (ppo_epochs=1 and mini_batch_size >= the "
                f"step's {n_global} rows); use auto or recompute"
            )
        if mode != "auto":
            return mode
        if not one_update or not self.alg.mask_observations:  # the rollout has no log-probs of retrieved tokens
            return "recompute"
        fp32 = self.place.precision == "fp32" and all(p.dtype == torch.float32 for p in self.policy.parameters())
        if fp32 and self.generator.runs_on(self.policy):
            return "rollout"
        # In bf16 (or weights held in bf16 / fp16) the decode loop and the training forward round differently
        # (docs/gpu.md): the update's own forward gives a ratio of exactly 1, as a recomputation would in fp32; a
        # KL in the reward needs the old log-probs before the advantages, so a pass then.
        return "recompute" if self.alg.kl_in_reward else "current"

    def _logprobs(self, scorer: nn.Module, batch: Batch, mask_BT: torch.Tensor) -> torch.Tensor:
        return self.passes.logprobs(scorer, batch, mask_BT)

    def _sync_generator(self) -> None:
        """Push the policy's current weights into a generator that keeps its own copy (e.g. vLLM), once per new
        optimizer state, before it generates."""
        if self._generator_version == self._weights_version or self.generator.runs_on(self.policy):
            return
        weights = full_weights(self.policy, everywhere=True) if self.sharded else full_state_dict(self.policy)
        self.generator.load_weights(weights)
        self._generator_version = self._weights_version

    def train_step(self) -> dict[str, float]:
        """One RL step (rollouts, rewards, advantages, updates); returns its metrics, which only train() logs."""
        # the step's algorithm settings carry the KL controller's current coefficient (fixed: algorithm.kl_coef)
        self.alg = self.cfg.algorithm.model_copy(update={"kl_coef": self.kl_ctrl.value})
        step, clock = self.state.step, {"start": time.perf_counter()}
        placement.reset_peak_memory()
        with phase("rollout"):
            exp = self._experience(step)
        clock["scored"] = time.perf_counter()
        with phase("score"):
            sb = self._advantages(exp)
        clock["advantages"] = time.perf_counter()
        with phase("update"):
            update_metrics = self._optimise(step, sb, exp.aux_seqs)
        clock["updated"] = time.perf_counter()
        metrics = self._step_metrics(step, exp, sb, update_metrics, clock)
        metrics.update(self.rollouts.metrics() if self.rollouts is not None else {})
        self._end_step(step, exp, metrics, sb.n_global)
        if self.acc.num_processes > 1:  # every process's share of the step: the step's metrics
            metrics = combine_process_metrics(gather_object([metrics]))
        return metrics

    def _experience(self, step: int) -> Experience:
        """The step's scored rollouts (rolled out now, or off-policy by the background thread: rl/async_rollout.py),
        the generator's counted work, the memorization hook's sequences (once a step)"""
        if self.rollouts is None:
            self._sync_generator()
            exp = self.sampler.experience(self.engine, self.reward_fn, step, self.state, root=self.model)
        else:
            exp = self.rollouts.take(step)
        exp.aux_seqs = list(self.aux_nll_hook(step, exp.trajs)) if self._aux_on and self.aux_nll_hook else []
        return exp

    def _advantages(self, exp: Experience) -> StepBatch:
        """The rows to update (all, or those of informative groups) as one batch, with their old and reference
        log-probs, the critic's values and the estimator's advantages and returns."""
        alg = self.alg
        self.passes.tokens.clear()
        rows, counted, filter_metrics = self.passes.update_rows(exp.scores, exp.trajs, alg.drop_uniform_groups)
        upd = [exp.trajs[i] for i in rows]
        batch = collate_trajectories(upd, self._pad).to(self.acc.device)
        mask_BT = self._loss_mask(batch) * counted  # (B, T) the policy-loss positions (none in rows that do not count)
        # The critic's positions: the policy's tokens, or every response token (RAG-R1's code) when
        # critic_mask_observations is off; the policy loss always uses mask_BT.
        cmask_BT = mask_BT if alg.critic_mask_observations else batch.response_mask.to(mask_BT.dtype)  # (B, T)
        scores_B = torch.tensor([exp.scores[i] for i in rows], dtype=torch.float32, device=self.acc.device)  # (B,)
        n_global = int(self.passes.global_count(float(len(batch) * counted)))  # the step's trajectories, all processes
        behaviour_BT = exp.behaviour_logprobs(rows, mask_BT)  # off-policy: the behaviour policy's; else None
        source = "behaviour" if behaviour_BT is not None else self._old_logprobs_source(n_global)
        old_logp_BT, ref_logp_BT = self._old_and_ref_logprobs(batch, mask_BT, source, behaviour_BT)
        kl_BT, kl_metrics = torch.zeros_like(old_logp_BT), {}
        if ref_logp_BT is not None:
            kl_BT, kl_metrics = A.kl_penalty(old_logp_BT, ref_logp_BT, mask_BT, alg.kl_estimator)
        critic = self.acc.unwrap_model(self.critic) if self.critic is not None else None
        old_values_BT = self.passes.values(critic, batch) if critic is not None else None  # (B, T) before the update
        adv_BT, returns_BT, est_metrics = self.estimator.fn(
            scores_B,
            kl_BT,
            old_values_BT,
            mask_BT,
            [t.group_id for t in upd],
            alg,
            critic_mask_BT=cmask_BT,
            sum_across=self.passes.sum_across,
        )
        kl_in_loss = alg.kl_coef > 0 and not alg.kl_in_reward and ref_logp_BT is not None
        ref_in_loss = ref_logp_BT if kl_in_loss else None
        current = source == "current"
        st = StepTensors(mask_BT, cmask_BT, old_logp_BT, adv_BT, ref_in_loss, old_values_BT, returns_BT, current)
        metrics = {**kl_metrics, **est_metrics} if counted else {}  # a process whose rows do not count: no means
        return StepBatch(batch, st, n_global, {**metrics, **filter_metrics}, len(batch) * counted)

    def _old_and_ref_logprobs(
        self, batch: Batch, mask_BT: torch.Tensor, source: str, behaviour_BT: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The ratio's old log-probs (``source``: "behaviour", the off-policy snapshot's ``behaviour_BT``; else as
        :meth:`_old_logprobs_source`) and the reference's (None without KL)."""
        scorer = self.acc.unwrap_model(self.model)
        if source == "behaviour":
            old_logp_BT = behaviour_BT  # (B, T) one-step off-policy: the behaviour snapshot's, from the rollout
        elif source in ("rollout", "current"):  # current: the rollout's, for the step's KL metrics only
            old_logp_BT = torch.where(mask_BT.bool(), batch.rollout_logp, 0.0)  # (B, T) the sampler's own
        else:
            old_logp_BT = self._logprobs(scorer, batch, mask_BT)  # (B, T)
        if self.alg.kl_coef <= 0:
            return old_logp_BT, None
        if self.ref is not None:
            return old_logp_BT, self._logprobs(TokenScorer(self.ref), batch, mask_BT)
        with self.policy.disable_adapter():  # LoRA: the base model is the adapter-disabled policy
            return old_logp_BT, self._logprobs(scorer, batch, mask_BT)

    def _optimise(self, step: int, sb: StepBatch, aux_seqs: list[NLLSequence]) -> dict[str, float]:
        """``ppo_epochs`` epochs over mini-batches, one optimizer step each (accumulated over micro-batches with
        global normalisers); the metrics averaged over the step's passes."""
        metrics = UpdateMetrics()
        aux_tokens = self.passes.global_count(float(sum(sum(s[2]) for s in aux_seqs))) if self._aux_on else 0.0
        gen = torch.Generator().manual_seed(self.tcfg.seed + step)
        taken: list[bool] = []
        for _epoch in range(self.alg.ppo_epochs):
            for mini in self.passes.mini_batches(sb.n_rows, sb.n_global, self.alg.mini_batch_size, gen):
                taken.append(self._optimizer_step(sb, mini, aux_seqs, aux_tokens, metrics))
        lr = self.sched.get_last_lr()[0]  # the rate this step ran at (after .step() it is the next one's)
        self.sched.step()
        if self.critic is not None:
            self.critic_sched.step()
        steps = {"update/optimizer_steps": float(sum(taken)), "update/skipped_steps": float(len(taken) - sum(taken))}
        return {**steps, "lr": lr, **metrics.result()}

    def _optimizer_step(
        self, sb: StepBatch, mini: list[int], aux_seqs: list[NLLSequence], aux_tokens: float, metrics: UpdateMetrics
    ) -> bool:
        """One mini-batch's gradients (policy, value, memorization NLL), clipped, then the optimizer step: not taken
        (False) where a gradient norm is not finite (``SkippedSteps``)."""
        self.opt.zero_grad(set_to_none=True)
        if self.critic is not None:
            self.critic_opt.zero_grad(set_to_none=True)
        self.passes.policy_gradients(self.model, self.critic, sb.batch, mini, sb.tensors, self.alg, metrics)
        if aux_tokens > 0:
            nll = self.passes.nll_gradients(self.model, aux_seqs, aux_tokens, sb.batch, self.mem_coef, self._pad)
            metrics.add({"loss/memorization_nll": nll})
        gnorm = self.acc.clip_grad_norm_(self.model.parameters(), self.tcfg.max_grad_norm)
        metrics.add({"grad_norm": float(gnorm)})
        norms = [gnorm]
        if self.critic is not None:
            norms.append(self.acc.clip_grad_norm_(self.critic.parameters(), self.tcfg.max_grad_norm))
        if not self.skipped.finite(*norms):  # NaN / inf: taken, the step would write it into the weights for good
            return False
        self.opt.step()
        self._weights_version += 1
        if self.critic is not None:
            self.critic_opt.step()
        return True

    def _step_metrics(
        self, step: int, exp: Experience, sb: StepBatch, update: dict[str, float], clock: dict[str, float]
    ) -> dict[str, float]:
        trajs, engine, tokens = exp.trajs, exp.engine_stats, self.passes.tokens
        metrics = {**sb.metrics, **update, **exp.reward_metrics}
        metrics.update(placement.peak_memory_metrics())  # CUDA: torch's allocated / reserved peaks of the step
        metrics.update(rollout_metrics(trajs, self.protocol, self.tokenizer, self.correctness))
        metrics.update(self.aux_nll_hook.metrics() if self.aux_nll_hook is not None else {})
        metrics.update({f"gen/{k}": float(v) for k, v in exp.gen_counts.items()})
        metrics.update(
            {
                "tokens/prompt": float(sum(len(t.prompt_ids) for t in trajs)),
                "tokens/response": float(sum(len(t.response_ids) for t in trajs)),
                "tokens/generated": float(sum(t.n_policy_tokens for t in trajs)),
                "tokens/scored_padded": float(sum(tokens.values())),  # positions computed, padding included
                **{f"tokens/scored_{k}": float(v) for k, v in tokens.items()},  # per phase
                "step": step + 1,
                "time/generate_s": engine.get("generate_s", 0.0),
                "time/retrieve_s": engine.get("retrieve_s", 0.0),
                "time/reward_s": clock["scored"] - clock["start"] - engine.get("engine_s", 0.0),
                "time/logprob_s": clock["advantages"] - clock["scored"],
                "time/update_s": clock["updated"] - clock["advantages"],
                "time/step_s": clock["updated"] - clock["start"],
            }
        )
        metrics["kl/coef"] = self.alg.kl_coef
        return metrics

    def _end_step(self, step: int, exp: Experience, metrics: dict[str, float], n_global: int) -> None:
        """The KL controller sees the step's KL; the state moves on; the step's rollouts are logged."""
        self._update_kl(metrics, n_global)
        self.state.step += 1
        self.last_trajectories = exp.trajs
        if self.acc.is_main_process:
            log_rollouts(self.out_dir, self.tcfg.log_rollouts, step + 1, exp.trajs, exp.scores, self.correctness)

    def _update_kl(self, metrics: dict[str, float], n_global: int) -> None:
        """The adaptive controller moves on the mean KL of the processes that measured one, so all processes keep one
        coefficient. Every process takes part in the sum, also one that measured none (its rows all out of the step's
        loss: ``drop_uniform_groups``), which would otherwise leave the others' collective waiting."""
        if self.alg.kl_ctrl == "adaptive":
            measured = [metrics.get("kl/mean", 0.0), float("kl/mean" in metrics)]
            kl_sum, n = self.passes.sum_across(torch.tensor(measured, dtype=torch.float64, device=self.acc.device))
            if n > 0:
                self.kl_ctrl.update(float(kl_sum / n), n_global)
        self.state.kl_coef = self.kl_ctrl.value

    def evaluate(self) -> dict[str, float]:
        """Greedy rollouts on the held-out questions (main process only): ``eval/*`` metrics, and the trajectories
        in ``<output_dir>/evals/step_<k>.jsonl`` for ``searchrl view``. Every process calls it (an engine with its
        own weights first gets the current ones, which sharded weights need every process to gather)."""
        if not self.eval_examples:
            return {}
        if self.rollouts is not None:
            self.rollouts.settle()  # the engine's retriever (and an external generator) serve one thread at a time
        self._sync_generator()
        if not self.acc.is_main_process:
            return {}
        t0, step = time.perf_counter(), self.state.step
        with placement.unsharded(self.model) if self.generator.runs_on(self.policy) else contextlib.nullcontext():
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

    def train(self, steps: int | None = None, resume: bool = False, force: bool = False) -> list[dict[str, float]]:
        """Run to ``steps`` (default ``training.steps``), logging into ``training.output_dir``; returns each step's
        metrics. ``resume`` goes on from its checkpoint. A fresh run into a directory holding an earlier run is
        refused, unless ``force``, which removes that run's outputs first (:func:`.checkpoint.start_fresh`)."""
        total = steps if steps is not None else self.tcfg.steps
        if not resume and self.state.step == 0:
            checkpoint.start_fresh(self, force)
        if self.rollouts is not None:
            self.rollouts.total = total  # no rollout is prefetched for a step past the last
        if resume:
            self.load_checkpoint(self.out_dir / "checkpoint")
        if self.acc.is_main_process:
            if resume:  # the stopped run's rows after the checkpoint are written again, not twice
                trim_logs(self.out_dir, self.state.step)
                self._writer.purge_step = self.state.step + 1
            record_run(self.cfg, self.out_dir)
        history = []
        every = self.tcfg.eval_every
        if every and self.state.step == 0 and self.eval_examples:
            self._log({"step": 0, **self.evaluate()})  # the starting point of the held-out curve
        with progress() as bar, on_sigterm(defer=True) as stop_requested, dropped_on_error(self.rollouts):
            task = bar.add_task("rl steps", total=total, completed=self.state.step)
            while self.state.step < total:
                profile_step = self.tcfg.profile_step if self.acc.is_main_process else 0  # one table, one writer
                with maybe_profiled(self.state.step + 1, profile_step, self.out_dir):
                    m = self.train_step()
                if every and (self.state.step % every == 0 or self.state.step == total):
                    m.update(self.evaluate())
                m["time/wall"] = round(time.time(), 1)  # the clock (epoch s) when each step ended, across resumes
                history.append(m)
                self._log(m)
                self.skipped.check(f"RL step {self.state.step}")  # too many non-finite updates in a row: stop
                desc = f"rl steps  reward={m.get('reward/total', 0):.3f}"
                if "eval/em" in m:
                    desc += f"  held-out EM={m['eval/em']:.3f}"
                bar.update(task, advance=1, description=desc)
                saved = bool(self.tcfg.save_every) and self.state.step % self.tcfg.save_every == 0
                if saved:
                    self.save_checkpoint(self.out_dir / "checkpoint")
                if self.tcfg.keep_models_every and self.state.step % self.tcfg.keep_models_every == 0:
                    self.save_model(self.out_dir / "models" / f"step_{self.state.step}")
                checkpoint.stop_if_requested(self, stop_requested(), total, saved)
        if self.tcfg.save_at_end:
            self.save_checkpoint(self.out_dir / "checkpoint")
            self.save_model(self.out_dir / "final")
        self._close()
        return history

    def _log(self, m: dict[str, float]) -> None:
        if self.acc.is_main_process:
            self._writer.write(m)

    def _close(self) -> None:
        self._writer.close()
        if self.rollouts is not None:
            self.rollouts.close()

    def save_model(self, path: Path) -> None:
        """A plain model that ``from_pretrained`` loads, with its ``searchrl.json`` (``searchrl.rl.checkpoint``)."""
        checkpoint.save_model(self, path)

    def save_checkpoint(self, path: Path) -> None:
        """Atomic; a LoRA policy saves its adapters only. Every process calls it (``searchrl.rl.checkpoint``)."""
        checkpoint.save_trainer(self, path)

    def load_checkpoint(self, path: Path) -> None:
        checkpoint.load_trainer(self, path)
