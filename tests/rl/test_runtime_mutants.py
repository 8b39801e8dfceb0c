"""The RL runtime around the loss math, on a language model whose logits are one bias vector at every position (its
head's weights are zero): every log-prob is ``-log 4`` over a vocabulary of 4, every entropy ``log 4``, and the
gradient of a token's log-prob with respect to the bias is ``onehot(token) - 1/4``, so losses and gradients are
written by hand. Each test names the slip it catches."""

from __future__ import annotations

import contextlib
import copy
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from searchrl.config import AlgorithmConfig, MemorizationConfig, load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.rl.batch import TokenScorer, collate, plan_micro_batches, response_logits, token_logprobs
from searchrl.rl.checkpoint import TrainState
from searchrl.rl.memorization import Memorizer
from searchrl.rl.metrics_log import UpdateMetrics
from searchrl.rl.passes import Passes
from searchrl.rl.sampling import Sampler
from searchrl.rl.update import SkippedSteps, StepTensors, policy_micro_loss
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.testing import letters_trainer

LOG4 = math.log(4)
PP = get_protocol("r1_searcher_pp")


class _Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(4, 2)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        return SimpleNamespace(last_hidden_state=self.emb(input_ids))


class _BiasLM(nn.Module):
    """Logits = the head's bias (zero at first) at every position."""

    def __init__(self) -> None:
        super().__init__()
        self.body = _Body()
        self.head = nn.Linear(2, 4)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def get_decoder(self) -> nn.Module:
        return self.body

    def get_output_embeddings(self) -> nn.Module:
        return self.head


def _passes(micro_rows: int = 8) -> Passes:
    acc = SimpleNamespace(
        num_processes=1,
        process_index=0,
        device=torch.device("cpu"),
        backward=lambda loss: loss.backward(),
        autocast=contextlib.nullcontext,
    )
    return Passes(acc, micro_rows, 1 << 20)


def test_the_memorization_nll_is_weighted_by_its_coefficient_over_all_counted_tokens() -> None:
    """Catches the NLL added to the gradients without ``memorization.coef`` (the trainer test only runs coef 1) and a
    micro-batch normalised by its own tokens rather than all sequences'; the uncounted token stays out."""
    lm = _BiasLM()
    # two sequences, one a micro-batch each; the second's middle token is not counted: targets 3, 0 | 1, 3
    seqs = [([1, 2], [3, 0], [1, 1]), ([2], [1, 2, 3], [1, 0, 1])]
    total = _passes(micro_rows=1).nll_gradients(TokenScorer(lm, share_prompts=False), seqs, 4.0, None, 0.5, 0)
    assert total == pytest.approx(LOG4)  # 4 tokens of -log 4, over 4 tokens (the coefficient is not in the sum)
    # 0.5 / 4 * sum over the counted tokens of (1/4 - onehot): token counts (1, 1, 0, 2) -> 1 - counts
    assert lm.head.bias.grad.tolist() == pytest.approx([0.0, 0.0, 0.125, -0.125])


def _step(mask: list[list[int]], ref_shift: float = 1.0) -> tuple:
    # prompts 1 and 2; responses 3 0 1 (its 0 retrieved) and 2 2
    mb = collate([[1], [2]], [[3, 0, 1], [2, 2]], [[1, 0, 1], [1, 1]], pad_id=0)
    mask_BT = torch.tensor(mask)
    old_BT = torch.full((2, 3), -LOG4) * mask_BT
    st = StepTensors(mask_BT, mask_BT, old_BT, torch.zeros(2, 3), (old_BT - ref_shift) * mask_BT, None, None)
    return mb, st


def test_the_micro_loss_adds_the_kl_term_and_subtracts_the_entropy_bonus() -> None:
    """Catches a KL term subtracted (the policy pushed away from the reference) and an entropy bonus added (entropy
    penalised), and a retrieved token in the KL's gradient."""
    lm = _BiasLM()
    mb, st = _step([[1, 0, 1], [1, 1, 0]])
    alg = AlgorithmConfig(name="grpo", kl_coef=0.5, kl_estimator="k1", entropy_coef=0.1, loss_agg="token_mean")
    loss, pm = policy_micro_loss(TokenScorer(lm, share_prompts=False), mb, [0, 1], st, alg, 4.0, 2.0)
    # advantages 0: no policy term; k1 = logp - ref = 1 on each of the 4 tokens; entropy log 4 on each
    assert float(loss.detach()) == pytest.approx(0.5 * 1.0 - 0.1 * LOG4)
    assert pm["entropy/mean"] == pytest.approx(LOG4) and pm["entropy/sampled_nll"] == pytest.approx(LOG4)
    loss.backward()
    # the entropy is at its maximum (no gradient); the KL's: 0.5 / 4 * sum of (onehot - 1/4) over targets 3, 1, 2, 2
    assert lm.head.bias.grad.tolist() == pytest.approx([-0.125, 0.0, 0.125, 0.0])


