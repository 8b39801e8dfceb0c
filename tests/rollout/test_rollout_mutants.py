"""Rollout engine behaviours pinned against plausible slips (each test names the slip it catches): the room a whole
inserted text must leave, what each turn's call asks the generator to keep, the cut of an observation at the tail's
length, and more; a scripted model and the byte tokenizer (one token a byte) give exact counts."""

from __future__ import annotations

from searchrl.data.records import QAExample
from searchrl.generation.base import Completion
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.protocols.base import Invalid
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.rollout.observation import truncate_observation


def prompt_len(tok, protocol, question: str = "Q?") -> int:
    return len(RolloutEngine(ScriptedGenerator(tok, lambda c: ""), None, protocol).prompt_ids(question))


def test_feedback_that_leaves_exactly_the_minimum_room_is_inserted_and_a_turn_follows() -> None:
    """Whole texts (feedback, hints) need 8 tokens of room after them for a turn; exactly 8 is enough.
    Slip caught: ``len(ids) + _MIN_ROOM >= room``."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    feedback = protocol.invalid_feedback(Invalid("no_action"))
    gen = ScriptedGenerator(tok, lambda ctx: "zz", eos=False)  # 2 tokens, no EOS: no action, feedback follows
    total = prompt_len(tok, protocol) + 2 + len(tok.encode(feedback)) + 8
    limits = RolloutLimits(max_turns=3, max_new_tokens=2, max_total_tokens=total, force_answer=False)
    (t,) = RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert t.turns[0].observation == feedback and t.turns[0].n_obs_tokens == len(tok.encode(feedback))
    assert t.n_turns == 2 and t.turns[1].text == "zz"


def test_only_the_last_turns_call_drops_its_caches() -> None:
    """A call that a later turn continues keeps its caches; the last turn's does not (nothing continues it).
    Slip caught: ``keep_cache=True`` on every call."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "zz", eos=False)
    limits = RolloutLimits(max_turns=3, max_new_tokens=2, max_obs_tokens=1000, force_answer=False)
    RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [p.keep_cache for p in gen.params] == [True, True, False]


def test_continue_after_eos_asks_the_generator_to_keep_the_caches_of_rows_that_end_in_eos() -> None:
    """Slip caught: ``keep_eos_rows`` not passed from ``continue_after_eos``."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    for continue_after_eos in (True, False):
        gen = ScriptedGenerator(tok, lambda ctx: "zz", eos=False)
        limits = RolloutLimits(max_turns=2, max_new_tokens=2, continue_after_eos=continue_after_eos)
        RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
        assert {p.keep_eos_rows for p in gen.params} == {continue_after_eos}


def test_an_observation_cut_to_exactly_the_tails_length_keeps_its_head() -> None:
    """A cap no longer than the tail leaves no room for a head and a tail: the head is kept, as under a smaller cap.
    Slip caught: ``max_tokens < tail`` (the last 16 tokens kept instead)."""
    ids = list(range(40))
    assert truncate_observation(ids, 16, 16) == list(range(16))
    assert truncate_observation(ids, 17, 16) == [0, *range(24, 40)]
    assert truncate_observation(ids, 40, 16) == ids


def test_the_samples_of_one_group_draw_from_different_streams() -> None:
    """A GRPO group's samples of one question must not sample alike: each row's stream comes from its uid, not its
    group. Slip caught: the stream key taken from ``group_id``."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "<answer> a </answer>")
    trajs = RolloutEngine(gen, None, protocol).run([QAExample("q", "Q?", ["a"])], group_size=3, seed=5)
    assert [t.uid for t in trajs] == ["q#0", "q#1", "q#2"]
    (params,) = gen.params
    assert len(set(params.row_seeds)) == 3


class EosAfterEachCall(ScriptedGenerator):
    """Writes the whole reply, a search call's closing tag included, then EOS (the stop strings are not seen)."""

    def _complete(self, ctx: str, max_new_tokens: int, stops: tuple[str, ...]) -> Completion:
        return super()._complete(ctx, max_new_tokens, ())


