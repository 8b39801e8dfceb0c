"""The rollout engine at the edges of its limits, with a scripted model and the byte tokenizer (one token a byte):
the room a turn needs, an observation that fills the context to its last token, a completion longer than its row's
room, the EOS of a last turn, a search call that runs on to its EOS, and the seeds each turn's call gets."""

from __future__ import annotations

import pytest

from searchrl.data.records import QAExample
from searchrl.generation.base import Completion
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits


class Docs:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", f"T{i}", "word " * 40, 1.0) for i in range(k)] for q in queries]


def prompt_len(tok, protocol, question: str = "Q?") -> int:
    return len(RolloutEngine(ScriptedGenerator(tok, lambda c: ""), None, protocol).prompt_ids(question))


def test_a_trajectory_with_exactly_the_minimum_room_still_gets_its_turn() -> None:
    """Room below 8 tokens ends a trajectory before its turn (``length``); 8 is enough for one."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "ab")  # 2 bytes, then EOS
    for room, turns in ((8, 1), (7, 0)):
        limits = RolloutLimits(max_turns=1, max_total_tokens=prompt_len(tok, protocol) + room, force_answer=False)
        (t,) = RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
        assert t.n_turns == turns, room
        assert t.stop_reason == ("eos" if turns else "length")


def test_an_observation_cut_to_the_last_token_of_room_is_inserted_then_the_trajectory_stops() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    call = protocol.format_search(["q"])
    gen = ScriptedGenerator(tok, lambda ctx: call)
    room_after_call = 30  # the observation is ~200 bytes long: cut to exactly these 30 tokens
    total = prompt_len(tok, protocol) + len(call) + room_after_call
    limits = RolloutLimits(max_turns=3, max_searches=3, topk=1, max_obs_tokens=1000, max_total_tokens=total)
    (t,) = RolloutEngine(gen, Docs(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == ["search"]
    assert t.turns[0].n_obs_tokens == 30 and t.action_mask.count(0) == 30
    assert len(t.prompt_ids) + len(t.response_ids) == total and t.stop_reason == "length"


def test_a_completion_longer_than_its_rows_room_is_cut_and_finishes_with_length() -> None:
    """Rows of one call share its token budget (the roomiest row's): a row with less room has its completion cut
    by the engine, which then finishes it with ``length``, not with the EOS the generator saw past the cut."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "y" * 50)  # 50 bytes and an EOS: no action
    short, long = "Q?", "z" * 30 + "Q?"  # the long question leaves its row 30 tokens less room
    limits = RolloutLimits(
        max_turns=2, max_new_tokens=400, max_total_tokens=prompt_len(tok, protocol, short) + 60, force_answer=False
    )
    a, b = RolloutEngine(gen, None, protocol, limits).run([QAExample("s", short, ["a"]), QAExample("l", long, ["a"])])
    assert a.turns[0].finish_reason == "eos" and a.turns[0].n_gen_tokens == 51 and a.stop_reason == "eos"
    assert b.turns[0].finish_reason == "length" and b.turns[0].n_gen_tokens == 30
    assert b.turns[0].text == "y" * 30 and b.stop_reason == "length"


def test_continue_after_eos_keeps_the_eos_of_the_last_turn() -> None:
    """Nothing follows the last turn, so its EOS stays (the policy learns to end) and it ends the trajectory."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "no action here")
    limits = RolloutLimits(max_turns=1, max_new_tokens=100, continue_after_eos=True, force_answer=False)
    (t,) = RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert t.response_ids[-1] == tok.eos_token_id and t.stop_reason == "eos"
    assert t.turns[0].action == "invalid" and t.turns[0].n_gen_tokens == len("no action here") + 1


class EndOfTurnGenerator(ScriptedGenerator):
    """Ends each turn with token 1, a special token of the tokenizer other than its ``eos_token_id`` (a chat
    model's end of turn, e.g. Qwen's ``<|im_end|>``), and has no ``eos_ids`` of its own (a server's client)."""

    def _complete(self, ctx: str, max_new_tokens: int, stops: tuple[str, ...]) -> Completion:
        c = super()._complete(ctx, max_new_tokens, stops)
        if c.finish_reason == "eos":
            c.token_ids[-1] = 1
        return c


def test_continue_after_eos_drops_an_end_of_turn_token_the_tokenizer_lists_as_special() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    replies = iter(["no action here", "<answer> a </answer>"])
    gen = EndOfTurnGenerator(tok, lambda ctx: next(replies))
    limits = RolloutLimits(max_turns=3, max_new_tokens=100, max_obs_tokens=1000, continue_after_eos=True)
    (t,) = RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert t.stop_reason == "answer" and t.turns[0].action == "invalid"
    assert 1 not in t.response_ids and t.turns[0].n_gen_tokens == len("no action here")


def test_each_turns_call_gets_its_own_seed() -> None:
    """Backends that seed a call, not a row (an OpenAI-compatible server), must not draw every turn alike."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(
        tok, lambda ctx: "<answer> a </answer>" if "word word" in ctx else protocol.format_search(["q"])
    )
    limits = RolloutLimits(max_turns=3, max_obs_tokens=1000, topk=1)
    RolloutEngine(gen, Docs(), protocol, limits).run([QAExample("q", "Q?", ["a"])], seed=7)
    assert [p.seed for p in gen.params] == [7, 8]
    assert gen.params[0].row_seeds != gen.params[1].row_seeds


class Log(Docs):
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return super().search(queries, k)


def test_a_call_past_the_budget_gets_the_protocols_over_budget_text() -> None:
    """``tool_call``'s over-budget text is a reply in the chat frame, not the hint that opens the final turn."""
    tok, protocol = ByteTokenizer(), get_protocol("tool_call")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["q"]))
    limits = RolloutLimits(
        max_turns=3, max_searches=1, topk=1, max_obs_tokens=1000, max_total_tokens=20000, force_answer="off"
    )
    (t,) = RolloutEngine(gen, Docs(), protocol, limits, prompt_style="raw").run([QAExample("q", "Q?", ["a"])])
    over = t.turns[1]
    assert over.action == "search_over_budget"
    assert over.observation.startswith("\n<tool_response>\n") and over.observation.endswith("</tool_response>\n")
    assert "The search budget is used up, so this call was not run." in over.observation


