"""Tensor primitives over masked ``(B, T)`` response positions, shared by the advantage estimators and the losses
(``searchrl.rl.algorithms`` re-exports them): masked sums and means, whitening over a (possibly multi-process)
batch, and the one loss aggregator. Masked positions never count, and never leak NaNs: inputs are selected with
``torch.where``, not multiplied by the mask."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Literal, get_args

import torch
from torch import Tensor

LossAgg = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]
Metrics = dict[str, float]
#: Group ids: any hashables (prompt uids, tuples of (dataset, index), ...) or a 1-D integer tensor. Must be unique
#: per prompt across the whole batch: Search-R1's code once merged datasets whose indices restarted at 0.
GroupIds = Sequence[Hashable] | Tensor
#: ``tensor -> its sum over every process`` under data parallelism (the identity in one process).
SumAcross = Callable[[Tensor], Tensor]

_WHITEN_EPS = 1e-8


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------


def _bool_mask(mask_BT: Tensor, like_BT: Tensor) -> Tensor:
    """The mask as a bool tensor on ``like_BT``'s device, after checking shapes agree."""
    if mask_BT.shape != like_BT.shape:
        raise ValueError(f"mask shape {tuple(mask_BT.shape)} does not match tensor shape {tuple(like_BT.shape)}")
    if like_BT.dim() != 2:
        raise ValueError(f"expected (B, T) tensors, got shape {tuple(like_BT.shape)}")
    return (mask_BT != 0).to(like_BT.device)  # (B, T) bool


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"tensor shapes differ: {shapes}")


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is nonzero (all dims, or along ``dim``)."""
    m = (mask != 0).to(x.device)
    selected = torch.where(m, x, torch.zeros_like(x))  # same shape as x; masked entries are exactly 0
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero; 0 (not NaN) where nothing is counted."""
    count = (mask != 0).to(x.device).sum() if dim is None else (mask != 0).to(x.device).sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


def whiten(x_BT: Tensor, mask_BT: Tensor, eps: float = _WHITEN_EPS, sum_across: SumAcross | None = None) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and (biased) variance over the counted positions; 0 elsewhere.

    ``sum_across`` sums a tensor over every process (data parallelism): the statistics are then those of the counted
    positions of all processes' rows, exactly as if the whole batch were in one process. They are summed in float64,
    where the sum of float32 values is exact: values all alike (scores a whole batch shares) give exactly 0, not
    their mean's rounding residue (of one sign everywhere) blown up by ``1 / sqrt(eps)``."""
    m = _bool_mask(mask_BT, x_BT)  # (B, T)
    total = sum_across or (lambda t: t)
    x_BT, dtype = x_BT.double(), x_BT.dtype
    zero = torch.zeros_like(x_BT)
    n_sum = total(torch.stack([m.sum().to(x_BT.dtype), torch.where(m, x_BT, zero).sum()]))  # (2,) count, sum
    mean = n_sum[1] / n_sum[0].clamp(min=1)  # ()
    var = total(torch.where(m, (x_BT - mean) ** 2, zero).sum()) / n_sum[0].clamp(min=1)  # ()
    return torch.where(m, (x_BT - mean) * torch.rsqrt(var + eps), zero).to(dtype)  # (B, T)


def aggregate_loss(
    loss_BT: Tensor,
    mask_BT: Tensor,
    mode: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
    norm_tokens: float | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar. This is the only place in SearchRL where a loss is aggregated.

    Modes (``m`` = mask, ``L`` = per-token loss, sums over counted positions only):

    - ``token_mean``: ``sum_{b,t} m L / N_tok`` — every counted token weighs the same (the masked mean over the batch
      that Search-R1's verl code computes; DAPO).
    - ``seq_mean_token_mean``: ``sum_b (sum_t m L / sum_t m) / N_seq`` — each sequence's masked mean, then the mean
      over sequences (Search-R1's Eqs. 1 and 2 as written; R1-Searcher++'s J_Mask).
    - ``seq_mean_token_sum``: ``sum_b (sum_t m L) / N_seq`` — each sequence's masked sum, then the mean.
    - ``seq_mean_token_sum_norm``: ``sum_b (sum_t m L) / (N_seq * norm_tokens)`` — the same over a constant length
      instead of each sequence's own (Dr. GRPO, Liu et al., 2025: no length bias toward short correct or long wrong
      answers); ``norm_tokens`` is required.

    ``N_tok`` / ``N_seq`` default to the counted tokens / counted sequences (rows with >= 1 counted token) of *this*
    tensor. When one optimiser step is split into micro-batches (gradient accumulation) or across processes, pass
    the counts of the WHOLE step instead: ``global_tokens = sum over all micro-batches and processes of mask.sum()``
    and ``global_seqs = the same sum of (mask.sum(-1) > 0).sum()``. Every term is then divided by the same constant,
    so the micro-batch losses simply add up: their sum (and the sum of their gradients, which is what accumulation
    and data-parallel all-reduce-sum compute) equals the loss and gradient of the full batch, however it was cut.
    With local denominators each micro-batch is normalised by its own count and the pieces are averaged, so a token
    in a micro-batch of short responses weighs more than one in a micro-batch of long responses: the loss and the
    gradient then change with micro-batch size and the number of processes, and the token-mean objective is no
    longer the one written in the paper. (Under DDP, which averages gradients over P processes, multiply the
    per-process loss by P, or divide the global count by P, to get the same sum.)
    """
    m = _bool_mask(mask_BT, loss_BT)  # (B, T)
    masked_BT = torch.where(m, loss_BT, torch.zeros_like(loss_BT))  # (B, T); zero gradient at m = 0
    if mode == "token_mean":
        if global_tokens is not None:
            if global_tokens <= 0:
                raise ValueError(f"global_tokens must be > 0, got {global_tokens}")
            return masked_BT.sum() / global_tokens
        return masked_BT.sum() / m.sum().clamp(min=1).to(loss_BT.dtype)
    per_seq_B = masked_BT.sum(-1)  # (B,)
    if mode == "seq_mean_token_mean":
        per_seq_B = per_seq_B / m.sum(-1).clamp(min=1).to(loss_BT.dtype)  # (B,)
    elif mode == "seq_mean_token_sum_norm":
        if not norm_tokens or norm_tokens <= 0:
            raise ValueError(f"seq_mean_token_sum_norm needs norm_tokens > 0, got {norm_tokens}")
        per_seq_B = per_seq_B / norm_tokens  # (B,)
    elif mode != "seq_mean_token_sum":
        raise ValueError(f"unknown loss aggregation {mode!r}; use one of {get_args(LossAgg)}")
    if global_seqs is not None:
        if global_seqs <= 0:
            raise ValueError(f"global_seqs must be > 0, got {global_seqs}")
        return per_seq_B.sum() / global_seqs
    return per_seq_B.sum() / m.any(-1).sum().clamp(min=1).to(loss_BT.dtype)
