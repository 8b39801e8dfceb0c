"""``MCPRetriever`` (``retrieval.kind: mcp``): rollouts search through any MCP server's search tool.

The server is started (a command line, stdio transport) or reached (a streamable-HTTP URL) by
:class:`searchrl.tools.mcp.MCPClient`. How a query reaches the tool comes from the tool's input schema unless the
config names it:

- the query argument: ``queries`` (an array: one query per call, ``[query]``) or ``query`` (a string), else the
  schema's only string (or string-array) argument;
- the top-k argument: ``topk``, ``top_k``, ``k``, ``num_results`` or ``max_results`` when the schema has one; the
  hits are cut to ``k`` in any case.

A batch of queries fans out one tool call per distinct query, at most ``concurrency`` in flight (counting the
calls of every thread that searches), and an LRU cache (keyed by query and k) answers repeats without a call. The
tool's text becomes hits (:func:`parse_hits`; several text blocks, block by block): a JSON list of documents
(``{id?, title?, contents | text, score?}``, as ``searchrl mcp serve`` and the ``/retrieve`` API write them; also a
list of strings, such a list under ``results`` / ``hits`` / ``documents``, or one document object), a JSON string as
its text, else the whole text as one document. A tool error, or a JSON list whose items are not documents, raises a
one-line error naming the server and the tool.

A stdio server that stopped is started again once per ``search`` call (a warning says so) before the error is
raised; searches in other threads that saw the same server stop use the new one. A timeout is not retried.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from searchrl.data.corpus import split_contents
from searchrl.retrieval.base import Hit
from searchrl.retrieval.cache import LRUCache
from searchrl.retrieval.local import check_search_args
from searchrl.tools.mcp import MCPClient, MCPTimeoutError, MCPToolError, MCPUnavailableError, ToolResult

if TYPE_CHECKING:
    from searchrl.config import MCPConfig

#: argument names taken for the query and for k when the config names none, in order of preference.
QUERY_ARGS = ("queries", "query")
TOPK_ARGS = ("topk", "top_k", "k", "num_results", "max_results")
#: keys a JSON object result may hold its list of documents under.
LIST_KEYS = ("result", "results", "hits", "documents", "docs")
#: keys a document's text may be under (``contents``: Search-R1's layout, the title on its first line).
TEXT_KEYS = ("text", "contents", "content", "snippet", "body")


def _types(prop: Any) -> set[str]:
    """The JSON types a property schema allows (``type``, a list of them, or ``anyOf`` / ``oneOf`` branches)."""
    if not isinstance(prop, Mapping):
        return set()
    kind = prop.get("type")
    out = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for key in ("anyOf", "oneOf"):
        for branch in prop.get(key) or []:
            out |= _types(branch)
    return out


def _is_string_array(prop: Any) -> bool:
    if "array" not in _types(prop):
        return False
    branches = [prop, *(prop.get("anyOf") or []), *(prop.get("oneOf") or [])]
    items = [b.get("items") for b in branches if isinstance(b, Mapping) and b.get("items") is not None]
    return not items or any("string" in _types(i) or not _types(i) for i in items)


def _check_named(props: Mapping[str, Any], name: str, key: str) -> None:
    """A configured argument name (``retrieval.mcp.<key>``) must be one of the tool's arguments."""
    if props and name not in props:
        raise ValueError(
            f"the tool has no argument {name!r} (its arguments: {', '.join(props) or 'none'}); "
            f"fix retrieval.mcp.{key}, or set it to null to detect it from the tool's schema"
        )


def query_argument(schema: Mapping[str, Any], name: str | None = None) -> tuple[str, bool]:
    """``(argument, as_list)``: the argument that receives the query and whether it takes a list of queries.

    ``name`` given: that argument (a list when its schema says array). Else ``queries`` / ``query`` when present,
    else the only string or string-array argument. A one-line ``ValueError`` naming the arguments otherwise."""
    props = schema.get("properties") or {}
    if name is not None:
        _check_named(props, name, "query_arg")
        return name, _is_string_array(props.get(name))
    for candidate in QUERY_ARGS:
        if candidate in props and (_is_string_array(props[candidate]) or "string" in _types(props[candidate])):
            return candidate, _is_string_array(props[candidate])
    fits = [n for n, p in props.items() if "string" in _types(p) or _is_string_array(p)]
    if len(fits) == 1:
        return fits[0], _is_string_array(props[fits[0]])
    raise ValueError(
        f"cannot tell which argument of the tool takes the query (its arguments: {', '.join(props) or 'none'}); "
        "name it in retrieval.mcp.query_arg"
    )


