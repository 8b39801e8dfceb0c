"""``DecodeStep``: the same next-token logits as the model's own forward, for every supported architecture, with
LoRA adapters, padded rows and a growing cache; ``None`` (so the caller falls back) for anything else. And the
two-level inverse-CDF sampler picks what a full-vocabulary cumsum picks."""

from __future__ import annotations

import contextlib

import pytest
import torch

from searchrl.generation.base import SamplingParams
from searchrl.generation.decode_step import DecodeStep
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.hf import HFGenerator
from searchrl.generation.kvcache import BufferedCache, SharedPrefixCache, cache_kwargs
from searchrl.generation.sampling import inverse_cdf
from searchrl.testing import tiny_model


def _tiny(kind: str):
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = dict(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    if kind == "llama":
        return tiny_model()
    if kind == "qwen2":  # q/k/v biases
        return Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=False)).eval()
    return MistralForCausalLM(MistralConfig(**common, sliding_window=None)).eval()


def _check_against_forward(
    model, steps: int = 4, owners: tuple[int, ...] = (0, 1, 2), fused: bool = False, n_fused: int | None = None
) -> None:
    """Left-padded prefill of three contexts, then ``steps`` decode steps of rows sharing them (``owners``) through
    DecodeStep and through the model's forward on a full copy of the cache per row; after two steps rows are
    dropped, as the generator does when they finish."""
    step = DecodeStep.build(model)
    assert step is not None
    if fused:  # the same steps with q/k/v and gate/up as one matmul each (all of them, in fp32)
        with step.fused_weights(torch.float32):
            assert step.fused is not None
            got = sum(f[0] is not None for f in step.fused) + sum(f[2] is not None for f in step.fused)
            assert got == (2 * len(step.fused) if n_fused is None else n_fused)
            _compare(model, step, steps, owners)
        assert step.fused is None  # dropped on exit
    else:
        _compare(model, step, steps, owners)


def _compare(model, step: DecodeStep, steps: int, owners: tuple[int, ...], common: int = 0) -> None:
    """``common``: the contexts open with the same ``common`` tokens (all real) before their own left-padded ones,
    as a call's shared prefix is laid out, and the cache is told so (the step reads that opening once)."""
    lens = [5, 9, 2]
    L = max(lens)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 259, (3, L), generator=g)
    mask_UL = torch.zeros(3, L, dtype=torch.long)
    for r, n in enumerate(lens):
        mask_UL[r, L - n :] = 1
    if common:
        ids = torch.cat([torch.randint(3, 259, (1, common), generator=g).expand(3, common), ids], dim=1)
        mask_UL = torch.cat([torch.ones(3, common, dtype=torch.long), mask_UL], dim=1)
    pos = (mask_UL.cumsum(-1) - 1).clamp(min=0)
    own = torch.tensor(owners)
    full, prefix = BufferedCache(), BufferedCache()
    with torch.inference_mode():
        for c in (full, prefix):
            model(input_ids=ids, attention_mask=mask_UL, position_ids=pos, use_cache=True, **cache_kwargs(model, c))
        full.batch_select_indices(own)
        shared = SharedPrefixCache(prefix, mask_UL, own, common=common)
        mask = mask_UL[own]
        B = len(owners)
        nxt, p = torch.randint(3, 259, (B,), generator=g), pos[own, -1]
        for t in range(steps):
            if t == 2 and B > 2:  # drop the first and the third row
                keep = torch.tensor([1] + list(range(3, B)))
                full.batch_select_indices(keep)
                shared.select(keep)
                mask, p, nxt, B = mask[keep], p[keep], nxt[keep], B - 2
            mask, p = torch.cat([mask, mask.new_ones(B, 1)], 1), p + 1
            out = model(
                input_ids=nxt[:, None],
                attention_mask=mask,
                position_ids=p[:, None],
                **cache_kwargs(model, full),
                use_cache=True,
            )
            ref = out.logits[:, -1].float()
            got = step(nxt, p, shared)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
            for b in range(B):  # each row's slots, as stored for the next turn, are the full cache's
                n = int(mask[b].sum())
                kv, kv_ref = shared.row(b, n), full.row(b, mask[b].nonzero().squeeze(-1))
                for (k, v), (k0, v0) in zip(kv, kv_ref, strict=True):
                    torch.testing.assert_close(k, k0)
                    torch.testing.assert_close(v, v0)
            nxt = ref.argmax(-1)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_decode_step_matches_the_model_forward(kind: str, fused: bool) -> None:
    _check_against_forward(_tiny(kind), fused=fused)


