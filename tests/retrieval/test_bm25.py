"""BM25: analysis matches bm25s's tokenizer, scores match bm25s, rankings agree with rank_bm25 on real text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from searchrl.retrieval.bm25 import BM25S_FILES, Analyzer, BM25Options, BM25Retriever, build_bm25
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


def test_chinese_and_japanese_text_is_cut_into_one_term_a_character() -> None:
    """CJK text has no spaces: as one word, a sentence would be a single term that only the whole sentence matches
    (Lucene's standard tokenizer cuts ideographs and Hiragana one a term). Text without them is cut as before."""
    from searchrl.retrieval.bm25 import WORDS_PATTERN

    assert Analyzer(None, None)("東京は日本の首都です。トヨタ本社") == [
        *["東", "京", "は", "日", "本", "の", "首", "都", "で", "す"],
        *["トヨタ", "本", "社"],  # a Katakana run stays a word, as there
    ]
    assert Analyzer(None, None)("𠮷野家 Zürich x 서울은") == ["𠮷", "野", "家", "zürich", "서울은"]
    text = "Marie Curie's daughters Irène (b. 1897) & Ève_2 studied in Paris; القاهرة عاصمة مصر a x9 _ __"
    assert Analyzer(None, None)(text) == __import__("re").findall(WORDS_PATTERN, text.lower())
    assert Analyzer(None, None, split_cjk=False)("東京は日本の首都") == ["東京は日本の首都"]


def test_a_cjk_query_finds_its_passage_and_an_older_index_keeps_its_analysis(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "tokyo", "contents": "東京\n東京は日本の首都です。"},
        {"id": "paris", "contents": "Paris\nParis is the capital of France."},
    ]
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    index = build_index(corpus, "bm25", tmp_path / "bm25")
    assert [h.id for h in load_index(index).search(["日本の首都は？"], 2)[0]] == ["tokyo"]
    # an index built before CJK text was cut has no split_cjk in its manifest: its queries are analysed as it was
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["options"]["bm25"]["split_cjk"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    assert load_index(index).analyzer("東京は日本") == ["東京は日本"]


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="unknown stemmer"):
        Analyzer("klingon", None)
    with pytest.raises(ValueError, match="unknown BM25 method"):
        BM25Options(method="bm25+")
    with pytest.raises(ValueError, match="0 <= b <= 1"):
        BM25Options(b=2.0)
    for bad in (dict(b=-0.1), dict(k1=-0.1)):
        with pytest.raises(ValueError, match="k1 >= 0 and 0 <= b <= 1"):
            BM25Options(**bad)
    # the ends of the ranges are BM25's own settings: b=0 (no length normalisation), b=1, k1=0 (binary tf)
    assert [(o.k1, o.b) for o in (BM25Options(b=0.0), BM25Options(b=1.0), BM25Options(k1=0.0))] == [
        (0.9, 0.0),
        (0.9, 1.0),
        (0.0, 0.4),
    ]


def test_full_width_letters_and_soft_hyphens_in_a_query_are_the_plain_words() -> None:
    """Non-ASCII text is read in NFKC without invisible characters before it is split: full-width "Ｐａｒｉｓ
    １９９０" and "Par\u00adis" (a soft hyphen) are the terms of "paris 1990 paris"."""
    analyzer = Analyzer(stemmer=None, stopwords=None)
    assert analyzer("Ｐａｒｉｓ １９９０ Par\u00adis café") == ["paris", "1990", "paris", "café"]


def test_the_stopwords_saved_with_an_index_are_the_ones_queries_drop() -> None:
    """A retriever drops the exact stopwords its index was built with (``stopwords.json``), not its options' list
    name resolved again."""
    r = BM25Retriever(
        np.ones(1, dtype=np.float32),
        np.zeros(1, dtype=np.int32),
        np.array([0, 1]),
        {"the": 0},
        _Rows(1),
        BM25Options(stemmer=None, stopwords="en"),
        None,
        ["paris"],
    )
    assert r.analyzer("the paris") == ["the"]
    assert r.rank(["the paris"], 3) == [[(0, 1.0)]]


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


