"""RemoteRetriever: same results as the local index, failover, retries with backoff, LRU cache, clear errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from searchrl.retrieval.client import LRUCache, RemoteRetriever, RetrievalUnavailableError, endpoint_url
from searchrl.retrieval.index import load_index
from searchrl.retrieval.server import create_app


def test_remote_results_equal_local_results(tiny_bm25: Path, serve_app) -> None:
    local = load_index(tiny_bm25)
    queries = ["Turing machine", "honey nectar", "Turing machine", "xyzzy"]
    with serve_app(create_app(local)) as url, RemoteRetriever(url) as remote:
        got = remote.search(queries, 3)
    want = local.search(queries, 3)
    assert got == want  # ids, titles, texts and scores (JSON round-trips Python floats exactly)
    assert len(got[0]) == 1 and got[3] == []


def test_failover_to_a_live_endpoint(tiny_bm25: Path, serve_app, dead_url: str) -> None:
    with serve_app(create_app(load_index(tiny_bm25))) as url:
        remote = RemoteRetriever([dead_url, url], retries=0, cache_size=0)
        for i in range(4):  # round-robin: half the calls start at the dead endpoint and fail over
            assert remote.search([f"chess board {i}"], 1)[0][0].title == "Chess"
        remote.close()
    assert remote.failovers == 2 and remote.requests == 4


def test_every_endpoint_unreachable_is_one_clear_error(dead_url: str) -> None:
    other = dead_url.replace(dead_url.rsplit(":", 1)[1], "9")  # port 9 (discard): nothing listens on loopback
    remote = RemoteRetriever([dead_url, other], retries=2, backoff_s=0.01, timeout_s=2)
    t0 = time.time()
    with pytest.raises(RetrievalUnavailableError) as err:
        remote.search(["anything"], 3)
    message = str(err.value)
    assert "\n" not in message and "searchrl serve" in message and "after 3 attempts" in message
    assert f"{dead_url}/retrieve" in message and f"{other}/retrieve" in message
    assert time.time() - t0 < 10


def _mock(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def _ok(queries: list[str], k: int) -> dict:
    return {
        "result": [
            [
                {"document": {"id": f"{q}#{i}", "contents": f"T {q}\nbody {i}"}, "score": 1.0 / (i + 1)}
                for i in range(k)
            ]
            for q in queries
        ]
    }


def test_retries_with_backoff_after_server_errors() -> None:
    seen: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        body = json.loads(request.content)
        return httpx.Response(503) if len(seen) <= 2 else httpx.Response(200, json=_ok(body["queries"], body["topk"]))

    remote = RemoteRetriever("http://a:1", retries=3, backoff_s=0.05, client=_mock(handler))
    hits = remote.search(["q"], 2)
    assert [h.id for h in hits[0]] == ["q#0", "q#1"] and hits[0][0].title == "T q" and hits[0][1].text == "body 1"
    assert len(seen) == 3
    assert seen[1] - seen[0] >= 0.045 and seen[2] - seen[1] >= 0.095  # 0.05 then 0.1: exponential


def test_a_500_is_retried_and_the_waits_double_from_backoff_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any 5xx is retried; the waits are backoff_s, 2 backoff_s, 4 backoff_s (jitter drawn as 0 here)."""
    slept: list[float] = []
    monkeypatch.setattr("searchrl.retrieval.client.time.sleep", slept.append)
    monkeypatch.setattr("searchrl.retrieval.client.random.random", lambda: 0.0)
    codes = iter([500, 502, 500])

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        code = next(codes, 200)
        return httpx.Response(code, json=_ok(body["queries"], body["topk"]) if code == 200 else {"detail": "x"})

    remote = RemoteRetriever("http://a:1", retries=3, backoff_s=0.2, client=_mock(handler))
    assert remote.search(["q"], 1)[0][0].id == "q#0"
    assert slept == pytest.approx([0.2, 0.4, 0.8]) and remote.retried == 3


def test_client_errors_are_not_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(422, json={"detail": "topk must be between 1 and 100 (got 500)"})

    remote = RemoteRetriever("http://a:1", retries=3, client=_mock(handler))
    with pytest.raises(ValueError, match=r"rejected the request \(HTTP 422\): topk must be between"):
        remote.search(["q"], 500)
    assert len(calls) == 1
    # a proxy's plain-text refusal runs over lines: the error stays one line
    page = "<html>\n<h1>400 Bad Request</h1>\n</html>\n"
    plain = RemoteRetriever("http://a:1", client=_mock(lambda request: httpx.Response(400, text=page)))
    with pytest.raises(ValueError, match=r"\(HTTP 400\): <html> <h1>400 Bad Request</h1> </html>$"):
        plain.search(["q"], 1)


