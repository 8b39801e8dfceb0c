"""A synchronous client of an MCP (Model Context Protocol) server, for code that is not async (rollouts, stages).

``MCPClient(server)`` connects to a server given as a command line (started as a subprocess: the stdio transport) or
an ``http(s)://`` URL (streamable HTTP). It runs the ``mcp`` package's async ``Client`` on an event loop of its own,
in a background thread, and its methods block:

- ``list_tools()``: the server's tools as ``ToolSpec`` (name, description, JSON-schema input); ``tool_schemas()``
  gives them as OpenAI-style function schemas, the form a chat template's tool list takes (``tool_schemas(server)``
  does the same for a server given by its command line or URL);
- ``call_tool(name, arguments)``: a ``ToolResult`` (the tool's text content, ``is_error`` when the tool reported a
  failure); ``call_tools([(name, arguments), ...])`` runs several calls concurrently on the loop (at most
  ``concurrency`` of the client's calls in flight, from every thread).

Every call has a timeout (``timeout_s``; connecting, which includes the time a stdio server takes to start:
``connect_timeout_s``). A server that cannot be started or reached, that stops, or that does not answer in time
raises ``MCPUnavailableError`` (a ``ConnectionError``; ``MCPTimeoutError`` for a timeout) with one line naming the
server, the cause (for a stdio server, its last line on stderr) and the fix; a call the server refuses (an unknown
tool, arguments its schema rejects) raises ``MCPToolError``. A stdio server inherits only the ``mcp`` package's safe
environment (``PATH``, ``HOME``, ...) plus ``env``. ``close()``, or leaving a ``with`` block, ends the session and a
stdio server's process (the server is told to stop by closing its stdin, then terminated).
"""

from __future__ import annotations

import asyncio
import collections
import math
import os
import shlex
import threading
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from typing import Any

from searchrl.tools import split_command
from searchrl.utils import MissingDependency

INSTALL_HINT = "pip install 'searchrl[mcp]' (the mcp package)"
#: seconds given to the session and a stdio server to shut down in ``close()`` (the mcp package bounds its own
#: shutdown at about 6 s: stdin closed, then SIGTERM, then SIGKILL).
CLOSE_TIMEOUT_S = 10.0
#: extra seconds a blocking call waits beyond the loop's own timeout before it gives up on the loop itself.
_BACKSTOP_S = 5.0


class MCPUnavailableError(ConnectionError):
    """The MCP server could not be started or reached, stopped, or the client is closed."""


class MCPTimeoutError(MCPUnavailableError, TimeoutError):
    """The MCP server did not answer (or finish its handshake) in time."""


class MCPToolError(ValueError):
    """The MCP server refused a tool call (unknown tool, arguments its schema rejects) or the tool failed."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool of a server: its name, description and JSON schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def function_schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema: ``{"type": "function", "function": {name, description, parameters}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned: its text blocks (images and other content are left out), joined in ``text``."""

    blocks: tuple[str, ...]
    is_error: bool = False
    #: the tool's structured content, when it gave one (JSON).
    structured: Any = None

    @property
    def text(self) -> str:
        return "\n".join(self.blocks)


def parse_server(server: str | Sequence[str]) -> str | list[str]:
    """A URL (``http(s)://...``) as it is, or a command line as its argument list (a string: :func:`split_command`)."""
    if isinstance(server, str):
        text = server.strip()
        if text.startswith(("http://", "https://")):
            return text
        try:
            argv = split_command(text)
        except ValueError as err:
            raise ValueError(f"cannot split the MCP server command line {server!r}: {err}; check its quotes") from None
    else:
        argv = [str(a) for a in server]
    if not argv or not argv[0].strip():
        raise ValueError(
            "no MCP server given: name a command line (e.g. 'searchrl mcp serve --index indexes/bm25') or a "
            "streamable-HTTP URL (e.g. http://127.0.0.1:8001/mcp)"
        )
    return argv


def describe_server(server: str | Sequence[str]) -> str:
    """A server as one printable string: its URL or its command line."""
    parsed = parse_server(server)
    return parsed if isinstance(parsed, str) else shlex.join(parsed)


def tool_schemas(server: str | Sequence[str], **options: Any) -> list[dict[str, Any]]:
    """The tools of ``server`` (a command line or URL) as OpenAI-style function schemas; ``options`` go to
    :class:`MCPClient` (``timeout_s``, ``env``, ...). Connects, lists and closes."""
    with MCPClient(server, **options) as client:
        return client.tool_schemas()