class _Rows:
    """Stands in for a PassageStore where only the number of passages matters."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _synthetic_bm25(n: int, postings: dict[str, tuple[np.ndarray, np.ndarray]]) -> BM25Retriever:
    """A BM25Retriever over hand-made posting lists {term: (rows ascending, float32 weights)}."""
    vocab = {t: i for i, t in enumerate(postings)}
    indptr = np.cumsum([0] + [len(r) for r, _ in postings.values()]).astype(np.int64)
    indices = np.concatenate([r for r, _ in postings.values()]).astype(np.int32)
    data = np.concatenate([w for _, w in postings.values()]).astype(np.float32)
    return BM25Retriever(data, indices, indptr, vocab, _Rows(n), BM25Options(stemmer=None, stopwords=None), None, [])


def _dense_accumulator_scores(r: BM25Retriever, query: str) -> np.ndarray:
    """The reference: every posting's weight added into an array of all N passages, (N,) float64."""
    ids = r.term_ids(query)
    if not ids:
        return np.zeros(r._n)
    spans = [(r._indptr[t], r._indptr[t + 1]) for t in ids]
    rows = np.concatenate([r._indices[s:e] for s, e in spans])
    weights = np.concatenate([r._data[s:e] for s, e in spans])
    return np.bincount(rows, weights=weights, minlength=r._n)


def _dense_accumulator_rank(r: BM25Retriever, query: str, depth: int) -> list[tuple[int, float]]:
    """The reference ranking: every passage with a positive dense score sorted by score, ties by row, then cut to
    ``depth`` (no partial selection, whose pick among ties at the cut is its own)."""
    s = _dense_accumulator_scores(r, query)
    return sorted(((int(x), float(s[x])) for x in np.flatnonzero(s > 0)), key=lambda p: (-p[1], p[0]))[:depth]


def test_ranking_over_postings_equals_the_dense_accumulator_ties_included() -> None:
    rng = np.random.default_rng(0)
    n = 500
    postings = {}
    for t in range(40):
        rows = np.sort(rng.choice(n, int(rng.integers(1, 120)), replace=False))
        weights = rng.choice([0.25, 0.5, 1.0, 1.5], len(rows)).astype(np.float32)  # few values: many ties
        weights[rng.random(len(rows)) < 0.05] = rng.random() * 3  # and some odd ones
        postings[f"t{t}"] = (rows, weights)
    r = _synthetic_bm25(n, postings)
    queries = [" ".join(f"t{t}" for t in rng.integers(0, 40, int(rng.integers(1, 6)))) for _ in range(200)]
    queries += ["nothing known", "t3 t3 t3", ""]
    for depth in (1, 3, 10, 57, 1000):
        got = r.rank(queries, depth)
        for q, ranking in zip(queries, got, strict=True):
            assert ranking == _dense_accumulator_rank(r, q, depth), (q, depth)
    tied = [x for q in queries for x in r.rank([q], 10)[0]]
    assert len({s for _, s in tied}) < len(tied) / 2, "the corpus must produce ties for this test to mean much"
    for q in queries[:20]:
        np.testing.assert_array_equal(r.scores(q), _dense_accumulator_scores(r, q))


def test_a_repeated_query_term_counts_each_time() -> None:
    """As Lucene's query of one clause per term (and bm25s): "aa aa bb" scores aa's weight twice."""
    r = _synthetic_bm25(
        6,
        {
            "aa": (np.array([1, 4]), np.array([1.0, 0.5], dtype=np.float32)),
            "bb": (np.array([4]), np.array([2.0], dtype=np.float32)),
        },
    )
    assert r.rank(["aa aa bb", "aa bb"], 5) == [[(4, 3.0), (1, 2.0)], [(4, 2.5), (1, 1.0)]]
    np.testing.assert_array_equal(r.scores("aa aa bb"), [0.0, 2.0, 0.0, 0.0, 3.0, 0.0])


def test_ties_at_the_cut_go_to_the_lowest_rows_so_a_top_k_is_the_prefix_of_a_top_k_plus() -> None:
    """Equal scores at the depth cut are taken lowest row first (Lucene breaks ties by document): rank(q, 7) is the
    head of rank(q, 60), which the service relies on when it merges requests of several k into one search."""
    rows = np.arange(0, 300, 3)  # passages 0, 3, 6, ..., 297
    weights = np.where(np.isin(rows, [0, 3, 6, 27, 30, 33, 36, 42, 60]), 2.0, 1.0).astype(np.float32)
    r = _synthetic_bm25(300, {"tt": (rows, weights)})
    assert r.rank(["tt"], 7) == [[(0, 2.0), (3, 2.0), (6, 2.0), (27, 2.0), (30, 2.0), (33, 2.0), (36, 2.0)]]
    assert r.rank(["tt"], 11)[0][7:] == [(42, 2.0), (60, 2.0), (9, 1.0), (12, 1.0)]
    for depth in range(1, 101):
        assert r.rank(["tt"], depth)[0] == r.rank(["tt"], 100)[0][:depth], depth


