"""Generator backends behind one interface; the rollout engine depends only on this.

A generator takes token-id prompts and returns, for each, the sampled token ids and their log-probs under the
sampling distribution's *unmodified* model (temperature 1 scaling is applied by the caller's choice of params).
Generation stops at EOS, at ``max_new_tokens``, or right after the first stop string in the decoded text; the
returned ids are exactly the tokens that were sampled (never re-tokenized), trimmed after the token that completed
the stop string.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # one per token_ids entry: log p(token) under the policy at temperature 1
    text: str
    finish_reason: str  # "stop" (stop string), "eos", "length"
    stop_string: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


class Generator(ABC):
    """Token ids in, sampled token ids (+ log-probs) out."""

    tokenizer: object

    @abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...

    def runs_on(self, model: object) -> bool:
        """Whether this generator samples with ``model``'s own weights (the training policy itself: nothing to push
        before a rollout, log-probs that match a recomputation). False for an engine with its own copy of the weights
        (e.g. vLLM), which :meth:`load_weights` refreshes."""
        return False

    def load_weights(self, state_dict: dict) -> None:  # noqa: B027 - optional hook
        """Replace the policy weights (used by trainers whose generator is a separate engine, e.g. vLLM)."""

    def counters(self) -> dict[str, float]:
        """Work done since construction (e.g. tokens prefilled, reused from a cache), for FLOP accounting; the RL
        trainer logs each step's increase as ``gen/<name>``. None by default."""
        return {}

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Forget state kept between calls (e.g. cached prefixes); the rollout engine calls it after each run."""
