"""Web search backend against a local fake SerpAPI / Google Programmable Search server."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from searchrl.retrieval.web import WebRetriever

KEY = "sk-test-0123456789abcdef"


def _fake_search_app() -> tuple[FastAPI, list[dict]]:
    app = FastAPI()
    log: list[dict] = []
    failures = {"left": 0}

    def results(q: str, n: int) -> list[dict]:
        if q == "nothing":
            return []
        return [
            {"title": f"{q} result {i}", "snippet": f"about {q} #{i}", "link": f"https://ex.org/{i}"} for i in range(n)
        ]

    @app.get("/serpapi")
    async def serpapi(request: Request):
        params = dict(request.query_params)
        log.append(params)
        if failures["left"] > 0:
            failures["left"] -= 1
            return JSONResponse(status_code=503, content={"error": "busy"})
        if params.get("api_key") != KEY:
            return JSONResponse(status_code=401, content={"error": "Invalid API key."})
        found = results(params["q"], int(params["num"]))
        if not found:
            return {"search_metadata": {}, "error": "Google hasn't returned any results for this query."}
        return {"search_metadata": {}, "organic_results": found}

    @app.get("/google")
    async def google(request: Request):
        params = dict(request.query_params)
        log.append(params | {"header_key": request.headers.get("x-goog-api-key")})
        if request.headers.get("x-goog-api-key") != KEY or params.get("cx") != "cse-1":
            return JSONResponse(status_code=403, content={"error": {"message": "forbidden"}})
        found = results(params["q"], int(params["num"]))
        return {"kind": "customsearch#search", **({"items": found} if found else {})}

    app.state.failures = failures
    return app, log


@pytest.fixture
def fake(serve_app):
    app, log = _fake_search_app()
    with serve_app(app) as url:
        yield url, log, app.state.failures


def test_serpapi_results_map_to_hits(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    url, log, _ = fake
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    web = WebRetriever("serpapi", base_url=f"{url}/serpapi")
    out = web.search(["okapi", "nothing", "quokka"], 3)
    assert [len(h) for h in out] == [3, 0, 3]
    first = out[0][0]
    assert (first.id, first.title, first.text, first.score) == (
        "https://ex.org/0",
        "okapi result 0",
        "about okapi #0",
        1.0,
    )
    assert [h.score for h in out[2]] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert {entry["engine"] for entry in log} == {"google"}
    web.search(["okapi"], 3)  # cached: no new request
    assert len(log) == 3
    web.close()


def test_google_cse_sends_key_in_header(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    url, log, _ = fake
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_CSE_ID", "cse-1")
    web = WebRetriever("google", base_url=f"{url}/google")
    out = web.search(["okapi", "nothing"], 20)
    assert len(out[0]) == 10 and out[1] == []  # Google CSE returns at most 10 per request
    assert all(KEY not in str(v) for entry in log for k, v in entry.items() if k != "header_key")
    assert log[0]["header_key"] == KEY and log[0]["num"] == "10"
    web.close()


def test_key_is_never_logged_or_shown(fake, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    url, _, _ = fake
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    web = WebRetriever("serpapi", base_url=f"{url}/serpapi")
    web.search(["okapi"], 2)
    assert any("HTTP Request" in r.getMessage() for r in caplog.records), "httpx logged the request"
    assert KEY not in caplog.text and KEY not in repr(web)
    monkeypatch.setenv("SERPAPI_API_KEY", "wrong-key-42")
    bad = WebRetriever("serpapi", base_url=f"{url}/serpapi")
    with pytest.raises(ValueError) as err:
        bad.search(["okapi"], 2)
    assert "refused the API key (HTTP 401)" in str(err.value) and "$SERPAPI_API_KEY" in str(err.value)
    assert "wrong-key-42" not in str(err.value) and "wrong-key-42" not in caplog.text
    web.close()
    bad.close()


def test_retries_server_errors(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    url, log, failures = fake
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    failures["left"] = 2
    web = WebRetriever("serpapi", base_url=f"{url}/serpapi", retries=2, backoff_s=0.01)
    assert len(web.search(["okapi"], 1)[0]) == 1 and len(log) == 3
    failures["left"] = 5
    with pytest.raises(ConnectionError, match="did not answer after 3 attempts"):
        web.search(["quokka"], 1)
    web.close()


def test_missing_configuration(monkeypatch: pytest.MonkeyPatch, dead_url: str) -> None:
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_CSE_ID", raising=False)
    with pytest.raises(ValueError, match=r"needs an API key in \$SERPAPI_API_KEY"):
        WebRetriever("serpapi")
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    with pytest.raises(ValueError, match="GOOGLE_CSE_ID"):
        WebRetriever("google")
    with pytest.raises(ValueError, match="unknown web search provider"):
        WebRetriever("bing")
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    web = WebRetriever("serpapi", base_url=dead_url, retries=0, timeout_s=2)
    with pytest.raises(ConnectionError, match="ConnectError") as err:
        web.search(["okapi"], 1)
    assert KEY not in str(err.value)
    web.close()


@pytest.mark.parametrize(
    "body", [[1, 2], {"organic_results": [1, "x"]}, {"organic_results": {"a": 1}}, "just a string"]
)
def test_an_answer_in_another_format_is_one_line(serve_app, monkeypatch: pytest.MonkeyPatch, body) -> None:
    app = FastAPI()
    app.get("/serpapi")(lambda: JSONResponse(content=body))
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    with serve_app(app) as url:
        web = WebRetriever("serpapi", base_url=f"{url}/serpapi", retries=0)
        with pytest.raises(
            ValueError, match=r"unknown format .* check retrieval\.urls\[0\] .* and retrieval\.web\.provider$"
        ) as err:
            web.search(["q"], 2)
        web.close()
    assert "\n" not in str(err.value) and KEY not in str(err.value)


def test_an_answer_that_is_not_json_names_the_fix(serve_app, monkeypatch: pytest.MonkeyPatch) -> None:
    app = FastAPI()
    app.get("/serpapi")(lambda: HTMLResponse("<html><body>Sign in to continue</body></html>"))
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    with serve_app(app) as url:
        web = WebRetriever("serpapi", base_url=f"{url}/serpapi", retries=0)
        with pytest.raises(ValueError) as err:
            web.search(["q"], 2)
        web.close()
    message = str(err.value)
    assert "\n" not in message and KEY not in message
    assert "did not return JSON (HTTP 200, text/html); check retrieval.urls[0]" in message


def test_null_title_or_snippet_is_no_text(serve_app, monkeypatch: pytest.MonkeyPatch) -> None:
    app = FastAPI()
    app.get("/serpapi")(lambda: {"organic_results": [{"link": "https://ex.org", "title": None, "snippet": "s"}]})
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    with serve_app(app) as url:
        web = WebRetriever("serpapi", base_url=f"{url}/serpapi", retries=0)
        hit = web.search(["q"], 1)[0][0]
        web.close()
    assert (hit.title, hit.text) == ("", "s")


def test_a_refused_request_carries_the_apis_reason_and_a_timeout_names_the_setting(monkeypatch) -> None:
    """A 4xx other than a refused key says what the API said (SerpAPI's "error", Google's error.message), on one
    line and without the key; a search API that keeps timing out names retrieval.timeout_s."""
    import httpx

    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_CSE_ID", "cx")
    said = {
        "serpapi": {"error": f"Unsupported `num` parameter\nfor key {KEY}."},
        "google": {"error": {"code": 400, "message": "Request contains an invalid argument."}},
    }
    for provider, body in said.items():
        web = WebRetriever(provider, base_url="http://api.test/search", retries=2, backoff_s=0)
        web._client = httpx.Client(transport=httpx.MockTransport(lambda r, b=body: httpx.Response(400, json=b)))
        with pytest.raises(ValueError) as err:
            web.search(["okapi"], 2)
        message = str(err.value)
        assert "rejected the request (HTTP 400: " in message and "\n" not in message and KEY not in message
        assert ("Unsupported `num` parameter for key ***." if provider == "serpapi" else "invalid argument") in message
        web.close()

    def stuck(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    web = WebRetriever("serpapi", base_url="http://api.test/search", retries=1, backoff_s=0, timeout_s=3)
    web._client = httpx.Client(transport=httpx.MockTransport(stuck))
    with pytest.raises(ConnectionError, match=r"\(ReadTimeout\); .*raise retrieval.timeout_s \(now 3 s\)"):
        web.search(["okapi"], 2)
    web.close()
