"""Viewer pages of evaluation files: sortable by step and score, sources relative to the page, documents apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

from searchrl.viz.render import split_documents
from searchrl.viz.viewer import write_viewer

OBS = "<information>Doc 1(Title: Ada) Ada was born in London. Doc 2(Title: Bob) Bob was born in Paris.</information>"


def _traj(question: str, answer: str) -> dict:
    return {
        "question": question,
        "golds": ["London"],
        "answer": answer,
        "stop_reason": "answer",
        "turns": [
            {
                "text": "<search> Ada </search>",
                "action": "search",
                "queries": ["Ada"],
                "observation": OBS,
                "n_obs_tokens": 30,
            },
            {"text": f"<answer> {answer} </answer>", "action": "answer"},
        ],
    }


def _eval_rows(step: int, answers: list[str]) -> str:
    rows = []
    for i, a in enumerate(answers):
        em = float(a == "London")
        rows.append(
            {
                "source": f"eval/step_{step}",
                "score": em,
                "metrics": {"correct": em, "em": em, "f1": em},
                "trajectory": _traj(f"Where was Ada born ({i})?", a),
            }
        )
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_training_eval_files_carry_step_and_score(tmp_path: Path) -> None:
    run = tmp_path / "run" / "evals"
    run.mkdir(parents=True)
    (run / "step_0.jsonl").write_text(_eval_rows(0, ["Paris", "Paris"]))
    (run / "step_20.jsonl").write_text(_eval_rows(20, ["London", "Paris"]))
    out = write_viewer([run / "step_0.jsonl", run / "step_20.jsonl"], tmp_path / "page" / "view.html")
    html = out.read_text()
    steps = re.findall(r'data-step="([^"]*)"', html)
    rewards = re.findall(r'data-reward="([^"]*)"', html)
    assert steps == ["0", "0", "20", "20"] and rewards == ["0.0", "0.0", "1.0", "0.0"]
    assert "mean score" in html and "mean reward" not in html
    assert "../run/evals/step_20.jsonl:1" in html and str(tmp_path) not in html  # relative to the page


def _pred(qid: str, q: str, answer: str, em: float) -> dict:
    return {
        "id": qid,
        "question": q,
        "golds": ["London"],
        "prediction": answer,
        "method": "agent",
        "dataset": "dev",
        "metrics": {"em": em, "f1": em, "correct": em},
        "trajectory": _traj(q, answer),
    }


def test_prediction_rows_sort_by_their_score(tmp_path: Path) -> None:
    rows = [_pred("q1", "Q?", "London", 1.0), _pred("q2", "R?", "Paris", 0.0)]
    path = tmp_path / "dev__agent.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = write_viewer(path).read_text()
    assert re.findall(r'data-reward="([^"]*)"', html) == ["1.0", "0.0"]
    assert re.findall(r'data-em="([^"]*)"', html) == ["1.0", "0.0"]


def test_documents_of_an_observation_are_rendered_apart(tmp_path: Path) -> None:
    assert split_documents(OBS) == [
        ("<information>", False),
        ("Doc 1(Title: Ada) Ada was born in London. ", True),
        ("Doc 2(Title: Bob) Bob was born in Paris.", True),
        ("</information>", False),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_traj("Where?", "London")) + "\n")
    html = write_viewer(path).read_text()
    assert html.count('<pre class="inserted doc">') == 2 and "2 documents)" in html


def test_summary_script_recomputes_over_visible_records(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_traj("Where?", "London")) + "\n")
    html = write_viewer(path).read_text()
    for needle in ("function summarize(filtered)", "records the filter shows", "data-answered=", "data-turns="):
        assert needle in html


def test_an_odd_retrieval_trace_is_shown_not_an_error(tmp_path: Path) -> None:
    """A baseline's trace whose hit ids are not a list of strings renders as its JSON; the page is still written."""
    row = {
        "source": "eval/toy/iterative_rag",
        "question": "Q?",
        "golds": ["a"],
        "prediction": "a",
        "raw": "a",
        "metrics": {"em": 1.0},
        "trajectory": {"queries": ["q1"], "hit_ids": [{"odd": 1}], "steps": [{"sentence": "s", "hit_ids": {"x": 2}}]},
    }
    src = tmp_path / "pred.jsonl"
    src.write_text(json.dumps(row) + "\n")
    page = write_viewer([src], tmp_path / "page.html").read_text()
    assert "q1" in page and "odd" in page
