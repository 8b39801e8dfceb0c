"""RL math vs independent plain-Python loop implementations (float64, tolerance 1e-6), plus gradient masking,
aggregation invariance and edge cases. The references below deliberately use per-element loops, ``math`` and
Python lists rather than the vectorised tricks (``where``, ``index_add``, flipped cumsums) of the module."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from searchrl.rl.algorithms import (
    aggregate_loss,
    entropy_from_logits,
    gae_advantages,
    group_centred,
    group_normalised,
    grpo_advantages,
    informative_rows,
    kl_penalty,
    masked_mean,
    masked_sum,
    policy_loss,
    reinforce_pp_returns,
    rloo_advantages,
    tis_weights,
    value_loss,
    whiten,
)

TOL = 1e-6
MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]
B, T, V = 6, 11, 5


# ---------------------------------------------------------------------------------------------------------------
# random batches with realistic masks: policy tokens, inserted observation spans, trailing padding, an empty row
# ---------------------------------------------------------------------------------------------------------------


def make_mask(gen: torch.Generator, empty_row: bool = False) -> torch.Tensor:
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        length = int(torch.randint(3, T + 1, (1,), generator=gen))  # response length before right padding
        mask[b, :length] = True
        if length >= 6:  # an inserted observation block in the middle (not actions)
            start = int(torch.randint(1, length - 3, (1,), generator=gen))
            mask[b, start : start + 2] = False
    if empty_row:
        mask[-1] = False
    return mask


def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def with_garbage(x: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    """Put a garbage value at masked positions (what padding slots often hold)."""
    return torch.where(mask, x, torch.full_like(x, value))


def close(a: float | torch.Tensor, b: float | torch.Tensor) -> bool:
    a, b = (x.detach().item() if isinstance(x, torch.Tensor) else x for x in (a, b))
    return abs(a - b) <= TOL * max(1.0, abs(b))


def assert_tensor_matches(actual: torch.Tensor, expected: list[list[float]]) -> None:
    ref = torch.tensor(expected, dtype=torch.float64)
    assert actual.shape == ref.shape
    assert torch.allclose(actual, ref, atol=TOL, rtol=TOL), (actual - ref).abs().max()


# ---------------------------------------------------------------------------------------------------------------
# plain-loop references
# ---------------------------------------------------------------------------------------------------------------


def ref_aggregate(per_token, mask, mode, global_tokens=None, global_seqs=None):
    """per_token[b][t]: floats or scalar tensors; only entries with mask True are read."""
    rows = []
    n_tokens = 0
    for b in range(len(mask)):
        vals = [per_token[b][t] for t in range(len(mask[b])) if mask[b][t]]
        n_tokens += len(vals)
        if vals:
            rows.append((sum(vals[1:], vals[0]), len(vals)))
    if mode == "token_mean":
        total = sum((s for s, _ in rows), 0.0)
        return total / (global_tokens if global_tokens is not None else max(n_tokens, 1))
    per_seq = [s / n if mode == "seq_mean_token_mean" else s for s, n in rows]
    return sum(per_seq, 0.0) / (global_seqs if global_seqs is not None else max(len(rows), 1))


def ref_gae(rewards, values, mask, gamma, lam):
    adv = [[0.0] * len(r) for r in rewards]
    ret = [[0.0] * len(r) for r in rewards]
    for b in range(len(rewards)):
        actions = [t for t in range(len(mask[b])) if mask[b][t]]
        # reward of action k = its own reward + rewards on the non-action positions up to the next action
        step_rewards = []
        for k, t in enumerate(actions):
            end = actions[k + 1] if k + 1 < len(actions) else len(mask[b])
            step_rewards.append(sum(rewards[b][t:end]))
        running = 0.0
        for k in reversed(range(len(actions))):
            t = actions[k]
            next_v = values[b][actions[k + 1]] if k + 1 < len(actions) else 0.0
            delta = step_rewards[k] + gamma * next_v - values[b][t]
            running = delta + gamma * lam * running
            adv[b][t] = running
            ret[b][t] = running + values[b][t]
    return adv, ret


def ref_groups(ids):
    groups: dict = {}
    for i, g in enumerate(ids):
        groups.setdefault(g, []).append(i)
    return groups


def ref_grpo(scores, ids, mask, norm_by_std, eps):
    adv_seq = [0.0] * len(scores)
    for members in ref_groups(ids).values():
        if len(members) < 2:
            continue
        vals = [scores[i] for i in members]
        mean = sum(vals) / len(vals)
        std = statistics.stdev(vals)
        for i in members:
            adv_seq[i] = (scores[i] - mean) / (std + eps) if norm_by_std else scores[i] - mean
    return [[adv_seq[b] if mask[b][t] else 0.0 for t in range(len(mask[b]))] for b in range(len(mask))]


def ref_rloo(scores, ids, mask):
    adv_seq = [0.0] * len(scores)
    for members in ref_groups(ids).values():
        for i in members:
            others = [scores[j] for j in members if j != i]
            adv_seq[i] = scores[i] - sum(others) / len(others) if others else 0.0
    return [[adv_seq[b] if mask[b][t] else 0.0 for t in range(len(mask[b]))] for b in range(len(mask))]


def ref_reinforce_pp(scores, kl, mask, kl_coef, eps=1e-8):
    returns = [[0.0] * len(row) for row in mask]
    for b in range(len(mask)):
        counted = [t for t in range(len(mask[b])) if mask[b][t]]
        token_reward = {t: -kl_coef * kl[b][t] for t in counted}
        if counted:
            token_reward[counted[-1]] += scores[b]
        running = 0.0
        for t in reversed(counted):
            running += token_reward[t]
            returns[b][t] = running
    flat = [returns[b][t] for b in range(len(mask)) for t in range(len(mask[b])) if mask[b][t]]
    mean = sum(flat) / len(flat)
    var = sum((x - mean) ** 2 for x in flat) / len(flat)
    return [
        [(returns[b][t] - mean) / math.sqrt(var + eps) if mask[b][t] else 0.0 for t in range(len(mask[b]))]
        for b in range(len(mask))
    ]


def ref_kl(logp, ref, estimator):
    d = logp - ref
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    x = min(max(ref - logp, -20.0), 20.0)
    return min(math.exp(x) - x - 1.0, 10.0)


def ref_policy_loss(logp, old, adv, mask, clip_eps, dual_clip, mode, global_tokens=None, global_seqs=None):
    """logp: a leaf tensor, indexed element by element so autograd gives the reference gradient."""
    per_token = [[None] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            a = float(adv[b, t])
            rho = torch.exp(logp[b, t] - float(old[b, t]))
            unclipped = -a * rho
            clipped = -a * torch.clamp(rho, 1.0 - clip_eps, 1.0 + clip_eps)
            loss = unclipped if unclipped.item() >= clipped.item() else clipped
            if dual_clip is not None and a < 0 and loss.item() > -a * dual_clip:
                loss = torch.tensor(-a * dual_clip, dtype=torch.float64)
            per_token[b][t] = loss
    return ref_aggregate(per_token, mask.tolist(), mode, global_tokens, global_seqs)


def ref_value_loss(values, old, returns, mask, clip, mode):
    per_token = [[None] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            v, o, r = values[b, t], float(old[b, t]), float(returns[b, t])
            l1 = (v - r) ** 2
            if clip is None:
                per_token[b][t] = 0.5 * l1
                continue
            v_clip = o + torch.clamp(v - o, -clip, clip)
            l2 = (v_clip - r) ** 2
            per_token[b][t] = 0.5 * (l1 if l1.item() >= l2.item() else l2)
    return ref_aggregate(per_token, mask.tolist(), mode)


def ref_entropy(logits, mask, mode):
    per_token = [[None] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            if mask[b][t]:
                z = [logits[b, t, v] for v in range(logits.shape[-1])]
                zmax = max(x.item() for x in z)
                exps = [torch.exp(x - zmax) for x in z]
                total = sum(exps[1:], exps[0])
                per_token[b][t] = -sum(((e / total) * torch.log(e / total) for e in exps), 0.0)
    return ref_aggregate(per_token, mask.tolist(), mode)


# ---------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------


def test_masked_sum_and_mean_ignore_masked_garbage_and_empty_mask_gives_zero():
    x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    assert masked_sum(x, mask).item() == 13.0
    assert masked_mean(x, mask).item() == 13.0 / 4
    assert masked_mean(x, mask, dim=-1).tolist() == [1.5, 5.0]
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_whiten_matches_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen)
    x = with_garbage(randn(gen, B, T) * 3 + 1, mask, 1e6)
    out = whiten(x, mask)
    flat = [float(x[b, t]) for b in range(B) for t in range(T) if mask[b, t]]
    mean = sum(flat) / len(flat)
    var = sum((v - mean) ** 2 for v in flat) / len(flat)
    expected = [
        [(float(x[b, t]) - mean) / math.sqrt(var + 1e-8) if mask[b, t] else 0.0 for t in range(T)] for b in range(B)
    ]
    assert_tensor_matches(out, expected)


# ---------------------------------------------------------------------------------------------------------------
# advantages
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "gamma", "lam"), [(0, 1.0, 1.0), (1, 0.99, 0.95), (2, 0.9, 0.5), (3, 1.0, 0.0)])
def test_gae_matches_loop_over_action_positions(seed, gamma, lam):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen, empty_row=seed == 3)
    rewards = randn(gen, B, T)  # rewards everywhere, including on inserted tokens: credited to the previous action
    values = with_garbage(randn(gen, B, T), mask, 1e3)  # values on non-actions must be ignored
    (adv, ret), metrics = gae_advantages(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = ref_gae(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam)
    assert_tensor_matches(adv, ref_adv)
    assert_tensor_matches(ret, ref_ret)
    assert set(metrics) >= {"gae/advantage_mean", "gae/return_mean"}
    assert all(math.isfinite(v) for v in metrics.values())


def test_gae_with_gamma_lambda_one_equals_unmasked_gae_at_action_positions():
    """With gamma = lam = 1 (the papers' setting) skipping inserted tokens or treating them as steps (Search-R1's
    code) gives the same advantages on the policy's tokens: A_t = sum of rewards from t on - V_t."""
    gen = torch.Generator().manual_seed(7)
    attention = torch.ones(B, T, dtype=torch.bool)
    action = make_mask(gen) | (torch.arange(T) == 0)  # inserted spans, no padding
    rewards, values = randn(gen, B, T), randn(gen, B, T)
    (adv_skip, _), _ = gae_advantages(rewards, values, action, 1.0, 1.0)
    (adv_all, _), _ = gae_advantages(rewards, values, attention, 1.0, 1.0)
    assert torch.allclose(adv_skip[action], adv_all[action], atol=1e-12)
    expected = rewards.flip(-1).cumsum(-1).flip(-1) - values
    assert torch.allclose(adv_skip[action], expected[action], atol=1e-12)
    # and with gamma < 1 they differ, so the skipping is doing something
    (adv_skip, _), _ = gae_advantages(rewards, values, action, 0.9, 0.9)
    (adv_all, _), _ = gae_advantages(rewards, values, attention, 0.9, 0.9)
    assert not torch.allclose(adv_skip[action], adv_all[action], atol=1e-3)


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_grpo_matches_loop(seed, norm_by_std):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen)
    scores = randn(gen, B)
    ids = ["q7", ("nq", 0), "q7", ("hotpot", 0), ("nq", 0), "q7"]  # interleaved, hashable, one singleton group
    adv, metrics = grpo_advantages(scores, ids, mask, norm_by_std=norm_by_std)
    assert_tensor_matches(adv, ref_grpo(scores.tolist(), ids, mask.tolist(), norm_by_std, 1e-6))
    assert metrics["grpo/groups"] == 3.0 and metrics["grpo/singleton_groups"] == 1.0


