"""The shared half of every on-disk retriever: rank rows of a ``PassageStore``, then turn rows into ``Hit``s.

BM25, dense and hybrid retrievers only differ in how they rank. Ranking returns passage *rows* (positions in the
store), so the hybrid retriever can fuse two rankings before any passage text is read from disk.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from searchrl.data.corpus import PassageStore
from searchrl.data.unitext import without_surrogates
from searchrl.retrieval.base import Hit

#: One ranking per query: ``(row, score)`` pairs, best first.
Ranking = list[tuple[int, float]]


def check_search_args(queries: list[str], k: int) -> list[str]:
    """The queries to search, without lone surrogates (a client's ``"\\ud800"`` escape: no text, and an encoder's
    tokenizer or an HTTP request's UTF-8 body raises on one). Programming errors stay loud: a bare string instead
    of a list would silently search per character."""
    if isinstance(queries, str):
        raise TypeError("search() takes a list of queries, not a single string; wrap it: search([query], k)")
    if k <= 0:
        raise ValueError(f"k must be >= 1 (got {k})")
    return [without_surrogates(q) for q in queries]


class LocalRetriever(ABC):
    """A retriever over a local ``PassageStore``; subclasses implement ``rank``."""

    store: PassageStore
    #: the index manifest this retriever was loaded from (empty when built in memory).
    manifest: dict

    @abstractmethod
    def rank(self, queries: list[str], depth: int) -> list[Ranking]:
        """Up to ``depth`` ``(row, score)`` pairs per query, best first. One batched call for all queries."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        queries = check_search_args(queries, k)
        if not queries:
            return []
        rankings = self.rank(queries, k)
        return [self.to_hits(ranking[:k]) for ranking in rankings]

    def to_hits(self, ranking: Ranking) -> list[Hit]:
        """Read the passages of a ranking lazily from the store."""
        passages = self.store.get_many(row for row, _ in ranking)
        return [Hit(p.id, p.title, p.text, float(score)) for p, (_, score) in zip(passages, ranking, strict=True)]

    def __len__(self) -> int:
        return len(self.store)

    def __repr__(self) -> str:
        """``BM25Retriever(passages=5009, index='indexes/wiki-bm25')``, with the encoder of a dense index."""
        dense = hasattr(self, "encoder") or hasattr(self, "dense")  # not the BM25 part of a hybrid index
        encoder = (self.manifest or {}).get("encoder") if dense else None
        shown = f", encoder={encoder!r}" if encoder else ""
        return f"{type(self).__name__}(passages={len(self.store)}{shown}, index={str(self.store.dir.parent)!r})"
