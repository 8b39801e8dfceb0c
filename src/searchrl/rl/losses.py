"""The KL estimators and the policy / value / entropy losses over masked ``(B, T)`` response positions
(``searchrl.rl.algorithms`` re-exports them, and its docstring states the conventions and deviations)."""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from searchrl.rl.masked import LossAgg, Metrics, _bool_mask, _check_same_shape, aggregate_loss, masked_mean

KLEstimator = Literal["k1", "k2", "k3"]

_K3_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: large but finite in float16/bfloat16/float32
_K3_MAX = 10.0
_PPO_LOG_RATIO_CLAMP = 20.0


# ----------------------------------------------------------------------------------------------------------------
# KL estimators
# ----------------------------------------------------------------------------------------------------------------


def kl_penalty(
    logp_BT: Tensor, ref_logp_BT: Tensor, mask_BT: Tensor, estimator: KLEstimator = "k3"
) -> tuple[Tensor, Metrics]:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probs (Schulman, "Approximating KL").

    With ``d = logp - ref_logp``: k1 = ``d``; k2 = ``0.5 * d^2``; k3 = ``exp(-d) + d - 1`` (clamped, see the module
    docstring). Returns ``(kl_BT, metrics)`` with ``kl_BT`` 0 at masked positions.

    In the reward (PPO, REINFORCE++): pass detached / old log-probs and fold ``-kl_coef * kl_BT`` into the token
    rewards. In the loss (GRPO): pass the current log-probs with gradient and add
    ``kl_coef * aggregate_loss(kl_BT, mask_BT, ...)``; masked positions then get exactly zero gradient.
    """
    _check_same_shape(logp=logp_BT, ref_logp=ref_logp_BT)
    m = _bool_mask(mask_BT, logp_BT)  # (B, T)
    zeros_BT = torch.zeros_like(logp_BT)
    diff_BT = torch.where(m, logp_BT - ref_logp_BT, zeros_BT)  # (B, T) log(pi / pi_ref), 0 where masked
    if estimator == "k1":
        kl_BT = diff_BT  # (B, T)
    elif estimator == "k2":
        kl_BT = 0.5 * diff_BT**2  # (B, T)
    elif estimator == "k3":
        neg_BT = (-diff_BT).clamp(-_K3_LOG_RATIO_CLAMP, _K3_LOG_RATIO_CLAMP)  # (B, T) log(pi_ref / pi)
        kl_BT = (torch.exp(neg_BT) - neg_BT - 1).clamp(max=_K3_MAX)  # (B, T) >= 0
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; use one of {get_args(KLEstimator)}")
    kl_BT = torch.where(m, kl_BT, zeros_BT)  # (B, T)
    return kl_BT, {"kl/mean": masked_mean(kl_BT.detach(), m).item()}


# ----------------------------------------------------------------------------------------------------------------
# losses
# ----------------------------------------------------------------------------------------------------------------


def policy_loss(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    advantages_BT: Tensor,
    mask_BT: Tensor,
    clip_eps: float = 0.2,
    dual_clip: float | None = None,
    agg: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
    norm_tokens: float | None = None,
    clip_eps_high: float | None = None,
    weights_BT: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO clipped surrogate (Schulman et al., 2017), to minimise: per token
    ``max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps_high))`` with ``rho = exp(logp - old_logp)``; ``eps_high``
    (``clip_eps_high``, DAPO's clip-higher) defaults to ``eps``. ``weights_BT`` (constants) scale each token's loss
    before aggregation (truncated importance sampling, :func:`tis_weights`).

    ``dual_clip = c`` (> 1) adds Ye et al.'s (2020) bound for negative advantages: there the per-token loss is
    ``min(max(...), -c * A)``, so a token whose ratio has blown up cannot produce an unbounded loss. Aggregated with
    :func:`aggregate_loss` (``agg``, ``global_tokens``, ``global_seqs``). Advantages are treated as constants.
    Metrics: ``clip_frac`` (tokens where the clipped term is active), ``dual_clip_frac``, ``approx_kl`` (k3 estimate
    of KL(old || new)), and the min / mean / max ratio over counted tokens.
    """
    _check_same_shape(logp=logp_BT, old_logp=old_logp_BT, advantages=advantages_BT)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    if clip_eps <= 0 or eps_high <= 0:
        raise ValueError(f"clip_eps and clip_eps_high must be > 0, got {clip_eps} and {eps_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (e.g. 3.0) or None, got {dual_clip}")
    m = _bool_mask(mask_BT, logp_BT)  # (B, T)
    zeros_BT = torch.zeros_like(logp_BT)
    log_ratio_BT = torch.where(m, logp_BT - old_logp_BT.detach(), zeros_BT)  # (B, T) 0 where masked
    log_ratio_BT = log_ratio_BT.clamp(-_PPO_LOG_RATIO_CLAMP, _PPO_LOG_RATIO_CLAMP)  # (B, T)
    ratio_BT = torch.exp(log_ratio_BT)  # (B, T)
    adv_BT = torch.where(m, advantages_BT.detach().to(logp_BT.dtype), zeros_BT)  # (B, T)
    unclipped_BT = -adv_BT * ratio_BT  # (B, T)
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - clip_eps, 1.0 + eps_high)  # (B, T)
    loss_BT = torch.maximum(unclipped_BT, clipped_BT)  # (B, T)
    dual_active_BT = torch.zeros_like(m)  # (B, T) bool
    if dual_clip is not None:
        bound_BT = -adv_BT * dual_clip  # (B, T)
        dual_active_BT = (adv_BT < 0) & (bound_BT < loss_BT) & m  # (B, T)
        loss_BT = torch.where(adv_BT < 0, torch.minimum(loss_BT, bound_BT), loss_BT)  # (B, T)
    if weights_BT is not None:
        loss_BT = loss_BT * weights_BT.detach().to(loss_BT.dtype)  # (B, T)
    loss = aggregate_loss(loss_BT, m, agg, global_tokens, global_seqs, norm_tokens)  # ()
    with torch.no_grad():
        ratio_d = ratio_BT.detach()
        big = torch.finfo(ratio_d.dtype).max
        metrics = {
            "policy/clip_frac": masked_mean((clipped_BT > unclipped_BT).to(ratio_d.dtype), m).item(),
            "policy/dual_clip_frac": masked_mean(dual_active_BT.to(ratio_d.dtype), m).item(),
            "policy/approx_kl": masked_mean((ratio_d - 1) - log_ratio_BT.detach(), m).item(),
            "policy/ratio_mean": masked_mean(ratio_d, m).item(),
            "policy/ratio_min": torch.where(m, ratio_d, big).min().item() if m.any() else 1.0,
            "policy/ratio_max": torch.where(m, ratio_d, -big).max().item() if m.any() else 1.0,
        }
    return loss, metrics