def test_grpo_std_off_is_plain_centering_and_std_on_is_scaled():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    mask = torch.ones(4, 2)
    off, _ = grpo_advantages(scores, [0, 0, 0, 0], mask, norm_by_std=False)
    assert torch.allclose(off[:, 0], torch.tensor([0.75, -0.25, -0.25, -0.25], dtype=torch.float64))
    on, _ = grpo_advantages(scores, [0, 0, 0, 0], mask, norm_by_std=True)
    assert torch.allclose(on[:, 0], off[:, 0] / (0.5 + 1e-6))  # unbiased std of [1,0,0,0] is 0.5


def test_grpo_accepts_tensor_ids_and_edge_groups_give_zero_not_nan():
    scores = torch.tensor([1.0, 1.0, 0.3, 2.0], dtype=torch.float64)
    mask = torch.ones(4, 3)
    adv, metrics = grpo_advantages(scores, torch.tensor([10, 10, 11, 12]), mask)  # all-equal group + 2 singletons
    assert torch.equal(adv, torch.zeros(4, 3, dtype=torch.float64))
    assert metrics["grpo/singleton_groups"] == 2.0 and metrics["grpo/zero_std_frac"] == 0.5
    adv, _ = grpo_advantages(scores[:1], ["only"], mask[:1])  # a batch that is a single sample
    assert torch.isfinite(adv).all() and adv.abs().sum() == 0
    with pytest.raises(ValueError, match="group ids"):
        grpo_advantages(scores, [1, 2], mask)


