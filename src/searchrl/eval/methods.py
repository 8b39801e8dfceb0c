"""Every evaluation method by name (``evaluation.methods``)."""

from __future__ import annotations

from searchrl.eval.baselines import (
    AgentMethod,
    CoTMethod,
    DirectMethod,
    IterativeRAGMethod,
    IterRetGenMethod,
    Method,
    NaiveRAGMethod,
)
from searchrl.eval.search_o1 import SearchO1Method

METHODS: dict[str, type[Method]] = {
    m.name: m
    for m in (
        DirectMethod,
        CoTMethod,
        NaiveRAGMethod,
        IterativeRAGMethod,
        IterRetGenMethod,
        SearchO1Method,
        AgentMethod,
    )
}
#: methods that need a retriever
RETRIEVAL_METHODS = frozenset({"naive_rag", "iterative_rag", "iter_retgen", "search_o1", "agent"})