def test_cache_sends_only_uncached_queries() -> None:
    payloads: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        payloads.append(body)
        return httpx.Response(200, json=_ok(body["queries"], body["topk"]))

    remote = RemoteRetriever(["http://a:1", "http://b:2"], client=_mock(handler), cache_size=100)
    first = remote.search(["a", "b", "a"], 2)
    assert payloads[-1]["queries"] == ["a", "b"] and payloads[-1]["return_scores"] is True  # deduplicated
    assert remote.search(["b", "a"], 2) == [first[1], first[0]] and len(payloads) == 1  # all cached
    remote.search(["a", "c"], 2)
    assert payloads[-1]["queries"] == ["c"]
    remote.search(["a"], 3)  # another k is another cache entry
    assert payloads[-1] == {"queries": ["a"], "topk": 3, "return_scores": True}
    assert remote.cache.hits == 3 and len(remote.cache) == 4


def test_large_batches_are_split_into_requests() -> None:
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sizes.append(len(body["queries"]))
        return httpx.Response(200, json=_ok(body["queries"], body["topk"]))

    remote = RemoteRetriever("http://a:1", client=_mock(handler), max_queries_per_request=4)
    out = remote.search([f"q{i}" for i in range(10)], 1)
    assert sizes == [4, 4, 2] and [h[0].id for h in out] == [f"q{i}#0" for i in range(10)]


def test_wrong_service_and_malformed_answers() -> None:
    remote = RemoteRetriever("http://a:1", client=_mock(lambda r: httpx.Response(200, text="<html>hi</html>")))
    with pytest.raises(ValueError, match="did not answer in the /retrieve format"):
        remote.search(["q"], 1)
    remote = RemoteRetriever("http://a:1", client=_mock(lambda r: httpx.Response(200, json={"result": [[]]})))
    with pytest.raises(ValueError, match="1 result lists for 2 queries"):
        remote.search(["q", "r"], 1)


