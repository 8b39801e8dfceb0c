"""One-step off-policy rollouts (``training.off_policy_steps: 1``): while step t updates the policy, a background
thread rolls out, rewards and scores step t+1's questions.

- The behaviour policy is a frozen snapshot of the weights step t started from: its own copy of every trainable
  weight (a LoRA policy's frozen base weights are shared: nothing writes them). The trainer thread copies the
  current weights into it in place between two background rollouts, never while one runs. Batch t+1 therefore comes
  from theta_t while theta_t -> theta_{t+1} is computed: staleness exactly 1 (0 for the first step, which has
  nothing to overlap, and for the first step after a resume).
- The ratio's old log-probs are the snapshot's log-probs of the sampled tokens, computed in the background thread
  after the rollout (``algorithm.old_logprobs: rollout``: the snapshot generator's own), so the clipped ratio is
  pi_theta_{t+1} / pi_theta_t. Reference log-probs and a critic's values are computed at update time, as on-policy.
- Questions, seeds, group ids and the number of steps are the on-policy run's: the background rollout draws from a
  copy of the data position, which becomes the trainer's when the step takes the batch (a checkpoint holds the
  position after the steps already taken, so a resumed run rolls the prefetched step out again, on-policy).
- Generation: an ``hf`` / ``hf_generate`` generator on the snapshot; a generator with its own weights (vLLM) is given
  the snapshot's weights before each background rollout and serves one thread at a time (evaluation waits).
- Stopping: a run that ends while a background rollout is in flight (a SIGTERM's stop, Ctrl-C, an error) drops it
  at its next turn (:attr:`OffPolicyRollouts.stopping`), so the process does not wait for a whole step's rollout.
- Threads: on CUDA the background thread queues its kernels on a CUDA stream of its own (the snapshot lives on the
  policy's device), so decoding overlaps the update. On the CPU the two threads split torch's intra-op threads
  (the update keeps the larger half) while both run; the trainer thread has them all whenever no rollout runs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

import torch
from torch import nn

from searchrl import device as placement
from searchrl.config import ConfigError
from searchrl.generation import rollout_generator
from searchrl.generation.base import Generator
from searchrl.rl.batch import TokenScorer, collate_trajectories, compute_logprobs
from searchrl.rl.checkpoint import TrainState
from searchrl.rl.hooks import RewardFn
from searchrl.rl.sampling import Experience
from searchrl.rollout.engine import RolloutEngine
from searchrl.rollout.trajectory import Trajectory


def behaviour_copy(policy: nn.Module) -> nn.Module:
    """A frozen copy of ``policy`` in eval mode on its device and in its dtype: its own copy of every trainable
    weight; frozen weights (a LoRA policy's base model) are the policy's own tensors, shared."""
    frozen = {id(p): p for p in policy.parameters() if not p.requires_grad}
    return copy.deepcopy(policy, memo=frozen).eval().requires_grad_(False)


class RolloutDropped(Exception):
    """The background rollout stopped part-way because the run is ending; its batch is dropped (a resumed run rolls
    that step out again)."""


@contextlib.contextmanager
def dropped_on_error(rollouts: OffPolicyRollouts | None) -> Iterator[None]:
    """Inside, an error or Ctrl-C that ends the training loop stops the background rollout at its next turn: the
    process exits without first waiting for a whole step's rollout (its thread is joined at exit)."""
    try:
        yield
    except BaseException:
        if rollouts is not None:
            rollouts.close(wait=False)
        raise


class OffPolicyRollouts:
    """The trainer's background rollouts: :meth:`take` returns a step's batch and starts the next step's."""

    def __init__(self, trainer: Any) -> None:
        """``trainer``: the :class:`~searchrl.rl.trainer.Trainer` (its policy, generator, engine, sampler, state)."""
        self.check_processes(trainer.acc.num_processes)
        self.tr = trainer
        self.total = trainer.tcfg.steps  #: the run's steps: none is prefetched past the last (Trainer.train sets it)
        self.device: torch.device = trainer.acc.device
        self.snapshot = behaviour_copy(trainer.policy)
        params = zip(self.snapshot.parameters(), trainer.policy.parameters(), strict=True)
        self._copies = [(dst, src) for dst, src in params if dst is not src]  # the weights the update writes
        self._version = trainer._weights_version  # the trainer's weights the snapshot holds
        # A generator that decodes the policy's own weights gets a twin on the snapshot; one with its own copy of
        # the weights (vLLM) is loaded with the snapshot's before each background rollout.
        self.own_generator = trainer.generator.runs_on(trainer.policy)
        self.generator: Generator | None = None
        if self.own_generator:
            self.generator = rollout_generator(trainer.cfg.rollout, self.snapshot, trainer.tokenizer, self.device)
        self.scorer = TokenScorer(self.snapshot)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        n = torch.get_num_threads()
        #: CPU: torch intra-op threads (alone, the trainer thread while both run, the background thread)
        self.threads = (n, max(1, n - n // 2), max(1, n // 2)) if self.device.type == "cpu" else None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[int, Future, TrainState] | None = None  # (step, its rollout, its data position)
        self._waited = 0.0  # seconds waited for the rollout in flight before its step took it (an evaluation's)
        self._metrics: dict[str, float] = {}
        #: set when the run ends: the rollout in flight stops at its next turn (:class:`RolloutDropped`)
        self.stopping = threading.Event()

    @staticmethod
    def check_processes(n: int) -> None:
        """Background rollouts run in one process (they would interleave with the processes' collectives)."""
        if n > 1:
            raise ConfigError(
                f"training.off_policy_steps=1 runs in one process, not {n} (the background rollout would interleave "
                "with the processes' collectives): set training.off_policy_steps=0"
            )

    # ------------------------------------------------------------------------------------------ trainer thread
    def take(self, step: int) -> Experience:
        """Step ``step``'s batch: the one rolled out in the background while the previous step updated (staleness
        1), or, with none in flight for it (the first step, the first after a resume), one rolled out now by the
        current weights (staleness 0). The next step's rollout starts before this returns."""
        prefetched = self._pending is not None and self._pending[0] == step
        if not prefetched:
            self.settle()
            self._pending = None  # a rollout for another step (a checkpoint was loaded since): dropped
            self._launch(step)
        assert self._pending is not None
        _, fut, state = self._pending
        t0 = time.perf_counter()
        try:
            exp, timings = fut.result()
        finally:
            self._pending = None
            self._all_threads()
        waited, self._waited = self._waited + time.perf_counter() - t0, 0.0
        self.tr.state.data_epoch, self.tr.state.data_pos = state.data_epoch, state.data_pos
        if step + 1 < self.total:
            self._launch(step + 1)
        self._metrics = {"time/rollout_wait_s": waited, "rollout/staleness": float(prefetched), **timings}
        return exp

    def metrics(self) -> dict[str, float]:
        """The last batch taken: how long the trainer waited for it, its staleness (1: made by the weights before
        the previous update; 0: by the current ones) and the background thread's reward and log-prob seconds."""
        return dict(self._metrics)

    def settle(self) -> None:
        """Wait until the rollout in flight (if any) is done; its batch stays for its step."""
        if self._pending is not None:
            t0 = time.perf_counter()
            wait_for([self._pending[1]])
            self._waited += time.perf_counter() - t0
        self._all_threads()

    def close(self, wait: bool = True) -> None:
        """Stop the rollout in flight at its next turn, drop it and end the background thread (a later step starts
        a new one); ``wait``: until that thread has ended. A run that stops (SIGTERM, its checkpoint saved; Ctrl-C;
        an error) does not wait for a whole step's rollout first."""
        self.stopping.set()
        self._pending = None
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        self._all_threads()

    def _check_stop(self) -> None:
        """(background thread) Between turns: end the rollout when the run is ending."""
        if self.stopping.is_set():
            raise RolloutDropped("the run ended: its background rollout was dropped part-way")

    def _launch(self, step: int) -> None:
        """Start step ``step``'s rollout on the snapshot of the current weights, from a copy of the data position."""
        self._refresh()
        live = self.tr.engine
        if not self.own_generator:
            self.tr._sync_generator()  # the external engine gets the current weights (= the snapshot's)
        engine = RolloutEngine(
            self.generator or live.generator,
            live.retriever,
            live.protocol,
            live.limits,
            live.prompt_style,
            document_step=live.document_step,
            repeated_query_text=live.repeated_query_text,
        )
        engine.check_stop = self._check_stop
        self.stopping.clear()
        state = dataclasses.replace(self.tr.state)
        if self.stream is not None:  # the weight copy (queued on the trainer's stream) lands before decoding reads it
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchrl-rollout")
        self._pending = (step, self._pool.submit(self._rollout, engine, self.tr.reward_fn, step, state), state)
        if self.threads is not None:
            torch.set_num_threads(self.threads[1])

    def _refresh(self) -> None:
        """Copy the policy's current weights into the snapshot (no rollout is in flight: nothing reads it)."""
        if self._version == self.tr._weights_version:
            return
        with torch.no_grad():
            for dst, src in self._copies:
                dst.copy_(src)
        self._version = self.tr._weights_version

    def _all_threads(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads[0])

    # --------------------------------------------------------------------------------------- background thread
    def _rollout(
        self, engine: RolloutEngine, reward_fn: RewardFn, step: int, state: TrainState
    ) -> tuple[Experience, dict[str, float]]:
        """(background thread) The step's scored rollouts by the snapshot, with its log-probs of the sampled tokens."""
        if self.threads is not None:
            torch.set_num_threads(self.threads[2])  # this thread's own setting
        stream = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with stream:
            t0 = time.perf_counter()
            exp = self.tr.sampler.experience(engine, reward_fn, step, state)
            t1 = time.perf_counter()
            if self.tr.cfg.algorithm.old_logprobs != "rollout":  # "rollout": the snapshot generator's own
                self._check_stop()
                exp.behaviour_logp = self._logprobs(exp.trajs)
            if self.stream is not None:
                self.stream.synchronize()  # nothing of this rollout still reads the snapshot when it is refreshed
        timings = {
            "time/reward_s": t1 - t0 - exp.engine_stats.get("engine_s", 0.0),
            "time/behaviour_logprob_s": time.perf_counter() - t1,
        }
        return exp, timings

    @torch.no_grad()
    def _logprobs(self, trajs: list[Trajectory]) -> list[list[float]]:
        """The snapshot's log-prob of every response token (sampled or inserted), as the trainer's scoring pass."""
        batch = collate_trajectories(trajs, self.tr._pad).to(self.device)
        rows, tokens = self.tr.passes.micro_rows * 4, self.tr.passes.micro_tokens * 4  # no-grad passes: 4x
        with placement.autocast(self.device):
            lp_BT = compute_logprobs(self.scorer, batch, batch.response_mask, rows, tokens)  # (B, T)
        return [lp_BT[i, : len(t.response_ids)].tolist() for i, t in enumerate(trajs)]
