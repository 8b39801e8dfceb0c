"""An interrupted SFT run goes on from its checkpoint: the same batches in the same order, the same final weights
as a run never stopped, each step logged once; a SIGTERM saves a checkpoint at the step's end and exits 143."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.sft.trainer import SFTTrainer
from searchrl.storage import DiskFull
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer
from searchrl.utils import StopRequested

SETTINGS = ["sft.epochs=2", "sft.batch_size=4", "sft.warmup_steps=2", "sft.lr_schedule=cosine", "sft.save_every=3"]


def _trainer(out: Path, *extra: str, n: int = 20) -> SFTTrainer:
    steps = [dataclasses.replace(e, source_uid=f"t{i // 2}") for i, e in enumerate(letter_sft_examples(n))]
    torch.manual_seed(0)
    return SFTTrainer(load_config(None, [*SETTINGS, *extra]), tiny_model(), tokenizer(), steps, out)


def _steps(out: Path) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], "val" if "val_loss" in r else "train") for r in rows]


def _weights(trainer: SFTTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize(
    "extra",
    [(), ("sft.val_fraction=0.2",), ("model.lora.r=4", "model.lora.dropout=0.0")],
    ids=["plain", "validation", "lora"],
)
def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path: Path, extra: tuple[str, ...]) -> None:
    whole = _trainer(tmp_path / "whole", *extra)
    whole.train()
    stopped = _trainer(tmp_path / "cut", *extra)
    calls = {"n": 0}
    real_step = stopped.opt.step

    def step_then_stop(*args, **kwargs):  # dies in its 5th step: step 4 was logged after the checkpoint of step 3
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    stopped.opt.step = step_then_stop
    with pytest.raises(KeyboardInterrupt):
        stopped.train()
    assert (tmp_path / "cut" / "checkpoint").is_dir() and not (tmp_path / "cut" / "final").exists()
    assert [s for s, kind in _steps(tmp_path / "cut") if kind == "train"] == [1, 2, 3, 4]
    resumed = _trainer(tmp_path / "cut", *extra)
    resumed.train(resume=True)
    for k, v in _weights(whole).items():
        torch.testing.assert_close(_weights(resumed)[k], v, rtol=0, atol=1e-6, msg=k)
    assert _steps(tmp_path / "cut") == _steps(tmp_path / "whole")  # every step once, validations once per epoch
    assert not (tmp_path / "cut" / "checkpoint").exists()  # the final model is written: nothing to go on from


def test_a_sigterm_saves_the_step_and_says_how_to_go_on(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "sft.save_every=0")
    real_step, calls = trainer.opt.step, {"n": 0}

    def step_then_signal(*args, **kwargs):
        out = real_step(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at once; the run stops at the end of this step
        return out

    trainer.opt.step = step_then_signal
    with pytest.raises(StopRequested, match=r"at SFT step 3 of 10, checkpoint in .*searchrl sft --resume") as err:
        trainer.train()
    assert err.value.code == 143 and [s for s, _ in _steps(tmp_path)] == [1, 2, 3]
    resumed = _trainer(tmp_path, "sft.save_every=0")
    assert [m["step"] for m in resumed.train(resume=True)] == list(range(4, 11))
    assert (tmp_path / "final" / "config.json").exists()


def test_sft_resume_needs_a_checkpoint_made_with_the_same_settings(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchrl.cli import app
    from searchrl.config import ConfigError, dump_config

    args = ["sft", "--recipe", "demo", "--out", str(tmp_path), "--resume"]
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, ConfigError) and "no checkpoint at" in str(res.exception)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    dump_config(load_config("demo", ["sft.lr=1e-3"]), tmp_path / "config.yaml")
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, ConfigError) and "settings differ from the checkpoint's (sft.lr)" in str(
        res.exception
    )


def test_a_sigterm_while_the_final_model_is_written_lets_it_finish(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "sft.save_every=0")
    real_save = trainer.save

    def signal_then_save(path: Path) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        real_save(path)

    trainer.save = signal_then_save
    assert trainer.train()[-1]["step"] == 10  # no StopRequested: the run had nothing left but this
    assert (tmp_path / "final" / "config.json").exists() and not (tmp_path / "final.tmp").exists()


def test_changed_data_or_a_fresh_run_never_goes_on_from_a_stopped_runs_checkpoint(tmp_path: Path) -> None:
    first = _trainer(tmp_path)
    real_step, calls = first.opt.step, {"n": 0}

    def step_then_stop(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    first.opt.step = step_then_stop
    with pytest.raises(KeyboardInterrupt):
        first.train()
    with pytest.raises(ValueError, match="the SFT examples differ from the stopped run's"):
        _trainer(tmp_path, n=24).train(resume=True)  # the data file was edited in place
    fresh = _trainer(tmp_path, "sft.save_every=0")
    fresh.opt.step = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)  # dies before any save of its own
    with pytest.raises(KeyboardInterrupt):
        fresh.train()
    assert not (tmp_path / "checkpoint").exists()  # the first run's is gone: a --resume cannot take it for this one


def test_a_fresh_run_leaves_no_checkpoint_cut_between_its_renames_to_go_on_from(tmp_path: Path) -> None:
    """A save stopped between its two renames leaves the whole previous checkpoint at checkpoint.old, which a resume
    puts back: a fresh run must remove it too, or a --resume after the fresh run stopped went on from the earlier
    run's weights and data position as if they were this run's."""
    from searchrl.rl.checkpoint import has_checkpoint

    first = _trainer(tmp_path)
    first.opt.step = _stop_at(first.opt.step, 4)
    with pytest.raises(KeyboardInterrupt):
        first.train()
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")  # the next save stopped between its renames
    fresh = _trainer(tmp_path, "sft.save_every=0")
    fresh.opt.step = _stop_at(fresh.opt.step, 1)  # dies before any save of its own
    with pytest.raises(KeyboardInterrupt):
        fresh.train()
    assert not has_checkpoint(tmp_path / "checkpoint")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _trainer(tmp_path, "sft.save_every=0").train(resume=True)


def _stop_at(real_step, n: int):
    """``opt.step`` that raises KeyboardInterrupt at its ``n``-th call (a run killed in that step)."""
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    return step


def test_a_sigterm_during_a_validation_stops_after_it(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "sft.val_fraction=0.2", "sft.epochs=3", "sft.save_every=0")
    real = trainer.validation_loss

    def signal_during_validation() -> float:
        os.kill(os.getpid(), signal.SIGTERM)
        return real()

    trainer.validation_loss = signal_during_validation
    with pytest.raises(StopRequested, match="after SFT epoch 0"):
        trainer.train()
    resumed = _trainer(tmp_path, "sft.val_fraction=0.2", "sft.epochs=3", "sft.save_every=0")
    history = resumed.train(resume=True)
    assert {m["epoch"] for m in history} == {1, 2} and (tmp_path / "final" / "config.json").exists()
    assert [s for s, kind in _steps(tmp_path) if kind == "val"] == [4, 8, 12]  # each epoch's validation once


def test_a_full_disk_while_saving_keeps_the_last_checkpoint_to_go_on_from(tmp_path: Path, monkeypatch) -> None:
    """The save of step 6 runs out of space: one line naming the checkpoint, which still holds step 3 (nothing
    half-written beside it), and the run resumed from it ends where an uninterrupted one does."""
    whole = _trainer(tmp_path / "whole")
    whole.train()
    stopped, real_save = _trainer(tmp_path / "cut"), torch.save

    def full_at_step_6(obj, *args, **kwargs):
        if obj.get("sft", {}).get("step") == 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_at_step_6)
    with pytest.raises(DiskFull) as err:
        stopped.train()
    checkpoint = tmp_path / "cut" / "checkpoint"
    assert str(err.value) == (
        f"cannot write {checkpoint}: the disk is full (no space left on it); {checkpoint} keeps its previous "
        "contents: free some space, then run again"
    )
    assert sorted(p.name for p in (tmp_path / "cut").iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    monkeypatch.undo()
    resumed = _trainer(tmp_path / "cut")
    resumed.train(resume=True)
    for k, v in _weights(whole).items():
        torch.testing.assert_close(_weights(resumed)[k], v, rtol=0, atol=1e-6, msg=k)
    assert _steps(tmp_path / "cut") == _steps(tmp_path / "whole")
