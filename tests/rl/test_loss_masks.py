"""Retrieved tokens stay out of the policy loss: the padded batch carries each trajectory's action mask exactly where
its tokens sit, and the trainer's loss positions are that mask (every response token under the masking ablation);
the critic's are the policy's tokens unless ``critic_mask_observations`` is off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.rl.batch import collate
from searchrl.rl.trainer import Trainer
from searchrl.testing import EchoRetriever, LetterStopProtocol, letter_fraction_reward, tiny_model, tokenizer


def test_collate_puts_every_response_at_the_prompt_boundary_with_its_own_masks() -> None:
    # prompts of 2 and 1 tokens (P = 2, left-padded), responses of 3 and 2 tokens (T = 3, right-padded); the first
    # response's middle token was inserted (a document), the second's last one
    b = collate([[5, 6], [7]], [[20, 21, 22], [23, 24]], [[1, 0, 1], [1, 0]], [[-0.5, 0.0, -1.5], [-0.25, 0.0]], 9)
    assert b.prompt_len == 2
    assert b.input_ids.tolist() == [[5, 6, 20, 21, 22], [9, 7, 23, 24, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]]
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 2]]
    assert b.response_ids.tolist() == [[20, 21, 22], [23, 24, 9]]
    assert b.response_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b.action_mask.tolist() == [[1, 0, 1], [1, 0, 0]]
    assert b.rollout_logp.tolist() == [[-0.5, 0.0, -1.5], [-0.25, 0.0, 0.0]]
    # a selection keeps each row's masks (cut to its own longest response)
    one = b.select([1])
    assert one.response_mask.tolist() == [[1, 1]] and one.action_mask.tolist() == [[1, 0]]
    assert one.input_ids.tolist() == [[7, 23, 24]] and one.prompt_len == 1


def _step_tensors(tmp: Path, *extra: str):
    cfg = load_config(
        None,
        [
            "training.prompts_per_step=2",
            f"training.output_dir={tmp}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=4",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=3",
            "rollout.force_answer=false",
            "rollout.max_total_tokens=256",
            "algorithm.kl_coef=0.0",
            *extra,
        ],
    )
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(2)]
    trainer = Trainer(
        cfg,
        tiny_model(),
        tokenizer(),
        LetterStopProtocol(),
        EchoRetriever(),
        questions,
        reward_fn=letter_fraction_reward,
    )
    sb = trainer._advantages(trainer._experience(0))
    inserted = (sb.batch.response_mask == 1) & (sb.batch.action_mask == 0)
    assert inserted.any() and sb.batch.action_mask.any()  # documents were inserted, and the policy wrote text
    return sb.batch, sb.tensors


@pytest.mark.parametrize("masked", [True, False])
def test_the_policy_loss_positions_are_the_policys_tokens_unless_the_ablation(tmp_path: Path, masked: bool) -> None:
    batch, st = _step_tensors(tmp_path, "algorithm.name=grpo", f"algorithm.mask_observations={masked}")
    expected = batch.action_mask if masked else batch.response_mask
    assert torch.equal(st.mask_BT.bool(), expected.bool())
    if masked:  # retrieved tokens carry no advantage and no old log-prob
        inserted = (batch.response_mask == 1) & (batch.action_mask == 0)
        assert not st.adv_BT[inserted].any() and not st.old_logp_BT[inserted].any()


@pytest.mark.parametrize("critic_masked", [True, False])
def test_the_critic_positions_follow_critic_mask_observations(tmp_path: Path, critic_masked: bool) -> None:
    batch, st = _step_tensors(tmp_path, "algorithm.name=ppo", f"algorithm.critic_mask_observations={critic_masked}")
    assert torch.equal(st.mask_BT.bool(), batch.action_mask.bool())  # the policy loss masks documents either way
    expected = batch.action_mask if critic_masked else batch.response_mask
    assert torch.equal(st.cmask_BT.bool(), expected.bool())
