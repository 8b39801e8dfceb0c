"""Peer benchmark: Search-R1's dense retrieval server against ``searchrl serve``, same index, encoder and questions.

Inputs: a checkout of Search-R1 (``--search-r1 DIR``, holding ``search_r1/search/retrieval_server.py``) and a
corpus in Search-R1's format (``--corpus``, default ``../shared/data/2wiki-mini/corpus.jsonl``).

What is shared by both servers:

- one faiss Flat (exact inner product) index file, ``dense/index.faiss`` of an index built by ``searchrl index
  build --kind dense`` (passages encoded by sentence-transformers' all-MiniLM-L6-v2), which Search-R1's server
  reads with ``faiss.read_index`` as it would its own ``e5_Flat.index``;
- the same MiniLM model folder (Search-R1: ``--retriever_model DIR``, mean pooling, max length 256, L2-normalised;
  SearchRL: the same model exported to ONNX at index-build time);
- the same questions, k = 3. Questions are 2WikiMultiHopQA dev and HotpotQA/2Wiki training questions from
  ``../shared/data``, de-duplicated and shuffled once; no question is sent twice to a server within a run, so
  SearchRL's query-embedding cache never answers from memory here.

Search-R1's server is CUDA-only; it runs unmodified from the checkout under a CPU shim that this script writes to
a temporary directory (nothing is written into the checkout): ``.cuda()`` returns the module/tensor itself,
``.half()`` keeps fp32 (their launcher asks for fp16, which a CPU runs as slow emulation), ``torch.cuda.empty_cache``
does nothing, and ``uvicorn.run`` binds 127.0.0.1 on a free port instead of 0.0.0.0:8000. It runs in this Python
environment when it has Search-R1's imports (torch, transformers, faiss, datasets, fastapi, uvicorn), else in a
throwaway virtualenv under ``runs/``. Its ``datasets`` cache of the corpus is built once before timing (a warm
cache, as on a second start).

Loads, per server: time to first answer (from process launch to the first answered ``/retrieve``), 1 client with 1
query per request, 8 clients with 1 query per request, 4 clients with 32 queries per request, resident memory
after the loads (VmRSS, and peak VmHWM). Then each server is started once more on a 200k-passage index for its
time to first answer: the corpus repeated with distinct ids (real text), and the real passage vectors repeated
with small Gaussian noise and re-normalised (start-up does not depend on vector content; encoding 200k passages
on 2 CPU cores takes hours). Last, the query encoder alone (ONNX, loaded as ``searchrl serve`` loads it, in a
fresh process) is timed at batch 1 and 32: our served q/s at 1 client and at 32 queries per request is reported as a
fraction of it (every question is new, so every query must be encoded: the encoder alone bounds the service).
One timing of the encoder swings with the machine's load; ``benchmarks/serve_vs_encoder.py`` measures the same
fraction steadily, alternating the two in chunks.
Results: ``benchmarks/results/peer_search_r1_server.{json,md}``.

Usage: python benchmarks/peer_search_r1_server.py --search-r1 /path/to/Search-R1 [--corpus FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from json import dumps as json_dumps
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data"))
BENCH_DIR = Path(os.environ.get("SEARCHRL_BENCH_DIR", "/tmp/searchrl-bench"))
SEARCHRL = Path(sys.executable).with_name("searchrl")
TOPK = 3

# The CPU shim: applied before Search-R1's script runs (runpy), so their file stays as it is.
SHIM = """
import os, runpy, sys
import torch
torch.nn.Module.cuda = lambda self, device=None: self
torch.Tensor.cuda = lambda self, *args, **kwargs: self
torch.nn.Module.half = lambda self: self  # fp32 on CPU: fp16 matmuls are emulated there
torch.cuda.empty_cache = lambda: None
import uvicorn
_run = uvicorn.run
def _run_local(app, *args, **kwargs):
    kwargs.update(host="127.0.0.1", port=int(os.environ["SEARCH_R1_SHIM_PORT"]), log_level="warning")
    return _run(app, **kwargs)
