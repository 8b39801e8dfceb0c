"""Per-token pieces of the HF decode loops (the call-at-a-time one in ``hf.py`` and the continuous one in
``continuous.py``): sampling with per-row seeds, the stop-string rule and a finished row's completion.

Per-row seeds: with ``SamplingParams.row_seeds`` the uniform draw behind a row's ``k``-th sampled token is a hash of
(the row's seed, ``k``) (:func:`row_uniforms`), so a row samples the same tokens whatever other rows share its batch,
in whatever order, on any device. Without them one ``torch.Generator`` per call draws one uniform per row per step in
batch order (a row's tokens then depend on its batch).
"""

from __future__ import annotations

import torch
from torch import Tensor

from searchrl.generation.base import Completion, SamplingParams, splitmix64


def row_uniforms(seeds: list[int], ks: list[int], device: torch.device) -> Tensor:
    """``(B,)`` float32 draws in [0, 1): row ``b``'s ``ks[b]``-th draw of the stream ``seeds[b]`` (24 bits, exact in
    float32, never 1.0). Computed on the host, so every device sees the same draws. On CUDA they travel from pinned
    memory without blocking: a plain copy would wait for the step the GPU is still decoding, once per token."""
    u = [(splitmix64(splitmix64(s) ^ k) >> 40) * 2.0**-24 for s, k in zip(seeds, ks, strict=True)]
    u_B = torch.tensor(u, dtype=torch.float32)
    if torch.device(device).type == "cuda":
        return u_B.pin_memory().to(device, non_blocking=True)
    return u_B.to(device)


def has_stop(tokenizer, ids: list[int], stops: tuple[str, ...]) -> bool:
    """Whether ``decode(ids)`` contains a stop string. The decode loops detect stop strings from per-token text
    pieces and confirm a hit with this before they stop a row: a tokenizer whose pieces do not concatenate to its
    text (SentencePiece drops the leading space of a piece decoded alone, so the pieces of ``</ search>`` read
    ``</search>``) would otherwise end a row early, at a stop string its text does not hold."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    return any(s in text for s in stops)


def first_stop(tokenizer, ids: list[int], stops: tuple[str, ...]) -> tuple[int, str] | None:
    """Smallest n such that decode(ids[:n]) contains a stop string, with that string; None if none occurs."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if not any(s in text for s in stops):
        return None
    lo, hi = 1, len(ids)  # decode(ids[:hi]) contains a stop; find the smallest such prefix
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(ids[:mid], skip_special_tokens=False) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    prefix = tokenizer.decode(ids[:lo], skip_special_tokens=False)
    hit = min((s for s in stops if s in prefix), key=prefix.find)
    return lo, hit


