"""``searchrl demo``: the main job in miniature, on embedded defaults, on a CPU, in minutes.

Synthetic world -> BM25 index -> the bundled SmolLM2-135M, evaluated as shipped ("before") -> a short supervised
cold start on oracle trajectories (it learns the tags) -> GRPO steps with an EM reward and a live progress bar ->
the same held-out questions again ("after"). Prints before/after EM, well-formed rate and searches per question,
one trained trajectory, the curve PNG and the viewer page, and writes ``<out>/summary.json``.

Every stage reuses its output when it is already there (``<out>/before.json``, ``<out>/coldstart/final``,
``<out>/rl/final``), so a second ``make demo`` only re-prints; ``--fresh`` starts over.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import typer

from searchrl.utils import console

#: the numbers reported before and after, in this order.
SUMMARY_KEYS = ("em", "f1", "well_formed", "searches_per_question", "answered")

#: the demo recipe sized to finish in ~8 minutes on 2 cores (measured: an RL step of 16 trajectories with a KL
#: reference pass and two updates takes ~110 s there; 8 trajectories, one on-policy update and no reference pass
#: ~40 s). RL trains on the kind the short cold start covers, so its groups see rewards.
DEMO_OVERRIDES = ["training.prompts_per_step=2", "algorithm.mini_batch_size=8", "algorithm.kl_coef=0",
                  "training.lr=5e-6", "data.kinds=[single_hop]"]  # fmt: skip


def _evaluate(engine, examples, protocol, tok, seed: int) -> tuple[dict[str, float], list]:
    from searchrl.rewards.summary import summarize

    trajs = engine.run(examples, temperature=0.0, seed=seed)
    summary = summarize(trajs, protocol, tok)
    return {k: round(summary[k], 3) for k in SUMMARY_KEYS}, trajs


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").exists()


def _stage(name: str, seconds: float) -> None:
    console.log(f"[bold]{name}[/] done in {seconds:.0f} s")


def demo(
    questions: int = typer.Option(30, help="held-out dev questions evaluated before and after training"),
    sft_examples: int = typer.Option(64, help="oracle trajectories in the cold start"),
    rl_steps: int = typer.Option(3, help="GRPO steps after the cold start"),
    out: str = typer.Option("runs/demo", help="run directory: checkpoints, metrics, curves, viewer, summary.json"),
    fresh: bool = typer.Option(False, help="ignore existing checkpoints in --out and train again"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
    overrides: list[str] = typer.Option(
        None, "--set", help="dotted override of the demo recipe, e.g. rollout.max_turns=2"
    ),
) -> None:
    """Train the bundled model into a search agent on the embedded defaults and show before / after.

    Example: searchrl demo --questions 40 --rl-steps 8
    """
    from searchrl.config import dump_config, load_config
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.pipeline import data_dir, load_split, make_protocol, make_retriever_for
    from searchrl.rewards.correctness import Correctness
    from searchrl.rewards.summary import scored_records
    from searchrl.rl.trainer import Trainer
    from searchrl.rollout.cli import render_trajectory
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits
    from searchrl.sft.oracle import oracle_trajectories
    from searchrl.sft.trainer import SFTTrainer
    from searchrl.utils import seed_everything, write_jsonl
    from searchrl.viz.plots import plot_run
    from searchrl.viz.viewer import write_viewer

    t0 = time.perf_counter()
    out_dir = Path(out)
    if fresh and out_dir.exists():
        shutil.rmtree(out_dir)
    sft_dir, rl_dir = out_dir / "coldstart", out_dir / "rl"
    cfg = load_config("demo", [*DEMO_OVERRIDES, f"sft.limit={sft_examples}", f"training.steps={rl_steps}",
                               f"training.output_dir={rl_dir}", f"training.eval_every={rl_steps}",
                               f"training.eval_limit={questions}", *(overrides or []),
                               *([f"model.device={device}"] if device else [])])  # fmt: skip
    seed_everything(cfg.training.seed)
    from searchrl.device import configure_from

    configure_from(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out_dir / "config.yaml")
    console.rule("[bold]SearchRL demo: the bundled 135M model learns to search")
    world = data_dir(cfg)
    retriever = make_retriever_for(cfg)
    n_passages = sum(1 for _ in (world / "corpus.jsonl").open())
    console.log(f"world: {world} ({n_passages} passages, BM25 top-{cfg.retrieval.topk})")
    protocol = make_protocol(cfg)
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    dev = load_split(cfg, "dev", questions)
    times: dict[str, float] = {}

    # 1. before: the model as shipped, greedy, on the held-out questions.
    before_path = out_dir / "before.json"
    if before_path.exists():
        before = json.loads(before_path.read_text())
        console.log(f"before (reused {before_path}): {before}")
    else:
        t = time.perf_counter()
        policy, tok = load_policy(cfg.model.policy, frozen=True)
        engine = RolloutEngine(HFGenerator(policy, tok), retriever, protocol, limits, cfg.model.prompt_style)
        before, trajs = _evaluate(engine, dev, protocol, tok, cfg.training.seed)
        write_jsonl(
            out_dir / "before.jsonl",
            scored_records(trajs, source="demo/before", correctness=Correctness.from_reward_config(cfg.reward)),
        )
        before_path.write_text(json.dumps(before))
        times["before_eval_s"] = time.perf_counter() - t
        _stage(f"before: the shipped model on {len(dev)} held-out questions: {before}", times["before_eval_s"])
        del policy, engine

    # 2. cold start: supervised fine-tuning on oracle trajectories (the tags and when to search).
    if not _is_model_dir(sft_dir / "final"):
        t = time.perf_counter()
        policy, tok = load_policy(cfg.model.policy)
        train = load_split(cfg, "train", cfg.sft.limit, kinds=cfg.sft.kinds or None)
        data = oracle_trajectories(protocol, train, retriever, tok, cfg.retrieval.topk, cfg.model.prompt_style,
                                   cfg.rollout.max_obs_tokens, cfg.sft.oracle_plan)  # fmt: skip
        console.log(f"cold start: SFT on {len(data)} oracle trajectories")
        SFTTrainer(cfg, policy, tok, data, sft_dir).train()
        times["coldstart_s"] = time.perf_counter() - t
        _stage("cold start", times["coldstart_s"])
        del policy
    else:
        console.log(f"cold start: reusing {sft_dir / 'final'}")

    # 3. RL: GRPO steps from the cold start, held-out evaluation at its start and end (eval/* in metrics.jsonl).
    if not _is_model_dir(rl_dir / "final"):
        t = time.perf_counter()
        policy, tok = load_policy(str(sft_dir / "final"))
        train = load_split(cfg, "train", None)
        trainer = Trainer(cfg, policy, tok, protocol, retriever, train, eval_examples=dev)
        trainer.train()
        times["rl_s"] = time.perf_counter() - t
        _stage(f"RL: {rl_steps} GRPO steps", times["rl_s"])
        del policy, trainer
    else:
        console.log(f"RL: reusing {rl_dir / 'final'}")

    # 4. after: the same greedy held-out evaluation, read from the trainer's final checkpoint evaluation.
    evals = sorted((rl_dir / "evals").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    metrics = [json.loads(line) for line in (rl_dir / "metrics.jsonl").open()]
    eval_rows = [m for m in metrics if "eval/em" in m]
    after = {k: round(eval_rows[-1][f"eval/{k}"], 3) for k in SUMMARY_KEYS}
    after_coldstart = {k: round(eval_rows[0][f"eval/{k}"], 3) for k in SUMMARY_KEYS} if len(eval_rows) > 1 else None

    from transformers import AutoTokenizer

    from searchrl.rollout.record import read_trajectories

    tok = AutoTokenizer.from_pretrained(str(rl_dir / "final"))  # only to render the trajectory: no model reload
    trained = list(read_trajectories(evals[-1]))
    shown = next((t_ for t_ in trained if t_.n_searches and t_.answer), trained[0])
    console.rule(f"[bold]a trained trajectory: {shown.question}  [dim](gold: {shown.golds[0]})")
    render_trajectory(shown, tok)

    curves = plot_run(rl_dir)
    pages = [p for p in (out_dir / "before.jsonl", evals[-1]) if p.exists()]
    html = write_viewer(pages, out_dir / "trajectories.html", title="SearchRL demo: before (shipped), after (trained)")
    summary = {
        "questions": len(dev),
        "before": before,
        "after_coldstart": after_coldstart,
        "after": after,
        "stage_seconds": {k: round(v, 1) for k, v in times.items()},
        "total_seconds": round(time.perf_counter() - t0, 1),
        "checkpoint": str(rl_dir / "final"),
        "curves": str(curves),
        "viewer": str(html),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    from rich.console import Console

    result = Console()  # the before/after table is the command's result: stdout
    result.rule("[bold]before -> after (greedy, held-out synthetic questions)")
    for k in SUMMARY_KEYS:
        mid = f"  (after cold start {after_coldstart[k]:.3f})" if after_coldstart else ""
        result.print(f"  {k:<22} {before[k]:>6.3f} -> {after[k]:.3f}{mid}")
    result.print(f"curves: {curves}\nviewer: {html}\nsummary: {out_dir / 'summary.json'}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
