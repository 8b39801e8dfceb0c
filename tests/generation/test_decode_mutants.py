"""The decode-time caches and the fast step pinned on hand-made tensors and small models (each test names its slip):
the prefix store's budget and longest-prefix lookup, a shared-prefix cache's row layout, the fast step's biases and
replaced forwards, and the bookkeeping of a captured decode step (CUDA's graph and streams stood in for on the CPU)."""

from __future__ import annotations

import contextlib

import torch

from searchrl.generation import graph_decode
from searchrl.generation.decode_step import DecodeStep, _core_parts
from searchrl.generation.graph_decode import GraphRows
from searchrl.generation.kvcache import (
    BufferedCache,
    PrefixStore,
    SharedPrefixCache,
    cache_kwargs,
    weights_version,
)
from searchrl.testing import tiny_model


def _kv(*fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One layer, one head, head size 1: keys ``fill``, values ``-fill`` (8 bytes a slot in float32)."""
    k = torch.tensor(fill).view(1, len(fill), 1)
    return [(k, -k)]


def test_a_buffered_layer_appends_after_rows_that_were_reordered() -> None:
    """Selecting rows replaces a layer's keys (same number of rows, another order); the next token goes after the
    selected rows, not into the stale buffer. Slip caught: the buffer kept because its shape still fits."""
    cache = BufferedCache()
    k = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(2, 1, 2, 1)
    cache.update(k, -k, 0)
    cache.batch_select_indices(torch.tensor([1, 0]))
    keys, values = cache.update(torch.tensor([5.0, 6.0]).view(2, 1, 1, 1), torch.zeros(2, 1, 1, 1), 0)
    assert keys.flatten().tolist() == [3.0, 4.0, 5.0, 1.0, 2.0, 6.0]
    assert values.flatten().tolist() == [-3.0, -4.0, 0.0, -1.0, -2.0, 0.0]


def test_the_prefix_store_takes_an_entry_that_fills_its_budget_exactly() -> None:
    """Slip caught: ``<`` for ``<=`` (an entry the size of the budget refused), or the bytes not added up (a second
    entry past the budget taken)."""
    store = PrefixStore(max_bytes=24)  # three slots
    store.put([1, 2], _kv(1.0, 2.0))  # 16 bytes
    store.put([7, 8], _kv(1.0, 2.0))  # 32 in all: refused
    assert len(store) == 1
    store.put([3], _kv(3.0))  # 24 in all: taken
    assert len(store) == 2
    store.clear()
    store.put([4, 5, 6], _kv(4.0, 5.0, 6.0))  # 24 bytes alone
    assert len(store) == 1


def test_the_prefix_store_finds_the_longest_proper_prefix() -> None:
    """Slips caught: the shortest match returned, or a context equal to the whole prompt (nothing left to prefill)."""
    store = PrefixStore(max_bytes=1 << 20)
    for ctx in ([1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 9, 9, 9, 9]):
        store.put(ctx, _kv(*map(float, ctx)))
    n, kv = store.longest_prefix([1, 2, 3, 4, 5])
    assert n == 4 and kv[0][0].flatten().tolist() == [1.0, 2.0, 3.0, 4.0]
    n, kv = store.longest_prefix([1, 2, 3, 4])  # [1, 2, 3, 4] itself is no proper prefix
    assert n == 3 and kv[0][0].flatten().tolist() == [1.0, 2.0, 3.0]
    assert store.longest_prefix([1, 3]) == (0, None)


def test_the_weights_version_moves_with_any_parameter() -> None:
    """An update of the last layer alone (a LoRA adapter's step) moves the version, so stored keys/values made by
    the old weights are dropped. Slip caught: only some parameters' counters summed."""
    model = tiny_model()
    v0 = weights_version(model)
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)
    assert weights_version(model) == v0 + 1


def _shared(owners: list[int]) -> SharedPrefixCache:
    """Three contexts, left-padded to 3 slots (real: 2, 3 and 1 slots), one layer, one head of size 1. Context
    ``u``'s real slot ``j`` holds key ``10 * u + j``; padding holds -1."""
    keys = torch.tensor([[-1.0, 0, 1], [10, 11, 12], [-1, -1, 20]]).view(3, 1, 3, 1)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]])
    prefix = BufferedCache()
    prefix.update(keys, -keys, 0)
    return SharedPrefixCache(prefix, mask, torch.tensor(owners))


