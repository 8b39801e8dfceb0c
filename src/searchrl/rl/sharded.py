"""Whole weights and optimizer state of a model whose parameters FSDP2 shards over several processes, through
``torch.distributed.checkpoint.state_dict``. Gathering is a collective: every process calls these functions
together, and only the main process then writes. A model that is not sharded goes through ``state_dict`` /
``load_state_dict`` as usual, with no collective."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from searchrl.generation.decode_step import sharded

__all__ = ["full_weights", "load_full_weights", "full_optimizer_state", "load_full_optimizer_state", "sharded"]


def _options(**kw: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_weights(model: nn.Module, everywhere: bool = False) -> dict[str, torch.Tensor]:
    """``model``'s whole weights on the CPU: on the main process only (``{}`` elsewhere), or on every process with
    ``everywhere`` (a generator that keeps its own copy of the weights on each)."""
    if not sharded(model):
        return {k: v.detach() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=not everywhere))


def load_full_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> Any:
    """Whole weights (as :func:`full_weights` gives them, read on every process) into ``model``, each process
    keeping its shard; returns the missing and unexpected keys, for the caller to check (an output head tied to the
    embeddings may be absent, as ``save_pretrained`` leaves it out)."""
    if not sharded(model):
        return model.load_state_dict(weights, strict=False)
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    return set_model_state_dict(model, weights, options=_options(strict=False))


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state (sharded moments gathered, on the main process); its own ``state_dict``
    when ``model`` is not sharded."""
    if not sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, _inner(optimizer), options=_options(cpu_offload=True))


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    if not sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, _inner(optimizer), state, options=_options())


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's wrapper."""
    return getattr(optimizer, "optimizer", optimizer)