@pytest.mark.parametrize("owners", [(0, 1, 2), (0, 0, 1, 1, 2, 2), (0, 0, 0, 1, 2, 2)])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_a_common_opening_read_once_attends_like_full_copies(kind: str, owners: tuple[int, ...]) -> None:
    model = _tiny(kind)
    step = DecodeStep.build(model)
    _compare(model, step, steps=4, owners=owners, common=7)
    with step.fused_weights(torch.float32):
        _compare(model, step, steps=3, owners=owners, common=7)


def test_a_common_opening_must_be_real_tokens() -> None:
    model = tiny_model()
    prefix = BufferedCache()
    ids, mask = torch.randint(3, 259, (2, 4)), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask, use_cache=True, **cache_kwargs(model, prefix))
    with pytest.raises(ValueError, match="common=2"):
        SharedPrefixCache(prefix, mask, torch.tensor([0, 1]), common=2)


@pytest.mark.parametrize("owners", [(0, 0, 1, 1, 2, 2), (0, 0, 0, 1, 2, 2, 2, 2)])
def test_rows_sharing_a_context_attend_like_full_copies(owners: tuple[int, ...]) -> None:
    """GRPO groups: even (then uneven once rows are dropped) and uneven from the start."""
    _check_against_forward(_tiny("llama"), steps=5, owners=owners)
    _check_against_forward(_tiny("llama"), steps=5, owners=owners, fused=True)


def test_fused_weights_follow_updates_and_autocast() -> None:
    """Built at entry from the current weights (an optimiser step between calls is seen). On a CPU, by default only
    where autocast would cache a cast copy (trainable fp32 weights under bf16 autocast), in autocast's dtype, output
    and down projections cast alike: not without autocast, not for frozen weights."""
    model = _tiny("qwen2")
    step = DecodeStep.build(model)
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight.add_(1.0)
    with step.fused_weights(torch.float32):
        w_qkv, b_qkv, w_gu, w_o, w_down = step.fused[0]
        attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        H = model.config.hidden_size
        torch.testing.assert_close(w_qkv[H : H + attn.k_proj.out_features], attn.k_proj.weight)
        assert b_qkv is not None and w_gu.shape[0] == 2 * model.config.intermediate_size
        assert w_o.data_ptr() == attn.o_proj.weight.data_ptr()  # the same dtype: no copy
        assert w_down.data_ptr() == mlp.down_proj.weight.data_ptr()
    nothing = (None,) * 5
    with step.fused_weights():  # fp32 weights used as they are: nothing to stand in for
        assert all(f == nothing for f in step.fused)
    with torch.autocast("cpu", dtype=torch.bfloat16), step.fused_weights():
        assert all({t.dtype for t in (f[0], f[2], f[3], f[4])} == {torch.bfloat16} for f in step.fused)
    model.requires_grad_(False)  # a frozen base (LoRA): autocast caches nothing, so neither do we
    with torch.autocast("cpu", dtype=torch.bfloat16), step.fused_weights():
        assert all(f == nothing for f in step.fused)


def test_fused_decode_under_autocast_matches_the_plain_step() -> None:
    """The production path: a generator under bf16 autocast fuses, and decodes as the unfused step does (bf16
    tolerance: the fused and separate matmuls round differently)."""
    model = _tiny("qwen2")
    step = DecodeStep.build(model)
    ids, mask = torch.randint(3, 259, (2, 6)), torch.ones(2, 6, dtype=torch.long)
    pos = torch.arange(6).expand(2, 6)
    logits = []
    for fuse in (False, True):
        prefix = BufferedCache()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **cache_kwargs(model, prefix))
            shared = SharedPrefixCache(prefix, mask, torch.tensor([0, 1]))
            with step.fused_weights() if fuse else contextlib.nullcontext():
                assert (step.fused is not None and step.fused[0][0] is not None) == fuse
                logits.append(step(torch.tensor([5, 7]), torch.tensor([6, 6]), shared))
    torch.testing.assert_close(logits[1], logits[0], rtol=0.05, atol=0.05)


