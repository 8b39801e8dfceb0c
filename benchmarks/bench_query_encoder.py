"""Benchmark (issue 15, item 1): which query-encoding path to serve with, chosen by measurement.

Candidates, all encoding the same 2WikiMultiHopQA dev questions with all-MiniLM-L6-v2 on this CPU:

- ``sentence-transformers``: ``SentenceTransformer.encode`` (the reference path);
- ``torch inference_mode``: the transformers model called directly under ``torch.inference_mode`` with our own
  mean pooling, at 1 and at all torch threads;
- ``onnxruntime fp32``: the graph ``searchrl.retrieval.onnx_encoder.export_encoder`` writes, at 1 and all threads;
- ``onnxruntime int8``: the same graph after ``onnxruntime.quantization.quantize_dynamic`` (weights int8).

For each: single-query latency (one query per call, median and p90 over the questions), throughput with 32 queries
per call, the smallest cosine similarity to the reference embeddings over the questions, and the time to import
what the path needs (in a fresh interpreter). Results: ``benchmarks/results/query_encoder.{json,md}``.

``--merged``: only the ONNX fp32 path (as ``searchrl serve`` runs it), encoding calls of 128 questions (what a
server's merged batch of 4 requests x 32 queries hands the encoder) in inner batches of 16 / 32 / 64 / 128 after
the encoder's length sort, three rounds in turn; results ``benchmarks/results/query_encoder_batch.{json,md}``.

Usage: python benchmarks/bench_query_encoder.py [--questions 200] [--merged]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", ROOT.parent / "shared" / "data")) / "2wiki-mini"

IMPORTS = {
    "sentence-transformers": "import sentence_transformers",
    "torch inference_mode": "import torch, transformers; from transformers import AutoModel",
    "onnxruntime": "import onnxruntime, tokenizers",
}


def import_seconds(stmt: str) -> float:
    code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return round(float(out.stdout.strip().splitlines()[-1]), 2)


def measure(encode, questions: list[str], ref: np.ndarray) -> dict:
    encode(questions[:4])  # warm-up (allocations, lazy initialisation)
    lat = []
    for q in questions:
        t0 = time.perf_counter()
        encode([q])
        lat.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    for start in range(0, len(questions), 32):
        encode(questions[start : start + 32])
    batch_qps = len(questions) / (time.perf_counter() - t0)
    emb = encode(questions)
    cos = (emb * ref).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
    return {
        "single_p50_ms": round(float(np.percentile(lat, 50)), 2),
        "single_p90_ms": round(float(np.percentile(lat, 90)), 2),
        "batch32_qps": round(batch_qps, 1),
        "min_cosine": round(float(cos.min()), 6),
    }


def write_results(name: str, result: dict, lines: list[str]) -> None:
    """``benchmarks/results/{name}.json`` and ``.md``; the Markdown is printed too."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / f"{name}.json", json.dumps(result, indent=2) + "\n")
    write_portable(RESULTS / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def load_text() -> str:
    return f"{os.cpu_count()} CPUs (load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())})"


def merged(questions: list[str], call: int = 128, sizes=(16, 32, 64, 128), rounds: int = 3) -> None:
    """ms per query for calls of ``call`` questions at each inner batch size (median of ``rounds``)."""
    from searchrl.retrieval.dense import DenseOptions
    from searchrl.retrieval.onnx_encoder import OnnxEncoder, export_encoder

    with tempfile.TemporaryDirectory() as tmp:
        export_encoder("minilm-l6-v2", Path(tmp))
        enc = OnnxEncoder(Path(tmp), DenseOptions())
        enc.encode(questions[:call], is_query=True)  # warm-up
        times: dict[int, list[float]] = {b: [] for b in sizes}
        for _ in range(rounds):
            for b in sizes:
                t0 = time.perf_counter()
                for start in range(0, len(questions), call):
                    enc.encode(questions[start : start + call], is_query=True, batch_size=b)
                times[b].append((time.perf_counter() - t0) * 1000 / len(questions))
    rows = [{"batch_size": b, "ms_per_query": round(float(np.median(t)), 3), "rounds_ms": t} for b, t in times.items()]
    result = {"benchmark": "query_encoder_batch", "questions": len(questions), "call": call, "rows": rows}
    result |= {"machine": {"cpus": os.cpu_count()}, "load_average_at_end": os.getloadavg()}
    lines = [
        "# ONNX query encoder: inner batch size for a server's merged batch",
        "",
        f"{len(questions)} 2WikiMultiHopQA dev questions encoded in calls of {call} (sorted by length inside the "
        f"encoder, then cut into batches of the size shown), all-MiniLM-L6-v2 fp32, {load_text()}. Median of "
        f"{rounds} rounds, sizes in turn.",
        "",
        "| inner batch size | ms per query (median) | rounds |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['batch_size']} | {r['ms_per_query']} | {', '.join(f'{x:.2f}' for x in r['rounds_ms'])} |" for r in rows
    ]
    write_results("query_encoder_batch", result, lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--merged", action="store_true", help="only the inner batch sizes for 128-question calls")
    args = ap.parse_args()
    if not (DATA / "dev.jsonl").exists():
        sys.exit(f"2wiki-mini not found at {DATA}; set SEARCHRL_SHARED_DATA to the folder holding 2wiki-mini/")
    questions = [json.loads(line)["question"] for line in (DATA / "dev.jsonl").open() if line.strip()]
    if args.merged:
        return merged(questions[:512])
    questions = questions[: args.questions]

    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    from searchrl.models import load_embedder, resolve_embedder
    from searchrl.retrieval.dense import DenseOptions
    from searchrl.retrieval.onnx_encoder import OnnxEncoder, export_encoder

    all_threads = torch.get_num_threads()
    st = load_embedder("minilm-l6-v2")
    ref = st.encode(questions, normalize_embeddings=True, convert_to_numpy=True)
    rows = []

    def add(name: str, threads: int | None, encode, imports: str) -> None:
        row = {"path": name, "threads": threads} | measure(encode, questions, ref)
        row["import_s"] = import_seconds(IMPORTS[imports])
        print(json.dumps(row), flush=True)
        rows.append(row)

    def st_encode(texts: list[str]) -> np.ndarray:
        return st.encode(texts, normalize_embeddings=True, show_progress_bar=False)

    add("sentence-transformers", all_threads, st_encode, "sentence-transformers")

    model_dir = resolve_embedder("minilm-l6-v2")
    tok = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModel.from_pretrained(model_dir).eval()

    def torch_encode(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            b = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            h = hf(**b).last_hidden_state  # (B, T, H)
            m = b["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)
            e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)  # (B, H)
        return e.numpy()

    for threads in sorted({1, all_threads}):
        torch.set_num_threads(threads)
        add("torch inference_mode", threads, torch_encode, "torch inference_mode")
    torch.set_num_threads(all_threads)

    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32"
        t0 = time.perf_counter()
        export_encoder("minilm-l6-v2", fp32)
        export_s = round(time.perf_counter() - t0, 2)
        int8 = Path(tmp) / "int8"
        int8.mkdir()
        for f in ("tokenizer.json", "encoder.json"):
            (int8 / f).write_bytes((fp32 / f).read_bytes())
        quantize_dynamic(str(fp32 / "model.onnx"), str(int8 / "model.onnx"), weight_type=QuantType.QInt8)
        options = DenseOptions()
        for name, folder in [("onnxruntime fp32", fp32), ("onnxruntime int8", int8)]:
            for threads in sorted({1, all_threads}):
                enc = OnnxEncoder(folder, options, threads=threads)
                add(name, threads, lambda x, enc=enc: enc.encode(x, is_query=True), "onnxruntime")

    result = {
        "benchmark": "query_encoder",
        "model": "all-MiniLM-L6-v2 (minilm-l6-v2)",
        "questions": len(questions),
        "onnx_export_s": export_s,
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
    }
    lines = [
        "# Query-encoding paths for MiniLM",
        "",
        f"{len(questions)} 2WikiMultiHopQA dev questions, all-MiniLM-L6-v2, {load_text()}. Min cosine is against "
        f"the sentence-transformers embeddings. ONNX export took {export_s} s.",
        "",
        "| path | threads | 1 query: p50 ms | p90 ms | 32 per call: queries/s | min cosine | import s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['threads']} | {r['single_p50_ms']} | {r['single_p90_ms']} | "
            f"{r['batch32_qps']} | {r['min_cosine']} | {r['import_s']} |"
        )
    write_results("query_encoder", result, lines)


if __name__ == "__main__":
    main()
