"""Index directories: self-describing manifest, refusal to load against another corpus, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from searchrl.config import RetrievalConfig
from searchrl.retrieval import make_retriever
from searchrl.retrieval.index import IndexMismatchError, build_index, load_index, read_manifest


def test_manifest_describes_the_index(tiny_bm25: Path, tiny_corpus: Path) -> None:
    m = read_manifest(tiny_bm25)
    assert m["kind"] == "bm25"
    assert m["corpus"]["path"] == str(tiny_corpus.resolve())
    assert len(m["corpus"]["fingerprint"]) == 16
    assert m["counts"]["passages"] == 12 and m["counts"]["vocab"] > 50
    bm25 = {"k1": 0.9, "b": 0.4, "method": "lucene", "stemmer": "english", "stopwords": "en", "split_cjk": True}
    bm25["unicode_words"] = True
    assert m["options"]["bm25"] == bm25
    assert m["encoder"] is None and m["dimension"] is None
    assert m["created"].endswith("Z") and m["searchrl_version"]
    assert sorted(p.name for p in tiny_bm25.iterdir()) == ["bm25", "manifest.json", "passages"]


def test_loading_against_the_same_corpus_works(tiny_bm25: Path, tiny_corpus: Path) -> None:
    assert load_index(tiny_bm25, corpus=tiny_corpus).search(["chess board"], 1)[0][0].title == "Chess"


def test_loading_against_another_corpus_is_refused(tiny_bm25: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "x", "contents": "X\nsomething else entirely"}) + "\n")
    with pytest.raises(IndexMismatchError) as err:
        load_index(tiny_bm25, corpus=other)
    message = str(err.value)
    assert "\n" not in message and "fingerprint" in message
    assert f"`build_index({str(other)!r}, 'bm25', {str(tiny_bm25)!r}, overwrite=True)`" in message
    assert f"(`searchrl index build --corpus {other} --kind bm25 --out {tiny_bm25} --force`)" in message


def test_missing_or_unfinished_index(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        load_index(tmp_path / "nope")
    nope = tmp_path / "nope"
    assert str(err.value) == (
        f"index directory not found: {nope}; build one with `build_index('CORPUS.jsonl', 'bm25', {str(nope)!r})` "
        f"(`searchrl index build --corpus CORPUS.jsonl --kind bm25 --out {nope}`)"
    )
    (tmp_path / "half").mkdir()
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        load_index(tmp_path / "half")


def test_an_index_missing_a_file_or_with_a_manifest_that_is_no_object_names_the_rebuild(
    tiny_bm25: Path, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_bm25, copy)
    (copy / "bm25" / "params.index.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"is incomplete \(params\.index\.json is missing\); rebuild it with"):
        load_index(copy)
    (copy / "manifest.json").write_text("[1]")
    with pytest.raises(ValueError, match="is not a SearchRL index manifest"):
        load_index(copy)


def test_old_format_version_is_refused(tiny_bm25: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_bm25, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["format_version"] = 0
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IndexMismatchError, match="rebuild it"):
        load_index(copy)


def test_build_refuses_to_clobber(tiny_corpus: Path, tmp_path: Path) -> None:
    out = build_index(tiny_corpus, "bm25", tmp_path / "i")
    with pytest.raises(ValueError, match=r"already holds an index; pass overwrite=True \(--force\) to replace it"):
        build_index(tiny_corpus, "bm25", out)
    build_index(tiny_corpus, "bm25", out, stemmer=None, overwrite=True)
    assert read_manifest(out)["options"]["bm25"]["stemmer"] is None
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(ValueError, match=r"not an index directory; choose an empty or new out \(--out\)"):
        build_index(tiny_corpus, "bm25", tmp_path / "junk")
    assert not list(tmp_path.glob(".*.partial")), "staging directories must not be left behind"


def test_build_input_errors(tiny_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="corpus not found"):
        build_index(tmp_path / "missing.jsonl", "bm25", tmp_path / "i")
    with pytest.raises(ValueError, match="unknown index kind"):
        build_index(tiny_corpus, "splade", tmp_path / "i")  # type: ignore[arg-type]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no passages"):
        build_index(empty, "bm25", tmp_path / "i")


def test_corpus_formats_title_text_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"id": "a", "title": "Okapi", "text": "The okapi is a giraffid of the Congo."},
        {"id": "b", "title": "Quokka", "text": "The quokka is a small wallaby from Australia."},
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    for name in ("c.jsonl", "c.parquet"):
        r = load_index(build_index(tmp_path / name, "bm25", tmp_path / f"i-{name}"))
        hit = r.search(["wallaby Australia"], 1)[0][0]
        assert (hit.id, hit.title, hit.text) == ("b", "Quokka", rows[1]["text"])


def test_precomputed_vectors_are_flagged(tiny_corpus: Path, tmp_path: Path) -> None:
    vecs = np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32)
    out = build_index(tiny_corpus, "dense", tmp_path / "d", vectors=vecs)
    m = read_manifest(out)
    assert m["precomputed_vectors"] is True and m["dimension"] == 8 and m["encoder"] == "minilm-l6-v2"
    with pytest.raises(ValueError, match=r"vectors must be \(N=12, D\)"):
        build_index(tiny_corpus, "dense", tmp_path / "d2", vectors=vecs[:5])


def test_make_retriever_builds_on_demand_and_checks_kind(tiny_corpus: Path, tmp_path: Path) -> None:
    cfg = RetrievalConfig(kind="bm25", index=str(tmp_path / "auto"))
    with pytest.raises(FileNotFoundError, match="searchrl index build"):
        make_retriever(cfg)
    r = make_retriever(cfg, corpus=tiny_corpus)
    assert r.search(["honey nectar"], 1)[0][0].title == "Honey bee"
    assert make_retriever(cfg).search(["honey nectar"], 1)[0][0].title == "Honey bee"  # now loads
    with pytest.raises(ValueError, match="is a bm25 index but retrieval.kind is dense"):
        make_retriever(RetrievalConfig(kind="dense", index=str(tmp_path / "auto")))
    with pytest.raises(ValueError, match="needs retrieval.index"):
        make_retriever(RetrievalConfig(kind="bm25"))
    with pytest.raises(ValueError, match="needs retrieval.urls"):
        make_retriever(RetrievalConfig(kind="remote"))


def test_make_retriever_remote_and_web(monkeypatch: pytest.MonkeyPatch) -> None:
    from searchrl.retrieval.client import RemoteRetriever
    from searchrl.retrieval.web import WebRetriever

    r = make_retriever(RetrievalConfig(kind="remote", urls=["http://127.0.0.1:9", "http://127.0.0.1:10/retrieve"]))
    assert isinstance(r, RemoteRetriever)
    assert r.urls == ["http://127.0.0.1:9/retrieve", "http://127.0.0.1:10/retrieve"]
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"\$SERPAPI_API_KEY"):
        make_retriever(RetrievalConfig(kind="web"))
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    monkeypatch.setenv("GOOGLE_CSE_ID", "cx")
    w = make_retriever(RetrievalConfig(kind="web", urls=["http://127.0.0.1:9/search"]))
    assert isinstance(w, WebRetriever) and w.provider.name == "google" and w.base_url == "http://127.0.0.1:9/search"
    w.close()


def test_long_documents_are_cut_into_titled_chunks_when_asked(tmp_path: Path) -> None:
    """``max_words`` cuts a whole document into chunks that keep its title (ids ``<id>#<k>``) and leaves short
    passages alone; the manifest records it, and a pipeline's index stage takes it as an arg."""
    from searchrl.runner import stage_arg_names

    rows = [{"id": "doc", "title": "Long", "text": " ".join(f"w{i}" for i in range(250))}]
    rows.append({"id": "short", "title": "S", "text": "a short passage"})
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    index = load_index(build_index(corpus, "bm25", tmp_path / "idx", max_words=100))
    assert index.manifest["counts"]["passages"] == 4 and index.manifest["max_words"] == 100
    (hit,) = index.search(["w150"], k=1)[0]
    assert (hit.id, hit.title, hit.text.split()[0], len(hit.text.split())) == ("doc#1", "Long", "w100", 100)
    assert index.search(["short passage"], k=1)[0][0].id == "short"
    assert "max_words" in stage_arg_names("data", "index")
    with pytest.raises(ValueError, match="max_words must be at least 1"):
        build_index(corpus, "bm25", tmp_path / "idx2", max_words=0)


def test_an_index_of_whole_documents_warns_that_they_need_cutting(tmp_path: Path, capsys) -> None:
    """A corpus of whole documents indexed as they are (BM25 has no length limit to say so) would show a search only
    each document's head: the build says so and names --max-words; cut, it says nothing."""
    rows = [{"id": "doc", "title": "Long", "text": " ".join(f"w{i}" for i in range(1200))}]
    rows.append({"id": "short", "title": "S", "text": "a short passage"})
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    build_index(corpus, "bm25", tmp_path / "whole")
    said = " ".join(capsys.readouterr().err.split())
    assert "1 of the first 2 passages are longer than 1000 words" in said and "--max-words 100" in said
    build_index(corpus, "bm25", tmp_path / "cut", max_words=100)
    assert "longer than" not in capsys.readouterr().err


def test_cutting_long_passages_into_an_existing_id_is_refused(tmp_path: Path) -> None:
    from searchrl.data.corpus import CorpusFormatError

    rows = [{"id": "d", "title": "Long", "text": " ".join(f"w{i}" for i in range(250))}]
    rows.append({"id": "d#1", "title": "Other", "text": "a short passage"})
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"passage id 'd#1' occurs twice, at lines 1 and 2 \(after cutting"):
        build_index(corpus, "bm25", tmp_path / "idx", max_words=100)
    assert not (tmp_path / "idx").exists() and not list(tmp_path.glob(".*.partial"))


