"""The update's logged metrics mean the same whatever the micro-batch split: losses are the mini-batch's, means are
over its tokens, extremes over its tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.rl.metrics_log import UpdateMetrics, combine_process_metrics
from searchrl.rl.trainer import Trainer
from searchrl.testing import letters_trainer

# prompts of 21 tokens (q0..q9) and 22 (q10..q15): at max_total_tokens=29 the first get 8 response tokens and the
# others none (less room than a turn needs), so some micro-batches count no token at all
QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(16)]


def make_trainer(tmp: Path, micro: int, **extra: str) -> Trainer:
    settings = {
        "algorithm.name": "ppo",
        "algorithm.kl_coef": "0.0",
        "algorithm.mini_batch_size": "8",
        "algorithm.ppo_epochs": "2",
        "algorithm.entropy_coef": "0.01",
        "training.lr": "1e-3",
        "training.steps": "1",
        "training.prompts_per_step": "4",
        "training.output_dir": str(tmp),
        "training.save_every": "0",
        "training.save_at_end": "false",
        "training.tensorboard": "false",
        "rollout.group_size": "4",
        "rollout.max_new_tokens": "8",
        "rollout.max_turns": "1",
        "rollout.force_answer": "false",
        "rollout.max_total_tokens": "29",
        **extra,
    }
    cfg = load_config(None, [f"{k}={v}" for k, v in settings.items()])
    return letters_trainer(cfg, QUESTIONS, micro_batch_size=micro)


@pytest.mark.parametrize("algo", ["ppo", "gspo"])
def test_update_metrics_do_not_depend_on_the_micro_batch_split(tmp_path: Path, algo: str) -> None:
    """Before, each micro-batch's loss (its share of the mini-batch's) and means were averaged over the passes: the
    logged loss shrank with the number of micro-batches, and a pass with no counted token logged a ratio of 0."""
    whole = make_trainer(tmp_path / "whole", 32, **{"algorithm.name": algo})
    (m_whole,) = whole.train()
    split = make_trainer(tmp_path / "split", 1, **{"algorithm.name": algo, "training.micro_batch_tokens": "12"})
    (m_split,) = split.train()
    lens = {len(t.response_ids) for t in whole.last_trajectories}
    assert lens == {0, 8}, "the test needs rows with no counted token beside others"
    keys = [k for k in m_whole if k.startswith(("loss/", "policy/", "entropy/", "value/", "tis/"))]
    assert "loss/policy_total" in keys and "policy/ratio_mean" in keys and "entropy/mean" in keys
    assert m_split["grad_norm"] == pytest.approx(m_whole["grad_norm"], rel=1e-5)
    for k in keys:
        assert m_split[k] == pytest.approx(m_whole[k], rel=1e-4, abs=1e-7), k
    assert m_whole["policy/ratio_min"] <= m_whole["policy/ratio_mean"] <= m_whole["policy/ratio_max"]
    assert 0.5 < m_whole["policy/ratio_mean"] < 2.0
    if algo == "ppo":
        assert m_whole["loss/value"] > 0


def test_update_metrics_weigh_passes_by_what_they_counted() -> None:
    metrics = UpdateMetrics()
    metrics.add({"policy/clip_frac": 0.5, "policy/ratio_min": 0.9, "policy/ratio_max": 1.1}, 3.0)
    metrics.add({"policy/clip_frac": 0.0, "policy/ratio_min": 1.0, "policy/ratio_max": 1.0}, 0.0)  # counted nothing
    metrics.add({"policy/clip_frac": 1.0, "policy/ratio_min": 0.95, "policy/ratio_max": 1.2}, 1.0)
    metrics.add({"loss/policy_total": 2.0})
    metrics.add({"loss/policy_total": 4.0})
    assert metrics.result() == {
        "policy/clip_frac": 0.625,
        "loss/policy_total": 3.0,
        "policy/ratio_min": 0.9,
        "policy/ratio_max": 1.2,
    }


def test_processes_shares_of_a_loss_add_up_and_extremes_stay_extremes() -> None:
    step = combine_process_metrics(
        [
            {"loss/policy_total": 0.25, "policy/ratio_min": 0.9, "policy/ratio_max": 1.1},
            {"loss/policy_total": 0.5, "policy/ratio_min": 0.95, "policy/ratio_max": 1.3},
        ]
    )
    assert step == {"loss/policy_total": 0.75, "policy/ratio_min": 0.9, "policy/ratio_max": 1.3}
