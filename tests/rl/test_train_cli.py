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
