"""The one QA record type every loader produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_flashrag(self) -> dict[str, Any]:
        """FlashRAG JSONL layout: ``{"id", "question", "golden_answers", "metadata"}``."""
        row: dict[str, Any] = {"id": self.id, "question": self.question, "golden_answers": list(self.answers)}
        if self.metadata:
            row["metadata"] = self.metadata
        return row
