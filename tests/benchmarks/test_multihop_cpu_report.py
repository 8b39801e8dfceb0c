"""benchmarks/bench_multihop_cpu.py: the report names the number of held-out questions its evaluation scored."""

from __future__ import annotations

import json
from pathlib import Path

import bench_multihop_cpu as bench

STORED = Path(bench.__file__).parent / "results" / "multihop_cpu.json"


def test_the_held_out_count_is_the_evaluations_own() -> None:
    result = json.loads(STORED.read_text())  # a real report's shape
    for row in ("naive_rag", "agent_after_rl"):
        result["heldout"][row]["n"] = 40
    result["heldout"]["shipped_naive_rag"]["n"] = 100
    text = bench.render(result)
    assert "| held-out (40) |" in text
    assert "the 40 held-out questions" in text
    assert "| shipped model, agent (100 questions) |" in text  # scored on another count than the rows below
    assert "held-out (100)" not in text
