"""The fast HF decode loop: same tokens and log-probs as ``model.generate``, exact stop rule, cache reuse."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from searchrl.generation.base import SamplingParams, Segment
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.hf import HFGenerateGenerator, HFGenerator
from searchrl.generation.sampling import finish_row
from searchrl.testing import tiny_model


def _prompts(tok, texts):
    return [tok.encode(t) for t in texts]


def _same(a, b, tol=1e-4):
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    for x, y in zip(a, b, strict=True):
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)), default=0.0) < tol


TEXTS = ["Q: what is 2+2?\nA:", "Q: name a colour\nA:", "hi", "Q: a much longer question about many things\nA:"]


def test_greedy_matches_generate_on_tiny_model_mixed_lengths() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    sp = SamplingParams(max_new_tokens=20, temperature=0.0)
    _same(
        HFGenerator(model, tok).generate(_prompts(tok, TEXTS), sp),
        HFGenerateGenerator(model, tok).generate(_prompts(tok, TEXTS), sp),
    )


@pytest.mark.slow
def test_greedy_matches_generate_on_bundled_model() -> None:
    """Token-for-token equal to transformers' generate on SmolLM2 for mixed-length chat prompts; log-probs to 1e-4,
    with and without stop strings."""
    from searchrl.models import load_policy

    model, tok = load_policy("smollm2-135m-instruct")
    questions = [
        "What is the capital of France?",
        "Name the author of Hamlet and say one thing about him.",
        "Who wrote the novel Dracula, and in which year was it published? Answer briefly.",
        "2+2?",
    ]
    prompts = [
        tok.encode(
            tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for q in questions
    ]
    assert len({len(p) for p in prompts}) == len(prompts)
    assert HFGenerator(model, tok).step is not None, "the bundled model must take the fast decode step"
    for stop in [(), (".",)]:
        sp = SamplingParams(max_new_tokens=24, temperature=0.0, stop=stop)
        fast, ref = (
            HFGenerator(model, tok).generate(prompts, sp),
            HFGenerateGenerator(model, tok).generate(prompts, sp),
        )
        _same(fast, ref)
        if stop:
            assert any(c.finish_reason == "stop" for c in fast)


def test_group_prefill_is_shared_and_rows_sample_independently() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    gen = HFGenerator(model, tok)
    prompts = _prompts(tok, ["Q: abc\nA:"] * 4 + ["Q: xyz\nA:"] * 4)
    out = gen.generate(prompts, SamplingParams(max_new_tokens=16, temperature=1.0, seed=0))
    assert gen.stats["prefill_tokens"] == len(prompts[0]) + len(prompts[4])  # each distinct prompt once
    assert len({tuple(c.token_ids) for c in out[:4]}) > 1  # a group's rows are not copies of each other


def test_reused_prefix_gives_the_same_tokens_and_logprobs() -> None:
    """The second turn (previous context + an observation) reuses the first turn's cache: same result as a fresh
    prefill, with only the new tokens prefilled."""
    tok, model = ByteTokenizer(), tiny_model()
    gen, fresh = HFGenerator(model, tok), HFGenerator(model, tok, reuse_prefixes=False)
    prompts = _prompts(tok, TEXTS)
    first = gen.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, seed=1))
    assert all(c.finish_reason == "length" for c in first)
    nxt = [p + c.token_ids + tok.encode("<obs>some text</obs>") for p, c in zip(prompts, first, strict=True)]
    before = gen.stats["prefill_tokens"]
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    _same(gen.generate(nxt, sp), fresh.generate(nxt, sp), tol=1e-5)
    pairs = zip(prompts, first, strict=True)
    assert gen.stats["reused_tokens"] == sum(len(p) + len(c.token_ids) - 1 for p, c in pairs)
    assert gen.stats["prefill_tokens"] - before == sum(len(tok.encode("<obs>some text</obs>")) + 1 for _ in first)


def test_a_call_that_no_call_continues_keeps_no_cache() -> None:
    """``keep_cache=False`` (a rollout's last turn): nothing is kept, so the next call prefills everything, with the
    tokens of a call that kept its caches."""
    tok, model = ByteTokenizer(), tiny_model()
    kept, dropped = HFGenerator(model, tok), HFGenerator(model, tok)
    prompts = _prompts(tok, TEXTS[:2])
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, seed=4)
    a = kept.generate(prompts, sp)
    b = dropped.generate(prompts, dataclasses.replace(sp, keep_cache=False))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert len(kept.store) > 0 and len(dropped.store) == 0
    nxt = [p + c.token_ids + [40] for p, c in zip(prompts, a, strict=True)]
    dropped.generate(nxt, SamplingParams(max_new_tokens=2, temperature=0.0))
    assert dropped.stats["reused_tokens"] == 0
    capped = HFGenerator(model, tok, store_bytes=0)  # rollout.prefix_cache_gib=0: the same tokens, nothing kept
    assert [c.token_ids for c in capped.generate(prompts, sp)] == [c.token_ids for c in a]
    assert len(capped.store) == 0


def test_rows_that_end_in_eos_keep_their_caches_when_the_next_call_continues_them() -> None:
    """``keep_eos_rows`` (``rollout.continue_after_eos``): a turn that ended in EOS goes on after feedback, from its
    context plus its tokens without the EOS, so its cache serves the next call as a stop string's does."""
    tok, model = ByteTokenizer(), tiny_model()
    prompts = _prompts(tok, TEXTS[:2])
    greedy = HFGenerator(model, tok).generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    for keep in (False, True):
        gen = HFGenerator(model, tok)
        gen.eos_ids = {greedy[0].token_ids[2]}  # row 0 now ends in EOS by its third token
        sp = SamplingParams(max_new_tokens=8, temperature=0.0, keep_eos_rows=keep)
        first = gen.generate(prompts, sp)
        assert first[0].finish_reason == "eos"
        nxt = [p + c.token_ids[:-1] + [40] for p, c in zip(prompts, first, strict=True)]  # the EOS dropped
        gen.generate(nxt[:1], SamplingParams(max_new_tokens=2, temperature=0.0))
        assert gen.stats["reused_tokens"] == (len(nxt[0]) - 1 if keep else 0)  # all but the new token


def test_weight_change_or_reset_drops_the_cache() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    gen = HFGenerator(model, tok)
    prompts = _prompts(tok, TEXTS[:2])
    first = gen.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    nxt = [p + c.token_ids + [40] for p, c in zip(prompts, first, strict=True)]
    with torch.no_grad():
        model.lm_head.weight.add_(0.01)  # an in-place update bumps the version counters
    gen.generate(nxt, SamplingParams(max_new_tokens=4, temperature=0.0))
    assert gen.stats["reused_tokens"] == 0
    gen.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    gen.reset()
    gen.generate(nxt, SamplingParams(max_new_tokens=4, temperature=0.0))
    assert gen.stats["reused_tokens"] == 0


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    gen = HFGenerator(model, tok)
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    state = torch.get_rng_state()
    a, b = gen.generate(_prompts(tok, TEXTS), sp), gen.generate(_prompts(tok, TEXTS), sp)
    assert torch.equal(state, torch.get_rng_state())
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    HFGenerateGenerator(model, tok).generate(_prompts(tok, TEXTS[:1]), sp)
    assert torch.equal(state, torch.get_rng_state())


def test_logprobs_are_the_policy_logprobs_of_the_sampled_tokens() -> None:
    """Sampling at temperature 0.7 still reports log pi(token) at temperature 1 (a full forward recomputes them)."""
    tok, model = ByteTokenizer(), tiny_model()
    p = tok.encode("Q: abc\nA:")
    c = HFGenerator(model, tok).generate([p], SamplingParams(max_new_tokens=10, temperature=0.7, seed=3))[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p + c.token_ids])).logits[0, len(p) - 1 : -1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-5)


