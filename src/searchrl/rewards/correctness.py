"""What "this answer is correct" means for a run: one object, built from the reward config, used everywhere.

The answer reward, R1-Searcher++'s group reward, the memorizer's rollout and rewrite checks, rejection sampling,
the training logs (``rollout/correct``) and the trajectory records the viewer reads all ask the same question. They
ask it of one :class:`Correctness`: a metric (with its normalisation and cover boundary), the score an answer must
reach, and an optional cap on the answer's length in words (R1-Searcher++'s 10-word rule, spec 000 §3.2).

>>> c = Correctness(metric="cover_em", max_words=3)
>>> c("It was Paris", ["Paris"]), c("It was in Paris, France", ["Paris"]), c(None, ["Paris"])
(True, False, False)
>>> Correctness.from_reward_components([{"name": "answer", "params": {"metric": "f1"}}]).metric
'f1'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from searchrl.rewards.metrics import Golds, MetricFn, get_metric, word_count

#: the answer-component params that define correctness (the group reward inherits exactly these).
CORRECTNESS_PARAMS = ("metric", "normalize", "boundary", "max_words")


@dataclass(frozen=True)
class Correctness:
    """``score(answer, golds)`` is the metric; ``__call__`` says whether that score counts as correct."""

    metric: str = "em"
    normalize: str | None = None
    boundary: str | None = None
    #: an answer of more whitespace-separated words is not correct (None: no cap).
    max_words: int | None = None
    #: the metric score an answer must reach (1.0: EM-style "exactly right"; lower for F1 thresholds; 0: any
    #: answer counts, e.g. the laptop profile's rejection sampling with a model that is rarely right).
    threshold: float = 1.0
    _fn: MetricFn = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_words is not None and self.max_words < 1:
            raise ValueError(f"answer max_words must be >= 1 or null, got {self.max_words}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"correctness threshold must be in [0, 1], got {self.threshold}")
        object.__setattr__(self, "_fn", get_metric(self.metric, normalize=self.normalize, boundary=self.boundary))

    def score(self, answer: str | None, golds: Golds) -> float:
        """The metric alone (best over the golds; 0 for a missing answer), before the length cap."""
        return self._fn(answer, golds)

    def too_long(self, answer: str | None) -> bool:
        return self.max_words is not None and answer is not None and word_count(answer) > self.max_words

    def __call__(self, answer: str | None, golds: Golds) -> bool:
        return answer is not None and not self.too_long(answer) and self.score(answer, golds) >= self.threshold

    @classmethod
    def from_reward_components(cls, components: Sequence[Any], **overrides: Any) -> Correctness:
        """The answer component's rule (its metric, normalisation, boundary and word cap); the default rule (EM)
        when the reward has no answer component (e.g. R1-Searcher stage 1). ``overrides`` win (None ones are
        ignored), so a caller may keep a config field of its own that defaults to "as the reward says"."""
        params: dict[str, Any] = {}
        for comp in components:
            name = comp["name"] if isinstance(comp, Mapping) else comp.name
            if name == "answer":
                raw = comp.get("params", {}) if isinstance(comp, Mapping) else comp.params
                params = {k: v for k, v in raw.items() if k in CORRECTNESS_PARAMS}
        params.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**params)

    @classmethod
    def from_reward_config(cls, reward_cfg: Any, **overrides: Any) -> Correctness:
        """:meth:`from_reward_components` of a :class:`searchrl.config.RewardConfig`."""
        return cls.from_reward_components(reward_cfg.components, **overrides)
