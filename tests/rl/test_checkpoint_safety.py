"""An RL checkpoint's trainer state is read with torch's weights-only loader: a state file that would run code when
unpickled is refused with one line, and the states SearchRL writes (now and before) still restore every random
generator exactly. A save that fails (a full disk: one line saying so) leaves the previous checkpoint whole and
nothing half-written for a resume to take."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from searchrl import storage
from searchrl.config import ConfigError, load_config
from searchrl.data.records import QAExample
from searchrl.rl.checkpoint import load_checkpoint, save_checkpoint
from searchrl.rl.run_dir import STATE_FILE
from searchrl.storage import DiskFull, atomic_dir, disk_full
from searchrl.testing import letters_trainer, tiny_model, tokenizer


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


def _rl_trainer(out: Path):
    overrides = [
        "algorithm.name=grpo",
        "training.steps=3",
        "training.prompts_per_step=2",
        f"training.output_dir={out}",
        "training.save_every=1",
        "training.save_at_end=false",
        "training.tensorboard=false",
        "rollout.group_size=4",
        "rollout.max_new_tokens=8",
        "rollout.max_turns=1",
        "rollout.force_answer=false",
    ]
    return letters_trainer(load_config(None, overrides), [QAExample(f"q{i}", f"letters {i}", ["x"]) for i in range(8)])


@pytest.mark.parametrize("how", ["oserror", "torch_zip_writer"])
def test_a_full_disk_while_saving_keeps_the_last_checkpoint_to_resume_from(
    tmp_path: Path, monkeypatch, how: str
) -> None:
    """The save of step 2 runs out of space (as Python's writes say it, or as torch.save's zip writer does, without
    saying why): one line naming the checkpoint and the full disk; the checkpoint of step 1 stays whole, nothing
    half-written beside it, and --resume goes on from it."""
    trainer, real_save = _rl_trainer(tmp_path), torch.save

    def full_at_step_2(obj, *args, **kwargs):
        if obj["train_state"]["step"] == 2:
            if how == "oserror":
                raise OSError(errno.ENOSPC, "No space left on device")
            monkeypatch.setattr(storage.shutil, "disk_usage", lambda _: SimpleNamespace(free=0))
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        return real_save(obj, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_at_step_2)
    with pytest.raises(DiskFull) as err:
        trainer.train()
    checkpoint = tmp_path / "checkpoint"
    assert str(err.value) == (
        f"cannot write {checkpoint}: the disk is full (no space left on it); {checkpoint} keeps its previous "
        "contents: free some space, then run again"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    monkeypatch.undo()
    assert load_checkpoint(checkpoint, tiny_model())["train_state"]["step"] == 1
    assert [m["step"] for m in _rl_trainer(tmp_path).train(resume=True)] == [2, 3]


def test_a_full_disk_is_recognised_however_a_library_says_it(tmp_path: Path, monkeypatch) -> None:
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path)
    safetensors = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    assert disk_full(safetensors, tmp_path)
    try:  # a library's own error raised from the OS's
        raise RuntimeError("write failed") from OSError(errno.ENOSPC, "No space left on device")
    except RuntimeError as err:
        assert disk_full(err, tmp_path)
    zip_writer = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    assert not disk_full(zip_writer, tmp_path)  # the disk has room: the write failed for another reason
    assert not disk_full(OSError(errno.EACCES, "Permission denied"), tmp_path)
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda _: SimpleNamespace(free=4096))
    assert disk_full(zip_writer, tmp_path) and not disk_full(ValueError("bad value"), tmp_path)


def test_a_save_that_fails_otherwise_leaves_the_previous_copy_and_nothing_half_written(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        (tmp / "weights").write_text("v1")
    with pytest.raises(KeyError), atomic_dir(target) as tmp:
        (tmp / "weights").write_text("v2, cut short")
        raise KeyError("a bug in the middle of a save")
    assert (target / "weights").read_text() == "v1" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
