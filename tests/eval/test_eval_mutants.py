"""Evaluation behaviours a mutation audit found unpinned: counts, averages and selection rules, with hand-written
expected values."""

from __future__ import annotations

import json

import numpy as np

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.eval.baselines import AgentMethod, IterativeRAGMethod
from searchrl.eval.datasets import resolve_eval_sets
from searchrl.eval.diagnostics import diagnose
from searchrl.eval.harness import item_row
from searchrl.eval.method import Method, Prediction
from searchrl.eval.prior import AnswerPrior
from searchrl.eval.report import AVERAGE, aggregate, render_markdown
from searchrl.eval.rescore import rescore_file
from searchrl.eval.scoring import check_metrics, convention, metric_settings
from searchrl.eval.stats import _p, add_intervals, interval, sign_flip_p
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


def test_a_multi_query_call_is_one_search_of_its_queries() -> None:
    retriever = _Retriever()

    def reply(ctx: str) -> str:
        if "Anna was born in Rome." in ctx:
            return "<think> found </think> <answer> Rome </answer>"
        return "<think> two things </think> <search> where is Anna, where is Rome </search>"

    gen = ScriptedGenerator(ByteTokenizer(), reply)
    limits = RolloutLimits(max_turns=3, max_searches=2, max_new_tokens=200, max_total_tokens=20000, topk=1)
    protocol = get_protocol("rag_r1", multi_query=True)
    (pred,) = AgentMethod(gen, retriever, protocol, limits=limits).answer([QAExample("q", "Where?", ["Rome"])])
    assert retriever.calls == [["where is Anna", "where is Rome"]]
    assert pred.text == "Rome" and (pred.searches, pred.queries) == (1, 2)


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
    md = render_markdown(rows, ["em", "judge"])
    assert "left out of its accuracy: m on a: 2, m on b: 1.\n" in md  # per dataset, the sum not listed again


def test_a_nan_figure_is_left_out_of_its_mean_like_a_missing_one() -> None:
    items = [
        {"dataset": "a", "method": "m", "metrics": {"em": 1.0}, "latency_s": 2.0},
        {"dataset": "a", "method": "m", "metrics": {"em": float("nan")}, "latency_s": float("nan")},
        {"dataset": "a", "method": "m", "metrics": {"em": 0.0}},
        {"dataset": "a", "method": "m", "metrics": {"em": 0.0}, "latency_s": 4.0},
    ]
    (row,) = aggregate(items, ["em"])
    assert row["em"] == 1 / 3 and row["latency_s"] == 3.0 and row["n"] == 4


def test_the_question_counts_line_names_the_datasets_not_the_average_row() -> None:
    items = [_row("a", 1.0), _row("a", 0.0), _row("b", 1.0)]
    md = render_markdown(aggregate(items, ["em"]), ["em"])
    assert "Questions per dataset: a: 2, b: 1.\n" in md


# --------------------------------------------------------------------------------------------- intervals and tests


def test_an_average_of_a_constant_dataset_and_a_varying_one_still_varies() -> None:
    lo, hi = interval([np.ones(3), np.array([0.0, 1.0] * 10)], 1000, np.random.default_rng(0))
    assert lo < 0.75 < hi  # the mean of 1.0 and 0.5; only the constant dataset is alike in every resample


def test_zero_differences_do_not_push_the_test_off_its_exact_enumeration() -> None:
    # three +1 differences (and 14 ties): 8 sign patterns, of which all + and all - reach the observed 3
    assert sign_flip_p([np.array([1.0, 1.0, 1.0] + [0.0] * 14)], 1000, np.random.default_rng(0)) == 0.25


def test_the_interval_does_not_depend_on_the_order_of_the_rows() -> None:
    values = [0.05 * i for i in range(20)]  # F1-like scores: every resample mean its own value
    items = [{"dataset": "d", "method": "m", "id": f"q{i:02d}", "metrics": {"f1": v}} for i, v in enumerate(values)]
    forward, backward = aggregate(items, ["f1"]), aggregate(items[::-1], ["f1"])
    add_intervals(forward, items, ["f1"], 0, 200)
    add_intervals(backward, items[::-1], ["f1"], 0, 200)
    assert forward[0]["f1_ci95"] == backward[0]["f1_ci95"]


def test_a_p_value_of_exactly_one_in_a_thousand_is_printed_as_it_is() -> None:
    assert (_p(0.001), _p(0.000999), _p(0.0125)) == ("p=0.001", "p<0.001", "p=0.013")


