"""ASGI layer of the retrieval service: request bodies read as JSON whatever their content type, and bounded in
size before they are read into memory."""

from __future__ import annotations

import json
from typing import Any


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
        length = dict((k.lower(), v) for k, v in headers).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
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
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``body`` whole first, then whatever the client sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed
