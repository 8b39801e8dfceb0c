"""bench_off_policy.py and bench_gspo_grpo.py --collect: the report states what the collected run did."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import bench_gspo_grpo
import bench_off_policy


def _arm(steps: int, dev_n: int) -> dict:
    times = dict.fromkeys(("step_s_mean", "step_s_mean_after_first", "steps_total_s", "rl_stage_s"), 10.0)
    times |= dict.fromkeys(("rollout_wait_s_mean", "rl_stage_cpu_s", "generate_s_mean", "update_s_mean"), 1.0)
    return {"steps": steps, "dev_n": dev_n, "dev_em": 0.5, "dev_f1": 0.6, **times}


def test_the_off_policy_report_gives_the_steps_and_questions_of_the_run() -> None:
    meta = {"date": "2026-11-30", "machine": "x86_64, 2 CPUs", "torch_threads": 2, "load_avg": [1.0]}
    res = {"meta": meta, "runs": {"on_policy": _arm(3, 7), "off_policy": _arm(3, 7)}}
    args = argparse.Namespace(steps=8, eval_limit=25, threads=None)  # --collect: the defaults, not the run's
    text = bench_off_policy.report(res, args)
    assert "bench_off_policy.py --steps 3`" in text
    assert "the same 3 GRPO steps" in text
    assert "the agent on 7 world dev questions" in text


def test_the_gspo_report_gives_the_questions_its_evaluations_scored(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    stages = [{"name": "coldstart", "seconds": 5.0}]
    for algo in ("grpo", "gspo"):
        (out / f"rl_{algo}").mkdir(parents=True)
        rows = [{"step": s, "reward/total": 0.1 * s} for s in (1, 2, 3)]
        (out / f"rl_{algo}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        agent = {"method": "agent", "em": 0.5, "f1": 0.6, "n": 7}
        stages += [{"name": f"rl_{algo}", "seconds": 30.0}, {"name": f"eval_{algo}", "result": {"rows": [agent]}}]
    (out / "summary.json").write_text(json.dumps({"stages": stages}))
    monkeypatch.setattr(bench_gspo_grpo, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(
        sys, "argv", ["bench_gspo_grpo.py", "--collect", "--out", str(out), "--algorithms", "grpo,gspo"]
    )
    bench_gspo_grpo.main()
    text = (tmp_path / "results" / "gspo_grpo.md").read_text()
    assert "the agent on 7 world dev questions" in text  # not --eval-limit's default of 25
    assert "| `gspo` | bm25 | 3 | 30 |" in text
