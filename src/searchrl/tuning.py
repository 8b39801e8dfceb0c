"""What the RL and SFT trainers share about the model they train: LoRA wrapping, the learning-rate schedule, the merged
weights of a LoRA policy, saving a loadable model without touching the live one, and atomic directory writes."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from searchrl.config import LoraConfig
from searchrl.models import portable_tokenizer_config, shareable_files


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def wrap_lora(model: nn.Module, lora: LoraConfig | None) -> nn.Module:
    """``model`` with trainable LoRA adapters attached (``model.lora``), or ``model`` itself when ``lora`` is None."""
    if lora is None:
        return model
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    cfg = PeftLoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules)
    )
    return get_peft_model(model, cfg)


def freeze_bottom(model: nn.Module, n_layers: int) -> nn.Module:
    """Freeze the input embeddings and the first ``n_layers`` transformer blocks (in place). Nothing below block
    ``n_layers`` then needs a gradient, so autograd's backward stops there: with half the blocks frozen a step costs
    about 2/3 of full fine-tuning. A tied LM head is frozen with the embeddings."""
    if n_layers <= 0:
        return model
    n_total = getattr(model.config, "num_hidden_layers", None)
    blocks = next((m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n_total), None)
    if blocks is None or n_layers >= len(blocks):
        raise ValueError(f"freeze_layers={n_layers}: the model has {n_total} transformer blocks; freeze fewer")
    for module in [model.get_input_embeddings(), *blocks[:n_layers]]:
        for p in module.parameters():
            p.requires_grad_(False)
    return model


def warmup_schedule(
    opt: torch.optim.Optimizer, steps: int, total: int = 0, decay: str = "constant", min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate rises linearly over ``steps`` optimizer steps (the first step at ``1/steps``), then stays
    (``decay="constant"``) or falls to ``min_ratio`` of its peak at step ``total`` (0: to 0; OpenRLHF's
    ``cosine_with_min_lr``: 0.1), along a line (``"linear"``) or a half cosine (``"cosine"``); the last of ``total``
    steps runs at a little above the floor."""
    warm = max(steps, 0)
    if decay not in ("constant", "linear", "cosine"):
        raise ValueError(f"learning-rate decay {decay!r}: use constant, linear or cosine")

    def factor(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if decay == "constant" or total <= warm:
            return 1.0
        p = min(1.0, (s + 1 - warm) / (total + 1 - warm))  # the step after the peak is the first one lower
        f = 1.0 - p if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * p))
        return min_ratio + (1.0 - min_ratio) * f

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights under the base model's own names, LoRA adapters merged in. The live model is left as it
    was, bit for bit (adapters merged, copied, unmerged, then the adapted layers' own weights put back: in bf16 an
    unmerge rounds, and every save or weight push would move the frozen base weights), so training can go on."""
    if is_peft(model) and hasattr(model, "merge_adapter"):
        from peft.tuners.lora import LoraLayer

        adapted = [
            p
            for m in model.modules()
            if isinstance(m, LoraLayer)
            for p in m.get_base_layer().parameters(recurse=False)
        ]
        kept = [p.detach().clone() for p in adapted]
        model.merge_adapter()
        try:
            base = model.get_base_model()
            return {
                k.replace(".base_layer", ""): v.detach().clone()
                for k, v in base.state_dict().items()
                if "lora_" not in k
            }
        finally:
            model.unmerge_adapter()
            with torch.no_grad():
                for p, orig in zip(adapted, kept, strict=True):
                    p.copy_(orig)
    return {k: v.detach() for k, v in model.state_dict().items()}


def without_tied_copies(model: nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` (under the base model's names) without the second name of a tensor that ``model`` shares between
    two (an output head tied to the input embeddings) where both hold the same values, as ``save_pretrained`` leaves
    it out of a model's own weights: merged copies share no memory, so it would otherwise be written twice."""
    base = model.get_base_model() if is_peft(model) else model
    first: dict[int, str] = {}
    copies = {}
    # the same parameter under two names (by identity: an FSDP-sharded parameter has no plain storage to compare)
    for k, v in base.named_parameters(remove_duplicate=False):
        name = k.replace(".base_layer", "")
        if first.setdefault(id(v), name) != name:
            copies[name] = first[id(v)]
    same = {
        k for k, orig in copies.items() if k in weights and orig in weights and torch.equal(weights[k], weights[orig])
    }
    return {k: v for k, v in weights.items() if k not in same}


