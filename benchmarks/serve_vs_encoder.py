"""`searchrl serve` against its query encoder alone, measured in alternating rounds on the same warm processes.

The dense service's throughput is bounded by its query encoder: every question is new, so every query is encoded.
``peer_search_r1_server.py --ours-only`` times the encoder once, in a fresh process, before or after the loads; on
a shared 2-core machine one pass of the encoder alone swings by 20-30% from minute to minute, so a single run's
served / encoder-alone fraction moves by +-10 points. Here the two are measured as pairs instead:

- the server (``searchrl serve`` on the same dense MiniLM faiss Flat index of the 2wiki-mini corpus) and an
  encoder-alone process (the ONNX query encoder loaded as the server loads it, in each of two ways for ONNX
  Runtime's pool threads to wait: ``run``, the server's, and ``always``, ONNX Runtime's default) both start once
  and stay up; each is idle while the other is timed;
- each round times the encoder alone at batch 1 (the round's 300 one-client questions, one by one) and at batch 32
  (the round's 4 x 32-query load, in batches of 32), taking the faster wait mode of the round as its bound; and the
  served loads: 1 client through httpx, 1 client through the standard library's ``http.client`` (``LeanClient``,
  a third of httpx's CPU per request), and 4 clients x 32 queries per request;
- odd rounds time the server first, even rounds the encoder first, so a drift within a round does not favour
  either; every question is sent to the server once only (its query cache never answers).

Each round gives served q/s / encoder-alone q/s for each load; the report gives every round and the medians.
Results: ``benchmarks/results/serve_vs_encoder.{json,md}``.

Usage: python benchmarks/serve_vs_encoder.py [--rounds 5] [--index DIR] [--serve-args "..."]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_search_r1_server import (  # noqa: E402 - the benchmark next to this one holds the shared pieces
    DATA,
    RESULTS,
    SERVE_ARGS,
    TOPK,
    LeanClient,
    load_questions,
    prepare_indexes,
    run_load,
    searchrl_server,
)

from searchrl.utils import write_portable  # noqa: E402

#: the encoder-alone process: loads one encoder per wait mode, then times a pass per mode for each command line
#: ({"batch": B, "questions": [...]}) and answers {"mode": ms per query, ...}
ENCODER_LOOP = """
import json, os, sys, time
from pathlib import Path
from searchrl.retrieval.dense import DenseOptions
from searchrl.retrieval.index import read_manifest
from searchrl.retrieval.onnx_encoder import OnnxEncoder
index = Path(sys.argv[1])
options = DenseOptions(**read_manifest(index)["options"]["dense"])
encoders = {}
for mode in ("run", "always"):
    os.environ["SEARCHRL_ENCODER_SPIN"] = mode
    encoders[mode] = OnnxEncoder(index / "dense" / "query_encoder", options)
