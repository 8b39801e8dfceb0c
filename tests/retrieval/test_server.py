"""The retrieval service: Search-R1 wire compatibility, input validation, stats, and request micro-batching."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from searchrl.retrieval.asgi import allowed_hosts
from searchrl.retrieval.base import Hit
from searchrl.retrieval.index import load_index
from searchrl.retrieval.server import MicroBatcher, create_app


@pytest.fixture
def bm25_app(tiny_bm25: Path):
    return create_app(load_index(tiny_bm25), max_queries=8, max_query_chars=200, max_topk=5)


# ----------------------------------------------------------------------------------- Search-R1 compatibility
def _search_r1_client(url: str, queries: list[str], topk: int, return_scores: bool) -> list:
    """Written from Search-R1's documented API only (README / retrieval_server.py), with plain httpx."""
    payload = {"queries": queries, "topk": topk, "return_scores": return_scores}
    return httpx.post(f"{url}/retrieve", json=payload, timeout=10).json()["result"]


def _passages2string(retrieval_result: list) -> str:
    """Search-R1's own formatting of one query's results (search_r1/llm_agent/generation.py)."""
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        format_reference += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return format_reference


def test_search_r1_client_with_scores(bm25_app, serve_app) -> None:
    with serve_app(bm25_app) as url:
        result = _search_r1_client(url, ["Turing machine", "Amazon river water"], 3, True)
    assert len(result) == 2
    for per_query in result:
        assert 1 <= len(per_query) <= 3
        for item in per_query:
            assert set(item) == {"document", "score"}
            assert set(item["document"]) == {"id", "contents"}
            assert isinstance(item["score"], float)
    assert result[0][0]["document"] == {
        "id": "0",
        "contents": "Alan Turing\nAlan Turing was an English mathematician who formalised computation with the "
        "Turing machine.",
    }
    assert _passages2string(result[1]).startswith("Doc 1(Title: Amazon River) The Amazon river")


def test_search_r1_client_without_scores(bm25_app, serve_app) -> None:
    with serve_app(bm25_app) as url:
        result = _search_r1_client(url, ["chess board", "jazz New Orleans", "radioactivity Nobel"], 2, False)
        default_topk = httpx.post(f"{url}/retrieve", json={"queries": ["river mountain wall"]}, timeout=10).json()
    assert [[d["id"] for d in per_query][:1] for per_query in result] == [["11"], ["8"], ["6"]]
    for per_query in result:
        for doc in per_query:
            assert set(doc) == {"id", "contents"}  # documents directly, no "document"/"score" wrapper
    assert len(default_topk["result"][0]) == 3  # Search-R1's default topk


def test_what_search_r1_sends_on_a_turn_without_searches(bm25_app, serve_app) -> None:
    """Search-R1's rollout asks every turn, with an empty list when every rollout answered, and reads ``result`` of
    the answer; an empty ``<search></search>`` is a blank query; its server takes ``topk`` 0 as the default."""
    with serve_app(bm25_app) as url, httpx.Client(base_url=url, timeout=10) as client:
        empty = client.post("/retrieve", json={"queries": [], "topk": 3, "return_scores": True})
        blank = client.post("/retrieve", json={"queries": ["volcano lava", "  ", ""], "topk": 1})
        zero = client.post("/retrieve", json={"queries": ["river mountain wall"], "topk": 0})
    assert empty.status_code == 200 and empty.json() == {"result": []}
    assert blank.status_code == 200 and [[d["id"] for d in r] for r in blank.json()["result"]] == [["10"], [], []]
    assert zero.status_code == 200 and len(zero.json()["result"][0]) == 3


# --------------------------------------------------------------------------------------------- bad input
BAD_INPUTS = [
    ({"queries": ["chess"], "topk": -3}, 422, "and 5 (got -3)"),
    ({"queries": ["chess"], "topk": 6}, 422, "and 5 (got 6)"),
    ({"queries": ["chess"] * 9}, 413, "limit is 8"),
    ({"queries": ["x" * 201]}, 413, "limit is 200"),
    ({"queries": ["chess"], "top_k": 3}, 422, "unknown field 'top_k'"),
    ({"query": "chess"}, 422, "unknown field"),
    ({"queries": "chess"}, 422, "queries"),
    ({"queries": [1, 2]}, 422, "queries"),
    ({"queries": ["chess"], "topk": "three"}, 422, "topk"),
    ("not json at all{", 422, "not valid JSON"),
    ("[1, 2, 3]", 422, ""),
]


