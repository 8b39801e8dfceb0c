"""Training stages: the supervised cold start (SFT) and RL (building the trainer and running it)."""

from __future__ import annotations

import os
from pathlib import Path

from searchrl.config import ConfigError, RunConfig
from searchrl.pipeline import load_split, make_protocol, make_retriever_for, policy_spec
from searchrl.stages.resume import note_start, record_init
from searchrl.utils import console, read_jsonl, seed_everything


def sft_examples(cfg: RunConfig, protocol, tokenizer) -> list:
    """The SFT data ``sft.data`` names: ``oracle`` (oracle trajectories of the synthetic world, see
    :func:`searchrl.stages.data.oracle_data`), ``rewriter_oracle`` / ``rewriter:FILE`` (R1-Searcher++'s rewriter:
    documents in the prompt, internal-only paths as targets), or a JSONL of trajectories, step-level samples or
    text (a prompt and a whole response in the protocol's tags, :mod:`searchrl.sft.text_data`)."""
    from searchrl.rollout.trajectory import Trajectory
    from searchrl.sft.text_data import is_text_row, sft_rows, text_trajectories
    from searchrl.sft.types import as_sft_example
    from searchrl.stages.data import oracle_data

    s = cfg.sft
    if isinstance(s.data, list):  # several sources: each one's examples, in the order given (SFT shuffles)
        if not s.data:
            raise ValueError("sft.data is an empty list: give oracle, a trajectories JSONL, or a list of them")
        out = []
        for one in s.data:  # the sft.oracle_* settings shape the oracle source only; sft.limit caps each source
            kept = {} if one in ("oracle", "rewriter_oracle") else {"oracle_mix": {}, "oracle_first_turns": 0}
            one_cfg = cfg.model_copy(update={"sft": s.model_copy(update={"data": one, **kept})})
            out += sft_examples(one_cfg, protocol, tokenizer)
        return out
    if (s.oracle_mix or s.oracle_first_turns) and s.data != "oracle":
        raise ValueError("sft.oracle_mix and sft.oracle_first_turns shape oracle data: they need sft.data=oracle")
    if s.data in ("oracle", "rewriter_oracle"):
        data = oracle_data(cfg, tokenizer, protocol=protocol)
        if s.data == "rewriter_oracle":
            from searchrl.sft.rewriter import rewriter_sft_examples

            data = rewriter_sft_examples(data, protocol, tokenizer, cfg.model.prompt_style)
        return data
    if s.data.startswith("rewriter:"):  # R1-Searcher++'s rewriter from real (rejection-sampled) trajectories
        from searchrl.rl.memorization import Memorizer, memorizer_correctness
        from searchrl.sft.rewriter import rewriter_sft_from_trajectories

        path = Path(s.data.split(":", 1)[1])
        if not path.exists():
            raise FileNotFoundError(
                f"sft.data {s.data}: {path} not found (a trajectories JSONL, e.g. from "
                "`searchrl data rejection-sample`)"
            )
        trajs = [Trajectory.from_dict(row) for _, row in read_jsonl(path)][: s.limit]
        validator = Memorizer(cfg.memorization, None, protocol, tokenizer, correctness=memorizer_correctness(cfg))
        data, rejected = rewriter_sft_from_trajectories(trajs, validator, tokenizer, cfg.model.prompt_style)
        console.log(f"rewriter data: {len(data)} of {len(trajs)} trajectories kept; rejected: {rejected}")
        if not data:
            raise ValueError(f"no trajectory in {path} gives a valid internal-only path (rejected: {rejected})")
        return data
    path = Path(s.data)
    if not path.exists():
        raise FileNotFoundError(f"sft.data {path} not found: use 'oracle', 'rewriter_oracle' or a trajectories JSONL")
    rows = list(sft_rows(path))[: s.limit]  # JSON lines, or a .json array
    if rows and is_text_row(rows[0][1]):  # text: a prompt and a whole response in the protocol's tags
        trajs = text_trajectories(rows, protocol, tokenizer, cfg.model.prompt_style, str(path))
        return [as_sft_example(t) for t in trajs]
    # Whole trajectories (action_mask) or step-level samples (loss_mask): SFTExample from here on.
    return [as_sft_example(row) for _, row in rows]


def _warn_half_weights(cfg: RunConfig) -> None:
    """Trained weights held in bf16 (not LoRA adapters) lose every update below their precision; fp16 weights are
    refused: with no loss scaling their gradients underflow (with LoRA too: they flow through the fp16 base)."""
    if cfg.model.dtype == "float16":
        raise ConfigError(
            "model.dtype=float16 cannot be trained: without loss scaling its gradients underflow to zero; use "
            "model.dtype=float32 (with training.precision=fp32 on a GPU without bf16) or bfloat16"
        )
    if cfg.model.dtype != "float32" and not cfg.model.lora:
        console.log(
            f"[yellow]warning:[/yellow] model.dtype={cfg.model.dtype} trains the weights in {cfg.model.dtype} itself: "
            "an update under ~0.4% of a weight rounds away (at lr 1e-6 most do); model.dtype=float32 keeps fp32 "
            "master weights and computes in bf16 under training.precision=bf16"
        )


