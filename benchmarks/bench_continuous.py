"""Continuous batching across turns (``rollout.continuous``) against the turn-by-turn loop, on the same work.

Work: the demo recipe's synthetic-world questions, its Search-R1 protocol and BM25 index, ``--n`` trajectories
decoded together (``--max-batch`` rows at most), the recipe's rollout limits, temperature 1 with a fixed seed. Each
row samples from its own stream, so both loops produce the same trajectories up to floating-point rounding (``same``:
the rows whose tokens are identical; a batch layout rounds logits differently in the last bits, which flips a draw
that falls that close to a boundary of the sampling CDF: often over the flat distributions of a random model, rarely
with a trained one). Two retrievers: the BM25 index as it is, and the same index behind ``--latency-ms`` of
artificial latency per call (a remote server).

``--workload forced`` (default) makes every turn that does not answer a search (its query: the turn's last words),
so any model, trained or not, gives multi-turn work with retrieval; ``--workload model`` keeps the protocol's own
parse (for a policy that follows the protocol, e.g. a cold-started one).

Reported per retriever and loop: wall time, decode steps (sampling steps of the decode loop), row-steps, tokens the
policy generated and their rate, mean batch occupancy (row-steps per decode step), searches, turns, retriever calls,
and (continuous) the time the loop had nothing to decode.

    python benchmarks/bench_continuous.py [--n 32] [--model SPEC] [--latency-ms 50] [--workload forced|model]
    python benchmarks/bench_continuous.py --tiny     # a tiny random model: checks the script runs, writes nothing

Writes benchmarks/results/continuous.{json,md} (not with --tiny).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from searchrl.config import load_config
from searchrl.generation.hf import HFGenerator
from searchrl.models import load_policy, resolve_policy
from searchrl.pipeline import load_split, make_protocol, make_retriever_for
from searchrl.protocols.base import Answer, Search
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.utils import tune_allocator, write_portable

RESULTS = Path(__file__).parent / "results"


class EveryTurnSearches:
    """The protocol's prompt, stop strings and rendering; a turn that neither answers nor searches searches its last
    words (the question when it wrote nothing)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def parse(self, turn_text: str):
        action = self.inner.parse(turn_text)
        if isinstance(action, Answer | Search):
            return action
        return Search((" ".join(turn_text.split()[-8:]) or "unknown",))


class Delayed:
    """A retriever behind a fixed latency per call."""

    def __init__(self, inner, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def search(self, queries: list[str], k: int):
        time.sleep(self.seconds)
        return self.inner.search(queries, k)


def tiny_policy(tok_spec: str):
    """A 2-layer, 64-wide random Llama over the given model's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(resolve_policy(tok_spec))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
        initializer_range=0.2,
    )
    return LlamaForCausalLM(cfg).eval(), tok


def run(model, tok, retriever, protocol, limits, examples, continuous: bool, max_batch: int, seed: int) -> tuple:
    gen = HFGenerator(model, tok, max_batch_size=max_batch)
    engine = RolloutEngine(gen, retriever, protocol, RolloutLimits(**{**limits, "continuous": continuous}))
    t0 = time.perf_counter()
    trajs = engine.run(examples, temperature=1.0, seed=seed)
    wall = time.perf_counter() - t0
    steps, row_steps = gen.stats["decode_steps"], gen.stats["decode_row_steps"]
    tokens = sum(t.n_policy_tokens for t in trajs)
    rec = {
        "loop": "continuous" if continuous else "turn-by-turn",
        "wall_s": round(wall, 2),
        "decode_steps": int(steps),
        "row_steps": int(row_steps),
        "policy_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "mean_occupancy": round(row_steps / max(steps, 1), 2),
        "searches": sum(t.n_searches for t in trajs),
        "turns": sum(t.n_turns for t in trajs),
        "retrieve_calls": int(engine.stats["retrieve_calls"]),
        "retrieve_s": round(engine.stats["retrieve_s"], 2),
        "wait_s": round(engine.stats.get("wait_s", 0.0), 2),
    }
    return rec, [(t.response_ids, t.stop_reason) for t in trajs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=32, help="trajectories per rollout")
    ap.add_argument("--max-batch", type=int, default=32, help="rows decoded together at most")
    ap.add_argument("--model", default=None, help="default: runs/coldstart/final if present, else the bundled model")
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--workload", choices=("forced", "model"), default="forced")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model and 6 rows; prints, writes nothing")
    args = ap.parse_args()
    tune_allocator()
    cfg = load_config("demo")
    if args.tiny:
        spec = f"tiny random Llama ({cfg.model.policy} tokenizer)"
        model, tok = tiny_policy(cfg.model.policy)
        args.n, args.max_batch = 6, 6
    else:
        coldstart = Path("runs/coldstart/final/config.json").exists()
        spec = args.model or ("runs/coldstart/final" if coldstart else cfg.model.policy)
        model, tok = load_policy(spec)
    protocol = make_protocol(cfg)
    if args.workload == "forced":
        protocol = EveryTurnSearches(protocol)
    bm25 = make_retriever_for(cfg)
    examples = load_split(cfg, "dev", args.n)
    limits = dataclasses.asdict(RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk))
    if args.tiny:
        limits.update(max_new_tokens=16, max_turns=3, max_searches=2)
    warm = examples[:2]
    for continuous in (False, True):  # warm-up: first touches of fresh memory, lazy imports
        run(model, tok, bm25, protocol, limits, warm, continuous, args.max_batch, args.seed)
    records = []
    retrievers = {"bm25": bm25, f"bm25 + {args.latency_ms:g} ms": Delayed(bm25, args.latency_ms / 1000)}
    for name, retriever in retrievers.items():
        outs = []
        for continuous in (False, True):
            rec, out = run(model, tok, retriever, protocol, limits, examples, continuous, args.max_batch, args.seed)
            records.append({"retriever": name, **rec})
            outs.append(out)
            print(json.dumps(records[-1]), flush=True)
        same = sum(a == b for a, b in zip(*outs, strict=True))
        records[-1]["same"] = records[-2]["same"] = f"{same}/{len(outs[0])}"
        records[-1]["speedup"] = round(records[-2]["wall_s"] / max(records[-1]["wall_s"], 1e-9), 2)
    result = {
        "model": spec,
        "workload": args.workload,
        "trajectories": args.n,
        "max_batch": args.max_batch,
        "limits": {k: limits[k] for k in ("max_turns", "max_searches", "max_new_tokens", "max_total_tokens")},
        "threads": torch.get_num_threads(),
        "runs": records,
    }
    cols = ["retriever", "loop", "wall_s", "speedup", "decode_steps", "row_steps", "policy_tokens", "tokens_per_s"]
    cols += ["mean_occupancy", "searches", "turns", "retrieve_calls", "retrieve_s", "wait_s", "same"]
    md = ["# Continuous batching across turns", ""]
    md += [f"Model: {spec}; workload: {args.workload}; {args.n} trajectories, at most {args.max_batch} rows decoded"]
    md += [f"together; {torch.get_num_threads()} threads; limits {result['limits']}.", ""]
    md += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in records]
    print("\n".join(md))
    if args.tiny:
        return
    RESULTS.mkdir(exist_ok=True)
    write_portable(RESULTS / "continuous.json", json.dumps(result, indent=2))
    write_portable(RESULTS / "continuous.md", "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