def test_a_shared_prefix_cache_numbers_each_contexts_rows_and_knows_uneven_groups() -> None:
    """Slips caught: a row's slot within its context off by the rows before it, or uneven groups taken as even."""
    cache = _shared([0, 0, 1, 2, 2, 2])
    assert cache.slot_B.tolist() == [0, 1, 0, 0, 1, 2]
    assert (cache.width, cache.even) == (3, False)
    cache.select(torch.tensor([1, 2, 3]))
    assert cache.owner_B.tolist() == [0, 1, 2] and cache.slot_B.tolist() == [0, 0, 0]
    assert (cache.width, cache.even) == (1, True)
    assert cache.prefix_bias_B11P[:, 0, 0, 0].tolist()[0] == torch.finfo(torch.float32).min  # context 0's pad


def test_a_shared_prefix_row_is_its_contexts_real_slots_then_its_decoded_tokens() -> None:
    """Row ``b``'s first ``n`` slots, exactly as many as it holds, or None when it holds fewer. Slips caught: the
    decoded part read from the wrong offset, a row asking for all it holds refused, the owners not selected with the
    rows."""
    cache = _shared([0, 1, 2])
    for t in range(2):  # two decoded tokens per row: row b's t-th is 100 * b + t
        k = torch.tensor([100.0 * b + t for b in range(3)]).view(3, 1, 1, 1)
        cache.suffix.update(k, -k, 0)
    assert cache.row(0, 4)[0][0].flatten().tolist() == [0.0, 1.0, 0.0, 1.0]
    assert cache.row(1, 2)[0][0].flatten().tolist() == [10.0, 11.0]
    assert cache.row(1, 5)[0][1].flatten().tolist() == [-10.0, -11.0, -12.0, -100.0, -101.0]
    assert cache.row(0, 5) is None and cache.row(2, 4) is None
    cache.select(torch.tensor([0, 2]))
    assert cache.row(1, 3)[0][0].flatten().tolist() == [20.0, 200.0, 201.0]


def _one_step(model, step: DecodeStep, fused: bool = False) -> None:
    """Two unpadded contexts of 5 tokens, one decode step: the fast step's logits are the model forward's."""
    g = torch.Generator().manual_seed(0)
    ids, nxt = torch.randint(3, 259, (2, 5), generator=g), torch.tensor([7, 9])
    mask = torch.ones(2, 5, dtype=torch.long)
    full, prefix = BufferedCache(), BufferedCache()
    with torch.inference_mode():
        for c in (full, prefix):
            model(input_ids=ids, attention_mask=mask, use_cache=True, **cache_kwargs(model, c))
        ref = model(
            input_ids=nxt[:, None], position_ids=torch.tensor([[5], [5]]), use_cache=True, **cache_kwargs(model, full)
        ).logits[:, -1]
        shared = SharedPrefixCache(prefix, mask, torch.tensor([0, 1]))
        with step.fused_weights(torch.float32) if fused else contextlib.nullcontext():
            got = step(nxt, torch.tensor([5, 5]), shared)
    torch.testing.assert_close(got, ref.float(), rtol=1e-5, atol=1e-5)


def _biased_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=259,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        attention_bias=True,
        mlp_bias=True,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(std=0.5)  # init leaves them zero: make every bias count
    return model


def test_fused_projections_keep_the_output_projections_bias() -> None:
    """Llama with ``attention_bias``: the output projection has a bias, so it is not replaced by a bare weight.
    Slip caught: the output projection's weight taken alone whatever its bias."""
    model = _biased_llama()
    step = DecodeStep.build(model)
    _one_step(model, step, fused=True)
    with step.fused_weights(torch.float32):
        assert step.fused[0][3] is None and step.fused[0][0] is not None


