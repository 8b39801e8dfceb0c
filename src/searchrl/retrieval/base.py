"""The one retrieval interface: batched ``search(queries, k) -> list[list[Hit]]``.

Local indexes (BM25, dense, hybrid), the HTTP client and the web backend all implement it, so the rollout engine
cannot tell them apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    score: float

    @property
    def contents(self) -> str:
        """Search-R1 / FlashRAG corpus layout: title on the first line, then the text."""
        return f"{self.title}\n{self.text}"

    @property
    def body(self) -> str:
        """The text without the title that Wikipedia chunks repeat at their start ("Rope (film) Rope is ...")."""
        n = len(self.title)
        if self.title and self.text.startswith(self.title) and self.text[n : n + 1].isspace():
            return self.text[n:].lstrip()
        return self.text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """One list of at most ``k`` hits per query, best first; order of the outer list = order of queries."""
        ...


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_hits(
    hits: Any, n_queries: int, retriever: Any, k: int | None = None, blank: Sequence[str] = ()
) -> list[list[Hit]]:
    """``hits`` as a retriever must return them for ``n_queries`` queries: one list of :class:`Hit` per query, the
    first ``k`` of each kept (a retriever of one's own may return more than it was asked for). Else a one-line
    ``TypeError`` naming the retriever and the shape it should give (a retriever of one's own is checked at its first
    search, before any observation is built from it). A title or text that is not a string is such an error too; a
    lone surrogate in one (half a pair, as a corpus with a cut JSON escape holds it), which no tokenizer encodes, is
    replaced by U+FFFD, and each string of ``blank`` (a tokenizer's special tokens, which a document must not pass
    to the model as control tokens) by a space.

    >>> check_hits([[Hit("d1", "T", "text", 1.0)]], 1, None)[0][0].id
    'd1'
    >>> check_hits([{"id": "d1"}], 1, None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: NoneType.search returned a dict for a query's results: each must be a list of ...Hit(...)
    """
    name = f"{type(retriever).__name__}.search"
    if not isinstance(hits, list | tuple) or len(hits) != n_queries:
        got = f"{len(hits)} lists" if isinstance(hits, list | tuple) else f"a {type(hits).__name__}"
        raise TypeError(f"{name} returned {got} for {n_queries} queries: it must return one list of hits per query")
    for row in hits:
        if not isinstance(row, list | tuple):
            raise TypeError(
                f"{name} returned a {type(row).__name__} for a query's results: each must be a list of "
                "searchrl.retrieval.base.Hit(id, title, text, score)"
            )
        if bad := next((h for h in row if not isinstance(h, Hit)), None):
            raise TypeError(
                f"{name} returned a {type(bad).__name__} as a hit: each must be a "
                "searchrl.retrieval.base.Hit(id, title, text, score)"
            )
        for hit in row[:k]:
            for key in ("title", "text"):
                if not isinstance(getattr(hit, key), str):
                    raise TypeError(
                        f"{name} returned a hit whose {key} is a {type(getattr(hit, key)).__name__}: give every "
                        "Hit a string title and text ('' when there is none)"
                    )
    return [[_readable(h, blank) for h in row[:k]] for row in hits]


def _readable(hit: Hit, blank: Sequence[str] = ()) -> Hit:
    """``hit`` with any lone surrogate in its title or text replaced by U+FFFD, and each string of ``blank`` by a
    space."""
    if any(s in hit.text or s in hit.title for s in blank):
        title, text = hit.title, hit.text
        for s in blank:
            title, text = title.replace(s, " "), text.replace(s, " ")
        hit = replace(hit, title=title, text=text)
    if hit.text.isascii() and hit.title.isascii():
        return hit
    if not (_LONE_SURROGATE.search(hit.text) or _LONE_SURROGATE.search(hit.title)):
        return hit
    return replace(hit, title=_LONE_SURROGATE.sub("\ufffd", hit.title), text=_LONE_SURROGATE.sub("\ufffd", hit.text))


class CheckedRetriever:
    """A retriever of one's own (a plugin's), its results checked (:func:`check_hits`) and cut to ``k`` wherever
    they are used: rollouts, the evaluation baselines, the documents of a ``rag`` prompt."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return check_hits(self.inner.search(queries, k), len(queries), self.inner, k)

    def __repr__(self) -> str:
        return f"CheckedRetriever({self.inner!r})"

    def __getattr__(self, name: str) -> Any:  # anything else the retriever offers (close, cache stats, ...)
        return getattr(self.inner, name)
