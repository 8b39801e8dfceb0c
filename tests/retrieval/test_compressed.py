"""Compressed dense indexes (faiss factory + exact fp16 re-ranking), Flat-file conversion, passage text from disk."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from searchrl.data.corpus import PassageStore
from searchrl.retrieval.compressed import VECTORS_FILE, RerankedIndex, RowFile, VectorWriter, write_vector_file
from searchrl.retrieval.convert import convert_flat_index, default_factory, read_flat_file
from searchrl.retrieval.dense import DenseOptions, read_faiss_index
from searchrl.retrieval.index import build_index, load_index, read_manifest

N, D = 3000, 64
FACTORY = "IVF32,PQ16x4"


def clustered(n: int, d: int, seed: int) -> np.ndarray:
    """Unit vectors around 50 random centres: clustered like real embeddings, unlike uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, d))
    x = centres[rng.integers(0, 50, n)] + 0.6 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    """A corpus of N passages, their vectors, and held-out queries drawn from the same distribution."""
    path = tmp_path_factory.mktemp("synth") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "contents": f"T{i}\npassage {i}"}) + "\n" for i in range(N)))
    vecs = clustered(N + 200, D, seed=0)
    return path, vecs[:N], vecs[N:]


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


def exact_top(vecs: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ vecs.T), axis=1, kind="stable")[:, :k]


def test_vector_file_round_trip_and_sample(tmp_path: Path) -> None:
    x = clustered(1000, 8, seed=1)
    path = write_vector_file((x[i : i + 300] for i in range(0, 1000, 300)), 1000, 8, tmp_path / "v.npy")
    assert np.load(path).dtype == np.float16 and np.load(path).shape == (1000, 8)
    rows = RowFile.npy(path)
    np.testing.assert_allclose(np.concatenate(list(rows.chunks(128))), x, atol=1e-3)
    sample = rows.sample(100, seed=0)
    assert sample.shape == (100, 8) and sample.dtype == np.float32
    assert len({tuple(r) for r in sample.round(3)}) == 100  # distinct rows
    with pytest.raises(RuntimeError, match="expected 5 vectors, got 2"):
        with VectorWriter(tmp_path / "w.npy", 5, 8) as w:
            w.write(x[:2])


def test_compressed_index_recall_against_exact(synthetic, tmp_path: Path) -> None:
    corpus, vecs, queries = synthetic
    out = build_index(
        corpus,
        "dense",
        tmp_path / "pq",
        vectors=vecs,
        faiss=FACTORY,
        nprobe=8,
        candidates=50,
        query_encoder="sentence-transformers",
    )
    dense = read_manifest(out)["options"]["dense"]
    assert (dense["faiss"], dense["nprobe"], dense["candidates"]) == (FACTORY, 8, 50)
    assert (out / "dense" / VECTORS_FILE).is_file()
    index = read_faiss_index(out / "dense" / "index.faiss", DenseOptions(**dense))
    assert isinstance(index, RerankedIndex) and (index.ntotal, index.d) == (N, D)
    exact = exact_top(vecs, queries, 10)
    scores, rows = index.search(queries, 10)
    assert recall(rows[:, :3], exact[:, :3]) >= 0.95
    assert recall(rows, exact) >= 0.9
    # scores are exact inner products (fp16 vectors), best first
    np.testing.assert_allclose(scores[:, 0], np.sum(queries * vecs[rows[:, 0]], axis=1), atol=2e-3)
    assert np.all(np.diff(scores, axis=1) <= 0)
    # without re-ranking, PQ codes alone do worse: re-ranking is what buys the recall
    raw = index.index.search(queries, 10)[1]
    assert recall(raw[:, :3], exact[:, :3]) < recall(rows[:, :3], exact[:, :3])


