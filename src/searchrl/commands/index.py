"""``searchrl index``: build and inspect index directories; ``searchrl serve``: the retrieval service over one."""

from __future__ import annotations

import errno
import json
import signal
import socket
import sys
import time
from enum import StrEnum
from pathlib import Path

import typer

from searchrl.commands.common import said_when_stopped, writable_dir

app = typer.Typer(
    help="Build and inspect retrieval indexes (BM25, dense, hybrid).\n\n"
    "Example: searchrl index build --corpus corpus.jsonl --kind bm25 --out indexes/bm25",
    no_args_is_help=True,
)


class Kind(StrEnum):
    bm25 = "bm25"
    dense = "dense"
    hybrid = "hybrid"


@app.command("build")
def build(
    corpus: Path = typer.Option(
        ...,
        help="passage file: JSONL {id, contents} / {id, title, text} / KILT, TSV, parquet, or hf:NAME[:CONFIG]:SPLIT",
    ),
    kind: Kind = typer.Option(Kind.bm25, help="index type"),
    out: Path = typer.Option(..., help="index directory to create", callback=writable_dir),
    encoder: str = typer.Option("minilm-l6-v2", help="dense encoder: alias, local directory or HF id"),
    batch_size: int = typer.Option(64, help="dense: passages per encoder batch"),
    faiss: str = typer.Option(
        "flat",
        help="dense: flat (exact inner product), ivf, hnsw, or a faiss index_factory string such as "
        "'OPQ64,IVF4096,PQ64' (compressed, with exact re-ranking of the top --candidates)",
    ),
    nprobe: int = typer.Option(16, help="dense ivf / factory IVF: inverted lists probed per query"),
    candidates: int = typer.Option(100, help="dense factory index: passages per query re-ranked exactly"),
    refine_factor: int = typer.Option(
        10, help="dense factory index ending in Refine(...): passages scanned per one re-ranked (finer codes cut them)"
    ),
    stemmer: str = typer.Option("english", help="bm25: PyStemmer language, or 'none'"),
    stopwords: str = typer.Option("en", help="bm25: stopword list, or 'none'"),
    query_encoder: str = typer.Option(
        None,
        help="dense: onnx (export the encoder for fast, torch-free serving) or sentence-transformers; "
        "default: onnx when the encoder can be exported",
    ),
    max_words: int = typer.Option(
        None, min=1, help="cut passages longer than this many words into chunks of it (ids ID#0, ID#1, ...)"
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing index in --out"),
    device: str = typer.Option("auto", "--device", help="dense: where the encoder runs: auto, cpu, cuda, cuda:N"),
) -> None:
    """Build an index directory from a corpus file (shows a progress bar).

    Example: searchrl index build --corpus corpus.jsonl --kind bm25 --out indexes/bm25

    Compressed: searchrl index build --corpus corpus.jsonl --kind dense --faiss "IVF1024,PQ32" --out indexes/pq
    """
    from searchrl.device import configure
    from searchrl.retrieval.dense_build import PROGRESS_FILE
    from searchrl.retrieval.index import build_index, staging_dir

    configure(device)  # the passage encoder follows it (faiss stays on the CPU)
    if kind != Kind.bm25:
        from searchrl.models import check_encoder

        check_encoder(encoder)

    def go_on() -> str | None:  # a dense build's encoded passages are kept for the same corpus and encoder
        if (staging_dir(out) / "dense" / PROGRESS_FILE).exists():
            return "the same searchrl index build (it goes on from the passages encoded so far)"
        return None

    with said_when_stopped(f"{kind.value} index build into {out}", go_on):
        path = build_index(
            corpus,
            kind.value,
            out,
            encoder=encoder,
            batch_size=batch_size,
            faiss=faiss,
            nprobe=nprobe,
            candidates=candidates,
            refine_factor=refine_factor,
            stemmer=None if stemmer.lower() == "none" else stemmer,
            stopwords=None if stopwords.lower() == "none" else stopwords,
            query_encoder=query_encoder,
            max_words=max_words,
            overwrite=force,
        )
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    print(
        f"built {kind.value} index of {manifest['counts']['passages']:,} passages in "
        f"{manifest['build_seconds']} s -> {path}"
    )  # the result: stdout


@app.command("convert")
def convert(
    flat: Path = typer.Option(..., help="faiss IndexFlatIP file, e.g. Search-R1's e5_Flat.index"),
    corpus: Path = typer.Option(..., help="the passage file the Flat index was built from (same order)"),
    out: Path = typer.Option(..., help="index directory to create", callback=writable_dir),
    encoder: str = typer.Option("intfloat/e5-base-v2", help="the encoder that produced the Flat file's vectors"),
    faiss: str = typer.Option(None, help="faiss index_factory string; default OPQ{m},IVF{~4 sqrt N},PQ{m}"),
    nprobe: int = typer.Option(64, help="inverted lists probed per query"),
    candidates: int = typer.Option(100, help="passages per query re-ranked exactly with their fp16 vectors"),
    refine_factor: int = typer.Option(
        10, help="factory index ending in Refine(...): passages scanned per one re-ranked (finer codes cut them)"
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing index in --out"),
) -> None:
    """Convert a Search-R1 / FlashRAG faiss Flat index into a compressed dense index, streaming its vectors.

    Example: searchrl index convert --flat e5_Flat.index --corpus wiki-18.jsonl --out indexes/wiki-pq
    """
    from searchrl.retrieval.convert import convert_flat_index
    from searchrl.utils import console

    path = convert_flat_index(
        flat,
        corpus,
        out,
        encoder=encoder,
        faiss=faiss,
        nprobe=nprobe,
        candidates=candidates,
        refine_factor=refine_factor,
        overwrite=force,
    )
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    console.print(
        f"[green]converted[/green] {manifest['counts']['passages']:,} passages to "
        f"'{manifest['options']['dense']['faiss']}' in {manifest['build_seconds']} s -> {path}"
    )


@app.command("info")
def info(
    directory: Path = typer.Argument(..., help="index directory"),
    corpus: Path = typer.Option(None, help="also check that the index was built from this corpus file"),
) -> None:
    """Print an index's manifest (kind, corpus fingerprint, encoder, counts, options) as JSON.

    Example: searchrl index info indexes/bm25 --corpus corpus.jsonl
    """
    from searchrl.retrieval.index import check_corpus, read_manifest

    manifest = read_manifest(directory)
    if corpus is not None:
        check_corpus(manifest, corpus, directory)
        manifest["corpus_check"] = f"ok: {corpus} matches"
    print(json.dumps(manifest, indent=2))


# ------------------------------------------------------------------------------------------------------ serve
def _is_loopback(host: str) -> bool:
    from searchrl.retrieval.asgi import is_loopback

    return is_loopback(host)


#: ``--allowed-host`` of ``searchrl serve`` and ``searchrl mcp serve``
ALLOWED_HOST = typer.Option(
    None,
    "--allowed-host",
    help="a Host name clients may use besides localhost (repeatable; '*': any). On loopback only loopback names are "
    "answered (DNS rebinding); on another address any name, unless this is given",
)


def serve(
    index: Path = typer.Option(..., help="index directory (from `searchrl index build`)"),
    host: str = typer.Option("127.0.0.1", help="interface to bind; loopback by default"),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port"),
    corpus: Path = typer.Option(None, help="refuse to start unless the index was built from this corpus file"),
    topk: int = typer.Option(3, min=1, help="passages per query when a request gives no topk"),
    max_topk: int = typer.Option(100, min=1, help="largest topk a request may ask for"),
    max_queries: int = typer.Option(4096, min=1, help="most queries in one request"),
    max_query_chars: int = typer.Option(4096, min=1, help="longest query, in characters"),
    query_encoder: str = typer.Option(
        None, help="dense query encoding: onnx | sentence-transformers (default: what the index manifest says)"
    ),
    query_cache: int = typer.Option(10_000, help="query embeddings kept in an LRU cache (0: none)"),
    nprobe: int = typer.Option(
        None, min=1, help="dense ivf / factory IVF: inverted lists probed per query (default: the index's)"
    ),
    ef_search: int = typer.Option(None, min=1, help="dense hnsw: search breadth (default: the index's)"),
    candidates: int = typer.Option(
        None, min=1, help="dense factory index: passages per query re-ranked exactly (default: the index's)"
    ),
    max_pending: int = typer.Option(
        16_384, help="queries that may wait for a batch; beyond, requests get 503 with Retry-After"
    ),
    max_queue_wait: float = typer.Option(30.0, help="seconds a request may wait for its batch before a 503"),
    inline_ms: float = typer.Option(
        20.0, help="ms: a lone request is searched on the event loop when expected to take under this (0: never)"
    ),
    access_log: bool = typer.Option(False, "--access-log", help="log every request"),
    allowed_host: list[str] = ALLOWED_HOST,
) -> None:
    """Serve an index over HTTP: POST /retrieve (Search-R1 format), GET /health, GET /stats, /docs.

    Example: searchrl serve --index indexes/bm25 --port 8000
    """
    import uvicorn

    from searchrl.retrieval.asgi import allowed_hosts
    from searchrl.retrieval.index import load_index
    from searchrl.retrieval.server import create_app
    from searchrl.utils import console

    sock = _bind(host, port)  # before loading the index: a busy port fails at once, and nothing claims to serve
    port = sock.getsockname()[1]  # the real port when --port 0 asked for any free one
    t0 = time.perf_counter()
    retriever = load_index(
        index, corpus, query_encoder=query_encoder, nprobe=nprobe, ef_search=ef_search, candidates=candidates
    )
    dense = getattr(retriever, "dense", retriever)
    if hasattr(dense, "query_cache"):
        dense.query_cache.maxsize = query_cache
    app = create_app(
        retriever,
        default_topk=topk,
        max_topk=max_topk,
        max_queries=max_queries,
        max_query_chars=max_query_chars,
        max_pending_queries=max_pending,
        max_queue_wait_s=max_queue_wait,
        inline_max_ms=inline_ms,
        allowed_hosts=allowed_hosts(host, allowed_host or ()),
    )
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
    """A listening socket on host:port; a one-line error naming the fix when the port is taken or not allowed.

    The socket is made with ``proto=IPPROTO_TCP``, not ``socket.create_server``'s 0: asyncio sets TCP_NODELAY only
    on connections whose socket says so, and without it every answer on a kept-alive connection waited ~40 ms for
    the client's delayed ACK (Nagle's algorithm holding the response body back behind its headers)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if sys.platform != "win32":  # there, as socket.create_server knows, it lets a second server share the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):  # as socket.create_server: IPv6 only
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(2048)
        return sock
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ValueError(
                f"port {port} on {host} is already in use (another `searchrl serve`?); "
                "pick a free one with --port, or stop the process holding it"
            ) from None
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror or err}; check --host and --port") from None


def register(app: typer.Typer) -> None:
    """``searchrl serve`` (the ``index`` group itself is attached as ``app``)."""
    app.command("serve")(serve)
