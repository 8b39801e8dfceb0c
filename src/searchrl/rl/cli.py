"""``searchrl train``: RL from a recipe, resumable; works under ``accelerate launch`` too."""

from __future__ import annotations

import typer


def train(
    recipe: str = typer.Option(..., "--recipe", "-r", help="recipe name (e.g. search_r1_grpo) or YAML path"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. training.steps=20 rollout.group_size=4"),
    resume: bool = typer.Option(False, help="continue from <output_dir>/checkpoint"),
) -> None:
    """Train a policy with RL (PPO / GRPO / REINFORCE++ / RLOO) on a recipe.

    Example: searchrl train --recipe demo training.steps=20 training.output_dir=runs/grpo-demo
    """
    from searchrl.config import load_config
    from searchrl.models import load_policy
    from searchrl.pipeline import load_split, make_protocol, make_retriever_for, policy_spec
    from searchrl.rl.trainer import Trainer
    from searchrl.utils import console, seed_everything

    cfg = load_config(recipe, overrides or [])
    seed_everything(cfg.training.seed)
    model, tok = load_policy(policy_spec(cfg), cfg.model.dtype)
    examples = load_split(cfg, "train", cfg.data.train_limit)
    trainer = Trainer(cfg, model, tok, make_protocol(cfg), make_retriever_for(cfg), examples)
    history = trainer.train(resume=resume)
    if history:
        last = history[-1]
        console.print(f"done: step {int(last['step'])}, reward {last.get('reward/total', 0):.3f}, "
                      f"outputs in {cfg.training.output_dir}")  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("train")(train)