def test_decode_step_runs_lora_adapters() -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"]))
    for n, p in model.named_parameters():  # non-zero adapters, so they change the logits
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)
    _check_against_forward(model)
    # fused: only the layers' gate/up (no adapters there); q/k/v keep their LoRA modules
    _check_against_forward(model, fused=True, n_fused=2)


def test_unsupported_models_fall_back() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=259, n_embd=32, n_layer=1, n_head=2))
    windowed = MistralForCausalLM(
        MistralConfig(
            vocab_size=259,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            sliding_window=8,
        )
    )
    assert DecodeStep.build(gpt2) is None and DecodeStep.build(windowed) is None

    class FullyShardedDataParallel(torch.nn.Module):  # FSDP1's wrapper, by name: parameters gathered in its hooks
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module = module

    assert DecodeStep.build(tiny_model()) is not None
    assert DecodeStep.build(FullyShardedDataParallel(tiny_model())) is None
    tok = ByteTokenizer()
    sp = SamplingParams(max_new_tokens=6, temperature=0.0)
    assert HFGenerator(gpt2, tok).step is None
    assert len(HFGenerator(gpt2, tok).generate([tok.encode("hello")], sp)[0].token_ids) == 6


def test_fast_and_plain_steps_sample_the_same_tokens() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    prompts = [tok.encode(t) for t in ["Q: 2+2?\nA:", "hi", "a longer prompt here"]] * 2
    sp = SamplingParams(max_new_tokens=16, temperature=1.0, seed=3)
    a = HFGenerator(model, tok).generate(prompts, sp)
    b = HFGenerator(model, tok, fast_step=False).generate(prompts, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b, strict=True):
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4


@pytest.mark.parametrize("V", [700, 1152])  # 700: no block divides it (the padded path); 1152 = 9 x 128
def test_inverse_cdf_matches_a_full_cumsum_and_skips_zero_mass(V: int) -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(64, V, generator=g) ** 4
    probs[probs < 0.05] = 0.0
    probs /= probs.sum(-1, keepdim=True)
    u = torch.rand(64, generator=g)
    full = torch.searchsorted(probs.cumsum(-1), (u * probs.sum(-1))[:, None], right=True).squeeze(-1)
    got = inverse_cdf(probs, u)
    assert (got == full).float().mean() > 0.95  # rounding may move a draw that sits on a boundary
    assert bool((probs.gather(-1, got[:, None]) > 0).all())
    edge = inverse_cdf(probs, torch.full((64,), 1 - 1e-9))  # the last draw lands on the last non-zero token
    last_nonzero = (probs > 0).float().cumsum(-1).argmax(-1)
    assert torch.equal(edge, last_nonzero)


def test_inverse_cdf_samples_the_distribution() -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.2, 0.3] + [0.0] * 300])
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    picks = inverse_cdf(probs.expand(20000, -1).contiguous(), u)
    freq = torch.bincount(picks, minlength=305)[:5].float() / 20000
    torch.testing.assert_close(freq, probs[0, :5], atol=0.015, rtol=0)


