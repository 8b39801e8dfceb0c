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
