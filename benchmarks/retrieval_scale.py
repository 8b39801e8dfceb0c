"""Benchmark: compressed dense retrieval at 2M / 5M passages x 768-d on one machine, extrapolated to 21M.

Vectors. Real 768-d Wikipedia embeddings (21M x 768) are not available offline, so passage vectors are drawn to
match real embedding statistics:

1. MiniLM (all-MiniLM-L6-v2, 384-d, L2-normalised) embeds the 2wiki-mini corpus (5,009 Wikipedia passages) and
   its 500 dev questions;
2. a Gaussian mixture (scikit-learn, ``--components`` components, tied full covariance, seed 0) is fitted to the
   passage embeddings;
3. a 768-d passage vector is two independent 384-d draws from the *same* mixture component, concatenated and
   L2-normalised: the mixture's weights, means and covariance are real, and the vectors are full-rank in 768-d;
4. query vectors are the real MiniLM question embeddings, lifted the same way (``[q, q]``, normalised), so
   recall is measured with real queries against the synthetic passages.

Vectors are generated in chunks into an fp16 file under ``--work`` (never N x 768 fp32 in RAM). Exact top-10 for
every query is computed by brute force over the same fp16 vectors (the "exact Flat" reference), chunk by chunk.

Index: ``searchrl`` ``build_index(kind="dense", faiss=FACTORY)`` from the vector file (streamed), with a synthetic
passage corpus of N one-line passages. Serving: a child process loads the index like ``searchrl serve`` does
(memory-mapped inverted lists, fp16 vectors and passage store) with the real MiniLM ONNX query encoder followed by
the ``[q, q]`` lift, and serves it with the service's app over 127.0.0.1. Measured: build time and peak RSS, time
from process start to first answer, RSS after the loads (VmRSS) and its peak (VmHWM), 1-client latency and q/s and
8-client q/s with the query embeddings cached (every question asked once before), recall@3 and @10 vs exact.

Results: ``benchmarks/results/retrieval_scale.{json,md}`` (runs of earlier invocations with other N are kept).

Usage: python benchmarks/retrieval_scale.py --passages 2000000 [--passages 5000000] [--work /tmp/searchrl-scale]
       python benchmarks/retrieval_scale.py --passages 5000000 --reuse-index --nprobe 384 --candidates 100 \
           --refine-factor 10 --omp-threads 2   (search settings of an index built before; faiss threads serving)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"
DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data")) / "2wiki-mini"
CHUNK = 65_536
K = 10


# ------------------------------------------------------------------------------------------------ vectors
def real_embeddings(work: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """MiniLM embeddings of 2wiki-mini passages and dev questions (cached in ``work``), and the questions."""
    cache = work / "minilm-2wiki.npz"
    questions = [json.loads(line)["question"] for line in (DATA / "dev.jsonl").open() if line.strip()]
    if not cache.exists():
        from searchrl.data.corpus import iter_passages
        from searchrl.retrieval.dense import DenseOptions, Encoder

        enc = Encoder(DenseOptions.for_encoder("minilm-l6-v2"))
        passages = enc.encode([p.contents for p in iter_passages(DATA / "corpus.jsonl")], is_query=False)
        np.savez(cache, passages=passages, questions=enc.encode(questions, is_query=True))
    data = np.load(cache)
    return data["passages"], data["questions"], questions


def lift(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """384-d halves -> normalised 768-d vectors ``[x, y]`` (``y = x`` for queries)."""
    v = np.concatenate([x, x if y is None else y], axis=1).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fit_mixture(passages: np.ndarray, components: int) -> dict[str, np.ndarray]:
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(components, covariance_type="tied", random_state=0, max_iter=200).fit(passages)
    chol = np.linalg.cholesky(gm.covariances_).astype(np.float32)
    return {"weights": gm.weights_, "means": gm.means_.astype(np.float32), "chol": chol}


def generate(mix: dict[str, np.ndarray], n: int, path: Path, seed: int = 0) -> float:
    """Write n lifted mixture draws to ``path`` (fp16 .npy), chunk by chunk; returns seconds."""
    from searchrl.retrieval.compressed import VectorWriter

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    d = mix["means"].shape[1]
    with VectorWriter(path, n, 2 * d) as out:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            comp = rng.choice(len(mix["weights"]), m, p=mix["weights"])
            noise = (rng.standard_normal((m, d), dtype=np.float32) @ mix["chol"].T for _ in range(2))
            halves = [mix["means"][comp] + z for z in noise]
            out.write(lift(*halves))
    return time.perf_counter() - t0


def exact_top(path: Path, queries: np.ndarray, k: int = K) -> tuple[np.ndarray, float]:
    """Brute-force top-k rows per query over the fp16 vector file; returns (Q, k) rows and seconds."""
    from searchrl.retrieval.compressed import RowFile

    t0 = time.perf_counter()
    rows = RowFile.npy(path)
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_r = np.zeros((len(queries), k), dtype=np.int64)
    for i, chunk in enumerate(rows.chunks(CHUNK)):
        s = queries @ chunk.T  # (Q, C)
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, part, 1)], axis=1)
        cand_r = np.concatenate([best_r, part + i * CHUNK], axis=1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_r = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_r, order, 1)
    return best_r, round(time.perf_counter() - t0, 1)


def write_corpus(n: int, path: Path) -> None:
    with path.open("w") as f:
        for start in range(0, n, CHUNK):
            f.write(
                "".join(
                    f'{{"id": "s{i}", "contents": "Synthetic {i}\\npassage {i}"}}\n'
                    for i in range(start, min(n, start + CHUNK))
                )
            )


def recall(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact, strict=True)]))


# ------------------------------------------------------------------------------------------------ children
def child_build(args: argparse.Namespace) -> None:
    from searchrl.retrieval.compressed import RowFile
    from searchrl.retrieval.index import build_index

    t0 = time.perf_counter()
    build_index(
        args.corpus,
        "dense",
        args.out,
        encoder="minilm-l6-v2",
        faiss=args.factory,
        nprobe=args.nprobe,
        candidates=args.candidates,
        vectors=RowFile.npy(args.vectors),
        query_encoder="sentence-transformers",
        vectors_source="synthetic (benchmarks/retrieval_scale.py)",
        overwrite=True,
    )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    built = {"build_s": round(time.perf_counter() - t0, 1), "build_peak_rss_mb": round(peak_mb)}
    built |= {"factory": args.factory, "build_omp_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None}
    (args.out / "build.json").write_text(json.dumps(built | {"date": time.strftime("%Y-%m-%d", time.gmtime())}))
    print(json.dumps(built))


class LiftedEncoder:
    """The real MiniLM ONNX query encoder followed by the benchmark's ``[q, q]`` lift to 768-d."""

    def __init__(self, directory: Path) -> None:
        from searchrl.retrieval.dense import DenseOptions
        from searchrl.retrieval.onnx_encoder import OnnxEncoder

        self.options = DenseOptions.for_encoder("minilm-l6-v2", query_encoder="onnx")
        self.inner = OnnxEncoder(directory, self.options)
        self.dimension = 768

    def encode(self, texts, *, is_query: bool, batch_size: int = 64) -> np.ndarray:
        return lift(self.inner.encode(texts, is_query=is_query, batch_size=batch_size))


