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


def test_a_refused_rerun_of_a_run_stopped_before_its_first_checkpoint_does_not_offer_resume(
    tmp_path: Path, monkeypatch
) -> None:
    """Ctrl-C before the first checkpoint left logs and no checkpoint: the same command again was refused with
    'continue it with --resume', and --resume then failed with 'no checkpoint'. The refusal now says why and offers
    --force or another --out only."""
    from searchrl import stages

    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: [])
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out)])
    msg = str(res.exception)
    assert res.exit_code != 0 and "--resume" not in msg
    assert msg == (
        f"{out} holds an earlier run (metrics.jsonl); it saved no checkpoint to continue from: start over with "
        "--force (its outputs are removed), or give another --out"
    )


def test_resume_ignores_settings_rl_never_reads_and_says_when_nothing_is_left(tmp_path: Path, monkeypatch) -> None:
    """A recipe's pipeline:, sft: or evaluation: edited since the checkpoint (RL reads none of them) refused
    `searchrl train --resume`; a resume of a run already at training.steps printed nothing at all and exited 0."""
    from searchrl import stages
    from searchrl.config import dump_config, load_config
    from searchrl.stages.resume import record_init

    calls: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: calls.append(resume) or [])
    out = tmp_path / "run"
    cfg = load_config("demo", [f"training.output_dir={out}"])
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    (out / "metrics.jsonl").write_text('{"step": 3, "reward/total": 0.5}\n')
    dump_config(cfg, out / "config.yaml")
    record_init(cfg)
    other = ["sft.limit=8", "evaluation.limit=5", "pipeline.coldstart.set.sft.epochs=2", "description=mine"]
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--resume", *other])
    assert res.exit_code == 0 and calls == [True], res.output + repr(res.exception)
    assert "training.steps=3 already; nothing to train" in res.output and "done: step 3, reward 0.500" in res.output
    res = CliRunner().invoke(app, ["train", "--recipe", "demo", "--out", str(out), "--resume", "rollout.top_p=0.9"])
    assert res.exit_code != 0 and "settings differ from the checkpoint's (rollout.top_p)" in str(res.exception)