def test_advantages_take_python_lists_as_float32_tensors_and_leave_tensors_as_they_are():
    from searchrl.config import AlgorithmConfig
    from searchrl.rl.advantages import get_estimator

    scores, groups, mask = [1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"], [[1, 1], [1, 0], [1, 1], [1, 1]]
    scores_t, mask_t = torch.tensor(scores), torch.tensor(mask, dtype=torch.float32)
    adv, metrics = grpo_advantages(scores, groups, mask)
    assert adv.dtype == torch.float32 and metrics == grpo_advantages(scores_t, groups, mask_t)[1]
    assert torch.equal(adv, grpo_advantages(scores_t, groups, mask_t)[0]) and adv[1, 1] == 0
    assert torch.equal(rloo_advantages(scores, groups, mask)[0], rloo_advantages(scores_t, groups, mask_t)[0])
    assert torch.equal(group_centred(scores, groups), group_centred(scores_t, groups))
    assert torch.equal(group_normalised(scores, groups), group_normalised(scores_t, groups))
    zeros = [[0.0, 0.0]] * 4
    ref = reinforce_pp_returns(scores_t, torch.zeros(4, 2), mask_t, 0.1)[0]
    assert torch.equal(reinforce_pp_returns(scores, zeros, mask, 0.1)[0], ref)
    (adv_gae, ret), _ = gae_advantages([[0.0, 1.0]], [[0.5, 0.25]], [[1, 1]])
    assert torch.allclose(adv_gae, torch.tensor([[0.5, 0.75]])) and torch.allclose(ret, torch.tensor([[1.0, 1.0]]))
    exact = torch.tensor(scores, dtype=torch.float64)  # a tensor keeps its dtype
    assert grpo_advantages(exact, groups, mask_t)[0].dtype == torch.float64
    for name in ("grpo", "dr_grpo", "gspo", "rloo", "reinforce_pp", "ppo"):
        est, cfg = get_estimator(name), AlgorithmConfig(name=name)
        values = zeros if name == "ppo" else None
        listed = est.fn(scores, zeros, values, mask, groups, cfg)[0]
        tensors = est.fn(
            scores_t, torch.zeros(4, 2), None if values is None else torch.zeros(4, 2), mask_t, groups, cfg
        )
        assert torch.equal(listed, tensors[0]), name


@pytest.mark.parametrize("value", [0.1, 0.7, 1 / 3, 0.8571428571428571])
def test_a_group_of_equal_inexact_scores_has_no_signal(value):
    # 16 copies of a score binary floating point cannot hold: sum / n leaves a residue of ~1e-17 which, divided by a
    # std of ~1e-17, would give every row an advantage of order 1 and pass the group as informative
    scores = torch.tensor([value] * 16 + [0.0, 1.0], dtype=torch.float32)
    ids = [0] * 16 + [1, 1]
    mask = torch.ones(18, 2)
    adv, metrics = grpo_advantages(scores, ids, mask)
    assert torch.equal(adv[:16], torch.zeros(16, 2)) and metrics["grpo/zero_std_frac"] == pytest.approx(16 / 18)
    assert torch.equal(group_normalised(scores, ids)[:16], torch.zeros(16))
    assert torch.equal(group_centred(scores, ids)[:16], torch.zeros(16))
    assert torch.equal(rloo_advantages(scores, ids, mask)[0][:16], torch.zeros(16, 2))
    assert informative_rows(scores.tolist(), ids)[0] == [16, 17]


@pytest.mark.parametrize("seed", [0, 1])
def test_rloo_matches_leave_one_out_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen, empty_row=True)
    scores = randn(gen, B)
    ids = [3, 1, 3, 1, 3, 99]  # groups of 3, 2 and a singleton
    adv, metrics = rloo_advantages(scores, ids, mask)
    assert_tensor_matches(adv, ref_rloo(scores.tolist(), ids, mask.tolist()))
    assert metrics["rloo/singleton_groups"] == 1.0


