"""Dense builds at scale: vectors streamed to disk (never all in memory), an interrupted encoding resumed, search
settings overridden when serving. Stub encoders, small corpora."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from searchrl.retrieval import dense_build
from searchrl.retrieval.dense_build import PROGRESS_FILE, flat_header, flat_layout_known
from searchrl.retrieval.index import build_index, load_index, read_manifest

WORDS = [f"w{i}" for i in range(400)]
FACTORY = "IVF2,PQ8x4"


def write_corpus(path: Path, n: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = [{"id": f"p{i}", "contents": f"T{i}\n" + " ".join(rng.choice(WORDS, 12))} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def one_faiss_thread():
    """faiss before 1.15 adds to an HNSW graph in a different order from run to run when it uses several threads;
    with one, two builds from the same vectors are the same bytes on every faiss the project admits."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


def use_encoder(monkeypatch: pytest.MonkeyPatch, encoder) -> None:
    monkeypatch.setattr("searchrl.retrieval.dense.Encoder", lambda options: encoder)


def vectors_of(corpus: Path, encoder) -> np.ndarray:
    from searchrl.data.corpus import iter_passages

    return encoder.encode([p.contents for p in iter_passages(corpus)], is_query=False)


def test_flat_file_is_written_as_faiss_writes_it() -> None:
    import faiss

    assert flat_layout_known()
    x = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    index = faiss.IndexFlatIP(7)
    index.add(x)
    assert faiss.serialize_index(index).tobytes() == flat_header(5, 7) + x.tobytes()


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_dense_build_never_holds_all_vectors(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hashing_encoder, one_faiss_thread
) -> None:
    """Peak Python-side memory stays far below one (N, D) float32 array, and the index is the one built from the
    same vectors held in an array (the precomputed path): same bytes on disk."""
    n, d = 2000, 768
    corpus = write_corpus(tmp_path / "c.jsonl", n)
    encoder = make_hashing_encoder(d)
    use_encoder(monkeypatch, encoder)
    monkeypatch.setattr("searchrl.retrieval.compressed.CHUNK_VALUES", 64 * d)  # ivf adds 64 rows at a time
    options = {"faiss": kind, "nlist": 1, "query_encoder": "sentence-transformers", "batch_size": 16}
    import faiss  # noqa: F401  (imported before measuring: a module's first import allocates too)

    flat_layout_known()
    tracemalloc.start()
    try:
        out = build_index(corpus, "dense", tmp_path / "streamed", **options)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.35 * n * d * 4, f"peak {peak:,} bytes for {n * d * 4:,} bytes of vectors"
    assert sorted(p.name for p in (out / "dense").iterdir()) == ["index.faiss"]  # no staging or progress file
    held = build_index(corpus, "dense", tmp_path / "held", vectors=vectors_of(corpus, encoder), **options)
    assert (out / "dense" / "index.faiss").read_bytes() == (held / "dense" / "index.faiss").read_bytes()
    hits = load_index(out).search(["w1 w2 w3", "w300 w17"], 5)
    assert [[(h.id, h.score) for h in q] for q in hits] == [
        [(h.id, h.score) for h in q] for q in load_index(held).search(["w1 w2 w3", "w300 w17"], 5)
    ]


class Interrupting:
    """Wraps an encoder; raises on the call after ``fail_after`` calls (None: never). Counts the texts encoded."""

    def __init__(self, inner, fail_after: int | None = None) -> None:
        self.inner, self.fail_after = inner, fail_after
        self.dimension, self.options = inner.dimension, inner.options
        self.encoded = 0
        self.calls = 0

    def encode(self, texts, *, is_query: bool, batch_size: int = 64) -> np.ndarray:
        if self.fail_after is not None and self.calls == self.fail_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.encoded += len(texts)
        return self.inner.encode(texts, is_query=is_query, batch_size=batch_size)


