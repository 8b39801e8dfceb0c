"""Dense retrieval: encoder conventions, faiss index kinds, memory-mapped loading, hybrid fusion (torch-free)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from searchrl.data.corpus import PassageStore
from searchrl.retrieval.dense import (
    BGE_QUERY_INSTRUCTION,
    DenseOptions,
    DenseRetriever,
    Encoder,
    EncoderProfile,
    encoder_profile,
    read_faiss_index,
)
from searchrl.retrieval.hybrid import HybridRetriever, rrf_fuse
from searchrl.retrieval.index import build_index, load_index, read_manifest


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("intfloat/e5-base-v2", EncoderProfile("query: ", "passage: ", True)),
        ("intfloat/multilingual-e5-large", EncoderProfile("query: ", "passage: ", True)),
        ("BAAI/bge-large-en-v1.5", EncoderProfile(BGE_QUERY_INSTRUCTION, "", True)),
        ("BAAI/bge-m3", EncoderProfile("", "", True)),
        # FlashRAG's set_default_instruction and BGE's model card: the Chinese models take a Chinese instruction.
        ("BAAI/bge-large-zh-v1.5", EncoderProfile("为这个句子生成表示以用于检索相关文章：", "", True)),
        ("BAAI/bge-small-zh", EncoderProfile("为这个句子生成表示以用于检索相关文章：", "", True)),
        ("facebook/dpr-question_encoder-single-nq-base", EncoderProfile("", "", False)),
        ("minilm-l6-v2", EncoderProfile("", "", True)),
        ("/models/ae5f00/minilm", EncoderProfile("", "", True)),  # "e5" inside a hash is not E5
    ],
)
def test_encoder_profile(name: str, profile: EncoderProfile) -> None:
    assert encoder_profile(name) == profile


def test_an_original_dpr_encoder_is_refused_in_one_line(tmp_path: Path) -> None:
    """transformers' DPR question encoder loads into sentence-transformers with no text modality (dimension 0) and
    only fails at the first encode, with sentence-transformers' words; it is refused when loaded, naming the fix."""
    from transformers import BertTokenizerFast, DPRConfig, DPRQuestionEncoder

    path = tmp_path / "tiny-dpr-question_encoder"
    cfg = DPRConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    DPRQuestionEncoder(cfg).save_pretrained(path)
    (path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)])
    )
    BertTokenizerFast(str(path / "vocab.txt")).save_pretrained(path)
    with pytest.raises(ValueError, match="DPR's question and context encoders are two models.*intfloat/e5-base-v2"):
        Encoder(DenseOptions(encoder=str(path), normalize=False))


def test_options_overrides_win_over_inferred_profile() -> None:
    o = DenseOptions.for_encoder("intfloat/e5-base-v2", query_prefix="q: ", normalize=None)
    assert (o.query_prefix, o.passage_prefix, o.normalize) == ("q: ", "passage: ", True)
    with pytest.raises(ValueError, match="unknown faiss index type"):
        DenseOptions(faiss="annoy")


def test_encoder_applies_prefixes_and_normalisation(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[list[str], bool]] = []

    class FakeST:
        max_seq_length = 512

        def get_embedding_dimension(self) -> int:
            return 4

        def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar):
            seen.append((list(texts), normalize_embeddings))
            return np.ones((len(texts), 4), dtype=np.float64)

    monkeypatch.setattr("searchrl.models.load_embedder", lambda spec, device=None: FakeST())
    enc = Encoder(DenseOptions.for_encoder("intfloat/e5-small-v2", max_length=128))
    out = enc.encode(["who?", "what?"], is_query=True)
    enc.encode(["A passage."], is_query=False)
    assert out.dtype == np.float32 and out.shape == (2, 4) and out.flags["C_CONTIGUOUS"]
    assert seen == [(["query: who?", "query: what?"], True), (["passage: A passage."], True)]
    assert enc.model.max_seq_length == 128 and enc.dimension == 4


def test_an_encoder_trained_for_raw_inner_product_is_not_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    class FakeST:
        def get_embedding_dimension(self) -> int:
            return 2

        def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar):
            seen.append(normalize_embeddings)
            return np.full((len(texts), 2), 3.0)

    monkeypatch.setattr("searchrl.models.load_embedder", lambda spec, device=None: FakeST())
    enc = Encoder(DenseOptions.for_encoder("acme/dpr-style-encoder"))
    enc.encode(["who?"], is_query=True)
    enc.encode(["A passage."], is_query=False)
    assert seen == [False, False]


class _NoIndex:
    """Stands in for a faiss index where only the embedding of queries is looked at."""

    ntotal = 0
    d = 64