def test_rloo_pair_is_difference_and_singleton_is_zero():
    adv, _ = rloo_advantages(torch.tensor([1.0, 0.25, 5.0]), ["a", "a", "b"], torch.ones(3, 1))
    assert adv[:, 0].tolist() == [0.75, -0.75, 0.0]


@pytest.mark.parametrize(("seed", "kl_coef"), [(0, 0.0), (1, 1e-4), (2, 0.3)])
def test_reinforce_pp_matches_loop(seed, kl_coef):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen, empty_row=seed == 2)
    scores = randn(gen, B)
    kl = with_garbage(randn(gen, B, T).abs(), mask, 1e4)  # KL on inserted tokens must not enter the return
    adv, metrics = reinforce_pp_returns(scores, kl, mask, kl_coef)
    assert_tensor_matches(adv, ref_reinforce_pp(scores.tolist(), kl.tolist(), mask.tolist(), kl_coef))
    assert abs(masked_mean(adv, mask).item()) < 1e-9  # whitened over the counted tokens
    assert metrics["reinforce_pp/empty_rows"] == (1.0 if seed == 2 else 0.0)


def test_group_centred_is_reinforce_baseline():
    """R1-Searcher's ``reinforce_baseline``: each score minus its group's mean; a group of one gets 0."""
    scores = torch.tensor([1.0, 0.0, 0.5, 2.0, 7.0], dtype=torch.float64)
    got = group_centred(scores, ["a", "a", "a", "b", "c"]).tolist()
    assert got == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0], abs=1e-12)
    gen = torch.Generator().manual_seed(3)
    s2, ids = randn(gen, 12), [f"g{i % 3}" for i in range(12)]
    ref = [s2[i].item() - statistics.fmean(s2[j].item() for j in range(12) if ids[j] == ids[i]) for i in range(12)]
    assert group_centred(s2, ids).tolist() == pytest.approx(ref, abs=1e-9)


