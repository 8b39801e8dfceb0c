"""Evaluation behaviours a mutation audit found unpinned: counts, averages and selection rules, with hand-written
expected values."""

from __future__ import annotations

from searchrl.eval.report import AVERAGE, aggregate


def _row(dataset: str, judge: float | None) -> dict:
    return {"dataset": dataset, "method": "m", "metrics": {"em": 1.0, "judge": judge}, "searches": 1, "queries": 1}


# --------------------------------------------------------------------------------------------- report averages


def test_the_average_row_sums_unreadable_judge_replies_over_datasets() -> None:
    items = [_row("a", None), _row("a", None), _row("a", 1.0), _row("b", None), _row("b", 0.0), _row("b", 1.0)]
    rows = aggregate(items, ["em", "judge"])
    by = {r["dataset"]: r for r in rows}
    assert (by["a"]["judge_unparsed"], by["b"]["judge_unparsed"]) == (2, 1)
    assert by[AVERAGE]["judge_unparsed"] == 3  # a count: 2 + 1, not their mean 1.5
    assert by[AVERAGE]["judge"] == 0.75  # a score: the mean of 1.0 and 0.5
    assert by[AVERAGE]["n"] == 6
