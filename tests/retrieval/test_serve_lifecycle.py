"""`searchrl serve` as a process: a busy port fails before anything claims to serve; SIGTERM shuts it down cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import searchrl

SRC = str(Path(searchrl.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "searchrl", *args]


def _index(tmp: Path) -> Path:
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        '{"id": "p1", "contents": "Zorvex\\nZorvex is a river."}\n'
        '{"id": "p2", "contents": "Quellan\\nQuellan is a mountain."}\n'
    )
    subprocess.run(
        _cmd("index", "build", "--corpus", str(corpus), "--kind", "bm25", "--out", str(tmp / "idx")),
        env=ENV,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return tmp / "idx"


@pytest.mark.timeout(240)
def test_busy_port_then_sigterm(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    first = subprocess.Popen(
        _cmd("serve", "--index", str(idx), "--port", "0"),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line, deadline = "", time.monotonic() + 120
        while "serving on" not in line and first.poll() is None and time.monotonic() < deadline:
            line += first.stderr.readline()
        assert "serving on" in line, f"no 'serving on' line from `searchrl serve`: {line!r}"
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/retrieve", line).group(1))
        for _ in range(50):  # the socket is bound before the line; wait until uvicorn accepts
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["Zorvex river"], "topk": 1})
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["result"][0][0]["id"] == "p1"
        foreign = httpx.get(f"http://127.0.0.1:{port}/health", headers={"Host": f"attacker.example:{port}"})
        assert foreign.status_code == 421  # on loopback: loopback host names only (DNS rebinding)

        second = subprocess.run(
            _cmd("serve", "--index", str(idx), "--port", str(port)),
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert f"port {port} on 127.0.0.1 is already in use" in second.stderr
        assert "serving on" not in second.stderr + second.stdout and "Traceback" not in second.stderr

        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
        assert "stopped serving" in first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()


def test_served_connections_send_without_nagle_delay() -> None:
    """asyncio (hence uvicorn) sets TCP_NODELAY on accepted connections only when the listening socket says
    IPPROTO_TCP; `socket.create_server` says 0, and every answer on a kept-alive connection then waited ~40 ms for
    the client's delayed ACK. The socket `searchrl serve` and `searchrl mcp --http` listen on gets it right."""
    import asyncio
    import socket

    from searchrl.commands.index import _bind

    async def accepted_nodelay() -> int:
        sock = _bind("127.0.0.1", 0)
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                raw = transport.get_extra_info("socket")
                seen.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0


def test_log_lines_are_not_broken_at_the_console_width() -> None:
    """A log line holding a URL or a path stays one line: rich breaking "serving on" across lines at 80 columns
    (any non-terminal stderr) left a reader of the line waiting for it forever."""
    from searchrl.utils import console

    text = "loaded bm25 index of 2 passages from /" + "very-long-directory/" * 5 + " in 0.01 s; serving on http://x/"
    with console.capture() as cap:
        console.print(text)
    assert cap.get().strip() == text
