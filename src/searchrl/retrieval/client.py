"""``RemoteRetriever``: the ``Retriever`` interface over one or more Search-R1-compatible ``/retrieve`` servers.

- several endpoints: each call starts at the next endpoint (round-robin) and fails over to the others;
- a failed round (connection error, timeout, 5xx or 429 from every endpoint) is retried after an exponential
  backoff (``backoff_s * 2**round``, plus up to 25% random jitter so many clients do not retry in lockstep), or
  after the server's ``Retry-After`` when it asks for longer (429/503 from an overloaded ``searchrl serve``; capped
  at ``max_retry_after_s``), ``retries`` times; 4xx answers are the caller's mistake and are not retried;
- an in-process LRU cache keyed by (query, k, endpoint set): rollouts repeat queries a lot, and a cached answer
  costs no round trip; only the uncached queries of a batch are sent.

Works against ``searchrl serve`` and against Search-R1's own retrieval server.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from searchrl.data.corpus import split_contents
from searchrl.httputil import request_within, server_said
from searchrl.retrieval.base import Hit
from searchrl.retrieval.cache import LRUCache
from searchrl.retrieval.local import check_search_args


class RetrievalUnavailableError(ConnectionError):
    """No endpoint answered; the message names the URLs and how to start a server."""


def endpoint_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/retrieve``; a URL with a path (``/retrieve_hotpotqa``) is kept."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"retrieval URL '{url}' must look like http://127.0.0.1:8000 (or .../retrieve)")
    return url if parts.path not in ("", "/") else url.rstrip("/") + "/retrieve"


def parse_result_item(item: Any) -> Hit:
    """One element of an inner ``result`` list (with or without scores) -> ``Hit``."""
    if isinstance(item, dict) and "document" in item:
        doc, score = item["document"], item.get("score", 0.0)
        if not isinstance(score, int | float) or isinstance(score, bool):
            raise ValueError(f"a result's score must be a number, got {score!r:.40}")
    else:
        doc, score = item, 0.0
    if not isinstance(doc, dict):
        raise ValueError(f"a result document must be a JSON object, got {type(doc).__name__}")
    if isinstance(doc.get("contents"), str):
        title, text = split_contents(doc["contents"])
    elif isinstance(doc.get("text"), str):
        title, text = str(doc.get("title") or ""), doc["text"]
    else:
        raise ValueError(f"a result document needs a 'contents' (or 'text') string; got {json.dumps(doc)[:120]}")
    return Hit(str(doc.get("id", "")), title, text, float(score))


class RemoteRetriever:
    """Search through HTTP ``/retrieve`` endpoints, with failover, retries and an LRU cache.

    A query longer than ``max_query_chars`` (the service's default limit) is sent cut to it: ITER-RETGEN and IRCoT
    search with the question plus generated text, and an encoder reads far fewer tokens anyway."""

    max_query_chars = 4096

    def __init__(
        self,
        urls: list[str] | str,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        max_retry_after_s: float = 30.0,
        cache_size: int = 10_000,
        max_queries_per_request: int = 1024,
        client: httpx.Client | None = None,
    ) -> None:
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("RemoteRetriever needs at least one URL (retrieval.urls: [http://127.0.0.1:8000])")
        self.urls = [endpoint_url(u) for u in urls]
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.retried = 0
        self.max_queries_per_request = max_queries_per_request
        self.cache = LRUCache(cache_size)
        self.requests = 0
        self.failovers = 0
        self._cache_scope = tuple(sorted(self.urls))
        self._next = itertools.count()
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout_s))

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        queries = check_search_args(queries, k)
        queries = [q[: self.max_query_chars] for q in queries]
        found: dict[str, list[Hit]] = {}
        missing: list[str] = []
        for q in dict.fromkeys(queries):  # unique, in order
            cached = self.cache.get((q, k, self._cache_scope))
            if cached is None:
                missing.append(q)
            else:
                found[q] = cached
        step = self.max_queries_per_request
        for start in range(0, len(missing), step):
            chunk = missing[start : start + step]
            for q, hits in zip(chunk, self._post(chunk, k), strict=True):
                found[q] = hits
                self.cache.put((q, k, self._cache_scope), hits)
        return [list(found[q]) for q in queries]

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        payload = {"queries": queries, "topk": k, "return_scores": True}
        n = len(self.urls)
        first = next(self._next) % n
        last_error = ""
        retry_after = 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
                backoff = self.backoff_s * 2 ** (attempt - 1) * (1.0 + 0.25 * random.random())
                time.sleep(max(backoff, retry_after))
                retry_after = 0.0
            for j in range(n):
                url = self.urls[(first + j) % n]
                if j:
                    self.failovers += 1
                try:
                    resp = request_within(self._client, "POST", url, self.timeout_s, json=payload)
                except httpx.TransportError as err:
                    last_error = f"{url}: {type(err).__name__}"
                    continue
                self.requests += 1
                if resp.status_code >= 500 or resp.status_code == 429:
                    last_error = f"{url}: HTTP {resp.status_code} ({server_said(resp, 200)})"
                    retry_after = max(retry_after, min(_retry_after_s(resp), self.max_retry_after_s))
                    continue
                if resp.status_code >= 400:
                    raise ValueError(
                        f"retrieval server {url} rejected the request (HTTP {resp.status_code}): {server_said(resp)}"
                    )
                return self._parse(resp, url, len(queries), k)
        if "Timeout" in last_error:
            fix = f"the server is slow or stuck: check it, or raise retrieval.timeout_s (now {self.timeout_s:g} s)"
        elif "HTTP 503" in last_error or "HTTP 429" in last_error:
            fix = "the server is overloaded: add endpoints to retrieval.urls, send fewer rollouts at once, or serve "
            fix += "with a larger --max-pending"
        elif "HTTP" in last_error:
            fix = "the server failed the request: see its log"
        elif "RemoteProtocolError" in last_error or "ReadError" in last_error:
            fix = "the server dropped the connection without answering (it may have crashed or restarted): see its "
            fix += "log (to wait out a restart, raise retrieval.retries / backoff_s)"
        else:
            fix = "start one with `searchrl serve --index DIR` or fix retrieval.urls (to wait out a restart, raise "
            fix += "retrieval.retries / backoff_s)"
        raise RetrievalUnavailableError(
            f"no retrieval server answered at {', '.join(self.urls)} after {self.retries + 1} attempts "
            f"(last error: {last_error}); {fix}"
        )

    @staticmethod
    def _parse(resp: httpx.Response, url: str, n_queries: int, k: int) -> list[list[Hit]]:
        try:
            result = resp.json()["result"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(
                f"{url} did not answer in the /retrieve format ({{'result': [...]}}); is it a retrieval server?"
            ) from None
        if not isinstance(result, list) or len(result) != n_queries or not all(isinstance(h, list) for h in result):
            got = sum(isinstance(h, list) for h in result) if isinstance(result, list) else "no"
            raise ValueError(f"{url} returned {got} result lists for {n_queries} queries")
        try:
            # at most k: a server may answer its own count (Search-R1's reranking server ignores topk)
            return [[parse_result_item(item) for item in hits[:k]] for hits in result]
        except ValueError as err:
            raise ValueError(f"{url} answered in an unknown format: {err}") from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retry_after_s(resp: httpx.Response) -> float:
    """The ``Retry-After`` header in seconds (a number or an HTTP date); 0 when absent or unreadable."""
    value = resp.headers.get("retry-after", "").strip()
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return 0.0
