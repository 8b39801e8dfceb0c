"""Issue 6, acceptance 3: ``searchrl eval`` on 2WikiMultiHopQA dev questions with the bundled SmolLM2-135M-Instruct.

Direct answering vs naive RAG (BM25 over 2wiki-mini/corpus.jsonl, k = 3) vs the Search-R1-protocol agent, greedy,
through the real command line. Writes ``benchmarks/results/eval_2wiki.{json,md}`` with the summary table, the
runtimes, the exact command and a few predictions per method.

Needs the project's shared data (``$SEARCHRL_SHARED_DATA``, default ``../shared/data``); without it the script says
so and exits without writing results.

    SEARCHRL_CACHE=/tmp/srlcache python benchmarks/bench_eval_2wiki.py --limit 100

Torch runs with one thread by default (``--threads``): on a 2-core machine shared with other jobs, two OpenMP
threads spin against each other and generation was measured about 15x slower than with one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NAME = "eval_2wiki"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=100, help="first N dev questions")
    ap.add_argument("--methods", default="direct,naive_rag,agent")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64, help="direct / naive RAG answer budget")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench_eval_2wiki"), help="evaluation output directory")
    ap.add_argument("--timeout-h", type=float, default=8.0, help="give up after this many hours")
    args = ap.parse_args()

    shared = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data"))
    data_dir = shared / "2wiki-mini"
    dev, corpus = data_dir / "dev.jsonl", data_dir / "corpus.jsonl"
    if not (dev.is_file() and corpus.is_file()):
        print(f"skipped: {data_dir} not found (set SEARCHRL_SHARED_DATA to the shared data folder)")
        return 0

    from searchrl.models import cache_dir
    from searchrl.retrieval.index import build_index

    index = cache_dir() / "indexes" / "2wiki-mini-bm25"
    t0 = time.perf_counter()
    if not (index / "manifest.json").exists():
        build_index(corpus, "bm25", index)
    index_s = time.perf_counter() - t0

    out = Path(args.out)
    cmd = [
        sys.executable, "-m", "searchrl.cli", "eval",
        "--data", str(dev), "--methods", args.methods, "--protocol", "search_r1", "--model", args.model,
        "--index", str(index), "--corpus", str(corpus), "--topk", str(args.topk), "--limit", str(args.limit),
        "--max-new-tokens", str(args.max_new_tokens), "--batch-size", str(args.batch_size), "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print("running:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, timeout=args.timeout_h * 3600)
    wall_s = time.perf_counter() - t0

    summary = json.loads((out / "summary.json").read_text())
    examples: dict[str, list[dict]] = {}
    for method in args.methods.split(","):
        path = out / "predictions" / f"dev__{method}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()[:3]]
        examples[method] = [
            {"question": r["question"], "golds": r["golds"], "prediction": r["prediction"], "raw": r["raw"][:300]}
            for r in rows
        ]
    import torch

    result = {
        "benchmark": NAME,
        "command": " ".join(cmd),
        "env": {"OMP_NUM_THREADS": args.threads, "SEARCHRL_CACHE": os.environ.get("SEARCHRL_CACHE")},
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },  # fmt: skip
        "questions": args.limit,
        "index_build_s": round(index_s, 1),
        "eval_wall_s": round(wall_s, 1),
        "eval_runtime_s": summary["runtime_s"],
        "metrics": summary["metrics"],
        "rows": summary["rows"],
        "examples": examples,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{NAME}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    table = (out / "summary.md").read_text().split("\n", 2)[2].strip()  # drop the heading
    lines = [
        "# Evaluation on 2WikiMultiHopQA (2wiki-mini dev)",
        "",
        f"{args.limit} dev questions, policy `{args.model}` (greedy), BM25 top-{args.topk} over "
        f"2wiki-mini/corpus.jsonl (5,009 passages). Direct and naive RAG answer in at most {args.max_new_tokens} "
        "tokens; the agent uses the Search-R1 protocol with the engine defaults (4 turns, 4 searches, 128 tokens "
        "a turn).",
        "",
        table,
        "",
        f"Runtime: {wall_s / 60:.1f} min for the whole `searchrl eval` run (model loading included; evaluation loop "
        f"{summary['runtime_s'] / 60:.1f} min), {os.cpu_count()} CPU cores shared with other jobs, torch threads = "
        f"{args.threads}; BM25 index build {index_s:.1f} s (0 when cached).",
        "",
        f"Command: `{' '.join(cmd)}`",
        "",
        "## First predictions per method",
        "",
        "| method | question | gold | prediction |",
        "|---|---|---|---|",
    ]
    for method, exs in examples.items():
        for e in exs:
            cells = [method, e["question"], " / ".join(e["golds"]), str(e["prediction"])]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    (RESULTS / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    print((RESULTS / f"{NAME}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
