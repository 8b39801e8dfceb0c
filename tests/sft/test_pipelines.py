"""Trajectory-data pipelines with scripted models whose right and wrong answers are known, so kept sets are exact.

The scripted model follows a per-question plan indexed by attempt: a new attempt starts whenever the context is
exactly the question's prompt (the pipelines roll out one attempt per question per round, so this is unambiguous).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from searchrl.data.records import QAExample
from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.generation.openai_compat import OpenAICompatGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits, build_prompt_text
from searchrl.rollout.trajectory import Trajectory
from searchrl.sft.pipelines import (
    REJECT_REASONS,
    attempt_bucket,
    rejection_sample,
    select_answerable,
    select_by_attempts,
    slice_steps,
    teacher_sft_examples,
)
from searchrl.sft.types import SFTExample

LIMITS = RolloutLimits(
    max_turns=4, max_searches=3, max_new_tokens=400, max_obs_tokens=2000, max_total_tokens=20000, topk=1
)


class FakeRetriever:
    """One document per query whose text carries the marker EVIDENCE, so tests can find documents in contexts."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"doc-{q}", f"Page on {q}", f"EVIDENCE about {q}.", 1.0)][:k] for q in queries]


class PlannedModel:
    """``plan[question_id][attempt]`` names a behaviour; a behaviour is a list of replies, one per turn."""

    def __init__(self, protocol, tokenizer, examples: list[QAExample], plan: dict[str, list[str]], behaviours):
        self.prompts = {build_prompt_text(protocol, tokenizer, ex.question): ex.id for ex in examples}
        self.plan, self.behaviours = plan, behaviours
        self.attempt: Counter[str] = Counter()  # attempts started per question
        self.turn: dict[str, int] = {}

    def qid(self, ctx: str) -> str:
        return "q" + re.search(r"QUESTION-(\d+)", ctx).group(1)

    def __call__(self, ctx: str) -> str:
        qid = self.qid(ctx)
        if ctx in self.prompts:
            self.attempt[qid] += 1
            self.turn[qid] = 0
        else:
            self.turn[qid] += 1
        a = self.attempt[qid] - 1
        replies = self.behaviours(self.plan[qid][a], qid, a)
        return replies[min(self.turn[qid], len(replies) - 1)]


def questions(n: int) -> list[QAExample]:
    return [QAExample(f"q{i}", f"QUESTION-{i}: what is it?", [f"gold {i}"]) for i in range(n)]


def make_engine(protocol, examples, plan, behaviours, eos: bool = True, generator_cls=ScriptedGenerator):
    tok = ByteTokenizer()
    model = PlannedModel(protocol, tok, examples, plan, behaviours)
    gen = generator_cls(tok, model, eos=eos)
    return RolloutEngine(gen, FakeRetriever(), protocol, LIMITS), model


# ------------------------------------------------------------------------------------------ rejection sampling
PP = get_protocol("r1_searcher_pp")
INTERNAL = "<|begin_internal_answer|>{}<|end_internal_answer|> "


def pp_behaviours(name: str, qid: str, a: int) -> list[str]:
    gold = f"gold {qid[1:]}"
    search = PP.format_search([f"facts on {qid}"])
    internal = INTERNAL.format(f"Attempt {a}: I recall part of it.")
    return {
        "good": [internal + search, "So it is settled. " + PP.format_answer(gold)],
        "dup": [
            INTERNAL.format("Attempt 0: I recall part of it.") + search,
            "So it is settled. " + PP.format_answer(gold),
        ],
        "ext_only": [f"Attempt {a}. " + search, "Found it. " + PP.format_answer(gold)],
        "wrong": [internal + search, "Hmm. " + PP.format_answer("something else")],
        "format": [internal + search, "<|end_search_result|> Fine. " + PP.format_answer(gold)],
        "silent": ["I have nothing to say."],
        "invalid_then_good": ["Let me ponder.", internal + search, "So. " + PP.format_answer(gold)],
    }[name]


RS_PLAN = {
    "q0": ["good", "dup", "ext_only"],
    "q1": ["wrong", "format", "good"],
    "q2": ["silent", "invalid_then_good", "good"],
    "q3": ["wrong", "wrong", "wrong"],
    "q4": ["good", "good", "good"],
}


