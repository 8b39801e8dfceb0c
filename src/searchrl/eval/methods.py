"""Every evaluation method by name: the registry that ``evaluation.methods`` names (a test keeps the config's names
equal to it), with each method's traits on its class, and :func:`register_method` for your own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from searchrl.config.extensions import add_name, same_definition
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
RETRIEVAL_METHODS = {name for name, method in METHODS.items() if method.needs_retriever}
#: your own methods: name -> ``factory(cfg, generator, retriever) -> Method``
CUSTOM_METHODS: dict[str, Callable[..., Method]] = {}


def register_method(name: str, factory: Callable[[Any, Any, Any], Method], *, needs_retriever: bool = False) -> None:
    """Make ``evaluation.methods: [name]`` evaluate your method beside the built-in ones (call it in a module that a
    run config's ``plugins:`` lists). ``factory(cfg, generator, retriever)`` gets the run config, the policy's
    generator and the run's retriever (None when the run has none; ``needs_retriever`` makes that an error before
    anything loads) and returns a :class:`Method`: an object with ``answer(examples) -> list[Prediction]``. A name
    already taken is refused, unless the same definition registers it again (a re-run notebook cell)."""
    if not callable(factory):
        raise TypeError(f"register_method({name!r}, ...) needs a callable factory(cfg, generator, retriever)")
    add_name("method", name, again=same_definition(CUSTOM_METHODS.get(name), factory))
    CUSTOM_METHODS[name] = factory
    (RETRIEVAL_METHODS.add if needs_retriever else RETRIEVAL_METHODS.discard)(name)
