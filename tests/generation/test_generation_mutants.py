"""Sampling and stop rules pinned with hand-made distributions and token lists (each test names its slip)."""

from __future__ import annotations

import math

import torch

from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.sampling import finish_row, inverse_cdf, row_uniforms, sample_tokens

HALF_QUARTER_QUARTER = torch.tensor([[0.0, -math.log(2), -math.log(2), -30.0]])  # softmax: 0.5, 0.25, 0.25, ~0


def _pick(logits: torch.Tensor, u: float, **params) -> int:
    return int(sample_tokens(logits, SamplingParams(**params), torch.tensor([u]))[0])


def test_top_p_keeps_the_token_that_crosses_the_threshold_and_none_after() -> None:
    """0.6 / 0.3 / 0.1 at top-p 0.7: 0.6 alone falls short, so 0.3 is kept; 0.1 comes after the threshold is met.
    The draw 0.99 of the kept mass (0.9) lands on the second token, never the third."""
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    assert [_pick(logits, u, top_p=0.7) for u in (0.0, 0.5, 0.7, 0.99)] == [0, 0, 1, 1]


def test_top_p_stops_at_a_prefix_whose_mass_equals_it() -> None:
    """0.5 / 0.25 / 0.25 at top-p 0.5: the first token alone holds the mass asked for (as transformers' and vLLM's
    top-p keep it), so every draw picks it."""
    assert torch.softmax(HALF_QUARTER_QUARTER, -1)[0, :3].tolist() == [0.5, 0.25, 0.25]  # exact in float32
    assert [_pick(HALF_QUARTER_QUARTER, u, top_p=0.5) for u in (0.0, 0.6, 0.9, 0.999)] == [0, 0, 0, 0]
    # at 0.75 the first two tokens are needed: draws past 2/3 of their mass pick the second one
    assert [_pick(HALF_QUARTER_QUARTER, u, top_p=0.75) for u in (0.5, 0.7, 0.999)] == [0, 1, 1]


def test_top_p_applies_at_temperature_one_too() -> None:
    """Temperature 1 has a fast path (one softmax): it is only for top-p 1. Slip caught: the fast path taken at any
    top-p, which would sample the 0.1 token that top-p 0.7 leaves out."""
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    assert _pick(logits, 0.99, temperature=1.0, top_p=1.0) == 2
    assert _pick(logits, 0.99, temperature=1.0, top_p=0.7) == 1


def test_top_p_picks_by_the_vocabulary_not_the_sorted_order() -> None:
    """The same distribution in reverse vocabulary order picks the same tokens, reversed. Slip caught: the index in
    the descending order returned as the token."""
    logits = torch.log(torch.tensor([[0.1, 0.3, 0.6]]))
    assert [_pick(logits, u, top_p=0.7) for u in (0.0, 0.99)] == [2, 1]


def test_temperature_sharpens_or_flattens_what_is_sampled() -> None:
    """0.6 / 0.3 / 0.1 at temperature 0.5 is 0.783 / 0.196 / 0.022 (squared, renormalised), at 2 it is
    0.473 / 0.334 / 0.193 (square roots): draws 0.95 and 0.55 land on the second token, where at temperature 1 they
    land on the third and the first. Slip caught: the temperature left out of the sampling distribution."""
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    assert _pick(logits, 0.95, temperature=0.5) == 1
    assert _pick(logits, 0.95, temperature=1.0) == 2
    assert _pick(logits, 0.55, temperature=2.0) == 1
    assert _pick(logits, 0.55, temperature=1.0) == 0


def test_the_log_prob_is_the_models_at_temperature_one_whatever_the_sampling() -> None:
    """Slip caught: the log-prob taken under the tempered or nucleus-cut distribution."""
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    for params in ({"temperature": 0.5}, {"temperature": 2.0, "top_p": 0.7}, {"temperature": 0.0}):
        pick, lp = sample_tokens(logits, SamplingParams(**params), torch.tensor([0.0]))
        assert int(pick) == 0 and abs(float(lp) - math.log(0.6)) < 1e-5, params


def test_row_uniforms_draw_a_new_value_per_token_and_repeat_per_seed() -> None:
    """Slip caught: the token index left out of the hash (every token of a row drawn with one value)."""
    u = row_uniforms([5, 5, 5, 6], [0, 1, 0, 0], torch.device("cpu")).tolist()
    assert u[0] == u[2] and u[0] != u[1] and u[0] != u[3]
    assert all(0.0 <= x < 1.0 for x in u)


