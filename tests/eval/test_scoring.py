"""Scoring as each paper's code scores: R1-Searcher's released predictions rescored to the authors' numbers, each
method's normalisation reachable from the evaluation config, top-p, and RAG-R1's efficiency figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl import cli
from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.eval import harness, rescore
from searchrl.eval.baselines import AgentMethod, DirectMethod
from searchrl.generation.base import Completion, SamplingParams
from searchrl.protocols import get_protocol
from searchrl.rollout.engine import RolloutLimits

runner = CliRunner()
EXCERPT = Path(__file__).parent / "data" / "r1_searcher_excerpt.jsonl"

# The excerpt is in the release's format (data/eval_results/*.jsonl of RUCAIBox/R1-Searcher). Per row, scored by
# hand the way the authors' evaluation script scores (EM, F1, ACC_R = every gold token among the prediction's):
#  1 " False " vs "no": their True/False map needs the exact string, so "false" != "no": 0, 0 (yes/no rule), 0
#  2 "True" vs "yes": 1, 1, 1
#  3 "Miller v. California" vs "Miller v._California": both "miller v california": 1, 1, 1
#  4 "Sartre, Jean-Paul" vs "Jean-Paul Sartre": "sartre jean paul" vs "jean paul sartre": 0, 1, 1
#  5 "Hey Jude" vs "‘Hey Jude’": the typographic quotes are punctuation: 1, 1, 1
#  6 "in 1990s" vs "1990": 0, 0, 0
#  7 "city of paris france" vs "paris" | "city of paris": 0, max(0.4, 6/7), 1
#  8 "dylan" vs "bob dylan": 0, 2/3, 0
AUTHORS = {
    "em": [0, 1, 1, 0, 1, 0, 0, 0],
    "f1": [0, 1, 1, 1, 1, 0, 6 / 7, 2 / 3],
    "cover_em_tokens": [0, 1, 1, 1, 1, 0, 1, 0],
}


def test_rescoring_an_excerpt_of_the_release_gives_the_authors_scores(tmp_path) -> None:
    items = rescore.rescore_file(EXCERPT, ["em", "f1", "cover_em_tokens"])
    for metric, expected in AUTHORS.items():
        assert [it["metrics"][metric] for it in items] == pytest.approx(expected), metric
    out = tmp_path / "rescored"
    res = runner.invoke(cli.app, ["eval", "rescore", str(EXCERPT), "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    (row,) = json.loads((out / "summary.json").read_text())["rows"]
    # printed to one decimal as the paper prints: EM 3/8, ACC_R 5/8, F1 (4 + 6/7 + 2/3) / 8
    assert (f"{100 * row['em']:.1f}", f"{100 * row['cover_em_tokens']:.1f}", f"{100 * row['f1']:.1f}") == (
        "37.5",
        "62.5",
        "69.0",
    )
    md = (out / "summary.md").read_text()
    assert "cover_em_tokens: r1_searcher" in md and "em: r1_searcher" in md


def test_squad_normalisation_scores_the_excerpt_differently() -> None:
    items = rescore.rescore_file(EXCERPT, ["em", "cover_em_tokens"], normalize="squad")
    # SQuAD deletes punctuation: row 3 becomes "miller vcalifornia" vs "miller v california" (0), row 5 keeps the
    # typographic quotes (0), row 2 has no True/False map (0); only the token covers of rows 4 ("sartre jeanpaul")
    # and 7 survive.
    assert [it["metrics"]["em"] for it in items] == [0, 0, 0, 0, 0, 0, 0, 0]
    assert [it["metrics"]["cover_em_tokens"] for it in items] == [0, 0, 0, 1, 0, 0, 1, 0]


@pytest.mark.parametrize(
    "protocol, em_norm, boundary",
    [
        ("search_r1", "squad", "char"),
        ("r1_searcher", "r1_searcher", "char"),
        ("rag_r1", "rag_r1", "word"),
        ("r_search", "squad", "char"),
        ("r1_searcher_pp", "squad", "char"),
        ("search_o1", "squad", "word"),
    ],
)
def test_auto_follows_each_methods_own_evaluation_code(protocol, em_norm, boundary) -> None:
    settings = harness.metric_settings(["em", "f1", "cover_em", "cover_em_tokens"], protocol=protocol)
    assert settings["em"] == settings["f1"] == {"normalize": em_norm}
    assert settings["cover_em"] == {"normalize": em_norm, "boundary": boundary}
    assert settings["cover_em_tokens"] == {"normalize": "r1_searcher"}  # the metric's own definition
    forced = harness.metric_settings(["em", "cover_em", "cover_em_tokens"], "squad", "word", protocol)
    assert forced == {
        "em": {"normalize": "squad"},
        "cover_em": {"normalize": "squad", "boundary": "word"},
        "cover_em_tokens": {"normalize": "squad"},
    }


class RecordingGenerator:
    """Scripted replies; records the sampling parameters and the batch size of every call."""

    def __init__(self, tokenizer, reply) -> None:
        self.tokenizer, self.reply = tokenizer, reply
        self.params: list[SamplingParams] = []
        self.batch_sizes: list[int] = []

    def generate(self, prompts, params):
        self.params.append(params)
        self.batch_sizes.append(len(prompts))
        out = []
        for p in prompts:
            text = self.reply(self.tokenizer.decode(p, skip_special_tokens=True))
            for s in params.stop:
                if s in text:
                    text = text[: text.index(s) + len(s)]
            ids = self.tokenizer.encode(text)
            out.append(Completion(ids, [0.0] * len(ids), text, "stop" if params.stop else "eos", None))
        return out


def test_config_reaches_scores_top_p_and_timing(tmp_path, qa_file, fakes, monkeypatch) -> None:
    """evaluation.normalize / boundary / top_p / timing from the config reach the predictions and the summary."""
    from searchrl.generation.fake import ByteTokenizer

    gen = RecordingGenerator(ByteTokenizer(), lambda ctx: "Tom Hales" if fakes.Q_HALE in ctx else "Rome")
    qa = qa_file
    cfg = load_config(
        None,
        [
            f"evaluation.datasets=[{qa}]",
            "evaluation.methods=[direct]",
            "evaluation.top_p=0.9",
            "evaluation.temperature=0.5",
            "evaluation.timing=single",
            "evaluation.batch_size=8",
            f"evaluation.output_dir={tmp_path / 'out'}",
            "rollout.protocol=search_r1",
        ],
    )
    result = harness.run_from_config(cfg, generator=gen, retriever=fakes.KeywordRetriever())
    assert {p.top_p for p in gen.params} == {0.9} and {p.temperature for p in gen.params} == {0.5}
    assert gen.batch_sizes == [1, 1, 1]  # timing: single answers one question at a time
    by_id = {it["id"]: it for it in result.items}
    # search_r1's code: cover EM is a plain substring test, so "tom hale" covers "tom hales"
    assert by_id["q2"]["metrics"]["cover_em"] == 1.0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["timing"] == "single" and summary["latency_batch_size"] == 1
    assert summary["metric_settings"]["cover_em"] == {"normalize": "squad", "boundary": "char"}
    assert "batch size 1" in (tmp_path / "out" / "summary.md").read_text()
    # the same run with boundary: word (our default elsewhere) does not credit the partial token
    cfg2 = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update={"boundary": "word"})})
    again = harness.run_from_config(cfg2, generator=gen, retriever=fakes.KeywordRetriever())
    assert {it["id"]: it for it in again.items}["q2"]["metrics"]["cover_em"] == 0.0


def test_direct_method_rejects_a_bad_top_p(fakes) -> None:
    with pytest.raises(ValueError, match="top_p"):
        DirectMethod(fakes.scripted(fakes.direct_reply), top_p=0.0)


def test_multi_query_calls_count_as_one_search_with_several_queries(fakes) -> None:
    """RAG-R1 counts a search call holding three queries as one retrieval; queries get their own column."""
    protocol = get_protocol("rag_r1", multi_query=True, max_queries=3)

    def reply(ctx: str) -> str:
        if '"documents"' not in ctx:  # no observation yet
            return "<think>three things</think>\n<search> Anna Berg, Blue Lake, Oslo </search>"
        return "<think>done</think>\n<answer> Rome </answer>"

    limits = RolloutLimits(
        max_turns=3, max_searches=2, max_new_tokens=200, max_obs_tokens=2000, max_total_tokens=8000, topk=1
    )
    (pred,) = AgentMethod(fakes.scripted(reply), fakes.KeywordRetriever(), protocol, limits=limits).answer(
        [QAExample("q1", fakes.Q_ROME, ["Rome"])]
    )
    assert pred.text == "Rome" and (pred.searches, pred.queries) == (1, 3)
