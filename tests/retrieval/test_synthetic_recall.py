"""Acceptance 2 (test half): on synthetic single-hop questions, the gold passage is in the top 5 for >= 90% of
questions, for BM25 and for dense retrieval with the bundled MiniLM encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.data.synth import generate_world, write_world
from searchrl.retrieval.index import build_index, load_index

N_ENTITIES = 300
MAX_QUESTIONS = 200


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    w = generate_world(N_ENTITIES, seed=0)
    out = tmp_path_factory.mktemp("world")
    write_world(w, out)
    single = [
        q for split in ("dev", "test", "train") for q in w.questions[split] if q.metadata["kind"] == "single_hop"
    ]
    pairs = [(q.question, q.metadata["chain"][0]["passage_id"]) for q in single[:MAX_QUESTIONS]]
    assert len(pairs) >= 100
    return out / "corpus.jsonl", pairs


def _recall_at_5(index: Path, pairs: list[tuple[str, str]]) -> float:
    r = load_index(index)
    results = r.search([q for q, _ in pairs], 5)
    return sum(gold in {h.id for h in hits} for (_, gold), hits in zip(pairs, results, strict=True)) / len(pairs)


def test_bm25_single_hop_recall_at_5(world, tmp_path: Path) -> None:
    corpus, pairs = world
    recall = _recall_at_5(build_index(corpus, "bm25", tmp_path / "bm25"), pairs)
    assert recall >= 0.9, f"BM25 recall@5 on {len(pairs)} single-hop questions: {recall:.3f}"


@pytest.mark.slow
def test_dense_minilm_single_hop_recall_at_5(world, tmp_path: Path) -> None:
    corpus, pairs = world
    recall = _recall_at_5(build_index(corpus, "dense", tmp_path / "dense", encoder="minilm-l6-v2"), pairs)
    assert recall >= 0.9, f"dense (MiniLM) recall@5 on {len(pairs)} single-hop questions: {recall:.3f}"
