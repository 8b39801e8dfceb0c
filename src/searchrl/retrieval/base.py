"""The one retrieval interface: batched ``search(queries, k) -> list[list[Hit]]``.

Local indexes (BM25, dense, hybrid), the HTTP client and the web backend all implement it, so the rollout engine
cannot tell them apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