def test_a_query_repeated_in_a_batch_or_a_later_call_gets_its_own_embedding(hashing_encoder) -> None:
    """Rollouts of one group repeat queries: each occurrence gets the query's embedding, encoded once, and a later
    call takes it from the cache, equal to a fresh encoding."""
    r = DenseRetriever(_NoIndex(), [], hashing_encoder)  # type: ignore[arg-type]
    want = {q: hashing_encoder.embed(q) for q in ("volcano lava", "honey bee colonies")}
    hashing_encoder.calls.clear()
    first = r.embed_queries(["volcano lava", "honey bee colonies", "volcano lava", "volcano lava"])
    again = r.embed_queries(["honey bee colonies", "volcano lava"])
    for row, q in zip(first, ["volcano lava", "honey bee colonies", "volcano lava", "volcano lava"], strict=True):
        np.testing.assert_array_equal(row, want[q])
    np.testing.assert_array_equal(again, np.stack([want["honey bee colonies"], want["volcano lava"]]))
    assert hashing_encoder.calls == [2], "two distinct queries encoded once, the later call all from the cache"


def _dense(tiny_corpus: Path, tmp_path: Path, encoder, faiss: str) -> DenseRetriever:
    from searchrl.data.corpus import iter_passages

    vecs = encoder.encode([p.contents for p in iter_passages(tiny_corpus)], is_query=False)
    out = build_index(tiny_corpus, "dense", tmp_path / faiss, vectors=vecs, faiss=faiss, nprobe=4)
    options = DenseOptions(**read_manifest(out)["options"]["dense"])
    store = PassageStore(out / "passages")
    return DenseRetriever(read_faiss_index(out / "dense" / "index.faiss", options), store, encoder)


@pytest.mark.parametrize("faiss", ["flat", "ivf", "hnsw"])
def test_faiss_kinds_find_the_right_passage(tiny_corpus: Path, tmp_path: Path, hashing_encoder, faiss: str) -> None:
    r = _dense(tiny_corpus, tmp_path, hashing_encoder, faiss)
    queries = ["Turing machine mathematician", "Nepal highest mountain", "honey nectar colonies"]
    hashing_encoder.calls.clear()
    results = r.search(queries, 3)
    assert hashing_encoder.calls == [3], "one encoder call for the whole batch"
    assert [hits[0].title for hits in results] == ["Alan Turing", "Mount Everest", "Honey bee"]
    for q, hits in zip(queries, results, strict=True):
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # the score is the inner product of the query and passage embeddings
        qv, pv = hashing_encoder.encode([q, hits[0].contents], is_query=True)
        assert hits[0].score == pytest.approx(float(qv @ pv), rel=1e-5)


def test_flat_index_opens_memory_mapped(tiny_corpus: Path, tmp_path: Path, hashing_encoder) -> None:
    """The memory-mapped flat index gives the same results as a fully read one."""
    import faiss

    r = _dense(tiny_corpus, tmp_path, hashing_encoder, "flat")
    plain = faiss.read_index(str(tmp_path / "flat" / "dense" / "index.faiss"))
    q = hashing_encoder.encode(["volcano lava"], is_query=True)
    np.testing.assert_array_equal(r.index.search(q, 5)[1], plain.search(q, 5)[1])


def test_dimension_and_count_mismatch_are_refused(tiny_corpus: Path, tmp_path: Path, hashing_encoder) -> None:
    r = _dense(tiny_corpus, tmp_path, hashing_encoder, "flat")

    class Wrong:
        dimension = 32
        options = DenseOptions(encoder="other")

    with pytest.raises(ValueError, match="64-d but encoder 'other' gives 32-d"):
        DenseRetriever(r.index, r.store, Wrong())  # type: ignore[arg-type]


