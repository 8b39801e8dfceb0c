"""The one QA record type every loader produces."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_HOPS_ID = re.compile(r"^(\d+hop)")  # MuSiQue's ids: "2hop__482757_12019", "3hop1__..."


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str | None:
        """The dataset's own question kind, scored apart in evaluations: ``kind`` (synthetic worlds), ``type``
        (HotpotQA's bridge / comparison, 2WikiMultiHopQA's four types), or MuSiQue's hop count from its ids.

        >>> QAExample("2hop__482757_12019", "q", ["a"]).kind, QAExample("q1", "q", ["a"], {"type": "bridge"}).kind
        ('2hop', 'bridge')
        """
        found = self.metadata.get("kind") or self.metadata.get("type")
        if found:
            return str(found)
        hops = _HOPS_ID.match(self.id)
        return hops.group(1) if hops else None

    def to_flashrag(self) -> dict[str, Any]:
        """FlashRAG JSONL layout: ``{"id", "question", "golden_answers", "metadata"}``."""
        row: dict[str, Any] = {"id": self.id, "question": self.question, "golden_answers": list(self.answers)}
        if self.metadata:
            row["metadata"] = self.metadata
        return row
