"""Continuous batching across turns (``rollout.continuous``) gives the same trajectories as the turn-synchronous loop.

A tiny random Llama over the byte tokenizer (untied, wide initialisation: greedy decoding then depends on the context
instead of repeating the last byte; fp64) writes random bytes; :class:`RandomActions` reads them as actions (a turn
ending in "(" or "?" searches, one ending in "}" or "!" answers, anything else is invalid), so a batch mixes rows that
answer at once, search one to three times, go invalid, run into max_turns / max_searches / max_total_tokens or end with
EOS. Queries repeat (four distinct ones), the retriever's latency depends on the query (rows re-enter in a different
order than they left) and observations are long enough to be cut by max_obs_tokens.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from concurrent.futures import Future

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.generation.hf import HFGenerator
from searchrl.protocols import PROTOCOLS, get_protocol
from searchrl.protocols.base import Answer, FormatReport, Invalid, Protocol, Search
from searchrl.retrieval.base import Hit
from searchrl.rollout import continuous
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.rollout.trajectory import Trajectory


class RandomActions(Protocol):
    name = "random_actions"
    stop_strings = ("(", "?")
    answer_stop_strings = ("}", "!")

    def instruction(self, question: str) -> str:
        return f"Q: {question}\nA:"

    def parse(self, turn_text: str):
        if turn_text.endswith(self.answer_stop_strings):
            return Answer(turn_text[-6:])
        if turn_text.endswith(self.stop_strings):
            return Search((f"q{sum(turn_text.encode()) % 4}",))
        return Invalid("no action")

    def render_observation(self, queries, hits) -> str:
        return "[" + " ".join(h.text for hs in hits for h in hs) + "]"

    def invalid_feedback(self, action: Invalid) -> str:
        return "<act>"

    def force_answer_text(self) -> str:
        return "<answer now>"

    def check_format(self, response: str) -> FormatReport:
        return FormatReport(ok=True, has_answer=False, answer=None, n_searches=0)


class SlowRetriever:
    """Sleeps 0-19 ms depending on the query; documents of query-dependent length (some cut by max_obs_tokens)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        time.sleep(sum(zlib.crc32(q.encode()) % 20 for q in queries) / 1000)
        return [
            [Hit(f"{q}-{i}", q, f"doc {i} on {q} " * (1 + zlib.crc32(q.encode()) % 5), 1.0) for i in range(k)]
            for q in queries
        ]


