"""The BM25 score matrix, computed as bm25s computes it but without a Python list of token ids per passage.

bm25s's ``BM25.index`` takes every passage's token ids as a Python list (about 3.4 KB a passage at the peak:
50-70 GB for Wikipedia's 21M passages) and builds three more arrays of all postings before scipy turns them into
a CSC matrix. Here the token ids stream into one flat int32 array with int64 offsets (4 bytes a token), and the
matrix is assembled in two passes over chunks of passages: document frequencies first, then each posting's score
written straight to its place in the CSC arrays. The arithmetic is bm25s's own, operation for operation (its idf
functions; its term-frequency formulas, with numpy's promotion of a float64 scalar against a float32 array), so
the saved files are byte for byte those of ``bm25s.BM25.index`` + ``save`` (tested).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

#: tokens per chunk of passages in each pass (a chunk's temporaries are a few dozen bytes a token).
CHUNK_TOKENS = 1 << 20


class TokenStream:
    """Token ids of many passages in one flat int32 array, with each passage's start in an int64 array."""

    def __init__(self) -> None:
        self.ids = array("i")
        self.offsets = array("q", [0])

    def append(self, ids: Iterable[int]) -> None:
        self.ids.extend(ids)
        self.offsets.append(len(self.ids))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, offsets) as numpy views of the buffers (no copy)."""
        return np.frombuffer(self.ids, dtype=np.int32), np.frombuffer(self.offsets, dtype=np.int64)


def _chunks(offsets: np.ndarray) -> Iterable[tuple[int, int]]:
    """Passage ranges [a, b) of about CHUNK_TOKENS tokens each."""
    n, a = len(offsets) - 1, 0
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + CHUNK_TOKENS, side="right")) - 1
        b = min(max(b, a + 1), n)
        yield a, b
        a = b


def _postings(ids: np.ndarray, offsets: np.ndarray, a: int, b: int, n_vocab: int):
    """Distinct (passage, term) pairs of passages [a, b), sorted by passage then term, with their counts."""
    lengths = np.diff(offsets[a : b + 1])
    doc = np.repeat(np.arange(a, b, dtype=np.int64), lengths)
    keys, tf = np.unique(doc * n_vocab + ids[offsets[a] : offsets[b]], return_counts=True)
    return keys // n_vocab, keys % n_vocab, tf


def _term_frequency_component(tf: np.ndarray, l_d: np.ndarray, l_avg: np.float64, k1: float, b: float, method: str):
    """bm25s's term-frequency component for postings ``tf`` (float32) of passages of lengths ``l_d``.

    bm25s evaluates it passage by passage, the length part as a float64 scalar meeting the float32 ``tf`` array;
    numpy promotes that pair to float64 (numpy 2) or float32 (numpy 1), and so do we, per posting."""
    scalar_dtype = (np.float64(1.0) + np.zeros(1, dtype=np.float32)).dtype
    length_part = (k1 * ((1 - b) + b * l_d / l_avg)).astype(scalar_dtype)  # per posting: bm25s's scalar
    if method in ("robertson", "lucene"):
        return tf / (length_part + tf)
    if method == "atire":
        return (tf * (k1 + 1)) / (tf + length_part)
    raise ValueError(f"unknown BM25 method '{method}'")


def _index_dtypes(model: Any, nnz: int, n: int) -> tuple[type, type]:
    """(indices, indptr) integer types of the CSC arrays bm25s would save: its numpy builder keeps the passage
    rows in its ``int_dtype`` and counts in int64; scipy's (older bm25s) uses int32 for both while it can hold
    nnz and N."""
    if getattr(model, "csc_backend", "scipy") == "numpy":
        return np.dtype(model.int_dtype).type, np.int64
    small = max(nnz, n) <= np.iinfo(np.int32).max
    return (np.int32, np.int32) if small else (np.int64, np.int64)


def score_matrix(tokens: TokenStream, n_vocab: int, model: Any) -> dict[str, Any]:
    """bm25s's ``scores`` dict (CSC ``data``, ``indices``, ``indptr``, ``num_docs``) of a ``bm25s.BM25``
    ``model``'s k1, b, method and idf method over the passages in ``tokens`` (term ids below ``n_vocab``)."""
    from bm25s.scoring import _select_idf_scorer

    ids, offsets = tokens.arrays()
    n = len(tokens)
    lengths = np.diff(offsets)  # (N,) int64, as bm25s's np.array of len(...)
    avg_len = lengths.mean()
    df = np.zeros(n_vocab, dtype=np.int64)
    for a, b in _chunks(offsets):  # pass 1: in how many passages each term occurs
        df += np.bincount(_postings(ids, offsets, a, b, n_vocab)[1], minlength=n_vocab)
    idf_fn = _select_idf_scorer(model.idf_method)
    idf = np.array([idf_fn(d, N=n) if d else 0.0 for d in df.tolist()], dtype=model.dtype)  # (V,)
    nnz = int(df.sum())
    index_dtype, indptr_dtype = _index_dtypes(model, nnz, n)
    indptr = np.zeros(n_vocab + 1, dtype=indptr_dtype)
    np.cumsum(df, out=indptr[1:])
    data = np.empty(nnz, dtype=model.dtype)
    indices = np.empty(nnz, dtype=index_dtype)
    fill = indptr[:-1].astype(np.int64)  # (V,) next free slot of each term's postings
    for a, b in _chunks(offsets):  # pass 2: each posting's score, written to its term's slots in passage order
        doc, term, tf = _postings(ids, offsets, a, b, n_vocab)
        tfc = _term_frequency_component(tf.astype(model.dtype), lengths[doc], avg_len, model.k1, model.b, model.method)
        scores = (idf[term] * tfc).astype(model.dtype)
        order = np.argsort(term, kind="stable")  # by term, passages still ascending within a term
        term, doc, scores = term[order], doc[order], scores[order]
        first = np.flatnonzero(np.r_[True, term[1:] != term[:-1]])  # start of each term's run
        run = np.repeat(first, np.diff(np.r_[first, len(term)]))
        slots = fill[term] + (np.arange(len(term)) - run)
        data[slots] = scores
        indices[slots] = doc
        fill[term[first]] += np.diff(np.r_[first, len(term)])
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n}
