"""The demo's report around its recipe (``recipes/demo.yaml``): the main job in miniature, on a CPU, in minutes.

:func:`run_demo` evaluates the bundled SmolLM2-135M as shipped on held-out questions ("before"), runs the recipe's
``pipeline:`` (a short supervised cold start on oracle trajectories, then GRPO steps with an EM reward whose
held-out evaluation at the start and end is in the RL stage's ``metrics.jsonl``) and reports before / after EM,
well-formed rate and searches per question, one trained trajectory, the curve PNG and the viewer page, in
``<out>/summary.json``. Every stage reuses its output when it is already there (``<out>/before.json``, the stages'
DONE markers), so a second ``make demo`` only re-prints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from searchrl.config import RunConfig
from searchrl.utils import console

#: the numbers reported before and after, in this order.
SUMMARY_KEYS = ("em", "f1", "well_formed", "searches_per_question", "answered")


def evaluate_before(cfg: RunConfig, out_dir: Path) -> dict[str, float]:
    """The shipped model, greedy, on ``training.eval_limit`` dev questions (``<out>/before.json``, reused)."""
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.pipeline import load_split, make_protocol, make_retriever_for
    from searchrl.rewards.correctness import Correctness
    from searchrl.rewards.summary import scored_records, summarize
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits
    from searchrl.utils import write_jsonl

    path = out_dir / "before.json"
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        console.log(f"before (reused {path}): {before}")
        return before
    t = time.perf_counter()
    dev = load_split(cfg, "dev", cfg.training.eval_limit)
    protocol = make_protocol(cfg)
    policy, tok = load_policy(cfg.model.policy, frozen=True)
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    engine = RolloutEngine(HFGenerator(policy, tok), make_retriever_for(cfg), protocol, limits, cfg.model.prompt_style)
    trajs = engine.run(dev, temperature=0.0, seed=cfg.training.seed)
    summary = summarize(trajs, protocol, tok)
    before = {k: round(summary[k], 3) for k in SUMMARY_KEYS}
    correctness = Correctness.from_reward_config(cfg.reward)
    write_jsonl(out_dir / "before.jsonl", scored_records(trajs, source="demo/before", correctness=correctness))
    path.write_text(json.dumps(before), encoding="utf-8")
    console.log(
        f"[bold]before[/]: the shipped model on {len(dev)} held-out questions: {before} "
        f"({time.perf_counter() - t:.0f} s)"
    )
    return before


def run_demo(cfg: RunConfig, out_dir: Path, *, recipe: str = "demo") -> dict[str, Any]:
    """``before`` -> the recipe's pipeline into ``out_dir`` -> the report; returns the summary."""
    from searchrl.device import configure_from
    from searchrl.runner import run_pipeline
    from searchrl.utils import seed_everything

    t0 = time.perf_counter()
    seed_everything(cfg.training.seed)
    configure_from(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]SearchRL demo: the bundled 135M model learns to search")
    t, reused = time.perf_counter(), (out_dir / "before.json").exists()
    before = evaluate_before(cfg, out_dir)
    times = {} if reused else {"before_eval_s": time.perf_counter() - t}
    results = run_pipeline(cfg, out_dir, recipe=recipe)
    times.update({f"{r.name}_s": r.seconds for r in results if r.status == "ran"})
    return report(cfg, out_dir, before, times, t0)


def report(cfg: RunConfig, out_dir: Path, before: dict[str, float], times: dict[str, float], t0: float) -> dict:
    """Before / after on stdout, one trained trajectory, curves, the viewer page and ``<out>/summary.json``."""
    from rich.console import Console
    from transformers import AutoTokenizer

    from searchrl.rollout.record import read_trajectories
    from searchrl.rollout.render import render_trajectory
    from searchrl.viz.plots import plot_run
    from searchrl.viz.viewer import write_viewer

    rl_dir = out_dir / next(s.name for s in reversed(cfg.pipeline) if s.kind == "rl")
    evals = sorted((rl_dir / "evals").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    metrics = [json.loads(line) for line in (rl_dir / "metrics.jsonl").open(encoding="utf-8")]
    rows = [m for m in metrics if "eval/em" in m]
    after = {k: round(rows[-1][f"eval/{k}"], 3) for k in SUMMARY_KEYS}
    after_coldstart = {k: round(rows[0][f"eval/{k}"], 3) for k in SUMMARY_KEYS} if len(rows) > 1 else None

    tok = AutoTokenizer.from_pretrained(str(rl_dir / "final"))  # only to render the trajectory: no model reload
    trained = list(read_trajectories(evals[-1]))
    shown = next((t for t in trained if t.n_searches and t.answer), trained[0])
    console.rule(f"[bold]a trained trajectory: {shown.question}  [dim](gold: {shown.golds[0]})")
    render_trajectory(shown, tok)

    curves = plot_run(rl_dir)
    pages = [p for p in (out_dir / "before.jsonl", evals[-1]) if p.exists()]
    html = write_viewer(pages, out_dir / "trajectories.html", title="SearchRL demo: before (shipped), after (trained)")
    summary = {
        "questions": len(trained),
        "before": before,
        "after_coldstart": after_coldstart,
        "after": after,
        "stage_seconds": {k: round(v, 1) for k, v in times.items()},
        "total_seconds": round(time.perf_counter() - t0, 1),
        "checkpoint": str(rl_dir / "final"),
        "curves": str(curves),
        "viewer": str(html),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    result = Console()  # the before/after table is the command's result: stdout
    result.rule("[bold]before -> after (greedy, held-out synthetic questions)")
    for k in SUMMARY_KEYS:
        mid = f"  (after cold start {after_coldstart[k]:.3f})" if after_coldstart else ""
        result.print(f"  {k:<22} {before[k]:>6.3f} -> {after[k]:.3f}{mid}")
    result.print(f"curves: {curves}\nviewer: {html}\nsummary: {out_dir / 'summary.json'}")
    return summary