def child_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from searchrl.data.corpus import PassageStore
    from searchrl.retrieval.dense import DenseOptions, DenseRetriever, read_faiss_index
    from searchrl.retrieval.index import read_manifest
    from searchrl.retrieval.server import create_app

    manifest = read_manifest(args.out)
    options = DenseOptions(**manifest["options"]["dense"])
    index = read_faiss_index(args.out / "dense" / "index.faiss", options)
    retriever = DenseRetriever(index, PassageStore(args.out / "passages"), LiftedEncoder(args.encoder_dir), manifest)
    uvicorn.run(create_app(retriever), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


def rss_mb(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}


def child_env(args: argparse.Namespace) -> dict[str, str]:
    """Children (build, serve, convert) run faiss with ``--omp-threads`` OpenMP threads (default 1): on a shared
    2-core machine, faiss' many short parallel regions spin-wait for descheduled threads (about 4x the CPU
    time of one thread for the same k-means here)."""
    return os.environ | {"SEARCHRL_NO_PROGRESS": "1", "OMP_NUM_THREADS": str(args.omp_threads)}


def measure_serving(out: Path, encoder_dir: Path, questions: list[str], args: argparse.Namespace) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/retrieve"
    cmd = [
        sys.executable,
        __file__,
        "_serve",
        "--out",
        str(out),
        "--encoder-dir",
        str(encoder_dir),
        "--port",
        str(port),
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=child_env(args))
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode()[-2000:] if proc.stderr else "server exited")
            try:
                first = httpx.post(url, json={"queries": [questions[0]], "topk": 3}, timeout=60)
                first.raise_for_status()
                break
            except httpx.TransportError:
                time.sleep(0.05)
        first_answer_s = time.perf_counter() - t0
        with httpx.Client(timeout=60) as http:
            for start in range(0, len(questions), 32):  # fill the query-embedding cache
                http.post(url, json={"queries": questions[start : start + 32], "topk": 3}).raise_for_status()
            lat = []
            t1 = time.perf_counter()
            for i in range(1000):
                t = time.perf_counter()
                http.post(url, json={"queries": [questions[i % len(questions)]], "topk": 3}).raise_for_status()
                lat.append(time.perf_counter() - t)
            qps_1 = 1000 / (time.perf_counter() - t1)
        errors: list[str] = []

        def client(c: int) -> None:
            with httpx.Client(timeout=60) as http:
                for i in range(250):
                    r = http.post(url, json={"queries": [questions[(c * 61 + i) % len(questions)]], "topk": 3})
                    if r.status_code != 200:
                        errors.append(str(r.status_code))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        t2 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        qps_8 = 8 * 250 / (time.perf_counter() - t2)
        mem = rss_mb(proc.pid)
        stats = httpx.get(url.replace("/retrieve", "/stats"), timeout=10).json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lat_ms = np.array(lat) * 1000
    return {
        "first_answer_s": round(first_answer_s, 2),
        "p50_1_ms": round(float(np.percentile(lat_ms, 50)), 2),
        "p99_1_ms": round(float(np.percentile(lat_ms, 99)), 2),
        "qps_1": round(qps_1, 1),
        "qps_8": round(qps_8, 1),
        "errors_8": len(errors),
        "serve_rss_mb": mem["VmRSS"],
        "serve_peak_rss_mb": mem["VmHWM"],
        "serve_rss_detail_mb": mem,
        "query_cache": stats.get("query_cache"),
    }