def test_a_query_costs_its_postings_not_the_corpus() -> None:
    """A rare term in a large corpus: no array of N scores is allocated (it was N float64 per query)."""
    import tracemalloc

    n = 400_000
    rng = np.random.default_rng(1)
    common = np.sort(rng.choice(n, 2000, replace=False))
    r = _synthetic_bm25(
        n,
        {
            "rare": (np.array([5, 70_000, 399_999]), np.array([1.0, 2.0, 1.0], dtype=np.float32)),
            "common": (common, np.ones(len(common), dtype=np.float32)),
        },
    )
    r.rank(["rare common"], 10)  # warm up
    tracemalloc.start()
    try:
        hits = r.rank(["rare", "rare common"], 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert hits[0] == [(70_000, 2.0), (5, 1.0), (399_999, 1.0)]
    assert peak < n  # bytes: far below one float64 (8 n bytes) or bool (n bytes) per passage


def _bm25s_build(texts: list[str], directory: Path, options: BM25Options) -> None:
    """The reference: bm25s's own index() over a Python list of token ids per passage, then its save()."""
    import bm25s
    from bm25s.tokenization import Tokenizer

    from searchrl.retrieval.bm25 import _make_stemmer, splitter, stopword_list

    tokenizer = Tokenizer(
        splitter=splitter(options.split_cjk, options.unicode_words),
        stopwords=stopword_list(options.stopwords),
        stemmer=_make_stemmer(options.stemmer),
    )
    token_ids = list(tokenizer.streaming_tokenize(texts, update_vocab=True))
    model = bm25s.BM25(k1=options.k1, b=options.b, method=options.method)
    model.index((token_ids, tokenizer.get_vocab_dict()), show_progress=False)
    model.save(str(directory), show_progress=False)


@pytest.mark.parametrize(
    "options",
    [
        BM25Options(),
        BM25Options(method="robertson", k1=1.5, b=0.75, stemmer=None),
        BM25Options(method="atire", stopwords=None),
    ],
    ids=["lucene", "robertson", "atire"],
)
def test_streamed_build_writes_bm25s_files_byte_for_byte(
    options: BM25Options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token ids in one flat array, the matrix assembled in chunks: the same files as bm25s's index() + save(),
    over passages with repeated terms, no words at all, and only stopwords."""
    monkeypatch.setattr("searchrl.retrieval.bm25_build.CHUNK_TOKENS", 37)  # many chunks, passages across edges
    rng = np.random.default_rng(3)
    words = ["apple", "banana", "cherry", "running", "runner", "the", "and", "of", "zebra", "quantum", "x"]
    texts = [" ".join(rng.choice(words, int(rng.integers(0, 25)))) for _ in range(300)]
    texts += ["", "the and of", "!!!", "apple apple apple apple"]
    build_bm25(texts, tmp_path / "streamed", options)
    _bm25s_build(texts, tmp_path / "reference", options)
    for name in BM25S_FILES.values():
        assert (tmp_path / "streamed" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name


def test_streamed_build_matches_bm25s_on_real_passages(shared_data: Path, tmp_path: Path) -> None:
    from searchrl.data.corpus import iter_passages

    texts = [p.contents for p in iter_passages(shared_data / "2wiki-mini" / "corpus.jsonl")]
    build_bm25(texts, tmp_path / "streamed", BM25Options())
    _bm25s_build(texts, tmp_path / "reference", BM25Options())
    for name in BM25S_FILES.values():
        assert (tmp_path / "streamed" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name


@pytest.mark.parametrize("csc_backend", ["numpy", "scipy"])
def test_score_matrix_equals_bm25s_for_either_csc_builder(csc_backend: str) -> None:
    """bm25s builds its CSC arrays with numpy (int64 indptr) or scipy (one index type); both are mirrored."""
    import bm25s

    from searchrl.retrieval.bm25_build import TokenStream, score_matrix

    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 30, int(rng.integers(0, 12))).tolist() for _ in range(200)]
    model = bm25s.BM25(csc_backend=csc_backend)
    expected = model.build_index_from_ids(list(range(30)), docs, show_progress=False)
    tokens = TokenStream()
    for d in docs:
        tokens.append(d)
    got = score_matrix(tokens, 30, model)
    assert got["num_docs"] == expected["num_docs"] == 200
    for key in ("data", "indices", "indptr"):
        assert got[key].dtype == np.asarray(expected[key]).dtype, key
        np.testing.assert_array_equal(got[key], expected[key])