def test_fixed_buffers_of_the_graph_path_decode_as_the_growing_cache() -> None:
    """The CUDA-graph path's fixed buffers (run eagerly here) give the growing cache's tokens and log-probs, through
    rows finishing on a stop string (the batch shrinks), uneven groups and a second call reusing the first's caches."""
    tok, model = ByteTokenizer(), tiny_model()
    prompts = [tok.encode(t) for t in ["Q: 2+2?\nA:", "hi", "a longer prompt here"]] * 2 + [tok.encode("hi")]
    stops = tuple("abcdefghijklmnopqrstuvwxyz")  # ~1 in 10 random bytes: rows stop at different steps
    sp = SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, stop=stops)
    static, growing = HFGenerator(model, tok, graphs="static"), HFGenerator(model, tok, graphs="off")
    for call in range(2):
        a, b = static.generate(prompts, sp), growing.generate(prompts, sp)
        assert [c.token_ids for c in a] == [c.token_ids for c in b], call
        assert len({len(c.token_ids) for c in a}) > 1  # rows stopped at different steps
        for x, y in zip(a, b, strict=True):
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4
        prompts = [p + c.token_ids for p, c in zip(prompts, a, strict=True)]  # the next turn extends each context
    assert static.stats["reused_tokens"] == growing.stats["reused_tokens"] > 0
    with pytest.raises(ValueError, match="graphs"):
        HFGenerator(model, tok, graphs="yes")


@pytest.mark.parametrize("graphs", ["static", "off"])
@pytest.mark.parametrize("row_seeds", [False, True])
def test_lookahead_decodes_the_same_tokens(graphs: str, row_seeds: bool) -> None:
    """Queuing step t+1 before reading step t's tokens (the CUDA default, forced here on the CPU) changes nothing a
    caller sees: tokens, log-probs, finish reasons and the caches kept for the next call, as rows stop at different
    steps (the batch shrinks after a step already decoded for the finished rows) and the next turn reuses them."""
    tok, model = ByteTokenizer(), tiny_model()
    prompts = [tok.encode(t) for t in ["Q: 2+2?\nA:", "hi", "a longer prompt here"]] * 2 + [tok.encode("hi")]
    stops = tuple("abcdefghijklmnopqrstuvwxyz")
    seeds = list(range(len(prompts))) if row_seeds else None
    sp = SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, stop=stops, row_seeds=seeds)
    ahead = HFGenerator(model, tok, graphs=graphs, lookahead="on")
    plain = HFGenerator(model, tok, graphs=graphs, lookahead="off")
    for call in range(2):
        a, b = ahead.generate(prompts, sp), plain.generate(prompts, sp)
        assert [c.token_ids for c in a] == [c.token_ids for c in b], call
        assert [c.finish_reason for c in a] == [c.finish_reason for c in b], call
        assert len({len(c.token_ids) for c in a}) > 1  # rows stopped at different steps
        for x, y in zip(a, b, strict=True):
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-5
        prompts = [p + c.token_ids for p, c in zip(prompts, a, strict=True)]
    assert ahead.stats["reused_tokens"] == plain.stats["reused_tokens"] > 0
    assert ahead.stats["decode_steps"] >= plain.stats["decode_steps"]
    with pytest.raises(ValueError, match="lookahead"):
        HFGenerator(model, tok, lookahead="yes")


@pytest.mark.slow
@pytest.mark.parametrize("opening", ["", "Answer briefly after searching the small world's pages. "])
def test_compiled_decode_step_decodes_the_same_tokens(opening: str) -> None:
    """``rollout.compile_decode``: the step through torch.compile (Inductor) samples the tokens of the plain step,
    through rows stopping at different steps (new batch sizes, so recompilation) and a second call reusing caches;
    with a shared opening, through the step that reads it once for all rows."""
    from searchrl.config import load_config
    from searchrl.generation import rollout_generator

    tok, model = ByteTokenizer(), tiny_model()
    prompts = [tok.encode(opening + t) for t in ["Q: 2+2?\nA:", "hi", "a longer prompt here"]] * 2
    sp = SamplingParams(max_new_tokens=16, temperature=1.0, seed=5, stop=tuple("abcdefghijklm"))
    rollout = load_config(None, ["rollout.compile_decode=true"]).rollout
    compiled = rollout_generator(rollout, model, tok, torch.device("cpu"))
    plain = HFGenerator(model, tok)
    assert compiled.step._compiled is not None and plain.step._compiled is None
    calls, layer = [], compiled.step._compiled
    compiled.step._compiled = lambda *a: calls.append(1) or layer(*a)
    for call in range(2):
        a, b = compiled.generate(prompts, sp), plain.generate(prompts, sp)
        if call == 0:
            assert (compiled.stats["common_opening_tokens"] > 0) == bool(opening)
        assert [c.token_ids for c in a] == [c.token_ids for c in b], call
        for x, y in zip(a, b, strict=True):
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4
        prompts = [p + c.token_ids for p, c in zip(prompts, a, strict=True)]
    assert calls  # the layers ran through the compiled graph


