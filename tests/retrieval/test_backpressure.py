"""Overload: a bounded queue answers 503 + Retry-After at once (no hang, no 500), and the client waits and retries."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from searchrl.retrieval.base import Hit
from searchrl.retrieval.client import RemoteRetriever, _retry_after_s
from searchrl.retrieval.server import MicroBatcher, Overloaded, create_app


class Slow:
    """A retriever that takes ``delay_s`` per call, like a saturated encoder."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.lock = threading.Lock()

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_s)
        return [[Hit(q, "T", q, 1.0)] for q in queries]


def test_full_queue_is_a_503_with_retry_after(serve_app) -> None:
    app = create_app(Slow(0.2), max_pending_queries=2, max_batch_queries=1)
    with serve_app(app) as url:
        with ThreadPoolExecutor(12) as pool:
            answers = list(
                pool.map(lambda i: httpx.post(f"{url}/retrieve", json={"queries": [f"q{i}"]}, timeout=30), range(12))
            )
        stats = httpx.get(f"{url}/stats", timeout=10).json()
        after = httpx.post(f"{url}/retrieve", json={"queries": ["later"]}, timeout=30)
    codes = sorted(a.status_code for a in answers)
    assert set(codes) == {200, 503}, codes
    busy = [a for a in answers if a.status_code == 503]
    assert all(1 <= int(a.headers["Retry-After"]) <= 30 and "retry after" in a.json()["detail"] for a in busy)
    assert stats["batching"]["overloaded"] == len(busy) and stats["errors"] == 0
    assert after.status_code == 200, "the service keeps serving after the burst"


def test_a_request_waiting_too_long_is_turned_away() -> None:
    async def main() -> None:
        batcher = MicroBatcher(Slow(0.3).search, max_batch_queries=1, max_queue_wait_s=0.1)
        first = asyncio.ensure_future(batcher.search(["a"], 1))
        await asyncio.sleep(0.01)  # "a" is running for 0.3 s
        second = asyncio.ensure_future(batcher.search(["b"], 1))
        with pytest.raises(Overloaded) as err:
            await second
        assert err.value.retry_after_s >= 1
        assert (await first)[0][0].id == "a", "a request whose batch started is answered, however long it takes"
        assert (await batcher.search(["c"], 1))[0][0].id == "c"
        assert batcher.pending_queries == 0
        await batcher.aclose()

    asyncio.run(main())


def test_client_honours_retry_after(monkeypatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("searchrl.retrieval.client.time.sleep", sleeps.append)
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(503, headers={"Retry-After": "2"}, json={"detail": "overloaded"})
        if len(calls) == 2:
            return httpx.Response(429, headers={"Retry-After": "600"})
        body = json.loads(request.content)
        return httpx.Response(
            200,
            json={"result": [[{"document": {"id": "x", "contents": "T\nx"}, "score": 1.0}] for _ in body["queries"]]},
        )

    remote = RemoteRetriever(
        "http://a:1",
        retries=3,
        backoff_s=0.01,
        max_retry_after_s=5,
        client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    assert remote.search(["q"], 1)[0][0].id == "x"
    assert sleeps == [2.0, 5.0], "waits as long as the server asks, capped at max_retry_after_s"
    assert remote.retried == 2


def test_retry_after_parsing() -> None:
    assert _retry_after_s(httpx.Response(503, headers={"Retry-After": "3"})) == 3.0
    assert _retry_after_s(httpx.Response(503)) == 0.0
    assert _retry_after_s(httpx.Response(503, headers={"Retry-After": "soon"})) == 0.0
    assert _retry_after_s(httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0


def test_many_clients_through_a_small_queue_all_succeed(serve_app) -> None:
    """32 retrying clients against a queue of 4: some are turned away, every one is answered in the end."""
    app = create_app(Slow(0.01), max_pending_queries=4, max_batch_queries=2)
    with serve_app(app) as url:

        def client(c: int) -> int:
            with RemoteRetriever(url, retries=20, backoff_s=0.01, max_retry_after_s=0.05, cache_size=0) as remote:
                for i in range(5):
                    assert remote.search([f"c{c}-{i}"], 1)[0][0].id == f"c{c}-{i}"
                return remote.retried

        with ThreadPoolExecutor(32) as pool:
            retried = list(pool.map(client, range(32)))
        stats = httpx.get(f"{url}/stats", timeout=10).json()
    assert stats["requests"] == 32 * 5 and stats["errors"] == 0
    # every 503 was retried (a retry can also follow a dropped connection)
    assert 0 < stats["batching"]["overloaded"] <= sum(retried)