def test_bad_input_gets_4xx_with_message_and_service_keeps_serving(bm25_app, serve_app) -> None:
    with serve_app(bm25_app) as url, httpx.Client(base_url=url, timeout=10) as client:
        for body, status, fragment in BAD_INPUTS:
            if isinstance(body, str):
                resp = client.post("/retrieve", content=body, headers={"content-type": "application/json"})
            else:
                resp = client.post("/retrieve", json=body)
            assert resp.status_code == status, (body, resp.text)
            detail = resp.json()["detail"]
            assert isinstance(detail, str) and "\n" not in detail and fragment in detail, (body, detail)
            ok = client.post("/retrieve", json={"queries": ["volcano lava"], "topk": 1})
            assert ok.status_code == 200 and ok.json()["result"][0][0]["id"] == "10"
        stats = client.get("/stats").json()
    assert stats["rejected"] == len(BAD_INPUTS)
    assert stats["requests"] == len(BAD_INPUTS) and stats["errors"] == 0


def test_a_json_body_labelled_as_a_form_is_read_as_json(bm25_app, serve_app) -> None:
    """``curl -d '{...}'`` sends the body as application/x-www-form-urlencoded; the service reads it as JSON."""
    body = '{"queries": ["volcano lava"], "topk": 1}'
    with serve_app(bm25_app) as url, httpx.Client(base_url=url, timeout=10) as client:
        for headers in ({"content-type": "application/x-www-form-urlencoded"}, {}):
            resp = client.post("/retrieve", content=body, headers=headers)
            assert resp.status_code == 200 and resp.json()["result"][0][0]["id"] == "10", resp.text


