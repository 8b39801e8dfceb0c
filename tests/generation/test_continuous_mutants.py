"""Continuous decoding's kept keys/values pinned with hand-counted prefill and reuse (each test names its slip): a
row handed back with no new token re-decodes its last one, and what a row keeps is bounded by the generator's
store, released when the row comes back, and nothing when reuse is off."""

from __future__ import annotations

import pytest

from searchrl.generation.base import Completion, SamplingParams, Segment
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.hf import HFGenerator
from searchrl.testing import tiny_model

#: bytes of one token's keys and values in the tiny model: 2 layers x (keys + values) x 2 heads x 16 dims x 4 bytes
TOKEN_BYTES = 2 * 2 * 2 * 16 * 4


class Turns:
    """One row: each finished segment comes back as ``next_context(context, tokens)`` until ``turns`` ran."""

    def __init__(self, prompt: list[int], budgets: list[int], next_context) -> None:
        self.budgets, self.next_context = budgets, next_context
        self.segments = [Segment(0, prompt, budgets[0], seed=0)]
        self.completions: list[Completion] = []
        self.sent = 0

    def ready(self, wait: bool) -> list[Segment] | None:
        if self.sent == len(self.segments):
            return None if len(self.completions) == len(self.budgets) else []
        self.sent += 1
        return [self.segments[-1]]

    def finished(self, key: int, completion: Completion) -> bool:
        self.completions.append(completion)
        turn = len(self.completions)
        if turn == len(self.budgets):
            return False
        context = self.next_context(self.segments[-1].context, completion.token_ids)
        self.segments.append(Segment(0, context, self.budgets[turn], seed=turn))
        return True


def _no_eos(gen: HFGenerator) -> None:
    gen.eos_ids = []  # every segment runs its whole budget: the counts below are exact


def test_a_row_handed_back_without_its_last_token_decodes_it_again() -> None:
    """The kept keys/values cover the context and every sampled token but the last, so a row handed back as exactly
    that still has one token to prefill: greedy decoding samples the same last token. Slip caught: the whole handed
    back context taken from the kept keys/values (nothing left to prefill)."""
    tok, model = ByteTokenizer(), tiny_model()
    gen = HFGenerator(model, tok)
    _no_eos(gen)
    sched = Turns(tok.encode("Q: who?\nA:"), [4, 3], lambda ctx, toks: ctx + toks[:-1])
    gen.decode_continuous(sched, SamplingParams(temperature=0.0))
    first, second = (c.token_ids for c in sched.completions)
    assert second[0] == first[-1] and len(second) == 3
    assert gen.stats["reused_tokens"] == len(sched.segments[1].context) - 1
    (alone,) = HFGenerator(model, tok).generate([sched.segments[1].context], SamplingParams(3, 0.0))
    assert alone.token_ids == second


@pytest.mark.parametrize("setting", [{"store_bytes": 0}, {"reuse_prefixes": False}])
def test_no_keys_values_are_kept_without_room_or_reuse(setting: dict) -> None:
    """Slips caught: a row's keys/values kept past the store's budget, or kept with reuse turned off."""
    tok = ByteTokenizer()
    gen = HFGenerator(tiny_model(), tok, **setting)
    _no_eos(gen)
    obs = tok.encode(" [obs] ")
    sched = Turns(tok.encode("Q: who?\nA:"), [3, 3], lambda ctx, toks: ctx + toks + obs)
    gen.decode_continuous(sched, SamplingParams(temperature=0.0))
    assert gen.stats["reused_tokens"] == 0
    assert gen.stats["prefill_tokens"] == 10 + (10 + 3 + 7)  # each context whole: "Q: who?\nA:" is 10 bytes


def test_a_kept_row_gives_its_bytes_back_when_it_returns() -> None:
    """The store's budget fits the keys/values kept after the second turn and no more: kept after the first, given
    back when the row returns, kept after the second. Slips caught: the bytes of a returned row still counted (the
    second keep refused), or one slot more kept than the tokens it covers."""
    tok = ByteTokenizer()
    obs = tok.encode(" [obs] ")  # 7 bytes
    # contexts: 10 tokens, then 10 + 4 + 7 = 21, then 21 + 4 + 7 = 32; kept after each: context + 3 sampled tokens
    gen = HFGenerator(tiny_model(), tok, store_bytes=24 * TOKEN_BYTES)
    _no_eos(gen)
    sched = Turns(tok.encode("Q: who?\nA:"), [4, 4, 4], lambda ctx, toks: ctx + toks + obs)
    gen.decode_continuous(sched, SamplingParams(temperature=0.0))
    assert [len(s.context) for s in sched.segments] == [10, 21, 32]
    assert gen.stats["reused_tokens"] == 13 + 24
    assert gen.stats["prefill_tokens"] == 10 + 8 + 8  # the last sampled token and the observation


def test_a_row_is_given_room_for_its_whole_budget_when_it_enters() -> None:
    """A 62-token context with 8 tokens to decode needs 69 slots, past the first block of 64. Slip caught: slots
    sized for the context alone (the step that writes slot 64 runs off the buffer)."""
    tok = ByteTokenizer()
    gen = HFGenerator(tiny_model(), tok)
    _no_eos(gen)
    sched = Turns(tok.encode("Q" * 62), [8], lambda ctx, toks: ctx)
    gen.decode_continuous(sched, SamplingParams(temperature=0.0))
    assert len(sched.completions[0].token_ids) == 8


def test_a_stop_string_written_one_token_a_character_stops_the_row_at_its_last_character() -> None:
    """The tiny model greedily writes ':' after ':' (one byte, one token), so the 4-character stop completes at the
    fourth token and the row leaves the batch there. Slip caught: a text tail kept between tokens one character too
    short (the stop never seen whole while decoding: the row runs its whole budget, cut to the stop at the end)."""
    tok, model = ByteTokenizer(), tiny_model()
    gen = HFGenerator(model, tok)
    _no_eos(gen)
    sched = Turns(tok.encode("Q: who?\nA:"), [24], lambda ctx, toks: ctx + toks)
    gen.decode_continuous(sched, SamplingParams(temperature=0.0, stop=("::::",)))
    (comp,) = sched.completions
    assert comp.token_ids == tok.encode("::::") and comp.finish_reason == "stop"
    assert gen.stats["decode_row_steps"] == 4  # not the budget's 24
