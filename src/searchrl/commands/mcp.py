"""``searchrl mcp``: our indexes as an MCP (Model Context Protocol) server, and a look at any MCP server's tools."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path

import typer

from searchrl.commands.index import ALLOWED_HOST

app = typer.Typer(
    help="MCP (Model Context Protocol): serve an index as an MCP search tool, list or call any MCP server's tools. "
    "Needs the mcp package (pip install 'searchrl[mcp]').\n\n"
    "Example: searchrl mcp serve --index indexes/bm25",
    no_args_is_help=True,
)

SERVER = typer.Option(
    ..., "--server", help="the MCP server: a command line to start (stdio), or a streamable-HTTP URL (http://.../mcp)"
)
TIMEOUT = typer.Option(60.0, "--timeout", help="seconds to start / reach the server and for each call")
#: the client's timeouts are both --timeout here: its errors name the flag.
TIMEOUT_FLAGS = {"timeout_setting": "--timeout", "connect_timeout_setting": "--timeout"}


@app.command("serve")
def serve(
    index: Path = typer.Option(..., help="index directory (from `searchrl index build`)"),
    corpus: Path = typer.Option(None, help="refuse to start unless the index was built from this corpus file"),
    http: bool = typer.Option(False, "--http", help="serve streamable HTTP on --host/--port instead of stdio"),
    host: str = typer.Option("127.0.0.1", help="--http: interface to bind; loopback by default"),
    port: int = typer.Option(8001, min=0, max=65535, help="--http: TCP port"),
    path: str = typer.Option("/mcp", help="--http: the endpoint's path"),
    topk: int = typer.Option(3, min=1, help="documents per query when a call gives no topk"),
    max_topk: int = typer.Option(100, min=1, help="largest topk a call may ask for"),
    max_queries: int = typer.Option(4096, min=1, help="most queries in one call"),
    max_query_chars: int = typer.Option(4096, min=1, help="longest query, in characters"),
    query_encoder: str = typer.Option(
        None, help="dense query encoding: onnx | sentence-transformers (default: what the index manifest says)"
    ),
    allowed_host: list[str] = ALLOWED_HOST,
) -> None:
    """Serve an index (BM25, dense or hybrid) as an MCP server with one tool, search(queries, topk), answering JSON
    lists of documents. Over stdio by default: an MCP client starts this command itself.

    Example: searchrl mcp serve --index indexes/bm25

    Over HTTP: searchrl mcp serve --index indexes/bm25 --http --port 8001   (endpoint http://127.0.0.1:8001/mcp)
    """
    from searchrl.commands.index import _bind, _is_loopback
    from searchrl.retrieval.asgi import allowed_hosts
    from searchrl.retrieval.index import load_index
    from searchrl.retrieval.mcp_server import create_mcp_server, run_http, run_stdio
    from searchrl.utils import console

    sock = _bind(host, port) if http else None  # a busy port fails before the index loads
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # on stdio, stdout carries the protocol only
        retriever = load_index(index, corpus, query_encoder=query_encoder)
        server = create_mcp_server(
            retriever, default_topk=topk, max_topk=max_topk, max_queries=max_queries, max_query_chars=max_query_chars
        )
    manifest = retriever.manifest
    where = "stdio" if sock is None else f"http://{host}:{sock.getsockname()[1]}{path}"
    console.print(
        f"loaded {manifest['kind']} index of {manifest['counts']['passages']:,} passages from {index} in "
        f"{time.perf_counter() - t0:.2f} s; serving MCP (tool: search) on {where}",
        soft_wrap=True,
    )
    if sock is None:
        run_stdio(server)
        return
    if not _is_loopback(host):
        console.print(f"[yellow]warning:[/yellow] binding {host} exposes the index to the network; it has no auth")
    # as `searchrl serve`: SIGTERM shuts uvicorn down gracefully and the process ends with exit status 0
    stopped_by: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopped_by.append(signum))
    run_http(server, sock, path=path, allowed_hosts=allowed_hosts(host, allowed_host or ()))
    console.print(f"stopped serving MCP on {where}" + (" (SIGTERM)" if stopped_by else ""))


@app.command("tools")
def tools(server: str = SERVER, timeout: float = TIMEOUT) -> None:
    """Print an MCP server's tools as OpenAI-style function schemas (JSON), the form a chat template lists them in.

    Example: searchrl mcp tools --server "searchrl mcp serve --index indexes/bm25"
    """
    from searchrl.tools.mcp import tool_schemas

    print(json.dumps(tool_schemas(server, timeout_s=timeout, connect_timeout_s=timeout, **TIMEOUT_FLAGS), indent=2))


@app.command("call")
def call(
    tool: str = typer.Argument(..., help="the tool's name"),
    server: str = SERVER,
    args: str = typer.Option("{}", "--args", help="the tool's arguments as a JSON object"),
    timeout: float = TIMEOUT,
) -> None:
    """Call one tool of an MCP server and print its text result (a tool error: on stderr, exit status 1).

    Example: searchrl mcp call search --server "searchrl mcp serve --index indexes/bm25" --args '{"queries": ["x"]}'
    """
    from rich.markup import escape

    from searchrl.tools.mcp import MCPClient
    from searchrl.utils import console

    try:
        arguments = json.loads(args)
    except ValueError as err:
        raise ValueError(f'--args is not JSON ({err}); give an object, e.g. \'{{"query": "..."}}\'') from None
    if not isinstance(arguments, dict):
        raise ValueError(f"--args must be a JSON object of the tool's arguments, not {type(arguments).__name__}")
    with MCPClient(server, timeout_s=timeout, connect_timeout_s=timeout, **TIMEOUT_FLAGS) as client:
        client.tool(tool)  # an unknown tool: one line naming the server's tools
        result = client.call_tool(tool, arguments)
    if result.is_error:
        console.print(f"[red]tool error:[/red] {escape(result.text)}", soft_wrap=True)
        raise typer.Exit(1)
    print(result.text)
