"""``searchrl run``: a recipe's ``pipeline:`` end to end (:mod:`searchrl.runner`), with the checks of
:mod:`searchrl.preflight` first; ``searchrl demo``: the demo recipe's pipeline with a before / after report."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from searchrl.commands.common import DEVICE, PROFILE, SET, description_line, load, writable_dir
from searchrl.config import RunConfig


def resolve_run(recipe: str, overrides: list[str] | None, profile: str | None, device: str | None) -> RunConfig:
    """The config a run of ``recipe`` uses (what ``run`` and ``demo`` both resolve)."""
    return load(recipe, overrides, profile, device=device)


def run_cmd(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name or YAML path (its pipeline:)"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides for every stage, e.g. training.steps=2"),
    sets: list[str] = SET,
    profile: str = PROFILE,
    out: str = typer.Option(
        None, "--out", help="run directory (default: runs/<recipe>[-<profile>])", callback=writable_dir
    ),
    only: list[str] = typer.Option(None, "--only", help="re-run only this stage (repeatable); inputs must exist"),
    start: str = typer.Option(None, "--from", help="re-run this stage and every later one"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the stages, their inputs and outputs; run nothing"),
    device: str = DEVICE,
) -> None:
    """Run a method end to end: its recipe's pipeline stages (data building, SFT, RL, evaluation) in order.

    Before the first stage every stage's inputs (data files, indexes, models named by path) and reward params are
    checked, so a wrong path fails at once. Stages with a DONE marker in OUT/<stage>/ are skipped. Logs to
    OUT/run.log; stage times and results in OUT/summary.json.

    Example: searchrl run --recipe rag_r1 --profile laptop --out runs/rag_r1-laptop
    """
    from searchrl import runner
    from searchrl.config import ConfigError
    from searchrl.models import check_fetchable, missing_extras, model_origin, models_of
    from searchrl.preflight import format_plan, plan_pipeline
    from searchrl.validation import validate_deep

    overrides = [*(overrides or []), *(sets or [])]

    # a stage's own recipe takes the run's overrides but not its pipeline.* ones (they name this recipe's stages)
    stage_overrides = [o for o in overrides if not o.split("=", 1)[0].strip().startswith("pipeline")]

    def load_stage_recipe(name: str) -> RunConfig:
        return resolve_run(name, stage_overrides, profile, device)

    cfg = resolve_run(recipe, overrides, profile, device)
    name = Path(recipe).stem
    run_dir = out or f"runs/{name}" + (f"-{profile}" if profile else "")
    if not cfg.pipeline:
        raise ConfigError(f"recipe {name} has no pipeline: section; add stages (see docs/recipes.md)")
    forced = runner._to_run([s.name for s in cfg.pipeline], only or None, start)
    validate_deep(cfg, load_stage_recipe)
    rl = any(stage.kind == "rl" and not stage.recipe for stage in cfg.pipeline)  # its RL stages run with cfg
    if not dry_run:  # models first: a hub model that cannot be fetched is the likelier mistake with paper recipes
        check_fetchable(cfg, profile, pipeline=True, training=rl)
        for stage in cfg.pipeline:
            if stage.recipe:
                check_fetchable(load_stage_recipe(stage.recipe), profile, training=stage.kind == "rl")
    plans = plan_pipeline(cfg, run_dir, forced=forced, only=bool(only), load=load_stage_recipe)
    if dry_run:
        print(f"run {name} (profile {profile or 'none'}) into {run_dir}:")
        if about := description_line(cfg):
            print(f"   {about}")
        print(format_plan(plans))
        print("models:")
        made = {p.output: p.name for p in plans}
        for p in plans:  # what each stage starts from, then the models beside the policy (reader, encoder, ...)
            if p.model and not p.skipped:
                origin = f"written by stage {made[p.model]}" if p.model in made else model_origin(p.model)
                print(f"  {p.name} starts from {p.model}: {origin}")
        for role, spec, _ in models_of(cfg)[1:]:
            print(f"  {role}={spec}: {model_origin(spec)}")
        for line in missing_extras(cfg, training=rl):
            print(f"missing: {line}")
        return
    results = runner.run_pipeline(
        cfg, run_dir, only=only or None, start=start, recipe=name, profile=profile, load=load_stage_recipe
    )
    for r in results:
        print(f"{r.name:<22} {r.kind:<5} {r.op or '':<18} {r.status:<8} {r.seconds:>9.1f} s  {r.output}")


def demo(
    questions: int = typer.Option(None, help="held-out dev questions evaluated before and after training (30)"),
    sft_examples: int = typer.Option(None, help="oracle trajectories in the cold start (64)"),
    rl_steps: int = typer.Option(None, help="GRPO steps after the cold start (3)"),
    out: str = typer.Option(
        "runs/demo", help="run directory: checkpoints, metrics, curves, viewer, summary.json", callback=writable_dir
    ),
    fresh: bool = typer.Option(False, help="ignore existing checkpoints in --out and train again"),
    device: str = DEVICE,
    overrides: list[str] = typer.Option(None, "--set", help="dotted override of the recipe, e.g. rollout.max_turns=2"),
) -> None:
    """Train the bundled model into a search agent on the demo recipe and show before / after.

    The same run as `searchrl run --recipe demo` (the flags are overrides of that recipe), plus the shipped model's
    score before training and the report after it.

    Example: searchrl demo --questions 40 --rl-steps 8
    """
    from searchrl.commands.common import dotted
    from searchrl.demo import run_demo

    flags = dotted(
        **{
            "training.eval_limit": questions,
            "sft.limit": sft_examples,
            "training.steps": rl_steps,
        }
    )
    cfg = resolve_run("demo", [*flags, *(overrides or [])], None, device)
    out_dir = Path(out)
    if fresh and out_dir.exists():
        shutil.rmtree(out_dir)
    run_demo(cfg, out_dir)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("demo")(demo)
