"""Benchmark (acceptance 4): concurrent clients x requests against ``searchrl serve`` on loopback.

Each client is a thread with its own plain ``httpx.Client`` sending Search-R1 requests
(``{"queries": [question], "topk": 3, "return_scores": true}``) one after another, or with ``--client remote`` its
own ``RemoteRetriever`` (what training uses: retries with backoff, honouring ``Retry-After`` when the server's queue
is full; its cache off, so every query reaches the server); questions cycle through the
2wiki-mini dev set (or a synthetic world's questions when ``../shared/data`` is absent). The run is bounded
(exactly clients x requests, each with a timeout) and stops by itself. We record errors (non-200 answers, malformed
results, exceptions), client-side latency percentiles, throughput (requests/s over the whole run) and the server's
own ``/stats`` (latency percentiles and how many requests each micro-batch merged).

Indexes: BM25 over 2wiki-mini (built on demand under ``$SEARCHRL_BENCH_DIR``, default ``/tmp/searchrl-bench``), and
the hybrid (BM25 + MiniLM dense) index of the recall benchmark when it exists (every request then also runs the
encoder); ``--build-dense`` also builds the MiniLM dense and hybrid indexes when missing. Results:
``benchmarks/results/{--name}.{json,md}`` (default ``retrieval_load``).

Usage: python benchmarks/bench_retrieval_load.py [--clients 8] [--requests 500] [--index DIR ...]
       python benchmarks/bench_retrieval_load.py --clients 64 --requests 200 --client remote --build-dense \
           --name retrieval_load_64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH_DIR = Path(os.environ.get("SEARCHRL_BENCH_DIR", "/tmp/searchrl-bench"))
DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data")) / "2wiki-mini"
SEARCHRL = Path(sys.executable).with_name("searchrl")


def default_indexes(build_dense: bool = False, vectors: Path | None = None) -> tuple[list[Path], list[str]]:
    """BM25 over 2wiki-mini (or a synthetic world), plus MiniLM dense and hybrid indexes if built (or asked for)."""
    from searchrl.retrieval.index import build_index

    if (DATA / "corpus.jsonl").exists():
        corpus = DATA / "corpus.jsonl"
        questions = [json.loads(line)["question"] for line in (DATA / "dev.jsonl").open() if line.strip()]
        name = "2wiki-mini"
    else:
        from searchrl.data.synth import generate_world, write_world

        world_dir = BENCH_DIR / "world-2000"
        if not (world_dir / "corpus.jsonl").exists():
            write_world(generate_world(2000, seed=0), world_dir)
        corpus = world_dir / "corpus.jsonl"
        questions = [json.loads(line)["question"] for line in (world_dir / "dev.jsonl").open() if line.strip()]
        name = "world-2000"
    bm25 = BENCH_DIR / f"{name}-bm25"
    if not (bm25 / "manifest.json").exists():
        build_index(corpus, "bm25", bm25, overwrite=True)
    indexes = [bm25]
    for kind in ("dense", "hybrid"):
        path = BENCH_DIR / f"{name}-{kind}-minilm-l6-v2"
        if build_dense and not (path / "manifest.json").exists():
            print(f"building {kind} MiniLM index of {corpus} -> {path}", flush=True)
            # ``vectors``: MiniLM passage embeddings already computed (corpus order), to skip encoding on a busy box.
            given = {"vectors": np.load(vectors), "query_encoder": "onnx"} if vectors else {}
            build_index(corpus, kind, path, encoder="minilm-l6-v2", overwrite=True, **given)
        if (path / "manifest.json").exists():
            indexes.append(path)
    return indexes, questions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index: Path, query_cache: int = 10_000) -> tuple[subprocess.Popen, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(SEARCHRL), "serve", "--index", str(index), "--port", str(port), "--query-cache", str(query_cache)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"searchrl serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("searchrl serve did not come up within 180 s")


def run_load(url: str, questions: list[str], clients: int, requests: int, topk: int, kind: str = "httpx") -> dict:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[list[str]] = [[] for _ in range(clients)]
    retried = [0] * clients
    barrier = threading.Barrier(clients + 1)

    def remote_client(c: int) -> None:
        from searchrl.retrieval.client import RemoteRetriever

        with RemoteRetriever(url, timeout_s=30, retries=10, cache_size=0) as remote:
            barrier.wait()
            for i in range(requests):
                q = questions[(c * requests + i) % len(questions)]
                t0 = time.perf_counter()
                try:
                    hits = remote.search([q], topk)
                    if len(hits) != 1 or not hits[0]:
                        errors[c].append(f"no hits for {q!r}")
                except Exception as err:  # noqa: BLE001 - every failure is counted, none stops the run
                    errors[c].append(f"{type(err).__name__}: {err}")
                latencies[c].append(time.perf_counter() - t0)
            retried[c] = remote.retried

    def client(c: int) -> None:
        if kind == "remote":
            return remote_client(c)
        with httpx.Client(timeout=30) as http:
            barrier.wait()
            for i in range(requests):
                q = questions[(c * requests + i) % len(questions)]
                t0 = time.perf_counter()
                try:
                    resp = http.post(f"{url}/retrieve", json={"queries": [q], "topk": topk, "return_scores": True})
                    ok = resp.status_code == 200 and len(resp.json()["result"]) == 1
                    ok = ok and all("document" in d and "score" in d for d in resp.json()["result"][0])
                    if not ok:
                        errors[c].append(f"HTTP {resp.status_code}: {resp.text[:200]}")
                except Exception as err:  # noqa: BLE001 - every failure is counted, none stops the run
                    errors[c].append(f"{type(err).__name__}: {err}")
                latencies[c].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat_ms = np.array([x for per in latencies for x in per]) * 1000.0
    all_errors = [e for per in errors for e in per]
    return {
        "clients": clients,
        "requests_per_client": requests,
        "requests": int(lat_ms.size),
        "client": kind,
        "errors": len(all_errors),
        "error_examples": all_errors[:5],
        "retried": sum(retried),
        "wall_s": round(wall, 2),
        "qps": round(lat_ms.size / wall, 1),
        "latency_ms": {f"p{p}": round(float(np.percentile(lat_ms, p)), 2) for p in (50, 90, 99)}
        | {"mean": round(float(lat_ms.mean()), 2), "max": round(float(lat_ms.max()), 2)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=500, help="requests per client")
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--client", choices=["httpx", "remote"], default="httpx", help="plain httpx or RemoteRetriever")
    ap.add_argument("--build-dense", action="store_true", help="build MiniLM dense and hybrid indexes when missing")
    ap.add_argument("--name", default="retrieval_load", help="results file name under benchmarks/results/")
    ap.add_argument("--passage-vectors", type=Path, help="--build-dense: precomputed MiniLM passage vectors (.npy)")
    ap.add_argument("--index", type=Path, action="append", help="index directories (default: see module doc)")
    ap.add_argument(
        "--query-cache", type=int, default=0, help="server's query-embedding cache; 0: repeated questions re-encoded"
    )
    args = ap.parse_args()

    indexes, questions = default_indexes(args.build_dense, args.passage_vectors)
    indexes = args.index or indexes
    rows = []
    for index in indexes:
        manifest = json.loads((index / "manifest.json").read_text())
        print(f"[{index.name}] {manifest['kind']} index, {manifest['counts']['passages']:,} passages", flush=True)
        proc, url = start_server(index, args.query_cache)
        try:
            with httpx.Client(timeout=30) as http:  # warm-up: first requests page in the index
                for q in questions[:20]:
                    http.post(f"{url}/retrieve", json={"queries": [q], "topk": args.topk})
            load = run_load(url, questions, args.clients, args.requests, args.topk, args.client)
            server = httpx.get(f"{url}/stats", timeout=10).json()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        row = {"index": index.name, "kind": manifest["kind"], "passages": manifest["counts"]["passages"]}
        row |= load | {"server_stats": server}
        print(json.dumps(row), flush=True)
        rows.append(row)

    result = {
        "benchmark": "retrieval_load",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "what": f"{args.clients} concurrent clients x {args.requests} Search-R1 requests (1 query, topk "
        f"{args.topk}) against `searchrl serve` on 127.0.0.1",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
        "query_cache": args.query_cache,
        "note": "clients, server and any other jobs share the same CPUs; see load_average_at_end",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / f"{args.name}.json", json.dumps(result, indent=2) + "\n")
    lines = [
        f"# Retrieval service under concurrent load ({result['date']})",
        "",
        f"{args.clients} client threads ({args.client}) x {args.requests} requests each (one query per request, "
        f"topk={args.topk}, "
        f"Search-R1 format) against `searchrl serve` on loopback; {os.cpu_count()} CPUs shared by clients and "
        f"server (load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}).",
        "",
        "| index | requests | errors | retried (503) | QPS | p50 ms | p90 ms | p99 ms | server p50/p99 ms "
        "| requests per batch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["server_stats"]
        lines.append(
            f"| {r['index']} ({r['kind']}, {r['passages']:,} passages) | {r['requests']} | {r['errors']} | "
            f"{r['retried']} | "
            f"{r['qps']} | {r['latency_ms']['p50']} | {r['latency_ms']['p90']} | {r['latency_ms']['p99']} | "
            f"{s['latency_ms']['p50']} / {s['latency_ms']['p99']} | {s['batching']['mean_requests_per_batch']} |"
        )
    lines += [
        "",
        "Client latency includes the HTTP round trip; server latency is measured inside the handler. "
        f"Dense query-embedding cache: {args.query_cache} entries (questions cycle through the dev set, so a "
        "cache would answer most of them from memory).",
    ]
    write_portable(RESULTS / f"{args.name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