def test_a_biased_lm_head_keeps_its_bias_on_the_cpu() -> None:
    """The CPU's transposed matmul is for a bias-free head. Slip caught: a head's bias dropped there."""
    model = tiny_model()
    head = torch.nn.Linear(64, 259, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.normal_(std=1.0)
    model.lm_head = head
    _one_step(model, DecodeStep.build(model))


def test_a_module_whose_forward_was_replaced_runs_its_replacement() -> None:
    """A per-instance ``forward`` (as accelerate's offload hooks install) is what the model runs, so the step runs it
    too. Slip caught: such a module taken as a plain ``nn.Linear`` and its weight used directly."""
    model = tiny_model()
    q = model.model.layers[0].self_attn.q_proj
    plain = q.forward
    q.forward = lambda x: plain(x) * 2.0
    _one_step(model, DecodeStep.build(model))


def test_adapters_injected_after_the_step_was_built_run_in_it() -> None:
    """LoRA injected into a model whose step was built before (the generator is made once): the step sees the new
    modules. Slip caught: the modules resolved at build time kept."""
    from peft import LoraConfig, get_peft_model

    base = tiny_model()
    step = DecodeStep.build(base)
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # zero at init: make the adapters count
    _one_step(model, step)


def test_the_compiled_layer_needs_one_epsilon_for_both_norms() -> None:
    """The compiled layer takes one epsilon for both RMS norms. Slip caught: a layer whose norms differ taken."""
    layer = tiny_model().model.layers[0]
    assert _core_parts(layer)[2] == layer.input_layernorm.variance_epsilon
    layer.post_attention_layernorm.variance_epsilon = 1e-3
    assert _core_parts(layer) is None


class _FakeCuda:
    """CUDA's streams and graphs stood in for on the CPU: a "capture" runs the step (as the CPU must) and then puts
    the slot counter back, as a real capture records kernels without running them; ``replay`` runs the step."""

    def __init__(self, rows: GraphRows, fail: bool = False) -> None:
        self.rows, self.fail, self.replays = rows, fail, 0

    def install(self, monkeypatch) -> None:
        fake = self

        class Stream:
            def wait_stream(self, other) -> None: ...

        class CUDAGraph:
            def replay(self) -> None:
                fake.replays += 1
                fake.rows.out_BV.copy_(fake.rows._eager(fake.rows.ids_B, fake.rows.pos_B))

        @contextlib.contextmanager
        def graph(g, capture_error_mode=None):
            t = fake.rows.cache.suffix.t.clone()
            if fake.fail:
                raise RuntimeError("operation not permitted when stream is capturing")
            yield
            fake.rows.cache.suffix.t.copy_(t)

        for name, value in {
            "Stream": Stream,
            "stream": lambda s: contextlib.nullcontext(),
            "current_stream": lambda: Stream(),
            "CUDAGraph": CUDAGraph,
            "graph": graph,
            "synchronize": lambda: None,
        }.items():
            monkeypatch.setattr(graph_decode.torch.cuda, name, value)


def _graph_rows(model, capture: bool) -> GraphRows:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 259, (2, 4), generator=g)
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    prefix = BufferedCache()
    model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        **cache_kwargs(model, prefix),
    )
    rows = GraphRows(DecodeStep.build(model), SharedPrefixCache(prefix, mask, torch.tensor([0, 1, 1])), 6, False)
    rows.capture = capture  # on the CPU GraphRows never captures by itself
    return rows


def _decode(rows: GraphRows, steps: int) -> list[torch.Tensor]:
    out, nxt, pos = [], torch.tensor([5, 6, 7]), torch.tensor([3, 4, 4])
    for t in range(steps):
        if t == 2:  # a row finishes: new buffers, captured again
            rows.select(torch.tensor([0, 2]))
            nxt, pos = nxt[[0, 2]], pos[[0, 2]]
        out.append(rows.step(nxt, pos).clone())
        nxt, pos = out[-1].argmax(-1), pos + 1
    return out


def test_a_captured_step_replays_what_the_eager_step_computes(monkeypatch) -> None:
    """Warm-up and capture put the slot counter back, each replay reads the step's new token ids and positions, and
    dropping rows captures again. Slips caught: the counter left advanced by the warm-up (every replay writes one
    slot late), a replay on the last step's positions, the old graph replayed on the dropped rows' buffers."""
    model = tiny_model()
    with torch.inference_mode():
        eager = _decode(_graph_rows(model, capture=False), 4)
        rows = _graph_rows(model, capture=True)
        fake = _FakeCuda(rows)
        fake.install(monkeypatch)
        graphed = _decode(rows, 4)
    assert rows.captures == 2 and fake.replays == 4
    for got, ref in zip(graphed, eager, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_a_failed_capture_decodes_eagerly_from_the_slot_it_was_at(monkeypatch, caplog) -> None:
    """A capture that fails leaves the steps eager, from the slot the warm-up started at, and is not tried again.
    Slip caught: capture retried at every later step (a warm-up and a failure each time)."""
    model = tiny_model()
    with torch.inference_mode():
        eager = _decode(_graph_rows(model, capture=False), 4)
        rows = _graph_rows(model, capture=True)
        _FakeCuda(rows, fail=True).install(monkeypatch)
        with caplog.at_level("WARNING"):
            failed = _decode(rows, 4)
    assert not rows.capture and rows.captures == 0 and "decoding without graphs" in caplog.text
    for got, ref in zip(failed, eager, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