uvicorn.run = _run_local
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
"""
SEARCH_R1_IMPORTS = ("torch", "transformers", "faiss", "datasets", "fastapi", "uvicorn", "tqdm", "numpy")


# --------------------------------------------------------------------------------------------------- inputs
def load_questions() -> list[str]:
    files = [DATA / "2wiki-mini" / "dev.jsonl", *sorted((DATA / "r1-searcher-train").glob("stage_*.jsonl"))]
    seen: dict[str, None] = {}
    for f in files:
        if f.exists():
            for line in f.open():
                if line.strip():
                    seen.setdefault(json.loads(line)["question"].strip(), None)
    questions = [q for q in seen if q]
    random.Random(0).shuffle(questions)
    return questions


def prepare_indexes(corpus: Path, big_n: int, small: Path | None = None) -> tuple[Path, Path | None]:
    """The real dense index of ``corpus`` (``small`` if given) and a ``big_n``-passage one for start-up (cached
    under BENCH_DIR)."""
    from searchrl.data.corpus import file_fingerprint
    from searchrl.retrieval.index import build_index, check_corpus, read_manifest

    fp = file_fingerprint(corpus)[:12]
    if small is not None:
        manifest = read_manifest(small)
        check_corpus(manifest, corpus, small)
        if manifest["kind"] != "dense" or manifest["options"]["dense"]["faiss"] != "flat":
            sys.exit(f"{small} is not a dense faiss Flat index; build one with `searchrl index build --kind dense`")
    small = small or BENCH_DIR / f"peer-{corpus.stem}-{fp}-dense"
    if not (small / "manifest.json").exists():
        print(f"building dense MiniLM index of {corpus} -> {small}", flush=True)
        build_index(corpus, "dense", small, overwrite=True)
    if not big_n:
        return small, None
    big = BENCH_DIR / f"peer-{corpus.stem}-{fp}-dense-{big_n}"
    if not (big / "manifest.json").exists():
        import faiss

        rows = [json.loads(line) for line in corpus.open() if line.strip()]
        index = faiss.read_index(str(small / "dense" / "index.faiss"))
        base = index.reconstruct_n(0, index.ntotal)  # (N, D) real passage vectors
        copies = -(-big_n // len(rows))
        big_corpus = BENCH_DIR / f"peer-{corpus.stem}-{fp}-x{copies}.jsonl"
        with big_corpus.open("w") as f:
            for c in range(copies):
                for r in rows:
                    f.write(json.dumps(r | {"id": f"{r['id']}#{c}"}) + "\n")
        rng = np.random.default_rng(0)
        vectors = np.tile(base, (copies, 1)) + rng.normal(0, 0.01, (copies * len(rows), base.shape[1])).astype(
            np.float32
        )  # (copies * N, D)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        print(f"building {len(vectors):,}-passage start-up index -> {big}", flush=True)
        build_index(big_corpus, "dense", big, vectors=vectors, query_encoder="onnx", overwrite=True)
    return small, big


def python_for_search_r1() -> str:
    """This interpreter when it has Search-R1's imports, else a throwaway venv under runs/ (created once)."""
    probe = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in %r))"
    if subprocess.run([sys.executable, "-c", probe % (SEARCH_R1_IMPORTS,)], timeout=120).returncode == 0:
        return sys.executable
    venv = ROOT / "runs" / "search-r1-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [
                str(py),
                "-m",
                "pip",
                "install",
                "--quiet",
                "torch",
                "transformers",
                "faiss-cpu",
                "datasets",
                "fastapi",
                "uvicorn",
                "tqdm",
            ],
            check=True,
            timeout=1800,
        )
    return str(py)


