"""Input directories are read-only: an index built on demand goes into the cache, keyed by the corpus."""

from __future__ import annotations

import json
from pathlib import Path

from searchrl.config import load_config
from searchrl.pipeline import default_index_dir, make_retriever_for


def _write_corpus(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"id": str(i), "contents": f"T{i}\\n{t}"}) + "\n" for i, t in enumerate(texts)))


def test_on_demand_index_lives_in_the_cache_not_the_data_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "data"
    data.mkdir()
    _write_corpus(data / "corpus.jsonl", ["the capital of France is Paris", "bananas are yellow"])
    before = sorted(p.name for p in data.iterdir())
    cfg = load_config("demo", [f"data.source={data}"])
    hits = make_retriever_for(cfg).search(["capital of France"], 1)[0]
    assert "Paris" in hits[0].contents
    assert sorted(p.name for p in data.iterdir()) == before  # nothing written into the user's directory
    index = default_index_dir(data / "corpus.jsonl", "bm25")
    assert index.is_relative_to(tmp_path / "cache") and index.exists()

    _write_corpus(data / "corpus.jsonl", ["a different corpus", "with other text", "and a third passage"])
    assert default_index_dir(data / "corpus.jsonl", "bm25") != index  # a changed corpus gets its own index
