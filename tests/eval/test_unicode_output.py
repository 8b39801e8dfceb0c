"""Evaluation output for text outside plain ASCII English: file names, the summary files and the printed table."""

from __future__ import annotations

import json

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from searchrl import cli
from searchrl.config.evaluation import EvalDataset
from searchrl.eval.report import plain_table

ROWS = [
    {"id": "q1", "question": "日本の首都は？", "golden_answers": ["東京"]},
    {"id": "q2", "question": "Où est Zürich ?", "golden_answers": ["Suisse"]},
    {"id": "q3", "question": "Кто написал «Войну и мир»?", "golden_answers": ["Лев Толстой"]},
    {"id": "q4", "question": "日本の首都はどこ？", "golden_answers": ["東京"]},
]


def _columns(line: str) -> list[int]:
    """The terminal cells at which each column after the first ends (columns are right-aligned)."""
    ends, cells = [], 0
    for i, ch in enumerate(line):
        cells += cell_len(ch)
        if ch != " " and (i + 1 == len(line) or line[i + 1] == " "):
            ends.append(cells)
    return ends


def test_a_plain_table_aligns_wide_characters() -> None:
    table = plain_table(["method", "日本語 EM", "Zürich F1"], [["prior", "50.0", "12.5"], ["東京", "5.0", "1.0"]])
    lines = table.splitlines()
    assert len({cell_len(line) for line in lines}) == 1, table
    assert _columns(lines[1])[-2:] == _columns(lines[2])[-2:] == _columns(lines[3])[-2:] == [17, 28], table


def test_eval_on_a_non_english_file_writes_readable_results(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "日本語.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    args = ["eval", "--data", str(data), "--methods", "prior", "--prior-data", str(data), "--out", "o"]
    res = CliRunner().invoke(cli.app, args)
    assert res.exit_code == 0, res.output
    (pred,) = (tmp_path / "o" / "predictions").iterdir()
    assert pred.name == "日本語__prior.jsonl"
    first = json.loads(pred.read_text(encoding="utf-8").splitlines()[0])
    assert first["question"] == "日本の首都は？" and first["golds"] == ["東京"]
    assert "日本語,prior,4" in (tmp_path / "o" / "summary.csv").read_text(encoding="utf-8")
    assert '"dataset": "日本語"' in (tmp_path / "o" / "summary.json").read_text(encoding="utf-8")
    table = [line for line in res.stdout.splitlines() if line.startswith(("method", "prior"))]
    dashes = next(line for line in res.stdout.splitlines() if line.startswith("------"))
    assert len(table) == 2 and _columns(dashes)[1:] == _columns(table[1])[1:]
    assert cell_len(table[0]) == cell_len(dashes)  # the header's wide characters take their cells


@pytest.mark.parametrize("name", ["a/b", "..", "x\\y", " "])
def test_a_dataset_name_that_is_no_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="names its files"):
        EvalDataset(data="dev", name=name)
    assert EvalDataset(data="dev", name="日本語 QA (dev)").name == "日本語 QA (dev)"
