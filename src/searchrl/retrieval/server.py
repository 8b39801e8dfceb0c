"""The retrieval service: a FastAPI app that speaks Search-R1's ``/retrieve`` protocol over any ``Retriever``.

Protocol (Search-R1's ``search_r1/search/retrieval_server.py``, unchanged so its clients work as they are)::

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "...", "contents": "Title\\ntext"}, "score": 12.3}, ...], ...]}

With ``"return_scores": false`` (the default, as in Search-R1) each inner list holds the documents themselves.
``topk`` may be omitted or 0 (server default, 3). As Search-R1's server, an empty list gets ``{"result": []}`` and a
blank query what the index answers for it (dense: the passages nearest the encoded prefix; BM25: none). Beyond
Search-R1: unknown fields, wrong types and out-of-range ``topk`` are rejected with a 4xx and a one-line ``detail``
message instead of a 500; ``GET /health``; ``GET /stats``. With ``allowed_hosts`` (``searchrl serve`` sets it on a
loopback address), a request whose Host header names another machine is refused with 421 (DNS rebinding), and one a
browser sends for another site's page with 403.

Concurrency: requests that arrive together are merged by a ``MicroBatcher`` into one ``search`` call (one encoder
forward pass and one faiss search for a dense index), which runs in a worker thread so the event loop keeps
answering. A lone client is served at once, with no batching delay; while it is alone and its searches are quick, it is
searched on the event loop's own thread, without the hand-off to a worker.

Backpressure: the queue of waiting queries is bounded (``max_pending_queries``) and so is the time a request may
wait for its batch to start (``max_queue_wait_s``). Beyond either, the request is answered at once with
``503 Service Unavailable`` and a ``Retry-After`` header (seconds, estimated from the recent service rate) instead
of piling up until clients time out; ``RemoteRetriever`` waits that long and retries.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from searchrl import __version__
from searchrl.retrieval.asgi import JsonBodies, TrustedHosts
from searchrl.retrieval.base import Hit, Retriever

SearchFn = Callable[[list[str], int], list[list[Hit]]]


# ------------------------------------------------------------------------------------------------- micro-batching
@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future = field(repr=False)
    started: bool = False


class Overloaded(Exception):
    """The service is saturated: the request was not queued (or waited too long); retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class MicroBatcher:
    """Merge concurrent ``search`` requests into one call of the underlying (blocking) search function.

    Adaptive: the worker takes the first waiting request plus every request already queued, up to
    ``max_batch_queries`` queries, and runs one ``search_fn(all_queries, max_k)`` in a thread, handing every
    request its own slice (truncated to its own k: results are best-first, so a top-k is the prefix of a top-K).
    One batch runs at a time and requests arriving meanwhile form the next one, so batches grow with load by
    themselves. It waits for more requests (at most ``max_wait_ms``) only while the previous batch merged several
    requests and fewer than that many are queued: a lone client never pays a batching delay, and concurrent
    clients that answer a batch together are gathered again.

    A request that finds itself alone (nothing queued, no batch running, no other request arriving in the same turn
    of the event loop) is searched on the event loop's thread when its queries, at the recent time per query of lone
    requests, are expected to take under ``inline_max_ms``: the hand-off to a worker thread and back cost a lone
    client ~0.3 ms of a ~7 ms request (dense MiniLM, 2 CPUs; ``benchmarks/results/HISTORY.md``). A search of unknown
    or long duration always goes to the worker, so a slow retriever never stalls the loop. ``inline_max_ms=0`` turns
    this off.
    """

    def __init__(
        self,
        search_fn: SearchFn,
        *,
        max_batch_queries: int = 256,
        max_wait_ms: float = 2.0,
        max_pending_queries: int = 16_384,
        max_queue_wait_s: float = 30.0,
        inline_max_ms: float = 20.0,
    ) -> None:
        self.search_fn = search_fn
        self.inline_max_s = inline_max_ms / 1000.0
        self.inline = 0  # requests searched on the event loop's thread
        self._in_flight = 0  # requests inside search()
        self._busy = False  # a batch is running in the worker thread
        self._lone_s: float | None = None  # recent seconds per query of one-request searches (moving average)
        self.max_batch_queries = max_batch_queries
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_pending_queries = max_pending_queries
        self.max_queue_wait_s = max_queue_wait_s
        self.pending_queries = 0  # queued, not yet taken into a batch
        self.overloaded = 0
        self._rate = 0.0  # queries per second of recent batches (moving average)
        self.batches = 0
        self.batched_requests = 0
        self.batched_queries = 0
        self.waits = 0
        self._last_requests = 1
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _ensure_worker(self) -> asyncio.Queue[_Job]:
        loop = asyncio.get_running_loop()
        # (Re)start lazily on the running loop: servers and test clients may each bring their own loop.
        if self._worker is None or self._worker.done() or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._run(self._queue))
        assert self._queue is not None
        return self._queue

    def retry_after_s(self) -> int:
        """Whole seconds until the queue has likely drained at the recent service rate (1 to 30)."""
        drain = self.pending_queries / self._rate if self._rate > 0 else 1.0
        return int(min(30, max(1, math.ceil(drain))))

    async def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Results for ``queries``; raises ``Overloaded`` when the queue is full or the wait for a batch too long."""
        queue = self._ensure_worker()
        if self.pending_queries and self.pending_queries + len(queries) > self.max_pending_queries:
            self.overloaded += 1
            raise Overloaded(
                f"{self.pending_queries} queries are already waiting (limit {self.max_pending_queries})",
                self.retry_after_s(),
            )
        self._in_flight += 1
        try:
            if self._may_inline(len(queries)):
                await asyncio.sleep(0)  # requests that arrived in the same turn reach here first and are counted
                if self._may_inline(len(queries)):
                    return self._search_inline(queries, k)
            return await self._search_batched(queue, queries, k)
        finally:
            self._in_flight -= 1

    def _may_inline(self, n_queries: int) -> bool:
        """Alone, and its search is expected (from recent lone requests' time per query) within the limit."""
        alone = self._in_flight == 1 and not self._busy and self.pending_queries == 0
        return alone and self._lone_s is not None and n_queries * self._lone_s < self.inline_max_s

    def _search_inline(self, queries: list[str], k: int) -> list[list[Hit]]:
        t0 = time.perf_counter()
        results = self.search_fn(list(queries), k)
        if len(results) != len(queries):
            raise RuntimeError(f"retriever returned {len(results)} result lists for {len(queries)} queries")
        self._record(len(queries), 1, time.perf_counter() - t0)
        self.inline += 1
        return [hits[:k] for hits in results]

    def _record(self, n_queries: int, n_requests: int, seconds: float) -> None:
        self.batches += 1
        self.batched_requests += n_requests
        self.batched_queries += n_queries
        self._last_requests = n_requests
        rate = n_queries / max(seconds, 1e-6)
        self._rate = rate if self._rate == 0 else 0.8 * self._rate + 0.2 * rate
        if n_requests == 1:
            per_query = seconds / max(n_queries, 1)
            self._lone_s = per_query if self._lone_s is None else 0.8 * self._lone_s + 0.2 * per_query

    async def _search_batched(self, queue: asyncio.Queue[_Job], queries: list[str], k: int) -> list[list[Hit]]:
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        job = _Job(list(queries), k, future)
        self.pending_queries += len(job.queries)
        queue.put_nowait(job)
        try:
            await asyncio.wait_for(asyncio.shield(future), self.max_queue_wait_s)
        except TimeoutError:
            if job.started:  # its batch is running: the answer is coming
                return await future
            future.cancel()  # the worker skips it
            self.overloaded += 1
            waited = f"waited {self.max_queue_wait_s:g} s for a batch to start"
            raise Overloaded(waited, self.retry_after_s()) from None
        except asyncio.CancelledError:  # the client went away: drop its job too
            future.cancel()
            raise
        return future.result()

    async def _collect(self, queue: asyncio.Queue[_Job]) -> list[_Job]:
        jobs = [await queue.get()]
        n = len(jobs[0].queries)
        loop = asyncio.get_running_loop()
        expected = self._last_requests  # how many requests the previous batch merged
        deadline = loop.time() + self.max_wait_s
        while n < self.max_batch_queries:
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if len(jobs) >= expected or remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(queue.get(), remaining)
                    self.waits += 1
                except TimeoutError:
                    break
            jobs.append(job)
            n += len(job.queries)
        return jobs

    async def _run(self, queue: asyncio.Queue[_Job]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            collected = await self._collect(queue)
            self.pending_queries -= sum(len(j.queries) for j in collected)
            jobs = [j for j in collected if not j.future.done()]  # done = client went away, or gave up waiting
            if not jobs:
                continue
            for j in jobs:
                j.started = True
            queries = [q for j in jobs for q in j.queries]
            k = max(j.k for j in jobs)
            t0 = loop.time()
            self._busy = True
            try:
                results = await loop.run_in_executor(None, self.search_fn, queries, k)
                self._record(len(queries), len(jobs), loop.time() - t0)
                if len(results) != len(queries):
                    raise RuntimeError(f"retriever returned {len(results)} result lists for {len(queries)} queries")
            except Exception as err:  # noqa: BLE001 - the error belongs to the requests, not to the worker
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(err)
                continue
            finally:
                self._busy = False
            start = 0
            for j in jobs:
                part = [hits[: j.k] for hits in results[start : start + len(j.queries)]]
                start += len(j.queries)
                if not j.future.done():
                    j.future.set_result(part)

    async def aclose(self) -> None:
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, RuntimeError):
                pass

    def stats(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "mean_requests_per_batch": round(self.batched_requests / self.batches, 3) if self.batches else 0.0,
            "mean_queries_per_batch": round(self.batched_queries / self.batches, 3) if self.batches else 0.0,
            "waits": self.waits,
            "inline": self.inline,
            "pending_queries": self.pending_queries,
            "overloaded": self.overloaded,
        }


# ------------------------------------------------------------------------------------------------------- stats
class ServiceStats:
    """Request counters and latency percentiles over the most recent ``window`` answered requests."""

    def __init__(self, window: int = 10_000) -> None:
        self.started = time.time()
        self.requests = 0
        self.queries = 0
        self.rejected = 0
        self.errors = 0
        self._latency_ms: deque[float] = deque(maxlen=window)

    def record(self, n_queries: int, seconds: float) -> None:
        self.requests += 1
        self.queries += n_queries
        self._latency_ms.append(seconds * 1000.0)

    def snapshot(self) -> dict[str, Any]:
        lat = np.fromiter(self._latency_ms, dtype=np.float64)
        pct = {f"p{p}": round(float(np.percentile(lat, p)), 3) if len(lat) else None for p in (50, 95, 99)}
        return {
            "requests": self.requests,
            "queries": self.queries,
            "rejected": self.rejected,
            "errors": self.errors,
            "uptime_s": round(time.time() - self.started, 1),
            "latency_ms": pct | {"window": len(lat)},
        }


# --------------------------------------------------------------------------------------------------------- app
class RetrieveRequest(BaseModel):
    """Search-R1's request body. Unknown fields are rejected, so a misspelt ``top_k`` cannot silently default."""

    model_config = ConfigDict(extra="forbid")

    queries: list[str]
    topk: int | None = None
    return_scores: bool = False


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _one_line(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        if e.get("type") == "json_invalid":
            parts.append('request body is not valid JSON; send {"queries": [...], "topk": 3}')
        elif e.get("type") == "extra_forbidden":
            parts.append(f"unknown field '{loc}'; allowed fields: queries, topk, return_scores")
        else:
            parts.append(f"{loc}: {e.get('msg')}")
    return "; ".join(parts)


def create_app(
    retriever: Retriever,
    *,
    max_queries: int = 4096,
    max_query_chars: int = 4096,
    max_topk: int = 100,
    default_topk: int = 3,
    max_batch_queries: int = 256,
    max_wait_ms: float = 2.0,
    max_pending_queries: int = 16_384,
    max_queue_wait_s: float = 30.0,
    inline_max_ms: float = 20.0,
    max_body_bytes: int | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """A FastAPI app serving ``retriever``. Limits bound one request: number of queries, characters per query, topk.

    Search-R1 sends every active rollout's query in one request, so ``max_queries`` is generous by default. A body
    larger than the largest valid one (``max_body_bytes``; by default every query at its longest, each character
    JSON-escaped as a surrogate pair, 12 bytes) is refused with 413 before it is read.
    Overload (more than ``max_pending_queries`` waiting, or a wait over ``max_queue_wait_s``) is answered with 503
    and ``Retry-After``. ``allowed_hosts``: the Host names answered besides this machine's loopback ones (421 for
    others, :class:`~searchrl.retrieval.asgi.TrustedHosts`); None answers any.
    """
    if not 1 <= default_topk <= max_topk:
        raise ValueError(f"default_topk must be in [1, max_topk={max_topk}] (got {default_topk})")
    stats = ServiceStats()
    batcher = MicroBatcher(
        retriever.search,
        max_batch_queries=max_batch_queries,
        max_wait_ms=max_wait_ms,
        max_pending_queries=max_pending_queries,
        max_queue_wait_s=max_queue_wait_s,
        inline_max_ms=inline_max_ms,
    )
    manifest = getattr(retriever, "manifest", {}) or {}

    async def lifespan(app: FastAPI):
        yield
        await batcher.aclose()

    app = FastAPI(
        title="SearchRL retrieval service",
        version=__version__,
        description="Search-R1-compatible `/retrieve` over a SearchRL index.",
        lifespan=lifespan,
    )
    app.state.stats = stats
    app.state.batcher = batcher
    if max_body_bytes is None:
        max_body_bytes = max_queries * (12 * max_query_chars + 16) + 1024
    app.add_middleware(JsonBodies, max_bytes=max_body_bytes)
    if allowed_hosts is not None:  # added last: the outermost layer, before the body is read
        app.add_middleware(TrustedHosts, hosts=allowed_hosts)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        stats.rejected += 1
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg")), "type": e.get("type")} for e in err.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": _one_line(err), "errors": errors})

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, err: BadRequest) -> JSONResponse:
        stats.rejected += 1
        return JSONResponse(status_code=err.status, content={"detail": err.message})

    def openapi_with_limits() -> dict[str, Any]:
        # The handler checks these limits itself (413 for size, 422 otherwise, one-line messages); stating them in
        # the OpenAPI schema too tells clients, and schema-driven fuzzers, what a valid request is.
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            props = schema["components"]["schemas"]["RetrieveRequest"]["properties"]
            props["queries"] |= {"maxItems": max_queries}
            props["queries"]["items"] |= {"maxLength": max_query_chars}
            props["topk"] |= {"minimum": 0, "maximum": max_topk}
        return app.openapi_schema

    app.openapi = openapi_with_limits  # type: ignore[method-assign]

    @app.post("/retrieve")
    async def retrieve(body: RetrieveRequest) -> JSONResponse:
        """Top-k passages for each query (Search-R1 format). As Search-R1's own server: an empty list gets an empty
        result (its rollout asks every turn, also when no rollout searched), a blank query (an empty
        ``<search></search>``) what the index answers for it, a ``topk`` of 0 or null the default."""
        t0 = time.perf_counter()
        topk = body.topk or default_topk
        if len(body.queries) > max_queries:
            raise BadRequest(f"{len(body.queries)} queries in one request; the limit is {max_queries}", 413)
        for i, q in enumerate(body.queries):
            if len(q) > max_query_chars:
                raise BadRequest(f"queries[{i}] has {len(q)} characters; the limit is {max_query_chars}", 413)
        if not 1 <= topk <= max_topk:
            raise BadRequest(f"topk must be between 0 (the default, {default_topk}) and {max_topk} (got {topk})")
        try:
            results = await batcher.search(body.queries, topk) if body.queries else []
        except Overloaded as err:
            detail = f"retrieval service overloaded ({err}); retry after {err.retry_after_s} s"
            return JSONResponse(
                status_code=503, content={"detail": detail}, headers={"Retry-After": str(err.retry_after_s)}
            )
        except Exception as err:  # noqa: BLE001 - reported to the client; the service keeps running
            stats.errors += 1
            return JSONResponse(status_code=500, content={"detail": f"search failed: {type(err).__name__}: {err}"})
        if body.return_scores:
            payload = [
                [{"document": {"id": h.id, "contents": h.contents}, "score": h.score} for h in hits]
                for hits in results
            ]
        else:
            payload = [[{"id": h.id, "contents": h.contents} for h in hits] for hits in results]
        stats.record(len(body.queries), time.perf_counter() - t0)
        return JSONResponse(content={"result": payload})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness plus what is being served."""
        store = getattr(retriever, "store", None)
        return {
            "status": "ok",
            "kind": manifest.get("kind", type(retriever).__name__),
            "passages": len(store) if store is not None else None,
            "encoder": manifest.get("encoder"),
            "version": __version__,
        }

    @app.get("/stats")
    async def service_stats() -> dict[str, Any]:
        """Request counts, latency percentiles (ms, recent window), batching and limits."""
        limits = {"max_queries": max_queries, "max_query_chars": max_query_chars, "max_topk": max_topk}
        out = stats.snapshot() | {"batching": batcher.stats(), "limits": limits}
        dense = getattr(retriever, "dense", retriever)  # a hybrid retriever's dense half holds the cache
        if (cache := getattr(dense, "query_cache", None)) is not None:
            out["query_cache"] = cache.stats()
        return out

    return app