def one_process_sft() -> None:
    """Under several processes each would train its own copy of the model into the same directory."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(
            "SFT runs in one process: run `searchrl sft` (or a pipeline with an SFT stage) without accelerate launch "
            "/ torchrun; `searchrl train` takes them"
        )


def run_sft(cfg: RunConfig, out: str | Path, resume: bool = False) -> list[dict[str, float]]:
    """SFT of ``model.policy`` on ``sft.data``; the model is saved in ``<out>/final``. Returns the log. ``resume``:
    on from ``<out>/checkpoint`` (the same data, made again from the same settings)."""
    from searchrl.device import configure_from
    from searchrl.models import load_policy
    from searchrl.sft.trainer import SFTTrainer

    one_process_sft()
    seed_everything(cfg.training.seed)
    configure_from(cfg)
    _warn_half_weights(cfg)
    model, tok = load_policy(cfg.model.policy, cfg.model.dtype)
    data = sft_examples(cfg, make_protocol(cfg), tok)
    if not resume:
        note_start(Path(out), cfg.model.policy)  # what a later resume checks it starts from the same model
    return SFTTrainer(cfg, model, tok, data, out).train(resume=resume)


def build_trainer(cfg: RunConfig):
    """The RL trainer of a resolved config: the policy (``training.init_from`` or ``model.policy``), the training
    questions, protocol and retriever, R-Search's frozen reader (an ``evidence`` reward), R1-Searcher++'s memorizer
    (``memorization.coef``), a vLLM engine (``rollout.backend``) and the held-out questions (``eval_every``)."""
    from searchrl.device import configure_from
    from searchrl.models import load_policy
    from searchrl.rl.trainer import Trainer

    examples = load_split(cfg, "train", cfg.data.train_limit)  # before the model: a bad style name fails at once
    seed_everything(cfg.training.seed)
    configure_from(cfg)
    _warn_half_weights(cfg)
    model, tok = load_policy(policy_spec(cfg), cfg.model.dtype)
    protocol = make_protocol(cfg)
    reward_fn = None
    if any(c.name == "evidence" for c in cfg.reward.components):
        reward_fn = _evidence_reward(cfg, protocol, model, tok)
    memorizer = None
    if cfg.memorization.coef > 0:
        # R1-Searcher++: a frozen rewriter turns correct retrieval rollouts into internal-only NLL targets.
        from searchrl.rl.memorization import make_memorizer

        memorizer = make_memorizer(cfg, protocol, model, tok)
    generator = None
    if cfg.rollout.backend == "vllm":  # a separate engine: the trainer pushes the new weights before each rollout
        from searchrl.device import process_group
        from searchrl.generation import make_generator
        from searchrl.models import resolve_policy

        process_group(cfg.training.collective_timeout_s)  # over several processes, the engines join the trainer's
        path, r = str(resolve_policy(policy_spec(cfg))), cfg.rollout
        generator = make_generator(
            "vllm",
            model,
            tok,
            model_path=path,
            gpu_memory_utilization=r.vllm_gpu_memory_utilization,
            sleep=r.vllm_sleep,
        )
    held_out = load_split(cfg, "dev", cfg.training.eval_limit) if cfg.training.eval_every else None
    return Trainer(
        cfg,
        model,
        tok,
        protocol,
        make_retriever_for(cfg, simulate=True),
        examples,
        reward_fn=reward_fn,
        aux_nll_hook=memorizer,
        generator=generator,
        eval_examples=held_out,
    )


def _evidence_reward(cfg: RunConfig, protocol, model, tok):
    """R-Search's reward with its frozen reader: ``model.reader``, or a frozen copy of the initial policy."""
    from searchrl.device import frozen_copy, model_device
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.rewards import generator_reader
    from searchrl.rl.trainer import default_reward_fn

    if cfg.model.reader:
        reader_model, reader_tok = load_policy(cfg.model.reader, frozen=True)
    else:
        reader_model, reader_tok = frozen_copy(model, model_device(model)), tok
    m = cfg.model
    reader = generator_reader(
        HFGenerator(reader_model, reader_tok),
        reader_tok,
        max_new_tokens=m.reader_max_new_tokens,
        temperature=m.reader_temperature,
        top_p=m.reader_top_p,
        seed=cfg.training.seed,
    )
    return default_reward_fn(cfg, protocol, tok, reader=reader)


def run_train(cfg: RunConfig, resume: bool = False) -> list[dict[str, float]]:
    """RL on a resolved config; outputs (metrics, checkpoints, ``final``) in ``training.output_dir``."""
    trainer = build_trainer(cfg)
    if not resume and trainer.acc.is_main_process:
        record_init(cfg)  # what a later resume checks it starts from the same model
    history = trainer.train(resume=resume)  # searchrl train --force / the runner emptied the directory first
    trainer.close(exit_process=True)
    return history
