"""``searchrl sft`` (the supervised cold start) and ``searchrl train`` (RL, resumable; under ``accelerate launch``
too): flags into overrides, then :func:`searchrl.stages.run_sft` / :func:`searchrl.stages.run_train`."""

from __future__ import annotations

from pathlib import Path

import typer

from searchrl.commands.common import DEVICE, PROFILE, SET, load, said_when_stopped, writable_dir


def check_resumable(cfg, out: Path | None = None, sft: bool = False) -> None:
    """``--resume`` needs a checkpoint in the output directory (``training.output_dir``, or SFT's ``out``), made with
    these settings (and, for RL, from this model): checked before any model loads."""
    from searchrl.config import ConfigError
    from searchrl.rl.checkpoint import has_checkpoint
    from searchrl.stages.resume import resume_mismatch, sft_resume_mismatch

    out = out or Path(cfg.training.output_dir)
    if not has_checkpoint(out / "checkpoint"):
        raise ConfigError(f"no checkpoint at {out / 'checkpoint'}; run without --resume to start afresh")
    if why := sft_resume_mismatch(cfg, out) if sft else resume_mismatch(cfg):
        raise ConfigError(f"cannot resume {out}: {why}; use the same settings, or a new --out to start fresh")


def resume_hint(command: str, out: Path) -> str | None:
    """How a stopped ``searchrl train`` / ``searchrl sft`` into ``out`` goes on: from the checkpoint it saved, if any
    (``training.save_every`` / ``sft.save_every``; a SIGTERM's stop saves one and says so itself)."""
    from searchrl.rl.run_dir import has_checkpoint

    if not has_checkpoint(out / "checkpoint"):
        return None
    return f"the same searchrl {command} with --resume (from its checkpoint in {out / 'checkpoint'})"


def start_fresh(cfg, force: bool) -> None:
    """A fresh run into a directory holding an earlier one would mix with it (logs appended to, an old checkpoint a
    later ``--resume`` takes): refused, or with ``force`` the earlier run's outputs are removed first."""
    from pathlib import Path

    from searchrl.config import ConfigError
    from searchrl.rl.run_dir import check_fresh

    fix = "start over with --force (its outputs are removed), or give another --out"
    try:
        check_fresh(Path(cfg.training.output_dir), force, fix, resume="--resume")
    except FileExistsError as err:
        raise ConfigError(str(err)) from None


def train(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name (e.g. search_r1_grpo) or YAML"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. training.steps=20 rollout.group_size=4"),
    sets: list[str] = SET,
    out: str = typer.Option(
        None, "--out", help="output directory (default: training.output_dir)", callback=writable_dir
    ),
    resume: bool = typer.Option(False, "--resume", help="continue from <output_dir>/checkpoint"),
    force: bool = typer.Option(False, "--force", help="start over in an output directory that holds an earlier run"),
    device: str = DEVICE,
    profile: str = PROFILE,
) -> None:
    """Train a policy with RL (PPO / GRPO / Dr. GRPO / GSPO / REINFORCE++ / RLOO) on a recipe.

    Example: searchrl train --recipe demo --out runs/grpo-demo training.steps=20
    """
    from searchrl.models import check_fetchable
    from searchrl.stages import run_train
    from searchrl.validation import validate_deep

    items = [*(overrides or []), *(sets or [])]
    cfg = load(recipe, items, profile, device=device, **{"training.output_dir": out})
    validate_deep(cfg, lambda name: load(name, items, profile, device=device))
    check_fetchable(cfg, profile, training=True)
    if resume:
        check_resumable(cfg)
    else:
        start_fresh(cfg, force)
    out_dir = Path(cfg.training.output_dir)
    with said_when_stopped(f"RL training into {out_dir}", lambda: resume_hint("train", out_dir)):
        history = run_train(cfg, resume=resume)
    logged = (Path(cfg.training.output_dir) / "metrics.jsonl").exists()
    if resume and not history and logged:  # the checkpoint had reached training.steps: this said nothing at all
        from searchrl.utils import console

        steps = cfg.training.steps
        console.log(f"the checkpoint is at training.steps={steps} already; nothing to train (raise it to go on)")
    if history or (resume and logged):
        from searchrl.rl.metrics_log import run_summary
        from searchrl.viz.plots import load_metrics

        summary = run_summary(load_metrics(cfg.training.output_dir))
        print(f"done: {summary}; outputs in {cfg.training.output_dir}")  # the result: stdout


def sft(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name or YAML path (its sft: section)"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. sft.epochs=1 sft.limit=250"),
    sets: list[str] = SET,
    out: str = typer.Option(
        None, "--out", help="output dir (default: <training.output_dir>-sft)", callback=writable_dir
    ),
    resume: bool = typer.Option(
        False, "--resume", help="continue from <out>/checkpoint (written every sft.save_every steps and at a SIGTERM)"
    ),
    device: str = DEVICE,
    profile: str = PROFILE,
) -> None:
    """Supervised cold start on oracle trajectories of the synthetic world (sft.data=oracle) or a JSONL file.

    The file holds trajectories or step-level samples (from `searchrl data`), or text: a question and a whole
    response in the protocol's tags per row (the result blocks after search calls are masked out of the loss; see
    `searchrl data text`).

    sft.data=rewriter_oracle (synthetic world) or sft.data=rewriter:TRAJECTORIES.jsonl trains R1-Searcher++'s rewriter
    instead (documents in the prompt, internal-only paths as targets).

    Example: searchrl sft --recipe demo sft.limit=250 --out runs/coldstart
    """
    from searchrl.models import check_fetchable
    from searchrl.stages import run_sft
    from searchrl.validation import validate_deep

    items = [*(overrides or []), *(sets or [])]
    cfg = load(recipe, items, profile, device=device)
    validate_deep(cfg, lambda name: load(name, items, profile, device=device))
    check_fetchable(cfg, profile)
    out = out or f"{cfg.training.output_dir}-sft"
    if resume:
        check_resumable(cfg, Path(out), sft=True)
    with said_when_stopped(f"SFT into {out}", lambda: resume_hint("sft", Path(out))):
        run_sft(cfg, out, resume=resume)


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("sft")(sft)