def save_merged(model: nn.Module, tokenizer, path: Path, weights: dict[str, torch.Tensor] | None = None) -> None:
    """Save a plain model (LoRA adapters merged into a copy of the weights) that ``from_pretrained`` loads; the live
    model keeps its adapters attached and trainable. ``weights``: the whole weights, gathered beforehand when they
    are sharded."""
    if is_peft(model):
        merged = without_tied_copies(model, full_state_dict(model))
        model.get_base_model().save_pretrained(path, state_dict=merged, safe_serialization=True)
    else:  # gathered weights hold a tied head's copy apart from the embeddings: written once, as a plain save does
        weights = None if weights is None else without_tied_copies(model, weights)
        model.save_pretrained(path, safe_serialization=True, state_dict=weights)
    shareable_files(path)
    if hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(path)
        portable_tokenizer_config(path)


def read_saved_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """The weights ``save_pretrained`` wrote into ``model_dir``: ``model.safetensors``, or the shards its
    ``model.safetensors.index.json`` lists (a large model)."""
    from safetensors.torch import load_file

    single, index = model_dir / "model.safetensors", model_dir / "model.safetensors.index.json"
    if single.exists():
        return load_file(str(single))
    if index.exists():
        import json

        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return {k: v for shard in shards for k, v in load_file(str(model_dir / shard)).items()}
    hint = (
        "the checkpoint holds LoRA adapters; set model.lora as when saved"
        if (model_dir / "adapter_model.safetensors").exists()
        else "the checkpoint is incomplete; resume from another or start afresh"
    )
    raise FileNotFoundError(f"{single} missing: {hint}")


def load_policy_weights(model: nn.Module, model_dir: Path, load_state=None) -> None:
    """Load weights saved by ``model.save_pretrained(model_dir)``: the adapters of a LoRA policy, all weights
    otherwise. Every key must match, so a checkpoint of another model fails loudly instead of loading nothing.
    ``load_state(model, weights)`` puts whole weights into the model (default ``load_state_dict``; FSDP-sharded
    weights: :func:`searchrl.rl.sharded.load_full_weights`); it returns the missing and unexpected keys."""
    from safetensors.torch import load_file

    if is_peft(model):
        from peft import set_peft_model_state_dict

        adapters = model_dir / "adapter_model.safetensors"
        if not adapters.exists():
            raise FileNotFoundError(f"{adapters} missing: the checkpoint was not saved from a LoRA run (model.lora)")
        res = set_peft_model_state_dict(model, load_file(str(adapters)))
        bad = [k for k in getattr(res, "unexpected_keys", []) if "lora_" in k]
        if bad:
            raise ValueError(f"{adapters}: adapter keys do not fit this model ({bad[:3]}); check model.lora")
        return
    tied = getattr(model.config, "tie_word_embeddings", False)
    weights = read_saved_weights(model_dir)
    check_fits(model, weights, f"{model_dir}", tied=tied)
    if load_state is None:
        model.load_state_dict(weights, strict=False)
        if tied:
            model.tie_weights()
    else:
        load_state(model, weights)


def check_fits(model: nn.Module, weights: dict[str, torch.Tensor], where: str, tied: bool = False) -> None:
    """Every weight ``model`` has is in ``weights`` with its shape, and nothing else (an output head tied to the
    embeddings may be absent): one line naming the first mismatches, before anything is loaded. Shapes are the
    whole tensors' also for FSDP-sharded parameters."""
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in own if k not in weights and not (tied and k.startswith("lm_head."))]
    unexpected = [k for k in weights if k not in own]
    shapes = [f"{k} {tuple(v.shape)} vs {own[k]}" for k, v in weights.items() if k in own and tuple(v.shape) != own[k]]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{where} does not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]}, other shapes "
            f"{shapes[:2]}); resume with the model the checkpoint was saved from"
        )
