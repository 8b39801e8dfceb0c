"""KV-cache pieces for the HF decode loop: an in-place growing cache, a decode cache whose rows share their
context's keys/values, and a store of finished contexts.

``BufferedCache`` is transformers' ``DynamicCache`` whose layers write new keys/values into a pre-allocated buffer
instead of ``torch.cat``-ing the whole cache on every decode step (on a 2-core CPU the concatenations alone cost a
fifth of a 135M model's decode step).

``SharedPrefixCache`` holds the keys/values of each distinct context once (a GRPO group's rows share one prompt)
and only the decoded tokens per row: a decode step reads the prompt's cache once per group, not once per row, and
dropping finished rows copies only their decoded part (see ``DecodeStep``).

``PrefixStore`` keeps, for each context a call finished with, its keys/values (one ``(H, n, D)`` pair per layer),
so the next call (the next turn of a multi-turn rollout, whose prompt is that context plus an observation) only
prefills the new tokens. Entries are only valid for the weights that made them: the generator drops them when the
parameters' autograd version counters move (``load_state_dict``, plain in-place updates), and the rollout engine
resets the generator after every rollout, which also covers fused optimizers (they do not bump the counters).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

_GROW = 64  # spare slots allocated whenever a layer's buffer is (re)built


_LAZY_KV = len(inspect.signature(DynamicLayer.lazy_initialization).parameters) > 2
_CACHE_KWARG: dict[type, str] = {}


def causal_lm(model: nn.Module) -> nn.Module:
    """The ``*ForCausalLM`` inside DDP / PEFT wrappers (PEFT's injected LoRA layers stay in place)."""
    model = getattr(model, "module", model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def cache_kwargs(model: nn.Module, cache: Cache) -> dict[str, Cache]:
    """``cache`` as the keyword ``model``'s forward takes it: ``cache=`` in transformers releases that renamed it
    (``past_key_values`` is deprecated there and goes in 5.40), ``past_key_values=`` in those before. DDP and PEFT
    wrappers are looked through to the transformers model they call."""
    kind = type(causal_lm(model))
    if kind not in _CACHE_KWARG:
        params = inspect.signature(kind.forward).parameters
        _CACHE_KWARG[kind] = "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"
    return {_CACHE_KWARG[kind]: cache}


class _BufferedLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into spare capacity; ``keys``/``values`` are views of the filled part."""

    _kbuf: Tensor | None = None
    _vbuf: Tensor | None = None

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:  # transformers 5 initialises from keys and values, 4.57 from keys alone
            self.lazy_initialization(*((key_states, value_states) if _LAZY_KV else (key_states,)))
        n_old = self.get_seq_length()
        need = n_old + key_states.shape[-2]
        kb = self._kbuf
        # Rebuild when there is no buffer, it is too small, or someone replaced ``keys`` (batch selection, crop).
        if (
            kb is None
            or need > kb.shape[-2]
            or kb.shape[0] != key_states.shape[0]
            or (n_old and self.keys.data_ptr() != kb.data_ptr())
        ):
            B, H, _, D = key_states.shape
            kb = key_states.new_empty(B, H, need + _GROW, D)
            vb = value_states.new_empty(B, H, need + _GROW, value_states.shape[-1])
            if n_old:
                kb[:, :, :n_old] = self.keys
                vb[:, :, :n_old] = self.values
            self._kbuf, self._vbuf = kb, vb
        self._kbuf[:, :, n_old:need] = key_states
        self._vbuf[:, :, n_old:need] = value_states
        self.keys = self._kbuf[:, :, :need]
        self.values = self._vbuf[:, :, :need]
        return self.keys, self.values


class BufferedCache(DynamicCache):
    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=_BufferedLayer)

    @classmethod
    def from_rows(cls, rows: Sequence[list[tuple[Tensor, Tensor]] | None], width: int) -> BufferedCache:
        """A batch cache of ``width`` slots whose row ``i`` holds ``rows[i]`` right-aligned (zeros before it).

        Rows given the same object (a prefix every prompt of a call opens with) are written in one broadcast copy per
        layer: at 512 rows, one copy instead of 512 per layer."""
        cache = cls()
        some = next(r for r in rows if r is not None)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            if r is not None:
                groups.setdefault(id(r), []).append(i)
        device = some[0][0].device
        where = {
            key: slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] + 1 == len(idx) else torch.tensor(idx, device=device)
            for key, idx in groups.items()
        }
        for layer, (k0, v0) in enumerate(some):
            H, _, D = k0.shape
            K = k0.new_zeros(len(rows), H, width, D)
            V = v0.new_zeros(len(rows), H, width, v0.shape[-1])
            for key, idx in groups.items():
                k, v = rows[idx[0]][layer]
                n = k.shape[1]
                K[where[key], :, width - n :] = k
                V[where[key], :, width - n :] = v
            cache.update(K, V, layer)
        return cache

    def row(self, i: int, slots: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Row ``i``'s keys/values at ``slots`` (in order), one ``(H, n, D)`` pair per layer (copies)."""
        return [(lay.keys[i].index_select(1, slots), lay.values[i].index_select(1, slots)) for lay in self.layers]


class SharedPrefixCache:
    """Decode-time cache: ``prefix`` holds one row per distinct context (``U`` rows, left-padded, real slots marked
    by ``prefix_mask_UP``), ``suffix`` the tokens each of the ``B`` rows decoded since (no padding), and ``owner_B``
    (ascending) the context of each row. ``slot_B`` numbers the rows of one context 0, 1, ... (``width`` = the most
    rows any context has), which is how a decode step lays the rows' queries out per context."""

    def __init__(self, prefix: BufferedCache, prefix_mask_UP: Tensor, owner_B: Tensor, common: int = 0) -> None:
        """``common``: the first ``common`` slots hold the same real tokens in every context (an opening every
        prompt shares, prefilled once): a decode step then reads their keys/values once for all rows, not once per
        context (see ``DecodeStep``)."""
        if common and not bool(prefix_mask_UP[:, :common].all()):
            raise ValueError(f"common={common}: the first slots of every context must be real tokens")
        self.prefix = prefix
        self.common = common
        self.prefix_mask_UP = prefix_mask_UP
        bias_UP = torch.zeros(prefix_mask_UP.shape, dtype=prefix.layers[0].keys.dtype, device=owner_B.device)
        bias_UP.masked_fill_(prefix_mask_UP == 0, torch.finfo(bias_UP.dtype).min)
        self._bias_U11P = bias_UP[:, None, None, :]
        self.suffix = BufferedCache()
        self._slots: list[Tensor] | None = None  # each context's real prefix slots, made by the first row() call
        self._set_owners(owner_B)

    def _set_owners(self, owner_B: Tensor) -> None:
        self.owner_B = owner_B
        counts_U = torch.bincount(owner_B, minlength=self.prefix_mask_UP.shape[0])
        self.width = int(counts_U.max())
        self.even = bool((counts_U == self.width).all())  # every context has ``width`` rows: rows = (U, width)
        self.prefix_bias_B11P = self._bias_U11P[owner_B]  # each row's context's padding mask
        self.slot_B = torch.arange(len(owner_B), device=owner_B.device) - (counts_U.cumsum(0) - counts_U)[owner_B]
        self._owners: list[int] | None = None  # owner_B on the host, made by the first row() call

    def select(self, idx_B: Tensor) -> None:
        """Keep the rows at ``idx_B`` (ascending), in that order."""
        self.suffix.batch_select_indices(idx_B)
        self._set_owners(self.owner_B[idx_B])

    def row(self, b: int, n: int) -> list[tuple[Tensor, Tensor]] | None:
        """The first ``n`` real slots of row ``b`` (its context, then its decoded tokens), one ``(H, n, D)`` pair per
        layer (copies); None when the row holds fewer."""
        if self._owners is None or self._slots is None:  # once for all rows: no synchronisation per row
            self._owners = self.owner_B.tolist()
            counts = self.prefix_mask_UP.sum(1).tolist()
            self._slots = list(self.prefix_mask_UP.nonzero()[:, 1].split(counts))  # row-major: by context, ascending
        u = self._owners[b]
        slots = self._slots[u]
        decoded = self.suffix.get_seq_length()
        if len(slots) + decoded < n:
            return None
        m = min(n, len(slots))
        slots = slots[:m]
        if m == n:
            return [(p.keys[u].index_select(1, slots), p.values[u].index_select(1, slots)) for p in self.prefix.layers]
        return [
            (
                torch.cat([p.keys[u].index_select(1, slots), s.keys[b, :, : n - m]], dim=1),
                torch.cat([p.values[u].index_select(1, slots), s.values[b, :, : n - m]], dim=1),
            )
            for p, s in zip(self.prefix.layers, self.suffix.layers, strict=True)
        ]


def weights_version(model: torch.nn.Module) -> int:
    """Changes whenever any parameter is modified in place (optimizer steps, ``load_state_dict``)."""
    return sum(p._version for p in model.parameters())


class PrefixStore:
    """Finished contexts -> their keys/values; lookups find the longest stored context that prefixes a prompt."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._rows: dict[tuple[int, ...], list[tuple[Tensor, Tensor]]] = {}
        self._bytes = 0
        self.version: int | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()
        self._bytes = 0

    def put(self, context: Sequence[int], kv: list[tuple[Tensor, Tensor]]) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if self._bytes + size <= self.max_bytes and len(context) > 0:
            self._rows[tuple(context)] = kv
            self._bytes += size

    def longest_prefix(self, prompt: Sequence[int]) -> tuple[int, list[tuple[Tensor, Tensor]] | None]:
        """``(n, kv)`` of the longest stored context that is a proper prefix of ``prompt`` (``(0, None)`` if none)."""
        for n in sorted({len(k) for k in self._rows if len(k) < len(prompt)}, reverse=True):
            kv = self._rows.get(tuple(prompt[:n]))
            if kv is not None:
                return n, kv
        return 0, None
