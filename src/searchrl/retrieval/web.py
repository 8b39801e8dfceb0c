"""Web search behind the ``Retriever`` interface (optional backend; it needs an API key and costs money per query).

Providers:

- ``serpapi``: SerpAPI-style JSON (``GET {base}?engine=google&q=...&num=k&api_key=KEY`` ->
  ``{"organic_results": [{"title", "snippet", "link"}, ...]}``), key from ``$SERPAPI_API_KEY``;
- ``google``: Google Programmable Search (``GET {base}?q=...&cx=ID&num=k`` with the key in the ``X-goog-api-key``
  header -> ``{"items": [{"title", "snippet", "link"}, ...]}``), key from ``$GOOGLE_API_KEY``, engine id from
  ``$GOOGLE_CSE_ID``.

A hit is ``Hit(id=link, title, text=snippet, score=1 / rank)``. The key is read from the environment, sent only to
the provider, and never logged: error messages are built without the request URL, and a filter redacts it from
httpx's own request log lines (which print full URLs, query string included). ``base_url`` is configurable, so
tests run against a local fake server.

Online search as the papers evaluate it (``searchrl.retrieval.pages``): with a ``fetcher`` the pages of the top
``pages`` results of each query are fetched and their text replaces the snippet; with a ``summarizer`` too, each page
is condensed for its query and the summary is the hit's text, a page the summariser finds irrelevant is dropped,
and when every page of a query is dropped the snippets are returned instead, so the model always gets something.
A page that cannot be fetched (robots.txt, type, timeout, HTTP error) keeps its snippet; ``last_pages`` records what
happened to each page of the last call.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from searchrl.httputil import request_within, server_said
from searchrl.retrieval.base import Hit
from searchrl.retrieval.cache import LRUCache
from searchrl.retrieval.local import check_search_args

if TYPE_CHECKING:
    from searchrl.retrieval.pages import PageFetcher, PageSummarizer


@dataclass(frozen=True)
class WebProvider:
    name: str
    base_url: str
    key_env: str
    results_field: str
    max_num: int  # most results one request may ask for


PROVIDERS = {
    "serpapi": WebProvider("serpapi", "https://serpapi.com/search", "SERPAPI_API_KEY", "organic_results", 100),
    "google": WebProvider("google", "https://www.googleapis.com/customsearch/v1", "GOOGLE_API_KEY", "items", 10),
}


class _RedactSecret(logging.Filter):
    """Replace a secret in log records (message and arguments) before any handler formats them."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.secret in message:
            record.msg, record.args = message.replace(self.secret, "***"), None
        return True


