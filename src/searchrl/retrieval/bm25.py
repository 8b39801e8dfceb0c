"""BM25 through bm25s: an eager sparse index (one precomputed score per (term, passage)), saved as ``.npy`` arrays
that load memory-mapped, so a million-passage index starts in about a second.

Analysis (both when indexing and at query time): read the text in Unicode's compatibility form (NFKC: a word with
combining accents is the word with composed letters, full-width ``１９９０`` is ``1990``) without invisible
characters (zero-width spaces, soft hyphens), lowercase, split into words of 2+ word characters (the scikit-learn
pattern bm25s uses, with Unicode's word characters: a Devanagari, Arabic or Hebrew word with its vowel signs or
points is one word) and each Chinese / Japanese ideograph or Hiragana character into a term of its own (as Lucene's
standard tokenizer does: that text has no spaces), drop stopwords, stem with PyStemmer (Snowball). Stemming and
stopwords are options. Indexes built before the first two steps existed keep their analysis (``unicode_words``).

Defaults follow Lucene/Pyserini (``k1=0.9, b=0.4``, Lucene's idf), the BM25 setup Search-R1 and FlashRAG use for their
sparse baselines. Scoring a query is a sum over the posting lists of its terms; we do that sum with ``np.bincount``
(faster than bm25s's ``np.add.at``) on bm25s's own saved arrays, so scores are bm25s's scores exactly. The sum runs
over the passages the postings touch, not over the corpus: a query costs what its postings cost.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.data.corpus import PassageStore
from searchrl.data.unitext import compatible_text
from searchrl.retrieval.local import LocalRetriever, Ranking

# bm25s runs a JAX op when it is imported and JAX is installed; on a GPU machine JAX's backend would then take 75% of
# the GPU's memory (XLA preallocation) from the policy. Its top-k over CPU scores needs no GPU: JAX stays on the CPU
# unless the user chose a platform.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

#: bm25s's default token pattern (scikit-learn's CountVectorizer): words of two or more word characters. Indexes built
#: before CJK text was split (no ``split_cjk`` in their manifest) keep it.
WORDS_PATTERN = r"(?u)\b\w\w+\b"
#: Han ideographs (CJK Unified Ideographs, extension A, compatibility, extensions B-F) and Hiragana: one term each, as
#: Lucene's StandardTokenizer (Unicode word breaks) cuts them. Katakana and Hangul runs stay words, as there.
CJK_CHARS = "\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
#: :data:`WORDS_PATTERN` for text without CJK characters; a run of them is one term per character.
TOKEN_PATTERN = f"(?u)[{CJK_CHARS}]|[^\\W{CJK_CHARS}]{{2,}}"
#: term-frequency / idf variants whose scores live entirely in the sparse matrix (BM25L/BM25+ also need a dense
#: "non-occurrence" term, which this module does not carry).
METHODS = ("lucene", "robertson", "atire")


@dataclass(frozen=True)
class BM25Options:
    """How passages are analysed and scored; stored in the index manifest and reused at load time."""

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    #: a Snowball language for PyStemmer ("english", ...) or None for no stemming.
    stemmer: str | None = "english"
    #: a bm25s stopword list name ("en", "english", "de", ...) or None to keep every word.
    stopwords: str | None = "en"
    #: each CJK ideograph and Hiragana character a term (:data:`TOKEN_PATTERN`); False for indexes built before (a
    #: run of them is one term, which only that whole run matches).
    split_cjk: bool = True
    #: NFKC text without invisible characters, and combining marks inside words (:func:`splitter`); False for
    #: indexes built before (a mark ended a word there, so Hindi or pointed Arabic lost most of its terms).
    unicode_words: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown BM25 method '{self.method}'; use one of {', '.join(METHODS)}")
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={self.k1}, b={self.b})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _make_stemmer(language: str | None):
    if language is None:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ValueError(
            f"unknown stemmer language '{language}'; use one of {', '.join(Stemmer.algorithms())} or none"
        ) from None


def stopword_list(name: str | None) -> list[str]:
    """The words of a bm25s stopword list (``"en"``, ``"english"``, ``"de"``, ...); empty for None."""
    if name is None:
        return []
    from bm25s.tokenization import _infer_stopwords

    try:
        return sorted(_infer_stopwords(name))
    except ValueError:
        raise ValueError(f"unknown stopword list '{name}'; use 'en' (or another bm25s language) or none") from None


class Analyzer:
    """Text -> index terms, exactly as bm25s's ``Tokenizer`` produces them at build time."""

    def __init__(
        self,
        stemmer: str | None = "english",
        stopwords: str | list[str] | None = "en",
        split_cjk: bool = True,
        unicode_words: bool = True,
    ) -> None:
        """``stopwords``: a list name (resolved through bm25s) or the words themselves."""
        self._split = splitter(split_cjk, unicode_words)
        self._stopwords = frozenset(stopwords if isinstance(stopwords, list) else stopword_list(stopwords))
        self._stemmer = _make_stemmer(stemmer)
        # PyStemmer's Stemmer objects must not be used by two threads at once.
        self._lock = threading.Lock()

    def __call__(self, text: str) -> list[str]:
        words = [w for w in self._split(text.lower()) if w not in self._stopwords]
        if self._stemmer is None:
            return words
        with self._lock:
            return self._stemmer.stemWords(words)