def stop_at_end(tokenizer, ids: list[int], stops: tuple[str, ...]) -> tuple[int, str] | None:
    """``(len(ids), stop)`` when the last token completes the first stop string, checked on the full text."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if not any(s in text for s in stops):
        return None
    before = tokenizer.decode(ids[:-1], skip_special_tokens=False)
    if any(s in before for s in stops):
        return None
    return len(ids), min((s for s in stops if s in text), key=text.find)


def finish_row(
    tokenizer,
    ids: list[int],
    lps: list[float],
    eos_ids: set[int],
    stops: tuple[str, ...],
    t: float,
    stopped: bool = False,
) -> Completion:
    """The completion of one row: stop-string trim (exact rule), else EOS (kept), else length.

    ``stopped``: incremental detection saw the last token complete a stop string; two decodes confirm it (else the
    exact search over prefixes decides)."""
    eos_at = next((j for j, x in enumerate(ids) if x in eos_ids), None)
    searchable = ids if eos_at is None else ids[:eos_at]
    stop = None
    if stops and searchable:
        stop = (stop_at_end(tokenizer, searchable, stops) if stopped else None) or first_stop(
            tokenizer, searchable, stops
        )
    if stop is not None:
        n, reason, stop_str = stop[0], "stop", stop[1]
    elif eos_at is not None:
        n, reason, stop_str = eos_at + 1, "eos", None
    else:
        n, reason, stop_str = len(ids), "length", None
    kept = ids[:n]
    text = tokenizer.decode(kept, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return Completion(kept, lps[:n], text, reason, stop_str, {"generate_s": t})


def sample_tokens(logits_BV: Tensor, params: SamplingParams, uniform_B: Tensor | None) -> tuple[Tensor, Tensor]:
    """Next token per row and its log-prob under the raw logits (temperature 1, no top-p). Returns ``(B,), (B,)``.
    ``logits_BV``: any float dtype (a GPU step's are bf16), computed in float32. ``uniform_B``: each row's draw in
    [0, 1) (unused, may be None, when greedy).

    Argmax when greedy, else temperature + nucleus (top-p) sampling. Sampling inverts the CDF with one uniform draw
    per row (``torch.multinomial`` costs ~15x more per step over a 49k vocabulary on a CPU), in two levels: the block
    of up to 256 tokens holding the draw, then the token inside it (a full-vocabulary ``cumsum`` is sequential per row
    and cost ~3 ms per step on 2 cores). At temperature 1 without top-p, one fused ``softmax`` (reading the logits in
    their own dtype) gives both the sampling mass and the log-prob, ``log p`` of the picked token (never zero: a
    zero-mass token is never picked): three passes over the ``(B, V)`` block in all, where a max, a shifted exp and
    its sum took six; at 512 rows of a 152k vocabulary each pass is ~0.3 GB."""
    logits_BV = logits_BV.contiguous()  # reductions along a strided last dim run ~8x slower
    if params.temperature <= 0:
        pick_B = logits_BV.argmax(-1)
        return pick_B, _logprob(logits_BV, pick_B)
    if params.temperature == 1 and params.top_p >= 1.0:
        probs_BV = torch.softmax(logits_BV, dim=-1, dtype=torch.float32)
        pick_B = inverse_cdf(probs_BV, uniform_B)
        return pick_B, probs_BV.gather(-1, pick_B[:, None]).squeeze(-1).log_()
    mass_BV = torch.softmax(logits_BV.float() / params.temperature, dim=-1)
    order_BV = None
    if params.top_p < 1.0:
        mass_BV, order_BV = mass_BV.sort(dim=-1, descending=True)
        # keep the smallest prefix with mass >= top_p: a token is dropped once the tokens before it hold top_p
        drop_BV = mass_BV.cumsum(-1) - mass_BV >= params.top_p
        mass_BV = mass_BV.masked_fill(drop_BV, 0.0)
    pick_B = inverse_cdf(mass_BV, uniform_B)
    if order_BV is not None:
        pick_B = order_BV.gather(-1, pick_B[:, None]).squeeze(-1)
    return pick_B, _logprob(logits_BV, pick_B)


def _logprob(logits_BV: Tensor, pick_B: Tensor) -> Tensor:
    """``log softmax(logits)[pick]`` per row, in float32."""
    return logits_BV.gather(-1, pick_B[:, None]).squeeze(-1).float() - torch.logsumexp(logits_BV.float(), dim=-1)


_BLOCK = 256


def _block(V: int) -> int:
    """Block length of the two-level search: 256, or 128 / 64 where that divides the vocabulary (Qwen's 151,936 =
    1,187 x 128) and 256 does not, so the (B, V) block is viewed, not copied into a padded one, every step."""
    return next((b for b in (_BLOCK, 128, 64) if V % b == 0), _BLOCK)


def inverse_cdf(probs_BV: Tensor, u_B: Tensor) -> Tensor:
    """Per row, the token at fraction ``u`` (in [0, 1)) of the row's total mass: the first token whose cumulative
    mass exceeds ``u * total``, so a zero-probability token is never picked."""
    B, V = probs_BV.shape
    block = _block(V)
    pad = (-V) % block
    blocks_BNK = (torch.nn.functional.pad(probs_BV, (0, pad)) if pad else probs_BV).view(B, -1, block)
    sums_BN = blocks_BNK.sum(-1)
    csum_BN = sums_BN.cumsum(-1)
    target_B1 = u_B[:, None] * csum_BN[:, -1:]
    j_B1 = torch.searchsorted(csum_BN, target_B1, right=True).clamp_(max=csum_BN.shape[1] - 1)
    rest_B1 = target_B1 - (csum_BN.gather(-1, j_B1) - sums_BN.gather(-1, j_B1))
    inside_BK = blocks_BNK[torch.arange(B, device=probs_BV.device), j_B1.squeeze(-1)].cumsum(-1)
    rest_B1 = torch.minimum(rest_B1.clamp_(min=0), inside_BK[:, -1:] * (1 - 1e-6))  # rounding stays in the block
    k_B1 = torch.searchsorted(inside_BK, rest_B1, right=True).clamp_(max=block - 1)
    return (j_B1 * block + k_B1).squeeze(-1)
