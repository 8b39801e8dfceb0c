"""The model directory a run leaves (``final``, ``models/step_<k>``, a checkpoint's ``model``) is usable outside
SearchRL: plain transformers loads it, every file reads as the others do, and a LoRA run's merged copy is the same
files a full fine-tune writes."""

from __future__ import annotations

import stat
from pathlib import Path

import torch
from safetensors import safe_open

from searchrl.config import load_config
from searchrl.rl.checkpoint import save_checkpoint
from searchrl.testing import tiny_model, tokenizer
from searchrl.tuning import save_merged, wrap_lora


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_saved_weights_can_be_read_by_whoever_reads_the_other_files(tmp_path: Path) -> None:
    """safetensors writes its file 0600 whatever the umask: another user (a vLLM server, a container) would see the
    config but fail on the weights."""
    save_merged(tiny_model(), tokenizer(), tmp_path / "final")
    save_checkpoint(tmp_path / "checkpoint", tiny_model(), tokenizer(), {})
    for model_dir in (tmp_path / "final", tmp_path / "checkpoint" / "model"):
        assert _mode(model_dir / "model.safetensors") == _mode(model_dir / "config.json"), model_dir
    assert not list(tmp_path.rglob(".umask-probe"))


def test_a_lora_run_saves_the_merged_model_as_a_full_fine_tune_does(tmp_path: Path) -> None:
    """The merged copy shares no memory between a tied output head and the embeddings; the head must not be
    written a second time, and the directory loads without peft and computes what the adapted model does."""
    from transformers import AutoModelForCausalLM

    cfg = load_config(None, ["model.lora.r=4"])
    model = wrap_lora(tiny_model(), cfg.model.lora)
    torch.manual_seed(0)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)  # trained adapters: B is no longer zero
    save_merged(model, tokenizer(), tmp_path / "lora")
    save_merged(tiny_model(), tokenizer(), tmp_path / "full")
    keys = {}
    for name in ("lora", "full"):
        with safe_open(tmp_path / name / "model.safetensors", "pt") as f:
            keys[name] = set(f.keys())
    assert keys["lora"] == keys["full"] and "lm_head.weight" not in keys["lora"]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "lora")
    ids = torch.tensor([[5, 17, 42, 99]])
    model.eval()  # no adapter dropout
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(input_ids=ids).logits)