def test_stop_rule_is_exact_when_token_pieces_do_not_concatenate() -> None:
    """Byte tokens of a multi-byte character decode to replacement characters one by one, so the incremental check
    cannot see a non-ASCII stop string; the final check on the whole text still trims right after it."""
    tok = ByteTokenizer()
    ids = tok.encode("one → two → three")
    c = finish_row(tok, ids, [0.0] * len(ids), {2}, ("→",), 0.0, stopped=False)
    assert (c.text, c.finish_reason, c.stop_string) == ("one →", "stop", "→")
    c = finish_row(tok, ids, [0.0] * len(ids), {2}, ("two",), 0.0, stopped=True)  # a wrong hint is corrected
    assert c.text == "one → two" and len(c.logprobs) == len(c.token_ids)
    eos = ids[:3] + [2]
    assert finish_row(tok, eos, [0.0] * 4, {2}, ("→",), 0.0).finish_reason == "eos"


def test_distinct_prompts_prefill_their_common_opening_once() -> None:
    tok, model = ByteTokenizer(), tiny_model()
    opening = "Answer the question below, briefly and with care. Question: "
    prompts = _prompts(tok, [opening + q for q in ("red?", "what is blue?", "green or not?")])
    sp = SamplingParams(max_new_tokens=12, temperature=0.0)
    gen = HFGenerator(model, tok)
    _same(gen.generate(prompts, sp), HFGenerateGenerator(model, tok).generate(prompts, sp))
    common = len(tok.encode(opening))
    assert gen.stats["prefill_tokens"] == common + sum(len(p) - common for p in prompts)
    assert gen.stats["common_opening_tokens"] == common  # the decode steps read the opening once for all rows
    grouped = [p for p in prompts for _ in range(2)]  # rows sharing a context, over fixed (graph) buffers too
    for graphs in ("off", "static"):
        _same(
            HFGenerator(model, tok, graphs=graphs).generate(grouped, sp),
            HFGenerateGenerator(model, tok).generate(grouped, sp),
        )


