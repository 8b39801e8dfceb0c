"""The synchronous MCP client against a small third-party-style MCP server started by the test (stdio transport):
tools as function schemas, tool calls and their errors, timeouts, a crashing server, bad commands, clean shutdown;
and ``MCPRetriever`` over a plain-text ``lookup(query)`` tool (argument auto-detection, plain-text hits)."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

from searchrl.cli import app  # noqa: E402
from searchrl.config import MCPConfig  # noqa: E402
from searchrl.retrieval.base import Hit  # noqa: E402
from searchrl.retrieval.mcp import MCPRetriever  # noqa: E402
from searchrl.tools.mcp import (  # noqa: E402
    MCPClient,
    MCPTimeoutError,
    MCPToolError,
    MCPUnavailableError,
    parse_server,
    tool_schemas,
)

pytestmark = pytest.mark.timeout(180)

#: a minimal MCP server, as a third party would write one with the mcp package.
NOTES_SERVER = '''
import os, sys, time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if os.environ.get("NOTES_PID_FILE"):
    Path(os.environ["NOTES_PID_FILE"]).write_text(str(os.getpid()))
if os.environ.get("NOTES_PID_LOG"):  # every server started, one pid a line
    with open(os.environ["NOTES_PID_LOG"], "a") as log:
        print(os.getpid(), file=log)
app = MCPServer("notes", log_level="WARNING")


@app.tool()
def lookup(query: str) -> str:
    """Look a phrase up in the notes."""
    if query == "boom":
        raise ToolError("the notes are locked")
    if query == "slow":
        time.sleep(20)
    if query == "die":
        print("notes server: fatal: out of ink", file=sys.stderr, flush=True)
        os._exit(1)
    if query == "die once" and not Path(os.environ["NOTES_DIED"]).exists():
        Path(os.environ["NOTES_DIED"]).touch()
        time.sleep(0.5)  # the other searches' calls are in flight when it dies
        os._exit(1)
    if query.startswith("nap"):
        time.sleep(1.5)
    return f"Notes on {query}: nothing but plain text."


@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    app.run()
'''

#: a server whose async tool reports the most calls it has had in flight at once.
GAUGE_SERVER = '''
import anyio
from mcp.server.mcpserver import MCPServer

app = MCPServer("gauge", log_level="WARNING")
state = {"now": 0, "most": 0}


@app.tool()
async def search(query: str) -> str:
    """How many calls were in flight at most."""
    state["now"] += 1
    state["most"] = max(state["most"], state["now"])
    await anyio.sleep(0.2)
    state["now"] -= 1
    return str(state["most"])


if __name__ == "__main__":
    app.run()
'''


@pytest.fixture(scope="module")
def notes_cmd(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("notes") / "notes_server.py"
    path.write_text(NOTES_SERVER)
    return [sys.executable, str(path)]


@pytest.fixture(scope="module")
def notes(notes_cmd: list[str]):
    with MCPClient(notes_cmd, timeout_s=20, connect_timeout_s=120) as client:
        yield client


def test_tools_are_listed_as_function_schemas(notes: MCPClient, notes_cmd: list[str]) -> None:
    schemas = {s["function"]["name"]: s for s in notes.tool_schemas()}
    assert set(schemas) == {"lookup", "add"}
    lookup = schemas["lookup"]
    assert lookup["type"] == "function" and lookup["function"]["description"] == "Look a phrase up in the notes."
    params = lookup["function"]["parameters"]
    assert params["type"] == "object" and params["properties"]["query"]["type"] == "string"
    assert params["required"] == ["query"]
    # the plug-in point for a chat template's tool list: the same schemas from a command line, in one call
    assert tool_schemas(" ".join(notes_cmd), connect_timeout_s=120) == notes.tool_schemas()


def test_a_call_returns_its_text_and_a_tool_failure_is_flagged(notes: MCPClient) -> None:
    added = notes.call_tool("add", {"a": 2, "b": 3})
    assert added.text == "5" and not added.is_error
    failed = notes.call_tool("lookup", {"query": "boom"})
    assert failed.is_error and "the notes are locked" in failed.text
    assert notes.call_tool("lookup", {"q": "x"}).is_error  # arguments the schema rejects
    with pytest.raises(MCPToolError, match=r"has no tool 'nope' \(its tools: lookup, add\)"):
        notes.tool("nope")


def test_calls_run_concurrently_in_order(notes: MCPClient) -> None:
    words = [f"w{i}" for i in range(6)]
    t0 = time.perf_counter()
    results = notes.call_tools([("lookup", {"query": w}) for w in words])
    assert [r.text for r in results] == [f"Notes on {w}: nothing but plain text." for w in words]
    assert time.perf_counter() - t0 < 20


def test_a_slow_call_times_out_and_the_session_survives(notes: MCPClient) -> None:
    t0 = time.perf_counter()
    with pytest.raises(MCPTimeoutError) as err:
        notes.call_tool("lookup", {"query": "slow"}, timeout_s=0.5)
    assert time.perf_counter() - t0 < 5
    message = str(err.value)
    assert "\n" not in message and "within 0.5 s" in message and "timeout_s" in message
    assert isinstance(err.value, TimeoutError) and isinstance(err.value, ConnectionError)
    assert notes.call_tool("add", {"a": 1, "b": 1}).text == "2"


def test_a_late_call_in_a_batch_is_named_with_its_own_timeout(notes: MCPClient) -> None:
    calls = [("lookup", {"query": "slow"}), ("lookup", {"query": "quick"})]
    with pytest.raises(MCPTimeoutError) as err:
        notes.call_tools(calls, timeout_s=0.5)
    message = str(err.value)  # the call that was late and its timeout, not the batch's backstop
    assert "\n" not in message and "did not answer a call of tool 'lookup' within 0.5 s" in message


def test_errors_name_the_settings_that_fix_them(notes_cmd: list[str]) -> None:
    cfg = MCPConfig(server=notes_cmd, tool="lookup", connect_timeout_s=120)
    with MCPRetriever.from_config(cfg, timeout_s=0.5) as retriever:
        with pytest.raises(MCPTimeoutError) as err:
            retriever.search(["slow"], 1)
        assert "(retrieval.timeout_s)" in str(err.value)  # the call's timeout: there is no retrieval.mcp.timeout_s
        with pytest.raises(
            MCPToolError, match=r"has no tool 'nope' \(its tools: lookup, add\); fix retrieval.mcp.tool"
        ):
            MCPRetriever(retriever.client, tool="nope")
    # `searchrl mcp` has one --timeout for both
    never = shlex.join([sys.executable, "-c", "import time; time.sleep(60)"])
    res = CliRunner().invoke(app, ["mcp", "tools", "--server", never, "--timeout", "1"])
    assert isinstance(res.exception, MCPTimeoutError) and "raise --timeout" in str(res.exception)


def test_calls_from_several_threads_share_one_concurrency_bound(tmp_path: Path) -> None:
    path = tmp_path / "gauge_server.py"
    path.write_text(GAUGE_SERVER)
    with MCPClient([sys.executable, str(path)], concurrency=2, connect_timeout_s=120) as client:
        with ThreadPoolExecutor(3) as pool:
            batches = list(pool.map(lambda i: client.call_tools([("search", {"query": f"{i}"})] * 3), range(3)))
    assert max(int(r.text) for batch in batches for r in batch) == 2


def test_plain_text_tool_through_the_retriever_detects_its_query_argument(notes: MCPClient) -> None:
    retriever = MCPRetriever(notes, tool="lookup")
    assert (retriever.query_arg, retriever.as_list, retriever.topk_arg) == ("query", False, None)
    hits = retriever.search(["tides", "moon", "tides"], 3)
    assert hits == [
        [Hit("", "", "Notes on tides: nothing but plain text.", 0.0)],
        [Hit("", "", "Notes on moon: nothing but plain text.", 0.0)],
        [Hit("", "", "Notes on tides: nothing but plain text.", 0.0)],
    ]
    assert retriever.calls == 2  # one call per distinct query
    with pytest.raises(MCPToolError, match="tool 'lookup' failed for query 'boom': .*the notes are locked"):
        retriever.search(["boom"], 3)
    with pytest.raises(ValueError, match="cannot tell which argument of the tool takes the query"):
        MCPRetriever(notes, tool="add")
    with pytest.raises(ValueError, match=r"no argument 'text' \(its arguments: query\)"):
        MCPRetriever(notes, tool="lookup", query_arg="text")


def test_a_crashing_server_gives_one_line_with_its_last_words(notes_cmd: list[str], tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    client = MCPClient(notes_cmd, timeout_s=20, connect_timeout_s=120, env={"NOTES_PID_FILE": str(pid_file)})
    pid = int(pid_file.read_text())
    with pytest.raises(MCPUnavailableError) as err:
        client.call_tool("lookup", {"query": "die"})
    message = str(err.value)
    assert "\n" not in message and "stopped" in message and "out of ink" in message
    t0 = time.perf_counter()
    with pytest.raises(MCPUnavailableError, match="stopped"):  # fails at once, not after a timeout
        client.call_tool("add", {"a": 1, "b": 1})
    assert time.perf_counter() - t0 < 3
    client.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_retriever_starts_a_stopped_server_again_once_per_search(notes_cmd: list[str]) -> None:
    def connect() -> MCPClient:
        return MCPClient(notes_cmd, timeout_s=20, connect_timeout_s=120)

    with MCPRetriever(connect(), tool="lookup", reconnect=connect) as retriever:
        with pytest.raises(MCPUnavailableError, match="out of ink"):  # dies again after the one restart
            retriever.search(["die"], 1)
        assert retriever.reconnects == 1
        assert retriever.search(["calm"], 1)[0][0].text.startswith("Notes on calm")  # a fresh server answers
        assert retriever.reconnects == 2 and not retriever.client.closed
    assert retriever.client.closed


def test_searches_in_several_threads_start_a_stopped_server_once(notes_cmd: list[str], tmp_path: Path) -> None:
    pid_log = tmp_path / "pids"
    env = {"NOTES_PID_LOG": str(pid_log), "NOTES_DIED": str(tmp_path / "died")}

    def connect() -> MCPClient:
        return MCPClient(notes_cmd, timeout_s=20, connect_timeout_s=120, env=env)

    retriever = MCPRetriever(connect(), tool="lookup", reconnect=connect)
    try:
        queries = ["die once", "nap 1", "nap 2", "nap 3"]
        with ThreadPoolExecutor(4) as pool:  # as rollout.continuous runs its retriever calls
            hits = list(pool.map(lambda q: retriever.search([q], 1), queries))
        assert [h[0][0].text for h in hits] == [f"Notes on {q}: nothing but plain text." for q in queries]
        assert retriever.reconnects == 1
    finally:
        retriever.close()
    pids = [int(line) for line in pid_log.read_text().split()]
    assert len(pids) == 2
    for pid in pids:  # no server outlives the retriever
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(MCPUnavailableError, match="is closed"):  # a closed retriever does not start one again
        retriever.search(["calm"], 1)
    assert retriever.reconnects == 1 and len(pid_log.read_text().split()) == 2


def test_close_ends_the_server_process(notes_cmd: list[str], tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with MCPClient(notes_cmd, connect_timeout_s=120, env={"NOTES_PID_FILE": str(pid_file)}) as client:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)  # alive while connected
    assert client.closed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    client.close()  # idempotent
    with pytest.raises(MCPUnavailableError, match="is closed"):
        client.call_tool("add", {"a": 1, "b": 1})


def test_a_command_that_does_not_exist() -> None:
    with pytest.raises(MCPUnavailableError) as err:
        MCPClient(["no-such-mcp-server-xyz", "--flag"], config_key="retrieval.mcp")
    message = str(err.value)
    assert "\n" not in message and "'no-such-mcp-server-xyz' is not an executable command" in message
    assert "retrieval.mcp.server" in message


def test_a_command_that_exits_at_once_is_quoted() -> None:
    with pytest.raises(MCPUnavailableError) as err:
        MCPClient([sys.executable, "-c", "import sys; sys.exit('cannot open the notes database')"])
    message = str(err.value)
    assert "\n" not in message and "handshake" in message and "cannot open the notes database" in message


def test_a_command_that_never_speaks_mcp_times_out() -> None:
    t0 = time.perf_counter()
    with pytest.raises(MCPTimeoutError) as err:
        MCPClient([sys.executable, "-c", "import time; time.sleep(60)"], connect_timeout_s=1, config_key="x.mcp")
    assert time.perf_counter() - t0 < 15
    message = str(err.value)
    assert "\n" not in message and "within 1 s" in message and "x.mcp.connect_timeout_s" in message


def test_an_unreachable_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    with pytest.raises(MCPUnavailableError) as err:
        MCPClient(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=20)
    assert "\n" not in str(err.value) and "cannot reach the MCP server" in str(err.value)


def test_server_specs() -> None:
    assert parse_server("python -m notes --db 'my notes.db'") == ["python", "-m", "notes", "--db", "my notes.db"]
    assert parse_server(["python", "server.py"]) == ["python", "server.py"]
    assert parse_server(" http://127.0.0.1:8001/mcp ") == "http://127.0.0.1:8001/mcp"
    for empty in ("", "  ", []):
        with pytest.raises(ValueError, match="no MCP server given"):
            parse_server(empty)
    with pytest.raises(ValueError, match="timeouts must be > 0"):
        MCPClient(["x"], timeout_s=0)
