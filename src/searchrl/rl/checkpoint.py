"""An RL checkpoint on disk: ``<dir>/model`` (the policy, or a LoRA policy's adapters only, with its tokenizer) and
``<dir>/trainer_state.pt`` (optimizer, scheduler and loop state, and the random generators' states), written
atomically: a sibling temp dir renamed over the old checkpoint."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from searchrl.models import portable_tokenizer_config
from searchrl.tuning import load_policy_weights
from searchrl.utils import atomic_dir, restore_interrupted

STATE_FILE = "trainer_state.pt"


def has_checkpoint(path: Path) -> bool:
    """A whole checkpoint at ``path`` (one a save interrupted between its renames left behind is restored first)."""
    restore_interrupted(path)
    return (path / STATE_FILE).exists()


@dataclass
class TrainState:
    """Where the RL loop is: saved in every checkpoint, restored on resume."""

    step: int = 0
    data_epoch: int = 0
    data_pos: int = 0
    kl_coef: float | None = None  # the KL controller's coefficient (adaptive control changes it step by step)


def save_checkpoint(path: Path, policy, tokenizer, state: dict[str, Any]) -> None:
    """The policy (and tokenizer) under ``path/model``; ``state`` plus the random generators' states beside it."""
    with atomic_dir(path) as tmp:
        policy.save_pretrained(tmp / "model", safe_serialization=True)
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(tmp / "model")
            portable_tokenizer_config(tmp / "model")
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        torch.save({**state, "rng": rng}, tmp / STATE_FILE)


def load_checkpoint(path: Path, policy) -> dict[str, Any]:
    """Loads the saved weights into ``policy`` and restores the random generators; the saved ``state``."""
    if not has_checkpoint(path):
        raise FileNotFoundError(f"no checkpoint at {path}; run without --resume to start fresh")
    load_policy_weights(policy, path / "model")
    state = torch.load(path / STATE_FILE, weights_only=False)
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    return state
