"""Trajectories -> padded tensors, and per-token log-probs / entropies of the response under a model.

Layout: every row is ``[left pad | prompt | response | right pad]`` with all prompts ending at column ``P`` (the
longest prompt) so that response token ``t`` of every row sits at column ``P + t``. The model's logits at column
``c`` predict the token at ``c + 1``, so the response's log-probs come from columns ``P - 1 ... P + T - 2``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from searchrl.rollout.trajectory import Trajectory


@dataclass
class Batch:
    input_ids: Tensor  # (B, P + T)
    attention_mask: Tensor  # (B, P + T)
    position_ids: Tensor  # (B, P + T)
    prompt_len: int  # P
    response_ids: Tensor  # (B, T)
    response_mask: Tensor  # (B, T) 1 on every real response token (policy or inserted)
    action_mask: Tensor  # (B, T) 1 on policy-sampled tokens only
    rollout_logp: Tensor  # (B, T) generator's log-probs (0 where action_mask == 0)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: Tensor | list[int]) -> Batch:
        """Rows ``idx``, with the columns that are padding in every selected row cut off (a micro-batch of short
        sequences costs what its own longest sequence costs, not the whole batch's)."""
        idx_t = torch.as_tensor(idx, dtype=torch.long, device=self.input_ids.device)
        P = self.prompt_len
        attn = self.attention_mask.index_select(0, idx_t)
        lo = P - int(attn[:, :P].sum(-1).max())  # first column any selected prompt uses
        resp = self.response_mask.index_select(0, idx_t)
        T = max(int(resp.sum(-1).max()), 1)  # longest selected response
        cols = slice(lo, P + T)
        return Batch(
            self.input_ids.index_select(0, idx_t)[:, cols],
            attn[:, cols],
            self.position_ids.index_select(0, idx_t)[:, cols],
            P - lo,
            self.response_ids.index_select(0, idx_t)[:, :T],
            resp[:, :T],
            self.action_mask.index_select(0, idx_t)[:, :T],
            self.rollout_logp.index_select(0, idx_t)[:, :T],
        )

    @property
    def lengths(self) -> list[int]:
        """Real (non-padding) tokens per row, prompt and response."""
        return self.attention_mask.sum(-1).tolist()

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            *(t.to(device) for t in (self.input_ids, self.attention_mask, self.position_ids)),
            self.prompt_len,
            *(t.to(device) for t in (self.response_ids, self.response_mask, self.action_mask, self.rollout_logp)),
        )


def collate(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    action_masks: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None = None,
    pad_id: int = 0,
) -> Batch:
    B = len(prompts)
    P = max(len(p) for p in prompts)
    T = max(1, max(len(r) for r in responses))
    input_ids = torch.full((B, P + T), pad_id, dtype=torch.long)  # (B, P+T)
    attn = torch.zeros((B, P + T), dtype=torch.long)  # (B, P+T)
    resp_mask = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    act_mask = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    old_lp = torch.zeros((B, T), dtype=torch.float32)  # (B, T)
    for i, (p, r, m) in enumerate(zip(prompts, responses, action_masks, strict=True)):
        input_ids[i, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        attn[i, P - len(p) : P] = 1
        if r:
            input_ids[i, P : P + len(r)] = torch.tensor(r, dtype=torch.long)
            attn[i, P : P + len(r)] = 1
            resp_mask[i, : len(r)] = 1
            act_mask[i, : len(r)] = torch.tensor(m, dtype=torch.long)
            if logprobs is not None:
                old_lp[i, : len(r)] = torch.tensor(logprobs[i], dtype=torch.float32)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P+T) positions restart at each row's first token
    return Batch(input_ids, attn, position_ids, P, input_ids[:, P:].clone(), resp_mask, act_mask, old_lp)


def collate_trajectories(trajs: Sequence[Trajectory], pad_id: int = 0) -> Batch:
    return collate(
        [t.prompt_ids for t in trajs],
        [t.response_ids for t in trajs],
        [t.action_mask for t in trajs],
        [t.logprobs for t in trajs],
        pad_id=pad_id,
    )


#: response positions whose logits are alive at once in a scoring pass (see TokenScorer.forward)
HEAD_CHUNK = 4096


