"""benchmarks/bench_trained_baselines.py: the report built from a run directory's evaluation stages."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench_trained_baselines as bench


def _eval_stage(out: Path, stage: str, method: str, em: float, preds: list[tuple[str, list[str], str]]) -> None:
    d = out / stage
    (d / "predictions").mkdir(parents=True)
    row = {"method": method, "n": len(preds), "em": em, "f1": em, "cover_em": em, "cover_em_committed": em,
           "searches": 1.0, "gen_tokens": 9.0}  # fmt: skip
    (d / "summary.json").write_text(json.dumps({"rows": [row], "diagnostics": {f"heldout / {method}": {}}}))
    lines = [json.dumps({"question": q, "golds": g, "prediction": p}) for q, g, p in preds]
    (d / "predictions" / f"heldout__{method}.jsonl").write_text("\n".join(lines) + "\n")


def test_report_counts_right_answers_per_question_form(tmp_path: Path) -> None:
    choice = ("Who was born first, Anna Berg or Tom Hale?", ["Tom Hale"])
    yes_no = ("Are Blue Lake and Red Sea from the same country?", ["no"])
    open_q = ("Who is the father of Anna Berg?", ["Carl Berg"])
    _eval_stage(tmp_path, "eval_r1", "agent", 2 / 3, [(*choice, "Tom Hale"), (*yes_no, "no"), (*open_q, "Bo")])
    rag_rl = [(*choice, "Anna Berg"), (*yes_no, "yes"), (*open_q, "Carl Berg")]
    _eval_stage(tmp_path, "eval_rag_rl", "agent", 1 / 3, rag_rl)
    res = bench.collect(tmp_path, ["eval_r1", "eval_rag_rl"])
    assert set(res["rows"]) == {"r1", "rag_rl"}
    assert {k: res["rows"]["r1"]["forms"]["choice"][k] for k in ("n", "correct", "em")} == {
        "n": 1,
        "correct": 1,
        "em": 1.0,
    }
    assert res["rows"]["rag_rl"]["forms"]["open"]["correct"] == 1
    res["meta"] = {"date": "2026-01-01", "machine": "test"}
    lines = bench.report(res, argparse.Namespace(heldout=3))
    assert "| `r1` | 1 / 1 | 1 / 1 | 0 / 1 |" in lines
    assert "| `rag_rl` | 0 / 1 | 0 / 1 | 1 / 1 |" in lines
    assert any("`naive_rag`, `agent`" in line for line in lines)  # the methods still to evaluate are named


def test_report_sets_the_agent_against_the_answer_prior(tmp_path: Path) -> None:
    choice = ("Who was born first, Anna Berg or Tom Hale?", ["Tom Hale"])
    _eval_stage(tmp_path, "eval", "agent", 0.2, [(*choice, "Anna Berg")])
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    prior = dict(summary["rows"][0], method="prior", em=0.3, searches=0.0)
    summary["rows"].append(prior)
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "eval" / "predictions" / "heldout__prior.jsonl").write_text(
        json.dumps({"question": choice[0], "golds": choice[1], "prediction": "Tom Hale"}) + "\n"
    )
    res = bench.collect(tmp_path, ["eval"])
    assert res["rows"]["prior"]["em"] == 0.3 and res["rows"]["agent"]["em"] == 0.2
    assert res["rows"]["prior"]["forms"]["choice"]["correct"] == 1
    res["meta"] = {"date": "2026-01-01", "machine": "test"}
    lines = bench.report(res, argparse.Namespace(heldout=1))
    assert "Agent EM minus the answer prior's (no model): -0.100." in lines
