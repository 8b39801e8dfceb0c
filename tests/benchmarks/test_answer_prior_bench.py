"""benchmarks/answer_prior.py: the prior fitted on a QA file's training part, scored on its held-out part."""

from __future__ import annotations

import json
from pathlib import Path

import answer_prior as bench


def test_measure_scores_the_held_out_part_by_form(tmp_path: Path) -> None:
    rows = [
        {"id": f"q{i}", "question": f"Who was born first, Al{i} or Bea{i}?", "golden_answers": [f"Bea{i}"]}
        for i in range(6)
    ] + [{"id": f"y{i}", "question": f"Is Al{i} older than Bea{i}?", "golden_answers": ["no"]} for i in range(4)]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = bench.measure(str(path), 4)
    assert (res["train"], res["heldout"]) == (6, 4)
    n_choice = res["choice"]["n"]
    assert res["choice"]["correct"] == n_choice and res["yes/no"]["correct"] == res["yes/no"]["n"]  # second; "no"
    assert res["em"] == 1.0 and "open" not in res
    assert res["gold_position_heldout"] == {"second": n_choice}
    assert bench.gold_positions([]) == {}
