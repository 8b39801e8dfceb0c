"""SFT data is an ``SFTExample`` from the data boundary on: trajectories, their JSON rows and example rows convert."""

from __future__ import annotations

import pytest

from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.sft.types import TRAJECTORY, SFTExample, as_sft_example


def _traj() -> Trajectory:
    t = Trajectory("u#0", "u", "u", "q?", ["a"], prompt_ids=[1, 2, 3])
    t.turns.append(Turn(text="x", action="answer", finish_reason="stop"))
    t.response_ids, t.action_mask = [4, 5, 6, 7], [1, 0, 0, 1]
    return t


def test_every_source_becomes_an_sft_example() -> None:
    t = _traj()
    from_traj = as_sft_example(t)
    assert (from_traj.prompt_ids, from_traj.response_ids, from_traj.loss_mask) == (
        [1, 2, 3],
        [4, 5, 6, 7],
        [1, 0, 0, 1],
    )
    assert from_traj.kind == TRAJECTORY and from_traj.source_uid == "u#0"
    assert as_sft_example(t.to_dict()) == from_traj  # a rejection-sampled trajectory row
    step = SFTExample([1], [2, 3], [1, 1], kind="question_search", source_uid="u#0")
    assert as_sft_example(step.to_dict()) == step and as_sft_example(step) is step  # a step-level row
    with pytest.raises(ValueError, match="lacks loss_mask"):
        as_sft_example({"prompt_ids": [1], "response_ids": [2]})
    with pytest.raises(TypeError, match="SFTExample, Trajectory or a JSON row"):
        as_sft_example([1, 2])  # type: ignore[arg-type]
