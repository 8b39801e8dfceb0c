"""Our index as an MCP server (``searchrl mcp serve``) and ``MCPRetriever`` over it: an MCP round trip over stdio
(and streamable HTTP) against a tiny BM25 index, ``retrieval.kind: mcp`` from a config, the ``searchrl mcp``
commands, and how tool results become hits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

import searchrl  # noqa: E402
from searchrl.cli import app  # noqa: E402
from searchrl.config import ConfigError, load_config  # noqa: E402
from searchrl.retrieval.base import Hit  # noqa: E402
from searchrl.retrieval.index import load_index  # noqa: E402
from searchrl.retrieval.mcp import MCPRetriever, hits_of, parse_hits, query_argument, topk_argument  # noqa: E402
from searchrl.tools.mcp import MCPClient, MCPToolError, MCPUnavailableError, ToolResult  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SRC = str(Path(searchrl.__file__).resolve().parents[1])
#: the server process imports this checkout of searchrl (a stdio server inherits only a safe environment).
ENV = {"PYTHONPATH": SRC}
QUERIES = ["highest mountain Nepal", "radioactivity Nobel prizes", "board game squares"]


def serve_cmd(index: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "searchrl", "mcp", "serve", "--index", str(index), *extra]


@pytest.fixture(scope="module")
def ours(tiny_bm25: Path):
    with MCPClient(serve_cmd(tiny_bm25), env=ENV, timeout_s=30, connect_timeout_s=120) as client:
        yield client


def _triples(hits: list[list[Hit]]) -> list[list[tuple[str, str, str]]]:
    return [[(h.id, h.title, h.text) for h in row] for row in hits]


def test_our_server_lists_a_search_tool_taking_queries(ours: MCPClient) -> None:
    [schema] = ours.tool_schemas()
    assert schema["type"] == "function" and schema["function"]["name"] == "search"
    params = schema["function"]["parameters"]
    assert params["properties"]["queries"]["type"] == "array"
    assert params["properties"]["queries"]["items"] == {"type": "string"}
    assert "topk" in params["properties"] and params["required"] == ["queries"]


def test_a_search_call_answers_json_hits_per_query(ours: MCPClient, tiny_bm25: Path) -> None:
    result = ours.call_tool("search", {"queries": QUERIES[:2], "topk": 2})
    assert not result.is_error
    rows = json.loads(result.text)
    assert len(rows) == 2  # one list per query (BM25 leaves out passages sharing no term with the query)
    assert rows[0][0]["title"] == "Mount Everest" and rows[1][0]["title"] == "Marie Curie"
    local = load_index(tiny_bm25).search(QUERIES[:2], 2)
    assert [[(d["id"], d["title"], d["text"]) for d in r] for r in rows] == _triples(local)
    assert rows[0][0]["score"] == pytest.approx(local[0][0].score)


def test_the_retriever_returns_what_the_local_index_returns(ours: MCPClient, tiny_bm25: Path) -> None:
    retriever = MCPRetriever(ours)
    assert (retriever.query_arg, retriever.as_list, retriever.topk_arg) == ("queries", True, "topk")
    queries = [*QUERIES, QUERIES[0]]
    hits = retriever.search(queries, 2)
    expected = load_index(tiny_bm25).search(queries, 2)
    assert _triples(hits) == _triples(expected)
    assert [h.score for h in hits[1]] == pytest.approx([h.score for h in expected[1]])
    assert retriever.calls == 3  # one call per distinct query
    assert retriever.search(queries[:1], 2) == hits[:1] and retriever.calls == 3  # the cache answers a repeat
    assert [h.title for h in retriever.search(["Nepal China border mountain"], 1)[0]] == ["Mount Everest"]


def test_requests_beyond_the_limits_are_clear_tool_errors(ours: MCPClient) -> None:
    with pytest.raises(MCPToolError, match="topk=1000 is out of range; give 1 to 100"):
        MCPRetriever(ours).search(["jazz"], 1000)
    empty = ours.call_tool("search", {"queries": ["   "]})
    assert empty.is_error and "a query is empty" in empty.text
    assert ours.call_tool("search", {"queries": []}).is_error


def test_retrieval_kind_mcp_from_a_config(tiny_bm25: Path) -> None:
    with pytest.raises(ConfigError, match="retrieval.kind=mcp needs retrieval.mcp.server"):
        load_config(None, ["retrieval.kind=mcp"])
    with pytest.raises(ConfigError, match="retrieval.mcp.server is empty"):
        load_config(None, ["retrieval.kind=mcp", 'retrieval.mcp.server=""'])
    from searchrl.pipeline import make_retriever_for

    overrides = [
        "retrieval.kind=mcp",
        f"retrieval.mcp.server={json.dumps(serve_cmd(tiny_bm25))}",
        f"retrieval.mcp.env={json.dumps(ENV)}",
        "retrieval.mcp.connect_timeout_s=120",
        "retrieval.timeout_s=30",
    ]
    cfg = load_config(None, overrides)
    with make_retriever_for(cfg) as retriever:
        assert isinstance(retriever, MCPRetriever) and retriever.client.timeout_s == 30
        assert [h.title for h in retriever.search(["jazz New Orleans"], 1)[0]] == ["Jazz"]


def test_a_missing_index_is_reported_with_the_servers_words(tmp_path: Path) -> None:
    with pytest.raises(MCPUnavailableError) as err:
        MCPClient(serve_cmd(tmp_path / "no-index"), env=ENV, connect_timeout_s=120)
    message = str(err.value)
    assert "\n" not in message and "index directory not found" in message


def test_streamable_http_transport(tiny_bm25: Path) -> None:
    env = {**os.environ, **ENV}
    proc = subprocess.Popen(serve_cmd(tiny_bm25, "--http", "--port", "0"), env=env, stderr=subprocess.PIPE, text=True)
    try:
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server exited before serving"
            if "serving MCP" in line:
                url = line.split(" on ")[-1].strip()
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        foreign = httpx.post(url, json={}, headers={"Host": "attacker.example"}, timeout=30)
        assert foreign.status_code == 421  # on loopback: loopback host names only (DNS rebinding)
        with MCPClient(url, connect_timeout_s=60) as client:
            assert [t.name for t in client.list_tools()] == ["search"]
            hits = MCPRetriever(client).search(["radioactivity"], 1)
        assert [h.title for h in hits[0]] == ["Marie Curie"]
    finally:
        proc.terminate()
        rc = proc.wait(30)
    assert rc == 0  # SIGTERM: a graceful shutdown


def test_http_transport_answers_only_the_allowed_host_names(tiny_bm25: Path) -> None:
    """DNS rebinding, as `searchrl serve`: on loopback, loopback names and --allowed-host ones; a foreign browser
    Origin is refused too."""
    from starlette.testclient import TestClient

    from searchrl.retrieval.asgi import allowed_hosts
    from searchrl.retrieval.mcp_server import create_mcp_server, http_app

    client_info = {"name": "test", "version": "0"}
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    accept = {"Accept": "application/json, text/event-stream"}
    server = create_mcp_server(load_index(tiny_bm25))
    app = http_app(server, allowed_hosts=allowed_hosts("127.0.0.1", ["search.lan"]))
    with TestClient(app, base_url="http://127.0.0.1:8001") as client:
        answered = {}
        for host in ("127.0.0.1:8001", "localhost:8001", "[::1]:8001", "search.lan:8001", "attacker.example:8001"):
            answered[host] = client.post("/mcp", json=init, headers={**accept, "Host": host}).status_code
        origin = {**accept, "Origin": "http://attacker.example"}
        assert client.post("/mcp", json=init, headers=origin).status_code == 403
    assert answered == {
        "127.0.0.1:8001": 200,
        "localhost:8001": 200,
        "[::1]:8001": 200,
        "search.lan:8001": 200,
        "attacker.example:8001": 421,
    }


def test_cli_lists_and_calls_tools(tiny_bm25: Path) -> None:
    server = f"env PYTHONPATH={SRC} " + " ".join(serve_cmd(tiny_bm25))
    res = CliRunner().invoke(app, ["mcp", "tools", "--server", server])
    assert res.exit_code == 0, res.output
    assert [s["function"]["name"] for s in json.loads(res.stdout)] == ["search"]
    args = json.dumps({"queries": ["Guido van Rossum"], "topk": 1})
    res = CliRunner().invoke(app, ["mcp", "call", "search", "--server", server, "--args", args])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0][0]["title"] == "Python (programming language)"


# ------------------------------------------------------------------------------------------------ no server


def test_tool_results_become_hits() -> None:
    assert parse_hits('[{"id": "7", "title": "T", "text": "body", "score": 2}]') == [Hit("7", "T", "body", 2.0)]
    # Search-R1's layout: a document under "document", its title on the first line of "contents"
    assert parse_hits('[[{"document": {"id": "3", "contents": "\\"Jazz\\"\\nJazz began."}, "score": 1.5}]]') == [
        Hit("3", "Jazz", "Jazz began.", 1.5)
    ]
    assert parse_hits('{"results": [{"url": "https://a.example", "snippet": "s"}, "plain"]}') == [
        Hit("https://a.example", "", "s", 0.0),
        Hit("", "", "plain", 0.0),
    ]
    assert parse_hits("Everest is 8,849 m high.") == [Hit("", "", "Everest is 8,849 m high.", 0.0)]
    assert parse_hits('{"answer": 42}') == [Hit("", "", '{"answer": 42}', 0.0)]
    assert parse_hits('{"title": "Jazz", "content": "Jazz began."}') == [Hit("", "Jazz", "Jazz began.", 0.0)]
    assert parse_hits("  ") == []
    assert parse_hits('"Everest is 8,849 m high."') == [Hit("", "", "Everest is 8,849 m high.", 0.0)]  # a JSON string
    assert parse_hits('"  "') == []
    assert parse_hits('[{"id": 0, "text": "a"}, {"id": "", "url": "https://b.example", "text": "b"}]') == [
        Hit("0", "", "a", 0.0),  # id 0 is an id
        Hit("https://b.example", "", "b", 0.0),
    ]
    # a tool that answers one text block per document
    blocks = ToolResult(('{"title": "A", "text": "a"}', '{"title": "B", "text": "b"}'))
    assert hits_of(blocks) == [Hit("", "A", "a", 0.0), Hit("", "B", "b", 0.0)]
    with pytest.raises(ValueError, match="document 0 has no text"):
        parse_hits('[{"id": "1"}]')


def test_argument_detection_from_the_schema() -> None:
    array = {"type": "array", "items": {"type": "string"}}
    assert query_argument({"properties": {"queries": array, "topk": {"type": "integer"}}}) == ("queries", True)
    assert query_argument({"properties": {"query": {"type": "string"}, "n": {"type": "integer"}}}) == ("query", False)
    assert query_argument({"properties": {"q": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}) == ("q", False)
    assert query_argument({"properties": {"terms": array}}) == ("terms", True)
    assert query_argument({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}}, "b") == ("b", False)
    with pytest.raises(ValueError, match="name it in retrieval.mcp.query_arg"):
        query_argument({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
    assert topk_argument({"properties": {"query": {}, "max_results": {"type": "integer"}}}) == "max_results"
    assert topk_argument({"properties": {"query": {}, "k": {"type": "string"}}}) is None
    assert topk_argument({"properties": {"limit": {"type": "integer"}}}, "limit") == "limit"
    with pytest.raises(ValueError, match="fix retrieval.mcp.topk_arg"):
        topk_argument({"properties": {"query": {}}}, "limit")
