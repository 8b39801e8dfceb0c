"""Retrieval of text outside plain ASCII English: the same word in other bytes is the same term, a word of a
script with combining marks (Devanagari, pointed Arabic or Hebrew) is one term, and the index's analysis at build
time and at query time agree."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from searchrl.retrieval.bm25 import Analyzer
from searchrl.retrieval.index import build_index, load_index

NFD = unicodedata.normalize("NFD", "Zürich")


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        (NFD, ["zürich"]),  # a combining diaeresis ended the word: "zu", "rich"
        ("Zür\u200bich Ång\u00adström", ["zürich", "ångström"]),  # invisible characters inside words
        ("मुंबई भारत का शहर है", ["मुंबई", "भारत", "का", "शहर", "है"]),  # vowel signs ended the words
        ("مُحَمَّد", ["مُحَمَّد"]),  # pointed Arabic lost every term
        ("שָׁלוֹם", ["שָׁלוֹם"]),
        ("１９９０年 ＡＢＣ", ["1990", "年", "abc"]),  # full-width forms are their plain letters and digits
        ("İstanbul", ["i̇stanbul"]),  # lower-cased İ keeps its dot as a mark: one word, not "stanbul"
    ],
    ids=["nfd", "invisible", "devanagari", "arabic", "hebrew", "full-width", "dotted-i"],
)
def test_words_with_marks_and_other_forms_are_whole_terms(text, terms) -> None:
    assert Analyzer(None, None)(text) == terms


def test_build_and_query_analysis_agree_on_non_ascii_text(tmp_path: Path) -> None:
    rows = [
        {"id": "zurich", "contents": "Zürich\nZürich is the largest city in Switzerland."},
        {"id": "station", "contents": unicodedata.normalize("NFD", "Hauptbahnhof\nDer Bahnhof von Zürich.")},
        {"id": "mumbai", "contents": "मुंबई\nमुंबई भारत का सबसे बड़ा शहर है।"},
        {"id": "arabic", "contents": "مُحَمَّد\nمُحَمَّد نبي الإسلام"},
        {"id": "tokyo", "contents": "東京\n１９９０年に東京で開かれた。"},
    ]
    corpus = tmp_path / "corpus.jsonl"
    # a byte-order mark, Windows line ends and \\u escapes (surrogate pairs too) as other tools write them
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(rows)]
    corpus.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    index = load_index(build_index(corpus, "bm25", tmp_path / "bm25"))
    assert [h.id for h in index.search(["Bahnhof Zürich"], 1)[0]] == ["station"]  # NFC query, NFD passage
    assert {h.id for h in index.search([NFD], 5)[0]} == {"zurich", "station"}
    assert [h.id for h in index.search(["मुंबई"], 1)[0]] == ["mumbai"]
    assert [h.id for h in index.search(["مُحَمَّد"], 1)[0]] == ["arabic"]
    assert [h.id for h in index.search(["1990"], 1)[0]] == ["tokyo"]
    assert index.search(["Zürich"], 1)[0][0].title == "Zürich"


def test_an_index_built_before_keeps_its_analysis(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "contents": "T\nमुंबई"}, ensure_ascii=False) + "\n", encoding="utf-8")
    index = build_index(corpus, "bm25", tmp_path / "bm25")
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["options"]["bm25"]["unicode_words"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    assert load_index(index).analyzer("मुंबई " + NFD) == ["बई", "zu", "rich"]


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dense")
    rows = [
        {"id": "zurich", "contents": "Zürich\nZürich is the largest city in Switzerland."},
        {"id": "tokyo", "contents": "東京\n東京は日本の首都です。"},
        {"id": "moscow", "contents": "Москва\nМосква — столица России."},
    ]
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return build_index(corpus, "hybrid", tmp / "hybrid", encoder="minilm-l6-v2")


@pytest.mark.parametrize("query_encoder", ["onnx", "sentence-transformers"])
def test_a_query_with_a_lone_surrogate_is_searched_without_it(dense_index: Path, query_encoder: str) -> None:
    """A client's JSON may escape half a UTF-16 pair ("\\ud800"); the encoder's tokenizer raised on it (a 500 from
    the service) and an HTTP client could not encode it."""
    index = load_index(dense_index, query_encoder=query_encoder)
    assert [h.id for h in index.search(["\ud800Zürich\udfff"], 1)[0]] == ["zurich"]


def test_the_service_and_its_client_carry_non_ascii_text(dense_index: Path) -> None:
    import httpx
    from fastapi.testclient import TestClient

    from searchrl.retrieval.client import RemoteRetriever
    from searchrl.retrieval.server import create_app

    with TestClient(create_app(load_index(dense_index))) as service:
        body = b'{"queries": ["\\ud800 Z\\u00fcrich", "\xe6\x9d\xb1\xe4\xba\xac", "\\ud83c\\udf89"], "topk": 1}'
        resp = service.post("/retrieve", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 200, resp.text
        result = resp.json()["result"]
        assert [r[0]["id"] for r in result[:2]] == ["zurich", "tokyo"]
        assert result[1][0]["contents"] == "東京\n東京は日本の首都です。"

        def forward(request: httpx.Request) -> httpx.Response:
            got = service.post("/retrieve", content=request.content, headers={"content-type": "application/json"})
            return httpx.Response(got.status_code, content=got.content, headers=dict(got.headers))

        remote = RemoteRetriever("http://retrieval.test", client=httpx.Client(transport=httpx.MockTransport(forward)))
        hits = remote.search(["Москва\ud800", "東京"], 1)
    assert [h[0].id for h in hits] == ["moscow", "tokyo"]
    assert hits[0][0].title == "Москва" and hits[1][0].text == "東京は日本の首都です。"