def tis_weights(
    old_logp_BT: Tensor, rollout_logp_BT: Tensor, sampled_BT: Tensor, cap: float
) -> tuple[Tensor, Metrics]:
    """Truncated importance-sampling weights (Yao et al., 2025): ``min(exp(old_logp - rollout_logp), cap)`` on the
    sampled tokens, 1 elsewhere (a token the sampler did not draw has no rollout log-prob). The ratio corrects a
    gradient taken under the training forward's probabilities for tokens drawn by an engine whose numerics differ;
    the cap bounds its variance. Metrics: the weights' mean and the share capped, over sampled tokens."""
    _check_same_shape(old_logp=old_logp_BT, rollout_logp=rollout_logp_BT)
    m = _bool_mask(sampled_BT, old_logp_BT)  # (B, T)
    log_w_BT = (old_logp_BT - rollout_logp_BT).detach().clamp(max=_PPO_LOG_RATIO_CLAMP)  # (B, T)
    raw_BT = torch.where(m, torch.exp(log_w_BT), torch.ones_like(log_w_BT))  # (B, T)
    w_BT = raw_BT.clamp(max=cap)  # (B, T)
    metrics = {
        "tis/weight_mean": masked_mean(w_BT, m).item(),
        "tis/capped_frac": masked_mean((raw_BT > cap).to(w_BT.dtype), m).item(),
    }
    return w_BT, metrics


def gspo_loss(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    advantages_BT: Tensor,
    mask_BT: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    global_seqs: float | None = None,
) -> tuple[Tensor, Metrics]:
    """GSPO (Zheng et al., 2025), to minimise: one importance ratio per sequence, the geometric mean of its tokens'
    ``s_i = exp(mean_t (logp - old_logp))`` over its counted positions, clipped as a whole:
    ``sum_i max(-A_i * s_i, -A_i * clip(s_i, 1 - clip_low, 1 + clip_high)) / N_seq``, with ``A_i`` the sequence's
    advantage (its counted positions' mean: GRPO's is constant along a sequence). The paper's clip range is
    3e-4 / 4e-4: a length-normalised ratio moves far less than a token's. ``global_seqs``: the whole step's counted
    sequences (all micro-batches and processes), as :func:`aggregate_loss`. Metrics as :func:`policy_loss`'s, per
    sequence."""
    _check_same_shape(logp=logp_BT, old_logp=old_logp_BT, advantages=advantages_BT)
    if clip_low <= 0 or clip_high <= 0:
        raise ValueError(f"GSPO clip ranges must be > 0, got {clip_low}, {clip_high}")
    m = _bool_mask(mask_BT, logp_BT)  # (B, T)
    zeros_BT = torch.zeros_like(logp_BT)
    n_B = m.sum(-1).clamp(min=1).to(logp_BT.dtype)  # (B,)
    log_ratio_B = torch.where(m, logp_BT - old_logp_BT.detach(), zeros_BT).sum(-1) / n_B  # (B,)
    ratio_B = torch.exp(log_ratio_B.clamp(-_PPO_LOG_RATIO_CLAMP, _PPO_LOG_RATIO_CLAMP))  # (B,)
    adv_B = torch.where(m, advantages_BT.detach().to(logp_BT.dtype), zeros_BT).sum(-1) / n_B  # (B,)
    unclipped_B = -adv_B * ratio_B  # (B,)
    clipped_B = -adv_B * ratio_B.clamp(1.0 - clip_low, 1.0 + clip_high)  # (B,)
    counted_B = m.any(-1)  # (B,)
    loss_B = torch.where(counted_B, torch.maximum(unclipped_B, clipped_B), torch.zeros_like(unclipped_B))  # (B,)
    n_seq = global_seqs if global_seqs is not None else counted_B.sum().clamp(min=1).to(logp_BT.dtype)
    if global_seqs is not None and global_seqs <= 0:
        raise ValueError(f"global_seqs must be > 0, got {global_seqs}")
    loss = loss_B.sum() / n_seq  # ()
    with torch.no_grad():
        r = ratio_B.detach()[counted_B]
        frac = (clipped_B > unclipped_B)[counted_B].to(r.dtype)
        metrics = {
            "policy/clip_frac": frac.mean().item() if len(r) else 0.0,
            "policy/dual_clip_frac": 0.0,
            "policy/approx_kl": ((r - 1) - torch.log(r)).mean().item() if len(r) else 0.0,
            "policy/ratio_mean": r.mean().item() if len(r) else 1.0,
            "policy/ratio_min": r.min().item() if len(r) else 1.0,
            "policy/ratio_max": r.max().item() if len(r) else 1.0,
        }
    return loss, metrics


