"""benchmarks/world_coldstart_real.py --collect: an evaluation whose diagnostics have shares with nothing to count."""

from __future__ import annotations

import json
from pathlib import Path

import world_coldstart_real as bench

from searchrl.eval.diagnostics import COMMITTED, FLAGS


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "wc_arm"
    (run / "coldstart_eval_real" / "predictions").mkdir(parents=True)
    stages = [
        {"name": "world", "result": {"surface": "fixed", "relations": "open"}, "seconds": 1.0},
        {"name": "coldstart", "seconds": 70.0},
        {"name": "coldstart_eval_real", "seconds": 20.0},
    ]
    (run / "summary.json").write_text(json.dumps({"recipe": "multihop_world", "stages": stages}))
    scores = {"em": 0.0, "f1": 0.1, "cover_em": 0.0, "well_formed": 0.0, "searches": 0.0}
    # the agent never searched (no documents: gold_in_docs has nothing to count) and no question is a choice one
    diag = {
        "heldout / agent": dict.fromkeys(FLAGS, 0.0) | {"gold_in_docs": None, "hedged": None, "no_search": 1.0},
        "heldout / naive_rag": dict.fromkeys(FLAGS, 0.5) | {"hedged": None},
    }
    rows = [{"method": "agent", **scores}, {"method": "naive_rag", **scores}]
    (run / "coldstart_eval_real" / "summary.json").write_text(json.dumps({"rows": rows, "diagnostics": diag}))
    return run


def test_a_share_with_nothing_to_count_is_reported_as_a_dash(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "first_query_adds", lambda path: (0, 0, []))
    monkeypatch.setattr(bench, "committed", lambda path: {COMMITTED: 0.0, "hedged": 0.0, "choice_questions": 0})
    arm = bench.collect_one(_run(tmp_path))
    assert arm["diagnostics"]["agent"]["gold_in_docs"] is None
    assert arm["diagnostics"]["agent"]["no_search"] == 1.0
    text = bench.report([arm])
    row = next(line for line in text.splitlines() if line.startswith("| wc_arm | -"))
    assert row.split(" | ")[1:7] == ["-", "0%", "0%", "0%", "100%", "0%"]
