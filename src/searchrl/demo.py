"""``searchrl demo``: the whole loop on embedded defaults, on a CPU, in minutes.

Synthetic world -> BM25 index -> policy -> Search-R1 rollouts on dev questions -> two trajectories, EM, searches
per question and time. With ``--coldstart`` (or when a cold-started model already exists in ``runs/coldstart``) the
policy is the bundled SmolLM2-135M after SFT on oracle trajectories; otherwise the bundled model as it ships, which
does not follow the tags zero-shot: the demo shows what it does, honestly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from searchrl.utils import console

COLDSTART_DIR = Path("runs/coldstart")


def demo(
    questions: int = typer.Option(20, help="dev questions to answer"),
    model: str = typer.Option(None, help="policy spec; default: the cold-started model if present, else the bundled"),
    coldstart: bool = typer.Option(False, help="run the SFT cold start first (about 20 min on 2 cores)"),
    out: str = typer.Option("runs/demo", help="where predictions and the resolved config go"),
) -> None:
    """Run the agent loop end to end on the embedded defaults and print what the model does.

    Example: searchrl demo --questions 20
    """
    from searchrl.config import dump_config, load_config
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.pipeline import data_dir, load_split, make_protocol, make_retriever_for
    from searchrl.rewards.summary import summarize
    from searchrl.rollout.cli import render_trajectory
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits
    from searchrl.utils import write_jsonl

    t0 = time.perf_counter()
    cfg = load_config("demo")
    console.rule("[bold]SearchRL demo")
    world = data_dir(cfg)
    retriever = make_retriever_for(cfg)
    console.log(f"world: {world}  index: BM25 over {sum(1 for _ in (world / 'corpus.jsonl').open())} passages")
    if coldstart:
        from searchrl.sft.cli import sft

        sft(recipe="demo", overrides=[], out=str(COLDSTART_DIR))
    spec = model or (str(COLDSTART_DIR / "final") if (COLDSTART_DIR / "final" / "config.json").exists() else None)
    if spec is None:
        spec = cfg.model.policy
        console.log("[yellow]no cold-started model in runs/coldstart: using the bundled model as shipped; it does not "
                    "know the tags yet (run `make coldstart` first, or `searchrl demo --coldstart`)")  # fmt: skip
    policy, tok = load_policy(spec)
    console.log(f"policy: {spec}")
    protocol = make_protocol(cfg)
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    engine = RolloutEngine(HFGenerator(policy, tok), retriever, protocol, limits, cfg.model.prompt_style)
    examples = load_split(cfg, "dev", questions)
    t_gen = time.perf_counter()
    trajs = engine.run(examples, temperature=0.0, seed=cfg.rollout.seed)
    gen_s = time.perf_counter() - t_gen
    for traj in trajs[:2]:
        console.rule(f"[bold]{traj.question}  [dim](gold: {traj.golds[0]})")
        render_trajectory(traj, tok)
    summary = {
        "policy": spec,
        **{k: round(v, 3) for k, v in summarize(trajs, protocol, tok).items()},
        "rollout_seconds": round(gen_s, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    out_dir = Path(out)
    write_jsonl(out_dir / "trajectories.jsonl", [t.to_dict() for t in trajs])
    dump_config(cfg, out_dir / "config.yaml")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    from searchrl.viz.viewer import write_viewer

    html = write_viewer([out_dir / "trajectories.jsonl"], out_dir / "trajectories.html", title="SearchRL demo")
    console.rule("[bold]summary")
    console.print_json(json.dumps(summary))
    console.print(f"every trajectory, policy text vs inserted documents: open {html}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
