"""ASGI layer of the retrieval service: request bodies read as JSON whatever their content type, and bounded in
size before they are read into memory; the Host header checked against the names the service answers to."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

#: the names of this machine a server on a loopback address answers to (any port)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether a bind address (or Host name) is this machine only: ``localhost``, 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(bind: str, extra: Sequence[str] = ()) -> list[str] | None:
    """The Host names a server listening on ``bind`` answers to, None for any: on a loopback address its loopback
    names and ``extra``; on another address (0.0.0.0, a LAN address) any name, or the loopback names and ``extra``
    when given. ``*`` in ``extra`` allows any."""
    if "*" in extra or not (extra or is_loopback(bind)):
        return None
    return list(dict.fromkeys([*LOOPBACK_NAMES, *(h.strip("[]").lower() for h in extra)]))


class TrustedHosts:
    """ASGI layer: an HTTP request whose Host header names neither this machine's loopback (``localhost``,
    127.0.0.0/8, ``[::1]``) nor one of ``hosts``, with any port, is refused with 421 before it is read. A web page
    whose host name an attacker re-points at 127.0.0.1 (DNS rebinding) sends that name as the Host, so it cannot reach
    a service on this machine through a researcher's browser. A request a browser sends for a page of another site
    (its ``Origin`` header names another host) is refused with 403: such a page may not send queries either."""

    def __init__(self, app: Any, hosts: Sequence[str]) -> None:
        self.app = app
        self.hosts = {h.strip("[]").lower() for h in hosts}

    def _allowed(self, name: str) -> bool:
        return is_loopback(name) or name in self.hosts

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fields = dict(scope["headers"])
        header = fields.get(b"host", b"").decode("latin-1")
        name = _hostname(f"//{header}")
        origin = fields.get(b"origin", b"").decode("latin-1")  # sent by browsers only
        if not self._allowed(name):
            names = ", ".join(dict.fromkeys([*LOOPBACK_NAMES, *sorted(self.hosts)]))
            detail = (
                f"Host '{header}' is not a name this service answers to ({names}); to reach it by that name, start "
                f"it with --allowed-host {name or 'NAME'}"
            )
            await _answer(send, 421, detail)
        elif origin and not self._allowed(_hostname(origin)):
            await _answer(send, 403, f"requests from web pages of {origin} are refused; query the service directly")
        else:
            await self.app(scope, receive, send)


def _hostname(url: str) -> str:
    """The host of a URL (``//host:port`` for a Host header), lower case, without brackets; "" when there is none."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:  # e.g. an unclosed [
        return ""


class JsonBodies:
    """ASGI layer: every POST body is read as JSON, whatever its content type says (``curl -d '{...}'`` labels a
    JSON body as a form; Search-R1's clients send JSON), and a body over ``max_bytes`` is refused with 413 before it
    is read into memory (by its Content-Length, or while a chunked one arrives)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        fields = dict((k.lower(), v) for k, v in headers)
        length = fields.get(b"content-length")
        if b"transfer-encoding" in fields or (length is not None and not length.isdigit()):
            length = None  # chunked wins over a Content-Length (RFC 9112 6.3; h11 passes both): count what arrives
        if length is not None and int(length) > self.max_bytes:
            await self._too_large(send, int(length))
            return
        if length is None:  # chunked: read it here, within the limit, and hand it on whole
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_bytes:
                    await self._too_large(send, size, at_least=True)
                    return
                if not message.get("more_body", False):
                    break
            receive = _replay(b"".join(chunks), receive)
        await self.app(scope, receive, send)

    async def _too_large(self, send: Any, size: int, at_least: bool = False) -> None:
        detail = (
            f"request body {'over' if at_least else 'of'} {size:,} bytes; the limit is {self.max_bytes:,} "
            "(send fewer or shorter queries per request)"
        )
        await _answer(send, 413, detail)


async def _answer(send: Any, status: int, detail: str) -> None:
    """A JSON ``{"detail": ...}`` response, sent without reading the request."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``body`` whole first, then whatever the client sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed
