"""HF transformers generators: our own decode loop (``hf``, the default) and ``model.generate`` (``hf_generate``).

Both return exactly the sampled tokens, trimmed after the token that completed a stop string, with the log-prob of
each under the raw logits (temperature 1, no top-p), i.e. log pi(token | context) of the policy itself.

``HFGenerator`` is the fast path for RL on small machines. Per call it:

- prefills each distinct context once (a GRPO group shares its prompt) and copies the cache to the group's rows;
- reuses the keys/values of contexts the previous call finished with (the next turn of a multi-turn rollout is that
  context plus an observation), so only new tokens are prefilled (:class:`~searchrl.generation.kvcache.PrefixStore`);
- decodes into a cache that grows in place (no per-step concatenation) and asks the model for last-position logits
  only; Llama-architecture models decode through :class:`~searchrl.generation.decode_step.DecodeStep` (the model's
  own modules without transformers' per-step mask and attention plumbing), others through ``model(...)``;
- on CUDA, replays each decode step from a CUDA graph over fixed key/value buffers
  (:mod:`~searchrl.generation.graph_decode`): one launch per token instead of some 40 per layer;
- on CUDA, queues step t+1 before reading step t's tokens on the host (``lookahead``), so the host's per-token
  work (stop strings, finished rows) runs while the GPU decodes; a row that finished at step t has its one extra
  token ignored;
- keeps only the sampled token's log-prob per step (never a ``(B, N, V)`` stack of logits);
- detects stop strings incrementally from per-token text pieces, confirms a hit on the row's full text before it
  stops the row, then checks each finished row's full text once, so a tokenizer whose pieces do not concatenate
  exactly still gets the exact rule;
- drops finished rows from the batch as they accumulate;
- samples with its own ``torch.Generator``, or with each row's own stream when ``SamplingParams.row_seeds`` is set
  (:mod:`~searchrl.generation.sampling`): the global RNG is never touched;
- with ``rollout.continuous``, runs a whole rollout as one decode loop that rows leave and re-enter
  (:meth:`HFGenerator.decode_continuous`, :mod:`~searchrl.generation.continuous`).
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack

import torch
from torch import Tensor

from searchrl import device as placement
from searchrl.generation.base import Completion, ContinuousScheduler, Generator, SamplingParams
from searchrl.generation.decode_step import DecodeStep, sharded
from searchrl.generation.graph_decode import GraphRows
from searchrl.generation.kvcache import BufferedCache, PrefixStore, SharedPrefixCache, cache_kwargs, weights_version
from searchrl.generation.prompts import reply_end_ids
from searchrl.generation.sampling import finish_row, has_stop, row_uniforms, sample_tokens
from searchrl.utils import eval_mode


def _eos_ids(model, tokenizer) -> set[int]:
    """The ids generation stops at: the generation config's EOS ids, the tokenizer's EOS, and the token the chat
    template ends a reply with (which SFT targets end with; a base model's generation config may lack it: Qwen2.5's
    names ``<|endoftext|>`` only, while its template ends replies with ``<|im_end|>``)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(eos) if isinstance(eos, list | tuple) else [eos]
    ids.append(getattr(tokenizer, "eos_token_id", None))
    ids += reply_end_ids(tokenizer)
    return {i for i in ids if i is not None}


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


_MIN_COMMON_PREFIX = 32  # distinct contexts share a common opening only when it is at least this long


