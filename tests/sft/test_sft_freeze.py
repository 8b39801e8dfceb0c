"""sft.freeze_layers: the embeddings and the bottom blocks keep their weights, the blocks above them learn."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.sft.trainer import SFTTrainer
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer
from searchrl.tuning import freeze_bottom


def _blocks(model) -> torch.nn.ModuleList:
    return next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList))


def test_sft_with_frozen_bottom_blocks_trains_only_the_blocks_above(tmp_path: Path) -> None:
    model = tiny_model()
    n_blocks = len(_blocks(model))
    assert n_blocks >= 2
    overrides = ["sft.lr=1e-2", "sft.batch_size=4", "sft.warmup_steps=0", f"sft.freeze_layers={n_blocks - 1}"]
    cfg = load_config(None, overrides)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = SFTTrainer(cfg, model, tokenizer(), letter_sft_examples(8), tmp_path)
    hist = trainer.train()
    assert len(hist) == 2
    after = dict(trainer.model.named_parameters())
    top = f".{n_blocks - 1}."
    moved = {n for n in before if not torch.equal(before[n], after[n].detach())}
    frozen = {n for n, p in after.items() if not p.requires_grad}
    assert any(top in n for n in moved) and not moved & frozen
    assert frozen == {n for n in after if "embed" in n or any(f".{i}." in n for i in range(n_blocks - 1))}
    assert all(p.grad is None for n, p in after.items() if n in frozen)
    emb = trainer.model.get_input_embeddings().weight
    assert not emb.requires_grad


def test_freeze_layers_rejects_freezing_every_block_and_lora() -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match="freeze fewer"):
        freeze_bottom(model, len(_blocks(model)))
    cfg = load_config(None, ["sft.freeze_layers=1", "model.lora.r=4"])
    with pytest.raises(ValueError, match="set one of them"):
        SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(8), "unused")
