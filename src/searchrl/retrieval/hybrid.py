"""Hybrid retrieval: BM25 and dense rankings fused by reciprocal-rank fusion (Cormack et al., 2009).

RRF gives a passage ``sum_r 1 / (rrf_k + rank_r)`` over the rankings it appears in (ranks from 1), which needs no
score calibration between BM25 (unbounded) and cosine (in [-1, 1]). ``rrf_k = 60`` is the paper's constant.
Each side is asked for ``max(k, candidates)`` passages, so a passage ranked modestly by both can still win.
"""

from __future__ import annotations

from collections import defaultdict

from searchrl.retrieval.local import LocalRetriever, Ranking


def rrf_fuse(rankings: list[Ranking], depth: int, rrf_k: float = 60.0) -> Ranking:
    """Fuse several rankings of the same rows; returns the top ``depth`` ``(row, rrf_score)`` pairs.

    >>> rrf_fuse([[(7, 9.0), (3, 5.0)], [(3, 0.9), (8, 0.5)]], depth=3)[0][0]
    3
    """
    fused: dict[int, float] = defaultdict(float)
    for ranking in rankings:
        for rank, (row, _score) in enumerate(ranking, start=1):
            fused[row] += 1.0 / (rrf_k + rank)
    # Ties (same fused score) are broken by row so results are deterministic.
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:depth]


class HybridRetriever(LocalRetriever):
    """RRF over a BM25 and a dense retriever that share one passage store (same rows)."""

    def __init__(
        self,
        sparse: LocalRetriever,
        dense: LocalRetriever,
        *,
        rrf_k: float = 60.0,
        candidates: int = 100,
        manifest: dict | None = None,
    ) -> None:
        if len(sparse.store) != len(dense.store):
            raise ValueError("hybrid parts index different passage stores; rebuild the hybrid index")
        self.sparse = sparse
        self.dense = dense
        self.store = sparse.store
        self.rrf_k = rrf_k
        self.candidates = candidates
        self.manifest = manifest or {}

    def rank(self, queries: list[str], depth: int) -> list[Ranking]:
        pool = max(depth, self.candidates)
        sparse = self.sparse.rank(queries, pool)
        dense = self.dense.rank(queries, pool)  # one encoder call for the whole batch
        return [rrf_fuse([s, d], depth, self.rrf_k) for s, d in zip(sparse, dense, strict=True)]
