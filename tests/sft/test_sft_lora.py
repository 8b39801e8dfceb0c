"""LoRA SFT: saving a model mid-run (the best validation epoch) leaves the adapters attached and training."""

from __future__ import annotations

from pathlib import Path

import torch

from searchrl.config import load_config
from searchrl.sft.trainer import SFTTrainer
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer


def test_lora_sft_keeps_training_attached_adapters_after_a_save(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        [
            "sft.lr=1e-2",
            "sft.epochs=3",
            "sft.batch_size=4",
            "sft.warmup_steps=0",
            "sft.val_fraction=0.2",
            "model.lora.r=4",
            "model.lora.dropout=0.0",
        ],
    )
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(10), tmp_path)
    lora = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    snapshots: list[dict[str, torch.Tensor]] = []
    save = trainer.save

    def save_and_snapshot(path: Path) -> None:
        save(path)
        snapshots.append({n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n})

    trainer.save = save_and_snapshot  # type: ignore[method-assign]
    hist = trainer.train()
    assert len([h for h in hist if "val_loss" in h]) == 3 and snapshots
    # the adapters are still attached, still the optimizer's parameters, and moved after the first save
    live = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert live.keys() == lora.keys() and all(live[n] is lora[n] for n in lora)
    assert max((live[n] - snapshots[0][n]).abs().max().item() for n in lora) > 1e-4
    # the saved model is the merged weights of the best epoch and loads without peft
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert not any("lora" in k for k in saved.state_dict())
    trainer.model.load_state_dict(snapshots[-1], strict=False)
    from searchrl.tuning import full_state_dict

    merged = full_state_dict(trainer.model)
    for k, v in saved.state_dict().items():
        torch.testing.assert_close(v, merged[k], msg=k)


def test_merged_weights_leave_a_bf16_policy_bit_for_bit_as_it_was() -> None:
    """Merging then unmerging adapters rounds the base weights in bf16: every SFT save and every RL weight push
    would move the frozen weights. The live model must be left exactly as it was."""
    from searchrl.tuning import full_state_dict, wrap_lora

    cfg = load_config(None, ["model.lora.r=4"])
    model = wrap_lora(tiny_model().to(torch.bfloat16), cfg.model.lora)
    torch.manual_seed(0)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)  # trained adapters: B is no longer zero
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        merged = full_state_dict(model)
    after = model.state_dict()
    assert [k for k in before if not torch.equal(before[k], after[k])] == []
    q = model.get_base_model().model.layers[0].self_attn.q_proj
    want = q.base_layer.weight.float() + q.get_delta_weight("default").float()
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"].float(), want, rtol=0, atol=1e-3)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"], q.base_layer.weight)
