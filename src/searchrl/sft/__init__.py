"""Supervised fine-tuning: :class:`SFTTrainer` on :class:`SFTExample` records, and the pipelines that make them (oracle
trajectories, text trajectories, rejection sampling, RAG-R1's step slices, difficulty selection).

Names are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searchrl._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see (they do not run __getattr__)
    from searchrl.sft.attempts import AttemptLog as AttemptLog
    from searchrl.sft.attempts import sample_attempts as sample_attempts
    from searchrl.sft.oracle import oracle_trajectories as oracle_trajectories
    from searchrl.sft.pipelines import rejection_sample as rejection_sample
    from searchrl.sft.pipelines import select_answerable as select_answerable
    from searchrl.sft.pipelines import select_by_attempts as select_by_attempts
    from searchrl.sft.pipelines import slice_steps as slice_steps
    from searchrl.sft.pipelines import teacher_sft_examples as teacher_sft_examples
    from searchrl.sft.text_data import text_trajectories as text_trajectories
    from searchrl.sft.text_data import text_trajectory as text_trajectory
    from searchrl.sft.trainer import SFTTrainer as SFTTrainer
    from searchrl.sft.types import SFTExample as SFTExample

#: name -> the module that defines it (this package's, or a layer below it)
_EXPORTS = {
    "SFTTrainer": "searchrl.sft.trainer",
    "SFTExample": "searchrl.sft.types",
    "oracle_trajectories": "searchrl.sft.oracle",
    "AttemptLog": "searchrl.sft.attempts",
    "sample_attempts": "searchrl.sft.attempts",
    "rejection_sample": "searchrl.sft.pipelines",
    "slice_steps": "searchrl.sft.pipelines",
    "teacher_sft_examples": "searchrl.sft.pipelines",
    "select_by_attempts": "searchrl.sft.pipelines",
    "select_answerable": "searchrl.sft.pipelines",
    "text_trajectory": "searchrl.sft.text_data",
    "text_trajectories": "searchrl.sft.text_data",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
