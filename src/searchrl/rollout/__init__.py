"""Batched multi-turn rollouts: :class:`RolloutEngine` rolls questions out with a policy, a retriever and a protocol
into :class:`Trajectory` records, within :class:`RolloutLimits`.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from searchrl._lazy import lazy_exports

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
