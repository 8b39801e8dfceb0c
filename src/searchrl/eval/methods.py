"""Every evaluation method by name: the registry that ``evaluation.methods`` names (a test keeps that field's
Literal equal to it), with each method's traits on its class."""

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
from searchrl.eval.prior import PriorMethod
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
        PriorMethod,
    )
}
#: methods that need a retriever (each method class says so itself: ``Method.needs_retriever``)
RETRIEVAL_METHODS = frozenset(name for name, method in METHODS.items() if method.needs_retriever)
