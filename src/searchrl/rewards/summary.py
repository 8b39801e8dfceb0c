"""One summary of a batch of agent trajectories, shared by the demo, benchmarks and training logs, and the scored
trajectory records they write (:mod:`searchrl.rollout.record`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searchrl.protocols.base import Protocol
from searchrl.rewards.correctness import Correctness
from searchrl.rewards.metrics import exact_match, f1_score
from searchrl.rollout.record import trajectory_record
from searchrl.rollout.trajectory import Trajectory


def summarize(
    trajs: Sequence[Trajectory], protocol: Protocol, tokenizer, correctness: Correctness | None = None
) -> dict[str, float]:
    """Format rate (the protocol's own check), EM / F1 of the final answers, the run's ``correct`` rate (EM when no
    ``correctness`` is given), answer rate, searches, tokens."""
    n = max(len(trajs), 1)
    rule = correctness or Correctness()
    reports = [t.format_report(protocol, tokenizer) for t in trajs]
    return {
        "n": float(len(trajs)),
        "well_formed": sum(r.ok for r in reports) / n,
        "answered": sum(t.answer is not None for t in trajs) / n,
        "em": sum(exact_match(t.answer, t.golds) for t in trajs) / n,
        "f1": sum(f1_score(t.answer, t.golds) for t in trajs) / n,
        "correct": sum(rule(t.answer, t.golds) for t in trajs) / n,
        "searches_per_question": sum(t.n_searches for t in trajs) / n,
        "policy_tokens_per_question": sum(t.n_policy_tokens for t in trajs) / n,
    }


def rollout_metrics(
    trajs: Sequence[Trajectory], protocol: Protocol, tokenizer, correctness: Correctness
) -> dict[str, float]:
    """The training log's ``rollout/*`` metrics of one step's trajectories."""
    n = max(len(trajs), 1)
    return {
        "rollout/em": sum(exact_match(t.answer, t.golds) for t in trajs) / n,
        "rollout/correct": sum(correctness(t.answer, t.golds) for t in trajs) / n,
        "rollout/searches": sum(t.n_searches for t in trajs) / n,
        "rollout/turns": sum(t.n_turns for t in trajs) / n,
        "rollout/invalid_rate": sum(t.n_invalid for t in trajs) / max(sum(t.n_turns for t in trajs), 1),
        "rollout/response_len": sum(len(t.response_ids) for t in trajs) / n,
        "rollout/policy_tokens": sum(t.n_policy_tokens for t in trajs) / n,
        "rollout/answered": sum(t.answer is not None for t in trajs) / n,
        "rollout/well_formed": sum(t.format_report(protocol, tokenizer).ok for t in trajs) / n,
    }


def scored_records(
    trajs: Sequence[Trajectory], *, source: str, correctness: Correctness | None = None, **fields: Any
) -> list[dict[str, Any]]:
    """Held-out style records: score = EM, metrics = correct (the run's rule), em, f1."""
    rule = correctness or Correctness()
    rows = []
    for t in trajs:
        if not t.golds:  # e.g. `searchrl ask`: nothing to score against
            rows.append(trajectory_record(t, source=source, **fields))
            continue
        em = exact_match(t.answer, t.golds)
        metrics = {"correct": float(rule(t.answer, t.golds)), "em": em, "f1": f1_score(t.answer, t.golds)}
        rows.append(trajectory_record(t, source=source, score=em, metrics=metrics, **fields))
    return rows