# --------------------------------------------------------------------------------------------------- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process started from ``cmd``; ``start`` returns the seconds until the first answered request."""

    def __init__(self, name: str, cmd: list[str], port: int, env: dict[str, str], log: Path) -> None:
        self.name, self.cmd, self.port, self.env, self.log = name, cmd, port, env, log
        self.url = f"http://127.0.0.1:{port}/retrieve"
        self.proc: subprocess.Popen | None = None

    def start(self, question: str, timeout_s: float = 600.0) -> float:
        t0 = time.perf_counter()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        with httpx.Client(timeout=60) as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited (code {self.proc.returncode}); see {self.log}")
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"{self.name} gave no answer within {timeout_s} s; see {self.log}")
                try:
                    resp = http.post(self.url, json={"queries": [question], "topk": TOPK, "return_scores": True})
                except httpx.TransportError:
                    time.sleep(0.02)
                    continue
                resp.raise_for_status()
                assert len(resp.json()["result"][0]) == TOPK
                return time.perf_counter() - t0

    def memory_mb(self) -> dict[str, float]:
        assert self.proc is not None
        status = Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
        fields = {line.split(":")[0]: line.split()[1] for line in status if line.startswith(("VmRSS", "VmHWM"))}
        return {"rss_mb": round(int(fields["VmRSS"]) / 1024, 1), "peak_rss_mb": round(int(fields["VmHWM"]) / 1024, 1)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None


def search_r1_server(checkout: Path, python: str, index: Path, corpus: Path, model: str, tmp: Path) -> Server:
    shim = tmp / "search_r1_cpu_shim.py"
    shim.write_text(SHIM)
    port = free_port()
    env = os.environ | {
        "SEARCH_R1_SHIM_PORT": str(port),
        "HF_DATASETS_CACHE": str(BENCH_DIR / "hf-datasets"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TQDM_DISABLE": "1",
    }
    cmd = [
        python,
        str(shim),
        str(checkout / "search_r1" / "search" / "retrieval_server.py"),
        "--index_path",
        str(index / "dense" / "index.faiss"),
        "--corpus_path",
        str(corpus),
        "--topk",
        str(TOPK),
        "--retriever_name",
        "minilm",
        "--retriever_model",
        model,
    ]
    return Server("Search-R1 retrieval_server.py", cmd, port, env, tmp / "search_r1.log")


SERVE_ARGS: list[str] = []  # --serve-args: extra `searchrl serve` options (A/B runs of a setting)


def searchrl_server(index: Path, tmp: Path) -> Server:
    port = free_port()
    cmd = [str(SEARCHRL), "serve", "--index", str(index), "--port", str(port), *SERVE_ARGS]
    return Server("searchrl serve", cmd, port, os.environ | {"SEARCHRL_NO_PROGRESS": "1"}, tmp / "searchrl.log")


def warm_datasets_cache(python: str, corpus: Path) -> None:
    """Build Search-R1's ``datasets`` Arrow cache of the corpus once, outside the timed start."""
    code = f"import datasets; datasets.load_dataset('json', data_files={str(corpus)!r}, split='train', num_proc=4)"
    env = os.environ | {"HF_DATASETS_CACHE": str(BENCH_DIR / "hf-datasets"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([python, "-c", code], check=True, timeout=900, env=env, capture_output=True)


# ------------------------------------------------------------------------------------------------------ loads
class LeanClient:
    """A keep-alive HTTP/1.1 client on the standard library's ``http.client``, with ``httpx.Client``'s ``post`` for
    the loads: about a third of httpx's CPU time per request (0.4 against 1.1 ms here), which on a 2-core machine is
    taken from the server under test."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def post(self, url: str, json: dict) -> httpx.Response:
        body = json_dumps(json).encode()
        self.conn.request("POST", urlsplit(url).path, body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return httpx.Response(resp.status, headers=resp.getheaders(), content=resp.read())

    def __enter__(self) -> LeanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def run_load(
    url: str, questions: list[str], clients: int, requests: int, per_request: int, lean: bool = False
) -> dict:
    """``clients`` threads, each sending ``requests`` requests of ``per_request`` distinct questions (through
    httpx, or ``LeanClient`` when ``lean``)."""
    need = clients * requests * per_request
    assert len(questions) >= need, f"need {need} questions, have {len(questions)}"
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[list[str]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        with LeanClient(url, 120) if lean else httpx.Client(timeout=120) as http:
            barrier.wait()
            for i in range(requests):
                start = (c * requests + i) * per_request
                batch = questions[start : start + per_request]
                t0 = time.perf_counter()
                try:
                    resp = http.post(url, json={"queries": batch, "topk": TOPK, "return_scores": True})
                    result = resp.json()["result"] if resp.status_code == 200 else None
                    if result is None or len(result) != len(batch) or any(len(r) != TOPK for r in result):
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
        "queries_per_request": per_request,
        "requests": int(lat_ms.size),
        "errors": len(all_errors),
        "error_examples": all_errors[:3],
        "wall_s": round(wall, 2),
        "queries_per_s": round(lat_ms.size * per_request / wall, 1),
        "latency_ms": {f"p{p}": round(float(np.percentile(lat_ms, p)), 1) for p in (50, 99)},
    }


LOADS = [  # (name, clients, requests per client, queries per request)
    ("1 client, 1 query/request", 1, 300, 1),
    ("8 clients, 1 query/request", 8, 60, 1),
    ("4 clients x 32 queries/request", 4, 8, 32),
]
#: the 1-client load again through ``LeanClient`` (`searchrl serve` only): a load generator that leaves the shared
#: cores to the server, as the encoder-alone bound has them
LEAN_LOAD = ("1 client (http.client), 1 query/request", 1, 300, 1)


def measure(server: Server, questions: list[str], big: Path | None, make_big) -> dict:
    """Start, loads, memory, stop; then time to first answer on the big index."""
    out: dict = {"server": server.name}
    q = iter(range(len(questions)))
    try:
        out["first_answer_s"] = round(server.start(questions[next(q)]), 2)
        with httpx.Client(timeout=60) as http:  # warm-up: allocations, first faiss pages, thread pools
            for _ in range(20):
                body = {"queries": [questions[next(q)]], "topk": TOPK, "return_scores": True}  # as Search-R1 sends
                http.post(server.url, json=body).raise_for_status()
        offset = next(q)
        out["loads"] = {}
        for name, clients, requests, per_request in LOADS:
            need = clients * requests * per_request
            out["loads"][name] = run_load(
                server.url, questions[offset : offset + need], clients, requests, per_request
            )
            offset += need
            print(f"  {server.name}: {name}: {json.dumps(out['loads'][name])}", flush=True)
        if "searchrl" in server.name:
            name, clients, requests, per_request = LEAN_LOAD
            need = clients * requests * per_request
            load = run_load(server.url, questions[offset : offset + need], clients, requests, per_request, lean=True)
            out["loads"][name] = load
            print(f"  {server.name}: {name}: {json.dumps(load)}", flush=True)
        out |= server.memory_mb()
        if "searchrl" in server.name:
            out["server_stats"] = httpx.get(server.url.replace("/retrieve", "/stats"), timeout=10).json()
    finally:
        server.stop()
    if big is not None:
        big_server = make_big()
        try:
            out["first_answer_big_s"] = round(big_server.start(questions[0]), 2)
            out["big"] = big_server.memory_mb()
        finally:
            big_server.stop()
    return out


ENCODER_CODE = """
import json, os, sys, time
from pathlib import Path
from searchrl.retrieval.dense import DenseOptions
from searchrl.retrieval.index import read_manifest
from searchrl.retrieval.onnx_encoder import OnnxEncoder
index, questions = Path(sys.argv[1]), json.loads(sys.stdin.read())
options = DenseOptions(**read_manifest(index)["options"]["dense"])
encoders = {}
for mode in SPIN_MODES:  # the server's pool-thread waiting, and ONNX Runtime's default (always spinning)
    os.environ["SEARCHRL_ENCODER_SPIN"] = mode
    encoders[mode] = OnnxEncoder(index / "dense" / "query_encoder", options)
    encoders[mode].encode(questions[:32], is_query=True, batch_size=32)  # warm-up
out = {}
for batch, count in ((1, 300), (32, 256)):
    qs = questions[32 : 32 + count]
    by_mode = {}
    for mode, enc in encoders.items():
        passes = []
        for _ in range(PASSES):  # one pass swings by +-20% on a shared 2-core machine; a median is steadier
            t0 = time.perf_counter()
            for start in range(0, count, batch):
                enc.encode(qs[start : start + batch], is_query=True, batch_size=batch)
            passes.append(round((time.perf_counter() - t0) * 1000 / count, 3))
        by_mode[mode] = {"ms_per_query": sorted(passes)[len(passes) // 2], "passes_ms": passes}
    fastest = min(by_mode, key=lambda m: by_mode[m]["ms_per_query"])
    out[f"batch_{batch}"] = {"queries": count, **by_mode[fastest], "spin": fastest, "by_spin": by_mode}
print(json.dumps(out))
"""
#: passes of the encoder-alone timing per spin mode (the same questions each time; the encoder has no cache): the
#: bound is the faster mode's median pass
ENCODER_PASSES = 3
ENCODER_SPIN_MODES = ("run", "always")


def encoder_only(index: Path, questions: list[str]) -> dict:
    """The query encoder alone, as `searchrl serve` loads it (ONNX, same threads), in a fresh process: ms per
    query at batch 1 (300 questions one by one) and batch 32 (8 batches), on questions the loads also send; the
    median of ``ENCODER_PASSES`` passes, in the faster of the server's spin mode (``run``) and ONNX Runtime's
    default (``always``)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"PASSES = {ENCODER_PASSES}\nSPIN_MODES = {ENCODER_SPIN_MODES!r}\n" + ENCODER_CODE,
            str(index),
        ],
        input=json.dumps(questions[:400]),
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for b in out.values():
        b["queries_per_s"] = round(1000 / b["ms_per_query"], 1)
    return out


# ------------------------------------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search-r1", type=Path, help="Search-R1 checkout (holds search_r1/search/)")
    ap.add_argument(
        "--ours-only",
        action="store_true",
        help="only `searchrl serve` and the encoder-alone bound; "
        "adds a dated section to the results and keeps the last peer comparison as it is",
    )
    ap.add_argument("--corpus", type=Path, default=DATA / "2wiki-mini" / "corpus.jsonl")
    ap.add_argument("--search-r1-commit", help="commit of the checkout, when it is not a git work tree (git archive)")
    ap.add_argument("--index", type=Path, help="an existing dense Flat index of --corpus (default: built here)")
    ap.add_argument("--big-passages", type=int, default=200_000, help="start-up index size (0: skip)")
    ap.add_argument("--prepare-only", action="store_true", help="build the indexes and caches, measure nothing")
    ap.add_argument("--smoke", action="store_true", help="tiny loads to check the wiring; writes no results")
    ap.add_argument("--serve-args", default="", help="extra `searchrl serve` options, e.g. '--inline-ms 0'")
    args = ap.parse_args()
    SERVE_ARGS[:] = shlex.split(args.serve_args)
    if args.smoke:
        LOADS[:] = [(name, clients, 2, per) for name, clients, _, per in LOADS]
    if args.ours_only:
        return ours_only(args)
    if args.search_r1 is None:
        sys.exit("--search-r1 DIR is needed (or --ours-only)")
    script = args.search_r1 / "search_r1" / "search" / "retrieval_server.py"
    if not script.is_file():
        sys.exit(f"{script} not found; --search-r1 must point to a Search-R1 checkout")
    if not args.corpus.is_file():
        sys.exit(f"corpus not found: {args.corpus}; pass --corpus FILE (Search-R1 format: id, contents)")

    from searchrl.models import resolve_embedder

    model = resolve_embedder("minilm-l6-v2")
    small, big = prepare_indexes(args.corpus.resolve(), args.big_passages, args.index)
    python = python_for_search_r1()
    big_corpus = None
    if big is not None:
        big_corpus = Path(json.loads((big / "manifest.json").read_text())["corpus"]["path"])
    for c in [args.corpus.resolve()] + ([big_corpus] if big_corpus else []):
        warm_datasets_cache(python, c)
    if args.prepare_only:
        return
    questions = load_questions()
    print(f"{len(questions)} distinct questions; index {small}", flush=True)

    rows = []
    with tempfile.TemporaryDirectory(prefix="peer-search-r1-") as tmp:
        tmpd = Path(tmp)
        print("Search-R1 server ...", flush=True)
        corpus = args.corpus.resolve()
        peer_small = search_r1_server(args.search_r1, python, small, corpus, model, tmpd)

        def peer_big() -> Server:
            return search_r1_server(args.search_r1, python, big, big_corpus, model, tmpd)

        rows.append(measure(peer_small, questions, big, peer_big))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "loads"}), flush=True)
        print("searchrl serve ...", flush=True)
        rows.append(measure(searchrl_server(small, tmpd), questions, big, lambda: searchrl_server(big, tmpd)))
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("loads", "server_stats")}), flush=True)
        logs = {p.name: p.read_text()[-3000:] for p in tmpd.glob("*.log")}
    print("encoder only ...", flush=True)
    encoder = encoder_only(small, questions)
    print(json.dumps(encoder), flush=True)

    peer, ours = rows
    ratios = {
        name: round(ours["loads"][name]["queries_per_s"] / peer["loads"][name]["queries_per_s"], 2)
        for name, *_ in LOADS
    }
    manifest = json.loads((small / "manifest.json").read_text())
    result = {
        "benchmark": "peer_search_r1_server",
        "search_r1_commit": _git_head(args.search_r1) or args.search_r1_commit,
        "corpus": str(args.corpus),
        "passages": manifest["counts"]["passages"],
        "big_passages": json.loads((big / "manifest.json").read_text())["counts"]["passages"] if big else None,
        "index": str(small / "dense" / "index.faiss"),
        "encoder": model,
        "topk": TOPK,
        "questions": "2WikiMultiHopQA dev + R1-Searcher HotpotQA/2Wiki training questions, distinct, seed-0 shuffle",
        "loads": [
            {"name": n, "clients": c, "requests_per_client": r, "queries_per_request": p} for n, c, r, p in LOADS
        ],
        "ratios": ratios,
        "encoder_only": encoder,
        "fraction_of_encoder_only": fractions(ours, encoder),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
        "log_tails": logs,
    }
    if args.smoke:
        print(render(result))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "peer_search_r1_server.json", json.dumps(result, indent=2) + "\n")
    write_portable(RESULTS / "peer_search_r1_server.md", render(result))
    print(render(result))


