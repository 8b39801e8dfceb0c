"""benchmarks/bench_transfer.py: each setting's pipeline plans, and the report splits in-style from held-out questions
(no model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import bench_transfer
import pytest

from searchrl.config import load_config
from searchrl.preflight import plan_pipeline
from searchrl.validation import validate_deep

QUESTIONS = [
    "Who is the father of Anna Berg?",
    "Who is the father of Tom Hale?",
    "Who is the father of Ida Moss?",
    "Where was the director of film Blue Lake born?",
    "Where was the director of film Red Sea born?",
    "Who is older, Anna Berg or Tom Hale?",
]


@pytest.fixture
def real(tmp_path: Path) -> Path:
    d = tmp_path / "real"
    d.mkdir()
    rows = [{"id": f"r{i}", "question": q, "golden_answers": ["x"]} for i, q in enumerate(QUESTIONS)]
    (d / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "corpus.jsonl").write_text(json.dumps({"id": "0", "contents": '"Anna Berg"\nAnna Berg is a person.'}) + "\n")
    return d


@pytest.mark.parametrize("setting", ["world_to_real", "held_out_kind", "held_out_template"])
@pytest.mark.parametrize("smoke", [False, True])
def test_each_setting_is_a_valid_pipeline(setting: str, smoke: bool, real: Path, tmp_path: Path) -> None:
    path, qa = bench_transfer.real_inputs(setting, str(real), None)
    info = bench_transfer.choose_held_out(real, "dev.jsonl", 2, 1 / 3) if setting == "held_out_template" else {}
    stages = bench_transfer.pipeline(
        setting,
        steps=1,
        eval_limit=3,
        smoke=smoke,
        real=path,
        qa=qa,
        heldout=2,
        held_out_styles=info.get("held_out_styles"),
        relations="open",
    )
    cfg = load_config(bench_transfer.RECIPES[setting], ["pipeline=" + json.dumps(stages)], "laptop" if smoke else None)
    validate_deep(cfg, lambda name: load_config(name))
    names = [p.name for p in plan_pipeline(cfg, tmp_path / "run")]
    assert names[:3] == ["world", "world_index", "coldstart"] and names[-1] in ("eval", "eval_real")
    assert cfg.pipeline[0].args == {"relations": "open"}  # the world stage takes the world's relations
    rl = next(s for s in cfg.pipeline if s.name == "rl")
    if setting == "held_out_kind":
        assert rl.set["data.held_out_styles"] == ["three_hop"]
        assert next(s for s in cfg.pipeline if s.name == "coldstart").set["data.held_out_styles"] == ["three_hop"]
    if setting == "held_out_template":
        assert rl.set["data.held_out_styles"] == info["held_out_styles"] and info["held_out_styles"]
    if setting == "world_to_real":  # scored on the split's held-out part, naive RAG beside the agent
        last = cfg.pipeline[-1]
        assert last.data == ["${split}/heldout.jsonl"] and last.set["evaluation.methods"] == ["naive_rag", "agent"]


def test_real_settings_need_real_data(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="needs real questions: pass --real DIR"):
        bench_transfer.real_inputs("world_to_real", None, None)
    with pytest.raises(SystemExit, match="corpus.jsonl not found"):
        bench_transfer.real_inputs("held_out_template", str(tmp_path), "dev.jsonl")
    assert bench_transfer.real_inputs("held_out_kind", None, None) == (None, None)


def test_held_out_templates_are_the_rarest_of_the_training_part(real: Path) -> None:
    info = bench_transfer.choose_held_out(real, "dev.jsonl", 0, 1 / 3)
    assert info["held_out_styles"] == ["who is older, <e> or <e>?"]
    assert info["trained_styles"] == ["where was the director of film <e> born?", "who is the father of <e>?"]
    assert info["train_questions"] == 6 and info["train_questions_held_out"] == 1


def _predictions(out: Path, stage: str, rows: list[tuple[str, str | None, float]]) -> None:
    d = out / stage / "predictions"
    d.mkdir(parents=True)
    items = [{"style": s, "kind": k, "metrics": {"em": em, "f1": em, "cover_em": em}} for s, k, em in rows]
    (d / "dev__agent.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))


def test_report_splits_in_style_from_held_out(tmp_path: Path) -> None:
    info = {"held_out_styles": ["c"], "trained_styles": ["a"]}
    _predictions(tmp_path, "coldstart_eval", [("a", None, 0.0), ("c", None, 0.0), ("z", None, 1.0)])
    _predictions(tmp_path, "eval", [("a", None, 1.0), ("c", None, 0.0), ("z", None, 1.0)])
    runs = bench_transfer.collect(tmp_path, "held_out_template", info)
    assert runs["rl"]["in_style"] == {"n": 1, "em": 1.0, "f1": 1.0, "cover_em": 1.0}
    assert runs["rl"]["held_out"]["n"] == 2 and runs["rl"]["held_out"]["em"] == 0.5  # removed or never seen
    assert runs["coldstart"]["by_style"]["held_out: z"]["em"] == 1.0
    meta = {"setting": "held_out_template", "recipe": "multihop_cpu", "date": "d", "machine": "m", "load_avg": [0.0]}
    text = bench_transfer.report({"meta": {**meta, "wall_s": 1.0, "bench_command": "python b", **info}, "runs": runs})
    assert "| rl | 1 | 100.0 | 100.0 | 100.0 | 2 | 50.0 | 50.0 | 50.0 |" in text
    assert "| held_out: c | 1 | 0.0 | 0.0 |" in text


def test_report_of_a_held_out_kind_goes_by_kind(tmp_path: Path) -> None:
    for stage in ("coldstart_eval", "eval"):
        _predictions(tmp_path, stage, [("bridge:x", "bridge", 1.0), ("three_hop:y", "three_hop", 0.0)])
    runs = bench_transfer.collect(tmp_path, "held_out_kind", {"held_out_styles": ["three_hop"]})
    assert runs["rl"]["held_out"]["n"] == 1 and runs["rl"]["held_out"]["em"] == 0.0
    assert runs["rl"]["in_style"]["em"] == 1.0 and set(runs["rl"]["by_kind"]) == {"bridge", "three_hop"}


def test_world_to_real_reports_naive_rag_beside_the_agent(tmp_path: Path) -> None:
    for stage in ("coldstart_eval", "eval", "coldstart_eval_real", "eval_real"):
        _predictions(tmp_path, stage, [("a", "bridge", 1.0), ("b", None, 0.0)])
    rag = tmp_path / "eval_real" / "predictions" / "dev__naive_rag.jsonl"
    rag.write_text(json.dumps({"style": "b", "kind": None, "metrics": {"em": 0.0, "f1": 0.5, "cover_em": 1.0}}) + "\n")
    runs = bench_transfer.collect(tmp_path, "world_to_real", {"held_out_styles": []})
    assert runs["rl"]["naive_rag_held_out"] == {"n": 1, "em": 0.0, "f1": 0.5, "cover_em": 1.0}
    meta = {"setting": "world_to_real", "recipe": "multihop_world", "date": "d", "machine": "m", "load_avg": [0.0]}
    text = bench_transfer.report(
        {"meta": {**meta, "wall_s": 1.0, "bench_command": "python b", "held_out_styles": []}, "runs": runs}
    )
    assert "| naive RAG (RL model) | | | | | 1 | 0.0 | 50.0 | 100.0 |" in text
