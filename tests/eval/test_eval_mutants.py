"""Evaluation behaviours a mutation audit found unpinned: counts, averages and selection rules, with hand-written
expected values."""

from __future__ import annotations

from searchrl.data.records import QAExample
from searchrl.eval.baselines import AgentMethod
from searchrl.eval.report import AVERAGE, aggregate
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutLimits


class _Retriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"d{i}", "Rome", "Anna was born in Rome.", 1.0) for i in range(k)] for _ in queries]


def _row(dataset: str, judge: float | None) -> dict:
    return {"dataset": dataset, "method": "m", "metrics": {"em": 1.0, "judge": judge}, "searches": 1, "queries": 1}


# --------------------------------------------------------------------------------------------- search counts


def test_a_rag_agent_counts_its_prompt_retrieval_as_one_search_of_one_query() -> None:
    retriever = _Retriever()
    gen = ScriptedGenerator(ByteTokenizer(), lambda ctx: "<think> read </think> <answer> Rome </answer>")
    limits = RolloutLimits(max_turns=1, max_searches=0, max_new_tokens=200, max_total_tokens=20000, topk=2)
    method = AgentMethod(gen, retriever, get_protocol("rag"), limits=limits)
    (pred,) = method.answer([QAExample("q", "Where?", ["Rome"])])
    assert retriever.calls == [["Where?"]]  # the retrieval ran, with the question
    assert pred.text == "Rome" and (pred.searches, pred.queries) == (1, 1)


def test_a_reason_agent_counts_no_search() -> None:
    retriever = _Retriever()
    gen = ScriptedGenerator(ByteTokenizer(), lambda ctx: "<think> easy </think> <answer> Rome </answer>")
    limits = RolloutLimits(max_turns=1, max_searches=0, max_new_tokens=200, max_total_tokens=20000, topk=2)
    method = AgentMethod(gen, retriever, get_protocol("reason"), limits=limits)
    (pred,) = method.answer([QAExample("q", "Where?", ["x"])])
    assert retriever.calls == [] and (pred.searches, pred.queries) == (0, 0)


# --------------------------------------------------------------------------------------------- report averages


def test_the_average_row_sums_unreadable_judge_replies_over_datasets() -> None:
    items = [_row("a", None), _row("a", None), _row("a", 1.0), _row("b", None), _row("b", 0.0), _row("b", 1.0)]
    rows = aggregate(items, ["em", "judge"])
    by = {r["dataset"]: r for r in rows}
    assert (by["a"]["judge_unparsed"], by["b"]["judge_unparsed"]) == (2, 1)
    assert by[AVERAGE]["judge_unparsed"] == 3  # a count: 2 + 1, not their mean 1.5
    assert by[AVERAGE]["judge"] == 0.75  # a score: the mean of 1.0 and 0.5
    assert by[AVERAGE]["n"] == 6