# ------------------------------------------------------------------------------------------------- convert
CONVERT = """import json, resource, sys
from searchrl.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exit:
    if exit.code:
        raise
print(json.dumps({"convert_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def write_flat_file(vectors: Path, path: Path, m: int) -> None:
    """A faiss IndexFlatIP file of the first m fp16 vectors (as float32), written by faiss itself."""
    import faiss

    from searchrl.retrieval.compressed import RowFile

    rows = RowFile.npy(vectors)
    flat = faiss.IndexFlatIP(rows.shape[1])
    step = 65_536
    for start in range(0, m, step):
        flat.add(rows.window(start, min(start + step, m)))
    faiss.write_index(flat, str(path))
    del flat


def measure_convert(n: int, args: argparse.Namespace, queries: np.ndarray, exact: np.ndarray) -> dict:
    """``searchrl index convert`` of a Flat file of the first ``--convert-passages`` (default: all n) vectors of
    this run: peak RSS of the convert process vs the Flat file's size, recall vs the Flat file's own answers."""
    from searchrl.retrieval.dense import DenseOptions, read_faiss_index
    from searchrl.retrieval.index import read_manifest

    work = args.work
    m = min(n, args.convert_passages or n)
    flat, out, corpus = work / f"flat-{m}.index", work / f"converted-{m}", work / f"corpus-{m}.jsonl"
    if not flat.exists():
        t0 = time.perf_counter()
        write_flat_file(work / f"vectors-{n}.f16.npy", flat, m)
        print(f"[{m:,}] wrote the Flat file in {time.perf_counter() - t0:.1f} s", flush=True)
    if not corpus.exists():
        write_corpus(m, corpus)
    factory = args.convert_factory or args.factory or factory_for(m)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-c",
        CONVERT,
        "index",
        "convert",
        "--flat",
        str(flat),
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--faiss",
        factory,
        "--nprobe",
        str(args.nprobe),
        "--candidates",
        str(args.candidates),
        "--force",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env(args))
    row = json.loads(done.stdout.strip().splitlines()[-1]) | {"convert_s": round(time.perf_counter() - t0, 1)}
    row |= {"convert_passages": m, "convert_factory": factory, "nprobe": args.nprobe, "candidates": args.candidates}
    for line in done.stderr.splitlines():  # /usr/bin/time -v: "Maximum resident set size (kbytes): N"
        if "Maximum resident set size" in line:
            row["convert_peak_rss_mb_time_v"] = round(int(line.rsplit(":", 1)[1]) / 1024)
    row["flat_file_mb"] = round(flat.stat().st_size / 2**20)
    row["convert_peak_rss_fraction_of_flat"] = round(row["convert_peak_rss_mb"] / row["flat_file_mb"], 4)
    # The Flat file holds fp32 vectors; its own exact answers are the reference for the converted index.
    import faiss

    reference = faiss.read_index(str(flat), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
    truth = reference.search(queries, K)[1]
    del reference
    options = DenseOptions(**read_manifest(out)["options"]["dense"])
    found = read_faiss_index(out / "dense" / "index.faiss", options).search(queries, K)[1]
    row["convert_recall_at_3_vs_flat"] = round(recall(found, truth, 3), 4)
    row["convert_recall_at_10_vs_flat"] = round(recall(found, truth, 10), 4)
    if m == n:
        row["flat_vs_fp16_exact_top10_agreement"] = round(recall(truth, exact, 10), 4)
    print(f"[{n:,}] convert: {json.dumps(row)}", flush=True)
    return row


# ---------------------------------------------------------------------------------------------------- main
def matmul_gflops() -> float:
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    return round(5 * 2 * 2048**3 / (time.perf_counter() - t0) / 1e9, 1)


def factory_for(n: int) -> str:
    """``IVF{nlist},PQ192x4fs`` with nlist a power of two near 0.7 sqrt(N) (1,024 at 2M, 2,048 at 5M): fewer lists
    than the usual 4 sqrt(N), and no OPQ rotation, so that training fits a busy 2-core budget (OPQ64 on 768-d took
    minutes for 20,000 training vectors here); ``nprobe`` and exact re-ranking make up for it.

    Codes are 4-bit fast-scan PQ (192 sub-quantisers, 96 bytes a vector, the size of ``PQ96``'s 8-bit codes): at
    300,000 of these vectors it reached the recall of ``IVF1024,PQ96`` (within 0.006) at each nprobe / candidates
    setting tried, trained and added in half the time and searched 0.9-2.4x as fast (SIMD look-ups in 16-entry
    tables instead of 256-entry ones; even where re-ranking 1,000 candidates dominates);
    ``benchmarks/results/retrieval_factories.md``. Fast-scan inverted lists are read into RAM (faiss does not
    memory-map them).

    Then a refining stage, ``Refine(PQ192)``: 8-bit PQ codes of the whole vector (192 bytes) held in RAM re-score
    the ``candidates x refine_factor`` passages the scan returns, and only the best ``candidates`` are read from the
    vector file. At 5M, nprobe 384 / 100 candidates (x10 scanned) found 98.3% of the exact top 3 at a 13.6 ms p50
    over HTTP, against 37.5 ms for 98.7% re-ranking 1,000 candidates from disk without it; the build took 2.6x as
    long (the 8-bit codebooks' k-means) and serving needs 0.9 GB more RAM (``retrieval_scale.md``).
    """
    nlist = 1 << round(np.log2(max(1.0, 0.7 * np.sqrt(n))))
    return f"IVF{nlist},PQ192x4fs,Refine(PQ192)"


def sweep(
    index, queries: np.ndarray, exact: np.ndarray, nprobes=(16, 32, 64, 128), candidate_counts=(50, 100, 200)
) -> list[dict]:
    """Recall and in-process time per query for a few (nprobe, candidates) settings on the built index."""
    import faiss

    rows = []
    for nprobe in nprobes:
        faiss.ParameterSpace().set_index_parameter(index.index, "nprobe", nprobe)
        for candidates in candidate_counts:
            index.candidates = candidates
            t0 = time.perf_counter()
            found = np.concatenate([index.search(q[None], K)[1] for q in queries])  # one query per call
            ms = (time.perf_counter() - t0) * 1000 / len(queries)
            rows.append(
                {
                    "nprobe": nprobe,
                    "candidates": candidates,
                    "ms_per_query": round(ms, 2),
                    "recall_at_3": round(recall(found, exact, 3), 4),
                    "recall_at_10": round(recall(found, exact, 10), 4),
                }
            )
    return rows


def run(n: int, args: argparse.Namespace, mix, queries: np.ndarray, questions: list[str]) -> dict:
    work = args.work
    vectors, corpus, out = work / f"vectors-{n}.f16.npy", work / f"corpus-{n}.jsonl", work / f"index-{n}"
    row: dict = {"passages": n, "dim": 768}
    if not vectors.exists():
        row["generate_s"] = round(generate(mix(), n, vectors), 1)
        print(f"[{n:,}] generated vectors in {row['generate_s']} s", flush=True)
    if not corpus.exists():
        write_corpus(n, corpus)
    cached = work / f"exact-{n}-{len(queries)}.npy"  # the exact answers of an earlier invocation, same vectors
    if cached.exists() and cached.stat().st_mtime > vectors.stat().st_mtime:
        exact = np.load(cached)
    else:
        exact, row["exact_search_s"] = exact_top(vectors, queries)
        np.save(cached, exact)
    print(f"[{n:,}] exact top-{K} of {len(queries)} queries in {row.get('exact_search_s', 'cached')} s", flush=True)
    factory = args.factory or factory_for(n)
    if args.reuse_index and (out / "manifest.json").exists():
        return row | reuse(n, out, args) | measure_search(n, out, args, queries, questions, exact)
    cmd = [
        sys.executable,
        __file__,
        "_build",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--vectors",
        str(vectors),
        "--factory",
        factory,
        "--nprobe",
        str(args.nprobe),
        "--candidates",
        str(args.candidates),
    ]
    built = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env(args))
    row |= json.loads(built.stdout.strip().splitlines()[-1])  # build_s, peak RSS, factory, OMP threads
    print(f"[{n:,}] built {factory} in {row['build_s']} s (peak RSS {row['build_peak_rss_mb']} MB)", flush=True)
    return row | measure_search(n, out, args, queries, questions, exact)


def reuse(n: int, out: Path, args: argparse.Namespace) -> dict:
    """``--reuse-index``: the index built by an earlier invocation, its search settings set to --nprobe and
    --candidates in its manifest; build figures are those recorded for that build."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["options"]["dense"] |= {
        "nprobe": args.nprobe,
        "candidates": args.candidates,
        "refine_factor": args.refine_factor,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    path = RESULTS / "retrieval_scale.json"
    earlier = {r["passages"]: r for r in json.loads(path.read_text())["runs"]} if path.exists() else {}
    keep = ("factory", "build_s", "build_peak_rss_mb", "build_omp_threads", "generate_s", "exact_search_s", "date")
    keep += ("convert",)
    built = {k: earlier[n][k] for k in keep if k in earlier.get(n, {})}
    other_build = None
    record = out / "build.json"  # written by the build itself (an index built outside an earlier invocation)
    if record.exists() and json.loads(record.read_text())["factory"] != built.get("factory"):
        built, other_build = json.loads(record.read_text()), earlier.pop(n, None)
    built["build_date"] = built.pop("date", None)
    if other_build is not None:  # the earlier invocations measured another index of these vectors
        built["earlier_builds"] = other_build.pop("earlier_builds", []) + [other_build]
    searched = (
        "nprobe",
        "candidates",
        "recall_at_3_vs_exact",
        "recall_at_10_vs_exact",
        "first_answer_s",
        "p50_1_ms",
        "p99_1_ms",
        "qps_1",
        "qps_8",
        "serve_rss_mb",
        "serve_peak_rss_mb",
        "serve_rss_detail_mb",
        "sweep_inprocess_1_query_per_call",
    )
    if n in earlier:  # what earlier invocations measured on this build, each with its settings and load
        old = earlier[n]
        before = old.get("earlier_searches") or ([old["earlier_search"]] if "earlier_search" in old else [])
        last = {k: old[k] for k in searched if k in old} | {"load_average_at_end": old.get("load_average_at_end")}
        built["earlier_searches"] = before + [last]
    return built | {"factory": manifest["options"]["dense"]["faiss"], "index_reused": True}


def measure_search(n: int, out: Path, args, queries: np.ndarray, questions: list[str], exact: np.ndarray) -> dict:
    from searchrl.retrieval.dense import DenseOptions, read_faiss_index
    from searchrl.retrieval.index import read_manifest

    row: dict = {}
    options = DenseOptions(**read_manifest(out)["options"]["dense"])
    index = read_faiss_index(out / "dense" / "index.faiss", options)
    t0 = time.perf_counter()
    found = index.search(queries, K)[1]
    row["inprocess_search_ms_per_query"] = round((time.perf_counter() - t0) * 1000 / len(queries), 2)
    row["recall_at_3_vs_exact"] = round(recall(found, exact, 3), 4)
    row["recall_at_10_vs_exact"] = round(recall(found, exact, 10), 4)
    row |= {"nprobe": options.nprobe, "candidates": options.candidates, "rerank_reads": "positional (pread)"}
    if "Refine(" in options.faiss:
        row["refine_factor"] = options.refine_factor
    row["serve_omp_threads"] = args.omp_threads
    row["sweep_inprocess_1_query_per_call"] = sweep(index, queries, exact, args.sweep_nprobe, args.sweep_candidates)
    del index
    row |= measure_serving(out, args.encoder_dir, questions, args)
    row["load_average_at_end"] = os.getloadavg()
    if args.convert:
        row["convert"] = measure_convert(n, args, queries, exact)
    row["disk_mb"] = {
        p.name: round(p.stat().st_size / 2**20, 1) for p in sorted((out / "dense").iterdir()) if p.is_file()
    }
    row["disk_mb"]["passages"] = round(sum(p.stat().st_size for p in (out / "passages").iterdir()) / 2**20, 1)
    print(json.dumps(row), flush=True)
    return row


def convert_only(args: argparse.Namespace, queries: np.ndarray) -> None:
    rows = []
    for n in args.passages or [2_000_000]:
        whole = not args.convert_passages or args.convert_passages >= n  # else the exact answers over N are unused
        exact = exact_top(args.work / f"vectors-{n}.f16.npy", queries)[0] if whole else None
        rows.append(
            {"passages": n, "dim": 768, "nprobe": args.nprobe, "candidates": args.candidates}
            | measure_convert(n, args, queries, exact)
        )
        rows[-1]["factory"] = rows[-1]["convert_factory"]
    result = {
        "benchmark": "retrieval_convert",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "runs": rows,
    }
    (RESULTS / "retrieval_convert.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# `searchrl index convert` of a faiss Flat file ({result['date']})",
        "",
        "Vectors: the first rows of the vectors of `retrieval_scale.md`'s run of N passages, written as an "
        "IndexFlatIP file (float32) by faiss. Peak RSS of the convert process (`/usr/bin/time -v`); recall "
        "of the converted index (searched with the nprobe / candidates shown) against the Flat file's own "
        f"exact answers; {len(queries)} "
        f"real queries. {os.cpu_count()} CPU cores shared with other jobs (load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}).",
        "",
        "| N | Flat rows | Flat file MB | factory | nprobe / candidates | convert s | peak RSS MB | RSS / Flat "
        "| recall@3 | recall@10 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['passages']:,} | {r['convert_passages']:,} | {r['flat_file_mb']:,} | `{r['factory']}` | "
            f"{r['nprobe']} / {r['candidates']} | {r['convert_s']} | "
            f"{r.get('convert_peak_rss_mb_time_v', r['convert_peak_rss_mb'])} | "
            f"{100 * r['convert_peak_rss_fraction_of_flat']:.1f}% | "
            f"{r['convert_recall_at_3_vs_flat']} | {r['convert_recall_at_10_vs_flat']} |"
        )
    (RESULTS / "retrieval_convert.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("_") else None
    if sub:
        ap.add_argument("sub")
        ap.add_argument("--corpus", type=Path)
        ap.add_argument("--out", type=Path)
        ap.add_argument("--vectors", type=Path)
        ap.add_argument("--factory")
        ap.add_argument("--nprobe", type=int, default=64)
        ap.add_argument("--candidates", type=int, default=100)
        ap.add_argument("--encoder-dir", type=Path)
        ap.add_argument("--port", type=int)
        args = ap.parse_args()
        return child_build(args) if sub == "_build" else child_serve(args)
    ap.add_argument("--passages", type=int, action="append", help="N (repeatable); default 2,000,000")
    ap.add_argument("--work", type=Path, default=Path("/tmp/searchrl-scale"))
    ap.add_argument("--factory", help="faiss factory (default: factory_for(N))")
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument(
        "--refine-factor",
        type=int,
        default=10,
        help="factory ending in Refine(...): passages scanned per re-ranked one",
    )
    ap.add_argument("--components", type=int, default=32)
    ap.add_argument("--queries", type=int, default=500, help="dev questions used as queries")
    ap.add_argument("--convert", action="store_true", help="also write a Flat file and time `searchrl index convert`")
    ap.add_argument(
        "--reuse-index",
        action="store_true",
        help="search the index an earlier invocation built "
        "for N (settings: --nprobe, --candidates) instead of building it again",
    )
    ap.add_argument("--sweep-nprobe", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--sweep-candidates", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--convert-passages", type=int, help="Flat file of the first M vectors (default: all N)")
    ap.add_argument("--convert-factory", help="factory for the converted index (default: as --factory)")
    ap.add_argument("--omp-threads", type=int, default=1, help="OMP_NUM_THREADS of the child processes")
    ap.add_argument(
        "--convert-only",
        action="store_true",
        help="only the convert measurement (results: "
        "retrieval_convert.{json,md}); the vectors and corpus of N must exist in --work",
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.encoder_dir = args.work / "query_encoder"
    if not (args.encoder_dir / "model.onnx").exists():
        from searchrl.retrieval.onnx_encoder import export_encoder

        export_encoder("minilm-l6-v2", args.encoder_dir)
    passages, qvecs, questions = real_embeddings(args.work)
    questions = questions[: args.queries]
    queries = lift(qvecs[: args.queries])
    if args.convert_only:
        return convert_only(args, queries)
    fitted: list[dict] = []

    def mix() -> dict:  # fitted only when vectors must be generated (minutes on a busy machine)
        if not fitted:
            fitted.append(fit_mixture(passages, args.components))
        return fitted[0]

    path = RESULTS / "retrieval_scale.json"
    done = {n: run(n, args, mix, queries, questions) for n in args.passages or [2_000_000]}
    previous = json.loads(path.read_text()) if path.exists() else {}  # read late: runs of other N are kept
    runs = {r["passages"]: r for r in previous.get("runs", [])}
    runs |= {n: r | {"date": time.strftime("%Y-%m-%d", time.gmtime())} for n, r in done.items()}
    result = {
        "benchmark": "retrieval_scale",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "fp32_matmul_gflops": matmul_gflops(),
            "load_average_at_end": os.getloadavg(),
            "omp_num_threads_children": args.omp_threads,
        },
        "vectors": f"MiniLM 2wiki-mini passage embeddings -> GaussianMixture({args.components}, tied) -> two draws "
        "of one component concatenated (768-d), L2-normalised; queries: real MiniLM dev-question embeddings [q, q]",
        "runs": sorted(runs.values(), key=lambda r: r["passages"]),
        "measured_passages": sorted(done),  # the runs of this invocation; the others are kept from earlier ones
    }
    from retrieval_scale_report import extrapolate, report

    ext = extrapolate(result["runs"])
    result["extrapolated_21m"] = ext
    result["extrapolated_21m_ram_gb"] = ext["serve_rss_gb"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "retrieval_scale.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