class _StderrTail:
    """A stdio server's stderr: a pipe whose last lines a thread keeps, to quote the server's own words in errors."""

    def __init__(self, lines: int = 50) -> None:
        read_fd, write_fd = os.pipe()
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)
        self.writer = os.fdopen(write_fd, "w")  # handed to the subprocess
        reader = os.fdopen(read_fd, "r", errors="replace")
        self._thread = threading.Thread(target=self._read, args=(reader,), name="mcp-server-stderr", daemon=True)
        self._thread.start()

    def _read(self, reader: Any) -> None:
        with reader:
            for line in reader:
                self.lines.append(line.rstrip())

    def close_writer(self) -> None:
        """Our copy of the pipe's write end (the server keeps its own): closed once the server has started."""
        if not self.writer.closed:
            self.writer.close()

    def last(self, wait_s: float = 0.0) -> str | None:
        """The server's last line of stderr with a letter in it (skipping rules and box drawing), after waiting up to
        ``wait_s`` seconds for the server's stderr to close (its last words arrive then)."""
        if wait_s > 0:
            self._thread.join(wait_s)
        return next((line.strip() for line in reversed(self.lines) if any(c.isalpha() for c in line)), None)


@dataclass
class _Runtime:
    """The loop thread and the session task of one client: what ``close()`` (or the finalizer) must end."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    stderr: _StderrTail | None = None
    session: Future | None = None
    stop: asyncio.Event | None = None
    #: why the session ended on its own (the server stopped), when it did.
    failure: BaseException | None = None
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if self.session is not None and not self.session.done() and self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
            try:
                self.session.result(CLOSE_TIMEOUT_S)
            except BaseException:  # noqa: BLE001 - shutting down: the session's own failure is no longer news
                self.session.cancel()
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CLOSE_TIMEOUT_S)
        if not self.thread.is_alive():
            self.loop.close()
        if self.stderr is not None:
            self.stderr.close_writer()


class MCPClient:
    """A blocking client of one MCP server (see the module's docstring).

    ``config_key`` (e.g. ``"retrieval.mcp"``) names the settings that configured the client, so errors can name the
    setting to change; ``timeout_setting`` and ``connect_timeout_setting`` name the settings of the two timeouts
    where they live elsewhere (default: ``<config_key>.timeout_s`` and ``<config_key>.connect_timeout_s``).
    """

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        concurrency: int = 16,
        config_key: str = "",
        timeout_setting: str | None = None,
        connect_timeout_setting: str | None = None,
    ) -> None:
        try:
            import mcp  # noqa: F401 - fail here, in the caller's thread, with the install hint
        except ImportError as err:
            raise MissingDependency(f"MCP support needs the mcp package: {INSTALL_HINT}") from err
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"MCP timeouts must be > 0 (got {timeout_s} and connect_timeout_s={connect_timeout_s})")
        if concurrency < 1:
            raise ValueError(f"MCP concurrency must be >= 1 (got {concurrency})")
        self.server = parse_server(server)
        self.label = describe_server(self.server)
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.concurrency = concurrency
        self._key = f"{config_key}." if config_key else ""
        self._timeout_setting = timeout_setting or f"{self._key}timeout_s"
        self._connect_timeout_setting = connect_timeout_setting or f"{self._key}connect_timeout_s"
        self._pending = 0  # tool calls submitted and not finished, from every thread (for ``_run_calls``)
        self._pending_lock = threading.Lock()
        self._gate: asyncio.Semaphore | None = None  # created on the loop: at most ``concurrency`` calls in flight
        self._env = dict(env or {})
        self._cwd = cwd
        self._tools: list[ToolSpec] | None = None
        self._client: Any = None
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="mcp-client-loop", daemon=True)
        self._rt = _Runtime(loop, thread)
        self._finalizer = weakref.finalize(self, self._rt.close)
        thread.start()
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------------ public API

    def list_tools(self, *, refresh: bool = False) -> list[ToolSpec]:
        """The server's tools (every page of its listing), fetched once and kept unless ``refresh``."""
        if self._tools is None or refresh:
            self._tools = self._run(self._list_tools(), self.timeout_s, "the tool listing")
        return list(self._tools)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The server's tools as OpenAI-style function schemas (``ToolSpec.function_schema``)."""
        return [tool.function_schema() for tool in self.list_tools()]

    def tool(self, name: str) -> ToolSpec:
        """One tool by name; a one-line error naming the server's tools when it has no such tool."""
        tools = self.list_tools()
        for spec in tools:
            if spec.name == name:
                return spec
        names = ", ".join(t.name for t in tools) or "none"
        raise MCPToolError(f"MCP server {self.label} has no tool {name!r} (its tools: {names})")

    def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> ToolResult:
        """Call one tool; its ``ToolResult`` (check ``is_error``: a tool's own failure is a result, not an error)."""
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        return self._run_calls(
            self._call(name, dict(arguments or {}), timeout), 1, timeout, f"a call of tool '{name}'"
        )

    def call_tools(
        self, calls: Sequence[tuple[str, Mapping[str, Any]]], *, timeout_s: float | None = None
    ) -> list[ToolResult]:
        """Several calls at once; results in the order of ``calls``. At most ``concurrency`` calls of this client are
        in flight, counting those of other threads; each call's timeout starts when it is sent. The first error
        raises (after every call has finished)."""
        if not calls:
            return []
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        return self._run_calls(self._call_many(list(calls), timeout), len(calls), timeout, f"{len(calls)} tool calls")

    def close(self) -> None:
        """End the session (and a stdio server's process). Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._rt.closed

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MCPClient({self.label!r}{', closed' if self.closed else ''})"

    # ------------------------------------------------------------------------------------------------ the session

    def _transport(self) -> Any:
        if isinstance(self.server, str):
            return self.server
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self._rt.stderr = _StderrTail()
        params = StdioServerParameters(command=self.server[0], args=self.server[1:], env=self._env, cwd=self._cwd)
        return stdio_client(params, errlog=self._rt.stderr.writer)

    def _connect(self) -> None:
        ready: Future = Future()
        self._rt.session = asyncio.run_coroutine_threadsafe(self._hold(ready), self._rt.loop)
        try:
            self._client = ready.result(self.connect_timeout_s + _BACKSTOP_S)
        except FutureTimeoutError:
            raise self._connect_error(TimeoutError()) from None
        except Exception as err:  # noqa: BLE001 - every way a start can fail becomes one line naming the fix
            raise self._connect_error(err) from None

    async def _hold(self, ready: Future) -> None:
        """The session's task: connect (within ``connect_timeout_s``), hand the client over, wait for ``close``."""
        import anyio
        from mcp import Client

        self._rt.stop = asyncio.Event()
        try:
            transport = self._transport()
            with anyio.fail_after(self.connect_timeout_s) as scope:
                async with Client(transport, read_timeout_seconds=self.timeout_s) as client:
                    scope.deadline = math.inf  # connected: the session lives until close()
                    if self._rt.stderr is not None:
                        self._rt.stderr.close_writer()
                    ready.set_result(client)
                    await self._rt.stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            else:
                self._rt.failure = err
            if not isinstance(err, Exception):
                raise
        finally:
            if self._rt.stderr is not None:
                self._rt.stderr.close_writer()

    def _run(self, coro: Any, timeout: float, what: str) -> Any:
        """Run a coroutine on the loop and wait for it (its own timeout fires first; this one is the backstop)."""
        if self._rt.closed:
            coro.close()
            raise MCPUnavailableError(f"the MCP client of {self.label} is closed; make a new one")
        future = asyncio.run_coroutine_threadsafe(coro, self._rt.loop)
        try:
            return future.result(timeout + _BACKSTOP_S)
        except FutureTimeoutError:
            if future.done():  # the coroutine's own MCPTimeoutError (a TimeoutError too): it names the late call
                return future.result()
            future.cancel()
            raise self._timeout_error(what, timeout) from None

    def _run_calls(self, coro: Any, n: int, timeout: float, what: str) -> Any:
        """``_run`` for ``n`` tool calls: the backstop allows for the calls of other threads queued before them."""
        with self._pending_lock:
            self._pending += n
            waves = math.ceil(self._pending / self.concurrency)
        try:
            return self._run(coro, timeout * waves, what)
        finally:
            with self._pending_lock:
                self._pending -= n

    async def _list_tools(self) -> list[ToolSpec]:
        client = self._live_client()
        tools: list[ToolSpec] = []
        cursor = None
        for _ in range(1000):  # a server whose pages never end cannot hang the listing
            page = await self._guard(client.list_tools(cursor=cursor), self.timeout_s, "the tool listing")
            tools += [ToolSpec(t.name, t.description or "", dict(t.input_schema)) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.concurrency)
        async with self._gate:  # the call's timeout starts once it is sent
            client = self._live_client()
            result = await self._guard(
                client.call_tool(name, arguments, read_timeout_seconds=timeout), timeout, f"a call of tool '{name}'"
            )
        blocks = tuple(block.text for block in result.content if getattr(block, "type", None) == "text")
        return ToolResult(blocks, bool(result.is_error), result.structured_content)

    async def _call_many(self, calls: list[tuple[str, Mapping[str, Any]]], timeout: float) -> list[ToolResult]:
        results = await asyncio.gather(*(self._call(n, dict(a), timeout) for n, a in calls), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return list(results)

    async def _guard(self, coro: Any, timeout: float, what: str) -> Any:
        """Await a request within ``timeout``; the mcp package's errors become ours, one line each."""
        import anyio
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            with anyio.fail_after(timeout):
                return await coro
        except TimeoutError:
            raise self._timeout_error(what, timeout) from None
        except MCPError as err:
            if err.code == REQUEST_TIMEOUT:
                raise self._timeout_error(what, timeout) from None
            if err.code == CONNECTION_CLOSED:
                raise self._stopped_error(err) from None
            raise MCPToolError(f"MCP server {self.label} refused {what}: {_one_line(err.message)}") from None
        except (MCPUnavailableError, MCPToolError):
            raise
        except Exception as err:  # noqa: BLE001 - a broken transport (closed stream, HTTP error)
            raise self._stopped_error(err) from None

    def _live_client(self) -> Any:
        session = self._rt.session
        if self._client is None or self._rt.failure is not None or session is None or session.done():
            raise self._stopped_error(self._rt.failure)
        return self._client

    # ------------------------------------------------------------------------------------------------ errors

    def _stderr_hint(self, wait_s: float = 0.0) -> str:
        line = self._rt.stderr.last(wait_s) if self._rt.stderr is not None else None
        return f"; its last words on stderr: {_one_line(line, 300)}" if line else ""

    def _timeout_error(self, what: str, timeout: float) -> MCPTimeoutError:
        return MCPTimeoutError(
            f"MCP server {self.label} did not answer {what} within {timeout:g} s; "
            f"check that it is working, or give it more time ({self._timeout_setting})"
        )

    def _stopped_error(self, err: BaseException | None) -> MCPUnavailableError:
        cause = f" ({_one_line(_describe(err))})" if err is not None else ""
        return MCPUnavailableError(
            f"MCP server {self.label} stopped or closed the connection{cause}{self._stderr_hint(wait_s=1.0)}; "
            f"restart it{' (a new client starts a stdio server again)' if isinstance(self.server, list) else ''}"
        )

    def _connect_error(self, err: BaseException) -> MCPUnavailableError:
        leaf = _leaf(err)
        fix = (
            f"fix {self._key}server (a command line, or a streamable-HTTP URL such as http://127.0.0.1:8001/mcp)"
            if self._key
            else "fix the server's command line or URL"
        )
        if isinstance(self.server, str):
            if isinstance(leaf, TimeoutError):
                return MCPTimeoutError(
                    f"MCP server {self.label} did not complete the MCP handshake within {self.connect_timeout_s:g} s; "
                    f"is an MCP server listening there (streamable HTTP, usually at /mcp)? Or {fix}"
                )
            return MCPUnavailableError(
                f"cannot reach the MCP server at {self.label} ({_one_line(_describe(leaf))}); start it (e.g. "
                f"`searchrl mcp serve --index DIR --http --port 8001`) or {fix}"
            )
        command = self.server[0]
        if isinstance(leaf, FileNotFoundError | PermissionError | NotADirectoryError):
            return MCPUnavailableError(
                f"cannot start the MCP server {self.label}: {command!r} is not an executable command "
                f"({type(leaf).__name__}); install it, use its full path, or {fix}"
            )
        said = self._stderr_hint(wait_s=1.0)
        if isinstance(leaf, TimeoutError):
            return MCPTimeoutError(
                f"MCP server {self.label} did not complete the MCP handshake within {self.connect_timeout_s:g} s"
                f"{said}; is it an MCP server on stdio? If it loads slowly, raise {self._connect_timeout_setting}"
            )
        return MCPUnavailableError(
            f"MCP server {self.label} exited or failed during the MCP handshake ({_one_line(_describe(leaf))})"
            f"{said}; run the command by hand to see why, or {fix}"
        )


def _leaf(err: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        inner = [e for e in err.exceptions if not isinstance(e, asyncio.CancelledError)]
        err = (inner or list(err.exceptions))[0]
    return err


def _describe(err: BaseException) -> str:
    leaf = _leaf(err)
    text = str(leaf).strip()
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
