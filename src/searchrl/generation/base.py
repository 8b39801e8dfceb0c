"""Generator backends behind one interface; the rollout engine depends only on this.

A generator takes token-id prompts and returns, for each, the sampled token ids and their log-probs under the
sampling distribution's *unmodified* model (temperature 1 scaling is applied by the caller's choice of params).
Generation stops at EOS, at ``max_new_tokens``, or right after the first stop string in the decoded text; the
returned ids are exactly the tokens that were sampled (never re-tokenized), trimmed after the token that completed
the stop string.

Continuous batching (``rollout.continuous``): a generator with ``supports_continuous`` also runs
:meth:`Generator.decode_continuous`, one decode loop for a whole rollout in which rows leave the batch when they finish
a segment (one turn) and come back, with their context grown by an observation, when the caller has one ready; the
others keep decoding meanwhile. The caller's side is a :class:`ContinuousScheduler`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol

_MASK64 = (1 << 64) - 1


def splitmix64(z: int) -> int:
    """SplitMix64's output function: a 64-bit integer hash (the per-row sampling streams are built on it)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix_seed(*parts: int) -> int:
    """One 63-bit seed from integers (e.g. a run's seed, a turn and a row): a hash, so nearby inputs give unrelated
    seeds."""
    h = 0
    for p in parts:
        h = splitmix64(h ^ (p & _MASK64))
    return h >> 1


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    #: one seed per prompt: row ``i`` samples from its own stream, so its tokens do not depend on the other rows of
    #: the call (backends that cannot seed rows apart use ``seed``).
    row_seeds: tuple[int, ...] | None = None
    #: a generator that reuses prefixes may keep this call's caches for a call that continues its contexts; False
    #: when none will (a rollout's last turn), which spares the copies.
    keep_cache: bool = True
    #: kept too are the caches of rows that end in EOS, which the next call continues (``rollout.continue_after_eos``)
    keep_eos_rows: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams(top_p={self.top_p}): top_p must lie in (0, 1]; use 1 for no nucleus")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams(temperature={self.temperature}): use 0 (greedy) or more")


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # one per token_ids entry: log p(token) under the policy at temperature 1
    text: str
    finish_reason: str  # "stop" (stop string), "eos", "length"
    stop_string: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Segment:
    """One row's next stretch of decoding in a continuous batch: its whole context so far (prompt, sampled and
    inserted tokens), at most ``max_new_tokens`` new tokens, and the seed of its sampling stream."""

    key: int
    context: list[int]
    max_new_tokens: int
    seed: int | None = None


class ContinuousScheduler(Protocol):
    """The caller's side of :meth:`Generator.decode_continuous`."""

    def finished(self, key: int, completion: Completion) -> bool:
        """Row ``key`` finished its segment; True when it may come back (its keys/values are then kept)."""
        ...

    def ready(self, wait: bool) -> list[Segment] | None:
        """The segments ready to (re-)enter the batch; with ``wait``, block until there is one. None: nothing is
        outstanding (the loop ends once its batch is empty too)."""
        ...


class Generator(ABC):
    """Token ids in, sampled token ids (+ log-probs) out."""

    tokenizer: object
    #: whether :meth:`decode_continuous` is implemented (else the rollout engine decodes turn by turn).
    supports_continuous: bool = False

    @abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Sample one completion per prompt, the whole batch in one call.

        ``prompts``: token ids, each a whole context (prompt, then the tokens sampled and inserted so far).
        ``params``: the new-token budget, temperature (0: greedy), top-p, stop strings and seeds. Returns, in prompt
        order, each completion's sampled token ids (ending with the token that completes the first stop string, or
        with EOS), their log-probs under the model at temperature 1, its decoded text and why it ended
        (``finish_reason``: ``"stop"``, ``"eos"`` or ``"length"``).
        """

    def decode_continuous(self, scheduler: ContinuousScheduler, params: SamplingParams) -> None:
        """Decode the segments ``scheduler`` hands out until it has none left: a row that finishes a segment is
        reported at once (``finished``) and leaves the batch; ``ready`` is asked for new segments between decode
        steps. ``params`` gives the sampling (temperature, top-p, stop strings); each segment its budget and seed."""
        raise NotImplementedError(f"{type(self).__name__} decodes one call at a time (supports_continuous is False)")

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

    def __repr__(self) -> str:
        """The backend, its model and where it runs: ``HFGenerator(model='HuggingFaceTB/SmolLM2-135M', device='cpu')``;
        a server's client names its URL."""
        parts = []
        model = getattr(self, "model", None) or getattr(self, "model_path", None)
        if isinstance(model, str):
            parts.append(f"model={model!r}")
        elif model is not None:
            parts.append(f"model={getattr(model, 'name_or_path', '') or type(model).__name__!r}")
            device = getattr(model, "device", None)
            if device is None and callable(getattr(model, "parameters", None)):
                device = next(iter(model.parameters()), None)
                device = None if device is None else device.device
            if device is not None:
                parts.append(f"device={str(device)!r}")
        if url := getattr(self, "base_url", None):
            parts.append(f"url={url!r}")
        return f"{type(self).__name__}({', '.join(parts)})"