def test_documents_without_scores_and_with_title_text() -> None:
    from searchrl.retrieval.client import parse_result_item

    assert parse_result_item({"id": "1", "contents": '"Quoted"\nbody'}).title == "Quoted"
    hit = parse_result_item({"document": {"title": "T", "text": "x"}, "score": 2})
    assert (hit.id, hit.title, hit.text, hit.score) == ("", "T", "x", 2.0)
    with pytest.raises(ValueError, match="needs a 'contents'"):
        parse_result_item({"id": "1"})


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"result": [[{"document": {"contents": "T\nx"}, "score": None}]]}, "score must be a number, got None"),
        ({"result": [[{"document": {"contents": "T\nx"}, "score": "high"}]]}, "score must be a number, got 'high'"),
        ({"result": [[{"document": {"contents": None}}]]}, "needs a 'contents' \\(or 'text'\\) string"),
        ({"result": [{"a": 1}]}, "returned 0 result lists for 1 queries"),
        ({"result": [5]}, "returned 0 result lists for 1 queries"),
    ],
)
def test_a_server_answering_out_of_format_is_one_line_naming_it(body: dict, match: str) -> None:
    """Whatever a server sends back, the client says which server broke the /retrieve format, and how."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    retriever = RemoteRetriever("http://h:1", retries=0, client=httpx.Client(transport=transport))
    with pytest.raises(ValueError, match=match) as err:
        retriever.search(["q"], k=1)
    assert "http://h:1/retrieve" in str(err.value)


def test_an_error_body_that_is_a_list_and_a_timeout_name_their_fix() -> None:
    rejecting = httpx.MockTransport(lambda request: httpx.Response(400, json=["bad", "request"]))
    retriever = RemoteRetriever("http://h:1", retries=0, client=httpx.Client(transport=rejecting))
    with pytest.raises(ValueError, match=r"rejected the request \(HTTP 400\): \[\"bad\""):
        retriever.search(["q"], k=1)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    retriever = RemoteRetriever(
        "http://h:1", retries=0, timeout_s=2, client=httpx.Client(transport=httpx.MockTransport(slow))
    )
    with pytest.raises(RetrievalUnavailableError, match=r"raise retrieval.timeout_s \(now 2 s\)"):
        retriever.search(["q"], k=1)


def test_a_server_that_drops_the_connection_is_told_apart_from_none_running() -> None:
    def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    retriever = RemoteRetriever("http://h:1", retries=0, client=httpx.Client(transport=httpx.MockTransport(dropped)))
    with pytest.raises(RetrievalUnavailableError, match="dropped the connection without answering") as err:
        retriever.search(["q"], k=1)
    assert "searchrl serve" not in str(err.value)


def test_a_server_that_trickles_its_answer_times_out(serve_app) -> None:
    """Headers at once, then a byte every 0.1 s: each read is quick, so only a deadline on the whole answer ends it."""
    import asyncio

    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    # no response model: on older pydantic (2.7) FastAPI cannot resolve this local return annotation into one
    @app.post("/retrieve", response_model=None)
    async def retrieve() -> StreamingResponse:
        async def drip():
            for _ in range(100):
                yield b" "
                await asyncio.sleep(0.1)

        return StreamingResponse(drip(), media_type="application/json")

    with serve_app(app) as url:
        t0 = time.monotonic()
        with pytest.raises(RetrievalUnavailableError, match=r"ReadTimeout.*raise retrieval.timeout_s \(now 0.5 s\)"):
            RemoteRetriever(url, retries=0, timeout_s=0.5).search(["q"], k=1)
    assert time.monotonic() - t0 < 2.0


def test_more_hits_than_asked_are_cut_and_an_overload_says_so() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.extend(json.loads(request.content)["queries"])
        return httpx.Response(200, json=_ok(json.loads(request.content)["queries"], 5))  # ignores topk

    hits = RemoteRetriever("http://a:1", client=_mock(handler)).search(["a", "b" * 5000], 2)
    assert [len(h) for h in hits] == [2, 2]
    assert [len(q) for q in sent] == [1, 4096]  # a query over the service's limit goes cut to it, not refused
    busy = _mock(lambda request: httpx.Response(503, json={"detail": "retrieval service overloaded (9 waiting)"}))
    with pytest.raises(RetrievalUnavailableError, match=r"HTTP 503 \(retrieval service overloaded.*max-pending"):
        RemoteRetriever("http://a:1", retries=0, client=busy).search(["q"], 1)


def test_endpoint_url_and_lru() -> None:
    assert endpoint_url("http://h:8000") == "http://h:8000/retrieve"
    assert endpoint_url("http://h:8000/") == "http://h:8000/retrieve"
    assert endpoint_url("http://h:8000/retrieve_hotpotqa") == "http://h:8000/retrieve_hotpotqa"
    with pytest.raises(ValueError, match="must look like"):
        endpoint_url("h:8000")
    with pytest.raises(ValueError, match="at least one URL"):
        RemoteRetriever([])
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)  # evicts b, the least recently used
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3


def test_retries_and_backoff_come_from_the_config() -> None:
    from searchrl.config import load_config
    from searchrl.retrieval import make_retriever

    cfg = load_config(None, ["retrieval.kind=remote", "retrieval.urls=[http://127.0.0.1:9]"])
    assert (make_retriever(cfg.retrieval).retries, make_retriever(cfg.retrieval).backoff_s) == (3, 0.2)
    cfg = load_config(None, ["retrieval.kind=remote", "retrieval.urls=[http://127.0.0.1:9]", "retrieval.retries=8"])
    patient = make_retriever(cfg.retrieval.model_copy(update={"backoff_s": 1.0}))
    assert (patient.retries, patient.backoff_s) == (8, 1.0)


def test_what_a_server_said_is_one_line_from_any_error_layout() -> None:
    from searchrl.httputil import server_said

    for body, said in (
        ({"error": "Invalid API key."}, "Invalid API key."),  # SerpAPI
        ({"message": "too long", "object": "error"}, "too long"),  # vLLM
        ({"detail": "queries must be a list"}, "queries must be a list"),  # FastAPI
        (["bad", "request"], '["bad","request"]'),  # not an object: the body as it came
    ):
        # the body's bytes are written here: httpx's own json= encoding puts spaces after commas before 0.28
        content = json.dumps(body, separators=(",", ":")).encode()
        assert server_said(httpx.Response(400, content=content, headers={"content-type": "application/json"})) == said
    assert server_said(httpx.Response(502, text="<html>\n<b>Bad\nGateway</b>\n</html>"), 12) == "<html> <b>Ba"
    # a secret is hidden before the message is cut, so no part of it is left where the cut halves it
    assert server_said(httpx.Response(401, text="bad key sk-12345678"), 12, "sk-12345678") == "bad key ***"
