"""Our indexes as an MCP (Model Context Protocol) server: one ``search`` tool over any ``Retriever``.

``searchrl mcp serve --index DIR`` runs it over stdio (an MCP client starts it as a subprocess) or, with ``--http``,
over streamable HTTP (``http://HOST:PORT/mcp``). The tool::

    search(queries: list[str], topk: int | None = None)
    ->  JSON text: one list per query, best first, of {"id", "title", "text", "score"}

The same limits as the ``/retrieve`` service apply (number of queries, query length, topk); a request beyond them
is a tool error with a one-line message, which the calling model (or ``MCPRetriever``) reads. Searches run one at a
time in a worker thread, so the server keeps answering while an index searches. Over HTTP on a loopback address it
answers loopback Host names only, as ``searchrl serve`` (DNS rebinding; ``--allowed-host`` adds names).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from searchrl import __version__
from searchrl.retrieval.base import Retriever

SEARCH_DESCRIPTION = (
    "Search the document index. Give one or more search queries; each gets its own list of the best-matching "
    "documents (id, title, text, score), best first."
)


def create_mcp_server(
    retriever: Retriever,
    *,
    name: str = "searchrl",
    default_topk: int = 3,
    max_topk: int = 100,
    max_queries: int = 4096,
    max_query_chars: int = 4096,
) -> Any:
    """An ``mcp`` ``MCPServer`` exposing ``retriever`` as the ``search`` tool (see the module's docstring)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as err:
        from searchrl.tools.mcp import INSTALL_HINT
        from searchrl.utils import MissingDependency

        raise MissingDependency(f"serving MCP needs the mcp package: {INSTALL_HINT}") from err

    server = MCPServer(
        name,
        version=__version__,
        instructions="Search a document index with the `search` tool; it answers JSON lists of documents.",
        log_level="WARNING",
    )
    lock = threading.Lock()  # one search at a time: the index is not assumed to be thread-safe

    def search(
        queries: Annotated[list[str], Field(description="search queries; each gets its own list of documents")],
        topk: Annotated[int | None, Field(description="documents per query (default: the server's)")] = None,
    ) -> str:
        k = default_topk if topk is None else topk
        if not queries:
            raise ToolError("queries is empty; give at least one search query")
        if len(queries) > max_queries:
            raise ToolError(f"{len(queries)} queries in one call; at most {max_queries}")
        for q in queries:
            if not q.strip():
                raise ToolError("a query is empty; every query needs some text")
            if len(q) > max_query_chars:
                raise ToolError(f"a query of {len(q)} characters; at most {max_query_chars}")
        if not 1 <= k <= max_topk:
            raise ToolError(f"topk={k} is out of range; give 1 to {max_topk}")
        with lock:
            results = retriever.search(list(queries), k)
        return json.dumps([[hit.to_dict() for hit in hits] for hits in results], ensure_ascii=False)

    server.add_tool(search, name="search", description=SEARCH_DESCRIPTION, structured_output=False)
    return server


def run_stdio(server: Any) -> None:
    """Serve over stdin/stdout until the client closes stdin (the ``mcp`` package moves stray writes to fd 1 onto
    stderr while it serves, so logs cannot corrupt the protocol)."""
    import anyio

    anyio.run(server.run_stdio_async)


def http_app(server: Any, *, path: str = "/mcp", allowed_hosts: Sequence[str] | None = None) -> Any:
    """The streamable-HTTP ASGI app at ``path``. ``allowed_hosts`` (:func:`searchrl.retrieval.asgi.allowed_hosts`):
    the Host names answered, any port (others get 421, a browser page's foreign Origin 403); None answers any."""
    from mcp.server.transport_security import TransportSecuritySettings

    if allowed_hosts is None:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    else:
        names = [f"[{h}]" if ":" in h else h for h in allowed_hosts]
        security = TransportSecuritySettings(
            allowed_hosts=[*names, *(f"{n}:*" for n in names)],
            allowed_origins=[f"{s}://{n}{p}" for n in names for s in ("http", "https") for p in ("", ":*")],
        )
    return server.streamable_http_app(streamable_http_path=path, transport_security=security)


def run_http(server: Any, sock: Any, *, path: str = "/mcp", allowed_hosts: Sequence[str] | None = None) -> None:
    """Serve streamable HTTP at ``path`` on a listening socket (bound by the caller, so a busy port fails before the
    index loads) until SIGINT / SIGTERM; ``allowed_hosts`` as :func:`http_app`."""
    import uvicorn

    app = http_app(server, path=path, allowed_hosts=allowed_hosts)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
