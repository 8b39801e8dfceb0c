"""Issue 6, acceptance 3: ``searchrl eval`` on 2WikiMultiHopQA dev questions with the bundled SmolLM2-135M-Instruct.

Direct answering vs naive RAG (BM25 over 2wiki-mini/corpus.jsonl, k = 3) vs the Search-R1-protocol agent, greedy,
through the real command line. Writes ``benchmarks/results/eval_2wiki.{json,md}``: the summary table, runtimes, the
exact command, a breakdown by question type, what the agent did, and a few predictions per method.

Needs the project's shared data (``$SEARCHRL_SHARED_DATA``, default ``../shared/data``); without it the script says
so and exits without writing results.

    SEARCHRL_CACHE=/tmp/srlcache python benchmarks/bench_eval_2wiki.py --limit 100
    python benchmarks/bench_eval_2wiki.py --report-only      # rebuild the results from the last run's outputs

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
from collections import Counter
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NAME = "eval_2wiki"


def run(args: argparse.Namespace, dev: Path, corpus: Path, out: Path) -> dict:
    """Build (or reuse) the BM25 index, run ``searchrl eval``; return the run's metadata (also saved in ``out``)."""
    from searchrl.models import cache_dir
    from searchrl.retrieval.index import build_index

    index = cache_dir() / "indexes" / "2wiki-mini-bm25"
    t0 = time.perf_counter()
    if not (index / "manifest.json").exists():
        build_index(corpus, "bm25", index)
    index_s = time.perf_counter() - t0
    cmd = [
        sys.executable,
        "-m",
        "searchrl.cli",
        "eval",
        "--data",
        str(dev),
        "--methods",
        args.methods,
        "--protocol",
        "search_r1",
        "--model",
        args.model,
        "--index",
        str(index),
        "--corpus",
        str(corpus),
        "--topk",
        str(args.topk),
        "--limit",
        str(args.limit),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--batch-size",
        str(args.batch_size),
        "--out",
        str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print("running:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, timeout=args.timeout_h * 3600)
    meta = {
        "command": " ".join(cmd),
        "threads": args.threads,
        "index_build_s": round(index_s, 1),
        "eval_wall_s": round(time.perf_counter() - t0, 1),
        "settings": {k: getattr(args, k) for k in ("limit", "methods", "model", "topk", "max_new_tokens")},
    }
    (out / "bench_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def breakdown(items: list[dict]) -> dict[str, dict[str, float]]:
    """EM / cover-EM on 2Wiki's comparison questions ("..., A or B?": echoing both options covers the gold) and
    on the rest, so a reader can see how much of cover-EM that artefact explains."""
    out = {}
    for kind, keep in (("comparison", True), ("other", False)):
        sel = [it for it in items if (" or " in it["question"]) == keep]
        out[kind] = {
            "n": len(sel),
            "em": sum(it["metrics"]["em"] for it in sel) / len(sel) if sel else 0.0,
            "cover_em": sum(it["metrics"]["cover_em"] for it in sel) / len(sel) if sel else 0.0,
        }
    return out


def agent_behaviour(items: list[dict]) -> dict[str, object]:
    trajs = [it["trajectory"] for it in items]
    return {
        "stop_reasons": dict(Counter(t["stop_reason"] for t in trajs)),
        "turn_actions": dict(Counter(turn["action"] for t in trajs for turn in t["turns"])),
        "answered_in_tags": sum(it["prediction"] is not None for it in items),
        "searched": sum(it["searches"] > 0 for it in items),
    }


def report(out: Path, meta: dict) -> None:
    import torch

    summary = json.loads((out / "summary.json").read_text())
    methods = summary["methods"]
    items = {
        m: [json.loads(x) for x in (out / "predictions" / f"dev__{m}.jsonl").read_text().splitlines()] for m in methods
    }
    result = {
        "benchmark": NAME,
        **meta,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "eval_runtime_s": summary["runtime_s"],
        "metrics": summary["metrics"],
        "rows": summary["rows"],
        "by_question_type": {m: breakdown(its) for m, its in items.items()},
        "agent": agent_behaviour(items["agent"]) if "agent" in items else None,
        "examples": {
            m: [
                {"question": r["question"], "golds": r["golds"], "prediction": r["prediction"], "raw": r["raw"][:300]}
                for r in its[:3]
            ]
            for m, its in items.items()
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / f"{NAME}.json", json.dumps(result, indent=2, ensure_ascii=False) + "\n")

    s = meta["settings"]
    table = (out / "summary.md").read_text().split("\n", 2)[2].strip()  # drop the heading
    lines = [
        "# Evaluation on 2WikiMultiHopQA (2wiki-mini dev)",
        "",
        f"{s['limit']} dev questions, policy `{s['model']}` (greedy), BM25 top-{s['topk']} over "
        f"2wiki-mini/corpus.jsonl (5,009 passages). Direct and naive RAG answer in at most {s['max_new_tokens']} "
        "tokens; the agent uses the Search-R1 protocol with the engine defaults (4 turns, 4 searches, 128 tokens "
        "a turn).",
        "",
        table,
        "",
        f"Runtime: {meta['eval_wall_s'] / 60:.1f} min for the whole `searchrl eval` run (model loading included; "
        f"evaluation loop {summary['runtime_s'] / 60:.1f} min), {os.cpu_count()} CPU cores shared with other jobs, "
        f"torch threads = {meta['threads']}; BM25 index build {meta['index_build_s']} s (0 when cached). Latency is "
        "the batch wall time / batch size (16 questions a batch).",
        "",
        "## By question type",
        "",
        '2Wiki\'s comparison questions ("Which film came out earlier, A or B?") name both candidate answers, so a '
        "prediction that repeats the question covers the gold. Scores in %:",
        "",
        "| method | comparison n | comparison EM | comparison cover-EM | other n | other EM | other cover-EM |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m, b in result["by_question_type"].items():
        c, o = b["comparison"], b["other"]
        lines.append(
            f"| {m} | {c['n']} | {100 * c['em']:.1f} | {100 * c['cover_em']:.1f} | {o['n']} | "
            f"{100 * o['em']:.1f} | {100 * o['cover_em']:.1f} |"
        )
    if result["agent"]:
        a = result["agent"]
        lines += [
            "",
            "## What the agent did",
            "",
            f"Answered inside `<answer>` tags: {a['answered_in_tags']} of {s['limit']}; issued a search: "
            f"{a['searched']}; stop reasons {a['stop_reasons']}; turn actions {a['turn_actions']}. The bundled model "
            "is not trained on the protocol: it replies in plain prose, which the Search-R1 parser does not accept "
            "as an answer, so the agent scores 0 (the RL/SFT stages exist to fix exactly this).",
        ]
    lines += [
        "",
        f"Command: `{meta['command']}`",
        "",
        "## First predictions per method",
        "",
        "| method | question | gold | prediction |",
        "|---|---|---|---|",
    ]
    for m, exs in result["examples"].items():
        for e in exs:
            cells = [m, e["question"], " / ".join(e["golds"]), str(e["prediction"])]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    write_portable(RESULTS / f"{NAME}.md", "\n".join(lines) + "\n")
    print((RESULTS / f"{NAME}.md").read_text())


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
    ap.add_argument("--report-only", action="store_true", help="rebuild the results from --out without running")
    args = ap.parse_args()

    out = Path(args.out)
    if args.report_only:
        meta_path = out / "bench_meta.json"
        if not meta_path.exists():
            print(f"error: {meta_path} not found; run the benchmark without --report-only first")
            return 2
        report(out, json.loads(meta_path.read_text()))
        return 0
    shared = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data"))
    dev, corpus = shared / "2wiki-mini" / "dev.jsonl", shared / "2wiki-mini" / "corpus.jsonl"
    if not (dev.is_file() and corpus.is_file()):
        print(f"skipped: {shared / '2wiki-mini'} not found (set SEARCHRL_SHARED_DATA to the shared data folder)")
        return 0
    report(out, run(args, dev, corpus, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
