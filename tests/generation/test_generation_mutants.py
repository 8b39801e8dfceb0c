"""Sampling and stop rules pinned with hand-made distributions and token lists (each test names the slip it catches)."""

from __future__ import annotations

import math

import torch

from searchrl.generation.base import SamplingParams
from searchrl.generation.fake import ByteTokenizer
from searchrl.generation.sampling import sample_tokens

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
