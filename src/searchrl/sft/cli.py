"""``searchrl sft``: cold-start supervised fine-tuning with masked observations."""

from __future__ import annotations

import typer


def sft(
    recipe: str = typer.Option(..., "--recipe", "--config", "-r", help="recipe name or YAML path (its sft: section)"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. sft.epochs=1 sft.limit=250"),
    sets: list[str] = typer.Option(None, "--set", help="a dotted override, like a positional KEY=VALUE (repeatable)"),
    out: str = typer.Option(None, "--out", help="output dir (default: <training.output_dir>-sft)"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
    profile: str = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)"),
) -> None:
    """Supervised cold start on oracle trajectories of the synthetic world (sft.data=oracle) or a trajectories JSONL.

    sft.data=rewriter_oracle (synthetic world) or sft.data=rewriter:TRAJECTORIES.jsonl trains R1-Searcher++'s rewriter
    instead (documents in the prompt, internal-only paths as targets).

    Example: searchrl sft --recipe demo sft.limit=250 --out runs/coldstart
    """
    from searchrl.config import load_config
    from searchrl.models import check_fetchable
    from searchrl.validation import validate_deep

    device_set = [f"model.device={device}"] if device else []
    cfg = load_config(recipe, [*(overrides or []), *(sets or []), *device_set], profile)
    validate_deep(cfg, lambda name: load_config(name, [*(overrides or []), *(sets or []), *device_set], profile))
    check_fetchable(cfg, profile)
    run_sft(cfg, out or f"{cfg.training.output_dir}-sft")


def run_sft(cfg, out: str) -> list[dict[str, float]]:
    """SFT of ``cfg.model.policy`` on ``cfg.sft.data``; the model is saved in ``<out>/final``. Returns the log."""
    from pathlib import Path

    from searchrl.device import configure_from
    from searchrl.models import load_policy
    from searchrl.pipeline import make_protocol
    from searchrl.rollout.trajectory import Trajectory
    from searchrl.sft.trainer import SFTTrainer
    from searchrl.sft.types import as_sft_example
    from searchrl.utils import read_jsonl, seed_everything

    seed_everything(cfg.training.seed)
    configure_from(cfg)
    model, tok = load_policy(cfg.model.policy, cfg.model.dtype)
    protocol = make_protocol(cfg)
    if cfg.sft.data in ("oracle", "rewriter_oracle"):
        data = oracle_sft_data(cfg, protocol, tok)
        if cfg.sft.data == "rewriter_oracle":  # R1-Searcher++'s rewriter: documents in context -> internal path
            from searchrl.sft.rewriter import rewriter_sft_examples

            data = rewriter_sft_examples(data, protocol, tok, cfg.model.prompt_style)
    elif cfg.sft.data.startswith("rewriter:"):  # R1-Searcher++'s rewriter from real (rejection-sampled) trajectories
        from searchrl.rl.memorization import Memorizer, memorizer_correctness
        from searchrl.sft.rewriter import rewriter_sft_from_trajectories
        from searchrl.utils import console

        path = Path(cfg.sft.data.split(":", 1)[1])
        if not path.exists():
            raise FileNotFoundError(f"sft.data {cfg.sft.data}: {path} not found (a trajectories JSONL, e.g. from "
                                    "`searchrl data rejection-sample`)")  # fmt: skip
        trajs = [Trajectory.from_dict(row) for _, row in read_jsonl(path)][: cfg.sft.limit]
        validator = Memorizer(cfg.memorization, None, protocol, tok, correctness=memorizer_correctness(cfg))
        data, rejected = rewriter_sft_from_trajectories(trajs, validator, tok, cfg.model.prompt_style)
        console.log(f"rewriter data: {len(data)} of {len(trajs)} trajectories kept; rejected: {rejected}")
        if not data:
            raise ValueError(f"no trajectory in {path} gives a valid internal-only path (rejected: {rejected})")
    else:
        path = Path(cfg.sft.data)
        if not path.exists():
            raise FileNotFoundError(
                f"sft.data {path} not found: use 'oracle', 'rewriter_oracle' or a trajectories JSONL"
            )
        # Whole trajectories (action_mask) or step-level samples (loss_mask): SFTExample from here on.
        rows = [row for _, row in read_jsonl(path)][: cfg.sft.limit]
        data = [as_sft_example(r) for r in rows]
    return SFTTrainer(cfg, model, tok, data, out).train()


def oracle_sft_data(cfg, protocol, tok) -> list:
    """``sft.limit`` whole oracle trajectories of the training questions, then (``sft.oracle_first_turns``) the
    first turn of as many further questions as step-level samples (RAG-R1's slicing, spec 004 §2.2).

    ``sft.oracle_mix`` ({kind: n}) picks the whole trajectories per question kind instead: the first n questions of
    each kind in file order (their total is the limit); the first turns then come from the remaining questions in
    file order. A world's file order follows its kind shares, so a small limit can hold few of a rare kind."""
    from searchrl.pipeline import load_split, make_retriever_for
    from searchrl.sft.oracle import oracle_trajectories, round_robin_by_template
    from searchrl.sft.pipelines import slice_steps

    s = cfg.sft
    n_first, mix = s.oracle_first_turns, s.oracle_mix
    n_whole = sum(mix.values()) if mix else s.limit
    if mix and ((s.limit is not None and s.limit != n_whole) or s.oracle_balance or s.data != "oracle"):
        raise ValueError(f"sft.oracle_mix (sums to {n_whole}) sets the whole trajectories itself: leave sft.limit "
                         "unset (or equal to that sum) and sft.oracle_balance off, with sft.data=oracle")  # fmt: skip
    if n_first and (n_whole is None or s.data != "oracle"):
        raise ValueError("sft.oracle_first_turns needs sft.data=oracle and an sft.limit (the whole trajectories; "
                         "the first-turn samples come from the questions after them)")  # fmt: skip
    limit = n_whole + n_first if n_first else n_whole
    if mix:
        pool = load_split(cfg, "train", None, kinds=s.kinds or None)
        picked = {k: [e for e in pool if e.metadata.get("kind") == k][:n] for k, n in mix.items()}
        short = {k: f"{len(picked[k])} of {n}" for k, n in mix.items() if len(picked[k]) < n}
        if short:
            present = sorted({str(e.metadata.get("kind")) for e in pool})
            raise ValueError(f"sft.oracle_mix asks for more questions of a kind than the training split holds "
                             f"({short}): lower those counts (kinds present: {present})")  # fmt: skip
        whole = [e for k in mix for e in picked[k]]
        taken = {id(e) for e in whole}
        examples = whole + [e for e in pool if id(e) not in taken][:n_first]
    else:
        examples = load_split(cfg, "train", None if s.oracle_balance else limit, kinds=s.kinds or None)
        if s.oracle_balance:
            examples = round_robin_by_template(examples)[:limit]
    topk = s.oracle_topk or cfg.retrieval.topk
    data = oracle_trajectories(protocol, examples, make_retriever_for(cfg), tok, topk, cfg.model.prompt_style,
                               cfg.rollout.max_obs_tokens, s.oracle_plan)  # fmt: skip
    if n_first:
        data = data[:n_whole] + [slice_steps(t)[0] for t in data[n_whole:]]
    return data


def register(app: typer.Typer) -> None:
    app.command("sft")(sft)
