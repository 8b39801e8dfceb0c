"""Continuous batching for :class:`~searchrl.generation.hf.HFGenerator`: one decode loop for a whole rollout.

The call-at-a-time loop decodes a turn for every row together and returns when the last row stops; rows that stopped
early wait, and nothing decodes while the caller retrieves. Here a row leaves the batch the step it finishes a
segment (one turn): the caller is told at once (``scheduler.finished``) and may hand it back later, its context grown
by an observation (``scheduler.ready``, asked between decode steps), while the other rows keep decoding.

- :class:`SlotCache` keeps each live row's keys/values in its own slot of one ``(S, K, L, D)`` buffer per layer,
  left-aligned (row ``b``'s token ``j`` at ``[b, :, j]``), so rows of any lengths share a decode step: each step
  writes one key/value per row at the row's own length and attends over the first ``max(length) + 1`` slots under a
  mask of each row's length. Rows that leave are replaced by the last rows (a copy of those rows only); the buffers
  grow when an admitted row needs more room, never during a step.
- A row that may come back keeps a copy of its keys/values (its context and every sampled token but the last, like
  :class:`~searchrl.generation.kvcache.PrefixStore`); when it re-enters, only the tokens after that prefix (the last
  sampled token and the observation) are prefilled. Rows admitted together are prefilled in one forward (distinct
  contexts once: a GRPO group's first turn shares one prefill, then each row gets its own copy of the keys/values).
- Sampling draws from each row's own stream (``Segment.seed``, :func:`~searchrl.generation.sampling.row_uniforms`),
  so a row's tokens do not depend on which rows share its steps.

Decode steps run :class:`~searchrl.generation.decode_step.DecodeStep` eagerly: no CUDA graphs here (a graph replays
fixed shapes, and the batch changes from step to step).
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import Tensor

from searchrl import device as placement
from searchrl.generation.base import ContinuousScheduler, SamplingParams, Segment
from searchrl.generation.sampling import finish_row, has_stop, row_uniforms, sample_tokens
from searchrl.utils import eval_mode

_GROW = 64  # slots are allocated in multiples of this many tokens


class SlotCache:
    """Live rows' keys/values, one slot per row (see the module docstring); ``lens[b]``: tokens stored for row
    ``b``. A decode step: :meth:`begin_step`, the model's step (which calls :meth:`attend` per layer),
    :meth:`end_step`."""

    def __init__(self, n_layers: int, n_kv: int, head_dim: int, dtype: torch.dtype, device, max_rows: int) -> None:
        self.n_layers, self.n_kv, self.head_dim = n_layers, n_kv, head_dim
        self.dtype, self.device, self.max_rows = dtype, device, max_rows
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.lens: list[int] = []
        self._step: tuple[Tensor, Tensor, Tensor, int] | None = None  # (rows, write slots, mask bias, width)

    def __len__(self) -> int:
        return len(self.lens)

    def _capacity(self) -> tuple[int, int]:
        return (self.keys[0].shape[0], self.keys[0].shape[2]) if self.keys else (0, 0)

    def _ensure(self, rows: int, length: int) -> None:
        """Buffers of at least ``rows`` slots of ``length`` tokens, the stored rows copied over."""
        S, L = self._capacity()
        if rows <= S and length <= L:
            return
        S2 = S if rows <= S else min(max(rows, 2 * S), max(self.max_rows, rows))
        L2 = L if length <= L else -(-max(length, L + L // 4) // _GROW) * _GROW
        B, used = len(self.lens), max(self.lens, default=0)
        for store in (self.keys, self.values):
            for i in range(self.n_layers):
                new = torch.zeros(S2, self.n_kv, L2, self.head_dim, dtype=self.dtype, device=self.device)
                if store and B:
                    new[:B, :, :used] = store[i][:B, :, :used]
                if len(store) < self.n_layers:
                    store.append(new)
                else:
                    store[i] = new

    def add(self, rows: list[list[tuple[Tensor, Tensor]]], room: list[int]) -> None:
        """Append rows: each row's keys/values (one ``(K, n, D)`` pair per layer) and the tokens it may still add."""
        lengths = [r[0][0].shape[1] for r in rows]
        need = max(n + extra for n, extra in zip(lengths, room, strict=True))
        self._ensure(len(self.lens) + len(rows), max(need, max(self.lens, default=0)))
        for row, n in zip(rows, lengths, strict=True):
            b = len(self.lens)
            for i, (k, v) in enumerate(row):
                self.keys[i][b, :, :n] = k.to(self.dtype)
                self.values[i][b, :, :n] = v.to(self.dtype)
            self.lens.append(n)

    def row(self, b: int, n: int) -> list[tuple[Tensor, Tensor]]:
        """Row ``b``'s first ``n`` keys/values, one ``(K, n, D)`` pair per layer (copies)."""
        return [(k[b, :, :n].clone(), v[b, :, :n].clone()) for k, v in zip(self.keys, self.values, strict=True)]

    def compact(self, keep: list[int]) -> list[int]:
        """Keep the rows at positions ``keep`` (ascending): the kept rows past the end of the new batch move into
        the gaps. Returns the old position of each new one."""
        n = len(keep)
        kept = set(keep)
        holes = [p for p in range(n) if p not in kept]
        movers = [p for p in keep if p >= n]
        order = list(range(n))
        for h, m in zip(holes, movers, strict=True):
            order[h] = m
        if holes:
            dst = torch.tensor(holes, device=self.device)
            src = torch.tensor(movers, device=self.device)
            used = max(self.lens[m] for m in movers)
            for store in (self.keys, self.values):
                for buf in store:
                    buf[dst, :, :used] = buf[src, :, :used]
        self.lens = [self.lens[o] for o in order]
        return order

    def begin_step(self) -> Tensor:
        """Set up one decode step; returns each row's position (= its stored length) on the device."""
        at_B = torch.tensor(self.lens, device=self.device)
        width = max(self.lens) + 1
        slots_L = torch.arange(width, device=self.device)
        bias_BL = torch.zeros(len(self.lens), width, dtype=self.dtype, device=self.device)
        bias_BL.masked_fill_(slots_L[None, :] > at_B[:, None], torch.finfo(self.dtype).min)
        rows_B = torch.arange(len(self.lens), device=self.device)
        self._step = (rows_B, at_B, bias_BL[:, None, None, :], width)
        return at_B

    def attend(self, layer: int, q_BKGD: Tensor, k_BK1D: Tensor, v_BK1D: Tensor) -> Tensor:
        """Store each row's new key/value at its length, then attend its (pre-scaled) query over its slots."""
        rows_B, at_B, bias_B11W, width = self._step
        B = len(rows_B)
        kb, vb = self.keys[layer], self.values[layer]
        kb[rows_B, :, at_B] = k_BK1D[:, :, 0].to(self.dtype)
        vb[rows_B, :, at_B] = v_BK1D[:, :, 0].to(self.dtype)
        s_BKGW = torch.matmul(q_BKGD, kb[:B, :, :width].transpose(-1, -2)) + bias_B11W
        return torch.matmul(torch.softmax(s_BKGW, dim=-1), vb[:B, :, :width])

    def end_step(self) -> None:
        self.lens = [n + 1 for n in self.lens]
        self._step = None


