"""The stages of a run, as typed functions of a :class:`~searchrl.config.RunConfig` (plus explicit arguments).

``searchrl run`` (:mod:`searchrl.runner`), ``searchrl demo`` and the single-stage commands call these, so a stage
does the same whichever way it is started:

- data: :func:`synth_world`, :func:`split_questions`, :func:`build_index_for`, :func:`oracle_data` /
  :func:`write_oracle_data`, :func:`write_text_data`, :func:`rejection_sampling`, :func:`difficulty_selection`;
- training: :func:`run_sft`, :func:`build_trainer` / :func:`run_train`;
- evaluation: :func:`evaluation`.
"""

from searchrl.stages.data import (
    build_index_for,
    oracle_data,
    split_questions,
    synth_world,
    write_oracle_data,
    write_text_data,
)
from searchrl.stages.evaluate import evaluation
from searchrl.stages.sampling import Teacher, difficulty_selection, rejection_sampling
from searchrl.stages.train import build_trainer, run_sft, run_train, sft_examples

__all__ = [
    "Teacher",
    "build_index_for",
    "build_trainer",
    "difficulty_selection",
    "evaluation",
    "oracle_data",
    "rejection_sampling",
    "run_sft",
    "run_train",
    "sft_examples",
    "split_questions",
    "synth_world",
    "write_oracle_data",
    "write_text_data",
]
