"""``searchrl run``: the command over :mod:`searchrl.runner`, with the checks of :mod:`searchrl.preflight` first."""

from __future__ import annotations

from pathlib import Path

import typer

from searchrl.config import RunConfig


def run_cmd(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name or YAML path (its pipeline:)"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides for every stage, e.g. training.steps=2"),
    sets: list[str] = typer.Option(None, "--set", help="a dotted override, like a positional KEY=VALUE (repeatable)"),
    profile: str = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)"),
    out: str = typer.Option(None, "--out", help="run directory (default: runs/<recipe>[-<profile>])"),
    only: list[str] = typer.Option(None, "--only", help="re-run only this stage (repeatable); inputs must exist"),
    start: str = typer.Option(None, "--from", help="re-run this stage and every later one"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the stages, their inputs and outputs; run nothing"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
) -> None:
    """Run a method end to end: its recipe's pipeline stages (data building, SFT, RL, evaluation) in order.

    Before the first stage every stage's inputs (data files, indexes, models named by path) and reward params are
    checked, so a wrong path fails at once. Stages with a DONE marker in OUT/<stage>/ are skipped. Logs to
    OUT/run.log; stage times and results in OUT/summary.json.

    Example: searchrl run --recipe rag_r1 --profile laptop --out runs/rag_r1-laptop
    """
    from searchrl.config import load_config
    from searchrl.models import check_fetchable
    from searchrl.preflight import format_plan, plan_pipeline
    from searchrl.runner import _to_run, run_pipeline
    from searchrl.validation import validate_deep

    overrides = [*(overrides or []), *(sets or []), *([f"model.device={device}"] if device else [])]

    def load(name: str) -> RunConfig:
        return load_config(name, overrides, profile)

    cfg = load(recipe)
    name = Path(recipe).stem
    run_dir = out or f"runs/{name}" + (f"-{profile}" if profile else "")
    if not cfg.pipeline:
        from searchrl.config import ConfigError

        raise ConfigError(f"recipe {name} has no pipeline: section; add stages (see docs/recipes.md)")
    forced = _to_run([s.name for s in cfg.pipeline], only or None, start)
    validate_deep(cfg, load)
    if not dry_run:  # models first: a hub model that cannot be fetched is the likelier mistake with paper recipes
        check_fetchable(cfg, profile, pipeline=True)
        for stage in cfg.pipeline:
            if stage.recipe:
                check_fetchable(load(stage.recipe), profile)
    plans = plan_pipeline(cfg, run_dir, forced=forced, only=bool(only), load=load)
    if dry_run:
        print(f"run {name} (profile {profile or 'none'}) into {run_dir}:")
        print(format_plan(plans))
        return
    results = run_pipeline(cfg, run_dir, only=only or None, start=start, recipe=name, profile=profile, load=load)
    for r in results:
        print(f"{r.name:<22} {r.kind:<5} {r.op or '':<18} {r.status:<8} {r.seconds:>9.1f} s  {r.output}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
