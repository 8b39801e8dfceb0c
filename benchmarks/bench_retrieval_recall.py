"""Benchmark (acceptance 2, real-data half): answer-string recall@{1,3,5,10} on 2wiki-mini for BM25, dense, hybrid.

Data: ``../shared/data/2wiki-mini`` (5,009 KILT Wikipedia passages; 500 2WikiMultiHopQA dev questions). A question
counts as recalled at k when a gold answer occurs, as whole words after SQuAD normalisation
(``searchrl.rewards.metrics.cover_em``), in one of the top-k passages' title + text. The "ceiling" row is the share
of questions whose answer occurs anywhere in the corpus.

One hybrid index (BM25 + dense MiniLM, ``searchrl index build --kind hybrid``) provides all three retrievers; it is
built once under ``$SEARCHRL_BENCH_DIR`` (default ``/tmp/searchrl-bench``) and reused while the corpus fingerprint
matches. Results: ``benchmarks/results/retrieval_recall.{json,md}``.

2WikiMultiHopQA questions are multi-hop: a single query for the whole question often retrieves the first hop's
passage but not the answer's, which is exactly why the agents in this project search several times.

Usage: python benchmarks/bench_retrieval_recall.py [--data ../shared/data/2wiki-mini] [--encoder minilm-l6-v2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH_DIR = Path(os.environ.get("SEARCHRL_BENCH_DIR", "/tmp/searchrl-bench"))
DEFAULT_DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data")) / "2wiki-mini"
KS = (1, 3, 5, 10)


def main() -> None:
    from searchrl.data.corpus import file_fingerprint
    from searchrl.retrieval.index import build_index, load_index
    from searchrl.rewards.metrics import cover_em

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--encoder", default="minilm-l6-v2")
    args = ap.parse_args()
    corpus, dev = args.data / "corpus.jsonl", args.data / "dev.jsonl"
    if not corpus.exists() or not dev.exists():
        sys.exit(f"2wiki-mini not found at {args.data}; pass --data DIR (it needs corpus.jsonl and dev.jsonl)")

    questions = [json.loads(line) for line in dev.open() if line.strip()]
    index = BENCH_DIR / f"2wiki-mini-hybrid-{args.encoder.replace('/', '_')}"
    build_s = None
    manifest_path = index / "manifest.json"
    stale = not manifest_path.exists()
    stale = stale or json.loads(manifest_path.read_text())["corpus"]["fingerprint"] != file_fingerprint(corpus)
    if stale:
        print(f"building hybrid index of {corpus} with {args.encoder} -> {index}", flush=True)
        t0 = time.perf_counter()
        build_index(corpus, "hybrid", index, encoder=args.encoder, overwrite=True)
        build_s = round(time.perf_counter() - t0, 1)
    hybrid = load_index(index, corpus)
    manifest = hybrid.manifest
    texts = [p.contents for p in hybrid.store]
    ceiling = sum(any(cover_em(t, q["golden_answers"]) for t in texts) for q in questions) / len(questions)

    rows = []
    for name, retriever in [("bm25", hybrid.sparse), ("dense", hybrid.dense), ("hybrid", hybrid)]:
        t0 = time.perf_counter()
        results = retriever.search([q["question"] for q in questions], max(KS))
        search_s = time.perf_counter() - t0
        recall = {}
        for k in KS:
            hits = [
                any(cover_em(h.contents, q["golden_answers"]) for h in r[:k])
                for q, r in zip(questions, results, strict=True)
            ]
            recall[f"recall@{k}"] = round(sum(hits) / len(hits), 4)
        rows.append({"retriever": name, **recall, "search_s": round(search_s, 2)})
        print(json.dumps(rows[-1]), flush=True)

    result = {
        "benchmark": "retrieval_recall",
        "data": str(args.data),
        "questions": len(questions),
        "passages": len(texts),
        "encoder": args.encoder,
        "bm25_options": manifest["options"]["bm25"],
        "dense_options": manifest["options"]["dense"],
        "hybrid": f"reciprocal-rank fusion, rrf_k={hybrid.rrf_k:g}, {hybrid.candidates} candidates per side",
        "metric": "a gold answer occurs as whole words (SQuAD-normalised) in one of the top-k passages",
        "answer_in_corpus_ceiling": round(ceiling, 4),
        "index_build_s": build_s if build_s is not None else manifest.get("build_seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "retrieval_recall.json", json.dumps(result, indent=2) + "\n")
    lines = [
        "# Answer-string recall on 2wiki-mini",
        "",
        f"{len(questions)} 2WikiMultiHopQA dev questions, {len(texts):,} passages. Recall@k = share of questions "
        "with a gold answer (whole words, SQuAD-normalised) in the top-k passages. "
        f"Ceiling (answer anywhere in the corpus): **{ceiling:.3f}**.",
        "",
        "| retriever | " + " | ".join(f"R@{k}" for k in KS) + f" | search time ({len(questions)} q) |",
        "|---|" + "---|" * (len(KS) + 1),
    ]
    for r in rows:
        cells = " | ".join(f"{r[f'recall@{k}']:.3f}" for k in KS)
        lines.append(f"| {r['retriever']} | {cells} | {r['search_s']} s |")
    bm25, dense = manifest["options"]["bm25"], manifest["options"]["dense"]
    lines += [
        "",
        f"BM25: k1={bm25['k1']}, b={bm25['b']}, stemmer {bm25.get('stemmer')}, stopwords {bm25.get('stopwords')}. "
        f"Dense: {dense.get('encoder', args.encoder)}, faiss {dense.get('faiss')}. "
        f"Hybrid: RRF (k={hybrid.rrf_k:g}).",
        "Questions are multi-hop, so one search with the full question often finds the bridge entity's passage "
        "rather than the answer's; the agents search repeatedly for this reason.",
    ]
    write_portable(RESULTS / "retrieval_recall.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