def test_an_invalid_action_gets_the_feedback_for_its_reason() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    replies = iter(["<search>   </search>", "<answer> a </answer>"])
    gen = ScriptedGenerator(tok, lambda ctx: next(replies))
    (t,) = RolloutEngine(gen, Docs(), protocol, RolloutLimits(max_obs_tokens=1000)).run([QAExample("q", "Q?", ["a"])])
    assert t.turns[0].invalid_reason == "empty_query"
    assert "the search call held no query" in t.turns[0].observation


def test_a_multi_query_call_with_one_new_query_is_run_and_repeats_are_not_counted() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("rag_r1", multi_query=True, max_queries=3)
    replies = iter([protocol.format_search(["a"]), protocol.format_search(["a"]), protocol.format_search(["a", "b"])])
    gen = ScriptedGenerator(tok, lambda ctx: next(replies, "<answer> x </answer>"))
    retriever, limits = Log(), RolloutLimits(max_turns=5, max_searches=5, topk=1, max_obs_tokens=5000)
    engine = RolloutEngine(gen, retriever, protocol, limits, repeated_query_text="\n(searched already)\n")
    (t,) = engine.run([QAExample("q", "Q?", ["x"])])
    assert [turn.action for turn in t.turns] == ["search", "search_repeated", "search", "answer"]
    assert retriever.calls == [["a"], ["a", "b"]]
    assert t.n_searches == 2 and t.turns[1].observation == "\n(searched already)\n"
    assert "(searched already)" not in t.retrieved_text


def test_the_rag_protocols_prompt_documents_are_part_of_what_the_trajectory_read() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("rag")

    class Gold:
        def search(self, queries: list[str], k: int) -> list[list[Hit]]:
            return [[Hit("d1", "Oslo", "Oslo is the capital of Norway.", 1.0)] for _ in queries]

    gen = ScriptedGenerator(tok, lambda ctx: "<think> x </think> <answer> Oslo </answer>")
    (t,) = RolloutEngine(gen, Gold(), protocol, RolloutLimits(topk=1)).run([QAExample("q", "Capital?", ["Oslo"])])
    assert t.retrieved_text == "Oslo Oslo is the capital of Norway."