def test_compressed_index_serves_through_load_index(synthetic, tmp_path: Path, monkeypatch) -> None:
    corpus, vecs, queries = synthetic

    class VectorEncoder:  # "encodes" query i as held-out vector i
        dimension = D
        options = DenseOptions(encoder="vectors")

        def encode(self, texts, *, is_query: bool, batch_size: int = 64) -> np.ndarray:
            return queries[[int(t) for t in texts]]

    out = build_index(
        corpus, "dense", tmp_path / "pq", vectors=vecs, faiss=FACTORY, nprobe=8, query_encoder="sentence-transformers"
    )
    monkeypatch.setattr("searchrl.retrieval.dense.Encoder", lambda options: VectorEncoder())
    retriever = load_index(out, corpus)
    hits = retriever.search(["0", "1"], 3)
    assert [h.id for h in hits[0]] == [f"p{r}" for r in exact_top(vecs, queries[:1], 3)[0]]
    assert hits[1][0].title == f"T{exact_top(vecs, queries[1:2], 1)[0, 0]}"


def test_bad_factory_is_one_clear_line(synthetic, tmp_path: Path) -> None:
    corpus, vecs, _ = synthetic
    with pytest.raises(ValueError, match="must divide"):
        build_index(
            corpus, "dense", tmp_path / "a", vectors=vecs, faiss="IVF8,PQ7", query_encoder="sentence-transformers"
        )
    with pytest.raises(ValueError, match="only 3000 passages"):
        build_index(
            corpus, "dense", tmp_path / "b", vectors=vecs, faiss="IVF4096,PQ8", query_encoder="sentence-transformers"
        )
    with pytest.raises(ValueError, match="unknown faiss index type 'annoy'"):
        DenseOptions(faiss="annoy")


# ---------------------------------------------------------------------------------------------------- convert
def write_flat(vecs: np.ndarray, path: Path, *, metric: str = "ip") -> Path:
    import faiss

    index = faiss.IndexFlatIP(vecs.shape[1]) if metric == "ip" else faiss.IndexFlatL2(vecs.shape[1])
    index.add(vecs)
    faiss.write_index(index, str(path))
    return path


def test_read_flat_file_matches_faiss(tmp_path: Path) -> None:
    x = clustered(500, 24, seed=2)
    rows = read_flat_file(write_flat(x, tmp_path / "e5_Flat.index"))
    assert rows.shape == (500, 24)
    np.testing.assert_array_equal(np.concatenate(list(rows.chunks(64))), x)
    with pytest.raises(ValueError, match="not inner product"):
        read_flat_file(write_flat(x, tmp_path / "l2.index", metric="l2"))
    data = (tmp_path / "e5_Flat.index").read_bytes()
    (tmp_path / "cut.index").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        read_flat_file(tmp_path / "cut.index")
    (tmp_path / "hnsw.index").write_bytes(b"IHNf" + data[4:])
    with pytest.raises(ValueError, match="not a faiss Flat index"):
        read_flat_file(tmp_path / "hnsw.index")
    with pytest.raises(FileNotFoundError, match="e5_Flat.index"):
        read_flat_file(tmp_path / "missing.index")


def test_convert_flat_index(synthetic, tmp_path: Path) -> None:
    import faiss

    corpus, vecs, queries = synthetic
    flat = write_flat(vecs, tmp_path / "e5_Flat.index")
    out = convert_flat_index(flat, corpus, tmp_path / "conv", faiss=FACTORY, nprobe=8, candidates=50)
    manifest = read_manifest(out)
    assert manifest["vectors_source"].endswith("e5_Flat.index") and manifest["encoder"] == "intfloat/e5-base-v2"
    assert manifest["options"]["dense"]["query_prefix"] == "query: "  # E5's convention, from the name
    index = read_faiss_index(out / "dense" / "index.faiss", DenseOptions(**manifest["options"]["dense"]))
    reference = faiss.read_index(str(flat))
    truth = reference.search(queries, 10)[1]
    assert recall(index.search(queries, 3)[1], truth[:, :3]) >= 0.95
    assert recall(index.search(queries, 10)[1], truth) >= 0.9
    store = PassageStore(out / "passages")
    assert len(store) == N and store[7].id == "p7"


def test_convert_refuses_a_corpus_of_another_size(synthetic, tmp_path: Path) -> None:
    corpus, vecs, _ = synthetic
    flat = write_flat(vecs[:100], tmp_path / "small.index")
    with pytest.raises(ValueError, match="holds 100 vectors but the corpus has 3000"):
        convert_flat_index(flat, corpus, tmp_path / "x", faiss="IVF2,PQ8x4")


