"""The rollout engine with a scripted model: exact provenance masks, aligned log-probs, one retrieval call a turn."""

from __future__ import annotations

import pytest

from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import PROTOCOLS, get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits


class CountingRetriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [
            [Hit(f"{q}-{i}", f"Title {i} of {q}", f"text {i} about {q}", 1.0 / (i + 1)) for i in range(k)]
            for q in queries
        ]


def options(name: str) -> dict:
    return {"multi_query": True, "max_queries": 3} if name == "rag_r1" else {}


def two_step_script(protocol, n_queries: int = 1):
    """First turn: some reasoning, a search call, then junk the stop string must cut. Second turn: the answer."""

    def script(context: str) -> str:
        q = context.split("QUESTION-")[-1].split()[0] if "QUESTION-" in context else "x"
        if "Title 0 of" not in context:
            queries = [f"about {q} part {j}" for j in range(n_queries)]
            return f"I should look up {q}. " + protocol.format_search(queries) + " NEVER-SAMPLED"
        return f"Found it for {q}. " + protocol.format_answer(f"answer {q}") + " trailing"

    return script


def run(name: str, n_questions: int = 3, n_queries: int = 1):
    tok = ByteTokenizer()
    protocol = get_protocol(name, **options(name))
    gen = ScriptedGenerator(tok, two_step_script(protocol, n_queries))
    retriever = CountingRetriever()
    limits = RolloutLimits(
        max_turns=3, max_searches=2, max_new_tokens=400, max_obs_tokens=2000, max_total_tokens=20000, topk=2
    )
    engine = RolloutEngine(gen, retriever, protocol, limits)
    examples = [QAExample(f"id{i}", f"QUESTION-{i} what?", [f"answer {i}"]) for i in range(n_questions)]
    trajs = engine.run(examples, group_size=2, seed=0)
    return tok, protocol, gen, retriever, trajs


@pytest.mark.parametrize("name", sorted(n for n, p in PROTOCOLS.items() if p.searches))
def test_masks_give_exactly_sampled_and_inserted_text(name: str) -> None:
    tok, protocol, gen, retriever, trajs = run(name)
    assert len(trajs) == 6
    for t in trajs:
        assert t.stop_reason == "answer", (t.stop_reason, [turn.text for turn in t.turns])
        assert len(t.response_ids) == len(t.action_mask) == len(t.logprobs)
        sampled = tok.decode(
            [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if m], skip_special_tokens=True
        )
        inserted = tok.decode([i for i, m in zip(t.response_ids, t.action_mask, strict=True) if not m])
        assert sampled == "".join(turn.text for turn in t.turns)
        assert inserted == "".join(turn.observation for turn in t.turns)
        assert "NEVER-SAMPLED" not in sampled
        assert t.turns[0].action == "search" and t.turns[-1].action == "answer"
        assert t.answer is not None and t.answer.strip() == f"answer {t.question_id[2:]}"
        # Log-probs sit exactly on the sampled positions (the scripted model's are all < 0).
        for lp, m in zip(t.logprobs, t.action_mask, strict=True):
            assert (lp < 0) if m else (lp == 0.0)
        segments = t.segments(tok)
        assert [s for s, sampled_flag in segments if not sampled_flag] == [
            turn.observation for turn in t.turns if turn.observation
        ]


@pytest.mark.parametrize("name", sorted(n for n, p in PROTOCOLS.items() if p.searches))
def test_one_retriever_call_per_turn(name: str) -> None:
    _, _, gen, retriever, trajs = run(name, n_questions=4)
    # Turn 1: all 8 trajectories search -> exactly one call carrying 8 queries; turn 2: all answer -> no call.
    assert len(gen.calls) == 2 and len(gen.calls[0]) == 8
    assert len(retriever.calls) == 1 and len(retriever.calls[0]) == 8


def test_multi_query_fans_out_and_regroups() -> None:
    _, _, _, retriever, trajs = run("rag_r1", n_questions=2, n_queries=3)
    assert len(retriever.calls) == 1 and len(retriever.calls[0]) == 4 * 3
    for t in trajs:
        turn = t.turns[0]
        assert len(turn.queries) == 3 and len(turn.hit_ids) == 3
        for q, ids in zip(turn.queries, turn.hit_ids, strict=True):
            assert ids == [f"{q}-0", f"{q}-1"]


