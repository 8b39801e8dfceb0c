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
waits on (on a GPU, inside a CUDA graph too). Fused are the projections whose weights autocast would cast and cache
anyway (trainable weights of another dtype than autocast's, i.e. fp32 master weights under bf16 autocast): their
concatenated copy in autocast's dtype stands in for autocast's cached copies (the caller clears that cache after the
prefill), so decoding holds no more memory than before, and the copies are dropped at exit, so training never holds
them. Weights used as they are (fp32 on a CPU, a frozen bf16 base under LoRA) and layers with adapters or hooks
keep their own modules.

Supported: ``model_type`` llama (SmolLM, Llama 2/3) and qwen2 / mistral without a sliding window. Anything else, a
model whose layout differs, or an FSDP-sharded one, gets ``None`` from :meth:`DecodeStep.build` and the caller uses
``model(...)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half

from searchrl.generation.kvcache import SharedPrefixCache

_SUPPORTED = ("llama", "qwen2", "mistral")
_RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")
_MLPS = ("LlamaMLP", "Qwen2MLP", "MistralMLP")


def _causal_lm(model: nn.Module) -> nn.Module:
    """The ``*ForCausalLM`` inside DDP / PEFT wrappers (PEFT's injected LoRA layers stay in place)."""
    model = getattr(model, "module", model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def sharded(model: nn.Module) -> bool:
    """FSDP (1: wrapper modules; 2: DTensor parameters)."""
    if any(type(m).__name__ == "FullyShardedDataParallel" for m in model.modules()):
        return True
    return any(type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor" for p in model.parameters())


class DecodeStep:
    """``step(ids_B, pos_B, cache) -> logits_BV`` (float32): the next-token logits after appending one token per row
    (at position ``pos_B``) to ``cache``, a :class:`~searchrl.generation.kvcache.SharedPrefixCache` whose prefix
    a prefill filled, or any cache with an ``attend(layer, q_BKGD, k_BK1D, v_BK1D) -> out_BKGD`` method that stores
    the new keys/values and attends itself (:class:`~searchrl.generation.continuous.SlotCache`)."""

    def __init__(self, lm: nn.Module) -> None:
        self.lm = lm
        self.body = lm.model
        cfg = lm.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.fused: list[tuple[Tensor, Tensor | None, Tensor | None] | None] | None = None
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
        self.fused = [_fuse(layer, dtype or cast, force=dtype is not None) for layer in self.body.layers]
        try:
            yield
        finally:
            self.fused = None

    @classmethod
    def build(cls, model: nn.Module) -> DecodeStep | None:
        if sharded(model):  # FSDP gathers parameters in its own forward hooks, which calling submodules skips
            return None
        lm = _causal_lm(model)
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
        """Run the step through ``torch.compile`` from now on (``rollout.compile_decode``): Inductor fuses the
        step's elementwise kernels. Same logits up to floating-point rounding. Only steps over fixed buffers
        (:class:`~searchrl.generation.graph_decode.StaticSuffix`, whose shapes hold for a whole call) take the
        compiled path; a cache that grows every step would recompile at every step."""
        self._compiled = torch.compile(self._step)

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def __call__(self, ids_B: Tensor, pos_B: Tensor, cache: SharedPrefixCache) -> Tensor:
        self._refresh()
        fixed = getattr(getattr(cache, "suffix", None), "bias_111N", None) is not None  # graph_decode.StaticSuffix
        return (self._compiled if self._compiled is not None and fixed else self._step)(ids_B, pos_B, cache)

    def _step(self, ids_B: Tensor, pos_B: Tensor, cache: SharedPrefixCache) -> Tensor:
        B, H, K, D = ids_B.shape[0], self.n_heads, self.n_kv, self.head_dim
        own_attention = getattr(cache, "attend", None)
        G = H // K  # query heads per key/value head
        x_B1C = self.body.embed_tokens(ids_B[:, None])  # (B, 1, C)
        cos, sin = self.body.rotary_emb(x_B1C, pos_B[:, None])
        fused = self.fused or [None] * len(self.plan)
        for i, (norm1, q_proj, k_proj, v_proj, o_proj, norm2, mlp, scaling, down_act) in enumerate(self.plan):
            h_B1C = norm1(x_B1C)
            f = fused[i]
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
            x_B1C = x_B1C + o_proj(out_BKGD.reshape(B, 1, H * D))
            if f is not None and f[2] is not None:  # one matmul for gate and up
                gate_B1I, up_B1I = F.linear(norm2(x_B1C), f[2]).chunk(2, dim=-1)
                x_B1C = x_B1C + down_act[0](down_act[1](gate_B1I) * up_B1I)
            else:
                x_B1C = x_B1C + mlp(norm2(x_B1C))
        h_BC = self.body.norm(x_B1C)[:, -1, :]
        head = self.lm.lm_head
        if type(head) is nn.Linear and head.bias is None and h_BC.device.type == "cpu":
            # (V, C) @ (C, B): MKL's kernel for this layout is 1.1-1.8x faster than x @ W^T at B = 8..16 rows (the
            # batch shrinks as rows finish), with the same fp32 accumulation. On a GPU the logits stay (B, V)
            # row-major: a transposed (V, B) result costs a strided copy of the whole (B, V) block per step.
            return torch.mm(head.weight, h_BC.t().contiguous()).t().float()
        return head(h_BC).float()


def _plain(m: nn.Module) -> bool:
    """No hooks and no per-instance ``forward`` (accelerate's offload hooks replace it)."""
    return not (m._forward_hooks or m._forward_pre_hooks or "forward" in m.__dict__ or hasattr(m, "_hf_hook"))


def _linear(m: nn.Module):
    if type(m) is nn.Linear and _plain(m):
        return lambda x: F.linear(x, m.weight, m.bias)
    return m  # LoRA layers and anything hooked run their own forward


def _norm(m: nn.Module):
    if type(m).__name__ in _RMS_NORMS and _plain(m) and hasattr(m, "variance_epsilon"):
        return lambda x: F.rms_norm(x, (x.shape[-1],), m.weight, m.variance_epsilon)
    return m


def _fuse(
    layer: nn.Module, dtype: torch.dtype | None, force: bool = False
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """``(w_qkv, b_qkv, w_gate_up)`` of one layer in ``dtype``, each ``None`` where its projections are not all plain
    ``nn.Linear`` (adapters, hooks), their biases differ in kind, or (unless ``force``) autocast would not cache
    their weights in ``dtype`` (no autocast, the same dtype already, frozen weights)."""

    def cat(ws: list[Tensor]) -> Tensor:
        return torch.cat([w.detach().to(dtype) for w in ws])

    def fusable(ms) -> bool:
        if not all(type(m) is nn.Linear and _plain(m) for m in ms):
            return False
        cached = dtype is not None and all(m.weight.requires_grad and m.weight.dtype != dtype for m in ms)
        return force or cached

    attn, mlp = layer.self_attn, layer.mlp
    qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
    w_qkv = b_qkv = w_gu = None
    if fusable(qkv):
        biases = [m.bias for m in qkv]
        if all(b is None for b in biases) or all(b is not None for b in biases):
            w_qkv = cat([m.weight for m in qkv])
            b_qkv = None if biases[0] is None else cat(biases)
    if type(mlp).__name__ in _MLPS and _plain(mlp):
        gu = (mlp.gate_proj, mlp.up_proj)
        if fusable(gu) and all(m.bias is None for m in gu):
            w_gu = cat([m.weight for m in gu])
    return w_qkv, b_qkv, w_gu


def _mlp(m: nn.Module):
    """SwiGLU ``down(act(gate(x)) * up(x))`` with each projection resolved like :func:`_linear`."""
    if type(m).__name__ not in _MLPS or not _plain(m):
        return m
    gate, up, down, act = _linear(m.gate_proj), _linear(m.up_proj), _linear(m.down_proj), m.act_fn
    return lambda x: down(act(gate(x)) * up(x))


def _attend(q_BKGD: Tensor, cache: SharedPrefixCache, i: int, keys_BKSD: Tensor, values_BKSD: Tensor) -> Tensor:
    """Softmax attention of one (pre-scaled) query per row over its context's shared keys/values and its own decoded
    ones. The context part runs once per context: the queries of its rows are laid out side by side, ``(U, K,
    width * G, D)`` against ``(U, K, P, D)`` keys, so the prompt's cache is read once per group, not once per row.
    An opening common to every context (``cache.common`` slots) is read once for all rows: one ``(K, B * G, D)``
    against ``(K, C, D)`` product, whose scores join the same softmax."""
    B, K, G, D = q_BKGD.shape
    prefix = cache.prefix.layers[i]
    C = getattr(cache, "common", 0)
    keys_UKPD, values_UKPD = prefix.keys[:, :, C:], prefix.values[:, :, C:]
    U, P, M = keys_UKPD.shape[0], keys_UKPD.shape[2], cache.width
    own_B, slot_B = cache.owner_B, cache.slot_B
    if cache.even:  # the rows are the contexts' rows in order: a view, no scatter
        q_UMKGD = q_BKGD.view(U, M, K, G, D)
    else:
        q_UMKGD = q_BKGD.new_zeros(U, M, K, G, D)
        q_UMKGD[own_B, slot_B] = q_BKGD
    q_UKmD = q_UMKGD.permute(0, 2, 1, 3, 4).reshape(U, K, M * G, D)  # m = (row slot, query head in the group)
    s_UMKGP = torch.matmul(q_UKmD, keys_UKPD.transpose(-1, -2)).view(U, K, M, G, P).permute(0, 2, 1, 3, 4)
    bias_B11P = cache.prefix_bias_B11P[..., C:] if C else cache.prefix_bias_B11P
    s_BKGP = (s_UMKGP.reshape(B, K, G, P) if cache.even else s_UMKGP[own_B, slot_B]) + bias_B11P
    s_BKGS = torch.matmul(q_BKGD, keys_BKSD.transpose(-1, -2))  # decoded tokens: all real, no mask...
    suffix_bias = getattr(cache.suffix, "bias_111N", None)
    if suffix_bias is not None:  # ...except in a fixed buffer (graph_decode.StaticSuffix): slots past the current one
        s_BKGS = s_BKGS + suffix_bias
    scores, sizes = [s_BKGP, s_BKGS], [P, s_BKGS.shape[-1]]
    if C:  # the common opening (every context's first C slots, all real): every row's queries against one copy
        q_KmD = q_BKGD.permute(1, 0, 2, 3).reshape(K, B * G, D)
        s_BKGC = torch.matmul(q_KmD, prefix.keys[0, :, :C].transpose(-1, -2)).view(K, B, G, C).permute(1, 0, 2, 3)
        scores, sizes = [s_BKGC, *scores], [C, *sizes]
    *p_common, p_BKGP, p_BKGS = torch.softmax(torch.cat(scores, dim=-1), dim=-1).split(sizes, dim=-1)
    if cache.even:
        p_UMKGP = p_BKGP.view(U, M, K, G, P)
    else:
        p_UMKGP = p_BKGP.new_zeros(U, M, K, G, P)
        p_UMKGP[own_B, slot_B] = p_BKGP
    o_UKmD = torch.matmul(p_UMKGP.permute(0, 2, 1, 3, 4).reshape(U, K, M * G, P), values_UKPD)
    o_UMKGD = o_UKmD.view(U, K, M, G, D).permute(0, 2, 1, 3, 4)
    o_BKGD = o_UMKGD.reshape(B, K, G, D) if cache.even else o_UMKGD[own_B, slot_B]
    o_BKGD = o_BKGD + torch.matmul(p_BKGS, values_BKSD)
    if C:
        o_KmD = torch.matmul(p_common[0].permute(1, 0, 2, 3).reshape(K, B * G, C), prefix.values[0, :, :C])
        o_BKGD = o_BKGD + o_KmD.view(K, B, G, D).permute(1, 0, 2, 3)
    return o_BKGD