def ours_only(args: argparse.Namespace) -> None:
    """`searchrl serve` under the same loads, and the encoder alone; the stored peer comparison is kept."""
    start_load = os.getloadavg()
    small, _ = prepare_indexes(args.corpus.resolve(), 0, args.index)
    questions = load_questions()
    with tempfile.TemporaryDirectory(prefix="peer-search-r1-") as tmp:
        ours = measure(searchrl_server(small, Path(tmp)), questions, None, None)
    encoder = encoder_only(small, questions)
    section = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_start": start_load,
        "load_average_at_end": os.getloadavg(),
        "serve_args": SERVE_ARGS,
        "row": ours,
        "encoder_only": encoder,
        "fraction_of_encoder_only": fractions(ours, encoder),
    }
    if args.smoke:  # tiny loads: printed, never written over the stored results
        print(json.dumps(section, indent=2))
        return
    path = RESULTS / "peer_search_r1_server.json"
    result = json.loads(path.read_text()) | {"ours_vs_encoder_only": section}
    write_portable(path, json.dumps(result, indent=2) + "\n")
    write_portable(RESULTS / "peer_search_r1_server.md", render(result))
    print(render(result))


def fractions(ours: dict, encoder: dict) -> dict:
    """Our served q/s over the encoder-alone q/s (its upper bound when every query must be encoded)."""
    one, many, lean = "1 client, 1 query/request", "4 clients x 32 queries/request", LEAN_LOAD[0]
    out = {
        one: round(ours["loads"][one]["queries_per_s"] / encoder["batch_1"]["queries_per_s"], 3),
        many: round(ours["loads"][many]["queries_per_s"] / encoder["batch_32"]["queries_per_s"], 3),
    }
    if lean in ours["loads"]:
        out[lean] = round(ours["loads"][lean]["queries_per_s"] / encoder["batch_1"]["queries_per_s"], 3)
    return out


