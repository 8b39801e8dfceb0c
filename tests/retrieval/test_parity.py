"""Parity with the retrieval code the papers' authors ran: Search-R1's ``retrieval_server.py`` / ``index_builder.py``
and FlashRAG's ``flashrag/retriever``. Literal facts from their code, checked against ours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from searchrl.data.corpus import PassageStore, iter_passages
from searchrl.retrieval.index import build_index, load_index

from .conftest import HashingEncoder


class RecordingEncoder(HashingEncoder):
    """Records the passage texts a build encodes."""

    def __init__(self) -> None:
        super().__init__()
        self.passages: list[str] = []

    def encode(self, texts, *, is_query: bool, batch_size: int = 64):
        if not is_query:
            self.passages += list(texts)
        return super().encode(texts, is_query=is_query, batch_size=batch_size)


def test_passages_are_encoded_as_the_corpus_stores_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Search-R1's ``index_builder.encode_all`` and FlashRAG's encode each row's ``contents`` as it is in the file
    (``'"Title"\\ntext'`` in wiki-18, quotes included); an index of the same corpus built here must hold the same
    vectors, so the same passages come back for a query."""
    rows = [
        {"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist.'},
        {"id": "1", "contents": "Plain title\nA title without quotes."},
        {"id": "2", "contents": '""Weird Al" Yankovic"\nA title that holds quotes itself.'},
        {"id": "3", "contents": "One line, no title."},
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    encoder = RecordingEncoder()
    monkeypatch.setattr("searchrl.retrieval.dense.Encoder", lambda options: encoder)
    build_index(corpus, "dense", tmp_path / "idx", query_encoder="sentence-transformers")
    # A lone line is text without a title ("\n" + text: the same tokens for every encoder's tokenizer).
    assert encoder.passages == [r["contents"] for r in rows[:3]] + ["\nOne line, no title."]
    # What the observation shows is unchanged: the title without its quotes, the text.
    store = load_index(tmp_path / "idx").store
    assert [(p.title, p.text) for p in store] == [
        ("Evan Morris", "Evan Morris was a lobbyist."),
        ("Plain title", "A title without quotes."),
        ('"Weird Al" Yankovic', "A title that holds quotes itself."),
        ("", "One line, no title."),
    ]


def test_a_store_keeps_whether_a_title_was_quoted(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "contents": '"T"\nx'},
        {"id": "b", "contents": "T\nx"},
        {"id": "c", "contents": '"T"\n' + "w " * 9},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = PassageStore.build(iter_passages(corpus, max_words=5), tmp_path / "store")
    assert [p.contents for p in store] == ['"T"\nx', "T\nx", '"T"\nw w w w w', '"T"\nw w w w']  # chunks keep it
    assert store[0] == store[1].__class__("a", "T", "x")  # equality and the hit's fields ignore the quoting


def test_a_blank_query_is_the_indexs_to_answer(
    tiny_corpus: Path, tiny_bm25: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Search-R1's rollout sends an empty ``<search></search>`` as the query ``""``; its server hands it to the index:
    the dense server encodes ``"query: "`` and answers its nearest passages, pyserini finds no term and answers none.
    Ours does the same, whatever the index."""
    from fastapi.testclient import TestClient

    from searchrl.retrieval.server import create_app

    encoder = RecordingEncoder()
    encoder.embed = lambda text: np.ones(encoder.dimension, dtype=np.float32) / np.sqrt(encoder.dimension)
    monkeypatch.setattr("searchrl.retrieval.dense.Encoder", lambda options: encoder)
    build_index(tiny_corpus, "dense", tmp_path / "dense", query_encoder="sentence-transformers")
    dense = load_index(tmp_path / "dense")
    body = {"queries": ["", "volcano"], "topk": 2, "return_scores": True}
    answer = TestClient(create_app(dense)).post("/retrieve", json=body).json()["result"]
    expected = dense.search(["", "volcano"], 2)
    assert [[d["document"]["id"] for d in r] for r in answer] == [[h.id for h in hits] for hits in expected]
    assert len(answer[0]) == 2
    sparse = TestClient(create_app(load_index(tiny_bm25))).post("/retrieve", json=body).json()["result"]
    assert sparse[0] == [] and len(sparse[1]) == 1


def test_bm25_defaults_are_pyserinis() -> None:
    """pyserini's ``LuceneSearcher`` (Search-R1's and FlashRAG's BM25): k1 0.9, b 0.4, Lucene's idf and term
    frequency, Lucene's 33 English stopwords (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``); its stemmer is Porter's,
    which ``stemmer="porter"`` gives (the default is Snowball's English, a documented difference)."""
    from searchrl.retrieval.bm25 import Analyzer, BM25Options, stopword_list

    options = BM25Options()
    assert (options.k1, options.b, options.method) == (0.9, 0.4, "lucene")
    lucene = "a an and are as at be but by for if in into is it no not of on or such that the their then there these"
    assert stopword_list(options.stopwords) == sorted(lucene.split() + "they this to was will with".split())
    assert Analyzer("porter")("The skies, fairly") == ["ski", "fairli"]  # Lucene's PorterStemFilter
    assert Analyzer()("The skies, fairly") == ["sky", "fair"]


def test_search_r1s_request_and_answer_layout(tiny_bm25: Path) -> None:
    """Search-R1's ``_batch_search`` posts ``{"queries", "topk", "return_scores": true}`` and reads
    ``result[i][j]["document"]["contents"]``; its ``QueryRequest`` defaults: ``topk`` None (the server's), and
    ``return_scores`` False. Its server's documents are whole corpus rows (pyserini's carry ``title``, ``text`` and
    ``contents`` and no ``id``), which our client reads too."""
    from fastapi.testclient import TestClient

    from searchrl.retrieval.client import parse_result_item
    from searchrl.retrieval.server import RetrieveRequest, create_app

    assert RetrieveRequest(queries=["q"]).model_dump() == {"queries": ["q"], "topk": None, "return_scores": False}
    client = TestClient(create_app(load_index(tiny_bm25)))
    body = {"queries": ["Turing machine"], "topk": 3, "return_scores": True}
    item = client.post("/retrieve", json=body).json()["result"][0][0]
    assert set(item) == {"document", "score"} and isinstance(item["score"], float)
    assert item["document"]["contents"].split("\n")[0] == "Alan Turing"
    theirs = {
        "document": {"title": "Evan Morris", "text": "Evan Morris was.", "contents": '"Evan Morris"\nEvan Morris was.'}
    }
    hit = parse_result_item(theirs | {"score": 12.5})
    assert (hit.id, hit.title, hit.text, hit.score) == ("", "Evan Morris", "Evan Morris was.", 12.5)
