"""``searchrl eval`` and ``searchrl eval rescore`` through the real command line (model and retriever faked)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from searchrl import cli, pipeline
from searchrl.commands.eval import build_config
from searchrl.data.records import QAExample
from searchrl.eval import harness
from searchrl.eval.baselines import Prediction
from searchrl.eval.rescore import rescore_file
from searchrl.protocols import get_protocol

runner = CliRunner()


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def qa_file(tmp_path):
    path = tmp_path / "toy.jsonl"
    write_jsonl(
        path,
        [
            {"id": "q1", "question": "Where was Anna Berg born?", "golden_answers": ["Rome"]},
            {"id": "q2", "question": "Who directed Blue Lake?", "golden_answers": ["Tom Hale", "T. Hale"]},
            {"id": "q3", "question": "Is Oslo in Norway?", "golden_answers": ["yes"]},
        ],
    )
    return path


def test_eval_runs_end_to_end_from_flags(tmp_path, qa_file, fakes, monkeypatch) -> None:
    agent_instruction = get_protocol("search_r1").instruction("x").split("Question:")[0]

    def reply(ctx: str) -> str:
        if agent_instruction in ctx:  # the agent's prompt
            if "Doc 1(Title:" not in ctx:
                return "<think>look</think>\n<search> Anna Berg </search>"
            return "<answer> Rome </answer>"
        return "Rome" if "Documents:" in ctx else fakes.direct_reply(ctx)

    retriever = fakes.KeywordRetriever()
    # modules that bind make_retriever_for by name, imported first: imported under the patch, they would keep the
    # fake for every later test
    importlib.import_module("searchrl.stages")
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: fakes.scripted(reply))
    monkeypatch.setattr(pipeline, "make_retriever_for", lambda cfg, corpus=None: retriever)
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "manifest.json").write_text('{"kind": "bm25"}')  # an index directory (its retriever faked)
    out = tmp_path / "out"
    res = runner.invoke(
        cli.app,
        [
            "eval",
            "--data",
            str(qa_file),
            "--methods",
            "direct,naive_rag,agent",
            "--index",
            str(tmp_path / "idx"),
            "--topk",
            "2",
            "--limit",
            "2",
            "--out",
            str(out),
            "--set",
            "rollout.max_turns=2",
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    for method in ("direct", "naive_rag", "agent"):
        lines = (out / "predictions" / f"toy__{method}.jsonl").read_text().splitlines()
        assert len(lines) == 2  # --limit 2
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["method"]: r for r in summary["rows"]}
    assert rows["direct"]["em"] == pytest.approx(1 / 2) and rows["naive_rag"]["em"] == pytest.approx(1 / 2)
    assert rows["agent"]["searches"] == 1.0 and rows["agent"]["em"] == pytest.approx(1 / 2)
    assert summary["datasets"] == {"toy": 2}
    cfg = yaml.safe_load((out / "config.yaml").read_text())  # the resolved config, beside the outputs
    assert cfg["evaluation"]["methods"] == ["direct", "naive_rag", "agent"]
    assert cfg["evaluation"]["limit"] == 2 and cfg["retrieval"]["topk"] == 2 and cfg["rollout"]["max_turns"] == 2
    assert cfg["evaluation"]["datasets"] == [str(qa_file)]
    assert {"summary.md", "summary.csv", "summary.png"} <= {p.name for p in out.iterdir()}
    assert "direct" in res.stdout and "50.0" in res.stdout  # the result table: stdout


def test_eval_from_a_recipe_file(tmp_path, qa_file, fakes, monkeypatch) -> None:
    recipe = tmp_path / "eval.yaml"
    evaluation = {
        "datasets": [str(qa_file)],
        "methods": ["direct"],
        "metrics": ["em"],
        "output_dir": str(tmp_path / "o"),
    }
    recipe.write_text(yaml.safe_dump({"evaluation": evaluation}))
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: fakes.scripted(fakes.direct_reply))
    res = runner.invoke(cli.app, ["eval", "--config", str(recipe)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    (row,) = json.loads((tmp_path / "o" / "summary.json").read_text())["rows"]
    assert row["em"] == pytest.approx(1 / 3) and row["n"] == 3


def test_bad_data_path_is_a_one_line_error(tmp_path, monkeypatch, capsys) -> None:
    res = runner.invoke(cli.app, ["eval", "--data", str(tmp_path / "missing.jsonl"), "--methods", "direct"])
    assert isinstance(res.exception, FileNotFoundError)
    msg = str(res.exception)
    assert "\n" not in msg and "missing.jsonl" in msg and "give an existing QA JSONL file" in msg
    # through the real entry point: exit code 2, the message, no traceback
    monkeypatch.setattr(sys, "argv", ["searchrl", "eval", "--data", str(tmp_path / "missing.jsonl")])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "dataset not found" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "args, match",
    [
        (["--methods", "direct,oracle"], "evaluation.methods"),
        (["--metrics", "em,accuracy"], "unknown metric"),
        (["--index", "a", "--url", "http://x"], "either --index"),
    ],
)
def test_bad_flags_name_the_fix(qa_file, args, match) -> None:
    res = runner.invoke(cli.app, ["eval", "--data", str(qa_file), *args])
    assert isinstance(res.exception, ValueError) and match in str(res.exception)


def test_retrieval_method_without_index_on_explicit_data(qa_file, tmp_path) -> None:
    """Own questions with the synthetic world's data: no retriever, or an index directory holding none (a typo),
    is refused instead of searching the world; a corpus to build from is enough."""
    cfg = build_config(None, [], data=[str(qa_file)], methods="naive_rag")
    with pytest.raises(ValueError, match="--corpus FILE.*--index DIR"):
        harness.check_retriever_source(cfg)
    harness.check_retriever_source(cfg, corpus=tmp_path / "corpus.jsonl")
    typo = build_config(None, [], data=[str(qa_file)], methods="naive_rag", index=str(tmp_path / "idx-typo"))
    with pytest.raises(FileNotFoundError, match=r"idx-typo holds no index; build it with `build_index\('FILE', "):
        harness.check_retriever_source(typo)
    assert not (tmp_path / "idx-typo").exists()


def test_no_arguments_prints_help() -> None:
    res = runner.invoke(cli.app, ["eval"])
    assert res.exit_code == 0 and "rescore" in res.output and "--data" in res.output


def test_flags_without_questions_are_refused() -> None:
    res = runner.invoke(cli.app, ["eval", "--methods", "agent", "--limit", "5"])
    assert res.exit_code == 2 and "nothing to evaluate on" in res.output and "Usage" in res.output


# --------------------------------------------------------------------------------------------- rescore

R1_ROWS = [
    # (gold, pred_ans) -> em, f1, cover_em, cover_em_tokens computed by hand below
    {"question": "Q1", "answer": "Miller v._California", "pred_ans": "California v. Miller"},
    {"question": "Q2", "answer": ["Paris", "Paris, France"], "pred_ans": "paris"},
    {"question": "Q3", "answer": True, "pred_ans": "yes"},
    {"question": "Q4", "answer": "1990", "pred_ans": None},
    {"question": "Q5", "answer": "Tom Hale", "pred_ans": "the director Tom Hale"},
]
# Each metric's default (SQuAD, word-bounded cover, R1-Searcher's normalisation for the token cover):
# Q1: SQuAD-normalised "california v miller" vs "miller vcalifornia": EM 0; F1 P=1/3 R=1/2 -> 0.4; not a contiguous
#     cover; R1 token cover: {miller, v, california} all present -> 1 (0 with --normalize squad: "vcalifornia").
# Q2: 1 everywhere. Q3: gold True -> "yes": 1 everywhere. Q4: no prediction: 0 everywhere.
# Q5: "director tom hale" vs "tom hale": EM 0, F1 P=2/3 R=1 -> 0.8, both covers 1.
EXPECTED = {"em": 2 / 5, "f1": (0.4 + 1 + 1 + 0 + 0.8) / 5, "cover_em": 3 / 5, "cover_em_tokens": 4 / 5}
# By default, the authors' way (R1-Searcher normalisation, substring cover): Q1 is "california v miller" vs
# "miller v california": F1 1 (same tokens), no substring cover; the other rows score as above.
EXPECTED_AUTHORS = {"em": 2 / 5, "f1": (1 + 1 + 1 + 0 + 0.8) / 5, "cover_em": 3 / 5, "cover_em_tokens": 4 / 5}
EXPECTED_SQUAD = {**EXPECTED, "cover_em_tokens": 3 / 5}


@pytest.mark.parametrize(
    "flags, expected, printed",
    [
        ([], EXPECTED_AUTHORS, ("40.0", "76.0")),
        (["--normalize", "squad", "--boundary", "word"], EXPECTED_SQUAD, ("40.0", "64.0")),
    ],
)
def test_rescore_r1_searcher_format(tmp_path, flags, expected, printed) -> None:
    path = tmp_path / "2wiki_500.jsonl"
    write_jsonl(path, R1_ROWS)
    out = tmp_path / "rescored"
    res = runner.invoke(cli.app, ["eval", "rescore", str(path), "--out", str(out), *flags])
    assert res.exit_code == 0, res.output + repr(res.exception)
    (row,) = json.loads((out / "summary.json").read_text())["rows"]
    assert row["dataset"] == "2wiki_500" and row["n"] == 5
    for metric, value in expected.items():
        assert row[metric] == pytest.approx(value), metric
    assert all(p in res.stdout for p in printed)  # EM and F1 in the result table (stdout)
    items = [json.loads(x) for x in (out / "predictions" / "2wiki_500__prediction.jsonl").read_text().splitlines()]
    assert items[2]["golds"] == ["yes"] and items[3]["prediction"] is None
    norm = "r1_searcher" if not flags else "squad"
    assert f"em: {norm}" in (out / "summary.md").read_text()


def test_rescore_json_array_and_our_own_files(tmp_path, examples, fakes) -> None:
    path = tmp_path / "released.json"
    path.write_text(json.dumps(R1_ROWS))
    items = rescore_file(path)
    assert sum(it["metrics"]["f1"] for it in items) / 5 == pytest.approx(EXPECTED_AUTHORS["f1"])
    # our predictions file re-scores to the numbers the harness computed
    from searchrl.eval.baselines import DirectMethod

    result = harness.evaluate(
        {"toy": examples}, {"direct": DirectMethod(fakes.scripted(fakes.direct_reply))}, tmp_path / "run", show=False
    )
    again = rescore_file(tmp_path / "run" / "predictions" / "toy__direct.jsonl")
    assert [it["metrics"] for it in again] == [it["metrics"] for it in result.items]
    assert {(it["dataset"], it["method"]) for it in again} == {("toy", "direct")}


def test_rescore_rejects_unknown_rows(tmp_path) -> None:
    path = tmp_path / "odd.jsonl"
    write_jsonl(path, [{"q": "x", "a": "y"}])
    with pytest.raises(ValueError, match=r"odd.jsonl:1: unknown row format"):
        rescore_file(path)
    with pytest.raises(FileNotFoundError, match="predictions file not found"):
        rescore_file(tmp_path / "nope.jsonl")


def test_rescore_uses_the_cover_em_rule_eval_recorded(tmp_path: Path) -> None:
    """`eval` under search_r1 scores cover-EM as a plain substring; `eval rescore` of its file must agree."""
    from searchrl.eval.harness import item_row, metric_functions, metric_settings

    settings = metric_settings(["em", "cover_em"], protocol="search_r1")
    assert settings["cover_em"]["boundary"] == "char"
    ex = QAExample("q1", "Which city?", ["York"])
    row = item_row("toy", "agent", ex, Prediction(text="New Yorker"), metric_functions(settings))
    row["metric_settings"] = settings  # what the harness writes beside every row
    path = tmp_path / "toy__agent.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert row["metrics"]["cover_em"] == 1.0  # "york" is a substring of "new yorker"
    (same,) = rescore_file(path, ["em", "cover_em"])
    assert (
        same["metrics"] == {"em": 0.0, "cover_em": 1.0, "cover_em_committed": 1.0}
        and same["metric_settings"]["cover_em"]["boundary"] == "char"
    )
    (word,) = rescore_file(path, ["em", "cover_em"], protocol="rag_r1")  # a word-bounded convention on request
    assert word["metrics"]["cover_em"] == 0.0
    legacy = dict(row)
    legacy.pop("metric_settings")
    path.write_text(json.dumps(legacy) + "\n")
    (old,) = rescore_file(path, ["cover_em"])  # a file without a recorded rule: the metric's default (word)
    assert old["metrics"]["cover_em"] == 0.0


def test_eval_reads_a_file_whose_fields_have_other_names(tmp_path, monkeypatch) -> None:
    """The loader's error for a file whose question column has another name names --field question=NAME: eval
    takes it (as data.fields)."""
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: pytest.fail("the prior loaded the policy"))
    qa = tmp_path / "mine.csv"
    qa.write_text("query_text,gold\nWho wrote Dracula?,Bram Stoker\nWho wrote Emma?,Jane Austen\n")
    args = ["eval", "--data", str(qa), "--methods", "prior", "--prior-data", str(qa), "--out", str(tmp_path / "o")]
    res = runner.invoke(cli.app, args)
    assert "--field question=NAME" in " ".join(str(res.exception).split())
    res = runner.invoke(cli.app, [*args, "--field", "answers=gold", "--field", "question=query_text"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((tmp_path / "o" / "summary.json").read_text())["rows"]
    assert row["method"] == "prior" and row["em"] == 0.5  # both "who": the first answer seen, right once


def test_the_prior_from_the_command_line_loads_no_model(tmp_path, qa_file, monkeypatch) -> None:
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: pytest.fail("the prior loaded the policy"))
    args = ["eval", "--data", str(qa_file), "--methods", "prior", "--prior-data", str(qa_file)]
    res = runner.invoke(cli.app, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((tmp_path / "o" / "summary.json").read_text())["rows"]
    assert row["method"] == "prior" and row["em"] == 1.0  # fitted on the same file: each wh-word has one answer
    assert "warning: prior: 3 of toy's questions" in " ".join(res.output.split())
    res = runner.invoke(cli.app, ["eval", "--data", str(qa_file), "--methods", "prior"])
    assert isinstance(res.exception, ValueError) and "--prior-data" in str(res.exception)