class HFGenerator(Generator):
    """Batched decoding of a causal LM (the training policy itself: weights are shared, never copied).

    ``stats`` counts, since construction, the tokens prefilled, reused from earlier calls and deduplicated within a
    call, the decode steps and the row-steps computed (rows still in the batch at each step), for FLOP accounting and
    batch occupancy (row-steps per step)."""

    def __init__(
        self,
        model,
        tokenizer,
        max_batch_size: int = 64,
        reuse_prefixes: bool = True,
        store_bytes: int = 2 << 30,
        fast_step: bool = True,
        graphs: str = "auto",
        lookahead: str = "auto",
    ) -> None:
        """``graphs``: "auto" (on CUDA, each decode step replayed from a CUDA graph over fixed buffers,
        :mod:`~searchrl.generation.graph_decode`), "static" (those buffers without capture, on any device), "off".
        ``lookahead``: "auto" (on CUDA), "on" or "off": queue the next decode step before the host reads this
        step's tokens (the same tokens either way; on a CPU it only adds a step when the last row finishes)."""
        if graphs not in ("auto", "static", "off"):
            raise ValueError(f"graphs={graphs!r}: use auto, static or off")
        if lookahead not in ("auto", "on", "off"):
            raise ValueError(f"lookahead={lookahead!r}: use auto, on or off")
        self.model = model
        self.graphs = graphs
        self.lookahead = lookahead
        self.step = DecodeStep.build(model) if fast_step else None
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.reuse_prefixes = reuse_prefixes
        self.eos_ids = _eos_ids(model, tokenizer)
        self.store = PrefixStore(store_bytes)
        self._pieces: dict[int, str] = {}
        self.stats: Counter[str] = Counter()

    def runs_on(self, model: object) -> bool:
        return model is self.model

    @property
    def supports_continuous(self) -> bool:
        """Continuous batching runs on the fast decode step (Llama-architecture models, not FSDP-sharded)."""
        return self.step is not None

    def decode_continuous(self, scheduler: ContinuousScheduler, params: SamplingParams) -> None:
        """One decode loop for a whole rollout (:func:`~searchrl.generation.continuous.run_continuous`); on CUDA its
        steps run eagerly (no CUDA graphs: the batch changes from step to step)."""
        from searchrl.generation.continuous import run_continuous

        if self.step is None:
            raise NotImplementedError("continuous decoding needs the fast decode step (a Llama-architecture model)")
        with torch.no_grad() if sharded(self.model) else torch.inference_mode():
            run_continuous(self, scheduler, params)

    def counters(self) -> dict[str, float]:
        return dict(self.stats)

    def reset(self) -> None:
        self.store.clear()

    def _piece(self, token: int) -> str:
        s = self._pieces.get(token)
        if s is None:
            s = self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return s

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        # FSDP2's hooks gather parameters in place, which inference-mode tensors refuse: plain no-grad there
        with torch.no_grad() if sharded(self.model) else torch.inference_mode():
            return self._generate(prompts, params)

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        t0 = time.perf_counter()
        version = weights_version(self.model)
        previous = self.store if self.reuse_prefixes and self.store.version == version else None
        self.store = PrefixStore(self.store.max_bytes)  # entries live until the next call
        self.store.version = version
        gen = placement.sampler(placement.model_device(self.model), params.seed)
        if params.row_seeds is not None and len(params.row_seeds) != len(prompts):
            raise ValueError(f"row_seeds has {len(params.row_seeds)} seeds for {len(prompts)} prompts")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("an empty prompt: every prompt needs at least one token (e.g. the tokenizer's BOS)")
        # Distinct contexts, shortest first (less padding per chunk); a chunk holds at most max_batch_size rows.
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(tuple(p), []).append(i)
        uniq = sorted(groups, key=len)
        out: list[Completion | None] = [None] * len(prompts)
        chunk: list[tuple[int, ...]] = []
        rows = 0
        for u in uniq + [None]:
            if u is None or (chunk and rows + len(groups[u]) > self.max_batch_size):
                if chunk:
                    self._run_chunk(chunk, groups, previous, params, gen, out)
                chunk, rows = [], 0
            if u is not None:
                chunk.append(u)
                rows += len(groups[u])
        elapsed = time.perf_counter() - t0
        for c in out:
            c.timings["generate_s"] = elapsed / max(len(prompts), 1)
        return [c for c in out if c is not None]

    # ------------------------------------------------------------------------------------------------ chunk
    def _run_chunk(self, uniq, groups, previous: PrefixStore | None, params, gen, out) -> None:
        with eval_mode(self.model), placement.autocast(gen.device), ExitStack() as stack:
            self._decode_chunk(uniq, groups, previous, params, gen, out, stack)

    def _decode_chunk(self, uniq, groups, previous: PrefixStore | None, params, gen, out, stack: ExitStack) -> None:
        device = next(self.model.parameters()).device
        hits = [previous.longest_prefix(u) if previous is not None else (0, None) for u in uniq]
        logits_UV, cache, mask_UL, pos_U = self.prefill(uniq, hits, device)
        if self.step is not None:  # the decode steps' fused weights stand in for the prefill's autocast copies
            torch.clear_autocast_cache()
            stack.enter_context(self.step.fused_weights())
        # ---- one row per requested completion (duplicates of a context share its prefill)
        owner = [r for r, u in enumerate(uniq) for _ in groups[u]]
        slot_of = [i for u in uniq for i in groups[u]]  # row -> index in the caller's prompt list
        self.stats["dedup_tokens"] += sum(len(uniq[r]) for r in owner) - sum(len(u) for u in uniq)
        sel = torch.tensor(owner, device=device)
        logits_BV = logits_UV.index_select(0, sel)  # the model's dtype: sample_tokens computes in float32
        pos_B = pos_U.to(device).index_select(0, sel)
        if self.step is not None:  # rows share their context's keys/values
            common = _common_opening(hits)
            self.stats["common_opening_tokens"] += common  # read once per decode step for all rows
            shared = SharedPrefixCache(cache, mask_UL, sel, common=common)
            cuda_graphs = self.graphs == "auto" and device.type == "cuda"
            if cuda_graphs or self.graphs == "static" or self.step.compiled:  # fixed buffers
                rows = GraphRows(self.step, shared, params.max_new_tokens, capture=cuda_graphs)
            else:
                rows = _SharedRows(self.step, shared)
        else:
            if len(owner) != len(uniq):
                cache.batch_select_indices(sel)
            rows = _PaddedRows(self.model, cache, mask_UL.index_select(0, sel))
        contexts = [uniq[r] for r in owner]
        B = len(owner)
        toks: list[list[int]] = [[] for _ in range(B)]
        lps: list[list[float]] = [[] for _ in range(B)]
        done = [False] * B
        stopped = [False] * B  # finished by a stop string (a search call): worth keeping for the next call
        tails = [""] * B
        stops = tuple(params.stop)
        L = max((len(s) for s in stops), default=1)
        live = list(range(B))  # batch position -> row
        seeds = None if params.row_seeds is None else [params.row_seeds[i] for i in slot_of]
        ahead = self.lookahead == "on" or (self.lookahead == "auto" and device.type == "cuda")
        for step in range(params.max_new_tokens):
            u_B = None  # the draws: one per row, from the call's generator or each row's own stream
            if params.temperature > 0:
                u_B = (
                    torch.rand(len(live), generator=gen, device=device)
                    if seeds is None
                    else row_uniforms([seeds[r] for r in live], [step] * len(live), device)
                )
            next_B, lp_B = sample_tokens(logits_BV, params, u_B)
            last = step == params.max_new_tokens - 1
            picked = _HostCopy(next_B, lp_B)
            if ahead and not last:  # the next step decodes while the host reads this one's tokens
                pos_B = pos_B + 1
                logits_BV = rows.step(next_B, pos_B)
            for b, (tok, lp) in enumerate(zip(*picked.lists(), strict=True)):
                row = live[b]
                if done[row]:
                    continue
                toks[row].append(tok)
                lps[row].append(lp)
                if tok in self.eos_ids:
                    done[row] = True
                elif stops:
                    text = tails[row] + self._piece(tok)
                    if any(s in text for s in stops) and has_stop(self.tokenizer, toks[row], stops):
                        done[row] = stopped[row] = True
                    tails[row] = text[-(L - 1) :] if L > 1 else ""
            self.stats["decode_row_steps"] += len(live)
            self.stats["decode_steps"] += 1
            n_done = sum(done[r] for r in live)
            if n_done == len(live) or last:
                break
            if n_done >= max(1, len(live) // 4):  # compact: keep the finished rows' caches, drop them
                self._keep(rows, live, contexts, toks, done if params.keep_eos_rows else stopped, params)
                keep = [b for b, r in enumerate(live) if not done[r]]
                idx = torch.tensor(keep, device=device)
                rows.select(idx)
                pos_B, next_B = pos_B[idx], next_B[idx]
                if ahead:
                    logits_BV = logits_BV[idx]
                live = [live[b] for b in keep]
            if not ahead:
                pos_B = pos_B + 1
                logits_BV = rows.step(next_B, pos_B)
        wanted = [not done[r] or stopped[r] or params.keep_eos_rows for r in range(B)]  # rows a next call continues
        self._keep(rows, live, contexts, toks, wanted, params)
        self.stats["graph_captures"] += getattr(rows, "captures", 0)
        self.stats["graph_capture_s"] += getattr(rows, "capture_s", 0.0)
        for row in range(B):
            out[slot_of[row]] = finish_row(self.tokenizer, toks[row], lps[row], self.eos_ids, stops, 0.0, stopped[row])

    def prefill(self, uniq, hits, device) -> tuple[Tensor, BufferedCache, Tensor, Tensor]:
        """Prefill the distinct contexts ``uniq``, each after its cached prefix ``hits[i] = (n, kv)`` (``(0, None)``:
        none). A reused prefix is placed right-aligned before a left-padded suffix. Returns the last position's logits
        ``(U, V)``, the cache ``(U, ., P + S, .)``, its mask of real slots ``(U, P + S)`` (on ``device``) and the
        position of each context's last token ``(U,)`` (on the CPU)."""
        pad = _pad_id(self.tokenizer)
        U = len(uniq)
        self._share_common_prefix(uniq, hits, device)
        P = max(n for n, _ in hits)
        suffix = [u[n:] for u, (n, _) in zip(uniq, hits, strict=True)]
        S = max(len(s) for s in suffix)
        ids_US = torch.full((U, S), pad, dtype=torch.long)
        pos_US = torch.zeros((U, S), dtype=torch.long)
        mask_UL = torch.zeros((U, P + S), dtype=torch.long)  # (U, P+S) 1 on real slots
        for r, ((n, _), s) in enumerate(zip(hits, suffix, strict=True)):
            ids_US[r, S - len(s) :] = torch.tensor(s, dtype=torch.long)
            pos_US[r, S - len(s) :] = torch.arange(n, n + len(s))
            mask_UL[r, P - n : P] = 1
            mask_UL[r, P + S - len(s) :] = 1
        cache = BufferedCache.from_rows([kv for _, kv in hits], P) if P else BufferedCache()
        mask_UL = mask_UL.to(device)
        logits_UV = self.model(
            input_ids=ids_US.to(device),
            attention_mask=mask_UL,
            position_ids=pos_US.to(device),
            **cache_kwargs(self.model, cache),
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        self.stats["prefill_tokens"] += sum(len(s) for s in suffix)
        self.stats["reused_tokens"] += sum(n for n, _ in hits)
        return logits_UV, cache, mask_UL, pos_US[:, -1]

    def _share_common_prefix(self, uniq, hits, device) -> None:
        """Contexts with no cached prefix that open alike (the protocol's instruction) prefill that common prefix
        once; it then counts as their cached prefix."""
        misses = [i for i, (n, _) in enumerate(hits) if n == 0]
        if len(misses) < 2:
            return
        first, shortest = uniq[misses[0]], min(len(uniq[i]) for i in misses)
        common = 0
        while common < shortest - 1 and all(uniq[i][common] == first[common] for i in misses):
            common += 1
        if common < _MIN_COMMON_PREFIX:
            return
        cache = BufferedCache()
        self.model(
            input_ids=torch.tensor([first[:common]], device=device),
            **cache_kwargs(self.model, cache),
            use_cache=True,
            logits_to_keep=1,
        )
        kv = cache.row(0, torch.arange(common, device=device))
        for i in misses:
            hits[i] = (common, kv)
        self.stats["prefill_tokens"] += common
        self.stats["reused_tokens"] -= common  # counted once as prefilled, not as reused

    def _keep(self, rows, live, contexts, toks, wanted, params: SamplingParams) -> None:
        """Store the caches of the live rows in ``wanted`` (context + all sampled tokens but the last, whose
        keys/values were never computed) for the next call, unless no call will continue them."""
        if not self.reuse_prefixes or not params.keep_cache:
            return
        for b, row in enumerate(live):
            if not wanted[row] or not toks[row]:
                continue
            ctx = list(contexts[row]) + toks[row][:-1]
            kv = rows.row(b, len(ctx))
            if kv is not None:
                self.store.put(ctx, kv)


def _common_opening(hits) -> int:
    """Slots every context's cache opens with, the same tokens in all: the prefix a call's prompts share (prefilled
    once, one object for all) when each context's cached part is exactly that prefix; else 0."""
    n0, kv0 = hits[0]
    if kv0 is None or len(hits) < 2 or any(kv is not kv0 or n != n0 for n, kv in hits):
        return 0
    return n0


class _HostCopy:
    """Small device tensors copied to the host as a queued (non-blocking) copy: :meth:`lists` then waits for the
    work queued before the copy only, not for a decode step queued after it."""

    def __init__(self, *tensors: Tensor) -> None:
        self.event = None
        if tensors[0].is_cuda:
            self.host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
            for h, t in zip(self.host, tensors, strict=True):
                h.copy_(t, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = list(tensors)

    def lists(self) -> list[list]:
        if self.event is not None:
            self.event.synchronize()
        return [h.tolist() for h in self.host]


class _SharedRows:
    """Decode state of the fast step: rows share their context's keys/values (:class:`SharedPrefixCache`)."""

    def __init__(self, step: DecodeStep, cache: SharedPrefixCache) -> None:
        self.decode, self.cache = step, cache

    def select(self, idx_B: Tensor) -> None:
        self.cache.select(idx_B)

    def row(self, b: int, n: int) -> list[tuple[Tensor, Tensor]] | None:
        return self.cache.row(b, n)

    def step(self, ids_B: Tensor, pos_B: Tensor) -> Tensor:
        return self.decode(ids_B, pos_B, self.cache)


class _PaddedRows:
    """Decode state of the fallback: one full, left-padded cache row per completion and ``model(...)`` per step."""

    def __init__(self, model, cache: BufferedCache, mask_BL: Tensor) -> None:
        self.model, self.cache, self.mask_BL = model, cache, mask_BL

    def select(self, idx_B: Tensor) -> None:
        self.cache.batch_select_indices(idx_B)
        self.mask_BL = self.mask_BL[idx_B]

    def row(self, b: int, n: int) -> list[tuple[Tensor, Tensor]] | None:
        slots = self.mask_BL[b].nonzero().squeeze(-1)[:n]
        return self.cache.row(b, slots) if len(slots) == n else None

    def step(self, ids_B: Tensor, pos_B: Tensor) -> Tensor:
        self.mask_BL = torch.cat([self.mask_BL, self.mask_BL.new_ones(len(ids_B), 1)], dim=1)
        out = self.model(
            input_ids=ids_B[:, None],
            attention_mask=self.mask_BL,
            position_ids=pos_B[:, None],
            **cache_kwargs(self.model, self.cache),
            use_cache=True,
        )
        return out.logits[:, -1, :].float()


class HFGenerateGenerator(Generator):
    """The fallback: transformers' ``model.generate`` with its stop-string criterion (slower, fully generic)."""

    def __init__(self, model, tokenizer, max_batch_size: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_ids = _eos_ids(model, tokenizer)

    def runs_on(self, model: object) -> bool:
        return model is self.model

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out: list[Completion | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start : start + self.max_batch_size]
            for i, c in zip(chunk, self._generate_chunk([prompts[i] for i in chunk], params), strict=True):
                out[i] = c
        return [c for c in out if c is not None]

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        t0 = time.perf_counter()
        device = next(self.model.parameters()).device
        pad = _pad_id(self.tokenizer)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (B, L) left-padded
        attn = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, L)
        for r, p in enumerate(prompts):
            input_ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[r, width - len(p) :] = 1
        greedy = params.temperature <= 0
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
        # generate() samples from the global RNG: fork it so a seeded call leaves the caller's stream untouched.
        with eval_mode(self.model), torch.random.fork_rng(devices=[]):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            with placement.autocast(device):
                res = self.model.generate(input_ids=input_ids.to(device), attention_mask=attn.to(device), **kwargs)
        new_BN = res.sequences[:, width:].cpu()  # (B, N) new tokens (padded after each row finished)
        logp_BN = torch.stack(
            [
                torch.log_softmax(lg.float(), -1).gather(-1, new_BN[:, j : j + 1].to(lg.device)).squeeze(-1).cpu()
                for j, lg in enumerate(res.logits)
            ],
            dim=1,
        )
        elapsed = time.perf_counter() - t0
        return [
            finish_row(
                self.tokenizer,
                new_BN[r].tolist(),
                logp_BN[r].tolist(),
                self.eos_ids,
                tuple(params.stop),
                elapsed / new_BN.shape[0],
            )
            for r in range(new_BN.shape[0])
        ]
