"""Generation paths on the RL step's work (issue 12): transformers' generate (dynamic and static cache) vs our decode
loop, for one turn and for a second turn that follows an observation.

Work: SmolLM2-135M (bundled), 4 questions of 2wiki-mini dev rendered with the Search-R1 chat prompt, 4 samples each
(16 rows), <= 64 new tokens, temperature 1. Second turn: each row's context plus a 120-token observation, <= 32 new
tokens, greedy. Each timing is the median of ``--repeats`` runs after one warm-up.

    python benchmarks/bench_generation.py [--repeats 3] [--data ../shared/data/2wiki-mini/dev.jsonl]

Writes benchmarks/results/generation.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from searchrl.generation.base import SamplingParams
from searchrl.generation.hf import HFGenerateGenerator, HFGenerator
from searchrl.models import load_policy
from searchrl.protocols import get_protocol
from searchrl.rollout.engine import build_prompt_text
from searchrl.utils import tune_allocator, write_portable

RESULTS = Path(__file__).parent / "results"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "2wiki-mini" / "dev.jsonl"


def _median_time(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm-up (first touches of fresh memory are slow)
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class StaticCacheGenerate(HFGenerateGenerator):
    """transformers' generate with a pre-allocated static KV cache (one of the options the issue asks to try)."""

    def _generate_chunk(self, prompts, params):
        gc = self.model.generation_config
        old = gc.cache_implementation
        gc.cache_implementation = "static"
        try:
            return super()._generate_chunk(prompts, params)
        finally:
            gc.cache_implementation = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    tune_allocator()
    model, tok = load_policy(args.model)
    protocol = get_protocol("search_r1")
    questions = [json.loads(line)["question"] for line in open(args.data)][:4]
    prompts = [tok.encode(build_prompt_text(protocol, tok, q), add_special_tokens=False) for q in questions]
    rows = [p for p in prompts for _ in range(4)]
    stops = tuple(protocol.stop_strings) + tuple(protocol.answer_stop_strings)
    turn1 = SamplingParams(max_new_tokens=64, temperature=1.0, stop=stops, seed=0)
    result: dict[str, object] = {
        "model": args.model,
        "rows": len(rows),
        "prompt_tokens": sum(map(len, rows)),
        "torch_threads": torch.get_num_threads(),
    }

    gens = {
        "transformers generate (dynamic cache)": HFGenerateGenerator(model, tok),
        "transformers generate (static cache)": StaticCacheGenerate(model, tok),
        "searchrl decode loop": HFGenerator(model, tok),
    }
    table = []
    for name, gen in gens.items():
        secs, out = _median_time(lambda g=gen: g.generate(rows, turn1), args.repeats)
        n_new = sum(len(c.token_ids) for c in out)
        table.append(
            {
                "path": name,
                "turn": 1,
                "seconds": round(secs, 3),
                "new_tokens": n_new,
                "new_tokens_per_s": round(n_new / secs, 1),
            }
        )
        print(table[-1], flush=True)

    # Second turn: the same contexts plus an observation; with and without reusing the first turn's cache.
    fast = HFGenerator(model, tok)
    first = fast.generate(rows, turn1)
    obs = tok.encode(
        "\n<information>" + " ".join(["Doc text about the question and its answer."] * 15) + "</information>\n",
        add_special_tokens=False,
    )[:120]
    second = [r + c.token_ids + obs for r, c in zip(rows, first, strict=True)]
    turn2 = SamplingParams(max_new_tokens=32, temperature=0.0, stop=stops)

    secs = []
    for _ in range(args.repeats + 1):  # the first is a warm-up; each repeat re-creates the first turn's caches
        fast.generate(rows, turn1)
        t0 = time.perf_counter()
        fast.generate(second, turn2)
        secs.append(time.perf_counter() - t0)
    secs_reuse = statistics.median(secs[1:])
    no_reuse = HFGenerator(model, tok, reuse_prefixes=False)
    secs_fresh, out_fresh = _median_time(lambda: no_reuse.generate(second, turn2), args.repeats)
    secs_hf, out_hf = _median_time(lambda: HFGenerateGenerator(model, tok).generate(second, turn2), args.repeats)
    same = [c.token_ids for c in out_fresh] == [c.token_ids for c in out_hf]
    max_dlp = (
        max(
            abs(a - b)
            for x, y in zip(out_fresh, out_hf, strict=True)
            for a, b in zip(x.logprobs, y.logprobs, strict=True)
        )
        if same
        else None
    )
    for name, secs in [
        ("transformers generate", secs_hf),
        ("searchrl decode loop, no cache reuse", secs_fresh),
        ("searchrl decode loop, first turn's cache reused", secs_reuse),
    ]:
        table.append({"path": name, "turn": 2, "seconds": round(secs, 3)})
        print(table[-1], flush=True)
    result["table"] = table
    result["turn2_greedy_equal_to_generate"] = same
    result["turn2_max_logprob_diff"] = max_dlp
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "generation.json", json.dumps(result, indent=2) + "\n")
    lines = [
        "# Generation paths on the RL step's work",
        "",
        f"`{args.model}`, {len(rows)} rows (4 prompts x 4 samples, {result['prompt_tokens']} prompt tokens), "
        "turn 1: <= 64 new tokens at T = 1; turn 2: context + 120-token observation, <= 32 new tokens, greedy. "
        f"Median of {args.repeats} after a warm-up; `python benchmarks/bench_generation.py`.",
        "",
        "| turn | path | seconds | new tokens/s |",
        "|---|---|---|---|",
        *[f"| {r['turn']} | {r['path']} | {r['seconds']} | {r.get('new_tokens_per_s', '')} |" for r in table],
        "",
        f"Turn 2, greedy: our loop's tokens equal transformers' generate: {same}; largest log-prob difference "
        f"{max_dlp if max_dlp is None else f'{max_dlp:.1e}'}.",
    ]
    write_portable(RESULTS / "generation.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