def token_pattern(split_cjk: bool) -> str:
    """The regular expression whose matches are the terms: :data:`TOKEN_PATTERN`, or :data:`WORDS_PATTERN`."""
    return TOKEN_PATTERN if split_cjk else WORDS_PATTERN


def splitter(split_cjk: bool, unicode_words: bool) -> Callable[[str], list[str]]:
    """Lower-cased text -> its words (before stopwords and stemming). With ``unicode_words`` the text is read as
    :func:`searchrl.data.unitext.compatible_text` gives it and :func:`token_pattern` runs on the ``regex`` module,
    whose word characters are Unicode's (combining marks included; Python's ``re`` ends a word at one)."""
    if not unicode_words:
        return re.compile(token_pattern(split_cjk)).findall
    import regex

    find_ascii = re.compile(token_pattern(split_cjk)).findall  # the same words where all is ASCII, and faster
    find = regex.compile(token_pattern(split_cjk)).findall

    def split(text: str) -> list[str]:
        return find_ascii(text) if text.isascii() else find(compatible_text(text).lower())

    return split


def build_bm25(
    texts: Iterable[str],
    directory: str | Path,
    options: BM25Options = BM25Options(),
    *,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Tokenise ``texts`` (one per passage, in store order) and save a bm25s index in ``directory``.

    ``on_progress(n)`` is called every few thousand passages with the number just tokenised. Returns counts
    (``passages``, ``vocab``) for the manifest. Token ids are kept in one flat int32 array, not a list per passage,
    and the score matrix is assembled from it in chunks (``searchrl.retrieval.bm25_build``); the files are the ones
    bm25s's own ``index`` and ``save`` write.
    """
    import bm25s
    from bm25s.tokenization import Tokenizer

    from searchrl.retrieval.bm25_build import TokenStream, score_matrix

    stopwords = stopword_list(options.stopwords)
    tokenizer = Tokenizer(
        splitter=splitter(options.split_cjk, options.unicode_words),
        stopwords=stopwords,
        stemmer=_make_stemmer(options.stemmer),
    )
    tokens = TokenStream()
    pending = 0
    for ids in tokenizer.streaming_tokenize(texts, update_vocab=True):
        tokens.append(ids)
        pending += 1
        if on_progress is not None and pending == 5000:
            on_progress(pending)
            pending = 0
    if on_progress is not None and pending:
        on_progress(pending)
    if not len(tokens):
        raise ValueError("cannot build a BM25 index over an empty corpus; check the corpus file has passages")
    vocab = tokenizer.get_vocab_dict()
    model = bm25s.BM25(k1=options.k1, b=options.b, method=options.method)
    model.scores = score_matrix(tokens, len(vocab), model)
    del tokens
    if "" not in vocab:  # as bm25s's index(): an empty token, scored nowhere
        vocab[""] = max(vocab.values()) + 1
    model.vocab_dict = vocab
    model.nonoccurrence_array = None  # BM25L / BM25+ only, which METHODS leaves out
    model.save(str(directory), show_progress=False)
    # The exact stopwords travel with the index: query analysis then needs neither bm25s nor its list names.
    (Path(directory) / STOPWORDS_FILE).write_text(json.dumps(stopwords), encoding="utf-8")
    return {"passages": model.scores["num_docs"], "vocab": len(model.vocab_dict)}


#: the files ``bm25s.BM25.save`` writes (and ``bm25s.BM25.load`` reads): a CSC matrix of precomputed scores.
BM25S_FILES = {
    "data": "data.csc.index.npy",
    "indices": "indices.csc.index.npy",
    "indptr": "indptr.csc.index.npy",
    "vocab": "vocab.index.json",
    "params": "params.index.json",
}
STOPWORDS_FILE = "stopwords.json"


class BM25Retriever(LocalRetriever):
    """BM25 search over a saved bm25s index and a ``PassageStore`` with the same row order."""

    def __init__(
        self,
        data: np.ndarray,
        indices: np.ndarray,
        indptr: np.ndarray,
        vocab: dict[str, int],
        store: PassageStore,
        options: BM25Options,
        manifest: dict | None = None,
        stopwords: list[str] | None = None,
    ) -> None:
        """``stopwords``: the exact list used at build time (default: resolve ``options.stopwords``)."""
        self._data = data  # (nnz,) float32: precomputed BM25 weight of each posting
        self._indices = indices  # (nnz,) int: passage row of each posting
        self._indptr = indptr  # (V + 1,) int: postings of term t are [indptr[t], indptr[t + 1])
        self._vocab = vocab
        self.store = store
        self.options = options
        self.manifest = manifest or {}
        self.analyzer = Analyzer(
            options.stemmer,
            stopwords if stopwords is not None else options.stopwords,
            options.split_cjk,
            options.unicode_words,
        )
        self._n = len(store)

    @classmethod
    def load(
        cls, directory: str | Path, store: PassageStore, options: BM25Options, manifest: dict | None = None
    ) -> BM25Retriever:
        """Open a bm25s index memory-mapped: posting arrays stay on disk and are paged in as queries touch them.

        We read bm25s's saved files (what ``bm25s.BM25.load(mmap=True)`` reads) with numpy directly, because
        importing bm25s pulls in scipy and costs about a second of start-up; bm25s is only needed to build.
        """
        directory = Path(directory)
        params = json.loads((directory / BM25S_FILES["params"]).read_text(encoding="utf-8"))
        if params.get("method") not in METHODS:
            raise ValueError(f"{directory}: BM25 method {params.get('method')!r} is not supported; rebuild the index")
        if int(params["num_docs"]) != len(store):
            raise ValueError(
                f"BM25 index has {params['num_docs']} passages but the passage store has {len(store)}; rebuild it"
            )
        arrays = {k: np.load(directory / BM25S_FILES[k], mmap_mode="r") for k in ("data", "indices", "indptr")}
        vocab = json.loads((directory / BM25S_FILES["vocab"]).read_text(encoding="utf-8"))
        stopwords_path = directory / STOPWORDS_FILE
        stopwords = json.loads(stopwords_path.read_text(encoding="utf-8")) if stopwords_path.exists() else None
        return cls(arrays["data"], arrays["indices"], arrays["indptr"], vocab, store, options, manifest, stopwords)

    def term_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's terms (unknown terms dropped; repeats kept, as BM25 sums per term)."""
        vocab = self._vocab
        return [vocab[t] for t in self.analyzer(query) if t in vocab]

    def _postings(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """Passage rows and BM25 weights of every posting of the query's terms (a row repeats across terms)."""
        ids = self.term_ids(query)
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        starts, ends = self._indptr[ids], self._indptr[np.asarray(ids) + 1]
        rows = np.concatenate([self._indices[s:e] for s, e in zip(starts, ends, strict=True)])
        weights = np.concatenate([self._data[s:e] for s, e in zip(starts, ends, strict=True)])
        return rows, weights

    def sparse_scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores): the passages that share a term with the query, ascending, and their BM25 scores
        (float64). Costs what the query's postings cost, not the corpus size: no array of N scores."""
        rows, weights = self._postings(query)
        touched, slot = np.unique(rows, return_inverse=True)  # (R,) ascending; (P,) each posting's slot
        # bincount adds each slot's weights in posting order, as a bincount over all N rows would: same sums.
        return touched, np.bincount(slot.reshape(-1), weights=weights, minlength=len(touched))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for one query: (N,) float64."""
        out = np.zeros(self._n)
        rows, scores = self.sparse_scores(query)
        out[rows] = scores
        return out

    def rank(self, queries: list[str], depth: int) -> list[Ranking]:
        out: list[Ranking] = []
        for q in queries:
            rows, s = self.sparse_scores(q)  # (R,) each
            keep = s > 0  # passages sharing no term with the query are not results
            cand, s = rows[keep], s[keep]
            if len(cand) > depth:  # those above the depth-th best score, then the lowest rows of those tied with it
                cut = np.partition(s, len(s) - depth)[len(s) - depth]
                above, tied = s > cut, cand[s == cut]
                need = depth - int(above.sum())
                if len(tied) > need:  # linear, not a sort of every tie: ~100-word passages tie often on one term
                    tied = np.partition(tied, need - 1)[:need]
                cand = np.concatenate([cand[above], tied])
                s = np.concatenate([s[above], np.full(len(tied), cut, dtype=s.dtype)])
            # Sort by score, ties by row (as Lucene breaks them by document), then cut: the top k is the prefix of
            # the top K, so a request answers the same whatever requests the service merged it with.
            order = np.lexsort((cand, -s))[:depth]
            out.append([(int(r), float(x)) for r, x in zip(cand[order], s[order], strict=True)])
        return out
