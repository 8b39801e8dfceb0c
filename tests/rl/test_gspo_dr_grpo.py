"""GSPO's sequence-level clipped loss and Dr. GRPO's advantage and constant-length aggregation, against plain loops."""

from __future__ import annotations

import math

import pytest
import torch

from searchrl.config import load_config
from searchrl.rl import algorithms as A
from searchrl.rl.advantages import get_estimator

B, T = 6, 7


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).requires_grad_()
    old = logp.detach() + 0.05 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv_B = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.3).to(torch.float64)
    mask[0] = 0.0  # a row with no counted token
    adv = adv_B[:, None].expand(B, T) * mask
    return logp, old, adv, mask


def _gspo_loop(logp, old, adv, mask, lo, hi, n_seq):
    total = 0.0
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t] > 0]
        if not idx:
            continue
        log_s = sum(logp[b, t] - old[b, t] for t in idx) / len(idx)
        s = torch.exp(log_s)
        a = sum(adv[b, t] for t in idx) / len(idx)
        total = total + torch.maximum(-a * s, -a * s.clamp(1 - lo, 1 + hi))
    return total / n_seq


@pytest.mark.parametrize("n_seq", [None, 9.0])
def test_gspo_loss_and_gradient_match_a_loop(n_seq: float | None) -> None:
    logp, old, adv, mask = _inputs()
    lo, hi = 0.01, 0.02  # wide enough that some sequences clip and some do not at these ratios
    loss, metrics = A.gspo_loss(logp, old, adv, mask, lo, hi, global_seqs=n_seq)
    (grad,) = torch.autograd.grad(loss, logp)
    ref = _gspo_loop(logp, old, adv, mask, lo, hi, n_seq or float((mask.sum(-1) > 0).sum()))
    (ref_grad,) = torch.autograd.grad(ref, logp)
    assert abs(float(loss.detach()) - float(ref.detach())) < 1e-6
    assert float((grad - ref_grad).abs().max()) < 1e-6
    assert 0.0 < metrics["policy/clip_frac"] < 1.0
    assert float(grad[0].abs().sum()) == 0.0  # the row with no counted token


def test_seq_mean_token_sum_norm_matches_a_loop() -> None:
    logp, _, _, mask = _inputs(1)
    loss_BT = logp**2
    got = A.aggregate_loss(loss_BT, mask, "seq_mean_token_sum_norm", global_seqs=4.0, norm_tokens=50)
    ref = sum(float(loss_BT[b, t]) for b in range(B) for t in range(T) if mask[b, t] > 0) / (4.0 * 50)
    assert abs(float(got) - ref) < 1e-9
    with pytest.raises(ValueError, match="norm_tokens"):
        A.aggregate_loss(loss_BT, mask, "seq_mean_token_sum_norm")


def test_dr_grpo_centres_without_dividing_by_the_std() -> None:
    cfg = load_config(None, ["algorithm.name=dr_grpo", "algorithm.kl_coef=0.0"]).algorithm
    scores = torch.tensor([1.0, 0.0, 0.0, 3.0, 1.0, 2.0], dtype=torch.float64)
    groups = ["a", "a", "a", "b", "b", "b"]
    mask = torch.ones(B, 3, dtype=torch.float64)
    adv, _, _ = get_estimator("dr_grpo").fn(scores, torch.zeros_like(mask), None, mask, groups, cfg)
    means = {"a": 1 / 3, "b": 2.0}
    for b in range(B):
        assert all(math.isclose(float(adv[b, t]), float(scores[b]) - means[groups[b]], abs_tol=1e-9) for t in range(3))
    grpo_cfg = load_config(None, ["algorithm.name=gspo"]).algorithm
    gspo_adv, _, _ = get_estimator("gspo").fn(scores, torch.zeros_like(mask), None, mask, groups, grpo_cfg)
    grpo_adv, _, _ = get_estimator("grpo").fn(scores, torch.zeros_like(mask), None, mask, groups, grpo_cfg)
    torch.testing.assert_close(gspo_adv, grpo_adv)  # GSPO keeps GRPO's advantage; its loss differs
    assert get_estimator("dr_grpo").algorithm.loss_agg == "seq_mean_token_sum_norm"
    assert get_estimator("gspo").algorithm.policy_loss == "gspo"


@pytest.mark.parametrize("algo", ["dr_grpo", "gspo"])
def test_a_training_step_with_the_kl_term_in_the_loss(tmp_path, algo: str) -> None:
    """The KL and entropy terms aggregate like the algorithm's policy loss (Dr. GRPO: over a constant length)."""
    from searchrl.data.records import QAExample
    from searchrl.rl.trainer import Trainer
    from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer

    overrides = [f"algorithm.name={algo}", "algorithm.kl_coef=0.05", "algorithm.entropy_coef=0.01"]
    overrides += ["training.steps=1", "training.prompts_per_step=2", f"training.output_dir={tmp_path}"]
    overrides += ["training.save_at_end=false", "training.tensorboard=false", "rollout.group_size=2"]
    overrides += ["rollout.max_new_tokens=4", "rollout.max_turns=1", "rollout.force_answer=false"]
    cfg = load_config(None, overrides)
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(2)]
    trainer = Trainer(
        cfg, tiny_model(), tokenizer(), LettersProtocol(), None, questions, reward_fn=letter_fraction_reward
    )
    (m,) = trainer.train()
    assert math.isfinite(m["loss/policy_total"]) and m["kl/mean"] >= 0.0
