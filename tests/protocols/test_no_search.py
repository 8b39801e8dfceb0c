"""The trained baselines' protocols: ``reason`` (no search) and ``rag`` (documents in the prompt, one batched
retrieval per rollout), their parse / format check, the engine's prompt documents and the SFT oracle."""

from __future__ import annotations

import pytest

from searchrl.data.records import QAExample
from searchrl.eval.diagnostics import diagnose
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import NO_SEARCH, Answer, Invalid, get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.sft.oracle import oracle_trajectories


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"{q}-{i}", f"Title {i}", f"Gold{q[-2]} in Rome {i}", 1.0) for i in range(k)] for q in queries]


@pytest.mark.parametrize("name", ["reason", "rag"])
def test_parse_answer_and_refuse_search(name: str) -> None:
    p = get_protocol(name)
    assert p.parse("<think> easy </think> <answer> Rome </answer>") == Answer("Rome")
    assert p.parse("<think> hm </think> <search> who </search>") == Invalid(NO_SEARCH)
    assert isinstance(p.parse("just text"), Invalid)
    assert "no search engine" in p.invalid_feedback(Invalid(NO_SEARCH))
    with pytest.raises(ValueError, match="no search call"):
        p.format_search(["x"])


@pytest.mark.parametrize(
    ("response", "ok"),
    [
        ("<think> a </think> <answer> Rome </answer>", True),
        ("<answer> Rome </answer>", True),  # the think block is optional
        ("<think> a </think> <search> q </search> <answer> Rome </answer>", False),
        ("<think> a </think> Rome", False),
        ("<answer> Rome </answer> and more", False),
    ],
)
def test_format_check(response: str, ok: bool) -> None:
    report = get_protocol("reason").check_format(response)
    assert report.ok is ok, report.problems
    assert report.n_searches == 0


def test_rag_frames_documents_into_the_prompt() -> None:
    p = get_protocol("rag")
    framed = p.frame_question("Where does Anna live?", [Hit("d1", "Anna", "Anna lives in Rome.", 1.0)])
    text = p.instruction(framed)
    assert 'Doc 1(Title: "Anna") Anna lives in Rome.' in text
    assert text.rstrip().endswith("Question: Where does Anna live?")
    assert "Question: Where" in p.instruction("Where does Anna live?")  # unframed: the question alone


def test_baseline_prompts_end_the_question_with_a_question_mark() -> None:
    # Search-R1's baseline data scripts (nq.py, nq_rag.py) add "?" to a question that lacks one, as its agent's do
    hits = [Hit("d1", "Anna", "Anna lives in Rome.", 1.0)]
    assert get_protocol("reason").instruction(" where does anna live ").endswith("Question: where does anna live?\n")
    rag = get_protocol("rag")
    assert rag.instruction(rag.frame_question("where does anna live", hits)).endswith("where does anna live?\n")
    assert rag.instruction("where does anna live").endswith("Question: where does anna live?\n")
    assert get_protocol("reason", question_mark=False).instruction("where").endswith("Question: where\n")


def _engine(name: str, retriever):
    tok = ByteTokenizer()
    protocol = get_protocol(name)
    gen = ScriptedGenerator(tok, lambda ctx: "<think> read </think> <answer> Rome </answer> tail")
    limits = RolloutLimits(max_turns=1, max_searches=0, max_new_tokens=200, max_total_tokens=20000, topk=2)
    return tok, RolloutEngine(gen, retriever, protocol, limits)


def test_rag_engine_retrieves_once_per_rollout_and_records_the_documents() -> None:
    retriever = Recorder()
    tok, engine = _engine("rag", retriever)
    examples = [QAExample(f"q{i}", f"Who is {i}?", ["Rome"]) for i in range(3)]
    trajs = engine.run(examples, group_size=2, seed=0)
    assert retriever.calls == [[e.question for e in examples]]  # one batched call, the questions as queries
    for t in trajs:
        prompt = tok.decode(t.prompt_ids)
        assert "Gold" in prompt and f"Question: {t.question}" in prompt
        assert t.metadata["prompt_hit_ids"] == [f"{t.question}-0", f"{t.question}-1"]
        assert t.answer == "Rome" and t.n_searches == 0 and all(t.action_mask)  # nothing inserted
    # the diagnostics read the prompt documents as the retrieved text
    row = {"question": trajs[0].question, "golds": ["Gold0"], "prediction": "Rome", "trajectory": trajs[0].to_dict()}
    flags = diagnose(row)
    assert flags["searched"] and flags["gold_in_docs"] and flags["reading_failure"] and not flags["no_search"]


def test_rag_without_retriever_is_a_clear_error() -> None:
    _, engine = _engine("rag", None)
    with pytest.raises(ValueError, match="configure a retriever"):
        engine.run([QAExample("q", "Who?", ["x"])])


def test_reason_engine_never_retrieves() -> None:
    retriever = Recorder()
    tok, engine = _engine("reason", retriever)
    trajs = engine.run([QAExample("q", "Who?", ["Rome"])], group_size=2, seed=0)
    assert retriever.calls == [] and all(t.answer == "Rome" for t in trajs)
    assert "prompt_docs" not in trajs[0].metadata


@pytest.mark.parametrize("name", ["reason", "rag"])
def test_oracle_is_the_short_answer_without_a_chain(name: str) -> None:
    tok = ByteTokenizer()
    retriever = Recorder()
    ex = QAExample("q1", "Where does Anna live?", ["Rome"])  # a real question: no recorded chain
    (traj,) = oracle_trajectories(get_protocol(name), [ex], retriever, tok, topk=2)
    assert traj.turns[0].text == "<answer> Rome </answer>" and traj.answer == "Rome"
    assert ("Gold" in tok.decode(traj.prompt_ids)) is (name == "rag")
    assert retriever.calls == ([[ex.question]] if name == "rag" else [])


def test_a_reason_trajectory_is_not_flagged_for_not_searching() -> None:
    tok, engine = _engine("reason", Recorder())
    (traj,) = engine.run([QAExample("q", "Who?", ["Rome"])], seed=0)
    row = {
        "question": "Who?",
        "golds": ["Rome"],
        "prediction": "Rome",
        "trajectory": traj.to_dict() | {"protocol": "reason"},
    }
    flags = diagnose(row)
    assert flags["no_search"] is False and flags["gold_in_docs"] is None
    row["trajectory"]["protocol"] = "search_r1"
    assert diagnose(row)["no_search"] is True
