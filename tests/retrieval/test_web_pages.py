"""Online search end to end against local fakes: a SerpAPI-style search API and a page server on 127.0.0.1 that
serves good, slow, trickling, huge, broken, binary, redirecting and robots-forbidden pages. Nothing may hang."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi import FastAPI, Request

from searchrl.config import RetrievalConfig
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval import make_retriever, netguard
from searchrl.retrieval.pages import FetchOptions, PageFetcher, PageSummarizer, html_to_text
from searchrl.retrieval.web import WebRetriever
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

KEY = "sk-test-pages"
GOOD = (
    b"<html><head><title>Amber Fort</title><script>track()</script></head><body><nav>Home | About</nav>"
    b"<h1>Amber Fort</h1><p>The Amber Fort was built in <b>1592</b> by Raja Man Singh.</p>"
    b"<footer>Copyright</footer></body></html>"
)
PLAIN = b"Weather report\n\nRain all week in Jaipur."


class PageHandler(BaseHTTPRequestHandler):
    """Every behaviour a real page can have; ``sent`` counts the bytes of /huge actually written, ``hosts`` the Host
    header of every request."""

    sent = {"huge": 0}
    hosts: list[str] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8", **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        path = "/" + self.path.split("/", 3)[3] if self.path.startswith("http://") else self.path  # as a proxy
        PageHandler.hosts.append(self.headers.get("Host", ""))
        try:
            if path == "/robots.txt":
                if self.headers.get("Host", "").startswith("bounce.test"):  # its robots.txt redirects inwards
                    self._send(301, b"", Location="http://10.0.0.7/robots.txt")
                elif self.headers.get("Host", "").startswith("localhost"):  # another origin: its robots.txt is broken
                    self._send(500, b"oops", "text/plain")
                else:
                    self._send(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
            elif path in ("/good", "/private/secret"):
                self._send(200, GOOD)
            elif path == "/gzip":  # most servers compress: the text is read from the inflated body
                self._send(200, gzip.compress(GOOD), **{"Content-Encoding": "gzip"})
            elif path == "/plain":
                self._send(200, PLAIN, "text/plain; charset=utf-8")
            elif path == "/redirect":
                self._send(302, b"", Location="/good")
            elif path == "/to-metadata":  # a redirect to a cloud metadata service
                self._send(302, b"", Location="http://169.254.169.254/latest/meta-data/")
            elif path == "/to-intranet":  # a redirect to a name on the local network
                self._send(302, b"", Location=f"http://intranet.test:{self.server.server_address[1]}/good")
            elif path == "/loop":
                self._send(302, b"", Location="/loop")
            elif path == "/slow":  # no answer for longer than the page timeout
                time.sleep(3.0)
                self._send(200, GOOD)
            elif path == "/trickle":  # headers at once, then one byte at a time: only a whole-page deadline stops it
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(200):
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.05)
            elif path == "/huge":  # 50 MB announced, written until the client hangs up
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(50_000_000))
                self.end_headers()
                chunk = b"<p>" + b"Amber Fort stones " * 3000 + b"</p>\n"
                while PageHandler.sent["huge"] < 50_000_000:
                    self.wfile.write(chunk)
                    PageHandler.sent["huge"] += len(chunk)
            elif path == "/broken":  # promises 10,000 bytes, sends 30 and closes the connection
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "10000")
                self.end_headers()
                self.wfile.write(b"<html><p>Amber Fort was bui")
                self.wfile.flush()
                self.close_connection = True
            elif path == "/garbled":  # broken markup still yields its text
                self._send(200, b"<html><p>Amber Fort <b>unclosed <div>built 1592<td></table></html")
            elif path == "/pdf":
                self._send(200, b"%PDF-1.4 binary", "application/pdf")
            elif path == "/binary":  # claims HTML, is binary
                self._send(200, b"\x00\x01\x02PNG\x00" * 100, "text/html")
            elif path == "/error":
                self._send(500, b"server error")
            elif path.startswith("/nap/"):  # a page that takes a while, well within the page timeout
                time.sleep(0.5)
                self._send(200, b"<p>" + path.encode() + b"</p>")
            elif path == "/bad-byte":  # UTF-8 as declared, but for one invalid byte
                self._send(200, "<p>Café in Jaipur, naïve prices ".encode() + b"\xff</p>")
            elif path == "/unknown-charset":
                self._send(200, "Café in Jaipur".encode(), "text/plain; charset=x-no-such-charset")
            elif path == "/utf-16":
                self._send(200, "<p>Hawa Mahal, 1799</p>".encode("utf-16"), "text/html; charset=utf-16")
            else:
                self._send(404, b"not found")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (size cap, deadline): expected


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), PageHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fetcher(**kw) -> PageFetcher:
    """A fetcher for the page server on 127.0.0.1, which only ``allow_private`` reaches."""
    options = {"timeout_s": 1.0, "max_bytes": 200_000, "max_chars": 5_000, "allow_private": True, **kw}
    return PageFetcher(FetchOptions(**options))


def test_every_kind_of_page_gets_a_status_and_nothing_hangs(pages: str) -> None:
    names = [
        "good",
        "gzip",
        "plain",
        "redirect",
        "loop",
        "slow",
        "trickle",
        "huge",
        "broken",
        "garbled",
        "pdf",
        "binary",
        "error",
        "missing",
        "private/secret",
    ]
    f = fetcher()
    t0 = time.monotonic()
    got = {n: p for n, p in zip(names, f.fetch_many([f"{pages}/{n}" for n in names]), strict=True)}
    elapsed = time.monotonic() - t0
    f.close()
    assert elapsed < 2.9  # all concurrently, each within its 1 s deadline (the slow page sleeps 3 s, trickle 10 s)
    assert {n: p.status for n, p in got.items()} == {
        "good": "ok",
        "gzip": "ok",
        "plain": "ok",
        "redirect": "ok",
        "loop": "too_many_redirects",
        "slow": "timeout",
        "trickle": "timeout",
        "huge": "ok",
        "broken": "error",
        "garbled": "ok",
        "pdf": "content_type",
        "binary": "content_type",
        "error": "http_500",
        "missing": "http_404",
        "private/secret": "robots",
    }
    assert got["good"].text == "Amber Fort\nAmber Fort\nThe Amber Fort was built in 1592 by Raja Man Singh."
    assert (
        got["plain"].text == "Weather report\nRain all week in Jaipur." and got["plain"].content_type == "text/plain"
    )
    assert got["redirect"].final_url == f"{pages}/good" and got["redirect"].text == got["good"].text
    assert got["huge"].truncated and len(got["huge"].text) == 5_000  # capped text ...
    assert PageHandler.sent["huge"] < 20_000_000  # ... and the download stopped long before the 50 MB
    assert "built 1592" in got["garbled"].text
    # the trickling page is cut by the fetcher's own whole-page deadline, not abandoned in a blocked worker
    assert got["trickle"].detail.startswith("no complete page within") and got["trickle"].seconds < 1.5
    assert got["slow"].seconds < 1.5
    assert got["pdf"].content_type == "application/pdf"


def test_robots_per_origin_and_cache(pages: str) -> None:
    f = fetcher()
    other_origin = pages.replace("127.0.0.1", "localhost")  # its robots.txt answers 500: forbid everything
    assert f.fetch(f"{other_origin}/good").status == "robots"
    assert f.allowed(f"{pages}/good") and not f.allowed(f"{pages}/private/x")
    assert f.fetch(f"{pages}/good") is f.fetch(f"{pages}/good")  # cached by URL
    assert f.fetch("ftp://example.org/x").status == "bad_url"
    f.close()
    relaxed = fetcher(respect_robots=False)
    assert relaxed.fetch(f"{pages}/private/secret").status == "ok"
    relaxed.close()


def _dns(monkeypatch, answers: dict[str, list[str]]) -> None:
    """Fake DNS: each name of ``answers`` resolves to its next address (the last one repeats); others as usual."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            host = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _public(monkeypatch, *addresses: str) -> None:
    """Let ``addresses`` (on this machine) play public ones."""
    real = netguard.is_public
    monkeypatch.setattr(netguard, "is_public", lambda address: address in addresses or real(address))


