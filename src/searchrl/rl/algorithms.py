"""RL math: advantage estimators, KL estimators, policy / value / entropy losses and the one loss aggregator.

Plain, typed functions over ``(B, T)`` tensors of *response* positions (B sequences, T response tokens; the prompt is
not included). Estimators and losses return ``(value, metrics)`` where ``metrics`` is a ``dict[str, float]`` of
detached diagnostics ready to log; the small helpers (``masked_sum``, ``masked_mean``, ``whiten``,
``aggregate_loss``) return plain tensors. No function mutates its inputs or keeps state.

The mask
    ``mask_BT`` is 1 (or True) for positions that count and 0 elsewhere. With retrieved-token masking on (the default,
    ``algorithm.mask_observations``), a position counts when the policy sampled that token AND it is not padding:
    inserted ``<information>`` / ``<observation>`` / ``<|begin_of_documents|>`` blocks and invalid-action feedback are
    0. For the masking ablation the caller passes the plain attention mask (1 on every non-padding response token)
    instead; nothing in this module changes. Masked positions are excluded from every statistic and receive exactly
    zero gradient: ``(B, T)`` inputs are selected with ``torch.where`` (not multiplied by the mask), so even
    non-finite garbage at padding positions cannot leak NaNs into the loss or its gradient (entropy needs finite
    logits, since copying ``(B, T, V)`` to select would cost too much memory).

Metrics keys are already namespaced (``policy/``, ``value/``, ``kl/``, ``entropy/``, ``gae/``, ``grpo/``, ``rloo/``,
``reinforce_pp/``). Losses are not repeated in the metrics: under global counts a micro-batch's loss is only its
share of the step's loss, so the caller logs the summed value.

Papers implemented (specs in ``shared/specs``):
    - Search-R1 (Jin et al., arXiv 2503.09516; spec 003 §5): PPO with GAE (gamma = lam = 1, Eq. 1) and GRPO with a
      KL term in the loss (Eq. 2); both normalise by the number of policy tokens, masking retrieved tokens (§5.2).
    - R1-Searcher (Song et al.; spec 001 §4): REINFORCE++ with gamma = 1 and the retrieve mask.
    - R1-Searcher++ (arXiv 2505.17005; spec 000 §4, Eq. 1): REINFORCE++ with the KL folded into the return-to-go and
      the advantage normalised over the global batch; per-sequence masked mean then mean over sequences
      (``seq_mean_token_mean``).
    - R-Search (Zhao et al.; spec 002 §5): GRPO (main) and PPO; masked observations, unmasked evidence.
    - RAG-R1 (Tan et al., arXiv 2507.02962; spec 004 §4): PPO with GAE (gamma = lam = 1) and a value model.
    - RLOO (Ahmadian et al., 2024) and the dual-clip PPO objective (Ye et al., 2020) are standard additions.

Choices and deviations (the papers leave these open, or the authors' code differs):
    1. GAE runs over *action* positions only: the "next value" of an action is the value at the next mask = 1
       position, so inserted observation tokens are skipped rather than treated as steps. Rewards that sit on a
       masked position (e.g. a per-token penalty the caller did not mask) are credited, undiscounted, to the action
       that precedes them. Search-R1's code instead runs GAE and the critic over every attention position; with the
       papers' gamma = lam = 1 the advantages agree exactly (A_t = sum of rewards from t on - V(t) either way) and only
       which positions train the critic differs. Advantages and returns are 0 at masked positions.
    2. GRPO uses the unbiased group std and ``(r - mean) / (std + eps)``, eps = 1e-6, as verl does. A group of size
       1 gets advantage 0 (it is its own baseline) instead of verl's raw score (mean 0, std 1): with unique prompt
       ids that verl behaviour silently turned GRPO into an un-baselined REINFORCE (spec 003 §5.4). RLOO does the
       same for singletons (no other sample to leave out).
    3. REINFORCE++ places the outcome score on the last counted token, adds ``-kl_coef * kl`` on every counted token,
       takes the undiscounted return-to-go and whitens it over the counted tokens of the batch passed in (biased
       variance, ``rsqrt(var + 1e-8)``, as OpenRLHF). "Global batch" therefore means: call it on the whole rollout
       batch (all prompts of the step, gathered across processes) before splitting into mini-batches.
    4. k3 ("low_var_kl") clamps the log-ratio to [-20, 20] before ``exp`` and the result to at most 10, as verl,
       so one runaway token cannot overflow or dominate the penalty. The PPO log-ratio is clamped to [-20, 20] too.
    5. A "sequence" in the sequence-mean modes is a row with at least one counted token.
    6. The value loss is ``0.5 * max((V - R)^2, (V_clip - R)^2)`` (verl / OpenRLHF convention, the 0.5 included).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Literal, get_args

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]
LossAgg = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]
Metrics = dict[str, float]
#: Group ids: any hashables (prompt uids, tuples of (dataset, index), ...) or a 1-D integer tensor. Must be unique
#: per prompt across the whole batch: Search-R1's code once merged datasets whose indices restarted at 0.
GroupIds = Sequence[Hashable] | Tensor
#: ``tensor -> its sum over every process`` under data parallelism (the identity in one process).
SumAcross = Callable[[Tensor], Tensor]

_K3_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: large but finite in float16/bfloat16/float32
_K3_MAX = 10.0
_PPO_LOG_RATIO_CLAMP = 20.0
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
    positions of all processes' rows, exactly as if the whole batch were in one process."""
    m = _bool_mask(mask_BT, x_BT)  # (B, T)
    total = sum_across or (lambda t: t)
    zero = torch.zeros_like(x_BT)
    n_sum = total(torch.stack([m.sum().to(x_BT.dtype), torch.where(m, x_BT, zero).sum()]))  # (2,) count, sum
    mean = n_sum[1] / n_sum[0].clamp(min=1)  # ()
    var = total(torch.where(m, (x_BT - mean) ** 2, zero).sum()) / n_sum[0].clamp(min=1)  # ()
    return torch.where(m, (x_BT - mean) * torch.rsqrt(var + eps), zero)  # (B, T)