class TokenScorer(nn.Module):
    """Runs a causal LM and computes vocabulary logits only at the positions asked for.

    A (B, T, V) logits tensor for every response position is the largest thing an RL or SFT step touches (with a
    49k vocabulary, 8 sequences of 1k tokens is 1.6 GB in float32), yet losses only read the policy's own tokens.
    This module computes the transformer body once and the output head on the selected rows only. It is the module
    handed to ``accelerate.prepare`` so data-parallel wrappers see one ordinary forward.

    Rows with the same prompt (a GRPO group) share one pass over it: the prompt runs once, its keys/values are
    copied to each row (gradients flow back through the copy and add up), and only the responses run per row. Same
    values as separate rows, up to float reassociation; with a group of 4 and a 160-token prompt it saves over half
    of a single-turn step's arithmetic.
    """

    def __init__(self, lm: nn.Module, share_prompts: bool = True, head_chunk: int = HEAD_CHUNK) -> None:
        super().__init__()
        self.lm = lm
        self.share_prompts = share_prompts
        self.head_chunk = head_chunk

    def forward(
        self, batch: Batch, select_BT: Tensor, targets_N: Tensor | None = None, entropy: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The logits at the selected positions, (N, V); with ``targets_N``, their log-probs and (with ``entropy``)
        entropies instead, (N,) each, the head run ``head_chunk`` positions at a time: with gradients, each chunk's
        (chunk, V) logits are recomputed in the backward pass rather than kept (a 152k vocabulary's fp32 logits are
        0.6 MB a position)."""
        head = self.lm.get_output_embeddings()
        h_NC = self.hidden(batch)[select_BT.bool()]  # (N, C), N = selected
        if targets_N is None:
            return head(h_NC)
        if len(h_NC) <= self.head_chunk:
            return _head_scores(head, h_NC, targets_N, entropy)
        parts = []
        for h, t in zip(h_NC.split(self.head_chunk), targets_N.split(self.head_chunk), strict=True):
            if torch.is_grad_enabled() and h.requires_grad:
                parts.append(checkpoint(_head_scores, head, h, t, entropy, use_reentrant=False))
            else:
                parts.append(_head_scores(head, h, t, entropy))
        return torch.cat([lp for lp, _ in parts]), torch.cat([e for _, e in parts])

    def hidden(self, batch: Batch) -> Tensor:
        """The last hidden state that predicts each response token: (B, T, H)."""
        body = self.lm.get_decoder()
        P, T = batch.prompt_len, batch.response_ids.shape[1]
        # under gradient checkpointing in training mode HF drops the KV cache that sharing passes between calls
        checkpointing = body.training and any(getattr(m, "gradient_checkpointing", False) for m in body.modules())
        if self.share_prompts and P > 0 and len(batch) > 1 and not checkpointing:
            plan = _share_plan(batch)
            if plan is not None:
                return _shared_forward(body, batch, *plan)
        h_BLH = body(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
        ).last_hidden_state  # (B, P+T, H)
        return h_BLH[:, P - 1 : P + T - 1, :]


_MIN_SHARED_PREFIX = 32  # distinct prompts share their common prefix only when it is at least this long
#: per device type, the positions a separate pass over the common prefix must save ((distinct prompts - 1) x its
#: length). Each pass costs the host a launch of every layer's kernels; on a GPU a 28-layer forward and backward is
#: ~20k operator calls, which a micro-batch of 5 groups sharing a 110-token instruction (440 positions) does not
#: repay. The CPU is bound by arithmetic, so any saving counts there.
_MIN_COMMON_SAVING = {"cuda": 2048}


def _share_plan(batch: Batch) -> tuple[list[list[int]], Tensor, int] | None:
    """``(distinct prompts, row -> prompt index, common prefix length)``, or None when sharing saves nothing."""
    P = batch.prompt_len
    # on the host: one copy from the device, then no synchronisation per distinct prompt
    key_BK = torch.cat([batch.input_ids[:, :P], batch.attention_mask[:, :P]], dim=1).cpu()  # (B, 2P)
    uniq_UK, inv_B = torch.unique(key_BK, dim=0, return_inverse=True)
    inv_B = inv_B.to(batch.input_ids.device)
    prompts = [row[:P][row[P:].bool()].tolist() for row in uniq_UK]
    shortest = min(len(p) for p in prompts)
    common = 0
    while common < shortest - 1 and all(p[common] == prompts[0][common] for p in prompts):
        common += 1  # every prompt keeps >= 1 token of its own: its last state predicts the response
    if (len(prompts) - 1) * common < _MIN_COMMON_SAVING.get(batch.input_ids.device.type, 0):
        common = 0  # the prompts' pass runs the prefix with the rest
    if len(prompts) == len(batch) and common < _MIN_SHARED_PREFIX:
        return None
    return prompts, inv_B, common


def _shared_forward(body: nn.Module, batch: Batch, prompts: list[list[int]], inv_B: Tensor, common: int) -> Tensor:
    """Three passes sharing keys/values: the prefix common to every prompt once, each distinct prompt's remainder
    once, then every row's response. Copies of the cache carry gradients back, so values and gradients equal the
    plain forward's (up to float reassociation)."""
    from transformers import DynamicCache

    from searchrl.generation.kvcache import cache_kwargs

    dev = batch.input_ids.device
    U = len(prompts)
    cache = DynamicCache()
    if common:
        body(
            input_ids=torch.tensor([prompts[0][:common]], device=dev),
            attention_mask=torch.ones(1, common, dtype=torch.long, device=dev),
            position_ids=torch.arange(common, device=dev)[None],
            **cache_kwargs(body, cache),
            use_cache=True,
        )
        cache.batch_repeat_interleave(U)
    rest = [p[common:] for p in prompts]
    R = max(len(r) for r in rest)
    ids_UR = torch.full((U, R), int(batch.input_ids[0, 0]), dtype=torch.long, device=dev)
    pos_UR = torch.zeros((U, R), dtype=torch.long, device=dev)
    mask_UL = torch.zeros((U, common + R), dtype=torch.long, device=dev)  # [common prefix | pad | remainder]
    mask_UL[:, :common] = 1
    for u, r in enumerate(rest):
        ids_UR[u, R - len(r) :] = torch.tensor(r, device=dev)
        pos_UR[u, R - len(r) :] = torch.arange(common, common + len(r), device=dev)
        mask_UL[u, common + R - len(r) :] = 1
    h_URH = body(
        input_ids=ids_UR, attention_mask=mask_UL, position_ids=pos_UR, use_cache=True, **cache_kwargs(body, cache)
    ).last_hidden_state  # (U, R, H)
    cache.batch_select_indices(inv_B)  # (U, ...) -> (B, ...), differentiable
    P = batch.prompt_len
    h_BTH = body(
        input_ids=batch.input_ids[:, P:],
        attention_mask=torch.cat([mask_UL[inv_B], batch.attention_mask[:, P:]], dim=1),
        position_ids=batch.position_ids[:, P:],
        **cache_kwargs(body, cache),
        use_cache=True,
    ).last_hidden_state  # (B, T, H)
    return torch.cat([h_URH[inv_B, -1:, :], h_BTH[:, :-1, :]], dim=1)  # (B, T, H)


def _head_scores(head: nn.Module, h_NC: Tensor, targets_N: Tensor, entropy: bool) -> tuple[Tensor, Tensor]:
    """Log-probs of ``targets_N`` under ``head(h_NC)`` in fp32, and the entropies (zeros unless ``entropy``)."""
    logits_NV = head(h_NC).float()  # (N, V)
    # cross_entropy: one fused log-softmax backward (half the time of logsumexp's on a 49k vocabulary)
    logp_N = -torch.nn.functional.cross_entropy(logits_NV, targets_N, reduction="none")  # (N,)
    if not entropy:
        return logp_N, torch.zeros_like(logp_N)
    p_NV = torch.softmax(logits_NV, dim=-1)  # (N, V)
    return logp_N, torch.logsumexp(logits_NV, dim=-1) - (p_NV * logits_NV).sum(-1)


def score_tokens(scorer: nn.Module, batch: Batch, select_BT: Tensor, entropy: bool = False) -> tuple[Tensor, Tensor]:
    """Log-probs of the response tokens (and per-token entropy) at selected positions, 0 elsewhere: (B, T) each."""
    sel = select_BT.bool()
    logp_N, ent_N = scorer(batch, select_BT, batch.response_ids[sel], entropy)  # (N,) each
    logp_BT = torch.zeros(select_BT.shape, dtype=logp_N.dtype, device=logp_N.device).masked_scatter(sel, logp_N)
    ent_BT = torch.zeros_like(logp_BT)
    if entropy:
        ent_BT = ent_BT.masked_scatter(sel, ent_N)
    return logp_BT, ent_BT


def response_logits(model, batch: Batch) -> Tensor:
    """Logits predicting each response token: (B, T, V)."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
    P, T = batch.prompt_len, batch.response_ids.shape[1]
    return out.logits[:, P - 1 : P + T - 1, :]  # (B, T, V)


def token_logprobs(logits_BTV: Tensor, ids_BT: Tensor) -> Tensor:
    """log softmax(logits)[ids] without materialising a second (B, T, V) tensor of log-probs."""
    logits_BTV = logits_BTV.float()
    picked_BT = logits_BTV.gather(-1, ids_BT.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked_BT - torch.logsumexp(logits_BTV, dim=-1)  # (B, T)


def plan_micro_batches(
    prompt_lens: Sequence[int],
    response_lens: Sequence[int],
    max_rows: int,
    max_tokens: int,
    keys: Sequence[Hashable] | None = None,
) -> list[list[int]]:
    """Length-bucketed micro-batches that keep rows with the same ``keys`` (prompt) together.

    Groups of rows sharing a key are ordered by their longest row and packed while the micro-batch's cost stays
    within ``max_tokens`` and its rows within ``max_rows``; cost = distinct prompts x longest prompt + rows x longest
    response (what :class:`TokenScorer` computes when rows share their prompt; a row over budget goes alone).
    Similar lengths share a micro-batch, so little of each forward is padding, and the budget bounds activation
    memory whatever the lengths (one budget fits single-turn and long multi-turn rollouts alike)."""
    n = len(prompt_lens)
    keys = list(range(n)) if keys is None else list(keys)
    groups: dict[Hashable, list[int]] = {}
    for i in range(n):
        groups.setdefault(keys[i], []).append(i)
    total = [prompt_lens[i] + response_lens[i] for i in range(n)]
    order = [
        i
        for g in sorted(groups.values(), key=lambda g: -max(total[i] for i in g))
        for i in sorted(g, key=lambda i: -total[i])
    ]

    def cost(rows: list[int]) -> int:
        distinct = len({keys[i] for i in rows})
        return distinct * max(prompt_lens[i] for i in rows) + len(rows) * max(response_lens[i] for i in rows)

    plans: list[list[int]] = []
    for i in order:
        cur = plans[-1] if plans else None
        if cur and len(cur) < max_rows and cost(cur + [i]) <= max_tokens:
            cur.append(i)
        else:
            plans.append([i])
    return plans


def forward_tokens(batch: Batch, share_prompts: bool = True) -> int:
    """Token positions one forward of ``batch`` computes, padding included, as :class:`TokenScorer` runs it: the
    common prefix once, each distinct prompt's remainder once and every response, or every row in full."""
    P, T = batch.prompt_len, batch.response_ids.shape[1]
    plan = _share_plan(batch) if share_prompts and P > 0 and len(batch) > 1 else None
    if plan is None:
        return len(batch) * (P + T)
    prompts, _, common = plan
    return common + len(prompts) * max(len(p) - common for p in prompts) + len(batch) * T


def prompt_keys(batch: Batch) -> list[bytes]:
    """One key per row: equal for rows whose prompt (ids and padding) is identical."""
    P = batch.prompt_len
    key_BK = torch.cat([batch.input_ids[:, :P], batch.attention_mask[:, :P]], dim=1).cpu().numpy()
    return [row.tobytes() for row in key_BK]


@torch.no_grad()
def compute_logprobs(
    scorer: nn.Module, batch: Batch, select_BT: Tensor, micro_batch_size: int = 8, max_tokens: int | None = None
) -> Tensor:
    """Per-token log-probs of the response at selected positions (no grad), in length-bucketed micro-batches: (B, T).

    ``max_tokens`` bounds each micro-batch's cost (default: unbounded, ``micro_batch_size`` rows)."""
    out = torch.zeros(select_BT.shape, dtype=torch.float32, device=select_BT.device)
    resp = batch.response_mask.sum(-1).tolist()
    prompt = [n - r for n, r in zip(batch.lengths, resp, strict=True)]
    plans = plan_micro_batches(prompt, resp, micro_batch_size, max_tokens or 1 << 62, prompt_keys(batch))
    for idx in plans:
        mb = batch.select(idx)
        lp = score_tokens(scorer, mb, select_BT[idx][:, : mb.response_ids.shape[1]])[0]
        out[idx, : lp.shape[1]] = lp.float()
    return out
