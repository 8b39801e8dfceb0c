"""Benchmark: faiss factory strings for the compressed dense index, side by side on the same vectors.

Vectors and queries as in ``retrieval_scale.py`` (MiniLM 2wiki-mini embeddings -> Gaussian mixture -> 768-d draws;
real dev questions as queries), N of them (default 300,000). Each factory is built with ``build_compressed`` (the
code ``searchrl index build --faiss`` runs) and searched through ``RerankedIndex`` one query per call, over a grid
of nprobe x candidates: recall@3 / @10 against exact search over the same fp16 vectors, and ms per query.
faiss runs with one OpenMP thread (as the scale benchmark's children do).

Also timed: the re-ranking gather of 100 / 300 / 1,000 random rows from the (page-cached) fp16 vector file, by
positional reads (``RowReader``, what the index uses) against a memory map unmapped after each gather
(``MADV_DONTNEED``, which keeps the server's RSS as small).

Results: ``benchmarks/results/retrieval_factories.{json,md}``; ``--gather-only FILE...`` times only the gather,
on the given ``.npy`` vector files (e.g. a large index's ``dense/vectors.f16.npy``), into
``benchmarks/results/retrieval_gather.{json,md}``.

Usage: python benchmarks/retrieval_factories.py [--passages 300000] [--factory "IVF1024,PQ96" --factory ...]
       python benchmarks/retrieval_factories.py --gather-only DIR/dense/vectors.f16.npy [...]
       python benchmarks/retrieval_factories.py --single-query DIR/dense   (a built fast-scan index: one-query
       scan time for the top 300 and 1,000, faiss' default implementation against the probe-parallel ones (14,
       15), on 1 and 2 threads, into ``benchmarks/results/retrieval_single_query.{json,md}``)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_query_encoder import write_results  # noqa: E402
from retrieval_scale import exact_top, fit_mixture, generate, lift, real_embeddings, recall  # noqa: E402

from searchrl.retrieval.compressed import RerankedIndex, RowReader, build_compressed  # noqa: E402

DEFAULT_FACTORIES = ["IVF1024,PQ96", "IVF1024,PQ192x4fs", "IVF1024,PQ384x4fs"]


def measure(factory: str, n: int, work: Path, queries: np.ndarray, exact: np.ndarray, args) -> dict:
    import faiss

    vectors_path = work / f"vectors-{n}.f16.npy"
    out = work / f"{factory.replace(',', '_')}-{n}.faiss"
    t0 = time.perf_counter()
    info = build_compressed(vectors_path, out, factory)
    row = {"factory": factory, "build_s": round(time.perf_counter() - t0, 1), **info, "grid": []}
    index = faiss.read_index(str(out))
    vectors = RowReader(vectors_path)  # re-ranking reads rows as the served index does
    for nprobe in args.nprobe:
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
        for candidates in args.candidates:
            reranked = RerankedIndex(index, vectors, candidates=candidates)
            t0 = time.perf_counter()
            found = np.concatenate([reranked.search(q[None], 10)[1] for q in queries])
            ms = (time.perf_counter() - t0) * 1000 / len(queries)
            cell = {"nprobe": nprobe, "candidates": candidates, "ms_per_query": round(ms, 2)}
            for k in (3, 10):
                cell[f"recall_at_{k}"] = round(recall(found, exact, k), 4)
            row["grid"].append(cell)
            print(json.dumps({"factory": factory} | cell), flush=True)
    out.unlink()
    return row


def load_text(load: tuple[float, ...]) -> str:
    return f"{os.cpu_count()} CPU cores (load average at the end {', '.join(f'{x:.1f}' for x in load)})"


def gather(path: Path, sizes=(100, 300, 1000), repeats: int = 200) -> list[dict]:
    """ms per gather of ``size`` sorted random rows: ``RowReader.take`` vs memory map + ``MADV_DONTNEED``."""
    import mmap

    with path.open("rb") as f:  # warm the page cache: both ways then read cached pages
        while f.read(1 << 24):
            pass
    reader, mapped = RowReader(path), np.load(path, mmap_mode="r")
    rng, rows_out = np.random.default_rng(0), []
    for size in sizes:
        times = {"pread": 0.0, "mmap_dontneed": 0.0}
        for _ in range(repeats):
            for how in times:
                rows = np.unique(rng.choice(reader.shape[0], size, replace=False))
                t0 = time.perf_counter()
                if how == "pread":
                    reader.take(rows)
                else:
                    np.asarray(mapped[rows], dtype=np.float32)
                    mapped._mmap.madvise(mmap.MADV_DONTNEED)
                times[how] += time.perf_counter() - t0
        rows_out.append({"rows": size} | {f"{k}_ms": round(v * 1000 / repeats, 3) for k, v in times.items()})
        print(json.dumps(rows_out[-1]), flush=True)
    return rows_out


def gather_only(paths: list[Path]) -> None:
    files = [{"file_gb": round(p.stat().st_size / 2**30, 2), "rows": gather(p)} for p in paths]
    load = os.getloadavg()
    result = {"benchmark": "retrieval_gather", "date": time.strftime("%Y-%m-%d", time.gmtime()), "files": files}
    result["machine"] = {"cpus": os.cpu_count(), "load_average_at_end": load}
    lines = [
        f"# Re-ranking gather: positional reads against a memory map ({result['date']})",
        "",
        "ms per gather of sorted, distinct random rows of an fp16 768-d vector file already in the page cache: "
        "`RowReader.take` (what the index uses) against a memory map unmapped after each gather "
        f"(`MADV_DONTNEED`). {load_text(load)}.",
        "",
        "| file GB | rows | positional reads | memory map + `MADV_DONTNEED` |",
        "|---|---|---|---|",
    ]
    for f in files:
        lines += [f"| {f['file_gb']} | {g['rows']} | {g['pread_ms']} | {g['mmap_dontneed_ms']} |" for g in f["rows"]]
    write_results("retrieval_gather", result, lines)


def single_query(directory: Path, queries: np.ndarray, nprobes=(128, 256, 512), ks=(300, 1000)) -> None:
    import faiss

    index = faiss.read_index(str(directory / "index.faiss"))
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    rows = []
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        for nprobe, k in itertools.product(nprobes, ks):
            ivf.nprobe = nprobe
            for implem in (0, 14, 15):
                ivf.implem = implem
                t0 = time.perf_counter()
                for q in queries:
                    ivf.search(q[None], k)
                ms = round((time.perf_counter() - t0) * 1000 / len(queries), 2)
                rows.append({"threads": threads, "nprobe": nprobe, "implem": implem, "k": k, "ms_per_query": ms})
                print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    result = {"benchmark": "retrieval_single_query", "date": time.strftime("%Y-%m-%d", time.gmtime())}
    result |= {"index_ntotal": int(index.ntotal), "queries": len(queries), "rows": rows, "load_average_at_end": load}
    lines = [
        f"# One query at a time through a fast-scan IVF index ({result['date']})",
        "",
        f"{int(index.ntotal):,} vectors (the index of `retrieval_scale.md`), {len(queries)} real queries searched one "
        "per call for the top k candidates, compressed scan only (no re-ranking). faiss' default fast-scan "
        "implementation spreads queries over threads (with a reservoir of results for k > 20); implementations 14 "
        "(results in a heap) and 15 (in a reservoir) spread one query's probed lists. "
        f"{load_text(load)}.",
        "",
        "| faiss threads | nprobe | k | implementation | ms/query |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['threads']} | {r['nprobe']} | {r['k']} | {r['implem'] or 'default'} | {r['ms_per_query']} |"
        for r in rows
    ]
    write_results("retrieval_single_query", result, lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=300_000)
    ap.add_argument("--factory", action="append", help=f"repeatable; default {DEFAULT_FACTORIES}")
    ap.add_argument("--nprobe", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--candidates", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/searchrl-scale"))
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--single-query", type=Path, metavar="DIR", help="a fast-scan index's dense/ directory")
    ap.add_argument("--gather-only", type=Path, nargs="+", metavar="FILE", help="time the gather on these files only")
    args = ap.parse_args()
    if args.gather_only:
        return gather_only(args.gather_only)
    if args.single_query:
        _, qvecs, _ = real_embeddings(args.work)
        return single_query(args.single_query, lift(qvecs[: args.queries]))
    import faiss

    faiss.omp_set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    n = args.passages
    passages, qvecs, _ = real_embeddings(args.work)
    queries = lift(qvecs[: args.queries])
    vectors_path = args.work / f"vectors-{n}.f16.npy"
    if not vectors_path.exists():
        generate(fit_mixture(passages, 32), n, vectors_path)
    exact, _ = exact_top(vectors_path, queries)
    gathers = gather(vectors_path)
    rows = [measure(f, n, args.work, queries, exact, args) for f in args.factory or DEFAULT_FACTORIES]
    result = {
        "benchmark": "retrieval_factories",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "passages": n,
        "queries": len(queries),
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(), "faiss_threads": 1},
        "factories": rows,
        "gather": gathers,
    }
    lines = [
        f"# Compressed dense index: factory strings side by side ({result['date']})",
        "",
        f"{n:,} vectors of 768-d drawn as in `retrieval_scale.md`; {len(queries)} real queries; one query per call "
        f"through `RerankedIndex` (compressed candidates, exact fp16 re-ranking), one faiss thread. "
        f"{load_text(result['machine']['load_average_at_end'])}.",
        "",
        "| factory | code bytes | build s | nprobe | candidates | ms/query | recall@3 | recall@10 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for c in r["grid"]:
            lines.append(
                f"| `{r['factory']}` | {r['code_bytes']} | {r['build_s']} | {c['nprobe']} | {c['candidates']} | "
                f"{c['ms_per_query']} | {c['recall_at_3']} | {c['recall_at_10']} |"
            )
    lines += [
        "",
        "Re-ranking gather, ms per call (rows sorted, distinct, random; vector file in the page cache):",
        "",
        "| rows | positional reads (`RowReader`) | memory map + `MADV_DONTNEED` |",
        "|---|---|---|",
    ]
    lines += [f"| {g['rows']} | {g['pread_ms']} | {g['mmap_dontneed_ms']} |" for g in gathers]
    write_results("retrieval_factories", result, lines)


if __name__ == "__main__":
    main()
