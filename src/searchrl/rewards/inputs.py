"""What a reward component sees of one rollout (``RewardInput``) and the shapes components share."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from searchrl.protocols.base import FormatReport, Protocol

#: ``(scores, metrics)``: one unweighted score per input, and batch statistics.
Scores = tuple[list[float], dict[str, float]]
#: ``(questions, evidences) -> answers``: any backend that answers a question from an evidence text.
Reader = Callable[[list[str], list[str]], list[str]]


@dataclass(frozen=True)
class RewardInput:
    """Everything a reward component may look at for one rollout."""

    question: str
    golds: Sequence[str]
    response: str  # the whole response (policy text and inserted observations)
    answer: str | None  # the extracted final answer; None when the response has none
    report: FormatReport  # the protocol's format check of ``response``
    n_searches: int = 0  # search calls actually executed in the rollout
    group_id: Hashable | None = None  # rollouts of the same question share it (GRPO / R1-Searcher++ groups)
    evidence: str | None = None  # R-Search's <original_evidence> content, if any
    policy_text: str | None = None  # the policy's own text (observations left out); None: not known
    metadata: Mapping[str, Any] = field(default_factory=dict)  # the question's metadata (e.g. the world's chain)
    retrieved_text: str | None = None  # the documents the rollout's searches returned; None: not known

    @classmethod
    def from_response(
        cls,
        protocol: Protocol,
        question: str,
        golds: Sequence[str],
        response: str,
        *,
        group_id: Hashable | None = None,
        n_searches: int | None = None,
        policy_text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        retrieved_text: str | None = None,
        report: FormatReport | None = None,
    ) -> RewardInput:
        """Run the protocol's format check (unless ``report`` gives its result) and fill answer, search count and
        evidence from its report.

        ``n_searches`` defaults to the report's count; pass the rollout engine's own count when you have it.
        """
        report = protocol.check_format(response) if report is None else report
        evidence = report.extra.get("evidence")
        return cls(
            question=question,
            golds=list(golds),
            response=response,
            answer=report.answer,
            report=report,
            n_searches=report.n_searches if n_searches is None else n_searches,
            group_id=group_id,
            evidence=evidence if isinstance(evidence, str) else None,
            policy_text=policy_text,
            metadata=dict(metadata or {}),
            retrieved_text=retrieved_text,
        )

    @classmethod
    def from_trajectory(cls, protocol: Protocol, traj: Any, tokenizer: Any) -> RewardInput:
        """:meth:`from_response` for a rollout's :class:`~searchrl.rollout.trajectory.Trajectory`: its whole
        response checked with what the engine knows (``Trajectory.format_report``), its executed search count, the
        policy's own text, the question's metadata and the documents it retrieved (its search turns' observations,
        after the prompt's documents under the ``rag`` protocol)."""
        return cls.from_response(
            protocol,
            traj.question,
            traj.golds,
            traj.response_text(tokenizer),
            group_id=traj.group_id,
            n_searches=traj.n_searches,
            policy_text=traj.policy_text,
            metadata=traj.metadata,
            retrieved_text=traj.retrieved_text,
            report=traj.format_report(protocol, tokenizer),
        )


def rate(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def mean(xs: Sequence[float]) -> float:
    return fmean(xs) if xs else 0.0
