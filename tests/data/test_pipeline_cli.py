"""The data-building commands take their limits from the recipe; ``searchrl data oracle`` writes SFT data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from searchrl.commands import data_build
from searchrl.eval.diagnostics import choice_options
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.rollout.trajectory import Trajectory
from searchrl.stages import data as data_stages
from searchrl.stages import sampling

runner = CliRunner()
#: a long passage: ~700 byte tokens, far more than the old fixed 256-token observation cap
LONG = "The Amber Fort was built in 1592 by Raja Man Singh. " + "It has many halls and gardens. " * 22


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    data_build.register(app)
    return app


@pytest.fixture
def corpus_and_questions(tmp_path: Path) -> tuple[Path, Path, Path]:
    from searchrl.retrieval.index import build_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "p0", "contents": f"Amber Fort\n{LONG}"})
        + "\n"
        + json.dumps({"id": "p1", "contents": "Other\nNothing here."})
        + "\n"
    )
    index = build_index(corpus, "bm25", tmp_path / "index")
    data = tmp_path / "qa.jsonl"
    data.write_text(
        json.dumps({"id": "q0", "question": "When was the Amber Fort built?", "golden_answers": ["1592"]}) + "\n"
    )
    return corpus, index, data


def _searcher(ctx: str) -> str:
    """Search once, then answer (Search-R1 tags)."""
    if "<information>" not in ctx.split("Question:")[-1]:
        return "<think>look it up</think>\n<search> Amber Fort built </search>"
    return "<think>found it</think>\n<answer> 1592 </answer>"


@pytest.mark.parametrize(
    "extra, cap",
    [([], 1000), (["--set", "rollout.max_obs_tokens=300"], 300), (["--max-obs-tokens", "200"], 200)],
)
def test_rejection_sample_observations_are_capped_by_the_recipe_not_256(
    tmp_path, app, corpus_and_questions, monkeypatch, extra, cap
) -> None:
    _, index, data = corpus_and_questions
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "rollout: {protocol: search_r1, max_obs_tokens: 1000, max_total_tokens: 8000, "
        "max_new_tokens: 200}\nretrieval: {topk: 1}\n"
    )
    monkeypatch.setattr(sampling, "load_generator", lambda *a, **k: ScriptedGenerator(ByteTokenizer(), _searcher))
    out = tmp_path / "rs.jsonl"
    res = runner.invoke(
        app,
        [
            "rejection-sample",
            "--recipe",
            str(recipe),
            "--data",
            str(data),
            "--index",
            str(index),
            "--k",
            "1",
            "--out",
            str(out),
            *extra,
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    traj = Trajectory.from_dict(row)
    shown = len(ByteTokenizer().encode(traj.turns[0].observation))  # the turn records what the policy read
    assert shown == traj.turns[0].n_obs_tokens
    # the whole observation is over 600 tokens: the recipe's 1000 keeps it, its --set 300 and the flag 200 cut it;
    # never the default 256
    assert shown > 600 if cap == 1000 else shown == cap
    assert traj.action_mask.count(0) == traj.turns[0].n_obs_tokens  # exactly the capped observation is inserted


def test_select_difficulty_takes_turns_and_searches_from_the_recipe(
    tmp_path, app, corpus_and_questions, monkeypatch
) -> None:
    _, index, data = corpus_and_questions
    seen: list[sampling.RolloutLimits] = []

    class Engine(sampling.RolloutEngine):
        def __init__(self, generator, retriever, protocol, limits, style):
            seen.append(limits)
            super().__init__(generator, retriever, protocol, limits, style)

    monkeypatch.setattr(sampling, "RolloutEngine", Engine)
    monkeypatch.setattr(sampling, "load_generator", lambda *a, **k: ScriptedGenerator(ByteTokenizer(), _searcher))
    common = ["--data", str(data), "--index", str(index), "--n", "2", "--out", str(tmp_path / "sel.jsonl")]
    res = runner.invoke(
        app,
        [
            "select-difficulty",
            "--set",
            "rollout.max_turns=3",
            "--set",
            "rollout.max_searches=2",
            "--set",
            "rollout.max_obs_tokens=700",
            "--easy-below",
            "1",
            "--hard-above",
            "1",
            *common,
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (seen[-1].max_turns, seen[-1].max_searches, seen[-1].max_obs_tokens) == (3, 2, 700)
    res = runner.invoke(app, ["select-difficulty", "--rule", "rag_r1", "--set", "rollout.max_obs_tokens=700", *common])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (seen[-1].max_turns, seen[-1].max_searches, seen[-1].max_obs_tokens) == (10, 10, 700)  # RAG-R1's filter


def test_data_oracle_writes_sft_trajectories(tmp_path, app, monkeypatch) -> None:
    from searchrl.data.synth import generate_world, write_world
    from searchrl.retrieval.index import build_index

    world = tmp_path / "world"
    write_world(generate_world(80, 0), world)
    index = build_index(world / "corpus.jsonl", "bm25", tmp_path / "index")
    monkeypatch.setattr(data_stages, "load_tokenizer", lambda model: ByteTokenizer())
    out = tmp_path / "oracle.jsonl"
    res = runner.invoke(
        app,
        [
            "oracle",
            "--world",
            str(world),
            "--protocol",
            "r1_searcher",
            "--index",
            str(index),
            "--out",
            str(out),
            "--limit",
            "6",
            "--set",
            "rollout.max_obs_tokens=120",
        ],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    questions = [json.loads(x) for x in (world / "train.jsonl").read_text().splitlines()][:6]
    assert [r["question_id"] for r in rows] == [q["id"] for q in questions]
    tok = ByteTokenizer()
    for row, q in zip(rows, questions, strict=True):
        traj = Trajectory.from_dict(row)
        chain = q["metadata"]["chain"]
        # one search per hop (comparison questions also search each hop in r1_searcher: one query per call)
        assert traj.n_searches == len(chain) and traj.answer == q["golden_answers"][0]
        assert all(t.n_obs_tokens <= 120 for t in traj.turns if t.queries)  # capped as the recipe says
        response = tok.decode(traj.response_ids, skip_special_tokens=True)
        assert response.count("<|begin_of_query|>") == len(chain) and "<answer>" in response
        assert traj.answer in response.split("<answer>")[-1]
    # --form choice: only the questions that name their options
    res = runner.invoke(
        app,
        ["oracle", "--world", str(world), "--index", str(index), "--out", str(out), "--limit", "2", "--form=choice"],
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    asked = [json.loads(x)["question"] for x in out.read_text().splitlines()]
    assert len(asked) == 2 and all(choice_options(q) for q in asked)
    # a directory that is not a world gets a one-line error naming the fix
    res = runner.invoke(app, ["oracle", "--world", str(tmp_path / "nope"), "--out", str(out)])
    assert isinstance(res.exception, FileNotFoundError) and "searchrl data synth" in str(res.exception)


def test_relative_data_paths_resolve_in_the_data_dir_then_the_current_dir(tmp_path, monkeypatch) -> None:
    from searchrl.config import load_config
    from searchrl.pipeline import load_split, resolve_file

    world = tmp_path / "world"
    world.mkdir()
    (world / "train.jsonl").write_text(json.dumps({"id": "w", "question": "Q?", "golden_answers": ["a"]}) + "\n")
    sel = tmp_path / "runs" / "stage1.jsonl"
    sel.parent.mkdir()
    sel.write_text(json.dumps({"id": "s", "question": "Q?", "golden_answers": ["a"]}) + "\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["data.source=world", "data.train=runs/stage1.jsonl"])
    assert resolve_file(cfg, "train.jsonl") == str(Path("world") / "train.jsonl")  # the data directory's file
    assert resolve_file(cfg, "runs/stage1.jsonl") == str(sel)  # not in the data directory: from the shell's cwd
    assert [e.id for e in load_split(cfg, "train")] == ["s"]
    assert resolve_file(cfg, "missing.jsonl") == str(Path("world") / "missing.jsonl")  # the loader names it
