"""Rollout engine overhead: bundled model, Search-R1 protocol, 32 trajectories on the synthetic world.

overhead = (engine wall time - the engine's generator time) / the generator time: what the engine adds around its
generator calls (stop-string parsing, retrieval, observation insertion, bookkeeping).

Beside it, for scale, ``vs_hf_generate``: the engine's wall time against a replay of every turn as a plain
``model.generate`` call on the same contexts and batch, forced to produce the same number of new tokens (min = max
= the turn's longest completion), with no stop strings, no log-prob output, no parsing, retrieval or insertion. That
replay is another generator (HF's loop, every row run to the chunk's longest turn), so it measures the engine and its
generator together against HF's, not the engine's own overhead.

    python benchmarks/bench_engine_overhead.py [--n 32] [--model SPEC]

Writes benchmarks/results/engine_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from searchrl.config import load_config
from searchrl.generation.hf import HFGenerator
from searchrl.models import load_policy
from searchrl.pipeline import load_split, make_protocol, make_retriever_for
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"


@torch.no_grad()
def replay_pure_generation(model, tok, trajs, max_batch: int) -> float:
    """Time plain generate() over each turn's contexts with the same new-token counts."""
    pad = tok.pad_token_id
    total = 0.0
    n_turns = max(t.n_turns for t in trajs)
    for turn_no in range(n_turns):
        rows = []
        for t in trajs:
            if turn_no >= t.n_turns:
                continue
            # context before this turn = prompt + response tokens of earlier turns (sampled + inserted)
            done = sum(tt.n_gen_tokens + tt.n_obs_tokens for tt in t.turns[:turn_no])
            rows.append((t.prompt_ids + t.response_ids[:done], t.turns[turn_no].n_gen_tokens))
        rows.sort(key=lambda r: len(r[0]))
        for s in range(0, len(rows), max_batch):
            chunk = rows[s : s + max_batch]
            width = max(len(c) for c, _ in chunk)
            new = max(n for _, n in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for r, (c, _) in enumerate(chunk):
                ids[r, width - len(c) :] = torch.tensor(c)
                attn[r, width - len(c) :] = 1
            t0 = time.perf_counter()
            model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=pad,
            )
            total += time.perf_counter() - t0
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--model", default=None, help="default: runs/coldstart/final if present, else the bundled model")
    args = ap.parse_args()
    cfg = load_config("demo")
    spec = args.model or (
        "runs/coldstart/final" if Path("runs/coldstart/final/config.json").exists() else cfg.model.policy
    )
    model, tok = load_policy(spec)
    protocol, retriever = make_protocol(cfg), make_retriever_for(cfg)
    examples = load_split(cfg, "dev", args.n)
    gen = HFGenerator(model, tok, max_batch_size=32)
    engine = RolloutEngine(gen, retriever, protocol, RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk))
    engine.run(examples[:2], temperature=0.0)  # warm-up
    t0 = time.perf_counter()
    trajs = engine.run(examples, temperature=0.0)
    engine_wall = time.perf_counter() - t0
    pure = replay_pure_generation(model, tok, trajs, gen.max_batch_size)
    result = {
        "model": spec,
        "trajectories": len(trajs),
        "turns_max": max(t.n_turns for t in trajs),
        "generated_tokens": sum(t.n_policy_tokens for t in trajs),
        "searches": sum(t.n_searches for t in trajs),
        "engine_wall_s": round(engine_wall, 2),
        "engine_generate_s": round(engine.stats["generate_s"], 2),
        "engine_retrieve_s": round(engine.stats["retrieve_s"], 3),
        "hf_generate_replay_s": round(pure, 2),
        "overhead": round((engine_wall - engine.stats["generate_s"]) / engine.stats["generate_s"], 4),
        "target": 0.10,
        "vs_hf_generate": round((engine_wall - pure) / pure, 4),
    }
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "engine_overhead.json", json.dumps(result, indent=2))
    md = ["# Rollout engine overhead", "", "| metric | value |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in result.items()]
    write_portable(RESULTS / "engine_overhead.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
