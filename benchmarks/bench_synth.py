"""Benchmark (issue 3, acceptance 3): how long a 2,000-entity synthetic world takes to generate and write, and how
hard its questions are for a retriever given only the question.

Measured:

- wall time of ``generate_world(N, seed)`` and of ``write_world`` (median and min over ``--runs`` runs, same seed;
  the files of every run are checked byte-identical);
- the world's counts (entities by kind, passage length, questions by split and kind);
- BM25 (bm25s, English stemmer and stop words) over the corpus, queried with the dev + test questions as written:
  the share whose first / last / every supporting passage is in the top 5, by kind. Single-hop questions should
  find their passage; multi-hop questions should not find their last passage without a second search.

Results: ``benchmarks/results/synth.{json,md}``.

Usage: python benchmarks/bench_synth.py [--entities 2000] [--seed 0] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from searchrl.data.synth import KINDS, World, generate_world, write_world
from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def bm25_question_recall(world: World, k: int = 5) -> dict[str, dict[str, float]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = [p.id for p in world.passages]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([p.contents for p in world.passages], stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    questions = [q for split in ("dev", "test") for q in world.questions[split]]
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        sel = [q for q in questions if q.metadata["kind"] == kind]
        tokens = bm25s.tokenize([q.question for q in sel], stopwords="en", stemmer=stemmer, show_progress=False)
        rows, _ = retriever.retrieve(tokens, k=k, show_progress=False)  # (Q, k) corpus rows
        tops = [{ids[i] for i in row} for row in rows]
        chains = [q.metadata["chain"] for q in sel]
        out[kind] = {
            "questions": len(sel),
            "first_hop_at_5": round(
                sum(c[0]["passage_id"] in t for c, t in zip(chains, tops, strict=True)) / len(sel), 3
            ),
            "last_hop_at_5": round(
                sum(c[-1]["passage_id"] in t for c, t in zip(chains, tops, strict=True)) / len(sel), 3
            ),
            "all_hops_at_5": round(
                sum(all(h["passage_id"] in t for h in c) for c, t in zip(chains, tops, strict=True)) / len(sel), 3
            ),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    gen_s, write_s, digests = [], [], []
    world = None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        world = generate_world(args.entities, args.seed)
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_world(world, tmp)
            t2 = time.perf_counter()
            digests.append({k: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for k, p in paths.items()})
            sizes = {p.name: p.stat().st_size for p in paths.values()}
        gen_s.append(t1 - t0)
        write_s.append(t2 - t1)
    assert world is not None
    identical = all(d == digests[0] for d in digests)
    recall = bm25_question_recall(world)
    result = {
        "entities": args.entities,
        "seed": args.seed,
        "runs": args.runs,
        "generate_s": {
            "median": round(statistics.median(gen_s), 3),
            "min": round(min(gen_s), 3),
            "all": [round(x, 3) for x in gen_s],
        },
        "write_s": {"median": round(statistics.median(write_s), 3), "min": round(min(write_s), 3)},
        "byte_identical_across_runs": identical,
        "file_bytes": sizes,
        "world": world.summary(),
        "bm25_question_only_recall": recall,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "synth.json", json.dumps(result, indent=2) + "\n")

    s = result["world"]
    lines = [
        "# Synthetic world generation",
        "",
        f"`generate_world({args.entities}, seed={args.seed})`: **{result['generate_s']['median']:.2f} s** median over "
        f"{args.runs} runs (min {result['generate_s']['min']:.2f} s; target < 30 s); `write_world`: "
        f"{result['write_s']['median']:.2f} s. Files byte-identical across runs: **{identical}**.",
        f"Machine: {os.cpu_count()} CPUs, shared; load average at end {result['machine']['load_average_at_end']}.",
        "",
        f"World: {s['entities']} entities {s['entity_kinds']}; {s['passages']} passages of "
        f"{s['passage_words']['min']}-{s['passage_words']['max']} words (mean {s['passage_words']['mean']}).",
        "",
        "| split | " + " | ".join(KINDS) + " | total |",
        "|---|" + "---|" * (len(KINDS) + 1),
    ]
    for split, counts in s["questions"].items():
        lines.append(f"| {split} | " + " | ".join(str(counts[k]) for k in KINDS) + f" | {counts['total']} |")
    lines += [
        "",
        "BM25 queried with the question as written (dev + test): share with the first / last / every supporting "
        "passage in the top 5. Multi-hop questions rarely reach their last passage in one search.",
        "",
        "| kind | questions | first hop @5 | last hop @5 | all hops @5 |",
        "|---|---|---|---|---|",
    ]
    for kind, r in recall.items():
        cells = [str(r["questions"])] + [f"{r[c]:.3f}" for c in ("first_hop_at_5", "last_hop_at_5", "all_hops_at_5")]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    write_portable(RESULTS / "synth.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