def test_rrf_fuse() -> None:
    a = [(1, 10.0), (2, 9.0), (3, 8.0)]
    b = [(3, 0.9), (1, 0.8), (4, 0.7)]
    fused = rrf_fuse([a, b], depth=4, rrf_k=60)
    assert [row for row, _ in fused] == [1, 3, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert rrf_fuse([a, b], depth=2) == fused[:2]


def test_rrf_ties_go_to_the_lower_row() -> None:
    """Rows 5 and 2 are first and second in one ranking each: equal fused scores, the lower row first."""
    fused = rrf_fuse([[(5, 3.0), (2, 1.0)], [(2, 0.9), (5, 0.1)]], depth=2, rrf_k=60)
    assert [row for row, _ in fused] == [2, 5]
    assert [score for _, score in fused] == pytest.approx([1 / 61 + 1 / 62] * 2)


class _Ranked:
    """A retriever part that answers fixed rows (best first) and records the depths it was asked for."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows
        self.store = list(range(10))
        self.depths: list[int] = []

    def rank(self, queries: list[str], depth: int) -> list[list[tuple[int, float]]]:
        self.depths.append(depth)
        return [[(r, 1.0) for r in self.rows[:depth]] for _ in queries]


def test_hybrid_asks_each_side_for_its_candidates_and_fuses_with_its_own_rrf_k() -> None:
    """Row 3 is third on both sides: asked for only the top 1, neither side would return it; with 3 candidates it
    wins, 2 / (rrf_k + 3) against 1 / (rrf_k + 1) for rows 1 and 4 (rrf_k = 1: 0.5 against 0.5, ties by row)."""
    sparse, dense = _Ranked([1, 2, 3]), _Ranked([4, 5, 3])
    hybrid = HybridRetriever(sparse, dense, candidates=3)  # type: ignore[arg-type]
    assert hybrid.rank(["q"], 1) == [[(3, pytest.approx(2 / 63))]]
    assert sparse.depths == dense.depths == [3]
    tight = HybridRetriever(_Ranked([1, 2, 3]), _Ranked([4, 5, 3]), rrf_k=1.0, candidates=3)  # type: ignore[arg-type]
    assert tight.rank(["q"], 3) == [[(1, 0.5), (3, 0.5), (4, 0.5)]]


def test_hybrid_fuses_bm25_and_dense(tiny_corpus: Path, tiny_bm25: Path, tmp_path: Path, hashing_encoder) -> None:
    sparse = load_index(tiny_bm25)
    dense = _dense(tiny_corpus, tmp_path, hashing_encoder, "flat")
    hybrid = HybridRetriever(sparse, dense, candidates=5)
    hits = hybrid.search(["board game for two players", "carbon dioxide sugar"], 2)
    assert [h[0].title for h in hits] == ["Chess", "Photosynthesis"]
    assert all(len(h) == 2 for h in hits)
    assert hits[0][0].score == pytest.approx(2 / 61)  # ranked first by both


def test_retrievers_show_their_kind_size_encoder_and_index(
    tiny_corpus: Path, tiny_bm25: Path, tmp_path: Path, hashing_encoder
) -> None:
    sparse = load_index(tiny_bm25)
    n = len(sparse)
    assert repr(sparse) == f"BM25Retriever(passages={n}, index={str(tiny_bm25)!r})"
    dense = _dense(tiny_corpus, tmp_path, hashing_encoder, "flat")
    dense.manifest = {"encoder": "hashing"}
    assert repr(dense) == f"DenseRetriever(passages={n}, encoder='hashing', index={str(tmp_path / 'flat')!r})"
    hybrid = HybridRetriever(sparse, dense, manifest={"kind": "hybrid", "encoder": "hashing"})
    assert repr(hybrid) == f"HybridRetriever(passages={n}, encoder='hashing', index={str(tiny_bm25)!r})"


def test_equal_scores_rank_by_row_so_a_shallow_search_is_the_head_of_a_deep_one(hashing_encoder) -> None:
    """Duplicate passages score alike; faiss' flat index lists such ties highest row first, so rank(q, 10) was not
    the head of rank(q, 45), and a query's hits depended on the k of the requests the server merged it with."""
    import faiss

    vecs = np.zeros((50, 64), dtype=np.float32)
    vecs[:, 0] = 1.0
    vecs[::7, 0] = 0.5  # rows 0, 7, ..., 49 score lower; the other 43 tie
    index = faiss.IndexFlatIP(64)
    index.add(vecs)
    r = DenseRetriever(index, list(range(50)), hashing_encoder)  # type: ignore[arg-type]
    r.embed_queries = lambda queries: np.eye(64, dtype=np.float32)[: len(queries)]  # type: ignore[method-assign]
    tied = [i for i in range(50) if i % 7]  # 42 rows
    shallow, deep, whole = (r.rank(["q"], k)[0] for k in (10, 45, 60))
    assert [row for row, _ in shallow] == tied[:10]
    assert [row for row, _ in deep] == tied + [0, 7, 14]  # the lower scores' tie crosses the cut: lowest rows kept
    assert [row for row, _ in whole] == tied + [0, 7, 14, 21, 28, 35, 42, 49]
    assert [score for _, score in deep] == [1.0] * 42 + [0.5] * 3
    shallow, flat = r.rank(["q", "orthogonal to every passage"], 10)  # one batch: a tie-free head, all tied
    assert [row for row, _ in shallow] == tied[:10] and [row for row, _ in flat] == list(range(10))
    assert [row for row, _ in r.rank(["q"], 49)[0]] == tied + [0, 7, 14, 21, 28, 35, 42]  # one short of all


def test_a_tie_crossing_the_cut_is_searched_no_deeper_than_the_tie_depth(hashing_encoder, monkeypatch) -> None:
    import faiss

    import searchrl.retrieval.dense as dense

    index = faiss.IndexFlatIP(64)
    index.add(np.zeros((500, 64), dtype=np.float32))  # every passage scores 0 for every query
    asked: list[int] = []

    class Counting:
        d, ntotal = 64, 500

        def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            asked.append(k)
            return index.search(q, k)

    monkeypatch.setattr(dense, "TIE_DEPTH", 40)
    r = DenseRetriever(Counting(), list(range(500)), hashing_encoder)  # type: ignore[arg-type]
    r.embed_queries = lambda queries: np.eye(64, dtype=np.float32)[: len(queries)]  # type: ignore[method-assign]
    assert len(r.rank(["q"], 10)[0]) == 10
    assert asked == [11, 22, 40]  # one extra row, then doubling up to the tie depth
    asked.clear()
    assert [row for row, _ in r.rank(["q"], 45)[0]] == list(range(45))  # deeper than TIE_DEPTH asks once
    assert asked == [46]
