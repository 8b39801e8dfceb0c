"""``searchrl serve``: run the Search-R1-compatible retrieval service over an index directory."""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket
import time
from pathlib import Path

import typer


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    index: Path = typer.Option(..., help="index directory (from `searchrl index build`)"),
    host: str = typer.Option("127.0.0.1", help="interface to bind; loopback by default"),
    port: int = typer.Option(8000, help="TCP port"),
    corpus: Path = typer.Option(None, help="refuse to start unless the index was built from this corpus file"),
    topk: int = typer.Option(3, help="passages per query when a request gives no topk"),
    max_topk: int = typer.Option(100, help="largest topk a request may ask for"),
    max_queries: int = typer.Option(4096, help="most queries in one request"),
    max_query_chars: int = typer.Option(4096, help="longest query, in characters"),
    query_encoder: str = typer.Option(
        None, help="dense query encoding: onnx | sentence-transformers (default: what the index manifest says)"
    ),
    query_cache: int = typer.Option(10_000, help="query embeddings kept in an LRU cache (0: none)"),
    max_pending: int = typer.Option(
        16_384, help="queries that may wait for a batch; beyond, requests get 503 with Retry-After"
    ),
    max_queue_wait: float = typer.Option(30.0, help="seconds a request may wait for its batch before a 503"),
    access_log: bool = typer.Option(False, "--access-log", help="log every request"),
) -> None:
    """Serve an index over HTTP: POST /retrieve (Search-R1 format), GET /health, GET /stats, /docs.

    Example: searchrl serve --index indexes/bm25 --port 8000
    """
    import uvicorn

    from searchrl.retrieval.index import load_index
    from searchrl.retrieval.server import create_app
    from searchrl.utils import console

    sock = _bind(host, port)  # before loading the index: a busy port fails at once, and nothing claims to serve
    port = sock.getsockname()[1]  # the real port when --port 0 asked for any free one
    t0 = time.perf_counter()
    retriever = load_index(index, corpus, query_encoder=query_encoder)
    dense = getattr(retriever, "dense", retriever)
    if hasattr(dense, "query_cache"):
        dense.query_cache.maxsize = query_cache
    app = create_app(
        retriever, default_topk=topk, max_topk=max_topk, max_queries=max_queries, max_query_chars=max_query_chars,
        max_pending_queries=max_pending, max_queue_wait_s=max_queue_wait,
    )  # fmt: skip
    manifest = retriever.manifest
    encoder = f" (queries: {type(dense.encoder).__name__})" if hasattr(dense, "encoder") else ""
    console.print(
        f"loaded {manifest['kind']} index of {manifest['counts']['passages']:,} passages from {index} in "
        f"{time.perf_counter() - t0:.2f} s{encoder}; serving on http://{host}:{port}/retrieve"
    )
    if not _is_loopback(host):
        console.print(f"[yellow]warning:[/yellow] binding {host} exposes the index to the network; it has no auth")
    # uvicorn turns SIGTERM into a graceful shutdown (in-flight requests finish) and then re-raises the signal to
    # the handler that was in place before it; ours records it, so the process ends with exit status 0, not -15.
    stopped_by: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopped_by.append(signum))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=access_log))
    server.run(sockets=[sock])
    console.print(f"stopped serving on http://{host}:{port}" + (" (SIGTERM)" if stopped_by else ""))


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; a one-line error naming the fix when the port is taken or not allowed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise ValueError(f"port {port} on {host} is already in use (another `searchrl serve`?); "
                             "pick a free one with --port, or stop the process holding it") from None  # fmt: skip
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror or err}; check --host and --port") from None


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