def without_times(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k not in ("created", "build_seconds")}


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw", FACTORY])
def test_an_interrupted_encoding_resumes_where_it_stopped(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hashing_encoder, capsys, one_faiss_thread
) -> None:
    n = 300
    corpus = write_corpus(tmp_path / "c.jsonl", n)
    opts = {"faiss": kind, "nlist": 2, "query_encoder": "sentence-transformers", "batch_size": 4}  # 32-row chunks
    plain = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, plain)
    reference = build_index(corpus, "dense", tmp_path / "ref", **opts)
    assert plain.encoded == n

    out = tmp_path / "idx"
    first = Interrupting(make_hashing_encoder(), fail_after=3)
    use_encoder(monkeypatch, first)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "dense", out, **opts)
    staging = tmp_path / ".idx.partial"
    assert staging.is_dir() and not out.exists()

    again = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, again)
    capsys.readouterr()
    build_index(corpus, "dense", out, **opts)
    assert again.encoded == n - 96, "only the rows the interrupted build had not encoded"
    said = " ".join(capsys.readouterr().err.split())
    assert "resuming the dense encoding of an interrupted build at row 96 of 300" in said
    assert not staging.exists() and not (out / "dense" / PROGRESS_FILE).exists()
    assert sorted(p.name for p in (out / "dense").iterdir()) == sorted(p.name for p in (reference / "dense").iterdir())
    for f in (reference / "dense").iterdir():
        assert (out / "dense" / f.name).read_bytes() == f.read_bytes(), f.name
    assert without_times(read_manifest(out)) == without_times(read_manifest(reference))


def test_a_changed_corpus_or_other_options_start_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hashing_encoder
) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", 200)
    opts = {"query_encoder": "sentence-transformers", "batch_size": 4}

    def interrupted(**extra) -> None:
        use_encoder(monkeypatch, Interrupting(make_hashing_encoder(), fail_after=2))
        with pytest.raises(KeyboardInterrupt):
            build_index(corpus, "dense", tmp_path / "idx", **opts, **extra)

    interrupted()
    write_corpus(corpus, 200, seed=1)  # same path, new content (size or mtime changes)
    fresh = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, fresh)
    build_index(corpus, "dense", tmp_path / "idx", **opts)
    assert fresh.encoded == 200

    interrupted(overwrite=True)
    fresh = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, fresh)
    build_index(corpus, "dense", tmp_path / "idx", **opts, overwrite=True, passage_prefix="passage: ")
    assert fresh.encoded == 200


def test_another_index_type_or_retrained_encoder_leaves_no_stale_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hashing_encoder
) -> None:
    """An interrupted ivf build then a flat one: the ivf staging file is not shipped inside the flat index. A local
    encoder whose weights changed since the interruption encodes everything again."""
    corpus = write_corpus(tmp_path / "c.jsonl", 200)
    opts = {"query_encoder": "sentence-transformers", "batch_size": 4, "nlist": 2}
    use_encoder(monkeypatch, Interrupting(make_hashing_encoder(), fail_after=2))
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "dense", tmp_path / "idx", faiss="ivf", **opts)
    use_encoder(monkeypatch, Interrupting(make_hashing_encoder()))
    out = build_index(corpus, "dense", tmp_path / "idx", faiss="flat", **opts)
    assert sorted(p.name for p in (out / "dense").iterdir()) == ["index.faiss"]

    model = tmp_path / "my-encoder"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"v1")
    use_encoder(monkeypatch, Interrupting(make_hashing_encoder(), fail_after=2))
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "dense", tmp_path / "idx2", encoder=str(model), **opts)
    (model / "model.safetensors").write_bytes(b"v2, trained again")
    fresh = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, fresh)
    build_index(corpus, "dense", tmp_path / "idx2", encoder=str(model), **opts)
    assert fresh.encoded == 200


def test_progress_is_recorded_as_chunks_are_written(tmp_path: Path, make_hashing_encoder, monkeypatch) -> None:
    """Every SAVE_EVERY_S seconds the record follows the file, so a killed build (no exception handler runs)
    loses little; a record never counts rows that are not on disk."""
    from searchrl.retrieval.dense_build import encode_to_file

    monkeypatch.setattr(dense_build, "SAVE_EVERY_S", 0.0)
    enc = make_hashing_encoder(8)
    seen: list[int] = []
    path = tmp_path / "v.npy"

    def encode(batch: list[str]) -> np.ndarray:
        if (tmp_path / PROGRESS_FILE).exists():
            record = json.loads((tmp_path / PROGRESS_FILE).read_text())
            seen.append(record["rows"])
            assert path.stat().st_size >= 128 + record["rows"] * 8 * 2
        return enc.encode(batch, is_query=False)

    encode_to_file([f"text {i}" for i in range(10)], 10, 8, path, encode, chunk=3, key={"k": 1})
    assert seen == [0, 3, 6, 9]
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["rows"] == 10
    np.testing.assert_allclose(np.load(path)[4], enc.encode(["text 4"], is_query=False)[0], atol=1e-3)