def test_search_budget_and_force_answer() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["again"]))  # never answers
    retriever = CountingRetriever()
    engine = RolloutEngine(
        gen,
        retriever,
        protocol,
        RolloutLimits(max_turns=4, max_searches=2, topk=1, max_total_tokens=50000, max_obs_tokens=500),
    )
    (t,) = engine.run([QAExample("q", "Q?", ["a"])])
    assert t.n_searches == 2
    assert [turn.action for turn in t.turns] == [
        "search",
        "search",
        "search_over_budget",
        "search_over_budget",
        "none",
    ]
    assert t.stop_reason == "no_answer" and t.answer is None
    assert sum(len(c) for c in retriever.calls) == 2


def test_invalid_action_gets_feedback_and_eos_ends() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    replies = iter(["I will just ramble"])

    def script(ctx: str) -> str:
        return next(replies, "still rambling")

    gen = ScriptedGenerator(tok, script, eos=False)
    limits = RolloutLimits(max_turns=2, max_new_tokens=100, max_obs_tokens=1000, force_answer=False)
    engine = RolloutEngine(gen, CountingRetriever(), protocol, limits)
    (t,) = engine.run([QAExample("q", "Q?", ["a"])])
    first = t.turns[0]
    assert first.action == "invalid" and first.observation
    assert first.observation == protocol.invalid_feedback(protocol.parse(first.text))
    assert t.n_turns == 2 and t.stop_reason == "max_turns"
    gen_eos = ScriptedGenerator(tok, lambda ctx: "no action here")
    (t2,) = RolloutEngine(gen_eos, None, protocol).run([QAExample("q", "Q?", ["a"])])
    assert t2.stop_reason == "eos" and t2.n_turns == 1


def t2_eos_kept(tok, protocol) -> bool:
    """Without continue_after_eos the EOS that ends the trajectory stays its last token."""
    (t,) = RolloutEngine(ScriptedGenerator(tok, lambda ctx: "x"), None, protocol).run([QAExample("q", "Q?", ["a"])])
    return t.response_ids[-1] == tok.eos_token_id


