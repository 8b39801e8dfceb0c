"""SearchRL: train language models to reason with a search engine through reinforcement learning.

The names a notebook needs are here, each imported on first use (``import searchrl`` loads neither torch nor
transformers)::

    import searchrl

    cfg = searchrl.load_config("search_r1_grpo", ["retrieval.index=my-index"])
    engine = searchrl.RolloutEngine.from_config(cfg)
    trajectories = engine.run(["Who directed 3000 Nights?"])
"""

from __future__ import annotations

from searchrl._lazy import lazy_exports

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