def test_from_rows_places_shared_and_own_prefixes_right_aligned() -> None:
    """Rows given one shared object (broadcast copy, contiguous or not) and rows with their own keys/values end up
    exactly where a row-by-row copy puts them; a row without a prefix stays zero."""
    torch.manual_seed(0)
    H, D, width = 2, 3, 6
    shared = [(torch.randn(H, 4, D), torch.randn(H, 4, D)) for _ in range(2)]
    own = [(torch.randn(H, 6, D), torch.randn(H, 6, D)) for _ in range(2)]
    rows = [shared, own, shared, None, shared]  # shared rows 0, 2, 4: not contiguous
    cache = BufferedCache.from_rows(rows, width)
    for layer in range(2):
        K, V = cache.layers[layer].keys, cache.layers[layer].values
        for i, r in enumerate(rows):
            if r is None:
                assert not K[i].any() and not V[i].any()
                continue
            n = r[layer][0].shape[1]
            assert torch.equal(K[i, :, width - n :], r[layer][0]) and torch.equal(V[i, :, width - n :], r[layer][1])
            assert not K[i, :, : width - n].any()
    together = BufferedCache.from_rows([shared, shared, own], width)  # shared rows 0-1: one slice
    assert torch.equal(together.layers[1].keys[1, :, 2:], shared[1][0])


def test_a_failing_compiler_falls_back_to_the_eager_layers(caplog) -> None:
    """No compiler on the machine (e.g. no Triton on a GPU): the first compiled call fails, the step warns once and
    decodes the plain step's tokens eagerly from then on."""
    tok, model = ByteTokenizer(), tiny_model()
    prompts = [tok.encode(t) for t in ["Q: 2+2?\nA:", "hi there"]]
    sp = SamplingParams(max_new_tokens=6, temperature=1.0, seed=2)
    broken = HFGenerator(model, tok, graphs="static")
    broken.step.compile()

    def fail(*_):
        raise RuntimeError("no backend")

    broken.step._compiled = fail
    with caplog.at_level("WARNING"):
        a = broken.generate(prompts, sp)
    b = HFGenerator(model, tok, graphs="static").generate(prompts, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert not broken.step.compiled and "decoding without compilation" in caplog.text


def test_fused_copies_on_a_gpu_only_where_they_fit(monkeypatch) -> None:
    """On a GPU the step fuses every projection only when copies of the layers' weights fit twice in free memory;
    on a CPU the question does not arise."""
    step = DecodeStep.build(_tiny("qwen2"))
    need = sum(p.numel() for p in step.body.layers.parameters()) * 2  # bf16 copies
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * need - 1, 10 * need))
    assert not step._copies_fit(torch.device("cuda"), torch.bfloat16)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * need, 10 * need))
    assert step._copies_fit(torch.device("cuda"), torch.bfloat16)
    assert step._copies_fit(torch.device("cpu"), torch.float32)


def test_the_cache_goes_under_the_keyword_the_forward_takes() -> None:
    """``past_key_values`` before transformers renamed it, ``cache`` after; wrappers are looked through; the
    installed release's own model takes the keyword without a deprecation warning."""
    import warnings

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=None): ...

    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None, use_cache=None): ...

    class Peft(torch.nn.Module):
        def __init__(self, base) -> None:
            super().__init__()
            self.base = base

        def forward(self, *args, **kwargs): ...

        def get_base_model(self):
            return self.base

    cache = BufferedCache()
    assert cache_kwargs(Old(), cache) == {"past_key_values": cache}
    assert cache_kwargs(New(), cache) == {"cache": cache}
    assert cache_kwargs(Peft(New()), cache) == {"cache": cache}
    model = tiny_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **cache_kwargs(model, cache))
    assert cache.get_seq_length() == 3
