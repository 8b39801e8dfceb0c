"""Supervised fine-tuning: :class:`SFTTrainer` on :class:`SFTExample` records, and the pipelines that make them (oracle
trajectories, rejection sampling, RAG-R1's step slices, difficulty selection).

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

#: name -> the module that defines it (this package's, or a layer below it)
_EXPORTS = {
    "SFTTrainer": "searchrl.sft.trainer",
    "SFTExample": "searchrl.sft.types",
    "oracle_trajectories": "searchrl.sft.oracle",
    "rejection_sample": "searchrl.sft.pipelines",
    "slice_steps": "searchrl.sft.pipelines",
    "teacher_sft_examples": "searchrl.sft.pipelines",
    "select_by_attempts": "searchrl.sft.pipelines",
    "select_answerable": "searchrl.sft.pipelines",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'searchrl.sft' has no attribute {name!r}")


def __dir__() -> list[str]:  # tab completion: the exports and submodules, not this file's own imports
    return sorted({*globals(), *_EXPORTS} - {"annotations", "importlib", "Any"})
