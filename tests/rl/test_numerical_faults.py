"""Numerical faults and degenerate batches in the RL loop: an update whose gradient norm is not finite is skipped (the
weights and the optimizer's moments as they were), counted, and too many in a row stop the run in one line; a reward
that is not finite is an error naming its rollout; a step with nothing to learn from is a no-op with finite metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ScriptedGenerator
from searchrl.rl.kl_control import AdaptiveKL
from searchrl.rl.trainer import Trainer
from searchrl.testing import letters_trainer, tokenizer

QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(8)]


def make(tmp: Path, *extra: str, generator=None) -> Trainer:
    overrides = [
        "algorithm.name=grpo",
        "algorithm.kl_coef=0.0",
        "training.lr=1e-2",
        "training.prompts_per_step=2",
        f"training.output_dir={tmp}",
        "training.save_every=0",
        "training.save_at_end=false",
        "training.tensorboard=false",
        "rollout.group_size=4",
        "rollout.max_new_tokens=8",
        "rollout.max_turns=1",
        "rollout.force_answer=false",
        "rollout.max_total_tokens=128",
        *extra,
    ]
    return letters_trainer(load_config(None, overrides), QUESTIONS, generator=generator)


def overflow(module: torch.nn.Module, calls: int | None = None) -> None:
    """``module``'s output turns non-finite in its first ``calls`` forward passes with gradients (None: in all): an
    overflowing layer in the update's forward."""
    seen: list[int] = []

    def hook(_module, _inputs, out):
        if torch.is_grad_enabled() and (calls is None or len(seen) < calls):
            seen.append(1)
            return out * float("inf")
        return None

    module.register_forward_hook(hook)


def weights(*modules: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for m in modules for p in m.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_an_update_whose_gradient_is_not_finite_is_skipped_and_counted(tmp_path: Path) -> None:
    trainer = make(tmp_path)
    before = weights(trainer.policy)
    overflow(trainer.policy.get_output_embeddings(), calls=1)  # the one update's logits overflow
    m = trainer.train_step()
    assert m["update/skipped_steps"] == 1.0 and m["update/optimizer_steps"] == 0.0
    assert not math.isfinite(m["grad_norm"])
    assert same(before, weights(trainer.policy)) and not trainer.opt.state  # no weight, no Adam moment moved
    m = trainer.train_step()  # the next update's gradient is finite: taken, and the count of skips in a row restarts
    assert m["update/skipped_steps"] == 0.0 and m["update/optimizer_steps"] == 1.0 and trainer.skipped.in_a_row == 0
    after = weights(trainer.policy)
    assert not same(before, after) and all(torch.isfinite(p).all() for p in after)


def test_a_critic_gradient_that_is_not_finite_skips_the_update_too(tmp_path: Path) -> None:
    trainer = make(tmp_path, "algorithm.name=ppo")
    critic = trainer.acc.unwrap_model(trainer.critic)
    before = weights(trainer.policy, critic)
    overflow(critic.head, calls=1)  # the value loss overflows; the policy's gradient is finite
    m = trainer.train_step()
    assert m["update/skipped_steps"] == 1.0 and math.isfinite(m["grad_norm"])
    assert same(before, weights(trainer.policy, critic)) and not trainer.opt.state and not trainer.critic_opt.state


def test_updates_skipped_in_a_row_stop_the_run_in_one_line(tmp_path: Path) -> None:
    trainer = make(tmp_path, "training.max_skipped_steps=2", "training.steps=5")
    before = weights(trainer.policy)
    overflow(trainer.policy.get_output_embeddings())  # every update overflows
    with pytest.raises(ValueError, match=r"diverged: the gradient norm was nan in 2 optimizer steps in a row") as err:
        trainer.train()
    assert "up to RL step 2" in str(err.value) and "raise training.max_skipped_steps" in str(err.value)
    assert "\n" not in str(err.value) and same(before, weights(trainer.policy))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["update/skipped_steps"] for r in rows] == [1.0, 1.0]  # both steps logged before the stop


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_reward_that_is_not_finite_is_an_error_naming_its_rollout(tmp_path: Path, bad: float) -> None:
    """Trained on, it would turn the advantages, the loss and then every weight into NaN."""
    trainer = make(tmp_path)
    trainer.reward_fn = lambda trajs: ([1.0, 0.0, 1.0, bad] + [0.5] * (len(trajs) - 4), {})
    before = weights(trainer.policy)
    with pytest.raises(ValueError, match=rf"returned {bad} for rollout 3 \(question q\d\): return a finite") as err:
        trainer.train_step()
    assert "\n" not in str(err.value) and same(before, weights(trainer.policy))


def test_an_adaptive_kl_coefficient_ignores_a_kl_that_is_not_finite() -> None:
    """Else the clip passes NaN through, and the coefficient (saved in checkpoints) stays NaN for good."""
    ctrl = AdaptiveKL(value=0.1, target=0.05, horizon=100)
    ctrl.update(kl=float("nan"), n_steps=10)
    ctrl.update(kl=float("inf"), n_steps=10)
    assert ctrl.value == 0.1


def _finite(metrics: dict) -> bool:
    return all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dr_grpo", "gspo", "reinforce_pp"])
def test_a_step_whose_groups_all_scored_alike_is_a_no_op(tmp_path: Path, algo: str) -> None:
    """Every advantage is exactly 0 (no division by a zero std, no rounding residue of a mean blown up): the loss is
    0, the metrics finite, the weights as they were."""
    trainer = make(tmp_path, f"algorithm.name={algo}")
    trainer.reward_fn = lambda trajs: ([0.3] * len(trajs), {})
    before = weights(trainer.policy)
    m = trainer.train_step()
    assert m["loss/policy_total"] == 0.0 and m["grad_norm"] == 0.0 and _finite(m)
    assert same(before, weights(trainer.policy))


@pytest.mark.parametrize("eos", [True, False])
@pytest.mark.parametrize("algo", ["grpo", "ppo", "reinforce_pp"])
def test_a_step_of_empty_responses_is_a_no_op(tmp_path: Path, algo: str, eos: bool) -> None:
    """The policy ends every response at once: one EOS token each, or none (no token counted at all)."""
    trainer = make(tmp_path, f"algorithm.name={algo}", generator=ScriptedGenerator(tokenizer(), lambda _: "", eos=eos))
    before = weights(trainer.policy)
    m = trainer.train_step()
    assert m["tokens/generated"] == (8.0 if eos else 0.0) and m["loss/policy_total"] == 0.0 and _finite(m)
    assert same(before, weights(trainer.policy))


@pytest.mark.parametrize("algo", ["ppo", "reinforce_pp"])
def test_a_step_of_one_row_has_finite_metrics_and_weights(tmp_path: Path, algo: str) -> None:
    """One prompt, one rollout: whitening over a single row divides by no zero."""
    trainer = make(tmp_path, f"algorithm.name={algo}", "training.prompts_per_step=1", "rollout.group_size=1")
    m = trainer.train_step()
    assert m["update/optimizer_steps"] == 1.0 and _finite(m)
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
