"""Selective-head scoring gives exactly the full-logits log-probs and gradients at the selected positions."""

import torch

from searchrl.rl.batch import TokenScorer, collate, response_logits, score_tokens, token_logprobs
from searchrl.testing import tiny_model


def test_selected_positions_match_full_logits() -> None:
    torch.manual_seed(0)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    responses = [[20, 21, 22, 23, 24], [25, 26], [27, 28, 29, 30]]
    masks = [[1, 1, 0, 0, 1], [1, 0], [0, 1, 1, 1]]
    b = collate(prompts, responses, masks)
    sel = b.action_mask
    full_model, sel_model = tiny_model(), tiny_model()
    full = token_logprobs(response_logits(full_model, b), b.response_ids) * sel
    logp, ent = score_tokens(TokenScorer(sel_model), b, sel, entropy=True)
    torch.testing.assert_close(logp, full, rtol=1e-5, atol=1e-6)
    assert torch.all(logp[sel == 0] == 0) and torch.all(ent[sel == 0] == 0) and torch.all(ent[sel == 1] > 0)
    full.sum().backward()
    logp.sum().backward()
    for (name, p1), p2 in zip(full_model.named_parameters(), sel_model.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rows_sharing_a_prompt_score_as_separate_rows() -> None:
    """A group's prompt runs once: same log-probs and parameter gradients as scoring every row in full."""
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [5, 6, 7], [8, 9], [10, 11, 12, 13]]
    responses = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29], [30, 31], [32, 33, 34]]
    masks = [[1, 0, 1], [1, 1], [1, 1, 0, 1], [1], [0, 1], [1, 1, 1]]
    b = collate(prompts, responses, masks)
    shared, separate = tiny_model(), tiny_model()
    lp_shared, _ = score_tokens(TokenScorer(shared), b, b.action_mask)
    lp_sep, _ = score_tokens(TokenScorer(separate, share_prompts=False), b, b.action_mask)
    torch.testing.assert_close(lp_shared, lp_sep, rtol=1e-5, atol=1e-6)
    w = torch.arange(1, lp_sep.shape[1] + 1).float()  # a different weight per position
    (lp_shared * w).sum().backward()
    (lp_sep * w).sum().backward()
    for (name, p1), p2 in zip(separate.named_parameters(), shared.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_gradient_checkpointing_scores_as_the_plain_forward() -> None:
    """Under gradient checkpointing in training mode HF drops the KV cache, which prompt sharing relies on: the scorer
    must then run rows in full, with the same log-probs and gradients."""
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [5, 6, 7]]
    responses = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    b = collate(prompts, responses, [[1] * len(r) for r in responses])
    ckpt, plain = tiny_model(), tiny_model()
    ckpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ckpt.train()
    plain.train()
    _assert_shared_scores_as_separate(b, ckpt, plain)


