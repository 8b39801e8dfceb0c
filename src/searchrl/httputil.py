"""HTTP helpers shared by the clients of servers and APIs (retrieval, OpenAI-compatible models, judges, web search):
a deadline on a whole answer, and what a server said of a failed request on one line."""

from __future__ import annotations

import time
from typing import Any

import httpx


def request_within(client: httpx.Client, method: str, url: str, timeout_s: float, **kwargs: Any) -> httpx.Response:
    """``client.request`` whose ``timeout_s`` bounds the whole answer: httpx's timeout bounds each connect and each
    read, so a server that trickles its body a byte at a time would hold the call for ever. The body is read as it
    arrives, the deadline checked after every piece; past it, ``httpx.ReadTimeout``. (At most about twice
    ``timeout_s`` in all: a read that stalls waits out its own timeout.)"""
    deadline = time.monotonic() + timeout_s
    with client.stream(method, url, timeout=timeout_s, **kwargs) as resp:
        if resp.is_stream_consumed:  # answered whole already (a mock transport)
            return resp
        raw = bytearray()
        for chunk in resp.iter_raw():
            raw += chunk
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"the answer took over {timeout_s:g} s", request=resp.request)
    return httpx.Response(resp.status_code, headers=resp.headers, content=bytes(raw), request=resp.request)


def server_said(resp: httpx.Response, limit: int = 300, secret: str | None = None) -> str:
    """What a server said of a failed request, on one line of at most ``limit`` characters: OpenAI's and Google's
    ``{"error": {"message"}}``, SerpAPI's ``{"error"}``, vLLM's ``{"message"}``, FastAPI's ``{"detail"}``, else the
    body's text (``secret``, an API key, shown as ``***``).

    >>> server_said(httpx.Response(404, json={"error": {"message": "no such   model"}}))
    'no such model'
    >>> server_said(httpx.Response(400, text="bad key=abc"), secret="abc")
    'bad key=***'
    """
    try:
        body = resp.json()
    except ValueError:
        body = None
    said = None
    if isinstance(body, dict):
        said = body.get("error")
        said = said.get("message") if isinstance(said, dict) else said
        said = said or body.get("message") or body.get("detail")
    text = " ".join(str(said or resp.text or resp.reason_phrase).split())
    return (text.replace(secret, "***") if secret else text)[:limit]  # hidden before the cut, which may halve it
