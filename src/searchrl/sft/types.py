"""The SFT example record: a token context, a token target and which target tokens carry the loss.

The SFT trainer consumes lists of it (loss on ``loss_mask == 1`` tokens only). Two sources produce it:

* a whole trajectory (``SFTExample.from_trajectory``): the context is the prompt, the target is every response token,
  and the loss mask is the trajectory's ``action_mask``, so inserted documents sit in the target with mask 0;
* a step-level slice of a trajectory (RAG-R1, ``searchrl.sft.pipelines.slice_steps``): the context is the prompt plus
  everything before one policy turn (documents included), the target is that turn's sampled tokens, all with mask 1.

Token ids are always the trajectory's own; nothing is re-tokenized.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from searchrl.rollout.trajectory import Trajectory

#: RAG-R1's four step-level sample kinds (spec 004 §2.2), plus whole trajectories.
QUESTION_ANSWER = "question_answer"  # prompt -> think + answer (internal knowledge)
QUESTION_SEARCH = "question_search"  # prompt -> think + search call (external knowledge)
DOCUMENTS_ANSWER = "documents_answer"  # prompt + earlier turns and documents -> think + answer
DOCUMENTS_SEARCH = "documents_search"  # prompt + earlier turns and documents -> think + next search call
STEP_KINDS = (QUESTION_ANSWER, QUESTION_SEARCH, DOCUMENTS_ANSWER, DOCUMENTS_SEARCH)
TRAJECTORY = "trajectory"


@dataclass(frozen=True)
class SFTExample:
    prompt_ids: list[int]  # context, never a target
    response_ids: list[int]  # target tokens
    loss_mask: list[int]  # one per response token: 1 = trained on, 0 = context inside the target (documents)
    kind: str = TRAJECTORY
    source_uid: str = ""  # uid of the trajectory it came from
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.response_ids) != len(self.loss_mask):
            raise ValueError(
                f"SFT example {self.source_uid or '?'}: {len(self.response_ids)} response ids but "
                f"{len(self.loss_mask)} loss-mask entries; they must align one to one"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"SFT example {self.source_uid or '?'}: loss_mask entries must be 0 or 1")

    @property
    def n_target_tokens(self) -> int:
        return sum(self.loss_mask)

    @classmethod
    def from_trajectory(cls, traj: Trajectory) -> SFTExample:
        """The whole trajectory as one example: loss on the policy's tokens, inserted text masked out."""
        return cls(
            prompt_ids=list(traj.prompt_ids),
            response_ids=list(traj.response_ids),
            loss_mask=list(traj.action_mask),
            kind=TRAJECTORY,
            source_uid=traj.uid,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SFTExample:
        """Inverse of ``to_dict``; a row without the token fields raises a ``ValueError`` naming them."""
        missing = [k for k in ("prompt_ids", "response_ids", "loss_mask") if k not in d]
        if missing:
            raise ValueError(
                f"SFT example row lacks {', '.join(missing)}; expected prompt_ids, response_ids, loss_mask "
                "(and optionally kind, source_uid, metadata), as written by SFTExample.to_dict"
            )
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def as_sft_example(item: SFTExample | Trajectory | Mapping[str, Any]) -> SFTExample:
    """The data boundary: a trajectory (its ``action_mask`` is the loss mask), a trajectory row
    (``Trajectory.to_dict``), an example row (``SFTExample.to_dict``) or an example, as an :class:`SFTExample`."""
    if isinstance(item, SFTExample):
        return item
    if isinstance(item, Trajectory):
        return SFTExample.from_trajectory(item)
    if isinstance(item, Mapping):
        return (
            SFTExample.from_trajectory(Trajectory.from_dict(dict(item)))
            if "action_mask" in item
            else SFTExample.from_dict(dict(item))
        )
    raise TypeError(f"SFT data must be SFTExample, Trajectory or a JSON row of either, got {type(item).__name__}")
