"""docs/extending.md's Python blocks run as written: the first four make a plugin file, the "From Python" block
evaluates with it on the bundled model, against a local stand-in for the example's search endpoint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

import searchrl

DOC = Path(searchrl.__file__).resolve().parents[2] / "docs" / "extending.md"
PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
ENDPOINT = "https://search.example.org"
pytestmark = pytest.mark.slow  # loads the bundled model


class _Search(BaseHTTPRequestHandler):
    """The API the doc's retriever calls: GET ?q=..&n=.. with a `key` header -> [{id, title, text, score}]."""

    def do_GET(self) -> None:  # noqa: N802 -- the http.server hook's name
        args = parse_qs(urlparse(self.path).query)
        assert self.headers["key"] == "secret"
        rows = [
            {
                "id": "d1",
                "title": "Robert F. Hill",
                "text": "The Face in the Fog was directed by Robert F. Hill.",
                "score": 1.0,
            }
        ][: int(args["n"][0])]
        body = json.dumps(rows).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_the_docs_python_blocks_make_a_plugin_that_the_python_example_evaluates_with(tmp_path: Path) -> None:
    blocks = PYTHON.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 5, "the protocol, retriever, method and algorithm blocks, then 'From Python'"
    (tmp_path / "my_ext.py").write_text("\n\n".join(blocks[:4]))
    assert ENDPOINT in blocks[4]
    (tmp_path / "my_questions.jsonl").write_text(
        json.dumps({"query_text": "Who directed The Face in the Fog?", "gold": ["Robert F. Hill"]}) + "\n"
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Search)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = blocks[4].replace(ENDPOINT, f"http://127.0.0.1:{server.server_port}/search")
    script += "\nprint('ROWS', [(r['method'], r['em']) for r in result.rows])\n"
    env = {**os.environ, "MY_KEY": "secret", "HF_HUB_OFFLINE": "1", "SEARCHRL_NO_PROGRESS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    rows = dict(eval(done.stdout.split("ROWS", 1)[1].strip()))  # noqa: S307 -- our own print of a list of tuples
    assert rows["top_title"] == 1.0 and set(rows) == {"naive_rag", "top_title"}
    assert (tmp_path / "runs" / "my_eval" / "summary.md").exists()
