"""What a notebook shows for the evaluation's objects: short summaries, never every token or document."""

from __future__ import annotations

import re

from searchrl.eval import AgentMethod, DirectMethod, EvalResult, NaiveRAGMethod, Prediction, evaluate
from searchrl.generation import make_generator
from searchrl.protocols import get_protocol
from searchrl.testing import tiny_model, tokenizer


def agent_reply(ctx: str) -> str:
    return "<answer>Rome</answer>" if "born in Rome in 1950" in ctx else "<search>Anna Berg</search>"


def test_a_prediction_shows_its_answer_and_counts_not_its_trace(examples, retriever, fakes) -> None:
    method = AgentMethod(fakes.scripted(agent_reply), retriever, get_protocol("search_r1"))
    pred = method.answer(examples[:1])[0]
    assert pred.trajectory and len(str(pred.trajectory)) > 500  # the trace is there...
    text = repr(pred)
    assert len(text) < 250, text  # ...but not in the repr
    assert text.startswith("Prediction(text='Rome', raw='<search>Anna Berg</search> <information…', stop='answer'")
    assert "searches=1, queries=1" in text and "well_formed=False" in text  # search_r1 wants <think> first
    long = Prediction("x" * 500, raw="y" * 5000, trajectory={"turns": list(range(1000))})
    assert len(repr(long)) < 200 and "…" in repr(long)


def test_methods_name_what_they_wrap(retriever, fakes) -> None:
    gen = fakes.scripted(agent_reply)
    agent = repr(AgentMethod(gen, retriever, get_protocol("search_r1")))
    assert agent.startswith("AgentMethod(name='agent', protocol=SearchR1Protocol(name='search_r1'")
    assert "retriever=" in agent and agent.endswith("generator=ScriptedGenerator())")
    assert repr(NaiveRAGMethod(gen, retriever)).startswith("NaiveRAGMethod(name='naive_rag', retriever=")
    assert repr(DirectMethod(gen)) == "DirectMethod(name='direct', generator=ScriptedGenerator())"


def test_generators_and_protocols_name_their_model_and_options() -> None:
    gen = make_generator("hf", tiny_model(), tokenizer())
    assert re.fullmatch(r"HFGenerator\(model='\w+', device='cpu'\)", repr(gen)), repr(gen)
    assert repr(get_protocol("rag_r1", multi_query=True)).startswith("RAGR1Protocol(name='rag_r1'")
    assert "multi_query=True" in repr(get_protocol("rag_r1", multi_query=True))


def test_an_evaluation_result_shows_its_summary_table(tmp_path, examples, retriever, fakes) -> None:
    res = evaluate(
        {"set": examples},
        {"direct": DirectMethod(fakes.scripted(fakes.direct_reply))},
        tmp_path,
        metrics=["em"],
        show=False,
    )
    lines = repr(res).splitlines()
    assert lines[0].startswith("EvalResult(3 items, ") and lines[0].endswith("s; scores in %)")
    assert lines[1].split()[:2] == ["method", "set"] and lines[3].split()[:2] == ["direct", "33.3"]
    assert len(lines) == 4
    assert repr(EvalResult([], ["em"], [])) == "EvalResult(0 items, 0.0 s; scores in %)"
