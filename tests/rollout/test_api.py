"""The rollout from Python: ``RolloutEngine.from_config``, questions as strings or rows, the documented example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import searchrl
from searchrl import device
from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.retrieval.base import Hit
from searchrl.rollout import RolloutEngine, RolloutLimits

DOC = Path(__file__).resolve().parents[2] / "docs" / "rollout.md"


class Retriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"{q}-{i}", f"Title {i}", f"text {i} about {q}", 1.0) for i in range(k)] for q in queries]


def searcher(context: str) -> str:
    """Search once, then answer."""
    return "<answer>Oslo</answer>" if "text 0 about the city" in context else "<search>the city</search>"


@pytest.fixture
def engine() -> RolloutEngine:
    cfg = load_config("search_r1_grpo", ["rollout.max_turns=2", "retrieval.topk=2"])
    return RolloutEngine.from_config(cfg, ScriptedGenerator(ByteTokenizer(), searcher), Retriever())


def test_from_config_takes_the_protocol_limits_and_prompt_style_of_the_config(engine: RolloutEngine) -> None:
    cfg = load_config("search_r1_grpo", ["rollout.max_turns=2", "retrieval.topk=2"])
    assert engine.protocol.name == "search_r1" and engine.prompt_style == cfg.model.prompt_style
    assert engine.limits == RolloutLimits.from_config(cfg) == RolloutLimits.from_config(cfg.rollout, 2)
    assert engine.limits.max_turns == 2 and engine.limits.topk == 2
    assert RolloutLimits.from_config(cfg.rollout).topk == RolloutLimits().topk  # a rollout section alone: the default


def test_run_takes_question_strings_rows_and_records(engine: RolloutEngine) -> None:
    trajs = engine.run(
        ["Who?", {"question": "Where?", "golden_answers": ["Oslo"]}, QAExample("mine", "What?", ["x"])], seed=0
    )
    assert [(t.uid, t.question, t.golds) for t in trajs] == [
        ("q0#0", "Who?", []),
        ("q1#0", "Where?", ["Oslo"]),
        ("mine#0", "What?", ["x"]),
    ]
    assert all(t.answer == "Oslo" and t.stop_reason == "answer" and t.n_searches == 1 for t in trajs)
    (one,) = engine.run("Who?", seed=0)  # one question on its own
    assert one.uid == "q0#0" and one.answer == "Oslo"
    with pytest.raises(TypeError, match="question 1 is a int: .*QAExample"):
        engine.run(["Who?", 3])


def test_from_config_builds_what_is_not_given(monkeypatch) -> None:
    """The retriever and the policy come from the config; a protocol that never searches gets no retriever."""
    built: list[str] = []
    gen = ScriptedGenerator(ByteTokenizer(), searcher)

    def load_generator(model: str):
        built.append(model)
        return gen

    monkeypatch.setattr("searchrl.pipeline.load_generator", load_generator)
    monkeypatch.setattr("searchrl.pipeline.make_retriever_for", lambda cfg: Retriever())
    monkeypatch.setattr(device, "_current", None)
    cfg = load_config("search_r1_grpo", profile="laptop")
    engine = RolloutEngine.from_config(cfg)
    assert built == [cfg.model.policy] and engine.generator is gen and isinstance(engine.retriever, Retriever)
    mine = Retriever()
    assert RolloutEngine.from_config(cfg, retriever=mine).retriever is mine
    no_search = RolloutEngine.from_config(load_config("search_r1_grpo", ["rollout.protocol=reason"], "laptop"))
    assert no_search.retriever is None and no_search.protocol.name == "reason"


def test_the_documented_example_runs(monkeypatch) -> None:
    """docs/rollout.md's example, with a scripted policy and an in-memory retriever in place of the real ones."""
    block = re.search(r"## From Python\n.*?```python\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/rollout.md lost its Python example"
    gen = ScriptedGenerator(ByteTokenizer(), searcher)
    monkeypatch.setattr("searchrl.pipeline.load_generator", lambda model: gen)
    monkeypatch.setattr("searchrl.pipeline.make_retriever_for", lambda cfg: Retriever())
    monkeypatch.setattr(device, "_current", None)
    scope: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), scope)
    trajs = scope["trajectories"]
    assert scope["searchrl"] is searchrl
    assert [t.uid for t in trajs] == ["q0#0", "q0#1", "q1#0", "q1#1"]
    assert trajs[2].golds == ["Thebes"] and all(t.answer == "Oslo" for t in trajs)


def test_a_trajectory_shows_a_summary_not_its_tokens(engine: RolloutEngine) -> None:
    (traj,) = engine.run([{"question": "Where? " * 30, "golden_answers": ["Oslo"]}], seed=0)
    assert len(traj.response_ids) > 100 and len(repr(traj.logprobs)) > 400
    text = repr(traj)
    assert len(text) < 300, text
    c = traj.counts()
    assert text == (
        f"Trajectory(uid='q0#0', question='{'Where? ' * 8}Whe…', stop='answer', answer='Oslo', golds=['Oslo'], "
        f"turns=2, searches=1, prompt_tokens={c['prompt_tokens']}, policy_tokens={c['policy_tokens']}, "
        f"inserted_tokens={c['inserted_tokens']})"
    )
    assert repr(traj.turns[0]).startswith("Turn(action='search', queries=['the city'], finish='stop', text=")
