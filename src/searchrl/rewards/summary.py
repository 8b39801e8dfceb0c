"""One summary of a batch of agent trajectories, shared by the demo, benchmarks and training logs."""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.protocols.base import Protocol
from searchrl.rewards.metrics import exact_match, f1_score
from searchrl.rollout.trajectory import Trajectory


def summarize(trajs: Sequence[Trajectory], protocol: Protocol, tokenizer) -> dict[str, float]:
    """Format rate (the protocol's own check), EM / F1 of the final answers, answer rate, searches, tokens."""
    n = max(len(trajs), 1)
    reports = [protocol.check_format(t.response_text(tokenizer)) for t in trajs]
    return {
        "n": float(len(trajs)),
        "well_formed": sum(r.ok for r in reports) / n,
        "answered": sum(t.answer is not None for t in trajs) / n,
        "em": sum(exact_match(t.answer, t.golds) for t in trajs) / n,
        "f1": sum(f1_score(t.answer, t.golds) for t in trajs) / n,
        "searches_per_question": sum(t.n_searches for t in trajs) / n,
        "policy_tokens_per_question": sum(t.n_policy_tokens for t in trajs) / n,
    }
