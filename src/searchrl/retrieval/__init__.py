"""Retrieval: one batched interface, ``search(queries, k) -> list[list[Hit]]``, over local indexes (BM25, dense,
hybrid), remote ``/retrieve`` servers, web search and MCP servers' search tools. ``make_retriever`` turns a
``RetrievalConfig`` into one; ``register_retriever`` adds your own kind.

Submodules import their heavy dependencies (bm25s, faiss, torch, httpx, mcp) only when used, so importing this package
is cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from searchrl.config.extensions import add_name, same_definition
from searchrl.retrieval.base import CheckedRetriever, Hit, Retriever
from searchrl.storage import file_lock

if TYPE_CHECKING:
    from searchrl.config import RetrievalConfig

__all__ = [
    "Hit",
    "Retriever",
    "make_retriever",
    "register_retriever",
    "RETRIEVERS",
    "build_index",
    "load_index",
    "RemoteRetriever",
    "WebRetriever",
    "MCPRetriever",
]


#: your own retrieval kinds: ``retrieval.kind`` -> a factory of the retriever from the retrieval section.
RETRIEVERS: dict[str, Callable[[RetrievalConfig], Retriever]] = {}


def register_retriever(kind: str, factory: Callable[[RetrievalConfig], Retriever]) -> None:
    """Make ``retrieval.kind: kind`` build your retriever (call it in a module that a run config's ``plugins:``
    lists). ``factory(cfg)`` gets the retrieval section: your settings in ``cfg.options``, and ``cfg.topk`` and
    ``cfg.timeout_s``. It returns an object with ``search(queries, k) -> list[list[Hit]]`` (:class:`Retriever`;
    the rollout keeps the first ``k`` hits of each query). Such a kind has no local index, so none is built for it.
    A kind already taken is refused, unless the same definition registers it again (a re-run notebook cell)."""
    if not callable(factory):
        raise TypeError(f"register_retriever({kind!r}, ...) needs a callable factory(cfg) -> Retriever")
    add_name("retriever", kind, again=same_definition(RETRIEVERS.get(kind), factory))
    RETRIEVERS[kind] = factory


def make_retriever(cfg: RetrievalConfig, corpus: str | Path | None = None) -> Retriever:
    """The retriever a config asks for.

    - ``bm25`` / ``dense`` / ``hybrid``: load ``cfg.index``; when the directory has no index yet and ``corpus`` is
      given, build it first (with ``cfg.encoder``). A given ``corpus`` must match the index's fingerprint.
    - ``remote``: a ``RemoteRetriever`` over ``cfg.urls``.
    - ``web``: a ``WebRetriever`` with ``cfg.web``'s page fetching and summariser; provider ``google`` when
      ``$GOOGLE_API_KEY`` is set and ``$SERPAPI_API_KEY`` is not, else ``serpapi`` (or ``cfg.web.provider``);
      ``cfg.urls[0]``, when given, replaces the provider's base URL.
    - ``mcp``: an ``MCPRetriever`` over ``cfg.mcp.server``'s search tool (calls time out after ``cfg.timeout_s``).
    - a kind of :func:`register_retriever`: its factory's retriever.
    """
    if cfg.kind in RETRIEVERS:
        return CheckedRetriever(RETRIEVERS[cfg.kind](cfg))
    if cfg.kind == "mcp":
        from searchrl.retrieval.mcp import MCPRetriever

        return MCPRetriever.from_config(cfg.mcp, timeout_s=cfg.timeout_s)
    if cfg.kind == "remote":
        from searchrl.retrieval.client import RemoteRetriever

        if not cfg.urls:
            raise ValueError("retrieval.kind=remote needs retrieval.urls, e.g. [http://127.0.0.1:8000]")
        return RemoteRetriever(cfg.urls, timeout_s=cfg.timeout_s, retries=cfg.retries, backoff_s=cfg.backoff_s)
    if cfg.kind == "web":
        from searchrl.retrieval.pages import FetchOptions, PageFetcher, make_summarizer
        from searchrl.retrieval.web import WebRetriever

        web = cfg.web
        provider = web.provider
        if provider == "auto":
            google = bool(os.environ.get("GOOGLE_API_KEY")) and not os.environ.get("SERPAPI_API_KEY")
            provider = "google" if google else "serpapi"
        base_url = cfg.urls[0] if cfg.urls else None
        fetcher = None
        if web.fetch_pages:
            options = FetchOptions(
                timeout_s=web.page_timeout_s,
                max_bytes=web.max_page_bytes,
                max_chars=web.max_page_chars,
                respect_robots=web.respect_robots,
                user_agent=web.user_agent,
                allow_private=web.allow_private,
            )
            fetcher = PageFetcher(options)
        elif web.summarizer:
            raise ValueError("retrieval.web.summarizer needs retrieval.web.fetch_pages: true (it summarises pages)")
        return WebRetriever(
            provider,
            base_url=base_url,
            timeout_s=cfg.timeout_s,
            fetcher=fetcher,
            summarizer=make_summarizer(web),
            pages=web.pages,
            query_suffix=web.query_suffix,
        )

    from searchrl.retrieval.index import build_index, load_index, missing_index

    if cfg.index is None:
        raise ValueError(f"retrieval.kind={cfg.kind} needs retrieval.index (an index directory to load or build)")
    index = Path(cfg.index)
    if not (index / "manifest.json").exists():
        if corpus is None or index.is_file():  # nothing to build from, or a corpus file given as the index
            raise missing_index(index, cfg.kind)
        # the processes of a multi-process launch (or runs sharing the cache) build it once: the others wait for it
        with file_lock(index.with_name(f".{index.name}.lock")):
            if not (index / "manifest.json").exists():
                build_index(corpus, cfg.kind, index, encoder=cfg.encoder, faiss=cfg.faiss)
    retriever = load_index(index, corpus)
    built = retriever.manifest.get("kind")
    if built != cfg.kind:
        raise ValueError(f"{index} is a {built} index but retrieval.kind is {cfg.kind}; set kind: {built} or rebuild")
    return retriever


def __getattr__(name: str):
    # Lazy exports: keep `import searchrl.retrieval` free of bm25s/faiss/httpx imports.
    if name in ("build_index", "load_index"):
        from searchrl.retrieval import index

        return getattr(index, name)
    if name == "RemoteRetriever":
        from searchrl.retrieval.client import RemoteRetriever

        return RemoteRetriever
    if name == "WebRetriever":
        from searchrl.retrieval.web import WebRetriever

        return WebRetriever
    if name == "MCPRetriever":
        from searchrl.retrieval.mcp import MCPRetriever

        return MCPRetriever
    raise AttributeError(f"module 'searchrl.retrieval' has no attribute {name!r}")