def test_a_finished_row_keeps_its_eos_and_ignores_a_stop_string_after_it() -> None:
    """EOS ends the row and is kept (its log-prob too); text after it, a stop string included, is not the row's.
    Slips caught: the EOS dropped, stop strings searched past EOS, the EOS's text in the completion's text."""
    tok = ByteTokenizer()
    ids = tok.encode("ab") + [2] + tok.encode("</search>")
    c = finish_row(tok, ids, [-0.1, -0.2, -0.3] + [-9.0] * 9, {2}, ("</search>",), 0.0)
    assert (c.token_ids, c.logprobs, c.text, c.finish_reason, c.stop_string) == (
        [100, 101, 2],
        [-0.1, -0.2, -0.3],
        "ab",
        "eos",
        None,
    )


def test_the_stop_string_that_completes_first_ends_the_row_and_is_kept() -> None:
    """``</search>`` completes at token 11 and ``</answer>`` only later: the row ends right after ``</search>``
    (kept). When the pieces already said the last token completes a stop string, the earliest one in the text is
    named. Slips caught: the later stop named, the row cut before the stop string."""
    tok = ByteTokenizer()
    ids = tok.encode("ab</search></answer>")
    for stopped in (False, True):
        c = finish_row(tok, ids[:11], [0.0] * 11, {2}, ("</answer>", "</search>"), 0.0, stopped)
        assert (c.text, c.finish_reason, c.stop_string, len(c.token_ids)) == ("ab</search>", "stop", "</search>", 11)
    c = finish_row(tok, ids, [0.0] * len(ids), {2}, ("</answer>", "</search>"), 0.0)
    assert (c.text, c.stop_string) == ("ab</search>", "</search>")
    # a hint that the last token completed a stop string, wrong because an earlier one did: the exact search decides
    c = finish_row(tok, ids, [0.0] * len(ids), {2}, ("</answer>", "</search>"), 0.0, stopped=True)
    assert (c.text, c.stop_string, len(c.token_ids)) == ("ab</search>", "</search>", 11)


def test_a_stop_string_inside_another_names_the_one_that_starts_first() -> None:
    """``h>`` ends inside ``</search>``: both complete at the same token, and the stop string named is the one whose
    text starts first. Slip caught: the last-starting one named."""
    tok = ByteTokenizer()
    ids = tok.encode("ab</search>")
    for stopped in (False, True):
        c = finish_row(tok, ids, [0.0] * 11, {2}, ("h>", "</search>"), 0.0, stopped)
        assert (c.stop_string, len(c.token_ids)) == ("</search>", 11)


def test_inverse_cdf_skips_a_block_and_a_token_that_hold_no_mass() -> None:
    """512 tokens in two blocks of 256: the first block holds no mass and token 256 none; token 257 holds it all.
    The draw 0 lands on token 257. Slips caught: either search over cumulative sums not strictly past the draw
    (``right=False``), which picks a zero-mass block or token."""
    probs = torch.zeros(1, 512)
    probs[0, 257] = 1.0
    assert inverse_cdf(probs, torch.tensor([0.0])).tolist() == [257]
    probs = torch.zeros(4, 512)
    probs[:, 1], probs[:, 300] = 0.5, 0.5  # token 0 of the first block has no mass
    assert inverse_cdf(probs, torch.tensor([0.0, 0.49, 0.5, 0.999])).tolist() == [1, 1, 300, 300]


def test_a_segment_with_no_budget_finishes_at_once_with_nothing_decoded() -> None:
    """Slip caught: a zero budget admitted to the batch (it would decode a token past its budget)."""
    from searchrl.generation.base import Segment
    from searchrl.generation.hf import HFGenerator
    from searchrl.testing import tiny_model

    class OneSegment:
        def __init__(self) -> None:
            self.sent, self.done = False, []

        def finished(self, key, completion) -> bool:
            self.done.append((key, completion))
            return False

        def ready(self, wait: bool):
            if self.sent:
                return None
            self.sent = True
            return [Segment(0, ByteTokenizer().encode("Q: hi\nA:"), 0, seed=1), Segment(1, [40, 41], 2, seed=2)]

    sched = OneSegment()
    HFGenerator(tiny_model(), ByteTokenizer()).decode_continuous(sched, SamplingParams(temperature=0.0))
    done = dict(sched.done)
    assert done[0].token_ids == [] and done[0].finish_reason == "length"
    assert len(done[1].token_ids) == 2