def test_a_trajectorys_format_report_is_the_protocols_when_every_result_block_was_inserted() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    replies = iter(["<think> a </think> <search> q </search>", "<think> b </think> <answer> a </answer>"])
    gen = ScriptedGenerator(tok, lambda ctx: next(replies))
    (t,) = RolloutEngine(gen, Docs(), protocol, RolloutLimits(topk=1, max_obs_tokens=1000)).run(
        [QAExample("q", "Q?", ["a"])]
    )
    report = t.format_report(protocol, tok)
    assert report.ok and report.problems == () and report.n_searches == 1 and report.answer == "a"
    assert t.policy_text == "<think> a </think> <search> q </search><think> b </think> <answer> a </answer>"


class NoStopGenerator(ScriptedGenerator):
    """Ignores stop strings: a search call runs on to the EOS (a backend that missed the stop string)."""

    def _complete(self, ctx: str, max_new_tokens: int, stops: tuple[str, ...]) -> Completion:
        return super()._complete(ctx, max_new_tokens, ())


@pytest.mark.parametrize(
    ("mode", "continue_after_eos"), [("hint", False), ("silent", False), ("off", False), ("end", False), ("end", True)]
)
def test_a_call_past_the_budget_that_ends_in_eos_is_recorded_over_budget_and_ends_the_sample(
    mode: str, continue_after_eos: bool
) -> None:
    """As at its stop string, the call is over the budget (not run); its EOS ends the sample (``eos``; ``end``
    mode's own reason, ``max_searches``, under ``end``)."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = NoStopGenerator(tok, lambda ctx: "<search> q </search>")
    limits = RolloutLimits(
        max_turns=4,
        max_searches=1,
        topk=1,
        max_obs_tokens=1000,
        force_answer=mode,
        continue_after_eos=continue_after_eos,
    )
    retriever = Log()
    (t,) = RolloutEngine(gen, retriever, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == ["search", "search_over_budget"]
    assert [turn.finish_reason for turn in t.turns] == ["eos", "eos"]
    assert t.stop_reason == ("max_searches" if mode == "end" else "eos")  # `end`'s reason, at a stop string too
    assert retriever.calls == [["q"]] and t.turns[1].observation == "" and t.response_ids[-1] == tok.eos_token_id


@pytest.mark.parametrize(
    ("mode", "max_turns", "continue_after_eos", "actions"),
    [
        ("off", 1, False, ["none"]),  # the last turn: within the budget, but nothing follows it
        ("hint", 1, False, ["search", "none"]),  # the forced final turn after max_turns
        ("silent", 4, True, ["search", "search_over_budget", "none"]),  # the final turn after an over-budget call
    ],
)
def test_a_search_call_in_a_turn_that_runs_none_is_no_action_when_it_ends_in_eos(
    mode: str, max_turns: int, continue_after_eos: bool, actions: list[str]
) -> None:
    """As at its stop string: a turn that runs no search records its call as no action, over the budget or not."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = NoStopGenerator(tok, lambda ctx: "<search> q </search>")
    limits = RolloutLimits(
        max_turns=max_turns,
        max_searches=5 if mode != "silent" else 1,
        topk=1,
        max_obs_tokens=1000,
        force_answer=mode,
        continue_after_eos=continue_after_eos,
    )
    (t,) = RolloutEngine(gen, Log(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == actions and t.stop_reason == "eos"


@pytest.mark.parametrize("continue_after_eos", [False, True])
def test_a_search_call_that_is_run_drops_its_eos_so_its_documents_do_not_follow_an_end_of_turn(
    continue_after_eos: bool,
) -> None:
    """A backend that missed the stop string: the call ran on to its EOS. The call is run; the EOS is not kept."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    call = "<search> q </search>"
    gen = NoStopGenerator(tok, lambda ctx: call if ctx.count("<search>") < 2 else "<answer> a </answer>")
    limits = RolloutLimits(
        max_turns=4, max_searches=2, topk=1, max_obs_tokens=1000, continue_after_eos=continue_after_eos
    )
    (t,) = RolloutEngine(gen, Log(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == ["search", "answer"] and t.stop_reason == "answer"
    assert t.turns[0].n_gen_tokens == len(call)  # one token a byte: the call's bytes, no EOS
    assert t.response_ids.count(tok.eos_token_id) == 1 and t.response_ids[-1] == tok.eos_token_id  # the answer's
