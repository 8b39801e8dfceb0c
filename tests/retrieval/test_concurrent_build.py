"""Processes that find the same index missing at once (those of a multi-process `accelerate launch`, or two runs
sharing the cache) build it once: the others wait for it and load it, rather than writing into one staging
directory together (an incomplete index, a vanished file)."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path


def _open(barrier, corpus: str, index: str, queue) -> None:
    from searchrl.config import RetrievalConfig
    from searchrl.retrieval import make_retriever

    barrier.wait()  # both processes ask for the missing index together
    try:
        hits = make_retriever(RetrievalConfig(kind="bm25", index=index, topk=3), corpus).search(["river 7"], 3)[0]
        queue.put(("ok", hits[0].id))
    except Exception as err:  # noqa: BLE001 -- reported to the test, which names it
        queue.put(("failed", f"{type(err).__name__}: {err}"))


def test_two_processes_opening_one_missing_index_build_it_once(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    words = ["river", "castle", "forest", "harbour", "valley", "bridge", "tower", "meadow"]
    with corpus.open("w") as f:
        for i in range(6000):
            text = " ".join(f"{words[(i * k) % 8]} {i % 97}" for k in range(1, 30))
            f.write(json.dumps({"id": str(i), "contents": f"Title {i}\n{text}"}) + "\n")
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(barrier, str(corpus), str(tmp_path / "index"), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=240) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(status == "ok" for status, _ in results), results
    assert (tmp_path / "index" / "manifest.json").exists() and not (tmp_path / ".index.partial").exists()