@pytest.mark.parametrize("require_both", [False, True])
def test_rejection_sample_keeps_exactly_the_correct_well_formed_samples(require_both: bool) -> None:
    examples = questions(5)
    # eos=False: an action-less turn is invalid and gets feedback (not an EOS stop), so "invalid_then_good" goes on.
    engine, model = make_engine(PP, examples, RS_PLAN, pp_behaviours, eos=False)
    kept, stats = rejection_sample(engine, examples, 3, require_internal_and_external=require_both, max_per_question=2)
    expected = ["rs/q0#0", "rs/q0#2", "rs/q1#2", "rs/q2#2", "rs/q4#0", "rs/q4#1"]
    if require_both:
        expected.remove("rs/q0#2")
    assert [t.uid for t in kept] == expected
    assert model.attempt == Counter({q: 3 for q in RS_PLAN})
    rejected = {r: stats[f"rejected_{r}"] for r in REJECT_REASONS}
    assert rejected == {
        "incomplete": 1,  # q2#0 never acts, is forced to answer and does not
        "invalid_action": 1,  # q2#1 answers correctly after an invalid turn
        "format": 1,  # q1#1 writes a search-result tag itself
        "wrong": 4,  # q1#0, q3#0-2
        "no_internal_external": 1 if require_both else 0,  # q0#2 searches but has no internal step
        "duplicate": 1,  # q0#1 repeats q0#0 token for token
        "over_cap": 1,  # q4#2: the cap is 2 per question
    }
    counts = [stats[key] for key in ("questions", "sampled", "kept", "questions_with_kept")]
    assert counts == [5, 15, len(expected), 4]
    assert stats["keep_rate"] == pytest.approx(len(expected) / 15)  # of the samples, not of the questions
    for t in kept:
        assert t.stop_reason == "answer" and t.answer == f"gold {t.question_id[1:]}"


def test_the_internal_and_external_rule_rejects_stray_internal_tags() -> None:
    """A correct, well-formed answer with a complete internal step and a search, but an internal step left open
    (or a stray closing tag), is not an "appropriate occurrence" of the internal tags: the format check does not look
    at them, so only the internal-and-external rule keeps such samples out of the cold-start data."""
    search = PP.format_search(["facts on q0"])
    step = INTERNAL.format("I recall part of it.")
    answer = PP.format_answer("gold 0")
    replies = {
        "good": [step + search, "So it is settled. " + answer],
        "unclosed": [step + search, "<|begin_internal_answer|> So it is settled. " + answer],
        "stray_close": [step + search, "So it is settled.<|end_internal_answer|> " + answer],
    }
    examples = questions(1)
    plan = {"q0": ["good", "unclosed", "stray_close"]}
    engine, _ = make_engine(PP, examples, plan, lambda name, qid, a: replies[name])
    kept, stats = rejection_sample(engine, examples, 3, require_internal_and_external=True)
    assert [t.uid for t in kept] == ["rs/q0#0"] and stats["rejected_no_internal_external"] == 2
    engine, _ = make_engine(PP, examples, plan, lambda name, qid, a: replies[name])
    kept, stats = rejection_sample(engine, examples, 3)  # without the rule the format check alone decides
    assert len(kept) == 3 and stats["rejected_format"] == 0


def test_rejection_sample_rejects_internal_requirement_for_protocols_without_internal_steps() -> None:
    protocol = get_protocol("search_r1")
    engine, _ = make_engine(protocol, questions(1), {"q0": ["x"]}, lambda *a: ["<answer> gold 0 </answer>"])
    with pytest.raises(ValueError, match="no internal steps"):
        rejection_sample(engine, questions(1), 1, require_internal_and_external=True)


# ---------------------------------------------------------------------------------- teacher trajectories + slicing
RAG = get_protocol("rag_r1", multi_query=True, max_queries=3)


def rag_behaviours(name: str, qid: str, a: int) -> list[str]:
    gold = f"gold {qid[1:]}"
    return {
        "two_searches": [
            f"<think> I need the first fact for {qid}. </think>\n" + RAG.format_search([f"first {qid}"]),
            "<think> Now two more facts. </think>\n" + RAG.format_search([f"second {qid}", f"third {qid}"]),
            f"<think> That settles it. </think>\n<answer> {gold} </answer>",
        ],
        "direct": [f"<think> I know this one. </think>\n<answer> {gold} </answer>"],
        "wrong": ["<think> Guessing. </think>\n" + RAG.format_search([f"first {qid}"]), "<answer> no idea </answer>"],
    }[name]