def test_default_factory_fits_faiss() -> None:
    assert default_factory(21_000_000, 768) == "OPQ64,IVF16384,PQ64"
    assert default_factory(3000, 64) == "OPQ4,IVF76,PQ4"  # at most N // 39 lists
    assert default_factory(10, 8).startswith("OPQ1,IVF1,")


def test_cli_convert_and_build(synthetic, tmp_path: Path, monkeypatch, make_hashing_encoder) -> None:
    from searchrl.cli import app

    corpus, vecs, _ = synthetic
    flat = write_flat(vecs, tmp_path / "e5_Flat.index")
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "index",
            "convert",
            "--flat",
            str(flat),
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "c"),
            "--faiss",
            FACTORY,
            "--nprobe",
            "4",
        ],
    )
    assert res.exit_code == 0, res.output
    assert read_manifest(tmp_path / "c")["options"]["dense"]["nprobe"] == 4
    monkeypatch.setattr("searchrl.retrieval.dense.Encoder", lambda options: make_hashing_encoder())
    res = runner.invoke(
        app,
        [
            "index",
            "build",
            "--corpus",
            str(corpus),
            "--kind",
            "dense",
            "--out",
            str(tmp_path / "b"),
            "--faiss",
            "IVF16,PQ8x4",
            "--candidates",
            "20",
            "--query-encoder",
            "sentence-transformers",
        ],
    )
    assert res.exit_code == 0, res.output
    dense = read_manifest(tmp_path / "b")["options"]["dense"]
    assert (dense["faiss"], dense["candidates"]) == ("IVF16,PQ8x4", 20)
    assert np.load(tmp_path / "b" / "dense" / VECTORS_FILE, mmap_mode="r").shape == (N, 64)


# ------------------------------------------------------------------------------------------ passage text from disk
def test_passage_store_reads_only_the_requested_records(synthetic, tmp_path: Path, monkeypatch) -> None:
    corpus, _, _ = synthetic
    out = build_index(corpus, "bm25", tmp_path / "bm25")
    store = PassageStore(out / "passages")
    reads: list[tuple[int, int]] = []
    import os

    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append((n, off)) or real(fd, n, off))
    passages = store.get_many([2999, 5, 1234])
    assert [p.id for p in passages] == ["p2999", "p5", "p1234"]
    assert len(reads) == 3 and sum(n for n, _ in reads) < 200  # three short records, not the 100 kB file
    assert isinstance(store._offsets, np.memmap)  # noqa: SLF001 - offsets stay on disk too


def test_build_skips_polysemous_training(synthetic, tmp_path: Path) -> None:
    """faiss' factory IVF-PQ trains polysemous codes by default (minutes at 768-d PQ96); re-ranked search never
    uses them, so the build turns it off."""
    import faiss

    from searchrl.retrieval.compressed import build_compressed, make_factory_index

    fresh = make_factory_index(D, "IVF16,PQ8")  # kept referenced: the IVF part below lives inside it
    assert faiss.downcast_index(faiss.extract_index_ivf(fresh)).do_polysemous_training  # faiss' default
    _, vecs, _ = synthetic
    path = write_vector_file([vecs], N, D, tmp_path / "v.npy")
    build_compressed(path, tmp_path / "index.faiss", "IVF16,PQ8")
    built = faiss.read_index(str(tmp_path / "index.faiss"))
    assert not faiss.downcast_index(faiss.extract_index_ivf(built)).do_polysemous_training


