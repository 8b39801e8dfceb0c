"""Every searching protocol cuts its own observations into documents (for the viewer), and names the blocks of the
policy's text that a viewer shows apart."""

from __future__ import annotations

import pytest

from searchrl.protocols import PROTOCOLS, get_protocol
from searchrl.retrieval.base import Hit

CONFIGS = [
    ("search_r1", {}),
    ("r1_searcher", {}),
    ("r1_searcher_pp", {}),
    ("r_search", {}),
    ("rag_r1", {}),
    ("rag_r1", {"multi_query": True}),
    ("search_o1", {}),
    ("tool_call", {}),
]
IDS = [name + ("-multi" if opts else "") for name, opts in CONFIGS]


def _hits(query: str, k: int = 3) -> list[Hit]:
    """Documents whose text holds a marker of its own, and a numbered line that is not the next document's number."""
    return [Hit(f"{query}-{i}", f"Title {i}", f"text of DOC-{query}-{i}\n(9) a footnote (2)", 1.0) for i in range(k)]


def test_the_configs_cover_every_searching_protocol() -> None:
    assert {name for name, _ in CONFIGS} == {name for name, cls in PROTOCOLS.items() if cls.searches}


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_each_document_is_one_part_in_order(name: str, options: dict) -> None:
    protocol = get_protocol(name, **options)
    queries = ["alpha", "beta"][: protocol.max_queries]
    observation = protocol.render_observation(queries, [_hits(q) for q in queries])
    parts = protocol.split_documents(observation)
    docs = [text for text, is_doc in parts if is_doc]
    markers = [f"DOC-{q}-{i}" for q in queries for i in range(3)]
    assert len(docs) == len(markers), parts
    for doc, marker in zip(docs, markers, strict=True):
        assert marker in doc and sum(m in doc for m in markers) == 1
    assert not any(m in text for text, is_doc in parts if not is_doc for m in markers)
    assert protocol.result_tags[1] not in docs[-1]  # the closing tag is not part of the last document
    if name == "rag_r1" and options:  # the JSON is decoded: each query's line, then its documents
        assert ("query: beta\n", False) in parts
    else:
        assert "".join(text for text, _ in parts) == observation


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_text_without_documents_is_one_part(name: str, options: dict) -> None:
    protocol = get_protocol(name, **options)
    feedback = "My last step was not a valid action. (1) I should search."
    assert protocol.split_documents(feedback) == [(feedback, False)]
    assert protocol.split_documents("") == []


def test_marked_blocks_are_the_protocols_own_tags() -> None:
    r_search, pp = get_protocol("r_search"), get_protocol("r1_searcher_pp")
    opening, closing = r_search.marked_blocks()["evidence"]
    assert r_search.format_evidence("x") == f"{opening}x{closing}"
    opening, closing = pp.marked_blocks()["internal"]
    assert pp.format_recalled("x").strip() == f"{opening}x{closing}"
    assert get_protocol("search_r1").marked_blocks() == {}