def test_serving_overrides_search_settings(tmp_path: Path, make_hashing_encoder, monkeypatch, capsys) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", 300)
    encoder = make_hashing_encoder()
    vecs = vectors_of(corpus, encoder)
    use_encoder(monkeypatch, encoder)
    common = {"vectors": vecs, "query_encoder": "sentence-transformers"}
    ivf = build_index(corpus, "dense", tmp_path / "ivf", faiss="ivf", nlist=4, nprobe=1, **common)
    assert load_index(ivf).index.nprobe == 1
    r = load_index(ivf, nprobe=3)
    assert r.index.nprobe == 3 and r.manifest["options"]["dense"]["nprobe"] == 3
    hnsw = build_index(corpus, "dense", tmp_path / "hnsw", faiss="hnsw", **common)
    assert load_index(hnsw, ef_search=9).index.hnsw.efSearch == 9
    pq = build_index(corpus, "dense", tmp_path / "pq", faiss="IVF4,PQ8x4", nprobe=1, candidates=10, **common)
    r = load_index(pq, nprobe=2, candidates=7)
    assert r.index.candidates == 7 and r.index.index.nprobe == 2
    capsys.readouterr()
    load_index(hnsw, nprobe=5)
    said = " ".join(capsys.readouterr().err.split())
    assert "nprobe applies to ivf or IVF factory indexes, not 'hnsw'; ignored" in said


def test_serve_passes_search_settings_to_the_index(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from searchrl.cli import app

    seen: dict = {}

    def fake_load(index, corpus, **kw):
        seen.update(kw)
        raise SystemExit(0)

    monkeypatch.setattr("searchrl.retrieval.index.load_index", fake_load)
    args = ["serve", "--index", str(tmp_path), "--port", "0", "--nprobe", "32", "--ef-search", "64"]
    res = CliRunner().invoke(app, [*args, "--candidates", "50"])
    assert res.exit_code == 0, res.output
    assert (seen["nprobe"], seen["ef_search"], seen["candidates"]) == (32, 64, 50)


def test_a_factory_refused_after_the_encoding_is_fixed_without_encoding_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_hashing_encoder
) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", 200)
    first = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, first)
    with pytest.raises(ValueError, match="must divide"):  # PQ7 cannot cut 64 dimensions: refused at training
        build_index(corpus, "dense", tmp_path / "idx", faiss="IVF2,PQ7", query_encoder="sentence-transformers")
    assert first.encoded == 200
    again = Interrupting(make_hashing_encoder())
    use_encoder(monkeypatch, again)
    out = build_index(corpus, "dense", tmp_path / "idx", faiss=FACTORY, query_encoder="sentence-transformers")
    assert again.encoded == 0 and read_manifest(out)["options"]["dense"]["faiss"] == FACTORY
    assert load_index(out).search(["w5 w6"], 2)[0]


def test_build_dense_takes_plain_texts_and_keeps_no_record_without_a_key(tmp_path: Path, make_hashing_encoder) -> None:
    from searchrl.retrieval.dense import DenseOptions, build_dense, read_faiss_index

    texts = [f"T{i}\npassage {i} about w{i}" for i in range(50)]
    stats = build_dense(iter(texts), 50, tmp_path, DenseOptions(), batch_size=4, encoder=make_hashing_encoder())
    assert stats == {"passages": 50, "dimension": 64}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.faiss"]
    assert read_faiss_index(tmp_path / "index.faiss", DenseOptions()).ntotal == 50


def test_passages_past_the_encoders_limit_are_reported_once(tmp_path: Path, capsys) -> None:
    """The bundled MiniLM reads 256 tokens of a passage: a build whose passages run past that says how many of the
    first ones do and names the fix; a corpus of short passages builds without the warning."""
    from searchrl.retrieval.dense import DenseOptions, Encoder, build_dense

    enc = Encoder(DenseOptions.for_encoder("minilm-l6-v2"))
    short = [f"T{i}\na short passage about w{i}" for i in range(6)]
    build_dense(iter(short), 6, tmp_path / "short", DenseOptions(), batch_size=4, encoder=enc)
    assert "longer than the encoder" not in capsys.readouterr().err
    texts = short[:4] + ["T9\n" + " ".join(WORDS[:300]), "T10\n" + " ".join(WORDS[100:400])]
    build_dense(iter(texts), 6, tmp_path / "long", DenseOptions(), batch_size=4, encoder=enc)
    out = " ".join(capsys.readouterr().err.split())
    assert out.count("2 of the first 6 passages are longer than the encoder's 256 tokens") == 1
    assert "--max-words 100" in out
