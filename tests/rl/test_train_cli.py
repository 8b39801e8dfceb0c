"""`searchrl train` wires recipe -> world -> index -> protocol -> rewards -> trainer, with the bundled model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["demo", "r_search", "r1_searcher_pp"])
def test_train_one_step_from_recipe(tmp_path: Path, recipe: str) -> None:
    out = tmp_path / "run"
    # the recipes hold paper-scale values (hub models, Wikipedia indexes); the laptop profile runs them here
    args = [
        "train",
        "--recipe",
        recipe,
        "--profile",
        "laptop",
        "data.world.entities=120",
        "training.steps=1",
        "training.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=24",
        "rollout.max_turns=1",
        "rollout.max_searches=1",
        "algorithm.mini_batch_size=4",
        f"training.output_dir={out}",
        "training.tensorboard=false",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 1
    assert "reward/total" in rows[0] and "time/generate_s" in rows[0]
    assert (out / "final" / "config.json").exists() and (out / "config.yaml").exists()
    assert (out / "rollouts.jsonl").exists()
    if recipe == "r1_searcher_pp":  # the memorization hook ran (rewriter = frozen copy of the initial policy)
        assert "memorization/candidates" in rows[0] and "memorization/pool" in rows[0]


def test_resume_checks_the_checkpoint_and_its_settings_before_loading_a_model(tmp_path: Path, monkeypatch) -> None:
    """No checkpoint, or one made with other settings: one line naming the fix, and no model is loaded."""
    from searchrl import stages
    from searchrl.config import dump_config, load_config
    from searchrl.stages.resume import record_init

    calls: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: calls.append(resume) or [])
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--resume"])
    assert res.exit_code != 0 and "no checkpoint at" in str(res.exception) and "without --resume" in str(res.exception)
    cfg = load_config("demo", [f"training.output_dir={out}"])
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    dump_config(cfg, out / "config.yaml")
    record_init(cfg)
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--resume", "training.seed=7"])
    msg = str(res.exception)
    assert res.exit_code != 0 and msg.startswith(f"cannot resume {out}: settings differ from the checkpoint's (")
    assert "training.seed" in msg and "a new --out" in msg and "\n" not in msg
    assert calls == []  # no model was loaded
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--resume", "training.steps=99"])
    assert res.exit_code == 0 and calls == [True], res.output  # a longer run of the same settings resumes


def test_a_fresh_run_into_an_earlier_one_is_refused_or_forced_clean(tmp_path: Path, monkeypatch) -> None:
    """Without --resume, an output directory holding an earlier run is refused (its logs would be appended to and
    its checkpoint later resumed as if it were this run's); --force removes that run's outputs and starts over."""
    from searchrl import stages

    calls: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: calls.append(resume) or [])
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    (out / "notes.txt").write_text("mine")
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out)])
    msg = str(res.exception)
    assert res.exit_code != 0 and calls == []
    assert msg.startswith(f"{out} holds an earlier run (checkpoint, metrics.jsonl); continue it with --resume")
    assert "--force" in msg and "\n" not in msg
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--force"])
    assert res.exit_code == 0 and calls == [False], res.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # the user's own file stays
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(tmp_path / "new")])
    assert res.exit_code == 0 and calls == [False, False]  # a new directory needs nothing
