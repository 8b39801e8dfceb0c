"""`searchrl demo`: before -> cold start -> RL -> after, summary.json, reuse of existing checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
