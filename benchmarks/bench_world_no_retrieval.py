"""Benchmark (issue 3, acceptance 4): the bundled policy answers synthetic dev questions without retrieval.

A 2,000-entity world (seed 0) is generated; the first ``--n`` dev questions go to ``smollm2-135m-instruct`` through
its chat template with the instruction "Answer with a short phrase only.", decoded greedily (at most 24 new tokens,
batches of 16, left padding). Scores: exact match with SQuAD normalisation (``searchrl.rewards.metrics`` when
present, else the same normalisation written out here) against every gold alias, plus cover EM (a gold alias
occurs inside the prediction) for context; overall and by question kind. The acceptance bound is EM <= 0.05:
the world's facts are invented, so a model that has not searched cannot know them.

Results: ``benchmarks/results/world_no_retrieval.{json,md}`` (with every prediction in the JSON).

Usage: SEARCHRL_CACHE=/tmp/srlcache python benchmarks/bench_world_no_retrieval.py [--n 100] [--entities 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import string
import time
from pathlib import Path

import torch

from searchrl.data.synth import KINDS, generate_world
from searchrl.models import load_policy
from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INSTRUCTION = "Answer with a short phrase only."

try:  # the project's metrics module, when it exists
    from searchrl.rewards.metrics import exact_match, normalize_answer
except ImportError:  # pragma: no cover - fallback for a tree without the rewards package

    def normalize_answer(text: str) -> str:
        """SQuAD: lower-case, drop punctuation and a/an/the, collapse whitespace."""
        text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())

    def exact_match(prediction: str, golds: list[str]) -> float:
        return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def cover(prediction: str, golds: list[str]) -> float:
    """A normalised gold occurs, on word boundaries, inside the normalised prediction."""
    p = f" {normalize_answer(prediction)} "
    return float(any(f" {normalize_answer(g)} " in p for g in golds if normalize_answer(g)))


@torch.inference_mode()
def answer_all(model, tok, questions: list[str], batch_size: int, max_new_tokens: int) -> list[str]:
    out: list[str] = []
    for i in range(0, len(questions), batch_size):
        chunk = questions[i : i + batch_size]
        prompts = [
            tok.apply_chat_template(
                [{"role": "user", "content": f"{q}\n{INSTRUCTION}"}], tokenize=False, add_generation_prompt=True
            )
            for q in chunk
        ]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)  # (B, T), left-padded
        gen = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        new = gen[:, enc["input_ids"].shape[1] :]  # (B, <=max_new_tokens)
        out += [t.strip() for t in tok.batch_decode(new, skip_special_tokens=True)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    args = ap.parse_args()

    torch.manual_seed(0)
    world = generate_world(args.entities, args.seed)
    dev = world.questions["dev"][: args.n]
    model, tok = load_policy(args.model)
    t0 = time.perf_counter()
    preds = answer_all(model, tok, [q.question for q in dev], args.batch_size, args.max_new_tokens)
    seconds = time.perf_counter() - t0

    rows = []
    for q, p in zip(dev, preds, strict=True):
        rows.append(
            {
                "id": q.id,
                "kind": q.metadata["kind"],
                "question": q.question,
                "golds": q.answers,
                "prediction": p,
                "em": exact_match(p, q.answers),
                "cover_em": cover(p, q.answers),
            }
        )

    def mean(xs: list[float]) -> float:
        return round(sum(xs) / len(xs), 4) if xs else float("nan")

    by_kind = {
        k: {"n": len(sel), "em": mean([r["em"] for r in sel]), "cover_em": mean([r["cover_em"] for r in sel])}
        for k in KINDS
        if (sel := [r for r in rows if r["kind"] == k])
    }
    result = {
        "model": args.model,
        "world": {"entities": args.entities, "seed": args.seed},
        "n": len(rows),
        "em": mean([r["em"] for r in rows]),
        "cover_em": mean([r["cover_em"] for r in rows]),
        "by_kind": by_kind,
        "bound": 0.05,
        "passes": mean([r["em"] for r in rows]) <= 0.05,
        "decoding": {"greedy": True, "max_new_tokens": args.max_new_tokens, "instruction": INSTRUCTION},
        "generation_s": round(seconds, 1),
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": [round(x, 1) for x in os.getloadavg()]},
        "predictions": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "world_no_retrieval.json", json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = [
        "# Synthetic dev questions without retrieval",
        "",
        f'`{args.model}`, greedy, chat template + "{INSTRUCTION}", first {len(rows)} dev questions of a '
        f"{args.entities}-entity world (seed {args.seed}); no search.",
        "",
        f"**EM = {result['em']:.3f}** (bound <= 0.05: {'met' if result['passes'] else 'NOT met'}); "
        f"cover EM = {result['cover_em']:.3f}. Generation took {seconds:.0f} s on {os.cpu_count()} shared CPUs.",
        "",
        "| kind | n | EM | cover EM |",
        "|---|---|---|---|",
        *[f"| {k} | {v['n']} | {v['em']:.3f} | {v['cover_em']:.3f} |" for k, v in by_kind.items()],
        "",
        "Sample predictions:",
        "",
        "| question | gold | prediction |",
        "|---|---|---|",
        *[f"| {r['question']} | {r['golds'][0]} | {r['prediction'].replace('|', '/')[:80]} |" for r in rows[:8]],
    ]
    write_portable(RESULTS / "world_no_retrieval.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
