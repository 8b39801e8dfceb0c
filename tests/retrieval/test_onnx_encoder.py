"""The ONNX query-encoding path: layout detection, agreement with sentence-transformers on real text, recall,
reproducible export, torch-free serving, and the query-embedding cache."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from searchrl.data.corpus import PassageStore
from searchrl.retrieval.dense import DenseOptions, DenseRetriever, read_faiss_index
from searchrl.retrieval.index import build_index, read_manifest
from searchrl.retrieval.onnx_encoder import ExportUnsupported, read_st_layout

N_PASSAGES = 1000


def _write_layout(root: Path, modules: list[str], pooling: dict) -> Path:
    root.mkdir(parents=True)
    entries = [
        {"idx": i, "path": "" if i == 0 else f"{i}_{m}", "type": f"sentence_transformers.models.{m}"}
        for i, m in enumerate(modules)
    ]
    (root / "modules.json").write_text(json.dumps(entries))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": True}))
    return root


def test_read_st_layout(tmp_path: Path) -> None:
    old_style = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}
    d = _write_layout(tmp_path / "a", ["Transformer", "Pooling"], old_style)
    assert read_st_layout(d) == {"pooling": "cls", "normalize": False, "max_length": 128, "do_lower_case": True}
    d = _write_layout(tmp_path / "b", ["Transformer", "Pooling", "Normalize"], {"pooling_mode": "mean"})
    assert read_st_layout(d)["pooling"] == "mean" and read_st_layout(d)["normalize"] is True
    d = _write_layout(tmp_path / "c", ["Transformer", "Pooling", "Dense"], {"pooling_mode": "mean"})
    with pytest.raises(ExportUnsupported, match="Dense"):
        read_st_layout(d)
    d = _write_layout(tmp_path / "d", ["Transformer", "Pooling"], {"pooling_mode": "weightedmean"})
    with pytest.raises(ExportUnsupported, match="pooling"):
        read_st_layout(d)


def test_query_cache_encodes_only_distinct_uncached_queries(tiny_corpus: Path, tmp_path: Path, hashing_encoder):
    from searchrl.data.corpus import iter_passages

    vecs = hashing_encoder.encode([p.contents for p in iter_passages(tiny_corpus)], is_query=False)
    out = build_index(tiny_corpus, "dense", tmp_path / "d", vectors=vecs)
    assert read_manifest(out)["options"]["dense"]["query_encoder"] == "sentence-transformers"
    index = read_faiss_index(out / "dense" / "index.faiss", DenseOptions())
    r = DenseRetriever(index, PassageStore(out / "passages"), hashing_encoder, cache_size=2)
    hashing_encoder.calls.clear()
    first = r.search(["volcano lava", "chess board", "volcano lava"], 2)
    assert hashing_encoder.calls == [2], "a repeated query in one batch is encoded once"
    again = r.search(["chess board", "honey nectar"], 2)
    assert hashing_encoder.calls == [2, 1], "only the uncached query is encoded"
    assert again[0] == first[1]
    assert r.query_cache.stats()["hits"] == 1 and len(r.query_cache) == 2  # LRU bound holds
    r.search(["volcano lava"], 1)  # evicted (least recently used) -> encoded again
    assert hashing_encoder.calls == [2, 1, 1]


@pytest.mark.parametrize(
    ("env", "allow", "stop"),
    [(None, "1", "1"), ("run", "1", "1"), ("always", "1", "0"), ("1", "1", "0"), ("off", "0", "0"), ("0", "0", "0")],
)
def test_spin_mode_sets_the_pool_threads_waiting(monkeypatch, env: str | None, allow: str, stop: str) -> None:
    pytest.importorskip("onnxruntime")
    from searchrl.retrieval.onnx_encoder import session_options

    if env is None:
        monkeypatch.delenv("SEARCHRL_ENCODER_SPIN", raising=False)
    else:
        monkeypatch.setenv("SEARCHRL_ENCODER_SPIN", env)
    so = session_options(threads=2)
    assert so.intra_op_num_threads == 2
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == allow
    assert so.get_session_config_entry("session.force_spinning_stop") == stop


def test_unknown_spin_mode_is_a_one_line_error(monkeypatch) -> None:
    from searchrl.retrieval.onnx_encoder import spin_mode

    monkeypatch.setenv("SEARCHRL_ENCODER_SPIN", "sometimes")
    with pytest.raises(ValueError, match="not one of run, always, off") as err:
        spin_mode()
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from searchrl.retrieval.onnx_encoder import export_encoder

    out = tmp_path_factory.mktemp("onnx") / "minilm"
    export_encoder("minilm-l6-v2", out)
    return out


@pytest.mark.slow
@pytest.mark.shared
def test_onnx_matches_sentence_transformers_on_real_passages_and_recall(exported: Path, shared_data: Path) -> None:
    """Contract: cosine >= 0.999 to the reference on 1,000 2wiki-mini passages; recall@k within 0.005."""
    from searchrl.data.corpus import iter_passages
    from searchrl.retrieval.dense import Encoder
    from searchrl.retrieval.onnx_encoder import OnnxEncoder
    from searchrl.rewards.metrics import cover_em

    corpus = iter_passages(shared_data / "2wiki-mini" / "corpus.jsonl")
    passages = [next(corpus).contents for _ in range(N_PASSAGES)]
    questions = [json.loads(line) for line in (shared_data / "2wiki-mini" / "dev.jsonl").open() if line.strip()]
    options = DenseOptions()
    ref_enc, fast_enc = Encoder(options), OnnxEncoder(exported, options)
    ref_p = ref_enc.encode(passages, is_query=False)  # (P, D)
    fast_p = fast_enc.encode(passages, is_query=False)  # (P, D)
    cos = (ref_p * fast_p).sum(1)  # both unit-norm
    assert float(cos.min()) >= 0.999, f"min cosine over {len(passages)} passages: {cos.min():.6f}"

    # Recall over the 1,000-passage subset, for the questions it can answer (a gold answer occurs in it).
    questions = [q for q in questions if any(cover_em(p, q["golden_answers"]) for p in passages)]
    assert len(questions) >= 50, len(questions)
    texts = [q["question"] for q in questions]
    ref_q = ref_enc.encode(texts, is_query=True)  # (Q, D)
    fast_q = fast_enc.encode(texts, is_query=True)  # (Q, D)
    assert float((ref_q * fast_q).sum(1).min()) >= 0.999

    def recall(q: np.ndarray, p: np.ndarray, k: int) -> float:
        top = np.argsort(-(q @ p.T), axis=1, kind="stable")[:, :k]  # (Q, k)
        found = [
            any(cover_em(passages[j], ex["golden_answers"]) for j in row)
            for row, ex in zip(top, questions, strict=True)
        ]
        return sum(found) / len(found)

    assert recall(ref_q, ref_p, 10) > 0.2, "the comparison must be over questions the retriever can answer"
    for k in (1, 3, 5, 10):
        reference = recall(ref_q, ref_p, k)
        assert abs(recall(fast_q, ref_p, k) - reference) <= 0.005, f"serving path (ONNX queries) recall@{k}"
        assert abs(recall(fast_q, fast_p, k) - reference) <= 0.005, f"all-ONNX recall@{k}"


@pytest.mark.slow
def test_length_grouped_batches_keep_each_texts_own_embedding(exported: Path) -> None:
    """Texts of very different lengths in one call: grouped by length into batches, returned in the caller's order,
    each as encoded alone (padding is masked out)."""
    from searchrl.retrieval.onnx_encoder import OnnxEncoder

    enc = OnnxEncoder(exported, DenseOptions())
    texts = ["river " * 60, "who?", "where was the director of film Blue Lake born?", "a b", "volcano " * 20, "x"]
    together = enc.encode(texts, is_query=True, batch_size=2)  # (N, D)
    alone = np.stack([enc.encode([t], is_query=True)[0] for t in texts])  # (N, D)
    assert together.shape == (len(texts), enc.dimension)
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert enc.encode([], is_query=True).shape == (0, enc.dimension)


@pytest.mark.slow
def test_export_is_reproducible_and_quiet(exported: Path, tmp_path: Path) -> None:
    """Two exports give the same files; neither prints the tracer's or the exporter's warnings."""
    import warnings

    from searchrl.retrieval.onnx_encoder import export_encoder

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_encoder("minilm-l6-v2", tmp_path / "again")
    assert not [f"{w.category.__name__}: {w.message}" for w in caught]
    for name in ("model.onnx", "tokenizer.json", "encoder.json"):
        a, b = (hashlib.sha256((d / name).read_bytes()).hexdigest() for d in (exported, tmp_path / "again"))
        assert a == b, f"{name} differs between two exports"


@pytest.mark.slow
def test_dense_index_serves_without_torch(tiny_corpus: Path, tmp_path: Path) -> None:
    """Built with the real encoder, the index records the ONNX path; loading and searching it imports no torch."""
    out = build_index(tiny_corpus, "dense", tmp_path / "dense")
    assert read_manifest(out)["options"]["dense"]["query_encoder"] == "onnx"
    code = f"""
