"""A scripted model, a keyword retriever and three questions whose predictions (and so metrics) are known exactly."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.retrieval.base import Hit

Q_ROME = "Where was Anna Berg born?"
Q_HALE = "Who directed Blue Lake?"
Q_OSLO = "Is Oslo in Norway?"

DOCS = {
    "anna": Hit("d-anna", "Anna Berg", "Anna Berg was born in Rome in 1950.", 3.0),
    "blue": Hit("d-blue", "Blue Lake", "Blue Lake is a film directed by Tom Hale.", 2.0),
    "hale": Hit("d-hale", "Tom Hale", "Tom Hale was born in Oslo, Norway.", 1.5),
    "oslo": Hit("d-oslo", "Oslo", "Oslo is the capital of Norway.", 1.0),
    "acme": Hit("d-acme", "Acme", "Acme is a company.", 0.5),
}


class KeywordRetriever:
    """Returns the documents whose key word occurs in the query (case-insensitive), best first; records calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append((list(queries), k))
        out = []
        for q in queries:
            hits = [h for key, h in DOCS.items() if key in q.lower()] or [DOCS["acme"]]
            out.append(hits[:k])
        return out


def scripted(replies: Callable[[str], str]) -> ScriptedGenerator:
    return ScriptedGenerator(ByteTokenizer(), replies)


@pytest.fixture
def examples() -> list[QAExample]:
    return [
        QAExample("q1", Q_ROME, ["Rome"]),
        QAExample("q2", Q_HALE, ["Tom Hale", "T. Hale"]),
        QAExample("q3", Q_OSLO, ["yes"]),
    ]


@pytest.fixture
def retriever() -> KeywordRetriever:
    return KeywordRetriever()


def direct_reply(ctx: str) -> str:
    """EM 1 for q1; a sentence that covers the gold for q2; a wrong yes/no for q3."""
    if Q_ROME in ctx:
        return "Answer: Rome.\nShe was born there."
    if Q_HALE in ctx:
        return "The director is Tom Hale"
    return "No"


@pytest.fixture
def direct_generator() -> ScriptedGenerator:
    return scripted(direct_reply)


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The module's constants and helpers (tests run with --import-mode=importlib, so they cannot import conftest)."""
    return SimpleNamespace(
        Q_ROME=Q_ROME,
        Q_HALE=Q_HALE,
        Q_OSLO=Q_OSLO,
        DOCS=DOCS,
        KeywordRetriever=KeywordRetriever,
        scripted=scripted,
        direct_reply=direct_reply,
    )


@pytest.fixture
def qa_file(tmp_path, examples):
    """The three questions as a FlashRAG-style JSONL file (what evaluation.datasets names)."""
    import json

    path = tmp_path / "qa.jsonl"
    rows = [{"id": e.id, "question": e.question, "golden_answers": e.answers} for e in examples]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