print("ready", flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    qs, batch = cmd["questions"], cmd["batch"]
    out = {}
    for mode, enc in encoders.items():
        enc.encode(qs[:batch], is_query=True, batch_size=batch)  # wakes the pool as a server's first call would
        t0 = time.perf_counter()
        for start in range(0, len(qs), batch):
            enc.encode(qs[start : start + batch], is_query=True, batch_size=batch)
        out[mode] = round((time.perf_counter() - t0) * 1000 / len(qs), 3)
        time.sleep(0.3)  # pool threads that spin after a call stop before the next timing
    print(json.dumps(out), flush=True)
"""

ONE, LEAN, MANY = "1 client (httpx)", "1 client (http.client)", "4 clients x 32 queries/request"
#: (name, clients, requests per client per chunk, queries per request, lean client): each round sends every load
#: in ``CHUNKS[name]`` chunks, each right after (or before) the encoder alone on the same questions
LOADS = [(ONE, 1, 30, 1, False), (LEAN, 1, 30, 1, True), (MANY, 4, 2, 32, False)]
CHUNKS = {ONE: 10, LEAN: 10, MANY: 3}
#: which encoder-alone batch size bounds each load
BOUND = {ONE: 1, LEAN: 1, MANY: 32}


def round_questions() -> int:
    return sum(c * n * p * CHUNKS[name] for name, c, n, p, _ in LOADS)


class EncoderAlone:
    """The encoder-alone process; ``time(batch, questions)`` gives ms per query in each wait mode."""

    def __init__(self, index: Path) -> None:
        env = os.environ | {"SEARCHRL_NO_PROGRESS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENCODER_LOOP, str(index)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        if self._line(600) != "ready":
            raise RuntimeError("the encoder-alone process did not start")

    def _line(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise RuntimeError(f"the encoder-alone process gave no answer within {timeout_s:g} s")
        line = self.proc.stdout.readline().strip()
        if not line:
            raise RuntimeError(f"the encoder-alone process ended (code {self.proc.poll()})")
        return line

    def time(self, batch: int, questions: list[str]) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"batch": batch, "questions": questions}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line(600))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serial_chunk(post, url: str, questions: list[str]) -> tuple[float, int]:
    """One client sends ``questions`` one per request through ``post``: (seconds, failed requests)."""
    failed = 0
    t0 = time.perf_counter()
    for q in questions:
        resp = post(url, json={"queries": [q], "topk": TOPK, "return_scores": True})
        if resp.status_code != 200 or len(resp.json()["result"][0]) != TOPK:
            failed += 1
    return time.perf_counter() - t0, failed


def serve_chunk(load: tuple, url: str, clients_by_kind: dict, questions: list[str]) -> tuple[float, int]:
    """One chunk of ``load`` on the server: (seconds, failed requests)."""
    _, clients, requests, per_request, lean = load
    if clients == 1:
        return serial_chunk(clients_by_kind[lean].post, url, questions)
    done = run_load(url, questions, clients, requests, per_request)
    return done["wall_s"], done["errors"]


def one_round(r: int, server_url: str, encoder: EncoderAlone, questions: list[str]) -> dict:
    """One round: each load in chunks, each chunk's questions also timed on the encoder alone, the two sides of a
    chunk in alternating order, so both see the same minutes of a shared machine."""
    out: dict = {"round": r, "encoder_ms_per_query": {}, "served": {}, "fraction": {}}
    offset = 0
    with httpx.Client(timeout=120) as hx, LeanClient(server_url, 120) as lean_client:
        for load in LOADS:
            name, clients, requests, per_request, _ = load
            enc_ms = {"run": 0.0, "always": 0.0}
            served_s, failed = 0.0, 0
            n = clients * requests * per_request
            for c in range(CHUNKS[name]):
                qs = questions[offset : offset + n]
                offset += n
                for side in ("serve", "encode") if (r + c) % 2 else ("encode", "serve"):
                    if side == "serve":
                        seconds, bad = serve_chunk(load, server_url, {False: hx, True: lean_client}, qs)
                        served_s, failed = served_s + seconds, failed + bad
                    else:
                        for mode, ms in encoder.time(BOUND[name], qs).items():
                            enc_ms[mode] += ms * len(qs)
            total = CHUNKS[name] * n
            per_query = {mode: round(ms / total, 3) for mode, ms in enc_ms.items()}
            qps = round(total / served_s, 1)
            out["encoder_ms_per_query"][name] = per_query
            out["served"][name] = {"queries": total, "queries_per_s": qps, "errors": failed}
            out["fraction"][name] = round(qps / (1000 / min(per_query.values())), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--corpus", type=Path, default=DATA / "2wiki-mini" / "corpus.jsonl")
    ap.add_argument("--index", type=Path, help="an existing dense Flat index of --corpus (default: built here)")
    ap.add_argument("--serve-args", default="", help="extra `searchrl serve` options, e.g. '--inline-ms 0'")
    ap.add_argument("--smoke", action="store_true", help="one short round to check the wiring; writes no results")
    args = ap.parse_args()
    SERVE_ARGS[:] = shlex.split(args.serve_args)
    if args.smoke:
        args.rounds = 1
        CHUNKS.update({name: 2 for name in CHUNKS})
    if not args.corpus.is_file():
        sys.exit(f"corpus not found: {args.corpus}; pass --corpus FILE (Search-R1 format: id, contents)")
    start_load = os.getloadavg()
    index, _ = prepare_indexes(args.corpus.resolve(), 0, args.index)
    questions = load_questions()
    per_round = round_questions()
    if len(questions) < 21 + args.rounds * per_round:
        sys.exit(f"{len(questions)} distinct questions are too few for {args.rounds} rounds; pass fewer --rounds")
    rounds = []
    encoder = EncoderAlone(index)
    try:
        with tempfile.TemporaryDirectory(prefix="serve-vs-encoder-") as tmp:
            server = searchrl_server(index, Path(tmp))
            try:
                first_answer_s = server.start(questions[0])
                with httpx.Client(timeout=60) as http:  # warm-up: allocations, first faiss pages, thread pools
                    for q in questions[1:21]:
                        http.post(server.url, json={"queries": [q], "topk": TOPK}).raise_for_status()
                for r in range(args.rounds):
                    qs = questions[21 + r * per_round : 21 + (r + 1) * per_round]
                    rounds.append(one_round(r, server.url, encoder, qs))
                    print(json.dumps({k: rounds[-1][k] for k in ("round", "encoder_ms_per_query", "fraction")}))
                memory = server.memory_mb()
                stats = httpx.get(server.url.replace("/retrieve", "/stats"), timeout=10).json()
            finally:
                server.stop()
    finally:
        encoder.close()
    errors = sum(x["errors"] for r in rounds for x in r["served"].values())
    result = {
        "benchmark": "serve_vs_encoder",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "corpus": str(args.corpus),
        "index": "dense, all-MiniLM-L6-v2 (ONNX query encoder), faiss Flat",
        "topk": TOPK,
        "serve_args": SERVE_ARGS,
        "loads": [
            {
                "name": n,
                "clients": c,
                "chunks": CHUNKS[n],
                "requests_per_client_per_chunk": q,
                "queries_per_request": p,
            }
            for n, c, q, p, _ in LOADS
        ],
        "rounds": rounds,
        "median_fraction": {
            name: round(statistics.median(r["fraction"][name] for r in rounds), 3) for name, *_ in LOADS
        },
        "errors": errors,
        "first_answer_s": round(first_answer_s, 2),
        "server_memory_mb": memory,
        "server_batching": stats.get("batching"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_at_start": start_load,
        "load_average_at_end": os.getloadavg(),
    }
    text = render(result)
    print(text)
    if errors:
        sys.exit(f"{errors} requests failed; see the rounds in the output")
    if not args.smoke:
        write_portable(RESULTS / "serve_vs_encoder.json", json.dumps(result, indent=2) + "\n")
        write_portable(RESULTS / "serve_vs_encoder.md", text)


def render(r: dict) -> str:
    lines = [
        "# `searchrl serve` against its query encoder alone, in alternating rounds",
        "",
        f"{r['date']}, {r['machine']['cpus']} CPUs (load average at start "
        f"{', '.join(f'{x:.1f}' for x in r['load_average_at_start'])}, at end "
        f"{', '.join(f'{x:.1f}' for x in r['load_average_at_end'])}). {r['index']} of "
        f"`{Path(r['corpus']).name}`, k = {r['topk']}; every question new to the server. Each round times the "
        "encoder alone (a warm process, the faster of two pool-thread wait modes) and the served loads back to back "
        "(`python benchmarks/serve_vs_encoder.py`; the method is in its docstring).",
        "",
        "| round | encoder alone, batch 1 | "
        + " | ".join(f"{n}: q/s, fraction" for n in (ONE, LEAN))
        + f" | encoder alone, batch 32 | {MANY}: q/s, fraction |",
        "|---|---|---|---|---|---|",
    ]
    for x in r["rounds"]:
        e1, e32 = (min(x["encoder_ms_per_query"][n].values()) for n in (ONE, MANY))
        cells = [f"{x['served'][n]['queries_per_s']} ({100 * x['fraction'][n]:.0f}%)" for n in (ONE, LEAN, MANY)]
        lines.append(f"| {x['round'] + 1} | {e1} ms/query | {cells[0]} | {cells[1]} | {e32} ms/query | {cells[2]} |")
    med = r["median_fraction"]
    lines += [
        "",
        "Median fraction of the encoder-alone bound: "
        + "; ".join(f"{n} **{100 * med[n]:.0f}%**" for n in (ONE, LEAN, MANY))
        + f". Requests failed: {r['errors']}. Server: first answer {r['first_answer_s']} s, RSS "
        f"{r['server_memory_mb']['rss_mb']:.0f} MB after the loads; batching {json.dumps(r['server_batching'])}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
