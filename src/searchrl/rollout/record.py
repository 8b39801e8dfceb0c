"""The one record a trajectory is written in: training rollouts, held-out evaluations, the demo, eval predictions.

Every JSONL row that carries a trajectory is a dict with four keys, plus whatever fields its writer adds::

    {"source": "train" | "eval/step_3" | "demo/before" | "eval/<dataset>/<method>" | ...,
     "score": 0.5,                 # the number the writer ranks it by (reward, EM), or null
     "metrics": {"correct": 1.0, "em": 1.0, "f1": 1.0, ...},
     "trajectory": {...}}          # Trajectory.to_dict(); a retrieval trace or null for non-agent eval methods

``correct`` in ``metrics`` is the run's :class:`searchrl.rewards.correctness.Correctness`, so the viewer shows
what the run itself counted as correct. :func:`read_trajectories` reads these rows back (and bare
``Trajectory.to_dict()`` rows, the format of earlier releases and of ``searchrl data`` outputs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from searchrl.rollout.trajectory import Trajectory
from searchrl.utils import read_jsonl


def trajectory_record(
    trajectory: Trajectory | Mapping[str, Any] | None,
    *,
    source: str,
    score: float | None = None,
    metrics: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One row: ``{source, score, metrics, trajectory}`` and the writer's own ``fields`` (e.g. ``step``)."""
    traj = trajectory.to_dict() if isinstance(trajectory, Trajectory) else trajectory
    return {"source": source, "score": score, "metrics": dict(metrics or {}), "trajectory": traj, **fields}


#: a trajectory's token-level lists: most of an agent row's memory (~100 KB a question at a Qwen vocabulary)
TOKEN_FIELDS = ("prompt_ids", "response_ids", "action_mask", "logprobs")


def without_tokens(row: dict[str, Any]) -> dict[str, Any]:
    """A record ``row`` whose trajectory lacks the token-level lists (:data:`TOKEN_FIELDS`); its text, turns, counts
    and metadata stay. ``row`` itself when its trajectory has none."""
    traj = row.get("trajectory")
    if not isinstance(traj, Mapping) or not any(k in traj for k in TOKEN_FIELDS):
        return row
    return {**row, "trajectory": {k: v for k, v in traj.items() if k not in TOKEN_FIELDS}}


def is_record(row: Any) -> bool:
    return isinstance(row, Mapping) and "source" in row and "trajectory" in row and "metrics" in row


def row_trajectory(row: Mapping[str, Any]) -> Trajectory | None:
    """The trajectory in a record row (None for a non-agent eval row), or a bare ``Trajectory.to_dict()`` row."""
    if is_record(row) or ("trajectory" in row and "turns" not in row):
        inner = row["trajectory"]
        return Trajectory.from_dict(inner) if isinstance(inner, Mapping) and "turns" in inner else None
    return Trajectory.from_dict(row)


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Every trajectory of a JSONL file of records (or bare trajectories), in file order."""
    for _, row in read_jsonl(path):
        traj = row_trajectory(row)
        if traj is not None:
            yield traj