def test_refine_stage_scans_more_and_reranks_few(synthetic, tmp_path: Path) -> None:
    """A factory ending in Refine(...) scans candidates x refine_factor passages, keeps the candidates best by its
    finer in-RAM codes, and only those are re-ranked exactly: recall of a plain index re-ranking the whole pool."""
    import faiss

    corpus, vecs, queries = synthetic
    factory = "IVF32,PQ8x4fs,Refine(SQ8)"
    out = build_index(corpus, "dense", tmp_path / "rf", vectors=vecs, faiss=factory, nprobe=8, candidates=10)
    dense = read_manifest(out)["options"]["dense"]
    assert (dense["faiss"], dense["candidates"], dense["refine_factor"]) == (factory, 10, 10)
    exact = exact_top(vecs, queries, 10)
    found = {}
    for refine_factor in (1, 10):
        index = read_faiss_index(
            out / "dense" / "index.faiss", DenseOptions(**(dense | {"refine_factor": refine_factor}))
        )
        assert faiss.downcast_index(index.index).k_factor == refine_factor
        found[refine_factor] = index.search(queries, 10)[1]
        with faiss_threads(2):  # one query: the probe-parallel scan, sized for all the passages it returns
            index.search(queries[:1], 10)
            assert index._fast_scan.implem == (15 if 10 * refine_factor > 20 else 14)
    # the coarse 8-byte codes alone rank poorly; scanning 10x as many and refining on SQ8 codes recovers the top 10
    assert recall(found[1], exact) < 0.9 <= recall(found[10], exact)
    plain = build_index(
        corpus, "dense", tmp_path / "pl", vectors=vecs, faiss="IVF32,PQ8x4fs", nprobe=8, candidates=100
    )
    whole_pool = read_faiss_index(
        plain / "dense" / "index.faiss", DenseOptions(**read_manifest(plain)["options"]["dense"])
    )
    assert recall(found[10], exact) >= recall(whole_pool.search(queries, 10)[1], exact) - 0.03
    with pytest.raises(ValueError, match="refine_factor must be >= 1"):
        DenseOptions(faiss=factory, refine_factor=0)


