"""Benchmark (acceptance 5): time from process start to the first answered request of ``searchrl serve``.

Two synthetic indexes, built once under ``$SEARCHRL_BENCH_DIR`` (default ``/tmp/searchrl-bench``) and reused:

- BM25 over 1,000,000 passages of random words (a Zipf-distributed vocabulary of 50,000 invented words, 20-60
  words per passage);
- dense over 200,000 passages: random unit vectors (384-d, the bundled MiniLM's size) written straight into the
  index format, because encoding 200k passages with MiniLM on 2 CPU cores would take hours; the manifest says so
  (``precomputed_vectors: true``). Queries are still encoded by MiniLM: the index holds the ONNX export of it
  (``query_encoder: onnx``), so the start loads onnxruntime and the encoder, not torch.

For each index we launch ``searchrl serve`` as a user would, POST a Search-R1 request every 20 ms until one is
answered, and record the wall time since ``Popen``. Runs are repeated (the OS page cache is warm after the first;
we do not drop caches on a shared machine). Results: ``benchmarks/results/retrieval_startup.{json,md}``.

Usage: python benchmarks/bench_retrieval_startup.py [--bm25-passages 1000000] [--dense-passages 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH_DIR = Path(os.environ.get("SEARCHRL_BENCH_DIR", "/tmp/searchrl-bench"))
SEARCHRL = Path(sys.executable).with_name("searchrl")


def make_vocab(n: int, seed: int) -> list[str]:
    """``n`` distinct invented lowercase words (2-4 consonant-vowel syllables)."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(syllables, k=rng.randint(2, 4))))
    vocab = sorted(words)
    rng.shuffle(vocab)  # so the Zipf rank of a word is unrelated to its spelling
    return vocab


