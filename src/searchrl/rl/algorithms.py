"""RL math: advantage estimators, KL estimators, policy / value / entropy losses and the one loss aggregator.
The advantages are here; the masked primitives and the aggregator live in ``searchrl.rl.masked``, the KL estimators
and losses in ``searchrl.rl.losses``, and this module re-exports them, so ``algorithms`` is the one name to import.

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
       variance as OpenRLHF, ``rsqrt(var + 1e-8)`` where OpenRLHF takes ``rsqrt(max(var, 1e-8))``). "Global batch"
       therefore means: call it on the whole rollout batch (all prompts of the step, gathered across processes)
       before splitting into mini-batches.
    4. k3 ("low_var_kl") clamps the log-ratio to [-20, 20] before ``exp`` and the result to at most 10, as verl,
       so one runaway token cannot overflow or dominate the penalty. The PPO log-ratio is clamped to [-20, 20] too.
    5. A "sequence" in the sequence-mean modes is a row with at least one counted token.
    6. The value loss is ``0.5 * max((V - R)^2, (V_clip - R)^2)`` (verl / OpenRLHF convention, the 0.5 included).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from searchrl.rl.losses import (
    KLEstimator,
    entropy_from_logits,
    gspo_loss,
    kl_penalty,
    policy_loss,
    tis_weights,
    value_loss,
)
from searchrl.rl.masked import (
    _WHITEN_EPS,
    GroupIds,
    LossAgg,
    Metrics,
    SumAcross,
    _bool_mask,
    _check_same_shape,
    aggregate_loss,
    masked_mean,
    masked_sum,
    whiten,
)

__all__ = [
    "Floats",
    "GroupIds",
    "KLEstimator",
    "LossAgg",
    "Metrics",
    "SumAcross",
    "aggregate_loss",
    "as_tensor",
    "entropy_from_logits",
    "gae_advantages",
    "group_centred",
    "group_normalised",
    "grpo_advantages",
    "informative_group_count",
    "informative_rows",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "policy_loss",
    "gspo_loss",
    "tis_weights",
    "reinforce_pp_returns",
    "rloo_advantages",
    "value_loss",
    "whiten",
]


# ----------------------------------------------------------------------------------------------------------------
# group helpers
# ----------------------------------------------------------------------------------------------------------------

#: a tensor, or Python numbers as a notebook writes them: ``[1.0, 0.0]``, ``[[1, 1, 0], [1, 0, 0]]``
Floats = Tensor | Sequence[float] | Sequence[Sequence[float]]


def as_tensor(x: Floats, like: Tensor | None = None) -> Tensor:
    """A tensor as it is; a (nested) sequence of numbers as a float32 tensor on ``like``'s device."""
    if isinstance(x, Tensor):
        return x
    return torch.as_tensor(x, dtype=torch.float32, device=like.device if isinstance(like, Tensor) else None)


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
    """Per-sample group ``(size, mean, unbiased std)``, each ``(B,)``; std is 0 for groups of size 1.

    A group whose scores are all equal gets exactly its score as mean and 0 as std: ``sum / n`` of a value that binary
    floating point cannot hold (0.1, an F1) leaves a rounding residue, which ``(r - mean) / (std + eps)`` would blow
    up to an advantage of order 1 on every row and which would pass the group as informative."""
    zeros_G = torch.zeros(n_groups, dtype=scores_B.dtype, device=scores_B.device)  # (G,)
    size_G = zeros_G.index_add(0, index_B, torch.ones_like(scores_B))  # (G,)
    max_G = zeros_G.scatter_reduce(0, index_B, scores_B, reduce="amax", include_self=False)  # (G,)
    min_G = zeros_G.scatter_reduce(0, index_B, scores_B, reduce="amin", include_self=False)  # (G,)
    mean_G = torch.where(max_G == min_G, max_G, zeros_G.index_add(0, index_B, scores_B) / size_G)  # (G,)
    sq_dev_B = (scores_B - mean_G[index_B]) ** 2  # (B,)
    var_G = zeros_G.index_add(0, index_B, sq_dev_B) / (size_G - 1).clamp(min=1)  # (G,)
    return size_G[index_B], mean_G[index_B], var_G.sqrt()[index_B]  # (B,) each