import sys
from searchrl.retrieval.index import load_index
r = load_index({str(out)!r})
hits = r.search(["Who created the Python language?"], 2)
print(type(r.encoder).__name__, hits[0][0].title)
print(sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = res.stdout.strip().splitlines()
    assert lines[-2] == "OnnxEncoder Python (programming language)"
    assert lines[-1] == "[]", f"serving imported {lines[-1]}"


def test_bad_query_encoder_choices_are_one_line_errors(tiny_corpus: Path, tmp_path: Path, hashing_encoder) -> None:
    from searchrl.data.corpus import iter_passages
    from searchrl.retrieval.index import load_index

    with pytest.raises(ValueError, match="unknown query encoder 'torch'"):
        build_index(tiny_corpus, "dense", tmp_path / "x", query_encoder="torch")  # type: ignore[arg-type]
    vecs = hashing_encoder.encode([p.contents for p in iter_passages(tiny_corpus)], is_query=False)
    out = build_index(tiny_corpus, "dense", tmp_path / "d", vectors=vecs)
    with pytest.raises(FileNotFoundError, match="no exported query encoder; rebuild the index"):
        load_index(out, query_encoder="onnx")
    with pytest.raises(ValueError, match="unknown query encoder"):
        load_index(out, query_encoder="bogus")
