"""``searchrl ask`` and ``searchrl eval`` given a trained model's directory run it as it was trained: the protocol,
prompt style, documents per search and rollout limits its ``searchrl.json`` records are their defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl import pipeline
from searchrl.cli import app
from searchrl.commands.eval import build_config
from searchrl.config import load_config
from searchrl.protocols import PROTOCOLS, get_protocol
from searchrl.rollout.agent_file import AGENT_FILE, AGENT_SETTINGS, agent_record


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """A model directory saved by a run of ``rag_r1`` (multi-query option, its own limits) with topk 5."""
    cfg = load_config("rag_r1", ["retrieval.topk=5", "rollout.max_turns=6"])
    out = tmp_path / "final"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / AGENT_FILE).write_text(json.dumps(agent_record(cfg, get_protocol("rag_r1", multi_query=True), None)))
    return out


def _rollout(cfg) -> dict:
    dumped = cfg.model_dump(mode="json")
    return {key: dumped[key.split(".")[0]][key.split(".")[1]] for key in AGENT_SETTINGS}


def test_eval_of_a_trained_model_takes_its_recorded_settings(trained: Path) -> None:
    cfg = build_config(None, [], data=["q.jsonl"], methods="agent", model=str(trained))
    assert _rollout(cfg) == _rollout(load_config("rag_r1", ["retrieval.topk=5", "rollout.max_turns=6"]))
    assert cfg.rollout.options == {"multi_query": True} and cfg.retrieval.topk == 5
    # flags and --set still win
    cfg = build_config(None, ["rollout.max_turns=2"], data=["q.jsonl"], methods="agent", model=str(trained), topk=2)
    assert cfg.retrieval.topk == 2 and cfg.rollout.max_turns == 2 and cfg.rollout.protocol == "rag_r1"
    # another protocol leaves the recorded one's options out
    cfg = build_config(None, [], data=["q.jsonl"], methods="agent", model=str(trained), protocol="search_r1")
    assert cfg.rollout.protocol == "search_r1" and cfg.rollout.options == {} and cfg.retrieval.topk == 5


def test_with_a_recipe_its_settings_hold_and_another_protocol_is_noted(trained: Path, capsys) -> None:
    cfg = build_config("demo", [], data=["q.jsonl"], methods="agent", model=str(trained))
    assert cfg.rollout.protocol == "search_r1" and cfg.retrieval.topk == 3
    assert "was trained with protocol rag_r1, not the search_r1" in capsys.readouterr().err


def test_ask_with_a_trained_model_takes_its_recorded_settings(trained: Path, monkeypatch) -> None:
    seen = []

    class Seen(Exception):
        pass

    def capture(cfg, **kwargs):
        seen.append(cfg)
        raise Seen

    monkeypatch.setattr(pipeline, "make_retriever_for", capture)
    res = CliRunner().invoke(app, ["ask", "Who directed Blue Lake?", "--model", str(trained)])
    assert isinstance(res.exception, Seen), res.output
    assert seen[0].rollout.protocol == "rag_r1" and seen[0].rollout.options == {"multi_query": True}
    assert seen[0].retrieval.topk == 5 and seen[0].rollout.max_turns == 6
    res = CliRunner().invoke(app, ["ask", "Who?", "--model", str(trained), "--protocol", "search_r1", "--topk", "1"])
    assert isinstance(res.exception, Seen), res.output
    assert seen[1].rollout.protocol == "search_r1" and seen[1].rollout.options == {} and seen[1].retrieval.topk == 1
    assert seen[1].rollout.max_turns == 6


def test_a_broken_record_is_one_line_naming_the_fix(trained: Path) -> None:
    (trained / AGENT_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"searchrl.json is not a SearchRL model record; delete it or save"):
        build_config(None, [], data=["q.jsonl"], methods="agent", model=str(trained))


def test_with_a_recipe_a_broken_record_is_a_note_not_an_error(trained: Path, capsys) -> None:
    """The recipe's settings hold, so the record only fed a note: a garbled one must not stop the evaluation."""
    (trained / AGENT_FILE).write_text("{not json")
    cfg = build_config("demo", [], data=["q.jsonl"], methods="agent", model=str(trained))
    assert cfg.rollout.protocol == "search_r1"
    assert "is not a SearchRL model record" in capsys.readouterr().err


def test_a_record_from_another_version_runs_with_the_settings_this_one_knows(trained: Path) -> None:
    """A key this version's config lacks (one a later version records, or an earlier one had) is not the user's
    override: it used to fail as "command-line override 'rollout.gone=1': unknown key", naming nothing to fix."""
    record = json.loads((trained / AGENT_FILE).read_text(encoding="utf-8"))
    record["settings"]["rollout.gone"] = 1
    (trained / AGENT_FILE).write_text(json.dumps(record), encoding="utf-8")
    cfg = build_config(None, [], data=["q.jsonl"], methods="agent", model=str(trained))
    assert cfg.rollout.protocol == "rag_r1" and cfg.retrieval.topk == 5


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_protocols_record_holds_its_prompt_as_the_rollout_renders_it(name: str) -> None:
    """The record is written at the end of every training: no built-in protocol may fail it, and its example
    prompt is the rollout's own."""
    from searchrl.pipeline import load_tokenizer, make_protocol
    from searchrl.rollout.engine import build_prompt_text

    tok = load_tokenizer("smollm2-135m-instruct")
    cfg = load_config(None, [f"rollout.protocol={name}"])
    protocol = make_protocol(cfg)
    record = agent_record(cfg, protocol, tok)
    protocol.bind_tokenizer(tok)
    assert record["example"]["prompt"] == build_prompt_text(protocol, tok, record["example"]["question"])
    assert record["settings"]["rollout.protocol"] == name and record["stop_strings"] == list(protocol.stop_strings)
