"""`searchrl demo`: before -> cold start -> RL -> after, summary.json, reuse of existing checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from searchrl.cli import app

TINY = [
    "data.world.entities=120",
    "rollout.max_new_tokens=24",
    "rollout.max_turns=2",
    "rollout.max_searches=1",
    "training.prompts_per_step=2",
    "rollout.group_size=2",
    "algorithm.mini_batch_size=4",
    "training.tensorboard=false",
    "sft.batch_size=2",
]


@pytest.mark.slow
def test_demo_writes_before_and_after_and_reuses_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--questions", "2", "--sft-examples", "2", "--rl-steps", "1", "--out", str(out)]
    for o in TINY:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    summary = json.loads((out / "summary.json").read_text())
    for side in ("before", "after"):
        assert set(summary[side]) >= {"em", "well_formed", "searches_per_question"}
    assert summary["after_coldstart"] is not None  # the RL stage evaluated its starting point too
    assert set(summary["stage_seconds"]) == {"before_eval_s", "coldstart_s", "rl_s"}
    assert Path(summary["curves"]).exists() and Path(summary["viewer"]).exists()
    assert (out / "rl" / "final" / "config.json").exists()

    res = CliRunner().invoke(app, args)  # everything is there: nothing is trained again
    assert res.exit_code == 0, res.output + repr(res.exception)
    again = json.loads((out / "summary.json").read_text())
    assert again["stage_seconds"] == {} and again["after"] == summary["after"] and again["before"] == summary["before"]


def test_demo_and_run_resolve_the_same_config(tmp_path: Path, monkeypatch) -> None:
    """`searchrl demo` is `searchrl run --recipe demo` plus the report: both dump the same resolved config, with and
    without flags (the demo's flags are overrides of the recipe)."""
    from searchrl import demo, models, runner
    from searchrl.config import dump_config

    def dump(cfg, out, **_) -> list:
        dump_config(cfg, Path(out) / "config.yaml")
        return []  # no stage ran

    monkeypatch.setattr(models, "check_fetchable", lambda *a, **kw: None)
    monkeypatch.setattr(runner, "run_pipeline", dump)
    monkeypatch.setattr(demo, "run_demo", dump)
    cases = [([], []), (["--rl-steps", "5", "--questions", "7"], ["training.steps=5", "training.eval_limit=7"])]
    for demo_flags, run_overrides in cases:
        a, b = tmp_path / "demo", tmp_path / "run"
        res = CliRunner().invoke(app, ["demo", "--out", str(a), *demo_flags])
        assert res.exit_code == 0, res.output + repr(res.exception)
        res = CliRunner().invoke(app, ["run", "--recipe", "demo", "--out", str(b), *run_overrides])
        assert res.exit_code == 0, res.output + repr(res.exception)
        dumped = (a / "config.yaml").read_text()
        assert dumped == (b / "config.yaml").read_text()
        assert yaml.safe_load(dumped)["training"]["steps"] == (5 if demo_flags else 3)


def test_the_demo_recipe_keeps_the_values_it_learns_with() -> None:
    """No KL reference pass, 2 prompts per step, lr 5e-6, RL on the single-hop kind the cold start covers, held-out
    evaluation at the RL stage's start and end."""
    from searchrl.config import StageConfig, load_config
    from searchrl.stages import chain

    cfg = load_config("demo", ["training.steps=4"])
    assert (cfg.algorithm.kl_coef, cfg.training.prompts_per_step, cfg.training.lr) == (0, 2, 5e-6)
    assert [s.kind for s in cfg.pipeline] == ["sft", "rl"] and cfg.sft.kinds == ["single_hop"]
    rl = StageConfig.model_validate(chain._subst(cfg.pipeline[1].model_dump(), {}, "rl", cfg.model_dump()))
    scfg = chain.stage_config(cfg, rl, None, None)
    assert scfg.data.kinds == ["single_hop"] and scfg.training.eval_every == scfg.training.steps == 4