def tiny_policy(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        initializer_range=0.3,
    )
    model = LlamaForCausalLM(cfg).double()  # fp64: batch layouts round alike far below the 1e-5 log-prob tolerance
    model.generation_config.eos_token_id = 2
    return model


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """A 64-wide model gains nothing from intra-op threads, and they cost a lot on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EXAMPLES = [QAExample(f"id{i}", f"question {i} about {'xyz' * (i % 5)}?", ["a"]) for i in range(12)]


def rollout(generator, continuous_: bool, *, group_size=1, temperature=0.0, seed=3, engine_kwargs=None, **limits):
    lim = dict(max_turns=4, max_searches=2, max_new_tokens=24, max_obs_tokens=40, max_total_tokens=200, topk=2)
    lim.update(limits)
    retriever = SlowRetriever()
    engine = RolloutEngine(
        generator, retriever, RandomActions(), RolloutLimits(**lim, continuous=continuous_), **(engine_kwargs or {})
    )
    trajs = engine.run(EXAMPLES, group_size=group_size, temperature=temperature, seed=seed)
    return trajs, engine, retriever


def assert_same(a, b, tol=1e-5) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.uid == y.uid
        assert x.response_ids == y.response_ids, x.uid
        assert x.action_mask == y.action_mask, x.uid
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)), default=0.0) <= tol, x.uid
        assert (x.stop_reason, x.answer) == (y.stop_reason, y.answer), x.uid
        fields = ("text", "action", "finish_reason", "queries", "hit_ids", "observation", "invalid_reason")
        fields += ("n_gen_tokens", "n_obs_tokens")
        for s, t in zip(x.turns, y.turns, strict=True):
            assert [getattr(s, f) for f in fields] == [getattr(t, f) for f in fields], x.uid
        assert len(x.turns) == len(y.turns)


EXPECTED_STOPS = {
    "hint": ("no_answer", "length"),
    "silent": ("no_answer",),
    "end": ("max_searches", "max_turns"),
    "off": ("max_turns",),
}


@pytest.mark.parametrize("mode", ["hint", "silent", "end", "off"])
def test_greedy_continuous_equals_turn_by_turn(mode: str) -> None:
    model = tiny_policy()
    sync, _, _ = rollout(HFGenerator(model, ByteTokenizer()), False, force_answer=mode)
    gen = HFGenerator(model, ByteTokenizer())
    cont, engine, retriever = rollout(gen, True, force_answer=mode)
    assert_same(sync, cont)
    assert {"generate_s", "retrieve_s", "wait_s", "engine_s"} <= set(engine.stats)
    assert engine.stats["retrieve_calls"] == len(retriever.calls) > 0
    assert gen.stats["reused_tokens"] > 0  # re-entering rows prefilled only their new tokens
    # the batch mixes every kind of row
    reasons = Counter(t.stop_reason for t in cont)
    assert {"answer", "eos", *EXPECTED_STOPS[mode]} <= set(reasons), reasons
    searches = Counter(t.n_searches for t in cont)
    assert searches[0] and searches[1] and searches[2], searches
    actions = {turn.action for t in cont for turn in t.turns}
    assert {"search", "answer", "invalid", "search_over_budget"} <= actions, actions
    assert any(t.turns[0].action == "answer" for t in cont)
    assert any(turn.n_obs_tokens == 40 for t in cont for turn in t.turns)  # an observation cut to its cap


def test_seeded_sampling_continuous_equals_turn_by_turn_and_is_deterministic() -> None:
    """Each row samples from its own stream (run seed, turn, row), so sharing steps with other rows changes nothing;
    a GRPO group's rows still sample apart."""
    model = tiny_policy()
    kw = dict(group_size=3, temperature=1.0, seed=11, max_turns=3)
    sync, _, _ = rollout(HFGenerator(model, ByteTokenizer()), False, **kw)
    cont, _, _ = rollout(HFGenerator(model, ByteTokenizer()), True, **kw)
    again, _, _ = rollout(HFGenerator(model, ByteTokenizer(), max_batch_size=4), True, **kw)
    assert_same(sync, cont)
    assert_same(cont, again)
    first = [t.response_ids for t in cont if t.uid.endswith("#0")]
    second = [t.response_ids for t in cont if t.uid.endswith("#1")]
    assert first != second
    other, _, _ = rollout(HFGenerator(model, ByteTokenizer()), True, **{**kw, "seed": 12})
    assert [t.response_ids for t in other] != [t.response_ids for t in cont]


def test_continuous_logprobs_are_the_policys_in_fp32() -> None:
    """The log-prob recorded for each sampled token equals a full forward's over the whole trajectory (fp32; this
    wide-initialised model's logits are large, and the turn-by-turn loop's own gap is about 1.3e-5)."""
    model = tiny_policy().float()
    trajs, _, _ = rollout(HFGenerator(model, ByteTokenizer()), True, group_size=2, temperature=1.0, max_turns=3)
    worst = 0.0
    with torch.no_grad():
        for t in trajs:
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            ref = logp.gather(-1, ids[0, 1:, None])[len(t.prompt_ids) - 1 :, 0]
            for lp, r, m in zip(t.logprobs, ref.tolist(), t.action_mask, strict=True):
                if m:
                    worst = max(worst, abs(lp - r))
    assert 0 < sum(t.n_searches for t in trajs) and worst < 5e-5, worst


def test_batch_smaller_than_the_rollout_queues_rows() -> None:
    model = tiny_policy(2)
    sync, _, _ = rollout(HFGenerator(model, ByteTokenizer(), max_batch_size=3), False)
    gen = HFGenerator(model, ByteTokenizer(), max_batch_size=3)
    cont, _, _ = rollout(gen, True)
    assert_same(sync, cont)
    assert gen.stats["decode_row_steps"] <= 3 * gen.stats["decode_steps"]


def test_repeated_queries_and_document_step_per_group_of_ready_rows() -> None:
    """Search-o1's hooks: a query the row already searched is not run again, and the document step is called with
    the calls that are ready together (per retriever call in continuous mode, per turn otherwise)."""
    model = tiny_policy()
    groups: dict[bool, list[int]] = {False: [], True: []}

    def step_for(mode: bool):
        def document_step(calls, timing):
            groups[mode].append(len(calls))
            return [f"<{c.queries[0]}:{len(c.hits[0])}>" for c in calls]

        return document_step

    kw = dict(max_searches=3, max_turns=5, max_total_tokens=260, group_size=2, temperature=1.0)
    sync, _, _ = rollout(
        HFGenerator(model, ByteTokenizer()),
        False,
        engine_kwargs=dict(document_step=step_for(False), repeated_query_text="<again>"),
        **kw,
    )
    cont, _, _ = rollout(
        HFGenerator(model, ByteTokenizer()),
        True,
        engine_kwargs=dict(document_step=step_for(True), repeated_query_text="<again>"),
        **kw,
    )
    assert_same(sync, cont)
    assert any(turn.action == "search_repeated" for t in cont for turn in t.turns)
    assert sum(groups[False]) == sum(groups[True]) > 0


