"""An RL run's output directory: what a run writes there, and what keeps a fresh run from mixing with an earlier one
(logs appended to, an old checkpoint that a later resume would take)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from searchrl.utils import restore_interrupted

#: the fingerprint of the weights an RL run started from (a resume checks it is the same model)
INIT_FILE = "init_from.json"
#: fingerprints of the training question file an RL run started with (a resume checks it is unchanged)
INPUTS_FILE = "inputs.json"
#: a checkpoint's optimizer, scheduler, loop and random states, beside its ``model/`` (its presence: a whole one)
STATE_FILE = "trainer_state.pt"


#: what an RL run writes into its output directory (``tb``: tensorboard; ``*.old`` / ``*.tmp``: a stopped save).
RUN_OUTPUTS = (
    "checkpoint checkpoint.old checkpoint.tmp final final.old final.tmp metrics.jsonl rollouts.jsonl evals tb "
    f"{INIT_FILE} {INPUTS_FILE} config.yaml run_info.jsonl models"
).split()


def earlier_run(out: Path) -> list[str]:
    """What an earlier RL run left in ``out`` that a fresh one would mix with its own: a checkpoint (which a later
    ``--resume`` would take), a model, logs appended to."""
    return [name for name in ("checkpoint", "final", "metrics.jsonl", "rollouts.jsonl") if (out / name).exists()]


def clear_run(out: Path) -> None:
    """Remove an earlier RL run's outputs from ``out`` (other files there are left alone). Under a multi-process
    launch only the first process removes them (``RANK``), so no two remove the same file."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    for name in RUN_OUTPUTS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


#: how to go on from a refused fresh run, said to a Python caller: resuming it, and the other ways
RESUME, FIX = "resume=True (--resume)", "start over with force=True (--force; its outputs are removed)"


def has_checkpoint(path: Path) -> bool:
    """A whole checkpoint at ``path`` (one a save interrupted between its renames left behind is restored first)."""
    restore_interrupted(path)
    return (path / STATE_FILE).exists()


def check_fresh(
    out: Path, force: bool, fix: str = f"{FIX}, or write to another training.output_dir", resume: str = RESUME
) -> None:
    """A fresh run into ``out`` holding an earlier one would mix with it (logs appended to, an old checkpoint a later
    resume takes): refused, or with ``force`` the earlier run's outputs are removed. The refusal offers ``resume``
    only when the earlier run left a checkpoint (one stopped before its first save has none to go on from)."""
    if not (found := earlier_run(out)):
        return
    if not force:
        saved = has_checkpoint(out / "checkpoint")
        how = f"continue it with {resume}, {fix}" if saved else f"it saved no checkpoint to continue from: {fix}"
        raise FileExistsError(f"{out} holds an earlier run ({', '.join(found)}); {how}")
    clear_run(out)