def test_group_normalised_is_openrlhf_group_norm():
    """R1-Searcher's stage-1 ``group_norm``: (r - group mean) / (unbiased group std + 1e-9); a group of one gets 0."""
    scores = torch.tensor([1.0, 0.0, 0.5, 2.0, 7.0, 7.0], dtype=torch.float64)
    got = group_normalised(scores, ["a", "a", "a", "b", "c", "c"]).tolist()
    assert got == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0], abs=1e-6)  # group a: mean 0.5, std 0.5
    gen = torch.Generator().manual_seed(4)
    s2, ids = randn(gen, 12), [f"g{i % 3}" for i in range(12)]
    members = {g: [s2[j].item() for j in range(12) if ids[j] == g] for g in set(ids)}
    ref = [
        (s2[i].item() - statistics.fmean(members[ids[i]])) / (statistics.stdev(members[ids[i]]) + 1e-9)
        for i in range(12)
    ]
    assert group_normalised(s2, ids).tolist() == pytest.approx(ref, abs=1e-9)


def test_group_norm_returns_are_not_whitened():
    """``whiten_returns=False`` (group_norm): the advantage is the raw return-to-go of the normalised score."""
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    kl = torch.full((2, 4), 0.5, dtype=torch.float64)
    scores = torch.tensor([1.0, -1.0], dtype=torch.float64)
    adv, _ = reinforce_pp_returns(scores, kl, mask, 0.1, whiten_returns=False)
    # row 0: counted 0,1,3; rewards -0.05 each, +1 at position 3 -> returns 0.85, 0.9, 0, 0.95
    assert adv[0].tolist() == pytest.approx([0.85, 0.90, 0.0, 0.95])
    assert adv[1].tolist() == pytest.approx([-1.15, -1.10, -1.05, 0.0])
    whitened, _ = reinforce_pp_returns(scores, kl, mask, 0.1)
    assert abs(masked_mean(whitened, mask).item()) < 1e-9 and not torch.allclose(whitened, adv)


# ---------------------------------------------------------------------------------------------------------------
# KL
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("seed", [0, 1])
def test_kl_estimators_match_loop_and_masked_grad_is_zero(estimator, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen)
    ref = randn(gen, B, T) - 2
    logp = ref + randn(gen, B, T)
    logp[0, 0], logp[1, 0] = ref[0, 0] - 30.0, ref[1, 0] + 30.0  # outside k3's clamps
    mask[0, 0] = mask[1, 0] = True
    logp = with_garbage(logp, mask, float("-inf")).requires_grad_(True)  # padding garbage must not make NaN grads
    kl, metrics = kl_penalty(logp, ref, mask, estimator)
    expected = [
        [ref_kl(float(logp.detach()[b, t]), float(ref[b, t]), estimator) if mask[b, t] else 0.0 for t in range(T)]
        for b in range(B)
    ]
    assert_tensor_matches(kl.detach(), expected)
    assert close(metrics["kl/mean"], sum(map(sum, expected)) / mask.sum().item())
    for mode in MODES:  # as a loss term
        logp.grad = None
        aggregate_loss(kl, mask, mode).backward(retain_graph=True)
        assert torch.isfinite(logp.grad).all()
        assert torch.all(logp.grad[~mask] == 0)
    if estimator == "k3":
        assert kl[0, 0].item() == 10.0 and logp.grad[0, 0] == 0  # capped, no gradient through the cap


