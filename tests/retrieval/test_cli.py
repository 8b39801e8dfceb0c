"""``searchrl index build|info`` and ``searchrl serve`` as a user runs them."""

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

from searchrl.cli import app
from searchrl.retrieval.index import IndexMismatchError

runner = CliRunner()


def test_index_build_and_info(tiny_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    res = runner.invoke(app, ["index", "build", "--corpus", str(tiny_corpus), "--kind", "bm25", "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["index", "info", str(out), "--corpus", str(tiny_corpus)])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["kind"] == "bm25" and info["counts"]["passages"] == 12 and info["corpus_check"].startswith("ok")
    res = runner.invoke(app, ["index", "build", "--corpus", str(tiny_corpus), "--out", str(out)])
    assert isinstance(res.exception, ValueError) and "--force" in str(res.exception)
    res = runner.invoke(
        app,
        [
            "index",
            "build",
            "--corpus",
            str(tiny_corpus),
            "--out",
            str(out),
            "--force",
            "--stemmer",
            "none",
            "--stopwords",
            "none",
        ],
    )
    assert res.exit_code == 0 and json.loads((out / "manifest.json").read_text())["options"]["bm25"]["stemmer"] is None


def test_index_info_refuses_another_corpus(tiny_bm25: Path, tmp_path: Path) -> None:
    other = tmp_path / "c.jsonl"
    other.write_text('{"id": "1", "contents": "T\\nx"}\n')
    res = runner.invoke(app, ["index", "info", str(tiny_bm25), "--corpus", str(other)])
    assert isinstance(res.exception, IndexMismatchError)


def test_searchrl_serve_answers_search_r1_requests(tiny_bm25: Path, unused_port: int) -> None:
    """The real command in a subprocess: starts on loopback, answers /retrieve, exits on SIGTERM."""
    port = unused_port
    exe = Path(sys.executable).with_name("searchrl")
    proc = subprocess.Popen(
        [str(exe), "serve", "--index", str(tiny_bm25), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"SEARCHRL_NO_PROGRESS": "1"},
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                resp = httpx.post(
                    f"http://127.0.0.1:{port}/retrieve", json={"queries": ["chess"], "topk": 1}, timeout=5
                )
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.time() < deadline, "searchrl serve did not start within 60 s"
                time.sleep(0.1)
        assert resp.status_code == 200
        assert resp.json()["result"][0][0]["contents"].startswith("Chess\n")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "serving on http://127.0.0.1" in proc.stderr.read().decode()


def test_serve_rejects_missing_index(tmp_path: Path) -> None:
    res = runner.invoke(app, ["serve", "--index", str(tmp_path / "none")])
    assert isinstance(res.exception, FileNotFoundError) and "searchrl index build" in str(res.exception)


def test_ask_takes_the_recipes_rollout_limits_protocol_and_model(tiny_bm25: Path, monkeypatch) -> None:
    """`searchrl ask --recipe R` rolls out with R's limits (not limits of its own), R's protocol and policy; a flag
    replaces one value; --index points the retriever at that index (its kind from its manifest)."""
    from searchrl.config import load_config
    from searchrl.rollout.engine import RolloutLimits

    seen: dict = {}

    class Stop(Exception):
        pass

    def engine(generator, retriever, protocol, limits, style):
        seen.update(limits=limits, protocol=type(protocol).__name__, kind=retriever.manifest["kind"])
        raise Stop

    monkeypatch.setattr("searchrl.rollout.engine.RolloutEngine", engine)
    monkeypatch.setattr("searchrl.models.load_policy", lambda spec, **kw: (seen.setdefault("policy", spec), None))
    monkeypatch.setattr("searchrl.generation.hf.HFGenerator", lambda model, tok: None)
    res = CliRunner().invoke(
        app,
        [
            "ask",
            "Q?",
            "--recipe",
            "r1_searcher_stage1",
            "--profile",
            "laptop",
            "--index",
            str(tiny_bm25),
            "--max-turns",
            "2",
        ],
    )
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    cfg = load_config("r1_searcher_stage1", ["rollout.max_turns=2"], "laptop")
    assert seen["limits"] == RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    assert seen["protocol"] == "R1SearcherProtocol" and seen["policy"] == cfg.model.policy and seen["kind"] == "bm25"


def test_ask_with_an_index_directory_holding_none_names_the_build(tmp_path: Path) -> None:
    """A mistyped --index fails before any model loads instead of building an index of the recipe's corpus there."""
    res = CliRunner().invoke(app, ["ask", "Q?", "--index", str(tmp_path / "typo")])
    assert isinstance(res.exception, FileNotFoundError) and "holds no index" in str(res.exception)
    assert not (tmp_path / "typo").exists()


def test_ask_and_models_fetch_name_an_unfetchable_hub_model_in_one_line(tmp_path: Path, monkeypatch) -> None:
    """Offline, an uncached hub id fails before any model load (ask) or download (models fetch), in one line."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = CliRunner().invoke(app, ["ask", "Q?", "--model", "org-nope/model-x", "--index", str(tmp_path)])
    assert "cannot be fetched here" in str(res.exception) and "smollm2-135m-instruct" in str(res.exception)
    res = CliRunner().invoke(app, ["models", "fetch", "org-nope/model-x"])
    assert isinstance(res.exception, ValueError) and str(res.exception).startswith("cannot download org-nope/model-x")


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--port", "70000"],
        ["serve", "--topk", "0"],
        ["serve", "--max-queries", "0"],
        ["mcp", "serve", "--max-topk", "0"],
    ],
)
def test_servers_refuse_a_port_or_limit_that_cannot_work_at_start(tmp_path: Path, args: list[str]) -> None:
    """A port past 65535 or a limit of 0 is refused by the option itself, before any index loads."""
    res = CliRunner().invoke(app, [*args, "--index", str(tmp_path)])
    assert res.exit_code == 2 and "Invalid value for" in res.output


def test_a_corpus_given_as_the_index_is_never_offered_as_a_build_target(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl.gz"
    corpus.write_bytes(b"")
    res = CliRunner().invoke(app, ["serve", "--index", str(corpus)])
    msg = str(res.exception)
    assert "is a file, not an index directory" in msg and f"--out {tmp_path / 'corpus-bm25'}" in msg
