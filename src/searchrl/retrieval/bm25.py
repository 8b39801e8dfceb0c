"""BM25 through bm25s: an eager sparse index (one precomputed score per (term, passage)), saved as ``.npy`` arrays
that load memory-mapped, so a million-passage index starts in about a second.

Analysis (both when indexing and at query time): lowercase, split into words of 2+ word characters (the
scikit-learn pattern bm25s uses), drop stopwords, stem with PyStemmer (Snowball). Stemming and stopwords are options.

Defaults follow Lucene/Pyserini (``k1=0.9, b=0.4``, Lucene's idf), the BM25 setup Search-R1 and FlashRAG use for their
sparse baselines. Scoring a query is a sum over the posting lists of its terms; we do that sum with ``np.bincount``
(faster than bm25s's ``np.add.at``) on bm25s's own saved arrays, so scores are bm25s's scores exactly.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.data.corpus import PassageStore
from searchrl.retrieval.local import LocalRetriever, Ranking

#: bm25s's default token pattern (scikit-learn's CountVectorizer): words of two or more word characters.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
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


def _stopword_set(name: str | None) -> frozenset[str]:
    if name is None:
        return frozenset()
    from bm25s.tokenization import _infer_stopwords

    try:
        return frozenset(_infer_stopwords(name))
    except ValueError:
        raise ValueError(f"unknown stopword list '{name}'; use 'en' (or another bm25s language) or none") from None


class Analyzer:
    """Text -> index terms, exactly as bm25s's ``Tokenizer`` produces them at build time."""

    def __init__(self, stemmer: str | None = "english", stopwords: str | None = "en") -> None:
        self._split = re.compile(TOKEN_PATTERN).findall
        self._stopwords = _stopword_set(stopwords)
        self._stemmer = _make_stemmer(stemmer)
        # PyStemmer's Stemmer objects must not be used by two threads at once.
        self._lock = threading.Lock()

    def __call__(self, text: str) -> list[str]:
        words = [w for w in self._split(text.lower()) if w not in self._stopwords]
        if self._stemmer is None:
            return words
        with self._lock:
            return self._stemmer.stemWords(words)


def build_bm25(
    texts: Iterable[str],
    directory: str | Path,
    options: BM25Options = BM25Options(),
    *,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Tokenise ``texts`` (one per passage, in store order) and save a bm25s index in ``directory``.

    ``on_progress(n)`` is called every few thousand passages with the number just tokenised. Returns counts
    (``passages``, ``vocab``) for the manifest.
    """
    import bm25s
    from bm25s.tokenization import Tokenizer

    tokenizer = Tokenizer(
        splitter=TOKEN_PATTERN,
        stopwords=options.stopwords if options.stopwords is not None else [],
        stemmer=_make_stemmer(options.stemmer),
    )
    token_ids: list[list[int]] = []
    pending = 0
    for ids in tokenizer.streaming_tokenize(texts, update_vocab=True):
        token_ids.append(ids)
        pending += 1
        if on_progress is not None and pending == 5000:
            on_progress(pending)
            pending = 0
    if on_progress is not None and pending:
        on_progress(pending)
    if not token_ids:
        raise ValueError("cannot build a BM25 index over an empty corpus; check the corpus file has passages")
    vocab = tokenizer.get_vocab_dict()
    model = bm25s.BM25(k1=options.k1, b=options.b, method=options.method)
    model.index((token_ids, vocab), show_progress=False)
    model.save(str(directory), show_progress=False)
    return {"passages": len(token_ids), "vocab": len(model.vocab_dict)}


class BM25Retriever(LocalRetriever):
    """BM25 search over a saved bm25s index and a ``PassageStore`` with the same row order."""

    def __init__(self, model: Any, store: PassageStore, options: BM25Options, manifest: dict | None = None) -> None:
        self.model = model
        self.store = store
        self.options = options
        self.manifest = manifest or {}
        self.analyzer = Analyzer(options.stemmer, options.stopwords)
        self._vocab: dict[str, int] = model.vocab_dict
        scores = model.scores
        self._data = scores["data"]  # (nnz,) float32: precomputed BM25 weight of each posting
        self._indices = scores["indices"]  # (nnz,) int: passage row of each posting
        self._indptr = scores["indptr"]  # (V + 1,) int: postings of term t are [indptr[t], indptr[t + 1])
        self._n = int(scores["num_docs"])
        if self._n != len(store):
            raise ValueError(
                f"BM25 index has {self._n} passages but the passage store has {len(store)}; rebuild the index"
            )

    @classmethod
    def load(
        cls, directory: str | Path, store: PassageStore, options: BM25Options, manifest: dict | None = None
    ) -> BM25Retriever:
        """Load with ``mmap=True``: posting arrays stay on disk and are paged in as queries touch them."""
        import bm25s

        model = bm25s.BM25.load(str(directory), mmap=True, load_corpus=False, show_progress=False)
        return cls(model, store, options, manifest)

    def term_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's terms (unknown terms dropped; repeats kept, as BM25 sums per term)."""
        vocab = self._vocab
        return [vocab[t] for t in self.analyzer(query) if t in vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for one query: (N,) float64."""
        ids = self.term_ids(query)
        if not ids:
            return np.zeros(self._n)
        starts, ends = self._indptr[ids], self._indptr[np.asarray(ids) + 1]
        rows = np.concatenate([self._indices[s:e] for s, e in zip(starts, ends, strict=True)])
        weights = np.concatenate([self._data[s:e] for s, e in zip(starts, ends, strict=True)])
        return np.bincount(rows, weights=weights, minlength=self._n)  # (N,)

    def rank(self, queries: list[str], depth: int) -> list[Ranking]:
        out: list[Ranking] = []
        for q in queries:
            s = self.scores(q)  # (N,)
            cand = np.flatnonzero(s > 0)  # passages sharing no term with the query are not results
            if len(cand) > depth:
                cand = cand[np.argpartition(-s[cand], depth - 1)[:depth]]
            # Sort by score, ties by row, so equal-score results come back in a stable order.
            cand = cand[np.lexsort((cand, -s[cand]))]
            out.append([(int(r), float(s[r])) for r in cand])
        return out
