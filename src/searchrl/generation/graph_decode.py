"""The decode step replayed from a CUDA graph: fixed buffers for every row's decoded keys/values, one capture per
batch, one replay per token.

On a GPU a decode step of :class:`~searchrl.generation.decode_step.DecodeStep` launches some 40 small kernels a
layer from Python; at a few rows the GPU waits on the launches, not on the weights. Captured once in a CUDA graph,
the whole step is one launch. A graph replays fixed tensors at fixed addresses, so the step's state lives in buffers
sized up front:

- :class:`StaticSuffix` holds each row's decoded keys/values in one ``(B, K, N, D)`` buffer per layer, ``N`` the
  call's ``max_new_tokens``. Every row decodes in lockstep, so the slot written at a step is the same for all rows:
  a device counter ``t``, advanced inside the graph. Attention covers the whole buffer with the unwritten slots
  masked out (a bias computed from ``t`` inside the graph).
- :class:`GraphRows` captures the step on its first call (after one eager warm-up, which also fills autocast's cache
  of bf16 weight copies), then copies each step's token ids and positions into the graph's inputs and replays it.
  The fused q/k/v and gate/up weights of :meth:`DecodeStep.fused_weights` live for the whole decode call, so their
  addresses hold across replays. Dropping finished rows (``select``) shrinks the buffers; the next step captures
  again.

Without CUDA (or with ``capture=False``) the same buffers run eagerly: the tests check that path against the
growing cache on the CPU. A capture that fails falls back to eager steps with a warning, never to an error.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import torch
from torch import Tensor

from searchrl.generation.decode_step import DecodeStep
from searchrl.generation.kvcache import SharedPrefixCache

log = logging.getLogger(__name__)


class StaticSuffix:
    """Drop-in for a :class:`SharedPrefixCache`'s ``suffix``: ``update(k, v, layer)`` writes slot ``t`` and returns
    the layer's whole buffers; ``bias_111N`` masks the slots past ``t``; ``get_seq_length()`` counts the written
    slots (host side, advanced by the caller after each step)."""

    def __init__(self, n_layers: int, B: int, K: int, N: int, D: int, dtype: torch.dtype, device) -> None:
        self.layers = [
            SimpleNamespace(
                keys=torch.zeros(B, K, N, D, dtype=dtype, device=device),
                values=torch.zeros(B, K, N, D, dtype=dtype, device=device),
            )
            for _ in range(n_layers)
        ]
        self.t = torch.zeros(1, dtype=torch.long, device=device)  # the slot this step writes
        self._slots_N = torch.arange(N, device=device)
        self.n = 0
        self.bias_111N: Tensor | None = None

    def begin_step(self) -> None:
        """The step's mask: 0 on slots written so far and the current one, the dtype's minimum after them."""
        dtype = self.layers[0].keys.dtype
        bias = torch.zeros(self._slots_N.shape, dtype=dtype, device=self.t.device)
        self.bias_111N = bias.masked_fill(self._slots_N > self.t, torch.finfo(dtype).min)[None, None, None, :]

    def update(self, key_states: Tensor, value_states: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        lay = self.layers[layer]
        lay.keys.index_copy_(2, self.t, key_states.to(lay.keys.dtype))
        lay.values.index_copy_(2, self.t, value_states.to(lay.values.dtype))
        return lay.keys, lay.values

    def end_step(self) -> None:
        self.t.add_(1)

    def get_seq_length(self) -> int:
        return self.n

    def batch_select_indices(self, idx_B: Tensor) -> None:
        for lay in self.layers:
            lay.keys = lay.keys.index_select(0, idx_B)
            lay.values = lay.values.index_select(0, idx_B)


class GraphRows:
    """Decode state of the graph path (the interface of ``hf._SharedRows``): ``step(ids_B, pos_B) -> logits_BV``,
    ``select(idx_B)`` and ``row(b, n)``. ``capture``: record the step in a CUDA graph (CUDA only)."""

    def __init__(self, step: DecodeStep, cache: SharedPrefixCache, max_new_tokens: int, capture: bool) -> None:
        first = cache.prefix.layers[0].keys  # (U, K, P, D)
        n_layers = len(cache.prefix.layers)
        B = len(cache.owner_B)
        cache.suffix = StaticSuffix(
            n_layers, B, first.shape[1], max_new_tokens, first.shape[3], first.dtype, first.device
        )
        self.decode, self.cache = step, cache
        self.capture = capture and first.is_cuda
        self.graph: torch.cuda.CUDAGraph | None = None
        self.ids_B = self.pos_B = self.out_BV = None
        self.captures = 0
        self.capture_s = 0.0  # host seconds spent warming up and capturing (synchronised)

    def select(self, idx_B: Tensor) -> None:
        self.cache.select(idx_B)
        self.graph = None  # new buffers: capture again at the next step

    def row(self, b: int, n: int) -> list[tuple[Tensor, Tensor]] | None:
        return self.cache.row(b, n)

    def _eager(self, ids_B: Tensor, pos_B: Tensor) -> Tensor:
        suffix = self.cache.suffix
        suffix.begin_step()
        out = self.decode(ids_B, pos_B, self.cache)
        suffix.end_step()
        return out

    def step(self, ids_B: Tensor, pos_B: Tensor) -> Tensor:
        suffix = self.cache.suffix
        if self.capture and self.graph is None:
            self._record(ids_B, pos_B)
        if self.graph is None:
            out = self._eager(ids_B, pos_B)
        else:
            self.ids_B.copy_(ids_B)
            self.pos_B.copy_(pos_B)
            self.graph.replay()
            out = self.out_BV
        suffix.n += 1
        return out

    def _record(self, ids_B: Tensor, pos_B: Tensor) -> None:
        """Warm up on a side stream (restoring the slot counter), then capture one step; on failure, stay eager."""
        suffix = self.cache.suffix
        self.ids_B, self.pos_B = ids_B.clone(), pos_B.clone()
        t0 = suffix.t.clone()
        clock = time.perf_counter()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._eager(self.ids_B, self.pos_B)
            torch.cuda.current_stream().wait_stream(side)
            suffix.t.copy_(t0)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads' CUDA work goes on
                self.out_BV = self._eager(self.ids_B, self.pos_B)
            self.graph = graph
            self.captures += 1
            torch.cuda.synchronize()
            self.capture_s += time.perf_counter() - clock
        except Exception as err:  # noqa: BLE001 - any capture failure: the eager step is always correct
            log.warning("CUDA graph capture of the decode step failed (%s); decoding without graphs", err)
            suffix.t.copy_(t0)
            self.capture, self.graph = False, None