def _git_head(path: Path) -> str | None:
    res = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    return res.stdout.strip() if res.returncode == 0 else None


def render(r: dict) -> str:
    peer, ours = r["rows"]

    def load_cell(row: dict, name: str) -> str:
        x = row["loads"][name]
        err = f", {x['errors']} errors" if x["errors"] else ""
        return f"{x['queries_per_s']} q/s (p50 {x['latency_ms']['p50']} ms, p99 {x['latency_ms']['p99']} ms{err})"

    lines = [
        "# Search-R1's retrieval server vs `searchrl serve` (dense, MiniLM, faiss Flat)",
        "",
        f"One run, both servers one after the other on {r['machine']['cpus']} CPUs (load average at end: "
        f"{', '.join(f'{x:.1f}' for x in r['load_average_at_end'])}). Same faiss Flat index file "
        f"({r['passages']:,} real passages of `{Path(r['corpus']).name}`), same all-MiniLM-L6-v2 files, same "
        f"distinct questions, k = {r['topk']}. Search-R1 commit `{(r['search_r1_commit'] or '?')[:10]}`, run "
        "unmodified under a CPU shim (`.cuda()` -> CPU, fp32).",
        "",
        "| load | Search-R1 server | `searchrl serve` | ratio |",
        "|---|---|---|---|",
        f"| time to first answer ({r['passages']:,} passages) | {peer['first_answer_s']} s | "
        f"{ours['first_answer_s']} s | {peer['first_answer_s'] / ours['first_answer_s']:.1f}x |",
    ]
    if r["big_passages"]:
        lines.append(
            f"| time to first answer ({r['big_passages']:,} passages) | {peer['first_answer_big_s']} s | "
            f"**{ours['first_answer_big_s']} s** | {peer['first_answer_big_s'] / ours['first_answer_big_s']:.1f}x |"
        )
    for load in r["loads"]:
        name = load["name"]
        lines.append(f"| {name} | {load_cell(peer, name)} | {load_cell(ours, name)} | **{r['ratios'][name]}x** |")
    lines.append(
        f"| RSS after the loads (peak) | {peer['rss_mb']:.0f} MB ({peer['peak_rss_mb']:.0f}) | "
        f"{ours['rss_mb']:.0f} MB ({ours['peak_rss_mb']:.0f}) | |"
    )
    if r["big_passages"]:
        lines.append(
            f"| RSS at first answer, {r['big_passages']:,} passages | {peer['big']['rss_mb']:.0f} MB | "
            f"{ours['big']['rss_mb']:.0f} MB | |"
        )
    if "ours_vs_encoder_only" in r:
        sec = r["ours_vs_encoder_only"]
        e, f, row = sec["encoder_only"], sec["fraction_of_encoder_only"], sec["row"]
        lines_extra = [
            "",
            f"## `searchrl serve` against its query encoder alone ({sec['date']})",
            "",
            f"Only `searchrl serve` was run on this date (same index, questions and loads as above), on "
            f"{sec['machine']['cpus']} CPUs shared with other jobs (load average at start "
            f"{', '.join(f'{x:.1f}' for x in sec['load_average_at_start'])}, at end "
            f"{', '.join(f'{x:.1f}' for x in sec['load_average_at_end'])}); the table above is the earlier run "
            "(results committed 2026-11-23). "
            "Encoder alone: the ONNX query encoder loaded as the server loads it, in a fresh process, 300 "
            "questions one by one (batch 1) and 256 in batches of 32, the median of "
            f"{len(e['batch_1'].get('passes_ms', [0]))} passes in the faster of two ways for ONNX Runtime's pool "
            f"threads to wait (`{e['batch_1'].get('spin', 'always')}` here at batch 1): spinning only inside a call "
            "as the server does, or always. Every question is new to the server, so every query is encoded: the "
            "encoder alone bounds the service.",
            "",
            "| | encoder alone | `searchrl serve` | served / encoder alone |",
            "|---|---|---|---|",
            f"| batch 1 / 1 client, 1 query per request | {e['batch_1']['ms_per_query']} ms/query "
            f"({e['batch_1']['queries_per_s']} q/s) | {load_cell(row, '1 client, 1 query/request')} | "
            f"**{100 * f['1 client, 1 query/request']:.0f}%** |",
            *(
                [
                    f"| batch 1 / 1 client through `http.client`, 1 query per request | | "
                    f"{load_cell(row, LEAN_LOAD[0])} | **{100 * f[LEAN_LOAD[0]]:.0f}%** |"
                ]
                if LEAN_LOAD[0] in f
                else []
            ),
            f"| batch 32 / 4 clients x 32 queries per request | {e['batch_32']['ms_per_query']} ms/query "
            f"({e['batch_32']['queries_per_s']} q/s) | {load_cell(row, '4 clients x 32 queries/request')} | "
            f"**{100 * f['4 clients x 32 queries/request']:.0f}%** |",
            f"| 8 clients, 1 query per request | | {load_cell(row, '8 clients, 1 query/request')} | |",
            f"| time to first answer; RSS after the loads (peak) | | {row['first_answer_s']} s; "
            f"{row['rss_mb']:.0f} MB ({row['peak_rss_mb']:.0f}) | |",
        ]
    else:
        lines_extra = []
    if "encoder_only" in r:
        e, f = r["encoder_only"], r["fraction_of_encoder_only"]
        lines.append(
            f"| query encoder alone (ONNX, as served), batch 1 | | {e['batch_1']['ms_per_query']} ms/query "
            f"({e['batch_1']['queries_per_s']} q/s); 1 client served at "
            f"**{100 * f['1 client, 1 query/request']:.0f}%** of it | |"
        )
        lines.append(
            f"| query encoder alone (ONNX, as served), batch 32 | | {e['batch_32']['ms_per_query']} "
            f"ms/query ({e['batch_32']['queries_per_s']} q/s); 4 x 32 served at "
            f"**{100 * f['4 clients x 32 queries/request']:.0f}%** of it | |"
        )
    batching = ours.get("server_stats", {}).get("batching", {})
    loads = "; ".join(f"{x['name']}: {x['clients']} x {x['requests_per_client']} requests" for x in r["loads"])
    lines += [
        "",
        f"Loads: {loads}. q/s = queries answered per second over the load; latency per request, client side.",
        f"`searchrl serve` merged {batching.get('mean_requests_per_batch', '?')} requests per batch on average; its "
        f"query cache answered {ours.get('server_stats', {}).get('query_cache', {}).get('hits', '?')} queries "
        "(no question repeats).",
        (
            f"The {r['big_passages']:,}-passage index for start-up repeats the corpus with distinct ids and its real "
            "vectors with small noise (start-up does not depend on vector content). "
            if r["big_passages"]  # --big-passages 0: no such index
            else ""
        )
        + "Search-R1's `datasets` cache of each corpus is built before timing.",
    ]
    return "\n".join(lines + lines_extra) + "\n"


if __name__ == "__main__":
    main()
