"""``rollout.force_answer``: what happens at the search budget (hint, silent, end, off), with a scripted model."""

from __future__ import annotations

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits, force_mode


class CountingRetriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"{q}-{i}", f"T{i}", f"text {i} on {q}", 1.0) for i in range(k)] for q in queries]


def always_search(mode: str, max_turns: int = 3, max_searches: int = 3, max_total_tokens: int = 50_000):
    """A model that searches on every turn and never answers."""
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["again"]))
    retriever = CountingRetriever()
    limits = RolloutLimits(
        max_turns=max_turns,
        max_searches=max_searches,
        topk=1,
        max_total_tokens=max_total_tokens,
        max_obs_tokens=500,
        force_answer=mode,
    )
    (t,) = RolloutEngine(gen, retriever, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    return protocol, retriever, t


def test_silent_gives_one_final_turn_with_nothing_inserted_and_no_search() -> None:
    protocol, retriever, t = always_search("silent", max_turns=2, max_searches=2)
    assert [turn.action for turn in t.turns] == ["search", "search", "none"]
    assert t.stop_reason == "no_answer" and sum(len(c) for c in retriever.calls) == 2
    assert t.turns[-1].observation == "" and t.action_mask[-1] == 1
    inserted = "".join(turn.observation for turn in t.turns)
    assert protocol.force_answer_text() not in inserted  # no hint anywhere


def test_silent_over_budget_search_goes_straight_to_the_final_turn() -> None:
    protocol, retriever, t = always_search("silent", max_turns=4, max_searches=1)
    assert [turn.action for turn in t.turns] == ["search", "search_over_budget", "none"]
    assert t.turns[1].observation == "" and t.turns[1].n_obs_tokens == 0  # the over-budget call gets no text
    assert t.stop_reason == "no_answer" and sum(len(c) for c in retriever.calls) == 1


def test_end_stops_the_sample_at_its_budget() -> None:
    _, retriever, t = always_search("end", max_turns=4, max_searches=2)
    assert [turn.action for turn in t.turns] == ["search", "search", "search_over_budget"]
    assert t.stop_reason == "max_searches" and sum(len(c) for c in retriever.calls) == 2
    assert t.turns[-1].observation == ""
    _, _, t2 = always_search("end", max_turns=2, max_searches=2)  # turn budget first: no extra turn either
    assert [turn.action for turn in t2.turns] == ["search", "none"] and t2.stop_reason == "max_turns"


def test_hint_inserts_the_protocol_text() -> None:
    protocol, _, t = always_search("hint", max_turns=2, max_searches=1)
    assert [turn.action for turn in t.turns] == ["search", "search_over_budget", "none"]
    assert t.turns[1].observation == protocol.force_answer_text()


def test_the_hint_before_the_final_turn_is_recorded_with_the_turn_it_follows() -> None:
    """The turns account for every response token: the viewer shows the hint, and counts add up."""
    from searchrl.rollout.trajectory import Trajectory

    protocol, _, t = always_search("hint", max_turns=2, max_searches=2)
    assert [turn.action for turn in t.turns] == ["search", "search", "none"]
    assert t.turns[1].hint == protocol.force_answer_text() and t.turns[1].n_hint_tokens > 0
    assert sum(x.n_gen_tokens + x.n_obs_tokens + x.n_hint_tokens for x in t.turns) == len(t.response_ids)
    assert Trajectory.from_dict(t.to_dict()).turns[1].hint == t.turns[1].hint


def test_a_hint_that_would_leave_no_room_for_the_final_turn_is_not_inserted() -> None:
    """Text the policy would never read (no turn could follow it) is neither scored nor trained on."""
    protocol, _, full = always_search("hint", max_turns=2, max_searches=2)
    hint = len(protocol.force_answer_text().encode())  # the byte tokenizer: one token a byte
    before = len(full.prompt_ids) + sum(t.n_gen_tokens + t.n_obs_tokens for t in full.turns[:2])
    _, _, t = always_search("hint", max_turns=2, max_searches=2, max_total_tokens=before + hint + 5)
    assert t.stop_reason == "length" and len(t.turns) == 2
    assert len(t.prompt_ids) + len(t.response_ids) == before  # nothing after the last turn it got


@pytest.mark.parametrize("value, mode", [(True, "hint"), (False, "off"), ("silent", "silent"), ("end", "end")])
def test_config_accepts_modes_and_booleans(value, mode) -> None:
    cfg = load_config(None, [f"rollout.force_answer={str(value).lower()}"])
    assert cfg.rollout.force_answer == mode == force_mode(value)


def test_unknown_mode_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="silent"):
        load_config(None, ["rollout.force_answer=maybe"])
    with pytest.raises(ValueError, match="hint, silent, end, off"):
        force_mode("maybe")