def test_generators_without_continuous_decoding_fall_back() -> None:
    """Without the fast decode step (a non-Llama model, FSDP) the HF generator decodes turn by turn."""
    model = tiny_policy()
    plain = HFGenerator(model, ByteTokenizer(), fast_step=False)
    assert not plain.supports_continuous and HFGenerator(model, ByteTokenizer()).supports_continuous
    sync, _, _ = rollout(HFGenerator(model, ByteTokenizer()), False, max_turns=2)
    cont, engine, _ = rollout(plain, True, max_turns=2)
    assert_same(sync, cont)
    assert "wait_s" not in engine.stats  # the turn-by-turn loop ran


# ----------------------------------------------------------------------------------- with a scripted model


def _script(protocol, n_searches: int):
    def script(context: str) -> str:
        q = context.split("QUESTION-")[-1].split()[0]
        done = context.count("Title 0 of")
        if int(q) % 4 == 0 or done >= n_searches:
            return f"Done {q}. " + protocol.format_answer(f"answer {q}") + " trailing"
        if int(q) % 4 == 1 and done == 0:
            return "no idea " * (1 + int(q) % 3)
        return f"look {q}{'.' * int(q)} " + protocol.format_search([f"q{q} {done}"]) + " NEVER"

    return script


class Docs:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        time.sleep(0.002 * (len(queries[0]) % 3))
        return [[Hit(f"{q}-{i}", f"Title {i} of {q}", f"text {i} about {q}", 1.0) for i in range(k)] for q in queries]


@pytest.mark.parametrize("name", sorted(n for n, p in PROTOCOLS.items() if p.searches))
@pytest.mark.parametrize("mode", ["hint", "silent", "end", "off"])
def test_scripted_rollouts_are_the_same_for_every_protocol_and_force_mode(name: str, mode: str) -> None:
    tok = ByteTokenizer()
    protocol = get_protocol(name)
    out = []
    prompt = len(RolloutEngine(ScriptedGenerator(tok, str), None, protocol).prompt_ids("QUESTION-10 what?"))
    for cont in (False, True):
        limits = RolloutLimits(
            max_turns=3, max_searches=2, max_new_tokens=60, max_obs_tokens=60, max_total_tokens=prompt + 300, topk=2,
            force_answer=mode, continuous=cont,
        )  # fmt: skip
        engine = RolloutEngine(ScriptedGenerator(tok, _script(protocol, 3)), Docs(), protocol, limits)
        examples = [QAExample(f"id{i}", f"QUESTION-{i} what?", ["a"]) for i in range(8)]
        out.append(engine.run(examples, group_size=2, seed=0))
    assert_same(*out)
    assert len({t.stop_reason for t in out[1]}) >= 3, {t.stop_reason for t in out[1]}


class _InlinePool:
    """Runs each retriever call at submission: its rows are ready at the very next decode step."""

    def submit(self, fn, *args):
        fut: Future = Future()
        fut.set_result(fn(*args))
        return fut


def test_a_row_reenters_while_another_is_still_decoding() -> None:
    """Row 0 searches after a short turn; row 1 writes one long turn. Row 0's next turn enters the batch (and
    finishes) while row 1 is still in its first turn: no turn barrier."""
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")

    def script(context: str) -> str:
        if "QUESTION-1" in context:
            return "thinking " * 30 + protocol.format_answer("b")
        if "Title 0 of x" in context:
            return protocol.format_answer("a")
        return protocol.format_search(["x"])

    gen = ScriptedGenerator(tok, script)
    limits = RolloutLimits(max_turns=3, max_new_tokens=400, max_total_tokens=5000, topk=1, continuous=True)
    engine = RolloutEngine(gen, Docs(), protocol, limits)
    trajs = [
        Trajectory(f"{i}#0", f"{i}", f"{i}", f"QUESTION-{i}", ["a"], engine.prompt_ids(f"QUESTION-{i}"))
        for i in range(2)
    ]
    timing = Counter()
    run = continuous.ContinuousRollout(engine, trajs, timing, base_seed=0, pool=_InlinePool())
    finished: list[str] = []
    inner = run.finished

    def spy(key, completion):
        finished.append(f"{key}:{trajs[key].n_turns}")
        return inner(key, completion)

    run.finished = spy
    gen.decode_continuous(run, SamplingParams(stop=engine.stop_strings()))
    assert finished == ["0:0", "0:1", "1:0"]  # row 0's two turns both end before row 1's first
    assert [len(c) for c in gen.calls] == [2, 1]  # row 0 re-entered alone
    assert [t.stop_reason for t in trajs] == ["answer", "answer"]