def test_private_addresses_are_refused_unless_allowed(pages: str, monkeypatch) -> None:
    port = pages.rsplit(":", 1)[1]
    _dns(monkeypatch, {"intranet.test": ["10.0.0.7"], "loop.test": ["127.0.0.1"]})
    urls = [
        f"{pages}/good",
        f"http://loop.test:{port}/good",
        "http://intranet.test/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/x",
        "http://[::ffff:127.0.0.1]:9/x",
        "http://0.0.0.0:9/x",
    ]
    PageHandler.hosts.clear()
    for robots in (True, False):
        f = fetcher(allow_private=False, respect_robots=robots)
        got = f.fetch_many(urls)
        f.close()
        assert [p.status for p in got] == ["private_address"] * len(urls)  # a status, as other failures
    assert PageHandler.hosts == []  # nothing reached the page server
    assert "intranet.test resolves to 10.0.0.7" in got[2].detail and "allow_private: true" in got[2].detail
    allowed = fetcher()  # allow_private: an intranet search
    assert allowed.fetch(f"http://loop.test:{port}/good").status == "ok"
    allowed.close()
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    for configured in (False, True):  # off unless configured
        web = make_retriever(RetrievalConfig(kind="web", web={"allow_private": configured}))
        assert web.fetcher.options.allow_private is configured
        web.close()