def value_loss(
    values_BT: Tensor,
    old_values_BT: Tensor,
    returns_BT: Tensor,
    mask_BT: Tensor,
    clip: float | None = 0.2,
    agg: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
    norm_tokens: float | None = None,
) -> tuple[Tensor, Metrics]:
    """Clipped value loss (PPO2 / verl): per token ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``,
    or ``0.5 * (V - R)^2`` when ``clip`` is None; aggregated with :func:`aggregate_loss`. Returns and old values are
    constants. Metrics: ``clip_frac`` (tokens where the clipped term is larger), mean value and mean return.
    Computed in fp32 at least: a critic's bf16 values (its head under autocast) are upcast, not the returns rounded."""
    _check_same_shape(values=values_BT, old_values=old_values_BT, returns=returns_BT)
    values_BT = values_BT.to(torch.promote_types(values_BT.dtype, torch.float32))  # (B, T)
    if clip is not None and clip <= 0:
        raise ValueError(f"value clip must be > 0 or None, got {clip}")
    m = _bool_mask(mask_BT, values_BT)  # (B, T)
    zeros_BT = torch.zeros_like(values_BT)
    v_BT = torch.where(m, values_BT, zeros_BT)  # (B, T)
    old_BT = torch.where(m, old_values_BT.detach().to(values_BT.dtype), zeros_BT)  # (B, T)
    ret_BT = torch.where(m, returns_BT.detach().to(values_BT.dtype), zeros_BT)  # (B, T)
    unclipped_BT = (v_BT - ret_BT) ** 2  # (B, T)
    if clip is None:
        loss_BT = 0.5 * unclipped_BT  # (B, T)
        clip_frac = 0.0
    else:
        # V itself inside the range (not V_old + (V - V_old), which rounds away from V and would count as clipped)
        v_clipped_BT = torch.maximum(torch.minimum(v_BT, old_BT + clip), old_BT - clip)  # (B, T)
        clipped_BT = (v_clipped_BT - ret_BT) ** 2  # (B, T)
        loss_BT = 0.5 * torch.maximum(unclipped_BT, clipped_BT)  # (B, T)
        clip_frac = masked_mean((clipped_BT > unclipped_BT).to(values_BT.dtype), m).item()
    loss = aggregate_loss(loss_BT, m, agg, global_tokens, global_seqs, norm_tokens)  # ()
    metrics = {
        "value/clip_frac": clip_frac,
        "value/value_mean": masked_mean(v_BT.detach(), m).item(),
        "value/return_mean": masked_mean(ret_BT, m).item(),
    }
    return loss, metrics


def entropy_from_logits(
    logits_BTV: Tensor,
    mask_BT: Tensor,
    agg: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
) -> tuple[Tensor, Metrics]:
    """Entropy of the next-token distributions, ``H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_{t,v}``, aggregated
    over counted positions with :func:`aggregate_loss`. Returns ``(entropy, metrics)``: a bonus, so the trainer adds
    ``-entropy_coef * entropy`` to the loss. Masked positions get exactly zero gradient (finite logits assumed).
    The logits are not copied, so call it per micro-batch: ``(B, T, V)`` is the largest tensor in training."""
    if logits_BTV.dim() != 3:
        raise ValueError(f"expected (B, T, V) logits, got shape {tuple(logits_BTV.shape)}")
    m = _bool_mask(mask_BT, logits_BTV[..., 0])  # (B, T)
    probs_BTV = torch.softmax(logits_BTV, dim=-1)  # (B, T, V)
    entropy_BT = torch.logsumexp(logits_BTV, dim=-1) - (probs_BTV * logits_BTV).sum(-1)  # (B, T)
    entropy = aggregate_loss(entropy_BT, m, agg, global_tokens, global_seqs)  # ()
    return entropy, {"entropy/mean": masked_mean(entropy_BT.detach(), m).item()}