def topk_argument(schema: Mapping[str, Any], name: str | None = None) -> str | None:
    """The argument that receives k: ``name`` when given (it must exist), else a usual name the schema has."""
    props = schema.get("properties") or {}
    if name is not None:
        _check_named(props, name, "topk_arg")
        return name
    return next((n for n in TOPK_ARGS if n in props and _types(props[n]) & {"integer", "number"}), None)


def _hit(item: Any, rank: int) -> Hit:
    """One document of a JSON result: an object (``document`` nested or not) or a string."""
    if isinstance(item, str):
        return Hit("", "", item, 0.0)
    if not isinstance(item, Mapping):
        raise ValueError(f"a document must be a JSON object or a string, got {type(item).__name__}")
    score = item.get("score", 0.0)
    doc = item["document"] if isinstance(item.get("document"), Mapping) else item
    if doc.get("text") is not None:
        title, text = str(doc.get("title") or ""), str(doc["text"])
    elif doc.get("contents") is not None:  # Search-R1's layout: the title on the first line
        first, text = split_contents(str(doc["contents"]))
        title = str(doc.get("title") or first)
    else:
        body = next((doc[k] for k in TEXT_KEYS if doc.get(k) is not None), None)
        if body is None:
            raise ValueError(f"document {rank} has no text (fields: {', '.join(doc) or 'none'})")
        title, text = str(doc.get("title") or ""), str(body)
    try:
        score = float(score)
    except (TypeError, ValueError):
        score = 0.0
    doc_id = next((doc[k] for k in ("id", "url") if doc.get(k) is not None and doc.get(k) != ""), "")
    return Hit(str(doc_id), title, text, score)


def _documents(value: Any) -> list[Any] | None:
    """The document list a JSON value holds: a list, one list per query (of one query), or a list under a key."""
    if isinstance(value, Mapping):
        key = next((k for k in LIST_KEYS if isinstance(value.get(k), list)), None)
        value = value[key] if key is not None else None
    if not isinstance(value, list):
        return None
    if len(value) == 1 and isinstance(value[0], list):  # one list per query, as for a `queries` array of one
        value = value[0]
    return value


def hits_of(result: ToolResult) -> list[Hit]:
    """A tool result's hits: its text (:func:`parse_hits`), or, when it holds several text blocks (a tool that
    answers one block per document), the hits of every block in turn."""
    if len(result.blocks) == 1:
        return parse_hits(result.blocks[0])
    return [hit for block in result.blocks for hit in parse_hits(block)]


