"""BM25: analysis matches bm25s's tokenizer, scores match bm25s, rankings agree with rank_bm25 on real text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from searchrl.retrieval.bm25 import Analyzer, BM25Options, BM25Retriever, build_bm25
from searchrl.retrieval.index import build_index, load_index


def test_analyzer_stems_and_drops_stopwords() -> None:
    assert Analyzer("english", "en")("The runners are running quickly") == ["runner", "run", "quick"]
    assert Analyzer(None, None)("The runners were running") == ["the", "runners", "were", "running"]
    assert Analyzer(None, "en")("It is a cat") == ["cat"]  # "a" is a stopword and too short


def test_analyzer_matches_bm25s_tokenizer() -> None:
    """Query-time analysis must produce exactly the terms bm25s's Tokenizer indexed."""
    from bm25s.tokenization import Tokenizer
    from Stemmer import Stemmer

    text = "Marie Curie's daughters, Irène and Ève, studied radioactive elements in 1920s Paris!"
    tok = Tokenizer(stopwords="en", stemmer=Stemmer("english"))
    ids = next(tok.streaming_tokenize([text], update_vocab=True))
    id_to_stem = {v: k for k, v in tok.get_vocab_dict().items()}
    assert [id_to_stem[i] for i in ids] == Analyzer("english", "en")(text)


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="unknown stemmer"):
        Analyzer("klingon", None)
    with pytest.raises(ValueError, match="unknown BM25 method"):
        BM25Options(method="bm25+")
    with pytest.raises(ValueError, match="0 <= b <= 1"):
        BM25Options(b=2.0)


def test_search_finds_the_right_passage(tiny_bm25: Path) -> None:
    r = load_index(tiny_bm25)
    queries = ["who invented the Turing machine", "highest mountain in Nepal", "music from New Orleans"]
    results = r.search(queries, 3)
    assert [hits[0].title for hits in results] == ["Alan Turing", "Mount Everest", "Jazz"]
    for hits in results:
        assert len(hits) <= 3
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Search-R1's quoted titles are unquoted, and the text keeps no title line.
    assert results[0][0].contents.startswith("Alan Turing\nAlan Turing was")


def test_no_matching_term_gives_no_hits(tiny_bm25: Path) -> None:
    r = load_index(tiny_bm25)
    assert r.search(["zzzqqq xylophonist", "the of and"], 5) == [[], []]
    assert r.search([], 5) == []


def test_search_argument_errors(tiny_bm25: Path) -> None:
    r = load_index(tiny_bm25)
    with pytest.raises(TypeError, match="list of queries"):
        r.search("chess", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        r.search(["chess"], 0)


def test_k_larger_than_corpus(tiny_bm25: Path) -> None:
    r = load_index(tiny_bm25)
    hits = r.search(["river mountain plants board game"], 1000)[0]
    assert 4 <= len(hits) <= len(r.store)


def test_scores_equal_bm25s_retrieve(tiny_corpus: Path, tmp_path: Path) -> None:
    """Our bincount scoring over bm25s's saved arrays gives bm25s's own top-k and scores."""
    import bm25s

    r = load_index(build_index(tiny_corpus, "bm25", tmp_path / "i", k1=1.2, b=0.75))
    queries = ["Nobel prize physics chemistry", "plants sugar oxygen sunlight", "lava ash gases crust"]
    ours = r.search(queries, 4)
    model = bm25s.BM25.load(str(tmp_path / "i" / "bm25"), mmap=True)
    docs, scores = model.retrieve([r.term_ids(q) for q in queries], k=4, show_progress=False)
    for hits, d, s in zip(ours, docs, scores, strict=True):
        assert [r.store.index_of(h.id) for h in hits] == [int(x) for x in d[: len(hits)]]
        np.testing.assert_allclose([h.score for h in hits], s[: len(hits)], rtol=1e-5)


def test_arrays_are_memory_mapped(tiny_bm25: Path) -> None:
    r = load_index(tiny_bm25)
    assert isinstance(r, BM25Retriever)
    assert isinstance(r._data, np.memmap) and isinstance(r._indices, np.memmap)


def test_empty_corpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty corpus"):
        build_bm25([], tmp_path / "x")


# ------------------------------------------------------------------------------- comparison with rank_bm25
@pytest.mark.shared
@pytest.mark.slow
def test_rankings_agree_with_rank_bm25_okapi(shared_data: Path, tmp_path: Path) -> None:
    """Acceptance 1: on real Wikipedia passages and real questions, top-10 overlap with rank_bm25 >= 0.9.

    Both sides see the same terms (our analyzer) and the same k1/b, so differences come only from the scoring
    variant: our default is Lucene's idf (never negative), rank_bm25's BM25Okapi uses Robertson's idf with a floor.
    """
    from rank_bm25 import BM25Okapi

    corpus = shared_data / "2wiki-mini" / "corpus.jsonl"
    questions = [json.loads(line)["question"] for line in (shared_data / "2wiki-mini" / "dev.jsonl").open()]
    options = BM25Options()
    r = load_index(build_index(corpus, "bm25", tmp_path / "bm25"))
    docs = [r.analyzer(p.contents) for p in r.store]
    okapi = BM25Okapi(docs, k1=options.k1, b=options.b)
    # Passages sharing no term with a query score exactly 0 under Okapi (idf is floored above 0), so rank_bm25's
    # top 10 lies among the passages containing a query term: score only those, with rank_bm25 itself.
    postings: dict[str, set[int]] = {}
    for row, terms in enumerate(docs):
        for t in terms:
            postings.setdefault(t, set()).add(row)
    ours = r.search(questions, 10)
    overlaps = []
    for q, hits in zip(questions, ours, strict=True):
        terms = r.analyzer(q)
        candidates = sorted(set().union(*(postings.get(t, set()) for t in terms)))
        scores = np.asarray(okapi.get_batch_scores(terms, candidates))
        reference = {candidates[j] for j in np.argsort(-scores, kind="stable")[:10] if scores[j] > 0}
        overlaps.append(len(reference & {r.store.index_of(h.id) for h in hits}) / len(reference))
    mean = float(np.mean(overlaps))
    assert len(questions) == 500
    assert mean >= 0.9, f"mean top-10 overlap with rank_bm25 is {mean:.3f}"


@pytest.mark.parametrize(("preset", "expected"), [(None, "cpu"), ("cuda", "cuda")])
def test_bm25s_keeps_jax_off_the_gpu_unless_asked(preset: str | None, expected: str) -> None:
    """bm25s runs a JAX op at import; with JAX on a GPU machine its backend would take 75% of the GPU's memory."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if preset:
        env["JAX_PLATFORMS"] = preset
    code = "import os, searchrl.retrieval.bm25, bm25s; print(os.environ['JAX_PLATFORMS'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == expected