@dataclass
class _Row:
    """A live row: its segment's context, budget and stream; what it sampled so far."""

    key: int
    context: list[int]
    budget: int
    seed: int
    toks: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    tail: str = ""
    stopped: bool = False
    t0: float = field(default_factory=time.perf_counter)


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Loop:
    def __init__(self, gen, scheduler: ContinuousScheduler, params: SamplingParams, device) -> None:
        self.gen, self.scheduler, self.params, self.device = gen, scheduler, params, device
        self.stops = tuple(params.stop)
        self.tail_len = max((len(s) for s in self.stops), default=1) - 1
        self.queue: deque[Segment] = deque()
        self.rows: list[_Row] = []  # batch position -> row
        self.slots: SlotCache | None = None
        self.kept: dict[int, tuple[list[int], list[tuple[Tensor, Tensor]], int]] = {}  # key -> (tokens, kv, bytes)
        self.kept_bytes = 0
        self.next_B: Tensor | None = None  # the tokens sampled last, still to be fed (one per live row)
        self.rng = random.Random()

    def run(self) -> None:
        while True:
            new = self.scheduler.ready(wait=not self.rows and not self.queue)
            self.queue.extend(new or ())
            parts = []
            if self.rows:
                parts.append(self._step())
            admitted = self._admit()
            if admitted is not None:
                parts.append(admitted)
            if not self.rows:
                if new is None and not self.queue:
                    return
                continue
            self._sample(torch.cat(parts) if len(parts) > 1 else parts[0])

    # ------------------------------------------------------------------------------------------- decoding
    def _step(self) -> Tensor:
        pos_B = self.slots.begin_step()
        logits_BV = self.gen.step(self.next_B, pos_B, self.slots)
        self.slots.end_step()
        return logits_BV

    def _admit(self) -> Tensor | None:
        """Prefill the queued segments the batch has room for (after each one's kept prefix); their logits."""
        gen = self.gen
        take: list[Segment] = []
        while self.queue and len(self.rows) + len(take) < gen.max_batch_size:
            seg = self.queue.popleft()
            if seg.max_new_tokens <= 0:  # nothing to decode: an empty completion at once
                self._drop_kept(seg.key)
                self.scheduler.finished(seg.key, finish_row(gen.tokenizer, [], [], gen.eos_ids, self.stops, 0.0))
                continue
            take.append(seg)
        if not take:
            return None
        groups: dict[tuple[int, ...], list[int]] = {}
        hits: dict[tuple[int, ...], tuple[int, list | None]] = {}
        for j, seg in enumerate(take):
            ctx = tuple(seg.context)
            groups.setdefault(ctx, []).append(j)
            hit = self._kept_prefix(seg)
            if hit[0] > hits.get(ctx, (0, None))[0]:
                hits[ctx] = hit
        uniq = list(groups)
        logits_UV, cache, mask_UL, _ = gen.prefill(uniq, [hits.get(u, (0, None)) for u in uniq], self.device)
        owner = [0] * len(take)
        for u, ctx in enumerate(uniq):
            for j in groups[ctx]:
                owner[j] = u
        gen.stats["dedup_tokens"] += sum(len(s.context) for s in take) - sum(len(u) for u in uniq)
        kv_U = [cache.row(u, mask_UL[u].nonzero().squeeze(-1)) for u in range(len(uniq))]
        if self.slots is None:
            k0 = cache.layers[0].keys  # (U, K, P + S, D)
            shape = (len(cache.layers), k0.shape[1], k0.shape[3])
            self.slots = SlotCache(*shape, k0.dtype, self.device, gen.max_batch_size)
        self.slots.add([kv_U[owner[j]] for j in range(len(take))], [s.max_new_tokens for s in take])
        for seg in take:
            seed = seg.seed if seg.seed is not None else self.rng.getrandbits(63)
            self.rows.append(_Row(seg.key, list(seg.context), seg.max_new_tokens, seed))
        return logits_UV.index_select(0, torch.tensor(owner, device=self.device))

    def _kept_prefix(self, seg: Segment) -> tuple[int, list[tuple[Tensor, Tensor]] | None]:
        """The longest prefix of the segment's context whose keys/values the row kept (at least one token left to
        prefill)."""
        entry = self._drop_kept(seg.key)
        if entry is None:
            return 0, None
        tokens, kv = entry
        m = min(_common(tokens, seg.context), len(seg.context) - 1)
        return (m, [(k[:, :m], v[:, :m]) for k, v in kv]) if m > 0 else (0, None)

    def _drop_kept(self, key: int):
        entry = self.kept.pop(key, None)
        if entry is None:
            return None
        self.kept_bytes -= entry[2]
        return entry[0], entry[1]

    def _sample(self, logits_BV: Tensor) -> None:
        gen, params, rows = self.gen, self.params, self.rows
        u_B = None
        if params.temperature > 0:
            u_B = row_uniforms([r.seed for r in rows], [len(r.toks) for r in rows], self.device)
        next_B, lp_B = sample_tokens(logits_BV, params, u_B)
        done = []
        for b, (tok, lp) in enumerate(zip(next_B.tolist(), lp_B.tolist(), strict=True)):
            r = rows[b]
            r.toks.append(tok)
            r.lps.append(lp)
            if tok in gen.eos_ids:
                done.append(b)
                continue
            if self.stops:
                text = r.tail + gen._piece(tok)
                if any(s in text for s in self.stops) and has_stop(gen.tokenizer, r.toks, self.stops):
                    r.stopped = True
                r.tail = text[-self.tail_len :] if self.tail_len else ""
            if r.stopped or len(r.toks) >= r.budget:
                done.append(b)
        gen.stats["decode_row_steps"] += len(rows)
        gen.stats["decode_steps"] += 1
        for b in done:
            self._finish(b)
        if done:
            finished = set(done)
            order = self.slots.compact([b for b in range(len(rows)) if b not in finished])
            self.rows = [rows[o] for o in order]
            next_B = next_B[torch.tensor(order, device=self.device, dtype=torch.long)]
        self.next_B = next_B

    def _finish(self, b: int) -> None:
        gen, r = self.gen, self.rows[b]
        comp = finish_row(gen.tokenizer, r.toks, r.lps, gen.eos_ids, self.stops, 0.0, r.stopped)
        comp.timings["generate_s"] = time.perf_counter() - r.t0
        if not self.scheduler.finished(r.key, comp) or not gen.reuse_prefixes:
            return
        n = len(r.context) + len(r.toks) - 1  # the last sampled token's keys/values were never computed
        kv = self.slots.row(b, n)
        size = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
        if self.kept_bytes + size <= gen.store.max_bytes:
            self.kept[r.key] = (r.context + r.toks[:-1], kv, size)
            self.kept_bytes += size


def run_continuous(gen, scheduler: ContinuousScheduler, params: SamplingParams) -> None:
    """The loop of :meth:`HFGenerator.decode_continuous` (the model in eval mode, under the run's autocast)."""
    model = gen.model
    device = placement.model_device(model)
    with eval_mode(model), placement.autocast(device):
        _Loop(gen, scheduler, params, device).run()
