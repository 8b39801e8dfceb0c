"""Batched multi-turn rollouts: :class:`RolloutEngine` rolls questions out with a policy, a retriever and a protocol
into :class:`Trajectory` records, within :class:`RolloutLimits`.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searchrl._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see (they do not run __getattr__)
    from searchrl.data.records import QAExample as QAExample
    from searchrl.data.records import as_examples as as_examples
    from searchrl.rollout.engine import RolloutEngine as RolloutEngine
    from searchrl.rollout.limits import RolloutLimits as RolloutLimits
    from searchrl.rollout.record import read_trajectories as read_trajectories
    from searchrl.rollout.record import trajectory_record as trajectory_record
    from searchrl.rollout.render import render_trajectory as render_trajectory
    from searchrl.rollout.trajectory import Trajectory as Trajectory
    from searchrl.rollout.trajectory import Turn as Turn

#: name -> the module that defines it (this package's, or a layer below it)
_EXPORTS = {
    "RolloutEngine": "searchrl.rollout.engine",
    "RolloutLimits": "searchrl.rollout.limits",
    "Trajectory": "searchrl.rollout.trajectory",
    "Turn": "searchrl.rollout.trajectory",
    "read_trajectories": "searchrl.rollout.record",
    "trajectory_record": "searchrl.rollout.record",
    "render_trajectory": "searchrl.rollout.render",
    "QAExample": "searchrl.data.records",
    "as_examples": "searchrl.data.records",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
