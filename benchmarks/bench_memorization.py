"""R1-Searcher++ memorization data benchmark: how many valid internal-only paths the rewriter produces.

The rewriter (the bundled SmolLM2-135M) is fine-tuned on rewriter data built from oracle trajectories of synthetic
train questions (documents in the prompt, internal-only path as target; `sft.data=rewriter_oracle`). Before and after,
it rewrites oracle R1-Searcher++ trajectories of held-out dev questions, which stand in for correct, retrieval-using
policy rollouts; each rewrite goes through the Memorizer's validation (format, no search, internal step, correct
answer, no "provided" wording). Reported: the valid rate, rejection reasons, time, and example rewrites.

    python benchmarks/bench_memorization.py [--train 120] [--dev 40] [--out runs/rewriter]

Writes benchmarks/results/memorization.{json,md}; the rewriter stays in --out/final (use it as memorization.rewriter).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from searchrl.config import load_config
from searchrl.generation.hf import HFGenerator
from searchrl.models import load_policy
from searchrl.pipeline import load_split, make_protocol, make_retriever_for
from searchrl.rl.memorization import Memorizer
from searchrl.sft.oracle import oracle_trajectories
from searchrl.sft.rewriter import rewriter_sft_examples
from searchrl.sft.trainer import SFTTrainer
from searchrl.utils import seed_everything, write_portable

RESULTS = Path(__file__).parent / "results"


# The recipe holds the paper's values (Qwen 7B, BGE over KILT); these put back the CPU setup this benchmark measured:
# the bundled model, BM25 over the default 600-entity synthetic world.
CPU = [
    "model.policy=smollm2-135m-instruct",
    "model.dtype=float32",
    "model.prompt_style=auto",
    "data.source=synthetic",
    "data.train=train.jsonl",
    "data.dev=dev.jsonl",
    "data.test=test.jsonl",
    "data.corpus=corpus.jsonl",
    "retrieval.kind=bm25",
]


def rewrite_eval(cfg, model, tok, protocol, oracle) -> dict:
    mem = Memorizer(cfg.memorization, HFGenerator(model, tok), protocol, tok, cfg.model.prompt_style)
    t0 = time.perf_counter()
    rewrites = mem.rewrite(oracle, seed=0)
    secs = time.perf_counter() - t0
    reasons = Counter(r.reason.split(":")[0] for r in rewrites if not r.ok)
    return {
        "n": len(rewrites),
        "valid_rate": sum(r.ok for r in rewrites) / max(len(rewrites), 1),
        "rejected": dict(reasons.most_common()),
        "seconds": round(secs, 1),
        "examples": [
            {"question": r.question, "gold": r.golds[0], "ok": r.ok, "reason": r.reason, "text": r.text}
            for r in rewrites[:3]
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=int, default=120)
    ap.add_argument("--dev", type=int, default=40)
    ap.add_argument("--out", default="runs/rewriter")
    ap.add_argument("--reuse", action="store_true", help="evaluate the rewriter already in --out/final (no SFT)")
    ap.add_argument("overrides", nargs="*", help="extra dotted overrides of the r1_searcher_pp recipe")
    args = ap.parse_args()
    base = [
        "sft.data=rewriter_oracle",
        f"sft.limit={args.train}",
        "sft.epochs=1",
        "sft.batch_size=8",
        "sft.micro_batch_size=2",
        "sft.lr=1e-4",
        "retrieval.topk=3",
        "rollout.max_obs_tokens=200",
        "memorization.max_new_tokens=96",
    ]
    cfg = load_config("r1_searcher_pp", [*CPU, *base, *args.overrides])
    seed_everything(cfg.training.seed)
    protocol, retriever = make_protocol(cfg), make_retriever_for(cfg)
    model, tok = load_policy(cfg.model.policy)
    dev = load_split(cfg, "dev", args.dev)
    dev_oracle = oracle_trajectories(
        protocol, dev, retriever, tok, cfg.retrieval.topk, cfg.model.prompt_style, cfg.rollout.max_obs_tokens
    )
    if args.reuse:
        trained, _ = load_policy(str(Path(args.out) / "final"))
        result = {
            "rewriter": str(Path(args.out) / "final"),
            "dev_questions": len(dev),
            "max_new_tokens": cfg.memorization.max_new_tokens,
            "after": rewrite_eval(cfg, trained.eval(), tok, protocol, dev_oracle),
        }
        write_portable(RESULTS / "memorization_reuse.json", json.dumps(result, indent=2))
        print(json.dumps({k: v for k, v in result["after"].items() if k != "examples"}, indent=2))
        return
    model.eval()
    before = rewrite_eval(cfg, model, tok, protocol, dev_oracle)
    train = load_split(cfg, "train", cfg.sft.limit)
    train_oracle = oracle_trajectories(
        protocol, train, retriever, tok, cfg.retrieval.topk, cfg.model.prompt_style, cfg.rollout.max_obs_tokens
    )
    data = rewriter_sft_examples(train_oracle, protocol, tok, cfg.model.prompt_style)
    tokens = sum(len(d.prompt_ids) + len(d.response_ids) for d in data)
    t0 = time.perf_counter()
    hist = SFTTrainer(cfg, model, tok, data, args.out).train()
    sft_wall = time.perf_counter() - t0
    model.eval()
    after = rewrite_eval(cfg, model, tok, protocol, dev_oracle)
    result = {
        "model": cfg.model.policy,
        "sft_examples": len(data),
        "sft_tokens": tokens,
        "sft_wall_s": round(sft_wall, 1),
        "loss_first": hist[0]["loss"],
        "loss_last": hist[-1]["loss"],
        "dev_questions": len(dev),
        "before": before,
        "after": after,
    }
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "memorization.json", json.dumps(result, indent=2))
    md = [
        f"# R1-Searcher++ rewriter: {cfg.model.policy}, {len(data)} rewriter SFT examples",
        "",
        f"SFT: 1 epoch, lr {cfg.sft.lr}, batch {cfg.sft.batch_size}, {tokens} tokens, {result['sft_wall_s']} s, "
        f"loss {result['loss_first']:.3f} -> {result['loss_last']:.3f}",
        "",
        f"Rewrites of {len(dev)} oracle trajectories of dev questions (greedy, {cfg.memorization.max_new_tokens} "
        "new tokens at most), validated as in training:",
        "",
        "| | before rewriter SFT | after |",
        "|---|---|---|",
        f"| valid rate | {before['valid_rate']:.3f} | {after['valid_rate']:.3f} |",
        f"| rejected (reason: count) | {before['rejected']} | {after['rejected']} |",
        f"| seconds | {before['seconds']} | {after['seconds']} |",
        "",
        "Example rewrites after SFT:",
        "",
    ]
    for ex in after["examples"]:
        md += [
            f"- Q: {ex['question']} (gold {ex['gold']}) -> {'valid' if ex['ok'] else ex['reason']}",
            f"  `{ex['text'].strip()[:400]}`",
        ]
    write_portable(RESULTS / "memorization.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