def test_config_accepts_factory_strings() -> None:
    from pydantic import ValidationError

    from searchrl.config import RetrievalConfig

    for kind in ("flat", "ivf", "hnsw", "IVF1024,PQ96", "OPQ64,IVF4096,PQ64x4fs", "IVF2048,PQ192x4fs,Refine(PQ192)"):
        assert RetrievalConfig(faiss=kind).faiss == kind
    for bad in ("flta", "ivf,pq", ""):
        with pytest.raises(ValidationError):
            RetrievalConfig(faiss=bad)


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_reranking_leaves_no_vector_pages_resident(synthetic, tmp_path: Path) -> None:
    """Re-ranking reads candidate rows by position, not through a memory map: the vector file never accumulates
    in the server's resident memory."""
    corpus, vecs, queries = synthetic
    out = build_index(
        corpus,
        "dense",
        tmp_path / "pq",
        vectors=vecs,
        faiss=FACTORY,
        nprobe=32,
        candidates=N,
        query_encoder="sentence-transformers",
    )
    vector_file = (out / "dense" / VECTORS_FILE).resolve()
    index = RerankedIndex.open(out / "dense", nprobe=32, candidates=N)  # every row is a candidate
    index.search(queries, 10)
    assert _mapped_rss_kb(vector_file) == 0
    mapped = np.load(vector_file, mmap_mode="r")  # a read through a memory map does stay resident (and is seen)
    np.asarray(mapped[: N // 2], dtype=np.float32)
    assert _mapped_rss_kb(vector_file) > 0


def test_row_reader_reads_the_rows_a_memory_map_would(tmp_path: Path) -> None:
    """Scattered rows, runs of consecutive rows, the first and last row, and no rows at all."""
    from searchrl.retrieval.compressed import RowReader

    rng = np.random.default_rng(0)
    data = rng.standard_normal((1000, 24)).astype(np.float16)
    path = tmp_path / VECTORS_FILE
    np.save(path, data)
    reader = RowReader(path)
    rows = np.unique(np.r_[rng.choice(1000, 100), np.arange(40, 60), [0, 999]])
    np.testing.assert_array_equal(reader.take(rows), data[rows].astype(np.float32))
    assert reader.take(np.array([], dtype=np.int64)).shape == (0, 24)
    with pytest.raises(IndexError, match="out of range"):
        reader.take(np.array([1000]))


def test_row_reader_without_preadv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Platforms without ``os.preadv`` (Windows) read the same rows through a locked seek + read."""
    from searchrl.retrieval.compressed import RowReader

    data = np.arange(200 * 6, dtype=np.float16).reshape(200, 6)
    path = tmp_path / VECTORS_FILE
    np.save(path, data)
    monkeypatch.delattr(os, "preadv", raising=False)
    rows = np.array([0, 3, 4, 5, 199])
    np.testing.assert_array_equal(RowReader(path).take(rows), data[rows].astype(np.float32))


def test_row_reader_names_a_file_truncated_after_opening(tmp_path: Path) -> None:
    from searchrl.retrieval.compressed import RowReader

    path = tmp_path / VECTORS_FILE
    np.save(path, np.ones((100, 8), dtype=np.float16))
    reader = RowReader(path)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 16)
    with pytest.raises(OSError, match="truncated"):
        reader.take(np.array([10, 99]))


def test_row_reader_names_a_truncated_vector_file(tmp_path: Path) -> None:
    from searchrl.retrieval.compressed import RowReader

    path = tmp_path / VECTORS_FILE
    np.save(path, np.zeros((100, 8), dtype=np.float16))
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 16)
    with pytest.raises(ValueError, match="truncated"):
        RowReader(path)


@contextlib.contextmanager
def faiss_threads(n: int):
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def test_fast_scan_single_queries_spread_over_lists_and_match_the_batch(synthetic, tmp_path: Path) -> None:
    """A fast-scan index searches one query with faiss' probe-parallel implementation (14 with a heap, 15 with a
    reservoir for more than 20 candidates) and a batch with the default; both give the same hits."""
    corpus, vecs, queries = synthetic
    with faiss_threads(2):
        _check_fast_scan(corpus, vecs, queries, tmp_path)


def _check_fast_scan(corpus: Path, vecs: np.ndarray, queries: np.ndarray, tmp_path: Path) -> None:
    out = build_index(corpus, "dense", tmp_path / "fs", vectors=vecs, faiss="IVF32,PQ32x4fs", nprobe=8, candidates=50)
    index = RerankedIndex.open(out / "dense", nprobe=8, candidates=50)
    assert index._fast_scan is not None
    batch = queries[:10]
    scores, rows = index.search(batch, 10)
    assert index._fast_scan.implem == 0
    single = [index.search(q[None], 10) for q in batch]
    assert index._fast_scan.implem == 15  # 50 candidates
    np.testing.assert_array_equal(np.concatenate([r for _, r in single]), rows)
    np.testing.assert_allclose(np.concatenate([s for s, _ in single]), scores, rtol=1e-6)
    assert recall(rows, exact_top(vecs, batch, 10)) > 0.8
    few = RerankedIndex(index.index, index.vectors, candidates=20)
    few_single = [few.search(q[None], 10) for q in batch]
    assert few._fast_scan.implem == 14  # 20 candidates: a heap
    few_rows = np.concatenate([r for _, r in few_single])
    faiss_default = few.search(batch, 10)[1]
    np.testing.assert_array_equal(few_rows, faiss_default)
    plain = RerankedIndex.open(
        build_index(corpus, "dense", tmp_path / "pq", vectors=vecs, faiss=FACTORY) / "dense", nprobe=8, candidates=50
    )
    assert plain._fast_scan is None


def test_reranked_exact_ties_go_to_the_lowest_rows() -> None:
    """Equal exact scores are ordered by row whatever order the compressed stage returned its candidates in."""
    import faiss

    vecs = np.zeros((6, 4), dtype=np.float32)
    vecs[:, 0] = [0.5, 1.0, 0.2, 1.0, 1.0, 0.9]  # rows 1, 3 and 4 tie on the query e0
    flat = faiss.IndexFlatIP(4)
    flat.add(vecs)
    index = RerankedIndex(flat, vecs, candidates=6)

    class Backwards:  # a compressed stage listing its candidates highest row first
        d, ntotal = 4, 6

        def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            rows = np.tile(np.arange(5, -1, -1)[:k], (len(q), 1))
            return np.zeros(rows.shape, dtype=np.float32), rows

    index.index = Backwards()
    scores, rows = index.search(np.eye(4, dtype=np.float32)[:1], 4)
    assert rows.tolist() == [[1, 3, 4, 5]]
    np.testing.assert_allclose(scores, [[1.0, 1.0, 1.0, 0.9]])