def fake_vllm(model: PlannedModel, tok: ByteTokenizer):
    """An OpenAI-compatible /completions endpoint that returns exact token ids, as vLLM does."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        reply = model(tok.decode(body["prompt"], skip_special_tokens=True))
        cuts = [(reply.find(s) + len(s), s) for s in body["stop"] if s in reply]
        end, stop = min(cuts) if cuts else (len(reply), None)
        text = reply[:end]
        ids = tok.encode(text)
        logprobs = {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}
        choice = {
            "text": text,
            "finish_reason": "stop" if stop else "length",
            "stop_reason": stop,
            "logprobs": logprobs,
        }
        return httpx.Response(200, json={"choices": [choice]})

    return handler


def teacher_engine(examples, plan):
    tok = ByteTokenizer()
    model = PlannedModel(RAG, tok, examples, plan, rag_behaviours)
    gen = OpenAICompatGenerator("http://teacher.invalid/v1", "teacher", tok, timeout_s=5.0)
    gen.client = httpx.Client(transport=httpx.MockTransport(fake_vllm(model, tok)), timeout=5.0)
    return RolloutEngine(gen, FakeRetriever(), RAG, LIMITS), tok


def test_teacher_trajectories_slice_into_the_four_kinds_with_documents_only_in_context() -> None:
    examples = questions(3)
    engine, tok = teacher_engine(examples, {"q0": ["two_searches"], "q1": ["direct"], "q2": ["wrong"]})
    samples, kept, stats = teacher_sft_examples(engine, examples, k=1)
    assert [t.uid for t in kept] == ["rs/q0#0", "rs/q1#0"]  # q2's wrong answer is not teacher data
    assert [(s.source_uid, s.kind) for s in samples] == [
        ("rs/q0#0", "question_search"),
        ("rs/q0#0", "documents_search"),
        ("rs/q0#0", "documents_answer"),
        ("rs/q1#0", "question_answer"),
    ]
    assert (
        stats["kind_question_search"],
        stats["kind_documents_search"],
        stats["kind_documents_answer"],
        stats["kind_question_answer"],
        stats["sft_examples"],
    ) == (1, 1, 1, 1, 4)
    by_uid = {t.uid: t for t in kept}
    for s in samples:
        traj = by_uid[s.source_uid]
        start = len(s.prompt_ids) - len(traj.prompt_ids)
        # Context = the trajectory's own ids up to the turn; target = the next ids, every one sampled by the teacher.
        assert s.prompt_ids == traj.prompt_ids + traj.response_ids[:start]
        assert s.response_ids == traj.response_ids[start : start + len(s.response_ids)]
        assert all(traj.action_mask[start : start + len(s.response_ids)])
        assert s.loss_mask == [1] * len(s.response_ids)
        target = tok.decode(s.response_ids)
        assert "EVIDENCE" not in target and "<information>" not in target
        context = tok.decode(s.prompt_ids)
        if s.kind.startswith("question_"):
            assert s.prompt_ids == traj.prompt_ids
        else:
            assert context.endswith("</information>\n") and "EVIDENCE" in context
    # The targets are exactly the teacher's turns, in order.
    q0 = by_uid["rs/q0#0"]
    assert [tok.decode(s.response_ids) for s in samples[:3]] == [turn.text for turn in q0.turns]
    assert "EVIDENCE about second q0" in tok.decode(samples[2].prompt_ids)  # both queries' documents in context
    # A whole trajectory converts with the action mask as its loss mask.
    whole = SFTExample.from_trajectory(q0)
    assert whole.loss_mask == q0.action_mask and whole.response_ids == q0.response_ids
    masked_in = tok.decode([i for i, m in zip(whole.response_ids, whole.loss_mask, strict=True) if m])
    assert masked_in == "".join(turn.text for turn in q0.turns) and "EVIDENCE" not in masked_in
    assert SFTExample.from_dict(json.loads(json.dumps(samples[1].to_dict()))) == samples[1]


def test_slice_steps_survives_forced_answers_and_skips_invalid_turns() -> None:
    # Turn 1 is invalid (feedback inserted), the search budget of 1 is then spent, and the forced last turn answers.
    protocol = get_protocol("search_r1")
    replies = ["hmm", "<search> one </search>", "<search> two </search>", "<answer> gold 0 </answer>"]
    state = {"n": 0}

    def script(ctx: str) -> str:
        state["n"] += 1
        return replies[min(state["n"] - 1, 3)]

    limits = RolloutLimits(max_turns=3, max_searches=1, max_new_tokens=100, max_obs_tokens=500, topk=1)
    engine = RolloutEngine(ScriptedGenerator(ByteTokenizer(), script, eos=False), FakeRetriever(), protocol, limits)
    (traj,) = engine.run(questions(1))
    assert [t.action for t in traj.turns] == ["invalid", "search", "search_over_budget", "answer"]
    samples = slice_steps(traj)
    assert [s.kind for s in samples] == ["question_search", "documents_answer"]
    tok = ByteTokenizer()
    assert [tok.decode(s.response_ids) for s in samples] == ["<search> one </search>", "<answer> gold 0 </answer>"]
    assert tok.decode(samples[0].prompt_ids).endswith(traj.turns[0].observation)  # feedback is context
    broken = Trajectory.from_dict({**traj.to_dict(), "action_mask": [0] * len(traj.action_mask)})
    with pytest.raises(ValueError, match="generated tokens"):
        slice_steps(broken)


# ----------------------------------------------------------------------------------------- difficulty selection
SR1 = get_protocol("search_r1")


def direct_behaviours(name: str, qid: str, a: int) -> list[str]:
    return [f"<think> Direct. </think>\n<answer> {'gold ' + qid[1:] if name == 'right' else 'wrong'} </answer>"]


def plan_from(correct_at: dict[str, set[int]], n: int) -> dict[str, list[str]]:
    return {q: ["right" if a in hits else "no" for a in range(n)] for q, hits in correct_at.items()}


def test_attempt_bucket_uses_the_papers_thresholds() -> None:
    assert [attempt_bucket(a) for a in (1, 9, 10, 15, 20, 21, 40, None)] == [
        "easy",
        "easy",
        "medium",
        "medium",
        "medium",
        "hard",
        "hard",
        "unsolved",
    ]


@pytest.mark.parametrize("stop_early", [True, False])
def test_select_by_attempts_buckets_and_keeps_medium_and_hard(stop_early: bool, tmp_path: Path) -> None:
    # 0-based attempt indices that answer correctly; thresholds scaled down: easy < 2, medium 2..4, hard > 4.
    correct_at = {"q0": {0, 2}, "q1": {1, 5}, "q2": {3}, "q3": {4, 5}, "q4": {5}, "q5": set()}
    examples = questions(6)
    engine, model = make_engine(SR1, examples, plan_from(correct_at, 6), direct_behaviours)
    kept, records = select_by_attempts(
        engine,
        examples,
        6,
        easy_below=2,
        hard_above=4,
        stop_at_first_correct=stop_early,
        batch_size=4,
        out=tmp_path / "kept.jsonl",
        records_out=tmp_path / "records.jsonl",
    )
    assert [r["bucket"] for r in records] == ["easy", "medium", "medium", "hard", "hard", "unsolved"]
    assert [r["first_correct"] for r in records] == [1, 2, 4, 5, 6, None]
    assert [(ex.id, ex.metadata["difficulty"]) for ex in kept] == [
        ("q1", "medium"),
        ("q2", "medium"),
        ("q3", "hard"),
        ("q4", "hard"),
    ]
    if stop_early:  # a solved question is not sampled again
        assert [r["n_rollouts"] for r in records] == [1, 2, 4, 5, 6, 6]
        assert [r["n_correct"] for r in records] == [1, 1, 1, 1, 1, 0]
    else:
        assert [r["n_rollouts"] for r in records] == [6] * 6
        assert [r["n_correct"] for r in records] == [len(correct_at[f"q{i}"]) for i in range(6)]
    assert model.attempt == Counter({f"q{i}": r["n_rollouts"] for i, r in enumerate(records)})
    assert records[1]["predictions"][:2] == ["wrong", "gold 1"]
    written = [json.loads(line) for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert [row["id"] for row in written] == ["q1", "q2", "q3", "q4"]
    assert written[2]["golden_answers"] == ["gold 3"] and written[2]["metadata"] == {"difficulty": "hard"}
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 6


def test_an_unsolved_question_can_count_as_hard() -> None:
    """``unsolved_as="hard"``: no correct answer in the attempts reads as "more than hard_above rollouts"."""
    correct_at = {"q0": {2}, "q1": set()}
    examples = questions(2)
    engine, _ = make_engine(SR1, examples, plan_from(correct_at, 6), direct_behaviours)
    kept, records = select_by_attempts(engine, examples, 6, easy_below=2, hard_above=4, unsolved_as="hard")
    assert [r["bucket"] for r in records] == ["medium", "hard"] and records[1]["first_correct"] is None
    assert [(ex.id, ex.metadata["difficulty"]) for ex in kept] == [("q0", "medium"), ("q1", "hard")]
    with pytest.raises(ValueError, match="unsolved_as hard"):
        select_by_attempts(engine, examples, 6, easy_below=2, hard_above=4, unsolved_as="easy")


def test_select_by_attempts_needs_enough_attempts_to_see_hard_questions() -> None:
    engine, _ = make_engine(SR1, questions(1), {"q0": ["right"] * 8}, direct_behaviours)
    with pytest.raises(ValueError, match="raise n above 20"):
        select_by_attempts(engine, questions(1), 8)
    with pytest.raises(ValueError, match="raise n above 4"):  # n == hard_above: attempt n + 1 is never run
        select_by_attempts(engine, questions(1), 4, easy_below=2, hard_above=4)
    with pytest.raises(ValueError, match="raise n above 20"):  # first correct at attempt 20 is medium, not hard
        select_by_attempts(engine, questions(1), 20)


def test_select_answerable_keeps_wrong_but_solvable_plus_a_seeded_easy_share() -> None:
    # Attempt 0 is the greedy first answer; attempts 1..4 are the sampled retries.
    correct_at = {"q0": {0}, "q1": {3}, "q2": set(), "q3": {0}, "q4": {0, 1}, "q5": {0}, "q6": {0}, "q7": {1, 2}}
    examples = questions(8)

    def run(fraction: float, seed: int = 0):
        engine, model = make_engine(
            SR1, examples, plan_from(correct_at, 5), direct_behaviours, generator_cls=ScriptedGenerator
        )
        kept, records = select_answerable(engine, examples, 4, fraction, seed=seed)
        return kept, records, model, engine.generator

    kept, records, model, gen = run(0.25)
    assert [r["bucket"] for r in records] == [
        "easy",
        "answerable",
        "unanswerable",
        "easy",
        "easy",
        "easy",
        "easy",
        "answerable",
    ]
    assert [r["n_retries"] for r in records] == [0, 3, 4, 0, 0, 0, 0, 1]  # retries stop at the first correct one
    assert [r["first_correct_retry"] for r in records] == [None, 3, None, None, None, None, None, 1]
    assert model.attempt == Counter({"q0": 1, "q1": 4, "q2": 5, "q3": 1, "q4": 1, "q5": 1, "q6": 1, "q7": 2})
    easy_ids = {"q0", "q3", "q4", "q5", "q6"}
    kept_ids = [ex.id for ex in kept]
    assert {"q1", "q7"} <= set(kept_ids) and "q2" not in kept_ids
    assert len(set(kept_ids) & easy_ids) == 1  # round(0.25 * 5) = 1 easy question
    assert kept_ids == [ex.id for ex in examples if ex.id in kept_ids]  # input order
    assert [r["kept"] for r in records] == [ex.id in kept_ids for ex in examples]
    # Greedy first pass over all 8, then retries at 1.2 over the 3 wrong ones with a fresh seed each round.
    assert gen.params[0].temperature == 0.0 and len(gen.calls[0]) == 8
    retry = gen.params[1:]
    assert {p.temperature for p in retry} == {1.2} and [len(c) for c in gen.calls[1:]] == [3, 2, 2, 1]
    assert len({p.seed for p in retry}) == 4
    assert [ex.id for ex in run(0.25)[0]] == kept_ids  # same seed, same easy pick
    picks = {tuple(ex.id for ex in run(0.25, seed=s)[0]) for s in range(8)}
    assert len(picks) > 1  # the easy pick depends on the seed
    assert {ex.id for ex in run(1.0)[0]} == easy_ids | {"q1", "q7"}
    assert [ex.id for ex in run(0.0)[0]] == ["q1", "q7"]


@pytest.mark.parametrize(("fraction", "n_easy"), [(0.5, 3), (0.1, 1), (0.3, 2)])
def test_the_easy_share_rounds_half_up(fraction: float, n_easy: int) -> None:
    """Five easy questions: 0.5 * 5 = 2.5 keeps 3 (round() would keep 2), 0.1 * 5 = 0.5 keeps 1, 0.3 * 5 = 1.5
    keeps 2; the one answerable question is always kept."""
    correct_at = {"q0": {0}, "q1": {0}, "q2": {0}, "q3": {0}, "q4": {0}, "q5": {1}}
    examples = questions(6)
    engine, _ = make_engine(SR1, examples, plan_from(correct_at, 3), direct_behaviours)
    kept, records = select_answerable(engine, examples, 2, fraction, seed=0)
    assert [r["bucket"] for r in records] == ["easy"] * 5 + ["answerable"]
    assert sum(ex.metadata["difficulty"] == "easy" for ex in kept) == n_easy and kept[-1].id == "q5"


# ---------------------------------------------------------------------------------------------------- resume
class Interrupted(ScriptedGenerator):
    """Raises KeyboardInterrupt at its ``fail_at``-th generate call (1-based), as a killed run stops."""

    def __init__(self, *args, fail_at: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.n_calls, self.fail_at = 0, fail_at

    def generate(self, prompts: list[list[int]], params: SamplingParams):
        self.n_calls += 1
        if self.fail_at is not None and self.n_calls >= self.fail_at:
            raise KeyboardInterrupt
        return super().generate(prompts, params)


CORRECT_AT = {"q0": {0, 2}, "q1": {1, 5}, "q2": {3}, "q3": {4, 5}, "q4": {5}, "q5": set()}


def _select(tmp_path: Path, key: str, fail_at: int | None = None, seed: int = 0, stop: bool = True):
    from searchrl.sft.attempts import AttemptLog

    examples = questions(6)
    tok = ByteTokenizer()
    model = PlannedModel(SR1, tok, examples, plan_from(CORRECT_AT, 6), direct_behaviours)
    engine = RolloutEngine(Interrupted(tok, model, fail_at=fail_at), FakeRetriever(), SR1, LIMITS)
    out = tmp_path / "kept.jsonl"
    kept, records = select_by_attempts(
        engine,
        examples,
        6,
        easy_below=2,
        hard_above=4,
        batch_size=2,
        seed=seed,
        stop_at_first_correct=stop,
        out=out,
        records_out=tmp_path / "records.jsonl",
        log=AttemptLog(out, key),
    )
    return records, model


def test_an_interrupted_selection_samples_only_the_questions_it_had_not_finished(tmp_path: Path) -> None:
    whole, _ = _select(tmp_path / "whole", "k")
    assert not list((tmp_path / "whole").glob("*.partial"))  # the finished selection leaves no partial file
    # batches of two: q0 and q1 finish by the 2nd round (2 calls), q2 and q3 by the 5th (5 more); the 9th call, in the
    # last batch, is where the run is killed
    with pytest.raises(KeyboardInterrupt):
        _select(tmp_path / "cut", "k", fail_at=9)
    partial = tmp_path / "cut" / "kept.jsonl.difficulty.partial"
    assert [json.loads(line)["slot"] for line in partial.read_text().splitlines()[1:]] == ["q0", "q1", "q2", "q3"]
    with partial.open("a") as f:
        f.write('{"slot": "q4", "row": {"attem')  # a line the kill cut: q4 is sampled again
    again, model = _select(tmp_path / "cut", "k")
    assert set(model.attempt) == {"q4", "q5"}
    assert again == whole  # the same buckets, attempts and predictions as the uninterrupted run
    assert not partial.exists()


def test_other_settings_start_the_sampling_afresh(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        _select(tmp_path, "k", fail_at=5)
    _, model = _select(tmp_path, "another key")  # e.g. another model: nothing is kept
    assert set(model.attempt) == {f"q{i}" for i in range(6)}
    with pytest.raises(KeyboardInterrupt):
        _select(tmp_path, "k", fail_at=5)
    _, model = _select(tmp_path, "k", seed=1)  # the same key, another seed
    assert set(model.attempt) == {f"q{i}" for i in range(6)}
    with pytest.raises(KeyboardInterrupt):
        _select(tmp_path, "k", fail_at=5)
    _, model = _select(tmp_path, "k", stop=False)  # the same key, without stopping at the first correct attempt
    assert set(model.attempt) == {f"q{i}" for i in range(6)}
    assert all(n == 6 for n in model.attempt.values())


# ------------------------------------------------------------------------------------------------------- CLI
def test_cli_commands_write_selected_questions_and_trajectories(tmp_path: Path, monkeypatch) -> None:
    from searchrl.commands import data_build
    from searchrl.retrieval.index import build_index
    from searchrl.stages import sampling

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"p{i}", "contents": f"Page {i}\nFact number {i}."}) + "\n" for i in range(4))
    )
    build_index(corpus, "bm25", tmp_path / "index")
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(ex.to_flashrag()) + "\n" for ex in questions(3)))
    plan = {"q0": ["right"] * 25, "q1": ["no"] * 11 + ["right"] * 14, "q2": ["no"] * 25}

    asked: list[int] = []

    def fake_generator(model: str, url=None, served_model=None, timeout_s=120.0, concurrency=1):
        asked.append(concurrency)  # a teacher's requests in flight (--concurrency, default 8)
        examples = questions(3)
        return ScriptedGenerator(
            ByteTokenizer(), PlannedModel(SR1, ByteTokenizer(), examples, plan, direct_behaviours)
        )

    monkeypatch.setattr(sampling, "load_generator", fake_generator)
    app = typer.Typer()
    data_build.register(app)
    common = ["--data", str(data), "--index", str(tmp_path / "index"), "--protocol", "search_r1"]
    res = CliRunner().invoke(
        app, ["select-difficulty", *common, "--rule", "r1_searcher", "--out", str(tmp_path / "sel.jsonl")]
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["id"] for x in (tmp_path / "sel.jsonl").read_text().splitlines()] == ["q1"]
    records = [json.loads(x) for x in (tmp_path / "sel.records.jsonl").read_text().splitlines()]
    assert [r["bucket"] for r in records] == ["easy", "medium", "unsolved"]
    res = CliRunner().invoke(
        app, ["rejection-sample", *common, "--k", "2", "--concurrency", "3", "--out", str(tmp_path / "rs.jsonl")]
    )
    assert res.exit_code == 0, res.output
    assert asked == [8, 3]
    rows = [json.loads(x) for x in (tmp_path / "rs.jsonl").read_text().splitlines()]
    assert [r["uid"] for r in rows] == ["rs/q0#0"]  # q0's two answers are identical: kept once
    assert Trajectory.from_dict(rows[0]).answer == "gold 0"
    res = CliRunner().invoke(app, ["select-difficulty", *common, "--rule", "nope", "--out", str(tmp_path / "x")])
    assert isinstance(res.exception, ValueError) and "r1_searcher or rag_r1" in str(res.exception)
    # q0 and q1 answer their first attempt correctly; a quota of one sample leaves one question, as the summary says
    plan.update(q1=["right"] * 25)
    args = ["rejection-sample", *common, "--k", "1", "--quota", "*=1", "--out", str(tmp_path / "one.jsonl")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert len((tmp_path / "one.jsonl").read_text().splitlines()) == 1
    assert "kept 1 of 3 samples (1 of 3 questions)" in res.output
    assert not list(tmp_path.glob("*.partial"))  # each finished command discarded its attempts


def test_the_sampling_stages_key_their_attempts_on_the_settings_and_the_teacher(tmp_path: Path) -> None:
    from searchrl.config import load_config
    from searchrl.stages.sampling import Teacher, attempt_log

    out = tmp_path / "out.jsonl"
    key = attempt_log(load_config("demo"), out, None).key
    assert key == attempt_log(load_config("demo"), out, Teacher()).key
    assert key != attempt_log(load_config("demo"), out, Teacher(url="http://teacher:8000/v1")).key
    assert key != attempt_log(load_config("demo", ["rollout.max_turns=2"]), out, None).key
    assert key != attempt_log(load_config("demo", ["retrieval.topk=5"]), out, None).key
    assert key != attempt_log(load_config("demo", ["model.prompt_style=raw"]), out, None).key
    # what only a later stage reads keeps the questions already sampled
    assert key == attempt_log(load_config("demo", ["training.steps=7", "evaluation.seed=3"]), out, None).key
