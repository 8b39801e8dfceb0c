"""Batched multi-turn rollouts: :class:`RolloutEngine` rolls questions out with a policy, a retriever and a protocol
into :class:`Trajectory` records, within :class:`RolloutLimits`.

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'searchrl.rollout' has no attribute {name!r}")


def __dir__() -> list[str]:  # tab completion: the exports and submodules, not this file's own imports
    return sorted({*globals(), *_EXPORTS} - {"annotations", "importlib", "Any"})