# ---------------------------------------------------------------------------------------------------------------
# losses
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("seed", "dual_clip"), [(0, None), (1, 3.0), (2, 1.5)])
def test_policy_loss_matches_loop_in_value_and_gradient(mode, seed, dual_clip):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen, empty_row=seed == 2)
    old = randn(gen, B, T) * 0.3 - 1
    base = (old + randn(gen, B, T) * 0.5).detach()  # ratios spread well beyond 1 +- eps
    adv = randn(gen, B, T)
    logp = base.clone().requires_grad_(True)
    loss, metrics = policy_loss(logp, old, adv, mask, 0.2, dual_clip, mode)
    loss.backward()
    ref_logp = base.clone().requires_grad_(True)
    ref = ref_policy_loss(ref_logp, old, adv, mask, 0.2, dual_clip, mode)
    ref.backward()
    assert close(loss, ref)
    assert torch.allclose(logp.grad, ref_logp.grad, atol=TOL)
    assert torch.all(logp.grad[~mask] == 0)
    assert 0.0 < metrics["policy/clip_frac"] < 1.0
    assert metrics["policy/ratio_min"] <= metrics["policy/ratio_mean"] <= metrics["policy/ratio_max"]
    ratios = [math.exp(float(base[b, t] - old[b, t])) for b in range(B) for t in range(T) if mask[b, t]]
    assert close(metrics["policy/ratio_max"], max(ratios))
    assert close(metrics["policy/approx_kl"], sum(r - 1 - math.log(r) for r in ratios) / len(ratios))


def test_policy_loss_masked_garbage_gets_exactly_zero_gradient():
    gen = torch.Generator().manual_seed(5)
    mask = make_mask(gen)
    logp = with_garbage(randn(gen, B, T), mask, float("-inf")).requires_grad_(True)
    old = with_garbage(randn(gen, B, T), mask, float("nan"))
    adv = with_garbage(randn(gen, B, T), mask, float("inf"))
    loss, metrics = policy_loss(logp, old, adv, mask, 0.2, 3.0, "seq_mean_token_mean")
    loss.backward()
    assert torch.isfinite(loss) and all(math.isfinite(v) for v in metrics.values())
    assert torch.all(logp.grad[~mask] == 0) and torch.isfinite(logp.grad).all()
    assert (logp.grad[mask] != 0).any()