# --------------------------------------------------------------------------------------------- scoring rules


def test_a_normalisation_given_alone_keeps_the_protocols_cover_boundary() -> None:
    # Search-R1 scores cover-EM as a plain substring ("char"); the default without a protocol is word-bounded
    settings = metric_settings(["em", "cover_em"], normalize="r1_searcher", protocol="search_r1")
    assert settings == {
        "em": {"normalize": "r1_searcher"},
        "cover_em": {"normalize": "r1_searcher", "boundary": "char"},
    }
    # and a boundary given alone keeps the protocol's normalisation
    assert metric_settings(["em"], boundary="word", protocol="r1_searcher") == {"em": {"normalize": "r1_searcher"}}


def test_judge_among_the_metrics_is_left_to_the_harness() -> None:
    assert check_metrics(["em", "judge", "f1"]) == ["em", "f1"]


def test_the_trained_baselines_are_scored_as_search_r1_scores_its_agent() -> None:
    assert convention("reason") == convention("rag") == convention("search_r1") == ("squad", "char")


# --------------------------------------------------------------------------------------------- IRCoT's documents


class _FreshRetriever:
    """Other documents for every query: ``<query>-<i>``."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", "T", f"text {i}", 1.0) for i in range(k)] for q in queries]


def test_iterative_rag_stops_gathering_documents_at_max_docs() -> None:
    gen = ScriptedGenerator(ByteTokenizer(), lambda ctx: "Not sure. ")
    method = IterativeRAGMethod(gen, _FreshRetriever(), topk=3, max_steps=2, max_docs=4)
    (pred,) = method.answer([QAExample("q", "Who?", ["x"])])
    # 3 from the question, then 1 of the 3 the first sentence retrieved; the second sentence's 3 find no room
    assert pred.trajectory["doc_ids"] == ["Who?-0", "Who?-1", "Who?-2", "Not sure.-0"]
    assert pred.searches == 3


def test_iterative_rag_stops_a_finished_question_and_forces_an_answer_from_a_silent_one() -> None:
    def reply(ctx: str) -> str:
        if "Where?" in ctx:
            return "So the answer is: Rome. More"
        return " Oslo\nmore" if ctx.endswith("So the answer is:") else ""

    gen = ScriptedGenerator(ByteTokenizer(), reply)
    method = IterativeRAGMethod(gen, _FreshRetriever(), topk=1, max_steps=3)
    a, b = method.answer([QAExample("a", "Where?", ["Rome"]), QAExample("b", "Which?", ["Oslo"])])
    assert [len(c) for c in gen.calls] == [2, 1]  # one step for both, then only b's forced answer
    assert (a.text, a.raw, a.searches, a.trajectory["forced_answer"]) == ("Rome", "So the answer is: Rome. ", 1, False)
    assert (b.text, b.raw, b.searches, b.trajectory["forced_answer"]) == ("Oslo", " So the answer is: Oslo\n", 1, True)


# --------------------------------------------------------------------------------------------- failure flags


def test_a_right_answer_the_documents_lacked_is_no_retrieval_failure() -> None:
    turns = [{"action": "search", "queries": ["Ada Vell"], "observation": "Ada Vell is a painter."}]
    row = {"question": "Where was Ada Vell born?", "golds": ["Paris"], "prediction": "Paris", "searches": 1}
    flags = diagnose({**row, "trajectory": {"turns": turns}})
    assert flags["searched"] and flags["gold_in_docs"] is False
    assert not flags["retrieval_failure"] and not flags["reading_failure"]
    wrong = diagnose({**row, "prediction": "Lyon", "trajectory": {"turns": turns}})
    assert wrong["retrieval_failure"] and not wrong["reading_failure"]


def test_a_row_counts_its_own_searches_when_its_trace_holds_no_documents() -> None:
    # iter_retgen's trace holds its rounds, not documents: its searches come from the row's count
    row = {"question": "Who?", "golds": ["x"], "prediction": "y", "searches": 3, "trajectory": {"rounds": []}}
    flags = diagnose(row)
    assert flags["searched"] and flags["gold_in_docs"] is None and not flags["retrieval_failure"]
    assert diagnose({**row, "searches": 0})["searched"] is False


def test_an_answer_in_a_broken_format_is_a_format_failure() -> None:
    row = {"question": "Who?", "golds": ["x"], "prediction": "x", "searches": 0, "trajectory": None}
    assert diagnose({**row, "well_formed": False})["format_failure"] is True
    assert diagnose({**row, "well_formed": None})["format_failure"] is False  # a baseline has no format
    assert diagnose({**row, "prediction": None})["format_failure"] is True


# --------------------------------------------------------------------------------------------- evaluation sets


def test_a_set_named_average_is_renamed_so_the_summary_average_row_stays_apart(tmp_path) -> None:
    path = tmp_path / "average.jsonl"
    path.write_text(json.dumps({"id": "q", "question": "Who?", "golden_answers": ["x"]}) + "\n")
    (s,) = resolve_eval_sets(load_config(None, [f"evaluation.datasets=[{path}]"]))
    assert s.name == "average_2"


# --------------------------------------------------------------------------------------------- the answer prior


def test_the_prior_counts_no_position_for_a_choice_question_whose_golds_name_both_options() -> None:
    train = [
        QAExample("a", "Who was born first, Ann Lee or Bo Chan?", ["Ann Lee", "Bo Chan"]),  # no position told
        QAExample("b", "Who died later, Cy Dorn or Di Este?", ["Di Este"]),  # the second
    ]
    prior = AnswerPrior.fit(train)
    assert dict(prior.positions) == {1: 1}
    assert prior.answer("Who is older, Al or Bea?") == "Bea"


def test_the_prior_answers_in_the_first_written_form_of_an_answer() -> None:
    train = [QAExample(str(i), "Where was it?", [gold]) for i, gold in enumerate(["Paris", "paris.", "PARIS"])]
    assert AnswerPrior.fit(train).answer("Where is it?") == "Paris"


# --------------------------------------------------------------------------------------------- rescoring


def test_a_released_boolean_gold_is_rescored_as_yes_or_no(tmp_path) -> None:
    rows = [{"question": "Is it?", "answer": True, "pred_ans": "yes"}, {"question": "Is not?", "answer": [False]}]
    rows[1]["pred_ans"] = "yes"
    path = tmp_path / "released.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = rescore_file(path, ["em"])
    assert (a["golds"], a["metrics"]["em"]) == (["yes"], 1.0)
    assert (b["golds"], b["metrics"]["em"]) == (["no"], 0.0)
    assert (a["id"], b["id"]) == ("1", "2")  # the line number, without an id of its own


def test_a_released_row_keeps_its_idx_as_its_id(tmp_path) -> None:
    path = tmp_path / "released.json"
    path.write_text(json.dumps([{"idx": 7, "question": "Who?", "answer": "Ann", "pred_ans": "Ann"}]))
    (row,) = rescore_file(path, ["em"])
    assert row["id"] == "7" and row["metrics"]["em"] == 1.0


def test_a_boundary_given_alone_overrides_the_one_a_row_recorded(tmp_path) -> None:
    recorded = {"cover_em": {"normalize": "squad", "boundary": "char"}}
    row = {"question": "Who?", "golds": ["art"], "prediction": "the artist", "metric_settings": recorded}
    path = tmp_path / "d__m.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (kept,) = rescore_file(path, ["cover_em"])
    assert kept["metrics"]["cover_em"] == 1.0  # the recorded rule: a plain substring
    (word,) = rescore_file(path, ["cover_em"], boundary="word")
    assert word["metrics"]["cover_em"] == 0.0 and word["metric_settings"]["cover_em"]["boundary"] == "word"


def test_a_predictions_row_scores_its_first_metric_as_the_record_score() -> None:
    ex = QAExample("q", "Who?", ["Ann Lee"])
    row = item_row("d", "m", ex, Prediction("Lee", searches=2, queries=3), ["f1", "em"])
    assert row["score"] == 2 / 3 and row["metrics"] == {"f1": 2 / 3, "em": 0.0}
    assert (row["searches"], row["queries"], row["source"]) == (2, 3, "eval/d/m")


def test_latency_is_the_batch_time_shared_by_its_questions(monkeypatch) -> None:
    import searchrl.eval.method as method_module

    monkeypatch.setattr(method_module.time, "perf_counter", lambda: 10.0)
    preds = Method._stamp([Prediction("a"), Prediction("b"), Prediction("c")], 4.0)
    assert [p.latency_s for p in preds] == [2.0, 2.0, 2.0]  # 6 s over 3 questions


def test_reason_in_documents_inserts_what_follows_the_last_final_information() -> None:
    from searchrl.eval.search_o1 import final_information

    analysis = "Final Information would come last.\n**Final Information:** Anna was born in Rome."
    assert final_information(analysis) == ("Anna was born in Rome.", True)