def test_an_httpx_without_the_pools_backend_still_checks_each_host(pages: str, monkeypatch) -> None:
    """The checking backend goes into a private attribute of httpx's pool; where another httpx version lays its pool
    out otherwise, each request's host is checked before it is sent instead (rebinding is then not caught)."""
    port = pages.rsplit(":", 1)[1]
    monkeypatch.setattr(netguard.httpcore, "NetworkBackend", type("Elsewhere", (), {}))  # no pool backend found
    _public(monkeypatch, "127.0.0.1")
    _dns(monkeypatch, {"site.test": ["127.0.0.1"], "intranet.test": ["10.0.0.7"]})
    PageHandler.hosts.clear()
    f = fetcher(allow_private=False, respect_robots=False)
    got = [f.fetch(u) for u in (f"http://intranet.test:{port}/good", f"http://site.test:{port}/to-intranet")]
    assert [p.status for p in got] == ["private_address"] * 2 and "resolves to 10.0.0.7" in got[0].detail
    assert f.fetch(f"http://site.test:{port}/good").status == "ok"
    assert f.fetch("http://no-such-name.invalid/x").status == "error"  # a name that does not resolve: an error page
    f.close()


def test_every_redirect_hop_and_robots_txt_are_checked(pages: str, monkeypatch) -> None:
    port = pages.rsplit(":", 1)[1]
    _public(monkeypatch, "127.0.0.1")  # the page server plays a public site that links inwards
    _dns(monkeypatch, {"site.test": ["127.0.0.1"], "bounce.test": ["127.0.0.1"], "intranet.test": ["10.0.0.7"]})
    f = fetcher(allow_private=False)
    got = {n: f.fetch(f"http://site.test:{port}/{n}") for n in ("good", "redirect", "to-metadata", "to-intranet")}
    assert {n: p.status for n, p in got.items()} == {
        "good": "ok",
        "redirect": "ok",
        "to-metadata": "private_address",
        "to-intranet": "private_address",
    }
    assert "169.254.169.254 is not a public address" in got["to-metadata"].detail
    assert f.fetch(f"http://bounce.test:{port}/good").status == "private_address"  # its robots.txt redirects inwards
    f.close()


def test_a_name_is_resolved_once_and_connected_to_as_checked(pages: str, monkeypatch) -> None:
    """DNS rebinding: a name that answers a public address to one lookup and a private one to the next must not reach
    the private one: the connection goes to the address that was checked (here 127.0.0.2, where nothing listens)."""
    port = pages.rsplit(":", 1)[1]
    _public(monkeypatch, "127.0.0.2")
    _dns(monkeypatch, {"rebind.test": ["127.0.0.2", "127.0.0.1"]})
    PageHandler.hosts.clear()
    f = fetcher(allow_private=False, respect_robots=False)
    page = f.fetch(f"http://rebind.test:{port}/good")
    f.close()
    assert page.status == "error" and "ConnectError" in page.detail
    assert PageHandler.hosts == []