def test_dual_clip_caps_negative_advantage_loss_and_leaves_positive_alone():
    log10 = math.log(10.0)
    logp = torch.tensor([[log10, log10, math.log(1.1)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([[-1.0, 1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3)
    plain, m_plain = policy_loss(logp, old, adv, mask, 0.2, None, "seq_mean_token_sum")
    # A<0, ratio 10: max(10, 1.2) = 10;  A>0, ratio 10: max(-10, -1.2) = -1.2;  A<0, ratio 1.1: 1.1
    assert close(plain, 10.0 - 1.2 + 1.1)
    assert m_plain["policy/dual_clip_frac"] == 0.0
    dual, m_dual = policy_loss(logp, old, adv, mask, 0.2, 3.0, "seq_mean_token_sum")
    assert close(dual, 3.0 - 1.2 + 1.1)  # only the first token is capped at -c * A = 3
    assert close(m_dual["policy/dual_clip_frac"], 1 / 3)
    dual.backward()
    # capped token and clipped positive token: no gradient; unclipped token: d(-A * rho)/dlogp = rho = 1.1
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] == 0 and close(logp.grad[0, 2], 1.1)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        policy_loss(logp, old, adv, mask, 0.2, 1.0)


def test_clip_higher_raises_only_the_upper_bound():
    """DAPO's clip-higher: a positive-advantage token is clipped at 1 + eps_high, a negative one still at 1 - eps."""
    logp = torch.tensor([[math.log(1.25), math.log(0.7)]], dtype=torch.float64, requires_grad=True)
    old, mask = torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2)
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    same, _ = policy_loss(logp, old, adv, mask, 0.2, None, "seq_mean_token_sum")
    assert close(same, -1.2 + 0.8)  # ratio 1.25 clipped at 1.2; ratio 0.7 for A < 0: max(0.7, 0.8)
    higher, m = policy_loss(logp, old, adv, mask, 0.2, None, "seq_mean_token_sum", clip_eps_high=0.28)
    assert close(higher, -1.25 + 0.8) and m["policy/clip_frac"] == 0.5  # 1.25 is inside 1.28 now
    with pytest.raises(ValueError, match="clip_eps_high must be > 0"):
        policy_loss(logp, old, adv, mask, 0.2, None, clip_eps_high=0.0)
    from searchrl.config import load_config

    assert load_config(None, ["algorithm.clip_eps_high=0.28"]).algorithm.clip_eps_high == 0.28


def test_truncated_importance_weights_scale_each_sampled_tokens_loss_up_to_the_cap():
    """TIS: weight min(pi_old / pi_rollout, cap) on sampled tokens, 1 on a retrieved one (no rollout log-prob); the
    loss and gradient of each token are its unweighted ones times its weight."""
    old = torch.log(torch.tensor([[0.5, 0.4, 0.9, 0.3]], dtype=torch.float64))
    rollout = torch.log(torch.tensor([[0.5, 0.1, 0.3, 0.0]], dtype=torch.float64)).nan_to_num(neginf=0.0)
    sampled = torch.tensor([[1, 1, 1, 0]])
    w, m = tis_weights(old, rollout, sampled, cap=2.0)
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 2.0, 1.0]], dtype=torch.float64))  # 4 and 3 capped at 2
    assert close(m["tis/weight_mean"], 5 / 3) and close(m["tis/capped_frac"], 2 / 3)
    w3, _ = tis_weights(old, rollout, sampled, cap=3.5)
    assert close(w3[0, 2], 3.0) and close(w3[0, 1], 3.5)
    logp = torch.log(torch.tensor([[0.55, 0.4, 0.8, 0.3]], dtype=torch.float64)).requires_grad_()
    adv, mask = torch.tensor([[1.0, -1.0, 0.5, 2.0]], dtype=torch.float64), torch.ones(1, 4)
    plain, _ = policy_loss(logp, old, adv, mask, 0.2, None, "seq_mean_token_sum")
    (g_plain,) = torch.autograd.grad(plain, logp)
    weighted, _ = policy_loss(logp, old, adv, mask, 0.2, None, "seq_mean_token_sum", weights_BT=w3)
    (g_weighted,) = torch.autograd.grad(weighted, logp)
    assert torch.allclose(g_weighted, g_plain * w3)
    per_token = [
        policy_loss(logp[:, i : i + 1], old[:, i : i + 1], adv[:, i : i + 1], mask[:, :1])[0] for i in range(4)
    ]
    assert close(weighted.detach(), sum(float(w3[0, i]) * float(per_token[i].detach()) for i in range(4)))
    from searchrl.config import load_config

    with pytest.raises(ValueError, match="greater than or equal to 1"):
        load_config(None, ["algorithm.tis_cap=0.5"])
    with pytest.raises(ValueError, match="tis_cap applies to token losses"):
        load_config(None, ["algorithm.name=gspo", "algorithm.tis_cap=2"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("seed", "clip"), [(0, 0.2), (1, None), (2, 0.05)])
def test_value_loss_matches_loop_and_masked_grad_is_zero(mode, seed, clip):
    gen = torch.Generator().manual_seed(seed)
    mask = make_mask(gen)
    base = randn(gen, B, T)
    old = with_garbage(base + randn(gen, B, T) * 0.3, mask, float("nan"))
    returns = with_garbage(randn(gen, B, T), mask, float("inf"))
    values = with_garbage(base, mask, 1e30).requires_grad_(True)
    loss, metrics = value_loss(values, old, returns, mask, clip, mode)
    loss.backward()
    ref_values = base.clone().requires_grad_(True)
    ref = ref_value_loss(ref_values, old, returns, mask, clip, mode)
    ref.backward()
    assert close(loss, ref)
    assert torch.allclose(values.grad[mask], ref_values.grad[mask], atol=TOL)
    assert torch.all(values.grad[~mask] == 0)
    assert (metrics["value/clip_frac"] > 0) == (clip is not None)


def test_value_clip_frac_counts_only_values_moved_past_the_clip_range():
    # Each value moved less than the 0.5 clip range from its old value, so nothing is clipped (veRL's
    # compute_value_loss: clip_frac 0). In float32 V_old + (V - V_old) is V + 1.5e-8 here: a clipped value computed
    # that way is "larger" than the unclipped one and was counted.
    old = torch.tensor([[-0.546457052230835, 0.4855106472969055]])
    values = torch.tensor([[-0.19567660987377167, 0.15708433091640472]])
    returns = torch.tensor([[0.41807880997657776, 0.01908685825765133]])
    loss, metrics = value_loss(values, old, returns, torch.ones(1, 2), 0.5)
    assert metrics["value/clip_frac"] == 0.0
    assert loss.item() == (0.5 * ((values - returns) ** 2).mean()).item()


@pytest.mark.parametrize("mode", MODES)
def test_entropy_matches_loop_and_masked_grad_is_zero(mode):
    gen = torch.Generator().manual_seed(3)
    mask = make_mask(gen, empty_row=True)
    base = randn(gen, B, T, V) * 2
    logits = base.clone().requires_grad_(True)
    entropy, metrics = entropy_from_logits(logits, mask, mode)
    entropy.backward()
    ref_logits = base.clone().requires_grad_(True)
    ref = ref_entropy(ref_logits, mask, mode)
    ref.backward()
    assert close(entropy, ref)
    assert torch.allclose(logits.grad, ref_logits.grad, atol=TOL)
    assert torch.all(logits.grad[~mask] == 0)
    assert 0 < metrics["entropy/mean"] <= math.log(V)


# ---------------------------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_matches_loop(mode):
    gen = torch.Generator().manual_seed(11)
    mask = make_mask(gen, empty_row=True)
    loss = with_garbage(randn(gen, B, T), mask, float("nan"))
    assert close(aggregate_loss(loss, mask, mode), ref_aggregate(loss.tolist(), mask.tolist(), mode))


@pytest.mark.parametrize("mode", MODES)
def test_micro_batches_with_global_counts_add_up_to_full_batch(mode):
    gen = torch.Generator().manual_seed(4)
    mask = make_mask(gen, empty_row=True)
    base = randn(gen, B, T)
    full_x = base.clone().requires_grad_(True)
    full = aggregate_loss(full_x**2, mask, mode)
    full.backward()
    global_tokens = float(mask.sum())
    global_seqs = float((mask.sum(-1) > 0).sum())
    split_x = base.clone().requires_grad_(True)
    pieces = []
    for rows in [slice(0, 1), slice(1, 4), slice(4, 6)]:  # uneven micro-batches, like gradient accumulation
        piece = aggregate_loss(split_x[rows] ** 2, mask[rows], mode, global_tokens, global_seqs)
        piece.backward()  # gradients accumulate in split_x.grad
        pieces.append(piece.item())
    assert close(sum(pieces), full)
    assert torch.allclose(split_x.grad, full_x.grad, atol=1e-12)
    # the local-count alternative (average of per-micro-batch means) gives a different objective
    local = [aggregate_loss(base[r] ** 2, mask[r], mode).item() for r in [slice(0, 1), slice(1, 4), slice(4, 6)]]
    assert not close(sum(local) / 3, full)


def test_bad_arguments_name_the_fix():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate_loss(x, torch.ones(2, 3), "mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not match"):
        aggregate_loss(x, torch.ones(2, 4))
    with pytest.raises(ValueError, match="global_tokens must be > 0"):
        aggregate_loss(x, torch.ones(2, 3), "token_mean", global_tokens=0)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(x, x, torch.ones(2, 3), "k4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shapes differ"):
        policy_loss(x, torch.zeros(2, 4), x, torch.ones(2, 3))


def test_informative_rows_keeps_exactly_the_groups_with_nonzero_grpo_advantage():
    scores = [1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0, 0, 0, 0.7]  # 4 groups of 4 and a singleton
    gids = [g for g in "abcd" for _ in range(4)] + ["e"]
    keep, m = informative_rows(scores, gids)
    adv, _ = grpo_advantages(torch.tensor(scores, dtype=torch.float64), gids, torch.ones(len(scores), 1))
    assert keep == [i for i in range(len(scores)) if adv[i, 0] != 0] == [0, 1, 2, 3, 12, 13, 14, 15]
    assert m["filter/informative_group_frac"] == 2 / 5 and m["filter/rows"] == 8.0
    keep, m = informative_rows([1, 1, 0, 0], ["x", "x", "y", "y"])  # nothing informative: the first group stays
    assert keep == [0, 1] and m["filter/informative_group_frac"] == 0.0


def test_drop_uniform_groups_needs_a_group_baseline():
    from searchrl.config import ConfigError, load_config

    assert load_config(None, ["algorithm.drop_uniform_groups=true"]).algorithm.drop_uniform_groups
    load_config(
        None,
        [
            "algorithm.name=reinforce_pp",
            "algorithm.reinforce_estimator=group_norm",
            "algorithm.drop_uniform_groups=true",
        ],
    )
    for bad in (["algorithm.name=ppo"], ["algorithm.name=reinforce_pp"]):
        with pytest.raises((ConfigError, ValueError), match="group baseline"):
            load_config(None, [*bad, "algorithm.drop_uniform_groups=true"])


def test_refill_rounds_need_the_uniform_group_filter():
    from searchrl.config import ConfigError, load_config

    ok = load_config(None, ["algorithm.drop_uniform_groups=true", "algorithm.max_sampling_rounds=3"])
    assert ok.algorithm.max_sampling_rounds == 3
    with pytest.raises((ConfigError, ValueError), match="drop_uniform_groups=true"):
        load_config(None, ["algorithm.max_sampling_rounds=2"])
    with pytest.raises((ConfigError, ValueError)):
        load_config(None, ["algorithm.drop_uniform_groups=true", "algorithm.max_sampling_rounds=0"])


def test_informative_group_count():
    from searchrl.rl.algorithms import informative_group_count

    assert informative_group_count([1, 0, 1, 1, 0.5, 0.5], ["a", "a", "b", "b", "c", "c"]) == 1
    assert informative_group_count([0.2, 0.3, 0.0, 1.0], ["a", "a", "b", "b"]) == 2
