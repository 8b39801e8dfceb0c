"""The pieces of one RL update that are not the loop: the step's fixed per-token tensors, the critic model, and the
loss of one micro-batch (policy, KL and entropy terms; value loss) over global normalisers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from searchrl.config import ALGORITHMS, AlgorithmConfig
from searchrl.rl import algorithms as A
from searchrl.rl.batch import Batch, score_tokens
from searchrl.utils import console


@dataclass
class StepTensors:
    """A step's per-token tensors, fixed before its updates (all ``(B, T)`` over the step's batch)."""

    mask_BT: torch.Tensor  # policy-loss positions
    cmask_BT: torch.Tensor  # the critic's positions (mask_BT itself unless critic_mask_observations is off)
    old_logp_BT: torch.Tensor
    adv_BT: torch.Tensor
    ref_logp_BT: torch.Tensor | None  # set when the KL term is in the loss
    old_values_BT: torch.Tensor | None  # critic estimators only
    returns_BT: torch.Tensor | None
    #: the ratio's old log-probs are the update's own, detached (one update per step: ``old_logprobs: current``);
    #: ``old_logp_BT`` then holds the rollout's, for the step's KL metrics only
    old_is_current: bool = False


class ValueModel(nn.Module):
    """A critic: the policy's transformer body with a scalar head on every position. The head's weights are fp32
    whatever the body's dtype (a bf16 or fp16 policy's); the hidden states are cast to them, so the head computes in
    fp32, or in autocast's dtype under mixed precision."""

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.body = causal_lm.get_decoder() if hasattr(causal_lm, "get_decoder") else causal_lm.model
        self.head = nn.Linear(causal_lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, batch: Batch) -> torch.Tensor:
        h = self.body(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
        ).last_hidden_state  # (B, P+T, H)
        P, T = batch.prompt_len, batch.response_ids.shape[1]
        h_BTH = h[:, P - 1 : P + T - 1, :].to(self.head.weight.dtype)  # (B, T, H)
        return self.head(h_BTH).squeeze(-1)  # (B, T) value before emitting each token


def policy_micro_loss(
    scorer: nn.Module, mb: Batch, idx: list[int], st: StepTensors, alg: AlgorithmConfig, g_tok: float, g_seq: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy loss of micro-batch ``mb`` (rows ``idx`` of the step): clipped surrogate, plus the KL term when it
    is in the loss, minus the entropy bonus; normalised by the whole mini-batch's counts ``g_tok`` / ``g_seq`` (all
    processes), so micro-batch losses add up to the mini-batch's."""
    T = mb.response_ids.shape[1]
    mm = st.mask_BT[idx, :T]  # (b, T)
    logp_BT, ent_BT = score_tokens(scorer, mb, mm, entropy=alg.entropy_coef != 0)  # (b, T) each
    method = ALGORITHMS[alg.name]
    mode = method.loss_agg or alg.loss_agg
    norms = dict(global_tokens=g_tok, global_seqs=g_seq, norm_tokens=alg.loss_norm_tokens)
    old_BT = logp_BT.detach() if st.old_is_current else st.old_logp_BT[idx, :T]
    adv_BT = st.adv_BT[idx, :T]
    if method.policy_loss == "gspo":
        loss, pm = A.gspo_loss(logp_BT, old_BT, adv_BT, mm, alg.gspo_clip_low, alg.gspo_clip_high, g_seq)
    else:
        weights_BT, tis = None, {}
        if alg.tis_cap is not None:  # old (the training forward's) over the sampler's probabilities, capped
            sampled_BT = mb.action_mask[:, :T].bool() & mm.bool()
            weights_BT, tis = A.tis_weights(old_BT, mb.rollout_logp[:, :T], sampled_BT, alg.tis_cap)
        clip = (alg.clip_eps, alg.dual_clip, mode)
        loss, pm = A.policy_loss(
            logp_BT, old_BT, adv_BT, mm, *clip, clip_eps_high=alg.clip_eps_high, weights_BT=weights_BT, **norms
        )
        pm.update(tis)
    if st.ref_logp_BT is not None:
        kl_cur_BT, _ = A.kl_penalty(logp_BT, st.ref_logp_BT[idx, :T], mm, alg.kl_estimator)
        loss = loss + alg.kl_coef * A.aggregate_loss(kl_cur_BT, mm, mode, **norms)
    if alg.entropy_coef:
        loss = loss - alg.entropy_coef * A.aggregate_loss(ent_BT, mm, mode, **norms)
        pm["entropy/mean"] = float(A.masked_mean(ent_BT.detach(), mm))
    # free: the sampled tokens' mean negative log-prob, whose expectation is the policy's entropy when the rollout
    # sampled it at temperature 1 (a collapse shows here with or without an entropy bonus)
    pm["entropy/sampled_nll"] = float(-A.masked_mean(logp_BT.detach(), mm))
    return loss, pm


def value_micro_loss(
    critic: nn.Module, mb: Batch, idx: list[int], st: StepTensors, alg: AlgorithmConfig, c_tok: float, c_seq: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped value loss of micro-batch ``mb`` over the critic's positions, normalised like the policy loss."""
    assert st.old_values_BT is not None and st.returns_BT is not None
    T = mb.response_ids.shape[1]
    values_BT = critic(mb)  # (b, T)
    cm = st.cmask_BT[idx, :T]
    return A.value_loss(
        values_BT,
        st.old_values_BT[idx, :T],
        st.returns_BT[idx, :T],
        cm,
        alg.value_clip,
        agg=alg.loss_agg,
        global_tokens=c_tok,
        global_seqs=c_seq,
        norm_tokens=alg.loss_norm_tokens,
    )


class SkippedSteps:
    """Optimizer steps skipped because a gradient norm was not finite (NaN or inf: an overflowing forward pass, a loss
    gone NaN): taken, the step would write NaN into the weights and the optimizer's moments for good. A skipped step
    leaves both as they were; ``limit`` skips in a row (``training.max_skipped_steps``) stop the run (:meth:`check`).
    Every process sees the same norms (they are of the reduced gradients), so all skip, and stop, together."""

    def __init__(self, limit: int) -> None:
        self.limit, self.in_a_row, self.norm = limit, 0, 0.0

    def finite(self, *norms: float | torch.Tensor) -> bool:
        """Whether every norm is finite, so the step may be taken; a skip is counted, and said, when not."""
        bad = [float(n) for n in norms if not math.isfinite(float(n))]
        self.in_a_row = self.in_a_row + 1 if bad else 0
        if bad:
            self.norm = bad[0]
            console.log(
                f"[yellow]warning:[/yellow] gradient norm {self.norm}: optimizer step skipped, the weights left as "
                f"they were ({self.in_a_row} in a row; {self.limit} stop the run)"
            )
        return not bad

    def check(self, where: str) -> None:
        """One line when ``limit`` steps in a row were skipped, up to ``where`` (the step that logged the last)."""
        if self.in_a_row >= self.limit:
            raise ValueError(
                f"training diverged: the gradient norm was {self.norm} in {self.in_a_row} optimizer steps in a row "
                f"(up to {where}), each skipped with the weights left as they were; lower the learning rate, look "
                "for a loss or reward that is not finite, or raise training.max_skipped_steps"
            )
