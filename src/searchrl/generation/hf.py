"""HF transformers generator: batched ``generate`` with KV cache and stop strings, on CPU or GPU.

The returned ids are exactly the sampled tokens, trimmed after the token that completed a stop string (HF keeps
decoding a finished row with pad tokens until the whole batch is done; those are dropped). Log-probs are taken from
the raw logits (temperature 1, no top-p), i.e. log pi(token | context) of the policy itself.
"""

from __future__ import annotations

import time

import torch

from searchrl.generation.base import Completion, Generator, SamplingParams


def _first_stop(tokenizer, ids: list[int], stops: tuple[str, ...]) -> tuple[int, str] | None:
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


class HFGenerator(Generator):
    """Wraps a causal LM and its tokenizer. ``model`` may be the training policy itself (weights are shared)."""

    def __init__(self, model, tokenizer, max_batch_size: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_ids = set(self._eos_ids())

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos]
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return [i for i in ids if i is not None]

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out: list[Completion | None] = [None] * len(prompts)
        # Similar lengths together: less padding per chunk.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start : start + self.max_batch_size]
            for i, c in zip(chunk, self._generate_chunk([prompts[i] for i in chunk], params), strict=True):
                out[i] = c
        return [c for c in out if c is not None]

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        t0 = time.perf_counter()
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (B, L) left-padded
        attn = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for r, p in enumerate(prompts):
            input_ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[r, width - len(p) :] = 1
        greedy = params.temperature <= 0
        if params.seed is not None:
            torch.manual_seed(params.seed)
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        was_training = self.model.training
        self.model.eval()
        res = self.model.generate(input_ids=input_ids.to(device), attention_mask=attn.to(device), **kwargs)
        if was_training:
            self.model.train()
        new_BN = res.sequences[:, width:].cpu()  # (B, N) new tokens (padded after each row finished)
        logits_BNV = torch.stack(res.logits, dim=1).float()  # (B, N, V) raw logits
        logp_BN = torch.log_softmax(logits_BNV, dim=-1).gather(-1, new_BN.unsqueeze(-1).to(logits_BNV.device))
        logp_BN = logp_BN.squeeze(-1).cpu()  # (B, N)
        elapsed = time.perf_counter() - t0
        completions = []
        for r in range(new_BN.shape[0]):
            ids = new_BN[r].tolist()
            eos_at = next((j for j, t in enumerate(ids) if t in self.eos_ids), None)
            searchable = ids if eos_at is None else ids[:eos_at]
            stop = _first_stop(self.tokenizer, searchable, params.stop) if params.stop and searchable else None
            if stop is not None:
                n, reason, stop_str = stop[0], "stop", stop[1]
            elif eos_at is not None:
                n, reason, stop_str = eos_at + 1, "eos", None
            else:
                n, reason, stop_str = len(ids), "length", None
            kept = ids[:n]
            completions.append(
                Completion(
                    token_ids=kept,
                    logprobs=logp_BN[r, :n].tolist(),
                    text=self.tokenizer.decode(kept, skip_special_tokens=True, clean_up_tokenization_spaces=False),
                    finish_reason=reason,
                    stop_string=stop_str,
                    timings={"generate_s": elapsed / new_BN.shape[0]},
                )
            )
        return completions