def write_corpus(path: Path, n: int, seed: int = 0) -> Path:
    """A corpus of ``n`` random-word passages in Search-R1 format (``{"id", "contents": "Title\\ntext"}``)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocab = make_vocab(50_000, seed)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07  # Zipf-like word frequencies, as in natural text
    p /= p.sum()
    tmp = path.with_suffix(".partial")
    with tmp.open("w") as f:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            lengths = rng.integers(20, 61, size=m).tolist()
            words = [vocab[j] for j in rng.choice(len(vocab), size=sum(lengths), p=p).tolist()]
            lines, at = [], 0
            for i, length in enumerate(lengths):
                w = words[at : at + length]
                at += length
                title = f"{w[0]} {w[1]}".title()
                lines.append(json.dumps({"id": f"p{start + i}", "contents": f"{title}\n{' '.join(w)}"}) + "\n")
            f.write("".join(lines))
    tmp.rename(path)
    return path


def ensure_bm25(n: int) -> tuple[Path, float | None]:
    from searchrl.retrieval.index import build_index

    out = BENCH_DIR / f"bm25-{n}"
    if (out / "manifest.json").exists():
        return out, None
    corpus = write_corpus(BENCH_DIR / f"synth-{n}.jsonl", n)
    t0 = time.perf_counter()
    build_index(corpus, "bm25", out, overwrite=True)
    return out, time.perf_counter() - t0


def ensure_dense(n: int, dim: int = 384) -> tuple[Path, float | None]:
    from searchrl.retrieval.index import build_index

    out = BENCH_DIR / f"dense-onnx-{n}"
    if (out / "manifest.json").exists():
        return out, None
    corpus = write_corpus(BENCH_DIR / f"synth-{n}.jsonl", n, seed=1)
    vectors = np.random.default_rng(2).standard_normal((n, dim), dtype=np.float32)  # (N, D)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    t0 = time.perf_counter()
    build_index(corpus, "dense", out, vectors=vectors, query_encoder="onnx", overwrite=True)
    return out, time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_to_first_answer(index: Path, query: str, timeout_s: float = 120.0) -> dict:
    """Launch ``searchrl serve`` and poll /retrieve until it answers; returns timings in seconds."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/retrieve"
    env = os.environ | {"SEARCHRL_NO_PROGRESS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [str(SEARCHRL), "serve", "--index", str(index), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        with httpx.Client(timeout=30) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"searchrl serve exited: {proc.stderr.read().decode()[-2000:]}")
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"no answer within {timeout_s} s")
                try:
                    resp = client.post(url, json={"queries": [query], "topk": 3, "return_scores": True})
                except httpx.TransportError:
                    time.sleep(0.02)
                    continue
                elapsed = time.perf_counter() - t0
                resp.raise_for_status()
                hits = resp.json()["result"][0]
                return {"first_answer_s": round(elapsed, 3), "hits": len(hits)}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def in_process_load_s(index: Path) -> float:
    """``load_index`` alone, in a fresh interpreter (no CLI, no server)."""
    code = (
        "import time; t=time.perf_counter(); from searchrl.retrieval.index import load_index; "
        f"load_index({str(index)!r}); print(time.perf_counter()-t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return round(float(out.stdout.strip().splitlines()[-1]), 3)


def encoder_breakdown_s(index: Path) -> dict[str, float]:
    """Where a dense start goes, step by step in a fresh interpreter: imports, encoder load, index open."""
    code = f"""
import json, sys, time
t = time.perf_counter(); out = {{}}
import onnxruntime, tokenizers; out["import_onnxruntime_tokenizers"] = time.perf_counter() - t; t = time.perf_counter()
import faiss; out["import_faiss"] = time.perf_counter() - t; t = time.perf_counter()
from searchrl.retrieval.dense import DenseOptions, read_faiss_index
from searchrl.retrieval.onnx_encoder import OnnxEncoder
OnnxEncoder({str(index / "dense" / "query_encoder")!r}, DenseOptions())
out["load_onnx_minilm"] = time.perf_counter() - t
t = time.perf_counter()
read_faiss_index({str(index / "dense" / "index.faiss")!r}, DenseOptions())
out["open_faiss_index"] = time.perf_counter() - t
out["torch_imported"] = float("torch" in sys.modules)
print(json.dumps(out))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return {k: round(v, 3) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def cli_import_s() -> float:
    code = "import time; t=time.perf_counter(); import searchrl.cli; print(time.perf_counter()-t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return round(float(out.stdout.strip().splitlines()[-1]), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bm25-passages", type=int, default=1_000_000)
    ap.add_argument("--dense-passages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    rows = []
    for kind, n, ensure in [("bm25", args.bm25_passages, ensure_bm25), ("dense", args.dense_passages, ensure_dense)]:
        print(f"[{kind}] preparing {n:,}-passage index under {BENCH_DIR} ...", flush=True)
        index, build_s = ensure(n)
        manifest = json.loads((index / "manifest.json").read_text())
        query = " ".join(json.loads((index / "passages" / "passages.jsonl").open().readline())["text"].split()[:6])
        runs = [time_to_first_answer(index, query) for _ in range(args.runs)]
        for r in runs:
            assert r["hits"] == 3, r
        times = [r["first_answer_s"] for r in runs]
        row = {
            "kind": kind,
            "passages": manifest["counts"]["passages"],
            "vocab": manifest["counts"].get("vocab"),
            "dimension": manifest["dimension"],
            "precomputed_vectors": manifest["precomputed_vectors"],
            "index_bytes": sum(p.stat().st_size for p in index.rglob("*") if p.is_file()),
            "build_s": round(build_s, 1) if build_s is not None else manifest.get("build_seconds"),
            "first_answer_s": times,
            "first_answer_median_s": statistics.median(times),
            "load_index_s": in_process_load_s(index),
        }
        if kind == "dense":
            row["dense_start_breakdown_s"] = encoder_breakdown_s(index)
        print(json.dumps(row), flush=True)
        rows.append(row)

    result = {
        "benchmark": "retrieval_startup",
        "what": "wall time from launching `searchrl serve --index DIR` to the first answered POST /retrieve",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_end": os.getloadavg(),
        "cli_import_s": cli_import_s(),
        "target": "BM25 (1M passages) under 5 s",
        "rows": rows,
        "notes": [
            "dense vectors are random unit vectors written directly into the index (manifest precomputed_vectors); "
            "encoding the default 200k passages with MiniLM on 2 CPU cores would take hours. Query encoding is real "
            "(MiniLM, the ONNX export stored with the index).",
            "page cache warm after the first run; caches are not dropped on a shared machine.",
            "the machine is shared with other jobs; see load_average_at_end.",
        ],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "retrieval_startup.json", json.dumps(result, indent=2) + "\n")
    lines = [
        "# Retrieval service start-up time",
        "",
        f"Time from launching `searchrl serve` to the first answered `/retrieve` request, {args.runs} runs each. "
        f"Machine: {os.cpu_count()} CPUs, load average at end {', '.join(f'{x:.1f}' for x in os.getloadavg())}. "
        f"Importing the `searchrl` CLI alone takes {result['cli_import_s']} s.",
        "",
        "| index | passages | size on disk | build | load_index | first answer (runs) | median |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        label = r["kind"] + (" (random vectors)" if r["precomputed_vectors"] else "")
        lines.append(
            f"| {label} | {r['passages']:,} | {r['index_bytes'] / 1e6:,.0f} MB | {r['build_s']} s | "
            f"{r['load_index_s']} s | {', '.join(f'{t:.2f}' for t in r['first_answer_s'])} s | "
            f"**{r['first_answer_median_s']:.2f} s** |"
        )
    lines += ["", "Target: BM25 over 1M passages answers within 5 s.", ""]
    for r in rows:
        if "dense_start_breakdown_s" in r:
            steps = dict(r["dense_start_breakdown_s"])
            torch_imported = steps.pop("torch_imported", None)  # a flag (0 / 1), not a time
            text = ", ".join(f"{k} {v:.2f} s" for k, v in steps.items())
            if torch_imported is not None:
                text += f"; torch {'imported' if torch_imported else 'not imported'}"
            lines += [f"Dense start, step by step in a fresh interpreter: {text}.", ""]
    lines += [f"- {n}" for n in result["notes"]]
    write_portable(RESULTS / "retrieval_startup.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