def _broadcast(adv_B: Tensor, mask_BT: Floats) -> Tensor:
    m = (as_tensor(mask_BT, adv_B) != 0).to(adv_B.device)  # (B, T)
    if m.dim() != 2 or m.shape[0] != adv_B.shape[0]:
        raise ValueError(f"mask shape {tuple(m.shape)} does not fit {adv_B.shape[0]} scores")
    return torch.where(m, adv_B[:, None].expand_as(m), torch.zeros((), dtype=adv_B.dtype, device=adv_B.device))


# ----------------------------------------------------------------------------------------------------------------
# advantages
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def gae_advantages(
    rewards_BT: Floats, values_BT: Floats, mask_BT: Floats, gamma: float = 1.0, lam: float = 1.0
) -> tuple[tuple[Tensor, Tensor], Metrics]:
    """Generalised Advantage Estimation (Schulman et al., 2015) over the counted (action) positions.

    ``delta_t = r_t + gamma * V(next action) - V(t)``, ``A_t = delta_t + gamma * lam * A(next action)``, with
    ``V = 0`` after the last action. Masked positions are not steps: they are skipped, their values are ignored, and
    any reward on them is added to the preceding action's reward. Returns ``((advantages_BT, returns_BT), metrics)``
    with ``returns = advantages + values`` (the critic's target); both are 0 at masked positions. No gradient.
    """
    values_BT = as_tensor(values_BT, mask_BT)
    rewards_BT, mask_BT = as_tensor(rewards_BT, values_BT), as_tensor(mask_BT, values_BT)
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
    scores_B: Floats, group_ids_B: GroupIds, mask_BT: Floats, norm_by_std: bool = True, eps: float = 1e-6
) -> tuple[Tensor, Metrics]:
    """GRPO outcome advantage (Shao et al., 2024): ``(r - group mean) / (group std + eps)``, or ``r - group mean``
    when ``norm_by_std`` is False (Dr. GRPO's fix for the std's difficulty bias). Broadcast over each sequence's
    counted positions; 0 at masked positions and for groups of size 1. Returns ``(advantages_BT, metrics)``."""
    scores_B = as_tensor(scores_B, mask_BT)
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
def group_centred(scores_B: Floats, group_ids_B: GroupIds) -> Tensor:
    """``r - group mean`` (OpenRLHF's ``reinforce_baseline`` before REINFORCE++ returns); 0 for groups of one."""
    scores_B = as_tensor(scores_B)
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, _ = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    return torch.where(size_B > 1, scores_B - mean_B, torch.zeros_like(scores_B))


@torch.no_grad()
def group_normalised(scores_B: Floats, group_ids_B: GroupIds, eps: float = 1e-9) -> Tensor:
    """``(r - group mean) / (group std + eps)`` with the unbiased std (OpenRLHF's ``group_norm``, R1-Searcher's
    stage-1 code, before the REINFORCE++ returns, which it then does not whiten); 0 for groups of one."""
    scores_B = as_tensor(scores_B)
    index_B, n_groups = _group_index(group_ids_B, scores_B.shape[0], scores_B.device)
    size_B, mean_B, std_B = _group_stats(scores_B, index_B, n_groups)  # (B,) each
    return torch.where(size_B > 1, (scores_B - mean_B) / (std_B + eps), torch.zeros_like(scores_B))


@torch.no_grad()
def rloo_advantages(scores_B: Floats, group_ids_B: GroupIds, mask_BT: Floats) -> tuple[Tensor, Metrics]:
    """REINFORCE leave-one-out (Ahmadian et al., 2024): ``r_i - mean_{j != i, same group} r_j``, broadcast over the
    counted positions; 0 for groups of size 1 and at masked positions. Returns ``(advantages_BT, metrics)``."""
    scores_B = as_tensor(scores_B, mask_BT)
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
    scores_B: Floats,
    kl_BT: Floats,
    mask_BT: Floats,
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
    kl_BT = as_tensor(kl_BT, mask_BT)
    scores_B, mask_BT = as_tensor(scores_B, kl_BT), as_tensor(mask_BT, kl_BT)
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