class _ConstCritic(nn.Module):
    """The same value ``v`` (0 at first) at every response position."""

    def __init__(self) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.zeros(()))

    def forward(self, batch) -> torch.Tensor:
        return self.v.expand(batch.response_ids.shape).clone()


def test_the_value_loss_takes_value_coef_over_the_critics_own_positions() -> None:
    """Catches the value loss's gradient without ``algorithm.value_coef``, and the critic's loss over the policy's
    positions when ``critic_mask_observations`` is off (its positions are every response token)."""
    lm, critic = _BiasLM(), _ConstCritic()
    mb, st = _step([[1, 0, 1], [1, 1, 0]])
    cmask_BT = mb.response_mask  # every response token: 5
    returns_BT = torch.tensor([[1.0, 3.0, 1.0], [1.0, 1.0, 0.0]])  # 3 on the retrieved token
    st = StepTensors(st.mask_BT, cmask_BT, st.old_logp_BT, st.adv_BT, None, torch.zeros(2, 3), returns_BT)
    alg = AlgorithmConfig(name="ppo", kl_coef=0.0, value_coef=0.5, loss_agg="token_mean")
    metrics = UpdateMetrics()
    _passes().policy_gradients(TokenScorer(lm, share_prompts=False), critic, mb, [0, 1], st, alg, metrics)
    # 0.5 * (v - R)^2 at v = 0 over the 5 critic tokens: d/dv = -(1 + 3 + 1 + 1 + 1) / 5, times value_coef 0.5
    assert float(critic.v.grad) == pytest.approx(-0.7)
    assert metrics.result()["loss/value"] == pytest.approx((0.5 * 4 + 0.5 * 9) / 5)


def test_a_skipped_step_count_starts_again_after_a_finite_one() -> None:
    """Catches skips counted over the whole run rather than in a row, and a run stopped one skip late."""
    skipped = SkippedSteps(limit=2)
    assert not skipped.finite(float("nan"))
    assert skipped.finite(1.0, torch.tensor(2.0))  # a finite step: the count starts again
    assert not skipped.finite(3.0, float("inf"))
    assert skipped.in_a_row == 1
    skipped.check("step 3")  # one in a row: under the limit
    assert not skipped.finite(float("inf"))
    with pytest.raises(ValueError, match=r"gradient norm was inf in 2 optimizer steps in a row \(up to step 4\)"):
        skipped.check("step 4")


def test_mini_batches_cover_each_row_once_in_shuffled_even_shares() -> None:
    """Catches mini-batches that are contiguous slices (no shuffle: PPO's mini-batches would hold the same rows every
    epoch) and a mini-batch count rounded down."""
    passes = _passes()
    splits = [passes.mini_batches(10, 10, 4, torch.Generator().manual_seed(s)) for s in range(5)]
    for split in splits:
        assert [len(m) for m in split] == [3, 4, 3]  # ceil(10 / 4) = 3 mini-batches, even shares of 10 rows
        assert sorted(r for m in split for r in m) == list(range(10))
    assert any(split != [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]] for split in splits)


QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(4)]


def _trainer(tmp: Path, *extra: str):
    overrides = [
        "algorithm.name=grpo",
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
    return letters_trainer(load_config(None, overrides), QUESTIONS)


def test_the_reference_log_probs_are_the_frozen_initial_models(tmp_path: Path) -> None:
    """Catches the reference pass scored by the policy itself (equal at the first step, so the KL term would stay 0
    for the whole run) and a KL put in the loss when it is in the reward (counted twice)."""
    tr = _trainer(tmp_path / "loss", "algorithm.kl_coef=0.1", "algorithm.old_logprobs=recompute")
    initial = copy.deepcopy(tr.policy)
    with torch.no_grad():
        tr.policy.get_output_embeddings().weight.mul_(3.0)  # the policy moved away from the reference
    sb = tr._advantages(tr._experience(0))
    st, mask = sb.tensors, sb.tensors.mask_BT.bool()
    assert st.ref_logp_BT is not None and mask.any()
    expected = token_logprobs(response_logits(initial, sb.batch), sb.batch.response_ids)  # (B, T)
    assert torch.allclose(st.ref_logp_BT[mask], expected[mask], atol=1e-5)
    assert not torch.allclose(st.old_logp_BT[mask], expected[mask], atol=1e-3)  # the moved policy's
    in_reward = _trainer(tmp_path / "reward", "algorithm.kl_coef=0.1", "algorithm.kl_in_reward=true")
    assert in_reward._advantages(in_reward._experience(0)).tensors.ref_logp_BT is None


def test_the_update_steps_on_gradients_clipped_to_max_grad_norm(tmp_path: Path) -> None:
    """Catches gradients left unclipped (Adam's step barely shows their scale, so the weights alone do not tell)."""
    tr = _trainer(tmp_path, "algorithm.kl_coef=0.0", "training.max_grad_norm=0.001", "algorithm.mini_batch_size=8")
    m = tr.train_step()
    assert m["grad_norm"] > 0.01  # the norm before clipping is logged
    grads = [p.grad for p in tr.policy.parameters() if p.grad is not None]
    assert float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) == pytest.approx(0.001, rel=1e-3)


