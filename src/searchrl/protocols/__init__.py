"""The papers' text protocols (five trained methods and the prompted Search-o1 baseline), our JSON tool-call protocol,
the trained baselines' protocols without search (``reason``, ``rag``), and a name -> class registry.

``get_protocol("rag_r1", multi_query=True, max_queries=3)`` builds one; options are validated and unknown ones
raise a one-line ``ValueError`` naming the valid ones.
"""

from __future__ import annotations

from typing import Any

from searchrl.config.extensions import add_name, same_definition
from searchrl.protocols._tags import (
    BAD_ARGUMENTS,
    BAD_JSON,
    EMPTY_QUERY,
    INVALID_REASONS,
    NO_ACTION,
    NO_SEARCH,
    QUERY_TOO_LONG,
    UNKNOWN_TOOL,
    TagProtocol,
)
from searchrl.protocols.base import Action, Answer, FormatReport, Invalid, Protocol, Search
from searchrl.protocols.no_search import RAGProtocol, ReasonProtocol
from searchrl.protocols.r1_searcher import R1SearcherProtocol
from searchrl.protocols.r1_searcher_pp import R1SearcherPPProtocol
from searchrl.protocols.r_search import RSearchProtocol
from searchrl.protocols.rag_r1 import RAGR1Protocol
from searchrl.protocols.search_o1 import SearchO1Protocol
from searchrl.protocols.search_r1 import SearchR1Protocol
from searchrl.protocols.tool_call import ToolCallProtocol, search_tool

PROTOCOLS: dict[str, type[Protocol]] = {
    "search_r1": SearchR1Protocol,
    "r1_searcher": R1SearcherProtocol,
    "r1_searcher_pp": R1SearcherPPProtocol,
    "r_search": RSearchProtocol,
    "rag_r1": RAGR1Protocol,
    "search_o1": SearchO1Protocol,
    "tool_call": ToolCallProtocol,
    "reason": ReasonProtocol,
    "rag": RAGProtocol,
}


def register_protocol(name: str, cls: type[Protocol]) -> type[Protocol]:
    """Make your protocol class selectable as ``rollout.protocol: name`` (call it in a module that a run config's
    ``plugins:`` lists). A name already taken is refused, unless the same class registers it again (a re-run
    notebook cell). A subclass of ``SearchR1Protocol`` (or of ``RAGR1Protocol``, ``ReasonProtocol``,
    ``RAGProtocol``) that only renames its tags, e.g. ``search_tags = ("<query>", "</query>")``, writes its prompt,
    calls and observations in them; other protocols' texts keep their own tags."""
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise TypeError(f"register_protocol({name!r}, ...) needs a subclass of searchrl.protocols.Protocol")
    if "name" in vars(cls) and cls.name != name:
        raise ValueError(f"{cls.__name__}.name is {cls.name!r}; register it under that name, or change its name")
    add_name("protocol", name, again=same_definition(PROTOCOLS.get(name), cls))
    cls.name = name
    PROTOCOLS[name] = cls
    return cls


def get_protocol(name: str, **options: Any) -> Protocol:
    """The protocol called ``name`` built with ``options`` (e.g. ``multi_query=True`` for ``rag_r1``)."""
    try:
        cls = PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; choose one of: {', '.join(PROTOCOLS)}") from None
    return cls(**options)


__all__ = [
    "BAD_ARGUMENTS",
    "BAD_JSON",
    "EMPTY_QUERY",
    "INVALID_REASONS",
    "NO_ACTION",
    "NO_SEARCH",
    "PROTOCOLS",
    "QUERY_TOO_LONG",
    "UNKNOWN_TOOL",
    "Action",
    "Answer",
    "FormatReport",
    "Invalid",
    "Protocol",
    "R1SearcherPPProtocol",
    "R1SearcherProtocol",
    "RAGProtocol",
    "RAGR1Protocol",
    "RSearchProtocol",
    "ReasonProtocol",
    "Search",
    "SearchO1Protocol",
    "SearchR1Protocol",
    "TagProtocol",
    "ToolCallProtocol",
    "get_protocol",
    "register_protocol",
    "search_tool",
]