def test_a_proxy_from_the_environment_is_still_used(pages: str, monkeypatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", pages)  # the page server plays the proxy: a configured proxy may be private
    f = fetcher(allow_private=False, respect_robots=False)
    assert f.fetch("http://pages.example/good").status == "ok"  # the proxy resolves the name
    assert f.fetch("http://10.0.0.7/good").status == "private_address"  # an address in a URL is checked here
    f.close()


def test_public_addresses() -> None:
    public = ["93.184.216.34", "8.8.8.8", "2606:4700::1111"]
    private = ["10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.2", "169.254.169.254", "0.0.0.0"]
    private += ["224.0.0.1", "240.0.0.1", "::1", "fe80::1%eth0", "fc00::1", "ff02::1", "::ffff:10.0.0.1"]
    private += ["2002:7f00:1::"]  # 6to4 around 127.0.0.1
    assert [a for a in public + private if netguard.is_public(a)] == public


def test_pages_queued_behind_others_are_fetched(pages: str) -> None:
    # 16 pages of 0.5 s through 2 workers take 4 s, each well within its own 2 s: none may be given up as timed out
    f = PageFetcher(FetchOptions(timeout_s=2.0, respect_robots=False, allow_private=True), max_workers=2)
    got = f.fetch_many([f"{pages}/nap/{i}" for i in range(16)])
    f.close()
    assert [(p.status, p.text) for p in got] == [("ok", f"/nap/{i}") for i in range(16)]


def test_declared_charsets_are_read_and_a_bad_byte_spoils_nothing(pages: str) -> None:
    f = fetcher()
    got = {n: f.fetch(f"{pages}/{n}") for n in ("bad-byte", "unknown-charset", "utf-16")}
    f.close()
    assert got["bad-byte"].text == "Café in Jaipur, naïve prices \ufffd"  # not the whole page re-guessed as cp1252
    assert (got["unknown-charset"].status, got["unknown-charset"].text) == ("ok", "Café in Jaipur")  # read as UTF-8
    assert (got["utf-16"].status, got["utf-16"].text) == ("ok", "Hawa Mahal, 1799")  # its NUL bytes are text


def test_html_to_text_drops_page_furniture() -> None:
    assert html_to_text(GOOD) == "Amber Fort\nAmber Fort\nThe Amber Fort was built in 1592 by Raja Man Singh."
    assert "track()" not in html_to_text(GOOD) and "Copyright" not in html_to_text(GOOD)


def _search_api(pages: str) -> FastAPI:
    app = FastAPI()
    links = {
        "amber fort": ["good", "pdf", "slow", "plain"],
        "jaipur weather": ["plain"],
    }

    @app.get("/serpapi")
    async def serpapi(request: Request):
        params = dict(request.query_params)
        assert params["api_key"] == KEY
        q = params["q"].removesuffix(" site:example.org")
        found = [{"title": f"{q} {n}", "snippet": f"snippet of {n}", "link": f"{pages}/{n}"} for n in links.get(q, [])]
        return {"organic_results": found[: int(params["num"])]}

    return app


def summarizer_script(ctx: str) -> str:
    """A fake summariser: condenses a page that mentions 1592, finds anything else irrelevant."""
    return "Summary: The Amber Fort dates from 1592." if "1592" in ctx.split("Page:")[-1] else "None"


def test_web_retriever_fetches_summarises_and_falls_back_to_snippets(pages: str, serve_app, monkeypatch) -> None:
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    gen = ScriptedGenerator(ByteTokenizer(), summarizer_script)
    summarizer = PageSummarizer(gen, max_new_tokens=100, max_page_tokens=400)
    with serve_app(_search_api(pages)) as api:
        web = WebRetriever(
            "serpapi",
            base_url=f"{api}/serpapi",
            fetcher=fetcher(),
            summarizer=summarizer,
            query_suffix=" site:example.org",
        )
        t0 = time.monotonic()
        amber, weather = web.search(["amber fort", "jaipur weather"], 4)
        assert time.monotonic() - t0 < 3.0
        # good: its summary; pdf and slow: not fetched, their snippets; plain: irrelevant to the query, dropped
        assert [(h.id.rsplit("/", 1)[1], h.text) for h in amber] == [
            ("good", "The Amber Fort dates from 1592."),
            ("pdf", "snippet of pdf"),
            ("slow", "snippet of slow"),
        ]
        # the only page of "jaipur weather" is irrelevant too: its snippet rather than nothing
        assert [h.text for h in weather] == ["snippet of plain"]
        assert len(gen.calls) == 1 and len(gen.calls[0]) == 3  # ONE summariser call: good, plain, plain (2 queries)
        assert all("Search query: amber fort" in c for c in gen.calls[0][:2])
        assert {p["url"].rsplit("/", 1)[1]: p["status"] for p in web.last_pages if p["query"] == "amber fort"} == {
            "good": "ok",
            "pdf": "content_type",
            "slow": "timeout",
            "plain": "ok",
        }
        web.search(["amber fort"], 4)  # pages and summaries are cached: no new summariser call
        assert len(gen.calls) == 1
        web.close()


def test_long_pages_reach_the_summariser_cut_to_its_budget(pages: str, serve_app, monkeypatch) -> None:
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    seen: list[str] = []

    def script(ctx: str) -> str:
        seen.append(ctx)
        return "Stones."

    app = FastAPI()

    @app.get("/serpapi")
    async def serpapi():
        return {"organic_results": [{"title": "huge", "snippet": "s", "link": f"{pages}/huge"}]}

    with serve_app(app) as api:
        web = WebRetriever(
            "serpapi",
            base_url=f"{api}/serpapi",
            fetcher=fetcher(),
            summarizer=PageSummarizer(ScriptedGenerator(ByteTokenizer(), script), max_page_tokens=300),
        )
        (hits,) = web.search(["stones"], 1)
        web.close()
    assert hits[0].text == "Stones."
    page_part = seen[0].split("Page:\n", 1)[1].split("\n\nSearch query:")[0]
    assert len(page_part.encode()) <= 300 + len(" ...")  # the page's head, cut to max_page_tokens byte tokens


def test_agent_rollout_with_online_search_from_the_config(pages: str, serve_app, monkeypatch) -> None:
    """retrieval.kind: web from a config, page text in the observation of a Search-R1 rollout."""
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with serve_app(_search_api(pages)) as api:
        cfg = RetrievalConfig(
            kind="web",
            urls=[f"{api}/serpapi"],
            topk=1,
            web={"page_timeout_s": 1.0, "max_page_chars": 2000, "allow_private": True},  # the pages are on loopback
        )
        retriever = make_retriever(cfg)

        def policy(ctx: str) -> str:
            if "<information>" not in ctx.split("Question:")[-1]:
                return "<think>search</think>\n<search> amber fort </search>"
            return "<think>read</think>\n<answer> 1592 </answer>"

        limits = RolloutLimits(
            max_turns=3, max_searches=1, max_new_tokens=100, max_obs_tokens=500, max_total_tokens=8000, topk=1
        )
        engine = RolloutEngine(
            ScriptedGenerator(ByteTokenizer(), policy), retriever, get_protocol("search_r1"), limits
        )
        (traj,) = engine.run([QAExample("q", "When was the Amber Fort built?", ["1592"])], temperature=0.0)
        retriever.close()
    assert traj.answer.strip() == "1592"
    assert "The Amber Fort was built in 1592 by Raja Man Singh." in traj.turns[0].observation  # the page, not snippet


def test_config_errors_name_the_fix(monkeypatch) -> None:
    monkeypatch.setenv("SERPAPI_API_KEY", KEY)
    with pytest.raises(ValueError, match="fetch_pages: true"):
        make_retriever(RetrievalConfig(kind="web", web={"fetch_pages": False, "summarizer": "some-model"}))
    snippets_only = make_retriever(RetrievalConfig(kind="web", web={"fetch_pages": False}))
    assert snippets_only.fetcher is None
    snippets_only.close()
    with pytest.raises(ValueError, match="timeout_s > 0"):
        PageFetcher(FetchOptions(timeout_s=0))


def test_config_builds_a_local_model_summariser(monkeypatch) -> None:
    """retrieval.web.summarizer loads a model with transformers (here the tiny random Llama) behind a Generator."""
    import searchrl.models
    from searchrl.config import WebConfig
    from searchrl.generation.hf import HFGenerator
    from searchrl.retrieval.pages import make_summarizer
    from searchrl.testing import tiny_model, tokenizer

    loaded: list[str] = []

    def load_policy(spec: str, dtype: str = "float32", device=None, frozen: bool = False):
        loaded.append(spec)
        return tiny_model(), tokenizer()

    monkeypatch.setattr(searchrl.models, "load_policy", load_policy)
    assert make_summarizer(WebConfig()) is None
    summarizer = make_summarizer(
        WebConfig(summarizer="my-summariser", summary_max_new_tokens=6, summary_max_page_tokens=40)
    )
    assert loaded == ["my-summariser"] and isinstance(summarizer.generator, HFGenerator)
    page = "The Amber Fort was built in 1592. " * 5
    (summary,) = summarizer.summarize([("amber fort", page)])
    assert summarizer.cache.get(("amber fort", page)) == (summary or "")  # the model really ran and was cached