def test_continue_after_eos_gives_a_turn_without_action_the_feedback() -> None:
    # Search-R1's loop cuts turns at tags only: a turn with no action gets the invalid-action text, EOS or not
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    replies = iter(["no action here", "<answer> a </answer>"])
    gen = ScriptedGenerator(tok, lambda ctx: next(replies))  # each turn ends in EOS
    limits = RolloutLimits(max_turns=3, max_new_tokens=100, max_obs_tokens=1000, continue_after_eos=True)
    (t,) = RolloutEngine(gen, CountingRetriever(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    first = t.turns[0]
    assert first.action == "invalid" and first.observation == protocol.invalid_feedback(protocol.parse(first.text))
    assert t.stop_reason == "answer" and t.answer == "a" and t.n_turns == 2
    # the first turn's EOS token is dropped (text follows it); the answer turn ends at its stop string
    assert tok.eos_token_id not in t.response_ids and t2_eos_kept(tok, protocol)
    assert len(t.logprobs) == len(t.response_ids)
    assert tok.decode(t.response_ids).count(protocol.invalid_feedback(protocol.parse(first.text))) == 1
    # an answer that ends in EOS (R1-Searcher++'s \boxed{} has no stop string) keeps its EOS: nothing follows
    boxed = get_protocol("r1_searcher_pp")
    gen = ScriptedGenerator(tok, lambda ctx: "I know it. \\boxed{a}")
    roomy = RolloutLimits(max_turns=3, max_new_tokens=100, max_total_tokens=20000, continue_after_eos=True)
    (t,) = RolloutEngine(gen, CountingRetriever(), boxed, roomy).run([QAExample("q", "Q?", ["a"])])
    assert t.stop_reason == "answer" and t.answer == "a" and t.response_ids[-1] == tok.eos_token_id


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("name", ["search_r1", "search_o1"])
def test_feedback_that_does_not_fit_whole_is_not_cut_into_an_answer(name: str, continuous: bool) -> None:
    """The invalid-action text quotes the answer syntax ("between <answer> and </answer>", "\\boxed{answer}"): a
    copy cut to the room left would end in that syntax and read as the model's answer. It goes in whole or the
    trajectory stops (``length``), with nothing inserted and no answer."""
    tok, protocol = ByteTokenizer(), get_protocol(name)
    gen = ScriptedGenerator(tok, lambda ctx: "thinking without any tag " * 3, eos=False)
    feedback = len(tok.encode(protocol.invalid_feedback(protocol.parse("thinking"))))
    (prompt,) = [len(RolloutEngine(gen, None, protocol).prompt_ids("Q?"))]
    for room_after_turn, fits in ((feedback - 5, False), (feedback + 40, True)):
        total = prompt + len(tok.encode("thinking without any tag " * 3)) + room_after_turn
        limits = RolloutLimits(
            max_turns=2, max_new_tokens=200, max_obs_tokens=8, max_total_tokens=total, continuous=continuous
        )
        (t,) = RolloutEngine(gen, CountingRetriever(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
        first = t.turns[0]
        assert first.action == "invalid" and (first.n_obs_tokens == feedback) == fits, (room_after_turn, first)
        assert t.answer is None and not protocol.check_format(tok.decode(t.response_ids)).has_answer
        if not fits:
            assert t.stop_reason == "length" and first.observation == "" and t.n_turns == 1


def test_an_invalid_forced_final_turn_counts_as_invalid() -> None:
    tok, protocol = ByteTokenizer(), get_protocol("search_r1")
    replies = iter([protocol.format_search(["q"]), "no tags at all"])
    gen = ScriptedGenerator(tok, lambda ctx: next(replies), eos=False)
    limits = RolloutLimits(max_turns=1, max_new_tokens=100, max_total_tokens=20000, force_answer="hint")
    (t,) = RolloutEngine(gen, CountingRetriever(), protocol, limits).run([QAExample("q", "Q?", ["a"])])
    assert [turn.action for turn in t.turns] == ["search", "invalid"] and t.stop_reason == "no_answer"


def test_total_length_never_drops_the_question() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["more"]))
    limits = RolloutLimits(
        max_turns=10, max_searches=10, max_new_tokens=64, max_obs_tokens=100, max_total_tokens=1200, topk=3
    )
    (t,) = RolloutEngine(gen, CountingRetriever(), protocol, limits).run([QAExample("q", "QUESTION-0 who?", ["a"])])
    assert t.stop_reason == "length"
    assert len(t.prompt_ids) + len(t.response_ids) <= 1200
    assert "QUESTION-0 who?" in tok.decode(t.prompt_ids)
    assert max(turn.n_obs_tokens for turn in t.turns) <= 100


@pytest.mark.parametrize("force_answer", [False, True])
def test_nothing_is_inserted_after_the_last_turn(force_answer: bool) -> None:
    """The policy never reads text inserted after its last turn, so none is: no feedback, no observation, and the
    last turn's search call is not run."""
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    retriever = CountingRetriever()
    replies = {"invalid": "I am not sure what to do", "search": protocol.format_search(["paris"])}
    for kind, reply in replies.items():
        gen = ScriptedGenerator(tok, lambda ctx, r=reply: r, eos=False)
        limits = RolloutLimits(max_turns=1, max_searches=2, max_new_tokens=200, force_answer=force_answer)
        t = RolloutEngine(gen, retriever, protocol, limits).run([QAExample("q", "Where?", ["Paris"])])[0]
        last = t.turns[-1]
        assert last.observation == "" and last.n_obs_tokens == 0, kind
        assert t.action_mask[-1] == 1, f"{kind}: the response ends with inserted tokens"
        assert t.stop_reason == ("no_answer" if force_answer else "max_turns")
    # forced: the first turn's search runs, the forced turn's does not; otherwise the only turn is the last one
    assert len(retriever.calls) == (1 if force_answer else 0)


def test_completion_cut_by_the_total_length_limit_finishes_with_length() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: "x" * 50 + " <answer> a </answer>")  # ends with EOS when not cut
    prompt_len = len(RolloutEngine(gen, None, protocol).prompt_ids("Where?"))
    limits = RolloutLimits(max_turns=1, max_new_tokens=400, max_total_tokens=prompt_len + 20, force_answer=False)
    t = RolloutEngine(gen, None, protocol, limits).run([QAExample("q", "Where?", ["a"])])[0]
    assert t.turns[0].finish_reason == "length" and len(t.response_ids) == 20


class LongDocRetriever:
    """Every hit is ~300 bytes long, so each query's documents are ~600 byte tokens at top-2."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", f"T{i}", f"{q} " + "word " * 60, 1.0) for i in range(k)] for q in queries]


@pytest.mark.parametrize("multi", [True, False])
def test_rag_r1_caps_each_querys_documents_not_the_whole_observation(multi: bool) -> None:
    """RAG-R1's code cuts each query's documents to max_obs_length tokens, then builds the JSON of all queries:
    three queries keep three capped document strings, far more than one cap in all."""
    import json

    tok = ByteTokenizer()
    protocol = get_protocol("rag_r1", multi_query=multi, max_queries=3)
    cap = 100
    limits = RolloutLimits(
        max_turns=2,
        max_searches=1,
        max_new_tokens=400,
        max_obs_tokens=5000,
        max_total_tokens=20000,
        topk=2,
        max_obs_tokens_per_query=cap,
    )
    engine = RolloutEngine(
        ScriptedGenerator(tok, two_step_script(protocol, 3 if multi else 1)), LongDocRetriever(), protocol, limits
    )
    traj = engine.run([QAExample("id0", "QUESTION-0 what?", ["answer 0"])], group_size=1, seed=0)[0]
    obs = traj.turns[0].observation
    body = obs.split("<information>\n", 1)[1].rsplit("\n</information>", 1)[0]
    docs = json.loads(body)["documents"] if multi else [body]
    assert len(docs) == (3 if multi else 1)
    for d in docs:
        assert len(tok.encode(d, add_special_tokens=False)) == cap and d.startswith("Doc 1: T0 about 0 part")
    assert traj.turns[0].n_obs_tokens > (3 * cap if multi else cap)  # the wrapper (and JSON) come on top


def test_per_query_cap_is_refused_by_other_protocols() -> None:
    limits = RolloutLimits(max_obs_tokens_per_query=100)
    with pytest.raises(ValueError, match="only rag_r1"):
        RolloutEngine(
            ScriptedGenerator(ByteTokenizer(), lambda c: ""), LongDocRetriever(), get_protocol("search_r1"), limits
        )


def test_a_cut_observation_is_recorded_as_the_policy_reads_it() -> None:
    # diagnostics and rewards read turn.observation: a document cut from the middle must not be in it
    class LongDoc:
        def search(self, queries, k):
            return [[Hit("d", "T", "head " * 40 + "GOLDEN " + "tail " * 40, 1.0)] for _ in queries]

    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    replies = iter([protocol.format_search(["q"]), "<answer> a </answer>"])
    limits = RolloutLimits(max_turns=2, max_new_tokens=100, max_obs_tokens=120, topk=1)
    engine = RolloutEngine(ScriptedGenerator(tok, lambda ctx: next(replies)), LongDoc(), protocol, limits)
    (t,) = engine.run([QAExample("q", "Q?", ["a"])])
    turn = t.turns[0]
    inserted = [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if not m]
    assert turn.n_obs_tokens == len(inserted) == 120
    assert turn.observation == tok.decode(inserted) and "GOLDEN" not in turn.observation
    assert "GOLDEN" not in t.retrieved_text and turn.observation.endswith("</information>\n\n")


def test_a_retriever_of_ones_own_is_checked_with_a_one_line_error() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["q"]))
    with pytest.raises(TypeError, match=r"has no search method: give an object with search\(queries"):
        RolloutEngine(gen, lambda queries, k: [], protocol)  # a bare function

    class Returns:
        def __init__(self, value) -> None:
            self.value = value

        def search(self, queries, k):
            return self.value

    for value, match in [
        ([], r"Returns.search returned 0 lists for 1 queries"),
        ([{"id": "d", "contents": "x"}], r"returned a dict for a query's results"),
        ([["a passage"]], r"returned a str as a hit: each must be a searchrl.retrieval.base.Hit"),
    ]:
        engine = RolloutEngine(gen, Returns(value), protocol, RolloutLimits(max_turns=2, force_answer=False))
        with pytest.raises(TypeError, match=match):
            engine.run([QAExample("q", "Q?", ["a"])])


def test_an_observation_cap_below_the_kept_tail_still_holds() -> None:
    from searchrl.rollout.observation import truncate_observation

    ids = list(range(100))
    assert truncate_observation(ids, 40) == ids[:24] + ids[-16:]  # the head, then the closing tail
    assert truncate_observation(ids, 8) == ids[:8] and truncate_observation(ids, 0) == []
    assert truncate_observation(ids, 100) == ids