def parse_hits(text: str) -> list[Hit]:
    """A search tool's text result as hits: a JSON document list (see the module's docstring), else the text as one
    document (none when it is blank). A JSON list whose items are not documents raises ``ValueError``."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        value = json.loads(stripped)
    except ValueError:
        return [Hit("", "", stripped, 0.0)]
    docs = _documents(value)
    if docs is None and isinstance(value, Mapping) and any(k in value for k in (*TEXT_KEYS, "document")):
        docs = [value]  # one document
    if isinstance(value, str):  # a JSON string: its text is the document
        return [Hit("", "", value.strip(), 0.0)] if value.strip() else []
    if docs is None:  # a JSON number or another object: its text is the document
        return [Hit("", "", stripped, 0.0)]
    return [_hit(item, i) for i, item in enumerate(docs)]


class MCPRetriever:
    """``search(queries, k)`` through an MCP server's search tool (see the module's docstring).

    ``client`` is a connected :class:`MCPClient`; with ``reconnect`` (a function making a new one) a stdio server
    that stopped is started again once per ``search`` call."""

    def __init__(
        self,
        client: MCPClient,
        *,
        tool: str = "search",
        query_arg: str | None = None,
        topk_arg: str | None = None,
        cache_size: int = 10_000,
        reconnect: Callable[[], MCPClient] | None = None,
    ) -> None:
        self.client = client
        self.tool = tool
        self._reconnect = reconnect
        self._reconnect_lock = threading.Lock()  # searches in several threads start a stopped server once
        self._closed = False
        try:
            spec = client.tool(tool)
        except MCPToolError as err:
            raise MCPToolError(f"{err}; fix retrieval.mcp.tool") from None
        try:
            self.query_arg, self.as_list = query_argument(spec.input_schema, query_arg)
            self.topk_arg = topk_argument(spec.input_schema, topk_arg)
        except ValueError as err:
            raise ValueError(f"MCP server {client.label}, tool {tool!r}: {err}") from None
        self.cache = LRUCache(cache_size)
        self.calls = 0
        self.reconnects = 0

    @classmethod
    def from_config(cls, cfg: MCPConfig, timeout_s: float = 10.0) -> MCPRetriever:
        """The retriever ``retrieval.mcp`` describes (``timeout_s``: ``retrieval.timeout_s``, one tool call's)."""

        def connect() -> MCPClient:
            return MCPClient(
                cfg.server,
                timeout_s=timeout_s,
                connect_timeout_s=cfg.connect_timeout_s,
                env=cfg.env,
                concurrency=cfg.concurrency,
                config_key="retrieval.mcp",
                timeout_setting="retrieval.timeout_s",
            )

        client = connect()
        try:
            return cls(client, tool=cfg.tool, query_arg=cfg.query_arg, topk_arg=cfg.topk_arg, reconnect=connect)
        except BaseException:
            client.close()
            raise

    def arguments(self, query: str, k: int) -> dict[str, Any]:
        """The tool's arguments for one query."""
        args: dict[str, Any] = {self.query_arg: [query] if self.as_list else query}
        if self.topk_arg is not None:
            args[self.topk_arg] = k
        return args

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        queries = check_search_args(queries, k)
        found: dict[str, list[Hit]] = {}
        missing: list[str] = []
        for q in dict.fromkeys(queries):  # unique, in order
            cached = self.cache.get((q, k))
            if cached is None:
                missing.append(q)
            else:
                found[q] = cached
        if missing:
            results = self._call([(self.tool, self.arguments(q, k)) for q in missing])
            for q, result in zip(missing, results, strict=True):
                hits = self._hits(q, result)[:k]
                found[q] = hits
                self.cache.put((q, k), hits)
        return [list(found[q]) for q in queries]

    def _call(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[ToolResult]:
        client = self.client
        try:
            results = client.call_tools(calls)
        except MCPTimeoutError:
            raise
        except MCPUnavailableError as err:
            if self._reconnect is None or not isinstance(client.server, list) or self._closed:
                raise
            with self._reconnect_lock:
                if self.client is client and not self._closed:  # the first search to see it stop starts it again
                    from rich.markup import escape

                    from searchrl.utils import console

                    console.print(f"[yellow]warning:[/yellow] {escape(str(err))}; starting it again", soft_wrap=True)
                    client.close()
                    self.client = self._reconnect()
                    self.reconnects += 1
                client = self.client
            results = client.call_tools(calls)
        self.calls += len(calls)
        return results

    def _hits(self, query: str, result: ToolResult) -> list[Hit]:
        where = f"MCP server {self.client.label}, tool {self.tool!r}"
        if result.is_error:
            raise MCPToolError(
                f"{where} failed for query {query[:80]!r}: {' '.join(result.text.split())[:300]}; "
                "check the server (run the call by hand with `searchrl mcp call`)"
            )
        try:
            return hits_of(result)
        except ValueError as err:
            raise MCPToolError(
                f"{where} returned a result that is not a list of documents ({err}); it should answer JSON "
                "[{id, title, text | contents, score}, ...] or plain text"
            ) from None

    def close(self) -> None:
        with self._reconnect_lock:
            self._closed = True
            self.client.close()

    def __enter__(self) -> MCPRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