def aggregate_loss(
    loss_BT: Tensor,
    mask_BT: Tensor,
    mode: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar. This is the only place in SearchRL where a loss is aggregated.

    Modes (``m`` = mask, ``L`` = per-token loss, sums over counted positions only):

    - ``token_mean``: ``sum_{b,t} m L / N_tok`` — every counted token weighs the same (the masked mean over the batch
      that Search-R1's verl code computes; DAPO).
    - ``seq_mean_token_mean``: ``sum_b (sum_t m L / sum_t m) / N_seq`` — each sequence's masked mean, then the mean
      over sequences (Search-R1's Eqs. 1 and 2 as written; R1-Searcher++'s J_Mask).
    - ``seq_mean_token_sum``: ``sum_b (sum_t m L) / N_seq`` — each sequence's masked sum, then the mean.

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
    elif mode != "seq_mean_token_sum":
        raise ValueError(f"unknown loss aggregation {mode!r}; use one of {get_args(LossAgg)}")
    if global_seqs is not None:
        if global_seqs <= 0:
            raise ValueError(f"global_seqs must be > 0, got {global_seqs}")
        return per_seq_B.sum() / global_seqs
    return per_seq_B.sum() / m.any(-1).sum().clamp(min=1).to(loss_BT.dtype)


def _group_index(group_ids_B: GroupIds, batch: int, device: torch.device) -> tuple[Tensor, int]:
    """Map arbitrary group ids to dense indices: ``(index_B, n_groups)``."""
    if isinstance(group_ids_B, Tensor):
        if group_ids_B.dim() != 1:
            raise ValueError(f"group ids must be 1-D, got shape {tuple(group_ids_B.shape)}")
        ids: Sequence[Hashable] = group_ids_B.tolist()
    else:
        ids = group_ids_B
    if len(ids) != batch:
        raise ValueError(f"got {len(ids)} group ids for {batch} scores")
    dense: dict[Hashable, int] = {}
    index = [dense.setdefault(g, len(dense)) for g in ids]
    return torch.tensor(index, dtype=torch.long, device=device), len(dense)  # (B,)


def _group_stats(scores_B: Tensor, index_B: Tensor, n_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group ``(size, mean, unbiased std)``, each ``(B,)``; std is 0 for groups of size 1."""
    zeros_G = torch.zeros(n_groups, dtype=scores_B.dtype, device=scores_B.device)  # (G,)
    size_G = zeros_G.index_add(0, index_B, torch.ones_like(scores_B))  # (G,)
    mean_G = zeros_G.index_add(0, index_B, scores_B) / size_G  # (G,)
    sq_dev_B = (scores_B - mean_G[index_B]) ** 2  # (B,)
    var_G = zeros_G.index_add(0, index_B, sq_dev_B) / (size_G - 1).clamp(min=1)  # (G,)
    return size_G[index_B], mean_G[index_B], var_G.sqrt()[index_B]  # (B,) each


def _broadcast(adv_B: Tensor, mask_BT: Tensor) -> Tensor:
    m = (mask_BT != 0).to(adv_B.device)  # (B, T)
    if m.dim() != 2 or m.shape[0] != adv_B.shape[0]:
        raise ValueError(f"mask shape {tuple(m.shape)} does not fit {adv_B.shape[0]} scores")
    return torch.where(m, adv_B[:, None].expand_as(m), torch.zeros((), dtype=adv_B.dtype, device=adv_B.device))


# ----------------------------------------------------------------------------------------------------------------
# advantages
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def gae_advantages(
    rewards_BT: Tensor, values_BT: Tensor, mask_BT: Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[tuple[Tensor, Tensor], Metrics]:
    """Generalised Advantage Estimation (Schulman et al., 2015) over the counted (action) positions.

    ``delta_t = r_t + gamma * V(next action) - V(t)``, ``A_t = delta_t + gamma * lam * A(next action)``, with
    ``V = 0`` after the last action. Masked positions are not steps: they are skipped, their values are ignored, and
    any reward on them is added to the preceding action's reward. Returns ``((advantages_BT, returns_BT), metrics)``
    with ``returns = advantages + values`` (the critic's target); both are 0 at masked positions. No gradient.
    """
    _check_same_shape(rewards=rewards_BT, values=values_BT)
    m = _bool_mask(mask_BT, rewards_BT)  # (B, T)
    rewards_BT = rewards_BT.to(values_BT.dtype)
    batch, length = rewards_BT.shape
    zeros_B = torch.zeros(batch, dtype=values_BT.dtype, device=values_BT.device)
    next_value_B, next_adv_B, carried_reward_B = zeros_B, zeros_B, zeros_B  # (B,) each, state of the next action
    adv_columns: list[Tensor] = []
    for t in reversed(range(length)):  # T python steps over (B,) vectors: cheap next to a forward pass
        m_B = m[:, t]  # (B,)
        delta_B = rewards_BT[:, t] + carried_reward_B + gamma * next_value_B - values_BT[:, t]  # (B,)
        adv_B = delta_B + gamma * lam * next_adv_B  # (B,)
        adv_columns.append(torch.where(m_B, adv_B, zeros_B))
        next_value_B = torch.where(m_B, values_BT[:, t], next_value_B)  # (B,)
        next_adv_B = torch.where(m_B, adv_B, next_adv_B)  # (B,)
        carried_reward_B = torch.where(m_B, zeros_B, carried_reward_B + rewards_BT[:, t])  # (B,)
    advantages_BT = torch.stack(adv_columns[::-1], dim=1) if adv_columns else torch.zeros_like(values_BT)  # (B, T)
    returns_BT = torch.where(m, advantages_BT + values_BT, torch.zeros_like(values_BT))  # (B, T)
    metrics = {
        "gae/advantage_mean": masked_mean(advantages_BT, m).item(),
        "gae/return_mean": masked_mean(returns_BT, m).item(),
        "gae/value_mean": masked_mean(values_BT, m).item(),
    }
    return (advantages_BT, returns_BT), metrics


@torch.no_grad()
def grpo_advantages(
    scores_B: Tensor, group_ids_B: GroupIds, mask_BT: Tensor, norm_by_std: bool = True, eps: float = 1e-6
) -> tuple[Tensor, Metrics]:
    """GRPO outcome advantage (Shao et al., 2024): ``(r - group mean) / (group std + eps)``, or ``r - group mean``
    when ``norm_by_std`` is False (Dr. GRPO's fix for the std's difficulty bias). Broadcast over each sequence's
    counted positions; 0 at masked positions and for groups of size 1. Returns ``(advantages_BT, metrics)``."""
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, std_B = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    centred_B = scores_B - mean_B  # (B,)
    adv_B = centred_B / (std_B + eps) if norm_by_std else centred_B  # (B,)
    adv_B = torch.where(size_B > 1, adv_B, torch.zeros_like(adv_B))  # (B,) singletons carry no signal
    advantages_BT = _broadcast(adv_B, mask_BT)  # (B, T)
    multi = size_B > 1  # (B,)
    metrics = {
        "grpo/score_mean": scores_B.mean().item(),
        "grpo/groups": float(n_groups),
        "grpo/singleton_groups": float(torch.unique(index_B[~multi]).numel()),
        # share of samples in groups whose scores are all equal: they get zero advantage, i.e. no learning signal
        "grpo/zero_std_frac": ((std_B == 0) & multi).to(scores_B.dtype).mean().item(),
        "grpo/advantage_abs_mean": adv_B.abs().mean().item(),
    }
    return advantages_BT, metrics


def _informative(scores: Sequence[float], group_ids: Sequence[Hashable]) -> tuple[Tensor, Tensor, int]:
    """``(informative_B, index_B, n_groups)``: which rows belong to a group of 2+ samples that did not all score
    the same."""
    index_B, n_groups = _group_index(list(group_ids), len(scores), torch.device("cpu"))
    scores_B = torch.tensor(list(scores), dtype=torch.float64)
    size_B, _, std_B = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    return (size_B > 1) & (std_B > 0), index_B, n_groups


def informative_rows(scores: Sequence[float], group_ids: Sequence[Hashable]) -> tuple[list[int], Metrics]:
    """DAPO's dynamic-sampling filter (Yu et al., 2025): the rows of groups whose samples do not all score the same
    (the refill is the trainer's ``algorithm.max_sampling_rounds``). Under GRPO, RLOO and group-baselined REINFORCE++
    a uniform group has advantage 0 everywhere, so its rows only add cost and dilute a token-mean loss. Never empty:
    with no informative group it keeps the first group (advantage 0, so only its KL term acts), so every process
    still has rows to pass."""
    informative_B, index_B, n_groups = _informative(scores, group_ids)
    kept_groups = torch.unique(index_B[informative_B]).numel()
    keep = (informative_B if kept_groups else index_B == 0).nonzero().flatten().tolist()
    return keep, {"filter/informative_group_frac": kept_groups / max(n_groups, 1), "filter/rows": float(len(keep))}


def informative_group_count(scores: Sequence[float], group_ids: Sequence[Hashable]) -> int:
    """How many groups ``informative_rows`` keeps (0 when none is informative)."""
    informative_B, index_B, _ = _informative(scores, group_ids)
    return torch.unique(index_B[informative_B]).numel()


@torch.no_grad()
def group_centred(scores_B: Tensor, group_ids_B: GroupIds) -> Tensor:
    """``r - group mean`` (OpenRLHF's ``reinforce_baseline`` before REINFORCE++ returns); 0 for groups of one."""
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, _ = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    return torch.where(size_B > 1, scores_B - mean_B, torch.zeros_like(scores_B))


@torch.no_grad()
def group_normalised(scores_B: Tensor, group_ids_B: GroupIds, eps: float = 1e-9) -> Tensor:
    """``(r - group mean) / (group std + eps)`` with the unbiased std (OpenRLHF's ``group_norm``, R1-Searcher's
    stage-1 code, before the REINFORCE++ returns, which it then does not whiten); 0 for groups of one."""
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, std_B = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    return torch.where(size_B > 1, (scores_B - mean_B) / (std_B + eps), torch.zeros_like(scores_B))


@torch.no_grad()
def rloo_advantages(scores_B: Tensor, group_ids_B: GroupIds, mask_BT: Tensor) -> tuple[Tensor, Metrics]:
    """REINFORCE leave-one-out (Ahmadian et al., 2024): ``r_i - mean_{j != i, same group} r_j``, broadcast over the
    counted positions; 0 for groups of size 1 and at masked positions. Returns ``(advantages_BT, metrics)``."""
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, _ = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    # mean of the others = (n * mean - r_i) / (n - 1), so r_i - that = n / (n - 1) * (r_i - mean)
    adv_B = size_B / (size_B - 1).clamp(min=1) * (scores_B - mean_B)  # (B,)
    adv_B = torch.where(size_B > 1, adv_B, torch.zeros_like(adv_B))  # (B,)
    metrics = {
        "rloo/score_mean": scores_B.mean().item(),
        "rloo/singleton_groups": float(torch.unique(index_B[size_B <= 1]).numel()),
        "rloo/advantage_abs_mean": adv_B.abs().mean().item(),
    }
    return _broadcast(adv_B, mask_BT), metrics


@torch.no_grad()
def reinforce_pp_returns(
    scores_B: Tensor,
    kl_BT: Tensor,
    mask_BT: Tensor,
    kl_coef: float,
    eps: float = _WHITEN_EPS,
    whiten_returns: bool = True,
    sum_across: SumAcross | None = None,
) -> tuple[Tensor, Metrics]:
    """REINFORCE++ advantages (Hu, 2025; R1-Searcher++ Eq. 1): token reward ``-kl_coef * kl_t`` on every counted
    token plus the outcome score on the last counted token, undiscounted return-to-go (gamma = 1), then whitened over
    all counted tokens of the batch. ``kl_BT`` is a per-token estimate from :func:`kl_penalty` (R1-Searcher's code
    uses k1). To reproduce R1-Searcher's ``reinforce_baseline``, pass :func:`group_centred` scores; for its
    stage-1 ``group_norm``, :func:`group_normalised` scores and ``whiten_returns=False``
    (``algorithm.reinforce_estimator``). ``sum_across`` whitens over all processes' rows (see :func:`whiten`).
    Rows with no counted token contribute nothing. Returns ``(advantages_BT, metrics)``; 0 at masked positions."""
    m = _bool_mask(mask_BT, kl_BT)  # (B, T)
    if scores_B.shape != (kl_BT.shape[0],):
        raise ValueError(f"scores shape {tuple(scores_B.shape)} does not fit kl shape {tuple(kl_BT.shape)}")
    zeros_BT = torch.zeros_like(kl_BT)
    kl_rewards_BT = torch.where(m, -kl_coef * kl_BT, zeros_BT)  # (B, T)
    positions_BT = torch.arange(kl_BT.shape[1], device=kl_BT.device).expand_as(m)  # (B, T)
    last_B = torch.where(m, positions_BT, -1).amax(-1)  # (B,) index of the last counted token, -1 if none
    is_last_BT = (positions_BT == last_B[:, None]) & m  # (B, T) at most one True per row
    rewards_BT = kl_rewards_BT + torch.where(is_last_BT, scores_B[:, None].to(kl_BT.dtype), zeros_BT)  # (B, T)
    returns_BT = rewards_BT.flip(-1).cumsum(-1).flip(-1)  # (B, T) sum_{t' >= t} r_t'
    if whiten_returns:
        advantages_BT = whiten(returns_BT, m, eps, sum_across)  # (B, T)
    else:
        advantages_BT = torch.where(m, returns_BT, zeros_BT)  # (B, T)
    metrics = {
        "reinforce_pp/score_mean": scores_B.mean().item(),
        "reinforce_pp/return_mean": masked_mean(returns_BT, m).item(),
        "reinforce_pp/kl_reward_mean": masked_mean(kl_rewards_BT, m).item(),
        "reinforce_pp/empty_rows": float((last_B < 0).sum().item()),
    }
    return advantages_BT, metrics


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
) -> tuple[Tensor, Metrics]:
    """PPO clipped surrogate (Schulman et al., 2017), to minimise: per token
    ``max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps))`` with ``rho = exp(logp - old_logp)``.

    ``dual_clip = c`` (> 1) adds Ye et al.'s (2020) bound for negative advantages: there the per-token loss is
    ``min(max(...), -c * A)``, so a token whose ratio has blown up cannot produce an unbounded loss. Aggregated with
    :func:`aggregate_loss` (``agg``, ``global_tokens``, ``global_seqs``). Advantages are treated as constants.
    Metrics: ``clip_frac`` (tokens where the clipped term is active), ``dual_clip_frac``, ``approx_kl`` (k3 estimate
    of KL(old || new)), and the min / mean / max ratio over counted tokens.
    """
    _check_same_shape(logp=logp_BT, old_logp=old_logp_BT, advantages=advantages_BT)
    if clip_eps <= 0:
        raise ValueError(f"clip_eps must be > 0, got {clip_eps}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (e.g. 3.0) or None, got {dual_clip}")
    m = _bool_mask(mask_BT, logp_BT)  # (B, T)
    zeros_BT = torch.zeros_like(logp_BT)
    log_ratio_BT = torch.where(m, logp_BT - old_logp_BT.detach(), zeros_BT)  # (B, T) 0 where masked
    log_ratio_BT = log_ratio_BT.clamp(-_PPO_LOG_RATIO_CLAMP, _PPO_LOG_RATIO_CLAMP)  # (B, T)
    ratio_BT = torch.exp(log_ratio_BT)  # (B, T)
    adv_BT = torch.where(m, advantages_BT.detach().to(logp_BT.dtype), zeros_BT)  # (B, T)
    unclipped_BT = -adv_BT * ratio_BT  # (B, T)
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - clip_eps, 1.0 + clip_eps)  # (B, T)
    loss_BT = torch.maximum(unclipped_BT, clipped_BT)  # (B, T)
    dual_active_BT = torch.zeros_like(m)  # (B, T) bool
    if dual_clip is not None:
        bound_BT = -adv_BT * dual_clip  # (B, T)
        dual_active_BT = (adv_BT < 0) & (bound_BT < loss_BT) & m  # (B, T)
        loss_BT = torch.where(adv_BT < 0, torch.minimum(loss_BT, bound_BT), loss_BT)  # (B, T)
    loss = aggregate_loss(loss_BT, m, agg, global_tokens, global_seqs)  # ()
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


def value_loss(
    values_BT: Tensor,
    old_values_BT: Tensor,
    returns_BT: Tensor,
    mask_BT: Tensor,
    clip: float | None = 0.2,
    agg: LossAgg = "token_mean",
    global_tokens: float | None = None,
    global_seqs: float | None = None,
) -> tuple[Tensor, Metrics]:
    """Clipped value loss (PPO2 / verl): per token ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``,
    or ``0.5 * (V - R)^2`` when ``clip`` is None; aggregated with :func:`aggregate_loss`. Returns and old values are
    constants. Metrics: ``clip_frac`` (tokens where the clipped term is larger), mean value and mean return."""
    _check_same_shape(values=values_BT, old_values=old_values_BT, returns=returns_BT)
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
        v_clipped_BT = old_BT + (v_BT - old_BT).clamp(-clip, clip)  # (B, T)
        clipped_BT = (v_clipped_BT - ret_BT) ** 2  # (B, T)
        loss_BT = 0.5 * torch.maximum(unclipped_BT, clipped_BT)  # (B, T)
        clip_frac = masked_mean((clipped_BT > unclipped_BT).to(values_BT.dtype), m).item()
    loss = aggregate_loss(loss_BT, m, agg, global_tokens, global_seqs)  # ()
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
