"""``searchrl train``: RL from a recipe, resumable; works under ``accelerate launch`` too."""

from __future__ import annotations

import typer


def train(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name (e.g. search_r1_grpo) or YAML"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. training.steps=20 rollout.group_size=4"),
    sets: list[str] = typer.Option(None, "--set", help="a dotted override, like a positional KEY=VALUE (repeatable)"),
    out: str = typer.Option(None, "--out", help="output directory (training.output_dir; default runs/default)"),
    resume: bool = typer.Option(False, "--resume", help="continue from <output_dir>/checkpoint"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
    profile: str = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)"),
) -> None:
    """Train a policy with RL (PPO / GRPO / REINFORCE++ / RLOO) on a recipe.

    Example: searchrl train --recipe demo --out runs/grpo-demo training.steps=20
    """
    from searchrl.config import load_config
    from searchrl.models import check_fetchable
    from searchrl.validation import validate_deep

    items = [*(overrides or []), *(sets or [])]
    if out is not None:
        items.append(f"training.output_dir={out}")
    if device is not None:
        items.append(f"model.device={device}")
    cfg = load_config(recipe, items, profile)
    validate_deep(cfg, lambda name: load_config(name, items, profile))
    check_fetchable(cfg, profile)
    history = run_train(cfg, resume=resume)
    if history:
        last = history[-1]
        print(f"done: step {int(last['step'])}, reward {last.get('reward/total', 0):.3f}, "
              f"outputs in {cfg.training.output_dir}")  # the result: stdout  # fmt: skip


def run_train(cfg, resume: bool = False) -> list[dict[str, float]]:
    """RL on a resolved config; outputs (metrics, checkpoints, ``final``) in ``training.output_dir``."""
    from searchrl.device import configure_from
    from searchrl.models import load_policy
    from searchrl.pipeline import load_split, make_protocol, make_retriever_for, policy_spec
    from searchrl.rl.trainer import Trainer
    from searchrl.utils import seed_everything

    seed_everything(cfg.training.seed)
    configure_from(cfg)
    model, tok = load_policy(policy_spec(cfg), cfg.model.dtype)
    examples = load_split(cfg, "train", cfg.data.train_limit)
    protocol = make_protocol(cfg)
    reward_fn = None
    if any(c.name == "evidence" for c in cfg.reward.components):
        # R-Search's frozen reader: model.reader, or a frozen copy of the initial policy.
        from searchrl.device import frozen_copy, model_device
        from searchrl.generation.hf import HFGenerator
        from searchrl.rewards import generator_reader
        from searchrl.rl.trainer import default_reward_fn

        if cfg.model.reader:
            reader_model, reader_tok = load_policy(cfg.model.reader, frozen=True)
        else:
            reader_model, reader_tok = frozen_copy(model, model_device(model)), tok
        m = cfg.model
        reader = generator_reader(HFGenerator(reader_model, reader_tok), reader_tok,
                                  max_new_tokens=m.reader_max_new_tokens, temperature=m.reader_temperature,
                                  top_p=m.reader_top_p)  # fmt: skip
        reward_fn = default_reward_fn(cfg, protocol, tok, reader=reader)
    memorizer = None
    if cfg.memorization.coef > 0:
        # R1-Searcher++: a frozen rewriter turns correct retrieval rollouts into internal-only NLL targets.
        from searchrl.rl.memorization import make_memorizer

        memorizer = make_memorizer(cfg, protocol, model, tok)
    generator = None
    if cfg.rollout.backend == "vllm":  # a separate engine: the trainer pushes the new weights before each rollout
        from searchrl.generation import make_generator
        from searchrl.models import resolve_policy

        generator = make_generator("vllm", model, tok, model_path=str(resolve_policy(policy_spec(cfg))))
    held_out = load_split(cfg, "dev", cfg.training.eval_limit) if cfg.training.eval_every else None
    trainer = Trainer(cfg, model, tok, protocol, make_retriever_for(cfg), examples, reward_fn=reward_fn,
                      aux_nll_hook=memorizer, generator=generator, eval_examples=held_out)  # fmt: skip
    history = trainer.train(resume=resume)
    trainer.close(exit_process=True)
    return history


def register(app: typer.Typer) -> None:
    app.command("train")(train)