def test_the_rollout_generator_takes_its_batch_from_the_config_or_the_device() -> None:
    """``rollout.max_batch_size`` when set, else 64 rows on the CPU and 512 on a GPU; ``rollout.cuda_graphs``;
    ``rollout.compile_decode`` when set, else on a GPU only; ``rollout.prefix_cache_gib``."""
    from searchrl import device as placement
    from searchrl.config import load_config
    from searchrl.generation import rollout_generator
    from searchrl.testing import tokenizer

    model, tok = tiny_model(), tokenizer()
    unset = rollout_generator(load_config(None, []).rollout, model, tok, torch.device("cpu"))
    assert unset.max_batch_size == 64
    cfg = load_config(None, ["rollout.max_batch_size=8", "rollout.backend=hf_generate"])
    assert rollout_generator(cfg.rollout, model, tok, torch.device("cpu")).max_batch_size == 8
    assert unset.graphs == "auto"
    no_graphs = load_config(None, ["rollout.cuda_graphs=false"]).rollout
    assert rollout_generator(no_graphs, model, tok, torch.device("cpu")).graphs == "off"
    assert not unset.step.compiled  # the CPU default: eager
    compiled = load_config(None, ["rollout.compile_decode=true"]).rollout
    assert rollout_generator(compiled, model, tok, torch.device("cpu")).step.compiled
    assert unset.store.max_bytes == 2 * 2**30  # rollout.prefix_cache_gib
    small = load_config(None, ["rollout.prefix_cache_gib=0.5"]).rollout
    assert rollout_generator(small, model, tok, torch.device("cpu")).store.max_bytes == 2**29
    assert placement.decode_batch_default(torch.device("cuda")) == 512
    assert placement.micro_batch_defaults(torch.device("cuda")) == (64, 8192)
    assert placement.micro_batch_defaults(torch.device("cpu")) == (16, 2048)


def _sentencepiece_like():
    """A word-level tokenizer with SentencePiece's space marker: a piece decoded alone drops its leading space, so
    the pieces of ``</ search>`` (``</``, ``search>``) concatenate to ``</search>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "\u2581x", "\u2581hello", "\u2581</", "\u2581search>", "\u2581world"]
    words += ["\u2581</search>", "\u2581a"]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    t.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def _successor_model(successor: dict[int, int], vocab: int):
    """A Llama whose greedy next token is ``successor[last token]``: one-hot embeddings, layers that add nothing,
    an output head mapping each token to its successor."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        for token, nxt in successor.items():
            model.lm_head.weight[nxt, token] = 1.0
    model.generation_config.eos_token_id = 2
    return model


def test_pieces_that_spell_a_stop_string_the_text_does_not_hold_do_not_stop_the_row() -> None:
    """``</ search>`` (pieces ``</``, ``search>``) is not the stop string ``</search>``: the row decodes on to the
    real one, in the call-at-a-time loop (growing and fixed buffers) and the continuous one."""
    tok = _sentencepiece_like()
    ids = tok.convert_tokens_to_ids(["\u2581x", "\u2581hello", "\u2581</", "\u2581search>", "\u2581world"])
    ids += tok.convert_tokens_to_ids(["\u2581</search>", "\u2581a"])
    model = _successor_model(dict(zip(ids[:-1], ids[1:], strict=True)), len(tok))
    assert tok.decode(ids[2:4]) == "</ search>" and tok.decode(ids[2]) + tok.decode(ids[3]) == "</search>"
    sp = SamplingParams(max_new_tokens=6, temperature=0.0, stop=("</search>",))
    want = (ids[1:6], "stop", "hello </ search> world </search>")
    for graphs in ("off", "static"):
        (c,) = HFGenerator(model, tok, graphs=graphs).generate([ids[:1]], sp)
        assert (c.token_ids, c.finish_reason, c.text) == want, graphs

    class One:
        def __init__(self) -> None:
            self.got: list = []

        def finished(self, key, completion):
            self.got.append(completion)
            return False

        def ready(self, wait):
            return [Segment(0, ids[:1], 6)] if not self.got and wait else None

    sched = One()
    HFGenerator(model, tok).decode_continuous(sched, sp)
    assert [(c.token_ids, c.finish_reason, c.text) for c in sched.got] == [want]


def test_sampling_params_and_prompts_out_of_range_fail_in_one_line() -> None:
    """A top-p outside (0, 1] or a negative temperature is refused when the parameters are made (a negative top-p
    once made the sampler index past the vocabulary); an empty prompt is refused before any decoding."""
    for bad in ({"top_p": 0.0}, {"top_p": -0.5}, {"top_p": 1.5}, {"temperature": -1.0}):
        with pytest.raises(ValueError, match="SamplingParams"):
            SamplingParams(**bad)
    gen = HFGenerator(tiny_model(), ByteTokenizer())
    with pytest.raises(ValueError, match="empty prompt"):
        gen.generate([[5, 6], []], SamplingParams(max_new_tokens=2))