def test_a_forced_rebuild_keeps_the_old_index_until_the_new_one_is_in_place(
    tiny_corpus: Path, tmp_path: Path, monkeypatch
) -> None:
    """--force moves the old index aside and removes it only after the new one is renamed in: never a moment with
    the old index deleted and the new one not yet there (the old rmtree-then-rename order)."""
    import shutil as shutil_module

    from searchrl.retrieval import index as index_module

    out = tmp_path / "i"
    build_index(tiny_corpus, "bm25", out)
    seen: list[bool] = []
    real_rmtree = shutil_module.rmtree

    def watch(path, *args, **kwargs):  # whenever anything is removed, an index must be in place at out
        if Path(path).name.endswith(".old") and Path(path).exists():
            seen.append((out / "manifest.json").exists())
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(index_module.shutil, "rmtree", watch)
    build_index(tiny_corpus, "bm25", out, overwrite=True)
    assert seen == [True] and (out / "manifest.json").exists() and not (tmp_path / ".i.old").exists()
    out.rename(tmp_path / ".i.old")  # a stop between the two renames: the old index is put back where it was
    assert load_index(out).search(["anything"], 1) is not None and not (tmp_path / ".i.old").exists()


def test_a_whole_document_without_spaces_is_warned_of_too(tmp_path: Path, capsys) -> None:
    rows = [{"id": "doc", "title": "长", "text": "长" * 1500}]
    corpus = tmp_path / "zh.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    build_index(corpus, "bm25", tmp_path / "whole")
    assert "longer than 1000 words" in " ".join(capsys.readouterr().err.split())
