"""How a step's rows become forward/backward passes over one or several processes (scoring passes without
gradients, then the policy / value and memorization-NLL gradient passes): length-bucketed micro-batches within a row
and token budget, the same number of passes on every process (zero-weight ones where a process has fewer rows:
sharded weights are gathered at every forward, and DDP synchronises at every backward), and sums and maxima over the
processes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import nn

from searchrl.config import ALGORITHMS, AlgorithmConfig
from searchrl.rl import algorithms as A
from searchrl.rl.batch import Batch, collate, forward_tokens, plan_micro_batches, prompt_keys, score_tokens
from searchrl.rl.hooks import NLLSequence
from searchrl.rl.metrics_log import UpdateMetrics
from searchrl.rl.update import StepTensors, policy_micro_loss, value_micro_loss
from searchrl.rollout.trajectory import Trajectory
from searchrl.utils import eval_mode


class Passes:
    def __init__(self, acc, micro_rows: int, micro_tokens: int) -> None:
        self.acc = acc  # an accelerate.Accelerator
        self.micro_rows = micro_rows
        self.micro_tokens = micro_tokens
        #: positions computed per phase (padding included), reset by the trainer each step.
        self.tokens: Counter[str] = Counter()

    def sum_across(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over every process (itself in one process)."""
        return self.acc.reduce(t, reduction="sum") if self.acc.num_processes > 1 else t

    def global_count(self, x: float) -> float:
        return float(self.sum_across(torch.tensor([x], dtype=torch.float64, device=self.acc.device)).item())

    def global_max(self, xs: Sequence[int]) -> list[int]:
        """Element-wise maximum over processes (how many forward/backward passes every process must make)."""
        if self.acc.num_processes == 1:
            return list(xs)
        t = torch.tensor(list(xs), dtype=torch.int64, device=self.acc.device)
        return self.acc.gather(t).view(self.acc.num_processes, -1).amax(0).tolist()

    def equal(self, plans: list[list[int]]) -> list[tuple[list[int], bool]]:
        """``plans`` padded with ``(row 0, False)`` passes up to the most any process makes: sharded weights (FSDP)
        are gathered at every forward, so every process must make as many as the others."""
        (n,) = self.global_max([len(plans)])
        return [(plans[k], True) if k < len(plans) else ([0], False) for k in range(n)]

    def micro(self, batch: Batch, rows: Sequence[int] | None = None, grad: bool = True) -> list[list[int]]:
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
            self.micro_rows * scale,
            self.micro_tokens * scale,
            [keys[i] for i in rows],
        )
        return [[rows[j] for j in p] for p in plans]

    def update_rows(
        self, scores: Sequence[float], trajs: Sequence[Trajectory], drop_uniform: bool
    ) -> tuple[list[int], bool, dict]:
        """The rows of the step's trajectories to update, whether they count in the step's loss, and the filter's
        metrics: all of them, or with ``drop_uniform`` DAPO's filter (``algorithm.drop_uniform_groups``) over every
        process. A process without an informative group passes its first group, which counts only when no process has
        one and this is the first process (one process keeps the step's first group then); else those rows carry no
        weight and enter no normaliser, as one process would have dropped them."""
        if not drop_uniform:
            return list(range(len(scores))), True, {}
        group_ids = [t.group_id for t in trajs]
        rows, metrics = A.informative_rows(scores, group_ids)
        mine = A.informative_group_count(scores, group_ids)
        anywhere = self.global_count(float(mine)) > 0  # every process takes part in the count
        counted = mine > 0 or (not anywhere and self.acc.process_index == 0)
        return rows, counted, {**metrics, "filter/rows": float(len(rows)) if counted else 0.0}

    def mini_batches(self, n_rows: int, n_global: int, mini_batch_size: int, gen: torch.Generator) -> list[list[int]]:
        """This process's rows, shuffled, in the step's mini-batches.

        ``mini_batch_size`` counts trajectories of all processes together, so every process makes the same
        ``ceil(n_global / mini_batch_size)`` optimizer steps whatever the number of processes, and each mini-batch
        takes an even share of every process's rows (possibly none: a process then makes zero-weight passes)."""
        n = max(1, math.ceil(n_global / mini_batch_size))
        perm = torch.randperm(n_rows, generator=gen).tolist()
        return [perm[round(i * n_rows / n) : round((i + 1) * n_rows / n)] for i in range(n)]

    @torch.no_grad()
    def logprobs(self, scorer: nn.Module, batch: Batch, mask_BT: torch.Tensor) -> torch.Tensor:
        """Log-probs of the response tokens at ``mask_BT`` under ``scorer`` (a ``TokenScorer``), 0 elsewhere: in eval
        mode, as the rollout sampled them (dropout, e.g. a LoRA adapter's, off)."""
        out = torch.zeros(mask_BT.shape, dtype=torch.float32, device=mask_BT.device)  # (B, T)
        for idx, real in self.equal(self.micro(batch, grad=False)):
            mb = batch.select(idx)
            T = mb.response_ids.shape[1]
            with self.acc.autocast(), eval_mode(scorer):
                logp_BT = score_tokens(scorer, mb, mask_BT[idx, :T])[0].float()
            if real:
                out[idx, :T] = logp_BT
                self.tokens["logprob"] += forward_tokens(mb, scorer.share_prompts)
        return out

    @torch.no_grad()
    def values(self, critic: nn.Module, batch: Batch) -> torch.Tensor:
        """The (unwrapped) critic's values of every response position, in the update's precision (the value clip's
        reference), in eval mode."""
        out = torch.zeros(batch.response_ids.shape, dtype=torch.float32, device=batch.response_ids.device)  # (B, T)
        for idx, real in self.equal(self.micro(batch, grad=False)):
            with self.acc.autocast(), eval_mode(critic):
                v_BT = critic(batch.select(idx))
            if real:
                out[idx, : v_BT.shape[1]] = v_BT.float()
        return out

    def policy_gradients(
        self,
        model: nn.Module,
        critic: nn.Module | None,
        batch: Batch,
        mini: list[int],
        st: StepTensors,
        alg: AlgorithmConfig,
        metrics: UpdateMetrics,
    ) -> None:
        """Gradients of one mini-batch's policy (and value) loss, accumulated over micro-batches; its metrics go to
        ``metrics``: each pass's weighted by what it counted, the losses summed over the passes (each pass's loss is
        its share of the mini-batch's).

        Every process makes as many passes as the process with the most micro-batches (DDP and FSDP synchronise at
        every pass); a process short of rows makes zero-weight passes on its first row."""
        # at least 1: a mini-batch with no counted token (every prompt at the length cap) has a loss of 0, not an error
        g_tok = max(1.0, self.global_count(float(st.mask_BT[mini].sum())))
        g_seq = max(1.0, self.global_count(float((st.mask_BT[mini].sum(-1) > 0).sum())))
        c_tok, c_seq = g_tok, g_seq
        if critic is not None and st.cmask_BT is not st.mask_BT:
            cm = st.cmask_BT[mini]
            c_tok = max(1.0, self.global_count(float(cm.sum())))
            c_seq = max(1.0, self.global_count(float((cm.sum(-1) > 0).sum())))
        per_seq = ALGORITHMS[alg.name].policy_loss == "gspo"  # its ratio metrics are per sequence
        losses = {"loss/policy_total": 0.0, **({"loss/value": 0.0} if critic is not None else {})}
        for idx, real in self.equal(self.micro(batch, mini) if mini else []):
            weight = 1.0 if real else 0.0
            mb = batch.select(idx)
            self.tokens["update"] += forward_tokens(mb)
            loss, pm = policy_micro_loss(model, mb, idx, st, alg, g_tok, g_seq)
            # DDP averages gradients over processes; the loss is already global, so undo the average.
            self.acc.backward(weight * loss * self.acc.num_processes)
            if weight:
                losses["loss/policy_total"] += float(loss.detach())
                counted_BT = st.mask_BT[idx]  # (b, T)
                n_tok, n_seq = float(counted_BT.sum()), float((counted_BT.sum(-1) > 0).sum())
                policy_only = {k: v for k, v in pm.items() if k.startswith("policy/")} if per_seq else {}
                metrics.add({k: v for k, v in pm.items() if k not in policy_only}, n_tok)
                metrics.add(policy_only, n_seq)
            if critic is not None:
                vl, vm = value_micro_loss(critic, mb, idx, st, alg, c_tok, c_seq)
                self.acc.backward(weight * alg.value_coef * vl * self.acc.num_processes)
                if weight:
                    losses["loss/value"] += float(vl.detach())
                    metrics.add(vm, float(st.cmask_BT[idx].sum()))
        metrics.add(losses)

    def nll_gradients(
        self, model: nn.Module, seqs: Sequence[NLLSequence], n_tok: float, batch: Batch, coef: float, pad_id: int
    ) -> float:
        """Adds ``coef * NLL`` of extra sequences (R1-Searcher++'s memorization loss, Eq. 8) to the gradients:
        the token mean over the ``n_tok`` counted tokens of all processes' sequences, in micro-batches. A process
        with fewer micro-batches than another (or no sequence) makes zero-weight passes on ``batch``'s first row."""
        parts = [seqs[i : i + self.micro_rows] for i in range(0, len(seqs), self.micro_rows)]
        (n_parts,) = self.global_max([len(parts)])
        total = 0.0
        for k in range(n_parts):
            if k < len(parts):
                part, weight = parts[k], 1.0
                b = collate([s[0] for s in part], [s[1] for s in part], [s[2] for s in part], pad_id=pad_id)
                b = b.to(self.acc.device)
            else:
                b, weight = batch.select([0]), 0.0
            logp_BT, _ = score_tokens(model, b, b.action_mask)  # (B, T)
            nll = -A.aggregate_loss(logp_BT, b.action_mask, "token_mean", global_tokens=n_tok)
            self.acc.backward(weight * coef * nll * self.acc.num_processes)
            total += weight * float(nll.detach())
        return total