class WebRetriever:
    """Search the web through a SerpAPI-style or Google Programmable Search HTTP API."""

    def __init__(
        self,
        provider: str = "serpapi",
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        cx: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_workers: int = 4,
        cache_size: int = 1000,
        fetcher: PageFetcher | None = None,
        summarizer: PageSummarizer | None = None,
        pages: int | None = None,
        query_suffix: str = "",
    ) -> None:
        if provider not in PROVIDERS:
            raise ValueError(f"unknown web search provider '{provider}'; use one of {', '.join(PROVIDERS)}")
        self.provider = PROVIDERS[provider]
        self.base_url = base_url or self.provider.base_url
        self.key_env = api_key_env or self.provider.key_env
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise ValueError(f"web search ({provider}) needs an API key in ${self.key_env}; export it and retry")
        self._key = key
        self.cx = cx or os.environ.get("GOOGLE_CSE_ID")
        if provider == "google" and not self.cx:
            raise ValueError("Google Programmable Search needs a search engine id: set $GOOGLE_CSE_ID or pass cx=")
        if summarizer is not None and fetcher is None:
            raise ValueError("a page summariser needs page fetching; set retrieval.web.fetch_pages: true")
        if pages is not None and pages < 1:
            raise ValueError(f"pages (results fetched per query) must be >= 1 or null, got {pages}")
        self.fetcher, self.summarizer, self.pages = fetcher, summarizer, pages
        self.query_suffix = query_suffix
        self.last_pages: list[dict[str, Any]] = []
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.cache = LRUCache(cache_size)
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s))
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="web-search")
        self._redact = _RedactSecret(key)
        # httpx logs every request URL (query string included) at INFO on the "httpx" logger.
        logging.getLogger("httpx").addFilter(self._redact)

    def __repr__(self) -> str:  # never show the key
        return f"WebRetriever(provider={self.provider.name!r}, base_url={self.base_url!r})"

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        queries = check_search_args(queries, k)
        results = list(self._pool.map(lambda q: self._search_one(q + self.query_suffix, k), queries))
        return results if self.fetcher is None else self._with_pages(queries, results)

    def _with_pages(self, queries: list[str], results: list[list[Hit]]) -> list[list[Hit]]:
        """Page text (or its summary for the query) in place of each fetched result's snippet (see the module doc)."""
        assert self.fetcher is not None
        targets = [
            (qi, hi)
            for qi, hits in enumerate(results)
            for hi in range(len(hits))
            if self.pages is None or hi < self.pages
        ]
        pages = self.fetcher.fetch_many([results[qi][hi].id for qi, hi in targets])
        texts = {key: page.text for key, page in zip(targets, pages, strict=True) if page.ok}
        summaries: dict[tuple[int, int], str | None] = {}
        if self.summarizer is not None and texts:
            keys = list(texts)
            outs = self.summarizer.summarize([(queries[qi], texts[(qi, hi)]) for qi, hi in keys])
            summaries = dict(zip(keys, outs, strict=True))
        self.last_pages = [
            {
                "query": queries[qi],
                "url": page.url,
                "status": page.status,
                "seconds": round(page.seconds, 3),
                "chars": len(page.text),
                "truncated": page.truncated,
                **({"summary": summaries.get((qi, hi))} if self.summarizer is not None and page.ok else {}),
            }
            for (qi, hi), page in zip(targets, pages, strict=True)
        ]
        out = []
        for qi, hits in enumerate(results):
            kept = []
            for hi, hit in enumerate(hits):
                if (qi, hi) not in texts:
                    kept.append(hit)  # not fetched, or the fetch failed: the search API's snippet
                elif self.summarizer is None:
                    kept.append(dataclasses.replace(hit, text=texts[(qi, hi)]))
                elif summaries[(qi, hi)] is not None:
                    kept.append(dataclasses.replace(hit, text=summaries[(qi, hi)]))
            out.append(kept or hits)  # every page irrelevant: the snippets rather than nothing
        return out

    def _request(self, query: str, k: int) -> httpx.Response:
        num = min(k, self.provider.max_num)
        if self.provider.name == "serpapi":
            params = {"engine": "google", "q": query, "num": num, "api_key": self._key}
            return request_within(self._client, "GET", self.base_url, self.timeout_s, params=params)
        params = {"q": query, "cx": self.cx, "num": num}
        headers = {"X-goog-api-key": self._key}
        return request_within(self._client, "GET", self.base_url, self.timeout_s, params=params, headers=headers)

    def _search_one(self, query: str, k: int) -> list[Hit]:
        key = (query, k, self.provider.name, self.base_url)
        cached = self.cache.get(key)
        if cached is not None:
            return list(cached)
        where = f"{self.provider.name} search at {self.base_url}"  # never the full URL: it may carry the key
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = self._request(query, k)
            except httpx.TransportError as err:
                last = type(err).__name__
                continue
            if resp.status_code >= 500 or resp.status_code == 429:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code in (401, 403):
                raise ValueError(f"{where} refused the API key (HTTP {resp.status_code}); check ${self.key_env}")
            if resp.status_code >= 400:
                said = server_said(resp, 200, self._key)
                raise ValueError(
                    f"{where} rejected the request (HTTP {resp.status_code}: {said}); check "
                    "retrieval.web.provider and retrieval.urls[0] (the search endpoint)"
                )
            hits = self._parse(resp, k, where)
            self.cache.put(key, hits)
            return list(hits)
        fix = "check the network"
        if "Timeout" in last:
            fix = f"the search API is slow: check the network, or raise retrieval.timeout_s (now {self.timeout_s:g} s)"
        raise ConnectionError(f"{where} did not answer after {self.retries + 1} attempts ({last}); {fix}")

    def _parse(self, resp: httpx.Response, k: int, where: str) -> list[Hit]:
        try:
            body: dict[str, Any] = resp.json()
        except ValueError:
            ctype = resp.headers.get("content-type", "no content type").split(";")[0]
            raise ValueError(
                f"{where} did not return JSON (HTTP {resp.status_code}, {ctype}); check retrieval.urls[0] (the search "
                "endpoint) and retrieval.web.provider"
            ) from None
        field = self.provider.results_field
        items = body.get(field) if isinstance(body, dict) else None
        if items is None and isinstance(body, dict):
            # Both APIs omit the results field when nothing matched; SerpAPI then also sets "error".
            return []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError(
                f"{where} answered in an unknown format (expected an object whose '{field}' lists result objects); "
                f"check retrieval.urls[0] (the search endpoint) and retrieval.web.provider"
            )
        hits = []
        for rank, item in enumerate(items[:k], start=1):
            title, snippet = (str(item.get(f) or "") for f in ("title", "snippet"))  # null is no text, not "None"
            hits.append(Hit(str(item.get("link") or ""), title, snippet, 1.0 / rank))
        return hits

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()
        if self.fetcher is not None:
            self.fetcher.close()
        logging.getLogger("httpx").removeFilter(self._redact)
