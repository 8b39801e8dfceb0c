"""Cold start benchmark (issue 8): SFT of the bundled SmolLM2-135M on oracle Search-R1 trajectories of the
synthetic world; the agent's format rate, EM and searches on dev questions before and after, and the CPU time.

    python benchmarks/bench_sft_coldstart.py [--train 200] [--dev 50] [--out runs/coldstart]

Writes benchmarks/results/sft_coldstart.{json,md}; the SFT model stays in --out/final (the demo picks it up).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from searchrl.config import load_config
from searchrl.generation.hf import HFGenerator
from searchrl.models import load_policy
from searchrl.pipeline import load_split, make_protocol, make_retriever_for
from searchrl.rewards.summary import summarize
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.sft.oracle import oracle_trajectories
from searchrl.sft.trainer import SFTTrainer
from searchrl.utils import seed_everything, write_portable

RESULTS = Path(__file__).parent / "results"


def agent_eval(cfg, model, tok, protocol, retriever, examples) -> dict:
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    engine = RolloutEngine(HFGenerator(model, tok), retriever, protocol, limits, cfg.model.prompt_style)
    t0 = time.perf_counter()
    trajs = engine.run(examples, temperature=0.0)
    out = summarize(trajs, protocol, tok)
    out["seconds"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=int, default=200)
    ap.add_argument("--dev", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--out", default="runs/coldstart")
    ap.add_argument("overrides", nargs="*", help="extra dotted overrides of the demo recipe")
    args = ap.parse_args()
    cfg = load_config("demo", [f"sft.limit={args.train}", f"sft.epochs={args.epochs}", *args.overrides])
    seed_everything(cfg.training.seed)
    protocol, retriever = make_protocol(cfg), make_retriever_for(cfg)
    dev = load_split(cfg, "dev", args.dev)
    model, tok = load_policy(cfg.model.policy)
    before = agent_eval(cfg, model, tok, protocol, retriever, dev)
    train = load_split(cfg, "train", cfg.sft.limit, kinds=cfg.sft.kinds or None)
    data = oracle_trajectories(
        protocol, train, retriever, tok, cfg.retrieval.topk, cfg.model.prompt_style, cfg.rollout.max_obs_tokens
    )
    tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in data)
    t0, c0 = time.perf_counter(), time.process_time()
    hist = SFTTrainer(cfg, model, tok, data, args.out).train()
    sft_wall, sft_cpu = time.perf_counter() - t0, time.process_time() - c0
    model.eval()
    after = agent_eval(cfg, model, tok, protocol, retriever, dev)
    result = {
        "model": cfg.model.policy,
        "protocol": cfg.rollout.protocol,
        "sft_examples": len(data),
        "sft_tokens": tokens,
        "sft_epochs": cfg.sft.epochs,
        "sft_lr": cfg.sft.lr,
        "sft_batch_size": cfg.sft.batch_size,
        "sft_wall_s": round(sft_wall, 1),
        "sft_cpu_s": round(sft_cpu, 1),
        "sft_tokens_per_s": round(tokens * cfg.sft.epochs / sft_wall, 1),
        "loss_first": hist[0]["loss"],
        "loss_last": hist[-1]["loss"],
        "dev_questions": len(dev),
        "before": before,
        "after": after,
    }
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "sft_coldstart.json", json.dumps(result, indent=2))
    rows = ["well_formed", "answered", "em", "f1", "searches_per_question", "seconds"]
    md = [
        f"# SFT cold start: {cfg.model.policy}, {cfg.rollout.protocol}, {len(data)} oracle trajectories",
        "",
        f"SFT: {cfg.sft.epochs} epoch(s), {tokens} tokens, {result['sft_wall_s']} s wall, "
        f"{result['sft_cpu_s']} s CPU, "
        f"loss {result['loss_first']:.3f} -> {result['loss_last']:.3f}",
        "",
        f"| on {len(dev)} dev questions (greedy) | before SFT | after SFT |",
        "|---|---|---|",
    ]
    md += [f"| {k} | {before[k]:.3f} | {after[k]:.3f} |" for k in rows]
    write_portable(RESULTS / "sft_coldstart.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