def test_a_chunked_head_scores_as_the_whole_one() -> None:
    """Log-probs, entropies and gradients are the same whether the output head runs over all positions at once or a
    few at a time with its logits recomputed in the backward pass."""
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    responses = [[20, 21, 22, 23, 24], [25, 26, 27], [29, 30, 31, 32]]
    b = collate(prompts, responses, [[1, 0, 1, 1, 1], [1, 1, 1], [1, 1, 0, 1]])
    whole, chunked = tiny_model(), tiny_model()
    lp_w, ent_w = score_tokens(TokenScorer(whole), b, b.action_mask, entropy=True)
    lp_c, ent_c = score_tokens(TokenScorer(chunked, head_chunk=3), b, b.action_mask, entropy=True)  # 10 -> 3+3+3+1
    torch.testing.assert_close(lp_c, lp_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent_c, ent_w, rtol=1e-5, atol=1e-6)
    assert float(ent_w.abs().sum()) > 0
    (lp_w.sum() + 0.1 * ent_w.sum()).backward()
    (lp_c.sum() + 0.1 * ent_c.sum()).backward()
    for (name, p1), p2 in zip(whole.named_parameters(), chunked.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_micro_batches_keep_groups_together_within_the_budget() -> None:
    from searchrl.rl.batch import plan_micro_batches

    prompt = [100] * 8 + [50] * 4
    resp = [10, 20, 30, 40, 10, 20, 30, 40, 5, 5, 5, 5]
    keys = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    plans = plan_micro_batches(prompt, resp, max_rows=8, max_tokens=400, keys=keys)
    assert sorted(i for p in plans for i in p) == list(range(12))
    for p in plans:  # cost = distinct prompts x longest prompt + rows x longest response
        assert len({keys[i] for i in p}) * max(prompt[i] for i in p) + len(p) * max(resp[i] for i in p) <= 400
    assert plans[0][:4] == [3, 2, 1, 0]  # the longest group first, its rows together


def test_distinct_prompts_share_their_common_prefix() -> None:
    """Distinct prompts that open with the same instruction (SFT data, several questions in one RL step) run the
    instruction once; log-probs and gradients equal the plain forward's."""
    instruction = list(range(40, 80))
    prompts = [instruction + [5, 6, 7], instruction + [8, 9], instruction + [10, 11, 12, 13], instruction + [8, 9]]
    responses = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    masks = [[1, 0, 1], [1, 1], [1, 1, 0, 1], [1]]
    b = collate(prompts, responses, masks)
    from searchrl.rl.batch import _share_plan

    assert _share_plan(b)[2] == 40
    _assert_shared_scores_as_separate(b)


def test_a_common_prefix_saving_little_runs_with_the_prompts(monkeypatch) -> None:
    """Where a separate pass over the common prefix would save fewer positions than the device's threshold (a GPU's
    host cost of a pass), the prefix runs inside the prompts' pass; rows that all differ then run in full. Log-probs
    and gradients stay the plain forward's."""
    import searchrl.rl.batch as batch_mod
    from searchrl.rl.batch import _share_plan

    instruction = list(range(40, 80))
    prompts = [instruction + [5, 6, 7], instruction + [5, 6, 7], instruction + [8, 9], instruction + [8, 9]]
    responses = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    b = collate(prompts, responses, [[1] * len(r) for r in responses])
    assert _share_plan(b)[2] == 40  # (2 - 1) x 40 positions saved: enough on a CPU
    monkeypatch.setitem(batch_mod._MIN_COMMON_SAVING, "cpu", 41)
    assert _share_plan(b)[2] == 0
    distinct = collate(prompts[1:3], responses[1:3], [[1] * len(r) for r in responses[1:3]])
    assert _share_plan(distinct) is None
    _assert_shared_scores_as_separate(b)


def test_long_masked_attention_in_causal_blocks_changes_nothing(monkeypatch) -> None:
    """Long left-padded rows (masked causal attention) run in query blocks that skip the masked future: log-probs and
    gradients equal the one-call attention's, with and without shared prompts; a non-causal mask is not blocked."""
    import searchrl.models as models

    torch.manual_seed(0)
    prompts = [[5, 6, 7] + list(range(40, 60)), [8, 9] + list(range(40, 60))]
    responses = [list(range(60, 130)), list(range(70, 100))]
    b = collate(prompts, responses, [[1] * len(r) for r in responses])
    calls: list[bool] = []  # whether each attention call ran in blocks
    real = models._causal_blocks

    def spy(*args):
        blocks = real(*args)
        calls.append(blocks is not None)
        return blocks

    monkeypatch.setattr(models, "_CAUSAL_BLOCK", 16)
    monkeypatch.setattr(models, "_causal_blocks", spy)
    for share in (True, False):
        blocked, whole = tiny_model(), tiny_model()
        models.use_fast_attention(blocked)
        lp_blocked, _ = score_tokens(TokenScorer(blocked, share_prompts=share), b, b.action_mask)
        n_calls = len(calls)
        assert any(calls) and real(torch.ones(1, 1, 64, 64, dtype=torch.bool).tril(), 64, 64) == [
            (0, 16, 16),
            (16, 32, 32),
            (32, 48, 48),
            (48, 64, 64),
        ]
        lp_whole, _ = score_tokens(TokenScorer(whole, share_prompts=share), b, b.action_mask)
        assert len(calls) == n_calls  # transformers' own SDPA: no blocks
        torch.testing.assert_close(lp_blocked, lp_whole, rtol=1e-5, atol=1e-6)
        lp_blocked.sum().backward()
        lp_whole.sum().backward()
        for (name, p1), p2 in zip(whole.named_parameters(), blocked.parameters(), strict=True):
            torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)
    bidirectional = torch.ones(1, 1, 64, 64, dtype=torch.bool)
    assert real(bidirectional, 64, 64) is None and real(None, 64, 64) is None
    assert real(torch.ones(1, 1, 1, 64, dtype=torch.bool), 64, 64) is None  # a broadcast mask: not blocked


def _assert_shared_scores_as_separate(b, shared=None, separate=None) -> None:
    """Scoring ``b`` with shared prompts (on ``shared``) gives the log-probs and parameter gradients of scoring every
    row in full (on ``separate``, the same weights; fresh tiny models by default)."""
    shared, separate = shared or tiny_model(), separate or tiny_model()
    lp_shared, _ = score_tokens(TokenScorer(shared), b, b.action_mask)
    lp_sep, _ = score_tokens(TokenScorer(separate, share_prompts=False), b, b.action_mask)
    torch.testing.assert_close(lp_shared, lp_sep, rtol=1e-5, atol=1e-6)
    lp_shared.sum().backward()
    lp_sep.sum().backward()
    for (name, p1), p2 in zip(separate.named_parameters(), shared.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)