def test_a_body_over_the_size_limit_is_refused_before_it_is_read(tiny_bm25: Path, serve_app) -> None:
    """By Content-Length, or while a chunked body arrives; a chunked body within the limit is served."""
    app = create_app(load_index(tiny_bm25), max_body_bytes=200)
    big = ('{"queries": ["' + "volcano " * 40 + '"]}').encode()

    def chunked(body: bytes):
        for i in range(0, len(body), 50):
            yield body[i : i + 50]

    with serve_app(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        sized = client.post("/retrieve", content=big)
        streamed = client.post("/retrieve", content=chunked(big))
        small = client.post("/retrieve", content=chunked(b'{"queries": ["volcano lava"], "topk": 1}'))
        after = client.post("/retrieve", json={"queries": ["volcano lava"], "topk": 1})
    assert sized.status_code == 413 and sized.json()["detail"].startswith(f"request body of {len(big)} bytes; the")
    assert streamed.status_code == 413 and streamed.json()["detail"].startswith("request body over ")
    assert "bytes; the limit is 200 (send fewer" in streamed.json()["detail"]
    assert small.status_code == 200 and small.json()["result"][0][0]["id"] == "10", small.text
    assert after.status_code == 200


def test_a_chunked_body_is_bounded_whatever_content_length_it_claims() -> None:
    """h11 (uvicorn's parser where httptools is missing) passes a request with both ``Transfer-Encoding: chunked``
    and a small ``Content-Length`` on: its body is what arrives, not what the length says."""
    from searchrl.retrieval.asgi import JsonBodies

    reached, sent = [], []
    parts = [{"type": "http.request", "body": b"x" * 150, "more_body": True}] * 2
    parts.append({"type": "http.request", "body": b"", "more_body": False})
    headers = [(b"content-length", b"10"), (b"transfer-encoding", b"chunked")]

    async def app(scope, receive, send) -> None:
        reached.append(scope)

    async def receive() -> dict:
        return parts.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(JsonBodies(app, max_bytes=200)({"type": "http", "method": "POST", "headers": headers}, receive, send))
    assert not reached and sent[0]["status"] == 413
    assert b"request body over 300 bytes" in sent[1]["body"]


def test_the_default_body_limit_admits_the_largest_valid_request(tiny_bm25: Path, serve_app) -> None:
    app = create_app(load_index(tiny_bm25), max_queries=3, max_query_chars=100)
    largest = {"queries": ["\U0001f600" * 100] * 3, "topk": 1}  # an emoji is escaped as a surrogate pair: 12 bytes
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        body = json.dumps(largest, indent=1).encode()  # every character escaped, one query a line
        assert len(body) > 3 * (6 * 100 + 4) + 1024  # more than a limit of 6 bytes a character admits
        ok = client.post("/retrieve", content=body)
        too_big = client.post("/retrieve", content=b" " * 5000 + b'{"queries": []}')
    assert ok.status_code == 200 and len(ok.json()["result"]) == 3, ok.text
    assert too_big.status_code == 413, too_big.text


def test_a_loopback_service_refuses_foreign_host_names(tiny_bm25: Path, serve_app) -> None:
    """DNS rebinding: a web page whose name was re-pointed at 127.0.0.1 sends that name as the Host."""
    from fastapi.testclient import TestClient

    from searchrl.retrieval.client import RemoteRetriever

    app = create_app(load_index(tiny_bm25), allowed_hosts=allowed_hosts("127.0.0.1", ["search.lan"]))
    body = {"queries": ["volcano lava"], "topk": 1}
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        port = url.rsplit(":", 1)[1]
        hosts = [f"localhost:{port}", f"127.0.0.1:{port}", "127.0.0.2", f"[::1]:{port}", "LOCALHOST", "search.lan:80"]
        for host in hosts:
            resp = client.post("/retrieve", json=body, headers={"Host": host})
            assert resp.status_code == 200 and resp.json()["result"][0][0]["id"] == "10", (host, resp.text)
        for host in (f"attacker.example:{port}", "127.0.0.1.attacker.example", "[::1", ""):
            refused = client.post("/retrieve", json=body, headers={"Host": host})
            detail = refused.json()["detail"]
            assert refused.status_code == 421 and "\n" not in detail and "--allowed-host" in detail, (host, detail)
        assert client.get("/health", headers={"Host": "attacker.example"}).status_code == 421
        for origin, status in (("https://attacker.example", 403), ("null", 403), (f"http://localhost:{port}", 200)):
            resp = client.post("/retrieve", json=body, headers={"Origin": origin})  # a browser page's request
            assert resp.status_code == status, (origin, resp.text)
        assert RemoteRetriever([url]).search(["volcano lava"], 1)[0][0].id == "10"  # our client sends 127.0.0.1
    assert TestClient(create_app(load_index(tiny_bm25))).post("/retrieve", json=body).status_code == 200  # any


def test_which_host_names_a_service_answers() -> None:
    loopback = ["localhost", "127.0.0.1", "::1"]
    assert allowed_hosts("127.0.0.1") == allowed_hosts("::1") == allowed_hosts("localhost") == loopback
    assert allowed_hosts("127.0.0.1", ["Search.LAN", "[fd00::5]"]) == [*loopback, "search.lan", "fd00::5"]
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("10.0.0.5") is None  # chosen to be reached: any
    assert allowed_hosts("0.0.0.0", ["search.lan"]) == [*loopback, "search.lan"]
    assert allowed_hosts("127.0.0.1", ["*"]) is None


def test_search_failure_is_a_500_and_service_recovers(serve_app) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def search(self, queries: list[str], k: int) -> list[list[Hit]]:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("disk on fire")
            return [[Hit("a", "T", "x", 1.0)] for _ in queries]

    with serve_app(create_app(Flaky())) as url:
        bad = httpx.post(f"{url}/retrieve", json={"queries": ["q"]}, timeout=10)
        good = httpx.post(f"{url}/retrieve", json={"queries": ["q"]}, timeout=10)
        stats = httpx.get(f"{url}/stats", timeout=10).json()
    assert bad.status_code == 500 and "disk on fire" in bad.json()["detail"]
    assert good.status_code == 200 and good.json()["result"] == [[{"id": "a", "contents": "T\nx"}]]
    assert stats["errors"] == 1 and stats["requests"] == 1


# ------------------------------------------------------------------------------------ health, stats, schema
def test_health_stats_and_openapi(bm25_app, serve_app) -> None:
    with serve_app(bm25_app) as url, httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(5):
            client.post("/retrieve", json={"queries": ["chess", "jazz"], "topk": 2})
        health = client.get("/health").json()
        stats = client.get("/stats").json()
        schema = client.get("/openapi.json").json()
    assert health["status"] == "ok" and health["kind"] == "bm25" and health["passages"] == 12
    assert stats["requests"] == 5 and stats["queries"] == 10
    lat = stats["latency_ms"]
    assert lat["window"] == 5 and 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    assert stats["limits"] == {"max_queries": 8, "max_query_chars": 200, "max_topk": 5}
    assert "/retrieve" in schema["paths"] and "RetrieveRequest" in schema["components"]["schemas"]


# ------------------------------------------------------------------------------------------- micro-batching
class RecordingSearch:
    """A blocking search that records each call's batch and takes a little time, like an encoder would."""

    def __init__(self, delay_s: float = 0.05) -> None:
        self.batches: list[list[str]] = []
        self.threads: list[str] = []  # the thread each call ran on
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def __call__(self, queries: list[str], k: int) -> list[list[Hit]]:
        with self.lock:
            self.batches.append(list(queries))
            self.threads.append(threading.current_thread().name)
        time.sleep(self.delay_s)
        return [[Hit(f"{q}-{i}", q, f"rank {i}", float(k - i)) for i in range(k)] for q in queries]


def test_micro_batcher_merges_concurrent_requests() -> None:
    search = RecordingSearch()

    async def main() -> list[list[list[Hit]]]:
        batcher = MicroBatcher(search, max_batch_queries=64, max_wait_ms=20)
        jobs = [batcher.search([f"q{i}a", f"q{i}b"], k=1 + i % 3) for i in range(8)]
        out = await asyncio.gather(*jobs)
        await batcher.aclose()
        return out

    results = asyncio.run(main())
    assert len(search.batches) < 8, f"8 concurrent requests took {len(search.batches)} search calls"
    assert sum(len(b) for b in search.batches) == 16
    for i, per_request in enumerate(results):
        k = 1 + i % 3
        assert [[h.id for h in hits] for hits in per_request] == [
            [f"q{i}a-{j}" for j in range(k)],
            [f"q{i}b-{j}" for j in range(k)],
        ], "each request gets its own queries' results, truncated to its own k"


def test_micro_batcher_respects_batch_size_and_survives_errors() -> None:
    calls: list[int] = []

    def search(queries: list[str], k: int) -> list[list[Hit]]:
        calls.append(len(queries))
        if "boom" in queries:
            raise ValueError("boom")
        return [[Hit(q, q, q, 1.0)] for q in queries]

    async def main() -> None:
        batcher = MicroBatcher(search, max_batch_queries=4, max_wait_ms=20)
        out = await asyncio.gather(*[batcher.search([f"q{i}", f"r{i}"], 1) for i in range(6)])
        assert [[h[0].id for h in o] for o in out] == [[f"q{i}", f"r{i}"] for i in range(6)]
        with pytest.raises(ValueError, match="boom"):
            await batcher.search(["boom"], 1)
        assert (await batcher.search(["after"], 1))[0][0].id == "after"
        await batcher.aclose()

    asyncio.run(main())
    assert max(calls[:-2]) <= 4, calls  # a batch stops growing at max_batch_queries


def test_server_batches_concurrent_http_requests(serve_app) -> None:
    # each search holds the worker long enough for the other clients' requests to queue behind it, even when a busy
    # machine is slow to start the client threads (at 0.05 s a loaded machine sometimes sent them one by one)
    search = RecordingSearch(delay_s=0.2)

    class Slow:
        def search(self, queries: list[str], k: int) -> list[list[Hit]]:
            return search(queries, k)

    app = create_app(Slow(), max_wait_ms=5)
    with serve_app(app) as url:
        with ThreadPoolExecutor(8) as pool:
            codes = list(
                pool.map(
                    lambda i: httpx.post(f"{url}/retrieve", json={"queries": [f"q{i}"]}, timeout=10).status_code,
                    range(32),
                )
            )
        health_during = httpx.get(f"{url}/health", timeout=10).status_code
        stats = httpx.get(f"{url}/stats", timeout=10).json()
    assert codes == [200] * 32 and health_during == 200
    assert stats["batching"]["batches"] < 32
    assert stats["batching"]["mean_requests_per_batch"] > 1.5


def test_micro_batcher_lone_client_pays_no_batching_delay() -> None:
    search = RecordingSearch()

    async def main() -> tuple[float, MicroBatcher]:
        batcher = MicroBatcher(search, max_wait_ms=1000)  # a wait would show as ~1 s per request
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(5):
            assert (await batcher.search([f"q{i}"], 1))[0][0].id == f"q{i}-0"
        elapsed = loop.time() - t0
        await batcher.aclose()
        return elapsed, batcher

    elapsed, batcher = asyncio.run(main())
    assert elapsed < 0.5 and batcher.waits == 0, (elapsed, batcher.waits)
    assert search.batches == [[f"q{i}"] for i in range(5)]


def test_micro_batcher_regathers_clients_after_a_merged_batch() -> None:
    """After a batch that merged 4 requests, the next batch waits (bounded) for the 4 clients to come back."""
    search = RecordingSearch()

    async def main() -> MicroBatcher:
        batcher = MicroBatcher(search, max_wait_ms=500)
        await asyncio.gather(*[batcher.search([f"a{i}"], 1) for i in range(4)])

        async def late(i: int) -> None:
            await asyncio.sleep(0.02 * i)
            await batcher.search([f"b{i}"], 1)

        await asyncio.gather(*[late(i) for i in range(4)])
        await batcher.aclose()
        return batcher

    batcher = asyncio.run(main())
    assert [len(b) for b in search.batches] == [4, 4], search.batches
    assert batcher.waits == 3


def test_micro_batcher_searches_a_quick_lone_request_on_the_event_loop() -> None:
    """Once a lone search has been timed quick, a lone request runs on the loop's thread (no worker hand-off);
    requests that arrive together still go to the worker and are merged into one call."""
    search = RecordingSearch(delay_s=0.001)
    threads = search.threads

    async def main() -> MicroBatcher:
        batcher = MicroBatcher(search, max_wait_ms=20)
        for i in range(3):
            assert (await batcher.search([f"q{i}"], 1))[0][0].id == f"q{i}-0"
        out = await asyncio.gather(*[batcher.search([f"c{i}"], 2) for i in range(4)])
        assert [[h.id for h in hits[0]] for hits in out] == [[f"c{i}-0", f"c{i}-1"] for i in range(4)]
        await batcher.aclose()
        return batcher

    batcher = asyncio.run(main())
    loop_thread = threading.main_thread().name
    assert threads[0] != loop_thread, "a search of unknown duration goes to the worker"
    assert threads[1:3] == [loop_thread, loop_thread] and batcher.inline == 2
    assert [sorted(b) for b in search.batches[3:]] == [["c0", "c1", "c2", "c3"]], "merged, not run inline"
    assert threads[3] != loop_thread
    assert batcher.stats()["batches"] == 4 and batcher.stats()["inline"] == 2


def test_micro_batcher_cuts_a_retriever_s_extra_hits_to_k_inline_and_in_the_worker() -> None:
    """A retriever of one's own may return more than k hits: a request gets k, whether searched in the worker or
    on the event loop."""

    def generous(queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-{i}", q, "", float(-i)) for i in range(k + 2)] for q in queries]

    async def main() -> tuple[list, list, int]:
        batcher = MicroBatcher(generous, inline_max_ms=1000.0)
        worker = await batcher.search(["a"], 2)  # of unknown duration: the worker
        inline = await batcher.search(["b"], 2)
        await batcher.aclose()
        return worker, inline, batcher.inline

    worker, inline, n_inline = asyncio.run(main())
    assert n_inline == 1
    assert [h.id for h in worker[0]] == ["a-0", "a-1"] and [h.id for h in inline[0]] == ["b-0", "b-1"]


def test_a_topk_of_max_topk_is_answered(bm25_app, serve_app) -> None:
    with serve_app(bm25_app) as url:
        resp = httpx.post(f"{url}/retrieve", json={"queries": ["chess"], "topk": 5}, timeout=10)
        over = httpx.post(f"{url}/retrieve", json={"queries": ["chess"], "topk": 6}, timeout=10)
    assert resp.status_code == 200 and 1 <= len(resp.json()["result"][0]) <= 5
    assert over.status_code == 422 and "between 0 (the default, 3) and 5 (got 6)" in over.json()["detail"]


def test_micro_batcher_keeps_slow_or_disabled_searches_off_the_event_loop() -> None:
    for delay_s, inline_ms in ((0.03, 20.0), (0.0, 0.0)):
        search = RecordingSearch(delay_s=delay_s)

        async def main(search=search, inline_ms=inline_ms) -> MicroBatcher:
            batcher = MicroBatcher(search, inline_max_ms=inline_ms)
            for i in range(3):
                await batcher.search([f"q{i}"], 1)
            await batcher.aclose()
            return batcher

        batcher = asyncio.run(main())
        assert batcher.inline == 0 and threading.main_thread().name not in search.threads, (delay_s, inline_ms)


def test_micro_batcher_sends_a_large_lone_request_to_the_worker() -> None:
    """A lone request is inlined only when its queries, at the recent lone time per query, fit the limit."""
    search = RecordingSearch(delay_s=0.002)
    threads = search.threads

    async def main() -> MicroBatcher:
        batcher = MicroBatcher(search, inline_max_ms=20.0)
        await batcher.search(["a"], 1)  # timed in the worker: ~2 ms for one query
        await batcher.search(["b"], 1)  # inline
        await batcher.search([f"q{i}" for i in range(50)], 1)  # ~50 x 2 ms expected: the worker
        await batcher.aclose()
        return batcher

    batcher = asyncio.run(main())
    loop_thread = threading.main_thread().name
    assert threads[1] == loop_thread and threads[2] != loop_thread and batcher.inline == 1, threads