def test_a_resume_restores_the_schedule_the_optimizer_moments_the_kl_coefficient_and_the_position(
    tmp_path: Path,
) -> None:
    """Catches a resume that restarts the warm-up, drops Adam's moments or step count, forgets the adaptive KL
    coefficient, or leaves an engine with its own weights on the ones it held before the load."""
    extra = ("algorithm.kl_coef=0.0", "training.warmup_steps=4", "algorithm.mini_batch_size=8", "training.steps=3")
    tr = _trainer(tmp_path, *extra)
    tr.train_step()  # one optimizer step (8 rows, mini-batches of 8); the schedule moves once
    tr.kl_ctrl.value = tr.state.kl_coef = 0.123  # as an adaptive controller leaves it
    tr.save_checkpoint(tmp_path / "checkpoint")
    resumed = _trainer(tmp_path, *extra)
    assert resumed.sched.get_last_lr() == [pytest.approx(2.5e-3)]  # a fresh run's first step: 1/4 of 1e-2
    resumed.load_checkpoint(tmp_path / "checkpoint")
    assert resumed.sched.get_last_lr() == [pytest.approx(5e-3)]  # the second step's: 2/4 of 1e-2
    moments = list(resumed.opt.state.values())
    assert moments and all(float(s["step"]) == 1.0 and s["exp_avg_sq"].any() for s in moments)
    assert resumed.kl_ctrl.value == 0.123
    assert (resumed.state.step, resumed.state.data_epoch, resumed.state.data_pos) == (1, 0, 2)
    assert resumed._weights_version == 1  # an engine with its own copy of the weights is sent the loaded ones


def test_the_behaviour_snapshot_takes_the_weights_each_update_wrote_before_the_next_rollout(tmp_path: Path) -> None:
    """Catches a snapshot that is never refreshed: the background rollouts would come from the initial weights for
    the whole run, an off-policy lag growing with every step instead of staying at 1."""
    tr = _trainer(tmp_path, "algorithm.kl_coef=0.0", "training.off_policy_steps=1", "training.steps=3")
    rollouts = tr.rollouts
    head = tr.policy.get_output_embeddings().weight
    snap_head = rollouts.snapshot.get_output_embeddings().weight
    assert snap_head is not head
    rollouts.take(0)  # rolled out now; step 1's rollout starts on the same weights
    assert rollouts.metrics()["rollout/staleness"] == 0.0
    before = head.detach().clone()
    with torch.no_grad():
        head.mul_(3.0)
    tr._weights_version += 1  # what an optimizer step does
    rollouts.take(1)  # prefetched: made before the update; step 2's starts on the updated weights
    assert rollouts.metrics()["rollout/staleness"] == 1.0
    rollouts.settle()
    assert torch.equal(snap_head, 3.0 * before)
    rollouts.close()


def test_without_a_pool_the_memorization_loss_takes_at_most_batch_size_of_the_steps_fresh_paths() -> None:
    """Catches every fresh path used when ``memorization.pool_size`` is 0 (``batch_size`` would bound nothing)."""
    tok = ByteTokenizer()
    good = "<|begin_internal_answer|>I remember Lyon is in France.<|end_internal_answer|>\nSo \\boxed{France}."
    m = Memorizer(
        MemorizationConfig(coef=0.1, pool_size=0, batch_size=2), ScriptedGenerator(tok, lambda ctx: good), PP, tok
    )
    trajs = []
    for qid in "abc":
        t = Trajectory(f"{qid}#0", qid, qid, f"Where is {qid}?", ["France"], prompt_ids=tok.encode(f"Q {qid}"))
        obs = " <|begin_search_result|>\n(1)Doc: Lyon is a city in France.\n<|end_search_result|>"
        t.turns.append(
            Turn("<|begin_external_search|>q<|end_external_search|>", "search", "stop", ["q"], observation=obs)
        )
        t.turns.append(Turn("\\boxed{France}", "answer", "eos"))
        t.answer = "France"
        trajs.append(t)
    seqs = m(0, trajs)
    assert [s[0] for s in seqs] == [tok.encode("Q a"), tok.encode("Q b")]  # the first 2 of 3 valid paths
    assert m.last_metrics["memorization/valid"] == 3 and m.last_metrics["memorization/used"] == 2
    assert len(m.pool) == 0


