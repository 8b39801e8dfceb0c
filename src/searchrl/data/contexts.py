"""A corpus from the passages that QA datasets ship with their questions.

Several multi-hop datasets come with each question's candidate paragraphs instead of a separate corpus, and papers
evaluated on them (the "distractor" setting) retrieve over the union of those paragraphs. The layouts read here:

- HotpotQA and 2WikiMultiHopQA: ``context: [[title, [sentence, ...]], ...]`` (sentences joined with a space), or
  the Hugging Face copies' ``context: {"title": [...], "sentences": [[...], ...]}``;
- MuSiQue: ``paragraphs: [{"title", "paragraph_text"}, ...]``;
- DPR / FiD: ``ctxs``, ``positive_ctxs``, ``negative_ctxs``, ``hard_negative_ctxs``: ``[{"title", "text"}, ...]``.

Each distinct (title, text) becomes one passage with a content-hash id, so the same paragraph shipped with many
questions is stored once and the ids don't depend on the order of questions. The output is FlashRAG's corpus layout,
``{"id", "contents": "Title\\ntext"}``, ready for ``searchrl index build``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from searchrl.data.corpus import Passage

#: question-row fields holding shipped passages, in the order they are read
CONTEXT_FIELDS = ("context", "paragraphs", "ctxs", "positive_ctxs", "negative_ctxs", "hard_negative_ctxs")


def passage_id(title: str, text: str) -> str:
    """A content hash: the same (title, text) always gets the same id.

    >>> passage_id("Rope (film)", "Rope is a 1948 film.")
    'ctx-ff585def56d46b74'
    """
    return "ctx-" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]


def _one(item: Any, where: str, field: str) -> tuple[str, str]:
    """One shipped passage -> (title, text)."""
    if isinstance(item, list | tuple) and len(item) == 2:  # HotpotQA / 2Wiki: [title, [sentences]]
        title, sentences = item
        if isinstance(sentences, str):
            sentences = [sentences]
        return str(title).strip(), " ".join(str(s).strip() for s in sentences if str(s).strip())
    if isinstance(item, dict):
        text = item.get("paragraph_text", item.get("text"))
        if isinstance(text, str):
            return str(item.get("title") or "").strip(), text.strip()
    raise ValueError(
        f"{where}: field '{field}' holds {item!r:.80}; expected [title, [sentences]] (HotpotQA, 2Wiki) or "
        "{title, paragraph_text | text} (MuSiQue, DPR)"
    )


def shipped_passages(rows: Iterable[tuple[str, dict[str, Any]]]) -> Iterator[Passage]:
    """The distinct passages of ``rows`` ((where, fields) pairs: a question's extra fields and its location for
    errors), in the order they first appear. Raises ``ValueError`` when no row has any of :data:`CONTEXT_FIELDS`."""
    seen: set[str] = set()
    found = False
    for where, fields in rows:
        for field in CONTEXT_FIELDS:
            items = fields.get(field)
            if items is None:
                continue
            found = True
            if isinstance(items, dict) and isinstance(items.get("title"), list):  # HF: columns, not rows
                items = list(zip(items["title"], items.get("sentences") or items.get("text") or [], strict=False))
            if not isinstance(items, list | tuple):
                raise ValueError(f"{where}: field '{field}' must be a list of passages, got {type(items).__name__}")
            for item in items:
                title, text = _one(item, where, field)
                pid = passage_id(title, text)
                if text and pid not in seen:
                    seen.add(pid)
                    yield Passage(pid, title, text)
    if not found:
        raise ValueError(
            f"no question carries passages ({', '.join(CONTEXT_FIELDS)}); these questions need a corpus file of "
            "their own: data.corpus=FILE, or an evaluation set's corpus: FILE"
        )
