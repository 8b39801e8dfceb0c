"""Supervised fine-tuning: :class:`SFTTrainer` on :class:`SFTExample` records, and the pipelines that make them (oracle
trajectories, rejection sampling, RAG-R1's step slices, difficulty selection).

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from searchrl._lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
