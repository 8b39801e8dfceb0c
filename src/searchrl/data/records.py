"""The one QA record type every loader produces."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

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


#: what a rollout or a method takes as its questions: records, question strings or dataset rows, or one of them.
Questions: TypeAlias = "QAExample | str | Mapping[str, Any] | Sequence[QAExample | str | Mapping[str, Any]]"


def as_examples(items: Questions) -> list[QAExample]:
    """Questions as :class:`QAExample` records: a record as it is, a string as a question with no gold answers (id
    ``q<i>``, its position), a mapping as a dataset row (``{"question", "golden_answers"}`` or ``"answer"``, an
    optional ``"id"``; without answers it has none).

    >>> [(e.id, e.question, e.answers) for e in as_examples(["Who?", {"question": "Where?", "answer": "Oslo"}])]
    [('q0', 'Who?', []), ('q1', 'Where?', ['Oslo'])]
    """
    from searchrl.data.loaders import row_to_example

    if isinstance(items, QAExample | str | Mapping):
        items = [items]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, QAExample):
            out.append(item)
        elif isinstance(item, str):
            out.append(QAExample(f"q{i}", item, []))
        elif isinstance(item, Mapping):
            out.append(row_to_example(dict(item), f"question {i}", f"q{i}", need_answers=False))
        else:
            raise TypeError(
                f"question {i} is a {type(item).__name__}: give question strings, {{'question', 'golden_answers'}} "
                "rows or QAExample records (searchrl.data.records.QAExample)"
            )
    return out
