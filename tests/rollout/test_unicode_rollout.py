"""Rollouts over text outside plain ASCII English: an observation is cut between characters."""

from __future__ import annotations

import pytest

from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.rollout.observation import cut_observation

DOC = "मुंबई भारत का सबसे बड़ा शहर है। 東京は日本の首都です。🎉 Zürich "


@pytest.mark.parametrize("max_tokens", range(20, 60))
def test_an_observation_is_cut_between_characters(max_tokens: int) -> None:
    """Bytes as tokens, as a byte-level BPE splits a character of Hindi, Chinese or an emoji: the head's end and the
    tail's start must not fall inside one (the policy would read bytes that are no text, U+FFFD in the record)."""
    tok = ByteTokenizer()
    text = "<information>" + DOC * 5 + "🎉</information>"
    for room in (None, max_tokens - 5):
        ids, seen = cut_observation(tok, text, max_tokens, 16, room)
        assert "\ufffd" not in seen and seen == tok.decode(ids)
        assert len(ids) <= min(max_tokens, room or max_tokens) and len(ids) >= min(max_tokens, room or 99) - 9
        assert seen.endswith("</information>") or room is not None


def test_a_text_with_its_own_replacement_character_is_cut_as_before() -> None:
    tok = ByteTokenizer()
    ids, seen = cut_observation(tok, "\ufffd東京" * 10, 8, 4)
    assert len(ids) == 8


def test_a_rollout_records_whole_characters_of_a_cut_document() -> None:
    class Hindi:
        def search(self, queries, k):
            return [[Hit("d", "मुंबई", DOC * 10, 1.0)] for _ in queries]

    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    replies = iter([protocol.format_search(["मुंबई"]), "<answer> मुंबई </answer>"])
    limits = RolloutLimits(max_turns=2, max_new_tokens=100, max_obs_tokens=101, topk=1)
    engine = RolloutEngine(ScriptedGenerator(tok, lambda ctx: next(replies)), Hindi(), protocol, limits)
    (t,) = engine.run([QAExample("q", "मुंबई किस देश में है?", ["भारत"])])
    turn = t.turns[0]
    inserted = [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if not m]
    assert turn.observation == tok.decode(inserted) and "\ufffd" not in turn.observation
    assert turn.n_obs_tokens <= 101 and t.turns[-1].action == "answer"


@pytest.mark.parametrize("cap", range(40, 48))
def test_rag_r1_cuts_each_querys_documents_between_characters(cap: int) -> None:
    class Chinese:
        def search(self, queries, k):
            return [[Hit("d", "東京", "東京は日本の首都です。" * 20, 1.0)] for _ in queries]

    tok = ByteTokenizer()
    protocol = get_protocol("rag_r1", multi_query=True)
    replies = iter([protocol.format_search(["東京", "首都"]), "<answer> 東京 </answer>"])
    limits = RolloutLimits(max_turns=2, max_new_tokens=100, max_obs_tokens=5000, max_obs_tokens_per_query=cap)
    engine = RolloutEngine(ScriptedGenerator(tok, lambda ctx: next(replies)), Chinese(), protocol, limits)
    (t,) = engine.run([QAExample("q", "日本の首都は?", ["東京"])])
    assert "\ufffd" not in t.turns[0].observation and "Doc 1: 東京 東京は" in t.turns[0].observation


def test_a_summarised_page_is_cut_between_characters() -> None:
    from searchrl.retrieval.pages import PageSummarizer

    tok = ByteTokenizer()
    summarizer = PageSummarizer(ScriptedGenerator(tok, lambda ctx: "x"), max_new_tokens=10, max_page_tokens=50)
    for page in ("東京は日本の首都です。" * 20, "मुंबई भारत का सबसे बड़ा शहर है। " * 20):
        prompt = tok.decode(summarizer._prompt("q", page))
        assert "\ufffd" not in prompt and " ..." in prompt
