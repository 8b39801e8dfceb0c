"""One decode step of a Llama-architecture model without transformers' per-call plumbing.

At batch 16 a 135M model's decode step is bound by reading its weights (~12 GB/s on 2 cores); what transformers adds
around the matmuls per step (a 4-D mask built from the 2-D one, ``scaled_dot_product_attention`` with that mask for a
single query, kwargs plumbing through 30 layers) cost about a fifth of the step on this CPU. ``DecodeStep`` runs the
same modules (the norms, projections, MLP and rotary embedding of the model itself, so LoRA adapters and biases
apply), with the attention of one new token written as batched matmuls over a
:class:`~searchrl.generation.kvcache.SharedPrefixCache`: the prompt's keys/values once per distinct context (a GRPO
group of 4 reads them once instead of 4 times), under an additive padding mask built once per call, plus each row's
own decoded tokens. Prefill stays on the model's own forward.

Inside :meth:`DecodeStep.fused_weights` (one decode call) a layer's q/k/v projections run as one matmul over their
concatenated weights, its gate/up projections as another, and the rotary embedding rotates queries and keys in one
pass: per layer 4 matmuls instead of 7 and a third fewer small kernels, which is what a decode step at a few rows
waits on (on a GPU, inside a CUDA graph too). On a GPU every plain projection is fused, in autocast's dtype when
autocast is on, where the copies fit in free memory: they live for the decode call only, below the update's peak.
On a CPU fused are only the projections whose weights autocast would cast and cache anyway (trainable weights of
another dtype than autocast's); weights used as they are (fp32) keep their own modules, whose memory traffic a copy
would only add to. Where autocast would cast, the output and down projections' weights are cast once per call too,
so no step casts a weight (a compiled step cannot use autocast's cache). These copies stand in for autocast's cached
ones (the caller clears that cache after the prefill), and all are dropped at exit, so training never holds them.
Layers with adapters or hooks keep their own modules.

Supported: ``model_type`` llama (SmolLM, Llama 2/3) and qwen2 / mistral without a sliding window. Anything else, a
model whose layout differs, or an FSDP-sharded one, gets ``None`` from :meth:`DecodeStep.build` and the caller uses
``model(...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half

from searchrl.generation.kvcache import SharedPrefixCache, causal_lm

log = logging.getLogger(__name__)

_SUPPORTED = ("llama", "qwen2", "mistral")
_RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")
_MLPS = ("LlamaMLP", "Qwen2MLP", "MistralMLP")


def sharded(model: nn.Module) -> bool:
    """FSDP (1: wrapper modules; 2: DTensor parameters)."""
    if any(type(m).__name__ == "FullyShardedDataParallel" for m in model.modules()):
        return True
    return any(type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor" for p in model.parameters())


class DecodeStep:
    """``step(ids_B, pos_B, cache) -> logits_BV`` (the lm head's dtype): the next-token logits after appending one
    token per row (at position ``pos_B``) to ``cache``, a :class:`~searchrl.generation.kvcache.SharedPrefixCache`
    whose prefix a prefill filled, or any cache with an ``attend(layer, q_BKGD, k_BK1D, v_BK1D) -> out_BKGD`` method
    that stores the new keys/values and attends itself (:class:`~searchrl.generation.continuous.SlotCache`)."""

    def __init__(self, lm: nn.Module) -> None:
        self.lm = lm
        self.body = lm.model
        cfg = lm.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.fused: list[tuple[Tensor | None, ...]] | None = None
        self._compiled = None
        self._resolve()

    def _resolve(self) -> None:
        """(Re)build the per-layer plan from the model's current modules."""
        self._q0 = self.body.layers[0].self_attn.q_proj
        # per layer: the callables of its pieces, resolved once (a plain module's functional form skips
        # ``Module.__call__``, ~4 us per call and ~270 calls per step)
        self.plan = [
            (
                _norm(layer.input_layernorm),
                _linear(layer.self_attn.q_proj),
                _linear(layer.self_attn.k_proj),
                _linear(layer.self_attn.v_proj),
                _linear(layer.self_attn.o_proj),
                _norm(layer.post_attention_layernorm),
                _mlp(layer.mlp),
                layer.self_attn.scaling,
                (_linear(layer.mlp.down_proj), layer.mlp.act_fn) if type(layer.mlp).__name__ in _MLPS else None,
            )
            for layer in self.body.layers
        ]
        # per layer: (norm weights, epsilon) where the layer fits :func:`_layer_core` (plain RMS norms, SiLU MLP)
        self.core = [_core_parts(layer) for layer in self.body.layers]

    def _refresh(self) -> None:
        """Rebuild the plan if the layers' modules were replaced since (e.g. LoRA injected)."""
        if self.body.layers[0].self_attn.q_proj is not self._q0:
            self._resolve()

    @contextmanager
    def fused_weights(self, dtype: torch.dtype | None = None) -> Iterator[None]:
        """Decode steps inside run the q/k/v and gate/up projections that autocast casts (see the module docstring)
        as one matmul each. Enter it where the steps run. ``dtype``: fuse every plain projection, in that dtype
        (tests and benchmarks)."""
        self._refresh()
        device = self._q0.weight.device
        cast = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
        force = dtype is not None
        target = cast or self._q0.weight.dtype
        if dtype is None and (device.type == "cuda" or self.compiled) and self._copies_fit(device, target):
            dtype, force = target, True  # a GPU step waits on launches, not on memory
        self.fused = [_fuse(layer, dtype or cast, force=force) for layer in self.body.layers]
        try:
            yield
        finally:
            self.fused = None

    def _copies_fit(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether copies of all the layers' weights in ``dtype`` (more than the fused ones take) fit twice over in
        the device's free memory: a policy decoding on a small GPU keeps its separate projections rather than run
        out of memory."""
        if device.type != "cuda":
            return True
        need = sum(p.numel() for p in self.body.layers.parameters()) * dtype.itemsize
        return 2 * need <= torch.cuda.mem_get_info(device)[0]

    @classmethod
    def build(cls, model: nn.Module) -> DecodeStep | None:
        if sharded(model):  # FSDP gathers parameters in its own forward hooks, which calling submodules skips
            return None
        lm = causal_lm(model)
        cfg = getattr(lm, "config", None)
        body = getattr(lm, "model", None)
        if cfg is None or body is None or getattr(cfg, "model_type", None) not in _SUPPORTED:
            return None
        windowed = getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
        if windowed and cfg.model_type != "llama":  # a window would drop keys this step keeps
            return None
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if not all(hasattr(body, n) for n in needed) or not hasattr(lm, "lm_head"):
            return None
        layer = body.layers[0]
        parts = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
        attn = getattr(layer, "self_attn", None)
        if not all(hasattr(layer, p) for p in parts) or not all(
            hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")
        ):
            return None
        return cls(lm)

    def compile(self) -> None:
        """Run each decoder layer through ``torch.compile`` from now on (``rollout.compile_decode``): Inductor fuses
        the layer's small kernels (norms, rotary embedding, casts, attention masking and softmax, residual adds)
        around its matmuls. One graph, :func:`_layer_core`, serves every layer, so compiling costs one layer's worth,
        not the whole model's. Same logits up to floating-point rounding. Taken by the layers that fit it (plain RMS
        norms and SiLU MLP, every projection fused: :meth:`fused_weights` fuses all while compiled) in steps over
        fixed buffers (:class:`~searchrl.generation.graph_decode.StaticSuffix`, whose shapes hold for a whole call;
        a cache that grows every step would recompile at every step); other layers and steps run eagerly."""
        # one graph per distinct set of static sizes until dynamo makes them dynamic; the default limit (8) would
        # leave a long run's later shapes (batch, buffers, dtype) eager without a word
        import torch._dynamo

        cfg = torch._dynamo.config
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, name, max(getattr(cfg, name), 64))
        self._compiled = torch.compile(_layer_core)

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def __call__(self, ids_B: Tensor, pos_B: Tensor, cache: SharedPrefixCache) -> Tensor:
        self._refresh()
        fixed = getattr(getattr(cache, "suffix", None), "bias_111N", None) is not None  # graph_decode.StaticSuffix
        return self._step(ids_B, pos_B, cache, self._compiled if fixed else None)

    def _step(self, ids_B: Tensor, pos_B: Tensor, cache: SharedPrefixCache, core=None) -> Tensor:
        B, H, K, D = ids_B.shape[0], self.n_heads, self.n_kv, self.head_dim
        own_attention = getattr(cache, "attend", None)
        G = H // K  # query heads per key/value head
        x_B1C = self.body.embed_tokens(ids_B[:, None])  # (B, 1, C)
        cos, sin = self.body.rotary_emb(x_B1C, pos_B[:, None])
        fused = self.fused or [None] * len(self.plan)
        for i, (norm1, q_proj, k_proj, v_proj, o_proj, norm2, mlp, scaling, down_act) in enumerate(self.plan):
            f, parts = fused[i], self.core[i]
            if core is not None and parts is not None and f is not None and None not in (f[0], f[2], f[3], f[4]):
                suffix, prefix = cache.suffix, cache.prefix.layers[i]
                try:
                    x_B1C = core(
                        x_B1C,
                        cos,
                        sin,
                        parts[0],
                        f[0],
                        f[1],
                        f[3],
                        parts[1],
                        f[2],
                        f[4],
                        prefix.keys,
                        prefix.values,
                        suffix.layers[i].keys,
                        suffix.layers[i].values,
                        suffix.t,
                        cache.prefix_bias_B11P,
                        suffix.bias_111N,
                        cache.owner_B,
                        cache.slot_B,
                        H,
                        K,
                        parts[2],
                        scaling,
                        getattr(cache, "common", 0),
                        cache.width,
                        cache.even,
                    )
                    continue
                except Exception as err:  # noqa: BLE001 - no compiler here (e.g. no Triton): the eager layer is exact
                    log.warning("compiling the decode layer failed (%s); decoding without compilation", err)
                    self._compiled = core = None  # this layer and the rest run eagerly (rewriting the same slot)
            h_B1C = norm1(x_B1C)
            if f is not None and f[0] is not None:  # one matmul for q, k and v; one rotation for q and k
                qkv_BF1D = F.linear(h_B1C, f[0], f[1]).view(B, 1, H + 2 * K, D).transpose(1, 2)
                qk_BF1D = qkv_BF1D[:, : H + K]
                qk_BF1D = qk_BF1D * cos[:, None] + rotate_half(qk_BF1D) * sin[:, None]
                q_BH1D, k_BK1D, v_BK1D = qk_BF1D[:, :H], qk_BF1D[:, H:], qkv_BF1D[:, H + K :]
            else:
                q_BH1D = q_proj(h_B1C).view(B, 1, H, D).transpose(1, 2)
                k_BK1D = k_proj(h_B1C).view(B, 1, K, D).transpose(1, 2)
                v_BK1D = v_proj(h_B1C).view(B, 1, K, D).transpose(1, 2)
                q_BH1D, k_BK1D = apply_rotary_pos_emb(q_BH1D, k_BK1D, cos, sin)
            if own_attention is not None:  # a cache with its own layout (continuous.SlotCache)
                out_BKGD = own_attention(i, q_BH1D.reshape(B, K, G, D) * scaling, k_BK1D, v_BK1D)
            else:
                keys_BKSD, values_BKSD = cache.suffix.update(k_BK1D, v_BK1D, i)
                out_BKGD = _attend(q_BH1D.reshape(B, K, G, D) * scaling, cache, i, keys_BKSD, values_BKSD)
            out_B1E = out_BKGD.reshape(B, 1, H * D)
            x_B1C = x_B1C + (F.linear(out_B1E, f[3]) if f is not None and f[3] is not None else o_proj(out_B1E))
            if f is not None and f[2] is not None:  # one matmul for gate and up
                gate_B1I, up_B1I = F.linear(norm2(x_B1C), f[2]).chunk(2, dim=-1)
                act_B1I = down_act[1](gate_B1I) * up_B1I
                x_B1C = x_B1C + (F.linear(act_B1I, f[4]) if f[4] is not None else down_act[0](act_B1I))
            else:
                x_B1C = x_B1C + mlp(norm2(x_B1C))
        h_BC = self.body.norm(x_B1C)[:, -1, :]
        head = self.lm.lm_head
        if type(head) is nn.Linear and head.bias is None and h_BC.device.type == "cpu":
            # (V, C) @ (C, B): MKL's kernel for this layout is 1.1-1.8x faster than x @ W^T at B = 8..16 rows (the
            # batch shrinks as rows finish), with the same fp32 accumulation. On a GPU the logits stay (B, V)
            # row-major: a transposed (V, B) result costs a strided copy of the whole (B, V) block per step.
            return torch.mm(head.weight, h_BC.t().contiguous()).t().float()
        return head(h_BC)  # bf16 under autocast: the sampler reads it as it is (a float32 copy is 0.3 GB at B = 512)


def _plain(m: nn.Module) -> bool:
    """No hooks and no per-instance ``forward`` (accelerate's offload hooks replace it)."""
    return not (m._forward_hooks or m._forward_pre_hooks or "forward" in m.__dict__ or hasattr(m, "_hf_hook"))


def _core_parts(layer: nn.Module) -> tuple[Tensor, Tensor, float] | None:
    """``(input norm weight, post-attention norm weight, epsilon)`` of a layer :func:`_layer_core` can run: plain RMS
    norms of one epsilon and a plain SiLU-gated MLP (its projections are checked where they are fused)."""
    n1, n2, mlp = layer.input_layernorm, layer.post_attention_layernorm, layer.mlp
    norms = all(type(n).__name__ in _RMS_NORMS and _plain(n) and hasattr(n, "variance_epsilon") for n in (n1, n2))
    if not norms or n1.variance_epsilon != n2.variance_epsilon:
        return None
    act = getattr(mlp, "act_fn", None)
    if type(mlp).__name__ not in _MLPS or not _plain(mlp) or type(act).__name__ not in ("SiLU", "SiLUActivation"):
        return None
    return n1.weight, n2.weight, float(n1.variance_epsilon)


def _linear(m: nn.Module):
    if type(m) is nn.Linear and _plain(m):
        return lambda x: F.linear(x, m.weight, m.bias)
    return m  # LoRA layers and anything hooked run their own forward


def _norm(m: nn.Module):
    if type(m).__name__ in _RMS_NORMS and _plain(m) and hasattr(m, "variance_epsilon"):
        return lambda x: F.rms_norm(x, (x.shape[-1],), m.weight, m.variance_epsilon)
    return m


def _fuse(layer: nn.Module, dtype: torch.dtype | None, force: bool = False) -> tuple[Tensor | None, ...]:
    """``(w_qkv, b_qkv, w_gate_up, w_o, w_down)`` of one layer in ``dtype``, each ``None`` where its projections are
    not all plain ``nn.Linear`` (adapters, hooks), their biases differ in kind, or (unless ``force``) autocast would
    not cache their weights in ``dtype`` (no autocast, the same dtype already, frozen weights). ``w_o`` and ``w_down``
    are the output and down projections' weights in ``dtype`` (bias-free ones): the step then casts nothing per token,
    which a compiled step (whose graph cannot use autocast's cache) would otherwise do."""

    def cat(ws: list[Tensor]) -> Tensor:
        return torch.cat([w.detach().to(dtype) for w in ws])

    def fusable(ms) -> bool:
        if not all(type(m) is nn.Linear and _plain(m) for m in ms):
            return False
        cached = dtype is not None and all(m.weight.requires_grad and m.weight.dtype != dtype for m in ms)
        return force or cached

    def alone(m: nn.Module) -> Tensor | None:
        return m.weight.detach().to(dtype) if fusable((m,)) and m.bias is None else None

    attn, mlp = layer.self_attn, layer.mlp
    qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
    w_qkv = b_qkv = w_gu = w_down = None
    if fusable(qkv):
        biases = [m.bias for m in qkv]
        if all(b is None for b in biases) or all(b is not None for b in biases):
            w_qkv = cat([m.weight for m in qkv])
            b_qkv = None if biases[0] is None else cat(biases)
    if type(mlp).__name__ in _MLPS and _plain(mlp):
        gu = (mlp.gate_proj, mlp.up_proj)
        if fusable(gu) and all(m.bias is None for m in gu):
            w_gu = cat([m.weight for m in gu])
            w_down = alone(mlp.down_proj)
    return w_qkv, b_qkv, w_gu, alone(attn.o_proj), w_down


def _mlp(m: nn.Module):
    """SwiGLU ``down(act(gate(x)) * up(x))`` with each projection resolved like :func:`_linear`."""
    if type(m).__name__ not in _MLPS or not _plain(m):
        return m
    gate, up, down, act = _linear(m.gate_proj), _linear(m.up_proj), _linear(m.down_proj), m.act_fn
    return lambda x: down(act(gate(x)) * up(x))


def _attend(q_BKGD: Tensor, cache: SharedPrefixCache, i: int, keys_BKSD: Tensor, values_BKSD: Tensor) -> Tensor:
    """Softmax attention of one (pre-scaled) query per row over its context's shared keys/values and its own decoded
    ones (:func:`_attend_core` on layer ``i`` of ``cache``)."""
    prefix = cache.prefix.layers[i]
    return _attend_core(
        q_BKGD,
        prefix.keys,
        prefix.values,
        keys_BKSD,
        values_BKSD,
        cache.prefix_bias_B11P,
        getattr(cache.suffix, "bias_111N", None),
        cache.owner_B,
        cache.slot_B,
        getattr(cache, "common", 0),
        cache.width,
        cache.even,
    )


def _attend_core(
    q_BKGD: Tensor,
    keys_UKLD: Tensor,
    values_UKLD: Tensor,
    keys_BKSD: Tensor,
    values_BKSD: Tensor,
    prefix_bias_B11L: Tensor,
    suffix_bias_111S: Tensor | None,
    own_B: Tensor,
    slot_B: Tensor,
    C: int,
    M: int,
    even: bool,
) -> Tensor:
    """The context part runs once per context: the queries of its rows (``M`` slots each; ``own_B`` / ``slot_B``
    place the rows unless ``even``, rows already in context order) are laid out side by side, ``(U, K, M * G, D)``
    against ``(U, K, P, D)`` keys, so the prompt's cache is read once per group, not once per row. An opening common
    to every context (the first ``C`` slots) is read once for all rows: one ``(K, B * G, D)`` against ``(K, C, D)``
    product, whose scores join the same softmax. ``suffix_bias_111S``: the mask of a fixed buffer of decoded tokens
    (:class:`~searchrl.generation.graph_decode.StaticSuffix`), None when all are real."""
    B, K, G, D = q_BKGD.shape
    keys_UKPD, values_UKPD = keys_UKLD[:, :, C:], values_UKLD[:, :, C:]
    U, P = keys_UKPD.shape[0], keys_UKPD.shape[2]
    if even:  # the rows are the contexts' rows in order: a view, no scatter
        q_UMKGD = q_BKGD.view(U, M, K, G, D)
    else:
        q_UMKGD = q_BKGD.new_zeros(U, M, K, G, D)
        q_UMKGD[own_B, slot_B] = q_BKGD
    q_UKmD = q_UMKGD.permute(0, 2, 1, 3, 4).reshape(U, K, M * G, D)  # m = (row slot, query head in the group)
    s_UMKGP = torch.matmul(q_UKmD, keys_UKPD.transpose(-1, -2)).view(U, K, M, G, P).permute(0, 2, 1, 3, 4)
    bias_B11P = prefix_bias_B11L[..., C:] if C else prefix_bias_B11L
    s_BKGP = (s_UMKGP.reshape(B, K, G, P) if even else s_UMKGP[own_B, slot_B]) + bias_B11P
    s_BKGS = torch.matmul(q_BKGD, keys_BKSD.transpose(-1, -2))  # decoded tokens: all real, no mask...
    if suffix_bias_111S is not None:  # ...except in a fixed buffer: slots past the current one
        s_BKGS = s_BKGS + suffix_bias_111S
    scores, sizes = [s_BKGP, s_BKGS], [P, s_BKGS.shape[-1]]
    if C:  # the common opening (every context's first C slots, all real): every row's queries against one copy
        q_KmD = q_BKGD.permute(1, 0, 2, 3).reshape(K, B * G, D)
        s_BKGC = torch.matmul(q_KmD, keys_UKLD[0, :, :C].transpose(-1, -2)).view(K, B, G, C).permute(1, 0, 2, 3)
        scores, sizes = [s_BKGC, *scores], [C, *sizes]
    *p_common, p_BKGP, p_BKGS = torch.softmax(torch.cat(scores, dim=-1), dim=-1).split(sizes, dim=-1)
    if even:
        p_UMKGP = p_BKGP.view(U, M, K, G, P)
    else:
        p_UMKGP = p_BKGP.new_zeros(U, M, K, G, P)
        p_UMKGP[own_B, slot_B] = p_BKGP
    o_UKmD = torch.matmul(p_UMKGP.permute(0, 2, 1, 3, 4).reshape(U, K, M * G, P), values_UKPD)
    o_UMKGD = o_UKmD.view(U, K, M, G, D).permute(0, 2, 1, 3, 4)
    o_BKGD = o_UMKGD.reshape(B, K, G, D) if even else o_UMKGD[own_B, slot_B]
    o_BKGD = o_BKGD + torch.matmul(p_BKGS, values_BKSD)
    if C:
        o_KmD = torch.matmul(p_common[0].permute(1, 0, 2, 3).reshape(K, B * G, C), values_UKLD[0, :, :C])
        o_BKGD = o_BKGD + o_KmD.view(K, B, G, D).permute(1, 0, 2, 3)
    return o_BKGD


def _layer_core(
    x_B1C: Tensor,
    cos_B1D: Tensor,
    sin_B1D: Tensor,
    norm1_C: Tensor,
    w_qkv: Tensor,
    b_qkv: Tensor | None,
    w_o: Tensor,
    norm2_C: Tensor,
    w_gu: Tensor,
    w_down: Tensor,
    keys_UKLD: Tensor,
    values_UKLD: Tensor,
    keys_BKND: Tensor,
    values_BKND: Tensor,
    t_1: Tensor,
    prefix_bias_B11L: Tensor,
    suffix_bias_111N: Tensor,
    own_B: Tensor,
    slot_B: Tensor,
    H: int,
    K: int,
    eps: float,
    scaling: float,
    C: int,
    M: int,
    even: bool,
) -> Tensor:
    """One fully fused decoder layer (RMS norms, SiLU MLP, fused projections) over a fixed buffer of decoded tokens,
    written in tensors and numbers only: ``torch.compile`` traces it once and every layer reuses that graph
    (:meth:`DecodeStep.compile`). The same arithmetic as the eager layer of :meth:`DecodeStep._step`."""
    B, D = x_B1C.shape[0], keys_UKLD.shape[-1]
    h_B1C = F.rms_norm(x_B1C, (x_B1C.shape[-1],), norm1_C, eps)
    qkv_BF1D = F.linear(h_B1C, w_qkv, b_qkv).view(B, 1, H + 2 * K, D).transpose(1, 2)
    qk_BF1D = qkv_BF1D[:, : H + K]
    qk_BF1D = qk_BF1D * cos_B1D[:, None] + rotate_half(qk_BF1D) * sin_B1D[:, None]
    keys_BKND.index_copy_(2, t_1, qk_BF1D[:, H:].to(keys_BKND.dtype))
    values_BKND.index_copy_(2, t_1, qkv_BF1D[:, H + K :].to(values_BKND.dtype))
    q_BKGD = qk_BF1D[:, :H].reshape(B, K, H // K, D) * scaling
    out_BKGD = _attend_core(
        q_BKGD,
        keys_UKLD,
        values_UKLD,
        keys_BKND,
        values_BKND,
        prefix_bias_B11L,
        suffix_bias_111N,
        own_B,
        slot_B,
        C,
        M,
        even,
    )
    x_B1C = x_B1C + F.linear(out_BKGD.reshape(B, 1, H * D), w_o)
    gate_B1I, up_B1I = F.linear(F.rms_norm(x_B1C, (x_B1C.shape[-1],), norm2_C, eps), w_gu).chunk(2, dim=-1)
    return x_B1C + F.linear(F.silu(gate_B1I) * up_B1I, w_down)