class Docs:
    def search(self, queries: list[str], k: int):
        from searchrl.retrieval.base import Hit

        return [[Hit(f"{q}-{i}", f"T{i}", "word " * 5, 1.0) for i in range(k)] for q in queries]


def test_continue_after_eos_keeps_the_eos_of_a_call_over_the_budget_that_ends_the_sample() -> None:
    """``end``: the call after ``max_searches`` ends the sample, so the EOS it ended in is the trajectory's last token
    and stays (it ends as any turn ending in EOS does); the EOS after the call that was run is dropped (documents
    follow it). Slip caught: the over-budget test ``n_searches > max_searches`` (one call late: that EOS dropped)."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    call = protocol.format_search(["q"])
    gen = EosAfterEachCall(tok, lambda ctx: call)
    limits = RolloutLimits(
        max_turns=4, max_searches=1, topk=1, max_obs_tokens=1000, force_answer="end", continue_after_eos=True
    )
    (t,) = RolloutEngine(gen, Docs(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == ["search", "search_over_budget"]
    assert t.stop_reason == "max_searches" and t.response_ids[-1] == tok.eos_token_id
    assert [turn.n_gen_tokens for turn in t.turns] == [len(call), len(call) + 1]
    assert t.response_ids.count(tok.eos_token_id) == 1


def test_a_generation_config_without_eos_gets_the_replys_end_as_a_single_id(tmp_path) -> None:
    """transformers writes one EOS id as a number: a config that had none gets the one id as a number, one that had
    one gets a list of both. Slip caught: a one-element list written for a lone id."""
    import json

    from searchrl.rollout.agent_file import stop_at_reply_end

    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps({"bos_token_id": 1}), encoding="utf-8")
    stop_at_reply_end(tmp_path, [7])
    assert json.loads(path.read_text(encoding="utf-8")) == {"bos_token_id": 1, "eos_token_id": 7}
    stop_at_reply_end(tmp_path, [9, 7])
    assert json.loads(path.read_text(encoding="utf-8"))["eos_token_id"] == [7, 9]


def test_a_records_own_metadata_wins_over_a_writers_field_of_the_same_name() -> None:
    """Keys a writer put beside the fields go into ``metadata``; one the metadata already holds keeps its value.
    Slip caught: the writer's field overwriting it."""
    from searchrl.rollout.trajectory import Trajectory

    d = {"uid": "q#0", "group_id": "q", "question_id": "q", "question": "Q?", "golds": [], "prompt_ids": [5]}
    t = Trajectory.from_dict({**d, "metadata": {"source": "mine", "k": 1}, "source": "writer", "extra": 2})
    assert t.metadata == {"source": "mine", "k": 1, "extra": 2}


def test_a_topk_given_wins_over_the_run_configs() -> None:
    """Slip caught: ``retrieval.topk`` taken even when a topk is given."""
    from searchrl.config import load_config

    cfg = load_config(None, ["retrieval.topk=5", "rollout.max_turns=6"])
    assert RolloutLimits.from_config(cfg).topk == 5
    assert RolloutLimits.from_config(cfg, topk=2).topk == 2
    assert RolloutLimits.from_config(cfg.rollout).topk == 3 and RolloutLimits.from_config(cfg).max_turns == 6


class BudgetLog(ScriptedGenerator):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.budgets: list[int] = []

    def _complete(self, ctx: str, max_new_tokens: int, stops: tuple[str, ...]) -> Completion:
        self.budgets.append(max_new_tokens)
        return super()._complete(ctx, max_new_tokens, stops)


def test_a_continuous_turns_budget_is_the_rows_room_when_that_is_less_than_max_new_tokens() -> None:
    """Slip caught: every segment given ``max_new_tokens`` (decoding past the row's room, only to be cut)."""
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    gen = BudgetLog(tok, lambda ctx: "zz", eos=False)  # 2 tokens a turn, no action: 2 + the feedback's tokens
    feedback = len(tok.encode(protocol.invalid_feedback(Invalid("no_action"))))
    total = prompt_len(tok, protocol) + 2 + feedback + 20
    limits = RolloutLimits(max_turns=3, max_new_tokens=50, max_total_tokens=total, continuous=True)
    RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert gen.budgets[:2] == [50, 20]
