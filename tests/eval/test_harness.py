"""The harness end to end with fakes: predictions files, exact summary numbers, valid markdown, a PNG that opens; and
the summaries' edge cases (methods run on some datasets only, empty datasets, `|` in names, many panels, a re-scored
run, text UTF-8 cannot hold)."""

from __future__ import annotations

import csv
import json

import httpx
import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from searchrl import cli
from searchrl.eval.baselines import DirectMethod, NaiveRAGMethod
from searchrl.eval.diagnostics import shares_table
from searchrl.eval.harness import dataset_name, evaluate
from searchrl.eval.report import AVERAGE, aggregate, plot_summary, render_markdown
from searchrl.rewards.judge import LLMJudge
from searchrl.utils import read_jsonl, write_jsonl

METRICS = ["em", "f1", "cover_em", "cover_em_tokens"]
SCORES = ["em", "f1", "cover_em", "cover_em_committed", "cover_em_tokens"]  # what the summaries show


def rag_reply(ctx: str) -> str:
    if "Anna Berg was born in Rome" in ctx:
        return "Rome"
    return "Tom Hale" if "directed by Tom Hale" in ctx else "no"


def table_rows(markdown: str) -> list[list[str]]:
    """Cells of the first table's lines; asserts the markdown table shape on the way."""
    all_lines = markdown.splitlines()
    start = next(i for i, ln in enumerate(all_lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(all_lines)) if not all_lines[i].startswith("|")), len(all_lines))
    lines = all_lines[start:end]
    assert len(lines) >= 3, "a header, a separator and at least one row"
    for ln in lines:
        assert ln.endswith("|"), ln
    cells = [[c.strip() for c in ln.replace("\\|", "").strip("|").split("|")] for ln in lines]
    assert len({len(c) for c in cells}) == 1, "every row has the header's column count"
    assert all(set(c) <= set("-:") and "-" in c for c in cells[1]), "second line is the header separator"
    return [cells[0], *cells[2:]]


@pytest.fixture
def run(tmp_path, examples, fakes):
    retriever = fakes.KeywordRetriever()
    direct = DirectMethod(fakes.scripted(fakes.direct_reply))
    rag = NaiveRAGMethod(fakes.scripted(rag_reply), retriever, topk=2)
    datasets = {"toy": examples, "toy2": examples[:2]}
    result = evaluate(
        datasets, {"direct": direct, "naive_rag": rag}, tmp_path, metrics=METRICS, batch_size=2, show=False
    )
    return tmp_path, result, retriever


