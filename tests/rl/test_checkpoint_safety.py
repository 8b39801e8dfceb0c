"""An RL checkpoint's trainer state is read with torch's weights-only loader: a state file that would run code when
unpickled is refused with one line, and the states SearchRL writes (now and before) still restore every random
generator exactly."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from searchrl.config import ConfigError
from searchrl.rl.checkpoint import load_checkpoint, save_checkpoint
from searchrl.rl.run_dir import STATE_FILE
from searchrl.testing import tiny_model, tokenizer


class _RunsCode:
    """Unpickled, it would create a file: what a tampered checkpoint could do with any command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_a_state_that_would_run_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "ckpt", tiny_model(), tokenizer(), {"train_state": {}})
    marker = tmp_path / "pwned"
    torch.save({"train_state": {}, "rng": _RunsCode(marker)}, tmp_path / "ckpt" / STATE_FILE)
    with pytest.raises(ConfigError, match="safe checkpoint loader does not rebuild .*mkdir") as err:
        load_checkpoint(tmp_path / "ckpt", tiny_model())
    assert not marker.exists()
    assert "\n" not in str(err.value)


def test_saved_generators_restore_exactly_from_plain_values(tmp_path: Path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_checkpoint(tmp_path / "ckpt", tiny_model(), tokenizer(), {"train_state": {"step": 4}})
    expected = _draws()
    numpy_state = torch.load(tmp_path / "ckpt" / STATE_FILE, weights_only=True)["rng"]["numpy"]
    assert isinstance(numpy_state[1], list)  # no array: nothing to allow beyond plain values
    _draws()
    state = load_checkpoint(tmp_path / "ckpt", tiny_model())
    assert state["train_state"] == {"step": 4}
    assert _draws() == expected


def test_a_state_written_with_numpy_arrays_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before held NumPy's random state as it comes, an array: allowed by name."""
    save_checkpoint(tmp_path / "ckpt", tiny_model(), tokenizer(), {"train_state": {}})
    np.random.seed(5)
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    torch.save({"train_state": {"step": 2}, "rng": rng}, tmp_path / "ckpt" / STATE_FILE)
    expected = _draws()
    _draws()
    assert load_checkpoint(tmp_path / "ckpt", tiny_model())["train_state"] == {"step": 2}
    assert _draws() == expected
