"""The rollout engine's limits (``rollout.max_turns``, ``max_searches``, token budgets, ``force_answer``...) as one
frozen record, and the force-answer modes (``searchrl.rollout.engine`` says what each limit does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from searchrl.config import RolloutConfig

if TYPE_CHECKING:
    from searchrl.config import RunConfig

FORCE_MODES = ("hint", "silent", "end", "off")
ForceMode = Literal["hint", "silent", "end", "off"]


def force_mode(value: bool | str) -> str:
    """``rollout.force_answer`` as a mode name: ``true`` is ``hint``, ``false`` is ``off``."""
    if isinstance(value, bool):
        return "hint" if value else "off"
    if value not in FORCE_MODES:
        raise ValueError(f"rollout.force_answer must be one of {', '.join(FORCE_MODES)} (got {value!r})")
    return value


@dataclass(frozen=True)
class RolloutLimits:
    max_turns: int = 4
    max_searches: int = 4
    max_new_tokens: int = 128
    max_obs_tokens: int = 256
    max_total_tokens: int = 1536
    force_answer: bool | str = "hint"  # a mode of FORCE_MODES (true = hint, false = off)
    topk: int = 3
    #: each query's documents cut to this many tokens before the protocol builds the observation (RAG-R1).
    max_obs_tokens_per_query: int | None = None
    #: not a limit but how turns are scheduled: continuous batching across turns (rollout.continuous).
    continuous: bool = False
    #: a turn ending in EOS without an answer gets the invalid-action feedback instead of ending the trajectory.
    continue_after_eos: bool = False

    @classmethod
    def from_config(cls, cfg: RunConfig | RolloutConfig, topk: int | None = None) -> RolloutLimits:
        """The limits of a run config (its ``rollout`` section, ``topk`` from ``retrieval.topk``), or of a rollout
        section alone (``topk`` as given, else 3). A ``topk`` given wins over the run config's."""
        if hasattr(cfg, "rollout"):  # a whole run config
            topk = cfg.retrieval.topk if topk is None else topk
            cfg = cfg.rollout
        c = cfg
        return cls(
            max_turns=c.max_turns,
            max_searches=c.max_searches,
            max_new_tokens=c.max_new_tokens,
            max_obs_tokens=c.max_obs_tokens,
            max_total_tokens=c.max_total_tokens,
            force_answer=c.force_answer,
            topk=cls.topk if topk is None else topk,
            max_obs_tokens_per_query=getattr(c, "max_obs_tokens_per_query", None),
            continuous=c.continuous,
            continue_after_eos=getattr(c, "continue_after_eos", False),
        )