def test_predictions_files_hold_question_golds_prediction_and_item_metrics(run) -> None:
    out, result, retriever = run
    lines = [json.loads(x) for x in (out / "predictions" / "toy__direct.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in lines] == ["Rome", "The director is Tom Hale", "No"]
    assert lines[1]["golds"] == ["Tom Hale", "T. Hale"] and lines[1]["question"] == "Who directed Blue Lake?"
    assert lines[1]["metrics"] == {
        "em": 0.0,
        "f1": pytest.approx(2 / 3),
        "cover_em": 1.0,
        "cover_em_committed": 1.0,  # not a choice question, so nothing is hedged
        "cover_em_tokens": 1.0,
    }
    rag = [json.loads(x) for x in (out / "predictions" / "toy__naive_rag.jsonl").read_text().splitlines()]
    assert [r["trajectory"]["hit_ids"] for r in rag] == [[["d-anna"]], [["d-blue"]], [["d-oslo"]]]
    assert sorted(p.name for p in (out / "predictions").iterdir()) == [
        "toy2__direct.jsonl",
        "toy2__naive_rag.jsonl",
        "toy__direct.jsonl",
        "toy__naive_rag.jsonl",
    ]
    # batch_size=2: the 3 questions of "toy" take two retriever calls, the 2 of "toy2" one
    assert [len(q) for q, _ in retriever.calls] == [2, 1, 2]


def test_every_row_says_why_its_answer_is_wrong(run) -> None:
    out, result, _ = run
    rag = [json.loads(x) for x in (out / "predictions" / "toy__naive_rag.jsonl").read_text().splitlines()]
    direct = [json.loads(x) for x in (out / "predictions" / "toy__direct.jsonl").read_text().splitlines()]
    assert all(r["diagnostics"]["gold_in_docs"] is None for r in direct)  # nothing retrieved
    assert [r["diagnostics"]["gold_in_docs"] for r in rag] == [
        r["trajectory"]["docs"] != []
        and any(g.lower() in " ".join(r["trajectory"]["docs"]).lower() for g in r["golds"])
        for r in rag
    ]
    for r in rag:
        d = r["diagnostics"]
        assert d["reading_failure"] == (d["gold_in_docs"] and r["metrics"]["em"] < 1)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["diagnostics"]) == {"toy / direct", "toy / naive_rag", "toy2 / direct", "toy2 / naive_rag"}
    md = (out / "summary.md").read_text()
    assert "| dataset | method | gold in docs | reading fail |" in md


def test_summary_numbers_are_exact(run) -> None:
    _, result, _ = run
    rows = {(r["dataset"], r["method"]): r for r in result.rows}
    d = rows[("toy", "direct")]
    assert d["n"] == 3 and d["em"] == pytest.approx(1 / 3) and d["f1"] == pytest.approx(5 / 9)
    assert d["cover_em"] == pytest.approx(2 / 3) and d["searches"] == 0
    d2 = rows[("toy2", "direct")]
    assert d2["em"] == pytest.approx(1 / 2) and d2["f1"] == pytest.approx(5 / 6)
    avg = rows[(AVERAGE, "direct")]
    assert avg["em"] == pytest.approx((1 / 3 + 1 / 2) / 2) and avg["n"] == 5  # unweighted over datasets
    r = rows[("toy", "naive_rag")]
    assert r["em"] == pytest.approx(2 / 3) and r["searches"] == 1  # q3 answers "no" to a yes question
    assert r["gen_tokens"] == pytest.approx((len("Rome") + len("Tom Hale") + len("no") + 3) / 3)
    assert all(row["latency_s"] > 0 for row in result.rows)


def test_summary_markdown_is_a_valid_table(run) -> None:
    out, result, _ = run
    md = (out / "summary.md").read_text()
    rows = table_rows(md)
    header, body = rows[0], rows[1:]
    assert header[0] == "method" and [b[0] for b in body] == ["direct", "naive_rag"]
    assert "toy EM" in header and "Average EM" in header and "searches/q" in header
    direct = dict(zip(header, body[0], strict=True))
    assert direct["toy EM"] == "33.3" and direct["toy2 F1"] == "83.3" and direct["Average EM"] == "41.7"
    notes = [ln for ln in md.splitlines() if ln.startswith(("Answer normalisation:", "searches/q counts"))]
    assert notes[0].startswith("Answer normalisation: em: squad; f1: squad; cover_em: squad, word boundary;")
    assert "batches of 2" in notes[1] and "queries/q" in header
    # the intervals, the paired comparisons, then the failure table follow the scores
    intervals, compared, why = md.index("## 95% confidence"), md.index("## Paired"), md.index("Why answers are wrong")
    assert intervals < compared < why
    assert md == render_markdown(result.rows, SCORES, notes=notes, after=[md[intervals:].rstrip("\n")])


def test_summary_csv_and_json_carry_the_same_rows(run) -> None:
    out, result, _ = run
    with (out / "summary.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    data = json.loads((out / "summary.json").read_text())
    assert len(csv_rows) == len(data["rows"]) == len(result.rows) == 6  # 2 datasets x 2 methods + 2 averages
    for c, j in zip(csv_rows, data["rows"], strict=True):
        assert (c["dataset"], c["method"]) == (j["dataset"], j["method"])
        assert float(c["em"]) == pytest.approx(j["em"])
    assert data["metrics"] == SCORES and data["datasets"] == {"toy": 3, "toy2": 2}


def test_summary_png_opens(run) -> None:
    out, _, _ = run
    png = out / "summary.png"
    assert png.stat().st_size > 5_000
    img = mpimg.imread(png)  # (H, W, 4) floats
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 400
    assert img[..., :3].std() > 0.05  # not a blank canvas


def test_one_dataset_has_no_average_column(tmp_path, examples, fakes) -> None:
    result = evaluate(
        {"only": examples},
        {"direct": DirectMethod(fakes.scripted(fakes.direct_reply))},
        tmp_path,
        metrics=["em"],
        show=False,
    )
    assert [r["dataset"] for r in result.rows] == ["only"]
    header = table_rows((tmp_path / "summary.md").read_text())[0]
    assert header == ["method", "only EM", "searches/q", "queries/q", "gen tokens/q", "latency s/q"]


def test_judge_column(tmp_path, examples, fakes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["messages"][0]["content"]
        pred = prompt.split("Predicted answer:")[-1].strip()
        reply = {"Rome": "True", "No": "hmm"}.get(pred, "False")
        return httpx.Response(200, json={"choices": [{"message": {"content": reply}}]})

    judge = LLMJudge("http://judge.test/v1", "fake-judge", cache_path=tmp_path / "judge.json")
    judge._client = httpx.Client(transport=httpx.MockTransport(handler))
    result = evaluate(
        {"toy": examples},
        {"direct": DirectMethod(fakes.scripted(fakes.direct_reply))},
        tmp_path,
        metrics=["em"],
        judge=judge,
        show=False,
        extra={"notes": ["Only the first questions of a set (evaluation.limit): toy 3 of 9."]},
    )
    row = result.rows[0]
    # verdicts: True, False, unreadable -> accuracy over the two readable ones, one unparsed
    assert row["judge"] == pytest.approx(1 / 2) and row["judge_unparsed"] == 1
    lines = [json.loads(x) for x in (tmp_path / "predictions" / "toy__direct.jsonl").read_text().splitlines()]
    assert [r["metrics"]["judge"] for r in lines] == [1.0, 0.0, None]
    summary = (tmp_path / "summary.md").read_text()
    assert "toy judge" in table_rows(summary)[0]
    assert "could not be read, left out of its accuracy: direct on toy: 1." in summary
    assert "(evaluation.limit): toy 3 of 9." in summary  # the run's own notes reach the summary
    assert judge.n_requests == 3


def test_aggregate_keeps_none_out_of_means() -> None:
    items = [
        {"dataset": "d", "method": "m", "metrics": {"em": 1.0}, "searches": None, "gen_tokens": 4, "latency_s": 1.0},
        {"dataset": "d", "method": "m", "metrics": {"em": 0.0}, "searches": None, "gen_tokens": 8, "latency_s": 3.0},
    ]
    (row,) = aggregate(items, ["em"])
    assert row == {
        "dataset": "d",
        "method": "m",
        "n": 2,
        "em": 0.5,
        "searches": None,
        "queries": None,
        "gen_tokens": 6.0,
        "latency_s": 2.0,
    }
    md = render_markdown([row], ["em"])
    assert table_rows(md)[1] == ["m", "50.0", "-", "-", "6.0", "2.000"]


@pytest.mark.parametrize(
    "source, name",
    [
        ("data/2wiki-mini/dev.jsonl", "dev"),
        ("hf:RUC-NLPIR/FlashRAG_datasets:hotpotqa:dev", "hotpotqa_dev"),
        ("hf:squad:validation", "squad_validation"),
        ("some/dir", "dir"),
    ],
)
def test_dataset_names(source: str, name: str) -> None:
    assert dataset_name(source) == name


def test_bad_batch_size_and_metric(tmp_path, examples, fakes) -> None:
    methods = {"direct": DirectMethod(fakes.scripted(fakes.direct_reply))}
    with pytest.raises(ValueError, match="batch_size"):
        evaluate({"d": examples}, methods, tmp_path, batch_size=0, show=False)
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate({"d": examples}, methods, tmp_path, metrics=["accuracy"], show=False)


def test_evaluation_section_overrides_topk_limits_and_temperature(fakes) -> None:
    """Papers evaluate with other settings than they train with (R-Search: top-5, T = 0.1; RAG-R1: 5 searches)."""
    from searchrl.config import load_config
    from searchrl.eval.harness import build_methods

    gen = fakes.scripted(fakes.direct_reply)
    cfg = load_config("rag_r1", ["evaluation.methods=[naive_rag,agent]", "evaluation.topk=7"])
    methods = build_methods(cfg, gen, fakes.KeywordRetriever())
    assert methods["naive_rag"].topk == 7 and methods["agent"].engine.limits.topk == 7
    lim = methods["agent"].engine.limits
    assert (lim.max_searches, lim.max_turns, lim.max_new_tokens) == (5, 5, 1024)  # not the training 4 / 4 / 500
    assert methods["agent"].temperature == 0.7
    plain = build_methods(load_config("demo", ["evaluation.methods=[agent]"]), gen, fakes.KeywordRetriever())
    demo = load_config("demo")
    assert plain["agent"].engine.limits.max_searches == demo.rollout.max_searches
    assert plain["agent"].engine.limits.topk == demo.retrieval.topk


def test_search_o1_is_built_with_its_own_limits_unless_set(fakes) -> None:
    """Search-o1 uses the evaluation top-k and its own limits (10 searches, 15 turns, 1,024 tokens a turn), not the
    trained agent's rollout ones, where the evaluation does not set them; its search limit is the prompt's."""
    from searchrl.config import load_config
    from searchrl.eval.harness import build_methods
    from searchrl.eval.search_o1 import SearchO1Method

    gen = fakes.scripted(fakes.direct_reply)
    over = [
        "evaluation.methods=[search_o1]",
        "evaluation.topk=5",
        "evaluation.max_searches=10",
        "evaluation.search_o1_refine_max_new_tokens=300",
    ]
    method = build_methods(load_config("demo", over), gen, fakes.KeywordRetriever())["search_o1"]
    assert isinstance(method, SearchO1Method)
    assert (method.engine.limits.topk, method.engine.limits.max_searches) == (5, 10)
    assert method.reason_in_documents.refine_max_new_tokens == 300 and method.protocol.max_searches == 10
    assert method.engine.document_step is method.reason_in_documents
    assert "no more than 10 times" in method.protocol.instruction("q")
    with pytest.raises(ValueError, match=r"needs a retriever: pass retriever= .* \(--index DIR, --url URL\)"):
        build_methods(load_config("demo", over), gen, None)
    own = build_methods(load_config("demo", over[:1]), gen, fakes.KeywordRetriever())["search_o1"].engine.limits
    assert (own.max_searches, own.max_turns, own.max_new_tokens) == (10, 15, 1024)
    set_here = ["evaluation.methods=[search_o1]", "evaluation.max_searches=2", "evaluation.agent_max_new_tokens=64"]
    limits = build_methods(load_config("demo", set_here), gen, fakes.KeywordRetriever())["search_o1"].engine.limits
    assert (limits.max_searches, limits.max_turns, limits.max_new_tokens) == (2, 15, 64)


def test_by_kind_scores_each_question_kind_and_well_formed_is_averaged() -> None:
    from searchrl.eval.harness import by_kind
    from searchrl.eval.report import aggregate

    def item(kind, em, wf):
        return {
            "dataset": "dev",
            "method": "agent",
            "kind": kind,
            "metrics": {"em": em},
            "searches": 1,
            "queries": 1,
            "gen_tokens": 10,
            "latency_s": 0.1,
            "well_formed": wf,
        }

    items = [item("bridge", 1.0, True), item("bridge", 0.0, False), item("comparison", 1.0, True)]
    rows = {r["kind"]: r for r in by_kind(items, ["em"])}
    assert rows["bridge"]["em"] == 0.5 and rows["bridge"]["n"] == 2 and rows["comparison"]["em"] == 1.0
    assert all(r["dataset"] == "dev" and r["method"] == "agent" for r in rows.values())
    assert aggregate(items, ["em"])[0]["well_formed"] == pytest.approx(2 / 3)


def test_summary_markdown_scores_the_datasets_own_question_types(tmp_path, examples, fakes) -> None:
    """HotpotQA's ``type`` and MuSiQue's hop ids reach a "Scores by question type" section of summary.md."""
    from dataclasses import replace

    typed = [
        replace(examples[0], metadata={"type": "bridge"}),
        replace(examples[1], id="2hop__7"),
        replace(examples[2], metadata={"type": "comparison"}),
    ]
    direct = DirectMethod(fakes.scripted(fakes.direct_reply))
    evaluate({"toy": typed}, {"direct": direct}, tmp_path, metrics=["em"], show=False)
    md = (tmp_path / "summary.md").read_text()
    section = md[md.index("## Scores by question type") :]
    rows = {r[2]: r for r in table_rows(section)[1:]}
    assert set(rows) == {"bridge", "2hop", "comparison"}
    assert rows["bridge"][4] == "100.0" and rows["2hop"][4] == "0.0" and rows["comparison"][4] == "0.0"
    assert {r["kind"] for r in json.loads((tmp_path / "summary.json").read_text())["by_kind"]} == set(rows)


def test_every_protocol_has_an_evaluation_convention() -> None:
    from searchrl.config.extensions import NAMES, registered
    from searchrl.eval.scoring import EVAL_CONVENTIONS

    assert set(NAMES["protocol"]) - set(registered("protocol")) == set(EVAL_CONVENTIONS)


def test_settings_default_to_the_methods_protocol_as_the_cli_picks_them(tmp_path, examples, fakes) -> None:
    from searchrl.eval.baselines import AgentMethod
    from searchrl.protocols import get_protocol

    agent = AgentMethod(fakes.scripted(lambda ctx: "<answer> Rome </answer>"), None, get_protocol("search_r1"))
    direct = DirectMethod(fakes.scripted(fakes.direct_reply))
    for methods, boundary in (({"agent": agent, "direct": direct}, "char"), ({"direct": direct}, "word")):
        result = evaluate({"toy": examples}, methods, tmp_path / boundary, metrics=["cover_em"], show=False)
        assert {r["metric_settings"]["cover_em"]["boundary"] for r in result.items} == {boundary}


# ------------------------------------------------------------------- summary edge cases


def _methods(fakes):
    return {
        "direct": DirectMethod(fakes.scripted(fakes.direct_reply)),
        "naive_rag": NaiveRAGMethod(fakes.scripted(rag_reply), fakes.KeywordRetriever(), topk=2),
    }


def test_a_method_on_some_datasets_gets_no_average(tmp_path, examples, fakes) -> None:
    methods = _methods(fakes)
    result = evaluate(
        {"toy": examples, "toy2": examples[:2]},
        methods,
        tmp_path,
        metrics=["em"],
        show=False,
        methods_by_dataset={"toy2": {"direct": methods["direct"]}},
    )
    averaged = {r["method"] for r in result.rows if r["dataset"] == AVERAGE}
    assert averaged == {"direct"}  # naive_rag ran on toy only: an average over one dataset would mislead
    md = (tmp_path / "summary.md").read_text()
    header, *body = table_rows(md)
    rag = dict(zip(header, next(b for b in body if b[0] == "naive_rag"), strict=True))
    assert rag["Average EM"] == "-" and rag["searches/q"] == "-" and rag["toy EM"] == "66.7"
    assert "`-` for a method not run on all" in md


def test_no_method_on_every_dataset_still_says_why_the_averages_are_empty() -> None:
    items = [
        {
            "dataset": d,
            "method": m,
            "metrics": {"em": 1.0},
            "searches": 0,
            "queries": 0,
            "gen_tokens": 1,
            "latency_s": 0.1,
        }
        for d, m in (("d1", "a"), ("d2", "b"))
    ]
    rows = aggregate(items, ["em"])
    assert not [r for r in rows if r["dataset"] == AVERAGE]
    assert "`-` for a method not run on all" in render_markdown(rows, ["em"])


def test_every_method_on_every_dataset_needs_no_note(tmp_path, examples, fakes) -> None:
    evaluate({"toy": examples, "toy2": examples[:2]}, _methods(fakes), tmp_path, metrics=["em"], show=False)
    assert "not run on all" not in (tmp_path / "summary.md").read_text()


def test_an_empty_dataset_is_named(tmp_path, examples, fakes, capsys) -> None:
    evaluate({"empty": [], "toy": examples}, _methods(fakes), tmp_path, metrics=["em"], show=False)
    md = (tmp_path / "summary.md").read_text()
    assert "Questions per dataset: empty: 0, toy: 3." in md
    assert "no questions in empty" in capsys.readouterr().err


def test_the_failure_table_escapes_pipes_in_names() -> None:
    shares = {("toy", "naive|rag"): {"gold_in_docs": 0.5}, ("toy", "direct"): {}}
    lines = shares_table(shares, ["toy"])
    header, *rows = table_rows("\n".join(lines))
    assert len(rows) == 2 and all(len(r) == len(header) for r in rows)


def test_many_panels_wrap_into_rows(tmp_path) -> None:
    metrics = ["em", "f1", "cover_em", "cover_em_tokens", "judge"]
    rows = [
        {"dataset": d, "method": m, "n": 3, **{k: 0.1 * i for k in metrics}}
        for d in ("a", "b", "c")
        for i, m in enumerate(("m1", "m2", "m3", "m4", "m5"))
    ]
    img = mpimg.imread(plot_summary(rows, metrics, tmp_path / "s.png"))
    height, width = img.shape[:2]
    assert width <= 16 * 110 + 10 and height > width / 2  # five 8-inch panels: two per row, three rows


def test_rescore_out_keeps_the_failure_table(tmp_path, examples, fakes) -> None:
    evaluate({"toy": examples}, _methods(fakes), tmp_path / "run", metrics=["em"], show=False)
    pred = tmp_path / "run" / "predictions" / "toy__naive_rag.jsonl"
    res = CliRunner().invoke(cli.app, ["eval", "rescore", str(pred), "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "again" / "summary.md").read_text()
    assert "Why answers are wrong" in md and "| toy | naive_rag |" in md
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    original = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["diagnostics"]["toy / naive_rag"] == original["diagnostics"]["toy / naive_rag"]


@pytest.mark.parametrize("text", ["q\ud800", "\udfff end", "fine é"])
def test_lone_surrogates_round_trip_through_jsonl(tmp_path, text: str) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [{"question": text}])
    assert [r["question"] for _, r in read_jsonl(path)] == [text]


def test_an_evaluation_without_an_output_directory_keeps_nothing_on_disk(
    examples, fakes, monkeypatch, tmp_path
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the scratch files go, to see them removed
    result = evaluate({"toy": examples}, _methods(fakes), None, metrics=["em"], show=False)
    assert result.paths == {} and len(result.items) == 6 and list(tmp_path.iterdir()) == []
    assert {(r["dataset"], r["method"]) for r in result.rows} == {("toy", "direct"), ("toy", "naive_rag")}


def test_items_in_memory_leave_the_token_ids_to_the_predictions_files(tmp_path, examples, fakes) -> None:
    """An agent row's token id lists are most of its memory (GBs over the Search-R1 test sets): with an output
    directory the result's items lack them and the predictions file keeps them; without one the items are whole.
    Scores and diagnostics read only the text, so they are the same either way."""
    from searchrl.eval.baselines import AgentMethod
    from searchrl.protocols import get_protocol
    from searchrl.rollout.record import TOKEN_FIELDS

    def agent() -> dict:
        return {
            "agent": AgentMethod(
                fakes.scripted(lambda ctx: "<answer> Rome </answer>"), None, get_protocol("search_r1")
            )
        }

    on_disk = evaluate({"toy": examples}, agent(), tmp_path, metrics=["em"], show=False)
    whole = evaluate({"toy": examples}, agent(), None, metrics=["em"], show=False)
    (_, first), *_ = read_jsonl(on_disk.paths["toy__agent"])
    assert all(first["trajectory"][k] for k in ("prompt_ids", "response_ids", "action_mask"))
    assert not any(k in it["trajectory"] for it in on_disk.items for k in TOKEN_FIELDS)
    assert all(k in it["trajectory"] for it in whole.items for k in TOKEN_FIELDS)
    assert on_disk.items[0]["trajectory"]["turns"] == whole.items[0]["trajectory"]["turns"]
    timeless = [[{k: v for k, v in r.items() if k != "latency_s"} for r in res.rows] for res in (on_disk, whole)]
    assert timeless[0] == timeless[1]
