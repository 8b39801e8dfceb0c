"""sft.val_fraction holds out whole trajectories: the step-level samples of one trajectory share their context, so
one on each side would make the validation loss optimistic."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from searchrl.config import load_config
from searchrl.sft.trainer import SFTTrainer, fit_length
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer


def test_validation_holds_out_whole_trajectories(tmp_path: Path) -> None:
    steps = [dataclasses.replace(e, source_uid=f"t{i // 3}") for i, e in enumerate(letter_sft_examples(15))]
    trainer = SFTTrainer(load_config(None, ["sft.val_fraction=0.2"]), tiny_model(), tokenizer(), steps, tmp_path)
    held, trained = {e.source_uid for e in trainer.val}, {e.source_uid for e in trainer.examples}
    assert len(trainer.val) == 3 and len(held) == 1 and not held & trained  # one trajectory of 3 steps
    assert len(trainer.examples) == 12


def test_a_cut_example_keeps_its_trajectory() -> None:
    ex = dataclasses.replace(letter_sft_examples(1)[0], source_uid="t7")
    cut = fit_length(ex, len(ex.prompt_ids) + 2)
    assert cut is not None and len(cut.response_ids) == 2 and cut.source_uid == "t7"


def test_sft_under_several_processes_is_one_line_naming_the_fix(monkeypatch, tmp_path: Path) -> None:
    """Each process would train its own copy of the model into the same directory."""
    import pytest

    from searchrl.runner import run_pipeline
    from searchrl.stages import run_sft

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="SFT runs in one process: run `searchrl sft` .* without accelerate launch"):
        run_sft(load_config("demo"), "unused")
    # a pipeline stops before its first stage: every process would run every stage into the same directory
    with pytest.raises(ValueError, match="searchrl run drives its stages from one process") as err:
        run_pipeline(load_config("demo"), tmp_path / "run")
    assert not (tmp_path / "run" / "coldstart").exists() and "\n" not in str(err.value)


def test_with_validation_final_appears_only_when_training_ends(tmp_path: Path, monkeypatch) -> None:
    """The best epoch so far is kept aside (``best``), and becomes ``final`` at the end: a run stopped after its first
    epoch leaves no complete-looking but under-trained ``final``."""
    import pytest

    steps = [dataclasses.replace(e, source_uid=f"t{i // 3}") for i, e in enumerate(letter_sft_examples(15))]
    cfg = load_config(None, ["sft.val_fraction=0.2", "sft.epochs=2", "sft.warmup_steps=0"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), steps, tmp_path)
    real, calls = trainer.validation_loss, []

    def stop_in_the_second_epoch():
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(trainer, "validation_loss", stop_in_the_second_epoch)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert (tmp_path / "best" / "config.json").exists() and not (tmp_path / "final").exists()
    done = SFTTrainer(cfg, tiny_model(), tokenizer(), steps, tmp_path / "whole")
    done.train()
    assert (tmp_path / "whole" / "final" / "config.json").exists() and not (tmp_path / "whole" / "best").exists()
