"""The evaluation summary's per-style breakdown: each row's style, the table, and one row for one-question styles."""

from __future__ import annotations

import json

import pytest

from searchrl.data.records import QAExample
from searchrl.eval.baselines import DirectMethod
from searchrl.eval.harness import evaluate
from searchrl.eval.report import POOLED_STYLES, by_style


def _item(style: str, em: float, dataset: str = "dev", method: str = "agent") -> dict:
    return {"dataset": dataset, "method": method, "style": style, "metrics": {"em": em}, "searches": 1}


def test_by_style_scores_each_style_and_pools_the_single_ones() -> None:
    items = [_item("a", 1.0), _item("a", 0.0), _item("b", 1.0), _item("c", 0.0), _item("a", 1.0, dataset="test")]
    rows = {(r["dataset"], r["style"]): r for r in by_style(items, ["em"])}
    assert rows[("dev", "a")]["n"] == 2 and rows[("dev", "a")]["em"] == 0.5
    assert rows[("dev", POOLED_STYLES)]["n"] == 2 and rows[("dev", POOLED_STYLES)]["em"] == 0.5  # b and c
    assert rows[("test", POOLED_STYLES)]["n"] == 1  # a is counted per dataset
    assert set(rows) == {("dev", "a"), ("dev", POOLED_STYLES), ("test", POOLED_STYLES)}


def _examples() -> list[QAExample]:
    return [
        QAExample("q1", "Where was Anna Berg born?", ["Rome"]),
        QAExample("q2", "Where was Tom Hale born?", ["Oslo"]),
        QAExample("q3", "Who directed Blue Lake?", ["Tom Hale"]),
        QAExample("q4", "Who directed Red Sea?", ["Anna Berg"]),
        QAExample("q5", "Is Oslo in Norway?", ["yes"]),
    ]


def test_summary_has_a_style_table_when_questions_carry_several_styles(tmp_path, fakes) -> None:
    method = DirectMethod(fakes.scripted(lambda ctx: "Rome" if "Anna Berg born" in ctx else "Tom Hale"))
    result = evaluate({"toy": _examples()}, {"direct": method}, tmp_path, metrics=["em", "f1"], show=False)
    rows = [json.loads(x) for x in (tmp_path / "predictions" / "toy__direct.jsonl").read_text().splitlines()]
    assert [r["style"] for r in rows] == [
        "where was <e> born?",
        "where was <e> born?",
        "who directed <e>?",
        "who directed <e>?",
        "is <e> in <e>?",
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    styles = {r["style"]: r for r in summary["by_style"]}
    assert styles["where was <e> born?"]["n"] == 2 and styles["where was <e> born?"]["em"] == 0.5
    assert styles["who directed <e>?"]["em"] == 0.5 and styles[POOLED_STYLES]["n"] == 1
    md = (tmp_path / "summary.md").read_text()
    section = md[md.index("## Scores by question style") :].splitlines()
    table = [ln for ln in section if ln.startswith("|")]
    assert table[0] == "| dataset | method | style | n | EM | F1 |"
    assert table[2] == "| toy | direct | where was <e> born? | 2 | 50.0 | 50.0 |"
    assert len(table) == 2 + 3 and result.rows[0]["n"] == 5


@pytest.mark.parametrize("questions", [["Who directed Blue Lake?", "Who directed Red Sea?"], ["a?", "b?", "c?"]])
def test_no_style_table_for_one_style_or_only_one_question_styles(tmp_path, fakes, questions) -> None:
    examples = [QAExample(f"q{i}", q, ["x"]) for i, q in enumerate(questions)]
    evaluate({"toy": examples}, {"direct": DirectMethod(fakes.scripted(lambda ctx: "x"))}, tmp_path, show=False)
    assert "by_style" not in json.loads((tmp_path / "summary.json").read_text())
    assert "question style" not in (tmp_path / "summary.md").read_text()
