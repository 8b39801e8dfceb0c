"""`searchrl ask` against a running retrieval service gives the same trajectory as against the local index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.data.synth import generate_world, write_world
from searchrl.retrieval import build_index, load_index
from searchrl.retrieval.server import create_app


def _strip_timings(d: dict) -> dict:
    for turn in d["turns"]:
        turn["timings"] = {}
    return d


@pytest.mark.slow
def test_ask_remote_equals_local(tmp_path: Path, serve_app) -> None:
    write_world(generate_world(150, seed=5), tmp_path)
    index = build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "bm25")
    question = json.loads((tmp_path / "dev.jsonl").read_text().splitlines()[0])["question"]
    common = [
        "ask",
        question,
        "--json",
        "--temperature",
        "0.8",
        "--seed",
        "3",
        "--max-new-tokens",
        "48",
        "--max-turns",
        "2",
    ]
    runner = CliRunner()
    local = runner.invoke(app, [*common, "--index", str(index)])
    assert local.exit_code == 0, local.output
    with serve_app(create_app(load_index(index))) as url:
        remote = runner.invoke(app, [*common, "--url", url])
    assert remote.exit_code == 0, remote.output
    rec_a, rec_b = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (local, remote))
    assert rec_a["source"] == rec_b["source"] == "ask"  # the one trajectory record format
    a, b = _strip_timings(rec_a["trajectory"]), _strip_timings(rec_b["trajectory"])
    assert a["response_ids"] and a == b


def test_engine_remote_equals_local_with_searches(tmp_path: Path, serve_app) -> None:
    """The same scripted searches through a RemoteRetriever and the local index give identical trajectories."""
    from searchrl.data.loaders import load_qa
    from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
    from searchrl.protocols import get_protocol
    from searchrl.retrieval.client import RemoteRetriever
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits

    write_world(generate_world(150, seed=5), tmp_path)
    index = build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "bm25")
    examples = load_qa(tmp_path / "dev.jsonl", limit=6)
    protocol = get_protocol("search_r1")

    def script(ctx: str) -> str:
        if "Doc 1(Title:" in ctx:
            return protocol.format_answer("done")
        return protocol.format_search([ctx.split("Question:")[-1].strip()])

    def run(retriever):
        engine = RolloutEngine(
            ScriptedGenerator(ByteTokenizer(), script),
            retriever,
            protocol,
            RolloutLimits(max_obs_tokens=4000, max_total_tokens=20000),
        )
        return [_strip_timings(t.to_dict()) for t in engine.run(examples, group_size=2)]

    local = run(load_index(index))
    with serve_app(create_app(load_index(index))) as url:
        remote = run(RemoteRetriever([url]))
    assert all(t["turns"][0]["hit_ids"][0] for t in local)
    assert local == remote
