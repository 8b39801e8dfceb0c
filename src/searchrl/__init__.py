"""SearchRL: train language models to reason with a search engine through reinforcement learning.

The names a notebook needs are here, each imported on first use (``import searchrl`` loads neither torch nor
transformers)::

    import searchrl

    cfg = searchrl.load_config("search_r1_grpo", ["retrieval.index=my-index"])
    engine = searchrl.RolloutEngine.from_config(cfg)
    trajectories = engine.run(["Who directed 3000 Nights?"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searchrl._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see (they do not run __getattr__)
    from searchrl.config import load_config as load_config
    from searchrl.data.loaders import load_qa as load_qa
    from searchrl.data.records import QAExample as QAExample
    from searchrl.eval.harness import evaluate as evaluate
    from searchrl.eval.harness import run_from_config as run_from_config
    from searchrl.generation import make_generator as make_generator
    from searchrl.models import load_policy as load_policy
    from searchrl.protocols import get_protocol as get_protocol
    from searchrl.retrieval.index import build_index as build_index
    from searchrl.retrieval.index import load_index as load_index
    from searchrl.rl.trainer import Trainer as Trainer
    from searchrl.rollout.engine import RolloutEngine as RolloutEngine
    from searchrl.rollout.limits import RolloutLimits as RolloutLimits
    from searchrl.rollout.record import read_trajectories as read_trajectories
    from searchrl.rollout.trajectory import Trajectory as Trajectory
    from searchrl.viz.viewer import write_viewer as write_viewer

__version__ = "0.1.0"

#: name -> the module that defines it. A table rather than import statements: the package's own ``__init__`` sits
#: below every layer it re-exports from, and nothing here is imported until it is asked for.
_EXPORTS = {
    "load_config": "searchrl.config",
    "load_qa": "searchrl.data.loaders",
    "QAExample": "searchrl.data.records",
    "build_index": "searchrl.retrieval.index",
    "load_index": "searchrl.retrieval.index",
    "get_protocol": "searchrl.protocols",
    "load_policy": "searchrl.models",
    "make_generator": "searchrl.generation",
    "RolloutEngine": "searchrl.rollout.engine",
    "RolloutLimits": "searchrl.rollout.limits",
    "Trajectory": "searchrl.rollout.trajectory",
    "read_trajectories": "searchrl.rollout.record",
    "Trainer": "searchrl.rl.trainer",
    "evaluate": "searchrl.eval.harness",
    "run_from_config": "searchrl.eval.harness",
    "write_viewer": "searchrl.viz.viewer",
}

__all__ = ["__version__", *_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
