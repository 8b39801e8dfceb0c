"""SFT step throughput on the multihop_world recipe's cold-start data (the oracle trajectories of the synthetic
world): the first N batches of the recipe's own schedule, timed, against the arithmetic they need.

    python benchmarks/bench_sft_step.py [--batches 12] [--recipe multihop_world] [--label NAME] [overrides...]

Appends one row to benchmarks/results/sft_step.{json,md}: real tokens (prompt + target), tokens the passes compute
(padding included, a shared instruction prefix once per micro-batch), wall and CPU seconds, and the share of the
matmul bound: the step's FLOPs (6 x non-embedding parameters per computed token, plus attention and the LM head on
the target tokens) at this machine's fp32 matmul rate, measured at the start (peer_trl_grpo.matmul_peak, 1024^3).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from peer_trl_grpo import matmul_peak

RESULTS = Path(__file__).parent / "results"


def computed_tokens(batch) -> tuple[int, float]:
    """(tokens the shared passes compute, attention FLOPs per layer-head-dim unit) for one micro-batch."""
    from searchrl.rl.batch import _share_plan

    P = batch.prompt_len
    plan = _share_plan(batch) if len(batch) > 1 else None
    resp = batch.attention_mask[:, P:].sum(-1).tolist()
    if plan is None:
        L = batch.input_ids.shape[1]
        return len(batch) * L, len(batch) * L * L / 2
    prompts, _, common = plan
    rem = max(len(p) - common for p in prompts)
    tokens = common + len(prompts) * rem
    attn = common * common / 2 + len(prompts) * rem * (common + rem / 2)
    T = max(resp)
    return tokens + len(batch) * T, attn + len(batch) * T * (common + rem + T / 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="multihop_world")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--label", default="")
    ap.add_argument("--results", default=str(RESULTS / "sft_step"))
    ap.add_argument("--out", default="runs/bench_sft_step", help="run directory for the world and its index")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    import random

    from searchrl.config import load_config
    from searchrl.models import load_policy
    from searchrl.pipeline import make_protocol
    from searchrl.rl.batch import collate
    from searchrl.runner import run_pipeline
    from searchrl.sft.trainer import SFTTrainer, _parts, sft_loss
    from searchrl.sft.types import as_sft_example
    from searchrl.stages import sft_examples as oracle_sft_data
    from searchrl.stages.chain import stage_config, stage_output
    from searchrl.utils import seed_everything, write_portable

    rate = matmul_peak()["1024x1024x1024"] * 1e9  # best of 5, a 1024^3 fp32 matmul
    cfg = load_config(args.recipe, args.overrides)
    out = Path(args.out)
    data_stages = [s.name for s in cfg.pipeline if s.kind == "data"]
    run_pipeline(cfg, out, only=data_stages)  # the world and its index (seconds; kept for the next run)
    stage = next(s for s in cfg.pipeline if s.kind == "sft")
    world = next(str(stage_output(s, out)) for s in cfg.pipeline if s.op == "synth")
    index = next(str(stage_output(s, out)) for s in cfg.pipeline if s.op == "index")
    scfg = stage_config(cfg, stage, world, index)
    seed_everything(scfg.training.seed)
    model, tok = load_policy(scfg.model.policy, scfg.model.dtype)
    examples = [as_sft_example(e) for e in oracle_sft_data(scfg, make_protocol(scfg), tok)]
    trainer = SFTTrainer(scfg, model, tok, examples, out / "bench_sft")
    batches = trainer._batches(random.Random(scfg.training.seed), scfg.sft.batch_size)[: args.batches]
    n_layers, hidden = model.config.num_hidden_layers, model.config.hidden_size
    vocab = model.config.vocab_size
    body = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    real = computed = targets = 0
    attn_units = 0.0
    model.train()
    t0, c0 = time.perf_counter(), time.process_time()
    for idx in batches:
        batch = [trainer.examples[i] for i in idx]
        n_tok = float(sum(sum(_parts(e)[2]) for e in batch))
        trainer.opt.zero_grad(set_to_none=True)
        for part_idx in trainer._micro(batch):
            part = [batch[i] for i in part_idx]
            b = collate(*zip(*(_parts(e) for e in part), strict=True), pad_id=trainer.pad)
            c, a = computed_tokens(b)
            computed, attn_units = computed + c, attn_units + a
            sft_loss(trainer.scorer, part, trainer.pad, trainer.device, n_tok).backward()
        trainer.opt.step()
        real += sum(len(_parts(e)[0]) + len(_parts(e)[1]) for e in batch)
        targets += int(n_tok)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # forward + backward = 3 x forward; a forward is 2 FLOPs per weight per token, 4 x head_dim x heads per
    # attended pair (scores and values), the LM head 2 x hidden x vocab on target tokens only
    flops = 3 * (2 * body * computed + 4 * hidden * n_layers * attn_units + 2 * hidden * vocab * targets)
    row = {
        "label": args.label,
        "recipe": args.recipe,
        "overrides": args.overrides,
        "batches": len(batches),
        "real_tokens": real,
        "computed_tokens": computed,
        "target_tokens": targets,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "tokens_per_s": round(real / wall, 1),
        "tokens_per_cpu_s": round(real / cpu, 1),
        "matmul_gflops": round(rate / 1e9, 1),
        "step_tflop": round(flops / 1e12, 2),
        "bound_share": round(flops / rate / wall, 3),
    }
    print(json.dumps(row))
    res = Path(args.results)
    res.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(res.with_suffix(".json").read_text()) if res.with_suffix(".json").exists() else []
    rows.append(row)
    write_portable(res.with_suffix(".json"), json.dumps(rows, indent=1) + "\n")
    lines = [
        "# SFT step throughput (`benchmarks/bench_sft_step.py`)",
        "",
        "The first batches of the recipe's cold-start schedule; `bound` = the step's FLOPs at this machine's "
        "fp32 matmul rate (measured at the start of each row) over the wall time.",
        "",
        "| label | batches | real tokens | computed | wall s | CPU s | tokens/s | tokens/CPU-s | matmul GFLOP/s "
        "| bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['batches']} | {r['real_tokens']} | {r['computed_tokens']} | {r['wall_s']} "
            f"| {r['cpu_s']} | {r['tokens_per_s']} | {r['tokens_per_cpu_s']} | {r['matmul_gflops']} "
            f"| {r['bound_share']:.0%} |"
        )
    write_portable(res.with_suffix(".md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