def test_search_without_a_retriever_is_the_same_error() -> None:
    tok = ByteTokenizer()
    protocol = get_protocol("search_r1")
    gen = ScriptedGenerator(tok, lambda ctx: protocol.format_search(["x"]))
    for cont in (False, True):
        engine = RolloutEngine(gen, None, protocol, RolloutLimits(continuous=cont))
        with pytest.raises(ValueError, match="no retriever is configured"):
            engine.run([QAExample("q", "Q?", ["a"])])


def test_config_setting_reaches_the_engine() -> None:
    assert load_config(None, []).rollout.continuous is False
    cfg = load_config(None, ["rollout.continuous=true"])
    assert RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk).continuous is True


@pytest.mark.parametrize("continuous_", [False, True])
def test_a_question_samples_the_same_tokens_whatever_its_batch(continuous_: bool) -> None:
    """Each trajectory's sampling stream is keyed by its uid (a question and its sample index), not its place in
    the call: a question rolled out alone, or among others in another order, samples the same tokens (an
    evaluation split into other batches, or resumed, gives each question the same answer)."""
    model = tiny_policy()
    lim = dict(max_turns=3, max_searches=2, max_new_tokens=16, max_obs_tokens=40, max_total_tokens=200, topk=2)

    def run(examples):
        limits = RolloutLimits(**lim, continuous=continuous_)
        engine = RolloutEngine(HFGenerator(model, ByteTokenizer()), SlowRetriever(), RandomActions(), limits)
        return {t.uid: t for t in engine.run(examples, group_size=2, temperature=1.0, seed=5)}

    together, alone = run(EXAMPLES[:6]), run(EXAMPLES[5:6])
    reordered = run(EXAMPLES[:6][::-1])
    assert_same([together["id5#0"], together["id5#1"]], [alone["id5#0"], alone["id5#1"]])
    assert_same(list(together.values()), [reordered[uid] for uid in together])
    assert together["id5#0"].response_ids != together["id5#1"].response_ids  # a group's samples still differ


def test_a_question_twice_in_one_call_samples_two_streams() -> None:
    """A step whose questions wrap around its data holds a question twice: each occurrence gets its own uids, so its
    own sampling streams (keyed by uid), not a copy of the other's tokens."""
    model = tiny_policy()
    lim = RolloutLimits(
        max_turns=2, max_searches=1, max_new_tokens=16, max_obs_tokens=40, max_total_tokens=200, topk=2
    )
    engine = RolloutEngine(HFGenerator(model, ByteTokenizer()), SlowRetriever(), RandomActions(), lim)
    trajs = engine.run([EXAMPLES[0], EXAMPLES[0]], group_size=2, temperature=1.0, seed=5)
    assert [t.uid for t in trajs] == ["id0#0", "id0#1", "id0#2", "id0#3"]
    assert len({t.group_id for t in trajs}) == 1 and len({tuple(t.response_ids) for t in trajs}) == 4


@pytest.mark.parametrize("continuous_", [False, True])
def test_a_stop_check_that_raises_ends_the_rollout_part_way(continuous_: bool) -> None:
    """``engine.check_stop`` (the trainer's background rollout, when the run ends) is called before each turn and each
    decode step: once it raises, the rollout ends there with that error (turn by turn: no second retriever call)."""

    class Stopped(Exception):
        pass

    retriever = SlowRetriever()
    lim = dict(max_turns=4, max_searches=2, max_new_tokens=24, max_obs_tokens=40, max_total_tokens=200, topk=2)
    limits = RolloutLimits(**lim, continuous=continuous_)
    engine = RolloutEngine(HFGenerator(tiny_policy(), ByteTokenizer()), retriever, RandomActions(), limits)

    def stop_after_a_search() -> None:
        if retriever.calls:
            raise Stopped

    engine.check_stop = stop_after_a_search
    with pytest.raises(Stopped):
        engine.run(EXAMPLES, seed=3)
    if not continuous_:  # (continuously: retriever calls submitted before the check still run)
        assert len(retriever.calls) == 1