class _RecordingEngine:
    """Rolls out one empty trajectory per question and records each call's questions, seed and group prefix."""

    def __init__(self) -> None:
        self.retriever = None
        self.generator = SimpleNamespace(counters=lambda: {"tokens": 0})
        self.stats: dict[str, float] = {}
        self.calls: list[tuple] = []

    def run(self, questions, group_size, temperature, top_p, seed, group_prefix):
        self.calls.append(([q.id for q in questions], seed, group_prefix))
        return [Trajectory(f"{q.id}#0", q.id, q.id, q.question, list(q.answers), []) for q in questions]


def test_each_step_samples_with_its_own_seed_and_moves_the_data_position_across_epochs(tmp_path: Path) -> None:
    """Catches a sampling seed without the step (a question met again in a later epoch would draw the same random
    stream), group ids without the step, and a data position that does not carry into the next epoch."""
    cfg = load_config(None, ["training.seed=1", "training.prompts_per_step=2", f"training.output_dir={tmp_path}"])
    questions = [QAExample(f"q{i}", f"question {i}", ["x"]) for i in range(3)]
    sampler = Sampler(cfg, questions, _passes(), 0, 1)
    engine, state = _RecordingEngine(), TrainState()
    positions = []
    for step in (0, 1, 2):
        exp = sampler.experience(engine, lambda trajs: ([0.5] * len(trajs), {}), step, state)
        positions.append((state.data_epoch, state.data_pos))
    assert positions == [(0, 2), (1, 1), (2, 0)]  # 2 of epoch 0; its last and 1 of epoch 1; the rest of epoch 1
    # 1 * 7919 + step * 101 (+ rank 0, round 0)
    assert [(seed, prefix) for _, seed, prefix in engine.calls] == [(7919, "s0/"), (8020, "s1/"), (8121, "s2/")]
    asked = [q for ids, _, _ in engine.calls for q in ids]
    assert sorted(asked[:3]) == ["q0", "q1", "q2"] and sorted(asked[3:]) == ["q0", "q1", "q2"]  # each epoch once
    assert exp.reward_metrics["reward/total"] == 0.5


def test_truncated_importance_weights_leave_retrieved_tokens_at_one_under_the_masking_ablation() -> None:
    """Catches TIS weights taken at retrieved tokens too (their sampler log-prob is a stand-in 0, so the weight
    ``p_old / 1`` would shrink their loss) when ``mask_observations`` is off and they are in the loss."""
    lm = _BiasLM()
    sampler_lp = [[-LOG4, 0.0, -LOG4], [-LOG4, -LOG4]]  # the sampler agreed with the trainer: weights 1
    mb = collate([[1], [2]], [[3, 0, 1], [2, 2]], [[1, 0, 1], [1, 1]], sampler_lp, pad_id=0)
    mask_BT = mb.response_mask  # the ablation: every response token, 5
    old_BT = torch.full((2, 3), -LOG4) * mask_BT
    st = StepTensors(mask_BT, mask_BT, old_BT, mask_BT.float(), None, None, None)  # advantage 1 everywhere
    alg = AlgorithmConfig(name="grpo", kl_coef=0.0, tis_cap=2.0, loss_agg="token_mean", mask_observations=False)
    loss, _ = policy_micro_loss(TokenScorer(lm, share_prompts=False), mb, [0, 1], st, alg, 5.0, 2.0)
    assert float(loss.detach()) == pytest.approx(-1.0)  # -advantage x ratio 1 x weight 1 on each of the 5 tokens


def test_micro_batches_hold_at_most_max_rows_and_count_each_distinct_prompt_in_their_cost() -> None:
    """Catches a micro-batch one row over ``max_rows`` and a cost that counts one prompt however many distinct ones
    a micro-batch holds (its activations would outgrow the token budget)."""
    # distinct prompts of 2 tokens, responses of 1..5: packed longest first, two rows at a time
    assert plan_micro_batches([2] * 5, [1, 2, 3, 4, 5], 2, 1000) == [[4, 3], [2, 1], [0]]
    # rows 0 and 1 share a 10-token prompt: 10 + 2 x 2 = 14; with row 2's own prompt 2 x 10 + 3 x 2 = 26 > 20
    assert plan_micro_batches([10, 10, 10], [2, 2, 2], 3, 20, ["a", "a", "b"]) == [[0, 1], [2]]
