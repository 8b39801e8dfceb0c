"""Policies held in bf16 or fp16 (``model.dtype``) and bf16 mixed precision: the pieces whose dtype is not the
policy's own (the critic's head, the losses' fp32 arithmetic) on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.rl.batch import collate
from searchrl.rl.losses import value_loss
from searchrl.rl.trainer import Trainer
from searchrl.rl.update import ValueModel
from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer

QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(4)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_critic_of_a_half_precision_policy_computes_without_autocast(dtype: torch.dtype) -> None:
    """Its head is fp32 (master weights) and takes the body's hidden states cast to fp32; a head of the default dtype
    applied to bf16 hidden states raised a dtype mismatch."""
    critic = ValueModel(tiny_model().to(dtype))
    batch = collate([[5, 6, 7], [8, 9]], [[10, 11], [12]], [[1, 1], [1]])
    values_BT = critic(batch)
    assert critic.head.weight.dtype == torch.float32
    assert values_BT.dtype == torch.float32 and values_BT.shape == (2, 2)
    values_BT.sum().backward()
    assert critic.head.weight.grad is not None


def bf16_policy_trainer(tmp: Path, *extra: str) -> Trainer:
    """A trainer of a policy held in bf16 (model.dtype=bfloat16) in fp32 precision (the CPU's auto)."""
    cfg = load_config(
        None,
        [
            "model.dtype=bfloat16",
            "training.precision=fp32",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=4",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            *extra,
        ],
    )
    model = tiny_model().to(torch.bfloat16)
    return Trainer(cfg, model, tokenizer(), LettersProtocol(), None, QUESTIONS, reward_fn=letter_fraction_reward)


def test_ppo_trains_a_bf16_policy_in_fp32_precision(tmp_path: Path) -> None:
    """model.dtype=bfloat16 with training.precision=fp32: a PPO step runs its critic."""
    m = bf16_policy_trainer(tmp_path, "algorithm.name=ppo").train_step()
    assert torch.isfinite(torch.tensor([m["loss/value"], m["loss/policy_total"]])).all()


def test_a_bf16_policy_takes_no_rollout_logprobs_as_the_old_ones(tmp_path: Path) -> None:
    """In fp32 precision the rollout's log-probs stand in for the old policy's only when the weights are fp32 too:
    bf16 weights decode and score in bf16, which round differently, and the ratio of the step's one update would
    start away from 1 (0.996 to 1.004 on this tiny model). ``auto`` takes the update's own, detached: exactly 1."""
    trainer = bf16_policy_trainer(
        tmp_path, "algorithm.name=grpo", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8"
    )
    assert trainer._old_logprobs_source(8) == "current"
    m = trainer.train_step()
    assert m["policy/ratio_min"] == m["policy/ratio_max"] == 1.0


def test_the_value_loss_of_bf16_values_keeps_its_returns_in_fp32() -> None:
    """A critic's values are bf16 under autocast; the loss upcasts them rather than rounding the returns to bf16,
    which moved a return of 0.501 onto the value 0.5 (bf16's spacing there is 2^-9) and gave the critic no gradient."""
    values_BT = torch.tensor([[0.5, 0.25]], dtype=torch.bfloat16, requires_grad=True)
    returns_BT = torch.tensor([[0.501, 0.2502]])
    loss, m = value_loss(values_BT, values_BT.detach().float(), returns_BT, torch.ones(1, 2), clip=0.2)
    loss.backward()
    assert loss.dtype == torch.float32
    assert float(loss.detach()) == pytest.approx(0.5 * (0.001**2 + 0.0002**2) / 2, rel=1e-3)
    assert values_BT.grad is not None and (values_BT.grad < 0).all()
    assert m["value/return_mean"] == pytest.approx((0.501 + 0.2502) / 2)


@pytest.mark.parametrize(
    ("capability", "expected"), [((7, 0), "fp32"), ((7, 5), "fp32"), ((8, 0), "bf16"), ((9, 0), "bf16")]
)
def test_auto_precision_takes_bf16_only_on_a_gpu_with_bf16_arithmetic(monkeypatch, capability, expected) -> None:
    """A V100 (7.0) or T4 (7.5) only emulates bf16 and fp16 training is refused, so auto trains there in fp32; an
    A100 / H100 (8.0 / 9.0) in bf16. An explicit choice is kept."""
    from searchrl.device import resolve_precision

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", torch.device("cuda", 0)) == expected
    assert resolve_precision("bf16", torch.device("cuda", 0)) == "bf16"
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
