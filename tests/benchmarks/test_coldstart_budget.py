"""benchmarks/bench_coldstart_budget.py: the report states what the runs measured."""

from __future__ import annotations

from bench_coldstart_budget import render


def _row(name: str, n_all: int, em_all: float, cpu_s: float) -> dict:
    return {
        "run": f"runs/{name}",
        "sft": {"oracle_plan": "decompose_facts", "limit": 4, "oracle_first_turns": 0, "batch_size": 4},
        "wall_s": cpu_s / 2,
        "cpu_s": cpu_s,
        "sft_tokens_per_s": 50.0,
        "em": {"bridge": em_all, "all": em_all},
        "n": {"bridge": n_all, "all": n_all},
        "well_formed": 1.0,
    }


def test_the_report_gives_the_number_of_questions_the_cold_starts_were_scored_on() -> None:
    text = render([_row("a", 25, 0.7, 1000)], budget=1800, target=0.6)
    assert "25 world dev questions" in text
    assert "100 world dev questions" not in text
    assert text.rstrip().endswith("| yes |")  # within the budget and at the target
    text = render([_row("a", 25, 0.7, 1000), _row("b", 40, 0.5, 2000)], budget=1800, target=0.6)
    assert "25 / 40 world dev questions" in text
    assert text.rstrip().endswith("| no |")
